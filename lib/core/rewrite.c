/* Editing the domain document: applying a plan and reverting it.
 *
 * Every element we add or remove is handled as a "unit": the element plus
 * the white-space text node in front of it.  Adding a unit copies the
 * indentation of its neighbour and removing one takes that text with it,
 * so a revert gives back the input's bytes, indentation included. */
#include "rewrite.h"

#include <inttypes.h>
#include <libxml/parser.h>
#include <libxml/chvalid.h>
#include <libxml/xmlsave.h>
#include <strings.h>

static bool is_ws_text(xmlNodePtr n) {
        if (!n || n->type != XML_TEXT_NODE || !n->content)
                return false;
        for (const xmlChar *c = n->content; *c; c++)
                if (*c != ' ' && *c != '\t' && *c != '\n' && *c != '\r')
                        return false;
        return true;
}

/* The indentation of element e: what follows the last newline of the
 * white space in front of it. */
static char *indent_of(xmlNodePtr e) {
        if (!is_ws_text(e->prev))
                return xstrdup("");
        const char *s = (const char *) e->prev->content;
        const char *nl = strrchr(s, '\n');
        return xstrdup(nl ? nl + 1 : s);
}

/* Remove element e from d's document (freed, or kept: domain_split()). */
static void unlink_unit(struct domain *d, xmlNodePtr e) {
        if (is_ws_text(e->prev)) {
                xmlNodePtr ws = e->prev;
                xmlUnlinkNode(ws);
                xmlFreeNode(ws);
        }
        domain_remove_node(d, e);
}

static void insert_unit_before(xmlNodePtr ref, xmlNodePtr e) {
        xmlNodePtr ws = is_ws_text(ref->prev) ? ref->prev : NULL;
        xmlAddPrevSibling(ws ? ws : ref, e);
        if (ws)
                xmlAddPrevSibling(e, xmlNewText(ws->content));
}

static void insert_unit_after(xmlNodePtr ref, xmlNodePtr e) {
        xmlNodePtr ws = is_ws_text(ref->prev) ? ref->prev : NULL;
        xmlAddNextSibling(ref, e);
        if (ws)
                xmlAddPrevSibling(e, xmlNewText(ws->content));
}

static xmlNodePtr last_element_child(xmlNodePtr parent) {
        xmlNodePtr last = NULL;
        for (xmlNodePtr c = parent->children; c; c = c->next)
                if (c->type == XML_ELEMENT_NODE)
                        last = c;
        return last;
}

static char *node_dump(xmlDocPtr doc, xmlNodePtr n) {
        xmlBufferPtr buf = xmlBufferCreate();
        if (!buf)
                abort();
        xmlNodeDump(buf, doc, n, 0, 0);
        char *r = xstrndup((const char *) xmlBufferContent(buf), (size_t) xmlBufferLength(buf));
        xmlBufferFree(buf);
        return r;
}

/* "k=v k=v" of every attribute, in order.  '%' and white space in a value
 * are %-encoded (libvirt never writes them, but the input may). */
static char *attrs_to_string(xmlNodePtr e) {
        struct strbuf b = {0};
        for (xmlAttrPtr a = e->properties; a; a = a->next) {
                xmlChar *v = xmlNodeListGetString(e->doc, a->children, 1);
                if (b.len)
                        strbuf_append(&b, " ");
                strbuf_printf(&b, "%s=", (const char *) a->name);
                for (const char *c = v ? (const char *) v : ""; *c; c++) {
                        if (*c == '%' || *c == ' ' || *c == '\t' || *c == '\n' || *c == '\r')
                                strbuf_printf(&b, "%%%02x", (unsigned char) *c);
                        else
                                strbuf_appendn(&b, c, 1);
                }
                xmlFree(v);
        }
        return strbuf_steal(&b);
}

static int hexval(char c) {
        return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static void remove_all_attrs(xmlNodePtr e) {
        while (e->properties)
                xmlRemoveProp(e->properties);
}

/* Is s UTF-8 made only of characters XML 1.0 allows (no U+FFFE, no
 * surrogates...)?  A value written back otherwise would not parse. */
static bool xml_text_allowed(const char *s) {
        const xmlChar *p = (const xmlChar *) s;
        while (*p) {
                int len = 4;
                int c = xmlGetUTF8Char(p, &len);
                if (c < 0 || len <= 0 || !xmlIsCharQ(c))
                        return false;
                p += len;
        }
        return true;
}

static int attrs_from_string(xmlNodePtr e, const char *s, char **ret_error) {
        _cleanup_free_ char *copy = xstrdup(s);
        remove_all_attrs(e);
        char *save = NULL;
        for (char *tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
                char *eq = strchr(tok, '=');
                if (!eq || eq == tok)
                        return set_error(ret_error, -EINVAL, "pcinuma mark: bad original-address '%s': the mark is refused and nothing was changed", s);
                *eq = 0;
                /* The mark is input too: only a real attribute name may come
                 * back, or a crafted mark could smuggle markup into the XML. */
                if (xmlValidateNCName((const xmlChar *) tok, 0) != 0)
                        return set_error(ret_error, -EINVAL, "pcinuma mark: bad attribute name in original-address '%s': the mark is refused and nothing was changed", s);
                char *v = eq + 1, *w = v;
                for (char *r = v; *r; r++) {
                        unsigned char c = (unsigned char) *r;
                        if (*r == '%' && hexval(r[1]) >= 0 && hexval(r[2]) >= 0) {
                                c = (unsigned char) (hexval(r[1]) * 16 + hexval(r[2]));
                                r += 2;
                        }
                        /* The value must come back as text XML 1.0 allows:
                         * a decoded control character (or NUL) would make
                         * the reverted domain XML that does not parse. */
                        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
                                return set_error(ret_error, -EINVAL,
                                                 "pcinuma mark: a control character in original-address '%s': the mark is refused and nothing was changed", s);
                        *w++ = (char) c;
                }
                *w = 0;
                if (!xml_text_allowed(v))
                        return set_error(ret_error, -EINVAL,
                                         "pcinuma mark: original-address '%s' does not decode to characters XML allows: the mark is refused and nothing was changed", s);
                xmlSetProp(e, (const xmlChar *) tok, (const xmlChar *) v);
        }
        return 0;
}

static void set_guest_address(xmlNodePtr addr, const struct pci_addr *a) {
        char v[16];
        remove_all_attrs(addr);
        xmlSetProp(addr, (const xmlChar *) "type", (const xmlChar *) "pci");
        snprintf(v, sizeof v, "0x%04x", a->domain);
        xmlSetProp(addr, (const xmlChar *) "domain", (const xmlChar *) v);
        snprintf(v, sizeof v, "0x%02x", a->bus);
        xmlSetProp(addr, (const xmlChar *) "bus", (const xmlChar *) v);
        snprintf(v, sizeof v, "0x%02x", a->slot);
        xmlSetProp(addr, (const xmlChar *) "slot", (const xmlChar *) v);
        snprintf(v, sizeof v, "0x%x", a->func);
        xmlSetProp(addr, (const xmlChar *) "function", (const xmlChar *) v);
}

/* Is attribute 'name' of n there and equal to 'value'?  (Read in place:
 * the lookups below run over every controller, for each one sought.) */
static bool prop_is(xmlNodePtr n, const char *name, const char *value) {
        _cleanup_free_ char *buf = NULL;
        const char *v = xml_prop_ref(n, name, &buf);
        return v && streq(v, value);
}

static xmlNodePtr find_controller_elem(xmlNodePtr devices, int index) {
        for (xmlNodePtr c = devices ? devices->children : NULL; c; c = c->next) {
                if (!xml_is(c, "controller") || !prop_is(c, "type", "pci"))
                        continue;
                _cleanup_free_ char *buf = NULL;
                const char *idx = xml_prop_ref(c, "index", &buf);
                uint64_t v;
                if (idx && parse_uint(idx, 0, 255, &v) == 0 && (int) v == index)
                        return c;
        }
        return NULL;
}

static bool elem_has_model(xmlNodePtr e, const char *model) {
        return model && prop_is(e, "model", model);
}

static int element_position(xmlNodePtr parent, xmlNodePtr e) {
        int pos = 0;
        for (xmlNodePtr c = parent->children; c; c = c->next) {
                if (c == e)
                        return pos;
                if (c->type == XML_ELEMENT_NODE)
                        pos++;
        }
        return -1;
}

static xmlNodePtr element_at(xmlNodePtr parent, int pos) {
        for (xmlNodePtr c = parent->children; c; c = c->next)
                if (c->type == XML_ELEMENT_NODE && pos-- == 0)
                        return c;
        return NULL;
}

static xmlNodePtr new_child(xmlDocPtr doc, xmlNodePtr parent, const char *name) {
        xmlNodePtr e = xmlNewDocNode(doc, NULL, (const xmlChar *) name, NULL);
        if (!e)
                abort();
        if (parent)
                xmlAddChild(parent, e);
        return e;
}

static void set_int_prop(xmlNodePtr e, const char *name, int v) {
        char buf[16];
        snprintf(buf, sizeof buf, "%d", v);
        xmlNewProp(e, (const xmlChar *) name, (const xmlChar *) buf);
}

/* Indentation: newline + indent, when the document is pretty. */
static void add_text(xmlNodePtr parent, const char *nl, const char *ind) {
        if (!*nl && !*ind)
                return;
        _cleanup_free_ char *t = xasprintf("%s%s", nl, ind);
        xmlAddChild(parent, xmlNewDocText(parent->doc, (const xmlChar *) t));
}

/* Insert the controllers after the last existing controller (libvirt
 * keeps controllers together), else after <emulator>, else first. */
static int add_controllers(struct domain *d, const struct plan *p, char **ret_error) {
        xmlNodePtr devices = d->devices;
        xmlNodePtr anchor = NULL;
        for (xmlNodePtr c = devices->children; c; c = c->next)
                if (xml_is(c, "controller"))
                        anchor = c;
        if (!anchor)
                anchor = xml_child(devices, "emulator");

        /* Indentation: that of the devices' children. */
        xmlNodePtr first = element_at(devices, 0);
        _cleanup_free_ char *ind = first ? indent_of(first) : xstrdup("");
        bool pretty = first && is_ws_text(first->prev);
        const char *nl = pretty ? "\n" : "";
        _cleanup_free_ char *ind2 = pretty ? xasprintf("%s  ", ind) : xstrdup("");
        _cleanup_free_ char *ind3 = pretty ? xasprintf("%s    ", ind) : xstrdup("");
        const char *ind1 = pretty ? ind : "";

        size_t n_new = p->n_pxbs + p->n_ports;
        for (size_t i = 0; i < n_new; i++) {
                /* Built with the node API: the paths topology writes dozens
                 * of controllers, and parsing each as a fragment
                 * (xmlParseInNodeContext) was a third of engine_plan's time. */
                xmlNodePtr e = new_child(d->doc, NULL, "controller");
                xmlNewProp(e, (const xmlChar *) "type", (const xmlChar *) "pci");
                struct pci_addr pa;
                bool multifunction = false;
                if (i < p->n_pxbs) {
                        const struct plan_pxb *x = &p->pxbs[i];
                        set_int_prop(e, "index", x->index);
                        xmlNewProp(e, (const xmlChar *) "model", (const xmlChar *) "pcie-expander-bus");
                        add_text(e, nl, ind2);
                        xmlNodePtr m = new_child(d->doc, e, "model");
                        xmlNewProp(m, (const xmlChar *) "name", (const xmlChar *) "pxb-pcie");
                        add_text(e, nl, ind2);
                        xmlNodePtr t = new_child(d->doc, e, "target");
                        set_int_prop(t, "busNr", x->bus_nr);
                        add_text(t, nl, ind3);
                        char cell[16];
                        snprintf(cell, sizeof cell, "%u", x->cell);
                        xmlNewTextChild(t, NULL, (const xmlChar *) "node", (const xmlChar *) cell);
                        add_text(t, nl, ind2);
                        pa = x->addr;
                } else {
                        const struct plan_port *port = &p->ports[i - p->n_pxbs];
                        set_int_prop(e, "index", port->index);
                        xmlNewProp(e, (const xmlChar *) "model", (const xmlChar *) port->model);
                        pa = (struct pci_addr) { .domain = 0, .bus = (uint8_t) port->parent_index, .slot = port->slot, .func = port->func };
                        multifunction = port->multifunction;
                }
                add_text(e, nl, ind2);
                xmlNodePtr a = new_child(d->doc, e, "address");
                set_guest_address(a, &pa);
                if (multifunction)
                        xmlNewProp(a, (const xmlChar *) "multifunction", (const xmlChar *) "on");
                add_text(e, nl, ind1);
                if (anchor)
                        insert_unit_after(anchor, e);
                else if (first)
                        insert_unit_before(first, e);
                else
                        xmlAddChild(devices, e);
                anchor = e;
        }
        return 0;
}

/* If c is a guest <address type='pci'>, parse it into *ret. */
static bool pci_address_of(xmlNodePtr c, struct pci_addr *ret) {
        return xml_is(c, "address") && prop_is(c, "type", "pci") && xml_parse_pci_address(c, ret) == 0;
}

/* Calls fn for every guest PCI <address> directly under a device. */
static void for_each_device_address(xmlNodePtr devices, void (*fn)(xmlNodePtr addr, const struct pci_addr *a, void *u), void *u) {
        for (xmlNodePtr n = devices->children; n; n = n->next) {
                if (n->type != XML_ELEMENT_NODE)
                        continue;
                for (xmlNodePtr c = n->children; c; c = c->next) {
                        struct pci_addr a;
                        if (pci_address_of(c, &a))
                                fn(c, &a, u);
                }
        }
}

/* The pcie.0 slots whose function 0 carries no multifunction attribute.
 * libvirt adds multifunction='on' to function 0 of any slot where it puts
 * more functions, and the root ports it puts in the index gaps we leave can
 * land there; on revert those slots get their attribute back off. */
static void note_single_function(xmlNodePtr addr, const struct pci_addr *a, void *u) {
        struct bitmap *slots = u;
        _cleanup_free_ char *mf = xml_prop(addr, "multifunction");
        if (a->domain == 0 && a->bus == 0 && a->func == 0 && !mf)
                bitmap_set(slots, a->slot);
}

static char *single_function_slots(xmlNodePtr devices) {
        struct bitmap slots = {0};
        for_each_device_address(devices, note_single_function, &slots);
        struct strbuf b = {0};
        for (int slot = bitmap_next(&slots, 0); slot >= 0; slot = bitmap_next(&slots, (unsigned) slot + 1))
                strbuf_printf(&b, "%s0x%02x", b.len ? " " : "", (unsigned) slot);
        bitmap_done(&slots);
        return strbuf_steal(&b);
}

static void unset_multifunction(xmlNodePtr addr, const struct pci_addr *a, void *u) {
        const struct bitmap *slots = u;
        if (a->domain == 0 && a->bus == 0 && a->func == 0 && bitmap_test(slots, a->slot))
                xmlUnsetProp(addr, (const xmlChar *) "multifunction");
}

static void clear_multifunction(xmlNodePtr devices, const char *slots_text) {
        struct bitmap slots = {0};
        _cleanup_free_ char *copy = xstrdup(slots_text);
        char *save = NULL;
        for (char *tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
                uint64_t slot;
                if (parse_uint(tok, 0, 31, &slot) == 0)
                        bitmap_set(&slots, (unsigned) slot);
        }
        for_each_device_address(devices, unset_multifunction, &slots);
        bitmap_done(&slots);
}

/* Add element e as the last element child of parent, indented one level
 * deeper than parent (or not at all in unindented XML).  For a parent with
 * no children yet the closing indentation is added too; remove_child_unit()
 * undoes both. */
static void append_child_unit(xmlNodePtr parent, xmlNodePtr e) {
        xmlNodePtr last = last_element_child(parent);
        if (last) {
                insert_unit_after(last, e);
                return;
        }
        bool pretty = is_ws_text(parent->prev);
        _cleanup_free_ char *ind = indent_of(parent);
        if (pretty) {
                _cleanup_free_ char *open = xasprintf("\n%s  ", ind);
                _cleanup_free_ char *close = xasprintf("\n%s", ind);
                xmlAddChild(parent, xmlNewText((const xmlChar *) open));
                xmlAddChild(parent, e);
                xmlAddChild(parent, xmlNewText((const xmlChar *) close));
        } else
                xmlAddChild(parent, e);
}

/* Remove e; if its parent has no element children left, drop the parent's
 * remaining white space too, so an element that was empty (<cell/>) is
 * empty again. */
static void remove_child_unit(struct domain *d, xmlNodePtr e) {
        xmlNodePtr parent = e->parent;
        unlink_unit(d, e);
        if (parent && !last_element_child(parent))
                while (parent->children) {
                        xmlNodePtr c = parent->children;
                        xmlUnlinkNode(c);
                        xmlFreeNode(c);
                }
}

static xmlNodePtr new_elem_text(const char *name, const char *text) {
        xmlNodePtr e = xmlNewNode(NULL, (const xmlChar *) name);
        xmlNodeAddContent(e, (const xmlChar *) text);
        return e;
}

/* mirror_distances: <distances><sibling id= value=/>...</distances> in each cell. */
static void apply_distances(struct domain *d, const struct plan *p) {
        xmlNodePtr root = xmlDocGetRootElement(d->doc);
        xmlNodePtr numa = xml_child(xml_child(root, "cpu"), "numa");
        size_t n = p->n_cells;
        for (xmlNodePtr c = numa ? numa->children : NULL; c; c = c->next) {
                if (!xml_is(c, "cell"))
                        continue;
                _cleanup_free_ char *ids = xml_prop(c, "id");
                uint64_t id;
                if (!ids || parse_uint(ids, 10, n - 1, &id) < 0)
                        continue;
                xmlNodePtr dist = xmlNewNode(NULL, (const xmlChar *) "distances");
                append_child_unit(c, dist);
                for (size_t j = 0; j < n; j++) {
                        xmlNodePtr sib = xmlNewNode(NULL, (const xmlChar *) "sibling");
                        char v[32];
                        snprintf(v, sizeof v, "%zu", j);
                        xmlSetProp(sib, (const xmlChar *) "id", (const xmlChar *) v);
                        snprintf(v, sizeof v, "%d", p->distances[id * n + j]);
                        xmlSetProp(sib, (const xmlChar *) "value", (const xmlChar *) v);
                        append_child_unit(dist, sib);
                }
        }
}

static void revert_distances(struct domain *d) {
        xmlNodePtr root = xmlDocGetRootElement(d->doc);
        xmlNodePtr numa = xml_child(xml_child(root, "cpu"), "numa");
        for (xmlNodePtr c = numa ? numa->children : NULL; c; c = c->next) {
                xmlNodePtr dist = xml_is(c, "cell") ? xml_child(c, "distances") : NULL;
                if (dist)
                        remove_child_unit(d, dist);
        }
}

static xmlNodePtr pcie_root_elem(xmlNodePtr devices) {
        xmlNodePtr e = find_controller_elem(devices, 0);
        return e && elem_has_model(e, "pcie-root") ? e : NULL;
}

/* What the mmio64 switch changed outside the devices; the mark records it
 * for revert (pcie-root-created, pcihole64-original[-unit], ovmf-mmio64,
 * qemu-ns-added). */
struct mark_features {
        bool pcie_root_created;
        char *hole_original;            /* "none" or the old <pcihole64> text, or NULL */
        char *hole_original_unit;       /* its unit ("none" when it had none), or NULL */
        const char *ovmf_mmio64;        /* "created", "added", or NULL */
        bool qemu_ns_added;
};

static void mark_features_done(struct mark_features *f) {
        free(f->hole_original);
        free(f->hole_original_unit);
}

static void set_prop(xmlNodePtr e, const char *name, const char *value) {
        xmlSetProp(e, (const xmlChar *) name, (const xmlChar *) value);
}

static void set_prop_int(xmlNodePtr e, const char *name, int value) {
        char v[16];
        snprintf(v, sizeof v, "%d", value);
        set_prop(e, name, v);
}

/* mmio64: <pcihole64 unit='KiB'> on the pcie-root (created when the XML
 * leaves the pcie-root implicit).  *f records what was there. */
static void apply_pcihole64(struct domain *d, const struct plan *p, struct mark_features *f) {
        char v[32];
        snprintf(v, sizeof v, "%" PRIu64, p->pcihole64_kib);
        xmlNodePtr rootc = pcie_root_elem(d->devices);
        if (!rootc) {
                xmlNodePtr first = element_at(d->devices, 0);
                xmlNodePtr anchor = xml_child(d->devices, "emulator");
                xmlNodePtr e = xmlNewDocNode(d->doc, NULL, (const xmlChar *) "controller", NULL);
                set_prop(e, "type", "pci");
                set_prop(e, "index", "0");
                set_prop(e, "model", "pcie-root");
                if (anchor)
                        insert_unit_after(anchor, e);
                else if (first)
                        insert_unit_before(first, e);
                else
                        xmlAddChild(d->devices, e);
                xmlNodePtr h = new_elem_text("pcihole64", v);
                set_prop(h, "unit", "KiB");
                append_child_unit(e, h);
                f->pcie_root_created = true;
                return;
        }
        xmlNodePtr hole = xml_child(rootc, "pcihole64");
        if (!hole) {
                xmlNodePtr h = new_elem_text("pcihole64", v);
                set_prop(h, "unit", "KiB");
                append_child_unit(rootc, h);
                f->hole_original = xstrdup("none");
                return;
        }
        _cleanup_free_ char *unit = xml_prop(hole, "unit");
        xmlChar *old = xmlNodeGetContent(hole);
        f->hole_original = xstrdup(old ? (const char *) old : "");
        f->hole_original_unit = xstrdup(unit ? unit : "none");
        xmlFree(old);
        xmlNodeSetContent(hole, (const xmlChar *) v);
        set_prop(hole, "unit", "KiB");
}

static void revert_pcihole64(struct domain *d, xmlNodePtr mark) {
        _cleanup_free_ char *created = xml_prop(mark, "pcie-root-created");
        _cleanup_free_ char *orig = xml_prop(mark, "pcihole64-original");
        _cleanup_free_ char *unit = xml_prop(mark, "pcihole64-original-unit");
        xmlNodePtr rootc = d->devices ? pcie_root_elem(d->devices) : NULL;
        if (!rootc)
                return;
        if (created && streq(created, "yes")) {
                unlink_unit(d, rootc);
                return;
        }
        xmlNodePtr hole = xml_child(rootc, "pcihole64");
        if (!orig || !hole)
                return;
        if (streq(orig, "none")) {
                remove_child_unit(d, hole);
                return;
        }
        /* Text, not markup: xmlNodeSetContent() would parse entities. */
        while (hole->children) {
                xmlNodePtr c = hole->children;
                xmlUnlinkNode(c);
                xmlFreeNode(c);
        }
        xmlNodeAddContent(hole, (const xmlChar *) orig);
        if (unit && !streq(unit, "none"))
                set_prop(hole, "unit", unit);
        else
                xmlUnsetProp(hole, (const xmlChar *) "unit");
}

#define QEMU_NS "http://libvirt.org/schemas/domain/qemu/1.0"
#define OVMF_MMIO64_ARG "name=opt/ovmf/X-PciMmio64Mb,string="

/* An element <qemu:NAME> (by namespace URI, whatever its prefix). */
static bool is_qemu_elem(xmlNodePtr n, const char *name) {
        return n && n->type == XML_ELEMENT_NODE && n->ns && n->ns->href &&
               xmlStrEqual(n->ns->href, (const xmlChar *) QEMU_NS) && xmlStrEqual(n->name, (const xmlChar *) name);
}

/* The last <qemu:commandline> of the domain, or NULL. */
static xmlNodePtr qemu_commandline(xmlNodePtr root) {
        xmlNodePtr cl = NULL;
        for (xmlNodePtr c = root->children; c; c = c->next)
                if (is_qemu_elem(c, "commandline"))
                        cl = c;
        return cl;
}

/* OVMF's 64-bit aperture is the fw_cfg file opt/ovmf/X-PciMmio64Mb.
 * libvirt reserves opt/ovmf/ names in <sysinfo type='fwcfg'> ("That
 * firmware name is reserved", libvirt 9.0), so it goes through QEMU's
 * command line: <qemu:commandline> -fw_cfg name=...,string=MB.  The two
 * arguments go at the end of the user's <qemu:commandline> if there is
 * one, in its own namespace declaration. */
static void apply_ovmf_mmio64(struct domain *d, const struct plan *p, struct mark_features *f) {
        xmlNodePtr root = xmlDocGetRootElement(d->doc);
        xmlNodePtr cl = qemu_commandline(root);
        xmlNsPtr ns = cl ? cl->ns : xmlSearchNsByHref(d->doc, root, (const xmlChar *) QEMU_NS);
        if (!ns) {
                /* "qemu", unless the root binds that prefix to another URI. */
                for (unsigned i = 0; !ns; i++) {
                        char prefix[16];
                        if (i > 1000)
                                abort();
                        snprintf(prefix, sizeof prefix, i ? "qemu%u" : "qemu", i);
                        ns = xmlNewNs(root, (const xmlChar *) QEMU_NS, (const xmlChar *) prefix);
                }
                f->qemu_ns_added = true;
        }
        _cleanup_free_ char *val = xasprintf(OVMF_MMIO64_ARG "%" PRIu64, p->pcihole64_kib / 1024);
        bool created = !cl;
        if (created) {
                cl = xmlNewDocNode(d->doc, ns, (const xmlChar *) "commandline", NULL);
                insert_unit_after(last_element_child(root), cl);
        }
        xmlNodePtr a1 = xmlNewDocNode(d->doc, ns, (const xmlChar *) "arg", NULL);
        set_prop(a1, "value", "-fw_cfg");
        xmlNodePtr a2 = xmlNewDocNode(d->doc, ns, (const xmlChar *) "arg", NULL);
        set_prop(a2, "value", val);
        append_child_unit(cl, a1);
        append_child_unit(cl, a2);
        f->ovmf_mmio64 = created ? "created" : "added";
}

static xmlNodePtr next_element(xmlNodePtr n) {
        for (n = n ? n->next : NULL; n && n->type != XML_ELEMENT_NODE; n = n->next)
                ;
        return n;
}

/* Is n a <qemu:arg> whose value is 'value' (or, with 'prefix', begins so)? */
static bool qemu_arg_is(xmlNodePtr n, const char *value, bool prefix) {
        if (!is_qemu_elem(n, "arg"))
                return false;
        _cleanup_free_ char *buf = NULL;
        const char *v = xml_prop_ref(n, "value", &buf);
        return v && (prefix ? strncmp(v, value, strlen(value)) == 0 : streq(v, value));
}

/* Does any element or attribute in the list at n (and below) use ns? */
static bool ns_used(xmlNodePtr n, xmlNsPtr ns) {
        for (; n; n = n->next) {
                if (n->type != XML_ELEMENT_NODE)
                        continue;
                if (n->ns == ns)
                        return true;
                for (xmlAttrPtr a = n->properties; a; a = a->next)
                        if (a->ns == ns)
                                return true;
                if (ns_used(n->children, ns))
                        return true;
        }
        return false;
}

/* Undo apply_ovmf_mmio64(): remove only the two arguments pcinuma added
 * (the last "-fw_cfg" followed by the aperture), the <qemu:commandline>
 * only if pcinuma created it and it is empty now, and the namespace only
 * if pcinuma declared it and nothing uses it any more: the user may have
 * added arguments, <qemu:capabilities> or <qemu:override> since. */
static void revert_ovmf_mmio64(struct domain *d, const char *how, bool ns_added) {
        xmlNodePtr root = xmlDocGetRootElement(d->doc);
        xmlNodePtr a1 = NULL, a2 = NULL;
        for (xmlNodePtr cl = root->children; cl; cl = cl->next) {
                if (!is_qemu_elem(cl, "commandline"))
                        continue;
                for (xmlNodePtr a = cl->children; a; a = a->next)
                        if (qemu_arg_is(a, "-fw_cfg", false) && qemu_arg_is(next_element(a), OVMF_MMIO64_ARG, true)) {
                                a1 = a;
                                a2 = next_element(a);
                        }
        }
        if (a1) {
                xmlNodePtr cl = a1->parent;
                remove_child_unit(d, a2);
                remove_child_unit(d, a1);
                if (streq(how, "created") && !last_element_child(cl))
                        unlink_unit(d, cl);
        }
        if (!ns_added)
                return;
        for (xmlNsPtr ns = root->nsDef; ns; ns = ns->next)
                if (ns->href && xmlStrEqual(ns->href, (const xmlChar *) QEMU_NS)) {
                        if (!ns_used(root, ns))
                                domain_remove_ns(d, root, ns);
                        break;
                }
}

/* A child element <pcinuma:NAME> of the mark, after the indentation text
 * 'cind' (pretty-printed input) or none. */
static xmlNodePtr mark_child(xmlNodePtr mark, const char *cind, const char *name) {
        if (*cind)
                xmlAddChild(mark, xmlNewDocText(mark->doc, (const xmlChar *) cind));
        return xmlNewChild(mark, mark->ns, (const xmlChar *) name, NULL);
}

/* Write the mark (design §7) into <metadata>, created if needed, with the
 * XML library's node and attribute API: every value is escaped by the
 * serialiser, whatever characters the input's attributes hold. */
static void write_mark(struct domain *d, const struct plan *p, char **removed_xml, const int *removed_pos,
                       char **orig_addr, const char *single_slots, const struct mark_features *f,
                       char **orig_managed) {
        xmlNodePtr root = xmlDocGetRootElement(d->doc);
        xmlNodePtr md = xml_child(root, "metadata");
        bool created = !md;
        xmlNodePtr first = element_at(root, 0);
        bool pretty = first && is_ws_text(first->prev);
        _cleanup_free_ char *ind = first ? indent_of(first) : xstrdup("");
        _cleanup_free_ char *mind = NULL;     /* indentation of the mark */
        if (md) {
                xmlNodePtr last = last_element_child(md);
                mind = last ? indent_of(last) : (pretty ? xasprintf("%s  ", ind) : xstrdup(""));
        } else
                mind = pretty ? xasprintf("%s  ", ind) : xstrdup("");
        _cleanup_free_ char *cind = pretty ? xasprintf("\n%s  ", mind) : xstrdup("");
        _cleanup_free_ char *endind = pretty ? xasprintf("\n%s", mind) : xstrdup("");

        xmlNodePtr mark = xmlNewDocNode(d->doc, NULL, (const xmlChar *) "topology", NULL);
        xmlSetNs(mark, xmlNewNs(mark, (const xmlChar *) PCINUMA_TOPOLOGY_NS, (const xmlChar *) "pcinuma"));
        set_prop(mark, "version", "1");
        set_prop(mark, "policy", policy_mode_to_string(p->mode));
        set_prop(mark, "migratable", "no");
        if (created)
                set_prop(mark, "metadata-created", "yes");
        if (p->n_pruned && single_slots && *single_slots)
                set_prop(mark, "single-function-slots", single_slots);
        if (p->add_distances)
                set_prop(mark, "distances", "host");
        if (f->pcie_root_created)
                set_prop(mark, "pcie-root-created", "yes");
        if (f->hole_original) {
                set_prop(mark, "pcihole64-original", f->hole_original);
                if (f->hole_original_unit)
                        set_prop(mark, "pcihole64-original-unit", f->hole_original_unit);
        }
        if (f->ovmf_mmio64)
                set_prop(mark, "ovmf-mmio64", f->ovmf_mmio64);
        if (f->qemu_ns_added)
                set_prop(mark, "qemu-ns-added", "yes");

        for (size_t i = 0; i < p->n_pxbs; i++) {
                const struct plan_pxb *x = &p->pxbs[i];
                xmlNodePtr e = mark_child(mark, cind, "expander");
                set_prop_int(e, "controller", x->index);
                set_prop_int(e, "guest-cell", (int) x->cell);
                set_prop(e, "host-nodes", x->host_nodes);
                set_prop_int(e, "busNr", x->bus_nr);
        }
        for (size_t i = 0, k = 0; i < p->n_devices; i++) {
                const struct plan_device *pd = &p->devices[i];
                if (pd->action != PLAN_MOVE)
                        continue;
                const struct domain_hostdev *hd = &d->hostdevs[pd->hostdev];
                xmlNodePtr e = mark_child(mark, cind, "device");
                if (hd->kind == DOMAIN_HOSTDEV_MDEV)
                        set_prop(e, "mdev", hd->mdev_uuid);
                else
                        set_prop(e, "host", pd->name);
                if (pd->class) {
                        char v[16];
                        snprintf(v, sizeof v, "0x%06x", pd->class);
                        set_prop(e, "class", v);
                }
                set_prop_int(e, "host-node", pd->host_node);
                if (pd->host_socket >= 0)
                        set_prop_int(e, "host-socket", pd->host_socket);
                set_prop_int(e, "guest-cell", pd->cell);
                set_prop_int(e, "controller", pd->port_index);
                set_prop(e, "original-address", orig_addr[k] ? orig_addr[k] : "none");
                k++;
        }
        /* Ports that carry no device themselves: a guest switch's root
         * and upstream ports. */
        for (size_t i = 0; i < p->n_ports; i++)
                if (p->ports[i].device < 0) {
                        xmlNodePtr e = mark_child(mark, cind, "controller");
                        set_prop_int(e, "index", p->ports[i].index);
                        set_prop(e, "model", p->ports[i].model);
                }
        for (size_t i = 0; i < p->n_managed; i++) {
                xmlNodePtr e = mark_child(mark, cind, "managed");
                set_prop(e, "host", p->managed[i].name);
                set_prop(e, "driver", p->managed[i].driver);
                set_prop(e, "original", orig_managed[i] ? orig_managed[i] : "absent");
        }
        for (size_t i = 0; i < p->n_pruned; i++) {
                xmlNodePtr e = mark_child(mark, cind, "removed");
                set_prop_int(e, "controller", p->pruned[i]);
                set_prop_int(e, "position", removed_pos[i]);
                /* The controller's XML as text (escaped on output). */
                xmlNodeAddContent(e, (const xmlChar *) removed_xml[i]);
        }
        if (*endind)
                xmlAddChild(mark, xmlNewDocText(d->doc, (const xmlChar *) endind));

        if (created) {
                md = xmlNewDocNode(d->doc, NULL, (const xmlChar *) "metadata", NULL);
                /* libvirt's order: name, uuid, (genid,) title, description, metadata. */
                xmlNodePtr anchor = NULL;
                for (xmlNodePtr c = root->children; c; c = c->next)
                        if (xml_is(c, "name") || xml_is(c, "uuid") || xml_is(c, "genid") || xml_is(c, "title") || xml_is(c, "description"))
                                anchor = c;
                if (anchor)
                        insert_unit_after(anchor, md);
                else if (first)
                        insert_unit_before(first, md);
                else
                        xmlAddChild(root, md);
                if (pretty) {
                        /* <metadata>\n    MARK\n  </metadata> */
                        _cleanup_free_ char *open = xasprintf("\n%s", mind);
                        _cleanup_free_ char *close = xasprintf("\n%s", ind);
                        xmlAddChild(md, xmlNewDocText(d->doc, (const xmlChar *) open));
                        xmlAddChild(md, mark);
                        xmlAddChild(md, xmlNewDocText(d->doc, (const xmlChar *) close));
                } else
                        xmlAddChild(md, mark);
                return;
        }
        xmlNodePtr last = last_element_child(md);
        if (last)
                insert_unit_after(last, mark);
        else
                xmlAddChild(md, mark);
}

int rewrite_apply(struct domain *d, const struct plan *p, char **ret_error) {
        int r;
        if (d->mark)
                return set_error(ret_error, -EINVAL, "internal error: the domain already carries a pcinuma mark");
        if (p->verdict != PLAN_APPLY)
                return set_error(ret_error, -EINVAL, "internal error: plan verdict is %s", plan_verdict_to_string(p->verdict));
        if (!d->devices)
                return set_error(ret_error, -EINVAL, "the domain has no <devices>");

        size_t n_moved = 0;
        for (size_t i = 0; i < p->n_devices; i++)
                n_moved += p->devices[i].action == PLAN_MOVE;

        struct mark_features features = {0};
        _cleanup_free_ char **orig_managed = NULL;
        _cleanup_free_ char **orig = xcalloc(n_moved ? n_moved : 1, sizeof(char *));
        _cleanup_free_ char **removed = xcalloc(p->n_pruned ? p->n_pruned : 1, sizeof(char *));
        _cleanup_free_ int *removed_pos = xcalloc(p->n_pruned ? p->n_pruned : 1, sizeof(int));

        _cleanup_free_ char *single_slots = single_function_slots(d->devices);

        /* Record what the pruned controllers were, before anything moves.
         * (Through the model: a controller may have no index attribute.) */
        _cleanup_free_ xmlNodePtr *pruned_elems = xcalloc(p->n_pruned ? p->n_pruned : 1, sizeof(xmlNodePtr));
        for (size_t i = 0; i < p->n_pruned; i++) {
                const struct domain_controller *pc = domain_find_controller(d, p->pruned[i]);
                xmlNodePtr e = pc ? pc->elem : NULL;
                pruned_elems[i] = e;
                if (!e) {
                        r = set_error(ret_error, -EINVAL, "internal error: controller %d to prune is missing", p->pruned[i]);
                        goto out;
                }
                removed[i] = node_dump(d->doc, e);
                removed_pos[i] = element_position(d->devices, e);
        }

        /* Move the devices. */
        for (size_t i = 0, k = 0; i < p->n_devices; i++) {
                const struct plan_device *pd = &p->devices[i];
                if (pd->action != PLAN_MOVE)
                        continue;
                struct domain_hostdev *hd = &d->hostdevs[pd->hostdev];
                if (hd->addr_elem) {
                        orig[k] = attrs_to_string(hd->addr_elem);
                        set_guest_address(hd->addr_elem, &pd->guest);
                        /* Function 0 of a host device whose functions stay together. */
                        if (pd->multifunction)
                                xmlSetProp(hd->addr_elem, (const xmlChar *) "multifunction", (const xmlChar *) "on");
                } else {
                        xmlNodePtr a = xmlNewNode(NULL, (const xmlChar *) "address");
                        set_guest_address(a, &pd->guest);
                        if (pd->multifunction)
                                xmlSetProp(a, (const xmlChar *) "multifunction", (const xmlChar *) "on");
                        xmlNodePtr last = last_element_child(hd->elem);
                        if (last)
                                insert_unit_after(last, a);
                        else
                                xmlAddChild(hd->elem, a);
                }
                k++;
        }

        /* Prune, then add. */
        for (size_t i = 0; i < p->n_pruned; i++)
                unlink_unit(d, pruned_elems[i]);
        r = add_controllers(d, p, ret_error);
        if (r < 0)
                goto out;
        /* The feature switches (issue 6). */
        orig_managed = xcalloc(p->n_managed ? p->n_managed : 1, sizeof(char *));
        if (p->add_distances)
                apply_distances(d, p);
        if (p->pcihole64_kib) {
                apply_pcihole64(d, p, &features);
                if (p->set_ovmf_mmio64)
                        apply_ovmf_mmio64(d, p, &features);
        }
        for (size_t i = 0; i < p->n_managed; i++) {
                xmlNodePtr e = d->hostdevs[p->managed[i].hostdev].elem;
                orig_managed[i] = xml_prop(e, "managed");
                xmlSetProp(e, (const xmlChar *) "managed", (const xmlChar *) "no");
        }

        write_mark(d, p, removed, removed_pos, orig, single_slots, &features, orig_managed);
        for (size_t i = 0; i < p->n_managed; i++)
                free(orig_managed[i]);
        r = domain_reload(d, ret_error);

out:
        for (size_t i = 0; i < n_moved; i++)
                free(orig[i]);
        for (size_t i = 0; i < p->n_pruned; i++)
                free(removed[i]);
        mark_features_done(&features);
        return r;
}


struct removed_ctl {
        int index;
        int position;
        xmlNodePtr elem;        /* parsed from the mark; not in the document until restored */
};

static int cmp_removed(const void *a, const void *b) {
        const struct removed_ctl *x = a, *y = b;
        return (x->position > y->position) - (x->position < y->position);
}

static xmlNodePtr find_hostdev_elem(struct domain *d, xmlNodePtr dev_rec) {
        _cleanup_free_ char *host = xml_prop(dev_rec, "host");
        _cleanup_free_ char *mdev = xml_prop(dev_rec, "mdev");
        struct pci_addr a;
        if (!mdev && (!host || pci_addr_parse(host, &a) < 0))
                return NULL;
        for (size_t i = 0; i < d->n_hostdevs; i++) {
                const struct domain_hostdev *hd = &d->hostdevs[i];
                if (mdev ? (hd->kind == DOMAIN_HOSTDEV_MDEV && strcasecmp(hd->mdev_uuid, mdev) == 0)
                         : (hd->kind == DOMAIN_HOSTDEV_PCI && pci_addr_eq(&hd->host, &a)))
                        return hd->elem;
        }
        return NULL;
}

/* Who sits on a bus: the first device (an element under <devices>) with a
 * guest PCI address on it, other than those in 'except'. */
struct bus_query {
        int bus;
        xmlNodePtr const *except;
        size_t n_except;
        xmlNodePtr found;
        struct pci_addr at;
};

static void check_bus(xmlNodePtr addr, const struct pci_addr *a, void *u) {
        struct bus_query *q = u;
        if (q->found || a->domain != 0 || a->bus != q->bus)
                return;
        for (size_t i = 0; i < q->n_except; i++)
                if (addr->parent == q->except[i])
                        return;
        q->found = addr->parent;
        q->at = *a;
}

static xmlNodePtr bus_user(xmlNodePtr devices, int bus, xmlNodePtr const *except, size_t n_except, struct pci_addr *ret_at) {
        struct bus_query q = { .bus = bus, .except = except, .n_except = n_except };
        for_each_device_address(devices, check_bus, &q);
        if (ret_at)
                *ret_at = q.at;
        return q.found;
}

/* Does any device's guest PCI address sit on 'bus'? */
static bool bus_referenced(xmlNodePtr devices, int bus) {
        return bus_user(devices, bus, NULL, 0, NULL) != NULL;
}

struct addr_query {
        const struct pci_addr *want;
        xmlNodePtr except;
        xmlNodePtr found;
};

static void check_addr(xmlNodePtr addr, const struct pci_addr *a, void *u) {
        struct addr_query *q = u;
        if (!q->found && addr->parent != q->except && pci_addr_eq(a, q->want))
                q->found = addr->parent;
}

/* The device (other than 'except') whose guest address is *a, or NULL. */
static xmlNodePtr address_user(xmlNodePtr devices, const struct pci_addr *a, xmlNodePtr except) {
        struct addr_query q = { .want = a, .except = except };
        for_each_device_address(devices, check_addr, &q);
        return q.found;
}

/* A device element as a warning names it: "<interface> 52:54:00:…",
 * "<hostdev> 0000:3b:00.0", "<disk> vdb", "<controller index='5' …>". */
static char *describe_device(xmlNodePtr e) {
        const char *name = (const char *) e->name;
        if (xml_is(e, "controller")) {
                _cleanup_free_ char *idx = xml_prop(e, "index"), *model = xml_prop(e, "model");
                return xasprintf("<controller index='%s' model='%s'>", strna(idx), strna(model));
        }
        struct pci_addr src;
        xmlNodePtr saddr = xml_child(xml_child(e, "source"), "address");
        if (saddr && xml_parse_pci_address(saddr, &src) == 0 && (xml_is(e, "hostdev") || xml_is(e, "interface"))) {
                char b[PCI_ADDR_STRLEN];
                return xasprintf("<%s> of host device %s", name, pci_addr_format(&src, b));
        }
        _cleanup_free_ char *mac = xml_prop(xml_child(e, "mac"), "address");
        if (mac)
                return xasprintf("<%s> %s", name, mac);
        _cleanup_free_ char *dev = xml_prop(xml_child(e, "target"), "dev");
        if (dev)
                return xasprintf("<%s> %s", name, dev);
        return xasprintf("<%s>", name);
}

/* The PCI controller models libvirt knows: a <pcinuma:removed> may bring
 * back only one of these. */
static bool known_pci_model(const char *m) {
        static const char *const models[] = {
                "pci-root", "pcie-root", "pci-bridge", "dmi-to-pci-bridge", "pcie-root-port",
                "pcie-switch-upstream-port", "pcie-switch-downstream-port", "pci-expander-bus",
                "pcie-expander-bus", "pcie-to-pci-bridge",
        };
        for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++)
                if (streq(m, models[i]))
                        return true;
        return false;
}

/* The first element or attribute under and including e with a prefix
 * that no namespace declaration binds (libxml2 keeps it in the name, and
 * writes it back as it is: XML that does not parse), or NULL. */
static const char *undeclared_prefix(xmlNodePtr e) {
        if (strchr((const char *) e->name, ':'))
                return (const char *) e->name;
        for (xmlAttrPtr a = e->properties; a; a = a->next)
                if (strchr((const char *) a->name, ':'))
                        return (const char *) a->name;
        for (xmlNodePtr c = e->children; c; c = c->next) {
                const char *n = c->type == XML_ELEMENT_NODE ? undeclared_prefix(c) : NULL;
                if (n)
                        return n;
        }
        return NULL;
}

/* Parse the text of a <pcinuma:removed controller=N> into the controller
 * it held.  It must be exactly one <controller type='pci'> (index N if it
 * says one, a model libvirt knows): a mark is input like any other, and a
 * forged one must not bring a <disk> or a <hostdev> into the domain.  (What
 * the controller holds is the input's own, as the rewrite found it.) */
static int parse_removed(xmlNodePtr devices, xmlNodePtr rec, int index, xmlNodePtr *ret, char **ret_error) {
        xmlChar *text = xmlNodeGetContent(rec);
        xmlNodePtr list = NULL;
        xmlParserErrors pr = xmlParseInNodeContext(devices, text ? (const char *) text : "", text ? xmlStrlen(text) : 0,
                                                   XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING, &list);
        xmlFree(text);
        if (pr != XML_ERR_OK) {
                xmlFreeNodeList(list);
                return set_error(ret_error, -EINVAL,
                                 "pcinuma mark: <pcinuma:removed controller='%d'> does not hold well-formed XML (error %d); "
                                 "the mark is refused and nothing was changed", index, (int) pr);
        }
        xmlNodePtr elem = NULL;
        const char *bad = NULL;
        for (xmlNodePtr c = list; c && !bad; c = c->next) {
                if (is_ws_text(c))
                        continue;
                if (c->type == XML_ELEMENT_NODE && !elem)
                        elem = c;
                else
                        bad = c->type == XML_ELEMENT_NODE ? (const char *) c->name : "text";
        }
        if (!bad && !elem)
                bad = "nothing";
        else if (!bad && !(xml_is(elem, "controller") && prop_is(elem, "type", "pci")))
                bad = (const char *) elem->name;
        _cleanup_free_ char *model = elem && !bad ? xml_prop(elem, "model") : NULL;
        _cleanup_free_ char *idx = elem && !bad ? xml_prop(elem, "index") : NULL;
        uint64_t v;
        int r = 0;
        if (bad)
                r = set_error(ret_error, -EINVAL,
                              "pcinuma mark: <pcinuma:removed controller='%d'> holds %s%s%s, not one <controller type='pci'>; "
                              "a mark can only restore the PCI controllers pcinuma removed: the mark is refused and nothing was changed",
                              index, streq(bad, "text") || streq(bad, "nothing") ? "" : "<", bad,
                              streq(bad, "text") || streq(bad, "nothing") ? "" : ">");
        else if (model && !known_pci_model(model))
                r = set_error(ret_error, -EINVAL,
                              "pcinuma mark: <pcinuma:removed controller='%d'> holds a PCI controller of unknown model '%s': "
                              "the mark is refused and nothing was changed", index, model);
        else if (idx && (parse_uint(idx, 0, 255, &v) < 0 || (int) v != index))
                r = set_error(ret_error, -EINVAL,
                              "pcinuma mark: <pcinuma:removed controller='%d'> holds <controller index='%s'>: "
                              "the mark is refused and nothing was changed", index, idx);
        if (r == 0 && undeclared_prefix(elem))
                r = set_error(ret_error, -EINVAL,
                              "pcinuma mark: <pcinuma:removed controller='%d'> holds a controller with an undeclared prefix (%s): "
                              "the mark is refused and nothing was changed", index, undeclared_prefix(elem));
        if (r == 0) {
                _cleanup_free_ char *why = NULL;
                if (domain_check_controller(elem, &why) < 0)
                        r = set_error(ret_error, -EINVAL,
                                      "pcinuma mark: <pcinuma:removed controller='%d'> holds a controller that is not valid (%s): "
                                      "the mark is refused and nothing was changed", index, why);
        }
        if (r < 0) {
                xmlFreeNodeList(list);
                return r;
        }
        /* Detach elem from the list and free the rest. */
        if (elem->prev)
                elem->prev->next = elem->next;
        else
                list = elem->next;
        if (elem->next)
                elem->next->prev = elem->prev;
        elem->next = elem->prev = NULL;
        elem->parent = NULL;
        xmlFreeNodeList(list);
        *ret = elem;
        return 0;
}

/* What rewrite_revert() reads from the mark, all of it checked before
 * the document changes. */
struct mark_records {
        xmlNodePtr *ours;               /* the controllers pcinuma added, as found in the document */
        size_t n_ours;
        struct removed_ctl *removed;
        size_t n_removed;
        xmlNodePtr *dev_recs;           /* <pcinuma:device> */
        size_t n_dev_recs;
        xmlNodePtr *moved;              /* the hostdev elements those name (that still exist) */
        size_t n_moved;
        xmlNodePtr *managed;            /* <pcinuma:managed> */
        size_t n_managed;
        char *ovmf_mmio64;
        bool qemu_ns_added;
};

static void mark_records_done(struct mark_records *m) {
        free(m->ours);
        for (size_t i = 0; i < m->n_removed; i++)
                if (m->removed[i].elem)
                        xmlFreeNode(m->removed[i].elem);
        free(m->removed);
        free(m->dev_recs);
        free(m->moved);
        free(m->managed);
        free(m->ovmf_mmio64);
}

static bool is_letters(const char *s) {
        if (!*s)
                return false;
        for (; *s; s++)
                if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')))
                        return false;
        return true;
}

/* Read and check d's mark into *m.  An error names what is wrong; the
 * document is not touched. */
static int read_mark(struct domain *d, struct mark_records *m, char **ret_error) {
        xmlNodePtr mark = d->mark, devices = d->devices;
        int r;

        for (xmlNodePtr c = mark->children; c; c = c->next) {
                if (c->type != XML_ELEMENT_NODE)
                        continue;
                const char *name = (const char *) c->name;
                bool known = c->ns && c->ns->href && xmlStrEqual(c->ns->href, (const xmlChar *) PCINUMA_TOPOLOGY_NS) &&
                             (streq(name, "expander") || streq(name, "device") || streq(name, "controller") ||
                              streq(name, "managed") || streq(name, "removed"));
                if (!known)
                        return set_error(ret_error, -EINVAL,
                                         "pcinuma mark: line %ld: <%s%s%s> is not part of a pcinuma mark: the mark is refused and nothing was changed",
                                         xmlGetLineNo(c), c->ns && c->ns->prefix ? (const char *) c->ns->prefix : "",
                                         c->ns && c->ns->prefix ? ":" : "", name);
                _cleanup_free_ char *ctl = xml_prop(c, "controller");
                uint64_t idx = 0;
                bool has_idx = ctl && parse_uint(ctl, 10, 255, &idx) == 0;

                if (streq(name, "expander") || streq(name, "device") || streq(name, "controller")) {
                        /* Only what we added, and only if it is still what we
                         * added: a controller's model must match. */
                        _cleanup_free_ char *index = xml_prop(c, "index");
                        _cleanup_free_ char *model = xml_prop(c, "model");
                        if (streq(name, "controller"))
                                has_idx = index && model && parse_uint(index, 10, 255, &idx) == 0;
                        xmlNodePtr e = has_idx && devices ? find_controller_elem(devices, (int) idx) : NULL;
                        bool ours = e && (streq(name, "expander") ? elem_has_model(e, "pcie-expander-bus")
                                          : streq(name, "device") ? (elem_has_model(e, "pcie-root-port") ||
                                                                     elem_has_model(e, "pcie-switch-downstream-port"))
                                          : elem_has_model(e, model));
                        for (size_t i = 0; i < m->n_ours && ours; i++)
                                ours = m->ours[i] != e;
                        if (ours)
                                *GROW(m->ours, m->n_ours) = e;
                }
                if (streq(name, "device")) {
                        _cleanup_free_ char *orig = xml_prop(c, "original-address");
                        if (orig && !streq(orig, "none")) {
                                /* The same reading as the revert does, on a scratch element. */
                                xmlNodePtr scratch = xmlNewDocNode(d->doc, NULL, (const xmlChar *) "address", NULL);
                                r = attrs_from_string(scratch, orig, ret_error);
                                /* A PCI address (or one without a type) must be one the
                                 * domain parser reads, or the revert would leave a
                                 * domain that does not load. */
                                struct pci_addr a;
                                _cleanup_free_ char *type = r == 0 ? xml_prop(scratch, "type") : NULL;
                                if (r == 0 && (!type || streq(type, "pci")) && xml_parse_pci_address(scratch, &a) < 0)
                                        r = set_error(ret_error, -EINVAL,
                                                      "pcinuma mark: original-address='%s' is not a PCI address: the mark is refused and nothing was changed",
                                                      orig);
                                xmlFreeNode(scratch);
                                if (r < 0)
                                        return r;
                        }
                        *GROW(m->dev_recs, m->n_dev_recs) = c;
                        xmlNodePtr hd = find_hostdev_elem(d, c);
                        if (hd)
                                *GROW(m->moved, m->n_moved) = hd;
                } else if (streq(name, "managed")) {
                        _cleanup_free_ char *orig = xml_prop(c, "original");
                        if (orig && !streq(orig, "absent") && !streq(orig, "yes") && !streq(orig, "no"))
                                return set_error(ret_error, -EINVAL,
                                                 "pcinuma mark: <pcinuma:managed original='%s'>: not yes, no or absent; "
                                                 "the mark is refused and nothing was changed", orig);
                        *GROW(m->managed, m->n_managed) = c;
                } else if (streq(name, "removed")) {
                        _cleanup_free_ char *pos = xml_prop(c, "position");
                        uint64_t p = 0;
                        if (!has_idx || !pos || parse_uint(pos, 10, INT32_MAX, &p) < 0)
                                return set_error(ret_error, -EINVAL, "pcinuma mark: <removed> without a valid controller and position");
                        if (!devices)
                                return set_error(ret_error, -EINVAL, "pcinuma mark lists removed controllers but the domain has no <devices>");
                        struct removed_ctl *rc = GROW(m->removed, m->n_removed);
                        rc->index = (int) idx;
                        rc->position = (int) p;
                        rc->elem = NULL;
                        r = parse_removed(devices, c, (int) idx, &rc->elem, ret_error);
                        if (r < 0)
                                return r;
                }
        }

        /* The feature switches' attributes: values that the revert writes
         * back into the domain must be ones libvirt accepts. */
        _cleanup_free_ char *hole = xml_prop(mark, "pcihole64-original");
        _cleanup_free_ char *unit = xml_prop(mark, "pcihole64-original-unit");
        uint64_t v;
        /* (the bound is the domain parser's, for a size in TiB) */
        if (hole && !streq(hole, "none") && parse_uint(hole, 10, UINT64_MAX / (1024ull * 1024 * 1024), &v) < 0)
                return set_error(ret_error, -EINVAL, "pcinuma mark: pcihole64-original='%s' is not a size: the mark is refused and nothing was changed", hole);
        if (unit && !is_letters(unit))
                return set_error(ret_error, -EINVAL, "pcinuma mark: pcihole64-original-unit='%s' is not a unit: the mark is refused and nothing was changed", unit);
        m->ovmf_mmio64 = xml_prop(mark, "ovmf-mmio64");
        if (m->ovmf_mmio64 && !streq(m->ovmf_mmio64, "created") && !streq(m->ovmf_mmio64, "added"))
                return set_error(ret_error, -EINVAL, "pcinuma mark: ovmf-mmio64='%s' is neither created nor added: the mark is refused and nothing was changed",
                                 m->ovmf_mmio64);
        _cleanup_free_ char *ns_added = xml_prop(mark, "qemu-ns-added");
        m->qemu_ns_added = ns_added && streq(ns_added, "yes");
        return 0;
}

/* Remove the controllers pcinuma added, except those a device the mark
 * does not move back still sits on (the user may have put a disk or a NIC
 * on one of our root ports, or a port on our expander bus): those stay,
 * with a warning naming the port and the device.  A port that stays keeps
 * its parent; so, leaves first, until nothing more can go. */
static void remove_our_controllers(struct domain *d, struct mark_records *m, struct strbuf *warn) {
        xmlNodePtr devices = d->devices;
        _cleanup_free_ bool *gone = xcalloc(m->n_ours ? m->n_ours : 1, sizeof(bool));
        for (bool progress = true; progress;) {
                progress = false;
                for (size_t i = 0; i < m->n_ours; i++) {
                        if (gone[i])
                                continue;
                        const struct domain_controller *c = NULL;
                        for (size_t k = 0; k < d->n_controllers && !c; k++)
                                if (d->controllers[k].elem == m->ours[i])
                                        c = &d->controllers[k];
                        if (!c || bus_user(devices, c->index, m->moved, m->n_moved, NULL))
                                continue;
                        unlink_unit(d, m->ours[i]);
                        gone[i] = progress = true;
                }
        }
        for (size_t i = 0; i < m->n_ours; i++) {
                if (gone[i])
                        continue;
                const struct domain_controller *c = NULL;
                for (size_t k = 0; k < d->n_controllers && !c; k++)
                        if (d->controllers[k].elem == m->ours[i])
                                c = &d->controllers[k];
                struct pci_addr at;
                xmlNodePtr user = c ? bus_user(devices, c->index, m->moved, m->n_moved, &at) : NULL;
                if (!user)
                        continue;
                _cleanup_free_ char *who = describe_device(user);
                strbuf_printf(warn, "%sPCI controller %d (%s) that pcinuma added was kept: %s at %04x:%02x:%02x.%x sits on it",
                              warn->len ? "\n" : "", c->index, c->model, who, at.domain, at.bus, at.slot, at.func);
        }
}

int rewrite_revert(struct domain *d, char **ret_warning, char **ret_error) {
        int r = 0;
        xmlNodePtr mark = d->mark;
        if (!mark)
                return 0;
        xmlNodePtr devices = d->devices;
        _cleanup_free_ char *created = NULL, *single_slots = NULL;
        _cleanup_free_ int *lost = NULL;          /* indexes that could not be restored */
        size_t n_lost = 0;
        struct mark_records m = {0};
        struct strbuf warn = {0};

        /* Read and check the whole mark first: a mark it refuses leaves
         * the document as it was. */
        r = read_mark(d, &m, ret_error);
        if (r < 0)
                goto out;

        /* Pass 1: remove the controllers pcinuma added (d's model still
         * describes the document as it was), and restore managed=. */
        if (devices)
                remove_our_controllers(d, &m, &warn);
        for (size_t i = 0; i < m.n_managed; i++) {
                xmlNodePtr c = m.managed[i];
                struct pci_addr host;
                _cleanup_free_ char *h = xml_prop(c, "host");
                _cleanup_free_ char *orig = xml_prop(c, "original");
                if (!h || pci_addr_parse(h, &host) < 0)
                        continue;
                for (size_t k = 0; k < d->n_hostdevs; k++)
                        if (d->hostdevs[k].kind == DOMAIN_HOSTDEV_PCI && pci_addr_eq(&d->hostdevs[k].host, &host)) {
                                if (!orig || streq(orig, "absent"))
                                        xmlUnsetProp(d->hostdevs[k].elem, (const xmlChar *) "managed");
                                else
                                        set_prop(d->hostdevs[k].elem, "managed", orig);
                        }
        }

        /* Pass 2: put the pruned controllers back, before any device
         * points at them again.  libvirt fills gaps in controller indexes
         * with empty root ports; an empty filler gives way to the
         * original.  A filler that libvirt has since put a device on
         * stays, and the devices that sat on the original get no address,
         * so libvirt assigns them a free one. */
        if (m.n_removed > 1)
                qsort(m.removed, m.n_removed, sizeof(*m.removed), cmp_removed);
        for (size_t i = 0; i < m.n_removed; i++) {
                xmlNodePtr existing = find_controller_elem(devices, m.removed[i].index);
                if (existing) {
                        if (!elem_has_model(existing, "pcie-root-port") || bus_referenced(devices, m.removed[i].index)) {
                                strbuf_printf(&warn, "%sPCI controller %d was not restored: libvirt has since put a device on the root port "
                                              "that took its index; the devices that were on it get a new address from libvirt",
                                              warn.len ? "\n" : "", m.removed[i].index);
                                *GROW(lost, n_lost) = m.removed[i].index;
                                continue;
                        }
                        unlink_unit(d, existing);
                }
                xmlNodePtr e = TAKE_PTR(m.removed[i].elem);
                xmlNodePtr ref = element_at(devices, m.removed[i].position);
                if (ref)
                        insert_unit_before(ref, e);
                else {
                        xmlNodePtr last = last_element_child(devices);
                        if (last)
                                insert_unit_after(last, e);
                        else
                                xmlAddChild(devices, e);
                }
        }

        /* Pass 3: the devices' original addresses. */
        for (size_t i = 0; i < m.n_dev_recs; i++) {
                xmlNodePtr hd = find_hostdev_elem(d, m.dev_recs[i]);
                if (!hd)
                        continue;   /* removed from the domain since */
                _cleanup_free_ char *orig = xml_prop(m.dev_recs[i], "original-address");
                xmlNodePtr addr = NULL;
                for (xmlNodePtr a = hd->children; a; a = a->next)
                        if (xml_is(a, "address"))
                                addr = a;
                if (orig && !streq(orig, "none")) {
                        if (!addr) {
                                addr = xmlNewDocNode(d->doc, NULL, (const xmlChar *) "address", NULL);
                                xmlNodePtr last = last_element_child(hd);
                                if (last)
                                        insert_unit_after(last, addr);
                                else
                                        xmlAddChild(hd, addr);
                        }
                        r = attrs_from_string(addr, orig, ret_error);
                        if (r < 0)
                                goto out;   /* checked by read_mark(): cannot happen */
                        struct pci_addr a;
                        bool on_lost = false;
                        xmlNodePtr taken = NULL;
                        if (xml_parse_pci_address(addr, &a) == 0) {
                                for (size_t k = 0; k < n_lost; k++)
                                        on_lost = on_lost || (a.domain == 0 && a.bus == lost[k]);
                                taken = address_user(devices, &a, hd);
                        }
                        if (!on_lost && !taken)
                                continue;
                        /* libvirt put another device at the original address
                         * (an unaddressed one lands on an empty root port):
                         * let libvirt pick a free address instead. */
                        if (taken) {
                                _cleanup_free_ char *who = xml_prop(m.dev_recs[i], "host");
                                strbuf_printf(&warn, "%sdevice %s could not go back to its original address "
                                              "%04x:%02x:%02x.%x: <%s> now sits there; libvirt gives it a free address",
                                              warn.len ? "\n" : "", who ? who : "?", a.domain, a.bus, a.slot, a.func,
                                              (const char *) taken->name);
                        }
                }
                if (addr)
                        unlink_unit(d, addr);
        }

        single_slots = xml_prop(mark, "single-function-slots");
        if (single_slots && devices)
                clear_multifunction(devices, single_slots);

        {
                _cleanup_free_ char *dist = xml_prop(mark, "distances");
                if (dist && streq(dist, "host"))
                        revert_distances(d);
        }
        revert_pcihole64(d, mark);
        if (m.ovmf_mmio64)
                revert_ovmf_mmio64(d, m.ovmf_mmio64, m.qemu_ns_added);

        created = xml_prop(mark, "metadata-created");
        xmlNodePtr md = mark->parent;
        unlink_unit(d, mark);
        d->mark = NULL;
        if (created && streq(created, "yes") && md && !last_element_child(md))
                unlink_unit(d, md);

        r = domain_reload(d, ret_error);
        if (r >= 0) {
                r = 1;
                if (ret_warning && warn.len)
                        *ret_warning = strbuf_steal(&warn);
        }
out:
        strbuf_done(&warn);
        mark_records_done(&m);
        return r;
}

/* Editing the domain document: applying a plan and reverting it.
 *
 * Every element we add or remove is handled as a "unit": the element plus
 * the white-space text node in front of it.  Adding a unit copies the
 * indentation of its neighbour and removing one takes that text with it,
 * so a revert gives back the input's bytes, indentation included. */
#include "rewrite.h"

#include <inttypes.h>
#include <libxml/parser.h>
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

/* Parse an XML fragment holding one element, in the context of 'ctx'. */
static xmlNodePtr parse_fragment(xmlNodePtr ctx, const char *s, char **ret_error) {
        xmlNodePtr list = NULL;
        xmlParserErrors r = xmlParseInNodeContext(ctx, s, (int) strlen(s),
                                                  XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING, &list);
        if (r != XML_ERR_OK || !list) {
                if (list)
                        xmlFreeNodeList(list);
                set_error(ret_error, -EINVAL, "cannot parse XML fragment '%.60s...' (error %d)", s, (int) r);
                return NULL;
        }
        /* Keep the first element; drop anything else. */
        xmlNodePtr elem = NULL;
        for (xmlNodePtr c = list; c; c = c->next)
                if (c->type == XML_ELEMENT_NODE) {
                        elem = c;
                        break;
                }
        if (!elem) {
                xmlFreeNodeList(list);
                set_error(ret_error, -EINVAL, "XML fragment holds no element");
                return NULL;
        }
        /* Detach elem from the list and free the rest. */
        xmlNodePtr rest = list == elem ? elem->next : list;
        if (elem->prev)
                elem->prev->next = elem->next;
        if (elem->next)
                elem->next->prev = elem->prev;
        elem->next = elem->prev = NULL;
        elem->parent = NULL;
        if (rest)
                xmlFreeNodeList(rest);
        return elem;
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

static int attrs_from_string(xmlNodePtr e, const char *s, char **ret_error) {
        _cleanup_free_ char *copy = xstrdup(s);
        remove_all_attrs(e);
        char *save = NULL;
        for (char *tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
                char *eq = strchr(tok, '=');
                if (!eq || eq == tok)
                        return set_error(ret_error, -EINVAL, "pcinuma mark: bad original-address '%s'", s);
                *eq = 0;
                /* The mark is input too: only a real attribute name may come
                 * back, or a crafted mark could smuggle markup into the XML. */
                if (xmlValidateName((const xmlChar *) tok, 0) != 0)
                        return set_error(ret_error, -EINVAL, "pcinuma mark: bad attribute name in original-address '%s'", s);
                char *v = eq + 1, *w = v;
                for (char *r = v; *r; r++) {
                        if (*r == '%' && hexval(r[1]) >= 0 && hexval(r[2]) >= 0) {
                                *w++ = (char) (hexval(r[1]) * 16 + hexval(r[2]));
                                r += 2;
                        } else
                                *w++ = *r;
                }
                *w = 0;
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

/* mmio64: <pcihole64 unit='KiB'> on the pcie-root (created when the XML
 * leaves the pcie-root implicit).  Returns the mark attributes recording
 * what was there, for revert. */
static char *apply_pcihole64(struct domain *d, const struct plan *p, char **ret_error) {
        char v[32];
        snprintf(v, sizeof v, "%" PRIu64, p->pcihole64_kib);
        xmlNodePtr rootc = pcie_root_elem(d->devices);
        if (!rootc) {
                xmlNodePtr first = element_at(d->devices, 0);
                xmlNodePtr anchor = xml_child(d->devices, "emulator");
                _cleanup_free_ char *s = xasprintf("<controller type='pci' index='0' model='pcie-root'/>");
                xmlNodePtr e = parse_fragment(d->devices, s, ret_error);
                if (!e)
                        return NULL;
                if (anchor)
                        insert_unit_after(anchor, e);
                else if (first)
                        insert_unit_before(first, e);
                else
                        xmlAddChild(d->devices, e);
                append_child_unit(e, new_elem_text("pcihole64", v));
                xmlSetProp(last_element_child(e), (const xmlChar *) "unit", (const xmlChar *) "KiB");
                return xstrdup(" pcie-root-created='yes'");
        }
        xmlNodePtr hole = xml_child(rootc, "pcihole64");
        if (!hole) {
                xmlNodePtr h = new_elem_text("pcihole64", v);
                xmlSetProp(h, (const xmlChar *) "unit", (const xmlChar *) "KiB");
                append_child_unit(rootc, h);
                return xstrdup(" pcihole64-original='none'");
        }
        _cleanup_free_ char *unit = xml_prop(hole, "unit");
        xmlChar *old = xmlNodeGetContent(hole);
        _cleanup_free_ char *esc = (char *) xmlEncodeSpecialChars(d->doc, old);
        char *r = xasprintf(" pcihole64-original='%s' pcihole64-original-unit='%s'", esc, unit ? unit : "none");
        xmlFree(old);
        xmlNodeSetContent(hole, (const xmlChar *) v);
        xmlSetProp(hole, (const xmlChar *) "unit", (const xmlChar *) "KiB");
        return r;
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
        xmlNodeSetContent(hole, (const xmlChar *) orig);
        if (unit && !streq(unit, "none"))
                xmlSetProp(hole, (const xmlChar *) "unit", (const xmlChar *) unit);
        else
                xmlUnsetProp(hole, (const xmlChar *) "unit");
}

#define QEMU_NS "http://libvirt.org/schemas/domain/qemu/1.0"

/* OVMF's 64-bit aperture is the fw_cfg file opt/ovmf/X-PciMmio64Mb.
 * libvirt reserves opt/ovmf/ names in <sysinfo type='fwcfg'> ("That
 * firmware name is reserved", libvirt 9.0), so it goes through QEMU's
 * command line: <qemu:commandline> -fw_cfg name=...,string=MB. */
static char *apply_ovmf_mmio64(struct domain *d, const struct plan *p, char **ret_error) {
        xmlNodePtr root = xmlDocGetRootElement(d->doc);
        bool ns_added = false;
        xmlNsPtr ns = xmlSearchNsByHref(d->doc, root, (const xmlChar *) QEMU_NS);
        if (!ns) {
                ns = xmlNewNs(root, (const xmlChar *) QEMU_NS, (const xmlChar *) "qemu");
                ns_added = true;
        }
        _cleanup_free_ char *val = xasprintf("name=opt/ovmf/X-PciMmio64Mb,string=%" PRIu64, p->pcihole64_kib / 1024);
        xmlNodePtr cl = NULL;
        for (xmlNodePtr c = root->children; c; c = c->next)
                if (c->type == XML_ELEMENT_NODE && c->ns == ns && xmlStrEqual(c->name, (const xmlChar *) "commandline"))
                        cl = c;
        bool created = !cl;
        if (created) {
                cl = xmlNewNode(ns, (const xmlChar *) "commandline");
                insert_unit_after(last_element_child(root), cl);
        }
        xmlNodePtr a1 = xmlNewNode(ns, (const xmlChar *) "arg");
        xmlSetProp(a1, (const xmlChar *) "value", (const xmlChar *) "-fw_cfg");
        xmlNodePtr a2 = xmlNewNode(ns, (const xmlChar *) "arg");
        xmlSetProp(a2, (const xmlChar *) "value", (const xmlChar *) val);
        append_child_unit(cl, a1);
        append_child_unit(cl, a2);
        (void) ret_error;
        return xasprintf(" ovmf-mmio64='%s'%s", created ? "created" : "added", ns_added ? " qemu-ns-added='yes'" : "");
}

static void revert_ovmf_mmio64(struct domain *d, xmlNodePtr mark) {
        _cleanup_free_ char *how = xml_prop(mark, "ovmf-mmio64");
        _cleanup_free_ char *ns_added = xml_prop(mark, "qemu-ns-added");
        if (!how)
                return;
        xmlNodePtr root = xmlDocGetRootElement(d->doc);
        for (xmlNodePtr cl = root->children; cl; cl = cl->next) {
                if (cl->type != XML_ELEMENT_NODE || !cl->ns || !xmlStrEqual(cl->ns->href, (const xmlChar *) QEMU_NS) ||
                    !xmlStrEqual(cl->name, (const xmlChar *) "commandline"))
                        continue;
                if (streq(how, "created"))
                        unlink_unit(d, cl);
                else
                        /* Our two args: "-fw_cfg" followed by the aperture. */
                        for (xmlNodePtr a = cl->children; a; a = a->next) {
                                _cleanup_free_ char *v = a->type == XML_ELEMENT_NODE ? xml_prop(a, "value") : NULL;
                                if (!v || !strstr(v, "opt/ovmf/X-PciMmio64Mb"))
                                        continue;
                                xmlNodePtr prev = a->prev;
                                while (prev && prev->type != XML_ELEMENT_NODE)
                                        prev = prev->prev;
                                remove_child_unit(d, a);
                                if (prev)
                                        remove_child_unit(d, prev);
                                break;
                        }
                break;
        }
        if (ns_added && streq(ns_added, "yes"))
                for (xmlNsPtr *pp = &root->nsDef; *pp; pp = &(*pp)->next)
                        if ((*pp)->href && xmlStrEqual((*pp)->href, (const xmlChar *) QEMU_NS)) {
                                xmlNsPtr dead = *pp;
                                *pp = dead->next;
                                dead->next = NULL;
                                xmlFreeNs(dead);
                                break;
                        }
}

static int write_mark(struct domain *d, const struct plan *p, char **removed_xml, const int *removed_pos,
                      char **orig_addr, const char *single_slots, const char *extra_attrs, char **orig_managed,
                      char **ret_error) {
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

        struct strbuf b = {0};
        strbuf_printf(&b, "<pcinuma:topology xmlns:pcinuma='%s' version='1' policy='%s' migratable='no'%s",
                      PCINUMA_TOPOLOGY_NS, policy_mode_to_string(p->mode), created ? " metadata-created='yes'" : "");
        if (p->n_pruned && single_slots && *single_slots)
                strbuf_printf(&b, " single-function-slots='%s'", single_slots);
        if (p->add_distances)
                strbuf_append(&b, " distances='host'");
        if (extra_attrs)
                strbuf_append(&b, extra_attrs);
        strbuf_append(&b, ">");
        for (size_t i = 0; i < p->n_pxbs; i++) {
                const struct plan_pxb *x = &p->pxbs[i];
                strbuf_printf(&b, "%s<pcinuma:expander controller='%d' guest-cell='%u' host-nodes='%s' busNr='%d'/>",
                              cind, x->index, x->cell, x->host_nodes, x->bus_nr);
        }
        for (size_t i = 0, k = 0; i < p->n_devices; i++) {
                const struct plan_device *pd = &p->devices[i];
                if (pd->action != PLAN_MOVE)
                        continue;
                const struct domain_hostdev *hd = &d->hostdevs[pd->hostdev];
                _cleanup_free_ char *esc = orig_addr[k] ? (char *) xmlEncodeSpecialChars(d->doc, (const xmlChar *) orig_addr[k]) : NULL;
                if (hd->kind == DOMAIN_HOSTDEV_MDEV)
                        strbuf_printf(&b, "%s<pcinuma:device mdev='%s'", cind, hd->mdev_uuid);
                else
                        strbuf_printf(&b, "%s<pcinuma:device host='%s'", cind, pd->name);
                if (pd->class)
                        strbuf_printf(&b, " class='0x%06x'", pd->class);
                strbuf_printf(&b, " host-node='%d'", pd->host_node);
                if (pd->host_socket >= 0)
                        strbuf_printf(&b, " host-socket='%d'", pd->host_socket);
                strbuf_printf(&b, " guest-cell='%d' controller='%d' original-address='%s'/>",
                              pd->cell, pd->port_index, esc ? esc : "none");
                k++;
        }
        /* Ports that carry no device themselves: a guest switch's root
         * and upstream ports. */
        for (size_t i = 0; i < p->n_ports; i++)
                if (p->ports[i].device < 0)
                        strbuf_printf(&b, "%s<pcinuma:controller index='%d' model='%s'/>", cind, p->ports[i].index,
                                      p->ports[i].model);
        for (size_t i = 0; i < p->n_managed; i++)
                strbuf_printf(&b, "%s<pcinuma:managed host='%s' driver='%s' original='%s'/>", cind, p->managed[i].name,
                              p->managed[i].driver, orig_managed[i] ? orig_managed[i] : "absent");
        for (size_t i = 0; i < p->n_pruned; i++) {
                _cleanup_free_ char *esc = (char *) xmlEncodeSpecialChars(d->doc, (const xmlChar *) removed_xml[i]);
                strbuf_printf(&b, "%s<pcinuma:removed controller='%d' position='%d'>%s</pcinuma:removed>",
                              cind, p->pruned[i], removed_pos[i], esc);
        }
        strbuf_printf(&b, "%s</pcinuma:topology>", endind);
        _cleanup_free_ char *s = strbuf_steal(&b);

        if (created) {
                _cleanup_free_ char *ms = xasprintf("<metadata>%s%s%s</metadata>", pretty ? "\n" : "", pretty ? mind : "", "");
                md = parse_fragment(root, ms, ret_error);
                if (!md)
                        return -EINVAL;
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
        }
        xmlNodePtr mark = parse_fragment(md, s, ret_error);
        if (!mark)
                return -EINVAL;
        xmlNodePtr last = last_element_child(md);
        if (last)
                insert_unit_after(last, mark);
        else if (created && pretty) {
                /* <metadata>\n    MARK\n  </metadata> */
                xmlNodePtr text = md->children;   /* "\n" + mind, from the fragment */
                if (text)
                        xmlAddNextSibling(text, mark);
                else
                        xmlAddChild(md, mark);
                _cleanup_free_ char *close = xasprintf("\n%s", ind);
                xmlAddNextSibling(mark, xmlNewText((const xmlChar *) close));
        } else
                xmlAddChild(md, mark);
        return 0;
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

        _cleanup_free_ char *extra = NULL;
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
        extra = xstrdup("");
        orig_managed = xcalloc(p->n_managed ? p->n_managed : 1, sizeof(char *));
        if (p->add_distances)
                apply_distances(d, p);
        if (p->pcihole64_kib) {
                _cleanup_free_ char *a = apply_pcihole64(d, p, ret_error);
                if (!a) {
                        r = -EINVAL;
                        goto out;
                }
                char *e = xasprintf("%s%s", extra, a);
                free(extra);
                extra = e;
                if (p->set_ovmf_mmio64) {
                        _cleanup_free_ char *f = apply_ovmf_mmio64(d, p, ret_error);
                        if (!f) {
                                r = -EINVAL;
                                goto out;
                        }
                        e = xasprintf("%s%s", extra, f);
                        free(extra);
                        extra = e;
                }
        }
        for (size_t i = 0; i < p->n_managed; i++) {
                xmlNodePtr e = d->hostdevs[p->managed[i].hostdev].elem;
                orig_managed[i] = xml_prop(e, "managed");
                xmlSetProp(e, (const xmlChar *) "managed", (const xmlChar *) "no");
        }

        r = write_mark(d, p, removed, removed_pos, orig, single_slots, extra, orig_managed, ret_error);
        for (size_t i = 0; i < p->n_managed; i++)
                free(orig_managed[i]);
        if (r < 0)
                goto out;
        r = domain_reload(d, ret_error);

out:
        for (size_t i = 0; i < n_moved; i++)
                free(orig[i]);
        for (size_t i = 0; i < p->n_pruned; i++)
                free(removed[i]);
        return r;
}

struct removed_ctl {
        int index;
        int position;
        char *xml;
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

struct bus_query {
        int bus;
        bool found;
};

static void check_bus(xmlNodePtr addr, const struct pci_addr *a, void *u) {
        struct bus_query *q = u;
        q->found = q->found || (a->domain == 0 && a->bus == q->bus);
}

/* Does any device's guest PCI address sit on 'bus'? */
static bool bus_referenced(xmlNodePtr devices, int bus) {
        struct bus_query q = { .bus = bus };
        for_each_device_address(devices, check_bus, &q);
        return q.found;
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

int rewrite_revert(struct domain *d, char **ret_warning, char **ret_error) {
        int r = 0;
        xmlNodePtr mark = d->mark;
        if (!mark)
                return 0;
        xmlNodePtr devices = d->devices;
        _cleanup_free_ struct removed_ctl *removed = NULL;
        _cleanup_free_ xmlNodePtr *dev_recs = NULL;
        _cleanup_free_ char *created = NULL, *single_slots = NULL;
        _cleanup_free_ int *lost = NULL;          /* indexes that could not be restored */
        size_t n_removed = 0, n_dev_recs = 0, n_lost = 0;
        struct strbuf warn = {0};

        /* Pass 1: read the mark, and remove the controllers it added. */
        for (xmlNodePtr c = mark->children; c; c = c->next) {
                if (c->type != XML_ELEMENT_NODE)
                        continue;
                const char *name = (const char *) c->name;
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
                        if (ours)
                                unlink_unit(d, e);
                }
                if (streq(name, "managed")) {
                        struct domain_hostdev tmp = { .kind = DOMAIN_HOSTDEV_PCI };
                        _cleanup_free_ char *host = xml_prop(c, "host");
                        _cleanup_free_ char *orig = xml_prop(c, "original");
                        if (host && pci_addr_parse(host, &tmp.host) == 0)
                                for (size_t k = 0; k < d->n_hostdevs; k++)
                                        if (d->hostdevs[k].kind == DOMAIN_HOSTDEV_PCI && pci_addr_eq(&d->hostdevs[k].host, &tmp.host)) {
                                                if (!orig || streq(orig, "absent"))
                                                        xmlUnsetProp(d->hostdevs[k].elem, (const xmlChar *) "managed");
                                                else
                                                        xmlSetProp(d->hostdevs[k].elem, (const xmlChar *) "managed", (const xmlChar *) orig);
                                        }
                }
                if (streq(name, "device"))
                        *GROW(dev_recs, n_dev_recs) = c;
                else if (streq(name, "removed")) {
                        _cleanup_free_ char *pos = xml_prop(c, "position");
                        uint64_t p = 0;
                        if (!has_idx || !pos || parse_uint(pos, 10, INT32_MAX, &p) < 0) {
                                r = set_error(ret_error, -EINVAL, "pcinuma mark: <removed> without a valid controller and position");
                                goto out;
                        }
                        struct removed_ctl *rc = GROW(removed, n_removed);
                        rc->index = (int) idx;
                        rc->position = (int) p;
                        xmlChar *t = xmlNodeGetContent(c);
                        rc->xml = xstrdup(t ? (const char *) t : "");
                        xmlFree(t);
                }
        }

        if (n_removed && !devices) {
                r = set_error(ret_error, -EINVAL, "pcinuma mark lists removed controllers but the domain has no <devices>");
                goto out;
        }

        /* Pass 2: put the pruned controllers back, before any device
         * points at them again.  libvirt fills gaps in controller indexes
         * with empty root ports; an empty filler gives way to the
         * original.  A filler that libvirt has since put a device on
         * stays, and the devices that sat on the original get no address,
         * so libvirt assigns them a free one. */
        if (n_removed > 1)
                qsort(removed, n_removed, sizeof(*removed), cmp_removed);
        for (size_t i = 0; i < n_removed; i++) {
                xmlNodePtr existing = find_controller_elem(devices, removed[i].index);
                if (existing) {
                        if (!elem_has_model(existing, "pcie-root-port") || bus_referenced(devices, removed[i].index)) {
                                strbuf_printf(&warn, "%sPCI controller %d was not restored: libvirt has since put a device on the root port "
                                              "that took its index; the devices that were on it get a new address from libvirt",
                                              warn.len ? "\n" : "", removed[i].index);
                                *GROW(lost, n_lost) = removed[i].index;
                                continue;
                        }
                        unlink_unit(d, existing);
                }
                xmlNodePtr e = parse_fragment(devices, removed[i].xml, ret_error);
                if (!e) {
                        r = -EINVAL;
                        goto out;
                }
                xmlNodePtr ref = element_at(devices, removed[i].position);
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
        for (size_t i = 0; i < n_dev_recs; i++) {
                xmlNodePtr hd = find_hostdev_elem(d, dev_recs[i]);
                if (!hd)
                        continue;   /* removed from the domain since */
                _cleanup_free_ char *orig = xml_prop(dev_recs[i], "original-address");
                xmlNodePtr addr = NULL;
                for (xmlNodePtr a = hd->children; a; a = a->next)
                        if (xml_is(a, "address"))
                                addr = a;
                if (orig && !streq(orig, "none")) {
                        if (!addr) {
                                addr = xmlNewNode(NULL, (const xmlChar *) "address");
                                xmlNodePtr last = last_element_child(hd);
                                if (last)
                                        insert_unit_after(last, addr);
                                else
                                        xmlAddChild(hd, addr);
                        }
                        r = attrs_from_string(addr, orig, ret_error);
                        if (r < 0)
                                goto out;
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
                                _cleanup_free_ char *who = xml_prop(dev_recs[i], "host");
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
        revert_ovmf_mmio64(d, mark);

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
        for (size_t i = 0; i < n_removed; i++)
                free(removed[i].xml);
        return r;
}

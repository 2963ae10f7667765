/* Editing the domain document: applying a plan and reverting it.  The
 * mark that records the edits is mark.c's format: the rewrite builds it as
 * it edits and places it in <metadata>; the revert reads it with
 * mark_parse() and undoes what it records, phase by phase.
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

#include "mark.h"
#include "migrate.h"
#include "nccltopo.h"

/* The indentation of element e: what follows the last newline of the
 * white space in front of it. */
static char *indent_of(xmlNodePtr e) {
        if (!xml_is_ws_text(e->prev))
                return xstrdup("");
        const char *s = (const char *) e->prev->content;
        const char *nl = strrchr(s, '\n');
        return xstrdup(nl ? nl + 1 : s);
}

/* Remove element e from d's document (freed, or kept: domain_remove_node(), domain_snapshot()). */
static void unlink_unit(struct domain *d, xmlNodePtr e) {
        if (xml_is_ws_text(e->prev)) {
                xmlNodePtr ws = e->prev;
                xmlUnlinkNode(ws);
                xmlFreeNode(ws);
        }
        domain_remove_node(d, e);
}

static void insert_unit_before(xmlNodePtr ref, xmlNodePtr e) {
        xmlNodePtr ws = xml_is_ws_text(ref->prev) ? ref->prev : NULL;
        xmlAddPrevSibling(ws ? ws : ref, e);
        if (ws)
                xmlAddPrevSibling(e, xmlNewText(ws->content));
}

static void insert_unit_after(xmlNodePtr ref, xmlNodePtr e) {
        xmlNodePtr ws = xml_is_ws_text(ref->prev) ? ref->prev : NULL;
        xmlAddNextSibling(ref, e);
        if (ws)
                xmlAddPrevSibling(e, xmlNewText(ws->content));
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

static void remove_all_attrs(xmlNodePtr e) {
        while (e->properties)
                xmlRemoveProp(e->properties);
}

static void set_guest_address(xmlNodePtr addr, const struct pci_addr *a) {
        remove_all_attrs(addr);
        xml_set_prop(addr, "type", "pci");
        xml_set_pci_address(addr, a);
}

/* The phases' names in a refusal for want of work (work.h). */
#define PHASE_APPLY "writing the plan into the domain XML"
#define PHASE_REVERT "undoing the pcinuma mark"

/* Spend n units of d's budget on the edit in 'phase'; false once it is
 * spent.  Every walk over a list the input sizes (the devices, a device's
 * children) spends what it visits, so that an edit repeated per record of
 * a forged mark stops at the budget; the phase then reports the refusal
 * (check_work()). */
static bool spend(struct domain *d, size_t n, const char *phase) {
        return work_spend(d->work, n, phase);
}

/* Has d's budget run out?  Then every walk returns at once, finding
 * nothing: the phase goes on to its end quickly and is refused there. */
static bool spent(const struct domain *d) {
        return work_exhausted(d->work);
}

static int check_work(const struct domain *d, char **ret_error) {
        return work_exhausted(d->work) ? work_error(d->work, ret_error) : 0;
}

/* The explicit index of a <controller type='pci'> element, or -1. */
static int controller_index(xmlNodePtr c) {
        if (!xml_is(c, "controller") || !xml_prop_is(c, "type", "pci"))
                return -1;
        _cleanup_free_ char *buf = NULL;
        const char *idx = xml_prop_ref(c, "index", &buf);
        uint64_t v;
        return idx && parse_uint(idx, 0, 255, &v) == 0 ? (int) v : -1;
}

/* Each index's first <controller type='pci'> under devices, as the
 * document is now: one walk for all the lookups of a phase. */
struct controller_map {
        xmlNodePtr at[256];
};

static void controller_map_build(struct domain *d, const char *phase, struct controller_map *m) {
        *m = (struct controller_map) {0};
        size_t n = 0;
        for (xmlNodePtr c = d->devices && !spent(d) ? d->devices->children : NULL; c; c = c->next, n++) {
                int idx = controller_index(c);
                if (idx >= 0 && !m->at[idx])
                        m->at[idx] = c;
        }
        spend(d, n * WORK_NODE, phase);
}

static xmlNodePtr find_controller_elem(struct domain *d, const char *phase, int index) {
        size_t n = 0;
        xmlNodePtr found = NULL;
        for (xmlNodePtr c = d->devices && !spent(d) ? d->devices->children : NULL; c && !found; c = c->next, n++)
                if (controller_index(c) == index)
                        found = c;
        spend(d, n, phase);
        return found;
}

static bool elem_has_model(xmlNodePtr e, const char *model) {
        return model && xml_prop_is(e, "model", model);
}

static int element_position(struct domain *d, xmlNodePtr parent, xmlNodePtr e) {
        int pos = 0;
        size_t n = 0;
        for (xmlNodePtr c = spent(d) ? NULL : parent->children; c; c = c->next, n++) {
                if (c == e)
                        break;
                if (c->type == XML_ELEMENT_NODE)
                        pos++;
        }
        spend(d, n, PHASE_APPLY);
        return pos;
}

static xmlNodePtr element_at(struct domain *d, xmlNodePtr parent, int pos) {
        size_t n = 0;
        xmlNodePtr found = NULL;
        for (xmlNodePtr c = spent(d) ? NULL : parent->children; c && !found; c = c->next, n++)
                if (c->type == XML_ELEMENT_NODE && pos-- == 0)
                        found = c;
        spend(d, n, PHASE_REVERT);
        return found;
}

static xmlNodePtr new_child(xmlDocPtr doc, xmlNodePtr parent, const char *name) {
        xmlNodePtr e = xmlNewDocNode(doc, NULL, (const xmlChar *) name, NULL);
        if (!e)
                abort();
        if (parent)
                xmlAddChild(parent, e);
        return e;
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
        xmlNodePtr first = xml_first_element(devices);
        _cleanup_free_ char *ind = first ? indent_of(first) : xstrdup("");
        bool pretty = first && xml_is_ws_text(first->prev);
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
                xml_set_prop(e, "type", "pci");
                struct pci_addr pa;
                bool multifunction = false;
                if (i < p->n_pxbs) {
                        const struct plan_pxb *x = &p->pxbs[i];
                        xml_set_prop_int(e, "index", x->index);
                        xml_set_prop(e, "model", "pcie-expander-bus");
                        add_text(e, nl, ind2);
                        xmlNodePtr m = new_child(d->doc, e, "model");
                        xml_set_prop(m, "name", "pxb-pcie");
                        add_text(e, nl, ind2);
                        xmlNodePtr t = new_child(d->doc, e, "target");
                        xml_set_prop_int(t, "busNr", x->bus_nr);
                        add_text(t, nl, ind3);
                        char cell[16];
                        snprintf(cell, sizeof cell, "%u", x->cell);
                        xmlNewTextChild(t, NULL, (const xmlChar *) "node", (const xmlChar *) cell);
                        add_text(t, nl, ind2);
                        pa = x->addr;
                } else {
                        const struct plan_port *port = &p->ports[i - p->n_pxbs];
                        xml_set_prop_int(e, "index", port->index);
                        xml_set_prop(e, "model", port->model);
                        pa = (struct pci_addr) { .domain = 0, .bus = (uint8_t) port->parent_index, .slot = port->slot, .func = port->func };
                        multifunction = port->multifunction;
                }
                add_text(e, nl, ind2);
                xmlNodePtr a = new_child(d->doc, e, "address");
                set_guest_address(a, &pa);
                if (multifunction)
                        xml_set_prop(a, "multifunction", "on");
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
        return xml_is(c, "address") && xml_prop_is(c, "type", "pci") && xml_parse_pci_address(c, ret) == 0;
}

/* A guest PCI <address> directly under a device: the device element, the
 * <address> element, the address parsed, and the device's place among
 * <devices>' children ('dead' is the address table's, below). */
struct addr_entry {
        xmlNodePtr dev, addr;
        struct pci_addr a;
        size_t pos;
        bool dead;
};

/* Calls fn for every guest PCI <address> directly under a device, in
 * document order, and spends the walk on phase. */
static void for_each_device_address(struct domain *d, const char *phase,
                                    void (*fn)(const struct addr_entry *e, void *u), void *u) {
        size_t visited = 0, pos = 0;
        for (xmlNodePtr n = spent(d) || !d->devices ? NULL : d->devices->children; n; n = n->next, pos++) {
                visited += WORK_NODE;
                if (n->type != XML_ELEMENT_NODE)
                        continue;
                for (xmlNodePtr c = n->children; c; c = c->next) {
                        struct addr_entry e = { .dev = n, .addr = c, .pos = pos };
                        visited += WORK_NODE;
                        if (pci_address_of(c, &e.a)) {
                                visited += WORK_ADDRESS;
                                fn(&e, u);
                        }
                }
        }
        spend(d, visited, phase);
}

/* The pcie.0 slots whose function 0 carries no multifunction attribute.
 * libvirt adds multifunction='on' to function 0 of any slot where it puts
 * more functions, and the root ports it puts in the index gaps we leave can
 * land there; on revert those slots get their attribute back off. */
static void note_single_function(const struct addr_entry *e, void *u) {
        struct bitmap *slots = u;
        const struct pci_addr *a = &e->a;
        _cleanup_free_ char *mf = xml_prop(e->addr, "multifunction");
        if (a->domain == 0 && a->bus == 0 && a->func == 0 && !mf)
                bitmap_set(slots, a->slot);
}

static char *single_function_slots(struct domain *d) {
        struct bitmap slots = {0};
        for_each_device_address(d, PHASE_APPLY, note_single_function, &slots);
        struct strbuf b = {0};
        for (int slot = bitmap_next(&slots, 0); slot >= 0; slot = bitmap_next(&slots, (unsigned) slot + 1))
                strbuf_printf(&b, "%s0x%02x", b.len ? " " : "", (unsigned) slot);
        bitmap_done(&slots);
        return strbuf_steal(&b);
}

static void unset_multifunction(const struct addr_entry *e, void *u) {
        const struct bitmap *slots = u;
        const struct pci_addr *a = &e->a;
        if (a->domain == 0 && a->bus == 0 && a->func == 0 && bitmap_test(slots, a->slot))
                xml_unset_prop(e->addr, "multifunction");
}

static void clear_multifunction(struct domain *d, const char *slots_text) {
        struct bitmap slots = {0};
        _cleanup_free_ char *copy = xstrdup(slots_text);
        char *save = NULL;
        for (char *tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
                uint64_t slot;
                if (parse_uint(tok, 0, 31, &slot) == 0)
                        bitmap_set(&slots, (unsigned) slot);
        }
        for_each_device_address(d, PHASE_REVERT, unset_multifunction, &slots);
        bitmap_done(&slots);
}

/* Add element e as the last element child of parent, indented one level
 * deeper than parent (or not at all in unindented XML).  For a parent with
 * no children yet the closing indentation is added too; remove_child_unit()
 * undoes both. */
static void append_child_unit(xmlNodePtr parent, xmlNodePtr e) {
        xmlNodePtr last = xml_last_element(parent);
        if (last) {
                insert_unit_after(last, e);
                return;
        }
        bool pretty = xml_is_ws_text(parent->prev);
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
        if (parent && !xml_last_element(parent))
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
                        xml_set_prop(sib, "id", v);
                        snprintf(v, sizeof v, "%d", p->distances[id * n + j]);
                        xml_set_prop(sib, "value", v);
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

/* The pcie-root: index 0, or written without an index (libvirt gives it
 * 0, as the first controller of the document order). */
static xmlNodePtr pcie_root_elem(struct domain *d, const char *phase) {
        xmlNodePtr e = find_controller_elem(d, phase, 0);
        if (e)
                return elem_has_model(e, "pcie-root") ? e : NULL;
        size_t n = 0;
        for (xmlNodePtr c = d->devices && !spent(d) ? d->devices->children : NULL; c; c = c->next, n++)
                if (xml_is(c, "controller") && xml_prop_is(c, "type", "pci") && elem_has_model(c, "pcie-root") &&
                    !xml_has_prop(c, "index")) {
                        e = c;
                        break;
                }
        spend(d, n, phase);
        return e;
}

/* mmio64: <pcihole64 unit='KiB'> on the pcie-root (created when the XML
 * leaves the pcie-root implicit).  The mark records what was there
 * (pcie-root-created, pcihole64-original[-unit]) for revert. */
static void apply_pcihole64(struct domain *d, const struct plan *p, struct mark *f) {
        char v[32];
        snprintf(v, sizeof v, "%" PRIu64, p->pcihole64_kib);
        xmlNodePtr rootc = pcie_root_elem(d, PHASE_APPLY);
        if (!rootc) {
                xmlNodePtr first = xml_first_element(d->devices);
                xmlNodePtr anchor = xml_child(d->devices, "emulator");
                xmlNodePtr e = xmlNewDocNode(d->doc, NULL, (const xmlChar *) "controller", NULL);
                xml_set_prop(e, "type", "pci");
                xml_set_prop(e, "index", "0");
                xml_set_prop(e, "model", "pcie-root");
                if (anchor)
                        insert_unit_after(anchor, e);
                else if (first)
                        insert_unit_before(first, e);
                else
                        xmlAddChild(d->devices, e);
                xmlNodePtr h = new_elem_text("pcihole64", v);
                xml_set_prop(h, "unit", "KiB");
                append_child_unit(e, h);
                f->pcie_root_created = xstrdup("yes");
                return;
        }
        xmlNodePtr hole = xml_child(rootc, "pcihole64");
        if (!hole) {
                xmlNodePtr h = new_elem_text("pcihole64", v);
                xml_set_prop(h, "unit", "KiB");
                append_child_unit(rootc, h);
                f->pcihole64_original = xstrdup("none");
                return;
        }
        _cleanup_free_ char *unit = xml_prop(hole, "unit");
        xmlChar *old = xmlNodeGetContent(hole);
        f->pcihole64_original = xstrdup(old ? (const char *) old : "");
        f->pcihole64_original_unit = xstrdup(unit ? unit : "none");
        xmlFree(old);
        xmlNodeSetContent(hole, (const xmlChar *) v);
        xml_set_prop(hole, "unit", "KiB");
}

static void revert_pcihole64(struct domain *d, const struct mark *mk) {
        const char *created = mk->pcie_root_created, *orig = mk->pcihole64_original, *unit = mk->pcihole64_original_unit;
        xmlNodePtr rootc = d->devices ? pcie_root_elem(d, PHASE_REVERT) : NULL;
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
                xml_set_prop(hole, "unit", unit);
        else
                xml_unset_prop(hole, "unit");
}

#define QEMU_NS "http://libvirt.org/schemas/domain/qemu/1.0"
#define OVMF_MMIO64_ARG "name=opt/ovmf/X-PciMmio64Mb,string="

/* An element <qemu:NAME> (by namespace URI, whatever its prefix). */
static bool is_qemu_elem(xmlNodePtr n, const char *name) {
        return xml_is_ns(n, QEMU_NS, name);
}

/* The last <qemu:commandline> of the domain, or NULL. */
static xmlNodePtr qemu_commandline(xmlNodePtr root) {
        xmlNodePtr cl = NULL;
        for (xmlNodePtr c = root->children; c; c = c->next)
                if (is_qemu_elem(c, "commandline"))
                        cl = c;
        return cl;
}

/* The qemu namespace for a new element beside 'near' (an existing qemu
 * element, or NULL): near's own, else one in scope at the root, else a new
 * declaration on the root (recorded as qemu-ns-added for revert). */
static xmlNsPtr qemu_ns(struct domain *d, xmlNodePtr near, struct mark *f) {
        xmlNodePtr root = xmlDocGetRootElement(d->doc);
        xmlNsPtr ns = near ? near->ns : xmlSearchNsByHref(d->doc, root, (const xmlChar *) QEMU_NS);
        if (!ns) {
                /* "qemu", unless the root binds that prefix to another URI. */
                for (unsigned i = 0; !ns; i++) {
                        char prefix[16];
                        if (i > 1000)
                                abort();
                        snprintf(prefix, sizeof prefix, i ? "qemu%u" : "qemu", i);
                        ns = xmlNewNs(root, (const xmlChar *) QEMU_NS, (const xmlChar *) prefix);
                }
                f->qemu_ns_added = xstrdup("yes");
        }
        return ns;
}

/* Add "-fw_cfg VALUE" at the end of the user's <qemu:commandline>, in its
 * own namespace declaration, or of one pcinuma creates at the end of the
 * domain.  Returns what the mark records: "created" or "added". */
static char *add_fw_cfg(struct domain *d, struct mark *f, const char *value) {
        xmlNodePtr root = xmlDocGetRootElement(d->doc);
        xmlNodePtr cl = qemu_commandline(root);
        xmlNsPtr ns = qemu_ns(d, cl, f);
        bool created = !cl;
        if (created) {
                cl = xmlNewDocNode(d->doc, ns, (const xmlChar *) "commandline", NULL);
                insert_unit_after(xml_last_element(root), cl);
        }
        xmlNodePtr a1 = xmlNewDocNode(d->doc, ns, (const xmlChar *) "arg", NULL);
        xml_set_prop(a1, "value", "-fw_cfg");
        xmlNodePtr a2 = xmlNewDocNode(d->doc, ns, (const xmlChar *) "arg", NULL);
        xml_set_prop(a2, "value", value);
        append_child_unit(cl, a1);
        append_child_unit(cl, a2);
        return xstrdup(created ? "created" : "added");
}

/* OVMF's 64-bit aperture is the fw_cfg file opt/ovmf/X-PciMmio64Mb.
 * libvirt reserves opt/ovmf/ names in <sysinfo type='fwcfg'> ("That
 * firmware name is reserved", libvirt 9.0), so it goes through QEMU's
 * command line: <qemu:commandline> -fw_cfg name=...,string=MB.  The mark
 * records ovmf-mmio64 and qemu-ns-added for revert. */
static void apply_ovmf_mmio64(struct domain *d, const struct plan *p, struct mark *f) {
        _cleanup_free_ char *val = xasprintf(OVMF_MMIO64_ARG "%" PRIu64, p->pcihole64_kib / 1024);
        f->ovmf_mmio64 = add_fw_cfg(d, f, val);
}

/* nccl_topology: the guest's NCCL topology file as fw_cfg
 * opt/org.pcinuma/nccl-topo.xml (nccltopo.h).  Also on the command line:
 * <sysinfo type='fwcfg'><entry> reaches the guest XML-escaped (&lt;, ...),
 * which NCCL cannot read, and a file= entry would need a file QEMU can
 * read; the command line carries the text itself, with the definition.
 * The mark records nccl-topology and the argument's SHA-256. */
static void apply_nccl_topology(struct domain *d, const struct plan *p, struct mark *f) {
        f->nccl_topology = add_fw_cfg(d, f, p->nccl_arg);
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

/* Undo add_fw_cfg(): remove only the two arguments pcinuma added (the
 * last "-fw_cfg" followed by an argument that begins with 'prefix'), and
 * the <qemu:commandline> only if pcinuma created it and it is empty now:
 * the user may have added arguments since. */
static void revert_fw_cfg(struct domain *d, const char *how, const char *prefix) {
        xmlNodePtr root = xmlDocGetRootElement(d->doc);
        xmlNodePtr a1 = NULL, a2 = NULL;
        for (xmlNodePtr cl = root->children; cl; cl = cl->next) {
                if (!is_qemu_elem(cl, "commandline"))
                        continue;
                for (xmlNodePtr a = cl->children; a; a = a->next)
                        if (qemu_arg_is(a, "-fw_cfg", false) && qemu_arg_is(xml_next_element(a), prefix, true)) {
                                a1 = a;
                                a2 = xml_next_element(a);
                        }
        }
        if (a1) {
                xmlNodePtr cl = a1->parent;
                remove_child_unit(d, a2);
                remove_child_unit(d, a1);
                if (streq(how, "created") && !xml_last_element(cl))
                        unlink_unit(d, cl);
        }
}

/* Last of the qemu parts: the namespace, only if pcinuma declared it and
 * nothing uses it any more (the user may have added <qemu:capabilities>,
 * <qemu:override> or arguments since). */
static void revert_qemu_ns(struct domain *d) {
        xmlNodePtr root = xmlDocGetRootElement(d->doc);
        for (xmlNsPtr ns = root->nsDef; ns; ns = ns->next)
                if (ns->href && xmlStrEqual(ns->href, (const xmlChar *) QEMU_NS)) {
                        if (!ns_used(root, ns))
                                domain_remove_ns(d, root, ns);
                        break;
                }
}

/* --- gpudirect_clique -------------------------------------------------------- */

#define CLIQUE_PROP "x-nv-gpudirect-clique"

/* The alias pcinuma gives a GPU's hostdev that has no user alias:
 * "ua-pcinuma-" and its host BDF, stable across plans.  malloc'ed. */
static char *clique_alias(const char *bdf) {
        char *s = xasprintf("ua-pcinuma-%s", bdf);
        for (char *c = s; *c; c++)
                if (*c == ':' || *c == '.')
                        *c = '-';
        return s;
}

/* Does element n (a <qemu:device>) set our property somewhere below it? */
static bool sets_clique_prop(xmlNodePtr n) {
        for (xmlNodePtr c = n->children; c; c = c->next) {
                if (c->type != XML_ELEMENT_NODE)
                        continue;
                if (is_qemu_elem(c, "property")) {
                        _cleanup_free_ char *name = xml_prop(c, "name");
                        if (name && streq(name, CLIQUE_PROP))
                                return true;
                }
                if (sets_clique_prop(c))
                        return true;
        }
        return false;
}

/* The <qemu:device> elements of every <qemu:override> of the domain, by
 * alias then document order: one walk for all of a phase's lookups (a
 * domain may hold thousands; a mark, a clique record per GPU).  Devices
 * added while it is used are not in it: libvirt keeps aliases unique, so
 * none is looked up. */
struct override_entry {
        char *alias;
        xmlNodePtr dev;                 /* NULL once removed */
        bool ours;                      /* it sets the clique property (sets_clique_prop()) */
        size_t order;
};

struct override_index {
        struct override_entry *v;
        size_t n;
};

static void override_index_done(struct override_index *x) {
        for (size_t i = 0; i < x->n; i++)
                free(x->v[i].alias);
        free(x->v);
        *x = (struct override_index) {0};
}

static int cmp_override(const void *a, const void *b) {
        const struct override_entry *x = a, *y = b;
        int c = strcmp(x->alias, y->alias);
        return c ? c : (x->order > y->order) - (x->order < y->order);
}

static void override_index_build(struct domain *d, xmlNodePtr root, const char *phase, struct override_index *x) {
        *x = (struct override_index) {0};
        size_t visited = 0;
        for (xmlNodePtr o = spent(d) ? NULL : root->children; o; o = o->next, visited++) {
                if (!is_qemu_elem(o, "override"))
                        continue;
                for (xmlNodePtr c = o->children; c; c = c->next, visited++) {
                        _cleanup_free_ char *a = is_qemu_elem(c, "device") ? xml_prop(c, "alias") : NULL;
                        if (a)
                                *GROW(x->v, x->n) = (struct override_entry) {
                                        .alias = TAKE_PTR(a), .dev = c, .ours = sets_clique_prop(c), .order = x->n,
                                };
                }
        }
        if (x->n > 1)
                qsort(x->v, x->n, sizeof(*x->v), cmp_override);
        spend(d, visited + x->n * 2, phase);
}

/* The first <qemu:device alias='alias'> (with 'ours': only one that sets
 * the clique property) in document order, or NULL. */
static struct override_entry *override_device(struct override_index *x, const char *alias, bool ours) {
        size_t lo = 0, hi = x->n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (strcmp(x->v[mid].alias, alias) < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        for (size_t i = lo; i < x->n && streq(x->v[i].alias, alias); i++)
                if (x->v[i].dev && (!ours || x->v[i].ours))
                        return &x->v[i];
        return NULL;
}

/* A new <qemu:NAME> appended to parent, in parent's namespace. */
static xmlNodePtr append_qemu_child(struct domain *d, xmlNodePtr parent, const char *name) {
        xmlNodePtr e = xmlNewDocNode(d->doc, parent->ns, (const xmlChar *) name, NULL);
        append_child_unit(parent, e);
        return e;
}

/* gpudirect_clique: auto.  QEMU's vfio-pci takes the id as the property
 * x-nv-gpudirect-clique; libvirt passes it through <qemu:override> on the
 * hostdev's alias, which must be a user alias ("ua-...") to survive in a
 * persistent definition.  A GPU without one gets <alias
 * name='ua-pcinuma-BDF'/> (libvirt's own alias, from a live XML, is
 * renamed); each GPU gets a <qemu:device> in the domain's <qemu:override>,
 * created when there is none.  A GPU whose alias the user's override names
 * already is left to the user.  The mark records each step for revert. */
static void apply_cliques(struct domain *d, const struct plan *p, struct mark *mk) {
        xmlNodePtr root = xmlDocGetRootElement(d->doc);
        xmlNodePtr ovr = NULL;
        _cleanup_(override_index_done) struct override_index overrides;
        override_index_build(d, root, PHASE_APPLY, &overrides);
        for (size_t i = 0; i < p->n_cliques && i < mk->n_cliques; i++) {
                const struct plan_device *pd = &p->devices[p->cliques[i].device];
                struct mark_clique *rec = &mk->cliques[i];
                xmlNodePtr hd = d->hostdevs[pd->hostdev].elem;
                xmlNodePtr al = xml_child(hd, "alias");
                _cleanup_free_ char *name = al ? xml_prop(al, "name") : NULL;
                if (name && mark_is_user_alias(name)) {
                        rec->alias = TAKE_PTR(name);
                        if (override_device(&overrides, rec->alias, false)) {
                                rec->override = xstrdup("user");
                                continue;
                        }
                } else if (al && !mark_is_alias_name(name)) {
                        /* Not an alias libvirt writes: leave this GPU alone. */
                        rec->alias = clique_alias(pd->name);
                        rec->override = xstrdup("user");
                        continue;
                } else {
                        rec->alias = clique_alias(pd->name);
                        if (al) {
                                rec->alias_original = TAKE_PTR(name);
                                xml_set_prop(al, "name", rec->alias);
                        } else {
                                rec->alias_original = xstrdup("none");
                                al = xmlNewDocNode(d->doc, NULL, (const xmlChar *) "alias", NULL);
                                xml_set_prop(al, "name", rec->alias);
                                /* libvirt's order: ..., <alias>, <address>. */
                                xmlNodePtr addr = d->hostdevs[pd->hostdev].addr_elem;
                                if (!addr || addr->parent != hd)
                                        addr = xml_child(hd, "address");
                                if (addr)
                                        insert_unit_before(addr, al);
                                else
                                        insert_unit_after(xml_last_element(hd), al);
                        }
                }
                if (!ovr) {
                        for (xmlNodePtr c = root->children; c && !ovr; c = c->next)
                                if (is_qemu_elem(c, "override"))
                                        ovr = c;
                        if (ovr)
                                mk->qemu_override = xstrdup("added");
                        else {
                                ovr = xmlNewDocNode(d->doc, qemu_ns(d, NULL, mk), (const xmlChar *) "override", NULL);
                                insert_unit_after(xml_last_element(root), ovr);
                                mk->qemu_override = xstrdup("created");
                        }
                }
                char id[16];
                snprintf(id, sizeof id, "%d", rec->id);
                xmlNodePtr dev = append_qemu_child(d, ovr, "device");
                xml_set_prop(dev, "alias", rec->alias);
                xmlNodePtr prop = append_qemu_child(d, append_qemu_child(d, dev, "frontend"), "property");
                xml_set_prop(prop, "name", CLIQUE_PROP);
                xml_set_prop(prop, "type", "unsigned");
                xml_set_prop(prop, "value", id);
        }
}

/* Undo apply_cliques(): our <qemu:device> entries (by alias, setting the
 * clique property), the aliases pcinuma added or renamed, and the
 * <qemu:override> if pcinuma created it and it is empty now
 * (restore_features() then removes the namespace if it may). */
static void revert_cliques(struct domain *d, const struct mark *mk) {
        xmlNodePtr root = xmlDocGetRootElement(d->doc);
        _cleanup_(override_index_done) struct override_index overrides;
        override_index_build(d, root, PHASE_REVERT, &overrides);
        for (size_t i = 0; i < mk->n_cliques; i++) {
                const struct mark_clique *rec = &mk->cliques[i];
                if (rec->override || !rec->alias)
                        continue;
                struct override_entry *dev = override_device(&overrides, rec->alias, true);
                if (dev) {
                        remove_child_unit(d, dev->dev);
                        dev->dev = NULL;
                }
                struct pci_addr a;
                if (!rec->alias_original || !rec->host || pci_addr_parse(rec->host, &a) < 0)
                        continue;
                const struct domain_hostdev *hd = domain_find_pci_hostdev(d, &a);
                if (!hd)
                        continue;
                xmlNodePtr al = xml_child(hd->elem, "alias");
                _cleanup_free_ char *name = al ? xml_prop(al, "name") : NULL;
                if (!name || !streq(name, rec->alias))
                        continue;
                if (streq(rec->alias_original, "none"))
                        unlink_unit(d, al);
                else
                        xml_set_prop(al, "name", rec->alias_original);
        }
        if (mk->qemu_override && streq(mk->qemu_override, "created")) {
                xmlNodePtr last = NULL;
                for (xmlNodePtr c = root->children; c; c = c->next)
                        if (is_qemu_elem(c, "override"))
                                last = c;
                if (last && !xml_last_element(last))
                        unlink_unit(d, last);
        }
}

/* --- writing the mark ---------------------------------------------------- */

/* The indentation the mark and its parts get, from the document's own:
 * nothing when the input is not pretty-printed. */
struct mark_indent {
        bool pretty;
        char *root;             /* of the root's children (and of a created <metadata>) */
        char *mark;             /* of the mark */
        char *child;            /* "\n" + of the mark's children, or "" */
        char *end;              /* "\n" + of the mark's end tag, or "" */
};

static void mark_indent_done(struct mark_indent *in) {
        free(in->root);
        free(in->mark);
        free(in->child);
        free(in->end);
}

static void mark_indent(xmlNodePtr root, xmlNodePtr md, struct mark_indent *ret) {
        xmlNodePtr first = xml_first_element(root);
        struct mark_indent in = { .pretty = first && xml_is_ws_text(first->prev) };
        in.root = first ? indent_of(first) : xstrdup("");
        xmlNodePtr last = md ? xml_last_element(md) : NULL;
        in.mark = last ? indent_of(last) : in.pretty ? xasprintf("%s  ", in.root) : xstrdup("");
        in.child = in.pretty ? xasprintf("\n%s  ", in.mark) : xstrdup("");
        in.end = in.pretty ? xasprintf("\n%s", in.mark) : xstrdup("");
        *ret = in;
}

/* Put the mark into <metadata>, after its last element; or into a new
 * <metadata> (md NULL) where libvirt keeps it. */
static void place_mark(struct domain *d, xmlNodePtr md, xmlNodePtr mark, const struct mark_indent *in) {
        xmlNodePtr root = xmlDocGetRootElement(d->doc);
        if (md) {
                xmlNodePtr last = xml_last_element(md);
                if (last)
                        insert_unit_after(last, mark);
                else
                        xmlAddChild(md, mark);
                return;
        }
        md = xmlNewDocNode(d->doc, NULL, (const xmlChar *) "metadata", NULL);
        /* libvirt's order: name, uuid, (genid,) title, description, metadata. */
        xmlNodePtr anchor = NULL, first = xml_first_element(root);
        for (xmlNodePtr c = root->children; c; c = c->next)
                if (xml_is(c, "name") || xml_is(c, "uuid") || xml_is(c, "genid") || xml_is(c, "title") || xml_is(c, "description"))
                        anchor = c;
        if (anchor)
                insert_unit_after(anchor, md);
        else if (first)
                insert_unit_before(first, md);
        else
                xmlAddChild(root, md);
        if (!in->pretty) {
                xmlAddChild(md, mark);
                return;
        }
        /* <metadata>\n    MARK\n  </metadata> */
        _cleanup_free_ char *open = xasprintf("\n%s", in->mark);
        _cleanup_free_ char *close = xasprintf("\n%s", in->root);
        xmlAddChild(md, xmlNewDocText(d->doc, (const xmlChar *) open));
        xmlAddChild(md, mark);
        xmlAddChild(md, xmlNewDocText(d->doc, (const xmlChar *) close));
}

/* Write the mark mk (docs/design.md §7, mark.h) into <metadata>, created if
 * needed, indented as the document is. */
static void write_mark(struct domain *d, struct mark *mk) {
        xmlNodePtr md = xml_child(xmlDocGetRootElement(d->doc), "metadata");
        struct mark_indent in;
        mark_indent(xmlDocGetRootElement(d->doc), md, &in);
        if (!md)
                mk->metadata_created = xstrdup("yes");
        place_mark(d, md, mark_write(mk, d->doc, in.child, in.end), &in);
        mark_indent_done(&in);
}

/* --- applying a plan ------------------------------------------------------- */

/* Record what the pruned controllers were in mk, before anything moves.
 * (Through the model: a controller may have no index attribute.) */
static int record_pruned(struct domain *d, const struct plan *p, struct mark *mk, xmlNodePtr *elems, char **ret_error) {
        for (size_t i = 0; i < p->n_pruned; i++) {
                const struct domain_controller *pc = domain_find_controller(d, p->pruned[i]);
                xmlNodePtr e = pc ? pc->elem : NULL;
                elems[i] = e;
                if (!e)
                        return set_error(ret_error, -EINVAL, "internal error: controller %d to prune is missing", p->pruned[i]);
                mk->removed[i].xml = node_dump(d->doc, e);
                mk->removed[i].position = element_position(d, d->devices, e);
        }
        return 0;
}

/* Give each moved device its guest address; the mark keeps the old one. */
static void move_devices(struct domain *d, const struct plan *p, struct mark *mk) {
        for (size_t i = 0, k = 0; i < p->n_devices; i++) {
                const struct plan_device *pd = &p->devices[i];
                if (pd->action != PLAN_MOVE)
                        continue;
                struct domain_hostdev *hd = &d->hostdevs[pd->hostdev];
                if (hd->addr_elem) {
                        mk->devices[k].original_address = mark_address_encode(hd->addr_elem);
                        set_guest_address(hd->addr_elem, &pd->guest);
                        /* Function 0 of a host device whose functions stay together. */
                        if (pd->multifunction)
                                xml_set_prop(hd->addr_elem, "multifunction", "on");
                } else {
                        mk->devices[k].original_address = xstrdup("none");
                        xmlNodePtr a = xmlNewNode(NULL, (const xmlChar *) "address");
                        set_guest_address(a, &pd->guest);
                        if (pd->multifunction)
                                xml_set_prop(a, "multifunction", "on");
                        xmlNodePtr last = xml_last_element(hd->elem);
                        if (last)
                                insert_unit_after(last, a);
                        else
                                xmlAddChild(hd->elem, a);
                }
                k++;
        }
}

/* The feature switches (docs/policy.md); the mark records what they changed. */
static void apply_features(struct domain *d, const struct plan *p, struct mark *mk) {
        if (p->add_distances)
                apply_distances(d, p);
        if (p->pcihole64_kib) {
                apply_pcihole64(d, p, mk);
                if (p->set_ovmf_mmio64)
                        apply_ovmf_mmio64(d, p, mk);
        }
        if (p->nccl_arg)
                apply_nccl_topology(d, p, mk);
        for (size_t i = 0; i < p->n_managed; i++) {
                xmlNodePtr e = d->hostdevs[p->managed[i].hostdev].elem;
                char *orig = xml_prop(e, "managed");
                mk->managed[i].original = orig ? orig : xstrdup("absent");
                xml_set_prop(e, "managed", "no");
        }
        if (p->n_cliques)
                apply_cliques(d, p, mk);
}

int rewrite_apply(struct domain *d, const struct plan *p, char **ret_error) {
        int r;
        if (d->mark)
                return set_error(ret_error, -EINVAL, "internal error: the domain already carries a pcinuma mark");
        if (p->verdict != PLAN_APPLY)
                return set_error(ret_error, -EINVAL, "internal error: plan verdict is %s", plan_verdict_to_string(p->verdict));
        if (!d->devices)
                return set_error(ret_error, -EINVAL, "the domain has no <devices>");

        _cleanup_(mark_done) struct mark mk = {0};
        mark_build(p, d, &mk);
        _cleanup_free_ char *single_slots = single_function_slots(d);
        if (p->n_pruned && single_slots && *single_slots)
                mk.single_function_slots = TAKE_PTR(single_slots);

        _cleanup_free_ xmlNodePtr *pruned_elems = xcalloc(p->n_pruned ? p->n_pruned : 1, sizeof(xmlNodePtr));
        r = record_pruned(d, p, &mk, pruned_elems, ret_error);
        if (r < 0)
                return r;
        move_devices(d, p, &mk);

        /* Prune, then add. */
        for (size_t i = 0; i < p->n_pruned; i++)
                unlink_unit(d, pruned_elems[i]);
        r = add_controllers(d, p, ret_error);
        if (r < 0)
                return r;
        apply_features(d, p, &mk);

        write_mark(d, &mk);
        r = check_work(d, ret_error);
        if (r < 0)
                return r;
        return domain_reload(d, ret_error);
}

/* --- reverting ------------------------------------------------------------- */

static int cmp_removed(const void *a, const void *b) {
        const struct mark_removed *x = a, *y = b;
        return (x->position > y->position) - (x->position < y->position);
}

/* The hostdev element a device record names (a lookup in the domain's
 * index, which the revert's edits leave valid: they move no hostdev). */
static xmlNodePtr find_hostdev_elem(struct domain *d, const struct mark_device *rec) {
        struct pci_addr a;
        if (!rec->mdev && (!rec->host || pci_addr_parse(rec->host, &a) < 0))
                return NULL;
        const struct domain_hostdev *hd = rec->mdev ? domain_find_mdev_hostdev(d, rec->mdev) : domain_find_pci_hostdev(d, &a);
        return hd ? hd->elem : NULL;
}

/* The guest PCI addresses of the devices, as for_each_device_address()
 * finds them, read in one walk and kept up to date as a phase edits them:
 * the revert asks who sits on a bus or at an address once per record,
 * and a walk of the devices per question (each address parsed again)
 * grew with the domain times the mark.  Entries are in document order;
 * 'pos' is the device's place among <devices>' children then (struct
 * addr_entry, above). */

struct addr_table {
        struct addr_entry *v;
        size_t n;
};

static void addr_table_done(struct addr_table *t) {
        free(t->v);
        *t = (struct addr_table) {0};
}

static void addr_table_add(const struct addr_entry *e, void *u) {
        struct addr_table *t = u;
        *GROW(t->v, t->n) = *e;
}

static void addr_table_build(struct domain *d, struct addr_table *t) {
        *t = (struct addr_table) {0};
        for_each_device_address(d, PHASE_REVERT, addr_table_add, t);
}

/* Device element 'dev' left the document: its addresses with it. */
static void addr_table_drop_dev(struct domain *d, struct addr_table *t, xmlNodePtr dev) {
        for (size_t i = 0; i < t->n; i++)
                if (t->v[i].dev == dev)
                        t->v[i].dead = true;
        spend(d, t->n, PHASE_REVERT);
}

/* <address> element 'addr' left the document, or holds a (parsed) address
 * now; 'dev' is its device, at place 'pos'. */
static void addr_table_set(struct domain *d, struct addr_table *t, xmlNodePtr dev, xmlNodePtr addr, size_t pos, bool gone) {
        struct addr_entry *e = NULL;
        for (size_t i = 0; i < t->n && !e; i++)
                if (t->v[i].addr == addr)
                        e = &t->v[i];
        spend(d, t->n, PHASE_REVERT);
        struct pci_addr a;
        bool pci = !gone && pci_address_of(addr, &a);
        if (!e && !pci)
                return;
        if (!e)
                e = GROW(t->v, t->n);
        *e = (struct addr_entry) { .dev = dev, .addr = addr, .a = pci ? a : (struct pci_addr) {0}, .pos = pos, .dead = !pci };
}

/* A device's place among <devices>' children when the table was made:
 * that of an entry of it, or counted. */
static size_t addr_table_pos(struct domain *d, const struct addr_table *t, xmlNodePtr dev) {
        for (size_t i = 0; i < t->n; i++)
                if (t->v[i].dev == dev)
                        return t->v[i].pos;
        size_t pos = 0;
        for (xmlNodePtr n = d->devices ? d->devices->children : NULL; n && n != dev; n = n->next)
                pos++;
        spend(d, t->n + pos * WORK_NODE, PHASE_REVERT);
        return pos;
}

/* Who sits on a bus: the first device (an element under <devices>) with a
 * guest PCI address on it, other than those in 'except'. */
static xmlNodePtr bus_user(struct domain *d, const struct addr_table *t, int bus, xmlNodePtr const *except,
                           size_t n_except, struct pci_addr *ret_at) {
        spend(d, t->n, PHASE_REVERT);
        for (size_t i = 0; i < t->n; i++) {
                const struct addr_entry *e = &t->v[i];
                if (e->dead || e->a.domain != 0 || e->a.bus != bus)
                        continue;
                bool excepted = false;
                for (size_t k = 0; k < n_except && !excepted; k++)
                        excepted = e->dev == except[k];
                spend(d, n_except, PHASE_REVERT);
                if (excepted)
                        continue;
                if (ret_at)
                        *ret_at = e->a;
                return e->dev;
        }
        return NULL;
}

/* Does any device's guest PCI address sit on 'bus'? */
static bool bus_referenced(struct domain *d, const struct addr_table *t, int bus) {
        return bus_user(d, t, bus, NULL, 0, NULL) != NULL;
}

/* The device (other than 'except') whose guest address is *a, first in
 * document order, or NULL. */
static xmlNodePtr address_user(struct domain *d, const struct addr_table *t, const struct pci_addr *a, xmlNodePtr except) {
        const struct addr_entry *best = NULL;
        for (size_t i = 0; i < t->n; i++) {
                const struct addr_entry *e = &t->v[i];
                if (!e->dead && e->dev != except && pci_addr_eq(&e->a, a) && (!best || e->pos < best->pos))
                        best = e;
        }
        spend(d, t->n, PHASE_REVERT);
        return best ? best->dev : NULL;
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

/* What rewrite_revert() works from: the mark, parsed and checked before
 * the document changes, and what it names in the document. */
struct revert_state {
        struct mark mark;
        xmlNodePtr *ours;               /* the controllers pcinuma added, as found in the document */
        size_t n_ours;
        xmlNodePtr *moved;              /* the hostdev elements the device records name (that still exist) */
        size_t n_moved;
        int *lost;                      /* pruned controllers' indexes that could not be restored */
        size_t n_lost;
        struct strbuf warn;
};

static void revert_state_done(struct revert_state *s) {
        mark_done(&s->mark);
        free(s->ours);
        free(s->moved);
        free(s->lost);
        strbuf_done(&s->warn);
}

/* The controller a record of the mark names, if it is still what pcinuma
 * added (a controller's model must match), or NULL. */
static xmlNodePtr our_controller(const struct controller_map *map, const struct mark *mk, const struct mark_record_ref *ref) {
        switch (ref->kind) {
        case MARK_EXPANDER: {
                xmlNodePtr e = map->at[mk->expanders[ref->i].controller];
                return elem_has_model(e, "pcie-expander-bus") ? e : NULL;
        }
        case MARK_DEVICE: {
                xmlNodePtr e = map->at[mk->devices[ref->i].controller];
                return elem_has_model(e, "pcie-root-port") || elem_has_model(e, "pcie-switch-downstream-port") ? e : NULL;
        }
        case MARK_CONTROLLER: {
                xmlNodePtr e = map->at[mk->controllers[ref->i].index];
                return elem_has_model(e, mk->controllers[ref->i].model) ? e : NULL;
        }
        }
        return NULL;
}

/* Read and check d's mark into s, and find what it names.  An error names
 * what is wrong; the document is not touched. */
static int read_mark(struct domain *d, struct revert_state *s, char **ret_error) {
        int r = mark_parse(d->mark, d->devices, &s->mark, ret_error);
        if (r < 0)
                return r;
        const struct mark *mk = &s->mark;
        struct controller_map map;
        controller_map_build(d, PHASE_REVERT, &map);
        /* Each controller once (records of one index name one element). */
        bool taken[256] = { false };
        for (size_t i = 0; i < mk->n_order && d->devices; i++) {
                const struct mark_record_ref *ref = &mk->order[i];
                int idx = ref->kind == MARK_EXPANDER ? mk->expanders[ref->i].controller
                        : ref->kind == MARK_DEVICE ? mk->devices[ref->i].controller : mk->controllers[ref->i].index;
                xmlNodePtr e = idx >= 0 && idx <= 255 ? our_controller(&map, mk, ref) : NULL;
                if (e && !taken[idx]) {
                        taken[idx] = true;
                        *GROW(s->ours, s->n_ours) = e;
                }
        }
        for (size_t i = 0; i < mk->n_devices; i++) {
                xmlNodePtr hd = find_hostdev_elem(d, &mk->devices[i]);
                if (hd)
                        *GROW(s->moved, s->n_moved) = hd;
        }
        return check_work(d, ret_error);
}

static const struct domain_controller *controller_of(const struct domain *d, xmlNodePtr e) {
        for (size_t k = 0; k < d->n_controllers; k++)
                if (d->controllers[k].elem == e)
                        return &d->controllers[k];
        return NULL;
}

/* Pass 1: remove the controllers pcinuma added (d's model still describes
 * the document as it was), except those a device the mark does not move
 * back still sits on (the user may have put a disk or a NIC on one of our
 * root ports, or a port on our expander bus): those stay, with a warning
 * naming the port and the device.  A port that stays keeps its parent;
 * so, leaves first, until nothing more can go. */
static void remove_our_controllers(struct domain *d, struct revert_state *s) {
        _cleanup_free_ bool *gone = xcalloc(s->n_ours ? s->n_ours : 1, sizeof(bool));
        _cleanup_(addr_table_done) struct addr_table t;
        addr_table_build(d, &t);
        for (bool progress = true; progress;) {
                progress = false;
                for (size_t i = 0; i < s->n_ours; i++) {
                        if (gone[i])
                                continue;
                        const struct domain_controller *c = controller_of(d, s->ours[i]);
                        if (!c || bus_user(d, &t, c->index, s->moved, s->n_moved, NULL))
                                continue;
                        addr_table_drop_dev(d, &t, s->ours[i]);
                        unlink_unit(d, s->ours[i]);
                        gone[i] = progress = true;
                }
        }
        for (size_t i = 0; i < s->n_ours; i++) {
                if (gone[i])
                        continue;
                const struct domain_controller *c = controller_of(d, s->ours[i]);
                struct pci_addr at;
                xmlNodePtr user = c ? bus_user(d, &t, c->index, s->moved, s->n_moved, &at) : NULL;
                if (!user)
                        continue;
                _cleanup_free_ char *who = describe_device(user);
                strbuf_printf(&s->warn, "%sPCI controller %d (%s) that pcinuma added was kept: %s at %04x:%02x:%02x.%x sits on it",
                              s->warn.len ? "\n" : "", c->index, c->model, who, at.domain, at.bus, at.slot, at.func);
        }
}

/* Pass 1 too: the hostdevs' managed= as they were. */
static void restore_managed(struct domain *d, const struct mark *mk) {
        for (size_t i = 0; i < mk->n_managed; i++) {
                const char *h = mk->managed[i].host, *orig = mk->managed[i].original;
                struct pci_addr host;
                if (!h || pci_addr_parse(h, &host) < 0)
                        continue;
                const struct domain_hostdev *hd = domain_find_pci_hostdev(d, &host);
                if (hd && (!orig || streq(orig, "absent")))
                        xml_unset_prop(hd->elem, "managed");
                else if (hd)
                        xml_set_prop(hd->elem, "managed", orig);
        }
}

/* Pass 2: put the pruned controllers back, before any device points at
 * them again.  libvirt fills gaps in controller indexes with empty root
 * ports; an empty filler gives way to the original.  A filler that libvirt
 * has since put a device on stays, and the devices that sat on the
 * original get no address, so libvirt assigns them a free one. */
static void restore_pruned(struct domain *d, struct revert_state *s) {
        xmlNodePtr devices = d->devices;
        struct mark *mk = &s->mark;
        if (mk->n_removed > 1)
                qsort(mk->removed, mk->n_removed, sizeof(*mk->removed), cmp_removed);
        /* The controllers as the document holds them now (pcinuma's are
         * gone), kept up to date below: explicit indexes are unique (the
         * domain parser and mark_parse() see to it). */
        struct controller_map map;
        controller_map_build(d, PHASE_REVERT, &map);
        _cleanup_(addr_table_done) struct addr_table t;
        addr_table_build(d, &t);
        for (size_t i = 0; i < mk->n_removed; i++) {
                int index = mk->removed[i].controller;
                xmlNodePtr existing = index >= 0 && index <= 255 ? map.at[index] : NULL;
                if (existing) {
                        if (!elem_has_model(existing, "pcie-root-port") || bus_referenced(d, &t, mk->removed[i].controller)) {
                                strbuf_printf(&s->warn, "%sPCI controller %d was not restored: libvirt has since put a device on the root port "
                                              "that took its index; the devices that were on it get a new address from libvirt",
                                              s->warn.len ? "\n" : "", mk->removed[i].controller);
                                *GROW(s->lost, s->n_lost) = mk->removed[i].controller;
                                continue;
                        }
                        addr_table_drop_dev(d, &t, existing);
                        unlink_unit(d, existing);
                        map.at[index] = NULL;
                }
                xmlNodePtr e = TAKE_PTR(mk->removed[i].elem);
                /* (its place in the table's order does not matter here:
                 * this phase only asks whether a bus is used) */
                for (xmlNodePtr c = e->children; c; c = c->next)
                        addr_table_set(d, &t, e, c, 0, false);
                int e_index = controller_index(e);
                if (e_index >= 0 && !map.at[e_index])
                        map.at[e_index] = e;
                xmlNodePtr ref = element_at(d, devices, mk->removed[i].position);
                if (ref)
                        insert_unit_before(ref, e);
                else {
                        xmlNodePtr last = xml_last_element(devices);
                        if (last)
                                insert_unit_after(last, e);
                        else
                                xmlAddChild(devices, e);
                }
        }
}

/* Put device record rec's original address on its hostdev hd, whose
 * current <address> is *addr (or NULL).  *addr becomes the <address> to
 * remove (so that libvirt picks a free one), or NULL when it is restored. */
static int restore_address(struct domain *d, struct revert_state *s, struct addr_table *t, const struct mark_device *rec,
                           xmlNodePtr hd, xmlNodePtr *io_addr, char **ret_error) {
        xmlNodePtr addr = *io_addr;
        if (!addr) {
                addr = xmlNewDocNode(d->doc, NULL, (const xmlChar *) "address", NULL);
                xmlNodePtr last = xml_last_element(hd);
                if (last)
                        insert_unit_after(last, addr);
                else
                        xmlAddChild(hd, addr);
        }
        *io_addr = addr;
        int r = mark_address_decode(addr, rec->original_address, ret_error);
        if (r < 0)
                return r;   /* checked by mark_parse(): cannot happen */
        struct pci_addr a;
        bool on_lost = false;
        xmlNodePtr taken = NULL;
        if (xml_parse_pci_address(addr, &a) == 0) {
                for (size_t k = 0; k < s->n_lost; k++)
                        on_lost = on_lost || (a.domain == 0 && a.bus == s->lost[k]);
                taken = address_user(d, t, &a, hd);
        }
        if (!on_lost && !taken) {
                addr_table_set(d, t, hd, addr, addr_table_pos(d, t, hd), false);
                *io_addr = NULL;
                return 0;
        }
        /* libvirt put another device at the original address (an
         * unaddressed one lands on an empty root port): let libvirt pick a
         * free address instead. */
        if (taken)
                strbuf_printf(&s->warn, "%sdevice %s could not go back to its original address "
                              "%04x:%02x:%02x.%x: <%s> now sits there; libvirt gives it a free address",
                              s->warn.len ? "\n" : "", rec->host ? rec->host : "?", a.domain, a.bus, a.slot, a.func,
                              (const char *) taken->name);
        return 0;
}

/* Pass 3: the devices' original addresses. */
static int restore_addresses(struct domain *d, struct revert_state *s, char **ret_error) {
        _cleanup_(addr_table_done) struct addr_table t;
        addr_table_build(d, &t);
        for (size_t i = 0; i < s->mark.n_devices; i++) {
                const struct mark_device *rec = &s->mark.devices[i];
                xmlNodePtr hd = find_hostdev_elem(d, rec);
                if (!hd)
                        continue;   /* removed from the domain since */
                xmlNodePtr addr = NULL;
                size_t n = 0;
                for (xmlNodePtr a = spent(d) ? NULL : hd->children; a; a = a->next, n++)
                        if (xml_is(a, "address"))
                                addr = a;
                spend(d, n, PHASE_REVERT);
                if (rec->original_address && !streq(rec->original_address, "none")) {
                        int r = restore_address(d, s, &t, rec, hd, &addr, ret_error);
                        if (r < 0)
                                return r;
                }
                if (addr) {
                        addr_table_set(d, &t, hd, addr, 0, true);
                        unlink_unit(d, addr);
                }
        }
        return 0;
}

/* The feature switches and the multifunction flags. */
static void restore_features(struct domain *d, const struct mark *mk) {
        if (mk->single_function_slots && d->devices)
                clear_multifunction(d, mk->single_function_slots);
        if (mk->distances && streq(mk->distances, "host"))
                revert_distances(d);
        revert_pcihole64(d, mk);
        /* In the reverse order of apply_features(), the namespace last. */
        if (mk->n_cliques)
                revert_cliques(d, mk);
        if (mk->nccl_topology)
                revert_fw_cfg(d, mk->nccl_topology, NCCLTOPO_FWCFG_PREFIX);
        if (mk->ovmf_mmio64)
                revert_fw_cfg(d, mk->ovmf_mmio64, OVMF_MMIO64_ARG);
        if (mk->qemu_ns_added && streq(mk->qemu_ns_added, "yes"))
                revert_qemu_ns(d);
}

/* Last: the mark, and the <metadata> if pcinuma created it and it is
 * empty now. */
static void remove_mark(struct domain *d, const struct mark *mk) {
        xmlNodePtr md = d->mark->parent;
        unlink_unit(d, d->mark);
        d->mark = NULL;
        if (mk->metadata_created && streq(mk->metadata_created, "yes") && md && !xml_last_element(md))
                unlink_unit(d, md);
}

int rewrite_revert(struct domain *d, char **ret_warning, char **ret_error) {
        if (!d->mark)
                return 0;
        _cleanup_(revert_state_done) struct revert_state s = {0};

        /* Read and check the whole mark first: a mark it refuses leaves
         * the document as it was. */
        int r = read_mark(d, &s, ret_error);
        if (r < 0)
                return r;
        if (d->devices)
                remove_our_controllers(d, &s);
        restore_managed(d, &s.mark);
        restore_pruned(d, &s);
        r = restore_addresses(d, &s, ret_error);
        if (r < 0)
                return r;
        restore_features(d, &s.mark);
        remove_mark(d, &s.mark);
        /* A revert that ran out of work is refused (the caller drops the
         * half-edited document). */
        r = check_work(d, ret_error);
        if (r < 0)
                return r;

        r = domain_reload(d, ret_error);
        if (r < 0)
                return r;
        if (ret_warning && s.warn.len)
                *ret_warning = strbuf_steal(&s.warn);
        return 1;
}

/* --- an incoming migration -------------------------------------------------- */

/* The pairs sorted by what they map from (PCI by name, mdevs by UUID in
 * any case), for remap_mark()'s lookups. */
struct pair_index {
        const struct migrate_pair **v;
        size_t n;
};

static int cmp_pair(const void *a, const void *b) {
        const struct migrate_pair *x = *(const struct migrate_pair *const *) a, *y = *(const struct migrate_pair *const *) b;
        if (x->mdev != y->mdev)
                return x->mdev - y->mdev;
        return x->mdev ? strcasecmp(x->from, y->from) : strcmp(x->from, y->from);
}

static const struct migrate_pair *pair_find(const struct pair_index *pi, bool mdev, const char *from) {
        struct migrate_pair key = { .from = (char *) from, .mdev = mdev };
        const struct migrate_pair *k = &key, **hit = bsearch(&k, pi->v, pi->n, sizeof(*pi->v), cmp_pair);
        return hit ? *hit : NULL;
}

/* The mark's records, in one pass: every <device>, <managed> and <clique>
 * naming a mapped device's old host (for an mdev, a <device> naming its
 * old mdev) names its new one, a device with its position and socket
 * here, so that the destination's plan matches the mark.  Each record is
 * read once, so that a device's new name that is another's old one is
 * never renamed twice. */
static void remap_mark(xmlNodePtr mark, const struct migrate_map *map) {
        struct pair_index pi = { .v = xcalloc(map->n_pairs ? map->n_pairs : 1, sizeof(*pi.v)), .n = map->n_pairs };
        for (size_t k = 0; k < map->n_pairs; k++)
                pi.v[k] = &map->pairs[k];
        qsort(pi.v, pi.n, sizeof(*pi.v), cmp_pair);
        for (xmlNodePtr c = mark->children; c; c = c->next) {
                bool device = xml_is_ns(c, PCINUMA_TOPOLOGY_NS, "device");
                if (!device && !xml_is_ns(c, PCINUMA_TOPOLOGY_NS, "managed") && !xml_is_ns(c, PCINUMA_TOPOLOGY_NS, "clique"))
                        continue;
                _cleanup_free_ char *host = xml_prop(c, "host"), *mdev = device ? xml_prop(c, "mdev") : NULL;
                const struct migrate_pair *p = host ? pair_find(&pi, false, host) : NULL;
                if (!p && mdev)
                        p = pair_find(&pi, true, mdev);
                if (!p)
                        continue;
                xml_set_prop(c, p->mdev ? "mdev" : "host", p->to);
                if (!device)
                        continue;
                xml_set_prop(c, "position", p->to_position);
                if (xml_has_prop(c, "host-socket")) {
                        if (p->to_socket >= 0)
                                xml_set_prop_int(c, "host-socket", p->to_socket);
                        else
                                xml_unset_prop(c, "host-socket");
                }
        }
        free(pi.v);
}

void rewrite_migrate(struct domain *d, const struct migrate_map *map, const size_t *hostdev_of) {
        /* The hostdev sources, each through the <source><address> the
         * domain parser read (pair k is mark device k's), then the mark.
         * The guest side stays. */
        for (size_t k = 0; k < map->n_pairs; k++) {
                const struct migrate_pair *p = &map->pairs[k];
                xmlNodePtr src = d->hostdevs[hostdev_of[k]].src_addr;
                struct pci_addr a;
                if (!src)
                        continue;       /* a stand-in (a test build's): the read-back refuses it */
                if (p->mdev)
                        xml_set_prop(src, "uuid", p->to);
                else if (pci_addr_parse(p->to, &a) == 0)
                        xml_set_pci_address(src, &a);
        }
        remap_mark(d->mark, map);
        xml_set_prop(d->mark, "fingerprint", map->fingerprint);
}

/* hwloc XML of a planned guest or of the host (hwloctopo.h).  Both build
 * the same small tree (normal objects for the locality, I/O objects below
 * them) and write it in hwloc 2's XML. */
#include "hwloctopo.h"

#include <stdarg.h>
#include <stdint.h>

#include "util.h"

/* QEMU's IDs of the ports libvirt adds (pcie-root-port, x3130-upstream,
 * xio3130-downstream), for the guest's bridges. */
#define ID_ROOT_PORT 0x1b36000cu
#define ID_SWITCH_UP 0x104c8232u
#define ID_SWITCH_DOWN 0x104c8233u
#define CLASS_PCI_BRIDGE 0x060400u

enum obj_kind {
        OBJ_MACHINE,
        OBJ_PACKAGE,
        OBJ_GROUP,
        OBJ_NUMANODE,
        OBJ_CORE,
        OBJ_PU,
        OBJ_HOST_BRIDGE,        /* Bridge 0-1 */
        OBJ_PCI_BRIDGE,         /* Bridge 1-1 */
        OBJ_PCIDEV,
        OBJ_OSDEV,
        OBJ_MISC,
};

/* hwloc 2's enum hwloc_obj_osdev_type_e, as its XML writes it. */
enum osdev_type {
        OSDEV_BLOCK = 0,
        OSDEV_GPU = 1,
        OSDEV_NETWORK = 2,
        OSDEV_OPENFABRICS = 3,
        OSDEV_COPROC = 5,
};

struct info {
        char *name, *value;
};

struct obj {
        enum obj_kind kind;
        int os_index;                   /* -1: none */
        struct bitmap cpuset, nodeset;  /* normal objects */
        /* I/O */
        struct pci_addr busid;          /* PCI bridge, PCIDev */
        unsigned domain, sec, sub;      /* bridges: the buses below */
        uint32_t class;                 /* 24 bits */
        uint16_t vendor, device;
        unsigned depth;                 /* bridges */
        int root_bus;                   /* a host's host bridge: its root bus, to find it again; -1 */
        char *name;                     /* Misc, OSDev */
        char *subtype;                  /* what lstopo shows instead of the type's name, or NULL */
        enum osdev_type osdev_type;
        struct info *infos;
        size_t n_infos;
        struct obj **children;
        size_t n_children;
};

static struct obj *obj_new(struct obj *parent, enum obj_kind kind, int os_index) {
        struct obj *o = xcalloc(1, sizeof(*o));
        o->kind = kind;
        o->os_index = os_index;
        o->root_bus = -1;
        if (parent)
                *GROW(parent->children, parent->n_children) = o;
        return o;
}

static void obj_free(struct obj *o) {
        if (!o)
                return;
        for (size_t i = 0; i < o->n_children; i++)
                obj_free(o->children[i]);
        free(o->children);
        for (size_t i = 0; i < o->n_infos; i++) {
                free(o->infos[i].name);
                free(o->infos[i].value);
        }
        free(o->infos);
        free(o->name);
        free(o->subtype);
        bitmap_done(&o->cpuset);
        bitmap_done(&o->nodeset);
        free(o);
}

_printf_(3, 4) static void obj_info(struct obj *o, const char *name, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        *GROW(o->infos, o->n_infos) = (struct info) { .name = xstrdup(name), .value = xvasprintf(fmt, ap) };
        va_end(ap);
}

/* --- writing --------------------------------------------------------- */

/* hwloc's bitmap form: the kernel's cpumap words, each with 0x; "0x0"
 * when empty. */
static void xml_bitmap(struct strbuf *b, const char *name, const struct bitmap *m) {
        strbuf_printf(b, " %s=\"", name);
        if (bitmap_isempty(m))
                strbuf_append(b, "0x0");
        else
                strbuf_bitmap_words(b, m, "0x");
        strbuf_append(b, "\"");
}

static const char *type_name(enum obj_kind k) {
        static const char *const names[] = {
                [OBJ_MACHINE] = "Machine", [OBJ_PACKAGE] = "Package", [OBJ_GROUP] = "Group",
                [OBJ_NUMANODE] = "NUMANode", [OBJ_CORE] = "Core", [OBJ_PU] = "PU",
                [OBJ_HOST_BRIDGE] = "Bridge", [OBJ_PCI_BRIDGE] = "Bridge", [OBJ_PCIDEV] = "PCIDev", [OBJ_OSDEV] = "OSDev",
                [OBJ_MISC] = "Misc",
        };
        return names[k];
}

static bool is_normal(enum obj_kind k) {
        return k <= OBJ_PU;
}

static void write_obj(struct strbuf *b, const struct obj *o, unsigned indent, unsigned *gp) {
        char buf[64];
        strbuf_printf(b, "%*s<object", (int) indent, "");
        strbuf_xml_attr(b, "type", type_name(o->kind));
        if (o->subtype)
                strbuf_xml_attr(b, "subtype", o->subtype);
        if (o->os_index >= 0) {
                snprintf(buf, sizeof buf, "%d", o->os_index);
                strbuf_xml_attr(b, "os_index", buf);
        }
        if (is_normal(o->kind)) {
                xml_bitmap(b, "cpuset", &o->cpuset);
                xml_bitmap(b, "complete_cpuset", &o->cpuset);
                if (o->kind == OBJ_MACHINE)
                        xml_bitmap(b, "allowed_cpuset", &o->cpuset);
                xml_bitmap(b, "nodeset", &o->nodeset);
                xml_bitmap(b, "complete_nodeset", &o->nodeset);
                if (o->kind == OBJ_MACHINE)
                        xml_bitmap(b, "allowed_nodeset", &o->nodeset);
        }
        snprintf(buf, sizeof buf, "%u", ++*gp);
        strbuf_xml_attr(b, "gp_index", buf);
        if (o->kind == OBJ_MISC || o->kind == OBJ_OSDEV)
                strbuf_xml_attr(b, "name", o->name ? o->name : "");
        if (o->kind == OBJ_OSDEV) {
                snprintf(buf, sizeof buf, "%d", (int) o->osdev_type);
                strbuf_xml_attr(b, "osdev_type", buf);
        }
        if (o->kind == OBJ_HOST_BRIDGE || o->kind == OBJ_PCI_BRIDGE) {
                strbuf_xml_attr(b, "bridge_type", o->kind == OBJ_HOST_BRIDGE ? "0-1" : "1-1");
                snprintf(buf, sizeof buf, "%u", o->depth);
                strbuf_xml_attr(b, "depth", buf);
                snprintf(buf, sizeof buf, "%04x:[%02x-%02x]", o->domain, o->sec, o->sub);
                strbuf_xml_attr(b, "bridge_pci", buf);
        }
        if (o->kind == OBJ_PCI_BRIDGE || o->kind == OBJ_PCIDEV) {
                char bdf[PCI_ADDR_STRLEN];
                strbuf_xml_attr(b, "pci_busid", pci_addr_format(&o->busid, bdf));
                /* class (base and sub class), [vendor:device],
                 * [subvendor:subdevice], revision */
                snprintf(buf, sizeof buf, "%04x [%04x:%04x] [0000:0000] 00", (unsigned) (o->class >> 8), o->vendor, o->device);
                strbuf_xml_attr(b, "pci_type", buf);
                strbuf_xml_attr(b, "pci_link_speed", "0.000000");
        }
        if (!o->n_infos && !o->n_children) {
                strbuf_append(b, "/>\n");
                return;
        }
        strbuf_append(b, ">\n");
        for (size_t i = 0; i < o->n_infos; i++) {
                strbuf_printf(b, "%*s<info", (int) indent + 2, "");
                strbuf_xml_attr(b, "name", o->infos[i].name);
                strbuf_xml_attr(b, "value", o->infos[i].value);
                strbuf_append(b, "/>\n");
        }
        for (size_t i = 0; i < o->n_children; i++)
                write_obj(b, o->children[i], indent + 2, gp);
        strbuf_printf(b, "%*s</object>\n", (int) indent, "");
}

static char *write_topology(const struct obj *root) {
        struct strbuf b = {0};
        unsigned gp = 0;
        strbuf_append(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                          "<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
                          "<topology version=\"2.0\">\n");
        write_obj(&b, root, 2, &gp);
        strbuf_append(&b, "</topology>\n");
        return strbuf_steal(&b);
}

/* --- I/O objects ------------------------------------------------------- */

static struct obj *add_host_bridge(struct obj *parent, unsigned domain, unsigned sec, unsigned sub) {
        struct obj *o = obj_new(parent, OBJ_HOST_BRIDGE, -1);
        o->domain = domain;
        o->sec = sec;
        o->sub = sub;
        return o;
}

static struct obj *add_pci_bridge(struct obj *parent, const struct pci_addr *at, uint32_t id, unsigned sec, unsigned sub) {
        struct obj *o = obj_new(parent, OBJ_PCI_BRIDGE, -1);
        o->busid = *at;
        o->domain = at->domain;
        o->class = CLASS_PCI_BRIDGE;
        o->vendor = (uint16_t) (id >> 16);
        o->device = (uint16_t) id;
        o->depth = parent->kind == OBJ_HOST_BRIDGE ? 1 : parent->depth + 1;
        o->sec = sec;
        o->sub = sub;
        return o;
}

static struct obj *add_pcidev(struct obj *parent, const struct pci_addr *at, const struct hostmap_device *hd) {
        struct obj *o = obj_new(parent, OBJ_PCIDEV, -1);
        o->busid = *at;
        if (hd) {
                o->class = hd->class;
                o->vendor = hd->vendor;
                o->device = hd->device;
        }
        return o;
}

/* An OS device below PCI device o, named 'name' (taken), of the kind its
 * class says: lstopo draws it, "GPU host 0000:13:00.0", inside o's box. */
static void add_osdev(struct obj *o, uint32_t class, char *name) {
        struct obj *os = obj_new(o, OBJ_OSDEV, -1);
        os->name = name;
        os->osdev_type = (class >> 16) == 0x03 ? OSDEV_GPU
                       : (class >> 8) == 0x0207 || (class >> 8) == 0x0c06 ? OSDEV_OPENFABRICS
                       : (class >> 16) == 0x02 ? OSDEV_NETWORK
                       : (class >> 16) == 0x01 ? OSDEV_BLOCK : OSDEV_COPROC;
}

/* --- the guest ------------------------------------------------------- */

/* The last bus number below port: its own secondary bus, or a bus of a
 * port below it. */
static unsigned port_sub(const struct plan *p, const struct plan_port *port, unsigned guard) {
        unsigned sub = (unsigned) port->sec_bus;
        for (size_t i = 0; i < p->n_ports && guard < 64; i++)
                if (p->ports[i].parent_index == port->index) {
                        unsigned s = port_sub(p, &p->ports[i], guard + 1);
                        if (s > sub)
                                sub = s;
                }
        return sub;
}

/* A guest device at 'at': its host's IDs, and an OS device whose name is
 * its host BDF, which is what lstopo draws inside the device's box (its
 * infos are not drawn); its type says what kind of device it is. */
static void add_device(struct obj *parent, const struct plan_device *pd, const struct domain *d, const struct hostmap *h,
                       const struct pci_addr *at) {
        const struct hostmap_device *hd = plan_host_device(h, &d->hostdevs[pd->hostdev]);
        struct obj *o = add_pcidev(parent, at, hd);
        obj_info(o, "PCINUMAHostBusID", "%s", pd->name);
        if (pd->known)
                obj_info(o, "PCINUMAHostNode", "%d", pd->host_node);
        add_osdev(o, hd ? hd->class : 0, xasprintf("host %s", pd->name));
}

/* The ports plugged into controller 'index' (a pxb or a port), with the
 * devices on them, below parent. */
static void add_ports(struct obj *parent, const struct plan *p, const struct domain *d, const struct hostmap *h, int index,
                      unsigned bus, unsigned guard) {
        for (size_t i = 0; i < p->n_ports && guard < 64; i++) {
                const struct plan_port *port = &p->ports[i];
                if (port->parent_index != index)
                        continue;
                struct pci_addr at = { .domain = 0, .bus = (uint8_t) bus, .slot = port->slot, .func = port->func };
                uint32_t id = streq(port->model, PLAN_SWITCH_UP) ? ID_SWITCH_UP
                            : streq(port->model, PLAN_SWITCH_DOWN) ? ID_SWITCH_DOWN : ID_ROOT_PORT;
                struct obj *o = add_pci_bridge(parent, &at, id, (unsigned) port->sec_bus, port_sub(p, port, 0));
                obj_info(o, "PCINUMAController", "%s index %d", port->model, port->index);
                for (size_t k = 0; k < p->n_devices; k++) {
                        const struct plan_device *pd = &p->devices[k];
                        struct pci_addr dev_at;
                        if (pd->action != PLAN_MOVE || pd->port_index != port->index || pci_addr_parse(pd->guest_bdf, &dev_at) < 0)
                                continue;
                        add_device(o, pd, d, h, &dev_at);
                }
                add_ports(o, p, d, h, port->index, (unsigned) port->sec_bus, guard + 1);
        }
}

/* Guest node 'id' below parent, with its vCPUs (a Core and a PU each)
 * beside it; the Machine's and parent's sets grow to hold them. */
static struct obj *add_guest_node(struct obj *m, struct obj *parent, unsigned id, const struct bitmap *cpus) {
        bitmap_or(&m->cpuset, cpus);
        bitmap_set(&m->nodeset, id);
        if (parent != m) {
                bitmap_or(&parent->cpuset, cpus);
                bitmap_set(&parent->nodeset, id);
        }
        struct obj *node = obj_new(parent, OBJ_NUMANODE, (int) id);
        bitmap_or(&node->cpuset, cpus);
        bitmap_set(&node->nodeset, id);
        for (int v = bitmap_next(cpus, 0); v >= 0; v = bitmap_next(cpus, (unsigned) v + 1)) {
                struct obj *core = obj_new(parent, OBJ_CORE, v);
                struct obj *pu = obj_new(core, OBJ_PU, v);
                bitmap_set(&core->cpuset, (unsigned) v);
                bitmap_set(&core->nodeset, id);
                bitmap_set(&pu->cpuset, (unsigned) v);
                bitmap_set(&pu->nodeset, id);
        }
        return node;
}

/* The guest's cells below m: a Package each ("Guest cell (host node N)")
 * holding its NUMANode and vCPUs; a cell without vCPUs has no Package,
 * its NUMANode (and its I/O) hang from the Machine.  Returns each cell's
 * object, in d->cells' order.  A domain without cells is one node, 0,
 * holding every vCPU, as the guest sees it (hwloc wants a node). */
static struct obj **add_guest_cells(struct obj *m, const struct domain *d) {
        struct obj **cell_obj = xcalloc(d->n_cells ? d->n_cells : 1, sizeof(*cell_obj));
        if (!d->n_cells) {
                _cleanup_(bitmap_done) struct bitmap all = {0};
                for (unsigned v = 0; v < d->vcpus; v++)
                        bitmap_set(&all, v);
                add_guest_node(m, m, 0, &all);
                return cell_obj;
        }
        for (size_t i = 0; i < d->n_cells; i++) {
                const struct domain_cell *c = &d->cells[i];
                bool cpus = bitmap_next(&c->cpus, 0) >= 0;
                struct obj *pkg = cpus ? obj_new(m, OBJ_PACKAGE, (int) c->id) : m;
                if (cpus) {
                        _cleanup_free_ char *nodes = bitmap_isempty(&c->host_nodes) ? NULL : bitmap_format(&c->host_nodes);
                        pkg->subtype = nodes ? xasprintf("Guest cell (host node%s %s)",
                                                         bitmap_count(&c->host_nodes) > 1 ? "s" : "", nodes)
                                             : xstrdup("Guest cell (no host node)");
                }
                struct obj *node = add_guest_node(m, pkg, c->id, &c->cpus);
                if (!bitmap_isempty(&c->host_nodes)) {
                        _cleanup_free_ char *nodes = bitmap_format(&c->host_nodes);
                        obj_info(node, "PCINUMAHostNodes", "%s", nodes);
                }
                cell_obj[i] = pkg;
        }
        return cell_obj;
}

/* The devices that stay: on pcie.0 when their address is there, else
 * where libvirt puts them (a Misc object says so). */
static void add_staying(struct obj *m, const struct plan *p, const struct domain *d, const struct hostmap *h) {
        struct obj *pcie0 = NULL;
        for (size_t i = 0; i < p->n_devices; i++) {
                const struct plan_device *pd = &p->devices[i];
                if (pd->action == PLAN_MOVE)
                        continue;
                const struct domain_hostdev *hd = &d->hostdevs[pd->hostdev];
                if (hd->has_guest_addr && hd->guest.bus == 0) {
                        if (!pcie0) {
                                pcie0 = add_host_bridge(m, hd->guest.domain, 0, 0);
                                obj_info(pcie0, "PCINUMAController", "pcie.0");
                        }
                        add_device(pcie0, pd, d, h, &hd->guest);
                        continue;
                }
                struct obj *misc = obj_new(m, OBJ_MISC, -1);
                misc->name = xasprintf("%s: %s", pd->name, hd->has_guest_addr ? "on the pcie.0 side" : "address chosen by libvirt");
        }
}

char *hwloctopo_guest(const struct plan *p, const struct domain *d, const struct hostmap *h) {
        struct obj *m = obj_new(NULL, OBJ_MACHINE, 0);
        obj_info(m, "PCINUMATopology", "guest %s, %s", d->name ? d->name : "(unnamed)",
                 p->verdict == PLAN_APPLY ? "as planned" : "as it is (the plan does not apply)");
        /* lstopo adds the root's lstopoLegend infos to its legend. */
        obj_info(m, "lstopoLegend", "%s %s (pcinuma, policy %s); each device names its host BDF",
                 d->name ? d->name : "(unnamed)", p->verdict == PLAN_APPLY ? "as planned" : "as it is, not planned",
                 policy_mode_to_string(p->mode));
        struct obj **cell_obj = add_guest_cells(m, d);
        /* Each expander bus below its cell's Package. */
        for (size_t i = 0; i < p->n_pxbs; i++) {
                const struct plan_pxb *x = &p->pxbs[i];
                struct obj *under = m;
                for (size_t c = 0; c < d->n_cells; c++)
                        if (d->cells[c].id == x->cell)
                                under = cell_obj[c];
                struct obj *hb = add_host_bridge(under, 0, (unsigned) x->bus_nr, (unsigned) x->bus_nr + x->n_buses - 1);
                obj_info(hb, "PCINUMAController", "pcie-expander-bus index %d at 0000:00:%02x.0, guest cell %u", x->index,
                         x->addr.slot, x->cell);
                add_ports(hb, p, d, h, x->index, (unsigned) x->bus_nr, 0);
        }
        add_staying(m, p, d, h);
        free(cell_obj);
        char *s = write_topology(m);
        obj_free(m);
        return s;
}

/* --- the host -------------------------------------------------------- */

/* "pci0000:3a" -> domain 0, bus 0x3a. */
static bool parse_host_bridge(const char *name, unsigned *ret_domain, unsigned *ret_bus) {
        unsigned dom, bus;
        char tail;
        if (!name || sscanf(name, "pci%x:%x%c", &dom, &bus, &tail) != 2 || dom > 0xffff || bus > 0xff)
                return false;
        *ret_domain = dom;
        *ret_bus = bus;
        return true;
}

/* The child of parent that is bridge a, made when missing. */
static struct obj *bridge_child(struct obj *parent, const struct hostmap *h, const struct pci_addr *a) {
        for (size_t i = 0; i < parent->n_children; i++) {
                struct obj *c = parent->children[i];
                if (c->kind == OBJ_PCI_BRIDGE && pci_addr_eq(&c->busid, a))
                        return c;
        }
        const struct hostmap_device *b = hostmap_find_device(h, a);
        struct obj *o = add_pci_bridge(parent, a, b ? (uint32_t) b->vendor << 16 | b->device : 0, 0xff, 0);
        o->class = b && b->class ? b->class : CLASS_PCI_BRIDGE;
        return o;
}

/* The bus range below each bridge, from the devices found below it
 * (sysfs's secondary and subordinate numbers are not in the host map). */
static void fix_ranges(struct obj *o) {
        bool bridge = o->kind == OBJ_HOST_BRIDGE || o->kind == OBJ_PCI_BRIDGE;
        for (size_t i = 0; i < o->n_children; i++) {
                struct obj *c = o->children[i];
                fix_ranges(c);
                if (!bridge)
                        continue;
                unsigned lo = c->busid.bus, hi = c->kind == OBJ_PCI_BRIDGE && c->sub > c->busid.bus ? c->sub : c->busid.bus;
                if (lo < o->sec)
                        o->sec = lo;
                if (hi > o->sub)
                        o->sub = hi;
        }
        if (bridge && o->sec > o->sub)
                o->sec = o->sub;
}

/* The normal object for host node 'node' (NULL: the Machine). */
static struct obj *node_object(struct obj *m, struct obj **by_node, const struct hostmap *h, int node) {
        for (size_t i = 0; i < h->n_nodes; i++)
                if (h->nodes[i].id == node)
                        return by_node[i] ? by_node[i] : m;
        return m;
}

/* The object that holds host node n's NUMANode and CPUs (a Package of
 * its own when it is its socket's only node with CPUs, else a Group in
 * the socket's Package, or in the Machine when it has no socket), made
 * below m; the Package is made with the socket's first node.  A node
 * without CPUs (memory only) hangs from the Machine: NULL. */
static struct obj *add_host_node(struct obj *m, const struct hostmap *h, size_t i) {
        const struct hostmap_node *n = &h->nodes[i];
        if (bitmap_next(&n->cpus, 0) < 0) {
                struct obj *node = obj_new(m, OBJ_NUMANODE, n->id);
                bitmap_set(&node->nodeset, (unsigned) n->id);
                return NULL;
        }
        size_t on_socket = 0, first = i;
        for (size_t k = 0; k < h->n_nodes; k++)
                if (n->socket >= 0 && h->nodes[k].socket == n->socket && bitmap_next(&h->nodes[k].cpus, 0) >= 0) {
                        on_socket++;
                        if (k < first)
                                first = k;
                }
        struct obj *pkg = NULL;
        if (n->socket >= 0 && first < i) {
                for (size_t c = 0; c < m->n_children && !pkg; c++)
                        if (m->children[c]->kind == OBJ_PACKAGE && m->children[c]->os_index == n->socket)
                                pkg = m->children[c];
        } else if (n->socket >= 0) {
                pkg = obj_new(m, OBJ_PACKAGE, n->socket);
                for (size_t k = 0; k < h->n_nodes; k++)
                        if (h->nodes[k].socket == n->socket) {
                                bitmap_or(&pkg->cpuset, &h->nodes[k].cpus);
                                bitmap_set(&pkg->nodeset, (unsigned) h->nodes[k].id);
                        }
        }
        struct obj *loc = pkg && on_socket == 1 ? pkg : obj_new(pkg ? pkg : m, OBJ_GROUP, -1);
        if (loc != pkg) {
                bitmap_or(&loc->cpuset, &n->cpus);
                bitmap_set(&loc->nodeset, (unsigned) n->id);
        }
        struct obj *node = obj_new(loc, OBJ_NUMANODE, n->id);
        bitmap_or(&node->cpuset, &n->cpus);
        bitmap_set(&node->nodeset, (unsigned) n->id);
        for (int c = bitmap_next(&n->cpus, 0); c >= 0; c = bitmap_next(&n->cpus, (unsigned) c + 1)) {
                struct obj *pu = obj_new(loc, OBJ_PU, c);
                bitmap_set(&pu->cpuset, (unsigned) c);
                bitmap_set(&pu->nodeset, (unsigned) n->id);
        }
        return loc;
}

/* Host device dev below its host bridge and bridges, in loc (its node's
 * object); a host bridge goes with the node of its first device, and is
 * found again wherever it went. */
static void add_host_device(struct obj *m, struct obj **by_node, const struct hostmap *h, struct obj *loc,
                            const struct hostmap_device *dev) {
        unsigned dom, bus;
        struct obj *parent = loc;
        if (parse_host_bridge(dev->host_bridge, &dom, &bus)) {
                struct obj *hb = NULL;
                for (size_t k = 0; k <= h->n_nodes && !hb; k++) {
                        struct obj *o = k < h->n_nodes ? by_node[k] : m;
                        for (size_t c = 0; o && c < o->n_children && !hb; c++)
                                if (o->children[c]->kind == OBJ_HOST_BRIDGE && o->children[c]->domain == dom &&
                                    o->children[c]->root_bus == (int) bus)
                                        hb = o->children[c];
                }
                if (!hb) {
                        hb = add_host_bridge(loc, dom, bus, bus);
                        hb->root_bus = (int) bus;
                        obj_info(hb, "PCINUMAHostBridge", "%s", dev->host_bridge);
                }
                parent = hb;
                for (size_t u = 0; u < dev->n_upstream; u++)
                        parent = bridge_child(parent, h, &dev->upstream[u]);
        }
        struct obj *o = add_pcidev(parent, &dev->addr, dev);
        obj_info(o, "PCINUMAHostNode", "%d", dev->node);
        /* Not drawn (an OS device would be): lstopo then folds a PF's VFs
         * into one box, and the picture stays small. */
        if (dev->driver)
                obj_info(o, "PCINUMADriver", "%s", dev->driver);
}

char *hwloctopo_host(const struct hostmap *h) {
        struct obj *m = obj_new(NULL, OBJ_MACHINE, 0);
        obj_info(m, "PCINUMATopology", "host");
        obj_info(m, "lstopoLegend", "this host as pcinuma sees it: NUMA nodes, sockets and PCI devices");
        struct obj **by_node = xcalloc(h->n_nodes ? h->n_nodes : 1, sizeof(*by_node));
        for (size_t i = 0; i < h->n_nodes; i++) {
                bitmap_or(&m->cpuset, &h->nodes[i].cpus);
                bitmap_set(&m->nodeset, (unsigned) h->nodes[i].id);
        }
        /* Sockets in the order of their first node; nodes in id order. */
        for (size_t i = 0; i < h->n_nodes; i++)
                by_node[i] = add_host_node(m, h, i);
        for (size_t i = 0; i < h->n_devices; i++)
                if (!hostmap_device_is_bridge(&h->devices[i]))
                        add_host_device(m, by_node, h, node_object(m, by_node, h, h->devices[i].node), &h->devices[i]);
        fix_ranges(m);
        free(by_node);
        char *s = write_topology(m);
        obj_free(m);
        return s;
}

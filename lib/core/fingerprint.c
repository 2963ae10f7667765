/* The topology fingerprint (fingerprint.h): the canonical text and digests
 * of a host map.  Each root complex is described as a tree, bottom up:
 * a function is "dev(...)", the functions of one slot "slot{...}", a
 * bridge with what is below it "bridge{...}", the root complex "rc{...}";
 * the items inside braces are sorted bytewise, which is what makes the text
 * independent of bus numbers and of the order the host enumerates in. */
#include <stdlib.h>
#include <string.h>

#include "fingerprint.h"

bool fingerprint_device_counts(const struct hostmap_device *d) {
        /* By class (and vendor) only, never by driver: a managed device
         * changes driver when its guest starts and stops, and which guests
         * run must not change the digest or its neighbours' positions. */
        if (!d || hostmap_device_is_bridge(d))
                return false;
        switch (d->class >> 16) {
        case 0x02:
        case 0x03:
        case 0x12:
                return true;
        default:
                break;
        }
        switch (d->class >> 8) {
        case 0x0108:                      /* NVMe */
        case 0x0b40:                      /* co-processors: QAT and the like */
                return true;
        case 0x0680:
                /* "Other bridge" holds NVSwitches but also chipset
                 * functions (a PIIX4's power management): NVIDIA's only. */
                return d->vendor == 0x10de;
        default:
                return false;
        }
}

bool fingerprint_slot_companion(const struct hostmap *h, const struct hostmap_device *d) {
        /* A GPU's HDMI audio (0403) or USB-C (0c03, 0c80) function, passed
         * through with it; not a chipset slot's, whose function 0 is a
         * bridge.  By class again, never by driver. */
        if (!d || d->addr.func == 0 || hostmap_device_is_bridge(d))
                return false;
        for (size_t i = 0; i < h->n_devices; i++) {
                const struct hostmap_device *o = &h->devices[i];
                if (o->addr.domain == d->addr.domain && o->addr.bus == d->addr.bus &&
                    o->addr.slot == d->addr.slot && o->addr.func == 0 && fingerprint_device_counts(o))
                        return true;
        }
        return false;
}

bool fingerprint_holds(const struct hostmap *h, const struct hostmap_device *d) {
        if (fingerprint_device_counts(d))
                return true;
        if (!d || hostmap_device_is_bridge(d))
                return false;
        if (fingerprint_slot_companion(h, d))
                return true;
        /* The PF of a VF that counts (as pf_of() links them). */
        if (d->has_physfn)
                return false;
        for (size_t i = 0; i < h->n_devices; i++) {
                const struct hostmap_device *v = &h->devices[i];
                if (v != d && v->has_physfn && pci_addr_eq(&v->physfn, &d->addr) && fingerprint_device_counts(v))
                        return true;
        }
        return false;
}

const char *fingerprint_driver_kind(const char *driver) {
        /* The kernel's vfio-pci variants are named <vendor>_vfio_pci (as
         * planner_is_vfio_variant() reads them without a policy). */
        size_t l = driver ? strlen(driver) : 0;
        if (l > 9 && streq(driver + l - 9, "_vfio_pci"))
                return driver;
        return "vfio-pci";
}

/* Driver names are the kernel's ([a-z0-9_-]), but a capture may hold
 * anything: escape what could pass for the text's own syntax. */
static void append_escaped(struct strbuf *b, const char *s) {
        for (; *s; s++) {
                unsigned char c = (unsigned char) *s;
                if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.')
                        strbuf_appendn(b, s, 1);
                else
                        strbuf_printf(b, "%%%02X", c);
        }
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

/* Sort items and append them joined by ','; frees them. */
static void append_sorted(struct strbuf *b, char **items, size_t n) {
        if (n > 1)
                qsort(items, n, sizeof(*items), cmp_str);
        for (size_t i = 0; i < n; i++) {
                if (i > 0)
                        strbuf_append(b, ",");
                strbuf_append(b, items[i]);
                free(items[i]);
        }
}

struct ctx {
        const struct hostmap *h;
        const bool *in;                   /* in[i]: devices[i] is in the fingerprint */
        bool no_drivers;                  /* leave the driver kinds out (fingerprint_below_shape()) */
};

static size_t index_of(const struct ctx *c, const struct hostmap_device *d) {
        return (size_t) (d - c->h->devices);
}

/* The PF of a VF, if the map has it and it is a PF (a capture may link a
 * VF to itself or to another VF). */
static const struct hostmap_device *pf_of(const struct hostmap *h, const struct hostmap_device *d) {
        if (!d->has_physfn)
                return NULL;
        const struct hostmap_device *pf = hostmap_find_device(h, &d->physfn);
        return pf && pf != d && !pf->has_physfn && !hostmap_device_is_bridge(pf) ? pf : NULL;
}

/* The PF of a VF, when the fingerprint holds it too (the VF is then
 * described inside its PF, and nowhere else). */
static const struct hostmap_device *counted_pf(const struct ctx *c, const struct hostmap_device *d) {
        const struct hostmap_device *pf = pf_of(c->h, d);
        return pf && c->in[index_of(c, pf)] ? pf : NULL;
}

static const char *bar_type(const struct hostmap_bar *bar) {
        switch (bar->type) {
        case HOSTMAP_BAR_IO:
                return "io";
        case HOSTMAP_BAR_MEM32:
                return bar->prefetchable ? "m32p" : "m32";
        case HOSTMAP_BAR_MEM64:
                return bar->prefetchable ? "m64p" : "m64";
        default:
                return NULL;
        }
}

/* "dev(10de:2330 class 030200 driver vfio-pci bars 0:m32:0x1000000;... vfs{...})" */
static char *describe_function(const struct ctx *c, const struct hostmap_device *d) {
        struct strbuf b = {0};

        /* The driver's kind, not its name: a managed device is on its host
         * driver while idle and on vfio-pci while its guest runs. */
        strbuf_printf(&b, "dev(%04x:%04x class %06x", d->vendor, d->device, d->class);
        if (!c->no_drivers) {
                strbuf_append(&b, " driver ");
                append_escaped(&b, fingerprint_driver_kind(d->driver));
        }
        /* The BARs size the guest's 64-bit MMIO window and decide the I/O
         * port budget (planner-layout.c), so they are part of the place. */
        const char *sep = " bars ";
        for (unsigned i = 0; i < HOSTMAP_N_BARS; i++) {
                const char *t = bar_type(&d->bars[i]);
                if (!t)
                        continue;
                strbuf_printf(&b, "%s%u:%s:0x%llx", sep, i, t, (unsigned long long) d->bars[i].size);
                sep = ";";
        }
        /* Its VFs, when it is a PF the fingerprint holds. */
        char **vfs = NULL;
        size_t n_vfs = 0;
        for (size_t i = 0; d->n_vfs > 0 && i < c->h->n_devices; i++) {
                const struct hostmap_device *v = &c->h->devices[i];
                if (c->in[i] && counted_pf(c, v) == d)
                        *GROW(vfs, n_vfs) = describe_function(c, v);
        }
        if (n_vfs > 0) {
                strbuf_append(&b, " vfs{");
                append_sorted(&b, vfs, n_vfs);
                strbuf_append(&b, "}");
        }
        free(vfs);
        strbuf_append(&b, ")");
        return strbuf_steal(&b);
}

/* The items at 'depth' below the root complex among devs[0..n) (which all
 * share upstream[0..depth)), appended sorted to b. */
static void describe_level(const struct ctx *c, const size_t *devs, size_t n, size_t depth, struct strbuf *b) {
        char **items = NULL;
        size_t n_items = 0;
        bool *done = xcalloc(n ? n : 1, sizeof(bool));

        for (size_t i = 0; i < n; i++) {
                if (done[i])
                        continue;
                const struct hostmap_device *d = &c->h->devices[devs[i]];
                done[i] = true;
                if (d->n_upstream > depth) {
                        /* A bridge: everything below upstream[depth]. */
                        const struct pci_addr *br = &d->upstream[depth];
                        size_t *sub = xcalloc(n, sizeof(size_t));
                        size_t n_sub = 0;
                        sub[n_sub++] = devs[i];
                        for (size_t k = i + 1; k < n; k++) {
                                const struct hostmap_device *o = &c->h->devices[devs[k]];
                                if (!done[k] && o->n_upstream > depth && pci_addr_eq(&o->upstream[depth], br)) {
                                        done[k] = true;
                                        sub[n_sub++] = devs[k];
                                }
                        }
                        struct strbuf s = {0};
                        strbuf_append(&s, "bridge{");
                        describe_level(c, sub, n_sub, depth + 1, &s);
                        strbuf_append(&s, "}");
                        *GROW(items, n_items) = strbuf_steal(&s);
                        free(sub);
                        continue;
                }
                /* A VF whose PF is held is described inside its PF. */
                if (counted_pf(c, d))
                        continue;
                /* Functions of one slot (a multi-function device) stay
                 * together: the planner keeps them so.  A VF is a slot of
                 * its own. */
                char **fns = NULL;
                size_t n_fns = 0;
                *GROW(fns, n_fns) = describe_function(c, d);
                for (size_t k = i + 1; !d->has_physfn && k < n; k++) {
                        const struct hostmap_device *o = &c->h->devices[devs[k]];
                        if (!done[k] && o->n_upstream == depth && !o->has_physfn && o->addr.domain == d->addr.domain &&
                            o->addr.bus == d->addr.bus && o->addr.slot == d->addr.slot) {
                                done[k] = true;
                                *GROW(fns, n_fns) = describe_function(c, o);
                        }
                }
                if (n_fns == 1) {
                        *GROW(items, n_items) = fns[0];
                } else {
                        struct strbuf s = {0};
                        strbuf_append(&s, "slot{");
                        append_sorted(&s, fns, n_fns);
                        strbuf_append(&s, "}");
                        *GROW(items, n_items) = strbuf_steal(&s);
                }
                free(fns);
        }
        append_sorted(b, items, n_items);
        free(items);
        free(done);
}

static int group_cmp(const void *pa, const void *pb) {
        const struct fingerprint_group *a = pa, *b = pb;
        if (a->node != b->node) {
                /* "none" last */
                if (a->node < 0 || b->node < 0)
                        return a->node < 0 ? 1 : -1;
                return a->node < b->node ? -1 : 1;
        }
        int r = strcmp(a->canonical, b->canonical);
        if (r != 0)
                return r;
        /* Identical groups: by their first device, so the output is stable. */
        return a->devices[0] < b->devices[0] ? -1 : a->devices[0] > b->devices[0];
}

static void group_describe(const struct ctx *c, struct fingerprint_group *g) {
        struct strbuf b = {0};

        if (g->node >= 0)
                strbuf_printf(&b, "node %d ", g->node);
        else
                strbuf_append(&b, "node none ");
        /* Devices whose path is unknown have no tree: a flat list. */
        strbuf_append(&b, g->host_bridge ? "rc{" : "unknown-path{");
        describe_level(c, g->devices, g->n_devices, 0, &b);
        strbuf_append(&b, "}");
        g->canonical = strbuf_steal(&b);
        _cleanup_free_ char *line = xasprintf("%s\n", g->canonical);
        sha256_hex(line, strlen(line), g->digest);
}

static void describe_nodes(const struct hostmap *h, struct strbuf *b) {
        /* Socket ids are numbering too: name each socket by the first node
         * (in id order) on it, so only which nodes share one counts. */
        int *socket_ids = xcalloc(h->n_nodes ? h->n_nodes : 1, sizeof(int));
        size_t n_sockets = 0;

        for (size_t i = 0; i < h->n_nodes; i++) {
                const struct hostmap_node *nd = &h->nodes[i];
                strbuf_printf(b, "node %d cpus %u socket ", nd->id, bitmap_count(&nd->cpus));
                if (nd->socket < 0)
                        strbuf_append(b, "none");
                else {
                        size_t s = 0;
                        while (s < n_sockets && socket_ids[s] != nd->socket)
                                s++;
                        if (s == n_sockets)
                                socket_ids[n_sockets++] = nd->socket;
                        strbuf_printf(b, "%zu", s);
                }
                strbuf_append(b, " distances");
                for (size_t j = 0; j < h->n_nodes; j++) {
                        int dist = hostmap_distance(h, nd->id, h->nodes[j].id);
                        if (dist >= 0)
                                strbuf_printf(b, " %d", dist);
                        else
                                strbuf_append(b, " ?");
                }
                strbuf_append(b, "\n");
        }
        free(socket_ids);
}

struct fingerprint *fingerprint_new(const struct hostmap *h) {
        struct fingerprint *f = xcalloc(1, sizeof(*f));
        bool *in = xcalloc(h->n_devices ? h->n_devices : 1, sizeof(bool));
        struct ctx c = { .h = h, .in = in };

        /* The capable devices, and the PF of each capable VF (the VFs'
         * parent, whose driver they depend on). */
        for (size_t i = 0; i < h->n_devices; i++)
                in[i] = fingerprint_holds(h, &h->devices[i]);

        /* Group by (node, host bridge), in address order. */
        for (size_t i = 0; i < h->n_devices; i++) {
                if (!in[i])
                        continue;
                const struct hostmap_device *d = &h->devices[i];
                int node = d->node >= 0 && hostmap_find_node(h, d->node) ? d->node : HOSTMAP_NO_NODE;
                /* A VF goes with its PF's group when the PF is held, even if
                 * a broken numa_node file says otherwise. */
                const struct hostmap_device *pf = counted_pf(&c, d);
                if (pf)
                        node = pf->node >= 0 && hostmap_find_node(h, pf->node) ? pf->node : HOSTMAP_NO_NODE;
                const char *hb = pf ? pf->host_bridge : d->host_bridge;
                struct fingerprint_group *g = NULL;
                for (size_t k = 0; k < f->n_groups && !g; k++)
                        if (f->groups[k].node == node && streq_ptr(f->groups[k].host_bridge, hb))
                                g = &f->groups[k];
                if (!g) {
                        g = GROW(f->groups, f->n_groups);
                        g->node = node;
                        g->host_bridge = hb ? xstrdup(hb) : NULL;
                }
                *GROW(g->devices, g->n_devices) = i;
        }
        for (size_t k = 0; k < f->n_groups; k++)
                group_describe(&c, &f->groups[k]);
        if (f->n_groups > 1)
                qsort(f->groups, f->n_groups, sizeof(*f->groups), group_cmp);

        struct strbuf b = {0};
        strbuf_printf(&b, "pcinuma topology fingerprint %d\n", FINGERPRINT_VERSION);
        describe_nodes(h, &b);
        for (size_t k = 0; k < f->n_groups; k++)
                strbuf_printf(&b, "group %s\n", f->groups[k].canonical);
        f->canonical = strbuf_steal(&b);
        sha256_hex(f->canonical, strlen(f->canonical), f->digest);
        free(in);
        return f;
}

struct fingerprint *fingerprint_free(struct fingerprint *f) {
        if (!f)
                return NULL;
        for (size_t k = 0; k < f->n_groups; k++) {
                free(f->groups[k].host_bridge);
                free(f->groups[k].canonical);
                free(f->groups[k].devices);
        }
        free(f->groups);
        free(f->canonical);
        free(f);
        return NULL;
}

/* --- positions ------------------------------------------------------------- */

static void append_item(struct strbuf *b, const char *kind, const char *text, const char *name) {
        char hex[SHA256_HEX_SIZE];
        sha256_hex(text, strlen(text), hex);
        strbuf_printf(b, "%s%s:%.*s@%s", b->len ? " " : "", kind, FINGERPRINT_POSITION_DIGEST, hex, name);
}

/* The group of f that holds device, or NULL. */
static const struct fingerprint_group *group_of(const struct fingerprint *f, size_t device) {
        for (size_t k = 0; k < f->n_groups; k++)
                for (size_t j = 0; j < f->groups[k].n_devices; j++)
                        if (f->groups[k].devices[j] == device)
                                return &f->groups[k];
        return NULL;
}

/* in[i]: h->devices[i] is in f (malloc'ed). */
static bool *held(const struct fingerprint *f, const struct hostmap *h) {
        bool *in = xcalloc(h->n_devices ? h->n_devices : 1, sizeof(bool));
        for (size_t k = 0; k < f->n_groups; k++)
                for (size_t j = 0; j < f->groups[k].n_devices; j++)
                        in[f->groups[k].devices[j]] = true;
        return in;
}

/* "bridge{...}": what g holds below bridge at->upstream[depth]. */
static char *bridge_text(const struct ctx *c, const struct fingerprint_group *g, const struct hostmap_device *at,
                         size_t depth) {
        size_t *sub = xcalloc(g->n_devices ? g->n_devices : 1, sizeof(size_t));
        size_t n_sub = 0;
        for (size_t j = 0; j < g->n_devices; j++) {
                const struct hostmap_device *o = &c->h->devices[g->devices[j]];
                if (o->n_upstream > depth && pci_addr_eq(&o->upstream[depth], &at->upstream[depth]))
                        sub[n_sub++] = g->devices[j];
        }
        struct strbuf t = {0};
        strbuf_append(&t, "bridge{");
        describe_level(c, sub, n_sub, depth + 1, &t);
        strbuf_append(&t, "}");
        free(sub);
        return strbuf_steal(&t);
}

static char *below(const struct fingerprint *f, const struct hostmap *h, size_t device, size_t depth,
                   bool no_drivers) {
        const struct fingerprint_group *g = group_of(f, device);
        if (!g || !g->host_bridge)
                return NULL;
        bool *in = held(f, h);
        struct ctx c = { .h = h, .in = in, .no_drivers = no_drivers };
        const struct hostmap_device *pf = counted_pf(&c, &h->devices[device]);
        const struct hostmap_device *at = pf ? pf : &h->devices[device];
        char *text = depth < at->n_upstream ? bridge_text(&c, g, at, depth) : NULL;
        free(in);
        return text;
}

char *fingerprint_below(const struct fingerprint *f, const struct hostmap *h, size_t device, size_t depth) {
        return below(f, h, device, depth, false);
}

char *fingerprint_below_shape(const struct fingerprint *f, const struct hostmap *h, size_t device, size_t depth) {
        return below(f, h, device, depth, true);
}

char *fingerprint_position(const struct fingerprint *f, const struct hostmap *h, size_t device) {
        const struct fingerprint_group *g = group_of(f, device);
        if (!g)
                return NULL;
        bool *in = held(f, h);
        struct ctx c = { .h = h, .in = in };
        const struct hostmap_device *d = &h->devices[device];
        const struct hostmap_device *pf = counted_pf(&c, d);
        /* A VF described inside its PF sits where its PF sits. */
        const struct hostmap_device *at = pf ? pf : d;
        struct strbuf b = {0};
        char name[PCI_ADDR_STRLEN];

        append_item(&b, "rc", g->canonical, g->host_bridge ? g->host_bridge : "none");
        for (size_t depth = 0; g->host_bridge && depth < at->n_upstream; depth++) {
                _cleanup_free_ char *text = bridge_text(&c, g, at, depth);
                pci_addr_format(&at->upstream[depth], name);
                append_item(&b, "br", text, name);
        }
        if (pf) {
                _cleanup_free_ char *text = describe_function(&c, pf);
                pci_addr_format(&pf->addr, name);
                append_item(&b, "pf", text, name);
        }
        _cleanup_free_ char *text = describe_function(&c, d);
        _cleanup_free_ char *slot = pf ? NULL : xasprintf("%04x:%02x:%02x", d->addr.domain, d->addr.bus, d->addr.slot);
        if (pf)
                pci_addr_format(&d->addr, name);
        append_item(&b, "fn", text, pf ? name : slot);
        free(in);
        return strbuf_steal(&b);
}

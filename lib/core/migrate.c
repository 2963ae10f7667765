/* Migration gated on topology (migrate.h): positions for the mark, and
 * the matching of an incoming domain's mark with this host's devices (a
 * backtracking search within a budget).  Pure matching: it reads the
 * mark, the fingerprint and the host map, and edits no XML (the rewrite
 * is rewrite_migrate()'s, the pipeline engine_incoming()'s). */
#include "migrate.h"

#include <string.h>
#include <strings.h>

/* --- annotating a plan ----------------------------------------------------- */

/* The fingerprint digest and every counted device's position, computed
 * once per host map (hostmap_derived()): hashing a big host's positions
 * costs more than any one request should (a 960-GPU host: 100 ms). */
struct positions {
        char digest[SHA256_HEX_SIZE];
        char **pos;                     /* per h->devices[i]; NULL: not counted */
        size_t n;
        size_t *order;                  /* the counted devices in the fingerprint's order */
        size_t n_order;
};

static void positions_free(void *v) {
        struct positions *p = v;
        if (!p)
                return;
        for (size_t i = 0; i < p->n; i++)
                free(p->pos[i]);
        free(p->pos);
        free(p->order);
        free(p);
}

static struct positions *positions_of(const struct fingerprint *f, const struct hostmap *h) {
        struct positions *p = xcalloc(1, sizeof(*p));
        memcpy(p->digest, f->digest, sizeof(p->digest));
        p->n = h->n_devices;
        p->pos = xcalloc(p->n ? p->n : 1, sizeof(char *));
        for (size_t g = 0; g < f->n_groups; g++)
                for (size_t j = 0; j < f->groups[g].n_devices; j++) {
                        size_t i = f->groups[g].devices[j];
                        p->pos[i] = fingerprint_position(f, h, i);
                        *GROW(p->order, p->n_order) = i;
                }
        return p;
}

static void *positions_compute(const struct hostmap *h) {
        _cleanup_fingerprint_ struct fingerprint *f = fingerprint_new(h);
        return positions_of(f, h);
}

/* An mdev: its type, and its parent's position and vendor:device. */
static void annotate_mdev(struct plan_device *pd, const struct domain_hostdev *hd, const struct hostmap *h,
                          const struct positions *ps) {
        const struct hostmap_mdev *m = hostmap_find_mdev(h, hd->mdev_uuid);
        const struct hostmap_device *parent = m ? hostmap_find_device(h, &m->parent) : NULL;
        if (!parent)
                return;
        size_t k = (size_t) (parent - h->devices);
        free(pd->position);
        pd->position = k < ps->n && ps->pos[k] ? xstrdup(ps->pos[k]) : NULL;
        free(pd->mdev_type);
        pd->mdev_type = m->type ? xstrdup(m->type) : NULL;
        snprintf(pd->vendor_device, sizeof pd->vendor_device, "%04x:%04x", parent->vendor, parent->device);
}

void migrate_annotate(struct plan *p, const struct domain *d, const struct hostmap *h) {
        const struct positions *ps = hostmap_derived(h, positions_compute, positions_free);
        free(p->fingerprint);
        p->fingerprint = xstrdup(ps->digest);
        for (size_t i = 0; i < p->n_devices; i++) {
                struct plan_device *pd = &p->devices[i];
                const struct domain_hostdev *hd = &d->hostdevs[pd->hostdev];
                if (pd->action == PLAN_MOVE && hd->kind == DOMAIN_HOSTDEV_MDEV)
                        annotate_mdev(pd, hd, h, ps);
                if (pd->action != PLAN_MOVE || hd->kind != DOMAIN_HOSTDEV_PCI)
                        continue;
                const struct hostmap_device *dev = hostmap_find_device(h, &hd->host);
                if (!dev)
                        continue;
                size_t k = (size_t) (dev - h->devices);
                free(pd->position);
                pd->position = k < ps->n && ps->pos[k] ? xstrdup(ps->pos[k]) : NULL;
                snprintf(pd->vendor_device, sizeof pd->vendor_device, "%04x:%04x", dev->vendor, dev->device);
        }
}

/* --- the mapping ----------------------------------------------------------- */

void migrate_map_done(struct migrate_map *m) {
        for (size_t i = 0; i < m->n_pairs; i++) {
                free(m->pairs[i].from);
                free(m->pairs[i].to);
                free(m->pairs[i].to_position);
                free(m->pairs[i].used_by);
        }
        free(m->pairs);
        *m = (struct migrate_map) {0};
}

/* A position's items: "kind:digest@name", split at the '@'. */
struct item {
        char *key;                      /* "kind:digest" */
        char *name;                     /* "kind@name": what it binds */
};

struct pos {
        struct item *items;
        size_t n;
};

static void pos_done(struct pos *p) {
        for (size_t i = 0; i < p->n; i++) {
                free(p->items[i].key);
                free(p->items[i].name);
        }
        free(p->items);
        *p = (struct pos) {0};
}

/* 0, or -1 when s is not a position. */
static int pos_parse(const char *s, struct pos *ret) {
        struct pos p = {0};
        while (s && *s) {
                const char *end = strchr(s, ' ');
                size_t n = end ? (size_t) (end - s) : strlen(s);
                const char *at = memchr(s, '@', n), *colon = memchr(s, ':', n);
                if (!at || !colon || colon > at) {
                        pos_done(&p);
                        return -1;
                }
                struct item *it = GROW(p.items, p.n);
                it->key = xstrndup(s, (size_t) (at - s));
                it->name = xasprintf("%.*s@%.*s", (int) (colon - s), s, (int) (n - (size_t) (at - s) - 1), at + 1);
                s = end ? end + 1 : NULL;
        }
        if (p.n == 0)
                return -1;
        *ret = p;
        return 0;
}

struct dest {
        size_t device;                  /* index into h->devices */
        char *position;
        struct pos pos;
        const struct migrate_used *taken;       /* another domain uses it, or NULL */
        unsigned tier;                  /* the search's preference: 0 best (free, no mdevs) */
        bool host_bound;                /* a host driver holds it: never given (it may still parent mdevs) */
};

/* An mdev of this host whose parent the fingerprint counts. */
struct mdest {
        size_t mdev;                    /* index into h->mdevs */
        size_t device;                  /* its parent, index into h->devices */
        const char *position;           /* the parent's (its dest's) */
        struct pos pos;
        const struct migrate_used *taken;
        unsigned tier;                  /* 0 free, 1 another domain uses it */
};

struct search {
        const struct mark *m;
        struct pos *src;                /* per mark device (an mdev's: its parent's) */
        struct dest *dst;
        size_t n_dst;
        struct mdest *mdst;
        size_t n_mdst;
        const struct hostmap *h;
        size_t *choice;                 /* per mark device: index into dst, or mdst for an mdev */
        bool *used;                     /* per dst */
        bool *mused;                    /* per mdst */
        /* bindings source name <-> destination name */
        const char **bind_src, **bind_dst;
        size_t n_bind;
        size_t steps, budget;           /* candidates tried; the most to try */
        bool free_only;                 /* skip candidates another domain uses */
        struct work *work;              /* the request's budget (work-budget.h), or NULL */
};

#define PHASE_MATCH "matching the devices with this host's (migration)"

/* Has the search run out, of placements or of the request's work? */
static bool out_of_budget(const struct search *s) {
        return s->steps > s->budget || work_exhausted(s->work);
}

static bool same_shape(const struct pos *a, const struct pos *b) {
        if (a->n != b->n)
                return false;
        for (size_t i = 0; i < a->n; i++)
                if (!streq(a->items[i].key, b->items[i].key))
                        return false;
        return true;
}

/* Bind the items of source position a to those of b; false (and nothing
 * bound) when one side is already bound to something else. */
static bool bind(struct search *s, const struct pos *a, const struct pos *b) {
        size_t start = s->n_bind;
        for (size_t i = 0; i < a->n; i++) {
                const char *x = a->items[i].name, *y = b->items[i].name;
                bool found = false, clash = false;
                for (size_t k = 0; k < s->n_bind; k++) {
                        bool sx = streq(s->bind_src[k], x), dy = streq(s->bind_dst[k], y);
                        if (sx && dy)
                                found = true;
                        else if (sx || dy)
                                clash = true;
                }
                if (clash) {
                        s->n_bind = start;
                        return false;
                }
                if (!found) {
                        s->bind_src[s->n_bind] = x;
                        s->bind_dst[s->n_bind] = y;
                        s->n_bind++;
                }
        }
        return true;
}

static bool is_mdev(const struct mark_device *md) {
        return !md->host;
}

/* Candidate j of mark device k (below s->n_dst, or s->n_mdst for an
 * mdev): its position, or NULL when it is not one (an mdev of another
 * type). */
static const struct pos *candidate(const struct search *s, size_t k, size_t j) {
        const struct mark_device *md = &s->m->devices[k];
        if (!is_mdev(md))
                return s->dst[j].host_bound ? NULL : &s->dst[j].pos;
        const char *type = s->h->mdevs[s->mdst[j].mdev].type;
        return type && md->mdev_type && streq(type, md->mdev_type) ? &s->mdst[j].pos : NULL;
}

static bool has_candidate(const struct search *s, size_t k) {
        size_t n = is_mdev(&s->m->devices[k]) ? s->n_mdst : s->n_dst;
        for (size_t j = 0; j < n; j++) {
                const struct pos *p = candidate(s, k, j);
                if (p && same_shape(&s->src[k], p))
                        return true;
        }
        return false;
}

/* The candidate of mark device k that this host names as the mark does
 * (the same BDF, or the same mdev UUID), or n when there is none.  Hosts
 * numbered alike are common in a fleet: tried first, each domain keeps
 * its devices, and domains evacuated one after the other to such a host
 * do not all land on its first device of a kind. */
static size_t same_name(const struct search *s, size_t k, size_t n) {
        const struct mark_device *md = &s->m->devices[k];
        for (size_t j = 0; j < n; j++) {
                const char *name = is_mdev(md) ? s->h->mdevs[s->mdst[j].mdev].uuid
                                               : s->h->devices[s->dst[j].device].name;
                const char *want = is_mdev(md) ? md->mdev : md->host;
                if (name && want && strcasecmp(name, want) == 0)
                        return j;
        }
        return n;
}

/* Depth first, one mark device after the other: a PCI device to a
 * device, an mdev to an mdev of its type whose parent binds like the
 * other devices (same names, same places); false when no mapping exists
 * or when the budget ran out (s->steps > s->budget).  The candidate of the
 * same name comes first, then the others in s's order. */
static bool search_from(struct search *s, size_t k);

static unsigned tier_of(const struct search *s, bool mdev, size_t j) {
        return mdev ? s->mdst[j].tier : s->dst[j].tier;
}

/* Mark device k on candidate j, and the rest after it: 1 when that maps
 * them all, 0 when not, -1 when the budget ran out. */
static int try_candidate(struct search *s, size_t k, size_t j) {
        bool mdev = is_mdev(&s->m->devices[k]);
        bool *used = mdev ? s->mused : s->used;
        const struct migrate_used *taken = mdev ? s->mdst[j].taken : s->dst[j].taken;
        const struct pos *p = used[j] || (s->free_only && taken) ? NULL : candidate(s, k, j);
        if (!work_spend(s->work, 1 + s->src[k].n, PHASE_MATCH))
                return -1;
        if (!p || !same_shape(&s->src[k], p))
                return 0;
        if (++s->steps > s->budget)
                return -1;
        /* bind() compares each item with every binding */
        if (!work_spend(s->work, s->src[k].n * (s->n_bind + 1), PHASE_MATCH))
                return -1;
        size_t saved = s->n_bind;
        if (!bind(s, &s->src[k], p))
                return 0;
        used[j] = true;
        s->choice[k] = j;
        if (search_from(s, k + 1))
                return 1;
        used[j] = false;
        s->n_bind = saved;
        return out_of_budget(s) ? -1 : 0;
}

static bool search_from(struct search *s, size_t k) {
        if (k == s->m->n_devices)
                return true;
        bool mdev = is_mdev(&s->m->devices[k]);
        size_t n = mdev ? s->n_mdst : s->n_dst;
        /* The same-named candidate goes first within its preference tier
         * (the candidates are sorted by tier): never before a free one
         * when it is used, nor before one without mdevs when it holds
         * some. */
        size_t first = same_name(s, k, n);
        bool first_due = first < n;
        for (size_t j = 0; j < n; j++) {
                int r;
                if (first_due && tier_of(s, mdev, j) >= tier_of(s, mdev, first)) {
                        first_due = false;
                        if ((r = try_candidate(s, k, first)) != 0)
                                return r > 0;
                }
                if (j != first && (r = try_candidate(s, k, j)) != 0)
                        return r > 0;
        }
        return false;
}

/* This host's devices of vendor:device vd, "0000:13:00.0 (node 0, driver
 * vfio-pci), ...", wrapped: said once in a refusal however many devices
 * of that kind have no place (docs/operations.md, "Fleet: migration"). */
static char *node_list(const struct hostmap *h, const char *vd) {
        struct strbuf b = {0};
        size_t n = 0;
        for (size_t i = 0; i < h->n_devices; i++) {
                const struct hostmap_device *d = &h->devices[i];
                char v[10];
                snprintf(v, sizeof v, "%04x:%04x", d->vendor, d->device);
                if (!streq(v, vd))
                        continue;
                if (n)
                        strbuf_append(&b, n % 3 == 0 ? ",\n  " : ", ");
                n++;
                strbuf_printf(&b, "%s (node %d, driver %s)", d->name, d->node, d->driver ? d->driver : "none");
        }
        return strbuf_steal(&b);
}

static bool host_has(const struct hostmap *h, const char *vd) {
        for (size_t i = 0; i < h->n_devices; i++) {
                char v[10];
                snprintf(v, sizeof v, "%04x:%04x", h->devices[i].vendor, h->devices[i].device);
                if (streq(v, vd))
                        return true;
        }
        return false;
}

/* Why source device md has no device in its position here: the nearest
 * difference, in one line; the host's devices of its kind are listed once
 * after every such line (node_list()). */
static char *why_not(const struct hostmap *h, const struct mark_device *md, const struct pos *src,
                     const struct dest *dst, size_t n_dst) {
        const char *vd = md->vendor_device ? md->vendor_device : "?";
        const char *drv = md->driver ? md->driver : "none";
        if (!md->vendor_device || !host_has(h, vd))
                return xasprintf("device %s (%s, driver %s, host node %d): this host has no %s device", md->host, vd, drv,
                                 md->host_node, vd);
        bool on_node = false, on_node_drv = false;
        for (size_t i = 0; i < h->n_devices; i++) {
                char v[10];
                snprintf(v, sizeof v, "%04x:%04x", h->devices[i].vendor, h->devices[i].device);
                if (!streq(v, vd) || h->devices[i].node != md->host_node)
                        continue;
                on_node = true;
                on_node_drv |= streq(fingerprint_driver_kind(h->devices[i].driver), fingerprint_driver_kind(md->driver));
        }
        if (!on_node)
                return xasprintf("device %s (%s, driver %s) was on host node %d; this host has no %s on that node",
                                 md->host, vd, drv, md->host_node, vd);
        if (!on_node_drv)
                return xasprintf("device %s (%s, driver %s, host node %d): the driver's kind differs (each VFIO "
                                 "variant driver is a kind of its own; vfio-pci, a host driver and none are one)",
                                 md->host, vd, drv, md->host_node);
        /* Same node: the root complex (another set of devices beside it)
         * or the switch tree differs.  Say at which level. */
        size_t best = 0;
        for (size_t j = 0; j < n_dst; j++) {
                size_t l = 0;
                while (l < src->n && l < dst[j].pos.n && streq(src->items[l].key, dst[j].pos.items[l].key))
                        l++;
                if (l > best)
                        best = l;
        }
        const char *what = best == 0 ? "no root complex of this host on that node holds the same devices"
                                     : "its place below the root complex (the switches and the devices beside it) differs";
        return xasprintf("device %s (%s, driver %s, host node %d): %s", md->host, vd, drv, md->host_node, what);
}

/* The entry of in_use naming id for a domain other than self, or NULL. */
static const struct migrate_used *used_by_other(const struct migrate_in_use *in_use, const char *self, const char *id) {
        for (size_t i = 0; in_use && i < in_use->n; i++) {
                const struct migrate_used *u = &in_use->v[i];
                if (u->id && strcasecmp(u->id, id) == 0 && !(self && u->uuid && strcasecmp(u->uuid, self) == 0))
                        return u;
        }
        return NULL;
}

/* Is host device d meant for passthrough: bound to no driver, to vfio-pci
 * or a VFIO variant driver (planner_is_vfio_variant(), with the policy's
 * vfio_variant_drivers), or listed in the policy's passthrough_pool?  A
 * device a host driver holds (a GPU on nvidia, the boot NVMe on nvme) is
 * the host's: libvirt would detach it from the host at the guest's start
 * (managed='yes'). */
static bool meant_for_passthrough(const struct hostmap_device *d, const struct policy *pol) {
        struct planner_options o = {
                .variant_drivers = pol ? pol->variant_drivers : NULL, .n_variant_drivers = pol ? pol->n_variant_drivers : 0,
        };
        return !d->driver || !*d->driver || streq(d->driver, "vfio-pci") || planner_is_vfio_variant(d->driver, &o) ||
               policy_pool_find(pol, &d->addr, d->class, d->vendor, d->device);
}

/* When mark device k has no candidate: the devices in its place that a
 * host driver holds (meant_for_passthrough()), "0000:3b:00.0 (driver
 * nvidia), ...", or NULL when there are none. */
static char *host_bound_in_place(const struct search *s, size_t k) {
        struct strbuf b = {0};
        for (size_t j = 0; j < s->n_dst; j++) {
                const struct dest *d = &s->dst[j];
                if (!d->host_bound || !same_shape(&s->src[k], &d->pos))
                        continue;
                const struct hostmap_device *dev = &s->h->devices[d->device];
                strbuf_printf(&b, "%s%s (driver %s)", b.len ? ", " : "", dev->name, dev->driver);
        }
        return strbuf_steal(&b);
}

/* Reorder the n elements of 'size' bytes at base stably by the tier (an
 * unsigned below n_tiers) at tier_offset in each, best (0) first. */
static void order_by_tier(void *base, size_t n, size_t size, size_t tier_offset, unsigned n_tiers) {
        if (n < 2)
                return;
        char *out = xcalloc(n, size), *in = base;
        size_t k = 0;
        for (unsigned t = 0; t < n_tiers; t++)
                for (size_t j = 0; j < n; j++) {
                        unsigned tier;
                        memcpy(&tier, in + j * size + tier_offset, sizeof(tier));
                        if (tier == t)
                                memcpy(out + size * k++, in + j * size, size);
                }
        memcpy(base, out, n * size);
        free(out);
}

/* This host's mdevs of type t, "<uuid> (parent 0000:13:00.0, node 0),
 * ...", wrapped; said once in a refusal (node_list()). */
static char *mdev_list(const struct hostmap *h, const char *t) {
        struct strbuf b = {0};
        size_t n = 0;
        for (size_t i = 0; i < h->n_mdevs; i++) {
                const struct hostmap_mdev *o = &h->mdevs[i];
                if (!o->type || !streq(o->type, t))
                        continue;
                if (n)
                        strbuf_append(&b, n % 2 == 0 ? ",\n  " : ", ");
                n++;
                char parent[PCI_ADDR_STRLEN];
                strbuf_printf(&b, "%s (parent %s, node %d)", o->uuid, pci_addr_format(&o->parent, parent), o->node);
        }
        return strbuf_steal(&b);
}

/* Why mdev md has no mdev here whose parent is in its parent's position:
 * no mdev of its type, or where this host's are (listed once after). */
static char *why_not_mdev(const struct search *s, const struct mark_device *md) {
        const char *vd = md->vendor_device ? md->vendor_device : "?";
        _cleanup_free_ char *list = mdev_list(s->h, md->mdev_type);
        if (!list || !*list)
                return xasprintf("mdev %s (type %s, parent %s on host node %d): this host has no mdev of type %s "
                                 "(create one on a parent in the same place first)", md->mdev, md->mdev_type, vd,
                                 md->host_node, md->mdev_type);
        return xasprintf("mdev %s (type %s, parent %s on host node %d): no mdev of that type here has its parent in "
                         "the same place (node, root complex, switches, devices beside it)",
                         md->mdev, md->mdev_type, vd, md->host_node);
}

/* Add s to the set v[0..*n) unless it is there (a refusal's kinds). */
static void add_kind(const char ***v, size_t *n, const char *s) {
        for (size_t i = 0; i < *n; i++)
                if (streq((*v)[i], s))
                        return;
        *GROW(*v, *n) = s;
}

/* Each device (or mdev) of m that has no candidate here on its own, one
 * line each saying what differs, after a summary line, and then this
 * host's devices (and mdevs) of those kinds, once each kind; NULL when
 * every device has a candidate. */
static char *why_no_places(struct search *s, const struct mark *m, const struct hostmap *h, struct work *work) {
        struct strbuf why = {0};
        size_t n_missing = 0, n_kinds = 0, n_types = 0;
        _cleanup_free_ const char **kinds = NULL, **types = NULL;
        for (size_t k = 0; k < m->n_devices; k++) {
                if (!work_spend(work, (1 + s->n_dst + s->n_mdst) * (1 + s->src[k].n), PHASE_MATCH))
                        break;
                if (has_candidate(s, k))
                        continue;
                const struct mark_device *md = &m->devices[k];
                /* Devices in its place that the host uses: named as such. */
                _cleanup_free_ char *bound = is_mdev(md) ? NULL : host_bound_in_place(s, k);
                _cleanup_free_ char *w = is_mdev(md) ? why_not_mdev(s, md)
                        : bound && *bound
                        ? xasprintf("device %s (%s, host node %d): the only devices of this host in its place are bound "
                                    "to host drivers, and pcinuma never gives a migrating guest a device the host uses: "
                                    "%s (bind one to vfio-pci, or list it in the policy's passthrough_pool)",
                                    md->host, md->vendor_device ? md->vendor_device : "?", md->host_node, bound)
                        : why_not(h, md, &s->src[k], s->dst, s->n_dst);
                strbuf_printf(&why, "\n%s", w);
                n_missing++;
                if (is_mdev(md))
                        add_kind(&types, &n_types, md->mdev_type);
                else if (md->vendor_device && host_has(h, md->vendor_device))
                        add_kind(&kinds, &n_kinds, md->vendor_device);
        }
        if (!n_missing)
                return NULL;
        struct strbuf b = {0};
        strbuf_printf(&b, "%zu of %zu devices have no place like their own on this host", n_missing, m->n_devices);
        strbuf_append(&b, why.buf);
        free(why.buf);
        for (size_t i = 0; i < n_kinds; i++) {
                _cleanup_free_ char *list = node_list(h, kinds[i]);
                strbuf_printf(&b, "\nthis host's %s devices: %s", kinds[i], list);
        }
        for (size_t i = 0; i < n_types; i++) {
                _cleanup_free_ char *list = mdev_list(h, types[i]);
                if (list && *list)
                        strbuf_printf(&b, "\nthis host's mdevs of type %s: %s", types[i], list);
        }
        return strbuf_steal(&b);
}

/* Each mark device's position, parsed into s->src; the counts of its
 * position items, PCI devices and mdevs.  -1 with *ret_reason for a
 * device the mark records no usable position (or mdev type) for. */
static int search_sources(struct search *s, size_t *ret_items, size_t *ret_pci, size_t *ret_mdev, char **ret_reason) {
        const struct mark *m = s->m;
        s->src = xcalloc(m->n_devices ? m->n_devices : 1, sizeof(*s->src));
        s->choice = xcalloc(m->n_devices ? m->n_devices : 1, sizeof(size_t));
        for (size_t k = 0; k < m->n_devices; k++) {
                const struct mark_device *md = &m->devices[k];
                if (is_mdev(md) && !md->mdev) {
                        *ret_reason = xstrdup("the mark records a device with neither a host BDF nor an mdev UUID");
                        return -1;
                }
                if (is_mdev(md) && !md->mdev_type) {
                        *ret_reason = xasprintf("mdev %s: the mark records no mdev type for it (planned by an earlier "
                                                "pcinuma, or the host map did not know it)", md->mdev);
                        return -1;
                }
                if (!md->position || pos_parse(md->position, &s->src[k]) < 0) {
                        *ret_reason = is_mdev(md)
                                ? xasprintf("mdev %s: the mark records no position for its parent device (planned by "
                                            "an earlier pcinuma, or the fingerprint does not count its parent)", md->mdev)
                                : xasprintf("device %s: the mark records no position for it (planned by an "
                                            "earlier pcinuma, or the host map did not know it)", md->host);
                        return -1;
                }
                *ret_items += s->src[k].n;
                if (is_mdev(md))
                        (*ret_mdev)++;
                else
                        (*ret_pci)++;
        }
        return 0;
}

/* This host's devices with a position, in the fingerprint's order, ranked
 * by the search's preference, best first: devices no other domain uses (it
 * takes used ones only when it finds no mapping without them), and among
 * those, devices that hold no mdevs (a GPU whose vendor driver has created
 * vGPUs cannot be passed through whole while they exist).  True when
 * another domain uses one. */
static bool search_dests(struct search *s, const struct positions *ps, const struct policy *pol,
                         const struct migrate_in_use *in_use, const char *self) {
        const struct hostmap *h = s->h;
        for (size_t o = 0; o < ps->n_order; o++) {
                struct dest *d = GROW(s->dst, s->n_dst);
                *d = (struct dest) { .device = ps->order[o] };
                d->position = ps->pos[d->device] ? xstrdup(ps->pos[d->device]) : NULL;
                d->host_bound = !meant_for_passthrough(&h->devices[d->device], pol);
                if (!d->position || pos_parse(d->position, &d->pos) < 0)
                        s->n_dst--, free(d->position);
        }
        bool any_taken = false;
        for (size_t j = 0; j < s->n_dst; j++) {
                bool parent = false;
                for (size_t i = 0; i < h->n_mdevs && !parent; i++)
                        parent = pci_addr_eq(&h->mdevs[i].parent, &h->devices[s->dst[j].device].addr);
                s->dst[j].taken = used_by_other(in_use, self, h->devices[s->dst[j].device].name);
                any_taken |= s->dst[j].taken != NULL;
                s->dst[j].tier = (s->dst[j].taken ? 2u : 0u) + (parent ? 1u : 0u);
        }
        order_by_tier(s->dst, s->n_dst, sizeof(*s->dst), offsetof(struct dest, tier), 4);
        return any_taken;
}

/* This host's mdevs whose parent has a position, free ones first.  True
 * when another domain uses one. */
static bool search_mdests(struct search *s, const struct migrate_in_use *in_use, const char *self) {
        const struct hostmap *h = s->h;
        bool any_taken = false;
        for (size_t i = 0; i < h->n_mdevs; i++) {
                const struct hostmap_device *parent = hostmap_find_device(h, &h->mdevs[i].parent);
                for (size_t j = 0; parent && j < s->n_dst; j++) {
                        if (s->dst[j].device != (size_t) (parent - h->devices))
                                continue;
                        struct mdest *md = GROW(s->mdst, s->n_mdst);
                        *md = (struct mdest) { .mdev = i, .device = s->dst[j].device, .position = s->dst[j].position };
                        if (pos_parse(md->position, &md->pos) < 0) {
                                s->n_mdst--;
                                break;
                        }
                        _cleanup_free_ char *id = xasprintf("mdev:%s", strempty(h->mdevs[i].uuid));
                        md->taken = used_by_other(in_use, self, id);
                        any_taken |= md->taken != NULL;
                        md->tier = md->taken ? 1u : 0u;
                        break;
                }
        }
        order_by_tier(s->mdst, s->n_mdst, sizeof(*s->mdst), offsetof(struct mdest, tier), 2);
        return any_taken;
}

/* The search itself, once the limits hold: each device on its own first,
 * for a reason that names every device that has no place here; then free
 * devices only, and if that finds nothing, any (a failed search leaves
 * nothing used or bound).  0, or -1 with *ret_reason. */
static int search_run(struct search *s, bool any_taken, char **ret_reason) {
        struct work *work = s->work;
        *ret_reason = why_no_places(s, s->m, s->h, work);
        if (work_exhausted(work)) {
                free(*ret_reason);
                *ret_reason = NULL;
                work_error(work, ret_reason);
                return -1;
        }
        if (*ret_reason)
                return -1;
        s->free_only = true;
        bool found = search_from(s, 0);
        if (!found && any_taken) {
                /* A budget of its own: the free-only pass may have spent
                 * all of its own proving that free devices are not enough. */
                s->free_only = false;
                s->steps = 0;
                found = search_from(s, 0);
        }
        if (found)
                return 0;
        if (work_exhausted(work))
                work_error(work, ret_reason);
        else if (s->steps > s->budget)
                *ret_reason = xasprintf("the mapping gave up after trying %zu placements (the limit, MIGRATE_MAP_BUDGET): "
                                        "too many of this host's devices are in the same positions as the mark's to try "
                                        "every combination; nothing was mapped", s->budget);
        else
                *ret_reason = xstrdup("every device has a place like its own on this host, but not together: devices that "
                                      "share a root complex, switch or slot on the source host (or mdevs that share a "
                                      "parent) do not find the same here");
        return -1;
}

/* The mapping the search found: a pair per mark device. */
static void search_result(const struct search *s, const struct positions *ps, struct migrate_map *ret) {
        const struct mark *m = s->m;
        const struct hostmap *h = s->h;
        struct migrate_map map = {0};
        memcpy(map.fingerprint, ps->digest, sizeof(map.fingerprint));
        for (size_t k = 0; k < m->n_devices; k++) {
                bool mdev = is_mdev(&m->devices[k]);
                const struct dest *d = mdev ? NULL : &s->dst[s->choice[k]];
                const struct mdest *md = mdev ? &s->mdst[s->choice[k]] : NULL;
                const struct hostmap_device *dev = &h->devices[mdev ? md->device : d->device];
                const struct migrate_used *taken = mdev ? md->taken : d->taken;
                *GROW(map.pairs, map.n_pairs) = (struct migrate_pair) {
                        .from = xstrdup(mdev ? m->devices[k].mdev : m->devices[k].host),
                        .to = xstrdup(mdev ? h->mdevs[md->mdev].uuid : dev->name), .mdev = mdev,
                        .to_socket = dev->node >= 0 ? hostmap_node_socket(h, dev->node) : -1,
                        .to_position = xstrdup(mdev ? md->position : d->position),
                        .used_by = taken ? xstrdup(taken->domain ? taken->domain : strempty(taken->uuid)) : NULL,
                };
        }
        *ret = map;
}

static void search_done(struct search *s) {
        for (size_t k = 0; s->src && k < s->m->n_devices; k++)
                pos_done(&s->src[k]);
        free(s->src);
        for (size_t j = 0; j < s->n_mdst; j++)
                pos_done(&s->mdst[j].pos);
        free(s->mdst);
        for (size_t j = 0; j < s->n_dst; j++) {
                free(s->dst[j].position);
                pos_done(&s->dst[j].pos);
        }
        free(s->dst);
        free(s->used);
        free(s->mused);
        free(s->choice);
        free((void *) s->bind_src);
        free((void *) s->bind_dst);
}

/* migrate_map_budget(), spending from the request's budget 'work' too
 * (NULL: none). */
static int map_devices(const struct mark *m, const struct hostmap *h, const struct positions *ps,
                       const struct policy *pol, const struct migrate_in_use *in_use, const char *self, size_t budget,
                       struct work *work, struct migrate_map *ret, char **ret_reason) {
        _cleanup_(search_done) struct search s = { .m = m, .h = h, .budget = budget, .work = work };
        size_t n_items = 0, n_pci = 0, n_mdev = 0;

        if (search_sources(&s, &n_items, &n_pci, &n_mdev, ret_reason) < 0)
                return -1;
        bool any_taken = search_dests(&s, ps, pol, in_use, self);
        any_taken |= search_mdests(&s, in_use, self);
        /* Each device needs one of its own: this also bounds the search's
         * depth by this host's devices, whatever a mark holds. */
        if (n_pci > s.n_dst) {
                *ret_reason = xasprintf("the mark records %zu host devices; this host has only %zu passthrough-capable "
                                        "devices", n_pci, s.n_dst);
                return -1;
        }
        if (n_mdev > s.n_mdst) {
                *ret_reason = xasprintf("the mark records %zu mdevs; this host has only %zu mdevs on devices the "
                                        "fingerprint counts", n_mdev, s.n_mdst);
                return -1;
        }
        s.used = xcalloc(s.n_dst ? s.n_dst : 1, sizeof(bool));
        s.mused = xcalloc(s.n_mdst ? s.n_mdst : 1, sizeof(bool));
        s.bind_src = xcalloc(n_items ? n_items : 1, sizeof(char *));
        s.bind_dst = xcalloc(n_items ? n_items : 1, sizeof(char *));
        if (search_run(&s, any_taken, ret_reason) < 0)
                return -1;
        search_result(&s, ps, ret);
        return 0;
}

/* --- what this host can give ----------------------------------------------- */

void migrate_capacity(const struct hostmap *h, size_t *ret_pci, size_t *ret_mdev) {
        const struct positions *ps = hostmap_derived(h, positions_compute, positions_free);
        size_t n_pci = 0, n_mdev = 0;
        for (size_t i = 0; i < ps->n; i++)
                n_pci += ps->pos[i] != NULL;
        for (size_t i = 0; i < h->n_mdevs; i++) {
                const struct hostmap_device *parent = hostmap_find_device(h, &h->mdevs[i].parent);
                size_t k = parent ? (size_t) (parent - h->devices) : ps->n;
                n_mdev += k < ps->n && ps->pos[k];
        }
        *ret_pci = n_pci;
        *ret_mdev = n_mdev;
}

int migrate_map_host(const struct mark *m, const struct hostmap *h, const struct policy *pol,
                     const struct migrate_in_use *in_use, const char *self, struct work *work, struct migrate_map *ret,
                     char **ret_reason) {
        const struct positions *ps = hostmap_derived(h, positions_compute, positions_free);
        return map_devices(m, h, ps, pol, in_use, self, MIGRATE_MAP_BUDGET, work, ret, ret_reason);
}

int migrate_map(const struct mark *m, const struct hostmap *h, const struct fingerprint *f,
                const struct migrate_in_use *in_use, const char *self, struct migrate_map *ret, char **ret_reason) {
        return migrate_map_budget(m, h, f, in_use, self, MIGRATE_MAP_BUDGET, ret, ret_reason);
}

int migrate_map_budget(const struct mark *m, const struct hostmap *h, const struct fingerprint *f,
                       const struct migrate_in_use *in_use, const char *self, size_t budget, struct migrate_map *ret,
                       char **ret_reason) {
        return migrate_map_policy(m, h, f, NULL, in_use, self, budget, ret, ret_reason);
}

int migrate_map_policy(const struct mark *m, const struct hostmap *h, const struct fingerprint *f, const struct policy *pol,
                       const struct migrate_in_use *in_use, const char *self, size_t budget, struct migrate_map *ret,
                       char **ret_reason) {
        struct positions *ps = positions_of(f, h);
        int r = map_devices(m, h, ps, pol, in_use, self, budget, NULL, ret, ret_reason);
        positions_free(ps);
        return r;
}

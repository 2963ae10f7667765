/* Which domains a host map change or a policy reload touches (see
 * recheck.h).  Pure: no I/O, no globals, no clock. */
#include "recheck.h"

#include <ctype.h>
#include <strings.h>

/* --- sets of ids ---------------------------------------------------------- */

/* Index of the first element >= id. */
static size_t ids_lower_bound(const struct recheck_ids *s, const char *id) {
        size_t lo = 0, hi = s->n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (strcmp(s->v[mid], id) < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

void recheck_ids_add(struct recheck_ids *s, const char *id) {
        size_t i = ids_lower_bound(s, id);
        if (i < s->n && streq(s->v[i], id))
                return;
        s->v = xreallocarray(s->v, s->n + 1, sizeof(char *));
        memmove(s->v + i + 1, s->v + i, (s->n - i) * sizeof(char *));
        s->v[i] = xstrdup(id);
        s->n++;
}

bool recheck_ids_contains(const struct recheck_ids *s, const char *id) {
        size_t i = ids_lower_bound(s, id);
        return i < s->n && streq(s->v[i], id);
}

bool recheck_ids_intersect(const struct recheck_ids *a, const struct recheck_ids *b) {
        size_t i = 0, j = 0;
        while (i < a->n && j < b->n) {
                int c = strcmp(a->v[i], b->v[j]);
                if (c == 0)
                        return true;
                if (c < 0)
                        i++;
                else
                        j++;
        }
        return false;
}

void recheck_ids_done(struct recheck_ids *s) {
        for (size_t i = 0; i < s->n; i++)
                free(s->v[i]);
        free(s->v);
        *s = (struct recheck_ids) {0};
}

/* --- the devices a domain uses ------------------------------------------- */

static char *mdev_id(const char *uuid) {
        char *s = xasprintf("mdev:%s", uuid);
        for (char *p = s; *p; p++)
                *p = (char) tolower((unsigned char) *p);
        return s;
}

static void add_pci(struct recheck_ids *s, const struct hostmap *h, const struct pci_addr *a) {
        char buf[PCI_ADDR_STRLEN];
        recheck_ids_add(s, pci_addr_format(a, buf));
        /* A VF without a node of its own inherits its PF's (docs/design.md §4). */
        const struct hostmap_device *dev = hostmap_find_device(h, a);
        if (dev && dev->has_physfn)
                recheck_ids_add(s, pci_addr_format(&dev->physfn, buf));
}

void recheck_domain_devices(const struct domain *d, const struct hostmap *h, struct recheck_ids *ret) {
        struct recheck_ids s = {0};
        for (size_t i = 0; i < d->n_hostdevs; i++) {
                const struct domain_hostdev *hd = &d->hostdevs[i];
                if (hd->kind == DOMAIN_HOSTDEV_PCI) {
                        add_pci(&s, h, &hd->host);
                        continue;
                }
                _cleanup_free_ char *id = mdev_id(hd->mdev_uuid);
                recheck_ids_add(&s, id);
                const struct hostmap_mdev *m = hostmap_find_mdev(h, hd->mdev_uuid);
                if (m)
                        add_pci(&s, h, &m->parent);
        }
        *ret = s;
}

/* --- host map differences ------------------------------------------------- */

/* The fingerprints recheck_diff_hosts() compares (caller frees). */
static char *recheck_device_fingerprint(const struct hostmap_device *d) {
        struct strbuf b = {0};
        char pf[PCI_ADDR_STRLEN], up[PCI_ADDR_STRLEN];
        strbuf_printf(&b, "class=%06x id=%04x:%04x numa_node=%d node=%d driver=%s iommu=%d physfn=%s vfs=%u bars=",
                      d->class, d->vendor, d->device, d->sysfs_node, d->node, strempty(d->driver), d->iommu_group,
                      d->has_physfn ? pci_addr_format(&d->physfn, pf) : "-", d->n_vfs);
        for (int i = 0; i < HOSTMAP_N_BARS; i++)
                strbuf_printf(&b, "%s%d:%d:%llu", i ? "," : "", (int) d->bars[i].type, d->bars[i].prefetchable,
                              (unsigned long long) d->bars[i].size);
        strbuf_printf(&b, " bridge=%s path=", strempty(d->host_bridge));
        for (size_t i = 0; i < d->n_upstream; i++)
                strbuf_printf(&b, "%s%s", i ? "/" : "", pci_addr_format(&d->upstream[i], up));
        return strbuf_steal(&b);
}

static char *recheck_mdev_fingerprint(const struct hostmap_mdev *m) {
        char p[PCI_ADDR_STRLEN];
        return xasprintf("parent=%s type=%s node=%d", pci_addr_format(&m->parent, p), strempty(m->type), m->node);
}

/* Nodes, their CPUs and sockets, and the distances: what every plan reads. */
static char *nodes_fingerprint(const struct hostmap *h) {
        struct strbuf b = {0};
        strbuf_printf(&b, "single=%d", h->single_node);
        for (size_t i = 0; i < h->n_nodes; i++) {
                _cleanup_free_ char *cpus = bitmap_format(&h->nodes[i].cpus);
                strbuf_printf(&b, " node%d=%s@%d", h->nodes[i].id, cpus, h->nodes[i].socket);
        }
        strbuf_append(&b, " distances=");
        for (size_t i = 0; h->distance && i < h->n_nodes * h->n_nodes; i++)
                strbuf_printf(&b, "%s%d", i ? "," : "", h->distance[i]);
        return strbuf_steal(&b);
}

static void add_change(struct recheck_diff *d, char *id, char *before, char *after) {
        if (before && after && streq(before, after)) {
                free(id);
                free(before);
                free(after);
                return;
        }
        struct recheck_change *c = GROW(d->v, d->n);
        c->id = id;
        c->before = before;
        c->after = after;
}

static int cmp_change(const void *a, const void *b) {
        return strcmp(((const struct recheck_change *) a)->id, ((const struct recheck_change *) b)->id);
}

void recheck_diff_hosts(const struct hostmap *old, const struct hostmap *new, struct recheck_diff *ret) {
        struct recheck_diff d = {0};
        _cleanup_free_ char *n1 = nodes_fingerprint(old), *n2 = nodes_fingerprint(new);
        d.global = !streq(n1, n2);

        /* Both device arrays are sorted by address: one merge walk. */
        size_t i = 0, j = 0;
        while (i < old->n_devices || j < new->n_devices) {
                const struct hostmap_device *a = i < old->n_devices ? &old->devices[i] : NULL;
                const struct hostmap_device *b = j < new->n_devices ? &new->devices[j] : NULL;
                int c = !a ? 1 : !b ? -1 : pci_addr_cmp(&a->addr, &b->addr);
                char name[PCI_ADDR_STRLEN];
                pci_addr_format(c <= 0 ? &a->addr : &b->addr, name);
                add_change(&d, xstrdup(name), c <= 0 ? recheck_device_fingerprint(a) : NULL,
                           c >= 0 ? recheck_device_fingerprint(b) : NULL);
                if (c <= 0)
                        i++;
                if (c >= 0)
                        j++;
        }
        /* mdevs are sorted by uuid as the reader wrote it; compare by the
         * lower-cased id, with a lookup for each side. */
        for (size_t k = 0; k < old->n_mdevs; k++) {
                const struct hostmap_mdev *a = &old->mdevs[k];
                const struct hostmap_mdev *b = hostmap_find_mdev(new, a->uuid);
                add_change(&d, mdev_id(a->uuid), recheck_mdev_fingerprint(a), b ? recheck_mdev_fingerprint(b) : NULL);
        }
        for (size_t k = 0; k < new->n_mdevs; k++)
                if (!hostmap_find_mdev(old, new->mdevs[k].uuid))
                        add_change(&d, mdev_id(new->mdevs[k].uuid), NULL, recheck_mdev_fingerprint(&new->mdevs[k]));
        if (d.n > 1)
                qsort(d.v, d.n, sizeof(*d.v), cmp_change);
        *ret = d;
}

void recheck_diff_ids(const struct recheck_diff *d, struct recheck_ids *ret) {
        for (size_t i = 0; i < d->n; i++)
                recheck_ids_add(ret, d->v[i].id);
}

static void change_done(struct recheck_change *c) {
        free(c->id);
        free(c->before);
        free(c->after);
}

void recheck_diff_done(struct recheck_diff *d) {
        for (size_t i = 0; i < d->n; i++)
                change_done(&d->v[i]);
        free(d->v);
        *d = (struct recheck_diff) {0};
}

/* --- the settings key ----------------------------------------------------- */

char *recheck_settings_key(const struct policy_settings *s, const struct policy *p) {
        struct strbuf b = {0};
        strbuf_printf(&b, "%s topology=%s mirror_switches=%d mirror_distances=%d mmio64=%d io_port_check=%d managed=%d",
                      policy_mode_to_string(s->mode), policy_topology_to_string(s->topology), s->mirror_switches,
                      s->mirror_distances, s->mmio64_auto, s->io_port_check, s->managed_auto);
        /* Only when on, so that the keys of existing settings stay as they were. */
        if (s->gpudirect_clique_auto)
                strbuf_append(&b, " gpudirect_clique=auto");
        if (!s->nccl_topology)
                strbuf_append(&b, " nccl_topology=off");
        if (!s->migration_same_topology)
                strbuf_append(&b, " migration=refuse");
        /* The variant driver names matter only to managed: auto. */
        if (s->managed_auto && p)
                for (size_t i = 0; i < p->n_variant_drivers; i++)
                        strbuf_printf(&b, "%s%s", i ? "," : " variant_drivers=", p->variant_drivers[i]);
        return strbuf_steal(&b);
}

/* --- held removals ---------------------------------------------------------- */

static struct recheck_hold *hold_find(struct recheck_holds *h, const char *id) {
        for (size_t i = 0; i < h->n; i++)
                if (streq(h->v[i].id, id))
                        return &h->v[i];
        return NULL;
}

static void hold_remove(struct recheck_holds *h, struct recheck_hold *x) {
        free(x->id);
        free(x->before);
        size_t i = (size_t) (x - h->v);
        memmove(h->v + i, h->v + i + 1, (h->n - i - 1) * sizeof(*h->v));
        h->n--;
}

void recheck_holds_filter(struct recheck_holds *h, struct recheck_diff *diff, uint64_t now, uint64_t grace) {
        size_t keep = 0;
        for (size_t i = 0; i < diff->n; i++) {
                struct recheck_change *c = &diff->v[i];
                bool drop = false;
                if (c->before && !c->after) {
                        /* Gone: hold it.  (Held already cannot be: it was
                         * absent from the old map then.) */
                        if (!hold_find(h, c->id)) {
                                struct recheck_hold *x = GROW(h->v, h->n);
                                x->id = xstrdup(c->id);
                                x->before = xstrdup(c->before);
                                x->deadline = now + grace;
                        }
                        drop = true;
                } else if (!c->before && c->after) {
                        struct recheck_hold *x = hold_find(h, c->id);
                        if (x) {
                                /* Back: unchanged means nothing happened. */
                                drop = streq(x->before, c->after);
                                hold_remove(h, x);
                        }
                }
                if (drop)
                        change_done(c);
                else
                        diff->v[keep++] = *c;
        }
        diff->n = keep;
}

void recheck_holds_expire(struct recheck_holds *h, uint64_t now, struct recheck_ids *ret) {
        for (size_t i = 0; i < h->n;)
                if (h->v[i].deadline <= now) {
                        recheck_ids_add(ret, h->v[i].id);
                        hold_remove(h, &h->v[i]);
                } else
                        i++;
}

uint64_t recheck_holds_next(const struct recheck_holds *h) {
        uint64_t next = UINT64_MAX;
        for (size_t i = 0; i < h->n; i++)
                if (h->v[i].deadline < next)
                        next = h->v[i].deadline;
        return next;
}

void recheck_holds_done(struct recheck_holds *h) {
        for (size_t i = 0; i < h->n; i++) {
                free(h->v[i].id);
                free(h->v[i].before);
        }
        free(h->v);
        *h = (struct recheck_holds) {0};
}

/* --- the cache -------------------------------------------------------------- */

void recheck_cache_init(struct recheck_cache *c, size_t max) {
        *c = (struct recheck_cache) { .max = max ? max : 1 };
}

static void entry_done(struct recheck_entry *e) {
        free(e->uuid);
        free(e->name);
        free(e->tag);
        free(e->requested);
        recheck_ids_done(&e->devices);
        free(e->settings_key);
        free(e->summary);
}

void recheck_cache_done(struct recheck_cache *c) {
        for (size_t i = 0; i < c->n; i++)
                entry_done(&c->v[i]);
        free(c->v);
        *c = (struct recheck_cache) {0};
}

/* UUIDs compare case-insensitively (libvirt prints lower case; a rule
 * may not). */
struct recheck_entry *recheck_cache_find(struct recheck_cache *c, const char *uuid) {
        for (size_t i = 0; i < c->n; i++)
                if (strcasecmp(c->v[i].uuid, uuid) == 0)
                        return &c->v[i];
        return NULL;
}

bool recheck_cache_forget(struct recheck_cache *c, const char *uuid) {
        struct recheck_entry *e = recheck_cache_find(c, uuid);
        if (!e)
                return false;
        entry_done(e);
        *e = c->v[--c->n];
        return true;
}

static char *dup_or_null(const char *s) {
        return s ? xstrdup(s) : NULL;
}

struct recheck_entry *recheck_cache_update(struct recheck_cache *c, const char *uuid, const struct domain *d,
                                           const struct hostmap *h, const char *settings_key, bool *ret_new) {
        struct recheck_entry *e = recheck_cache_find(c, uuid);
        bool created = !e;
        if (!e) {
                if (c->n >= c->max) {
                        /* Full: drop the least recently planned. */
                        size_t oldest = 0;
                        for (size_t i = 1; i < c->n; i++)
                                if (c->v[i].seen < c->v[oldest].seen)
                                        oldest = i;
                        entry_done(&c->v[oldest]);
                        c->v[oldest] = c->v[--c->n];
                        c->overflowed = true;
                }
                e = GROW(c->v, c->n);
                e->uuid = xstrdup(uuid);
        } else {
                free(e->name);
                free(e->tag);
                free(e->requested);
                free(e->settings_key);
                recheck_ids_done(&e->devices);
        }
        e->name = dup_or_null(d->name);
        e->tag = dup_or_null(d->policy_tag);
        e->requested = dup_or_null(d->requested_policy);
        e->settings_key = xstrdup(settings_key);
        recheck_domain_devices(d, h, &e->devices);
        e->seen = ++c->clock;
        if (ret_new)
                *ret_new = created;
        return e;
}

void recheck_cache_touched_by(const struct recheck_cache *c, const struct recheck_ids *ids, struct recheck_ids *ret) {
        for (size_t i = 0; i < c->n; i++)
                if (recheck_ids_intersect(&c->v[i].devices, ids))
                        recheck_ids_add(ret, c->v[i].uuid);
}

void recheck_cache_policy_changed(const struct recheck_cache *c, const struct policy *p, struct recheck_ids *ret) {
        for (size_t i = 0; i < c->n; i++) {
                const struct recheck_entry *e = &c->v[i];
                struct policy_subject subj = { .name = e->name, .uuid = e->uuid, .tag = e->tag, .requested = e->requested };
                struct policy_settings s;
                policy_resolve(p, &subj, &s, NULL);
                _cleanup_free_ char *key = recheck_settings_key(&s, p);
                if (!streq(key, e->settings_key))
                        recheck_ids_add(ret, e->uuid);
        }
}

/* The memo of prepare answers: which answers it keeps, and its table,
 * which gives one only to the very request it was decided for (memo.h
 * says why that is sound).  Pure. */
#include "memo.h"

#include <string.h>

#include "util.h"

/* The digits of the root element's id='N': where they are in xml, when xml
 * begins with a <domain ...> start tag whose attributes read cleanly and
 * one of them is id with 1 to 20 digits as its value.  Anything else: no
 * digits left out.  Two documents are then the same request only when
 * they differ in those digits alone, never in where they are or how many:
 * the lengths and the places are compared, and the scan reads only what
 * comes before them. */
static bool root_id_digits(const char *xml, size_t len, size_t *ret_at, size_t *ret_n) {
        static const char open_tag[] = "<domain";
        size_t i = sizeof open_tag - 1;
        if (!xml || len < i || memcmp(xml, open_tag, i) != 0)
                return false;
        for (;;) {
                size_t ws = i;
                while (i < len && strchr(" \t\r\n", xml[i]) && xml[i])
                        i++;
                if (i == len || xml[i] == '>' || xml[i] == '/' || i == ws)
                        return false;
                size_t name = i;
                while (i < len && ((xml[i] >= 'a' && xml[i] <= 'z') || (xml[i] >= 'A' && xml[i] <= 'Z') ||
                                   xml[i] == ':' || xml[i] == '_' || xml[i] == '-'))
                        i++;
                size_t name_len = i - name;
                if (name_len == 0 || i + 1 >= len || xml[i] != '=' || (xml[i + 1] != '\'' && xml[i + 1] != '"'))
                        return false;
                char q = xml[i + 1];
                size_t value = i + 2;
                const char *end = memchr(xml + value, q, len - value);
                if (!end)
                        return false;
                size_t value_len = (size_t) (end - xml) - value;
                if (memchr(xml + value, '<', value_len))
                        return false;
                if (name_len == 2 && memcmp(xml + name, "id", 2) == 0) {
                        if (value_len == 0 || value_len > 20)
                                return false;
                        for (size_t k = 0; k < value_len; k++)
                                if (xml[value + k] < '0' || xml[value + k] > '9')
                                        return false;
                        *ret_at = value;
                        *ret_n = value_len;
                        return true;
                }
                i = (size_t) (end - xml) + 1;
        }
}

bool memo_keeps(const struct decision *d) {
        if (!d->phase || !d->subphase || strcmp(d->phase, "prepare") != 0 || strcmp(d->subphase, "begin") != 0)
                return false;
        if (d->verdict != DECIDE_ALLOW && d->verdict != DECIDE_WARN)
                return false;
        /* The plan's answer: an error or a domain beyond the limits has
         * none. */
        const struct engine_result *r = d->result;
        if (!r || d->out || d->restart_if_persistent || d->n_boot_files)
                return false;
        switch (r->verdict) {
        case PLAN_UNCHANGED:
        case PLAN_SKIP:
                return true;
        case PLAN_APPLY:
                return r->already_planned;
        case PLAN_REFUSED:
                break;
        }
        return false;
}

static void entry_done(struct memo *m, struct memo_entry *e) {
        for (size_t i = 0; i < 4; i++)
                free(e->argv[i]);
        free(e->xml);
        if (m->free_value)
                m->free_value(e->value);
}

void memo_init(struct memo *m, void (*free_value)(void *value)) {
        *m = (struct memo) { .free_value = free_value };
}

void memo_done(struct memo *m) {
        for (size_t i = 0; i < m->n; i++)
                entry_done(m, &m->v[i]);
        free(m->v);
        *m = (struct memo) { .free_value = m->free_value };
}

/* Is e kept for req (its root id digits, as root_id_digits() found them)
 * and these generations? */
static bool entry_is(const struct memo_entry *e, const struct proto_request *req, bool id, size_t at, size_t n,
                     uint64_t host_generation, uint64_t policy_generation) {
        if (e->host_generation != host_generation || e->policy_generation != policy_generation ||
            e->xml_len != req->xml_len || !e->xml != !req->xml || e->xml_not_utf8 != req->xml_not_utf8 ||
            e->xml_invalid_utf8 != req->xml_invalid_utf8 || e->id != id || e->id_at != at || e->id_n != n)
                return false;
        for (size_t i = 0; i < 4; i++)
                if (!streq(e->argv[i], req->argv[i] ? req->argv[i] : ""))
                        return false;
        if (!req->xml)
                return true;
        if (!id)
                return memcmp(e->xml, req->xml, req->xml_len) == 0;
        return memcmp(e->xml, req->xml, at) == 0 && memcmp(e->xml + at + n, req->xml + at + n, req->xml_len - at - n) == 0;
}

static struct memo_entry *find(struct memo *m, const struct proto_request *req, uint64_t host_generation,
                               uint64_t policy_generation) {
        size_t at = 0, n = 0;
        bool id = root_id_digits(req->xml, req->xml_len, &at, &n);
        for (size_t i = 0; i < m->n; i++)
                if (entry_is(&m->v[i], req, id, at, n, host_generation, policy_generation))
                        return &m->v[i];
        return NULL;
}

void *memo_get(struct memo *m, const struct proto_request *req, uint64_t host_generation, uint64_t policy_generation) {
        struct memo_entry *e = find(m, req, host_generation, policy_generation);
        if (e)
                m->hits++;
        else
                m->misses++;
        return e ? e->value : NULL;
}

/* Drop entry i. */
static void drop(struct memo *m, size_t i) {
        m->bytes -= m->v[i].bytes;
        entry_done(m, &m->v[i]);
        memmove(&m->v[i], &m->v[i + 1], (m->n - i - 1) * sizeof(*m->v));
        m->n--;
}

bool memo_put(struct memo *m, const struct proto_request *req, uint64_t host_generation, uint64_t policy_generation,
              void *value) {
        struct memo_entry e = {
                .xml_len = req->xml_len,
                .xml_not_utf8 = req->xml_not_utf8,
                .xml_invalid_utf8 = req->xml_invalid_utf8,
                .host_generation = host_generation,
                .policy_generation = policy_generation,
                .bytes = sizeof(e) + (req->xml ? req->xml_len : 0),
                .value = value,
        };
        for (size_t i = 0; i < 4; i++)
                e.bytes += (req->argv[i] ? strlen(req->argv[i]) : 0) + 1;
        if (e.bytes > MEMO_BYTES_MAX) {
                if (m->free_value)
                        m->free_value(value);
                return false;
        }
        struct memo_entry *old = find(m, req, host_generation, policy_generation);
        if (old)
                drop(m, (size_t) (old - m->v));
        while (m->n > 0 && (m->n == MEMO_CAPACITY || m->bytes + e.bytes > MEMO_BYTES_MAX))
                drop(m, 0);
        for (size_t i = 0; i < 4; i++)
                e.argv[i] = xstrdup(req->argv[i] ? req->argv[i] : "");
        if (req->xml) {
                e.xml = xmalloc(req->xml_len ? req->xml_len : 1);
                memcpy(e.xml, req->xml, req->xml_len);
        }
        e.id = root_id_digits(req->xml, req->xml_len, &e.id_at, &e.id_n);
        if (!m->v)
                m->v = xcalloc(MEMO_CAPACITY, sizeof(*m->v));
        m->v[m->n++] = e;
        m->bytes += e.bytes;
        return true;
}

/* ---- keeping a generation across a reload that changes nothing --------- */

/* The sizes of the structs compared below, on x86-64: a field added to one
 * of them that changes its size stops the build here, until the comparison
 * reads it too (one that fits into padding does not: the comment above
 * each struct's definition asks for it) (a field it missed would let the memo answer with a host
 * map or a policy that is not the one the answer was decided with). */
#if defined(__x86_64__)
_Static_assert(sizeof(struct hostmap) == (PCINUMA_STAND_INS ? 240 : 232), "compare the new field in memo_same_hostmap()");
#endif
#if defined(__x86_64__)
_Static_assert(sizeof(struct hostmap_device) == 232, "compare the new field in memo_same_hostmap()");
_Static_assert(sizeof(struct hostmap_mdev) == 64, "compare the new field in memo_same_hostmap()");
_Static_assert(sizeof(struct hostmap_node) == 32, "compare the new field in memo_same_hostmap()");
_Static_assert(sizeof(struct hostmap_cpu_id) == 140, "compare the new field in memo_same_hostmap()");
_Static_assert(sizeof(struct policy) == 96, "compare the new field in memo_same_policy()");
_Static_assert(sizeof(struct policy_settings) == 24, "compare the new field in memo_same_policy()");
_Static_assert(sizeof(struct policy_rule) == 48, "compare the new field in memo_same_policy()");
_Static_assert(sizeof(struct policy_pool_entry) == 32, "compare the new field in memo_same_policy()");
#endif

static bool same_device(const struct hostmap_device *a, const struct hostmap_device *b) {
        if (!pci_addr_eq(&a->addr, &b->addr) || !streq(a->name, b->name) || a->class != b->class ||
            a->vendor != b->vendor || a->device != b->device || a->sysfs_node != b->sysfs_node || a->node != b->node ||
            !streq_ptr(a->driver, b->driver) || a->iommu_group != b->iommu_group || a->has_physfn != b->has_physfn ||
            (a->has_physfn && !pci_addr_eq(&a->physfn, &b->physfn)) || a->n_vfs != b->n_vfs ||
            !streq_ptr(a->host_bridge, b->host_bridge) || a->n_upstream != b->n_upstream ||
            !streq(a->link_speed, b->link_speed) || a->link_width != b->link_width)
                return false;
        for (size_t i = 0; i < HOSTMAP_N_BARS; i++)
                if (a->bars[i].type != b->bars[i].type || a->bars[i].prefetchable != b->bars[i].prefetchable ||
                    a->bars[i].size != b->bars[i].size)
                        return false;
        for (size_t i = 0; i < a->n_upstream; i++)
                if (!pci_addr_eq(&a->upstream[i], &b->upstream[i]))
                        return false;
        return true;
}

bool memo_same_hostmap(const struct hostmap *a, const struct hostmap *b) {
        if (a->n_nodes != b->n_nodes || a->n_devices != b->n_devices || a->n_mdevs != b->n_mdevs ||
            a->single_node != b->single_node || a->n_warnings != b->n_warnings ||
            a->n_warnings_dropped != b->n_warnings_dropped || !streq(a->cpu_id.arch, b->cpu_id.arch) ||
            !streq(a->cpu_id.vendor, b->cpu_id.vendor) || a->cpu_id.family != b->cpu_id.family ||
            a->cpu_id.model != b->cpu_id.model)
                return false;
#if PCINUMA_STAND_INS
        if (a->stand_ins != b->stand_ins)
                return false;
#endif
        for (size_t i = 0; i < a->n_nodes; i++)
                if (a->nodes[i].id != b->nodes[i].id || a->nodes[i].socket != b->nodes[i].socket ||
                    !bitmap_equal(&a->nodes[i].cpus, &b->nodes[i].cpus))
                        return false;
        if (a->n_nodes && (!a->distance != !b->distance ||
                           (a->distance && memcmp(a->distance, b->distance, a->n_nodes * a->n_nodes * sizeof(int)) != 0)))
                return false;
        for (size_t i = 0; i < a->n_devices; i++)
                if (!same_device(&a->devices[i], &b->devices[i]))
                        return false;
        for (size_t i = 0; i < a->n_mdevs; i++)
                if (!streq(a->mdevs[i].uuid, b->mdevs[i].uuid) || !pci_addr_eq(&a->mdevs[i].parent, &b->mdevs[i].parent) ||
                    !streq_ptr(a->mdevs[i].type, b->mdevs[i].type) || a->mdevs[i].node != b->mdevs[i].node)
                        return false;
        for (size_t i = 0; i < a->n_warnings; i++)
                if (!streq(a->warnings[i], b->warnings[i]))
                        return false;
        return true;
}

static bool same_settings(const struct policy_settings *a, const struct policy_settings *b) {
        return a->mode == b->mode && a->topology == b->topology && a->mirror_switches == b->mirror_switches &&
               a->mirror_distances == b->mirror_distances && a->mmio64_auto == b->mmio64_auto &&
               a->io_port_check == b->io_port_check && a->managed_auto == b->managed_auto &&
               a->nccl_topology == b->nccl_topology && a->migration_same_topology == b->migration_same_topology &&
               a->gpudirect_clique_auto == b->gpudirect_clique_auto && a->first_start == b->first_start &&
               a->transient_restart == b->transient_restart;
}

bool memo_same_policy(const struct policy *a, const struct policy *b) {
        if (!same_settings(&a->def, &b->def) || a->allow_domain_policy != b->allow_domain_policy ||
            a->n_rules != b->n_rules || a->hook_timeout_ms != b->hook_timeout_ms ||
            a->n_variant_drivers != b->n_variant_drivers || a->n_pool != b->n_pool ||
            a->hook_on_unreachable != b->hook_on_unreachable || a->restart_window_ms != b->restart_window_ms)
                return false;
        for (size_t i = 0; i < a->n_rules; i++) {
                const struct policy_rule *x = &a->rules[i], *y = &b->rules[i];
                if (!streq_ptr(x->name_glob, y->name_glob) || !streq_ptr(x->uuid, y->uuid) || !streq_ptr(x->tag, y->tag) ||
                    !same_settings(&x->settings, &y->settings))
                        return false;
        }
        for (size_t i = 0; i < a->n_variant_drivers; i++)
                if (!streq(a->variant_drivers[i], b->variant_drivers[i]))
                        return false;
        for (size_t i = 0; i < a->n_pool; i++) {
                const struct policy_pool_entry *x = &a->pool[i], *y = &b->pool[i];
                if (!streq_ptr(x->text, y->text) || x->kind != y->kind || !pci_addr_eq(&x->addr, &y->addr) ||
                    x->class != y->class || x->class_mask != y->class_mask || x->vendor != y->vendor ||
                    x->device != y->device)
                        return false;
        }
        return true;
}

/* Path fidelity (docs/planner.md, "Path fidelity"): the path type between
 * two devices as nvidia-smi topo -m names it, and the report comparing
 * every pair's path on the host with its path in the planned guest.  The
 * report is quadratic in the devices, so the plan's owner asks for it
 * (planner_fidelity()) rather than planner_run(). */
#include "planner-internal.h"

const char *plan_path_to_string(enum plan_path t) {
        static const char *const names[] = { "PIX", "PXB", "PHB", "NODE", "SYS", "?" };
        return t <= PLAN_PATH_UNKNOWN ? names[t] : "?";
}

/* Inlined into planner_fidelity()'s loop: it runs for every pair. */
static inline enum plan_path path_type(const struct plan_path_end *a, const struct plan_path_end *b) {
        if (a->root < 0 || b->root < 0 || a->root != b->root) {
                if (a->node >= 0 && b->node >= 0 && a->node != b->node)
                        return PLAN_PATH_SYS;
                if (a->root < 0 || b->root < 0)
                        return PLAN_PATH_UNKNOWN;
                return a->node >= 0 && a->node == b->node ? PLAN_PATH_NODE : PLAN_PATH_SYS;
        }
        size_t c = 0;
        while (c < a->n_chain && c < b->n_chain && a->chain[c] == b->chain[c])
                c++;
        if (c == 0)
                return PLAN_PATH_PHB;
        /* Below the deepest shared bridge, one more bridge each at most:
         * the ports of one switch (or functions behind one port). */
        if (a->n_chain <= c + 1 && b->n_chain <= c + 1)
                return PLAN_PATH_PIX;
        return PLAN_PATH_PXB;
}

enum plan_path planner_path_type(const struct plan_path_end *a, const struct plan_path_end *b) {
        return path_type(a, b);
}

/* The guest end of device i: its expander bus, cell and ports from the
 * root port down; a device that does not move is on pcie.0, which has no
 * NUMA node in the guest. */
#define GUEST_PCIE0_ROOT 0x7fffffffL
static void guest_end(const struct plan *p, const long *pos_of, size_t i, uint64_t *chain, size_t cap,
                      struct plan_path_end *e) {
        const struct plan_device *pd = &p->devices[i];
        *e = (struct plan_path_end) { .root = GUEST_PCIE0_ROOT, .node = -1, .chain = chain };
        if (pd->action != PLAN_MOVE || pd->port_index < 0)
                return;
        size_t n = 0;
        int idx = pd->port_index;
        while (n < cap && idx >= 0 && idx <= 255 && pos_of[idx] >= 0) {
                const struct plan_port *port = &p->ports[pos_of[idx]];
                chain[n++] = (uint64_t) port->index;
                e->root = port->pxb_index;
                if (port->parent_index == port->pxb_index)
                        break;
                idx = port->parent_index;
        }
        for (size_t k = 0; k < n / 2; k++) {
                uint64_t t = chain[k];
                chain[k] = chain[n - 1 - k];
                chain[n - 1 - k] = t;
        }
        e->n_chain = n;
        e->node = pd->cell;
}

void planner_fidelity(struct plan *p) {
        size_t n = p->n_devices;
        if (p->fidelity_done)
                return;
        p->fidelity_done = true;
        if (n < 2)
                return;
        if (n > PLAN_FIDELITY_MAX_DEVICES) {
                p->fidelity_skipped = true;
                return;
        }
        /* A guest chain is no deeper than the host's (a root port per
         * device where there is none). */
        size_t max_up = 1;
        for (size_t i = 0; i < n; i++)
                if (p->devices[i].n_host_up > max_up)
                        max_up = p->devices[i].n_host_up;
        long pos_of[256];
        for (size_t k = 0; k < ELEMENTSOF(pos_of); k++)
                pos_of[k] = -1;
        for (size_t k = 0; k < p->n_ports; k++)
                if (p->ports[k].index >= 0 && p->ports[k].index <= 255)
                        pos_of[p->ports[k].index] = (long) k;
        _cleanup_free_ uint64_t *host = xcalloc(n * max_up, sizeof(uint64_t));
        _cleanup_free_ uint64_t *guest = xcalloc(n * max_up, sizeof(uint64_t));
        _cleanup_free_ struct plan_path_end *he = xcalloc(n, sizeof(*he));
        _cleanup_free_ struct plan_path_end *ge = xcalloc(n, sizeof(*ge));
        for (size_t i = 0; i < n; i++) {
                const struct plan_device *pd = &p->devices[i];
                for (size_t k = 0; k < pd->n_host_up; k++)
                        host[i * max_up + k] = plan_pack_addr(&pd->host_up[k]);
                he[i] = (struct plan_path_end) { .root = pd->host_root, .node = pd->host_node, .chain = &host[i * max_up],
                                                 .n_chain = pd->n_host_up };
                guest_end(p, pos_of, i, &guest[i * max_up], max_up, &ge[i]);
        }
        p->pairs = xmalloc(n * (n - 1) / 2 * sizeof(*p->pairs));   /* every entry is set below */
        for (size_t a = 0; a < n; a++)
                for (size_t b = a + 1; b < n; b++) {
                        struct plan_pair *q = &p->pairs[p->n_pairs++];
                        q->a = a;
                        q->b = b;
                        q->host = path_type(&he[a], &he[b]);
                        q->guest = path_type(&ge[a], &ge[b]);
                        if (q->host == PLAN_PATH_UNKNOWN || q->guest == PLAN_PATH_UNKNOWN)
                                p->n_unknown++;
                        else if (q->guest == q->host)
                                p->n_same++;
                        else if (q->guest < q->host)
                                p->n_closer++;
                        else
                                p->n_farther++;
                }
}

/* The placement planner (docs/design.md §6 policies, §7 topology): its
 * entry points.  Pure: it reads the domain model, the host map and the
 * policy settings and produces a struct plan; the rewriter turns that
 * into XML.  This file holds planner_run_opts() and the order of its
 * steps (plan_domain()), the plan's life (plan_free()), what the host map
 * says of each device, and eligibility; the steps themselves live in the
 * planner's other files, by concern (planner-internal.h lists them). */
#include "planner.h"

#include <ctype.h>

#include "fingerprint.h"
#include "planner-internal.h"

const char *plan_verdict_to_string(enum plan_verdict v) {
        switch (v) {
        case PLAN_APPLY:
                return "apply";
        case PLAN_UNCHANGED:
                return "unchanged";
        case PLAN_SKIP:
                return "skip";
        case PLAN_REFUSED:
                return "refuse";
        }
        return "?";
}

const char *plan_action_to_string(enum plan_action a) {
        switch (a) {
        case PLAN_MOVE:
                return "move";
        case PLAN_STAY:
                return "stay";
        case PLAN_REFUSE:
                return "refuse";
        }
        return "?";
}

struct plan *plan_free(struct plan *p) {
        if (!p)
                return NULL;
        for (size_t i = 0; i < p->n_devices; i++) {
                free(p->devices[i].reason);
                free(p->devices[i].host_up);
                free(p->devices[i].position);
                free(p->devices[i].mdev_type);
        }
        free(p->fingerprint);
        free(p->devices);
        plan_clear_layout(p);
        free(p->pairs);
        free(p->degrade_note);
        for (size_t i = 0; i < p->n_warnings; i++)
                free(p->warnings[i]);
        free(p->warnings);
        for (size_t i = 0; i < p->n_causes; i++) {
                free(p->causes[i].what);
                free(p->causes[i].fix);
        }
        free(p->causes);
        free(p->reason);
        free(p->cells_desc);
        free(p->distances);
        free(p->distances_note);
        free(p->mmio64_note);
        free(p->io_note);
        free(p->nccl_arg);
        free(p->nccl_note);
        free(p->managed);
        free(p->cliques);
        free(p->clique_note);
        free(p);
        return NULL;
}

static char *describe_cells(const struct domain *d, const struct hostmap *h) {
        struct strbuf b = {0};
        if (d->n_cells == 0)
                return xstrdup("none");
        /* Unbacked cells: why, said once after the list. */
        bool unbacked = false;
        for (size_t i = 0; i < d->n_cells; i++) {
                const struct domain_cell *c = &d->cells[i];
                if (i)
                        strbuf_append(&b, ", ");
                if (bitmap_isempty(&c->host_nodes)) {
                        strbuf_printf(&b, "%u = no host node", c->id);
                        unbacked = true;
                        continue;
                }
                _cleanup_free_ char *nodes = bitmap_format(&c->host_nodes);
                strbuf_printf(&b, "%u = host node%s %s", c->id, bitmap_count(&c->host_nodes) > 1 ? "s" : "", nodes);
                /* Say which socket, since 'socket' decisions depend on it. */
                int sock = -2;
                for (int n = bitmap_next(&c->host_nodes, 0); n >= 0; n = bitmap_next(&c->host_nodes, (unsigned) n + 1)) {
                        int s = hostmap_node_socket(h, n);
                        sock = sock == -2 || sock == s ? s : -3;
                }
                if (sock >= 0)
                        strbuf_printf(&b, " (socket %d, %s)", sock, domain_backing_to_string(c->backing));
                else
                        strbuf_printf(&b, " (%s)", domain_backing_to_string(c->backing));
        }
        if (unbacked)
                strbuf_append(&b, " (a cell without a numatune memnode, vcpupin or vcpu cpuset has no host node)");
        return strbuf_steal(&b);
}

/* "pci0000:3a" -> 0x3a: a host bridge's name as a number (domain << 8 |
 * bus); -1 for NULL or any other form.  strtoul, not sscanf: this runs
 * for every device of every plan. */
static long host_root_of(const char *host_bridge) {
        if (host_bridge && strncmp(host_bridge, "pci", 3) == 0 && isxdigit((unsigned char) host_bridge[3])) {
                char *end = NULL;
                unsigned long dom = strtoul(host_bridge + 3, &end, 16);
                if (*end == ':' && isxdigit((unsigned char) end[1])) {
                        unsigned long bus = strtoul(end + 1, &end, 16);
                        if (!*end && bus <= 0xff && dom <= UINT32_MAX)
                                return (long) (dom << 8 | bus);
                }
        }
        return -1;
}

/* A PCI function's I/O BARs (io_bars) and 64-bit MMIO (mmio64_size,
 * mmio64_align): each BAR is naturally aligned, so a BAR costs its size
 * rounded up to a power of two.  Not for mdevs: their BARs are the
 * vendor's and not in sysfs, so only real functions count. */
static void count_bars(const struct hostmap_device *dev, struct plan_device *pd) {
        for (int b = 0; b < HOSTMAP_N_BARS; b++) {
                const struct hostmap_bar *bar = &dev->bars[b];
                if (bar->type == HOSTMAP_BAR_IO)
                        pd->io_bars++;
                if (bar->type != HOSTMAP_BAR_MEM64 || bar->size == 0)
                        continue;
                uint64_t sz = 1;
                while (sz < bar->size && sz < (UINT64_C(1) << 62))
                        sz <<= 1;
                pd->mmio64_size += sz;
                if (sz > pd->mmio64_align)
                        pd->mmio64_align = sz;
        }
}

/* What the host map says of the domain's hostdev i, into pd: its host
 * node and socket, host root complex and bridges, driver, BARs; no cell
 * or action yet. */
static void describe_device(const struct domain *d, const struct hostmap *h, size_t i, struct plan_device *pd) {
        const struct domain_hostdev *hd = &d->hostdevs[i];
        pd->hostdev = i;
        pd->host_node = HOSTMAP_NO_NODE;
        pd->host_socket = HOSTMAP_NO_SOCKET;
        pd->cell = -1;
        pd->port_index = -1;
        pd->cause = -1;
        domain_hostdev_name(hd, pd->name);

        const struct hostmap_device *dev = NULL;
        if (hd->kind == DOMAIN_HOSTDEV_MDEV) {
                const struct hostmap_mdev *m = hostmap_find_mdev(h, hd->mdev_uuid);
                if (m) {
                        pd->known = true;
                        pd->host_node = m->node;
                        dev = hostmap_find_device(h, &m->parent);
                }
        } else {
                dev = hostmap_find_device(h, &hd->host);
                if (dev) {
                        pd->known = true;
                        pd->host_node = dev->node;
                        pd->fingerprinted = fingerprint_holds(h, dev);
                }
        }
        pd->switch_group = -1;
        pd->host_root = -1;
        if (dev) {
                pd->class = dev->class;
                pd->host_root = host_root_of(dev->host_bridge);
                if (dev->n_upstream) {
                        pd->host_up = xcalloc(dev->n_upstream, sizeof(*pd->host_up));
                        memcpy(pd->host_up, dev->upstream, dev->n_upstream * sizeof(*pd->host_up));
                        pd->n_host_up = dev->n_upstream;
                }
                if (hd->kind == DOMAIN_HOSTDEV_PCI && dev->driver)
                        snprintf(pd->driver, sizeof pd->driver, "%s", dev->driver);
                /* root port, switch upstream, switch downstream, ...: the
                 * bridge below the root port names the switch. */
                if (dev->n_upstream >= 3) {
                        pd->has_host_switch = true;
                        pd->host_switch = dev->upstream[1];
                }
                if (hd->kind == DOMAIN_HOSTDEV_PCI)
                        count_bars(dev, pd);
        }
        if (pd->host_node >= 0)
                pd->host_socket = hostmap_node_socket(h, pd->host_node);
}

int planner_run(const struct domain *d, const struct hostmap *h, const struct policy_settings *s, struct plan **ret) {
        return planner_run_opts(d, h, s, NULL, ret);
}

/* Policy off, or no passthrough devices: the domain is left as it is.
 * True when so (the plan is complete). */
static bool plan_untouched(struct plan *p) {
        if (p->mode == POLICY_OFF) {
                p->verdict = PLAN_UNCHANGED;
                p->reason = xstrdup("policy off: the domain is not touched");
                for (size_t i = 0; i < p->n_devices; i++) {
                        p->devices[i].action = PLAN_STAY;
                        plan_set_reason(&p->devices[i], "policy off");
                }
                return true;
        }
        if (p->n_devices == 0) {
                p->verdict = PLAN_UNCHANGED;
                p->reason = xstrdup("no PCI passthrough devices");
                return true;
        }
        return false;
}

/* Eligibility (docs/design.md §6, §3.5, §3.6): guest NUMA cells, q35 and
 * ACPI.  What is missing is one domain-wide cause, every fix with it: a
 * device has one cause, and a domain without cells and without <acpi/>
 * needs both fixed before it can be planned.  True when the domain is not
 * eligible (the plan is complete: refused under the strict policies,
 * else skipped with a warning). */
static bool plan_ineligible(const struct domain *d, struct plan *p) {
        struct strbuf why = {0}, fix = {0};
        if (d->n_cells == 0) {
                strbuf_append(&why, "the domain has no guest NUMA cells (<cpu><numa>)");
                strbuf_append(&fix, "give it guest NUMA cells (<cpu><numa><cell>), each pinned to a host node "
                                    "(<numatune><memnode>)");
        }
        if (!d->q35) {
                strbuf_printf(&why, "%smachine type '%s' is not q35 (pcie-expander-bus needs q35)", why.len ? "; " : "",
                              d->machine ? d->machine : "default (pc)");
                strbuf_printf(&fix, "%suse machine type q35 (<os><type machine='q35'>)", fix.len ? "; " : "");
        }
        if (!d->acpi) {
                strbuf_printf(&why, "%sACPI is off (<features><acpi/> is missing), so the guest could not see the "
                              "expander buses' NUMA nodes", why.len ? "; " : "");
                strbuf_printf(&fix, "%sadd <acpi/> to <features>", fix.len ? "; " : "");
        }
        if (!why.len)
                return false;
        p->reason = strbuf_steal(&why);
        int cause = plan_add_cause(p, true, fix.buf, p->reason);
        strbuf_done(&fix);
        bool strict = p->mode == POLICY_REQUIRE || p->mode == POLICY_SOCKET;
        p->verdict = strict ? PLAN_REFUSED : PLAN_SKIP;
        for (size_t i = 0; i < p->n_devices; i++) {
                p->devices[i].action = strict ? PLAN_REFUSE : PLAN_STAY;
                p->devices[i].cause = cause;
                plan_set_reason(&p->devices[i], "%s", p->reason);
        }
        if (!strict)
                plan_add_warning(p, "domain left untouched: %s", p->reason);
        return true;
}

/* The plan for a domain: describe its devices, then each step in turn
 * until one completes the plan; a domain that gets the new topology also
 * gets its distances, 64-bit MMIO window, managed settings and GPUDirect
 * cliques planned. */
static int plan_domain(const struct domain *d, const struct hostmap *h, const struct policy_settings *s,
                       const struct planner_options *o, struct plan **ret) {
        _cleanup_plan_ struct plan *p = xcalloc(1, sizeof(*p));
        p->mode = s->mode;
        p->settings = *s;
        p->first_index = -1;
        p->busnr_limit = BUSNR_TOP;
        p->cells_desc = describe_cells(d, h);

        for (size_t i = 0; i < d->n_hostdevs; i++)
                describe_device(d, h, i, GROW(p->devices, p->n_devices));

        if (plan_untouched(p) || plan_ineligible(d, p) || plan_placement(d, h, p) || plan_layout_fails(d, p)) {
                *ret = TAKE_PTR(p);
                return 0;
        }
        if (p->mode == POLICY_PREFERRED)
                plan_warn_not_local(d, h, p);
        p->verdict = PLAN_APPLY;
        plan_distances(d, h, p);
        plan_mmio64(d, p);
        plan_managed(d, p, o);
        plan_cliques(d, h, p);
        *ret = TAKE_PTR(p);
        return 0;
}

/* Every refused or staying device has a cause: one of its own (its
 * reason) where the planner named none. */
static void finish_causes(struct plan *p) {
        if (p->mode == POLICY_OFF)
                return;
        for (size_t i = 0; i < p->n_devices; i++) {
                struct plan_device *pd = &p->devices[i];
                if (pd->action != PLAN_MOVE && pd->cause < 0 && pd->reason)
                        pd->cause = plan_add_cause(p, false, NULL, pd->reason);
        }
}

int planner_run_opts(const struct domain *d, const struct hostmap *h, const struct policy_settings *s,
                     const struct planner_options *o, struct plan **ret) {
        int r = plan_domain(d, h, s, o, ret);
        if (r >= 0)
                finish_causes(*ret);
        return r;
}

/* Reports: what a finished engine_plan() result says to a person or a
 * program.  The `--format explain` text, the JSON document, the causes
 * and the refusal message the hook and pcinumactl print.  A report reads
 * the result and never changes it: the path fidelity part is what
 * planner_fidelity() left in the plan, computed by the result's owner
 * beforehand (report.h).  Pure: no I/O, no globals. */
#include "report.h"

#include <json.h>
#include <string.h>

#include "mark.h"

static const char *fmt_int(int v, char buf[16], const char *none) {
        if (v < 0)
                return none;
        snprintf(buf, 16, "%d", v);
        return buf;
}

static const char *device_class_name(const struct plan_device *pd) {
        if (!pd->known)
                return "(not on this host)";
        return hostmap_class_name(pd->class);
}

static char *controller_desc(const struct plan *p, const struct plan_device *pd, const struct domain *base) {
        if (pd->action == PLAN_MOVE && pd->port_index < 0)
                return xstrdup("-");
        if (pd->action == PLAN_MOVE) {
                /* From its port up: "switch 10 port 11, root port 9 on pxb 1". */
                struct strbuf b = {0};
                const struct plan_port *port = plan_find_port(p, pd->port_index);
                for (size_t guard = 0; port && guard <= p->n_ports; guard++) {
                        if (b.len)
                                strbuf_append(&b, ", ");
                        if (streq(port->model, PLAN_SWITCH_DOWN)) {
                                strbuf_printf(&b, "switch %d port %d", port->parent_index, port->index);
                                const struct plan_port *up = plan_find_port(p, port->parent_index);
                                port = up ? plan_find_port(p, up->parent_index) : NULL;
                                continue;
                        }
                        strbuf_printf(&b, "root port %d on pxb %d", port->index, port->pxb_index);
                        break;
                }
                if (pd->multifunction || pd->guest.func)
                        strbuf_printf(&b, ", function %u", pd->guest.func);
                return strbuf_steal(&b);
        }
        const struct domain_hostdev *hd = &base->hostdevs[pd->hostdev];
        if (!hd->has_guest_addr)
                return xstrdup("(libvirt assigns)");
        if (hd->guest.bus == 0)
                return xstrdup("pcie.0");
        const struct domain_controller *c = domain_find_controller(base, hd->guest.bus);
        return xasprintf("%s %d", c && c->model[0] ? c->model : "bus", hd->guest.bus);
}

/* The BDF the guest sees: predicted for a moved device; on pcie.0 itself
 * the address is the BDF (formatted into buf); behind other controllers
 * it is not predicted. */
static const char *guest_bdf(const struct plan_device *pd, const struct domain *base, char buf[static PCI_ADDR_STRLEN]) {
        if (pd->action == PLAN_MOVE)
                return pd->guest_bdf[0] ? pd->guest_bdf : "-";
        const struct domain_hostdev *hd = &base->hostdevs[pd->hostdev];
        if (hd->has_guest_addr && hd->guest.domain == 0 && hd->guest.bus == 0)
                return pci_addr_format(&hd->guest, buf);
        return "-";
}

static const char *pair_verdict(const struct plan_pair *q) {
        if (q->host == PLAN_PATH_UNKNOWN || q->guest == PLAN_PATH_UNKNOWN)
                return "unknown";
        return q->guest == q->host ? "same" : q->guest < q->host ? "closer" : "farther";
}

static bool pair_same(const struct plan_pair *q) {
        return streq(pair_verdict(q), "same");
}

static const char *verdict_phrase(const struct engine_result *r) {
        if (r->already_planned)
                return "already planned: the XML matches the plan, unchanged";
        if (r->reverted)
                return r->verdict == PLAN_SKIP ? "reverted: the earlier plan was undone, the domain is not eligible any more"
                                               : "reverted: the earlier plan was undone";
        switch (r->verdict) {
        case PLAN_APPLY:
                return "apply: the domain gets the NUMA-aware topology";
        case PLAN_UNCHANGED:
                return "unchanged";
        case PLAN_SKIP:
                return "skip: left untouched";
        case PLAN_REFUSED:
                return "refuse";
        }
        return "?";
}

/* The causes below explain's table, numbered as its "cause N" says. */
static void explain_causes(struct strbuf *b, const struct plan *p) {
        if (!p->n_causes)
                return;
        strbuf_append(b, "\ncauses:\n");
        for (size_t i = 0; i < p->n_causes; i++) {
                const struct plan_cause *c = &p->causes[i];
                strbuf_printf(b, "  %zu. %s%s\n", i + 1, c->what, c->domain ? " (domain-wide)" : "");
                if (c->fix)
                        strbuf_printf(b, "     fix: %s\n", c->fix);
        }
}

/* The path fidelity summary, then the pairs whose path type changed; the
 * others too with 'all' (16 devices make 120 pairs). */
static void explain_pairs(struct strbuf *b, const struct plan *p, bool all) {
        if (!p->n_pairs)
                return;
        strbuf_printf(b, "\npath fidelity: %u same, %u closer, %u farther", p->n_same, p->n_closer, p->n_farther);
        if (p->n_unknown)
                strbuf_printf(b, ", %u unknown", p->n_unknown);
        strbuf_printf(b, " (of %zu pairs; host -> guest path type)", p->n_pairs);
        if (!all && p->n_same)
                strbuf_printf(b, "; the %u same not listed (--all-pairs lists them)", p->n_same);
        strbuf_append(b, "\n");
        for (size_t i = 0; i < p->n_pairs; i++) {
                const struct plan_pair *q = &p->pairs[i];
                if (!all && pair_same(q))
                        continue;
                strbuf_printf(b, "  %s  %s  %-4s -> %-4s %s\n", p->devices[q->a].name, p->devices[q->b].name,
                              plan_path_to_string(q->host), plan_path_to_string(q->guest), pair_verdict(q));
        }
}

/* Who, on what machine, under which policy, and the verdict. */
static void explain_header(struct strbuf *b, const struct engine_result *r) {
        const struct plan *p = r->plan;
        const struct domain *d = r->base;
        strbuf_printf(b, "domain:      %s", d->name ? d->name : "(unnamed)");
        if (d->uuid)
                strbuf_printf(b, " (uuid %s)", d->uuid);
        strbuf_printf(b, "\nmachine:     %s, ACPI %s, %zu guest NUMA cell%s\n",
                      d->machine ? d->machine : "default", d->acpi ? "on" : "off", d->n_cells, d->n_cells == 1 ? "" : "s");
        strbuf_printf(b, "policy:      %s (from %s)\n", policy_mode_to_string(r->settings.mode), r->policy_origin ? r->policy_origin : "?");
        strbuf_printf(b, "guest cells: %s\n", p->cells_desc ? p->cells_desc : "none");
        strbuf_printf(b, "verdict:     %s", verdict_phrase(r));
        if (p->reason)
                strbuf_printf(b, " (%s)", p->reason);
        strbuf_append(b, "\n");
        if (r->stale_mark)
                strbuf_printf(b, "stale mark:  %s\n", r->stale_mark);
}

#define EXPLAIN_COLUMNS 8

/* One row of the device table: its EXPLAIN_COLUMNS cells, each allocated. */
static void explain_row(char **cells, const struct plan *p, const struct plan_device *pd, const struct domain *d) {
        char nb[16], sb[16], cb[16], bdf[PCI_ADDR_STRLEN];
        cells[0] = xstrdup(pd->name);
        cells[1] = xstrdup(device_class_name(pd));
        cells[2] = xstrdup(fmt_int(pd->host_node, nb, "none"));
        cells[3] = xstrdup(fmt_int(pd->host_socket, sb, "none"));
        cells[4] = xstrdup(fmt_int(pd->cell, cb, "-"));
        cells[5] = xstrdup(guest_bdf(pd, d, bdf));
        cells[6] = controller_desc(p, pd, d);
        /* A shared cause is said once, below the table. */
        if (pd->cause >= 0 && pd->action != PLAN_MOVE)
                cells[7] = xasprintf("%s: cause %d", plan_action_to_string(pd->action), pd->cause + 1);
        else
                cells[7] = xasprintf("%s: %s", plan_action_to_string(pd->action), pd->reason ? pd->reason : "");
}

/* The device table: one row per device, every column but the last
 * padded to its widest cell. */
static void explain_table(struct strbuf *b, const struct plan *p, const struct domain *d) {
        static const char *const hdr[EXPLAIN_COLUMNS] = {
                "DEVICE", "CLASS", "HOST-NODE", "SOCKET", "GUEST-CELL", "GUEST-BDF", "CONTROLLER", "DECISION",
        };
        size_t n = p->n_devices;
        if (!n)
                return;
        char ***cells = xcalloc(n, sizeof(char **));
        size_t w[EXPLAIN_COLUMNS];
        for (size_t c = 0; c < EXPLAIN_COLUMNS; c++)
                w[c] = strlen(hdr[c]);
        for (size_t i = 0; i < n; i++) {
                cells[i] = xcalloc(EXPLAIN_COLUMNS, sizeof(char *));
                explain_row(cells[i], p, &p->devices[i], d);
                for (size_t c = 0; c < EXPLAIN_COLUMNS - 1; c++)
                        if (strlen(cells[i][c]) > w[c])
                                w[c] = strlen(cells[i][c]);
        }
        strbuf_append(b, "\n");
        for (size_t c = 0; c < EXPLAIN_COLUMNS; c++)
                strbuf_printf(b, c < 7 ? "%-*s  " : "%-*s\n", (int) (c < 7 ? w[c] : 0), hdr[c]);
        for (size_t i = 0; i < n; i++) {
                for (size_t c = 0; c < EXPLAIN_COLUMNS; c++) {
                        strbuf_printf(b, c < 7 ? "%-*s  " : "%-*s\n", (int) (c < 7 ? w[c] : 0), cells[i][c]);
                        free(cells[i][c]);
                }
                free(cells[i]);
        }
        free(cells);
}

/* The guest switches on expander bus x that mirror a host switch. */
static void explain_switches(struct strbuf *b, const struct plan *p, const struct plan_pxb *x) {
        for (size_t k = 0; k < p->n_ports; k++) {
                const struct plan_port *up = &p->ports[k];
                if (up->pxb_index != x->index || !streq(up->model, PLAN_SWITCH_UP))
                        continue;
                const struct plan_port *below = plan_find_port(p, up->parent_index);
                strbuf_printf(b, "    switch %d on %s %d, mirroring a host switch:", up->index,
                              below && streq(below->model, PLAN_SWITCH_DOWN) ? "downstream port" : "root port",
                              up->parent_index);
                for (size_t j = 0; j < p->n_ports; j++)
                        if (p->ports[j].parent_index == up->index && p->ports[j].device >= 0)
                                strbuf_printf(b, " %s (port %d)", p->devices[p->ports[j].device].name, p->ports[j].index);
                strbuf_append(b, "\n");
        }
}

/* The expander buses with their switches, the bus numbers, the pruned
 * root ports. */
static void explain_expanders(struct strbuf *b, const struct plan *p) {
        if (p->n_pxbs) {
                strbuf_append(b, "\nexpander buses (pcie-expander-bus, pxb-pcie):\n");
                for (size_t i = 0; i < p->n_pxbs; i++) {
                        const struct plan_pxb *x = &p->pxbs[i];
                        const char *nodes = x->host_nodes;
                        char rc[48] = "";
                        if (x->host_root >= 0)
                                snprintf(rc, sizeof rc, ", host root complex pci%04x:%02x", (unsigned) (x->host_root >> 8),
                                         (unsigned) (x->host_root & 0xff));
                        strbuf_printf(b, "  controller %d at 0000:00:%02x.0: guest cell %u (host node %s%s), busNr %d-%d, %u root port%s\n",
                                      x->index, x->addr.slot, x->cell, nodes, rc, x->bus_nr, x->bus_nr + (int) x->n_buses - 1,
                                      x->n_ports, x->n_ports == 1 ? "" : "s");
                        explain_switches(b, p, x);
                }
                strbuf_printf(b, "bus numbers: the pcie.0 side uses 0-%d; expander buses use %d-%d\n",
                              p->pcie0_buses - 1, p->pxbs[p->n_pxbs - 1].bus_nr, p->busnr_limit - 1);
        }
        if (p->n_pruned) {
                strbuf_append(b, "pruned root ports (emptied by the move):");
                for (size_t i = 0; i < p->n_pruned; i++)
                        strbuf_printf(b, " %d", p->pruned[i]);
                strbuf_append(b, "\n");
        }
}

/* The topology, switches, notes and managed lines of an applied plan. */
static void explain_layout_features(struct strbuf *b, const struct plan *p) {
        strbuf_printf(b, "\ntopology: %s\n", p->settings.topology == POLICY_TOPOLOGY_PATHS
                      ? "paths: one expander bus per host root complex; the functions of one host device share a port"
                      : "cells: one expander bus per guest cell");
        strbuf_printf(b, "switches: %s\n", p->settings.mirror_switches
                      ? "mirror_switches on: devices behind one host switch share a guest switch"
                      : "mirror_switches off: one root port per device");
        if (p->degrade_note)
                strbuf_printf(b, "degraded: %s\n", p->degrade_note);
        if (p->distances_note)
                strbuf_printf(b, "%s\n", p->distances_note);
        if (p->mmio64_note)
                strbuf_printf(b, "%s\n", p->mmio64_note);
        if (p->io_note)
                strbuf_printf(b, "%s\n", p->io_note);
        if (p->nccl_note)
                strbuf_printf(b, "%s\n", p->nccl_note);
        if (!p->settings.managed_auto)
                strbuf_append(b, "managed: not changed (managed is off)\n");
        else if (!p->n_managed)
                strbuf_append(b, "managed: no device is bound to a VFIO variant driver\n");
        for (size_t i = 0; i < p->n_managed; i++)
                strbuf_printf(b, "managed: %s is bound to the VFIO variant driver %s: managed='no', so libvirt does not rebind it\n",
                              p->managed[i].name, p->managed[i].driver);
}

/* The migration, first start and GPUDirect clique lines of an applied plan. */
static void explain_start_features(struct strbuf *b, const struct plan *p, const struct domain *d) {
        _cleanup_free_ char *not_migratable = NULL;
        if (!p->settings.migration_same_topology)
                strbuf_append(b, "migration: refuse: marked migratable=\"no\"\n");
        else if (mark_migratable(p, d, &not_migratable))
                strbuf_append(b, "migration: same-topology: marked migratable=\"yes\"; a host with the same "
                                 "topology for these devices accepts it\n");
        else
                strbuf_printf(b, "migration: same-topology, but marked migratable=\"no\": %s\n", not_migratable);
        /* What the prepare gate does when the domain starts without
         * this plan (a client that defines and starts at once). */
        if (p->settings.first_start == POLICY_FIRST_START_RESTART)
                strbuf_printf(b, "first start: restart: a start without this plan is restarted into it as soon as "
                                 "the domain is up (transient domains: %s)\n",
                              p->settings.transient_restart ? "restart" : "leave, not restarted");
        else
                strbuf_printf(b, "first start: %s: a start without this plan is %s\n",
                              policy_first_start_to_string(p->settings.first_start),
                              p->settings.first_start == POLICY_FIRST_START_ALLOW
                                      ? "allowed with a warning"
                                      : "refused under require and socket, allowed with a warning under preferred and legacy");
        /* Only with the switch on: other plans' explanations stay as they were. */
        if (p->clique_note)
                strbuf_printf(b, "%s\n", p->clique_note);
        for (size_t i = 0; i < p->n_cliques; i++)
                strbuf_printf(b, "gpudirect_clique: %s gets x-nv-gpudirect-clique %u\n",
                              p->devices[p->cliques[i].device].name, p->cliques[i].id);
}

char *report_explain(const struct engine_result *r, unsigned flags) {
        const struct plan *p = r->plan;
        struct strbuf b = {0};

        explain_header(&b, r);
        explain_table(&b, p, r->base);
        explain_causes(&b, p);
        explain_expanders(&b, p);
        /* The feature switches (docs/policy.md), when the plan applies. */
        if (p->verdict == PLAN_APPLY) {
                explain_layout_features(&b, p);
                explain_start_features(&b, p, r->base);
        }
        if (p->fidelity_skipped)
                strbuf_printf(&b, "\npath fidelity: not computed for more than %d devices\n", PLAN_FIDELITY_MAX_DEVICES);
        explain_pairs(&b, p, flags & REPORT_ALL_PAIRS);
        for (size_t i = 0; i < p->n_warnings; i++)
                strbuf_printf(&b, "warning: %s\n", p->warnings[i]);
        return strbuf_steal(&b);
}

static void json_add_str(json_object *o, const char *k, const char *v) {
        json_object_object_add(o, k, v ? json_object_new_string(v) : NULL);
}

static void json_add_int(json_object *o, const char *k, int v) {
        json_object_object_add(o, k, v >= 0 ? json_object_new_int(v) : NULL);
}

/* Each cause once, with the devices it concerns (each device's "cause"
 * indexes this list); one pass over the devices. */
static json_object *json_causes(const struct plan *p) {
        json_object *causes = json_object_new_array();
        _cleanup_free_ json_object **on = xcalloc(p->n_causes ? p->n_causes : 1, sizeof(*on));
        for (size_t i = 0; i < p->n_causes; i++) {
                json_object *c = json_object_new_object();
                json_add_str(c, "what", p->causes[i].what);
                json_add_str(c, "fix", p->causes[i].fix);
                json_object_object_add(c, "domain_wide", json_object_new_boolean(p->causes[i].domain));
                on[i] = json_object_new_array();
                json_object_object_add(c, "devices", on[i]);
                json_object_array_add(causes, c);
        }
        for (size_t k = 0; k < p->n_devices; k++)
                if (p->devices[k].cause >= 0 && (size_t) p->devices[k].cause < p->n_causes)
                        json_object_array_add(on[p->devices[k].cause], json_object_new_string(p->devices[k].name));
        return causes;
}

/* The domain's guest cells with their host nodes and backing. */
static json_object *json_cells(const struct domain *d) {
        json_object *cells = json_object_new_array();
        for (size_t i = 0; i < d->n_cells; i++) {
                json_object *c = json_object_new_object();
                json_add_int(c, "id", (int) d->cells[i].id);
                json_object *nodes = json_object_new_array();
                const struct bitmap *hn = &d->cells[i].host_nodes;
                for (int n = bitmap_next(hn, 0); n >= 0; n = bitmap_next(hn, (unsigned) n + 1))
                        json_object_array_add(nodes, json_object_new_int(n));
                json_object_object_add(c, "host_nodes", nodes);
                json_add_str(c, "backing", domain_backing_to_string(d->cells[i].backing));
                json_object_array_add(cells, c);
        }
        return cells;
}

/* One device of the plan: where it is on the host and in the guest. */
static json_object *json_device(const struct plan_device *pd, const struct domain *d) {
        char buf[PCI_ADDR_STRLEN], bdf_buf[PCI_ADDR_STRLEN];
        json_object *x = json_object_new_object();
        const struct domain_hostdev *hd = &d->hostdevs[pd->hostdev];
        if (hd->kind == DOMAIN_HOSTDEV_MDEV)
                json_add_str(x, "mdev", hd->mdev_uuid);
        else
                json_add_str(x, "host", pci_addr_format(&hd->host, buf));
        char cls[16];
        snprintf(cls, sizeof cls, "0x%06x", pd->class);
        json_add_str(x, "class", pd->known ? cls : NULL);
        json_add_str(x, "class_name", device_class_name(pd));
        json_add_int(x, "host_node", pd->host_node);
        json_add_int(x, "host_socket", pd->host_socket);
        json_add_str(x, "action", plan_action_to_string(pd->action));
        json_add_int(x, "guest_cell", pd->cell);
        json_add_int(x, "controller", pd->port_index);
        json_add_str(x, "guest_address", pd->action == PLAN_MOVE ? pci_addr_format(&pd->guest, buf) : NULL);
        const char *bdf = guest_bdf(pd, d, bdf_buf);
        json_add_str(x, "guest_bdf", streq(bdf, "-") ? NULL : bdf);
        json_add_str(x, "reason", pd->reason);
        json_add_int(x, "cause", pd->cause);
        return x;
}

/* The expander buses. */
static json_object *json_expanders(const struct plan *p) {
        char buf[PCI_ADDR_STRLEN];
        json_object *pxbs = json_object_new_array();
        for (size_t i = 0; i < p->n_pxbs; i++) {
                const struct plan_pxb *x = &p->pxbs[i];
                json_object *e = json_object_new_object();
                json_add_int(e, "controller", x->index);
                json_add_int(e, "guest_cell", (int) x->cell);
                json_add_int(e, "busNr", x->bus_nr);
                json_add_str(e, "address", pci_addr_format(&x->addr, buf));
                json_add_int(e, "root_ports", (int) x->n_ports);
                char rc[32];
                snprintf(rc, sizeof rc, "pci%04x:%02x", (unsigned) (x->host_root >> 8), (unsigned) (x->host_root & 0xff));
                json_add_str(e, "host_root_complex", x->host_root >= 0 ? rc : NULL);
                json_object_array_add(pxbs, e);
        }
        return pxbs;
}

/* The devices left managed='no', and the GPUDirect cliques (only with
 * that switch on: other plans' JSON stays as it was), into feat. */
static void json_managed_cliques(json_object *feat, const struct plan *p) {
        json_object *mg = json_object_new_array();
        for (size_t i = 0; i < p->n_managed; i++) {
                json_object *m = json_object_new_object();
                json_add_str(m, "host", p->managed[i].name);
                json_add_str(m, "driver", p->managed[i].driver);
                json_object_array_add(mg, m);
        }
        json_object_object_add(feat, "managed_no", mg);
        if (p->settings.gpudirect_clique_auto) {
                json_object *cq = json_object_new_array();
                for (size_t i = 0; i < p->n_cliques; i++) {
                        json_object *c = json_object_new_object();
                        json_add_str(c, "host", p->devices[p->cliques[i].device].name);
                        json_object_object_add(c, "clique", json_object_new_int((int) p->cliques[i].id));
                        json_object_array_add(cq, c);
                }
                json_object_object_add(feat, "gpudirect_cliques", cq);
                json_add_str(feat, "gpudirect_clique", p->clique_note);
        }
}

/* The feature switches (docs/policy.md) and what they did. */
static json_object *json_features(const struct engine_result *r) {
        const struct plan *p = r->plan;
        json_object *feat = json_object_new_object();
        json_add_str(feat, "topology", policy_topology_to_string(p->settings.topology));
        json_object_object_add(feat, "mirror_switches", json_object_new_boolean(p->settings.mirror_switches));
        json_add_str(feat, "degraded", p->degrade_note);
        json_object_object_add(feat, "distances_copied", json_object_new_boolean(p->add_distances));
        json_add_str(feat, "distances", p->distances_note);
        json_object_object_add(feat, "mmio64_need_bytes", json_object_new_int64((int64_t) p->mmio64_need));
        json_object_object_add(feat, "pcihole64_kib", p->pcihole64_kib ? json_object_new_int64((int64_t) p->pcihole64_kib) : NULL);
        json_add_str(feat, "mmio64", p->mmio64_note);
        json_add_str(feat, "migration", p->settings.migration_same_topology ? "same-topology" : "refuse");
        json_add_str(feat, "first_start", policy_first_start_to_string(p->settings.first_start));
        json_add_str(feat, "transient", p->settings.transient_restart ? "restart" : "leave");
        if (r->verdict == PLAN_APPLY) {
                _cleanup_free_ char *why = NULL;
                bool migratable = mark_migratable(p, r->base, &why);
                json_object_object_add(feat, "migratable", json_object_new_boolean(migratable));
                json_add_str(feat, "migratable_reason", why);
        }
        json_object_object_add(feat, "io_devices", json_object_new_int((int) p->io_devices));
        json_add_str(feat, "io_ports", p->io_note);
        json_add_str(feat, "nccl_topology", p->nccl_note);
        json_managed_cliques(feat, p);
        return feat;
}

/* The path fidelity report: the counts and every pair. */
static json_object *json_fidelity(const struct plan *p) {
        json_object *fid = json_object_new_object();
        json_object_object_add(fid, "same", json_object_new_int((int) p->n_same));
        json_object_object_add(fid, "closer", json_object_new_int((int) p->n_closer));
        json_object_object_add(fid, "farther", json_object_new_int((int) p->n_farther));
        json_object_object_add(fid, "unknown", json_object_new_int((int) p->n_unknown));
        if (p->fidelity_skipped)
                json_object_object_add(fid, "skipped", json_object_new_string("more devices than the report covers"));
        json_object *pairs = json_object_new_array();
        for (size_t i = 0; i < p->n_pairs; i++) {
                const struct plan_pair *q = &p->pairs[i];
                json_object *e = json_object_new_object();
                json_add_str(e, "a", p->devices[q->a].name);
                json_add_str(e, "b", p->devices[q->b].name);
                json_add_str(e, "host", plan_path_to_string(q->host));
                json_add_str(e, "guest", plan_path_to_string(q->guest));
                json_add_str(e, "fidelity", pair_verdict(q));
                json_object_array_add(pairs, e);
        }
        json_object_object_add(fid, "pairs", pairs);
        return fid;
}

char *report_json(const struct engine_result *r) {
        const struct plan *p = r->plan;
        const struct domain *d = r->base;
        json_object *o = json_object_new_object();

        json_add_str(o, "domain", d->name);
        json_add_str(o, "uuid", d->uuid);
        json_add_str(o, "policy", policy_mode_to_string(r->settings.mode));
        json_add_str(o, "policy_origin", r->policy_origin);
        json_add_str(o, "verdict", plan_verdict_to_string(r->verdict));
        json_add_str(o, "reason", p->reason);
        json_object_object_add(o, "changed", json_object_new_boolean(r->changed));
        json_object_object_add(o, "already_planned", json_object_new_boolean(r->already_planned));
        json_object_object_add(o, "reverted", json_object_new_boolean(r->reverted));
        json_add_str(o, "stale_mark", r->stale_mark);
        json_object_object_add(o, "cells", json_cells(d));

        json_object *devs = json_object_new_array();
        for (size_t i = 0; i < p->n_devices; i++)
                json_object_array_add(devs, json_device(&p->devices[i], d));
        json_object_object_add(o, "devices", devs);
        json_object_object_add(o, "causes", json_causes(p));
        json_object_object_add(o, "expanders", json_expanders(p));

        json_object *pruned = json_object_new_array();
        for (size_t i = 0; i < p->n_pruned; i++)
                json_object_array_add(pruned, json_object_new_int(p->pruned[i]));
        json_object_object_add(o, "pruned", pruned);
        json_object_object_add(o, "features", json_features(r));
        json_object_object_add(o, "fidelity", json_fidelity(p));

        json_object *warn = json_object_new_array();
        for (size_t i = 0; i < p->n_warnings; i++)
                json_object_array_add(warn, json_object_new_string(p->warnings[i]));
        json_object_object_add(o, "warnings", warn);

        char *s = xasprintf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(o);
        return s;
}

/* Append "<label>: a, b, c" to b, wrapped before REPORT_LINE_WIDTH with
 * continuation lines indented below the first item. */
#define REPORT_LINE_WIDTH 88
static void append_list(struct strbuf *b, const char *label, char *const *items, size_t n) {
        size_t col = strlen(label) + 2, start = col;
        strbuf_printf(b, "%s: ", label);
        for (size_t i = 0; i < n; i++) {
                size_t w = strlen(items[i]) + (i + 1 < n ? 1 : 0);
                if (i && col + 1 + w > REPORT_LINE_WIDTH) {
                        strbuf_printf(b, "\n%*s", (int) start, "");
                        col = start;
                } else if (i) {
                        strbuf_append(b, " ");
                        col++;
                }
                strbuf_printf(b, "%s%s", items[i], i + 1 < n ? "," : "");
                col += w;
        }
        strbuf_append(b, "\n");
}

/* One device of a message: its index in plan->devices and the key it is
 * grouped by (its cause, 0 for every domain-wide one; its host node). */
struct cause_dev {
        size_t i;
        int group, node;
};

static int cmp_cause_dev(const void *x, const void *y) {
        const struct cause_dev *a = x, *b = y;
        /* By group, then host node (none last), then device order. */
        if (a->group != b->group)
                return a->group < b->group ? -1 : 1;
        unsigned an = (unsigned) a->node, bn = (unsigned) b->node;     /* -1 sorts last */
        if (an != bn)
                return an < bn ? -1 : 1;
        return a->i < b->i ? -1 : a->i > b->i;
}

/* The devices v[0..n) (one group, sorted), by host node:
 * "  devices on host node 0: a, b"; at most REPORT_DEVICES_LISTED, then
 * how many more (a domain may hold thousands of hostdevs). */
#define REPORT_DEVICES_LISTED 64
static void append_devices(struct strbuf *b, const struct plan *p, const struct cause_dev *v, size_t n) {
        size_t listed = 0;
        for (size_t k = 0; k < n && listed < REPORT_DEVICES_LISTED;) {
                size_t end = k;
                while (end < n && v[end].node == v[k].node)
                        end++;
                if (end - k > REPORT_DEVICES_LISTED - listed)
                        end = k + REPORT_DEVICES_LISTED - listed;
                char **names = xcalloc(end - k, sizeof(char *));
                for (size_t j = k; j < end; j++)
                        names[j - k] = (char *) p->devices[v[j].i].name;
                _cleanup_free_ char *label = v[k].node >= 0
                        ? xasprintf("  device%s on host node %d", end - k == 1 ? "" : "s", v[k].node)
                        : xasprintf("  device%s without a host node", end - k == 1 ? "" : "s");
                append_list(b, label, names, end - k);
                free(names);
                listed += end - k;
                k = end;
        }
        if (n > listed)
                strbuf_printf(b, "  and %zu more devices\n", n - listed);
}

/* At most this many causes of their own are said; then how many more. */
#define REPORT_CAUSES_LISTED 32

static void append_cause(struct strbuf *b, const struct plan_cause *pc, const char *said) {
        if (said && strstr(said, pc->what)) {
                if (pc->fix)
                        strbuf_printf(b, "fix: %s\n", pc->fix);
        } else if (pc->fix)
                strbuf_printf(b, "%s; fix: %s\n", pc->what, pc->fix);
        else
                strbuf_printf(b, "%s\n", pc->what);
}

char *report_causes(const struct engine_result *r, enum plan_action action, const char *said) {
        const struct plan *p = r->plan;
        struct strbuf b = {0};
        /* The devices concerned, sorted once: the domain-wide causes' as
         * one group (they concern the same devices, listed once after
         * them), then each other cause's. */
        _cleanup_free_ struct cause_dev *v = xcalloc(p->n_devices ? p->n_devices : 1, sizeof(*v));
        size_t n = 0;
        for (size_t i = 0; i < p->n_devices; i++) {
                const struct plan_device *pd = &p->devices[i];
                if (pd->action != action || pd->cause < 0 || (size_t) pd->cause >= p->n_causes)
                        continue;
                v[n++] = (struct cause_dev) {
                        .i = i, .group = p->causes[pd->cause].domain ? -1 : pd->cause, .node = pd->host_node,
                };
        }
        if (!n)
                return xstrdup("");
        qsort(v, n, sizeof(*v), cmp_cause_dev);
        bool cells = false;
        size_t k = 0, said_causes = 0, more_causes = 0;
        if (v[0].group < 0) {
                /* A cause the caller's line already says gives only its fix. */
                _cleanup_free_ bool *seen = xcalloc(p->n_causes, sizeof(bool));
                for (size_t j = 0; j < n && v[j].group < 0; j++)
                        seen[p->devices[v[j].i].cause] = true;
                for (size_t c = 0; c < p->n_causes; c++)
                        if (seen[c]) {
                                append_cause(&b, &p->causes[c], said);
                                cells |= p->causes[c].cells;
                        }
                while (k < n && v[k].group < 0)
                        k++;
                append_devices(&b, p, v, k);
        }
        while (k < n) {
                size_t end = k;
                while (end < n && v[end].group == v[k].group)
                        end++;
                if (said_causes++ < REPORT_CAUSES_LISTED) {
                        const struct plan_cause *pc = &p->causes[v[k].group];
                        append_cause(&b, pc, said);
                        cells |= pc->cells;
                        append_devices(&b, p, v + k, end - k);
                } else
                        more_causes++;
                k = end;
        }
        if (more_causes)
                strbuf_printf(&b, "and %zu more causes (pcinumactl plan --format explain lists them all)\n", more_causes);
        if (cells)
                strbuf_printf(&b, "guest cells: %s\n", p->cells_desc ? p->cells_desc : "none");
        return strbuf_steal(&b);
}

char *report_refusal(const struct engine_result *r) {
        const struct plan *p = r->plan;
        struct strbuf b = {0};
        const char *reason = p->reason ? p->reason : "refused by policy";
        if (strstr(reason, "policy "))
                strbuf_printf(&b, "refused: %s\n", reason);
        else
                strbuf_printf(&b, "refused under policy %s: %s\n", policy_mode_to_string(p->mode), reason);
        _cleanup_free_ char *causes = report_causes(r, PLAN_REFUSE, reason);
        strbuf_append(&b, causes);
        return strbuf_steal(&b);
}

bool report_warnings(const struct engine_result *r, char **ret_causes) {
        const struct plan *p = r->plan;
        struct strbuf said = {0};
        for (size_t i = 0; i < p->n_warnings; i++)
                strbuf_printf(&said, "%s\n", p->warnings[i]);
        *ret_causes = report_causes(r, PLAN_STAY, said.buf);
        strbuf_done(&said);
        return **ret_causes && !p->n_warnings;
}

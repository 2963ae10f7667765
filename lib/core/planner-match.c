/* Matching a domain against a plan: is the current domain laid out as
 * the plan (made for its reverted form) says (planner_matches(): the
 * engine then leaves a planned domain as it is), and where not, in words
 * (planner_mismatch(): why it is planned again). */
#include "planner.h"

static const struct domain_hostdev *find_same_hostdev(const struct domain *d, const struct domain_hostdev *hd) {
        for (size_t i = 0; i < d->n_hostdevs; i++) {
                const struct domain_hostdev *o = &d->hostdevs[i];
                if (o->kind != hd->kind)
                        continue;
                if (hd->kind == DOMAIN_HOSTDEV_MDEV ? streq(o->mdev_uuid, hd->mdev_uuid) : pci_addr_eq(&o->host, &hd->host))
                        return o;
        }
        return NULL;
}

/* Pair planned controller index 'want' with the current domain's 'have':
 * each planned controller must stand for one current controller and the
 * other way round (map: NULL checks the shape only). */
static bool bind(int *map, int want, int have) {
        if (!map)
                return true;
        if (want < 0 || want > 255 || have < 0 || have > 255)
                return false;
        int *fwd = map, *rev = map + 256;
        if (fwd[want] < 0 && rev[have] < 0) {
                fwd[want] = have;
                rev[have] = want;
        }
        return fwd[want] == have && rev[have] == want;
}

/* Is device hd of 'cur' where plan device pd wants it?  A moved device
 * sits at slot 0 with its planned function on a port whose chain of
 * controllers up to an expander bus of its cell has the planned models
 * (root port, switch upstream and downstream ports), whatever their
 * indexes. */
static bool in_place(const struct domain *cur, const struct domain_hostdev *hd, const struct domain_hostdev *bhd,
                     const struct plan *p, const struct plan_device *pd, int *map) {
        if (pd->action == PLAN_STAY)
                return hd->has_guest_addr == bhd->has_guest_addr && (!hd->has_guest_addr || pci_addr_eq(&hd->guest, &bhd->guest));
        if (pd->action != PLAN_MOVE)
                return true;
        if (!hd->has_guest_addr || hd->guest.domain != 0 || hd->guest.slot != 0 || hd->guest.func != pd->guest.func)
                return false;
        int have = hd->guest.bus;
        const struct plan_port *want = plan_find_port(p, pd->port_index);
        for (size_t guard = 0; want && guard <= p->n_ports; guard++) {
                const struct domain_controller *c = domain_find_controller(cur, have);
                if (!c || !c->has_addr || c->addr.domain != 0 || !streq(c->model, want->model) || !bind(map, want->index, have))
                        return false;
                have = c->addr.bus;
                if (want->parent_index == want->pxb_index) {
                        const struct domain_controller *pxb = domain_find_controller(cur, have);
                        if (!pxb || !streq(pxb->model, "pcie-expander-bus") || pxb->node != pd->cell ||
                            !bind(map, want->pxb_index, have))
                                return false;
                        /* Nothing but the planned functions on its port. */
                        unsigned planned = 0, there = 0;
                        for (size_t k = 0; k < p->n_devices; k++)
                                planned += p->devices[k].action == PLAN_MOVE && p->devices[k].port_index == pd->port_index;
                        for (size_t u = 0; u < cur->n_pci_uses; u++)
                                there += cur->pci_uses[u].addr.domain == 0 && cur->pci_uses[u].addr.bus == hd->guest.bus;
                        return planned == there;
                }
                want = plan_find_port(p, want->parent_index);
        }
        return false;
}

bool planner_matches(const struct domain *cur, const struct domain *base, const struct plan *p) {
        if (p->verdict != PLAN_APPLY || cur->n_hostdevs != base->n_hostdevs)
                return false;
        int map[512];
        for (size_t i = 0; i < ELEMENTSOF(map); i++)
                map[i] = -1;
        for (size_t i = 0; i < p->n_devices; i++) {
                const struct plan_device *pd = &p->devices[i];
                const struct domain_hostdev *bhd = &base->hostdevs[pd->hostdev];
                const struct domain_hostdev *hd = find_same_hostdev(cur, bhd);
                if (!hd || !in_place(cur, hd, bhd, p, pd, map))
                        return false;
        }
        return true;
}

static char *describe_location(const struct domain *d, const struct domain_hostdev *hd) {
        if (!hd->has_guest_addr)
                return xstrdup("has no PCI address yet");
        if (hd->guest.domain == 0 && hd->guest.bus == 0)
                return xasprintf("is on pcie.0 slot 0x%02x", hd->guest.slot);
        const struct domain_controller *c = domain_find_controller(d, hd->guest.bus);
        if (!c)
                return xasprintf("is on bus 0x%02x", hd->guest.bus);
        const struct domain_controller *parent = c->has_addr && c->addr.bus != 0 ? domain_find_controller(d, c->addr.bus) : NULL;
        if (parent && streq(parent->model, "pcie-expander-bus"))
                return xasprintf("is on %s %d under expander bus %d (guest cell %d)", c->model[0] ? c->model : "controller",
                                 c->index, parent->index, parent->node);
        return xasprintf("is on %s %d on pcie.0", c->model[0] ? c->model : "controller", c->index);
}

char *planner_mismatch(const struct domain *cur, const struct domain *base, const struct plan *p) {
        struct strbuf b = {0};
        size_t n_out = 0, n_more = 0;
        for (size_t i = 0; i < p->n_devices; i++) {
                const struct plan_device *pd = &p->devices[i];
                const struct domain_hostdev *bhd = &base->hostdevs[pd->hostdev];
                const struct domain_hostdev *hd = find_same_hostdev(cur, bhd);
                if (!hd)
                        continue;
                if (in_place(cur, hd, bhd, p, pd, NULL))
                        continue;
                /* A few examples say enough; the explain output has all. */
                if (++n_out > 4) {
                        n_more++;
                        continue;
                }
                _cleanup_free_ char *where = describe_location(cur, hd);
                if (b.len)
                        strbuf_append(&b, "; ");
                if (pd->action == PLAN_MOVE)
                        strbuf_printf(&b, "%s %s, the plan puts it on guest cell %d", pd->name, where, pd->cell);
                else
                        strbuf_printf(&b, "%s %s, the plan leaves it where it was", pd->name, where);
        }
        if (n_more)
                strbuf_printf(&b, "; and %zu more device%s", n_more, n_more == 1 ? "" : "s");
        return b.len ? strbuf_steal(&b) : NULL;
}

/* Lookups in a finished plan that its readers share: a controller by its
 * index, and the host device behind a planned passthrough device.  The
 * reports (report.c) and the topology exports (nccltopo.c, hwloctopo.c)
 * use them instead of each keeping a copy.  Pure: no I/O, no globals. */
#include "planner.h"

const struct plan_port *plan_find_port(const struct plan *p, int index) {
        for (size_t i = 0; i < p->n_ports; i++)
                if (p->ports[i].index == index)
                        return &p->ports[i];
        return NULL;
}

const struct plan_pxb *plan_find_pxb(const struct plan *p, int index) {
        for (size_t i = 0; i < p->n_pxbs; i++)
                if (p->pxbs[i].index == index)
                        return &p->pxbs[i];
        return NULL;
}

const struct hostmap_device *plan_host_device(const struct hostmap *h, const struct domain_hostdev *hd) {
        if (hd->kind == DOMAIN_HOSTDEV_MDEV) {
                const struct hostmap_mdev *m = hostmap_find_mdev(h, hd->mdev_uuid);
                return m ? hostmap_find_device(h, &m->parent) : NULL;
        }
        return hostmap_find_device(h, &hd->host);
}

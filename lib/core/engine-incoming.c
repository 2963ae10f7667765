/* The engine's pipeline for an incoming migration (engine.h,
 * engine_incoming()): parse the domain, decide whether its mark lets it
 * in here (the mark, this host's policy, the limits before any pairwise
 * work), map its devices (migrate.c, pure matching), rewrite its hostdev
 * sources and mark (rewrite.c) and check the result by reading it back.
 * Pure: buffers in, buffers out. */
#include "engine.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

#include "mark.h"
#include "rewrite.h"

void incoming_result_done(struct incoming_result *r) {
        free(r->xml);
        free(r->reason);
        free(r->policy);
        free(r->uuid);
        migrate_map_done(&r->map);
        *r = (struct incoming_result) {0};
}

/* Refused, for reason (malloc'ed; taken): false, for the pipeline's
 * "stop here". */
static bool refuse(struct incoming_result *res, char *reason) {
        res->verdict = INCOMING_REFUSE;
        res->reason = reason;
        return false;
}

/* Parse: true when there is a marked domain to judge.  A domain XML that
 * does not parse is libvirt's to reject, and one without a mark passes
 * unchanged.  One that is beyond pcinuma's limits (size, tags) is not
 * libvirt's, and if it carries a pcinuma mark it must not come in
 * unjudged. */
static bool incoming_parse(const char *xml, size_t len, const struct hostmap *h, struct incoming_result *res,
                           struct domain **ret_dom) {
        _cleanup_free_ char *err = NULL;
        int r = domain_parse_on(xml, len, h, ret_dom, &err);
        if ((r == -EFBIG || r == -E2BIG) && memmem(xml, len, PCINUMA_TOPOLOGY_NS, strlen(PCINUMA_TOPOLOGY_NS)))
                return refuse(res, xasprintf("the domain XML carries a pcinuma mark but is beyond what pcinuma reads (%s)",
                                             strna(err)));
        if (r < 0 || !(*ret_dom)->mark) {
                res->xml = xstrndup(xml, len);
                return false;
        }
        (*ret_dom)->work = &res->work;
        if ((*ret_dom)->uuid)
                res->uuid = xstrdup((*ret_dom)->uuid);
        return true;
}

/* Does this host's policy take the domain in (its "migration" setting for
 * it: same-topology)? */
static bool incoming_policy_allows(const struct domain *dom, const struct policy *pol) {
        struct policy_settings s;
        struct policy_subject subj = {
                .name = dom->name, .uuid = dom->uuid, .tag = dom->policy_tag, .requested = dom->requested_policy,
        };
        if (pol)
                policy_resolve(pol, &subj, &s, NULL);
        else
                s = policy_settings_default(POLICY_LEGACY);
        return s.migration_same_topology;
}

/* Bounded by this host before anything pairs devices: each host device
 * needs one of this host's (docs/security.md).  True when it can have
 * them. */
static bool incoming_within_capacity(const struct domain *dom, const struct hostmap *h, struct incoming_result *res) {
        size_t n_pci = 0, n_mdev = 0, cap_pci, cap_mdev;
        for (size_t i = 0; i < dom->n_hostdevs; i++)
                dom->hostdevs[i].kind == DOMAIN_HOSTDEV_MDEV ? n_mdev++ : n_pci++;
        migrate_capacity(h, &cap_pci, &cap_mdev);
        if (n_pci > cap_pci)
                return refuse(res, xasprintf("the domain has %zu PCI host devices; this host has only %zu passthrough-capable "
                                             "devices (refused before matching any)", n_pci, cap_pci));
        if (n_mdev > cap_mdev)
                return refuse(res, xasprintf("the domain has %zu mdevs; this host has only %zu mdevs on devices the fingerprint "
                                             "counts (refused before matching any)", n_mdev, cap_mdev));
        return true;
}

/* Check that the mark's device records and the domain's hostdevs are the
 * same devices, one record each: *ret_of (per mark device, malloc'ed) is
 * its hostdev's index.  Lookups in the domain's hostdev index, so linear
 * in the domain.  NULL, or the refusal (malloc'ed). */
static char *match_records(const struct domain *dom, const struct mark *mark, size_t **ret_of) {
        _cleanup_free_ size_t *of = xcalloc(mark->n_devices ? mark->n_devices : 1, sizeof(size_t));
        _cleanup_free_ size_t *record_of = xcalloc(dom->n_hostdevs ? dom->n_hostdevs : 1, sizeof(size_t));
        size_t first_missing = SIZE_MAX;
        for (size_t k = 0; k < mark->n_devices; k++) {
                const struct mark_device *md = &mark->devices[k];
                struct pci_addr a;
                const struct domain_hostdev *hd = md->mdev ? domain_find_mdev_hostdev(dom, md->mdev)
                                                  : md->host && pci_addr_parse(md->host, &a) == 0 ? domain_find_pci_hostdev(dom, &a)
                                                                                                 : NULL;
                /* (a PCI record names its device as the domain spells it: "0000:3b:00.0") */
                char bdf[PCI_ADDR_STRLEN];
                if (hd && !md->mdev && !streq(md->host, pci_addr_format(&hd->host, bdf)))
                        hd = NULL;
                if (!hd) {
                        if (first_missing == SIZE_MAX)
                                first_missing = k;
                        continue;
                }
                size_t i = (size_t) (hd - dom->hostdevs);
                if (record_of[i])
                        return xasprintf("the pcinuma mark records %s %s twice: the mark does not describe this domain "
                                         "(plan it again)", md->mdev ? "mdev" : "device", md->mdev ? md->mdev : md->host);
                record_of[i] = k + 1;
                of[k] = i;
        }
        /* Every hostdev must be one the mark places (in document order,
         * the first that is not). */
        for (size_t i = 0; i < dom->n_hostdevs; i++) {
                if (record_of[i])
                        continue;
                const struct domain_hostdev *hd = &dom->hostdevs[i];
                bool mdev = hd->kind == DOMAIN_HOSTDEV_MDEV;
                char bdf[PCI_ADDR_STRLEN];
                return xasprintf("%s %s: the pcinuma mark does not record it, so its place on the source host is unknown",
                                 mdev ? "mdev" : "device", mdev ? hd->mdev_uuid : pci_addr_format(&hd->host, bdf));
        }
        /* And every device the mark records must be the domain's: a mark
         * that lists others does not describe this domain (edited, or
         * forged), and its extra devices would be mapped and reported.
         * Refused rather than ignored: the source plans it again. */
        if (first_missing != SIZE_MAX) {
                const struct mark_device *md = &mark->devices[first_missing];
                return xasprintf("the pcinuma mark records %s %s, which the domain does not have: the mark does not "
                                 "describe this domain (plan it again)", md->mdev ? "mdev" : "device",
                                 md->mdev ? md->mdev : md->host ? md->host : "without a name");
        }
        *ret_of = TAKE_PTR(of);
        return NULL;
}

/* Decide: does the mark let the domain in here, and does it describe the
 * domain?  The mark's attributes first, unchecked (only a mode name goes
 * into messages and the journal); the whole mark is parsed only after
 * the policy and the limits.  True with *mark parsed and *ret_hostdev_of
 * (match_records()) when the devices are to be matched. */
static bool incoming_decide(const struct domain *dom, const struct hostmap *h, const struct policy *pol,
                            struct incoming_result *res, struct mark *mark, size_t **ret_hostdev_of) {
        mark_parse_attrs(dom->mark, mark);
        enum policy_mode mode;
        if (mark->policy && policy_mode_from_string(mark->policy, &mode) == 0)
                res->policy = xstrdup(mark->policy);
        if (!mark->migratable || !streq(mark->migratable, "yes")) {
                res->verdict = INCOMING_REFUSE_MARKED;
                res->reason = mark->migratable_reason ? xstrdup(mark->migratable_reason) : NULL;
                return false;
        }
        if (!incoming_policy_allows(dom, pol))
                return refuse(res, xstrdup("this host's pcinuma policy refuses incoming planned domains (migration: refuse)"));
        if (!incoming_within_capacity(dom, h, res))
                return false;
        mark_done(mark);
        char *err = NULL;
        if (mark_parse(dom->mark, dom->devices, mark, &err) < 0)
                return refuse(res, err);
        char *why = match_records(dom, mark, ret_hostdev_of);
        if (why)
                return refuse(res, why);
        /* Positions of another fingerprint version cannot be compared
         * with this host's: say so rather than a misleading mismatch. */
        _cleanup_free_ char *old_version = mark_fingerprint_version_differs(mark);
        if (old_version)
                return refuse(res, xasprintf("the pcinuma mark was %s, so its device positions cannot be compared with "
                                             "this host's: restart the domain on its (upgraded) source host, where pcinumad "
                                             "plans it again, then migrate", old_version));
        return true;
}

/* Read the rewritten domain back as the domain parser reads it: each
 * hostdev's source must be the device it was mapped to, and each device
 * record of the mark must name it.  NULL, or the refusal (malloc'ed). */
static char *verify_rewrite(const char *out, const struct domain *dom, const struct migrate_map *map, const size_t *hostdev_of) {
        _cleanup_domain_ struct domain *check = NULL;
        _cleanup_free_ char *err = NULL;
        if (domain_parse(out, strlen(out), &check, &err) < 0)
                return xasprintf("internal error: the rewritten domain XML does not parse (%s); refused", strna(err));
        _cleanup_free_ size_t *pair_of = xcalloc(dom->n_hostdevs ? dom->n_hostdevs : 1, sizeof(size_t));
        for (size_t k = 0; k < map->n_pairs; k++)
                pair_of[hostdev_of[k]] = k + 1;
        if (check->n_hostdevs != dom->n_hostdevs)
                return xasprintf("internal error: the rewritten domain has %zu host devices, not %zu; refused",
                                 check->n_hostdevs, dom->n_hostdevs);
        for (size_t i = 0; i < check->n_hostdevs; i++) {
                const struct domain_hostdev *hd = &check->hostdevs[i];
                const struct migrate_pair *p = pair_of[i] ? &map->pairs[pair_of[i] - 1] : NULL;
                char name[64];
                domain_hostdev_name(hd, name);
                const char *got = hd->kind == DOMAIN_HOSTDEV_MDEV ? hd->mdev_uuid : name;
                if (!p || p->mdev != (hd->kind == DOMAIN_HOSTDEV_MDEV) || strcasecmp(got, p->to) != 0)
                        return xasprintf("the rewrite of the hostdev sources does not read back: the domain parser reads "
                                         "host device %s where %s should be (the XML holds a <source> the rewrite did not "
                                         "see); refused, nothing was changed", got, p ? p->to : "nothing");
        }
        _cleanup_(mark_done) struct mark m = {0};
        if (!check->mark || mark_parse(check->mark, check->devices, &m, NULL) < 0 || m.n_devices != map->n_pairs)
                return xstrdup("internal error: the rewritten pcinuma mark does not read back; refused");
        for (size_t k = 0; k < m.n_devices; k++) {
                const char *name = map->pairs[k].mdev ? m.devices[k].mdev : m.devices[k].host;
                if (!name || strcasecmp(name, map->pairs[k].to) != 0)
                        return xasprintf("the rewritten pcinuma mark records %s where %s should be; refused",
                                         strna(name), map->pairs[k].to);
        }
        return NULL;
}

/* Rewrite and check: the mapped host side written into the document
 * (rewrite_migrate()), formatted, and read back.  What the domain parser
 * (and so pcinumad on its next plan) reads must be what was mapped: a
 * <source> the rewrite did not reach would leave the source host's device
 * in the definition while the mark, the journal and the hook's message
 * say it moved.  True when res->xml is the accepted domain. */
static bool incoming_rewrite(struct domain *dom, const size_t *hostdev_of, struct incoming_result *res) {
        rewrite_migrate(dom, &res->map, hostdev_of);
        if (domain_format(dom, &res->xml) < 0)
                return refuse(res, xstrdup("internal error: cannot format the rewritten domain XML"));
        char *why = verify_rewrite(res->xml, dom, &res->map, hostdev_of);
        if (!why)
                return true;
        free(res->xml);
        res->xml = NULL;
        migrate_map_done(&res->map);
        return refuse(res, why);
}

void engine_incoming(const char *xml, size_t len, const struct hostmap *h, const struct policy *pol,
                     const struct migrate_in_use *in_use, struct incoming_result *ret) {
        struct incoming_result res = { .work = work_new(WORK_BUDGET) };
        _cleanup_domain_ struct domain *dom = NULL;
        _cleanup_free_ size_t *hostdev_of = NULL;
        _cleanup_(mark_done) struct mark mark = {0};
        char *why = NULL;

        if (!incoming_parse(xml, len, h, &res, &dom) || !incoming_decide(dom, h, pol, &res, &mark, &hostdev_of))
                goto done;
        if (migrate_map_host(&mark, h, pol, in_use, dom->uuid, &res.work, &res.map, &why) < 0) {
                refuse(&res, why);
                goto done;
        }
        if (incoming_rewrite(dom, hostdev_of, &res))
                res.verdict = INCOMING_ACCEPT;
done:
        *ret = res;
}

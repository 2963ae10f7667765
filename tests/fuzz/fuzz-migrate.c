/* Fuzz target: the destination's decision on an incoming planned domain
 * (engine_incoming(), issue 24), on domains whose marks come from the
 * golden cases, planned here on the sample host, and edited or forged.
 * The mark and every <source> are input: the review of issue 24 found a
 * quadratic check that stalled pcinumad and a decoy <source> the rewrite
 * and the domain parser read differently.
 *
 * Each input goes to the sample host's twin (the same topology, other
 * numbers) as it is, and, when it plans on the sample host, as planned
 * there.  Checks:
 * - the verdict is one of the four; a pass gives the input back verbatim,
 *   a refusal a reason (lines of text) and no XML, an acceptance XML and a
 *   map;
 * - an accepted domain's output parses, and each hostdev's source, as the
 *   domain parser reads it, is the device its pair maps it to (the
 *   target's own reading: a <source> the rewrite missed is a finding);
 *   the output carries a mark naming the new devices; nothing else in
 *   <devices> changed but the sources' addresses;
 * - migrating the output again onto the twin is accepted, unless a budget
 *   stops it;
 * - the request's budget holds: the work spent is over the limit only
 *   when a phase ran out, and a refusal says so.
 * ASan and UBSan (the libFuzzer build) catch what the checks do not. */
#include "fuzz.h"

#include <strings.h>

#include "domain.h"
#include "engine.h"
#include "migrate.h"
#include "policy.h"

static struct hostmap *host, *twin;
static struct policy *pol;

static void check_budget(const struct incoming_result *r) {
        if (r->work.phase && r->work.spent <= r->work.limit)
                fuzz_fail("the budget ran out in %s at %llu of %llu units", r->work.phase,
                          (unsigned long long) r->work.spent, (unsigned long long) r->work.limit);
        if (!r->work.phase && r->work.spent > r->work.limit)
                fuzz_fail("%llu units spent, over the limit of %llu, and no phase ran out",
                          (unsigned long long) r->work.spent, (unsigned long long) r->work.limit);
        if (r->work.phase && r->verdict == INCOMING_ACCEPT)
                fuzz_fail("accepted although the budget ran out in %s", r->work.phase);
}

/* How many elements <devices> holds. */
static size_t n_children(const struct domain *d) {
        size_t n = 0;
        for (xmlNodePtr c = d->devices ? d->devices->children : NULL; c; c = c->next)
                n += c->type == XML_ELEMENT_NODE;
        return n;
}

static void check_accepted(const struct domain *in, const struct incoming_result *r) {
        if (!r->xml || (!r->map.n_pairs && in->n_hostdevs))
                fuzz_fail("accepted without XML or without a map");
        _cleanup_domain_ struct domain *out = NULL;
        _cleanup_free_ char *err = NULL;
        if (domain_parse(r->xml, strlen(r->xml), &out, &err) < 0)
                fuzz_fail("the accepted domain does not parse: %s\n%s", err, r->xml);
        if (!out->mark)
                fuzz_fail("the accepted domain carries no mark");
        if (out->n_hostdevs != in->n_hostdevs || n_children(out) != n_children(in))
                fuzz_fail("the rewrite changed the devices: %zu hostdevs and %zu elements, %zu and %zu before",
                          out->n_hostdevs, n_children(out), in->n_hostdevs, n_children(in));
        for (size_t i = 0; i < in->n_hostdevs; i++) {
                const struct domain_hostdev *a = &in->hostdevs[i], *b = &out->hostdevs[i];
                char from[64], to[64];
                domain_hostdev_name(a, from);
                domain_hostdev_name(b, to);
                const char *want = NULL;
                for (size_t k = 0; k < r->map.n_pairs && !want; k++) {
                        const struct migrate_pair *p = &r->map.pairs[k];
                        const char *f = a->kind == DOMAIN_HOSTDEV_MDEV ? a->mdev_uuid : from;
                        if (p->mdev == (a->kind == DOMAIN_HOSTDEV_MDEV) && strcasecmp(p->from, f) == 0)
                                want = p->to;
                }
                const char *got = b->kind == DOMAIN_HOSTDEV_MDEV ? b->mdev_uuid : to;
                if (!want || b->kind != a->kind || strcasecmp(got, want) != 0)
                        fuzz_fail("hostdev %zu (%s) reads as %s after the rewrite, mapped to %s\n%s", i, from, got,
                                  strna(want), r->xml);
                if (a->has_guest_addr != b->has_guest_addr || (a->has_guest_addr && !pci_addr_eq(&a->guest, &b->guest)))
                        fuzz_fail("hostdev %zu (%s): the rewrite moved its guest address", i, from);
        }
}

static void one(const char *xml, size_t len, const struct hostmap *dest, bool again) {
        _cleanup_(incoming_result_done) struct incoming_result r = {0};
        engine_incoming(xml, len, dest, pol, NULL, &r);
        check_budget(&r);
        switch (r.verdict) {
        case INCOMING_PASS:
                /* (as text: up to a NUL, which the hook protocol never carries) */
                if (!r.xml || strlen(r.xml) != strnlen(xml, len) || memcmp(r.xml, xml, strlen(r.xml)) != 0)
                        fuzz_fail("a pass did not give the input back");
                return;
        case INCOMING_REFUSE_MARKED:
                if (r.xml)
                        fuzz_fail("a refusal gave XML");
                return;
        case INCOMING_REFUSE:
                if (r.xml || !r.reason || !*r.reason)
                        fuzz_fail("a refusal without a reason, or with XML: %s", strna(r.reason));
                /* Lines of text: the hook prefixes each with "pcinuma: ". */
                for (const char *c = r.reason; *c; c++)
                        if ((unsigned char) *c < 0x20 && *c != '\n')
                                fuzz_fail("a control character in a refusal: %s", r.reason);
                if (again && !strstr(r.reason, "WORK_BUDGET") && !strstr(r.reason, "MIGRATE_MAP_BUDGET"))
                        fuzz_fail("the migrated domain is refused by the host it was mapped onto: %s\n%s", r.reason, xml);
                return;
        case INCOMING_ACCEPT: {
                _cleanup_domain_ struct domain *in = NULL;
                _cleanup_free_ char *err = NULL;
                if (domain_parse(xml, len, &in, &err) < 0)
                        fuzz_fail("accepted a domain that does not parse: %s", err);
                check_accepted(in, &r);
                if (!again)
                        one(r.xml, strlen(r.xml), dest, true);
                return;
        }
        }
        fuzz_fail("verdict %d", (int) r.verdict);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const char *xml = (const char *) data;
        if (size > DOMAIN_XML_MAX + 1)
                return 0;
        if (!host) {
                host = fuzz_sample_hostmap();
                twin = fuzz_sample_hostmap_twin();
                static const char json[] = "{\"default\": {\"policy\": \"require\"}, \"passthrough_pool\": [\"class:0x0108\"]}";
                _cleanup_free_ char *err = NULL;
                if (policy_parse(json, strlen(json), "fuzz", &pol, &err) < 0)
                        fuzz_fail("%s", err);
        }
        one(xml, size, twin, false);
        /* As planned on the sample host, whose twin maps every device. */
        _cleanup_engine_result_ struct engine_result *res = NULL;
        _cleanup_free_ char *err = NULL;
        enum policy_mode mode = POLICY_REQUIRE;
        if (engine_plan(xml, size, host, NULL, &mode, &res, &err) < 0 || !res->xml || !res->changed)
                return 0;
        one(res->xml, strlen(res->xml), twin, false);
        return 0;
}

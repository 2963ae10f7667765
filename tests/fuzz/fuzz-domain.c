/* Fuzz target: a domain XML through everything pcinumad does with it.
 *
 * 1. The engine as the daemon runs it (engine_plan() with the policy file's
 *    rules, or a forced policy), its explanations, and its two promises:
 *    planning the planned output again gives it back byte for byte, and
 *    engine_revert() accepts it.
 * 2. The pieces by hand: domain_parse(), domain_resolve_backing(),
 *    planner_run(), rewrite_apply(), domain_format() and rewrite_revert(),
 *    which must give back the document it started from (white space
 *    between elements aside).
 *
 * The host is the bundled sample host (fuzz-hostmap.c), which the golden
 * cases in the corpus were written for. */
#include "fuzz.h"

#include <ctype.h>
#include <libxml/parser.h>

#include "domain.h"
#include "engine.h"
#include "hwloctopo.h"
#include "planner.h"
#include "policy.h"
#include "report.h"
#include "rewrite.h"

static struct hostmap *host;
static struct policy *pol;

static const char policy_text[] =
        "{\"default\": {\"policy\": \"require\"},\n"
        " \"allow_domain_policy\": true,\n"
        " \"rules\": [{\"match\": {\"name\": \"legacy-*\"}, \"policy\": \"legacy\"},\n"
        "           {\"match\": {\"tag\": \"best-effort\"}, \"policy\": \"preferred\"},\n"
        "           {\"match\": {\"uuid\": \"4dea22b3-1d52-d8f3-2516-782e98ab3fa0\"}, \"policy\": \"socket\"},\n"
        "           {\"match\": {\"name\": \"off-*\"}, \"policy\": \"off\"}]}\n";

static void setup(void) {
        _cleanup_free_ char *err = NULL;

        if (host)
                return;
        host = fuzz_sample_hostmap();
        if (policy_parse(policy_text, sizeof(policy_text) - 1, "fuzz", &pol, &err) < 0)
                fuzz_fail("built-in policy: %s", err);
}

/* Are two documents the same, as libvirt reads a domain: the same
 * elements in the same order, each with the same attributes (in any
 * order) and, for a leaf, the same text?  Text and comments between
 * elements (the indentation the rewriter adds and removes) do not count. */
static bool same_attrs(xmlNodePtr a, xmlNodePtr b) {
        size_t na = 0, nb = 0;

        for (xmlAttrPtr p = a->properties; p; p = p->next) {
                na++;
                const xmlChar *ns = p->ns ? p->ns->href : NULL;
                xmlChar *va = xmlNodeListGetString(a->doc, p->children, 1);
                xmlChar *vb = ns ? xmlGetNsProp(b, p->name, ns) : xmlGetNoNsProp(b, p->name);
                bool eq = va && vb && xmlStrEqual(va, vb);
                xmlFree(va);
                xmlFree(vb);
                if (!eq)
                        return false;
        }
        for (xmlAttrPtr p = b->properties; p; p = p->next)
                nb++;
        return na == nb;
}

/* Equal but for white space. */
static bool same_text(const xmlChar *a, const xmlChar *b) {
        for (;;) {
                while (a && *a && isspace(*a))
                        a++;
                while (b && *b && isspace(*b))
                        b++;
                if (!a || !*a || !b || !*b)
                        return (!a || !*a) && (!b || !*b);
                if (*a++ != *b++)
                        return false;
        }
}

static xmlNodePtr next_element(xmlNodePtr n) {
        while (n && n->type != XML_ELEMENT_NODE)
                n = n->next;
        return n;
}

static bool same_tree(xmlNodePtr a, xmlNodePtr b) {
        if (!xmlStrEqual(a->name, b->name) || !a->ns != !b->ns || (a->ns && !xmlStrEqual(a->ns->href, b->ns->href)) ||
            !same_attrs(a, b))
                return false;
        xmlNodePtr ca = next_element(a->children), cb = next_element(b->children);
        if (!ca && !cb) {
                xmlChar *ta = xmlNodeGetContent(a), *tb = xmlNodeGetContent(b);
                /* "<metadata>\n  </metadata>" comes back as "<metadata/>",
                 * and the white space around a removed element goes with it */
                bool eq = same_text(ta, tb);
                xmlFree(ta);
                xmlFree(tb);
                return eq;
        }
        for (; ca && cb; ca = next_element(ca->next), cb = next_element(cb->next))
                if (!same_tree(ca, cb))
                        return false;
        return !ca && !cb;
}

static void check_engine(const char *xml, size_t len, const enum policy_mode *forced) {
        _cleanup_engine_result_ struct engine_result *res = NULL;
        _cleanup_free_ char *err = NULL;

        if (engine_plan(xml, len, host, pol, forced, &res, &err) < 0)
                return;
        free(report_explain(res, 0));
        planner_fidelity(res->plan);
        free(report_explain(res, 0));
        free(report_explain(res, REPORT_ALL_PAIRS));
        free(report_json(res));
        free(report_causes(res, PLAN_STAY, NULL));
        free(hwloctopo_guest(res->plan, res->base, host));
        if (res->verdict == PLAN_REFUSED) {
                free(report_refusal(res));
                if (res->xml)
                        fuzz_fail("refused, but there is an output XML");
                return;
        }
        if (!res->xml)
                fuzz_fail("verdict %s without an output XML", plan_verdict_to_string(res->verdict));

        /* Planning is idempotent: the planned domain, planned again under
         * the same policy, is already planned and printed byte for byte. */
        if (res->verdict == PLAN_APPLY && res->changed) {
                _cleanup_engine_result_ struct engine_result *again = NULL;
                _cleanup_free_ char *err2 = NULL;
                enum policy_mode m = res->settings.mode;
                size_t out_len = strlen(res->xml);

                if (engine_plan(res->xml, out_len, host, pol, &m, &again, &err2) < 0)
                        fuzz_fail("the planned XML does not plan again: %s", err2);
                if (again->verdict != PLAN_APPLY || !again->already_planned || again->changed ||
                    !again->xml || !streq(again->xml, res->xml))
                        fuzz_fail("planning is not idempotent: verdict %s, already_planned %d, changed %d%s%s",
                                  plan_verdict_to_string(again->verdict), again->already_planned,
                                  again->changed, again->mismatch ? ", mismatch: " : "",
                                  strempty(again->mismatch));

                _cleanup_free_ char *reverted = NULL, *warning = NULL, *err3 = NULL;
                bool changed = false;
                if (engine_revert(res->xml, out_len, &reverted, &changed, &warning, &err3) < 0)
                        fuzz_fail("the planned XML does not revert: %s", err3);
                if (!changed)
                        fuzz_fail("the planned XML has no mark to revert");
        }
}

static void check_round_trip(const char *xml, size_t len) {
        _cleanup_domain_ struct domain *d = NULL;
        _cleanup_plan_ struct plan *p = NULL;
        _cleanup_free_ char *err = NULL, *before = NULL, *planned = NULL, *after = NULL, *warning = NULL;
        int r;

        if (domain_parse(xml, len, &d, &err) < 0)
                return;
        if (d->mark) {
                r = rewrite_revert(d, &warning, &err);
                if (r < 0)
                        return;
                if (r != 1)
                        fuzz_fail("rewrite_revert() returned %d for a marked domain", r);
                if (d->mark)
                        fuzz_fail("rewrite_revert() left the mark");
                free(TAKE_PTR(warning));
        }
        if (domain_resolve_backing(d, host, &err) < 0)
                return;
        /* Two devices on one guest address, or a device with two guest
         * addresses, is a domain libvirt refuses ("double use of PCI
         * address"), and the rewriter is not meant to restore it exactly. */
        bool exact = true;
        for (xmlNodePtr dev = d->devices ? d->devices->children : NULL; dev && exact; dev = dev->next) {
                unsigned n_addr = 0;
                for (xmlNodePtr c = dev->children; c; c = c->next) {
                        if (!xml_is(c, "address"))
                                continue;
                        n_addr++;
                        /* The mark keeps an address as "k=v k=v" (rewrite.c:
                         * libvirt never writes a space in these values). */
                        for (xmlAttrPtr a = c->properties; a && exact; a = a->next) {
                                xmlChar *v = xmlNodeListGetString(c->doc, a->children, 1);
                                for (const xmlChar *q = v; q && *q && exact; q++)
                                        exact = !isspace(*q);
                                xmlFree(v);
                        }
                }
                exact = exact && n_addr <= 1;
        }
        for (size_t i = 0; i < d->n_pci_uses && exact; i++)
                for (size_t j = i + 1; j < d->n_pci_uses && exact; j++)
                        if (pci_addr_eq(&d->pci_uses[i].addr, &d->pci_uses[j].addr))
                                exact = false;

        /* The policy from the input, so that corpus entries keep theirs. */
        struct policy_settings s = { .mode = POLICY_REQUIRE };
        if (len > 0)
                s.mode = (enum policy_mode) (1 + xml[len - 1] % (_POLICY_MODE_MAX - 1));
        if (planner_run(d, host, &s, &p) < 0)
                fuzz_fail("planner_run() failed");
        if (p->verdict != PLAN_APPLY)
                return;

        if (domain_format(d, &before) < 0)
                fuzz_fail("domain_format() failed");
        if (rewrite_apply(d, p, &err) < 0)
                return;
        if (domain_format(d, &planned) < 0)
                fuzz_fail("domain_format() failed after rewrite_apply()");
        if (!d->mark)
                fuzz_fail("rewrite_apply() wrote no mark");

        r = rewrite_revert(d, &warning, &err);
        if (r != 1)
                fuzz_fail("rewrite_revert() of our own mark returned %d: %s", r, strna(err));
        if (domain_format(d, &after) < 0)
                fuzz_fail("domain_format() failed after rewrite_revert()");
        if (warning || !exact)
                return;   /* it said it could not restore exactly */

        _cleanup_xmldoc_ xmlDocPtr orig = xmlReadMemory(before, (int) strlen(before), "before.xml", NULL,
                                                        XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
        if (!orig)
                fuzz_fail("domain_format() gave XML that does not parse");
        if (!same_tree(xmlDocGetRootElement(orig), xmlDocGetRootElement(d->doc)))
                fuzz_fail("rewrite_revert(rewrite_apply(d)) differs from d:\n--- before\n%s\n--- after\n%s", before, after);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const char *xml = (const char *) data;

        /* domain_parse() refuses more than DOMAIN_XML_MAX at once; a big
         * input only slows the fuzzer down. */
        if (size > 256 * 1024)
                return 0;
        setup();

        check_engine(xml, size, NULL);
        /* A forced policy as well (pcinumactl plan --policy), chosen by the
         * input's length so that every mode gets its share. */
        enum policy_mode forced = (enum policy_mode) (size % _POLICY_MODE_MAX);
        check_engine(xml, size, &forced);
        check_round_trip(xml, size);
        return 0;
}

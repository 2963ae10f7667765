/* Fuzz target: undoing a pcinuma mark (rewrite_revert(), engine_revert()),
 * on domains that carry real marks edited by the user since, and forged
 * ones.  The mark is input like the rest of the domain: the review of
 * issue 13 found a use-after-free, corrupt XML and smuggled elements here.
 *
 * Checks, for every input domain_parse() accepts:
 * - a refused mark leaves the document exactly as it was, and says why;
 * - a reverted document formats to XML that parses again, with every
 *   prefix declared (no freed or missing namespace), and no mark left;
 * - revert brings nothing into <devices> that was not there but PCI
 *   controllers (a forged <pcinuma:removed> holds a <disk>, a <hostdev>…);
 * - engine_revert() agrees with rewrite_revert(), and reverting the result
 *   again changes nothing;
 * - the result plans (sample host, policy require), and the plan reverts.
 * ASan and UBSan (the libFuzzer build) catch what the checks do not. */
#include "fuzz.h"
#include "xml-names.h"

#include <libxml/parser.h>

#include "domain.h"
#include "engine.h"
#include "policy.h"
#include "rewrite.h"

static struct hostmap *host;

/* undeclared_name() (xml-names.h): domain_parse() refuses a document with
 * a namespace error since the first runs of this target, so every input
 * that gets this far declares its prefixes; the check of the input stays,
 * to say so if that changes. */

/* Did the input declare every prefix it uses?  Only then must the output. */
static bool input_declared;

/* Parse formatted output: it must be well-formed, namespaces included. */
static xmlDocPtr reparse(const char *xml, const char *what) {
        xmlParserCtxtPtr ctxt = xmlNewParserCtxt();
        if (!ctxt)
                abort();
        xmlDocPtr doc = xmlCtxtReadMemory(ctxt, xml, (int) strlen(xml), "out.xml", NULL,
                                          XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
        const xmlError *e = xmlCtxtGetLastError(ctxt);
        _cleanup_free_ char *msg = xstrdup(e && e->message ? e->message : "?");
        xmlFreeParserCtxt(ctxt);
        if (!doc)
                fuzz_fail("%s is not well-formed XML (%s):\n%s", what, msg, xml);
        const char *bad = undeclared_name(xmlDocGetRootElement(doc));
        if (bad && input_declared)
                fuzz_fail("%s uses the undeclared prefix of %s:\n%s", what, bad, xml);
        return doc;
}

/* How many direct children of <devices> are named 'name'. */
static size_t count_devices(xmlDocPtr doc, const xmlChar *name) {
        xmlNodePtr devices = xml_child(xmlDocGetRootElement(doc), "devices");
        size_t n = 0;
        for (xmlNodePtr c = devices ? devices->children : NULL; c; c = c->next)
                n += c->type == XML_ELEMENT_NODE && xmlStrEqual(c->name, name);
        return n;
}

static void check_nothing_smuggled(xmlDocPtr in, xmlDocPtr out) {
        xmlNodePtr devices = xml_child(xmlDocGetRootElement(out), "devices");
        for (xmlNodePtr c = devices ? devices->children : NULL; c; c = c->next) {
                if (c->type != XML_ELEMENT_NODE || xml_is(c, "controller"))
                        continue;
                if (count_devices(out, c->name) > count_devices(in, c->name))
                        fuzz_fail("revert added a <%s> to <devices>", (const char *) c->name);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const char *xml = (const char *) data;
        _cleanup_domain_ struct domain *d = NULL;
        _cleanup_free_ char *err = NULL, *warning = NULL, *before = NULL, *after = NULL;

        if (size > 256 * 1024)
                return 0;
        if (!host)
                host = fuzz_sample_hostmap();
        if (domain_parse(xml, size, &d, &err) < 0)
                return 0;
        bool marked = d->mark != NULL;
        if (domain_format(d, &before) < 0)
                fuzz_fail("domain_format() failed");
        input_declared = false;
        _cleanup_xmldoc_ xmlDocPtr in = reparse(before, "the parsed input");
        input_declared = !undeclared_name(xmlDocGetRootElement(in));

        int r = rewrite_revert(d, &warning, &err);
        if (domain_format(d, &after) < 0)
                fuzz_fail("domain_format() failed after rewrite_revert()");
        if (r < 0) {
                if (!err || !*err)
                        fuzz_fail("rewrite_revert() failed without a message");
                if (!streq(before, after))
                        fuzz_fail("a refused mark changed the document: %s", err);
        } else if (r != (marked ? 1 : 0))
                fuzz_fail("rewrite_revert() returned %d for a %s domain", r, marked ? "marked" : "unmarked");
        if (r == 0 && !streq(before, after))
                fuzz_fail("rewrite_revert() of an unmarked domain changed it");
        if (r < 0)
                goto engine;
        if (d->mark)
                fuzz_fail("rewrite_revert() left the mark in the model");
        if (warning && !*warning)
                fuzz_fail("an empty warning");

        {
                _cleanup_xmldoc_ xmlDocPtr out = reparse(after, "the reverted domain");
                check_nothing_smuggled(in, out);
                _cleanup_domain_ struct domain *again = NULL;
                _cleanup_free_ char *err2 = NULL;
                if (domain_parse(after, strlen(after), &again, &err2) < 0)
                        fuzz_fail("the reverted domain does not parse again: %s", err2);
                if (again->mark)
                        fuzz_fail("the reverted domain still carries a mark");
        }

engine:
        /* engine_revert(): the same answer from the text. */
        {
                _cleanup_free_ char *out = NULL, *w = NULL, *e = NULL;
                bool changed = false;
                int r2 = engine_revert(xml, size, &out, &changed, &w, &e);
                if ((r2 < 0) != (r < 0))
                        fuzz_fail("engine_revert() returned %d, rewrite_revert() %d", r2, r);
                if (r2 < 0) {
                        if (out)
                                fuzz_fail("engine_revert() failed but gave XML");
                        return 0;
                }
                if (changed != marked)
                        fuzz_fail("engine_revert(): changed %d for a %s domain", changed, marked ? "marked" : "unmarked");
                if (changed && !streq(out, after))
                        fuzz_fail("engine_revert() and rewrite_revert() differ");
                _cleanup_free_ char *out2 = NULL, *w2 = NULL, *e2 = NULL;
                bool changed2 = true;
                if (engine_revert(out, strlen(out), &out2, &changed2, &w2, &e2) < 0 || changed2)
                        fuzz_fail("reverting the reverted domain again: %s", strna(e2));
        }

        /* The reverted domain plans, and the plan reverts. */
        {
                _cleanup_engine_result_ struct engine_result *res = NULL;
                _cleanup_free_ char *e = NULL;
                enum policy_mode mode = POLICY_REQUIRE;
                if (engine_plan(after, strlen(after), host, NULL, &mode, &res, &e) < 0 || !res->xml || !res->changed)
                        return 0;
                xmlFreeDoc(reparse(res->xml, "the planned domain"));
                _cleanup_free_ char *back = NULL, *w = NULL, *e2 = NULL;
                bool changed = false;
                if (engine_revert(res->xml, strlen(res->xml), &back, &changed, &w, &e2) < 0)
                        fuzz_fail("the plan of the reverted domain does not revert: %s", e2);
                xmlFreeDoc(reparse(back, "the reverted plan"));
        }
        return 0;
}

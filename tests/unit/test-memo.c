/* Property test of the memo of prepare answers (lib/core/memo.h): an
 * answer the memo gives is always the answer a full decision gives.
 *
 * Each golden case's input is planned (engine_plan), and what comes back
 * at the prepare hook is that plan, as it is and edited: libvirt's
 * id='N' on the root element (two of the same length, one longer), a
 * hostdev removed, a hostdev's host address changed, a cell's memory
 * changed, pcinuma's own elements changed (the mark's policy attribute, a
 * device record of the mark removed, an expander bus's busNr).  Each of
 * those is decided with two host maps (the case's fixture and another)
 * and two policies (the case's and one with another mode), each with
 * its own generation, in two passes, and under a decide_context picked at
 * random (persistent or transient, a watcher or none, pcinuma's own start,
 * an incoming migration), which memo_keeps() answers must not depend on.
 * Every full decision that memo_keeps() is kept in the memo; every
 * request the memo has an answer for must have been decided exactly as the
 * kept answer: verdict, exit code, message, output, UUID, policy mode, and
 * what the journal entry shows of the plan (devices, nodes, cells, the
 * path fidelity report, the reason, a stale mark).
 *
 * --drop policy|host leaves that generation out of what the memo compares
 * (passes 0): the property must fail then, and the run checks that it
 * does (it passes only if some memo answer differs from the full
 * decision, and prints the first), which shows that the test catches a
 * memo that leaves out an input. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "read-text.h"
#include "decide.h"
#include "engine.h"
#include "hostmap.h"
#include "hostmap-sysfs.h"
#include "memo.h"
#include "policy.h"
#include "util.h"

#ifndef GOLDEN_DIR
#error "GOLDEN_DIR must be defined"
#endif

static const char *drop;         /* --drop: "policy" or "host" */
static char scratch[] = "/tmp/test-memo-XXXXXX";

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static unsigned pick(unsigned n) {
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        return (unsigned) ((rng * 0x2545f4914f6cdd1dull) % n);
}

static struct {
        unsigned cases, decisions, kept, hits, hits_other_bytes, hits_other_ctx, wrong, edits[16];
} count;

/* ---- host maps and policies, each with its generation ----------------------------- */

static struct {
        char *name;
        struct hostmap *h;
} hosts[16];
static size_t n_hosts;

static size_t host_index(const char *name) {
        for (size_t i = 0; i < n_hosts; i++)
                if (streq(hosts[i].name, name))
                        return i;
        assert_true(n_hosts < ELEMENTSOF(hosts));
        _cleanup_free_ char *root = xasprintf("%s/%s", scratch, name);
        _cleanup_free_ char *cmd = xasprintf("python3 '%s' '%s/hosts/%s.json' '%s'", MKFAKESYSFS, FIXTURE_DIR, name, root);
        if (system(cmd) != 0)
                fail_msg("command failed: %s", cmd);
        _cleanup_free_ char *err = NULL;
        if (hostmap_load_path(root, &hosts[n_hosts].h, &err) < 0)
                fail_msg("host %s: %s", root, err);
        hosts[n_hosts].name = xstrdup(name);
        return n_hosts++;
}

static struct {
        char *text;
        struct policy *p;
} policies[64];
static size_t n_policies;

/* The policy of this text, or SIZE_MAX when it is not one. */
static size_t policy_index(const char *text) {
        for (size_t i = 0; i < n_policies; i++)
                if (streq(policies[i].text, text))
                        return i;
        assert_true(n_policies < ELEMENTSOF(policies));
        _cleanup_free_ char *err = NULL;
        if (policy_parse(text, strlen(text), "test", &policies[n_policies].p, &err) < 0)
                return SIZE_MAX;
        policies[n_policies].text = xstrdup(text);
        return n_policies++;
}

/* ---- the edits ---------------------------------------------------------------------- */

enum edit {
        EDIT_NONE,
        EDIT_ID_7,
        EDIT_ID_8,
        EDIT_ID_12,
        EDIT_HOSTDEV_REMOVED,
        EDIT_HOSTDEV_SOURCE,
        EDIT_CELL_MEMORY,
        EDIT_MARK_POLICY,
        EDIT_MARK_DEVICE_REMOVED,
        EDIT_EXPANDER_BUSNR,
        _EDIT_MAX,
};

static const char *const edit_names[_EDIT_MAX] = {
        "none", "root id='7'", "root id='8'", "root id='12'", "a hostdev removed", "a hostdev's source bus",
        "a cell's memory", "the mark's policy", "a device record of the mark removed", "an expander bus's busNr",
};

/* xml with [at, at + n) replaced by with. */
static char *splice(const char *xml, size_t at, size_t n, const char *with) {
        return xasprintf("%.*s%s%s", (int) at, xml, with, xml + at + n);
}

/* The edited document, or NULL when the edit does not apply to xml. */
static char *apply_edit(const char *xml, enum edit e) {
        const char *p, *q;
        switch (e) {
        case EDIT_NONE:
                return xstrdup(xml);
        case EDIT_ID_7:
        case EDIT_ID_8:
        case EDIT_ID_12:
                if (strncmp(xml, "<domain ", 8) != 0)
                        return NULL;
                return splice(xml, 8, 0, e == EDIT_ID_7 ? "id='7' " : e == EDIT_ID_8 ? "id='8' " : "id='12' ");
        case EDIT_HOSTDEV_REMOVED:
                if (!(p = strstr(xml, "<hostdev ")) || !(q = strstr(p, "</hostdev>")))
                        return NULL;
                return splice(xml, (size_t) (p - xml), (size_t) (q - p) + strlen("</hostdev>"), "");
        case EDIT_HOSTDEV_SOURCE:
                if (!(p = strstr(xml, "<hostdev ")) || !(p = strstr(p, "<source")) || !(p = strstr(p, "bus=\"0x")))
                        return NULL;
                p += strlen("bus=\"0x");
                return splice(xml, (size_t) (p - xml), 1, *p == '3' ? "1" : "3");
        case EDIT_CELL_MEMORY:
                if (!(p = strstr(xml, "<cell ")) || !(p = strstr(p, "memory=")))
                        return NULL;
                return splice(xml, (size_t) (p - xml) + strlen("memory=") + 1, 0, "1");
        case EDIT_MARK_POLICY:
                if (!(p = strstr(xml, "<pcinuma:topology")) || !(p = strstr(p, " policy=\"")))
                        return NULL;
                p += strlen(" policy=\"");
                q = strchr(p, '"');
                return splice(xml, (size_t) (p - xml), (size_t) (q - p), strncmp(p, "preferred", 9) == 0 ? "require" : "preferred");
        case EDIT_MARK_DEVICE_REMOVED:
                if (!(p = strstr(xml, "<pcinuma:device ")) || !(q = strstr(p, "/>")))
                        return NULL;
                return splice(xml, (size_t) (p - xml), (size_t) (q - p) + 2, "");
        case EDIT_EXPANDER_BUSNR:
                if (!(p = strstr(xml, "pcie-expander-bus")) || !(p = strstr(p, "busNr=")))
                        return NULL;
                p += strlen("busNr=") + 1;
                return splice(xml, (size_t) (p - xml), 1, *p == '2' ? "1" : "2");
        case _EDIT_MAX:
                break;
        }
        return NULL;
}

/* ---- decisions -------------------------------------------------------------------- */

/* Everything of a decision the hook and the journal show. */
static char *answer(struct decision *d) {
        struct strbuf b = {0};
        strbuf_printf(&b, "verdict=%s exit=%d domain=%s uuid=%s mode=%s\nmessage=%s\nout=%s\n",
                      decide_verdict_to_string(d->verdict), d->exit_code, d->domain, strna(d->uuid),
                      d->has_mode ? policy_mode_to_string(d->mode) : "-", strna(d->message), strna(d->out));
        const struct engine_result *r = d->result;
        if (r) {
                planner_fidelity(r->plan);
                strbuf_printf(&b, "plan=%d already=%d reason=%s stale=%s\n", (int) r->verdict, r->already_planned,
                              strna(r->plan->reason), strna(r->stale_mark));
                for (size_t i = 0; i < r->plan->n_devices; i++)
                        strbuf_printf(&b, "device %s node=%d cell=%d\n", r->plan->devices[i].name,
                                      r->plan->devices[i].host_node, r->plan->devices[i].cell);
                strbuf_printf(&b, "pairs=%zu unknown=%zu\n", r->plan->n_pairs, (size_t) r->plan->n_unknown);
                for (size_t i = 0; i < r->plan->n_pairs; i++)
                        strbuf_printf(&b, "pair %zu %zu %d %d\n", r->plan->pairs[i].a, r->plan->pairs[i].b,
                                      (int) r->plan->pairs[i].host, (int) r->plan->pairs[i].guest);
        }
        return strbuf_steal(&b);
}

struct kept {
        char *answer;
        char *xml;                      /* the request it was decided for */
        unsigned ctx;
};

static void kept_free(void *v) {
        struct kept *k = v;
        free(k->answer);
        free(k->xml);
        free(k);
}

/* What pcinumad could know of the domain (decide_context): picked at
 * random for each decision. */
static const struct decide_context *context(unsigned which, const char *uuid, struct decide_context *c) {
        switch (which) {
        case 0:
                return NULL;
        case 1:
                *c = (struct decide_context) { .uuid = uuid, .updating = true, .watcher = true,
                                               .persistence = DECIDE_PERSISTENT };
                return c;
        case 2:
                *c = (struct decide_context) { .uuid = uuid, .updating = true, .watcher = true,
                                               .persistence = DECIDE_TRANSIENT };
                return c;
        case 3:
                *c = (struct decide_context) { .uuid = uuid, .updating = true, .watcher = true, .own_start = true };
                return c;
        default:
                *c = (struct decide_context) { .uuid = uuid, .updating = true, .incoming = true };
                return c;
        }
}

static void decide_one(struct memo *m, const char *name, const char *xml, size_t host, size_t pol) {
        struct proto_request req = {
                .type = PROTO_REQUEST_HOOK,
                .argv = { (char *) name, (char *) "prepare", (char *) "begin", (char *) "-" },
                .xml = (char *) xml,
                .xml_len = strlen(xml),
        };
        uint64_t hg = streq_ptr(drop, "host") ? 0 : 1 + host, pg = streq_ptr(drop, "policy") ? 0 : 1 + pol;

        char uuid[37];
        bool has_uuid = decide_peek_uuid(xml, strlen(xml), uuid) == 0;
        struct decide_context c;
        unsigned which = pick(5);
        struct decision d = {0};
        decide_hook(&req, hosts[host].h, policies[pol].p, NULL, context(which, has_uuid ? uuid : NULL, &c), &d);
        count.decisions++;
        _cleanup_free_ char *full = answer(&d);

        struct kept *k = memo_get(m, &req, hg, pg);
        if (k) {
                count.hits++;
                if (!streq(k->xml, xml))
                        count.hits_other_bytes++;
                if (k->ctx != which)
                        count.hits_other_ctx++;
                if (!streq(k->answer, full)) {
                        if (count.wrong++ == 0)
                                printf("# %s: the memo's answer is not the full decision's\n--- kept (for the request "
                                       "below)\n%s--- full\n%s--- kept for\n%.400s\n--- request\n%.400s\n", name,
                                       k->answer, full, k->xml, xml);
                        if (!drop)
                                fail_msg("%s: the memo's answer is not the full decision's", name);
                }
        } else if (memo_keeps(&d)) {
                count.kept++;
                k = xcalloc(1, sizeof(*k));
                *k = (struct kept) { .answer = TAKE_PTR(full), .xml = xstrdup(xml), .ctx = which };
                assert_true(memo_put(m, &req, hg, pg, k));
        }
        decision_done(&d);
}

/* The policy a case is planned with, as a policy file's text. */
static char *case_policy(const char *dir, const char *args) {
        const char *pf = args ? strstr(args, "--policy-file ") : NULL;
        const char *pm = args ? strstr(args, "--policy ") : NULL;
        if (pf) {
                _cleanup_free_ char *pp = xasprintf("%s/policy.json", dir);
                return read_text(pp);
        }
        if (pm)
                return xasprintf("{\"default\": {\"policy\": \"%.*s\"}}", (int) strcspn(pm + 9, " \n"), pm + 9);
        return xstrdup("{}");
}

static void run_case(struct memo *m, const char *name, const char *dir) {
        _cleanup_free_ char *inp = xasprintf("%s/input.xml", dir), *hostp = xasprintf("%s/host", dir),
                            *argsp = xasprintf("%s/args", dir);
        _cleanup_free_ char *input = read_text(inp), *hostname = read_text(hostp), *args = read_text(argsp);
        if (!input || !hostname)
                return;
        hostname[strcspn(hostname, "\n")] = 0;
        _cleanup_free_ char *ptext = case_policy(dir, args);
        size_t pol = ptext ? policy_index(ptext) : SIZE_MAX;
        if (pol == SIZE_MAX)
                return;         /* a bad-policy case */
        size_t host = host_index(hostname);
        /* The other host and the other policy: another mode. */
        size_t other_host = host_index(streq(hostname, "two-socket") ? "sample-4n" : "two-socket");
        struct policy_settings s;
        policy_resolve(policies[pol].p, &(struct policy_subject) {0}, &s, NULL);
        _cleanup_free_ char *otext = xasprintf("{\"default\": {\"policy\": \"%s\"}}",
                                               s.mode == POLICY_REQUIRE ? "preferred" : "require");
        size_t other_pol = policy_index(otext);
        assert_true(other_pol != SIZE_MAX);

        /* What comes back at the prepare hook: the plan (or the input,
         * when nothing was planned). */
        struct engine_result *res = NULL;
        _cleanup_free_ char *err = NULL;
        _cleanup_free_ char *planned = NULL;
        if (engine_plan(input, strlen(input), hosts[host].h, policies[pol].p, NULL, &res, &err) >= 0 && res->xml)
                planned = xstrdup(res->xml);
        else
                planned = xstrdup(input);
        engine_result_free(res);

        count.cases++;
        for (unsigned pass = 0; pass < 2; pass++)
                for (enum edit e = 0; e < _EDIT_MAX; e++) {
                        _cleanup_free_ char *xml = apply_edit(planned, e);
                        if (!xml)
                                continue;
                        if (pass == 0)
                                count.edits[e]++;
                        size_t hs[] = { host, other_host }, ps[] = { pol, other_pol };
                        for (size_t i = 0; i < 2; i++)
                                for (size_t j = 0; j < 2; j++)
                                        decide_one(m, name, xml, hs[i], ps[j]);
                }
}

static void test_memo_answers(void **state) {
        (void) state;
        assert_non_null(mkdtemp(scratch));
        size_t n;
        _cleanup_free_ char **names = dir_names(GOLDEN_DIR, &n);

        struct memo m;
        memo_init(&m, kept_free);
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *d = xasprintf("%s/%s", GOLDEN_DIR, names[i]);
                struct stat st;
                if (stat(d, &st) == 0 && S_ISDIR(st.st_mode))
                        run_case(&m, names[i], d);
                free(names[i]);
        }
        memo_done(&m);

        printf("# golden cases %u, decisions %u, answers kept %u, memo answers %u (for other bytes: root id %u; "
               "under another decide_context %u), %u not equal to the full decision\n",
               count.cases, count.decisions, count.kept, count.hits, count.hits_other_bytes, count.hits_other_ctx,
               count.wrong);
        for (int e = 0; e < _EDIT_MAX; e++)
                printf("#   edit '%s': %u cases\n", edit_names[e], count.edits[e]);
        if (drop) {
                /* The property must catch the memo that compares too
                 * little. */
                printf("# --drop %s: the property fails %u times\n", drop, count.wrong);
                assert_true(count.wrong > 0);
        } else
                assert_int_equal(count.wrong, 0);
        /* The property must have been exercised. */
        assert_true(count.cases > 100);
        assert_true(count.kept > 100);
        assert_true(count.hits > 100);
        assert_true(count.hits_other_bytes > 10);
        assert_true(count.hits_other_ctx > 10);
        for (int e = 0; e < _EDIT_MAX; e++)
                assert_true(count.edits[e] > 5);

        for (size_t i = 0; i < n_hosts; i++) {
                hostmap_free(hosts[i].h);
                free(hosts[i].name);
        }
        for (size_t i = 0; i < n_policies; i++) {
                policy_free(policies[i].p);
                free(policies[i].text);
        }
        _cleanup_free_ char *rm = xasprintf("rm -rf '%s'", scratch);
        assert_int_equal(system(rm), 0);
}

static struct proto_request request(const char *name, const char *xml) {
        return (struct proto_request) { .type = PROTO_REQUEST_HOOK,
                                        .argv = { (char *) name, (char *) "prepare", (char *) "begin", (char *) "-" },
                                        .xml = (char *) xml, .xml_len = xml ? strlen(xml) : 0 };
}

/* What the memo takes for the same request: the root element's id digits
 * of the same length, nothing else; and its bounds. */
static void test_memo_match_and_bounds(void **state) {
        (void) state;
        const char *xmls[] = {
                "<domain type='kvm' id='3'><name>a</name></domain>",
                "<domain type='kvm' id='4'><name>a</name></domain>",
                "<domain type='kvm' id='14'><name>a</name></domain>",
                "<domain type='kvm' id='x'><name>a</name></domain>",
                "<domain type='kvm' id='3'><name>b</name></domain>",
                "<domain type='kvm'><name>a</name><!-- id='3' --></domain>",
                "<domain type='kvm'><name>a</name><!-- id='4' --></domain>",
                "<domain type='kvm' id='3' id='4'><name>a</name></domain>",
                "<domain type='kvm' id='3' id='5'><name>a</name></domain>",
                NULL,
        };
        struct memo m;
        memo_init(&m, free);
        struct proto_request r0 = request("a", xmls[0]);
        assert_true(memo_put(&m, &r0, 1, 1, xstrdup("kept")));
        for (size_t i = 0; i < ELEMENTSOF(xmls); i++) {
                struct proto_request r = request("a", xmls[i]);
                char *v = memo_get(&m, &r, 1, 1);
                if (i <= 1)
                        assert_string_equal(v, "kept");
                else
                        assert_null(v);
        }
        assert_null(memo_get(&m, &r0, 2, 1));
        assert_null(memo_get(&m, &r0, 1, 2));
        struct proto_request rb = request("b", xmls[0]);
        assert_null(memo_get(&m, &rb, 1, 1));
        rb = r0;
        rb.argv[1] = (char *) "migrate";
        assert_null(memo_get(&m, &rb, 1, 1));
        /* Only the first id: the second's digits count. */
        struct proto_request r7 = request("a", xmls[7]), r8 = request("a", xmls[8]);
        assert_true(memo_put(&m, &r7, 1, 1, xstrdup("two ids")));
        assert_null(memo_get(&m, &r8, 1, 1));
        /* The same request again: replaced. */
        assert_true(memo_put(&m, &r0, 1, 1, xstrdup("again")));
        assert_string_equal(memo_get(&m, &r0, 1, 1), "again");
        assert_int_equal(m.n, 2);
        memo_done(&m);

        /* At most MEMO_CAPACITY entries, the oldest out first. */
        memo_init(&m, free);
        for (unsigned i = 0; i < MEMO_CAPACITY + 10; i++) {
                _cleanup_free_ char *name = xasprintf("d%u", i);
                struct proto_request r = request(name, xmls[0]);
                assert_true(memo_put(&m, &r, 1, 1, xasprintf("%u", i)));
        }
        assert_int_equal(m.n, MEMO_CAPACITY);
        for (unsigned i = 0; i < MEMO_CAPACITY + 10; i++) {
                _cleanup_free_ char *name = xasprintf("d%u", i), *want = xasprintf("%u", i);
                struct proto_request r = request(name, xmls[0]);
                char *v = memo_get(&m, &r, 1, 1);
                if (i < 10)
                        assert_null(v);
                else
                        assert_string_equal(v, want);
        }
        memo_done(&m);

        /* At most MEMO_BYTES_MAX bytes. */
        memo_init(&m, free);
        size_t big = MEMO_BYTES_MAX / 3;
        _cleanup_free_ char *doc = xmalloc(big + 1);
        memset(doc, ' ', big);
        doc[big] = 0;
        for (unsigned i = 0; i < 4; i++) {
                _cleanup_free_ char *name = xasprintf("big%u", i);
                struct proto_request r = request(name, doc);
                assert_true(memo_put(&m, &r, 1, 1, xstrdup(name)));
                assert_true(m.bytes <= MEMO_BYTES_MAX);
        }
        assert_int_equal(m.n, 2);
        _cleanup_free_ char *huge = xmalloc(MEMO_BYTES_MAX + 1);
        memset(huge, ' ', MEMO_BYTES_MAX);
        huge[MEMO_BYTES_MAX] = 0;
        struct proto_request rh = request("huge", huge);
        assert_false(memo_put(&m, &rh, 1, 1, xstrdup("huge")));
        assert_null(memo_get(&m, &rh, 1, 1));
        assert_int_equal(m.n, 2);
        memo_done(&m);
}

/* ---- memo_same_hostmap(), memo_same_policy() ------------------------------------------ */

/* The fixture host name as a tree under dir, loaded. */
static struct hostmap *load_host(const char *dir, const char *name) {
        _cleanup_free_ char *root = xasprintf("%s/%s", dir, name);
        struct stat st;
        if (stat(root, &st) < 0) {
                _cleanup_free_ char *cmd = xasprintf("python3 '%s' '%s/hosts/%s.json' '%s'", MKFAKESYSFS, FIXTURE_DIR,
                                                     name, root);
                if (system(cmd) != 0)
                        fail_msg("command failed: %s", cmd);
        }
        struct hostmap *h = NULL;
        _cleanup_free_ char *err = NULL;
        if (hostmap_load_path(root, &h, &err) < 0)
                fail_msg("host %s: %s", root, err);
        return h;
}

static void set_str(char **s, const char *v) {
        free(*s);
        *s = v ? xstrdup(v) : NULL;
}

/* Change one thing, number k, of h's content: false when there is no
 * number k.  d is a device with a driver, a host bridge and a bridge
 * above it, v a VF. */
static bool change_host(struct hostmap *h, unsigned k, size_t d, size_t v) {
        struct hostmap_device *x = &h->devices[d];
        switch (k) {
        case 0: x->addr.func ^= 1; return true;
        case 1: x->name[0] = 'x'; return true;
        case 2: x->class ^= 1; return true;
        case 3: x->vendor ^= 1; return true;
        case 4: x->device ^= 1; return true;
        case 5: x->sysfs_node = 3 - x->sysfs_node; return true;
        case 6: x->node = 3 - x->node; return true;
        case 7: set_str(&x->driver, "vfio-pci-other"); return true;
        case 8: set_str(&x->driver, NULL); return true;
        case 9: x->iommu_group++; return true;
        case 10: h->devices[v].physfn.func ^= 1; return true;
        case 11: h->devices[v].has_physfn = false; return true;
        case 12: x->n_vfs++; return true;
        case 13: x->bars[0].size += 4096; return true;
        case 14: x->bars[0].prefetchable = !x->bars[0].prefetchable; return true;
        case 15: x->bars[5].type = x->bars[5].type == HOSTMAP_BAR_IO ? HOSTMAP_BAR_MEM32 : HOSTMAP_BAR_IO; return true;
        case 16: set_str(&x->host_bridge, "pci0000:ff"); return true;
        case 17: x->upstream[0].bus ^= 1; return true;
        case 18: x->n_upstream--; return true;
        case 19: strcpy(x->link_speed, "2.5 GT/s PCIe"); return true;
        case 20: x->link_width ^= 1; return true;
        case 21: bitmap_set(&h->nodes[0].cpus, 4000); return true;
        case 22: h->nodes[1].socket ^= 1; return true;
        case 23: h->nodes[1].id = 7; return true;
        case 24: h->distance[1] = 99; return true;
        case 25: h->single_node = !h->single_node; return true;
        case 26: set_str(&h->mdevs[0].type, "nvidia-999"); return true;
        case 27: h->mdevs[0].parent.func ^= 1; return true;
        case 28: h->mdevs[0].uuid[0] = h->mdevs[0].uuid[0] == 'a' ? 'b' : 'a'; return true;
        case 29: h->mdevs[0].node = 3 - h->mdevs[0].node; return true;
        case 30: hostmap_warn(h, "a warning"); return true;
        case 31: h->n_warnings_dropped++; return true;
        case 32: strcpy(h->cpu_id.arch, "arm64"); return true;
        case 33: strcpy(h->cpu_id.vendor, "AuthenticAMD"); return true;
        case 34: h->cpu_id.family = 25; return true;
        case 35: h->cpu_id.model = 17; return true;
        case 36: h->n_devices--; return true;
        case 37: h->n_mdevs--; return true;
        }
        return false;
}

static void test_memo_same_hostmap(void **state) {
        char dir[] = "/tmp/test-memo-same-XXXXXX";
        assert_non_null(mkdtemp(dir));
        /* The same tree read twice, and the same host spelt by another
         * fixture file are the same; other hosts are not. */
        _cleanup_hostmap_ struct hostmap *a = load_host(dir, "sample-4n");
        _cleanup_hostmap_ struct hostmap *b = load_host(dir, "sample-4n");
        assert_true(a != b && memo_same_hostmap(a, b) && memo_same_hostmap(b, a));
        _cleanup_hostmap_ struct hostmap *fa = load_host(dir, "fleet-a");
        _cleanup_hostmap_ struct hostmap *fb = load_host(dir, "fleet-b");
        assert_false(memo_same_hostmap(a, fa));
        assert_false(memo_same_hostmap(fa, fb));

        /* A device with a driver, a host bridge, a bridge above it and a
         * VF; the mdevs' parents too. */
        size_t d = SIZE_MAX, v = SIZE_MAX;
        for (size_t i = 0; i < a->n_devices; i++) {
                const struct hostmap_device *x = &a->devices[i];
                if (d == SIZE_MAX && x->driver && x->host_bridge && x->n_upstream > 0 && x->node >= 0)
                        d = i;
                if (v == SIZE_MAX && x->has_physfn)
                        v = i;
        }
        assert_true(d != SIZE_MAX && v != SIZE_MAX && a->n_mdevs > 0 && a->n_nodes == 4);
        /* Each change of the content, alone, makes another host. */
        unsigned k = 0;
        for (;; k++) {
                _cleanup_hostmap_ struct hostmap *c = load_host(dir, "sample-4n");
                size_t n_devices = c->n_devices, n_mdevs = c->n_mdevs, n_upstream = c->devices[d].n_upstream;
                assert_true(memo_same_hostmap(a, c));
                if (!change_host(c, k, d, v))
                        break;
                if (memo_same_hostmap(a, c) || memo_same_hostmap(c, a))
                        fail_msg("change %u of the host map is not seen", k);
                /* What hostmap_free() reads, as it was. */
                c->n_devices = n_devices;
                c->n_mdevs = n_mdevs;
                c->devices[d].n_upstream = n_upstream;
        }
        assert_int_equal(k, 38);
        _cleanup_free_ char *rm = xasprintf("rm -rf '%s'", dir);
        assert_int_equal(system(rm), 0);
}

static void test_memo_same_policy(void **state) {
        static const char base[] =
                "{\"default\": {\"policy\": \"require\"}, \"rules\": [{\"match\": {\"name\": \"gpu-*\"}, \"policy\": "
                "\"preferred\"}, {\"match\": {\"tag\": \"t\"}, \"policy\": \"socket\"}], \"vfio_variant_drivers\": "
                "[\"mlx5_vfio_pci\"], \"passthrough_pool\": [\"0000:3b:00.0\", \"class:0x03\", \"10de:2330\"]}";
        /* The same settings, written otherwise (defaults spelt out,
         * another key order, other white space). */
        static const char same[] =
                "{\"passthrough_pool\": [\"0000:3b:00.0\", \"class:0x03\", \"10de:2330\"],\n"
                "  \"vfio_variant_drivers\": [\"mlx5_vfio_pci\"],\n"
                "  \"default\": {\"topology\": \"paths\", \"policy\": \"require\", \"first_start\": \"restart\"},\n"
                "  \"rules\": [{\"match\": {\"name\": \"gpu-*\"}, \"policy\": \"preferred\"},\n"
                "            {\"match\": {\"tag\": \"t\"}, \"policy\": \"socket\"}]}\n";
        static const char *const other[] = {
                "{\"default\": {\"policy\": \"preferred\"}, \"rules\": [{\"match\": {\"name\": \"gpu-*\"}, \"policy\": "
                "\"preferred\"}, {\"match\": {\"tag\": \"t\"}, \"policy\": \"socket\"}], \"vfio_variant_drivers\": "
                "[\"mlx5_vfio_pci\"], \"passthrough_pool\": [\"0000:3b:00.0\", \"class:0x03\", \"10de:2330\"]}",
                /* a rule's pattern, setting, or the rules' order */
                "{\"default\": {\"policy\": \"require\"}, \"rules\": [{\"match\": {\"name\": \"gpu-?\"}, \"policy\": "
                "\"preferred\"}, {\"match\": {\"tag\": \"t\"}, \"policy\": \"socket\"}], \"vfio_variant_drivers\": "
                "[\"mlx5_vfio_pci\"], \"passthrough_pool\": [\"0000:3b:00.0\", \"class:0x03\", \"10de:2330\"]}",
                "{\"default\": {\"policy\": \"require\"}, \"rules\": [{\"match\": {\"name\": \"gpu-*\"}, \"policy\": "
                "\"preferred\", \"mmio64\": \"off\"}, {\"match\": {\"tag\": \"t\"}, \"policy\": \"socket\"}], "
                "\"vfio_variant_drivers\": [\"mlx5_vfio_pci\"], \"passthrough_pool\": [\"0000:3b:00.0\", "
                "\"class:0x03\", \"10de:2330\"]}",
                "{\"default\": {\"policy\": \"require\"}, \"rules\": [{\"match\": {\"tag\": \"t\"}, \"policy\": "
                "\"socket\"}, {\"match\": {\"name\": \"gpu-*\"}, \"policy\": \"preferred\"}], \"vfio_variant_drivers\": "
                "[\"mlx5_vfio_pci\"], \"passthrough_pool\": [\"0000:3b:00.0\", \"class:0x03\", \"10de:2330\"]}",
                /* a variant driver, a pool entry */
                "{\"default\": {\"policy\": \"require\"}, \"rules\": [{\"match\": {\"name\": \"gpu-*\"}, \"policy\": "
                "\"preferred\"}, {\"match\": {\"tag\": \"t\"}, \"policy\": \"socket\"}], \"vfio_variant_drivers\": "
                "[\"mlx5_vfio_pcj\"], \"passthrough_pool\": [\"0000:3b:00.0\", \"class:0x03\", \"10de:2330\"]}",
                "{\"default\": {\"policy\": \"require\"}, \"rules\": [{\"match\": {\"name\": \"gpu-*\"}, \"policy\": "
                "\"preferred\"}, {\"match\": {\"tag\": \"t\"}, \"policy\": \"socket\"}], \"vfio_variant_drivers\": "
                "[\"mlx5_vfio_pci\"], \"passthrough_pool\": [\"0000:3b:00.0\", \"class:0x0302\", \"10de:2330\"]}",
                "{\"default\": {\"policy\": \"require\"}, \"rules\": [{\"match\": {\"name\": \"gpu-*\"}, \"policy\": "
                "\"preferred\"}, {\"match\": {\"tag\": \"t\"}, \"policy\": \"socket\"}], \"vfio_variant_drivers\": "
                "[\"mlx5_vfio_pci\"], \"passthrough_pool\": [\"0000:3b:00.0\", \"class:0x03\"]}",
        };
        _cleanup_free_ char *err = NULL;
        _cleanup_policy_ struct policy *a = NULL, *b = NULL;
        if (policy_parse(base, strlen(base), "base", &a, &err) < 0 || policy_parse(same, strlen(same), "same", &b, &err) < 0)
                fail_msg("%s", err);
        assert_true(memo_same_policy(a, b) && memo_same_policy(b, a));
        for (size_t i = 0; i < ELEMENTSOF(other); i++) {
                _cleanup_policy_ struct policy *c = NULL;
                if (policy_parse(other[i], strlen(other[i]), "other", &c, &err) < 0)
                        fail_msg("other[%zu]: %s", i, err);
                if (memo_same_policy(a, c) || memo_same_policy(c, a))
                        fail_msg("other[%zu] is taken for the same policy", i);
        }
        /* Each setting, the hook's and the restart window too. */
        for (unsigned k = 0;; k++) {
                _cleanup_policy_ struct policy *c = NULL;
                if (policy_parse(base, strlen(base), "base", &c, &err) < 0)
                        fail_msg("%s", err);
                struct policy_settings *s = k % 2 ? &c->rules[1].settings : &c->def;
                switch (k / 2) {
                case 0: s->topology = POLICY_TOPOLOGY_CELLS; break;
                case 1: s->mirror_switches = !s->mirror_switches; break;
                case 2: s->mirror_distances = !s->mirror_distances; break;
                case 3: s->mmio64_auto = !s->mmio64_auto; break;
                case 4: s->io_port_check = !s->io_port_check; break;
                case 5: s->managed_auto = !s->managed_auto; break;
                case 6: s->nccl_topology = !s->nccl_topology; break;
                case 7: s->migration_same_topology = !s->migration_same_topology; break;
                case 8: s->gpudirect_clique_auto = !s->gpudirect_clique_auto; break;
                case 9: s->first_start = POLICY_FIRST_START_ALLOW; break;
                case 10: s->transient_restart = !s->transient_restart; break;
                case 11: s->mode = POLICY_OFF; break;
                case 12: c->allow_domain_policy = !c->allow_domain_policy; break;
                case 13: c->hook_timeout_ms++; break;
                case 14: c->hook_on_unreachable = !c->hook_on_unreachable; break;
                case 15: c->restart_window_ms++; break;
                case 16: set_str(&c->rules[0].uuid, "6a1b7c32-9f0e-5d48-8b5e-2f3c4d5e6f70"); break;
                case 17: set_str(&c->rules[1].tag, "u"); break;
                case 18: c->pool[1].class_mask = 0xffff00; break;
                case 19: c->pool[2].vendor++; break;
                case 20: c->pool[2].device++; break;
                case 21: c->pool[0].addr.slot++; break;
                case 22: c->pool[0].kind = POLICY_POOL_VENDOR_DEVICE; break;
                case 23: set_str(&c->pool[0].text, "0000:3b:00.1"); break;
                default: return;
                }
                if (memo_same_policy(a, c) || memo_same_policy(c, a))
                        fail_msg("change %u of the policy is not seen", k);
        }
}

int main(int argc, char **argv) {
        for (int i = 1; i < argc; i++) {
                if (streq(argv[i], "--drop") && i + 1 < argc)
                        drop = argv[++i];
                else {
                        fprintf(stderr, "usage: %s [--drop policy|host]\n", argv[0]);
                        return 2;
                }
        }
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_memo_match_and_bounds),
                cmocka_unit_test(test_memo_answers),
                cmocka_unit_test(test_memo_same_hostmap),
                cmocka_unit_test(test_memo_same_policy),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

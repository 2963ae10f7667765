/* Tests for the hook decisions (decide.h): every libvirt hook phase under
 * every policy, on the fixture VM of fake-vm.h, unplanned and planned, as
 * the daemon suite's phase matrix checks them through the real hook. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>

#include "decide.h"
#include "engine.h"
#include "util.h"

#include "fake-vm-group.h"

static void decide(const struct policy *pol, const char *phase, const char *sub, const char *xml, bool updating,
                   struct decision *ret) {
        const struct decide_context ctx = { .updating = updating };
        struct proto_request req = {
                .type = PROTO_REQUEST_HOOK,
                .argv = { (char *) FAKE_VM_NAME, (char *) phase, (char *) sub, (char *) "-" },
                .xml = (char *) xml,
                .xml_len = xml ? strlen(xml) : 0,
        };
        decide_hook(&req, host, pol, NULL, &ctx, ret);
}

static bool has(const char *s, const char *sub) {
        return s && strstr(s, sub);
}

static bool strict(const char *mode) {
        return streq(mode, "require") || streq(mode, "socket");
}

/* prepare begin of the unplanned domain: require and socket refuse,
 * preferred and legacy warn, off allows; the mode is resolved either way. */
static void test_prepare_unplanned(void **state) {
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(policies); i++) {
                _cleanup_policy_ struct policy *pol = fake_vm_policy(policies[i]);
                struct decision d;
                decide(pol, "prepare", "begin", fake_vm_xml, false, &d);
                _cleanup_free_ char *in_policy = xasprintf("(policy %s)", policies[i]);
                assert_true(d.has_mode);
                assert_string_equal(policy_mode_to_string(d.mode), policies[i]);
                assert_null(d.out);
                assert_string_equal(d.uuid, FAKE_VM_UUID);
                assert_non_null(d.result);
                if (strict(policies[i])) {
                        assert_int_equal(d.verdict, DECIDE_REFUSE);
                        assert_int_equal(d.exit_code, 1);
                        assert_true(has(d.message, "pcinuma: refusing to start domain " FAKE_VM_NAME));
                        assert_true(has(d.message, "does not match the NUMA plan"));
                        assert_true(has(d.message, in_policy));
                        assert_true(has(d.message, "define it again; then start the domain again"));
                } else if (streq(policies[i], "off")) {
                        assert_int_equal(d.verdict, DECIDE_ALLOW);
                        assert_int_equal(d.exit_code, 0);
                        assert_null(d.message);
                } else {
                        assert_int_equal(d.verdict, DECIDE_WARN);
                        assert_int_equal(d.exit_code, 0);
                        assert_true(has(d.message, "pcinuma: warning: domain " FAKE_VM_NAME " starts without its NUMA-aware PCI topology"));
                        assert_true(has(d.message, in_policy));
                }
                decision_done(&d);
        }
}

/* prepare begin with what pcinumad knows of the domain (ctx). */
static void decide_ctx(const struct policy *pol, const char *xml, const struct decide_context *ctx, struct decision *ret) {
        struct proto_request req = {
                .type = PROTO_REQUEST_HOOK,
                .argv = { (char *) FAKE_VM_NAME, (char *) "prepare", (char *) "begin", (char *) "-" },
                .xml = (char *) xml,
                .xml_len = strlen(xml),
        };
        decide_hook(&req, host, pol, NULL, ctx, ret);
}

/* A policy of 'mode' with the restart switches set. */
static struct policy *restart_policy(const char *mode, enum policy_first_start fs, bool transient_restart) {
        struct policy *p = fake_vm_policy(mode);
        p->def.first_start = fs;
        p->def.transient_restart = transient_restart;
        return p;
}

static const struct decide_context persistent_ctx = {
        .uuid = FAKE_VM_UUID, .updating = true, .watcher = true, .persistence = DECIDE_PERSISTENT,
};

/* A persistent domain starting unplanned, with a connected watcher and
 * first_start: restart (the default): allowed, to be restarted, under
 * every policy that plans; the message says it starts once without the
 * plan and is restarted as soon as it is up.  A planned one is allowed. */
static void test_prepare_restart(void **state) {
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(policies); i++) {
                _cleanup_policy_ struct policy *pol = fake_vm_policy(policies[i]);
                assert_int_equal(pol->def.first_start, POLICY_FIRST_START_RESTART);
                struct decision d;
                decide_ctx(pol, fake_vm_xml, &persistent_ctx, &d);
                if (streq(policies[i], "off")) {
                        assert_int_equal(d.verdict, DECIDE_ALLOW);
                        decision_done(&d);
                        continue;
                }
                _cleanup_free_ char *head = xasprintf("pcinuma: domain " FAKE_VM_NAME " starts once without its NUMA-aware "
                                                      "PCI topology (policy %s): ", policies[i]);
                assert_int_equal(d.verdict, DECIDE_RESTART);
                assert_string_equal(decide_verdict_to_string(d.verdict), "restart");
                assert_int_equal(d.exit_code, 0);
                assert_false(d.restart_transient);
                assert_string_equal(d.uuid, FAKE_VM_UUID);
                assert_true(has(d.message, head));
                assert_true(has(d.message, "pcinuma: as soon as it is up, pcinuma restarts it into the plan "
                                           "(first_start: restart); its persistent definition is being updated"));
                assert_false(has(d.message, "refusing"));
                decision_done(&d);

                _cleanup_free_ char *planned = fake_vm_planned(host, policies[i]);
                decide_ctx(pol, planned, &persistent_ctx, &d);
                assert_int_equal(d.verdict, DECIDE_ALLOW);
                assert_null(d.message);
                decision_done(&d);
        }
}

/* Transient domains: "leave" (the default) gives them what they got
 * before (refused under require and socket, a warning otherwise), telling
 * them to create the domain from planned XML or to set transient:
 * restart; "restart" restarts them. */
static void test_prepare_transient(void **state) {
        (void) state;
        const struct decide_context ctx = { .uuid = FAKE_VM_UUID, .updating = true, .watcher = true,
                                            .persistence = DECIDE_TRANSIENT };
        for (size_t i = 0; i < ELEMENTSOF(policies); i++) {
                if (streq(policies[i], "off"))
                        continue;
                _cleanup_policy_ struct policy *leave = fake_vm_policy(policies[i]);
                assert_false(leave->def.transient_restart);
                struct decision d;
                decide_ctx(leave, fake_vm_xml, &ctx, &d);
                assert_int_equal(d.verdict, strict(policies[i]) ? DECIDE_REFUSE : DECIDE_WARN);
                assert_true(has(d.message, strict(policies[i]) ? "a transient domain must be created from planned XML "
                                                                 "('pcinumactl plan vm.xml | virsh create /dev/stdin'"
                                                               : "create a transient domain from planned XML"));
                assert_true(has(d.message, "\"transient\": \"restart\""));
                assert_false(has(d.message, "persistent definition"));
                if (strict(policies[i])) {
                        /* refused: it names the plan-first ways and why
                         * virt-install needs the switch */
                        assert_false(d.restart_if_persistent);
                        assert_true(has(d.message, "'virsh dumpxml vm | pcinumactl plan -'"));
                        assert_true(has(d.message, "'pcinumactl define vm.xml'"));
                        assert_true(has(d.message, "which virt-install and virt-manager need under this policy"));
                } else {
                        /* let through: restarted if it is persistent once
                         * up (virt-install defines it while it starts) */
                        assert_true(d.restart_if_persistent);
                        assert_true(has(d.message, "pcinuma: if it is defined by the time it is up"));
                }
                decision_done(&d);

                /* first_start: allow does not restart a persistent
                 * domain, nor a transient one that becomes one. */
                _cleanup_policy_ struct policy *allow = restart_policy(policies[i], POLICY_FIRST_START_ALLOW, false);
                decide_ctx(allow, fake_vm_xml, &ctx, &d);
                assert_int_equal(d.verdict, DECIDE_WARN);
                assert_false(d.restart_if_persistent);
                decision_done(&d);

                _cleanup_policy_ struct policy *restart = restart_policy(policies[i], POLICY_FIRST_START_RESTART, true);
                decide_ctx(restart, fake_vm_xml, &ctx, &d);
                assert_int_equal(d.verdict, DECIDE_RESTART);
                assert_int_equal(d.exit_code, 0);
                assert_true(d.restart_transient);
                assert_false(d.restart_if_persistent);
                assert_true(has(d.message, "restarts it into the plan (transient: restart)."));
                assert_false(has(d.message, "persistent definition"));
                decision_done(&d);
        }
}

/* first_start: refuse keeps the refusal (require, socket; a warning
 * under preferred and legacy), allow a warning everywhere; both say the
 * persistent definition is being updated. */
static void test_prepare_first_start_refuse_allow(void **state) {
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(policies); i++) {
                if (streq(policies[i], "off"))
                        continue;
                _cleanup_policy_ struct policy *refuse = restart_policy(policies[i], POLICY_FIRST_START_REFUSE, true);
                struct decision d;
                decide_ctx(refuse, fake_vm_xml, &persistent_ctx, &d);
                if (strict(policies[i])) {
                        assert_int_equal(d.verdict, DECIDE_REFUSE);
                        assert_int_equal(d.exit_code, 1);
                        assert_true(has(d.message, "pcinuma: refusing to start domain " FAKE_VM_NAME ": its PCI topology does "
                                                   "not match the NUMA plan"));
                        assert_true(has(d.message, "pcinuma: the persistent definition is being updated; then start the "
                                                   "domain again.\n"));
                } else {
                        assert_int_equal(d.verdict, DECIDE_WARN);
                        assert_true(has(d.message, "the persistent definition is being updated, for the next start"));
                }
                assert_false(has(d.message, "restart"));
                decision_done(&d);

                _cleanup_policy_ struct policy *allow = restart_policy(policies[i], POLICY_FIRST_START_ALLOW, true);
                decide_ctx(allow, fake_vm_xml, &persistent_ctx, &d);
                assert_int_equal(d.verdict, DECIDE_WARN);
                assert_int_equal(d.exit_code, 0);
                assert_true(has(d.message, "pcinuma: warning: domain " FAKE_VM_NAME " starts without its NUMA-aware PCI topology"));
                assert_true(has(d.message, "the persistent definition is being updated, for the next start"));
                decision_done(&d);
        }
}

/* No restart without a connected watcher, for an incoming migration or a
 * restore, nor for a context about another domain: the verdict of
 * first_start: refuse, with a line saying why it is not restarted. */
static void test_prepare_no_restart(void **state) {
        (void) state;
        _cleanup_policy_ struct policy *pol = fake_vm_policy("require");
        const struct {
                struct decide_context ctx;
                const char *next, *why;
        } cases[] = {
                { { .uuid = FAKE_VM_UUID, .updating = true }, "the persistent definition is being updated; then start the "
                  "domain again (a transient domain must be created from planned XML",
                  "pcinuma: not restarted into the plan: pcinuma's libvirt watcher is not connected to libvirt" },
                { { .uuid = FAKE_VM_UUID }, "plan the definition with 'pcinumactl plan' and define it again; then start the domain again",
                  "pcinuma: not restarted into the plan: pcinumad runs without a libvirt watcher (--libvirt-uri none)" },
                { { .uuid = FAKE_VM_UUID, .updating = true, .watcher = true, .persistence = DECIDE_PERSISTENT, .incoming = true },
                  "the persistent definition is being updated; then start the domain again.",
                  "pcinuma: not restarted into the plan: it comes in by migration or from a saved state" },
                { { .uuid = "0b7a5b3e-8d4c-4a3f-9c55-1d7b2f1e6a03", .updating = true, .watcher = true,
                    .persistence = DECIDE_PERSISTENT },
                  "the persistent definition is being updated; then start",
                  "pcinuma: not restarted into the plan: pcinuma's libvirt watcher is not connected" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                struct decision d;
                decide_ctx(pol, fake_vm_xml, &cases[i].ctx, &d);
                assert_int_equal(d.verdict, DECIDE_REFUSE);
                assert_true(has(d.message, "does not match the NUMA plan (policy require)"));
                if (!has(d.message, cases[i].next) || !has(d.message, cases[i].why))
                        fail_msg("case %zu: %s", i, d.message);
                decision_done(&d);
        }
        /* The context's UUID is compared without regard to case. */
        const struct decide_context upper = { .uuid = "0B7A5B3E-8D4C-4A3F-9C55-1D7B2F1E6A02", .updating = true,
                                              .watcher = true, .persistence = DECIDE_PERSISTENT };
        struct decision d;
        decide_ctx(pol, fake_vm_xml, &upper, &d);
        assert_int_equal(d.verdict, DECIDE_RESTART);
        decision_done(&d);
}

/* A restart names the files the domain boots from directly (absolute
 * paths), for the watcher to keep; no other verdict does. */
static void test_prepare_boot_files(void **state) {
        (void) state;
        _cleanup_policy_ struct policy *pol = fake_vm_policy("require");
        _cleanup_free_ char *xml = xstrdup(fake_vm_xml);
        char *os = strstr(xml, "  </os>\n");
        assert_non_null(os);
        _cleanup_free_ char *with = xasprintf("%.*s    <kernel>/var/lib/libvirt/boot/virtinst-vmlinuz</kernel>\n"
                                              "    <initrd>/var/lib/libvirt/boot/virtinst-initrd.img</initrd>\n"
                                              "    <cmdline>console=ttyS0</cmdline>\n    <dtb>relative.dtb</dtb>\n%s",
                                              (int) (os - xml), xml, os);
        struct decision d;
        decide_ctx(pol, with, &persistent_ctx, &d);
        assert_int_equal(d.verdict, DECIDE_RESTART);
        assert_int_equal(d.n_boot_files, 2);
        assert_string_equal(d.boot_files[0], "/var/lib/libvirt/boot/virtinst-vmlinuz");
        assert_string_equal(d.boot_files[1], "/var/lib/libvirt/boot/virtinst-initrd.img");
        decision_done(&d);
        decide_ctx(pol, fake_vm_xml, &persistent_ctx, &d);
        assert_int_equal(d.verdict, DECIDE_RESTART);
        assert_int_equal(d.n_boot_files, 0);
        decision_done(&d);
        const struct decide_context none = { .uuid = FAKE_VM_UUID };
        decide_ctx(pol, with, &none, &d);
        assert_int_equal(d.verdict, DECIDE_REFUSE);
        assert_int_equal(d.n_boot_files, 0);
        decision_done(&d);
}

/* pcinuma-watcher's own start of the client's XML, after the plan failed
 * to start: let through with a warning that says so, never restarted. */
static void test_prepare_own_start(void **state) {
        (void) state;
        struct decide_context ctx = persistent_ctx;
        ctx.own_start = true;
        for (size_t i = 0; i < ELEMENTSOF(policies); i++) {
                if (streq(policies[i], "off"))
                        continue;
                _cleanup_policy_ struct policy *pol = restart_policy(policies[i], POLICY_FIRST_START_REFUSE, false);
                struct decision d;
                decide_ctx(pol, fake_vm_xml, &ctx, &d);
                assert_int_equal(d.verdict, DECIDE_WARN);
                assert_int_equal(d.exit_code, 0);
                assert_true(has(d.message, "pcinuma could not start it with its plan, so it starts it as it was started"));
                decision_done(&d);
        }
}

/* decide_peek_uuid(): the first <uuid> element's text, canonical UUIDs
 * only, lower-cased. */
static void test_peek_uuid(void **state) {
        (void) state;
        char u[37];
        assert_int_equal(decide_peek_uuid(fake_vm_xml, strlen(fake_vm_xml), u), 0);
        assert_string_equal(u, FAKE_VM_UUID);
        static const char upper[] = "<domain><name>x</name><uuid>\n  0B7A5B3E-8D4C-4A3F-9C55-1D7B2F1E6A02</uuid></domain>";
        assert_int_equal(decide_peek_uuid(upper, strlen(upper), u), 0);
        assert_string_equal(u, FAKE_VM_UUID);
        static const char *const bad[] = {
                "<domain><name>x</name></domain>",
                "<domain><uuid>0b7a5b3e8d4c4a3f9c551d7b2f1e6a02</uuid></domain>",
                "<domain><uuid>0b7a5b3e-8d4c-4a3f-9c55-1d7b2f1e6a0</uuid></domain>",
                "<domain><uuid>0b7a5b3e-8d4c-4a3f-9c55-1d7b2f1e6aXY</uuid></domain>",
                "<domain><uuid>",
                "",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                assert_int_equal(decide_peek_uuid(bad[i], strlen(bad[i]), u), -ENOENT);
        /* The length bounds the scan: a <uuid> beyond it is not seen. */
        assert_int_equal(decide_peek_uuid(fake_vm_xml, 40, u), -ENOENT);
}

/* xml without the text from 'from' through 'to' (to NULL: 'from' only). */
static char *without(const char *xml, const char *from, const char *to) {
        const char *a = strstr(xml, from), *b = to ? strstr(xml, to) : NULL;
        assert_non_null(a);
        size_t skip = b ? (size_t) (b - a) + strlen(to) : strlen(from);
        return xasprintf("%.*s%s", (int) (a - xml), xml, a + skip);
}

static char *fake_vm_without(const char *from, const char *to) {
        return without(fake_vm_xml, from, to);
}

static size_t count(const char *s, const char *sub) {
        size_t n = 0;
        for (const char *p = s; p && (p = strstr(p, sub)); p += strlen(sub))
                n++;
        return n;
}

/* A domain-wide cause is said once, with its fix, then the devices it
 * concerns, each once (docs/planner.md, "One line per cause"); the first
 * line alone says why (the journal keeps it). */
static void test_prepare_one_line_per_cause(void **state) {
        (void) state;
        /* Unpinned cells: legacy refuses; the cause with its fix once. */
        _cleanup_free_ char *unpinned = fake_vm_without("  <numatune>", "  </numatune>\n");
        _cleanup_policy_ struct policy *legacy = fake_vm_policy("legacy");
        struct decision d;
        decide(legacy, "prepare", "begin", unpinned, false, &d);
        assert_int_equal(d.verdict, DECIDE_REFUSE);
        size_t first = strcspn(d.message, "\n");
        assert_true(first < strlen(d.message));
        assert_true(strncmp(d.message, "pcinuma: refusing to start domain " FAKE_VM_NAME
                            ": 4 of 4 passthrough devices cannot be placed under policy legacy: no guest cell is "
                            "pinned to a host node\n", first + 1) == 0);
        assert_int_equal(count(d.message, "no guest cell is pinned to a host node"), 1);
        assert_int_equal(count(d.message, "fix: pin each cell with <numatune><memnode"), 1);
        assert_int_equal(count(d.message, "(its devices are on host nodes 0-3)"), 1);
        static const char *const devs[] = { "0000:10:00.0", "0000:30:00.0", "0000:50:00.0", "0000:70:00.0" };
        for (size_t i = 0; i < ELEMENTSOF(devs); i++)
                assert_int_equal(count(d.message, devs[i]), 1);
        assert_true(has(d.message, "pcinuma:   device on host node 2: 0000:50:00.0\n"));
        /* Every line is the hook's, and none repeats the cells. */
        assert_int_equal(count(d.message, "\n"), count(d.message, "pcinuma: "));
        assert_false(has(d.message, "guest cells:"));
        decision_done(&d);

        /* Under preferred (the default) the same domain starts, with a
         * warning that says the cause once and every device; the built-in
         * policy does the same (do no harm on install). */
        _cleanup_policy_ struct policy *preferred = fake_vm_policy("preferred");
        _cleanup_policy_ struct policy *builtin = policy_new_default();
        const struct policy *lenient[] = { preferred, builtin };
        for (size_t k = 0; k < ELEMENTSOF(lenient); k++) {
                decide(lenient[k], "prepare", "begin", unpinned, false, &d);
                assert_int_equal(d.verdict, DECIDE_WARN);
                assert_int_equal(d.exit_code, 0);
                assert_true(strncmp(d.message, "pcinuma: warning: domain " FAKE_VM_NAME ": not every passthrough device "
                                    "could be placed (policy preferred):\n", 95) == 0);
                assert_int_equal(count(d.message, "no guest cell is pinned to a host node"), 1);
                for (size_t i = 0; i < ELEMENTSOF(devs); i++)
                        assert_int_equal(count(d.message, devs[i]), 1);
                assert_int_equal(count(d.message, "\n"), count(d.message, "pcinuma: "));
                decision_done(&d);
        }

        /* No <acpi/>: under require a refusal that names it once on its
         * first line, then only the fix; under legacy a warning that does
         * the same. */
        _cleanup_free_ char *no_acpi = fake_vm_without("    <acpi/>\n", NULL);
        _cleanup_policy_ struct policy *require = fake_vm_policy("require");
        decide(require, "prepare", "begin", no_acpi, false, &d);
        assert_int_equal(d.verdict, DECIDE_REFUSE);
        assert_int_equal(count(d.message, "ACPI is off"), 1);
        assert_true(strstr(d.message, "ACPI is off") < d.message + strcspn(d.message, "\n"));
        assert_int_equal(count(d.message, "pcinuma: fix: add <acpi/> to <features>\n"), 1);
        for (size_t i = 0; i < ELEMENTSOF(devs); i++)
                assert_int_equal(count(d.message, devs[i]), 1);
        decision_done(&d);
        /* No cells either: both said on the first line, both fixes
         * given (a device has one cause: it holds every fix). */
        {
                _cleanup_free_ char *nocells = without(no_acpi, "    <numa>", "    </numa>\n");
                _cleanup_free_ char *bare = without(nocells, "  <numatune>", "  </numatune>\n");
                decide(require, "prepare", "begin", bare, false, &d);
                assert_int_equal(d.verdict, DECIDE_REFUSE);
                size_t nl = strcspn(d.message, "\n");
                assert_true(strstr(d.message, "no guest NUMA cells") < d.message + nl);
                assert_true(strstr(d.message, "ACPI is off") < d.message + nl);
                assert_true(has(d.message, "\npcinuma: fix: give it guest NUMA cells (<cpu><numa><cell>), each pinned to "
                                           "a host node (<numatune><memnode>); add <acpi/> to <features>\n"));
                assert_int_equal(count(d.message, "ACPI is off"), 1);
                decision_done(&d);
        }
        decide(legacy, "prepare", "begin", no_acpi, false, &d);
        assert_int_equal(d.verdict, DECIDE_WARN);
        assert_true(strncmp(d.message, "pcinuma: warning: domain " FAKE_VM_NAME ": domain left untouched: ACPI is off", 50) == 0);
        assert_int_equal(count(d.message, "ACPI is off"), 1);
        assert_int_equal(count(d.message, "pcinuma: fix: add <acpi/> to <features>\n"), 1);
        for (size_t i = 0; i < ELEMENTSOF(devs); i++)
                assert_int_equal(count(d.message, devs[i]), 1);
        decision_done(&d);
}

/* With a watcher updating the definition, a refusal says so. */
static void test_prepare_updating(void **state) {
        (void) state;
        _cleanup_policy_ struct policy *pol = fake_vm_policy("require");
        struct decision d;
        decide(pol, "prepare", "begin", fake_vm_xml, true, &d);
        assert_int_equal(d.verdict, DECIDE_REFUSE);
        assert_true(has(d.message, "the persistent definition is being updated"));
        assert_false(has(d.message, "define it again"));
        decision_done(&d);
}

/* prepare begin of the domain planned under the same policy: allowed,
 * silently, under every policy. */
static void test_prepare_planned(void **state) {
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(policies); i++) {
                _cleanup_policy_ struct policy *pol = fake_vm_policy(policies[i]);
                _cleanup_free_ char *planned = fake_vm_planned(host, policies[i]);
                struct decision d;
                decide(pol, "prepare", "begin", planned, false, &d);
                assert_int_equal(d.verdict, DECIDE_ALLOW);
                assert_int_equal(d.exit_code, 0);
                assert_null(d.message);
                assert_null(d.out);
                assert_true(d.has_mode);
                assert_string_equal(policy_mode_to_string(d.mode), policies[i]);
                decision_done(&d);
        }
}

/* prepare begin without XML, or with XML that does not parse: refused. */
static void test_prepare_bad_xml(void **state) {
        (void) state;
        _cleanup_policy_ struct policy *pol = fake_vm_policy("legacy");
        struct decision d;
        decide(pol, "prepare", "begin", NULL, false, &d);
        assert_int_equal(d.verdict, DECIDE_REFUSE);
        assert_true(has(d.message, "libvirt passed no domain XML to the prepare hook"));
        decision_done(&d);
        decide(pol, "prepare", "begin", "<domain", false, &d);
        assert_int_equal(d.verdict, DECIDE_REFUSE);
        assert_int_equal(d.exit_code, 1);
        assert_true(has(d.message, "pcinuma: refusing to start domain " FAKE_VM_NAME ": "));
        decision_done(&d);
}

/* prepare begin of a domain beyond pcinuma's bounds (here: more tags than
 * DOMAIN_XML_TAGS_MAX, refused before parsing): pcinuma cannot plan it,
 * and stops the start only under a policy that refuses what it cannot
 * plan (require, socket); preferred and legacy let it start unchanged with
 * a warning, off silently.  Its policy comes from its name alone (a rule
 * on the name counts).  Before, every policy refused it. */
static void test_prepare_beyond_limits(void **state) {
        (void) state;
        struct strbuf b = {0};
        const char *end = strstr(fake_vm_xml, "</domain>");
        assert_non_null(end);
        strbuf_appendn(&b, fake_vm_xml, (size_t) (end - fake_vm_xml));
        for (unsigned i = 0; i <= DOMAIN_XML_TAGS_MAX; i++)
                strbuf_append(&b, "<!---->");
        strbuf_append(&b, end);
        _cleanup_free_ char *big = strbuf_steal(&b);
        for (size_t i = 0; i < ELEMENTSOF(policies); i++) {
                _cleanup_policy_ struct policy *pol = fake_vm_policy(policies[i]);
                _cleanup_free_ char *in_policy = xasprintf("(policy %s, by the domain's name alone)", policies[i]);
                struct decision d;
                decide(pol, "prepare", "begin", big, false, &d);
                assert_true(d.has_mode);
                assert_string_equal(policy_mode_to_string(d.mode), policies[i]);
                assert_null(d.out);
                if (strict(policies[i])) {
                        assert_int_equal(d.verdict, DECIDE_REFUSE);
                        assert_int_equal(d.exit_code, 1);
                        assert_true(has(d.message, "pcinuma: refusing to start domain " FAKE_VM_NAME
                                                   ": it is beyond what pcinuma can plan"));
                        assert_true(has(d.message, "DOMAIN_XML_TAGS_MAX"));
                        assert_true(has(d.message, in_policy));
                } else if (streq(policies[i], "off")) {
                        assert_int_equal(d.verdict, DECIDE_ALLOW);
                        assert_int_equal(d.exit_code, 0);
                        assert_null(d.message);
                } else {
                        assert_int_equal(d.verdict, DECIDE_WARN);
                        assert_int_equal(d.exit_code, 0);
                        assert_true(has(d.message, "pcinuma: warning: domain " FAKE_VM_NAME " starts unchanged"));
                        assert_true(has(d.message, "DOMAIN_XML_TAGS_MAX"));
                        assert_true(has(d.message, in_policy));
                }
                decision_done(&d);
        }
        /* A rule on the name decides over the default. */
        const char *json = "{\"default\": {\"policy\": \"preferred\"}, \"rules\": [{\"match\": {\"name\": \""
                           FAKE_VM_NAME "\"}, \"policy\": \"require\"}]}";
        _cleanup_policy_ struct policy *pol = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(policy_parse(json, strlen(json), "t.json", &pol, &err), 0);
        struct decision d;
        decide(pol, "prepare", "begin", big, false, &d);
        assert_int_equal(d.verdict, DECIDE_REFUSE);
        assert_true(has(d.message, "(policy require, by the domain's name alone)"));
        decision_done(&d);
}

/* migrate begin: an unmarked domain passes with its XML on stdout.  A
 * marked one planned under migration: same-topology comes in on a host
 * with the same topology (here: the same host) and keeps its XML; one
 * whose mark says migratable="no" (planned under migration: refuse) is
 * refused under every policy as before, naming the policy the mark was
 * written for; a destination whose policy says migration: refuse refuses
 * it with that reason; one whose only devices for it another domain uses
 * is accepted with a warning naming each. */
static void test_migrate(void **state) {
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(policies); i++) {
                _cleanup_policy_ struct policy *pol = fake_vm_policy_fleet(policies[i]);
                struct decision d;
                decide(pol, "migrate", "begin", fake_vm_xml, false, &d);
                assert_int_equal(d.verdict, DECIDE_PASS);
                assert_int_equal(d.exit_code, 0);
                assert_string_equal(d.out, fake_vm_xml);
                assert_null(d.message);
                decision_done(&d);

                const char *marked_by = streq(policies[i], "off") ? "require" : policies[i];
                _cleanup_free_ char *marked = fake_vm_planned_fleet(host, marked_by);
                _cleanup_free_ char *in_policy = xasprintf("(pcinuma policy %s)", marked_by);
                assert_true(has(marked, "migratable=\"yes\""));
                decide(pol, "migrate", "begin", marked, false, &d);
                assert_int_equal(d.verdict, DECIDE_ALLOW);
                assert_int_equal(d.exit_code, 0);
                assert_string_equal(d.out, marked);
                assert_true(has(d.message, "host device 0000:10:00.0 is 0000:10:00.0 on this host"));
                assert_int_equal(d.n_remap, 4);
                assert_string_equal(d.remap[3], "0000:70:00.0 -> 0000:70:00.0");
                assert_true(d.has_mode);
                assert_string_equal(policy_mode_to_string(d.mode), marked_by);
                decision_done(&d);

                /* The mark of a domain planned under migration: refuse. */
                char *at = strstr(marked, "migratable=\"yes\"");
                memcpy(at, "migratable=\"no\" ", strlen("migratable=\"no\" "));
                decide(pol, "migrate", "begin", marked, false, &d);
                assert_int_equal(d.verdict, DECIDE_REFUSE);
                assert_int_equal(d.exit_code, 1);
                assert_null(d.out);
                assert_true(has(d.message, "refusing incoming migration of domain " FAKE_VM_NAME));
                assert_true(has(d.message, "migratable=\"no\""));
                assert_true(has(d.message, in_policy));
                assert_true(d.has_mode);
                assert_string_equal(policy_mode_to_string(d.mode), marked_by);
                decision_done(&d);
        }

        /* This host's policy refuses. */
        _cleanup_free_ char *marked = fake_vm_planned_fleet(host, "require");
        _cleanup_free_ char *err = NULL;
        _cleanup_policy_ struct policy *refuse = NULL;
        const char *json = "{\"default\": {\"policy\": \"require\", \"migration\": \"refuse\"}}";
        assert_int_equal(policy_parse(json, strlen(json), "t.json", &refuse, &err), 0);
        struct decision d;
        decide(refuse, "migrate", "begin", marked, false, &d);
        assert_int_equal(d.verdict, DECIDE_REFUSE);
        assert_null(d.out);
        assert_true(has(d.message, "refusing incoming migration of domain " FAKE_VM_NAME));
        assert_true(has(d.message, "(migration: refuse)"));
        decision_done(&d);

        /* A host whose devices are not in the same places: refused with
         * a summary on the first line, one line per device that has no
         * place, and this host's devices of that kind once; every line
         * with the hook's prefix. */
        {
                struct hostmap *c = fake_vm_host_with((const char *const[]) FAKE_VM_GPUS_MOVED,
                                                      (const int[]) { 0, 1, 2, 2 });
                hostmap_finish(c);
                struct proto_request rq = {
                        .type = PROTO_REQUEST_HOOK,
                        .argv = { (char *) FAKE_VM_NAME, (char *) "migrate", (char *) "begin", (char *) "-" },
                        .xml = marked, .xml_len = strlen(marked),
                };
                _cleanup_policy_ struct policy *req = fake_vm_policy_fleet("require");
                decide_hook(&rq, c, req, NULL, NULL, &d);
                assert_int_equal(d.verdict, DECIDE_REFUSE);
                assert_true(strncmp(d.message, "pcinuma: refusing incoming migration of domain " FAKE_VM_NAME ": this host "
                                    "cannot give it the same topology: 2 of 4 devices have no place like their own on "
                                    "this host\npcinuma: device 0000:50:00.0 ", 170) == 0);
                assert_true(has(d.message, "\npcinuma: device 0000:70:00.0 (0000:0000, driver none) was on host node 3"));
                assert_true(has(d.message, "\npcinuma: this host's 0000:0000 devices: 0000:18:00.0 (node 0"));
                assert_true(has(d.message, ",\npcinuma:   0000:78:00.0 (node 2, driver none)\n"));
                size_t lines = 0, prefixed = 0;
                for (const char *p = d.message; (p = strchr(p, '\n')); p++)
                        lines++;
                for (const char *p = d.message; (p = strstr(p, "pcinuma: ")); p++)
                        prefixed++;
                assert_int_equal(lines, 5);
                assert_int_equal(prefixed, 5);
                decision_done(&d);
                hostmap_free(c);
        }

        /* Every device of this host it could take is used by another
         * domain: accepted, the warning first and one shared entry per
         * device; the incoming domain's own use is no conflict. */
        _cleanup_policy_ struct policy *pol = fake_vm_policy_fleet("require");
        decide(pol, "migrate", "begin", marked, false, &d);
        assert_int_equal(d.verdict, DECIDE_ALLOW);
        size_t n = d.n_remap;
        assert_true(n > 0);
        struct migrate_used *u = xcalloc(n, sizeof(*u));
        for (size_t i = 0; i < n; i++)
                u[i] = (struct migrate_used) { .id = strstr(d.remap[i], " -> ") + 4, .uuid = "cccccccc-0000-4000-8000-000000000001",
                                               .domain = "vm-other" };
        struct migrate_in_use in_use = { .v = u, .n = n };
        struct proto_request req = {
                .type = PROTO_REQUEST_HOOK,
                .argv = { (char *) FAKE_VM_NAME, (char *) "migrate", (char *) "begin", (char *) "-" },
                .xml = marked, .xml_len = strlen(marked),
        };
        struct decision d2;
        decide_hook(&req, host, pol, &in_use, NULL, &d2);
        assert_int_equal(d2.verdict, DECIDE_ALLOW);
        assert_int_equal(d2.n_shared, n);
        _cleanup_free_ char *first = xasprintf("pcinuma: warning: domain " FAKE_VM_NAME ": host device %s (for ",
                                               u[0].id);
        assert_true(has(d2.message, first));
        assert_true(strncmp(d2.message, "pcinuma: warning: ", 18) == 0);
        assert_true(has(d2.message, "is also used by domain vm-other"));
        _cleanup_free_ char *entry = xasprintf("%s vm-other", u[n - 1].id);
        bool found = false;
        for (size_t i = 0; i < d2.n_shared; i++)
                found |= streq(d2.shared[i], entry);
        assert_true(found);
        decision_done(&d2);
        for (size_t i = 0; i < n; i++)
                u[i].uuid = FAKE_VM_UUID;
        decide_hook(&req, host, pol, &in_use, NULL, &d2);
        assert_int_equal(d2.verdict, DECIDE_ALLOW);
        assert_int_equal(d2.n_shared, 0);
        assert_false(has(d2.message, "warning"));
        decision_done(&d2);
        free(u);
        decision_done(&d);
}

/* The defaults (migration: refuse, as the mission says): a domain planned
 * with no policy file is marked migratable="no", and a destination with
 * the built-in policy refuses an incoming planned domain even when its
 * mark says yes. */
static void test_migrate_defaults(void **state) {
        (void) state;
        _cleanup_policy_ struct policy *builtin = policy_new_default();
        struct engine_result *r = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(engine_plan(fake_vm_xml, strlen(fake_vm_xml), host, builtin, NULL, &r, &err), 0);
        assert_int_equal(r->verdict, PLAN_APPLY);
        assert_true(has(r->xml, "migratable=\"no\""));
        assert_false(has(r->xml, "migratable=\"yes\""));
        struct decision d;
        decide(builtin, "migrate", "begin", r->xml, false, &d);
        assert_int_equal(d.verdict, DECIDE_REFUSE);
        assert_true(has(d.message, "marked migratable=\"no\""));
        decision_done(&d);
        engine_result_free(r);

        _cleanup_free_ char *fleet = fake_vm_planned_fleet(host, "require");
        assert_true(has(fleet, "migratable=\"yes\""));
        decide(builtin, "migrate", "begin", fleet, false, &d);
        assert_int_equal(d.verdict, DECIDE_REFUSE);
        assert_true(has(d.message, "(migration: refuse)"));
        decision_done(&d);
}

/* restore begin: a saved guest's layout must not change; the XML passes
 * as it is, marked or not. */
static void test_restore(void **state) {
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(policies); i++) {
                _cleanup_policy_ struct policy *pol = fake_vm_policy(policies[i]);
                _cleanup_free_ char *marked = fake_vm_planned(host, "require");
                const char *xmls[] = { fake_vm_xml, marked };
                for (size_t k = 0; k < ELEMENTSOF(xmls); k++) {
                        struct decision d;
                        decide(pol, "restore", "begin", xmls[k], false, &d);
                        assert_int_equal(d.verdict, DECIDE_PASS);
                        assert_int_equal(d.exit_code, 0);
                        assert_string_equal(d.out, xmls[k]);
                        assert_null(d.message);
                        decision_done(&d);
                }
        }
}

/* Every other phase (and the end of prepare and migrate): pass, no
 * output, no message, nothing planned, under every policy. */
static void test_other_phases(void **state) {
        (void) state;
        static const char *const phases[][2] = {
                { "start", "begin" }, { "started", "begin" }, { "stopped", "end" }, { "release", "end" },
                { "reconnect", "begin" }, { "attach", "begin" }, { "prepare", "end" }, { "migrate", "end" },
                { "restore", "end" },
        };
        for (size_t i = 0; i < ELEMENTSOF(policies); i++) {
                _cleanup_policy_ struct policy *pol = fake_vm_policy(policies[i]);
                _cleanup_free_ char *marked = fake_vm_planned(host, "require");
                for (size_t k = 0; k < ELEMENTSOF(phases); k++) {
                        struct decision d;
                        decide(pol, phases[k][0], phases[k][1], marked, false, &d);
                        assert_int_equal(d.verdict, DECIDE_PASS);
                        assert_int_equal(d.exit_code, 0);
                        assert_null(d.out);
                        assert_null(d.message);
                        assert_null(d.result);
                        assert_string_equal(d.phase, phases[k][0]);
                        assert_string_equal(d.subphase, phases[k][1]);
                        decision_done(&d);
                }
        }
}

/* XML that was not UTF-8 is refused in the phases that read it. */
static void test_not_utf8(void **state) {
        (void) state;
        _cleanup_policy_ struct policy *pol = fake_vm_policy("off");
        static const char *const phases[][2] = { { "prepare", "to start" }, { "migrate", "the incoming migration of" },
                                                 { "restore", "to restore" } };
        for (size_t k = 0; k < ELEMENTSOF(phases); k++) {
                struct proto_request req = {
                        .type = PROTO_REQUEST_HOOK,
                        .argv = { (char *) FAKE_VM_NAME, (char *) phases[k][0], (char *) "begin", (char *) "-" },
                        .xml = (char *) fake_vm_xml, .xml_len = strlen(fake_vm_xml),
                        .xml_not_utf8 = true, .xml_invalid_utf8 = 7,
                };
                struct decision d;
                decide_hook(&req, host, pol, NULL, NULL, &d);
                _cleanup_free_ char *want = xasprintf("pcinuma: refusing %s domain " FAKE_VM_NAME ": the domain XML is not valid UTF-8 (byte 7)\n",
                                                      phases[k][1]);
                assert_int_equal(d.verdict, DECIDE_REFUSE);
                assert_int_equal(d.exit_code, 1);
                assert_string_equal(d.message, want);
                decision_done(&d);
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_prepare_unplanned),
                cmocka_unit_test(test_prepare_updating),
                cmocka_unit_test(test_prepare_restart),
                cmocka_unit_test(test_prepare_transient),
                cmocka_unit_test(test_prepare_first_start_refuse_allow),
                cmocka_unit_test(test_prepare_no_restart),
                cmocka_unit_test(test_prepare_own_start),
                cmocka_unit_test(test_prepare_boot_files),
                cmocka_unit_test(test_peek_uuid),
                cmocka_unit_test(test_prepare_one_line_per_cause),
                cmocka_unit_test(test_prepare_planned),
                cmocka_unit_test(test_prepare_bad_xml),
                cmocka_unit_test(test_prepare_beyond_limits),
                cmocka_unit_test(test_migrate),
                cmocka_unit_test(test_migrate_defaults),
                cmocka_unit_test(test_restore),
                cmocka_unit_test(test_other_phases),
                cmocka_unit_test(test_not_utf8),
        };
        return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

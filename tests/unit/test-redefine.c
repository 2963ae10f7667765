/* Tests for the watcher's redefine decision (redefine.h): each case of
 * redefine_decide() on engine results made by hand, one on a real plan of
 * the fixture VM (fake-vm.h), and the log-once rule. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <syslog.h>

#include "engine.h"
#include "redefine.h"
#include "util.h"

#include "fake-vm.h"

/* A result with 'n_moved' moved devices (of three) on 'n_pxbs' buses. */
struct fake_result {
        struct engine_result r;
        struct plan plan;
        struct plan_device devices[3];
};

static void fake_result(struct fake_result *f, enum plan_verdict v, enum policy_mode mode, const char *reason,
                        size_t n_moved, size_t n_pxbs) {
        *f = (struct fake_result) {0};
        f->plan.verdict = v;
        f->plan.reason = (char *) reason;
        f->plan.devices = f->devices;
        f->plan.n_devices = 3;
        for (size_t i = 0; i < 3; i++)
                f->devices[i].action = i < n_moved ? PLAN_MOVE : PLAN_STAY;
        f->plan.n_pxbs = n_pxbs;
        f->r.verdict = v;
        f->r.plan = &f->plan;
        f->r.settings = policy_settings_default(mode);
}

static void test_engine_error(void **state) {
        (void) state;
        struct redefine_decision d;
        redefine_decide(NULL, "line 3: bad XML", &d);
        assert_false(d.redefine);
        assert_null(d.out_xml);
        assert_int_equal(d.prio, LOG_WARNING);
        assert_string_equal(d.summary, "cannot be planned: line 3: bad XML; definition left as it is");
        redefine_decision_done(&d);
}

static void test_planned(void **state) {
        (void) state;
        struct fake_result f;
        fake_result(&f, PLAN_APPLY, POLICY_SOCKET, NULL, 3, 2);
        f.r.changed = true;
        f.r.xml = (char *) "<domain/>";
        struct redefine_decision d;
        redefine_decide(&f.r, NULL, &d);
        assert_true(d.redefine);
        assert_string_equal(d.out_xml, "<domain/>");
        assert_ptr_not_equal(d.out_xml, f.r.xml);
        assert_int_equal(d.prio, LOG_DEBUG);
        assert_string_equal(d.summary, "planned under policy socket: 3 devices on 2 expander buses");
        redefine_decision_done(&d);

        /* singular */
        fake_result(&f, PLAN_APPLY, POLICY_REQUIRE, NULL, 1, 1);
        f.r.changed = true;
        f.r.xml = (char *) "<domain/>";
        redefine_decide(&f.r, NULL, &d);
        assert_string_equal(d.summary, "planned under policy require: 1 device on 1 expander bus");
        redefine_decision_done(&d);

        /* planned again: which part of the old mark was stale */
        f.r.stale_mark = (char *) "NCCL topology file: in the mark, not planned";
        redefine_decide(&f.r, NULL, &d);
        assert_string_equal(d.summary, "planned under policy require: 1 device on 1 expander bus; "
                                       "its mark was stale: NCCL topology file: in the mark, not planned");
        redefine_decision_done(&d);
}

static void test_reverted(void **state) {
        (void) state;
        struct fake_result f;
        fake_result(&f, PLAN_UNCHANGED, POLICY_OFF, "policy off: the domain is not touched", 0, 0);
        f.r.changed = f.r.reverted = true;
        f.r.xml = (char *) "<domain/>";
        struct redefine_decision d;
        redefine_decide(&f.r, NULL, &d);
        assert_true(d.redefine);
        assert_string_equal(d.summary, "the pcinuma topology was undone (policy off: policy off: the domain is not touched)");
        redefine_decision_done(&d);

        fake_result(&f, PLAN_SKIP, POLICY_LEGACY, NULL, 0, 0);
        f.r.changed = f.r.reverted = true;
        f.r.xml = (char *) "<domain/>";
        redefine_decide(&f.r, NULL, &d);
        assert_true(d.redefine);
        assert_string_equal(d.summary, "the pcinuma topology was undone (policy legacy)");
        redefine_decision_done(&d);
}

static void test_refused(void **state) {
        (void) state;
        struct fake_result f;
        fake_result(&f, PLAN_REFUSED, POLICY_REQUIRE, "0000:33:00.0 has no NUMA node", 0, 0);
        struct redefine_decision d;
        redefine_decide(&f.r, NULL, &d);
        assert_false(d.redefine);
        assert_null(d.out_xml);
        assert_int_equal(d.prio, LOG_NOTICE);
        assert_string_equal(d.summary, "not planned: 0000:33:00.0 has no NUMA node (policy require); its starts will be refused");
        redefine_decision_done(&d);

        fake_result(&f, PLAN_REFUSED, POLICY_SOCKET, NULL, 0, 0);
        redefine_decide(&f.r, NULL, &d);
        assert_string_equal(d.summary, "not planned: refused (policy socket); its starts will be refused");
        redefine_decision_done(&d);
}

static void test_skipped(void **state) {
        (void) state;
        struct fake_result f;
        fake_result(&f, PLAN_SKIP, POLICY_PREFERRED, "ACPI is off", 0, 0);
        struct redefine_decision d;
        redefine_decide(&f.r, NULL, &d);
        assert_false(d.redefine);
        assert_int_equal(d.prio, LOG_NOTICE);
        assert_string_equal(d.summary, "left untouched: ACPI is off");
        redefine_decision_done(&d);

        fake_result(&f, PLAN_SKIP, POLICY_PREFERRED, NULL, 0, 0);
        redefine_decide(&f.r, NULL, &d);
        assert_string_equal(d.summary, "left untouched: not eligible");
        redefine_decision_done(&d);
}

/* Unchanged, or already planned: nothing to do, nothing to say. */
static void test_nothing_to_do(void **state) {
        (void) state;
        const enum plan_verdict verdicts[] = { PLAN_UNCHANGED, PLAN_APPLY };
        for (size_t i = 0; i < ELEMENTSOF(verdicts); i++) {
                struct fake_result f;
                fake_result(&f, verdicts[i], POLICY_REQUIRE, NULL, 3, 1);
                f.r.xml = (char *) "<domain/>";
                f.r.already_planned = verdicts[i] == PLAN_APPLY;
                struct redefine_decision d;
                redefine_decide(&f.r, NULL, &d);
                assert_false(d.redefine);
                assert_null(d.out_xml);
                assert_null(d.summary);
                assert_int_equal(d.prio, LOG_DEBUG);
                redefine_decision_done(&d);
        }
}

/* On the fixture VM: the unplanned domain is redefined with the engine's
 * XML; its planned output is left as it is. */
static void test_real_plans(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = fake_vm_host();
        _cleanup_policy_ struct policy *pol = fake_vm_policy("require");
        _cleanup_(engine_result_freep) struct engine_result *r = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(engine_plan(fake_vm_xml, strlen(fake_vm_xml), h, pol, NULL, &r, &err), 0);
        struct redefine_decision d;
        redefine_decide(r, NULL, &d);
        assert_true(d.redefine);
        assert_string_equal(d.out_xml, r->xml);
        assert_string_equal(d.summary, "planned under policy require: 4 devices on 4 expander buses");

        _cleanup_(engine_result_freep) struct engine_result *again = NULL;
        assert_int_equal(engine_plan(d.out_xml, strlen(d.out_xml), h, pol, NULL, &again, &err), 0);
        struct redefine_decision d2;
        redefine_decide(again, NULL, &d2);
        assert_false(d2.redefine);
        assert_null(d2.summary);
        redefine_decision_done(&d);
        redefine_decision_done(&d2);

        /* Unpinned cells under preferred (the default): nothing to
         * define, and the journal line says, at warning priority, what
         * could not be placed: the cause once, the devices. */
        static const char unpinned_body[] = "  <numatune>\n";
        const char *a = strstr(fake_vm_xml, unpinned_body), *b = strstr(fake_vm_xml, "  </numatune>\n");
        assert_non_null(a);
        assert_non_null(b);
        _cleanup_free_ char *unpinned = xasprintf("%.*s%s", (int) (a - fake_vm_xml), fake_vm_xml, b + strlen("  </numatune>\n"));
        _cleanup_policy_ struct policy *preferred = fake_vm_policy("preferred");
        _cleanup_(engine_result_freep) struct engine_result *u = NULL;
        assert_int_equal(engine_plan(unpinned, strlen(unpinned), h, preferred, NULL, &u, &err), 0);
        struct redefine_decision d3;
        redefine_decide(u, NULL, &d3);
        assert_false(d3.redefine);
        assert_int_equal(d3.prio, LOG_WARNING);
        assert_non_null(strstr(d3.summary, "not every passthrough device could be placed; no guest cell is pinned to a host node"));
        assert_non_null(strstr(d3.summary, "0000:10:00.0"));
        assert_non_null(strstr(d3.summary, "0000:70:00.0"));
        assert_null(strchr(d3.summary, '\n'));
        redefine_decision_done(&d3);
}

/* A skip or a refusal is logged at its priority once; the same summary
 * again for a known domain drops to debug; a redefinition, a new summary,
 * a new domain or a debug line never counts as said before. */
static void test_said_before(void **state) {
        (void) state;
        struct redefine_decision d = { .summary = (char *) "left untouched: x", .prio = LOG_NOTICE };
        assert_true(redefine_said_before(&d, "left untouched: x", false));
        assert_false(redefine_said_before(&d, "left untouched: x", true));
        assert_false(redefine_said_before(&d, "left untouched: y", false));
        assert_false(redefine_said_before(&d, NULL, false));
        d.prio = LOG_DEBUG;
        assert_false(redefine_said_before(&d, "left untouched: x", false));
        d.prio = LOG_NOTICE;
        d.redefine = true;
        assert_false(redefine_said_before(&d, "left untouched: x", false));
        d.redefine = false;
        d.summary = NULL;
        assert_false(redefine_said_before(&d, NULL, false));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_engine_error),
                cmocka_unit_test(test_planned),
                cmocka_unit_test(test_reverted),
                cmocka_unit_test(test_refused),
                cmocka_unit_test(test_skipped),
                cmocka_unit_test(test_nothing_to_do),
                cmocka_unit_test(test_real_plans),
                cmocka_unit_test(test_said_before),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

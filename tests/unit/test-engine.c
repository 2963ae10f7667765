/* Tests for the engine (engine.h) over the policy matrix: the fixture VM
 * of fake-vm.h planned under each policy (forced, and from a policy
 * file), planned again (idempotent: the mark matches), planned under
 * another policy, reverted, and with a forged mark. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "engine.h"
#include "util.h"

#include "fake-vm-group.h"

static struct engine_result *plan_forced(const char *xml, const char *mode) {
        enum policy_mode m;
        assert_int_equal(policy_mode_from_string(mode, &m), 0);
        struct engine_result *r = NULL;
        _cleanup_free_ char *err = NULL;
        if (engine_plan(xml, strlen(xml), host, NULL, &m, &r, &err) < 0)
                fail_msg("plan under %s: %s", mode, strna(err));
        return r;
}

/* The unplanned domain: every policy but off rewrites it and leaves a mark
 * naming the policy; off leaves the input as it is. */
static void test_plan_unplanned(void **state) {
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(policies); i++) {
                _cleanup_(engine_result_freep) struct engine_result *r = plan_forced(fake_vm_xml, policies[i]);
                assert_string_equal(policy_mode_to_string(r->settings.mode), policies[i]);
                assert_string_equal(r->policy_origin, "command line");
                assert_false(r->already_planned);
                assert_false(r->reverted);
                if (streq(policies[i], "off")) {
                        assert_int_equal(r->verdict, PLAN_UNCHANGED);
                        assert_false(r->changed);
                        assert_string_equal(r->xml, fake_vm_xml);
                        continue;
                }
                _cleanup_free_ char *attr = xasprintf("policy=\"%s\"", policies[i]);
                assert_int_equal(r->verdict, PLAN_APPLY);
                assert_true(r->changed);
                assert_non_null(strstr(r->xml, PCINUMA_TOPOLOGY_NS));
                assert_non_null(strstr(r->xml, attr));
                assert_non_null(strstr(r->xml, "migratable=\"no\""));  /* migration: refuse, the default */
                assert_non_null(strstr(r->xml, " fingerprint=\""));
                assert_non_null(r->mismatch);
                /* One expander bus per cell, each device moved. */
                assert_int_equal(r->plan->n_pxbs, 4);
                size_t moved = 0;
                for (size_t k = 0; k < r->plan->n_devices; k++)
                        moved += r->plan->devices[k].action == PLAN_MOVE;
                assert_int_equal(moved, 4);
        }
}

/* The policy from a policy file's default, not forced. */
static void test_plan_policy_file(void **state) {
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(policies); i++) {
                _cleanup_policy_ struct policy *pol = fake_vm_policy(policies[i]);
                _cleanup_(engine_result_freep) struct engine_result *r = NULL;
                _cleanup_free_ char *err = NULL;
                assert_int_equal(engine_plan(fake_vm_xml, strlen(fake_vm_xml), host, pol, NULL, &r, &err), 0);
                assert_string_equal(policy_mode_to_string(r->settings.mode), policies[i]);
                assert_int_equal(r->verdict, streq(policies[i], "off") ? PLAN_UNCHANGED : PLAN_APPLY);
                _cleanup_free_ char *forced = fake_vm_planned(host, policies[i]);
                assert_string_equal(r->xml, forced);
        }
}

/* Planning the planned output again under the same policy gives it back
 * byte for byte: the mark matches the plan. */
static void test_plan_idempotent(void **state) {
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(policies); i++) {
                _cleanup_free_ char *planned = fake_vm_planned(host, policies[i]);
                _cleanup_(engine_result_freep) struct engine_result *r = plan_forced(planned, policies[i]);
                assert_false(r->changed);
                assert_string_equal(r->xml, planned);
                assert_int_equal(r->already_planned, !streq(policies[i], "off"));
                assert_null(r->mismatch);
        }
}

/* A domain planned under one policy and planned under another: off undoes
 * the mark (the revert of the planned domain); any other policy gives the
 * same output as planning the unplanned domain under it (or keeps the
 * input when its topology is already that plan's). */
static void test_plan_across_policies(void **state) {
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(policies); i++) {
                if (streq(policies[i], "off"))
                        continue;
                _cleanup_free_ char *planned = fake_vm_planned(host, policies[i]);
                _cleanup_free_ char *reverted = NULL, *warning = NULL, *err = NULL;
                bool changed = false;
                assert_int_equal(engine_revert(planned, strlen(planned), &reverted, &changed, &warning, &err), 0);
                assert_true(changed);
                assert_null(warning);
                assert_null(strstr(reverted, PCINUMA_TOPOLOGY_NS));
                for (size_t k = 0; k < ELEMENTSOF(policies); k++) {
                        _cleanup_(engine_result_freep) struct engine_result *r = plan_forced(planned, policies[k]);
                        if (streq(policies[k], "off")) {
                                assert_true(r->reverted);
                                assert_true(r->changed);
                                assert_string_equal(r->xml, reverted);
                                continue;
                        }
                        _cleanup_free_ char *fresh = fake_vm_planned(host, policies[k]);
                        assert_false(r->reverted);
                        if (r->already_planned)
                                assert_string_equal(r->xml, planned);
                        else
                                assert_string_equal(r->xml, fresh);
                        /* The same policy always finds its own mark. */
                        if (k == i)
                                assert_true(r->already_planned);
                }
        }
}

/* The revert gives back the input (as libxml2 writes it: double quotes). */
static void test_revert_round_trip(void **state) {
        (void) state;
        _cleanup_free_ char *want = xstrdup(fake_vm_xml);
        for (char *p = want; *p; p++)
                if (*p == '\'')
                        *p = '"';
        for (size_t i = 0; i < ELEMENTSOF(policies); i++) {
                _cleanup_free_ char *planned = fake_vm_planned(host, policies[i]);
                _cleanup_free_ char *reverted = NULL, *warning = NULL, *err = NULL;
                bool changed = false;
                assert_int_equal(engine_revert(planned, strlen(planned), &reverted, &changed, &warning, &err), 0);
                assert_int_equal(changed, !streq(policies[i], "off"));
                assert_string_equal(reverted, streq(policies[i], "off") ? fake_vm_xml : want);
        }
}

/* A forged mark is bad input for every policy: the engine says why and
 * plans nothing. */
static void test_forged_mark(void **state) {
        (void) state;
        _cleanup_free_ char *planned = fake_vm_planned(host, "require");
        char *at = strstr(planned, "<pcinuma:expander");
        assert_non_null(at);
        _cleanup_free_ char *forged = xasprintf("%.*s<pcinuma:bogus/>%s", (int) (at - planned), planned, at);
        for (size_t i = 0; i < ELEMENTSOF(policies); i++) {
                enum policy_mode m;
                assert_int_equal(policy_mode_from_string(policies[i], &m), 0);
                struct engine_result *r = NULL;
                _cleanup_free_ char *err = NULL;
                assert_int_equal(engine_plan(forged, strlen(forged), host, NULL, &m, &r, &err), -EINVAL);
                assert_null(r);
                assert_non_null(strstr(err, "<pcinuma:bogus> is not part of a pcinuma mark"));
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_plan_unplanned),
                cmocka_unit_test(test_plan_policy_file),
                cmocka_unit_test(test_plan_idempotent),
                cmocka_unit_test(test_plan_across_policies),
                cmocka_unit_test(test_revert_round_trip),
                cmocka_unit_test(test_forged_mark),
        };
        return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

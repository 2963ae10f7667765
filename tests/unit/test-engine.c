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

/* Issue 24: every request is bounded by the host and the budget.  A
 * domain with more hostdevs than the host has devices is refused before
 * planning; a pinning that would take more work than the budget is
 * refused naming the phase; a revert with a budget too small is refused
 * naming its phase, and changes nothing; a real plan spends a small part
 * of the budget. */
static void test_bounded_work(void **state) {
        (void) state;
        _cleanup_(engine_result_freep) struct engine_result *r = plan_forced(fake_vm_xml, "require");
        assert_true(r->work.spent > 0);
        assert_true(r->work.spent < WORK_BUDGET / 100);

        /* 5 hostdevs on a host with 4 devices */
        static const char five[] =
                "<domain type='kvm'>\n  <name>" FAKE_VM_NAME "</name>\n  <uuid>" FAKE_VM_UUID "</uuid>\n"
                FAKE_VM_XML_BODY FAKE_VM_HOSTDEV("0x10") FAKE_VM_HOSTDEV("0x30") FAKE_VM_HOSTDEV("0x50")
                FAKE_VM_HOSTDEV("0x70") FAKE_VM_HOSTDEV("0x90") FAKE_VM_XML_TAIL;
        enum policy_mode m = POLICY_LEGACY, off = POLICY_OFF;
        struct engine_result *res = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(engine_plan(five, strlen(five), host, NULL, &m, &res, &err), -E2BIG);
        assert_null(res);
        assert_true(strstr(err, "the domain has 5 host devices (hostdevs), more than this host has to give (4 PCI "
                                "functions that are not bridges, and mdevs)"));
        /* policy off: not planned, so not refused */
        assert_int_equal(engine_plan(five, strlen(five), host, NULL, &off, &res, &err), 0);
        engine_result_free(res);
        res = NULL;

        /* 256 cells, each with every vCPU: 256 x 16384 steps */
        struct strbuf b = {0};
        strbuf_append(&b, "<domain><name>pins</name><vcpu cpuset='0-15'>16384</vcpu><os><type arch='x86_64' "
                          "machine='q35'>hvm</type></os><cpu><numa>");
        for (unsigned c = 0; c < 256; c++)
                strbuf_printf(&b, "<cell id='%u' cpus='0-16383' memory='1'/>", c);
        strbuf_append(&b, "</numa></cpu><devices>" FAKE_VM_HOSTDEV("0x10") "</devices></domain>");
        free(err);
        err = NULL;
        assert_int_equal(engine_plan(b.buf, b.len, host, NULL, &m, &res, &err), -E2BIG);
        assert_true(strstr(err, "the request needs more work than pcinuma gives one (4000000 steps, WORK_BUDGET) in "
                                "reading the guest's CPU pinning"));
        strbuf_done(&b);

        /* a domain just under the tag limit that the plan takes past it:
         * refused, not written (pcinuma must read what it writes) */
        size_t tags = 0;
        for (const char *c = fake_vm_xml; *c; c++)
                tags += *c == '<';
        strbuf_appendn(&b, fake_vm_xml, strlen(fake_vm_xml) - strlen("  </devices>\n</domain>\n"));
        for (size_t i = tags; i < DOMAIN_XML_TAGS_MAX - 4; i++)
                strbuf_append(&b, "<disk type='file' device='disk'/>");
        strbuf_append(&b, "  </devices>\n</domain>\n");
        free(err);
        err = NULL;
        enum policy_mode req = POLICY_REQUIRE;
        assert_int_equal(engine_plan(b.buf, b.len, host, NULL, &req, &res, &err), -E2BIG);
        if (!strstr(err, "the planned domain would be beyond what pcinuma reads: domain XML has more than 16384 tags"))
                fail_msg("%s", err);
        strbuf_done(&b);

        /* the revert within a budget, and without enough of one */
        char *out = NULL, *warning = NULL;
        bool changed = false;
        struct work w = work_new(WORK_BUDGET);
        assert_int_equal(engine_revert_budget(r->xml, strlen(r->xml), &w, &out, &changed, &warning, &err), 0);
        assert_true(changed);
        assert_true(w.spent > 0 && w.spent < WORK_BUDGET / 100);
        free(out);
        free(warning);
        out = warning = NULL;
        struct work tiny = work_new(w.spent / 2);
        assert_int_equal(engine_revert_budget(r->xml, strlen(r->xml), &tiny, &out, &changed, &warning, &err), -E2BIG);
        assert_null(out);
        assert_true(strstr(err, "in undoing the pcinuma mark"));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_plan_unplanned),
                cmocka_unit_test(test_plan_policy_file),
                cmocka_unit_test(test_plan_idempotent),
                cmocka_unit_test(test_plan_across_policies),
                cmocka_unit_test(test_revert_round_trip),
                cmocka_unit_test(test_forged_mark),
                cmocka_unit_test(test_bounded_work),
        };
        return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

/* Tests for restart-state.h, what pcinumad keeps for restarts into the plan: the
 * persistent set as the watcher reports it, pcinuma's own starts and the
 * incoming ones (and when they run out), the decide_context computed from
 * them, when a prepare call waits for a define, and the counters. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "restart-state.h"
#include "util.h"

#include "fake-vm.h"

#define A "6f1c3a52-8d0e-4b7a-9c55-1e2f3a4b5c6d"
#define B "11111111-0000-4000-8000-000000000001"
#define C "11111111-0000-4000-8000-000000000002"
#define XML(u) "<domain type='kvm'>\n  <name>vm</name>\n  <uuid>" u "</uuid>\n</domain>\n"

static struct decide_context ctx_of(struct restart_state *s, const char *xml, bool connected, uint64_t now, char buf[37]) {
        struct decide_context c;
        restart_context(s, xml, strlen(xml), true, connected, now, buf, &c);
        return c;
}

/* The set: replaced whole, edited one by one, case-insensitive, unknown
 * until the whole set came, and again once lost. */
static void test_persistent_set(void **state) {
        (void) state;
        struct restart_state s = {0};
        char buf[37];
        struct decide_context c = ctx_of(&s, XML(A), true, 1, buf);
        assert_string_equal(c.uuid, A);
        assert_false(c.watcher);        /* no set yet */
        assert_int_equal(c.persistence, DECIDE_PERSISTENCE_UNKNOWN);

        const char *const set[] = { C, "6F1C3A52-8D0E-4B7A-9C55-1E2F3A4B5C6D", "not-a-uuid", C };
        restart_set_persistent(&s, set, ELEMENTSOF(set));
        assert_true(s.known);
        assert_int_equal(s.n_persistent, 2);   /* the bad one and the duplicate are dropped */
        assert_true(restart_is_persistent(&s, A));
        assert_true(restart_is_persistent(&s, C));
        assert_false(restart_is_persistent(&s, B));
        c = ctx_of(&s, XML(A), true, 1, buf);
        assert_true(c.watcher);
        assert_int_equal(c.persistence, DECIDE_PERSISTENT);
        c = ctx_of(&s, XML(B), true, 1, buf);
        assert_int_equal(c.persistence, DECIDE_TRANSIENT);
        /* Not connected: nothing known, whatever the set says. */
        c = ctx_of(&s, XML(A), false, 1, buf);
        assert_false(c.watcher);
        assert_int_equal(c.persistence, DECIDE_PERSISTENCE_UNKNOWN);

        restart_set_one(&s, B, true, 1);
        restart_set_one(&s, B, true, 1);
        assert_int_equal(s.n_persistent, 3);
        for (size_t i = 1; i < s.n_persistent; i++)
                assert_true(strcmp(s.persistent[i - 1], s.persistent[i]) < 0);
        restart_set_one(&s, "6F1C3A52-8D0E-4B7A-9C55-1E2F3A4B5C6D", false, 1);
        restart_set_one(&s, "garbage", true, 1);
        assert_int_equal(s.n_persistent, 2);
        assert_false(restart_is_persistent(&s, A));
        assert_true(restart_is_persistent(&s, B));

        restart_forget_persistence(&s);
        assert_false(s.known);
        assert_false(restart_is_persistent(&s, B));
        c = ctx_of(&s, XML(B), true, 1, buf);
        assert_int_equal(c.persistence, DECIDE_PERSISTENCE_UNKNOWN);
        restart_state_done(&s);
}

/* A prepare call waits for a define only for a domain that is transient
 * at the gate and was reported undefined within RESTART_UNDEFINED_USEC;
 * its define ends the wait. */
static void test_define_awaited(void **state) {
        (void) state;
        struct restart_state s = {0};
        char buf[37];
        const char *in[] = { A };
        restart_set_persistent(&s, in, 1);
        uint64_t t = 1000;
        struct decide_context c = ctx_of(&s, XML(B), true, t, buf);
        assert_int_equal(c.persistence, DECIDE_TRANSIENT);
        assert_false(restart_define_awaited(&s, &c, t));          /* never undefined: truly transient */
        c = ctx_of(&s, XML(A), true, t, buf);
        assert_false(restart_define_awaited(&s, &c, t));          /* persistent */

        restart_set_one(&s, A, false, t);                         /* undefined */
        c = ctx_of(&s, XML(A), true, t + 1, buf);
        assert_int_equal(c.persistence, DECIDE_TRANSIENT);
        assert_true(restart_define_awaited(&s, &c, t + 1));
        assert_false(restart_define_awaited(&s, &c, t + RESTART_UNDEFINED_USEC));  /* too long ago */
        restart_set_one(&s, A, false, t);
        c = ctx_of(&s, XML(A), false, t + 1, buf);                /* no watcher: nothing to wait for */
        assert_false(restart_define_awaited(&s, &c, t + 1));

        restart_set_one(&s, A, true, t + 2);                      /* defined again */
        c = ctx_of(&s, XML(A), true, t + 3, buf);
        assert_int_equal(c.persistence, DECIDE_PERSISTENT);
        assert_false(restart_define_awaited(&s, &c, t + 3));
        c.persistence = DECIDE_TRANSIENT;                         /* the note went with the define */
        assert_false(restart_define_awaited(&s, &c, t + 3));
        restart_state_done(&s);
}

/* A call waits for a define only if its answer depends on it: every start
 * of an unplanned domain outside "off" (under "first_start": "restart"
 * with "transient": "leave" require and socket refuse a transient one and
 * preferred and legacy warn, where a persistent one is restarted; under
 * the other switches, and for an incoming one, the advice names the
 * persistent definition).  Not a planned domain, nor one under off: their
 * answer is the same either way. */
static void test_define_matters(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = fake_vm_host();
        const char *const modes[] = FAKE_VM_POLICIES;
        const struct decide_context transient = {
                .uuid = FAKE_VM_UUID, .updating = true, .watcher = true, .persistence = DECIDE_TRANSIENT,
        };
        struct proto_request req = {
                .type = PROTO_REQUEST_HOOK,
                .argv = { (char *) FAKE_VM_NAME, (char *) "prepare", (char *) "begin", (char *) "-" },
        };
        unsigned n_matters = 0;
        for (size_t i = 0; i < ELEMENTSOF(modes); i++)
                for (int fs = POLICY_FIRST_START_RESTART; fs <= POLICY_FIRST_START_ALLOW; fs++)
                        for (int tr = 0; tr < 2; tr++)
                                for (int planned = 0; planned < 2; planned++)
                                        for (int incoming = 0; incoming < 2; incoming++) {
                _cleanup_policy_ struct policy *pol = fake_vm_policy(modes[i]);
                pol->def.first_start = (enum policy_first_start) fs;
                pol->def.transient_restart = tr;
                _cleanup_free_ char *xml = planned ? fake_vm_planned(h, modes[i]) : xstrdup(fake_vm_xml);
                req.xml = xml;
                req.xml_len = strlen(xml);
                struct decide_context c = transient;
                c.incoming = incoming;
                struct decision d = {0};
                decide_hook(&req, h, pol, NULL, &c, &d);
                bool want = !planned && !streq(modes[i], "off");
                bool got = restart_define_matters(&req, h, pol, &c, &d);
                if (got != want)
                        fail_msg("%s, first_start %s, transient %s, %s%s: waits %d, should %d", modes[i],
                                 policy_first_start_to_string((enum policy_first_start) fs), tr ? "restart" : "leave",
                                 planned ? "planned" : "unplanned", incoming ? ", incoming" : "", got, want);
                if (want && !incoming && fs == POLICY_FIRST_START_RESTART && !tr)
                        assert_int_equal(d.verdict, streq(modes[i], "require") || streq(modes[i], "socket")
                                                            ? DECIDE_REFUSE : DECIDE_WARN);
                n_matters += got;
                decision_done(&d);
        }
        assert_int_equal(n_matters, 48);
}

/* A call that waited the whole time for a define ends the note: the next
 * start of a domain undefined for good is not held again. */
static void test_define_missed(void **state) {
        (void) state;
        struct restart_state s = {0};
        char buf[37];
        const char *in[] = { A, B };
        restart_set_persistent(&s, in, 2);
        uint64_t t = 1000;
        restart_set_one(&s, A, false, t);
        restart_set_one(&s, B, false, t);
        struct decide_context c = ctx_of(&s, XML(A), true, t + 1, buf);
        assert_true(restart_define_awaited(&s, &c, t + 1));
        assert_int_equal(s.n_define_waits_in_vain, 0);
        restart_define_missed(&s, "6F1C3A52-8D0E-4B7A-9C55-1E2F3A4B5C6D");     /* A, in capitals */
        assert_int_equal(s.n_define_waits_in_vain, 1);
        c = ctx_of(&s, XML(A), true, t + 2, buf);
        assert_int_equal(c.persistence, DECIDE_TRANSIENT);
        assert_false(restart_define_awaited(&s, &c, t + 2));
        c = ctx_of(&s, XML(B), true, t + 2, buf);                 /* another's note stays */
        assert_true(restart_define_awaited(&s, &c, t + 2));
        restart_define_missed(&s, "garbage");
        assert_true(restart_define_awaited(&s, &c, t + 2));
        assert_int_equal(s.n_define_waits_in_vain, 1);  /* not a domain: not counted */
        /* Undefined once more: a new note, waited for again. */
        restart_set_one(&s, A, false, t + 3);
        c = ctx_of(&s, XML(A), true, t + 4, buf);
        assert_true(restart_define_awaited(&s, &c, t + 4));
        restart_state_done(&s);
}

/* Own starts last until the restart is reported, or RESTART_OWN_USEC;
 * incoming notes until the prepare call uses them, or
 * RESTART_INCOMING_USEC. */
static void test_notes(void **state) {
        (void) state;
        struct restart_state s = {0};
        char buf[37];
        restart_set_persistent(&s, NULL, 0);
        restart_note_own(&s, A, 1000);
        restart_note_incoming(&s, B, 1000);
        struct decide_context c = ctx_of(&s, XML(A), true, 2000, buf);
        assert_true(c.own_start);
        assert_false(c.incoming);
        /* Two starts (the plan, then the client's XML) are both its own. */
        restart_after_prepare(&s, &c, DECIDE_ALLOW);
        c = ctx_of(&s, XML(A), true, 3000, buf);
        assert_true(c.own_start);
        restart_done(&s, &(struct wproto_restarted) { .uuid = A, .outcome = WPROTO_OUTCOME_FALLBACK,
                                                      .unplanned_us = 10, .total_us = 100 });
        c = ctx_of(&s, XML(A), true, 4000, buf);
        assert_false(c.own_start);

        c = ctx_of(&s, XML(B), true, 2000, buf);
        assert_true(c.incoming);
        assert_false(c.own_start);
        restart_after_prepare(&s, &c, DECIDE_REFUSE);
        c = ctx_of(&s, XML(B), true, 3000, buf);
        assert_false(c.incoming);

        /* Running out. */
        restart_note_own(&s, C, 0);
        restart_note_incoming(&s, A, 0);
        assert_true(ctx_of(&s, XML(C), true, RESTART_OWN_USEC - 1, buf).own_start);
        assert_false(ctx_of(&s, XML(C), true, RESTART_OWN_USEC, buf).own_start);
        assert_int_equal(s.n_own, 0);
        assert_false(ctx_of(&s, XML(A), true, RESTART_INCOMING_USEC, buf).incoming);
        assert_int_equal(s.n_incoming, 0);

        /* An XML without a UUID has no context at all. */
        restart_note_own(&s, A, 0);
        c = ctx_of(&s, "<domain><name>x</name></domain>", true, 1, buf);
        assert_null(c.uuid);
        assert_false(c.own_start);
        assert_false(c.watcher);
        assert_true(c.updating);
        restart_state_done(&s);
}

static void test_counters(void **state) {
        (void) state;
        struct restart_state s = {0};
        const struct decide_context c = { .uuid = A };
        restart_after_prepare(&s, &c, DECIDE_RESTART);
        restart_after_prepare(&s, &c, DECIDE_RESTART);
        restart_after_prepare(&s, &c, DECIDE_WARN);
        assert_int_equal(s.n_requested, 2);
        restart_done(&s, &(struct wproto_restarted) { .uuid = A, .outcome = WPROTO_OUTCOME_RESTARTED,
                                                      .unplanned_us = 300, .total_us = 2000 });
        restart_done(&s, &(struct wproto_restarted) { .uuid = A, .outcome = WPROTO_OUTCOME_RESTARTED,
                                                      .unplanned_us = 500, .total_us = 1000 });
        restart_done(&s, &(struct wproto_restarted) { .uuid = A, .outcome = WPROTO_OUTCOME_SKIPPED,
                                                      .unplanned_us = 99999, .total_us = 99999 });
        restart_done(&s, &(struct wproto_restarted) { .uuid = B, .outcome = WPROTO_OUTCOME_LOST });
        assert_int_equal(s.n_outcome[WPROTO_OUTCOME_RESTARTED], 2);
        assert_int_equal(s.n_outcome[WPROTO_OUTCOME_SKIPPED], 1);
        assert_int_equal(s.n_outcome[WPROTO_OUTCOME_LOST], 1);
        assert_int_equal(s.n_outcome[WPROTO_OUTCOME_FALLBACK], 0);
        assert_int_equal(s.unplanned_us_sum, 800);     /* skips do not count */
        assert_int_equal(s.unplanned_us_max, 500);
        assert_int_equal(s.total_us_sum, 3000);
        assert_int_equal(s.total_us_max, 2000);

        /* Conditional requests (restart_if_persistent): requested once the
         * watcher reports on one, once; a new start of the domain
         * supersedes one it never reported on. */
        restart_note_conditional(&s, B, 0);
        assert_int_equal(s.n_requested, 2);
        /* the restart's own start of the plan */
        restart_after_prepare(&s, &(struct decide_context) { .uuid = B, .own_start = true }, DECIDE_ALLOW);
        restart_done(&s, &(struct wproto_restarted) { .uuid = B, .outcome = WPROTO_OUTCOME_RESTARTED });
        assert_int_equal(s.n_requested, 3);
        restart_done(&s, &(struct wproto_restarted) { .uuid = B, .outcome = WPROTO_OUTCOME_RESTARTED });
        assert_int_equal(s.n_requested, 3);
        restart_note_conditional(&s, B, 0);
        restart_after_prepare(&s, &(struct decide_context) { .uuid = B }, DECIDE_RESTART);
        assert_int_equal(s.n_requested, 4);
        restart_done(&s, &(struct wproto_restarted) { .uuid = B, .outcome = WPROTO_OUTCOME_RESTARTED });
        assert_int_equal(s.n_requested, 4);
        restart_state_done(&s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_persistent_set),
                cmocka_unit_test(test_define_awaited),
                cmocka_unit_test(test_define_matters),
                cmocka_unit_test(test_define_missed),
                cmocka_unit_test(test_notes),
                cmocka_unit_test(test_counters),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

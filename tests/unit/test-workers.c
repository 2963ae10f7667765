/* Unit tests of pcinumad's worker pool (daemon/workers.[ch]) with jobs the
 * test holds at a gate: every job completes on the main thread, after its
 * run() and with what run() wrote; a large job never takes the last free
 * thread, so a small one runs while large ones hold the others; at most
 * WORKERS_LARGE_QUEUED large jobs wait, the next is refused; stopping ends
 * the running job and completes the rest as cancelled.  No timing
 * is asserted: the test waits for states (with a generous limit that only
 * a hung pool reaches). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "util.h"
#include "workers.h"

/* The gate large jobs wait at, and what the jobs did. */
static struct {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool open;
        unsigned ran, completed, cancelled, waiting;
        bool wrong_thread;              /* a complete() not on the main thread */
        bool result_missing;            /* a complete() that did not see run()'s result */
        pthread_t main_thread;
} g = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

struct job {
        struct work w;
        bool wait_at_gate;
        int input, output;
};

static void job_run(struct work *w) {
        struct job *j = (struct job *) w;
        pthread_mutex_lock(&g.lock);
        g.ran++;
        if (j->wait_at_gate) {
                g.waiting++;
                pthread_cond_broadcast(&g.cond);
                while (!g.open)
                        pthread_cond_wait(&g.cond, &g.lock);
                g.waiting--;
        }
        pthread_mutex_unlock(&g.lock);
        j->output = j->input * 2;
}

static void job_complete(struct work *w) {
        struct job *j = (struct job *) w;
        pthread_mutex_lock(&g.lock);
        g.completed++;
        if (w->cancelled)
                g.cancelled++;
        else if (j->output != j->input * 2)
                g.result_missing = true;
        if (!pthread_equal(pthread_self(), g.main_thread))
                g.wrong_thread = true;
        pthread_mutex_unlock(&g.lock);
        free(j);
}

static struct job *job_new(bool large, bool wait_at_gate, int input) {
        struct job *j = xcalloc(1, sizeof(*j));
        j->w = (struct work) { .run = job_run, .complete = job_complete, .large = large };
        j->wait_at_gate = wait_at_gate;
        j->input = input;
        return j;
}

static void reset(void) {
        pthread_mutex_lock(&g.lock);
        g.open = false;
        g.ran = g.completed = g.cancelled = g.waiting = 0;
        g.wrong_thread = g.result_missing = false;
        g.main_thread = pthread_self();
        pthread_mutex_unlock(&g.lock);
}

static void open_gate(void) {
        pthread_mutex_lock(&g.lock);
        g.open = true;
        pthread_cond_broadcast(&g.cond);
        pthread_mutex_unlock(&g.lock);
}

static unsigned get(unsigned *v) {
        pthread_mutex_lock(&g.lock);
        unsigned x = *v;
        pthread_mutex_unlock(&g.lock);
        return x;
}

static uint64_t mono_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

/* Run the event loop until *v reaches want; fails the test after 30 s. */
static void loop_until(sd_event *e, unsigned *v, unsigned want) {
        uint64_t end = mono_ms() + 30000;
        while (get(v) < want) {
                assert_true(mono_ms() < end);
                assert_true(sd_event_run(e, 50 * 1000) >= 0);
        }
}

/* Wait (without the event loop) until n jobs wait at the gate. */
static void wait_for_waiting(unsigned n) {
        uint64_t end = mono_ms() + 30000;
        while (get(&g.waiting) < n) {
                assert_true(mono_ms() < end);
                struct timespec ts = { 0, 1000000 };
                nanosleep(&ts, NULL);
        }
}

static void test_jobs_complete_on_main_thread(void **state) {
        reset();
        sd_event *e = NULL;
        struct workers *p = NULL;
        assert_int_equal(sd_event_new(&e), 0);
        assert_int_equal(workers_new(e, 3, &p), 0);
        /* no thread before the first job: the process stays single-threaded */
        struct workers_stats st0;
        workers_stats(p, &st0);
        assert_int_equal(st0.threads, 0);
        assert_int_equal(st0.threads_wanted, 3);
        for (int i = 0; i < 50; i++)
                assert_int_equal(workers_submit(p, &job_new(i % 10 == 0, false, i)->w), 0);
        loop_until(e, &g.completed, 50);
        assert_int_equal(get(&g.ran), 50);
        assert_false(g.wrong_thread);
        assert_false(g.result_missing);
        struct workers_stats st;
        workers_stats(p, &st);
        assert_int_equal(st.threads, 3);
        assert_int_equal(st.threads_wanted, 3);
        assert_int_equal(st.busy, 0);
        assert_int_equal(st.queued, 0);
        assert_int_equal(st.completed, 50);
        assert_int_equal(st.refused, 0);
        workers_free(p);
        assert_int_equal(get(&g.cancelled), 0);
        sd_event_unref(e);
}

static void test_small_job_passes_large_ones(void **state) {
        reset();
        sd_event *e = NULL;
        struct workers *p = NULL;
        assert_int_equal(sd_event_new(&e), 0);
        assert_int_equal(workers_new(e, 3, &p), 0);
        /* 4 large jobs on 3 threads: 2 run (all threads but one), 2 wait */
        for (int i = 0; i < 4; i++)
                assert_int_equal(workers_submit(p, &job_new(true, true, i)->w), 0);
        wait_for_waiting(2);
        struct workers_stats st;
        workers_stats(p, &st);
        assert_int_equal(st.busy, 2);
        assert_int_equal(st.busy_large, 2);
        assert_int_equal(st.queued_large, 2);
        /* a small job runs and completes on the free thread meanwhile */
        assert_int_equal(workers_submit(p, &job_new(false, false, 100)->w), 0);
        loop_until(e, &g.completed, 1);
        assert_int_equal(get(&g.ran), 3);
        workers_stats(p, &st);
        assert_int_equal(st.busy_large, 2);
        assert_int_equal(st.queued_large, 2);
        assert_int_equal(st.completed, 1);
        open_gate();
        loop_until(e, &g.completed, 5);
        assert_int_equal(get(&g.ran), 5);
        assert_false(g.wrong_thread);
        assert_false(g.result_missing);
        workers_free(p);
        sd_event_unref(e);
}

static void test_large_queue_is_bounded(void **state) {
        reset();
        sd_event *e = NULL;
        struct workers *p = NULL;
        assert_int_equal(sd_event_new(&e), 0);
        assert_int_equal(workers_new(e, 2, &p), 0);
        assert_int_equal(workers_submit(p, &job_new(true, true, 0)->w), 0);
        wait_for_waiting(1);
        for (unsigned i = 0; i < WORKERS_LARGE_QUEUED; i++)
                assert_int_equal(workers_submit(p, &job_new(true, true, 1)->w), 0);
        struct job *extra = job_new(true, true, 2);
        assert_int_equal(workers_submit(p, &extra->w), -EBUSY);
        free(extra);
        /* small jobs are not bounded here (the caller bounds them) */
        for (int i = 0; i < 20; i++)
                assert_int_equal(workers_submit(p, &job_new(false, false, 3)->w), 0);
        loop_until(e, &g.completed, 20);
        struct workers_stats st;
        workers_stats(p, &st);
        assert_int_equal(st.refused, 1);
        assert_int_equal(st.queued_large, WORKERS_LARGE_QUEUED);
        open_gate();
        loop_until(e, &g.completed, 20 + 1 + WORKERS_LARGE_QUEUED);
        workers_free(p);
        assert_int_equal(get(&g.cancelled), 0);
        assert_false(g.result_missing);
        sd_event_unref(e);
}

static void *open_gate_later(void *userdata) {
        struct timespec ts = { 0, 100 * 1000000 };
        nanosleep(&ts, NULL);
        open_gate();
        return NULL;
}

static void test_free_cancels_what_did_not_complete(void **state) {
        reset();
        sd_event *e = NULL;
        struct workers *p = NULL;
        assert_int_equal(sd_event_new(&e), 0);
        assert_int_equal(workers_new(e, 2, &p), 0);
        assert_int_equal(workers_submit(p, &job_new(true, true, 0)->w), 0);
        wait_for_waiting(1);
        assert_int_equal(workers_submit(p, &job_new(true, true, 1)->w), 0);
        assert_int_equal(workers_submit(p, &job_new(true, true, 2)->w), 0);
        /* The running job ends when the gate opens; workers_free() waits
         * for it and completes all three as cancelled, once each.  (That
         * the queued two do not run is the likely order, not a certain
         * one: the gate may open before workers_free() says stop.) */
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, open_gate_later, NULL), 0);
        workers_free(p);
        pthread_join(t, NULL);
        assert_true(get(&g.ran) >= 1);
        assert_int_equal(get(&g.completed), 3);
        assert_int_equal(get(&g.cancelled), 3);
        assert_false(g.wrong_thread);
        sd_event_unref(e);
}

static void test_thread_count(void **state) {
        sd_event *e = NULL;
        struct workers *p = NULL;
        assert_int_equal(sd_event_new(&e), 0);
        assert_int_equal(workers_new(e, 1, &p), -EINVAL);
        assert_int_equal(workers_new(e, WORKERS_MAX + 1, &p), -EINVAL);
        unsigned n = workers_default_threads();
        assert_true(n >= WORKERS_MIN && n <= WORKERS_DEFAULT_MAX);
        sd_event_unref(e);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_jobs_complete_on_main_thread),
                cmocka_unit_test(test_small_job_passes_large_ones),
                cmocka_unit_test(test_large_queue_is_bounded),
                cmocka_unit_test(test_free_cancels_what_did_not_complete),
                cmocka_unit_test(test_thread_count),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

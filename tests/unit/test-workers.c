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
        struct worker_job w;
        bool wait_at_gate;
        int input, output;
};

static void job_run(struct worker_job *w) {
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

static void job_complete(struct worker_job *w) {
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
        j->w = (struct worker_job) { .run = job_run, .complete = job_complete, .large = large };
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

/* The cases below run on a fresh pool of case->threads threads with its
 * own event loop, made by pool_setup() and freed by pool_teardown(); a
 * case that checks what freeing the pool did frees it itself
 * (pool_free()). */
struct pool;

struct pool_case {
        const char *name;
        unsigned threads;
        void (*run)(struct pool *pool);
};

struct pool {
        const struct pool_case *c;
        sd_event *e;
        struct workers *p;
};

static void pool_free(struct pool *pool) {
        workers_free(pool->p);
        pool->p = NULL;
}

static void case_jobs_complete_on_main_thread(struct pool *pool) {
        struct workers *p = pool->p;
        /* no thread before the first job: the process stays single-threaded */
        struct workers_stats st0;
        workers_stats(p, &st0);
        assert_int_equal(st0.threads, 0);
        assert_int_equal(st0.threads_wanted, 3);
        for (int i = 0; i < 50; i++)
                assert_int_equal(workers_submit(p, &job_new(i % 10 == 0, false, i)->w), 0);
        loop_until(pool->e, &g.completed, 50);
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
        pool_free(pool);
        assert_int_equal(get(&g.cancelled), 0);
}

static void case_small_job_passes_large_ones(struct pool *pool) {
        struct workers *p = pool->p;
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
        loop_until(pool->e, &g.completed, 1);
        assert_int_equal(get(&g.ran), 3);
        workers_stats(p, &st);
        assert_int_equal(st.busy_large, 2);
        assert_int_equal(st.queued_large, 2);
        assert_int_equal(st.completed, 1);
        open_gate();
        loop_until(pool->e, &g.completed, 5);
        assert_int_equal(get(&g.ran), 5);
        assert_false(g.wrong_thread);
        assert_false(g.result_missing);
}

static void case_large_queue_is_bounded(struct pool *pool) {
        struct workers *p = pool->p;
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
        loop_until(pool->e, &g.completed, 20);
        struct workers_stats st;
        workers_stats(p, &st);
        assert_int_equal(st.refused, 1);
        assert_int_equal(st.queued_large, WORKERS_LARGE_QUEUED);
        open_gate();
        loop_until(pool->e, &g.completed, 20 + 1 + WORKERS_LARGE_QUEUED);
        pool_free(pool);
        assert_int_equal(get(&g.cancelled), 0);
        assert_false(g.result_missing);
}

static void *open_gate_later(void *userdata) {
        struct timespec ts = { 0, 100 * 1000000 };
        nanosleep(&ts, NULL);
        open_gate();
        return NULL;
}

static void case_free_cancels_what_did_not_complete(struct pool *pool) {
        struct workers *p = pool->p;
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
        pool_free(pool);
        pthread_join(t, NULL);
        assert_true(get(&g.ran) >= 1);
        assert_int_equal(get(&g.completed), 3);
        assert_int_equal(get(&g.cancelled), 3);
        assert_false(g.wrong_thread);
}

static const struct pool_case pool_cases[] = {
        { "test_jobs_complete_on_main_thread",       3, case_jobs_complete_on_main_thread },
        { "test_small_job_passes_large_ones",        3, case_small_job_passes_large_ones },
        { "test_large_queue_is_bounded",             2, case_large_queue_is_bounded },
        { "test_free_cancels_what_did_not_complete", 2, case_free_cancels_what_did_not_complete },
};

/* cmocka setup: *state is the case; it becomes the case's pool. */
static int pool_setup(void **state) {
        const struct pool_case *c = *state;
        struct pool *pool = xcalloc(1, sizeof(*pool));
        pool->c = c;
        reset();
        if (sd_event_new(&pool->e) < 0 || workers_new(pool->e, c->threads, &pool->p) < 0) {
                sd_event_unref(pool->e);
                free(pool);
                return -1;
        }
        *state = pool;
        return 0;
}

static int pool_teardown(void **state) {
        struct pool *pool = *state;
        /* after a failed assertion, jobs may still wait at the gate */
        open_gate();
        if (pool->p)
                workers_free(pool->p);
        sd_event_unref(pool->e);
        free(pool);
        return 0;
}

/* The test function of every pool case: cmocka passes the pool. */
static void run_pool_case(void **state) {
        struct pool *pool = *state;
        pool->c->run(pool);
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
        struct CMUnitTest tests[ELEMENTSOF(pool_cases) + 1];
        for (size_t i = 0; i < ELEMENTSOF(pool_cases); i++)
                tests[i] = (struct CMUnitTest) {
                        .name = pool_cases[i].name,
                        .test_func = run_pool_case,
                        .setup_func = pool_setup,
                        .teardown_func = pool_teardown,
                        .initial_state = (void *) &pool_cases[i],
                };
        tests[ELEMENTSOF(pool_cases)] = (struct CMUnitTest) cmocka_unit_test(test_thread_count);
        return cmocka_run_group_tests(tests, NULL, NULL);
}

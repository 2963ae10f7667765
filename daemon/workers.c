/* pcinumad's worker threads (workers.h): two FIFO queues under one mutex,
 * n threads that take from them, and an eventfd that wakes the event loop
 * when finished jobs wait for their completion there. */
#include "workers.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <time.h>

#include "log.h"
#include "util.h"

struct queue {
        struct worker_job *head, *tail;
        unsigned n;
};

struct workers {
        pthread_mutex_t lock;
        pthread_cond_t wake;            /* a job was queued, a large slot freed, or stopping */
        struct queue small, large;      /* waiting for a thread */
        struct queue done;              /* run, waiting for complete() on the main thread */
        unsigned busy, busy_large;
        unsigned large_max;             /* threads a large job may occupy: all but one */
        bool stopping;
        uint64_t completed, refused, longest_run, longest_wait;
        unsigned completing;            /* main thread only: taken from 'done', complete() not yet called */

        pthread_t *threads;
        unsigned n_threads;             /* started */
        unsigned n_wanted;
        int efd;
        sd_event_source *src;
};

static void push(struct queue *q, struct worker_job *w) {
        w->next = NULL;
        if (q->tail)
                q->tail->next = w;
        else
                q->head = w;
        q->tail = w;
        q->n++;
}

static struct worker_job *pop(struct queue *q) {
        struct worker_job *w = q->head;
        if (!w)
                return NULL;
        q->head = w->next;
        if (!q->head)
                q->tail = NULL;
        q->n--;
        w->next = NULL;
        return w;
}

/* The next job a free thread may take (lock held): small first; a large
 * one only while a thread stays free for small ones. */
static struct worker_job *next_job(struct workers *p) {
        if (p->small.head)
                return pop(&p->small);
        if (p->large.head && p->busy_large < p->large_max)
                return pop(&p->large);
        return NULL;
}

static void *thread_main(void *userdata) {
        struct workers *p = userdata;

        pthread_mutex_lock(&p->lock);
        for (;;) {
                struct worker_job *w = NULL;
                while (!p->stopping && !(w = next_job(p)))
                        pthread_cond_wait(&p->wake, &p->lock);
                if (!w)
                        break;          /* stopping: what is queued is cancelled by workers_free() */
                p->busy++;
                if (w->large)
                        p->busy_large++;
                w->started_usec = now_usec(CLOCK_MONOTONIC);
                pthread_mutex_unlock(&p->lock);

                w->run(w);

                uint64_t now = now_usec(CLOCK_MONOTONIC);
                pthread_mutex_lock(&p->lock);
                w->finished_usec = now;
                p->busy--;
                if (w->large) {
                        p->busy_large--;
                        /* A large slot is free: an idle thread may take a
                         * waiting large job while this one takes a small one. */
                        if (p->large.head)
                                pthread_cond_signal(&p->wake);
                }
                if (now - w->started_usec > p->longest_run)
                        p->longest_run = now - w->started_usec;
                if (w->started_usec - w->queued_usec > p->longest_wait)
                        p->longest_wait = w->started_usec - w->queued_usec;
                bool was_empty = !p->done.head;
                push(&p->done, w);
                /* One wake-up per batch: the main loop takes the whole
                 * list when it reads the eventfd. */
                if (was_empty) {
                        uint64_t one = 1;
                        ssize_t n;
                        do
                                n = write(p->efd, &one, sizeof one);
                        while (n < 0 && errno == EINTR);
                        /* EAGAIN cannot happen (the counter is far from
                         * its maximum); anything else leaves the job in
                         * the list, completed at the next wake-up. */
                }
        }
        pthread_mutex_unlock(&p->lock);
        return NULL;
}

/* The event loop's side: complete every finished job, in the order they
 * finished. */
static int on_done(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        struct workers *p = userdata;
        uint64_t v;
        (void) read(fd, &v, sizeof v);          /* EAGAIN: a spurious wake-up */

        pthread_mutex_lock(&p->lock);
        struct queue done = p->done;
        p->done = (struct queue) {0};
        p->completed += done.n;
        pthread_mutex_unlock(&p->lock);

        p->completing = done.n;
        for (struct worker_job *w; (w = pop(&done));) {
                p->completing--;
                w->complete(w);
        }
        return 0;
}

unsigned workers_default_threads(void) {
        cpu_set_t set;
        long n = 0;
        if (sched_getaffinity(0, sizeof set, &set) == 0)
                n = CPU_COUNT(&set);
        if (n <= 0)
                n = sysconf(_SC_NPROCESSORS_ONLN);
        if (n < (long) WORKERS_MIN)
                return WORKERS_MIN;
        return n > (long) WORKERS_DEFAULT_MAX ? WORKERS_DEFAULT_MAX : (unsigned) n;
}

/* Start the threads not running yet (main thread).  On error some may
 * run: the pool works with those (large jobs keep one free only when there
 * are two), and the next submission tries again. */
static int start_threads(struct workers *p) {
        /* The threads get every signal blocked (created with this mask),
         * and the stack a main thread usually has: the core recurses as
         * deep there as here. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        (void) pthread_attr_setstacksize(&attr, 8u * 1024u * 1024u);
        int r = 0;
        pthread_mutex_lock(&p->lock);
        while (p->n_threads < p->n_wanted) {
                r = -pthread_create(&p->threads[p->n_threads], &attr, thread_main, p);
                if (r < 0)
                        break;
                p->n_threads++;
        }
        p->large_max = p->n_threads > 1 ? p->n_threads - 1 : 1;
        pthread_mutex_unlock(&p->lock);
        pthread_attr_destroy(&attr);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r < 0)
                log_errno(LOG_ERR, r, "Failed to start worker thread %u of %u: %m", p->n_threads + 1, p->n_wanted);
        return p->n_threads > 0 ? 0 : r;
}

int workers_new(sd_event *e, unsigned n_threads, struct workers **ret) {
        if (n_threads < WORKERS_MIN || n_threads > WORKERS_MAX)
                return -EINVAL;
        struct workers *p = xcalloc(1, sizeof(*p));
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->wake, NULL);
        p->n_wanted = n_threads;
        p->threads = xcalloc(n_threads, sizeof(pthread_t));
        p->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (p->efd < 0) {
                int r = -errno;
                workers_free(p);
                return log_errno(LOG_ERR, r, "Failed to create the workers' eventfd: %m");
        }
        int r = sd_event_add_io(e, &p->src, p->efd, EPOLLIN, on_done, p);
        if (r < 0) {
                workers_free(p);
                return log_errno(LOG_ERR, r, "Failed to watch the workers' eventfd: %m");
        }
        (void) sd_event_source_set_description(p->src, "workers-done");
        /* The threads start with the first job: until then pcinumad stays
         * single-threaded, and glibc's malloc takes its cheaper
         * single-thread path (0.9% of an ordinary request's instructions). */
        *ret = p;
        return 0;
}

struct workers *workers_free(struct workers *p) {
        if (!p)
                return NULL;
        pthread_mutex_lock(&p->lock);
        p->stopping = true;
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
        for (unsigned i = 0; i < p->n_threads; i++)
                pthread_join(p->threads[i], NULL);
        free(p->threads);

        /* No thread runs any more: what is left is ours alone. */
        struct queue *qs[] = { &p->done, &p->small, &p->large };
        for (size_t i = 0; i < ELEMENTSOF(qs); i++)
                for (struct worker_job *w; (w = pop(qs[i]));) {
                        w->cancelled = true;
                        w->complete(w);
                }
        sd_event_source_disable_unref(p->src);
        if (p->efd >= 0)
                close(p->efd);
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->lock);
        free(p);
        return NULL;
}

int workers_submit(struct workers *p, struct worker_job *w) {
        if (p->n_threads < p->n_wanted) {
                int r = start_threads(p);
                if (r < 0)
                        return r;
        }
        w->cancelled = false;
        w->queued_usec = now_usec(CLOCK_MONOTONIC);
        w->started_usec = w->finished_usec = 0;
        pthread_mutex_lock(&p->lock);
        if (w->large && p->large.n >= WORKERS_LARGE_QUEUED) {
                p->refused++;
                pthread_mutex_unlock(&p->lock);
                return -EBUSY;
        }
        push(w->large ? &p->large : &p->small, w);
        pthread_cond_signal(&p->wake);
        pthread_mutex_unlock(&p->lock);
        return 0;
}

bool workers_idle(struct workers *p) {
        pthread_mutex_lock(&p->lock);
        bool idle = p->busy == 0 && p->small.n == 0 && p->large.n == 0 && p->done.n == 0 && p->completing == 0;
        pthread_mutex_unlock(&p->lock);
        return idle;
}

void workers_stats(struct workers *p, struct workers_stats *ret) {
        pthread_mutex_lock(&p->lock);
        *ret = (struct workers_stats) {
                .threads = p->n_threads,
                .threads_wanted = p->n_wanted,
                .busy = p->busy,
                .queued = p->small.n + p->large.n,
                .busy_large = p->busy_large,
                .queued_large = p->large.n,
                .completed = p->completed,
                .refused = p->refused,
                .longest_run_usec = p->longest_run,
                .longest_wait_usec = p->longest_wait,
        };
        pthread_mutex_unlock(&p->lock);
}

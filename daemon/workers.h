/* pcinumad's worker threads: a small pool that runs the expensive, pure
 * part of a request (a hook decision: parse, plan, migration mapping) off
 * the event loop, so that one heavy request never holds up another
 * domain's verdict, a status request, the watcher or the watchdog.  (The
 * manager decides ordinary requests, up to 64 KiB of domain XML, on the
 * main thread at once: see hook-job.c.)
 *
 * The thread model (docs/hacking.md, "Threads"): the main thread owns all
 * of pcinumad's state and does all I/O.  A job carries everything its
 * run() reads (copies, or references the main thread keeps alive until
 * the job completes); run() touches nothing else, logs nothing, and
 * changes nothing but the job.  When it returns, the job goes back to the
 * main thread (an eventfd in the event loop), where complete() applies it:
 * counters, the log, messages to the watcher, the answer to the client.
 *
 * Two lanes: a large job (a domain XML over WORKERS_LARGE_BYTES) may
 * occupy all threads but one, so a small job always finds a thread within
 * one small job's time; at most WORKERS_LARGE_QUEUED
 * large jobs wait, and workers_submit() refuses more (the caller answers
 * "busy").  Small jobs wait in their own queue, bounded by the caller (one
 * job per client connection, --max-connections).  Each queue is FIFO;
 * small jobs go first. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

/* A request whose domain XML is larger than this is a large job.  Real
 * domain XMLs are tens of KiB (a planned 16-device domain is 25 KiB). */
#define WORKERS_LARGE_BYTES (256u * 1024u)
/* Large jobs that may wait for a thread; more are refused. */
#define WORKERS_LARGE_QUEUED 8u
/* pcinumad --workers: the default is the number of CPUs pcinumad may
 * run on, within these bounds. */
#define WORKERS_MIN 2u
#define WORKERS_MAX 64u
#define WORKERS_DEFAULT_MAX 8u

struct worker_job {
        /* Set by the submitter before workers_submit(): */
        void (*run)(struct worker_job *w);      /* on a worker thread: reads and writes only the job */
        void (*complete)(struct worker_job *w); /* on the main thread, after run(); frees the job */
        bool large;                             /* the large lane */
        /* The pool's: */
        bool cancelled;                         /* complete() without run(), or its result unwanted:
                                                 * pcinumad is stopping */
        uint64_t queued_usec, started_usec, finished_usec;      /* CLOCK_MONOTONIC */
        struct worker_job *next;
};

struct workers_stats {
        unsigned threads;               /* running: 0 until the first job */
        unsigned threads_wanted;
        unsigned busy;                  /* running a job now */
        unsigned queued;                /* waiting for a thread */
        unsigned busy_large, queued_large;
        uint64_t completed;             /* jobs run and completed */
        uint64_t refused;               /* large jobs refused: WORKERS_LARGE_QUEUED were waiting */
        uint64_t longest_run_usec;      /* the longest run() so far */
        uint64_t longest_wait_usec;     /* the longest wait for a thread so far */
};

struct workers;

/* A pool of n_threads threads (WORKERS_MIN..WORKERS_MAX) that reports
 * finished jobs on e.  The threads start with the first workers_submit().
 * Every signal is blocked in them whatever the caller's mask is: signals
 * go to the main thread. */
int workers_new(sd_event *e, unsigned n_threads, struct workers **ret);
/* Stop: wait for the jobs running now to end (each is bounded by the
 * core's work budgets), then complete every job not yet completed with
 * w->cancelled set (queued ones without running them), so that each is
 * freed; join the threads. */
struct workers *workers_free(struct workers *p);

/* Queue w (main thread), starting the threads if they are not running.
 * -EBUSY when w is large and WORKERS_LARGE_QUEUED large jobs wait
 * already, or another negative errno when no thread could be started: w
 * is not queued, and the caller still owns it. */
int workers_submit(struct workers *p, struct worker_job *w);

void workers_stats(struct workers *p, struct workers_stats *ret);
/* No job runs, waits, or waits for its completion (main thread; in a
 * complete(), the job being completed does not count). */
bool workers_idle(struct workers *p);

/* The default thread count: the CPUs this process may run on, clamped to
 * WORKERS_MIN..WORKERS_DEFAULT_MAX. */
unsigned workers_default_threads(void);

/* pcinuma-watcher's state, shared by its files (pcinuma-watcher.c says
 * what each holds), and the calls they make of each other.  Private to
 * the watcher: nothing outside watcher/ includes it. */
#pragma once

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <libxml/relaxng.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "frame.h"
#include "log.h"
#include "preimage.h"
#include "restarter.h"
#include "util.h"
#include "watcher-protocol.h"

#define BACKOFF_MIN_MS 500
#define BACKOFF_MAX_MS 30000
#define USEC_PER_MSEC UINT64_C(1000)

/* pcinumad's answer to a plan request. */
struct plan_answer {
        bool redefine;
        const char *out_xml;
        const char *summary;
        int prio;
        struct log_fields fields;
        size_t n_borrowed;              /* fields[0..n_borrowed) point into msg */
        struct wproto_msg msg;          /* pcinumad's answer: owns the strings above */
};
void plan_answer_done(struct plan_answer *p);

/* What the watcher knows of one domain, by UUID. */
struct dom_state {
        char uuid[VIR_UUID_STRING_BUFLEN];
        uint64_t due;                   /* CLOCK_MONOTONIC usec to look at it; 0: nothing to do */
        uint64_t last_event;            /* when its last DEFINED/UNDEFINED event came */
        uint64_t events;                /* DEFINED/UNDEFINED events so far */
        int last_detail;                /* of the last DEFINED event since our define; -1 none */
        uint64_t defines;               /* DEFINED events since our define (ours among them) */
        bool synced;                    /* due, and events sent before now are dispatched */

        /* Our last define, to be checked once its event is in and quiet. */
        bool verifying;
        uint64_t verify_base;           /* events when we defined (none come in during processing) */
        uint64_t verify_expected;       /* events our define and the changes we saw explain */
        uint64_t verify_started;
        char *readback;                 /* the definition right after our define */
        char *preimage;                 /* the file of what it replaced */
        /* Set by verify() when more events came than our define explains
         * and our definition is still there; confirmed by the next plan. */
        bool suspect;
        uint64_t suspect_events;
        char *suspect_preimage;

        /* The loop guard: a plan that does not converge is a bug. */
        unsigned loop_count;
        time_t loop_first;
        bool loop_stopped;
};

/* A lifecycle event, from libvirt's event thread to the main thread. */
struct queued_event {
        virDomainPtr dom;               /* a reference; NULL: the connection closed (reason in detail) */
        char uuid[VIR_UUID_STRING_BUFLEN];
        int event, detail;
        uint64_t at;                    /* CLOCK_MONOTONIC usec, when libvirt's thread got it */
};

struct watcher {
        char *uri;
        int fd;                         /* to pcinumad */
        struct frame_decoder dec;
        atomic_bool parent_gone;
        uint64_t next_id;
        pthread_mutex_t write_lock;     /* frames to pcinumad come from both threads */

        /* libvirt's event thread and what it hands the main thread */
        pthread_t loop_thread;
        bool loop_running;
        atomic_bool loop_stop;
        int wake_timer;                 /* fired to end the event thread's wait */
        pthread_mutex_t queue_lock;
        struct queued_event *queue;
        size_t n_queue;
        int wake_fd;                    /* eventfd: the main thread has something queued */

        /* status, sent to pcinumad whenever it changes */
        bool connected;
        uint64_t n_redefined, n_failed;
        char *last_error;

        uint64_t n_events, n_conflicts, n_undone;
        uint64_t n_windows, window_us_sum, window_us_max;
        size_t last_pending;            /* as last reported */

        unsigned settle_ms;
        struct preimage_store *preimages;
        xmlRelaxNGPtr schema;           /* NULL: the define validates */
#if PCINUMA_STAND_INS
        /* A test build: pcinumad's stand-in table (--stand-ins), or NULL.
         * Read and checked as pcinumad reads it (a bad table stops the
         * watcher too), but nothing uses it yet: all planning is
         * pcinumad's, and the watcher reads no domain's devices. */
        struct standins *stand_ins;
#endif

        virConnectPtr conn;
        int lifecycle_cb;
        uint64_t reconnect_due;         /* CLOCK_MONOTONIC usec of the next connect attempt; 0: none */
        uint64_t process_due;           /* of the next look at a domain (schedule()); 0: none */
        int backoff_ms;
        unsigned failed_attempts;
        bool check_all;                 /* list every persistent domain at the next turn */
        struct dom_state **states;      /* pointers: a state stays put while the array grows */
        size_t n_states;

        struct restarter *restarter;    /* restarts into the plan (restarter.h) */
        /* pcinumad's recheck requests, handed on by the link (main sets
         * it to sync_recheck(): the link does not call into the sync,
         * which calls the link). */
        void (*on_recheck)(struct watcher *w, const char *uuid);
};

/* libvirt's last error message, never NULL. */
static inline const char *lv_error(void) {
        const char *m = virGetLastErrorMessage();
        return m ? m : "unknown libvirt error";
}

/* --- pcinumad-link.c: the link to pcinumad ------------------------------- */

/* Status (the counters in struct watcher), the persistence of one domain
 * or of all (at connect), an undefined domain: told to pcinumad at once.
 * Any thread; nothing is sent once pcinumad has gone. */
void link_send_status(struct watcher *w);
void link_send_domain(struct watcher *w, const char *uuid, bool persistent);
void link_send_domains(struct watcher *w, const char *const *uuids, size_t n);
void link_send_forget(struct watcher *w, const char *uuid);
/* Change a counter or the connection's state, and send the status. */
void link_set_connected(struct watcher *w, bool connected);
void link_set_last_error(struct watcher *w, const char *s);
void link_count_result(struct watcher *w, bool redefined);
/* Read what pcinumad sent (wait: block until something is) and handle
 * every complete message; a "planned" answer goes to *ret_planned when
 * asked for.  False when pcinumad has gone. */
bool link_read_msgs(struct watcher *w, bool wait, struct wproto_msg *ret_planned);
/* Have pcinumad plan a persistent definition; false when it has gone. */
bool link_plan(struct watcher *w, const char *xml, struct plan_answer *ret);
/* The restarter's calls to pcinumad (restarter.h). */
extern const struct restarter_ops link_restart_ops;

/* --- libvirt-sync.c: libvirt and the domains ---------------------------- */

/* pcinumad asks to look at domain uuid again (NULL: every domain). */
void sync_recheck(struct watcher *w, const char *uuid);
/* (Re)connect to libvirt, now due; on failure, the next try is scheduled. */
void sync_connect(struct watcher *w);
/* Close the connection, if any (its callbacks deregistered). */
void sync_disconnect(struct watcher *w);
/* Apply the events libvirt's thread queued, in order (main thread). */
void sync_apply_queue(struct watcher *w);
/* Wake the main thread (any thread). */
void sync_wake_main(struct watcher *w);
/* Look at the next due domain (one per turn of the main loop). */
void sync_process_turn(struct watcher *w);
/* libvirt's domain schema, or NULL: then each define validates. */
xmlRelaxNGPtr sync_load_schema(void);
/* Forget every domain (at exit). */
void sync_forget_all(struct watcher *w);

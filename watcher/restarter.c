/* Restarts into the plan, pcinuma-watcher's part (restarter.h).
 *
 * A restart's steps, and the thread each runs on:
 *   main    pcinumad asks (wproto "restart"): keep the files the domain
 *           boots from (hard links), wait for its STARTED event;
 *   main    STARTED, detail BOOTED, within the window: suspend it, read
 *           its live XML (SECURE: graphics passwords; MIGRATABLE: what
 *           createXML accepts back), point it at the kept files, check
 *           every file it starts from is there, have pcinumad plan it,
 *           keep a transient domain's XML as a pre-image; queue the job.
 *           A domain its client started paused waits until its client
 *           resumes it (its RESUMED event): restarted at once, a client's
 *           resume() that came while the domain is down would fail
 *           (Nova's; docs/operations.md, "The Nova race");
 *   worker  read the state at the last moment (stopped by its client
 *           meanwhile: leave it), destroy, create the plan, or, if that
 *           fails, the live XML it had;
 *   main    log it, tell pcinumad, drop the kept files.
 * A conditional request (if_persistent: a transient domain the gate let
 * through under transient: leave) goes on only if the domain is
 * persistent by the time it is up, or is defined within the window after
 * (virt-install and virt-manager create it, then define it while it
 * runs); otherwise it is dropped, logged at debug level and not reported.
 * Everything a worker needs is ready before its destroy, so the time the
 * domain is down is the destroy and one create; the time its guest runs
 * without the plan ends with the suspend. */
#include "restarter.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libvirt/virterror.h>
#include <libxml/parser.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util.h"
#include "xmlutil.h"

#define USEC_PER_MSEC UINT64_C(1000)
/* Restarts at once: more wait in the queue. */
#define RESTART_WORKERS 4
/* A STARTED event is remembered this long for a request that comes after
 * it (the watcher was busy when both came). */
#define STARTED_KEEP_USEC (60 * USEC_PER_SEC)

static void free_keys(char **keys, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(keys[i]);
        free(keys);
}

void restart_plan_done(struct restart_plan *p) {
        free(p->xml);
        free(p->summary);
        log_fields_done(&p->fields);
        free_keys(p->keys, p->n_keys);
        *p = (struct restart_plan) {0};
}

/* Files the domain boots from, kept by a second name (a hard link in the
 * same directory) from pcinumad's request to the end of the restart: a
 * client may remove its own once the domain started (virt-install
 * --install removes the kernel and initrd it fetched), and the restart
 * must start them again. */
struct pins {
        char **orig, **pin;
        size_t n;
};

static void pins_drop(struct pins *p) {
        for (size_t i = 0; i < p->n; i++) {
                (void) unlink(p->pin[i]);
                free(p->orig[i]);
                free(p->pin[i]);
        }
        free(p->orig);
        free(p->pin);
        *p = (struct pins) {0};
}

static void pins_take(struct pins *p, const char *uuid, const char *const *files, size_t n) {
        for (size_t i = 0; i < n; i++) {
                struct stat st;
                if (files[i][0] != '/' || stat(files[i], &st) < 0 || !S_ISREG(st.st_mode))
                        continue;
                _cleanup_free_ char *pin = xasprintf("%s.pcinuma-restart-%s", files[i], uuid);
                (void) unlink(pin);
                if (link(files[i], pin) < 0) {
                        log_msg(LOG_WARNING, "Domain %s: cannot keep %s for its restart (link: %s), ignoring", uuid,
                                files[i], strerror(errno));
                        continue;
                }
                p->orig = xreallocarray(p->orig, p->n + 1, sizeof(char *));
                p->pin = xreallocarray(p->pin, p->n + 1, sizeof(char *));
                p->orig[p->n] = xstrdup(files[i]);
                p->pin[p->n++] = TAKE_PTR(pin);
        }
}

/* xml with each kept file's name, as element text, replaced by the name
 * that keeps it. */
static char *pins_apply(const struct pins *p, char *xml) {
        for (size_t i = 0; i < p->n; i++) {
                _cleanup_free_ char *from = xasprintf(">%s<", p->orig[i]), *to = xasprintf(">%s<", p->pin[i]);
                struct strbuf b = {0};
                const char *at = xml, *hit;
                while ((hit = strstr(at, from))) {
                        strbuf_appendn(&b, at, (size_t) (hit - at));
                        strbuf_append(&b, to);
                        at = hit + strlen(from);
                }
                strbuf_append(&b, at);
                free(xml);
                xml = strbuf_steal(&b);
        }
        return xml;
}

struct job {
        char uuid[VIR_UUID_STRING_BUFLEN];
        char *name;
        virDomainPtr dom;               /* the running domain (a reference: it keeps the connection) */
        char *planned, *original;
        struct log_fields fields;
        char **keys;                    /* the fields' names */
        size_t n_keys;
        struct pins pins;
        char *preimage;                 /* a transient domain's live XML, kept */
        uint64_t since, up;             /* the gate's decision; its guest running (STARTED, or RESUMED) */
        bool started_paused;            /* restarted when its client resumed it */
        bool suspended;                 /* pcinuma suspended it until the restart */
        uint64_t suspended_at;

        /* the worker's */
        uint64_t destroy_begin, destroy_end, create_end;
        char *skip_reason;              /* not destroyed: why */
        char *plan_error, *fallback_error;
        enum wproto_outcome outcome;

        struct job *next;
};

struct pending {
        char uuid[VIR_UUID_STRING_BUFLEN];
        uint64_t since, deadline;
        uint64_t window_ms;
        bool if_persistent;             /* a conditional request (watcher-protocol.h) */
        struct pins pins;               /* owned: dropped when the request ends */
};

/* A conditional request's domain, up and still transient: restarted if
 * its client defines it (its DEFINED event) by the deadline. */
struct defining {
        char uuid[VIR_UUID_STRING_BUFLEN];
        uint64_t since, up, deadline;
        struct pins pins;
};

struct started {
        char uuid[VIR_UUID_STRING_BUFLEN];
        uint64_t at;
        int detail;
        bool stopped;
};

/* A domain started paused, to be restarted when its client resumes it. */
struct waiting {
        char uuid[VIR_UUID_STRING_BUFLEN];
        uint64_t since;
        struct pins pins;
};

/* A request whose STARTED event had come already: acted on from the
 * timer, never from inside the read of pcinumad's message (the restart's
 * own plan request would nest in another one's wait). */
struct ready {
        struct pending p;
        uint64_t up;
        int detail;
};

struct restarter {
        const struct restarter_ops *ops;
        void *userdata;
        struct preimage_store *preimages;

        struct pending *pending;
        size_t n_pending;
        struct started *started;
        size_t n_started;
        struct ready *ready;
        size_t n_ready;
        struct waiting *waiting;
        size_t n_waiting;
        struct defining *defining;
        size_t n_defining;
        virConnectPtr conn;             /* for the ready ones (a reference) */

        pthread_mutex_t lock;
        pthread_cond_t cond;            /* a job queued, a job's old run stopped, stopping */
        struct job *queue, *queue_tail;
        struct job **active;            /* queued or running, for the events the main thread sees */
        size_t n_active;
        pthread_t threads[RESTART_WORKERS];
        size_t n_threads, n_idle;
        bool stopping;
        int pipe[2];                    /* finished jobs, worker -> main */
};

static char *lv_error_dup(void) {
        const char *m = virGetLastErrorMessage();
        return xstrdup(m ? m : "unknown libvirt error");
}

static void job_free(struct job *j) {
        if (!j)
                return;
        if (j->dom)
                virDomainFree(j->dom);
        free(j->name);
        free(j->planned);
        free(j->original);
        log_fields_done(&j->fields);
        free_keys(j->keys, j->n_keys);
        pins_drop(&j->pins);
        free(j->preimage);
        free(j->skip_reason);
        free(j->plan_error);
        free(j->fallback_error);
        free(j);
}

DEFINE_TRIVIAL_CLEANUP_FUNC(struct job *, job_free)

/* --- the worker ------------------------------------------------------------ */

static void run_job(struct restarter *r, struct job *j) {
        int state = VIR_DOMAIN_NOSTATE, reason = 0;
        if (virDomainGetState(j->dom, &state, &reason, 0) < 0) {
                j->outcome = WPROTO_OUTCOME_SKIPPED;
                _cleanup_free_ char *e = lv_error_dup();
                j->skip_reason = xasprintf("its state cannot be read: %s", e);
                return;
        }
        if (state != VIR_DOMAIN_RUNNING && state != VIR_DOMAIN_PAUSED) {
                /* The client (or the guest) stopped it meanwhile: theirs. */
                j->outcome = WPROTO_OUTCOME_SKIPPED;
                j->skip_reason = xstrdup("it is not running any more");
                return;
        }
        virConnectPtr conn = virDomainGetConnect(j->dom);

        j->destroy_begin = now_usec(CLOCK_MONOTONIC);
        if (virDomainDestroy(j->dom) < 0) {
                j->outcome = WPROTO_OUTCOME_SKIPPED;
                _cleanup_free_ char *e = lv_error_dup();
                j->skip_reason = xasprintf("destroying it failed: %s", e);
                /* It runs on as it was: let it run if pcinuma paused it. */
                if (j->suspended)
                        (void) virDomainResume(j->dom);
                return;
        }
        j->destroy_end = now_usec(CLOCK_MONOTONIC);
        virDomainPtr nd = virDomainCreateXML(conn, j->planned, 0);
        if (nd)
                j->outcome = WPROTO_OUTCOME_RESTARTED;
        else {
                j->plan_error = lv_error_dup();
                nd = virDomainCreateXML(conn, j->original, 0);
                if (nd)
                        j->outcome = WPROTO_OUTCOME_FALLBACK;
                else {
                        j->outcome = WPROTO_OUTCOME_LOST;
                        j->fallback_error = lv_error_dup();
                }
        }
        j->create_end = now_usec(CLOCK_MONOTONIC);
        if (nd)
                virDomainFree(nd);
}

static void *worker(void *userdata) {
        struct restarter *r = userdata;
        pthread_mutex_lock(&r->lock);
        for (;;) {
                while (!r->queue && !r->stopping) {
                        r->n_idle++;
                        pthread_cond_wait(&r->cond, &r->lock);
                        r->n_idle--;
                }
                struct job *j = r->queue;
                if (!j)
                        break;          /* stopping, nothing left */
                r->queue = j->next;
                if (!r->queue)
                        r->queue_tail = NULL;
                pthread_mutex_unlock(&r->lock);
                run_job(r, j);
                /* Hand it back to the main thread (a pointer is written
                 * whole: it is less than PIPE_BUF). */
                ssize_t n;
                do
                        n = write(r->pipe[1], &j, sizeof j);
                while (n < 0 && errno == EINTR);
                pthread_mutex_lock(&r->lock);
        }
        pthread_mutex_unlock(&r->lock);
        return NULL;
}

/* --- the main thread ---------------------------------------------------------- */

static void report(struct restarter *r, const char *uuid, enum wproto_outcome o, uint64_t unplanned, uint64_t total) {
        const struct wproto_restarted m = { .uuid = uuid, .outcome = o, .unplanned_us = unplanned, .total_us = total };
        r->ops->report(r->userdata, &m);
}

/* A restart that does not happen: logged, and pcinumad told. */
_printf_(5, 6)
static void skip(struct restarter *r, const char *uuid, const struct log_fields *fields, int prio, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        _cleanup_free_ char *why = xvasprintf(fmt, ap);
        va_end(ap);
        struct log_fields own = {0};
        if (!fields) {
                log_fields_add(&own, "PCINUMA_UUID", "%s", uuid);
                log_fields_add(&own, "PCINUMA_PHASE", "restart");
                fields = &own;
        }
        const char *name = uuid;
        for (size_t i = 0; i < fields->n; i++)
                if (streq(fields->v[i].key, "PCINUMA_DOMAIN") && fields->v[i].value[0])
                        name = fields->v[i].value;
        log_event(prio, PCINUMA_MID_RESTART_SKIPPED, fields, "Domain %s was not restarted into its plan: %s", name, why);
        log_fields_done(&own);
        report(r, uuid, WPROTO_OUTCOME_SKIPPED, 0, 0);
}

static void job_done(struct restarter *r, struct job *j) {
        pthread_mutex_lock(&r->lock);
        for (size_t i = 0; i < r->n_active; i++)
                if (r->active[i] == j) {
                        r->active[i] = r->active[--r->n_active];
                        break;
                }
        pthread_mutex_unlock(&r->lock);

        if (j->outcome == WPROTO_OUTCOME_SKIPPED) {
                skip(r, j->uuid, &j->fields, LOG_WARNING, "%s", j->skip_reason ? j->skip_reason : "?");
                job_free(j);
                return;
        }
        /* The unplanned run, the time its guest ran without the plan:
         * from its STARTED event (or its client's resume) to pcinuma's
         * suspend; if the suspend failed, up to the end of the destroy (an
         * upper bound). */
        uint64_t unplanned = j->suspended ? j->suspended_at - j->up : j->destroy_end - j->up;
        uint64_t total = j->create_end - j->since;
        struct log_fields *f = &j->fields;
        log_fields_add(f, "PCINUMA_UNPLANNED_US", "%" PRIu64, unplanned);
        log_fields_add(f, "PCINUMA_TOTAL_US", "%" PRIu64, total);
        log_fields_add(f, "PCINUMA_DESTROY_US", "%" PRIu64, j->destroy_end - j->destroy_begin);
        log_fields_add(f, "PCINUMA_CREATE_US", "%" PRIu64, j->create_end - j->destroy_end);
        log_fields_add(f, "PCINUMA_DOWN_US", "%" PRIu64, j->create_end - j->destroy_begin);
        log_fields_add(f, "PCINUMA_STARTED_PAUSED", "%s", j->started_paused ? "yes" : "no");
        if (j->preimage)
                log_fields_add(f, "PCINUMA_PREIMAGE", "%s", j->preimage);
        const char *state = j->started_paused ? " (started paused, restarted when its client resumed it)" : "";
        switch (j->outcome) {
        case WPROTO_OUTCOME_RESTARTED:
                log_event(LOG_INFO, PCINUMA_MID_RESTARTED, f,
                          "Domain %s restarted into its plan: it ran %.0f ms without it; %.0f ms from its start to "
                          "the planned domain running%s",
                          j->name, (double) unplanned / 1000.0, (double) total / 1000.0, state);
                break;
        case WPROTO_OUTCOME_FALLBACK:
                log_fields_add(f, "PCINUMA_LIBVIRT_ERROR", "%s", j->plan_error);
                log_event(LOG_ERR, PCINUMA_MID_RESTART_FAILED, f,
                          "Domain %s could not be started with its plan (%s); pcinuma started it again as its client "
                          "did, without the plan%s",
                          j->name, j->plan_error, state);
                break;
        case WPROTO_OUTCOME_LOST:
                log_fields_add(f, "PCINUMA_LIBVIRT_ERROR", "%s", j->plan_error);
                log_fields_add(f, "PCINUMA_FALLBACK_ERROR", "%s", j->fallback_error);
                log_event(LOG_ERR, PCINUMA_MID_RESTART_FAILED, f,
                          "Domain %s could not be started with its plan (%s), nor again as its client did (%s): it is "
                          "shut off%s%s",
                          j->name, j->plan_error, j->fallback_error,
                          j->preimage ? "; its XML is in " : "", j->preimage ? j->preimage : "");
                break;
        default:
                break;
        }
        report(r, j->uuid, j->outcome, unplanned, total);
        job_free(j);
}

int restarter_fd(const struct restarter *r) {
        return r ? r->pipe[0] : -1;
}

void restarter_drain(struct restarter *r) {
        if (!r)
                return;
        struct job *j;
        for (;;) {
                ssize_t n = read(r->pipe[0], &j, sizeof j);
                if (n == (ssize_t) sizeof j)
                        job_done(r, j);
                else if (n < 0 && errno == EINTR)
                        continue;
                else
                        return;
        }
}

static void queue_job(struct restarter *r, struct job *j) {
        pthread_mutex_lock(&r->lock);
        j->next = NULL;
        if (r->queue_tail)
                r->queue_tail->next = j;
        else
                r->queue = j;
        r->queue_tail = j;
        *GROW(r->active, r->n_active) = j;
        bool spawn = r->n_idle == 0 && r->n_threads < RESTART_WORKERS;
        pthread_cond_broadcast(&r->cond);
        pthread_mutex_unlock(&r->lock);
        if (spawn) {
                int e = pthread_create(&r->threads[r->n_threads], NULL, worker, r);
                if (e == 0)
                        r->n_threads++;
                else if (r->n_threads == 0)
                        log_msg(LOG_ERR, "Cannot start a thread for restarts into the plan: %s; domain %s waits", strerror(e),
                                j->name);
        }
}

/* path, if it is an absolute path that is not there; else NULL. */
static char *missing_path(const char *path) {
        struct stat st;
        return path && path[0] == '/' && stat(path, &st) < 0 ? xstrdup(path) : NULL;
}

/* The first file the XML starts from that is not there (its kernel,
 * initrd, device tree, a disk or CD-ROM image), or NULL: a domain whose
 * start could not be repeated is not destroyed.  libvirt's elements, in
 * no namespace (xmlutil.h), in this order: every <os>'s kernel, initrd,
 * dtb, then the file of every <disk type='file'>'s <source>. */
static char *missing_file(const char *xml) {
        static const char *const boot[] = { "kernel", "initrd", "dtb" };
        _cleanup_xmldoc_ xmlDocPtr doc = xmlReadMemory(xml, (int) strlen(xml), "live.xml", NULL,
                                                       XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
        if (!doc)
                return xstrdup("(its live XML does not parse)");
        xmlNodePtr root = xmlDocGetRootElement(doc);
        if (!xml_is(root, "domain"))
                return NULL;
        char *missing = NULL;
        for (size_t i = 0; i < ELEMENTSOF(boot) && !missing; i++)
                for (xmlNodePtr os = xml_child(root, "os"); os && !missing; os = xml_next_child(os, "os"))
                        for (xmlNodePtr f = xml_child(os, boot[i]); f && !missing; f = xml_next_child(f, boot[i])) {
                                _cleanup_free_ char *v = xml_content(f);
                                missing = missing_path(v);
                        }
        for (xmlNodePtr devs = xml_child(root, "devices"); devs && !missing; devs = xml_next_child(devs, "devices"))
                for (xmlNodePtr disk = xml_child(devs, "disk"); disk && !missing; disk = xml_next_child(disk, "disk")) {
                        if (!xml_prop_is(disk, "type", "file"))
                                continue;
                        for (xmlNodePtr src = xml_child(disk, "source"); src && !missing; src = xml_next_child(src, "source")) {
                                _cleanup_free_ char *v = xml_prop(src, "file");
                                missing = missing_path(v);
                        }
                }
        return missing;
}

/* begin()'s first step: the domain must still be up, and not paused by
 * its client (then it waits, with its pins, for its RESUMED event).  True,
 * with its state in *ret_state, to go on. */
static bool begin_check_state(struct restarter *r, virDomainPtr dom, const char *uuid, uint64_t since,
                              struct pins *pins, bool resumed, const struct log_fields *f, int *ret_state) {
        int state = VIR_DOMAIN_NOSTATE, reason = 0;
        if (virDomainGetState(dom, &state, &reason, 0) < 0 ||
            (state != VIR_DOMAIN_RUNNING && state != VIR_DOMAIN_PAUSED)) {
                skip(r, uuid, f, LOG_NOTICE, "it is not running any more");
                return false;
        }
        if (state == VIR_DOMAIN_PAUSED && !resumed) {
                /* Started paused: its guest runs nothing yet.  Restarted
                 * now, a resume() from its client while it is down would
                 * fail; it is restarted when its client resumes it. */
                struct waiting *wt = GROW(r->waiting, r->n_waiting);
                snprintf(wt->uuid, sizeof wt->uuid, "%s", uuid);
                wt->since = since;
                wt->pins = *pins;
                *pins = (struct pins) {0};
                log_msg(LOG_INFO, "Domain %s was started paused: pcinuma restarts it into its plan when it is resumed",
                        virDomainGetName(dom));
                return false;
        }
        *ret_state = state;
        return true;
}

/* The second: stop its guest (from now on it runs nothing unplanned; *j
 * notes when), then read the live XML to start again, pointed at the kept
 * files, all of which must be there.  NULL when it cannot be restarted
 * (logged; the guest runs on). */
static char *begin_suspend_read(struct restarter *r, virDomainPtr dom, const char *uuid, int state,
                                const struct pins *pins, const struct log_fields *f, struct job *j) {
        if (state == VIR_DOMAIN_RUNNING && virDomainSuspend(dom) == 0) {
                j->suspended = true;
                j->suspended_at = now_usec(CLOCK_MONOTONIC);
        }
        char *live = virDomainGetXMLDesc(dom, VIR_DOMAIN_XML_SECURE | VIR_DOMAIN_XML_MIGRATABLE);
        if (!live) {
                skip(r, uuid, f, LOG_WARNING, "its live XML cannot be read: %s", virGetLastErrorMessage());
                return NULL;
        }
        live = pins_apply(pins, live);
        _cleanup_free_ char *missing = missing_file(live);
        if (missing) {
                skip(r, uuid, f, LOG_WARNING, "it starts from %s, which is gone (its client removed it once the "
                     "domain started): a restart could not start it again", missing);
                free(live);
                return NULL;
        }
        return live;
}

/* The last: a transient domain has no definition to fall back on, so its
 * XML is kept, in case neither start works. */
static void begin_keep_transient(struct restarter *r, struct job *j) {
        if (virDomainIsPersistent(j->dom) != 0)
                return;
        _cleanup_free_ char *err = NULL;
        if (preimage_save(r->preimages, j->name, j->uuid, j->original, &j->preimage, &err) < 0) {
                log_msg(LOG_WARNING, "Domain %s: cannot keep its XML before its restart: %s, ignoring", j->name, err);
                return;
        }
        struct preimage_dropped d;
        preimage_prune(r->preimages, j->preimage, j->uuid, &d);
        if (d.n_own + d.n_others > 0)
                log_msg(d.over ? LOG_WARNING : LOG_INFO,
                        "Domain %s: keeping its XML before its restart dropped %zu older pre-images "
                        "(%zu of its own, %zu of other domains; %" PRIu64 " bytes): %s",
                        j->name, d.n_own + d.n_others, d.n_own, d.n_others, d.bytes, strna(d.files));
        preimage_dropped_done(&d);
}

/* The domain came up (STARTED, BOOTED) within the window: get everything
 * ready (the steps above, and pcinumad's plan of its live XML), then hand
 * it to a worker. */
static void begin(struct restarter *r, virDomainPtr dom, const char *uuid, uint64_t since, uint64_t up,
                  struct pins *pins, bool resumed) {
        const char *name = virDomainGetName(dom);
        struct log_fields f = {0};
        log_fields_add(&f, "PCINUMA_DOMAIN", "%s", name);
        log_fields_add(&f, "PCINUMA_UUID", "%s", uuid);
        log_fields_add(&f, "PCINUMA_PHASE", "restart");
        int state = VIR_DOMAIN_NOSTATE;
        _cleanup_(job_freep) struct job *j = xcalloc(1, sizeof(*j));
        bool go = begin_check_state(r, dom, uuid, since, pins, resumed, &f, &state);
        char *live = go ? begin_suspend_read(r, dom, uuid, state, pins, &f, j) : NULL;
        log_fields_done(&f);
        if (!live) {
                if (j->suspended)
                        (void) virDomainResume(dom);
                return;
        }
        _cleanup_(restart_plan_done) struct restart_plan p = {0};
        bool asked = r->ops->plan(r->userdata, uuid, live, &p);    /* false: pcinumad has gone */
        if (!asked || !p.restart) {
                if (asked)
                        skip(r, uuid, &p.fields, p.prio, "%s", p.summary ? p.summary : "pcinumad did not plan it");
                free(live);
                if (j->suspended)
                        (void) virDomainResume(dom);
                return;
        }
        snprintf(j->uuid, sizeof j->uuid, "%s", uuid);
        j->name = xstrdup(name);
        virDomainRef(dom);
        j->dom = dom;
        j->planned = TAKE_PTR(p.xml);
        j->original = live;
        j->fields = p.fields;
        p.fields = (struct log_fields) {0};
        j->keys = TAKE_PTR(p.keys);
        j->n_keys = p.n_keys;
        p.n_keys = 0;
        j->since = since;
        j->up = up;
        j->started_paused = resumed;
        j->pins = *pins;
        *pins = (struct pins) {0};
        begin_keep_transient(r, j);
        queue_job(r, TAKE_PTR(j));
}

static const char *start_detail(int detail) {
        switch (detail) {
        case VIR_DOMAIN_EVENT_STARTED_MIGRATED:
                return "it came in by migration";
        case VIR_DOMAIN_EVENT_STARTED_RESTORED:
                return "it was restored from a saved state";
        case VIR_DOMAIN_EVENT_STARTED_FROM_SNAPSHOT:
                return "it was started from a snapshot";
        case VIR_DOMAIN_EVENT_STARTED_WAKEUP:
                return "it woke up from suspend";
        default:
                return "it did not boot";
        }
}

/* A conditional request that does not go on: not pcinumad's business. */
static void drop_conditional(const char *uuid, const char *why) {
        log_msg(LOG_DEBUG, "Domain %s is transient (transient: leave): not restarted into its plan: %s", uuid, why);
}

/* The STARTED event of a domain a restart was asked for. */
static void act(struct restarter *r, virDomainPtr dom, const char *uuid, struct pending *p, int detail, uint64_t up) {
        if (p->if_persistent && virDomainIsPersistent(dom) != 1) {
                /* Transient now: its client may define it in a moment
                 * (virt-install's defineXML right after its createXML). */
                if (up > p->deadline || detail != VIR_DOMAIN_EVENT_STARTED_BOOTED)
                        drop_conditional(uuid, up > p->deadline ? "it came up after the restart window"
                                                                : start_detail(detail));
                else {
                        struct defining *df = GROW(r->defining, r->n_defining);
                        snprintf(df->uuid, sizeof df->uuid, "%s", uuid);
                        df->since = p->since;
                        df->up = up;
                        df->deadline = p->deadline;
                        df->pins = p->pins;
                        p->pins = (struct pins) {0};
                }
                pins_drop(&p->pins);
                return;
        }
        if (up > p->deadline)
                skip(r, uuid, NULL, LOG_WARNING, "it came up %.1f s after its start began, beyond the restart window "
                     "of %" PRIu64 " ms (restart_window_ms)", (double) (up - p->since) / 1e6, p->window_ms);
        else if (detail != VIR_DOMAIN_EVENT_STARTED_BOOTED)
                skip(r, uuid, NULL, LOG_INFO, "%s", start_detail(detail));
        else
                begin(r, dom, uuid, p->since, up, &p->pins, false);
        pins_drop(&p->pins);   /* unless begin() took them */
}

/* When restarter_work() has something to do next; 0: nothing. */
static uint64_t next_due(const struct restarter *r, uint64_t now) {
        if (r->n_ready)
                return now;
        uint64_t next = 0;
        for (size_t i = 0; i < r->n_pending; i++)
                if (!next || r->pending[i].deadline < next)
                        next = r->pending[i].deadline;
        for (size_t i = 0; i < r->n_defining; i++)
                if (!next || r->defining[i].deadline < next)
                        next = r->defining[i].deadline;
        for (size_t i = 0; i < r->n_started; i++) {
                uint64_t forget = r->started[i].at + STARTED_KEEP_USEC;
                if (!next || forget < next)
                        next = forget;
        }
        return next;
}

uint64_t restarter_work(struct restarter *r, uint64_t now) {
        if (!r)
                return 0;
        while (r->n_ready > 0) {
                struct ready x = r->ready[--r->n_ready];
                virDomainPtr dom = r->conn ? virDomainLookupByUUIDString(r->conn, x.p.uuid) : NULL;
                if (dom) {
                        act(r, dom, x.p.uuid, &x.p, x.detail, x.up);
                        virDomainFree(dom);
                } else {
                        if (x.p.if_persistent)
                                drop_conditional(x.p.uuid, "it is gone");
                        else
                                skip(r, x.p.uuid, NULL, LOG_NOTICE, "it is gone");
                        pins_drop(&x.p.pins);
                }
        }
        for (size_t i = 0; i < r->n_pending;) {
                struct pending p = r->pending[i];
                if (p.deadline >= now) {
                        i++;
                        continue;
                }
                r->pending[i] = r->pending[--r->n_pending];
                if (p.if_persistent)
                        drop_conditional(p.uuid, "it did not come up within the restart window");
                else
                        skip(r, p.uuid, NULL, LOG_NOTICE, "it did not come up within the restart window of %" PRIu64
                             " ms (restart_window_ms) after its start began", p.window_ms);
                pins_drop(&p.pins);
        }
        for (size_t i = 0; i < r->n_defining;) {
                struct defining df = r->defining[i];
                if (df.deadline >= now) {
                        i++;
                        continue;
                }
                r->defining[i] = r->defining[--r->n_defining];
                drop_conditional(df.uuid, "it was not defined within the restart window");
                pins_drop(&df.pins);
        }
        /* Forget old STARTED events. */
        size_t w = 0;
        for (size_t i = 0; i < r->n_started; i++)
                if (r->started[i].at + STARTED_KEEP_USEC > now)
                        r->started[w++] = r->started[i];
        r->n_started = w;
        return next_due(r, now);
}

void restarter_request(struct restarter *r, virConnectPtr conn, const struct wproto_restart *req) {
        if (!r || strlen(req->uuid) >= VIR_UUID_STRING_BUFLEN)
                return;
        struct pending p = { .since = req->since_us, .deadline = req->since_us + req->window_ms * USEC_PER_MSEC,
                             .window_ms = req->window_ms, .if_persistent = req->if_persistent };
        snprintf(p.uuid, sizeof p.uuid, "%s", req->uuid);
        pins_take(&p.pins, p.uuid, req->files, req->n_files);
        /* Its STARTED event may have come first, if this process was busy
         * when both did: one after the gate's decision, not stopped since,
         * is this start's. */
        for (size_t i = 0; i < r->n_started; i++) {
                struct started *s = &r->started[i];
                if (!streq(s->uuid, p.uuid) || s->stopped || s->at < p.since)
                        continue;
                s->stopped = true;      /* used: at most once per start */
                *GROW(r->ready, r->n_ready) = (struct ready) { .p = p, .up = s->at, .detail = s->detail };
                if (conn && conn != r->conn) {
                        if (r->conn)
                                virConnectClose(r->conn);
                        virConnectRef(conn);
                        r->conn = conn;
                }
                return;
        }
        for (size_t i = 0; i < r->n_pending; i++)
                if (streq(r->pending[i].uuid, p.uuid)) {
                        pins_drop(&r->pending[i].pins);
                        r->pending[i] = p;
                        return;
                }
        *GROW(r->pending, r->n_pending) = p;
}

void restarter_lifecycle(struct restarter *r, virDomainPtr dom, const char *uuid, int event, int detail, uint64_t at) {
        if (!r || !uuid[0])
                return;
        /* A domain started paused: restarted when its client resumes it;
         * not if it stops first. */
        for (size_t i = 0; i < r->n_waiting; i++) {
                if (!streq(r->waiting[i].uuid, uuid) ||
                    (event != VIR_DOMAIN_EVENT_RESUMED && event != VIR_DOMAIN_EVENT_STOPPED))
                        continue;
                struct waiting wt = r->waiting[i];
                r->waiting[i] = r->waiting[--r->n_waiting];
                if (event == VIR_DOMAIN_EVENT_RESUMED)
                        begin(r, dom, uuid, wt.since, at, &wt.pins, true);
                else
                        skip(r, uuid, NULL, LOG_INFO, "it was started paused and stopped before it was resumed");
                pins_drop(&wt.pins);
                break;
        }
        /* A conditional request's domain, up and transient: defined now
         * (restarted like a persistent domain), or stopped. */
        for (size_t i = 0; i < r->n_defining; i++) {
                if (!streq(r->defining[i].uuid, uuid) ||
                    (event != VIR_DOMAIN_EVENT_DEFINED && event != VIR_DOMAIN_EVENT_STOPPED))
                        continue;
                struct defining df = r->defining[i];
                r->defining[i] = r->defining[--r->n_defining];
                if (event == VIR_DOMAIN_EVENT_STOPPED)
                        drop_conditional(uuid, "it stopped before it was defined");
                else if (at > df.deadline)
                        drop_conditional(uuid, "it was defined after the restart window");
                else
                        begin(r, dom, uuid, df.since, df.up, &df.pins, false);
                pins_drop(&df.pins);
                break;
        }
        if (event == VIR_DOMAIN_EVENT_STOPPED) {
                for (size_t i = 0; i < r->n_started; i++)
                        if (streq(r->started[i].uuid, uuid))
                                r->started[i].stopped = true;
                return;
        }
        if (event != VIR_DOMAIN_EVENT_STARTED)
                return;
        for (size_t i = 0; i < r->n_pending; i++) {
                if (!streq(r->pending[i].uuid, uuid))
                        continue;
                struct pending p = r->pending[i];
                r->pending[i] = r->pending[--r->n_pending];
                act(r, dom, uuid, &p, detail, at);
                return;
        }
        /* No request (yet): remember it, for one that comes late. */
        struct started *s = NULL;
        for (size_t i = 0; i < r->n_started && !s; i++)
                if (streq(r->started[i].uuid, uuid))
                        s = &r->started[i];
        if (!s)
                s = GROW(r->started, r->n_started);
        *s = (struct started) { .at = at, .detail = detail };
        snprintf(s->uuid, sizeof s->uuid, "%s", uuid);
}

void restarter_disconnected(struct restarter *r) {
        if (!r)
                return;
        while (r->n_pending > 0) {
                struct pending p = r->pending[--r->n_pending];
                if (p.if_persistent)
                        drop_conditional(p.uuid, "the libvirt connection was lost before it came up");
                else
                        skip(r, p.uuid, NULL, LOG_WARNING, "the libvirt connection was lost before it came up");
                pins_drop(&p.pins);
        }
        while (r->n_ready > 0) {
                struct ready x = r->ready[--r->n_ready];
                if (x.p.if_persistent)
                        drop_conditional(x.p.uuid, "the libvirt connection was lost before it could be restarted");
                else
                        skip(r, x.p.uuid, NULL, LOG_WARNING, "the libvirt connection was lost before it could be "
                             "restarted");
                pins_drop(&x.p.pins);
        }
        while (r->n_waiting > 0) {
                struct waiting wt = r->waiting[--r->n_waiting];
                skip(r, wt.uuid, NULL, LOG_WARNING, "the libvirt connection was lost before it was resumed");
                pins_drop(&wt.pins);
        }
        while (r->n_defining > 0) {
                struct defining df = r->defining[--r->n_defining];
                drop_conditional(df.uuid, "the libvirt connection was lost before it was defined");
                pins_drop(&df.pins);
        }
        if (r->conn)
                virConnectClose(r->conn);
        r->conn = NULL;
        r->n_started = 0;
}

struct restarter *restarter_new(const struct restarter_ops *ops, void *userdata, struct preimage_store *preimages) {
        struct restarter *r = xcalloc(1, sizeof(*r));
        r->ops = ops;
        r->userdata = userdata;
        r->preimages = preimages;
        r->pipe[0] = r->pipe[1] = -1;
        pthread_mutex_init(&r->lock, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&r->cond, &ca);
        pthread_condattr_destroy(&ca);
        if (pipe2(r->pipe, O_CLOEXEC) < 0) {
                log_errno(LOG_ERR, -errno, "Cannot set up restarts into the plan: pipe: %m");
                return restarter_free(r);
        }
        (void) fcntl(r->pipe[0], F_SETFL, O_NONBLOCK);
        return r;
}

struct restarter *restarter_free(struct restarter *r) {
        if (!r)
                return NULL;
        pthread_mutex_lock(&r->lock);
        r->stopping = true;
        pthread_cond_broadcast(&r->cond);
        pthread_mutex_unlock(&r->lock);
        /* The queued and running restarts finish: a domain destroyed must
         * be started again. */
        for (size_t i = 0; i < r->n_threads; i++)
                pthread_join(r->threads[i], NULL);
        if (r->pipe[0] >= 0)
                restarter_drain(r);
        /* Jobs nobody ran (no thread could start): their domains run on
         * as they were, unsuspended. */
        for (struct job *j = r->queue, *next; j; j = next) {
                next = j->next;
                if (j->suspended)
                        (void) virDomainResume(j->dom);
                job_free(j);
        }
        if (r->pipe[0] >= 0)
                close(r->pipe[0]);
        if (r->pipe[1] >= 0)
                close(r->pipe[1]);
        if (r->conn)
                virConnectClose(r->conn);
        for (size_t i = 0; i < r->n_pending; i++)
                pins_drop(&r->pending[i].pins);
        for (size_t i = 0; i < r->n_ready; i++)
                pins_drop(&r->ready[i].p.pins);
        for (size_t i = 0; i < r->n_waiting; i++)
                pins_drop(&r->waiting[i].pins);
        for (size_t i = 0; i < r->n_defining; i++)
                pins_drop(&r->defining[i].pins);
        free(r->defining);
        free(r->waiting);
        free(r->pending);
        free(r->started);
        free(r->ready);
        free(r->active);
        pthread_cond_destroy(&r->cond);
        pthread_mutex_destroy(&r->lock);
        free(r);
        return NULL;
}

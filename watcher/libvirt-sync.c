/* pcinuma-watcher's libvirt sync: the connection to libvirt, the events
 * libvirt's thread queues (applied here, on the main thread), and the
 * domains it keeps planned, one at a time, with pcinumad's plans.
 *
 * Users edit domains while this process redefines them, and libvirt has
 * no compare-and-swap (docs/operations.md, "Edits while pcinuma
 * redefines, and pre-images").  So:
 *   - a domain is looked at only once its DEFINED/UNDEFINED events have
 *     been quiet for --settle-ms, so a burst of edits settles first (a
 *     recheck pcinumad asks for, e.g. after a refused start, is acted on
 *     at once: a start means the editing is over);
 *   - the plan is defined only if a re-read of the definition, the last
 *     call before the define, equals what was planned from; otherwise it
 *     is planned again (MAX_ROUNDS times at most);
 *   - the definition it replaces is saved first (preimage.h);
 *   - what cannot be prevented is detected afterwards: once the events
 *     after our define are quiet, more of them than our define and the
 *     changes we saw explain means another define landed between the
 *     re-read and ours (a conflict, logged, then planned again); our own
 *     event saying ADDED, with no other define since, means our define
 *     re-created a domain a user had undefined meanwhile, which is
 *     undefined again (never when another define came: that ADDED may be
 *     a client's defining the domain anew, see verify()). */
#include <errno.h>
#include <inttypes.h>
#include <libvirt/virterror.h>
#include <libxml/parser.h>
#include <libxml/relaxng.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mark-urn.h"
#include "watcher.h"

/* A domain redefined this many times within LOOP_WINDOW_SEC means the
 * plan is not idempotent for it (a bug): stop and say so rather than spin. */
#define LOOP_LIMIT 4
#define LOOP_WINDOW_SEC 60
/* Re-reads that differ from what was planned before we give up for now
 * (the domain's next event brings it back). */
#define MAX_ROUNDS 5
/* Our define's own event is normally in within milliseconds; without it
 * the define cannot be checked, and after this long we stop waiting. */
#define VERIFY_TIMEOUT_USEC (10 * USEC_PER_SEC)
/* libvirt's domain schema, shipped with the client library (libvirt0). */
#define LIBVIRT_DOMAIN_SCHEMA "/usr/share/libvirt/schemas/domain.rng"

/* --- the domains we know of ---------------------------------------------- */

static void verify_clear(struct dom_state *s) {
        s->verifying = false;
        free(s->readback);
        s->readback = NULL;
        free(s->preimage);
        s->preimage = NULL;
}

static struct dom_state *state_find(struct watcher *w, const char *uuid, bool create) {
        for (size_t i = 0; i < w->n_states; i++)
                if (streq(w->states[i]->uuid, uuid))
                        return w->states[i];
        if (!create)
                return NULL;
        struct dom_state *s = xcalloc(1, sizeof(*s));
        snprintf(s->uuid, sizeof s->uuid, "%s", uuid);
        s->last_detail = -1;
        *GROW(w->states, w->n_states) = s;
        return s;
}

/* A domain that is gone leaves nothing behind: the table stays as large
 * as the set of domains. */
static void state_forget(struct watcher *w, struct dom_state *s) {
        for (size_t i = 0; i < w->n_states; i++)
                if (w->states[i] == s) {
                        w->states[i] = w->states[--w->n_states];
                        break;
                }
        verify_clear(s);
        free(s->suspect_preimage);
        free(s);
}

static size_t count_pending(struct watcher *w) {
        size_t n = 0;
        for (size_t i = 0; i < w->n_states; i++)
                n += w->states[i]->due || w->states[i]->verifying;
        return n + w->check_all;
}

/* Note when the earliest due domain is due, and tell pcinumad when the
 * number of pending domains changed. */
static void schedule(struct watcher *w) {
        uint64_t now = now_usec(CLOCK_MONOTONIC), next = 0;
        for (size_t i = 0; i < w->n_states; i++) {
                uint64_t d = w->states[i]->due;
                if (d && (!next || d < next))
                        next = d;
        }
        w->process_due = w->check_all ? now : next;
        size_t pending = count_pending(w);
        if (pending != w->last_pending) {
                w->last_pending = pending;
                link_send_status(w);
        }
}

/* pcinumad asks (a start found the domain unplanned, the host or the
 * policy changed): not an edit, so no waiting for quiet (NULL: all). */
void sync_recheck(struct watcher *w, const char *uuid) {
        if (!uuid)
                w->check_all = true;
        else if (strlen(uuid) < VIR_UUID_STRING_BUFLEN)
                state_find(w, uuid, true)->due = now_usec(CLOCK_MONOTONIC);
        schedule(w);
}

/* --- reading and logging ------------------------------------------------- */

/* The persistent definition (SECURE: a redefinition must not lose
 * passwords and keys), or NULL when the domain is gone or transient. */
static char *read_definition(virDomainPtr dom) {
        if (virDomainIsPersistent(dom) != 1)
                return NULL;
        return virDomainGetXMLDesc(dom, VIR_DOMAIN_XML_INACTIVE | VIR_DOMAIN_XML_SECURE);
}

static void conflict_fields(struct log_fields *f, const char *name, const struct dom_state *s, const char *kind,
                            uint64_t events, const char *preimage) {
        log_fields_add(f, "PCINUMA_DOMAIN", "%s", name);
        log_fields_add(f, "PCINUMA_UUID", "%s", s->uuid);
        log_fields_add(f, "PCINUMA_CONFLICT", "%s", kind);
        log_fields_add(f, "PCINUMA_EVENTS", "%" PRIu64, events);
        if (preimage)
                log_fields_add(f, "PCINUMA_PREIMAGE", "%s", preimage);
}

static void redefine_failed(struct watcher *w, struct plan_answer *plan, const char *name, const char *why) {
        log_fields_add(&plan->fields, "PCINUMA_LIBVIRT_ERROR", "%s", why);
        log_event(LOG_ERR, PCINUMA_MID_REDEFINE_FAILED, &plan->fields,
                  "Domain %s was not redefined; its definition is unchanged: %s", name, why);
        link_count_result(w, false);
        _cleanup_free_ char *msg = xasprintf("redefining %s: %s", name, why);
        link_set_last_error(w, msg);
}

/* --- checking our last define ------------------------------------------- */

/* Our define re-created a domain that was undefined meanwhile (its event
 * said ADDED).  Undefine it again, unless it runs now (someone started
 * what we brought back: theirs to remove) or holds anything but our own
 * definition. */
static void undo_recreate(struct watcher *w, struct dom_state *s, virDomainPtr dom, const char *name) {
        struct log_fields f = {0};
        if (virDomainIsActive(dom) == 1) {
                conflict_fields(&f, name, s, "recreated-running", s->events - s->verify_base, s->preimage);
                log_event(LOG_WARNING, PCINUMA_MID_REDEFINE_CONFLICT, &f,
                          "Domain %s was undefined while pcinuma redefined it, and pcinuma's define brought it back; "
                          "it is running now, so pcinuma leaves it ('virsh undefine %s' removes it again)", name, name);
                w->n_conflicts++;
                log_fields_done(&f);
                return;
        }
        /* The last look before the undefine: a definition that is not
         * ours any more is a user's, and must stay. */
        _cleanup_free_ char *cur = read_definition(dom);
        if (!cur || !streq(cur, s->readback))
                return;
        unsigned flags = VIR_DOMAIN_UNDEFINE_KEEP_NVRAM;
#if LIBVIR_CHECK_VERSION(8, 9, 0)
        flags |= VIR_DOMAIN_UNDEFINE_KEEP_TPM;
#endif
        bool ok = virDomainUndefineFlags(dom, flags) == 0;
        conflict_fields(&f, name, s, ok ? "recreated" : "recreated-kept", s->events - s->verify_base, s->preimage);
        if (ok)
                log_event(LOG_WARNING, PCINUMA_MID_REDEFINE_CONFLICT, &f,
                          "Domain %s was undefined while pcinuma redefined it, and pcinuma's define brought it back; "
                          "pcinuma undefined it again", name);
        else
                log_event(LOG_ERR, PCINUMA_MID_REDEFINE_CONFLICT, &f,
                          "Domain %s was undefined while pcinuma redefined it, and pcinuma's define brought it back; "
                          "undefining it again failed (%s): 'virsh undefine %s' removes it", name, lv_error(), name);
        w->n_conflicts++;
        w->n_undone += ok;
        log_fields_done(&f);
}

/* Judge our last define from the events that came after it (see the top
 * of this file).  True when there is nothing more to do for the domain. */
static bool verify(struct watcher *w, struct dom_state *s, virDomainPtr dom) {
        _cleanup_free_ char *cur = dom ? read_definition(dom) : NULL;
        bool done = true;
        if (!cur)
                ;       /* undefined (or made transient) after our define: nothing of ours is left */
        else if (!s->readback || !streq(cur, s->readback))
                done = false;   /* a newer definition replaced ours (or we cannot tell): plan it as usual */
        else if (s->last_detail == VIR_DOMAIN_EVENT_DEFINED_ADDED && s->defines == 1)
                /* Ours is the only define since, and it added the domain.
                 * With another define, the ADDED may be a client's: one
                 * that undefined the domain and defined it again after
                 * ours, with what libvirt holds equal to our read-back
                 * (a client defining what it dumped, or a define that
                 * landed between ours and our read-back, so that the
                 * read-back is the client's).  Undefining then would lose
                 * the client's definition: it stays, planned as usual. */
                undo_recreate(w, s, dom, virDomainGetName(dom));
        else if (s->events - s->verify_base > s->verify_expected) {
                /* An extra define, and ours is what libvirt holds: it came
                 * between our re-read and our define -- or right after
                 * our define, before our read-back.  The plan that follows
                 * tells: only our own output needs no redefinition. */
                s->suspect = true;
                s->suspect_events = s->events - s->verify_base;
                free(s->suspect_preimage);
                s->suspect_preimage = s->preimage ? xstrdup(s->preimage) : NULL;
                done = false;
        } else
                done = false;   /* clean: the usual look confirms the plan is stable */
        verify_clear(s);
        link_send_status(w);
        return done;
}

/* --- validating --------------------------------------------------------- */

/* The plan is checked against libvirt's schema here, before the re-read,
 * rather than by the define (VIR_DOMAIN_DEFINE_VALIDATE costs ~20 ms for
 * 16 devices, all of it inside the window between our re-read and our
 * define).  Without the schema file, the define validates. */
xmlRelaxNGPtr sync_load_schema(void) {
        xmlRelaxNGParserCtxtPtr pc = xmlRelaxNGNewParserCtxt(LIBVIRT_DOMAIN_SCHEMA);
        xmlRelaxNGPtr schema = pc ? xmlRelaxNGParse(pc) : NULL;
        if (pc)
                xmlRelaxNGFreeParserCtxt(pc);
        if (!schema)
                log_msg(LOG_NOTICE, "Cannot load libvirt's schema %s; libvirt validates each redefinition itself "
                                    "(a wider window for concurrent edits)", LIBVIRT_DOMAIN_SCHEMA);
        return schema;
}

static void quiet_error(void *ctx, const xmlError *e) {
        (void) ctx;
        (void) e;
}

/* True when xml is valid under the schema (a failure here only hands the
 * judgement to libvirt: the define then validates). */
static bool schema_valid(xmlRelaxNGPtr schema, const char *xml) {
        if (!schema)
                return false;
        xmlDocPtr doc = xmlReadMemory(xml, (int) strlen(xml), "plan.xml", NULL, XML_PARSE_NONET | XML_PARSE_NOERROR |
                                                                               XML_PARSE_NOWARNING);
        xmlRelaxNGValidCtxtPtr vc = doc ? xmlRelaxNGNewValidCtxt(schema) : NULL;
        bool ok = false;
        if (vc) {
                xmlRelaxNGSetValidStructuredErrors(vc, (xmlStructuredErrorFunc) quiet_error, NULL);
                ok = xmlRelaxNGValidateDoc(vc, doc) == 0;
                xmlRelaxNGFreeValidCtxt(vc);
        }
        xmlFreeDoc(doc);
        return ok;
}

/* --- redefining ---------------------------------------------------------- */

/* verify() suspected an overwritten define, and the plan of what libvirt
 * holds now confirms it is our own output. */
static void report_overwritten(struct watcher *w, struct dom_state *s, const char *name) {
        struct log_fields f = {0};
        conflict_fields(&f, name, s, "overwritten", s->suspect_events, s->suspect_preimage);
        log_event(LOG_WARNING, PCINUMA_MID_REDEFINE_CONFLICT, &f,
                  "Domain %s: another definition of it landed between pcinuma's last read and its redefinition, "
                  "and pcinuma's define replaced it (libvirt has no compare-and-swap); what pcinuma read is in %s. "
                  "If a change is missing, define it again",
                  name, s->suspect_preimage ? s->suspect_preimage : "no pre-image");
        log_fields_done(&f);
        w->n_conflicts++;
        link_send_status(w);
}

/* The loop guard and the log of a plan that changes nothing.  True when
 * the plan should be defined. */
static bool should_define(struct dom_state *s, const char *name, const char *xml, struct plan_answer *plan) {
        time_t now = time(NULL);
        if (!s->loop_stopped && now - s->loop_first > LOOP_WINDOW_SEC) {
                s->loop_first = now;
                s->loop_count = 0;
        }
        /* A definition without our mark is new input from the user: it
         * starts a fresh count. */
        bool ours = strstr(xml, PCINUMA_TOPOLOGY_NS) != NULL;
        if (!ours) {
                s->loop_count = 0;
                s->loop_stopped = false;
        }
        if (!plan->redefine) {
                s->loop_count = 0;      /* stable */
                if (plan->summary)
                        log_msg(plan->prio, "Domain %s: %s", name, plan->summary);
                return false;
        }
        if (s->loop_stopped)
                return false;
        /* Only re-plans of our own output count: those must converge at
         * once (plan(dumpxml(plan(x))) is dumpxml(plan(x))). */
        if (ours && ++s->loop_count > LOOP_LIMIT) {
                s->loop_stopped = true;
                log_event(LOG_ERR, PCINUMA_MID_REDEFINE_FAILED, &plan->fields,
                          "Domain %s was re-planned %u times within %d s without settling: "
                          "not redefining it again until pcinumad restarts (please report this as a bug)",
                          name, LOOP_LIMIT, LOOP_WINDOW_SEC);
                return false;
        }
        return true;
}

static void note_window(struct watcher *w, uint64_t us) {
        w->n_windows++;
        w->window_us_sum += us;
        if (us > w->window_us_max)
                w->window_us_max = us;
}

/* What a prune dropped, in the journal (none: nothing). */
static void log_dropped(struct watcher *w, const char *name, const struct dom_state *s, const struct preimage_dropped *d) {
        size_t n = d->n_own + d->n_others;
        if (!n && !d->over)
                return;
        struct log_fields f = {0};
        log_fields_add(&f, "PCINUMA_DOMAIN", "%s", name);
        log_fields_add(&f, "PCINUMA_UUID", "%s", s->uuid);
        log_fields_add(&f, "PCINUMA_PREIMAGE_DIR", "%s", preimage_store_dir(w->preimages));
        log_fields_add(&f, "PCINUMA_PREIMAGES_DROPPED", "%zu", n);
        log_fields_add(&f, "PCINUMA_PREIMAGES_LEFT", "%zu", d->n_left);
        log_fields_add(&f, "PCINUMA_PREIMAGE_BYTES", "%" PRIu64, d->bytes_left);
        if (d->files)
                log_fields_add(&f, "PCINUMA_PREIMAGE_FILES", "%s", d->files);
        log_event(d->over ? LOG_WARNING : d->n_others ? LOG_NOTICE : LOG_INFO, PCINUMA_MID_PREIMAGES_DROPPED, &f,
                  "Dropped %zu pre-image%s (%" PRIu64 " bytes) from %s after redefining %s: %zu of it beyond its newest "
                  "%d, %zu older ones of other domains for the folder's limits; %zu files of %" PRIu64 " bytes left%s",
                  n, n == 1 ? "" : "s", d->bytes, preimage_store_dir(w->preimages), name, d->n_own, PREIMAGE_PER_DOMAIN,
                  d->n_others, d->n_left, d->bytes_left,
                  d->over ? ", still over the folder's limits with only domains' newest pre-images: new ones are "
                            "refused until there is room" : "");
        log_fields_done(&f);
}

enum commit_result { COMMIT_DONE, COMMIT_CHANGED };

/* Save the pre-image, re-read, and define the plan only if the re-read
 * is what was planned from.  Between the re-read and the define there is
 * nothing but a string compare: that gap is the window no API closes.
 * On COMMIT_CHANGED, *xml is the new definition to plan. */
static enum commit_result commit(struct watcher *w, struct dom_state *s, virDomainPtr dom, const char *name, char **xml,
                                 struct plan_answer *plan, unsigned changes) {
        _cleanup_free_ char *pre = NULL, *err = NULL;
        unsigned flags = schema_valid(w->schema, plan->out_xml) ? 0 : VIR_DOMAIN_DEFINE_VALIDATE;
        if (preimage_save(w->preimages, name, s->uuid, *xml, &pre, &err) < 0) {
                redefine_failed(w, plan, name, err);
                return COMMIT_DONE;
        }
        uint64_t t0 = now_usec(CLOCK_MONOTONIC);
        char *cur = read_definition(dom);
        if (!cur || !streq(cur, *xml)) {
                preimage_discard(w->preimages, pre);
                if (!cur) {
                        log_msg(LOG_INFO, "Domain %s was undefined or made transient while pcinuma planned it; "
                                          "not redefining it", name);
                        return COMMIT_DONE;
                }
                log_msg(LOG_DEBUG, "Domain %s changed while pcinuma planned it; planning again", name);
                free(*xml);
                *xml = cur;
                return COMMIT_CHANGED;
        }
        free(cur);
        virDomainPtr nd = virDomainDefineXMLFlags(w->conn, plan->out_xml, flags);
        note_window(w, now_usec(CLOCK_MONOTONIC) - t0);
        if (!nd) {
                preimage_discard(w->preimages, pre);
                redefine_failed(w, plan, name, lv_error());
                return COMMIT_DONE;
        }
        struct preimage_dropped dropped;
        preimage_prune(w->preimages, pre, s->uuid, &dropped);
        log_dropped(w, name, s, &dropped);
        preimage_dropped_done(&dropped);
        /* Check it once its event is in: see verify().  No event comes in
         * while we process, so the count now is the count at the define. */
        verify_clear(s);
        s->verifying = true;
        s->verify_base = s->events;
        s->verify_expected = 1 + changes;
        s->verify_started = now_usec(CLOCK_MONOTONIC);
        s->readback = virDomainGetXMLDesc(nd, VIR_DOMAIN_XML_INACTIVE | VIR_DOMAIN_XML_SECURE);
        s->preimage = TAKE_PTR(pre);
        s->last_detail = -1;
        s->defines = 0;
        s->due = s->verify_started + VERIFY_TIMEOUT_USEC;
        virDomainFree(nd);

        bool running = virDomainIsActive(dom) == 1;
        log_fields_add(&plan->fields, "PCINUMA_PREIMAGE", "%s", s->preimage);
        log_event(LOG_INFO, PCINUMA_MID_DOMAIN_REDEFINED, &plan->fields, "Domain %s redefined: %s%s", name, plan->summary,
                  running ? " (it is running: the new layout applies at its next start)" : "");
        link_count_result(w, true);
        return COMMIT_DONE;
}

/* Plan from the definition, define if still current; plan again when it
 * changed meanwhile. */
static void redefine(struct watcher *w, struct dom_state *s, virDomainPtr dom) {
        const char *name = virDomainGetName(dom);
        _cleanup_free_ char *xml = read_definition(dom);
        if (!xml) {
                s->suspect = false;
                return;   /* gone, or transient: the prepare gate handles those */
        }
        for (unsigned round = 0; round < MAX_ROUNDS; round++) {
                struct plan_answer plan = {0};
                if (!link_plan(w, xml, &plan))
                        return;
                if (s->suspect && round == 0 && !plan.redefine)
                        report_overwritten(w, s, name);
                s->suspect = false;
                enum commit_result r = COMMIT_DONE;
                if (should_define(s, name, xml, &plan))
                        r = commit(w, s, dom, name, &xml, &plan, round);
                plan_answer_done(&plan);
                if (r == COMMIT_DONE)
                        return;
        }
        log_msg(LOG_WARNING, "Domain %s changed %d times while pcinuma planned it; not redefining it now "
                             "(it is looked at again once its events are quiet for %u ms)", name, MAX_ROUNDS, w->settle_ms);
}

/* One due domain: check our last define of it, then plan it. */
static void process_one(struct watcher *w, struct dom_state *s) {
        uint64_t now = now_usec(CLOCK_MONOTONIC);
        if (s->verifying) {
                uint64_t quiet = s->last_event + (uint64_t) w->settle_ms * USEC_PER_MSEC;
                bool have_event = s->events > s->verify_base;
                if (!have_event && now < s->verify_started + VERIFY_TIMEOUT_USEC) {
                        s->due = s->verify_started + VERIFY_TIMEOUT_USEC;
                        return;   /* our event's arrival makes it due */
                }
                if (have_event && now < quiet) {
                        s->due = quiet;
                        return;
                }
                if (!have_event) {
                        log_msg(LOG_WARNING, "No libvirt event came for pcinuma's define of domain %s within %" PRIu64
                                             " s; it cannot be checked for a concurrent edit", s->uuid,
                                VERIFY_TIMEOUT_USEC / USEC_PER_SEC);
                        verify_clear(s);
                }
        }
        virDomainPtr dom = virDomainLookupByUUIDString(w->conn, s->uuid);
        /* Only a domain libvirt says is gone is forgotten: a passing error
         * (a dropped connection) must not drop a pending check. */
        if (!dom && virGetLastErrorCode() != VIR_ERR_NO_DOMAIN) {
                log_msg(LOG_WARNING, "Cannot look up domain %s: %s; trying again in 1 s", s->uuid, lv_error());
                s->due = now + USEC_PER_SEC;
                return;
        }
        bool done = s->verifying && verify(w, s, dom);
        if (!dom) {
                link_send_forget(w, s->uuid);
                state_forget(w, s);
                return;
        }
        if (!done)
                redefine(w, s, dom);
        virDomainFree(dom);
}

static void list_all(struct watcher *w) {
        virDomainPtr *doms = NULL;
        int n = virConnectListAllDomains(w->conn, &doms, VIR_CONNECT_LIST_DOMAINS_PERSISTENT);
        if (n < 0)
                log_msg(LOG_WARNING, "Cannot list libvirt's domains: %s", lv_error());
        uint64_t now = now_usec(CLOCK_MONOTONIC);
        char (*uuids)[VIR_UUID_STRING_BUFLEN] = xcalloc(n > 0 ? (size_t) n : 1, sizeof(*uuids));
        const char **set = xcalloc(n > 0 ? (size_t) n : 1, sizeof(*set));
        size_t k = 0;
        for (int i = 0; i < n; i++) {
                if (virDomainGetUUIDString(doms[i], uuids[k]) == 0) {
                        struct dom_state *s = state_find(w, uuids[k], true);
                        if (!s->due)
                                s->due = now;   /* one still settling keeps its time */
                        set[k] = uuids[k];
                        k++;
                }
                virDomainFree(doms[i]);
        }
        free(doms);
        /* pcinumad's gate learns which domains are persistent; the events
         * that follow (dispatched after this) keep it current. */
        if (n >= 0)
                link_send_domains(w, set, k);
        free(set);
        free(uuids);
}

/* libvirt's client reads an event off the socket in one turn of the loop
 * and dispatches it in a later one: a domain whose timer runs out may have
 * an edit's event read but not yet counted, and verify() would then take
 * that edit for one inside the window.  So first a round trip (any event
 * sent before its reply is read while waiting for it), then a few ms for
 * the dispatch, and only then, if still due, the domain is looked at. */
#define SYNC_DELAY_USEC (2 * USEC_PER_MSEC)
static bool sync_events(struct watcher *w, uint64_t now) {
        bool any = false;
        for (size_t i = 0; i < w->n_states; i++) {
                struct dom_state *s = w->states[i];
                if (s->due && s->due <= now && !s->synced) {
                        s->synced = true;
                        s->due = now + SYNC_DELAY_USEC;
                        any = true;
                }
        }
        unsigned long v;
        if (any)
                (void) virConnectGetLibVersion(w->conn, &v);
        return any;
}

/* One domain per turn of the main loop: events that came meanwhile are
 * applied before the next one is looked at. */
void sync_process_turn(struct watcher *w) {
        w->process_due = 0;
        if (!w->conn)
                return;   /* the reconnect lists everything again */
        if (w->check_all) {
                w->check_all = false;
                list_all(w);
        }
        uint64_t now = now_usec(CLOCK_MONOTONIC);
        if (sync_events(w, now)) {
                schedule(w);
                return;
        }
        struct dom_state *next = NULL;
        for (size_t i = 0; i < w->n_states; i++) {
                struct dom_state *s = w->states[i];
                if (s->due && s->due <= now && (!next || s->due < next->due))
                        next = s;
        }
        if (next) {
                next->due = 0;
                next->synced = false;
                process_one(w, next);
        }
        schedule(w);
}

static void log_start_stop(virDomainPtr dom, const char *uuid, bool started) {
        /* The hook skips the daemon for these phases (they must cost
         * nothing); the journal still gets the VM's history. */
        struct log_fields f = {0};
        log_fields_add(&f, "PCINUMA_DOMAIN", "%s", virDomainGetName(dom));
        log_fields_add(&f, "PCINUMA_UUID", "%s", uuid);
        log_fields_add(&f, "PCINUMA_PHASE", "%s", started ? "started" : "stopped");
        log_event(LOG_INFO, started ? PCINUMA_MID_DOMAIN_STARTED : PCINUMA_MID_DOMAIN_STOPPED, &f, "Domain %s %s",
                  virDomainGetName(dom), started ? "started" : "stopped");
        log_fields_done(&f);
}

/* A lifecycle event, on the main thread, in the order libvirt sent them. */
static void apply_lifecycle(struct watcher *w, const struct queued_event *q) {
        const char *uuid = q->uuid;
        int event = q->event;
        if (event == VIR_DOMAIN_EVENT_STARTED || event == VIR_DOMAIN_EVENT_STOPPED)
                log_start_stop(q->dom, uuid, event == VIR_DOMAIN_EVENT_STARTED);
        restarter_lifecycle(w->restarter, q->dom, uuid, event, q->detail, q->at);
        if ((event != VIR_DOMAIN_EVENT_DEFINED && event != VIR_DOMAIN_EVENT_UNDEFINED) || !uuid[0])
                return;
        /* Every definition change counts (verify() compares the count
         * with what our define explains) and restarts the wait for quiet. */
        struct dom_state *s = state_find(w, uuid, true);
        uint64_t now = now_usec(CLOCK_MONOTONIC);
        s->events++;
        w->n_events++;
        s->last_event = now;
        if (event == VIR_DOMAIN_EVENT_DEFINED) {
                s->last_detail = q->detail;
                s->defines++;
        }
        s->due = now + (uint64_t) w->settle_ms * USEC_PER_MSEC;
        s->synced = false;
        schedule(w);
}

void sync_wake_main(struct watcher *w) {
        uint64_t one = 1;
        (void) !write(w->wake_fd, &one, sizeof one);
}

static void enqueue(struct watcher *w, virDomainPtr dom, const char *uuid, int event, int detail) {
        pthread_mutex_lock(&w->queue_lock);
        struct queued_event *q = GROW(w->queue, w->n_queue);
        if (dom)
                virDomainRef(dom);
        *q = (struct queued_event) { .dom = dom, .event = event, .detail = detail, .at = now_usec(CLOCK_MONOTONIC) };
        snprintf(q->uuid, sizeof q->uuid, "%s", uuid);
        pthread_mutex_unlock(&w->queue_lock);
        sync_wake_main(w);
}

/* On libvirt's event thread: what cannot wait for the main thread is done
 * here (the persistence of a domain, for pcinumad's prepare gate); the
 * rest is queued. */
static int on_lifecycle(virConnectPtr conn, virDomainPtr dom, int event, int detail, void *opaque) {
        struct watcher *w = opaque;
        (void) conn;
        char uuid[VIR_UUID_STRING_BUFLEN] = "";
        (void) virDomainGetUUIDString(dom, uuid);
        if ((event == VIR_DOMAIN_EVENT_DEFINED || event == VIR_DOMAIN_EVENT_UNDEFINED) && uuid[0])
                link_send_domain(w, uuid, event == VIR_DOMAIN_EVENT_DEFINED);
        enqueue(w, dom, uuid, event, detail);
        return 0;
}

void sync_disconnect(struct watcher *w) {
        if (!w->conn)
                return;
        if (w->lifecycle_cb >= 0)
                (void) virConnectDomainEventDeregisterAny(w->conn, w->lifecycle_cb);
        w->lifecycle_cb = -1;
        (void) virConnectClose(w->conn);
        w->conn = NULL;
        restarter_disconnected(w->restarter);
        link_set_connected(w, false);
}

/* On libvirt's event thread: for the main thread. */
static void on_close(virConnectPtr conn, int reason, void *opaque) {
        struct watcher *w = opaque;
        (void) conn;
        enqueue(w, NULL, "", -1, reason);
}

static void apply_close(struct watcher *w, int reason) {
        const char *why = reason == VIR_CONNECT_CLOSE_REASON_EOF ? "libvirtd closed the connection"
                        : reason == VIR_CONNECT_CLOSE_REASON_KEEPALIVE ? "libvirtd stopped answering keepalives"
                        : reason == VIR_CONNECT_CLOSE_REASON_ERROR ? "connection error" : "client closed";
        struct log_fields f = {0};
        log_fields_add(&f, "PCINUMA_LIBVIRT_URI", "%s", w->uri);
        log_event(LOG_WARNING, PCINUMA_MID_LIBVIRT_CONNECTION, &f, "Lost the libvirt connection to %s (%s); reconnecting", w->uri, why);
        log_fields_done(&f);
        link_set_last_error(w, why);
        link_set_connected(w, false);
        w->backoff_ms = BACKOFF_MIN_MS;
        w->reconnect_due = now_usec(CLOCK_MONOTONIC) + BACKOFF_MIN_MS * USEC_PER_MSEC;
}

/* The events libvirt's thread queued, in order. */
void sync_apply_queue(struct watcher *w) {
        uint64_t n;
        (void) !read(w->wake_fd, &n, sizeof n);
        for (;;) {
                pthread_mutex_lock(&w->queue_lock);
                struct queued_event *v = w->queue;
                size_t k = w->n_queue;
                w->queue = NULL;
                w->n_queue = 0;
                pthread_mutex_unlock(&w->queue_lock);
                if (!k)
                        return;
                for (size_t i = 0; i < k; i++) {
                        if (!v[i].dom)
                                apply_close(w, v[i].detail);
                        else {
                                apply_lifecycle(w, &v[i]);
                                virDomainFree(v[i].dom);
                        }
                }
                free(v);
        }
}

void sync_connect(struct watcher *w) {
        w->reconnect_due = 0;
        /* A connection that died is closed here, outside its callback. */
        sync_disconnect(w);

        virConnectPtr c = virConnectOpen(w->uri);
        if (!c) {
                w->failed_attempts++;
                /* Say it once, then only every tenth time: libvirtd may be
                 * down for a while. */
                if (w->failed_attempts == 1 || w->failed_attempts % 10 == 0) {
                        struct log_fields f = {0};
                        log_fields_add(&f, "PCINUMA_LIBVIRT_URI", "%s", w->uri);
                        log_event(LOG_WARNING, PCINUMA_MID_LIBVIRT_CONNECTION, &f,
                                  "Cannot connect to libvirt at %s: %s; retrying in %d ms", w->uri, lv_error(), w->backoff_ms);
                        log_fields_done(&f);
                }
                link_set_last_error(w, lv_error());
                w->reconnect_due = now_usec(CLOCK_MONOTONIC) + (uint64_t) w->backoff_ms * USEC_PER_MSEC;
                w->backoff_ms = w->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : w->backoff_ms * 2;
                return;
        }
        w->conn = c;
        (void) virConnectSetKeepAlive(c, 5, 3);
        (void) virConnectRegisterCloseCallback(c, on_close, w, NULL);
        w->lifecycle_cb = virConnectDomainEventRegisterAny(c, NULL, VIR_DOMAIN_EVENT_ID_LIFECYCLE,
                                                           VIR_DOMAIN_EVENT_CALLBACK(on_lifecycle), w, NULL);
        if (w->lifecycle_cb < 0)
                log_msg(LOG_WARNING, "Cannot register for libvirt domain events at %s: %s; "
                                     "only domains present at connect time are planned", w->uri, lv_error());
        w->backoff_ms = BACKOFF_MIN_MS;
        w->failed_attempts = 0;
        link_set_connected(w, true);
        link_set_last_error(w, NULL);
        struct log_fields f = {0};
        log_fields_add(&f, "PCINUMA_LIBVIRT_URI", "%s", w->uri);
        log_event(LOG_INFO, PCINUMA_MID_LIBVIRT_CONNECTION, &f, "Connected to libvirt at %s; checking every persistent domain", w->uri);
        log_fields_done(&f);
        /* Catch up on whatever was defined while we were away; checks of
         * earlier defines are void: their events may be lost. */
        for (size_t i = 0; i < w->n_states; i++)
                verify_clear(w->states[i]);
        sync_recheck(w, NULL);
}

void sync_forget_all(struct watcher *w) {
        while (w->n_states > 0)
                state_forget(w, w->states[0]);
        free(w->states);
        w->states = NULL;
}

/* The watcher protocol: every message on the link between pcinumad
 * (daemon/watcher-link.c) and its libvirt watcher, pcinuma-watcher
 * (watcher/pcinumad-link.c).  Each message is one frame of the framing
 * the hook protocol uses too (frame.h: a 4-byte length + one JSON object).
 * This module is the one writer and the one reader of those objects; both
 * sides use it.  Pure: typed structs in, frames out, and back.
 *
 *   watcher to pcinumad:
 *     {"type":"plan","id":N,"xml":"…"}               plan this definition
 *     {"type":"forget","uuid":"…"}                   the domain is undefined
 *     {"type":"domains","persistent":["…",…]}        the UUID of every persistent domain (at connect)
 *     {"type":"domain","uuid":"…","persistent":b}    one domain was defined (true) or undefined (false);
 *                                                    sent at its event, before anything else is done
 *     {"type":"plan_restart","id":N,"uuid":"…","xml":"…"}
 *                                                    plan this live XML for a restart into the plan
 *                                                    (answered by "planned": redefine true means start
 *                                                    xml; pcinumad's gate lets the starts that follow
 *                                                    through as pcinuma's own)
 *     {"type":"restarted","uuid":"…","outcome":"restarted"|"fallback"|"lost"|"skipped",
 *      "unplanned_us":n,"total_us":n}                how a restart ended (fallback: the plan did not
 *                                                    start, the client's XML did; lost: neither did)
 *     {"type":"status","connected":b,"redefinitions":n,"failures":n,"last_error":s|null,
 *      "settle_ms":n,"pending":n,"events":n,"conflicts":n,"undone":n,
 *      "windows":n,"window_us_sum":n,"window_us_max":n}
 *                                                    (the counters after last_error: all or none)
 *   pcinumad to watcher:
 *     {"type":"planned","id":N,"redefine":b,"xml":s|null,"summary":s|null,"prio":n,
 *      "fields":[["PCINUMA_…","value"],…]}            the answer to plan N, or
 *     {"type":"planned","id":N,"redefine":false,"error":s,"summary":s,"prio":n,"fields":[…]}
 *                                                    an answer that could not be sent
 *     {"type":"recheck"}  {"type":"recheck","uuid":"…"}   look at every domain, or one
 *     {"type":"restart","uuid":"…","window_ms":n,"since_us":n,"files":["…",…],"if_persistent":true}
 *                                                    the prepare gate let this domain start without
 *                                                    its plan (at CLOCK_MONOTONIC since_us): restart
 *                                                    it into the plan if it is up within window_ms;
 *                                                    files (optional): what it boots from directly,
 *                                                    to be kept until the restart; if_persistent
 *                                                    (optional, written only when true): a transient
 *                                                    domain, restarted only if it is persistent once
 *                                                    up (defined while it starts: virt-install), and
 *                                                    then reported; else left, and not reported
 *
 * Keys are written in the order shown.  The reader ignores keys it does not
 * know; a message of an unknown type, or with a key missing or of the
 * wrong type, is refused with an error that names it. */
#pragma once

#include <json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* --settle-ms, which pcinumad passes on to pcinuma-watcher: how long a
 * domain's events must be quiet before the watcher plans it (ms). */
#define WPROTO_SETTLE_MS_DEFAULT 250
#define WPROTO_SETTLE_MS_MAX 60000

enum wproto_type {
        WPROTO_PLAN,
        WPROTO_FORGET,
        WPROTO_STATUS,
        WPROTO_PLANNED,
        WPROTO_RECHECK,
        WPROTO_DOMAINS,
        WPROTO_DOMAIN,
        WPROTO_PLAN_RESTART,
        WPROTO_RESTARTED,
        WPROTO_RESTART,
};

/* "plan", "forget", …; NULL for a value out of range. */
const char *wproto_type_to_string(enum wproto_type t);

struct wproto_plan {
        uint64_t id;
        const char *xml;
        size_t xml_len;                 /* may hold NUL bytes (a JSON "\u0000") */
};

struct wproto_forget {
        const char *uuid;
};

struct wproto_status {
        bool connected;
        uint64_t redefinitions, failures;
        const char *last_error;         /* NULL: none */
        bool has_counters;              /* the counters below were sent */
        uint64_t settle_ms, pending, events, conflicts, undone;
        uint64_t windows, window_us_sum, window_us_max;
};

/* A journal field pcinumad asks the watcher to log with its entry. */
struct wproto_field {
        const char *key;
        const char *value;
};

struct wproto_planned {
        uint64_t id;
        bool redefine;
        const char *xml;                /* NULL: none (written as null); not written with error */
        const char *error;              /* non-NULL: the error form (see above) */
        const char *summary;            /* NULL: none */
        int prio;                       /* a syslog priority, 0..7 */
        const struct wproto_field *fields;
        size_t n_fields;
};

struct wproto_recheck {
        const char *uuid;               /* NULL: every domain */
};

struct wproto_domains {
        const char *const *persistent;  /* n UUIDs */
        size_t n;
};

struct wproto_domain {
        const char *uuid;
        bool persistent;
};

struct wproto_plan_restart {
        uint64_t id;
        const char *uuid;
        const char *xml;
        size_t xml_len;
};

enum wproto_outcome {
        WPROTO_OUTCOME_RESTARTED,       /* the domain runs its plan */
        WPROTO_OUTCOME_FALLBACK,        /* the plan did not start; the client's XML did */
        WPROTO_OUTCOME_LOST,            /* neither started: the domain is down */
        WPROTO_OUTCOME_SKIPPED,         /* not restarted (the journal says why) */
        _WPROTO_OUTCOME_MAX,
};

/* "restarted", "fallback", "lost", "skipped"; NULL out of range. */
const char *wproto_outcome_to_string(enum wproto_outcome o);

struct wproto_restarted {
        const char *uuid;
        enum wproto_outcome outcome;
        uint64_t unplanned_us;          /* from the domain up without its plan to up with it (or down) */
        uint64_t total_us;              /* from the prepare hook call to the end of the restart */
};

struct wproto_restart {
        const char *uuid;
        uint64_t window_ms;
        uint64_t since_us;              /* CLOCK_MONOTONIC, when the gate decided */
        const char *const *files;       /* n_files paths (not written when 0) */
        size_t n_files;
        bool if_persistent;             /* not written when false */
};

/* A decoded message.  Its strings point into obj (and fields into an
 * array the message owns): they live until wproto_msg_done(). */
struct wproto_msg {
        enum wproto_type type;
        union {
                struct wproto_plan plan;
                struct wproto_forget forget;
                struct wproto_status status;
                struct wproto_planned planned;
                struct wproto_recheck recheck;
                struct wproto_domains domains;
                struct wproto_domain domain;
                struct wproto_plan_restart plan_restart;
                struct wproto_restarted restarted;
                struct wproto_restart restart;
        };
        json_object *obj;               /* a reference, put by wproto_msg_done() */
        struct wproto_field *field_array;
        const char **string_array;      /* domains.persistent, restart.files */
};

/* Each writes one frame (header + payload) to *ret, which the caller
 * owns.  0, or -EMSGSIZE when the payload would exceed FRAME_MAX_PAYLOAD,
 * -EINVAL for a message that the reader would refuse (a NULL string where
 * one is needed, a priority out of range). */
int wproto_encode_plan(const struct wproto_plan *m, char **ret, size_t *ret_len);
int wproto_encode_forget(const struct wproto_forget *m, char **ret, size_t *ret_len);
int wproto_encode_status(const struct wproto_status *m, char **ret, size_t *ret_len);
int wproto_encode_planned(const struct wproto_planned *m, char **ret, size_t *ret_len);
int wproto_encode_recheck(const struct wproto_recheck *m, char **ret, size_t *ret_len);
int wproto_encode_domains(const struct wproto_domains *m, char **ret, size_t *ret_len);
int wproto_encode_domain(const struct wproto_domain *m, char **ret, size_t *ret_len);
int wproto_encode_plan_restart(const struct wproto_plan_restart *m, char **ret, size_t *ret_len);
int wproto_encode_restarted(const struct wproto_restarted *m, char **ret, size_t *ret_len);
int wproto_encode_restart(const struct wproto_restart *m, char **ret, size_t *ret_len);
/* Whichever kind m is. */
int wproto_encode(const struct wproto_msg *m, char **ret, size_t *ret_len);

/* Read one object (as frame_decoder_feed() returns it) into *ret, which
 * then takes a reference to o.  0, or -EPROTO with *ret_error, a phrase
 * naming the fault that reads after "sent" or "refused": "a message of
 * unknown type reboot", "a plan request without id or xml", "a status
 * message whose 'failures' is not a count"…  *ret is untouched on error. */
int wproto_decode(json_object *o, struct wproto_msg *ret, char **ret_error);

/* Release what wproto_decode() filled in; accepts a zeroed message. */
void wproto_msg_done(struct wproto_msg *m);

/* Logging for pcinumad (docs/design.md §10): plain messages and structured
 * events, to the journal (sd_journal_send) or to stderr with the same
 * fields, so tests can assert them.  Not used by the pure modules. */
#pragma once

#include <stdarg.h>
#include <stddef.h>
#include <syslog.h>

#include "util.h"

/* Fixed MESSAGE_IDs, one per kind of event; systemd/pcinuma.catalog
 * explains each.  Keep the two in sync. */
#define PCINUMA_MID_DAEMON_READY       "71688084eef8458f876cb753a0a8e2e4"
#define PCINUMA_MID_POLICY_LOADED      "e789c7b5c07f47809c7d78ac27a982dd"
#define PCINUMA_MID_POLICY_INVALID     "0e84f476f62846b5b870e61bc914cb33"
#define PCINUMA_MID_HOSTMAP_REBUILT    "ee13f9bdff5048748aba0f158d8972a5"
#define PCINUMA_MID_START_ALLOWED      "87dc1c2a46174a5ab53f60845dc67c20"
#define PCINUMA_MID_START_WARNED       "4e9a72241f07404697b187ec3ec82cb0"
#define PCINUMA_MID_START_REFUSED      "ce774eab5d594bbe90c79114599f2877"
#define PCINUMA_MID_MIGRATION_REFUSED  "b421eb53069b4a218062031f089c3252"
#define PCINUMA_MID_HOOK_PASSED        "9c3977141d6b461fa4e84f48da9ef33b"
#define PCINUMA_MID_PEER_REJECTED      "78a61c309291450389a72193f3071080"
#define PCINUMA_MID_PROTOCOL_ERROR     "013e5cfcc718429b81f0ecebce08a4ee"
#define PCINUMA_MID_DOMAIN_REDEFINED   "455d2ff90a3f4acca3521fe01fa462e5"
#define PCINUMA_MID_REDEFINE_FAILED    "3ff37e4203cd43f58daec424d2534d21"
#define PCINUMA_MID_LIBVIRT_CONNECTION "66cf28ce8a0e4362873c54cf1493e49f"
#define PCINUMA_MID_DOMAIN_STARTED     "b6d1c42893a1447fbd2c3d604c46ce5f"
#define PCINUMA_MID_DOMAIN_STOPPED     "269f9ac34e2b4bf1bf74d3de40022198"
#define PCINUMA_MID_SYSFS_UNREADABLE   "9d7110b2ce2b4bc2af04d83235beafd5"
#define PCINUMA_MID_REDEFINE_CONFLICT  "36d0cf70f905419e82df46c0a879d92c"
#define PCINUMA_MID_MIGRATION_ACCEPTED "5a975bd32a29415693dc5fb00048da32"
#define PCINUMA_MID_PREIMAGES_DROPPED  "f91c2f871a66486c8afc9552f5656e5a"
#define PCINUMA_MID_START_RESTARTING   "f6efac6604544011bdbb4be49a330a91"
#define PCINUMA_MID_RESTARTED          "8805c45ffe6f41b28d6f3862806f65ea"
#define PCINUMA_MID_RESTART_FAILED     "6341f02d6d2c491e905a6c3fcdda5aa2"
#define PCINUMA_MID_RESTART_SKIPPED    "f85aaf68ac36456aade6416a682f49ba"
#define PCINUMA_MID_BUSY               "449e7e872d134c1cb930c67387789ddb"

enum log_target {
        LOG_TARGET_AUTO,        /* the journal when stderr is connected to it (JOURNAL_STREAM), else stderr */
        LOG_TARGET_JOURNAL,
        LOG_TARGET_STDERR,
};

int log_target_from_string(const char *s, enum log_target *ret);
void log_setup(enum log_target t, const char *identifier);

void log_msg(int prio, const char *fmt, ...) _printf_(2, 3);
/* Log and return err (a negative errno), so callers can
 * 'return log_errno(LOG_ERR, r, "Failed to ...: %m")'.  %m is strerror(-err).
 * (No format attribute: ISO C's printf checking rejects %m.) */
int log_errno(int prio, int err, const char *fmt, ...);

/* A structured field.  Repeating a key is allowed (one value per device). */
struct log_field {
        const char *key;          /* PCINUMA_DOMAIN, ... */
        char *value;              /* owned by the list */
};

struct log_fields {
        struct log_field *v;
        size_t n;
};

void log_fields_add(struct log_fields *f, const char *key, const char *fmt, ...) _printf_(3, 4);
void log_fields_done(struct log_fields *f);

/* One journal entry: MESSAGE (from fmt), PRIORITY, MESSAGE_ID, and the
 * fields.  On stderr: "<message> | MESSAGE_ID=… KEY=VALUE …", values with
 * spaces or quotes double-quoted with backslash escapes. */
void log_event(int prio, const char *message_id, const struct log_fields *f, const char *fmt, ...) _printf_(4, 5);

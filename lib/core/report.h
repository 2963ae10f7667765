/* Reports: the texts and documents made from a finished engine_plan()
 * result: `--format explain`, the JSON document, the causes of refused or
 * staying devices, the refusal message and the hook's messages.  They read the result and
 * never change it (every function takes it const).  The path fidelity
 * part reads what planner_fidelity() left in the plan: its owner calls
 * that first (once) when the report should have it; without it the
 * report has no pairs.  Pure: no I/O, no globals. */
#pragma once

#include "engine.h"
#include "planner.h"

/* The human-readable explanation (`--format explain`).  Of the path
 * fidelity report it lists the device pairs whose path type changed; with
 * REPORT_ALL_PAIRS every pair, the ones that kept their path type too
 * (`pcinumactl plan --format explain --all-pairs`). */
enum { REPORT_ALL_PAIRS = 1 << 0 };
char *report_explain(const struct engine_result *r, unsigned flags);

/* The same as a JSON document (`--format json`). */
char *report_json(const struct engine_result *r);

/* Why the devices whose action is 'action' (PLAN_REFUSE or PLAN_STAY) are
 * refused or stay: one line per cause (struct plan_cause), with its fix;
 * the domain-wide causes first and together, then the devices they
 * concern, grouped by host node ("  devices on host node 0: a, b"); then
 * each other cause followed by its devices; then the guest cells, once,
 * when a cause is about them.  said (may be NULL) is the line the caller
 * prints before: a cause it already names gives only its fix.  Each line
 * ends in a newline; "" when no device has that action. */
char *report_causes(const struct engine_result *r, enum plan_action action, const char *said);

/* A refused plan's message: "refused under policy P: <the plan's
 * reason>", then report_causes() of the refused devices. */
char *report_refusal(const struct engine_result *r);

/* What a plan that goes ahead (not refused) warns about besides its own
 * warnings (plan->warnings, which the caller says first, as it formats
 * them): why the devices that stay on pcie.0 could not be placed,
 * report_causes() of them told what the warnings say (a cause a warning
 * named gives its fix only), into *ret_causes ("" when none stay).
 * True when those lines need REPORT_NOT_PLACED before them: there are
 * some, and no warning leads them.  The hook, the watcher's redefine log
 * line and pcinumactl all say it this way. */
#define REPORT_NOT_PLACED "not every passthrough device could be placed"
bool report_warnings(const struct engine_result *r, char **ret_causes);

/* The hook's messages (report-hook.c): what the answer to a libvirt hook
 * call (decide_hook()) says on the hook's stderr, each line starting with
 * "pcinuma: " and ending in a newline.  decide.c chooses the verdict;
 * these word it.  'name' is the domain's name, 'mode' its policy's. */
struct decide_context;

/* A domain beyond pcinuma's bounds: refused (require, socket) or started
 * unchanged; by_name when its policy was resolved by its name alone. */
char *report_hook_beyond_limits(const char *name, const char *mode, bool by_name, const char *err, bool refused);

/* A start allowed as it is: the plan's warnings and why the devices that
 * stay on pcie.0 could not be placed (report_warnings()), or NULL when
 * there is nothing to warn about. */
char *report_hook_warnings(const struct engine_result *r, const char *name);

/* A refused plan: its reason, then report_causes() of the refused devices. */
char *report_hook_refused(const struct engine_result *r, const char *name);

/* A start without the plan that pcinuma restarts into it once it is up
 * (transient: under "transient": "restart"), then the plan's warnings. */
char *report_hook_restart(const struct engine_result *r, const char *name, bool transient);

/* pcinuma-watcher's start of the client's own XML after its start of the
 * plan failed. */
char *report_hook_own_start(const struct engine_result *r, const char *name);

/* A start without the plan that is not restarted: refused, or warned
 * about (then with the plan's warnings); c says what the user does next,
 * no_restart (or NULL) why first_start: restart does not restart it, and
 * if_persistent that it is restarted if it is defined by the time it is up. */
char *report_hook_differs(const struct engine_result *r, const char *name, const struct decide_context *c, bool refused,
                          const char *no_restart, bool if_persistent);

/* A prepare call without a domain XML, and one whose XML engine_plan()
 * could not read (err: its message). */
char *report_hook_no_xml(const char *name);
char *report_hook_error(const char *name, const char *err);

/* A domain XML that is not UTF-8 ('byte': the offset of the first bad
 * byte) in phase "prepare", "migrate" or "restore". */
char *report_hook_not_utf8(const char *phase, const char *name, long byte);

/* An incoming migration: accepted (what went where, the devices another
 * domain uses too first), refused because its mark says migratable="no",
 * or refused because this host cannot give it the same topology. */
char *report_hook_incoming(const struct incoming_result *m, const char *name);
char *report_hook_incoming_marked(const struct incoming_result *m, const char *name);
char *report_hook_incoming_refused(const struct incoming_result *m, const char *name);

/* Reports: the texts and documents made from a finished engine_plan()
 * result: `--format explain`, the JSON document, the causes of refused or
 * staying devices and the refusal message.  They read the result and
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

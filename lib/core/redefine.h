/* What pcinuma-watcher does with a persistent domain's definition once the
 * engine has planned it: define the engine's XML or leave the definition
 * as it is, and the phrase (and its log priority) that says why.  Pure, next
 * to decide.c (the hook's decisions): daemon/watcher-requests.c adds the
 * journal fields, the recheck cache and the I/O. */
#pragma once

#include <stdbool.h>

#include "engine.h"

struct redefine_decision {
        bool redefine;                  /* define out_xml */
        char *out_xml;
        char *summary;                  /* a phrase for the log, or NULL */
        int prio;                       /* syslog priority of the log line when not redefining */
};

/* Decide from r, the engine's result, or, when engine_plan() failed (r is
 * NULL), from its error message 'error'.  Never fails; *ret owns its
 * strings (redefine_decision_done()). */
void redefine_decide(const struct engine_result *r, const char *error, struct redefine_decision *ret);

/* Was this decision's line logged already?  The watcher asks again after
 * every change that touches a domain; a skip or a refusal whose summary is
 * the one last logged for the domain ('last'; 'first' when the domain was
 * not known before) is said once, then at debug priority only.  True: log
 * this one at LOG_DEBUG. */
bool redefine_said_before(const struct redefine_decision *d, const char *last, bool first);

void redefine_decision_done(struct redefine_decision *d);

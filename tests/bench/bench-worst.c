/* bench-worst: how long one request of each kind takes on a hostile input
 * (issue 24, "every request's work is bounded by the host, not by the
 * input"), on one core:
 *
 *     bench-worst --sysfs DIR [--policy-file FILE] --kind plan|revert|migrate
 *                 [--runs N] [--label L] XML
 *
 * The host map and the policy are loaded once; then the request runs N
 * times (default 5) on the raw XML, as pcinumad runs it: engine_plan()
 * (with the policy's rules), engine_revert(), or engine_incoming() (no
 * devices in use).  It prints what the request answered (accepted,
 * refused and why, or an error), so that a figure cannot come from an
 * input the program did not read as meant, and the median and worst
 * thread CPU time and wall time of one call. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "fileio.h"
#include "hostmap.h"
#include "hostmap-sysfs.h"
#include "migrate.h"
#include "policy.h"
#include "policy-file.h"

#include "benchutil.h"
#include "report.h"

/* One request; *outcome gets a one-line summary (malloc'ed). */
static void one(const char *kind, const char *xml, size_t len, const struct hostmap *h, const struct policy *pol,
                char **outcome) {
        char *err = NULL;

        if (streq(kind, "plan")) {
                struct engine_result *r = NULL;
                if (engine_plan(xml, len, h, pol, NULL, &r, &err) < 0)
                        *outcome = xasprintf("error: %s", strna(err));
                else if (r->verdict == PLAN_REFUSED) {
                        char *why = report_refusal(r);
                        *outcome = xasprintf("refused (work %llu of %llu): %s: %s", (unsigned long long) r->work.spent,
                                             (unsigned long long) r->work.limit, strna(r->plan->reason), strna(why));
                        free(why);
                } else
                        *outcome = xasprintf("%s%s (%zu bytes)", plan_verdict_to_string(r->verdict),
                                             r->changed ? ", changed" : "", r->xml ? strlen(r->xml) : 0);
                engine_result_free(r);
        } else if (streq(kind, "revert")) {
                char *out = NULL, *warning = NULL;
                bool changed = false;
                struct work w = work_new(WORK_BUDGET);
                if (engine_revert_budget(xml, len, &w, &out, &changed, &warning, &err) < 0)
                        *outcome = xasprintf("error (work %llu of %llu): %s", (unsigned long long) w.spent,
                                             (unsigned long long) w.limit, strna(err));
                else
                        *outcome = xasprintf("reverted%s (%zu bytes; work %llu of %llu)%s%s",
                                             changed ? ", changed" : ", unchanged", out ? strlen(out) : 0,
                                             (unsigned long long) w.spent, (unsigned long long) w.limit,
                                             warning ? "; warning: " : "", strempty(warning));
                free(out);
                free(warning);
        } else {
                struct incoming_result m = {0};
                engine_incoming(xml, len, h, pol, NULL, &m);
                static const char *const v[] = { "pass", "accept", "refuse-marked", "refuse" };
                *outcome = xasprintf("%s (work %llu of %llu)%s%s", v[m.verdict], (unsigned long long) m.work.spent,
                                     (unsigned long long) m.work.limit, m.reason ? ": " : "", strempty(m.reason));
                incoming_result_done(&m);
        }
        free(err);
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "sysfs", required_argument, NULL, 's' },
                { "policy-file", required_argument, NULL, 'p' },
                { "kind", required_argument, NULL, 'k' },
                { "runs", required_argument, NULL, 'n' },
                { "label", required_argument, NULL, 'l' },
                { NULL, 0, NULL, 0 },
        };
        const char *sysfs = NULL, *policy_file = NULL, *kind = NULL, *label = "input";
        unsigned runs = 5;
        _cleanup_hostmap_ struct hostmap *h = NULL;
        _cleanup_policy_ struct policy *pol = NULL;
        _cleanup_free_ char *xml = NULL, *err = NULL, *outcome = NULL;
        size_t len;
        int o;

        while ((o = getopt_long(argc, argv, "", opts, NULL)) >= 0)
                switch (o) {
                case 's': sysfs = optarg; break;
                case 'p': policy_file = optarg; break;
                case 'k': kind = optarg; break;
                case 'n': runs = (unsigned) atoi(optarg); break;
                case 'l': label = optarg; break;
                default: return 2;
                }
        if (!sysfs || !kind || optind != argc - 1 || runs == 0 ||
            !(streq(kind, "plan") || streq(kind, "revert") || streq(kind, "migrate"))) {
                fputs("Usage: bench-worst --sysfs DIR [--policy-file FILE] --kind plan|revert|migrate [--runs N] "
                      "[--label L] XML\n", stderr);
                return 2;
        }
        if (hostmap_load_path(sysfs, &h, &err) < 0) {
                fprintf(stderr, "bench-worst: %s\n", strna(err));
                return 2;
        }
        if (policy_file ? policy_load_file(policy_file, &pol, &err) < 0 : !(pol = policy_new_default())) {
                fprintf(stderr, "bench-worst: %s\n", strna(err));
                return 2;
        }
        xml = slurp(argv[optind], &len);

        double *cpu = xcalloc(runs, sizeof(double)), *wall = xcalloc(runs, sizeof(double));
        for (unsigned i = 0; i < runs; i++) {
                double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
                free(outcome);
                one(kind, xml, len, h, pol, &outcome);
                cpu[i] = now(CLOCK_THREAD_CPUTIME_ID) - c0;
                wall[i] = now(CLOCK_MONOTONIC) - w0;
        }
        qsort(cpu, runs, sizeof(double), cmp_double);
        qsort(wall, runs, sizeof(double), cmp_double);
        /* The outcome on a line of its own, cut short: a refusal names
         * every device, which can be long. */
        if (strlen(outcome) > 300)
                strcpy(outcome + 297, "...");
        printf("%s %s: xml_bytes=%zu cpu_ms=%.3f cpu_ms_max=%.3f wall_ms=%.3f runs=%u\n", label, kind, len,
               cpu[runs / 2] * 1e3, cpu[runs - 1] * 1e3, wall[runs / 2] * 1e3, runs);
        printf("%s %s: outcome: %s\n", label, kind, outcome);
        free(cpu);
        free(wall);
        return 0;
}

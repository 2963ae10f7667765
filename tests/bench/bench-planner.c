/* bench-planner: planner_run() and engine_plan() throughput on one core.
 *
 *     bench-planner --sysfs DIR --policy MODE [--topology paths|cells]
 *                   [--seconds S] [--batches N]
 *                   [--label L] [--count-planner N] [--count-engine N] XML
 *
 * The host map is loaded and the domain parsed and resolved once; then
 * planner_run() (plan + plan_free) runs in batches of about S/N seconds
 * each, and so does engine_plan() on the raw XML (parse, resolve, plan,
 * rewrite, format; + engine_result_free).  Each batch gives a rate; the
 * median batch is reported, wall clock and thread CPU time both.
 *
 * --topology T plans with the policy's default switches and that topology
 * (both functions; engine_plan then takes it from the policy's default
 * rather than as a forced mode), so the paths topology can be timed against
 * the cells shape, which is what pcinuma planned before it, in one run.
 *
 * --count-planner N / --count-engine N skip the timing and only call the
 * function N times (for callgrind --toggle-collect). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "domain.h"
#include "engine.h"
#include "hostmap.h"
#include "hostmap-sysfs.h"
#include "planner.h"
#include "policy.h"

#include "benchutil.h"

struct ctx {
        const struct domain *d;
        const struct hostmap *h;
        const struct policy *pol;
        struct policy_settings s;
        bool from_policy;               /* --topology: engine_plan resolves the policy instead of forcing the mode */
        const char *xml;
        size_t len;
};

static void one_plan(const struct ctx *c) {
        struct plan *p = NULL;

        if (planner_run(c->d, c->h, &c->s, &p) < 0) {
                fputs("bench-planner: planner_run failed\n", stderr);
                exit(2);
        }
        plan_free(p);
}

static void one_engine(const struct ctx *c) {
        struct engine_result *r = NULL;
        char *err = NULL;

        if (engine_plan(c->xml, c->len, c->h, c->pol, c->from_policy ? NULL : &c->s.mode, &r, &err) < 0) {
                fprintf(stderr, "bench-planner: engine_plan failed: %s\n", strna(err));
                exit(2);
        }
        engine_result_free(r);
}

/* Run fn in 'batches' batches of about 'seconds'/'batches' each; print the
 * median batch's rate. */
static void measure(const char *label, const char *what, void (*fn)(const struct ctx *), const struct ctx *c,
                    double seconds, unsigned batches) {
        double *wall = xcalloc(batches, sizeof(double)), *cpu = xcalloc(batches, sizeof(double));
        unsigned long n = 1;
        double t;

        /* Calibrate: double n until one batch takes long enough. */
        for (;;) {
                t = now(CLOCK_MONOTONIC);
                for (unsigned long i = 0; i < n; i++)
                        fn(c);
                t = now(CLOCK_MONOTONIC) - t;
                if (t >= seconds / batches / 4)
                        break;
                n *= 2;
        }
        n = (unsigned long) ((double) n * (seconds / batches) / t) + 1;

        for (unsigned b = 0; b < batches; b++) {
                double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);

                for (unsigned long i = 0; i < n; i++)
                        fn(c);
                wall[b] = (now(CLOCK_MONOTONIC) - w0) / (double) n;
                cpu[b] = (now(CLOCK_THREAD_CPUTIME_ID) - c0) / (double) n;
        }
        qsort(wall, batches, sizeof(double), cmp_double);
        qsort(cpu, batches, sizeof(double), cmp_double);
        printf("%s %s: per_call_us=%.2f per_s=%.0f (wall, median of %u batches of %lu; best %.2f us, worst %.2f us) "
               "cpu_per_call_us=%.2f cpu_per_s=%.0f\n",
               label, what, wall[batches / 2] * 1e6, 1.0 / wall[batches / 2], batches, n, wall[0] * 1e6,
               wall[batches - 1] * 1e6, cpu[batches / 2] * 1e6, 1.0 / cpu[batches / 2]);
        free(wall);
        free(cpu);
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "sysfs", required_argument, NULL, 's' },
                { "policy", required_argument, NULL, 'p' },
                { "topology", required_argument, NULL, 'T' },
                { "seconds", required_argument, NULL, 't' },
                { "batches", required_argument, NULL, 'b' },
                { "label", required_argument, NULL, 'l' },
                { "count-planner", required_argument, NULL, 'P' },
                { "count-engine", required_argument, NULL, 'E' },
                { NULL, 0, NULL, 0 },
        };
        const char *sysfs = NULL, *mode = "require", *label = "domain";
        double seconds = 3.0;
        unsigned batches = 15;
        long count_planner = -1, count_engine = -1;
        const char *topology = NULL;
        _cleanup_hostmap_ struct hostmap *h = NULL;
        _cleanup_domain_ struct domain *d = NULL;
        _cleanup_policy_ struct policy *pol = policy_new_default();
        _cleanup_free_ char *xml = NULL, *err = NULL;
        struct ctx c = { .pol = pol };
        struct plan *p = NULL;
        size_t moved = 0;
        int o;

        while ((o = getopt_long(argc, argv, "", opts, NULL)) >= 0)
                switch (o) {
                case 's': sysfs = optarg; break;
                case 'p': mode = optarg; break;
                case 'T': topology = optarg; break;
                case 't': seconds = atof(optarg); break;
                case 'b': batches = (unsigned) atoi(optarg); break;
                case 'l': label = optarg; break;
                case 'P': count_planner = atol(optarg); break;
                case 'E': count_engine = atol(optarg); break;
                default: return 2;
                }
        if (!sysfs || optind != argc - 1 || batches == 0 || seconds <= 0) {
                fputs("Usage: bench-planner --sysfs DIR [--policy MODE] [--topology paths|cells] [--seconds S] [--batches N] [--label L] "
                      "[--count-planner N] [--count-engine N] XML\n", stderr);
                return 2;
        }
        if (policy_mode_from_string(mode, &c.s.mode) < 0) {
                fprintf(stderr, "bench-planner: unknown policy '%s'\n", mode);
                return 2;
        }
        if (topology) {
                if (!streq(topology, "paths") && !streq(topology, "cells")) {
                        fprintf(stderr, "bench-planner: --topology must be paths or cells, not '%s'\n", topology);
                        return 2;
                }
                c.s = policy_settings_default(c.s.mode);
                c.s.topology = streq(topology, "cells") ? POLICY_TOPOLOGY_CELLS : POLICY_TOPOLOGY_PATHS;
                c.s.mirror_switches = c.s.topology == POLICY_TOPOLOGY_PATHS;
                pol->def = c.s;
                c.from_policy = true;
        }
        if (hostmap_load_path(sysfs, &h, &err) < 0) {
                fprintf(stderr, "bench-planner: %s\n", strna(err));
                return 2;
        }
        xml = slurp(argv[optind], &c.len);
        c.xml = xml;
        if (domain_parse(xml, c.len, &d, &err) < 0 || domain_resolve_backing(d, h, &err) < 0) {
                fprintf(stderr, "bench-planner: %s: %s\n", argv[optind], strna(err));
                return 2;
        }
        c.d = d;
        c.h = h;

        if (count_planner >= 0 || count_engine >= 0) {
                for (long i = 0; i < count_planner; i++)
                        one_plan(&c);
                for (long i = 0; i < count_engine; i++)
                        one_engine(&c);
                return 0;
        }

        /* Say what is being planned, so a figure cannot silently come from
         * a refusal or a no-op. */
        planner_run(d, h, &c.s, &p);
        for (size_t i = 0; i < p->n_devices; i++)
                moved += p->devices[i].action == PLAN_MOVE;
        printf("%s: hostdevs=%zu cells=%zu policy=%s verdict=%s moved=%zu pxbs=%zu ports=%zu xml_bytes=%zu\n", label,
               d->n_hostdevs, d->n_cells, mode, plan_verdict_to_string(p->verdict), moved, p->n_pxbs, p->n_ports,
               c.len);
        plan_free(p);

        measure(label, "planner_run", one_plan, &c, seconds, batches);
        measure(label, "engine_plan", one_engine, &c, seconds, batches);
        return 0;
}

/* bench-hostmap: how long the host map scan takes, and that lookups never
 * touch the OS.
 *
 *     bench-hostmap SYSFS SCANS LOOKUPS
 *
 * Loads the map SCANS times (the first one is reported separately: its
 * dentries may be cold), then does LOOKUPS hostmap_find_device() calls
 * cycling through every device's address and, one in eight, an address
 * that is not there.  The lookup phase is bracketed by two marker writes
 * to stderr ("@@bench-lookups-begin" / "@@bench-lookups-end"), so that a
 * run under strace can count the system calls made in between. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hostmap.h"
#include "hostmap-sysfs.h"

static double now(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* user + system time of the whole process: the scan runs on up to 4
 * threads for large hosts (hostmap-sysfs.c), so this is its total CPU
 * cost, which exceeds the wall time when the threads run in parallel. */
static double cpu_now(void) {
        struct timespec ts;

        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return (x > y) - (x < y);
}

#define MARK(s) ((void) !write(STDERR_FILENO, s "\n", sizeof(s)))

int main(int argc, char **argv) {
        _cleanup_hostmap_ struct hostmap *h = NULL;
        _cleanup_free_ char *err = NULL;
        _cleanup_free_ struct pci_addr *addrs = NULL;
        unsigned scans, found = 0;
        unsigned long lookups;
        double *t, *cpu, first, t_lookup;
        size_t n_addrs;

        if (argc != 4) {
                fputs("Usage: bench-hostmap SYSFS SCANS LOOKUPS\n", stderr);
                return 2;
        }
        scans = (unsigned) atoi(argv[2]);
        lookups = strtoul(argv[3], NULL, 10);
        if (scans < 2)
                scans = 2;
        t = xcalloc(scans, sizeof(double));
        cpu = xcalloc(scans, sizeof(double));

        for (unsigned i = 0; i < scans; i++) {
                double t0 = now(), c0 = cpu_now();

                hostmap_free(h);
                h = NULL;
                if (hostmap_load_path(argv[1], &h, &err) < 0) {
                        fprintf(stderr, "bench-hostmap: %s\n", strna(err));
                        return 2;
                }
                t[i] = now() - t0;
                cpu[i] = cpu_now() - c0;
        }
        first = t[0];
        qsort(t + 1, scans - 1, sizeof(double), cmp_double);
        qsort(cpu + 1, scans - 1, sizeof(double), cmp_double);
        printf("scan: devices=%zu nodes=%zu mdevs=%zu first_ms=%.2f median_ms=%.2f best_ms=%.2f worst_ms=%.2f "
               "cpu_median_ms=%.2f (%u warm scans)\n",
               h->n_devices, h->n_nodes, h->n_mdevs, first * 1e3, t[1 + (scans - 1) / 2] * 1e3, t[1] * 1e3,
               t[scans - 1] * 1e3, cpu[1 + (scans - 1) / 2] * 1e3, scans - 1);

        if (h->n_devices == 0) {
                fprintf(stderr, "bench-hostmap: %s has no PCI devices; nothing to look up\n", argv[1]);
                return 1;
        }
        /* Every known address, and after each 7 of them one that is not
         * known (function 7 of the same slot is never generated). */
        n_addrs = h->n_devices + h->n_devices / 7 + 1;
        addrs = xcalloc(n_addrs, sizeof(*addrs));
        for (size_t i = 0, k = 0; k < n_addrs; i++) {
                addrs[k++] = h->devices[i % h->n_devices].addr;
                if (k % 8 == 7 && k < n_addrs) {
                        addrs[k] = h->devices[i % h->n_devices].addr;
                        addrs[k].func = 7;
                        k++;
                }
        }

        MARK("@@bench-lookups-begin");
        double t0 = now();
        for (unsigned long i = 0; i < lookups; i++)
                found += hostmap_find_device(h, &addrs[i % n_addrs]) != NULL;
        t_lookup = now() - t0;
        MARK("@@bench-lookups-end");

        printf("lookups: n=%lu found=%u total_ms=%.2f ns_per_lookup=%.1f lookups_vs_one_scan=%.3f\n", lookups, found,
               t_lookup * 1e3, t_lookup / (double) (lookups ? lookups : 1) * 1e9,
               t_lookup / t[1 + (scans - 1) / 2]);
        free(t);
        free(cpu);
        return 0;
}

/* spawn-timer: wall time of short-lived programs, interleaved.
 *
 *     spawn-timer ROUNDS WARMUP VARIANT...
 *
 * A VARIANT is "NAME|INPUT|PROGRAM ARG..." (arguments separated by single
 * spaces; INPUT is a file fed on stdin through a pipe, as libvirt does).
 * Each round runs every variant once, in an order rotated from round to
 * round so that no variant always follows another; WARMUP rounds are run
 * first and not counted.  The time of one run is from just before the pipe
 * is created to just after waitpid() returns, on CLOCK_MONOTONIC; the
 * program must exit 0.
 *
 * Output, one line per variant (microseconds):
 *     NAME median=… p10=… p90=… min=… n=…
 * then "paired NAME/FIRST median=…" (the median of the round-by-round
 * ratios) and "ratio NAME/FIRST=…" (the ratio of the medians) of each
 * variant against the first. */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

struct variant {
        char *name;
        char *input;
        size_t input_len;
        char **argv;
        double *us;
};

static void die(const char *what) {
        perror(what);
        exit(2);
}

static double now_us(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec * 1e6 + (double) ts.tv_nsec / 1e3;
}

static char *slurp(const char *path, size_t *len) {
        FILE *f = fopen(path, "rb");
        char *buf;
        long n = 0;

        if (!f)
                die(path);
        if (fseek(f, 0, SEEK_END) < 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) < 0)
                die(path);
        buf = malloc((size_t) n + 1);
        if (!buf || fread(buf, 1, (size_t) n, f) != (size_t) n)
                die(path);
        fclose(f);
        *len = (size_t) n;
        return buf;
}

static void parse_variant(char *spec, struct variant *v, unsigned rounds) {
        char *p1 = strchr(spec, '|'), *p2, *save = NULL, *tok;
        size_t n = 0;

        if (!p1 || !(p2 = strchr(p1 + 1, '|'))) {
                fprintf(stderr, "spawn-timer: bad variant '%s'\n", spec);
                exit(2);
        }
        *p1 = *p2 = '\0';
        v->name = spec;
        v->input = slurp(p1 + 1, &v->input_len);
        v->argv = calloc(strlen(p2 + 1) + 2, sizeof(char *));
        for (tok = strtok_r(p2 + 1, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
                v->argv[n++] = tok;
        v->argv[n] = NULL;
        v->us = calloc(rounds, sizeof(double));
        if (!v->argv || !v->us || n == 0)
                die("variant");
}

static double run_once(const struct variant *v) {
        posix_spawn_file_actions_t fa;
        int p[2], status;
        pid_t pid;
        double t0, t1;

        t0 = now_us();
        if (pipe2(p, O_CLOEXEC) < 0)
                die("pipe2");
        /* Pipe buffers hold 64 KiB: the whole XML is written before the
         * child runs, so the parent never blocks here. */
        if (fcntl(p[1], F_SETPIPE_SZ, 1 << 20) < 0 && v->input_len > 65536)
                die("F_SETPIPE_SZ");
        if (write(p[1], v->input, v->input_len) != (ssize_t) v->input_len)
                die("write");
        close(p[1]);
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, p[0], STDIN_FILENO);
        posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
        if (posix_spawn(&pid, v->argv[0], &fa, NULL, v->argv, environ) != 0)
                die(v->argv[0]);
        close(p[0]);
        posix_spawn_file_actions_destroy(&fa);
        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR)
                        die("waitpid");
        t1 = now_us();
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                fprintf(stderr, "spawn-timer: %s exited with status 0x%x\n", v->name, status);
                exit(2);
        }
        return t1 - t0;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return (x > y) - (x < y);
}

static double pct(const double *sorted, unsigned n, double q) {
        return sorted[(unsigned) (q * (n - 1) + 0.5)];
}

int main(int argc, char **argv) {
        unsigned rounds, warmup, nv;
        struct variant *vs;
        double *medians;

        if (argc < 4) {
                fprintf(stderr, "Usage: spawn-timer ROUNDS WARMUP 'NAME|INPUT|PROGRAM ARG...'...\n");
                return 2;
        }
        rounds = (unsigned) strtoul(argv[1], NULL, 10);
        warmup = (unsigned) strtoul(argv[2], NULL, 10);
        nv = (unsigned) argc - 3;
        vs = calloc(nv, sizeof(*vs));
        medians = calloc(nv, sizeof(double));
        if (!vs || !medians || rounds == 0)
                die("setup");
        for (unsigned i = 0; i < nv; i++)
                parse_variant(argv[3 + i], &vs[i], rounds);

        for (unsigned r = 0; r < warmup + rounds; r++)
                for (unsigned k = 0; k < nv; k++) {
                        unsigned i = (k + r) % nv;
                        double t = run_once(&vs[i]);

                        if (r >= warmup)
                                vs[i].us[r - warmup] = t;
                }

        /* Paired ratios (round by round, against the first variant) before
         * the samples are sorted: they cancel slow drifts of the machine's
         * load that hit both runs of a round alike. */
        for (unsigned i = 1; i < nv; i++) {
                double *q = calloc(rounds, sizeof(double));

                if (!q)
                        die("calloc");
                for (unsigned r = 0; r < rounds; r++)
                        q[r] = vs[i].us[r] / vs[0].us[r];
                qsort(q, rounds, sizeof(double), cmp_double);
                printf("paired %s/%s median=%.3f p25=%.3f p75=%.3f\n", vs[i].name, vs[0].name,
                       pct(q, rounds, 0.5), pct(q, rounds, 0.25), pct(q, rounds, 0.75));
                free(q);
        }
        for (unsigned i = 0; i < nv; i++) {
                qsort(vs[i].us, rounds, sizeof(double), cmp_double);
                medians[i] = pct(vs[i].us, rounds, 0.5);
                printf("%s median=%.1f p10=%.1f p90=%.1f min=%.1f n=%u\n", vs[i].name, medians[i],
                       pct(vs[i].us, rounds, 0.1), pct(vs[i].us, rounds, 0.9), vs[i].us[0], rounds);
        }
        for (unsigned i = 1; i < nv; i++)
                printf("ratio %s/%s=%.3f\n", vs[i].name, vs[0].name, medians[i] / medians[0]);
        return 0;
}

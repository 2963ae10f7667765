/* pcinumactl status: ask pcinumad, over its hook socket, for its state
 * (uptime, host map, policy, counters, the libvirt watcher) and print it
 * for a human, or as the daemon's JSON (--json). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ctl-util.h"
#include "ctl.h"
#include "hook-client.h"
#include "hook-protocol.h"
#include "paths.h"

static const char *const who = "pcinumactl status";

/* The status object as a few aligned lines, one per part of the daemon. */
static void print_status(json_object *st) {
        json_object *h = json_object_object_get(st, "hostmap");
        json_object *p = json_object_object_get(st, "policy");
        json_object *r = json_object_object_get(st, "requests");
        json_object *v = json_object_object_get(st, "verdicts");
#define S(o, k) json_object_get_string(json_object_object_get((o), (k)))
#define I(o, k) ((long long) json_object_get_int64(json_object_object_get((o), (k))))
        printf("pcinumad %s (pid %lld), up %lld s, socket %s\n", S(st, "version"), I(st, "pid"), I(st, "uptime_sec"), S(st, "socket"));
        printf("host map:  %lld PCI devices, %lld mdevs, %lld NUMA nodes from %s; built %lld s ago (generation %lld)%s\n",
               I(h, "devices"), I(h, "mdevs"), I(h, "nodes"), S(h, "sysfs_root"), I(h, "age_sec"), I(h, "generation"),
               json_object_get_boolean(json_object_object_get(h, "udev")) ? ", follows udev" : ", rescanned on SIGHUP only");
        json_object *hw = json_object_object_get(h, "warnings");
        size_t n_hw = hw ? json_object_array_length(hw) : 0;
        for (size_t i = 0; i < n_hw; i++)
                printf("           warning: %s\n", json_object_get_string(json_object_array_get_idx(hw, i)));
        if (I(h, "warnings_not_listed") > 0)
                printf("           warning: %lld more sysfs files could not be read or parsed\n", I(h, "warnings_not_listed"));
        time_t loaded = (time_t) (I(p, "loaded_at_usec") / 1000000);
        char when[64];
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&loaded));
        printf("policy:    %s%s, default %s, %lld rule%s, loaded %s\n", S(p, "file"),
               json_object_get_boolean(json_object_object_get(p, "from_file")) ? "" : " (absent: built-in default)",
               S(p, "default"), I(p, "rules"), I(p, "rules") == 1 ? "" : "s", when);
        if (json_object_object_get(p, "last_error"))
                printf("           last reload FAILED, the policy above is still in force: %s\n", S(p, "last_error"));
        printf("requests:  %lld total, %lld hook, %lld status, %lld errors, %lld rejected peers, %lld open connections\n",
               I(r, "total"), I(r, "hook"), I(r, "status"), I(r, "errors"), I(r, "rejected_peers"), I(r, "connections"));
        printf("verdicts:  %lld allow, %lld warn, %lld refuse, %lld pass, %lld restart\n", I(v, "allow"), I(v, "warn"),
               I(v, "refuse"), I(v, "pass"), I(v, "restart"));
        json_object *rs = json_object_object_get(st, "restarts");
        if (rs) {
                long long done = I(rs, "restarted") + I(rs, "fallback");
                printf("restarts:  %lld asked, %lld into the plan, %lld as the client asked (the plan did not start), "
                       "%lld lost, %lld not done; window %lld ms",
                       I(rs, "requested"), I(rs, "restarted"), I(rs, "fallback"), I(rs, "lost"), I(rs, "skipped"),
                       I(rs, "window_ms"));
                if (done > 0)
                        printf("; unplanned run %.0f ms on average, %.0f ms at most", I(rs, "unplanned_us_sum") / 1000.0 / done,
                               I(rs, "unplanned_us_max") / 1000.0);
                /* (absent from a pcinumad older than the counters) */
                if (I(rs, "define_waits") > 0)
                        printf("; %lld start%s held for a define, %lld in vain", I(rs, "define_waits"),
                               I(rs, "define_waits") == 1 ? "" : "s", I(rs, "define_waits_in_vain"));
                printf("\n");
        }
        /* (absent from a pcinumad older than its worker threads) */
        json_object *wk = json_object_object_get(st, "workers");
        if (wk) {
                if (I(wk, "started") == 0)
                        printf("workers:   %lld threads, not started yet (no request over 64 KiB so far)\n", I(wk, "threads"));
                else
                        printf("workers:   %lld threads, %lld busy, %lld queued, %lld completed; longest decision %lld ms\n",
                               I(wk, "threads"), I(wk, "busy"), I(wk, "queued"), I(wk, "completed"),
                               I(wk, "longest_run_ms"));
                if (I(wk, "busy_large") || I(wk, "queued_large") || I(wk, "refused_busy"))
                        printf("           domain XMLs over 256 KiB: %lld being decided, %lld waiting, %lld refused (busy)\n",
                               I(wk, "busy_large"), I(wk, "queued_large"), I(wk, "refused_busy"));
        }
        json_object *lv = json_object_object_get(st, "libvirt");
        if (lv)
                printf("libvirt:   %s, %s; %lld redefinitions, %lld failures%s%s\n", S(lv, "uri"),
                       json_object_get_boolean(json_object_object_get(lv, "connected")) ? "connected" : "NOT connected",
                       I(lv, "redefinitions"), I(lv, "failures"),
                       json_object_object_get(lv, "last_error") ? "; last error: " : "",
                       json_object_object_get(lv, "last_error") ? S(lv, "last_error") : "");
        json_object *wp = lv ? json_object_object_get(lv, "process") : NULL;
        if (wp) {
                if (json_object_object_get(wp, "pid"))
                        printf("           watcher process %lld (%s), %lld restart%s", I(wp, "pid"), S(wp, "program"),
                               I(wp, "restarts"), I(wp, "restarts") == 1 ? "" : "s");
                else
                        printf("           watcher process NOT running (%s), %lld restart%s so far", S(wp, "program"),
                               I(wp, "restarts"), I(wp, "restarts") == 1 ? "" : "s");
                if (json_object_object_get(wp, "last_exit"))
                        printf("; the last one %s", S(wp, "last_exit"));
                printf("\n");
        }
        if (!lv)
                printf("libvirt:   not watched (--libvirt-uri none)\n");
#undef S
#undef I
}

int ctl_status(int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, 's' },
                { "json", no_argument, NULL, 'j' },
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        const char *env = getenv("PCINUMA_SOCKET");
        const char *path = env && *env ? env : PCINUMA_DEFAULT_SOCKET;
        bool json = false;
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
                switch (c) {
                case 's':
                        path = optarg;
                        break;
                case 'j':
                        json = true;
                        break;
                case 'h':
                        printf("Usage: pcinumactl status [--socket PATH] [--json]\n\n"
                               "Ask pcinumad for its state: uptime, host map, policy and counters.\n\n"
                               "  --socket PATH  pcinumad's socket (default $PCINUMA_SOCKET, else\n"
                               "                 " PCINUMA_DEFAULT_SOCKET ")\n"
                               "  --json         print pcinumad's answer as JSON\n"
                               "  -h, --help     show this help\n\n"
                               "Exit status: 0 printed, 1 pcinumad cannot be reached or gave an error, 2 bad option.\n");
                        return 0;
                default:
                        return CTL_EXIT_BAD_INPUT;
                }
        }
        _cleanup_json_ json_object *req = proto_request_new_status();
        _cleanup_json_ json_object *resp = NULL;
        _cleanup_free_ char *err = NULL;
        if (client_call(path, req, 5000, &resp, &err) < 0)
                return ctl_error(CTL_EXIT_FAILED, who, "%s (is pcinumad running?)", err);
        json_object *e = json_object_object_get(resp, "error");
        if (e)
                return ctl_error(CTL_EXIT_FAILED, who, "pcinumad answered: %s", json_object_get_string(e));
        json_object *st = json_object_object_get(resp, "status");
        if (!st)
                return ctl_error(CTL_EXIT_FAILED, who, "malformed answer from pcinumad");
        if (json)
                printf("%s\n", json_object_to_json_string_ext(st, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED));
        else
                print_status(st);
        return 0;
}

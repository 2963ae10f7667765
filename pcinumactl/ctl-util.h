/* What pcinumactl's verbs share: exit codes, the options --sysfs-root,
 * --policy and --policy-file, reading a FILE or "-", error printing, and
 * loading policy + domain + host map into a plan (plan and topo).  No verb
 * file calls another verb file; whatever two verbs need lives here. */
#pragma once

#include <getopt.h>
#include <json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "paths.h"
#include "util.h"

#define CTL_DEFAULT_POLICY_FILE PCINUMA_DEFAULT_POLICY_FILE

/* The exit codes every verb uses: 0 done; 1 refused by the policy (plan),
 * invalid (check-policy) or failed (status, a failed write in host); 2 bad
 * input or usage. */
enum {
        CTL_EXIT_REFUSED = 1,
        CTL_EXIT_INVALID = 1,
        CTL_EXIT_FAILED = 1,
        CTL_EXIT_BAD_INPUT = 2,
};

/* getopt_long values of the shared options.  They are also what getopt
 * leaves in optopt for a missing argument, which `host` prints ("unknown
 * option '-r'"), so they stay these letters. */
enum {
        CTL_OPT_SYSFS_ROOT = 'r',
        CTL_OPT_POLICY = 'p',
        CTL_OPT_POLICY_FILE = 'f',
};
#define CTL_OPTION_SYSFS_ROOT  { "sysfs-root", required_argument, NULL, CTL_OPT_SYSFS_ROOT }
#define CTL_OPTION_POLICY      { "policy", required_argument, NULL, CTL_OPT_POLICY }
#define CTL_OPTION_POLICY_FILE { "policy-file", required_argument, NULL, CTL_OPT_POLICY_FILE }

/* "<who>: <message>" and a newline on stderr; returns status, so a verb
 * can write `return ctl_error(CTL_EXIT_BAD_INPUT, who, "...")`. */
int ctl_error(int status, const char *who, const char *fmt, ...) _printf_(3, 4);

/* $PCINUMA_SYSFS_ROOT if set and not empty, else /sys. */
const char *ctl_default_sysfs_root(void);

/* What to call an input in a message: "standard input" for "-", else the
 * path itself. */
const char *ctl_input_name(const char *path);

/* Read FILE (or standard input for "-") whole, refusing more than max
 * bytes (the limit for a domain XML).  On success *ret (NUL-terminated,
 * owned by the caller) and *ret_len; on failure a negative errno and a
 * message in *ret_error naming the input. */
int ctl_read_input(const char *path, size_t max, char **ret, size_t *ret_len, char **ret_error);

struct policy;
/* Load the policy file at path, or standard input for "-" (errors then
 * name "standard input").  0 or a negative errno with *ret_error. */
int ctl_load_policy(const char *path, struct policy **ret, char **ret_error);

struct hostmap_device;
/* A device's place: its host bridge and the bridges above it, as
 * "pci0000:00 > 0000:00:01.0 > ..." ("unknown" without a host bridge). */
char *ctl_device_path(const struct hostmap_device *d);

/* v as a JSON string "0x" and width hex digits. */
struct json_object *ctl_json_hex(unsigned v, int width);

struct hostmap;
/* "<who>: warning: sysfs <what>" on stderr for each sysfs file the host
 * map reader could not make sense of, and a count of those it dropped. */
void ctl_print_hostmap_warnings(const char *who, const struct hostmap *h);

/* What plan and topo share: --sysfs-root, --policy NAME or --policy-file
 * FILE (default PCINUMA_DEFAULT_POLICY_FILE if it exists, else the built-in
 * default), and the input FILE or "-". */
struct ctl_plan_args {
        const char *who;        /* "pcinumactl plan": prefixes every message */
        const char *root;
        const char *policy_name;
        const char *policy_file;
        const char *input;
};

/* Store one of --sysfs-root, --policy or --policy-file, as getopt_long
 * returned it (c, optarg), in a.  Returns false for any other option,
 * which the verb handles itself. */
bool ctl_plan_args_option(struct ctl_plan_args *a, int c, const char *arg);

/* A verb's own option: getopt_long's value and optarg; true if the verb
 * took it, false for a bad option. */
typedef bool (*ctl_option_fn)(void *data, int c, const char *arg);

/* Run getopt_long over a verb's arguments with opts (the verb's table,
 * shared options included).  With a, --sysfs-root, --policy and
 * --policy-file go into it and the verb takes exactly one FILE|- (into
 * a->input; a wrong count prints count_error, if not NULL, then the usage
 * on stderr); without a, no argument (an extra one is "unexpected
 * argument").  Every other option goes to option (NULL: none).  -h/--help
 * prints the usage on stdout and returns 0; a bad option prints it on
 * stderr and returns CTL_EXIT_BAD_INPUT.  Returns -1 when the verb goes on. */
int ctl_parse_args(int argc, char **argv, const char *who, const struct option *opts, void (*usage)(FILE *f),
                   ctl_option_fn option, void *data, struct ctl_plan_args *a, const char *count_error);

/* What to print after "cannot read host map from '<root>': " for a failed
 * hostmap_load_*() (r, err): the loader's message without its own
 * "sysfs root '<root>': " prefix, so the root is named once. */
const char *ctl_hostmap_load_reason(const char *root, int r, const char *err);

struct engine_result;
/* Load the policy, the domain XML and the host map, and plan.  On error,
 * prints it on stderr (naming the file at fault) and returns the exit
 * status 2; on success returns 0 with the caller owning both results. */
int ctl_plan_input(const struct ctl_plan_args *a, struct hostmap **ret_h, struct engine_result **ret_res);

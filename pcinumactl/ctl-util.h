/* What pcinumactl's verbs share: exit codes, the options --sysfs-root,
 * --policy and --policy-file, reading a FILE or "-", error printing, and
 * loading policy + domain + host map into a plan (plan, define, topo,
 * nccl-topo, and the orchestrator adapters in adapters/, which link this
 * file as ctl_util_dep).  No verb file calls another verb file; whatever
 * two verbs need lives here. */
#pragma once

#include <getopt.h>
#include <json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "paths.h"
#include "policy.h"
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
/* The three together, as the verbs that plan a FILE|- list them first. */
#define CTL_OPTIONS_PLAN_ARGS CTL_OPTION_SYSFS_ROOT, CTL_OPTION_POLICY, CTL_OPTION_POLICY_FILE

/* Their lines of the usage of plan and define. */
#define CTL_USAGE_PLAN_ARGS                                                                                     \
        "  --sysfs-root DIR   read the host map from DIR instead of /sys\n"                                     \
        "                     (default: $PCINUMA_SYSFS_ROOT, else /sys)\n"                                      \
        "  --policy NAME      off, legacy, preferred, socket, require (alias required)\n"                       \
        "  --policy-file FILE the policy file, - for standard input (default\n"                                 \
        "                     " CTL_DEFAULT_POLICY_FILE " if it exists, else the built-in\n"                    \
        "                     default: preferred, no rules)\n"

#if PCINUMA_STAND_INS
/* A stand_ins build only: --stand-ins FILE, which the orchestrator
 * adapters take (ctl_load_stand_ins()), and its lines of their usage. */
#define CTL_OPT_STAND_INS 0x1100
#define CTL_OPTION_STAND_INS { "stand-ins", required_argument, NULL, CTL_OPT_STAND_INS }
#define CTL_USAGE_STAND_INS                                                                                     \
        "\n"                                                                                                    \
        "A test build (meson -Dstand_ins=true), never for production:\n"                                        \
        "  --stand-ins FILE    FILE is a JSON object {\"MAC\": \"host BDF\", ...}: a virtio\n"                  \
        "                      <interface type='user'> with such a MAC is planned as the\n"                     \
        "                      passthrough device at that host address\n"
#else
#define CTL_USAGE_STAND_INS ""
#endif

/* The adapters' usage lines of the shared three options (their defaults
 * come from the environment as well: ctl_plan_args_env()). */
#define CTL_USAGE_ADAPTER_ARGS                                                                                  \
        "  --sysfs-root DIR    read the host map from DIR instead of /sys\n"                                    \
        "                      (default: $PCINUMA_SYSFS_ROOT, else /sys)\n"                                     \
        "  --policy NAME       off, legacy, preferred, socket, require (alias required)\n"                      \
        "  --policy-file FILE  the policy file (default: $PCINUMA_POLICY_FILE, else\n"                          \
        "                      " CTL_DEFAULT_POLICY_FILE " if it exists, else the built-in default)\n"

/* The end of an orchestrator adapter's option table, after its own
 * options: the shared three, -h/--help, --version and, in a stand_ins
 * build, --stand-ins (ctl_parse_adapter_args()). */
#if PCINUMA_STAND_INS
#define CTL_OPTIONS_ADAPTER_STAND_INS CTL_OPTION_STAND_INS,
#else
#define CTL_OPTIONS_ADAPTER_STAND_INS
#endif
#define CTL_OPTIONS_ADAPTER                                                                                     \
        CTL_OPTIONS_PLAN_ARGS, { "help", no_argument, NULL, 'h' }, { "version", no_argument, NULL, 'v' },       \
        CTL_OPTIONS_ADAPTER_STAND_INS { NULL, 0, NULL, 0 }

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
int ctl_read_policy_file(const char *path, struct policy **ret, char **ret_error);

struct hostmap_device;
/* A device's place: its host bridge and the bridges above it, as
 * "pci0000:00 > 0000:00:01.0 > ..." ("unknown" without a host bridge). */
char *ctl_device_path(const struct hostmap_device *d);

/* v as a JSON string "0x" and width hex digits. */
struct json_object *ctl_json_hex(unsigned v, int width);

struct hostmap;
struct standins;
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
#if PCINUMA_STAND_INS
        /* A stand_ins build only: --stand-ins FILE, or NULL; and the
         * stand-in table to hang on the host map (standins.h), or NULL,
         * which ctl_load_stand_ins() reads and ctl_plan_args_done() frees. */
        const char *stand_ins_file;
        struct standins *stand_ins;
#endif
};

/* Free what a owns (in a stand_ins build, the stand-in table that
 * ctl_load_stand_ins() read); the strings it points to are the caller's.
 * For _cleanup_(ctl_plan_args_done). */
void ctl_plan_args_done(struct ctl_plan_args *a);

/* Store one of --sysfs-root, --policy or --policy-file (and in a
 * stand_ins build --stand-ins), as getopt_long returned it (c, optarg), in
 * a.  Returns false for any other option, which the verb handles itself. */
bool ctl_plan_args_option(struct ctl_plan_args *a, int c, const char *arg);

/* What the orchestrator adapters take from the environment, which their
 * orchestrator passes instead of options: $PCINUMA_POLICY_FILE as the
 * policy file unless --policy or --policy-file was given. */
void ctl_plan_args_env(struct ctl_plan_args *a);

/* In a stand_ins build, read a->stand_ins_file (if set) into
 * a->stand_ins, which a owns (ctl_plan_args_done()).  A bad table is bad
 * input: its message (naming the file and the entry) on stderr and 2;
 * else 0.  In any other build: nothing, 0. */
int ctl_load_stand_ins(struct ctl_plan_args *a);

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

/* An orchestrator adapter's command line, its opts ending in
 * CTL_OPTIONS_ADAPTER: as ctl_parse_args() with a, but no argument at all
 * (an extra one is "unexpected argument"), and --version prints "<a->who>
 * <version>" on stdout and returns 0.  Then $PCINUMA_POLICY_FILE, which the
 * orchestrator passes instead of options (ctl_plan_args_env()).  Returns
 * -1 when the adapter goes on, else its exit status. */
int ctl_parse_adapter_args(int argc, char **argv, const struct option *opts, void (*usage)(FILE *f),
                           ctl_option_fn option, void *data, struct ctl_plan_args *a);

/* What to print after "cannot read host map from '<root>': " for a failed
 * hostmap_load_*() (r, err): the loader's message without its own
 * "sysfs root '<root>': " prefix, so the root is named once. */
const char *ctl_hostmap_load_reason(const char *root, int r, const char *err);

struct policy;
/* The policy a plan runs under: --policy NAME forces a mode (the feature
 * switches keep their defaults, as engine_plan()'s 'forced' has it);
 * otherwise the policy file (--policy-file, else
 * PCINUMA_DEFAULT_POLICY_FILE if it exists) or the built-in default. */
struct ctl_policy {
        struct policy *pol;             /* NULL when forced */
        bool forced;
        enum policy_mode mode;          /* the forced mode */
};
void ctl_policy_done(struct ctl_policy *p);

/* Load a's policy into *ret.  On error, prints it on stderr (naming the
 * file at fault) and returns 2; else 0, the caller owning *ret
 * (ctl_policy_done()). */
int ctl_load_policy(const struct ctl_plan_args *a, struct ctl_policy *ret);

/* Read the host map under a->root (hostmap_load_for_plan()) and print its
 * warnings.  On error, prints it and returns 2; else 0 and *ret_h. */
int ctl_load_hostmap(const struct ctl_plan_args *a, struct hostmap **ret_h);

struct engine_result;
/* Load the policy, the domain XML (a->input, a FILE or "-") and the host
 * map, and plan.  On error, prints it on stderr (naming the file at fault)
 * and returns the exit status 2; on success returns 0 with the caller
 * owning both results. */
int ctl_plan_input(const struct ctl_plan_args *a, struct hostmap **ret_h, struct engine_result **ret_res);

/* The same for a domain XML the caller has in memory (xml[0..len), not
 * necessarily NUL-terminated); a->input only names it in messages. */
int ctl_plan_xml(const struct ctl_plan_args *a, const char *xml, size_t len, struct hostmap **ret_h,
                 struct engine_result **ret_res);

/* What every verb and adapter that plans says on stderr after the plan:
 * the revert's warning, the plan's warnings and the causes of the devices
 * that stay on pcie.0 (when 'warnings'; report_causes()), and for a
 * refusal its reason and each cause once with its fix and the devices it
 * concerns (report_refusal()), each line with "<who>: ".  Returns
 * CTL_EXIT_REFUSED for a refusal, else 0. */
int ctl_report_plan(const char *who, const struct engine_result *res, bool warnings);

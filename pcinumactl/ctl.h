/* pcinumactl's subcommands, one function each, called by pcinumactl.c's
 * dispatcher with argv[0] set to the subcommand's name.  Each returns the
 * process exit code. */
#pragma once

int ctl_host(int argc, char **argv);
int ctl_nccl_topo(int argc, char **argv);

struct hostmap;
/* "<who>: warning: <file>: <what>" on stderr for each sysfs file the host
 * map reader could not make sense of. */
void ctl_print_hostmap_warnings(const char *who, const struct hostmap *h);

struct engine_result;
/* What plan and topo share: --sysfs-root, --policy NAME or --policy-file
 * FILE (default /etc/pcinuma/policy.json if it exists, else the built-in
 * default), and the input FILE or "-". */
struct ctl_plan_args {
        const char *who;        /* "pcinumactl plan": prefixes every message */
        const char *root;
        const char *policy_name;
        const char *policy_file;
        const char *input;
};
/* Load the policy, the domain XML and the host map, and plan.  On error,
 * prints it on stderr (naming the file at fault) and returns the exit
 * status 2; on success returns 0 with the caller owning both results. */
int ctl_plan_input(const struct ctl_plan_args *a, struct hostmap **ret_h, struct engine_result **ret_res);
/* $PCINUMA_SYSFS_ROOT if set and not empty, else /sys. */
const char *default_sysfs_root(void);

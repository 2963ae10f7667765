/* pcinumactl's verbs, one file each (ctl-<verb>.c), called by the
 * dispatcher in pcinumactl.c with argv[0] set to the verb's name.  Each
 * returns the process exit code (ctl-util.h names them).  A verb file calls
 * no other verb file: what verbs share is in ctl-util.[ch]. */
#pragma once

/* ctl-plan.c: plan a domain XML and print it (xml, explain or json). */
int ctl_plan(int argc, char **argv);

/* ctl-revert.c: undo pcinuma's rewrite of a domain XML file, or of a
 * defined domain's persistent definition through libvirt (--domain). */
int ctl_revert(int argc, char **argv);

/* ctl-define.c: plan a domain XML and define the plan through libvirt. */
int ctl_define(int argc, char **argv);

/* ctl-host.c: show the host map (nodes, distances, passthrough devices). */
int ctl_host(int argc, char **argv);
int ctl_nccl_topo(int argc, char **argv);

/* ctl-fingerprint.c: the host's topology fingerprint (digest, groups). */
int ctl_fingerprint(int argc, char **argv);

/* ctl-topo.c: the host vs planned guest device path matrix. */
int ctl_topo(int argc, char **argv);

/* ctl-check-policy.c: validate a policy file and summarise it; exit 0
 * valid, 1 invalid policy, 2 usage error or unreadable file. */
int ctl_check_policy(int argc, char **argv);

/* ctl-audit.c: every defined domain's state and next-start verdict under
 * the policy, through libvirt (read-only); exit 1 when one would be
 * refused. */
int ctl_audit(int argc, char **argv);

/* ctl-status.c: ask pcinumad for its state and counters. */
int ctl_status(int argc, char **argv);

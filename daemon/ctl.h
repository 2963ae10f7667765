/* pcinumactl's subcommands, one function each, called by pcinumactl.c's
 * dispatcher with argv[0] set to the subcommand's name.  Each returns the
 * process exit code. */
#pragma once

int ctl_host(int argc, char **argv);

struct hostmap;
/* "<who>: warning: <file>: <what>" on stderr for each sysfs file the host
 * map reader could not make sense of. */
void ctl_print_hostmap_warnings(const char *who, const struct hostmap *h);

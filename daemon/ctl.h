/* pcinumactl's subcommands, one function each, called by pcinumactl.c's
 * dispatcher with argv[0] set to the subcommand's name.  Each returns the
 * process exit code. */
#pragma once

int ctl_host(int argc, char **argv);

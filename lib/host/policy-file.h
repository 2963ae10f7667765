/* Reading the policy file: the I/O in front of the pure core's
 * policy_parse() (lib/core/policy.h), here in lib/host (host_dep) so
 * that lib/core does none. */
#pragma once

#include "policy.h"

/* Read and parse a file.  -errno (with *ret_error naming the file) when
 * it cannot be read. */
int policy_load_file(const char *path, struct policy **ret, char **ret_error);

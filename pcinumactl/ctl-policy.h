/* pcinumactl check-policy: validate a policy file and summarise it. */
#pragma once

/* argv[0] is the verb ("check-policy"), argv[1] the file.  Returns the
 * process exit status: 0 valid, 1 invalid policy, 2 usage error or
 * unreadable file. */
int ctl_check_policy(int argc, char **argv);

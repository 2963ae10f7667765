/* pcinumactl commands that go through libvirt. */
#pragma once

/* Undo pcinuma's rewrite of a defined domain's persistent definition.
 * uri may be NULL (libvirt's default).  Returns the exit code. */
int ctl_revert_domain(const char *name, const char *uri, const char *policy_file);

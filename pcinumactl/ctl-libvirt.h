/* pcinumactl's libvirt connection, shared by the verbs that talk to
 * libvirt (revert --domain, audit): open a connection with libvirt's own
 * error printing turned off, so that each verb says what failed in its
 * own words, and read libvirt's last error message.  Nothing on the hook
 * path links this. */
#pragma once

#include <libvirt/libvirt.h>
#include <stdbool.h>

/* Connect to uri (NULL: libvirt's default), read-only when read_only (a
 * verb that changes nothing asks libvirt to enforce it).  On failure,
 * prints "<who>: cannot connect to libvirt at URI: <libvirt's message>"
 * and returns NULL. */
virConnectPtr ctl_libvirt_open(const char *who, const char *uri, bool read_only);

/* libvirt's last error message, or "unknown libvirt error".  The string
 * is libvirt's: the next libvirt call may free it, so copy it first when
 * another call comes before its use. */
const char *ctl_libvirt_error(void);

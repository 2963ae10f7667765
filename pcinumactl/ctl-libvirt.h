/* What the pcinumactl verbs that talk to libvirt share (revert --domain,
 * define, audit): opening a connection with libvirt's own error printing off,
 * and libvirt's last error message.  These are the only pcinumactl files
 * that link libvirt's API; nothing on the hook path does. */
#pragma once

#include <libvirt/libvirt.h>

/* libvirt's last error message, or "unknown libvirt error".  It points
 * into libvirt's error object: copy it before the next libvirt call. */
const char *ctl_libvirt_error(void);

/* Connect to uri (NULL: libvirt's default), with libvirt's default error
 * printing on stderr turned off (the verbs print their own messages).  On
 * failure prints "<who>: cannot connect to libvirt at URI: <why>" and
 * returns NULL. */
virConnectPtr ctl_libvirt_connect(const char *who, const char *uri);

/* The same, read-only: for a verb that changes nothing (audit), which
 * libvirt then enforces. */
virConnectPtr ctl_libvirt_connect_read_only(const char *who, const char *uri);

/* The libvirt connection the pcinumactl verbs that talk to libvirt share
 * (ctl-libvirt.h). */
#include <libvirt/virterror.h>
#include <stdbool.h>

#include "ctl-libvirt.h"
#include "ctl-util.h"

/* libvirt prints every error on stderr by default; the verbs say what
 * failed themselves, with libvirt's message in it. */
static void quiet(void *u, virErrorPtr e) {
        (void) u;
        (void) e;
}

const char *ctl_libvirt_error(void) {
        const char *m = virGetLastErrorMessage();
        return m ? m : "unknown libvirt error";
}

static virConnectPtr connect_to(const char *who, const char *uri, bool read_only) {
        virSetErrorFunc(NULL, quiet);
        virConnectPtr c = read_only ? virConnectOpenReadOnly(uri) : virConnectOpen(uri);
        if (!c)
                ctl_error(0, who, "cannot connect to libvirt at %s: %s", uri ? uri : "(default)", ctl_libvirt_error());
        return c;
}

virConnectPtr ctl_libvirt_connect(const char *who, const char *uri) {
        return connect_to(who, uri, false);
}

virConnectPtr ctl_libvirt_connect_read_only(const char *who, const char *uri) {
        return connect_to(who, uri, true);
}

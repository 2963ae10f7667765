/* pcinumactl's libvirt connection (ctl-libvirt.h): the one place where
 * pcinumactl opens libvirt and reads its errors. */
#include <libvirt/virterror.h>

#include "ctl-libvirt.h"
#include "ctl-util.h"

static void quiet(void *u, virErrorPtr e) {
        (void) u;
        (void) e;
}

const char *ctl_libvirt_error(void) {
        const char *m = virGetLastErrorMessage();
        return m ? m : "unknown libvirt error";
}

virConnectPtr ctl_libvirt_open(const char *who, const char *uri, bool read_only) {
        virSetErrorFunc(NULL, quiet);
        virConnectPtr c = read_only ? virConnectOpenReadOnly(uri) : virConnectOpen(uri);
        if (!c)
                ctl_error(0, who, "cannot connect to libvirt at %s: %s", uri ? uri : "(default)", ctl_libvirt_error());
        return c;
}

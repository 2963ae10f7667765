/* The group fixture of the tests over the fixture VM (fake-vm.h): the
 * policies to run them under and the host, made once by group_setup() and
 * freed by group_teardown() (include after cmocka.h, in one test file). */
#pragma once

#include "fake-vm.h"

static const char *const policies[] = FAKE_VM_POLICIES;
static struct hostmap *host;

static int group_setup(void **state) {
        (void) state;
        host = fake_vm_host();
        return 0;
}

static int group_teardown(void **state) {
        (void) state;
        host = hostmap_free(host);
        return 0;
}

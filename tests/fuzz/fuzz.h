/* Shared by the fuzz targets (tests/fuzz/fuzz-*.c): the libFuzzer entry point,
 * which tests/fuzz/replay-main.c also calls when the targets are built
 * without libFuzzer (to replay the committed corpora as ordinary tests),
 * and a small in-memory host map for the targets that need one. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "hostmap.h"

/* A fuzz target must return 0 and must not keep the input. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The bundled sample host (tests/fixtures/hosts/sample-4n.json): 4 nodes
 * on 2 sockets, its GPUs, NICs, VFs, NVMe drive and mdevs, as its fake
 * sysfs tree loads.  The caller owns the map. */
struct hostmap *fuzz_sample_hostmap(void);

/* Abort with a message: a property the target checks does not hold.  The
 * fuzzer reports the abort as a crash with the input that caused it. */
_Noreturn void fuzz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

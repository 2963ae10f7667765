/* Shared by the fuzz targets (tests/fuzz/fuzz-*.c): the libFuzzer entry point,
 * which tests/fuzz/replay-main.c also calls when the targets are built
 * without libFuzzer (to replay the committed corpora as ordinary tests),
 * a small in-memory host map for the targets that need one, and the
 * framing of the protocol targets' inputs. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hostmap.h"
#include "frame.h"
#include "util.h"

/* A fuzz target must return 0 and must not keep the input. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The bundled sample host (tests/fixtures/hosts/sample-4n.json): 4 nodes
 * on 2 sockets, its GPUs, NICs, VFs, NVMe drive and mdevs, as its fake
 * sysfs tree loads.  The caller owns the map. */
struct hostmap *fuzz_sample_hostmap(void);

/* The same host numbered otherwise (every device in PCI domain 0x0001, the
 * mdevs under other UUIDs): the same topology fingerprint, the twin an
 * incoming migration maps onto (fuzz-migrate).  The caller owns the map. */
struct hostmap *fuzz_sample_hostmap_twin(void);

/* Abort with a message: a property the target checks does not hold.  The
 * fuzzer reports the abort as a crash with the input that caused it. */
_Noreturn void fuzz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The protocol targets' inputs (fuzz-protocol, fuzz-wproto): one whose
 * first byte is more than 1 is a bare payload and gets the big-endian
 * length header in front, so most inputs reach the decoder as one whole
 * frame.  Then points *data and *size at the framed copy and returns it
 * (the caller frees it); else leaves them and returns NULL. */
static inline uint8_t *fuzz_frame_input(const uint8_t **data, size_t *size) {
        size_t n = *size;
        if (n == 0 || (*data)[0] <= 1)
                return NULL;
        uint8_t *framed = xmalloc(n + FRAME_HEADER_SIZE);
        frame_header((char *) framed, n);
        memcpy(framed + FRAME_HEADER_SIZE, *data, n);
        *data = framed;
        *size = n + FRAME_HEADER_SIZE;
        return framed;
}

/* SHA-256 (FIPS 180-4, as in FIPS 180-2): a small streaming implementation
 * so that the topology fingerprint needs no crypto library.  It is a digest
 * for telling hosts apart, not for security decisions.  Pure, no I/O. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define SHA256_DIGEST_SIZE 32
/* Lower-case hex plus NUL. */
#define SHA256_HEX_SIZE (2 * SHA256_DIGEST_SIZE + 1)

struct sha256_ctx {
        uint32_t state[8];
        uint64_t bytes;           /* message length so far */
        uint8_t block[64];
        size_t used;              /* bytes in block */
};

void sha256_init(struct sha256_ctx *c);
void sha256_update(struct sha256_ctx *c, const void *data, size_t len);
/* Writes the digest and leaves c to be initialised again before reuse. */
void sha256_final(struct sha256_ctx *c, uint8_t out[SHA256_DIGEST_SIZE]);

/* One call: the digest of data[0..len) as lower-case hex into hex
 * (SHA256_HEX_SIZE bytes); returns hex. */
char *sha256_hex(const void *data, size_t len, char hex[SHA256_HEX_SIZE]);

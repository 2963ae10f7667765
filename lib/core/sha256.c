/* SHA-256 through nettle (sha256.h).  tests/unit/test-sha256.c checks it
 * against the FIPS 180-2 appendix B test vectors and the padding
 * boundaries. */
#include "sha256.h"

#include <stdint.h>

char *sha256_hex(const void *data, size_t len, char hex[SHA256_HEX_SIZE]) {
        static const char digits[] = "0123456789abcdef";
        struct sha256_ctx c;
        uint8_t d[SHA256_DIGEST_SIZE];

        sha256_init(&c);
        sha256_update(&c, len, data);
        sha256_digest(&c, sizeof d, d);
        for (size_t i = 0; i < sizeof d; i++) {
                hex[2 * i] = digits[d[i] >> 4];
                hex[2 * i + 1] = digits[d[i] & 0xf];
        }
        hex[2 * SHA256_DIGEST_SIZE] = 0;
        return hex;
}

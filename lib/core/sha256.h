/* SHA-256 (FIPS 180-4) of a buffer as lower-case hex, for the topology
 * fingerprint and the mark's record of the NCCL file, and the key pcinumad
 * remembers a hook answer by (memo.h), where its collision resistance is
 * what makes the remembered answer the right one.  The hashing is
 * nettle's (libnettle, which every libvirt host has through gnutls); this
 * is the one place that calls it.  Pure, no I/O. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <nettle/sha2.h>        /* SHA256_DIGEST_SIZE */

/* Lower-case hex plus NUL. */
#define SHA256_HEX_SIZE (2 * SHA256_DIGEST_SIZE + 1)

/* The digest of data[0..len) as lower-case hex into hex (SHA256_HEX_SIZE
 * bytes); returns hex. */
char *sha256_hex(const void *data, size_t len, char hex[SHA256_HEX_SIZE]);

/* The same, in parts and as raw bytes: sha256_begin(), then
 * sha256_add() for each part, then sha256_end() writes the
 * SHA256_DIGEST_SIZE bytes of the digest into ret. */
void sha256_begin(struct sha256_ctx *c);
void sha256_add(struct sha256_ctx *c, const void *data, size_t len);
void sha256_end(struct sha256_ctx *c, uint8_t ret[SHA256_DIGEST_SIZE]);

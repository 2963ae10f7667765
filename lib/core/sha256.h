/* SHA-256 (FIPS 180-4) of a buffer as lower-case hex, for the topology
 * fingerprint and the mark's record of the NCCL file: a digest for telling
 * hosts and texts apart, not for security decisions.  The hashing is
 * nettle's (libnettle, which every libvirt host has through gnutls); this
 * is the one place that calls it.  Pure, no I/O. */
#pragma once

#include <stddef.h>

#include <nettle/sha2.h>        /* SHA256_DIGEST_SIZE */

/* Lower-case hex plus NUL. */
#define SHA256_HEX_SIZE (2 * SHA256_DIGEST_SIZE + 1)

/* The digest of data[0..len) as lower-case hex into hex (SHA256_HEX_SIZE
 * bytes); returns hex. */
char *sha256_hex(const void *data, size_t len, char hex[SHA256_HEX_SIZE]);

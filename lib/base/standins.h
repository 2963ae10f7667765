/* The stand-in table of a test build (meson -Dstand_ins=true): which
 * virtio NICs of a domain pcinuma treats as passthrough devices.  A
 * session libvirtd cannot pass a PCI device through, so the real-client
 * tests give a guest an <interface type='user'> with <model
 * type='virtio'/> and a MAC this table maps to a host BDF, and pcinuma
 * (hook, engine, mark, watcher) places it as the PCI hostdev of that BDF
 * (docs/hacking.md, "The stand-in seam").
 *
 * The file is a JSON object, MAC -> host BDF:
 *     {"52:54:00:5a:00:01": "0000:21:00.0", "52:54:00:5a:00:02": "0000:22:00.0"}
 *
 * Only a stand_ins build compiles this (PCINUMA_STAND_INS is 1 there and
 * 0 otherwise); a normal build has no table, no option and no code path
 * that reads one.  Parsing is pure; standins_load_file() is the reader. */
#pragma once

#if PCINUMA_STAND_INS

#include <stdbool.h>
#include <stddef.h>

#include "pciaddr.h"
#include "util.h"

/* A stand-in file larger than this is refused. */
#define STANDINS_FILE_MAX (64u * 1024u)

struct standin {
        char mac[18];                   /* lower case, "52:54:00:5a:00:01" */
        struct pci_addr host;           /* the host device it stands for */
};

struct standins {
        struct standin *entries;        /* in the file's order */
        size_t n;
        char *source;                   /* the file's name, for messages */
};

/* Parse buf[0..len), the text of the file named 'source'.  Strict: valid
 * JSON, a single object, every key a unicast MAC address (six pairs of hex
 * digits separated by ':', either case), every value a host BDF
 * ("dddd:bb:ss.f"), no MAC twice (in any spelling) and no BDF twice.
 * Anything else is -EINVAL with *ret_error naming the file and the entry
 * at fault.  The caller owns *ret (standins_free()). */
int standins_parse(const char *buf, size_t len, const char *source, struct standins **ret, char **ret_error);

/* Read and parse the file at 'path' (at most STANDINS_FILE_MAX bytes);
 * errors as standins_parse(), or the open/read errno with *ret_error. */
int standins_load_file(const char *path, struct standins **ret, char **ret_error);

/* The entry for MAC address 'mac' (either case), or NULL. */
const struct standin *standins_find(const struct standins *s, const char *mac);

struct standins *standins_free(struct standins *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct standins *, standins_free)
#define _cleanup_standins_ __attribute__((cleanup(standins_freep)))

#endif

/* Pre-images: the persistent definitions pcinuma-watcher replaces, kept on
 * disk before every redefinition so an administrator can put one back with
 * 'virsh define FILE' (docs/operations.md, "Edits while pcinuma
 * redefines, and pre-images").  Only pcinuma-watcher uses this module.
 *
 * One file per redefinition, mode 0600, in one directory:
 *   NAME_UUID_YYYYMMDDTHHMMSS.UUUUUUZ.xml   (UTC, microseconds)
 * NAME is the domain name with every character outside [A-Za-z0-9._+-]
 * replaced by '_' (at most 64 of them); the UUID and the time stamp are
 * what the pruning reads back.
 *
 * The store is bounded (docs/security.md, "Pre-images"): it
 * keeps the newest PREIMAGE_PER_DOMAIN files of each domain, and at most
 * PREIMAGE_TOTAL files and max_bytes bytes in all.  To keep under the
 * folder's limits it drops the oldest files that are not the newest of
 * their own domain: a domain's newest pre-image never goes to make room
 * for another domain's.  When even that cannot make room for a new one,
 * the save is refused (and the watcher does not redefine that domain),
 * so that one libvirt user defining many domains can neither evict
 * another's only pre-image nor fill the disk. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PREIMAGE_PER_DOMAIN 5
#define PREIMAGE_TOTAL 10000
/* The default byte limit of the folder (pcinumad --preimage-max-bytes). */
#define PREIMAGE_MAX_BYTES_DEFAULT (UINT64_C(128) << 20)

struct preimage_store;

/* A store for directory 'dir' (created, mode 0700, with its parent, when
 * missing) of at most max_bytes bytes in all.  Nothing is opened yet: the
 * first save does it, so a directory an admin fixes later is picked up.
 * The caller owns the store. */
struct preimage_store *preimage_store_new(const char *dir, uint64_t max_bytes);
struct preimage_store *preimage_store_free(struct preimage_store *s);

/* Write xml as the newest pre-image of domain name/uuid (written, not yet
 * fsync'ed: preimage_prune does that after the redefinition).  *ret_path (the file's full
 * path) is the caller's.  Negative errno on failure, with a message in
 * *ret_error naming the directory; -ENOSPC when the folder's limits leave
 * no room for it even once every file that is not the newest of its
 * domain is dropped (nothing is written then). */
int preimage_save(struct preimage_store *s, const char *name, const char *uuid, const char *xml, char **ret_path,
                  char **ret_error);

/* What a prune dropped, for the journal. */
struct preimage_dropped {
        size_t n_own;                   /* this domain's, beyond its newest PREIMAGE_PER_DOMAIN */
        size_t n_others;                /* other domains' older ones, for the folder's limits */
        uint64_t bytes;                 /* what the dropped files held */
        char *files;                    /* their names, space-separated (the first 10, then "..."), or NULL */
        size_t n_left;                  /* files left, and their bytes */
        uint64_t bytes_left;
        bool over;                      /* still over a limit: every file left is its domain's newest */
};
void preimage_dropped_done(struct preimage_dropped *d);

/* After the redefinition: sync the pre-image at path to disk, and delete
 * the oldest files beyond the limits, of this domain and in all (never a
 * domain's newest, never the file just saved); *ret says what went.  (Not in
 * preimage_save: a save whose redefinition does not happen must not cost
 * an older pre-image, nor its fsync delay the define.) */
void preimage_prune(struct preimage_store *s, const char *path, const char *uuid, struct preimage_dropped *ret);

/* Delete a pre-image whose redefinition did not happen (path from
 * preimage_save).  Accepts NULL. */
void preimage_discard(struct preimage_store *s, const char *path);

/* The store's directory. */
const char *preimage_store_dir(const struct preimage_store *s);

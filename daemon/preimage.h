/* Pre-images: the persistent definitions pcinuma-watcher replaces, kept on
 * disk before every redefinition so an administrator can put one back with
 * 'virsh define FILE' (issue 13).  Only pcinuma-watcher uses this module.
 *
 * One file per redefinition, mode 0600, in one directory:
 *   NAME_UUID_YYYYMMDDTHHMMSS.UUUUUUZ.xml   (UTC, microseconds)
 * NAME is the domain name with every character outside [A-Za-z0-9._+-]
 * replaced by '_' (at most 64 of them); the UUID and the time stamp are
 * what the pruning reads back.  The store keeps the newest
 * PREIMAGE_PER_DOMAIN files of each domain and PREIMAGE_TOTAL in all;
 * older ones are deleted after each redefinition. */
#pragma once

#include <stddef.h>

#define PREIMAGE_PER_DOMAIN 5
#define PREIMAGE_TOTAL 1000

struct preimage_store;

/* A store for directory 'dir' (created, mode 0700, with its parent, when
 * missing).  Nothing is opened yet: the first save does it, so a directory
 * an admin fixes later is picked up.  The caller owns the store. */
struct preimage_store *preimage_store_new(const char *dir);
struct preimage_store *preimage_store_free(struct preimage_store *s);

/* Write xml as the newest pre-image of domain name/uuid (written, not yet
 * fsync'ed: preimage_prune does that after the redefinition).  *ret_path (the file's full
 * path) is the caller's.  Negative errno on failure, with a message in
 * *ret_error naming the directory. */
int preimage_save(struct preimage_store *s, const char *name, const char *uuid, const char *xml, char **ret_path,
                  char **ret_error);

/* After the redefinition: sync the pre-image at path to disk, and delete
 * the oldest files beyond the limits, of this domain and in all.  (Not in
 * preimage_save: a save whose redefinition does not happen must not cost
 * an older pre-image, nor its fsync delay the define.) */
void preimage_prune(struct preimage_store *s, const char *path, const char *uuid);

/* Delete a pre-image whose redefinition did not happen (path from
 * preimage_save).  Accepts NULL. */
void preimage_discard(struct preimage_store *s, const char *path);

/* The rewriter: applies a plan to the domain's XML document and writes
 * the pcinuma metadata mark (docs/design.md §7, mark.h), or undoes both from the
 * mark; and for an incoming migration, renames the host devices in the
 * hostdev sources and the mark as the matching (migrate.h) mapped them.
 * Pure: it edits the in-memory document only. */
#pragma once

#include "domain.h"
#include "planner.h"

struct migrate_map;

/* Apply p, which was computed for d, to d's document: give each moved
 * device its root port address, prune the emptied root ports, add the
 * expander buses and root ports, and write the mark (which records what
 * is needed to undo all of it).  d must carry no mark.  d's model is
 * reloaded.  0 or a negative errno with *ret_error. */
int rewrite_apply(struct domain *d, const struct plan *p, char **ret_error);

/* Undo the mark in d: remove the controllers it added, restore the moved
 * devices' original addresses and the pruned controllers, undo the feature
 * switches, and remove the mark.  What the user added since stays: a
 * controller pcinuma added that another device now sits on, the user's
 * <qemu:*> elements and arguments.  The mark is read and checked whole
 * first: a mark it refuses (a <pcinuma:removed> holding anything but one
 * <controller type='pci'>, an element that is no part of a mark, a value
 * the domain parser would refuse) gives -EINVAL with *ret_error naming it,
 * and d is unchanged.  Returns 1 when d was reverted, 0 when it carried no
 * mark.  When something could not be restored exactly (a pruned root port
 * whose index libvirt has since refilled and used, a port kept for a
 * device on it), *ret_warning (if non-NULL) gets a malloc'ed message, one
 * line each. */
int rewrite_revert(struct domain *d, char **ret_warning, char **ret_error);

/* An incoming domain's host side, as the matching mapped it (migrate.h):
 * the <source><address> the domain parser read of hostdev hostdev_of[k]
 * (mark device k's) names map->pairs[k].to (a BDF, or an mdev's UUID);
 * every <pcinuma:device>, <pcinuma:managed> and <pcinuma:clique> record of
 * d's mark that names a mapped device's old host (or mdev) names its new
 * one, a device record with its position and socket here; and the mark
 * carries map->fingerprint.  Each record is read once, so a device's new
 * name that is another's old one is never renamed twice.  The guest side
 * stays.  d must carry a mark; d's model is not reloaded (the engine
 * formats d and reads the text back). */
void rewrite_migrate(struct domain *d, const struct migrate_map *map, const size_t *hostdev_of);

/* The rewriter: applies a plan to the domain's XML document and writes
 * the pcinuma metadata mark (docs/design.md §7, mark.h), or undoes both from the
 * mark.  Pure: it edits the in-memory document only. */
#pragma once

#include "domain.h"
#include "planner.h"

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

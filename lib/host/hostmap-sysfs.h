/* The host map's reader: sysfs (or a fixture or captured tree laid out
 * like it) into the pure core's struct hostmap (lib/core/hostmap.h), and
 * this machine's CPU identity.  The I/O lives here, in lib/host
 * (host_dep), so that lib/core does none. */
#pragma once

#include "hostmap.h"

/* Read the host map from the tree under rootfd (laid out like /sys: it
 * holds bus/ and devices/).  Missing or garbage files are tolerated as
 * docs/design.md §4 says.  Nothing outside rootfd is ever opened: every path is
 * resolved beneath it (openat2() with RESOLVE_BENEATH, or an equivalent
 * walk with O_NOFOLLOW when openat2() is missing or refused, or when the
 * environment sets PCINUMA_SYSFS_NO_OPENAT2=1, as tests do); a link that
 * leads outside, and anything but a regular file where a file is read
 * (a FIFO, socket, device node or directory), or a file over 1 MiB, is
 * refused with a warning naming it; node ids above HOSTMAP_NODE_MAX and
 * CPU numbers above 8191 are refused too.  Returns 0, or a negative errno with *ret_error set when
 * the root itself is unusable (no bus/pci/devices and no devices/system).
 * The caller owns *ret (free with hostmap_free). */
int hostmap_load(int rootfd, struct hostmap **ret, char **ret_error);

/* Same, opening 'root' (a path) first. */
int hostmap_load_path(const char *root, struct hostmap **ret, char **ret_error);

/* Add the link (max_link_speed and max_link_width) of each GPU and RDMA
 * NIC (nccltopo_wanted()) and of the bridges above it to h, read under
 * root as hostmap_load() reads (never outside it).  A missing file leaves the link unknown; a value that is
 * not a speed ("N GT/s", "N GT/s PCIe") or a width (1 to 32) is a warning
 * in h and leaves it unknown ("Unknown", as the kernel writes for a link
 * that is down, too).  Returns 0, or a negative errno with *ret_error set
 * when root cannot be opened. */
int hostmap_load_links_path(const char *root, struct hostmap *h, char **ret_error);

/* What planning needs: hostmap_load_path(), the links
 * (hostmap_load_links_path()) and, when root is this machine's /sys, its
 * CPU identity (hostmap_read_cpu_id()).  Used by pcinumad and pcinumactl. */
int hostmap_load_for_plan(const char *root, struct hostmap **ret, char **ret_error);

/* This machine's CPU identity: uname's machine (as NCCL names it), and on
 * x86 /proc/cpuinfo's vendor_id, cpu family and model.  What cannot be
 * read stays unknown. */
void hostmap_read_cpu_id(struct hostmap_cpu_id *ret);

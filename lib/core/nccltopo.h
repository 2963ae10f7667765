/* The NCCL topology file: the XML that NCCL's NCCL_TOPO_DUMP_FILE writes
 * and NCCL_TOPO_FILE reads (NVIDIA/nccl src/graph/xml.cc), made for a
 * guest as planned or for the host itself.
 *
 * What NCCL reads from it, and why each part is there:
 *   - <system version="1"> holding one <cpu> per NUMA node (per guest cell
 *     for a guest): numaid, affinity (the node's CPUs as the kernel's
 *     cpumap writes them: 32-bit hex words, most significant first, comma
 *     separated), and arch, vendor, familyid, modelid when the caller knows
 *     the CPU (NCCL reads what is missing from the machine it runs on);
 *   - below each <cpu>, nested <pci busid= class= vendor= device=
 *     link_speed= link_width=> elements for the GPUs and RDMA NICs and the
 *     switches above them.  NCCL nests a device under the bridge two
 *     levels above it in the sysfs path (skipping the downstream port and
 *     the root port), so a switch appears as its upstream port, and a
 *     device right below a root port sits under the <cpu> itself; this
 *     module applies the same rule, to the guest's predicted path for a
 *     guest and to the host's path for the host.  Siblings are ordered by
 *     busid, as NCCL keeps them.
 *   - link_speed and link_width come from the host device (its
 *     current_link_speed and current_link_width): in a guest, QEMU's ports
 *     report their own, which is what misleads NCCL.  An attribute that is
 *     unknown is left out, and NCCL then reads it from sysfs.
 * <gpu> and <nic> elements are not written: NCCL adds them from NVML and
 * from its network plugin, by busid, to the <pci> elements found here.
 *
 * Pure: no I/O, no globals. */
#pragma once

#include <stdbool.h>

#include "domain.h"
#include "hostmap.h"
#include "planner.h"

/* The CPU's identity as NCCL writes it; a NULL field (or family < 0) is
 * left out. */
struct nccltopo_cpu {
        const char *arch;       /* "x86_64" */
        const char *vendor;     /* "GenuineIntel", "AuthenticAMD" */
        int family;             /* cpuid family + extended family */
        int model;              /* cpuid model + extended model << 4 */
};

/* What NCCL uses: a GPU (a VGA or 3D controller, PCI class 0x0300 or
 * 0x0302) or an RDMA NIC: an InfiniBand controller (0x0207), or an
 * Ethernet controller (0x0200) from NVIDIA/Mellanox (0x15b3, ConnectX:
 * RoCE) or Amazon (0x1d0f, EFA).  The host driver cannot tell (a
 * passthrough device is bound to vfio-pci), so the class and vendor do. */
bool nccltopo_wanted(uint32_t class, uint16_t vendor);

/* The guest's file for plan p of domain d (its cells) on host h.
 * Returns 0 with *ret_xml (newline-terminated); 1 when the plan places no
 * GPU or RDMA NIC, with *ret_reason saying why.  The caller frees both. */
int nccltopo_guest(const struct plan *p, const struct domain *d, const struct hostmap *h,
                   const struct nccltopo_cpu *cpu, char **ret_xml, char **ret_reason);

/* The host's own file (what NCCL would find on the host), for comparing
 * host and guest with NCCL's tools.  Returns as nccltopo_guest(). */
int nccltopo_host(const struct hostmap *h, const struct nccltopo_cpu *cpu, char **ret_xml, char **ret_reason);

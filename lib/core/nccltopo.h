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
 *     max_link_speed and max_link_width, as NCCL reads them on a host; not
 *     current_link_speed, which drops while a GPU idles): in a guest, QEMU's ports
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

/* The identity of h's CPU (hostmap_read_cpu_id()) as *ret; false when
 * the arch is unknown. */
bool nccltopo_cpu_from_host(const struct hostmap_cpu_id *id, struct nccltopo_cpu *ret);

/* The CPU identity a guest's file carries: the host's (h->cpu_id) when
 * the guest sees the host's CPU (<cpu mode='host-passthrough'> or
 * 'host-model') and h knows it; else NULL, and NCCL in the guest reads the
 * CPU it runs on.  buf holds the result. */
const struct nccltopo_cpu *nccltopo_guest_cpu(const struct domain *d, const struct hostmap *h, struct nccltopo_cpu *buf);

/* The guest reads the file from fw_cfg under this name:
 * /sys/firmware/qemu_fw_cfg/by_name/opt/org.pcinuma/nccl-topo.xml/raw. */
#define NCCLTOPO_FWCFG_NAME "opt/org.pcinuma/nccl-topo.xml"
#define NCCLTOPO_FWCFG_PREFIX "name=" NCCLTOPO_FWCFG_NAME ",string="
/* The longest argument Linux passes to a program (MAX_ARG_STRLEN, 32
 * pages, with its NUL): QEMU cannot be given a longer -fw_cfg. */
#define NCCLTOPO_FWCFG_ARG_MAX 131071

/* QEMU's -fw_cfg argument carrying the file xml: NCCLTOPO_FWCFG_PREFIX and
 * the text with each ',' doubled (QEMU's option syntax) and each newline
 * made a space (a newline in an attribute does not survive libvirt's XML
 * round trip; NCCL's reader takes any white space).  NULL, with
 * *ret_reason, when it would be longer than NCCLTOPO_FWCFG_ARG_MAX. */
char *nccltopo_fwcfg_arg(const char *xml, char **ret_reason);

/* What NCCL uses: an NVIDIA GPU (vendor 0x10de, a display controller:
 * PCI class 0x03xxxx) or an RDMA NIC: an InfiniBand controller (0x0207),
 * or an Ethernet controller (0x0200) from NVIDIA/Mellanox (0x15b3,
 * ConnectX: RoCE) or Amazon (0x1d0f, EFA).  Other vendors' GPUs (a BMC's
 * VGA, AMD's, which RCCL would want) are not NCCL's.  The host driver
 * cannot tell (a passthrough device is bound to vfio-pci), so the class
 * and vendor do. */
#define NCCLTOPO_VENDOR_NVIDIA 0x10de
bool nccltopo_wanted(uint32_t class, uint16_t vendor);

/* The guest's file for plan p of domain d (its cells) on host h.
 * Returns 0 with *ret_xml (newline-terminated); NCCLTOPO_NONE when the
 * domain has no GPU or RDMA NIC, NCCLTOPO_NOT_PLACED when it has but the
 * plan places none or NCCL could not load the file, each with *ret_reason
 * saying why.  The caller frees both. */
enum { NCCLTOPO_NONE = 1, NCCLTOPO_NOT_PLACED = 2 };
int nccltopo_guest(const struct plan *p, const struct domain *d, const struct hostmap *h,
                   const struct nccltopo_cpu *cpu, char **ret_xml, char **ret_reason);

/* The host's own file (what NCCL would find on the host), for comparing
 * host and guest with NCCL's tools.  Returns as nccltopo_guest(). */
int nccltopo_host(const struct hostmap *h, const struct nccltopo_cpu *cpu, char **ret_xml, char **ret_reason);

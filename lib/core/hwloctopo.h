/* A planned guest, or the host, as hwloc's XML (the format lstopo reads
 * with `-i FILE --if xml` and hwloc itself writes with `--of xml`; hwloc's
 * topology-xml.c and hwloc2.dtd), so that lstopo draws it
 * (docs/guest.md, "Pictures").
 *
 * The shape, hwloc 2's:
 *   - one Machine holding every CPU and node;
 *   - guest: one Package per guest cell, holding the cell's NUMANode (its
 *     os_index is the cell's id) and one Core and PU per vCPU (a domain
 *     without cells: one NUMANode 0 and every vCPU, as its guest sees
 *     it; hwloc refuses a topology without a node); host: one
 *     Package per socket, and inside it one Group per NUMA node when the
 *     socket has several, each holding its NUMANode and its CPUs as PUs;
 *   - I/O below the object of its locality: a host bridge (Bridge 0-1:
 *     a guest's pcie-expander-bus, a host's pciDDDD:BB), the PCI bridges
 *     below it (Bridge 1-1: root ports, switch upstream and downstream
 *     ports), and each passthrough device as a PCIDev at its guest BDF (the
 *     host BDF for the host), with its host's vendor, device and class, and
 *     for a guest device an OS device whose name lstopo draws inside the
 *     device's box, its host BDF ("host 0000:13:00.0"; also the info
 *     attribute PCINUMAHostBusID), its type (GPU, OpenFabrics, Net, Block,
 *     CoProc) from the device's class; a host device's driver is an info
 *     attribute (PCINUMADriver);
 *   - what has no NUMA locality (the guest's pcie.0 side, a host device
 *     without a node) below the Machine; a guest device whose address
 *     libvirt chooses is a Misc object naming it.
 * Nothing else of the machine (caches, memory sizes) is there: the
 * picture is about where the devices sit.  The root's lstopoLegend info
 * says what the picture shows (lstopo adds it to its legend).
 *
 * Pure: no I/O, no globals. */
#pragma once

#include "domain.h"
#include "hostmap.h"
#include "planner.h"

/* The guest that plan p (made for domain d on host h) lays out.  A plan
 * that does not apply (unchanged, skipped) shows the domain as it is: its
 * cells, and its devices on pcie.0.  Returns the XML text; the caller
 * owns it. */
char *hwloctopo_guest(const struct plan *p, const struct domain *d, const struct hostmap *h);

/* The host h: its nodes, sockets and CPUs, and every PCI device that is
 * not a bridge below its host bridge and bridges.  The caller owns it. */
char *hwloctopo_host(const struct hostmap *h);

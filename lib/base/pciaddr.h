/* PCI addresses: the host's "dddd:bb:ss.f" names (with domains wider than
 * 16 bits, as on some VMD and Hyper-V hosts) and libvirt's guest addresses. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct pci_addr {
        uint32_t domain;
        uint8_t bus;
        uint8_t slot;     /* 0..31 */
        uint8_t func;     /* 0..7 */
};

/* "ffffffff:ff:1f.7" plus NUL */
#define PCI_ADDR_STRLEN 17

/* Parse "dddd:bb:ss.f" (domain of 1..8 hex digits) or "bb:ss.f" (domain 0).
 * Returns 0 or -EINVAL. */
int pci_addr_parse(const char *s, struct pci_addr *ret);

/* Format as "%04x:%02x:%02x.%x" into buf (PCI_ADDR_STRLEN bytes); returns buf. */
char *pci_addr_format(const struct pci_addr *a, char buf[PCI_ADDR_STRLEN]);

int pci_addr_cmp(const struct pci_addr *a, const struct pci_addr *b);

static inline bool pci_addr_eq(const struct pci_addr *a, const struct pci_addr *b) {
        return pci_addr_cmp(a, b) == 0;
}

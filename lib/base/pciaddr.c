/* Parsing and formatting of PCI addresses. */
#include "pciaddr.h"
#include "util.h"

#include <ctype.h>

static int parse_hex(const char **p, unsigned max_digits, uint64_t max, uint64_t *ret) {
        const char *s = *p;
        uint64_t v = 0;
        unsigned n = 0;
        while (isxdigit((unsigned char) *s)) {
                if (++n > max_digits)
                        return -EINVAL;
                int d = isdigit((unsigned char) *s) ? *s - '0' : (tolower((unsigned char) *s) - 'a' + 10);
                v = v * 16 + (uint64_t) d;
                s++;
        }
        if (n == 0 || v > max)
                return -EINVAL;
        *p = s;
        *ret = v;
        return 0;
}

int pci_addr_parse(const char *s, struct pci_addr *ret) {
        uint64_t a, b, c, d;
        const char *p = s;

        if (!s)
                return -EINVAL;
        if (parse_hex(&p, 8, UINT32_MAX, &a) < 0)
                return -EINVAL;
        if (*p != ':')
                return -EINVAL;
        p++;
        if (parse_hex(&p, 2, 0xff, &b) < 0)
                return -EINVAL;
        if (*p == ':') {
                /* dddd:bb:ss.f */
                p++;
                if (parse_hex(&p, 2, 0x1f, &c) < 0 || *p != '.')
                        return -EINVAL;
                p++;
                if (parse_hex(&p, 1, 7, &d) < 0 || *p)
                        return -EINVAL;
                if (a > UINT32_MAX)
                        return -EINVAL;
                *ret = (struct pci_addr) { .domain = (uint32_t) a, .bus = (uint8_t) b, .slot = (uint8_t) c, .func = (uint8_t) d };
                return 0;
        }
        /* bb:ss.f */
        if (*p != '.' || a > 0xff || b > 0x1f)
                return -EINVAL;
        p++;
        if (parse_hex(&p, 1, 7, &d) < 0 || *p)
                return -EINVAL;
        *ret = (struct pci_addr) { .domain = 0, .bus = (uint8_t) a, .slot = (uint8_t) b, .func = (uint8_t) d };
        return 0;
}

char *pci_addr_format(const struct pci_addr *a, char buf[PCI_ADDR_STRLEN]) {
        snprintf(buf, PCI_ADDR_STRLEN, "%04x:%02x:%02x.%x", a->domain, a->bus, a->slot, a->func);
        return buf;
}

int pci_addr_cmp(const struct pci_addr *a, const struct pci_addr *b) {
        if (a->domain != b->domain)
                return a->domain < b->domain ? -1 : 1;
        if (a->bus != b->bus)
                return a->bus < b->bus ? -1 : 1;
        if (a->slot != b->slot)
                return a->slot < b->slot ? -1 : 1;
        if (a->func != b->func)
                return a->func < b->func ? -1 : 1;
        return 0;
}

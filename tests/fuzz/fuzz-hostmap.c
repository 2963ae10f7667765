/* The in-memory host map the fuzz targets plan against (fuzz.h). */
#include "fuzz.h"

#include <stdarg.h>

struct sample_device {
        const char *bdf;
        uint32_t class;
        int sysfs_node;
        const char *physfn;
};

/* pcinumactl host --json on mkfakesysfs.py sample-4n.json, plus a root
 * port (bridges cannot be passed through). */
static const struct sample_device sample_devices[] = {
        { "0000:00:1c.0", 0x060400, -1, NULL },
        { "0000:01:00.0", 0x010802, -1, NULL },
        { "0000:13:00.0", 0x030200, 0, NULL },
        { "0000:14:00.0", 0x020700, 0, NULL },
        { "0000:14:00.1", 0x020700, -1, "0000:14:00.0" },
        { "0000:14:00.2", 0x020700, -1, "0000:14:00.0" },
        { "0000:14:00.3", 0x020700, -1, "0000:14:00.0" },
        { "0000:14:00.4", 0x020700, -1, "0000:14:00.0" },
        { "0000:17:00.0", 0x030200, 0, NULL },
        { "0000:18:00.0", 0x020700, 0, NULL },
        { "0000:33:00.0", 0x030200, 1, NULL },
        { "0000:34:00.0", 0x020700, 1, NULL },
        { "0000:37:00.0", 0x030200, 1, NULL },
        { "0000:38:00.0", 0x020700, 1, NULL },
        { "0000:53:00.0", 0x030200, 2, NULL },
        { "0000:54:00.0", 0x020700, 2, NULL },
        { "0000:57:00.0", 0x030200, 2, NULL },
        { "0000:58:00.0", 0x020700, 2, NULL },
        { "0000:73:00.0", 0x030200, 3, NULL },
        { "0000:74:00.0", 0x020700, 3, NULL },
        { "0000:74:00.1", 0x020700, 3, "0000:74:00.0" },
        { "0000:74:00.2", 0x020700, 3, "0000:74:00.0" },
        { "0000:74:00.3", 0x020700, 3, "0000:74:00.0" },
        { "0000:74:00.4", 0x020700, 3, "0000:74:00.0" },
        { "0000:77:00.0", 0x030200, 3, NULL },
        { "0000:78:00.0", 0x020700, 3, NULL },
        { "0000:91:00.0", 0x030200, 3, NULL },
};

static const int sample_distances[4][4] = {
        { 10, 12, 32, 32 },
        { 12, 10, 32, 32 },
        { 32, 32, 10, 12 },
        { 32, 32, 12, 10 },
};

static struct pci_addr addr_or_die(const char *s) {
        struct pci_addr a;
        if (pci_addr_parse(s, &a) < 0)
                fuzz_fail("bad address in the sample host: %s", s);
        return a;
}

static struct hostmap *sample(uint32_t domain, const char *mdev_prefix) {
        struct hostmap *h = hostmap_new();

        for (int i = 0; i < 4; i++) {
                struct hostmap_node *n = hostmap_add_node(h, i);
                n->socket = i / 2;
                for (unsigned c = 0; c < 16; c++)
                        bitmap_set(&n->cpus, (unsigned) i * 16 + c);
        }
        for (int i = 0; i < 4; i++)
                hostmap_set_distances(h, i, sample_distances[i], 4);

        for (size_t i = 0; i < ELEMENTSOF(sample_devices); i++) {
                const struct sample_device *s = &sample_devices[i];
                struct pci_addr a = addr_or_die(s->bdf);
                a.domain = domain;
                struct hostmap_device *d = hostmap_add_device(h, &a);
                d->class = s->class;
                d->sysfs_node = s->sysfs_node;
                if (s->physfn) {
                        d->has_physfn = true;
                        d->physfn = addr_or_die(s->physfn);
                        d->physfn.domain = domain;
                }
        }

        struct pci_addr parent = addr_or_die("0000:91:00.0");
        parent.domain = domain;
        _cleanup_free_ char *m1 = xasprintf("%s-1b54-4048-85b3-a6a62d165c01", mdev_prefix);
        _cleanup_free_ char *m2 = xasprintf("%s-1b54-4048-85b3-a6a62d165c02", mdev_prefix);
        hostmap_add_mdev(h, m1, &parent)->type = xstrdup("nvidia-63");
        hostmap_add_mdev(h, m2, &parent)->type = xstrdup("nvidia-63");

        hostmap_finish(h);
        return h;
}

struct hostmap *fuzz_sample_hostmap(void) {
        return sample(0, "4b20d080");
}

struct hostmap *fuzz_sample_hostmap_twin(void) {
        return sample(1, "7c31e191");
}

void fuzz_fail(const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        fputs("fuzz: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
        abort();
}

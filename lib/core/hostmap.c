/* The host map's data structure: the build helpers used by the sysfs reader
 * (and by tests that build a map in memory), the node inheritance of
 * docs/design.md §4, and the lookups.  Everything here is pure: no I/O.  Lookups are
 * binary searches over arrays sorted once by hostmap_finish(). */
#include "hostmap.h"

#include <pthread.h>
#include <stdarg.h>
#include <strings.h>

/* Distance rows arrive before the node set is known to be complete (the
 * reader and tests may add nodes in any order), so they are kept aside and
 * turned into the matrix by hostmap_finish().  The public struct is the
 * first member, so a struct hostmap * converts back to this. */
struct distance_row {
        int node;
        int *values;
        size_t n;
};

struct hostmap_private {
        struct hostmap pub;
        struct distance_row *rows;
        size_t n_rows;
        /* hostmap_derived(): filled once, under the lock, by whichever
         * thread asks first (pcinumad's workers share a map). */
        pthread_mutex_t derived_lock;
        void *derived;
        void (*derived_free)(void *);
};

static struct hostmap_private *private_of(struct hostmap *h) {
        return (struct hostmap_private *) h;
}

struct hostmap *hostmap_new(void) {
        struct hostmap_private *p = xcalloc(1, sizeof(*p));
        pthread_mutex_init(&p->derived_lock, NULL);
        p->pub.cpu_id.family = p->pub.cpu_id.model = -1;
        return &p->pub;
}

static void device_done(struct hostmap_device *d) {
        free(d->driver);
        free(d->host_bridge);
        free(d->upstream);
        d->driver = d->host_bridge = NULL;
        d->upstream = NULL;
        d->n_upstream = 0;
}

void hostmap_warn(struct hostmap *h, const char *fmt, ...) {
        if (h->n_warnings >= HOSTMAP_WARNINGS_MAX) {
                h->n_warnings_dropped++;
                return;
        }
        va_list ap;
        va_start(ap, fmt);
        char *s = xvasprintf(fmt, ap);
        va_end(ap);
        *GROW(h->warnings, h->n_warnings) = s;
}

void hostmap_take_warnings(struct hostmap *h, struct hostmap *o) {
        for (size_t i = 0; i < o->n_warnings; i++) {
                if (h->n_warnings >= HOSTMAP_WARNINGS_MAX) {
                        h->n_warnings_dropped++;
                        free(o->warnings[i]);
                } else
                        *GROW(h->warnings, h->n_warnings) = o->warnings[i];
        }
        h->n_warnings_dropped += o->n_warnings_dropped;
        free(o->warnings);
        o->warnings = NULL;
        o->n_warnings = o->n_warnings_dropped = 0;
}

struct hostmap *hostmap_free(struct hostmap *h) {
        if (!h)
                return NULL;

        struct hostmap_private *p = private_of(h);

        for (size_t i = 0; i < h->n_nodes; i++)
                bitmap_done(&h->nodes[i].cpus);
        free(h->nodes);
        free(h->distance);
        for (size_t i = 0; i < h->n_devices; i++)
                device_done(&h->devices[i]);
        free(h->devices);
        for (size_t i = 0; i < h->n_mdevs; i++)
                free(h->mdevs[i].type);
        free(h->mdevs);
        for (size_t i = 0; i < h->n_warnings; i++)
                free(h->warnings[i]);
        free(h->warnings);
        for (size_t i = 0; i < p->n_rows; i++)
                free(p->rows[i].values);
        free(p->rows);
        if (p->derived && p->derived_free)
                p->derived_free(p->derived);
        pthread_mutex_destroy(&p->derived_lock);
        free(p);
        return NULL;
}

void *hostmap_derived(const struct hostmap *h, void *(*compute)(const struct hostmap *), void (*free_fn)(void *)) {
        /* The map is finished and read-only; the slot is the one thing
         * filled later, once.  Several threads may read one map (pcinumad's
         * workers), so the first to ask computes under the lock, and the
         * others wait for it: a lock and an unlock per call, uncontended
         * but for that once. */
        struct hostmap_private *p = (struct hostmap_private *) (uintptr_t) h;
        pthread_mutex_lock(&p->derived_lock);
        if (!p->derived) {
                p->derived = compute(h);
                p->derived_free = free_fn;
        }
        void *v = p->derived;
        pthread_mutex_unlock(&p->derived_lock);
        return v;
}

struct hostmap_node *hostmap_add_node(struct hostmap *h, int id) {
        struct hostmap_node *n = GROW(h->nodes, h->n_nodes);
        n->id = id;
        n->socket = HOSTMAP_NO_SOCKET;
        return n;
}

struct hostmap_device *hostmap_add_device(struct hostmap *h, const struct pci_addr *a) {
        struct hostmap_device *d = GROW(h->devices, h->n_devices);
        d->addr = *a;
        pci_addr_format(a, d->name);
        d->sysfs_node = HOSTMAP_NO_NODE;
        d->node = HOSTMAP_NO_NODE;
        d->iommu_group = -1;
        return d;
}

struct hostmap_mdev *hostmap_add_mdev(struct hostmap *h, const char *uuid, const struct pci_addr *parent) {
        struct hostmap_mdev *m = GROW(h->mdevs, h->n_mdevs);
        snprintf(m->uuid, sizeof(m->uuid), "%s", uuid);
        m->parent = *parent;
        m->node = HOSTMAP_NO_NODE;
        return m;
}

void hostmap_set_distances(struct hostmap *h, int node, const int *values, size_t n) {
        struct hostmap_private *p = private_of(h);
        struct distance_row *r = NULL;

        /* One entry per possible node at most (see HOSTMAP_NODE_MAX). */
        if (n > HOSTMAP_NODE_MAX + 1)
                n = HOSTMAP_NODE_MAX + 1;

        /* A second call for the same node replaces the first. */
        for (size_t i = 0; i < p->n_rows; i++)
                if (p->rows[i].node == node) {
                        r = &p->rows[i];
                        free(r->values);
                        break;
                }
        if (!r)
                r = GROW(p->rows, p->n_rows);
        r->node = node;
        r->n = n;
        r->values = xreallocarray(NULL, n, sizeof(int));
        if (n > 0)
                memcpy(r->values, values, n * sizeof(int));
}

static int node_cmp(const void *a, const void *b) {
        const struct hostmap_node *x = a, *y = b;
        return (x->id > y->id) - (x->id < y->id);
}

static int device_cmp(const void *a, const void *b) {
        const struct hostmap_device *x = a, *y = b;
        return pci_addr_cmp(&x->addr, &y->addr);
}

static int mdev_cmp(const void *a, const void *b) {
        const struct hostmap_mdev *x = a, *y = b;
        return strcasecmp(x->uuid, y->uuid);
}

static ssize_t node_index(const struct hostmap *h, int id) {
        const struct hostmap_node key = { .id = id };
        const struct hostmap_node *n;

        if (h->n_nodes == 0)
                return -1;
        n = bsearch(&key, h->nodes, h->n_nodes, sizeof(*h->nodes), node_cmp);
        return n ? n - h->nodes : -1;
}

static void build_distance_matrix(struct hostmap *h) {
        struct hostmap_private *p = private_of(h);
        size_t n = h->n_nodes;

        free(h->distance);
        h->distance = NULL;
        if (n == 0)
                return;

        h->distance = xreallocarray(NULL, n * n, sizeof(int));
        for (size_t i = 0; i < n * n; i++)
                h->distance[i] = -1;

        for (size_t r = 0; r < p->n_rows; r++) {
                ssize_t i = node_index(h, p->rows[r].node);
                if (i < 0)
                        continue;
                /* Entries past the node count are ignored: the row may come
                 * from a node that is not online in this snapshot. */
                for (size_t k = 0; k < p->rows[r].n && k < n; k++)
                        h->distance[(size_t) i * n + k] = p->rows[r].values[k] >= 0 ? p->rows[r].values[k] : -1;
        }
}

/* Keep the first of several entries with the same key, so that lookups
 * are well defined even on a tree that lists a device twice. */
static void dedup_devices(struct hostmap *h) {
        size_t w = 0;
        for (size_t i = 0; i < h->n_devices; i++) {
                if (w > 0 && pci_addr_eq(&h->devices[w - 1].addr, &h->devices[i].addr)) {
                        device_done(&h->devices[i]);
                        continue;
                }
                if (w != i)
                        h->devices[w] = h->devices[i];
                w++;
        }
        h->n_devices = w;
}

static void dedup_mdevs(struct hostmap *h) {
        size_t w = 0;
        for (size_t i = 0; i < h->n_mdevs; i++) {
                if (w > 0 && strcasecmp(h->mdevs[w - 1].uuid, h->mdevs[i].uuid) == 0) {
                        free(h->mdevs[i].type);
                        continue;
                }
                if (w != i)
                        h->mdevs[w] = h->mdevs[i];
                w++;
        }
        h->n_mdevs = w;
}

static void dedup_nodes(struct hostmap *h) {
        size_t w = 0;
        for (size_t i = 0; i < h->n_nodes; i++) {
                if (w > 0 && h->nodes[w - 1].id == h->nodes[i].id) {
                        bitmap_done(&h->nodes[i].cpus);
                        continue;
                }
                if (w != i)
                        h->nodes[w] = h->nodes[i];
                w++;
        }
        h->n_nodes = w;
}

/* Node ids outside 0..HOSTMAP_NODE_MAX are dropped here too, whoever
 * built the map: the reader refuses them with a warning first, and every
 * consumer may then size things by node id without a second check. */
static void drop_bad_nodes(struct hostmap *h) {
        size_t w = 0;
        for (size_t i = 0; i < h->n_nodes; i++) {
                if (h->nodes[i].id < 0 || h->nodes[i].id > HOSTMAP_NODE_MAX) {
                        bitmap_done(&h->nodes[i].cpus);
                        continue;
                }
                h->nodes[w++] = h->nodes[i];
        }
        h->n_nodes = w;
        for (size_t i = 0; i < h->n_devices; i++)
                if (h->devices[i].sysfs_node > HOSTMAP_NODE_MAX || h->devices[i].sysfs_node < HOSTMAP_NO_NODE)
                        h->devices[i].sysfs_node = HOSTMAP_NO_NODE;
}

void hostmap_finish(struct hostmap *h) {
        drop_bad_nodes(h);
        /* qsort is not stable; the dedup keeps whichever copy sorts first,
         * which only matters for trees that are broken anyway. */
        if (h->n_nodes > 1)
                qsort(h->nodes, h->n_nodes, sizeof(*h->nodes), node_cmp);
        dedup_nodes(h);
        if (h->n_devices > 1)
                qsort(h->devices, h->n_devices, sizeof(*h->devices), device_cmp);
        dedup_devices(h);
        if (h->n_mdevs > 1)
                qsort(h->mdevs, h->n_mdevs, sizeof(*h->mdevs), mdev_cmp);
        dedup_mdevs(h);

        build_distance_matrix(h);

        /* Design §4, in three passes so the order of the array does not
         * matter: a device's own numa_node; then a VF without one takes its
         * PF's (a PF is never a VF, so its value is final after pass one);
         * then on a host with exactly one node, "none" means that node. */
        for (size_t i = 0; i < h->n_devices; i++) {
                struct hostmap_device *d = &h->devices[i];
                d->node = d->sysfs_node >= 0 ? d->sysfs_node : HOSTMAP_NO_NODE;
        }
        for (size_t i = 0; i < h->n_devices; i++) {
                struct hostmap_device *d = &h->devices[i];
                if (d->node >= 0 || !d->has_physfn)
                        continue;
                const struct hostmap_device *pf = hostmap_find_device(h, &d->physfn);
                if (pf && !pf->has_physfn)
                        d->node = pf->node;
        }
        int only_node = h->n_nodes == 1 ? h->nodes[0].id : HOSTMAP_NO_NODE;
        for (size_t i = 0; i < h->n_devices; i++)
                if (h->devices[i].node < 0)
                        h->devices[i].node = only_node;

        for (size_t i = 0; i < h->n_mdevs; i++) {
                struct hostmap_mdev *m = &h->mdevs[i];
                const struct hostmap_device *parent = hostmap_find_device(h, &m->parent);
                m->node = parent ? parent->node : only_node;
        }
}

const struct hostmap_device *hostmap_find_device(const struct hostmap *h, const struct pci_addr *a) {
        if (!h || !a || h->n_devices == 0)
                return NULL;
        const struct hostmap_device key = { .addr = *a };
        return bsearch(&key, h->devices, h->n_devices, sizeof(*h->devices), device_cmp);
}

const struct hostmap_mdev *hostmap_find_mdev(const struct hostmap *h, const char *uuid) {
        struct hostmap_mdev key = {0};

        if (!h || !uuid || h->n_mdevs == 0 || strlen(uuid) >= sizeof(key.uuid))
                return NULL;
        snprintf(key.uuid, sizeof(key.uuid), "%s", uuid);
        return bsearch(&key, h->mdevs, h->n_mdevs, sizeof(*h->mdevs), mdev_cmp);
}

const struct hostmap_node *hostmap_find_node(const struct hostmap *h, int id) {
        if (!h)
                return NULL;
        ssize_t i = node_index(h, id);
        return i < 0 ? NULL : &h->nodes[i];
}

int hostmap_node_socket(const struct hostmap *h, int node) {
        const struct hostmap_node *n = hostmap_find_node(h, node);
        return n ? n->socket : HOSTMAP_NO_SOCKET;
}

int hostmap_distance(const struct hostmap *h, int a, int b) {
        if (!h)
                return -1;
        ssize_t i = node_index(h, a), j = node_index(h, b);
        if (i < 0 || j < 0)
                return -1;
        int d = h->distance ? h->distance[(size_t) i * h->n_nodes + (size_t) j] : -1;
        /* A node is at the local distance from itself even when the
         * firmware gave no SLIT (the synthesised single node has none). */
        if (d < 0 && a == b)
                return 10;
        return d;
}

int hostmap_cpu_node(const struct hostmap *h, unsigned cpu) {
        if (!h)
                return HOSTMAP_NO_NODE;
        for (size_t i = 0; i < h->n_nodes; i++)
                if (bitmap_test(&h->nodes[i].cpus, cpu))
                        return h->nodes[i].id;
        return HOSTMAP_NO_NODE;
}

struct class_name {
        uint32_t class;   /* base class << 8 | subclass */
        const char *name;
};

/* The names lspci prints (pci.ids), for the classes an administrator of a
 * passthrough host meets; anything else falls back to its base class. */
static const struct class_name subclass_names[] = {
        { 0x0000, "Non-VGA unclassified device" },
        { 0x0001, "VGA compatible unclassified device" },
        { 0x0100, "SCSI storage controller" },
        { 0x0101, "IDE interface" },
        { 0x0104, "RAID bus controller" },
        { 0x0105, "ATA controller" },
        { 0x0106, "SATA controller" },
        { 0x0107, "Serial Attached SCSI controller" },
        { 0x0108, "Non-Volatile memory controller" },
        { 0x0200, "Ethernet controller" },
        { 0x0207, "Infiniband controller" },
        { 0x0208, "Fabric controller" },
        { 0x0280, "Network controller" },
        { 0x0300, "VGA compatible controller" },
        { 0x0301, "XGA compatible controller" },
        { 0x0302, "3D controller" },
        { 0x0380, "Display controller" },
        { 0x0401, "Multimedia audio controller" },
        { 0x0403, "Audio device" },
        { 0x0500, "RAM memory" },
        { 0x0600, "Host bridge" },
        { 0x0601, "ISA bridge" },
        { 0x0604, "PCI bridge" },
        { 0x0607, "CardBus bridge" },
        { 0x0609, "Semi-transparent PCI-to-PCI bridge" },
        { 0x0700, "Serial controller" },
        { 0x0806, "IOMMU" },
        { 0x0880, "System peripheral" },
        { 0x0b40, "Co-processor" },
        { 0x0c03, "USB controller" },
        { 0x0c04, "Fibre Channel" },
        { 0x0c05, "SMBus" },
        { 0x0c06, "InfiniBand" },
        { 0x1080, "Encryption controller" },
        { 0x1180, "Signal processing controller" },
        { 0x1200, "Processing accelerators" },
};

static const char *const base_class_names[] = {
        [0x00] = "Unclassified device",
        [0x01] = "Mass storage controller",
        [0x02] = "Network controller",
        [0x03] = "Display controller",
        [0x04] = "Multimedia controller",
        [0x05] = "Memory controller",
        [0x06] = "Bridge",
        [0x07] = "Communication controller",
        [0x08] = "Generic system peripheral",
        [0x09] = "Input device controller",
        [0x0a] = "Docking station",
        [0x0b] = "Processor",
        [0x0c] = "Serial bus controller",
        [0x0d] = "Wireless controller",
        [0x0e] = "Intelligent controller",
        [0x0f] = "Satellite communications controller",
        [0x10] = "Encryption controller",
        [0x11] = "Signal processing controller",
        [0x12] = "Processing accelerators",
        [0x13] = "Non-Essential Instrumentation",
};

const char *hostmap_class_name(uint32_t class) {
        uint32_t sub = (class >> 8) & 0xffff;
        uint32_t base = (class >> 16) & 0xff;

        for (size_t i = 0; i < ELEMENTSOF(subclass_names); i++)
                if (subclass_names[i].class == sub)
                        return subclass_names[i].name;
        if (base < ELEMENTSOF(base_class_names) && base_class_names[base])
                return base_class_names[base];
        if (base == 0x40)
                return "Coprocessor";
        if (base == 0xff)
                return "Unassigned class";
        return "Unknown class";
}

bool hostmap_driver_name_ok(const char *s) {
        if (!s || !*s || strlen(s) > 255)
                return false;
        for (; *s; s++)
                if ((unsigned char) *s <= ' ' || (unsigned char) *s >= 0x7f || *s == '/')
                        return false;
        return true;
}

bool hostmap_device_is_bridge(const struct hostmap_device *d) {
        if (!d || (d->class >> 16) != 0x06)
                return false;
        /* Host, ISA/EISA/MCA, PCI-to-PCI, PCMCIA, CardBus and
         * semi-transparent bridges are chipset plumbing.  "Other bridge"
         * (0x0680) is not listed: NVSwitches use it and are passed
         * through. */
        switch ((d->class >> 8) & 0xff) {
        case 0x00: case 0x01: case 0x02: case 0x03:
        case 0x04: case 0x05: case 0x07: case 0x09:
                return true;
        default:
                return false;
        }
}

size_t hostmap_n_assignable(const struct hostmap *h) {
        size_t n = h ? h->n_mdevs : 0;
        for (size_t i = 0; h && i < h->n_devices; i++)
                n += !hostmap_device_is_bridge(&h->devices[i]);
        return n;
}

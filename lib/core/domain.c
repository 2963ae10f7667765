/* Parsing of a libvirt domain XML into the model the planner reads
 * (docs/design.md §5).  The libxml2 document is kept so the rewriter can edit it;
 * nothing here does I/O. */
#include "domain.h"

#include <libxml/parser.h>
#include <libxml/xmlsave.h>
#include <inttypes.h>
#include <strings.h>

#if PCINUMA_STAND_INS
#include "standins.h"
#endif

/* An attribute's value without copying it: parsing a domain reads a few
 * thousand attributes, and a malloc'ed copy of each showed in profiles.
 * NULL when absent. */
static const char *attr_ref(xmlNodePtr n, const char *name) {
        char *buf = NULL;
        const char *v = xml_prop_ref(n, name, &buf);
        /* (a copy only with a DTD, which domain_parse() refuses) */
        if (buf) {
                free(buf);
                return "";
        }
        return v;
}

static bool is_pci_address(xmlNodePtr n) {
        if (!xml_is(n, "address"))
                return false;
        const char *type = attr_ref(n, "type");
        return type && streq(type, "pci");
}

/* The guest <address type='pci'> child of a device element. */
static xmlNodePtr guest_pci_address(xmlNodePtr dev) {
        for (xmlNodePtr c = dev->children; c; c = c->next)
                if (is_pci_address(c))
                        return c;
        return NULL;
}

const char *domain_backing_to_string(enum domain_backing b) {
        switch (b) {
        case DOMAIN_BACKING_MEMNODE:
                return "numatune memnode";
        case DOMAIN_BACKING_VCPUPIN:
                return "vcpupin";
        case DOMAIN_BACKING_VCPU_CPUSET:
                return "vcpu cpuset";
        case DOMAIN_BACKING_MEMORY:
                return "numatune memory";
        case DOMAIN_BACKING_NONE:
        default:
                return "nothing";
        }
}

const char *domain_hostdev_name(const struct domain_hostdev *hd, char buf[64]) {
        if (hd->kind == DOMAIN_HOSTDEV_MDEV)
                snprintf(buf, 64, "mdev %s", hd->mdev_uuid);
        else {
                char b[PCI_ADDR_STRLEN];
                snprintf(buf, 64, "%s", pci_addr_format(&hd->host, b));
        }
        return buf;
}

/* --- the hostdev index ------------------------------------------------------ */

static uint64_t mix64(uint64_t x) {
        x ^= x >> 33;
        x *= UINT64_C(0xff51afd7ed558ccd);
        x ^= x >> 33;
        x *= UINT64_C(0xc4ceb9fe1a85ec53);
        return x ^ (x >> 33);
}

static uint64_t pci_key_hash(const struct pci_addr *a) {
        return mix64(((uint64_t) a->domain << 16 | (uint64_t) a->bus << 8 | (uint64_t) a->slot << 3 | a->func) << 1);
}

/* FNV-1a over the UUID in lower case (hostdevs keep it so). */
static uint64_t mdev_key_hash(const char *uuid) {
        uint64_t h = UINT64_C(0xcbf29ce484222325);
        for (const char *c = uuid; *c; c++) {
                char l = *c >= 'A' && *c <= 'F' ? (char) (*c - 'A' + 'a') : *c;
                h = (h ^ (unsigned char) l) * UINT64_C(0x100000001b3);
        }
        return mix64(h | 1);
}

static uint64_t hostdev_hash(const struct domain_hostdev *hd) {
        return hd->kind == DOMAIN_HOSTDEV_MDEV ? mdev_key_hash(hd->mdev_uuid) : pci_key_hash(&hd->host);
}

/* The slot of the hostdev for (kind, a or uuid): its index + 1, or 0. */
static size_t hostdev_lookup(const struct domain *d, enum domain_hostdev_kind kind, const struct pci_addr *a,
                             const char *uuid) {
        if (!d->n_hostdev_slots)
                return 0;
        size_t mask = d->n_hostdev_slots - 1;
        size_t i = (size_t) (kind == DOMAIN_HOSTDEV_MDEV ? mdev_key_hash(uuid) : pci_key_hash(a)) & mask;
        for (;; i = (i + 1) & mask) {
                size_t k = d->hostdev_slots[i];
                if (!k)
                        return 0;
                const struct domain_hostdev *o = &d->hostdevs[k - 1];
                if (o->kind == kind && (kind == DOMAIN_HOSTDEV_MDEV ? strcasecmp(o->mdev_uuid, uuid) == 0 : pci_addr_eq(&o->host, a)))
                        return k;
        }
}

static void hostdev_slot_put(size_t *slots, size_t n_slots, const struct domain_hostdev *hd, size_t k) {
        size_t mask = n_slots - 1;
        size_t i = (size_t) hostdev_hash(hd) & mask;
        while (slots[i])
                i = (i + 1) & mask;
        slots[i] = k;
}

/* Index d->hostdevs[n_hostdevs - 1], which is not there yet. */
static void hostdev_index_add(struct domain *d) {
        if (d->n_hostdev_slots < 2 * d->n_hostdevs) {
                size_t n = d->n_hostdev_slots ? 2 * d->n_hostdev_slots : 16;
                free(d->hostdev_slots);
                d->hostdev_slots = xcalloc(n, sizeof(size_t));
                d->n_hostdev_slots = n;
                for (size_t k = 1; k < d->n_hostdevs; k++)
                        hostdev_slot_put(d->hostdev_slots, n, &d->hostdevs[k - 1], k);
        }
        hostdev_slot_put(d->hostdev_slots, d->n_hostdev_slots, &d->hostdevs[d->n_hostdevs - 1], d->n_hostdevs);
}

const struct domain_hostdev *domain_find_pci_hostdev(const struct domain *d, const struct pci_addr *a) {
        size_t k = hostdev_lookup(d, DOMAIN_HOSTDEV_PCI, a, NULL);
        return k ? &d->hostdevs[k - 1] : NULL;
}

const struct domain_hostdev *domain_find_mdev_hostdev(const struct domain *d, const char *uuid) {
        size_t k = uuid ? hostdev_lookup(d, DOMAIN_HOSTDEV_MDEV, NULL, uuid) : 0;
        return k ? &d->hostdevs[k - 1] : NULL;
}

static void model_clear(struct domain *d) {
        for (size_t i = 0; i < d->n_cells; i++) {
                bitmap_done(&d->cells[i].cpus);
                bitmap_done(&d->cells[i].host_nodes);
        }
        CLEAR_ARRAY(d->cells, d->n_cells);
        CLEAR_ARRAY(d->hostdevs, d->n_hostdevs);
        CLEAR_ARRAY(d->controllers, d->n_controllers);
        CLEAR_ARRAY(d->pci_uses, d->n_pci_uses);
        CLEAR_ARRAY(d->hostdev_slots, d->n_hostdev_slots);
        memset(d->controller_at, 0, sizeof(d->controller_at));
        for (size_t i = 0; i < d->n_vcpupins; i++)
                bitmap_done(&d->vcpupins[i].cpuset);
        CLEAR_ARRAY(d->vcpupins, d->n_vcpupins);
        for (size_t i = 0; i < d->n_memnodes; i++)
                bitmap_done(&d->memnodes[i].nodeset);
        CLEAR_ARRAY(d->memnodes, d->n_memnodes);
        bitmap_done(&d->vcpu_cpuset);
        bitmap_done(&d->numatune_memory);
        d->has_vcpu_cpuset = d->has_numatune_memory = false;
        free(d->name);
        free(d->uuid);
        free(d->arch);
        free(d->machine);
        free(d->firmware);
        d->ovmf = false;
        d->pcihole64_kib = 0;
        d->phys_bits = 0;
        d->memory_kib = 0;
        free(d->requested_policy);
        free(d->policy_tag);
        d->name = d->uuid = d->arch = d->machine = d->firmware = NULL;
        d->requested_policy = d->policy_tag = NULL;
        d->mark = NULL;
        d->devices = NULL;
        d->q35 = d->acpi = false;
}

struct domain *domain_free(struct domain *d) {
        if (!d)
                return NULL;
        model_clear(d);
        /* Before the document: freeing a node reads its document's dictionary. */
        for (size_t i = 0; i < d->n_kept; i++)
                xmlFreeNode(d->kept[i]);
        free(d->kept);
        if (d->kept_ns)
                xmlFreeNsList(d->kept_ns);
        if (d->doc)
                xmlFreeDoc(d->doc);
        free(d);
        return NULL;
}

/* A copy of the n elements of a (of size 'size'), with the capacity
 * grow_array() implies for n, so GROW() keeps working on it. */
static void *array_dup(const void *a, size_t n, size_t size) {
        if (n == 0)
                return NULL;
        size_t cap = 4;
        while (cap < n)
                cap *= 2;
        void *r = xreallocarray(NULL, cap, size);
        memcpy(r, a, n * size);
        return r;
}

static char *strdup_null(const char *s) {
        return s ? xstrdup(s) : NULL;
}

void domain_snapshot(struct domain *d, struct domain **ret) {
        struct domain *m = xmalloc(sizeof(*m));
        *m = *d;
        m->doc = NULL;
        m->keep_removed = false;
        m->kept = NULL;
        m->n_kept = 0;
        m->kept_ns = NULL;
        m->name = strdup_null(d->name);
        m->uuid = strdup_null(d->uuid);
        m->arch = strdup_null(d->arch);
        m->machine = strdup_null(d->machine);
        m->firmware = strdup_null(d->firmware);
        m->requested_policy = strdup_null(d->requested_policy);
        m->policy_tag = strdup_null(d->policy_tag);
        m->cells = array_dup(d->cells, d->n_cells, sizeof(*d->cells));
        for (size_t i = 0; i < d->n_cells; i++) {
                bitmap_copy(&m->cells[i].cpus, &d->cells[i].cpus);
                bitmap_copy(&m->cells[i].host_nodes, &d->cells[i].host_nodes);
        }
        m->hostdevs = array_dup(d->hostdevs, d->n_hostdevs, sizeof(*d->hostdevs));
        m->controllers = array_dup(d->controllers, d->n_controllers, sizeof(*d->controllers));
        m->pci_uses = array_dup(d->pci_uses, d->n_pci_uses, sizeof(*d->pci_uses));
        m->hostdev_slots = NULL;
        if (d->n_hostdev_slots) {
                m->hostdev_slots = xcalloc(d->n_hostdev_slots, sizeof(size_t));
                memcpy(m->hostdev_slots, d->hostdev_slots, d->n_hostdev_slots * sizeof(size_t));
        }
        m->vcpupins = array_dup(d->vcpupins, d->n_vcpupins, sizeof(*d->vcpupins));
        for (size_t i = 0; i < d->n_vcpupins; i++)
                bitmap_copy(&m->vcpupins[i].cpuset, &d->vcpupins[i].cpuset);
        m->memnodes = array_dup(d->memnodes, d->n_memnodes, sizeof(*d->memnodes));
        for (size_t i = 0; i < d->n_memnodes; i++)
                bitmap_copy(&m->memnodes[i].nodeset, &d->memnodes[i].nodeset);
        bitmap_copy(&m->vcpu_cpuset, &d->vcpu_cpuset);
        bitmap_copy(&m->numatune_memory, &d->numatune_memory);

        d->keep_removed = true;
        *ret = m;
}

void domain_remove_node(struct domain *d, xmlNodePtr e) {
        xmlUnlinkNode(e);
        if (d->keep_removed && e->type == XML_ELEMENT_NODE)
                *GROW(d->kept, d->n_kept) = e;
        else
                xmlFreeNode(e);
}

void domain_remove_ns(struct domain *d, xmlNodePtr owner, xmlNsPtr ns) {
        for (xmlNsPtr *pp = &owner->nsDef; *pp; pp = &(*pp)->next) {
                if (*pp != ns)
                        continue;
                *pp = ns->next;
                ns->next = NULL;
                /* A node the snapshot still reads may point at it. */
                if (d->keep_removed) {
                        ns->next = d->kept_ns;
                        d->kept_ns = ns;
                } else
                        xmlFreeNs(ns);
                return;
        }
}

/* Guest CPU and NUMA numbers are bounded so a hostile XML cannot make us
 * allocate huge bitmaps. */
#define MAX_CPU 16383
#define MAX_NODE 1023

/* A libvirt memory size (its units: b, KB, k, KiB, MB, M, MiB, ...; KiB
 * when none) in KiB; 0 for what libvirt would refuse. */
static uint64_t memory_kib(const char *text, const char *unit) {
        static const struct { const char *name; uint64_t bytes; } units[] = {
                { "b", 1 }, { "bytes", 1 }, { "KB", 1000 }, { "k", 1024 }, { "KiB", 1024 },
                { "MB", 1000000 }, { "M", 1 << 20 }, { "MiB", 1 << 20 },
                { "GB", 1000000000 }, { "G", 1 << 30 }, { "GiB", 1 << 30 },
                { "TB", UINT64_C(1000000000000) }, { "T", UINT64_C(1) << 40 }, { "TiB", UINT64_C(1) << 40 },
        };
        uint64_t v, mult = 1024;
        if (!text || parse_uint(text, 10, UINT64_C(1) << 50, &v) < 0)
                return 0;
        if (unit) {
                mult = 0;
                for (size_t i = 0; i < ELEMENTSOF(units); i++)
                        if (streq(unit, units[i].name))
                                mult = units[i].bytes;
        }
        if (!mult || v > UINT64_MAX / mult)
                return 0;
        /* More than x86-64's 52-bit address space is no room at all; cap
         * it there so that sums with it cannot wrap. */
        uint64_t kib = v * mult / 1024;
        return kib > (UINT64_C(1) << 42) ? UINT64_C(1) << 42 : kib;
}

/* d->phys_bits and d->memory_kib (domain.h).  Values libvirt would refuse
 * are read as unknown: libvirt says what is wrong with them. */
static void parse_address_space(struct domain *d, xmlNodePtr root) {
        for (int k = 0; k < 2; k++) {
                xmlNodePtr m = xml_child(root, k ? "maxMemory" : "memory");
                _cleanup_free_ char *text = xml_text(m), *unit = xml_prop(m, "unit");
                uint64_t kib = m ? memory_kib(text, unit) : 0;
                if (kib > d->memory_kib)
                        d->memory_kib = kib;
        }
        xmlNodePtr cpu = xml_child(root, "cpu");
        xmlNodePtr mpa = xml_child(cpu, "maxphysaddr");
        _cleanup_free_ char *mode = xml_prop(cpu, "mode"), *type = xml_prop(root, "type");
        _cleanup_free_ char *mpa_mode = xml_prop(mpa, "mode"), *bits = xml_prop(mpa, "bits"), *limit = xml_prop(mpa, "limit");
        uint64_t v;
        d->phys_bits = 40;
        if (mpa_mode && streq(mpa_mode, "emulate") && bits && parse_uint(bits, 10, 64, &v) == 0)
                d->phys_bits = (unsigned) v;
        else if (mpa_mode && streq(mpa_mode, "passthrough"))
                d->phys_bits = limit && parse_uint(limit, 10, 64, &v) == 0 ? (unsigned) v : 0;
        else if (type && streq(type, "kvm") && mode && (streq(mode, "host-passthrough") || streq(mode, "maximum")))
                d->phys_bits = 0;       /* QEMU gives -cpu host and max the host's bits under KVM */
}

static int parse_os(struct domain *d, xmlNodePtr root) {
        xmlNodePtr os = xml_child(root, "os");
        xmlNodePtr type = xml_child(os, "type");
        d->arch = xml_prop(type, "arch");
        d->machine = xml_prop(type, "machine");
        /* libvirt's x86 default machine is 'pc' (i440fx); only an explicit
         * q35 machine type (q35, pc-q35-7.2, ...) has a pcie-root. */
        d->q35 = d->machine && strstr(d->machine, "q35");
        d->firmware = xml_prop(os, "firmware");
        if (!d->firmware) {
                xmlNodePtr loader = xml_child(os, "loader");
                if (loader)
                        d->firmware = xml_text(loader);
        }
        d->acpi = xml_child(xml_child(root, "features"), "acpi") != NULL;
        {
                /* The guest sees the host's CPU (its cpuid vendor, family,
                 * model) only with these modes. */
                _cleanup_free_ char *buf = NULL;
                const char *mode = xml_prop_ref(xml_child(root, "cpu"), "mode", &buf);
                d->cpu_is_host = mode && (streq(mode, "host-passthrough") || streq(mode, "host-model"));
        }
        if (d->firmware)
                d->ovmf = streq(d->firmware, "efi") || strcasestr(d->firmware, "ovmf") || strcasestr(d->firmware, "edk2");
        parse_address_space(d, root);
        return 0;
}

static int cmp_cell(const void *a, const void *b) {
        const struct domain_cell *x = a, *y = b;
        return (x->id > y->id) - (x->id < y->id);
}

static int parse_cells(struct domain *d, xmlNodePtr root, char **ret_error) {
        xmlNodePtr numa = xml_child(xml_child(root, "cpu"), "numa");
        if (!numa)
                return 0;
        for (xmlNodePtr c = numa->children; c; c = c->next) {
                if (!xml_is(c, "cell"))
                        continue;
                size_t ordinal = d->n_cells;
                struct domain_cell *cell = GROW(d->cells, d->n_cells);
                _cleanup_free_ char *id = xml_prop(c, "id");
                _cleanup_free_ char *cpus = xml_prop(c, "cpus");
                uint64_t v = ordinal;
                if (id && parse_uint(id, 10, MAX_NODE, &v) < 0)
                        return set_error(ret_error, -EINVAL, "line %ld: <cell id='%s'>: not a NUMA cell number", xmlGetLineNo(c), id);
                cell->id = (unsigned) v;
                cell->has_distances = xml_child(c, "distances") != NULL;
                if (cpus && bitmap_parse(cpus, MAX_CPU, &cell->cpus) < 0)
                        return set_error(ret_error, -EINVAL, "line %ld: <cell id='%u' cpus='%s'>: not a CPU list", xmlGetLineNo(c), cell->id, cpus);
        }
        /* libvirt accepts the cells in any order but needs the ids to be
         * 0 .. n-1, each once; sorted, a cell's id is its index. */
        if (d->n_cells > 1)
                qsort(d->cells, d->n_cells, sizeof(*d->cells), cmp_cell);
        for (size_t i = 0; i < d->n_cells; i++) {
                if (d->cells[i].id == i)
                        continue;
                if (i > 0 && d->cells[i].id == d->cells[i - 1].id)
                        return set_error(ret_error, -EINVAL, "guest NUMA cell id %u appears twice: cell ids must be 0 to %zu, each once",
                                         d->cells[i].id, d->n_cells - 1);
                return set_error(ret_error, -EINVAL, "guest NUMA cell ids must be 0 to %zu, each once; cell %zu is missing",
                                 d->n_cells - 1, i);
        }
        return 0;
}

static int parse_pinning(struct domain *d, xmlNodePtr root, char **ret_error) {
        xmlNodePtr vcpu = xml_child(root, "vcpu");
        /* Only drawn (hwloctopo.h): libvirt judges the count itself. */
        _cleanup_free_ char *count = xml_text(vcpu);
        uint64_t nv;
        d->vcpus = count && parse_uint(count, 10, MAX_CPU + 1, &nv) == 0 && nv > 0 ? (unsigned) nv : 1;
        _cleanup_free_ char *cpuset = xml_prop(vcpu, "cpuset");
        if (cpuset) {
                if (bitmap_parse(cpuset, MAX_CPU, &d->vcpu_cpuset) < 0)
                        return set_error(ret_error, -EINVAL, "line %ld: <vcpu cpuset='%s'>: not a CPU list", xmlGetLineNo(vcpu), cpuset);
                d->has_vcpu_cpuset = true;
        }

        xmlNodePtr cputune = xml_child(root, "cputune");
        /* The entry of each vCPU (index + 1): a vCPU pinned twice keeps
         * its last <vcpupin>, in one entry, so that a domain holds at most
         * MAX_CPU + 1 of them however many its XML repeats. */
        _cleanup_free_ size_t *pin_at = NULL;
        for (xmlNodePtr c = cputune ? cputune->children : NULL; c; c = c->next) {
                if (!xml_is(c, "vcpupin"))
                        continue;
                _cleanup_free_ char *v = xml_prop(c, "vcpu");
                _cleanup_free_ char *set = xml_prop(c, "cpuset");
                uint64_t n;
                if (!v || parse_uint(v, 10, MAX_CPU, &n) < 0)
                        return set_error(ret_error, -EINVAL, "line %ld: <vcpupin>: missing or bad vcpu attribute", xmlGetLineNo(c));
                if (!pin_at)
                        pin_at = xcalloc(MAX_CPU + 1, sizeof(size_t));
                struct domain_vcpupin *pin;
                if (pin_at[n]) {
                        pin = &d->vcpupins[pin_at[n] - 1];
                        bitmap_done(&pin->cpuset);
                } else {
                        pin = GROW(d->vcpupins, d->n_vcpupins);
                        pin_at[n] = d->n_vcpupins;
                }
                pin->vcpu = (unsigned) n;
                if (!set || bitmap_parse(set, MAX_CPU, &pin->cpuset) < 0)
                        return set_error(ret_error, -EINVAL, "line %ld: <vcpupin vcpu='%s'>: missing or bad cpuset", xmlGetLineNo(c), v);
        }

        xmlNodePtr numatune = xml_child(root, "numatune");
        for (xmlNodePtr c = numatune ? numatune->children : NULL; c; c = c->next) {
                if (xml_is(c, "memory")) {
                        _cleanup_free_ char *set = xml_prop(c, "nodeset");
                        if (!set)
                                continue;
                        if (bitmap_parse(set, MAX_NODE, &d->numatune_memory) < 0)
                                return set_error(ret_error, -EINVAL, "line %ld: <numatune><memory nodeset='%s'>: not a node list", xmlGetLineNo(c), set);
                        d->has_numatune_memory = true;
                } else if (xml_is(c, "memnode")) {
                        _cleanup_free_ char *id = xml_prop(c, "cellid");
                        _cleanup_free_ char *set = xml_prop(c, "nodeset");
                        uint64_t n;
                        if (!id || parse_uint(id, 10, MAX_NODE, &n) < 0)
                                return set_error(ret_error, -EINVAL, "line %ld: <memnode>: missing or bad cellid", xmlGetLineNo(c));
                        for (size_t i = 0; i < d->n_memnodes; i++)
                                if (d->memnodes[i].cellid == n)
                                        return set_error(ret_error, -EINVAL, "line %ld: <memnode cellid='%s'> appears twice", xmlGetLineNo(c), id);
                        struct domain_memnode *m = GROW(d->memnodes, d->n_memnodes);
                        m->cellid = (unsigned) n;
                        if (!set || bitmap_parse(set, MAX_NODE, &m->nodeset) < 0)
                                return set_error(ret_error, -EINVAL, "line %ld: <memnode cellid='%s'>: missing or bad nodeset", xmlGetLineNo(c), id);
                }
        }
        return 0;
}

static int parse_controller(struct domain *d, xmlNodePtr c, char **ret_error) {
        if (!xml_prop_is(c, "type", "pci"))
                return 0;
        _cleanup_free_ char *index_buf = NULL;
        const char *index = xml_prop_ref(c, "index", &index_buf);
        uint64_t idx = 0;
        /* No index: libvirt gives the lowest free one, once every
         * explicit index is known (see assign_missing_indexes()). */
        if (index && parse_uint(index, 0, 255, &idx) < 0)
                return set_error(ret_error, -EINVAL, "line %ld: PCI <controller>: bad index '%s'", xmlGetLineNo(c), index);
        if (index && d->controller_at[idx])
                return set_error(ret_error, -EINVAL, "line %ld: two PCI controllers have index %" PRIu64 " (the other is at line %ld)",
                                 xmlGetLineNo(c), idx, xmlGetLineNo(d->controllers[d->controller_at[idx] - 1].elem));

        struct domain_controller *ctl = GROW(d->controllers, d->n_controllers);
        ctl->index = index ? (int) idx : -1;
        if (index)
                d->controller_at[idx] = d->n_controllers;
        ctl->elem = c;
        ctl->bus_nr = -1;
        ctl->node = -1;
        /* Point at the attribute's own storage so the model needs no copy. */
        const char *model = attr_ref(c, "model");
        ctl->model = model ? model : "";

        xmlNodePtr target = xml_child(c, "target");
        if (target) {
                _cleanup_free_ char *busnr_buf = NULL;
                const char *busnr = xml_prop_ref(target, "busNr", &busnr_buf);
                uint64_t v;
                if (busnr) {
                        if (parse_uint(busnr, 0, 255, &v) < 0)
                                return set_error(ret_error, -EINVAL, "line %ld: controller %d: bad busNr '%s'", xmlGetLineNo(target), ctl->index, busnr);
                        ctl->bus_nr = (int) v;
                }
                xmlNodePtr node = xml_child(target, "node");
                if (node) {
                        _cleanup_free_ char *t = xml_text(node);
                        if (parse_uint(t, 10, MAX_NODE, &v) < 0)
                                return set_error(ret_error, -EINVAL, "line %ld: controller %d: bad <node> '%s'", xmlGetLineNo(node), ctl->index, t);
                        ctl->node = (int) v;
                }
        }
        xmlNodePtr hole = xml_child(c, "pcihole64");
        /* The pcie-root's: index 0, or no index (libvirt gives it 0). */
        if (hole && (index ? idx == 0 : xml_prop_is(c, "model", "pcie-root"))) {
                _cleanup_free_ char *t = xml_text(hole);
                _cleanup_free_ char *unit = xml_prop(hole, "unit");
                uint64_t v;
                uint64_t mult = 1;   /* libvirt's default unit here is KiB */
                if (unit && (streq(unit, "M") || streq(unit, "MiB")))
                        mult = 1024;
                else if (unit && (streq(unit, "G") || streq(unit, "GiB")))
                        mult = 1024 * 1024;
                else if (unit && (streq(unit, "T") || streq(unit, "TiB")))
                        mult = UINT64_C(1024) * 1024 * 1024;
                else if (unit && (streq(unit, "b") || streq(unit, "bytes")))
                        mult = 0;
                if (parse_uint(t, 10, UINT64_MAX / (1024ull * 1024 * 1024), &v) < 0)
                        return set_error(ret_error, -EINVAL, "line %ld: bad <pcihole64> '%s'", xmlGetLineNo(hole), t);
                d->pcihole64_kib = mult ? v * mult : v / 1024;
        }
        xmlNodePtr addr = guest_pci_address(c);
        if (addr) {
                if (xml_parse_pci_address(addr, &ctl->addr) < 0)
                        return set_error(ret_error, -EINVAL, "line %ld: controller %d: bad PCI address", xmlGetLineNo(addr), ctl->index);
                ctl->has_addr = true;
        }
        return 0;
}

static int add_hostdev(struct domain *d, struct domain_hostdev *hd, const char *what, char **ret_error);

static int parse_hostdev(struct domain *d, xmlNodePtr e, bool is_interface, char **ret_error) {
        struct domain_hostdev hd = { .elem = e, .is_interface = is_interface, .managed = -1 };
        {
                _cleanup_free_ char *buf = NULL;
                const char *managed = xml_prop_ref(e, "managed", &buf);
                if (managed)
                        hd.managed = streq(managed, "yes") ? 1 : 0;
        }
        xmlNodePtr source = xml_child(e, "source");
        xmlNodePtr saddr = xml_child(source, "address");
        long line = xmlGetLineNo(e);
        const char *what = is_interface ? "<interface type='hostdev'>" : "<hostdev>";

        if (!is_interface) {
                _cleanup_free_ char *mode_buf = NULL, *type_buf = NULL;
                const char *mode = xml_prop_ref(e, "mode", &mode_buf);
                const char *type = xml_prop_ref(e, "type", &type_buf);
                if (mode && !streq(mode, "subsystem"))
                        return 0;
                if (!type)
                        return 0;
                if (streq(type, "mdev")) {
                        /* Only vfio-pci mdevs sit on the guest's PCI bus;
                         * vfio-ccw and vfio-ap do not. */
                        if (!xml_prop_is(e, "model", "vfio-pci"))
                                return 0;
                        hd.kind = DOMAIN_HOSTDEV_MDEV;
                        _cleanup_free_ char *uuid = xml_prop(saddr, "uuid");
                        if (!uuid)
                                return set_error(ret_error, -EINVAL, "line %ld: mdev <hostdev> has no <source><address uuid=...>", line);
                        if (uuid_canonical(uuid, hd.mdev_uuid) < 0)
                                return set_error(ret_error, -EINVAL, "line %ld: mdev <hostdev>: '%s' is not a UUID", line, uuid);
                } else if (!streq(type, "pci"))
                        return 0;
        }

        if (hd.kind == DOMAIN_HOSTDEV_PCI) {
                if (!saddr) {
                        /* <interface type='hostdev'> may name a network
                         * instead (the VF is chosen at start); we cannot
                         * know its node, so it is not ours to place. */
                        if (is_interface)
                                return 0;
                        return set_error(ret_error, -EINVAL, "line %ld: %s has no <source><address>", line, what);
                }
                _cleanup_free_ char *atype_buf = NULL;
                const char *atype = xml_prop_ref(saddr, "type", &atype_buf);
                if (atype && !streq(atype, "pci"))
                        return 0;
                if (xml_parse_pci_address(saddr, &hd.host) < 0)
                        return set_error(ret_error, -EINVAL, "line %ld: %s: bad source PCI address", line, what);
        }
        hd.src_addr = saddr;
        return add_hostdev(d, &hd, what, ret_error);
}

/* Read hd's guest <address> (a direct child of hd->elem) and add hd to d,
 * unless it sits on a bus that is not PCI.  A host device assigned twice
 * is an error.  'what' names the element in messages. */
static int add_hostdev(struct domain *d, struct domain_hostdev *hd_in, const char *what, char **ret_error) {
        struct domain_hostdev hd = *hd_in;
        xmlNodePtr e = hd.elem;
        long line = xmlGetLineNo(e);
        xmlNodePtr gaddr = NULL;
        for (xmlNodePtr c = e->children; c; c = c->next)
                if (xml_is(c, "address")) {
                        gaddr = c;
                        break;
                }
        if (gaddr) {
                _cleanup_free_ char *gtype_buf = NULL;
                const char *gtype = xml_prop_ref(gaddr, "type", &gtype_buf);
                /* A device on a non-PCI bus (ccw, ...) is not ours. */
                if (gtype && !streq(gtype, "pci"))
                        return 0;
                if (xml_parse_pci_address(gaddr, &hd.guest) < 0)
                        return set_error(ret_error, -EINVAL, "line %ld: %s: bad guest PCI address", xmlGetLineNo(gaddr), what);
                hd.has_guest_addr = true;
                hd.addr_elem = gaddr;
        }

        /* A hash lookup, not a scan: a domain may hold tens of thousands. */
        size_t other = hostdev_lookup(d, hd.kind, &hd.host, hd.mdev_uuid);
        if (other) {
                char b[64];
                return set_error(ret_error, -EINVAL, "line %ld: host device %s is assigned twice (also at line %ld)",
                                 line, domain_hostdev_name(&hd, b), xmlGetLineNo(d->hostdevs[other - 1].elem));
        }
        *GROW(d->hostdevs, d->n_hostdevs) = hd;
        hostdev_index_add(d);
        return 0;
}

#if PCINUMA_STAND_INS
/* A stand_ins build: an <interface type='user'> with <model type='virtio'/>
 * whose <mac address> the domain's stand-in table maps to a host BDF is
 * the PCI hostdev of that BDF (domain_parse_stand_ins()); any other is not
 * pcinuma's. */
static int parse_stand_in(struct domain *d, xmlNodePtr e, char **ret_error) {
        if (!xml_prop_is(xml_child(e, "model"), "type", "virtio"))
                return 0;
        _cleanup_free_ char *buf = NULL;
        const char *mac = xml_prop_ref(xml_child(e, "mac"), "address", &buf);
        const struct standin *si = standins_find(d->stand_ins, mac);
        if (!si)
                return 0;
        struct domain_hostdev hd = {
                .kind = DOMAIN_HOSTDEV_PCI,
                .is_interface = true,
                .stand_in = true,
                .host = si->host,
                .elem = e,
                .managed = -1,
        };
        return add_hostdev(d, &hd, "stand-in <interface type='user'>", ret_error);
}
#endif

/* Record every guest PCI address in the subtree (not <source> ones). */
static int collect_pci_uses(struct domain *d, xmlNodePtr n, xmlNodePtr owner, char **ret_error) {
        for (xmlNodePtr c = n->children; c; c = c->next) {
                if (c->type != XML_ELEMENT_NODE)
                        continue;
                if (xml_is(c, "source"))
                        continue;
                if (is_pci_address(c)) {
                        struct pci_addr a;
                        if (xml_parse_pci_address(c, &a) < 0)
                                return set_error(ret_error, -EINVAL, "line %ld: bad PCI address", xmlGetLineNo(c));
                        struct domain_pci_use *u = GROW(d->pci_uses, d->n_pci_uses);
                        u->addr = a;
                        u->owner = owner ? owner : c->parent;
                        continue;
                }
                int r = collect_pci_uses(d, c, owner ? owner : c, ret_error);
                if (r < 0)
                        return r;
        }
        return 0;
}

int domain_check_controller(xmlNodePtr c, char **ret_error) {
        struct domain tmp = {0};
        int r = parse_controller(&tmp, c, ret_error);
        if (r >= 0)
                r = collect_pci_uses(&tmp, c, c, ret_error);
        model_clear(&tmp);
        return r;
}

/* PCI controllers without an index get, in document order, the lowest
 * index no other PCI controller uses, as libvirt assigns them. */
static void assign_missing_indexes(struct domain *d) {
        int next = 0;   /* every index below it is taken */
        for (size_t i = 0; i < d->n_controllers; i++) {
                if (d->controllers[i].index >= 0)
                        continue;
                while (next <= 255 && d->controller_at[next])
                        next++;
                if (next > 255)
                        break;
                d->controllers[i].index = next;
                d->controller_at[next] = i + 1;
        }
}

static int parse_metadata(struct domain *d, xmlNodePtr root, char **ret_error) {
        int r = xml_locate_mark(root, &d->mark, ret_error);
        if (r < 0)
                return r;
        xmlNodePtr md = xml_child(root, "metadata");
        for (xmlNodePtr c = md ? md->children : NULL; c; c = c->next) {
                if (xml_is_ns(c, PCINUMA_POLICY_NS, "policy")) {
                        /* The last one counts, as before; free the earlier. */
                        free(d->requested_policy);
                        free(d->policy_tag);
                        d->requested_policy = xml_prop(c, "name");
                        d->policy_tag = xml_prop(c, "tag");
                }
        }
        return 0;
}

int domain_reload(struct domain *d, char **ret_error) {
        int r;
        model_clear(d);
        xmlNodePtr root = xmlDocGetRootElement(d->doc);
        if (!root || !xml_is(root, "domain"))
                return set_error(ret_error, -EINVAL, "the document is not a libvirt <domain> (root element is <%s>)",
                                 root ? (const char *) root->name : "nothing");
        d->name = xml_text(xml_child(root, "name"));
        d->uuid = xml_text(xml_child(root, "uuid"));
        parse_os(d, root);
        r = parse_cells(d, root, ret_error);
        if (r < 0)
                return r;
        r = parse_pinning(d, root, ret_error);
        if (r < 0)
                return r;
        r = parse_metadata(d, root, ret_error);
        if (r < 0)
                return r;

        d->devices = xml_child(root, "devices");
        for (xmlNodePtr c = d->devices ? d->devices->children : NULL; c; c = c->next) {
                if (xml_is(c, "controller"))
                        r = parse_controller(d, c, ret_error);
                else if (xml_is(c, "hostdev"))
                        r = parse_hostdev(d, c, false, ret_error);
                else if (xml_is(c, "interface") && xml_prop_is(c, "type", "hostdev"))
                        r = parse_hostdev(d, c, true, ret_error);
#if PCINUMA_STAND_INS
                else if (xml_is(c, "interface") && d->stand_ins && xml_prop_is(c, "type", "user"))
                        r = parse_stand_in(d, c, ret_error);
#endif
                else
                        r = 0;
                if (r < 0)
                        return r;
        }
        assign_missing_indexes(d);
        if (d->devices) {
                r = collect_pci_uses(d, d->devices, NULL, ret_error);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* The document of buf[0..len), checked and parsed (domain_parse()). */
int domain_check_limits(const char *buf, size_t len, char **ret_error) {
        if (len > DOMAIN_XML_MAX)
                return set_error(ret_error, -EFBIG, "domain XML is %zu bytes, more than the %u byte limit", len, DOMAIN_XML_MAX);
        size_t tags = 0;
        for (const char *p = buf, *end = buf + len; (p = memchr(p, '<', (size_t) (end - p))); p++)
                if (++tags > DOMAIN_XML_TAGS_MAX)
                        return set_error(ret_error, -E2BIG,
                                         "domain XML has more than %u tags ('<'), far more than any domain has: refused "
                                         "before parsing (DOMAIN_XML_TAGS_MAX)", DOMAIN_XML_TAGS_MAX);
        return 0;
}

static int read_document(const char *buf, size_t len, xmlDocPtr *ret, char **ret_error) {
        if (len > DOMAIN_XML_MAX)
                return set_error(ret_error, -EFBIG, "domain XML is %zu bytes, more than the %u byte limit", len, DOMAIN_XML_MAX);
        if (len == 0)
                return set_error(ret_error, -EINVAL, "domain XML is empty");
        if (memchr(buf, 0, len))
                return set_error(ret_error, -EINVAL, "domain XML contains a NUL byte");
        int limits = domain_check_limits(buf, len, ret_error);
        if (limits < 0)
                return limits;

        /* No DTDs at all: libvirt never writes one, and refusing them up
         * front rules out entity expansion attacks whatever the libxml2
         * version does with the internal subset.  ('!' is rare in a
         * domain XML: look for it, then for what precedes and follows.) */
        for (const char *p = buf, *end = buf + len; (p = memchr(p, '!', (size_t) (end - p))); p++)
                if (p > buf && p[-1] == '<' &&
                    (((size_t) (end - p) >= 8 && memcmp(p, "!DOCTYPE", 8) == 0) ||
                     ((size_t) (end - p) >= 7 && memcmp(p, "!ENTITY", 7) == 0)))
                        return set_error(ret_error, -EINVAL, "domain XML has a DTD or entity declaration, which is not accepted");

        xmlParserCtxtPtr ctxt = xmlNewParserCtxt();
        if (!ctxt)
                abort();
        /* NONET: never fetch anything; no NOENT: never substitute entities;
         * no HUGE: keep libxml2's depth and size limits.  COMPACT: a short
         * text (most attribute values) lives in its node instead of a
         * malloc'ed string of its own. */
        xmlDocPtr doc = xmlCtxtReadMemory(ctxt, buf, (int) len, "domain.xml", NULL,
                                          XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING | XML_PARSE_COMPACT);
        /* A namespace error (an undeclared prefix, "a:" as a name) leaves
         * libxml2 a document, with the prefix kept in the name; libvirt
         * refuses it, and what pcinuma wrote from it would not parse. */
        bool ns_error = doc && !ctxt->nsWellFormed;
        if (!doc || ns_error) {
                const xmlError *e = xmlCtxtGetLastError(ctxt);
                int r = set_error(ret_error, -EINVAL, "malformed domain XML: line %d: %s%s",
                                  e ? e->line : 0, ns_error ? "namespace error: " : "",
                                  e && e->message ? e->message : "parse error");
                if (doc)
                        xmlFreeDoc(doc);
                /* libxml2 messages end in a newline */
                if (ret_error && *ret_error) {
                        size_t l = strlen(*ret_error);
                        while (l && (*ret_error)[l - 1] == '\n')
                                (*ret_error)[--l] = 0;
                }
                xmlFreeParserCtxt(ctxt);
                return r;
        }
        xmlFreeParserCtxt(ctxt);
        if (doc->intSubset || doc->extSubset) {
                xmlFreeDoc(doc);
                return set_error(ret_error, -EINVAL, "domain XML has a DTD, which is not accepted");
        }
        *ret = doc;
        return 0;
}

/* Parse buf[0..len) into d (new and empty, but for the stand-in table of
 * a stand_ins build), which this takes: domain_parse() and
 * domain_parse_stand_ins(). */
static int parse_into(struct domain *d_in, const char *buf, size_t len, struct domain **ret, char **ret_error) {
        _cleanup_domain_ struct domain *d = d_in;
        int r = read_document(buf, len, &d->doc, ret_error);
        if (r < 0)
                return r;
        d->has_xml_decl = len >= 5 && memcmp(buf, "<?xml", 5) == 0;
        r = domain_reload(d, ret_error);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(d);
        return 0;
}

int domain_parse(const char *buf, size_t len, struct domain **ret, char **ret_error) {
        return parse_into(xcalloc(1, sizeof(struct domain)), buf, len, ret, ret_error);
}

#if PCINUMA_STAND_INS
int domain_parse_stand_ins(const char *buf, size_t len, const struct standins *s, struct domain **ret, char **ret_error) {
        struct domain *d = xcalloc(1, sizeof(*d));
        d->stand_ins = s;
        return parse_into(d, buf, len, ret, ret_error);
}
#endif

int domain_copy(const struct domain *d, struct domain **ret, char **ret_error) {
        xmlDocPtr doc = xmlCopyDoc(d->doc, 1);
        if (!doc)
                abort();
        _cleanup_domain_ struct domain *c = xcalloc(1, sizeof(*c));
        c->doc = doc;
        c->has_xml_decl = d->has_xml_decl;
#if PCINUMA_STAND_INS
        c->stand_ins = d->stand_ins;
#endif
        int r = domain_reload(c, ret_error);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(c);
        return 0;
}

/* The host nodes of each CPU set the pinning names, each computed once:
 * per vCPU its <vcpupin> (at[v], index + 1), and per pin (and for <vcpu
 * cpuset>, the last) its nodes. */
struct pin_nodes {
        size_t *at;                     /* MAX_CPU + 1 entries, or NULL (no pins) */
        struct bitmap *nodes;           /* n_vcpupins + 1 */
        bool *done;
        size_t n;
};

static void pin_nodes_done(struct pin_nodes *p) {
        for (size_t i = 0; i < p->n; i++)
                bitmap_done(&p->nodes[i]);
        free(p->nodes);
        free(p->done);
        free(p->at);
}

/* The nodes holding the CPUs of pin k - 1 (k 0: <vcpu cpuset>): each CPU
 * counts for the first node whose list holds it, as hostmap_cpu_node()
 * reads it, a word of 64 CPUs at a time. */
static const struct bitmap *set_nodes(struct pin_nodes *p, const struct domain *d, const struct hostmap *h, size_t k) {
        size_t slot = k ? k - 1 : d->n_vcpupins;
        if (p->done[slot])
                return &p->nodes[slot];
        const struct bitmap *set = k ? &d->vcpupins[k - 1].cpuset : &d->vcpu_cpuset;
        for (size_t w = 0; w < set->n_words; w++) {
                uint64_t left = set->bits[w];
                for (size_t i = 0; left && i < h->n_nodes; i++) {
                        const struct bitmap *cpus = &h->nodes[i].cpus;
                        uint64_t m = w < cpus->n_words ? left & cpus->bits[w] : 0;
                        if (m && h->nodes[i].id >= 0)
                                bitmap_set(&p->nodes[slot], (unsigned) h->nodes[i].id);
                        left &= ~m;
                }
        }
        (void) work_spend(d->work, set->n_words * (h->n_nodes + 1), "reading the guest's CPU pinning");
        p->done[slot] = true;
        return &p->nodes[slot];
}

int domain_resolve_backing(struct domain *d, const struct hostmap *h, char **ret_error) {
        _cleanup_(pin_nodes_done) struct pin_nodes pins = {
                .nodes = xcalloc(d->n_vcpupins + 1, sizeof(struct bitmap)),
                .done = xcalloc(d->n_vcpupins + 1, sizeof(bool)), .n = d->n_vcpupins + 1,
        };
        if (d->n_vcpupins) {
                pins.at = xcalloc(MAX_CPU + 1, sizeof(size_t));
                for (size_t i = 0; i < d->n_vcpupins; i++)
                        pins.at[d->vcpupins[i].vcpu] = i + 1;
        }
        for (size_t i = 0; i < d->n_memnodes; i++) {
                const struct domain_memnode *m = &d->memnodes[i];
                if (!domain_find_cell(d, m->cellid))
                        return set_error(ret_error, -EINVAL, "<numatune><memnode cellid='%u'> names a guest cell that does not exist (the domain has %zu)",
                                         m->cellid, d->n_cells);
                for (int n = bitmap_next(&m->nodeset, 0); n >= 0; n = bitmap_next(&m->nodeset, (unsigned) n + 1))
                        if (!hostmap_find_node(h, n)) {
                                _cleanup_free_ char *set = bitmap_format(&m->nodeset);
                                return set_error(ret_error, -EINVAL,
                                                 "<numatune><memnode cellid='%u' nodeset='%s'> names host node %d, which does not exist on this host",
                                                 m->cellid, set, n);
                        }
        }
        bool memory_single = d->has_numatune_memory && bitmap_count(&d->numatune_memory) == 1;
        if (memory_single) {
                int n = bitmap_next(&d->numatune_memory, 0);
                if (!hostmap_find_node(h, n))
                        return set_error(ret_error, -EINVAL, "<numatune><memory nodeset='%d'> names a host node that does not exist on this host", n);
        }

        for (size_t c = 0; c < d->n_cells; c++) {
                struct domain_cell *cell = &d->cells[c];
                bitmap_done(&cell->host_nodes);
                cell->backing = DOMAIN_BACKING_NONE;

                const struct domain_memnode *mn = NULL;
                for (size_t i = 0; i < d->n_memnodes; i++)
                        if (d->memnodes[i].cellid == cell->id)
                                mn = &d->memnodes[i];
                if (mn) {
                        bitmap_or(&cell->host_nodes, &mn->nodeset);
                        cell->backing = DOMAIN_BACKING_MEMNODE;
                        continue;
                }

                /* The host nodes that hold the CPUs this cell's vCPUs run
                 * on.  vcpupin wins per vCPU; <vcpu cpuset> covers the rest.
                 * Host CPUs the map does not know are ignored.  Each set's
                 * nodes are computed once. */
                bool pinned = false, cpuset_used = false;
                for (int v = bitmap_next(&cell->cpus, 0); v >= 0; v = bitmap_next(&cell->cpus, (unsigned) v + 1)) {
                        size_t k = pins.at ? pins.at[v] : 0;
                        const struct bitmap *nodes;
                        if (k)
                                pinned = true;
                        else if (d->has_vcpu_cpuset)
                                cpuset_used = true;
                        else
                                continue;
                        nodes = set_nodes(&pins, d, h, k);
                        if (!work_spend(d->work, 1 + nodes->n_words, "reading the guest's CPU pinning"))
                                return work_error(d->work, ret_error);
                        bitmap_or(&cell->host_nodes, nodes);
                }
                if (!bitmap_isempty(&cell->host_nodes)) {
                        cell->backing = pinned ? DOMAIN_BACKING_VCPUPIN : DOMAIN_BACKING_VCPU_CPUSET;
                        (void) cpuset_used;
                        continue;
                }
                if (memory_single) {
                        bitmap_or(&cell->host_nodes, &d->numatune_memory);
                        cell->backing = DOMAIN_BACKING_MEMORY;
                }
        }
        return 0;
}

int domain_format(const struct domain *d, char **ret) {
        xmlBufferPtr buf = xmlBufferCreate();
        if (!buf)
                abort();
        xmlSaveCtxtPtr save = xmlSaveToBuffer(buf, "UTF-8", d->has_xml_decl ? 0 : XML_SAVE_NO_DECL);
        if (!save) {
                xmlBufferFree(buf);
                return -ENOMEM;
        }
        if (xmlSaveDoc(save, d->doc) < 0) {
                xmlSaveClose(save);
                xmlBufferFree(buf);
                return -EIO;
        }
        xmlSaveClose(save);
        struct strbuf out = {0};
        strbuf_appendn(&out, (const char *) xmlBufferContent(buf), (size_t) xmlBufferLength(buf));
        xmlBufferFree(buf);
        /* End with exactly one newline, as libvirt and editors do. */
        while (out.len && out.buf[out.len - 1] == '\n')
                out.buf[--out.len] = 0;
        strbuf_append(&out, "\n");
        *ret = strbuf_steal(&out);
        return 0;
}

const struct domain_controller *domain_find_controller(const struct domain *d, int index) {
        if (index >= 0 && index <= 255)
                return d->controller_at[index] ? &d->controllers[d->controller_at[index] - 1] : NULL;
        for (size_t i = 0; i < d->n_controllers; i++)
                if (d->controllers[i].index == index)
                        return &d->controllers[i];
        return NULL;
}

const struct domain_cell *domain_find_cell(const struct domain *d, unsigned id) {
        return id < d->n_cells ? &d->cells[id] : NULL;
}

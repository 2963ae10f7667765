/* The host map's sysfs reader: the only part of the host map that does
 * I/O.  Everything is read relative to one root directory fd with the *at()
 * calls, never through an absolute /sys path, so tests and bug reports can
 * point it at a fixture tree or a captured snapshot (as hwloc does with
 * HWLOC_FSROOT).  A file that is missing or holds garbage gives the
 * "unknown" value of its field; only an unusable root is an error. */
#include "hostmap.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sys/stat.h>

#define IORESOURCE_IO     UINT64_C(0x00000100)
#define IORESOURCE_MEM    UINT64_C(0x00000200)
#define IORESOURCE_PREFETCH UINT64_C(0x00002000)
#define IORESOURCE_MEM_64 UINT64_C(0x00100000)

/* No sysfs attribute we read is anywhere near this; the cap only keeps a
 * bogus fixture (or /dev/zero behind a symlink) from eating memory. */
#define READ_MAX (1024 * 1024)

/* The largest CPU number we accept in a cpulist (the kernel's NR_CPUS
 * tops out at 8192 today). */
#define CPU_MAX 65535

static void closedirp(DIR **d) {
        if (*d)
                (void) closedir(*d);
}
#define _cleanup_closedir_ _cleanup_(closedirp)

/* Read a whole small file below dir_fd, with trailing white space removed.
 * A sysfs attribute is produced by one show() call and returned by one
 * read(), so a read that leaves room in the buffer has seen everything;
 * only a file that fills the buffer (a huge distance row) costs another
 * read.  That keeps a device to a handful of syscalls, which is what the
 * scan time of a 2,000-device host is made of. */
static int read_text_at(int dir_fd, const char *path, char **ret) {
        _cleanup_close_ int fd = -1;
        _cleanup_free_ char *buf = NULL;
        size_t len = 0, cap = 0;

        fd = openat(dir_fd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;

        for (;;) {
                if (len + 1 >= cap) {
                        if (cap >= READ_MAX)
                                return -EFBIG;
                        cap = cap ? cap * 2 : 4096;
                        buf = xrealloc(buf, cap);
                }
                ssize_t n = read(fd, buf + len, cap - len - 1);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                len += (size_t) n;
                if (n == 0 || len + 1 < cap)
                        break;
        }
        buf[len] = 0;
        while (len > 0 && isspace((unsigned char) buf[len - 1]))
                buf[--len] = 0;
        *ret = TAKE_PTR(buf);
        return 0;
}

/* readlinkat() into a fresh string.  EINVAL means "not a symlink". */
static int readlink_at(int dir_fd, const char *path, char **ret) {
        size_t size = 256;

        for (;;) {
                _cleanup_free_ char *buf = xmalloc(size);
                ssize_t n = readlinkat(dir_fd, path, buf, size);
                if (n < 0)
                        return -errno;
                if ((size_t) n < size) {
                        buf[n] = 0;
                        *ret = TAKE_PTR(buf);
                        return 0;
                }
                if (size >= PATH_MAX * 4)
                        return -ENAMETOOLONG;
                size *= 2;
        }
}

/* The last path component, ignoring trailing slashes ("a/b/" -> "b"). */
static const char *last_component(char *path) {
        size_t len = strlen(path);
        while (len > 1 && path[len - 1] == '/')
                path[--len] = 0;
        const char *slash = strrchr(path, '/');
        return slash ? slash + 1 : path;
}

static int readlink_basename_at(int dir_fd, const char *path, char **ret) {
        _cleanup_free_ char *target = NULL;
        int r = readlink_at(dir_fd, path, &target);
        if (r < 0)
                return r;
        const char *base = last_component(target);
        if (!*base)
                return -EINVAL;
        *ret = xstrdup(base);
        return 0;
}

static int read_uint_at(int dir_fd, const char *path, uint64_t max, uint64_t *ret) {
        _cleanup_free_ char *s = NULL;
        int r = read_text_at(dir_fd, path, &s);
        if (r < 0)
                return r;
        return parse_uint(s, 0, max, ret);
}

/* "pci0000:00", "pci10000:00": a host bridge's directory under devices/. */
static bool is_host_bridge_name(const char *s) {
        size_t n = 0;

        if (strncmp(s, "pci", 3) != 0)
                return false;
        s += 3;
        while (isxdigit((unsigned char) *s) && n < 8) {
                s++;
                n++;
        }
        if (n == 0 || *s != ':')
                return false;
        s++;
        return isxdigit((unsigned char) s[0]) && isxdigit((unsigned char) s[1]) && s[2] == 0;
}

/* From the target of bus/pci/devices/X ("../../../devices/pci0000:00/
 * 0000:00:03.0/0000:01:00.0"), the host bridge and the bridges between it
 * and the device, top first.  Behind a VMD or a nested host bridge the
 * innermost host bridge wins, since that is the one the device's
 * domain belongs to. */
static void parse_upstream(struct hostmap_device *d, char *target) {
        char *save = NULL;
        struct pci_addr *up = NULL;
        size_t n_up = 0;
        char *host_bridge = NULL;

        for (char *c = strtok_r(target, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
                struct pci_addr a;
                if (is_host_bridge_name(c)) {
                        free(host_bridge);
                        host_bridge = xstrdup(c);
                        n_up = 0;
                        continue;
                }
                if (!host_bridge || pci_addr_parse(c, &a) < 0)
                        continue;
                if (pci_addr_eq(&a, &d->addr))
                        break;
                *GROW(up, n_up) = a;
        }

        if (!host_bridge) {
                free(up);
                return;
        }
        d->host_bridge = host_bridge;
        if (n_up > 0) {
                d->upstream = up;
                d->n_upstream = n_up;
        } else
                free(up);
}

/* The first six lines of 'resource' are the standard BARs, each
 * "start end flags" in hex; an unused BAR reads as all zeroes. */
static void parse_resource(struct hostmap_device *d, const char *text) {
        const char *p = text;

        for (unsigned i = 0; i < HOSTMAP_N_BARS && p && *p; i++) {
                uint64_t start, end, flags;
                const char *nl = strchr(p, '\n');

                if (sscanf(p, "%" SCNx64 " %" SCNx64 " %" SCNx64, &start, &end, &flags) == 3 &&
                    end != 0 && end >= start) {
                        struct hostmap_bar *b = &d->bars[i];
                        if (flags & IORESOURCE_IO)
                                b->type = HOSTMAP_BAR_IO;
                        else if (flags & IORESOURCE_MEM)
                                b->type = (flags & IORESOURCE_MEM_64) ? HOSTMAP_BAR_MEM64 : HOSTMAP_BAR_MEM32;
                        if (b->type != HOSTMAP_BAR_NONE) {
                                b->size = end - start + 1;
                                b->prefetchable = (flags & IORESOURCE_PREFETCH) != 0;
                        }
                }
                p = nl ? nl + 1 : NULL;
        }
}

static void read_device(struct hostmap *h, int devices_fd, const char *name, const struct pci_addr *addr) {
        _cleanup_close_ int fd = -1;
        _cleanup_free_ char *target = NULL, *text = NULL;
        uint64_t v;
        int r;

        r = readlink_at(devices_fd, name, &target);
        if (r == -ENOENT)
                return;       /* removed while we were scanning */

        /* O_DIRECTORY follows the bus/pci/devices symlink; a dangling one
         * (the device went away) or a stray file is skipped. */
        fd = openat(devices_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return;

        struct hostmap_device *d = hostmap_add_device(h, addr);

        if (read_uint_at(fd, "class", 0xffffff, &v) >= 0)
                d->class = (uint32_t) v;
        if (read_uint_at(fd, "vendor", 0xffff, &v) >= 0)
                d->vendor = (uint16_t) v;
        if (read_uint_at(fd, "device", 0xffff, &v) >= 0)
                d->device = (uint16_t) v;

        if (read_text_at(fd, "numa_node", &text) >= 0) {
                int64_t node;
                if (parse_int(text, 10, -1, INT_MAX, &node) >= 0)
                        d->sysfs_node = (int) node;
        }
        free(text);
        text = NULL;

        if (read_text_at(fd, "resource", &text) >= 0)
                parse_resource(d, text);

        (void) readlink_basename_at(fd, "driver", &d->driver);

        _cleanup_free_ char *group = NULL;
        if (readlink_basename_at(fd, "iommu_group", &group) >= 0 &&
            parse_uint(group, 10, INT_MAX, &v) >= 0)
                d->iommu_group = (int) v;

        _cleanup_free_ char *pf = NULL;
        if (readlink_basename_at(fd, "physfn", &pf) >= 0 &&
            pci_addr_parse(pf, &d->physfn) >= 0)
                d->has_physfn = true;

        /* The kernel numbers virtfn links 0..numvfs-1 without gaps, so
         * probing them in order costs one failed readlinkat() for the
         * common device that is not a PF, instead of a directory scan. */
        for (unsigned i = 0;; i++) {
                char link[32];
                char buf[8];
                snprintf(link, sizeof(link), "virtfn%u", i);
                if (readlinkat(fd, link, buf, sizeof(buf)) < 0)
                        break;
                d->n_vfs = i + 1;
        }

        if (target)
                parse_upstream(d, target);
}

static int read_pci_devices(struct hostmap *h, int devices_fd) {
        _cleanup_closedir_ DIR *dir = NULL;
        int fd;

        fd = openat(devices_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        dir = fdopendir(fd);
        if (!dir) {
                int r = -errno;
                (void) close(fd);
                return r;
        }

        for (struct dirent *de; (de = readdir(dir));) {
                struct pci_addr a;
                if (de->d_name[0] == '.')
                        continue;
                if (pci_addr_parse(de->d_name, &a) < 0)
                        continue;
                read_device(h, devices_fd, de->d_name, &a);
        }
        return 0;
}

static bool is_uuid(const char *s) {
        if (strlen(s) != 36)
                return false;
        for (size_t i = 0; i < 36; i++) {
                if (i == 8 || i == 13 || i == 18 || i == 23) {
                        if (s[i] != '-')
                                return false;
                } else if (!isxdigit((unsigned char) s[i]))
                        return false;
        }
        return true;
}

/* bus/mdev/devices/<uuid> -> ../../../devices/pci0000:00/0000:00:02.0/<uuid>:
 * the parent is the component before the uuid. */
static void read_mdevs(struct hostmap *h, int rootfd) {
        _cleanup_closedir_ DIR *dir = NULL;
        _cleanup_close_ int fd = -1;

        fd = openat(rootfd, "bus/mdev/devices", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return;
        int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (dfd < 0)
                return;
        dir = fdopendir(dfd);
        if (!dir) {
                (void) close(dfd);
                return;
        }

        for (struct dirent *de; (de = readdir(dir));) {
                _cleanup_free_ char *target = NULL, *type = NULL;
                struct pci_addr parent;

                if (!is_uuid(de->d_name))
                        continue;
                if (readlink_at(fd, de->d_name, &target) < 0)
                        continue;
                /* A dangling link is an mdev removed while we scan. */
                if (faccessat(fd, de->d_name, F_OK, 0) < 0)
                        continue;

                (void) last_component(target);   /* strips trailing slashes */
                char *slash = strrchr(target, '/');
                if (!slash)
                        continue;
                *slash = 0;
                if (pci_addr_parse(last_component(target), &parent) < 0)
                        continue;

                _cleanup_free_ char *type_link = xasprintf("%s/mdev_type", de->d_name);
                (void) readlink_basename_at(fd, type_link, &type);

                struct hostmap_mdev *m = hostmap_add_mdev(h, de->d_name, &parent);
                m->type = TAKE_PTR(type);
        }
}

/* "node12" -> 12; anything else (has_cpu, online, power, ...) -> -1. */
static int parse_numbered(const char *name, const char *prefix) {
        size_t n = strlen(prefix);
        uint64_t v;

        if (strncmp(name, prefix, n) != 0 || !isdigit((unsigned char) name[n]))
                return -1;
        for (const char *p = name + n; *p; p++)
                if (!isdigit((unsigned char) *p))
                        return -1;
        if (parse_uint(name + n, 10, INT_MAX, &v) < 0)
                return -1;
        return (int) v;
}

static int cpu_package(int cpu_fd, unsigned cpu) {
        char path[64];
        uint64_t v;

        snprintf(path, sizeof(path), "cpu%u/topology/physical_package_id", cpu);
        if (read_uint_at(cpu_fd, path, INT_MAX, &v) < 0)
                return HOSTMAP_NO_SOCKET;
        return (int) v;
}

/* The package of the node's CPUs.  The first CPU that has a readable
 * physical_package_id decides: a node never spans packages. */
static int node_socket(int cpu_fd, const struct bitmap *cpus) {
        if (cpu_fd < 0)
                return HOSTMAP_NO_SOCKET;
        for (int c = bitmap_next(cpus, 0); c >= 0; c = bitmap_next(cpus, (unsigned) c + 1)) {
                int s = cpu_package(cpu_fd, (unsigned) c);
                if (s >= 0)
                        return s;
        }
        return HOSTMAP_NO_SOCKET;
}

/* A distance row: one number per node; a garbage token reads as -1 so the
 * rest of the row keeps its position. */
static void read_distance_row(struct hostmap *h, int node_fd, int id) {
        _cleanup_free_ char *text = NULL;
        int *values = NULL;
        size_t n = 0;
        char *save = NULL;

        if (read_text_at(node_fd, "distance", &text) < 0)
                return;
        for (char *t = strtok_r(text, " \t\n", &save); t; t = strtok_r(NULL, " \t\n", &save)) {
                int64_t v;
                *GROW(values, n) = parse_int(t, 10, 0, INT_MAX, &v) >= 0 ? (int) v : -1;
        }
        if (n > 0)
                hostmap_set_distances(h, id, values, n);
        free(values);
}

static int read_nodes(struct hostmap *h, int system_fd, int cpu_fd) {
        _cleanup_closedir_ DIR *dir = NULL;
        int fd;

        fd = openat(system_fd, "node", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        dir = fdopendir(fd);
        if (!dir) {
                int r = -errno;
                (void) close(fd);
                return r;
        }

        for (struct dirent *de; (de = readdir(dir));) {
                _cleanup_close_ int node_fd = -1;
                _cleanup_free_ char *cpulist = NULL;
                int id = parse_numbered(de->d_name, "node");
                if (id < 0)
                        continue;

                node_fd = openat(dirfd(dir), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (node_fd < 0)
                        continue;

                struct hostmap_node *n = hostmap_add_node(h, id);
                if (read_text_at(node_fd, "cpulist", &cpulist) >= 0 &&
                    bitmap_parse(cpulist, CPU_MAX, &n->cpus) < 0)
                        n->cpus = (struct bitmap) {0};
                n->socket = node_socket(cpu_fd, &n->cpus);

                read_distance_row(h, node_fd, id);
        }
        return 0;
}

/* No devices/system/node (a kernel without CONFIG_NUMA, or a capture
 * without it): one node 0 holding every CPU listed under
 * devices/system/cpu. */
static void synthesize_node(struct hostmap *h, int cpu_fd) {
        struct hostmap_node *n = hostmap_add_node(h, 0);

        h->single_node = true;
        if (cpu_fd < 0)
                return;

        int fd = fcntl(cpu_fd, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return;
        _cleanup_closedir_ DIR *dir = fdopendir(fd);
        if (!dir) {
                (void) close(fd);
                return;
        }
        for (struct dirent *de; (de = readdir(dir));) {
                int cpu = parse_numbered(de->d_name, "cpu");
                if (cpu >= 0 && cpu <= CPU_MAX)
                        bitmap_set(&n->cpus, (unsigned) cpu);
        }
        n->socket = cpu_package(cpu_fd, 0);
        if (n->socket < 0)
                n->socket = node_socket(cpu_fd, &n->cpus);
}

static int load(int rootfd, const char *label, struct hostmap **ret, char **ret_error) {
        _cleanup_hostmap_ struct hostmap *h = NULL;
        _cleanup_close_ int devices_fd = -1, system_fd = -1, cpu_fd = -1;
        int r;

        devices_fd = openat(rootfd, "bus/pci/devices", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int devices_err = devices_fd < 0 ? -errno : 0;
        system_fd = openat(rootfd, "devices/system", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

        if (devices_fd < 0 && system_fd < 0)
                return set_error(ret_error, devices_err == -ENOTDIR ? -ENOTDIR : -ENOENT,
                                 "sysfs root '%s': no bus/pci/devices and no devices/system directory",
                                 label);

        h = hostmap_new();

        if (devices_fd >= 0) {
                r = read_pci_devices(h, devices_fd);
                if (r < 0)
                        return set_error(ret_error, r, "sysfs root '%s': cannot list bus/pci/devices: %s",
                                         label, strerror(-r));
        }

        read_mdevs(h, rootfd);

        if (system_fd >= 0)
                cpu_fd = openat(system_fd, "cpu", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (system_fd < 0 || read_nodes(h, system_fd, cpu_fd) < 0 || h->n_nodes == 0)
                synthesize_node(h, cpu_fd);

        hostmap_finish(h);
        *ret = TAKE_PTR(h);
        return 0;
}

int hostmap_load(int rootfd, struct hostmap **ret, char **ret_error) {
        char proc[64];
        char path[PATH_MAX];

        /* Name the root in errors by the path it was opened with, when
         * /proc can tell; the fd number is the fallback. */
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", rootfd);
        ssize_t n = readlink(proc, path, sizeof(path) - 1);
        if (n > 0)
                path[n] = 0;
        else
                snprintf(path, sizeof(path), "fd %d", rootfd);

        return load(rootfd, path, ret, ret_error);
}

int hostmap_load_path(const char *root, struct hostmap **ret, char **ret_error) {
        _cleanup_close_ int fd = -1;

        fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) {
                int r = -errno;
                return set_error(ret_error, r, "sysfs root '%s': %s", root, strerror(-r));
        }
        return load(fd, root, ret, ret_error);
}

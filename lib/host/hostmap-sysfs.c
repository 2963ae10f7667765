/* The host map's sysfs reader: the only part of the host map that does
 * I/O, kept out of the pure core (lib/core/hostmap.c holds the structure
 * it fills in, and hostmap.h declares its functions).  Everything is read relative to one root directory fd with the *at()
 * calls, never through an absolute /sys path, so tests and bug reports can
 * point it at a fixture tree or a captured snapshot (as hwloc does with
 * HWLOC_FSROOT).  A file that is missing or holds garbage gives the
 * "unknown" value of its field; only an unusable root is an error.
 *
 * A captured tree comes from someone else (a bug report) and is read as
 * root, so it must not be able to reach outside itself: every path is
 * resolved beneath the directory it starts from (openat2() with
 * RESOLVE_BENEATH, or a component-by-component walk that does the same
 * where the kernel or a seccomp filter refuses openat2()), only regular
 * files are read, non-blocking and with a size cap, and node and CPU
 * numbers are bounded.  What is refused is named in a warning.
 *
 * hostmap_read_cpu_id() reads the one thing the host map holds that sysfs
 * does not: this machine's CPU identity (uname, /proc/cpuinfo). */
#include "hostmap.h"
#include "hostmap-sysfs.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <pthread.h>

#include "fileio.h"
#include "nccltopo.h"

#define IORESOURCE_IO     UINT64_C(0x00000100)
#define IORESOURCE_MEM    UINT64_C(0x00000200)
#define IORESOURCE_PREFETCH UINT64_C(0x00002000)
#define IORESOURCE_MEM_64 UINT64_C(0x00100000)

/* No sysfs attribute we read is anywhere near this; the cap only keeps a
 * bogus fixture (or a huge file in a capture) from eating memory. */
#define READ_MAX (1024 * 1024)

/* The largest CPU number we accept in a cpulist or a cpuN directory name:
 * the kernel's NR_CPUS tops out at 8192 today.  It bounds the per-node CPU
 * sets (1 KiB each) and the physical_package_id files one load may try. */
#define CPU_MAX 8191

/* Symbolic links followed in one path walk before giving up (the kernel's
 * own limit is 40). */
#define WALK_MAX_LINKS 40

DEFINE_TRIVIAL_CLEANUP_FUNC(DIR *, closedir)
#define _cleanup_closedir_ _cleanup_(closedirp)

/* How the reader opens things, shared (read-only) by the scan threads. */
struct reader {
        int rootfd;
        /* openat2() works here; false on kernels before 5.6, under a
         * seccomp filter that refuses it, or when PCINUMA_SYSFS_NO_OPENAT2
         * is set (tests, to cover the fallback). */
        bool openat2;
        /* bus, bus/pci and bus/pci/devices are directories, not links (as
         * on sysfs): "bus/pci/devices/../../../X" is then "X", which saves
         * the kernel six path components per device. */
        bool devices_plain;
};

static bool is_plain_dir(int dir_fd, const char *path) {
        struct stat st;
        return fstatat(dir_fd, path, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

static int openat2_beneath(int dir_fd, const char *path, int flags) {
        struct open_how how = {
                .flags = (uint64_t) (flags | O_CLOEXEC),
                .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
        };
        /* EAGAIN: a rename or mount raced with a ".." walk; the kernel asks
         * the caller to try again. */
        for (int tries = 0;; tries++) {
                long fd = syscall(SYS_openat2, dir_fd, path, &how, sizeof(how));
                if (fd >= 0)
                        return (int) fd;
                if ((errno == EAGAIN && tries < 8) || errno == EINTR)
                        continue;
                return -errno;
        }
}

/* Whether openat2() can be used: a probe of the root itself.  ENOSYS is an
 * old kernel; EPERM (or ENOSYS) a seccomp filter of a container runtime
 * that does not know the call; E2BIG/EINVAL a kernel that does not know
 * the struct or the flags. */
static bool probe_openat2(int rootfd) {
        const char *e = getenv("PCINUMA_SYSFS_NO_OPENAT2");
        if (e && *e && !streq(e, "0"))
                return false;
        int fd = openat2_beneath(rootfd, ".", O_PATH | O_DIRECTORY);
        if (fd < 0)
                return false;
        (void) close(fd);
        return true;
}

/* The fallback: what openat2(RESOLVE_BENEATH) does, one component at a
 * time.  Each component is opened with O_NOFOLLOW; a symbolic link is read
 * and its target spliced in front of the rest of the path, resolved from
 * the directory that holds the link, as the kernel would.  The walk counts
 * how deep below dir_fd it is: a ".." at depth 0, or an absolute target,
 * would leave dir_fd and is refused with EXDEV, as openat2() refuses it.
 * The directory fds along the way are always the physical path from
 * dir_fd, so ".." is the real parent, also after a link was followed.
 * (openat2() also closes the races of a tree being changed during the
 * walk; a captured tree is not being changed.) */
static int walk_beneath(int dir_fd, const char *path, int flags) {
        char rest[PATH_MAX + 1];
        unsigned links = 0;
        size_t depth = 0;
        int cur = dir_fd, r;

        if (strlen(path) >= sizeof(rest))
                return -ENAMETOOLONG;
        if (path[0] == '/')
                return -EXDEV;
        strcpy(rest, path);

        for (char *p = rest;;) {
                while (*p == '/')
                        p++;
                char *end = p + strcspn(p, "/");
                char *next = end;
                while (*next == '/')
                        next++;
                bool last = *next == 0;
                char saved = *end;
                *end = 0;

                if (*p == 0 || streq(p, ".") || streq(p, "..")) {
                        if (streq(p, "..")) {
                                if (depth == 0) {
                                        r = -EXDEV;
                                        break;
                                }
                                int fd = openat(cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
                                if (fd < 0) {
                                        r = -errno;
                                        break;
                                }
                                if (cur != dir_fd)
                                        (void) close(cur);
                                cur = fd;
                                depth--;
                        }
                        if (last) {
                                r = openat(cur, ".", flags | O_CLOEXEC);
                                r = r < 0 ? -errno : r;
                                break;
                        }
                        p = next;
                        continue;
                }

                int fd = openat(cur, p, (last ? flags : O_PATH | O_DIRECTORY) | O_NOFOLLOW | O_CLOEXEC);
                if (fd >= 0) {
                        if (last) {
                                r = fd;
                                break;
                        }
                        if (cur != dir_fd)
                                (void) close(cur);
                        cur = fd;
                        depth++;
                        p = next;
                        continue;
                }

                /* O_NOFOLLOW on a link: ELOOP, or ENOTDIR with O_DIRECTORY. */
                r = -errno;
                if (r != -ELOOP && r != -ENOTDIR)
                        break;
                char target[PATH_MAX + 1];
                ssize_t n = readlinkat(cur, p, target, sizeof(target));
                if (n < 0)
                        break;          /* not a link: r stands */
                if ((size_t) n >= sizeof(target)) {
                        r = -ENAMETOOLONG;
                        break;
                }
                target[n] = 0;
                if (++links > WALK_MAX_LINKS) {
                        r = -ELOOP;
                        break;
                }
                if (target[0] == '/') {
                        r = -EXDEV;
                        break;
                }
                /* rest becomes target + "/" + what followed the link. */
                *end = saved;
                size_t tail = strlen(next);
                if ((size_t) n + 1 + tail >= sizeof(rest)) {
                        r = -ENAMETOOLONG;
                        break;
                }
                memmove(rest + n + 1, next, tail + 1);
                memcpy(rest, target, (size_t) n);
                rest[n] = tail ? '/' : 0;
                p = rest;
        }
        if (cur != dir_fd)
                (void) close(cur);
        return r;
}

/* Open path below dir_fd (which must itself be below the root): never
 * outside it, whatever links the tree holds. */
static int open_beneath(const struct reader *rd, int dir_fd, const char *path, int flags) {
        if (rd->openat2) {
                int fd = openat2_beneath(dir_fd, path, flags);
                /* A seccomp filter may let the probe through and refuse
                 * later calls with other arguments: walk instead. */
                if (fd != -ENOSYS && fd != -EPERM)
                        return fd;
        }
        return walk_beneath(dir_fd, path, flags);
}

/* Open a file to read: a regular file only.  O_NONBLOCK, so that a FIFO
 * (which is then refused) cannot make the open wait for a writer; O_NOCTTY
 * for a terminal device.  Returns the fd or a negative errno; besides the
 * open's own, EXDEV (a link leads outside), EISDIR, ESPIPE (a FIFO),
 * ENODEV (a device node), ENXIO (a socket) and EFBIG (over READ_MAX). */
static int open_file(const struct reader *rd, int dir_fd, const char *path) {
        _cleanup_close_ int fd = -1;
        struct stat st;

        fd = open_beneath(rd, dir_fd, path, O_RDONLY | O_NONBLOCK | O_NOCTTY);
        if (fd < 0)
                return fd;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (S_ISDIR(st.st_mode))
                return -EISDIR;
        if (S_ISFIFO(st.st_mode))
                return -ESPIPE;
        if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
                return -ENODEV;
        if (!S_ISREG(st.st_mode))
                return -ENXIO;
        if (st.st_size > READ_MAX)
                return -EFBIG;
        return TAKE_FD(fd);
}

/* Why a file was not read, for a warning (a directory keeps strerror()'s
 * "Is a directory", as before these checks). */
static const char *open_error_text(int r) {
        switch (r) {
        case -EXDEV:
                return "a symbolic link leads outside the sysfs root (not followed)";
        case -ESPIPE:
                return "a FIFO, not a regular file";
        case -ENODEV:
                return "a device node, not a regular file";
        case -ENXIO:
                return "a socket, not a regular file";
        case -EFBIG:
                return "over 1 MiB, too large for a sysfs attribute";
        case -ELOOP:
                return "too many levels of symbolic links";
        default:
                return strerror(-r);
        }
}

/* Read a whole file below dir_fd into a new string, with trailing white
 * space removed; for the node files, whose size grows with the host (a
 * distance row of 1,024 nodes).  Up to READ_MAX - 2 bytes, as when this
 * filled a READ_MAX buffer itself (with its NUL, and a byte to see the
 * end by). */
static int read_text_at(const struct reader *rd, int dir_fd, const char *path, char **ret) {
        _cleanup_close_ int fd = -1;
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;

        fd = open_file(rd, dir_fd, path);
        if (fd < 0)
                return fd;
        int r = read_full_fd(fd, READ_MAX - 2, &buf, &len);
        if (r < 0)
                return r;
        while (len > 0 && isspace((unsigned char) buf[len - 1]))
                buf[--len] = 0;
        *ret = TAKE_PTR(buf);
        return 0;
}

/* The last path component, ignoring trailing slashes ("a/b/" -> "b"). */
static const char *last_component(char *path) {
        size_t len = strlen(path);
        while (len > 1 && path[len - 1] == '/')
                path[--len] = 0;
        const char *slash = strrchr(path, '/');
        return slash ? slash + 1 : path;
}

/* Read a small attribute into buf with one read(), trailing white space
 * removed: a sysfs attribute comes from one show() call, and one read()
 * returns all of it.  No allocation, since a big host reads thousands of
 * these.  Returns the length or a negative errno. */
static ssize_t read_attr_at(const struct reader *rd, int dir_fd, const char *path, char *buf, size_t size) {
        _cleanup_close_ int fd = -1;
        ssize_t n;

        fd = open_file(rd, dir_fd, path);
        if (fd < 0)
                return fd;
        do
                n = read(fd, buf, size - 1);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return -errno;

        size_t len = (size_t) n;
        buf[len] = 0;
        while (len > 0 && isspace((unsigned char) buf[len - 1]))
                buf[--len] = 0;
        return (ssize_t) len;
}

/* readlinkat() into buf (NUL-terminated); the basename of the target. */
static const char *readlink_base_buf(int dir_fd, const char *path, char *buf, size_t size) {
        ssize_t n = readlinkat(dir_fd, path, buf, size - 1);
        if (n <= 0 || (size_t) n >= size - 1)
                return NULL;
        buf[n] = 0;
        const char *base = last_component(buf);
        return *base ? base : NULL;
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

static int read_uint_at(const struct reader *rd, int dir_fd, const char *path, uint64_t max, uint64_t *ret) {
        _cleanup_free_ char *s = NULL;
        int r = read_text_at(rd, dir_fd, path, &s);
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

/* One hex number ("0x..." or bare), skipping leading blanks; advances *p.
 * Hand-rolled because sscanf() showed up in profiles of large hosts. */
static bool parse_hex_field(const char **p, uint64_t *ret) {
        const char *s = *p;
        uint64_t v = 0;
        unsigned digits = 0;

        while (*s == ' ' || *s == '\t')
                s++;
        if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
                s += 2;
        for (;; s++, digits++) {
                unsigned d;
                if (*s >= '0' && *s <= '9')
                        d = (unsigned) (*s - '0');
                else if (*s >= 'a' && *s <= 'f')
                        d = (unsigned) (*s - 'a' + 10);
                else if (*s >= 'A' && *s <= 'F')
                        d = (unsigned) (*s - 'A' + 10);
                else
                        break;
                if (digits >= 16)
                        return false;
                v = v << 4 | d;
        }
        if (digits == 0)
                return false;
        *p = s;
        *ret = v;
        return true;
}

/* The first six lines of 'resource' are the standard BARs, each
 * "start end flags" in hex; an unused BAR reads as all zeroes. */
/* Returns 0, or the number (from 1) of the first of those lines that is
 * not three hex fields. */
static int parse_resource(struct hostmap_device *d, const char *text) {
        const char *p = text;
        int bad = 0;

        for (unsigned i = 0; i < HOSTMAP_N_BARS && p && *p; i++) {
                uint64_t start, end, flags;
                const char *q = p;
                const char *nl = strchr(p, '\n');

                if (!(parse_hex_field(&q, &start) && parse_hex_field(&q, &end) && parse_hex_field(&q, &flags))) {
                        if (bad == 0)
                                bad = (int) i + 1;
                } else if (end != 0 && end >= start) {
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
        return bad;
}

/* A short printable excerpt of a bad value for a warning: the first
 * line, at most 40 bytes, other bytes as \xNN. */
static void excerpt(const char *s, char *out, size_t size) {
        size_t o = 0;
        for (size_t i = 0; s[i] && s[i] != '\n' && i < 40 && o + 5 < size; i++) {
                unsigned char c = (unsigned char) s[i];
                if (c >= 0x20 && c < 0x7f && c != '\'')
                        out[o++] = (char) c;
                else
                        o += (size_t) snprintf(out + o, size - o, "\\x%02x", c);
        }
        out[o] = 0;
        if (s[0] && o == 0)
                snprintf(out, size, "%s", "(unprintable)");
}

static void warn_garbage(struct hostmap *h, const char *bdf, const char *attr, const char *value, const char *what) {
        char ex[200];
        excerpt(value, ex, sizeof(ex));
        hostmap_warn(h, "bus/pci/devices/%s/%s: '%s' %s; read as unknown", bdf, attr, ex, what);
}

/* A missing attribute is normal (not every kernel or device has each one);
 * anything else that stops the read is worth saying. */
static void warn_unreadable(struct hostmap *h, const char *bdf, const char *attr, int r) {
        if (r != -ENOENT)
                hostmap_warn(h, "bus/pci/devices/%s/%s: cannot read: %s; read as unknown", bdf, attr,
                             open_error_text(r));
}

/* class, vendor, device files: a hex number ("0x030200"). */
static bool device_attr_uint(const struct reader *rd, struct hostmap *h, int fd, const char *bdf, const char *attr,
                             uint64_t max, uint64_t *ret) {
        char buf[64];
        ssize_t n = read_attr_at(rd, fd, attr, buf, sizeof(buf));
        if (n < 0) {
                warn_unreadable(h, bdf, attr, (int) n);
                return false;
        }
        if (parse_uint(buf, 0, max, ret) < 0) {
                warn_garbage(h, bdf, attr, buf, max == 0xffff ? "is not a 16-bit ID" : "is not a PCI class code");
                return false;
        }
        return true;
}

/* The keys of a PCI device's uevent that the host map uses; NULL when
 * absent.  The values point into the buffer the file was read into. */
struct uevent {
        const char *driver;       /* DRIVER=megaraid_sas: only while a driver is bound */
        const char *pci_class;    /* PCI_CLASS=10400: "%04X", so 4 to 6 digits */
        const char *pci_id;       /* PCI_ID=1000:0079: "%04X:%04X" */
        bool pci;                 /* any PCI_* key: the kernel's PCI uevent */
};

/* Split uevent text ("KEY=value" lines) in place.  The kernel never
 * repeats a key; if a file does, the first one counts.  A NUL byte ends
 * the value it is in. */
static void parse_uevent(char *text, size_t len, struct uevent *ret) {
        struct uevent u = {0};

        for (char *line = text, *end = text + len; line < end;) {
                char *nl = memchr(line, '\n', (size_t) (end - line));
                if (nl)
                        *nl = 0;
                char *eq = strchr(line, '=');
                if (eq) {
                        *eq = 0;
                        const char *v = eq + 1;
                        if (streq(line, "DRIVER")) {
                                if (!u.driver)
                                        u.driver = v;
                        } else if (strncmp(line, "PCI_", 4) == 0) {
                                u.pci = true;
                                if (streq(line, "PCI_CLASS") && !u.pci_class)
                                        u.pci_class = v;
                                else if (streq(line, "PCI_ID") && !u.pci_id)
                                        u.pci_id = v;
                        }
                }
                if (!nl)
                        break;
                line = nl + 1;
        }
        *ret = u;
}

/* 1 to max_digits hex digits and nothing else (no "0x", no blanks): the
 * kernel prints these values with "%04X". */
static bool parse_hex_exact(const char *s, size_t len, unsigned max_digits, uint32_t *ret) {
        uint32_t v = 0;

        if (len == 0 || len > max_digits)
                return false;
        for (size_t i = 0; i < len; i++) {
                char c = s[i];
                unsigned d;
                if (c >= '0' && c <= '9')
                        d = (unsigned) (c - '0');
                else if (c >= 'a' && c <= 'f')
                        d = (unsigned) (c - 'a' + 10);
                else if (c >= 'A' && c <= 'F')
                        d = (unsigned) (c - 'A' + 10);
                else
                        return false;
                v = v << 4 | d;
        }
        *ret = v;
        return true;
}

/* A driver name as the kernel registers it: printable, no '/' or blanks. */
static void warn_uevent_garbage(struct hostmap *h, const char *bdf, const char *key, const char *value,
                                const char *what) {
        char ex[200];
        excerpt(value, ex, sizeof(ex));
        hostmap_warn(h, "bus/pci/devices/%s/uevent: %s '%s' %s; read as unknown", bdf, key, ex, what);
}

/* class, vendor, device and driver from the uevent when it has them (one
 * file instead of three files and a link); each key it lacks falls back to
 * its own file or link (a missing uevent, as in some captures, lacks them
 * all).  A key that is present but holds garbage is a warning and its
 * field stays unknown, as for garbage in the attribute files: it is not
 * looked up elsewhere, since on a real kernel both come from the same
 * value (PCI_ID is one key: garbage there leaves vendor and device
 * unknown).  DRIVER is written only while a driver is bound, so its absence
 * from a kernel PCI uevent (one with PCI_* keys) means "no driver". */
static void read_ids(const struct reader *rd, struct hostmap *h, struct hostmap_device *d, int fd, const char *name,
                     char *text, ssize_t text_len) {
        struct uevent u = {0};
        uint64_t v;

        if (text_len >= 0)
                parse_uevent(text, (size_t) text_len, &u);

        if (u.pci_class) {
                uint32_t c;
                if (parse_hex_exact(u.pci_class, strlen(u.pci_class), 6, &c))
                        d->class = c;
                else
                        warn_uevent_garbage(h, name, "PCI_CLASS", u.pci_class, "is not a PCI class code");
        } else if (device_attr_uint(rd, h, fd, name, "class", 0xffffff, &v))
                d->class = (uint32_t) v;

        if (u.pci_id) {
                const char *colon = strchr(u.pci_id, ':');
                uint32_t vendor, device;
                if (colon && parse_hex_exact(u.pci_id, (size_t) (colon - u.pci_id), 4, &vendor) &&
                    parse_hex_exact(colon + 1, strlen(colon + 1), 4, &device)) {
                        d->vendor = (uint16_t) vendor;
                        d->device = (uint16_t) device;
                } else
                        warn_uevent_garbage(h, name, "PCI_ID", u.pci_id, "is not a vendor:device ID pair");
        } else {
                if (device_attr_uint(rd, h, fd, name, "vendor", 0xffff, &v))
                        d->vendor = (uint16_t) v;
                if (device_attr_uint(rd, h, fd, name, "device", 0xffff, &v))
                        d->device = (uint16_t) v;
        }

        if (u.driver) {
                if (hostmap_driver_name_ok(u.driver))
                        d->driver = xstrdup(u.driver);
                else
                        warn_uevent_garbage(h, name, "DRIVER", u.driver, "is not a driver name");
        } else if (!u.pci) {
                char buf[PATH_MAX];
                const char *base = readlink_base_buf(fd, "driver", buf, sizeof(buf));
                if (base && hostmap_driver_name_ok(base))
                        d->driver = xstrdup(base);
                else if (base) {
                        char ex[200];
                        excerpt(base, ex, sizeof(ex));
                        hostmap_warn(h, "bus/pci/devices/%s/driver: '%s' is not a driver name; read as none", name, ex);
                }
        }
}

static void read_device(const struct reader *rd, struct hostmap *h, int devices_fd, const char *name,
                        const struct pci_addr *addr) {
        _cleanup_free_ char *target = NULL;
        _cleanup_close_ int fd = -1;
        char buf[4096];
        const char *base;
        uint64_t v;
        int r;

        r = readlink_at(devices_fd, name, &target);
        if (r == -ENOENT)
                return;       /* removed while we were scanning */

        /* The device's directory: a dangling link (the device went away)
         * or a stray file fails O_DIRECTORY and is skipped.  O_PATH: the fd
         * is only a base for the *at() calls, and is cheaper to open.  A
         * relative link is not resolved a second time: its target, just
         * read, is walked from bus/pci/devices as the kernel would walk it
         * (on sysfs, resolving a link makes kernfs build the target text
         * anew).
         *
         * Opening each attribute by its path from bus/pci/devices instead
         * would save this open and its close (2 of the 14 system calls per
         * device), but each of the other calls would then walk the whole
         * path.  Measured, that is slower on a real sysfs (kernel 6.18, 1
         * CPU: 0.222 against 0.200 ms per scan of a 6-device host) and no
         * faster in the hostmap benchmark (2,000 devices on ext4: 39.6
         * against 39.8 ms, within its noise), so the fd stays.
         *
         * The walk starts at the root ("bus/pci/devices/" + target), so
         * that the target's ".." may climb to the root but not above it;
         * an absolute target always leads outside a captured tree.  Each
         * attribute is then opened below this directory. */
        if (target && target[0] == '/') {
                char ex[200];
                excerpt(target, ex, sizeof(ex));
                hostmap_warn(h, "bus/pci/devices/%s: a symbolic link to '%s', outside the sysfs root; "
                             "not followed, device skipped", name, ex);
                return;
        }
        _cleanup_free_ char *path = NULL;
        if (target && rd->devices_plain && strncmp(target, "../../../", 9) == 0)
                path = xstrdup(target + 9);
        else
                path = xasprintf("bus/pci/devices/%s", target ? target : name);
        fd = open_beneath(rd, rd->rootfd, path, O_PATH | O_DIRECTORY);
        if (fd < 0) {
                if (fd != -ENOENT && fd != -ENOTDIR)
                        hostmap_warn(h, "bus/pci/devices/%s: cannot open: %s; device skipped", name,
                                     open_error_text(fd));
                return;
        }

        struct hostmap_device *d = hostmap_add_device(h, addr);

        /* One read of uevent gives class, vendor, device and driver (see
         * read_ids()); buf is free again once read_ids() returns. */
        ssize_t un = read_attr_at(rd, fd, "uevent", buf, sizeof(buf));
        if (un < 0 && un != -ENOENT)
                hostmap_warn(h, "bus/pci/devices/%s/uevent: cannot read: %s; reading the class, vendor and device "
                             "files and the driver link instead", name, open_error_text((int) un));
        read_ids(rd, h, d, fd, name, buf, un);

        r = (int) read_attr_at(rd, fd, "numa_node", buf, sizeof(buf));
        if (r >= 0) {
                int64_t node;
                /* As the domain parser: node ids are 0 to 1023. */
                if (parse_int(buf, 10, -1, HOSTMAP_NODE_MAX, &node) >= 0)
                        d->sysfs_node = (int) node;
                else
                        warn_garbage(h, name, "numa_node", buf, "is not a node number (-1 to " HOSTMAP_NODE_MAX_STR ")");
        } else
                warn_unreadable(h, name, "numa_node", r);

        /* Only the first six lines matter, and they fit in buf. */
        r = (int) read_attr_at(rd, fd, "resource", buf, sizeof(buf));
        if (r >= 0) {
                int bad = parse_resource(d, buf);
                if (bad > 0)
                        hostmap_warn(h, "bus/pci/devices/%s/resource: line %d is not 'start end flags' in hex; "
                                     "its BAR is read as absent", name, bad);
        } else
                warn_unreadable(h, name, "resource", r);

        base = readlink_base_buf(fd, "iommu_group", buf, sizeof(buf));
        if (base && parse_uint(base, 10, INT_MAX, &v) >= 0)
                d->iommu_group = (int) v;

        /* A PF's virtfnN links are not read: every VF names its PF through
         * physfn, so load() counts them after the scan, which saves a
         * failed readlinkat() on each of the many devices that are not
         * PFs. */
        base = readlink_base_buf(fd, "physfn", buf, sizeof(buf));
        if (base && pci_addr_parse(base, &d->physfn) >= 0)
                d->has_physfn = true;

        if (target)
                parse_upstream(d, target);
}

struct pci_entry {
        struct pci_addr addr;
        char name[PCI_ADDR_STRLEN];
};

/* One slice of bus/pci/devices, read into a private map so that slices
 * can run in parallel without sharing anything. */
struct scan_job {
        const struct reader *rd;
        int devices_fd;
        const struct pci_entry *entries;
        size_t n;
        struct hostmap *out;
};

static void *scan_job_run(void *userdata) {
        struct scan_job *j = userdata;
        for (size_t i = 0; i < j->n; i++)
                read_device(j->rd, j->out, j->devices_fd, j->entries[i].name, &j->entries[i].addr);
        return NULL;
}

/* Below this many devices one thread is fast enough; above it the scan is
 * bound by per-file syscalls (path walks) that scale across CPUs, and a
 * 2,000-device host must load in well under 50 ms. */
#define PARALLEL_MIN_DEVICES 256
#define PARALLEL_MAX_THREADS 4

static size_t scan_threads(size_t n_entries) {
        if (n_entries < PARALLEL_MIN_DEVICES)
                return 1;
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        if (cpus < 2)
                return 1;
        return cpus > PARALLEL_MAX_THREADS ? PARALLEL_MAX_THREADS : (size_t) cpus;
}

static void scan_parallel(const struct reader *rd, struct hostmap *h, int devices_fd, const struct pci_entry *entries,
                          size_t n) {
        size_t t = scan_threads(n);
        struct scan_job jobs[PARALLEL_MAX_THREADS];
        pthread_t threads[PARALLEL_MAX_THREADS];
        bool started[PARALLEL_MAX_THREADS] = {0};

        for (size_t k = 0; k < t; k++) {
                size_t from = n * k / t, to = n * (k + 1) / t;
                jobs[k] = (struct scan_job) {
                        .rd = rd,
                        .devices_fd = devices_fd,
                        .entries = entries + from,
                        .n = to - from,
                        .out = k == 0 ? h : hostmap_new(),
                };
        }
        /* The calling thread takes slice 0; a slice whose thread cannot be
         * started is read here too, so the result never depends on it. */
        for (size_t k = 1; k < t; k++)
                started[k] = pthread_create(&threads[k], NULL, scan_job_run, &jobs[k]) == 0;
        (void) scan_job_run(&jobs[0]);
        for (size_t k = 1; k < t; k++) {
                if (started[k])
                        (void) pthread_join(threads[k], NULL);
                else
                        (void) scan_job_run(&jobs[k]);

                /* Move the devices over; their strings move with them. */
                struct hostmap *o = jobs[k].out;
                for (size_t i = 0; i < o->n_devices; i++)
                        *GROW(h->devices, h->n_devices) = o->devices[i];
                o->n_devices = 0;
                hostmap_take_warnings(h, o);
                hostmap_free(o);
        }
}

/* fdopendir(fd), or NULL with errno set and fd closed: the directory owns
 * fd either way. */
static DIR *fdopendir_or_close(int fd) {
        DIR *dir = fdopendir(fd);
        if (!dir) {
                int e = errno;
                (void) close(fd);
                errno = e;
        }
        return dir;
}

static int read_pci_devices(const struct reader *rd, struct hostmap *h, int devices_fd) {
        _cleanup_closedir_ DIR *dir = NULL;
        _cleanup_free_ struct pci_entry *entries = NULL;
        size_t n = 0;
        int fd;

        fd = openat(devices_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        dir = fdopendir_or_close(fd);
        if (!dir)
                return -errno;

        for (struct dirent *de; (de = readdir(dir));) {
                struct pci_addr a;
                if (de->d_name[0] == '.' || strlen(de->d_name) >= PCI_ADDR_STRLEN)
                        continue;
                if (pci_addr_parse(de->d_name, &a) < 0)
                        continue;
                struct pci_entry *e = GROW(entries, n);
                e->addr = a;
                memcpy(e->name, de->d_name, strlen(de->d_name) + 1);
        }

        if (n > 0)
                scan_parallel(rd, h, devices_fd, entries, n);
        return 0;
}

/* bus/mdev/devices/<uuid> -> ../../../devices/pci0000:00/0000:00:02.0/<uuid>:
 * the parent is the component before the uuid. */
static void read_mdevs(const struct reader *rd, struct hostmap *h) {
        _cleanup_closedir_ DIR *dir = NULL;
        _cleanup_close_ int fd = -1;

        fd = open_beneath(rd, rd->rootfd, "bus/mdev/devices", O_RDONLY | O_DIRECTORY);
        if (fd < 0) {
                if (fd != -ENOENT && fd != -ENOTDIR)
                        hostmap_warn(h, "bus/mdev/devices: cannot open: %s; no mdevs read", open_error_text(fd));
                return;
        }
        int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (dfd < 0)
                return;
        dir = fdopendir_or_close(dfd);
        if (!dir)
                return;

        for (struct dirent *de; (de = readdir(dir));) {
                _cleanup_free_ char *target = NULL, *type = NULL;
                struct pci_addr parent;

                if (!uuid_is_valid(de->d_name))
                        continue;
                if (readlink_at(fd, de->d_name, &target) < 0)
                        continue;
                /* A dangling link is an mdev removed while we scan.  The
                 * target is looked at beneath the root only. */
                if (target[0] == '/') {
                        char ex[200];
                        excerpt(target, ex, sizeof(ex));
                        hostmap_warn(h, "bus/mdev/devices/%s: a symbolic link to '%s', outside the sysfs root; "
                                     "not followed, mdev skipped", de->d_name, ex);
                        continue;
                }
                _cleanup_free_ char *path = xasprintf("bus/mdev/devices/%s", target);
                _cleanup_close_ int mfd = open_beneath(rd, rd->rootfd, path, O_PATH | O_DIRECTORY);
                if (mfd < 0) {
                        if (mfd != -ENOENT && mfd != -ENOTDIR)
                                hostmap_warn(h, "bus/mdev/devices/%s: cannot open: %s; mdev skipped", de->d_name,
                                             open_error_text(mfd));
                        continue;
                }

                (void) last_component(target);   /* strips trailing slashes */
                char *slash = strrchr(target, '/');
                if (!slash)
                        continue;
                *slash = 0;
                if (pci_addr_parse(last_component(target), &parent) < 0)
                        continue;

                /* From the directory just opened, not through the link
                 * again. */
                (void) readlink_basename_at(mfd, "mdev_type", &type);

                struct hostmap_mdev *m = hostmap_add_mdev(h, de->d_name, &parent);
                m->type = TAKE_PTR(type);
        }
}

/* "node12" -> 12; anything else (has_cpu, online, power, ...) -> -1;
 * a number above max -> -2. */
static int parse_numbered(const char *name, const char *prefix, unsigned max) {
        size_t n = strlen(prefix);
        uint64_t v;

        if (strncmp(name, prefix, n) != 0 || !isdigit((unsigned char) name[n]))
                return -1;
        for (const char *p = name + n; *p; p++)
                if (!isdigit((unsigned char) *p))
                        return -1;
        if (parse_uint(name + n, 10, max, &v) < 0)
                return -2;
        return (int) v;
}

/* The CPUs' packages, each physical_package_id read at most once per load:
 * a tree may list every CPU on every node, and a node's CPUs are tried in
 * turn until one has a readable package. */
struct cpu_packages {
        int fd;                         /* devices/system/cpu, or -1 */
        int *package;                   /* [CPU_MAX + 1]; -2 = not read yet */
};

static int cpu_package(const struct reader *rd, struct hostmap *h, struct cpu_packages *cp, unsigned cpu) {
        char path[64];
        uint64_t v;
        int r;

        if (cp->fd < 0 || cpu > CPU_MAX)
                return HOSTMAP_NO_SOCKET;
        if (!cp->package) {
                cp->package = xreallocarray(NULL, CPU_MAX + 1, sizeof(int));
                for (size_t i = 0; i <= CPU_MAX; i++)
                        cp->package[i] = -2;
        }
        if (cp->package[cpu] != -2)
                return cp->package[cpu];
        snprintf(path, sizeof(path), "cpu%u/topology/physical_package_id", cpu);
        r = read_uint_at(rd, cp->fd, path, INT_MAX, &v);
        /* Missing or garbage: the next CPU may tell.  Refused (a link
         * outside the root, a FIFO...): say so. */
        if (r < 0 && r != -ENOENT && r != -EINVAL && r != -ERANGE)
                hostmap_warn(h, "devices/system/cpu/%s: cannot read: %s; read as unknown", path, open_error_text(r));
        cp->package[cpu] = r < 0 ? HOSTMAP_NO_SOCKET : (int) v;
        return cp->package[cpu];
}

/* The package of the node's CPUs.  The first CPU that has a readable
 * physical_package_id decides: a node never spans packages. */
static int node_socket(const struct reader *rd, struct hostmap *h, struct cpu_packages *cp, const struct bitmap *cpus) {
        if (cp->fd < 0)
                return HOSTMAP_NO_SOCKET;
        for (int c = bitmap_next(cpus, 0); c >= 0; c = bitmap_next(cpus, (unsigned) c + 1)) {
                int s = cpu_package(rd, h, cp, (unsigned) c);
                if (s >= 0)
                        return s;
        }
        return HOSTMAP_NO_SOCKET;
}

/* A distance row: one number per node; a garbage token reads as -1 so the
 * rest of the row keeps its position.  At most HOSTMAP_NODE_MAX + 1
 * entries, one per possible node. */
static void read_distance_row(const struct reader *rd, struct hostmap *h, int node_fd, int id) {
        _cleanup_free_ char *text = NULL;
        int *values = NULL;
        size_t n = 0;
        char *save = NULL;

        int r = read_text_at(rd, node_fd, "distance", &text);
        if (r < 0) {
                if (r != -ENOENT)
                        hostmap_warn(h, "devices/system/node/node%d/distance: cannot read: %s; distances from node %d are unknown",
                                     id, open_error_text(r), id);
                return;
        }
        bool warned = false;
        for (char *t = strtok_r(text, " \t\n", &save); t; t = strtok_r(NULL, " \t\n", &save)) {
                int64_t v;
                if (n > HOSTMAP_NODE_MAX) {
                        hostmap_warn(h, "devices/system/node/node%d/distance: more than %d entries (one per node); "
                                     "the rest is ignored", id, HOSTMAP_NODE_MAX + 1);
                        break;
                }
                if (parse_int(t, 10, 0, INT_MAX, &v) >= 0)
                        *GROW(values, n) = (int) v;
                else {
                        *GROW(values, n) = -1;
                        if (!warned) {
                                char ex[200];
                                excerpt(t, ex, sizeof(ex));
                                hostmap_warn(h, "devices/system/node/node%d/distance: '%s' (entry %zu) is not a distance; "
                                             "read as unknown", id, ex, n);
                                warned = true;
                        }
                }
        }
        if (n > 0)
                hostmap_set_distances(h, id, values, n);
        else
                hostmap_warn(h, "devices/system/node/node%d/distance: empty; distances from node %d are unknown", id, id);
        free(values);
}

static int read_nodes(const struct reader *rd, struct hostmap *h, struct cpu_packages *cp) {
        _cleanup_closedir_ DIR *dir = NULL;
        int fd;

        fd = open_beneath(rd, rd->rootfd, "devices/system/node", O_RDONLY | O_DIRECTORY);
        if (fd < 0) {
                if (fd != -ENOENT && fd != -ENOTDIR)
                        hostmap_warn(h, "devices/system/node: cannot open: %s; one node is assumed",
                                     open_error_text(fd));
                return fd;
        }
        dir = fdopendir_or_close(fd);
        if (!dir)
                return -errno;

        for (struct dirent *de; (de = readdir(dir));) {
                int r;
                _cleanup_close_ int node_fd = -1;
                _cleanup_free_ char *cpulist = NULL;
                int id = parse_numbered(de->d_name, "node", HOSTMAP_NODE_MAX);
                if (id == -2) {
                        hostmap_warn(h, "devices/system/node/%s: node number above %d; ignored", de->d_name,
                                     HOSTMAP_NODE_MAX);
                        continue;
                }
                if (id < 0)
                        continue;

                /* From the root, so a node directory may be a link
                 * anywhere in the tree, but not outside it. */
                _cleanup_free_ char *path = xasprintf("devices/system/node/%s", de->d_name);
                node_fd = open_beneath(rd, rd->rootfd, path, O_PATH | O_DIRECTORY);
                if (node_fd < 0) {
                        if (node_fd != -ENOENT && node_fd != -ENOTDIR)
                                hostmap_warn(h, "%s: cannot open: %s; node ignored", path, open_error_text(node_fd));
                        continue;
                }

                struct hostmap_node *n = hostmap_add_node(h, id);
                r = read_text_at(rd, node_fd, "cpulist", &cpulist);
                if (r >= 0 && bitmap_parse(cpulist, CPU_MAX, &n->cpus) < 0) {
                        char ex[200];
                        excerpt(cpulist, ex, sizeof(ex));
                        hostmap_warn(h, "devices/system/node/node%d/cpulist: '%s' is not a CPU list (CPUs 0 to %d); "
                                     "the node is read as having no CPUs", id, ex, CPU_MAX);
                        n->cpus = (struct bitmap) {0};
                } else if (r < 0 && r != -ENOENT)
                        hostmap_warn(h, "devices/system/node/node%d/cpulist: cannot read: %s; "
                                     "the node is read as having no CPUs", id, open_error_text(r));
                n->socket = node_socket(rd, h, cp, &n->cpus);

                read_distance_row(rd, h, node_fd, id);
        }
        return 0;
}

/* No devices/system/node (a kernel without CONFIG_NUMA, or a capture
 * without it): one node 0 holding every CPU listed under
 * devices/system/cpu. */
static void synthesize_node(const struct reader *rd, struct hostmap *h, struct cpu_packages *cp) {
        struct hostmap_node *n = hostmap_add_node(h, 0);

        h->single_node = true;
        if (cp->fd < 0)
                return;

        int fd = open_beneath(rd, cp->fd, ".", O_RDONLY | O_DIRECTORY);
        if (fd < 0)
                return;
        _cleanup_closedir_ DIR *dir = fdopendir_or_close(fd);
        if (!dir)
                return;
        for (struct dirent *de; (de = readdir(dir));) {
                int cpu = parse_numbered(de->d_name, "cpu", CPU_MAX);
                if (cpu >= 0)
                        bitmap_set(&n->cpus, (unsigned) cpu);
        }
        n->socket = cpu_package(rd, h, cp, 0);
        if (n->socket < 0)
                n->socket = node_socket(rd, h, cp, &n->cpus);
}

static int load(int rootfd, const char *label, struct hostmap **ret, char **ret_error) {
        _cleanup_hostmap_ struct hostmap *h = NULL;
        _cleanup_close_ int devices_fd = -1, system_fd = -1, cpu_fd = -1;
        struct reader rd = {
                .rootfd = rootfd,
                .openat2 = probe_openat2(rootfd),
                .devices_plain = is_plain_dir(rootfd, "bus") && is_plain_dir(rootfd, "bus/pci") &&
                                 is_plain_dir(rootfd, "bus/pci/devices"),
        };
        int r;

        devices_fd = open_beneath(&rd, rootfd, "bus/pci/devices", O_RDONLY | O_DIRECTORY);
        int devices_err = devices_fd < 0 ? devices_fd : 0;
        system_fd = open_beneath(&rd, rootfd, "devices/system", O_PATH | O_DIRECTORY);

        if (devices_fd < 0 && system_fd < 0) {
                if (devices_err == -EXDEV)
                        return set_error(ret_error, -EXDEV, "sysfs root '%s': bus/pci/devices: %s", label,
                                         open_error_text(devices_err));
                return set_error(ret_error, devices_err == -ENOTDIR ? -ENOTDIR : -ENOENT,
                                 "sysfs root '%s': no bus/pci/devices and no devices/system directory",
                                 label);
        }

        h = hostmap_new();

        if (devices_fd >= 0) {
                r = read_pci_devices(&rd, h, devices_fd);
                if (r < 0)
                        return set_error(ret_error, r, "sysfs root '%s': cannot list bus/pci/devices: %s",
                                         label, strerror(-r));
        } else if (devices_err != -ENOENT && devices_err != -ENOTDIR)
                hostmap_warn(h, "bus/pci/devices: cannot open: %s; no PCI devices read", open_error_text(devices_err));

        read_mdevs(&rd, h);

        if (system_fd >= 0)
                cpu_fd = open_beneath(&rd, rootfd, "devices/system/cpu", O_RDONLY | O_DIRECTORY);
        struct cpu_packages cp = { .fd = cpu_fd };
        if (system_fd < 0 || read_nodes(&rd, h, &cp) < 0 || h->n_nodes == 0)
                synthesize_node(&rd, h, &cp);
        free(cp.package);

        hostmap_finish(h);

        for (size_t i = 0; i < h->n_devices; i++) {
                const struct hostmap_device *pf;
                if (!h->devices[i].has_physfn)
                        continue;
                pf = hostmap_find_device(h, &h->devices[i].physfn);
                if (pf && !pf->has_physfn)
                        h->devices[pf - h->devices].n_vfs++;
        }

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

/* "2.5 GT/s", "16.0 GT/s PCIe": the forms the kernel writes (the suffix
 * since 5.7); NCCL reads both. */
static bool link_speed_ok(const char *s) {
        size_t i = 0, digits = 0;
        while (s[i] && (isdigit((unsigned char) s[i]) || s[i] == '.')) {
                digits += isdigit((unsigned char) s[i]) != 0;
                i++;
        }
        if (digits == 0 || i > 6)
                return false;
        return streq(s + i, " GT/s") || streq(s + i, " GT/s PCIe");
}

int hostmap_load_links_path(const char *root, struct hostmap *h, char **ret_error) {
        _cleanup_close_ int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (rootfd < 0) {
                int r = -errno;
                return set_error(ret_error, r, "sysfs root '%s': %s", root, strerror(-r));
        }
        const struct reader rd = { .rootfd = rootfd, .openat2 = probe_openat2(rootfd) };

        /* Only the NCCL file reads links: its devices and the bridges above them. */
        _cleanup_free_ bool *need = xcalloc(h->n_devices + 1, sizeof(bool));
        for (size_t i = 0; i < h->n_devices; i++) {
                const struct hostmap_device *d = &h->devices[i];
                if (!nccltopo_wanted(d->class, d->vendor))
                        continue;
                need[i] = true;
                for (size_t k = 0; k < d->n_upstream; k++) {
                        const struct hostmap_device *u = hostmap_find_device(h, &d->upstream[k]);
                        if (u)
                                need[u - h->devices] = true;
                }
        }
        for (size_t i = 0; i < h->n_devices; i++) {
                struct hostmap_device *d = &h->devices[i];
                char path[128], buf[64];
                ssize_t n;
                if (!need[i])
                        continue;

                snprintf(path, sizeof(path), "bus/pci/devices/%s/max_link_speed", d->name);
                n = read_attr_at(&rd, rootfd, path, buf, sizeof(buf));
                if (n >= 0) {
                        if (link_speed_ok(buf) && (size_t) n < sizeof(d->link_speed))
                                memcpy(d->link_speed, buf, (size_t) n + 1);
                        else if (!streq(buf, "Unknown"))
                                warn_garbage(h, d->name, "max_link_speed", buf, "is not a link speed ('N GT/s')");
                } else if (n != -ENOENT)
                        warn_unreadable(h, d->name, "max_link_speed", (int) n);

                uint64_t w;
                snprintf(path, sizeof(path), "bus/pci/devices/%s/max_link_width", d->name);
                n = read_attr_at(&rd, rootfd, path, buf, sizeof(buf));
                if (n >= 0) {
                        if (parse_uint(buf, 10, 32, &w) >= 0 && w > 0)
                                d->link_width = (unsigned) w;
                        else if (!streq(buf, "Unknown"))
                                warn_garbage(h, d->name, "max_link_width", buf, "is not a link width (1 to 32)");
                } else if (n != -ENOENT)
                        warn_unreadable(h, d->name, "max_link_width", (int) n);
        }
        return 0;
}

static bool cpu_word_ok(const char *s, size_t max) {
        size_t n = strlen(s);
        if (n == 0 || n >= max)
                return false;
        for (; *s; s++)
                if (!isalnum((unsigned char) *s) && *s != '_' && *s != '-')
                        return false;
        return true;
}

void hostmap_read_cpu_id(struct hostmap_cpu_id *c) {
        *c = (struct hostmap_cpu_id) { .family = -1, .model = -1 };
        struct utsname u;
        if (uname(&u) == 0 && cpu_word_ok(u.machine, sizeof c->arch)) {
                /* NCCL's names: x86_64, arm64, ppc64. */
                const char *m = streq(u.machine, "aarch64") ? "arm64"
                                : strncmp(u.machine, "ppc64", 5) == 0 ? "ppc64" : u.machine;
                snprintf(c->arch, sizeof c->arch, "%s", m);
        }
        if (!streq(c->arch, "x86_64"))
                return;
        /* "key\t: value" lines; the first processor's are enough. */
        _cleanup_fclose_ FILE *f = fopen("/proc/cpuinfo", "re");
        char line[512], vendor[64] = "";
        int family = -1, model = -1;
        while (f && fgets(line, sizeof line, f)) {
                if (line[0] == '\n')
                        break;
                char *colon = strchr(line, ':');
                if (!colon)
                        continue;
                char *v = colon + 1;
                v += strspn(v, " \t");
                v[strcspn(v, "\n")] = 0;
                uint64_t n;
                if (strncmp(line, "vendor_id", 9) == 0 && cpu_word_ok(v, sizeof vendor))
                        snprintf(vendor, sizeof vendor, "%s", v);
                else if (strncmp(line, "cpu family", 10) == 0 && parse_uint(v, 10, 0xfff, &n) >= 0)
                        family = (int) n;
                else if (strncmp(line, "model\t", 6) == 0 && parse_uint(v, 10, 0xfff, &n) >= 0)
                        model = (int) n;
        }
        if (vendor[0] && family >= 0 && model >= 0) {
                snprintf(c->vendor, sizeof c->vendor, "%s", vendor);
                c->family = family;
                c->model = model;
        }
}

int hostmap_load_for_plan(const char *root, struct hostmap **ret, char **ret_error) {
        _cleanup_hostmap_ struct hostmap *h = NULL;
        int r = hostmap_load_path(root, &h, ret_error);
        if (r < 0)
                return r;
        r = hostmap_load_links_path(root, h, ret_error);
        if (r < 0)
                return r;
        /* The CPU identity is this machine's: only when root is its sysfs. */
        char real[PATH_MAX];
        if (realpath(root, real) && streq(real, "/sys"))
                hostmap_read_cpu_id(&h->cpu_id);
        *ret = TAKE_PTR(h);
        return 0;
}

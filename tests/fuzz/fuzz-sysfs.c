/* Fuzz target: the sysfs reader.  The input describes a small sysfs tree,
 * which is written to a private directory (on /dev/shm when there is one)
 * and read with hostmap_load(), so that every attribute parser of
 * hostmap-sysfs.c (a device's uevent keys PCI_CLASS, PCI_ID and DRIVER,
 * the class, vendor and device files it falls back to, resource lines,
 * numa_node, distance rows, cpulists, the upstream bridges in a device's
 * real path, mdev links) sees it exactly as it would on a host.  Each
 * file's text also goes straight to the helpers they use: bitmap_parse()
 * (whose output must survive bitmap_format() and parsing again),
 * parse_uint(), parse_int() and pci_addr_parse() (which must survive
 * pci_addr_format()).  The map's topology fingerprint is computed too
 * (twice: the same text), and its digests checked against its text.
 *
 * The input is a list of records, each ended by a NUL byte:
 *   "f" PATH "\n" CONTENT      a regular file
 *   "l" PATH "\n" TARGET       a symbolic link
 *   "d" PATH                   a directory
 *   "p" PATH                   a FIFO
 * PATH is relative to the sysfs root; missing parent directories are
 * created.  Any file can be written, so an input may give a device a
 * uevent ("fbus/pci/devices/0000:01:00.0/uevent\nPCI_CLASS=10802\n..."),
 * garbage in one, or none (the reader then falls back to the files).
 * Paths with "." or ".." components are skipped, and no file is written
 * through a link (each directory is opened with O_NOFOLLOW): this program
 * may run as root, and must write nothing outside its directory.  Link
 * targets may point anywhere, above the root too, since the reader must
 * refuse to follow them out: a target starting with "@" names the canary
 * directory beside the root ("@/numa_node" becomes DIR/outside/numa_node,
 * absolute), and "../" runs from the root lead there as well.  The
 * canary holds files the reader would read (numa_node, uevent, cpulist,
 * ...) and a FIFO; their access times are reset before each input and
 * checked after it (on a file system with atime updates, as tmpfs has
 * them): a canary file read is a finding.
 * tests/fuzz/seed-corpus.py turns a sysfs tree into this form. */
#include "fuzz.h"
#include "fingerprint.h"
#include "hostmap-sysfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>

#define MAX_RECORDS 320
#define MAX_PATH_LEN 256
#define MAX_CONTENT (64 * 1024)

static char base_dir[PATH_MAX];
static int base_fd = -1;
static int outside_fd = -1;
static bool atime_works;

/* The canary outside the root: files named as the reader's attributes. */
static const char *const canary_files[] = {
        "numa_node", "uevent", "class", "vendor", "device", "resource",
        "cpulist", "distance", "physical_package_id",
};

static void canary_reset(void) {
        /* An access time before the modification time: the next read
         * updates it, even under relatime. */
        const struct timespec t[2] = { { .tv_sec = 1 }, { .tv_nsec = UTIME_OMIT } };
        for (size_t i = 0; i < ELEMENTSOF(canary_files); i++)
                if (utimensat(outside_fd, canary_files[i], t, 0) < 0)
                        fuzz_fail("cannot reset %s/outside/%s: %s", base_dir, canary_files[i], strerror(errno));
}

static void canary_check(void) {
        if (!atime_works)
                return;
        for (size_t i = 0; i < ELEMENTSOF(canary_files); i++) {
                struct stat st;
                if (fstatat(outside_fd, canary_files[i], &st, 0) < 0)
                        fuzz_fail("cannot stat %s/outside/%s: %s", base_dir, canary_files[i], strerror(errno));
                if (st.st_atim.tv_sec != 1)
                        fuzz_fail("the reader read %s/outside/%s, outside the sysfs root", base_dir, canary_files[i]);
        }
}

static void canary_setup(void) {
        if (mkdirat(base_fd, "outside", 0755) < 0)
                fuzz_fail("mkdir %s/outside: %s", base_dir, strerror(errno));
        outside_fd = openat(base_fd, "outside", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (outside_fd < 0)
                fuzz_fail("open %s/outside: %s", base_dir, strerror(errno));
        for (size_t i = 0; i < ELEMENTSOF(canary_files); i++) {
                /* Values that parse, so a read would change the map too. */
                const char *text = streq(canary_files[i], "uevent") ? "PCI_CLASS=30200\nPCI_ID=10DE:2330\n"
                                   : streq(canary_files[i], "resource") ? "0x1000 0x1fff 0x200\n"
                                   : streq(canary_files[i], "distance") ? "10\n" : "1\n";
                int fd = openat(outside_fd, canary_files[i], O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
                if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t) strlen(text))
                        fuzz_fail("cannot write %s/outside/%s: %s", base_dir, canary_files[i], strerror(errno));
                (void) close(fd);
        }
        if (mkfifoat(outside_fd, "fifo", 0644) < 0)
                fuzz_fail("mkfifo %s/outside/fifo: %s", base_dir, strerror(errno));
        /* Whether reads update access times here at all. */
        canary_reset();
        char buf[8];
        int fd = openat(outside_fd, "numa_node", O_RDONLY | O_CLOEXEC);
        if (fd < 0 || read(fd, buf, sizeof(buf)) < 0)
                fuzz_fail("cannot read %s/outside/numa_node: %s", base_dir, strerror(errno));
        (void) close(fd);
        struct stat st;
        atime_works = fstatat(outside_fd, "numa_node", &st, 0) == 0 && st.st_atim.tv_sec != 1;
        if (!atime_works)
                fprintf(stderr, "fuzz-sysfs: %s has no access time updates; the canary is not checked\n", base_dir);
}

static void remove_tree_at(int dir_fd, const char *name);

static void remove_contents(int fd) {
        int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (dup_fd < 0)
                return;
        DIR *dir = fdopendir(dup_fd);
        if (!dir) {
                (void) close(dup_fd);
                return;
        }
        for (struct dirent *de; (de = readdir(dir));) {
                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                remove_tree_at(fd, de->d_name);
        }
        closedir(dir);
}

/* rm -rf without following links. */
static void remove_tree_at(int dir_fd, const char *name) {
        struct stat st;

        if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return;
        if (S_ISDIR(st.st_mode)) {
                int fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd >= 0) {
                        remove_contents(fd);
                        (void) close(fd);
                }
                if (unlinkat(dir_fd, name, AT_REMOVEDIR) < 0)
                        fuzz_fail("cannot remove %s/%s: %s", base_dir, name, strerror(errno));
        } else if (unlinkat(dir_fd, name, 0) < 0)
                fuzz_fail("cannot remove %s/%s: %s", base_dir, name, strerror(errno));
}

static void cleanup_base(void) {
        if (base_fd < 0)
                return;
        if (outside_fd >= 0)
                (void) close(outside_fd);
        remove_contents(base_fd);
        (void) close(base_fd);
        base_fd = -1;
        (void) rmdir(base_dir);
}

static void setup(void) {
        if (base_fd >= 0)
                return;
        const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        snprintf(base_dir, sizeof(base_dir), "%s/pcinuma-fuzz-sysfs-XXXXXX", tmp);
        if (!mkdtemp(base_dir))
                fuzz_fail("mkdtemp(%s): %s", base_dir, strerror(errno));
        base_fd = open(base_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (base_fd < 0)
                fuzz_fail("open(%s): %s", base_dir, strerror(errno));
        atexit(cleanup_base);
        canary_setup();
}

/* Split path into components: none may be empty, "." or "..".  Returns the
 * number of components, or -1. */
static int split_path(char *path, char **comp, int max) {
        int n = 0;
        char *save = NULL;

        if (path[0] == '/' || !path[0])
                return -1;
        for (char *c = strtok_r(path, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
                if (streq(c, ".") || streq(c, "..") || strlen(c) > NAME_MAX || n == max)
                        return -1;
                comp[n++] = c;
        }
        return n > 0 ? n : -1;
}

/* Open (creating) the directory comp[0..n) below root, never through a
 * symbolic link. */
static int open_parent(int root_fd, char **comp, int n) {
        int fd = fcntl(root_fd, F_DUPFD_CLOEXEC, 3);

        for (int i = 0; i < n && fd >= 0; i++) {
                (void) mkdirat(fd, comp[i], 0755);
                int next = openat(fd, comp[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                (void) close(fd);
                fd = next;
        }
        return fd;
}

/* A link target as written: "@..." becomes the canary directory's
 * absolute path; anything else as it is (a symlink is only text; the
 * writer never follows one, the reader must not follow it out). */
static char *link_target(const char *target) {
        if (!target[0] || strlen(target) > 1024)
                return NULL;
        if (target[0] == '@')
                return xasprintf("%s/outside%s", base_dir, target + 1);
        return xstrdup(target);
}

static void check_text(const char *text) {
        struct bitmap b = {0}, again = {0};
        struct pci_addr a, a2;
        uint64_t u;
        int64_t i;

        if (bitmap_parse(text, 65535, &b) >= 0) {
                _cleanup_free_ char *s = bitmap_format(&b);
                if (bitmap_parse(s, 65535, &again) < 0)
                        fuzz_fail("bitmap_format() gave '%s', which does not parse", s);
                if (!bitmap_equal(&b, &again))
                        fuzz_fail("bitmap '%s' formats as '%s', which parses differently", text, s);
                if (bitmap_isempty(&b) != (bitmap_count(&b) == 0) || bitmap_isempty(&b) != (bitmap_next(&b, 0) < 0))
                        fuzz_fail("bitmap '%s': empty and count disagree", text);
                bitmap_done(&again);
                bitmap_done(&b);
        }
        (void) parse_uint(text, 0, UINT64_MAX, &u);
        (void) parse_uint(text, 10, INT_MAX, &u);
        (void) parse_uint(text, 16, 0xffffff, &u);
        (void) parse_int(text, 10, -1, INT_MAX, &i);
        (void) parse_int(text, 0, INT64_MIN, INT64_MAX, &i);

        if (pci_addr_parse(text, &a) >= 0) {
                char buf[PCI_ADDR_STRLEN];
                pci_addr_format(&a, buf);
                if (pci_addr_parse(buf, &a2) < 0 || !pci_addr_eq(&a, &a2))
                        fuzz_fail("PCI address '%s' formats as '%s', which parses differently", text, buf);
                if (a.slot > 31 || a.func > 7)
                        fuzz_fail("PCI address '%s' parsed to slot %u function %u", text, a.slot, a.func);
        }
}

static void build(int root_fd, const char *data, size_t size) {
        size_t n_records = 0;

        for (size_t pos = 0; pos < size && n_records < MAX_RECORDS; n_records++) {
                const char *rec = data + pos;
                const char *nul = memchr(rec, 0, size - pos);
                size_t rec_len = nul ? (size_t) (nul - rec) : size - pos;
                pos += rec_len + 1;

                if (rec_len < 2)
                        continue;
                char kind = rec[0];
                const char *nl = memchr(rec + 1, '\n', rec_len - 1);
                size_t path_len = nl ? (size_t) (nl - rec - 1) : rec_len - 1;
                if (path_len == 0 || path_len > MAX_PATH_LEN)
                        continue;
                _cleanup_free_ char *path = xstrndup(rec + 1, path_len);
                const char *body = nl ? nl + 1 : rec + rec_len;
                size_t body_len = (size_t) (rec + rec_len - body);
                if (body_len > MAX_CONTENT)
                        continue;
                _cleanup_free_ char *text = xstrndup(body, body_len);

                char *comp[MAX_PATH_LEN];
                int n = split_path(path, comp, (int) ELEMENTSOF(comp));
                if (n < 0)
                        continue;
                for (int k = 0; k < n; k++)
                        check_text(comp[k]);

                if (kind == 'd') {
                        int fd = open_parent(root_fd, comp, n);
                        if (fd >= 0)
                                (void) close(fd);
                        continue;
                }

                _cleanup_close_ int parent = open_parent(root_fd, comp, n - 1);
                if (parent < 0)
                        continue;

                if (kind == 'f') {
                        check_text(text);
                        /* O_NONBLOCK: the name may be a FIFO of an
                         * earlier record, which would wait for a reader. */
                        _cleanup_close_ int fd = openat(parent, comp[n - 1],
                                                        O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                                                        0644);
                        if (fd < 0)
                                continue;
                        if (body_len > 0 && write(fd, body, body_len) != (ssize_t) body_len)
                                fuzz_fail("cannot write %s: %s", comp[n - 1], strerror(errno));
                } else if (kind == 'l') {
                        _cleanup_free_ char *target = link_target(text);
                        if (target)
                                (void) symlinkat(target, parent, comp[n - 1]);
                } else if (kind == 'p')
                        (void) mkfifoat(parent, comp[n - 1], 0644);
        }
}

static void check_fingerprint(const struct hostmap *h) {
        _cleanup_fingerprint_ struct fingerprint *f = fingerprint_new(h);
        _cleanup_fingerprint_ struct fingerprint *g = fingerprint_new(h);
        char hex[SHA256_HEX_SIZE];

        if (!streq(f->canonical, g->canonical) || !streq(f->digest, g->digest))
                fuzz_fail("the fingerprint of one map differs between two runs");
        if (!streq(sha256_hex(f->canonical, strlen(f->canonical), hex), f->digest))
                fuzz_fail("the fingerprint's digest is not the SHA-256 of its text");
        size_t n_in = 0;
        for (size_t k = 0; k < f->n_groups; k++) {
                const struct fingerprint_group *gr = &f->groups[k];
                _cleanup_free_ char *line = xasprintf("group %s\n", gr->canonical);
                if (gr->n_devices == 0 || strchr(gr->canonical, '\n') || !strstr(f->canonical, line))
                        fuzz_fail("group %zu: no devices, or its line is not one line of the text", k);
                if (!streq(sha256_hex(line + 6, strlen(line + 6), hex), gr->digest))
                        fuzz_fail("group %zu: its digest is not the SHA-256 of its line", k);
                for (size_t i = 0; i < gr->n_devices; i++)
                        if (gr->devices[i] >= h->n_devices)
                                fuzz_fail("group %zu: device index %zu out of range", k, gr->devices[i]);
                n_in += gr->n_devices;
        }
        size_t n_counted = 0;
        for (size_t i = 0; i < h->n_devices; i++)
                n_counted += fingerprint_device_counts(&h->devices[i]);
        if (n_in < n_counted)
                fuzz_fail("the fingerprint holds %zu devices, fewer than the %zu that count", n_in, n_counted);
}

static void check_map(const struct hostmap *h) {
        if (h->n_nodes == 0)
                fuzz_fail("a host map without nodes");
        for (size_t i = 0; i < h->n_nodes; i++) {
                if (i > 0 && h->nodes[i - 1].id >= h->nodes[i].id)
                        fuzz_fail("nodes not sorted or duplicated: %d, %d", h->nodes[i - 1].id, h->nodes[i].id);
                if (hostmap_find_node(h, h->nodes[i].id) != &h->nodes[i])
                        fuzz_fail("node %d not found", h->nodes[i].id);
                for (size_t j = 0; j < h->n_nodes; j++)
                        (void) hostmap_distance(h, h->nodes[i].id, h->nodes[j].id);
                for (int c = bitmap_next(&h->nodes[i].cpus, 0); c >= 0 && c < 4096;
                     c = bitmap_next(&h->nodes[i].cpus, (unsigned) c + 1))
                        if (hostmap_cpu_node(h, (unsigned) c) < 0)
                                fuzz_fail("CPU %d of node %d has no node", c, h->nodes[i].id);
        }
        for (size_t i = 0; i < h->n_devices; i++) {
                const struct hostmap_device *d = &h->devices[i];
                if (i > 0 && pci_addr_cmp(&h->devices[i - 1].addr, &d->addr) >= 0)
                        fuzz_fail("devices not sorted or duplicated: %s", d->name);
                if (hostmap_find_device(h, &d->addr) != d)
                        fuzz_fail("device %s not found", d->name);
                (void) hostmap_class_name(d->class);
                (void) hostmap_device_is_bridge(d);
                (void) hostmap_node_socket(h, d->node);
        }
        for (size_t i = 0; i < h->n_mdevs; i++) {
                const struct hostmap_mdev *m = &h->mdevs[i];
                if (hostmap_find_mdev(h, m->uuid) != m)
                        fuzz_fail("mdev %s not found", m->uuid);
        }
        check_fingerprint(h);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        _cleanup_hostmap_ struct hostmap *h = NULL;
        _cleanup_free_ char *err = NULL;
        _cleanup_close_ int root_fd = -1;

        if (size > 1024 * 1024)
                return 0;
        setup();

        if (mkdirat(base_fd, "root", 0755) < 0)
                fuzz_fail("mkdir %s/root: %s", base_dir, strerror(errno));
        root_fd = openat(base_fd, "root", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (root_fd < 0)
                fuzz_fail("open %s/root: %s", base_dir, strerror(errno));

        build(root_fd, (const char *) data, size);
        canary_reset();

        int r = hostmap_load(root_fd, &h, &err);
        if (r < 0) {
                if (!err)
                        fuzz_fail("hostmap_load() failed (%d) without a message", r);
        } else
                check_map(h);
        canary_check();

        remove_tree_at(base_fd, "root");
        return 0;
}

/* The pre-image store of pcinuma-watcher (see preimage.h): one file per
 * definition pcinuma replaced, bounded per domain and in total. */
#include "preimage.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>

#include "util.h"

#define UUID_LEN 36
/* "_" UUID "_" YYYYMMDDTHHMMSS.UUUUUUZ ".xml" */
#define STAMP_LEN 23
#define SUFFIX_LEN (1 + UUID_LEN + 1 + STAMP_LEN + 4)
#define NAME_MAX_CHARS 64

struct preimage_store {
        char *dir;
        int dirfd;              /* -1 until the first save opens it */
};

struct preimage_store *preimage_store_new(const char *dir) {
        struct preimage_store *s = xcalloc(1, sizeof(*s));
        s->dir = xstrdup(dir);
        s->dirfd = -1;
        return s;
}

struct preimage_store *preimage_store_free(struct preimage_store *s) {
        if (!s)
                return NULL;
        if (s->dirfd >= 0)
                (void) close(s->dirfd);
        free(s->dir);
        free(s);
        return NULL;
}

/* mkdir that accepts an existing directory. */
static int mkdir_one(const char *path) {
        if (mkdir(path, 0700) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

static int store_open(struct preimage_store *s, char **ret_error) {
        if (s->dirfd >= 0)
                return 0;
        /* The parent too: run by hand, /var/lib/pcinuma may not exist (the
         * unit's StateDirectory= creates it under systemd). */
        _cleanup_free_ char *parent = xstrdup(s->dir);
        char *slash = strrchr(parent, '/');
        int r = 0;
        if (slash && slash != parent) {
                *slash = 0;
                r = mkdir_one(parent);
        }
        if (r >= 0)
                r = mkdir_one(s->dir);
        if (r >= 0) {
                s->dirfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (s->dirfd < 0)
                        r = -errno;
        }
        if (r < 0)
                return set_error(ret_error, r, "cannot use the pre-image directory %s: %s", s->dir, strerror(-r));
        return 0;
}

/* The name part of a file name: safe in a path, and short. */
static char *file_prefix(const char *name, const char *uuid) {
        char clean[NAME_MAX_CHARS + 1];
        size_t n = 0;
        for (const char *p = name; *p && n < NAME_MAX_CHARS; p++, n++) {
                bool ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                          *p == '.' || *p == '_' || *p == '+' || *p == '-';
                clean[n] = ok ? *p : '_';
        }
        clean[n] = 0;
        return xasprintf("%s_%s_", n ? clean : "_", uuid);
}

static int write_all(int fd, const char *buf, size_t len) {
        while (len > 0) {
                ssize_t n = write(fd, buf, len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                buf += n;
                len -= (size_t) n;
        }
        return 0;
}

/* Create the file exclusively: two saves within one microsecond (a
 * stepped clock) must not overwrite each other. */
static int create_file(int dirfd, const char *prefix, char **ret_file) {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        for (int tries = 0; tries < 100; tries++) {
                long usec = ts.tv_nsec / 1000 + tries;
                _cleanup_free_ char *file = xasprintf("%s%04d%02d%02dT%02d%02d%02d.%06ldZ.xml", prefix, tm.tm_year + 1900,
                                                      tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                                                      usec % 1000000);
                int fd = openat(dirfd, file, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
                if (fd >= 0) {
                        *ret_file = TAKE_PTR(file);
                        return fd;
                }
                if (errno != EEXIST)
                        return -errno;
        }
        return -EEXIST;
}

struct entry {
        char *file;
        const char *uuid;       /* into file */
        const char *stamp;      /* into file */
};

static int entry_cmp(const void *a, const void *b) {
        return strcmp(((const struct entry *) a)->stamp, ((const struct entry *) b)->stamp);
}

/* Our files, parsed from their end (a name may hold '_'). */
static size_t list_files(int dirfd, struct entry **ret) {
        struct entry *v = NULL;
        size_t n = 0;
        int fd = dup(dirfd);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
                if (fd >= 0)
                        (void) close(fd);
                *ret = NULL;
                return 0;
        }
        rewinddir(d);
        for (struct dirent *de; (de = readdir(d));) {
                size_t len = strlen(de->d_name);
                if (len <= SUFFIX_LEN || strcmp(de->d_name + len - 4, ".xml") != 0)
                        continue;
                char *base = de->d_name + len - SUFFIX_LEN;
                if (base[0] != '_' || base[1 + UUID_LEN] != '_')
                        continue;
                struct entry *e = GROW(v, n);
                e->file = xstrdup(de->d_name);
                e->uuid = e->file + (len - SUFFIX_LEN) + 1;
                e->stamp = e->uuid + UUID_LEN + 1;
        }
        closedir(d);
        qsort(v, n, sizeof(*v), entry_cmp);
        *ret = v;
        return n;
}

void preimage_prune(struct preimage_store *s, const char *path, const char *uuid) {
        if (s->dirfd < 0)
                return;
        /* To disk now, not before the define: an fsync there (~10 ms)
         * would delay the define; the file was written before it. */
        const char *slash = strrchr(path, '/');
        _cleanup_close_ int fd = openat(s->dirfd, slash ? slash + 1 : path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0)
                (void) fsync(fd);
        (void) fsync(s->dirfd);
        struct entry *v = NULL;
        size_t n = list_files(s->dirfd, &v);
        size_t mine = 0, left = n;
        for (size_t i = 0; i < n; i++)
                if (strncmp(v[i].uuid, uuid, UUID_LEN) == 0)
                        mine++;
        /* Oldest first: drop while over either limit.  Never the file just
         * saved, which the journal names: after the clock stepped back its
         * stamp may sort first. */
        const char *just_saved = slash ? slash + 1 : path;
        for (size_t i = 0; i < n; i++) {
                bool is_mine = strncmp(v[i].uuid, uuid, UUID_LEN) == 0;
                if (streq(v[i].file, just_saved))
                        continue;
                if ((is_mine && mine > PREIMAGE_PER_DOMAIN) || left > PREIMAGE_TOTAL) {
                        if (unlinkat(s->dirfd, v[i].file, 0) == 0 || errno == ENOENT) {
                                left--;
                                if (is_mine)
                                        mine--;
                        }
                }
        }
        for (size_t i = 0; i < n; i++)
                free(v[i].file);
        free(v);
}

int preimage_save(struct preimage_store *s, const char *name, const char *uuid, const char *xml, char **ret_path,
                  char **ret_error) {
        int r = store_open(s, ret_error);
        if (r < 0)
                return r;
        if (strlen(uuid) != UUID_LEN)
                return set_error(ret_error, -EINVAL, "domain %s has no UUID of %d characters", name, UUID_LEN);
        _cleanup_free_ char *prefix = file_prefix(name, uuid);
        _cleanup_free_ char *file = NULL;
        _cleanup_close_ int fd = create_file(s->dirfd, prefix, &file);
        if (fd < 0)
                return set_error(ret_error, fd, "cannot create a pre-image in %s: %s", s->dir, strerror(-fd));
        r = write_all(fd, xml, strlen(xml));
        if (r < 0) {
                (void) unlinkat(s->dirfd, file, 0);
                return set_error(ret_error, r, "cannot write the pre-image %s/%s: %s", s->dir, file, strerror(-r));
        }
        *ret_path = xasprintf("%s/%s", s->dir, file);
        return 0;
}

void preimage_discard(struct preimage_store *s, const char *path) {
        if (!path || s->dirfd < 0)
                return;
        const char *slash = strrchr(path, '/');
        (void) unlinkat(s->dirfd, slash ? slash + 1 : path, 0);
}

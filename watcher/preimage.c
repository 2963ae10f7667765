/* The pre-image store of pcinuma-watcher (see preimage.h): one file per
 * definition pcinuma replaced, bounded per domain and in total (files and
 * bytes), never at the cost of another domain's newest. */
#include "preimage.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <time.h>

#include "fileio.h"
#include "util.h"

#define UUID_LEN 36
/* "_" UUID "_" YYYYMMDDTHHMMSS.UUUUUUZ ".xml" */
#define STAMP_LEN 23
#define SUFFIX_LEN (1 + UUID_LEN + 1 + STAMP_LEN + 4)
#define NAME_MAX_CHARS 64

struct preimage_store {
        char *dir;
        int dirfd;              /* -1 until the first save opens it */
        uint64_t max_bytes;
};

struct preimage_store *preimage_store_new(const char *dir, uint64_t max_bytes) {
        struct preimage_store *s = xcalloc(1, sizeof(*s));
        s->dir = xstrdup(dir);
        s->dirfd = -1;
        s->max_bytes = max_bytes;
        return s;
}

const char *preimage_store_dir(const struct preimage_store *s) {
        return s->dir;
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
        uint64_t size;
        bool newest;            /* the newest of its domain (mark_newest()) */
        bool gone;
};

static int entry_cmp(const void *a, const void *b) {
        return strcmp(((const struct entry *) a)->stamp, ((const struct entry *) b)->stamp);
}

static int by_uuid_then_stamp(const void *a, const void *b, void *base) {
        const struct entry *v = base;
        const struct entry *x = &v[*(const size_t *) a], *y = &v[*(const size_t *) b];
        int c = strncmp(x->uuid, y->uuid, UUID_LEN);
        return c ? c : strcmp(x->stamp, y->stamp);
}

/* Mark each domain's newest file (v sorted by stamp; 'first', when it is
 * one of v's files, counts as its domain's newest whatever its stamp: the
 * file just saved, after a clock step). */
static void mark_newest(struct entry *v, size_t n, const char *first) {
        _cleanup_free_ size_t *ix = xcalloc(n ? n : 1, sizeof(size_t));
        for (size_t i = 0; i < n; i++)
                ix[i] = i;
        qsort_r(ix, n, sizeof(size_t), by_uuid_then_stamp, v);
        for (size_t k = 0; k < n; k++) {
                bool last = k + 1 == n || strncmp(v[ix[k]].uuid, v[ix[k + 1]].uuid, UUID_LEN) != 0;
                v[ix[k]].newest = last;
        }
        for (size_t i = 0; first && i < n; i++)
                if (streq(v[i].file, first))
                        for (size_t j = 0; j < n; j++)
                                if (strncmp(v[j].uuid, v[i].uuid, UUID_LEN) == 0)
                                        v[j].newest = j == i;
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
                struct stat st;
                if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                struct entry *e = GROW(v, n);
                *e = (struct entry) { .file = xstrdup(de->d_name), .size = (uint64_t) st.st_size };
                e->uuid = e->file + (len - SUFFIX_LEN) + 1;
                e->stamp = e->uuid + UUID_LEN + 1;
        }
        closedir(d);
        if (n > 0)      /* qsort's base must not be NULL, even for 0 items */
                qsort(v, n, sizeof(*v), entry_cmp);
        *ret = v;
        return n;
}

static void entries_free(struct entry *v, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(v[i].file);
        free(v);
}

void preimage_dropped_done(struct preimage_dropped *d) {
        free(d->files);
        *d = (struct preimage_dropped) {0};
}

static void drop(struct preimage_store *s, struct entry *e, struct preimage_dropped *d, struct strbuf *names,
                 size_t *left, uint64_t *bytes, bool own) {
        if (unlinkat(s->dirfd, e->file, 0) < 0 && errno != ENOENT)
                return;
        e->gone = true;
        (*left)--;
        *bytes -= e->size;
        d->bytes += e->size;
        if (own)
                d->n_own++;
        else
                d->n_others++;
        size_t k = d->n_own + d->n_others;
        if (k <= 10)
                strbuf_printf(names, "%s%s", names->len ? " " : "", e->file);
        else if (k == 11)
                strbuf_append(names, " ...");
}

void preimage_prune(struct preimage_store *s, const char *path, const char *uuid, struct preimage_dropped *ret) {
        struct preimage_dropped d = {0};
        if (s->dirfd < 0) {
                *ret = d;
                return;
        }
        /* To disk now, not before the define: an fsync there (~10 ms)
         * would delay the define; the file was written before it. */
        const char *slash = strrchr(path, '/');
        _cleanup_close_ int fd = openat(s->dirfd, slash ? slash + 1 : path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0)
                (void) fsync(fd);
        (void) fsync(s->dirfd);
        struct entry *v = NULL;
        size_t n = list_files(s->dirfd, &v);
        /* Never the file just saved, which the journal names: after the
         * clock stepped back its stamp may sort first. */
        const char *just_saved = slash ? slash + 1 : path;
        mark_newest(v, n, just_saved);
        size_t mine = 0, left = n;
        uint64_t bytes = 0;
        for (size_t i = 0; i < n; i++) {
                mine += strncmp(v[i].uuid, uuid, UUID_LEN) == 0;
                bytes += v[i].size;
        }
        struct strbuf names = {0};
        /* This domain's beyond its newest PREIMAGE_PER_DOMAIN, oldest first. */
        for (size_t i = 0; i < n && mine > PREIMAGE_PER_DOMAIN; i++)
                if (strncmp(v[i].uuid, uuid, UUID_LEN) == 0 && !streq(v[i].file, just_saved) && !v[i].newest) {
                        drop(s, &v[i], &d, &names, &left, &bytes, true);
                        mine -= v[i].gone;
                }
        /* The folder's limits: the oldest files that are not their
         * domain's newest, whoever's. */
        for (size_t i = 0; i < n && (left > PREIMAGE_TOTAL || bytes > s->max_bytes); i++)
                if (!v[i].gone && !v[i].newest && !streq(v[i].file, just_saved))
                        drop(s, &v[i], &d, &names, &left, &bytes,
                             strncmp(v[i].uuid, uuid, UUID_LEN) == 0);
        d.files = strbuf_steal(&names);
        d.n_left = left;
        d.bytes_left = bytes;
        d.over = left > PREIMAGE_TOTAL || bytes > s->max_bytes;
        entries_free(v, n);
        *ret = d;
}

/* Would the folder have room for a new pre-image of 'size' bytes of
 * domain 'uuid', once every file that is not the newest of its domain
 * went (this domain's are all older than the new one)?  0, or -ENOSPC
 * with the reason. */
static int check_room(struct preimage_store *s, const char *name, const char *uuid, uint64_t size, char **ret_error) {
        struct entry *v = NULL;
        size_t n = list_files(s->dirfd, &v);
        mark_newest(v, n, NULL);
        size_t files = 1, all = n;
        uint64_t bytes = size, all_bytes = 0;
        for (size_t i = 0; i < n; i++) {
                all_bytes += v[i].size;
                if (v[i].newest && strncmp(v[i].uuid, uuid, UUID_LEN) != 0) {
                        files++;
                        bytes += v[i].size;
                }
        }
        entries_free(v, n);
        if (files <= PREIMAGE_TOTAL && bytes <= s->max_bytes)
                return 0;
        return set_error(ret_error, -ENOSPC,
                         "no room for domain %s's pre-image (%" PRIu64 " bytes) in %s: it holds %zu files of %" PRIu64
                         " bytes, and the other domains' newest pre-images alone, which pcinuma never drops for "
                         "another's, leave too little under its limits (%d files, %" PRIu64 " bytes: pcinumad "
                         "--preimage-max-bytes); remove old pre-images there by hand or raise the limit",
                         name, size, s->dir, all, all_bytes, PREIMAGE_TOTAL, s->max_bytes);
}

int preimage_save(struct preimage_store *s, const char *name, const char *uuid, const char *xml, char **ret_path,
                  char **ret_error) {
        int r = store_open(s, ret_error);
        if (r < 0)
                return r;
        if (strlen(uuid) != UUID_LEN)
                return set_error(ret_error, -EINVAL, "domain %s has no UUID of %d characters", name, UUID_LEN);
        r = check_room(s, name, uuid, strlen(xml), ret_error);
        if (r < 0)
                return r;
        _cleanup_free_ char *prefix = file_prefix(name, uuid);
        _cleanup_free_ char *file = NULL;
        _cleanup_close_ int fd = create_file(s->dirfd, prefix, &file);
        if (fd < 0)
                return set_error(ret_error, fd, "cannot create a pre-image in %s: %s", s->dir, strerror(-fd));
        r = write_full_fd(fd, xml, strlen(xml));
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

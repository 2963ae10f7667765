/* pcinuma-hook: the libvirt qemu hook (docs/design.md §2, §8, §9), installed as
 * /etc/libvirt/hooks/qemu.d/pcinuma.  libvirt runs it as
 *     pcinuma NAME PHASE SUBPHASE EXTRA  < domain.xml
 * with a scrubbed environment.  It forwards the call to pcinumad over a
 * Unix socket and turns the answer into stdout, stderr and an exit code.
 *
 * It runs for every phase of every VM on the host, so the common case must
 * cost next to nothing: phases the daemon does not act on, domains with no
 * PCI hostdev, mdev or pcinuma mark, and every call of an unprivileged
 * session libvirtd, exit 0 before any JSON work, config file read or
 * socket.  When the daemon cannot be reached (or does
 * not answer in time, or answers nonsense) the on_unreachable setting
 * decides, and the hook says so on stderr, which libvirt logs. */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#include "fileio.h"
#include "hook-client.h"
#include "hook-protocol.h"
#include "mark-urn.h"
#include "paths.h"

#ifndef PCINUMA_VERSION
#define PCINUMA_VERSION "unknown"
#endif

#define DEFAULT_TIMEOUT_MS 10000u
#define MAX_TIMEOUT_MS 600000u
/* The same limit as DOMAIN_XML_MAX in domain.h, which pulls in libxml2
 * and is not included here to keep the hook small. */
#define XML_MAX (4u * 1024u * 1024u)
#define CHUNK (64u * 1024u)

struct hook_conf {
        char socket[sizeof(((struct sockaddr_un *) NULL)->sun_path)];
        unsigned timeout_ms;
        bool refuse;            /* on_unreachable=refuse */
};

/* ---- small I/O helpers ------------------------------------------------- */

/* read() that retries on EINTR and waits on EAGAIN (a non-blocking stdin). */
static ssize_t read_some(int fd, char *buf, size_t len) {
        for (;;) {
                ssize_t k = read(fd, buf, len);

                if (k >= 0)
                        return k;
                if (errno == EINTR)
                        continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) {
                        int r = client_wait_fd(fd, POLLIN, -1);
                        if (r < 0)
                                return r;
                        continue;
                }
                return -errno;
        }
}

/* ---- the fast path ----------------------------------------------------- */

static bool phase_needs_daemon(const char *phase) {
        return streq(phase, "prepare") || streq(phase, "migrate") || streq(phase, "restore");
}

/* Is this hook serving a libvirtd whose domains pcinumad is about?
 *
 * libvirt runs a hook as the user libvirtd itself runs as: root for the
 * system instance (qemu:///system), the session user for qemu:///session.
 * So a hook whose effective uid is not 0 was called by some user's session
 * libvirtd.  pcinumad serves root only (its socket is 0600 root and it
 * checks SO_PEERCRED) and its watcher plans qemu:///system: a session
 * domain is never planned, and asking could only end in "unreachable",
 * which under on_unreachable=refuse would refuse VMs that no policy is
 * about.  The uid is the only sound signal: libvirt scrubs the hook's
 * environment and passes no URI, and whether the socket can be reached
 * cannot tell "not for us" from "daemon down" (where on_unreachable must
 * apply).  A deliberate session setup (the tests, the demo: pcinumad
 * --allow-uid) names its daemon with $PCINUMA_SOCKET in a wrapper; in
 * libvirt's scrubbed environment only such a wrapper can have set it, so
 * it is an explicit opt-in. */
static bool serves_this_libvirtd(void) {
        const char *e;

        if (geteuid() == 0)
                return true;
        e = getenv("PCINUMA_SOCKET");
        return e && *e;
}

/* The fast path's question: may this XML hold something the daemon acts
 * on?  The daemon (domain.c) acts on <hostdev> elements of type 'pci' or
 * 'mdev' (mode 'subsystem', the default), on <interface type='hostdev'>,
 * and on the pcinuma metadata mark; USB and SCSI hostdevs, and
 * mode='capabilities' ones, are not its business.  So every <hostdev and
 * <interface start tag is read far enough to see its type and mode
 * attributes, in any legal spelling: any attribute order, either quote,
 * white space (newlines too) around '=' and between attributes.
 *
 * A false positive costs a round trip; a false negative would start a
 * device unchecked.  So whatever cannot be read for certain counts as a
 * match: a value with a character reference (type='&#112;ci'), a start
 * tag that is not well formed, a tag too long to carry between reads. */
#define MARK_NS PCINUMA_URN_PREFIX
/* A marker or element name cut by the end of a read is carried over:
 * strlen(MARK_NS) - 1, the longest of the three. */
#define SPLIT_KEEP (sizeof(MARK_NS) - 2)
/* The longest start tag carried from one read to the next (only XML over
 * 4 MiB, which is drained rather than read whole, is read in pieces). */
#define TAG_MAX 4096u

static bool is_xml_space(char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool value_is(const char *v, size_t n, const char *want) {
        return n == strlen(want) && memcmp(v, want, n) == 0;
}

enum tag_verdict { TAG_NO, TAG_YES, TAG_CUT };

/* Read the attributes of the start tag whose element name ends at p, up to
 * its '>', and judge it.  TAG_CUT: the buffer ends inside the tag. */
static enum tag_verdict judge_tag(const char *p, const char *end, bool is_interface) {
        bool type_hit = false, mode_bad = false;

        /* The name must end here: <hostdevice> is another element. */
        if (p == end)
                return TAG_CUT;
        if (!is_xml_space(*p) && *p != '>' && *p != '/')
                return TAG_NO;

        for (;;) {
                const char *name, *value;
                size_t name_len, value_len;
                char quote;

                while (p < end && is_xml_space(*p))
                        p++;
                if (p == end)
                        return TAG_CUT;
                if (*p == '>' || *p == '/')
                        break;
                for (name = p; p < end && !is_xml_space(*p) && *p != '=' && *p != '>' && *p != '/' && *p != '<'; p++)
                        ;
                name_len = (size_t) (p - name);
                while (p < end && is_xml_space(*p))
                        p++;
                if (p == end)
                        return TAG_CUT;
                if (name_len == 0 || *p != '=')
                        return TAG_YES;         /* not well formed: be safe */
                p++;
                while (p < end && is_xml_space(*p))
                        p++;
                if (p == end)
                        return TAG_CUT;
                quote = *p;
                if (quote != '\'' && quote != '"')
                        return TAG_YES;
                value = ++p;
                p = memchr(p, quote, (size_t) (end - p));
                if (!p)
                        return TAG_CUT;
                value_len = (size_t) (p - value);
                p++;

                /* A character or entity reference: we cannot be sure. */
                if (memchr(value, '&', value_len)) {
                        if (value_is(name, name_len, "type"))
                                type_hit = true;
                        continue;
                }
                if (value_is(name, name_len, "type")) {
                        if (is_interface ? value_is(value, value_len, "hostdev")
                                         : value_is(value, value_len, "pci") || value_is(value, value_len, "mdev"))
                                type_hit = true;
#if PCINUMA_STAND_INS
                        /* A stand_ins build: a user-mode NIC may be a
                         * stand-in; only pcinumad knows its table. */
                        if (is_interface && value_is(value, value_len, "user"))
                                type_hit = true;
#endif
                } else if (!is_interface && value_is(name, name_len, "mode") && !value_is(value, value_len, "subsystem"))
                        mode_bad = true;
        }
        return type_hit && !mode_bad ? TAG_YES : TAG_NO;
}

/* Judge every start tag of element 'tag' in buf.  A tag that the end of
 * buf cuts lowers *keep to its start; without keep (buf is the whole
 * document, which then is not well formed) it counts as a match. */
static bool scan_tags(const char *buf, size_t len, const char *tag, bool is_interface, size_t *keep) {
        size_t tag_len = strlen(tag);
        const char *end = buf + len;

        for (const char *p = buf; (p = memmem(p, (size_t) (end - p), tag, tag_len)); p += tag_len) {
                switch (judge_tag(p + tag_len, end, is_interface)) {
                case TAG_YES:
                        return true;
                case TAG_CUT:
                        if (!keep)
                                return true;
                        if ((size_t) (p - buf) < *keep)
                                *keep = (size_t) (p - buf);
                        return false;   /* the cut tag runs to the end of buf */
                case TAG_NO:
                        break;
                }
        }
        return false;
}

/* Does buf hold something the daemon acts on?  With ret_keep, buf is one
 * piece of a longer stream: *ret_keep is where the bytes start that must
 * be scanned again with the next piece (a tag or marker cut off). */
static bool xml_may_concern_us(const char *buf, size_t len, size_t *ret_keep) {
        size_t keep = len > SPLIT_KEEP ? len - SPLIT_KEEP : 0;
        size_t *k = ret_keep ? &keep : NULL;

        if (memmem(buf, len, MARK_NS, strlen(MARK_NS)) ||
            scan_tags(buf, len, "<hostdev", false, k) ||
            scan_tags(buf, len, "<interface", true, k))
                return true;
        if (ret_keep)
                *ret_keep = keep;
        return false;
}

/* Read and discard the rest of stdin, so that libvirt's write never meets
 * a closed pipe.  With 'scan', also look for what concerns the daemon,
 * carrying what the end of each read cuts off into the next one.  'tail'
 * holds the bytes already read that must be scanned again. */
static bool drain_stdin(bool scan, const char *tail, size_t tail_len) {
        static char buf[TAG_MAX + CHUNK];
        bool found = false;
        size_t keep = 0;

        if (isatty(STDIN_FILENO))
                return false;

        if (scan && tail_len > TAG_MAX)
                found = true;           /* a start tag longer than we carry: be safe */
        else if (scan && tail_len > 0) {
                memcpy(buf, tail, tail_len);
                keep = tail_len;
        }
        for (;;) {
                ssize_t k = read_some(STDIN_FILENO, buf + keep, CHUNK);

                if (k <= 0)
                        return found;
                if (scan && !found) {
                        size_t n = keep + (size_t) k, from = n;

                        found = xml_may_concern_us(buf, n, &from);
                        if (!found && n - from > TAG_MAX)
                                found = true;
                        keep = found ? 0 : n - from;
                        memmove(buf, buf + from, keep);
                } else
                        keep = 0;
        }
}

/* Read stdin into *ret, up to XML_MAX + 1 bytes.  Returns 0, or a negative
 * errno.  *ret_len > XML_MAX means the XML is too large (the rest is still
 * unread). */
static int read_xml(char **ret, size_t *ret_len) {
        _cleanup_free_ char *buf = NULL;
        size_t len = 0, cap = 0;

        if (isatty(STDIN_FILENO)) {
                *ret = xstrdup("");
                *ret_len = 0;
                return 0;
        }
        for (;;) {
                ssize_t k;

                if (cap - len < CHUNK) {
                        cap = cap == 0 ? CHUNK : cap * 2;
                        if (cap > XML_MAX + 1 + CHUNK)
                                cap = XML_MAX + 1 + CHUNK;
                        buf = xrealloc(buf, cap + 1);
                }
                k = read_some(STDIN_FILENO, buf + len, cap - len);
                if (k < 0)
                        return (int) k;
                if (k == 0)
                        break;
                len += (size_t) k;
                if (len > XML_MAX)
                        break;
        }
        buf[len] = '\0';
        *ret_len = len;
        *ret = TAKE_PTR(buf);
        return 0;
}

/* ---- configuration ----------------------------------------------------- */

static char *strip(char *s) {
        char *e;

        while (*s == ' ' || *s == '\t')
                s++;
        e = s + strlen(s);
        while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
                *--e = '\0';
        return s;
}

static void conf_warn(const char *path, unsigned line, const char *fmt, ...) _printf_(3, 4);
static void conf_warn(const char *path, unsigned line, const char *fmt, ...) {
        va_list ap;

        fprintf(stderr, "pcinuma: %s:%u: ", path, line);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputs(", ignoring\n", stderr);
}

/* Read all of path into a NUL-terminated buffer: with open() and read(),
 * which cost the hook a good deal less than stdio's fopen() and getline().
 * Returns the buffer (free() it) and its length, or NULL with errno set. */
static char *read_small_file(const char *path, size_t *ret_len) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        char *buf = NULL;

        if (fd < 0)
                return NULL;
        int r = read_full_fd(fd, SIZE_MAX, &buf, ret_len);
        if (r < 0) {
                errno = -r;
                return NULL;
        }
        return buf;
}

/* Apply one 'key = value' file.  A bad line is reported and skipped: a
 * typo in this file must never be what stops a VM from starting. */
static void conf_load_file(struct hook_conf *c, const char *path, bool must_exist) {
        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        unsigned lineno = 0;

        text = read_small_file(path, &len);
        if (!text) {
                if (errno != ENOENT || must_exist)
                        fprintf(stderr, "pcinuma: cannot read %s: %s, ignoring\n", path, strerror(errno));
                return;
        }

        for (char *line = text, *end = text + len, *nl; line < end; line = nl ? nl + 1 : end) {
                char *s, *eq, *key, *value;

                nl = memchr(line, '\n', (size_t) (end - line));
                if (nl)
                        *nl = '\0';
                lineno++;
                s = strip(line);
                if (*s == '\0' || *s == '#')
                        continue;
                /* A trailing comment needs white space before its '#'. */
                for (char *h = s + 1; *h; h++)
                        if (*h == '#' && (h[-1] == ' ' || h[-1] == '\t')) {
                                *h = '\0';
                                break;
                        }
                eq = strchr(s, '=');
                if (!eq) {
                        conf_warn(path, lineno, "expected 'key = value'");
                        continue;
                }
                *eq = '\0';
                key = strip(s);
                value = strip(eq + 1);

                if (streq(key, "socket")) {
                        if (value[0] != '/')
                                conf_warn(path, lineno, "socket: '%s' is not an absolute path", value);
                        else if (strlen(value) >= sizeof(c->socket))
                                conf_warn(path, lineno, "socket: the path is longer than %zu bytes", sizeof(c->socket) - 1);
                        else
                                strcpy(c->socket, value);
                } else if (streq(key, "timeout_ms")) {
                        uint64_t v;

                        if (parse_uint(value, 10, MAX_TIMEOUT_MS, &v) < 0 || v < 1)
                                conf_warn(path, lineno, "timeout_ms: '%s' is not a whole number of milliseconds from 1 to %u",
                                          value, MAX_TIMEOUT_MS);
                        else
                                c->timeout_ms = (unsigned) v;
                } else if (streq(key, "on_unreachable")) {
                        if (streq(value, "allow"))
                                c->refuse = false;
                        else if (streq(value, "refuse"))
                                c->refuse = true;
                        else
                                conf_warn(path, lineno, "on_unreachable: '%s' is neither 'allow' nor 'refuse'", value);
                } else
                        conf_warn(path, lineno, "unknown key '%s'", key);
        }
}

static void conf_load(struct hook_conf *c) {
        const char *e;

        *c = (struct hook_conf) {.timeout_ms = DEFAULT_TIMEOUT_MS};
        strcpy(c->socket, PCINUMA_DEFAULT_SOCKET);

        e = getenv("PCINUMA_HOOK_CONF");
        if (e && *e)
                conf_load_file(c, e, true);
        else {
                conf_load_file(c, PCINUMA_DEFAULT_RUN_HOOK_CONF, false);
                conf_load_file(c, PCINUMA_DEFAULT_ETC_HOOK_CONF, false);
        }

        e = getenv("PCINUMA_SOCKET");
        if (e && *e) {
                if (strlen(e) >= sizeof(c->socket))
                        fprintf(stderr, "pcinuma: PCINUMA_SOCKET is longer than %zu bytes, ignoring\n", sizeof(c->socket) - 1);
                else
                        strcpy(c->socket, e);
        }
}

/* ---- talking to the daemon --------------------------------------------- */

/* The verdict when the daemon cannot give one: on_unreachable decides. */
static int unreachable(const struct hook_conf *c, const char *name, const char *phase, const char *reason) {
        fprintf(stderr, "pcinuma: NUMA placement check skipped for domain %s (phase %s): %s; %s (on_unreachable=%s)\n",
                name, phase, reason, c->refuse ? "refusing" : "starting anyway", c->refuse ? "refuse" : "allow");
        return c->refuse ? EXIT_FAILURE : EXIT_SUCCESS;
}

static int ask_daemon(const char *const args[4], const char *xml, size_t xml_len) {
        struct hook_conf conf;
        _cleanup_json_ json_object *answer = NULL;
        _cleanup_free_ char *reason = NULL, *err = NULL;
        struct proto_response resp = {.error = NULL};
        int r;

        conf_load(&conf);

        _cleanup_free_ char *frame = NULL;
        size_t frame_len = 0;
        if (proto_frame_encode_hook(args, xml, xml_len, &frame, &frame_len) < 0)
                return unreachable(&conf, args[0], args[1], "the domain XML is too large to send");
        if (client_call_frame(conf.socket, frame, frame_len, conf.timeout_ms, &answer, &reason) < 0)
                return unreachable(&conf, args[0], args[1], reason);

        if (proto_response_parse(answer, &resp, &err) < 0) {
                (void) set_error(&reason, -EBADMSG, "malformed answer from the daemon: %s", strna(err));
                return unreachable(&conf, args[0], args[1], reason);
        }
        if (resp.error) {
                (void) set_error(&reason, -EPROTO, "the daemon did not serve the request: %s", resp.error);
                proto_response_done(&resp);
                return unreachable(&conf, args[0], args[1], reason);
        }
        if (resp.status) {
                proto_response_done(&resp);
                return unreachable(&conf, args[0], args[1], "malformed answer from the daemon: a status object instead of a verdict");
        }

        r = resp.exit_code == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
        /* libvirt reads stdout only for migrate and restore, where an empty
         * one means "keep the XML as it is"; a failed write there must not
         * pass for success.  In other phases stdout is thrown away. */
        if (resp.stdout_text) {
                int k = write_full_fd(STDOUT_FILENO, resp.stdout_text, strlen(resp.stdout_text));
                if (k < 0 && (streq(args[1], "migrate") || streq(args[1], "restore"))) {
                        fprintf(stderr, "pcinuma: cannot write the domain XML to stdout: %s\n", strerror(-k));
                        r = EXIT_FAILURE;
                }
        }
        if (resp.stderr_text)
                (void) write_full_fd(STDERR_FILENO, resp.stderr_text, strlen(resp.stderr_text));
        proto_response_done(&resp);
        return r;
}

int main(int argc, char *argv[]) {
        const char *args[4];
        _cleanup_free_ char *xml = NULL;
        size_t xml_len = 0;
        int r;

        if (argc == 2 && streq(argv[1], "--version")) {
                puts("pcinuma-hook " PCINUMA_VERSION);
                return EXIT_SUCCESS;
        }
        if (argc == 2 && streq(argv[1], "--help")) {
                puts("Usage: pcinuma-hook NAME PHASE SUBPHASE EXTRA < domain.xml\n"
                     "       pcinuma-hook --help | --version\n"
                     "The libvirt qemu hook of pcinuma; see pcinumad(8).\n"
                     "Settings: " PCINUMA_DEFAULT_RUN_HOOK_CONF ", then " PCINUMA_DEFAULT_ETC_HOOK_CONF " (or $PCINUMA_HOOK_CONF);\n"
                     "$PCINUMA_SOCKET overrides the socket path.");
                return EXIT_SUCCESS;
        }

        for (size_t i = 0; i < ELEMENTSOF(args); i++)
                args[i] = (int) i + 1 < argc && argv[i + 1] ? argv[i + 1] : "";

        /* A daemon that closes the connection early must not kill us. */
        (void) signal(SIGPIPE, SIG_IGN);

        /* Phases the daemon does not act on, and the hooks of a session
         * libvirtd, exit 0 quietly. */
        if (!phase_needs_daemon(args[1]) || !serves_this_libvirtd()) {
                (void) drain_stdin(false, NULL, 0);
                return EXIT_SUCCESS;
        }

        r = read_xml(&xml, &xml_len);
        if (r < 0) {
                struct hook_conf conf;
                _cleanup_free_ char *reason = xasprintf("cannot read the domain XML on stdin: %s", strerror(-r));

                conf_load(&conf);
                return unreachable(&conf, args[0], args[1], reason);
        }

        if (xml_len > XML_MAX) {
                /* Refuse only what we would have sent: a huge XML that has
                 * nothing for pcinuma is none of our business. */
                size_t keep = 0;
                bool concerns = xml_may_concern_us(xml, xml_len, &keep);

                concerns = drain_stdin(!concerns, xml + keep, xml_len - keep) || concerns;
                if (!concerns)
                        return EXIT_SUCCESS;
                fprintf(stderr, "pcinuma: domain XML on stdin is larger than 4 MiB (domain %s, phase %s), refusing\n",
                        args[0], args[1]);
                return EXIT_FAILURE;
        }

        if (!xml_may_concern_us(xml, xml_len, NULL))
                return EXIT_SUCCESS;

        return ask_daemon(args, xml, xml_len);
}

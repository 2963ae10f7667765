/* The stand-in table of a stand_ins build (standins.h): its strict parser
 * and its reader.  Compiled only when meson's stand_ins option is true. */
#include "standins.h"

#include <ctype.h>
#include <fcntl.h>
#include <json.h>

#include "fileio.h"
#include "util.h"

struct standins *standins_free(struct standins *s) {
        if (!s)
                return NULL;
        free(s->entries);
        free(s->source);
        free(s);
        return NULL;
}

/* A key or value as it may appear in a message: at most 40 bytes, control
 * characters and non-ASCII bytes as '?'. */
static char *shown(const char *s) {
        size_t n = strlen(s);
        bool cut = n > 40;
        char *r = xstrndup(s, cut ? 40 : n);
        for (char *p = r; *p; p++)
                if ((unsigned char) *p < 0x20 || (unsigned char) *p >= 0x7f)
                        *p = '?';
        if (cut) {
                char *t = xasprintf("%s...", r);
                free(r);
                r = t;
        }
        return r;
}

/* "52:54:00:5A:00:01" -> "52:54:00:5a:00:01" in out; -EINVAL unless six
 * pairs of hex digits separated by ':'. */
static int normalize_mac(const char *s, char out[18]) {
        if (strlen(s) != 17)
                return -EINVAL;
        for (int i = 0; i < 17; i++) {
                if (i % 3 == 2) {
                        if (s[i] != ':')
                                return -EINVAL;
                        out[i] = ':';
                } else {
                        if (!isxdigit((unsigned char) s[i]))
                                return -EINVAL;
                        out[i] = (char) tolower((unsigned char) s[i]);
                }
        }
        out[17] = 0;
        return 0;
}

/* Decode one JSON string token (quotes included) as json-c does. */
static char *decode_string(const char *token, size_t len) {
        struct json_tokener *tok = json_tokener_new();
        if (!tok)
                abort();
        json_object *o = json_tokener_parse_ex(tok, token, (int) len);
        if (!o && json_tokener_get_error(tok) == json_tokener_continue)
                o = json_tokener_parse_ex(tok, "", 1);
        json_tokener_free(tok);
        char *r = json_object_get_type(o) == json_type_string ? xstrdup(json_object_get_string(o)) : xstrndup(token, len);
        (void) json_object_put(o);
        return r;
}

/* The keys of the top-level object as written, in order, decoded as json-c
 * decodes them.  json-c keeps only the last of two equal keys, without a
 * word; this list keeps them all, so a repeated entry can be named.  The
 * text is valid JSON whose top level is an object (json-c has said so). */
static char **raw_keys(const char *buf, size_t len, size_t *ret_n) {
        char **keys = NULL;
        size_t n = 0;
        int depth = 0;
        bool expect_key = false;

        for (size_t i = 0; i < len; i++) {
                char ch = buf[i];
                if (ch == '{' || ch == '[') {
                        depth++;
                        expect_key = depth == 1 && ch == '{';
                } else if (ch == '}' || ch == ']')
                        depth--;
                else if (ch == ',' && depth == 1)
                        expect_key = true;
                else if (ch == ':' && depth == 1)
                        expect_key = false;
                else if (ch == '"') {
                        size_t start = i;
                        for (i++; i < len && buf[i] != '"'; i++)
                                if (buf[i] == '\\')
                                        i++;
                        if (depth == 1 && expect_key)
                                *GROW(keys, n) = decode_string(buf + start, i - start + 1);
                }
        }
        *ret_n = n;
        return keys;
}

static void free_keys(char **keys, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(keys[i]);
        free(keys);
}

static const char *json_type_word(json_object *o) {
        switch (json_object_get_type(o)) {
        case json_type_null:
                return "null";
        case json_type_boolean:
                return "a boolean";
        case json_type_double:
        case json_type_int:
                return "a number";
        case json_type_object:
                return "an object";
        case json_type_array:
                return "an array";
        case json_type_string:
                return "a string";
        }
        return "something else";
}

static int check_entries(struct standins *s, json_object *root, char **keys, size_t n_keys, char **ret_error) {
        const char *src = s->source;
        for (size_t i = 0; i < n_keys; i++) {
                _cleanup_free_ char *k = shown(keys[i]);
                struct standin e = {0};
                if (normalize_mac(keys[i], e.mac) < 0)
                        return set_error(ret_error, -EINVAL,
                                         "%s: entry \"%s\": not a MAC address (expected six pairs of hex digits "
                                         "separated by ':', such as 52:54:00:5a:00:01)", src, k);
                if (strtol(e.mac, NULL, 16) & 1)
                        return set_error(ret_error, -EINVAL,
                                         "%s: entry \"%s\": a multicast MAC address, which no NIC has "
                                         "(the first octet must be even)", src, k);
                for (size_t j = 0; j < s->n; j++)
                        if (streq(s->entries[j].mac, e.mac)) {
                                _cleanup_free_ char *first = shown(keys[j]);
                                return set_error(ret_error, -EINVAL,
                                                 "%s: entry \"%s\": MAC address given twice (also as \"%s\")", src, k, first);
                        }
                json_object *v = NULL;
                if (!json_object_object_get_ex(root, keys[i], &v) || json_object_get_type(v) != json_type_string)
                        return set_error(ret_error, -EINVAL,
                                         "%s: entry \"%s\": the value must be a host PCI address as a string "
                                         "(\"0000:21:00.0\"), not %s", src, k, json_type_word(v));
                const char *bdf = json_object_get_string(v);
                _cleanup_free_ char *b = shown(bdf);
                if (strchr(bdf, ':') == strrchr(bdf, ':') || pci_addr_parse(bdf, &e.host) < 0)
                        return set_error(ret_error, -EINVAL,
                                         "%s: entry \"%s\": \"%s\" is not a host PCI address (expected "
                                         "dddd:bb:ss.f, such as 0000:21:00.0)", src, k, b);
                for (size_t j = 0; j < s->n; j++)
                        if (pci_addr_eq(&s->entries[j].host, &e.host)) {
                                char a[PCI_ADDR_STRLEN];
                                return set_error(ret_error, -EINVAL,
                                                 "%s: entry \"%s\": host device %s is given twice (also to %s)",
                                                 src, k, pci_addr_format(&e.host, a), s->entries[j].mac);
                        }
                *GROW(s->entries, s->n) = e;
        }
        return 0;
}

int standins_parse(const char *buf, size_t len, const char *source, struct standins **ret, char **ret_error) {
        const char *src = source ? source : "stand-in table";

        if (len > STANDINS_FILE_MAX)
                return set_error(ret_error, -EINVAL, "%s: too large (%zu bytes, the limit is %u)", src, len, STANDINS_FILE_MAX);
        if (memchr(buf, 0, len))
                return set_error(ret_error, -EINVAL, "%s: holds a NUL byte; expected a JSON object {\"MAC\": \"host BDF\", ...}", src);

        struct json_tokener *tok = json_tokener_new();
        if (!tok)
                abort();
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
        json_object *root = json_tokener_parse_ex(tok, buf, (int) len);
        enum json_tokener_error e = json_tokener_get_error(tok);
        size_t offset = json_tokener_get_parse_end(tok);
        if (e == json_tokener_continue) {
                root = json_tokener_parse_ex(tok, "", 1);
                e = json_tokener_get_error(tok);
                offset = len;
        }
        json_tokener_free(tok);
        if (e != json_tokener_success) {
                (void) json_object_put(root);
                unsigned line = 1;
                for (size_t i = 0; i < offset && i < len; i++)
                        line += buf[i] == '\n';
                return set_error(ret_error, -EINVAL, "%s: line %u: JSON syntax error: %s; expected a JSON object "
                                 "{\"MAC\": \"host BDF\", ...}", src, line, json_tokener_error_desc(e));
        }
        if (json_object_get_type(root) != json_type_object) {
                int r = set_error(ret_error, -EINVAL, "%s: expected a JSON object {\"MAC\": \"host BDF\", ...}, not %s",
                                  src, json_type_word(root));
                (void) json_object_put(root);
                return r;
        }

        size_t n_keys = 0;
        char **keys = raw_keys(buf, len, &n_keys);
        struct standins *s = xcalloc(1, sizeof(*s));
        s->source = xstrdup(src);
        int r = check_entries(s, root, keys, n_keys, ret_error);
        free_keys(keys, n_keys);
        (void) json_object_put(root);
        if (r < 0) {
                standins_free(s);
                return r;
        }
        *ret = s;
        return 0;
}

int standins_load_file(const char *path, struct standins **ret, char **ret_error) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return set_error(ret_error, -errno, "%s: %s", path, strerror(errno));
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        int r = read_full_fd(fd, STANDINS_FILE_MAX, &buf, &len);
        if (r == -EFBIG)
                return set_error(ret_error, -EINVAL, "%s: larger than the %u byte limit", path, STANDINS_FILE_MAX);
        if (r < 0)
                return set_error(ret_error, r, "%s: %s", path, strerror(-r));
        return standins_parse(buf, len, path, ret, ret_error);
}

const struct standin *standins_find(const struct standins *s, const char *mac) {
        char m[18];
        if (!s || !mac || normalize_mac(mac, m) < 0)
                return NULL;
        for (size_t i = 0; i < s->n; i++)
                if (streq(s->entries[i].mac, m))
                        return &s->entries[i];
        return NULL;
}

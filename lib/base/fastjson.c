/* A fast JSON reader and string writer (fastjson.h), for the framing's
 * decoder and the hook's encoder: UTF-8 checks and eight-bytes-at-a-time
 * scanning shared by both.  Pure: no I/O. */
#include "fastjson.h"

#include <sys/types.h>

#include "json-cleanup.h"

/* ---- bytes ------------------------------------------------------------ */

/* UTF-8, and reading eight bytes at a time: the decoder's fast path and
 * the hook's encoder share these. */

/* The length of the UTF-8 sequence at s[i], or 0 if none starts there. */
static size_t utf8_seq(const unsigned char *s, size_t i, size_t n) {
        unsigned char c = s[i];
        size_t len;
        uint32_t cp;
        if (c < 0x80)
                return 1;
        if ((c & 0xe0) == 0xc0) {
                len = 2;
                cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
                len = 3;
                cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
                len = 4;
                cp = c & 0x07;
        } else
                return 0;
        if (i + len > n)
                return 0;
        for (size_t k = 1; k < len; k++) {
                if ((s[i + k] & 0xc0) != 0x80)
                        return 0;
                cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
                return 0;
        return len;
}

#define BYTES_01 UINT64_C(0x0101010101010101)
#define BYTES_80 UINT64_C(0x8080808080808080)

/* Eight bytes from p, the first one in the low-order byte. */
static inline uint64_t load_le64(const unsigned char *p) {
        uint64_t w;
        memcpy(&w, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
#endif
        return w;
}

/* For the eight bytes of w (as load_le64() gives them): the high bit of
 * each byte that needs escaping in a JSON string (below 0x20, '"' or '\\')
 * and, with check_high, of each byte of 0x80 or more.  A borrow can flag
 * a byte above one that is really flagged, never below: the lowest flag
 * is exact. */
static inline uint64_t word_flags(uint64_t w, uint64_t check_high) {
        uint64_t special = ((w - BYTES_01 * 0x20) | ((w ^ BYTES_01 * '"') - BYTES_01) | ((w ^ BYTES_01 * '\\') - BYTES_01)) & ~w;
        return (special | (w & check_high)) & BYTES_80;
}

static bool is_json_space(char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* ---- a fast path for well-formed payloads ------------------------------ */

/* json-c's tokener reads a byte at a time through its state machine: for
 * a hook request, whose 12-16 KB domain XML is one JSON string, that was
 * more than a tenth of the daemon's work per request.  fast_parse() reads
 * the common case, an object of strings, small integers, arrays and
 * objects in plain RFC 8259 form, and builds the very objects the tokener
 * builds; a string is read eight bytes at a time between escapes.
 * Anything else makes it give up (NULL) and the tokener reads the payload
 * as before, errors and their messages included: a number with a sign, a
 * fraction, an exponent or more than 18 digits; true, false, null; a \u
 * escape other than \u0001-\u007f; a control character in a string; a
 * byte that is not UTF-8 (RFC 3629, stricter than json-c's check); a key
 * given twice; nesting deeper than FAST_DEPTH; and every error. */
#define FAST_DEPTH 16

struct fast_parser {
        const char *p, *end;
        char *scratch;          /* a decoded string; room for the whole payload + 8 */
};

static void fast_skip_space(struct fast_parser *f) {
        while (f->p < f->end && is_json_space(*f->p))
                f->p++;
}

static int hex_digit(char c) {
        return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* After a backslash at *pp (end: the payload's end): the escaped byte,
 * written to *out, with *pp moved past the escape; -1 for an escape the
 * fast path leaves to the tokener. */
static int fast_escape(const unsigned char **pp, const unsigned char *end, char *out) {
        static const char simple[] = "\"\\/bfnrt", decoded[] = "\"\\/\b\f\n\r\t";
        const unsigned char *p = *pp;

        if (p == end)
                return -1;
        const char *k = *p != '\0' ? strchr(simple, *p) : NULL;
        if (k) {
                *out = decoded[k - simple];
                *pp = p + 1;
                return 0;
        }
        if (*p != 'u')
                return -1;
        p++;
        if (end - p < 4 || p[0] != '0' || p[1] != '0')
                return -1;
        int hi = hex_digit((char) p[2]), lo = hex_digit((char) p[3]);
        if (hi < 0 || hi > 7 || lo < 0 || (hi == 0 && lo == 0))
                return -1;
        *out = (char) (hi << 4 | lo);
        *pp = p + 4;
        return 0;
}

/* At a '"': decode the string into f->scratch (NUL-terminated); its
 * length, or -1. */
static ssize_t fast_string(struct fast_parser *f) {
        const unsigned char *p = (const unsigned char *) f->p + 1, *end = (const unsigned char *) f->end;
        char *out = f->scratch;

        for (;;) {
                if (end - p >= 8) {
                        /* '"', '\\', control characters and non-ASCII stop a word */
                        uint64_t m = word_flags(load_le64(p), BYTES_80);
                        size_t k = m ? (size_t) __builtin_ctzll(m) / 8 : 8;
                        memcpy(out, p, 8);
                        out += k;
                        p += k;
                        if (k == 8)
                                continue;
                }
                if (p == end)
                        return -1;
                unsigned char c = *p;
                if (c == '"') {
                        f->p = (const char *) p + 1;
                        *out = '\0';
                        return out - f->scratch;
                }
                if (c < 0x20)
                        return -1;
                if (c >= 0x80) {
                        size_t l = utf8_seq(p, 0, (size_t) (end - p));
                        if (!l)
                                return -1;
                        memcpy(out, p, l);
                        out += l;
                        p += l;
                        continue;
                }
                p++;
                if (c != '\\')
                        *out++ = (char) c;
                else if (fast_escape(&p, end, out++) < 0)
                        return -1;
        }
}

static json_object *fast_value(struct fast_parser *f, unsigned depth);

static json_object *fast_object(struct fast_parser *f, unsigned depth) {
        json_object *o = json_object_new_object();
        f->p++;         /* '{' */
        fast_skip_space(f);
        if (f->p < f->end && *f->p == '}') {
                f->p++;
                return o;
        }
        for (;;) {
                if (f->p == f->end || *f->p != '"' || fast_string(f) < 0)
                        break;
                _cleanup_free_ char *key = xstrdup(f->scratch);
                fast_skip_space(f);
                if (f->p == f->end || *f->p != ':')
                        break;
                f->p++;
                fast_skip_space(f);
                json_object *v = fast_value(f, depth);
                if (!v)
                        break;
                if (json_object_object_get_ex(o, key, NULL)) {
                        json_object_put(v);
                        break;
                }
                json_object_object_add(o, key, v);
                fast_skip_space(f);
                if (f->p == f->end)
                        break;
                if (*f->p == '}') {
                        f->p++;
                        return o;
                }
                if (*f->p != ',')
                        break;
                f->p++;
                fast_skip_space(f);
        }
        json_object_put(o);
        return NULL;
}

static json_object *fast_array(struct fast_parser *f, unsigned depth) {
        json_object *a = json_object_new_array();
        f->p++;         /* '[' */
        fast_skip_space(f);
        if (f->p < f->end && *f->p == ']') {
                f->p++;
                return a;
        }
        for (;;) {
                json_object *v = fast_value(f, depth);
                if (!v)
                        break;
                json_object_array_add(a, v);
                fast_skip_space(f);
                if (f->p == f->end)
                        break;
                if (*f->p == ']') {
                        f->p++;
                        return a;
                }
                if (*f->p != ',')
                        break;
                f->p++;
                fast_skip_space(f);
        }
        json_object_put(a);
        return NULL;
}

static json_object *fast_value(struct fast_parser *f, unsigned depth) {
        if (f->p == f->end || depth >= FAST_DEPTH)
                return NULL;
        char c = *f->p;
        if (c == '{')
                return fast_object(f, depth + 1);
        if (c == '[')
                return fast_array(f, depth + 1);
        if (c == '"') {
                ssize_t n = fast_string(f);
                return n < 0 ? NULL : json_object_new_string_len(f->scratch, (int) n);
        }
        if (c >= '0' && c <= '9') {
                int64_t v = 0;
                const char *start = f->p;
                while (f->p < f->end && *f->p >= '0' && *f->p <= '9' && f->p - start < 18)
                        v = v * 10 + (*f->p++ - '0');
                /* No leading zero, and a delimiter after the digits. */
                if ((*start == '0' && f->p - start > 1) || f->p == f->end ||
                    !(is_json_space(*f->p) || *f->p == ',' || *f->p == '}' || *f->p == ']'))
                        return NULL;
                return json_object_new_int64(v);
        }
        return NULL;
}

/* The payload's object, or NULL if the fast path gives up. */
static json_object *fast_parse(const char *buf, size_t len) {
        _cleanup_free_ char *scratch = xmalloc(len + 8);
        struct fast_parser f = { .p = buf, .end = buf + len, .scratch = scratch };

        fast_skip_space(&f);
        if (f.p == f.end || *f.p != '{')
                return NULL;
        json_object *o = fast_value(&f, 0);
        if (!o)
                return NULL;
        fast_skip_space(&f);
        if (f.p != f.end) {
                json_object_put(o);
                return NULL;
        }
        return o;
}

/* The tokener failed with jerr at offset end: when it is json-c's generic
 * "unexpected character" after a complete value, say that the payload has
 * trailing bytes; else report the tokener's error. */
static int tokener_error(const char *buf, size_t len, enum json_tokener_error jerr, size_t end, char **ret_error) {
        if (jerr == json_tokener_error_parse_unexpected && end > 0 && end < len) {
                json_tokener *t2 = json_tokener_new();
                json_object *prefix = NULL;

                if (t2) {
                        json_tokener_set_flags(t2, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
                        prefix = json_tokener_parse_ex(t2, buf, (int) end);
                        if (!prefix && json_tokener_get_error(t2) == json_tokener_continue)
                                /* a bare number needs a terminator */
                                prefix = json_tokener_parse_ex(t2, "", 1);
                        json_tokener_free(t2);
                }
                if (prefix) {
                        json_object_put(prefix);
                        /* count the white space after the value too */
                        while (end > 0 && is_json_space(buf[end - 1]))
                                end--;
                        return set_error(ret_error, -EBADMSG,
                                         "payload has %zu trailing bytes after the JSON value", len - end);
                }
        }
        return set_error(ret_error, -EBADMSG, "payload is not JSON: %s at offset %zu",
                         json_tokener_error_desc(jerr), end);
}

/* The NUL after the payload is handed to the tokener too, so that a bare
 * scalar such as "123" completes and is reported as "not an object"
 * rather than as truncated. */
int fastjson_parse_object(const char *buf, size_t len, json_object **ret, char **ret_error) {
        _cleanup_json_ json_object *o = NULL;
        enum json_tokener_error jerr;
        json_tokener *tok;
        const char *nul;
        size_t end;

        nul = memchr(buf, '\0', len);
        if (nul)
                return set_error(ret_error, -EBADMSG, "payload is not JSON: NUL byte at offset %zu", (size_t) (nul - buf));

        o = fast_parse(buf, len);
        if (o) {
                *ret = TAKE_PTR(o);
                return 0;
        }

        tok = json_tokener_new();
        if (!tok)
                return set_error(ret_error, -ENOMEM, "out of memory");
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
        o = json_tokener_parse_ex(tok, buf, (int) len + 1);
        jerr = json_tokener_get_error(tok);
        end = json_tokener_get_parse_end(tok);
        json_tokener_free(tok);

        /* A JSON null parses successfully to a NULL object. */
        if (jerr == json_tokener_success && !o)
                return set_error(ret_error, -EBADMSG, "payload is not a JSON object (it is a JSON null)");
        if (jerr != json_tokener_success)
                return tokener_error(buf, len, jerr, end, ret_error);

        /* Defensive: the strict tokener rejects trailing garbage itself,
         * but make sure nothing but white space follows the value. */
        for (size_t i = end; i < len; i++)
                if (!is_json_space(buf[i]))
                        return set_error(ret_error, -EBADMSG,
                                         "payload has %zu trailing bytes after the JSON value", len - i);

        if (!json_object_is_type(o, json_type_object))
                return set_error(ret_error, -EBADMSG, "payload is not a JSON object (it is a JSON %s)",
                                 json_type_to_name(json_object_get_type(o)));

        *ret = TAKE_PTR(o);
        return 0;
}

/* ---- writing ------------------------------------------------------------ */

/* Bytes a byte takes inside a JSON string (RFC 8259): 1, 2 for the short
 * escapes, 6 for \u00XX. */
static const uint8_t json_esc_len[256] = {
        6, 6, 6, 6, 6, 6, 6, 6, 6, 2, 2, 6, 6, 2, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6,
        1, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
        1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1,
        1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
        1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
        1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
        1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
        1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
};

/* Write the escape of c, a byte json_esc_len[] gives more than 1, at out;
 * returns the end. */
static char *put_escape(char *out, unsigned char c) {
        static const char hex[] = "0123456789abcdef";

        *out++ = '\\';
        switch (c) {
        case '"':
        case '\\':
                *out++ = (char) c;
                break;
        case '\n':
                *out++ = 'n';
                break;
        case '\t':
                *out++ = 't';
                break;
        case '\r':
                *out++ = 'r';
                break;
        default:
                memcpy(out, "u00", 3);
                out[3] = hex[c >> 4];
                out[4] = hex[c & 15];
                out += 5;
                break;
        }
        return out;
}

/* Write s[0..n) as a JSON string (RFC 8259 escaping; UTF-8 passes through
 * as is) at out, which has room for FASTJSON_ESCAPE_MAX(n) bytes;
 * returns the end.
 * Bytes that need no escaping, most of a domain XML, are copied eight at
 * a time.  With check_utf8 they must also be UTF-8 (RFC 3629): if they
 * are not, NULL is returned and *ret_bad is the offset of the first byte
 * that breaks it. */
char *fastjson_escape(char *out, const char *s, size_t n, bool check_utf8, long *ret_bad) {
        const unsigned char *u = (const unsigned char *) s;
        const uint64_t check_high = check_utf8 ? BYTES_80 : 0;
        size_t i = 0;

        *out++ = '"';
        while (i < n) {
                if (n - i >= 8) {
                        /* Copy the word whole (out has room: at most 6 bytes
                         * per input byte), keep what precedes the first
                         * byte that needs a look. */
                        uint64_t m = word_flags(load_le64(u + i), check_high);
                        size_t k = m ? (size_t) __builtin_ctzll(m) / 8 : 8;
                        memcpy(out, u + i, 8);
                        out += k;
                        i += k;
                        if (k == 8)
                                continue;
                }
                unsigned char c = u[i];
                if (c >= 0x80) {
                        size_t l = check_utf8 ? utf8_seq(u, i, n) : 1;
                        if (!l) {
                                *ret_bad = (long) i;
                                return NULL;
                        }
                        memcpy(out, u + i, l);
                        out += l;
                        i += l;
                        continue;
                }
                i++;
                if (json_esc_len[c] == 1)
                        *out++ = (char) c;
                else
                        out = put_escape(out, c);
        }
        *out++ = '"';
        return out;
}

/* A copy of s[0..n) with every byte that breaks UTF-8 replaced by U+FFFD,
 * so it can travel in JSON; *ret_len gets its length. */
char *utf8_sanitize(const char *s, size_t n, size_t *ret_len) {
        struct strbuf b = {0};
        for (size_t i = 0; i < n;) {
                size_t l = utf8_seq((const unsigned char *) s, i, n);
                if (l) {
                        strbuf_appendn(&b, s + i, l);
                        i += l;
                } else {
                        strbuf_append(&b, "\xef\xbf\xbd");
                        i++;
                }
        }
        *ret_len = b.len;
        return strbuf_steal(&b);
}

/* The hook protocol (docs/design.md §9): frame encoding, an incremental frame
 * decoder, and validation of request and response objects.  Pure: no I/O.
 * Compiled into pcinumad, pcinumactl and (on its own, with util.c)
 * pcinuma-hook. */
#include "protocol.h"

#include <inttypes.h>

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

/* ---- frames ------------------------------------------------------------ */

int proto_frame_encode(json_object *o, char **ret, size_t *ret_len) {
        size_t len = 0;
        const char *s;
        char *buf;

        if (!o || !ret || !ret_len)
                return -EINVAL;

        s = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
        if (!s)
                return -ENOMEM;
        if (len == 0 || len > PROTO_MAX_PAYLOAD)
                return -EMSGSIZE;

        buf = xmalloc(PROTO_HEADER_SIZE + len);
        buf[0] = (char) ((len >> 24) & 0xff);
        buf[1] = (char) ((len >> 16) & 0xff);
        buf[2] = (char) ((len >> 8) & 0xff);
        buf[3] = (char) (len & 0xff);
        memcpy(buf + PROTO_HEADER_SIZE, s, len);

        *ret = buf;
        *ret_len = PROTO_HEADER_SIZE + len;
        return 0;
}

void proto_decoder_reset(struct proto_decoder *d) {
        if (!d)
                return;
        free(d->payload);
        *d = (struct proto_decoder) {.header_len = 0};
}

int proto_decoder_feed_all(struct proto_decoder *d, const void *data, size_t n,
                           void (*handle)(json_object *o, void *userdata), void *userdata, char **ret_error) {
        const char *p = data;
        size_t off = 0;
        while (off < n) {
                size_t used = 0;
                json_object *o = NULL;
                int r = proto_decoder_feed(d, p + off, n - off, &used, &o, ret_error);
                if (r < 0) {
                        proto_decoder_reset(d);
                        return r;
                }
                off += used;
                if (r == 0)
                        break;
                handle(o, userdata);
                json_object_put(o);
        }
        return 0;
}

bool proto_decoder_busy(const struct proto_decoder *d) {
        return d && (d->header_len > 0 || d->payload_have > 0);
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
                if (c != '\\') {
                        *out++ = (char) c;
                        continue;
                }
                if (p == end)
                        return -1;
                switch (*p++) {
                case '"':
                        *out++ = '"';
                        break;
                case '\\':
                        *out++ = '\\';
                        break;
                case '/':
                        *out++ = '/';
                        break;
                case 'b':
                        *out++ = '\b';
                        break;
                case 'f':
                        *out++ = '\f';
                        break;
                case 'n':
                        *out++ = '\n';
                        break;
                case 'r':
                        *out++ = '\r';
                        break;
                case 't':
                        *out++ = '\t';
                        break;
                case 'u': {
                        if (end - p < 4 || p[0] != '0' || p[1] != '0')
                                return -1;
                        int hi = hex_digit((char) p[2]), lo = hex_digit((char) p[3]);
                        if (hi < 0 || hi > 7 || lo < 0 || (hi == 0 && lo == 0))
                                return -1;
                        *out++ = (char) (hi << 4 | lo);
                        p += 4;
                        break;
                }
                default:
                        return -1;
                }
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

/* Parse a complete payload of len bytes (buf[len] is a NUL the decoder
 * added).  The NUL is handed to the tokener too, so that a bare scalar
 * such as "123" completes and is reported as "not an object" rather than
 * as truncated. */
static int payload_parse(const char *buf, size_t len, json_object **ret, char **ret_error) {
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

        if (jerr != json_tokener_success) {
                /* json-c reports bytes after a complete value as a generic
                 * "unexpected character"; say what it is. */
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

int proto_decoder_feed(struct proto_decoder *d, const void *data, size_t n, size_t *consumed,
                       json_object **ret, char **ret_error) {
        const uint8_t *p = data;
        size_t used = 0;
        int r;

        if (consumed)
                *consumed = 0;
        if (!d || !ret || (n > 0 && !data))
                return set_error(ret_error, -EINVAL, "invalid arguments");

        while (d->header_len < PROTO_HEADER_SIZE) {
                if (used == n) {
                        if (consumed)
                                *consumed = used;
                        return 0;
                }
                d->header[d->header_len++] = p[used++];
                if (d->header_len == PROTO_HEADER_SIZE) {
                        uint32_t len = (uint32_t) d->header[0] << 24 | (uint32_t) d->header[1] << 16 |
                                       (uint32_t) d->header[2] << 8 | (uint32_t) d->header[3];

                        if (consumed)
                                *consumed = used;
                        /* Refuse from the header alone, before allocating. */
                        if (len == 0)
                                return set_error(ret_error, -EMSGSIZE, "frame length 0");
                        if (len > PROTO_MAX_PAYLOAD)
                                return set_error(ret_error, -EMSGSIZE,
                                                 "frame of %" PRIu32 " bytes exceeds the %u byte limit",
                                                 len, PROTO_MAX_PAYLOAD);
                        d->payload_len = len;
                        d->payload = xmalloc((size_t) len + 1);
                        d->payload_have = 0;
                }
        }

        if (n - used > 0) {
                size_t want = d->payload_len - d->payload_have;
                size_t take = n - used < want ? n - used : want;

                memcpy(d->payload + d->payload_have, p + used, take);
                d->payload_have += take;
                used += take;
        }
        if (consumed)
                *consumed = used;
        if (d->payload_have < d->payload_len)
                return 0;

        d->payload[d->payload_len] = '\0';
        r = payload_parse(d->payload, d->payload_len, ret, ret_error);
        if (r < 0)
                return r;

        /* Ready for the next frame. */
        proto_decoder_reset(d);
        return 1;
}

/* ---- common field helpers -------------------------------------------- */

static int check_version(json_object *o, const char *who, char **ret_error) {
        json_object *v;
        int64_t version;

        if (!json_object_object_get_ex(o, "version", &v) || !v)
                return set_error(ret_error, -EPROTO, "missing 'version'");
        if (!json_object_is_type(v, json_type_int))
                return set_error(ret_error, -EPROTO, "'version' must be an integer");
        version = json_object_get_int64(v);
        if (version != PROTO_VERSION)
                return set_error(ret_error, -EPROTO, "unsupported protocol version %" PRId64 ", this %s speaks %d",
                                 version, who, PROTO_VERSION);
        return 0;
}

/* Copy an optional string member: *ret stays NULL if the member is absent
 * or null. */
static int get_opt_string(json_object *o, const char *key, char **ret, size_t *ret_len, char **ret_error) {
        json_object *v;
        size_t len;
        char *s;

        if (!json_object_object_get_ex(o, key, &v) || !v)
                return 0;
        if (!json_object_is_type(v, json_type_string))
                return set_error(ret_error, -EPROTO, "'%s' must be a string", key);

        len = (size_t) json_object_get_string_len(v);
        s = xmalloc(len + 1);
        memcpy(s, json_object_get_string(v), len);
        s[len] = '\0';
        *ret = s;
        if (ret_len)
                *ret_len = len;
        return 0;
}

/* ---- requests ---------------------------------------------------------- */

void proto_request_done(struct proto_request *r) {
        if (!r)
                return;
        for (size_t i = 0; i < ELEMENTSOF(r->argv); i++)
                free(r->argv[i]);
        free(r->xml);
        *r = (struct proto_request) {.xml = NULL};
}

static int parse_hook_request(json_object *o, struct proto_request *r, char **ret_error) {
        json_object *a;
        size_t n;
        int k;

        if (!json_object_object_get_ex(o, "argv", &a) || !a)
                return set_error(ret_error, -EPROTO, "missing 'argv'");
        if (!json_object_is_type(a, json_type_array))
                return set_error(ret_error, -EPROTO, "'argv' must be an array of 1 to 4 strings");
        n = json_object_array_length(a);
        if (n < 1 || n > ELEMENTSOF(r->argv))
                return set_error(ret_error, -EPROTO, "'argv' must be an array of 1 to 4 strings");
        for (size_t i = 0; i < n; i++) {
                json_object *e = json_object_array_get_idx(a, i);

                if (!e || !json_object_is_type(e, json_type_string))
                        return set_error(ret_error, -EPROTO, "'argv' must be an array of 1 to 4 strings");
        }
        for (size_t i = 0; i < ELEMENTSOF(r->argv); i++)
                r->argv[i] = xstrdup(i < n ? json_object_get_string(json_object_array_get_idx(a, i)) : "");

        k = get_opt_string(o, "xml", &r->xml, &r->xml_len, ret_error);
        if (k < 0)
                return k;
        json_object *bad;
        if (json_object_object_get_ex(o, "xml_invalid_utf8", &bad) && bad) {
                if (!json_object_is_type(bad, json_type_int) || json_object_get_int64(bad) < 0)
                        return set_error(ret_error, -EPROTO, "'xml_invalid_utf8' must be a byte offset");
                r->xml_not_utf8 = true;
                r->xml_invalid_utf8 = (long) json_object_get_int64(bad);
        }
        return 0;
}

int proto_request_parse(json_object *o, struct proto_request *ret, char **ret_error) {
        struct proto_request r = {.xml = NULL};
        json_object *t;
        const char *type;
        int k;

        if (!ret)
                return set_error(ret_error, -EINVAL, "invalid arguments");
        if (!o || !json_object_is_type(o, json_type_object))
                return set_error(ret_error, -EPROTO, "request is not a JSON object");

        k = check_version(o, "daemon", ret_error);
        if (k < 0)
                return k;

        if (!json_object_object_get_ex(o, "type", &t) || !t)
                return set_error(ret_error, -EPROTO, "missing 'type'");
        if (!json_object_is_type(t, json_type_string))
                return set_error(ret_error, -EPROTO, "'type' must be a string");
        type = json_object_get_string(t);

        if (streq(type, "hook")) {
                r.type = PROTO_REQUEST_HOOK;
                k = parse_hook_request(o, &r, ret_error);
                if (k < 0) {
                        proto_request_done(&r);
                        return k;
                }
        } else if (streq(type, "status")) {
                r.type = PROTO_REQUEST_STATUS;
                /* argv is documented as never NULL after a parse. */
                for (size_t i = 0; i < ELEMENTSOF(r.argv); i++)
                        r.argv[i] = xstrdup("");
        } else
                return set_error(ret_error, -EPROTO, "unknown request type '%s'", type);

        *ret = r;
        return 0;
}

json_object *proto_request_new_hook(const char *const argv[4], const char *xml, size_t xml_len) {
        json_object *o = json_object_new_object();
        json_object *a = json_object_new_array_ext(4);

        json_object_object_add(o, "version", json_object_new_int(PROTO_VERSION));
        json_object_object_add(o, "type", json_object_new_string("hook"));
        for (size_t i = 0; i < 4; i++)
                json_object_array_add(a, json_object_new_string(argv ? strempty(argv[i]) : ""));
        json_object_object_add(o, "argv", a);
        if (xml)
                json_object_object_add(o, "xml", json_object_new_string_len(xml, (int) xml_len));
        return o;
}

/* ---- the hook's encoder ----------------------------------------------- */

/* The hook's hot path: a 12-16 KB domain XML through json-c costs far more
 * than the process it runs in, so the request is written straight into one
 * buffer, reserved once, in one pass over the XML that escapes it and
 * checks that it is UTF-8 at the same time. */

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

/* Write s[0..n) as a JSON string (RFC 8259 escaping; UTF-8 passes through
 * as is) at out, which has room for 2 + 6 * n bytes; returns the end.
 * Bytes that need no escaping, most of a domain XML, are copied eight at
 * a time.  With check_utf8 they must also be UTF-8 (RFC 3629): if they
 * are not, NULL is returned and *ret_bad is the offset of the first byte
 * that breaks it. */
static char *json_escape_to(char *out, const char *s, size_t n, bool check_utf8, long *ret_bad) {
        static const char hex[] = "0123456789abcdef";
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
                if (json_esc_len[c] == 1) {
                        *out++ = (char) c;
                        continue;
                }
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
        }
        *out++ = '"';
        return out;
}

/* A copy of s[0..n) with every byte that breaks UTF-8 replaced by U+FFFD,
 * so it can travel in JSON; *ret_len gets its length. */
static char *proto_utf8_sanitize(const char *s, size_t n, size_t *ret_len) {
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

int proto_frame_encode_hook(const char *const argv[4], const char *xml, size_t xml_len, char **ret, size_t *ret_len) {
        static const char head[] = "{\"version\":" PROTO_VERSION_STR ",\"type\":\"hook\",\"argv\":[";
        static const char xml_key[] = ",\"xml\":";
        const char *args[4];
        size_t arg_len[4], cap;
        _cleanup_free_ char *clean = NULL;
        long bad = -1;
        char *buf, *p;

        /* header, head, 4 strings, 3 commas, ']', key, the bad offset, '}' */
        cap = PROTO_HEADER_SIZE + sizeof head + 4 + sizeof xml_key + 32 + 1;
        for (size_t i = 0; i < 4; i++) {
                args[i] = argv ? strempty(argv[i]) : "";
                arg_len[i] = strlen(args[i]);
                cap += 2 + 6 * arg_len[i];
        }
        for (;;) {
                /* Room for the worst case (every byte escaped as \u00XX),
                 * reserved once; what is not written is never touched. */
                buf = xmalloc(cap + (xml ? 2 + 6 * xml_len : 0));
                p = buf + PROTO_HEADER_SIZE;
                memcpy(p, head, sizeof head - 1);
                p += sizeof head - 1;
                for (size_t i = 0; i < 4; i++) {
                        if (i)
                                *p++ = ',';
                        p = json_escape_to(p, args[i], arg_len[i], false, NULL);
                }
                *p++ = ']';
                if (!xml)
                        break;
                memcpy(p, xml_key, sizeof xml_key - 1);
                p += sizeof xml_key - 1;
                char *end = json_escape_to(p, xml, xml_len, !clean, &bad);
                if (end) {
                        p = end;
                        break;
                }
                /* JSON carries Unicode only: send it sanitised and say
                 * where it broke, so the daemon refuses it (and logs that)
                 * instead of failing to read the request. */
                free(buf);
                clean = proto_utf8_sanitize(xml, xml_len, &xml_len);
                xml = clean;
        }
        if (bad >= 0)
                p += sprintf(p, ",\"xml_invalid_utf8\":%ld", bad);
        *p++ = '}';

        size_t len = (size_t) (p - buf) - PROTO_HEADER_SIZE;
        if (len > PROTO_MAX_PAYLOAD) {
                free(buf);
                return -EMSGSIZE;
        }
        buf[0] = (char) ((len >> 24) & 0xff);
        buf[1] = (char) ((len >> 16) & 0xff);
        buf[2] = (char) ((len >> 8) & 0xff);
        buf[3] = (char) (len & 0xff);
        *ret_len = PROTO_HEADER_SIZE + len;
        *ret = buf;
        return 0;
}

json_object *proto_request_new_status(void) {
        json_object *o = json_object_new_object();

        json_object_object_add(o, "version", json_object_new_int(PROTO_VERSION));
        json_object_object_add(o, "type", json_object_new_string("status"));
        return o;
}

/* ---- responses --------------------------------------------------------- */

void proto_response_done(struct proto_response *r) {
        if (!r)
                return;
        free(r->error);
        free(r->stdout_text);
        free(r->stderr_text);
        free(r->verdict);
        if (r->status)
                json_object_put(r->status);
        *r = (struct proto_response) {.error = NULL};
}

static int parse_hook_response(json_object *o, struct proto_response *r, char **ret_error) {
        json_object *e;
        int64_t code;
        int k;

        if (!json_object_object_get_ex(o, "exit", &e) || !e)
                return set_error(ret_error, -EPROTO, "missing 'exit'");
        if (!json_object_is_type(e, json_type_int))
                return set_error(ret_error, -EPROTO, "'exit' must be an integer");
        code = json_object_get_int64(e);
        if (code < 0 || code > 255)
                return set_error(ret_error, -EPROTO, "'exit' must be between 0 and 255, not %" PRId64, code);
        r->exit_code = (int) code;

        k = get_opt_string(o, "stdout", &r->stdout_text, NULL, ret_error);
        if (k < 0)
                return k;
        k = get_opt_string(o, "stderr", &r->stderr_text, NULL, ret_error);
        if (k < 0)
                return k;
        return get_opt_string(o, "verdict", &r->verdict, NULL, ret_error);
}

int proto_response_parse(json_object *o, struct proto_response *ret, char **ret_error) {
        struct proto_response r = {.error = NULL};
        json_object *v;
        int k;

        if (!ret)
                return set_error(ret_error, -EINVAL, "invalid arguments");
        if (!o || !json_object_is_type(o, json_type_object))
                return set_error(ret_error, -EPROTO, "response is not a JSON object");

        k = check_version(o, "client", ret_error);
        if (k < 0)
                return k;

        if (json_object_object_get_ex(o, "error", &v) && v) {
                if (!json_object_is_type(v, json_type_string))
                        return set_error(ret_error, -EPROTO, "'error' must be a string");
                r.error = xstrdup(json_object_get_string(v));
        } else if (json_object_object_get_ex(o, "status", &v) && v) {
                if (!json_object_is_type(v, json_type_object))
                        return set_error(ret_error, -EPROTO, "'status' must be an object");
                r.status = json_object_get(v);
        } else {
                k = parse_hook_response(o, &r, ret_error);
                if (k < 0) {
                        proto_response_done(&r);
                        return k;
                }
        }

        *ret = r;
        return 0;
}

static json_object *response_new(void) {
        json_object *o = json_object_new_object();

        json_object_object_add(o, "version", json_object_new_int(PROTO_VERSION));
        return o;
}

json_object *proto_response_new_hook(int exit_code, const char *stdout_text, const char *stderr_text, const char *verdict) {
        json_object *o = response_new();

        json_object_object_add(o, "exit", json_object_new_int(exit_code));
        if (stdout_text)
                json_object_object_add(o, "stdout", json_object_new_string(stdout_text));
        if (stderr_text)
                json_object_object_add(o, "stderr", json_object_new_string(stderr_text));
        if (verdict)
                json_object_object_add(o, "verdict", json_object_new_string(verdict));
        return o;
}

json_object *proto_response_new_error(const char *fmt, ...) {
        json_object *o = response_new();
        _cleanup_free_ char *msg = NULL;
        va_list ap;

        va_start(ap, fmt);
        msg = xvasprintf(fmt, ap);
        va_end(ap);
        json_object_object_add(o, "error", json_object_new_string(msg));
        return o;
}

json_object *proto_response_new_status(json_object *status) {
        json_object *o = response_new();

        json_object_object_add(o, "status", status ? status : json_object_new_object());
        return o;
}

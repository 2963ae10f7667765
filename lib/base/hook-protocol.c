/* The hook protocol (docs/design.md §9): validation of request and
 * response objects, and the hook's own request encoder.  The framing is
 * frame.c's, the fast JSON reader and string writer fastjson.c's.  Pure:
 * no I/O.  Compiled into pcinumad, pcinumactl and pcinuma-hook. */
#include "hook-protocol.h"

#include <inttypes.h>

#include "fastjson.h"

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
 * checks that it is UTF-8 at the same time (fastjson_escape()). */
int proto_frame_encode_hook(const char *const argv[4], const char *xml, size_t xml_len, char **ret, size_t *ret_len) {
        static const char head[] = "{\"version\":" PROTO_VERSION_STR ",\"type\":\"hook\",\"argv\":[";
        static const char xml_key[] = ",\"xml\":";
        const char *args[4];
        size_t arg_len[4], cap;
        _cleanup_free_ char *clean = NULL;
        long bad = -1;
        char *buf, *p;

        /* header, head, 4 strings, 3 commas, ']', key, the bad offset, '}' */
        cap = FRAME_HEADER_SIZE + sizeof head + 4 + sizeof xml_key + 32 + 1;
        for (size_t i = 0; i < 4; i++) {
                args[i] = argv ? strempty(argv[i]) : "";
                arg_len[i] = strlen(args[i]);
                cap += FASTJSON_ESCAPE_MAX(arg_len[i]);
        }
        for (;;) {
                /* Room for the worst case (every byte escaped as \u00XX),
                 * reserved once; what is not written is never touched. */
                buf = xmalloc(cap + (xml ? FASTJSON_ESCAPE_MAX(xml_len) : 0));
                p = buf + FRAME_HEADER_SIZE;
                memcpy(p, head, sizeof head - 1);
                p += sizeof head - 1;
                for (size_t i = 0; i < 4; i++) {
                        if (i)
                                *p++ = ',';
                        p = fastjson_escape(p, args[i], arg_len[i], false, NULL);
                }
                *p++ = ']';
                if (!xml)
                        break;
                memcpy(p, xml_key, sizeof xml_key - 1);
                p += sizeof xml_key - 1;
                char *end = fastjson_escape(p, xml, xml_len, !clean, &bad);
                if (end) {
                        p = end;
                        break;
                }
                /* JSON carries Unicode only: send it sanitised and say
                 * where it broke, so the daemon refuses it (and logs that)
                 * instead of failing to read the request. */
                free(buf);
                clean = utf8_sanitize(xml, xml_len, &xml_len);
                xml = clean;
        }
        if (bad >= 0)
                p += sprintf(p, ",\"xml_invalid_utf8\":%ld", bad);
        *p++ = '}';

        size_t len = (size_t) (p - buf) - FRAME_HEADER_SIZE;
        if (len > FRAME_MAX_PAYLOAD) {
                free(buf);
                return -EMSGSIZE;
        }
        frame_header(buf, len);
        *ret_len = FRAME_HEADER_SIZE + len;
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

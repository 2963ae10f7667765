/* Tests for frame.h and hook-protocol.h: frame encoding, the incremental decoder (any
 * fragmentation, several frames per buffer, bad lengths, bad payloads),
 * and request/response validation with the exact error messages. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "hook-protocol.h"

/* A raw frame around an arbitrary payload (len bytes of p). */
static char *raw_frame(const char *p, size_t len, size_t *ret_len) {
        char *b = xmalloc(FRAME_HEADER_SIZE + len);

        b[0] = (char) (len >> 24);
        b[1] = (char) (len >> 16);
        b[2] = (char) (len >> 8);
        b[3] = (char) len;
        memcpy(b + 4, p, len);
        *ret_len = FRAME_HEADER_SIZE + len;
        return b;
}

/* Decode exactly one frame from a whole buffer; returns what feed returned. */
static int decode_one(const char *buf, size_t len, json_object **ret, char **ret_error) {
        struct frame_decoder d = {.header_len = 0};
        size_t used = 0;
        int r;

        r = frame_decoder_feed(&d, buf, len, &used, ret, ret_error);
        if (r == 1)
                assert_int_equal(used, len);
        frame_decoder_reset(&d);
        return r;
}

static int decode_payload(const char *payload, json_object **ret, char **ret_error) {
        _cleanup_free_ char *f = NULL;
        size_t len;

        f = raw_frame(payload, strlen(payload), &len);
        return decode_one(f, len, ret, ret_error);
}

/* Decode a payload that must be rejected; returns the message. */
static char *payload_error(const char *payload) {
        json_object *o = NULL;
        char *err = NULL;

        assert_int_equal(decode_payload(payload, &o, &err), -EBADMSG);
        assert_null(o);
        assert_non_null(err);
        return err;
}

static const char *const test_argv[4] = {"gpu-vm-1", "prepare", "begin", "-"};
static const char xml_text[] =
        "<domain type='kvm'>\n  <name>gpu-vm-1</name>\n  <description>\"quotes\", \\backslash\\, "
        "a/slash, tab\there, caf\xc3\xa9 \xe2\x82\xac</description>\n</domain>\n";

/* ---- frames ------------------------------------------------------------ */

static void test_roundtrip(void **state) {
        (void) state;
        _cleanup_json_ json_object *req = NULL, *back = NULL;
        _cleanup_free_ char *frame = NULL, *err = NULL;
        struct proto_request r = {.xml = NULL};
        size_t len = 0;
        uint32_t plen;

        req = proto_request_new_hook(test_argv, xml_text, strlen(xml_text));
        assert_int_equal(frame_encode(req, &frame, &len), 0);
        assert_true(len > FRAME_HEADER_SIZE);
        plen = (uint32_t) (uint8_t) frame[0] << 24 | (uint32_t) (uint8_t) frame[1] << 16 |
               (uint32_t) (uint8_t) frame[2] << 8 | (uint8_t) frame[3];
        assert_int_equal(plen, len - FRAME_HEADER_SIZE);
        assert_int_equal(frame[4], '{');

        assert_int_equal(decode_one(frame, len, &back, &err), 1);
        assert_null(err);
        assert_int_equal(proto_request_parse(back, &r, &err), 0);
        assert_int_equal(r.type, PROTO_REQUEST_HOOK);
        for (size_t i = 0; i < 4; i++)
                assert_string_equal(r.argv[i], test_argv[i]);
        assert_non_null(r.xml);
        assert_int_equal(r.xml_len, strlen(xml_text));
        assert_memory_equal(r.xml, xml_text, r.xml_len);
        assert_int_equal(r.xml[r.xml_len], '\0');
        proto_request_done(&r);
        assert_null(r.xml);
        proto_request_done(&r);         /* twice is harmless */
}

static void test_encode_bad(void **state) {
        (void) state;
        char *frame = NULL;
        size_t len = 0;

        assert_int_equal(frame_encode(NULL, &frame, &len), -EINVAL);
        assert_null(frame);
}

static void test_byte_at_a_time(void **state) {
        (void) state;
        _cleanup_json_ json_object *req = NULL, *back = NULL;
        _cleanup_free_ char *frame = NULL, *err = NULL;
        struct frame_decoder d = {.header_len = 0};
        struct proto_request r = {.xml = NULL};
        size_t len = 0;

        req = proto_request_new_hook(test_argv, xml_text, strlen(xml_text));
        assert_int_equal(frame_encode(req, &frame, &len), 0);

        assert_false(frame_decoder_busy(&d));
        for (size_t i = 0; i < len; i++) {
                size_t used = 99;
                int k = frame_decoder_feed(&d, frame + i, 1, &used, &back, &err);

                assert_int_equal(used, 1);
                if (i + 1 < len) {
                        assert_int_equal(k, 0);
                        assert_null(back);
                        assert_true(frame_decoder_busy(&d));
                } else
                        assert_int_equal(k, 1);
        }
        assert_null(err);
        assert_non_null(back);
        assert_false(frame_decoder_busy(&d));

        assert_int_equal(proto_request_parse(back, &r, &err), 0);
        assert_string_equal(r.argv[0], "gpu-vm-1");
        assert_memory_equal(r.xml, xml_text, r.xml_len);
        proto_request_done(&r);

        /* An empty feed is a no-op. */
        {
                size_t used = 99;
                json_object *o = NULL;

                assert_int_equal(frame_decoder_feed(&d, NULL, 0, &used, &o, &err), 0);
                assert_int_equal(used, 0);
                assert_null(o);
        }
        frame_decoder_reset(&d);
}

static void test_two_frames_one_buffer(void **state) {
        (void) state;
        _cleanup_json_ json_object *a = NULL, *b = NULL, *oa = NULL, *ob = NULL;
        _cleanup_free_ char *fa = NULL, *fb = NULL, *both = NULL, *err = NULL;
        struct frame_decoder d = {.header_len = 0};
        struct proto_request r = {.xml = NULL};
        size_t la = 0, lb = 0, used = 0;

        a = proto_request_new_status();
        b = proto_request_new_hook(test_argv, NULL, 0);
        assert_int_equal(frame_encode(a, &fa, &la), 0);
        assert_int_equal(frame_encode(b, &fb, &lb), 0);
        both = xmalloc(la + lb);
        memcpy(both, fa, la);
        memcpy(both + la, fb, lb);

        assert_int_equal(frame_decoder_feed(&d, both, la + lb, &used, &oa, &err), 1);
        assert_int_equal(used, la);
        assert_int_equal(frame_decoder_feed(&d, both + used, la + lb - used, &used, &ob, &err), 1);
        assert_int_equal(used, lb);
        assert_false(frame_decoder_busy(&d));

        assert_int_equal(proto_request_parse(oa, &r, &err), 0);
        assert_int_equal(r.type, PROTO_REQUEST_STATUS);
        proto_request_done(&r);
        assert_int_equal(proto_request_parse(ob, &r, &err), 0);
        assert_int_equal(r.type, PROTO_REQUEST_HOOK);
        assert_null(r.xml);
        proto_request_done(&r);
        frame_decoder_reset(&d);
}

/* Every way of cutting three frames into pieces of a given size. */
static void test_fragmentation(void **state) {
        (void) state;
        _cleanup_free_ char *stream = NULL;
        size_t total = 0;

        for (int i = 0; i < 3; i++) {
                _cleanup_json_ json_object *o = proto_response_new_hook(i, i == 1 ? xml_text : NULL, "msg\n", "allow");
                _cleanup_free_ char *f = NULL;
                size_t l = 0;

                assert_int_equal(frame_encode(o, &f, &l), 0);
                stream = xrealloc(stream, total + l);
                memcpy(stream + total, f, l);
                total += l;
        }

        for (size_t piece = 1; piece <= total; piece++) {
                struct frame_decoder d = {.header_len = 0};
                int seen = 0;

                for (size_t off = 0; off < total;) {
                        size_t n = total - off < piece ? total - off : piece;

                        while (n > 0) {
                                _cleanup_json_ json_object *o = NULL;
                                _cleanup_free_ char *err = NULL;
                                size_t used = 0;
                                int k = frame_decoder_feed(&d, stream + off, n, &used, &o, &err);

                                assert_true(k == 0 || k == 1);
                                assert_true(used <= n);
                                off += used;
                                n -= used;
                                if (k == 1) {
                                        struct proto_response r = {.error = NULL};

                                        assert_int_equal(proto_response_parse(o, &r, &err), 0);
                                        assert_int_equal(r.exit_code, seen);
                                        seen++;
                                        proto_response_done(&r);
                                } else
                                        assert_int_equal(n, 0);
                        }
                }
                assert_int_equal(seen, 3);
                assert_false(frame_decoder_busy(&d));
                frame_decoder_reset(&d);
        }
}

static void test_length_zero(void **state) {
        (void) state;
        struct frame_decoder d = {.header_len = 0};
        const char hdr[] = {0, 0, 0, 0, '{', '}'};
        json_object *o = NULL;
        char *err = NULL;
        size_t used = 0;

        assert_int_equal(frame_decoder_feed(&d, hdr, sizeof(hdr), &used, &o, &err), -EMSGSIZE);
        assert_string_equal(err, "frame length 0");
        assert_int_equal(used, 4);
        assert_null(o);
        free(err);
        frame_decoder_reset(&d);
}

static void test_oversize(void **state) {
        (void) state;
        struct frame_decoder d = {.header_len = 0};
        /* 20000000 = 0x01312d00 */
        const uint8_t hdr[] = {0x01, 0x31, 0x2d, 0x00};
        json_object *o = NULL;
        char *err = NULL;
        size_t used = 0;

        /* Refused from the header alone, fed byte by byte, before any
         * payload byte arrives and before anything is allocated. */
        for (size_t i = 0; i < 3; i++)
                assert_int_equal(frame_decoder_feed(&d, hdr + i, 1, &used, &o, &err), 0);
        assert_int_equal(frame_decoder_feed(&d, hdr + 3, 1, &used, &o, &err), -EMSGSIZE);
        assert_string_equal(err, "frame of 20000000 bytes exceeds the 16777216 byte limit");
        assert_null(d.payload);
        assert_null(o);
        free(err);
        err = NULL;
        frame_decoder_reset(&d);

        /* One byte over the limit. */
        {
                uint32_t n = FRAME_MAX_PAYLOAD + 1;
                const uint8_t h2[] = {(uint8_t) (n >> 24), (uint8_t) (n >> 16), (uint8_t) (n >> 8), (uint8_t) n};

                assert_int_equal(frame_decoder_feed(&d, h2, 4, &used, &o, &err), -EMSGSIZE);
                assert_string_equal(err, "frame of 16777217 bytes exceeds the 16777216 byte limit");
                free(err);
                err = NULL;
                frame_decoder_reset(&d);
        }
        /* 0xffffffff */
        {
                const uint8_t h3[] = {0xff, 0xff, 0xff, 0xff};

                assert_int_equal(frame_decoder_feed(&d, h3, 4, &used, &o, &err), -EMSGSIZE);
                assert_string_equal(err, "frame of 4294967295 bytes exceeds the 16777216 byte limit");
                free(err);
                err = NULL;
                frame_decoder_reset(&d);
        }
        /* Exactly the limit is accepted (and waits for the payload). */
        {
                uint32_t n = FRAME_MAX_PAYLOAD;
                const uint8_t h4[] = {(uint8_t) (n >> 24), (uint8_t) (n >> 16), (uint8_t) (n >> 8), (uint8_t) n};

                assert_int_equal(frame_decoder_feed(&d, h4, 4, &used, &o, &err), 0);
                assert_true(frame_decoder_busy(&d));
                assert_null(err);
                frame_decoder_reset(&d);
                assert_false(frame_decoder_busy(&d));
        }
}

static void test_bad_payloads(void **state) {
        (void) state;
        char *e;

        e = payload_error("{\"version\":1,");
        assert_true(strncmp(e, "payload is not JSON: ", 21) == 0);
        assert_non_null(strstr(e, "unexpected end of data"));
        free(e);

        e = payload_error("{\"version\":1,}");
        assert_true(strncmp(e, "payload is not JSON: ", 21) == 0);
        free(e);

        e = payload_error("hello");
        assert_true(strncmp(e, "payload is not JSON: ", 21) == 0);
        free(e);

        static const char *const not_objects[] = {"[1,2]", "123", "\"s\"", "null", "true", " 1.5 "};
        for (size_t i = 0; i < ELEMENTSOF(not_objects); i++) {
                e = payload_error(not_objects[i]);
                assert_true(strncmp(e, "payload is not a JSON object", 28) == 0);
                free(e);
        }

        e = payload_error("{\"a\":1}x");
        assert_string_equal(e, "payload has 1 trailing bytes after the JSON value");
        free(e);
        e = payload_error("{\"a\":1}{\"b\":2}");
        assert_string_equal(e, "payload has 7 trailing bytes after the JSON value");
        free(e);
        e = payload_error("{\"a\":1} 7");
        assert_string_equal(e, "payload has 2 trailing bytes after the JSON value");
        free(e);

        /* A raw NUL and invalid UTF-8 are not JSON. */
        {
                static const char p[] = "{\"a\":\"x\0y\"}";
                _cleanup_free_ char *f = NULL;
                json_object *o = NULL;
                char *err = NULL;
                size_t len;

                f = raw_frame(p, sizeof(p) - 1, &len);
                assert_int_equal(decode_one(f, len, &o, &err), -EBADMSG);
                assert_string_equal(err, "payload is not JSON: NUL byte at offset 7");
                free(err);
        }
        e = payload_error("{\"a\":\"\xff\xfe\"}");
        assert_true(strncmp(e, "payload is not JSON: ", 21) == 0);
        free(e);

        /* White space around the object is JSON. */
        {
                _cleanup_json_ json_object *o = NULL;
                _cleanup_free_ char *err = NULL;

                assert_int_equal(decode_payload(" \n{\"a\":1}\r\n\t ", &o, &err), 1);
                assert_true(json_object_is_type(o, json_type_object));
        }
}

/* The decoder reads well-formed payloads on a fast path and hands the rest
 * to json-c's tokener: either way the objects are the ones the tokener
 * makes (the same types, values and key order). */
static void test_decoder_same_as_tokener(void **state) {
        (void) state;
        static const char *const payloads[] = {
                /* the fast path */
                "{\"version\":1,\"type\":\"hook\",\"argv\":[\"a\",\"b\",\"c\",\"-\"],\"xml\":\"<d a=\\\"1\\\">\\n\\t\\r</d>\"}",
                "{\"s\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0001\\u001f\\u007f caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 0123456789abcdef\"}",
                " {\"a\" : [ ] , \"b\":{ }, \"c\":[1,23,{\"d\":[0]}], \"e\":123456789012345678}\n",
                "{\"xml_invalid_utf8\":42,\"long\":\"0123456789012345678901234567890123456789\\n0123456789\\\"0123\"}",
                /* what the fast path leaves to the tokener */
                "{\"u\":\"\\u00e9\\u20ac\\ud83d\\ude00\"}",
                "{\"n\":-1,\"f\":1.5,\"e\":1e3,\"big\":1234567890123456789,\"t\":true,\"x\":false,\"z\":null}",
                "{\"a\":1,\"a\":2}",
                "{\"tab\":\"raw\ttab\"}",
                "{\"deep\":[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]}",
        };
        for (size_t i = 0; i < ELEMENTSOF(payloads); i++) {
                const char *p = payloads[i];
                _cleanup_json_ json_object *o = NULL, *want = NULL;
                _cleanup_free_ char *err = NULL;
                json_tokener *tok = json_tokener_new();

                json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
                want = json_tokener_parse_ex(tok, p, (int) strlen(p) + 1);
                json_tokener_free(tok);
                assert_non_null(want);
                assert_int_equal(decode_payload(p, &o, &err), 1);
                assert_null(err);
                assert_true(json_object_equal(o, want));
                _cleanup_free_ char *a = xstrdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
                assert_string_equal(a, json_object_to_json_string_ext(want, JSON_C_TO_STRING_PLAIN));
        }
        /* Errors come from the tokener, as before. */
        char *e = payload_error("{\"a\":\"\\u0041\",}");
        assert_true(strncmp(e, "payload is not JSON: ", 21) == 0);
        free(e);
        e = payload_error("{\"a\":\"caf\xc3\"}");
        assert_true(strncmp(e, "payload is not JSON: ", 21) == 0);
        free(e);
        e = payload_error("{\"a\":01}");
        assert_true(strncmp(e, "payload is not JSON: ", 21) == 0);
        free(e);
}

/* After an error and a reset, the decoder decodes the next frame. */
static void test_reset_after_error(void **state) {
        (void) state;
        struct frame_decoder d = {.header_len = 0};
        _cleanup_free_ char *bad = NULL, *good = NULL;
        _cleanup_json_ json_object *o = NULL;
        char *err = NULL;
        size_t lb, lg, used;

        bad = raw_frame("[1]", 3, &lb);
        good = raw_frame("{\"version\":1}", 13, &lg);
        assert_int_equal(frame_decoder_feed(&d, bad, lb, &used, &o, &err), -EBADMSG);
        assert_non_null(err);
        free(err);
        err = NULL;
        frame_decoder_reset(&d);
        assert_int_equal(frame_decoder_feed(&d, good, lg, &used, &o, &err), 1);
        assert_null(err);
        assert_int_equal(used, lg);

        /* A reset in the middle of a frame frees what it had. */
        frame_decoder_reset(&d);
        assert_int_equal(frame_decoder_feed(&d, good, lg - 2, &used, &o, &err), 0);
        assert_true(frame_decoder_busy(&d));
        frame_decoder_reset(&d);
        assert_false(frame_decoder_busy(&d));
}

/* ---- requests ---------------------------------------------------------- */

static void request_error(const char *json, const char *expected) {
        _cleanup_json_ json_object *o = json_tokener_parse(json);
        struct proto_request r = {.xml = NULL};
        char *err = NULL;

        assert_non_null(o);
        assert_int_equal(proto_request_parse(o, &r, &err), -EPROTO);
        assert_non_null(err);
        assert_string_equal(err, expected);
        assert_null(r.xml);
        assert_null(r.argv[0]);
        free(err);
}

static void test_request_errors(void **state) {
        (void) state;

        request_error("{\"version\":2,\"type\":\"hook\",\"argv\":[\"a\"]}",
                      "unsupported protocol version 2, this daemon speaks 1");
        request_error("{\"version\":0,\"type\":\"status\"}",
                      "unsupported protocol version 0, this daemon speaks 1");
        request_error("{\"type\":\"hook\",\"argv\":[\"a\"]}", "missing 'version'");
        request_error("{\"version\":\"1\",\"type\":\"status\"}", "'version' must be an integer");
        request_error("{\"version\":1,\"type\":\"foo\"}", "unknown request type 'foo'");
        request_error("{\"version\":1}", "missing 'type'");
        request_error("{\"version\":1,\"type\":7}", "'type' must be a string");
        request_error("{\"version\":1,\"type\":\"hook\"}", "missing 'argv'");
        request_error("{\"version\":1,\"type\":\"hook\",\"argv\":\"a b c d\"}",
                      "'argv' must be an array of 1 to 4 strings");
        request_error("{\"version\":1,\"type\":\"hook\",\"argv\":[]}",
                      "'argv' must be an array of 1 to 4 strings");
        request_error("{\"version\":1,\"type\":\"hook\",\"argv\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}",
                      "'argv' must be an array of 1 to 4 strings");
        request_error("{\"version\":1,\"type\":\"hook\",\"argv\":[\"a\",2]}",
                      "'argv' must be an array of 1 to 4 strings");
        request_error("{\"version\":1,\"type\":\"hook\",\"argv\":[\"a\",null]}",
                      "'argv' must be an array of 1 to 4 strings");
        request_error("{\"version\":1,\"type\":\"hook\",\"argv\":[\"a\"],\"xml\":5}", "'xml' must be a string");
        request_error("{\"version\":1,\"type\":\"hook\",\"argv\":[\"a\"],\"xml\":[\"<domain/>\"]}",
                      "'xml' must be a string");

        /* Not an object at all. */
        {
                _cleanup_json_ json_object *a = json_object_new_array();
                struct proto_request r = {.xml = NULL};
                char *err = NULL;

                assert_int_equal(proto_request_parse(a, &r, &err), -EPROTO);
                assert_string_equal(err, "request is not a JSON object");
                free(err);
        }
}

static void test_request_short_argv(void **state) {
        (void) state;
        _cleanup_json_ json_object *o =
                json_tokener_parse("{\"version\":1,\"type\":\"hook\",\"argv\":[\"vm\",\"stopped\"],\"extra\":true}");
        struct proto_request r = {.xml = NULL};
        _cleanup_free_ char *err = NULL;

        assert_int_equal(proto_request_parse(o, &r, &err), 0);
        assert_string_equal(r.argv[0], "vm");
        assert_string_equal(r.argv[1], "stopped");
        assert_string_equal(r.argv[2], "");
        assert_string_equal(r.argv[3], "");
        assert_null(r.xml);
        assert_int_equal(r.xml_len, 0);
        proto_request_done(&r);
}

static void test_request_status(void **state) {
        (void) state;
        _cleanup_json_ json_object *o = proto_request_new_status();
        struct proto_request r = {.xml = NULL};
        _cleanup_free_ char *err = NULL;

        assert_string_equal(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN),
                            "{\"version\":1,\"type\":\"status\"}");
        assert_int_equal(proto_request_parse(o, &r, &err), 0);
        assert_int_equal(r.type, PROTO_REQUEST_STATUS);
        for (size_t i = 0; i < 4; i++)
                assert_non_null(r.argv[i]);
        proto_request_done(&r);
}

static void test_request_new_hook_nulls(void **state) {
        (void) state;
        const char *const argv[4] = {"vm", "prepare", NULL, NULL};
        _cleanup_json_ json_object *o = proto_request_new_hook(argv, NULL, 0);
        struct proto_request r = {.xml = NULL};
        _cleanup_free_ char *err = NULL;

        assert_string_equal(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN),
                            "{\"version\":1,\"type\":\"hook\",\"argv\":[\"vm\",\"prepare\",\"\",\"\"]}");
        assert_int_equal(proto_request_parse(o, &r, &err), 0);
        assert_string_equal(r.argv[2], "");
        assert_null(r.xml);
        proto_request_done(&r);
}

/* ---- responses --------------------------------------------------------- */

static void test_response_hook(void **state) {
        (void) state;
        _cleanup_json_ json_object *o = NULL, *back = NULL;
        _cleanup_free_ char *frame = NULL, *err = NULL;
        struct proto_response r = {.error = NULL};
        size_t len;

        o = proto_response_new_hook(1, xml_text, "pcinuma: refused\n", "refuse");
        assert_int_equal(frame_encode(o, &frame, &len), 0);
        assert_int_equal(decode_one(frame, len, &back, &err), 1);
        assert_int_equal(proto_response_parse(back, &r, &err), 0);
        assert_null(r.error);
        assert_null(r.status);
        assert_int_equal(r.exit_code, 1);
        assert_string_equal(r.stdout_text, xml_text);
        assert_string_equal(r.stderr_text, "pcinuma: refused\n");
        assert_string_equal(r.verdict, "refuse");
        proto_response_done(&r);
        assert_null(r.stdout_text);

        /* Optional members may be absent. */
        json_object_put(o);
        o = proto_response_new_hook(0, NULL, NULL, NULL);
        assert_string_equal(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN), "{\"version\":1,\"exit\":0}");
        assert_int_equal(proto_response_parse(o, &r, &err), 0);
        assert_int_equal(r.exit_code, 0);
        assert_null(r.stdout_text);
        assert_null(r.stderr_text);
        assert_null(r.verdict);
        proto_response_done(&r);
}

static void test_response_error(void **state) {
        (void) state;
        _cleanup_json_ json_object *o = proto_response_new_error("peer uid %d is not root", 1000);
        struct proto_response r = {.error = NULL};
        _cleanup_free_ char *err = NULL;

        assert_int_equal(proto_response_parse(o, &r, &err), 0);
        assert_string_equal(r.error, "peer uid 1000 is not root");
        assert_null(r.stdout_text);
        assert_null(r.status);
        proto_response_done(&r);
}

static void test_response_status(void **state) {
        (void) state;
        json_object *st = json_object_new_object();
        json_object *o;
        struct proto_response r = {.error = NULL};
        _cleanup_free_ char *err = NULL;

        json_object_object_add(st, "domains", json_object_new_int(3));
        o = proto_response_new_status(st);
        assert_int_equal(proto_response_parse(o, &r, &err), 0);
        assert_null(r.error);
        assert_non_null(r.status);
        /* The response holds its own reference. */
        json_object_put(o);
        assert_int_equal(json_object_get_int(json_object_object_get(r.status, "domains")), 3);
        proto_response_done(&r);
        assert_null(r.status);
}

static void response_error(const char *json, const char *expected) {
        _cleanup_json_ json_object *o = json_tokener_parse(json);
        struct proto_response r = {.error = NULL};
        char *err = NULL;

        assert_non_null(o);
        assert_int_equal(proto_response_parse(o, &r, &err), -EPROTO);
        assert_string_equal(err, expected);
        assert_null(r.error);
        assert_null(r.stdout_text);
        assert_null(r.status);
        free(err);
}

static void test_response_errors(void **state) {
        (void) state;

        response_error("{\"version\":2,\"exit\":0}", "unsupported protocol version 2, this client speaks 1");
        response_error("{\"exit\":0}", "missing 'version'");
        response_error("{\"version\":1}", "missing 'exit'");
        response_error("{\"version\":1,\"exit\":\"0\"}", "'exit' must be an integer");
        response_error("{\"version\":1,\"exit\":300}", "'exit' must be between 0 and 255, not 300");
        response_error("{\"version\":1,\"exit\":-1}", "'exit' must be between 0 and 255, not -1");
        response_error("{\"version\":1,\"exit\":0,\"stdout\":1}", "'stdout' must be a string");
        response_error("{\"version\":1,\"exit\":0,\"stdout\":\"x\",\"stderr\":{}}", "'stderr' must be a string");
        response_error("{\"version\":1,\"exit\":0,\"verdict\":true}", "'verdict' must be a string");
        response_error("{\"version\":1,\"error\":42}", "'error' must be a string");
        response_error("{\"version\":1,\"status\":[]}", "'status' must be an object");
}

static void test_fast_hook_encoder(void **state) {
        (void) state;
        /* The hook's hand-written encoder must give what the parser takes,
         * byte for byte back: quotes, backslashes, control characters,
         * non-ASCII UTF-8. */
        static const char xml[] = "<domain type=\"kvm\">\\ \t\n\r\x01\x1f caf\xc3\xa9 \xe2\x82\xac</domain>";
        const char *const argv[4] = { "vm \"1\"", "prepare", "begin", "-" };
        char *frame = NULL;
        size_t len = 0;
        assert_int_equal(proto_frame_encode_hook(argv, xml, sizeof xml - 1, &frame, &len), 0);
        struct frame_decoder d = {0};
        json_object *o = NULL;
        char *err = NULL;
        size_t used = 0;
        assert_int_equal(frame_decoder_feed(&d, frame, len, &used, &o, &err), 1);
        assert_int_equal(used, len);
        struct proto_request req = {0};
        assert_int_equal(proto_request_parse(o, &req, &err), 0);
        assert_int_equal(req.type, PROTO_REQUEST_HOOK);
        assert_string_equal(req.argv[0], "vm \"1\"");
        assert_string_equal(req.argv[1], "prepare");
        assert_int_equal(req.xml_len, sizeof xml - 1);
        assert_memory_equal(req.xml, xml, sizeof xml - 1);
        proto_request_done(&req);
        json_object_put(o);
        frame_decoder_reset(&d);
        free(frame);
        free(err);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_fast_hook_encoder),
                cmocka_unit_test(test_roundtrip),
                cmocka_unit_test(test_encode_bad),
                cmocka_unit_test(test_byte_at_a_time),
                cmocka_unit_test(test_two_frames_one_buffer),
                cmocka_unit_test(test_fragmentation),
                cmocka_unit_test(test_length_zero),
                cmocka_unit_test(test_oversize),
                cmocka_unit_test(test_bad_payloads),
                cmocka_unit_test(test_decoder_same_as_tokener),
                cmocka_unit_test(test_reset_after_error),
                cmocka_unit_test(test_request_errors),
                cmocka_unit_test(test_request_short_argv),
                cmocka_unit_test(test_request_status),
                cmocka_unit_test(test_request_new_hook_nulls),
                cmocka_unit_test(test_response_hook),
                cmocka_unit_test(test_response_error),
                cmocka_unit_test(test_response_status),
                cmocka_unit_test(test_response_errors),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

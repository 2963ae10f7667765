/* Tests for watcher-protocol.h, the watcher protocol: every message kind is written
 * byte for byte as the link carries it and reads back the same, and every
 * kind of malformed message is refused with the error that names it. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "frame.h"
#include "json-cleanup.h"
#include "util.h"
#include "watcher-protocol.h"

/* The payload of a frame, checking its header. */
static char *payload_of(const char *frame, size_t len) {
        assert_true(len > FRAME_HEADER_SIZE);
        size_t n = ((size_t) (uint8_t) frame[0] << 24) | ((size_t) (uint8_t) frame[1] << 16) |
                   ((size_t) (uint8_t) frame[2] << 8) | (uint8_t) frame[3];
        assert_int_equal(n, len - FRAME_HEADER_SIZE);
        /* The payload is not NUL-terminated: copy exactly n bytes. */
        char *s = xmalloc(n + 1);
        memcpy(s, frame + FRAME_HEADER_SIZE, n);
        s[n] = 0;
        return s;
}

/* Check the encoded frame's payload, then decode it into *ret. */
/* (frame and len by address: the arguments are evaluated in any order.) */
static void check_wire(int r, char **frame, const size_t *len, const char *expected, struct wproto_msg *ret) {
        assert_int_equal(r, 0);
        _cleanup_free_ char *payload = payload_of(*frame, *len), *err = NULL;
        assert_string_equal(payload, expected);
        json_object *o = json_tokener_parse(payload);
        assert_non_null(o);
        assert_int_equal(wproto_decode(o, ret, &err), 0);
        assert_null(err);
        json_object_put(o);     /* the message keeps its own reference */
        free(*frame);
        *frame = NULL;
}

static void test_plan(void **state) {
        static const char xml[] = "<domain>\"a\"\0b</domain>";
        const struct wproto_plan m = { .id = 42, .xml = xml, .xml_len = sizeof xml - 1 };
        char *f = NULL;
        size_t len = 0;
        struct wproto_msg d;
        check_wire(wproto_encode_plan(&m, &f, &len), &f, &len,
                   "{\"type\":\"plan\",\"id\":42,\"xml\":\"<domain>\\\"a\\\"\\u0000b</domain>\"}", &d);
        assert_int_equal(d.type, WPROTO_PLAN);
        assert_int_equal(d.plan.id, 42);
        assert_int_equal(d.plan.xml_len, sizeof xml - 1);
        assert_memory_equal(d.plan.xml, xml, sizeof xml - 1);
        wproto_msg_done(&d);
}

static void test_forget(void **state) {
        char *f = NULL;
        size_t len = 0;
        struct wproto_msg d;
        check_wire(wproto_encode_forget(&(struct wproto_forget) { "0b8f6f43-1111-2222-3333-444455556666" }, &f, &len), &f, &len,
                   "{\"type\":\"forget\",\"uuid\":\"0b8f6f43-1111-2222-3333-444455556666\"}", &d);
        assert_int_equal(d.type, WPROTO_FORGET);
        assert_string_equal(d.forget.uuid, "0b8f6f43-1111-2222-3333-444455556666");
        wproto_msg_done(&d);
}

static void test_status(void **state) {
        const struct wproto_status full = {
                .connected = true, .redefinitions = 3, .failures = 1, .last_error = "no \"route\"",
                .has_counters = true, .settle_ms = 250, .pending = 2, .events = 17, .conflicts = 1, .undone = 0,
                .windows = 3, .window_us_sum = 9000, .window_us_max = 4000,
        };
        char *f = NULL;
        size_t len = 0;
        struct wproto_msg d;
        check_wire(wproto_encode_status(&full, &f, &len), &f, &len,
                   "{\"type\":\"status\",\"connected\":true,\"redefinitions\":3,\"failures\":1,"
                   "\"last_error\":\"no \\\"route\\\"\",\"settle_ms\":250,\"pending\":2,\"events\":17,"
                   "\"conflicts\":1,\"undone\":0,\"windows\":3,\"window_us_sum\":9000,\"window_us_max\":4000}", &d);
        assert_int_equal(d.type, WPROTO_STATUS);
        assert_true(d.status.connected);
        assert_string_equal(d.status.last_error, "no \"route\"");
        const struct wproto_status *g = &d.status;
        assert_true(g->has_counters);
        assert_int_equal(g->redefinitions, 3);
        assert_int_equal(g->failures, 1);
        assert_int_equal(g->settle_ms, 250);
        assert_int_equal(g->pending, 2);
        assert_int_equal(g->events, 17);
        assert_int_equal(g->conflicts, 1);
        assert_int_equal(g->undone, 0);
        assert_int_equal(g->windows, 3);
        assert_int_equal(g->window_us_sum, 9000);
        assert_int_equal(g->window_us_max, 4000);
        wproto_msg_done(&d);

        /* Without counters (as the daemon suite's stand-in sends it). */
        const struct wproto_status bare = { .connected = false, .redefinitions = 0, .failures = 0 };
        check_wire(wproto_encode_status(&bare, &f, &len), &f, &len,
                   "{\"type\":\"status\",\"connected\":false,\"redefinitions\":0,\"failures\":0,\"last_error\":null}", &d);
        assert_false(d.status.has_counters);
        assert_null(d.status.last_error);
        wproto_msg_done(&d);
}

static void test_planned(void **state) {
        const struct wproto_field fields[] = { { "PCINUMA_DOMAIN", "vm 1" }, { "PCINUMA_UUID", "u" } };
        const struct wproto_planned m = { .id = 7, .redefine = true, .xml = "<domain/>", .summary = "2 devices moved",
                                          .prio = 6, .fields = fields, .n_fields = 2 };
        char *f = NULL;
        size_t len = 0;
        struct wproto_msg d;
        check_wire(wproto_encode_planned(&m, &f, &len), &f, &len,
                   "{\"type\":\"planned\",\"id\":7,\"redefine\":true,\"xml\":\"<domain/>\",\"summary\":\"2 devices moved\","
                   "\"prio\":6,\"fields\":[[\"PCINUMA_DOMAIN\",\"vm 1\"],[\"PCINUMA_UUID\",\"u\"]]}", &d);
        assert_int_equal(d.type, WPROTO_PLANNED);
        assert_int_equal(d.planned.id, 7);
        assert_true(d.planned.redefine);
        assert_string_equal(d.planned.xml, "<domain/>");
        assert_null(d.planned.error);
        assert_string_equal(d.planned.summary, "2 devices moved");
        assert_int_equal(d.planned.prio, 6);
        assert_int_equal(d.planned.n_fields, 2);
        assert_string_equal(d.planned.fields[1].key, "PCINUMA_UUID");
        assert_string_equal(d.planned.fields[0].value, "vm 1");
        wproto_msg_done(&d);

        /* Nothing to define: xml and summary null, no fields. */
        const struct wproto_planned none = { .id = 8, .prio = 7 };
        check_wire(wproto_encode_planned(&none, &f, &len), &f, &len,
                   "{\"type\":\"planned\",\"id\":8,\"redefine\":false,\"xml\":null,\"summary\":null,\"prio\":7,\"fields\":[]}",
                   &d);
        assert_null(d.planned.xml);
        assert_null(d.planned.summary);
        assert_int_equal(d.planned.n_fields, 0);
        wproto_msg_done(&d);

        /* The error form: "error" where "xml" was. */
        const struct wproto_planned e = { .id = 9, .error = "too big", .summary = "cannot be redefined: too big",
                                          .prio = 3, .fields = fields, .n_fields = 1 };
        check_wire(wproto_encode_planned(&e, &f, &len), &f, &len,
                   "{\"type\":\"planned\",\"id\":9,\"redefine\":false,\"error\":\"too big\","
                   "\"summary\":\"cannot be redefined: too big\",\"prio\":3,\"fields\":[[\"PCINUMA_DOMAIN\",\"vm 1\"]]}", &d);
        assert_string_equal(d.planned.error, "too big");
        assert_null(d.planned.xml);
        wproto_msg_done(&d);
}

static void test_recheck(void **state) {
        char *f = NULL;
        size_t len = 0;
        struct wproto_msg d;
        check_wire(wproto_encode_recheck(&(struct wproto_recheck) { NULL }, &f, &len), &f, &len,
                   "{\"type\":\"recheck\"}", &d);
        assert_int_equal(d.type, WPROTO_RECHECK);
        assert_null(d.recheck.uuid);
        wproto_msg_done(&d);
        check_wire(wproto_encode_recheck(&(struct wproto_recheck) { "u-1" }, &f, &len), &f, &len,
                   "{\"type\":\"recheck\",\"uuid\":\"u-1\"}", &d);
        assert_string_equal(d.recheck.uuid, "u-1");
        wproto_msg_done(&d);
}

#define U1 "0b8f6f43-1111-2222-3333-444455556666"
#define U2 "0b8f6f43-1111-2222-3333-444455556667"

/* The messages of restarts into the plan. */
static void test_restart_messages(void **state) {
        char *f = NULL;
        size_t len = 0;
        struct wproto_msg d;

        const char *const set[] = { U1, U2 };
        check_wire(wproto_encode_domains(&(struct wproto_domains) { set, 2 }, &f, &len), &f, &len,
                   "{\"type\":\"domains\",\"persistent\":[\"" U1 "\",\"" U2 "\"]}", &d);
        assert_int_equal(d.type, WPROTO_DOMAINS);
        assert_int_equal(d.domains.n, 2);
        assert_string_equal(d.domains.persistent[1], U2);
        wproto_msg_done(&d);
        check_wire(wproto_encode_domains(&(struct wproto_domains) { NULL, 0 }, &f, &len), &f, &len,
                   "{\"type\":\"domains\",\"persistent\":[]}", &d);
        assert_int_equal(d.domains.n, 0);
        wproto_msg_done(&d);

        check_wire(wproto_encode_domain(&(struct wproto_domain) { U1, true }, &f, &len), &f, &len,
                   "{\"type\":\"domain\",\"uuid\":\"" U1 "\",\"persistent\":true}", &d);
        assert_int_equal(d.type, WPROTO_DOMAIN);
        assert_string_equal(d.domain.uuid, U1);
        assert_true(d.domain.persistent);
        wproto_msg_done(&d);

        const struct wproto_plan_restart pr = { .id = 3, .uuid = U1, .xml = "<domain/>", .xml_len = 9 };
        check_wire(wproto_encode_plan_restart(&pr, &f, &len), &f, &len,
                   "{\"type\":\"plan_restart\",\"id\":3,\"uuid\":\"" U1 "\",\"xml\":\"<domain/>\"}", &d);
        assert_int_equal(d.type, WPROTO_PLAN_RESTART);
        assert_int_equal(d.plan_restart.id, 3);
        assert_string_equal(d.plan_restart.uuid, U1);
        assert_int_equal(d.plan_restart.xml_len, 9);
        wproto_msg_done(&d);

        const struct wproto_restarted rd = { .uuid = U2, .outcome = WPROTO_OUTCOME_FALLBACK, .unplanned_us = 1200,
                                             .total_us = 900000 };
        check_wire(wproto_encode_restarted(&rd, &f, &len), &f, &len,
                   "{\"type\":\"restarted\",\"uuid\":\"" U2 "\",\"outcome\":\"fallback\",\"unplanned_us\":1200,"
                   "\"total_us\":900000}", &d);
        assert_int_equal(d.type, WPROTO_RESTARTED);
        assert_int_equal(d.restarted.outcome, WPROTO_OUTCOME_FALLBACK);
        assert_int_equal(d.restarted.unplanned_us, 1200);
        assert_int_equal(d.restarted.total_us, 900000);
        wproto_msg_done(&d);
        for (int o = 0; o < _WPROTO_OUTCOME_MAX; o++)
                assert_non_null(wproto_outcome_to_string((enum wproto_outcome) o));
        assert_null(wproto_outcome_to_string(_WPROTO_OUTCOME_MAX));

        const struct wproto_restart rs = { .uuid = U1, .window_ms = 5000, .since_us = 123456789 };
        check_wire(wproto_encode_restart(&rs, &f, &len), &f, &len,
                   "{\"type\":\"restart\",\"uuid\":\"" U1 "\",\"window_ms\":5000,\"since_us\":123456789}", &d);
        assert_int_equal(d.type, WPROTO_RESTART);
        assert_string_equal(d.restart.uuid, U1);
        assert_int_equal(d.restart.window_ms, 5000);
        assert_int_equal(d.restart.since_us, 123456789);
        assert_int_equal(d.restart.n_files, 0);
        wproto_msg_done(&d);
        const char *const files[] = { "/boot/vmlinuz", "/boot/initrd.img" };
        const struct wproto_restart rf = { .uuid = U1, .window_ms = 100, .since_us = 1, .files = files, .n_files = 2 };
        check_wire(wproto_encode_restart(&rf, &f, &len), &f, &len,
                   "{\"type\":\"restart\",\"uuid\":\"" U1 "\",\"window_ms\":100,\"since_us\":1,"
                   "\"files\":[\"/boot/vmlinuz\",\"/boot/initrd.img\"]}", &d);
        assert_int_equal(d.restart.n_files, 2);
        assert_string_equal(d.restart.files[1], "/boot/initrd.img");
        assert_false(d.restart.if_persistent);
        wproto_msg_done(&d);
        /* A conditional request: only if it is persistent once up. */
        const struct wproto_restart rc = { .uuid = U1, .window_ms = 100, .since_us = 1, .if_persistent = true };
        check_wire(wproto_encode_restart(&rc, &f, &len), &f, &len,
                   "{\"type\":\"restart\",\"uuid\":\"" U1 "\",\"window_ms\":100,\"since_us\":1,"
                   "\"if_persistent\":true}", &d);
        assert_true(d.restart.if_persistent);
        wproto_msg_done(&d);

        assert_int_equal(wproto_encode_domains(&(struct wproto_domains) { NULL, 1 }, &f, &len), -EINVAL);
        const char *const holey[] = { U1, NULL };
        assert_int_equal(wproto_encode_domains(&(struct wproto_domains) { holey, 2 }, &f, &len), -EINVAL);
        assert_int_equal(wproto_encode_domain(&(struct wproto_domain) { NULL, true }, &f, &len), -EINVAL);
        assert_int_equal(wproto_encode_plan_restart(&(struct wproto_plan_restart) { .id = 1, .xml = "x", .xml_len = 1 },
                                                    &f, &len), -EINVAL);
        assert_int_equal(wproto_encode_restarted(&(struct wproto_restarted) { .uuid = U1, .outcome = _WPROTO_OUTCOME_MAX },
                                                 &f, &len), -EINVAL);
        assert_int_equal(wproto_encode_restart(&(struct wproto_restart) { .window_ms = 1 }, &f, &len), -EINVAL);
        assert_int_equal(wproto_encode_restart(&(struct wproto_restart) { .uuid = U1, .n_files = 1 }, &f, &len), -EINVAL);
        assert_null(f);
}

/* The generic encoder writes each kind as its own encoder does. */
static void test_encode_any(void **state) {
        static const char *const payloads[] = {
                "{\"type\":\"plan\",\"id\":1,\"xml\":\"x\"}",
                "{\"type\":\"forget\",\"uuid\":\"u\"}",
                "{\"type\":\"status\",\"connected\":true,\"redefinitions\":0,\"failures\":2,\"last_error\":null}",
                "{\"type\":\"planned\",\"id\":1,\"redefine\":false,\"xml\":null,\"summary\":\"s\",\"prio\":0,\"fields\":[]}",
                "{\"type\":\"recheck\",\"uuid\":\"u\"}",
                "{\"type\":\"domains\",\"persistent\":[\"u\"]}",
                "{\"type\":\"domain\",\"uuid\":\"u\",\"persistent\":false}",
                "{\"type\":\"plan_restart\",\"id\":2,\"uuid\":\"u\",\"xml\":\"x\"}",
                "{\"type\":\"restarted\",\"uuid\":\"u\",\"outcome\":\"lost\",\"unplanned_us\":0,\"total_us\":1}",
                "{\"type\":\"restart\",\"uuid\":\"u\",\"window_ms\":100,\"since_us\":0}",
        };
        for (size_t i = 0; i < ELEMENTSOF(payloads); i++) {
                json_object *o = json_tokener_parse(payloads[i]);
                struct wproto_msg d;
                _cleanup_free_ char *err = NULL, *f = NULL, *back = NULL;
                size_t len = 0;
                assert_int_equal(wproto_decode(o, &d, &err), 0);
                json_object_put(o);
                assert_int_equal(wproto_encode(&d, &f, &len), 0);
                back = payload_of(f, len);
                assert_string_equal(back, payloads[i]);
                assert_string_equal(wproto_type_to_string(d.type), json_object_get_string(json_object_object_get(d.obj, "type")));
                wproto_msg_done(&d);
        }
        assert_null(wproto_type_to_string((enum wproto_type) 99));
}

/* Keys the reader does not know are ignored. */
static void test_unknown_keys(void **state) {
        json_object *o = json_tokener_parse("{\"type\":\"forget\",\"uuid\":\"u\",\"later\":[1]}");
        struct wproto_msg d;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(wproto_decode(o, &d, &err), 0);
        json_object_put(o);
        assert_string_equal(d.forget.uuid, "u");
        wproto_msg_done(&d);
        wproto_msg_done(&d);    /* done twice is harmless */
}

static void test_refused(void **state) {
        static const struct {
                const char *payload, *error;
        } cases[] = {
                { "[1]", "a message that is not a JSON object" },
                { "{}", "a message of unknown type (none)" },
                { "{\"type\":5}", "a message of unknown type (none)" },
                { "{\"type\":\"reboot\"}", "a message of unknown type reboot" },
                { "{\"type\":\"plan\",\"id\":1}", "a plan request without id or xml" },
                { "{\"type\":\"plan\",\"xml\":\"x\"}", "a plan request without id or xml" },
                { "{\"type\":\"plan\",\"id\":1,\"xml\":3}", "a plan request without id or xml" },
                { "{\"type\":\"plan\",\"id\":\"1\",\"xml\":\"x\"}", "a plan request whose 'id' is not a count" },
                { "{\"type\":\"plan\",\"id\":-1,\"xml\":\"x\"}", "a plan request whose 'id' is not a count" },
                { "{\"type\":\"forget\"}", "a forget message without 'uuid'" },
                { "{\"type\":\"forget\",\"uuid\":null}", "a forget message without 'uuid'" },
                { "{\"type\":\"forget\",\"uuid\":1}", "a forget message whose 'uuid' is not a string" },
                { "{\"type\":\"status\",\"redefinitions\":0,\"failures\":0}", "a status message without 'connected'" },
                { "{\"type\":\"status\",\"connected\":1,\"redefinitions\":0,\"failures\":0}",
                  "a status message whose 'connected' is not a boolean" },
                { "{\"type\":\"status\",\"connected\":true,\"failures\":0}", "a status message without 'redefinitions'" },
                { "{\"type\":\"status\",\"connected\":true,\"redefinitions\":0,\"failures\":1.5}",
                  "a status message whose 'failures' is not a count" },
                { "{\"type\":\"status\",\"connected\":true,\"redefinitions\":0,\"failures\":0,\"last_error\":false}",
                  "a status message whose 'last_error' is not a string" },
                { "{\"type\":\"status\",\"connected\":true,\"redefinitions\":0,\"failures\":0,\"settle_ms\":250}",
                  "a status message without 'pending'" },
                { "{\"type\":\"status\",\"connected\":true,\"redefinitions\":0,\"failures\":0,\"pending\":-2}",
                  "a status message whose 'pending' is not a count" },
                { "{\"type\":\"planned\",\"redefine\":false,\"prio\":7,\"fields\":[]}", "a planned answer without 'id'" },
                { "{\"type\":\"planned\",\"id\":1,\"prio\":7,\"fields\":[]}", "a planned answer without 'redefine'" },
                { "{\"type\":\"planned\",\"id\":1,\"redefine\":\"yes\",\"prio\":7,\"fields\":[]}",
                  "a planned answer whose 'redefine' is not a boolean" },
                { "{\"type\":\"planned\",\"id\":1,\"redefine\":true,\"xml\":{},\"prio\":7,\"fields\":[]}",
                  "a planned answer whose 'xml' is not a string" },
                { "{\"type\":\"planned\",\"id\":1,\"redefine\":false,\"xml\":\"x\",\"error\":\"e\",\"prio\":7,\"fields\":[]}",
                  "a planned answer with both 'xml' and 'error'" },
                { "{\"type\":\"planned\",\"id\":1,\"redefine\":false,\"summary\":[],\"prio\":7,\"fields\":[]}",
                  "a planned answer whose 'summary' is not a string" },
                { "{\"type\":\"planned\",\"id\":1,\"redefine\":false,\"fields\":[]}", "a planned answer without 'prio'" },
                { "{\"type\":\"planned\",\"id\":1,\"redefine\":false,\"prio\":8,\"fields\":[]}",
                  "a planned answer whose 'prio' is not a priority (0-7)" },
                { "{\"type\":\"planned\",\"id\":1,\"redefine\":false,\"prio\":\"6\",\"fields\":[]}",
                  "a planned answer whose 'prio' is not a priority (0-7)" },
                { "{\"type\":\"planned\",\"id\":1,\"redefine\":false,\"prio\":6}", "a planned answer without 'fields'" },
                { "{\"type\":\"planned\",\"id\":1,\"redefine\":false,\"prio\":6,\"fields\":{}}",
                  "a planned answer whose 'fields' is not a list of [key, value] string pairs" },
                { "{\"type\":\"planned\",\"id\":1,\"redefine\":false,\"prio\":6,\"fields\":[[\"K\"]]}",
                  "a planned answer whose 'fields' is not a list of [key, value] string pairs" },
                { "{\"type\":\"planned\",\"id\":1,\"redefine\":false,\"prio\":6,\"fields\":[[\"K\",\"v\"],[\"K\",2]]}",
                  "a planned answer whose 'fields' is not a list of [key, value] string pairs" },
                { "{\"type\":\"recheck\",\"uuid\":7}", "a recheck request whose 'uuid' is not a string" },
                { "{\"type\":\"domains\"}", "a domains message without 'persistent'" },
                { "{\"type\":\"domains\",\"persistent\":\"u\"}",
                  "a domains message whose 'persistent' is not a list of UUID strings" },
                { "{\"type\":\"domains\",\"persistent\":[\"u\",1]}",
                  "a domains message whose 'persistent' is not a list of UUID strings" },
                { "{\"type\":\"domain\",\"persistent\":true}", "a domain message without 'uuid'" },
                { "{\"type\":\"domain\",\"uuid\":\"u\"}", "a domain message without 'persistent'" },
                { "{\"type\":\"domain\",\"uuid\":\"u\",\"persistent\":\"yes\"}",
                  "a domain message whose 'persistent' is not a boolean" },
                { "{\"type\":\"plan_restart\",\"uuid\":\"u\",\"xml\":\"x\"}", "a restart plan request without 'id'" },
                { "{\"type\":\"plan_restart\",\"id\":1,\"xml\":\"x\"}", "a restart plan request without 'uuid'" },
                { "{\"type\":\"plan_restart\",\"id\":1,\"uuid\":\"u\"}", "a restart plan request without 'xml'" },
                { "{\"type\":\"plan_restart\",\"id\":1,\"uuid\":\"u\",\"xml\":[]}",
                  "a restart plan request whose 'xml' is not a string" },
                { "{\"type\":\"restarted\",\"outcome\":\"lost\",\"unplanned_us\":0,\"total_us\":0}",
                  "a restarted message without 'uuid'" },
                { "{\"type\":\"restarted\",\"uuid\":\"u\",\"outcome\":\"done\",\"unplanned_us\":0,\"total_us\":0}",
                  "a restarted message whose 'outcome' is not restarted, fallback, lost or skipped" },
                { "{\"type\":\"restarted\",\"uuid\":\"u\",\"outcome\":\"lost\",\"total_us\":0}",
                  "a restarted message without 'unplanned_us'" },
                { "{\"type\":\"restarted\",\"uuid\":\"u\",\"outcome\":\"lost\",\"unplanned_us\":0,\"total_us\":-1}",
                  "a restarted message whose 'total_us' is not a count" },
                { "{\"type\":\"restart\",\"uuid\":\"u\",\"since_us\":0}", "a restart request without 'window_ms'" },
                { "{\"type\":\"restart\",\"uuid\":\"u\",\"window_ms\":5}", "a restart request without 'since_us'" },
                { "{\"type\":\"restart\",\"window_ms\":5,\"since_us\":0}", "a restart request without 'uuid'" },
                { "{\"type\":\"restart\",\"uuid\":\"u\",\"window_ms\":5,\"since_us\":0,\"files\":\"/k\"}",
                  "a restart request whose 'files' is not a list of paths" },
                { "{\"type\":\"restart\",\"uuid\":\"u\",\"window_ms\":5,\"since_us\":0,\"files\":[1]}",
                  "a restart request whose 'files' is not a list of paths" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                json_object *o = json_tokener_parse(cases[i].payload);
                assert_non_null(o);
                struct wproto_msg d = { .type = WPROTO_RECHECK, .obj = NULL };
                _cleanup_free_ char *err = NULL;
                int r = wproto_decode(o, &d, &err);
                json_object_put(o);
                if (r != -EPROTO || !err || !streq(err, cases[i].error))
                        fail_msg("%s: %d, '%s', expected '%s'", cases[i].payload, r, strna(err), cases[i].error);
                assert_null(d.obj);     /* untouched */
        }
}

/* What the reader would refuse is not written either. */
static void test_encode_refused(void **state) {
        char *f = NULL;
        size_t len = 0;
        const struct wproto_field bad[] = { { "K", NULL } };
        assert_int_equal(wproto_encode_plan(&(struct wproto_plan) { .id = 1 }, &f, &len), -EINVAL);
        assert_int_equal(wproto_encode_forget(&(struct wproto_forget) { NULL }, &f, &len), -EINVAL);
        assert_int_equal(wproto_encode_planned(&(struct wproto_planned) { .prio = 8 }, &f, &len), -EINVAL);
        assert_int_equal(wproto_encode_planned(&(struct wproto_planned) { .fields = bad, .n_fields = 1 }, &f, &len), -EINVAL);
        assert_int_equal(wproto_encode(&(struct wproto_msg) { .type = (enum wproto_type) 99 }, &f, &len), -EINVAL);
        assert_null(f);

        /* Over the frame limit. */
        size_t n = FRAME_MAX_PAYLOAD + 1;
        _cleanup_free_ char *big = xmalloc(n + 1);
        memset(big, 'x', n);
        big[n] = 0;
        assert_int_equal(wproto_encode_plan(&(struct wproto_plan) { .id = 1, .xml = big, .xml_len = n }, &f, &len), -EMSGSIZE);
        assert_null(f);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_plan),
                cmocka_unit_test(test_forget),
                cmocka_unit_test(test_status),
                cmocka_unit_test(test_planned),
                cmocka_unit_test(test_recheck),
                cmocka_unit_test(test_restart_messages),
                cmocka_unit_test(test_encode_any),
                cmocka_unit_test(test_unknown_keys),
                cmocka_unit_test(test_refused),
                cmocka_unit_test(test_encode_refused),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

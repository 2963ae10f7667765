/* Fuzz target: the hook protocol as pcinumad reads it from a client.
 *
 * An input whose first byte is 0x00 or 0x01 (where every valid frame
 * length starts) is a raw byte stream; any other input is a JSON payload,
 * framed here, so that the fuzzer can work on the JSON directly.
 *
 * The stream goes through frame_decoder_feed() three ways: all at once,
 * one byte at a time, and in chunks of pseudo-random sizes.  All three
 * must decode the same frames and stop at the same error.  Each decoded
 * object goes through proto_request_parse() and proto_response_parse(); a
 * hook request then through decide_hook(), as the daemon answers it (on
 * the sample host, so an embedded domain XML reaches the engine), and the
 * object must survive frame_encode() and decoding again. */
#include "fuzz.h"

#include "decide.h"
#include "hook-protocol.h"
#include "policy.h"

#define MAX_FRAMES 64

static struct hostmap *host;
static struct policy *pol;

struct outcome {
        size_t n_frames;
        char *frames[MAX_FRAMES];       /* each decoded object, as JSON text */
        int error;                      /* the error that ended the stream, or 0 */
        bool busy;                      /* a frame was left unfinished */
};

static void outcome_done(struct outcome *o) {
        for (size_t i = 0; i < o->n_frames; i++)
                free(o->frames[i]);
        *o = (struct outcome) {0};
}

static char *to_text(json_object *o) {
        return xstrdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
}

static void serve(json_object *o) {
        struct proto_request req = {0};
        struct proto_response resp = {0};
        _cleanup_free_ char *err = NULL, *err2 = NULL;

        if (proto_request_parse(o, &req, &err) >= 0) {
                for (size_t i = 0; i < ELEMENTSOF(req.argv); i++)
                        if (!req.argv[i])
                                fuzz_fail("proto_request_parse() left argv[%zu] NULL", i);
                if (req.type == PROTO_REQUEST_HOOK) {
                        struct decision d;
                        /* Every kind of context, chosen by the XML's length. */
                        char uuid[37];
                        struct decide_context ctx = {
                                .updating = req.xml_len % 2 == 0, .watcher = req.xml_len % 3 == 0,
                                .persistence = (enum decide_persistence) (req.xml_len % 5 % 3),
                                .own_start = req.xml_len % 7 == 0, .incoming = req.xml_len % 11 == 0,
                        };
                        if (req.xml && decide_peek_uuid(req.xml, req.xml_len, uuid) == 0)
                                ctx.uuid = uuid;
                        decide_hook(&req, host, pol, NULL, &ctx, &d);
                        if (d.exit_code != (d.verdict == DECIDE_REFUSE))
                                fuzz_fail("verdict %s with exit code %d", decide_verdict_to_string(d.verdict),
                                          d.exit_code);
                        json_object *answer = proto_response_new_hook(d.exit_code, d.out, d.message,
                                                                     decide_verdict_to_string(d.verdict));
                        _cleanup_free_ char *frame = NULL;
                        size_t frame_len;
                        if (frame_encode(answer, &frame, &frame_len) < 0)
                                fuzz_fail("cannot encode the answer");
                        json_object_put(answer);
                        decision_done(&d);
                }
                proto_request_done(&req);
        }
        if (proto_response_parse(o, &resp, &err2) >= 0)
                proto_response_done(&resp);
}

/* Encode o and decode it again: the same object must come back. */
static void round_trip(json_object *o) {
        _cleanup_free_ char *frame = NULL, *err = NULL, *a = NULL, *b = NULL;
        struct frame_decoder dec = {0};
        json_object *back = NULL;
        size_t frame_len, consumed;

        if (frame_encode(o, &frame, &frame_len) < 0)
                return;   /* too big to send */
        int r = frame_decoder_feed(&dec, frame, frame_len, &consumed, &back, &err);
        if (r != 1 || consumed != frame_len)
                fuzz_fail("an encoded frame does not decode: %d (%s), %zu of %zu bytes", r, strna(err), consumed,
                          frame_len);
        a = to_text(o);
        b = to_text(back);
        if (!streq(a, b))
                fuzz_fail("frame round trip changed the object:\n%s\n%s", a, b);
        json_object_put(back);
        frame_decoder_reset(&dec);
}

/* Feed the stream in chunks whose sizes next_chunk() picks. */
static void run(const uint8_t *data, size_t size, size_t (*next_chunk)(uint32_t *state, size_t left),
                uint32_t seed, bool check, struct outcome *out) {
        struct frame_decoder dec = {0};
        uint32_t state = seed;
        size_t pos = 0;

        while (pos < size && out->n_frames < MAX_FRAMES) {
                size_t end = pos + next_chunk(&state, size - pos);

                while (pos < end) {
                        _cleanup_free_ char *err = NULL;
                        json_object *o = NULL;
                        size_t consumed = SIZE_MAX;

                        int r = frame_decoder_feed(&dec, data + pos, end - pos, &consumed, &o, &err);
                        if (consumed > end - pos)
                                fuzz_fail("frame_decoder_feed() consumed %zu of %zu bytes", consumed, end - pos);
                        if (r < 0) {
                                if (!err)
                                        fuzz_fail("frame_decoder_feed() failed without a message");
                                out->error = r;
                                frame_decoder_reset(&dec);
                                return;
                        }
                        if (r == 0 && consumed != end - pos)
                                fuzz_fail("frame_decoder_feed() wants more but left %zu bytes", end - pos - consumed);
                        pos += consumed;
                        if (r == 0)
                                break;
                        if (!o)
                                fuzz_fail("frame_decoder_feed() returned 1 without an object");
                        if (frame_decoder_busy(&dec))
                                fuzz_fail("the decoder is busy right after a frame");
                        out->frames[out->n_frames++] = to_text(o);
                        if (check) {
                                serve(o);
                                round_trip(o);
                        }
                        json_object_put(o);
                        if (out->n_frames == MAX_FRAMES)
                                break;
                }
        }
        out->busy = frame_decoder_busy(&dec);
        frame_decoder_reset(&dec);
}

static size_t chunk_all(uint32_t *state, size_t left) {
        (void) state;
        return left;
}

static size_t chunk_one(uint32_t *state, size_t left) {
        (void) state;
        (void) left;
        return 1;
}

static size_t chunk_random(uint32_t *state, size_t left) {
        *state = *state * 1103515245u + 12345u;
        size_t c = 1 + (*state >> 16) % 61;
        return c < left ? c : left;
}

static void compare(const struct outcome *a, const struct outcome *b, const char *how) {
        if (a->n_frames != b->n_frames || a->error != b->error || a->busy != b->busy)
                fuzz_fail("fed %s: %zu frames, error %d, busy %d; all at once: %zu frames, error %d, busy %d", how,
                          b->n_frames, b->error, b->busy, a->n_frames, a->error, a->busy);
        for (size_t i = 0; i < a->n_frames; i++)
                if (!streq(a->frames[i], b->frames[i]))
                        fuzz_fail("fed %s: frame %zu differs", how, i);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        _cleanup_free_ uint8_t *framed = NULL;
        struct outcome whole = {0}, bytes = {0}, chunks = {0};

        if (size > 1024 * 1024)
                return 0;
        if (!host) {
                _cleanup_free_ char *err = NULL;
                static const char text[] = "{\"default\": {\"policy\": \"require\"}, \"allow_domain_policy\": true}";
                host = fuzz_sample_hostmap();
                if (policy_parse(text, sizeof(text) - 1, "fuzz", &pol, &err) < 0)
                        fuzz_fail("built-in policy: %s", err);
        }

        framed = fuzz_frame_input(&data, &size);

        uint32_t seed = 2166136261u;
        for (size_t i = 0; i < size && i < 64; i++)
                seed = (seed ^ data[i]) * 16777619u;

        run(data, size, chunk_all, 0, true, &whole);
        run(data, size, chunk_one, 0, false, &bytes);
        compare(&whole, &bytes, "one byte at a time");
        run(data, size, chunk_random, seed, false, &chunks);
        compare(&whole, &chunks, "in random chunks");

        outcome_done(&whole);
        outcome_done(&bytes);
        outcome_done(&chunks);
        return 0;
}

/* Fuzz target: the watcher protocol (lib/base/watcher-protocol.h) as either side
 * reads it from the link.
 *
 * An input whose first byte is 0x00 or 0x01 (where every valid frame
 * length starts) is a raw byte stream, cut into frames by the hook
 * protocol's decoder as the link's readers do; any other input is one
 * JSON payload, framed here, so that the fuzzer can work on the JSON
 * directly.  Each object goes through wproto_decode(): a refusal must
 * come with an error; a message must encode again (unless too big to
 * send), decode from that frame, and encode to the very same bytes. */
#include "fuzz.h"

#include "frame.h"
#include "watcher-protocol.h"

#define MAX_FRAMES 64

/* Decode one frame that must hold exactly one object. */
static json_object *decode_frame(const char *frame, size_t len) {
        struct frame_decoder dec = {0};
        _cleanup_free_ char *err = NULL;
        json_object *o = NULL;
        size_t consumed = 0;
        int r = frame_decoder_feed(&dec, frame, len, &consumed, &o, &err);
        frame_decoder_reset(&dec);
        if (r != 1 || consumed != len)
                fuzz_fail("an encoded message does not decode as a frame: %d (%s)", r, strna(err));
        return o;
}

static void check(json_object *o) {
        struct wproto_msg m, back;
        _cleanup_free_ char *err = NULL, *frame = NULL, *frame2 = NULL;
        size_t len = 0, len2 = 0;

        int r = wproto_decode(o, &m, &err);
        if (r < 0) {
                if (r != -EPROTO || !err)
                        fuzz_fail("wproto_decode() refused a message without an error: %d", r);
                return;
        }
        if (!wproto_type_to_string(m.type))
                fuzz_fail("wproto_decode() returned type %d", (int) m.type);
        r = wproto_encode(&m, &frame, &len);
        if (r == -EMSGSIZE) {
                wproto_msg_done(&m);
                return;   /* too big to send (the strings grow when escaped) */
        }
        if (r < 0)
                fuzz_fail("a decoded %s message does not encode: %d", wproto_type_to_string(m.type), r);

        json_object *o2 = decode_frame(frame, len);
        _cleanup_free_ char *err2 = NULL;
        if (wproto_decode(o2, &back, &err2) < 0)
                fuzz_fail("an encoded %s message is refused: %s", wproto_type_to_string(m.type), err2);
        json_object_put(o2);
        if (back.type != m.type)
                fuzz_fail("round trip changed the type from %s to %s", wproto_type_to_string(m.type),
                          wproto_type_to_string(back.type));
        if (wproto_encode(&back, &frame2, &len2) < 0 || len2 != len || memcmp(frame, frame2, len) != 0)
                fuzz_fail("a %s message encodes differently after a round trip", wproto_type_to_string(m.type));
        wproto_msg_done(&back);
        wproto_msg_done(&m);
}

struct stream {
        size_t n_frames;
};

static void on_frame(json_object *o, void *userdata) {
        struct stream *s = userdata;
        if (s->n_frames++ < MAX_FRAMES)
                check(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        _cleanup_free_ uint8_t *framed = NULL;

        if (size > 1024 * 1024)
                return 0;
        framed = fuzz_frame_input(&data, &size);

        struct frame_decoder dec = {0};
        struct stream s = {0};
        _cleanup_free_ char *err = NULL;
        if (frame_decoder_feed_all(&dec, data, size, on_frame, &s, &err) < 0 && !err)
                fuzz_fail("frame_decoder_feed_all() failed without a message");
        frame_decoder_reset(&dec);
        return 0;
}

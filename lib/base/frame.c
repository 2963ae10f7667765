/* The framing shared by the hook protocol (hook-protocol.h) and the watcher
 * protocol (watcher-protocol.h): a frame is a 4-byte big-endian payload length
 * followed by that many bytes of UTF-8 JSON text holding one object.
 * Pure: no I/O. */
#include "frame.h"

#include <inttypes.h>

#include "fastjson.h"
#include "util.h"

void frame_header(char *buf, size_t len) {
        buf[0] = (char) ((len >> 24) & 0xff);
        buf[1] = (char) ((len >> 16) & 0xff);
        buf[2] = (char) ((len >> 8) & 0xff);
        buf[3] = (char) (len & 0xff);
}

int frame_encode(json_object *o, char **ret, size_t *ret_len) {
        size_t len = 0;
        const char *s;
        char *buf;

        if (!o || !ret || !ret_len)
                return -EINVAL;

        s = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
        if (!s)
                return -ENOMEM;
        if (len == 0 || len > FRAME_MAX_PAYLOAD)
                return -EMSGSIZE;

        buf = xmalloc(FRAME_HEADER_SIZE + len);
        frame_header(buf, len);
        memcpy(buf + FRAME_HEADER_SIZE, s, len);

        *ret = buf;
        *ret_len = FRAME_HEADER_SIZE + len;
        return 0;
}

void frame_decoder_reset(struct frame_decoder *d) {
        if (!d)
                return;
        free(d->payload);
        *d = (struct frame_decoder) {.header_len = 0};
}

int frame_decoder_feed_all(struct frame_decoder *d, const void *data, size_t n,
                           void (*handle)(json_object *o, void *userdata), void *userdata, char **ret_error) {
        const char *p = data;
        size_t off = 0;
        while (off < n) {
                size_t used = 0;
                json_object *o = NULL;
                int r = frame_decoder_feed(d, p + off, n - off, &used, &o, ret_error);
                if (r < 0) {
                        frame_decoder_reset(d);
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

bool frame_decoder_busy(const struct frame_decoder *d) {
        return d && (d->header_len > 0 || d->payload_have > 0);
}

int frame_decoder_feed(struct frame_decoder *d, const void *data, size_t n, size_t *consumed,
                       json_object **ret, char **ret_error) {
        const uint8_t *p = data;
        size_t used = 0;
        int r;

        if (consumed)
                *consumed = 0;
        if (!d || !ret || (n > 0 && !data))
                return set_error(ret_error, -EINVAL, "invalid arguments");

        while (d->header_len < FRAME_HEADER_SIZE) {
                if (used == n) {
                        if (consumed)
                                *consumed = used;
                        return 0;
                }
                d->header[d->header_len++] = p[used++];
                if (d->header_len == FRAME_HEADER_SIZE) {
                        uint32_t len = (uint32_t) d->header[0] << 24 | (uint32_t) d->header[1] << 16 |
                                       (uint32_t) d->header[2] << 8 | (uint32_t) d->header[3];

                        if (consumed)
                                *consumed = used;
                        /* Refuse from the header alone, before allocating. */
                        if (len == 0)
                                return set_error(ret_error, -EMSGSIZE, "frame length 0");
                        if (len > FRAME_MAX_PAYLOAD)
                                return set_error(ret_error, -EMSGSIZE,
                                                 "frame of %" PRIu32 " bytes exceeds the %u byte limit",
                                                 len, FRAME_MAX_PAYLOAD);
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
        r = fastjson_parse_object(d->payload, d->payload_len, ret, ret_error);
        if (r < 0)
                return r;

        /* Ready for the next frame. */
        frame_decoder_reset(d);
        return 1;
}


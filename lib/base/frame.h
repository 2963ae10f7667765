/* The framing shared by the hook protocol (hook-protocol.h) and the watcher
 * protocol (watcher-protocol.h): a frame is a 4-byte big-endian payload length
 * followed by that many bytes of UTF-8 JSON text holding one object.
 * Frames are written from json-c objects (or, on the hook's hot path,
 * straight into a buffer with frame_header()) and read back by an
 * incremental decoder for non-blocking reads.  Pure: buffers in, buffers
 * out. */
#pragma once

#include <json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Largest payload accepted in either direction: a domain XML of up to
 * DOMAIN_XML_MAX (4 MiB) grows when JSON-escaped; anything over this is
 * refused without reading it. */
#define FRAME_MAX_PAYLOAD (16u * 1024u * 1024u)
#define FRAME_HEADER_SIZE 4

/* Serialise o as one frame (header + payload).  The caller owns *ret. */
int frame_encode(json_object *o, char **ret, size_t *ret_len);

/* Write the header of a frame whose payload is len bytes (at most
 * FRAME_MAX_PAYLOAD) at buf[0..FRAME_HEADER_SIZE). */
void frame_header(char *buf, size_t len);

/* An incremental frame decoder for non-blocking reads. */
struct frame_decoder {
        uint8_t header[FRAME_HEADER_SIZE];
        size_t header_len;
        uint32_t payload_len;
        char *payload;
        size_t payload_have;
};

/* Feed n bytes.  Returns 1 with *ret set (a JSON object the caller owns)
 * when a frame is complete, having consumed *consumed bytes (the rest
 * belongs to the next frame); 0 when more bytes are needed (all n were
 * consumed); or a negative errno with *ret_error: -EMSGSIZE for a length
 * of 0 or over FRAME_MAX_PAYLOAD, -EBADMSG for a payload that is not a
 * JSON object.  After an error the decoder must be reset. */
int frame_decoder_feed(struct frame_decoder *d, const void *data, size_t n, size_t *consumed,
                       json_object **ret, char **ret_error);
void frame_decoder_reset(struct frame_decoder *d);
/* Feed n bytes and call handle() for each complete frame's object (put
 * after the call).  0, or a negative errno with *ret_error as from
 * frame_decoder_feed(), the decoder then reset. */
int frame_decoder_feed_all(struct frame_decoder *d, const void *data, size_t n,
                           void (*handle)(json_object *o, void *userdata), void *userdata, char **ret_error);
/* True while a frame has been started but not finished. */
bool frame_decoder_busy(const struct frame_decoder *d);


/* The hook protocol (docs/design.md §9): length-prefixed, versioned JSON over a
 * SOCK_STREAM Unix socket.  A frame is a 4-byte big-endian payload length
 * followed by that many bytes of UTF-8 JSON text holding one object.
 * Pure: buffers in, buffers out; shared by pcinumad, pcinuma-hook and
 * pcinumactl.
 *
 * Request objects:
 *   {"version": 1, "type": "hook",
 *    "argv": ["<domain name>", "<phase>", "<subphase>", "<extra>"],
 *    "xml": "<domain …>"}                       -- "xml" may be absent
 *   {"version": 1, "type": "status"}
 *
 * Response objects:
 *   {"version": 1, "exit": 0|1, "stdout": "…", "stderr": "…",
 *    "verdict": "allow"|"warn"|"refuse"|"pass"|"skip"}      -- to "hook"
 *   {"version": 1, "status": {…}}                           -- to "status"
 *   {"version": 1, "error": "…"}        -- the request was not served */
#pragma once

#include <json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "json-cleanup.h"
#include "util.h"

#define PROTO_VERSION 1
#define PROTO_VERSION_STR "1"   /* the same, for string literals */

enum proto_request_type {
        PROTO_REQUEST_HOOK,
        PROTO_REQUEST_STATUS,
};

struct proto_request {
        enum proto_request_type type;
        /* hook: */
        char *argv[4];          /* name, phase, subphase, extra; never NULL after parse ("" if absent) */
        char *xml;              /* NULL if absent */
        size_t xml_len;
        bool xml_not_utf8;      /* "xml_invalid_utf8": the hook read bytes that are not UTF-8 and */
        long xml_invalid_utf8;  /* sent them replaced by U+FFFD; the first one's offset */
};

/* Validate and extract a request.  Errors (-EPROTO with *ret_error) name
 * the problem: wrong or missing version ("unsupported protocol version 2,
 * this daemon speaks 1"), unknown type, argv not an array of 1..4
 * strings, xml not a string. */
int proto_request_parse(json_object *o, struct proto_request *ret, char **ret_error);
void proto_request_done(struct proto_request *r);

json_object *proto_request_new_hook(const char *const argv[4], const char *xml, size_t xml_len);

/* The same request, straight to a frame without building JSON objects: the
 * hook's hot path (a 16 KB domain XML costs json-c far more than a plain
 * escaping loop).  The payload is exactly what proto_request_parse()
 * accepts.  The caller owns *ret. */
int proto_frame_encode_hook(const char *const argv[4], const char *xml, size_t xml_len, char **ret, size_t *ret_len);

json_object *proto_request_new_status(void);

struct proto_response {
        char *error;            /* set for an error response; the rest is then unset */
        int exit_code;
        char *stdout_text;      /* may be NULL */
        char *stderr_text;      /* may be NULL */
        char *verdict;          /* may be NULL */
        json_object *status;    /* a reference (put by proto_response_done), or NULL */
};

int proto_response_parse(json_object *o, struct proto_response *ret, char **ret_error);
void proto_response_done(struct proto_response *r);

json_object *proto_response_new_hook(int exit_code, const char *stdout_text, const char *stderr_text, const char *verdict);
json_object *proto_response_new_error(const char *fmt, ...) _printf_(1, 2);
/* Takes ownership of status. */
json_object *proto_response_new_status(json_object *status);

/* A fast JSON reader and string writer for the two protocols' hot paths:
 * the frame decoder reads each payload through fastjson_parse_object(),
 * which builds the common case (an object of strings, small integers,
 * arrays and objects) itself, eight bytes at a time, and hands anything
 * else to json-c's strict tokener; the hook writes its request with
 * fastjson_escape().  Pure: no I/O, json-c only. */
#pragma once

#include <json.h>
#include <stdbool.h>
#include <stddef.h>

/* Parse buf[0..len), a complete JSON text that must hold one object;
 * buf[len] must be a NUL (the frame decoder adds it).  0 with *ret set
 * (the caller owns it), or -EBADMSG with *ret_error saying what is wrong
 * ("payload is not JSON: …", "payload has N trailing bytes after the JSON
 * value", "payload is not a JSON object (it is a JSON array)"). */
int fastjson_parse_object(const char *buf, size_t len, json_object **ret, char **ret_error);

/* Room fastjson_escape() needs for n bytes: every byte as \u00XX, and the
 * quotes. */
#define FASTJSON_ESCAPE_MAX(n) (2 + 6 * (n))

/* Write s[0..n) as a quoted JSON string (RFC 8259 escaping; UTF-8 passes
 * through as is) at out, which has room for FASTJSON_ESCAPE_MAX(n) bytes;
 * returns the end.  With check_utf8 the bytes must also be UTF-8 (RFC
 * 3629): if they are not, NULL is returned and *ret_bad is the offset of
 * the first byte that breaks it. */
char *fastjson_escape(char *out, const char *s, size_t n, bool check_utf8, long *ret_bad);

/* A copy of s[0..n) with every byte that breaks UTF-8 replaced by U+FFFD,
 * so it can travel in JSON; *ret_len gets its length.  The caller owns
 * the copy. */
char *utf8_sanitize(const char *s, size_t n, size_t *ret_len);

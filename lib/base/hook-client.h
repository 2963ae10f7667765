/* The client side of the hook protocol: one request, one answer, within a
 * time budget.  Used by pcinumactl (and small enough for the hook). */
#pragma once

#include <stdint.h>

#include "frame.h"

/* Connect to socket_path, send req, and read one response frame, all
 * within timeout_ms.  Returns 0 with *ret (the caller owns it), or a
 * negative errno with *ret_error naming what failed ("cannot connect to
 * /run/pcinuma/hook.sock: No such file or directory", "no answer from
 * ... within 5000 ms", "malformed answer: ..."). */
/* Wait for 'events' on fd until the deadline (CLOCK_MONOTONIC in ms; -1:
 * none).  1 when ready, 0 on timeout, or a negative errno. */
int client_wait_fd(int fd, short events, int64_t deadline);

/* The same with the request already encoded as a frame. */
int client_call_frame(const char *socket_path, const char *frame, size_t len, unsigned timeout_ms, json_object **ret,
                      char **ret_error);

int client_call(const char *socket_path, json_object *req, unsigned timeout_ms, json_object **ret, char **ret_error);

/* The hook socket: accepts connections on the listening Unix socket,
 * checks SO_PEERCRED, reads length-prefixed frames without blocking,
 * hands each request to the manager and writes the answer back (at once,
 * or when a worker has decided it: server_reply()).  Many clients are
 * served at once, and a slow or stuck one only ever costs its own
 * connection (which times out). */
#pragma once

#include <stdbool.h>
#include <systemd/sd-event.h>

struct conn;
struct manager;
struct server;

/* Take over the listening fd (socket-activated or bound by us). */
int server_new(struct manager *m, sd_event *e, int listen_fd, struct server **ret);
/* Remove 'path', the socket file pcinumad bound itself, when the server is
 * freed (at stop), if it is still the file bound then: socket activation
 * leaves it to systemd (RemoveOnStop=). */
void server_own_socket_file(struct server *s, const char *path);
struct server *server_free(struct server *s);
unsigned server_n_connections(const struct server *s);

/* The answer to the request of c that manager_handle() gave a worker: an
 * encoded frame (taken; NULL: it could not be encoded, and c is closed).
 * c then reads its next request. */
void server_reply(struct conn *c, char *frame, size_t len);

/* The listening socket: from socket activation if there is one, else bind
 * 'path' ourselves (mode 0600, parent directory created).  Refuses to
 * steal the socket from another running daemon. */
int server_listen_fd(const char *path, int *ret_fd, bool *ret_activated);

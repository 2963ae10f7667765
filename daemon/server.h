/* The hook socket: accepts connections on the listening Unix socket,
 * checks SO_PEERCRED, reads length-prefixed frames without blocking,
 * hands each request to its owner (the manager, through struct
 * server_ops) and writes the answer back (at once, or when a worker has
 * decided it: server_reply()).  Many clients are served at once, and a
 * slow or stuck one only ever costs its own connection (which times out). */
#pragma once

#include <json.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <systemd/sd-event.h>

struct conn;
struct hook_job;        /* the owner's: a request a worker decides */
struct server;

/* What the server serves with, copied by server_new(). */
struct server_config {
        unsigned request_timeout_ms;    /* per-connection read timeout */
        unsigned max_connections;
        /* Besides root, these uids are served (--allow-uid). */
        uid_t allowed_uids[8];
        size_t n_allowed_uids;
};

/* How the server hands on what it reads: its owner's calls, on the event
 * loop, with the userdata given to server_new(). */
struct server_ops {
        /* Serve one request (a parsed frame, borrowed) from connection c:
         * return the response now, or NULL with *ret_job set when a worker
         * decides it; its answer then comes through server_reply(c, ...). */
        json_object *(*handle)(void *userdata, json_object *request, struct conn *c, uid_t peer_uid, pid_t peer_pid,
                               struct hook_job **ret_job);
        /* c is closed while a worker decides its request (the client went
         * away): the job must not call server_reply() for it. */
        void (*detach)(void *userdata, struct hook_job *job);
};

/* What the server counts itself. */
struct server_stats {
        /* Requests that never reached handle(): a malformed frame, one cut
         * off by the client's hangup or left incomplete past its timeout.
         * Each is a request and an error in `pcinumactl status`. */
        uint64_t n_bad;
        uint64_t n_rejected;            /* peers refused by the SO_PEERCRED check */
        unsigned n_connections;         /* open now */
};

/* Take over the listening fd (socket-activated or bound by us). */
int server_new(const struct server_config *cfg, const struct server_ops *ops, void *userdata, sd_event *e,
               int listen_fd, struct server **ret);
/* Remove 'path', the socket file pcinumad bound itself, when the server is
 * freed (at stop), if it is still the file bound then: socket activation
 * leaves it to systemd (RemoveOnStop=). */
void server_own_socket_file(struct server *s, const char *path);
struct server *server_free(struct server *s);
/* The counters (all zero for NULL). */
void server_stats(const struct server *s, struct server_stats *ret);

/* The answer to the request of c that handle() gave a worker: an
 * encoded frame (taken; NULL: it could not be encoded, and c is closed).
 * c then reads its next request. */
void server_reply(struct conn *c, char *frame, size_t len);

/* The listening socket: from socket activation if there is one, else bind
 * 'path' ourselves (mode 0600, parent directory created).  Refuses to
 * steal the socket from another running daemon. */
int server_listen_fd(const char *path, int *ret_fd, bool *ret_activated);

/* Internal to rectrain's services (src/net/, src/offload/, src/cache/): ZeroMQ sockets and
 * messages carrying net.h frames. */
#ifndef REC_NET_ZMQ_IMPL_H
#define REC_NET_ZMQ_IMPL_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <zmq.h>

#include "curve_impl.h"
#include "rectrain/net.h"

/* Largest message a socket accepts (ZMQ_MAXMSGSIZE): a frame and its header. Bigger ones make
 * ZeroMQ drop the connection before anything is read. */
#define REC__ZMQ_MAX_MSG ((int64_t)(REC_NET_HEAD + REC_NET_MAX_BODY))

/* Sends w's frame as one message (after an optional routing identity part). REC_EIO on failure
 * (EAGAIN with ZMQ_DONTWAIT included: the caller decides). */
rec_status rec__zsend(void *sock, const zmq_msg_t *ident, const rec_wbuf *w, int flags);

/* A socket with the options every rectrain socket has: no linger on close, the message bound. */
void *rec__zsocket(void *ctx, int type);

/* Sets ZMQ_IPV6 on sock for endpoint ep (before its bind or connect): on for a bracketed IPv6
 * host (tcp://[::1]:P), which ZeroMQ refuses otherwise; off for the rest, which then keep their
 * IPv4 sockets (and peers' plain IPv4 addresses in the logs). */
void rec__zipv6(void *sock, const char *ep);

/* Binds sock to endpoint ep: an address, an interface, "*", or a host name (ZeroMQ binds no
 * names: each of the name's addresses is bound). REC_EIO naming ep and the cause: a taken port,
 * an address not this machine's, a name that does not resolve. */
rec_status rec__zbind(void *sock, const char *ep);

/* Moves message src into dst (initialised) when its data is 8-byte aligned, else copies it
 * into a new message at an aligned place: *frame is the frame, aligned, valid while dst is,
 * *len (when not NULL) its bytes.
 * Bodies' arrays are read in place (net.h). REC_ENOMEM leaves dst empty. */
rec_status rec__zmsg_aligned(zmq_msg_t *dst, zmq_msg_t *src, const uint8_t **frame, size_t *len);

/* A request taken off a service's ROUTER socket: [identity][one frame]. */
typedef struct rec_zreq {
    zmq_msg_t id, m;
    rec_frame_head h;
    const uint8_t *body;   /* in m; the frame is 8-byte aligned */
} rec_zreq;

/* Receives one request without waiting. 1: r holds a frame whose header is valid. 0: nothing
 * usable; *why says why when something was refused (a message of more than one frame is
 * drained; a bad header is answered with ERROR, built in w), NULL when nothing came. Close r
 * with rec__zreq_close either way. */
int rec__zreq_recv(void *sock, rec_zreq *r, rec_wbuf *w, const char **why);
void rec__zreq_close(rec_zreq *r);
/* Answers r with ERROR: status s and the current rec_errmsg(). */
rec_status rec__zreq_error(void *sock, rec_zreq *r, rec_wbuf *w, rec_status s);
/* ---- a service: one ROUTER socket, one request at a time (STYLE.md: one poll set) ---- */
typedef struct rec_zservice {
    const char *name;        /* "embserver", ...: the prefix of its messages and log lines */
    FILE *log;               /* NULL: quiet */
    void *ctx, *sock;
    void *zap, *mon;         /* its ZAP handler (with keys), the monitor of its handshakes */
    rec__zkeys keys;
    rec__zlog rlog;          /* its refused peers (log) */
    const char *listen;
    int64_t refused;         /* requests refused before they were read (bad frames) */
    int64_t refused_peers;   /* connections refused: keys not allowed, failed handshakes */
} rec_zservice;

/* Binds name's ROUTER socket at `listen`, with CURVE and the allow-list of sec->keys (secure
 * by default: plain text off loopback only with sec->insecure). REC_EIO naming the endpoint
 * when it cannot bind; the key loader's errors (curve_impl.h). */
rec_status rec__zservice_open(rec_zservice *v, const char *name, const char *listen, const rec_net_secure *sec, FILE *log);
/* Calls serve(arg) whenever a request waits, until *stop is set (polled every 200 ms); answers
 * the ZAP handler's requests and logs refused handshakes in the same loop. */
rec_status rec__zservice_run(rec_zservice *v, const volatile sig_atomic_t *stop, void (*serve)(void *), void *arg);
void rec__zservice_close(rec_zservice *v);
/* Takes the waiting request into r: 1 when r holds a frame to serve; 0 otherwise, a refusal
 * logged and counted. Either way r is closed by rec__zservice_answer or rec__zreq_close. */
int rec__zservice_take(rec_zservice *v, rec_zreq *r, rec_wbuf *w);
/* Answers r and closes it: w's frame when s is REC_OK, else ERROR with rec_errmsg(), logged
 * as "peer ID: TYPE SEQ: message". */
void rec__zservice_answer(rec_zservice *v, rec_zreq *r, rec_wbuf *w, rec_status s);
/* "NAME: peer ID: what" to the log. */
void rec__zservice_log(const rec_zservice *v, const zmq_msg_t *id, const char *what);

#endif

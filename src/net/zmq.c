/* ZeroMQ helpers of rectrain's services (zmq_impl.h): sockets, sends, and the one way a
 * service takes a request off its ROUTER socket. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rectrain/core.h"
#include "zmq_impl.h"

rec_status rec__zsend(void *sock, const zmq_msg_t *ident, const rec_wbuf *w, int flags) {
    if (ident) {
        zmq_msg_t id;
        zmq_msg_init(&id);
        zmq_msg_copy(&id, (zmq_msg_t *)ident);
        if (zmq_msg_send(&id, sock, ZMQ_SNDMORE | flags) < 0) {
            zmq_msg_close(&id);
            return rec_errorf(REC_EIO, "cannot send: %s", zmq_strerror(zmq_errno()));
        }
    }
    if (zmq_send(sock, w->p, w->len, flags) < 0) return rec_errorf(REC_EIO, "cannot send: %s", zmq_strerror(zmq_errno()));
    return REC_OK;
}

void *rec__zsocket(void *ctx, int type) {
    void *s = zmq_socket(ctx, type);
    if (!s) return NULL;
    const int zero = 0;
    const int64_t max = REC__ZMQ_MAX_MSG;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max, sizeof max);
    return s;
}

void rec__zipv6(void *sock, const char *ep) {
    const int on = !strncmp(ep, "tcp://[", 7);
    zmq_setsockopt(sock, ZMQ_IPV6, &on, sizeof on);
}

/* Binds numeric endpoint ep: 0, or the errno. */
static int bind_one(void *sock, const char *ep) {
    rec__zipv6(sock, ep);
    return zmq_bind(sock, ep) == 0 ? 0 : zmq_errno();
}

/* ZeroMQ binds an address or an interface name, never a host name ("localhost"): here each of
 * the name's addresses is bound. 0 when all bound, but an IPv6 one where this machine has no
 * IPv6 (a name may list ::1 there); else the errno of the first that failed (the bind stops at
 * a taken port); *gai, the resolver's error, when the name has no address. */
static int bind_name(void *sock, const char *ep, int *gai) {
    const char *h = ep + 6, *colon = strrchr(h, ':');
    char host[256], numeric[INET6_ADDRSTRLEN], at[320];
    snprintf(host, sizeof host, "%.*s", (int)(colon - h) < 255 ? (int)(colon - h) : 255, h);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if ((*gai = getaddrinfo(host, NULL, &hints, &res)) != 0) return ENODEV;
    int bound = 0, err = 0;
    for (const struct addrinfo *a = res; a && err != EADDRINUSE; a = a->ai_next) {
        if (getnameinfo(a->ai_addr, a->ai_addrlen, numeric, sizeof numeric, NULL, 0, NI_NUMERICHOST)) continue;
        snprintf(at, sizeof at, a->ai_family == AF_INET6 ? "tcp://[%s]%s" : "tcp://%s%s", numeric, colon);
        const int e = bind_one(sock, at);
        const int no_v6 = a->ai_family == AF_INET6 && (e == EADDRNOTAVAIL || e == EAFNOSUPPORT);
        if (e && !no_v6 && (!err || e == EADDRINUSE)) err = e;
        bound += !e;
    }
    freeaddrinfo(res);
    return err ? err : bound ? 0 : EADDRNOTAVAIL;
}

rec_status rec__zbind(void *sock, const char *ep) {
    int e = bind_one(sock, ep), gai = 0;
    if (e == ENODEV && !strncmp(ep, "tcp://", 6) && strncmp(ep, "tcp://[", 7)) e = bind_name(sock, ep, &gai);
    if (!e) return REC_OK;
    if (e == EADDRINUSE)
        return rec_errorf(REC_EIO, "cannot listen on %s: %s (is the port taken? another service may listen there)", ep,
                          zmq_strerror(e));
    if (gai)
        return rec_errorf(REC_EIO, "cannot listen on %s: its host is no address or interface of this machine, nor a name "
                          "that resolves (%s)", ep, gai_strerror(gai));
    if (e == EADDRNOTAVAIL)
        return rec_errorf(REC_EIO, "cannot listen on %s: %s (the address is not one of this machine's)", ep,
                          zmq_strerror(e));
    return rec_errorf(REC_EIO, "cannot listen on %s: %s", ep, zmq_strerror(e));
}

rec_status rec__zmsg_aligned(zmq_msg_t *dst, zmq_msg_t *src, const uint8_t **frame, size_t *len) {
    const uint8_t *f = zmq_msg_data(src);
    if (len) *len = zmq_msg_size(src);
    if ((uintptr_t)f % 8 == 0) {
        zmq_msg_move(dst, src);
        *frame = zmq_msg_data(dst);
        return REC_OK;
    }
    zmq_msg_close(dst);
    if (zmq_msg_init_size(dst, zmq_msg_size(src) + 8) != 0) {
        zmq_msg_init(dst);
        return rec_errorf(REC_ENOMEM, "out of memory for a message of %zu bytes", zmq_msg_size(src));
    }
    uint8_t *d = zmq_msg_data(dst);
    d += (8 - (uintptr_t)d % 8) % 8;
    memcpy(d, f, zmq_msg_size(src));
    *frame = d;
    return REC_OK;
}

int rec__zreq_recv(void *sock, rec_zreq *r, rec_wbuf *w, const char **why) {
    *why = NULL;
    zmq_msg_init(&r->id);
    zmq_msg_init(&r->m);
    r->body = NULL;
    if (zmq_msg_recv(&r->id, sock, ZMQ_DONTWAIT) < 0) return 0;
    if (!zmq_msg_more(&r->id)) return 0;
    zmq_msg_t raw;
    zmq_msg_init(&raw);
    if (zmq_msg_recv(&raw, sock, 0) < 0) {
        zmq_msg_close(&raw);
        return 0;
    }
    if (zmq_msg_more(&raw)) { /* more parts than a request has: drain them, refuse */
        zmq_msg_t x;
        zmq_msg_init(&x);
        while (zmq_msg_more(&raw) && zmq_msg_recv(&x, sock, 0) >= 0) zmq_msg_move(&raw, &x);
        zmq_msg_close(&x);
        zmq_msg_close(&raw);
        *why = "refused a message of more than one frame";
        return 0;
    }
    const uint8_t *frame;
    size_t len;
    rec_status s = rec__zmsg_aligned(&r->m, &raw, &frame, &len);
    zmq_msg_close(&raw);
    if (!s) s = rec_frame_head_decode(frame, len, "request", &r->h);
    if (s) {
        *why = rec_errmsg();
        rec_frame_begin(w, REC_MSG_ERROR, 0, 0);
        rec_net_error_encode(w, s, rec_errmsg());
        if (!rec_frame_end(w)) rec__zsend(sock, &r->id, w, ZMQ_DONTWAIT);
        return 0;
    }
    r->body = frame + REC_NET_HEAD;
    return 1;
}

void rec__zreq_close(rec_zreq *r) {
    zmq_msg_close(&r->m);
    zmq_msg_close(&r->id);
}

rec_status rec__zreq_error(void *sock, rec_zreq *r, rec_wbuf *w, rec_status s) {
    rec_frame_begin(w, REC_MSG_ERROR, r->h.job, r->h.seq);
    rec_net_error_encode(w, s, rec_errmsg());
    REC_TRY(rec_frame_end(w));
    return rec__zsend(sock, &r->id, w, ZMQ_DONTWAIT);
}

/* The first 16 bytes of a routing identity in hex. */
static void peer_name(const zmq_msg_t *id, char *buf, size_t cap) {
    const uint8_t *p = zmq_msg_data((zmq_msg_t *)id);
    const size_t n = zmq_msg_size((zmq_msg_t *)id) < 16 ? zmq_msg_size((zmq_msg_t *)id) : 16;
    size_t at = 0;
    if (cap) buf[0] = 0;
    for (size_t i = 0; i < n && at + 3 <= cap; i++, at += 2) snprintf(buf + at, 3, "%02x", p[i]);
}

void rec__zservice_log(const rec_zservice *v, const zmq_msg_t *id, const char *what) {
    if (!v->log) return;
    char hex[33];
    peer_name(id, hex, sizeof hex);
    fprintf(v->log, "%s: peer %s: %s\n", v->name, hex, what);
    fflush(v->log);
}

rec_status rec_endpoint_check(const char *ep) {
    if (!strncmp(ep, "ipc://", 6)) {
        if (!ep[6]) return rec_errorf(REC_EINVAL, "'%s': give the socket's path after ipc://", ep);
        return REC_OK;
    }
    if (strncmp(ep, "tcp://", 6))
        return rec_errorf(REC_EINVAL, "'%s' is not an endpoint: give tcp://HOST:PORT (or ipc://PATH)", ep);
    const char *colon = strrchr(ep + 6, ':');
    if (!colon || colon == ep + 6)
        return rec_errorf(REC_EINVAL, "'%s': give tcp://HOST:PORT, with a host and a port", ep);
    const char *p = colon + 1;
    long port = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 9; p++, digits++) port = port * 10 + (*p - '0');
    if (!digits || *p || port < 1 || port > 65535)
        return rec_errorf(REC_EINVAL, "'%s': the port must be a number in 1..65535, got '%s'", ep, colon + 1);
    return REC_OK;
}

rec_status rec__zservice_open(rec_zservice *v, const char *name, const char *listen, const rec_net_secure *sec, FILE *log) {
    *v = (rec_zservice){.name = name, .log = log, .ctx = zmq_ctx_new(), .listen = listen, .rlog = {.f = log}};
    v->sock = v->ctx ? rec__zsocket(v->ctx, ZMQ_ROUTER) : NULL;
    /* The messages leave out `name`: the command that reports them says it ("rectrain embserver: ...") */
    if (!v->sock) return rec_errorf(REC_EIO, "cannot create a ZeroMQ socket: %s", zmq_strerror(zmq_errno()));
    if (rec_endpoint_check(listen)) return rec_error_wrap(REC_EINVAL, "cannot listen");
    REC_TRY(rec__zkeys_load(&v->keys, sec, REC__ZSERVICE));
    REC_TRY(rec__zplain_check(&v->keys, sec, listen, REC__ZSERVICE, "--listen"));
    if (v->keys.on) REC_TRY(rec__zap_open(v->ctx, &v->zap)); /* before the first connection asks it */
    REC_TRY(rec__zcurve_server(v->sock, &v->keys));
    REC_TRY(rec__zmon_open(v->ctx, v->sock, 1, &v->mon));
    const rec_net_launch *l = sec ? sec->launch : NULL;
    if (l && l->listen_fd >= 0 && !strcmp(l->listen, listen)) /* bound before the endpoints were exchanged */
        zmq_setsockopt(v->sock, ZMQ_USE_FD, &l->listen_fd, sizeof l->listen_fd);
    REC_TRY(rec__zbind(v->sock, listen));
    if (v->log && v->keys.launch)
        fprintf(v->log, "%s: CURVE on %s: lets in the %d processes of the job\n", name, listen, v->keys.n_allow);
    else if (v->log && v->keys.on)
        fprintf(v->log, "%s: CURVE on %s: lets in the %d key%s of %s/allow\n", name, listen, v->keys.n_allow,
                v->keys.n_allow == 1 ? "" : "s", v->keys.dir);
    else if (v->log && !rec_endpoint_is_local(listen))
        fprintf(v->log, "%s: warning: plain text on %s (--insecure): anyone who reaches it can read and change the job's "
                "data\n", name, listen);
    return REC_OK;
}

/* Logs the handshakes the monitor saw fail (a peer without keys, or with another service key). */
static void log_failed_handshakes(rec_zservice *v) {
    char why[300];
    while (rec__zmon_failed(v->mon, 1, v->keys.on, why, sizeof why)) {
        v->refused_peers++;
        char line[700];
        snprintf(line, sizeof line, "%s: refused a connection on %s: %s", v->name, v->listen, why);
        rec__zlog_line(&v->rlog, line);
    }
}

rec_status rec__zservice_run(rec_zservice *v, const volatile sig_atomic_t *stop, void (*serve)(void *), void *arg) {
    while (!(stop && *stop)) {
        zmq_pollitem_t it[3] = {{v->sock, 0, ZMQ_POLLIN, 0}, {v->mon, 0, ZMQ_POLLIN, 0}, {v->zap, 0, ZMQ_POLLIN, 0}};
        const int n = zmq_poll(it, v->zap ? 3 : 2, 200);
        if (n < 0 && zmq_errno() != EINTR) return rec_errorf(REC_EIO, "%s: poll failed: %s", v->name, zmq_strerror(zmq_errno()));
        if (n <= 0) continue;
        if (it[2].revents & ZMQ_POLLIN) rec__zap_serve(v->zap, &v->keys, v->name, &v->rlog, &v->refused_peers);
        if (it[1].revents & ZMQ_POLLIN) log_failed_handshakes(v);
        if (it[0].revents & ZMQ_POLLIN) serve(arg);
    }
    return REC_OK;
}

void rec__zservice_close(rec_zservice *v) {
    rec__zlog_flush(&v->rlog);
    rec__zclose(&v->zap, &v->mon);
    if (v->sock) zmq_close(v->sock);
    if (v->ctx) zmq_ctx_term(v->ctx);
    v->sock = v->ctx = NULL;
    rec__zkeys_free(&v->keys);
}

int rec__zservice_take(rec_zservice *v, rec_zreq *r, rec_wbuf *w) {
    const char *why;
    if (rec__zreq_recv(v->sock, r, w, &why)) return 1;
    if (why) v->refused++, rec__zservice_log(v, &r->id, why);
    rec__zreq_close(r);
    return 0;
}

void rec__zservice_answer(rec_zservice *v, rec_zreq *r, rec_wbuf *w, rec_status s) {
    if (s) {
        char line[1200];
        snprintf(line, sizeof line, "%s %llu: %s", rec_msg_name(r->h.type), (unsigned long long)r->h.seq, rec_errmsg());
        rec__zservice_log(v, &r->id, line);
        rec__zreq_error(v->sock, r, w, s);
    } else {
        rec__zsend(v->sock, &r->id, w, ZMQ_DONTWAIT);
    }
    rec__zreq_close(r);
}

/* ---- the endpoints of a job launched across hosts (net.h) ---- */

/* Parses "A.B.C.D/N" into a network address and mask (host order). */
static int parse_cidr(const char *net, uint32_t *addr, uint32_t *mask) {
    char a[64];
    const char *slash = strchr(net, '/');
    char *end;
    const long bits = slash ? strtol(slash + 1, &end, 10) : 32;
    if (slash && (end == slash + 1 || *end || bits < 0 || bits > 32)) return 0;
    snprintf(a, sizeof a, "%.*s", slash ? (int)(slash - net) : (int)strlen(net), net);
    struct in_addr in;
    if (inet_pton(AF_INET, a, &in) != 1) return 0;
    *mask = bits ? 0xffffffffu << (32 - bits) : 0;
    *addr = ntohl(in.s_addr) & *mask;
    return 1;
}

rec_status rec_net_host_address(const char *network, char addr[64]) {
    uint32_t want = 0, mask = 0;
    const int any = !network || !network[0];
    if (!any && !parse_cidr(network, &want, &mask))
        return rec_errorf(REC_EINVAL, "network '%s' is not an IPv4 network (A.B.C.D/N, e.g. 10.1.0.0/16)", network);
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0) return rec_errorf(REC_EIO, "cannot list this host's addresses: %s", strerror(errno));
    char seen[512] = "";
    addr[0] = 0;
    for (const struct ifaddrs *i = ifs; i && !addr[0]; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
        const struct in_addr in = ((const struct sockaddr_in *)i->ifa_addr)->sin_addr;
        char text[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &in, text, sizeof text);
        const size_t n = strlen(seen);
        snprintf(seen + n, sizeof seen - n, "%s%s (%s)", n ? ", " : "", text, i->ifa_name);
        const int loop = (i->ifa_flags & IFF_LOOPBACK) != 0;
        if (any ? !loop : (ntohl(in.s_addr) & mask) == want) snprintf(addr, 64, "%s", text);
    }
    freeifaddrs(ifs);
    if (!addr[0] && any) snprintf(addr, 64, "127.0.0.1"); /* one machine without a network */
    if (!addr[0])
        return rec_errorf(REC_EINVAL, "this host has no address in network %s (it has %s): give the network its "
                          "processes reach each other on", network, seen[0] ? seen : "none");
    return REC_OK;
}

rec_status rec_net_listen_any(const char *addr, int *fd, char ep[256]) {
    struct sockaddr_in sa = {.sin_family = AF_INET};
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) return rec_errorf(REC_EINVAL, "'%s' is not an IPv4 address", addr);
    socklen_t len = sizeof sa;
    *fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (*fd < 0 || bind(*fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(*fd, 128) != 0 ||
        getsockname(*fd, (struct sockaddr *)&sa, &len) != 0) {
        rec_status s = rec_errorf(REC_EIO, "cannot listen on %s: %s", addr, strerror(errno));
        if (*fd >= 0) close(*fd);
        *fd = -1;
        return s;
    }
    snprintf(ep, 256, "tcp://%s:%d", addr, ntohs(sa.sin_port));
    return REC_OK;
}

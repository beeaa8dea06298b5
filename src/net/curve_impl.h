/* Internal to rectrain's services and clients: CurveZMQ keys, the CURVE options of their
 * sockets, the ZAP handler of a service's allow-list and the monitors that say why a
 * handshake failed (src/net/curve.c: the one place where keys are read and sockets secured). */
#ifndef REC_NET_CURVE_IMPL_H
#define REC_NET_CURVE_IMPL_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "rectrain/net.h"

/* One key of a service's allow-list: allow/NAME.pub. */
typedef struct rec__zallow {
    uint8_t key[32];
    time_t expires;          /* 0: never */
    char name[64];           /* its file name without .pub */
} rec__zallow;

/* What a process loaded from its key directory. */
typedef struct rec__zkeys {
    int on;                  /* CURVE: a key directory was given */
    char dir[512];
    char pub[41], sec[41];   /* this process's pair, Z85 */
    char server[41];         /* a client's: the services' public key, Z85 */
    rec__zallow *allow;      /* a service's allow-list (n_allow) */
    int n_allow;
    const rec_net_launch *launch; /* keys of a launched job: a service's key found by endpoint */
} rec__zkeys;

enum { REC__ZSERVICE = 1, REC__ZCLIENT = 2 };

/* Loads what `roles` need from sec->keys: self.key always, allow/ for a service, server.pub
 * for a client (k->on = 0 and nothing read when sec has no keys); or from sec->launch: its
 * pair, and every process of the job on the allow-list. Every error names the file
 * and says how to make or fix it. Free with rec__zkeys_free, also after a failure. */
rec_status rec__zkeys_load(rec__zkeys *k, const rec_net_secure *sec, int roles);
void rec__zkeys_free(rec__zkeys *k);
/* Secure by default: REC_EINVAL when k is off (plain text), ep is not local and sec does not
 * say insecure. `what` names the endpoint's role in the message ("--listen"). */
rec_status rec__zplain_check(const rec__zkeys *k, const rec_net_secure *sec, const char *ep, int role, const char *what);

/* The CURVE options of a service's socket (before its bind) or a client's (before its
 * connect); nothing when k is off. REC_EIO with ZeroMQ's reason. */
rec_status rec__zcurve_server(void *sock, const rec__zkeys *k);
rec_status rec__zcurve_client(void *sock, const rec__zkeys *k, const char *ep);

/* A service's log of refused peers. A peer that is refused retries every 100 ms or so
 * (ZeroMQ reconnects): a line equal to one of the last REC__ZLOG_KEEP written, within 10 s of
 * it, is counted rather than written; the count is written with the line when its slot is
 * taken by another line (or at rec__zlog_flush). */
enum { REC__ZLOG_KEEP = 4 };
typedef struct rec__zlog {
    FILE *f;                 /* NULL: quiet */
    struct {
        char line[512];
        double at;           /* when it was written */
        int64_t repeats;     /* times it came again since */
    } kept[REC__ZLOG_KEEP];
} rec__zlog;
void rec__zlog_line(rec__zlog *l, const char *line);
void rec__zlog_flush(rec__zlog *l);

/* A service's ZAP handler: a REP socket on inproc://zeromq.zap.01 of ctx, which the service
 * polls with its own socket. rec__zap_serve answers every waiting request: CURVE clients whose
 * key is on the allow-list and unexpired get in (200), every other is refused (400), logged
 * as "NAME: refused ADDRESS (key Z85): why" and counted in *refused. */
rec_status rec__zap_open(void *ctx, void **zap);
void rec__zap_serve(void *zap, const rec__zkeys *k, const char *name, rec__zlog *log, int64_t *refused);

/* A monitor of sock's handshakes: a PAIR socket connected to ZeroMQ's monitor of sock. A
 * service's watches protocol failures only (its ZAP handler logs the keys it refuses). */
rec_status rec__zmon_open(void *ctx, void *sock, int service, void **mon);
/* Drains mon's events without waiting. 1 when a handshake failed: *why says why, for a side
 * that is a `service` or not, speaking CURVE (`curve`) or not; 0 when none failed. */
int rec__zmon_failed(void *mon, int service, int curve, char *why, size_t cap);

/* A client's socket of `type` to ep: CURVE with k, and a monitor (*mon; may be NULL where
 * none is wanted). REC_EINVAL naming ep when ZeroMQ refuses it. */
rec_status rec__zconnect(void *ctx, int type, const char *ep, const rec__zkeys *k, void **sock, void **mon);
/* Closes a socket and its monitor (either may be NULL); both set to NULL. */
void rec__zclose(void **sock, void **mon);

#endif

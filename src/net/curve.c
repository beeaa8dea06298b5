/* CurveZMQ for rectrain's services and clients (net.h; curve_impl.h; docs/security.md).
 *
 * Keys live in files of ZeroMQ's certificate form (the ZPL text CZMQ's zcert writes): a
 * `curve` section with `public-key = "Z85"` and, in a secret certificate, `secret-key`; a
 * `metadata` section may hold `expires`. A service sets ZMQ_CURVE_SERVER with its secret key
 * and answers ZeroMQ's authentication requests (ZAP, RFC 27) itself, from its own poll loop:
 * a client gets in only with a key on the allow-list. A refused peer never reaches the
 * service's socket, so it is answered nothing and changes nothing. Monitors of the sockets
 * turn failed handshakes into messages: the service logs them, a client names the endpoint
 * and the cause in its error. */
#define _GNU_SOURCE /* timegm */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rectrain/core.h"
#include "zmq_impl.h"

#define KEYGEN_HINT "make keys with `rectrain keygen --out DIR` (docs/security.md)"

/* ---- certificates -------------------------------------------------------------------------- */

typedef struct cert {
    char pub[41], sec[41];
    time_t expires;          /* 0: never */
} cert;

/* "2027-01-31T12:00:00Z" */
static void iso_time(time_t t, char *buf, size_t cap) {
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* 1 when z is a 40-character Z85 key (into bin when not NULL). */
static int z85_key(const char *z, uint8_t *bin) {
    uint8_t tmp[32];
    return strlen(z) == 40 && zmq_z85_decode(bin ? bin : tmp, z) != NULL;
}

/* Reads certificate `path`: its public key, with `secret` its secret key too (which must be
 * the public key's, and the file unreadable by group and others, as ssh wants of its keys),
 * and its expiry. An expired certificate is refused. Every error names path and the fix. */
static rec_status cert_read(const char *path, int secret, cert *c) {
    memset(c, 0, sizeof *c);
    struct stat st;
    if (stat(path, &st) != 0)
        return rec_errorf(REC_EIO, "%s: %s (%s)", path, strerror(errno), secret ? KEYGEN_HINT : "copy the peer's self.pub there");
    if (secret && (st.st_mode & 077))
        return rec_errorf(REC_EINVAL, "%s can be read by other users (mode %04o): a secret key must be yours alone; chmod 600 %s",
                          path, (unsigned)(st.st_mode & 07777), path);
    char *text = NULL;
    size_t len = 0;
    REC_TRY(rec_read_file(path, "key file", 1 << 16, &text, &len));
    rec_status s = REC_OK;
    char expires[64] = "";
    int lineno = 0;
    if (strlen(text) != len) s = rec_errorf(REC_EFORMAT, "%s is not a text file, so no ZeroMQ certificate (%s)", path, KEYGEN_HINT);
    for (char *line = text, *next; !s && line; line = next) {
        if ((next = strchr(line, '\n'))) *next++ = 0;
        lineno++;
        while (*line == ' ' || *line == '\t') line++;
        char *eq = strchr(line, '=');
        if (!*line || *line == '#' || !eq) continue; /* comments, blank lines, section names */
        char *name_end = eq;
        while (name_end > line && (name_end[-1] == ' ' || name_end[-1] == '\t')) name_end--;
        *name_end = 0;
        char *v = eq + 1;
        while (*v == ' ' || *v == '\t') v++;
        char *q = *v == '"' ? strchr(v + 1, '"') : NULL;
        if (!q) {
            s = rec_errorf(REC_EFORMAT, "%s:%d: %s takes a quoted value (name = \"value\")", path, lineno, line);
            break;
        }
        *q = 0;
        v++;
        char *dst = !strcmp(line, "public-key") ? c->pub : !strcmp(line, "secret-key") ? c->sec
                  : !strcmp(line, "expires")    ? expires : NULL;
        if (!dst) continue; /* other metadata */
        if (strlen(v) > 40 || (dst != expires && !z85_key(v, NULL))) {
            s = rec_errorf(REC_EFORMAT, "%s:%d: %s is not a 40-character Z85 key (%s)", path, lineno, line, KEYGEN_HINT);
            break;
        }
        snprintf(dst, 41, "%s", v);
    }
    free(text);
    REC_TRY(s);
    if (!c->pub[0])
        return rec_errorf(REC_EFORMAT, "%s is not a ZeroMQ CURVE certificate: it has no public-key = \"...\" line (%s)", path,
                          KEYGEN_HINT);
    if (secret) {
        char derived[41];
        if (!c->sec[0])
            return rec_errorf(REC_EFORMAT, "%s holds no secret-key: a public certificate where this process's pair should "
                              "be (%s)", path, KEYGEN_HINT);
        if (zmq_curve_public(derived, c->sec) != 0 || strcmp(derived, c->pub))
            return rec_errorf(REC_EFORMAT, "%s: its secret-key is not the secret half of its public-key (an edited or "
                              "mixed-up file; %s)", path, KEYGEN_HINT);
    }
    if (expires[0]) {
        struct tm tm = {0};
        int used = 0;
        if (sscanf(expires, "%4d-%2d-%2dT%2d:%2d:%2dZ%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
                   &tm.tm_sec, &used) != 6 || expires[used])
            return rec_errorf(REC_EFORMAT, "%s: expires = \"%s\" is not a time YYYY-MM-DDTHH:MM:SSZ", path, expires);
        tm.tm_year -= 1900, tm.tm_mon -= 1;
        c->expires = timegm(&tm);
        if (c->expires <= time(NULL))
            return rec_errorf(REC_EINVAL, "%s expired on %s: %s and hand its self.pub to the peers again", path, expires,
                              KEYGEN_HINT);
    }
    return REC_OK;
}

/* Writes certificate c to path (its secret key too when `secret`), mode 0600 or 0644.
 * `excl`: fails when path exists; else replaces it whole (a temporary file renamed). */
static rec_status cert_write(const char *path, const cert *c, int secret, int excl) {
    char tmp[1100], exp[64] = "";
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    if (c->expires) iso_time(c->expires, exp, sizeof exp);
    const char *target = excl ? path : tmp;
    const int fd = open(target, O_WRONLY | O_CREAT | (excl ? O_EXCL : O_TRUNC), secret ? 0600 : 0644);
    if (fd < 0) {
        if (excl && errno == EEXIST)
            return rec_errorf(REC_EINVAL, "%s exists: keygen never replaces a key (peers trust its public half); remove it "
                              "first, or give another --out", path);
        return rec_errorf(REC_EIO, "cannot write %s: %s", path, strerror(errno));
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        return rec_errorf(REC_EIO, "cannot write %s: %s", path, strerror(errno));
    }
    fprintf(f, "#   ZeroMQ CURVE %s Certificate (rectrain keygen)\n", secret ? "**Secret**" : "Public");
    if (secret) fprintf(f, "#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions: give peers self.pub.\n");
    else fprintf(f, "#   Give it to the peers that must trust this key (a service's allow/, a client's server.pub).\n");
    fprintf(f, "\nmetadata\n");
    if (exp[0]) fprintf(f, "    expires = \"%s\"\n", exp);
    fprintf(f, "curve\n    public-key = \"%s\"\n", c->pub);
    if (secret) fprintf(f, "    secret-key = \"%s\"\n", c->sec);
    const int bad = ferror(f) | (fflush(f) != 0) | (fsync(fileno(f)) != 0);
    if ((fclose(f) != 0) | bad) {
        unlink(target);
        return rec_errorf(REC_EIO, "cannot write %s: %s", path, strerror(errno));
    }
    if (!excl && rename(tmp, path) != 0) {
        unlink(tmp);
        return rec_errorf(REC_EIO, "cannot write %s: %s", path, strerror(errno));
    }
    return REC_OK;
}

rec_status rec_keygen(const char *dir, int days) {
    if (!zmq_has("curve"))
        return rec_errorf(REC_EUNSUPPORTED, "this libzmq was built without CURVE (zmq_has(\"curve\") is 0): install Debian's "
                          "libzmq5");
    char path[1100];
    snprintf(path, sizeof path, "%s/allow", dir);
    REC_TRY(rec_mkdir_p(path, "key directory"));
    cert c = {0};
    if (zmq_curve_keypair(c.pub, c.sec) != 0)
        return rec_errorf(REC_EIO, "cannot make a key pair: %s", zmq_strerror(zmq_errno()));
    if (days > 0) c.expires = time(NULL) + (time_t)days * 86400;
    snprintf(path, sizeof path, "%s/self.key", dir);
    REC_TRY(cert_write(path, &c, 1, 1));
    snprintf(path, sizeof path, "%s/self.pub", dir);
    rec_status s = cert_write(path, &c, 0, 0);
    memset(c.sec, 0, sizeof c.sec);
    return s;
}

rec_status rec_keys_trust(const char *dir, const char *cert_path, const char *name) {
    const size_t n = strlen(cert_path);
    cert c;
    REC_TRY(cert_read(cert_path, n > 4 && !strcmp(cert_path + n - 4, ".key"), &c));
    memset(c.sec, 0, sizeof c.sec);
    char path[1100];
    if (name && (!name[0] || strchr(name, '/') || name[0] == '.'))
        return rec_errorf(REC_EINVAL, "'%s' cannot name a key of allow/: give a plain file name", name);
    if (name) {
        snprintf(path, sizeof path, "%s/allow", dir);
        REC_TRY(rec_mkdir_p(path, "key directory"));
        snprintf(path, sizeof path, "%s/allow/%s.pub", dir, name);
    } else {
        REC_TRY(rec_mkdir_p(dir, "key directory"));
        snprintf(path, sizeof path, "%s/server.pub", dir);
    }
    return cert_write(path, &c, 0, 0);
}

/* ---- a process's keys -------------------------------------------------------------------------- */

/* REC_OK when no other user can write `path` (stat st). Whoever can write the key directory
 * can swap its keys (server.pub, allow/ itself), and whoever can write allow/ or a key in it
 * can let a client in, so these are refused as a readable secret key is, naming the risk and
 * the chmod that mends them. */
static rec_status owner_writes_only(const char *path, const struct stat *st, const char *risk) {
    if (!(st->st_mode & 022)) return REC_OK;
    return rec_errorf(REC_EINVAL, "%s can be written by other users (mode %04o): whoever can write it can %s; chmod go-w %s",
                      path, (unsigned)(st->st_mode & 07777), risk, path);
}

/* The allow-list: every DIR/allow/ *.pub, sorted by name so that logs and errors are stable. */
static rec_status load_allow(rec__zkeys *k) {
    char path[1100];
    snprintf(path, sizeof path, "%s/allow", k->dir);
    struct stat st;
    if (stat(path, &st) == 0) REC_TRY(owner_writes_only(path, &st, "let a client in"));
    struct dirent **ents = NULL;
    const int n = scandir(path, &ents, NULL, alphasort);
    if (n < 0)
        return rec_errorf(REC_EIO, "%s: %s: a service lets in the clients whose self.pub is copied there (%s)", path,
                          strerror(errno), KEYGEN_HINT);
    rec_status s = REC_OK;
    if (!(k->allow = calloc((size_t)n + 1, sizeof *k->allow))) s = rec_errorf(REC_ENOMEM, "out of memory for %s", path);
    for (int i = 0; i < n; i++) {
        const char *e = ents[i]->d_name;
        const size_t len = strlen(e);
        if (!s && e[0] != '.' && len > 4 && !strcmp(e + len - 4, ".pub")) {
            char file[1400];
            snprintf(file, sizeof file, "%s/%s", path, e);
            cert c;
            s = stat(file, &st) == 0 ? owner_writes_only(file, &st, "let a client in") : REC_OK;
            if (!s) s = cert_read(file, 0, &c);
            if (!s) {
                rec__zallow *a = &k->allow[k->n_allow++];
                z85_key(c.pub, a->key);
                a->expires = c.expires;
                snprintf(a->name, sizeof a->name, "%.*s", (int)(len - 4), e);
            }
        }
        free(ents[i]);
    }
    free(ents);
    if (!s && !k->n_allow)
        s = rec_errorf(REC_EINVAL, "%s holds no .pub file, so this service would let no client in: copy each client's "
                       "self.pub there (as allow/NAME.pub)", path);
    return s;
}

/* A launched job's keys (net.h rec_net_launch): the pair made in memory, and every process of
 * the job let in. */
static rec_status load_launch(rec__zkeys *k, const rec_net_launch *l) {
    snprintf(k->dir, sizeof k->dir, "the job's launch");
    memcpy(k->pub, l->pub, 41), memcpy(k->sec, l->sec, 41);
    if (!(k->allow = calloc((size_t)l->n_peers + 1, sizeof *k->allow)))
        return rec_errorf(REC_ENOMEM, "out of memory for the job's keys");
    for (int i = 0; i < l->n_peers; i++) {
        rec__zallow *a = &k->allow[k->n_allow];
        if (!z85_key(l->peers[i].pub, a->key))
            return rec_errorf(REC_EINVAL, "the launch gave %s a malformed public key", l->peers[i].what);
        snprintf(a->name, sizeof a->name, "%s", l->peers[i].what);
        k->n_allow++;
    }
    k->launch = l;
    k->on = 1;
    return REC_OK;
}

rec_status rec__zkeys_load(rec__zkeys *k, const rec_net_secure *sec, int roles) {
    memset(k, 0, sizeof *k);
    if (!sec || (!sec->keys && !sec->launch)) return REC_OK;
    if (!zmq_has("curve"))
        return rec_errorf(REC_EUNSUPPORTED, "--keys: this libzmq was built without CURVE (zmq_has(\"curve\") is 0)");
    if (!sec->keys) return load_launch(k, sec->launch);
    struct stat st;
    if (stat(sec->keys, &st) != 0 || !S_ISDIR(st.st_mode))
        return rec_errorf(REC_EIO, "--keys %s: %s (%s)", sec->keys, stat(sec->keys, &st) ? strerror(errno) : "not a directory",
                          KEYGEN_HINT);
    if (strlen(sec->keys) >= sizeof k->dir) return rec_errorf(REC_EINVAL, "--keys %.60s...: the path is too long", sec->keys);
    REC_TRY(owner_writes_only(sec->keys, &st, "swap the keys in it"));
    snprintf(k->dir, sizeof k->dir, "%s", sec->keys);
    char path[1100];
    cert c;
    snprintf(path, sizeof path, "%s/self.key", k->dir);
    REC_TRY(cert_read(path, 1, &c));
    memcpy(k->pub, c.pub, 41), memcpy(k->sec, c.sec, 41);
    memset(c.sec, 0, sizeof c.sec);
    if (roles & REC__ZCLIENT) {
        snprintf(path, sizeof path, "%s/server.pub", k->dir);
        REC_TRY(cert_read(path, 0, &c));
        memcpy(k->server, c.pub, 41);
    }
    if (roles & REC__ZSERVICE) REC_TRY(load_allow(k));
    k->on = 1;
    return REC_OK;
}

void rec__zkeys_free(rec__zkeys *k) {
    free(k->allow);
    memset(k, 0, sizeof *k);
}

int rec_endpoint_is_local(const char *ep) {
    if (!strncmp(ep, "ipc://", 6) || !strncmp(ep, "inproc://", 9)) return 1;
    if (strncmp(ep, "tcp://", 6)) return 0;
    const char *h = ep + 6, *colon = strrchr(h, ':');
    if (!colon) return 0;
    const size_t n = (size_t)(colon - h);
    if ((n == 9 && !strncmp(h, "localhost", 9)) || (n == 5 && !strncmp(h, "[::1]", 5))) return 1;
    if (n < 9 || strncmp(h, "127.", 4)) return 0;
    for (size_t i = 4; i < n; i++) /* 127.a.b.c: digits and dots only (not 127.0.0.1.evil.com) */
        if (!(h[i] == '.' || (h[i] >= '0' && h[i] <= '9'))) return 0;
    return 1;
}

rec_status rec__zplain_check(const rec__zkeys *k, const rec_net_secure *sec, const char *ep, int role, const char *what) {
    if (k->on || (sec && sec->insecure) || rec_endpoint_is_local(ep)) return REC_OK;
    if (role == REC__ZSERVICE)
        return rec_errorf(REC_EINVAL, "%s %s is not a loopback address and no --keys were given: every host that reaches it "
                          "could read and change the job's data. %s and give --keys DIR, or add --insecure to serve plain "
                          "text on a network you trust", what, ep, "Make keys with `rectrain keygen --out DIR` (docs/security.md)");
    return rec_errorf(REC_EINVAL, "%s %s is not a loopback address and no --keys were given: the job's data would cross the "
                      "network in plain text to a service no key vouches for. %s and give --keys DIR, or add --insecure",
                      what, ep, "Make keys with `rectrain keygen --out DIR` (docs/security.md)");
}

/* ---- sockets ----------------------------------------------------------------------------------- */

static rec_status setopt(void *sock, int opt, const void *v, size_t n, const char *name) {
    if (zmq_setsockopt(sock, opt, v, n) != 0)
        return rec_errorf(REC_EIO, "cannot set %s on a ZeroMQ socket: %s", name, zmq_strerror(zmq_errno()));
    return REC_OK;
}

rec_status rec__zcurve_server(void *sock, const rec__zkeys *k) {
    if (!k->on) return REC_OK;
    const int one = 1;
    REC_TRY(setopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one, "ZMQ_CURVE_SERVER"));
    REC_TRY(setopt(sock, ZMQ_CURVE_SECRETKEY, k->sec, 40, "ZMQ_CURVE_SECRETKEY"));
    /* a domain makes libzmq ask the ZAP handler about every connection */
    return setopt(sock, ZMQ_ZAP_DOMAIN, "rectrain", 8, "ZMQ_ZAP_DOMAIN");
}

rec_status rec__zcurve_client(void *sock, const rec__zkeys *k, const char *ep) {
    if (!k->on) return REC_OK;
    const char *server = k->server;
    if (k->launch) { /* each service of a launched job has its own key */
        server = NULL;
        for (int i = 0; i < k->launch->n_peers && !server; i++)
            if (!strcmp(k->launch->peers[i].ep, ep)) server = k->launch->peers[i].pub;
        if (!server) return rec_errorf(REC_EINVAL, "%s is not a service of this job: the launch gave no key for it", ep);
    }
    REC_TRY(setopt(sock, ZMQ_CURVE_SERVERKEY, server, 40, "ZMQ_CURVE_SERVERKEY"));
    REC_TRY(setopt(sock, ZMQ_CURVE_PUBLICKEY, k->pub, 40, "ZMQ_CURVE_PUBLICKEY"));
    return setopt(sock, ZMQ_CURVE_SECRETKEY, k->sec, 40, "ZMQ_CURVE_SECRETKEY");
}

rec_status rec__zconnect(void *ctx, int type, const char *ep, const rec__zkeys *k, void **sock, void **mon) {
    *sock = rec__zsocket(ctx, type);
    if (mon) *mon = NULL;
    if (!*sock) return rec_errorf(REC_EIO, "cannot create a ZeroMQ socket: %s", zmq_strerror(zmq_errno()));
    rec_status s = rec__zcurve_client(*sock, k, ep);
    if (!s && mon) s = rec__zmon_open(ctx, *sock, 0, mon);
    if (!s) rec__zipv6(*sock, ep);
    if (!s && zmq_connect(*sock, ep) != 0)
        s = rec_errorf(REC_EINVAL, "%s: %s (an endpoint is tcp://HOST:PORT)", ep, zmq_strerror(zmq_errno()));
    if (s) rec__zclose(sock, mon);
    return s;
}

void rec__zclose(void **sock, void **mon) {
    if (sock && *sock) zmq_close(*sock), *sock = NULL;
    if (mon && *mon) zmq_close(*mon), *mon = NULL;
}

/* ---- ZAP: a service's allow-list (RFC 27) ------------------------------------------------------ */

rec_status rec__zap_open(void *ctx, void **zap) {
    *zap = zmq_socket(ctx, ZMQ_REP);
    const int zero = 0;
    if (*zap) zmq_setsockopt(*zap, ZMQ_LINGER, &zero, sizeof zero);
    if (!*zap || zmq_bind(*zap, "inproc://zeromq.zap.01") != 0)
        return rec_errorf(REC_EIO, "cannot start the ZAP handler: %s", zmq_strerror(zmq_errno()));
    return REC_OK;
}

/* Sends the ZAP reply: version, request id, status code and text, user id, no metadata. */
static void zap_reply(void *zap, const zmq_msg_t *reqid, const char *code, const char *text, const char *user) {
    zmq_send(zap, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(zap, zmq_msg_data((zmq_msg_t *)reqid), zmq_msg_size((zmq_msg_t *)reqid), ZMQ_SNDMORE);
    zmq_send(zap, code, 3, ZMQ_SNDMORE);
    zmq_send(zap, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(zap, user, strlen(user), ZMQ_SNDMORE);
    zmq_send(zap, "", 0, 0);
}

/* A frame's text, NUL-terminated and cut to cap. */
static void frame_text(zmq_msg_t *m, char *buf, size_t cap) {
    const size_t n = zmq_msg_size(m) < cap - 1 ? zmq_msg_size(m) : cap - 1;
    memcpy(buf, zmq_msg_data(m), n);
    buf[n] = 0;
}

/* Writes slot k's count of repeats, if any, and empties the slot. */
static void zlog_retire(rec__zlog *l, int k) {
    if (l->f && l->kept[k].repeats)
        fprintf(l->f, "%s (%lld more times)\n", l->kept[k].line, (long long)l->kept[k].repeats), fflush(l->f);
    l->kept[k].line[0] = 0, l->kept[k].repeats = 0;
}

void rec__zlog_flush(rec__zlog *l) {
    for (int k = 0; k < REC__ZLOG_KEEP; k++) zlog_retire(l, k);
}

void rec__zlog_line(rec__zlog *l, const char *line) {
    const double now = rec_now();
    int oldest = 0;
    for (int k = 0; k < REC__ZLOG_KEEP; k++) {
        if (!strcmp(line, l->kept[k].line) && now - l->kept[k].at < 10) {
            l->kept[k].repeats++;
            return;
        }
        if (l->kept[k].at < l->kept[oldest].at) oldest = k;
    }
    zlog_retire(l, oldest);
    snprintf(l->kept[oldest].line, sizeof l->kept[oldest].line, "%s", line);
    l->kept[oldest].at = now;
    if (l->f) fprintf(l->f, "%s\n", line), fflush(l->f);
}

void rec__zap_serve(void *zap, const rec__zkeys *k, const char *name, rec__zlog *log, int64_t *refused) {
    for (;;) {
        /* version, request id, domain, address, routing id, mechanism, credentials... */
        zmq_msg_t f[8];
        int n = 0, more = 1;
        while (more) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, zap, n ? 0 : ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&m);
                break;
            }
            more = zmq_msg_more(&m);
            if (n < 8) f[n++] = m;
            else zmq_msg_close(&m);
        }
        if (!n) return;
        char version[8] = "", address[80] = "?", mech[16] = "", why[700] = "", key[41] = "";
        const char *user = "";
        if (n > 0) frame_text(&f[0], version, sizeof version);
        if (n > 3) frame_text(&f[3], address, sizeof address);
        if (n > 5) frame_text(&f[5], mech, sizeof mech);
        if (n < 6 || strcmp(version, "1.0")) {
            snprintf(why, sizeof why, "a malformed ZAP request");
        } else if (strcmp(mech, "CURVE")) {
            snprintf(why, sizeof why, "it speaks %s, not CURVE", mech);
        } else if (n < 7 || zmq_msg_size(&f[6]) != 32) {
            snprintf(why, sizeof why, "a CURVE request without a 32-byte key");
        } else {
            const uint8_t *pk = zmq_msg_data(&f[6]);
            zmq_z85_encode(key, pk, 32);
            const rec__zallow *a = NULL;
            for (int i = 0; i < k->n_allow && !a; i++)
                if (!memcmp(k->allow[i].key, pk, 32)) a = &k->allow[i];
            if (!a && k->launch) {
                snprintf(why, sizeof why, "its key is not one of this job's processes' (a process not of the job)");
            } else if (!a) {
                snprintf(why, sizeof why, "its key is not on the allow-list (%s/allow)", k->dir);
            } else if (a->expires && a->expires <= time(NULL)) {
                char t[32];
                iso_time(a->expires, t, sizeof t);
                snprintf(why, sizeof why, "its key %s/allow/%s.pub expired on %s", k->dir, a->name, t);
            } else {
                user = a->name;
            }
        }
        if (n > 1) zap_reply(zap, &f[1], why[0] ? "400" : "200", why[0] ? "refused" : "OK", user);
        if (why[0]) {
            if (refused) (*refused)++;
            char line[900];
            snprintf(line, sizeof line, "%s: refused %s%s%s%s: %s", name, address, key[0] ? " (key " : "", key,
                     key[0] ? ")" : "", why);
            rec__zlog_line(log, line);
        }
        for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
    }
}

rec_status rec_net_keypair(char pub[41], char sec[41]) {
    if (!zmq_has("curve")) return rec_errorf(REC_EUNSUPPORTED, "this libzmq was built without CURVE (zmq_has(\"curve\") is 0)");
    if (zmq_curve_keypair(pub, sec) != 0) return rec_errorf(REC_EIO, "cannot make a CurveZMQ key pair: %s", zmq_strerror(zmq_errno()));
    return REC_OK;
}

/* ---- monitors ---------------------------------------------------------------------------------- */

rec_status rec__zmon_open(void *ctx, void *sock, int service, void **mon) {
    static atomic_long seq;
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://rec-monitor-%ld-%ld", (long)getpid(), atomic_fetch_add(&seq, 1));
    const int events = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                       (service ? 0 : ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
    *mon = NULL;
    if (zmq_socket_monitor(sock, ep, events) != 0)
        return rec_errorf(REC_EIO, "cannot monitor a ZeroMQ socket: %s", zmq_strerror(zmq_errno()));
    *mon = zmq_socket(ctx, ZMQ_PAIR);
    const int zero = 0;
    if (*mon) zmq_setsockopt(*mon, ZMQ_LINGER, &zero, sizeof zero);
    if (!*mon || zmq_connect(*mon, ep) != 0) {
        if (*mon) zmq_close(*mon), *mon = NULL;
        return rec_errorf(REC_EIO, "cannot monitor a ZeroMQ socket: %s", zmq_strerror(zmq_errno()));
    }
    return REC_OK;
}

/* Why a handshake failed, as the side that saw `event` (value: ZeroMQ's) tells it. */
static void cause(int event, uint32_t value, int service, int curve, char *why, size_t cap) {
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
        snprintf(why, cap, "the service refused this client's key (ZAP status %u): it is not on the service's allow-list "
                 "(copy this client's self.pub into the service's allow/) or it expired", value);
    else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
        snprintf(why, cap, "%s", service ? (curve ? "the peer speaks plain text, not CURVE (a client without --keys)"
                                                  : "the peer speaks CURVE and this service runs without --keys")
                                         : (curve ? "the service speaks plain text, not CURVE (started without --keys)"
                                                  : "the service requires CURVE: give this client --keys DIR"));
    else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
        snprintf(why, cap, "%s", service ? "its CURVE hello does not decrypt: the client holds another service key (its "
                                           "server.pub is not this service's self.pub)"
                                         : "the CURVE handshake does not decrypt: a wrong key");
    else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
        snprintf(why, cap, "the ZeroMQ handshake failed (protocol error 0x%x)", value);
    else if (!service && curve)
        snprintf(why, cap, "the service closed the connection during the CURVE handshake: its key is not the one in this "
                 "client's server.pub, or it runs without --keys");
    else if (!service)
        snprintf(why, cap, "the service closed the connection during the handshake: it requires CURVE, give this client "
                 "--keys DIR");
    else if (curve) /* a peer that saw the mismatch first and left */
        snprintf(why, cap, "the peer left during the handshake (%s): a client without --keys, or of another protocol",
                 value ? strerror((int)value) : "connection closed");
    else
        snprintf(why, cap, "the peer left during the handshake (%s): a client with --keys, while this service runs "
                 "without", value ? strerror((int)value) : "connection closed");
}

int rec__zmon_failed(void *mon, int service, int curve, char *why, size_t cap) {
    int failed = 0, specific = 0; /* a protocol or ZAP failure says more than a closed connection */
    while (mon) {
        zmq_msg_t a, b;
        zmq_msg_init(&a);
        if (zmq_msg_recv(&a, mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&a);
            break;
        }
        zmq_msg_init(&b);
        if (zmq_msg_more(&a)) zmq_msg_recv(&b, mon, 0); /* the endpoint */
        if (zmq_msg_size(&a) >= 6) {
            const uint8_t *d = zmq_msg_data(&a);
            uint16_t ev;
            uint32_t value;
            memcpy(&ev, d, 2), memcpy(&value, d + 2, 4);
            const int spec = ev != ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
            if ((ev & (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                       ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)) && (spec || !specific)) {
                cause(ev, value, service, curve, why, cap);
                failed = 1, specific = spec;
            }
        }
        zmq_msg_close(&a), zmq_msg_close(&b);
    }
    return failed;
}

/* CurveZMQ on rectrain's services and clients (net.h; docs/security.md), every process started
 * here on loopback:
 *   - keygen and every refused key file (garbage, binary, bad Z85, a mixed-up pair, readable
 *     by others, expired, a bad expiry, an empty allow-list, no directory), each message;
 *   - secure by default: services and clients off loopback refuse plain text without
 *     --insecure, saying how to make keys;
 *   - refused peers (no key, a wrong service key, a key not on the allow-list) get nothing,
 *     change nothing (a refused PUT leaves the table bitwise unchanged), are logged by the
 *     service, which keeps serving its good client; a trainer's error names the endpoint and
 *     the cause, for those three and for CURVE against plain text;
 *   - a job trains the same bits with and without CURVE, with bad peers knocking on every
 *     service while it runs; offloading to a CURVE prep-worker trains as plain text does;
 *   - the wire: through a TCP proxy in this test, a row's values and id are in the bytes of
 *     a plain-text connection and nowhere in those of a CURVE one. */
#define _GNU_SOURCE /* memmem */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <zmq.h>

#include "clirun.h"
#include "rectrain/cache.h"
#include "rectrain/embed.h"
#include "rectrain/core.h"
#include "rectrain/net.h"

static int port;

#ifdef REC_SANITIZED
enum { ROWS = 3000, EPOCHS = 2 };
#else
enum { ROWS = 8000, EPOCHS = 6 };
#endif

/* ---- keys --------------------------------------------------------------------------------------- */

/* The Z85 public (or secret) key of certificate `file` of the scratch directory, into z. */
static void key_of(const char *file, const char *which, char *z) {
    z[0] = 0;
    read_out(file);
    char pat[32];
    snprintf(pat, sizeof pat, "%s = \"", which);
    const char *p = strstr(out, pat);
    if (p) snprintf(z, 41, "%.40s", p + strlen(pat));
}

static void write_text(const char *name, const char *text, int mode) {
    FILE *f = fopen(path(name), "w");
    if (f) fputs(text, f), fclose(f);
    chmod(path(name), (mode_t)mode);
}

/* Keys of this test: S the services' pair (allow: C), C a client trusted by S, X a stranger
 * with S's public key, W a client with C's pair but X's key as its service key. */
static void make_keys(void) {
    CHECK(run("keygen --out S") == 0 && strstr(out, "S/self.key") && strstr(out, "S/self.pub"), "%s", out);
    struct stat st;
    CHECK(stat(path("S/self.key"), &st) == 0 && (st.st_mode & 0777) == 0600, "self.key is mode 0600 (%o)",
          (unsigned)(st.st_mode & 0777));
    CHECK(stat(path("S/allow"), &st) == 0 && S_ISDIR(st.st_mode), "keygen makes allow/");
    CHECK(run("keygen --out S") == 1 && strstr(out, "S/self.key exists: keygen never replaces a key"), "%s", out);
    CHECK(run("keygen") == 2 && strstr(out, "--out DIR is required"), "%s", out);
    CHECK(run("keygen --out C --days 30") == 0 && run("keygen --out X") == 0 && run("keygen --out W") == 0, "%s", out);
    read_out("C/self.pub");
    CHECK(strstr(out, "expires = \"") != NULL, "--days writes the expiry: %s", out);
    CHECK(rec_keys_trust(path("S"), path("C/self.pub"), "trainer") == REC_OK, "%s", rec_errmsg());
    CHECK(rec_keys_trust(path("C"), path("S/self.pub"), NULL) == REC_OK, "%s", rec_errmsg());
    CHECK(rec_keys_trust(path("X"), path("S/self.pub"), NULL) == REC_OK, "%s", rec_errmsg());
    CHECK(rec_keys_trust(path("W"), path("X/self.pub"), NULL) == REC_OK, "%s", rec_errmsg());
    /* W holds C's pair: the client the service knows, with a wrong service key */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp -p %s %s", path("C/self.key"), path("W/self.key"));
    CHECK(system(cmd) == 0, "copying C's pair");
    CHECK(rec_keys_trust(path("W"), path("nothing.pub"), NULL) == REC_EIO &&
          strstr(rec_errmsg(), "nothing.pub: No such file or directory"), "%s", rec_errmsg());
    CHECK(rec_keys_trust(path("W"), path("S/self.pub"), "../up") == REC_EINVAL &&
          strstr(rec_errmsg(), "cannot name a key of allow/"), "%s", rec_errmsg());
}

/* Every key file a service refuses at its start, with its message. */
static void test_key_refusals(void) {
    char pub[41], sec[41], xsec[41];
    key_of("S/self.key", "public-key", pub);
    key_of("S/self.key", "secret-key", sec);
    key_of("X/self.key", "secret-key", xsec);
    char text[600];
    static const struct {
        const char *name, *body, *needle;
        int mode;
    } K[] = {
        {"garbage", "hello, I am not a key\n", "is not a ZeroMQ CURVE certificate: it has no public-key", 0600},
        {"binary", "curve\n    public-key = \"x\0\"\n", "is not a text file", 0600},
        {"badz85", "curve\n    public-key = \"abc\"\n", "public-key is not a 40-character Z85 key", 0600},
        {"unquoted", "curve\n    public-key = abc\n", "public-key takes a quoted value", 0600},
        {"mixed", NULL, "its secret-key is not the secret half of its public-key", 0600},
        {"readable", NULL, "can be read by other users (mode 0640)", 0640},
        {"expired", NULL, "expired on 2020-01-01T00:00:00Z", 0600},
        {"badtime", NULL, "expires = \"next week\" is not a time YYYY-MM-DDTHH:MM:SSZ", 0600},
        {"nosecret", NULL, "holds no secret-key", 0600},
    };
    for (size_t k = 0; k < sizeof K / sizeof K[0]; k++) {
        char d[64], f[80];
        snprintf(d, sizeof d, "bad_%s", K[k].name);
        snprintf(f, sizeof f, "%s/self.key", d);
        mkdir(path(d), 0700);
        mkdir(path(d), 0700);
        const char *s = sec, *exp = "";
        if (!strcmp(K[k].name, "mixed")) s = xsec;
        if (!strcmp(K[k].name, "expired")) exp = "    expires = \"2020-01-01T00:00:00Z\"\n";
        if (!strcmp(K[k].name, "badtime")) exp = "    expires = \"next week\"\n";
        snprintf(text, sizeof text, "metadata\n%scurve\n    public-key = \"%s\"\n%s%s%s\n", exp, pub,
                 strcmp(K[k].name, "nosecret") ? "    secret-key = \"" : "", strcmp(K[k].name, "nosecret") ? s : "",
                 strcmp(K[k].name, "nosecret") ? "\"" : "");
        if (!strcmp(K[k].name, "binary")) {
            FILE *fp = fopen(path(f), "w");
            if (fp) fwrite(K[k].body, 1, 26, fp), fclose(fp);
            chmod(path(f), 0600);
        } else {
            write_text(f, K[k].body ? K[k].body : text, K[k].mode);
        }
        CHECK(run("embserver --listen tcp://127.0.0.1:%d --keys %s", port + 50, d) == 1 && strstr(out, f) &&
              strstr(out, K[k].needle), "%s: %s", K[k].name, out);
    }
    /* an expired key on the allow-list, an empty allow-list, no directory, no server.pub */
    mkdir(path("E"), 0700);
    mkdir(path("E/allow"), 0700);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp -p %s %s", path("S/self.key"), path("E/self.key"));
    CHECK(system(cmd) == 0, "copying S's pair");
    CHECK(run("embserver --listen tcp://127.0.0.1:%d --keys E", port + 50) == 1 &&
          strstr(out, "E/allow holds no .pub file, so this service would let no client in"), "%s", out);
    snprintf(text, sizeof text, "metadata\n    expires = \"2021-06-30T12:00:00Z\"\ncurve\n    public-key = \"%s\"\n", pub);
    write_text("E/allow/old.pub", text, 0644);
    CHECK(run("embserver --listen tcp://127.0.0.1:%d --keys E", port + 50) == 1 &&
          strstr(out, "E/allow/old.pub expired on 2021-06-30T12:00:00Z"), "%s", out);
    /* whatever others can write lets them in: the key directory, allow/, a key in it (issue 61) */
    snprintf(cmd, sizeof cmd, "cp %s %s", path("C/self.pub"), path("E/allow/old.pub"));
    CHECK(system(cmd) == 0, "a good key on E's allow-list");
    static const struct {
        const char *file, *needle;
        int mode, back;
    } W[] = {
        {"E/allow", "E/allow can be written by other users (mode 0777): whoever can write it can let a client in; "
                    "chmod go-w ", 0777, 0700},
        {"E/allow", "E/allow can be written by other users (mode 1773)", 01773, 0700},
        {"E/allow/old.pub", "E/allow/old.pub can be written by other users (mode 0666)", 0666, 0644},
        {"E", "E can be written by other users (mode 0770): whoever can write it can swap the keys in it", 0770, 0700},
    };
    for (size_t k = 0; k < sizeof W / sizeof W[0]; k++) { /* bounded: a service that starts serves for ever */
        chmod(path(W[k].file), (mode_t)W[k].mode);
        snprintf(cmd, sizeof cmd, "cd %s && timeout 30 %s embserver --listen tcp://127.0.0.1:%d --keys E 2>&1", dir, cli,
                 port + 50);
        CHECK(check_capture(cmd, out, sizeof out) == 1 && strstr(out, W[k].needle), "%s mode %o: %s", W[k].file,
              (unsigned)W[k].mode, out);
        chmod(path(W[k].file), (mode_t)W[k].back);
    }
    CHECK(run("embserver --listen tcp://127.0.0.1:%d --keys nowhere", port + 50) == 1 &&
          strstr(out, "--keys nowhere: No such file or directory") && strstr(out, "rectrain keygen --out DIR"), "%s", out);
    CHECK(run("train --oracle-cacher tcp://127.0.0.1:%d --embservers tcp://127.0.0.1:%d --keys S", port + 50, port + 51) == 1 &&
          strstr(out, "S/server.pub: No such file or directory"), "a client needs the service's key: %s", out);
    CHECK(run("embserver --keys S --insecure") == 2 && strstr(out, "--insecure contradicts --keys"), "%s", out);
    CHECK(run("train --data x.tsv --keys S") == 2 && strstr(out, "--keys and --insecure are for the services"), "%s", out);
}

/* Services bound off loopback without keys refuse to start; clients refuse to reach one. */
static void test_secure_default(void) {
    static const char *const SVC[] = {"embserver", "prep-worker"};
    for (int k = 0; k < 2; k++) {
        CHECK(run("%s --listen tcp://0.0.0.0:%d", SVC[k], port + 52) == 1 &&
              strstr(out, "--listen tcp://0.0.0.0:") && strstr(out, "is not a loopback address and no --keys were given") &&
              strstr(out, "rectrain keygen --out DIR") && strstr(out, "--insecure"), "%s: %s", SVC[k], out);
    }
    CHECK(run("oracle --data train.rshard --cache-rows 5000 --listen tcp://0.0.0.0:%d", port + 52) == 1 &&
          strstr(out, "is not a loopback address and no --keys were given"), "oracle: %s", out);
    CHECK(run("train --oracle-cacher tcp://10.255.0.1:%d --embservers tcp://127.0.0.1:%d", port + 52, port + 53) == 1 &&
          strstr(out, "--oracle-cacher tcp://10.255.0.1:") && strstr(out, "is not a loopback address and no --keys"),
          "a client: %s", out);
    CHECK(rec_endpoint_is_local("tcp://127.0.0.1:5") && rec_endpoint_is_local("tcp://localhost:5") &&
          rec_endpoint_is_local("ipc:///tmp/x") && rec_endpoint_is_local("tcp://[::1]:5") &&
          !rec_endpoint_is_local("tcp://127.0.0.1.evil.org:5") && !rec_endpoint_is_local("tcp://0.0.0.0:5") &&
          !rec_endpoint_is_local("tcp://*:5") && !rec_endpoint_is_local("tcp://eth0:5"), "which endpoints are local");
    /* --insecure: it serves, and says so */
    pid_t es = spawn("embserver --listen tcp://0.0.0.0:%d --insecure 2>insecure.log", port + 52);
    struct timespec t = {0, 300 * 1000 * 1000};
    nanosleep(&t, NULL);
    kill(es, SIGTERM), waitpid(es, NULL, 0);
    read_out("insecure.log");
    CHECK(strstr(out, "warning: plain text on tcp://0.0.0.0:") != NULL, "%s", out);
}

/* ---- peers ---------------------------------------------------------------------------------------- */

/* A DEALER to 127.0.0.1:p: plain text when dir is NULL, else CURVE with dir's pair and
 * dir/server.pub as the service's key. */
static void *peer(void *ctx, int p, const char *dir) {
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    const int tmo = 1500, zero = 0;
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    zmq_setsockopt(s, ZMQ_SNDTIMEO, &tmo, sizeof tmo); /* a refused peer has no connection to send on */
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    if (dir) {
        char f[80], pub[41], sec[41], srv[41];
        snprintf(f, sizeof f, "%s/self.key", dir);
        key_of(f, "public-key", pub);
        key_of(f, "secret-key", sec);
        snprintf(f, sizeof f, "%s/server.pub", dir);
        key_of(f, "public-key", srv);
        zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, srv, 40);
        zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, pub, 40);
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, sec, 40);
    }
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", p);
    zmq_connect(s, ep);
    return s;
}

/* Sends w's frame and takes one answer into buf (8-byte aligned); its type, or -1 for none. */
static int ask(void *s, const rec_wbuf *w, uint64_t *buf, size_t cap, size_t *len) {
    zmq_send(s, w->p, w->len, 0);
    const int n = zmq_recv(s, buf, cap, 0);
    rec_frame_head h;
    if (n < 0 || rec_frame_head_decode(buf, (size_t)n, "test", &h)) return -1;
    if (len) *len = (size_t)n;
    return h.type;
}

static int ping(void *s) {
    rec_wbuf w = {0};
    uint64_t buf[64];
    rec_frame_begin(&w, REC_MSG_PING, 0, 1);
    rec_frame_end(&w);
    const int t = ask(s, &w, buf, sizeof buf, NULL);
    rec_wbuf_free(&w);
    return t == REC_MSG_PONG;
}

enum { TR = 1000000, TE = 4, PROBE = 10 };
static const int64_t TROWS[2] = {TR, 3};
static const rec_net_emb_hello HELLO = {0, 0, 1, 2, TE, REC_SPARSE_SGD, 0, 7, TROWS, 0, 0, 0, 0, 0};

static void say_hello(void *s) {
    rec_wbuf w = {0};
    uint64_t buf[64];
    rec_net_emb_hello h = HELLO;
    h.digest = rec_net_emb_hello_digest(&h);
    rec_frame_begin(&w, REC_MSG_EMB_HELLO, 0, 2);
    rec_net_emb_hello_encode(&w, &h);
    rec_frame_end(&w);
    CHECK(ask(s, &w, buf, sizeof buf, NULL) == REC_MSG_EMB_OK, "the good client makes the tables");
    rec_wbuf_free(&w);
}

/* Rows first..first+PROBE-1 of table 0 (the entries), written with `values` when put. */
static void entries(rec_centry *e, int64_t first) {
    for (int i = 0; i < PROBE; i++) e[i] = (rec_centry){i, 0, first + i};
}

static void encode_put(rec_wbuf *w, int64_t first, const float *values) {
    rec_centry e[PROBE];
    entries(e, first);
    const rec_net_rows r = {PROBE, e, values, NULL, NULL};
    rec_frame_begin(w, REC_MSG_EMB_PUT, 0, 3);
    rec_net_rows_encode(w, &r, 1, TE, 0);
    rec_frame_end(w);
}

/* GETs the probe rows from `first` into v (PROBE x TE); 1 when they came. */
static int get_rows(void *s, int64_t first, float *v) {
    rec_wbuf w = {0};
    static uint64_t buf[4096];
    rec_centry e[PROBE];
    entries(e, first);
    const rec_net_rows q = {PROBE, e, NULL, NULL, NULL};
    rec_frame_begin(&w, REC_MSG_EMB_GET, 0, 4);
    rec_net_rows_encode(&w, &q, 1, TE, 0);
    rec_frame_end(&w);
    size_t len = 0;
    const int t = ask(s, &w, buf, sizeof buf, &len);
    rec_wbuf_free(&w);
    rec_net_rows r;
    if (t != REC_MSG_EMB_ROWS || rec_net_rows_decode((const uint8_t *)buf + REC_NET_HEAD, len - REC_NET_HEAD, "ROWS", 0, 1,
                                                     &HELLO, 0, &r) || r.n != PROBE)
        return 0;
    memcpy(v, r.values, sizeof(float) * PROBE * TE);
    return 1;
}

/* A CURVE embedding server: the good client is served; a peer without a key, a stranger and
 * a client with a wrong service key get nothing, their PUTs change no bit, and each is logged. */
static void test_refused_peers(void) {
    const int p = port + 60;
    pid_t es = spawn("embserver --listen tcp://127.0.0.1:%d --keys S 2>refuse.log", p);
    void *ctx = zmq_ctx_new(), *good = peer(ctx, p, "C");
    int up = 0;
    for (int k = 0; k < 20 && !up; k++) up = ping(good);
    CHECK(up, "the service answers its client");
    say_hello(good);
    float before[PROBE * TE], after[PROBE * TE], bad[PROBE * TE];
    CHECK(get_rows(good, 100, before), "GET");
    for (int i = 0; i < PROBE * TE; i++) bad[i] = 1000.0f + (float)i;
    static const char *const WHO[] = {NULL, "X", "W"};
    static const char *const WHAT[] = {"a peer without a key", "a key not on the allow-list", "a wrong service key"};
    rec_wbuf w = {0};
    encode_put(&w, 100, bad);
    for (int k = 0; k < 3; k++) {
        void *b = peer(ctx, p, WHO[k]);
        uint64_t buf[64];
        CHECK(ask(b, &w, buf, sizeof buf, NULL) == -1 && !ping(b), "%s gets no answer", WHAT[k]);
        zmq_close(b);
        CHECK(ping(good), "the service keeps serving its client after %s", WHAT[k]);
    }
    CHECK(get_rows(good, 100, after) && !memcmp(before, after, sizeof before), "refused PUTs leave the rows bitwise as they were");
    /* the same PUT from the client the service lets in does change them (the check above can fail) */
    uint64_t buf[64];
    CHECK(ask(good, &w, buf, sizeof buf, NULL) == REC_MSG_EMB_PUT_OK && get_rows(good, 100, after) &&
          !memcmp(after, bad, sizeof bad), "an allowed PUT writes the rows");
    rec_wbuf_free(&w);
    zmq_close(good);
    zmq_ctx_term(ctx);
    kill(es, SIGTERM), waitpid(es, NULL, 0);
    char xpub[41];
    key_of("X/self.pub", "public-key", xpub);
    read_out("refuse.log");
    char ep[64], line[200];
    snprintf(ep, sizeof ep, "refused a connection on tcp://127.0.0.1:%d", p);
    snprintf(line, sizeof line, "embserver: refused 127.0.0.1 (key %s): its key is not on the allow-list", xpub);
    CHECK(strstr(out, "lets in the 1 key of S/allow") && strstr(out, ep) &&
          strstr(out, "a client without --keys") && strstr(out, line) &&
          strstr(out, "its CURVE hello does not decrypt: the client holds another service key") &&
          strstr(out, "stopped after"), "the service logs who it refused and why: %s", out);
}

/* A trainer refused by its oracle fails at once with the endpoint and the cause. */
static void test_client_errors(void) {
    const int p = port + 70;
    pid_t orc = spawn("oracle --data train.rshard --cache-rows 5000 --batch 256 --listen tcp://127.0.0.1:%d --keys S "
                      "2>co.log", p);
    pid_t plain = spawn("oracle --data train.rshard --cache-rows 5000 --batch 256 --listen tcp://127.0.0.1:%d 2>cp.log",
                        p + 1);
    static const struct {
        const char *keys;
        int off;
        const char *needle;
    } T[] = {
        {"", 0, "give this client --keys DIR"},
        {"--keys X", 0, "refused this trainer's connection: the service refused this client's key (ZAP status 400): "
                        "it is not on the service's allow-list"},
        {"--keys W", 0, "refused this trainer's connection: the service closed the connection during the CURVE "
                        "handshake: its key is not the one in this client's server.pub"},
        /* the plain side or the CURVE side may see the mismatch first: either message */
        {"--keys C", 1, "refused this trainer's connection: the service "},
    };
    for (size_t k = 0; k < sizeof T / sizeof T[0]; k++) {
        const double t0 = rec_now();
        char who[80];
        snprintf(who, sizeof who, "the oracle (tcp://127.0.0.1:%d) refused", p + T[k].off);
        CHECK(run("train --oracle-cacher tcp://127.0.0.1:%d --embservers tcp://127.0.0.1:%d --peer-timeout 20 %s",
                  p + T[k].off, p + 5, T[k].keys) == 1 && strstr(out, who) && strstr(out, T[k].needle) &&
              (T[k].off == 0 || strstr(out, "speaks plain text, not CURVE (started without --keys)") ||
               strstr(out, "or it runs without --keys")) && rec_now() - t0 < 15, "%s: %s", T[k].keys, out);
    }
    kill(orc, SIGTERM), kill(plain, SIGTERM);
    waitpid(orc, NULL, 0), waitpid(plain, NULL, 0);
    read_out("cp.log");
    char line[80];
    snprintf(line, sizeof line, "oracle: refused a connection on tcp://127.0.0.1:%d: ", p + 1);
    CHECK(strstr(out, line) != NULL, "the plain-text oracle logs the CURVE client it could not serve: %s", out);
}

/* ---- jobs ----------------------------------------------------------------------------------------- */

/* Plain text and CURVE clusters train the same bits, while bad peers knock on every service of
 * the CURVE one (no key; a stranger's key) with HELLOs and PUTs. */
static void test_job(void) {
    const int p = port + 80;
    FILE *f = fopen(path("c.json"), "w");
    if (f) {
        fprintf(f, "{\"format\": \"rectrain-cluster\", \"version\": 1, \"data\": \"train.rshard\", \"model\": "
                   "\"%s/configs/dlrm_small.json\", \"batch\": 128, \"epochs\": %d, \"shuffle\": false, \"embservers\": 2, "
                   "\"threads\": 1, \"base_port\": %d, \"cache\": {\"rows\": 6000}}\n", src, EPOCHS, p);
        fclose(f);
    }
    CHECK(run("cluster c.json --insecure --loss-log plain.loss") == 0 && strstr(out, "; plain text"), "%s", out);
    /* key directories in TMPDIR: one of a cluster SIGKILLed (its pid gone), one of a live one */
    const pid_t gone = fork();
    if (gone == 0) _exit(0);
    waitpid(gone, NULL, 0);
    char stale[64], live[64], old_tmp[1024];
    snprintf(stale, sizeof stale, "rectrain-cluster-keys-%d-AbC123", (int)gone);
    snprintf(live, sizeof live, "rectrain-cluster-keys-%d-AbC123", (int)getpid());
    mkdir(path(stale), 0700), mkdir(path(live), 0700);
    FILE *k = fopen(path("x"), "w");
    if (k) fclose(k);
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "cp %s %s/ && cp %s %s/", path("x"), path(stale), path("x"), path(live));
    CHECK(system(cmd) == 0, "key directories made");
    snprintf(old_tmp, sizeof old_tmp, "%s", getenv("TMPDIR") ? getenv("TMPDIR") : "");
    setenv("TMPDIR", dir, 1);
    pid_t cl = spawn("cluster c.json --loss-log curve.loss >curve.out 2>&1");
    void *ctx = zmq_ctx_new();
    rec_wbuf w = {0};
    float junk[PROBE * TE] = {0};
    encode_put(&w, 0, junk);
    rec_wbuf hello = {0};
    rec_net_emb_hello h = HELLO;
    h.digest = rec_net_emb_hello_digest(&h);
    rec_frame_begin(&hello, REC_MSG_EMB_HELLO, 0, 2);
    rec_net_emb_hello_encode(&hello, &h);
    rec_frame_end(&hello);
    int st = 0, knocks = 0;
    void *bad[6]; /* to servers p, p+1 and the oracle p+2: without a key, and with a stranger's */
    for (int k = 0; k < 6; k++) bad[k] = peer(ctx, p + k % 3, k < 3 ? NULL : "X");
    while (waitpid(cl, &st, WNOHANG) == 0) { /* ZeroMQ tries each again every 100 ms */
        for (int k = 0; k < 6; k++) {
            zmq_send(bad[k], hello.p, hello.len, ZMQ_DONTWAIT);
            zmq_send(bad[k], w.p, w.len, ZMQ_DONTWAIT);
        }
        knocks++;
        struct timespec t = {0, 100 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
    for (int k = 0; k < 6; k++) zmq_close(bad[k]);
    rec_wbuf_free(&w), rec_wbuf_free(&hello);
    zmq_ctx_term(ctx);
    read_out("curve.out");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(out, "CurveZMQ with the job's own keys"), "%s", out);
    CHECK(same_file("plain.loss", "curve.loss") && lines_of("curve.loss") == EPOCHS * ((ROWS + 127) / 128),
          "the CURVE job trains the plain-text job's losses bitwise, bad peers refused meanwhile");
    CHECK(knocks >= 3 && strstr(out, "embserver: refused") && strstr(out, "oracle: refused"),
          "the services log the bad peers (%d knocks): %s", knocks, out);
    struct stat sb;
    CHECK(stat(path(stale), &sb) != 0 && strstr(out, "the keys of a cluster that was killed (pid ") &&
          stat(path(live), &sb) == 0, "a killed cluster's keys removed, a live one's kept: %s", out);
    if (old_tmp[0]) setenv("TMPDIR", old_tmp, 1);
    else unsetenv("TMPDIR");
}

/* Offloading to a CURVE prep-worker trains the rows and losses of plain text; a trainer the
 * worker refuses says so and makes the pieces itself. */
static void test_offload(void) {
    const int p = port + 90;
    pid_t ws = spawn("prep-worker --listen tcp://127.0.0.1:%d --threads 1 --keys S 2>wcurve.log", p);
    pid_t wp = spawn("prep-worker --listen tcp://127.0.0.1:%d --threads 1 2>wplain.log", p + 1);
    char ck[3][20] = {"", "", ""};
    static const char *const RUNS[] = {"--keys C", "", ""};
    const int at[] = {p, p + 1, p};
    for (int k = 0; k < 3; k++) {
        char loss[32];
        snprintf(loss, sizeof loss, "off%d.loss", k);
        CHECK(run("train --data d.tsv --spec spec.json --config %s/configs/dlrm_small.json --batch 256 --no-shuffle "
                  "--epochs 1 --loss-log %s --json --workers tcp://127.0.0.1:%d --offload 1 --offload-at p3 "
                  "--worker-timeout 2 %s", src, loss, at[k], RUNS[k]) == 0, "%s", out);
        const char *c = strstr(out, "\"rows_checksum\": \"");
        snprintf(ck[k], sizeof ck[k], "%.16s", c ? c + 18 : "none");
        if (k < 2)
            CHECK(strstr(out, "\"pieces_remote\": 0,") == NULL && strstr(out, "1 of 1 worker answered") &&
                      !strstr(out, "none answered") && !strstr(out, "the workers made 0 of"),
                  "the worker made pieces (run %d): %s", k, out);
        /* the log says what the JSON says: nothing was made remotely (issue 61) */
        if (k == 2)
            CHECK(strstr(out, "refused this trainer's connection: the service ") && strstr(out, "give this client --keys DIR") &&
                      strstr(out, "0 of 1 worker answered") && strstr(out, "\"pieces_remote\": 0,") &&
                      strstr(out, "100% of the pieces to the workers at p'3, but none answered: this trainer makes them") &&
                      strstr(out, "train: offload: the workers made 0 of the "),
                  "a refused trainer names the worker and the cause, and makes every piece: %s", out);
    }
    CHECK(same_file("off0.loss", "off1.loss") && same_file("off0.loss", "off2.loss") && !strcmp(ck[0], ck[1]) &&
          !strcmp(ck[0], ck[2]), "offloading trains the same bits over CURVE, plain text and locally (%s %s %s)", ck[0],
          ck[1], ck[2]);
    kill(ws, SIGTERM), kill(wp, SIGTERM);
    waitpid(ws, NULL, 0), waitpid(wp, NULL, 0);
}

/* ---- the wire ------------------------------------------------------------------------------------- */

/* A TCP proxy: every connection to 127.0.0.1:`from` joined to one to 127.0.0.1:`to`, both
 * directions' bytes kept in cap. One thread, one poll set. */
typedef struct proxy {
    int lfd, to;
    volatile int stop;
    uint8_t *cap;
    size_t len, max;
    pthread_t th;
} proxy;

static void *proxy_run(void *arg) {
    proxy *x = arg;
    int fd[16][2], n = 0;
    uint8_t buf[1 << 16];
    while (!x->stop) {
        struct pollfd pf[1 + 32];
        pf[0] = (struct pollfd){x->lfd, POLLIN, 0};
        for (int i = 0; i < n; i++) pf[1 + 2 * i] = (struct pollfd){fd[i][0], POLLIN, 0}, pf[2 + 2 * i] = (struct pollfd){fd[i][1], POLLIN, 0};
        if (poll(pf, (nfds_t)(1 + 2 * n), 50) <= 0) continue;
        if ((pf[0].revents & POLLIN) && n < 16) {
            const int c = accept(x->lfd, NULL, NULL), s = socket(AF_INET, SOCK_STREAM, 0);
            struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)x->to)};
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            if (c >= 0 && s >= 0 && connect(s, (struct sockaddr *)&a, sizeof a) == 0) fd[n][0] = c, fd[n][1] = s, n++;
            else if (c >= 0) close(c), close(s);
        }
        for (int i = 0; i < n; i++)
            for (int d = 0; d < 2; d++) {
                if (!(pf[1 + 2 * i + d].revents & (POLLIN | POLLHUP | POLLERR))) continue;
                const ssize_t r = read(fd[i][d], buf, sizeof buf);
                ssize_t done = 0;
                while (r > 0 && done < r) {
                    const ssize_t wr = write(fd[i][!d], buf + done, (size_t)(r - done));
                    if (wr <= 0) break;
                    done += wr;
                }
                if (r > 0 && x->len + (size_t)r <= x->max) memcpy(x->cap + x->len, buf, (size_t)r), x->len += (size_t)r;
                if (r <= 0) { /* either end closed: the pair goes */
                    close(fd[i][0]), close(fd[i][1]);
                    fd[i][0] = fd[n - 1][0], fd[i][1] = fd[n - 1][1], n--, i--;
                    break;
                }
            }
    }
    for (int i = 0; i < n; i++) close(fd[i][0]), close(fd[i][1]);
    return NULL;
}

static int proxy_start(proxy *x, int from, int to) {
    *x = (proxy){.to = to, .max = 8 << 20};
    x->cap = malloc(x->max);
    x->lfd = socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    setsockopt(x->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)from)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (!x->cap || bind(x->lfd, (struct sockaddr *)&a, sizeof a) || listen(x->lfd, 8)) return -1;
    return pthread_create(&x->th, NULL, proxy_run, x);
}

static void proxy_stop(proxy *x) {
    x->stop = 1;
    pthread_join(x->th, NULL);
    close(x->lfd);
}

/* Through the proxy: a HELLO, a PUT of known values into a known row, and a GET of them back. */
static void test_wire(void) {
    const int p = port + 100;
    const int64_t row = 987654; /* its 8 bytes, and the values' 16, are looked for on the wire */
    float vals[PROBE * TE];
    for (int i = 0; i < PROBE * TE; i++) vals[i] = 3.14159265f * (float)(i + 1) + 1e-3f;
    for (int curve = 0; curve < 2; curve++) {
        pid_t es = spawn("embserver --listen tcp://127.0.0.1:%d %s 2>wire%d.log", p + 2 * curve, curve ? "--keys S" : "", curve);
        proxy x;
        CHECK(proxy_start(&x, p + 2 * curve + 1, p + 2 * curve) == 0, "the proxy listens on %d", p + 2 * curve + 1);
        void *ctx = zmq_ctx_new(), *s = peer(ctx, p + 2 * curve + 1, curve ? "C" : NULL);
        int up = 0;
        for (int k = 0; k < 20 && !up; k++) up = ping(s);
        say_hello(s);
        rec_wbuf w = {0};
        encode_put(&w, row, vals);
        uint64_t buf[64];
        float back[PROBE * TE];
        CHECK(up && ask(s, &w, buf, sizeof buf, NULL) == REC_MSG_EMB_PUT_OK && get_rows(s, row, back) &&
              !memcmp(back, vals, sizeof vals), "the rows go and come back through the proxy (%s)", curve ? "CURVE" : "plain");
        rec_wbuf_free(&w);
        zmq_close(s);
        zmq_ctx_term(ctx);
        proxy_stop(&x);
        kill(es, SIGTERM), waitpid(es, NULL, 0);
        uint8_t id[8];
        for (int b = 0; b < 8; b++) id[b] = (uint8_t)((uint64_t)row >> (8 * b));
        const int has_vals = memmem(x.cap, x.len, vals, 16) != NULL, has_id = memmem(x.cap, x.len, id, 8) != NULL;
        if (curve)
            CHECK(x.len > 2 * sizeof vals && !has_vals && !has_id, "no row value or id in the %zu bytes of the CURVE "
                  "connection (values %d, id %d)", x.len, has_vals, has_id);
        else
            CHECK(has_vals && has_id, "the row's values and id are in the %zu bytes of plain text (the capture works)", x.len);
        free(x.cap);
    }
}

int main(void) {
    int rc = clirun_setup("rectrain_curve");
    if (rc) return rc == 77 ? check_report() : rc;
    if (!zmq_has("curve")) {
        printf("libzmq without CURVE: skipped\n");
        clirun_cleanup();
        return 77;
    }
    signal(SIGPIPE, SIG_IGN);
    /* below Linux's ephemeral range (32768 and up), where other tests' clients bind */
    port = 21000 + (int)(getpid() % 11000);
    CHECK(run("gen --rows %d --scale 0.002 --out d.tsv", ROWS) == 0, "%s", out);
    write_spec("spec.json", 50, 7);
    CHECK(run("prep --spec spec.json --in d.tsv --out train.rshard") == 0, "%s", out);
    make_keys();
    test_key_refusals();
    test_secure_default();
    test_refused_peers();
    test_client_errors();
    test_job();
    test_offload();
    test_wire();
    clirun_cleanup();
    return check_report();
}

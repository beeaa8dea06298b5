/* rectrain bench link: a link emulator the benches put between processes (this machine's
 * kernel has no netem). A TCP forwarder: every connection accepted on --listen is joined to a
 * new connection to --to, and each direction behaves as a link of the given bandwidth and
 * one-way latency: bytes read at time t enter the link when it is free (start = max(t, free)),
 * occupy it for bytes * 8 / bandwidth, and are delivered `latency` after they leave it. One
 * thread, one poll set, nanosecond timeouts (ppoll). Runs until SIGINT/SIGTERM and prints the
 * bytes it carried each way. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"
#include "rectrain/core.h"

static const char USAGE[] =
    "usage: rectrain bench link --listen PORT --to HOST:PORT [--gbit G] [--latency-us U]\n"
    "\n"
    "Forwards every TCP connection made to 127.0.0.1:PORT to HOST:PORT through an emulated\n"
    "link of G Gbit/s (default 1; 0: unlimited) and U microseconds one way (default 100), both\n"
    "directions alike. Put it between a trainer and an embedding server to measure training\n"
    "over a slow network on one machine. Runs until Ctrl-C.\n";

enum { MAX_CONN = 128, CHUNK = 1 << 16, MAX_QUEUED = 64 << 20 };

typedef struct chunk {
    double release;          /* when its last byte is delivered */
    size_t len, off;
    struct chunk *next;
    uint8_t data[];
} chunk;

typedef struct dir {
    int from, to;
    chunk *head, *tail;
    size_t queued;
    double free_at;          /* when the link is free again */
    int eof;                 /* `from` ended: shut `to` down once the queue is empty */
    int done;
    double bytes;
} dir;

typedef struct conn {
    int used;
    dir d[2];
} conn;

static volatile sig_atomic_t stop_link;
static void on_stop(int sig) { (void)sig; stop_link = 1; }

static int connect_to(const char *host, const char *port) {
    struct addrinfo hints = {0}, *ai;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &ai) != 0) return -1;
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) close(fd), fd = -1;
    freeaddrinfo(ai);
    if (fd >= 0) {
        const int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
    return fd;
}

static void dir_free(dir *d) {
    while (d->head) {
        chunk *c = d->head;
        d->head = c->next;
        free(c);
    }
    d->tail = NULL;
}

/* Reads what `from` has into the link. */
static void pump_in(dir *d, double bps, double lat) {
    while (d->queued < MAX_QUEUED && !d->eof) {
        chunk *c = malloc(sizeof(chunk) + CHUNK);
        if (!c) return;
        const ssize_t n = read(d->from, c->data, CHUNK);
        if (n <= 0) {
            free(c);
            if (n == 0 || (errno != EAGAIN && errno != EINTR)) d->eof = 1;
            return;
        }
        const double now = rec_now(), start = now > d->free_at ? now : d->free_at;
        d->free_at = start + (bps > 0 ? (double)n * 8.0 / bps : 0);
        c->release = d->free_at + lat;
        c->len = (size_t)n;
        c->off = 0;
        c->next = NULL;
        if (d->tail) d->tail->next = c;
        else d->head = c;
        d->tail = c;
        d->queued += (size_t)n;
        d->bytes += (double)n;
    }
}

/* Writes the delivered bytes to `to`. */
static void pump_out(dir *d) {
    const double now = rec_now();
    while (d->head && d->head->release <= now) {
        chunk *c = d->head;
        const ssize_t n = write(d->to, c->data + c->off, c->len - c->off);
        if (n <= 0) {
            if (n < 0 && errno != EAGAIN && errno != EINTR) d->done = 1;
            return;
        }
        c->off += (size_t)n;
        d->queued -= (size_t)n;
        if (c->off < c->len) return;
        d->head = c->next;
        if (!d->head) d->tail = NULL;
        free(c);
    }
    if (d->eof && !d->head && !d->done) {
        shutdown(d->to, SHUT_WR);
        d->done = 1;
    }
}

int bench_link(int argc, char **argv) {
    const char *cmd = "bench link", *to = NULL;
    int port = 0;
    double gbit = 1, lat_us = 100;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = CLI_OK;
        if (cli_is_help(a)) { fputs(USAGE, stdout); return CLI_OK; }
        else if (!strcmp(a, "--listen")) rc = cli_int(cmd, argc, argv, &i, 1, 65535, &port);
        else if (!strcmp(a, "--to")) rc = cli_str(cmd, argc, argv, &i, &to);
        else if (!strcmp(a, "--gbit")) rc = cli_double(cmd, argc, argv, &i, 0, 1000, &gbit);
        else if (!strcmp(a, "--latency-us")) rc = cli_double(cmd, argc, argv, &i, 0, 1e7, &lat_us);
        else rc = cli_usage(cmd, "unknown option '%s'", a);
        if (rc) return rc;
    }
    char host[256];
    const char *colon = to ? strrchr(to, ':') : NULL;
    if (!port || !colon || colon == to || (size_t)(colon - to) >= sizeof host)
        return cli_usage(cmd, "give --listen PORT and --to HOST:PORT");
    memcpy(host, to, (size_t)(colon - to));
    host[colon - to] = 0;
    const double bps = gbit * 1e9, lat = lat_us * 1e-6;
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(ls, 64) != 0) {
        fprintf(stderr, "rectrain bench link: cannot listen on 127.0.0.1:%d: %s\n", port, strerror(errno));
        return CLI_FAIL;
    }
    signal(SIGINT, on_stop);
    signal(SIGTERM, on_stop);
    signal(SIGPIPE, SIG_IGN);
    fprintf(stderr, "link: 127.0.0.1:%d -> %s, %g Gbit/s, %g us each way\n", port, to, gbit, lat_us);
    static conn cs[MAX_CONN];
    double total[2] = {0, 0};
    while (!stop_link) {
        struct pollfd pf[1 + 4 * MAX_CONN];
        int np = 0;
        pf[np++] = (struct pollfd){ls, POLLIN, 0};
        double wake = 1.0; /* seconds */
        const double now = rec_now();
        for (int i = 0; i < MAX_CONN; i++) {
            if (!cs[i].used) continue;
            for (int k = 0; k < 2; k++) {
                dir *d = &cs[i].d[k];
                if (!d->eof && d->queued < MAX_QUEUED) pf[np++] = (struct pollfd){d->from, POLLIN, 0};
                if (d->head) {
                    if (d->head->release <= now) pf[np++] = (struct pollfd){d->to, POLLOUT, 0};
                    else if (d->head->release - now < wake) wake = d->head->release - now;
                }
            }
        }
        struct timespec ts = {(time_t)wake, (long)((wake - (double)(time_t)wake) * 1e9)};
        if (ppoll(pf, (nfds_t)np, &ts, NULL) < 0 && errno != EINTR) break;
        if (pf[0].revents & POLLIN) {
            int c = accept(ls, NULL, NULL);
            int slot = -1;
            for (int i = 0; i < MAX_CONN && slot < 0; i++)
                if (!cs[i].used) slot = i;
            const int t = c >= 0 && slot >= 0 ? connect_to(host, colon + 1) : -1;
            if (t < 0) {
                if (c >= 0) close(c);
            } else {
                setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK);
                memset(&cs[slot], 0, sizeof cs[slot]);
                cs[slot].used = 1;
                cs[slot].d[0].from = c, cs[slot].d[0].to = t;
                cs[slot].d[1].from = t, cs[slot].d[1].to = c;
            }
        }
        for (int i = 0; i < MAX_CONN; i++) {
            if (!cs[i].used) continue;
            for (int k = 0; k < 2; k++) pump_in(&cs[i].d[k], bps, lat), pump_out(&cs[i].d[k]);
            if (cs[i].d[0].done && cs[i].d[1].done) {
                for (int k = 0; k < 2; k++) total[k] += cs[i].d[k].bytes, dir_free(&cs[i].d[k]);
                close(cs[i].d[0].from), close(cs[i].d[1].from);
                cs[i].used = 0;
            }
        }
    }
    for (int i = 0; i < MAX_CONN; i++)
        if (cs[i].used)
            for (int k = 0; k < 2; k++) total[k] += cs[i].d[k].bytes, dir_free(&cs[i].d[k]);
    fprintf(stderr, "link: carried %.1f MB forward and %.1f MB back\n", total[0] / 1e6, total[1] / 1e6);
    close(ls);
    return CLI_OK;
}

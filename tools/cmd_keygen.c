/* rectrain keygen, and the security options every service and client takes (cli.h): CurveZMQ
 * keys for the job's ZeroMQ connections (net.h; docs/security.md). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "rectrain/net.h"

static const char KEYGEN_USAGE[] =
    "usage: rectrain keygen --out DIR [--days N]\n"
    "\n"
    "Makes a CurveZMQ key pair for a service or client of a job on several hosts, in ZeroMQ's\n"
    "certificate form: DIR/self.key (both halves, mode 0600: keep it on this host) and\n"
    "DIR/self.pub (the public half: give it to the peers), and an empty DIR/allow/. Then:\n"
    "  a service (prep-worker, embserver, oracle) lets in the clients whose self.pub is in\n"
    "  its DIR/allow/ (as NAME.pub); a client (train, an oracle with --workers) reaches the\n"
    "  services whose self.pub is its DIR/server.pub. Every one takes --keys DIR.\n"
    "Never replaces an existing key. docs/security.md: deploying across hosts.\n"
    "\n"
    "  --out DIR          the key directory (made when missing)\n"
    "  --days N           the pair expires N days from now (default: never)\n";

int cmd_keygen(int argc, char **argv) {
    const char *cmd = "keygen", *out = NULL;
    int days = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = CLI_OK;
        if (cli_is_help(a)) {
            fputs(KEYGEN_USAGE, stdout);
            return CLI_OK;
        } else if (!strcmp(a, "--out")) {
            rc = cli_str(cmd, argc, argv, &i, &out);
        } else if (!strcmp(a, "--days")) {
            rc = cli_int(cmd, argc, argv, &i, 1, 36500, &days);
        } else {
            return cli_usage(cmd, "unknown option '%s'", a);
        }
        if (rc != CLI_OK) return rc;
    }
    if (!out) return cli_usage(cmd, "--out DIR is required (where the key pair goes)");
    rec_status s = rec_keygen(out, days);
    if (s) return cli_fail(cmd, s);
    printf("keygen: %s/self.key (secret: keep it here) and %s/self.pub (public: give it to the peers)\n", out, out);
    return CLI_OK;
}

const rec_net_launch *cli_launch;

int cli_secure_option(const char *cmd, int argc, char **argv, int *i, rec_net_secure *s) {
    const char *a = argv[*i];
    if (!strcmp(a, "--launched")) { /* not in the help: the processes of `rectrain cluster` across hosts */
        if (!cli_launch) return cli_usage(cmd, "--launched is for the processes `rectrain cluster` starts across hosts");
        s->launch = cli_launch;
        return CLI_OK;
    }
    if (!strcmp(a, "--keys")) {
        if (s->insecure) return cli_usage(cmd, "--keys contradicts --insecure: give one");
        return cli_str(cmd, argc, argv, i, &s->keys);
    }
    if (!strcmp(a, "--insecure")) {
        if (s->keys) return cli_usage(cmd, "--insecure contradicts --keys: give one");
        s->insecure = 1;
        return CLI_OK;
    }
    return -1;
}

/* rectrain prep-worker: a preprocessing worker that trainers offload to (offload.h). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "rectrain/core.h"
#include "rectrain/net.h"
#include "rectrain/offload.h"

static const char WORKER_USAGE[] =
    "usage: rectrain prep-worker [--listen ENDPOINT] [--threads T] [--keep-mb M] [--keys DIR | --insecure]\n"
    "\n"
    "Serves preprocessing to trainers started with --workers (FastFlow offloading): it reads\n"
    "lines of their TSV data (or receives them), runs their prep spec with the fused engine and\n"
    "streams the rows back. Runs until Ctrl-C or SIGTERM; trainers carry on without it.\n"
    "\n"
    "  --listen ENDPOINT  where to listen (default tcp://127.0.0.1:5555, loopback only; give\n"
    "                     tcp://0.0.0.0:PORT or an interface's address to serve other hosts)\n"
    "  --threads T        preprocessing threads (default: all CPUs)\n"
    "  --keep-mb M        memory for answers kept for a job's other trainers: the ranks of an\n"
    "                     mpirun ask for the same pieces, made once (default 256; 0 keeps none)\n"
    CLI_SECURE_SERVICE_HELP
    "The data files and the --vocab-from shard must be at the same paths as on the trainer\n"
    "for offloading at p'2 and p'3 (at p'1 the trainer sends the lines).\n";

int cmd_worker(int argc, char **argv) {
    const char *cmd = "prep-worker";
    rec_prep_worker_opts o = {.listen = "tcp://127.0.0.1:5555", .threads = rec_cpu_count(), .stop = &cli_stop, .log = stderr,
                            .keep_mb = 256};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = CLI_OK;
        if (cli_is_help(a)) {
            fputs(WORKER_USAGE, stdout);
            return CLI_OK;
        } else if (!strcmp(a, "--listen")) {
            rc = cli_str(cmd, argc, argv, &i, &o.listen);
        } else if (!strcmp(a, "--threads")) {
            rc = cli_int(cmd, argc, argv, &i, 1, 256, &o.threads);
        } else if (!strcmp(a, "--keep-mb")) {
            rc = cli_int(cmd, argc, argv, &i, 0, 1 << 20, &o.keep_mb);
        } else if ((rc = cli_secure_option(cmd, argc, argv, &i, &o.sec)) >= 0) {
        } else {
            return cli_usage(cmd, "unknown option '%s'", a);
        }
        if (rc != CLI_OK) return rc;
    }
    if (rec_endpoint_check(o.listen)) return cli_usage(cmd, "--listen: %s", rec_errmsg());
    cli_catch_stop("");
    rec_status s = rec_prep_worker_run(&o);
    return s ? cli_fail(cmd, s) : CLI_OK;
}

/* No command writes a file it reads (the output guard, core.h). For every command and every
 * output option, every input option of that command is given as the output: the command must
 * refuse with the guard's message, and every input must be byte-identical afterwards. A second
 * check reads each command's --help and fails on a file option the table below does not list,
 * so that a new command or option is enumerated too. Then every output is given a device (a
 * null one: written into, never replaced; a full one: exit 1 naming it), standard output a
 * full device, and '-' where it is not standard output. */
#include <ctype.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "clirun.h"
#include "rectrain/core.h"

enum { OTHER, IN, OUT, INOUT, PREFIX };

/* One argument of a command line. flag "" is a positional argument; a flag starting with '$'
 * is a path a config file names (not on the command line); value NULL is a switch. `file`
 * is the file the option reads, where it differs from its value (a checkpoint directory). */
typedef struct arg {
    const char *flag, *value;
    int role;
    const char *file;
} arg;

#define I(f, v) {f, v, IN, NULL}
#define IF(f, v, file) {f, v, IN, file}
#define O(f, v) {f, v, OUT, NULL}
#define IO(f, v) {f, v, INOUT, NULL}
#define X(f, v) {f, v, OTHER, NULL}
#define PX(f, v) {f, v, PREFIX, NULL}

typedef struct gcase {
    const char *cmd; /* "train", "bench prep" */
    arg a[24];
} gcase;

/* A valid command line of each command that both reads and writes files, with every file option
 * it has. The guard runs before anything else is checked, so the lines need not make sense past
 * it (a GPU that is not here, workers that do not answer). */
static const gcase CASES[] = {
    {"prep", {I("--spec", "spec.json"), I("--in", "raw.tsv"), I("--vocab-from", "std.rshard"),
              O("--out", "o.rshard")}},
    {"train", {I("--config", "cfg.json"), I("--data", "std.rshard"), I("--eval", "ev.rshard"),
               I("--spec", "spec.json"), I("--vocab-from", "voc.rshard"), I("--oracle", "d.prob"),
               I("--plan", "eplan.json"), I("--plan-shards", "plan.json"),
               IF("--workers", "@workers.txt", "workers.txt"), IO("--offload-store", "store.json"),
               O("--loss-log", "loss.txt"), O("--metrics", "m2.jsonl"), O("--plot", "P"),
               O("--tensorboard", "TB"), O("--npy", "N"), O("--ckpt", "C"), X("--steps", "1")}},
    {"train", {I("--data", "std.rshard"), {"--ckpt", "K", INOUT, "K/model.rckpt"}, X("--resume", NULL),
               O("--loss-log", "loss.txt"), O("--plot", "P"), O("--tensorboard", "TB")}},
    {"train", {I("--data", "std.rshard"), X("--holdout", "0.5"), X("--tune", NULL),
               IO("--plan", "eplan.json"), O("--npy", "N")}},
    {"train", {I("--data", "raw.tsv"), I("--spec", "spec.json"), X("--device", "cuda"), X("--prep-device", "cuda"),
               IO("--corun-capacity", "cap.json"), O("--loss-log", "loss.txt")}},
    {"train", {X("--oracle-cacher", "tcp://127.0.0.1:9"), X("--embservers", "tcp://127.0.0.1:9"),
               I("--config", "cfg.json"), O("--loss-log", "loss.txt"), O("--ckpt", "C")}},
    {"predict", {IF("--ckpt", "K", "K/model.rckpt"), I("--data", "raw.tsv"), I("--spec", "spec.json"),
                 I("--vocab-from", "std.rshard"), O("--out", "p.tsv"), O("--feed-out", "feed.bin")}},
    {"plot", {I("--metrics", "m.jsonl"), O("--out", "PD")}},
    {"plot", {I("--table", "t.tsv"), O("--out", "t.png")}},
    {"export", {IF("--ckpt", "K", "K/model.rckpt"), O("--out", "E")}},
    {"plan", {I("--data", "std.rshard"), I("--spec", "spec.json"), I("--config", "cfg.json"),
              X("--ranks", "2"), O("--out", "pl.json")}},
    {"plan", {I("--data", "std.rshard"), I("--spec", "spec.json"), I("--config", "cfg.json"),
              X("--ranks", "2"), X("--simulate", NULL), PX("--chart", "ch")}},
    {"cluster", {I("", "cluster.json"), I("$.data", "std.rshard"), I("$.model", "cfg.json"),
                 I("$.spec", "spec.json"), I("--eval", "ev.rshard"), O("--loss-log", "loss.txt"), O("--ckpt", "C"),
                 O("--npy", "N")}},
    {"bench prep", {I("--spec", "spec.json"), I("--in", "raw.tsv"), X("--device", "cuda"),
                    O("--latencies", "lat.tsv")}},
};

/* File options of commands that only read or only write (nothing to enumerate: an output-only
 * command's outputs are compared with each other in test_cli), and inputs that no output can
 * meet: plan --score is refused beside --out and --chart, and plan --torchrec DIR reads only
 * DIR/torchrec-N.json, which --chart's PREFIX-N.png never is. */
static const struct {
    const char *cmd, *flag;
} ONE_SIDED[] = {
    {"gen", "--out"}, {"gen", "--prob-out"}, {"inspect", ""}, {"eval", "--ckpt"}, {"eval", "--data"},
    {"eval", "--spec"}, {"eval", "--vocab-from"}, {"oracle", "--data"}, {"oracle", "--spec"},
    {"oracle", "--vocab-from"}, {"oracle", "--config"}, {"embserver", "--ckpt"}, {"bench embed", "--dump"},
    {"bench embed", "--plan-out"}, {"bench mlp", "--config"}, {"bench train", "--config"},
    {"bench train", "--data"}, {"bench loader", "--data"}, {"bench oracle", "--data"},
    {"plan", "--score"}, {"plan", "--torchrec"},
    /* key directories are read (keygen's --out, written, is its only file) */
    {"train", "--keys"}, {"prep-worker", "--keys"}, {"embserver", "--keys"}, {"oracle", "--keys"}, {"keygen", "--out"},
};

/* Every fixture file, hashed before and after each refused command. */
static const char *const FILES[] = {"raw.tsv", "spec.json", "std.rshard", "ev.rshard", "voc.rshard", "cfg.json",
                                    "d.prob", "eplan.json", "plan.json", "workers.txt", "store.json", "m.jsonl",
                                    "t.tsv", "cluster.json", "K/model.rckpt", "ch-2.png", "cap.json"};
enum { NFILES = sizeof FILES / sizeof FILES[0] };

static uint64_t hash_file(const char *name) {
    FILE *f = fopen(path(name), "rb");
    if (!f) return 0;
    uint64_t h = 1469598103934665603ull;
    unsigned char buf[65536];
    for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;)
        for (size_t k = 0; k < n; k++) h = (h ^ buf[k]) * 1099511628211ull;
    fclose(f);
    return h;
}

static void hash_all(uint64_t *h) {
    for (int k = 0; k < NFILES; k++) h[k] = hash_file(FILES[k]);
}

static void put(const char *name, const char *text) {
    FILE *f = fopen(path(name), "w");
    if (f) fputs(text, f), fclose(f);
}

static void copy(const char *from, const char *to) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp %s %s", path(from), path(to));
    CHECK(system(cmd) == 0, "%s", cmd);
}

/* The fixtures: a raw file, its shard, a checkpoint with its metrics, and a file for every
 * other input option. */
static int make_fixtures(void) {
    write_spec("spec.json", 100, 10); /* small tables: small checkpoints */
    if (run("gen --rows 3000 --out raw.tsv --prob-out d.prob") || run("prep --spec spec.json --in raw.tsv --out std.rshard") ||
        run("train --data std.rshard --steps 2 --ckpt K --metrics m.jsonl")) {
        fprintf(stderr, "fixtures: %s\n", out);
        return 1;
    }
    char from[1400];
    snprintf(from, sizeof from, "cp %s/configs/dlrm_small.json %s/cfg.json", src, dir);
    if (system(from) != 0) return 1;
    copy("std.rshard", "ev.rshard");
    copy("std.rshard", "voc.rshard");
    copy("cfg.json", "eplan.json");
    if (run("plan --data std.rshard --ranks 2 --out plan.json")) return 1;
    put("workers.txt", "tcp://127.0.0.1:9\n");
    put("store.json", "{}\n");
    put("cap.json", "{}\n");
    put("t.tsv", "name\tx\na\t1\n");
    put("cluster.json", "{\"format\": \"rectrain-cluster\", \"version\": 1, \"data\": \"std.rshard\", "
                        "\"model\": \"cfg.json\", \"spec\": \"spec.json\"}\n");
    put("ch-2.png", "not a chart\n");
    return 0;
}

/* The command line of case c with output o given `value` (and input i given `ivalue`, for a
 * prefix output), into buf. */
static void command(const gcase *c, int o, const char *value, int i, const char *ivalue, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "%s", c->cmd);
    for (int k = 0; k < 24 && c->a[k].flag && n < cap; k++) {
        const arg *x = &c->a[k];
        if (x->flag[0] == '$') continue;
        const char *v = k == o ? value : k == i && ivalue ? ivalue : x->value;
        n += (size_t)snprintf(buf + n, cap - n, "%s%s%s%s", x->flag[0] ? " " : "", x->flag, v ? " " : "", v ? v : "");
    }
}

/* Each output of each case given each input's file: refused by the guard, nothing changed. */
static void test_enumerate(void) {
    uint64_t before[NFILES], after[NFILES];
    hash_all(before);
    int pairs = 0;
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
        const gcase *g = &CASES[c];
        for (int o = 0; o < 24 && g->a[o].flag; o++) {
            const int orole = g->a[o].role;
            if (orole != OUT && orole != INOUT && orole != PREFIX) continue;
            for (int i = 0; i < 24 && g->a[i].flag; i++) {
                const arg *in = &g->a[i];
                if ((in->role != IN && in->role != INOUT) || i == o || !strcmp(in->flag, g->a[o].flag)) continue;
                const char *file = in->file ? in->file : in->value[0] == '@' ? in->value + 1 : in->value;
                char cmd[2048];
                if (orole == PREFIX) { /* PREFIX-2.png is what it writes: the input named so */
                    if (in->flag[0] == '$') continue;
                    command(g, o, "ch", i, "ch-2.png", cmd, sizeof cmd);
                } else {
                    command(g, o, file, -1, NULL, cmd, sizeof cmd);
                }
                const int rc = run("%s", cmd);
                const char *named = in->flag[0] ? in->flag : "the cluster config"; /* the one positional */
                char want[160];
                snprintf(want, sizeof want, "which is %s ", named);
                CHECK(rc == 1 && strstr(out, "an input of this command") && strstr(out, want),
                      "rectrain %s: rc %d, want the guard naming %s: %s", cmd, rc, named, out);
                hash_all(after);
                for (int k = 0; k < NFILES; k++)
                    CHECK(after[k] == before[k], "rectrain %s changed %s", cmd, FILES[k]);
                pairs++;
            }
        }
    }
    printf("guard: %d output/input pairs refused\n", pairs);
    CHECK(pairs >= 60, "only %d pairs enumerated", pairs);
}

/* The options of `rectrain CMD --help` whose value is a file or folder ("--data FILES",
 * "[--in FILE.tsv]", "--chart PREFIX", "--ckpt CKPT"), and a positional file in the usage line. */
static int is_file_metavar(const char *m) {
    static const char *const words[] = {"FILE", "DIR", "PATH", "PREFIX", "SHARD", "CKPT", "TRAIN", "EVAL",
                                        "DATA", "CFG", "SPEC", "CONFIG", "PREDS", "PLAN", ".json", ".tsv",
                                        ".rshard", ".png", NULL};
    for (int k = 0; words[k]; k++)
        if (strstr(m, words[k])) return 1;
    return 0;
}

static int listed(const char *cmd, const char *flag) {
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
        if (strcmp(CASES[c].cmd, cmd)) continue;
        for (int k = 0; k < 24 && CASES[c].a[k].flag; k++)
            if (!strcmp(CASES[c].a[k].flag, flag) && CASES[c].a[k].role != OTHER) return 1;
    }
    for (size_t k = 0; k < sizeof ONE_SIDED / sizeof ONE_SIDED[0]; k++)
        if (!strcmp(ONE_SIDED[k].cmd, cmd) && !strcmp(ONE_SIDED[k].flag, flag)) return 1;
    return 0;
}

/* Checks that each file option in `help` is listed for cmd; returns how many it found. */
static int cover(const char *cmd, const char *help) {
    int found = 0;
    for (const char *p = help; (p = strstr(p, "--")) != NULL;) {
        const char *f = p;
        p += 2;
        const int option_line = f - help >= 3 && !strncmp(f - 3, "\n  ", 3);
        if (!option_line && !(f > help && f[-1] == '[')) continue; /* "--x" in a sentence */
        while (islower((unsigned char)*p) || *p == '-') p++;
        if (p - f < 3 || *p != ' ' || !isupper((unsigned char)p[1])) continue;
        char flag[64], meta[64];
        snprintf(flag, sizeof flag, "%.*s", (int)(p - f), f);
        const char *m = ++p;
        while (*p && !isspace((unsigned char)*p) && *p != ']') p++;
        snprintf(meta, sizeof meta, "%.*s", (int)(p - m), m);
        if (!is_file_metavar(meta)) continue;
        found++;
        CHECK(listed(cmd, flag), "rectrain %s %s %s: a file option the guard's table does not list: add it to CASES "
              "(or ONE_SIDED) in tests/test_guard.c", cmd, flag, meta);
    }
    return found;
}

/* Every command of `rectrain --help`, every bench, and training with --oracle-cacher. */
static void test_coverage(void) {
    CHECK(run("--help") == 0, "rectrain --help");
    char list[1 << 16];
    snprintf(list, sizeof list, "%s", out);
    char help[1 << 16];
    int commands = 0, options = 0;
    for (char *save = NULL, *line = strtok_r(list, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char name[32];
        if (strncmp(line, "  ", 2) || sscanf(line, "%31s", name) != 1) continue;
        if (!strcmp(name, "bench")) {
            static const char *const benches[] = {"prep", "embed", "mlp", "train", "loader", "oracle", "link"};
            for (int b = 0; b < 7; b++) {
                char cmd[64];
                snprintf(cmd, sizeof cmd, "bench %s", benches[b]);
                CHECK(run("%s --help", cmd) == 0, "rectrain %s --help", cmd);
                snprintf(help, sizeof help, "%s", out);
                options += cover(cmd, help);
                commands++;
            }
            continue;
        }
        CHECK(run("%s --help", name) == 0, "rectrain %s --help", name);
        snprintf(help, sizeof help, "%s", out);
        options += cover(name, help);
        commands++;
    }
    CHECK(run("train --oracle-cacher x --help") == 0, "train --oracle-cacher --help");
    snprintf(help, sizeof help, "%s", out);
    options += cover("train", help);
    printf("guard: %d file options of %d commands listed\n", options, commands);
    CHECK(commands >= 20 && options >= 40, "%d commands, %d file options: the --help parser found too few", commands,
          options);
}

/* Spellings and shapes the enumeration does not reach: a link, ./ and ../, a file inside an
 * output folder, a checkpoint folder holding the data, two outputs on one file, a prefix. */
static void test_shapes(void) {
    CHECK(symlink(path("std.rshard"), path("link.rshard")) == 0, "symlink");
    CHECK(link(path("std.rshard"), path("hard.rshard")) == 0, "hard link");
    CHECK(mkdir(path("sub"), 0755) == 0, "mkdir sub");
    static const char *const outs[] = {"link.rshard", "hard.rshard", "./std.rshard", "sub/../std.rshard"};
    for (int k = 0; k < 4; k++)
        CHECK(run("train --data std.rshard --steps 1 --loss-log %s", outs[k]) == 1 &&
                  strstr(out, "which is --data std.rshard, an input of this command"),
              "--loss-log %s: %s", outs[k], out);
    const uint64_t h = hash_file("std.rshard");
    CHECK(mkdir(path("PL"), 0755) == 0, "mkdir PL");
    copy("std.rshard", "PL/loss.png");
    CHECK(run("train --data PL/loss.png --steps 1 --plot PL") == 1 && strstr(out, "would write PL/loss.png"),
          "--plot DIR holding the data: %s", out);
    CHECK(run("train --data PL/loss.png --steps 1 --npy PL") == 1 && strstr(out, "--npy PL would write PL"),
          "--npy DIR holding the data: %s", out);
    CHECK(run("train --data PL/loss.png --steps 1 --plot PL/nd/..") == 1 && strstr(out, "which is --data PL/loss.png"),
          "--plot through a folder to be made, then ..: %s", out);
    CHECK(run("train --data std.rshard --steps 1 --metrics x.jsonl --loss-log ./x.jsonl") == 1 &&
              strstr(out, "would both write"), "--metrics = --loss-log: %s", out);
    CHECK(run("train --data std.rshard --steps 1 --plot Q --loss-log Q/eval.png") == 1 && strstr(out, "would both write"),
          "--loss-log in --plot's files: %s", out);
    CHECK(run("train --data std.rshard --steps 1 --npy Q --plot Q/charts") == 1 && strstr(out, "would both write"),
          "--plot inside --npy: %s", out);
    CHECK(run("train --data std.rshard --steps 1 --loss-log std.rshard.tmp --ckpt std.rshard.d") == 0,
          "unrelated names pass: %s", out);
    copy("std.rshard", "out.rshard.tmp");
    CHECK(run("prep --spec spec.json --in out.rshard.tmp --out out.rshard") == 1 && strstr(out, "out.rshard.tmp"),
          "an input that is the output's temp file: %s", out);
    CHECK(run("train --data std.rshard --steps 1 --plot R --tensorboard R --metrics R/run.jsonl") == 0,
          "charts and events in one folder pass: %s", out);
    setenv("REC_OFFLOAD_STORE", path("store.json"), 1); /* auto offloading's store, by default */
    CHECK(run("train --data raw.tsv --spec spec.json --workers @workers.txt --steps 1 --loss-log store.json") == 1 &&
              strstr(out, "which is the default --offload-store"), "--loss-log over the default store: %s", out);
    unsetenv("REC_OFFLOAD_STORE");
    CHECK(hash_file("std.rshard") == h, "a refused command changed std.rshard");
}

/* The guard as a library call: thousands of paths (a glob of day files) are all kept, and a
 * clash among them found; NULL, empty and "-" paths are skipped; checking empties the guard. */
static void test_many(void) {
    static char names[3000][16];
    rec_guard g = {0};
    for (int k = 0; k < 3000; k++) {
        snprintf(names[k], sizeof names[k], "day_%d.tsv", k);
        rec_guard_in(&g, "--in", names[k]);
    }
    rec_guard_out(&g, "--out", "./day_2999.tsv");
    CHECK_ERR(rec_guard_check(&g), REC_EINVAL, "--out ./day_2999.tsv would write ./day_2999.tsv, which is --in day_2999.tsv");
    CHECK(g.n == 0 && g.e == NULL, "the check empties the guard (%d kept)", g.n);
    rec_guard h = {0};
    rec_guard_in(&h, "--data", NULL);
    rec_guard_out(&h, "--out", "-"); /* stdout */
    rec_guard_out(&h, "--prob-out", "");
    CHECK(h.n == 0 && rec_guard_check(&h) == REC_OK, "NULL, empty and - are skipped (%d kept)", h.n);
}

/* ---- outputs that are not regular files ----------------------------------------------------
 * Every output of every command is given (1) a copy of /dev/null: it is written into and is
 * the same device afterwards, never renamed over (a .tmp-then-rename write would leave a
 * regular file where the device was, and every program on the machine would write into it),
 * and no NAME.tmp is left; (2) a copy of /dev/full: exit 1 naming it, a write error never
 * lost. A folder output (and export's ONNX file, which exists) is refused naming the device.
 * The copies are made with mknod in the scratch folder, so that a binary that renames over
 * them cannot reach the machine's own /dev/null and /dev/full. */
typedef struct wcase {
    const char *cmd, *flag; /* the command and its output option, as in CASES */
    const char *line;       /* the command line, %s where the output goes */
    const char *name;       /* the output's name (an extension some commands ask for) */
    int refused;            /* a folder output, or a file the command does not replace unasked */
} wcase;

static const wcase WRITES[] = {
    {"gen", "--out", "gen --rows 100 --out %s", "w.tsv", 0},
    {"gen", "--prob-out", "gen --rows 100 --out g.tsv --prob-out %s", "w.prob", 0},
    {"prep", "--out", "prep --spec spec.json --in raw.tsv --out %s", "w.rshard", 0},
    {"train", "--loss-log", "train --data std.rshard --steps 2 --loss-log %s", "w.txt", 0},
    {"train", "--metrics", "train --data std.rshard --steps 2 --metrics %s", "w.jsonl", 0},
    {"train", "--ckpt", "train --data std.rshard --steps 2 --ckpt %s", "wk", 1},
    {"train", "--npy", "train --data std.rshard --steps 2 --npy %s", "wn", 1},
    {"train", "--plot", "train --data std.rshard --steps 2 --plot %s", "wp", 1},
    {"train", "--tensorboard", "train --data std.rshard --steps 2 --tensorboard %s", "wt", 1},
    {"predict", "--out", "predict --ckpt K --data raw.tsv --spec spec.json --out %s", "w.tsv", 0},
    {"predict", "--feed-out", "predict --ckpt K --data raw.tsv --spec spec.json --out p.tsv --feed-out %s", "w.bin", 0},
    {"plot", "--out", "plot --metrics m.jsonl --out %s", "wd", 1},
    {"plot", "--out", "plot --table t.tsv --out %s", "w.png", 0},
    {"export", "--out", "export --ckpt K --out %s", "we", 1},
    {"export", "--out", "export --ckpt K --format onnx --out %s", "w.onnx", 1},
    {"plan", "--out", "plan --data std.rshard --ranks 2 --out %s", "w.json", 0},
    {"cluster", "--loss-log", "cluster cluster.json --loss-log %s", "w.txt", 0},
    {"cluster", "--ckpt", "cluster cluster.json --ckpt %s", "wc", 1},
    {"cluster", "--npy", "cluster cluster.json --npy %s", "wcn", 1},
    {"keygen", "--out", "keygen --out %s", "wkeys", 1},
};

/* Outputs of CASES that WRITES does not run, each with why. */
static const struct {
    const char *cmd, *flag, *why;
} NOT_RUN[] = {
    {"train", "--corun-capacity", "GPU only; written by rec_json_write, as plan --out is"},
    {"train", "--offload-store", "needs prep-workers; written by rec_atomic_open, as prep --out is"},
    {"train", "--plan", "written when the tuner ends, hundreds of steps in; by rec_atomic_fopen, as plan --out"},
    {"plan", "--chart", "a prefix: PREFIX-N.png, files of their own"},
    {"bench prep", "--latencies", "GPU only; written by rec_atomic_fopen, as plan --out is"},
};

static int is_char_device(const char *name) {
    struct stat st;
    return lstat(path(name), &st) == 0 && S_ISCHR(st.st_mode);
}

/* One output given one device (minor 3: null, 7: full); 0 when mknod is refused here. */
static int try_device(const wcase *w, unsigned minor) {
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%s.tmp", w->name);
    unlink(path(w->name));
    if (mknod(path(w->name), S_IFCHR | 0666, makedev(1, minor)) != 0) return 0;
    char line[512];
    snprintf(line, sizeof line, w->line, w->name);
    const int rc = run("%s", line);
    const int full = minor == 7;
    if (w->refused || full)
        CHECK(rc == 1 && strstr(out, w->name), "rectrain %s (a copy of /dev/%s): rc %d, want 1 naming %s: %s", line,
              full ? "full" : "null", rc, w->name, out);
    else
        CHECK(rc == 0, "rectrain %s (a copy of /dev/null): rc %d: %s", line, rc, out);
    CHECK(is_char_device(w->name), "rectrain %s replaced the device %s with a %s", line, w->name,
          access(path(w->name), F_OK) ? "nothing" : "regular file");
    CHECK(access(path(tmp), F_OK) != 0, "rectrain %s left %s", line, tmp);
    unlink(path(w->name));
    return 1;
}

static void test_devices(void) {
    int n = 0;
    for (size_t k = 0; k < sizeof WRITES / sizeof WRITES[0]; k++)
        for (unsigned minor = 3; minor <= 7; minor += 4) n += try_device(&WRITES[k], minor);
    if (!n) {
        printf("devices: mknod refused here (not root?): outputs on devices not checked\n");
        return;
    }
    printf("devices: %d outputs given a null and a full device\n", n / 2);
    /* every output of CASES is run above or said why not */
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++)
        for (int a = 0; a < 24 && CASES[c].a[a].flag; a++) {
            const arg *x = &CASES[c].a[a];
            if (x->role != OUT && x->role != INOUT && x->role != PREFIX) continue;
            int found = 0;
            for (size_t k = 0; k < sizeof WRITES / sizeof WRITES[0]; k++)
                found |= !strcmp(WRITES[k].cmd, CASES[c].cmd) && !strcmp(WRITES[k].flag, x->flag);
            for (size_t k = 0; k < sizeof NOT_RUN / sizeof NOT_RUN[0]; k++)
                found |= !strcmp(NOT_RUN[k].cmd, CASES[c].cmd) && !strcmp(NOT_RUN[k].flag, x->flag);
            CHECK(found, "%s %s: an output neither in WRITES nor in NOT_RUN (tests/test_guard.c)", CASES[c].cmd,
                  x->flag);
        }
}

/* What a command prints to standard output (a report, --json, rows to '-') on a full device:
 * exit 1, said on standard error. */
static void test_stdout_full(void) {
    static const char *const lines[] = {
        "train --data std.rshard --steps 2 --json", "eval --ckpt K --data std.rshard --json", "inspect std.rshard",
        "predict --ckpt K --data raw.tsv --spec spec.json --out -", "gen --rows 100 --out -",
        "plan --data std.rshard --ranks 2", "--help"};
    unlink(path("full"));
    if (mknod(path("full"), S_IFCHR | 0666, makedev(1, 7)) != 0) {
        printf("stdout: mknod refused here (not root?): not checked\n");
        return;
    }
    for (size_t k = 0; k < sizeof lines / sizeof lines[0]; k++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "cd %s && REC_PROGRESS=0 %s %s >full 2>err.txt", dir, cli, lines[k]);
        const int st = system(cmd);
        read_out("err.txt");
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1 && (strstr(out, "standard output") || strstr(out, "/proc/self/fd/1")),
              "rectrain %s >/dev/full: status %d, want 1 naming standard output: %s", lines[k], st, out);
    }
    CHECK(is_char_device("full"), "the shell's redirection kept the device");
}

/* '-' is standard output for gen --out and predict --out and nothing else: an option that
 * reads or writes a file refuses it (it had read or written a file named '-'). */
static void test_dash(void) {
    static const char *const lines[] = {"predict --ckpt K --data - --spec spec.json --out p.tsv",
                                        "prep --spec spec.json --in - --out o.rshard",
                                        "prep --spec spec.json --in raw.tsv --out -",
                                        "train --data std.rshard --steps 1 --loss-log -",
                                        "gen --rows 10 --out g.tsv --prob-out -", "plan --data std.rshard --ranks 2 --out -"};
    for (size_t k = 0; k < sizeof lines / sizeof lines[0]; k++)
        CHECK(run("%s", lines[k]) == 2 && strstr(out, "'-' is not standard input or output here"),
              "rectrain %s: want a usage error on '-': %s", lines[k], out);
    CHECK(access(path("-"), F_OK) != 0, "a file named '-' was made");
    CHECK(run("gen --rows 10 --seed 3 --out g.tsv") == 0, "gen: %s", out);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cd %s && %s gen --rows 10 --seed 3 --out - 2>/dev/null > g2.tsv", dir, cli);
    CHECK(system(cmd) == 0 && same_file("g.tsv", "g2.tsv"), "gen --out - writes the rows --out FILE writes");
    CHECK(access(path("-"), F_OK) != 0, "gen --out - made a file named '-'");
    CHECK(run("gen --rows 10 --out - --json") == 2 && strstr(out, "--json prints to standard output"),
          "gen --out - --json: %s", out);
}

int main(void) {
    int rc = clirun_setup("test_guard");
    if (rc) return rc;
    if (make_fixtures()) {
        clirun_cleanup();
        CHECK(0, "fixtures");
        return check_report();
    }
    test_many();
    test_enumerate();
    test_coverage();
    test_shapes();
    test_devices();
    test_stdout_full();
    test_dash();
    clirun_cleanup();
    return check_report();
}

/* The CLI end to end: gen -> prep -> inspect on small data, exactly as a user runs it,
 * including exit codes (0 ok, 1 runtime error, 2 usage error) and the messages of the
 * rejection paths that only the command line reaches (bad rows in a file, --bad-rows skip,
 * --vocab-from, gzip input, truncated shards, bad specs, dense values a spec makes non-finite),
 * and Ctrl-C during prep and gen (no partial output left).
 * Skipped (77) when REC_CLI, the
 * path of the built `rectrain`, is not set (CTest sets it). */
#define _GNU_SOURCE /* strcasestr */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "clirun.h"
#include "rectrain/core.h"
#include "rectrain/prep.h"
#include "rectrain/shard.h"

/* Copies the first `lines` lines of `from` to `to`, replacing line `bad_line` (1-based, 0 =
 * none) with `bad_text`. */
static void copy_lines(const char *from, const char *to, int lines, int bad_line, const char *bad_text) {
    FILE *in = fopen(path(from), "rb"), *o = fopen(path(to), "wb");
    static char line[1 << 16];
    for (int i = 1; in && o && i <= lines && fgets(line, sizeof line, in); i++)
        fputs(i == bad_line ? bad_text : line, o);
    if (in) fclose(in);
    if (o) fclose(o);
}

static void gzip_file(const char *from, const char *to) {
    FILE *in = fopen(path(from), "rb");
    gzFile o = gzopen(path(to), "wb");
    static char buf[1 << 16];
    size_t n;
    while (in && o && (n = fread(buf, 1, sizeof buf, in)) > 0) gzwrite(o, buf, (unsigned)n);
    if (in) fclose(in);
    if (o) gzclose(o);
}

static void test_pipeline(void) {
    const int N = 20000;
    CHECK(run("gen --rows 20k --scale 0.01 --seed 5 --out train.tsv --prob-out train.prob --json") == 0,
          "gen: %s", out);
    CHECK(json_num("rows") == N, "gen --json rows");
    long prob_lines = file_size("train.prob");
    CHECK(prob_lines == (long)N * 9, "prob file: one \"0.xxxxxx\\n\" per row (%ld bytes)", prob_lines);

    CHECK(run("prep --spec %s/configs/criteo_standard.json --in train.tsv --out std.rshard --json", src) == 0,
          "prep: %s", out);
    CHECK(json_num("rows") == N && json_num("passes") == 1, "prep --json: %s", out);
    CHECK(run("inspect std.rshard --verify --json") == 0, "inspect: %s", out);
    CHECK(json_num("rows") == N, "inspect rows");
    CHECK(strstr(out, "\"verified\": true") != NULL, "inspect --verify: %s", out);

    /* Same shard bytes with 1 thread, and from a .gz of the same text. */
    CHECK(run("prep --spec %s/configs/criteo_standard.json --in train.tsv --out std1.rshard --threads 1", src) == 0,
          "prep 1 thread: %s", out);
    CHECK(same_file("std.rshard", "std1.rshard"), "shards from 1 and 2 threads differ");
    gzip_file("train.tsv", "train.tsv.gz");
    CHECK(run("prep --spec %s/configs/criteo_standard.json --in train.tsv.gz --out gz.rshard", src) == 0,
          "prep gz: %s", out);
    CHECK(same_file("std.rshard", "gz.rshard"), "shard from .gz differs from the plain one");

    /* Vocabularies: train builds them (2 passes); the test split reuses them. */
    CHECK(run("prep --spec %s/configs/criteo_vocab.json --in train.tsv --out voc.rshard --json", src) == 0,
          "prep vocab: %s", out);
    CHECK(json_num("passes") == 2, "categorify takes a counting pass");
    CHECK(run("gen --rows 3000 --scale 0.01 --seed 6 --test-format --out test.tsv") == 0, "gen test: %s", out);
    CHECK(run("prep --spec %s/configs/criteo_vocab.json --in test.tsv --out test.rshard --vocab-from voc.rshard --json",
              src) == 0, "prep --vocab-from: %s", out);
    CHECK(json_num("passes") == 1 && json_num("rows") == 3000, "reused vocabularies: %s", out);
    CHECK(run("inspect test.rshard --json") == 0 && strstr(out, "\"has_label\": false"), "test shard: %s", out);
    CHECK(run("prep --spec %s/configs/criteo_vocab.json --in test.tsv --out x.rshard --vocab-from std.rshard", src) == 1 &&
              strstr(out, "vocabularies"), "--vocab-from a shard without them: %s", out);
    /* A spec whose C1 reads column C2: vocabulary 0 of voc.rshard would map C2's ids. */
    char spec_path[600];
    snprintf(spec_path, sizeof spec_path, "%s/configs/criteo_vocab.json", src);
    FILE *in = fopen(spec_path, "rb"), *rw = fopen(path("rewired.json"), "wb");
    static char text[1 << 16];
    const size_t tl = in ? fread(text, 1, sizeof text - 1, in) : 0;
    text[tl] = 0;
    char *c1 = strstr(text, "\"input\": \"C1\"");
    CHECK(c1 != NULL, "criteo_vocab.json reads C1");
    if (c1) c1[strlen("\"input\": \"C")] = '2';
    if (rw) fputs(text, rw);
    if (in) fclose(in);
    if (rw) fclose(rw);
    CHECK(run("prep --spec rewired.json --in test.tsv --out x.rshard --vocab-from voc.rshard") == 1 &&
              strstr(out, "voc.rshard: vocabulary 0 was counted by spec 'criteo_vocab' from other raw columns, ops or "
                          "min_count than spec rewired.json categorifies feature 'C1' with") &&
              file_size("x.rshard") < 0,
          "--vocab-from a shard of another spec: %s", out);

    /* The RAP plan (every operator) runs end to end. */
    CHECK(run("prep --spec %s/configs/criteo_rap.json --in train.tsv --out rap.rshard --explain", src) == 0 &&
              strstr(out, "fused groups"), "prep rap: %s", out);

    /* inspect of the raw TSV */
    CHECK(run("inspect train.tsv --json") == 0 && json_num("rows") == N, "inspect tsv: %s", out);
}

static void test_bad_rows(void) {
    char bad[64] = "1\t2\tx3"; /* I2 is not a number; every other field empty */
    for (int i = 0; i < 37; i++) strcat(bad, "\t");
    strcat(bad, "\n");
    copy_lines("train.tsv", "bad.tsv", 100, 5, bad);
    CHECK(run("prep --spec %s/configs/criteo_standard.json --in bad.tsv --out bad.rshard", src) == 1,
          "bad row fails: %s", out);
    CHECK(strstr(out, "bad.tsv:5: field I2") != NULL, "message names file:line:field: %s", out);
    CHECK(file_size("bad.rshard") < 0 && file_size("bad.rshard.tmp") < 0, "no shard left behind");
    CHECK(run("prep --spec %s/configs/criteo_standard.json --in bad.tsv --out bad.rshard --bad-rows skip --json",
              src) == 0, "skip: %s", out);
    CHECK(json_num("rows") == 99 && json_num("bad_rows") == 1, "99 rows kept, 1 skipped: %s", out);
    CHECK(strstr(out, "skipped 1 malformed row") && strstr(out, "bad.tsv:5: field I2"), "skip report: %s", out);

    /* issue 61: one line of 1000 cut to 30 fields is a broken row of a train-format file, not
     * a stripped copy (whose --short-rows missing would score it as data): named, and dropped
     * by --bad-rows skip */
    char cut[128] = "0";
    for (int i = 1; i < 30; i++) strcat(cut, "\t5");
    strcat(cut, "\n");
    copy_lines("train.tsv", "cut.tsv", 1000, 500, cut);
    CHECK(run("prep --spec %s/configs/criteo_standard.json --in cut.tsv --out cut.rshard", src) == 1 &&
              strstr(out, "cut.tsv:500: expected 40 tab-separated fields (train format), found 30") &&
              strstr(out, "--bad-rows skip drops such rows") && !strstr(out, "looks like a labelled file stripped"),
          "a row cut short among 40-field rows: %s", out);
    CHECK(run("prep --spec %s/configs/criteo_standard.json --in cut.tsv --out cut.rshard --bad-rows skip --json", src) == 0 &&
              json_num("rows") == 999 && json_num("bad_rows") == 1 && strstr(out, "cut.tsv:500"),
          "--bad-rows skip drops the row cut short: %s", out);

    /* truncated last line (too few fields, no newline) */
    copy_lines("train.tsv", "trunc.tsv", 10, 0, NULL);
    FILE *f = fopen(path("trunc.tsv"), "ab");
    fputs("0\t1\t2\t3", f);
    fclose(f);
    CHECK(run("prep --spec %s/configs/criteo_standard.json --in trunc.tsv --out t.rshard", src) == 1 &&
              strstr(out, "trunc.tsv:11") && strstr(out, "truncated last line"), "truncated last line: %s", out);
}

/* A Criteo line: label 1, I2 = `i2`, every other integer 5, every categorical 1a2b3c4d. */
static void fixed_line(char *buf, size_t cap, const char *i2) {
    snprintf(buf, cap, "1\t5\t%s", i2);
    for (int c = 2; c < 13; c++) strncat(buf, "\t5", cap - strlen(buf) - 1);
    for (int c = 0; c < 26; c++) strncat(buf, "\t1a2b3c4d", cap - strlen(buf) - 1);
    strncat(buf, "\n", cap - strlen(buf) - 1);
}

/* A spec whose dense operators make a non-finite value from valid input (criteo_standard
 * without its clamps: log1p of I2 = -2 is nan, of -1 -inf) is refused at the line, naming
 * the feature and the fix, and leaves no shard; `inspect` counts such values in a shard
 * that holds them (written through the library, which stores any bits). */
static void test_nonfinite(void) {
    char std[600], *text = NULL;
    size_t len = 0;
    snprintf(std, sizeof std, "%s/configs/criteo_standard.json", src);
    CHECK(rec_read_file(std, "spec", 1 << 20, &text, &len) == REC_OK, "read %s", std);
    if (!text) return;
    FILE *f = fopen(path("noclamp.json"), "wb");
    const char *clamp = "{\"op\": \"clamp\", \"min\": 0}, ";
    for (const char *p = text, *q; p < text + len; p = q + strlen(clamp)) { /* drop every clamp */
        q = strstr(p, clamp);
        if (!q) q = text + len;
        fwrite(p, 1, (size_t)(q - p), f);
        if (q == text + len) break;
    }
    fclose(f);
    free(text);
    for (int inf = 0; inf < 2; inf++) {
        char line[1024];
        f = fopen(path("neg.tsv"), "wb");
        for (int l = 1; l <= 6; l++) {
            fixed_line(line, sizeof line, l == 5 ? (inf ? "-1" : "-2") : "3");
            fputs(line, f);
        }
        fclose(f);
        CHECK(run("prep --spec noclamp.json --in neg.tsv --out neg.rshard") == 1, "non-finite dense: %s", out);
        CHECK(strstr(out, "neg.tsv: line 5: spec noclamp.json makes dense feature 'I2'") &&
                  strstr(out, inf ? "-inf" : "nan") && strstr(out, "clamp at 0 before log1p"),
              "the message names line, feature, value and fix: %s", out);
        CHECK(file_size("neg.rshard") < 0 && file_size("neg.rshard.tmp") < 0, "no shard left behind");
    }
    CHECK(run("prep --spec noclamp.json --in neg.tsv --out neg.rshard --bad-rows skip") == 1 &&
              strstr(out, "neg.tsv: output row 4: spec noclamp.json makes dense feature 'I2' -inf"),
          "--bad-rows skip: rows, not lines: %s", out);
    CHECK(run("prep --spec %s --in neg.tsv --out neg.rshard", std) == 0, "the clamped spec: %s", out);
    CHECK(run("train --data neg.tsv --spec noclamp.json --holdout 0.5 --steps 1") == 1 &&
              strstr(out, "neg.tsv: row 4: dense value 1 is -inf, not a finite number"),
          "train on the fly refuses it too: %s", out);

    rec_spec *spec = NULL;
    rec_shard_writer *w = NULL;
    rec_batch b;
    const char *json = "{\"format\": \"rectrain-prep\", \"version\": 1, \"name\": \"nan\", \"tables\": "
                       "{\"C1\": {\"rows\": 10}}, \"dense\": [{\"name\": \"I1\", \"input\": \"I1\", \"ops\": "
                       "[{\"op\": \"fill_null\", \"value\": 0}, {\"op\": \"cast\", \"to\": \"f32\"}]}], \"sparse\": "
                       "[{\"name\": \"C1\", \"input\": \"C1\", \"table\": \"C1\", \"ops\": [{\"op\": \"fill_null\", "
                       "\"value\": 0}, {\"op\": \"modulo\", \"divisor\": 10}]}]}";
    int ok = rec_spec_parse(&spec, json, strlen(json), "nan spec") == REC_OK &&
             rec_shard_writer_open(&w, path("nan.rshard"), spec, NULL, 1, 0) == REC_OK &&
             rec_batch_init(&b, 8, 1, 1, 1) == REC_OK;
    CHECK(ok, "a shard with nan: %s", rec_errmsg());
    if (ok) {
        b.n = 8;
        b.sparse[0].offsets[0] = 0;
        for (int r = 0; r < 8; r++) {
            b.label[r] = (float)(r % 2);
            b.dense[r] = r == 3 || r == 6 ? NAN : (float)r;
            b.sparse[0].ids64[r] = r;
            b.sparse[0].offsets[r + 1] = r + 1;
        }
        CHECK(rec_shard_writer_append(w, &b) == REC_OK && rec_shard_writer_close(w) == REC_OK, "write: %s", rec_errmsg());
        rec_batch_free(&b);
        CHECK(run("inspect nan.rshard --json") == 0 && strstr(out, "1 values per row, 2 not finite (the first: row 3, value 0)") &&
                  strstr(out, "\"dense_nonfinite\": 2"),
              "inspect counts them: %s", out);
    } else if (w) {
        rec_shard_writer_abort(w);
    }
    rec_spec_free(spec);
}

/* A file a command writes is never one it reads, whatever the spelling: prep's --out against
 * --in (same path, ./ and a link), --vocab-from and --spec; gen's --prob-out against --out
 * (neither existing yet); train's --loss-log, --plan (with --tune) and --ckpt against its
 * inputs, and --tune never overwrites a --plan file that is not a plan. Each refusal leaves
 * every file as it was. Needs train.tsv and std.rshard from test_pipeline. */
static void test_same_files(void) {
    const char *std = "--spec %s/configs/criteo_standard.json";
    char spec[600];
    snprintf(spec, sizeof spec, std, src);
    copy_lines("train.tsv", "raw.tsv", 50, 0, NULL);
    const long raw = file_size("raw.tsv");
    CHECK(symlink(path("raw.tsv"), path("raw_link.tsv")) == 0, "symlink");
    static const char *outs[3] = {"raw.tsv", "./raw.tsv", "raw_link.tsv"};
    for (int i = 0; i < 3; i++) {
        CHECK(run("prep %s --in raw.tsv --out %s", spec, outs[i]) == 1 &&
                  strstr(out, "which is --in raw.tsv, an input of this command; give --out another path"),
              "prep --out %s: %s", outs[i], out);
        CHECK(file_size("raw.tsv") == raw, "prep --out %s changed the input", outs[i]);
    }
    CHECK(run("prep %s --in raw.tsv --out std.rshard --vocab-from std.rshard", spec) == 1 &&
              strstr(out, "--out std.rshard would write std.rshard, which is --vocab-from std.rshard"),
          "prep --out = --vocab-from: %s", out);
    FILE *sf = fopen(path("myspec.json"), "wb");
    if (sf) fputs("{}", sf), fclose(sf);
    CHECK(run("prep --spec myspec.json --in raw.tsv --out myspec.json") == 1 &&
              strstr(out, "--out myspec.json would write myspec.json, which is --spec myspec.json"),
          "prep --out = --spec: %s", out);
    CHECK(run("gen --rows 10 --out g.tsv --prob-out ./g.tsv") == 1 &&
              strstr(out, "--out g.tsv and --prob-out ./g.tsv would both write g.tsv") && file_size("g.tsv") < 0,
          "gen --prob-out = --out: %s", out);
    const long shard = file_size("std.rshard");
    CHECK(run("train --data std.rshard --holdout 0.5 --steps 1 --loss-log std.rshard") == 1 &&
              strstr(out, "--loss-log std.rshard would write std.rshard, which is --data std.rshard"),
          "train --loss-log = --data: %s", out);
    CHECK(run("train --data std.rshard --holdout 0.5 --steps 1 --tune --plan ./std.rshard") == 1 &&
              strstr(out, "--plan ./std.rshard would write ./std.rshard, which is --data std.rshard"),
          "train --plan = --data: %s", out);
    CHECK(run("train --data std.rshard --holdout 0.5 --steps 1 --tune --plan raw.tsv") == 1 &&
              strstr(out, "raw.tsv: $.format: not a rectrain embedding plan") && strstr(out, "--tune would overwrite it"),
          "train --tune --plan NOT-A-PLAN: %s", out);
    CHECK(file_size("std.rshard") == shard && file_size("raw.tsv") == raw, "a refused train changed a file");
    CHECK(mkdir(path("ck"), 0755) == 0, "mkdir ck");
    copy_lines("train.tsv", "ck/model.rckpt", 50, 0, NULL);
    CHECK(run("train --data ck/model.rckpt %s --holdout 0.5 --steps 1 --ckpt ck", spec) == 1 &&
              strstr(out, "--ckpt ck would write ck/model.rckpt, which is --data ck/model.rckpt"),
          "train --ckpt DIR holding the data: %s", out);
}

/* JSON has no nan or inf: a metric that is undefined (the AUC of a one-row evaluation set,
 * whose rows are all of one class) is null in --json. Needs raw.tsv from test_same_files. */
static void test_json_undefined(void) {
    const int rc = run("train --data raw.tsv --spec %s/configs/criteo_standard.json --holdout 0.02 --steps 1 --json", src);
    const char *j = strstr(out, "{\"model\"");
    CHECK(rc == 0 && j && strstr(j, "\"eval_rows\": 1, \"auc\": null") && !strstr(j, "nan") && !strstr(j, "inf"),
          "undefined metrics are null in --json: %s", out);
    /* inspect of a file of no rows: rates and ranges are undefined, "-" in the text and null
     * in the JSON, not 0 (which would read as "never missing" and "all zero"); prep says that
     * the shard it wrote holds no rows. */
    FILE *f = fopen(path("none.tsv"), "w");
    if (f) fclose(f);
    CHECK(run("inspect none.tsv --json") == 0 && strstr(out, "label      rate -\n") &&
              strstr(out, "  I1               -                    -                    -            0\n") &&
              strstr(out, "\"label_rate\": null") && strstr(out, "{\"name\": \"I1\", \"missing_rate\": null, \"min\": null, "
                                                         "\"max\": null, \"negatives\": 0}"),
          "inspect of an empty TSV: %s", out);
    CHECK(run("prep --spec %s/configs/criteo_standard.json --in none.tsv --out none.rshard", src) == 0 &&
              strstr(out, "warning: none.tsv holds no rows") && run("inspect none.rshard --json") == 0 &&
              strstr(out, "label      rate -\n") && strstr(out, "\"label_rate\": null"),
          "prep and inspect of no rows: %s", out);
}

/* An output that cannot be written fails before the work it would keep: prep's shard before
 * a categorify spec's counting pass, train's --npy directory before training (the loss log,
 * opened when training starts, is never made). Needs raw.tsv from test_same_files. */
static void test_outputs_first(void) {
    CHECK(run("prep --spec %s/configs/criteo_vocab.json --in raw.tsv --out nodir/x.rshard", src) == 1 &&
              strstr(out, "nodir/x.rshard.tmp: cannot create") && strstr(out, "before reading the input"),
          "prep into a missing folder: %s", out);
    FILE *f = fopen(path("plain"), "wb");
    if (f) fclose(f);
    CHECK(run("train --data raw.tsv --spec %s/configs/criteo_standard.json --holdout 0.5 --npy plain/npy --loss-log o.log",
              src) == 1 && strstr(out, "cannot create the export directory") && file_size("o.log") < 0,
          "--npy that cannot be made fails before training: %s", out);
    /* An --out that is a directory is refused before the input is read (a missing input is not
     * even opened), for one-pass and two-pass specs alike, and leaves no OUT.tmp. */
    CHECK(mkdir(path("outdir"), 0755) == 0, "mkdir outdir");
    CHECK(run("prep --spec %s/configs/criteo_standard.json --in raw.tsv --out outdir", src) == 1 &&
              strstr(out, "outdir: is a directory; give the path of the file to write (DIR/NAME) (found before reading "
                          "the input") && file_size("outdir.tmp") < 0,
          "prep --out naming a directory: %s", out);
    CHECK(run("prep --spec %s/configs/criteo_vocab.json --in no-such.tsv --out outdir", src) == 1 &&
              strstr(out, "outdir: is a directory") && !strstr(out, "no-such.tsv"),
          "prep --out naming a directory, two-pass spec: %s", out);
}

/* Appends train.tsv to the open stream f, again and again, until `bytes` are written. */
static void feed_bytes(FILE *f, long bytes) {
    static char buf[1 << 16];
    int ok = f != NULL;
    for (long done = 0; ok && done < bytes;) {
        FILE *in = fopen(path("train.tsv"), "rb");
        size_t n;
        ok = in != NULL;
        while (ok && done < bytes && (n = fread(buf, 1, sizeof buf, in)) > 0) {
            ok = fwrite(buf, 1, n, f) == n; /* fails (EPIPE) should prep be gone */
            done += (long)n;
        }
        if (in) fclose(in);
    }
    if (f) fflush(f);
}

/* Ctrl-C during prep: it stops after the chunk in hand, removes its partial output
 * (PATH.tmp) and exits 130. The input is a FIFO this test feeds, so prep is mid-file for
 * sure when the signal comes: it then waits for more input, which the test sends and closes. */
static void test_prep_stop(void) {
    if (mkfifo(path("feed"), 0600) != 0) {
        CHECK(0, "mkfifo: %s", strerror(errno));
        return;
    }
    void (*old)(int) = signal(SIGPIPE, SIG_IGN); /* should prep die, our writes fail instead */
    pid_t pid = spawn("prep --spec %s/configs/criteo_standard.json --in feed --out fed.rshard >fed.out 2>&1", src);
    /* Open our end once prep has opened its own (ENXIO until then); a prep that died first
     * fails the test instead of leaving it blocked in open. */
    int fd = -1, gone = 0;
    for (int i = 0; i < 30000 && fd < 0 && !gone; i++) {
        fd = open(path("feed"), O_WRONLY | O_NONBLOCK);
        if (fd < 0) gone = waitpid(pid, NULL, WNOHANG) == pid, usleep(1000);
    }
    CHECK(fd >= 0, "prep opened the FIFO (%s)", gone ? "prep exited first" : "timed out");
    if (fd < 0) {
        if (!gone) kill(pid, SIGKILL), waitpid(pid, NULL, 0);
        signal(SIGPIPE, old);
        return;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "wb");
    feed_bytes(f, 10L << 20); /* prep reads 8 MiB (or to the end) before it makes its output */
    struct stat st;
    for (int i = 0; i < 30000 && stat(path("fed.rshard.tmp"), &st) != 0; i++) usleep(1000);
    CHECK(stat(path("fed.rshard.tmp"), &st) == 0, "prep made its partial output");
    kill(pid, SIGINT);
    usleep(50000);
    feed_bytes(f, 1L << 20);
    if (f) fclose(f);
    int status = 0;
    waitpid(pid, &status, 0);
    signal(SIGPIPE, old);
    read_out("fed.out");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 130 &&
              strstr(out, "feed: stopped by SIGINT after ") && strstr(out, "the partial output is removed"),
          "prep stopped by SIGINT: status 0x%x: %s", status, out);
    CHECK(stat(path("fed.rshard.tmp"), &st) != 0 && stat(path("fed.rshard"), &st) != 0,
          "no partial output or shard is left after SIGINT");
}

/* Ctrl-C during gen: exit 130, and neither output is left, nor their .tmp files (a partial
 * TSV would prep into fewer rows). 1G rows would take minutes; the signal comes once the
 * first bytes are out. */
static void test_gen_stop(void) {
    pid_t pid = spawn("gen --rows 1G --out big.tsv --prob-out big.prob >gen.out 2>&1");
    for (int i = 0; i < 30000 && file_size("big.tsv.tmp") <= 0; i++) usleep(1000);
    kill(pid, SIGINT);
    int status = 0;
    waitpid(pid, &status, 0);
    read_out("gen.out");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 130 && strstr(out, "big.tsv: stopped by SIGINT after ") &&
              strstr(out, "of 1000000000 rows; the partial output is removed"),
          "gen stopped by SIGINT: status 0x%x: %s", status, out);
    CHECK(file_size("big.tsv") < 0 && file_size("big.prob") < 0 && file_size("big.tsv.tmp") < 0 &&
              file_size("big.prob.tmp") < 0, "no partial output is left after SIGINT");
    /* kill -9 cannot be caught: what it leaves is big.tsv.tmp, never a partial big.tsv. */
    pid = spawn("gen --rows 1G --out big.tsv >/dev/null 2>&1");
    for (int i = 0; i < 30000 && file_size("big.tsv.tmp") <= 0; i++) usleep(1000);
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    CHECK(file_size("big.tsv") < 0 && file_size("big.tsv.tmp") > 0, "after kill -9 only big.tsv.tmp is there");
    unlink(path("big.tsv.tmp"));
}

/* Writes two copies of train.tsv's lines that `pick` keeps, at most `max`: `full` as they are
 * and `stripped` with their trailing tabs (empty last fields) removed, as published Criteo
 * copies sometimes are. pick(line, fields once stripped, index among the kept) -> keep? */
static void strip_copy(const char *full, const char *stripped, int max, int (*pick)(int fields, int kept)) {
    FILE *in = fopen(path("train.tsv"), "rb"), *f = fopen(path(full), "wb"), *st = fopen(path(stripped), "wb");
    static char line[1 << 16];
    int kept = 0;
    while (in && f && st && kept < max && fgets(line, sizeof line, in)) {
        size_t n = strcspn(line, "\n");
        while (n > 0 && line[n - 1] == '\t') n--;
        int fields = 1;
        for (size_t i = 0; i < n; i++) fields += line[i] == '\t';
        if (!pick(fields, kept)) continue;
        fputs(line, f);
        fprintf(st, "%.*s\n", (int)n, line);
        kept++;
    }
    if (in) fclose(in);
    if (f) fclose(f);
    if (st) fclose(st);
}
static int from_start(int fields, int kept) { return (void)fields, 1; }
static int from_short(int fields, int kept) { return kept > 0 || fields < REC_CRITEO_NCOL; }
static int from_39(int fields, int kept) { return kept > 0 || fields == REC_CRITEO_NCOL - 1; }
static int only_39(int fields, int kept) { return (void)kept, fields == REC_CRITEO_NCOL - 1; }

/* Issue 26, item 1: copies stripped of their trailing empty fields. Whatever the first line,
 * detection refuses them (never a shifted test format), the strict reader's message says what
 * keeps their rows, --bad-rows skip refuses to drop ~40% of them, and with --short-rows
 * missing each preps to the shard of the same lines with their tabs. */
static void test_stripped(void) {
    const char *std = "--spec %s/configs/criteo_standard.json";
    char cmd[512];
    static const struct {
        const char *name;
        int (*pick)(int, int);
        int max;
        const char *detect; /* what the refusal of detection says */
    } cases[] = {
        {"first40", from_start, 3000, "have 40 tab-separated fields"},
        {"firstshort", from_short, 3000, "it looks like a labelled file stripped"},
        {"first39", from_39, 3000, "it looks like a labelled file stripped"},
        {"all39", only_39, 300, "field 14 is an int in every line"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const char *n = cases[k].name;
        char full[64], st[64];
        snprintf(full, sizeof full, "%s.tsv", n);
        snprintf(st, sizeof st, "%s.st.tsv", n);
        strip_copy(full, st, cases[k].max, cases[k].pick);
        snprintf(cmd, sizeof cmd, "prep %s --in %s --out %s.st.rshard", std, st, n);
        CHECK(run(cmd, src) == 1 && strstr(out, cases[k].detect) && strstr(out, "stripped of its trailing empty fields") &&
                  strstr(out, "add --short-rows missing"),
              "%s: detection refuses a stripped copy: %s", n, out);
        snprintf(cmd, sizeof cmd, "prep %s --in %s --out %s.rshard", std, full, n);
        CHECK(run(cmd, src) == 0, "%s: prep the whole copy: %s", n, out);
        snprintf(cmd, sizeof cmd, "prep %s --in %s --out %s.st.rshard --short-rows missing", std, st, n);
        char a[64], b[64];
        snprintf(a, sizeof a, "%s.rshard", n);
        snprintf(b, sizeof b, "%s.st.rshard", n);
        CHECK(run(cmd, src) == 0 && same_file(a, b), "%s: --short-rows missing gives the same shard: %s", n, out);
    }
    /* explicit format: the strict reader stops at the first short row and says why */
    CHECK(run("prep --spec %s/configs/criteo_standard.json --in first40.st.tsv --out x.rshard --format train", src) == 1 &&
              strstr(out, "first40.st.tsv:") && strstr(out, "tab-separated fields (train format), found 3") &&
              strstr(out, "--short-rows missing"),
          "a short row with --format train: %s", out);
    /* skipping ~40% of the rows is refused, naming the share and the flag */
    CHECK(run("prep --spec %s/configs/criteo_standard.json --in first40.st.tsv --out x.rshard --format train "
              "--bad-rows skip", src) == 1 &&
              strstr(out, "--bad-rows skip dropped") && strstr(out, "more than --max-bad-share 0.02 allows") &&
              file_size("x.rshard") < 0,
          "skip refuses a biased sample: %s", out);
    CHECK(run("prep --spec %s/configs/criteo_standard.json --in first40.st.tsv --out x.rshard --format train "
              "--bad-rows skip --max-bad-share 0.9 --json", src) == 0 &&
              json_num("bad_share") > 0.3 && json_num("bad_share") < 0.6 && strstr(out, "% of the input)"),
          "skip within --max-bad-share reports the share: %s", out);
    /* the same flags on train's TSV path (its counting pass) */
    CHECK(run("train --data first40.st.tsv --spec %s/configs/criteo_standard.json --format train --bad-rows skip "
              "--steps 1", src) == 1 && strstr(out, "more than --max-bad-share"),
          "train's TSV reader refuses a biased sample: %s", out);
    CHECK(run("train --data first40.st.tsv --spec %s/configs/criteo_standard.json --short-rows missing --holdout 0.1 "
              "--steps 2 --json", src) == 0 && json_num("steps") == 2,
          "train reads a stripped TSV with --short-rows missing: %s", out);
    /* --format test on a labelled file stops at its first 40-field row */
    CHECK(run("prep --spec %s/configs/criteo_standard.json --in first39.st.tsv --out x.rshard --format test", src) == 1 &&
              strstr(out, "found 40"),
          "--format test on a labelled file: %s", out);
}

/* Issue 26, item 2: several input files are one input, read in order: by a comma-separated
 * list, a repeated --in or a glob (version order: part_2 before part_10), the shard equals the
 * one of the concatenated file, for one-pass and two-pass specs; a bad row of the second file
 * is reported with that file and its own line number. */
static void test_input_lists(void) {
    /* train.tsv's first 3000 lines as part_1, part_2 and part_10, and all of them as one file */
    FILE *in = fopen(path("train.tsv"), "rb"), *whole = fopen(path("parts.tsv"), "wb");
    FILE *part[3] = {fopen(path("part_1.tsv"), "wb"), fopen(path("part_2.tsv"), "wb"), fopen(path("part_10.tsv"), "wb")};
    static char line[1 << 16];
    for (int i = 0; in && whole && part[2] && i < 3000 && fgets(line, sizeof line, in); i++) {
        fputs(line, part[i / 1000]);
        fputs(line, whole);
    }
    for (int k = 0; k < 3; k++)
        if (part[k]) fclose(part[k]);
    if (in) fclose(in);
    if (whole) fclose(whole);
    CHECK(run("prep --spec %s/configs/criteo_vocab.json --in parts.tsv --out whole.rshard", src) == 0, "prep: %s", out);
    CHECK(run("prep --spec %s/configs/criteo_vocab.json --in part_1.tsv,part_2.tsv --in part_10.tsv --out list.rshard "
              "--json", src) == 0 && json_num("files") == 3 && same_file("whole.rshard", "list.rshard"),
          "a list and a repeated --in equal the concatenated file: %s", out);
    /* the headline rate is the input's size over the job's time, whatever the passes */
    CHECK(json_num("passes") == 2 &&
              fabs(json_num("mb_per_s") * json_num("seconds") - json_num("bytes") / 1e6) <= 0.05 * json_num("bytes") / 1e6,
          "MB/s of a two-pass prep: %s", out);
    CHECK(run("prep --spec %s/configs/criteo_vocab.json --in 'part_*.tsv' --out glob.rshard", src) == 0 &&
              same_file("whole.rshard", "glob.rshard") && strstr(out, "in 3 files"),
          "a glob, in version order, equals the concatenated file: %s", out);
    CHECK(run("prep --spec %s/configs/criteo_standard.json --in part_1.tsv,part_2.tsv,part_10.tsv --out std.list.rshard",
              src) == 0 &&
              run("prep --spec %s/configs/criteo_standard.json --in parts.tsv --out std.whole.rshard", src) == 0 &&
              same_file("std.whole.rshard", "std.list.rshard"),
          "one-pass spec: %s", out);
    CHECK(run("prep --spec %s/configs/criteo_vocab.json --in 'nomatch_*.tsv' --out x.rshard", src) == 2 &&
              strstr(out, "--in: no file matches 'nomatch_*.tsv'"),
          "a glob matching nothing: %s", out);
    CHECK(run("prep --spec %s/configs/criteo_vocab.json --in part_1.tsv,,part_2.tsv --out x.rshard", src) == 2 &&
              strstr(out, "--in: an empty path in"),
          "an empty list item: %s", out);
    CHECK(run("prep --spec %s/configs/criteo_vocab.json --in part_1.tsv,missing.tsv --out x.rshard", src) == 1 &&
              strstr(out, "missing.tsv: cannot open") && file_size("x.rshard.tmp") < 0,
          "a missing file of the list, before any pass: %s", out);
    copy_lines("part_2.tsv", "bad_2.tsv", 1000, 7, "1\t1\t2\n");
    CHECK(run("prep --spec %s/configs/criteo_standard.json --in part_1.tsv,bad_2.tsv --out x.rshard", src) == 1 &&
              strstr(out, "bad_2.tsv:7: expected 40 tab-separated fields"),
          "a bad row of the second file names it and its own line: %s", out);
    CHECK(run("prep --spec %s/configs/criteo_standard.json --in part_1.tsv,test.tsv --out x.rshard", src) == 1 &&
              strstr(out, "test.tsv is in the test format and ") && strstr(out, "part_1.tsv in the train format"),
          "files of two formats: %s", out);
}

/* Issue 26, item 2 for train and eval (after test_input_lists): shards or TSV files given as a
 * list are one data set: the losses, checkpoint and metrics are those of the shard of the
 * concatenated input, batches spanning the files; shards of other vocabularies, or a mix of
 * shards and TSV, are refused. */
static void test_data_lists(void) {
    const char *std = "--spec %s/configs/criteo_standard.json";
    char cmd[512];
    const char *part[3] = {"part_1", "part_2", "part_10"};
    for (int k = 0; k < 3; k++) {
        snprintf(cmd, sizeof cmd, "prep %s --in %s.tsv --out %s.rshard", std, part[k], part[k]);
        CHECK(run(cmd, src) == 0, "prep %s: %s", part[k], out);
    }
    const char *train = "train --batch 384 --holdout 0.2 --json --threads 1 --ckpt %s --loss-log %s.log --data ";
    snprintf(cmd, sizeof cmd, train, "ck_whole", "whole");
    strcat(cmd, "std.whole.rshard");
    CHECK(run("%s", cmd) == 0, "train on one shard: %s", out);
    const double auc = json_num("auc");
    snprintf(cmd, sizeof cmd, train, "ck_list", "list");
    strcat(cmd, "part_1.rshard,part_2.rshard --data part_10.rshard");
    CHECK(run("%s", cmd) == 0 && json_num("auc") == auc && same_file("whole.log", "list.log") &&
              file_size("whole.log") > 0,
          "train on a list of shards is training on their concatenation: %s", out);
    snprintf(cmd, sizeof cmd, train, "ck_tsv", "tsv");
    strcat(cmd, "'part_*.tsv' --spec ");
    strcat(cmd, src);
    strcat(cmd, "/configs/criteo_standard.json");
    CHECK(run("%s", cmd) == 0 && json_num("auc") == auc && same_file("whole.log", "tsv.log"),
          "train on a list of TSV files: %s", out);
    CHECK(run("eval --ckpt ck_whole --data std.whole.rshard --holdout 0.2 --json") == 0, "eval: %s", out);
    const double eauc = json_num("auc");
    CHECK(run("eval --ckpt ck_whole --data 'part_*.rshard' --holdout 0.2 --json") == 0 && json_num("auc") == eauc &&
              eauc == auc,
          "eval on a list: %s", out);
    /* refusals */
    CHECK(run("prep --spec %s/configs/criteo_vocab.json --in part_1.tsv --out v1.rshard", src) == 0 &&
              run("prep --spec %s/configs/criteo_vocab.json --in part_2.tsv --out v2.rshard", src) == 0,
          "prep with vocabularies: %s", out);
    CHECK(run("train --data v1.rshard,v2.rshard --steps 1") == 1 &&
              strstr(out, "v2.rshard and v1.rshard cannot be one data set: vocabulary 0 maps other ids") &&
              strstr(out, "--vocab-from v1.rshard"),
          "shards of other vocabularies: %s", out);
    CHECK(run("train --data part_1.rshard,v2.rshard --steps 1") == 1 && strstr(out, "cannot be one data set"),
          "shards of other schemas: %s", out);
    CHECK(run("train --data part_1.rshard,part_2.tsv %s --steps 1", std) == 1 &&
              strstr(out, "part_2.tsv is a TSV and part_1.rshard a .rshard"),
          "a shard and a TSV: %s", out);
}

/* docs/criteo.md: the Terabyte recipe hashes ids modulo 40M as
 * facebookresearch/dlrm's --max-ind-range does before counting its vocabularies, so ids 1 and
 * 40000001 share a row; its model config trains on what the spec gives. */
static void test_terabyte_recipe(void) {
    FILE *f = fopen(path("tb.tsv"), "w");
    for (int r = 0; f && r < 3; r++) {
        fprintf(f, "%d", r & 1);
        for (int c = 0; c < REC_CRITEO_NINT; c++) fprintf(f, "\t%d", c + r);
        fprintf(f, "\t%08x", r == 0 ? 1 : r == 1 ? 40000001 : 2);
        for (int c = 1; c < REC_CRITEO_NCAT; c++) fprintf(f, "\t%08x", 0x1000 + c);
        fputc('\n', f);
    }
    if (f) fclose(f);
    CHECK(run("prep --spec %s/configs/criteo_terabyte.json --in tb.tsv --out tb.rshard", src) == 0, "prep: %s", out);
    rec_shard *sh = NULL;
    CHECK(rec_shard_open(&sh, path("tb.rshard")) == REC_OK && rec_shard_get_schema(sh)->sparse[0].table_rows == 3,
          "C1: ids 1, 40000001, 2 hash to two vocabulary entries (+ the unseen row): %lld rows",
          sh ? (long long)rec_shard_get_schema(sh)->sparse[0].table_rows : -1LL);
    rec_shard_close(sh);
    CHECK(run("prep --spec %s/configs/criteo_terabyte.json --in train.tsv --out tbt.rshard", src) == 0, "prep: %s", out);
    CHECK(run("train --config %s/configs/dlrm_terabyte.json --data tbt.rshard --holdout 0.1 --steps 2 --json", src) == 0 &&
              strstr(out, "\"model\": \"dlrm_terabyte\"") && json_num("steps") == 2 && json_num("batch") == 2048,
          "train the Terabyte model: %s", out);
}

/* Starts `embserver --listen EP`, its output to file `log`, and waits up to 30 s (a loaded
 * machine may take seconds to start it) for it to say it listens on ep: its pid, and in `out`
 * its log. */
static pid_t embserver_at(const char *ep, const char *log, int *listening) {
    remove(path(log)); /* not an earlier service's words */
    const pid_t pid = spawn("embserver --listen '%s' > %s 2>&1", ep, log);
    char want[300];
    snprintf(want, sizeof want, "listening on %s\n", ep);
    for (int i = 0; i < 600 && (read_out(log), !strstr(out, want) && !strstr(out, "cannot")); i++) usleep(50 * 1000);
    *listening = strstr(out, want) != NULL;
    return pid;
}

/* Messages that name what a file is and the fix that works (issue 46, rows 11, 15, 17): a
 * checkpoint, an empty file or a JSON document given as data; data from a pipe; an export
 * folder holding other files; a cluster config cut short; data that does not fit a
 * checkpoint's tables; whole numbers in ranges; a port taken; sharding options without
 * mpirun. Needs std.rshard, raw.tsv (test_same_files) and a checkpoint. */
static void test_messages(void) {
    CHECK(run("train --data std.rshard --holdout 0.5 --steps 2 --ckpt mk") == 0, "checkpoint: %s", out);
    CHECK(run("train --data mk/model.rckpt --steps 1") == 1 &&
              strstr(out, "mk/model.rckpt is a rectrain checkpoint, not data: give it as --ckpt"), "ckpt as data: %s", out);
    FILE *f = fopen(path("empty.tsv"), "w");
    if (f) fclose(f);
    CHECK(run("eval --ckpt mk --data empty.tsv") == 1 && strstr(out, "empty.tsv is empty: it holds no rows"),
          "empty data: %s", out);
    CHECK(run("train --data %s/configs/criteo_standard.json --steps 1", src) == 1 &&
              strstr(out, "is a JSON document (a spec, model config or plan?), not data"), "JSON as data: %s", out);
    CHECK(mkfifo(path("pipe.tsv"), 0600) == 0, "mkfifo");
    CHECK(run("predict --ckpt mk --data pipe.tsv --out p.tsv") == 1 &&
              strstr(out, "a data set is read more than once") && !strstr(out, "training"), "predict from a pipe: %s", out);
    CHECK(mkdir(path("ex46"), 0755) == 0, "mkdir ex46");
    copy_lines("raw.tsv", "ex46/notes.txt", 3, 0, NULL);
    CHECK(run("export --ckpt mk --out ex46") == 1 && strstr(out, "holds 'notes.txt' and no rectrain_export.json") &&
              !strstr(out, "--overwrite"), "export over a folder of other files: %s", out);
    f = fopen(path("cut.json"), "w");
    if (f) fputs("{\"format\": \"rectrain-cluster\", \"version\": 1, \"data\": \"std.rsh", f), fclose(f);
    CHECK(run("cluster cut.json") == 1 && strstr(out, "cut.json: not valid JSON near line 1") &&
              strstr(out, "a file cut short?"), "a cluster config cut short: %s", out);
    write_spec("tiny.json", 10, 1);
    CHECK(run("predict --ckpt mk --data raw.tsv --spec tiny.json --out p.tsv") == 1 &&
              strstr(out, "does not fit the checkpoint mk/model.rckpt") &&
              strstr(out, "score rows prepared with the spec the model was trained with") && !strstr(out, "\"tables\""),
          "predict with another spec: %s", out);
    CHECK(run("train --data std.rshard --batch 99999999") == 2 && strstr(out, "[1, 1048576]"), "a range: %s", out);
    CHECK(run("train --data std.rshard --holdout 2") == 2 && strstr(out, "[1e-09, 0.999999]"), "a range: %s", out);
    int up = 0;
    const pid_t srv = embserver_at("tcp://127.0.0.1:5849", "srv.log", &up);
    CHECK(up && run("embserver --listen tcp://127.0.0.1:5849") == 1 && strstr(out, "rectrain embserver: cannot listen on") &&
              !strstr(out, "embserver: embserver:"), "port taken: %s", out);
    kill(srv, SIGTERM);
    waitpid(srv, NULL, 0);
    CHECK(run("train --data std.rshard --steps 1 --plan-shards missing.json") == 1 &&
              strstr(out, "--plan-shards shards the tables across the ranks of an mpirun"), "--plan-shards alone: %s", out);
    CHECK(run("train --data std.rshard --steps 1 --fetch alltoall") == 1 && strstr(out, "--fetch alltoall shards"),
          "--fetch alltoall alone: %s", out);
    CHECK(run("train --data std.rshard --steps 1 --shard-kind row") == 2 && strstr(out, "--shard-kind shards"),
          "--shard-kind alone: %s", out);
}

/* The line of `rectrain --help` (in top) that describes command cmd. */
static void top_line(const char *top, const char *cmd, char *line, size_t cap) {
    char key[32];
    snprintf(key, sizeof key, "\n  %s ", cmd);
    const char *at = strstr(top, key);
    snprintf(line, cap, "%.*s", at ? (int)strcspn(at + 1, "\n") : 0, at ? at + 1 : "");
}

/* Each word of `words` (separated by any of `seps`; "or" and "and" aside) appears in line,
 * case aside; the first missing one into missing. */
static int all_in(const char *words, const char *seps, const char *line, char *missing, size_t cap) {
    char w[64];
    for (const char *p = words; *p;) {
        const size_t n = strcspn(p, seps);
        snprintf(w, sizeof w, "%.*s", (int)n, p);
        if (n && strcmp(w, "or") && strcmp(w, "and") && !strcasestr(line, w)) return snprintf(missing, cap, "%s", w), 0;
        p += n + (p[n] != 0);
    }
    return 1;
}

/* issue 61: `rectrain --help` names what each command's own help does: every benchmark of
 * `bench --help`, every kind of file `inspect --help` describes, every format of `export`. */
static void test_top_help(void) {
    static char top[sizeof out + 2];
    char line[512], words[512], missing[64] = "";
    CHECK(run("--help") == 0, "--help: %s", out);
    snprintf(top, sizeof top, "\n%s", out);
    CHECK(run("bench --help") == 0 && strstr(out, "usage: rectrain bench "), "bench --help: %s", out);
    const char *b = strstr(out, "usage: rectrain bench ");
    snprintf(words, sizeof words, "%.*s", b ? (int)strcspn(b + 22, " ") : 0, b ? b + 22 : "");
    top_line(top, "bench", line, sizeof line);
    CHECK(strchr(words, '|') && all_in(words, "|", line, missing, sizeof missing),
          "bench %s is not in the top help's '%s'", missing, line);
    CHECK(run("inspect --help") == 0 && strstr(out, "Describes "), "inspect --help: %s", out);
    const char *d = strstr(out, "Describes ");
    const char *e = d ? strstr(d, "\n\n") : NULL;
    size_t n = 0; /* the kinds: the sentence's .extensions, and "checkpoint" */
    for (const char *p = d; p && p < e && n + 64 < sizeof words; p++)
        if (*p == '.' && p[1] >= 'a' && p[1] <= 'z' && (p == d || p[-1] == ' ' || p[-1] == '/')) {
            const size_t k = strspn(p, ".abcdefghijklmnopqrstuvwxyz");
            n += (size_t)snprintf(words + n, sizeof words - n, "%.*s ", (int)k, p);
        }
    if (d && strstr(d, "checkpoint") && strstr(d, "checkpoint") < e) snprintf(words + n, sizeof words - n, "checkpoint");
    top_line(top, "inspect", line, sizeof line);
    CHECK(strstr(words, ".rshard") && strstr(words, ".tsv") && all_in(words, " ", line, missing, sizeof missing),
          "inspect's %s is not in the top help's '%s' (kinds: %s)", missing, line, words);
    CHECK(run("export --help") == 0 && strstr(out, "--format F "), "export --help: %s", out);
    const char *f = strstr(out, "--format F ");
    f = f ? f + strlen("--format F") + strspn(f + strlen("--format F"), " ") : NULL;
    snprintf(words, sizeof words, "%.*s", f ? (int)strcspn(f, "(\n") : 0, f ? f : "");
    top_line(top, "export", line, sizeof line);
    CHECK(strstr(words, "onnx") && all_in(words, " ,", line, missing, sizeof missing),
          "export's %s is not in the top help's '%s'", missing, line);
}

/* plan (issue 61): --score checks the plan before it prints anything; sizes in one unit, GB. */
static void test_plan_cli(void) {
    FILE *f = fopen(path("badplan.json"), "w");
    if (f) fputs("{\"table_plans\": {}}\n", f), fclose(f);
    CHECK(run("plan --data std.rshard --ranks 2 --score badplan.json") == 1 &&
              strstr(out, "badplan.json: $.table_plans: no plan for table t0") && !strstr(out, "ranks, global batch") &&
              !strstr(out, "max/mean") && !strstr(out, "\noper "),
          "a refused plan prints no table: %s", out);
    CHECK(run("plan --data std.rshard --ranks 2 --kind table --mem-gb 0.000001") == 1 && strstr(out, "no rank's 1e-06 GB"),
          "--mem-gb GB is the GB printed: %s", out);
    CHECK(run("plan --help") == 0 && strstr(out, "--mem-gb GB") && strstr(out, "GB of 10^9 bytes"), "plan --help: %s", out);
}

/* Whether this machine can bind IPv6 loopback (containers may have no IPv6). */
static int have_ipv6_loopback(void) {
    const int fd = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    const int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0) close(fd);
    return ok;
}

/* --listen on the loopback forms docs/security.md names (issue 61): IPv6 in brackets and a
 * host name bind (a second service on the same endpoint finds its port taken, which is said);
 * a name that does not resolve is said as that, not as a taken port. */
static void test_listen(void) {
    static const char *const eps[] = {"tcp://[::1]:5851", "tcp://localhost:5852", "tcp://127.0.0.1:5853"};
    for (size_t k = 0; k < sizeof eps / sizeof eps[0]; k++) {
        if (k == 0 && !have_ipv6_loopback()) {
            printf("no IPv6 loopback here: %s not tried\n", eps[k]);
            continue;
        }
        int up = 0;
        const pid_t srv = embserver_at(eps[k], "listen.log", &up);
        CHECK(up, "embserver --listen %s: %s", eps[k], out);
        char cmd[1024]; /* bounded: a second service that did bind would serve for ever */
        snprintf(cmd, sizeof cmd, "cd %s && timeout 60 %s embserver --listen '%s' 2>&1", dir, cli, eps[k]);
        CHECK(check_capture(cmd, out, sizeof out) == 1 && strstr(out, "cannot listen on") &&
                  strstr(out, "is the port taken?"), "a second service on %s: %s", eps[k], out);
        kill(srv, SIGTERM);
        waitpid(srv, NULL, 0);
    }
    CHECK(run("embserver --listen tcp://no-such-host.invalid:5854 --insecure") == 1 &&
              strstr(out, "cannot listen on tcp://no-such-host.invalid:5854: its host is no address or interface") &&
              !strstr(out, "port taken"), "a name that does not resolve: %s", out);
}

static void test_errors(void) {
    CHECK(run("prep --in train.tsv --out x.rshard") == 2 && strstr(out, "--spec, --in and --out are required"),
          "missing flags: %s", out);
    CHECK(run("prep --spec s --in a --out b --frobnicate") == 2 && strstr(out, "unknown option '--frobnicate'"),
          "unknown option: %s", out);
    CHECK(run("prep --spec s --in a --out b --bad-rows maybe") == 2 && strstr(out, "--bad-rows must be"),
          "bad --bad-rows: %s", out);
    CHECK(run("gen --rows lots --out x.tsv") == 2 && strstr(out, "--rows needs an integer"), "bad --rows: %s", out);
    CHECK(run("prep --spec a.json --in a --out b --spec b.json") == 2 &&
              strstr(out, "--spec is given twice ('a.json', then 'b.json'); it takes one value"),
          "a repeated single-valued flag: %s", out);
    CHECK(run("train --epochs 1 --epochs 2") == 2 && strstr(out, "--epochs is given twice ('1', then '2')"),
          "a repeated numeric flag: %s", out);
    CHECK(run("frobnicate") == 2, "unknown command: %s", out);
    CHECK(run("inspect nothing-here.rshard") == 1 && strstr(out, "nothing-here.rshard"), "missing file: %s", out);
    CHECK(run("prep --spec nothing.json --in train.tsv --out x.rshard") == 1 && strstr(out, "nothing.json"),
          "missing spec: %s", out);

    FILE *f = fopen(path("bad.json"), "wb");
    fputs("{\"format\":\"rectrain-prep\",\"version\":1,\"dense\":[{\"name\":\"d\",\"input\":\"I1\","
          "\"ops\":[{\"op\":\"log2\"}]}]}", f);
    fclose(f);
    CHECK(run("prep --spec bad.json --in train.tsv --out x.rshard") == 1 && strstr(out, "$.dense[0].ops[0]"),
          "bad spec names the JSON path: %s", out);

    /* A truncated shard is refused, never read. */
    long n = file_size("std.rshard");
    CHECK(n > 0 && truncate(path("std.rshard"), n - 100) == 0, "truncate");
    CHECK(run("inspect std.rshard") == 1 && strstr(out, "truncated"), "truncated shard: %s", out);
    CHECK(run("prep --spec %s/configs/criteo_vocab.json --in test.tsv --out y.rshard --vocab-from std.rshard", src) == 1 &&
              strstr(out, "truncated"), "--vocab-from a truncated shard: %s", out);
}

static void test_bench(void) {
    CHECK(run("bench prep --rows 20k --reps 1 --threads 1 --spec %s/configs/criteo_standard.json --json", src) == 0,
          "bench: %s", out);
    CHECK(json_num("mb_per_s") > 0 && json_num("copy_gb_per_s") > 0, "bench --json: %s", out);
    /* the GPU executor's host side, on any machine */
    CHECK(run("bench prep --rows 20k --reps 1 --threads 1 --multi-hot --host-cost --spec %s/configs/criteo_heavy.json --json",
              src) == 0 && json_num("gexec_host_ms_per_block") > 0 && strstr(out, "kernels and copies free"),
          "bench prep --host-cost: %s", out);
    /* bench loader: the training loader alone, in file order and shuffled (std1.rshard of
     * the first test). */
    CHECK(run("bench loader --data std1.rshard --reps 1 --batch 256 --json") == 0 &&
              strstr(out, "shuffled") && json_num("rows") > 0 && json_num("file_rows_per_s") > 0 &&
              json_num("shuffled_rows_per_s") > 0 && json_num("shuffled_vs_file") > 0,
          "bench loader: %s", out);
    CHECK(run("bench loader --reps 1") == 2 && strstr(out, "--data FILE is required (a .rshard, e.g. from rectrain prep)"),
          "bench loader without --data: %s", out);
    /* --gpu-host: each batch also staged as train --device cuda does on the host */
    CHECK(run("bench loader --data std1.rshard --reps 1 --batch 256 --threads 2 --gpu-host --dim 16 --json") == 0 &&
              strstr(out, "\"gpu_host\": true") && strstr(out, "the host's half of a GPU step's input") &&
              json_num("shuffled_rows_per_s") > 0 && json_num("pack") > 0,
          "bench loader --gpu-host: %s", out);
    CHECK(run("bench loader --data std1.rshard --gpu-host --dim 0") == 2 && strstr(out, "--dim"),
          "bench loader --dim 0: %s", out);
    /* bench embed on small Kaggle-shaped tables: every stage runs (uniform sweep, tuner,
     * separate tuning) and the summary has the contract's keys. The per-table oracle is at
     * least the best uniform (each table's minimum includes that member's time), and only a
     * sweep that was profiled gives a number. */
    CHECK(run("bench embed --model kaggle --kaggle-scale 0.001 --batch 64 --batches 2 --reps 1 --threads 2 "
              "--ceiling-mib 16 --json") == 0, "bench embed: %s", out);
    CHECK(json_num("gb_per_s") > 0 && json_num("rows_per_s") > 0 && json_num("tuned_fwdbwd_s") > 0 &&
              json_num("bare_copy_fwd_s") > 0 && json_num("distinct_bytes_per_batch") > 0 &&
              json_num("oracle_fwd_gain") >= 1, "bench embed --json: %s", out);
    CHECK(strstr(out, "bare row copy, no checks") && strstr(out, "the bare row copy is"), "bench embed: no bare copy: %s", out);
    /* A multi-hot model has no bare copy (its bags are sums): none timed, null in the JSON. */
    CHECK(run("bench embed --model D --batch 16 --batches 1 --reps 1 --threads 2 --ceiling-mib 16 --json") == 0 &&
              strstr(out, "\"bare_copy_fwd_s\": null") && !strstr(out, "bare row copy") && json_num("tuned_fwd_s") > 0,
          "bench embed --model D: %s", out);
    CHECK(run("bench embed --model kaggle --kaggle-scale 0.001 --batch 64 --batches 2 --reps 1 --threads 2 "
              "--ceiling-mib 16 --json") == 0, "bench embed: %s", out);
    const char *rd = strstr(out, "\"read_gbps\": "); /* on the machine line, before the models' */
    CHECK(rd && atof(rd + strlen("\"read_gbps\": ")) > 0, "bench embed --json: no read bandwidth: %s", out);
    /* The same with every id 64-bit (the width the engine ran before narrow ids). */
    CHECK(run("bench embed --model kaggle --kaggle-scale 0.001 --batch 64 --batches 1 --reps 1 --threads 2 "
              "--ceiling-mib 16 --wide-ids --json") == 0 && json_num("tuned_fwd_s") > 0,
          "bench embed --wide-ids: %s", out);
    /* Every id a cache hit (--hit-ids): the engine without memory misses. */
    CHECK(run("bench embed --model kaggle --kaggle-scale 0.001 --batch 64 --batches 1 --reps 1 --threads 2 "
              "--ceiling-mib 16 --hit-ids 8 --json") == 0 && json_num("tuned_fwd_s") > 0,
          "bench embed --hit-ids: %s", out);
    CHECK(run("bench embed --hit-ids 0") == 2 && strstr(out, "--hit-ids"), "bench embed --hit-ids 0: %s", out);
    CHECK(run("bench embed --model Z") == 2 && strstr(out, "unknown model 'Z'"), "bench embed --model Z: %s", out);
    /* bench train away from the repository root: its default config is missing, which it says
     * before generating any data (no "generating" line) and with what to do. */
    CHECK(run("bench train --steps 1 --reps 1") == 1 && strstr(out, "run from the repository root, or give --config") &&
              !strstr(out, "generating"),
          "bench train without configs/: %s", out);
    /* bench mlp: every MLP of the config, with the contract's keys; the default config is read
     * from the repository root, which the message says. */
    CHECK(run("bench mlp --config %s/configs/dcn_small.json --batch 64 --steps 1 --reps 1 --json", src) == 0 &&
              json_num("samples_per_s") > 0 && json_num("gflops") > 0 && json_num("sgemm_gflops") > 0 &&
              strstr(out, "\"name\": \"deep\", \"sizes\": [429, 256, 128, 64], \"last_relu\": true, \"input_grad\": true") &&
              strstr(out, "\"name\": \"final\""),
          "bench mlp: %s", out);
    CHECK(run("bench mlp --steps 1 --reps 1") == 1 && strstr(out, "run from the repository root, or give --config"),
          "bench mlp without configs/: %s", out);
    CHECK(run("bench embed --model kaggle --batches 257") == 2 && strstr(out, "--batches needs an integer in [1, 256]"),
          "bench embed --batches 257: %s", out);
}

/* prep --raw: the TSV parsed once into a .rraw, which inspect describes as the TSV, prep
 * --spec turns into the TSV's shard byte for byte, and train reads with a spec to the same
 * loss log as the shard (shuffled, the default); its refusals. */
static void test_raw_columns(void) {
    CHECK(run("gen --rows 5000 --scale 0.01 --seed 9 --multi-hot --out raw.tsv") == 0, "gen: %s", out);
    CHECK(run("prep --raw --in raw.tsv --out raw.rraw --json") == 0 && json_num("rows") == 5000, "prep --raw: %s", out);
    CHECK(run("inspect raw.rraw --verify --json") == 0 && strstr(out, "\"format\": \"rraw\"") &&
              strstr(out, "\"verified\": true") && json_num("rows") == 5000, "inspect .rraw: %s", out);
    CHECK(run("prep --spec %s/configs/criteo_heavy.json --in raw.tsv --out heavy_tsv.rshard", src) == 0 &&
              run("prep --spec %s/configs/criteo_heavy.json --in raw.rraw --out heavy_raw.rshard", src) == 0 &&
              same_file("heavy_tsv.rshard", "heavy_raw.rshard"), "prep from the .rraw: %s", out);
    const char *train = "train --config %s/configs/dlrm_small.json --steps 25 --batch 128 --threads 1";
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s --data heavy_tsv.rshard --loss-log shard.log", train);
    CHECK(run(cmd, src) == 0, "train on the shard: %s", out);
    snprintf(cmd, sizeof cmd, "%s --data raw.rraw --spec %%s/configs/criteo_heavy.json --loss-log raw.log", train);
    CHECK(run(cmd, src, src) == 0 && same_file("shard.log", "raw.log"), "train on the .rraw: %s", out);
    CHECK(run("prep --raw --spec %s/configs/criteo_standard.json --in raw.tsv --out x.rraw", src) != 0 &&
              strstr(out, "--raw parses only: it takes no --spec"), "prep --raw --spec: %s", out);
    CHECK(run("prep --raw --in raw.tsv") != 0 && strstr(out, "--in and --out are required"), "prep --raw no --out: %s",
          out);
    CHECK(run("train --data raw.rraw --steps 1") != 0 && strstr(out, "raw.rraw is a .rraw of raw columns; give a prep "
                                                                     "spec"), "train on a .rraw without spec: %s", out);
    CHECK(run("prep --raw --in raw.rraw --out y.rraw") != 0 && strstr(out, "raw.rraw is a .rraw already"), "prep --raw of a .rraw: %s",
          out);
    /* --prep-device: cuda trains as the CPU does where there is a GPU, else says why there is
     * none; a shard has no ops to run; a device that is none. */
    snprintf(cmd, sizeof cmd, "%s --data raw.rraw --spec %%s/configs/criteo_heavy.json --prep-device cuda "
             "--loss-log gpu_prep.log", train);
    const int rc_gpu = run(cmd, src, src);
    CHECK(rc_gpu == 0 ? same_file("shard.log", "gpu_prep.log")
                      : rc_gpu == 1 && (strstr(out, "no NVIDIA") || strstr(out, "no usable NVIDIA") ||
                                        strstr(out, "built without the GPU engine")) &&
                            strstr(out, "--prep-device cpu runs the spec's ops on the CPUs") && !strstr(out, "--device cpu runs"),
          "train --prep-device cuda (rc %d): %s", rc_gpu, out);
    /* without a GPU, the flag that asked for one is named, whatever --device says */
    snprintf(cmd, sizeof cmd, "%s --data raw.rraw --spec %%s/configs/criteo_heavy.json --prep-device cuda --device cpu",
             train);
    const int rc_cpu = run(cmd, src, src);
    CHECK(rc_gpu == 0 || (rc_cpu == 1 && strstr(out, "--prep-device cuda: ") &&
                          strstr(out, "--prep-device cpu runs the spec's ops on the CPUs") && !strstr(out, "--device cpu runs")),
          "train --prep-device cuda --device cpu without a GPU (rc %d): %s", rc_cpu, out);
    snprintf(cmd, sizeof cmd, "%s --data heavy_tsv.rshard --prep-device cuda", train);
    CHECK(run(cmd, src) == 1 && strstr(out, "heavy_tsv.rshard is a .rshard: its rows are preprocessed already; "
                                            "--prep-device runs a spec's ops"),
          "train --prep-device on a shard: %s", out);
    /* a shard to evaluate beside raw training data: it is read as it is (no GPU here: said
     * before any training, and not as a refusal of the shard) */
    snprintf(cmd, sizeof cmd, "%s --data raw.rraw --spec %%s/configs/criteo_heavy.json --eval heavy_tsv.rshard "
             "--prep-device cuda", train);
    const int rc_eval = run(cmd, src, src);
    CHECK(rc_gpu == 0 ? rc_eval == 0
                      : rc_eval == 1 && !strstr(out, "is a .rshard") && !strstr(out, "epoch 1") &&
                            (strstr(out, "no NVIDIA") || strstr(out, "no usable NVIDIA") ||
                             strstr(out, "built without the GPU engine")),
          "train --prep-device cuda --eval X.rshard (rc %d): %s", rc_eval, out);
    snprintf(cmd, sizeof cmd, "%s --data raw.rraw --spec %%s/configs/criteo_heavy.json --prep-device cuda "
             "--workers tcp://127.0.0.1:1", train);
    CHECK(run(cmd, src, src) == 1 && strstr(out, "--prep-device runs the spec's ops on this host's GPU and --workers on "
                                           "other hosts' CPUs: give one of them"),
          "train --prep-device with --workers: %s", out);
    CHECK(run("train --data raw.rraw --prep-device gpu") == 2 && strstr(out, "--prep-device gpu: want cpu or cuda"),
          "train --prep-device gpu: %s", out);
    snprintf(cmd, sizeof cmd, "%s --data raw.rraw --spec %%s/configs/criteo_heavy.json --prep-device cuda "
             "--corun-capacity cap.json", train);
    CHECK(run(cmd, src, src) == 2 && strstr(out, "--corun-capacity: the co-run's capacities are for --device cuda "
                                           "--prep-device cuda") && access("cap.json", F_OK) != 0,
          "train --corun-capacity without --device cuda: a usage error: %s", out);
    setenv("REC_CUDA_CORUN", "off", 1);
    snprintf(cmd, sizeof cmd, "%s --data raw.rraw --spec %%s/configs/criteo_heavy.json --device cuda --prep-device cuda "
             "--corun-capacity cap.json", train);
    CHECK(run(cmd, src, src) == 1 && strstr(out, "--corun-capacity: REC_CUDA_CORUN=off turns the co-run off") &&
              access("cap.json", F_OK) != 0,
          "train --corun-capacity with REC_CUDA_CORUN=off: %s", out);
    unsetenv("REC_CUDA_CORUN");
    /* A .rraw records its format: a contrary --format, or parts of both formats, refused. */
    CHECK(run("prep --raw --in test.tsv --out test.rraw") == 0, "prep --raw of a test-format file: %s", out);
    CHECK(run("prep --spec %s/configs/criteo_standard.json --in raw.rraw --format test --out x.rshard", src) == 1 &&
              strstr(out, "raw.rraw has labels (the train format): --format test contradicts it; drop --format"),
          "prep --format test of a labelled .rraw: %s", out);
    CHECK(run("prep --spec %s/configs/criteo_standard.json --in raw.rraw,test.rraw --out x.rshard", src) == 1 &&
              strstr(out, "test.rraw has no labels and raw.rraw has: the inputs of one data set are all of the train"),
          "prep of .rraw parts of both formats: %s", out);
    snprintf(cmd, sizeof cmd, "%s --data test.rraw --spec %%s/configs/criteo_standard.json --format train", train);
    CHECK(run(cmd, src, src) == 1 && strstr(out, "test.rraw has no labels (the test format): --format train contradicts"),
          "train --format train on a test-format .rraw: %s", out);
    snprintf(cmd, sizeof cmd, "%s --data raw.rraw,test.rraw --spec %%s/configs/criteo_standard.json", train);
    CHECK(run(cmd, src, src) == 1 && strstr(out, "test.rraw has no labels and raw.rraw has"),
          "train on .rraw parts of both formats: %s", out);
    /* One row over 4 threads: three pieces are empty, the row is kept. */
    FILE *f = fopen(path("one.tsv"), "w");
    if (f) {
        fprintf(f, "1");
        for (int k = 0; k < 13; k++) fprintf(f, "\t%d", k);
        for (int k = 0; k < 26; k++) fprintf(f, "\t%08x", 0x1000 + k);
        fprintf(f, "\n");
        fclose(f);
    }
    CHECK(run("prep --raw --threads 4 --in one.tsv --out one.rraw --json") == 0 && json_num("rows") == 1 &&
              run("inspect one.rraw --verify --json") == 0 && json_num("rows") == 1,
          "prep --raw of one row, 4 threads: %s", out);
    /* A damaged group: inspect --verify names it and fails cleanly. */
    const long mid = file_size("raw.rraw") / 2;
    f = fopen(path("raw.rraw"), "r+b");
    if (f) {
        fseek(f, mid, SEEK_SET);
        const int b = fgetc(f);
        fseek(f, mid, SEEK_SET);
        fputc(b ^ 0x5a, f);
        fclose(f);
    }
    CHECK(run("inspect raw.rraw --verify") == 1 && strstr(out, "raw.rraw: checksum mismatch in group ") &&
              strstr(out, "make it again with rectrain prep --raw"),
          "inspect --verify of a damaged .rraw: %s", out);
}

int main(void) {
    int rc = clirun_setup("rectrain_cli");
    if (rc) return rc;
    test_pipeline();
    test_plan_cli();
    test_bad_rows();
    test_nonfinite();
    test_same_files();
    test_json_undefined();
    test_messages();
    test_outputs_first();
    test_prep_stop();
    test_gen_stop();
    test_terabyte_recipe();
    test_stripped();
    test_input_lists();
    test_data_lists();
    test_raw_columns();
    test_errors();
    test_top_help();
    test_listen();
    test_bench();
    clirun_cleanup();
    return check_report();
}

/* What a user of the trainer sees, end to end through the CLI: predictions (rectrain predict
 * against the model's own forward pass and eval's AUC, the label-less test format, refusals);
 * a run's metrics as JSON lines and as a TensorBoard event file (read back here: TFRecord
 * framing, CRC-32C, the Event protobufs); progress lines in a log; PNG charts.
 * Skipped (77) when REC_CLI, the path of the built `rectrain`, is not set (CTest sets it). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "clirun.h"
#include "rectrain/ckpt.h"
#include "rectrain/core.h"
#include "rectrain/model.h"
#include "rectrain/train.h"
#include "tb_event.pb-c.h"

enum { ROWS = 4000 };

/* A small trained model: data d.rshard (and its TSV d.tsv, spec spec.json: small tables),
 * checkpoint ck. */
static void make_model(void) {
    write_spec("spec.json", 200, 50);
    CHECK(run("gen --rows %d --out d.tsv", ROWS) == 0, "%s", out);
    CHECK(run("prep --spec spec.json --in d.tsv --out d.rshard") == 0, "%s", out);
    CHECK(run("train --data d.rshard --config %s/configs/dlrm_small.json --batch 256 --epochs 1 --threads 1 --ckpt ck",
              src) == 0, "%s", out);
}

/* The model's own probabilities of d.rshard's rows, in order (the library's forward pass). */
static float *model_probs(int64_t *n) {
    rec_model_config c;
    memset(&c, 0, sizeof c);
    rec_model *m = NULL;
    rec_dataset *d = NULL;
    rec_loader *l = NULL;
    rec_ckpt_meta meta;
    float *p = malloc(sizeof(float) * ROWS);
    *n = 0;
    rec_dataset_opts o = {.path = path("d.rshard"), .prep_threads = 1};
    rec_status s = rec_ckpt_read_config(path("ck/model.rckpt"), &c, NULL);
    if (!s) s = rec_model_init(&m, &c, 256, 1);
    if (!s) s = rec_ckpt_load(path("ck/model.rckpt"), m, &meta);
    if (!s) s = rec_dataset_open(&d, &o);
    if (!s) s = rec_loader_open(&l, d, 0, ROWS, 256, 2);
    const rec_batch *b;
    while (!s && !(s = rec_loader_next(l, &b)) && b) {
        const float *z;
        s = rec_model_forward(m, b, &z);
        for (int64_t i = 0; !s && i < b->n && *n < ROWS; i++) p[(*n)++] = (float)rec_sigmoid(z[i]);
    }
    CHECK(s == REC_OK, "the model's forward pass: %s", rec_errmsg());
    rec_loader_close(l);
    rec_dataset_close(d);
    rec_model_free(m);
    rec_model_config_free(&c);
    return p;
}

/* predict: eval's logits through the sigmoid, row for row; the AUC of its file is eval's; the
 * label-less test format gives the same probabilities. */
static void test_predict(void) {
    CHECK(run("predict --ckpt ck --data d.rshard --out p.tsv --batch 256 --threads 1 --json") == 0, "%s", out);
    const double auc_json = json_num("auc");
    CHECK(json_num("rows") == ROWS, "predict scores every row: %s", out);
    CHECK(run("eval --ckpt ck --data d.rshard --json") == 0, "%s", out);
    const double auc_eval = json_num("auc");
    int64_t n;
    float *want = model_probs(&n);
    double *score = malloc(sizeof(double) * ROWS), *label = malloc(sizeof(double) * ROWS);
    FILE *f = fopen(path("p.tsv"), "r");
    int rows = 0, same = 1;
    float p;
    double y;
    while (f && rows < ROWS && fscanf(f, "%f\t%lf", &p, &y) == 2) {
        if (rows >= n || p != want[rows]) same = 0;
        score[rows] = p, label[rows] = y;
        rows++;
    }
    if (f) fclose(f);
    CHECK(rows == ROWS && n == ROWS && same, "predict's %d probabilities are the model's sigmoid(logit), row for row",
          rows);
    rec_metrics m;
    rec_metrics_ref(rows, score, label, &m);
    printf("predict: AUC of its file %.6f, eval's %.6f\n", m.auc, auc_eval);
    CHECK(fabs(m.auc - auc_eval) < 2e-6 && fabs(auc_json - auc_eval) < 2e-6,
          "the AUC of predict's file (%.6f) is eval's (%.6f)", m.auc, auc_eval);
    free(want), free(score), free(label);
    /* the Criteo test format: no label column */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cd %s && cut -f2- d.tsv > t.tsv && cut -f1 p.tsv > p1.tsv", dir);
    CHECK(system(cmd) == 0, "making the label-less file");
    CHECK(run("predict --ckpt ck --data t.tsv --spec spec.json --out pt.tsv --batch 256 --threads 1") == 0, "%s", out);
    CHECK(same_file("p1.tsv", "pt.tsv"), "the label-less test format gives the same probabilities");
    /* refusals */
    CHECK(run("predict --ckpt ck --data d.rshard") == 2 && strstr(out, "--out are required"), "%s", out);
    CHECK(run("predict --ckpt ck --data d.rshard --out d.rshard") == 1 && strstr(out, "--out"), "%s", out);
    CHECK(run("predict --ckpt ck --data t.tsv --out x.tsv") == 1 && strstr(out, "give a prep spec"), "%s", out);
    CHECK(run("predict --ckpt nothing --data d.rshard --out x.tsv") == 1 && access(path("x.tsv"), F_OK) != 0,
          "a missing checkpoint leaves no file: %s", out);
    CHECK(run("eval --ckpt ck --data t.tsv --spec spec.json") == 1 &&
          strstr(out, "rectrain predict scores it"), "eval of label-less data points to predict: %s", out);
}

/* Writes lines [from, to] (1-based) of d.tsv to `name`, with line `bad` (or 0) replaced by a
 * malformed row, lines `long1`, `long2` (or 0) by lines longer than the 1 MiB a line may have
 * (the reader drops those before the parser sees them), and the last line cut to its first
 * 20 bytes, without its '\n', when `cut`. */
static void write_damaged(const char *name, int from, int to, int bad, int long1, int long2, int cut) {
    FILE *in = fopen(path("d.tsv"), "r"), *f = fopen(path(name), "w");
    static char line[1 << 16];
    for (int k = 1; in && f && fgets(line, sizeof line, in) && k <= to; k++) {
        if (k < from) continue;
        if (k == bad) strcpy(line, "1\t2\tx3\n"); /* 3 fields, I2 not a number */
        if (k == long1 || k == long2) {
            for (int i = 0; i < (3 << 19); i++) fputc('a', f);
            strcpy(line, "\n");
        }
        if (cut && k == to) line[20] = 0; /* a few fields, no '\n': the file was cut short */
        fputs(line, f);
    }
    if (in) fclose(in);
    if (f) fclose(f);
}

/* Line k of `name` (1-based), without its '\n', into buf; "" past the end. */
static const char *nth_line(const char *name, int k, char *buf, int cap) {
    FILE *f = fopen(path(name), "r");
    buf[0] = 0;
    for (int i = 1; f && fgets(buf, cap, f); i++)
        if (i == k) break;
        else buf[0] = 0;
    if (f) fclose(f);
    buf[strcspn(buf, "\n")] = 0;
    return buf;
}

static int count_lines(const char *name) {
    FILE *f = fopen(path(name), "r");
    int n = 0, c, last = '\n';
    while (f && (c = fgetc(f)) != EOF) n += c == '\n', last = c;
    if (f) fclose(f);
    return n + (last != '\n');
}

/* --bad-rows skip: predict keeps a line per input line, "nan<TAB>nan" where a row was
 * dropped, so every other line is the clean file's prediction of the same row; predict, eval
 * and train report how many rows they dropped and where. The damage: across a list of two
 * files, a malformed row, over-long lines (one mid-file, one ending the first file: dropped by
 * the reader, never parsed) and a truncated last line. */
static void test_predict_bad_rows(void) {
    const int bad[] = {5, 1000, 2000, 2001, ROWS};
    write_damaged("b1.tsv", 1, 2000, 5, 1000, 2000, 0);
    write_damaged("b2.tsv", 2001, ROWS, 2001, 0, 0, 1);
    CHECK(run("predict --ckpt ck --data d.tsv --spec spec.json --out pd.tsv --threads 1") == 0, "%s", out);
    CHECK(run("predict --ckpt ck --data b1.tsv,b2.tsv --spec spec.json --bad-rows skip --out pb.tsv --threads 1 --json")
              == 0, "predict --bad-rows skip: %s", out);
    CHECK(json_num("rows") == ROWS - 5 && json_num("bad_rows") == 5, "5 rows dropped, the others scored: %s", out);
    CHECK(strstr(out, "predict: skipped 5 malformed rows (0.12% of the input); first:") && strstr(out, "b1.tsv:5: ") &&
              strstr(out, "b1.tsv:1000: line is longer than") && strstr(out, "b2.tsv:1: ") && strstr(out, "b2.tsv:2000: "),
          "predict reports the skipped rows and where: %s", out);
    CHECK(count_lines("pb.tsv") == ROWS, "a line per input line: %d, want %d", count_lines("pb.tsv"), ROWS);
    int wrong = 0, k = 1;
    for (int b = 0; k <= ROWS; k++) {
        char got[128], want[128];
        nth_line("pb.tsv", k, got, sizeof got);
        const int dropped = b < 5 && k == bad[b];
        b += dropped;
        if (strcmp(got, dropped ? "nan\tnan" : nth_line("pd.tsv", k, want, sizeof want))) {
            if (!wrong++) printf("pb.tsv:%d: '%s', want '%s'\n", k, got, dropped ? "nan\tnan" : want);
        }
    }
    CHECK(wrong == 0, "every line of the damaged input's predictions is the clean line's, or nan where dropped: %d wrong",
          wrong);
    CHECK(run("eval --ckpt ck --data b1.tsv,b2.tsv --spec spec.json --bad-rows skip --json") == 0 &&
              json_num("bad_rows") == 5 && strstr(out, "eval: skipped 5 malformed rows") && strstr(out, "b2.tsv:1: "),
          "eval reports the skipped rows: %s", out);
    CHECK(run("train --data b1.tsv,b2.tsv --spec spec.json --bad-rows skip --eval b2.tsv --config %s/configs/dlrm_small.json "
              "--batch 256 --steps 2 --threads 1 --json", src) == 0 && json_num("bad_rows") == 7 &&
              strstr(out, "train: skipped 5 malformed rows (0.12% of the training data); first:") &&
              strstr(out, "train: skipped 2 malformed rows (0.10% of the evaluation data); first:") &&
              strstr(out, "b1.tsv:5: "), "train reports the skipped rows of both sets: %s", out);
}

/* Ctrl-C or SIGTERM during predict: the partial output (PREDS.tmp) is removed, a message says
 * so, and the exit status is 128 + the signal, as prep's. 100 copies of d.rshard (400k rows)
 * in batches of 64 take seconds; the signal comes once the output is open. */
static void test_predict_stop(void) {
    char list[1200] = "d.rshard";
    for (int i = 1; i < 100; i++) strcat(list, ",d.rshard");
    const int sig[] = {SIGTERM, SIGINT};
    for (int k = 0; k < 2; k++) {
        pid_t pid = spawn("predict --ckpt ck --data %s --out sp.tsv --batch 64 --threads 1 >sp.out 2>&1", list);
        for (int i = 0; i < 30000 && file_size("sp.tsv.tmp") < 0; i++) usleep(1000);
        CHECK(file_size("sp.tsv.tmp") >= 0, "predict opened its output");
        kill(pid, sig[k]);
        int status = 0;
        waitpid(pid, &status, 0);
        read_out("sp.out");
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 128 + sig[k] && strstr(out, "rectrain predict: stopping") &&
                  strstr(out, sig[k] == SIGINT ? "stopped by SIGINT after " : "stopped by SIGTERM after ") &&
                  strstr(out, "the partial output is removed"),
              "predict stopped by signal %d: status 0x%x: %s", sig[k], status, out);
        CHECK(file_size("sp.tsv.tmp") < 0 && file_size("sp.tsv") < 0, "no partial output is left after signal %d", sig[k]);
    }
}

/* predict over no rows: an empty file, and in --json null for every figure that needs rows
 * (docs/commands.md), never 0; eval, whose figures are all such, refuses the file. */
static void test_predict_empty(void) {
    FILE *f = fopen(path("none.tsv"), "w");
    if (f) fclose(f);
    CHECK(run("predict --ckpt ck --data none.tsv --spec spec.json --out pn.tsv --json") == 0 && json_num("rows") == 0 &&
              strstr(out, "\"mean_p\": null") && strstr(out, "\"auc\": null") && strstr(out, "\"logloss\": null") &&
              strstr(out, "\"ctr\": null") && strstr(out, "mean probability -"), "predict over no rows: %s", out);
    CHECK(file_size("pn.tsv") == 0, "predict over no rows writes an empty file");
    CHECK(run("eval --ckpt ck --data none.tsv --spec spec.json --json") == 1 &&
              strstr(out, "none.tsv holds no rows: there is nothing to evaluate"), "eval over no rows: %s", out);
}

/* The scalars of a TensorBoard event file: tag, step, value (at most cap); -1 when a record
 * is torn or its CRC is wrong, or the first event is not the file version. */
typedef struct tb_scalar {
    char tag[64];
    int64_t step;
    float v;
} tb_scalar;

static uint32_t masked(const void *p, size_t n) {
    const uint32_t c = rec_crc32c(0, p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static int64_t tb_start_step; /* the step of the last SessionLog START read_events met, or -1 */

static int read_events(const char *file, tb_scalar *out, int cap) {
    tb_start_step = -1;
    FILE *f = fopen(file, "rb");
    int n = 0, first = 1, bad = !f;
    uint8_t head[12], buf[4096];
    while (!bad && fread(head, 1, 12, f) == 12) {
        uint64_t len;
        uint32_t hc, dc;
        memcpy(&len, head, 8), memcpy(&hc, head + 8, 4);
        if (hc != masked(head, 8) || len > sizeof buf || fread(buf, 1, len, f) != len || fread(&dc, 1, 4, f) != 4 ||
            dc != masked(buf, len)) {
            bad = 1;
            break;
        }
        RecTb__Event *ev = rec_tb__event__unpack(NULL, len, buf);
        if (!ev) bad = 1;
        else if (first) bad = ev->what_case != REC_TB__EVENT__WHAT_FILE_VERSION || strcmp(ev->file_version, "brain.Event:2");
        else if (ev->what_case == REC_TB__EVENT__WHAT_SUMMARY && ev->summary->n_value == 1 && n < cap) {
            snprintf(out[n].tag, sizeof out[n].tag, "%s", ev->summary->value[0]->tag);
            out[n].step = ev->step, out[n].v = ev->summary->value[0]->simple_value;
            n++;
        } else if (ev->what_case == REC_TB__EVENT__WHAT_SESSION_LOG &&
                   ev->session_log->status == REC_TB__SESSION_LOG__SESSION_STATUS__START) {
            tb_start_step = ev->step;
        }
        first = 0;
        if (ev) rec_tb__event__free_unpacked(ev, NULL);
    }
    if (f) fclose(f);
    return bad ? -1 : n;
}

/* Without --log-every a run records about 100 points, or every step of a shorter one: the
 * chart of a short run is a curve (176 steps once drew two points). */
static void test_log_every(void) {
    CHECK(rec_log_every(7, 176) == 7 && rec_log_every(0, 176) == 1 && rec_log_every(0, 5000) == 50 &&
              rec_log_every(0, 50000) == 100 && rec_log_every(0, 0) == 1, "rec_log_every");
    CHECK(run("train --data d.rshard --config %s/configs/dlrm_small.json --batch 256 --epochs 1 --threads 1 --holdout "
              "0.25 --metrics m_short.jsonl", src) == 0, "%s", out);
    FILE *f = fopen(path("m_short.jsonl"), "r");
    char line[2048];
    int trains = 0;
    while (f && fgets(line, sizeof line, f)) trains += strstr(line, "\"group\": \"train\"") != NULL;
    if (f) fclose(f);
    const int steps = (ROWS - ROWS / 4 + 255) / 256;
    CHECK(trains == steps, "a short run (%d steps) records every step: %d records", steps, trains);
}

/* train --metrics / --tensorboard / --plot: the same scalars in the JSON lines and the event
 * file (the tags the dlrm reference logs: loss, AUC, learning rate, samples/s), charts drawn. */
static void test_metrics(void) {
    CHECK(run("train --data d.rshard --config %s/configs/dlrm_small.json --batch 256 --epochs 1 --threads 1 --holdout "
              "0.25 --eval-every 6 --log-every 4 --metrics m.jsonl --tensorboard tb --plot charts --loss-log l.log", src) == 0,
          "%s", out);
    CHECK(strstr(out, "charts: charts/loss.png, charts/eval.png, charts/calibration.png") != NULL,
          "the run says where its charts are: %s", out);
    for (int k = 0; k < 3; k++) {
        static const char *const PNG[3] = {"charts/loss.png", "charts/eval.png", "charts/calibration.png"};
        FILE *f = fopen(path(PNG[k]), "rb");
        unsigned char sig[8] = {0};
        CHECK(f && fread(sig, 1, 8, f) == 8 && !memcmp(sig, "\x89PNG\r\n\x1a\n", 8), "%s is a PNG", PNG[k]);
        if (f) fclose(f);
    }
    /* the JSON lines: every 4th step's mean loss (the loss log's), every evaluation */
    FILE *f = fopen(path("m.jsonl"), "r"), *lf = fopen(path("l.log"), "r");
    double losses[64] = {0}, sum = 0;
    long long st;
    int nl = 0, trains = 0, evals = 0, calib = 0, same_loss = 1;
    while (lf && nl < 64 && fscanf(lf, "%lld %lf", &st, &losses[nl]) == 2) nl++;
    char line[2048];
    double jl[16] = {0}, ja[16] = {0};
    long long js[16] = {0}, es[16] = {0};
    while (f && fgets(line, sizeof line, f)) {
        long long step = atoll(strstr(line, "\"step\": ") ? strstr(line, "\"step\": ") + 8 : "-1");
        if (strstr(line, "\"group\": \"train\"") && trains < 16) {
            js[trains] = step, jl[trains] = atof(strstr(line, "\"loss\": ") + 8);
            sum = 0;
            const long long from = trains ? js[trains - 1] : 0;
            for (long long k = from; k < step && k < nl; k++) sum += losses[k];
            if (fabs(sum / (double)(step - from) - jl[trains]) > 1e-6 * fabs(jl[trains])) same_loss = 0;
            trains++;
        } else if (strstr(line, "\"group\": \"eval\"") && evals < 16) {
            es[evals] = step, ja[evals] = atof(strstr(line, "\"auc\": ") + 7);
            evals++;
        } else if (strstr(line, "\"group\": \"calibration\"")) {
            calib++;
        }
    }
    if (f) fclose(f);
    if (lf) fclose(lf);
    const int steps = nl;
    CHECK(trains == steps / 4 + (steps % 4 != 0) && same_loss, "a training record every 4 steps and at the end (%d of "
          "%d steps), each the mean loss of its steps", trains, steps);
    CHECK(evals == steps / 6 + 1 && calib == 1, "a record per evaluation (%d) and one calibration curve (%d)", evals, calib);
    /* the event file: the same values under "train/..." and "eval/..." tags */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "ls %s/tb/events.out.tfevents.* 2>/dev/null | head -1", dir);
    char ev[1024] = "";
    check_capture(cmd, ev, sizeof ev);
    ev[strcspn(ev, "\n")] = 0;
    tb_scalar sc[256];
    const int n = read_events(ev, sc, 256);
    int loss_tags = 0, auc_tags = 0, lr_tags = 0, rate_tags = 0, match = 1;
    for (int i = 0; i < n; i++) {
        if (!strcmp(sc[i].tag, "train/loss")) {
            match &= loss_tags < trains && sc[i].step == js[loss_tags] && sc[i].v == (float)jl[loss_tags];
            loss_tags++;
        } else if (!strcmp(sc[i].tag, "eval/auc")) {
            match &= auc_tags < evals && sc[i].step == es[auc_tags] && fabsf(sc[i].v - (float)ja[auc_tags]) < 1e-6f;
            auc_tags++;
        }
        lr_tags += !strcmp(sc[i].tag, "train/lr") && sc[i].v > 0;
        rate_tags += !strcmp(sc[i].tag, "train/samples_per_s") && sc[i].v > 0;
    }
    printf("tensorboard: %d scalars read back from %s\n", n, ev);
    CHECK(n > 0 && loss_tags == trains && auc_tags == evals && lr_tags == trains && rate_tags == trains && match,
          "the event file holds the records' values under train/loss (%d), train/lr (%d), train/samples_per_s (%d), "
          "eval/auc (%d)", loss_tags, lr_tags, rate_tags, auc_tags);
    /* rectrain plot on the same metrics, and on a table; refusals */
    CHECK(run("plot --metrics m.jsonl --out charts2") == 0 && access(path("charts2/calibration.png"), F_OK) == 0, "%s", out);
    FILE *t = fopen(path("t.tsv"), "w");
    if (t) fputs("config\trectrain\tpeer\nsmall\t100\t40\nlarge\t80\t30\n", t), fclose(t);
    CHECK(run("plot --table t.tsv --out bars.png --title \"Throughput\" --ylabel samples/s") == 0 &&
          access(path("bars.png"), F_OK) == 0, "%s", out);
    t = fopen(path("bad.tsv"), "w");
    if (t) fputs("config\trectrain\nsmall\tfast\n", t), fclose(t);
    CHECK(run("plot --table bad.tsv --out b.png") == 1 && strstr(out, "bad.tsv:2: column 2 (rectrain) is 'fast', not a "
          "number"), "%s", out);
    /* non-finite cells: refused with file, line and column, as a word is (a blank chart before) */
    t = fopen(path("nan.tsv"), "w");
    if (t) fputs("config\trectrain\tpeer\nsmall\t100\t40\nlarge\tnan\tinf\n", t), fclose(t);
    CHECK(run("plot --table nan.tsv --out nan.png") == 1 && access(path("nan.png"), F_OK) != 0 &&
          strstr(out, "nan.tsv:3: column 2 (rectrain) is 'nan', not a finite number"), "a nan cell: %s", out);
    t = fopen(path("inf.tsv"), "w");
    if (t) fputs("step\tloss\n1\t0.5\n\n2\t-inf\n", t), fclose(t);
    CHECK(run("plot --table inf.tsv --lines --out inf.png") == 1 && access(path("inf.png"), F_OK) != 0 &&
          strstr(out, "inf.tsv:4: column 2 (loss) is '-inf', not a finite number"), "an -inf cell: %s", out);
    t = fopen(path("infx.tsv"), "w");
    if (t) fputs("step\tloss\n1\t0.5\ninf\t0.4\n", t), fclose(t);
    CHECK(run("plot --table infx.tsv --lines --out infx.png") == 1 &&
          strstr(out, "infx.tsv:3: column 1 (step) is 'inf', not a finite number (a line chart's x)"), "an inf x: %s", out);
    t = fopen(path("lines.tsv"), "w");
    if (t) {
        fputs("step\tfp32\tbf16\n", t);
        for (int i = 1; i <= 500; i++) fprintf(t, "%d\t%.4f\t%.4f\n", i, 0.7 / (1 + i * 0.01), 0.71 / (1 + i * 0.01));
        fclose(t);
    }
    CHECK(run("plot --table lines.tsv --lines --out lines.png --ylabel loss") == 0 && access(path("lines.png"), F_OK) == 0,
          "line chart: %s", out);
    CHECK(run("plot --table t.tsv --lines --out l.png") == 1 && strstr(out, "t.tsv:2: column 1 (config) is 'small', not a "
          "number (a line chart's x)"), "lines need a numeric first column: %s", out);
    CHECK(run("plot --metrics m.jsonl --lines --out c4") == 2 && strstr(out, "--lines are for --table"), "%s", out);
    CHECK(run("plot --table lines.tsv --out many.png") == 1 && strstr(out, "500 rows; a bar chart shows at most 64"), "%s", out);
    CHECK(run("plot --metrics l.log --out c3") == 1 && strstr(out, "l.log:1: not a metrics record"), "%s", out);
    CHECK(run("plot --metrics m.jsonl --table t.tsv --out x") == 2 && strstr(out, "one of them"), "%s", out);
    CHECK(run("plot --table t.tsv --out x.jpg") == 2 && strstr(out, "names a .png"), "%s", out);
    CHECK(run("train --data d.rshard --steps 2 --metrics d.rshard") == 1 && strstr(out, "--metrics"), "%s", out);
}

/* The lines of `out` that begin "epoch ", each without its samples/s (a timing), into buf. */
static void epoch_lines(char *buf, size_t cap) {
    buf[0] = 0;
    for (const char *p = out; (p = strstr(p, "epoch ")) != NULL; p++) {
        if (p != out && p[-1] != '\n') continue;
        const char *end = strchr(p, '\n'), *cut = p;
        for (const char *q = p; q < end; q++)
            if (!strncmp(q, ", ", 2)) cut = q; /* the last ", ": before the samples/s */
        snprintf(buf + strlen(buf), cap - strlen(buf), "%.*s\n", (int)(cut - p), p);
    }
}

/* The text of "key": VALUE in the JSON summary line of `out`, into buf. */
static void json_text(const char *key, char *buf, size_t cap) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(out, "{\"model\"");
    p = p ? strstr(p, pat) : NULL;
    snprintf(buf, cap, "%.*s", p ? (int)strcspn(p + strlen(pat), ",}") : 0, p ? p + strlen(pat) : "");
}

/* A run split by --steps and --resume, one part of it killed after its checkpoint (its later
 * steps taken again), reports what the uninterrupted run does: the same metrics records
 * (--plot DIR's metrics.jsonl: steps, groups and values, samples/s aside), hence the same
 * charts; the same epoch lines and --json loss (the epoch's mean, steps before the resume
 * included); a TensorBoard event file that marks the restart. A metrics file that is not one
 * is refused and left as it was. */
static void test_resume_reports(void) {
    char base[512], eu[1024], er[1024], lu[64], lr[64];
    snprintf(base, sizeof base, "train --data d.rshard --config %s/configs/dlrm_small.json --batch 64 --epochs 2 "
             "--threads 1 --holdout 0.25 --eval-every 6 --log-every 4", src);
    CHECK(run("%s --metrics u.jsonl --json", base) == 0, "the uninterrupted run: %s", out);
    epoch_lines(eu, sizeof eu);
    json_text("loss", lu, sizeof lu);
    CHECK(run("%s --ckpt rk --steps 10 --plot rp --tensorboard rtb", base) == 0, "to step 10: %s", out);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "cp %s %s", path("rk/model.rckpt"), path("rk10.rckpt"));
    CHECK(system(cmd) == 0, "%s", cmd);
    CHECK(run("%s --ckpt rk --resume --steps 60 --plot rp", base) == 0, "on to step 60: %s", out);
    snprintf(cmd, sizeof cmd, "cp %s %s && sleep 1", path("rk10.rckpt"), path("rk/model.rckpt"));
    CHECK(system(cmd) == 0, "%s", cmd); /* killed after step 60: the checkpoint of step 10 is the last */
    CHECK(run("%s --ckpt rk --resume --plot rp --tensorboard rtb --json", base) == 0 && strstr(out, "resumed") &&
          strstr(out, "charts: rp/loss.png, rp/eval.png, rp/calibration.png"), "resumed at step 10: %s", out);
    epoch_lines(er, sizeof er);
    json_text("loss", lr, sizeof lr);
    snprintf(cmd, sizeof cmd, "cd %s && for f in u.jsonl rp/metrics.jsonl; do sed 's/, \"samples_per_s\": [^,}]*//' $f "
             "> $f.cmp; done", dir);
    CHECK(system(cmd) == 0, "%s", cmd);
    CHECK(lines_of("u.jsonl") > 20 && same_file("u.jsonl.cmp", "rp/metrics.jsonl.cmp"),
          "the metrics of the run resumed twice (%d records) are the uninterrupted run's (%d)",
          lines_of("rp/metrics.jsonl"), lines_of("u.jsonl"));
    printf("resumed run's epochs:\n%s", er);
    CHECK(strstr(eu, "epoch 1/2: 47 steps, loss ") && strstr(eu, "epoch 2/2: 94 steps, loss ") && !strcmp(eu, er),
          "the resumed run's epoch lines:\n%sthe uninterrupted run's:\n%s", er, eu);
    CHECK(lu[0] && !strcmp(lu, lr), "--json loss: %s resumed, %s uninterrupted", lr, lu);
    /* TensorBoard: a file per run (the first run's is kept), the resumed one marked */
    snprintf(cmd, sizeof cmd, "ls -t %s/rtb/events.out.tfevents.* 2>/dev/null", dir);
    char ls[2048] = "";
    check_capture(cmd, ls, sizeof ls);
    int files = 0;
    for (const char *p = ls; *p; p++) files += *p == '\n';
    ls[strcspn(ls, "\n")] = 0;
    tb_scalar sc[256];
    const int n = read_events(ls, sc, 256);
    CHECK(files == 2 && n > 0 && tb_start_step == 11 && sc[0].step > 10,
          "%d event files; the resumed run's, %s: %d scalars from step %lld, SessionLog START at step %lld", files, ls, n,
          n > 0 ? (long long)sc[0].step : -1LL, (long long)tb_start_step);
    /* a file that is not metrics: refused, left as it was, before any step (of the run at step
     * 10 again: a complete one writes nothing, so reads no metrics) */
    FILE *f = fopen(path("notes.jsonl"), "w");
    if (f) fputs("{\"step\": 1, \"group\": \"train\", \"loss\": 0.7}\nmy notes\n", f), fclose(f);
    snprintf(cmd, sizeof cmd, "cp %s %s", path("rk10.rckpt"), path("rk/model.rckpt"));
    CHECK(system(cmd) == 0, "%s", cmd);
    CHECK(run("%s --ckpt rk --resume --metrics notes.jsonl", base) == 1 &&
          strstr(out, "notes.jsonl:2: not a metrics record") && strstr(out, "give --metrics another path") &&
          file_size("notes.jsonl") == 52, "a --metrics file that is not one: %s", out);
}

/* train --ckpt K --npy N, then the same with --resume: the earlier export in N is replaced by
 * the resumed run's (without --overwrite, which --resume excludes); N holding other files is
 * refused before any step, saying what is replaced. */
static void test_resume_npy(void) {
    char base[512];
    snprintf(base, sizeof base, "train --data d.rshard --config %s/configs/dlrm_small.json --batch 256 --threads 1 "
             "--ckpt nk --npy nx", src);
    CHECK(run("%s --steps 3", base) == 0 && file_size("nx/config.json") > 0, "the first run exports: %s", out);
    const long emb = file_size("nx/emb.0.weight.npy");
    CHECK(run("%s --steps 6 --resume --json", base) == 0 && json_num("steps") == 3 && file_size("nx/config.json") > 0 &&
          file_size("nx/emb.0.weight.npy") == emb && file_size("nx.tmp") < 0,
          "the resumed run replaces the earlier export: %s", out);
    FILE *f = fopen(path("nx/notes.txt"), "w");
    if (f) fputs("mine", f), fclose(f);
    CHECK(run("%s --steps 9 --resume", base) == 1 && !strstr(out, "resumed at step") &&
          strstr(out, "nx: holds 'notes.txt', which the export there did not write (rectrain_export.json lists its "
                      "files); only those are replaced") && file_size("nx/notes.txt") == 4,
          "an --npy DIR with other files: %s", out);
}

/* A run piped to a file: a progress line at the interval, the epoch summary on its own line,
 * the ETA counted to --steps. */
static void test_progress(void) {
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "cd %s && %s train --data d.rshard --config %s/configs/dlrm_small.json --batch 16 --epochs 1 "
             "--threads 1 --steps 60 --progress-every 0.001 2> prog.log >/dev/null", dir, cli, src);
    CHECK(system(cmd) == 0, "the piped run");
    FILE *f = fopen(path("prog.log"), "r");
    char line[512];
    int lines = 0, to_steps = 1, glued = 0, summary = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (!strncmp(line, "train  ", 7)) {
            lines++;
            to_steps &= strstr(line, "/960 rows") != NULL; /* 60 steps of 16 rows */
        }
        glued += strchr(line, '\r') != NULL || (strstr(line, "rows/s") && strstr(line, "epoch 1/1:"));
        summary += !strncmp(line, "epoch 1/1: 60 steps", 19);
    }
    if (f) fclose(f);
    printf("progress: %d lines in the log\n", lines);
    CHECK(lines >= 2 && to_steps && !glued && summary == 1, "progress lines in a log (%d), counted to --steps, and the "
          "epoch summary on its own line", lines);
}

/* The embedded default job writes its charts and says where. */
static void test_default_charts(void) {
    CHECK(run("train --rows 20000 --threads 1") == 0 && strstr(out, "charts: rectrain-charts/loss.png") &&
          access(path("rectrain-charts/calibration.png"), F_OK) == 0, "%s", out);
}

/* The README's walk from a Criteo file to predictions, run as written: every line of the first
 * sh block under "## From a Criteo file to predictions", `rectrain` being the built one. (Not
 * under the sanitizers: it checks the README's text; the same commands run there elsewhere.) */
static void test_readme_walk(void) {
#ifdef REC_SANITIZED
    printf("README walk: skipped under the sanitizers\n");
#else
    char readme[600];
    snprintf(readme, sizeof readme, "%s/README.md", src);
    FILE *f = fopen(readme, "r");
    char line[1024], cmd[2048];
    int in_section = 0, in_block = 0, ran = 0, ok = 1;
    snprintf(cmd, sizeof cmd, "cd %s && ln -sf %s/configs configs", dir, src);
    CHECK(system(cmd) == 0, "linking configs/");
    while (f && fgets(line, sizeof line, f)) {
        if (!strncmp(line, "## ", 3)) in_section = strstr(line, "From a Criteo file to predictions") != NULL;
        if (!in_section) continue;
        if (!strncmp(line, "```", 3)) {
            if (in_block) break;
            in_block = 1;
            continue;
        }
        if (!in_block) continue;
        line[strcspn(line, "#\n")] = 0; /* the comment off */
        if (strncmp(line, "rectrain ", 9)) continue;
        snprintf(cmd, sizeof cmd, "cd %s && REC_PROGRESS=0 %s %s > walk.out 2>&1", dir, cli, line + 9);
        const int rc = system(cmd);
        if (rc != 0) {
            read_out("walk.out");
            printf("README walk: `%s` failed:\n%s\n", line, out);
            ok = 0;
            break;
        }
        ran++;
    }
    if (f) fclose(f);
    CHECK(ok && ran == 4 && access(path("preds.tsv"), F_OK) == 0 && access(path("charts/loss.png"), F_OK) == 0 &&
          access(path("model/model.rckpt"), F_OK) == 0, "the README's walk runs as written (%d commands): a model, its "
          "charts, predictions", ran);
#endif
}

int main(void) {
    int rc = clirun_setup("rectrain_user");
    if (rc) return rc == 77 ? check_report() : rc;
    make_model();
    test_predict();
    test_predict_bad_rows();
    test_predict_stop();
    test_predict_empty();
    test_metrics();
    test_log_every();
    test_resume_reports();
    test_resume_npy();
    test_progress();
    test_default_charts();
    test_readme_walk();
    clirun_cleanup();
    return check_report();
}

/* `rectrain train / eval / export` end to end, as a user runs them, on small generated data:
 *  - every model kind trains and evaluates (AUC clearly above chance, below the oracle's);
 *  - a fixed seed and thread count give bitwise-identical loss trajectories, and training
 *    straight from the TSV (preprocessed on the loader's thread) equals training from the shard;
 *  - an interrupted run resumed from its checkpoint continues the uninterrupted run's losses
 *    exactly (same bits), across an epoch boundary; resuming on other data is refused;
 *  - shuffled training rows (the default, from shard or TSV) differ from file order, and a
 *    shuffled run split by --steps / --resume gives the uninterrupted losses byte for byte; a
 *    resume in the other order is refused;
 *  - SIGINT mid-run stops after the step in progress, keeps it in the checkpoint (exit 130),
 *    and the resumed run continues the uninterrupted losses; SIGTERM before any step saves nothing;
 *  - kill -9 at random moments of a run that checkpoints every step always leaves a loadable
 *    checkpoint (the save is temp + fsync + rename);
 *  - inspect of a checkpoint (position, data, tensors, config; --verify), .npy export, and the rejections: corrupt or mismatched checkpoints, bad configs, bad
 *    flag combinations, each with its message;
 *  - nothing lost silently: an existing checkpoint needs --resume or --overwrite; the loss log
 *    of a killed and resumed run equals the uninterrupted run's; evaluation sets that cannot be
 *    evaluated and oracle files of another row count are refused before the first step;
 *    --npy and export leave no partial folder (a failure injected with ulimit -f);
 *  - what train prints: the final metrics once, singular counts, --help, directories given
 *    for JSON files.
 * Skipped (77) without CTest's REC_CLI / REC_SOURCE_DIR. */
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

#include "check.h"
#include "clirun.h"

static void write_text(const char *name, const char *text) {
    FILE *f = fopen(path(name), "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static const char *SMALL =
    "{\"format\": \"rectrain-model\", \"version\": 1, \"name\": \"t\", \"model\": \"dlrm\", \"tables\": \"data\","
    " \"embedding\": {\"dim\": 8}, \"bottom_mlp\": [32, 8], \"top_mlp\": [32, 1],"
    " \"optimizer\": {\"dense\": {\"kind\": \"adagrad\", \"lr\": 0.02}, \"sparse\": {\"kind\": \"rowwise_adagrad\", \"lr\": 0.05}},"
    " \"lr_schedule\": {\"warmup_steps\": 5, \"decay_start\": 40, \"decay_steps\": 60},"
    " \"train\": {\"batch_size\": 256, \"epochs\": 2, \"seed\": 3}}\n";

static void test_train_and_eval(void) {
    CHECK(run("gen --rows 20k --scale 0.01 --seed 7 --out train.tsv --prob-out train.prob") == 0, "gen: %s", out);
    write_spec("spec.json", 1000, 0);
    CHECK(run("prep --spec spec.json --in train.tsv --out train.rshard") == 0, "prep: %s", out);
    write_text("small.json", SMALL);

    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --oracle train.prob --threads 2 "
              "--loss-log a.log --eval-every 25 --json") == 0, "train: %s", out);
    double auc = json_num("auc"), oracle = json_num("oracle_auc");
    CHECK(auc > 0.65 && auc < oracle, "AUC %.4f should beat chance clearly and stay below the oracle's %.4f", auc, oracle);
    CHECK(json_num("rows") == 2 * 16000 && json_num("steps") == 2 * 63 && json_num("eval_rows") == 4000,
          "2 epochs of 16000 rows in batches of 256: %s", out);
    CHECK(json_num("samples_per_s") > 0 && json_num("logloss") > 0 && json_num("ne") > 0, "summary fields: %s", out);
    CHECK(strstr(out, "eval step 25: auc") != NULL, "periodic evaluation line: %s", out);

    /* Same seed and threads: the same bits. From the TSV (prep on the loader thread): the same. */
    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --threads 2 --loss-log b.log") == 0,
          "train again: %s", out);
    CHECK(same_file("a.log", "b.log"), "two runs with the same seed and threads differ");
    /* In file order: a TSV shuffles only within its buffer (no random access to its blocks), so
     * its shuffled order is not the shard's. */
    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --threads 2 --no-shuffle --loss-log n.log") == 0,
          "train in file order: %s", out);
    CHECK(run("train --config small.json --data train.tsv --spec spec.json --holdout 0.2 --threads 2 --no-shuffle "
              "--loss-log c.log") == 0, "train from TSV: %s", out);
    CHECK(same_file("n.log", "c.log"), "training from the TSV differs from training from its shard");

    /* --tune: the tuner runs on the live steps (3 epochs, 189 > the 138 it needs for dim 8) and
     * changes no bit (the first 126 losses are the 2-epoch run's); the plan it writes is loaded
     * by the next run, again with the same bits. */
    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --threads 2 --epochs 3 --loss-log t.log "
              "--tune --plan plan.json") == 0 && strstr(out, "embedding plan written to"), "train --tune: %s", out);
    CHECK(compare_files("a.log", "t.log", 1), "training while tuning the embedding plan changed the losses");
    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --threads 2 --loss-log p.log --plan plan.json") == 0 &&
              strstr(out, "plan.json loaded"), "train --plan: %s", out);
    CHECK(same_file("a.log", "p.log"), "training with a tuned plan changed the losses");
    CHECK(run("train --config small.json --data train.rshard --plan missing.json") == 1 && strstr(out, "missing.json") &&
              strstr(out, "add --tune"), "missing plan without --tune: %s", out);
    write_text("badplan.json", "{\"format\": \"rectrain-embed-plan\", \"version\": 1, \"shape_key\": \"0000000000000000\", "
               "\"data_key\": \"0000000000000000\", \"tables\": []}");
    CHECK(run("train --config small.json --data train.rshard --plan badplan.json") == 1 &&
              strstr(out, "badplan.json: $.tables: the plan has 0 tables, the model 26"), "plan of another model: %s", out);

    /* Resume: stop at step 90 (epoch 2), resume, and the losses continue exactly. */
    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --threads 2 --ckpt ck --ckpt-every 45 "
              "--steps 90 --loss-log r.log") == 0, "interrupted run: %s", out);
    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --threads 2 --ckpt ck --resume "
              "--loss-log r.log --json") == 0, "resumed run: %s", out);
    CHECK(strstr(out, "resumed") != NULL && json_num("steps") == 126 - 90, "resumed at step 90: %s", out);
    CHECK(same_file("a.log", "r.log"), "resumed losses differ from the uninterrupted run's");
    CHECK(fabs(json_num("auc") - auc) < 1e-12, "resumed final AUC %.9f vs %.9f", json_num("auc"), auc);

    /* A run that --steps ends saves its state (no --ckpt-every needed): resumed, the losses
     * continue exactly. --ckpt must be a directory, which is checked before training. */
    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --threads 2 --ckpt ck2 --steps 70 "
              "--loss-log s.log") == 0, "run ended by --steps: %s", out);
    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --threads 2 --ckpt ck2 --resume "
              "--loss-log s.log --json") == 0 && strstr(out, "resumed") && json_num("steps") == 126 - 70,
          "resumed at step 70: %s", out);
    CHECK(json_num("ckpts") == 1 && json_num("ckpt_seconds") >= 0 && strstr(out, "; 1 checkpoint saved in "),
          "the epoch-end save is reported apart from training time: %s", out);
    CHECK(same_file("a.log", "s.log"), "losses resumed from the --steps checkpoint differ from the uninterrupted run's");
    /* --resume only on the data the checkpoint was trained on: the same rows, whether read
     * from the shard or preprocessed from the TSV; a different --holdout or other rows of the
     * same count are refused before anything is loaded. */
    CHECK(run("train --config small.json --data train.tsv --spec spec.json --holdout 0.2 --threads 2 --ckpt ck2 --resume "
              "--json") == 0 && json_num("steps") == 0, "resume from the TSV of the same rows: %s", out);
    CHECK(run("train --config small.json --data train.rshard --holdout 0.1 --ckpt ck2 --resume") == 1 &&
              strstr(out, "ck2/model.rckpt was written training on 16000 training rows, and this run has 18000 (train.rshard)") &&
              strstr(out, "--holdout"), "resume with another --holdout: %s", out);
    CHECK(run("gen --rows 20k --scale 0.01 --seed 8 --out other.tsv") == 0, "gen: %s", out);
    CHECK(run("train --config small.json --data other.tsv --spec spec.json --holdout 0.2 --ckpt ck2 --resume") == 1 &&
              strstr(out, "16000 training rows whose first 4096 differ from this run's (other.tsv)") &&
              strstr(out, "or start afresh without --resume"), "resume on other rows of the same count: %s", out);
    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --batch 128 --ckpt ck2 --resume") == 1 &&
              strstr(out, "--resume: ck2/model.rckpt was trained in batches of 256, and --batch 128 would change") &&
              strstr(out, "drop --batch"), "resume with another --batch: %s", out);
    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --batch 256 --threads 2 --ckpt ck2 --resume "
              "--json") == 0 && json_num("steps") == 0, "resume with the checkpoint's own --batch: %s", out);
    write_text("afile", "x");
    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --ckpt afile --loss-log f.log") == 1 &&
              strstr(out, "afile: exists and is not a directory; choose another checkpoint directory") && access(path("f.log"), F_OK) != 0,
          "--ckpt naming a file is refused before training: %s", out);

    /* eval and export of the checkpoint. */
    /* inspect reads a checkpoint without building its model. */
    CHECK(run("inspect ck/model.rckpt --verify --json") == 0 && strstr(out, "checksums  all verified") &&
              strstr(out, "position   step 126, all 2 epochs done, 32000 rows seen") &&
              strstr(out, "data       16000 training rows, digest ") &&
              strstr(out, "emb.25.weight                    parameter        (1000, 8)") &&
              strstr(out, "order      shuffled: blocks of 4096 rows, 16 per buffer (--resume keeps it)") &&
              strstr(out, "\"format\": \"rckpt\", \"version\": 5") && json_num("step") == 126 &&
              json_num("shuffle_block_rows") == 4096 && json_num("shuffle_buffer_blocks") == 16 &&
              json_num("train_rows") == 16000 && json_num("params") > 26 * 8000 && strstr(out, "\"config\": {\"format\":"),
          "inspect a checkpoint: %s", out);
    CHECK(run("eval --ckpt ck --data train.rshard --holdout 0.2 --json") == 0, "eval: %s", out);
    CHECK(fabs(json_num("auc") - auc) < 1e-9 && json_num("rows") == 4000 && json_num("trained_rows_evaluated") == 0 &&
              !strstr(out, "warning"), "eval of the final checkpoint: %s", out);
    /* Evaluating rows of the training range is allowed, with a warning and the --holdout that
     * keeps to the held-out rows; other data of the same schema gets no warning. */
    CHECK(run("eval --ckpt ck --data train.rshard --json") == 0 && json_num("trained_rows_evaluated") == 16000 &&
              strstr(out, "warning: 16000 of the 20000 rows evaluated (rows [0, 16000) of train.rshard) lie in the "
                          "checkpoint's training range") && strstr(out, "--holdout 0.2 evaluates only the 4000 rows"),
          "eval on the training rows: %s", out);
    CHECK(run("eval --ckpt ck --data train.tsv --spec spec.json --holdout 0.5 --json") == 0 &&
              json_num("trained_rows_evaluated") == 6000 && strstr(out, "(rows [10000, 16000) of train.tsv)"),
          "eval on half held-out rows, from the TSV: %s", out);
    CHECK(run("eval --ckpt ck --data other.tsv --spec spec.json --json") == 0 && json_num("trained_rows_evaluated") == 0 &&
              !strstr(out, "warning"), "eval on other data: %s", out);
    CHECK(run("export --ckpt ck/model.rckpt --out npy") == 0, "export: %s", out);
    struct stat st;
    CHECK(stat(path("npy/emb.0.weight.npy"), &st) == 0 && st.st_size == 128 + 1000 * 8 * 4,
          "emb.0.weight.npy holds (1000, 8) floats after a 128-byte header");
    CHECK(stat(path("npy/top.1.bias.npy"), &st) == 0 && stat(path("npy/config.json"), &st) == 0, "export files");
    if (access("/usr/bin/python3", X_OK) == 0 &&
        system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "cd %s && /usr/bin/python3 -c \"import numpy as np; a = np.load('npy/bottom.0.weight.npy'); "
                 "assert a.shape == (32, 13) and a.dtype == np.float32, a.shape\"", dir);
        CHECK(system(cmd) == 0, "numpy loads the exported (32, 13) float32 bottom.0.weight");
    }

    /* Rejections. */
    CHECK(run("train --config small.json --data train.rshard --resume") == 2 && strstr(out, "--resume needs --ckpt"),
          "resume without ckpt: %s", out);
    CHECK(run("train --data train.rshard --eval train.rshard --holdout 0.1") == 2 && strstr(out, "not both"),
          "eval and holdout: %s", out);
    write_text("other.json", "{\"format\": \"rectrain-model\", \"version\": 1, \"model\": \"dlrm\", \"embedding\": {\"dim\": 4},"
                             " \"bottom_mlp\": [4], \"top_mlp\": [1]}");
    CHECK(run("train --config other.json --data train.rshard --ckpt ck --resume") == 1 &&
              strstr(out, "different model"), "resume with another config: %s", out);
    write_text("bad.json", "{\"format\": \"rectrain-model\", \"version\": 1, \"model\": \"dlrm\", \"bottom_mlp\": [64, 8]}");
    CHECK(run("train --config bad.json --data train.rshard") == 1 && strstr(out, "bad.json: $.bottom_mlp") &&
              strstr(out, "must equal the embedding dim"), "config error names the JSON path: %s", out);
    /* A value a float cannot hold: an lr above 0 that is 0 as a float would train nothing and
     * write a config (into checkpoints) that does not read back. Found by fuzz_model. */
    write_text("tiny.json", "{\"format\": \"rectrain-model\", \"version\": 1, \"model\": \"dcn\", \"optimizer\": "
                            "{\"sparse\": {\"kind\": \"rowwise_adagrad\", \"lr\": 5e-79}}}");
    CHECK(run("train --config tiny.json --data train.rshard") == 1 && strstr(out, "tiny.json: $.optimizer.sparse") &&
              strstr(out, "\"lr\" must be a number in (0, 1000000] as a float (got 5e-79, which is 0 as a float)"),
          "lr below the smallest float: %s", out);
    write_text("typo.json", "{\"format\": \"rectrain-model\", \"version\": 1, \"model\": \"dcn\", \"top_mlp\": [1]}");
    CHECK(run("train --config typo.json --data train.rshard") == 1 && strstr(out, "\"top_mlp\" does not apply to model \"dcn\""),
          "key of another model: %s", out);
    CHECK(run("train --data train.tsv --holdout 0.2") == 1 && strstr(out, "spec"), "TSV without a usable spec: %s", out);
    CHECK(run("eval --ckpt nowhere --data train.rshard") == 1 && strstr(out, "nowhere/model.rckpt"),
          "missing checkpoint: %s", out);
    /* A flipped byte in the middle of the checkpoint is refused, naming the damage. */
    FILE *f = fopen(path("ck/model.rckpt"), "r+b");
    if (f) {
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, n / 2, SEEK_SET);
        int c = fgetc(f);
        fseek(f, n / 2, SEEK_SET);
        fputc(c ^ 0x40, f);
        fclose(f);
    }
    CHECK(run("eval --ckpt ck --data train.rshard") == 1 && (strstr(out, "checksum") || strstr(out, "CRC")),
          "corrupt checkpoint: %s", out);
    CHECK(run("inspect ck/model.rckpt") == 0 && strstr(out, "header verified (--verify checks every tensor)"),
          "inspect without --verify reads the intact header: %s", out);
    CHECK(run("inspect ck/model.rckpt --verify") == 1 && strstr(out, "ck/model.rckpt: tensor \"") &&
              strstr(out, "fails its CRC-32") && strstr(out, "the other tensors were not checked"),
          "inspect --verify names the damaged tensor: %s", out);
    CHECK(truncate(path("ck/model.rckpt"), 1000) == 0 && run("inspect ck/model.rckpt") == 1 &&
              strstr(out, "ck/model.rckpt is truncated or incomplete"), "inspect a truncated checkpoint: %s", out);
}

/* Mixed precision on the CPU: --precision bf16 and "train": {"precision": "bf16"} train the
 * same bf16 model (the same losses, bit for bit), which is not the fp32 one but reaches its AUC
 * within 0.01 on these 4000 rows; the checkpoint records bf16 and a resume keeps it; the export
 * stays fp32; a bad precision is refused naming the flag or the JSON path. */
static void test_bf16(void) {
    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --threads 2 --loss-log f32.log --json") == 0,
          "fp32: %s", out);
    double auc32 = json_num("auc");
    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --threads 2 --precision bf16 --loss-log bf.log "
              "--ckpt ckb --npy npyb --json") == 0 && strstr(out, "train: bf16 products"), "bf16: %s", out);
    double auc16 = json_num("auc");
    CHECK(fabs(auc16 - auc32) < 0.01, "bf16 AUC %.4f vs fp32 %.4f", auc16, auc32);
    CHECK(!same_file("f32.log", "bf.log"), "bf16 losses equal fp32's: no rounding happened");
    char cfg[2048];
    snprintf(cfg, sizeof cfg, "%s", SMALL);
    char *t = strstr(cfg, "\"seed\": 3}");
    if (t) snprintf(t, sizeof cfg - (size_t)(t - cfg), "\"seed\": 3, \"precision\": \"bf16\"}}\n");
    write_text("small16.json", cfg);
    CHECK(run("train --config small16.json --data train.rshard --holdout 0.2 --threads 2 --loss-log bfc.log") == 0,
          "bf16 from the config: %s", out);
    CHECK(same_file("bf.log", "bfc.log"), "train.precision \"bf16\" and --precision bf16 train differently");
    CHECK(run("inspect ckb/model.rckpt") == 0 && strstr(out, "\"precision\":\"bf16\"") != NULL,
          "the checkpoint records bf16: %s", out);
    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --threads 2 --ckpt ckb --resume --epochs 3") == 0 &&
              strstr(out, "train: bf16 products"), "a resume keeps the checkpoint's precision: %s", out);
    FILE *f = fopen(path("npyb/bottom.0.weight.npy"), "rb");
    char head[128] = "";
    if (f) {
        size_t n = fread(head, 1, sizeof head - 1, f);
        head[n] = 0;
        fclose(f);
    }
    CHECK(strstr(head + 10, "'descr': '<f4'") != NULL, "the bf16 model exports fp32 .npy: %.60s", head + 10);
    write_text("fp16.json", "{\"format\": \"rectrain-model\", \"version\": 1, \"model\": \"dlrm\", "
                            "\"train\": {\"precision\": \"fp16\"}}");
    CHECK(run("train --config fp16.json --data train.rshard") == 1 &&
              strstr(out, "fp16.json: $.train: \"precision\" must be one of \"fp32\", \"bf16\" (got \"fp16\")"),
          "bad precision in the config: %s", out);
    CHECK(run("train --config small.json --data train.rshard --precision fp16") == 2 &&
              strstr(out, "--precision fp16: want fp32 or bf16"), "bad --precision: %s", out);
}

/* bf16 tables ("embedding": {"precision": "bf16"}): an AUC within 0.01 of fp32 tables', a run
 * stopped at step 70 and resumed continues the uninterrupted losses byte for byte (the
 * stochastic rounding's counter is restored), the checkpoint records the storage, the export
 * writes fp32 .npy of bf16 values, and an fp32 checkpoint resumes into bf16 tables; "rounding"
 * on fp32 tables is refused (bf16 tables on the GPU: tests/test_cuda_host.c). */
static void test_bf16_tables(void) {
    char cfg[2048];
    snprintf(cfg, sizeof cfg, "%s", SMALL);
    char *t = strstr(cfg, "\"dim\": 8}");
    if (t) {
        char rest[2048];
        snprintf(rest, sizeof rest, "%s", t + strlen("\"dim\": 8}"));
        snprintf(t, sizeof cfg - (size_t)(t - cfg), "\"dim\": 8, \"precision\": \"bf16\"}%s", rest);
    }
    write_text("t16.json", cfg);
    CHECK(run("train --config t16.json --data train.rshard --holdout 0.2 --threads 2 --loss-log t16.log --json") == 0,
          "bf16 tables: %s", out);
    const double auc16 = json_num("auc");
    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --threads 2 --json") == 0, "fp32: %s", out);
    CHECK(fabs(auc16 - json_num("auc")) < 0.01, "bf16 tables' AUC %.4f vs fp32's %.4f", auc16, json_num("auc"));
    CHECK(run("train --config t16.json --data train.rshard --holdout 0.2 --threads 2 --ckpt ckt --steps 70 "
              "--loss-log t16r.log") == 0, "bf16 tables, stopped at 70: %s", out);
    CHECK(run("train --config t16.json --data train.rshard --holdout 0.2 --threads 2 --ckpt ckt --resume --loss-log t16r.log") == 0,
          "bf16 tables, resumed: %s", out);
    CHECK(same_file("t16.log", "t16r.log"), "bf16 tables: the resumed losses differ from the uninterrupted run's");
    CHECK(run("inspect ckt/model.rckpt") == 0 && strstr(out, "\"embedding\":{\"dim\":8,\"pooling\":\"sum\",\"precision\":"
              "\"bf16\",\"rounding\":\"stochastic\"}"), "the checkpoint records bf16 tables: %s", out);
    CHECK(run("export --ckpt ckt --out npyt") == 0, "export: %s", out);
    FILE *f = fopen(path("npyt/emb.3.weight.npy"), "rb");
    unsigned char buf[4096];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    int is_bf16 = n > 128 && strstr((const char *)buf + 10, "'<f4'") != NULL;
    for (size_t i = 128; is_bf16 && i + 4 <= n; i += 4) is_bf16 = buf[i] == 0 && buf[i + 1] == 0; /* low halves zero */
    CHECK(is_bf16, "the export holds fp32 values that are bf16 values (%zu bytes read)", n);
    /* an fp32 checkpoint resumes into bf16 tables (rounded to nearest) */
    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --threads 2 --ckpt ck32 --steps 30") == 0, "%s", out);
    CHECK(run("train --config t16.json --data train.rshard --holdout 0.2 --threads 2 --ckpt ck32 --resume --steps 40") == 0 &&
              strstr(out, "resumed"), "fp32 checkpoint into bf16 tables: %s", out);
    write_text("round32.json", "{\"format\": \"rectrain-model\", \"version\": 1, \"model\": \"dlrm\", "
                               "\"embedding\": {\"rounding\": \"nearest\"}}");
    CHECK(run("train --config round32.json --data train.rshard") == 1 &&
              strstr(out, "round32.json: $.embedding: \"rounding\" is how bf16 tables round their updates"),
          "rounding on fp32 tables: %s", out);
}

/* Runs `rectrain ARGS` with files limited to 4-8 KiB (ulimit -f 8, in 512- or 1024-byte
 * blocks) and SIGXFSZ ignored, so that writing a larger file fails with EFBIG: a failure
 * injected half-way through an export (an embedding table's .npy is 32 KiB). */
static int run_fsize_limited(const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && ulimit -f 8 && trap '' XFSZ && REC_PROGRESS=0 exec %s %s 2>&1", dir, cli, args);
    return check_capture(cmd, out, sizeof out);
}

static int count_lines(const char *name);

/* The step a checkpoint holds (inspect --json), or -1. */
static double ckpt_step(const char *name) {
    return run("inspect %s --json", name) == 0 ? json_num("step") : -1;
}

/* Shuffled training rows (the default): --shuffle is the default's order (a.log), unlike file
 * order (n.log); a run split by --steps and --resume, mid-epoch and across the epoch boundary,
 * leaves the uninterrupted run's losses byte for byte, from the shard and from the TSV (whose
 * buffer-only order differs from its file order, c.log); a resume in the other order is
 * refused, naming the flag to drop; without either flag a resume takes the checkpoint's order.
 * Uses test_train_and_eval's files. */
static void test_shuffle(void) {
    const char *shard = "train --config small.json --data train.rshard --holdout 0.2 --threads 2";
    const char *tsv = "train --config small.json --data train.tsv --spec spec.json --holdout 0.2 --threads 2";
    CHECK(run("%s --shuffle --loss-log sh.log", shard) == 0 && same_file("a.log", "sh.log"),
          "--shuffle is the default order: %s", out);
    CHECK(!same_file("sh.log", "n.log") && count_lines("sh.log") == 126 && count_lines("n.log") == 126,
          "shuffled losses equal the file-order ones: no shuffle happened");

    /* Split at step 40 (epoch 1, row 10240 of the order: 16000 rows are 4 blocks, one window)
     * and at step 100 (epoch 2, row 9472). Skipping whole windows is test_loader's. */
    CHECK(run("%s --shuffle --steps 40 --ckpt shk --loss-log sp.log", shard) == 0 && ckpt_step("shk/model.rckpt") == 40,
          "first part: %s", out);
    CHECK(run("%s --ckpt shk --resume --steps 100 --loss-log sp.log --json", shard) == 0 && json_num("steps") == 60,
          "second part: %s", out);
    CHECK(run("%s --shuffle --ckpt shk --resume --loss-log sp.log --json", shard) == 0 && json_num("steps") == 26,
          "last part: %s", out);
    CHECK(same_file("a.log", "sp.log"), "a shuffled run split at steps 40 and 100 differs from the uninterrupted one");

    /* From the TSV: its own shuffled order, resumed exactly too. */
    CHECK(run("%s --loss-log tsh.log", tsv) == 0 && !same_file("tsh.log", "c.log") && !same_file("tsh.log", "a.log"),
          "TSV shuffled: its order is neither its file order nor the shard's: %s", out);
    CHECK(run("%s --shuffle --steps 70 --ckpt shk --overwrite --loss-log tsp.log", tsv) == 0 &&
              ckpt_step("shk/model.rckpt") == 70, "TSV first part: %s", out);
    CHECK(run("%s --ckpt shk --resume --loss-log tsp.log", tsv) == 0 && same_file("tsh.log", "tsp.log"),
          "a shuffled TSV run split at step 70 differs from the uninterrupted one: %s", out);

    /* The other order is refused; none given: the checkpoint's. */
    CHECK(run("%s --steps 30 --ckpt shk --overwrite --loss-log tsp.log", shard) == 0, "shuffled checkpoint: %s", out);
    CHECK(run("%s --ckpt shk --resume --no-shuffle", shard) == 1 &&
              strstr(out, "--resume: shk/model.rckpt was trained with its rows shuffled, and --no-shuffle would go on "
                          "through other rows than the interrupted run: drop --no-shuffle, or start afresh"),
          "resume of a shuffled run in file order: %s", out);
    CHECK(run("%s --no-shuffle --steps 30 --ckpt shk --overwrite --loss-log ns.log", shard) == 0, "file order: %s", out);
    CHECK(run("%s --ckpt shk --resume --shuffle", shard) == 1 &&
              strstr(out, "shk/model.rckpt was trained with its rows in file order, and --shuffle would go on through "
                          "other rows than the interrupted run: drop --shuffle"),
          "resume of a file-order run shuffled: %s", out);
    CHECK(run("%s --ckpt shk --resume --loss-log ns.log", shard) == 0 && same_file("n.log", "ns.log"),
          "a resume without --shuffle or --no-shuffle continues the checkpoint's file order: %s", out);
    CHECK(run("%s --shuffle --no-shuffle", shard) == 2 && strstr(out, "give --shuffle or --no-shuffle, not both"),
          "both flags: %s", out);
}

/* A resume of a run that has ended (its --steps, or all its epochs) says it is complete and
 * writes nothing: no rate of 0 samples/s, the loss log and metrics as they were. A loss log
 * that is not the resumed run's — one that ends before the checkpoint's step, starts after
 * it or jumps — is refused, naming its line, and left as it was. Uses test_train_and_eval's
 * files and test_resume_safety's (lk: 2 epochs done). */
static void test_resume_ended(void) {
    const char *base = "train --config small.json --data train.rshard --holdout 0.2 --threads 2 --ckpt ce";
    CHECK(run("%s --steps 20 --loss-log ce.log --metrics ce.jsonl --log-every 5", base) == 0, "to step 20: %s", out);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "cd %s && cp ce.log ce0.log && cp ce.jsonl ce0.jsonl", dir);
    CHECK(system(cmd) == 0, "%s", cmd);
    CHECK(run("%s --steps 20 --loss-log ce.log --metrics ce.jsonl --log-every 5 --resume --json", base) == 0 &&
              strstr(out, "train: ce/model.rckpt is already complete (step 20, and --steps 20): nothing to train, and "
                          "nothing is written") && !strstr(out, "samples/s") && strstr(out, "\"complete\": true") &&
              json_num("step") == 20 && json_num("steps") == 0,
          "a resume of a run --steps ended: %s", out);
    CHECK(same_file("ce.log", "ce0.log") && same_file("ce.jsonl", "ce0.jsonl"),
          "a resume of a complete run rewrote its loss log or metrics");
    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --threads 2 --ckpt lk --resume --metrics ce.jsonl") == 0 &&
              strstr(out, "lk/model.rckpt is already complete (step 126, all 2 epochs done)") && !strstr(out, "samples/s") &&
              same_file("ce.jsonl", "ce0.jsonl"), "a resume of a run whose epochs are done: %s", out);

    /* not this run's loss log: steps 1-2 for a checkpoint at 20; steps from 25; a jump */
    static const char *const logs[][2] = {
        {"1 0.5\n2 0.5\n", "jl.log:2: it ends at step 2, and the checkpoint is at step 20: not the loss log of the run "
                           "--resume continues; give --loss-log another path, or remove the file"},
        {"25 0.5\n26 0.5\n", "jl.log:1: it starts at step 25, after the checkpoint's step 20: not the loss log"},
        {"1 0.5\n2 0.5\n9 0.5\n", "jl.log:3: step 9 after step 2: not the loss log"},
    };
    for (int k = 0; k < 3; k++) {
        write_text("jl.log", logs[k][0]);
        CHECK(run("%s --steps 30 --loss-log jl.log --resume", base) == 1 && strstr(out, logs[k][1]) &&
                  file_size("jl.log") == (long)strlen(logs[k][0]) && ckpt_step("ce/model.rckpt") == 20,
              "a loss log of another run (%d) is refused and left as it was: %s", k, out);
    }
    write_text("jl.log", "21 0.5\n22 0.5\n"); /* a log begun by a resume at step 20: its own */
    CHECK(run("%s --steps 22 --loss-log jl.log --resume", base) == 0 && count_lines("jl.log") == 2,
          "a log that starts right after the checkpoint's step: %s", out);
}

/* Nothing silently replaced: an existing checkpoint needs --resume or --overwrite (refused
 * before any work); after --resume the loss log is cut to the resumed step, so a run split by
 * a kill and a resume leaves the uninterrupted run's log (a.log) byte for byte; a loss log
 * that is not one is refused with its line. Needs test_train_and_eval's files. */
static void test_resume_safety(void) {
    const char *base = "train --config small.json --data train.rshard --holdout 0.2 --threads 2";
    CHECK(run("%s --ckpt ow --steps 10", base) == 0 && ckpt_step("ow/model.rckpt") == 10, "first run: %s", out);
    CHECK(run("%s --ckpt ow --loss-log ow.log", base) == 1 &&
              strstr(out, "ow/model.rckpt exists (model t at step 10): add --resume to continue from it, or --overwrite to "
                          "start over and replace it") && file_size("ow.log") < 0 && ckpt_step("ow/model.rckpt") == 10,
          "an existing checkpoint without --resume or --overwrite is refused before any work: %s", out);
    CHECK(run("%s --ckpt ow --overwrite --steps 3 --json", base) == 0 && json_num("steps") == 3 &&
              ckpt_step("ow/model.rckpt") == 3, "--overwrite starts over: %s", out);
    CHECK(run("%s --ckpt ow --overwrite --resume", base) == 2 &&
              strstr(out, "--resume continues the checkpoint and --overwrite starts over: give one of them"),
          "--overwrite with --resume: %s", out);
    CHECK(run("%s --overwrite", base) == 2 && strstr(out, "--overwrite applies to --ckpt DIR and --npy DIR"),
          "--overwrite with nothing to overwrite: %s", out);

    /* A kill after step 90 whose last checkpoint is step 45 (the saved step-45 checkpoint put
     * back, as a kill between saves leaves it): the log holds steps 1-90, the resumed run redoes
     * 46-90, and the log ends as the uninterrupted run's. */
    CHECK(run("%s --ckpt lk --steps 45 --loss-log k.log", base) == 0, "run to step 45: %s", out);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "cp %s %s", path("lk/model.rckpt"), path("lk45.rckpt"));
    CHECK(system(cmd) == 0, "%s", cmd);
    CHECK(run("%s --ckpt lk --resume --steps 90 --loss-log k.log", base) == 0 && count_lines("k.log") == 90,
          "run on to step 90: %s", out);
    snprintf(cmd, sizeof cmd, "cp %s %s", path("lk45.rckpt"), path("lk/model.rckpt"));
    CHECK(system(cmd) == 0, "%s", cmd);
    CHECK(run("%s --ckpt lk --resume --loss-log k.log --json", base) == 0 && json_num("steps") == 126 - 45,
          "resume at step 45: %s", out);
    CHECK(same_file("a.log", "k.log"), "the log of a run killed after step 90 and resumed at step 45 differs from the "
          "uninterrupted run's (%d lines)", count_lines("k.log"));
    /* A log that is not this run's: refused with its line, before any step, left as it was
     * (--epochs 3: the run goes on past its 2 epochs done) */
    write_text("bad.log", "1 0.69\n2 0.68\nloss went down\n");
    CHECK(run("%s --ckpt lk --resume --epochs 3 --loss-log bad.log", base) == 1 &&
              strstr(out, "bad.log:3: not a \"STEP LOSS\" line: not the loss log of the run --resume continues; give "
                          "--loss-log another path, or remove the file") && file_size("bad.log") == 29 &&
              ckpt_step("lk/model.rckpt") == 126,
          "a loss log with a line of other text: %s", out);
    write_text("bad2.log", "1 0.69\n3 0.68\n2 0.67\n");
    CHECK(run("%s --ckpt lk --resume --epochs 3 --loss-log bad2.log", base) == 1 &&
              strstr(out, "bad2.log:2: step 3 after step 1: not the loss log"), "a loss log out of order: %s", out);
}

/* Every evaluation set that cannot be evaluated is refused before the first step: no loss log
 * or checkpoint is written. --oracle works with --eval (a line per row of the --eval file) and
 * a line count other than the evaluated file's rows is refused naming both. */
static void test_eval_checks(void) {
    write_text("none.tsv", "");
    write_spec("spec500.json", 500, 0);
    CHECK(run("prep --spec spec.json --in none.tsv --out none.rshard") == 0, "prep of no rows: %s", out);
    /* train.tsv split as --holdout 0.2 splits it: the first 16000 rows and the last 4000 */
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "cd %s && head -n 16000 train.tsv >tr16.tsv && tail -n 4000 train.tsv >ev.tsv && "
             "tail -n 4000 train.prob >ev.prob", dir);
    CHECK(system(cmd) == 0, "%s", cmd);
    CHECK(run("prep --spec spec.json --in tr16.tsv --out tr16.rshard") == 0, "prep train 16000: %s", out);
    CHECK(run("prep --spec spec.json --in ev.tsv --out ev.rshard") == 0, "prep eval: %s", out);
    CHECK(run("prep --spec spec500.json --in ev.tsv --out ev500.rshard") == 0, "prep eval 500: %s", out);
    CHECK(run("gen --rows 2k --scale 0.01 --seed 9 --test-format --out test.tsv") == 0 &&
              run("prep --spec spec.json --in test.tsv --test-format --out test.rshard") == 0, "test format: %s", out);
    const char *base = "train --config small.json --data train.rshard --threads 2 --ckpt ev --loss-log ev.log";
    struct {
        const char *args, *want;
    } refused[] = {
        {"--eval none.rshard", "--eval none.rshard holds no rows to evaluate; give the labelled evaluation split"},
        {"--eval test.rshard", "test.rshard has no labels; evaluation needs labelled rows"},
        {"--eval ev500.rshard", "ev500.rshard and train.rshard have different schemas"},
        {"--holdout 0.00001", "--holdout 1e-05 of 20000 rows leaves 0 for evaluation and 20000 for training"},
        {"--eval ev.rshard --oracle train.prob", "--oracle train.prob has 20000 lines and --eval ev.rshard has 4000 rows: "
         "the oracle holds the true click probability of each row of the --eval file (its gen --prob-out); it has a line "
         "per row of --data"},
        {"--holdout 0.2 --oracle ev.prob", "--oracle ev.prob has 4000 lines and --data train.rshard has 20000 rows"},
        {"--holdout 0.2 --oracle ev", "--oracle ev: is a directory"},
    };
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++) {
        CHECK(run("%s %s", base, refused[k].args) == 1 && strstr(out, refused[k].want) && file_size("ev.log") < 0 &&
                  file_size("ev/model.rckpt") < 0, "%s: refused before the first step: %s", refused[k].args, out);
    }
    CHECK(run("train --config small.json --data none.rshard --eval ev.rshard --loss-log ev.log") == 1 &&
              strstr(out, "none.rshard has no rows to train on") && file_size("ev.log") < 0, "no training rows: %s", out);
    CHECK(run("train --config small.json --data train.rshard --oracle ev.prob") == 2 &&
              strstr(out, "--oracle needs --eval FILE or --holdout F"), "--oracle with no evaluation: %s", out);
    /* --oracle with --eval FILE: the ceiling of FILE's rows. Training on the first 16000 rows
     * and evaluating the last 4000 as --eval gives the --holdout 0.2 run's figures exactly,
     * the oracle's included. */
    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --oracle train.prob --threads 2 --json") == 0,
          "train --holdout --oracle: %s", out);
    double auc = json_num("auc"), oracle = json_num("oracle_auc");
    CHECK(run("train --config small.json --data tr16.rshard --eval ev.rshard --oracle ev.prob --threads 2 --json") == 0,
          "train --eval --oracle: %s", out);
    CHECK(json_num("eval_rows") == 4000 && oracle > auc && auc > 0.6 && json_num("auc") == auc &&
              json_num("oracle_auc") == oracle, "--eval with --oracle: auc %.6f, oracle %.6f; with --holdout %.6f, %.6f: %s",
          json_num("auc"), json_num("oracle_auc"), auc, oracle, out);
}

/* What train and export print: the final metrics once, plurals, help text, a directory given
 * for a file. Needs test_train_and_eval's files. */
static void test_messages(void) {
    CHECK(run("train --help") == 0 && strstr(out, "on 90% of them and prints the AUC on the last 10% beside") &&
              !strstr(out, "%%"), "train --help: %s", out);
    /* The embedded default: one report of the final evaluation (stdout), not a second one in
     * other words on stderr. */
    CHECK(run("train --rows 20k --threads 1") == 0, "default job: %s", out);
    int auc_lines = 0;
    for (const char *p = out; (p = strstr(p, "auc ")) != NULL; p++) auc_lines++;
    CHECK(auc_lines == 2 && strstr(out, "\nauc 0.") && strstr(out, "(2000 eval rows)\noracle auc 0.") &&
              strstr(out, ", 1 thread, batch 1024"), "the final metrics once, and the oracle's: %s", out);
    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --threads 1 --steps 1") == 0 &&
              strstr(out, "epoch 1/2: 1 step, loss") && strstr(out, "train: t, 256 rows in ") &&
              strstr(out, ", 1 thread, batch 256") && !strstr(out, " 1 steps") && !strstr(out, " 1 threads"),
          "singular counts: %s", out);
    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --threads 1 --epochs 1 --ckpt e1") == 0 &&
              run("inspect e1/model.rckpt") == 0 && strstr(out, "position   step 63, 1 epoch done, 16000 rows seen"),
          "inspect of a one-epoch run: %s", out);
    /* A directory where a JSON file is expected says so. */
    CHECK(mkdir(path("jdir"), 0755) == 0, "mkdir");
    CHECK(run("train --config jdir --data train.rshard") == 1 &&
              strstr(out, "jdir: is a directory, not a model config file; give the path of the file itself"),
          "--config DIR: %s", out);
    CHECK(run("prep --spec jdir --in train.tsv --out j.rshard") == 1 &&
              strstr(out, "jdir: is a directory, not a prep spec file"), "--spec DIR: %s", out);
    CHECK(run("train --config small.json --data train.tsv --spec jdir --holdout 0.2") == 1 &&
              strstr(out, "jdir: is a directory, not a prep spec file"), "train --spec DIR: %s", out);
    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --plan jdir --loss-log j.log") == 1 &&
              strstr(out, "--plan jdir: is a directory; give the path of a file") && file_size("j.log") < 0,
          "--plan DIR: %s", out);
    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --plan jdir --tune --loss-log j.log") == 1 &&
              strstr(out, "--plan jdir: is a directory") && file_size("j.log") < 0, "--plan DIR --tune: %s", out);
}

/* --npy and export write DIR whole or not at all: an existing DIR with files needs
 * --overwrite (train refuses before training), and a failure half-way leaves no DIR. Needs
 * test_resume_safety's checkpoint lk. */
static void test_export_dir(void) {
    CHECK(run("export --ckpt lk --out ex") == 0 && file_size("ex/config.json") > 0 && file_size("ex.tmp") < 0,
          "export: %s", out);
    CHECK(run("export --ckpt lk --out ex") == 1 && strstr(out, "ex: exists and holds ") &&
              strstr(out, " files); add --overwrite to replace it with this one, or choose another directory"),
          "export over an export: %s", out);
    CHECK(run("export --ckpt lk --out ex --overwrite") == 0 && file_size("ex/emb.0.weight.npy") == 128 + 1000 * 8 * 4,
          "export --overwrite: %s", out);
    write_text("ex/readme.txt", "mine");
    CHECK(run("export --ckpt lk --out ex --overwrite") == 1 &&
              strstr(out, "ex: holds 'readme.txt', which the export there did not write (rectrain_export.json lists its "
                          "files)") && file_size("ex/readme.txt") == 4, "export over other files: %s", out);
    /* a user's folder of their own mydata.npy and config.json: neither deleted nor replaced */
    CHECK(mkdir(path("ud"), 0755) == 0, "mkdir ud");
    write_text("ud/mydata.npy", "mine");
    write_text("ud/config.json", "{\"mine\": 1}\n");
    CHECK(run("export --ckpt lk --out ud --overwrite") == 1 && strstr(out, "ud: holds '") &&
              strstr(out, "' and no rectrain_export.json") && strstr(out, "so it is not an earlier export") &&
              file_size("ud/mydata.npy") == 4 && file_size("ud/config.json") == 12 && file_size("ud/emb.0.weight.npy") < 0,
          "export --overwrite over a user's own files: %s", out);
    CHECK(run("export --ckpt lk --out ud") == 1 && !strstr(out, "add --overwrite"),
          "export over a user's own files does not advise --overwrite: %s", out);
    CHECK(run_fsize_limited("export --ckpt lk --out exl") == 1 && strstr(out, "File too large") &&
              file_size("exl") < 0 && file_size("exl.tmp") < 0, "export failing half-way leaves nothing: %s", out);
    const char *base = "train --config small.json --data train.rshard --holdout 0.2 --threads 2 --steps 2";
    CHECK(run("%s --npy ex --loss-log x.log", base) == 1 && strstr(out, "ex: holds 'readme.txt'") && file_size("x.log") < 0,
          "train --npy over files is refused before training: %s", out);
    CHECK(run_fsize_limited("train --config small.json --data train.rshard --holdout 0.2 --threads 2 --steps 2 --npy tx") == 1 &&
              strstr(out, "File too large") && file_size("tx") < 0 && file_size("tx.tmp") < 0,
          "train --npy failing half-way leaves nothing: %s", out);
    CHECK(run("%s --npy tx", base) == 0 && file_size("tx/config.json") > 0, "train --npy: %s", out);
    CHECK(run("%s --npy tx --overwrite", base) == 0 && file_size("tx/config.json") > 0 && file_size("tx.tmp") < 0,
          "train --npy --overwrite: %s", out);
}

/* Every model kind of configs/ trains a little and beats chance. */
static void test_models(void) {
    static const char *const cfgs[] = {"dlrm_small", "dcn_small", "deepfm_small", "wide_deep_small"};
    for (int k = 0; k < 4; k++) {
        CHECK(run("train --config %s/configs/%s.json --data train.rshard --holdout 0.2 --batch 256 --threads 2 --json",
                  src, cfgs[k]) == 0, "%s: %s", cfgs[k], out);
        double auc = json_num("auc");
        CHECK(auc > 0.62, "%s: AUC %.4f", cfgs[k], auc);
    }
}

/* kill -9 at random moments while a run saves a ~50 MB checkpoint every step: what is left in
 * the directory always loads. */
static void test_kill_during_save(void) {
    write_spec("big.json", 30000, 0);
    CHECK(run("prep --spec big.json --in train.tsv --out big.rshard") == 0, "prep big: %s", out);
    srand(11);
    int loaded = 0, tries = 4;
    for (int t = 0; t < tries; t++) {
        pid_t pid = spawn("train --config small.json --data big.rshard --ckpt kill --overwrite --ckpt-every 1 --threads 1 "
                          ">/dev/null 2>&1");
        /* wait for a first checkpoint, then a random further 0..400 ms */
        struct stat st;
        for (int i = 0; i < 600 && stat(path("kill/model.rckpt"), &st) != 0; i++) usleep(20000);
        usleep((useconds_t)(rand() % 400000));
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        if (run("eval --ckpt kill --data big.rshard --holdout 0.1") == 0) loaded++;
        else fprintf(stderr, "  after kill %d: %s\n", t, out);
    }
    CHECK(loaded == tries, "after kill -9 mid-run the checkpoint loaded %d of %d times", loaded, tries);
}

static int count_lines(const char *name) {
    FILE *f = fopen(path(name), "r");
    int n = 0, c;
    while (f && (c = fgetc(f)) != EOF) n += c == '\n';
    if (f) fclose(f);
    return n;
}

/* Ctrl-C mid-run (SIGINT; SIGTERM is handled alike): the run stops after the step in progress
 * with exit status 130 and keeps that step in its checkpoint; resumed, the losses continue
 * those of the uninterrupted run (a.log) exactly; the message says to resume with --resume in
 * place of the --overwrite the run was started with. Before any step, nothing is written. */
static void test_stop_signal(void) {
    /* --steps is the run's total: the same command resumed ends at step 126, as a.log does */
    pid_t pid = spawn("train --config small.json --data train.rshard --holdout 0.2 --threads 2 --epochs 50 --steps 126 "
                      "--ckpt sig --overwrite --loss-log g.log >sig.out 2>&1");
    for (int i = 0; i < 30000 && count_lines("g.log") < 20; i++) usleep(1000);
    kill(pid, SIGINT);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 130, "SIGINT: exit status %d, want 130",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    int k = count_lines("g.log");
    char want[200];
    snprintf(want, sizeof want, "stopped by SIGINT after step %d; step %d is saved in sig/model.rckpt: continue with the "
             "same command and --resume in place of --overwrite\n", k, k);
    read_out("sig.out");
    CHECK(strstr(out, want) != NULL && strstr(out, "auc ") == NULL, "stopped at step %d, no final evaluation: %s", k, out);
    CHECK(k >= 20 && k < 126, "the signal arrived at step %d of the 126 that a.log holds", k);
    CHECK(run("train --config small.json --data train.rshard --holdout 0.2 --threads 2 --epochs 50 --steps 126 --ckpt sig "
              "--resume --loss-log g.log --json") == 0 && json_num("steps") == 126 - k,
          "the same command resumed after SIGINT at step %d trains on to step 126: %s", k, out);
    CHECK(same_file("a.log", "g.log"), "losses resumed after SIGINT differ from the uninterrupted run's");

    /* SIGTERM while the embedded default generates its data (after the directory is made, with
     * the handler in place): no step taken, so no checkpoint; a clean exit (143). */
    pid = spawn("train --rows 200k --ckpt sig0 >sig0.out 2>&1");
    struct stat st;
    for (int i = 0; i < 30000 && stat(path("sig0"), &st) != 0; i++) usleep(1000); /* made before training */
    kill(pid, SIGTERM);
    waitpid(pid, &status, 0);
    read_out("sig0.out");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 143 &&
              strstr(out, "stopped by SIGTERM after step 0; no step was taken, so no checkpoint was written"),
          "SIGTERM before the first step: status 0x%x: %s", status, out);
    CHECK(stat(path("sig0/model.rckpt"), &st) != 0, "no checkpoint before the first step");
}

int main(void) {
    int rc = clirun_setup("rectrain_train");
    if (rc) return rc;
    test_train_and_eval();
    test_bf16();
    test_bf16_tables();
    test_shuffle();
    test_resume_safety();
    test_resume_ended();
    test_eval_checks();
    test_messages();
    test_export_dir();
    test_models();
    test_stop_signal();
    test_kill_during_save();
    clirun_cleanup();
    return check_report();
}

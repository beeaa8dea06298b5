/* What a run reports as it goes (train.h): scalars as JSON lines and as TensorBoard events.
 *
 * A TensorBoard event file is a sequence of TFRecords, each
 *     uint64 length | uint32 masked CRC-32C of the length | data | uint32 masked CRC-32C of data
 * (little-endian; masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8), the data an Event
 * protobuf (proto/tb_event.proto, TensorFlow's field numbers). The first event names the
 * format ("brain.Event:2"); each scalar is an Event with a Summary of one simple_value, as
 * torch.utils.tensorboard's SummaryWriter.add_scalar writes it (the facebookresearch/dlrm
 * reference logs its loss and AUC that way). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "rectrain/core.h"
#include "rectrain/train.h"
#include "tb_event.pb-c.h"

struct rec_scalars {
    FILE *jsonl, *tb;
    char jsonl_path[1024], tb_path[1200];
    int failed;              /* a write failed (reported at close) */
};

static double wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint32_t masked_crc(const void *p, size_t n) {
    const uint32_t c = rec_crc32c(0, p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* One TFRecord holding the packed event. */
static void put_event(rec_scalars *s, const RecTb__Event *ev) {
    const size_t n = rec_tb__event__get_packed_size(ev);
    uint8_t head[12], *data = malloc(n + 1);
    if (!data) {
        s->failed = 1;
        return;
    }
    rec_tb__event__pack(ev, data);
    const uint64_t len = n;
    memcpy(head, &len, 8);
    const uint32_t hc = masked_crc(head, 8), dc = masked_crc(data, n);
    memcpy(head + 8, &hc, 4);
    if (fwrite(head, 1, 12, s->tb) != 12 || fwrite(data, 1, n, s->tb) != n || fwrite(&dc, 1, 4, s->tb) != 4) s->failed = 1;
    free(data);
}

rec_status rec_scalars_open(rec_scalars **out, const char *jsonl_path, const char *tb_dir, int keep) {
    *out = NULL;
    rec_scalars *s = calloc(1, sizeof *s);
    if (!s) return rec_errorf(REC_ENOMEM, "out of memory");
    if (jsonl_path) {
        snprintf(s->jsonl_path, sizeof s->jsonl_path, "%s", jsonl_path);
        s->jsonl = keep ? fopen(jsonl_path, "r+") : NULL;
        if (!s->jsonl && (!keep || errno == ENOENT)) s->jsonl = fopen(jsonl_path, "w");
        if (!s->jsonl) {
            free(s);
            return rec_errorf(REC_EIO, "--metrics %s: cannot write it: %s", jsonl_path, strerror(errno));
        }
    }
    if (tb_dir) {
        char host[256] = "localhost";
        gethostname(host, sizeof host - 1);
        rec_status st = rec_mkdir_p(tb_dir, "TensorBoard directory");
        /* a file of its own: an earlier run's (a resumed run's history) of the same second is
         * never replaced, the name gets a count */
        const long long now = (long long)time(NULL);
        snprintf(s->tb_path, sizeof s->tb_path, "%s/events.out.tfevents.%lld.%s", tb_dir, now, host);
        for (int k = 1; !st && !(s->tb = fopen(s->tb_path, "wbx")) && errno == EEXIST && k < 1000; k++)
            snprintf(s->tb_path, sizeof s->tb_path, "%s/events.out.tfevents.%lld.%s.%d", tb_dir, now, host, k);
        if (!st && !s->tb)
            st = rec_errorf(REC_EIO, "--tensorboard %s: cannot write %s: %s", tb_dir, s->tb_path, strerror(errno));
        if (st) {
            if (s->jsonl) fclose(s->jsonl);
            free(s);
            return st;
        }
        RecTb__Event ev = REC_TB__EVENT__INIT;
        ev.wall_time = wall_time();
        ev.what_case = REC_TB__EVENT__WHAT_FILE_VERSION;
        ev.file_version = "brain.Event:2";
        put_event(s, &ev);
    }
    *out = s;
    return REC_OK;
}

/* The step and group of metrics record `line` (a JSON line of rec_scalars_write or
 * rec_scalars_write_calibration) into *step and group (cap bytes); 0 when it is not one. */
static int parse_record(const char *line, int64_t *step, char *group, size_t cap) {
    cJSON *o = cJSON_Parse(line);
    const cJSON *st = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
    const cJSON *g = o ? cJSON_GetObjectItemCaseSensitive(o, "group") : NULL;
    const int ok = cJSON_IsObject(o) && cJSON_IsNumber(st) && cJSON_IsString(g);
    if (ok) *step = (int64_t)st->valuedouble, snprintf(group, cap, "%s", g->valuestring);
    cJSON_Delete(o);
    return ok;
}

enum { RESUME_TAIL = 8 }; /* records at the resumed step looked at: a run's end writes at most 3 */

rec_status rec_scalars_resume(rec_scalars *s, int64_t resumed, int end_train) {
    if (!s) return REC_OK;
    if (s->tb) { /* TensorBoard drops the events of steps >= resumed + 1 it has read before */
        RecTb__SessionLog sl = REC_TB__SESSION_LOG__INIT;
        sl.status = REC_TB__SESSION_LOG__SESSION_STATUS__START;
        RecTb__Event ev = REC_TB__EVENT__INIT;
        ev.wall_time = wall_time();
        ev.step = resumed + 1;
        ev.what_case = REC_TB__EVENT__WHAT_SESSION_LOG;
        ev.session_log = &sl;
        put_event(s, &ev);
        if (fflush(s->tb) != 0) s->failed = 1;
    }
    if (!s->jsonl) return REC_OK;
    FILE *f = s->jsonl;
    const char *path = s->jsonl_path;
    char *line = NULL, group[32];
    size_t cap = 0;
    ssize_t len;
    long long lineno = 0;
    int64_t step, prev = INT64_MIN;
    long keep = 0;     /* bytes of the records kept */
    int open_end = 0;  /* the last record kept has no '\n' */
    /* the last records at the resumed step, in order: where each starts and its group */
    long at[RESUME_TAIL];
    char what[RESUME_TAIL][32];
    int n_at = 0;
    rec_status st = REC_OK;
    while ((len = getline(&line, &cap, f)) > 0) {
        lineno++;
        if (!line[strspn(line, " \t\r\n")]) { /* a blank line: kept as it is */
            keep += (long)len;
            continue;
        }
        if (!parse_record(line, &step, group, sizeof group)) {
            if (line[len - 1] != '\n') break; /* the last line, cut short by a kill */
            st = rec_errorf(REC_EFORMAT, "%s:%lld: not a metrics record (a JSON object with \"step\" and \"group\"); "
                            "--resume keeps the file's records up to the resumed step, so it must be this run's metrics: "
                            "give --metrics another path, or remove the file", path, lineno);
            break;
        }
        if (step < prev) {
            st = rec_errorf(REC_EFORMAT, "%s:%lld: step %lld after step %lld: not the metrics of one run; give --metrics "
                            "another path, or remove the file", path, lineno, (long long)step, (long long)prev);
            break;
        }
        if (step > resumed) break;
        if (step == resumed) { /* the last RESUME_TAIL of them */
            if (n_at == RESUME_TAIL) {
                memmove(at, at + 1, sizeof at[0] * (RESUME_TAIL - 1));
                memmove(what, what + 1, sizeof what[0] * (RESUME_TAIL - 1));
                n_at--;
            }
            at[n_at] = keep;
            snprintf(what[n_at], sizeof what[n_at], "%s", group);
            n_at++;
        }
        prev = step;
        keep += (long)len;
        open_end = line[len - 1] != '\n';
    }
    free(line);
    if (st) return st;
    /* The interrupted run's end at the resumed step, last to first: its calibration curve, the
     * final evaluation before it, the training record of the steps since the last one. */
    int k = n_at;
    if (k > 0 && !strcmp(what[k - 1], "calibration")) {
        while (k > 0 && !strcmp(what[k - 1], "calibration")) k--;
        if (k > 0 && !strcmp(what[k - 1], "eval")) k--;
    }
    if (end_train && k > 0 && !strcmp(what[k - 1], "train")) k--;
    if (k < n_at) keep = at[k], open_end = 0;
    if (ftruncate(fileno(f), keep) != 0 || fseek(f, 0, SEEK_END) != 0 || (open_end && fputc('\n', f) == EOF) ||
        fflush(f) != 0)
        return rec_errorf(REC_EIO, "%s: cannot cut the metrics at step %lld: %s", path, (long long)resumed, strerror(errno));
    return REC_OK;
}

static void json_num(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.9g", v);
    else fputs("null", f);
}

rec_status rec_scalars_write(rec_scalars *s, int64_t step, const char *group, int n, const char *const *names,
                             const double *values) {
    if (!s) return REC_OK;
    if (s->jsonl) {
        fprintf(s->jsonl, "{\"step\": %lld, \"group\": \"%s\"", (long long)step, group);
        for (int i = 0; i < n; i++) {
            fprintf(s->jsonl, ", \"%s\": ", names[i]);
            json_num(s->jsonl, values[i]);
        }
        fputs("}\n", s->jsonl);
        if (fflush(s->jsonl) != 0) s->failed = 1;
    }
    if (s->tb) {
        const double now = wall_time();
        for (int i = 0; i < n; i++) {
            char tag[128];
            snprintf(tag, sizeof tag, "%s/%s", group, names[i]);
            RecTb__Summary__Value v = REC_TB__SUMMARY__VALUE__INIT, *vp = &v;
            v.tag = tag;
            v.value_case = REC_TB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
            v.simple_value = (float)values[i];
            RecTb__Summary sum = REC_TB__SUMMARY__INIT;
            sum.n_value = 1;
            sum.value = &vp;
            RecTb__Event ev = REC_TB__EVENT__INIT;
            ev.wall_time = now;
            ev.step = step;
            ev.what_case = REC_TB__EVENT__WHAT_SUMMARY;
            ev.summary = &sum;
            put_event(s, &ev);
        }
        if (fflush(s->tb) != 0) s->failed = 1;
    }
    return REC_OK;
}

rec_status rec_scalars_write_calibration(rec_scalars *s, int64_t step, const rec_metrics *m) {
    if (!s || !s->jsonl || m->n_buckets < 1) return REC_OK;
    fprintf(s->jsonl, "{\"step\": %lld, \"group\": \"calibration\", \"buckets\": [", (long long)step);
    for (int b = 0; b < m->n_buckets; b++) {
        fputs(b ? ", [" : "[", s->jsonl);
        json_num(s->jsonl, m->bucket_pred[b]);
        fputs(", ", s->jsonl);
        json_num(s->jsonl, m->bucket_ctr[b]);
        fprintf(s->jsonl, ", %lld]", (long long)m->bucket_n[b]);
    }
    fputs("]}\n", s->jsonl);
    if (fflush(s->jsonl) != 0) s->failed = 1;
    return REC_OK;
}

const char *rec_scalars_tb_path(const rec_scalars *s) { return s && s->tb ? s->tb_path : ""; }

rec_status rec_scalars_close(rec_scalars *s) {
    if (!s) return REC_OK;
    int bad = s->failed;
    if (s->jsonl && fclose(s->jsonl) != 0) bad = 1;
    if (s->tb && fclose(s->tb) != 0) bad = 1;
    rec_status st = bad ? rec_errorf(REC_EIO, "cannot write the metrics to %s%s%s (disk full?)", s->jsonl_path,
                                     s->jsonl_path[0] && s->tb_path[0] ? " or " : "", s->tb_path)
                        : REC_OK;
    free(s);
    return st;
}

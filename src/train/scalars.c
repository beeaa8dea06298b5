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

rec_status rec_scalars_open(rec_scalars **out, const char *jsonl_path, const char *tb_dir) {
    *out = NULL;
    rec_scalars *s = calloc(1, sizeof *s);
    if (!s) return rec_errorf(REC_ENOMEM, "out of memory");
    if (jsonl_path) {
        snprintf(s->jsonl_path, sizeof s->jsonl_path, "%s", jsonl_path);
        if (!(s->jsonl = fopen(jsonl_path, "w"))) {
            free(s);
            return rec_errorf(REC_EIO, "--metrics %s: cannot write it: %s", jsonl_path, strerror(errno));
        }
    }
    if (tb_dir) {
        char host[256] = "localhost";
        gethostname(host, sizeof host - 1);
        rec_status st = rec_mkdir_p(tb_dir, "TensorBoard directory");
        snprintf(s->tb_path, sizeof s->tb_path, "%s/events.out.tfevents.%lld.%s", tb_dir, (long long)time(NULL), host);
        if (!st && !(s->tb = fopen(s->tb_path, "wb")))
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
    rec_status st = bad ? rec_errorf(REC_EIO, "writing %s%s%s failed (disk full?)", s->jsonl_path,
                                     s->jsonl_path[0] && s->tb_path[0] ? " or " : "", s->tb_path)
                        : REC_OK;
    free(s);
    return st;
}

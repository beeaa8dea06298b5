/* rectrain — checkpoints: a model's config, training position and every tensor,
 * validated on read. */
#ifndef RECTRAIN_CKPT_H
#define RECTRAIN_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "rectrain/model.h"
#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- checkpoints --------------------------------------------------------------------------
 * A checkpoint file holds the model's canonical config JSON, the training position and every
 * named tensor of rec_model_tensors (parameters and optimizer state):
 *
 *   magic "RCKPT001" | u32 version | u32 header bytes | header: meta + config JSON + tensor
 *   directory (name, role, ndim, shape, file offset, bytes, CRC-32 per tensor) | CRC-32 of
 *   the header | tensor data, each 64-byte aligned | trailer magic "RCKPTEND"
 *
 * Saving writes PATH.tmp, fsyncs it, renames it over PATH and fsyncs the directory, so a
 * crash at any moment leaves either the previous checkpoint or the new one, never a mix.
 * Loading checks magic, version, sizes, every CRC, and that the names, roles and shapes match
 * the model's, refusing anything else with REC_EFORMAT / REC_EINVAL and a message naming the
 * file and the tensor. */
typedef struct rec_ckpt_meta {
    int64_t step;            /* optimizer steps taken */
    int64_t epoch;           /* epoch in progress (0-based) */
    int64_t row;             /* next training row of that epoch (relative to the train range) */
    int64_t rows_seen;       /* training rows processed in total */
    uint64_t seed;
    /* What the run trained on, so that --resume refuses other data: the rows of its training
     * range and the rec_batch_digest of their first (up to REC_CKPT_DIGEST_ROWS) rows. Both 0
     * in a version-1 checkpoint, which did not record them. */
    int64_t train_rows;
    uint64_t data_digest;
    /* The order of the training rows (rec_shuffle): its K and W, both 0 for file order (and in
     * checkpoints of versions 1 and 2, which were all trained in file order). A resume in
     * another order would continue another sequence of rows, and is refused. */
    int64_t shuffle_block_rows;
    int64_t shuffle_buffer_blocks;
    /* A sharded save (under mpirun, dist.h; all 0 in a whole model's checkpoint and in those
     * of versions 1 to 3): the ranks that saved it, the save's id (which names its files), and
     * which file this is: 0 the main one (dense part), r + 1 rank r's shard of the tables. */
    int64_t shards;
    uint64_t shard_id;
    int64_t shard;
    /* The run's losses so far, so that a resumed run reports what the uninterrupted one does:
     * the sum of the losses of epoch `epoch`'s steps before `row` and their count (its mean is
     * the epoch's loss), and of the steps since the last training record of --metrics (the
     * next record's mean takes them in). A count of -1 (sum 0): not recorded, as in
     * checkpoints of versions 1 to 4. */
    double epoch_loss_sum;
    int64_t epoch_loss_steps;
    double record_loss_sum;
    int64_t record_loss_steps;
} rec_ckpt_meta;

/* Rows whose rec_batch_digest identifies a checkpoint's training data. */
#define REC_CKPT_DIGEST_ROWS 4096

/* The files a --ckpt directory's saves write, for the output guard (core.h): model.rckpt, and
 * under mpirun the sharded saves' model.ID.R-of-N.rckpt and model.ID.plan.json. NULL-ended. */
extern const char *const rec_ckpt_files[];
/* The first 8 bytes of a checkpoint file (docs/formats.md). */
#define REC_CKPT_MAGIC "RCKPT001"
/* The checkpoint file inside a --ckpt directory: DIR/model.rckpt. Writes into buf (cap). */
void rec_ckpt_path(const char *dir, char *buf, size_t cap);
rec_status rec_ckpt_save(const char *path, const rec_model *m, const rec_ckpt_meta *meta);
/* A checkpoint a run would save in `dir` (DIR/model.rckpt) exists: refused (REC_EINVAL) naming it, its model
 * and step, and `how` to go on ("add --overwrite to replace it"), as saving would silently
 * replace the work it holds. REC_OK where there is none. */
rec_status rec_ckpt_check_absent(const char *dir, const char *how);
/* Saves the given tensors (not a model's: a rank's shard of the tables) in the same format,
 * crash-safe alike, with config c and meta as they are. */
rec_status rec_ckpt_save_tensors(const char *path, const rec_model_config *c, const rec_ckpt_meta *meta,
                                 const rec_tensor *ts, int n);
/* Reads the config stored in a checkpoint (to build the model before loading) and, when meta
 * is not NULL, its meta. c is overwritten; free with rec_model_config_free. */
rec_status rec_ckpt_read_config(const char *path, rec_model_config *c, rec_ckpt_meta *meta);
/* Loads a checkpoint into a model built from that config; checks everything first, so on
 * error the model is unchanged. A sharded model (rec_model_init_sharded) takes the dense part
 * of a whole model's checkpoint and of a sharded save's main file; its tables are loaded by
 * the executor (rec_exec_load). A model with tables refuses a sharded save, naming it. */
rec_status rec_ckpt_load(const char *path, rec_model *m, rec_ckpt_meta *meta);
/* As rec_ckpt_load, but a sharded save's main file also loads into a model with tables,
 * leaving its tables as they are: rec_dist_ckpt_load (dist.h) fills them from the rank files. */
rec_status rec_ckpt_load_except_tables(const char *path, rec_model *m, rec_ckpt_meta *meta);

/* A checkpoint opened for reading tensors one by one (a sharded save's files, re-sharded). */
typedef struct rec_ckpt_reader rec_ckpt_reader;
/* Opens and maps path and checks its structure and header CRC (as rec_ckpt_load does). */
rec_status rec_ckpt_reader_open(rec_ckpt_reader **out, const char *path);
const rec_ckpt_meta *rec_ckpt_reader_meta(const rec_ckpt_reader *r);
/* The stored config, parsed into c (free with rec_model_config_free). */
rec_status rec_ckpt_reader_config(const rec_ckpt_reader *r, rec_model_config *c);
/* Tensor `name`'s numel floats, mapped read-only, its CRC-32 checked: REC_EINVAL when the
 * file has no such tensor or another size, REC_EFORMAT when it is corrupt, naming both. */
rec_status rec_ckpt_reader_tensor(rec_ckpt_reader *r, const char *name, int64_t numel, const float **data);
void rec_ckpt_reader_close(rec_ckpt_reader *r);
/* What a checkpoint holds, read without building its model (rectrain inspect). */
typedef struct rec_ckpt_tensor_info {
    char name[96];
    rec_tensor_role role;
    int ndim;                  /* 1 or 2 */
    int64_t shape[2];          /* shape[1] = 0 when ndim = 1 */
    uint64_t bytes;            /* 4 per float */
} rec_ckpt_tensor_info;

typedef struct rec_ckpt_info {
    uint32_t version;          /* format version of the file */
    uint64_t file_bytes;
    rec_ckpt_meta meta;
    rec_model_config config;   /* the stored config, tables bound */
    int n_tensors;
    rec_ckpt_tensor_info *tensors; /* (n_tensors), in file order */
} rec_ckpt_info;

/* Reads a checkpoint's header: the structure and header CRC are checked as rec_ckpt_load
 * checks them; with `verify`, every tensor's CRC-32 as well. Free with rec_ckpt_info_free
 * (also safe after a failure). */
rec_status rec_ckpt_inspect(const char *path, int verify, rec_ckpt_info *info);
void rec_ckpt_info_free(rec_ckpt_info *info);

#ifdef __cplusplus
}
#endif
#endif

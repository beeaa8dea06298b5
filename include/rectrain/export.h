/* rectrain — a model's parameters for other tools: .npy files, an ONNX graph, and the
 * rows it scores as the graph's inputs. */
#ifndef RECTRAIN_EXPORT_H
#define RECTRAIN_EXPORT_H

#include <stdint.h>

#include "rectrain/data.h"
#include "rectrain/model.h"
#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- .npy export --------------------------------------------------------------------------
 * Writes one float32 array in NumPy's .npy format (version 1.0, little-endian '<f4', C order),
 * which numpy.load and torch.from_numpy(numpy.load(...)) read: from data, or (data NULL) from
 * the bf16 values data16, widened exactly. */
rec_status rec_npy_write(const char *path, const float *data, const uint16_t *data16, int ndim, const int64_t *shape);


/* Writes every parameter as DIR/NAME.npy plus DIR/config.json, and first the list of those
 * files as DIR/rectrain_export.json, whole or not at all: into DIR.tmp beside DIR (parents
 * made as needed), renamed to DIR once every file is written; on any failure DIR.tmp is
 * removed and DIR is left as it was. A DIR that holds files is refused (REC_EINVAL, saying to
 * add --overwrite) unless `overwrite`, and then replaced only when it holds nothing but the
 * files its own rectrain_export.json lists (a folder without that list is no export's and is
 * refused, naming a file in it, whatever the names). A DIR.tmp left by a killed export (its
 * list and listed files) is cleared; anything else there is refused. REC_EIO names the path
 * that could not be made, written or renamed. */
rec_status rec_export_npy(const rec_model *m, const char *dir, int overwrite);
/* Every check of rec_export_npy(dir, overwrite) that needs no model, writing nothing (DIR's
 * parents aside, which it makes): what a job calls before its work, so that an export that
 * cannot happen fails in the first second, not after the training it would keep. */
rec_status rec_export_check(const char *dir, int overwrite);

/* Where an ONNX export puts the parameters' values: in the model file while it stays under
 * protobuf's 2 GiB limit on one message and in PATH.data beside it (ONNX external data) for a
 * larger model (AUTO), or in PATH.data at any size (EXTERNAL). */
typedef enum { REC_ONNX_DATA_AUTO = 0, REC_ONNX_DATA_EXTERNAL = 1 } rec_onnx_data;
#define REC_ONNX_DATA_SUFFIX ".data" /* the side file: PATH followed by it */

/* Writes the model as an ONNX file (opset 17, fp32 initializers) that scores rows as
 * rec_predict does: inputs dense (batch, Dn) float32 and, per sparse feature f, ids_{f} (nnz)
 * and offsets_{f} (batch + 1) int64; outputs logit and probability (batch) float32 (graph in
 * src/train/onnx.c, for users in docs/commands.md). The parameters' values are in PATH or in
 * PATH.data as `data` says (the layout of onnx.save(..., save_as_external_data=True)). Each
 * file appears whole or not at all (rec_atomic_file), PATH.data first. REC_EUNSUPPORTED for
 * what rec_export_onnx_check refuses, REC_EIO naming the file that could not be written. */
rec_status rec_export_onnx(const rec_model *m, const char *path, rec_onnx_data data);
/* Whether rec_export_onnx(m, path, data) writes PATH.data (0 also for a model it refuses):
 * what a caller checks for an existing file before the export. */
int rec_export_onnx_external(const rec_model *m, const char *path, rec_onnx_data data);
/* The refusals of rec_export_onnx that need no file: a model whose products are bf16 (the
 * graph is fp32 and would not score as predict does) and a kind the graph cannot express. */
rec_status rec_export_onnx_check(const rec_model *m);
/* Writes the rows of d, in input order and in batches of `batch`, as the ONNX graph's inputs
 * (dense, and per feature ids and offsets) to one binary file (layout in src/train/feed.c),
 * whole or not at all: what `predict --feed-out` writes so that an ONNX server or a test
 * scores exactly the rows predict scores. REC_EIO names the file that could not be written. */
rec_status rec_feed_write(rec_dataset *d, int64_t batch, const char *path);

#ifdef __cplusplus
}
#endif
#endif

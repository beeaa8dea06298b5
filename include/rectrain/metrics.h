/* rectrain — evaluation metrics of a model's scores: AUC, logloss, NE, calibration. */
#ifndef RECTRAIN_METRICS_H
#define RECTRAIN_METRICS_H

#include <stdint.h>

#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- evaluation metrics -------------------------------------------------------------------
 * An accumulator of (logit, label) pairs over a whole evaluation set, then exact metrics:
 *   auc          ROC-AUC = P(score of a random positive > that of a random negative), ties
 *                counted 1/2 (the Mann-Whitney statistic over tie groups); NaN when the set
 *                has only one class
 *   logloss      mean BCE of sigmoid(logit) (the stable form of nn.h)
 *   ne           normalized entropy: logloss / H(ctr), H(p) = -p ln p - (1-p) ln(1-p)
 *                (He et al. 2014, "Practical lessons from predicting clicks on ads at Facebook")
 *   accuracy     share of rows with (sigmoid(logit) > 0.5) == (label > 0.5)
 *   calibration  mean predicted probability / mean label (1 = calibrated)
 * Labels are 0/1 (soft labels count as their value in logloss, ctr and calibration, as
 * label > 0.5 in auc and accuracy). */
enum { REC_CALIB_BUCKETS = 10 };

typedef struct rec_metrics {
    int64_t n;
    double auc, logloss, ne, accuracy, calibration;
    double ctr;          /* mean label */
    double mean_pred;    /* mean predicted probability */
    /* the calibration curve: the rows in REC_CALIB_BUCKETS groups of equal size by predicted
     * probability, each with its mean prediction and observed CTR (rec_eval_acc_finish only) */
    int n_buckets;
    double bucket_pred[REC_CALIB_BUCKETS], bucket_ctr[REC_CALIB_BUCKETS];
    int64_t bucket_n[REC_CALIB_BUCKETS];
} rec_metrics;

typedef struct rec_eval_acc rec_eval_acc;

rec_status rec_eval_acc_init(rec_eval_acc **out, int64_t expected_rows);
void rec_eval_acc_free(rec_eval_acc *a);
void rec_eval_acc_reset(rec_eval_acc *a);
/* Appends n pairs (grows as needed; REC_ENOMEM on failure). */
rec_status rec_eval_acc_add(rec_eval_acc *a, int64_t n, const float *logits, const float *labels);
/* Computes the metrics of everything added since the last reset (sorts a copy; O(n log n)). */
rec_status rec_eval_acc_finish(rec_eval_acc *a, rec_metrics *out);
/* The same metrics from plain arrays, double precision, O(n^2) AUC: the reference. */
void rec_metrics_ref(int64_t n, const double *scores, const double *labels, rec_metrics *out);
/* The click probability of a logit: 1 / (1 + e^-z), without overflow. */
double rec_sigmoid(double z);

#ifdef __cplusplus
}
#endif
#endif

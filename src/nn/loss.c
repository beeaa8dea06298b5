/* Sigmoid + binary cross-entropy on logits, averaged over the batch (nn.h).
 *
 * Per sample, with z the logit and y the label:
 *   l = -y log s(z) - (1 - y) log(1 - s(z)) = max(z, 0) - z y + log1p(exp(-|z|)),
 * the form of PyTorch's BCEWithLogitsLoss: exp never overflows and log never sees 0, so a
 * logit of +-1000 gives a finite loss and gradient. The gradient of the mean is
 * (s(z) - y) / B, with s computed from exp(-|z|) for the same reason. */
#include <math.h>

#include "rectrain/nn.h"

static double sigmoid_stable(double z) {
    double e = exp(-fabs(z));  /* in (0, 1] */
    return z >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

/* Accumulates in double; REC_EINVAL for B < 1 or a label outside [0, 1] (NaN included). */
rec_status rec_bce_forward_backward(int B, const float *logits, const float *labels,
                                    double *loss, float *dlogits) {
    if (B < 1) return rec_errorf(REC_EINVAL, "BCE loss: batch size %d, need >= 1", B);
    double sum = 0.0;
    for (int i = 0; i < B; i++) {
        double z = logits[i], y = labels[i];
        if (!(y >= 0.0 && y <= 1.0))
            return rec_errorf(REC_EINVAL, "BCE loss: label %d is %g; labels must lie in [0, 1]", i, y);
        sum += fmax(z, 0.0) - z * y + log1p(exp(-fabs(z)));
        if (dlogits) dlogits[i] = (float)((sigmoid_stable(z) - y) / B);
    }
    *loss = sum / B;
    return REC_OK;
}

double rec_bce_slice_sum(int64_t n, const float *logits, const float *labels, double global_n, float *dlogits) {
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        const double z = logits[i], y = labels[i];
        sum += (z > 0 ? z : 0) - z * y + log1p(exp(-fabs(z)));
        dlogits[i] = (float)((1.0 / (1.0 + exp(-z)) - y) / global_n);
    }
    return sum;
}

/* float64 reference written from the unfused definition where it is safe (|z| < 30) and the
 * stable form otherwise; returns the mean loss and writes dlogits (B) unless NULL. */
double rec_bce_ref(int B, const double *logits, const double *labels, double *dlogits) {
    double sum = 0.0;
    for (int i = 0; i < B; i++) {
        double z = logits[i], y = labels[i];
        if (fabs(z) < 30.0) {
            double s = 1.0 / (1.0 + exp(-z));
            sum += -y * log(s) - (1.0 - y) * log(1.0 - s);
            if (dlogits) dlogits[i] = (s - y) / B;
        } else {
            sum += fmax(z, 0.0) - z * y + log1p(exp(-fabs(z)));
            if (dlogits) dlogits[i] = ((z > 0 ? 1.0 : 0.0) - y) / B;
        }
    }
    return sum / B;
}

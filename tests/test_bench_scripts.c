/* The PyTorch peer's guards (bench/torch_peer.sh, which the bench/..._vs_pytorch.sh scripts
 * source): a missing torch, scikit-learn or OpenBLAS stops the comparison with exit status 2
 * and the Debian package to install, and OpenBLAS is told this CPU's core type unless the
 * caller chose one; the GPU scripts need a torch that sees the GPU. REC_PEER_PY and REC_PEER_BLAS stand in for the interpreter and libblas. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static char out[4096];

/* Runs `body` in bash after sourcing torch_peer.sh with environment `env`; returns the exit
 * status, with stdout and stderr in `out`. */
static int peer(const char *env, const char *body) {
    const char *root = getenv("REC_SOURCE_DIR");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && env -u OPENBLAS_CORETYPE %s bash -c '. bench/torch_peer.sh; %s' 2>&1",
             root && *root ? root : ".", env, body);
    return check_capture(cmd, out, sizeof out);
}

int main(void) {
    CHECK(peer("REC_PEER_PY=/bin/false", "need_torch; echo ran on") == 2 &&
              strstr(out, "the PyTorch peer needs Debian's python3-torch: apt-get install python3-torch python3-numpy") &&
              !strstr(out, "ran on"),
          "no torch: %s", out);
    CHECK(peer("REC_PEER_PY=/bin/true", "need_torch; echo ran on") == 0 && strstr(out, "ran on"), "torch: %s", out);
    CHECK(peer("REC_PEER_PY=/bin/false", "need_sklearn") == 2 &&
              strstr(out, "the PyTorch peer's AUC needs scikit-learn: apt-get install python3-sklearn"),
          "no scikit-learn: %s", out);
    CHECK(peer("REC_PEER_BLAS=/nonexistent/libblas.so.3", "need_blas; echo ran on") == 2 &&
              strstr(out, "would multiply on the reference BLAS: apt-get install libopenblas0-pthread") &&
              !strstr(out, "ran on"),
          "no OpenBLAS: %s", out);
    CHECK(peer("REC_PEER_BLAS=/bin/sh", "need_blas; echo core $OPENBLAS_CORETYPE") == 0 && strstr(out, "core SkylakeX"),
          "OpenBLAS told the core type: %s", out);
    CHECK(peer("REC_PEER_BLAS=/bin/sh OPENBLAS_CORETYPE=Haswell", "need_blas; echo core $OPENBLAS_CORETYPE") == 0 &&
              strstr(out, "core Haswell"),
          "the caller's core type is kept: %s", out);
    CHECK(peer("REC_PEER_PY=/bin/false", "need_torch_gpu; echo ran on") == 2 &&
              strstr(out, "the GPU peer needs a PyTorch that sees the GPU") && !strstr(out, "ran on"),
          "no GPU torch: %s", out);
    CHECK(peer("REC_PEER_PY=/bin/true", "need_torch_gpu; echo ran on") == 0 && strstr(out, "ran on"), "GPU torch: %s", out);
    return check_report();
}

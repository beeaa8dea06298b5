/* The one checking macro for MPI calls (STYLE.md): a failing call returns REC_EIO from the
 * enclosing function with the call, file and line, and MPI's own message. Communicators use
 * MPI_ERRORS_RETURN (rec_dist_init), so a failure reaches here instead of aborting. */
#ifndef RECTRAIN_MPI_CHECK_H
#define RECTRAIN_MPI_CHECK_H

#include <mpi.h>

#include "rectrain/status.h"

/* The training's communicator: MPI_COMM_WORLD, or the trainers' alone in a job that
 * `rectrain cluster` started across hosts (rec_dist_join: its services are ranks of the
 * world, not of the training's collectives). Every collective of the training runs on it. */
MPI_Comm rec__comm(void);

rec_status rec__mpi_fail(int rc, const char *call, const char *file, int line);
/* MPI_Win_allocate of `bytes` on every rank (collective), its failure explained: Open MPI 4
 * has no one-sided component of its own choosing for ranks on several hosts joined by TCP. */
rec_status rec__win_allocate(size_t bytes, float **base, MPI_Win *win);

#define MPI_TRY(call)                                                          \
    do {                                                                       \
        const int mpi_rc_ = (call);                                            \
        if (mpi_rc_ != MPI_SUCCESS) return rec__mpi_fail(mpi_rc_, #call, __FILE__, __LINE__); \
    } while (0)

#endif

/* The MPI job (dist.h): start, failure, measured bandwidths, agreement checks. */
#define _GNU_SOURCE /* sched_getaffinity */
#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_check.h"
#include "rectrain/core.h"
#include "rectrain/dist.h"

rec_status rec__mpi_fail(int rc, const char *call, const char *file, int line) {
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return rec_errorf(REC_EIO, "%s failed (%s:%d): %s", call, file, line, msg);
}

rec_status rec__win_allocate(size_t bytes, float **base, MPI_Win *win) {
    const int rc = MPI_Win_allocate((MPI_Aint)(bytes ? bytes : sizeof(float)), sizeof(float), MPI_INFO_NULL,
                                    rec__comm(), base, win);
    if (rc == MPI_SUCCESS) return REC_OK;
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return rec_errorf(REC_EIO, "MPI_Win_allocate failed: %s; the rows are fetched by one-sided gets, and with ranks "
                      "on several hosts joined by TCP only Open MPI 4 needs its point-to-point one-sided component: "
                      "add `--mca osc pt2pt` to mpirun", msg);
}

/* The training's communicator (mpi_check.h), and, in a job of several roles, how many trainers
 * it holds (0: not such a job). */
static MPI_Comm comm = MPI_COMM_NULL;
static int joined_trainers;

MPI_Comm rec__comm(void) { return comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm; }

int rec_dist_launched(void) {
    if (joined_trainers) return joined_trainers > 1;
    return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMIX_RANK") != NULL || getenv("PMI_RANK") != NULL;
}

/* MPI_Init once, with at least `threads` (an MPI_THREAD_* level); rank and size in c. */
static rec_status start(int threads, MPI_Comm c, int *rank, int *size) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided;
        if (MPI_Init_thread(NULL, NULL, threads, &provided) != MPI_SUCCESS)
            return rec_errorf(REC_EIO, "MPI_Init failed: is this rectrain started by Open MPI's mpirun?");
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        if (provided < threads)
            return rec_errorf(REC_EUNSUPPORTED, "this MPI library gives no MPI_THREAD_MULTIPLE, which a service of the "
                              "job needs to wait for the job's end beside its work (Open MPI 4 gives it)");
    }
    MPI_TRY(MPI_Comm_rank(c, rank));
    MPI_TRY(MPI_Comm_size(c, size));
    return REC_OK;
}

rec_status rec_dist_init(int *rank, int *size) { return start(MPI_THREAD_FUNNELED, rec__comm(), rank, size); }

void rec_dist_abort(int rank, const char *msg) {
    fprintf(stderr, "rectrain: rank %d: %s\n", rank, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

void rec_dist_finalize(void) {
    if (joined_trainers) return; /* the job's other roles still run: rec_dist_leave ends it */
    int inited = 0, done = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&done);
    if (inited && !done) MPI_Finalize();
}

/* ---- a job of several roles (`rectrain cluster` across hosts) ---- */

rec_status rec_dist_world(int *rank, int *size) { return start(MPI_THREAD_MULTIPLE, MPI_COMM_WORLD, rank, size); }

rec_status rec_dist_world_allgather(const void *mine, size_t bytes, void *all) {
    if (bytes > INT_MAX) return rec_errorf(REC_EINVAL, "rec_dist_world_allgather: %zu bytes, more than one call sends", bytes);
    MPI_TRY(MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD));
    return REC_OK;
}

rec_status rec_dist_join(int trainer) {
    MPI_Comm c;
    MPI_TRY(MPI_Comm_split(MPI_COMM_WORLD, trainer ? 0 : 1, 0, &c)); /* key 0: the world's order */
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    int n = 0;
    MPI_TRY(MPI_Comm_size(c, &n));
    if (trainer) comm = c, joined_trainers = n;
    else MPI_Comm_free(&c), joined_trainers = -1; /* a service: rec_dist_finalize leaves MPI to rec_dist_leave */
    return REC_OK;
}

/* A blocking barrier spins in Open MPI, taking a core from the work: this one sleeps between
 * tests. */
rec_status rec_dist_world_wait(const volatile sig_atomic_t *stop) {
    MPI_Request r;
    MPI_TRY(MPI_Ibarrier(MPI_COMM_WORLD, &r));
    for (int done = 0; !done;) {
        MPI_TRY(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
        if (!done && stop && *stop) return REC_OK; /* the process ends; mpirun ends the job */
        if (!done) usleep(50 * 1000);
    }
    return REC_OK;
}

void rec_dist_leave(void) {
    joined_trainers = 0;
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
    comm = MPI_COMM_NULL;
    rec_dist_finalize();
}

/* What rec_dist_check_binding gathers from each rank. */
typedef struct binding {
    char boot[40];      /* /proc/sys/kernel/random/boot_id: one per running kernel */
    char host[64];
    int32_t cpus;       /* the machine's online CPUs */
    uint8_t mask[128];  /* CPU affinity, 1024 CPUs */
} binding;

static void my_binding(binding *b) {
    memset(b, 0, sizeof *b);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    gethostname(b->host, sizeof b->host - 1);
    if (!f || !fgets(b->boot, sizeof b->boot, f)) snprintf(b->boot, sizeof b->boot, "host %.30s", b->host);
    if (f) fclose(f);
    b->cpus = (int32_t)sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) { /* unknown: as if unbound */
        memset(b->mask, 0xff, sizeof b->mask);
        return;
    }
    for (int c = 0; c < 1024 && c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) b->mask[c / 8] |= (uint8_t)(1u << (c % 8));
}

rec_status rec_dist_check_binding(int threads, char *warn, size_t cap) {
    warn[0] = 0;
    int rank, size;
    REC_TRY(rec_dist_init(&rank, &size));
    binding mine, *all = malloc(sizeof(binding) * (size_t)size);
    if (!all) return rec_errorf(REC_ENOMEM, "out of memory checking the ranks' CPU binding");
    my_binding(&mine);
    const int rc = MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, rec__comm());
    if (rc != MPI_SUCCESS) {
        free(all);
        return rec__mpi_fail(rc, "MPI_Allgather", __FILE__, __LINE__);
    }
    for (int r = 0; r < size && !warn[0]; r++) { /* the first machine, by its lowest rank */
        int first = 1, ranks = 0, used = 0;
        uint8_t u[128] = {0};
        for (int q = 0; q < r && first; q++) first = strcmp(all[q].boot, all[r].boot) != 0;
        if (!first) continue;
        char list[96] = "";
        for (int q = r; q < size; q++) {
            if (strcmp(all[q].boot, all[r].boot)) continue;
            for (int k = 0; k < 128; k++) u[k] |= all[q].mask[k];
            const size_t n = strlen(list);
            if (ranks < 6) snprintf(list + n, sizeof list - n, "%s%d", ranks ? ", " : "", q);
            else if (ranks == 6) snprintf(list + n, sizeof list - n, ", ...");
            ranks++;
        }
        for (int c = 0; c < 1024; c++) used += (u[c / 8] >> (c % 8)) & 1;
        int need = ranks * threads < all[r].cpus ? ranks * threads : all[r].cpus;
        if (need > 1024) need = 1024; /* the CPUs a mask holds */
        if (used < need)
            snprintf(warn, cap, "ranks %s share machine %s (%d CPUs), and their CPU binding leaves them %d CPU%s for "
                     "%d thread%s, so they take turns (mpirun binds each host's ranks to its first cores; \"hosts\" "
                     "that are network namespaces of one machine share them): add --bind-to none to mpirun", list,
                     all[r].host, all[r].cpus, used, used == 1 ? "" : "s", ranks * threads,
                     ranks * threads == 1 ? "" : "s");
    }
    free(all);
    return REC_OK;
}

rec_status rec_dist_any(int v, int *out) {
    *out = v;
    MPI_TRY(MPI_Allreduce(&v, out, 1, MPI_INT, MPI_MAX, rec__comm()));
    return REC_OK;
}

rec_status rec_dist_bcast(void *buf, size_t bytes) {
    if (bytes > INT_MAX) return rec_errorf(REC_EINVAL, "rec_dist_bcast: %zu bytes, more than one call sends", bytes);
    MPI_TRY(MPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, rec__comm()));
    return REC_OK;
}

rec_status rec_dist_check_same(uint64_t v, const char *what) {
    int rank, size;
    MPI_TRY(MPI_Comm_rank(rec__comm(), &rank));
    MPI_TRY(MPI_Comm_size(rec__comm(), &size));
    uint64_t *all = malloc(sizeof(uint64_t) * (size_t)size);
    if (!all) return rec_errorf(REC_ENOMEM, "out of memory");
    const int rc = MPI_Allgather(&v, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, rec__comm());
    int bad = -1;
    for (int r = 0; rc == MPI_SUCCESS && r < size && bad < 0; r++)
        if (all[r] != all[0]) bad = r;
    free(all);
    if (rc != MPI_SUCCESS) return rec__mpi_fail(rc, "MPI_Allgather", __FILE__, __LINE__);
    if (bad >= 0)
        return rec_errorf(REC_EINVAL, "rank %d holds another %s than rank 0: every rank must run the same command on "
                          "the same files (rank %d is this one)", bad, what, rank);
    return REC_OK;
}

/* Bandwidths: rank r gets 4096 rows of E floats, scattered over a 64 MB window, from rank
 * r + 1 (one hindexed get, as the executor fetches), and all ranks all-reduce 4 M floats;
 * the median of 5, the minimum over ranks. */
rec_status rec_dist_measure(int E, double *bw_p2p, double *bw_ar) {
    int rank, size;
    REC_TRY(rec_dist_init(&rank, &size));
    enum { ROWS = 4096, REPS = 5, AR = 1 << 22 };
    const size_t win_floats = (size_t)16 << 20;
    float *base = NULL, *got = malloc(sizeof(float) * (size_t)ROWS * E), *ar = calloc(AR, sizeof(float));
    MPI_Aint *disp = malloc(sizeof(MPI_Aint) * ROWS);
    MPI_Win win = MPI_WIN_NULL;
    rec_status s = got && ar && disp ? REC_OK : rec_errorf(REC_ENOMEM, "out of memory measuring bandwidths");
    if (!s) s = rec__win_allocate(win_floats * sizeof(float), &base, &win);
    double t_p2p[REPS], t_ar[REPS];
    if (!s) {
        memset(base, 0, win_floats * sizeof(float));
        rec_rng g;
        rec_rng_seed(&g, 99, (uint64_t)rank);
        for (int i = 0; i < ROWS; i++)
            disp[i] = (MPI_Aint)(rec_rng_below(&g, win_floats / (size_t)E) * (size_t)E * sizeof(float));
        MPI_Datatype t;
        MPI_Type_create_hindexed_block(ROWS, E, disp, MPI_FLOAT, &t);
        MPI_Type_commit(&t);
        MPI_Win_lock_all(0, win);
        const int peer = (rank + 1) % size;
        for (int k = 0; k < REPS; k++) {
            MPI_Barrier(rec__comm());
            double t0 = MPI_Wtime();
            MPI_Get(got, ROWS * E, MPI_FLOAT, peer, 0, 1, t, win);
            MPI_Win_flush(peer, win);
            t_p2p[k] = MPI_Wtime() - t0;
            MPI_Barrier(rec__comm());
            t0 = MPI_Wtime();
            MPI_Allreduce(MPI_IN_PLACE, ar, AR, MPI_FLOAT, MPI_SUM, rec__comm());
            t_ar[k] = MPI_Wtime() - t0;
        }
        MPI_Win_unlock_all(win);
        MPI_Type_free(&t);
        for (int a = 0; a < REPS; a++) /* sort for the medians */
            for (int b = a + 1; b < REPS; b++) {
                if (t_p2p[b] < t_p2p[a]) { double x = t_p2p[a]; t_p2p[a] = t_p2p[b]; t_p2p[b] = x; }
                if (t_ar[b] < t_ar[a]) { double x = t_ar[a]; t_ar[a] = t_ar[b]; t_ar[b] = x; }
            }
        double bw[2] = {(double)ROWS * E * sizeof(float) / t_p2p[REPS / 2],
                        2.0 * (size - 1) / size * AR * sizeof(float) / t_ar[REPS / 2]};
        if (size == 1) bw[1] = bw[0];
        const int rc = MPI_Allreduce(MPI_IN_PLACE, bw, 2, MPI_DOUBLE, MPI_MIN, rec__comm());
        if (rc != MPI_SUCCESS) s = rec__mpi_fail(rc, "MPI_Allreduce", __FILE__, __LINE__);
        *bw_p2p = bw[0];
        *bw_ar = bw[1];
    }
    if (win != MPI_WIN_NULL) MPI_Win_free(&win);
    free(got);
    free(ar);
    free(disp);
    return s;
}

/* Rank 0 measures (the others wait: the cores are its), and every rank gets its figures, so
 * that every rank builds the same plan. */
rec_status rec_dist_measure_units(rec_plan_hw *hw, int E, rec_sparse_opt_kind opt) {
    int rank, size;
    REC_TRY(rec_dist_init(&rank, &size));
    if (rank == 0) rec_plan_measure_units(hw, E, opt, size);
    double v[3] = {hw->cache_bytes, hw->miss_s, hw->rep_row_s};
    MPI_TRY(MPI_Bcast(v, 3, MPI_DOUBLE, 0, rec__comm()));
    hw->cache_bytes = v[0], hw->miss_s = v[1], hw->rep_row_s = v[2];
    return REC_OK;
}

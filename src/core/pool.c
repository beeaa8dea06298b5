/* Fork-join thread pool. Workers sleep on a condition variable between jobs; a job hands
 * out task indices through an atomic counter so that fast threads take more tasks. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "rectrain/core.h"

struct rec_pool {
    int n;                    /* threads including the caller */
    pthread_t *tid;           /* (n-1) workers */
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    uint64_t generation;      /* bumped per job */
    int quit;
    int running;              /* workers still inside the current job */
    /* current job */
    rec_task_fn fn;
    void *ctx;
    int64_t n_tasks;
    atomic_llong next;
    rec_status status;        /* first failure, under mu */
    char msg[2048];
};

typedef struct { rec_pool *p; int thread; } worker_arg;

static void run_tasks(rec_pool *p, int thread) {
    for (;;) {
        int64_t t = atomic_fetch_add(&p->next, 1);
        if (t >= p->n_tasks) break;
        rec_status s = p->fn(p->ctx, t, thread);
        if (s != REC_OK) {
            pthread_mutex_lock(&p->mu);
            if (p->status == REC_OK) {
                p->status = s;
                snprintf(p->msg, sizeof p->msg, "%s", rec_errmsg());
            }
            pthread_mutex_unlock(&p->mu);
        }
    }
}

static void *worker(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    rec_pool *p = wa.p;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
        if (p->quit) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        run_tasks(p, wa.thread);
        pthread_mutex_lock(&p->mu);
        if (--p->running == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

rec_status rec_pool_init(rec_pool **out, int n_threads) {
    *out = NULL;
    if (n_threads < 1 || n_threads > 1024)
        return rec_errorf(REC_EINVAL, "threads must be between 1 and 1024 (got %d)", n_threads);
    rec_pool *p = calloc(1, sizeof *p);
    if (!p) return rec_errorf(REC_ENOMEM, "out of memory creating a thread pool");
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->tid = calloc((size_t)n_threads, sizeof *p->tid);
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa || !p->tid) { free(wa); p->n = i; rec_pool_free(p); return rec_errorf(REC_ENOMEM, "out of memory creating threads"); }
        wa->p = p;
        wa->thread = i;
        if (pthread_create(&p->tid[i - 1], NULL, worker, wa) != 0) {
            free(wa);
            p->n = i;
            rec_pool_free(p);
            return rec_errorf(REC_EIO, "cannot start thread %d of %d", i + 1, n_threads);
        }
    }
    *out = p;
    return REC_OK;
}

void rec_pool_free(rec_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->tid[i - 1], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p->tid);
    free(p);
}

int rec_pool_threads(const rec_pool *p) { return p->n; }

rec_status rec_pool_run(rec_pool *p, int64_t n_tasks, rec_task_fn fn, void *ctx) {
    if (n_tasks <= 0) return REC_OK;
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    p->status = REC_OK;
    atomic_store(&p->next, 0);
    if (p->n > 1) {
        pthread_mutex_lock(&p->mu);
        p->running = p->n - 1;
        p->generation++;
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    run_tasks(p, 0);
    if (p->n > 1) {
        pthread_mutex_lock(&p->mu);
        while (p->running > 0) pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
    if (p->status != REC_OK) rec_error_set_msg(p->msg);
    return p->status;
}

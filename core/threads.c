/* threads.c — the persistent thread pool (see threads.h). Knows nothing of
 * BLAS or kernels. */
#define _GNU_SOURCE
#include "core/threads.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int g_threads_set;

void hsi_threads_set(int n) { __atomic_store_n(&g_threads_set, n > 64 ? 64 : n, __ATOMIC_RELAXED); }

int hsi_threads(void)
{
    int set = __atomic_load_n(&g_threads_set, __ATOMIC_RELAXED);
    if (set > 0) return set;
    const char *e = getenv("HSI_THREADS");
    long n = 0;
    if (e && *e) n = strtol(e, NULL, 10);
    if (n <= 0) n = hsi_cpus_available();
    if (n > 64) n = 64;
    return (int)n;
}

int hsi_cpus_available(void)
{
    cpu_set_t set;
    long n = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    if (n <= 0) n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int hsi_threads_for(double n_values, int64_t n_parts)
{
    int nt = n_values < 65536 ? 1 : hsi_threads();
    return n_parts < nt ? (int)(n_parts < 1 ? 1 : n_parts) : nt;
}

typedef struct par_arg {
    hsi_status (*fn)(void *, int, int);
    void *ctx;
    int t, n;
    hsi_status st;
    char msg[512];
} par_arg;

static void par_run(par_arg *a)
{
    a->st = a->fn(a->ctx, a->t, a->n);
    if (a->st != HSI_OK) snprintf(a->msg, sizeof a->msg, "%s", hsi_last_error());
}

static void *par_main(void *p)
{
    par_run(p);
    return NULL;
}

/* Threads started for one call and joined at its end: used when the pool is
 * taken (a call from another thread, or from inside a pool job). */
static void par_spawn(par_arg *args, int n)
{
    pthread_t tids[64];
    int started[64] = {0};
    for (int t = 1; t < n; t++) started[t] = pthread_create(&tids[t], NULL, par_main, &args[t]) == 0;
    for (int t = 1; t < n; t++)
        if (!started[t]) par_run(&args[t]); /* could not start: run inline */
    par_run(&args[0]);
    for (int t = 1; t < n; t++)
        if (started[t]) pthread_join(tids[t], NULL);
}

/* The pool: workers started on first use and kept for the life of the
 * process (a training step makes dozens of parallel calls; starting threads
 * for each cost page faults and tens of microseconds). One call at a time
 * owns it (pool_owner); worker w runs part w + 1 of each job. After a job a
 * worker spins briefly for the next one (consecutive layers follow within
 * microseconds), then sleeps on the condition variable. */
static struct {
    pthread_mutex_t mu, owner;
    pthread_cond_t work, done;
    int n_workers;
    unsigned long gen;   /* job number, bumped for each job */
    int n;               /* parts of the current job */
    int pending;         /* workers still running parts of it */
    par_arg *args;
    unsigned long start_gen[64]; /* gen when worker w was started (its first job is later) */
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
          PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, NULL, {0}};
static __thread int pool_worker; /* this thread is a pool worker */

/* A child of fork() has none of the workers (only the forking thread is
 * copied) and may hold copies of locked mutexes: start it with an empty
 * pool, which grows again on first use. */
static void pool_after_fork_child(void)
{
    pthread_mutex_init(&pool.mu, NULL);
    pthread_mutex_init(&pool.owner, NULL);
    pthread_cond_init(&pool.work, NULL);
    pthread_cond_init(&pool.done, NULL);
    pool.n_workers = 0, pool.gen = 0, pool.n = 0, pool.pending = 0, pool.args = NULL;
}

static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static void pool_register_fork(void) { pthread_atfork(NULL, NULL, pool_after_fork_child); }

/* spin iterations before sleeping (a few tens of microseconds) */
#define POOL_SPIN 2000
#if defined(__x86_64__) || defined(__i386__)
#define POOL_RELAX() __builtin_ia32_pause()
#else
#define POOL_RELAX() ((void)0)
#endif

static void *pool_main(void *p)
{
    int w = (int)(intptr_t)p;
    unsigned long seen = 0;
    pool_worker = 1;
    pthread_mutex_lock(&pool.mu);
    seen = pool.start_gen[w];
    for (;;) {
        if (pool.gen == seen) {
            pthread_mutex_unlock(&pool.mu);
            for (int i = 0; i < POOL_SPIN && __atomic_load_n(&pool.gen, __ATOMIC_ACQUIRE) == seen;
                 i++)
                POOL_RELAX();
            pthread_mutex_lock(&pool.mu);
            while (pool.gen == seen) pthread_cond_wait(&pool.work, &pool.mu);
        }
        seen = pool.gen;
        if (w + 1 < pool.n) {
            par_arg *a = &pool.args[w + 1];
            pthread_mutex_unlock(&pool.mu);
            par_run(a);
            pthread_mutex_lock(&pool.mu);
            if (--pool.pending == 0) pthread_cond_signal(&pool.done);
        }
    }
    return NULL;
}

hsi_status hsi_parallel(int n, hsi_status (*fn)(void *ctx, int t, int n), void *ctx)
{
    if (n <= 1) return fn(ctx, 0, 1);
    par_arg args[64];
    if (n > 64) n = 64;
    for (int t = 0; t < n; t++) args[t] = (par_arg){fn, ctx, t, n, HSI_OK, {0}};
    if (pool_worker || pthread_mutex_trylock(&pool.owner) != 0) {
        par_spawn(args, n);
    } else {
        pthread_mutex_lock(&pool.mu);
        pthread_once(&pool_once, pool_register_fork);
        while (pool.n_workers < n - 1) {
            pool.start_gen[pool.n_workers] = pool.gen;
            pthread_t tid;
            pthread_attr_t at;
            pthread_attr_init(&at);
            pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
            int ok = pthread_create(&tid, &at, pool_main, (void *)(intptr_t)pool.n_workers) == 0;
            pthread_attr_destroy(&at);
            if (!ok) break;
            pool.n_workers++;
        }
        int pooled = pool.n_workers < n - 1 ? pool.n_workers + 1 : n;
        pool.args = args;
        pool.n = pooled;
        pool.pending = pooled - 1;
        __atomic_store_n(&pool.gen, pool.gen + 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&pool.work);
        pthread_mutex_unlock(&pool.mu);
        par_run(&args[0]);
        for (int t = pooled; t < n; t++) par_run(&args[t]); /* workers that could not start */
        pthread_mutex_lock(&pool.mu);
        while (pool.pending > 0) pthread_cond_wait(&pool.done, &pool.mu);
        pool.args = NULL;
        pthread_mutex_unlock(&pool.mu);
        pthread_mutex_unlock(&pool.owner);
    }
    for (int t = 0; t < n; t++)
        if (args[t].st != HSI_OK) return hsi_fail(args[t].st, "%s", args[t].msg);
    return HSI_OK;
}

void hsi_split_range(int64_t n_lines, int t, int n, int64_t *l0, int64_t *l1)
{
    *l0 = n_lines * t / n;
    *l1 = n_lines * (t + 1) / n;
}


/* OpenBLAS's (exported, not in its headers): joins its worker threads; its
 * next multithreaded call starts them again. Weak: NULL without it. */
extern int blas_thread_shutdown_(void) __attribute__((weak));
extern void openblas_set_num_threads(int n) __attribute__((weak));

void hsi_blas_workers_stop(void)
{
    /* one thread first: openblas_set_num_threads starts the workers again
     * (even for 1), so a later hsi_kern_blas_single_begin would wake them */
    if (openblas_set_num_threads) openblas_set_num_threads(1);
    if (blas_thread_shutdown_) blas_thread_shutdown_();
}

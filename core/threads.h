/* threads.h — the one pool of threads that the kernels and the model engine
 * share: a persistent pool with a static partition (results do not depend on
 * scheduling). Not a task scheduler: every call splits one job in n parts. */
#ifndef HSI_THREADS_H
#define HSI_THREADS_H

#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Threads our kernels and the model engine use (HSI_THREADS, else the CPUs
 * this process may run on, capped at 64), unless hsi_threads_set chose a
 * count. */
int hsi_threads(void);

/* The processors this process may run on (its CPU affinity, as nproc
 * counts them: mpirun and taskset narrow it), at least 1. */
int hsi_cpus_available(void);

/* Sets the count hsi_threads() returns from now on (n <= 0: back to
 * HSI_THREADS or the CPUs). For the whole process. */
void hsi_threads_set(int n);

/* Threads for a pass over n_values values split into n_parts independent
 * parts: hsi_threads(), one below 64 Ki values (starting threads would
 * cost more than the pass), at most one per part. */
int hsi_threads_for(double n_values, int64_t n_parts);

/* Runs fn(ctx, t, n) on n threads (t = 0..n-1; t = 0 on the caller; a
 * persistent pool, or threads of their own for a second caller or a nested
 * call) and returns the first non-OK status (its message is copied to the
 * caller's thread-local error). A forked child starts with an empty pool. */
hsi_status hsi_parallel(int n, hsi_status (*fn)(void *ctx, int t, int n), void *ctx);

/* Items [*i0, *i1) of n_items that part t of n owns (static, contiguous). */
void hsi_split_range(int64_t n_items, int t, int n, int64_t *i0, int64_t *i1);

/* Sets OpenBLAS to one thread and stops its idle worker threads
 * (OpenBLAS pthreads builds; nothing with another BLAS). OpenBLAS
 * starts them when it loads, at every openblas_set_num_threads (even to
 * 1) and at a multithreaded call after a stop, and each time they spin in
 * sched_yield for about 2^28 cycles (~0.1 s) before they sleep, which on a
 * 2-core machine takes a core from hsi's own threads. hsi calls BLAS
 * single-threaded inside its own threads; after this the small calls
 * outside them (the PCA's eigen decomposition) are single-threaded too,
 * and the passes no longer switch OpenBLAS's thread count (which woke the
 * workers in the middle of every fit). openblas_set_num_threads(N > 1)
 * undoes it. For a program's start, while no other thread is in a BLAS
 * call (the CLI calls it first thing). */
void hsi_blas_workers_stop(void);

#ifdef __cplusplus
}
#endif
#endif

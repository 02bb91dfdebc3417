/* dist.h — the processes of one job: MPI (Open MPI) when built with
 * `make MPI=1`, else a one-rank implementation with the same calls, so
 * callers need no #ifdef. Rank, size, ranks on this node, broadcast, sums,
 * a fixed-order tree sum whose bits do not depend on the number of ranks,
 * barrier, abort. Not a transport of our own; not NCCL (device buffers).
 *
 * Only the thread that called hsi_dist_init may call these (MPI is
 * initialised with MPI_THREAD_FUNNELED: the thread pool and the loader's
 * workers never communicate). Every call but the rank/size queries and
 * abort is collective: all ranks make it, in the same order. Failures come
 * back as HSI_ERR_IO with MPI's message; the library never aborts or exits
 * (hsi_dist_abort is for the command-line program). */
#ifndef HSI_DIST_H
#define HSI_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when this libhsi was built with MPI (make MPI=1). */
int hsi_dist_built(void);

/* Starts MPI (MPI_Init_thread, MPI_THREAD_FUNNELED; argc/argv may be
 * NULL), finds the ranks on this node (MPI_Comm_split_type SHARED) and,
 * with more than one of them, sizes the threads per rank: hsi_threads_set
 * and OpenBLAS to max(1, cores / ranks on the node), unless HSI_THREADS
 * (or OPENBLAS_NUM_THREADS for OpenBLAS) says otherwise. Without MPI (or
 * when it is already initialised) it only marks the one rank as started.
 * Calling it twice is fine. */
hsi_status hsi_dist_init(int *argc, char ***argv);
/* MPI_Finalize (only in the process that initialised MPI: a forked child
 * never finalises its parent's MPI). */
hsi_status hsi_dist_finalize(void);
int hsi_dist_initialized(void);

/* In a process forked from a rank, rank 0 of size 1: it is not in the job. */
int hsi_dist_rank(void);       /* 0 before init and without MPI */
int hsi_dist_size(void);       /* 1 before init and without MPI */
int hsi_dist_local_rank(void); /* rank among the ranks of this node */
int hsi_dist_local_size(void); /* ranks on this node */
/* Threads per rank chosen at init (cores / ranks on the node, >= 1). */
int hsi_dist_threads_per_rank(void);

typedef enum hsi_dist_op { HSI_DIST_SUM = 0, HSI_DIST_MAX = 1, HSI_DIST_MIN = 2 } hsi_dist_op;

/* bytes of buf from root to every rank. */
hsi_status hsi_dist_bcast(void *buf, size_t bytes, int root);
/* In place over all ranks (MPI_Allreduce: the summation order is MPI's
 * and may differ between N, algorithms and runs). dtype: HSI_F32, HSI_F64,
 * HSI_I32, HSI_I64. */
hsi_status hsi_dist_allreduce(void *buf, int64_t n, hsi_dtype dtype, hsi_dist_op op);

/* A non-blocking in-place sum (MPI_Iallreduce), for gradient buckets sent
 * while backward still runs. hsi_dist_test drives progress and sets *done;
 * hsi_dist_wait blocks. A request is reusable after it completed. */
typedef struct hsi_dist_req {
    void *impl; /* MPI_Request (NULL: none in flight) */
} hsi_dist_req;
hsi_status hsi_dist_iallreduce_sum(void *buf, int64_t n, hsi_dtype dtype, hsi_dist_req *req);
hsi_status hsi_dist_test(hsi_dist_req *req, int *done);
hsi_status hsi_dist_wait(hsi_dist_req *req);

/* The fixed-order sum. parts: (n_parts, count) packed, this rank's parts;
 * the global part order is rank 0's parts, then rank 1's, ... Every element
 * is summed over all parts of all ranks in double, in one pairwise tree over
 * the global part index (level by level: part i += part i + s for i a
 * multiple of 2s), so the result has the same bits for any number of ranks
 * holding the same parts in the same global order. out: (count), the same
 * on every rank (may alias nothing). Ranks may hold different n_parts (0
 * too). Traffic: each rank sends its parts once (MPI_Alltoallv by element
 * slices) and gathers count values (MPI_Allgatherv). */
hsi_status hsi_dist_tree_sum_f64(double *out, const double *parts, int64_t n_parts, int64_t count);
/* The same for float parts (summed in double, rounded once at the end). */
hsi_status hsi_dist_tree_sum_f32(float *out, const float *parts, int64_t n_parts, int64_t count);
/* The tree alone, in place on one process: sums rows 0..n_parts-1 of parts
 * (n_parts, count) into row 0 in the order above (what hsi_dist_tree_sum
 * computes for every element). */
void hsi_dist_tree_local_f64(double *parts, int64_t n_parts, int64_t count);

/* Every rank's n bytes to root: *out (root only; malloc'd, free() it) is
 * the concatenation in rank order and *sizes (root only, malloc'd) the
 * size rank by rank. Other ranks get NULLs. */
hsi_status hsi_dist_gather_bytes(char **out, int64_t **sizes, const void *mine, int64_t n, int root);

/* In place: rank r holds bytes [offsets[r], offsets[r+1]) of buf (offsets:
 * size + 1 entries, the same on every rank); afterwards every rank holds
 * every part. One rank: nothing to do. */
hsi_status hsi_dist_share_parts(void *buf, const int64_t *offsets);

/* Waits for every rank. The wait sleeps between polls (MPI_Ibarrier +
 * MPI_Test every 0.2 ms), so ranks waiting for rank 0 to write files
 * leave the cores to it. */
hsi_status hsi_dist_barrier(void);

/* NCCL, for sums of device buffers (an MPI build with NCCL: make MPI=1
 * with nvcc and nccl.h found builds the plugin libhsi_nccl.so beside hsi,
 * loaded here on first use; $HSI_NCCL_PLUGIN names another). One
 * communicator per rank, on GPU local_rank % devices, the unique id from
 * rank 0 over MPI. Collective. Without the plugin or a device every rank
 * gets the same error (HSI_ERR_NO_CUDA / HSI_ERR_UNSUPPORTED), no hang. */
typedef struct hsi_nccl hsi_nccl;
hsi_status hsi_nccl_open(hsi_nccl **out);
void hsi_nccl_close(hsi_nccl *c); /* NULL is fine */
/* In place, count floats of device memory (a cudaStream_t, NULL = the
 * default stream); hsi_nccl_sync waits for the stream. */
hsi_status hsi_nccl_allreduce_sum_f32(hsi_nccl *c, float *dev, int64_t count, void *stream);
hsi_status hsi_nccl_sync(hsi_nccl *c, void *stream);
/* Device memory and copies through the plugin (dir 0: host to device), for checks. */
hsi_status hsi_nccl_dev_alloc(hsi_nccl *c, void **p, size_t bytes);
void hsi_nccl_dev_free(hsi_nccl *c, void *p);
hsi_status hsi_nccl_copy(hsi_nccl *c, void *dst, const void *src, size_t bytes, int dir);
/* NCCL's version code of the plugin (0 before hsi_nccl_open succeeded). */
int hsi_nccl_version(const hsi_nccl *c);

/* Ends every rank of the job with code (MPI_Abort); without MPI, exits
 * this process. For the command-line program only: print first. */
void hsi_dist_abort(int code) __attribute__((noreturn));

#ifdef __cplusplus
}
#endif
#endif

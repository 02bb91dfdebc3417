/* loader.h — the batch loader: a ring of batch buffers allocated once
 * (pinned when batches go to the device or CUDA is already in use, aligned
 * host memory otherwise),
 * filled by worker threads through a callback, delivered in order with a
 * per-epoch shuffle seeded by (seed, epoch), so that the batches are
 * bit-identical for any number of workers. It knows nothing of patches or
 * models: the fill callback does (see hsi_patch_fill in patches.h). */
#ifndef HSI_LOADER_H
#define HSI_LOADER_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hsi_batch {
    int64_t epoch;          /* first_epoch, first_epoch + 1, ... */
    int64_t index;          /* batch number within the epoch, from 0 */
    int64_t n;              /* samples in this batch: batch_size, or fewer for the
                               last batch of an epoch without drop_last (with
                               several ranks: this rank's slice of them) */
    int64_t first;          /* position of samples[0] in the global batch (rank r
                               of N: r * n; 0 with one rank) */
    int64_t n_global;       /* samples of the global batch (= n with one rank) */
    const int64_t *samples; /* n dataset indices (0..n_samples-1), epoch order */
    uint64_t seed;          /* derived from (seed, epoch, index): the fill callback
                               derives per-sample seeds from it, never from a thread */
    void *x;                /* host: batch_size * x_bytes (first n * x_bytes valid) */
    void *y;                /* host: batch_size * y_bytes, NULL when y_bytes = 0 */
    void *x_dev, *y_dev;    /* device copies (CUDA build, device_copy), else NULL */
    double wait_s;          /* seconds hsi_loader_next blocked to deliver this batch
                               (with 0 workers: the fill time itself) */
    int slot;               /* ring slot */
} hsi_batch;

/* Fills b->x (and b->y) for the n samples b->samples. Called from worker
 * threads, several at once on different batches: it must be reentrant and
 * may only read ctx. Its result may depend only on b->samples, b->n and
 * b->seed (and ctx), never on which thread runs it. */
typedef hsi_status (*hsi_loader_fill_fn)(void *ctx, const hsi_batch *b);

typedef struct hsi_loader_params {
    int64_t n_samples;  /* dataset size (> 0) */
    int64_t batch_size; /* > 0 */
    size_t x_bytes;     /* bytes per sample in x (> 0) */
    size_t y_bytes;     /* bytes per sample in y (0: no y) */
    int n_workers;      /* 0: fill in the thread that calls hsi_loader_next */
    int prefetch;       /* batches in flight per worker (default 2): the ring
                           holds max(1, n_workers) * prefetch buffers */
    int shuffle;        /* 1: permute the samples each epoch (seed, epoch) */
    int drop_last;      /* 1: drop the last incomplete batch of each epoch */
    uint64_t seed;
    int64_t first_epoch; /* epoch number of the first batch (resume) */
    /* data-parallel training: this loader delivers rank dist_rank's slice
     * of each global batch of batch_size samples (hsi_loader_dist_batch);
     * dist_size 0 or 1: the whole batches */
    int dist_rank, dist_size;
    /* CUDA build only: also keep a device copy of each batch. Worker
     * threads issue the host-to-device copy of each batch on the loader's
     * own stream as soon as it is filled (so batch i+1 is copied while i is
     * consumed); hsi_loader_next makes cuda_stream (the consumer's
     * cudaStream_t, NULL = legacy default stream) wait for the copy with an
     * event, and records a release event on it when the batch is handed
     * back, before its device buffer is reused. No device-wide sync.
     * Asking for it without CUDA or without a device is an error. */
    int device_copy;
    void *cuda_stream;
    hsi_loader_fill_fn fill;
    void *ctx;
} hsi_loader_params;

void hsi_loader_params_init(hsi_loader_params *p);

typedef struct hsi_loader_stats {
    int64_t batches;   /* delivered since the last reset */
    int64_t samples;
    double wait_s;     /* total seconds the consumer blocked in hsi_loader_next */
    double wait_max_s; /* longest single wait */
    double fill_s;     /* seconds spent in the fill callback, all workers */
    double elapsed_s;  /* wall time since the last reset */
    int pinned;        /* ring buffers are pinned memory */
    int device_copy;   /* batches are also copied to the device */
    int n_slots;       /* ring size */
} hsi_loader_stats;

typedef struct hsi_loader hsi_loader;

/* Allocates the ring and starts the workers; they begin filling the first
 * epoch's batches at once. */
hsi_status hsi_loader_create(hsi_loader **out, const hsi_loader_params *p);
/* Next batch in order, or *batch = NULL once after the last batch of each
 * epoch (the call after that starts the next epoch). The batch stays
 * valid until the next call. A fill error is returned here, with the
 * callback's message; the loader then refuses further calls. */
hsi_status hsi_loader_next(hsi_loader *L, hsi_batch **batch);
int64_t hsi_loader_batches_per_epoch(const hsi_loader *L);
void hsi_loader_get_stats(const hsi_loader *L, hsi_loader_stats *s);
void hsi_loader_reset_stats(hsi_loader *L);
/* Stops the workers and frees the ring. NULL is fine. */
void hsi_loader_destroy(hsi_loader *L);

/* The epoch order: perm (n,) = 0..n-1, Fisher-Yates shuffled by a stream
 * keyed by (seed, epoch) when shuffle is set. */
void hsi_loader_epoch_order(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch, int shuffle);
/* The distributed sampler. The epoch's order (hsi_loader_epoch_order, the
 * same on every rank) is, as in PyTorch's DistributedSampler, padded by
 * repeating it from its start to a multiple of n_ranks, or with drop_last
 * cut to whole global batches of batch_size (a multiple of n_ranks).
 * Global batch j (batch_size samples; the last one fewer without
 * drop_last, a multiple of n_ranks all the same) is split into n_ranks
 * equal contiguous slices and slice r goes to rank r: the union of the
 * ranks' batches j is the one-process batch j, and for n_ranks = 1 this is
 * the loader's plain order. Batches per epoch (the same on every rank): */
int64_t hsi_loader_dist_batches(int64_t n_samples, int64_t batch_size, int n_ranks, int drop_last);
/* Batch index of the epoch whose order is perm (n_samples,) for rank of
 * n_ranks: samples (at least batch_size / n_ranks) gets its *n indices,
 * *first its position in the global batch, *n_global the global batch's
 * size. */
void hsi_loader_dist_batch(const int64_t *perm, int64_t n_samples, int64_t batch_size, int rank,
                           int n_ranks, int drop_last, int64_t index, int64_t *samples, int64_t *n,
                           int64_t *first, int64_t *n_global);

/* The seed of batch (epoch, index), as put in hsi_batch.seed. */
uint64_t hsi_loader_batch_seed(uint64_t seed, int64_t epoch, int64_t index);

#ifdef __cplusplus
}
#endif
#endif

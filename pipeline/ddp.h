/* ddp.h — data-parallel training steps over the ranks of core/dist.h, the
 * way PyTorch's DistributedDataParallel does them: rank 0's parameters and
 * buffers broadcast at the start; gradients in buckets in reverse
 * parameter order (the first 1 MiB, the others up to bucket_mb), each
 * bucket's allreduce started by a backward hook as soon as backward has
 * completed its gradients, so communication overlaps the rest of
 * backward; SyncBatchNorm on request; a periodic check that every rank
 * holds the same parameters; and a deterministic mode whose bits do not
 * depend on the number of ranks. Not the sampler (loader.h:
 * hsi_loader_dist_batch), not the training job (trainer.h drives this).
 *
 * One step's gradient is that of the global batch's mean loss: each rank
 * runs its slice in tiles, each tile's mean loss scaled by
 * tile / global batch, so the sum over ranks needs no division.
 *   - default: tiles accumulate into .grad, buckets are summed with
 *     MPI_Allreduce (its order: equal to one process up to rounding);
 *   - deterministic: every tile's gradient is kept apart and the tiles of
 *     all ranks are summed in a fixed tree over the global tile index
 *     (hsi_dist_tree_sum_f32), each tile computed with one thread per
 *     sample; the same bits for any number of ranks. Batch norm is then
 *     per tile (local), running statistics from the first tile. */
#ifndef HSI_DDP_H
#define HSI_DDP_H

#include <stdint.h>

#include "core/core.h"
#include "models/nn.h"
#include "models/optim.h"
#include "models/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hsi_ddp_config {
    int bn_sync;       /* 1: batch-norm statistics over the global batch (SyncBatchNorm) */
    int deterministic; /* 1: fixed tiles, fixed-order tree sum (not with bn_sync) */
    int tile;          /* samples per forward/backward pass: 0 = the rank's whole slice
                        * (deterministic: 4); a slice that is not a multiple of it is refused */
    double bucket_mb;  /* bucket cap in MiB (default 25; the first bucket is 1 MiB, or
                        * bucket_mb when that is smaller) */
    int overlap;       /* 1 (default): allreduce buckets while backward runs; 0: after it */
    int hash_every;    /* steps between parameter-hash checks (default 50; 0 = never) */
} hsi_ddp_config;
void hsi_ddp_config_init(hsi_ddp_config *c);

/* Seconds and bytes since create (or the last reset). */
typedef struct hsi_ddp_stats {
    int64_t steps, samples;
    double forward, backward, optimizer; /* backward includes the bucket launches */
    double comm_wait;   /* allreduce time not hidden by backward (waiting after it) */
    double tree;        /* deterministic: the tree sum */
    double hash;        /* parameter-hash checks */
    int n_buckets;
    int64_t bucket_bytes[64]; /* first 64 buckets */
    int64_t grad_bytes;       /* gradient bytes reduced per step */
} hsi_ddp_stats;

typedef struct hsi_ddp hsi_ddp;

/* Wraps net and opt (borrowed: they must outlive it). Broadcasts rank 0's
 * parameters and buffers to every rank, plans the buckets and, with
 * bn_sync, installs the batch-norm reducer on this thread. Collective. */
hsi_status hsi_ddp_create(hsi_ddp **out, hsi_module *net, hsi_optim *opt, const hsi_ddp_config *cfg);
void hsi_ddp_free(hsi_ddp *d); /* removes the hooks; NULL is fine */

/* One step over this rank's slice: zero the gradients, forward and
 * backward tile by tile, the gradient sum over ranks, the optimiser step,
 * and every hash_every steps the parameter check. x: (n, x_shape...)
 * packed float32 (x_ndim dims per sample), y: (n) int32 classes; first:
 * the slice's position in the global batch of n_global samples; seed: the
 * global batch's seed (dropout masks by sample). g is reset per tile.
 * *loss_sum (this rank's sum of per-sample losses) and *correct (arg-max
 * hits) are set. Collective. */
hsi_status hsi_ddp_step(hsi_ddp *d, hsi_graph *g, const float *x, const int32_t *y, int64_t n,
                        int x_ndim, const int64_t *x_shape, int64_t first, int64_t n_global,
                        uint64_t seed, double *loss_sum, int64_t *correct);

/* Rank 0's parameters and buffers (buffers_only: the batch-norm running
 * statistics alone, DDP's broadcast_buffers) to every rank. Collective. */
hsi_status hsi_ddp_broadcast_state(hsi_ddp *d, int buffers_only);
/* FNV-1a over the bytes of every parameter, in order. */
uint64_t hsi_ddp_param_hash(const hsi_ddp *d);
/* Fails (HSI_ERR_STATE) when the ranks' parameter hashes differ.
 * Collective. */
hsi_status hsi_ddp_check(hsi_ddp *d);

void hsi_ddp_get_stats(const hsi_ddp *d, hsi_ddp_stats *s);
void hsi_ddp_reset_stats(hsi_ddp *d);

#ifdef __cplusplus
}
#endif
#endif

/* trainer.h — the whole training job as library calls: a labelled cube in;
 * a split, preprocessing fitted on the training pixels, a model trained with
 * the autograd engine (validation, early stopping, checkpoints, resume),
 * test metrics, a map and a run directory (run.h) out. Run it in one call
 * (hsi_train_run), epoch by epoch or step by step (hsi_trainer_*); progress goes to a
 * callback, never to stdout. The training step itself is hsi_train_step. */
#ifndef HSI_TRAINER_H
#define HSI_TRAINER_H

#include <stdint.h>

#include "core/core.h"
#include "kernels/normalize.h"
#include "models/nn.h"
#include "models/optim.h"
#include "pipeline/patches.h"
#include "pipeline/run.h"
#include "pipeline/split.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the callback hears. */
typedef enum hsi_train_event_kind {
    HSI_TRAIN_EV_INFO = 0,  /* a line or table of text (the split, the preprocessing, the model) */
    HSI_TRAIN_EV_EPOCH = 1, /* an epoch ended: the numbers below are set */
    HSI_TRAIN_EV_DONE = 2   /* the test metrics table, after the last epoch */
} hsi_train_event_kind;

typedef struct hsi_train_event {
    hsi_train_event_kind kind;
    const char *text;      /* what a person would read, ending in '\n' (also in train.log) */
    int epoch, epochs;     /* 1-based epoch just ended, of epochs */
    double loss;           /* mean training loss of the epoch */
    double train_acc;      /* training accuracy (NaN on the GPU) */
    double val_oa;         /* validation OA (NaN without validation pixels) */
    int improved;          /* this epoch is the best so far (its weights are kept) */
    double lr;             /* learning rate used in the epoch */
    double samples_per_s, eta_s;
    double val_loss;       /* validation loss, same pass as val_oa (NaN without validation pixels) */
} hsi_train_event;

/* Returns 0 to go on, nonzero to stop after this epoch: the trainer then
 * finishes as after early stopping (the best weights, the map, the metrics
 * and every file are written; --resume continues from the last epoch). */
typedef int (*hsi_train_progress_fn)(void *ctx, const hsi_train_event *ev);

/* Every setting of a training run. Strings are borrowed: they must outlive
 * the trainer. */
typedef struct hsi_train_config {
    const char *cube_path, *labels_path, *out_dir;
    const char *cube_var, *labels_var;       /* .mat variables (NULL = choose) */
    const char *train_labels, *test_labels;  /* explicit split maps (both or none) */
    const char *model;                       /* cnn2d (default), hybridsn, cnn1d */
    /* preprocessing */
    const char *bands_spec;       /* "1-20,35" (1-based) or NULL */
    const char *wavelengths_spec; /* "400-1340,1450-1800" nm or NULL */
    int keep_bad_bands;           /* 0: drop bbl = 0 bands (default) */
    hsi_norm_mode norm;           /* default zscore */
    int pca;                      /* components (default 30; 0 = no PCA) */
    double pca_variance;          /* > 0: components by explained variance */
    int whiten;
    int fit_on_all;               /* 1: fit normalisation/PCA on every pixel (leaky) */
    /* patches and split */
    int patch;                    /* odd, default 11 */
    hsi_pad_mode pad;
    hsi_split_mode split;         /* random (default) or disjoint */
    double train_fraction;        /* default 0.1 */
    int64_t per_class;            /* > 0: pixels per class instead of a fraction */
    double val_fraction;          /* of the training pixels, default 0 */
    int block;                    /* disjoint block size (0 = max(16, 4 * (P / 2) + 4)) */
    int augment;                  /* flips + rotations (default 1) */
    /* optimisation */
    int epochs;                   /* default 40 */
    int batch;                    /* default 16 */
    double lr;                    /* AdamW, default 1e-3 */
    double weight_decay;          /* default 1e-4 */
    int schedule;                 /* hsi_sched_kind: cosine (default), constant, step */
    int patience;                 /* early stopping on validation OA, epochs (0 = off) */
    uint64_t seed;
    int workers, prefetch;
    const char *device;           /* cpu (default), cuda, auto (resolved at create) */
    const char *conv;             /* the convolutions (hsi_conv_option): auto (default; NULL
                                     too: the device's best, on the GPU cuDNN when it loads),
                                     gemm, direct (CPU: sets hsi_conv_set_impl, process-wide),
                                     cudnn (GPU: an error when cuDNN cannot run) */
    int host_patches;             /* GPU: cut the patches on the host and copy them (default:
                                     on the device, from the features copied there once, when
                                     they are in memory and take at most a quarter of its
                                     free memory; the same batches either way) */
    int cuda_graph;               /* GPU: each full batch's step and validation forward as one
                                     CUDA Graph launch
                                     (hsi_dmodel_set_graph; the same bits); an error with
                                     device cpu, unused when auto finds no GPU */
    int resume;                   /* continue from out_dir/train_state.safetensors */
    int overwrite;                /* replace a run already in out_dir (else it is refused) */
    int threads;                  /* > 0: threads of the engine and kernels (hsi_threads_set) */
    /* memory: bytes the preprocessed features (n_features x lines x samples
     * float32) may take (0: no limit). A larger cube is streamed: written
     * pixel-interleaved (BIP) to a temporary file in out_dir, mapped
     * read-only and the file's name removed at once (the space is freed when
     * the job ends, however it ends); patches, validation and the map read
     * from the mapping. Whenever the process's resident file pages pass
     * a quarter of the budget, its pages of that mapping (and of a mapped raw cube
     * bigger than the budget) are given back: the page cache, not the
     * process, holds what fits. The same floats either way: the results are
     * bit-identical. Not counted: a cube read into memory (.mat, GDAL),
     * about 20 bytes per labelled pixel (split lists, the map), the model,
     * the batches. */
    int64_t mem_limit;
    /* data-parallel training (pipeline/ddp.h): under mpirun with several
     * ranks, or on one with ddp, deterministic or bn_sync set. batch is
     * then the global batch, split in equal slices across the ranks; rank
     * 0 writes every file. */
    int ddp;                      /* 1: the data-parallel path on one rank too (N ranks' reference) */
    int bn_sync;                  /* batch norm over the global batch (SyncBatchNorm) */
    int deterministic;            /* the same bits for any number of ranks */
    int tile;                     /* samples per forward/backward pass (0: a rank's whole slice) */
    double bucket_mb;             /* gradient bucket cap in MiB (0: 25) */
    int hash_every;               /* steps between parameter checks across ranks (0: 50, < 0: off) */
    int no_overlap;               /* 1: allreduce after backward instead of during it */
    /* reporting */
    hsi_train_progress_fn progress; /* NULL: silent (train.log is written all the same) */
    void *progress_ctx;
    int progress_bars;            /* 1: progress bars of the long passes on stderr (a terminal) */
} hsi_train_config;

void hsi_train_config_init(hsi_train_config *c);

/* Seconds per stage, for `hsi profile train`. */
typedef struct hsi_train_profile {
    double read, split, preprocess, loader_wait, forward, backward, optimizer, validate,
        predict, write, total;
    int64_t train_samples; /* samples seen in training steps (of all ranks) */
    int64_t steps;
    /* data-parallel: ranks, allreduce time not hidden by backward, the
     * deterministic tree, buckets */
    int ranks;
    double comm_wait, tree;
    int n_buckets;
    int64_t grad_bytes;
} hsi_train_profile;

typedef struct hsi_train_result {
    double oa, aa, kappa;   /* on the test pixels */
    double best_val_oa;     /* NaN without validation pixels (the last epoch is kept) */
    int best_epoch, epochs_run;
    int64_t n_train, n_val, n_test;
    double train_samples_per_s;
    hsi_train_profile prof;
} hsi_train_result;

typedef struct hsi_trainer hsi_trainer;

/* Checks the configuration, creates out_dir (and its parents), opens the
 * cube and labels, splits, fits the preprocessing on the training pixels,
 * runs the fused pass, builds the model, optimiser and loader, and (resume)
 * restores the last checkpoint. */
hsi_status hsi_trainer_create(hsi_trainer **out, const hsi_train_config *cfg);
/* The options that depend on the device (conv, cuda_graph, host_patches)
 * against dev as asked (HSI_DEVICE_AUTO: conv's name only; the GPU's
 * options go unused when auto becomes the CPU): HSI_ERR_ARG naming the
 * option. hsi_trainer_create checks them too, and conv again against the
 * device auto becomes; the CLI calls it to make them usage errors. */
hsi_status hsi_train_device_options(const hsi_train_config *c, hsi_device dev);

/* One training step: the next batch of the loader through the model and
 * the optimiser. When the loader has no batch left, the epoch ends instead:
 * validation, the schedule, the checkpoint, early stopping, the epoch event;
 * *epoch_done is then set. *done is set when no epoch is left. */
hsi_status hsi_trainer_step(hsi_trainer *t, int *epoch_done, int *done);

/* One epoch (hsi_trainer_step until the epoch ends): training steps over the
 * loader, validation, the schedule,
 * the checkpoint (train_state.safetensors), early stopping. *done is set
 * when no epoch is left (the last one ran, early stopping, or the callback
 * asked to stop). */
hsi_status hsi_trainer_epoch(hsi_trainer *t, int *done);

/* After the epochs: the best weights, the whole-scene map (map.hdr,
 * map.png, map.tif when georeferenced), the test metrics, metrics.json and
 * the run directory (hsi_run_save). res may be NULL. */
hsi_status hsi_trainer_finish(hsi_trainer *t, hsi_train_result *res);

/* What the trainer has built (valid until hsi_trainer_free). */
const hsi_split *hsi_trainer_split(const hsi_trainer *t);
const hsi_run *hsi_trainer_run(const hsi_trainer *t);
/* The preprocessed (n_features, lines, samples) float32 cube the patches
 * are cut from: a packed host view, or (mem_limit exceeded) a BIP view over
 * the mapped temporary file (buf->kind HSI_BUF_MMAP). */
const hsi_view *hsi_trainer_features(const hsi_trainer *t);

void hsi_trainer_free(hsi_trainer *t); /* NULL is fine */

/* create + every epoch + finish + free. */
hsi_status hsi_train_run(const hsi_train_config *cfg, hsi_train_result *res);

/* Seconds of one step's parts. */
typedef struct hsi_step_times {
    double forward, backward, optimizer;
} hsi_step_times;

/* One training step on the CPU engine: zero the gradients, forward,
 * cross-entropy, backward, optimiser step. x: the model's input batch, y:
 * (n) class indices (int32 or int64); both may live in g. *loss: the
 * batch's mean loss; *logits (may be NULL): the outputs, valid until g is
 * reset; times (may be NULL) accumulates. ce NULL = defaults. */
hsi_status hsi_train_step(hsi_module *net, hsi_optim *opt, hsi_graph *g, hsi_tensor *x,
                          hsi_tensor *y, const hsi_ce_opts *ce, double *loss, hsi_tensor **logits,
                          hsi_step_times *times);

#ifdef __cplusplus
}
#endif
#endif

/* train.h — the whole job of `hsi train`, `hsi predict` and `hsi eval`: a
 * labelled cube in; a split, preprocessing fitted on training pixels, a
 * model trained with the autograd engine, metrics, a map and everything
 * needed to predict again out. The pieces live elsewhere (io/, kernels/,
 * split/patches/loader/metrics, models/); this file only sequences them. */
#ifndef HSI_TRAIN_H
#define HSI_TRAIN_H

#include <stdio.h>

#include "core/core.h"
#include "kernels/normalize.h"
#include "pipeline/patches.h"
#include "pipeline/split.h"

#ifdef __cplusplus
extern "C" {
#endif

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
    double val_fraction;          /* of the training pixels, default 0.1 */
    int block;                    /* disjoint block size (0 = max(16, 4 * (P / 2) + 4)) */
    int augment;                  /* flips + rotations (default 1) */
    /* optimisation */
    int epochs;                   /* default 40 */
    int batch;                    /* default 64 */
    double lr;                    /* AdamW, default 1e-3 */
    double weight_decay;          /* default 1e-4 */
    int schedule;                 /* hsi_sched_kind: cosine (default), constant, step */
    int patience;                 /* early stopping on validation OA, epochs (0 = off) */
    uint64_t seed;
    int workers, prefetch;
    const char *device;           /* cpu, cuda, auto */
    int resume;                   /* continue from out_dir/train_state.safetensors */
    int threads;                  /* BLAS threads (0 = leave as is) */
    int verbose;                  /* progress lines on stdout */
    FILE *log;                    /* also write progress here (train.log) */
} hsi_train_config;

void hsi_train_config_init(hsi_train_config *c);

/* Seconds per stage, for `hsi profile train`. */
typedef struct hsi_train_profile {
    double read, split, preprocess, loader_wait, forward, backward, optimizer, validate,
        predict, write, total;
    int64_t train_samples; /* samples seen in training steps */
    int64_t steps;
} hsi_train_profile;

typedef struct hsi_train_result {
    double oa, aa, kappa;   /* on the test pixels */
    double best_val_oa;
    int best_epoch, epochs_run;
    int64_t n_train, n_val, n_test;
    double train_samples_per_s;
    hsi_train_profile prof;
} hsi_train_result;

/* Runs the job; writes into cfg->out_dir (created): model.safetensors,
 * pipeline.json (+ pca.bin), metrics.json, split.json, map.hdr/map (ENVI
 * classification), map.png (with legend), map.tif when the cube is
 * georeferenced, train.log, train_state.safetensors (for --resume). */
hsi_status hsi_train_run(const hsi_train_config *cfg, hsi_train_result *res);

/* Predicts every pixel of cube_path with a trained directory and writes a
 * classification map to out_path (.hdr ENVI classification, .tif GeoTIFF or
 * .png picture with legend). Streams over line tiles. */
hsi_status hsi_predict_run(const char *dir, const char *cube_path, const char *cube_var,
                           const char *out_path, int batch, int verbose);

/* Predicts cube_path and scores it against labels_path (every labelled
 * pixel); prints the metrics table and writes json_path when not NULL. */
hsi_status hsi_eval_run(const char *dir, const char *cube_path, const char *cube_var,
                        const char *labels_path, const char *labels_var, const char *json_path,
                        int batch, int verbose, double *oa_out);

#ifdef __cplusplus
}
#endif
#endif

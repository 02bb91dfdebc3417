/* run.h — a trained pipeline and its run directory: the fitted
 * preprocessing, the model and the classes; load a directory written by the
 * trainer, classify pixels, predict a whole scene in line tiles with a halo,
 * write a map (ENVI classification, GeoTIFF or PNG) and evaluate on the
 * split's test pixels or on every labelled pixel. The directory's files are
 * described in docs/run-directory.md. Training itself is trainer.h. */
#ifndef HSI_RUN_H
#define HSI_RUN_H

#include <stdint.h>

#include "core/core.h"
#include "io/meta.h"
#include "models/model_cuda.h"
#include "models/nn.h"
#include "pipeline/metrics.h"
#include "pipeline/patches.h"
#include "pipeline/preprocess.h"
#include "pipeline/split.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Everything needed to predict again. Owns its members. */
typedef struct hsi_run {
    char model[32];       /* architecture name (hsi_model_list) */
    int patch;            /* odd patch side (1 for cnn1d) */
    hsi_pad_mode pad;
    int n_features;       /* channels after preprocessing */
    int n_classes;        /* K */
    hsi_prep prep;        /* raw cube -> n_features float32 */
    int64_t *label_ids;   /* (K) the label value of each class index */
    char **names;         /* (K) class names */
    uint8_t *colors;      /* (K, 3) RGB, or NULL */
    hsi_module *net;      /* the model, in evaluation mode after loading */
    hsi_view roles;       /* (lines, samples) int32 HSI_ROLE_* of the training split,
                             or an empty view (ndim 0) when the directory has none */
} hsi_run;

/* Loads DIR: pipeline.json, preprocessing.safetensors (or an older run's
 * pca.bin), model.safetensors, and split.hdr when present. */
hsi_status hsi_run_load(hsi_run *out, const char *dir);
void hsi_run_free(hsi_run *r); /* zeroed memory is fine */

/* Writes DIR (which must exist): model.safetensors, preprocessing.safetensors,
 * split.hdr (ENVI classification of the pixels' roles, when split is given;
 * georeferenced like geo) and pipeline.json last (with `training`, a JSON
 * object of the settings, when not NULL). Each file is written atomically. */
struct cJSON;
hsi_status hsi_run_save(const hsi_run *r, const char *dir, const hsi_split *split,
                        const hsi_meta *geo, struct cJSON *training);

/* The class index of a label value, or -1. */
int hsi_run_class_of(const hsi_run *r, int64_t label);

/* Class indices (0..K-1) of n pixels of the patcher's cube (flat indices
 * line * samples + sample), in batches of `batch`, gradients off. g: a
 * graph the caller owns (reset here). */
hsi_status hsi_run_classify(const hsi_run *r, int32_t *pred, const hsi_patcher *pt,
                            const int64_t *pixels, int64_t n, int batch, hsi_graph *g);
/* The same, and the mean cross-entropy of the n pixels against y_true (n)
 * class indices (the training loss, hsi_cross_entropy's defaults, with the
 * model in eval mode) in *mean_loss (NaN when n is 0). */
hsi_status hsi_run_classify_loss(const hsi_run *r, int32_t *pred, const hsi_patcher *pt,
                                 const int64_t *pixels, int64_t n, int batch, hsi_graph *g,
                                 const int32_t *y_true, double *mean_loss);

/* Options of a whole-scene prediction. */
typedef struct hsi_predict_opts {
    int batch;                 /* patches per forward pass (0 = 256) */
    int64_t tile_lines;        /* lines per tile (0 = 64); memory holds one tile of features */
    const char *progress_label; /* NULL: no progress bar */
    const hsi_view *features;  /* optional: the whole preprocessed (n_features, lines, samples)
                                  float32 cube when the caller has it; tiles are cut from it
                                  instead of running the fused pass again (in device memory:
                                  the patches are cut there; device CUDA only) */
    int across_ranks;          /* under mpirun (core/dist.h; every rank calls it): each
                                  rank classifies its run of the tiles and every rank
                                  gets the whole map, the bits of one process; a rank
                                  that fails leaves the others waiting: end the job */
    hsi_device device;         /* where the fused pass and the model run (core.h's rule):
                                  CUDA: each tile's features by the GPU's fused pass, kept
                                  there, the patches cut there and the model's eval-mode
                                  forward on the GPU (models/model_cuda.h) */
    hsi_gpu_conv conv;         /* the GPU's convolutions (0 = HSI_GPU_CONV_AUTO: cuDNN when it
                                  loads); the CPU engine's are hsi_conv_set_impl's */
    int cuda_graph;            /* CUDA: each full batch's forward as one CUDA Graph launch
                                  (hsi_dmodel_set_graph; the same map) */
} hsi_predict_opts;

/* Predicts every pixel of cube ((band, line, sample), any view hsi can
 * open, checked against the bands the run was fitted on). map: (lines,
 * samples) int32 label values (the run's label_ids). A pixel's prediction
 * does not depend on the tile it falls in. opts may be NULL. */
hsi_status hsi_run_predict(const hsi_run *r, int32_t *map, const hsi_view *cube,
                           const hsi_predict_opts *opts);

/* Writes map ((lines, samples) label values) by the path's extension:
 * .png (picture with legend), .tif/.tiff (GeoTIFF with colour table and
 * names), anything else an ENVI classification file (.hdr + data). geo:
 * the source cube's header for georeferencing (may be NULL). */
hsi_status hsi_run_write_map(const hsi_run *r, const char *path, const int32_t *map,
                             int64_t n_lines, int64_t n_samples, const hsi_meta *geo);

/* Which labelled pixels hsi_run_evaluate scores. */
typedef enum hsi_eval_on {
    HSI_EVAL_TEST = 0, /* the training split's test pixels (needs the run's split.hdr and a
                          scene of its size) */
    HSI_EVAL_ALL = 1,  /* every labelled pixel */
    HSI_EVAL_TRAIN = 2 /* the training split's training pixels (as HSI_EVAL_TEST) */
} hsi_eval_on;

/* "test", "all", "train"; and back (NULL = test; an error naming the word). */
const char *hsi_eval_on_name(hsi_eval_on on);
hsi_status hsi_eval_on_parse(hsi_eval_on *out, const char *s);

/* Whether the run can score `on` for a scene of n_lines x n_samples (the
 * test and train roles need the run's split, of that size): callers check
 * this before predicting; hsi_run_evaluate checks it too. */
hsi_status hsi_run_eval_check(const hsi_run *r, hsi_eval_on on, int64_t n_lines, int64_t n_samples);

/* Scores map against labels ((lines, samples) int32 label values, 0 =
 * unlabelled): metrics over class indices 0..K-1. Labelled pixels whose
 * class the run does not know are skipped and counted in *n_unknown (may be
 * NULL). m is initialised here (hsi_metrics_free it). */
hsi_status hsi_run_evaluate(const hsi_run *r, hsi_metrics *m, const int32_t *map,
                            const hsi_view *labels, hsi_eval_on on, int64_t *n_unknown);

/* The metrics as metrics.json writes them, with the class names and label
 * values of the run, plus "on" and "n_unknown". Caller frees (cJSON_Delete). */
struct cJSON;
struct cJSON *hsi_run_metrics_json(const hsi_run *r, const hsi_metrics *m, hsi_eval_on on,
                                   int64_t n_unknown);

#ifdef __cplusplus
}
#endif
#endif

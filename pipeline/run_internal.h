/* run_internal.h — what pipeline/ shares and nothing else needs: paths
 * inside a run directory, classes from logits, JSON and class-map writers,
 * the model file with its metadata. Not installed. */
#ifndef HSI_RUN_INTERNAL_H
#define HSI_RUN_INTERNAL_H

#include "pipeline/run.h"

/* Version of pipeline.json written (1: the normalisation in the JSON and
 * the PCA in the private pca.bin; 2: preprocessing.safetensors, split.hdr,
 * model metadata). */
#define HSI_RUN_VERSION 2

/* dir/name, malloc'd; NULL (with the error set) when out of memory. */
char *hsi_run_path(const char *dir, const char *name);

/* The class of a row of K logits (the first of equal maxima). */
static inline int64_t hsi_run_argmax(const float *row, int64_t K)
{
    int64_t best = 0;
    for (int64_t k = 1; k < K; k++)
        if (row[k] > row[best]) best = k;
    return best;
}

/* Rows of logits (n, K) whose class is y[i]. */
static inline int64_t hsi_run_count_correct(const float *logits, int64_t n, int64_t K, const int32_t *y)
{
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) c += hsi_run_argmax(logits + i * K, K) == y[i];
    return c;
}

/* A model's copy on the GPU classifying pixels (prediction, and the
 * trainer's validation when it trains there): batches of at most `batch`
 * patches packed on the host, uploaded, the eval-mode forward on the
 * device, the logits read back. */
struct hsi_dmodel;
typedef struct hsi_gpu_classifier {
    struct hsi_dmodel *dm;
    int owns_dm;
    float *x_h, *x_d, *z_h; /* (batch, sample) host and device, (batch, K) host */
    int64_t *px_d;          /* (batch) pixel indices on the device (a device patcher) */
    int batch;
    int64_t sample_floats;
} hsi_gpu_classifier;
/* dm: the trainer's copy (borrowed; batch at most its max_batch, its
 * convolutions as they are), or NULL: one made from r->net, with the
 * convolutions `conv`. */
hsi_status hsi_gpu_classifier_init(hsi_gpu_classifier *q, const hsi_run *r, struct hsi_dmodel *dm,
                                   int batch, hsi_gpu_conv conv);
/* Class indices of n pixels of pt's cube; y_true (n classes) or NULL: then
 * also *mean_loss, the mean cross-entropy of the logits (in double, on the
 * host; NaN when n is 0). pt's cube on the host: the patches are packed
 * there and copied; in device memory: cut there (each batch's pixel
 * indices copied). pixels: host array either way. */
hsi_status hsi_gpu_classify(hsi_gpu_classifier *q, const hsi_run *r, int32_t *pred,
                            const hsi_patcher *pt, const int64_t *pixels, int64_t n,
                            const int32_t *y_true, double *mean_loss);
void hsi_gpu_classifier_free(hsi_gpu_classifier *q); /* zeroed is fine */

/* Writes j as indented JSON, atomically. */
hsi_status hsi_run_save_json(const char *path, const struct cJSON *j);

/* An ENVI classification file: classes (1, lines, samples) u8/u16, names
 * and rgb (n_classes each; NULL entries get "Class k"), georeferencing
 * from geo (may be NULL). */
hsi_status hsi_write_class_envi(const char *path, const hsi_view *classes, int n_classes,
                                char *const *names, const uint8_t *rgb, const hsi_meta *geo,
                                const char *description);

/* pipeline.json parsed and validated on its own (no other file opened):
 * every field's type and range, file names confined to the run directory,
 * classes with unique labels. Owns its members. */
typedef struct hsi_run_spec {
    int version;              /* 1..HSI_RUN_VERSION (1 when absent) */
    char model[32];           /* a name of hsi_model_list */
    int patch;                /* odd, 1..HSI_PATCH_MAX */
    hsi_pad_mode pad;
    int64_t features;         /* 'features', or -1 when absent (version 1) */
    int64_t cube_bands;       /* 'cube_bands', or -1 when absent */
    char *model_file;         /* plain names inside the directory, NULL when absent */
    char *preprocessing_file;
    char *split_file;
    char *pca_file;           /* version 1 */
    int has_norm;             /* version 1's 'normalization' was present */
    hsi_norm norm;            /* ... and parsed */
    int n_classes;            /* K, 2..65535 */
    int64_t *label_ids;       /* (K) labels 1..65535, unique */
    char **names;             /* (K) */
    uint8_t *colors;          /* (K, 3) RGB, or NULL when no class has one */
} hsi_run_spec;

/* Parses len bytes of pipeline.json text; path names it in messages. The
 * memory entry point of hsi_run_load (and the fuzzer's). */
hsi_status hsi_run_spec_parse(hsi_run_spec *out, const char *text, size_t len, const char *path);
void hsi_run_spec_free(hsi_run_spec *s); /* zeroed memory is fine */

/* The trainer's 'config' of train_state.safetensors (JSON text, may be
 * NULL: *out = NULL): an object; best_val (-1 or 0..1), best_epoch and
 * since_best integers when present; 'config' an object of strings, finite
 * numbers and booleans, each of the type of the same key in `like` (the
 * options as this hsi writes them; may be NULL). *out: the parsed object
 * (cJSON_Delete it). path names the checkpoint in messages. */
hsi_status hsi_run_state_config(struct cJSON **out, const char *path, const char *config,
                                const struct cJSON *like);

/* model.safetensors with the architecture, input shape, classes, class
 * names and label values in its __metadata__. */
hsi_status hsi_run_save_model(const hsi_run *r, const char *path);

#endif

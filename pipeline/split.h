/* split.h — train/validation/test splits of a labelled scene: stratified
 * random (fraction or count per class), spatially disjoint blocks with a
 * guard band, or explicit train/test label maps. Seeded and deterministic.
 * It chooses pixels; it does not read cubes or cut patches (patches.h). */
#ifndef HSI_SPLIT_H
#define HSI_SPLIT_H

#include <stdio.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per-pixel roles. HSI_ROLE_NONE is unlabelled pixels and labelled pixels
 * left out (guard band). */
enum { HSI_ROLE_NONE = 0, HSI_ROLE_TRAIN = 1, HSI_ROLE_VAL = 2, HSI_ROLE_TEST = 3, HSI_N_ROLES = 4 };

typedef enum hsi_split_mode {
    HSI_SPLIT_RANDOM = 0,   /* stratified random pixels */
    HSI_SPLIT_DISJOINT = 1, /* square blocks + guard band */
    HSI_SPLIT_EXPLICIT = 2  /* train and test label maps given */
} hsi_split_mode;

typedef struct hsi_split_params {
    hsi_split_mode mode;
    /* How many training pixels per class (before the validation part is
     * carved out): per_class > 0 asks that many; else train_fraction of the
     * class's labelled pixels, rounded to nearest. Random mode keeps at
     * least one test pixel per class (and at least one training pixel when
     * the class has two or more), with a warning when it has to. Disjoint
     * mode adds whole blocks until the target is reached (see below).
     * Ignored in explicit mode. Default: train_fraction 0.1. */
    double train_fraction;
    int64_t per_class;
    /* Share of each class's training pixels moved to validation, rounded to
     * nearest, keeping >= 1 training pixel per class. Validation pixels are
     * drawn at random among the training pixels (after the guard band), so
     * they are as far from test as training is but not spatially apart
     * from training: validation accuracy is then optimistic, fine for early
     * stopping. Disjoint mode with val_disjoint = 1 takes whole blocks of
     * the training part instead and applies the guard band between
     * training and validation too (costly on small scenes). Default 0. */
    double val_fraction;
    int val_disjoint;
    uint64_t seed; /* default 0; same seed -> same split, always */
    /* Disjoint mode. The scene is tiled with block x block squares from
     * (0, 0). For each class, blocks are taken from a seeded random start
     * block outwards (nearest first) until the class's target is reached,
     * so the training part of a class is a compact patch of blocks and the
     * guard band costs only its rim. per_class_blocks = 0 (global): a
     * block goes whole to the class that holds most of its pixels, so no
     * block mixes roles; 1: each class's pixels in a block are assigned for
     * that class alone. A class's last block always stays in test; once a
     * class has training pixels, a block that would overshoot its target
     * by more than half is skipped. Keep
     * block well above 4 * patch_radius: a lone training block narrower
     * than that is wholly eaten by the guard band. Default block 16,
     * global. */
    int block;
    int per_class_blocks;
    /* Guard band, all modes but random: with r = patch_radius, every
     * training pixel closer than 2r + 1 (Chebyshev distance) to any test
     * pixel is dropped (role NONE), so that the (2r+1) x (2r+1) windows
     * around a training pixel and around a test pixel share no pixel; the
     * same holds between validation and test, and (disjoint mode with
     * val_disjoint) between training and validation. Mirror padding reads only pixels inside the
     * clipped window, so it keeps the guarantee. Explicit mode applies the
     * guard only when guard_explicit is set. Default 0 (no guard). */
    int patch_radius;
    int guard_explicit;
} hsi_split_params;

void hsi_split_params_init(hsi_split_params *p);

typedef struct hsi_split {
    int64_t n_lines, n_samples;
    uint8_t *role; /* (lines, samples) packed: HSI_ROLE_* */
    int n_classes; /* K: distinct non-zero labels found */
    int64_t *class_ids; /* K original label values, ascending; index = class */
    /* Per role r (index HSI_ROLE_TRAIN..TEST; [0] is unused and empty):
     * n[r] pixels, idx[r] their flat indices y * n_samples + x in ascending
     * order, cls[r] their class indices 0..K-1. */
    int64_t n[HSI_N_ROLES];
    int64_t *idx[HSI_N_ROLES];
    int32_t *cls[HSI_N_ROLES];
    /* counts[k * HSI_N_ROLES + r]: pixels of class k with role r; r = 0
     * counts labelled pixels left out (guard band or not drawn). */
    int64_t *counts;
    int64_t n_guard; /* labelled pixels dropped by the guard band */
    hsi_split_params params;
    int n_warnings;  /* warnings issued while splitting (also printed) */
    char *warnings;  /* their text, one per line ("" when none) */
} hsi_split;

/* labels: (lines, samples) view of any integer dtype, any strides, either
 * byte order; 0 = unlabelled, negative values are an error. Fails on
 * float or complex labels, on an empty scene, and when no pixel is
 * labelled. */
hsi_status hsi_split_make(hsi_split *out, const hsi_view *labels, const hsi_split_params *p);

/* Explicit split: train and test are (lines, samples) integer label maps
 * of the same shape; a pixel labelled in both is an error (leakage). The
 * class map is the union of both maps' labels; a class with no training
 * pixel gives a warning. p may be NULL (defaults); its mode is ignored. */
hsi_status hsi_split_explicit(hsi_split *out, const hsi_view *train, const hsi_view *test,
                              const hsi_split_params *p);

void hsi_split_free(hsi_split *s);

/* Class index of an original label value, or -1. */
int hsi_split_class_of(const hsi_split *s, int64_t label);

/* out: new (lines, samples) uint8 host view, 1 where the pixel's role r
 * has bit (1 << r) set in roles, else 0. With roles = 1 << HSI_ROLE_TRAIN
 * it is the mask the kernels take to fit normalisation and PCA on
 * training pixels only. */
hsi_status hsi_split_mask(hsi_view *out, const hsi_split *s, unsigned roles);

/* Smallest Chebyshev distance between a pixel of role a and one of role b
 * (INT64_MAX when either is empty). Used to check the guard band. */
int64_t hsi_split_min_distance(const hsi_split *s, int role_a, int role_b);

/* JSON: parameters, classes with counts per role, totals; with
 * with_indices the per-role index lists too. names: K class names or NULL.
 * The returned object belongs to the caller (cJSON_Delete). */
struct cJSON;
struct cJSON *hsi_split_json(const hsi_split *s, const char *const *names, int with_indices);
/* Writes hsi_split_json atomically to path. */
hsi_status hsi_split_save_json(const hsi_split *s, const char *path, const char *const *names,
                               int with_indices);
/* A table: class, label, name, train, val, test, unused, total. */
void hsi_split_print(const hsi_split *s, FILE *fp, const char *const *names);

#ifdef __cplusplus
}
#endif
#endif

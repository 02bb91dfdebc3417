/* metrics.h — classification metrics from true and predicted class
 * indices: confusion matrix, OA, AA, Cohen's kappa, per-class recall,
 * precision, F1 and support; JSON and a printable table. It scores
 * predictions; it does not run models or hold label maps. */
#ifndef HSI_METRICS_H
#define HSI_METRICS_H

#include <stdio.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hsi_metrics {
    int n_classes;       /* K */
    int64_t n;           /* samples counted */
    int64_t correct;     /* trace of the confusion matrix */
    int64_t *confusion;  /* (K, K) row-major: [true * K + predicted] */
    int64_t *support;    /* K: samples whose true class is k (row sums) */
    int64_t *predicted;  /* K: samples predicted as k (column sums) */
    /* Derived by hsi_metrics_finish. A class with no true sample has recall
     * 0, a class never predicted has precision 0, F1 is 0 when precision +
     * recall is 0 (scikit-learn's zero_division=0). */
    double *recall, *precision, *f1; /* K */
    double oa;     /* correct / n */
    double aa;     /* mean recall over the classes with support > 0
                      (= sklearn balanced_accuracy_score) */
    double kappa;  /* Cohen's kappa; NaN when the chance agreement is 1 */
    int n_present; /* classes with support > 0 */
} hsi_metrics;

/* Zeroed counts for K classes (K >= 1). */
hsi_status hsi_metrics_init(hsi_metrics *m, int n_classes);
/* Accumulates n pairs; y_true, y_pred: (n,) class indices in [0, K).
 * An index out of range is an error naming its position. */
hsi_status hsi_metrics_add(hsi_metrics *m, const int32_t *y_true, const int32_t *y_pred,
                           int64_t n);
/* Computes the derived fields from the counts (may be called again after
 * more hsi_metrics_add calls). */
void hsi_metrics_finish(hsi_metrics *m);
/* init + add + finish. */
hsi_status hsi_metrics_compute(hsi_metrics *m, const int32_t *y_true, const int32_t *y_pred,
                               int64_t n, int n_classes);
void hsi_metrics_free(hsi_metrics *m);

/* JSON: n, oa, aa, kappa, classes [{index, label, name, support,
 * predicted, recall, precision, f1}], confusion [[...]] (rows = true).
 * names, label_ids: K entries each, or NULL. Caller frees (cJSON_Delete).
 * A NaN kappa is written as null. */
struct cJSON;
struct cJSON *hsi_metrics_json(const hsi_metrics *m, const char *const *names,
                               const int64_t *label_ids);
hsi_status hsi_metrics_save_json(const hsi_metrics *m, const char *path, const char *const *names,
                                 const int64_t *label_ids);
/* Table: per class (by its label value from label_ids, or its index when
 * NULL) support, recall, precision, F1; then OA, AA, kappa; with_confusion
 * adds the confusion matrix. */
void hsi_metrics_print(const hsi_metrics *m, FILE *fp, const char *const *names,
                       const int64_t *label_ids, int with_confusion);

#ifdef __cplusplus
}
#endif
#endif

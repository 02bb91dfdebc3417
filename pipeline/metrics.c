/* metrics.c — confusion matrix and the scores derived from it (see
 * metrics.h). Integer counts, double scores; nothing model-specific. */
#include "metrics.h"

#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

hsi_status hsi_metrics_init(hsi_metrics *m, int n_classes)
{
    memset(m, 0, sizeof *m);
    if (n_classes < 1 || n_classes > 65536)
        return HSI_FAIL(HSI_ERR_ARG, "metrics: n_classes must be in [1, 65536] (found %d)",
                        n_classes);
    size_t K = (size_t)n_classes;
    m->n_classes = n_classes;
    m->confusion = calloc(K * K, sizeof *m->confusion);
    m->support = calloc(K, sizeof *m->support);
    m->predicted = calloc(K, sizeof *m->predicted);
    m->recall = calloc(K, sizeof *m->recall);
    m->precision = calloc(K, sizeof *m->precision);
    m->f1 = calloc(K, sizeof *m->f1);
    if (!m->confusion || !m->support || !m->predicted || !m->recall || !m->precision || !m->f1) {
        hsi_metrics_free(m);
        return HSI_FAIL(HSI_ERR_NOMEM, "metrics: cannot allocate for %d classes", n_classes);
    }
    return HSI_OK;
}

hsi_status hsi_metrics_add(hsi_metrics *m, const int32_t *y_true, const int32_t *y_pred,
                           int64_t n)
{
    int K = m->n_classes;
    for (int64_t i = 0; i < n; i++) {
        int32_t t = y_true[i], p = y_pred[i];
        if (t < 0 || t >= K || p < 0 || p >= K)
            return HSI_FAIL(HSI_ERR_ARG,
                            "metrics: sample %lld has true class %d and predicted class %d; "
                            "expected both in [0, %d)",
                            (long long)i, (int)t, (int)p, K);
    }
    for (int64_t i = 0; i < n; i++) {
        m->confusion[(int64_t)y_true[i] * K + y_pred[i]]++;
        m->support[y_true[i]]++;
        m->predicted[y_pred[i]]++;
        m->correct += y_true[i] == y_pred[i];
    }
    m->n += n;
    return HSI_OK;
}

void hsi_metrics_finish(hsi_metrics *m)
{
    int K = m->n_classes;
    double sum_recall = 0, chance = 0, n = (double)m->n;
    m->n_present = 0;
    for (int k = 0; k < K; k++) {
        double tp = (double)m->confusion[(int64_t)k * K + k];
        double r = m->support[k] ? tp / (double)m->support[k] : 0.0;
        double p = m->predicted[k] ? tp / (double)m->predicted[k] : 0.0;
        m->recall[k] = r;
        m->precision[k] = p;
        m->f1[k] = p + r > 0 ? 2.0 * p * r / (p + r) : 0.0;
        if (m->support[k]) {
            m->n_present++;
            sum_recall += r;
        }
        if (m->n) chance += ((double)m->support[k] / n) * ((double)m->predicted[k] / n);
    }
    m->oa = m->n ? (double)m->correct / n : 0.0;
    m->aa = m->n_present ? sum_recall / m->n_present : 0.0;
    m->kappa = (m->n && chance < 1.0) ? (m->oa - chance) / (1.0 - chance) : NAN;
}

hsi_status hsi_metrics_compute(hsi_metrics *m, const int32_t *y_true, const int32_t *y_pred,
                               int64_t n, int n_classes)
{
    hsi_status st = hsi_metrics_init(m, n_classes);
    if (st != HSI_OK) return st;
    st = hsi_metrics_add(m, y_true, y_pred, n);
    if (st != HSI_OK) {
        hsi_metrics_free(m);
        return st;
    }
    hsi_metrics_finish(m);
    return HSI_OK;
}

void hsi_metrics_free(hsi_metrics *m)
{
    if (!m) return;
    free(m->confusion);
    free(m->support);
    free(m->predicted);
    free(m->recall);
    free(m->precision);
    free(m->f1);
    memset(m, 0, sizeof *m);
}

static void add_num(cJSON *o, const char *key, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

cJSON *hsi_metrics_json(const hsi_metrics *m, const char *const *names, const int64_t *label_ids)
{
    int K = m->n_classes;
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddNumberToObject(o, "n", (double)m->n);
    add_num(o, "oa", m->oa);
    add_num(o, "aa", m->aa);
    add_num(o, "kappa", m->kappa);
    cJSON *cl = cJSON_AddArrayToObject(o, "classes");
    cJSON *cm = cJSON_AddArrayToObject(o, "confusion");
    if (!cl || !cm) goto fail;
    for (int k = 0; k < K; k++) {
        cJSON *c = cJSON_CreateObject();
        if (!c) goto fail;
        cJSON_AddItemToArray(cl, c);
        cJSON_AddNumberToObject(c, "index", k);
        if (label_ids) cJSON_AddNumberToObject(c, "label", (double)label_ids[k]);
        if (names && names[k]) cJSON_AddStringToObject(c, "name", names[k]);
        cJSON_AddNumberToObject(c, "support", (double)m->support[k]);
        cJSON_AddNumberToObject(c, "predicted", (double)m->predicted[k]);
        add_num(c, "recall", m->recall[k]);
        add_num(c, "precision", m->precision[k]);
        add_num(c, "f1", m->f1[k]);
        cJSON *row = cJSON_CreateArray();
        if (!row) goto fail;
        cJSON_AddItemToArray(cm, row);
        for (int j = 0; j < K; j++)
            cJSON_AddItemToArray(row, cJSON_CreateNumber((double)m->confusion[(int64_t)k * K + j]));
    }
    return o;
fail:
    cJSON_Delete(o);
    return NULL;
}

hsi_status hsi_metrics_save_json(const hsi_metrics *m, const char *path, const char *const *names,
                                 const int64_t *label_ids)
{
    hsi_status st = HSI_OK;
    char *text = NULL;
    cJSON *o = hsi_metrics_json(m, names, label_ids);
    if (!o || !(text = cJSON_Print(o))) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "%s: cannot build the metrics JSON", path);
        goto cleanup;
    }
    st = hsi_write_file_atomic(path, text, strlen(text));
cleanup:
    free(text);
    cJSON_Delete(o);
    return st;
}

void hsi_metrics_print(const hsi_metrics *m, FILE *fp, const char *const *names,
                       const int64_t *label_ids, int with_confusion)
{
    int K = m->n_classes;
    /* classes as the label files number them (their label values) */
#define ID(k) (label_ids ? (long long)label_ids[k] : (long long)(k))
    fprintf(fp, "%5s  %-20s %8s %8s %9s %8s\n", "label", "name", "support", "recall",
            "precision", "f1");
    for (int k = 0; k < K; k++)
        fprintf(fp, "%5lld  %-20.20s %8lld %8.4f %9.4f %8.4f\n", ID(k), names && names[k] ? names[k] : "",
                (long long)m->support[k], m->recall[k], m->precision[k], m->f1[k]);
    fprintf(fp, "OA %.4f  AA %.4f  kappa %.4f  (n = %lld)\n", m->oa, m->aa, m->kappa,
            (long long)m->n);
    if (!with_confusion) return;
    fprintf(fp, "confusion (rows: true label, columns: predicted label)\n%5s", "");
    for (int j = 0; j < K; j++) fprintf(fp, " %7lld", ID(j));
    fputc('\n', fp);
    for (int k = 0; k < K; k++) {
        fprintf(fp, "%5lld", ID(k));
        for (int j = 0; j < K; j++) fprintf(fp, " %7lld", (long long)m->confusion[(int64_t)k * K + j]);
        fputc('\n', fp);
    }
#undef ID
}

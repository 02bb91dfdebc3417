/* test_pipeline_metrics.c — metrics against scikit-learn (fixtures from
 * tests/fixtures/make_pipeline_fixtures.py: confusion_matrix,
 * precision_recall_fscore_support, balanced_accuracy_score,
 * cohen_kappa_score) plus hand-computed edge cases, JSON and table. */
#include "test.h"

#include <cJSON.h>

#include "pipeline/metrics.h"

#define FIX "tests/fixtures/pipeline/"

/* Numbers of the line "key v v v ..." of a fixture file (malloc'd). */
static double *fx_line(const char *file, const char *key, int64_t *n)
{
    char *text = NULL;
    size_t len = 0;
    *n = 0;
    if (hsi_read_file(file, &text, &len) != HSI_OK) {
        fprintf(stderr, "\n  cannot read %s (run from the repository root)\n", file);
        return NULL;
    }
    size_t kl = strlen(key);
    char *p = text;
    while (p && *p) {
        if (!strncmp(p, key, kl) && p[kl] == ' ') break;
        p = strchr(p, '\n');
        if (p) p++;
    }
    double *v = NULL;
    if (p && *p) {
        char *e = strchr(p, '\n');
        if (e) *e = 0;
        v = malloc((strlen(p) / 2 + 2) * sizeof *v);
        char *q = p + kl, *end;
        for (;;) {
            double d = strtod(q, &end);
            if (end == q) break;
            v[(*n)++] = d;
            q = end;
        }
    }
    free(text);
    return v;
}

static void check_case(const char *file)
{
    int64_t n, nk, nt, np;
    double *kd = fx_line(file, "k", &nk), *nd = fx_line(file, "n", &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(kd);
    CU_ASSERT_PTR_NOT_NULL_FATAL(nd);
    int K = (int)kd[0];
    n = (int64_t)nd[0];
    double *t = fx_line(file, "y_true", &nt), *p = fx_line(file, "y_pred", &np);
    CU_ASSERT_EQUAL_FATAL(nt, n);
    CU_ASSERT_EQUAL_FATAL(np, n);
    int32_t *yt = malloc((size_t)n * 4), *yp = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) yt[i] = (int32_t)t[i], yp[i] = (int32_t)p[i];
    /* accumulate in two chunks: same result as one call */
    hsi_metrics m;
    HSI_CHECK_OK(hsi_metrics_init(&m, K));
    HSI_CHECK_OK(hsi_metrics_add(&m, yt, yp, n / 3));
    HSI_CHECK_OK(hsi_metrics_add(&m, yt + n / 3, yp + n / 3, n - n / 3));
    hsi_metrics_finish(&m);
    int64_t c;
    double *cm = fx_line(file, "confusion", &c);
    CU_ASSERT_EQUAL_FATAL(c, (int64_t)K * K);
    int bad = 0;
    for (int64_t i = 0; i < c; i++) bad += (double)m.confusion[i] != cm[i];
    CU_ASSERT_EQUAL(bad, 0);
    const char *keys[4] = {"precision", "recall", "f1", "support"};
    for (int q = 0; q < 4; q++) {
        double *ref = fx_line(file, keys[q], &c);
        CU_ASSERT_EQUAL_FATAL(c, K);
        for (int k = 0; k < K; k++) {
            double got = q == 0 ? m.precision[k] : q == 1 ? m.recall[k] : q == 2 ? m.f1[k]
                                                                           : (double)m.support[k];
            HSI_ASSERT_NEAR(got, ref[k], 1e-12);
        }
        free(ref);
    }
    const char *sk[3] = {"oa", "aa", "kappa"};
    double mine[3] = {m.oa, m.aa, m.kappa};
    for (int q = 0; q < 3; q++) {
        double *ref = fx_line(file, sk[q], &c);
        CU_ASSERT_EQUAL_FATAL(c, 1);
        HSI_ASSERT_NEAR(mine[q], ref[0], 1e-12);
        free(ref);
    }
    hsi_metrics_free(&m);
    free(cm);
    free(kd);
    free(nd);
    free(t);
    free(p);
    free(yt);
    free(yp);
}

static void test_vs_sklearn_a(void) { check_case(FIX "metrics_a.txt"); }
static void test_vs_sklearn_b(void) { check_case(FIX "metrics_b.txt"); }

static void test_edges(void)
{
    hsi_metrics m;
    /* perfect, 2 classes: kappa 1; one class only: chance 1 -> NaN */
    int32_t a[4] = {0, 1, 1, 0}, b[4] = {0, 0, 0, 0};
    HSI_CHECK_OK(hsi_metrics_compute(&m, a, a, 4, 2));
    HSI_ASSERT_NEAR(m.kappa, 1.0, 1e-15);
    HSI_ASSERT_NEAR(m.aa, 1.0, 1e-15);
    hsi_metrics_free(&m);
    HSI_CHECK_OK(hsi_metrics_compute(&m, b, b, 4, 3));
    CU_ASSERT(isnan(m.kappa));
    HSI_ASSERT_NEAR(m.oa, 1.0, 1e-15);
    CU_ASSERT_EQUAL(m.n_present, 1);
    HSI_ASSERT_NEAR(m.aa, 1.0, 1e-15);
    cJSON *o = hsi_metrics_json(&m, NULL, NULL);
    CU_ASSERT(cJSON_IsNull(cJSON_GetObjectItem(o, "kappa")));
    cJSON_Delete(o);
    hsi_metrics_free(&m);
    /* all wrong, hand computed: true (0,0,1,1), pred (1,1,0,0): OA 0,
     * chance 0.5, kappa -1 */
    int32_t t[4] = {0, 0, 1, 1}, p[4] = {1, 1, 0, 0};
    HSI_CHECK_OK(hsi_metrics_compute(&m, t, p, 4, 2));
    HSI_ASSERT_NEAR(m.kappa, -1.0, 1e-15);
    HSI_ASSERT_NEAR(m.f1[0], 0.0, 0);
    hsi_metrics_free(&m);
    int32_t badp[3] = {0, 2, 1};
    HSI_CHECK_FAILS(hsi_metrics_compute(&m, t, badp, 3, 2), HSI_ERR_ARG,
                    "sample 1 has true class 0 and predicted class 2");
    HSI_CHECK_FAILS(hsi_metrics_init(&m, 0), HSI_ERR_ARG, "n_classes");
}

static void test_json_table(void)
{
    int32_t t[6] = {0, 0, 1, 1, 2, 2}, p[6] = {0, 1, 1, 1, 2, 0};
    hsi_metrics m;
    HSI_CHECK_OK(hsi_metrics_compute(&m, t, p, 6, 3));
    const char *names[3] = {"corn", "grass", "soil"};
    int64_t ids[3] = {2, 5, 9};
    const char *path = hsi_test_tmp("metrics.json");
    HSI_CHECK_OK(hsi_metrics_save_json(&m, path, names, ids));
    char *text = NULL;
    size_t len;
    HSI_CHECK_OK(hsi_read_file(path, &text, &len));
    cJSON *o = cJSON_Parse(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    HSI_ASSERT_NEAR(cJSON_GetObjectItem(o, "oa")->valuedouble, 4.0 / 6.0, 1e-12);
    HSI_ASSERT_NEAR(cJSON_GetObjectItem(o, "aa")->valuedouble, (0.5 + 1 + 0.5) / 3, 1e-12);
    cJSON *c1 = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "classes"), 1);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(c1, "name")->valuestring, "grass");
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(c1, "label")->valueint, 5);
    HSI_ASSERT_NEAR(cJSON_GetObjectItem(c1, "precision")->valuedouble, 2.0 / 3.0, 1e-12);
    cJSON *row2 = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "confusion"), 2);
    CU_ASSERT_EQUAL(cJSON_GetArrayItem(row2, 0)->valueint, 1);
    CU_ASSERT_EQUAL(cJSON_GetArrayItem(row2, 2)->valueint, 1);
    cJSON_Delete(o);
    free(text);
    char *buf = NULL;
    size_t blen = 0;
    FILE *fp = open_memstream(&buf, &blen);
    hsi_metrics_print(&m, fp, names, ids, 1);
    fclose(fp);
    /* classes by their label values, in the table and the confusion matrix */
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "    5  grass                       2   1.0000    0.6667   0.8000"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "            2       5       9\n    2       1       1       0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "OA 0.6667  AA 0.6667"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "rows: true"));
    free(buf);
    hsi_metrics_free(&m);
}

HSI_SUITE(pipeline_metrics, 0, {"vs sklearn: 6 classes, absent and never-predicted", test_vs_sklearn_a},
          {"vs sklearn: 3 classes, small", test_vs_sklearn_b}, {"edge cases", test_edges},
          {"JSON and table", test_json_table})

/* test_train.c — `hsi train`, `predict`, `eval` on the bundled scene, as a
 * user runs them: the files promised exist and agree with each other, the
 * metrics are recomputed here from the confusion matrix, resume continues
 * bit-identically, and bad arguments fail clearly. Short runs (2-3 epochs):
 * accuracy is measured by bench/, not asserted here. */
#include <cJSON.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/envi.h"
#include "test.h"

#define SCENE "data_samples/scene.hdr data_samples/scene_gt.hdr"

static char out[1 << 16];

static void test_train_outputs(void)
{
    const char *dir = hsi_test_tmp("t1");
    int rc = hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " --out %s --epochs 1 --train 0.03 --quiet --seed 3", dir);
    if (rc) fprintf(stderr, "%s\n", out);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    const char *files[] = {"model.safetensors", "pipeline.json", "preprocessing.safetensors",
                           "metrics.json", "split.json", "split.hdr", "split", "map.hdr", "map",
                           "map.png", "train.log", "train_state.safetensors", "history.csv"};
    char path[4096];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (access(path, R_OK) != 0) fprintf(stderr, "\n  missing %s\n", path);
        CU_ASSERT_EQUAL(access(path, R_OK), 0);
    }
    /* metrics: OA, AA and kappa recomputed from the confusion matrix */
    snprintf(path, sizeof path, "%s/metrics.json", dir);
    cJSON *m = hsi_test_load_json(path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    cJSON *cm = cJSON_GetObjectItem(m, "confusion");
    int K = cJSON_GetArraySize(cm);
    CU_ASSERT_EQUAL_FATAL(K, 8);
    double tot = 0, diag = 0, rows[8] = {0}, cols[8] = {0}, aa = 0;
    for (int i = 0; i < K; i++)
        for (int j = 0; j < K; j++) {
            double v = cJSON_GetArrayItem(cJSON_GetArrayItem(cm, i), j)->valuedouble;
            tot += v;
            rows[i] += v;
            cols[j] += v;
            if (i == j) diag += v;
        }
    for (int i = 0; i < K; i++)
        aa += cJSON_GetArrayItem(cJSON_GetArrayItem(cm, i), i)->valuedouble / rows[i] / K;
    double pe = 0;
    for (int i = 0; i < K; i++) pe += rows[i] * cols[i] / (tot * tot);
    HSI_ASSERT_NEAR(cJSON_GetObjectItem(m, "oa")->valuedouble, diag / tot, 1e-9);
    HSI_ASSERT_NEAR(cJSON_GetObjectItem(m, "aa")->valuedouble, aa, 1e-9);
    HSI_ASSERT_NEAR(cJSON_GetObjectItem(m, "kappa")->valuedouble, (diag / tot - pe) / (1 - pe),
                    1e-9);
    double test_oa = cJSON_GetObjectItem(m, "oa")->valuedouble;
    cJSON *sc = cJSON_GetObjectItem(m, "split_counts");
    HSI_ASSERT_NEAR(cJSON_GetObjectItem(sc, "test")->valuedouble, tot, 0);
    /* 6421 labelled pixels = train + val + test (random split, no guard) */
    HSI_ASSERT_NEAR(cJSON_GetObjectItem(sc, "train")->valuedouble +
                        cJSON_GetObjectItem(sc, "val")->valuedouble + tot,
                    6421, 0);
    CU_ASSERT(cJSON_IsFalse(cJSON_GetObjectItem(m, "leaky_protocol")));
    cJSON_Delete(m);
    /* the map: every pixel one of the 8 class ids, metadata of a classification file */
    snprintf(path, sizeof path, "%s/map.hdr", dir);
    hsi_cube mc;
    hsi_cube_init(&mc);
    HSI_CHECK_OK(hsi_envi_open(&mc, path));
    CU_ASSERT_EQUAL(mc.meta.file_kind, HSI_FILE_CLASSIFICATION);
    CU_ASSERT_EQUAL(mc.view.shape[1], 96);
    const uint8_t *mp = mc.view.buf->data;
    int bad = 0;
    for (int i = 0; i < 96 * 96; i++) bad += mp[i] < 1 || mp[i] > 8;
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_STRING_EQUAL(mc.meta.class_names[3], "Young maize");
    /* predict with the saved pipeline gives the same map */
    const char *pm = hsi_test_tmp("t1_pred.hdr");
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " predict %s data_samples/scene.hdr %s --quiet", dir, pm), 0);
    hsi_cube pc;
    hsi_cube_init(&pc);
    HSI_CHECK_OK(hsi_envi_open(&pc, pm));
    CU_ASSERT_EQUAL(memcmp(pc.view.buf->data, mc.view.buf->data, 96 * 96), 0);
    hsi_cube_free(&pc);
    /* eval on the split's test pixels (the default) is metrics.json's OA */
    const char *et = hsi_test_tmp("t1_eval_test.json");
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " eval %s " SCENE " --out %s", dir, et), 0);
    cJSON *e = hsi_test_load_json(et);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    HSI_ASSERT_NEAR(cJSON_GetObjectItem(e, "oa")->valuedouble, test_oa, 0);
    HSI_ASSERT_NEAR(cJSON_GetObjectItem(e, "n")->valuedouble, tot, 0);
    cJSON_Delete(e);
    /* eval over all labelled pixels agrees with the map */
    const char *ej = hsi_test_tmp("t1_eval.json");
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " eval %s " SCENE " --on all -o %s", dir, ej), 0);
    hsi_cube gt;
    hsi_cube_init(&gt);
    HSI_CHECK_OK(hsi_envi_open(&gt, "data_samples/scene_gt.hdr"));
    const uint8_t *g = gt.view.buf->data;
    int64_t n = 0, ok = 0;
    for (int i = 0; i < 96 * 96; i++)
        if (g[i]) {
            n++;
            ok += g[i] == mp[i];
        }
    e = hsi_test_load_json(ej);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    HSI_ASSERT_NEAR(cJSON_GetObjectItem(e, "oa")->valuedouble, (double)ok / (double)n, 1e-12);
    cJSON_Delete(e);
    hsi_cube_free(&gt);
    hsi_cube_free(&mc);
}

static void test_resume_bit_identical(void)
{
    const char *a = hsi_test_tmp("ra"), *b = hsi_test_tmp("rb");
    const char *opts = "--epochs 2 --train 0.03 --val 0 --quiet --seed 5 --workers 2 --schedule constant";
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " --out %s %s", a, opts), 0);
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " --out %s --epochs 1 --train 0.03 --val 0 "
                                      "--quiet --seed 5 --workers 0 --schedule constant", b), 0);
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " --out %s %s --resume", b, opts), 0);
    char pa[4096], pb[4096];
    snprintf(pa, sizeof pa, "%s/model.safetensors", a);
    snprintf(pb, sizeof pb, "%s/model.safetensors", b);
    CU_ASSERT(hsi_test_same_file(pa, pb));
    /* nothing left to resume */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " --out %s %s --resume", b, opts), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "already holds 2 epochs"));
}

static void test_train_errors(void)
{
    const char *dir = hsi_test_tmp("terr");
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " --out %s --patch 10", dir), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--patch must be odd"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--out DIR is required"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " train data_samples/scene.hdr data_samples/scene.hdr --out %s", dir),
                    1);
    if (hsi_cuda_device_count() == 0) { /* with a device it trains (gpu_check's commands stage) */
        CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " --out %s --device cuda --epochs 1", dir), 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "--device cuda"));
    }
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " train --list-models"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "5122176")); /* HybridSN's published count */
    /* an unknown model is refused before any work, and nothing is created */
    const char *nodir = hsi_test_tmp("terr_model");
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " --out %s --model resnet", nodir), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--model resnet"));
    CU_ASSERT_PTR_NULL(strstr(out, "split"));
    CU_ASSERT_NOT_EQUAL(access(nodir, F_OK), 0);
}

/* A run is not replaced silently; the output folder's parents are created;
 * without validation pixels no validation OA is claimed; eval names what it
 * scored. */
static void test_train_no_silent_overwrite(void)
{
    char dir[4096], path[4096];
    snprintf(dir, sizeof dir, "%s/a/b/run", hsi_test_tmpdir());
    const char *opts = "--epochs 1 --train 0.03 --val 0 --quiet";
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " --out %s %s", dir, opts), 0);
    snprintf(path, sizeof path, "%s/metrics.json", dir);
    cJSON *m = hsi_test_load_json(path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT(cJSON_IsNull(cJSON_GetObjectItem(m, "best_val_oa")));
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(m, "epoch_selection")->valuestring,
                           "last epoch (no validation pixels)");
    double n_train = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "split_counts"), "train")->valuedouble;
    cJSON_Delete(m);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    char *before = NULL;
    size_t nb = 0;
    HSI_CHECK_OK(hsi_read_file(path, &before, &nb));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " --out %s %s --seed 9", dir, opts), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--overwrite"));
    char *after = NULL;
    size_t na = 0;
    HSI_CHECK_OK(hsi_read_file(path, &after, &na));
    CU_ASSERT(na == nb && memcmp(before, after, nb) == 0); /* untouched */
    free(after);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " --out %s %s --seed 9 --overwrite", dir,
                                 opts), 0);
    HSI_CHECK_OK(hsi_read_file(path, &after, &na));
    CU_ASSERT(na != nb || memcmp(before, after, nb) != 0); /* replaced, as asked */
    free(before);
    free(after);
    /* eval on the training pixels: their count, and the role in the JSON */
    const char *ej = hsi_test_tmp("t_on_train.json");
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " eval %s " SCENE " --on train --out %s", dir, ej), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "training pixels"));
    cJSON *e = hsi_test_load_json(ej);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    HSI_ASSERT_NEAR(cJSON_GetObjectItem(e, "n")->valuedouble, n_train, 0);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(e, "on")->valuestring, "train");
    cJSON_Delete(e);
    /* --json: JSON alone on stdout, equal to the file */
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, "{ " HSI_BIN " eval %s " SCENE " --on train --json 2>/dev/null; }", dir), 0);
    e = cJSON_Parse(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    HSI_ASSERT_NEAR(cJSON_GetObjectItem(e, "n")->valuedouble, n_train, 0);
    cJSON_Delete(e);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " eval %s " SCENE " --out -", dir), 2);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " eval %s " SCENE " --var", dir), 2);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " predict %s data_samples/scene.hdr x.hdr --var", dir), 2);
}

/* --resume refuses options that change the model, the data or the steps,
 * and says how a cosine schedule planned for fewer epochs goes on. */
static void test_resume_checks_options(void)
{
    const char *dir = hsi_test_tmp("rchk");
    const char *opts = "--train 0.03 --val 0 --quiet --seed 5";
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " --out %s %s --epochs 1", dir, opts), 0);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " --out %s %s --epochs 2 --resume --patch 7",
                                 dir, opts), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "'patch' was 11"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " --out %s %s --epochs 2 --resume --lr 0.01",
                                 dir, opts), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "'lr' was 0.001"));
    /* more epochs of the same run: accepted, the schedule re-planned and said so */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " --out %s --train 0.03 --val 0 --seed 5 "
                                 "--epochs 2 --resume", dir), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "re-planned for 2"));
}

/* Labels without names or colours (a plain one-band file, as .mat labels
 * come): the map gets one naming scheme and distinct, non-black colours. */
static void test_plain_labels_get_a_palette(void)
{
    char base[4096];
    snprintf(base, sizeof base, "%s", hsi_test_tmp("plain"));
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, "mkdir -p %s && cp data_samples/scene_gt %s/gt && printf "
                                       "'ENVI\\nsamples = 96\\nlines = 96\\nbands = 1\\nheader offset = 0\\n"
                                       "data type = 1\\ninterleave = bsq\\nbyte order = 0\\n' > %s/gt.hdr",
                                       base, base, base), 0);
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " train data_samples/scene.hdr %s/gt.hdr --out %s/run "
                                       "--epochs 1 --train 0.03 --quiet", base, base), 0);
    char path[4200];
    snprintf(path, sizeof path, "%s/run/map.hdr", base);
    hsi_cube m;
    hsi_cube_init(&m);
    HSI_CHECK_OK(hsi_envi_open(&m, path));
    CU_ASSERT_EQUAL_FATAL(m.meta.n_classes, 9);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m.meta.class_lookup);
    int black = 0, same = 0;
    for (int k = 1; k < 9; k++) {
        const uint8_t *a = m.meta.class_lookup + 3 * k;
        black += !a[0] && !a[1] && !a[2];
        for (int q = 1; q < k; q++) same += !memcmp(a, m.meta.class_lookup + 3 * q, 3);
        char want[32];
        snprintf(want, sizeof want, "Class %d", k);
        CU_ASSERT_STRING_EQUAL(m.meta.class_names[k], want);
    }
    CU_ASSERT_EQUAL(black, 0);
    CU_ASSERT_EQUAL(same, 0);
    hsi_cube_free(&m);
}

HSI_SUITE(train_cli, 0, {"train writes consistent outputs", test_train_outputs},
          {"resume is bit-identical", test_resume_bit_identical},
          {"bad arguments", test_train_errors},
          {"no silent overwrite, parents created, no unmeasured validation OA", test_train_no_silent_overwrite},
          {"resume refuses changed options, re-plans the schedule and says so", test_resume_checks_options},
          {"labels without colours get a palette and one naming scheme", test_plain_labels_get_a_palette})

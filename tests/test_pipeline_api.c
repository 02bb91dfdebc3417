/* test_pipeline_api.c — the training job through the library, in process:
 * the trainer writes the same files as `hsi train` byte for byte, a run
 * directory loaded in a fresh object predicts the same map, the trainer
 * runs epoch by epoch and stops when its callback asks, the preprocessing
 * model round-trips (and an older hsi's pca.bin still loads), and numpy
 * alone reproduces a prediction from the documented files. */
#include <cJSON.h>
#include <unistd.h>

#include "io/cube.h"
#include "io/labels.h"
#include "kernels/pca.h"
#include "pipeline/preprocess.h"
#include "pipeline/run.h"
#include "pipeline/trainer.h"
#include "test.h"

#define CUBE "data_samples/scene.hdr"
#define GT "data_samples/scene_gt.hdr"

static char out[1 << 16];

typedef struct events {
    int epochs, infos, done, stop_after;
    double last_loss;
} events;

static int on_event(void *ctx, const hsi_train_event *ev)
{
    events *e = ctx;
    CU_ASSERT_PTR_NOT_NULL(ev->text);
    if (ev->kind == HSI_TRAIN_EV_EPOCH) {
        e->epochs++;
        e->last_loss = ev->loss;
        CU_ASSERT_EQUAL(ev->epoch, e->epochs);
        return e->stop_after > 0 && e->epochs >= e->stop_after;
    }
    if (ev->kind == HSI_TRAIN_EV_DONE) e->done++;
    else e->infos++;
    return 0;
}

static void config(hsi_train_config *c, const char *dir, int epochs)
{
    hsi_train_config_init(c);
    c->cube_path = CUBE;
    c->labels_path = GT;
    c->out_dir = dir;
    c->epochs = epochs;
    c->train_fraction = 0.03;
    c->seed = 3;
}

/* The trainer in process and `hsi train` give the same bytes. */
static void test_api_matches_cli(void)
{
    const char *api = hsi_test_tmp("api_run"), *cli = hsi_test_tmp("cli_run");
    hsi_train_config c;
    config(&c, api, 2);
    events ev = {0};
    c.progress = on_event;
    c.progress_ctx = &ev;
    hsi_train_result res;
    HSI_CHECK_OK(hsi_train_run(&c, &res));
    CU_ASSERT_EQUAL(ev.epochs, 2);
    CU_ASSERT_EQUAL(ev.done, 1);
    CU_ASSERT(ev.infos >= 3); /* split line, split table, preprocessing, model */
    CU_ASSERT_EQUAL(res.epochs_run, 2);
    CU_ASSERT(res.oa > 0.3 && res.oa <= 1);
    int rc = hsi_test_run(out, sizeof out,
                          HSI_BIN " train " CUBE " " GT " --out %s --epochs 2 --train 0.03 --seed 3 --quiet",
                          cli);
    if (rc) fprintf(stderr, "%s\n", out);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    const char *files[] = {"model.safetensors", "preprocessing.safetensors", "split", "split.hdr",
                           "split.json", "map", "map.hdr", "map.png", "train_state.safetensors"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) CU_ASSERT(hsi_test_same_in(api, cli, files[i]));
    /* metrics.json agrees with the result (timings aside) */
    char path[4096], *text = NULL;
    size_t n;
    snprintf(path, sizeof path, "%s/metrics.json", cli);
    HSI_CHECK_OK(hsi_read_file(path, &text, &n));
    cJSON *m = cJSON_Parse(text);
    free(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    /* cJSON prints 15 significant digits when they read back within an
     * epsilon (not always bit-exact): agreement to 1e-14 */
    HSI_ASSERT_NEAR(cJSON_GetObjectItem(m, "oa")->valuedouble, res.oa, 1e-14);
    HSI_ASSERT_NEAR(cJSON_GetObjectItem(m, "kappa")->valuedouble, res.kappa, 1e-14);
    cJSON_Delete(m);
}

/* A run directory loaded in a fresh object predicts the map the trainer
 * wrote, and its test-role evaluation is the trainer's test OA. */
static void test_run_load_predict(void)
{
    const char *dir = hsi_test_tmp("api_run");
    hsi_run run;
    hsi_cube cube, map;
    hsi_labels gt;
    hsi_metrics mt;
    hsi_cube_init(&cube);
    hsi_cube_init(&map);
    hsi_labels_init(&gt);
    HSI_CHECK_OK(hsi_run_load(&run, dir));
    CU_ASSERT_STRING_EQUAL(run.model, "cnn2d");
    CU_ASSERT_EQUAL(run.n_classes, 8);
    CU_ASSERT_EQUAL(run.n_features, 30);
    CU_ASSERT_EQUAL(run.roles.ndim, 2);
    HSI_CHECK_OK(hsi_cube_open(&cube, CUBE, NULL));
    const int64_t L = cube.view.shape[1], S = cube.view.shape[2];
    int32_t *pred = malloc(sizeof *pred * (size_t)(L * S));
    hsi_predict_opts po = {.batch = 100, .tile_lines = 13}; /* tiles and batches unlike training's */
    HSI_CHECK_OK(hsi_run_predict(&run, pred, &cube.view, &po));
    char path[4096];
    snprintf(path, sizeof path, "%s/map.hdr", dir);
    HSI_CHECK_OK(hsi_cube_open(&map, path, NULL));
    const uint8_t *mp = map.view.buf->data;
    int64_t diff = 0;
    for (int64_t i = 0; i < L * S; i++) diff += pred[i] != mp[i];
    CU_ASSERT_EQUAL(diff, 0);
    /* evaluation on the test role = metrics.json */
    HSI_CHECK_OK(hsi_labels_open(&gt, GT, NULL));
    int64_t unknown = -1;
    HSI_CHECK_OK(hsi_run_evaluate(&run, &mt, pred, &gt.map, HSI_EVAL_TEST, &unknown));
    CU_ASSERT_EQUAL(unknown, 0);
    char *text = NULL;
    size_t n;
    snprintf(path, sizeof path, "%s/metrics.json", dir);
    HSI_CHECK_OK(hsi_read_file(path, &text, &n));
    cJSON *m = cJSON_Parse(text);
    free(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    HSI_ASSERT_NEAR(mt.oa, cJSON_GetObjectItem(m, "oa")->valuedouble, 1e-14); /* 15 digits in JSON */
    HSI_ASSERT_NEAR((double)mt.n, cJSON_GetObjectItem(cJSON_GetObjectItem(m, "split_counts"), "test")->valuedouble, 0);
    cJSON_Delete(m);
    hsi_metrics_free(&mt);
    /* all labelled pixels: more of them */
    HSI_CHECK_OK(hsi_run_evaluate(&run, &mt, pred, &gt.map, HSI_EVAL_ALL, NULL));
    CU_ASSERT_EQUAL(mt.n, 6421);
    hsi_metrics_free(&mt);
    /* a cube of another band count is refused with both counts named */
    hsi_view sub;
    HSI_CHECK_OK(hsi_view_bands(&sub, &cube.view, 0, 100));
    HSI_CHECK_FAILS(hsi_run_predict(&run, pred, &sub, NULL), HSI_ERR_ARG, "100 bands");
    hsi_view_release(&sub);
    free(pred);
    hsi_labels_free(&gt);
    hsi_cube_free(&map);
    hsi_cube_free(&cube);
    hsi_run_free(&run);
}

/* Step by step, then epoch by epoch; the callback stops training after the
 * second epoch of five and the trainer still finishes every file. */
static void test_trainer_stepwise_stop(void)
{
    const char *dir = hsi_test_tmp("api_stop");
    hsi_train_config c;
    config(&c, dir, 5);
    events ev = {.stop_after = 2};
    c.progress = on_event;
    c.progress_ctx = &ev;
    hsi_trainer *t = NULL;
    HSI_CHECK_OK(hsi_trainer_create(&t, &c));
    CU_ASSERT_EQUAL(hsi_trainer_split(t)->n_classes, 8);
    CU_ASSERT_EQUAL(hsi_trainer_run(t)->n_features, 30);
    /* the first epoch batch by batch: n_train / batch steps (drop_last), then its end */
    int64_t n_train = hsi_trainer_split(t)->n[HSI_ROLE_TRAIN];
    int epoch_done = 0, done = 0, steps = 0, epochs = 1;
    while (!epoch_done) {
        HSI_CHECK_OK(hsi_trainer_step(t, &epoch_done, &done));
        steps++;
    }
    CU_ASSERT_EQUAL(steps - 1, n_train / c.batch);
    CU_ASSERT_EQUAL(ev.epochs, 1);
    CU_ASSERT_EQUAL(done, 0);
    /* then by epochs: the callback stops after the second */
    while (!done) {
        HSI_CHECK_OK(hsi_trainer_epoch(t, &done));
        epochs++;
    }
    CU_ASSERT_EQUAL(epochs, 2);
    hsi_train_result res;
    HSI_CHECK_OK(hsi_trainer_finish(t, &res));
    CU_ASSERT_EQUAL(res.epochs_run, 2);
    HSI_CHECK_FAILS(hsi_trainer_finish(t, &res), HSI_ERR_STATE, "already");
    hsi_trainer_free(t);
    char path[4096];
    snprintf(path, sizeof path, "%s/pipeline.json", dir);
    CU_ASSERT_EQUAL(access(path, R_OK), 0);
    /* a bad configuration is refused before anything is written */
    config(&c, hsi_test_tmp("api_bad"), 1);
    c.patch = 4;
    HSI_CHECK_FAILS(hsi_trainer_create(&t, &c), HSI_ERR_ARG, "--patch");
    CU_ASSERT_PTR_NULL(t);
    CU_ASSERT_NOT_EQUAL(access(hsi_test_tmp("api_bad"), F_OK), 0);
}

/* The preprocessing file round-trips exactly; an older hsi's pca.bin loads
 * as the same pipeline. */
static void test_prep_roundtrip(void)
{
    hsi_cube cube;
    hsi_cube_init(&cube);
    HSI_CHECK_OK(hsi_cube_open(&cube, CUBE, NULL));
    hsi_prep_spec ps;
    hsi_prep_spec_init(&ps);
    ps.bands = "3-100";
    ps.pca = 6;
    ps.whiten = 1;
    hsi_prep p, q, old;
    HSI_CHECK_OK(hsi_prep_fit(&p, &cube, NULL, &ps));
    CU_ASSERT_EQUAL(hsi_prep_n_out(&p), 6);
    const char *path = hsi_test_tmp("prep.safetensors"), *legacy = hsi_test_tmp("prep_legacy.bin");
    HSI_CHECK_OK(hsi_prep_save(&p, path));
    HSI_CHECK_OK(hsi_prep_load(&q, path));
    HSI_CHECK_OK(hsi_pca_save(&p.pca, legacy));
    HSI_CHECK_OK(hsi_prep_load(&old, legacy));
    const hsi_prep *both[2] = {&q, &old};
    hsi_view a, b;
    HSI_CHECK_OK(hsi_prep_transform(&a, &p, &cube.view, NULL));
    for (int k = 0; k < 2; k++) {
        const hsi_prep *r = both[k];
        CU_ASSERT_EQUAL(r->n_cube_bands, 128);
        CU_ASSERT_EQUAL(r->has_pca, 1);
        CU_ASSERT_EQUAL(r->pca.whiten, 1);
        CU_ASSERT_EQUAL(r->norm.n_bands, 98);
        CU_ASSERT_EQUAL(memcmp(r->norm.bands, p.norm.bands, 98 * sizeof(int64_t)), 0);
        CU_ASSERT_EQUAL(memcmp(r->norm.scale, p.norm.scale, 98 * sizeof(double)), 0);
        CU_ASSERT_EQUAL(memcmp(r->pca.components, p.pca.components, 6 * 98 * sizeof(double)), 0);
        HSI_CHECK_OK(hsi_prep_transform(&b, r, &cube.view, NULL));
        CU_ASSERT_EQUAL(memcmp(a.buf->data, b.buf->data, (size_t)hsi_view_nbytes(&a)), 0);
        hsi_view_release(&b);
    }
    hsi_view_release(&a);
    hsi_prep_free(&q);
    /* not a preprocessing file: the message says what was expected */
    HSI_CHECK_FAILS(hsi_prep_load(&q, "data_samples/scene.hdr"), HSI_ERR_FORMAT, "safetensors");
    hsi_prep_free(&p);
    hsi_prep_free(&old);
    hsi_cube_free(&cube);
}

static cJSON *doubles(const double *v, int64_t n) { return cJSON_CreateDoubleArray(v, (int)n); }

/* A run directory of an older hsi (pipeline.json version 1: the
 * normalisation in the JSON, the PCA in pca.bin, no split map) still loads
 * and predicts the same map; evaluating its test pixels is refused with the
 * way out named. */
static void test_v1_run_loads(void)
{
    const char *v2 = hsi_test_tmp("api_run"), *v1 = hsi_test_tmp("api_run_v1");
    hsi_run run, old;
    char path[4096];
    HSI_CHECK_OK(hsi_run_load(&run, v2));
    CU_ASSERT_EQUAL_FATAL(run.prep.has_pca, 1);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp %s/model.safetensors %s/", v1, v2, v1);
    CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
    snprintf(path, sizeof path, "%s/pca.bin", v1);
    HSI_CHECK_OK(hsi_pca_save(&run.prep.pca, path));
    const hsi_norm *n = &run.prep.pca.norm;
    cJSON *j = cJSON_CreateObject(), *nj = cJSON_CreateObject(), *cl = cJSON_CreateArray();
    cJSON_AddNumberToObject(j, "version", 1);
    cJSON_AddStringToObject(j, "model", run.model);
    cJSON_AddNumberToObject(j, "patch", run.patch);
    cJSON_AddStringToObject(j, "pad", "mirror");
    cJSON_AddStringToObject(nj, "mode", hsi_norm_mode_name(n->mode));
    cJSON_AddNumberToObject(nj, "n_cube_bands", (double)n->n_cube_bands);
    double *b = malloc(sizeof *b * (size_t)n->n_bands);
    for (int64_t i = 0; i < n->n_bands; i++) b[i] = (double)n->bands[i];
    cJSON_AddItemToObject(nj, "bands", doubles(b, n->n_bands));
    free(b);
    cJSON_AddItemToObject(nj, "scale", doubles(n->scale, n->n_bands));
    cJSON_AddItemToObject(nj, "center", doubles(n->center, n->n_bands));
    cJSON_AddItemToObject(nj, "offset", doubles(n->offset, n->n_bands));
    cJSON_AddItemToObject(nj, "fill", doubles(n->fill, n->n_bands));
    cJSON_AddItemToObject(j, "normalization", nj);
    cJSON_AddStringToObject(j, "pca_file", "pca.bin");
    for (int k = 0; k < run.n_classes; k++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "label", (double)run.label_ids[k]);
        cJSON_AddStringToObject(e, "name", run.names[k]);
        cJSON_AddItemToArray(cl, e);
    }
    cJSON_AddItemToObject(j, "classes", cl);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    snprintf(path, sizeof path, "%s/pipeline.json", v1);
    HSI_CHECK_OK(hsi_write_file_atomic(path, text, strlen(text)));
    free(text);
    HSI_CHECK_OK(hsi_run_load(&old, v1));
    CU_ASSERT_EQUAL(old.roles.ndim, 0);
    CU_ASSERT_EQUAL(old.n_features, run.n_features);
    hsi_cube cube;
    hsi_cube_init(&cube);
    HSI_CHECK_OK(hsi_cube_open(&cube, CUBE, NULL));
    const int64_t LS = cube.view.shape[1] * cube.view.shape[2];
    int32_t *a = malloc(sizeof *a * (size_t)LS), *c = malloc(sizeof *c * (size_t)LS);
    HSI_CHECK_OK(hsi_run_predict(&run, a, &cube.view, NULL));
    HSI_CHECK_OK(hsi_run_predict(&old, c, &cube.view, NULL));
    CU_ASSERT_EQUAL(memcmp(a, c, sizeof *a * (size_t)LS), 0);
    int rc = hsi_test_run(out, sizeof out, HSI_BIN " eval %s " CUBE " " GT, v1);
    CU_ASSERT_EQUAL(rc, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--on all"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " eval %s " CUBE " " GT " --on all", v1), 0);
    free(a);
    free(c);
    hsi_cube_free(&cube);
    hsi_run_free(&old);
    hsi_run_free(&run);
}

/* numpy alone reproduces the preprocessing and the predictions of a run
 * from the documented files (tests/python/reproduce_run.py). */
static void test_numpy_reproduces_predict(void)
{
    char dir[4096], feat[4096], map[4096];
    snprintf(dir, sizeof dir, "%s", hsi_test_tmp("np_run"));
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " train " CUBE " " GT " --out %s --epochs 1 "
                                       "--train 0.03 --quiet", dir), 0);
    snprintf(feat, sizeof feat, "%s", hsi_test_tmp("np_feat.hdr"));
    snprintf(map, sizeof map, "%s", hsi_test_tmp("np_map.hdr"));
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " pca apply %s/preprocessing.safetensors " CUBE " %s",
                                       dir, feat), 0);
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " predict %s " CUBE " %s --quiet", dir, map), 0);
    int rc = hsi_test_run(out, sizeof out, "/usr/bin/python3 tests/python/reproduce_run.py %s " CUBE " %s %s 300 7",
                          dir, feat, map);
    if (rc) fprintf(stderr, "\n%s\n", out);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    cJSON *j = cJSON_Parse(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    double err = cJSON_GetObjectItem(j, "feature_max_rel_err")->valuedouble;
    double agree = cJSON_GetObjectItem(j, "agreement")->valuedouble;
    if (err > 1e-5 || agree < 0.99) fprintf(stderr, "\n  numpy: %s\n", out);
    CU_ASSERT(err < 1e-5);   /* float32 rounding of the same formula */
    CU_ASSERT(agree >= 0.99); /* argmax of float32 vs float64 logits */
    cJSON_Delete(j);
}

HSI_SUITE(pipeline_api, 0,
          {"trainer in process = hsi train, byte for byte", test_api_matches_cli},
          {"run directory loads and predicts the same map", test_run_load_predict},
          {"trainer step by step and epoch by epoch, stopped by its callback", test_trainer_stepwise_stop},
          {"preprocessing file round-trip, legacy pca.bin", test_prep_roundtrip},
          {"an older hsi's run directory (version 1) still predicts", test_v1_run_loads})

HSI_SUITE(pipeline_api_numpy, HSI_SUITE_NEEDS_NUMPY,
          {"numpy alone reproduces hsi predict", test_numpy_reproduces_predict})

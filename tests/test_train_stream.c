/* test_train_stream.c — `hsi train --mem-limit`: features over the budget
 * are streamed through a mapped temporary file and give the same bits as
 * the cube in memory (features, model, map, split, metrics), the temporary
 * is gone while the job runs, after it succeeds and after it fails, and a
 * bad size is refused naming the option. The bundled 96 x 96 scene: its
 * 30 x 96 x 96 float32 features (1.1 MiB) are over a 64K budget. */
#include <cJSON.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline/trainer.h"
#include "test.h"

#define SCENE "data_samples/scene.hdr data_samples/scene_gt.hdr"
#define OPTS "--epochs 2 --train 0.05 --val 0.2 --seed 7 --workers 2 --quiet"

static char out[1 << 16];

/* Files under dir (and one level of folders below) whose name holds
 * "features-stream" or ".hsi-tmp-": a streamed cube left behind. */
static int leftovers(const char *dir, int depth)
{
    int n = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) != 0) continue;
        if (S_ISDIR(sb.st_mode)) {
            if (depth > 0) n += leftovers(p, depth - 1);
            continue;
        }
        if (strstr(e->d_name, "features-stream")) {
            fprintf(stderr, "\n  left behind: %s\n", p);
            n++;
        }
    }
    closedir(d);
    return n;
}

/* metrics.json without what a clock measures */
static char *metrics_text(const char *dir)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/metrics.json", dir);
    cJSON *m = hsi_test_load_json(p);
    if (!m) return NULL;
    cJSON_DeleteItemFromObject(m, "timings_s");
    cJSON_DeleteItemFromObject(m, "train_samples_per_s");
    char *s = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    return s;
}

/* Element (c, y, x) of two (C, L, S) float32 views, compared as bits. */
static int64_t differing_floats(const hsi_view *a, const hsi_view *b)
{
    int64_t bad = 0;
    for (int64_t c = 0; c < a->shape[0]; c++)
        for (int64_t y = 0; y < a->shape[1]; y++)
            for (int64_t x = 0; x < a->shape[2]; x++) {
                int64_t i[3] = {c, y, x};
                bad += memcmp(hsi_view_ptr(a, i), hsi_view_ptr(b, i), 4) != 0;
            }
    return bad;
}

/* In process: the streamed features are a BIP mapping of a file whose name
 * is already gone, bit-identical to the in-memory cube; a trainer freed
 * mid-job (as on any failure after the fused pass) leaves nothing. */
static void test_streamed_features_bit_identical(void)
{
    hsi_train_config ca, cb;
    hsi_train_config_init(&ca);
    ca.cube_path = "data_samples/scene.hdr";
    ca.labels_path = "data_samples/scene_gt.hdr";
    ca.out_dir = hsi_test_tmp("sf_mem");
    ca.epochs = 1;
    ca.train_fraction = 0.05;
    cb = ca;
    cb.out_dir = hsi_test_tmp("sf_stream");
    cb.mem_limit = 64 << 10;
    int was_quiet = hsi_is_quiet();
    hsi_set_quiet(1);
    hsi_trainer *ta = NULL, *tb = NULL;
    HSI_CHECK_OK(hsi_trainer_create(&ta, &ca));
    hsi_status st = hsi_trainer_create(&tb, &cb);
    hsi_set_quiet(was_quiet);
    if (st != HSI_OK) hsi_trainer_free(ta);
    HSI_CHECK_OK(st);
    const hsi_view *fa = hsi_trainer_features(ta), *fb = hsi_trainer_features(tb);
    CU_ASSERT_EQUAL(fa->buf->kind, HSI_BUF_HOST);
    CU_ASSERT_EQUAL(fb->buf->kind, HSI_BUF_MMAP);
    CU_ASSERT_EQUAL(fb->strides[0], 4); /* BIP: a pixel's features side by side */
    CU_ASSERT_EQUAL(fb->strides[2], 4 * 30);
    CU_ASSERT_EQUAL_FATAL(fa->shape[0], fb->shape[0]);
    CU_ASSERT_EQUAL(fa->shape[0], 30);
    CU_ASSERT_EQUAL(differing_floats(fa, fb), 0);
    /* the file is mapped, its name already removed */
    CU_ASSERT_PTR_NOT_NULL_FATAL(fb->buf->path);
    CU_ASSERT_PTR_NOT_NULL(strstr(fb->buf->path, "features-stream"));
    CU_ASSERT_NOT_EQUAL(access(fb->buf->path, F_OK), 0);
    CU_ASSERT_EQUAL(leftovers(hsi_test_tmpdir(), 1), 0);
    /* a few steps read from the mapping (the loader's workers, the trim thread) */
    for (int i = 0; i < 5; i++) {
        int ed = 0, done = 0;
        HSI_CHECK_OK(hsi_trainer_step(tb, &ed, &done));
    }
    hsi_trainer_free(tb); /* ends without finishing, as a failed job does */
    hsi_trainer_free(ta);
    CU_ASSERT_EQUAL(leftovers(hsi_test_tmpdir(), 1), 0);
}

/* `hsi train` with and without --mem-limit: the same model, map, split and
 * metrics, byte for byte; the stderr line says why; no temporary stays. */
static void test_train_outputs_identical(void)
{
    const char *a = hsi_test_tmp("st_mem"), *b = hsi_test_tmp("st_stream");
    int rc = hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " --out %s " OPTS, a);
    if (rc) fprintf(stderr, "%s\n", out);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_PTR_NULL(strstr(out, "streamed from disk"));
    rc = hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " --out %s " OPTS " --mem-limit 64K", b);
    if (rc) fprintf(stderr, "%s\n", out);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "hsi train: features: 30 x 96 x 96 float32 = 1.1 MiB, over "
                                       "--mem-limit 0.1 MiB: streamed from disk"));
    static const char *const files[] = {"model.safetensors", "map", "map.hdr", "split", "split.json",
                                        "preprocessing.safetensors", "pipeline.json",
                                        "train_state.safetensors"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) CU_ASSERT(hsi_test_same_in(a, b, files[i]));
    char *ma = metrics_text(a), *mb = metrics_text(b);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ma);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mb);
    CU_ASSERT_STRING_EQUAL(ma, mb);
    free(ma);
    free(mb);
    /* the budget above the features: nothing changes, nothing is said */
    const char *c = hsi_test_tmp("st_fits");
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " --out %s " OPTS
                                       " --mem-limit 2M", c), 0);
    CU_ASSERT_PTR_NULL(strstr(out, "streamed"));
    CU_ASSERT(hsi_test_same_in(a, c, "model.safetensors"));
    char log[4200];
    snprintf(log, sizeof log, "%s/train.log", b);
    char *text = NULL;
    size_t n = 0;
    HSI_CHECK_OK(hsi_read_file(log, &text, &n));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "streamed from disk"));
    free(text);
    CU_ASSERT_EQUAL(leftovers(hsi_test_tmpdir(), 1), 0);
}

/* A run that fails while streaming (the temporary's commit fails) and one
 * that resumes in place with --mem-limit leave no temporary in the run. */
static void test_no_temporary_after_failure(void)
{
    const char *d = hsi_test_tmp("st_fail");
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " --out %s --epochs 1 "
                                       "--train 0.05 --seed 2 --quiet", d), 0);
    /* --resume of the finished run works in the directory itself */
    int rc = hsi_test_run(out, sizeof out, "HSI_FAULT=pair-data:eio " HSI_BIN " train " SCENE " --out %s "
                          "--epochs 2 --train 0.05 --seed 2 --quiet --resume --mem-limit 64K", d);
    CU_ASSERT_EQUAL(rc, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--mem-limit: streaming the features"));
    CU_ASSERT_EQUAL(leftovers(d, 0), 0);
    CU_ASSERT_EQUAL(leftovers(hsi_test_tmpdir(), 1), 0);
    rc = hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " --out %s --epochs 2 --train 0.05 "
                      "--seed 2 --quiet --resume --mem-limit 64K", d);
    if (rc) fprintf(stderr, "%s\n", out);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "streamed from disk"));
    CU_ASSERT_EQUAL(leftovers(d, 0), 0);
}

static void test_bad_sizes(void)
{
    const char *d = hsi_test_tmp("st_bad");
    static const char *const bad[] = {"2X", "0", "-1G", "G", "1.5Q", "''"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " --out %s --mem-limit %s",
                                     d, bad[i]), 2);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "--mem-limit expects a size"));
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "K, M, G or T"));
    }
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " --out %s --mem-limit", d), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--mem-limit needs a value"));
    CU_ASSERT_NOT_EQUAL(access(d, F_OK), 0); /* refused before any work */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " help train"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--mem-limit SIZE"));
}

HSI_SUITE(train_stream, 0,
          {"streamed features are the in-memory floats, the file already unlinked",
           test_streamed_features_bit_identical},
          {"--mem-limit gives the same outputs byte for byte", test_train_outputs_identical},
          {"no temporary after a failure or a resume", test_no_temporary_after_failure},
          {"bad sizes are refused naming the option", test_bad_sizes})

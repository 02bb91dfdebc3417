/* test_batch.c — many cubes in one command (cli/batch.c): several inputs, a
 * folder, @list; outputs named after the inputs in --out-dir and equal to
 * the single-cube command's; a failing cube in the middle; skipping what
 * exists on a rerun; a cube killed mid-write redone by the rerun; one JSON
 * array from info --json; usage errors. The real-file suite runs over the
 * SPE files of ../shared/data. */
#include <cJSON.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/cube.h"
#include "test.h"

static char out[1 << 20];

/* a folder: scene.hdr, scene_gt.hdr and a broken cube between them */
static const char *make_folder(const char *name)
{
    const char *d = hsi_test_tmp(name);
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out,
                                       "mkdir -p %s && cp data_samples/scene.hdr data_samples/scene.img "
                                       "data_samples/scene_gt.hdr data_samples/scene_gt %s/ && "
                                       "cp data_samples/scene.hdr %s/middle.hdr && printf x > %s/middle",
                                       d, d, d, d), 0);
    return d;
}

static int exists(const char *dir, const char *name)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static void test_folder_with_a_failure(void)
{
    const char *d = make_folder("bf"), *o = hsi_test_tmp("bf_out"), *ref = hsi_test_tmp("bf_ref.hdr");
    int rc = hsi_test_run(out, sizeof out, HSI_BIN " convert %s --out-dir %s --continue-on-error --dtype float32", d, o);
    CU_ASSERT_EQUAL(rc, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "3 cubes: 2 done, 1 failed, 0 skipped"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "middle.hdr: failed"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "bytes short"));
    CU_ASSERT(exists(o, "scene.hdr") && exists(o, "scene") && exists(o, "scene_gt.hdr"));
    CU_ASSERT(!exists(o, "middle.hdr"));
    /* the batch's output = the single command's */
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " convert data_samples/scene.hdr %s --dtype float32", ref), 0);
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s/scene", o);
    snprintf(b, sizeof b, "%s", ref);
    b[strlen(b) - 4] = 0;
    CU_ASSERT(hsi_test_same_file(a, b));
    /* a rerun skips what is done (and fails the broken one again) */
    rc = hsi_test_run(out, sizeof out, HSI_BIN " convert %s --out-dir %s --continue-on-error --dtype float32", d, o);
    CU_ASSERT_EQUAL(rc, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "0 done, 1 failed, 2 skipped"));
    /* without --continue-on-error the first failure (middle.hdr, first in
     * name order) stops the rest */
    rc = hsi_test_run(out, sizeof out, HSI_BIN " convert %s --out-dir %s --jobs 1 --overwrite", d, o);
    CU_ASSERT_EQUAL(rc, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "0 done, 1 failed, 0 skipped, 2 not started"));
}

/* A cube killed while it is written leaves no output; the rerun does it. */
static void test_killed_cube_redone(void)
{
    const char *o = hsi_test_tmp("bk_out"), *list = hsi_test_tmp("bk.txt");
    FILE *fp = fopen(list, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    fputs("# cubes\ndata_samples/scene.hdr\n\n  data_samples/scene_gt.hdr\n", fp);
    fclose(fp);
    int rc = hsi_test_run(out, sizeof out, "HSI_FAULT=pair-data " HSI_BIN " convert @%s --out-dir %s --jobs 1", list, o);
    CU_ASSERT_EQUAL(rc, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "killed by signal 9"));
    CU_ASSERT(!exists(o, "scene.hdr"));
    rc = hsi_test_run(out, sizeof out, HSI_BIN " convert @%s --out-dir %s", list, o);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "2 cubes: 2 done, 0 failed, 0 skipped"));
    hsi_cube c;
    char p[4096];
    snprintf(p, sizeof p, "%s/scene.hdr", o);
    HSI_CHECK_OK(hsi_cube_open(&c, p, NULL));
    hsi_cube_free(&c);
    DIR *dd = opendir(o);
    struct dirent *e;
    int tmp = 0;
    while (dd && (e = readdir(dd))) tmp += strstr(e->d_name, ".hsi-") != NULL;
    if (dd) closedir(dd);
    CU_ASSERT_EQUAL(tmp, 0);
    /* quicklooks of the same list */
    rc = hsi_test_run(out, sizeof out, HSI_BIN " quicklook @%s --out-dir %s/q", list, o);
    CU_ASSERT_EQUAL(rc, 0);
    snprintf(p, sizeof p, "%s/q", o);
    CU_ASSERT(exists(p, "scene.png") && exists(p, "scene_gt.png"));
}

/* info --json over several cubes: one JSON array, in input order, each
 * element what the single command prints. */
static void test_info_json_array(void)
{
    const char *d = make_folder("bj");
    int rc = hsi_test_run(out, sizeof out, "{ " HSI_BIN " info data_samples/scene_gt.hdr %s --json --continue-on-error 2>/dev/null; }", d);
    CU_ASSERT_EQUAL(rc, 1); /* middle.hdr fails */
    cJSON *j = cJSON_Parse(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT(cJSON_IsArray(j));
    CU_ASSERT_EQUAL(cJSON_GetArraySize(j), 3); /* scene_gt, then the folder's scene, scene_gt */
    char single[1 << 14];
    CU_ASSERT_EQUAL(hsi_test_run(single, sizeof single, "{ " HSI_BIN " info data_samples/scene_gt.hdr --json 2>/dev/null; }"), 0);
    cJSON *s = cJSON_Parse(single);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    char *x = cJSON_PrintUnformatted(cJSON_GetArrayItem(j, 0)), *y = cJSON_PrintUnformatted(s);
    CU_ASSERT_STRING_EQUAL(x, y);
    free(x);
    free(y);
    cJSON_Delete(s);
    cJSON_Delete(j);
}

static void test_usage(void)
{
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " convert data_samples/scene.hdr data_samples/scene_gt.hdr x.hdr"), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--out-dir"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " preprocess data_samples --out-dir %s --save-model m", hsi_test_tmp("bu")), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--save-model"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " stats data_samples/scene.hdr --out-dir x"), 2);
    /* two inputs with one name */
    const char *d = hsi_test_tmp("bu2");
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, "mkdir -p %s && cp data_samples/scene.* %s/", d, d), 0);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " convert data_samples/scene.hdr %s/scene.hdr --out-dir %s/o", d, d), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "would both write"));
}

/* The real SPE files: every one listed, converted, and the conversion
 * reads back with the source's shape. */
static void test_shared_spe_folder(void)
{
    const char *src = "../shared/data/spe/v3", *o = hsi_test_tmp("bs_out");
    DIR *d = opendir(src);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) n += strstr(e->d_name, ".spe") != NULL;
    closedir(d);
    int rc = hsi_test_run(out, sizeof out, "{ " HSI_BIN " info %s --json 2>/dev/null; }", src);
    CU_ASSERT_EQUAL(rc, 0);
    cJSON *j = cJSON_Parse(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(j), n);
    cJSON_Delete(j);
    rc = hsi_test_run(out, sizeof out, HSI_BIN " convert %s --out-dir %s --jobs 2", src, o);
    if (rc) fprintf(stderr, "%s\n", out);
    CU_ASSERT_EQUAL(rc, 0);
    d = opendir(src);
    while (d && (e = readdir(d))) {
        if (!strstr(e->d_name, ".spe")) continue;
        char a[4096], b[4096];
        snprintf(a, sizeof a, "%s/%s", src, e->d_name);
        snprintf(b, sizeof b, "%s/%.*s.hdr", o, (int)(strlen(e->d_name) - 4), e->d_name);
        hsi_cube x, y;
        HSI_CHECK_OK(hsi_cube_open(&x, a, NULL));
        HSI_CHECK_OK(hsi_cube_open(&y, b, NULL));
        for (int k = 0; k < 3; k++) CU_ASSERT_EQUAL(x.view.shape[k], y.view.shape[k]);
        hsi_cube_free(&x);
        hsi_cube_free(&y);
    }
    if (d) closedir(d);
}

HSI_SUITE(batch_cli, 0, {"a folder with a broken cube in the middle; rerun skips; stop on failure", test_folder_with_a_failure},
          {"a killed cube leaves nothing and is redone; @list; quicklooks", test_killed_cube_redone},
          {"info --json over several cubes is one JSON array", test_info_json_array},
          {"usage errors", test_usage});
HSI_SUITE(batch_cli_shared, HSI_SUITE_NEEDS_SHARED, {"the real SPE files as one batch", test_shared_spe_folder});

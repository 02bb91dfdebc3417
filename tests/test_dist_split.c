/* test_dist_split.c — one cube's `hsi stats`, `preprocess`, `convert`,
 * `predict` and `eval` under mpirun -np 1..4 (each rank reads, copies or
 * classifies its share of the lines, partials combined across ranks): stdout and the output files byte-identical to
 * the same command in one process, on the sample scene and on a 3-line
 * cube (more ranks than chunks of lines), and over several cubes (dealt to
 * the ranks, each in one process). Active in MPI builds with
 * mpirun on PATH (`make test-mpi`). */
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPLIT_MPIRUN                                                                               \
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none " \
    "timeout 120 mpirun --oversubscribe -np %d "

static char out[1 << 18];

static int same(const char *a, const char *b)
{
    int s = hsi_test_same_file(a, b);
    if (!s) fprintf(stderr, "\n  %s differs from %s", b, a);
    return s;
}

/* A 4-band, 3-line, 5-sample uint16 BIL cube. */
static const char *tiny_cube(void)
{
    const char *img = hsi_test_tmp("split_tiny.img");
    static char hdr[4096];
    snprintf(hdr, sizeof hdr, "%s", hsi_test_tmp("split_tiny.hdr"));
    FILE *f = fopen(img, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    for (int i = 0; i < 4 * 3 * 5; i++) {
        unsigned short v = (unsigned short)(1000 + (i * 7919) % 613 + 40 * (i % 4));
        fwrite(&v, 2, 1, f);
    }
    fclose(f);
    f = fopen(hdr, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fprintf(f, "ENVI\nsamples = 5\nlines = 3\nbands = 4\nheader offset = 0\nfile type = ENVI Standard\n"
               "data type = 12\ninterleave = bil\nbyte order = 0\n");
    fclose(f);
    return hdr;
}

static void check_stats(const char *cube, const char *extra, const char *tag)
{
    char ref[4096], got[4096];
    snprintf(ref, sizeof ref, "%s", hsi_test_tmp("split_stats_ref.json"));
    /* ( ) keeps stderr (a batch's summary) out of the file */
    int rc = hsi_test_run(out, sizeof out, "(" HSI_BIN " stats %s %s --json > %s)", cube, extra, ref);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    for (int np = 1; np <= 4; np++) {
        snprintf(got, sizeof got, "%s/split_stats_%s_%d.json", hsi_test_tmpdir(), tag, np);
        rc = hsi_test_run(out, sizeof out, "(" SPLIT_MPIRUN HSI_BIN " stats %s %s --json > %s)", np, cube, extra,
                          got);
        if (rc) fprintf(stderr, "\n%s", out);
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT(same(ref, got));
    }
}

static void test_stats_split(void)
{
    check_stats("data_samples/scene.hdr", "", "scene");
    check_stats(tiny_cube(), "", "tiny");
    /* percentiles need a histogram: not split, the same figures all the same */
    check_stats("data_samples/scene.hdr", "--percentiles 5,50,95", "pct");
    /* several cubes: dealt to the ranks, each cube's stats in one process
     * (a rank's forked child is not in the job) */
    char two[8192];
    snprintf(two, sizeof two, "data_samples/scene.hdr %s", tiny_cube());
    check_stats(two, "", "batch");
}

static void check_preprocess(const char *cube, const char *opts, const char *tag)
{
    char ref[4096], got[4096], a[4096], b[4096];
    snprintf(ref, sizeof ref, "%s/split_prep_%s_ref.hdr", hsi_test_tmpdir(), tag);
    int rc = hsi_test_run(out, sizeof out, HSI_BIN " preprocess %s %s %s", cube, ref, opts);
    if (rc) fprintf(stderr, "\n%s", out);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    for (int np = 1; np <= 4; np++) {
        snprintf(got, sizeof got, "%s/split_prep_%s_%d.hdr", hsi_test_tmpdir(), tag, np);
        rc = hsi_test_run(out, sizeof out, SPLIT_MPIRUN HSI_BIN " preprocess %s %s %s", np, cube, got, opts);
        if (rc) fprintf(stderr, "\n%s", out);
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT(same(ref, got));
        snprintf(a, sizeof a, "%.*s", (int)(strlen(ref) - 4), ref); /* the data files */
        snprintf(b, sizeof b, "%.*s", (int)(strlen(got) - 4), got);
        CU_ASSERT(same(a, b));
    }
}

static void test_preprocess_split(void)
{
    check_preprocess("data_samples/scene.hdr", "--normalize zscore --pca 10", "z");
    check_preprocess("data_samples/scene.hdr", "--normalize minmax --bands 5-60 --pca 6 --whiten", "mm");
    check_preprocess(tiny_cube(), "--normalize zscore --pca 2", "tiny");
    /* a fit that reads the statistics first (global min-max without PCA) */
    check_preprocess("data_samples/scene.hdr", "--normalize global-minmax --interleave bip", "g");
}

static void check_convert(const char *cube, const char *opts, const char *ext, const char *tag)
{
    char ref[4096], got[4096], a[4096], b[4096];
    snprintf(ref, sizeof ref, "%s/split_conv_%s_ref%s", hsi_test_tmpdir(), tag, ext);
    int rc = hsi_test_run(out, sizeof out, HSI_BIN " convert %s %s %s", cube, ref, opts);
    if (rc) fprintf(stderr, "\n%s", out);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    for (int np = 1; np <= 4; np++) {
        snprintf(got, sizeof got, "%s/split_conv_%s_%d%s", hsi_test_tmpdir(), tag, np, ext);
        rc = hsi_test_run(out, sizeof out, SPLIT_MPIRUN HSI_BIN " convert %s %s %s", np, cube, got, opts);
        if (rc) fprintf(stderr, "\n%s", out);
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT(same(ref, got));
        if (strcmp(ext, ".hdr")) continue;
        snprintf(a, sizeof a, "%.*s", (int)(strlen(ref) - 4), ref);
        snprintf(b, sizeof b, "%.*s", (int)(strlen(got) - 4), got);
        CU_ASSERT(same(a, b));
    }
}

static void test_convert_split(void)
{
    check_convert("data_samples/scene.hdr", "--interleave bip --dtype float32 --byte-order big --bands 3-40,90",
                  ".hdr", "bip");
    check_convert("data_samples/scene.hdr", "--interleave bsq", ".hdr", "bsq");
    check_convert(tiny_cube(), "--interleave bip", ".hdr", "tiny");
    check_convert("data_samples/scene.hdr", "--bands 1-8", ".tif", "tif"); /* rank 0 writes */
}

/* A model trained in one process, then `hsi predict` (map files) and `hsi
 * eval` (stdout) under mpirun: the scene's 96 lines are 2 tiles of 64, so
 * np 3 and 4 leave ranks without a tile. */
static void test_predict_split(void)
{
    char run[4096], ref[4096], got[4096], a[4096], b[4096];
    snprintf(run, sizeof run, "%s", hsi_test_tmp("split_run"));
    int rc = hsi_test_run(out, sizeof out,
                          HSI_BIN " train data_samples/scene.hdr data_samples/scene_gt.hdr --out %s --epochs 1 "
                                  "--train 0.05 --seed 3 --quiet --overwrite",
                          run);
    if (rc) fprintf(stderr, "\n%s", out);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    snprintf(ref, sizeof ref, "%s/split_pred_ref.hdr", hsi_test_tmpdir());
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " predict %s data_samples/scene.hdr %s --quiet",
                                       run, ref), 0);
    char eref[4096], egot[4096];
    snprintf(eref, sizeof eref, "%s", hsi_test_tmp("split_eval_ref.json"));
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out,
                                       "(" HSI_BIN " eval %s data_samples/scene.hdr data_samples/scene_gt.hdr "
                                       "--json > %s)", run, eref), 0);
    for (int np = 1; np <= 4; np++) {
        snprintf(got, sizeof got, "%s/split_pred_%d.hdr", hsi_test_tmpdir(), np);
        rc = hsi_test_run(out, sizeof out, SPLIT_MPIRUN HSI_BIN " predict %s data_samples/scene.hdr %s --quiet", np,
                          run, got);
        if (rc) fprintf(stderr, "\n%s", out);
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT(same(ref, got));
        snprintf(a, sizeof a, "%.*s", (int)(strlen(ref) - 4), ref);
        snprintf(b, sizeof b, "%.*s", (int)(strlen(got) - 4), got);
        CU_ASSERT(same(a, b));
        snprintf(egot, sizeof egot, "%s/split_eval_%d.json", hsi_test_tmpdir(), np);
        rc = hsi_test_run(out, sizeof out,
                          "(" SPLIT_MPIRUN HSI_BIN " eval %s data_samples/scene.hdr data_samples/scene_gt.hdr "
                          "--json > %s)", np, run, egot);
        if (rc) fprintf(stderr, "\n%s", out);
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT(same(eref, egot));
    }
}

HSI_SUITE(dist_split, HSI_SUITE_NEEDS_MPI, {"stats under mpirun -np 1..4 == one process", test_stats_split},
          {"preprocess under mpirun -np 1..4 == one process, bytes", test_preprocess_split},
          {"convert under mpirun -np 1..4 == one process, bytes", test_convert_split},
          {"predict and eval under mpirun -np 1..4 == one process", test_predict_split})

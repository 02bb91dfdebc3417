/* test_dist_split.c — one cube's `hsi stats` and `hsi preprocess` under
 * mpirun -np 1..4 (each rank reads its share of the lines, partials
 * combined across ranks): stdout and the output files byte-identical to
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

HSI_SUITE(dist_split, HSI_SUITE_NEEDS_MPI, {"stats under mpirun -np 1..4 == one process", test_stats_split},
          {"preprocess under mpirun -np 1..4 == one process, bytes", test_preprocess_split})

/* test_cuda_scene.c — CPU/GPU parity of the statistics and the fused pass
 * on the real Salinas-A scene (the .mat's column-major int16 view, opened by
 * hsi_cube_open). Kept apart from test_cuda.c so that the GPU check can link
 * the synthetic suites without the file readers (GDAL, matio). Needs a CUDA
 * device and ../shared/data. */
#include "test.h"

#include "io/cube.h"
#include "kernels/cuda.h"
#include "kernels/fused.h"
#include "kernels/normalize.h"
#include "kernels/pca.h"
#include "kernels/stats.h"

/* in test_cuda.c */
void hsi_test_cuda_check_stats(const hsi_stats *g, const hsi_stats *w, const char *what);
void hsi_test_cuda_fused_compare(const hsi_view *v, const hsi_norm *nm, const hsi_pca *p,
                                 int64_t tile, const char *what);

static int open_salinas_a(hsi_cube *c)
{
    const char *p = hsi_test_shared("salinas_a/SalinasA_corrected.mat");
    if (!p) {
        CU_FAIL("salinas_a/SalinasA_corrected.mat is missing from the shared data");
        return 0;
    }
    hsi_cube_init(c);
    HSI_CHECK_OK(hsi_cube_open(c, p, NULL));
    return 1;
}

static void test_stats_salinas_a(void)
{
    hsi_cube c;
    if (!open_salinas_a(&c)) return;
    hsi_stats want, got;
    HSI_CHECK_OK(hsi_stats_compute(&want, &c.view, NULL));
    HSI_CHECK_OK(hsi_stats_compute_cuda(&got, &c.view, NULL));
    CU_ASSERT_EQUAL(got.n_bands, 204);
    hsi_test_cuda_check_stats(&got, &want, "stats Salinas-A");
    hsi_stats_free(&got);
    hsi_stats_free(&want);
    hsi_cube_free(&c);
}

/* Salinas-A (the .mat's column-major view): z-score, then 30 whitened
 * components, as `hsi train` prepares it. */
static void test_fused_salinas_a(void)
{
    hsi_cube c;
    if (!open_salinas_a(&c)) return;
    int64_t B = c.view.shape[0];
    hsi_stats s;
    HSI_CHECK_OK(hsi_stats_compute(&s, &c.view, NULL));
    hsi_norm nm;
    HSI_CHECK_OK(hsi_norm_build(&nm, HSI_NORM_ZSCORE, B, NULL, B, &s, NULL, 0, 0));
    hsi_pca p;
    hsi_pca_opts po = {.n_components = 30, .whiten = 1};
    HSI_CHECK_OK(hsi_pca_fit(&p, &c.view, &nm, &po));
    hsi_test_cuda_fused_compare(&c.view, NULL, &p, 16, "fused, Salinas-A PCA");
    hsi_test_cuda_fused_compare(&c.view, &nm, NULL, 40, "fused, Salinas-A z-score");
    hsi_pca_free(&p);
    hsi_norm_free(&nm);
    hsi_stats_free(&s);
    hsi_cube_free(&c);
}

HSI_SUITE(cuda_salinas_a, HSI_SUITE_NEEDS_CUDA | HSI_SUITE_NEEDS_SHARED,
          {"statistics of the real scene", test_stats_salinas_a},
          {"fused z-score and whitened PCA of the real scene", test_fused_salinas_a})

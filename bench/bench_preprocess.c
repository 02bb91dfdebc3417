/* bench_preprocess.c — the C half of bench_preprocess.sh (issue 16):
 *   bench_preprocess gen DIR NAME B L S   writes a uint16 BIL cube NAME
 *                                         (+ NAME.hdr) of correlated spectra
 *   bench_preprocess bound B N K          the machine's limits for the job
 *                                         `preprocess --normalize zscore --pca K`
 *                                         on N pixels of B bands, as JSON
 * The bound is measured, not assumed: memcpy on 2 threads, OpenBLAS ssyrk
 * (the covariance, B x B from N pixels) and sgemm (the projection, K x B
 * times B x N) on the threads the job uses, on blocks already in float, the
 * rates scaled to N pixels; and, on CPUs with AVX512-VNNI, the covariance
 * by int16 pair products (hsi's tiles on pairs in cache: the 16-bit cube's
 * covariance needs no float). Not a test. */
#define _GNU_SOURCE
#include <cblas.h>

#include "core/threads.h"
#include "kernels/tiles512.h"

#include "bench_util.h"

static int gen(const char *dir, const char *name, int64_t B, int64_t L, int64_t S)
{
    hsi_view v;
    if (write_cube(dir, name, 1, HSI_U16, B, L, S, &v)) {
        fprintf(stderr, "bench_preprocess: cannot write %s/%s\n", dir, name);
        return 1;
    }
    hsi_view_release(&v);
    return 0;
}

typedef struct rate_ctx {
    const float *X, *W;
    int64_t B, K, chunk;
    int reps, op; /* 0: ssyrk, 1: projection sgemm */
} rate_ctx;

/* One thread's share: reps products over chunks of its own block. */
static hsi_status rate_worker(void *vc, int t, int nt)
{
    rate_ctx *c = vc;
    int64_t B = c->B, ch = c->chunk;
    float *out = hsi_aligned_alloc(sizeof(float) * (size_t)(B * (B > ch ? B : ch)));
    if (!out) return HSI_ERR_NOMEM;
    const float *X = c->X + (size_t)t * (size_t)(B * ch);
    for (int r = 0; r < c->reps; r++) {
        if (c->op == 0) /* X: (B, ch) row-major; out = X X^T (upper) */
            cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, (int)B, (int)ch, 1.0f, X, (int)ch, 0.0f, out,
                        (int)B);
        else /* out (K, ch) = W (K, B) X (B, ch) */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)c->K, (int)ch, (int)B, 1.0f, c->W, (int)B,
                        X, (int)ch, 0.0f, out, (int)ch);
    }
    hsi_aligned_free(out);
    (void)nt;
    return HSI_OK;
}

/* Seconds per pixel of op, the best of: OpenBLAS on all threads over one
 * big block, and one single-threaded OpenBLAS per thread over chunks of
 * 1024 or 4096 pixels (how the kernels call it). */
static double per_pixel(int op, const float *X, const float *W, int64_t B, int64_t K, int64_t P, int nt)
{
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        openblas_set_num_threads(nt);
        float *out = hsi_aligned_alloc(sizeof(float) * (size_t)(K * P > B * B ? K * P : B * B));
        double t0 = hsi_now();
        if (op == 0)
            cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, (int)B, (int)P, 1.0f, X, (int)P, 0.0f, out, (int)B);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)K, (int)P, (int)B, 1.0f, W, (int)B, X, (int)P,
                        0.0f, out, (int)P);
        double dt = (hsi_now() - t0) / (double)P;
        hsi_aligned_free(out);
        if (dt < best) best = dt;
        int64_t chunks[2] = {1024, 4096};
        for (int k = 0; k < 2; k++) {
            rate_ctx c = {X, W, B, K, chunks[k], (int)(P / nt / chunks[k]), op};
            openblas_set_num_threads(1);
            t0 = hsi_now();
            if (hsi_parallel(nt, rate_worker, &c) != HSI_OK) continue;
            dt = (hsi_now() - t0) / (double)(c.reps * nt * chunks[k]);
            if (dt < best) best = dt;
        }
    }
    openblas_set_num_threads(nt);
    return best;
}

typedef struct i16_ctx {
    int64_t B, ldp, nq;
    int reps;
} i16_ctx;

/* One thread's share of the integer covariance rate: reps products of the
 * upper triangle over nq pairs of pixels in cache, as kernels/pca.c's
 * cov_ints runs them (hsi_c512_rows_i16, columns by 32 up to the diagonal). */
static hsi_status i16_worker(void *vc, int t, int nt)
{
    i16_ctx *c = vc;
    int64_t B = c->B, ldp = c->ldp;
    int32_t *P = hsi_aligned_alloc(sizeof(int32_t) * (size_t)(c->nq * ldp));
    int32_t *acc = hsi_aligned_alloc(sizeof(int32_t) * (size_t)(B * ldp));
    if (!P || !acc) return HSI_ERR_NOMEM;
    for (int64_t i = 0; i < c->nq * ldp; i++) P[i] = (int32_t)((i * 7 + t) % 2001) - 1000;
    for (int r = 0; r < c->reps; r++)
        for (int64_t j0 = 0, tk; j0 < ldp; j0 += tk) {
            tk = ldp - j0 > 16 ? 32 : 16;
            hsi_c512_rows_i16(acc + j0, ldp, P, P + j0, ldp, c->nq, j0 + tk < B ? j0 + tk : B, tk);
        }
    hsi_aligned_free(P);
    hsi_aligned_free(acc);
    (void)nt;
    return HSI_OK;
}

/* Seconds per pixel of the covariance by int16 pair products (VNNI), the
 * best of 3; 0 when the CPU has no AVX512-VNNI. */
static double per_pixel_i16(int64_t B, int nt)
{
    if (!hsi_c512_vnni_ok()) return 0;
    i16_ctx c = {B, (B + 15) / 16 * 16, 512, 64};
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = hsi_now();
        if (hsi_parallel(nt, i16_worker, &c) != HSI_OK) return 0;
        double dt = (hsi_now() - t0) / (double)(2 * c.nq * c.reps * nt);
        if (dt < best) best = dt;
    }
    return best;
}

static int bound(int64_t B, int64_t N, int64_t K)
{
    int nt = hsi_threads();
    int64_t P = 262144;
    float *X = hsi_aligned_alloc(sizeof(float) * (size_t)(B * P));
    float *W = hsi_aligned_alloc(sizeof(float) * (size_t)(K * B));
    size_t mb = (size_t)256 << 20;
    uint8_t *m0 = hsi_aligned_alloc(mb), *m1 = hsi_aligned_alloc(mb);
    if (!X || !W || !m0 || !m1) return 1;
    for (int64_t i = 0; i < B * P; i++) X[i] = (float)(i % 977) * 0.01f;
    for (int64_t i = 0; i < K * B; i++) W[i] = (float)(i % 13) * 0.1f;
    memset(m0, 1, mb);
    memset(m1, 2, mb);
    double mc = time_memcpy(m1, m0, mb, nt, 5);
    double ps = per_pixel(0, X, W, B, K, P, nt), pg = per_pixel(1, X, W, B, K, P, nt);
    /* square sgemm: the machine's GEMM rate as usually quoted */
    int n = 2048;
    double tq = 1e30;
    openblas_set_num_threads(nt);
    for (int r = 0; r < 3; r++) {
        double t0 = hsi_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, X, n, X + (size_t)n * n, n, 0.0f,
                    (float *)m1, n);
        double dt = hsi_now() - t0;
        if (dt < tq) tq = dt;
    }
    double pi = per_pixel_i16(B, nt);
    printf("{\"threads\": %d, \"memcpy_GBps\": %.3f, \"ssyrk_s\": %.5f, \"ssyrk_GFps\": %.2f, "
           "\"vnni_cov_s\": %.5f, \"vnni_cov_GOPps\": %.2f, "
           "\"sgemm_proj_s\": %.5f, \"sgemm_proj_GFps\": %.2f, \"sgemm_square_GFps\": %.2f}\n",
           nt, (double)mb / mc / 1e9, ps * (double)N, (double)B * (double)B / ps / 1e9, pi * (double)N,
           pi > 0 ? (double)B * (double)B / pi / 1e9 : 0, pg * (double)N, 2.0 * (double)K * (double)B / pg / 1e9,
           2.0 * n * (double)n * n / tq / 1e9);
    hsi_aligned_free(X);
    hsi_aligned_free(W);
    hsi_aligned_free(m0);
    hsi_aligned_free(m1);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 7 && !strcmp(argv[1], "gen"))
        return gen(argv[2], argv[3], atoll(argv[4]), atoll(argv[5]), atoll(argv[6]));
    if (argc == 5 && !strcmp(argv[1], "bound")) return bound(atoll(argv[2]), atoll(argv[3]), atoll(argv[4]));
    fprintf(stderr, "usage: bench_preprocess gen DIR NAME B L S | bound B N K\n");
    return 2;
}

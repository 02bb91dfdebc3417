/* bench_kernels.c — issue 4 figures for the CPU kernels: statistics and
 * fused passes over a uint16 cube in each interleave (GB/s of raw input,
 * beside memcpy in the same run), and PCA fit + transform of a float32 and
 * a uint16 cube. Writes the cubes as raw ENVI files in DIR (so SPy and
 * GDAL time the same bytes: bench_kernels.py) and prints JSON. Not a test.
 * Build and run through bench/bench_kernels.sh. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "kernels/fused.h"
#include "kernels/kern_internal.h"
#include "kernels/normalize.h"
#include "kernels/pca.h"
#include "kernels/stats.h"

#include "bench_util.h"

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if ((x) != HSI_OK) {                                                                       \
            fprintf(stderr, "bench_kernels: %s: %s\n", #x, hsi_last_error());                       \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_kernels DIR [MiB (512)] [reps (3)]\n");
        return 2;
    }
    const char *dir = argv[1];
    double mib = argc > 2 ? atof(argv[2]) : 512;
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    int nt = hsi_threads();
    int64_t B = 256, S = 1024, L = (int64_t)(mib * 1048576.0 / (double)(B * S * 2));
    double gb = (double)(B * L * S * 2) / 1e9;
    printf("{\n \"threads\": %d, \"cube\": [%lld, %lld, %lld], \"cube_bytes\": %.0f,\n", nt, (long long)B,
           (long long)L, (long long)S, gb * 1e9);
    uint8_t *dst = hsi_aligned_alloc((size_t)(gb * 1e9));
    hsi_view cubes[3];
    for (int il = 0; il < 3; il++) {
        char name[64];
        snprintf(name, sizeof name, "stats_u16.%s", il_name[il]);
        if (write_cube(dir, name, il, HSI_U16, B, L, S, &cubes[il])) {
            fprintf(stderr, "bench_kernels: cannot write %s/%s\n", dir, name);
            return 1;
        }
    }
    const uint8_t *src = cubes[0].buf->data;
    memset(dst, 1, (size_t)(gb * 1e9));
    double m1 = time_memcpy(dst, src, (size_t)(gb * 1e9), 1, reps);
    double m2 = time_memcpy(dst, src, (size_t)(gb * 1e9), nt, reps);
    printf(" \"memcpy_1thread_s\": %.4f, \"memcpy_1thread_GBps\": %.2f,\n", m1, gb / m1);
    printf(" \"memcpy_%dthreads_s\": %.4f, \"memcpy_GBps\": %.2f,\n", nt, m2, gb / m2);
    for (int il = 0; il < 3; il++) {
        /* memcpy of this very mapping is timed right before every kernel
         * run: on a shared machine the ratio is only fair at equal load */
        const uint8_t *csrc = (const uint8_t *)cubes[il].buf->data;
        size_t nbytes = (size_t)(gb * 1e9);
        double best = 1e30, bcpu = 0, mc = 1e30;
        hsi_stats s;
        for (int r = 0; r < reps; r++) {
            double m = time_memcpy(dst, csrc, nbytes, nt, 1);
            if (m < mc) mc = m;
            double t0 = hsi_now(), c0 = cpu_now();
            CHECK(hsi_stats_compute(&s, &cubes[il], NULL));
            double dt = hsi_now() - t0;
            if (dt < best) {
                best = dt;
                bcpu = cpu_now() - c0;
            }
            if (r + 1 < reps) hsi_stats_free(&s);
        }
        printf(" \"stats_%s_s\": %.4f, \"stats_%s_cpu_s\": %.4f, \"stats_%s_GBps\": %.2f, \"stats_%s_mean0\": %.6f,\n",
               il_name[il], best, il_name[il], bcpu, il_name[il], gb / best, il_name[il], s.mean[0]);
        /* fused: zscore + PCA 30 (fit on the same cube, timed apart) */
        hsi_norm nm;
        hsi_pca p;
        CHECK(hsi_norm_build(&nm, HSI_NORM_ZSCORE, B, NULL, B, &s, NULL, 0, 0));
        hsi_pca_opts po = {.n_components = 30};
        double t0 = hsi_now();
        CHECK(hsi_pca_fit(&p, &cubes[il], &nm, &po));
        double tfit = hsi_now() - t0;
        float *out = hsi_aligned_alloc(sizeof(float) * (size_t)(30 * L * S));
        float *out2 = hsi_aligned_alloc(sizeof(float) * (size_t)(B * L * S));
        double bp = 1e30, bn = 1e30;
        for (int r = 0; r < reps; r++) {
            hsi_fused_opts fo = {.pixel_major = 0};
            double m = time_memcpy(dst, csrc, nbytes, nt, 1);
            if (m < mc) mc = m;
            t0 = hsi_now();
            CHECK(hsi_fused_run(out, &cubes[il], NULL, &p, &fo));
            double dt = hsi_now() - t0;
            if (dt < bp) bp = dt;
            t0 = hsi_now();
            CHECK(hsi_fused_run(out2, &cubes[il], &nm, NULL, &fo));
            dt = hsi_now() - t0;
            if (dt < bn) bn = dt;
        }
        printf(" \"memcpy_%s_GBps\": %.2f,\n", il_name[il], gb / mc);
        printf(" \"cov_fit_%s_s\": %.4f, \"cov_fit_%s_GBps\": %.2f,\n", il_name[il], tfit, il_name[il], gb / tfit);
        printf(" \"fused_zscore_pca30_%s_s\": %.4f, \"fused_zscore_pca30_%s_GBps\": %.2f,\n", il_name[il], bp,
               il_name[il], gb / bp);
        printf(" \"fused_zscore_only_%s_s\": %.4f, \"fused_zscore_only_%s_GBps\": %.2f,\n", il_name[il], bn,
               il_name[il], gb / bn);
        fflush(stdout);
        hsi_aligned_free(out);
        hsi_aligned_free(out2);
        hsi_pca_free(&p);
        hsi_norm_free(&nm);
        hsi_stats_free(&s);
        hsi_view_release(&cubes[il]);
    }
    hsi_aligned_free(dst);
    /* PCA 30 on 512 x 512 x 200, float32 and uint16, BIP (what SPy memmaps) */
    int64_t PB = 200, PL = 512, PS = 512;
    hsi_dtype pdt[2] = {HSI_F32, HSI_U16};
    const char *pname[2] = {"f32", "u16"};
    for (int k = 0; k < 2; k++) {
        hsi_view v;
        char name[64];
        snprintf(name, sizeof name, "pca_%s.bip", pname[k]);
        if (write_cube(dir, name, 2, pdt[k], PB, PL, PS, &v)) return 1;
        float *out = hsi_aligned_alloc(sizeof(float) * (size_t)(30 * PL * PS));
        double bf = 1e30, bt = 1e30;
        for (int r = 0; r < reps; r++) {
            hsi_pca p;
            hsi_pca_opts po = {.n_components = 30};
            double t0 = hsi_now();
            CHECK(hsi_pca_fit(&p, &v, NULL, &po));
            double t1 = hsi_now();
            hsi_fused_opts fo = {.pixel_major = 1};
            CHECK(hsi_fused_run(out, &v, NULL, &p, &fo));
            double t2 = hsi_now();
            if (t1 - t0 < bf) bf = t1 - t0;
            if (t2 - t1 < bt) bt = t2 - t1;
            hsi_pca_free(&p);
        }
        printf(" \"pca30_%s_fit_s\": %.4f, \"pca30_%s_transform_s\": %.4f, \"pca30_%s_total_s\": %.4f%s\n",
               pname[k], bf, pname[k], bt, pname[k], bf + bt, k == 0 ? "," : "");
        hsi_aligned_free(out);
        hsi_view_release(&v);
    }
    printf("}\n");
    return 0;
}

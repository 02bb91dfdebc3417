/* gpu_bench.c — the GPU figures of issue 7 in one run, as one JSON object on
 * stdout (progress on stderr): host-to-device GB/s from pinned vs pageable
 * memory; device memcpy GB/s (the card's practical bandwidth); GPU
 * statistics and fused (z-score + PCA 30) GB/s on a device cube and end to
 * end from a host cube, with the CPU fused pass on the same cube for the
 * ratio; cnn2d and HybridSN training / inference samples/s on the GPU through
 * hsi_dmodel (models/model_cuda.h: the nn.c models, dropout included), plus
 * the loss before and after the timed steps on the fixed batch (it must
 * fall) and the cudaMalloc calls in the timed steps (must be 0), and
 * the same models trained by the CPU engine (all cores) for the ratio; a
 * device-resident cnn2d epoch (patch extraction on the GPU + step).
 * Not a test and not the engine. Built and run by bench/gpu_check.sh:
 *     gpu_bench [--mib 400] [--batch 128] [--bands 30] [--patch 11] [--classes 16] [--steps 20]
 *               [--cpu-steps 5] (0: no CPU engine run) [--cpu-only 1] (no GPU part) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "core/core.h"
#include "kernels/cuda.h"
#include "kernels/fused.h"
#include "kernels/pca.h"
#include "kernels/stats.h"
#include "models/layers_cuda.h"
#include "models/model_cuda.h"
#include "models/nn.h"
#include "models/optim.h"
#include "models/tensor.h"
#include "pipeline/patches_cuda.h"
#include "pipeline/trainer.h"

#define CHECK(expr)                                                                               \
    do {                                                                                          \
        hsi_status s_ = (expr);                                                                   \
        if (s_ != HSI_OK) {                                                                       \
            fprintf(stderr, "gpu_bench: %s failed: %s\n", #expr, hsi_last_error());             \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)
#define CUCHECK(expr)                                                                             \
    do {                                                                                          \
        cudaError_t e_ = (expr);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "gpu_bench: %s failed: %s\n", #expr, cudaGetErrorString(e_));        \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

static uint64_t g_rng = 88172645463325252ull;
static float frand(void) /* [-1, 1) */
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) * 0x1.0p-52 - 1.0);
}

static void *dmalloc(size_t n)
{
    void *p = NULL;
    CHECK(hsi_cuda_malloc(&p, n));
    return p;
}

static double gbps(double bytes, double s) { return bytes / s / 1e9; }

/* ------------------------------------------------------------ transfers */

static void bench_copies(FILE *js)
{
    size_t n = (size_t)256 << 20;
    void *pin = NULL, *dev = NULL, *dev2 = NULL;
    char *page = malloc(n);
    memset(page, 1, n);
    CUCHECK(cudaHostAlloc(&pin, n, cudaHostAllocDefault));
    memset(pin, 1, n);
    CUCHECK(cudaMalloc(&dev, n));
    CUCHECK(cudaMalloc(&dev2, n));
    double r[3];
    for (int k = 0; k < 3; k++) {
        void *src = k == 0 ? pin : k == 1 ? (void *)page : dev2;
        enum cudaMemcpyKind kind = k < 2 ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice;
        CUCHECK(cudaMemcpy(dev, src, n, kind)); /* warm-up */
        CUCHECK(cudaDeviceSynchronize());
        double t0 = hsi_now();
        for (int i = 0; i < 5; i++) CUCHECK(cudaMemcpyAsync(dev, src, n, kind, 0));
        CUCHECK(cudaDeviceSynchronize());
        /* device-to-device reads and writes n bytes per copy */
        r[k] = gbps((k == 2 ? 2.0 : 1.0) * 5.0 * (double)n, hsi_now() - t0);
    }
    fprintf(stderr, "H2D pinned %.1f GB/s, pageable %.1f GB/s, device memcpy %.0f GB/s (read+write)\n",
            r[0], r[1], r[2]);
    fprintf(js, "  \"h2d_pinned_gbps\": %.2f,\n  \"h2d_pageable_gbps\": %.2f,\n"
                "  \"device_memcpy_gbps\": %.1f,\n",
            r[0], r[1], r[2]);
    cudaFreeHost(pin);
    cudaFree(dev);
    cudaFree(dev2);
    free(page);
}

/* ------------------------------------------------------- preprocessing */

static void bench_fused(FILE *js, int64_t mib)
{
    int64_t B = 200, S = 1024, L = mib * 1048576 / (B * S * 2);
    if (L < 8) L = 8;
    int64_t shape[3] = {L, S, B}; /* BIP uint16 */
    hsi_view raw, cube, dcube;
    CHECK(hsi_view_alloc(&raw, HSI_U16, 3, shape, HSI_BUF_HOST));
    uint16_t *p = raw.buf->data;
    for (int64_t i = 0; i < L * S * B; i++) p[i] = (uint16_t)(1000 + (i % B) * 7 + ((i / B) * 2654435761u >> 22) % 500);
    int perm[3] = {2, 0, 1};
    CHECK(hsi_view_permute(&cube, &raw, perm));
    double in_bytes = (double)(L * S * B * 2);
    fprintf(stderr, "fused: uint16 BIP cube %lld x %lld x %lld (%.0f MiB)\n", (long long)B,
            (long long)L, (long long)S, in_bytes / 1048576);
    hsi_stats st;
    CHECK(hsi_stats_compute(&st, &cube, NULL));
    hsi_norm nm;
    CHECK(hsi_norm_build(&nm, HSI_NORM_ZSCORE, B, NULL, B, &st, NULL, 0, 0));
    hsi_pca pca;
    hsi_pca_opts po = {.n_components = 30};
    hsi_view sub;
    CHECK(hsi_view_slice(&sub, &cube, 1, 0, L < 64 ? L : 64, 1)); /* fit on a slice: fast */
    CHECK(hsi_pca_fit(&pca, &sub, &nm, &po));
    CHECK(hsi_cuda_view_to_device(&dcube, &cube, HSI_DT_INVALID)); /* packed: becomes BSQ */
    /* keep the BIP layout on the device too: copy the raw bytes */
    hsi_buffer *db = NULL;
    CHECK(hsi_cuda_buffer(&db, (size_t)in_bytes));
    CHECK(hsi_cuda_upload(db->data, raw.buf->data, (size_t)in_bytes));
    hsi_view dbip;
    CHECK(hsi_view_make(&dbip, db, 0, HSI_U16, 3, cube.shape, cube.strides, 0));
    hsi_buffer_release(db);
    int64_t no = 30, N = no * L * S;
    float *dout = dmalloc(sizeof(float) * (size_t)N);
    float *hout = malloc(sizeof(float) * (size_t)N);
    double t, best;
    const char *names[2] = {"bsq", "bip"};
    const hsi_view *dv[2] = {&dcube, &dbip};
    fprintf(js, "  \"fused_cube\": [%lld, %lld, %lld],\n", (long long)B, (long long)L, (long long)S);
    for (int k = 0; k < 2; k++) {
        hsi_stats gs;
        CHECK(hsi_stats_compute_cuda(&gs, dv[k], NULL)); /* warm-up */
        hsi_stats_free(&gs);
        best = 1e30;
        for (int r = 0; r < 3; r++) {
            t = hsi_now();
            CHECK(hsi_stats_compute_cuda(&gs, dv[k], NULL));
            t = hsi_now() - t;
            best = t < best ? t : best;
            hsi_stats_free(&gs);
        }
        fprintf(js, "  \"gpu_stats_device_%s_gbps\": %.1f,\n", names[k], gbps(in_bytes, best));
        fprintf(stderr, "GPU stats, device %s cube: %.1f GB/s\n", names[k], gbps(in_bytes, best));
        hsi_fused_opts fo = {.tile_lines = 0};
        CHECK(hsi_fused_run_cuda(dout, 1, dv[k], NULL, &pca, &fo));
        CHECK(hsi_cuda_sync());
        best = 1e30;
        for (int r = 0; r < 3; r++) {
            t = hsi_now();
            CHECK(hsi_fused_run_cuda(dout, 1, dv[k], NULL, &pca, &fo));
            CHECK(hsi_cuda_sync());
            t = hsi_now() - t;
            best = t < best ? t : best;
        }
        double out_bytes = (double)N * 4;
        fprintf(js, "  \"gpu_fused_device_%s_in_gbps\": %.1f,\n", names[k], gbps(in_bytes, best));
        fprintf(js, "  \"gpu_fused_device_%s_inout_gbps\": %.1f,\n", names[k],
                gbps(in_bytes + out_bytes, best));
        fprintf(stderr, "GPU fused zscore+PCA30, device %s cube -> device: %.1f GB/s in, %.1f GB/s in+out\n",
                names[k], gbps(in_bytes, best), gbps(in_bytes + out_bytes, best));
    }
    /* end to end from the host cube (BIP, pageable) into host memory */
    hsi_fused_opts fo = {.tile_lines = 0};
    CHECK(hsi_fused_run_cuda(hout, 0, &cube, NULL, &pca, &fo));
    t = hsi_now();
    CHECK(hsi_fused_run_cuda(hout, 0, &cube, NULL, &pca, &fo));
    t = hsi_now() - t;
    fprintf(js, "  \"gpu_fused_host_to_host_gbps\": %.2f,\n", gbps(in_bytes, t));
    fprintf(stderr, "GPU fused, host cube -> host output (tiles via pinned staging): %.2f GB/s\n",
            gbps(in_bytes, t));
    /* CPU fused pass on the same cube, all threads */
    float *cout = malloc(sizeof(float) * (size_t)N);
    t = hsi_now();
    CHECK(hsi_fused_run(cout, &cube, NULL, &pca, NULL));
    t = hsi_now() - t;
    double maxd = 0, maxv = 0;
    for (int64_t i = 0; i < N; i++) {
        maxd = fmax(maxd, fabs((double)cout[i] - hout[i]));
        maxv = fmax(maxv, fabs((double)cout[i]));
    }
    fprintf(js, "  \"cpu_fused_gbps\": %.2f,\n  \"fused_gpu_cpu_max_abs_diff_rel\": %.3g,\n",
            gbps(in_bytes, t), maxd / (maxv > 0 ? maxv : 1));
    fprintf(stderr, "CPU fused (same cube, all threads): %.2f GB/s; GPU vs CPU max diff %.3g of max %.3g\n",
            gbps(in_bytes, t), maxd, maxv);
    free(cout);
    free(hout);
    hsi_cuda_free(dout);
    hsi_view_release(&dbip);
    hsi_view_release(&dcube);
    hsi_view_release(&sub);
    hsi_pca_free(&pca);
    hsi_norm_free(&nm);
    hsi_stats_free(&st);
    hsi_view_release(&cube);
    hsi_view_release(&raw);
}

/* ------------------------------------------------------------- training */

/* The model of nn.c trained on the GPU through hsi_dmodel (models/model_cuda.h):
 * what `hsi train --device cuda` runs per batch, dropout included. */
static void bench_model(FILE *js, const char *name, int batch, int bands, int patch, int classes,
                        int steps, int last)
{
    hsi_module *m = NULL;
    hsi_dmodel *d = NULL;
    CHECK(hsi_model_create(&m, name, bands, patch, classes, HSI_F32, 1));
    int64_t xs[5];
    int nd = hsi_model_input_shape(name, batch, bands, patch, xs);
    hsi_optim_config cfg;
    hsi_optim_config_default(&cfg, HSI_OPT_ADAMW);
    CHECK(hsi_dmodel_create(&d, m, nd - 1, xs + 1, batch, &cfg, 1));
    int64_t nx = 1;
    for (int i = 0; i < nd; i++) nx *= xs[i];
    float *h = malloc(sizeof(float) * (size_t)nx);
    for (int64_t i = 0; i < nx; i++) h[i] = frand();
    float *x = dmalloc(sizeof(float) * (size_t)nx);
    CHECK(hsi_cuda_upload(x, h, sizeof(float) * (size_t)nx));
    int32_t *t = malloc(sizeof(int32_t) * (size_t)batch);
    for (int i = 0; i < batch; i++) t[i] = i % classes;
    int32_t *y = dmalloc(sizeof(int32_t) * (size_t)batch);
    CHECK(hsi_cuda_upload(y, t, sizeof(int32_t) * (size_t)batch));
    double loss0 = 0, loss1 = 0;
    CHECK(hsi_dmodel_train_step(d, x, y, batch));
    CHECK(hsi_dmodel_loss(d, &loss0));
    for (int i = 0; i < 2; i++) CHECK(hsi_dmodel_train_step(d, x, y, batch)); /* warm-up */
    hsi_cuda_mem_stats a, b;
    CHECK(hsi_cuda_sync());
    hsi_cuda_mem_get(&a);
    double tt = hsi_now();
    for (int i = 0; i < steps; i++) CHECK(hsi_dmodel_train_step(d, x, y, batch));
    CHECK(hsi_cuda_sync());
    tt = hsi_now() - tt;
    hsi_cuda_mem_get(&b);
    CHECK(hsi_dmodel_loss(d, &loss1));
    double train_sps = (double)batch * steps / tt;
    const float *logits = NULL;
    CHECK(hsi_dmodel_predict(d, &logits, x, batch));
    CHECK(hsi_cuda_sync());
    double ti = hsi_now();
    for (int i = 0; i < steps; i++) CHECK(hsi_dmodel_predict(d, &logits, x, batch));
    CHECK(hsi_cuda_sync());
    ti = hsi_now() - ti;
    double infer_sps = (double)batch * steps / ti;
    fprintf(stderr, "%s on the GPU: train %.0f samples/s (%.2f ms/step), infer %.0f samples/s; "
                    "loss %.4f -> %.4f; cudaMalloc calls in the timed steps: %lld\n",
            name, train_sps, 1e3 * tt / steps, infer_sps, loss0, loss1,
            (long long)(b.n_cuda_malloc - a.n_cuda_malloc));
    fprintf(js,
            "  \"%s\": {\"train_samples_per_s\": %.1f, \"infer_samples_per_s\": %.1f, "
            "\"ms_per_step\": %.3f, \"loss_first\": %.5f, \"loss_last\": %.5f, "
            "\"steady_cuda_mallocs\": %lld}%s\n",
            name, train_sps, infer_sps, 1e3 * tt / steps, loss0, loss1,
            (long long)(b.n_cuda_malloc - a.n_cuda_malloc), last ? "" : ",");
    hsi_cuda_free(x);
    hsi_cuda_free(y);
    free(h);
    free(t);
    hsi_dmodel_free(d);
    hsi_module_free(m);
}

/* A device-resident epoch: a float32 (K, 512, 512) cube on the device, the
 * pixels and labels of the epoch uploaded once, and per batch
 * hsi_patches_extract_cuda (mirror padding, flips and rotations) then
 * hsi_dmodel_train_step: no host transfer or synchronisation per batch. */
static void bench_pipeline(FILE *js, int batch, int bands, int patch, int classes, int steps)
{
    int64_t L = 512, S = 512, nc = (int64_t)bands * L * S, n = (int64_t)batch * steps;
    float *h = malloc(sizeof(float) * (size_t)nc);
    for (int64_t i = 0; i < nc; i++) h[i] = frand();
    hsi_buffer *cb = NULL;
    CHECK(hsi_cuda_buffer(&cb, sizeof(float) * (size_t)nc));
    CHECK(hsi_cuda_upload(cb->data, h, sizeof(float) * (size_t)nc));
    hsi_view cube;
    int64_t shape[3] = {bands, L, S};
    CHECK(hsi_view_make_packed(&cube, cb, 0, HSI_F32, 3, shape));
    hsi_buffer_release(cb);
    int64_t *px = malloc(sizeof(int64_t) * (size_t)n);
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        px[i] = (int64_t)((frand() + 1) * 0.5 * (double)(L * S - 1));
        lab[i] = (int32_t)(i % classes);
    }
    int64_t *dpx = dmalloc(sizeof(int64_t) * (size_t)n);
    int32_t *dlab = dmalloc(sizeof(int32_t) * (size_t)n);
    CHECK(hsi_cuda_upload(dpx, px, sizeof(int64_t) * (size_t)n));
    CHECK(hsi_cuda_upload(dlab, lab, sizeof(int32_t) * (size_t)n));
    hsi_module *m = NULL;
    hsi_dmodel *d = NULL;
    CHECK(hsi_model_create(&m, "cnn2d", bands, patch, classes, HSI_F32, 1));
    int64_t xs[5];
    int nd = hsi_model_input_shape("cnn2d", batch, bands, patch, xs);
    hsi_optim_config cfg;
    hsi_optim_config_default(&cfg, HSI_OPT_ADAMW);
    CHECK(hsi_dmodel_create(&d, m, nd - 1, xs + 1, batch, &cfg, 1));
    float *x = dmalloc(sizeof(float) * (size_t)batch * bands * patch * patch);
    hsi_augment aug = {.flips = 1, .rotations = 1};
    for (int i = 0; i < 2; i++) { /* warm-up */
        CHECK(hsi_patches_extract_cuda(x, &cube, patch, HSI_PAD_MIRROR, &aug, dpx, batch, 1, i));
        CHECK(hsi_dmodel_train_step(d, x, dlab, batch));
    }
    CHECK(hsi_cuda_sync());
    double t = hsi_now(), tp = 0;
    for (int i = 0; i < steps; i++) {
        CHECK(hsi_patches_extract_cuda(x, &cube, patch, HSI_PAD_MIRROR, &aug, dpx + (int64_t)i * batch,
                                       batch, 1, (uint64_t)i));
        CHECK(hsi_dmodel_train_step(d, x, dlab + (int64_t)i * batch, batch));
    }
    CHECK(hsi_cuda_sync());
    t = hsi_now() - t;
    /* patch extraction alone */
    tp = hsi_now();
    for (int i = 0; i < steps; i++)
        CHECK(hsi_patches_extract_cuda(x, &cube, patch, HSI_PAD_MIRROR, &aug, dpx + (int64_t)i * batch,
                                       batch, 1, (uint64_t)i));
    CHECK(hsi_cuda_sync());
    tp = hsi_now() - tp;
    double loss = 0;
    CHECK(hsi_dmodel_loss(d, &loss));
    fprintf(stderr, "cnn2d device-resident epoch (patches + step): %.0f samples/s; patches alone "
                    "%.0f samples/s; last loss %.4f\n",
            (double)n / t, (double)n / tp, loss);
    fprintf(js, "  \"cnn2d_device_epoch_samples_per_s\": %.1f,\n  \"gpu_patches_samples_per_s\": %.1f,\n",
            (double)n / t, (double)n / tp);
    hsi_cuda_free(x);
    hsi_cuda_free(dpx);
    hsi_cuda_free(dlab);
    hsi_dmodel_free(d);
    hsi_module_free(m);
    hsi_view_release(&cube);
    free(px);
    free(lab);
    free(h);
}

/* The CPU engine's step (as `hsi bench model`): same model, batch, AdamW. */
static void bench_model_cpu(FILE *js, const char *name, int batch, int bands, int patch,
                            int classes, int steps)
{
    hsi_module *m = NULL;
    hsi_optim *o = NULL;
    hsi_graph *g = NULL;
    hsi_tensor *x = NULL, *y = NULL;
    hsi_manual_seed(1);
    CHECK(hsi_model_create(&m, name, bands, patch, classes, HSI_F32, 1));
    hsi_optim_config cfg;
    hsi_optim_config_default(&cfg, HSI_OPT_ADAMW);
    CHECK(hsi_optim_new(&o, &cfg, m));
    CHECK(hsi_graph_new(&g));
    int64_t xs[5], ys[1] = {batch};
    int nd = hsi_model_input_shape(name, batch, bands, patch, xs);
    CHECK(hsi_tensor_new(&x, HSI_F32, nd, xs, 0));
    CHECK(hsi_tensor_new(&y, HSI_I64, 1, ys, 0));
    float *xp = hsi_tensor_ptr(x);
    for (int64_t i = 0; i < hsi_tensor_count(x); i++) xp[i] = frand();
    int64_t *yp = hsi_tensor_ptr(y);
    for (int i = 0; i < batch; i++) yp[i] = i % classes;
    double t = 0;
    for (int s = 0; s < 2 + steps; s++) {
        double t0 = hsi_now(), loss = 0;
        hsi_graph_reset(g);
        CHECK(hsi_train_step(m, o, g, x, y, NULL, &loss, NULL, NULL));
        if (s >= 2) t += hsi_now() - t0;
    }
    double sps = (double)batch * steps / t;
    /* the engine's threads: HSI_THREADS, else every core (its BLAS calls are single-threaded) */
    const char *ht = getenv("HSI_THREADS");
    int n_threads = ht && atoi(ht) > 0 ? atoi(ht) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    fprintf(stderr, "%s on the CPU engine (%d threads): train %.0f samples/s\n", name, n_threads,
            sps);
    fprintf(js, "  \"%s_cpu\": {\"train_samples_per_s\": %.1f, \"threads\": %d},\n", name, sps,
            n_threads);
    hsi_tensor_free(x);
    hsi_tensor_free(y);
    hsi_graph_free(g);
    hsi_optim_free(o);
    hsi_module_free(m);
}

int main(int argc, char **argv)
{
    int64_t mib = 400;
    int batch = 128, bands = 30, patch = 11, classes = 16, steps = 20, cpu_steps = 5, cpu_only = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        long v = strtol(argv[i + 1], NULL, 10);
        if (!strcmp(argv[i], "--mib")) mib = v;
        else if (!strcmp(argv[i], "--batch")) batch = (int)v;
        else if (!strcmp(argv[i], "--bands")) bands = (int)v;
        else if (!strcmp(argv[i], "--patch")) patch = (int)v;
        else if (!strcmp(argv[i], "--classes")) classes = (int)v;
        else if (!strcmp(argv[i], "--steps")) steps = (int)v;
        else if (!strcmp(argv[i], "--cpu-steps")) cpu_steps = (int)v;
        else if (!strcmp(argv[i], "--cpu-only")) cpu_only = (int)v;
        else {
            fprintf(stderr, "gpu_bench: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (cpu_only) { /* the CPU engine part alone (checks this program without a GPU) */
        printf("{\n");
        bench_model_cpu(stdout, "cnn2d", batch, bands, patch, classes, cpu_steps);
        bench_model_cpu(stdout, "hybridsn", batch, bands, patch, classes, cpu_steps);
        printf("  \"cpu_only\": 1\n}\n");
        return 0;
    }
    if (hsi_cuda_require("gpu_bench") != HSI_OK) {
        fprintf(stderr, "gpu_bench: %s\n", hsi_last_error());
        return 3;
    }
    struct cudaDeviceProp prop;
    int dev = 0;
    CUCHECK(cudaGetDevice(&dev));
    CUCHECK(cudaGetDeviceProperties(&prop, dev));
    FILE *js = stdout;
    fprintf(js, "{\n  \"device\": \"%s\",\n  \"device_memory_gib\": %.1f,\n", prop.name,
            (double)prop.totalGlobalMem / 1073741824.0);
    fprintf(stderr, "device: %s\n", prop.name);
    bench_copies(js);
    bench_fused(js, mib);
    fprintf(js, "  \"train_config\": {\"batch\": %d, \"bands\": %d, \"patch\": %d, \"classes\": %d, "
                "\"steps\": %d},\n",
            batch, bands, patch, classes, steps);
    if (cpu_steps > 0) {
        bench_model_cpu(js, "cnn2d", batch, bands, patch, classes, cpu_steps);
        bench_model_cpu(js, "hybridsn", batch, bands, patch, classes, cpu_steps);
    }
    bench_pipeline(js, batch, bands, patch, classes, steps);
    bench_model(js, "cnn2d", batch, bands, patch, classes, steps, 0);
    bench_model(js, "hybridsn", batch, bands, patch, classes, steps, 1);
    fprintf(js, "}\n");
    return 0;
}

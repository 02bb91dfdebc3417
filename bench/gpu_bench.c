/* gpu_bench.c — the GPU figures of issue 7 in one run, as one JSON object on
 * stdout (progress on stderr): host-to-device GB/s from pinned vs pageable
 * memory; device memcpy GB/s (the card's practical bandwidth); GPU
 * statistics and fused (z-score + PCA 30) GB/s on a device cube and end to
 * end from a host cube, with the CPU fused pass on the same cube for the
 * ratio; cnn2d and HybridSN training / inference samples/s with a step
 * composed from the device launchers (models/layers_cuda.h: conv, BN, ReLU,
 * pool, GAP, linear, cross-entropy, AdamW; dropout omitted), plus the loss
 * before and after the timed steps on the fixed batch (it must fall), and
 * the same models trained by the CPU engine (all cores) for the ratio.
 * Not a test and not the engine. Built and run by bench/gpu_check.sh:
 *     gpu_bench [--mib 400] [--batch 128] [--bands 30] [--patch 11] [--classes 16] [--steps 20]
 *               [--cpu-steps 5] (0: no CPU engine run) [--cpu-only 1] (no GPU part) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "io/core.h"
#include "kernels/cuda.h"
#include "kernels/fused.h"
#include "kernels/pca.h"
#include "kernels/stats.h"
#include "models/layers_cuda.h"
#include "models/nn.h"
#include "models/optim.h"
#include "models/tensor.h"

#include <cblas.h>

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

enum { L_CONV, L_BN, L_RELU, L_MAXPOOL, L_GAP, L_LINEAR };

typedef struct layer {
    int kind;
    hsi_conv_dims cd;
    hsi_pool_dims pd;
    int n, c, in_f, out_f;
    int64_t s, n_in, n_out;  /* elements per batch in and out */
    int64_t nw, nb;          /* parameter counts (w/gamma, b/beta) */
    float *w, *b, *dw, *db, *mw, *vw, *mb, *vb;
    float *save_mean, *save_invstd, *rm, *rv;
    int32_t *argmax;
} layer;

typedef struct net {
    layer l[24];
    int nl;
    int batch, classes;
    float **act, **dact; /* act[0] = input; act[i+1] = output of layer i */
    void *ws;
    size_t ws_bytes;
    float *p, *loss;
    int32_t *target;
    int64_t step;
    hsi_optim_config oc;
} net;

static float *param(int64_t n, float scale, int ones)
{
    float *h = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) h[i] = ones ? 1.0f : scale * frand();
    float *d = dmalloc(sizeof(float) * (size_t)n);
    CHECK(hsi_cuda_upload(d, h, sizeof(float) * (size_t)n));
    free(h);
    return d;
}
static float *zeros(int64_t n)
{
    float *d = dmalloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    CUCHECK(cudaMemsetAsync(d, 0, sizeof(float) * (size_t)(n > 0 ? n : 1), hsi_cuda_stream()));
    return d;
}

static void add_params(layer *L, int64_t nw, int64_t nb, float scale, int bn)
{
    L->nw = nw, L->nb = nb;
    L->w = param(nw, scale, bn);
    L->b = bn ? zeros(nb) : param(nb, scale, 0);
    L->dw = zeros(nw), L->db = zeros(nb);
    L->mw = zeros(nw), L->vw = zeros(nw), L->mb = zeros(nb), L->vb = zeros(nb);
}

static layer *push(net *m, int kind, int64_t n_in, int64_t n_out)
{
    layer *L = &m->l[m->nl++];
    memset(L, 0, sizeof *L);
    L->kind = kind, L->n_in = n_in, L->n_out = n_out;
    return L;
}

/* conv (nd 2/3) with bias; shapes (C, [D,] H, W) -> (K, ...) */
static void add_conv(net *m, int nd, int c, int k, int *in, const int *ker, const int *pad,
                     int *out_sp)
{
    int one[3] = {1, 1, 1};
    hsi_conv_dims d;
    CHECK(hsi_conv_dims_init(&d, nd, m->batch, c, k, in, ker, one, pad));
    int64_t is = 1, os = 1, ks = 1;
    for (int i = 0; i < nd; i++) is *= in[i], os *= d.out[i], ks *= ker[i], out_sp[i] = d.out[i];
    layer *L = push(m, L_CONV, (int64_t)m->batch * c * is, (int64_t)m->batch * k * os);
    L->cd = d;
    add_params(L, (int64_t)k * c * ks, k, 1.0f / sqrtf((float)(c * ks)), 0);
    size_t wsb = hsi_conv_workspace_bytes_cuda(&d);
    if (wsb > m->ws_bytes) m->ws_bytes = wsb;
}

static void add_bn(net *m, int c, int64_t s)
{
    int64_t n = (int64_t)m->batch * c * s;
    layer *L = push(m, L_BN, n, n);
    L->n = m->batch, L->c = c, L->s = s;
    add_params(L, c, c, 0, 1);
    L->save_mean = zeros(c), L->save_invstd = zeros(c), L->rm = zeros(c);
    L->rv = param(c, 0, 1);
}

static void add_simple(net *m, int kind, int64_t n_in, int64_t n_out)
{
    push(m, kind, n_in, n_out);
}

static void add_linear(net *m, int in, int out)
{
    layer *L = push(m, L_LINEAR, (int64_t)m->batch * in, (int64_t)m->batch * out);
    L->in_f = in, L->out_f = out;
    add_params(L, (int64_t)in * out, out, 1.0f / sqrtf((float)in), 0);
}

static void net_finish(net *m, int bands, int patch, int hybrid)
{
    m->act = calloc((size_t)m->nl + 1, sizeof(float *));
    m->dact = calloc((size_t)m->nl + 1, sizeof(float *));
    int64_t nin = (int64_t)m->batch * bands * patch * patch;
    float *h = malloc(sizeof(float) * (size_t)nin);
    for (int64_t i = 0; i < nin; i++) h[i] = frand();
    m->act[0] = dmalloc(sizeof(float) * (size_t)nin);
    CHECK(hsi_cuda_upload(m->act[0], h, sizeof(float) * (size_t)nin));
    free(h);
    (void)hybrid;
    for (int i = 0; i < m->nl; i++) {
        m->act[i + 1] = zeros(m->l[i].n_out);
        m->dact[i + 1] = zeros(m->l[i].n_out);
        if (m->l[i].kind == L_MAXPOOL)
            m->l[i].argmax = dmalloc(sizeof(int32_t) * (size_t)m->l[i].n_out);
    }
    m->ws = dmalloc(m->ws_bytes ? m->ws_bytes : 4);
    m->p = zeros((int64_t)m->batch * m->classes);
    m->loss = zeros(2);
    int32_t *t = malloc(sizeof(int32_t) * (size_t)m->batch);
    for (int i = 0; i < m->batch; i++) t[i] = i % m->classes;
    m->target = dmalloc(sizeof(int32_t) * (size_t)m->batch);
    CHECK(hsi_cuda_upload(m->target, t, sizeof(int32_t) * (size_t)m->batch));
    free(t);
    hsi_optim_config_default(&m->oc, HSI_OPT_ADAMW);
}

static void forward(net *m, int training)
{
    for (int i = 0; i < m->nl; i++) {
        layer *L = &m->l[i];
        float *x = m->act[i], *y = m->act[i + 1];
        switch (L->kind) {
        case L_CONV:
            CHECK(hsi_conv_forward_cuda(y, x, L->w, L->b, &L->cd, m->ws));
            break;
        case L_BN:
            CHECK(hsi_bn_forward_cuda(y, L->save_mean, L->save_invstd, L->rm, L->rv, x, L->w, L->b,
                                      L->n, L->c, L->s, 1e-5f, 0.1f, training));
            break;
        case L_RELU:
            CHECK(hsi_relu_forward_cuda(y, x, L->n_in));
            break;
        case L_MAXPOOL:
            CHECK(hsi_pool_forward_cuda(y, L->argmax, x, &L->pd));
            break;
        case L_GAP:
            CHECK(hsi_gap_forward_cuda(y, x, L->n, L->c, L->s));
            break;
        default:
            CHECK(hsi_linear_forward_cuda(y, x, L->w, L->b, m->batch, L->in_f, L->out_f));
        }
    }
}

static void train_step(net *m)
{
    cudaStream_t s = hsi_cuda_stream();
    forward(m, 1);
    float *logits = m->act[m->nl];
    CHECK(hsi_cross_entropy_forward_cuda(m->loss, m->loss + 1, m->p, logits, m->target, NULL,
                                         m->batch, m->classes, 0.0, -100));
    for (int i = 1; i <= m->nl; i++)
        CUCHECK(cudaMemsetAsync(m->dact[i], 0, sizeof(float) * (size_t)m->l[i - 1].n_out, s));
    for (int i = 0; i < m->nl; i++)
        if (m->l[i].nw) {
            CUCHECK(cudaMemsetAsync(m->l[i].dw, 0, sizeof(float) * (size_t)m->l[i].nw, s));
            CUCHECK(cudaMemsetAsync(m->l[i].db, 0, sizeof(float) * (size_t)m->l[i].nb, s));
        }
    CHECK(hsi_cross_entropy_backward_cuda(m->dact[m->nl], NULL, m->loss + 1, m->p, m->target, NULL,
                                          m->batch, m->classes, 0.0, -100));
    for (int i = m->nl - 1; i >= 0; i--) {
        layer *L = &m->l[i];
        float *x = m->act[i], *y = m->act[i + 1], *dy = m->dact[i + 1];
        float *dx = i > 0 ? m->dact[i] : NULL;
        switch (L->kind) {
        case L_CONV:
            CHECK(hsi_conv_backward_cuda(dx, L->dw, L->db, dy, x, L->w, &L->cd, m->ws));
            break;
        case L_BN:
            CHECK(hsi_bn_backward_cuda(dx, L->dw, L->db, dy, x, L->w, L->save_mean, L->save_invstd,
                                       L->n, L->c, L->s, 1));
            break;
        case L_RELU:
            if (dx) CHECK(hsi_relu_backward_cuda(dx, dy, y, L->n_in));
            break;
        case L_MAXPOOL:
            if (dx) CHECK(hsi_pool_backward_cuda(dx, dy, L->argmax, &L->pd));
            break;
        case L_GAP:
            if (dx) CHECK(hsi_gap_backward_cuda(dx, dy, L->n, L->c, L->s));
            break;
        default:
            CHECK(hsi_linear_backward_cuda(dx, L->dw, L->db, dy, x, L->w, m->batch, L->in_f,
                                           L->out_f));
        }
    }
    m->step++;
    for (int i = 0; i < m->nl; i++) {
        layer *L = &m->l[i];
        if (!L->nw) continue;
        CHECK(hsi_adam_step_cuda(L->w, L->dw, L->mw, L->vw, L->nw, &m->oc, m->step));
        CHECK(hsi_adam_step_cuda(L->b, L->db, L->mb, L->vb, L->nb, &m->oc, m->step));
    }
}

static void build_cnn2d(net *m, int bands, int patch)
{
    int in[2] = {patch, patch}, out[2], k3[2] = {3, 3}, p1[2] = {1, 1}, k2[2] = {2, 2}, p0[2] = {0, 0};
    int64_t N = m->batch;
    int ch[4] = {bands, 64, 64, 128};
    for (int i = 0; i < 3; i++) {
        add_conv(m, 2, ch[i], ch[i + 1], in, k3, p1, out);
        int64_t sp = (int64_t)out[0] * out[1];
        add_bn(m, ch[i + 1], sp);
        add_simple(m, L_RELU, N * ch[i + 1] * sp, N * ch[i + 1] * sp);
        in[0] = out[0], in[1] = out[1];
        if (i == 1) {
            hsi_pool_dims pd;
            CHECK(hsi_pool_dims_init(&pd, HSI_POOL_MAX, 2, m->batch, 64, in, k2, k2, p0));
            layer *L = push(m, L_MAXPOOL, N * 64 * sp, N * 64 * (int64_t)pd.out[0] * pd.out[1]);
            L->pd = pd;
            in[0] = pd.out[0], in[1] = pd.out[1];
        }
    }
    int64_t sp = (int64_t)in[0] * in[1];
    layer *g = push(m, L_GAP, N * 128 * sp, N * 128);
    g->n = m->batch, g->c = 128, g->s = sp;
    add_linear(m, 128, m->classes);
    net_finish(m, bands, patch, 0);
}

static void build_hybridsn(net *m, int bands, int patch)
{
    int in[3] = {bands, patch, patch}, out[3], z3[3] = {0, 0, 0};
    int ks[3][3] = {{7, 3, 3}, {5, 3, 3}, {3, 3, 3}}, ch[4] = {1, 8, 16, 32};
    int64_t N = m->batch;
    for (int i = 0; i < 3; i++) {
        add_conv(m, 3, ch[i], ch[i + 1], in, ks[i], z3, out);
        int64_t n = N * ch[i + 1] * out[0] * out[1] * out[2];
        add_simple(m, L_RELU, n, n);
        memcpy(in, out, sizeof in);
    }
    /* (N, 32, d, s, s) is (N, 32 d, s, s) in memory */
    int in2[2] = {in[1], in[2]}, out2[2], k3[2] = {3, 3}, p0[2] = {0, 0};
    add_conv(m, 2, 32 * in[0], 64, in2, k3, p0, out2);
    int64_t f = 64 * (int64_t)out2[0] * out2[1];
    add_simple(m, L_RELU, N * f, N * f);
    add_linear(m, (int)f, 256);
    add_simple(m, L_RELU, N * 256, N * 256);
    add_linear(m, 256, 128);
    add_simple(m, L_RELU, N * 128, N * 128);
    add_linear(m, 128, m->classes);
    net_finish(m, bands, patch, 1);
}

static void bench_model(FILE *js, const char *name, int batch, int bands, int patch, int classes,
                        int steps, int last)
{
    net m;
    memset(&m, 0, sizeof m);
    m.batch = batch, m.classes = classes;
    if (!strcmp(name, "cnn2d"))
        build_cnn2d(&m, bands, patch);
    else
        build_hybridsn(&m, bands, patch);
    float loss0 = 0, loss1 = 0;
    train_step(&m);
    CHECK(hsi_cuda_download(&loss0, m.loss, 4));
    for (int i = 0; i < 2; i++) train_step(&m); /* warm-up: the allocator caches */
    hsi_cuda_mem_stats a, b;
    CHECK(hsi_cuda_sync());
    hsi_cuda_mem_get(&a);
    double t = hsi_now();
    for (int i = 0; i < steps; i++) train_step(&m);
    CHECK(hsi_cuda_sync());
    t = hsi_now() - t;
    hsi_cuda_mem_get(&b);
    CHECK(hsi_cuda_download(&loss1, m.loss, 4));
    double train_sps = (double)batch * steps / t;
    forward(&m, 0);
    CHECK(hsi_cuda_sync());
    double ti = hsi_now();
    for (int i = 0; i < steps; i++) forward(&m, 0);
    CHECK(hsi_cuda_sync());
    ti = hsi_now() - ti;
    double infer_sps = (double)batch * steps / ti;
    fprintf(stderr, "%s on the GPU: train %.0f samples/s (%.2f ms/step), infer %.0f samples/s; "
                    "loss %.4f -> %.4f; cudaMalloc calls in the timed steps: %lld\n",
            name, train_sps, 1e3 * t / steps, infer_sps, loss0, loss1,
            (long long)(b.n_cuda_malloc - a.n_cuda_malloc));
    fprintf(js,
            "  \"%s\": {\"train_samples_per_s\": %.1f, \"infer_samples_per_s\": %.1f, "
            "\"ms_per_step\": %.3f, \"loss_first\": %.5f, \"loss_last\": %.5f, "
            "\"steady_cuda_mallocs\": %lld}%s\n",
            name, train_sps, infer_sps, 1e3 * t / steps, loss0, loss1,
            (long long)(b.n_cuda_malloc - a.n_cuda_malloc), last ? "" : ",");
    /* device memory goes back to the cache at exit; not freed one by one */
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
        double t0 = hsi_now();
        hsi_tensor *logits = NULL, *loss = NULL;
        hsi_graph_reset(g);
        hsi_optim_zero_grad(o);
        CHECK(hsi_module_forward(&logits, m, g, x));
        CHECK(hsi_cross_entropy(&loss, g, logits, y, NULL));
        CHECK(hsi_backward(loss, 0));
        CHECK(hsi_optim_step(o));
        if (s >= 2) t += hsi_now() - t0;
    }
    double sps = (double)batch * steps / t;
    fprintf(stderr, "%s on the CPU engine (%d BLAS threads): train %.0f samples/s\n", name,
            openblas_get_num_threads(), sps);
    fprintf(js, "  \"%s_cpu\": {\"train_samples_per_s\": %.1f, \"threads\": %d},\n", name, sps,
            openblas_get_num_threads());
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
    bench_model(js, "cnn2d", batch, bands, patch, classes, steps, 0);
    bench_model(js, "hybridsn", batch, bands, patch, classes, steps, 1);
    fprintf(js, "}\n");
    return 0;
}

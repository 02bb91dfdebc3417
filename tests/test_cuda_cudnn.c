/* test_cuda_cudnn.c — the cuDNN convolutions and batch norm
 * (models/cudnn.cu) against the im2col + cuBLAS ones and hsi's batch-norm
 * kernels on the same device, the device model with either,
 * and the --conv option of the commands. Suites "cuda_cudnn" and
 * "cuda_conv_commands" need a device (the first's cases pass with a note
 * when cuDNN cannot be loaded there; the second checks what hsi then says);
 * suite "conv_option" runs everywhere: the option's rules, the usage errors,
 * and without a device the refusal of --conv cudnn. Not a test of cuDNN's
 * own numerics. */
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "kernels/cuda.h"
#include "models/layers.h"
#include "models/layers_cuda.h"
#include "models/model_cuda.h"
#include "models/nn.h"
#include "models/optim.h"
#include "models/tensor.h"

/* ------------------------------------------------------------ helpers */

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static void rng_seed(uint64_t s) { g_rng = s * 0x9E3779B97F4A7C15ull + 1; }
static float urand(float lo, float hi)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return lo + (hi - lo) * (float)((double)(g_rng >> 11) * 0x1.0p-53);
}
static float *rand_host(int64_t n, float lo, float hi)
{
    float *a = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) a[i] = urand(lo, hi);
    return a;
}
static float *dev_copy(const float *h, int64_t n)
{
    void *d = NULL;
    HSI_CHECK_OK(hsi_cuda_malloc(&d, sizeof(float) * (size_t)n));
    HSI_CHECK_OK(hsi_cuda_upload(d, h, sizeof(float) * (size_t)n));
    return d;
}
static float *host_copy(const float *d, int64_t n)
{
    float *h = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    HSI_CHECK_OK(hsi_cuda_download(h, d, sizeof(float) * (size_t)n));
    return h;
}

/* 1 when cuDNN runs here; else a note and the case passes */
static int have_cudnn(const char *which)
{
    int v = 0;
    if (hsi_conv_cudnn_available(&v) == HSI_OK) {
        CU_ASSERT(v >= 90000 && v < 100000);
        return 1;
    }
    fprintf(stderr, "\n  cuDNN cannot be loaded (%s): %s skipped\n", hsi_last_error(), which);
    CU_PASS("cuDNN absent");
    return 0;
}

/* ------------------------------------- cuDNN vs im2col + cuBLAS, one conv */

/* Random x, w, b, dy and NON-ZERO initial dx, dw, db; forward and backward
 * by both; equal to 1e-4 of each output's largest magnitude. split: the
 * cuDNN backward in two calls, (dx) then (dw, db), the others NULL. Both
 * cuDNN results twice: the same bits (deterministic algorithms). */
static void conv_pair(int nd, int n, int c, int k, const int *in, const int *ker, const int *str,
                      const int *pad, int split, const char *what)
{
    hsi_conv_dims d;
    HSI_CHECK_OK(hsi_conv_dims_init(&d, nd, n, c, k, in, ker, str, pad));
    int64_t is = 1, ks = 1, os = 1;
    for (int i = 0; i < nd; i++) is *= in[i], ks *= ker[i], os *= d.out[i];
    const int64_t nx = (int64_t)n * c * is, nw = (int64_t)k * c * ks, ny = (int64_t)n * k * os;
    float *x = rand_host(nx, -1, 1), *w = rand_host(nw, -0.5f, 0.5f), *b = rand_host(k, -0.5f, 0.5f);
    float *dy = rand_host(ny, -1, 1), *dx0 = rand_host(nx, -1, 1), *dw0 = rand_host(nw, -1, 1),
          *db0 = rand_host(k, -1, 1);
    float *gx = dev_copy(x, nx), *gw = dev_copy(w, nw), *gb = dev_copy(b, k), *gdy = dev_copy(dy, ny);
    float *y_ref = dev_copy(dy, ny), *y_dnn = dev_copy(dy, ny); /* garbage: forward overwrites */
    float *dx_ref = dev_copy(dx0, nx), *dw_ref = dev_copy(dw0, nw), *db_ref = dev_copy(db0, k);
    float *dx_dnn = dev_copy(dx0, nx), *dw_dnn = dev_copy(dw0, nw), *db_dnn = dev_copy(db0, k);
    void *ws = NULL;
    HSI_CHECK_OK(hsi_cuda_malloc(&ws, hsi_conv_workspace_bytes_cuda(&d) + 64));
    HSI_CHECK_OK(hsi_conv_forward_cuda(y_ref, gx, gw, gb, &d, ws));
    HSI_CHECK_OK(hsi_conv_backward_cuda(dx_ref, dw_ref, db_ref, gdy, gx, gw, &d, ws));
    HSI_CHECK_OK(hsi_conv_forward_cudnn(y_dnn, gx, gw, gb, &d));
    if (split) {
        HSI_CHECK_OK(hsi_conv_backward_cudnn(dx_dnn, NULL, NULL, gdy, gx, gw, &d));
        HSI_CHECK_OK(hsi_conv_backward_cudnn(NULL, dw_dnn, db_dnn, gdy, gx, gw, &d));
    } else {
        HSI_CHECK_OK(hsi_conv_backward_cudnn(dx_dnn, dw_dnn, db_dnn, gdy, gx, gw, &d));
    }
    float *hy[2] = {host_copy(y_ref, ny), host_copy(y_dnn, ny)};
    float *hdx[2] = {host_copy(dx_ref, nx), host_copy(dx_dnn, nx)};
    float *hdw[2] = {host_copy(dw_ref, nw), host_copy(dw_dnn, nw)};
    float *hdb[2] = {host_copy(db_ref, k), host_copy(db_dnn, k)};
    char label[128];
    snprintf(label, sizeof label, "%s: forward", what);
    hsi_test_close_f32(hy[1], hy[0], ny, 1e-4, 0, label);
    snprintf(label, sizeof label, "%s: dx", what);
    hsi_test_close_f32(hdx[1], hdx[0], nx, 1e-4, 0, label);
    snprintf(label, sizeof label, "%s: dw", what);
    hsi_test_close_f32(hdw[1], hdw[0], nw, 1e-4, 0, label);
    snprintf(label, sizeof label, "%s: db", what);
    hsi_test_close_f32(hdb[1], hdb[0], k, 1e-4, 0, label);
    /* the gradients did move away from their starting values */
    CU_ASSERT(memcmp(hdx[1], dx0, sizeof(float) * (size_t)nx) != 0);
    CU_ASSERT(memcmp(hdw[1], dw0, sizeof(float) * (size_t)nw) != 0);
    /* again from the same inputs: the same bits */
    HSI_CHECK_OK(hsi_conv_forward_cudnn(y_dnn, gx, gw, gb, &d));
    HSI_CHECK_OK(hsi_cuda_upload(dx_dnn, dx0, sizeof(float) * (size_t)nx));
    HSI_CHECK_OK(hsi_cuda_upload(dw_dnn, dw0, sizeof(float) * (size_t)nw));
    HSI_CHECK_OK(hsi_cuda_upload(db_dnn, db0, sizeof(float) * (size_t)k));
    if (split) {
        HSI_CHECK_OK(hsi_conv_backward_cudnn(dx_dnn, NULL, NULL, gdy, gx, gw, &d));
        HSI_CHECK_OK(hsi_conv_backward_cudnn(NULL, dw_dnn, db_dnn, gdy, gx, gw, &d));
    } else {
        HSI_CHECK_OK(hsi_conv_backward_cudnn(dx_dnn, dw_dnn, db_dnn, gdy, gx, gw, &d));
    }
    float *again[4] = {host_copy(y_dnn, ny), host_copy(dx_dnn, nx), host_copy(dw_dnn, nw),
                       host_copy(db_dnn, k)};
    CU_ASSERT(memcmp(again[0], hy[1], sizeof(float) * (size_t)ny) == 0);
    CU_ASSERT(memcmp(again[1], hdx[1], sizeof(float) * (size_t)nx) == 0);
    CU_ASSERT(memcmp(again[2], hdw[1], sizeof(float) * (size_t)nw) == 0);
    CU_ASSERT(memcmp(again[3], hdb[1], sizeof(float) * (size_t)k) == 0);
    for (int i = 0; i < 2; i++) free(hy[i]), free(hdx[i]), free(hdw[i]), free(hdb[i]);
    for (int i = 0; i < 4; i++) free(again[i]);
    float *dev[] = {gx, gw, gb, gdy, y_ref, y_dnn, dx_ref, dw_ref, db_ref, dx_dnn, dw_dnn, db_dnn};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) hsi_cuda_free(dev[i]);
    hsi_cuda_free(ws);
    free(x), free(w), free(b), free(dy), free(dx0), free(dw0), free(db0);
}

static void test_conv2d(void)
{
    if (!have_cudnn("2-D convolutions")) return;
    rng_seed(21);
    int s1[2] = {1, 1}, s2[2] = {2, 2}, p0[2] = {0, 0}, p1[2] = {1, 1}, k1[2] = {1, 1},
        k3[2] = {3, 3};
    int in11[2] = {11, 11}, in5[2] = {5, 5}, in98[2] = {9, 8}, in65[2] = {6, 5};
    /* cnn2d (30 bands, 11x11 patches): its first and last convolutions */
    conv_pair(2, 8, 30, 64, in11, k3, s1, p1, 0, "cnn2d conv 1");
    conv_pair(2, 8, 64, 128, in5, k3, s1, p1, 1, "cnn2d conv 3 (split backward)");
    /* stride 2, with and without padding; 1x1 */
    conv_pair(2, 2, 3, 6, in98, k3, s2, p0, 0, "stride 2");
    conv_pair(2, 3, 4, 5, in98, k3, s2, p1, 1, "stride 2, pad 1 (split backward)");
    conv_pair(2, 3, 5, 7, in65, k1, s1, p0, 0, "1x1");
    /* cnn1d (30 bands): a (1, 7) kernel over a 1 x 30 row, pad (0, 3) */
    int in1[2] = {1, 30}, k17[2] = {1, 7}, p03[2] = {0, 3};
    conv_pair(2, 4, 1, 32, in1, k17, s1, p03, 0, "cnn1d conv 1");
    /* hybridsn (30 bands, 11x11): its 2-D convolution over 32 * 18 channels */
    int in55[2] = {5, 5};
    conv_pair(2, 4, 576, 64, in55, k3, s1, p0, 0, "hybridsn 2-D conv");
}

static void test_conv3d(void)
{
    if (!have_cudnn("3-D convolutions")) return;
    rng_seed(22);
    int s1[3] = {1, 1, 1}, p0[3] = {0, 0, 0};
    /* hybridsn (30 bands, 11x11 patches): its first two 3-D convolutions */
    int in1[3] = {30, 11, 11}, k1[3] = {7, 3, 3};
    conv_pair(3, 4, 1, 8, in1, k1, s1, p0, 0, "hybridsn conv3d 1");
    int in2[3] = {24, 9, 9}, k2[3] = {5, 3, 3};
    conv_pair(3, 4, 8, 16, in2, k2, s1, p0, 1, "hybridsn conv3d 2 (split backward)");
    /* strides and padding on every axis, 1x1x1 */
    int in3[3] = {10, 7, 6}, k3[3] = {3, 3, 3}, t3[3] = {2, 1, 2}, q3[3] = {1, 0, 1};
    conv_pair(3, 2, 3, 4, in3, k3, t3, q3, 0, "3-D stride (2,1,2), pad (1,0,1)");
    int k111[3] = {1, 1, 1};
    conv_pair(3, 2, 3, 5, in3, k111, s1, p0, 0, "3-D 1x1x1");
}

/* ------------------------------------------------ the device model, both */

/* The same model, one training step and one AdamW update with the gemm
 * convolutions and with cuDNN (the same seed: the same dropout masks): loss
 * to 1e-5, gradients to 1e-3 of their tensor's largest plus 1e-6 of the
 * model's (a conv bias under batch norm has a gradient of float noise),
 * running statistics to 1e-4, eval logits of the same parameters (before
 * the update) to 1e-4, parameters after the update within 2.5 lr (Adam's
 * first step is lr * sign(g), so a gradient near 0 may flip). */
static void dmodel_pair(const char *name, int bands, int patch, int classes, int batch)
{
    hsi_module *m[2] = {NULL, NULL};
    hsi_dmodel *d[2] = {NULL, NULL};
    hsi_named_tensor *s[2] = {NULL, NULL};
    int ns[2] = {0, 0};
    double loss[2] = {0, 0};
    float *logits[2] = {NULL, NULL};
    int64_t xs[5];
    int nd = hsi_model_input_shape(name, batch, bands, patch, xs);
    int64_t nx = 1;
    for (int i = 0; i < nd; i++) nx *= xs[i];
    float *x = rand_host(nx, -1, 1);
    int32_t *y = malloc(sizeof(int32_t) * (size_t)batch);
    for (int i = 0; i < batch; i++) y[i] = (i * 5) % classes;
    float *gx = dev_copy(x, nx);
    void *gy = NULL;
    HSI_CHECK_OK(hsi_cuda_malloc(&gy, sizeof(int32_t) * (size_t)batch));
    HSI_CHECK_OK(hsi_cuda_upload(gy, y, sizeof(int32_t) * (size_t)batch));
    hsi_optim_config cfg;
    hsi_optim_config_default(&cfg, HSI_OPT_ADAMW);
    for (int v = 0; v < 2; v++) {
        HSI_CHECK_OK(hsi_model_create(&m[v], name, bands, patch, classes, HSI_F32, 3));
        HSI_CHECK_OK(hsi_dmodel_create(&d[v], m[v], nd - 1, xs + 1, batch, &cfg, 17));
        CU_ASSERT_STRING_EQUAL(hsi_dmodel_conv_name(d[v]), "gemm"); /* the default */
        HSI_CHECK_OK(hsi_dmodel_set_conv(d[v], v ? HSI_GPU_CONV_CUDNN : HSI_GPU_CONV_GEMM));
        CU_ASSERT_EQUAL(strncmp(hsi_dmodel_conv_name(d[v]), v ? "cudnn 9." : "gemm", v ? 8 : 5), 0);
        HSI_CHECK_OK(hsi_dmodel_forward_backward(d[v], gx, gy, batch));
        HSI_CHECK_OK(hsi_dmodel_loss(d[v], &loss[v]));
        HSI_CHECK_OK(hsi_dmodel_to_host(d[v], m[v], 1));
        HSI_CHECK_OK(hsi_module_state(m[v], &s[v], &ns[v]));
        const float *z = NULL;
        HSI_CHECK_OK(hsi_dmodel_predict(d[v], &z, gx, batch));
        logits[v] = host_copy(z, (int64_t)batch * classes);
    }
    CU_ASSERT(isfinite(loss[0]));
    CU_ASSERT(fabs(loss[1] - loss[0]) <= 1e-5 * fabs(loss[0]));
    CU_ASSERT_EQUAL_FATAL(ns[0], ns[1]);
    double gmax = 0;
    for (int k = 0; k < ns[0]; k++)
        if (!s[0][k].is_buffer && s[0][k].t->grad) {
            const float *g = hsi_tensor_ptr(s[0][k].t->grad);
            for (int64_t i = 0; i < hsi_tensor_count(s[0][k].t); i++) gmax = fmax(gmax, fabs(g[i]));
        }
    CU_ASSERT(gmax > 0);
    for (int k = 0; k < ns[0]; k++) {
        hsi_tensor *a = s[1][k].t, *b = s[0][k].t;
        int64_t n = hsi_tensor_count(b);
        if (b->data.dtype == HSI_I64) {
            CU_ASSERT_EQUAL(*(int64_t *)hsi_tensor_ptr(a), *(int64_t *)hsi_tensor_ptr(b));
        } else if (s[0][k].is_buffer) {
            hsi_test_close_f32(hsi_tensor_ptr(a), hsi_tensor_ptr(b), n, 1e-4, 1e-6, s[0][k].name);
        } else {
            CU_ASSERT_PTR_NOT_NULL_FATAL(a->grad);
            CU_ASSERT_PTR_NOT_NULL_FATAL(b->grad);
            hsi_test_close_f32(hsi_tensor_ptr(a->grad), hsi_tensor_ptr(b->grad), n, 1e-3, 1e-6 * gmax,
                      s[0][k].name);
        }
    }
    hsi_test_close_f32(logits[1], logits[0], (int64_t)batch * classes, 1e-4, 0, "eval logits");
    for (int v = 0; v < 2; v++) {
        HSI_CHECK_OK(hsi_dmodel_optim_step(d[v]));
        HSI_CHECK_OK(hsi_dmodel_to_host(d[v], m[v], 0));
    }
    for (int k = 0; k < ns[0]; k++)
        if (!s[0][k].is_buffer)
            hsi_test_close_f32(hsi_tensor_ptr(s[1][k].t), hsi_tensor_ptr(s[0][k].t),
                      hsi_tensor_count(s[0][k].t), 0, 2.5 * cfg.lr, s[0][k].name);
    /* back to gemm and a short batch: both run */
    HSI_CHECK_OK(hsi_dmodel_set_conv(d[1], HSI_GPU_CONV_GEMM));
    CU_ASSERT_STRING_EQUAL(hsi_dmodel_conv_name(d[1]), "gemm");
    HSI_CHECK_OK(hsi_dmodel_train_step(d[1], gx, gy, batch - 1));
    HSI_CHECK_OK(hsi_dmodel_set_conv(d[1], HSI_GPU_CONV_AUTO)); /* cuDNN loads: cuDNN */
    CU_ASSERT_EQUAL(strncmp(hsi_dmodel_conv_name(d[1]), "cudnn 9.", 8), 0);
    /* ... but 3-D convolutions' backward by gemm */
    CU_ASSERT_EQUAL(strstr(hsi_dmodel_conv_name(d[1]), ", gemm for 3-D backward") != NULL,
                    !strcmp(name, "hybridsn"));
    HSI_CHECK_OK(hsi_dmodel_train_step(d[1], gx, gy, batch - 1));
    HSI_CHECK_OK(hsi_cuda_sync());
    for (int v = 0; v < 2; v++) {
        free(s[v]);
        free(logits[v]);
        hsi_dmodel_free(d[v]);
        hsi_module_free(m[v]);
    }
    hsi_cuda_free(gx);
    hsi_cuda_free(gy);
    free(x);
    free(y);
}

static void test_dmodel_cnn2d(void)
{
    if (!have_cudnn("device model cnn2d")) return;
    rng_seed(23);
    dmodel_pair("cnn2d", 30, 11, 16, 32);
}

static void test_dmodel_hybridsn(void)
{
    if (!have_cudnn("device model hybridsn")) return;
    rng_seed(24);
    dmodel_pair("hybridsn", 30, 11, 16, 8);
}

/* ------------------------------------------ cuDNN batch norm vs hsi's */

/* Random x (mean far from 0), gamma, beta, running statistics and dy,
 * NON-ZERO initial dx, dgamma, dbeta; training forward (saved and running
 * statistics), training backward and an eval forward by hsi's kernels and
 * by cuDNN: equal to 1e-4 of each output's largest magnitude. */
static void bn_pair(int n, int c, int64_t s, const char *what)
{
    const int64_t nx = (int64_t)n * c * s;
    float *x = rand_host(nx, 2, 6), *dy = rand_host(nx, -1, 1), *dx0 = rand_host(nx, -1, 1);
    float *g = rand_host(c, 0.5f, 1.5f), *b = rand_host(c, -0.5f, 0.5f), *rm0 = rand_host(c, 0, 1);
    float *rv0 = rand_host(c, 0.5f, 2), *dg0 = rand_host(c, -1, 1), *db0 = rand_host(c, -1, 1);
    float *gx = dev_copy(x, nx), *gdy = dev_copy(dy, nx), *gg = dev_copy(g, c), *gb = dev_copy(b, c);
    float *y[2], *dx[2], *rm[2], *rv[2], *sm[2], *si[2], *dg[2], *db[2], *ye[2];
    for (int k = 0; k < 2; k++) {
        y[k] = dev_copy(dy, nx), ye[k] = dev_copy(dy, nx), dx[k] = dev_copy(dx0, nx);
        rm[k] = dev_copy(rm0, c), rv[k] = dev_copy(rv0, c), sm[k] = dev_copy(rm0, c);
        si[k] = dev_copy(rv0, c), dg[k] = dev_copy(dg0, c), db[k] = dev_copy(db0, c);
    }
    HSI_CHECK_OK(hsi_bn_forward_cuda(y[0], sm[0], si[0], rm[0], rv[0], gx, gg, gb, n, c, s, 1e-5f, 0.1f, 1));
    HSI_CHECK_OK(hsi_bn_forward_cudnn(y[1], sm[1], si[1], rm[1], rv[1], gx, gg, gb, n, c, s, 1e-5f, 0.1f, 1));
    HSI_CHECK_OK(hsi_bn_backward_cuda(dx[0], dg[0], db[0], gdy, gx, gg, sm[0], si[0], n, c, s, 1));
    HSI_CHECK_OK(hsi_bn_backward_cudnn(dx[1], dg[1], db[1], gdy, gx, gg, sm[1], si[1], n, c, s, 1e-5f, 1));
    HSI_CHECK_OK(hsi_bn_forward_cuda(ye[0], NULL, NULL, rm[0], rv[0], gx, gg, gb, n, c, s, 1e-5f, 0.1f, 0));
    HSI_CHECK_OK(hsi_bn_forward_cudnn(ye[1], NULL, NULL, rm[1], rv[1], gx, gg, gb, n, c, s, 1e-5f, 0.1f, 0));
    struct {
        float **d;
        int64_t n;
        const char *name;
    } out[] = {{y, nx, "forward"},       {sm, c, "saved mean"}, {si, c, "saved invstd"},
               {rm, c, "running mean"},  {rv, c, "running var"}, {dx, nx, "dx"},
               {dg, c, "dgamma"},        {db, c, "dbeta"},       {ye, nx, "eval forward"}};
    for (size_t i = 0; i < sizeof out / sizeof out[0]; i++) {
        float *h0 = host_copy(out[i].d[0], out[i].n), *h1 = host_copy(out[i].d[1], out[i].n);
        char label[128];
        snprintf(label, sizeof label, "%s: %s", what, out[i].name);
        hsi_test_close_f32(h1, h0, out[i].n, 1e-4, 0, label);
        free(h0), free(h1);
    }
    for (int k = 0; k < 2; k++) {
        float *dv[] = {y[k], ye[k], dx[k], rm[k], rv[k], sm[k], si[k], dg[k], db[k]};
        for (size_t i = 0; i < sizeof dv / sizeof dv[0]; i++) hsi_cuda_free(dv[i]);
    }
    hsi_cuda_free(gx), hsi_cuda_free(gdy), hsi_cuda_free(gg), hsi_cuda_free(gb);
    free(x), free(dy), free(dx0), free(g), free(b), free(rm0), free(rv0), free(dg0), free(db0);
}

static void test_bn(void)
{
    if (!have_cudnn("batch norm")) return;
    if (hsi_bn_cudnn_available() != HSI_OK) {
        fprintf(stderr, "\n  cuDNN has no batch norm here (%s): skipped\n", hsi_last_error());
        CU_PASS("no cuDNN batch norm");
        return;
    }
    rng_seed(31);
    bn_pair(4, 3, 37, "bn (4, 3, 37)");
    bn_pair(128, 64, 121, "bn cnn2d (128, 64, 11x11)");
    bn_pair(16, 8, 24 * 23 * 23, "bn hybridsn (16, 8, 24x23x23)");
    /* one value per channel: no unbiased variance for cuDNN (n * s - 1 = 0);
     * the running variance takes the biased one, 0, as on the CPU */
    bn_pair(1, 5, 1, "bn one value per channel (1, 5, 1)");
}

/* ------------------------------------------------------- the commands */

#define BENCH " bench model cnn2d --batch 4 --steps 1 --warmup 0 --json --device cuda"

/* What the commands say on a device: the JSON names the convolutions (auto:
 * cuDNN, with gemm for a 3-D backward); HSI_CUDNN pointing nowhere makes
 * --conv cudnn fail naming it and --conv auto fall back to gemm. */
static void test_commands(void)
{
    static char out[16384];
    if (access(HSI_BIN, X_OK) != 0) {
        fprintf(stderr, "\n  %s is absent: its checks skipped\n", HSI_BIN);
        CU_PASS("no hsi binary");
        return;
    }
    int dnn = hsi_conv_cudnn_available(NULL) == HSI_OK;
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN BENCH " --conv gemm"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"conv\": \"gemm\""));
    int rc = hsi_test_run(out, sizeof out, HSI_BIN BENCH " --conv cudnn");
    if (dnn) {
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"conv\": \"cudnn 9."));
        /* cnn2d has batch norms: --conv cudnn runs them by cuDNN when it has them */
        CU_ASSERT_EQUAL(strstr(out, ", batch norm too\"") != NULL, hsi_bn_cudnn_available() == HSI_OK);
        CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN BENCH), 0); /* auto */
        CU_ASSERT_PTR_NULL(strstr(out, "batch norm too")); /* auto keeps hsi's batch norm */
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"conv\": \"cudnn 9."));
        CU_ASSERT_PTR_NULL(strstr(out, "gemm for 3-D backward"));
        /* auto with 3-D convolutions: their backward by gemm, and the JSON says so */
        CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " bench model hybridsn --batch 4 "
                                                      "--steps 1 --warmup 0 --json --device cuda"), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, ", gemm for 3-D backward\", \"graph_launches\": 0}"));
    } else {
        CU_ASSERT_EQUAL(rc, 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "cuDNN"));
    }
    rc = hsi_test_run(out, sizeof out, "HSI_CUDNN=/nonexistent/libcudnn.so.9 " HSI_BIN BENCH
                                       " --conv cudnn");
    CU_ASSERT_EQUAL(rc, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "HSI_CUDNN=/nonexistent/libcudnn.so.9"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "dlopen"));
    if (rc != 1 || !strstr(out, "HSI_CUDNN=")) fprintf(stderr, "\n  hsi said: %s\n", out);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, "HSI_CUDNN=/nonexistent/libcudnn.so.9 " HSI_BIN
                                                  BENCH " --conv auto"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"conv\": \"gemm\""));
    /* HSI_CUDNN_ALGO: fastest says so in the name; anything else is refused, naming it */
    rc = hsi_test_run(out, sizeof out, "HSI_CUDNN_ALGO=fastest " HSI_BIN BENCH " --conv cudnn");
    if (dnn) {
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, " fastest algorithms"));
    }
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, "HSI_CUDNN_ALGO=quick " HSI_BIN BENCH " --conv cudnn"), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "HSI_CUDNN_ALGO=quick: expected deterministic"));
    /* --graph: the steps after the first as graph launches (steps + warmup - 1) */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " bench model cnn2d --batch 8 --steps 3 "
                                                  "--warmup 2 --json --device cuda --graph"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"graph_launches\": 4}"));
    /* --ops: the step's pieces per op and layer, on the device */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " bench model cnn2d --batch 4 --steps 2 "
                                                  "--warmup 0 --device cuda --conv gemm --ops"), 0);
    const char *want[] = {"per op and layer on the GPU", "conv (gemm)", "features.7", "batch_norm",
                          "relu", "max_pool", "global_avg_pool", "dropout", "classifier",
                          "cross_entropy", "zero_grad", "adamw", "all ops"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(out, want[i])) {
            CU_FAIL("bench model --device cuda --ops lacks a row");
            fprintf(stderr, "\n  no '%s' in: %s\n", want[i], out);
        }
}

HSI_SUITE(cuda_cudnn, HSI_SUITE_NEEDS_CUDA,
          {"2-D conv: cuDNN vs im2col + cuBLAS (accumulating backward)", test_conv2d},
          {"3-D conv: cuDNN vs im2col + cuBLAS (accumulating backward)", test_conv3d},
          {"device model cnn2d: one step with gemm vs cuDNN", test_dmodel_cnn2d},
          {"device model hybridsn: one step with gemm vs cuDNN", test_dmodel_hybridsn},
          {"batch norm: cuDNN vs hsi's kernels (train, backward, eval)", test_bn})
/* apart: not under compute-sanitizer with the suite above (hsi's own runs) */
HSI_SUITE(cuda_conv_commands, HSI_SUITE_NEEDS_CUDA,
          {"bench model --conv and --ops on the device; HSI_CUDNN pointing nowhere", test_commands})

/* ---------------------------------------------- without a device too */

static void test_option(void)
{
    hsi_conv_impl cpu = HSI_CONV_IMPL_GEMM;
    hsi_gpu_conv gpu = HSI_GPU_CONV_GEMM;
    HSI_CHECK_OK(hsi_conv_option(NULL, HSI_DEVICE_CUDA, &cpu, &gpu));
    CU_ASSERT_EQUAL(cpu, HSI_CONV_IMPL_AUTO);
    CU_ASSERT_EQUAL(gpu, HSI_GPU_CONV_AUTO);
    HSI_CHECK_OK(hsi_conv_option("gemm", HSI_DEVICE_CPU, &cpu, &gpu));
    CU_ASSERT_EQUAL(cpu, HSI_CONV_IMPL_GEMM);
    CU_ASSERT_EQUAL(gpu, HSI_GPU_CONV_GEMM);
    HSI_CHECK_OK(hsi_conv_option("direct", HSI_DEVICE_CPU, &cpu, NULL));
    CU_ASSERT_EQUAL(cpu, HSI_CONV_IMPL_DIRECT);
    HSI_CHECK_OK(hsi_conv_option("cudnn", HSI_DEVICE_CUDA, NULL, &gpu));
    CU_ASSERT_EQUAL(gpu, HSI_GPU_CONV_CUDNN);
    HSI_CHECK_OK(hsi_conv_option("cudnn", HSI_DEVICE_AUTO, NULL, NULL)); /* the name only */
    HSI_CHECK_OK(hsi_conv_option("direct", HSI_DEVICE_AUTO, NULL, NULL));
    HSI_CHECK_FAILS(hsi_conv_option("direct", HSI_DEVICE_CUDA, NULL, NULL), HSI_ERR_ARG,
                    "--conv direct runs on the CPU only");
    HSI_CHECK_FAILS(hsi_conv_option("cudnn", HSI_DEVICE_CPU, NULL, NULL), HSI_ERR_ARG,
                    "--conv cudnn runs on the GPU only");
    HSI_CHECK_FAILS(hsi_conv_option("fast", HSI_DEVICE_AUTO, NULL, NULL), HSI_ERR_ARG,
                    "auto, direct, gemm or cudnn (got 'fast')");
}

/* Usage errors (exit status 2) whatever the machine: the device is checked
 * after the options */
static void test_usage(void)
{
    static char out[16384];
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " bench model cnn2d --device cuda --conv direct"), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--conv direct runs on the CPU only"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " bench model cnn2d --device cpu --conv cudnn"), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--conv cudnn runs on the GPU only"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " bench model cnn2d --conv winograd"), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "auto, direct, gemm or cudnn"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " train c.hdr l.hdr --out %s --device cpu "
                                                  "--conv cudnn", hsi_test_tmp("run_conv")), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--conv cudnn runs on the GPU only"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " train c.hdr l.hdr --out %s --device cuda "
                                                  "--conv direct", hsi_test_tmp("run_conv")), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--conv direct runs on the CPU only"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " predict run c.hdr map.hdr --device cuda "
                                                  "--conv direct"), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--conv direct runs on the CPU only"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " eval run c.hdr l.hdr --device cpu "
                                                  "--conv cudnn"), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--conv cudnn runs on the GPU only"));
    /* a CUDA Graph is the GPU's only */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " bench model cnn2d --graph"), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--graph captures the GPU's training step (--device cuda only)"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " train c.hdr l.hdr --out %s --cuda-graph",
                                 hsi_test_tmp("run_graph")), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--cuda-graph captures the GPU's training step: it needs --device cuda"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " train c.hdr l.hdr --out %s --host-patches",
                                 hsi_test_tmp("run_graph")), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--host-patches says where the GPU's training patches are cut"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " predict run c.hdr map.hdr --cuda-graph"), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--cuda-graph runs the model's forward as a CUDA Graph: it needs --device cuda"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " eval run c.hdr l.hdr --device cpu --cuda-graph"), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--cuda-graph runs the model's forward"));
    /* the help says it */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " bench model --help"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--conv auto|direct|gemm|cudnn"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "HSI_CUDNN"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "[--graph]"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " train --help"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--conv auto|direct|gemm|cudnn"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--cuda-graph"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " predict --help"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--conv auto|direct|gemm|cudnn"));
}

/* Without a device: the library says HSI_ERR_NO_CUDA, and --conv cudnn on
 * --device cuda is refused (exit status 1) naming both options and why
 * (with a device, cuda_cudnn's cases run instead). */
static void test_no_device(void)
{
    static char out[16384];
    if (hsi_cuda_device_count() > 0) {
        CU_PASS("a device is here: suite cuda_cudnn checks it");
        return;
    }
    int v = -1;
    CU_ASSERT_EQUAL(hsi_conv_cudnn_available(&v), HSI_ERR_NO_CUDA);
    CU_ASSERT_EQUAL(v, 0);
    CU_ASSERT_EQUAL(hsi_conv_forward_cudnn(NULL, NULL, NULL, NULL, NULL), HSI_ERR_NO_CUDA);
    CU_ASSERT_EQUAL(hsi_conv_backward_cudnn(NULL, NULL, NULL, NULL, NULL, NULL, NULL),
                    HSI_ERR_NO_CUDA);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " bench model cnn2d --device cuda --conv cudnn"), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "hsi bench model: --device cuda --conv cudnn: "));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "CUDA"));
    /* auto on a machine without a device is the CPU, where cudnn is no choice */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " bench model cnn2d --device auto --conv cudnn"), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--conv cudnn runs on the GPU only"));
    /* the GPU's own options go unused when auto becomes the CPU (as
     * predict's do); train.log says where it ran */
    const char *dir = hsi_test_tmp("run_auto_graph");
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " train data_samples/scene.hdr "
                                 "data_samples/scene_gt.hdr --out %s --device auto --cuda-graph "
                                 "--host-patches --epochs 1 --quiet --overwrite", dir), 0);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, "grep -c 'CUDA' %s/train.log", dir), 1); /* none */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, "grep -c 'model cnn2d' %s/train.log", dir), 0);
}

HSI_SUITE(conv_option, 0, {"hsi_conv_option: names and devices", test_option},
          {"--conv usage errors and help", test_usage},
          {"--conv cudnn without a device", test_no_device})

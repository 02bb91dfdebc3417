/* cudnn.cu — cuDNN as an optional backend: 2-D and 3-D float32
 * convolutions and batch norm through cuDNN's legacy API (see
 * models/layers_cuda.h), cuDNN being loaded at run time with dlopen: the
 * plugin never links it and loads where it is absent. The same semantics
 * as the launchers of layers_cuda.cu (im2col + cuBLAS, hsi's batch-norm
 * kernels), which stay the reference. Not a cuDNN wrapper: only what the
 * model's layers need. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_internal.h"
#include "kernels/fastdiv.h"
#include "models/cuda_ops.h"
#include "models/layers_cuda.h"

#if __has_include(<cudnn.h>)
/* the types, enums and prototypes only: every call goes through g_dnn */
#include <cudnn.h>
#define HSI_HAVE_CUDNN 1
#else
#define HSI_HAVE_CUDNN 0
#endif

#define DNN_THREADS 256

#if HSI_HAVE_CUDNN

/* The default library: cuDNN 9's soname (the plugin's RUNPATH, the CUDA
 * toolkit's lib64, is on dlopen's search path from here). */
#define HSI_CUDNN_SONAME "libcudnn.so.9"
/* No algorithm needing more workspace than this is taken. */
#define DNN_WS_CAP ((size_t)1 << 30)

/* ------------------------------------------------ the library, loaded */

#define DNN_FUNCS(X)                                                                               \
    X(cudnnGetVersion)                                                                             \
    X(cudnnGetErrorString)                                                                         \
    X(cudnnCreate)                                                                                 \
    X(cudnnDestroy)                                                                                \
    X(cudnnSetStream)                                                                              \
    X(cudnnCreateTensorDescriptor)                                                                 \
    X(cudnnSetTensorNdDescriptor)                                                                  \
    X(cudnnDestroyTensorDescriptor)                                                                \
    X(cudnnCreateFilterDescriptor)                                                                 \
    X(cudnnSetFilterNdDescriptor)                                                                  \
    X(cudnnDestroyFilterDescriptor)                                                                \
    X(cudnnCreateConvolutionDescriptor)                                                            \
    X(cudnnSetConvolutionNdDescriptor)                                                             \
    X(cudnnSetConvolutionMathType)                                                                 \
    X(cudnnDestroyConvolutionDescriptor)                                                           \
    X(cudnnFindConvolutionForwardAlgorithm)                                                        \
    X(cudnnFindConvolutionBackwardDataAlgorithm)                                                   \
    X(cudnnFindConvolutionBackwardFilterAlgorithm)                                                 \
    X(cudnnGetConvolutionForwardAlgorithm_v7)                                                      \
    X(cudnnGetConvolutionBackwardDataAlgorithm_v7)                                                 \
    X(cudnnGetConvolutionBackwardFilterAlgorithm_v7)                                               \
    X(cudnnGetConvolutionForwardWorkspaceSize)                                                     \
    X(cudnnGetConvolutionBackwardDataWorkspaceSize)                                                \
    X(cudnnGetConvolutionBackwardFilterWorkspaceSize)                                              \
    X(cudnnConvolutionForward)                                                                     \
    X(cudnnConvolutionBackwardData)                                                                \
    X(cudnnConvolutionBackwardFilter)

/* Batch norm's, looked for apart: without them the convolutions still run
 * (hsi_bn_cudnn_available says which is missing). */
#define DNN_BN_FUNCS(X)                                                                            \
    X(cudnnBatchNormalizationForwardTraining)                                                      \
    X(cudnnBatchNormalizationForwardInference)                                                     \
    X(cudnnBatchNormalizationBackward)

/* One pointer per function, of the type cudnn.h declares it with. */
typedef struct dnn_api {
#define X(f) decltype(&::f) f;
    DNN_FUNCS(X)
    DNN_BN_FUNCS(X)
#undef X
} dnn_api;

static dnn_api g_dnn;
static pthread_once_t g_load_once = PTHREAD_ONCE_INIT;
static int g_loaded;          /* 1 when every function resolved */
static char g_load_why[1024]; /* why not, when not */
static int g_version;         /* cudnnGetVersion() */
static int g_fastest;         /* HSI_CUDNN_ALGO=fastest: deterministic or not (pick_algo) */
static char g_bn_why[256];    /* the batch-norm function missing ("" when all are there) */
static pthread_key_t g_handle_key;

/* A thread's handle is destroyed when the thread ends. */
static void handle_release(void *h)
{
    if (h) g_dnn.cudnnDestroy((cudnnHandle_t)h);
}

/* HSI_CUDNN when set (and nothing else then: a wrong path is an error, not
 * a reason to take another cuDNN), else the soname. */
static void dnn_load(void)
{
    g_fastest = hsi_cudnn_algo_fastest();
    if (g_fastest < 0) {
        snprintf(g_load_why, sizeof g_load_why,
                 "HSI_CUDNN_ALGO=%s: expected deterministic (the default) or fastest",
                 getenv("HSI_CUDNN_ALGO"));
        return;
    }
    const char *env = getenv("HSI_CUDNN");
    const int from_env = env && *env;
    const char *path = from_env ? env : HSI_CUDNN_SONAME;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(g_load_why, sizeof g_load_why, "cannot load %s%s (dlopen: %s)%s",
                 from_env ? "HSI_CUDNN=" : "", path, e ? e : "unknown reason",
                 from_env ? "" : "; install cuDNN 9 or set HSI_CUDNN to the path of libcudnn.so.9");
        return;
    }
#define X(f)                                                                                       \
    g_dnn.f = reinterpret_cast<decltype(g_dnn.f)>(dlsym(h, #f));                                  \
    if (!g_dnn.f) {                                                                                \
        snprintf(g_load_why, sizeof g_load_why,                                                    \
                 "%s has no %s: cuDNN 9 with its legacy convolution API is needed", path, #f);     \
        dlclose(h);                                                                                \
        return;                                                                                    \
    }
    DNN_FUNCS(X)
#undef X
#define X(f)                                                                                       \
    g_dnn.f = reinterpret_cast<decltype(g_dnn.f)>(dlsym(h, #f));                                  \
    if (!g_dnn.f && !g_bn_why[0])                                                                  \
        snprintf(g_bn_why, sizeof g_bn_why, "%s has no %s (cuDNN's batch norm)", path, #f);
    DNN_BN_FUNCS(X)
#undef X
    size_t v = g_dnn.cudnnGetVersion();
    /* cuDNN 9 numbers its versions major * 10000 + minor * 100 + patch */
    if (v / 10000 != CUDNN_MAJOR) {
        snprintf(g_load_why, sizeof g_load_why,
                 "%s is cuDNN version %zu; this plugin was built for cuDNN %d (%d.%d.%d)", path, v,
                 CUDNN_MAJOR, CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
        dlclose(h);
        return;
    }
    if (pthread_key_create(&g_handle_key, handle_release) != 0) {
        snprintf(g_load_why, sizeof g_load_why, "cuDNN: no thread key left for its handles");
        dlclose(h);
        return;
    }
    g_version = (int)v;
    g_loaded = 1;
}

/* This thread's handle for the current device, bound to this thread's
 * stream. Loads cuDNN first (once). */
static __thread cudnnHandle_t t_handle;
static __thread int t_handle_device = -1;

static hsi_status dnn_handle(cudnnHandle_t *out, const char *what)
{
    HSI_CU_TRY(hsi_cuda_require(what));
    pthread_once(&g_load_once, dnn_load);
    if (!g_loaded) return hsi_fail(HSI_ERR_NOT_FOUND, "%s: %s", what, g_load_why);
    int dev = 0;
    HSI_CU_RET(cudaGetDevice(&dev), what);
    if (t_handle && t_handle_device != dev) { /* the thread moved to another device */
        g_dnn.cudnnDestroy(t_handle);
        t_handle = NULL;
        pthread_setspecific(g_handle_key, NULL);
    }
    if (!t_handle) {
        cudnnStatus_t e = g_dnn.cudnnCreate(&t_handle);
        if (e != CUDNN_STATUS_SUCCESS) {
            t_handle = NULL;
            return hsi_fail(HSI_ERR_CUDA, "%s: cudnnCreate failed: %s", what,
                            g_dnn.cudnnGetErrorString(e));
        }
        t_handle_device = dev;
        pthread_setspecific(g_handle_key, t_handle);
    }
    cudnnStatus_t e = g_dnn.cudnnSetStream(t_handle, hsi_cu_stream());
    if (e != CUDNN_STATUS_SUCCESS)
        return hsi_fail(HSI_ERR_CUDA, "%s: cudnnSetStream: %s", what, g_dnn.cudnnGetErrorString(e));
    *out = t_handle;
    return HSI_OK;
}

/* ------------------------------------------------------------ geometry */

/* "2-D, x (N, C, H, W) = (128, 30, 11, 11), w (64, 30, 3, 3), stride 1x1,
 * pad 0x0": what a failure names */
static const char *geom_text(char *s, size_t n, const hsi_conv_dims *d)
{
    char in[64] = "", ker[64] = "", st[32] = "", pd[32] = "";
    for (int i = 0; i < d->nd; i++) {
        const char *sep = i ? ", " : "", *x = i ? "x" : "";
        size_t a = strlen(in), b = strlen(ker), c = strlen(st), e = strlen(pd);
        snprintf(in + a, sizeof in - a, "%s%d", sep, d->in[i]);
        snprintf(ker + b, sizeof ker - b, "%s%d", sep, d->ker[i]);
        snprintf(st + c, sizeof st - c, "%s%d", x, d->stride[i]);
        snprintf(pd + e, sizeof pd - e, "%s%d", x, d->pad[i]);
    }
    snprintf(s, n, "%d-D, x (%d, %d, %s), w (%d, %d, %s), stride %s, pad %s", d->nd, d->n, d->c,
             in, d->k, d->c, ker, st, pd);
    return s;
}

/* HSI_ERR_CUDA "<op> (cuDNN, <geometry>): cuDNN <message> (<function>)" */
static hsi_status dnn_fail(const char *op, const hsi_conv_dims *d, const char *fn, cudnnStatus_t e)
{
    char g[256];
    return hsi_fail(HSI_ERR_CUDA, "%s (cuDNN, %s): %s (%s)", op, geom_text(g, sizeof g, d),
                    g_dnn.cudnnGetErrorString(e), fn);
}

/* Calls g_dnn.f; on failure sets st (naming op, d and f) and jumps to cleanup. */
#define DNN_TRY(f, args)                                                                           \
    do {                                                                                           \
        cudnnStatus_t e_ = g_dnn.f args;                                                           \
        if (e_ != CUDNN_STATUS_SUCCESS) {                                                          \
            st = dnn_fail(op, d, #f, e_);                                                          \
            goto cleanup;                                                                          \
        }                                                                                          \
    } while (0)

/* A status-returning call inside a function with `st` and `cleanup:` */
#define DNN_CALL(expr)                                                                             \
    do {                                                                                           \
        if ((st = (expr)) != HSI_OK) goto cleanup;                                                 \
    } while (0)

/* The bias added after the forward (one kernel), queued on this thread's stream */
static hsi_status dnn_bias_add(float *y, const float *b, int64_t K, int64_t OS, int64_t total);

/* The descriptors of one convolution: x (N, C, [D,] H, W) and y (N, K,
 * [oD,] oH, oW) packed, w (K, C, [kD,] kH, kW), cross-correlation (as
 * PyTorch's and the im2col path's) with no dilation, FP32 with FP32 FMA
 * math only. Made at each call (host work only, microseconds). */
typedef struct dnn_desc {
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
} dnn_desc;

static void desc_free(dnn_desc *D)
{
    if (D->x) g_dnn.cudnnDestroyTensorDescriptor(D->x);
    if (D->y) g_dnn.cudnnDestroyTensorDescriptor(D->y);
    if (D->w) g_dnn.cudnnDestroyFilterDescriptor(D->w);
    if (D->conv) g_dnn.cudnnDestroyConvolutionDescriptor(D->conv);
    memset(D, 0, sizeof *D);
}

/* packed strides of an nb-dim tensor */
static void packed_strides(int *s, const int *dims, int nb)
{
    s[nb - 1] = 1;
    for (int i = nb - 2; i >= 0; i--) s[i] = s[i + 1] * dims[i + 1];
}

static hsi_status desc_make(dnn_desc *D, const hsi_conv_dims *d, const char *op)
{
    hsi_status st = HSI_OK;
    const int nb = d->nd + 2;
    int xd[5] = {d->n, d->c}, yd[5] = {d->n, d->k}, wd[5] = {d->k, d->c}, xs[5], ys[5];
    int one[3] = {1, 1, 1};
    for (int i = 0; i < d->nd; i++) xd[2 + i] = d->in[i], yd[2 + i] = d->out[i], wd[2 + i] = d->ker[i];
    packed_strides(xs, xd, nb);
    packed_strides(ys, yd, nb);
    memset(D, 0, sizeof *D);
    DNN_TRY(cudnnCreateTensorDescriptor, (&D->x));
    DNN_TRY(cudnnCreateTensorDescriptor, (&D->y));
    DNN_TRY(cudnnCreateFilterDescriptor, (&D->w));
    DNN_TRY(cudnnCreateConvolutionDescriptor, (&D->conv));
    DNN_TRY(cudnnSetTensorNdDescriptor, (D->x, CUDNN_DATA_FLOAT, nb, xd, xs));
    DNN_TRY(cudnnSetTensorNdDescriptor, (D->y, CUDNN_DATA_FLOAT, nb, yd, ys));
    DNN_TRY(cudnnSetFilterNdDescriptor, (D->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, nb, wd));
    DNN_TRY(cudnnSetConvolutionNdDescriptor, (D->conv, d->nd, d->pad, d->stride, one,
                                              CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    DNN_TRY(cudnnSetConvolutionMathType, (D->conv, CUDNN_FMA_MATH));
cleanup:
    if (st != HSI_OK) desc_free(D);
    return st;
}

/* ------------------------------------------------- algorithms per geometry */

/* The algorithms of one geometry on one device, chosen once and kept for
 * the life of the process: cuDNN times every algorithm
 * (cudnnFind*Algorithm, on buffers it allocates itself: the Find*Ex
 * variants would overwrite the outputs that the backward accumulates
 * into), and the fastest deterministic one is taken. cuDNN's heuristic
 * order (cudnnGet*Algorithm_v7) is the fallback when timing fails (no
 * memory for its buffers): with it alone HybridSN trained at half the
 * im2col path's speed (H200, cuDNN 9.14). Each run's results do not depend
 * on scheduling; two runs may time two algorithms of close speed in
 * another order and then differ in the last bits. */
typedef struct dnn_plan {
    int key[18]; /* device, nd, n, c, k, then in, ker, stride, pad per axis */
    int have_fwd, have_bwd;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    size_t fwd_ws, bwd_data_ws, bwd_filter_ws;
} dnn_plan;

static pthread_mutex_t g_plan_lock = PTHREAD_MUTEX_INITIALIZER;
static dnn_plan *g_plans;
static int64_t g_n_plans, g_cap_plans;

static void plan_key(int *key, const hsi_conv_dims *d, int dev)
{
    memset(key, 0, sizeof(int) * 18);
    key[0] = dev, key[1] = d->nd, key[2] = d->n, key[3] = d->c, key[4] = d->k;
    for (int i = 0; i < d->nd; i++) {
        key[5 + 4 * i] = d->in[i], key[6 + 4 * i] = d->ker[i];
        key[7 + 4 * i] = d->stride[i], key[8 + 4 * i] = d->pad[i];
    }
}

/* *p = the cached plan of p->key, if any (copied out under the lock) */
static void plan_lookup(dnn_plan *p)
{
    pthread_mutex_lock(&g_plan_lock);
    for (int64_t i = 0; i < g_n_plans; i++)
        if (!memcmp(g_plans[i].key, p->key, sizeof p->key)) {
            *p = g_plans[i];
            break;
        }
    pthread_mutex_unlock(&g_plan_lock);
}

/* Merges p into the cache (a lost allocation only costs a new choice
 * later) and takes the cache's entry back: two threads that chose at once
 * both run the plan stored first (its workspace size, which a graph
 * capture's scratch was measured with, and its bits). */
static void plan_store(dnn_plan *p)
{
    pthread_mutex_lock(&g_plan_lock);
    int64_t i = 0;
    while (i < g_n_plans && memcmp(g_plans[i].key, p->key, sizeof p->key)) i++;
    if (i == g_n_plans && g_n_plans == g_cap_plans) {
        int64_t nc = g_cap_plans ? 2 * g_cap_plans : 32;
        dnn_plan *np = (dnn_plan *)realloc(g_plans, sizeof *np * (size_t)nc);
        if (np) g_plans = np, g_cap_plans = nc;
    }
    if (i < g_n_plans) {
        dnn_plan *q = &g_plans[i];
        if (p->have_fwd && !q->have_fwd)
            q->have_fwd = 1, q->fwd = p->fwd, q->fwd_ws = p->fwd_ws;
        if (p->have_bwd && !q->have_bwd)
            q->have_bwd = 1, q->bwd_data = p->bwd_data, q->bwd_filter = p->bwd_filter,
            q->bwd_data_ws = p->bwd_data_ws, q->bwd_filter_ws = p->bwd_filter_ws;
        *p = *q;
    } else if (g_n_plans < g_cap_plans) {
        g_plans[g_n_plans++] = *p;
    }
    pthread_mutex_unlock(&g_plan_lock);
}

/* Index of the entry to take among n perf results in cuDNN's order (the
 * fastest first): the first that works without tensor-core math
 * (TF32) within the workspace cap and is deterministic; when none is
 * deterministic, the first that works (its results may then vary with the
 * scheduling of its atomics in the last bits). HSI_CUDNN_ALGO=fastest: the
 * first that works, deterministic or not (PyTorch's cudnn.benchmark
 * choice). -1 when none works. */
template <typename Perf> static int pick_algo(const Perf *perf, int n)
{
    int any = -1;
    for (int i = 0; i < n; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > DNN_WS_CAP ||
            perf[i].mathType == CUDNN_TENSOR_OP_MATH ||
            perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
            continue;
        if (g_fastest || perf[i].determinism == CUDNN_DETERMINISTIC) return i;
        if (any < 0) any = i;
    }
    return any;
}

/* The forward (fwd) or the two backward algorithms of d, chosen now if not
 * yet: p->key must be set; D: d's descriptors. */
static hsi_status plan_get(dnn_plan *p, cudnnHandle_t h, const dnn_desc *D,
                           const hsi_conv_dims *d, int fwd, const char *op)
{
    hsi_status st = HSI_OK;
    char g[256];
    int got = 0, i;
    plan_lookup(p);
    if (fwd && !p->have_fwd) {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        if (g_dnn.cudnnFindConvolutionForwardAlgorithm(h, D->x, D->w, D->conv, D->y,
                                                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got,
                                                       perf) != CUDNN_STATUS_SUCCESS ||
            pick_algo(perf, got) < 0)
            DNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7,
                    (h, D->x, D->w, D->conv, D->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf));
        if ((i = pick_algo(perf, got)) < 0) goto none;
        p->fwd = perf[i].algo;
        DNN_TRY(cudnnGetConvolutionForwardWorkspaceSize,
                (h, D->x, D->w, D->conv, D->y, p->fwd, &p->fwd_ws));
        p->have_fwd = 1;
        plan_store(p);
    }
    if (!fwd && !p->have_bwd) {
        cudnnConvolutionBwdDataAlgoPerf_t pd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        cudnnConvolutionBwdFilterAlgoPerf_t pf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        if (g_dnn.cudnnFindConvolutionBackwardDataAlgorithm(h, D->w, D->y, D->conv, D->x,
                                                            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                                            &got, pd) != CUDNN_STATUS_SUCCESS ||
            pick_algo(pd, got) < 0)
            DNN_TRY(cudnnGetConvolutionBackwardDataAlgorithm_v7,
                    (h, D->w, D->y, D->conv, D->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, pd));
        if ((i = pick_algo(pd, got)) < 0) goto none;
        p->bwd_data = pd[i].algo;
        if (g_dnn.cudnnFindConvolutionBackwardFilterAlgorithm(
                h, D->x, D->y, D->conv, D->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, pf) !=
                CUDNN_STATUS_SUCCESS ||
            pick_algo(pf, got) < 0)
            DNN_TRY(cudnnGetConvolutionBackwardFilterAlgorithm_v7,
                    (h, D->x, D->y, D->conv, D->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, pf));
        if ((i = pick_algo(pf, got)) < 0) goto none;
        p->bwd_filter = pf[i].algo;
        DNN_TRY(cudnnGetConvolutionBackwardDataWorkspaceSize,
                (h, D->w, D->y, D->conv, D->x, p->bwd_data, &p->bwd_data_ws));
        DNN_TRY(cudnnGetConvolutionBackwardFilterWorkspaceSize,
                (h, D->x, D->y, D->conv, D->w, p->bwd_filter, &p->bwd_filter_ws));
        p->have_bwd = 1;
        plan_store(p);
    }
    return HSI_OK;
none:
    return hsi_fail(HSI_ERR_UNSUPPORTED,
                    "%s (cuDNN, %s): cuDNN offers no FP32 algorithm without tensor cores within "
                    "%zu MiB of workspace (use the gemm convolutions)",
                    op, geom_text(g, sizeof g, d), DNN_WS_CAP >> 20);
cleanup:
    return st;
}

/* The start of a call: a device, cuDNN, the handle, d within int sizes, the
 * descriptors and the plan. */
static hsi_status dnn_begin(cudnnHandle_t *h, dnn_desc *D, dnn_plan *p, const hsi_conv_dims *d,
                            int fwd, const char *op)
{
    hsi_status st = HSI_OK;
    int dev = 0;
    char g[256];
    memset(D, 0, sizeof *D);
    HSI_TRY(dnn_handle(h, op));
    if (!hsi_conv_cudnn_fits(d)) {
        st = hsi_fail(HSI_ERR_UNSUPPORTED, "%s (cuDNN, %s): a tensor of 2^31 elements or more "
                                           "exceeds cuDNN's int sizes (use the gemm convolutions)",
                      op, geom_text(g, sizeof g, d));
        goto cleanup;
    }
    if (cudaGetDevice(&dev) != cudaSuccess) cudaGetLastError();
    memset(p, 0, sizeof *p);
    plan_key(p->key, d, dev);
    HSI_TRY(desc_make(D, d, op));
    HSI_TRY(plan_get(p, *h, D, d, fwd, op));
cleanup:
    if (st != HSI_OK) desc_free(D);
    return st;
}

/* ------------------------------------------------------------ bias kernels */

/* y (N, K, OS) += b[k], flat; k by two fastdivs (no 64-bit division per
 * element): y has fewer than 2^31 elements (dnn_begin checked it) */
__global__ void dnn_bias_add_kernel(float *y, const float *b, hsi_fastdiv osd, hsi_fastdiv kd,
                                    uint32_t total)
{
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        uint32_t row = hsi_fastdiv_q(osd, i);
        y[i] += b[row - hsi_fastdiv_q(kd, row) * kd.d];
    }
}

static hsi_status dnn_bias_add(float *y, const float *b, int64_t K, int64_t OS, int64_t total)
{
    dnn_bias_add_kernel<<<hsi_cu_blocks(total, DNN_THREADS), DNN_THREADS, 0, hsi_cu_stream()>>>(
        y, b, hsi_fastdiv_make((uint32_t)OS), hsi_fastdiv_make((uint32_t)K), (uint32_t)total);
    HSI_CU_LAUNCHED("conv forward (cuDNN): bias");
    return HSI_OK;
}


static int64_t out_spatial(const hsi_conv_dims *d)
{
    int64_t s = 1;
    for (int i = 0; i < d->nd; i++) s *= d->out[i];
    return s;
}

/* ------------------------------------------------------------ entry points */

extern "C" hsi_status hsi_conv_cudnn_available(int *version)
{
    const char *op = "cuDNN";
    hsi_status st = HSI_OK;
    cudnnHandle_t h;
    dnn_desc D;
    dnn_plan p;
    hsi_conv_dims d;
    if (version) *version = 0;
    HSI_CU_TRY(dnn_handle(&h, op));
    /* one forward choice for a 1x1 convolution of a 3x3 input: cuDNN 9
     * loads its convolution sub-libraries on first use, and a missing one
     * is better found here than in the middle of a training step */
    memset(&d, 0, sizeof d);
    d.nd = 2, d.n = d.c = d.k = 1;
    for (int i = 0; i < 2; i++) d.in[i] = d.out[i] = 3, d.ker[i] = d.stride[i] = 1;
    HSI_CU_TRY(dnn_begin(&h, &D, &p, &d, 1, op));
    desc_free(&D);
    if (version) *version = g_version;
    return st;
}

extern "C" hsi_status hsi_conv_forward_cudnn(float *y, const float *x, const float *w,
                                             const float *b, const hsi_conv_dims *d)
{
    const char *op = "conv forward";
    hsi_status st = HSI_OK;
    cudnnHandle_t h;
    dnn_desc D;
    dnn_plan p;
    void *ws = NULL;
    const float one = 1.0f, zero = 0.0f;
    HSI_TRY(dnn_begin(&h, &D, &p, d, 1, op));
    if (p.fwd_ws) DNN_CALL(hsi_cuda_malloc(&ws, p.fwd_ws));
    /* y = 1 * conv(x, w) + 0 * y */
    DNN_TRY(cudnnConvolutionForward, (h, &one, D.x, x, D.w, w, D.conv, p.fwd, ws, p.fwd_ws, &zero,
                                      D.y, y));
    if (b) {
        int64_t OS = out_spatial(d);
        DNN_CALL(dnn_bias_add(y, b, d->k, OS, (int64_t)d->n * d->k * OS));
    }
cleanup:
    hsi_cuda_free(ws); /* stream-ordered: the block is reused after this work */
    desc_free(&D);
    return st;
}

extern "C" hsi_status hsi_conv_backward_cudnn(float *dx, float *dw, float *db, const float *dy,
                                              const float *x, const float *w,
                                              const hsi_conv_dims *d)
{
    const char *op = "conv backward";
    hsi_status st = HSI_OK;
    cudnnHandle_t h;
    dnn_desc D;
    dnn_plan p;
    void *ws = NULL;
    size_t wsb = 0;
    const float one = 1.0f;
    HSI_TRY(dnn_begin(&h, &D, &p, d, 0, op));
    /* the im2col path's own sum: the same bits for db on both */
    if (db) DNN_CALL(hsi_cu_conv_db(db, dy, d->n, d->k, out_spatial(d), "conv backward (cuDNN): bias gradient"));
    /* one workspace for both calls (they run in stream order) */
    if (dw) wsb = p.bwd_filter_ws;
    if (dx && p.bwd_data_ws > wsb) wsb = p.bwd_data_ws;
    if (wsb) DNN_CALL(hsi_cuda_malloc(&ws, wsb));
    /* beta = 1: cuDNN blends the result into what is there (accumulates) */
    if (dw)
        DNN_TRY(cudnnConvolutionBackwardFilter, (h, &one, D.x, x, D.y, dy, D.conv, p.bwd_filter,
                                                 ws, p.bwd_filter_ws, &one, D.w, dw));
    if (dx)
        DNN_TRY(cudnnConvolutionBackwardData, (h, &one, D.w, w, D.y, dy, D.conv, p.bwd_data, ws,
                                               p.bwd_data_ws, &one, D.x, dx));
cleanup:
    hsi_cuda_free(ws);
    desc_free(&D);
    return st;
}

/* ------------------------------------------------------------ batch norm */

extern "C" hsi_status hsi_bn_cudnn_available(void)
{
    cudnnHandle_t h;
    HSI_CU_TRY(dnn_handle(&h, "batch norm (cuDNN)"));
    if (g_bn_why[0]) return hsi_fail(HSI_ERR_NOT_FOUND, "batch norm (cuDNN): %s", g_bn_why);
    return HSI_OK;
}

/* x (N, C, S) as cuDNN's (N, C, S, 1) and the per-channel (1, C, 1, 1) */
typedef struct bn_desc {
    cudnnTensorDescriptor_t x, p;
} bn_desc;

static void bn_desc_free(bn_desc *D)
{
    if (D->x) g_dnn.cudnnDestroyTensorDescriptor(D->x);
    if (D->p) g_dnn.cudnnDestroyTensorDescriptor(D->p);
    memset(D, 0, sizeof *D);
}

/* HSI_ERR_CUDA "<op> (cuDNN, x (N, C, S)): <cuDNN's message> (<function>)" */
static hsi_status bn_fail(const char *op, int n, int c, int64_t s, const char *fn, cudnnStatus_t e)
{
    return hsi_fail(HSI_ERR_CUDA, "%s (cuDNN, x (%d, %d, %lld)): %s (%s)", op, n, c, (long long)s,
                    g_dnn.cudnnGetErrorString(e), fn);
}

#define BN_TRY(f, args)                                                                            \
    do {                                                                                           \
        cudnnStatus_t e_ = g_dnn.f args;                                                           \
        if (e_ != CUDNN_STATUS_SUCCESS) {                                                          \
            st = bn_fail(op, n, c, s, #f, e_);                                                     \
            goto cleanup;                                                                          \
        }                                                                                          \
    } while (0)

/* 1 when cuDNN takes a batch norm of (n, c, s) with eps (else hsi's kernels:
 * one value per channel too, whose unbiased variance hsi's kernels and the
 * CPU take as the biased one, 0, where cuDNN's divides by n * s - 1 = 0) */
static int bn_fits(int n, int c, int64_t s, float eps)
{
    return n >= 1 && c >= 1 && s >= 1 && (int64_t)n * s > 1 &&
           (double)eps >= CUDNN_BN_MIN_EPSILON && (int64_t)n * c * s <= INT32_MAX;
}

static hsi_status bn_begin(cudnnHandle_t *h, bn_desc *D, int n, int c, int64_t s, const char *op)
{
    hsi_status st = HSI_OK;
    int xd[4] = {n, c, (int)s, 1}, xs[4] = {c * (int)s, (int)s, 1, 1};
    int pd[4] = {1, c, 1, 1}, ps[4] = {c, 1, 1, 1};
    memset(D, 0, sizeof *D);
    HSI_TRY(dnn_handle(h, op));
    if (g_bn_why[0]) {
        st = hsi_fail(HSI_ERR_NOT_FOUND, "%s: %s", op, g_bn_why);
        goto cleanup;
    }
    BN_TRY(cudnnCreateTensorDescriptor, (&D->x));
    BN_TRY(cudnnCreateTensorDescriptor, (&D->p));
    BN_TRY(cudnnSetTensorNdDescriptor, (D->x, CUDNN_DATA_FLOAT, 4, xd, xs));
    BN_TRY(cudnnSetTensorNdDescriptor, (D->p, CUDNN_DATA_FLOAT, 4, pd, ps));
cleanup:
    if (st != HSI_OK) bn_desc_free(D);
    return st;
}

extern "C" hsi_status hsi_bn_forward_cudnn(float *y, float *save_mean, float *save_invstd,
                                           float *running_mean, float *running_var, const float *x,
                                           const float *gamma, const float *beta, int n, int c,
                                           int64_t s, float eps, float momentum, int training)
{
    const char *op = "batch norm forward";
    hsi_status st = HSI_OK;
    cudnnHandle_t h;
    bn_desc D;
    const float one = 1.0f, zero = 0.0f;
    if (!bn_fits(n, c, s, eps) || !gamma || !beta || (!training && (!running_mean || !running_var)) ||
        (!save_mean != !save_invstd) || (!running_mean != !running_var))
        return hsi_bn_forward_cuda(y, save_mean, save_invstd, running_mean, running_var, x, gamma,
                                   beta, n, c, s, eps, momentum, training);
    HSI_TRY(bn_begin(&h, &D, n, c, s, op));
    if (training) /* running = (1 - momentum) running + momentum batch (unbiased variance) */
        BN_TRY(cudnnBatchNormalizationForwardTraining,
               (h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, D.x, x, D.x, y, D.p, gamma, beta,
                (double)momentum, running_mean, running_var, (double)eps, save_mean, save_invstd));
    else
        BN_TRY(cudnnBatchNormalizationForwardInference,
               (h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, D.x, x, D.x, y, D.p, gamma, beta,
                running_mean, running_var, (double)eps));
cleanup:
    bn_desc_free(&D);
    return st;
}

extern "C" hsi_status hsi_bn_backward_cudnn(float *dx, float *dgamma, float *dbeta, const float *dy,
                                            const float *x, const float *gamma,
                                            const float *save_mean, const float *save_invstd,
                                            int n, int c, int64_t s, float eps, int training)
{
    const char *op = "batch norm backward";
    hsi_status st = HSI_OK;
    cudnnHandle_t h;
    bn_desc D;
    const float one = 1.0f;
    if (!bn_fits(n, c, s, eps) || !training || !dx || !gamma || !dgamma || !dbeta)
        return hsi_bn_backward_cuda(dx, dgamma, dbeta, dy, x, gamma, save_mean, save_invstd, n, c,
                                    s, training);
    HSI_TRY(bn_begin(&h, &D, n, c, s, op));
    /* alpha 1, beta 1 for the data and the parameters: dx, dgamma and
     * dbeta accumulate, as the other paths do */
    BN_TRY(cudnnBatchNormalizationBackward,
           (h, CUDNN_BATCHNORM_SPATIAL, &one, &one, &one, &one, D.x, x, D.x, dy, D.x, dx, D.p, gamma,
            dgamma, dbeta, (double)eps, save_mean, save_invstd));
cleanup:
    bn_desc_free(&D);
    return st;
}

#else /* no cudnn.h where the plugin was built */

static hsi_status no_cudnn(const char *op)
{
    HSI_CU_TRY(hsi_cuda_require(op));
    return hsi_fail(HSI_ERR_NOT_FOUND, "%s: this CUDA plugin was built without cudnn.h (cuDNN's "
                                       "headers were not under the CUDA toolkit)", op);
}

extern "C" hsi_status hsi_conv_cudnn_available(int *version)
{
    if (version) *version = 0;
    return no_cudnn("cuDNN");
}

extern "C" hsi_status hsi_conv_forward_cudnn(float *y, const float *x, const float *w,
                                             const float *b, const hsi_conv_dims *d)
{
    return no_cudnn("conv forward (cuDNN)");
}

extern "C" hsi_status hsi_conv_backward_cudnn(float *dx, float *dw, float *db, const float *dy,
                                              const float *x, const float *w,
                                              const hsi_conv_dims *d)
{
    return no_cudnn("conv backward (cuDNN)");
}

extern "C" hsi_status hsi_bn_cudnn_available(void) { return no_cudnn("batch norm (cuDNN)"); }

extern "C" hsi_status hsi_bn_forward_cudnn(float *y, float *save_mean, float *save_invstd,
                                           float *running_mean, float *running_var, const float *x,
                                           const float *gamma, const float *beta, int n, int c,
                                           int64_t s, float eps, float momentum, int training)
{
    return no_cudnn("batch norm forward (cuDNN)");
}

extern "C" hsi_status hsi_bn_backward_cudnn(float *dx, float *dgamma, float *dbeta, const float *dy,
                                            const float *x, const float *gamma,
                                            const float *save_mean, const float *save_invstd,
                                            int n, int c, int64_t s, float eps, int training)
{
    return no_cudnn("batch norm backward (cuDNN)");
}

#endif

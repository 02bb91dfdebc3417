/* fused_cuda.cu — the fused select -> normalise -> project pass on the GPU
 * (see hsi_fused_run_cuda in kernels/cuda.h). Per tile of lines: with PCA
 * (up to 64 components, no l2) one kernel normalises and projects each
 * pixel straight into the output layout (fused_proj); else one kernel turns
 * raw elements into normalised float features (one thread per pixel, bands
 * in the selection's order) and, with PCA, one cuBLAS sgemm projects them
 * on the whitened components. Float32 throughout, like the CPU pass. Also
 * the PCA covariance (hsi_covariance_cuda). Not the statistics or the
 * eigendecomposition. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/threads.h"
#include "kernels/cuda_internal.h"
#include "kernels/kern_internal.h"

#define FUSED_THREADS 256

/* Per-band coefficients in float, computed as the CPU loader does:
 * y = sc*(x - ce) + of; with l2: y = y * (1/|y|) - su. */
typedef struct fused_coef {
    const int64_t *bands;
    const float *sc, *ce, *of, *su, *fl;
} fused_coef;

/* Pixel p of the tile (p = line * n_samples + sample) -> X[p*xs_p + j*xs_j]
 * for the nf selected bands. */
template <typename LD>
__global__ void fused_prep(float *X, int64_t xs_p, int64_t xs_j, hsi_cu_cube c, fused_coef k,
                           int64_t nf, int has_fill, int has_ig, float ig, int l2)
{
    int64_t npix = c.n_lines * c.n_samples;
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < npix;
         p += (int64_t)gridDim.x * blockDim.x) {
        int64_t l = p / c.n_samples, s = p - l * c.n_samples;
        const unsigned char *px = c.base + l * c.sl + s * c.ss;
        float *xo = X + p * xs_p;
        float acc = 0.0f;
        for (int64_t j = 0; j < nf; j++) {
            float x = LD::get(px + k.bands[j] * c.sb, c.dtype, c.swapped);
            if (has_fill && (x != x || (has_ig && x == ig))) x = k.fl[j];
            float y = k.sc[j] * (x - k.ce[j]) + k.of[j];
            acc += y * y;
            xo[j * xs_j] = y;
        }
        if (l2) {
            float r = acc > 0.0f ? (float)(1.0 / sqrt((double)acc)) : 0.0f;
            for (int64_t j = 0; j < nf; j++) xo[j * xs_j] = xo[j * xs_j] * r - k.su[j];
        }
    }
}

/* The normalisation and the projection in one kernel (no l2): one thread
 * per pixel normalises each selected band as fused_prep does and adds it,
 * times the band's row of W, into KC float accumulators (bands in order;
 * the next band's element is loaded before this one's multiply-adds), then
 * writes the k <= KC components to C[p*cs_p + c*cs_j]. W (nf x KC,
 * zero-padded), the band coefficients {scale, centre, offset, fill} and the
 * band offsets sit in shared memory; the grid strides over the pixels so
 * each block loads them once. The band offsets come last and run on past
 * band nf with zeros to a whole 16 bytes (FX_NOFF): ptxas may load
 * boff[j + 1] with boff[j], one 16-byte load, before it tests j + 1 < nf
 * (2043ee2's two-pixel kernel did in its fx_any instances: for an odd nf,
 * 8 bytes past the allocation, compute-sanitizer's out-of-bounds shared
 * read on float64 cubes; the value went unused). */
#define FX_THREADS 256
#define FX_NOFF(nf) (((nf) | 1) + 1) /* band offsets stored: even, > nf */
template <typename LD, int KC>
__global__ void __launch_bounds__(FX_THREADS)
fused_proj(float *C, int64_t cs_p, int64_t cs_j, hsi_cu_cube c, fused_coef k, const float *W,
           int nf, int kc, int has_fill, int has_ig, float ig)
{
    extern __shared__ float4 fx_sh4[];
    float4 *co = fx_sh4;                      /* (nf): sc, ce, of, fl */
    float *w = (float *)(co + nf);            /* (nf, KC) */
    int64_t *boff = (int64_t *)(w + nf * KC); /* (FX_NOFF(nf)); nf * KC is a multiple of 8 */
    for (int i = threadIdx.x; i < nf * KC; i += blockDim.x) {
        int j = i / KC, q = i - j * KC;
        w[i] = q < kc ? W[(int64_t)q * nf + j] : 0.0f;
    }
    for (int j = threadIdx.x; j < nf; j += blockDim.x) {
        co[j] = make_float4(k.sc[j], k.ce[j], k.of[j], k.fl[j]);
        boff[j] = k.bands[j] * c.sb;
    }
    for (int j = nf + threadIdx.x; j < FX_NOFF(nf); j += blockDim.x) boff[j] = 0;
    __syncthreads();
    const int64_t npix = c.n_lines * c.n_samples;
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < npix;
         p += (int64_t)gridDim.x * blockDim.x) {
        int64_t l = p / c.n_samples, s = p - l * c.n_samples;
        const unsigned char *px = c.base + l * c.sl + s * c.ss;
        float acc[KC];
#pragma unroll
        for (int q = 0; q < KC; q++) acc[q] = 0.0f;
        float xn = LD::get(px + boff[0], c.dtype, c.swapped);
        for (int j = 0; j < nf; j++) {
            float x = xn;
            if (j + 1 < nf) xn = LD::get(px + boff[j + 1], c.dtype, c.swapped);
            const float4 cf = co[j];
            if (has_fill && (x != x || (has_ig && x == ig))) x = cf.w;
            const float y = cf.x * (x - cf.y) + cf.z;
            const float4 *wr = (const float4 *)(w + j * KC);
#pragma unroll
            for (int q = 0; q < KC / 4; q++) {
                const float4 v = wr[q];
                acc[4 * q] = fmaf(v.x, y, acc[4 * q]);
                acc[4 * q + 1] = fmaf(v.y, y, acc[4 * q + 1]);
                acc[4 * q + 2] = fmaf(v.z, y, acc[4 * q + 2]);
                acc[4 * q + 3] = fmaf(v.w, y, acc[4 * q + 3]);
            }
        }
        float *o = C + p * cs_p;
#pragma unroll
        for (int q = 0; q < KC; q++)
            if (q < kc) o[q * cs_j] = acc[q];
    }
}

/* Shared bytes of fused_proj for nf bands and KC accumulators. */
static size_t fx_shared_bytes(int64_t nf, int kc_pad)
{
    return sizeof(float) * (size_t)(4 * nf + nf * kc_pad) + sizeof(int64_t) * (size_t)FX_NOFF(nf);
}

/* The accumulators fused_proj uses for k components (0: k too large). */
static int fx_kc(int64_t k) { return k <= 8 ? 8 : k <= 16 ? 16 : k <= 32 ? 32 : k <= 64 ? 64 : 0; }

template <typename LD, int KC>
static hsi_status fx_launch_kc(float *C, int64_t cs_p, int64_t cs_j, const hsi_cu_cube &dc,
                               const fused_coef &coef, const float *W, int64_t nf, int64_t k,
                               int has_fill, int has_ig, float ig, size_t shb)
{
    const char *what = "fused pass (CUDA): projection kernel";
    if (shb > 48 * 1024)
        HSI_CU_RET(cudaFuncSetAttribute(fused_proj<LD, KC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)shb), what);
    int dev = 0, nsm = 1, per = 1;
    HSI_CU_RET(cudaGetDevice(&dev), what);
    HSI_CU_RET(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev), what);
    HSI_CU_RET(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, fused_proj<LD, KC>, FX_THREADS, shb), what);
    int64_t npix = dc.n_lines * dc.n_samples, need = (npix + FX_THREADS - 1) / FX_THREADS;
    int64_t grid = (int64_t)nsm * (per > 0 ? per : 1);
    if (grid > need) grid = need > 0 ? need : 1;
    fused_proj<LD, KC><<<(unsigned)grid, FX_THREADS, shb, hsi_cu_stream()>>>(
        C, cs_p, cs_j, dc, coef, W, (int)nf, (int)k, has_fill, has_ig, ig);
    HSI_CU_LAUNCHED(what);
    return HSI_OK;
}

/* The tile's normalisation and projection by fused_proj; *done = 0 (and
 * nothing launched) when it does not take the call: k over 64, or W and the
 * coefficients beyond the device's shared memory per block. */
static hsi_status fx_project(int *done, float *C, int64_t cs_p, int64_t cs_j, const hsi_cu_cube &dc,
                             const fused_coef &coef, const float *W, int64_t nf, int64_t k,
                             int has_fill, int has_ig, float ig)
{
    *done = 0;
    int kp = fx_kc(k), dev = 0, optin = 48 * 1024;
    if (!kp || nf > INT32_MAX / 64) return HSI_OK;
    size_t shb = fx_shared_bytes(nf, kp);
    HSI_CU_RET(cudaGetDevice(&dev), "fused pass (CUDA): device");
    HSI_CU_RET(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
               "fused pass (CUDA): shared memory per block");
    if (shb > (size_t)optin) return HSI_OK;
    *done = 1;
#define FX_KC(L, KC_) return fx_launch_kc<L, KC_>(C, cs_p, cs_j, dc, coef, W, nf, k, has_fill, has_ig, ig, shb)
#define FX_L(L)                                                                    \
    do {                                                                           \
        if (kp == 8) FX_KC(L, 8);                                                  \
        if (kp == 16) FX_KC(L, 16);                                                \
        if (kp == 32) FX_KC(L, 32);                                                \
        FX_KC(L, 64);                                                              \
    } while (0)
    HSI_CU_BY_LOADER(dc, FX_L);
#undef FX_L
#undef FX_KC
    return HSI_OK;
}

/* The per-band coefficients of norm on the device (*coef_d: bands as int64,
 * then 5 float arrays), as kern_load.inc computes them; sub: the PCA mean
 * to subtract (NULL: none). */
static hsi_status fused_coef_upload(void **coef_d, fused_coef *kc, const hsi_norm *norm,
                                    const double *sub, const char *what)
{
    int64_t nb = norm->n_bands;
    size_t nbytes = sizeof(int64_t) * (size_t)nb + 5 * sizeof(float) * (size_t)nb;
    unsigned char *hbuf = (unsigned char *)malloc(nbytes + 1);
    if (!hbuf) return hsi_fail(HSI_ERR_NOMEM, "%s: out of memory", what);
    int64_t *bands = (int64_t *)hbuf;
    float *sc = (float *)(bands + nb), *ce = sc + nb, *of = ce + nb, *su = of + nb, *fl = su + nb;
    for (int64_t j = 0; j < nb; j++) {
        bands[j] = norm->bands ? norm->bands[j] : j;
        sc[j] = (float)(norm->scale ? norm->scale[j] : 1.0);
        ce[j] = (float)(norm->center ? norm->center[j] : 0.0);
        double ofs = norm->offset ? norm->offset[j] : 0.0;
        if (sub && !norm->l2) ofs -= sub[j];
        of[j] = (float)ofs;
        su[j] = (float)(sub ? sub[j] : 0.0);
        fl[j] = (float)(norm->has_ignore && norm->fill ? norm->fill[j] : 0.0);
    }
    hsi_status st = hsi_cuda_malloc(coef_d, nbytes);
    if (st == HSI_OK) st = hsi_cuda_upload(*coef_d, hbuf, nbytes);
    free(hbuf);
    if (st != HSI_OK) return st;
    kc->bands = (const int64_t *)*coef_d;
    kc->sc = (const float *)(kc->bands + nb);
    kc->ce = kc->sc + nb;
    kc->of = kc->ce + nb;
    kc->su = kc->of + nb;
    kc->fl = kc->su + nb;
    return HSI_OK;
}

typedef struct fused_state {
    hsi_cu_tiler T;
    void *coef_d;      /* bands (int64) then 5 float arrays */
    float *W_d;        /* (k, nf) row-major */
    float *X_d;        /* (nf, tile pixels) scratch for the projection */
    float *Y_d[2];     /* per-slot output tile (host output) */
    float *Y_h[2];     /* pinned host copies of the output tiles */
    cudaEvent_t done[2];
    int done_live[2];
    cudaStream_t ds;   /* the copies out (NULL: on this thread's stream) */
    cudaEvent_t kdone; /* a tile's kernels queued on this thread's stream */
    int64_t pending_l0[2], pending_n[2]; /* tiles whose output waits in Y_h */
} fused_state;

/* The copy of a finished output tile into the host array, cut between
 * threads (a tile is tens of MiB, often into fresh pages). */
typedef struct emit_job {
    float *out;
    const float *y;
    int64_t L, S, l0, npix, no;
    int pm;
} emit_job;

static hsi_status emit_part(void *ctx, int t, int nt)
{
    const emit_job *e = (const emit_job *)ctx;
    int64_t a, b;
    if (e->pm) { /* one span */
        hsi_split_range(e->npix * e->no, t, nt, &a, &b);
        memcpy(e->out + e->l0 * e->S * e->no + a, e->y + a, sizeof(float) * (size_t)(b - a));
        return HSI_OK;
    }
    /* one span per component: each thread its share of every component */
    hsi_split_range(e->npix, t, nt, &a, &b);
    for (int64_t j = 0; j < e->no; j++)
        memcpy(e->out + j * e->L * e->S + e->l0 * e->S + a, e->y + j * e->npix + a,
               sizeof(float) * (size_t)(b - a));
    return HSI_OK;
}

/* Hands the finished output tile of slot s to the sink or the host array. */
static hsi_status fused_emit(fused_state *F, int s, float *out, int64_t L, int64_t S, int64_t no,
                             int pm, const hsi_fused_opts *o)
{
    int64_t l0 = F->pending_l0[s], n = F->pending_n[s];
    if (n == 0) return HSI_OK;
    F->pending_n[s] = 0;
    HSI_CU_RET(cudaEventSynchronize(F->done[s]), "fused pass (CUDA): waiting for a tile");
    const float *y = F->Y_h[s];
    int64_t npix = n * S;
    if (o->sink) return o->sink(o->sink_ctx, y, l0, n, no, S, pm);
    emit_job ej = {out, y, L, S, l0, npix, no, pm};
    size_t bytes = sizeof(float) * (size_t)(npix * no);
    int nt = (int)(bytes >> 22) + 1, m = hsi_threads();
    return hsi_parallel(nt < m ? nt : m, emit_part, &ej);
}

static hsi_status fused_main(fused_state *F, float *out, int out_dev, const hsi_view *cube,
                             const hsi_norm *norm, const hsi_pca *pca, const hsi_fused_opts *o)
{
    int64_t nb = norm->n_bands, L = cube->shape[1], S = cube->shape[2];
    int64_t k = pca ? pca->n_components : 0, no = pca ? k : nb;
    int pm = o->pixel_major;
    const char *what = "fused pass (CUDA)";
    cublasHandle_t h = NULL;
    if (pca) HSI_CU_TRY(hsi_cu_cublas(&h, what));
    fused_coef kc;
    HSI_CU_TRY(fused_coef_upload(&F->coef_d, &kc, norm, pca ? pca->mean : NULL, what));
    if (pca) {
        float *W = (float *)malloc(sizeof(float) * (size_t)(k * nb) + 1);
        if (!W) return hsi_fail(HSI_ERR_NOMEM, "%s: out of memory", what);
        for (int64_t r = 0; r < k; r++) {
            double f = pca->whiten ? 1.0 / sqrt(pca->explained_variance[r]) : 1.0;
            for (int64_t j = 0; j < nb; j++) W[r * nb + j] = (float)(pca->components[r * nb + j] * f);
        }
        hsi_status st = hsi_cuda_malloc((void **)&F->W_d, sizeof(float) * (size_t)(k * nb));
        if (st == HSI_OK) st = hsi_cuda_upload(F->W_d, W, sizeof(float) * (size_t)(k * nb));
        free(W);
        if (st != HSI_OK) return st;
    }
    HSI_CU_TRY(hsi_cu_tiler_init(&F->T, cube, o->tile_lines));
    int64_t tl = F->T.tile_lines, tpix = tl * S;
    if (!out_dev)
        for (int s = 0; s < 2; s++) {
            size_t yb = sizeof(float) * (size_t)(no * tpix);
            HSI_CU_TRY(hsi_cuda_malloc((void **)&F->Y_d[s], yb));
            HSI_CU_TRY(hsi_cu_pinned_alloc((void **)&F->Y_h[s], yb, "fused pass (CUDA): output tiles"));
            HSI_CU_RET(cudaEventCreateWithFlags(&F->done[s], cudaEventDisableTiming),
                       "fused pass (CUDA): event");
            F->done_live[s] = 1;
        }
    if (!out_dev && hsi_cu_tile_streams() > 1) {
        HSI_CU_RET(cudaEventCreateWithFlags(&F->kdone, cudaEventDisableTiming), "fused pass (CUDA): event");
        HSI_CU_RET(cudaStreamCreateWithFlags(&F->ds, cudaStreamNonBlocking), "fused pass (CUDA): copy stream");
    }
    int has_fill = norm->has_ignore, l2 = norm->l2;
    float ig = (float)norm->ignore_value;
    for (int64_t t = 0; t < F->T.n_tiles; t++) {
        int s = (int)(t & 1);
        int64_t l0 = t * tl, l1 = l0 + tl < L ? l0 + tl : L, n = l1 - l0, npix = n * S;
        /* the output slot of tile t-2 is handed on before it is reused */
        if (!out_dev) HSI_CU_TRY(fused_emit(F, s, out, L, S, no, pm, o));
        hsi_cu_cube dc;
        HSI_CU_TRY(hsi_cu_tiler_load(&F->T, s, l0, l1, &dc));
        /* where the result goes: C (npix, no) with element (p, j) at
         * C[p*cs_p + j*cs_j] */
        float *C;
        int64_t cs_p, cs_j;
        if (out_dev) {
            C = pm ? out + l0 * S * no : out + l0 * S;
            cs_p = pm ? no : 1;
            cs_j = pm ? 1 : L * S;
        } else {
            C = F->Y_d[s];
            cs_p = pm ? no : 1;
            cs_j = pm ? 1 : npix;
        }
        int fused = 0;
        if (pca && !l2 && npix > 0)
            HSI_CU_TRY(fx_project(&fused, C, cs_p, cs_j, dc, kc, F->W_d, nb, k, has_fill,
                                  norm->has_ignore, ig));
        if (pca && !fused && !F->X_d) /* the features, for the sgemm */
            HSI_CU_TRY(hsi_cuda_malloc((void **)&F->X_d, sizeof(float) * (size_t)(nb * tpix)));
        float *X = pca ? F->X_d : C;
        int64_t xs_p = pca ? 1 : cs_p, xs_j = pca ? npix : cs_j;
        unsigned grid = hsi_cu_blocks(npix, FUSED_THREADS);
#define FX_PREP(L) fused_prep<L><<<grid, FUSED_THREADS, 0, hsi_cu_stream()>>>(X, xs_p, xs_j, dc, kc, nb, \
                                                                               has_fill, norm->has_ignore, ig, l2)
        if (!fused) {
            HSI_CU_BY_LOADER(dc, FX_PREP);
            HSI_CU_LAUNCHED("fused pass (CUDA): normalisation kernel");
        }
#undef FX_PREP
        if (pca && npix > 0 && !fused) {
            const float one = 1.0f, zero = 0.0f;
            /* X: (nf, npix) row-major = column-major (npix x nf), ld npix.
             * W: (k, nf) row-major = column-major (nf x k), ld nf. */
            if (!pm) /* C band-major: column-major (npix x k), ld cs_j: C = X * W^T */
                HSI_CUBLAS_RET(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)npix, (int)k, (int)nb,
                                           &one, X, (int)npix, F->W_d, (int)nb, &zero, C,
                                           (int)cs_j),
                               "fused pass (CUDA): projection");
            else /* C pixel-major: column-major (k x npix), ld k: C = W * X^T */
                HSI_CUBLAS_RET(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_T, (int)k, (int)npix, (int)nb,
                                           &one, F->W_d, (int)nb, X, (int)npix, &zero, C, (int)k),
                               "fused pass (CUDA): projection");
        }
        if (!out_dev) {
            /* on the copy-out stream once the tile's kernels are done (the
             * slot's previous copy out was waited for by fused_emit above) */
            cudaStream_t ds = F->ds ? F->ds : hsi_cu_stream();
            if (F->ds) {
                HSI_CU_RET(cudaEventRecord(F->kdone, hsi_cu_stream()), "fused pass (CUDA): event");
                HSI_CU_RET(cudaStreamWaitEvent(F->ds, F->kdone, 0), "fused pass (CUDA): stream wait");
            }
            HSI_CU_RET(cudaMemcpyAsync(F->Y_h[s], F->Y_d[s], sizeof(float) * (size_t)(npix * no),
                                       cudaMemcpyDeviceToHost, ds),
                       "fused pass (CUDA): device-to-host copy");
            HSI_CU_RET(cudaEventRecord(F->done[s], ds), "fused pass (CUDA): event");
            F->pending_l0[s] = l0;
            F->pending_n[s] = n;
        }
    }
    if (!out_dev) {
        /* the last two tiles, in line order */
        int64_t nt = F->T.n_tiles;
        for (int64_t t = nt >= 2 ? nt - 2 : 0; t < nt; t++)
            HSI_CU_TRY(fused_emit(F, (int)(t & 1), out, L, S, no, pm, o));
    }
    return HSI_OK;
}

extern "C" hsi_status hsi_fused_run_cuda(float *out, int out_on_device, const hsi_view *cube,
                                         const hsi_norm *norm_in, const hsi_pca *pca,
                                         const hsi_fused_opts *opts)
{
    hsi_fused_opts o0;
    memset(&o0, 0, sizeof o0);
    const hsi_fused_opts *o = opts ? opts : &o0;
    HSI_CU_TRY(hsi_cuda_require("fused pass"));
    if (!cube || !cube->buf || cube->ndim != 3 || hsi_dtype_size(cube->dtype) == 0)
        return hsi_fail(HSI_ERR_ARG, "fused pass (CUDA): expected a (band, line, sample) cube");
    const hsi_norm *norm = pca ? &pca->norm : norm_in;
    if (!norm)
        return hsi_fail(HSI_ERR_ARG, "fused pass (CUDA): needs a normalisation map or a PCA model");
    if (norm->n_cube_bands != cube->shape[0])
        return hsi_fail(HSI_ERR_ARG,
                        "fused pass (CUDA): the %s is for a %lld-band cube, this cube has %lld bands",
                        pca ? "PCA model" : "normalisation", (long long)norm->n_cube_bands,
                        (long long)cube->shape[0]);
    for (int64_t j = 0; j < norm->n_bands; j++)
        if (norm->bands && (norm->bands[j] < 0 || norm->bands[j] >= cube->shape[0]))
            return hsi_fail(HSI_ERR_ARG, "fused pass (CUDA): band index %lld out of range",
                            (long long)norm->bands[j]);
    if (!out && !(o->sink && !out_on_device))
        return hsi_fail(HSI_ERR_ARG, "fused pass (CUDA): give an output array (or, for host "
                                     "output, a sink)");
    if (o->sink && out_on_device)
        return hsi_fail(HSI_ERR_ARG, "fused pass (CUDA): a sink takes host tiles; out_on_device "
                                     "must be 0");
    if (cube->shape[1] * cube->shape[2] > INT32_MAX / 2)
        return hsi_fail(HSI_ERR_UNSUPPORTED,
                        "fused pass (CUDA): %lld x %lld pixels exceed cuBLAS's int dimensions",
                        (long long)cube->shape[1], (long long)cube->shape[2]);
    fused_state F;
    memset(&F, 0, sizeof F);
    hsi_status st = fused_main(&F, out, out_on_device, cube, norm, pca, o);
    if (st != HSI_OK) cudaStreamSynchronize(hsi_cu_stream()); /* nothing still reads our buffers */
    hsi_cu_tiler_free(&F.T);
    if (F.ds) { /* no copy out still reads or writes the slots */
        cudaStreamSynchronize(F.ds);
        cudaStreamDestroy(F.ds);
    }
    if (F.kdone) cudaEventDestroy(F.kdone);
    for (int s = 0; s < 2; s++) {
        if (F.done_live[s]) {
            cudaEventSynchronize(F.done[s]);
            cudaEventDestroy(F.done[s]);
        }
        hsi_cu_pinned_free(F.Y_h[s]);
        hsi_cuda_free(F.Y_d[s]);
    }
    hsi_cuda_free(F.X_d);
    hsi_cuda_free(F.W_d);
    hsi_cuda_free(F.coef_d);
    return st;
}

/* ------------------------------------------------------- covariance */

/* shift (nf) = X's column p0 (X: column-major npix x nf, ld npix) */
__global__ void cov_take_column(float *shift, const float *X, int64_t npix, int64_t p0, int64_t nf)
{
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < nf;
         j += (int64_t)gridDim.x * blockDim.x)
        shift[j] = X[p0 + j * npix];
}

/* X[p, j] = mask[p] ? X[p, j] - shift[j] : 0 (mask NULL: every pixel) */
__global__ void cov_shift(float *X, int64_t npix, int64_t nf, const float *shift,
                          const unsigned char *mask)
{
    int64_t n = npix * nf;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t p = i % npix, j = i / npix;
        X[i] = (!mask || mask[p]) ? X[i] - shift[j] : 0.0f;
    }
}

/* sum[j] += the sum of X's column j in double: one block per band, each
 * thread its strided share in a fixed order, a fixed tree in the block
 * (the bits do not depend on scheduling) */
__global__ void cov_column_sums(double *sum, const float *X, int64_t npix)
{
    __shared__ double part[FUSED_THREADS];
    const float *col = X + (int64_t)blockIdx.x * npix;
    double a = 0;
    for (int64_t p = threadIdx.x; p < npix; p += blockDim.x) a += (double)col[p];
    part[threadIdx.x] = a;
    __syncthreads();
    for (int w = FUSED_THREADS / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) sum[blockIdx.x] += part[0];
}

/* acc (n) += (double) c (n) */
__global__ void cov_accumulate(double *acc, const float *c, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        acc[i] += (double)c[i];
}

#define COV_CHUNK 8192 /* pixels per ssyrk: float sums of at most this many products */

typedef struct cov_state {
    hsi_cu_tiler T;
    void *coef_d;
    float *X_d, *C_d, *shift_d;
    double *acc_d, *sum_d;
    unsigned char *mask_d;
    uint8_t *mask_h;
    double *acc_h, *sum_h;
    float *shift_h;
    int64_t *bands_h; /* the identity selection when no norm is given */
    double *ones_h;
} cov_state;

static hsi_status cov_main(cov_state *V, double *mean, double *cov, int64_t *n_used,
                           const hsi_view *cube, const hsi_norm *norm, const hsi_pca_opts *o)
{
    const char *what = "covariance (CUDA)";
    const int64_t nf = norm->n_bands, L = cube->shape[1], S = cube->shape[2];
    cublasHandle_t h = NULL;
    HSI_CU_TRY(hsi_cu_cublas(&h, what));
    fused_coef kc;
    HSI_CU_TRY(fused_coef_upload(&V->coef_d, &kc, norm, NULL, what));
    HSI_CU_TRY(hsi_kern_mask_pack(&V->mask_h, o->mask, L, S));
    /* the pixels fitted on, and the first of them: its spectrum is the shift */
    int64_t n = 0, p_first = -1;
    for (int64_t p = 0; p < L * S; p++)
        if (!V->mask_h || V->mask_h[p]) {
            if (p_first < 0) p_first = p;
            n++;
        }
    if (n < 2) return hsi_fail(HSI_ERR_NUMERIC, "%s: needs at least 2 pixels, found %lld", what, (long long)n);
    HSI_CU_TRY(hsi_cu_tiler_init(&V->T, cube, o->tile_lines));
    const int64_t tl = V->T.tile_lines, tpix = tl * S;
    HSI_CU_TRY(hsi_cuda_malloc((void **)&V->X_d, sizeof(float) * (size_t)(nf * tpix)));
    HSI_CU_TRY(hsi_cuda_malloc((void **)&V->C_d, sizeof(float) * (size_t)(nf * nf)));
    HSI_CU_TRY(hsi_cuda_malloc((void **)&V->shift_d, sizeof(float) * (size_t)nf));
    HSI_CU_TRY(hsi_cuda_malloc((void **)&V->acc_d, sizeof(double) * (size_t)(nf * nf)));
    HSI_CU_TRY(hsi_cuda_malloc((void **)&V->sum_d, sizeof(double) * (size_t)nf));
    HSI_CU_TRY(hsi_cuda_memset(V->acc_d, 0, sizeof(double) * (size_t)(nf * nf)));
    HSI_CU_TRY(hsi_cuda_memset(V->sum_d, 0, sizeof(double) * (size_t)nf));
    if (V->mask_h) HSI_CU_TRY(hsi_cuda_malloc((void **)&V->mask_d, (size_t)tpix));
    int has_fill = norm->has_ignore, l2 = norm->l2;
    float ig = (float)norm->ignore_value;
    const float one = 1.0f, zero = 0.0f;
    for (int64_t t = p_first / S / tl; t < V->T.n_tiles; t++) { /* tiles before the first pixel hold none */
        int s = (int)(t & 1);
        int64_t l0 = t * tl, l1 = l0 + tl < L ? l0 + tl : L, npix = (l1 - l0) * S;
        hsi_cu_cube dc;
        HSI_CU_TRY(hsi_cu_tiler_load(&V->T, s, l0, l1, &dc));
        unsigned grid = hsi_cu_blocks(npix, FUSED_THREADS);
        /* X: (nf, npix) row-major = column-major (npix x nf), ld npix */
#define COV_PREP(L) fused_prep<L><<<grid, FUSED_THREADS, 0, hsi_cu_stream()>>>(V->X_d, 1, npix, dc, kc, nf, \
                                                                                has_fill, norm->has_ignore, ig, l2)
        HSI_CU_BY_LOADER(dc, COV_PREP);
#undef COV_PREP
        HSI_CU_LAUNCHED("covariance (CUDA): normalisation kernel");
        if (p_first >= l0 * S && p_first < l1 * S) {
            cov_take_column<<<hsi_cu_blocks(nf, FUSED_THREADS), FUSED_THREADS, 0, hsi_cu_stream()>>>(
                V->shift_d, V->X_d, npix, p_first - l0 * S, nf);
            HSI_CU_LAUNCHED("covariance (CUDA): shift");
        }
        if (V->mask_d)
            HSI_CU_RET(cudaMemcpyAsync(V->mask_d, V->mask_h + l0 * S, (size_t)npix,
                                       cudaMemcpyHostToDevice, hsi_cu_stream()),
                       "covariance (CUDA): mask copy");
        cov_shift<<<hsi_cu_blocks(npix * nf, FUSED_THREADS), FUSED_THREADS, 0, hsi_cu_stream()>>>(
            V->X_d, npix, nf, V->shift_d, V->mask_d);
        HSI_CU_LAUNCHED("covariance (CUDA): shift and mask");
        cov_column_sums<<<(unsigned)nf, FUSED_THREADS, 0, hsi_cu_stream()>>>(V->sum_d, V->X_d, npix);
        HSI_CU_LAUNCHED("covariance (CUDA): column sums");
        for (int64_t p0 = 0; p0 < npix; p0 += COV_CHUNK) {
            int64_t k = npix - p0 < COV_CHUNK ? npix - p0 : COV_CHUNK;
            /* C (nf x nf, lower) = A^T A, A = rows [p0, p0 + k) of X (k x nf, ld npix) */
            HSI_CUBLAS_RET(cublasSsyrk(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_T, (int)nf, (int)k, &one,
                                       V->X_d + p0, (int)npix, &zero, V->C_d, (int)nf),
                           "covariance (CUDA): ssyrk");
            cov_accumulate<<<hsi_cu_blocks(nf * nf, FUSED_THREADS), FUSED_THREADS, 0, hsi_cu_stream()>>>(
                V->acc_d, V->C_d, nf * nf);
            HSI_CU_LAUNCHED("covariance (CUDA): accumulate");
        }
        /* the tile's pinned slot is reused two tiles on: hsi_cu_tiler_load waits for its copy */
    }
    V->acc_h = (double *)malloc(sizeof(double) * (size_t)(nf * nf));
    V->sum_h = (double *)malloc(sizeof(double) * (size_t)nf);
    V->shift_h = (float *)malloc(sizeof(float) * (size_t)nf);
    if (!V->acc_h || !V->sum_h || !V->shift_h) return hsi_fail(HSI_ERR_NOMEM, "%s: out of memory", what);
    HSI_CU_TRY(hsi_cuda_download(V->acc_h, V->acc_d, sizeof(double) * (size_t)(nf * nf)));
    HSI_CU_TRY(hsi_cuda_download(V->sum_h, V->sum_d, sizeof(double) * (size_t)nf));
    HSI_CU_TRY(hsi_cuda_download(V->shift_h, V->shift_d, sizeof(float) * (size_t)nf));
    /* shifted sums: mean = shift + s / n; cov = (A - s s^T / n) / (n - 1), A
     * column-major lower (element (i, j), i >= j, at acc[i + j nf]) */
    for (int64_t i = 0; i < nf; i++) mean[i] = (double)V->shift_h[i] + V->sum_h[i] / (double)n;
    for (int64_t j = 0; j < nf; j++)
        for (int64_t i = j; i < nf; i++) {
            double c = (V->acc_h[i + j * nf] - V->sum_h[i] * V->sum_h[j] / (double)n) / (double)(n - 1);
            cov[i * nf + j] = c;
            cov[j * nf + i] = c;
        }
    if (n_used) *n_used = n;
    return HSI_OK;
}

extern "C" hsi_status hsi_covariance_cuda(double *mean, double *cov, int64_t *n_used,
                                          const hsi_view *cube, const hsi_norm *norm_in,
                                          const hsi_pca_opts *opts)
{
    hsi_pca_opts o0;
    memset(&o0, 0, sizeof o0);
    const hsi_pca_opts *o = opts ? opts : &o0;
    HSI_CU_TRY(hsi_cuda_require("covariance"));
    if (!cube || !cube->buf || cube->ndim != 3 || hsi_dtype_is_complex(cube->dtype) ||
        hsi_dtype_size(cube->dtype) == 0)
        return hsi_fail(HSI_ERR_ARG, "covariance (CUDA): expected a real (band, line, sample) cube");
    if (cube->shape[1] * cube->shape[2] > INT32_MAX / 2)
        return hsi_fail(HSI_ERR_UNSUPPORTED, "covariance (CUDA): %lld x %lld pixels exceed cuBLAS's "
                        "int dimensions", (long long)cube->shape[1], (long long)cube->shape[2]);
    cov_state V;
    memset(&V, 0, sizeof V);
    hsi_norm idn;
    memset(&idn, 0, sizeof idn);
    const hsi_norm *norm = norm_in;
    hsi_status st = HSI_OK;
    if (!norm) { /* raw values of every band */
        V.bands_h = (int64_t *)malloc(sizeof(int64_t) * (size_t)cube->shape[0] + 8);
        if (!V.bands_h) return hsi_fail(HSI_ERR_NOMEM, "covariance (CUDA): out of memory");
        for (int64_t j = 0; j < cube->shape[0]; j++) V.bands_h[j] = j;
        idn.n_cube_bands = idn.n_bands = cube->shape[0];
        idn.bands = V.bands_h;
        norm = &idn;
    }
    if (norm->n_cube_bands != cube->shape[0])
        st = hsi_fail(HSI_ERR_ARG, "covariance (CUDA): the normalisation is for a %lld-band cube, "
                      "this cube has %lld bands", (long long)norm->n_cube_bands, (long long)cube->shape[0]);
    if (st == HSI_OK) st = cov_main(&V, mean, cov, n_used, cube, norm, o);
    if (st != HSI_OK) cudaStreamSynchronize(hsi_cu_stream());
    hsi_cu_tiler_free(&V.T);
    hsi_cuda_free(V.coef_d);
    hsi_cuda_free(V.X_d);
    hsi_cuda_free(V.C_d);
    hsi_cuda_free(V.shift_d);
    hsi_cuda_free(V.acc_d);
    hsi_cuda_free(V.sum_d);
    hsi_cuda_free(V.mask_d);
    free(V.mask_h);
    free(V.acc_h);
    free(V.sum_h);
    free(V.shift_h);
    free(V.bands_h);
    return st;
}

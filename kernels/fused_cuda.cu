/* fused_cuda.cu — the fused select -> normalise -> project pass on the GPU
 * (see hsi_fused_run_cuda in kernels/cuda.h). Per tile of lines: one
 * kernel turns raw elements into normalised float features (one thread per
 * pixel, bands in the selection's order), then one cuBLAS sgemm projects
 * them on the whitened components straight into the output layout. Float32
 * throughout, like the CPU pass. Not the statistics or the PCA fit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_internal.h"

#define FUSED_THREADS 256

/* Per-band coefficients in float, computed as the CPU loader does:
 * y = sc*(x - ce) + of; with l2: y = y * (1/|y|) - su. */
typedef struct fused_coef {
    const int64_t *bands;
    const float *sc, *ce, *of, *su, *fl;
} fused_coef;

/* Pixel p of the tile (p = line * n_samples + sample) -> X[p*xs_p + j*xs_j]
 * for the nf selected bands. */
template <bool AL>
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
            float x = (float)hsi_cu_raw<AL>(px + k.bands[j] * c.sb, c.dtype, c.swapped);
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

typedef struct fused_state {
    hsi_cu_tiler T;
    void *coef_d;      /* bands (int64) then 5 float arrays */
    float *W_d;        /* (k, nf) row-major */
    float *X_d;        /* (nf, tile pixels) scratch for the projection */
    float *Y_d[2];     /* per-slot output tile (host output) */
    float *Y_h[2];     /* pinned host copies of the output tiles */
    cudaEvent_t done[2];
    int done_live[2];
    int64_t pending_l0[2], pending_n[2]; /* tiles whose output waits in Y_h */
} fused_state;

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
    if (pm) {
        memcpy(out + l0 * S * no, y, sizeof(float) * (size_t)(npix * no));
    } else {
        for (int64_t j = 0; j < no; j++)
            memcpy(out + j * L * S + l0 * S, y + j * npix, sizeof(float) * (size_t)npix);
    }
    return HSI_OK;
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
    /* coefficients, as kern_load.inc computes them */
    {
        size_t nbytes = sizeof(int64_t) * (size_t)nb + 5 * sizeof(float) * (size_t)nb;
        unsigned char *hbuf = (unsigned char *)malloc(nbytes + 1);
        if (!hbuf) return hsi_fail(HSI_ERR_NOMEM, "%s: out of memory", what);
        int64_t *bands = (int64_t *)hbuf;
        float *sc = (float *)(bands + nb), *ce = sc + nb, *of = ce + nb, *su = of + nb,
              *fl = su + nb;
        const double *sub = pca ? pca->mean : NULL;
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
        hsi_status st = hsi_cuda_malloc(&F->coef_d, nbytes);
        if (st == HSI_OK) st = hsi_cuda_upload(F->coef_d, hbuf, nbytes);
        free(hbuf);
        if (st != HSI_OK) return st;
    }
    fused_coef kc;
    kc.bands = (const int64_t *)F->coef_d;
    kc.sc = (const float *)(kc.bands + nb);
    kc.ce = kc.sc + nb;
    kc.of = kc.ce + nb;
    kc.su = kc.of + nb;
    kc.fl = kc.su + nb;
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
    if (pca) HSI_CU_TRY(hsi_cuda_malloc((void **)&F->X_d, sizeof(float) * (size_t)(nb * tpix)));
    if (!out_dev)
        for (int s = 0; s < 2; s++) {
            size_t yb = sizeof(float) * (size_t)(no * tpix);
            HSI_CU_TRY(hsi_cuda_malloc((void **)&F->Y_d[s], yb));
            HSI_CU_RET(cudaHostAlloc((void **)&F->Y_h[s], yb, cudaHostAllocDefault),
                       "fused pass (CUDA): pinned output buffer");
            HSI_CU_RET(cudaEventCreateWithFlags(&F->done[s], cudaEventDisableTiming),
                       "fused pass (CUDA): event");
            F->done_live[s] = 1;
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
        float *X = pca ? F->X_d : C;
        int64_t xs_p = pca ? 1 : cs_p, xs_j = pca ? npix : cs_j;
        unsigned grid = hsi_cu_blocks(npix, FUSED_THREADS);
        if (dc.aligned)
            fused_prep<true><<<grid, FUSED_THREADS, 0, hsi_cu_stream()>>>(
                X, xs_p, xs_j, dc, kc, nb, has_fill, norm->has_ignore, ig, l2);
        else
            fused_prep<false><<<grid, FUSED_THREADS, 0, hsi_cu_stream()>>>(
                X, xs_p, xs_j, dc, kc, nb, has_fill, norm->has_ignore, ig, l2);
        HSI_CU_LAUNCHED("fused pass (CUDA): normalisation kernel");
        if (pca && npix > 0) {
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
            HSI_CU_RET(cudaMemcpyAsync(F->Y_h[s], F->Y_d[s], sizeof(float) * (size_t)(npix * no),
                                       cudaMemcpyDeviceToHost, hsi_cu_stream()),
                       "fused pass (CUDA): device-to-host copy");
            HSI_CU_RET(cudaEventRecord(F->done[s], hsi_cu_stream()), "fused pass (CUDA): event");
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
    for (int s = 0; s < 2; s++) {
        if (F.done_live[s]) {
            cudaEventSynchronize(F.done[s]);
            cudaEventDestroy(F.done[s]);
        }
        if (F.Y_h[s]) cudaFreeHost(F.Y_h[s]);
        hsi_cuda_free(F.Y_d[s]);
    }
    hsi_cuda_free(F.X_d);
    hsi_cuda_free(F.W_d);
    hsi_cuda_free(F.coef_d);
    return st;
}

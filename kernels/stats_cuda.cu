/* stats_cuda.cu — per-band count/mean/variance/min/max on the GPU (see
 * hsi_stats_compute_cuda in kernels/cuda.h). Each thread sums its elements
 * shifted by the first valid one (no division in the loop), the block
 * merges (n, mean, M2) pairs in double with Chan's formula in a fixed tree,
 * and the host merges the per-block partials in a fixed order. Not the
 * histogram/percentile pass (CPU only). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_internal.h"
#include "kernels/kern_internal.h"

#define STATS_THREADS 256
#define STATS_BLOCKS_X 32 /* blocks per band per tile */

typedef struct stats_part {
    double n, mean, m2, mn, mx;
} stats_part;

__device__ __forceinline__ void chan_merge(double &na, double &ma, double &qa, double nb, double mb,
                                           double qb)
{
    if (nb == 0) return;
    if (na == 0) {
        na = nb, ma = mb, qa = qb;
        return;
    }
    double n = na + nb, d = mb - ma;
    ma += d * (nb / n);
    qa += qb + d * d * (na * nb / n);
    na = n;
}

/* One pixel p at (line l, sample s) of a band into a thread's running
 * (n, shift, s1, s2, min, max): skipped when masked out, NaN or the ignored
 * value; sums shifted by the thread's first valid value. */
template <typename LD>
__device__ __forceinline__ void stats_take(double &n, double &shift, double &s1, double &s2,
                                           double &mn, double &mx, const unsigned char *band,
                                           const hsi_cu_cube &c, int64_t p, int64_t l, int64_t s,
                                           const uint8_t *mask, int has_ig, double ig)
{
    if (mask && !mask[p]) return;
    double x = LD::getd(band + l * c.sl + s * c.ss, c.dtype, c.swapped);
    if (x != x || (has_ig && x == ig)) return;
    if (n == 0) shift = x;
    double d = x - shift;
    n += 1;
    s1 += d;
    s2 += d * d;
    mn = x < mn ? x : mn;
    mx = x > mx ? x : mx;
}

/* grid (STATS_BLOCKS_X, n_bands); partials (n_bands, n_parts) row-major,
 * this tile writes column part0 + blockIdx.x. mask: (tile lines, samples)
 * packed, this tile's rows (NULL = all). ROLLED: the pixel loop kept
 * rolled (40 registers; the compiler unrolls it 4 times for the typed
 * loaders, 48 registers, one resident block per SM less), for cubes whose
 * band axis is the fastest: there a warp's loads are scattered and only
 * warps in flight hide them (on the H200, BIP statistics ran 20 % slower
 * with the unrolled loop: 5 blocks per SM instead of 6; not yet measured
 * with this). */
template <typename LD, int ROLLED>
__global__ void stats_kernel(stats_part *parts, int64_t n_parts, int64_t part0, hsi_cu_cube c,
                             const uint8_t *mask, int has_ig, double ig)
{
    __shared__ double sn[STATS_THREADS], sm[STATS_THREADS], sq[STATS_THREADS];
    __shared__ double smn[STATS_THREADS], smx[STATS_THREADS];
    int64_t b = blockIdx.y;
    int64_t npix = c.n_lines * c.n_samples;
    const unsigned char *band = c.base + b * c.sb;
    double n = 0, shift = 0, s1 = 0, s2 = 0, mn = INFINITY, mx = -INFINITY;
    /* (line, sample) of p kept by steps: no division per element */
    const int64_t step = (int64_t)gridDim.x * blockDim.x, dl = step / c.n_samples,
                  ds = step - dl * c.n_samples;
    int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, l = p / c.n_samples,
            s = p - l * c.n_samples;
    if (ROLLED) {
#pragma unroll 1
        for (; p < npix; p += step, l += dl, s += ds) {
            if (s >= c.n_samples) s -= c.n_samples, l++;
            stats_take<LD>(n, shift, s1, s2, mn, mx, band, c, p, l, s, mask, has_ig, ig);
        }
    } else {
        for (; p < npix; p += step, l += dl, s += ds) {
            if (s >= c.n_samples) s -= c.n_samples, l++;
            stats_take<LD>(n, shift, s1, s2, mn, mx, band, c, p, l, s, mask, has_ig, ig);
        }
    }
    int t = threadIdx.x;
    sn[t] = n;
    sm[t] = n > 0 ? shift + s1 / n : 0;
    sq[t] = n > 0 ? fmax(s2 - s1 * (s1 / n), 0.0) : 0;
    smn[t] = mn;
    smx[t] = mx;
    __syncthreads();
    for (int h = STATS_THREADS / 2; h > 0; h >>= 1) {
        if (t < h) {
            double na = sn[t], ma = sm[t], qa = sq[t];
            chan_merge(na, ma, qa, sn[t + h], sm[t + h], sq[t + h]);
            sn[t] = na, sm[t] = ma, sq[t] = qa;
            smn[t] = fmin(smn[t], smn[t + h]);
            smx[t] = fmax(smx[t], smx[t + h]);
        }
        __syncthreads();
    }
    if (t == 0) {
        stats_part r = {sn[0], sm[0], sq[0], smn[0], smx[0]};
        parts[b * n_parts + part0 + blockIdx.x] = r;
    }
}

static hsi_status stats_alloc_cu(hsi_stats *s, int64_t nb)
{
    size_t n = (size_t)nb;
    s->n_bands = nb;
    s->count = (int64_t *)calloc(n, sizeof(int64_t));
    s->mean = (double *)calloc(n, sizeof(double));
    s->std = (double *)calloc(n, sizeof(double));
    s->var = (double *)calloc(n, sizeof(double));
    s->var_ddof1 = (double *)calloc(n, sizeof(double));
    s->min = (double *)calloc(n, sizeof(double));
    s->max = (double *)calloc(n, sizeof(double));
    if (!s->count || !s->mean || !s->std || !s->var || !s->var_ddof1 || !s->min || !s->max)
        return hsi_fail(HSI_ERR_NOMEM, "stats (CUDA): cannot allocate results for %lld bands",
                        (long long)nb);
    return HSI_OK;
}

static hsi_status stats_run(hsi_stats *out, const hsi_view *cube, const hsi_stats_opts *o,
                            hsi_cu_tiler *T, uint8_t **mask_h, void **mask_d, void **parts_d,
                            stats_part **parts_h)
{
    int64_t nb = cube->shape[0], L = cube->shape[1], S = cube->shape[2];
    HSI_CU_TRY(hsi_kern_mask_pack(mask_h, o->mask, L, S));
    HSI_CU_TRY(stats_alloc_cu(out, nb));
    HSI_CU_TRY(hsi_cu_tiler_init(T, cube, o->tile_lines));
    int64_t n_parts = T->n_tiles * STATS_BLOCKS_X;
    size_t parts_bytes = sizeof(stats_part) * (size_t)(nb * n_parts);
    HSI_CU_TRY(hsi_cuda_malloc(parts_d, parts_bytes));
    if (*mask_h) {
        HSI_CU_TRY(hsi_cuda_malloc(mask_d, (size_t)(L * S)));
        HSI_CU_RET(cudaMemcpyAsync(*mask_d, *mask_h, (size_t)(L * S), cudaMemcpyHostToDevice,
                                   hsi_cu_stream()),
                   "stats (CUDA): mask copy");
    }
    for (int64_t t = 0; t < T->n_tiles; t++) {
        int64_t l0 = t * T->tile_lines, l1 = l0 + T->tile_lines < L ? l0 + T->tile_lines : L;
        hsi_cu_cube dc;
        HSI_CU_TRY(hsi_cu_tiler_load(T, (int)(t & 1), l0, l1, &dc));
        const uint8_t *m = *mask_d ? (const uint8_t *)*mask_d + l0 * S : NULL;
        dim3 grid(STATS_BLOCKS_X, (unsigned)nb);
        /* the band axis the fastest (BIP): the loop kept rolled, see stats_kernel */
        int band_fast = (dc.sb < 0 ? -dc.sb : dc.sb) <= (dc.ss < 0 ? -dc.ss : dc.ss);
#define STATS_LAUNCH(L)                                                                            \
    do {                                                                                           \
        if (band_fast)                                                                             \
            stats_kernel<L, 1><<<grid, STATS_THREADS, 0, hsi_cu_stream()>>>(                       \
                (stats_part *)*parts_d, n_parts, t * STATS_BLOCKS_X, dc, m, o->has_ignore,         \
                o->ignore_value);                                                                  \
        else                                                                                       \
            stats_kernel<L, 0><<<grid, STATS_THREADS, 0, hsi_cu_stream()>>>(                       \
                (stats_part *)*parts_d, n_parts, t * STATS_BLOCKS_X, dc, m, o->has_ignore,         \
                o->ignore_value);                                                                  \
    } while (0)
        HSI_CU_BY_LOADER(dc, STATS_LAUNCH);
#undef STATS_LAUNCH
        HSI_CU_LAUNCHED("stats (CUDA): kernel");
    }
    *parts_h = (stats_part *)malloc(parts_bytes);
    if (!*parts_h) return hsi_fail(HSI_ERR_NOMEM, "stats (CUDA): out of memory");
    HSI_CU_TRY(hsi_cuda_download(*parts_h, *parts_d, parts_bytes));
    for (int64_t b = 0; b < nb; b++) {
        int64_t n = 0;
        double mean = 0, m2 = 0, mn = INFINITY, mx = -INFINITY;
        for (int64_t k = 0; k < n_parts; k++) {
            const stats_part *p = &(*parts_h)[b * n_parts + k];
            if (p->n == 0) continue;
            hsi_stats_merge(&n, &mean, &m2, (int64_t)p->n, p->mean, p->m2);
            mn = p->mn < mn ? p->mn : mn;
            mx = p->mx > mx ? p->mx : mx;
        }
        if (n == 0)
            return hsi_fail(HSI_ERR_NUMERIC,
                            "stats: band %lld has no valid element (all masked, ignored or NaN)",
                            (long long)b);
        out->count[b] = n;
        out->mean[b] = mean;
        out->var[b] = m2 / (double)n;
        out->var_ddof1[b] = n > 1 ? m2 / (double)(n - 1) : 0;
        out->std[b] = sqrt(out->var[b]);
        out->min[b] = mn;
        out->max[b] = mx;
    }
    return HSI_OK;
}

extern "C" hsi_status hsi_stats_compute_cuda(hsi_stats *out, const hsi_view *cube,
                                             const hsi_stats_opts *opts)
{
    hsi_stats_opts o0;
    memset(&o0, 0, sizeof o0);
    const hsi_stats_opts *o = opts ? opts : &o0;
    memset(out, 0, sizeof *out);
    HSI_CU_TRY(hsi_cuda_require("stats"));
    if (o->hist_bins != 0 || o->n_percentiles != 0)
        return hsi_fail(HSI_ERR_UNSUPPORTED,
                        "stats (CUDA): histograms and percentiles are computed on the CPU only "
                        "(asked for %d bins, %d percentiles)",
                        o->hist_bins, o->n_percentiles);
    if (!cube || !cube->buf || cube->ndim != 3 || hsi_dtype_is_complex(cube->dtype) ||
        hsi_dtype_size(cube->dtype) == 0)
        return hsi_fail(HSI_ERR_ARG, "stats (CUDA): expected a real (band, line, sample) cube");
    if (cube->shape[0] > 65535)
        return hsi_fail(HSI_ERR_UNSUPPORTED, "stats (CUDA): %lld bands (at most 65535)",
                        (long long)cube->shape[0]);
    hsi_cu_tiler T;
    memset(&T, 0, sizeof T);
    uint8_t *mask_h = NULL;
    void *mask_d = NULL, *parts_d = NULL;
    stats_part *parts_h = NULL;
    hsi_status st = stats_run(out, cube, o, &T, &mask_h, &mask_d, &parts_d, &parts_h);
    hsi_cu_tiler_free(&T);
    hsi_cuda_free(mask_d);
    hsi_cuda_free(parts_d);
    free(mask_h);
    free(parts_h);
    if (st != HSI_OK) hsi_stats_free(out);
    return st;
}

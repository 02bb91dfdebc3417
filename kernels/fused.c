/* fused.c — select -> normalise -> project in one read of the raw cube.
 * Each worker owns a contiguous range of lines; per pixel block it loads
 * the selected bands through the per-band affine (+L2, - PCA mean) in the
 * input's natural orientation, multiplies by the components (float32
 * throughout: centred values, then the AVX-512 register tiles of
 * tiles512.h where the CPU has them, else one sgemm) and stores float32 in
 * the requested layout. Not the reference: that is
 * hsi_normalize_cpu followed by hsi_pca_transform_features. */
#include "fused.h"

#include <cblas.h>
#ifdef __AVX__
#include <immintrin.h>
#endif
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kern_internal.h"
#include "kernels/cuda.h"
#include "kernels/tiles512.h"

int64_t hsi_fused_n_out(const hsi_norm *norm, const hsi_pca *pca)
{
    return pca ? pca->n_components : norm ? norm->n_bands : 0;
}

typedef struct fused_ctx {
    const hsi_view *cube;
    hsi_kern_prep pp;
    const float *W;      /* (k, nf) row-major, whitening folded in; NULL = no PCA */
    const float *Wpk;    /* W for the AVX-512 tiles (hsi_c512_rows), or NULL: sgemm */
    int64_t k, nf, n_out, chunk, tile, kpad;
    int pixel_major;
    int stream;          /* products to out with non-temporal stores */
    float *out;
    hsi_tile_sink sink;
    void *sink_ctx;
    pthread_mutex_t lock;
    pthread_cond_t turn;
    int64_t next_emit;   /* index of the tile the sink takes next */
    int failed;          /* a worker failed: the others stop waiting */
    hsi_progress *prog;
    int64_t *lines_done;
} fused_ctx;

/* n products to d: around the caches when the pass streams its output */
static void fused_put(const fused_ctx *c, float *d, const float *src, int64_t n)
{
    if (c->stream) hsi_kern_stream_f32(d, src, n);
    else memcpy(d, src, sizeof(float) * (size_t)n);
}

/* Padding of the rows the transposes read and write: the staged
 * band-major rows are the block width and 16 floats more apart, the staged
 * pixels (and the loaded rows they come from) the output bands and 16
 * more, so that the rows written do not alias the rows read modulo 4 KiB
 * (with rows of 256 floats they did: a 256-pixel block of 256 bands, BIP
 * to band-major, went at 4.8 GB/s against 8.2 padded) */
#define STAGE_PAD 16

/* Stores a block of products staged in stg (pixel-major: np pixels sld
 * floats apart, or band-major: rows sld floats apart) at its place in the
 * destination. */
static void fused_store(const fused_ctx *c, float *dst, const float *stg, int64_t yl, int64_t dL, int64_t s0,
                        int64_t np, int64_t sld)
{
    int64_t S = c->cube->shape[2], no = c->n_out;
    if (c->pixel_major) {
        if (sld == no)
            fused_put(c, dst + (yl * S + s0) * no, stg, np * no);
        else
            for (int64_t q = 0; q < np; q++) fused_put(c, dst + (yl * S + s0 + q) * no, stg + q * sld, no);
        return;
    }
    for (int64_t o = 0; o < no; o++) fused_put(c, dst + (o * dL + yl) * S + s0, stg + o * sld, np);
}

/* Band j of lines [y0, y1) to its plane: rows in runs of rl pixels. */
static void fused_plane_rows(const fused_ctx *c, float *dst, int64_t j, int64_t y0, int64_t y1, int64_t dl0,
                             int64_t dL, float *stg, int64_t rl, float *scr)
{
    int64_t S = c->cube->shape[2];
    int64_t b = c->pp.bands ? c->pp.bands[j] : j;
    hsi_kern_prep pj = c->pp;
    pj.n_bands = 1;
    pj.bands = &b;
    if (pj.scale) pj.scale += j;
    if (pj.center) pj.center += j;
    if (pj.offset) pj.offset += j;
    if (pj.sub) pj.sub += j;
    if (pj.fill) pj.fill += j;
    for (int64_t y = y0; y < y1; y++)
        for (int64_t s0 = 0; s0 < S; s0 += rl) {
            int64_t np = S - s0 < rl ? S - s0 : rl;
            float *d = dst + (j * dL + y - dl0) * S + s0;
            hsi_kern_load_f32(stg ? stg : d, np, 1, c->cube, &pj, y, s0, np, scr);
            if (stg) fused_put(c, d, stg, np);
        }
}

/* Band-major products without a projection from rows of samples (BSQ,
 * BIL), each row written once to its plane, in the input's order: BSQ
 * band by band over the tile's lines, so that each input plane is read and
 * each output plane written as one stream (the prefetchers follow a few
 * streams, not one per band); BIL line by line, each line's bands read in
 * order (1.6x band by band there: 9.2-9.6 -> 14.9-15.2 GB/s on 512 MiB of
 * uint16, whose band rows lie a line apart). The same floats either way. */
static void fused_planes(const fused_ctx *c, float *dst, int64_t tl0, int64_t tl1, int64_t dl0, int64_t dL,
                         float *stg, int64_t rl, float *scr)
{
    const hsi_view *cube = c->cube;
    int64_t sb = cube->strides[0] < 0 ? -cube->strides[0] : cube->strides[0],
            sl = cube->strides[1] < 0 ? -cube->strides[1] : cube->strides[1];
    if (sb < sl) /* BIL-like */
        for (int64_t y = tl0; y < tl1; y++)
            for (int64_t j = 0; j < c->nf; j++) fused_plane_rows(c, dst, j, y, y + 1, dl0, dL, stg, rl, scr);
    else
        for (int64_t j = 0; j < c->nf; j++) fused_plane_rows(c, dst, j, tl0, tl1, dl0, dL, stg, rl, scr);
}

static hsi_status fused_worker(void *vc, int t, int nt)
{
    fused_ctx *c = vc;
    hsi_status st = HSI_OK;
    const hsi_view *cube = c->cube;
    int64_t L = cube->shape[1], S = cube->shape[2], nf = c->nf, no = c->n_out, ch = c->chunk;
    int in_bm = !hsi_kern_pixel_major_input(cube), out_pm = c->pixel_major;
    /* products are staged per block when they are streamed out, or when
     * band-major rows more than 2^31 elements apart cannot be a BLAS ldc */
    int stage = c->stream || (c->W && !out_pm && (c->sink ? c->tile : L) * S > INT_MAX);
    int planes = !c->W && !out_pm && !c->pp.l2 && in_bm;
    /* plane rows per load: up to 2048 pixels (the loader's scratch grows
     * with them), up to the staging block */
    int64_t rl = !planes ? 0 : S < 2048 ? S : 2048;
    if (stage && rl > ch * no) rl = ch * no;
    /* rows to pixel-major without a projection: the loaded rows and the
     * staged pixels padded, as the band-major staging rows are */
    int pm_pad = !c->W && in_bm && out_pm;
    float *blk = hsi_aligned_alloc(sizeof(float) * (size_t)((ch + STAGE_PAD) * nf));
    float *scr = hsi_aligned_alloc(sizeof(float) * (size_t)hsi_kern_scratch_len(cube, rl > ch ? rl : ch, nf));
    /* staging: band-major rows of ch + pad, or pixels of no + pad */
    float *stg = stage ? hsi_aligned_alloc(sizeof(float) * (size_t)((ch + STAGE_PAD) * (no + STAGE_PAD))) : NULL;
    float *tilebuf = c->sink ? hsi_aligned_alloc(sizeof(float) * (size_t)(c->tile * S * no)) : NULL;
    float *ytl = c->Wpk ? hsi_aligned_alloc(sizeof(float) * (size_t)(ch * c->kpad)) : NULL;
    int32_t *off = c->Wpk ? malloc(sizeof(int32_t) * (size_t)nf) : NULL;
    if (!blk || !scr || (c->sink && !tilebuf) || (stage && !stg) || (c->Wpk && (!ytl || !off))) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "fused pass: cannot allocate blocks for %lld pixels x %lld bands",
                      (long long)ch, (long long)nf);
        goto cleanup;
    }
    /* tiles go round-robin to the threads, so the sink can take them in
     * line order while at most n_threads tiles are held */
    int64_t n_tiles = (L + c->tile - 1) / c->tile;
    for (int64_t ti = t; ti < n_tiles; ti += nt) {
        int64_t tl0 = ti * c->tile, tl1 = tl0 + c->tile < L ? tl0 + c->tile : L;
        /* destination of this tile: the tile buffer, or the output array */
        float *dst = c->sink ? tilebuf : c->out;
        int64_t dl0 = c->sink ? tl0 : 0, dL = c->sink ? tl1 - tl0 : L;
        if (planes) fused_planes(c, dst, tl0, tl1, dl0, dL, stg, rl, scr);
        for (int64_t y = tl0; y < (planes ? tl0 : tl1); y++) {
            for (int64_t s0 = 0; s0 < S; s0 += ch) {
                int64_t np = S - s0 < ch ? S - s0 : ch;
                int64_t ld = in_bm ? np : nf, yl = y - dl0;
                /* where this block's products go: pixel-major (np, no),
                 * pixels bld apart, or band-major rows bld apart */
                float *bd = stage ? stg : out_pm ? dst + (yl * S + s0) * no : dst + yl * S + s0;
                int64_t bld = out_pm ? (stage && pm_pad ? no + STAGE_PAD : no) : stage ? ch + STAGE_PAD : dL * S;
                if (!c->W && in_bm == !out_pm) {
                    /* no projection and the same orientation: the loader
                     * writes the products itself */
                    hsi_kern_load_f32(bd, bld, in_bm, cube, &c->pp, y, s0, np, scr);
                } else if (c->Wpk) {
                    hsi_kern_load_f32(blk, ld, in_bm, cube, &c->pp, y, s0, np, scr);
                    for (int64_t j = 0; j < nf; j++) off[j] = (int32_t)(in_bm ? j * np : j);
                    /* ytl (np, kpad) = the pixels' projections; Wpk: W in
                     * blocks of 16 components (nf, 16), zero past k */
                    hsi_c512_rows(ytl, c->kpad, blk, in_bm ? 1 : nf, off, nf, c->Wpk, 16 * nf, np, c->kpad);
                    if (out_pm)
                        for (int64_t r = 0; r < np; r++)
                            memcpy(bd + r * bld, ytl + r * c->kpad, sizeof(float) * (size_t)c->k);
                    else
                        hsi_kern_transpose_f32(bd, bld, ytl, c->kpad, np, c->k);
                } else if (c->W) {
                    int k = (int)c->k;
                    hsi_kern_load_f32(blk, ld, in_bm, cube, &c->pp, y, s0, np, scr);
                    if (out_pm && in_bm) /* blk: (nf, np); Y = blk^T W^T */
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasTrans, (int)np, k, (int)nf, 1.0f, blk,
                                    (int)np, c->W, (int)nf, 0.0f, bd, (int)bld);
                    else if (out_pm) /* blk: (np, nf); Y = blk W^T */
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)np, k, (int)nf, 1.0f, blk,
                                    (int)nf, c->W, (int)nf, 0.0f, bd, (int)bld);
                    else if (in_bm) /* Y = W blk */
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, k, (int)np, (int)nf, 1.0f, c->W,
                                    (int)nf, blk, (int)np, 0.0f, bd, (int)bld);
                    else /* Y = W blk^T */
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, k, (int)np, (int)nf, 1.0f, c->W,
                                    (int)nf, blk, (int)nf, 0.0f, bd, (int)bld);
                } else {
                    /* the other orientation: the loaded block transposed */
                    int64_t lt = pm_pad ? np + STAGE_PAD : ld;
                    hsi_kern_load_f32(blk, lt, in_bm, cube, &c->pp, y, s0, np, scr);
                    if (out_pm) /* blk (nf, np) -> (np, no) */
                        hsi_kern_transpose_f32(bd, bld, blk, lt, nf, np);
                    else /* blk (np, nf) -> rows of bld */
                        hsi_kern_transpose_f32(bd, bld, blk, nf, np, nf);
                }
                if (stage) fused_store(c, dst, stg, yl, dL, s0, np, bld);
            }
        }
        if (c->stream) hsi_kern_stream_fence();
        hsi_kern_release_lines(cube, tl0, tl1);
        if (c->sink) {
            pthread_mutex_lock(&c->lock);
            while (c->next_emit != ti && !c->failed) pthread_cond_wait(&c->turn, &c->lock);
            if (!c->failed) st = c->sink(c->sink_ctx, tilebuf, tl0, tl1 - tl0, no, S, out_pm);
            c->next_emit++;
            if (st != HSI_OK) c->failed = 1;
            pthread_cond_broadcast(&c->turn);
            pthread_mutex_unlock(&c->lock);
            if (st != HSI_OK) goto cleanup;
            if (c->failed) break;
        }
        if (c->prog) {
            int64_t d = __atomic_add_fetch(c->lines_done, tl1 - tl0, __ATOMIC_RELAXED);
            if (t == 0) hsi_progress_update(c->prog, d);
        }
    }
cleanup:
    if (st != HSI_OK && c->sink) {
        pthread_mutex_lock(&c->lock);
        c->failed = 1;
        pthread_cond_broadcast(&c->turn);
        pthread_mutex_unlock(&c->lock);
    }
    hsi_aligned_free(blk);
    hsi_aligned_free(scr);
    hsi_aligned_free(tilebuf);
    hsi_aligned_free(stg);
    hsi_aligned_free(ytl);
    free(off);
    return st;
}

const char *hsi_fused_cuda_unsupported(const hsi_view *cube, const hsi_fused_opts *o)
{
    (void)o;
    if (cube && cube->ndim == 3 && cube->shape[1] * cube->shape[2] > INT32_MAX / 2)
        return "a cube has at most 2^30 pixels (cuBLAS's int dimensions)";
    return NULL;
}

hsi_status hsi_fused_run(float *out, const hsi_view *cube, const hsi_norm *norm_in, const hsi_pca *pca,
                         const hsi_fused_opts *opts)
{
    hsi_status st = HSI_OK;
    hsi_fused_opts o0 = {0};
    const hsi_fused_opts *o = opts ? opts : &o0;
    fused_ctx c = {0};
    float *W = NULL, *Wpk = NULL;
    hsi_progress prog;
    int64_t done = 0;
    int blas_prev;
    hsi_device dev;
    HSI_TRY(hsi_device_pick(&dev, o->device, hsi_view_on_device(cube), "fused pass",
                            hsi_fused_cuda_unsupported(cube, o)));
    if (dev == HSI_DEVICE_CUDA) return hsi_fused_run_cuda(out, 0, cube, norm_in, pca, o);
    HSI_TRY(hsi_kern_check_cube(cube, "fused pass"));
    const hsi_norm *norm = pca ? &pca->norm : norm_in;
    if (!norm) {
        st = HSI_FAIL(HSI_ERR_ARG, "fused pass: needs a normalisation map or a PCA model");
        goto cleanup;
    }
    if (norm->n_cube_bands != cube->shape[0]) {
        st = HSI_FAIL(HSI_ERR_ARG, "fused pass: the %s is for a %lld-band cube, this cube has %lld bands",
                      pca ? "PCA model" : "normalisation", (long long)norm->n_cube_bands,
                      (long long)cube->shape[0]);
        goto cleanup;
    }
    for (int64_t j = 0; j < norm->n_bands; j++)
        if (norm->bands[j] < 0 || norm->bands[j] >= cube->shape[0]) {
            st = HSI_FAIL(HSI_ERR_ARG, "fused pass: band index %lld out of range", (long long)norm->bands[j]);
            goto cleanup;
        }
    if (!out && !o->sink) {
        st = HSI_FAIL(HSI_ERR_ARG, "fused pass: give an output array or a sink");
        goto cleanup;
    }
    int64_t L = cube->shape[1], nf = norm->n_bands;
    c.cube = cube;
    c.nf = nf;
    c.n_out = hsi_fused_n_out(norm, pca);
    c.pp.n_bands = nf;
    c.pp.bands = norm->bands;
    c.pp.scale = norm->scale;
    c.pp.center = norm->center;
    c.pp.offset = norm->offset;
    c.pp.fill = norm->has_ignore ? norm->fill : NULL;
    c.pp.has_ignore = norm->has_ignore;
    c.pp.ignore_value = norm->ignore_value;
    c.pp.l2 = norm->l2;
    if (pca) {
        c.k = pca->n_components;
        c.pp.sub = pca->mean;
        W = malloc(sizeof(float) * (size_t)(c.k * nf));
        if (!W) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "fused pass: out of memory");
            goto cleanup;
        }
        for (int64_t r = 0; r < c.k; r++) {
            double f = pca->whiten ? 1.0 / sqrt(pca->explained_variance[r]) : 1.0;
            for (int64_t j = 0; j < nf; j++) W[r * nf + j] = (float)(pca->components[r * nf + j] * f);
        }
        c.W = W;
        if (hsi_kern_tiles()) { /* the projection on the AVX-512 tiles */
            c.kpad = (c.k + 15) / 16 * 16;
            Wpk = hsi_aligned_alloc(sizeof(float) * (size_t)(c.kpad * nf));
            if (!Wpk) {
                st = HSI_FAIL(HSI_ERR_NOMEM, "fused pass: out of memory");
                goto cleanup;
            }
            for (int64_t b0 = 0; b0 < c.kpad; b0 += 16)
                for (int64_t j = 0; j < nf; j++)
                    for (int64_t i = 0; i < 16; i++)
                        Wpk[(b0 * nf) + j * 16 + i] = b0 + i < c.k ? W[(b0 + i) * nf + j] : 0.0f;
            c.Wpk = Wpk;
        }
    }
    c.pixel_major = o->pixel_major;
    c.tile = o->tile_lines > 0 ? o->tile_lines : 64;
    c.chunk = 65536 / (nf > 0 ? nf : 1);
    if (c.chunk < 256) c.chunk = 256;
    if (!c.W && hsi_kern_pixel_major_input(cube) != (c.pixel_major != 0)) {
        /* the other orientation without a projection: each block is
         * loaded, then transposed into padded rows; blocks of 1 MiB (1024
         * pixels of 256 bands) went fastest: 512 MiB uint16, BIP to
         * band-major 9.1-10.1 GB/s against 7.3-8.2 for 64 pixels and 4.8
         * for 256 unpadded; BIL to pixel-major 9.5-9.7 against 7.3-7.6
         * for 256 pixels padded and 4.1-4.6 unpadded */
        c.chunk = 262144 / (nf > 0 ? nf : 1);
        if (c.chunk < 256) c.chunk = 256;
    }
    if (c.chunk > cube->shape[2]) c.chunk = cube->shape[2] > 0 ? cube->shape[2] : 1;
    c.out = out;
    /* an output array far bigger than the caches is written around them */
    c.stream = !o->sink && (double)c.n_out * (double)L * (double)cube->shape[2] * 4.0 >= (double)(64 << 20);
    c.sink = o->sink;
    c.sink_ctx = o->sink_ctx;
    pthread_mutex_init(&c.lock, NULL);
    pthread_cond_init(&c.turn, NULL);
    int nt = o->n_threads > 0 ? o->n_threads : hsi_threads();
    if (nt > L) nt = (int)(L > 0 ? L : 1);
    if (o->progress_label) {
        hsi_progress_begin(&prog, o->progress_label, L);
        c.prog = &prog;
        c.lines_done = &done;
    }
    blas_prev = hsi_kern_blas_single_begin();
    st = hsi_parallel(nt, fused_worker, &c);
    hsi_kern_blas_single_end(blas_prev);
    if (c.prog) hsi_progress_end(c.prog);
    pthread_mutex_destroy(&c.lock);
    pthread_cond_destroy(&c.turn);
cleanup:
    free(W);
    hsi_aligned_free(Wpk);
    return st;
}

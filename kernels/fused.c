/* fused.c — select -> normalise -> project in one read of the raw cube.
 * Each worker owns a contiguous range of lines; per pixel block it loads
 * the selected bands through the per-band affine (+L2, - PCA mean) in the
 * input's natural orientation, multiplies by the components with one sgemm
 * (float32 throughout: centred values, sgemm) and stores float32 in the
 * requested layout. Not the reference: that is
 * hsi_normalize_cpu followed by hsi_pca_transform_features. */
#include "fused.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kern_internal.h"
#include "kernels/cuda.h"

int64_t hsi_fused_n_out(const hsi_norm *norm, const hsi_pca *pca)
{
    return pca ? pca->n_components : norm ? norm->n_bands : 0;
}

typedef struct fused_ctx {
    const hsi_view *cube;
    hsi_kern_prep pp;
    const float *W;      /* (k, nf) row-major, whitening folded in; NULL = no PCA */
    int64_t k, nf, n_out, chunk, tile;
    int pixel_major;
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

static hsi_status fused_worker(void *vc, int t, int nt)
{
    fused_ctx *c = vc;
    hsi_status st = HSI_OK;
    const hsi_view *cube = c->cube;
    int64_t L = cube->shape[1], S = cube->shape[2], nf = c->nf, no = c->n_out, ch = c->chunk;
    int in_bm = !hsi_kern_pixel_major_input(cube), out_pm = c->pixel_major;
    float *blk = hsi_aligned_alloc(sizeof(float) * (size_t)(ch * nf));
    float *scr = hsi_aligned_alloc(sizeof(float) * (size_t)hsi_kern_scratch_len(cube, ch, nf));
    /* band-major rows more than 2^31 elements apart cannot be a BLAS ldc */
    int need_y = c->W && !out_pm && (c->sink ? c->tile : L) * S > INT_MAX;
    float *Y = need_y ? hsi_aligned_alloc(sizeof(float) * (size_t)(ch * c->k)) : NULL;
    float *tilebuf = c->sink ? hsi_aligned_alloc(sizeof(float) * (size_t)(c->tile * S * no)) : NULL;
    if (!blk || !scr || (c->sink && !tilebuf) || (need_y && !Y)) {
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
        for (int64_t y = tl0; y < tl1; y++) {
            for (int64_t s0 = 0; s0 < S; s0 += ch) {
                int64_t np = S - s0 < ch ? S - s0 : ch;
                int64_t ld = in_bm ? np : nf, yl = y - dl0;
                if (!c->W && in_bm == !out_pm) {
                    /* no projection and the same orientation: the loader
                     * writes straight into the destination */
                    if (out_pm)
                        hsi_kern_load_f32(dst + (yl * S + s0) * no, no, 0, cube, &c->pp, y, s0, np, scr);
                    else
                        hsi_kern_load_f32(dst + yl * S + s0, dL * S, 1, cube, &c->pp, y, s0, np, scr);
                    continue;
                }
                hsi_kern_load_f32(blk, ld, in_bm, cube, &c->pp, y, s0, np, scr);
                if (c->W) {
                    /* the product lands in the destination itself: pixel-major
                     * (np, k) rows of k, or band-major (k, np) rows dL*S apart */
                    int k = (int)c->k;
                    if (out_pm) {
                        float *Yd = dst + (yl * S + s0) * no;
                        if (in_bm) /* blk: (nf, np); Y = blk^T W^T */
                            cblas_sgemm(CblasRowMajor, CblasTrans, CblasTrans, (int)np, k, (int)nf, 1.0f,
                                        blk, (int)np, c->W, (int)nf, 0.0f, Yd, k);
                        else /* blk: (np, nf); Y = blk W^T */
                            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)np, k, (int)nf, 1.0f,
                                        blk, (int)nf, c->W, (int)nf, 0.0f, Yd, k);
                    } else {
                        float *Yd = Y ? Y : dst + yl * S + s0;
                        int ldy = Y ? (int)np : (int)(dL * S);
                        if (in_bm) /* Y = W blk */
                            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, k, (int)np, (int)nf, 1.0f,
                                        c->W, (int)nf, blk, (int)np, 0.0f, Yd, ldy);
                        else /* Y = W blk^T */
                            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, k, (int)np, (int)nf, 1.0f,
                                        c->W, (int)nf, blk, (int)nf, 0.0f, Yd, ldy);
                        for (int64_t o = 0; Y && o < k; o++)
                            memcpy(dst + (o * dL + yl) * S + s0, Y + o * np, sizeof(float) * (size_t)np);
                    }
                    continue;
                }
                const float *R = blk; /* result: element (p, o) */
                int64_t rs_p = in_bm ? 1 : nf, rs_o = in_bm ? np : 1;
                if (out_pm) {
                    float *d = dst + (yl * S + s0) * no;
                    for (int64_t p = 0; p < np; p++)
                        for (int64_t o = 0; o < no; o++) d[p * no + o] = R[p * rs_p + o * rs_o];
                } else {
                    /* 16 x 16 tiles: a transposing store stays in cache */
                    for (int64_t o0 = 0; o0 < no; o0 += 16)
                        for (int64_t p0 = 0; p0 < np; p0 += 16) {
                            int64_t o1 = o0 + 16 < no ? o0 + 16 : no, p1 = p0 + 16 < np ? p0 + 16 : np;
                            for (int64_t o = o0; o < o1; o++) {
                                float *d = dst + (o * dL + yl) * S + s0;
                                for (int64_t p = p0; p < p1; p++) d[p] = R[p * rs_p + o * rs_o];
                            }
                        }
                }
            }
        }
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
    hsi_aligned_free(Y);
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
    float *W = NULL;
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
    }
    c.pixel_major = o->pixel_major;
    c.tile = o->tile_lines > 0 ? o->tile_lines : 64;
    c.chunk = 65536 / (nf > 0 ? nf : 1);
    if (c.chunk < 256) c.chunk = 256;
    if (c.chunk > cube->shape[2]) c.chunk = cube->shape[2] > 0 ? cube->shape[2] : 1;
    c.out = out;
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
    return st;
}

/* pca.c — PCA on the CPU: covariance over blocks of pixels shifted by a
 * first spectrum (AVX-512 register tiles, in exact int16 pair products for
 * raw 8/16-bit bands where the CPU has VNNI, else in float; or ssyrk),
 * each block's product added into double sums
 * (per thread, BLAS single-threaded inside our workers), eigenpairs by
 * LAPACKE_dsyevr, component choice, sign rule, model file, reference
 * transforms. The fast cube transform is in fused.c. */
#include "pca.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kern_internal.h"
#include "kernels/cuda.h"
#include "kernels/tiles512.h"

void hsi_pca_free(hsi_pca *p)
{
    if (!p) return;
    hsi_norm_free(&p->norm);
    free(p->mean);
    free(p->components);
    free(p->explained_variance);
    free(p->explained_variance_ratio);
    memset(p, 0, sizeof *p);
}

/* ------------------------------------------------------------ covariance */

/* Per thread: the block of loaded pixels being filled. Per chunk of lines
 * (the statistics pass's fixed chunks, each read by one thread): double
 * sums. Blocks fill across the lines of a chunk and are flushed at its end,
 * so the sums depend on the chunking only: the same bits on any number of
 * threads, from the covariance pass or from the statistics pass's hook. */
typedef struct cov_scratch {
    float *blk, *scr, *Cf, *ones, *colsum;
    float *pk;            /* tiles: blk in blocks of 16 features (fill, 16); the lanes past nf,
                             zeroed once, only ever reach Cf's columns past nf, never read */
    int32_t *off;         /* tiles: the pixels' offsets in blk */
    int32_t *pq, *Ci, *isum, *mid; /* ints: pairs of pixels (fill / 2 rounded up, ldc); the
                                      int32 products (nf, ldc); the block's column sums and
                                      midpoints (ldc each) */
    uint16_t *rw;         /* raw16: the block's raw rows (nf, chunk) */
    int64_t fill;         /* pixels in blk */
} cov_scratch;
typedef struct cov_sums {
    double *S, *s;        /* (nf, nf) upper triangle; (nf) */
    int64_t n, l1;        /* pixels summed; end of the chunk's lines */
} cov_sums;

typedef struct cov_ctx {
    const hsi_view *cube;
    hsi_kern_prep pp;     /* norm + sub = shift */
    const uint8_t *mask;
    int64_t chunk, tile, nf, n_chunks, next_chunk;
    int64_t ldc;          /* floats between the rows of Cf: nf, or nf rounded up to 16 (tiles) */
    int nt, tiles;        /* tiles: Cf by the AVX-512 register tiles, not ssyrk */
    int ints;             /* tiles on integer features (raw 8/16-bit bands, an integer
                             shift): blocks whose values fit int16 go by VNNI (cov_int_sums) */
    int raw16;            /* ints on 16-bit rows of samples in native order, no mask: the
                             blocks are the raw rows (cov_raw16) */
    double *shift;        /* (nf) features of the first selected pixel */
    cov_scratch *thr;     /* (nt) */
    cov_sums *sums;       /* (n_chunks) */
    const hsi_pass_split *split;
    hsi_progress *prog;
    int64_t *lines_done;
} cov_ctx;

/* Pixels per float product of the tiles before it is added into double.
 * On a 512 MiB uint16 cube of 200 bands (zscore, 30 components) against
 * float64 numpy: the largest relative eigenvalue error was 2.0e-2 with a
 * float sum over the whole 1310-pixel block, 5.0e-3 at 256, 1.1e-3 at 128
 * and 1.5e-4 at 64; ssyrk over the block, 6.0e-3. The double adds cost
 * nothing measurable at 64. */
#define COV_TILE_PIX 64

/* S (double) += the upper triangle of Cf (rows ldc floats apart) */
static void cov_add_upper(cov_sums *u, const float *Cf, int64_t nf, int64_t ldc)
{
    for (int64_t i = 0; i < nf; i++)
        for (int64_t j = i; j < nf; j++) u->S[i * nf + j] += Cf[i * ldc + j];
}

/* The block's features X (nf, fill) packed for the tiles in blocks of 16
 * features (pk: (fill, 16) each). */
static void cov_pack(cov_ctx *c, cov_scratch *p, int bm)
{
    int64_t nf = c->nf, ch = c->chunk, fill = p->fill;
    for (int64_t b0 = 0; b0 < nf; b0 += 16) {
        int64_t nb = nf - b0 < 16 ? nf - b0 : 16;
        float *pb = p->pk + b0 * fill;
        if (bm) /* blk (nf, fill), ld ch */
            hsi_kern_transpose_f32(pb, 16, p->blk + b0 * ch, ch, nb, fill);
        else /* blk (fill, nf) */
            for (int64_t k = 0; k < fill; k++)
                memcpy(pb + 16 * k, p->blk + k * nf + b0, sizeof(float) * (size_t)nb);
    }
}

/* S (double, upper triangle) += X X^T from pk, on the AVX-512 register
 * tiles: per COV_TILE_PIX pixels tiles of up to 12 rows by 32 columns into
 * Cf (rows of ldc), those holding any element on or above the diagonal,
 * added into S. */
static void cov_tiles(cov_ctx *c, cov_scratch *p, cov_sums *u, int bm)
{
    int64_t nf = c->nf, ch = c->chunk, fill = p->fill, ldc = c->ldc;
    for (int64_t k = 0; k < fill; k++) p->off[k] = (int32_t)(bm ? k : k * nf);
    for (int64_t k0 = 0; k0 < fill; k0 += COV_TILE_PIX) {
        int64_t nk = fill - k0 < COV_TILE_PIX ? fill - k0 : COV_TILE_PIX, tk;
        for (int64_t j0 = 0; j0 < ldc; j0 += tk) {
            tk = ldc - j0 > 16 ? 32 : 16;
            int64_t i_end = j0 + tk < nf ? j0 + tk : nf; /* rows reaching the diagonal */
            hsi_c512_rows(p->Cf + j0, ldc, p->blk + p->off[k0], bm ? ch : 1, p->off, nk,
                          p->pk + j0 * fill + 16 * k0, 16 * fill, i_end, tk);
        }
        cov_add_upper(u, p->Cf, nf, ldc);
    }
}

/* The block by exact integer products (c->ints): its values are integers
 * shifted by the midpoint of each feature's range in the block, packed as
 * int16 pairs of pixels in p->pq (vpdpwssd adds two products into each
 * int32 lane), with their sums p->isum and the midpoints p->mid, measured
 * from the chunk's shift; r = max |value - mid| (hsi_c512_pack_i16 and
 * hsi_c512_pack_rows16). The int32 sums of z = x - mid go into S before
 * they can overflow, every m pairs, m = (2^31 - 1) / (2 r^2), then S and s
 * are moved back to x: x_i x_j = z_i z_j + mid_i z_j + mid_j z_i + mid_i
 * mid_j summed over the block, all exact in double. Returns 0, having
 * added nothing, when r > 32767 or m < 16 (more spills than products: the
 * float tiles then take the block). The choice depends on the block's
 * values only, so the sums keep their bits on any number of threads. */
static int cov_int_sums(cov_ctx *c, cov_scratch *p, cov_sums *u, uint32_t r)
{
    int64_t nf = c->nf, fill = p->fill, ldc = c->ldc, nq = (fill + 1) / 2, tk;
    if (r > 32767) return 0;
    int64_t m = r ? INT32_MAX / (2 * (int64_t)r * r) : nq;
    if (m < 16 && m < nq) return 0;
    for (int64_t q0 = 0; q0 < nq; q0 += m) {
        int64_t mq = nq - q0 < m ? nq - q0 : m;
        const int32_t *a = p->pq + q0 * ldc;
        for (int64_t j0 = 0; j0 < ldc; j0 += tk) {
            tk = ldc - j0 > 16 ? 32 : 16;
            int64_t i_end = j0 + tk < nf ? j0 + tk : nf; /* rows reaching the diagonal */
            hsi_c512_rows_i16(p->Ci + j0, ldc, a, a + j0, ldc, mq, i_end, tk);
        }
        for (int64_t i = 0; i < nf; i++)
            for (int64_t j = i; j < nf; j++) u->S[i * nf + j] += p->Ci[i * ldc + j];
    }
    const int32_t *mid = p->mid, *zs = p->isum;
    for (int64_t i = 0; i < nf; i++) {
        double mi = mid[i], zi = zs[i], fm = (double)fill * mi;
        for (int64_t j = i; j < nf; j++) u->S[i * nf + j] += mi * zs[j] + mid[j] * zi + fm * mid[j];
        u->s[i] += zi + fm;
    }
    return 1;
}

/* Raw 16-bit band rows (c->raw16): the exact integer products straight
 * from the rows copied out of the cube; 0 when they do not take the block
 * (cov_int_sums), which is then converted to the shifted floats of blk. */
static int cov_raw16(cov_ctx *c, cov_scratch *p, cov_sums *u)
{
    int64_t nf = c->nf, ch = c->chunk, fill = p->fill;
    uint32_t r = hsi_c512_pack_rows16(p->pq, c->ldc, p->isum, p->mid, p->rw, ch, nf, fill,
                                      c->cube->dtype == HSI_I16);
    if (r <= 32767) {
        for (int64_t j = 0; j < nf; j++) p->mid[j] -= (int32_t)c->shift[j]; /* from the chunk's shift */
        if (cov_int_sums(c, p, u, r)) return 1;
    }
    int sgn = c->cube->dtype == HSI_I16;
    for (int64_t j = 0; j < nf; j++) {
        const uint16_t *x = p->rw + j * ch;
        float *o = p->blk + j * ch, sh = (float)c->shift[j];
        for (int64_t k = 0; k < fill; k++) o[k] = (float)(sgn ? (int16_t)x[k] : x[k]) - sh;
    }
    return 0;
}

static void cov_flush(cov_ctx *c, cov_scratch *p, cov_sums *u)
{
    int64_t nf = c->nf, ch = c->chunk, fill = p->fill, ldc = c->ldc;
    int bm = !hsi_kern_pixel_major_input(c->cube);
    if (fill == 0) return;
    if (c->raw16 && cov_raw16(c, p, u)) goto done;
    /* shifted values; Cf = X^T X (upper) in float over one block, then
     * added into the double S */
    if (c->tiles) {
        cov_pack(c, p, bm);
        if (c->ints && !c->raw16 &&
            cov_int_sums(c, p, u, hsi_c512_pack_i16(p->pq, ldc, p->isum, p->mid, p->pk, fill, ldc / 16)))
            goto done;
        cov_tiles(c, p, u, bm);
    } else if (bm) /* blk: (nf, fill) row-major, ld ch: Cf = blk blk^T */
        cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, (int)nf, (int)fill, 1.0f, p->blk, (int)ch, 0.0f,
                    p->Cf, (int)ldc);
    else /* blk: (fill, nf) row-major: Cf = blk^T blk */
        cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, (int)nf, (int)fill, 1.0f, p->blk, (int)nf, 0.0f,
                    p->Cf, (int)ldc);
    if (!c->tiles) cov_add_upper(u, p->Cf, nf, ldc);
    /* column sums of the block by sgemv against ones, into double */
    if (bm) /* colsum = blk (nf, fill) . ones */
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)nf, (int)fill, 1.0f, p->blk, (int)ch, p->ones, 1, 0.0f,
                    p->colsum, 1);
    else /* colsum = blk^T (fill, nf)^T . ones */
        cblas_sgemv(CblasRowMajor, CblasTrans, (int)fill, (int)nf, 1.0f, p->blk, (int)nf, p->ones, 1, 0.0f,
                    p->colsum, 1);
    for (int64_t j = 0; j < nf; j++) u->s[j] += p->colsum[j];
done:
    u->n += fill;
    p->fill = 0;
}

/* Adds lines [y0, y1) of chunk k to its sums, on thread t's block. */
static void cov_lines(cov_ctx *c, int64_t k, int t, int64_t y0, int64_t y1)
{
    cov_scratch *p = &c->thr[t];
    cov_sums *u = &c->sums[k];
    const hsi_view *cube = c->cube;
    int64_t nf = c->nf, S = cube->shape[2], ch = c->chunk;
    int bm = !hsi_kern_pixel_major_input(cube);
    for (int64_t y = y0; y < y1; y++) {
        for (int64_t s0 = 0; s0 < S;) {
            int64_t np = S - s0 < ch - p->fill ? S - s0 : ch - p->fill;
            /* band-major block (nf, ch) for row inputs (BSQ, BIL): no
             * transposition; pixel-major (ch, nf) for spectra inputs (BIP) */
            float *dst = bm ? p->blk + p->fill : p->blk + p->fill * nf;
            if (c->raw16) { /* the raw rows, converted only if the ints refuse the block */
                const uint8_t *row = (const uint8_t *)cube->buf->data + cube->offset + y * cube->strides[1] +
                                     s0 * cube->strides[2];
                for (int64_t j = 0; j < nf; j++)
                    memcpy(p->rw + j * ch + p->fill, row + (c->pp.bands ? c->pp.bands[j] : j) * cube->strides[0],
                           sizeof(uint16_t) * (size_t)np);
            } else {
                hsi_kern_load_f32(dst, bm ? ch : nf, bm, cube, &c->pp, y, s0, np, p->scr);
            }
            if (c->mask) { /* keep the selected pixels only */
                const uint8_t *mk = c->mask + y * S + s0;
                int64_t q2 = 0;
                for (int64_t q = 0; q < np; q++)
                    if (mk[q]) {
                        if (q2 != q) {
                            if (bm)
                                for (int64_t j = 0; j < nf; j++) dst[j * ch + q2] = dst[j * ch + q];
                            else
                                memmove(dst + q2 * nf, dst + q * nf, sizeof(float) * (size_t)nf);
                        }
                        q2++;
                    }
                p->fill += q2;
            } else {
                p->fill += np;
            }
            s0 += np;
            if (p->fill == ch || (y + 1 == u->l1 && s0 >= S)) cov_flush(c, p, u);
        }
    }
}

static hsi_status cov_worker(void *vc, int t, int nt)
{
    cov_ctx *c = vc;
    int64_t k0, k1, k;
    hsi_kern_split_range(c->split, c->n_chunks, &k0, &k1);
    while ((k = hsi_kern_next_chunk(&c->next_chunk, k0, k1)) >= 0) {
        int64_t l0, l1;
        hsi_split_range(c->cube->shape[1], (int)k, (int)c->n_chunks, &l0, &l1);
        for (int64_t y = l0; y < l1; y += c->tile) {
            int64_t y1 = y + c->tile < l1 ? y + c->tile : l1;
            cov_lines(c, k, t, y, y1);
            hsi_kern_release_lines(c->cube, y, y1);
            if (c->prog) {
                int64_t d = __atomic_add_fetch(c->lines_done, y1 - y, __ATOMIC_RELAXED);
                if (t == 0) hsi_progress_update(c->prog, d);
            }
        }
    }
    return HSI_OK;
}

/* The statistics pass's tile hook: the same lines, while they are in cache. */
static void cov_tile_hook(void *vc, int64_t k, int t, int64_t y0, int64_t y1)
{
    cov_lines(vc, k, t, y0, y1);
}

static hsi_status check_norm(const hsi_view *cube, const hsi_norm *norm, const char *what)
{
    if (norm->n_cube_bands != cube->shape[0])
        return HSI_FAIL(HSI_ERR_ARG, "%s: the band map is for %lld bands, the cube has %lld", what,
                        (long long)norm->n_cube_bands, (long long)cube->shape[0]);
    for (int64_t j = 0; j < norm->n_bands; j++)
        if (norm->bands[j] < 0 || norm->bands[j] >= cube->shape[0])
            return HSI_FAIL(HSI_ERR_ARG, "%s: band index %lld out of range", what, (long long)norm->bands[j]);
    return HSI_OK;
}

static void prep_from_norm(hsi_kern_prep *pp, const hsi_norm *n)
{
    memset(pp, 0, sizeof *pp);
    pp->n_bands = n->n_bands;
    pp->bands = n->bands;
    pp->scale = n->scale;
    pp->center = n->center;
    pp->offset = n->offset;
    pp->fill = n->has_ignore ? n->fill : NULL;
    pp->has_ignore = n->has_ignore;
    pp->ignore_value = n->ignore_value;
    pp->l2 = n->l2;
}

static void cov_ctx_free(cov_ctx *c)
{
    for (int t = 0; c->thr && t < c->nt; t++) {
        hsi_aligned_free(c->thr[t].blk);
        hsi_aligned_free(c->thr[t].scr);
        hsi_aligned_free(c->thr[t].Cf);
        hsi_aligned_free(c->thr[t].pk);
        free(c->thr[t].off);
        hsi_aligned_free(c->thr[t].pq);
        hsi_aligned_free(c->thr[t].Ci);
        hsi_aligned_free(c->thr[t].isum);
        hsi_aligned_free(c->thr[t].mid);
        hsi_aligned_free(c->thr[t].rw);
    }
    for (int64_t k = 0; c->sums && k < c->n_chunks; k++) {
        free(c->sums[k].S);
        free(c->sums[k].s);
    }
    free(c->thr);
    free(c->sums);
    free(c->shift);
    c->thr = NULL;
    c->sums = NULL;
    c->shift = NULL;
}

/* 1 when the features are a cube's raw 8- or 16-bit integers (a band
 * selection, no scaling, fill or l2): shifted by the first pixel's, they
 * are integers (|x| < 2^17, exact in float) for cov_int_sums. */
static int int_features(const hsi_view *cube, const hsi_norm *n)
{
    hsi_dtype dt = cube->dtype;
    if ((dt != HSI_U8 && dt != HSI_I8 && dt != HSI_U16 && dt != HSI_I16) || n->has_ignore || n->l2)
        return 0;
    for (int64_t j = 0; j < n->n_bands; j++)
        if (n->scale[j] != 1 || n->center[j] != 0 || n->offset[j] != 0) return 0;
    return 1;
}

/* Shift, block size, each thread's block and each chunk's sums for a pass
 * over cube through norm on nt threads (already capped at the lines). */
static hsi_status cov_ctx_init(cov_ctx *c, const hsi_view *cube, const hsi_norm *norm, const uint8_t *mask,
                               int64_t tile_lines, int nt)
{
    hsi_status st = HSI_OK;
    double *scr = NULL;
    int64_t L = cube->shape[1], S = cube->shape[2], nf = norm->n_bands;
    memset(c, 0, sizeof *c);
    /* shift = features of the first selected pixel: keeps the one-pass
     * sums well conditioned (|mean - shift| ~ one std) */
    int64_t first = -1;
    for (int64_t i = 0; i < L * S && first < 0; i++)
        if (!mask || mask[i]) first = i;
    if (first < 0) return HSI_FAIL(HSI_ERR_ARG, "covariance: the mask selects no pixel");
    c->cube = cube;
    c->mask = mask;
    c->nf = nf;
    c->nt = nt;
    c->n_chunks = hsi_kern_stats_chunks(cube, nf);
    c->tile = tile_lines > 0 ? tile_lines : 64;
    c->chunk = 262144 / (nf > 0 ? nf : 1);
    if (c->chunk < 256) c->chunk = 256;
    if (c->chunk > 4096) c->chunk = 4096;
    c->tiles = hsi_kern_tiles() && c->chunk * nf < INT32_MAX;
    c->ldc = c->tiles ? (nf + 15) / 16 * 16 : nf;
    c->ints = c->tiles && hsi_kern_ints() && int_features(cube, norm);
    c->raw16 = c->ints && (cube->dtype == HSI_U16 || cube->dtype == HSI_I16) && !cube->swapped &&
               !mask && cube->strides[2] == 2 && !hsi_kern_pixel_major_input(cube);
    c->shift = calloc((size_t)nf + 1, sizeof(double));
    scr = malloc(sizeof(double) * (size_t)hsi_kern_scratch_len(cube, 1, nf));
    c->thr = calloc((size_t)nt, sizeof(cov_scratch));
    c->sums = calloc((size_t)c->n_chunks, sizeof(cov_sums));
    if (!c->shift || !scr || !c->thr || !c->sums) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "covariance: out of memory");
        goto cleanup;
    }
    prep_from_norm(&c->pp, norm);
    hsi_kern_load_f64(c->shift, nf, 0, cube, &c->pp, first / S, first % S, 1, scr);
    c->pp.sub = c->shift;
    for (int t = 0; t < nt; t++) {
        cov_scratch *p = &c->thr[t];
        p->blk = hsi_aligned_alloc(sizeof(float) * (size_t)(c->chunk * nf));
        p->scr = hsi_aligned_alloc(sizeof(float) * (size_t)hsi_kern_scratch_len(cube, c->chunk, nf));
        p->Cf = hsi_aligned_alloc(sizeof(float) * (size_t)(nf * c->ldc + c->chunk + nf));
        if (c->tiles) {
            p->pk = hsi_aligned_alloc(sizeof(float) * (size_t)(c->ldc * c->chunk));
            p->off = malloc(sizeof(int32_t) * (size_t)c->chunk);
            if (p->pk) memset(p->pk, 0, sizeof(float) * (size_t)(c->ldc * c->chunk));
        }
        if (c->ints) {
            p->pq = hsi_aligned_alloc(sizeof(int32_t) * (size_t)((c->chunk / 2 + 1) * c->ldc));
            p->Ci = hsi_aligned_alloc(sizeof(int32_t) * (size_t)(nf * c->ldc));
            p->isum = hsi_aligned_alloc(sizeof(int32_t) * (size_t)c->ldc);
            p->mid = hsi_aligned_alloc(sizeof(int32_t) * (size_t)c->ldc);
        }
        if (c->raw16) p->rw = hsi_aligned_alloc(sizeof(uint16_t) * (size_t)(c->chunk * nf));
        if (!p->blk || !p->scr || !p->Cf || (c->tiles && (!p->pk || !p->off)) ||
            (c->ints && (!p->pq || !p->Ci || !p->isum || !p->mid)) || (c->raw16 && !p->rw)) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "covariance: cannot allocate a %lld x %lld block per thread",
                          (long long)c->chunk, (long long)nf);
            goto cleanup;
        }
        p->ones = p->Cf + nf * c->ldc;
        p->colsum = p->ones + c->chunk;
        for (int64_t q = 0; q < c->chunk; q++) p->ones[q] = 1.0f;
    }
    for (int64_t k = 0; k < c->n_chunks; k++) {
        cov_sums *u = &c->sums[k];
        int64_t l0;
        hsi_split_range(L, (int)k, (int)c->n_chunks, &l0, &u->l1);
        u->S = calloc((size_t)(nf * nf), sizeof(double));
        u->s = calloc((size_t)nf, sizeof(double));
        if (!u->S || !u->s) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "covariance: out of memory for %lld partial %lld^2 sums",
                          (long long)c->n_chunks, (long long)nf);
            goto cleanup;
        }
    }
cleanup:
    free(scr);
    if (st != HSI_OK) cov_ctx_free(c);
    return st;
}

/* Every process's chunk sums (n, S, s) to every process, for a split pass. */
static hsi_status cov_exchange(cov_ctx *c)
{
    int64_t nf = c->nf, C = c->n_chunks, w = 1 + nf * nf + nf;
    if (!c->split || c->split->n_parts <= 1) return HSI_OK;
    double *rows = malloc(sizeof(double) * (size_t)(C * w));
    if (!rows) return HSI_FAIL(HSI_ERR_NOMEM, "covariance: out of memory for %lld chunk sums", (long long)C);
    for (int64_t k = 0; k < C; k++) {
        rows[k * w] = (double)c->sums[k].n;
        memcpy(rows + k * w + 1, c->sums[k].S, sizeof(double) * (size_t)(nf * nf));
        memcpy(rows + k * w + 1 + nf * nf, c->sums[k].s, sizeof(double) * (size_t)nf);
    }
    hsi_status st = hsi_kern_split_exchange(c->split, rows, C, w);
    for (int64_t k = 0; st == HSI_OK && k < C; k++) {
        c->sums[k].n = (int64_t)rows[k * w];
        memcpy(c->sums[k].S, rows + k * w + 1, sizeof(double) * (size_t)(nf * nf));
        memcpy(c->sums[k].s, rows + k * w + 1 + nf * nf, sizeof(double) * (size_t)nf);
    }
    free(rows);
    return st;
}

/* Sums the chunks in order (after the exchange of a split pass):
 * mean = shift + s / n, cov = (S - s s^T / n) / (n - 1). */
static hsi_status cov_ctx_finish(cov_ctx *c, double *mean, double *cov, int64_t *n_used)
{
    int64_t nf = c->nf, n = 0;
    hsi_status st = cov_exchange(c);
    if (st != HSI_OK) return st;
    cov_sums *u0 = &c->sums[0];
    for (int64_t k = 0; k < c->n_chunks; k++) n += c->sums[k].n;
    if (n < 2) return HSI_FAIL(HSI_ERR_NUMERIC, "covariance: needs at least 2 pixels, found %lld", (long long)n);
    for (int64_t k = 1; k < c->n_chunks; k++) {
        for (int64_t i = 0; i < nf * nf; i++) u0->S[i] += c->sums[k].S[i];
        for (int64_t j = 0; j < nf; j++) u0->s[j] += c->sums[k].s[j];
    }
    for (int64_t i = 0; i < nf; i++) {
        mean[i] = c->shift[i] + u0->s[i] / (double)n;
        for (int64_t j = i; j < nf; j++) {
            double v = (u0->S[i * nf + j] - u0->s[i] * u0->s[j] / (double)n) / (double)(n - 1);
            cov[i * nf + j] = v;
            cov[j * nf + i] = v;
        }
    }
    if (n_used) *n_used = n;
    return HSI_OK;
}

const char *hsi_covariance_cuda_unsupported(const hsi_view *cube, const hsi_pca_opts *o)
{
    if (o && o->split && o->split->n_parts > 1) return "a pass shared by MPI ranks is computed on the CPU only";
    if (cube && cube->ndim == 3 && cube->shape[1] * cube->shape[2] > INT32_MAX / 2)
        return "a cube has at most 2^30 pixels (cuBLAS's int dimensions)";
    return NULL;
}

hsi_status hsi_covariance(double *mean, double *cov, int64_t *n_used, const hsi_view *cube,
                          const hsi_norm *norm_in, const hsi_pca_opts *opts)
{
    hsi_status st = HSI_OK;
    hsi_pca_opts o0 = {0};
    const hsi_pca_opts *o = opts ? opts : &o0;
    hsi_device dev;
    st = hsi_device_pick(&dev, o->device, hsi_view_on_device(cube), "covariance",
                         hsi_covariance_cuda_unsupported(cube, o));
    if (st != HSI_OK) return st;
    if (dev == HSI_DEVICE_CUDA) return hsi_covariance_cuda(mean, cov, n_used, cube, norm_in, o);
    hsi_norm idn = {0};
    const hsi_norm *norm = norm_in;
    uint8_t *mask = NULL;
    cov_ctx c = {0};
    hsi_progress prog;
    int64_t done = 0;
    HSI_TRY(hsi_kern_check_cube(cube, "covariance"));
    int64_t L = cube->shape[1], S = cube->shape[2];
    if (!norm) {
        HSI_TRY(hsi_norm_identity(&idn, cube->shape[0]));
        norm = &idn;
    }
    HSI_TRY(check_norm(cube, norm, "covariance"));
    HSI_TRY(hsi_kern_mask_pack(&mask, o->mask, L, S));
    int nt = o->n_threads > 0 ? o->n_threads : hsi_threads();
    if (nt > L) nt = (int)(L > 0 ? L : 1);
    HSI_TRY(cov_ctx_init(&c, cube, norm, mask, o->tile_lines, nt));
    c.split = o->split;
    if (o->progress_label) {
        hsi_progress_begin(&prog, o->progress_label, L);
        c.prog = &prog;
        c.lines_done = &done;
    }
    int blas_prev = hsi_kern_blas_single_begin();
    st = hsi_parallel(nt, cov_worker, &c);
    hsi_kern_blas_single_end(blas_prev);
    if (c.prog) hsi_progress_end(c.prog);
    if (st != HSI_OK) goto cleanup;
    HSI_TRY(cov_ctx_finish(&c, mean, cov, n_used));
cleanup:
    cov_ctx_free(&c);
    free(mask);
    hsi_norm_free(&idn);
    return st;
}

hsi_status hsi_stats_covariance(hsi_stats *stats, double *mean, double *cov, int64_t *n_used,
                                const hsi_view *cube, const int64_t *bands, int64_t n_bands,
                                const hsi_stats_opts *opts)
{
    hsi_status st = HSI_OK;
    hsi_stats_opts o0 = {0};
    const hsi_stats_opts *o = opts ? opts : &o0;
    hsi_norm sel = {0};
    uint8_t *mask = NULL;
    cov_ctx c = {0};
    memset(stats, 0, sizeof *stats);
    HSI_TRY(hsi_kern_check_cube(cube, "statistics and covariance"));
    if (o->has_ignore || o->hist_bins > 0)
        return HSI_FAIL(HSI_ERR_ARG, "statistics and covariance: one pass takes no ignore value and no "
                                     "histogram (the covariance would count what the statistics skip)");
    int64_t L = cube->shape[1], S = cube->shape[2];
    /* the raw values of the selected bands */
    HSI_TRY(hsi_norm_build(&sel, HSI_NORM_NONE, cube->shape[0], bands, bands ? n_bands : cube->shape[0], NULL,
                           NULL, 0, 0));
    HSI_TRY(check_norm(cube, &sel, "statistics and covariance"));
    HSI_TRY(hsi_kern_mask_pack(&mask, o->mask, L, S));
    /* the statistics pass caps its threads the same way */
    int nt = o->n_threads > 0 ? o->n_threads : hsi_threads();
    if (nt > L) nt = (int)(L > 0 ? L : 1);
    HSI_TRY(cov_ctx_init(&c, cube, &sel, mask, o->tile_lines, nt));
    c.split = o->split;
    hsi_stats_opts so = *o;
    so.n_threads = nt;
    int blas_prev = hsi_kern_blas_single_begin();
    st = hsi_stats_compute_hooked(stats, cube, &so, c.n_chunks, cov_tile_hook, &c);
    hsi_kern_blas_single_end(blas_prev);
    if (st != HSI_OK) goto cleanup;
    st = cov_ctx_finish(&c, mean, cov, n_used);
cleanup:
    if (st != HSI_OK) hsi_stats_free(stats);
    cov_ctx_free(&c);
    free(mask);
    hsi_norm_free(&sel);
    return st;
}

/* ------------------------------------------------------------------- fit */

hsi_status hsi_pca_fit_cov(hsi_pca *out, const double *mean, const double *cov, int64_t n_samples,
                           const hsi_norm *norm, const hsi_pca_opts *opts)
{
    hsi_status st = HSI_OK;
    hsi_pca_opts o0 = {0};
    const hsi_pca_opts *o = opts ? opts : &o0;
    int64_t nf = norm->n_bands;
    double *a = NULL, *w = NULL, *z = NULL;
    lapack_int *isuppz = NULL;
    memset(out, 0, sizeof *out);
    if (o->n_components < 0 || o->n_components > nf)
        return HSI_FAIL(HSI_ERR_ARG, "pca: n_components must be in 1..%lld, found %lld", (long long)nf,
                        (long long)o->n_components);
    if (o->n_components == 0 && !(o->variance_fraction >= 0 && o->variance_fraction <= 1))
        return HSI_FAIL(HSI_ERR_ARG, "pca: variance fraction must be in (0, 1], found %g", o->variance_fraction);
    a = malloc(sizeof(double) * (size_t)(nf * nf));
    w = malloc(sizeof(double) * (size_t)nf);
    z = malloc(sizeof(double) * (size_t)(nf * nf));
    isuppz = malloc(sizeof(lapack_int) * (size_t)(2 * nf));
    if (!a || !w || !z || !isuppz) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "pca: out of memory for a %lld^2 eigen problem", (long long)nf);
        goto cleanup;
    }
    memcpy(a, cov, sizeof(double) * (size_t)(nf * nf));
    lapack_int m = 0;
    /* a: (nf, nf) row-major symmetric (upper used); w ascending; z: (nf, nf)
     * row-major, column i = eigenvector of w[i]. On one BLAS thread: its
     * bits would depend on OpenBLAS's thread count (the hsi program runs
     * OpenBLAS on one thread, a program of the library's may not). */
    int blas_prev = hsi_kern_blas_single_begin();
    lapack_int info = LAPACKE_dsyevr(LAPACK_ROW_MAJOR, 'V', 'A', 'U', (lapack_int)nf, a, (lapack_int)nf,
                                     0, 0, 0, 0, 0.0, &m, w, z, (lapack_int)nf, isuppz);
    hsi_kern_blas_single_end(blas_prev);
    if (info != 0 || m != nf) {
        st = HSI_FAIL(HSI_ERR_NUMERIC, "pca: LAPACKE_dsyevr failed (info %d, %d of %lld eigenvalues)",
                      (int)info, (int)m, (long long)nf);
        goto cleanup;
    }
    double total = 0;
    for (int64_t i = 0; i < nf; i++) total += cov[i * nf + i];
    int64_t k = o->n_components;
    if (k == 0) {
        double f = o->variance_fraction > 0 ? o->variance_fraction : 1.0, cum = 0;
        k = nf;
        for (int64_t i = 0; i < nf; i++) {
            double ev = w[nf - 1 - i] > 0 ? w[nf - 1 - i] : 0;
            cum += total > 0 ? ev / total : 0;
            if (cum > f || (f >= 1.0 && i == nf - 1)) {
                k = i + 1;
                break;
            }
        }
    }
    HSI_TRY(hsi_norm_copy(&out->norm, norm));
    out->n_features = nf;
    out->n_components = k;
    out->n_samples = n_samples;
    out->whiten = o->whiten;
    out->total_variance = total;
    out->mean = malloc(sizeof(double) * (size_t)nf);
    out->components = malloc(sizeof(double) * (size_t)(k * nf));
    out->explained_variance = malloc(sizeof(double) * (size_t)k);
    out->explained_variance_ratio = malloc(sizeof(double) * (size_t)k);
    if (!out->mean || !out->components || !out->explained_variance || !out->explained_variance_ratio) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "pca: out of memory");
        goto cleanup;
    }
    memcpy(out->mean, mean, sizeof(double) * (size_t)nf);
    for (int64_t c = 0; c < k; c++) {
        int64_t col = nf - 1 - c;
        double ev = w[col] > 0 ? w[col] : 0;
        out->explained_variance[c] = ev;
        out->explained_variance_ratio[c] = total > 0 ? ev / total : 0;
        double *v = out->components + c * nf, big = -1;
        int64_t arg = 0;
        for (int64_t j = 0; j < nf; j++) {
            v[j] = z[j * nf + col];
            if (fabs(v[j]) > big) {
                big = fabs(v[j]);
                arg = j;
            }
        }
        if (v[arg] < 0)
            for (int64_t j = 0; j < nf; j++) v[j] = -v[j];
    }
    if (o->whiten)
        for (int64_t c = 0; c < k; c++)
            if (!(out->explained_variance[c] > 0)) {
                st = HSI_FAIL(HSI_ERR_NUMERIC, "pca: cannot whiten component %lld: its variance is 0",
                              (long long)c + 1);
                goto cleanup;
            }
cleanup:
    if (st != HSI_OK) hsi_pca_free(out);
    free(a);
    free(w);
    free(z);
    free(isuppz);
    return st;
}

hsi_status hsi_pca_fit(hsi_pca *out, const hsi_view *cube, const hsi_norm *norm_in,
                       const hsi_pca_opts *opts)
{
    hsi_status st = HSI_OK;
    hsi_norm idn = {0};
    const hsi_norm *norm = norm_in;
    double *mean = NULL, *cov = NULL;
    int64_t n = 0;
    memset(out, 0, sizeof *out);
    HSI_TRY(hsi_kern_check_cube(cube, "pca fit"));
    if (!norm) {
        HSI_TRY(hsi_norm_identity(&idn, cube->shape[0]));
        norm = &idn;
    }
    mean = malloc(sizeof(double) * (size_t)norm->n_bands);
    cov = malloc(sizeof(double) * (size_t)(norm->n_bands * norm->n_bands));
    if (!mean || !cov) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "pca fit: out of memory for %lld features", (long long)norm->n_bands);
        goto cleanup;
    }
    HSI_TRY(hsi_covariance(mean, cov, &n, cube, norm, opts));
    HSI_TRY(hsi_pca_fit_cov(out, mean, cov, n, norm, opts));
cleanup:
    free(mean);
    free(cov);
    hsi_norm_free(&idn);
    return st;
}

/* ---------------------------------------------------- reference transforms */

static hsi_status check_f32_out(const hsi_view *v, int64_t a, int64_t L, int64_t S, const char *what)
{
    if (!v || v->ndim != 3 || v->dtype != HSI_F32 || v->swapped || v->shape[0] != a || v->shape[1] != L ||
        v->shape[2] != S)
        return HSI_FAIL(HSI_ERR_ARG, "%s: output must be a native float32 (%lld, %lld, %lld) view", what,
                        (long long)a, (long long)L, (long long)S);
    return HSI_OK;
}

hsi_status hsi_pca_transform_features(hsi_view *scores, const hsi_view *features, const hsi_pca *p)
{
    hsi_status st = HSI_OK;
    double *x = NULL;
    HSI_TRY(hsi_kern_check_cube(features, "pca transform"));
    int64_t nf = p->n_features, k = p->n_components, L = features->shape[1], S = features->shape[2];
    if (features->shape[0] != nf) {
        st = HSI_FAIL(HSI_ERR_ARG, "pca transform: the model has %lld features, the input %lld bands",
                      (long long)nf, (long long)features->shape[0]);
        goto cleanup;
    }
    HSI_TRY(check_f32_out(scores, k, L, S, "pca transform"));
    x = malloc(sizeof(double) * (size_t)nf);
    if (!x) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "pca transform: out of memory");
        goto cleanup;
    }
    for (int64_t y = 0; y < L; y++)
        for (int64_t s = 0; s < S; s++) {
            for (int64_t j = 0; j < nf; j++) {
                int64_t idx[3] = {j, y, s};
                x[j] = hsi_view_get_f64(features, idx) - p->mean[j];
            }
            for (int64_t c = 0; c < k; c++) {
                double acc = 0;
                for (int64_t j = 0; j < nf; j++) acc += x[j] * p->components[c * nf + j];
                if (p->whiten) acc /= sqrt(p->explained_variance[c]);
                float v = (float)acc;
                memcpy((uint8_t *)scores->buf->data + scores->offset + c * scores->strides[0] +
                           y * scores->strides[1] + s * scores->strides[2],
                       &v, 4);
            }
        }
cleanup:
    free(x);
    return st;
}

hsi_status hsi_pca_inverse(hsi_view *features, const hsi_view *scores, const hsi_pca *p)
{
    hsi_status st = HSI_OK;
    double *z = NULL;
    HSI_TRY(hsi_kern_check_cube(scores, "pca inverse"));
    int64_t nf = p->n_features, k = scores->shape[0], L = scores->shape[1], S = scores->shape[2];
    if (k > p->n_components) {
        st = HSI_FAIL(HSI_ERR_ARG, "pca inverse: %lld score bands but the model has %lld components",
                      (long long)k, (long long)p->n_components);
        goto cleanup;
    }
    HSI_TRY(check_f32_out(features, nf, L, S, "pca inverse"));
    z = malloc(sizeof(double) * (size_t)(k + 1));
    if (!z) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "pca inverse: out of memory");
        goto cleanup;
    }
    for (int64_t y = 0; y < L; y++)
        for (int64_t s = 0; s < S; s++) {
            for (int64_t c = 0; c < k; c++) {
                int64_t idx[3] = {c, y, s};
                z[c] = hsi_view_get_f64(scores, idx);
                if (p->whiten) z[c] *= sqrt(p->explained_variance[c]);
            }
            for (int64_t j = 0; j < nf; j++) {
                double acc = p->mean[j];
                for (int64_t c = 0; c < k; c++) acc += z[c] * p->components[c * nf + j];
                float v = (float)acc;
                memcpy((uint8_t *)features->buf->data + features->offset + j * features->strides[0] +
                           y * features->strides[1] + s * features->strides[2],
                       &v, 4);
            }
        }
cleanup:
    free(z);
    return st;
}

/* ------------------------------------------------------------ model file */

#define PCA_MAGIC "HSIPCA1"
#define PCA_HEADER 72
#define PCA_MAX_FEATURES 100000

static void put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_i64(uint8_t *p, int64_t v) { memcpy(p, &v, 8); }
static void put_f64(uint8_t *p, double v) { memcpy(p, &v, 8); }
static uint32_t get_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static int64_t get_i64(const uint8_t *p) { int64_t v; memcpy(&v, p, 8); return v; }
static double get_f64(const uint8_t *p) { double v; memcpy(&v, p, 8); return v; }

static int64_t model_size(int64_t nf, int64_t k)
{
    return PCA_HEADER + 8 * nf + 8 * (5 * nf + k * nf + 2 * k);
}

hsi_status hsi_pca_save(const hsi_pca *p, const char *path)
{
    hsi_status st = HSI_OK;
    hsi_atomic_file af = {0};
    uint8_t *buf = NULL;
    if (!hsi_host_is_little_endian())
        return HSI_FAIL(HSI_ERR_UNSUPPORTED, "%s: model files are written on little-endian hosts only", path);
    int64_t nf = p->n_features, k = p->n_components, size = model_size(nf, k);
    buf = calloc(1, (size_t)size);
    if (!buf) return HSI_FAIL(HSI_ERR_NOMEM, "%s: out of memory", path);
    memcpy(buf, PCA_MAGIC, 8);
    put_u32(buf + 8, 1);
    put_u32(buf + 12, (uint32_t)((p->whiten ? 1 : 0) | (p->norm.l2 ? 2 : 0) | (p->norm.has_ignore ? 4 : 0)));
    put_i64(buf + 16, p->norm.n_cube_bands);
    put_i64(buf + 24, nf);
    put_i64(buf + 32, k);
    put_i64(buf + 40, p->n_samples);
    put_u32(buf + 48, (uint32_t)p->norm.mode);
    put_f64(buf + 56, p->norm.ignore_value);
    put_f64(buf + 64, p->total_variance);
    uint8_t *q = buf + PCA_HEADER;
    for (int64_t j = 0; j < nf; j++, q += 8) put_i64(q, p->norm.bands[j]);
    const double *arrs[5] = {p->norm.scale, p->norm.center, p->norm.offset, p->norm.fill, p->mean};
    for (int a = 0; a < 5; a++)
        for (int64_t j = 0; j < nf; j++, q += 8) put_f64(q, arrs[a][j]);
    for (int64_t i = 0; i < k * nf; i++, q += 8) put_f64(q, p->components[i]);
    for (int64_t c = 0; c < k; c++, q += 8) put_f64(q, p->explained_variance[c]);
    for (int64_t c = 0; c < k; c++, q += 8) put_f64(q, p->explained_variance_ratio[c]);
    HSI_TRY(hsi_atomic_open(&af, path));
    if (fwrite(buf, 1, (size_t)size, af.fp) != (size_t)size) {
        hsi_atomic_abort(&af);
        st = HSI_FAIL(HSI_ERR_IO, "%s: write failed", path);
        goto cleanup;
    }
    HSI_TRY(hsi_atomic_commit(&af));
cleanup:
    free(buf);
    return st;
}

hsi_status hsi_pca_parse(hsi_pca *out, const void *data, size_t size, const char *name)
{
    hsi_status st = HSI_OK;
    const uint8_t *b = data;
    memset(out, 0, sizeof *out);
    if (size < PCA_HEADER || memcmp(b, PCA_MAGIC, 8) != 0)
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: not an hsi PCA model (expected magic 'HSIPCA1' and >= %d bytes, found %zu bytes)",
                        name, PCA_HEADER, size);
    if (get_u32(b + 8) != 1)
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: model version %u not supported (expected 1)", name, get_u32(b + 8));
    uint32_t flags = get_u32(b + 12);
    int64_t ncb = get_i64(b + 16), nf = get_i64(b + 24), k = get_i64(b + 32);
    uint32_t mode = get_u32(b + 48);
    if (nf <= 0 || nf > PCA_MAX_FEATURES || k <= 0 || k > nf || ncb <= 0 || ncb > (int64_t)1 << 32 ||
        mode > HSI_NORM_L2)
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: bad sizes at byte 16 (cube bands %lld, features %lld, components %lld, mode %u)",
                        name, (long long)ncb, (long long)nf, (long long)k, mode);
    if ((int64_t)size != model_size(nf, k))
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: expected %lld bytes for %lld features x %lld components, found %zu",
                        name, (long long)model_size(nf, k), (long long)nf, (long long)k, size);
    hsi_norm *n = &out->norm;
    n->mode = (hsi_norm_mode)mode;
    n->n_cube_bands = ncb;
    n->n_bands = nf;
    n->l2 = (flags & 2) != 0;
    n->has_ignore = (flags & 4) != 0;
    n->ignore_value = get_f64(b + 56);
    out->whiten = flags & 1;
    out->n_features = nf;
    out->n_components = k;
    out->n_samples = get_i64(b + 40);
    out->total_variance = get_f64(b + 64);
    n->bands = malloc(sizeof(int64_t) * (size_t)nf);
    double **arrs[5] = {&n->scale, &n->center, &n->offset, &n->fill, &out->mean};
    int ok = n->bands != NULL;
    for (int a = 0; a < 5; a++) ok = ok && (*arrs[a] = malloc(sizeof(double) * (size_t)nf));
    out->components = malloc(sizeof(double) * (size_t)(k * nf));
    out->explained_variance = malloc(sizeof(double) * (size_t)k);
    out->explained_variance_ratio = malloc(sizeof(double) * (size_t)k);
    if (!ok || !out->components || !out->explained_variance || !out->explained_variance_ratio) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "%s: out of memory", name);
        goto cleanup;
    }
    const uint8_t *q = b + PCA_HEADER;
    for (int64_t j = 0; j < nf; j++, q += 8) {
        n->bands[j] = get_i64(q);
        if (n->bands[j] < 0 || n->bands[j] >= ncb) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: band index %lld at byte %lld outside 0..%lld", name,
                          (long long)n->bands[j], (long long)(q - b), (long long)ncb - 1);
            goto cleanup;
        }
    }
    for (int a = 0; a < 5; a++)
        for (int64_t j = 0; j < nf; j++, q += 8) (*arrs[a])[j] = get_f64(q);
    for (int64_t i = 0; i < k * nf; i++, q += 8) out->components[i] = get_f64(q);
    for (int64_t c = 0; c < k; c++, q += 8) out->explained_variance[c] = get_f64(q);
    for (int64_t c = 0; c < k; c++, q += 8) out->explained_variance_ratio[c] = get_f64(q);
    if (out->whiten)
        for (int64_t c = 0; c < k; c++)
            if (!(out->explained_variance[c] > 0)) {
                st = HSI_FAIL(HSI_ERR_FORMAT, "%s: whitening model with variance %g for component %lld",
                              name, out->explained_variance[c], (long long)c + 1);
                goto cleanup;
            }
cleanup:
    if (st != HSI_OK) hsi_pca_free(out);
    return st;
}

hsi_status hsi_pca_load(hsi_pca *out, const char *path)
{
    hsi_status st = HSI_OK;
    char *text = NULL;
    size_t len = 0;
    memset(out, 0, sizeof *out);
    HSI_TRY(hsi_read_file(path, &text, &len));
    HSI_TRY(hsi_pca_parse(out, text, len, path));
cleanup:
    free(text);
    return st;
}

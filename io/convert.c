/* convert.c — see convert.h. */
#include "convert.h"

#include <stdlib.h>
#include <string.h>

#include "core/dist.h"
#include "gdal_io.h"

/* Copies lines [y0, y0+n) of the selected bands into tile (n_sel, n, S). */
static hsi_status fill_tile(hsi_view *tile, const hsi_view *cube, const int64_t *sel,
                            int64_t n_sel, int64_t y0, int64_t n)
{
    hsi_status st = HSI_OK;
    for (int64_t k = 0; k < n_sel && st == HSI_OK; k++) {
        hsi_view src, dst, srcl, dstl;
        st = hsi_view_index(&src, cube, 0, sel[k]); /* (L, S) */
        if (st != HSI_OK) break;
        st = hsi_view_slice(&srcl, &src, 0, y0, y0 + n, 1);
        if (st == HSI_OK) {
            st = hsi_view_index(&dst, tile, 0, k);
            if (st == HSI_OK) {
                st = hsi_view_slice(&dstl, &dst, 0, 0, n, 1);
                if (st == HSI_OK) {
                    st = hsi_view_copy(&dstl, &srcl);
                    hsi_view_release(&dstl);
                }
                hsi_view_release(&dst);
            }
            hsi_view_release(&srcl);
        }
        hsi_view_release(&src);
    }
    return st;
}

typedef struct copy_job {
    const hsi_view *cube;
    const int64_t *sel;
    int64_t n_sel;
    int progress;
} copy_job;

/* Lines [y0, y1) in tiles of about 32 MiB, each written at its place. */
static hsi_status copy_share(void *ctx, hsi_envi_writer *w, int64_t y0, int64_t y1)
{
    const copy_job *j = ctx;
    hsi_status st = HSI_OK;
    hsi_view tile;
    memset(&tile, 0, sizeof tile);
    const int64_t S = j->cube->shape[2];
    int64_t row = j->n_sel * S * (int64_t)hsi_dtype_size(j->cube->dtype);
    int64_t TL = row > 0 ? (32 << 20) / row : 1;
    if (TL < 1) TL = 1;
    if (TL > y1 - y0) TL = y1 - y0;
    int64_t shape[3] = {j->n_sel, TL, S};
    HSI_TRY(hsi_view_alloc(&tile, j->cube->dtype, 3, shape, HSI_BUF_HOST));
    hsi_progress pr;
    hsi_progress_begin(&pr, "convert", y1 - y0);
    if (!j->progress) pr.active = 0;
    for (int64_t y = y0; y < y1; y += TL) {
        int64_t n = y + TL <= y1 ? TL : y1 - y;
        hsi_view part;
        HSI_TRY(hsi_view_slice(&part, &tile, 1, 0, n, 1));
        st = fill_tile(&part, j->cube, j->sel, j->n_sel, y, n);
        if (st == HSI_OK) st = hsi_envi_writer_write_at(w, y, &part);
        hsi_view_release(&part);
        if (st != HSI_OK) goto cleanup;
        hsi_progress_update(&pr, y + n - y0);
    }
    hsi_progress_end(&pr);
cleanup:
    hsi_view_release(&tile);
    return st;
}

hsi_status hsi_convert_envi(const char *out_hdr, const hsi_cube *c, const int64_t *sel, int64_t n_sel,
                            const hsi_envi_write_options *o, int across_ranks, int progress)
{
    hsi_status st = HSI_OK;
    hsi_meta m;
    hsi_meta_init(&m);
    hsi_envi_write_options wo;
    if (o) wo = *o;
    else hsi_envi_write_options_init(&wo);
    if (wo.dtype == HSI_DT_INVALID) wo.dtype = c->view.dtype;
    HSI_TRY(hsi_meta_copy(&m, &c->meta));
    HSI_TRY(hsi_meta_select_bands(&m, sel, n_sel));
    copy_job j = {&c->view, sel, n_sel, progress && (!across_ranks || hsi_dist_rank() == 0)};
    st = hsi_envi_write_shared(out_hdr, &m, n_sel, c->view.shape[1], c->view.shape[2], &wo, across_ranks,
                               copy_share, &j);
cleanup:
    hsi_meta_free(&m);
    return st;
}

hsi_status hsi_convert_geotiff(const char *out_tif, const hsi_cube *c, const int64_t *sel,
                               int64_t n_sel, hsi_dtype dtype, const char *const *co)
{
    hsi_status st = HSI_OK;
    hsi_view all;
    hsi_meta m;
    memset(&all, 0, sizeof all);
    hsi_meta_init(&m);
    int64_t shape[3] = {n_sel, c->view.shape[1], c->view.shape[2]};
    HSI_TRY(hsi_meta_copy(&m, &c->meta));
    HSI_TRY(hsi_meta_select_bands(&m, sel, n_sel));
    HSI_TRY(hsi_view_alloc(&all, c->view.dtype, 3, shape, HSI_BUF_HOST));
    HSI_TRY(fill_tile(&all, &c->view, sel, n_sel, 0, shape[1]));
    st = hsi_gdal_write_geotiff_co(out_tif, &all, &m, dtype, co);
cleanup:
    hsi_view_release(&all);
    hsi_meta_free(&m);
    return st;
}

/* kcli.c — shared plumbing of the preprocessing commands: mask files, band
 * selection options, calibration, output headers and the ENVI tile sink.
 * No command lives here (see cmd_stats.c, cmd_bands.c, cmd_pca.c,
 * cmd_preprocess.c). */
#include "kcli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kernels/bands.h"
#include "kernels/fused.h"
#include "kernels/stats.h"

hsi_status kcli_mask_open(kcli_mask *m, const char *path, const hsi_view *like)
{
    hsi_status st = HSI_OK;
    memset(m, 0, sizeof *m);
    hsi_cube_init(&m->cube);
    HSI_TRY(hsi_cube_open(&m->cube, path, NULL));
    m->open = 1;
    const hsi_view *v = &m->cube.view;
    if (v->shape[0] != 1 || v->shape[1] != like->shape[1] || v->shape[2] != like->shape[2]) {
        st = HSI_FAIL(HSI_ERR_ARG,
                      "%s: a mask must be one band of %lld lines x %lld samples like the cube, found %lld bands "
                      "x %lld lines x %lld samples",
                      path, (long long)like->shape[1], (long long)like->shape[2], (long long)v->shape[0],
                      (long long)v->shape[1], (long long)v->shape[2]);
        goto cleanup;
    }
    HSI_TRY(hsi_view_index(&m->view, v, 0, 0));
cleanup:
    if (st != HSI_OK) kcli_mask_close(m);
    return st;
}

void kcli_mask_close(kcli_mask *m)
{
    if (!m || !m->open) return;
    hsi_view_release(&m->view);
    hsi_cube_free(&m->cube);
    memset(m, 0, sizeof *m);
}

hsi_status kcli_select_bands(int64_t **out, int64_t *n, const hsi_meta *m, const char *bands_spec,
                             const char *wl_spec, int drop_bbl)
{
    hsi_status st = HSI_OK;
    int64_t *sel = NULL, ns = 0, *wsel = NULL, nw = 0;
    double *wl = NULL;
    int64_t B = m->n_bands;
    *out = NULL;
    *n = 0;
    if (bands_spec) {
        HSI_TRY(hsi_bands_parse(&sel, &ns, bands_spec, B));
    } else {
        sel = malloc(sizeof(int64_t) * (size_t)(B > 0 ? B : 1));
        if (!sel) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        for (int64_t b = 0; b < B; b++) sel[b] = b;
        ns = B;
    }
    if (wl_spec) {
        if (!m->wavelength) {
            st = HSI_FAIL(HSI_ERR_ARG, "--wavelengths: the header has no 'wavelength' list");
            goto cleanup;
        }
        wl = malloc(sizeof(double) * (size_t)B);
        if (!wl) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        memcpy(wl, m->wavelength, sizeof(double) * (size_t)B);
        if (!m->wavelength_nm) hsi_wavelengths_to_nm(wl, B, m->wavelength_units);
        HSI_TRY(hsi_bands_from_wavelengths(&wsel, &nw, wl_spec, wl, B));
        uint8_t *in = calloc((size_t)B, 1);
        if (!in) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        for (int64_t i = 0; i < nw; i++) in[wsel[i]] = 1;
        int64_t k = 0;
        for (int64_t i = 0; i < ns; i++)
            if (in[sel[i]]) sel[k++] = sel[i];
        ns = k;
        free(in);
    }
    if (drop_bbl && m->bbl) hsi_bands_drop_bad(sel, &ns, m->bbl);
    if (ns == 0) {
        st = HSI_FAIL(HSI_ERR_ARG, "the band options select no band (of %lld)", (long long)B);
        goto cleanup;
    }
    *out = sel;
    *n = ns;
    sel = NULL;
cleanup:
    free(sel);
    free(wsel);
    free(wl);
    return st;
}

void kcli_calib(hsi_calib *c, const hsi_meta *m)
{
    c->gain = m->gain;
    c->offset = m->offset;
    c->refl_scale = m->has_reflectance_scale ? m->reflectance_scale : 0;
}

static const char *const drop_keys[] = {"data gain values",          "data offset values",
                                        "reflectance scale factor",  "data ignore value",
                                        "data reflectance gain values", "data reflectance offset values",
                                        "default bands"};

hsi_status kcli_out_meta(hsi_meta *out, const hsi_meta *in, const int64_t *bands, int64_t n,
                         const hsi_pca *pca, const char *what)
{
    hsi_status st = HSI_OK;
    HSI_TRY(hsi_meta_copy(out, in));
    if (!pca) {
        HSI_TRY(hsi_meta_select_bands(out, bands, n));
    } else {
        free(out->wavelength);
        free(out->fwhm);
        free(out->bbl);
        free(out->wavelength_units);
        if (out->band_names)
            for (int64_t i = 0; i < out->n_bands; i++) free(out->band_names[i]);
        free(out->band_names);
        out->wavelength = out->fwhm = NULL;
        out->wavelength_units = NULL;
        out->wavelength_nm = 0;
        out->bbl = NULL;
        out->n_bands = pca->n_components;
        out->band_names = calloc((size_t)pca->n_components, sizeof(char *));
        if (!out->band_names) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        for (int64_t c = 0; c < pca->n_components; c++) {
            char name[64];
            snprintf(name, sizeof name, "PC%lld (%.1f %%)", (long long)c + 1,
                     100.0 * pca->explained_variance_ratio[c]);
            out->band_names[c] = strdup(name);
            if (!out->band_names[c]) {
                st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
                goto cleanup;
            }
        }
        static const char *const per_band[] = {"wavelength", "fwhm", "bbl", "band names", "wavelength units"};
        for (size_t i = 0; i < sizeof per_band / sizeof *per_band; i++) hsi_meta_unset(out, per_band[i]);
    }
    free(out->gain);
    free(out->offset);
    out->gain = out->offset = NULL;
    out->has_reflectance_scale = 0;
    out->has_ignore_value = 0;
    out->n_default_bands = 0;
    out->file_kind = HSI_FILE_STANDARD;
    for (size_t i = 0; i < sizeof drop_keys / sizeof *drop_keys; i++) hsi_meta_unset(out, drop_keys[i]);
    if (what) {
        char *d = NULL;
        const char *old = in->description ? in->description : "";
        size_t len = strlen(old) + strlen(what) + 4;
        d = malloc(len);
        if (!d) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        snprintf(d, len, "%s%s%s", old, *old ? "\n" : "", what);
        free(out->description);
        out->description = d;
    }
cleanup:
    if (st != HSI_OK) hsi_meta_free(out);
    return st;
}

hsi_status kcli_sink_tile(void *ctx, const float *tile, int64_t line0, int64_t n_lines, int64_t n_out,
                          int64_t n_samples, int pixel_major)
{
    kcli_sink *s = ctx;
    hsi_status st = HSI_OK;
    hsi_buffer *buf = NULL;
    hsi_view v;
    (void)line0;
    size_t bytes = sizeof(float) * (size_t)(n_out * n_lines * n_samples);
    HSI_TRY(hsi_buffer_wrap(&buf, (void *)tile, bytes, HSI_BUF_HOST, NULL, NULL));
    int64_t shape[3] = {n_out, n_lines, n_samples};
    int64_t bm[3] = {4 * n_lines * n_samples, 4 * n_samples, 4};
    int64_t pm[3] = {4, 4 * n_samples * n_out, 4 * n_out};
    HSI_TRY(hsi_view_make(&v, buf, 0, HSI_F32, 3, shape, pixel_major ? pm : bm, 0));
    st = hsi_envi_writer_write(s->w, &v);
    hsi_view_release(&v);
cleanup:
    hsi_buffer_release(buf);
    return st;
}

int kcli_parse_interleave(const char *cmd, const char *s, hsi_interleave *out)
{
    if (s && !strcmp(s, "bsq")) *out = HSI_BSQ;
    else if (s && !strcmp(s, "bil")) *out = HSI_BIL;
    else if (s && !strcmp(s, "bip")) *out = HSI_BIP;
    else {
        hsi_cli_usage_error(cmd, "--interleave expects bsq, bil or bip, got '%s'", s ? s : "");
        return 0;
    }
    return 1;
}

hsi_status kcli_fit(hsi_norm *norm, hsi_pca *pca, const hsi_cube *c, const int64_t *sel, int64_t ns,
                    hsi_norm_mode mode, const hsi_view *mask, const hsi_pca_opts *pca_opts,
                    int64_t tile_lines, int n_threads)
{
    hsi_status st = HSI_OK;
    hsi_stats s = {0};
    hsi_calib cal;
    const hsi_meta *m = &c->meta;
    int has_ig = m->has_ignore_value;
    memset(norm, 0, sizeof *norm);
    kcli_calib(&cal, m);
    int need_stats = has_ig || mode == HSI_NORM_ZSCORE || mode == HSI_NORM_MINMAX || mode == HSI_NORM_GLOBAL_MINMAX;
    if (need_stats) {
        hsi_stats_opts so = {.mask = mask,
                             .has_ignore = has_ig,
                             .ignore_value = m->ignore_value,
                             .tile_lines = tile_lines,
                             .n_threads = n_threads,
                             .progress_label = "statistics"};
        HSI_TRY(hsi_stats_compute(&s, &c->view, &so));
    }
    HSI_TRY(hsi_norm_build(norm, mode, c->view.shape[0], sel, ns, need_stats ? &s : NULL, &cal, has_ig,
                           m->ignore_value));
    if (pca_opts) {
        hsi_pca_opts po = *pca_opts;
        po.mask = mask;
        po.tile_lines = tile_lines;
        po.n_threads = n_threads;
        po.progress_label = "pca fit";
        HSI_TRY(hsi_pca_fit(pca, &c->view, norm, &po));
    }
cleanup:
    hsi_stats_free(&s);
    if (st != HSI_OK) hsi_norm_free(norm);
    return st;
}

hsi_status kcli_write_fused(const char *out_hdr, const hsi_cube *c, const hsi_meta *out_meta,
                            const hsi_norm *norm, const hsi_pca *pca, hsi_interleave il,
                            int64_t tile_lines, int n_threads)
{
    hsi_status st = HSI_OK;
    hsi_envi_write_options wo;
    kcli_sink sink = {0};
    hsi_envi_write_options_init(&wo);
    wo.interleave = il;
    wo.dtype = HSI_F32;
    int64_t n_out = hsi_fused_n_out(norm, pca);
    HSI_TRY(hsi_envi_writer_open(&sink.w, out_hdr, out_meta, n_out, c->view.shape[1], c->view.shape[2], &wo));
    hsi_fused_opts fo = {.pixel_major = il == HSI_BIP,
                         .tile_lines = tile_lines,
                         .n_threads = n_threads,
                         .progress_label = pca ? "project" : "normalise",
                         .sink = kcli_sink_tile,
                         .sink_ctx = &sink};
    st = hsi_fused_run(NULL, &c->view, norm, pca, &fo);
    if (st != HSI_OK) {
        hsi_envi_writer_abort(sink.w);
        goto cleanup;
    }
    HSI_TRY(hsi_envi_writer_finish(sink.w));
cleanup:
    return st;
}

int kcli_opt(const char *cmd, int argc, char **argv, int *i, kcli_opts *o, unsigned which)
{
    const char *v = NULL;
    if (which & KCLI_OPT_BANDS) {
        if (!strcmp(argv[*i], "--drop-bbl")) {
            o->drop_bbl = 1;
            return 1;
        }
        if (hsi_cli_opt(argc, argv, i, "--bands", &o->bands))
            return o->bands ? 1 : (hsi_cli_usage_error(cmd, "--bands needs a list"), -1);
        if (hsi_cli_opt(argc, argv, i, "--wavelengths", &o->wavelengths))
            return o->wavelengths ? 1 : (hsi_cli_usage_error(cmd, "--wavelengths needs ranges"), -1);
    }
    if ((which & KCLI_OPT_NORMALIZE) && hsi_cli_opt(argc, argv, i, "--normalize", &o->normalize))
        return o->normalize ? 1 : (hsi_cli_usage_error(cmd, "--normalize needs a mode"), -1);
    if (which & KCLI_OPT_TILES) {
        if (hsi_cli_opt(argc, argv, i, "--tile-lines", &v))
            return hsi_cli_parse_int(cmd, "--tile-lines", v, 1, 1 << 30, &o->tile_lines) ? 1 : -1;
        if (hsi_cli_opt(argc, argv, i, "--threads", &v))
            return hsi_cli_parse_int(cmd, "--threads", v, 1, 64, &o->threads) ? 1 : -1;
    }
    return 0;
}

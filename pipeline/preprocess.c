/* preprocess.c — the fitted preprocessing pipeline (see preprocess.h):
 * band selection from options, fit on a mask, the fused pass to memory or
 * to an ENVI writer, the output header, and the safetensors model file.
 * The statistics, PCA and fused kernels themselves are in kernels/. */
#include "pipeline/preprocess.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dist.h"
#include "kernels/bands.h"
#include "kernels/cuda.h"
#include "kernels/fused.h"
#include "kernels/stats.h"
#include "models/checkpoint.h"
#include "models/tensor.h"

void hsi_prep_spec_init(hsi_prep_spec *s)
{
    memset(s, 0, sizeof *s);
    s->norm = HSI_NORM_ZSCORE;
}

hsi_status hsi_prep_select_bands(int64_t **out, int64_t *n, const hsi_meta *m, const char *bands,
                                 const char *wavelengths, int drop_bbl)
{
    hsi_status st = HSI_OK;
    int64_t *sel = NULL, ns = 0, *wsel = NULL, nw = 0;
    double *wl = NULL;
    uint8_t *in = NULL;
    int64_t B = m->n_bands;
    *out = NULL;
    *n = 0;
    if (bands) {
        HSI_TRY(hsi_bands_parse(&sel, &ns, bands, B));
    } else {
        sel = malloc(sizeof(int64_t) * (size_t)(B > 0 ? B : 1));
        if (!sel) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        for (int64_t b = 0; b < B; b++) sel[b] = b;
        ns = B;
    }
    if (wavelengths) {
        if (!m->wavelength) {
            st = HSI_FAIL(HSI_ERR_ARG, "--wavelengths: the header has no 'wavelength' list");
            goto cleanup;
        }
        wl = malloc(sizeof(double) * (size_t)B);
        in = calloc((size_t)B, 1);
        if (!wl || !in) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        memcpy(wl, m->wavelength, sizeof(double) * (size_t)B);
        if (!m->wavelength_nm) hsi_wavelengths_to_nm(wl, B, m->wavelength_units);
        HSI_TRY(hsi_bands_from_wavelengths(&wsel, &nw, wavelengths, wl, B));
        for (int64_t i = 0; i < nw; i++) in[wsel[i]] = 1;
        int64_t k = 0;
        for (int64_t i = 0; i < ns; i++)
            if (in[sel[i]]) sel[k++] = sel[i];
        ns = k;
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
    free(in);
    free(sel);
    free(wsel);
    free(wl);
    return st;
}

/* Calibration from a header's gain, offset and reflectance scale (borrowed). */
static hsi_status dist_max(void *ctx, double *v, int64_t n)
{
    (void)ctx;
    return hsi_dist_allreduce(v, n, HSI_F64, HSI_DIST_MAX);
}

const hsi_pass_split *hsi_prep_dist_split(void)
{
    static hsi_pass_split sp;
    if (hsi_dist_size() <= 1) return NULL;
    sp = (hsi_pass_split){hsi_dist_rank(), hsi_dist_size(), dist_max, NULL};
    return &sp;
}

static void calib_from_meta(hsi_calib *c, const hsi_meta *m)
{
    c->gain = m->gain;
    c->offset = m->offset;
    c->refl_scale = m->has_reflectance_scale ? m->reflectance_scale : 0;
}

/* Statistics and the raw covariance in one read, then the norm and the PCA
 * from them. Leaves out->has_pca 0 (and *s filled) when a selected band
 * holds NaN, which the statistics skip and the covariance cannot: the
 * caller then fits the usual way from *s. */
static hsi_status fit_one_pass(hsi_prep *out, const hsi_cube *c, hsi_stats *s, const int64_t *sel,
                               int64_t ns, hsi_norm_mode mode, const hsi_calib *cal,
                               const hsi_stats_opts *so, const hsi_pca_opts *po)
{
    hsi_status st = HSI_OK;
    int64_t n = 0;
    double *mean = malloc(sizeof(double) * (size_t)ns), *cov = malloc(sizeof(double) * (size_t)(ns * ns));
    if (!mean || !cov) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "preprocess: out of memory for a %lld-band covariance", (long long)ns);
        goto cleanup;
    }
    HSI_TRY(hsi_stats_covariance(s, mean, cov, &n, &c->view, sel, ns, so));
    for (int64_t j = 0; j < ns; j++)
        if (s->count[sel[j]] != n) goto cleanup; /* NaN in the band */
    HSI_TRY(hsi_norm_build(&out->norm, mode, c->view.shape[0], sel, ns, s, cal, 0, 0));
    const hsi_norm *nm = &out->norm;
    for (int64_t i = 0; i < ns; i++) {
        /* the statistics' mean of the same pixels (in double, exact for integers) */
        mean[i] = nm->scale[i] * (s->mean[sel[i]] - nm->center[i]) + nm->offset[i];
        for (int64_t j = 0; j < ns; j++) cov[i * ns + j] *= nm->scale[i] * nm->scale[j];
    }
    HSI_TRY(hsi_pca_fit_cov(&out->pca, mean, cov, n, nm, po));
    out->has_pca = 1;
cleanup:
    if (!out->has_pca) hsi_norm_free(&out->norm);
    free(mean);
    free(cov);
    return st;
}

hsi_status hsi_prep_fit(hsi_prep *out, const hsi_cube *c, const hsi_view *mask,
                        const hsi_prep_spec *spec)
{
    hsi_status st = HSI_OK;
    hsi_stats s = {0};
    hsi_calib cal;
    int64_t *sel = NULL, ns = 0;
    const hsi_meta *m = &c->meta;
    const int has_ig = m->has_ignore_value;
    const hsi_norm_mode mode = spec->norm;
    memset(out, 0, sizeof *out);
    out->n_cube_bands = c->view.shape[0];
    HSI_TRY(hsi_prep_select_bands(&sel, &ns, m, spec->bands, spec->wavelengths, spec->drop_bbl));
    calib_from_meta(&cal, m);
    int need_stats = has_ig || mode == HSI_NORM_ZSCORE || mode == HSI_NORM_MINMAX ||
                     mode == HSI_NORM_GLOBAL_MINMAX;
    int want_pca = spec->pca > 0 || spec->pca_variance > 0;
    hsi_stats_opts so = {.mask = mask,
                         .has_ignore = has_ig,
                         .ignore_value = m->ignore_value,
                         .tile_lines = spec->tile_lines,
                         .n_threads = spec->n_threads,
                         .progress_label = spec->progress ? "statistics" : NULL,
                         .split = spec->split,
                         .device = spec->device};
    hsi_pca_opts po = {.n_components = spec->pca > 0 ? (spec->pca < ns ? spec->pca : ns) : 0,
                       .variance_fraction = spec->pca > 0 ? 0 : spec->pca_variance,
                       .whiten = spec->whiten,
                       .mask = mask,
                       .tile_lines = spec->tile_lines,
                       .n_threads = spec->n_threads,
                       .progress_label = spec->progress ? "pca fit" : NULL,
                       .split = spec->split,
                       .device = spec->device};
    /* An affine map (no ignore value to fill, no L2) moves the covariance
     * of the raw bands exactly: cov_f = D cov_raw D, D = diag(scale). The
     * statistics and the raw covariance then come from one read. */
    hsi_device sd = HSI_DEVICE_CPU;
    if (need_stats) /* statistics on the GPU: then the covariance is a second pass there */
        HSI_TRY(hsi_device_pick(&sd, spec->device, hsi_view_on_device(&c->view), "statistics",
                                hsi_stats_cuda_unsupported(&c->view, &so)));
    if (need_stats && want_pca && !has_ig && mode != HSI_NORM_L2 && sd == HSI_DEVICE_CPU) {
        so.progress_label = spec->progress ? "statistics + covariance" : NULL;
        HSI_TRY(fit_one_pass(out, c, &s, sel, ns, mode, &cal, &so, &po));
        if (out->has_pca) goto cleanup;
    } else if (need_stats) {
        HSI_TRY(hsi_stats_compute(&s, &c->view, &so));
    }
    HSI_TRY(hsi_norm_build(&out->norm, mode, c->view.shape[0], sel, ns, need_stats ? &s : NULL, &cal,
                           has_ig, m->ignore_value));
    if (want_pca) {
        HSI_TRY(hsi_pca_fit(&out->pca, &c->view, &out->norm, &po));
        out->has_pca = 1;
    }
cleanup:
    free(sel);
    hsi_stats_free(&s);
    if (st != HSI_OK) hsi_prep_free(out);
    return st;
}

int64_t hsi_prep_n_out(const hsi_prep *p)
{
    return hsi_fused_n_out(&p->norm, p->has_pca ? &p->pca : NULL);
}

hsi_status hsi_prep_check(const hsi_prep *p, const hsi_view *cube, const char *what)
{
    if (cube->ndim != 3 || cube->shape[0] != p->n_cube_bands)
        return HSI_FAIL(HSI_ERR_ARG, "%s has %lld bands but the preprocessing was fitted on cubes of %lld",
                        what ? what : "the cube", cube->ndim == 3 ? (long long)cube->shape[0] : -1LL,
                        (long long)p->n_cube_bands);
    return HSI_OK;
}

static const hsi_prep_pass no_pass;

hsi_status hsi_prep_transform(hsi_view *out, const hsi_prep *p, const hsi_view *cube,
                              const hsi_prep_pass *pass)
{
    hsi_status st = HSI_OK;
    const hsi_prep_pass *ps = pass ? pass : &no_pass;
    memset(out, 0, sizeof *out);
    HSI_TRY(hsi_prep_check(p, cube, NULL));
    int64_t shape[3] = {hsi_prep_n_out(p), cube->shape[1], cube->shape[2]};
    hsi_fused_opts fo = {.tile_lines = ps->tile_lines, .n_threads = ps->n_threads,
                         .progress_label = ps->progress_label, .device = ps->device};
    if (ps->out_on_device) {
        hsi_buffer *b = NULL;
        const char *why = hsi_fused_cuda_unsupported(cube, &fo);
        if (why) return HSI_FAIL(HSI_ERR_UNSUPPORTED, "fused pass on the GPU: %s", why);
        HSI_TRY(hsi_cuda_buffer(&b, sizeof(float) * (size_t)(shape[0] * shape[1] * shape[2])));
        st = hsi_view_make_packed(out, b, 0, HSI_F32, 3, shape);
        hsi_buffer_release(b); /* the view holds its own reference */
        if (st != HSI_OK) return st;
        st = hsi_fused_run_cuda(out->buf->data, 1, cube, &p->norm, p->has_pca ? &p->pca : NULL, &fo);
    } else {
        HSI_TRY(hsi_view_alloc(out, HSI_F32, 3, shape, HSI_BUF_HOST));
        st = hsi_fused_run(out->buf->data, cube, &p->norm, p->has_pca ? &p->pca : NULL, &fo);
    }
    if (st != HSI_OK) hsi_view_release(out);
cleanup:
    return st;
}

/* Fused-pass sink: a tile of the lines [y0, ...) this process projects,
 * written at its place in the output. */
typedef struct share_sink {
    hsi_envi_writer *w;
    int64_t y0; /* the share's first line in the cube */
} share_sink;

static hsi_status sink_share(void *ctx, const float *tile, int64_t line0, int64_t n_lines, int64_t n_out,
                             int64_t n_samples, int pixel_major)
{
    share_sink *sh = ctx;
    hsi_status st = HSI_OK;
    hsi_buffer *buf = NULL;
    hsi_view v;
    size_t bytes = sizeof(float) * (size_t)(n_out * n_lines * n_samples);
    HSI_TRY(hsi_buffer_wrap(&buf, (void *)tile, bytes, HSI_BUF_HOST, NULL, NULL));
    int64_t shape[3] = {n_out, n_lines, n_samples};
    int64_t bm[3] = {4 * n_lines * n_samples, 4 * n_samples, 4};
    int64_t pm[3] = {4, 4 * n_samples * n_out, 4 * n_out};
    HSI_TRY(hsi_view_make(&v, buf, 0, HSI_F32, 3, shape, pixel_major ? pm : bm, 0));
    st = hsi_envi_writer_write_at(sh->w, sh->y0 + line0, &v);
    hsi_view_release(&v);
cleanup:
    hsi_buffer_release(buf);
    return st;
}

typedef struct share_job {
    const hsi_prep *p;
    const hsi_view *cube;
    int pixel_major; /* the pass's products (not the file's interleave) */
    hsi_prep_pass pass; /* progress_label NULL: no bar */
} share_job;

/* Projects lines [y0, y1) of the cube into their place in the output. */
static hsi_status project_share(void *ctx, hsi_envi_writer *w, int64_t y0, int64_t y1)
{
    const share_job *j = ctx;
    hsi_status st = HSI_OK;
    hsi_view share;
    HSI_TRY(hsi_view_slice(&share, j->cube, 1, y0, y1, 1));
    share_sink sh = {w, y0};
    hsi_fused_opts fo = {.pixel_major = j->pixel_major,
                         .tile_lines = j->pass.tile_lines,
                         .n_threads = j->pass.n_threads,
                         .progress_label = j->pass.progress_label,
                         .sink = sink_share,
                         .sink_ctx = &sh,
                         .device = j->pass.device};
    st = hsi_fused_run(NULL, &share, &j->p->norm, j->p->has_pca ? &j->p->pca : NULL, &fo);
    hsi_view_release(&share);
cleanup:
    return st;
}

static const char *pass_label(const hsi_prep *p) { return p->has_pca ? "project" : "normalise"; }

/* exact: band-major products whatever il is, and only the label the
 * caller gave */
static hsi_status write_share(const char *out_hdr, const hsi_prep *p, const hsi_view *cube,
                              const hsi_meta *out_meta, hsi_interleave il, const hsi_prep_pass *pass,
                              int across_ranks, int exact)
{
    hsi_status st = hsi_prep_check(p, cube, out_hdr);
    if (st != HSI_OK) return st;
    hsi_envi_write_options wo;
    hsi_envi_write_options_init(&wo);
    wo.interleave = il;
    wo.dtype = HSI_F32;
    share_job j = {p, cube, !exact && il == HSI_BIP, pass ? *pass : no_pass};
    if (!exact && !j.pass.progress_label) j.pass.progress_label = pass_label(p);
    if (across_ranks && hsi_dist_rank() != 0) j.pass.progress_label = NULL;
    return hsi_envi_write_shared(out_hdr, out_meta, hsi_prep_n_out(p), cube->shape[1], cube->shape[2], &wo,
                                 across_ranks, project_share, &j);
}

hsi_status hsi_prep_write_envi(const char *out_hdr, const hsi_prep *p, const hsi_view *cube,
                               const hsi_meta *out_meta, hsi_interleave il, const hsi_prep_pass *pass)
{
    return write_share(out_hdr, p, cube, out_meta, il, pass, 0, 0);
}

hsi_status hsi_prep_write_envi_dist(const char *out_hdr, const hsi_prep *p, const hsi_view *cube,
                                    const hsi_meta *out_meta, hsi_interleave il,
                                    const hsi_prep_pass *pass)
{
    return write_share(out_hdr, p, cube, out_meta, il, pass, 1, 0);
}

hsi_status hsi_prep_write_envi_exact(const char *out_hdr, const hsi_prep *p, const hsi_view *cube,
                                     const hsi_meta *out_meta, hsi_interleave il,
                                     const hsi_prep_pass *pass)
{
    return write_share(out_hdr, p, cube, out_meta, il, pass, 0, 1);
}

static const char *const drop_keys[] = {"data gain values",          "data offset values",
                                        "reflectance scale factor",  "data ignore value",
                                        "data reflectance gain values", "data reflectance offset values",
                                        "default bands"};

hsi_status hsi_prep_out_meta(hsi_meta *out, const hsi_meta *in, const hsi_prep *p,
                             const char *what)
{
    hsi_status st = HSI_OK;
    HSI_TRY(hsi_meta_copy(out, in));
    if (!p->has_pca) {
        HSI_TRY(hsi_meta_select_bands(out, p->norm.bands, p->norm.n_bands));
    } else {
        const hsi_pca *pca = &p->pca;
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
        static const char *const per_band[] = {"wavelength", "fwhm", "bbl", "band names",
                                               "wavelength units"};
        for (size_t i = 0; i < sizeof per_band / sizeof *per_band; i++)
            hsi_meta_unset(out, per_band[i]);
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
        const char *old = in->description ? in->description : "";
        size_t len = strlen(old) + strlen(what) + 4;
        char *d = malloc(len);
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

/* ------------------------------------------------------------ the file */

#define PREP_FORMAT "hsi.preprocessing"
#define PREP_MAX_FEATURES 1000000

static const char prep_formula[] =
    "x: raw cube value of band bands[j] (0-based) as float64; if x == ignore_value (when "
    "has_ignore) or x is NaN: x = fill[j]; y[j] = scale[j] * (x - center[j]) + offset[j]; if l2: "
    "y = y / ||y||_2 (a zero spectrum stays zero); with PCA: z = (y - pca.mean) @ "
    "pca.components.T, and if whiten: z = z / sqrt(pca.explained_variance); the output "
    "(y, or z) is rounded to float32";

/* A tensor over borrowed host memory (freed by the caller after writing). */
static hsi_status wrap_tensor(hsi_named_tensor *nt, const char *name, void *data, hsi_dtype dt,
                              int ndim, const int64_t *shape)
{
    hsi_status st = HSI_OK;
    hsi_buffer *b = NULL;
    hsi_view v;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    memset(nt, 0, sizeof *nt);
    snprintf(nt->name, sizeof nt->name, "%s", name);
    HSI_TRY(hsi_buffer_wrap(&b, data, (size_t)n * hsi_dtype_size(dt), HSI_BUF_HOST, NULL, NULL));
    HSI_TRY(hsi_view_make_packed(&v, b, 0, dt, ndim, shape));
    st = hsi_tensor_from_view(&nt->t, &v, 0);
    hsi_view_release(&v);
cleanup:
    hsi_buffer_release(b);
    return st;
}

hsi_status hsi_prep_save(const hsi_prep *p, const char *path)
{
    hsi_status st = HSI_OK;
    hsi_named_tensor ts[9];
    int n = 0;
    const hsi_norm *nm = p->has_pca ? &p->pca.norm : &p->norm;
    const int64_t nf = nm->n_bands, k = p->has_pca ? p->pca.n_components : 0;
    memset(ts, 0, sizeof ts);
    HSI_TRY(wrap_tensor(&ts[n++], "bands", nm->bands, HSI_I64, 1, &nf));
    HSI_TRY(wrap_tensor(&ts[n++], "scale", nm->scale, HSI_F64, 1, &nf));
    HSI_TRY(wrap_tensor(&ts[n++], "center", nm->center, HSI_F64, 1, &nf));
    HSI_TRY(wrap_tensor(&ts[n++], "offset", nm->offset, HSI_F64, 1, &nf));
    HSI_TRY(wrap_tensor(&ts[n++], "fill", nm->fill, HSI_F64, 1, &nf));
    if (p->has_pca) {
        int64_t cs[2] = {k, nf};
        HSI_TRY(wrap_tensor(&ts[n++], "pca.mean", p->pca.mean, HSI_F64, 1, &nf));
        HSI_TRY(wrap_tensor(&ts[n++], "pca.components", p->pca.components, HSI_F64, 2, cs));
        HSI_TRY(wrap_tensor(&ts[n++], "pca.explained_variance", p->pca.explained_variance, HSI_F64,
                            1, &k));
        HSI_TRY(wrap_tensor(&ts[n++], "pca.explained_variance_ratio",
                            p->pca.explained_variance_ratio, HSI_F64, 1, &k));
    }
    char ncb[32], ig[40], nsamp[32], tv[40];
    snprintf(ncb, sizeof ncb, "%lld", (long long)p->n_cube_bands);
    snprintf(ig, sizeof ig, "%.17g", nm->ignore_value);
    snprintf(nsamp, sizeof nsamp, "%lld", p->has_pca ? (long long)p->pca.n_samples : 0LL);
    snprintf(tv, sizeof tv, "%.17g", p->has_pca ? p->pca.total_variance : 0.0);
    const char *meta[] = {"format", PREP_FORMAT,
                          "version", "1",
                          "normalize", hsi_norm_mode_name(nm->mode),
                          "n_cube_bands", ncb,
                          "l2", nm->l2 ? "1" : "0",
                          "has_ignore", nm->has_ignore ? "1" : "0",
                          "ignore_value", ig,
                          "pca", p->has_pca ? "1" : "0",
                          "whiten", p->has_pca && p->pca.whiten ? "1" : "0",
                          "pca_n_samples", nsamp,
                          "pca_total_variance", tv,
                          "formula", prep_formula};
    st = hsi_safetensors_write(path, ts, n, meta, (int)(sizeof meta / sizeof *meta / 2));
cleanup:
    for (int i = 0; i < n; i++) hsi_tensor_free(ts[i].t);
    return st;
}

/* Copies tensor `name` (dtype dt, shape (n0) or (n0, n1)) into a malloc'd
 * array; F64 values must be finite. */
static hsi_status read_tensor(void **out, const hsi_st_file *f, const char *path, const char *name,
                              hsi_dtype dt, int ndim, int64_t n0, int64_t n1)
{
    hsi_status st = HSI_OK;
    hsi_view v;
    *out = NULL;
    int i = hsi_safetensors_find(f, name);
    if (i < 0) return HSI_FAIL(HSI_ERR_FORMAT, "%s: tensor '%s' is missing", path, name);
    HSI_TRY(hsi_safetensors_view(f, i, &v));
    if (v.dtype != dt || v.ndim != ndim || v.shape[0] != n0 || (ndim == 2 && v.shape[1] != n1)) {
        char want[64], got[96];
        int o = 0;
        if (ndim == 2) snprintf(want, sizeof want, "(%lld, %lld)", (long long)n0, (long long)n1);
        else snprintf(want, sizeof want, "(%lld)", (long long)n0);
        o = snprintf(got, sizeof got, "(");
        for (int d = 0; d < v.ndim && o < (int)sizeof got - 24; d++)
            o += snprintf(got + o, sizeof got - (size_t)o, "%s%lld", d ? ", " : "", (long long)v.shape[d]);
        snprintf(got + o, sizeof got - (size_t)o, ")");
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: tensor '%s' must be %s of shape %s, found %s of shape %s",
                      path, name, hsi_dtype_name(dt), want, hsi_dtype_name(v.dtype), got);
        goto release;
    }
    if ((st = hsi_safetensors_check_finite(f, i, path)) != HSI_OK) goto release;
    size_t bytes = (size_t)hsi_view_nbytes(&v);
    *out = malloc(bytes ? bytes : 1);
    if (!*out) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto release;
    }
    hsi_view dst;
    st = hsi_buffer_wrap(&dst.buf, *out, bytes, HSI_BUF_HOST, NULL, NULL);
    if (st == HSI_OK) {
        hsi_buffer *b = dst.buf;
        st = hsi_view_make_packed(&dst, b, 0, dt, v.ndim, v.shape);
        hsi_buffer_release(b);
        if (st == HSI_OK) {
            st = hsi_view_copy(&dst, &v);
            hsi_view_release(&dst);
        }
    }
release:
    hsi_view_release(&v);
cleanup:
    if (st != HSI_OK) {
        free(*out);
        *out = NULL;
    }
    return st;
}

/* The first dimension of tensor `name` with ndim dimensions; an error when
 * it is missing or has another rank. */
static hsi_status tensor_dim0(int64_t *out, const hsi_st_file *f, const char *path, const char *name,
                              int ndim)
{
    hsi_status st = HSI_OK;
    hsi_view v;
    int i = hsi_safetensors_find(f, name);
    if (i < 0) return HSI_FAIL(HSI_ERR_FORMAT, "%s: tensor '%s' is missing", path, name);
    HSI_TRY(hsi_safetensors_view(f, i, &v));
    *out = v.shape[0];
    if (v.ndim != ndim)
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: tensor '%s' must have %d dimension%s, found %d", path,
                      name, ndim, ndim > 1 ? "s" : "", v.ndim);
    hsi_view_release(&v);
cleanup:
    return st;
}

static hsi_status meta_int(int64_t *out, const hsi_st_file *f, const char *path, const char *key,
                           int64_t lo, int64_t hi)
{
    const char *s = hsi_safetensors_meta(f, key);
    char *end = NULL;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || !((s[0] >= '0' && s[0] <= '9') || s[0] == '-') || end == s || *end ||
        errno == ERANGE || v < lo || v > hi)
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: __metadata__ '%s' must be an integer in %lld..%lld (found %s%s%s)",
                        path, key, (long long)lo, (long long)hi, s ? "'" : "", s ? s : "nothing",
                        s ? "'" : "");
    *out = v;
    return HSI_OK;
}

static hsi_status meta_double(double *out, const hsi_st_file *f, const char *path, const char *key)
{
    const char *s = hsi_safetensors_meta(f, key);
    char *end = NULL;
    double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || s[0] == ' ' || end == s || *end || !isfinite(v))
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: __metadata__ '%s' must be a finite number (found %s%s%s)",
                        path, key, s ? "'" : "", s ? s : "nothing", s ? "'" : "");
    *out = v;
    return HSI_OK;
}

/* The tensors a preprocessing file may hold: the first 5 always, the rest
 * with PCA. */
static const char *const prep_tensors[] = {"bands", "scale", "center", "offset", "fill",
                                           "pca.mean", "pca.components", "pca.explained_variance",
                                           "pca.explained_variance_ratio"};

/* Validates and copies a parsed preprocessing file; `path` names it. */
static hsi_status prep_from_st(hsi_prep *out, const hsi_st_file *f, const char *path)
{
    hsi_status st = HSI_OK;
    int64_t ncb = 0, l2 = 0, hig = 0, has_pca = 0, whiten = 0, nsamp = 0;
    memset(out, 0, sizeof *out);
    const char *fmt = hsi_safetensors_meta(f, "format"), *ver = hsi_safetensors_meta(f, "version"),
               *mode = hsi_safetensors_meta(f, "normalize");
    if (!fmt || strcmp(fmt, PREP_FORMAT) != 0) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: not an hsi preprocessing file (__metadata__ 'format' is %s%s%s, expected '%s')",
                      path, fmt ? "'" : "", fmt ? fmt : "missing", fmt ? "'" : "", PREP_FORMAT);
        goto cleanup;
    }
    if (!ver || strcmp(ver, "1") != 0) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: __metadata__ 'version' is %s%s%s; this hsi reads version 1",
                      path, ver ? "'" : "", ver ? ver : "missing", ver ? "'" : "");
        goto cleanup;
    }
    hsi_norm *nm = &out->norm;
    if (!mode || hsi_norm_mode_parse(&nm->mode, mode) != HSI_OK) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: __metadata__ 'normalize' is %s%s%s; expected none, zscore, minmax, global-minmax or l2",
                      path, mode ? "'" : "", mode ? mode : "missing", mode ? "'" : "");
        goto cleanup;
    }
    HSI_TRY(meta_int(&ncb, f, path, "n_cube_bands", 1, PREP_MAX_FEATURES));
    HSI_TRY(meta_int(&l2, f, path, "l2", 0, 1));
    HSI_TRY(meta_int(&hig, f, path, "has_ignore", 0, 1));
    HSI_TRY(meta_int(&has_pca, f, path, "pca", 0, 1));
    HSI_TRY(meta_double(&nm->ignore_value, f, path, "ignore_value"));
    /* the PCA's values are written (as 0) without PCA too: typed when present */
    if (has_pca || hsi_safetensors_meta(f, "whiten")) HSI_TRY(meta_int(&whiten, f, path, "whiten", 0, 1));
    if (has_pca || hsi_safetensors_meta(f, "pca_n_samples"))
        HSI_TRY(meta_int(&nsamp, f, path, "pca_n_samples", 0, INT64_MAX));
    double tvar = 0;
    if (has_pca || hsi_safetensors_meta(f, "pca_total_variance"))
        HSI_TRY(meta_double(&tvar, f, path, "pca_total_variance"));
    if (whiten && !has_pca) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: __metadata__ 'whiten' is 1 but 'pca' is 0", path);
        goto cleanup;
    }
    for (int j = 0; j < hsi_safetensors_count(f); j++) {
        const char *name = hsi_safetensors_name(f, j);
        size_t k = 0, nk = has_pca ? 9 : 5;
        while (k < nk && strcmp(name, prep_tensors[k])) k++;
        if (k == nk) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: unexpected tensor '%s' (with __metadata__ 'pca' = %lld "
                                          "the file holds bands, scale, center, offset, fill%s)",
                          path, name, (long long)has_pca,
                          has_pca ? ", pca.mean, pca.components, pca.explained_variance and "
                                    "pca.explained_variance_ratio" : "");
            goto cleanup;
        }
    }
    out->n_cube_bands = nm->n_cube_bands = ncb;
    nm->l2 = (int)l2;
    nm->has_ignore = (int)hig;
    HSI_TRY(tensor_dim0(&nm->n_bands, f, path, "bands", 1));
    const int64_t nf = nm->n_bands;
    if (nf < 1 || nf > ncb) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: tensor 'bands' lists %lld bands; expected 1..%lld "
                                      "(__metadata__ 'n_cube_bands')",
                      path, (long long)nf, (long long)ncb);
        goto cleanup;
    }
    HSI_TRY(read_tensor((void **)&nm->bands, f, path, "bands", HSI_I64, 1, nf, 0));
    for (int64_t j = 0; j < nf; j++)
        if (nm->bands[j] < 0 || nm->bands[j] >= ncb) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: tensor 'bands'[%lld] = %lld is outside 0..%lld (the "
                                          "cube's bands, __metadata__ 'n_cube_bands' = %lld)",
                          path, (long long)j, (long long)nm->bands[j], (long long)ncb - 1,
                          (long long)ncb);
            goto cleanup;
        }
    HSI_TRY(read_tensor((void **)&nm->scale, f, path, "scale", HSI_F64, 1, nf, 0));
    HSI_TRY(read_tensor((void **)&nm->center, f, path, "center", HSI_F64, 1, nf, 0));
    HSI_TRY(read_tensor((void **)&nm->offset, f, path, "offset", HSI_F64, 1, nf, 0));
    HSI_TRY(read_tensor((void **)&nm->fill, f, path, "fill", HSI_F64, 1, nf, 0));
    if (has_pca) {
        hsi_pca *pc = &out->pca;
        int64_t k = 0;
        HSI_TRY(tensor_dim0(&k, f, path, "pca.components", 2));
        if (k < 1 || k > nf) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: tensor 'pca.components' has %lld rows; expected "
                                          "(k, %lld) with 1 <= k <= %lld",
                          path, (long long)k, (long long)nf, (long long)nf);
            goto cleanup;
        }
        pc->total_variance = tvar;
        HSI_TRY(hsi_norm_copy(&pc->norm, nm));
        pc->n_features = nf;
        pc->n_components = k;
        pc->n_samples = nsamp;
        pc->whiten = (int)whiten;
        /* from here hsi_prep_free releases pc */
        out->has_pca = 1;
        HSI_TRY(read_tensor((void **)&pc->mean, f, path, "pca.mean", HSI_F64, 1, nf, 0));
        HSI_TRY(read_tensor((void **)&pc->components, f, path, "pca.components", HSI_F64, 2, k, nf));
        HSI_TRY(read_tensor((void **)&pc->explained_variance, f, path, "pca.explained_variance",
                            HSI_F64, 1, k, 0));
        HSI_TRY(read_tensor((void **)&pc->explained_variance_ratio, f, path,
                            "pca.explained_variance_ratio", HSI_F64, 1, k, 0));
    }
cleanup:
    if (st != HSI_OK) hsi_prep_free(out);
    return st;
}

/* The legacy private layout (pca.bin of hsi before 0.2) starts with this. */
static const char legacy_magic[8] = "HSIPCA1";

static hsi_status prep_from_legacy(hsi_prep *out)
{
    out->has_pca = 1;
    out->n_cube_bands = out->pca.norm.n_cube_bands;
    hsi_status st = hsi_norm_copy(&out->norm, &out->pca.norm);
    if (st != HSI_OK) hsi_prep_free(out);
    return st;
}

hsi_status hsi_prep_parse(hsi_prep *out, const void *data, size_t size, const char *what)
{
    hsi_status st = HSI_OK;
    hsi_st_file *f = NULL;
    memset(out, 0, sizeof *out);
    if (size >= sizeof legacy_magic && !memcmp(data, legacy_magic, sizeof legacy_magic)) {
        HSI_TRY(hsi_pca_parse(&out->pca, data, size, what));
        return prep_from_legacy(out);
    }
    st = hsi_safetensors_parse(&f, data, size, what);
    if (st != HSI_OK) {
        hsi_fail_context(st, "expected an hsi preprocessing model (safetensors) or an older hsi's "
                             "binary PCA model");
        goto cleanup;
    }
    st = prep_from_st(out, f, what);
cleanup:
    hsi_safetensors_close(f);
    return st;
}

hsi_status hsi_prep_load(hsi_prep *out, const char *path)
{
    /* one reader: the file mapped (checked to be a regular file), then the
     * same parse as from memory */
    hsi_buffer *b = NULL;
    memset(out, 0, sizeof *out);
    hsi_status st = hsi_buffer_map(&b, path);
    if (st != HSI_OK) return st;
    st = hsi_prep_parse(out, b->size ? b->data : "", b->size, path);
    hsi_buffer_release(b);
    return st;
}

void hsi_prep_free(hsi_prep *p)
{
    if (!p) return;
    hsi_norm_free(&p->norm);
    if (p->has_pca) hsi_pca_free(&p->pca);
    memset(p, 0, sizeof *p);
}

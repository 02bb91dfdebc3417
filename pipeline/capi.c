/* capi.c — the C API for foreign callers (see capi.h): handles around
 * hsi_cube, hsi_prep and hsi_run, accessors, and the calls of the job with
 * plain C arguments (JSON for settings and metrics). No logic of its own:
 * everything is a call into io/, kernels/ and pipeline/. */
#define _GNU_SOURCE
#include "pipeline/capi.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "io/cube.h"
#include "io/envi.h"
#include "io/gdal_io.h"
#include "kernels/fused.h"
#include "kernels/stats.h"
#include "pipeline/metrics.h"
#include "pipeline/preprocess.h"
#include "pipeline/run.h"
#include "pipeline/split.h"
#include "pipeline/trainer.h"

#define HSI_VERSION_STRING "0.1.0"

const char *hsi_version(void) { return HSI_VERSION_STRING; }
int hsi_abi_version(void) { return HSI_ABI_VERSION; }
void hsi_string_free(char *s) { free(s); }

/* --------------------------------------------------------------- cubes */

struct hsi_hcube {
    hsi_cube cube;
};

static hsi_status new_cube(hsi_hcube **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    hsi_cube_init(&(*out)->cube);
    return HSI_OK;
}

hsi_status hsi_hcube_open(hsi_hcube **out, const char *path, const char *var)
{
    hsi_status st = HSI_OK;
    hsi_hcube *c = NULL;
    if (!out || !path) return HSI_FAIL(HSI_ERR_ARG, "hsi_hcube_open: needs a path");
    *out = NULL;
    HSI_TRY(new_cube(&c));
    HSI_TRY(hsi_cube_open(&c->cube, path, &(hsi_open_options){var, 0}));
    *out = c;
    return HSI_OK;
cleanup:
    hsi_hcube_free(c);
    return st;
}

hsi_status hsi_hcube_wrap(hsi_hcube **out, void *data, const char *dtype, const int64_t shape[3],
                          const int64_t strides[3], int swapped)
{
    hsi_status st = HSI_OK;
    hsi_hcube *c = NULL;
    hsi_buffer *b = NULL;
    if (!out || !data || !dtype || !shape || !strides)
        return HSI_FAIL(HSI_ERR_ARG, "hsi_hcube_wrap: needs data, dtype, shape and strides");
    *out = NULL;
    hsi_dtype dt = hsi_dtype_from_name(dtype);
    size_t es = hsi_dtype_size(dt);
    if (!es) return HSI_FAIL(HSI_ERR_ARG, "hsi_hcube_wrap: dtype '%s' is not one hsi knows", dtype);
    /* the bytes the strides reach: [lo, hi) relative to data */
    int64_t lo = 0, hi = (int64_t)es;
    for (int k = 0; k < 3; k++) {
        if (shape[k] < 0) return HSI_FAIL(HSI_ERR_ARG, "hsi_hcube_wrap: negative shape");
        if (shape[k] == 0) hi = lo; /* empty */
        int64_t span = (shape[k] > 0 ? shape[k] - 1 : 0) * strides[k];
        if (span < 0) lo += span;
        else hi += span;
    }
    HSI_TRY(new_cube(&c));
    HSI_TRY(hsi_buffer_wrap(&b, (char *)data + lo, (size_t)(hi - lo), HSI_BUF_HOST, NULL, NULL));
    HSI_TRY(hsi_view_make(&c->cube.view, b, -lo, dt, 3, shape, strides, swapped ? 1 : 0));
    hsi_meta *m = &c->cube.meta;
    m->n_bands = shape[0];
    m->n_lines = shape[1];
    m->n_samples = shape[2];
    m->dtype = dt;
    m->format = strdup("memory");
    *out = c;
    c = NULL;
cleanup:
    hsi_buffer_release(b);
    hsi_hcube_free(c);
    return st;
}

void hsi_hcube_free(hsi_hcube *c)
{
    if (!c) return;
    hsi_cube_free(&c->cube);
    free(c);
}

void hsi_hcube_shape(const hsi_hcube *c, int64_t shape[3])
{
    for (int k = 0; k < 3; k++) shape[k] = c->cube.view.shape[k];
}

void hsi_hcube_strides(const hsi_hcube *c, int64_t strides[3])
{
    for (int k = 0; k < 3; k++) strides[k] = c->cube.view.strides[k];
}

const char *hsi_hcube_dtype(const hsi_hcube *c) { return hsi_dtype_name(c->cube.view.dtype); }
int hsi_hcube_swapped(const hsi_hcube *c) { return c->cube.view.swapped; }

const void *hsi_hcube_data(const hsi_hcube *c)
{
    return (const char *)c->cube.view.buf->data + c->cube.view.offset;
}

const void *hsi_hcube_buffer(const hsi_hcube *c, size_t *size)
{
    if (size) *size = c->cube.view.buf->size;
    return c->cube.view.buf->data;
}

static int64_t iabs64(int64_t x) { return x < 0 ? -x : x; }

const char *hsi_hcube_interleave(const hsi_hcube *c)
{
    const hsi_view *v = &c->cube.view;
    if (c->cube.meta.format && !strcmp(c->cube.meta.format, "envi"))
        return hsi_interleave_name(c->cube.meta.interleave);
    int64_t b = iabs64(v->strides[0]), l = iabs64(v->strides[1]), s = iabs64(v->strides[2]);
    if (b < s && b < l) return "bip";
    if (b < l) return "bil";
    return "bsq";
}

const char *hsi_hcube_format(const hsi_hcube *c)
{
    return c->cube.meta.format ? c->cube.meta.format : "";
}

const char *hsi_hcube_header_path(const hsi_hcube *c)
{
    return c->cube.header_path ? c->cube.header_path : "";
}

const char *hsi_hcube_data_path(const hsi_hcube *c)
{
    return c->cube.data_path ? c->cube.data_path : "";
}

int hsi_hcube_meta_count(const hsi_hcube *c) { return c->cube.meta.n_keys; }

const char *hsi_hcube_meta_key(const hsi_hcube *c, int i)
{
    return i >= 0 && i < c->cube.meta.n_keys ? c->cube.meta.keys[i].key : NULL;
}

const char *hsi_hcube_meta_value(const hsi_hcube *c, int i)
{
    return i >= 0 && i < c->cube.meta.n_keys ? c->cube.meta.keys[i].value : NULL;
}

const char *hsi_hcube_meta_get(const hsi_hcube *c, const char *key)
{
    const hsi_kv *kv = key ? hsi_meta_find(&c->cube.meta, key) : NULL;
    return kv ? kv->value : NULL;
}

const double *hsi_hcube_wavelengths(const hsi_hcube *c) { return c->cube.meta.wavelength; }
int hsi_hcube_wavelengths_nm(const hsi_hcube *c) { return c->cube.meta.wavelength_nm; }
const double *hsi_hcube_fwhm(const hsi_hcube *c) { return c->cube.meta.fwhm; }
const int *hsi_hcube_bbl(const hsi_hcube *c) { return c->cube.meta.bbl; }

const char *hsi_hcube_band_name(const hsi_hcube *c, int64_t band)
{
    const hsi_meta *m = &c->cube.meta;
    return m->band_names && band >= 0 && band < m->n_bands ? m->band_names[band] : NULL;
}

int hsi_hcube_ignore_value(const hsi_hcube *c, double *value)
{
    if (c->cube.meta.has_ignore_value && value) *value = c->cube.meta.ignore_value;
    return c->cube.meta.has_ignore_value;
}

int hsi_hcube_geotransform(const hsi_hcube *c, double gt[6])
{
    return hsi_meta_geotransform(&c->cube.meta, gt);
}

hsi_status hsi_hcube_crs_wkt(const hsi_hcube *c, char **wkt)
{
    return hsi_meta_crs_wkt(wkt, &c->cube.meta);
}

int hsi_hcube_n_classes(const hsi_hcube *c) { return c->cube.meta.n_classes; }

const char *hsi_hcube_class_name(const hsi_hcube *c, int k)
{
    const hsi_meta *m = &c->cube.meta;
    return m->class_names && k >= 0 && k < m->n_classes ? m->class_names[k] : NULL;
}

int hsi_hcube_class_color(const hsi_hcube *c, int k, uint8_t rgb[3])
{
    const hsi_meta *m = &c->cube.meta;
    if (!m->class_lookup || k < 0 || k >= m->n_classes) return 0;
    memcpy(rgb, m->class_lookup + 3 * k, 3);
    return 1;
}

const char *hsi_hcube_warning(const hsi_hcube *c, int i)
{
    const hsi_meta *m = &c->cube.meta;
    return i >= 0 && i < m->n_warnings ? m->warnings[i] : NULL;
}

/* (lines, samples) uint8 view over a caller's mask, or an empty view. */
static hsi_status mask_view(hsi_view *out, const uint8_t *mask, const hsi_hcube *c)
{
    hsi_status st = HSI_OK;
    hsi_buffer *b = NULL;
    memset(out, 0, sizeof *out);
    if (!mask) return HSI_OK;
    int64_t shape[2] = {c->cube.view.shape[1], c->cube.view.shape[2]};
    HSI_TRY(hsi_buffer_wrap(&b, (void *)mask, (size_t)(shape[0] * shape[1]), HSI_BUF_HOST, NULL,
                            NULL));
    st = hsi_view_make_packed(out, b, 0, HSI_U8, 2, shape);
cleanup:
    hsi_buffer_release(b);
    return st;
}

hsi_status hsi_hcube_stats(const hsi_hcube *c, const uint8_t *mask, double *mean, double *std,
                           double *min, double *max, int64_t *count)
{
    hsi_status st = HSI_OK;
    hsi_stats s = {0};
    hsi_view mv;
    if (!c || !mean || !std || !min || !max)
        return HSI_FAIL(HSI_ERR_ARG, "hsi_hcube_stats: needs a cube and four output arrays");
    HSI_TRY(mask_view(&mv, mask, c));
    const hsi_meta *m = &c->cube.meta;
    hsi_stats_opts so = {.mask = mask ? &mv : NULL,
                         .has_ignore = m->has_ignore_value,
                         .ignore_value = m->ignore_value};
    st = hsi_stats_compute(&s, &c->cube.view, &so);
    hsi_view_release(&mv);
    if (st != HSI_OK) goto cleanup;
    size_t n = (size_t)s.n_bands;
    memcpy(mean, s.mean, n * sizeof(double));
    memcpy(std, s.std, n * sizeof(double));
    memcpy(min, s.min, n * sizeof(double));
    memcpy(max, s.max, n * sizeof(double));
    if (count) memcpy(count, s.count, n * sizeof(int64_t));
cleanup:
    hsi_stats_free(&s);
    return st;
}

/* ------------------------------------------------------ writing cubes */

static int envi_code(hsi_dtype dt)
{
    for (int code = 1; code <= 15; code++)
        if (hsi_dtype_from_envi(code) == dt) return code;
    return 0;
}

static hsi_status parse_interleave(hsi_interleave *out, const char *s)
{
    if (!s || !strcasecmp(s, "bsq")) *out = HSI_BSQ;
    else if (!strcasecmp(s, "bil")) *out = HSI_BIL;
    else if (!strcasecmp(s, "bip")) *out = HSI_BIP;
    else return HSI_FAIL(HSI_ERR_ARG, "interleave must be bsq, bil or bip (got '%s')", s);
    return HSI_OK;
}

static int is_storage_key(const char *k)
{
    static const char *const keys[] = {"samples",    "lines",       "bands",        "data type",
                                       "interleave", "byte order",  "header offset", "file type",
                                       "file compression"};
    char n[64];
    hsi_meta_normkey(n, sizeof n, k);
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (!strcmp(n, keys[i])) return 1;
    return 0;
}

hsi_status hsi_hcube_write_envi(const hsi_hcube *c, const char *hdr_path, const char *interleave,
                                const char *dtype, const char *const *keys,
                                const char *const *values, int n)
{
    hsi_status st = HSI_OK;
    hsi_meta m;
    char *text = NULL;
    size_t len = 0;
    hsi_meta_init(&m);
    if (!c || !hdr_path) return HSI_FAIL(HSI_ERR_ARG, "hsi_hcube_write_envi: needs a cube and a path");
    hsi_envi_write_options o;
    hsi_envi_write_options_init(&o);
    HSI_TRY(parse_interleave(&o.interleave, interleave));
    if (dtype) {
        o.dtype = hsi_dtype_from_name(dtype);
        if (!hsi_dtype_size(o.dtype))
            return HSI_FAIL(HSI_ERR_ARG, "%s: dtype '%s' is not one hsi knows", hdr_path, dtype);
    }
    const hsi_view *v = &c->cube.view;
    hsi_dtype out_dt = dtype ? o.dtype : v->dtype;
    if (!envi_code(out_dt))
        return HSI_FAIL(HSI_ERR_ARG, "%s: ENVI has no data type for %s", hdr_path,
                        hsi_dtype_name(out_dt));
    /* the caller's keys through the header parser, so that typed fields
     * (wavelength, fwhm, bbl, map info, ...) are understood */
    FILE *fp = open_memstream(&text, &len);
    if (!fp) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    fprintf(fp, "ENVI\nsamples = %lld\nlines = %lld\nbands = %lld\nheader offset = 0\n"
                "data type = %d\ninterleave = %s\nbyte order = 0\n",
            (long long)v->shape[2], (long long)v->shape[1], (long long)v->shape[0], envi_code(out_dt),
            hsi_interleave_name(o.interleave));
    for (int i = 0; i < n; i++) {
        if (!keys || !values || !keys[i] || !values[i]) continue;
        char nk[64];
        hsi_meta_normkey(nk, sizeof nk, keys[i]);
        if (!strcmp(nk, "byte order")) {
            if (strcmp(values[i], "0") && strcmp(values[i], "1")) {
                fclose(fp);
                st = HSI_FAIL(HSI_ERR_ARG, "%s: 'byte order' must be 0 (little-endian) or 1 "
                                           "(big-endian), found '%s'",
                              hdr_path, values[i]);
                goto cleanup;
            }
            o.byte_order = values[i][0] == '1';
            continue;
        }
        if (is_storage_key(keys[i])) continue;
        if (strchr(keys[i], '=') || strchr(keys[i], '\n')) {
            fclose(fp);
            st = HSI_FAIL(HSI_ERR_ARG, "%s: header key '%s' may not hold '=' or a newline", hdr_path,
                          keys[i]);
            goto cleanup;
        }
        const char *val = values[i];
        int braced = val[0] == '{' || (!strchr(val, ',') && !strchr(val, '\n'));
        fprintf(fp, braced ? "%s = %s\n" : "%s = {%s}\n", keys[i], val);
    }
    fclose(fp);
    HSI_TRY(hsi_envi_parse(&m, text, len, hdr_path));
    st = hsi_envi_write(hdr_path, v, &m, &o);
cleanup:
    free(text);
    hsi_meta_free(&m);
    return st;
}

/* ------------------------------------------------------- preprocessing */

struct hsi_hprep {
    hsi_prep own;
    const hsi_prep *p; /* &own, or a run's */
};

static hsi_status new_prep(hsi_hprep **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    (*out)->p = &(*out)->own;
    return HSI_OK;
}

hsi_status hsi_hprep_fit(hsi_hprep **out, const hsi_hcube *c, const uint8_t *mask,
                         const char *bands, const char *wavelengths, int drop_bbl,
                         const char *normalize, int64_t pca, double pca_variance, int whiten)
{
    hsi_status st = HSI_OK;
    hsi_hprep *p = NULL;
    hsi_view mv;
    memset(&mv, 0, sizeof mv);
    if (!out || !c) return HSI_FAIL(HSI_ERR_ARG, "hsi_hprep_fit: needs a cube");
    *out = NULL;
    hsi_prep_spec s;
    hsi_prep_spec_init(&s);
    if (normalize) HSI_TRY(hsi_norm_mode_parse(&s.norm, normalize));
    if (pca < 0 || pca_variance < 0 || pca_variance > 1 || (pca > 0 && pca_variance > 0))
        return HSI_FAIL(HSI_ERR_ARG, "give pca > 0 components or pca_variance in (0, 1], not both");
    s.bands = bands;
    s.wavelengths = wavelengths;
    s.drop_bbl = drop_bbl;
    s.pca = pca;
    s.pca_variance = pca_variance;
    s.whiten = whiten;
    HSI_TRY(mask_view(&mv, mask, c));
    HSI_TRY(new_prep(&p));
    HSI_TRY(hsi_prep_fit(&p->own, &c->cube, mask ? &mv : NULL, &s));
    *out = p;
    p = NULL;
cleanup:
    hsi_view_release(&mv);
    hsi_hprep_free(p);
    return st;
}

hsi_status hsi_hprep_load(hsi_hprep **out, const char *path)
{
    hsi_status st = HSI_OK;
    hsi_hprep *p = NULL;
    if (!out || !path) return HSI_FAIL(HSI_ERR_ARG, "hsi_hprep_load: needs a path");
    *out = NULL;
    HSI_TRY(new_prep(&p));
    HSI_TRY(hsi_prep_load(&p->own, path));
    *out = p;
    return HSI_OK;
cleanup:
    hsi_hprep_free(p);
    return st;
}

hsi_status hsi_hprep_save(const hsi_hprep *p, const char *path)
{
    if (!p || !path) return HSI_FAIL(HSI_ERR_ARG, "hsi_hprep_save: needs a pipeline and a path");
    return hsi_prep_save(p->p, path);
}

void hsi_hprep_free(hsi_hprep *p)
{
    if (!p) return;
    hsi_prep_free(&p->own);
    free(p);
}

int64_t hsi_hprep_n_out(const hsi_hprep *p) { return hsi_prep_n_out(p->p); }
int64_t hsi_hprep_n_in(const hsi_hprep *p) { return p->p->n_cube_bands; }
int64_t hsi_hprep_n_bands(const hsi_hprep *p) { return p->p->norm.n_bands; }
const int64_t *hsi_hprep_bands(const hsi_hprep *p) { return p->p->norm.bands; }

const double *hsi_hprep_components(const hsi_hprep *p)
{
    return p->p->has_pca ? p->p->pca.components : NULL;
}

const char *hsi_hprep_normalize(const hsi_hprep *p) { return hsi_norm_mode_name(p->p->norm.mode); }
int hsi_hprep_whiten(const hsi_hprep *p) { return p->p->has_pca && p->p->pca.whiten; }

const double *hsi_hprep_mean(const hsi_hprep *p) { return p->p->has_pca ? p->p->pca.mean : NULL; }

const double *hsi_hprep_explained_variance(const hsi_hprep *p)
{
    return p->p->has_pca ? p->p->pca.explained_variance : NULL;
}

const double *hsi_hprep_explained_variance_ratio(const hsi_hprep *p)
{
    return p->p->has_pca ? p->p->pca.explained_variance_ratio : NULL;
}

hsi_status hsi_hprep_transform(const hsi_hprep *p, const hsi_hcube *c, float *out)
{
    if (!p || !c || !out) return HSI_FAIL(HSI_ERR_ARG, "hsi_hprep_transform: needs a pipeline, a cube and an output");
    hsi_status st = hsi_prep_check(p->p, &c->cube.view, "the cube");
    if (st != HSI_OK) return st;
    hsi_fused_opts fo = {0};
    return hsi_fused_run(out, &c->cube.view, &p->p->norm, p->p->has_pca ? &p->p->pca : NULL, &fo);
}

/* ------------------------------------------------------------ training */

typedef struct progress_ctx {
    hsi_progress_fn fn;
    void *ctx;
} progress_ctx;

static int on_event(void *ctx, const hsi_train_event *ev)
{
    const progress_ctx *p = ctx;
    return p->fn(p->ctx, (int)ev->kind, ev->text, ev->epoch, ev->epochs, ev->loss, ev->train_acc,
                 ev->val_oa, ev->lr);
}

/* One option of the JSON object into the configuration. */
static hsi_status set_option(hsi_train_config *c, const cJSON *o)
{
    const char *k = o->string;
#define IS(name) (!strcmp(k, name))
    char want = 0; /* what the option takes: n number, s string, b boolean */
#define NUM()                                                                                      \
    do {                                                                                           \
        want = 'n';                                                                                \
        if (!cJSON_IsNumber(o)) goto bad_type;                                                     \
    } while (0)
#define STR()                                                                                      \
    do {                                                                                           \
        want = 's';                                                                                \
        if (!cJSON_IsString(o)) goto bad_type;                                                     \
    } while (0)
#define BOOL()                                                                                     \
    do {                                                                                           \
        want = 'b';                                                                                \
        if (!cJSON_IsBool(o) && !cJSON_IsNumber(o)) goto bad_type;                                 \
    } while (0)
    const double d = o->valuedouble;
    const int flag = cJSON_IsTrue(o) || (cJSON_IsNumber(o) && o->valuedouble != 0);
    if (IS("model")) { STR(); c->model = o->valuestring; }
    else if (IS("epochs")) { NUM(); c->epochs = (int)d; }
    else if (IS("batch")) { NUM(); c->batch = (int)d; }
    else if (IS("lr")) { NUM(); if (d <= 0) goto bad_value; c->lr = d; }
    else if (IS("weight_decay")) { NUM(); c->weight_decay = d; }
    else if (IS("pca")) { NUM(); c->pca = (int)d; }
    else if (IS("pca_variance")) { NUM(); if (d <= 0 || d > 1) goto bad_value; c->pca_variance = d; c->pca = 0; }
    else if (IS("whiten")) { BOOL(); c->whiten = flag; }
    else if (IS("patch")) { NUM(); c->patch = (int)d; }
    else if (IS("train")) { NUM(); if (d <= 0 || d >= 1) goto bad_value; c->train_fraction = d; }
    else if (IS("per_class")) { NUM(); if (d < 1) goto bad_value; c->per_class = (int64_t)d; }
    else if (IS("val")) { NUM(); if (d < 0 || d >= 1) goto bad_value; c->val_fraction = d; }
    else if (IS("block")) { NUM(); c->block = (int)d; }
    else if (IS("seed")) { NUM(); if (d < 0) goto bad_value; c->seed = (uint64_t)d; }
    else if (IS("patience")) { NUM(); c->patience = (int)d; }
    else if (IS("workers")) { NUM(); c->workers = (int)d; }
    else if (IS("prefetch")) { NUM(); c->prefetch = (int)d; }
    else if (IS("threads")) { NUM(); c->threads = (int)d; }
    else if (IS("augment")) { BOOL(); c->augment = flag; }
    else if (IS("keep_bad_bands")) { BOOL(); c->keep_bad_bands = flag; }
    else if (IS("resume")) { BOOL(); c->resume = flag; }
    else if (IS("overwrite")) { BOOL(); c->overwrite = flag; }
    else if (IS("cuda_graph")) { BOOL(); c->cuda_graph = flag; }
    else if (IS("host_patches")) { BOOL(); c->host_patches = flag; }
    else if (IS("device")) { STR(); c->device = o->valuestring; }
    else if (IS("conv")) {
        STR();
        if (hsi_conv_option(o->valuestring, HSI_DEVICE_AUTO, NULL, NULL) != HSI_OK) goto bad_value;
        c->conv = o->valuestring;
    }
    else if (IS("bands")) { STR(); c->bands_spec = o->valuestring; }
    else if (IS("wavelengths")) { STR(); c->wavelengths_spec = o->valuestring; }
    else if (IS("var")) { STR(); c->cube_var = o->valuestring; }
    else if (IS("labels_var")) { STR(); c->labels_var = o->valuestring; }
    else if (IS("train_labels")) { STR(); c->train_labels = o->valuestring; }
    else if (IS("test_labels")) { STR(); c->test_labels = o->valuestring; }
    else if (IS("normalize")) {
        STR();
        if (hsi_norm_mode_parse(&c->norm, o->valuestring) != HSI_OK) goto bad_value;
    } else if (IS("fit_on")) {
        STR();
        if (!strcmp(o->valuestring, "all")) c->fit_on_all = 1;
        else if (!strcmp(o->valuestring, "train")) c->fit_on_all = 0;
        else goto bad_value;
    } else if (IS("split")) {
        STR();
        if (!strcmp(o->valuestring, "random")) c->split = HSI_SPLIT_RANDOM;
        else if (!strcmp(o->valuestring, "disjoint")) c->split = HSI_SPLIT_DISJOINT;
        else goto bad_value;
    } else if (IS("pad")) {
        STR();
        if (!strcmp(o->valuestring, "mirror")) c->pad = HSI_PAD_MIRROR;
        else if (!strcmp(o->valuestring, "zero")) c->pad = HSI_PAD_ZERO;
        else goto bad_value;
    } else if (IS("schedule")) {
        STR();
        if (!strcmp(o->valuestring, "cosine")) c->schedule = HSI_SCHED_COSINE;
        else if (!strcmp(o->valuestring, "constant")) c->schedule = HSI_SCHED_CONSTANT;
        else if (!strcmp(o->valuestring, "step")) c->schedule = HSI_SCHED_STEP;
        else goto bad_value;
    } else {
        return HSI_FAIL(HSI_ERR_ARG, "training option '%s' is not one hsi knows", k);
    }
    return HSI_OK;
bad_type:
    return HSI_FAIL(HSI_ERR_ARG, "training option '%s': expected %s, found %s", k,
                    want == 'n' ? "a number" : want == 's' ? "a string" : "true or false",
                    cJSON_IsString(o) ? "a string" : cJSON_IsNumber(o) ? "a number"
                    : cJSON_IsBool(o) ? "a boolean" : cJSON_IsNull(o) ? "null" : "a list or object");
bad_value:
    if (cJSON_IsString(o))
        return HSI_FAIL(HSI_ERR_ARG, "training option '%s': '%s' is not one of its values", k,
                        o->valuestring);
    return HSI_FAIL(HSI_ERR_ARG, "training option '%s': %g is out of its range", k, d);
#undef IS
#undef NUM
#undef STR
#undef BOOL
}

hsi_status hsi_train_json(const char *cube_path, const char *labels_path, const char *out_dir,
                          const char *options_json, hsi_progress_fn progress, void *ctx,
                          char **metrics_json)
{
    hsi_status st = HSI_OK;
    cJSON *opts = NULL;
    char *path = NULL;
    size_t len;
    if (metrics_json) *metrics_json = NULL;
    if (!cube_path || !out_dir) return HSI_FAIL(HSI_ERR_ARG, "training needs a cube and an output directory");
    hsi_train_config c;
    hsi_train_config_init(&c);
    c.cube_path = cube_path;
    c.labels_path = labels_path;
    c.out_dir = out_dir;
    if (options_json && *options_json) {
        opts = cJSON_Parse(options_json);
        if (!cJSON_IsObject(opts)) {
            st = HSI_FAIL(HSI_ERR_ARG, "training options: not a JSON object");
            goto cleanup;
        }
        const cJSON *o;
        cJSON_ArrayForEach(o, opts) HSI_TRY(set_option(&c, o));
    }
    if (c.train_labels && labels_path) {
        st = HSI_FAIL(HSI_ERR_ARG, "give labels or train_labels/test_labels, not both");
        goto cleanup;
    }
    progress_ctx pc = {progress, ctx};
    if (progress) {
        c.progress = on_event;
        c.progress_ctx = &pc;
    }
    HSI_TRY(hsi_train_run(&c, NULL));
    if (metrics_json) {
        size_t n = strlen(out_dir) + 16;
        if (!(path = malloc(n))) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        snprintf(path, n, "%s/metrics.json", out_dir);
        HSI_TRY(hsi_read_file(path, metrics_json, &len));
    }
cleanup:
    free(path);
    cJSON_Delete(opts);
    return st;
}

/* ------------------------------------------------------ run directories */

struct hsi_hrun {
    hsi_run run;
    hsi_hprep prep; /* a view of run.prep */
};

hsi_status hsi_hrun_load(hsi_hrun **out, const char *dir)
{
    hsi_status st = HSI_OK;
    if (!out || !dir) return HSI_FAIL(HSI_ERR_ARG, "hsi_hrun_load: needs a directory");
    *out = NULL;
    hsi_hrun *r = calloc(1, sizeof *r);
    if (!r) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    st = hsi_run_load(&r->run, dir);
    if (st != HSI_OK) {
        free(r);
        return st;
    }
    r->prep.p = &r->run.prep;
    *out = r;
    return HSI_OK;
}

void hsi_hrun_free(hsi_hrun *r)
{
    if (!r) return;
    hsi_run_free(&r->run);
    free(r);
}

const char *hsi_hrun_model(const hsi_hrun *r) { return r->run.model; }
int hsi_hrun_patch(const hsi_hrun *r) { return r->run.patch; }
int hsi_hrun_n_features(const hsi_hrun *r) { return r->run.n_features; }
int hsi_hrun_n_classes(const hsi_hrun *r) { return r->run.n_classes; }

int64_t hsi_hrun_class_label(const hsi_hrun *r, int k)
{
    return k >= 0 && k < r->run.n_classes ? r->run.label_ids[k] : -1;
}

const char *hsi_hrun_class_name(const hsi_hrun *r, int k)
{
    return k >= 0 && k < r->run.n_classes ? r->run.names[k] : NULL;
}

const hsi_hprep *hsi_hrun_prep(const hsi_hrun *r) { return &r->prep; }
int hsi_hrun_has_split(const hsi_hrun *r) { return r->run.roles.ndim == 2; }

int hsi_hrun_split_shape(const hsi_hrun *r, int64_t *n_lines, int64_t *n_samples)
{
    if (r->run.roles.ndim != 2) return 0;
    *n_lines = r->run.roles.shape[0];
    *n_samples = r->run.roles.shape[1];
    return 1;
}

hsi_status hsi_hrun_roles(const hsi_hrun *r, uint8_t *roles, int64_t n_lines, int64_t n_samples)
{
    const hsi_view *v = &r->run.roles;
    if (v->ndim != 2) return HSI_FAIL(HSI_ERR_STATE, "the run directory holds no split (split.hdr)");
    if (v->shape[0] != n_lines || v->shape[1] != n_samples)
        return HSI_FAIL(HSI_ERR_ARG, "the run's split is %lld x %lld, not %lld x %lld",
                        (long long)v->shape[0], (long long)v->shape[1], (long long)n_lines,
                        (long long)n_samples);
    const int32_t *p = (const int32_t *)((const char *)v->buf->data + v->offset);
    for (int64_t i = 0; i < n_lines * n_samples; i++) roles[i] = (uint8_t)p[i];
    return HSI_OK;
}

hsi_status hsi_hrun_predict(const hsi_hrun *r, const hsi_hcube *c, int32_t *map, int batch)
{
    if (!r || !c || !map) return HSI_FAIL(HSI_ERR_ARG, "hsi_hrun_predict: needs a run, a cube and a map");
    hsi_predict_opts po = {.batch = batch};
    return hsi_run_predict(&r->run, map, &c->cube.view, &po);
}

hsi_status hsi_hrun_evaluate(const hsi_hrun *r, const int32_t *map, const int32_t *labels,
                             int64_t n_lines, int64_t n_samples, const char *on,
                             char **metrics_json)
{
    hsi_status st = HSI_OK;
    hsi_buffer *b = NULL;
    hsi_view lv;
    hsi_metrics m;
    int have_m = 0;
    cJSON *j = NULL;
    memset(&lv, 0, sizeof lv);
    if (metrics_json) *metrics_json = NULL;
    if (!r || !map || !labels || !metrics_json)
        return HSI_FAIL(HSI_ERR_ARG, "hsi_hrun_evaluate: needs a run, a map, labels and an output");
    hsi_eval_on e;
    HSI_TRY(hsi_eval_on_parse(&e, on));
    int64_t shape[2] = {n_lines, n_samples}, unknown = 0;
    HSI_TRY(hsi_buffer_wrap(&b, (void *)labels, sizeof(int32_t) * (size_t)(n_lines * n_samples),
                            HSI_BUF_HOST, NULL, NULL));
    HSI_TRY(hsi_view_make_packed(&lv, b, 0, HSI_I32, 2, shape));
    HSI_TRY(hsi_run_evaluate(&r->run, &m, map, &lv, e, &unknown));
    have_m = 1;
    if (!(j = hsi_run_metrics_json(&r->run, &m, e, unknown))) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    if (!(*metrics_json = cJSON_PrintUnformatted(j))) st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
cleanup:
    cJSON_Delete(j);
    if (have_m) hsi_metrics_free(&m);
    hsi_view_release(&lv);
    hsi_buffer_release(b);
    return st;
}

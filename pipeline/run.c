/* run.c — the trained pipeline (see run.h): load and save a run directory,
 * classify pixels, predict a scene by line tiles, write maps, evaluate.
 * Training is trainer.c; the file formats are in docs/run-directory.md. */
#define _GNU_SOURCE
#include "pipeline/run.h"

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "io/envi.h"
#include "io/gdal_io.h"
#include "io/labels.h"
#include "io/quicklook.h"
#include "models/checkpoint.h"
#include "models/tensor.h"
#include "pipeline/run_internal.h"

char *hsi_run_path(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    if (!p) hsi_fail(HSI_ERR_NOMEM, "out of memory");
    return p;
}

hsi_status hsi_run_save_json(const char *path, const cJSON *j)
{
    char *s = cJSON_Print(j);
    if (!s) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory formatting %s", path);
    hsi_status st = hsi_write_file_atomic(path, s, strlen(s));
    free(s);
    return st;
}

void hsi_run_free(hsi_run *r)
{
    if (!r) return;
    hsi_prep_free(&r->prep);
    free(r->label_ids);
    if (r->names)
        for (int k = 0; k < r->n_classes; k++) free(r->names[k]);
    free(r->names);
    free(r->colors);
    hsi_module_free(r->net);
    hsi_view_release(&r->roles);
    memset(r, 0, sizeof *r);
}

int hsi_run_class_of(const hsi_run *r, int64_t label)
{
    for (int k = 0; k < r->n_classes; k++)
        if (r->label_ids[k] == label) return k;
    return -1;
}

/* ------------------------------------------------------------ predict */

hsi_status hsi_run_classify(const hsi_run *r, int32_t *pred, const hsi_patcher *pt,
                            const int64_t *pixels, int64_t n, int batch, hsi_graph *g)
{
    hsi_status st = HSI_OK;
    int prev = hsi_set_grad_enabled(0);
    hsi_module_train(r->net, 0);
    int64_t shape[5];
    for (int64_t i0 = 0; i0 < n; i0 += batch) {
        int nb = (int)(i0 + batch <= n ? batch : n - i0);
        int nd = hsi_model_input_shape(r->model, nb, r->n_features, pt->patch, shape);
        hsi_graph_reset(g);
        hsi_tensor *x = NULL, *logits = NULL;
        HSI_TRY(hsi_graph_tensor(&x, g, HSI_F32, nd, shape, 0));
        HSI_TRY(hsi_patches_extract(pt, hsi_tensor_ptr(x), pixels + i0, nb, 0, 0));
        HSI_TRY(hsi_module_forward(&logits, r->net, g, x));
        const float *lp = hsi_tensor_ptr(logits);
        int64_t K = logits->data.shape[1];
        for (int i = 0; i < nb; i++) {
            int64_t best = 0;
            for (int64_t k = 1; k < K; k++)
                if (lp[i * K + k] > lp[i * K + best]) best = k;
            pred[i0 + i] = (int32_t)best;
        }
    }
cleanup:
    hsi_set_grad_enabled(prev);
    return st;
}

/* Line tiles with a halo of patch / 2 lines: memory holds one tile of the
 * preprocessed cube, never the whole. */
hsi_status hsi_run_predict(const hsi_run *r, int32_t *map, const hsi_view *cube,
                           const hsi_predict_opts *opts)
{
    hsi_status st = HSI_OK;
    hsi_predict_opts o = {0};
    hsi_graph *g = NULL;
    int64_t *pix = NULL;
    int32_t *pred = NULL;
    if (opts) o = *opts;
    if (o.batch <= 0) o.batch = 256;
    if (o.tile_lines <= 0) o.tile_lines = 64;
    HSI_TRY(hsi_prep_check(&r->prep, cube, NULL));
    const int64_t L = cube->shape[1], S = cube->shape[2], T = o.tile_lines;
    if (o.features && (o.features->ndim != 3 || o.features->shape[0] != r->n_features ||
                       o.features->shape[1] != L || o.features->shape[2] != S))
        return HSI_FAIL(HSI_ERR_ARG, "predict: the features given are not (%d, %lld, %lld)",
                        r->n_features, (long long)L, (long long)S);
    const int rad = r->patch / 2;
    pix = malloc((size_t)(T * S) * sizeof *pix);
    pred = malloc((size_t)(T * S) * sizeof *pred);
    if (!pix || !pred) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    HSI_TRY(hsi_graph_new(&g));
    hsi_progress pr;
    hsi_progress_begin(&pr, o.progress_label ? o.progress_label : "predict", L);
    if (!o.progress_label) pr.active = 0;
    for (int64_t y0 = 0; y0 < L; y0 += T) {
        int64_t n = y0 + T <= L ? T : L - y0;
        int64_t a = y0 - rad < 0 ? 0 : y0 - rad, b = y0 + n + rad > L ? L : y0 + n + rad;
        hsi_view crop, fc;
        hsi_patcher pt;
        memset(&fc, 0, sizeof fc);
        if (o.features) {
            st = hsi_view_crop(&fc, o.features, a, b - a, 0, S);
        } else {
            HSI_TRY(hsi_view_crop(&crop, cube, a, b - a, 0, S));
            st = hsi_prep_transform(&fc, &r->prep, &crop, NULL, 0, 0);
            hsi_view_release(&crop);
        }
        if (st != HSI_OK) goto cleanup;
        st = hsi_patcher_init(&pt, &fc, r->patch, r->pad, NULL);
        hsi_view_release(&fc);
        if (st != HSI_OK) goto cleanup;
        for (int64_t y = 0; y < n; y++)
            for (int64_t x = 0; x < S; x++) pix[y * S + x] = (y0 + y - a) * S + x;
        st = hsi_run_classify(r, pred, &pt, pix, n * S, o.batch, g);
        hsi_patcher_free(&pt);
        if (st != HSI_OK) goto cleanup;
        for (int64_t i = 0; i < n * S; i++) map[y0 * S + i] = (int32_t)r->label_ids[pred[i]];
        hsi_progress_update(&pr, y0 + n);
    }
    hsi_progress_end(&pr);
cleanup:
    hsi_graph_free(g);
    free(pix);
    free(pred);
    return st;
}

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcasecmp(s + a - b, suf) == 0;
}

hsi_status hsi_write_class_envi(const char *path, const hsi_view *classes, int n_classes,
                                char *const *names, const uint8_t *rgb, const hsi_meta *geo,
                                const char *description)
{
    hsi_status st = HSI_OK;
    hsi_meta m;
    hsi_meta_init(&m);
    if (geo) {
        m.map_info = geo->map_info;
        if (geo->coordinate_system) m.coordinate_system = strdup(geo->coordinate_system);
    }
    m.n_bands = 1;
    m.n_lines = classes->shape[1];
    m.n_samples = classes->shape[2];
    m.dtype = classes->dtype;
    m.file_kind = HSI_FILE_CLASSIFICATION;
    m.file_type = strdup("ENVI Classification");
    m.n_classes = n_classes;
    m.class_names = calloc((size_t)n_classes, sizeof(char *));
    m.class_lookup = calloc((size_t)n_classes, 3);
    m.description = strdup(description);
    if (!m.class_names || !m.class_lookup || !m.file_type || !m.description) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (int k = 0; k < n_classes; k++) {
        char buf[32];
        snprintf(buf, sizeof buf, "Class %d", k);
        m.class_names[k] = strdup(names && names[k] ? names[k] : buf);
    }
    if (rgb) memcpy(m.class_lookup, rgb, (size_t)n_classes * 3);
    hsi_envi_write_options o;
    hsi_envi_write_options_init(&o);
    o.dtype = classes->dtype;
    st = hsi_envi_write(path, classes, &m, &o);
cleanup:
    hsi_meta_free(&m);
    return st;
}

hsi_status hsi_run_write_map(const hsi_run *r, const char *path, const int32_t *map,
                             int64_t L, int64_t S, const hsi_meta *geo)
{
    hsi_status st = HSI_OK;
    int max_id = 0;
    for (int k = 0; k < r->n_classes; k++)
        if (r->label_ids[k] > max_id) max_id = (int)r->label_ids[k];
    int nc = max_id + 1;
    char **names = calloc((size_t)nc, sizeof *names);
    uint8_t *rgb = calloc((size_t)nc * 3, 1);
    hsi_view mv, m2;
    memset(&mv, 0, sizeof mv);
    memset(&m2, 0, sizeof m2);
    if (!names || !rgb) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    names[0] = "Unclassified";
    for (int k = 0; k < r->n_classes; k++) {
        int id = (int)r->label_ids[k];
        names[id] = r->names && r->names[k] ? r->names[k] : NULL;
        if (r->colors) memcpy(rgb + 3 * id, r->colors + 3 * k, 3);
    }
    hsi_dtype dt = nc <= 256 ? HSI_U8 : HSI_U16;
    int64_t shape[3] = {1, L, S};
    HSI_TRY(hsi_view_alloc(&mv, dt, 3, shape, HSI_BUF_HOST));
    for (int64_t i = 0; i < L * S; i++) {
        if (dt == HSI_U8) ((uint8_t *)mv.buf->data)[i] = (uint8_t)map[i];
        else ((uint16_t *)mv.buf->data)[i] = (uint16_t)map[i];
    }
    if (ends_with(path, ".png")) {
        HSI_TRY(hsi_view_index(&m2, &mv, 0, 0));
        st = hsi_quicklook_labels_png(path, &m2, nc, (const char *const *)names,
                                      r->colors ? rgb : NULL);
    } else if (ends_with(path, ".tif") || ends_with(path, ".tiff")) {
        HSI_TRY(hsi_view_index(&m2, &mv, 0, 0));
        st = hsi_gdal_write_classes(path, &m2, nc, names, r->colors ? rgb : NULL, geo);
    } else {
        st = hsi_write_class_envi(path, &mv, nc, names, rgb, geo,
                                  "hsi predicted classification map");
    }
cleanup:
    free(names);
    free(rgb);
    hsi_view_release(&m2);
    hsi_view_release(&mv);
    return st;
}

const char *hsi_eval_on_name(hsi_eval_on on)
{
    return on == HSI_EVAL_ALL ? "all" : on == HSI_EVAL_TRAIN ? "train" : "test";
}

hsi_status hsi_eval_on_parse(hsi_eval_on *out, const char *s)
{
    if (!s || !strcmp(s, "test")) *out = HSI_EVAL_TEST;
    else if (!strcmp(s, "all")) *out = HSI_EVAL_ALL;
    else if (!strcmp(s, "train")) *out = HSI_EVAL_TRAIN;
    else return HSI_FAIL(HSI_ERR_ARG, "evaluate on test, train or all (got '%s')", s);
    return HSI_OK;
}

hsi_status hsi_run_eval_check(const hsi_run *r, hsi_eval_on on, int64_t L, int64_t S)
{
    if (on == HSI_EVAL_ALL) return HSI_OK;
    const char *rname = on == HSI_EVAL_TRAIN ? "training" : "test";
    if (r->roles.ndim != 2)
        return HSI_FAIL(HSI_ERR_ARG, "evaluate on the %s pixels: the run directory has no split.hdr "
                                     "(a run of an older hsi); evaluate on every labelled pixel "
                                     "instead (hsi eval --on all)",
                        rname);
    if (r->roles.shape[0] != L || r->roles.shape[1] != S)
        return HSI_FAIL(HSI_ERR_ARG, "evaluate on the %s pixels: the scene is %lld x %lld but the "
                                     "run's split is %lld x %lld; for another scene use --on all",
                        rname, (long long)L, (long long)S, (long long)r->roles.shape[0],
                        (long long)r->roles.shape[1]);
    return HSI_OK;
}

cJSON *hsi_run_metrics_json(const hsi_run *r, const hsi_metrics *m, hsi_eval_on on,
                            int64_t n_unknown)
{
    cJSON *j = hsi_metrics_json(m, (const char *const *)r->names, r->label_ids);
    if (!j) return NULL;
    cJSON_AddStringToObject(j, "on", hsi_eval_on_name(on));
    cJSON_AddNumberToObject(j, "n_unknown", (double)n_unknown);
    return j;
}

hsi_status hsi_run_evaluate(const hsi_run *r, hsi_metrics *m, const int32_t *map,
                            const hsi_view *labels, hsi_eval_on on, int64_t *n_unknown)
{
    hsi_status st = HSI_OK;
    memset(m, 0, sizeof *m);
    if (labels->ndim != 2 || labels->dtype != HSI_I32 || !hsi_view_is_packed(labels))
        return HSI_FAIL(HSI_ERR_ARG, "evaluate: labels must be a packed (lines, samples) int32 map");
    const int64_t L = labels->shape[0], S = labels->shape[1];
    const int32_t *lm = labels->buf ? (const int32_t *)((const char *)labels->buf->data + labels->offset) : NULL;
    const int role = on == HSI_EVAL_TRAIN ? HSI_ROLE_TRAIN : HSI_ROLE_TEST;
    if ((st = hsi_run_eval_check(r, on, L, S)) != HSI_OK) return st;
    const int32_t *roles =
        on == HSI_EVAL_ALL ? NULL : (const int32_t *)((const char *)r->roles.buf->data + r->roles.offset);
    int32_t *yt = malloc((size_t)(L * S > 0 ? L * S : 1) * sizeof *yt);
    int32_t *yp = malloc((size_t)(L * S > 0 ? L * S : 1) * sizeof *yp);
    int64_t n = 0, unknown = 0;
    if (!yt || !yp) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (int64_t i = 0; i < L * S; i++) {
        if (lm[i] <= 0 || (roles && roles[i] != role)) continue;
        int k = hsi_run_class_of(r, lm[i]), q = hsi_run_class_of(r, map[i]);
        if (k < 0) {
            unknown++;
            continue;
        }
        yt[n] = k;
        yp[n] = q;
        n++;
    }
    if (n_unknown) *n_unknown = unknown;
    st = hsi_metrics_compute(m, yt, yp, n, r->n_classes);
cleanup:
    free(yt);
    free(yp);
    return st;
}

/* --------------------------------------------------------- load, save */

static hsi_status read_doubles(double **out, const cJSON *a, int64_t n, const char *path,
                               const char *what)
{
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: '%s' must be a list of %lld numbers", path, what,
                        (long long)n);
    *out = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (!*out) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    int64_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a)
    {
        if (!cJSON_IsNumber(e))
            return HSI_FAIL(HSI_ERR_FORMAT, "%s: '%s'[%lld] is not a number", path, what,
                            (long long)i);
        (*out)[i++] = e->valuedouble;
    }
    return HSI_OK;
}

/* Version 1 of pipeline.json (hsi before the run-directory schema) held the
 * normalisation in the JSON and the PCA in the private pca.bin. */
static hsi_status norm_from_json_v1(hsi_norm *n, const cJSON *o, const char *path)
{
    hsi_status st = HSI_OK;
    double *b = NULL;
    memset(n, 0, sizeof *n);
    const cJSON *mode = cJSON_GetObjectItem(o, "mode"), *nb = cJSON_GetObjectItem(o, "n_cube_bands"),
                *bands = cJSON_GetObjectItem(o, "bands");
    if (!cJSON_IsString(mode) || !cJSON_IsNumber(nb) || !cJSON_IsArray(bands))
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: 'normalization' needs mode, n_cube_bands and bands",
                        path);
    HSI_TRY(hsi_norm_mode_parse(&n->mode, mode->valuestring));
    n->n_cube_bands = (int64_t)nb->valuedouble;
    n->n_bands = cJSON_GetArraySize(bands);
    HSI_TRY(read_doubles(&b, bands, n->n_bands, path, "bands"));
    n->bands = malloc((size_t)(n->n_bands ? n->n_bands : 1) * sizeof *n->bands);
    if (!n->bands) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (int64_t i = 0; i < n->n_bands; i++) {
        n->bands[i] = (int64_t)b[i];
        if (n->bands[i] < 0 || n->bands[i] >= n->n_cube_bands) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: band %lld outside the cube's %lld", path,
                          (long long)n->bands[i], (long long)n->n_cube_bands);
            goto cleanup;
        }
    }
    HSI_TRY(read_doubles(&n->scale, cJSON_GetObjectItem(o, "scale"), n->n_bands, path, "scale"));
    HSI_TRY(read_doubles(&n->center, cJSON_GetObjectItem(o, "center"), n->n_bands, path, "center"));
    HSI_TRY(read_doubles(&n->offset, cJSON_GetObjectItem(o, "offset"), n->n_bands, path, "offset"));
    HSI_TRY(read_doubles(&n->fill, cJSON_GetObjectItem(o, "fill"), n->n_bands, path, "fill"));
    n->l2 = cJSON_IsTrue(cJSON_GetObjectItem(o, "l2"));
    const cJSON *ig = cJSON_GetObjectItem(o, "ignore_value");
    if (cJSON_IsNumber(ig)) {
        n->has_ignore = 1;
        n->ignore_value = ig->valuedouble;
    }
cleanup:
    free(b);
    if (st != HSI_OK) hsi_norm_free(n);
    return st;
}

/* A file named by pipeline.json: a plain name inside the directory. */
static hsi_status member(char **out, const char *dir, const char *path, const cJSON *name,
                         const char *what)
{
    *out = NULL;
    if (!cJSON_IsString(name) || !*name->valuestring || strchr(name->valuestring, '/') ||
        !strcmp(name->valuestring, "..") || !strcmp(name->valuestring, "."))
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: '%s' must name a file inside the run directory",
                        path, what);
    *out = hsi_run_path(dir, name->valuestring);
    return *out ? HSI_OK : HSI_ERR_NOMEM;
}

static hsi_status load_prep(hsi_run *r, const cJSON *j, const char *dir, const char *path)
{
    hsi_status st = HSI_OK;
    char *pp = NULL;
    const cJSON *pf = cJSON_GetObjectItem(j, "preprocessing_file");
    if (pf) {
        HSI_TRY(member(&pp, dir, path, pf, "preprocessing_file"));
        HSI_TRY(hsi_prep_load(&r->prep, pp));
    } else {
        /* version 1: normalisation in the JSON, optional pca.bin */
        const cJSON *nrm = cJSON_GetObjectItem(j, "normalization"),
                    *pcaf = cJSON_GetObjectItem(j, "pca_file");
        if (!cJSON_IsObject(nrm)) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: needs 'preprocessing_file' (or, version 1, "
                                          "'normalization')",
                          path);
            goto cleanup;
        }
        if (pcaf) {
            HSI_TRY(member(&pp, dir, path, pcaf, "pca_file"));
            HSI_TRY(hsi_prep_load(&r->prep, pp));
        } else {
            HSI_TRY(norm_from_json_v1(&r->prep.norm, nrm, path));
            r->prep.n_cube_bands = r->prep.norm.n_cube_bands;
        }
    }
cleanup:
    free(pp);
    return st;
}

hsi_status hsi_run_load(hsi_run *r, const char *dir)
{
    hsi_status st = HSI_OK;
    char *path = NULL, *text = NULL, *mp = NULL, *sp = NULL;
    cJSON *j = NULL;
    hsi_labels roles;
    hsi_labels_init(&roles);
    memset(r, 0, sizeof *r);
    size_t len;
    if (!(path = hsi_run_path(dir, "pipeline.json"))) return HSI_ERR_NOMEM;
    HSI_TRY(hsi_read_file(path, &text, &len));
    j = cJSON_Parse(text);
    if (!j) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: not valid JSON (near byte %ld)", path,
                      cJSON_GetErrorPtr() ? (long)(cJSON_GetErrorPtr() - text) : 0L);
        goto cleanup;
    }
    const cJSON *ver = cJSON_GetObjectItem(j, "version"), *model = cJSON_GetObjectItem(j, "model"),
                *patch = cJSON_GetObjectItem(j, "patch"), *classes = cJSON_GetObjectItem(j, "classes"),
                *pad = cJSON_GetObjectItem(j, "pad");
    if (cJSON_IsNumber(ver) && ver->valueint > HSI_RUN_VERSION) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: version %d; this hsi reads run directories up to "
                                      "version %d (a newer hsi wrote it)",
                      path, ver->valueint, HSI_RUN_VERSION);
        goto cleanup;
    }
    if (!cJSON_IsString(model) || !cJSON_IsNumber(patch) || !cJSON_IsArray(classes)) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: needs 'model', 'patch' and 'classes'", path);
        goto cleanup;
    }
    snprintf(r->model, sizeof r->model, "%s", model->valuestring);
    r->patch = patch->valueint;
    if (r->patch < 1 || r->patch % 2 == 0 || r->patch > HSI_PATCH_MAX) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: 'patch' must be odd and in 1..%d (found %d)", path,
                      HSI_PATCH_MAX, r->patch);
        goto cleanup;
    }
    r->pad = cJSON_IsString(pad) && !strcmp(pad->valuestring, "zero") ? HSI_PAD_ZERO : HSI_PAD_MIRROR;
    HSI_TRY(load_prep(r, j, dir, path));
    r->n_features = (int)hsi_prep_n_out(&r->prep);
    r->n_classes = cJSON_GetArraySize(classes);
    if (r->n_classes < 2) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: fewer than 2 classes", path);
        goto cleanup;
    }
    r->label_ids = calloc((size_t)r->n_classes, sizeof *r->label_ids);
    r->names = calloc((size_t)r->n_classes, sizeof *r->names);
    r->colors = calloc((size_t)r->n_classes * 3, 1);
    if (!r->label_ids || !r->names || !r->colors) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    int k = 0, any_color = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, classes)
    {
        const cJSON *lb = cJSON_GetObjectItem(e, "label"), *nm = cJSON_GetObjectItem(e, "name"),
                    *co = cJSON_GetObjectItem(e, "color");
        if (!cJSON_IsNumber(lb)) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: classes[%d] has no 'label'", path, k);
            goto cleanup;
        }
        r->label_ids[k] = (int64_t)lb->valuedouble;
        r->names[k] = strdup(cJSON_IsString(nm) ? nm->valuestring : "?");
        if (cJSON_IsArray(co) && cJSON_GetArraySize(co) == 3) {
            any_color = 1;
            for (int q = 0; q < 3; q++)
                r->colors[3 * k + q] = (uint8_t)cJSON_GetArrayItem(co, q)->valueint;
        }
        k++;
    }
    if (!any_color) {
        free(r->colors);
        r->colors = NULL;
    }
    HSI_TRY(hsi_model_create(&r->net, r->model, r->n_features, r->patch, r->n_classes, HSI_F32, 0));
    const cJSON *mf = cJSON_GetObjectItem(j, "model_file");
    if (mf) HSI_TRY(member(&mp, dir, path, mf, "model_file"));
    else if (!(mp = hsi_run_path(dir, "model.safetensors"))) {
        st = HSI_ERR_NOMEM;
        goto cleanup;
    }
    HSI_TRY(hsi_module_load(r->net, mp, 1, NULL));
    hsi_module_train(r->net, 0);
    const cJSON *sf = cJSON_GetObjectItem(j, "split_file");
    if (sf) {
        HSI_TRY(member(&sp, dir, path, sf, "split_file"));
        HSI_TRY(hsi_labels_open(&roles, sp, NULL));
        hsi_view_ref(&r->roles, &roles.map);
    }
cleanup:
    if (st != HSI_OK) hsi_run_free(r);
    hsi_labels_free(&roles);
    cJSON_Delete(j);
    free(text);
    free(path);
    free(mp);
    free(sp);
    return st;
}

hsi_status hsi_run_save_model(const hsi_run *r, const char *path)
{
    char shape[64], k[16];
    int64_t s[5];
    int nd = hsi_model_input_shape(r->model, 1, r->n_features, r->patch, s);
    int o = snprintf(shape, sizeof shape, "[");
    for (int i = 1; i < nd; i++)
        o += snprintf(shape + o, sizeof shape - (size_t)o, "%s%lld", i > 1 ? ", " : "", (long long)s[i]);
    snprintf(shape + o, sizeof shape - (size_t)o, "]");
    snprintf(k, sizeof k, "%d", r->n_classes);
    cJSON *names = cJSON_CreateArray(), *ids = cJSON_CreateArray();
    for (int c = 0; c < r->n_classes; c++) {
        cJSON_AddItemToArray(names, cJSON_CreateString(r->names[c]));
        cJSON_AddItemToArray(ids, cJSON_CreateNumber((double)r->label_ids[c]));
    }
    char *sn = cJSON_PrintUnformatted(names), *si = cJSON_PrintUnformatted(ids);
    cJSON_Delete(names);
    cJSON_Delete(ids);
    if (!sn || !si) {
        free(sn);
        free(si);
        return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    }
    const char *meta[] = {"format", "hsi.model", "model", r->model, "input_shape", shape,
                          "n_classes", k, "class_names", sn, "label_ids", si};
    hsi_status st = hsi_module_save(r->net, path, meta, (int)(sizeof meta / sizeof *meta / 2));
    free(sn);
    free(si);
    return st;
}

hsi_status hsi_run_save(const hsi_run *r, const char *dir, const hsi_split *split,
                        const hsi_meta *geo, cJSON *training)
{
    hsi_status st = HSI_OK;
    char *pp = NULL;
    cJSON *pj = cJSON_CreateObject();
    hsi_view rv;
    memset(&rv, 0, sizeof rv);
    if (!pj) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    if (!(pp = hsi_run_path(dir, "model.safetensors"))) goto cleanup;
    HSI_TRY(hsi_run_save_model(r, pp));
    free(pp);
    if (!(pp = hsi_run_path(dir, "preprocessing.safetensors"))) goto cleanup;
    HSI_TRY(hsi_prep_save(&r->prep, pp));
    if (split) {
        static char *const role_names[HSI_N_ROLES] = {"unused", "train", "validation", "test"};
        static const uint8_t role_rgb[3 * HSI_N_ROLES] = {0, 0, 0, 0, 160, 0, 240, 200, 0, 200, 0, 0};
        int64_t shape[3] = {1, split->n_lines, split->n_samples};
        HSI_TRY(hsi_view_alloc(&rv, HSI_U8, 3, shape, HSI_BUF_HOST));
        memcpy(rv.buf->data, split->role, (size_t)(split->n_lines * split->n_samples));
        free(pp);
        if (!(pp = hsi_run_path(dir, "split.hdr"))) goto cleanup;
        HSI_TRY(hsi_write_class_envi(pp, &rv, HSI_N_ROLES, role_names, role_rgb, geo,
                                     "hsi training split: the role of each pixel"));
    }
    cJSON_AddNumberToObject(pj, "version", HSI_RUN_VERSION);
    cJSON_AddStringToObject(pj, "model", r->model);
    cJSON_AddNumberToObject(pj, "patch", r->patch);
    cJSON_AddStringToObject(pj, "pad", r->pad == HSI_PAD_ZERO ? "zero" : "mirror");
    cJSON_AddNumberToObject(pj, "features", r->n_features);
    cJSON_AddNumberToObject(pj, "cube_bands", (double)r->prep.n_cube_bands);
    cJSON_AddStringToObject(pj, "model_file", "model.safetensors");
    cJSON_AddStringToObject(pj, "preprocessing_file", "preprocessing.safetensors");
    if (split) cJSON_AddStringToObject(pj, "split_file", "split.hdr");
    cJSON *cl = cJSON_AddArrayToObject(pj, "classes");
    for (int k = 0; k < r->n_classes; k++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "index", k);
        cJSON_AddNumberToObject(e, "label", (double)r->label_ids[k]);
        cJSON_AddStringToObject(e, "name", r->names[k]);
        if (r->colors) {
            int rgb[3] = {r->colors[3 * k], r->colors[3 * k + 1], r->colors[3 * k + 2]};
            cJSON_AddItemToObject(e, "color", cJSON_CreateIntArray(rgb, 3));
        }
        cJSON_AddItemToArray(cl, e);
    }
    if (training) cJSON_AddItemReferenceToObject(pj, "training", training);
    free(pp);
    if (!(pp = hsi_run_path(dir, "pipeline.json"))) goto cleanup;
    st = hsi_run_save_json(pp, pj);
cleanup:
    if (!pp && st == HSI_OK) st = HSI_ERR_NOMEM;
    hsi_view_release(&rv);
    cJSON_Delete(pj);
    free(pp);
    return st;
}

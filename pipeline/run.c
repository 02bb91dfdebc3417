/* run.c — the trained pipeline (see run.h): load and save a run directory,
 * classify pixels, predict a scene by line tiles, write maps, evaluate.
 * Training is trainer.c; the file formats are in docs/run-directory.md. */
#define _GNU_SOURCE
#include "pipeline/run.h"

#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/dist.h"
#include "io/envi.h"
#include "io/gdal_io.h"
#include "io/labels.h"
#include "io/quicklook.h"
#include "kernels/cuda.h"
#include "models/checkpoint.h"
#include "models/model_cuda.h"
#include "models/optim.h"
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

void hsi_gpu_classifier_free(hsi_gpu_classifier *q)
{
    if (q->owns_dm) hsi_dmodel_free(q->dm);
    hsi_cuda_free(q->x_d);
    hsi_cuda_free(q->px_d);
    free(q->x_h);
    free(q->z_h);
    memset(q, 0, sizeof *q);
}

hsi_status hsi_gpu_classifier_init(hsi_gpu_classifier *q, const hsi_run *r, hsi_dmodel *dm,
                                   int batch, hsi_gpu_conv conv)
{
    hsi_status st = HSI_OK;
    int64_t shape[5];
    memset(q, 0, sizeof *q);
    int nd = hsi_model_input_shape(r->model, 1, r->n_features, r->patch, shape);
    q->batch = batch;
    q->sample_floats = 1;
    for (int k = 1; k < nd; k++) q->sample_floats *= shape[k];
    if (dm) {
        q->dm = dm;
    } else {
        hsi_optim_config oc;
        hsi_optim_config_default(&oc, HSI_OPT_ADAMW); /* no step is taken */
        HSI_TRY(hsi_dmodel_create(&q->dm, r->net, nd - 1, shape + 1, batch, &oc, 0));
        q->owns_dm = 1;
        HSI_TRY(hsi_dmodel_set_conv(q->dm, conv));
    }
    size_t xb = sizeof(float) * (size_t)(q->sample_floats * batch);
    q->x_h = malloc(xb);
    q->z_h = malloc(sizeof(float) * (size_t)batch * (size_t)r->n_classes);
    if (!q->x_h || !q->z_h) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "classify on the GPU: out of memory for a batch of %d", batch);
        goto cleanup;
    }
    HSI_TRY(hsi_cuda_malloc((void **)&q->x_d, xb));
cleanup:
    if (st != HSI_OK) hsi_gpu_classifier_free(q);
    return st;
}

hsi_status hsi_gpu_classify(hsi_gpu_classifier *q, const hsi_run *r, int32_t *pred,
                            const hsi_patcher *pt, const int64_t *pixels, int64_t n,
                            const int32_t *y_true, double *mean_loss)
{
    hsi_status st = HSI_OK;
    const int K = r->n_classes;
    double loss = 0;
    for (int64_t i0 = 0; i0 < n; i0 += q->batch) {
        int nb = (int)(i0 + q->batch <= n ? q->batch : n - i0);
        const float *z_d = NULL;
        if (pt->on_device) {
            if (!q->px_d) HSI_TRY(hsi_cuda_malloc((void **)&q->px_d, sizeof(int64_t) * (size_t)q->batch));
            HSI_TRY(hsi_patches_check(pt, pixels + i0, nb)); /* the device's gives NaN patches */
            HSI_TRY(hsi_cuda_upload(q->px_d, pixels + i0, sizeof(int64_t) * (size_t)nb));
            HSI_TRY(hsi_patches_extract(pt, q->x_d, q->px_d, nb, 0, 0));
        } else {
            HSI_TRY(hsi_patches_extract(pt, q->x_h, pixels + i0, nb, 0, 0));
            HSI_TRY(hsi_cuda_upload(q->x_d, q->x_h, sizeof(float) * (size_t)(q->sample_floats * nb)));
        }
        HSI_TRY(hsi_dmodel_predict(q->dm, &z_d, q->x_d, nb));
        HSI_TRY(hsi_cuda_download(q->z_h, z_d, sizeof(float) * (size_t)nb * (size_t)K));
        for (int i = 0; i < nb; i++) {
            const float *z = q->z_h + (size_t)i * K;
            pred[i0 + i] = (int32_t)hsi_run_argmax(z, K);
            if (y_true) { /* log-sum-exp minus the true class's logit */
                double mx = z[pred[i0 + i]], se = 0;
                for (int k = 0; k < K; k++) se += exp((double)z[k] - mx);
                loss += mx + log(se) - (double)z[y_true[i0 + i]];
            }
        }
    }
    if (mean_loss) *mean_loss = n > 0 ? loss / (double)n : NAN;
cleanup:
    return st;
}

/* y_true NULL: classes only. */
static hsi_status classify(const hsi_run *r, int32_t *pred, const hsi_patcher *pt,
                           const int64_t *pixels, int64_t n, int batch, hsi_graph *g,
                           const int32_t *y_true, double *loss_sum)
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
        if (y_true) {
            hsi_tensor *y = NULL, *loss = NULL;
            int64_t yshape[1] = {nb};
            HSI_TRY(hsi_graph_tensor(&y, g, HSI_I32, 1, yshape, 0));
            memcpy(hsi_tensor_ptr(y), y_true + i0, (size_t)nb * sizeof *y_true);
            HSI_TRY(hsi_cross_entropy(&loss, g, logits, y, NULL)); /* mean over the batch */
            *loss_sum += hsi_tensor_item(loss) * nb;
        }
        const float *lp = hsi_tensor_ptr(logits);
        int64_t K = logits->data.shape[1];
        for (int i = 0; i < nb; i++) pred[i0 + i] = (int32_t)hsi_run_argmax(lp + i * K, K);
    }
cleanup:
    hsi_set_grad_enabled(prev);
    return st;
}

hsi_status hsi_run_classify(const hsi_run *r, int32_t *pred, const hsi_patcher *pt,
                            const int64_t *pixels, int64_t n, int batch, hsi_graph *g)
{
    return classify(r, pred, pt, pixels, n, batch, g, NULL, NULL);
}

hsi_status hsi_run_classify_loss(const hsi_run *r, int32_t *pred, const hsi_patcher *pt,
                                 const int64_t *pixels, int64_t n, int batch, hsi_graph *g,
                                 const int32_t *y_true, double *mean_loss)
{
    double sum = 0;
    hsi_status st = classify(r, pred, pt, pixels, n, batch, g, y_true, &sum);
    *mean_loss = st == HSI_OK && n > 0 ? sum / (double)n : NAN;
    return st;
}

/* The first line of tile t (L past the last). */
static int64_t tile_line(int64_t t, int64_t T, int64_t L)
{
    return t * T < L ? t * T : L;
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
    hsi_gpu_classifier gq = {0};
    hsi_device dev;
    if (opts) o = *opts;
    if (o.batch <= 0) o.batch = 256;
    if (o.tile_lines <= 0) o.tile_lines = 64;
    HSI_TRY(hsi_prep_check(&r->prep, cube, NULL));
    const int64_t L = cube->shape[1], S = cube->shape[2], T = o.tile_lines;
    if (o.features && (o.features->ndim != 3 || o.features->shape[0] != r->n_features ||
                       o.features->shape[1] != L || o.features->shape[2] != S))
        return HSI_FAIL(HSI_ERR_ARG, "predict: the features given are not (%d, %lld, %lld)",
                        r->n_features, (long long)L, (long long)S);
    HSI_TRY(hsi_device_pick(&dev, o.device, 0, "predict", NULL));
    if (o.features && hsi_view_on_device(o.features) && dev != HSI_DEVICE_CUDA)
        return HSI_FAIL(HSI_ERR_ARG, "predict: the features given are in device memory; the "
                                     "prediction must run on the GPU (device cuda)");
    if (dev == HSI_DEVICE_CUDA) {
        HSI_TRY(hsi_gpu_classifier_init(&gq, r, NULL, o.batch, o.conv));
        HSI_TRY(hsi_dmodel_set_graph(gq.dm, o.cuda_graph));
    }
    const int rad = r->patch / 2;
    /* under mpirun: this rank's run of whole tiles (the tiles of one
     * process, so the same pixels in the same batches) */
    const int N = o.across_ranks ? hsi_dist_size() : 1, rk = o.across_ranks ? hsi_dist_rank() : 0;
    const int64_t n_tiles = (L + T - 1) / T;
    const int64_t y_begin = tile_line(n_tiles * rk / N, T, L), y_end = tile_line(n_tiles * (rk + 1) / N, T, L);
    pix = malloc((size_t)(T * S) * sizeof *pix);
    pred = malloc((size_t)(T * S) * sizeof *pred);
    if (!pix || !pred) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    HSI_TRY(hsi_graph_new(&g));
    hsi_progress pr;
    hsi_progress_begin(&pr, o.progress_label ? o.progress_label : "predict", y_end - y_begin);
    if (!o.progress_label || rk != 0) pr.active = 0;
    for (int64_t y0 = y_begin; y0 < y_end; y0 += T) {
        int64_t n = y0 + T <= L ? T : L - y0;
        int64_t a = y0 - rad < 0 ? 0 : y0 - rad, b = y0 + n + rad > L ? L : y0 + n + rad;
        hsi_view crop, fc;
        hsi_patcher pt;
        memset(&fc, 0, sizeof fc);
        if (o.features) {
            st = hsi_view_crop(&fc, o.features, a, b - a, 0, S);
        } else {
            HSI_TRY(hsi_view_crop(&crop, cube, a, b - a, 0, S));
            /* on the GPU the tile's features stay there and the patches are
             * cut there (hsi_gpu_classify with a device patcher) */
            st = hsi_prep_transform(&fc, &r->prep, &crop,
                                    &(hsi_prep_pass){.device = dev, .out_on_device = gq.dm != NULL});
            hsi_view_release(&crop);
        }
        if (st != HSI_OK) goto cleanup;
        st = hsi_patcher_init(&pt, &fc, r->patch, r->pad, NULL);
        hsi_view_release(&fc);
        if (st != HSI_OK) goto cleanup;
        for (int64_t y = 0; y < n; y++)
            for (int64_t x = 0; x < S; x++) pix[y * S + x] = (y0 + y - a) * S + x;
        st = gq.dm ? hsi_gpu_classify(&gq, r, pred, &pt, pix, n * S, NULL, NULL)
                   : hsi_run_classify(r, pred, &pt, pix, n * S, o.batch, g);
        hsi_patcher_free(&pt);
        if (st != HSI_OK) goto cleanup;
        for (int64_t i = 0; i < n * S; i++) map[y0 * S + i] = (int32_t)r->label_ids[pred[i]];
        hsi_progress_update(&pr, y0 + n - y_begin);
    }
    hsi_progress_end(&pr);
    if (N > 1) { /* every rank's lines to every rank */
        int64_t *off = malloc((size_t)(N + 1) * sizeof *off);
        if (!off) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        for (int q = 0; q <= N; q++) off[q] = tile_line(n_tiles * q / N, T, L) * S * (int64_t)sizeof *map;
        st = hsi_dist_share_parts(map, off);
        free(off);
    }
cleanup:
    hsi_gpu_classifier_free(&gq);
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

#define RUN_MAX_FEATURES 1000000 /* as the preprocessing file's cap */

/* What a JSON value is, for "found ..." in messages. */
static void jfound(char *buf, size_t n, const cJSON *v)
{
    if (!v) snprintf(buf, n, "nothing");
    else if (cJSON_IsString(v))
        snprintf(buf, n, "a string (\"%.40s%s\")", v->valuestring, strlen(v->valuestring) > 40 ? "..." : "");
    else if (cJSON_IsNumber(v)) snprintf(buf, n, "%.17g", v->valuedouble);
    else if (cJSON_IsBool(v)) snprintf(buf, n, "%s (a boolean)", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNull(v)) snprintf(buf, n, "null");
    else if (cJSON_IsArray(v)) snprintf(buf, n, "a list");
    else if (cJSON_IsObject(v)) snprintf(buf, n, "an object");
    else snprintf(buf, n, "an invalid value");
}

/* An integer in lo..hi (|bounds| <= 2^53); key is the full name in messages. */
static hsi_status j_int(int64_t *out, const cJSON *v, const char *path, const char *key, int64_t lo,
                        int64_t hi)
{
    char f[96];
    if (!v)
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: '%s' is missing (an integer in %lld..%lld)", path, key,
                        (long long)lo, (long long)hi);
    double d = cJSON_IsNumber(v) ? v->valuedouble : 0;
    if (!cJSON_IsNumber(v) || d != floor(d) || !(d >= (double)lo && d <= (double)hi)) {
        jfound(f, sizeof f, v);
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: '%s' must be an integer in %lld..%lld, found %s", path,
                        key, (long long)lo, (long long)hi, f);
    }
    *out = (int64_t)d;
    return HSI_OK;
}

static hsi_status j_number(double *out, const cJSON *v, const char *path, const char *key)
{
    char f[96];
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        jfound(f, sizeof f, v);
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: '%s' must be a finite number, found %s", path, key, f);
    }
    *out = v->valuedouble;
    return HSI_OK;
}

/* A string (required: missing is an error; optional: *out = NULL). */
static hsi_status j_string(const char **out, const cJSON *v, const char *path, const char *key,
                           int required)
{
    char f[96];
    *out = NULL;
    if (!v && !required) return HSI_OK;
    if (!v) return HSI_FAIL(HSI_ERR_FORMAT, "%s: '%s' is missing (a string)", path, key);
    if (!cJSON_IsString(v)) {
        jfound(f, sizeof f, v);
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: '%s' must be a string, found %s", path, key, f);
    }
    *out = v->valuestring;
    return HSI_OK;
}

/* A file named by pipeline.json: a plain name inside the run directory (no
 * '/', no "." or "..", not empty), copied; NULL when the key is absent. */
static hsi_status j_member(char **out, const cJSON *v, const char *path, const char *key)
{
    const char *name = NULL;
    *out = NULL;
    hsi_status st = j_string(&name, v, path, key, 0);
    if (st != HSI_OK || !name) return st;
    if (!*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: '%s' must be a plain file name inside the run "
                                        "directory (no '/', no '..', not absolute), found '%.200s'",
                        path, key, name);
    if (!(*out = strdup(name))) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    return HSI_OK;
}

/* A list of n finite numbers. */
static hsi_status j_doubles(double **out, const cJSON *a, int64_t n, const char *path,
                            const char *key)
{
    char f[96], k[128];
    *out = NULL;
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n) {
        if (cJSON_IsArray(a)) snprintf(f, sizeof f, "a list of %d", cJSON_GetArraySize(a));
        else jfound(f, sizeof f, a);
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: '%s' must be a list of %lld numbers (one per band of "
                                        "'normalization.bands'), found %s",
                        path, key, (long long)n, f);
    }
    double *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    if (!d) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    int64_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a)
    {
        snprintf(k, sizeof k, "%s[%lld]", key, (long long)i);
        hsi_status st = j_number(&d[i], e, path, k);
        if (st != HSI_OK) {
            free(d);
            return st;
        }
        i++;
    }
    *out = d;
    return HSI_OK;
}

/* Version 1 of pipeline.json (hsi before the run-directory schema) held the
 * normalisation in the JSON and the PCA in the private pca.bin. */
static hsi_status norm_from_json_v1(hsi_norm *n, const cJSON *o, const char *path)
{
    hsi_status st = HSI_OK;
    const char *mode = NULL;
    int64_t ncb = 0;
    char k[64];
    memset(n, 0, sizeof *n);
    HSI_TRY(j_string(&mode, cJSON_GetObjectItemCaseSensitive(o, "mode"), path,
                     "normalization.mode", 1));
    if (hsi_norm_mode_parse(&n->mode, mode) != HSI_OK) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: 'normalization.mode' is '%.40s'; expected none, zscore, "
                                      "minmax, global-minmax or l2",
                      path, mode);
        goto cleanup;
    }
    HSI_TRY(j_int(&ncb, cJSON_GetObjectItemCaseSensitive(o, "n_cube_bands"), path,
                  "normalization.n_cube_bands", 1, RUN_MAX_FEATURES));
    n->n_cube_bands = ncb;
    const cJSON *bands = cJSON_GetObjectItemCaseSensitive(o, "bands");
    if (!cJSON_IsArray(bands) || cJSON_GetArraySize(bands) < 1 ||
        cJSON_GetArraySize(bands) > ncb) {
        char f[96];
        if (cJSON_IsArray(bands)) snprintf(f, sizeof f, "a list of %d", cJSON_GetArraySize(bands));
        else jfound(f, sizeof f, bands);
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: 'normalization.bands' must be a list of 1..%lld band "
                                      "indices ('normalization.n_cube_bands' = %lld), found %s",
                      path, (long long)ncb, (long long)ncb, f);
        goto cleanup;
    }
    n->n_bands = cJSON_GetArraySize(bands);
    n->bands = malloc((size_t)n->n_bands * sizeof *n->bands);
    if (!n->bands) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    int64_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, bands)
    {
        snprintf(k, sizeof k, "normalization.bands[%lld]", (long long)i);
        if (cJSON_IsNumber(e) && e->valuedouble == floor(e->valuedouble) &&
            (e->valuedouble < 0 || e->valuedouble >= (double)ncb)) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: '%s' = %.17g is outside the bands 0..%lld of the "
                                          "cube it was fitted on ('normalization.n_cube_bands' = "
                                          "%lld; bands are 0-based)",
                          path, k, e->valuedouble, (long long)ncb - 1, (long long)ncb);
            goto cleanup;
        }
        HSI_TRY(j_int(&n->bands[i], e, path, k, 0, ncb - 1));
        i++;
    }
    HSI_TRY(j_doubles(&n->scale, cJSON_GetObjectItemCaseSensitive(o, "scale"), n->n_bands, path,
                      "normalization.scale"));
    HSI_TRY(j_doubles(&n->center, cJSON_GetObjectItemCaseSensitive(o, "center"), n->n_bands, path,
                      "normalization.center"));
    HSI_TRY(j_doubles(&n->offset, cJSON_GetObjectItemCaseSensitive(o, "offset"), n->n_bands, path,
                      "normalization.offset"));
    HSI_TRY(j_doubles(&n->fill, cJSON_GetObjectItemCaseSensitive(o, "fill"), n->n_bands, path,
                      "normalization.fill"));
    const cJSON *l2 = cJSON_GetObjectItemCaseSensitive(o, "l2");
    if (l2 && !cJSON_IsBool(l2)) {
        char f[96];
        jfound(f, sizeof f, l2);
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: 'normalization.l2' must be true or false, found %s",
                      path, f);
        goto cleanup;
    }
    n->l2 = cJSON_IsTrue(l2);
    const cJSON *ig = cJSON_GetObjectItemCaseSensitive(o, "ignore_value");
    if (ig && !cJSON_IsNull(ig)) {
        HSI_TRY(j_number(&n->ignore_value, ig, path, "normalization.ignore_value"));
        n->has_ignore = 1;
    }
cleanup:
    if (st != HSI_OK) hsi_norm_free(n);
    return st;
}

void hsi_run_spec_free(hsi_run_spec *s)
{
    if (!s) return;
    free(s->model_file);
    free(s->preprocessing_file);
    free(s->split_file);
    free(s->pca_file);
    if (s->has_norm) hsi_norm_free(&s->norm);
    if (s->names)
        for (int k = 0; k < s->n_classes; k++) free(s->names[k]);
    free(s->names);
    free(s->label_ids);
    free(s->colors);
    memset(s, 0, sizeof *s);
}

static hsi_status parse_classes(hsi_run_spec *s, const cJSON *classes, const char *path)
{
    hsi_status st = HSI_OK;
    char key[64], f[96];
    uint8_t *seen = NULL;
    if (!cJSON_IsArray(classes)) {
        jfound(f, sizeof f, classes);
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: 'classes' must be a list of class objects (label, "
                                        "name, color), found %s",
                        path, f);
    }
    int K = cJSON_GetArraySize(classes);
    if (K < 2 || K > HSI_LABELS_MAX_CLASS)
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: 'classes' must list 2..%d classes, found %d", path,
                        HSI_LABELS_MAX_CLASS, K);
    s->label_ids = calloc((size_t)K, sizeof *s->label_ids);
    s->names = calloc((size_t)K, sizeof *s->names);
    s->colors = calloc((size_t)K * 3, 1);
    seen = calloc(HSI_LABELS_MAX_CLASS + 1, 1);
    if (!s->label_ids || !s->names || !s->colors || !seen) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    s->n_classes = K;
    int k = 0, any_color = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, classes)
    {
        if (!cJSON_IsObject(e)) {
            jfound(f, sizeof f, e);
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: 'classes[%d]' must be an object (label, name, "
                                          "color), found %s",
                          path, k, f);
            goto cleanup;
        }
        const cJSON *ix = cJSON_GetObjectItemCaseSensitive(e, "index"),
                    *lb = cJSON_GetObjectItemCaseSensitive(e, "label"),
                    *nm = cJSON_GetObjectItemCaseSensitive(e, "name"),
                    *co = cJSON_GetObjectItemCaseSensitive(e, "color");
        int64_t v = 0;
        if (ix) {
            snprintf(key, sizeof key, "classes[%d].index", k);
            HSI_TRY(j_int(&v, ix, path, key, 0, K - 1));
            if (v != k) {
                st = HSI_FAIL(HSI_ERR_FORMAT, "%s: '%s' is %lld; a class's index is its position "
                                              "in the list (%d)",
                              path, key, (long long)v, k);
                goto cleanup;
            }
        }
        snprintf(key, sizeof key, "classes[%d].label", k);
        HSI_TRY(j_int(&v, lb, path, key, 1, HSI_LABELS_MAX_CLASS));
        if (seen[v]) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: '%s' is %lld, the label of an earlier class too",
                          path, key, (long long)v);
            goto cleanup;
        }
        seen[v] = 1;
        s->label_ids[k] = v;
        const char *name = NULL;
        snprintf(key, sizeof key, "classes[%d].name", k);
        HSI_TRY(j_string(&name, nm, path, key, 0));
        if (!(s->names[k] = strdup(name ? name : "?"))) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        if (co) {
            if (!cJSON_IsArray(co) || cJSON_GetArraySize(co) != 3) {
                if (cJSON_IsArray(co)) snprintf(f, sizeof f, "a list of %d", cJSON_GetArraySize(co));
                else jfound(f, sizeof f, co);
                st = HSI_FAIL(HSI_ERR_FORMAT, "%s: 'classes[%d].color' must be a list of 3 integers "
                                              "in 0..255 (red, green, blue), found %s",
                              path, k, f);
                goto cleanup;
            }
            for (int q = 0; q < 3; q++) {
                snprintf(key, sizeof key, "classes[%d].color[%d]", k, q);
                HSI_TRY(j_int(&v, cJSON_GetArrayItem(co, q), path, key, 0, 255));
                s->colors[3 * k + q] = (uint8_t)v;
            }
            any_color = 1;
        }
        k++;
    }
    if (!any_color) {
        free(s->colors);
        s->colors = NULL;
    }
cleanup:
    free(seen);
    return st;
}

hsi_status hsi_run_spec_parse(hsi_run_spec *s, const char *text, size_t len, const char *path)
{
    hsi_status st = HSI_OK;
    char f[96];
    cJSON *j = NULL;
    memset(s, 0, sizeof *s);
    s->features = s->cube_bands = -1;
    j = cJSON_ParseWithLength(text, len);
    if (!j) {
        const char *ep = cJSON_GetErrorPtr();
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: not valid JSON (near byte %ld)", path,
                      ep && ep >= text && ep <= text + len ? (long)(ep - text) : 0L);
        goto cleanup;
    }
    if (!cJSON_IsObject(j)) {
        jfound(f, sizeof f, j);
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: must hold a JSON object, found %s", path, f);
        goto cleanup;
    }
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(j, "version");
    int64_t v = 1;
    if (ver) {
        if (cJSON_IsNumber(ver) && ver->valuedouble == floor(ver->valuedouble) &&
            ver->valuedouble > HSI_RUN_VERSION && ver->valuedouble < 1e9) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: 'version' is %.0f; this hsi reads run directories up "
                                          "to version %d (a newer hsi wrote it)",
                          path, ver->valuedouble, HSI_RUN_VERSION);
            goto cleanup;
        }
        HSI_TRY(j_int(&v, ver, path, "version", 1, HSI_RUN_VERSION));
    }
    s->version = (int)v;
    const char *model = NULL, *pad = NULL;
    HSI_TRY(j_string(&model, cJSON_GetObjectItemCaseSensitive(j, "model"), path, "model", 1));
    int known = 0;
    for (const hsi_model_spec *m = hsi_model_list(); m->name && !known; m++)
        known = !strcmp(m->name, model);
    if (!known || strlen(model) >= sizeof s->model) {
        char list[256] = "";
        for (const hsi_model_spec *m = hsi_model_list(); m->name; m++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? ", " : "",
                     m->name);
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: 'model' is '%.40s', which this hsi does not know "
                                      "(known: %s)",
                      path, model, list);
        goto cleanup;
    }
    snprintf(s->model, sizeof s->model, "%s", model);
    HSI_TRY(j_int(&v, cJSON_GetObjectItemCaseSensitive(j, "patch"), path, "patch", 1, HSI_PATCH_MAX));
    if (v % 2 == 0) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: 'patch' must be odd (a pixel and the same number of "
                                      "neighbours on each side), found %lld",
                      path, (long long)v);
        goto cleanup;
    }
    s->patch = (int)v;
    HSI_TRY(j_string(&pad, cJSON_GetObjectItemCaseSensitive(j, "pad"), path, "pad", 0));
    if (pad && strcmp(pad, "mirror") && strcmp(pad, "zero")) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: 'pad' must be \"mirror\" or \"zero\", found \"%.40s\"",
                      path, pad);
        goto cleanup;
    }
    s->pad = pad && !strcmp(pad, "zero") ? HSI_PAD_ZERO : HSI_PAD_MIRROR;
    const cJSON *fe = cJSON_GetObjectItemCaseSensitive(j, "features"),
                *cb = cJSON_GetObjectItemCaseSensitive(j, "cube_bands");
    if (fe) HSI_TRY(j_int(&s->features, fe, path, "features", 1, RUN_MAX_FEATURES));
    if (cb) HSI_TRY(j_int(&s->cube_bands, cb, path, "cube_bands", 1, RUN_MAX_FEATURES));
    HSI_TRY(j_member(&s->model_file, cJSON_GetObjectItemCaseSensitive(j, "model_file"), path,
                     "model_file"));
    HSI_TRY(j_member(&s->preprocessing_file,
                     cJSON_GetObjectItemCaseSensitive(j, "preprocessing_file"), path,
                     "preprocessing_file"));
    HSI_TRY(j_member(&s->split_file, cJSON_GetObjectItemCaseSensitive(j, "split_file"), path,
                     "split_file"));
    HSI_TRY(j_member(&s->pca_file, cJSON_GetObjectItemCaseSensitive(j, "pca_file"), path,
                     "pca_file"));
    const cJSON *nrm = cJSON_GetObjectItemCaseSensitive(j, "normalization");
    if (nrm) {
        if (!cJSON_IsObject(nrm)) {
            jfound(f, sizeof f, nrm);
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: 'normalization' must be an object, found %s", path, f);
            goto cleanup;
        }
        HSI_TRY(norm_from_json_v1(&s->norm, nrm, path));
        s->has_norm = 1;
    }
    if (!s->preprocessing_file) {
        if (s->version >= 2) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: 'preprocessing_file' is missing (version %d names "
                                          "its preprocessing file, normally "
                                          "\"preprocessing.safetensors\")",
                          path, s->version);
            goto cleanup;
        }
        if (!s->has_norm) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: 'normalization' is missing (a version 1 run holds "
                                          "its normalisation there, and its PCA in 'pca_file')",
                          path);
            goto cleanup;
        }
    }
    if (s->has_norm && s->cube_bands >= 0 && s->cube_bands != s->norm.n_cube_bands) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: 'cube_bands' is %lld but 'normalization.n_cube_bands' is "
                                      "%lld",
                      path, (long long)s->cube_bands, (long long)s->norm.n_cube_bands);
        goto cleanup;
    }
    HSI_TRY(parse_classes(s, cJSON_GetObjectItemCaseSensitive(j, "classes"), path));
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(j, "training");
    if (tr && !cJSON_IsObject(tr)) {
        jfound(f, sizeof f, tr);
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: 'training' must be an object (the settings of the run), "
                                      "found %s",
                      path, f);
        goto cleanup;
    }
cleanup:
    cJSON_Delete(j);
    if (st != HSI_OK) hsi_run_spec_free(s);
    return st;
}

hsi_status hsi_run_state_config(cJSON **out, const char *path, const char *config, const cJSON *like)
{
    hsi_status st = HSI_OK;
    char f[96], key[160];
    cJSON *j = NULL;
    *out = NULL;
    if (!config) return HSI_OK;
    j = cJSON_Parse(config);
    if (!cJSON_IsObject(j)) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: __metadata__ 'config' must be a JSON object, found "
                                      "'%.60s%s'",
                      path, config, strlen(config) > 60 ? "..." : "");
        goto cleanup;
    }
    /* where the run stood: all three (hsi writes them) or none (older) */
    const cJSON *bv = cJSON_GetObjectItemCaseSensitive(j, "best_val"),
                *be = cJSON_GetObjectItemCaseSensitive(j, "best_epoch"),
                *sb = cJSON_GetObjectItemCaseSensitive(j, "since_best");
    if (bv || be || sb) {
        double d = 0;
        int64_t i = 0;
        HSI_TRY(j_number(&d, bv, path, "config.best_val"));
        if (d != -1 && !(d >= 0 && d <= 1)) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: 'config.best_val' must be a validation OA in 0..1 "
                                          "(or -1: none yet), found %.17g",
                          path, d);
            goto cleanup;
        }
        HSI_TRY(j_int(&i, be, path, "config.best_epoch", -1, 1000000000));
        HSI_TRY(j_int(&i, sb, path, "config.since_best", 0, 1000000000));
    }
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "config");
    if (c) {
        if (!cJSON_IsObject(c)) {
            jfound(f, sizeof f, c);
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: 'config.config' must be an object (the run's "
                                          "options), found %s",
                          path, f);
            goto cleanup;
        }
        const cJSON *e;
        cJSON_ArrayForEach(e, c)
        {
            snprintf(key, sizeof key, "config.config.%.120s", e->string ? e->string : "?");
            const cJSON *l = like ? cJSON_GetObjectItemCaseSensitive(like, e->string) : NULL;
            int scalar = cJSON_IsString(e) || cJSON_IsBool(e) ||
                         (cJSON_IsNumber(e) && isfinite(e->valuedouble));
            int same = !l || (cJSON_IsString(l) && cJSON_IsString(e)) ||
                       (cJSON_IsBool(l) && cJSON_IsBool(e)) || (cJSON_IsNumber(l) && cJSON_IsNumber(e));
            if (!scalar || !same) {
                jfound(f, sizeof f, e);
                st = HSI_FAIL(HSI_ERR_FORMAT, "%s: '%s' must be %s, found %s", path, key,
                              !l ? "a string, a finite number or a boolean"
                              : cJSON_IsString(l) ? "a string"
                              : cJSON_IsBool(l)   ? "true or false"
                                                  : "a finite number",
                              f);
                goto cleanup;
            }
        }
    }
    *out = j;
    j = NULL;
cleanup:
    cJSON_Delete(j);
    return st;
}

/* model.safetensors written by hsi carries what it was trained for in its
 * __metadata__: when it does, it must agree with pipeline.json and the
 * preprocessing (a foreign file is left to the strict load). hint: said
 * after an input-shape mismatch (may be ""). */
static hsi_status check_model_meta(const hsi_st_file *f, const char *mp, const hsi_run *r,
                                   const char *hint)
{
    hsi_status st = HSI_OK;
    cJSON *a = NULL;
    const char *fmt = hsi_safetensors_meta(f, "format");
    if (!fmt || strcmp(fmt, "hsi.model")) return HSI_OK;
    const char *m = hsi_safetensors_meta(f, "model"), *is = hsi_safetensors_meta(f, "input_shape"),
               *nc = hsi_safetensors_meta(f, "n_classes"), *li = hsi_safetensors_meta(f, "label_ids"),
               *cn = hsi_safetensors_meta(f, "class_names");
    if (m && strcmp(m, r->model)) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: __metadata__ 'model' is '%.40s' but pipeline.json says "
                                      "'model' is '%s'",
                      mp, m, r->model);
        goto cleanup;
    }
    if (is) {
        int64_t want[5];
        int nd = hsi_model_input_shape(r->model, 1, r->n_features, r->patch, want);
        char ws[64] = "[";
        for (int i = 1; i < nd; i++)
            snprintf(ws + strlen(ws), sizeof ws - strlen(ws), "%s%lld", i > 1 ? ", " : "",
                     (long long)want[i]);
        snprintf(ws + strlen(ws), sizeof ws - strlen(ws), "]");
        a = cJSON_Parse(is);
        int same = cJSON_IsArray(a) && cJSON_GetArraySize(a) == nd - 1;
        for (int i = 1; same && i < nd; i++) {
            const cJSON *d = cJSON_GetArrayItem(a, i - 1);
            same = cJSON_IsNumber(d) && d->valuedouble == (double)want[i];
        }
        if (!same) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: __metadata__ 'input_shape' is %.60s but pipeline.json "
                                          "('model' %s, 'patch' %d) and its preprocessing (%d "
                                          "features) give %s%s",
                          mp, is, r->model, r->patch, r->n_features, ws, hint);
            goto cleanup;
        }
        cJSON_Delete(a);
        a = NULL;
    }
    if (nc) {
        char *end = NULL;
        long v = strtol(nc, &end, 10);
        if (end == nc || *end || v != r->n_classes) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: __metadata__ 'n_classes' is '%.20s' but pipeline.json "
                                          "lists %d classes",
                          mp, nc, r->n_classes);
            goto cleanup;
        }
    }
    if (li) {
        a = cJSON_Parse(li);
        int same = cJSON_IsArray(a) && cJSON_GetArraySize(a) == r->n_classes;
        for (int k = 0; same && k < r->n_classes; k++) {
            const cJSON *d = cJSON_GetArrayItem(a, k);
            same = cJSON_IsNumber(d) && d->valuedouble == (double)r->label_ids[k];
        }
        if (!same) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: __metadata__ 'label_ids' is %.80s but pipeline.json's "
                                          "'classes' have other labels (or another order)",
                          mp, li);
            goto cleanup;
        }
        cJSON_Delete(a);
        a = NULL;
    }
    if (cn) {
        a = cJSON_Parse(cn);
        int ok = cJSON_IsArray(a) && cJSON_GetArraySize(a) == r->n_classes;
        for (const cJSON *e = ok ? a->child : NULL; e && ok; e = e->next) ok = cJSON_IsString(e);
        if (!ok) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: __metadata__ 'class_names' must be a JSON list of %d "
                                          "strings, found %.80s",
                          mp, r->n_classes, cn);
            goto cleanup;
        }
    }
cleanup:
    cJSON_Delete(a);
    return st;
}

hsi_status hsi_run_load(hsi_run *r, const char *dir)
{
    hsi_status st = HSI_OK;
    char *path = NULL, *text = NULL, *mp = NULL, *sp = NULL, *pp = NULL;
    char hint[400] = "";
    hsi_run_spec s;
    hsi_st_file *mf = NULL;
    hsi_labels roles;
    memset(&s, 0, sizeof s);
    hsi_labels_init(&roles);
    memset(r, 0, sizeof *r);
    size_t len;
    if (!(path = hsi_run_path(dir, "pipeline.json"))) return HSI_ERR_NOMEM;
    HSI_TRY(hsi_read_file(path, &text, &len));
    HSI_TRY(hsi_run_spec_parse(&s, text, len, path));
    snprintf(r->model, sizeof r->model, "%s", s.model);
    r->patch = s.patch;
    r->pad = s.pad;
    /* the preprocessing: its file (version 2), or version 1's pca_file or
     * the normalisation held in the JSON */
    const char *pkey = s.preprocessing_file ? "preprocessing_file" : "pca_file";
    const char *pname = s.preprocessing_file ? s.preprocessing_file : s.pca_file;
    if (pname) {
        if (!(pp = hsi_run_path(dir, pname))) {
            st = HSI_ERR_NOMEM;
            goto cleanup;
        }
        st = hsi_prep_load(&r->prep, pp);
        if (st != HSI_OK) {
            hsi_fail_context(st, "%s: '%s'", path, pkey);
            goto cleanup;
        }
    } else {
        r->prep.norm = s.norm; /* moved */
        s.has_norm = 0;
        memset(&s.norm, 0, sizeof s.norm);
        r->prep.n_cube_bands = r->prep.norm.n_cube_bands;
        snprintf(hint, sizeof hint, " (pipeline.json has no 'pca_file', so the model gets the %lld "
                                    "normalised bands of 'normalization'; a run fitted with PCA "
                                    "needs its 'pca_file')",
                 (long long)r->prep.norm.n_bands);
    }
    r->n_features = (int)hsi_prep_n_out(&r->prep);
    if (s.features >= 0 && s.features != r->n_features) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: 'features' is %lld but %s ('%s') gives %d features", path,
                      (long long)s.features, pname ? pname : "the normalisation", pkey,
                      r->n_features);
        goto cleanup;
    }
    if (s.cube_bands >= 0 && s.cube_bands != r->prep.n_cube_bands) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: 'cube_bands' is %lld but %s ('%s') was fitted on cubes of "
                                      "%lld bands",
                      path, (long long)s.cube_bands, pname ? pname : "the normalisation", pkey,
                      (long long)r->prep.n_cube_bands);
        goto cleanup;
    }
    r->n_classes = s.n_classes;
    r->label_ids = s.label_ids;
    r->names = s.names;
    r->colors = s.colors;
    s.label_ids = NULL;
    s.names = NULL;
    s.colors = NULL;
    s.n_classes = 0;
    st = hsi_model_create(&r->net, r->model, r->n_features, r->patch, r->n_classes, HSI_F32, 0);
    if (st != HSI_OK) {
        hsi_fail_context(st, "%s: 'model' %s with 'patch' %d", path, r->model, r->patch);
        goto cleanup;
    }
    if (!(mp = hsi_run_path(dir, s.model_file ? s.model_file : "model.safetensors"))) {
        st = HSI_ERR_NOMEM;
        goto cleanup;
    }
    HSI_TRY(hsi_safetensors_open(&mf, mp));
    HSI_TRY(check_model_meta(mf, mp, r, hint));
    st = hsi_module_load_file(r->net, mf, mp, 1, NULL);
    if (st != HSI_OK) {
        if (hint[0] && strstr(hsi_last_error(), "shape mismatch")) {
            char old[2048];
            snprintf(old, sizeof old, "%s", hsi_last_error());
            hsi_fail(st, "%s%s", old, hint);
        }
        goto cleanup;
    }
    hsi_module_train(r->net, 0);
    if (s.split_file) {
        if (!(sp = hsi_run_path(dir, s.split_file))) {
            st = HSI_ERR_NOMEM;
            goto cleanup;
        }
        st = hsi_labels_open(&roles, sp, NULL);
        if (st != HSI_OK) {
            hsi_fail_context(st, "%s: 'split_file'", path);
            goto cleanup;
        }
        hsi_view_ref(&r->roles, &roles.map);
    }
cleanup:
    if (st != HSI_OK) hsi_run_free(r);
    hsi_safetensors_close(mf);
    hsi_labels_free(&roles);
    hsi_run_spec_free(&s);
    free(text);
    free(path);
    free(pp);
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

/* train.c — the sequence behind `hsi train`, `hsi predict` and `hsi eval`:
 * open, split, fit preprocessing on training pixels, fused pass, patches,
 * loader, autograd training with validation and early stopping, test
 * metrics, whole-scene map. Every step is a library call; this file owns
 * only the order, the files written and the timings. */
#define _GNU_SOURCE
#include "train.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "io/cube.h"
#include "io/envi.h"
#include "io/gdal_io.h"
#include "io/labels.h"
#include "kcli.h"
#include "kernels/fused.h"
#include "kernels/pca.h"
#include "kernels/cuda.h"
#include "models/checkpoint.h"
#include "models/model_cuda.h"
#include "models/nn.h"
#include "models/optim.h"
#include "models/tensor.h"
#include "pipeline/loader.h"
#include "pipeline/metrics.h"
#include "pipeline/patches.h"
#include "pipeline/split.h"
#include "io/quicklook.h"

void hsi_train_config_init(hsi_train_config *c)
{
    memset(c, 0, sizeof *c);
    c->model = "cnn2d";
    c->norm = HSI_NORM_ZSCORE;
    c->pca = 30;
    c->patch = 11;
    c->pad = HSI_PAD_MIRROR;
    c->split = HSI_SPLIT_RANDOM;
    c->train_fraction = 0.1;
    c->val_fraction = 0; /* keep the last epoch: a few pixels per class cannot choose one */
    c->block = 0; /* auto: max(16, 4 * (P / 2) + 4) */
    c->augment = 1;
    c->epochs = 40;
    c->batch = 16;
    c->lr = 1e-3;
    c->weight_decay = 1e-4;
    c->patience = 15;
    c->seed = 1;
    c->schedule = HSI_SCHED_COSINE;
    c->workers = 1;
    c->prefetch = 2;
    c->device = "auto";
    c->verbose = 1;
}

/* ------------------------------------------------------------- helpers */

static void say(const hsi_train_config *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void say(const hsi_train_config *c, const char *fmt, ...)
{
    va_list ap;
    if (c->verbose) {
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        fflush(stdout);
    }
    if (c->log) {
        va_start(ap, fmt);
        vfprintf(c->log, fmt, ap);
        va_end(ap);
        fflush(c->log);
    }
}

static char *path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static hsi_status make_dir(const char *dir)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return HSI_FAIL(HSI_ERR_IO, "%s: cannot create the output directory: %s", dir,
                        strerror(errno));
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return HSI_FAIL(HSI_ERR_IO, "%s: exists and is not a directory", dir);
    return HSI_OK;
}

static hsi_status save_json(const char *path, cJSON *j)
{
    char *s = cJSON_Print(j);
    if (!s) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory formatting %s", path);
    hsi_status st = hsi_write_file_atomic(path, s, strlen(s));
    free(s);
    return st;
}

static cJSON *norm_json(const hsi_norm *n)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "mode", hsi_norm_mode_name(n->mode));
    cJSON_AddNumberToObject(o, "n_cube_bands", (double)n->n_cube_bands);
    double *b = malloc((size_t)n->n_bands * sizeof *b);
    for (int64_t i = 0; b && i < n->n_bands; i++) b[i] = (double)n->bands[i];
    if (b) cJSON_AddItemToObject(o, "bands", cJSON_CreateDoubleArray(b, (int)n->n_bands));
    free(b);
    cJSON_AddItemToObject(o, "scale", cJSON_CreateDoubleArray(n->scale, (int)n->n_bands));
    cJSON_AddItemToObject(o, "center", cJSON_CreateDoubleArray(n->center, (int)n->n_bands));
    cJSON_AddItemToObject(o, "offset", cJSON_CreateDoubleArray(n->offset, (int)n->n_bands));
    cJSON_AddItemToObject(o, "fill", cJSON_CreateDoubleArray(n->fill, (int)n->n_bands));
    cJSON_AddBoolToObject(o, "l2", n->l2);
    if (n->has_ignore) cJSON_AddNumberToObject(o, "ignore_value", n->ignore_value);
    return o;
}

static hsi_status read_doubles(double **out, const cJSON *a, int64_t n, const char *what)
{
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
        return HSI_FAIL(HSI_ERR_FORMAT, "pipeline.json: '%s' must be a list of %lld numbers", what,
                        (long long)n);
    *out = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (!*out) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    int64_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a)
    {
        if (!cJSON_IsNumber(e))
            return HSI_FAIL(HSI_ERR_FORMAT, "pipeline.json: '%s'[%lld] is not a number", what,
                            (long long)i);
        (*out)[i++] = e->valuedouble;
    }
    return HSI_OK;
}

static hsi_status norm_from_json(hsi_norm *n, const cJSON *o)
{
    memset(n, 0, sizeof *n);
    const cJSON *mode = cJSON_GetObjectItem(o, "mode"), *nb = cJSON_GetObjectItem(o, "n_cube_bands"),
                *bands = cJSON_GetObjectItem(o, "bands");
    if (!cJSON_IsString(mode) || !cJSON_IsNumber(nb) || !cJSON_IsArray(bands))
        return HSI_FAIL(HSI_ERR_FORMAT, "pipeline.json: 'normalization' needs mode, n_cube_bands "
                                        "and bands");
    hsi_status st = hsi_norm_mode_parse(&n->mode, mode->valuestring);
    if (st != HSI_OK) return st;
    n->n_cube_bands = (int64_t)nb->valuedouble;
    n->n_bands = cJSON_GetArraySize(bands);
    double *b = NULL;
    HSI_TRY(read_doubles(&b, bands, n->n_bands, "bands"));
    n->bands = malloc((size_t)(n->n_bands ? n->n_bands : 1) * sizeof *n->bands);
    if (!n->bands) {
        free(b);
        return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    }
    for (int64_t i = 0; i < n->n_bands; i++) {
        n->bands[i] = (int64_t)b[i];
        if (n->bands[i] < 0 || n->bands[i] >= n->n_cube_bands) {
            free(b);
            st = HSI_FAIL(HSI_ERR_FORMAT, "pipeline.json: band %lld outside the cube's %lld",
                          (long long)n->bands[i], (long long)n->n_cube_bands);
            goto cleanup;
        }
    }
    free(b);
    HSI_TRY(read_doubles(&n->scale, cJSON_GetObjectItem(o, "scale"), n->n_bands, "scale"));
    HSI_TRY(read_doubles(&n->center, cJSON_GetObjectItem(o, "center"), n->n_bands, "center"));
    HSI_TRY(read_doubles(&n->offset, cJSON_GetObjectItem(o, "offset"), n->n_bands, "offset"));
    HSI_TRY(read_doubles(&n->fill, cJSON_GetObjectItem(o, "fill"), n->n_bands, "fill"));
    n->l2 = cJSON_IsTrue(cJSON_GetObjectItem(o, "l2"));
    const cJSON *ig = cJSON_GetObjectItem(o, "ignore_value");
    if (cJSON_IsNumber(ig)) {
        n->has_ignore = 1;
        n->ignore_value = ig->valuedouble;
    }
    return HSI_OK;
cleanup:
    hsi_norm_free(n);
    return st;
}

/* A float32 (C, L, S) band-major cube from the fused pass. */
static hsi_status fused_cube(hsi_view *out, const hsi_view *cube, const hsi_norm *norm,
                             const hsi_pca *pca, const char *label)
{
    hsi_status st = HSI_OK;
    int64_t C = hsi_fused_n_out(norm, pca);
    int64_t shape[3] = {C, cube->shape[1], cube->shape[2]};
    HSI_TRY(hsi_view_alloc(out, HSI_F32, 3, shape, HSI_BUF_HOST));
    hsi_fused_opts fo;
    memset(&fo, 0, sizeof fo);
    fo.progress_label = label;
    st = hsi_fused_run(out->buf->data, cube, norm, pca, &fo);
    if (st != HSI_OK) hsi_view_release(out);
cleanup:
    return st;
}

/* The trained pipeline: everything predict needs. */
typedef struct pipe_state {
    char model[32];
    int patch, n_features, n_classes;
    hsi_pad_mode pad;
    hsi_norm norm;
    hsi_pca pca;
    int has_pca;
    int64_t *label_ids; /* K original label values */
    char **names;       /* K */
    uint8_t *colors;    /* 3K */
    int64_t n_cube_bands;
    hsi_module *net;
} pipe_state;

static void pipe_free(pipe_state *p)
{
    hsi_norm_free(&p->norm);
    if (p->has_pca) hsi_pca_free(&p->pca);
    free(p->label_ids);
    if (p->names)
        for (int k = 0; k < p->n_classes; k++) free(p->names[k]);
    free(p->names);
    free(p->colors);
    hsi_module_free(p->net);
    memset(p, 0, sizeof *p);
}

/* Predicts class indices for n pixels of a float cube in batches. */
static hsi_status predict_pixels(int32_t *pred, hsi_module *net, const char *model,
                                 const hsi_patcher *pt, const int64_t *pixels, int64_t n,
                                 int batch, int n_features, hsi_graph *g, hsi_train_profile *prof)
{
    hsi_status st = HSI_OK;
    int prev = hsi_set_grad_enabled(0);
    hsi_module_train(net, 0);
    int64_t shape[5];
    for (int64_t i0 = 0; i0 < n; i0 += batch) {
        int nb = (int)(i0 + batch <= n ? batch : n - i0);
        int nd = hsi_model_input_shape(model, nb, n_features, pt->patch, shape);
        hsi_graph_reset(g);
        hsi_tensor *x = NULL, *logits = NULL;
        HSI_TRY(hsi_graph_tensor(&x, g, HSI_F32, nd, shape, 0));
        HSI_TRY(hsi_patches_extract(pt, hsi_tensor_ptr(x), pixels + i0, nb, 0, 0));
        double t0 = hsi_now();
        HSI_TRY(hsi_module_forward(&logits, net, g, x));
        if (prof) prof->forward += hsi_now() - t0;
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

/* Whole-scene prediction by line tiles with a halo of `radius` lines:
 * memory holds one tile of the preprocessed cube, never the whole. map:
 * (L, S) int32 original label ids. features: the whole preprocessed
 * (C, L, S) float32 cube when the caller already has it (training), so
 * tiles are cut from it instead of running the fused pass again; NULL:
 * each tile is preprocessed from the raw cube. */
static hsi_status predict_scene(int32_t *map, const pipe_state *p, const hsi_view *cube,
                                const hsi_view *features, int batch, int verbose)
{
    hsi_status st = HSI_OK;
    const int64_t L = cube->shape[1], S = cube->shape[2];
    const int r = p->patch / 2;
    int64_t T = 64;
    hsi_graph *g = NULL;
    int64_t *pix = malloc((size_t)(T * S) * sizeof *pix);
    int32_t *pred = malloc((size_t)(T * S) * sizeof *pred);
    if (!pix || !pred) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    HSI_TRY(hsi_graph_new(&g));
    hsi_progress pr;
    hsi_progress_begin(&pr, "predict", L);
    if (!verbose) pr.active = 0;
    for (int64_t y0 = 0; y0 < L; y0 += T) {
        int64_t n = y0 + T <= L ? T : L - y0;
        int64_t a = y0 - r < 0 ? 0 : y0 - r, b = y0 + n + r > L ? L : y0 + n + r;
        hsi_view crop, fc;
        hsi_patcher pt;
        memset(&fc, 0, sizeof fc);
        if (features) {
            st = hsi_view_crop(&fc, features, a, b - a, 0, S);
        } else {
            HSI_TRY(hsi_view_crop(&crop, cube, a, b - a, 0, S));
            st = fused_cube(&fc, &crop, &p->norm, p->has_pca ? &p->pca : NULL, NULL);
            hsi_view_release(&crop);
        }
        if (st != HSI_OK) goto cleanup;
        st = hsi_patcher_init(&pt, &fc, p->patch, p->pad, NULL);
        hsi_view_release(&fc);
        if (st != HSI_OK) goto cleanup;
        for (int64_t y = 0; y < n; y++)
            for (int64_t x = 0; x < S; x++) pix[y * S + x] = (y0 + y - a) * S + x;
        st = predict_pixels(pred, p->net, p->model, &pt, pix, n * S, batch, p->n_features, g, NULL);
        hsi_patcher_free(&pt);
        if (st != HSI_OK) goto cleanup;
        for (int64_t i = 0; i < n * S; i++) map[y0 * S + i] = (int32_t)p->label_ids[pred[i]];
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

/* Writes a map (L, S) of label ids as .hdr (ENVI classification), .tif or
 * .png (with legend). geo: metadata of the source cube (georeferencing). */
static hsi_status write_map(const char *path, const int32_t *map, int64_t L, int64_t S,
                            const pipe_state *p, const hsi_meta *geo)
{
    hsi_status st = HSI_OK;
    int max_id = 0;
    for (int k = 0; k < p->n_classes; k++)
        if (p->label_ids[k] > max_id) max_id = (int)p->label_ids[k];
    int nc = max_id + 1;
    char **names = calloc((size_t)nc, sizeof *names);
    uint8_t *rgb = calloc((size_t)nc * 3, 1);
    hsi_view mv;
    hsi_meta m;
    memset(&mv, 0, sizeof mv);
    hsi_meta_init(&m);
    if (!names || !rgb) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    names[0] = "Unclassified";
    for (int k = 0; k < p->n_classes; k++) {
        int id = (int)p->label_ids[k];
        names[id] = p->names && p->names[k] ? p->names[k] : NULL;
        if (p->colors) memcpy(rgb + 3 * id, p->colors + 3 * k, 3);
    }
    hsi_dtype dt = nc <= 256 ? HSI_U8 : HSI_U16;
    int64_t shape[3] = {1, L, S};
    HSI_TRY(hsi_view_alloc(&mv, dt, 3, shape, HSI_BUF_HOST));
    for (int64_t i = 0; i < L * S; i++) {
        if (dt == HSI_U8) ((uint8_t *)mv.buf->data)[i] = (uint8_t)map[i];
        else ((uint16_t *)mv.buf->data)[i] = (uint16_t)map[i];
    }
    if (ends_with(path, ".png")) {
        hsi_view m2;
        HSI_TRY(hsi_view_index(&m2, &mv, 0, 0));
        st = hsi_quicklook_labels_png(path, &m2, nc, (const char *const *)names,
                                      p->colors ? rgb : NULL);
        hsi_view_release(&m2);
    } else if (ends_with(path, ".tif") || ends_with(path, ".tiff")) {
        hsi_view m2;
        HSI_TRY(hsi_view_index(&m2, &mv, 0, 0));
        st = hsi_gdal_write_classes(path, &m2, nc, names, p->colors ? rgb : NULL, geo);
        hsi_view_release(&m2);
    } else {
        if (geo) HSI_TRY(hsi_meta_copy(&m, geo));
        hsi_meta_free(&m);
        hsi_meta_init(&m);
        if (geo) {
            m.map_info = geo->map_info;
            if (geo->coordinate_system) m.coordinate_system = strdup(geo->coordinate_system);
        }
        m.n_bands = 1;
        m.n_lines = L;
        m.n_samples = S;
        m.dtype = dt;
        m.file_kind = HSI_FILE_CLASSIFICATION;
        m.file_type = strdup("ENVI Classification");
        m.n_classes = nc;
        m.class_names = calloc((size_t)nc, sizeof(char *));
        m.class_lookup = malloc((size_t)nc * 3);
        if (!m.class_names || !m.class_lookup) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        for (int k = 0; k < nc; k++) {
            char buf[32];
            snprintf(buf, sizeof buf, "Class %d", k);
            m.class_names[k] = strdup(names[k] ? names[k] : buf);
        }
        memcpy(m.class_lookup, rgb, (size_t)nc * 3);
        m.description = strdup("hsi predicted classification map");
        hsi_envi_write_options o;
        hsi_envi_write_options_init(&o);
        o.dtype = dt;
        st = hsi_envi_write(path, &mv, &m, &o);
    }
cleanup:
    free(names);
    free(rgb);
    hsi_view_release(&mv);
    hsi_meta_free(&m);
    return st;
}

/* ------------------------------------------------------------- training */

typedef struct prof_acc {
    double fwd, bwd, opt;
} prof_acc;

/* One epoch over the loader; returns mean loss and accuracy. */
static hsi_status train_epoch(hsi_module *net, hsi_optim *opt, hsi_loader *ld, hsi_graph *g,
                              const hsi_train_config *c, int n_features, double *loss_out,
                              double *acc_out, int64_t *n_out, prof_acc *pa)
{
    hsi_status st = HSI_OK;
    double loss_sum = 0;
    int64_t correct = 0, seen = 0;
    hsi_module_train(net, 1);
    hsi_ce_opts ce;
    hsi_ce_opts_default(&ce);
    for (;;) {
        hsi_batch *b = NULL;
        HSI_TRY(hsi_loader_next(ld, &b));
        if (!b) break;
        int64_t shape[5];
        int nd = hsi_model_input_shape(c->model, (int)b->n, n_features, c->patch, shape);
        hsi_graph_reset(g);
        hsi_tensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
        int64_t yshape[1] = {b->n};
        HSI_TRY(hsi_graph_tensor(&x, g, HSI_F32, nd, shape, 0));
        HSI_TRY(hsi_graph_tensor(&y, g, HSI_I32, 1, yshape, 0));
        memcpy(hsi_tensor_ptr(x), b->x, (size_t)hsi_tensor_count(x) * sizeof(float));
        memcpy(hsi_tensor_ptr(y), b->y, (size_t)b->n * sizeof(int32_t));
        double t0 = hsi_now();
        HSI_TRY(hsi_module_forward(&logits, net, g, x));
        HSI_TRY(hsi_cross_entropy(&loss, g, logits, y, &ce));
        double t1 = hsi_now();
        hsi_optim_zero_grad(opt);
        HSI_TRY(hsi_backward(loss, 0));
        double t2 = hsi_now();
        HSI_TRY(hsi_optim_step(opt));
        double t3 = hsi_now();
        pa->fwd += t1 - t0;
        pa->bwd += t2 - t1;
        pa->opt += t3 - t2;
        double l = hsi_tensor_item(loss);
        if (!isfinite(l)) {
            st = HSI_FAIL(HSI_ERR_NUMERIC,
                          "training diverged: loss is %g at epoch %lld batch %lld (lower --lr?)", l,
                          (long long)b->epoch, (long long)b->index);
            goto cleanup;
        }
        loss_sum += l * (double)b->n;
        const float *lp = hsi_tensor_ptr(logits);
        const int32_t *yy = b->y;
        int64_t K = logits->data.shape[1];
        for (int64_t i = 0; i < b->n; i++) {
            int64_t best = 0;
            for (int64_t k = 1; k < K; k++)
                if (lp[i * K + k] > lp[i * K + best]) best = k;
            correct += best == yy[i];
        }
        seen += b->n;
    }
    *loss_out = seen ? loss_sum / (double)seen : 0;
    *acc_out = seen ? (double)correct / (double)seen : 0;
    *n_out = seen;
cleanup:
    return st;
}

/* One epoch on the GPU: the loader has already copied each batch to the
 * device on its own stream; the step runs there with no host sync; the loss
 * of the last step is read once per epoch. */
static hsi_status train_epoch_cuda(hsi_dmodel *dm, const hsi_optim *opt, hsi_loader *ld,
                                   double *loss_out, int64_t *n_out, prof_acc *pa)
{
    hsi_status st = HSI_OK;
    int64_t seen = 0;
    double t0 = hsi_now();
    hsi_dmodel_set_lr(dm, opt->cfg.lr);
    for (;;) {
        hsi_batch *b = NULL;
        HSI_TRY(hsi_loader_next(ld, &b));
        if (!b) break;
        HSI_TRY(hsi_dmodel_train_step(dm, b->x_dev, b->y_dev, b->n));
        seen += b->n;
    }
    HSI_TRY(hsi_dmodel_loss(dm, loss_out)); /* waits for the stream */
    *n_out = seen;
    pa->fwd += hsi_now() - t0; /* forward+backward+update are not separated on the device */
cleanup:
    return st;
}

static hsi_status eval_role(hsi_metrics *m, hsi_module *net, const hsi_train_config *c,
                            const hsi_patcher *pt, const hsi_split *sp, int role, int n_features,
                            hsi_graph *g, hsi_train_profile *prof)
{
    hsi_status st = HSI_OK;
    int64_t n = sp->n[role];
    int32_t *pred = malloc((size_t)(n ? n : 1) * sizeof *pred);
    if (!pred) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    HSI_TRY(predict_pixels(pred, net, c->model, pt, sp->idx[role], n, c->batch * 2, n_features, g,
                           prof));
    HSI_TRY(hsi_metrics_compute(m, sp->cls[role], pred, n, sp->n_classes));
cleanup:
    free(pred);
    return st;
}

static cJSON *config_json(const hsi_train_config *c, int n_features, int patch)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "cube", c->cube_path);
    cJSON_AddStringToObject(o, "labels", c->labels_path ? c->labels_path : "");
    cJSON_AddStringToObject(o, "model", c->model);
    cJSON_AddNumberToObject(o, "features", n_features);
    cJSON_AddNumberToObject(o, "patch", patch);
    cJSON_AddStringToObject(o, "normalize", hsi_norm_mode_name(c->norm));
    cJSON_AddNumberToObject(o, "pca", c->pca);
    cJSON_AddNumberToObject(o, "pca_variance", c->pca_variance);
    cJSON_AddBoolToObject(o, "whiten", c->whiten);
    cJSON_AddStringToObject(o, "fit_on", c->fit_on_all ? "all" : "train");
    cJSON_AddStringToObject(o, "split", c->train_labels ? "explicit"
                                        : c->split == HSI_SPLIT_DISJOINT ? "disjoint" : "random");
    cJSON_AddNumberToObject(o, "train_fraction", c->train_fraction);
    cJSON_AddNumberToObject(o, "per_class", (double)c->per_class);
    cJSON_AddNumberToObject(o, "val_fraction", c->val_fraction);
    cJSON_AddNumberToObject(o, "epochs", c->epochs);
    cJSON_AddNumberToObject(o, "batch", c->batch);
    cJSON_AddNumberToObject(o, "lr", c->lr);
    cJSON_AddNumberToObject(o, "weight_decay", c->weight_decay);
    cJSON_AddNumberToObject(o, "seed", (double)c->seed);
    cJSON_AddNumberToObject(o, "workers", c->workers);
    cJSON_AddBoolToObject(o, "augment", c->augment);
    return o;
}

hsi_status hsi_train_run(const hsi_train_config *cfg, hsi_train_result *res)
{
    hsi_status st = HSI_OK;
    hsi_train_config c = *cfg;
    hsi_cube cube;
    hsi_labels lab, ltr, lte;
    hsi_split sp;
    pipe_state p;
    hsi_view fc, mask;
    hsi_patcher pt;
    hsi_loader *ld = NULL;
    hsi_dmodel *dm = NULL;
    hsi_optim *opt = NULL;
    hsi_graph *g = NULL;
    hsi_metrics mt;
    int64_t *sel = NULL, nsel = 0;
    int32_t *map = NULL;
    char *p_model = NULL, *p_state = NULL, *p_best = NULL;
    cJSON *pj = NULL, *mj = NULL;
    int have_patcher = 0, have_metrics = 0;
    double t_start = hsi_now(), t;
    hsi_cube_init(&cube);
    hsi_labels_init(&lab);
    hsi_labels_init(&ltr);
    hsi_labels_init(&lte);
    memset(&sp, 0, sizeof sp);
    memset(&p, 0, sizeof p);
    memset(&fc, 0, sizeof fc);
    memset(&mask, 0, sizeof mask);
    memset(res, 0, sizeof *res);
    hsi_train_profile *prof = &res->prof;

    /* ---- check the configuration */
    if (!strcmp(c.model, "cnn1d")) c.patch = 1;
    if (c.patch < 1 || c.patch % 2 == 0 || c.patch > HSI_PATCH_MAX)
        return HSI_FAIL(HSI_ERR_ARG, "--patch must be odd and in 1..%d (got %d)", HSI_PATCH_MAX,
                        c.patch);
    if (c.epochs < 1 || c.batch < 1)
        return HSI_FAIL(HSI_ERR_ARG, "--epochs and --batch must be >= 1");
    if (!strcasecmp(c.device, "cuda") && hsi_cuda_device_count() == 0)
        return HSI_FAIL(HSI_ERR_NO_CUDA, "--device cuda: %s",
                        hsi_cuda_built() ? "no CUDA device is present on this machine"
                                         : "this hsi was built without CUDA");
    const int on_gpu = !strcasecmp(c.device, "cuda");
    if (on_gpu && c.resume)
        return HSI_FAIL(HSI_ERR_UNSUPPORTED,
                        "--resume with --device cuda: the optimiser state lives on the device and "
                        "is not checkpointed yet; resume with --device cpu");
    if (strcasecmp(c.device, "cpu") && strcasecmp(c.device, "auto"))
        return HSI_FAIL(HSI_ERR_ARG, "--device expects cpu, cuda or auto (got '%s')", c.device);
    HSI_TRY(make_dir(c.out_dir));
    p_model = path_join(c.out_dir, "model.safetensors");
    p_state = path_join(c.out_dir, "train_state.safetensors");
    p_best = path_join(c.out_dir, "best.safetensors");

    /* ---- read */
    t = hsi_now();
    HSI_TRY(hsi_cube_open(&cube, c.cube_path, &(hsi_open_options){c.cube_var, 0}));
    const int64_t L = cube.view.shape[1], S = cube.view.shape[2];
    if (c.train_labels) {
        HSI_TRY(hsi_labels_open(&ltr, c.train_labels, c.labels_var));
        HSI_TRY(hsi_labels_open(&lte, c.test_labels, c.labels_var));
    } else {
        HSI_TRY(hsi_labels_open(&lab, c.labels_path, c.labels_var));
    }
    const hsi_labels *lref = c.train_labels ? &ltr : &lab;
    if (lref->map.shape[0] != L || lref->map.shape[1] != S ||
        (c.train_labels && (lte.map.shape[0] != L || lte.map.shape[1] != S))) {
        st = HSI_FAIL(HSI_ERR_ARG, "labels are %lld x %lld but the cube is %lld lines x %lld samples",
                      (long long)lref->map.shape[0], (long long)lref->map.shape[1], (long long)L,
                      (long long)S);
        goto cleanup;
    }
    prof->read = hsi_now() - t;

    /* ---- split */
    t = hsi_now();
    hsi_split_params spp;
    hsi_split_params_init(&spp);
    spp.mode = c.split;
    spp.train_fraction = c.train_fraction;
    spp.per_class = c.per_class;
    spp.val_fraction = c.val_fraction;
    spp.seed = c.seed;
    /* a lone training block narrower than 4 radii is eaten by the guard band */
    spp.block = c.block > 0 ? c.block : (4 * (c.patch / 2) + 4 > 16 ? 4 * (c.patch / 2) + 4 : 16);
    spp.patch_radius = c.split == HSI_SPLIT_DISJOINT ? c.patch / 2 : 0;
    if (c.train_labels) HSI_TRY(hsi_split_explicit(&sp, &ltr.map, &lte.map, &spp));
    else HSI_TRY(hsi_split_make(&sp, &lab.map, &spp));
    const int K = sp.n_classes;
    if (K < 2) {
        st = HSI_FAIL(HSI_ERR_ARG, "%s: only %d class is labelled; training needs at least 2",
                      c.labels_path ? c.labels_path : c.train_labels, K);
        goto cleanup;
    }
    if (sp.n[HSI_ROLE_TRAIN] == 0 || sp.n[HSI_ROLE_TEST] == 0) {
        st = HSI_FAIL(HSI_ERR_ARG, "the split left %lld training and %lld test pixels",
                      (long long)sp.n[HSI_ROLE_TRAIN], (long long)sp.n[HSI_ROLE_TEST]);
        goto cleanup;
    }
    /* class names and colours from the label file */
    p.n_classes = K;
    p.label_ids = malloc((size_t)K * sizeof *p.label_ids);
    p.names = calloc((size_t)K, sizeof *p.names);
    if (lref->colors) p.colors = malloc((size_t)K * 3);
    if (!p.label_ids || !p.names || (lref->colors && !p.colors)) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (int k = 0; k < K; k++) {
        int64_t id = sp.class_ids[k];
        p.label_ids[k] = id;
        char buf[32];
        snprintf(buf, sizeof buf, "class %lld", (long long)id);
        p.names[k] = strdup(lref->names && id < lref->n_classes && lref->names[id] ? lref->names[id]
                                                                                   : buf);
        if (p.colors) {
            if (id < lref->n_classes) memcpy(p.colors + 3 * k, lref->colors + 3 * id, 3);
            else memset(p.colors + 3 * k, 128, 3);
        }
    }
    say(&c, "split (%s, seed %llu): %lld train, %lld validation, %lld test pixels in %d classes\n",
        c.train_labels ? "explicit" : c.split == HSI_SPLIT_DISJOINT ? "spatially disjoint" : "random",
        (unsigned long long)c.seed, (long long)sp.n[HSI_ROLE_TRAIN], (long long)sp.n[HSI_ROLE_VAL],
        (long long)sp.n[HSI_ROLE_TEST], K);
    if (c.verbose) hsi_split_print(&sp, stdout, (const char *const *)p.names);
    if (c.log) hsi_split_print(&sp, c.log, (const char *const *)p.names);
    {
        char *path = path_join(c.out_dir, "split.json");
        st = hsi_split_save_json(&sp, path, (const char *const *)p.names, 0);
        free(path);
        if (st != HSI_OK) goto cleanup;
    }
    prof->split = hsi_now() - t;

    /* ---- preprocessing fitted on training pixels (or all, flagged leaky) */
    t = hsi_now();
    int64_t mshape[2] = {L, S};
    HSI_TRY(hsi_view_alloc(&mask, HSI_U8, 2, mshape, HSI_BUF_HOST));
    for (int64_t i = 0; i < L * S; i++)
        ((uint8_t *)mask.buf->data)[i] = c.fit_on_all ? 1 : sp.role[i] == HSI_ROLE_TRAIN;
    HSI_TRY(kcli_select_bands(&sel, &nsel, &cube.meta, c.bands_spec, c.wavelengths_spec,
                              !c.keep_bad_bands));
    p.has_pca = c.pca > 0 || c.pca_variance > 0;
    hsi_pca_opts po;
    memset(&po, 0, sizeof po);
    po.n_components = c.pca > 0 ? (c.pca < nsel ? c.pca : nsel) : 0;
    po.variance_fraction = c.pca_variance;
    po.whiten = c.whiten;
    HSI_TRY(kcli_fit(&p.norm, &p.pca, &cube, sel, nsel, c.norm, &mask, p.has_pca ? &po : NULL, 0,
                     0));
    HSI_TRY(fused_cube(&fc, &cube.view, &p.norm, p.has_pca ? &p.pca : NULL,
                       c.verbose ? "preprocess" : NULL));
    p.n_features = (int)fc.shape[0];
    p.patch = c.patch;
    p.pad = c.pad;
    p.n_cube_bands = cube.view.shape[0];
    snprintf(p.model, sizeof p.model, "%s", c.model);
    prof->preprocess = hsi_now() - t;
    if (p.has_pca) {
        double ev = 0;
        for (int64_t k = 0; k < p.pca.n_components; k++) ev += p.pca.explained_variance_ratio[k];
        say(&c, "preprocess: %lld bands -> %s -> PCA %lld components (%.2f %% of the variance), "
                "fitted on %s pixels%s (%.2f s)\n",
            (long long)nsel, hsi_norm_mode_name(c.norm), (long long)p.pca.n_components, 100 * ev,
            c.fit_on_all ? "ALL" : "training", c.fit_on_all ? " - leaky protocol" : "",
            prof->preprocess);
    } else {
        say(&c, "preprocess: %lld bands -> %s, no PCA (%.2f s)\n", (long long)nsel,
            hsi_norm_mode_name(c.norm), prof->preprocess);
    }

    /* ---- model, optimiser, loader */
    HSI_TRY(hsi_model_create(&p.net, c.model, p.n_features, c.patch, K, HSI_F32, c.seed));
    hsi_optim_config oc;
    hsi_optim_config_default(&oc, HSI_OPT_ADAMW);
    oc.lr = c.lr;
    oc.weight_decay = c.weight_decay;
    HSI_TRY(hsi_optim_new(&opt, &oc, p.net));
    hsi_sched sched;
    hsi_sched_init(&sched, c.schedule, c.lr);
    sched.step_size = c.epochs > 3 ? c.epochs / 3 : 1;
    sched.gamma = 0.1;
    sched.warmup = c.epochs >= 10 ? 2 : 0;
    sched.total = c.epochs;
    sched.min_lr = c.lr * 0.01;
    hsi_manual_seed(c.seed);
    int first_epoch = 0, resume_best_epoch = -1, resume_since_best = 0;
    double resume_best_val = -1;
    if (c.resume) {
        char *cfgs = NULL;
        int ep = 0;
        st = hsi_train_load(p_state, p.net, opt, &sched, &ep, &cfgs);
        if (st != HSI_OK) {
            free(cfgs);
            hsi_fail_context(st, "--resume");
            goto cleanup;
        }
        cJSON *rj = cfgs ? cJSON_Parse(cfgs) : NULL;
        free(cfgs);
        const cJSON *bv = cJSON_GetObjectItem(rj, "best_val"), *be = cJSON_GetObjectItem(rj, "best_epoch"),
                    *sb = cJSON_GetObjectItem(rj, "since_best");
        if (cJSON_IsNumber(bv) && cJSON_IsNumber(be) && cJSON_IsNumber(sb)) {
            resume_best_val = bv->valuedouble;
            resume_best_epoch = be->valueint;
            resume_since_best = sb->valueint;
        }
        cJSON_Delete(rj);
        first_epoch = ep;
        if (first_epoch >= c.epochs) {
            st = HSI_FAIL(HSI_ERR_ARG, "--resume: %s already holds %d epochs; ask for more with "
                                       "--epochs N (N > %d)", p_state, ep, ep);
            goto cleanup;
        }
        say(&c, "resuming after epoch %d from %s\n", ep, p_state);
    } else {
        hsi_sched_begin(&sched, opt);
    }
    say(&c, "model %s: %lld parameters, input %d x %d x %d, %d classes; AdamW lr %g, batch %d\n",
        c.model, (long long)hsi_module_param_count(p.net), p.n_features, c.patch, c.patch, K, c.lr,
        c.batch);
    hsi_augment aug = {c.augment, c.augment, 0.0f};
    HSI_TRY(hsi_patcher_init(&pt, &fc, c.patch, c.pad, &aug));
    have_patcher = 1;
    hsi_patch_dataset ds = {&pt, sp.idx[HSI_ROLE_TRAIN], sp.cls[HSI_ROLE_TRAIN], c.augment};
    hsi_loader_params lp;
    hsi_loader_params_init(&lp);
    lp.n_samples = sp.n[HSI_ROLE_TRAIN];
    lp.batch_size = c.batch;
    lp.x_bytes = (size_t)hsi_patcher_sample_floats(&pt) * sizeof(float);
    lp.y_bytes = sizeof(int32_t);
    lp.n_workers = c.workers;
    lp.prefetch = c.prefetch;
    lp.shuffle = 1;
    lp.drop_last = sp.n[HSI_ROLE_TRAIN] > c.batch;
    lp.seed = c.seed;
    lp.first_epoch = first_epoch;
    lp.fill = hsi_patch_fill;
    lp.ctx = &ds;
    lp.device_copy = on_gpu;
    HSI_TRY(hsi_loader_create(&ld, &lp));
    if (on_gpu) {
        int64_t ishape[5];
        int nd = hsi_model_input_shape(c.model, 1, p.n_features, c.patch, ishape);
        HSI_TRY(hsi_cuda_require("hsi train --device cuda"));
        HSI_TRY(hsi_dmodel_create(&dm, p.net, nd - 1, ishape + 1, c.batch, &oc, c.seed));
        say(&c, "device: CUDA (batches copied on the loader's stream; validation on the host)\n");
    }
    HSI_TRY(hsi_graph_new(&g));

    /* ---- epochs */
    double best_val = resume_best_val, t_train = hsi_now();
    int best_epoch = resume_best_epoch, since_best = resume_since_best;
    int have_val = sp.n[HSI_ROLE_VAL] > 0;
    prof_acc pa = {0, 0, 0};
    int64_t samples_total = 0;
    int epoch;
    for (epoch = first_epoch; epoch < c.epochs; epoch++) {
        double te = hsi_now(), loss = 0, acc = 0;
        int64_t n_seen = 0;
        if (on_gpu) {
            HSI_TRY(train_epoch_cuda(dm, opt, ld, &loss, &n_seen, &pa));
            HSI_TRY(hsi_dmodel_to_host(dm, p.net, 0)); /* validation and checkpoints on the host */
            acc = NAN;
        } else {
            HSI_TRY(train_epoch(p.net, opt, ld, g, &c, p.n_features, &loss, &acc, &n_seen, &pa));
        }
        samples_total += n_seen;
        double dt = hsi_now() - te;
        double val_oa = acc;
        if (have_val) {
            double tv = hsi_now();
            hsi_metrics vm;
            HSI_TRY(eval_role(&vm, p.net, &c, &pt, &sp, HSI_ROLE_VAL, p.n_features, g, NULL));
            val_oa = vm.oa;
            hsi_metrics_free(&vm);
            prof->validate += hsi_now() - tv;
        }
        double lr_now = opt->cfg.lr;
        hsi_sched_epoch_end(&sched, opt, 1 - val_oa);
        /* without validation pixels the last epoch is kept */
        /* ties keep the later epoch: tiny validation sets saturate early */
        int improved = !have_val || val_oa >= best_val;
        if (improved) {
            best_val = val_oa;
            best_epoch = epoch;
            since_best = 0;
            HSI_TRY(hsi_module_save(p.net, p_best, NULL, 0));
        } else {
            since_best++;
        }
        double el = hsi_now() - t_train;
        double eta = el / (epoch - first_epoch + 1) * (c.epochs - epoch - 1);
        char vbuf[32] = "";
        if (have_val) snprintf(vbuf, sizeof vbuf, "  val OA %5.1f%%%s", 100 * val_oa, improved ? "*" : " ");
        say(&c, "epoch %3d/%d  loss %.4f  train acc %5.1f%%%s  lr %.2e  %6.0f samples/s  ETA %.0fs\n",
            epoch + 1, c.epochs, loss, 100 * acc, vbuf, lr_now, dt > 0 ? (double)n_seen / dt : 0, eta);
        {
            char rs[160];
            snprintf(rs, sizeof rs, "{\"best_val\": %.17g, \"best_epoch\": %d, \"since_best\": %d}",
                     best_val, best_epoch, since_best);
            if (!on_gpu) HSI_TRY(hsi_train_save(p_state, p.net, opt, &sched, epoch + 1, rs));
        }
        if (c.patience > 0 && have_val && since_best >= c.patience) {
            say(&c, "early stop: no validation improvement for %d epochs\n", c.patience);
            epoch++;
            break;
        }
    }
    res->epochs_run = epoch - first_epoch;
    double train_time = hsi_now() - t_train - prof->validate;
    hsi_loader_stats ls;
    hsi_loader_get_stats(ld, &ls);
    prof->loader_wait = ls.wait_s;
    prof->forward = pa.fwd;
    prof->backward = pa.bwd;
    prof->optimizer = pa.opt;
    prof->train_samples = samples_total;
    prof->steps = ls.batches;
    res->train_samples_per_s = train_time > 0 ? (double)samples_total / train_time : 0;
    if (best_epoch >= 0) {
        hsi_load_report rep;
        HSI_TRY(hsi_module_load(p.net, p_best, 1, &rep));
    }
    res->best_epoch = best_epoch + 1;
    res->best_val_oa = best_val;
    say(&c, "training: %.1f s, %.0f samples/s, loader wait %.2f s (%.1f %% of the step time); "
            "best epoch %d\n",
        train_time, res->train_samples_per_s, ls.wait_s,
        100 * ls.wait_s / (pa.fwd + pa.bwd + pa.opt + ls.wait_s + 1e-12), best_epoch + 1);

    /* ---- whole-scene map; the test metrics are read off it (a pixel's
     * prediction does not depend on the tile it was computed in) */
    t = hsi_now();
    map = malloc((size_t)(L * S) * sizeof *map);
    if (!map) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    HSI_TRY(predict_scene(map, &p, &cube.view, &fc, c.batch * 2, 0));
    {
        int64_t nt = sp.n[HSI_ROLE_TEST];
        int32_t *pred = malloc((size_t)(nt ? nt : 1) * sizeof *pred);
        if (!pred) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        for (int64_t i = 0; i < nt; i++) {
            int32_t id = map[sp.idx[HSI_ROLE_TEST][i]];
            pred[i] = 0;
            for (int k = 0; k < K; k++)
                if (p.label_ids[k] == id) pred[i] = k;
        }
        st = hsi_metrics_compute(&mt, sp.cls[HSI_ROLE_TEST], pred, nt, K);
        free(pred);
        if (st != HSI_OK) goto cleanup;
    }
    have_metrics = 1;
    res->oa = mt.oa;
    res->aa = mt.aa;
    res->kappa = mt.kappa;
    res->n_train = sp.n[HSI_ROLE_TRAIN];
    res->n_val = sp.n[HSI_ROLE_VAL];
    res->n_test = sp.n[HSI_ROLE_TEST];
    if (c.verbose) hsi_metrics_print(&mt, stdout, (const char *const *)p.names, 0);
    if (c.log) hsi_metrics_print(&mt, c.log, (const char *const *)p.names, 1);
    prof->predict += hsi_now() - t;

    /* ---- files */
    t = hsi_now();
    HSI_TRY(hsi_module_save(p.net, p_model, NULL, 0));
    {
        char *pp = path_join(c.out_dir, "map.hdr");
        st = write_map(pp, map, L, S, &p, &cube.meta);
        free(pp);
        if (st != HSI_OK) goto cleanup;
        pp = path_join(c.out_dir, "map.png");
        st = write_map(pp, map, L, S, &p, &cube.meta);
        free(pp);
        if (st != HSI_OK) goto cleanup;
        double gt6[6];
        if (hsi_meta_geotransform(&cube.meta, gt6)) {
            pp = path_join(c.out_dir, "map.tif");
            st = write_map(pp, map, L, S, &p, &cube.meta);
            free(pp);
            if (st != HSI_OK) goto cleanup;
        }
    }
    pj = cJSON_CreateObject();
    cJSON_AddNumberToObject(pj, "version", 1);
    cJSON_AddStringToObject(pj, "model", c.model);
    cJSON_AddNumberToObject(pj, "patch", c.patch);
    cJSON_AddStringToObject(pj, "pad", c.pad == HSI_PAD_ZERO ? "zero" : "mirror");
    cJSON_AddNumberToObject(pj, "features", p.n_features);
    cJSON_AddNumberToObject(pj, "cube_bands", (double)p.n_cube_bands);
    cJSON_AddItemToObject(pj, "normalization", norm_json(p.has_pca ? &p.pca.norm : &p.norm));
    if (p.has_pca) {
        char *pp = path_join(c.out_dir, "pca.bin");
        st = hsi_pca_save(&p.pca, pp);
        free(pp);
        if (st != HSI_OK) goto cleanup;
        cJSON_AddStringToObject(pj, "pca_file", "pca.bin");
        cJSON_AddItemToObject(pj, "pca_explained_variance_ratio",
                              cJSON_CreateDoubleArray(p.pca.explained_variance_ratio,
                                                      (int)p.pca.n_components));
    }
    cJSON *cl = cJSON_AddArrayToObject(pj, "classes");
    for (int k = 0; k < K; k++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "index", k);
        cJSON_AddNumberToObject(e, "label", (double)p.label_ids[k]);
        cJSON_AddStringToObject(e, "name", p.names[k]);
        if (p.colors) {
            int rgb[3] = {p.colors[3 * k], p.colors[3 * k + 1], p.colors[3 * k + 2]};
            cJSON_AddItemToObject(e, "color", cJSON_CreateIntArray(rgb, 3));
        }
        cJSON_AddItemToArray(cl, e);
    }
    cJSON_AddItemToObject(pj, "training", config_json(&c, p.n_features, c.patch));
    {
        char *pp = path_join(c.out_dir, "pipeline.json");
        st = save_json(pp, pj);
        free(pp);
        if (st != HSI_OK) goto cleanup;
    }
    mj = hsi_metrics_json(&mt, (const char *const *)p.names, p.label_ids);
    cJSON_AddStringToObject(mj, "split", c.train_labels ? "explicit"
                                         : c.split == HSI_SPLIT_DISJOINT ? "disjoint" : "random");
    cJSON_AddStringToObject(mj, "fit_on", c.fit_on_all ? "all" : "train");
    cJSON_AddBoolToObject(mj, "leaky_protocol", c.fit_on_all);
    cJSON *counts = cJSON_AddObjectToObject(mj, "split_counts");
    cJSON_AddNumberToObject(counts, "train", (double)sp.n[HSI_ROLE_TRAIN]);
    cJSON_AddNumberToObject(counts, "val", (double)sp.n[HSI_ROLE_VAL]);
    cJSON_AddNumberToObject(counts, "test", (double)sp.n[HSI_ROLE_TEST]);
    cJSON_AddNumberToObject(mj, "best_epoch", best_epoch + 1);
    cJSON_AddNumberToObject(mj, "best_val_oa", best_val);
    cJSON_AddNumberToObject(mj, "epochs_run", res->epochs_run);
    prof->write = hsi_now() - t;
    prof->total = hsi_now() - t_start;
    cJSON *tj = cJSON_AddObjectToObject(mj, "timings_s");
    cJSON_AddNumberToObject(tj, "read", prof->read);
    cJSON_AddNumberToObject(tj, "split", prof->split);
    cJSON_AddNumberToObject(tj, "preprocess", prof->preprocess);
    cJSON_AddNumberToObject(tj, "train", train_time);
    cJSON_AddNumberToObject(tj, "loader_wait", prof->loader_wait);
    cJSON_AddNumberToObject(tj, "forward", prof->forward);
    cJSON_AddNumberToObject(tj, "backward", prof->backward);
    cJSON_AddNumberToObject(tj, "optimizer", prof->optimizer);
    cJSON_AddNumberToObject(tj, "validate", prof->validate);
    cJSON_AddNumberToObject(tj, "predict", prof->predict);
    cJSON_AddNumberToObject(tj, "total", prof->total);
    cJSON_AddNumberToObject(mj, "train_samples_per_s", res->train_samples_per_s);
    {
        char *pp = path_join(c.out_dir, "metrics.json");
        st = save_json(pp, mj);
        free(pp);
        if (st != HSI_OK) goto cleanup;
    }
    remove(p_best);

cleanup:
    cJSON_Delete(pj);
    cJSON_Delete(mj);
    if (have_metrics) hsi_metrics_free(&mt);
    free(map);
    hsi_graph_free(g);
    hsi_loader_destroy(ld);
    hsi_dmodel_free(dm);
    hsi_optim_free(opt);
    if (have_patcher) hsi_patcher_free(&pt);
    hsi_view_release(&fc);
    hsi_view_release(&mask);
    free(sel);
    pipe_free(&p);
    hsi_split_free(&sp);
    hsi_labels_free(&lab);
    hsi_labels_free(&ltr);
    hsi_labels_free(&lte);
    hsi_cube_free(&cube);
    free(p_model);
    free(p_state);
    free(p_best);
    return st;
}

/* ------------------------------------------------------ predict, eval */

static hsi_status pipe_load(pipe_state *p, const char *dir)
{
    hsi_status st = HSI_OK;
    char *path = path_join(dir, "pipeline.json"), *text = NULL;
    cJSON *j = NULL;
    memset(p, 0, sizeof *p);
    size_t len;
    HSI_TRY(hsi_read_file(path, &text, &len));
    j = cJSON_Parse(text);
    if (!j) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: not valid JSON (near byte %ld)", path,
                      cJSON_GetErrorPtr() ? (long)(cJSON_GetErrorPtr() - text) : 0L);
        goto cleanup;
    }
    const cJSON *model = cJSON_GetObjectItem(j, "model"), *patch = cJSON_GetObjectItem(j, "patch"),
                *classes = cJSON_GetObjectItem(j, "classes"), *pad = cJSON_GetObjectItem(j, "pad"),
                *pcaf = cJSON_GetObjectItem(j, "pca_file"), *nrm = cJSON_GetObjectItem(j, "normalization");
    if (!cJSON_IsString(model) || !cJSON_IsNumber(patch) || !cJSON_IsArray(classes) ||
        !cJSON_IsObject(nrm)) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: needs 'model', 'patch', 'classes' and 'normalization'",
                      path);
        goto cleanup;
    }
    snprintf(p->model, sizeof p->model, "%s", model->valuestring);
    p->patch = patch->valueint;
    p->pad = cJSON_IsString(pad) && !strcmp(pad->valuestring, "zero") ? HSI_PAD_ZERO : HSI_PAD_MIRROR;
    st = norm_from_json(&p->norm, nrm);
    if (st != HSI_OK) {
        hsi_fail_context(st, "%s", path);
        goto cleanup;
    }
    p->n_cube_bands = p->norm.n_cube_bands;
    if (cJSON_IsString(pcaf)) {
        char *pp = path_join(dir, pcaf->valuestring);
        st = hsi_pca_load(&p->pca, pp);
        free(pp);
        if (st != HSI_OK) goto cleanup;
        p->has_pca = 1;
        p->n_features = (int)p->pca.n_components;
    } else {
        p->n_features = (int)p->norm.n_bands;
    }
    p->n_classes = cJSON_GetArraySize(classes);
    if (p->n_classes < 2) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: fewer than 2 classes", path);
        goto cleanup;
    }
    p->label_ids = calloc((size_t)p->n_classes, sizeof *p->label_ids);
    p->names = calloc((size_t)p->n_classes, sizeof *p->names);
    p->colors = calloc((size_t)p->n_classes * 3, 1);
    if (!p->label_ids || !p->names || !p->colors) {
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
        p->label_ids[k] = (int64_t)lb->valuedouble;
        p->names[k] = strdup(cJSON_IsString(nm) ? nm->valuestring : "?");
        if (cJSON_IsArray(co) && cJSON_GetArraySize(co) == 3) {
            any_color = 1;
            for (int q = 0; q < 3; q++) p->colors[3 * k + q] = (uint8_t)cJSON_GetArrayItem(co, q)->valueint;
        }
        k++;
    }
    if (!any_color) {
        free(p->colors);
        p->colors = NULL;
    }
    HSI_TRY(hsi_model_create(&p->net, p->model, p->n_features, p->patch, p->n_classes, HSI_F32, 0));
    free(path);
    path = path_join(dir, "model.safetensors");
    HSI_TRY(hsi_module_load(p->net, path, 1, NULL));
cleanup:
    if (st != HSI_OK) pipe_free(p);
    cJSON_Delete(j);
    free(text);
    free(path);
    return st;
}

static hsi_status open_for_pipe(hsi_cube *cube, const pipe_state *p, const char *path,
                                const char *var)
{
    hsi_status st = hsi_cube_open(cube, path, &(hsi_open_options){var, 0});
    if (st != HSI_OK) return st;
    if (cube->view.shape[0] != p->n_cube_bands)
        return HSI_FAIL(HSI_ERR_ARG, "%s has %lld bands but the model was trained on cubes of %lld",
                        path, (long long)cube->view.shape[0], (long long)p->n_cube_bands);
    return HSI_OK;
}

hsi_status hsi_predict_run(const char *dir, const char *cube_path, const char *cube_var,
                           const char *out_path, int batch, int verbose)
{
    hsi_status st = HSI_OK;
    pipe_state p;
    hsi_cube cube;
    int32_t *map = NULL;
    hsi_cube_init(&cube);
    HSI_TRY(pipe_load(&p, dir));
    HSI_TRY(open_for_pipe(&cube, &p, cube_path, cube_var));
    const int64_t L = cube.view.shape[1], S = cube.view.shape[2];
    map = malloc((size_t)(L * S) * sizeof *map);
    if (!map) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    HSI_TRY(predict_scene(map, &p, &cube.view, NULL, batch, verbose));
    HSI_TRY(write_map(out_path, map, L, S, &p, &cube.meta));
cleanup:
    free(map);
    hsi_cube_free(&cube);
    pipe_free(&p);
    return st;
}

hsi_status hsi_eval_run(const char *dir, const char *cube_path, const char *cube_var,
                        const char *labels_path, const char *labels_var, const char *json_path,
                        int batch, int verbose, double *oa_out)
{
    hsi_status st = HSI_OK;
    pipe_state p;
    hsi_cube cube;
    hsi_labels lab;
    hsi_metrics mt;
    int have_mt = 0;
    int32_t *map = NULL, *yt = NULL, *yp = NULL;
    hsi_cube_init(&cube);
    hsi_labels_init(&lab);
    HSI_TRY(pipe_load(&p, dir));
    HSI_TRY(open_for_pipe(&cube, &p, cube_path, cube_var));
    HSI_TRY(hsi_labels_open(&lab, labels_path, labels_var));
    const int64_t L = cube.view.shape[1], S = cube.view.shape[2];
    if (lab.map.shape[0] != L || lab.map.shape[1] != S) {
        st = HSI_FAIL(HSI_ERR_ARG, "%s is %lld x %lld but the cube is %lld x %lld", labels_path,
                      (long long)lab.map.shape[0], (long long)lab.map.shape[1], (long long)L,
                      (long long)S);
        goto cleanup;
    }
    map = malloc((size_t)(L * S) * sizeof *map);
    yt = malloc((size_t)(L * S) * sizeof *yt);
    yp = malloc((size_t)(L * S) * sizeof *yp);
    if (!map || !yt || !yp) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    HSI_TRY(predict_scene(map, &p, &cube.view, NULL, batch, verbose));
    const int32_t *lm = lab.map.buf->data;
    int64_t n = 0, unknown = 0;
    for (int64_t i = 0; i < L * S; i++) {
        if (lm[i] <= 0) continue;
        int k = -1, q = -1;
        for (int c = 0; c < p.n_classes; c++) {
            if (p.label_ids[c] == lm[i]) k = c;
            if (p.label_ids[c] == map[i]) q = c;
        }
        if (k < 0) {
            unknown++;
            continue;
        }
        yt[n] = k;
        yp[n] = q;
        n++;
    }
    if (unknown)
        hsi_warn("%lld labelled pixels have classes the model was not trained on; not scored",
                 (long long)unknown);
    HSI_TRY(hsi_metrics_compute(&mt, yt, yp, n, p.n_classes));
    have_mt = 1;
    if (verbose) hsi_metrics_print(&mt, stdout, (const char *const *)p.names, 1);
    if (json_path)
        HSI_TRY(hsi_metrics_save_json(&mt, json_path, (const char *const *)p.names, p.label_ids));
    if (oa_out) *oa_out = mt.oa;
cleanup:
    if (have_mt) hsi_metrics_free(&mt);
    free(map);
    free(yt);
    free(yp);
    hsi_labels_free(&lab);
    hsi_cube_free(&cube);
    pipe_free(&p);
    return st;
}

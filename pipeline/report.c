/* report.c — a run directory's pictures and report.html (see report.h),
 * from its history.csv, metrics.json and pipeline.json, and the profile's
 * bar chart. The pictures are io/plot.h charts; the page is plain HTML
 * with the PNGs embedded as base64 data: URIs. Not a template engine. */
#define _GNU_SOURCE
#include "pipeline/report.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/plot.h"
#include "pipeline/run_internal.h"

static const uint8_t C_TRAIN[3] = {31, 119, 180}, C_VAL[3] = {230, 110, 20};

/* ------------------------------------------------------------ inputs */

/* history.csv as columns (NaN where a field is empty). */
typedef struct history {
    int n;
    double *epoch, *loss, *acc, *val_oa, *val_loss;
} history;

static void history_free(history *h)
{
    free(h->epoch);
    free(h->loss);
    free(h->acc);
    free(h->val_oa);
    free(h->val_loss);
    memset(h, 0, sizeof *h);
}

/* Columns found by their names in the header line (epoch and train_loss
 * needed; the others may be missing, as in a run of an older hsi). */
static hsi_status history_parse(history *h, const char *text, const char *path)
{
    static const char *const want[5] = {"epoch", "train_loss", "train_acc", "val_oa", "val_loss"};
    int col[5] = {-1, -1, -1, -1, -1};
    memset(h, 0, sizeof *h);
    const char *eol = strchr(text, '\n');
    if (!eol) return HSI_FAIL(HSI_ERR_FORMAT, "%s: no header line", path);
    int c = 0;
    for (const char *p = text; p < eol; c++) {
        const char *e = p;
        while (e < eol && *e != ',' && *e != '\r')
            e++;
        for (int k = 0; k < 5; k++)
            if ((size_t)(e - p) == strlen(want[k]) && !strncmp(p, want[k], (size_t)(e - p)))
                col[k] = c;
        p = e < eol && *e == ',' ? e + 1 : eol;
    }
    if (col[0] < 0 || col[1] < 0)
        return HSI_FAIL(HSI_ERR_FORMAT,
                        "%s: the header line has no 'epoch' or no 'train_loss' column", path);
    int rows = 0;
    for (const char *p = eol + 1; *p; p++)
        rows += *p == '\n';
    double **dst[5] = {&h->epoch, &h->loss, &h->acc, &h->val_oa, &h->val_loss};
    for (int k = 0; k < 5; k++) {
        *dst[k] = malloc((size_t)(rows ? rows : 1) * sizeof(double));
        if (!*dst[k]) {
            history_free(h);
            return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        }
    }
    const char *p = eol + 1;
    while (*p && h->n < rows) {
        const char *end = strchr(p, '\n');
        if (!end) break;
        for (int k = 0; k < 5; k++)
            (*dst[k])[h->n] = NAN;
        c = 0;
        for (const char *q = p; q <= end; c++) {
            const char *e = q;
            while (e < end && *e != ',')
                e++;
            for (int k = 0; k < 5; k++)
                if (col[k] == c && e > q) {
                    char *stop;
                    double v = strtod(q, &stop);
                    if (stop > q) (*dst[k])[h->n] = v;
                }
            q = e + 1;
        }
        if (isfinite(h->epoch[h->n])) h->n++;
        p = end + 1;
    }
    return HSI_OK;
}

static int any_finite(const double *v, int n)
{
    for (int i = 0; i < n; i++)
        if (isfinite(v[i])) return 1;
    return 0;
}

/* A file of the run directory, parsed as JSON. */
static hsi_status load_json(cJSON **out, const char *dir, const char *name)
{
    *out = NULL;
    char *p = hsi_run_path(dir, name), *text = NULL;
    size_t n = 0;
    if (!p) return HSI_ERR_NOMEM;
    hsi_status st = hsi_read_file(p, &text, &n);
    if (st == HSI_OK && !(*out = cJSON_ParseWithLength(text, n)))
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: not JSON", p);
    free(text);
    free(p);
    return st;
}

/* The classes (pipeline.json's order): names and colours. */
typedef struct classes {
    int k;
    char **names;
    uint8_t *rgb; /* (k, 3) */
} classes;

static void classes_free(classes *c)
{
    for (int i = 0; c->names && i < c->k; i++)
        free(c->names[i]);
    free(c->names);
    free(c->rgb);
    memset(c, 0, sizeof *c);
}

static hsi_status classes_get(classes *c, const cJSON *pipeline, const char *dir)
{
    memset(c, 0, sizeof *c);
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(pipeline, "classes"), *e;
    int k = cJSON_GetArraySize(arr);
    if (!cJSON_IsArray(arr) || k < 1)
        return HSI_FAIL(HSI_ERR_FORMAT, "%s/pipeline.json: no 'classes' array", dir);
    c->names = calloc((size_t)k, sizeof *c->names);
    c->rgb = calloc((size_t)k, 3);
    if (!c->names || !c->rgb) {
        classes_free(c);
        return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    }
    c->k = k;
    int i = 0;
    cJSON_ArrayForEach(e, arr)
    {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name"),
                    *col = cJSON_GetObjectItemCaseSensitive(e, "color");
        char buf[32];
        snprintf(buf, sizeof buf, "class %d", i + 1);
        c->names[i] = strdup(cJSON_IsString(nm) ? nm->valuestring : buf);
        if (!c->names[i]) {
            classes_free(c);
            return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        }
        for (int j = 0; j < 3; j++) {
            const cJSON *v = cJSON_GetArrayItem(col, j);
            c->rgb[3 * i + j] = cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 255
                                    ? (uint8_t)v->valuedouble
                                    : (uint8_t)(60 + 40 * j);
        }
        i++;
    }
    return HSI_OK;
}

/* ------------------------------------------------------------ pictures */

static hsi_status curves_png(const char *path, const history *h)
{
    hsi_status st = HSI_OK;
    hsi_plot *p = NULL;
    double *acc = NULL, *vacc = NULL;
    const int n = h->n, W = HSI_REPORT_CURVES_W, H = HSI_REPORT_CURVES_H;
    int has_val = any_finite(h->val_oa, n), has_vloss = any_finite(h->val_loss, n),
        has_acc = any_finite(h->acc, n);
    acc = malloc((size_t)(n ? n : 1) * sizeof *acc);
    vacc = malloc((size_t)(n ? n : 1) * sizeof *vacc);
    if (!acc || !vacc) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (int i = 0; i < n; i++)
        acc[i] = 100 * h->acc[i], vacc[i] = 100 * h->val_oa[i];
    HSI_TRY(hsi_plot_new(&p, W, H));
    int markers = n <= 30;
    hsi_plot_series ls[2] = {
        {.label = "training loss", .x = h->epoch, .y = h->loss, .n = n, .markers = markers},
        {.label = "validation loss",
         .x = h->epoch,
         .y = h->val_loss,
         .n = n,
         .dashed = 1,
         .markers = markers}};
    memcpy(ls[0].rgb, C_TRAIN, 3);
    memcpy(ls[1].rgb, C_VAL, 3);
    hsi_plot_axes ax;
    hsi_plot_axes_init(&ax);
    ax.title = has_vloss ? "Loss per epoch" : "Loss per epoch (no validation pixels)";
    ax.x_label = "epoch";
    ax.y_label = "cross-entropy";
    ax.integer_x = 1;
    if (n == 1) ax.x_min = 0, ax.x_max = 2;
    HSI_TRY(hsi_plot_lines(p, (hsi_plot_rect){0, 0, W / 2.0, H}, &ax, ls, has_vloss ? 2 : 1));
    hsi_plot_series as[2] = {
        {.label = "training accuracy", .x = h->epoch, .y = acc, .n = n, .markers = markers},
        {.label = "validation OA",
         .x = h->epoch,
         .y = vacc,
         .n = n,
         .dashed = 1,
         .markers = markers}};
    memcpy(as[0].rgb, C_TRAIN, 3);
    memcpy(as[1].rgb, C_VAL, 3);
    ax.title = has_val ? "Accuracy per epoch" : "Accuracy per epoch (no validation pixels)";
    ax.y_label = "accuracy (%)";
    ax.y_min = 0;
    ax.y_max = 100;
    /* training accuracy is not measured on the GPU: then only validation */
    const hsi_plot_series *sa = has_acc ? as : as + 1;
    int na = (has_acc ? 1 : 0) + (has_val ? 1 : 0);
    HSI_TRY(hsi_plot_lines(p, (hsi_plot_rect){W / 2.0, 0, W / 2.0, H}, &ax, sa, na));
    HSI_TRY(hsi_plot_write_png(p, path));
cleanup:
    hsi_plot_free(p);
    free(acc);
    free(vacc);
    return st;
}

static hsi_status confusion_png(const char *path, const cJSON *metrics, const classes *cl)
{
    hsi_status st = HSI_OK;
    hsi_plot *p = NULL;
    double *m = NULL;
    char **rows = NULL;
    const cJSON *cm = cJSON_GetObjectItemCaseSensitive(metrics, "confusion");
    const int K = cJSON_GetArraySize(cm);
    if (!cJSON_IsArray(cm) || K < 1 || K != cl->k)
        return HSI_FAIL(HSI_ERR_FORMAT, "metrics.json: 'confusion' is not a %d x %d matrix", cl->k,
                        cl->k);
    m = malloc((size_t)K * K * sizeof *m);
    rows = calloc((size_t)K, sizeof *rows);
    if (!m || !rows) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (int i = 0; i < K; i++) {
        const cJSON *row = cJSON_GetArrayItem(cm, i);
        if (cJSON_GetArraySize(row) != K) {
            st = HSI_FAIL(HSI_ERR_FORMAT,
                          "metrics.json: confusion row %d has %d entries, expected %d", i,
                          cJSON_GetArraySize(row), K);
            goto cleanup;
        }
        double sum = 0;
        for (int j = 0; j < K; j++) {
            const cJSON *v = cJSON_GetArrayItem(row, j);
            m[(size_t)i * K + j] = cJSON_IsNumber(v) ? v->valuedouble : 0;
            sum += m[(size_t)i * K + j];
        }
        for (int j = 0; j < K; j++)
            m[(size_t)i * K + j] = sum > 0 ? m[(size_t)i * K + j] / sum : NAN;
        if (asprintf(&rows[i], "%s (%.0f)", cl->names[i], sum) < 0) {
            rows[i] = NULL;
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
    }
    HSI_TRY(hsi_plot_new(&p, HSI_REPORT_CONFUSION_W, HSI_REPORT_CONFUSION_H));
    hsi_plot_matrix_spec sp = {.title = "Test confusion matrix, normalised per true class",
                               .row_title = "true class (test pixels)",
                               .col_title = "predicted class",
                               .m = m,
                               .rows = K,
                               .cols = K,
                               .row_labels = (const char *const *)rows,
                               .col_labels = (const char *const *)cl->names,
                               .vmin = 0,
                               .vmax = 1,
                               .scale = 100,
                               .cell_fmt = "%.0f%%",
                               .blank_zero = 1,
                               .tiny_text = "<1%"};
    HSI_TRY(hsi_plot_matrix(
        p, (hsi_plot_rect){0, 0, HSI_REPORT_CONFUSION_W, HSI_REPORT_CONFUSION_H}, &sp));
    HSI_TRY(hsi_plot_write_png(p, path));
cleanup:
    hsi_plot_free(p);
    for (int i = 0; rows && i < K; i++)
        free(rows[i]);
    free(rows);
    free(m);
    return st;
}

static int cmp_by_x(const void *a, const void *b, void *ctx)
{
    const double *x = ctx;
    double u = x[*(const int64_t *)a], v = x[*(const int64_t *)b];
    return u < v ? -1 : u > v;
}

static hsi_status spectra_png(const char *path, const hsi_report_pixels *px, const classes *cl)
{
    hsi_status st = HSI_OK;
    hsi_plot *p = NULL;
    const hsi_view *v = px->cube;
    const hsi_meta *meta = px->meta;
    if (!v || v->ndim != 3 || !v->buf || v->buf->kind == HSI_BUF_DEVICE)
        return HSI_FAIL(HSI_ERR_ARG,
                        "spectra: the cube must be a (bands, lines, samples) view in host memory");
    const int64_t B = v->shape[0], L = v->shape[1], S = v->shape[2];
    const int K = cl->k;
    double *mean = calloc((size_t)(K * B), sizeof *mean), *m2 = calloc((size_t)(K * B), sizeof *m2);
    double *cnt = calloc((size_t)(K * B), sizeof *cnt), *tmp = malloc((size_t)B * sizeof *tmp);
    double *lo = malloc((size_t)(K * B) * sizeof *lo), *hi = malloc((size_t)(K * B) * sizeof *hi);
    double *xs = malloc((size_t)B * sizeof *xs), *ys = malloc((size_t)(K * B) * sizeof *ys);
    int64_t *order = malloc((size_t)B * sizeof *order), *n_px = calloc((size_t)K, sizeof *n_px);
    hsi_plot_series *s = calloc((size_t)K, sizeof *s);
    char **labels = calloc((size_t)K, sizeof *labels);
    if (!mean || !m2 || !cnt || !tmp || !lo || !hi || !xs || !ys || !order || !n_px || !s ||
        !labels) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    /* Welford's running mean and M2 per (class, band) */
    const char *base = (const char *)v->buf->data + v->offset;
    for (int64_t i = 0; i < px->n; i++) {
        int64_t pix = px->pixels[i];
        int k = px->classes[i];
        if (pix < 0 || pix >= L * S || k < 0 || k >= K) {
            st = HSI_FAIL(HSI_ERR_ARG,
                          "spectra: pixel %lld (index %lld, class %d) is outside the %lld x %lld "
                          "cube or the %d classes",
                          (long long)i, (long long)pix, k, (long long)L, (long long)S, K);
            goto cleanup;
        }
        n_px[k]++;
        hsi_load_f64(tmp, base + (pix / S) * v->strides[1] + (pix % S) * v->strides[2],
                     v->strides[0], v->dtype, v->swapped, B);
        for (int64_t b = 0; b < B; b++) {
            double x = tmp[b];
            if (!isfinite(x) || (meta && meta->has_ignore_value && x == meta->ignore_value))
                continue;
            size_t j = (size_t)(k * B + b);
            double d = x - mean[j];
            cnt[j] += 1;
            mean[j] += d / cnt[j];
            m2[j] += d * (x - mean[j]);
        }
    }
    int wl = meta && meta->wavelength && meta->n_bands == B;
    for (int64_t b = 0; b < B; b++) {
        order[b] = b;
        xs[b] = wl ? meta->wavelength[b] : (double)(b + 1);
    }
    if (wl) qsort_r(order, (size_t)B, sizeof *order, cmp_by_x, xs);
    /* the series, in wavelength order; bad bands and empty cells are gaps */
    double *xo = tmp;
    for (int64_t b = 0; b < B; b++)
        xo[b] = xs[order[b]];
    for (int k = 0; k < K; k++) {
        for (int64_t b = 0; b < B; b++) {
            int64_t ob = order[b];
            size_t j = (size_t)(k * B + ob), o = (size_t)(k * B + b);
            int bad = meta && meta->bbl && meta->n_bands == B && !meta->bbl[ob];
            double sd = cnt[j] > 1 ? sqrt(m2[j] / (cnt[j] - 1)) : 0;
            ys[o] = cnt[j] > 0 && !bad ? mean[j] : NAN;
            lo[o] = isfinite(ys[o]) ? ys[o] - sd : NAN;
            hi[o] = isfinite(ys[o]) ? ys[o] + sd : NAN;
        }
        if (asprintf(&labels[k], "%s (%lld px)", cl->names[k], (long long)n_px[k]) < 0) {
            labels[k] = NULL;
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        s[k] = (hsi_plot_series){.label = labels[k],
                                 .x = xo,
                                 .y = ys + (size_t)k * B,
                                 .lo = lo + (size_t)k * B,
                                 .hi = hi + (size_t)k * B,
                                 .n = B,
                                 .band_alpha = K > 6 ? 0.1 : 0.18};
        memcpy(s[k].rgb, cl->rgb + 3 * k, 3);
    }
    HSI_TRY(hsi_plot_new(&p, HSI_REPORT_SPECTRA_W, HSI_REPORT_SPECTRA_H));
    hsi_plot_axes ax;
    hsi_plot_axes_init(&ax);
    ax.title = "Mean ± std spectrum per class (training pixels)";
    char xl[96];
    if (wl)
        snprintf(xl, sizeof xl, "wavelength (%s)",
                 meta->wavelength_nm      ? "nm"
                 : meta->wavelength_units ? meta->wavelength_units
                                          : "units unknown");
    ax.x_label = wl ? xl : "band";
    ax.integer_x = !wl;
    ax.y_label = meta && meta->has_reflectance_scale ? "value as stored (reflectance x scale)"
                                                     : "value as stored";
    ax.legend = HSI_PLOT_LEGEND_RIGHT;
    HSI_TRY(hsi_plot_lines(p, (hsi_plot_rect){0, 0, HSI_REPORT_SPECTRA_W, HSI_REPORT_SPECTRA_H},
                           &ax, s, K));
    HSI_TRY(hsi_plot_write_png(p, path));
cleanup:
    hsi_plot_free(p);
    for (int k = 0; labels && k < K; k++)
        free(labels[k]);
    free(labels);
    free(s);
    free(n_px);
    free(order);
    free(ys);
    free(xs);
    free(hi);
    free(lo);
    free(tmp);
    free(cnt);
    free(m2);
    free(mean);
    return st;
}

hsi_status hsi_report_profile_png(const char *path, const hsi_train_profile *pr)
{
    hsi_status st = HSI_OK;
    hsi_plot *p = NULL;
    const char *labels[] = {"read",     "split",     "preprocess", "loader wait", "forward",
                            "backward", "optimizer", "validate",   "predict",     "write"};
    double v[] = {pr->read,     pr->split,     pr->preprocess, pr->loader_wait, pr->forward,
                  pr->backward, pr->optimizer, pr->validate,   pr->predict,     pr->write};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        if (!(v[i] >= 0) || !isfinite(v[i])) v[i] = 0;
    char title[128];
    snprintf(title, sizeof title, "Seconds per stage (total %.3f s)", pr->total);
    static const uint8_t bar[3] = {70, 130, 180};
    HSI_TRY(hsi_plot_new(&p, HSI_REPORT_PROFILE_W, HSI_REPORT_PROFILE_H));
    HSI_TRY(hsi_plot_hbars(p, (hsi_plot_rect){0, 0, HSI_REPORT_PROFILE_W, HSI_REPORT_PROFILE_H},
                           title, "seconds", labels, v, (int)(sizeof v / sizeof *v), "%.3f s",
                           bar));
    HSI_TRY(hsi_plot_write_png(p, path));
cleanup:
    hsi_plot_free(p);
    return st;
}

/* ------------------------------------------------------------ the page */

static void esc(FILE *fp, const char *s)
{
    for (; s && *s; s++)
        switch (*s) {
        case '&':
            fputs("&amp;", fp);
            break;
        case '<':
            fputs("&lt;", fp);
            break;
        case '>':
            fputs("&gt;", fp);
            break;
        case '"':
            fputs("&quot;", fp);
            break;
        case '\'':
            fputs("&#39;", fp);
            break;
        default:
            fputc(*s, fp);
        }
}

/* The page's number format (report.h): integers as integers, else %.4g. */
static void fmt_num(char *b, size_t n, double v)
{
    if (isfinite(v) && v == floor(v) && fabs(v) < 1e15)
        snprintf(b, n, "%.0f", v);
    else
        snprintf(b, n, "%.4g", v);
}

/* An element holding metrics.json's number at path (tag: td, b, span;
 * cls: its class attribute). */
static void num_cls(FILE *fp, const char *tag, const char *cls, const char *path, const cJSON *v)
{
    char b[64];
    fprintf(fp, "<%s class=\"%s\" data-m=\"", tag, cls);
    esc(fp, path);
    fputs("\">", fp);
    if (cJSON_IsNumber(v)) {
        fmt_num(b, sizeof b, v->valuedouble);
        fputs(b, fp);
    } else {
        fputs("—", fp); /* null: not measured */
    }
    fprintf(fp, "</%s>", tag);
}

static void num(FILE *fp, const char *tag, const char *path, const cJSON *v)
{
    num_cls(fp, tag, "n", path, v);
}

static void base64(FILE *fp, const unsigned char *d, size_t n)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)d[i] << 16 | (i + 1 < n ? (unsigned)d[i + 1] << 8 : 0) |
                     (i + 2 < n ? d[i + 2] : 0);
        fputc(t[v >> 18 & 63], fp);
        fputc(t[v >> 12 & 63], fp);
        fputc(i + 1 < n ? t[v >> 6 & 63] : '=', fp);
        fputc(i + 2 < n ? t[v & 63] : '=', fp);
    }
}

static const char *str_of(const cJSON *o, const char *key, const char *dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

/* A JSON value as table text (strings escaped, numbers and booleans as
 * JSON writes them, objects/arrays compact). */
static void value_text(FILE *fp, const cJSON *v)
{
    if (cJSON_IsString(v)) {
        esc(fp, v->valuestring);
        return;
    }
    char *s = cJSON_PrintUnformatted(v);
    esc(fp, s ? s : "?");
    free(s);
}

/* Every number under v (a key of metrics.json the page has no place for),
 * one row each, path-tagged. */
static void other_figures(FILE *fp, const cJSON *v, const char *path)
{
    if (cJSON_IsNumber(v) || cJSON_IsNull(v)) {
        fputs("<tr><th>", fp);
        esc(fp, path);
        fputs("</th>", fp);
        num(fp, "td", path, v);
        fputs("</tr>\n", fp);
    } else if (cJSON_IsString(v) || cJSON_IsBool(v)) {
        fputs("<tr><th>", fp);
        esc(fp, path);
        fputs("</th><td>", fp);
        value_text(fp, v);
        fputs("</td></tr>\n", fp);
    } else {
        const cJSON *e;
        int i = 0;
        cJSON_ArrayForEach(e, v)
        {
            char sub[512];
            if (cJSON_IsArray(v))
                snprintf(sub, sizeof sub, "%s.%d", path, i);
            else
                snprintf(sub, sizeof sub, "%s.%s", path, e->string);
            other_figures(fp, e, sub);
            i++;
        }
    }
}

static void protocol(FILE *fp, const cJSON *metrics, const cJSON *pipeline)
{
    const cJSON *leaky = cJSON_GetObjectItemCaseSensitive(metrics, "leaky_protocol");
    const char *split = str_of(metrics, "split", "?"), *fit = str_of(metrics, "fit_on", "?");
    const cJSON *pj = cJSON_GetObjectItemCaseSensitive(pipeline, "patch");
    int patch = cJSON_IsNumber(pj) ? pj->valueint : 1;
    int is_leaky = cJSON_IsTrue(leaky);
    fprintf(fp, "<p class=\"protocol %s\"><b>Protocol: %s.</b> ", is_leaky ? "leaky" : "clean",
            is_leaky ? "leaky" : "not leaky");
    if (is_leaky)
        fputs("Normalisation and PCA were fitted on every pixel of the scene, test pixels included "
              "(<code>--fit-on all</code>, the usual literature protocol): the test figures are "
              "optimistic. ",
              fp);
    else {
        fputs("Normalisation and PCA were fitted on the training pixels only (fit on: ", fp);
        esc(fp, fit);
        fputs("). ", fp);
    }
    if (!strcmp(split, "random") && patch > 1)
        fprintf(
            fp,
            "Random split: test pixels neighbour training pixels, so the %d &times; %d patches "
            "around test pixels overlap training pixels (<code>--split disjoint</code> keeps them "
            "apart with a guard band).",
            patch, patch);
    else if (!strcmp(split, "disjoint"))
        fprintf(fp,
                "Spatially disjoint split: blocks with a guard band, so that no %d &times; %d test "
                "patch shares a pixel with a training patch.",
                patch, patch);
    else if (!strcmp(split, "explicit"))
        fputs("Explicit train and test maps: how far apart they are is up to them.", fp);
    else {
        fputs("Split: ", fp);
        esc(fp, split);
        fputs(".", fp);
    }
    fputs("</p>\n", fp);
}

typedef struct picture {
    const char *file, *caption;
    hsi_status st;
    char why[512];
} picture;

static void embed(FILE *fp, const char *dir, const picture *pic, int w, int h)
{
    fputs("<figure>", fp);
    char *path = hsi_run_path(dir, pic->file), *data = NULL;
    size_t n = 0;
    if (pic->st == HSI_OK && path && hsi_read_file(path, &data, &n) == HSI_OK) {
        fprintf(fp, "<img width=\"%d\" height=\"%d\" alt=\"%s\" src=\"data:image/png;base64,", w, h,
                pic->file);
        base64(fp, (const unsigned char *)data, n);
        fputs("\">", fp);
    } else {
        fprintf(fp, "<p class=\"missing\">%s was not drawn: ", pic->file);
        esc(fp, pic->st == HSI_OK ? "it cannot be read back" : pic->why);
        fputs("</p>", fp);
    }
    fputs("<figcaption>", fp);
    esc(fp, pic->caption);
    fprintf(fp, " (<code>%s</code>)</figcaption></figure>\n", pic->file);
    free(data);
    free(path);
}

static const char css[] =
    "body{font-family:'DejaVu Sans',Verdana,sans-serif;margin:2em auto;max-width:1250px;padding:0 "
    "1em;"
    "color:#222;line-height:1.4}h1{margin-bottom:0}h2{border-bottom:1px solid "
    "#ccc;margin-top:1.6em}"
    "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:.2em .6em;"
    "text-align:left}td.n,td.r{text-align:right;font-variant-numeric:tabular-nums}th{background:#"
    "f4f6f8}"
    ".headline{font-size:1.25em;margin:.8em 0}.headline b{font-size:1.2em}"
    ".protocol{padding:.6em "
    "1em;border-radius:4px}.clean{background:#eaf6ea}.leaky{background:#fdecea}"
    ".sw{display:inline-block;width:.9em;height:.9em;border:1px solid #888;margin-right:.4em;"
    "vertical-align:-.1em}figure{margin:1em 0}img{max-width:100%;height:auto;border:1px solid #ddd}"
    "figcaption{color:#555}.missing{color:#a00}.dir{color:#555;font-family:monospace}"
    "table.cm td{padding:.15em .4em}td.diag{background:#e4eefa;font-weight:bold}\n";

static void class_table(FILE *fp, const cJSON *metrics, const classes *cl)
{
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(metrics, "classes"), *c, *e;
    const cJSON *first = cJSON_GetArrayItem(arr, 0);
    if (!first) return;
    fputs("<table class=\"classes\"><tr>", fp);
    cJSON_ArrayForEach(e, first)
    {
        fputs("<th>", fp);
        esc(fp, e->string);
        fputs("</th>", fp);
    }
    fputs("</tr>\n", fp);
    int i = 0;
    cJSON_ArrayForEach(c, arr)
    {
        fputs("<tr>", fp);
        cJSON_ArrayForEach(e, c)
        {
            char path[256];
            snprintf(path, sizeof path, "classes.%d.%s", i, e->string);
            if (cJSON_IsNumber(e) || cJSON_IsNull(e)) {
                num(fp, "td", path, e);
            } else {
                fputs("<td>", fp);
                if (!strcmp(e->string, "name") && i < cl->k)
                    fprintf(fp, "<span class=\"sw\" style=\"background:rgb(%d,%d,%d)\"></span>",
                            cl->rgb[3 * i], cl->rgb[3 * i + 1], cl->rgb[3 * i + 2]);
                value_text(fp, e);
                fputs("</td>", fp);
            }
        }
        fputs("</tr>\n", fp);
        i++;
    }
    fputs("</table>\n", fp);
}

static void confusion_table(FILE *fp, const cJSON *metrics, const classes *cl)
{
    const cJSON *cm = cJSON_GetObjectItemCaseSensitive(metrics, "confusion"), *row, *v;
    if (!cJSON_IsArray(cm)) return;
    int K = cJSON_GetArraySize(cm);
    fputs("<table class=\"cm\"><tr><th>true \\ predicted</th>", fp);
    for (int j = 0; j < K; j++) {
        fputs("<th title=\"", fp);
        esc(fp, j < cl->k ? cl->names[j] : "");
        fprintf(fp, "\">%d</th>", j + 1);
    }
    fputs("</tr>\n", fp);
    int i = 0;
    cJSON_ArrayForEach(row, cm)
    {
        fprintf(fp, "<tr><th>%d ", i + 1);
        esc(fp, i < cl->k ? cl->names[i] : "");
        fputs("</th>", fp);
        int j = 0;
        cJSON_ArrayForEach(v, row)
        {
            char path[64];
            snprintf(path, sizeof path, "confusion.%d.%d", i, j);
            num_cls(fp, "td", i == j ? "n diag" : "n", path, v);
            j++;
        }
        fputs("</tr>\n", fp);
        i++;
    }
    fputs("</table>\n", fp);
}

static void config_table(FILE *fp, const cJSON *pipeline)
{
    const cJSON *e;
    fputs("<table class=\"config\">\n", fp);
    cJSON_ArrayForEach(e, pipeline)
    {
        if (cJSON_IsObject(e) || cJSON_IsArray(e)) continue; /* classes above, training below */
        fputs("<tr><th>", fp);
        esc(fp, e->string);
        fputs("</th><td>", fp);
        value_text(fp, e);
        fputs("</td></tr>\n", fp);
    }
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(pipeline, "training");
    cJSON_ArrayForEach(e, tr)
    {
        fputs("<tr><th>training.", fp);
        esc(fp, e->string);
        fputs("</th><td>", fp);
        value_text(fp, e);
        fputs("</td></tr>\n", fp);
    }
    fputs("</table>\n", fp);
}

static void timings_table(FILE *fp, const cJSON *metrics)
{
    const cJSON *tj = cJSON_GetObjectItemCaseSensitive(metrics, "timings_s"), *e;
    const cJSON *tot = cJSON_GetObjectItemCaseSensitive(tj, "total");
    double total = cJSON_IsNumber(tot) ? tot->valuedouble : 0;
    fputs(
        "<table class=\"timings\"><tr><th>stage</th><th>seconds</th><th>share of total</th></tr>\n",
        fp);
    cJSON_ArrayForEach(e, tj)
    {
        char path[128];
        snprintf(path, sizeof path, "timings_s.%s", e->string);
        fputs("<tr><th>", fp);
        esc(fp, e->string);
        fputs("</th>", fp);
        num(fp, "td", path, e);
        if (cJSON_IsNumber(e) && total > 0 && strcmp(e->string, "total"))
            fprintf(fp, "<td class=\"r\">%.1f %%</td>", 100 * e->valuedouble / total);
        else
            fputs("<td></td>", fp);
        fputs("</tr>\n", fp);
    }
    const cJSON *sps = cJSON_GetObjectItemCaseSensitive(metrics, "train_samples_per_s");
    if (sps) {
        fputs("<tr><th>training samples per second</th>", fp);
        num(fp, "td", "train_samples_per_s", sps);
        fputs("<td></td></tr>\n", fp);
    }
    fputs("</table>\n"
          "<p>train holds loader wait, forward, backward and optimizer; validate is outside "
          "it.</p>\n",
          fp);
}

static const char *const shown_keys[] = {"n",
                                         "oa",
                                         "aa",
                                         "kappa",
                                         "classes",
                                         "confusion",
                                         "split",
                                         "fit_on",
                                         "leaky_protocol",
                                         "split_counts",
                                         "best_epoch",
                                         "best_val_oa",
                                         "epoch_selection",
                                         "epochs_run",
                                         "timings_s",
                                         "train_samples_per_s",
                                         NULL};

static hsi_status write_page(const char *dir, const char *name, const cJSON *metrics,
                             const cJSON *pipeline, const classes *cl, const picture *pics)
{
    char *text = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&text, &len);
    if (!fp) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>hsi run: ",
          fp);
    esc(fp, name);
    fprintf(
        fp,
        "</title>\n<style>%s</style></head><body>\n<h1>hsi training run</h1>\n<p class=\"dir\">",
        css);
    esc(fp, name);
    fputs("</p>\n", fp);
    const cJSON *oa = cJSON_GetObjectItemCaseSensitive(metrics, "oa"),
                *aa = cJSON_GetObjectItemCaseSensitive(metrics, "aa"),
                *kappa = cJSON_GetObjectItemCaseSensitive(metrics, "kappa");
    fputs("<p class=\"headline\">OA ", fp);
    num(fp, "b", "oa", oa);
    if (cJSON_IsNumber(oa)) fprintf(fp, " (%.2f %%)", 100 * oa->valuedouble);
    fputs(" &nbsp; AA ", fp);
    num(fp, "b", "aa", aa);
    if (cJSON_IsNumber(aa)) fprintf(fp, " (%.2f %%)", 100 * aa->valuedouble);
    fputs(" &nbsp; kappa ", fp);
    num(fp, "b", "kappa", kappa);
    fputs(" &nbsp; on ", fp);
    num(fp, "span", "n", cJSON_GetObjectItemCaseSensitive(metrics, "n"));
    fputs(" test pixels</p>\n", fp);
    protocol(fp, metrics, pipeline);

    fputs("<h2>Split and epochs</h2>\n<table>\n", fp);
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(metrics, "split_counts"), *e;
    fputs("<tr><th>split</th><td>", fp);
    esc(fp, str_of(metrics, "split", "?"));
    fputs("</td></tr>\n", fp);
    cJSON_ArrayForEach(e, sc)
    {
        char path[128];
        snprintf(path, sizeof path, "split_counts.%s", e->string);
        fputs("<tr><th>", fp);
        esc(fp, e->string);
        fputs(" pixels</th>", fp);
        num(fp, "td", path, e);
        fputs("</tr>\n", fp);
    }
    static const char *const ep[] = {"epochs_run", "best_epoch", "best_val_oa"};
    for (int i = 0; i < 3; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(metrics, ep[i]);
        if (!v) continue;
        fprintf(fp, "<tr><th>%s</th>", ep[i]);
        num(fp, "td", ep[i], v);
        fputs("</tr>\n", fp);
    }
    fputs("<tr><th>epoch kept</th><td>", fp);
    esc(fp, str_of(metrics, "epoch_selection", "?"));
    fputs("</td></tr>\n</table>\n", fp);

    fputs("<h2>Per class (test pixels)</h2>\n", fp);
    class_table(fp, metrics, cl);

    fputs("<h2>Pictures</h2>\n", fp);
    embed(fp, dir, &pics[0], HSI_REPORT_CURVES_W, HSI_REPORT_CURVES_H);
    embed(fp, dir, &pics[1], HSI_REPORT_CONFUSION_W, HSI_REPORT_CONFUSION_H);
    if (pics[2].file) embed(fp, dir, &pics[2], HSI_REPORT_SPECTRA_W, HSI_REPORT_SPECTRA_H);
    fputs("<p>The map with its legend is <code>map.png</code> beside this page.</p>\n", fp);

    fputs("<h2>Confusion matrix (test pixels, counts)</h2>\n", fp);
    confusion_table(fp, metrics, cl);

    fputs("<h2>Timings per stage</h2>\n", fp);
    timings_table(fp, metrics);

    /* anything metrics.json holds that the sections above do not show */
    int header = 0;
    cJSON_ArrayForEach(e, metrics)
    {
        int known = 0;
        for (int i = 0; shown_keys[i]; i++)
            known |= !strcmp(e->string, shown_keys[i]);
        if (known) continue;
        if (!header) fputs("<h2>Other figures</h2>\n<table>\n", fp);
        header = 1;
        other_figures(fp, e, e->string);
    }
    if (header) fputs("</table>\n", fp);

    fputs("<h2>Configuration</h2>\n", fp);
    config_table(fp, pipeline);
    fputs("<p>Files: <code>metrics.json</code>, <code>pipeline.json</code>, "
          "<code>history.csv</code>, "
          "<code>split.json</code>, <code>train.log</code> (see docs/run-directory.md).</p>\n"
          "</body></html>\n",
          fp);
    if (fclose(fp) != 0 || !text) {
        free(text);
        return HSI_FAIL(HSI_ERR_NOMEM, "report.html: out of memory");
    }
    char *path = hsi_run_path(dir, "report.html");
    hsi_status st = path ? hsi_write_file_atomic(path, text, len) : HSI_ERR_NOMEM;
    free(path);
    free(text);
    return st;
}

/* Draws one picture; a failure is kept in pic (and the first in *first). */
static void keep(picture *pic, hsi_status st, hsi_status *first, char *first_why, size_t n)
{
    pic->st = st;
    if (st == HSI_OK) return;
    snprintf(pic->why, sizeof pic->why, "%s", hsi_last_error());
    if (*first == HSI_OK) {
        *first = st;
        snprintf(first_why, n, "%s", pic->why);
    }
}

hsi_status hsi_report_write(const char *dir, const char *name, const hsi_report_pixels *px)
{
    hsi_status st = HSI_OK, first = HSI_OK;
    char first_why[512] = "";
    cJSON *metrics = NULL, *pipeline = NULL;
    char *hist_text = NULL, *p = NULL;
    size_t hn = 0;
    history h = {0};
    classes cl = {0};
    picture pics[3] = {{"curves.png", "Loss and accuracy per epoch (history.csv)", HSI_OK, ""},
                       {"confusion.png",
                        "Test confusion matrix normalised per true class; rows show the "
                        "test pixel count",
                        HSI_OK, ""},
                       {"spectra.png",
                        "Mean ± one standard deviation of the training pixels' spectra "
                        "per class, values as stored in the cube",
                        HSI_OK, ""}};
    HSI_TRY(load_json(&metrics, dir, "metrics.json"));
    HSI_TRY(load_json(&pipeline, dir, "pipeline.json"));
    HSI_TRY(classes_get(&cl, pipeline, dir));

    if (!(p = hsi_run_path(dir, "history.csv"))) HSI_TRY(HSI_ERR_NOMEM);
    hsi_status hs = hsi_read_file(p, &hist_text, &hn);
    if (hs == HSI_OK) hs = history_parse(&h, hist_text, p);
    free(p);
    p = NULL;
    if (hs == HSI_OK) {
        if (!(p = hsi_run_path(dir, pics[0].file))) HSI_TRY(HSI_ERR_NOMEM);
        hs = curves_png(p, &h);
        free(p);
        p = NULL;
    }
    keep(&pics[0], hs, &first, first_why, sizeof first_why);

    if (!(p = hsi_run_path(dir, pics[1].file))) HSI_TRY(HSI_ERR_NOMEM);
    keep(&pics[1], confusion_png(p, metrics, &cl), &first, first_why, sizeof first_why);
    free(p);
    p = NULL;

    if (px) {
        if (!(p = hsi_run_path(dir, pics[2].file))) HSI_TRY(HSI_ERR_NOMEM);
        keep(&pics[2], spectra_png(p, px, &cl), &first, first_why, sizeof first_why);
        free(p);
        p = NULL;
    } else {
        pics[2].file = NULL;
    }
    HSI_TRY(write_page(dir, name ? name : dir, metrics, pipeline, &cl, pics));
    if (first != HSI_OK) st = HSI_FAIL(first, "%s", first_why);
cleanup:
    free(p);
    classes_free(&cl);
    history_free(&h);
    free(hist_text);
    cJSON_Delete(pipeline);
    cJSON_Delete(metrics);
    return st;
}

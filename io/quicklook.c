/* quicklook.c — false-colour and label-map PNGs: band loading with the
 * strided typed loads of core, percent stretch, nearest-neighbour zoom. A
 * map's legend is drawn with cairo through plot.h (DejaVu Sans, UTF-8 names)
 * beside the map's exact palette pixels; pictures without one go out through
 * gdal_io. Not a plotting library. */
#define _GNU_SOURCE
#include "quicklook.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gdal_io.h"
#include "plot.h"

void hsi_quicklook_palette(int i, uint8_t rgb[3])
{
    static const uint8_t pal[20][3] = {
        {31, 119, 180},  {255, 127, 14},  {44, 160, 44},   {214, 39, 40},   {148, 103, 189},
        {140, 86, 75},   {227, 119, 194}, {127, 127, 127}, {188, 189, 34},  {23, 190, 207},
        {174, 199, 232}, {255, 187, 120}, {152, 223, 138}, {255, 152, 150}, {197, 176, 213},
        {196, 156, 148}, {247, 182, 210}, {199, 199, 199}, {219, 219, 141}, {158, 218, 229}};
    if (i <= 0) {
        rgb[0] = rgb[1] = rgb[2] = 0;
        return;
    }
    memcpy(rgb, pal[(i - 1) % 20], 3);
}

static void class_color(int c, int n_classes, const uint8_t *rgb, uint8_t out[3])
{
    if (rgb && c < n_classes) {
        memcpy(out, rgb + 3 * c, 3);
        /* an all-black entry for a real class is a missing colour */
        if (c == 0 || out[0] || out[1] || out[2]) return;
    }
    hsi_quicklook_palette(c, out);
}

/* The picture's size for a requested width (0: the cube's own), the
 * aspect kept; at least one pixel each way. */
static hsi_status sized(const char *path, int64_t L, int64_t S, int64_t width, int64_t *L2,
                        int64_t *S2)
{
    *L2 = L, *S2 = S;
    if (width <= 0 || width == S) return HSI_OK;
    if (width > 65535 || (double)width * (double)L / (double)S > 65535)
        return HSI_FAIL(HSI_ERR_ARG,
                        "%s: a %lld-pixel-wide picture of %lld x %lld pixels is beyond "
                        "PNG's 65535 pixels a side",
                        path, (long long)width, (long long)S, (long long)L);
    *S2 = width;
    *L2 = (int64_t)llround((double)L * (double)width / (double)S);
    if (*L2 < 1) *L2 = 1;
    return HSI_OK;
}

/* Nearest-neighbour index of output pixel i of n2 in an axis of n. */
static int64_t nn_src(int64_t i, int64_t n, int64_t n2)
{
    int64_t k = (int64_t)(((double)i + 0.5) * (double)n / (double)n2);
    return k < n ? k : n - 1;
}

hsi_status hsi_quicklook_labels_png_legend(const char *path, const hsi_view *map, int n_classes,
                                           const char *const *names, const uint8_t *rgb, int legend)
{
    return hsi_quicklook_labels_png_sized(path, map, n_classes, names, rgb, legend, 0);
}

/* The legend's text for class c: its name (at most 48 characters, UTF-8
 * cut between characters, "…" when cut), "unlabelled" for 0 without one. */
static void legend_name(char *t, size_t n, int c, int n_classes, const char *const *names)
{
    const char *nm = names && c < n_classes && names[c] ? names[c] : c ? "" : "unlabelled";
    size_t k = 0;
    int chars = 0;
    while (nm[k]) {
        size_t len = 1;
        while (nm[k + len] && ((unsigned char)nm[k + len] & 0xc0) == 0x80)
            len++;
        if (chars == 48 || k + len + 4 > n) {
            memcpy(t + k, "\xe2\x80\xa6", 3);
            k += 3;
            break;
        }
        memcpy(t + k, nm + k, len);
        k += len;
        chars++;
    }
    t[k] = 0;
}

/* The legend's layout: text size, the sizes below in pixels. */
typedef struct legend_box {
    double fs;                 /* text size */
    int pad, box, gap, row_h;  /* margin, swatch side, space, row pitch */
    int id_w, name_w, count_w; /* column widths */
    int col_w, n_rows, n_cols; /* one column of entries; entries per column; columns */
    int w, h;                  /* the whole panel */
} legend_box;

/* Lays out the legend of the classes with counts[c] > 0 (n_show of them)
 * for a map of L lines: the text grows with the map (13 px up to 416 lines,
 * then L/32, at most 40), and the entries go into columns so that the panel
 * is not much taller than the map. */
static hsi_status legend_layout(legend_box *lb, int64_t L, const int64_t *counts, int nc,
                                int n_classes, const char *const *names, int n_show)
{
    hsi_status st = HSI_OK;
    hsi_plot *m = NULL;
    HSI_TRY(hsi_plot_new(&m, 16, 16)); /* only measures text */
    double fs = (double)L / 32.0;
    lb->fs = fs < 13 ? 13 : fs > 40 ? 40 : round(fs);
    lb->pad = (int)lround(lb->fs * 0.8);
    lb->box = (int)lround(lb->fs * 1.1);
    lb->gap = (int)lround(lb->fs * 0.5);
    lb->row_h = (int)lround(lb->fs * 1.6);
    double id_w = hsi_plot_text_width(m, lb->fs, 1, "id");
    double name_w = 0; /* no name column when no class has a name */
    double count_w = hsi_plot_text_width(m, lb->fs, 1, "pixels");
    for (int c = 0; c < nc; c++) {
        if (!counts[c]) continue;
        char t[256];
        snprintf(t, sizeof t, "%d", c);
        double w = hsi_plot_text_width(m, lb->fs, 0, t);
        if (w > id_w) id_w = w;
        legend_name(t, sizeof t, c, n_classes, names);
        w = hsi_plot_text_width(m, lb->fs, 0, t);
        if (w > name_w) name_w = w;
        snprintf(t, sizeof t, "%lld", (long long)counts[c]);
        w = hsi_plot_text_width(m, lb->fs, 0, t);
        if (w > count_w) count_w = w;
    }
    if (name_w > 0) {
        double hw = hsi_plot_text_width(m, lb->fs, 1, "class");
        name_w = name_w > hw ? name_w : hw;
    }
    lb->id_w = (int)ceil(id_w);
    lb->name_w = (int)ceil(name_w);
    lb->count_w = (int)ceil(count_w);
    lb->col_w = lb->box + lb->gap + lb->id_w + (lb->name_w ? lb->gap + lb->name_w : 0) +
                2 * lb->gap + lb->count_w;
    /* a header row, then the entries */
    int64_t avail = (L > 400 ? L : 400) - 2 * lb->pad - lb->row_h;
    int per_col = (int)(avail / lb->row_h) > 1 ? (int)(avail / lb->row_h) : 1;
    lb->n_cols = (n_show + per_col - 1) / per_col;
    if (lb->n_cols < 1) lb->n_cols = 1;
    lb->n_rows = (n_show + lb->n_cols - 1) / lb->n_cols;
    lb->w = lb->pad + lb->n_cols * lb->col_w + (lb->n_cols - 1) * 2 * lb->pad + lb->pad;
    lb->h = lb->pad + (lb->n_rows + 1) * lb->row_h - (lb->row_h - lb->box) + lb->pad;
cleanup:
    hsi_plot_free(m);
    return st;
}

/* Draws the legend laid out in lb into p, its left edge at x0. */
static void legend_draw(hsi_plot *p, const legend_box *lb, int x0, const int64_t *counts, int nc,
                        int n_classes, const char *const *names, const uint8_t *rgb)
{
    const uint8_t frame[3] = {110, 110, 110};
    /* baseline for text centred on a swatch of a row starting at y */
    double base = lb->box / 2.0 + 0.36 * lb->fs;
    for (int k = 0; k < lb->n_cols; k++) {
        int x = x0 + lb->pad + k * (lb->col_w + 2 * lb->pad), y = lb->pad;
        int xi = x + lb->box + lb->gap, xn = xi + lb->id_w + lb->gap;
        int xc = lb->name_w ? xn + lb->name_w + 2 * lb->gap + lb->count_w
                            : xi + lb->id_w + 2 * lb->gap + lb->count_w;
        hsi_plot_text(p, xi + lb->id_w - hsi_plot_text_width(p, lb->fs, 1, "id"), y + base, lb->fs,
                      1, 60, "id");
        if (lb->name_w) hsi_plot_text(p, xn, y + base, lb->fs, 1, 60, "class");
        hsi_plot_text(p, xc - hsi_plot_text_width(p, lb->fs, 1, "pixels"), y + base, lb->fs, 1, 60,
                      "pixels");
    }
    int i = 0;
    for (int c = 0; c < nc; c++) {
        if (!counts[c]) continue;
        int k = i / lb->n_rows, r = i % lb->n_rows;
        i++;
        int x = x0 + lb->pad + k * (lb->col_w + 2 * lb->pad), y = lb->pad + (r + 1) * lb->row_h;
        int xi = x + lb->box + lb->gap, xn = xi + lb->id_w + lb->gap;
        int xc = lb->name_w ? xn + lb->name_w + 2 * lb->gap + lb->count_w
                            : xi + lb->id_w + 2 * lb->gap + lb->count_w;
        uint8_t col[3];
        class_color(c, n_classes, rgb, col);
        hsi_plot_fill_rect(p, x - 1, y - 1, lb->box + 2, lb->box + 2, frame);
        hsi_plot_fill_rect(p, x, y, lb->box, lb->box, col);
        char t[256];
        snprintf(t, sizeof t, "%d", c);
        hsi_plot_text(p, xi + lb->id_w - hsi_plot_text_width(p, lb->fs, 0, t), y + base, lb->fs, 0,
                      0, t);
        legend_name(t, sizeof t, c, n_classes, names);
        hsi_plot_text(p, xn, y + base, lb->fs, 0, 0, t);
        snprintf(t, sizeof t, "%lld", (long long)counts[c]);
        hsi_plot_text(p, xc - hsi_plot_text_width(p, lb->fs, 0, t), y + base, lb->fs, 0, 90, t);
    }
}

hsi_status hsi_quicklook_labels_png_sized(const char *path, const hsi_view *map, int n_classes,
                                          const char *const *names, const uint8_t *rgb, int legend,
                                          int64_t width)
{
    hsi_status st = HSI_OK;
    int32_t *ids = NULL;
    int64_t *counts = NULL;
    uint8_t *img = NULL, *lut = NULL;
    hsi_plot *p = NULL;
    if (map->ndim != 2 || hsi_dtype_is_complex(map->dtype))
        return HSI_FAIL(HSI_ERR_ARG, "%s: a label map is a real (lines, samples) view", path);
    int64_t L = map->shape[0], S = map->shape[1], n = 0;
    if (!hsi_mul_ok(L, S, &n) || L < 1 || S < 1)
        return HSI_FAIL(HSI_ERR_ARG, "%s: label map of %lld x %lld", path, (long long)L,
                        (long long)S);
    ids = malloc((size_t)n * sizeof *ids);
    if (!ids) goto nomem;
    int32_t vmax = 0;
    for (int64_t y = 0; y < L; y++) {
        int64_t idx[2] = {y, 0};
        double row[1];
        for (int64_t x = 0; x < S; x++) {
            idx[1] = x;
            row[0] = hsi_view_get_f64(map, idx);
            if (!(row[0] >= 0 && row[0] <= 65535) || row[0] != floor(row[0])) {
                st = HSI_FAIL(HSI_ERR_ARG,
                              "%s: label %g at line %lld sample %lld is not an id in 0..65535",
                              path, row[0], (long long)y, (long long)x);
                goto cleanup;
            }
            ids[y * S + x] = (int32_t)row[0];
            if (ids[y * S + x] > vmax) vmax = ids[y * S + x];
        }
    }
    int nc = vmax + 1 > n_classes ? vmax + 1 : n_classes, n_show = 0;
    counts = calloc((size_t)nc, sizeof *counts);
    lut = malloc((size_t)nc * 3);
    if (!counts || !lut) goto nomem;
    for (int64_t i = 0; i < n; i++)
        counts[ids[i]]++;
    for (int c = 0; c < nc; c++) {
        class_color(c, n_classes, rgb, lut + 3 * c);
        n_show += counts[c] > 0;
    }
    /* the map at the asked size (the counts stay the file's) */
    int64_t L0 = L, S0 = S;
    HSI_TRY(sized(path, L0, S0, width, &L, &S));

    if (!legend) {
        if (!(img = malloc((size_t)(L * S) * 3))) goto nomem;
        for (int64_t y = 0; y < L; y++)
            for (int64_t x = 0; x < S; x++)
                memcpy(img + 3 * (y * S + x),
                       lut + 3 * ids[nn_src(y, L0, L) * S0 + nn_src(x, S0, S)], 3);
        st = hsi_gdal_write_png(path, img, L, S, 3);
        goto cleanup;
    }

    /* map + legend: one cairo canvas, white; the map's pixels copied in
     * exactly, the legend drawn right of it */
    legend_box lb;
    HSI_TRY(legend_layout(&lb, L, counts, nc, n_classes, names, n_show));
    int64_t W = S + lb.w, H = L > lb.h ? L : lb.h;
    if (W > 32767 || H > 32767) {
        st = HSI_FAIL(HSI_ERR_ARG,
                      "%s: a %lld x %lld map with its legend is %lld x %lld pixels, beyond the "
                      "32767 a side a legend can be drawn on (leave the legend out, or ask for a "
                      "narrower picture)",
                      path, (long long)S, (long long)L, (long long)W, (long long)H);
        goto cleanup;
    }
    HSI_TRY(hsi_plot_new_raster(&p, (int)W, (int)H));
    if (!(img = malloc((size_t)S * 3))) goto nomem;
    for (int64_t y = 0; y < L; y++) {
        const int32_t *src = ids + nn_src(y, L0, L) * S0;
        for (int64_t x = 0; x < S; x++)
            memcpy(img + 3 * x, lut + 3 * src[nn_src(x, S0, S)], 3);
        hsi_plot_put_rgb(p, 0, (int)y, img, (int)S, 1);
    }
    legend_draw(p, &lb, (int)S, counts, nc, n_classes, names, rgb);
    st = hsi_plot_write_png(p, path);
    goto cleanup;
nomem:
    st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory (quicklook of %s)", path);
cleanup:
    hsi_plot_free(p);
    free(ids);
    free(counts);
    free(lut);
    free(img);
    return st;
}

hsi_status hsi_quicklook_labels_png(const char *path, const hsi_view *map, int n_classes,
                                    const char *const *names, const uint8_t *rgb)
{
    return hsi_quicklook_labels_png_legend(path, map, n_classes, names, rgb, 1);
}

hsi_status hsi_quicklook_labels(const char *path, const hsi_labels *l, int legend)
{
    return hsi_quicklook_labels_sized(path, l, legend, 0);
}

hsi_status hsi_quicklook_labels_sized(const char *path, const hsi_labels *l, int legend,
                                      int64_t width)
{
    return hsi_quicklook_labels_png_sized(path, &l->map, l->n_classes,
                                          (const char *const *)l->names, l->colors, legend, width);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Percentile bounds over usable values (sampled to at most ~1M). 0 when the
 * band has none. */
static int stretch_bounds(const float *p, const uint8_t *ok, int64_t n, double pct, float *lo,
                          float *hi)
{
    int64_t step = n > (1 << 20) ? n / (1 << 20) : 1, k = 0;
    float *s = malloc((size_t)(n / step + 1) * sizeof *s);
    if (!s) return 0;
    for (int64_t i = 0; i < n; i += step)
        if (ok[i]) s[k++] = p[i];
    if (k == 0) {
        free(s);
        return 0;
    }
    qsort(s, (size_t)k, sizeof *s, cmp_float);
    int64_t a = (int64_t)floor(pct / 100.0 * (double)(k - 1));
    int64_t b = (int64_t)ceil((100.0 - pct) / 100.0 * (double)(k - 1));
    *lo = s[a < 0 ? 0 : a];
    *hi = s[b > k - 1 ? k - 1 : b];
    free(s);
    return 1;
}

hsi_status hsi_quicklook_rgb_png(const char *path, const hsi_view *cube, const int64_t band[3],
                                 double pct, const hsi_meta *meta)
{
    return hsi_quicklook_rgb_png_sized(path, cube, band, pct, meta, 0);
}

hsi_status hsi_quicklook_rgb_png_sized(const char *path, const hsi_view *cube,
                                       const int64_t band[3], double pct, const hsi_meta *meta,
                                       int64_t width)
{
    hsi_status st = HSI_OK;
    float *plane = NULL;
    uint8_t *img = NULL, *ok = NULL, *big = NULL;
    if (cube->ndim != 3 || hsi_dtype_is_complex(cube->dtype))
        return HSI_FAIL(HSI_ERR_ARG, "%s: quicklook needs a real (bands, lines, samples) view",
                        path);
    int64_t B = cube->shape[0], L = cube->shape[1], S = cube->shape[2], n;
    if (!hsi_mul_ok(L, S, &n) || n < 1)
        return HSI_FAIL(HSI_ERR_ARG, "%s: cube of %lld x %lld pixels", path, (long long)L,
                        (long long)S);
    for (int k = 0; k < 3; k++)
        if (band[k] < 0 || band[k] >= B)
            return HSI_FAIL(HSI_ERR_ARG, "%s: band %lld (0-based) is not in 0..%lld", path,
                            (long long)band[k], (long long)B - 1);
    if (!(pct >= 0 && pct < 50))
        return HSI_FAIL(HSI_ERR_ARG, "%s: stretch %g%% is not in [0, 50)", path, pct);
    plane = malloc((size_t)n * sizeof *plane);
    ok = malloc((size_t)n);
    img = calloc((size_t)n, 3);
    if (!plane || !ok || !img) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory (quicklook of %s)", path);
        goto cleanup;
    }
    for (int k = 0; k < 3; k++) {
        for (int64_t y = 0; y < L; y++) {
            int64_t idx[3] = {band[k], y, 0};
            hsi_load_f32(plane + y * S, hsi_view_ptr(cube, idx), cube->strides[2], cube->dtype,
                         cube->swapped, S);
        }
        for (int64_t i = 0; i < n; i++)
            ok[i] = isfinite(plane[i]) &&
                    !(meta && meta->has_ignore_value && plane[i] == (float)meta->ignore_value);
        float lo = 0, hi = 0;
        if (!stretch_bounds(plane, ok, n, pct, &lo, &hi)) continue;
        double span = hi > lo ? (double)hi - lo : 1.0;
        for (int64_t i = 0; i < n; i++) {
            if (!ok[i]) continue;
            double t = ((double)plane[i] - lo) / span;
            t = t < 0 ? 0 : t > 1 ? 1 : t;
            img[3 * i + k] = (uint8_t)lrint(t * 255.0);
        }
    }
    int64_t L2, S2;
    HSI_TRY(sized(path, L, S, width, &L2, &S2));
    if (L2 != L || S2 != S) {
        if (!(big = malloc((size_t)(L2 * S2) * 3))) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory (quicklook of %s)", path);
            goto cleanup;
        }
        for (int64_t y = 0; y < L2; y++)
            for (int64_t x = 0; x < S2; x++)
                memcpy(big + 3 * (y * S2 + x), img + 3 * (nn_src(y, L, L2) * S + nn_src(x, S, S2)),
                       3);
    }
    st = hsi_gdal_write_png(path, big ? big : img, L2, S2, 3);
cleanup:
    free(plane);
    free(ok);
    free(img);
    free(big);
    return st;
}

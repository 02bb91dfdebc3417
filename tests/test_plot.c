/* test_plot.c — io/plot.h: every chart is written as a PNG that GDAL
 * decodes at the canvas size, and what is drawn is where and as big as the
 * data say (a line's colour present, a gap left empty, bars to scale, a
 * heat map's dark cells counted). Bad arguments are refused. */
#include <unistd.h>

#include "io/plot.h"
#include "test.h"

static int is_red(const uint8_t *p)
{
    return p[0] > 200 && p[1] < 70 && p[2] < 70;
}
static int is_blue(const uint8_t *p)
{
    return p[0] < 40 && p[1] < 40 && p[2] > 200;
}
static int is_dark_blue(const uint8_t *p)
{
    return p[0] < 40 && p[1] < 90 && p[2] > 90 && p[2] < 190;
}

static int64_t count(const uint8_t *px, int w, int h, int (*f)(const uint8_t *))
{
    int64_t n = 0;
    for (int64_t i = 0; i < (int64_t)w * h; i++)
        n += f(px + 3 * i);
    return n;
}

static void test_canvas(void)
{
    hsi_plot *p = NULL;
    HSI_CHECK_FAILS(hsi_plot_new(&p, 10, 100), HSI_ERR_ARG, "16..8192");
    HSI_CHECK_FAILS(hsi_plot_new(&p, 100, 9000), HSI_ERR_ARG, "16..8192");
    CU_ASSERT_PTR_NULL(p);
    HSI_CHECK_OK(hsi_plot_new(&p, 123, 45));
    const char *png = hsi_test_tmp("plot_blank.png");
    HSI_CHECK_OK(hsi_plot_write_png(p, png));
    int w = 0, h = 0;
    uint8_t *px = hsi_test_png_rgb(png, &w, &h);
    CU_ASSERT_PTR_NOT_NULL_FATAL(px);
    CU_ASSERT(w == 123 && h == 45);
    int64_t white = 0;
    for (int i = 0; i < w * h; i++)
        white += px[3 * i] == 255 && px[3 * i + 1] == 255 && px[3 * i + 2] == 255;
    CU_ASSERT_EQUAL(white, (int64_t)w * h);
    free(px);
    /* a folder that does not exist: an I/O error naming the file */
    HSI_CHECK_FAILS(hsi_plot_write_png(p, hsi_test_tmp("no/such/dir.png")), HSI_ERR_IO, "dir.png");
    hsi_plot_free(p);
    hsi_plot_free(NULL);
}

/* A red line over x = 1..20 with y NaN at x = 9..12: red pixels on both
 * sides, none over the gap; an empty chart has no red at all. */
static void test_lines(void)
{
    double y[20], lo[20], hi[20];
    for (int i = 0; i < 20; i++) {
        y[i] = i < 8 || i > 11 ? (double)i : NAN;
        lo[i] = y[i] - 2;
        hi[i] = y[i] + 2;
    }
    hsi_plot_series s = {.label = "data", .y = y, .n = 20, .rgb = {230, 20, 20}, .markers = 1};
    hsi_plot_axes ax;
    hsi_plot_axes_init(&ax);
    ax.title = "Line ± band";
    ax.x_label = "x";
    ax.y_label = "y";
    ax.integer_x = 1;
    hsi_plot *p = NULL;
    HSI_CHECK_OK(hsi_plot_new(&p, 600, 400));
    HSI_CHECK_OK(hsi_plot_lines(p, (hsi_plot_rect){0, 0, 600, 400}, &ax, &s, 1));
    const char *png = hsi_test_tmp("plot_line.png");
    HSI_CHECK_OK(hsi_plot_write_png(p, png));
    hsi_plot_free(p);
    int w = 0, h = 0;
    uint8_t *px = hsi_test_png_rgb(png, &w, &h);
    CU_ASSERT_PTR_NOT_NULL_FATAL(px);
    CU_ASSERT(w == 600 && h == 400);
    /* columns holding red: two runs, the gap between them wider than 2 of
     * the 19 x steps (x 8 -> 13 is 5 steps of a line that is not drawn) */
    int first = -1, last = -1, widest_gap = 0, prev = -1;
    for (int x = 0; x < w; x++) {
        int red = 0;
        for (int yy = 0; yy < h && !red; yy++)
            red = is_red(px + 3 * ((size_t)yy * w + x));
        if (!red) continue;
        if (first < 0) first = x;
        if (prev >= 0 && x - prev > widest_gap) widest_gap = x - prev;
        prev = last = x;
    }
    CU_ASSERT(first >= 0 && last > first);
    if (last > first) CU_ASSERT(widest_gap > (last - first) * 3 / 19);
    CU_ASSERT(count(px, w, h, is_red) > 300);
    free(px);
    /* with a band: its light shade covers more than the line */
    s.lo = lo;
    s.hi = hi;
    s.markers = 0;
    HSI_CHECK_OK(hsi_plot_new(&p, 600, 400));
    HSI_CHECK_OK(hsi_plot_lines(p, (hsi_plot_rect){0, 0, 600, 400}, &ax, &s, 1));
    HSI_CHECK_OK(hsi_plot_write_png(p, png));
    hsi_plot_free(p);
    px = hsi_test_png_rgb(png, &w, &h);
    CU_ASSERT_PTR_NOT_NULL_FATAL(px);
    int64_t shade = 0;
    for (int i = 0; i < w * h; i++) {
        const uint8_t *q = px + 3 * i;
        shade += q[0] > 240 && q[1] > 180 && q[1] < 235 && q[2] > 180 && q[2] < 235;
    }
    CU_ASSERT(shade > 2 * count(px, w, h, is_red));
    free(px);
    /* no finite point: axes and "no data", not an error, no red */
    for (int i = 0; i < 20; i++)
        y[i] = NAN;
    s.lo = s.hi = NULL;
    HSI_CHECK_OK(hsi_plot_new(&p, 300, 200));
    HSI_CHECK_OK(hsi_plot_lines(p, (hsi_plot_rect){0, 0, 300, 200}, &ax, &s, 1));
    HSI_CHECK_OK(hsi_plot_write_png(p, png));
    px = hsi_test_png_rgb(png, &w, &h);
    CU_ASSERT_PTR_NOT_NULL_FATAL(px);
    CU_ASSERT_EQUAL(count(px, w, h, is_red), 0);
    free(px);
    /* bad series */
    s.lo = lo;
    HSI_CHECK_FAILS(hsi_plot_lines(p, (hsi_plot_rect){0, 0, 300, 200}, &ax, &s, 1), HSI_ERR_ARG,
                    "lo/hi");
    hsi_plot_free(p);
}

/* Bars of 1, 2 and 4: drawn lengths in the same ratio. */
static void test_bars(void)
{
    const char *labels[3] = {"one", "two", "four (ünïcødé)"};
    double v[3] = {1, 2, 4};
    const uint8_t blue[3] = {0, 0, 255};
    hsi_plot *p = NULL;
    HSI_CHECK_OK(hsi_plot_new(&p, 700, 300));
    HSI_CHECK_OK(hsi_plot_hbars(p, (hsi_plot_rect){0, 0, 700, 300}, "Bars", "seconds", labels, v, 3,
                                "%.1f s", blue));
    const char *png = hsi_test_tmp("plot_bars.png");
    HSI_CHECK_OK(hsi_plot_write_png(p, png));
    int w = 0, h = 0;
    uint8_t *px = hsi_test_png_rgb(png, &w, &h);
    CU_ASSERT_PTR_NOT_NULL_FATAL(px);
    CU_ASSERT(w == 700 && h == 300);
    /* the longest blue run of each band of rows, top to bottom */
    int len[3] = {0, 0, 0}, bar = -1, in_bar = 0;
    for (int y = 0; y < h; y++) {
        int run = 0, best = 0;
        for (int x = 0; x < w; x++) {
            run = is_blue(px + 3 * ((size_t)y * w + x)) ? run + 1 : 0;
            if (run > best) best = run;
        }
        if (best > 0 && !in_bar) bar++;
        in_bar = best > 0;
        if (best > 0 && bar >= 0 && bar < 3 && best > len[bar]) len[bar] = best;
    }
    CU_ASSERT_EQUAL(bar, 2);
    CU_ASSERT(len[0] > 20);
    HSI_ASSERT_NEAR(len[1], 2.0 * len[0], 3);
    HSI_ASSERT_NEAR(len[2], 4.0 * len[0], 4);
    free(px);
    v[1] = -1;
    HSI_CHECK_FAILS(
        hsi_plot_hbars(p, (hsi_plot_rect){0, 0, 700, 300}, NULL, NULL, labels, v, 3, NULL, blue),
        HSI_ERR_ARG, "bar 1 (two)");
    v[1] = NAN;
    HSI_CHECK_FAILS(
        hsi_plot_hbars(p, (hsi_plot_rect){0, 0, 700, 300}, NULL, NULL, labels, v, 3, NULL, blue),
        HSI_ERR_ARG, ">= 0");
    hsi_plot_free(p);
}

/* Dark-blue pixels of a 2 x 2 heat map of zeros, the identity and ones:
 * each step adds two cells' worth. */
static int64_t matrix_dark(const double *m, const char *name)
{
    const char *rows[2] = {"Maïs", "Blé"};
    hsi_plot_matrix_spec sp = {.title = "M",
                               .row_title = "true",
                               .col_title = "predicted",
                               .m = m,
                               .rows = 2,
                               .cols = 2,
                               .row_labels = rows,
                               .col_labels = rows,
                               .vmin = 0,
                               .vmax = 1,
                               .scale = 100,
                               .cell_fmt = "%.0f%%"};
    hsi_plot *p = NULL;
    HSI_CHECK_OK(hsi_plot_new(&p, 500, 420));
    hsi_status st = hsi_plot_matrix(p, (hsi_plot_rect){0, 0, 500, 420}, &sp);
    HSI_CHECK_OK(st);
    const char *png = hsi_test_tmp(name);
    HSI_CHECK_OK(hsi_plot_write_png(p, png));
    hsi_plot_free(p);
    int w = 0, h = 0;
    uint8_t *px = hsi_test_png_rgb(png, &w, &h);
    CU_ASSERT_PTR_NOT_NULL_FATAL(px);
    CU_ASSERT(w == 500 && h == 420);
    int64_t n = count(px, w, h, is_dark_blue);
    free(px);
    return n;
}

static void test_matrix(void)
{
    double zeros[4] = {0, 0, 0, 0}, eye[4] = {1, 0, 0, 1}, ones[4] = {1, 1, 1, 1};
    int64_t d0 = matrix_dark(zeros, "m0.png"), d1 = matrix_dark(eye, "m1.png"),
            d2 = matrix_dark(ones, "m2.png");
    CU_ASSERT(d1 - d0 > 10000); /* two cells of ~100 x 100 pixels */
    HSI_ASSERT_NEAR((double)(d2 - d1), (double)(d1 - d0), 0.1 * (double)(d1 - d0));
    hsi_plot *p = NULL;
    HSI_CHECK_OK(hsi_plot_new(&p, 100, 100));
    hsi_plot_matrix_spec bad = {.m = eye, .rows = 2, .cols = 2, .vmin = 1, .vmax = 1};
    HSI_CHECK_FAILS(hsi_plot_matrix(p, (hsi_plot_rect){0, 0, 100, 100}, &bad), HSI_ERR_ARG,
                    "empty");
    hsi_plot_free(p);
}

HSI_SUITE(plot, 0, {"canvas: sizes, blank PNG, unwritable path", test_canvas},
          {"line chart: line, gap, band, no data", test_lines}, {"bars to scale", test_bars},
          {"heat map cells", test_matrix})

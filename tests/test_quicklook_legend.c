/* test_quicklook_legend.c — the label-map picture with its legend, read
 * back with GDAL: the map's pixels are the palette colours exactly at any
 * zoom (nearest neighbour, nothing blended), the legend's text is drawn with
 * a real font (antialiased, measured, UTF-8 names such as "Maïs"), the
 * picture's size follows the layout rule of quicklook.h. Not the CLI: that
 * is test_quicklook.c. */

#include "test.h"

#include "io/quicklook.h"

/* A (L, S) u8 map view of ids. */
static void map_view(hsi_view *v, int64_t L, int64_t S, const uint8_t *ids)
{
    int64_t shape[2] = {L, S};
    HSI_CHECK_OK(hsi_view_alloc(v, HSI_U8, 2, shape, HSI_BUF_HOST));
    memcpy(v->buf->data, ids, (size_t)(L * S));
}

/* Layout constants of the legend at the smallest text size (13 px, maps up
 * to 416 lines): margin 10, swatch 14, row pitch 21, a header row. */
static int legend_h(int n_rows)
{
    return 10 + (n_rows + 1) * 21 - (21 - 14) + 10;
}

enum { L = 8, S = 10, NC = 4 };
static const uint8_t colours[NC * 3] = {0, 0, 0, 200, 180, 40, 0, 120, 255, 250, 250, 250};

/* ids 0..3 from the file's colours, 7 from the fixed palette */
static void fill_ids(uint8_t *ids)
{
    for (int y = 0; y < L; y++)
        for (int x = 0; x < S; x++)
            ids[y * S + x] = (uint8_t)((x + 2 * y) % 5 == 4 ? 7 : (x + y) % NC);
}

static void colour_of(int id, uint8_t out[3])
{
    if (id < NC)
        memcpy(out, colours + 3 * id, 3);
    else
        hsi_quicklook_palette(id, out);
}

/* Writes the map with names (NC entries) at width, reads it back. */
static uint8_t *draw(const char *name, const char *const *names, int64_t width, int *w, int *h)
{
    uint8_t ids[L * S];
    fill_ids(ids);
    hsi_view v;
    map_view(&v, L, S, ids);
    const char *path = hsi_test_tmp(name);
    HSI_CHECK_OK(hsi_quicklook_labels_png_sized(path, &v, NC, names, colours, 1, width));
    hsi_view_release(&v);
    return hsi_test_png_rgb(path, w, h);
}

/* Every map pixel is its class's colour exactly, nearest-neighbour at any
 * width (a whole zoom and an uneven one); under the map is white. */
static void test_map_exact(void)
{
    static const char *const names[NC] = {"Unlabelled", "Maïs", "Blé d'hiver", "Route"};
    uint8_t ids[L * S];
    fill_ids(ids);
    const int64_t widths[2] = {30, 23};
    for (int k = 0; k < 2; k++) {
        int w = 0, h = 0;
        uint8_t *px = draw(k ? "legend_23.png" : "legend_30.png", names, widths[k], &w, &h);
        CU_ASSERT_PTR_NOT_NULL_FATAL(px);
        int S2 = (int)widths[k], L2 = (int)lround((double)L * S2 / S);
        /* 5 classes shown: the panel is the taller; the map is L2 lines */
        CU_ASSERT_EQUAL(h, legend_h(5) > L2 ? legend_h(5) : L2);
        CU_ASSERT(w > S2 + 100 && w < S2 + 400);
        int bad = 0, not_white = 0;
        for (int y = 0; y < L2; y++)
            for (int x = 0; x < S2; x++) {
                int sy = (int)((y + 0.5) * L / L2), sx = (int)((x + 0.5) * S / S2);
                uint8_t c[3];
                colour_of(ids[sy * S + sx], c);
                bad += memcmp(px + 3 * ((size_t)y * w + x), c, 3) != 0;
            }
        for (int y = L2; y < h; y++)
            for (int x = 0; x < S2; x++) {
                const uint8_t *p = px + 3 * ((size_t)y * w + x);
                not_white += p[0] != 255 || p[1] != 255 || p[2] != 255;
            }
        CU_ASSERT_EQUAL(bad, 0);
        CU_ASSERT_EQUAL(not_white, 0);
        free(px);
    }
}

/* Ink in the rectangle [x0, x1) x [y0, y1): pixels that are not white, and
 * how many different grey levels strictly between black and white. */
static void ink(const uint8_t *px, int w, int x0, int x1, int y0, int y1, int *n_ink, int *n_levels)
{
    int seen[256] = {0};
    *n_ink = *n_levels = 0;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            const uint8_t *p = px + 3 * ((size_t)y * w + x);
            if (p[0] == 255 && p[1] == 255 && p[2] == 255) continue;
            (*n_ink)++;
            if (p[0] == p[1] && p[1] == p[2] && p[0] > 0 && !seen[p[0]]++) (*n_levels)++;
        }
}

/* The legend's text is a real font: antialiased (many grey levels, which a
 * bitmap font has not), one swatch per class in its colour, "Maïs" drawn
 * with its diaeresis (not as "Mais" nor "Ma?s"), wider names widen the
 * panel, and a name that is not UTF-8 is still drawn. */
static void test_legend_font(void)
{
    const char *names[NC] = {"Unlabelled", "Maïs", "Blé d'hiver", "Route"};
    int w = 0, h = 0, w2 = 0, h2 = 0, w3 = 0, h3 = 0;
    uint8_t *a = draw("legend_mais.png", names, 0, &w, &h);
    names[1] = "Mais";
    uint8_t *b = draw("legend_mais_ascii.png", names, 0, &w2, &h2);
    names[1] = "Ma?s";
    uint8_t *c = draw("legend_mais_q.png", names, 0, &w3, &h3);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL(h, legend_h(5));
    /* the panel: text, antialiased */
    int n_ink = 0, n_levels = 0;
    ink(a, w, S, w, 0, h, &n_ink, &n_levels);
    CU_ASSERT(n_ink > 500);
    CU_ASSERT(n_levels > 20);
    /* entry 2 (class 1, "Maïs"): its swatch at (S + 10, 10 + 2 * 21) in its colour */
    int sy = 10 + 2 * 21, sx = S + 10;
    CU_ASSERT(memcmp(a + 3 * ((size_t)(sy + 7) * w + sx + 7), colours + 3, 3) == 0);
    /* "ï" and "i" advance alike in DejaVu Sans: the same picture but for
     * the diaeresis, on the class's own row */
    CU_ASSERT_FATAL(w2 == w && h2 == h);
    int diff = 0, off_row = 0;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            int d = memcmp(a + 3 * ((size_t)y * w + x), b + 3 * ((size_t)y * w + x), 3) != 0;
            diff += d;
            off_row += d && (y < sy - 4 || y >= sy + 21 - 4 || x < S);
        }
    CU_ASSERT(diff > 3);
    CU_ASSERT_EQUAL(off_row, 0);
    /* and not the '?' a font without the letter would fall back to */
    int same = w3 == w && h3 == h && memcmp(a, c, (size_t)w * h * 3) == 0;
    CU_ASSERT(!same);
    free(a);
    free(b);
    free(c);

    /* a longer name: a wider panel, the same height */
    names[1] = "Maïs de printemps, semé tard";
    uint8_t *d = draw("legend_long.png", names, 0, &w2, &h2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT(w2 > w + 50 && h2 == h);
    free(d);
    /* Latin-1 bytes (not UTF-8): drawn with '?', the picture still written */
    names[1] = "Ma\xefs";
    d = draw("legend_latin1.png", names, 0, &w2, &h2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT(h2 == h);
    ink(d, w2, S, w2, sy - 4, sy + 17, &n_ink, &n_levels);
    CU_ASSERT(n_ink > 50);
    free(d);
}

/* Many classes go into columns that keep the panel near the map's height
 * (400 px for small maps); a legend beyond 32767 pixels is refused. */
static void test_legend_columns(void)
{
    enum { LL = 20, SS = 30 };
    uint8_t ids[LL * SS];
    for (int i = 0; i < LL * SS; i++)
        ids[i] = (uint8_t)(1 + i % 60);
    hsi_view v;
    map_view(&v, LL, SS, ids);
    const char *path = hsi_test_tmp("legend_60.png");
    HSI_CHECK_OK(hsi_quicklook_labels_png_sized(path, &v, 0, NULL, NULL, 1, 0));
    int w = 0, h = 0;
    uint8_t *px = hsi_test_png_rgb(path, &w, &h);
    CU_ASSERT_PTR_NOT_NULL_FATAL(px);
    /* 17 entries a column fit in 400 px: 4 columns of 15 */
    CU_ASSERT_EQUAL(h, legend_h(15));
    CU_ASSERT(w > SS + 4 * 60);
    /* the palette's colours, class 1 at the top left */
    uint8_t c[3];
    hsi_quicklook_palette(1, c);
    CU_ASSERT(memcmp(px, c, 3) == 0);
    hsi_quicklook_palette(30, c); /* (0, 29) is id 30 */
    CU_ASSERT(memcmp(px + 3 * (size_t)(SS - 1), c, 3) == 0);
    free(px);
    HSI_CHECK_FAILS(hsi_quicklook_labels_png_sized(hsi_test_tmp("legend_huge.png"), &v, 0, NULL,
                                                   NULL, 1, 40000),
                    HSI_ERR_ARG, "32767");
    hsi_view_release(&v);
}

HSI_SUITE(quicklook_legend, 0, {"map pixels exact at any zoom", test_map_exact},
          {"legend text in a real font (UTF-8)", test_legend_font},
          {"many classes in columns", test_legend_columns})

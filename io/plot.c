/* plot.c — line charts, horizontal bars and a heat-map matrix drawn with
 * cairo on an RGB image surface, written as PNG through the core's atomic
 * temporary files (see plot.h). Layout is measured with the font's own
 * extents, so labels of any length fit. Not a plotting library beyond what
 * plot.h lists. */
#include "plot.h"

#include <cairo.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FONT            "DejaVu Sans"
#define SZ_TICK         13.0
#define SZ_LABEL        14.0
#define SZ_TITLE        16.0
#define MAX_SIDE        8192
#define MAX_RASTER_SIDE 32767 /* cairo's image surface limit */

struct hsi_plot {
    cairo_surface_t *surf;
    cairo_t *cr;
    int width, height;
};

/* ------------------------------------------------------------ canvas */

static hsi_status cairo_check(const hsi_plot *p, const char *what)
{
    cairo_status_t cs = cairo_status(p->cr);
    if (cs == CAIRO_STATUS_SUCCESS) cs = cairo_surface_status(p->surf);
    if (cs == CAIRO_STATUS_SUCCESS) return HSI_OK;
    return HSI_FAIL(cs == CAIRO_STATUS_NO_MEMORY ? HSI_ERR_NOMEM : HSI_ERR_STATE, "%s: cairo: %s",
                    what, cairo_status_to_string(cs));
}

static hsi_status plot_new(hsi_plot **out, int width, int height, int min_side, int max_side)
{
    *out = NULL;
    if (width < min_side || height < min_side || width > max_side || height > max_side)
        return HSI_FAIL(HSI_ERR_ARG, "plot: a canvas of %d x %d pixels (each side must be %d..%d)",
                        width, height, min_side, max_side);
    hsi_plot *p = calloc(1, sizeof *p);
    if (!p) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    p->width = width;
    p->height = height;
    p->surf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height);
    p->cr = cairo_create(p->surf);
    hsi_status st = cairo_check(p, "plot canvas");
    if (st != HSI_OK) {
        hsi_plot_free(p);
        return st;
    }
    cairo_set_source_rgb(p->cr, 1, 1, 1);
    cairo_paint(p->cr);
    cairo_select_font_face(p->cr, FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    *out = p;
    return HSI_OK;
}

hsi_status hsi_plot_new(hsi_plot **out, int width, int height)
{
    return plot_new(out, width, height, 16, MAX_SIDE);
}

hsi_status hsi_plot_new_raster(hsi_plot **out, int width, int height)
{
    return plot_new(out, width, height, 1, MAX_RASTER_SIDE);
}

void hsi_plot_free(hsi_plot *p)
{
    if (!p) return;
    if (p->cr) cairo_destroy(p->cr);
    if (p->surf) cairo_surface_destroy(p->surf);
    free(p);
}

/* ------------------------------------------------------------ text */

static void font(cairo_t *cr, double size, int bold)
{
    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
}

static double text_w(cairo_t *cr, const char *s)
{
    cairo_text_extents_t e;
    cairo_text_extents(cr, s ? s : "", &e);
    return e.x_advance;
}

/* Text anchored at (x, y): ha 0 left / 0.5 centre / 1 right of x; y is the
 * vertical centre of the font's capitals. */
static void text_at(cairo_t *cr, double x, double y, double ha, const char *s)
{
    if (!s || !*s) return;
    cairo_font_extents_t fe;
    cairo_font_extents(cr, &fe);
    double w = text_w(cr, s);
    cairo_move_to(cr, x - ha * w, y + (fe.ascent - fe.descent) / 2);
    cairo_show_text(cr, s);
}

/* The same, turned by angle radians about (x, y). */
static void text_rot(cairo_t *cr, double x, double y, double ha, double angle, const char *s)
{
    cairo_save(cr);
    cairo_translate(cr, x, y);
    cairo_rotate(cr, angle);
    text_at(cr, 0, 0, ha, s);
    cairo_restore(cr);
}

/* A copy of s (malloc'd) with each byte that does not start a well-formed
 * UTF-8 sequence (overlong, surrogate, above U+10FFFF, cut short) replaced
 * by '?': cairo refuses invalid UTF-8 and would stop drawing altogether.
 * NULL when out of memory. */
static char *utf8_clean(const char *s)
{
    size_t n = strlen(s);
    char *o = malloc(n + 1);
    if (!o) return NULL;
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, k = 0;
    while (i < n) {
        unsigned c = u[i];
        int len = c < 0x80                 ? 1
                  : c >= 0xc2 && c <= 0xdf ? 2
                  : c >= 0xe0 && c <= 0xef ? 3
                  : c >= 0xf0 && c <= 0xf4 ? 4
                                           : 0;
        int ok = len > 0 && i + (size_t)len <= n;
        for (int j = 1; ok && j < len; j++)
            ok = (u[i + j] & 0xc0) == 0x80;
        if (ok && len == 3) {
            unsigned v = (c & 0x0f) << 12 | (u[i + 1] & 0x3f) << 6 | (u[i + 2] & 0x3f);
            ok = v >= 0x800 && !(v >= 0xd800 && v <= 0xdfff);
        } else if (ok && len == 4) {
            unsigned v = (c & 0x07) << 18 | (u[i + 1] & 0x3f) << 12 | (u[i + 2] & 0x3f) << 6 |
                         (u[i + 3] & 0x3f);
            ok = v >= 0x10000 && v <= 0x10ffff;
        }
        if (!ok) {
            o[k++] = '?';
            i++;
            continue;
        }
        memcpy(o + k, s + i, (size_t)len);
        k += (size_t)len;
        i += (size_t)len;
    }
    o[k] = 0;
    return o;
}

void hsi_plot_text(hsi_plot *p, double x, double y, double size, int bold, int grey,
                   const char *text)
{
    char *t = utf8_clean(text ? text : "");
    if (!t) return;
    cairo_save(p->cr);
    font(p->cr, size, bold);
    cairo_set_source_rgb(p->cr, grey / 255.0, grey / 255.0, grey / 255.0);
    cairo_move_to(p->cr, x, y);
    cairo_show_text(p->cr, t);
    cairo_restore(p->cr);
    free(t);
}

double hsi_plot_text_width(hsi_plot *p, double size, int bold, const char *text)
{
    char *t = utf8_clean(text ? text : "");
    if (!t) return 0;
    cairo_save(p->cr);
    font(p->cr, size, bold);
    double w = text_w(p->cr, t);
    cairo_restore(p->cr);
    free(t);
    return w;
}

/* ------------------------------------------------------------ pixels */

void hsi_plot_fill_rect(hsi_plot *p, double x, double y, double w, double h, const uint8_t rgb[3])
{
    cairo_save(p->cr);
    cairo_set_source_rgb(p->cr, rgb[0] / 255.0, rgb[1] / 255.0, rgb[2] / 255.0);
    cairo_rectangle(p->cr, x, y, w, h);
    cairo_fill(p->cr);
    cairo_restore(p->cr);
}

void hsi_plot_put_rgb(hsi_plot *p, int x, int y, const uint8_t *rgb, int w, int h)
{
    int x0 = x < 0 ? 0 : x, y0 = y < 0 ? 0 : y;
    int x1 = x + w < p->width ? x + w : p->width, y1 = y + h < p->height ? y + h : p->height;
    if (x0 >= x1 || y0 >= y1) return;
    cairo_surface_flush(p->surf); /* cairo's pending drawing lands before the pixels */
    unsigned char *data = cairo_image_surface_get_data(p->surf);
    int stride = cairo_image_surface_get_stride(p->surf);
    if (!data) return;
    for (int r = y0; r < y1; r++) {
        /* RGB24: one native-endian uint32 per pixel, 0x00RRGGBB */
        uint32_t *dst = (uint32_t *)(data + (size_t)r * (size_t)stride);
        const uint8_t *src = rgb + 3 * ((size_t)(r - y) * (size_t)w);
        for (int c = x0; c < x1; c++) {
            const uint8_t *s = src + 3 * (size_t)(c - x);
            dst[c] = (uint32_t)s[0] << 16 | (uint32_t)s[1] << 8 | s[2];
        }
    }
    cairo_surface_mark_dirty_rectangle(p->surf, x0, y0, x1 - x0, y1 - y0);
}

static void rgb(cairo_t *cr, const uint8_t c[3], double alpha)
{
    cairo_set_source_rgba(cr, c[0] / 255.0, c[1] / 255.0, c[2] / 255.0, alpha);
}

static void grey(cairo_t *cr, double g)
{
    cairo_set_source_rgb(cr, g, g, g);
}

/* ------------------------------------------------------------ ticks */

/* Heckbert's nice numbers: 1, 2, 5 x 10^k. */
static double nice_num(double x, int round)
{
    double e = floor(log10(x)), f = x / pow(10, e), nf;
    if (round)
        nf = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
    else
        nf = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
    return nf * pow(10, e);
}

typedef struct ticks {
    double lo, hi, step; /* axis limits (on ticks when widened) and spacing */
    int decimals;        /* for the labels; -1: %g */
} ticks;

/* Ticks over [lo, hi]; fixed_lo/fixed_hi keep that limit as given. */
static void make_ticks(ticks *t, double lo, double hi, int max_ticks, int integer, int fixed_lo,
                       int fixed_hi)
{
    if (!isfinite(lo) || !isfinite(hi)) lo = 0, hi = 1;
    if (hi < lo) {
        double s = lo;
        lo = hi, hi = s;
    }
    if (hi - lo <= 1e-12 * fmax(fabs(lo), fabs(hi)) || hi == lo) {
        double d = integer ? 1 : (lo != 0 ? fabs(lo) * 0.1 : 1);
        if (!fixed_lo) lo -= d;
        if (!fixed_hi) hi += d;
        if (hi <= lo) hi = lo + d;
    }
    double step = nice_num((hi - lo) / (max_ticks - 1), 1);
    if (integer && step < 1) step = 1;
    t->step = step;
    t->lo = fixed_lo ? lo : floor(lo / step + 1e-9) * step;
    t->hi = fixed_hi ? hi : ceil(hi / step - 1e-9) * step;
    double big = fmax(fabs(t->lo), fabs(t->hi));
    if (big >= 1e6 || step < 1e-5)
        t->decimals = -1;
    else
        t->decimals = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
}

static void tick_label(char *buf, size_t n, const ticks *t, double v)
{
    if (fabs(v) < t->step * 1e-9) v = 0; /* no "-0.0" */
    if (t->decimals < 0)
        snprintf(buf, n, "%g", v);
    else
        snprintf(buf, n, "%.*f", t->decimals, v);
}

/* Tick values of t: first one at or after t->lo. */
static int tick_values(const ticks *t, double *v, int max)
{
    int n = 0;
    double first = ceil(t->lo / t->step - 1e-9) * t->step;
    for (double x = first; x <= t->hi + t->step * 1e-9 && n < max; x += t->step)
        v[n++] = x;
    return n;
}

/* ------------------------------------------------------------ lines */

void hsi_plot_axes_init(hsi_plot_axes *ax)
{
    memset(ax, 0, sizeof *ax);
    ax->x_min = ax->x_max = ax->y_min = ax->y_max = NAN;
    ax->legend = HSI_PLOT_LEGEND_INSIDE;
}

static double sx(const hsi_plot_series *s, int64_t i)
{
    return s->x ? s->x[i] : (double)(i + 1);
}

/* In the legend: labelled, with a point to draw. */
static int in_legend(const hsi_plot_series *s)
{
    if (!s->label) return 0;
    for (int64_t i = 0; i < s->n; i++)
        if (isfinite(sx(s, i)) && isfinite(s->y[i])) return 1;
    return 0;
}

typedef struct frame {
    double x0, y0, w, h; /* the plot area */
    ticks tx, ty;
} frame;

static double fx(const frame *f, double v)
{
    return f->x0 + (v - f->tx.lo) / (f->tx.hi - f->tx.lo) * f->w;
}
static double fy(const frame *f, double v)
{
    return f->y0 + f->h - (v - f->ty.lo) / (f->ty.hi - f->ty.lo) * f->h;
}

/* Grid, box, tick labels and axis labels around the plot area. */
static void draw_frame(cairo_t *cr, const frame *f, const char *x_label, const char *y_label,
                       int grid_x, int grid_y)
{
    double v[64];
    char buf[64];
    cairo_set_line_width(cr, 1);
    font(cr, SZ_TICK, 0);
    int n = tick_values(&f->tx, v, 64);
    for (int i = 0; i < n; i++) {
        double x = round(fx(f, v[i])) + 0.5;
        if (grid_x) {
            grey(cr, 0.9);
            cairo_move_to(cr, x, f->y0);
            cairo_line_to(cr, x, f->y0 + f->h);
            cairo_stroke(cr);
        }
        grey(cr, 0.3);
        cairo_move_to(cr, x, f->y0 + f->h);
        cairo_line_to(cr, x, f->y0 + f->h + 5);
        cairo_stroke(cr);
        tick_label(buf, sizeof buf, &f->tx, v[i]);
        grey(cr, 0.15);
        text_at(cr, x, f->y0 + f->h + 8 + SZ_TICK * 0.5, 0.5, buf);
    }
    n = tick_values(&f->ty, v, 64);
    double yw = 0;
    for (int i = 0; i < n; i++) {
        double y = round(fy(f, v[i])) + 0.5;
        if (grid_y) {
            grey(cr, 0.9);
            cairo_move_to(cr, f->x0, y);
            cairo_line_to(cr, f->x0 + f->w, y);
            cairo_stroke(cr);
        }
        grey(cr, 0.3);
        cairo_move_to(cr, f->x0 - 5, y);
        cairo_line_to(cr, f->x0, y);
        cairo_stroke(cr);
        tick_label(buf, sizeof buf, &f->ty, v[i]);
        yw = fmax(yw, text_w(cr, buf));
        grey(cr, 0.15);
        text_at(cr, f->x0 - 8, y, 1, buf);
    }
    grey(cr, 0.3);
    cairo_rectangle(cr, round(f->x0) + 0.5, round(f->y0) + 0.5, round(f->w), round(f->h));
    cairo_stroke(cr);
    font(cr, SZ_LABEL, 0);
    grey(cr, 0.1);
    if (x_label)
        text_at(cr, f->x0 + f->w / 2, f->y0 + f->h + 14 + SZ_TICK + SZ_LABEL * 0.8, 0.5, x_label);
    if (y_label)
        text_rot(cr, f->x0 - 14 - yw - SZ_LABEL * 0.6, f->y0 + f->h / 2, 0.5, -M_PI / 2, y_label);
}

/* Widest y tick label of t (for the left margin). */
static double ticks_width(cairo_t *cr, const ticks *t)
{
    double v[64], w = 0;
    char buf[64];
    font(cr, SZ_TICK, 0);
    int n = tick_values(t, v, 64);
    for (int i = 0; i < n; i++) {
        tick_label(buf, sizeof buf, t, v[i]);
        w = fmax(w, text_w(cr, buf));
    }
    return w;
}

static void draw_title(cairo_t *cr, hsi_plot_rect r, const char *title)
{
    if (!title) return;
    font(cr, SZ_TITLE, 1);
    grey(cr, 0.05);
    text_at(cr, r.x + r.w / 2, r.y + 6 + SZ_TITLE * 0.6, 0.5, title);
}

/* Path through the finite points of y (a NaN breaks it). */
static void path_y(cairo_t *cr, const frame *f, const hsi_plot_series *s, const double *y)
{
    int pen = 0;
    for (int64_t i = 0; i < s->n; i++) {
        double x = sx(s, i);
        if (!isfinite(x) || !isfinite(y[i])) {
            pen = 0;
            continue;
        }
        if (pen)
            cairo_line_to(cr, fx(f, x), fy(f, y[i]));
        else
            cairo_move_to(cr, fx(f, x), fy(f, y[i]));
        pen = 1;
    }
}

/* The band between lo and hi, one polygon per run of finite points. */
static void fill_band(cairo_t *cr, const frame *f, const hsi_plot_series *s)
{
    int64_t i = 0;
    while (i < s->n) {
        while (i < s->n && !(isfinite(sx(s, i)) && isfinite(s->lo[i]) && isfinite(s->hi[i])))
            i++;
        int64_t a = i;
        while (i < s->n && isfinite(sx(s, i)) && isfinite(s->lo[i]) && isfinite(s->hi[i]))
            i++;
        if (i - a < 1) continue;
        cairo_move_to(cr, fx(f, sx(s, a)), fy(f, s->hi[a]));
        for (int64_t k = a + 1; k < i; k++)
            cairo_line_to(cr, fx(f, sx(s, k)), fy(f, s->hi[k]));
        for (int64_t k = i - 1; k >= a; k--)
            cairo_line_to(cr, fx(f, sx(s, k)), fy(f, s->lo[k]));
        cairo_close_path(cr);
        cairo_fill(cr);
    }
}

/* Points of the series inside a box (for placing the legend). */
static int64_t points_in(const frame *f, const hsi_plot_series *s, int n_series, double bx,
                         double by, double bw, double bh)
{
    int64_t c = 0;
    for (int k = 0; k < n_series; k++)
        for (int64_t i = 0; i < s[k].n; i++) {
            double x = fx(f, sx(&s[k], i));
            const double *ys[3] = {s[k].y, s[k].lo, s[k].hi};
            for (int j = 0; j < 3; j++) {
                if (!ys[j] || !isfinite(ys[j][i])) continue;
                double y = fy(f, ys[j][i]);
                c += x >= bx && x <= bx + bw && y >= by && y <= by + bh;
            }
        }
    return c;
}

static void legend_swatch(cairo_t *cr, const hsi_plot_series *s, double x, double y)
{
    if (s->lo && s->hi) {
        rgb(cr, s->rgb, 0.2);
        cairo_rectangle(cr, x, y - 6, 26, 12);
        cairo_fill(cr);
    }
    rgb(cr, s->rgb, 1);
    cairo_set_line_width(cr, 2.5);
    if (s->dashed) {
        double d[2] = {6, 4};
        cairo_set_dash(cr, d, 2, 0);
    }
    cairo_move_to(cr, x, y);
    cairo_line_to(cr, x + 26, y);
    cairo_stroke(cr);
    cairo_set_dash(cr, NULL, 0, 0);
    if (s->markers) {
        cairo_arc(cr, x + 13, y, 3.2, 0, 2 * M_PI);
        cairo_fill(cr);
    }
}

hsi_status hsi_plot_lines(hsi_plot *p, hsi_plot_rect r, const hsi_plot_axes *ax,
                          const hsi_plot_series *s, int n_series)
{
    cairo_t *cr = p->cr;
    if (n_series < 0 || (n_series && !s)) return HSI_FAIL(HSI_ERR_ARG, "plot: %d series", n_series);
    for (int k = 0; k < n_series; k++)
        if (s[k].n < 0 || (s[k].n && !s[k].y) || !s[k].lo != !s[k].hi)
            return HSI_FAIL(HSI_ERR_ARG, "plot: series %d: y missing, n < 0, or only one of lo/hi",
                            k);
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    int64_t n_pts = 0;
    for (int k = 0; k < n_series; k++)
        for (int64_t i = 0; i < s[k].n; i++) {
            double x = sx(&s[k], i);
            if (!isfinite(x)) continue;
            const double *ys[3] = {s[k].y, s[k].lo, s[k].hi};
            for (int j = 0; j < 3; j++) {
                if (!ys[j] || !isfinite(ys[j][i])) continue;
                xlo = fmin(xlo, x), xhi = fmax(xhi, x);
                ylo = fmin(ylo, ys[j][i]), yhi = fmax(yhi, ys[j][i]);
                n_pts++;
            }
        }
    int fxl = isfinite(ax->x_min), fxh = isfinite(ax->x_max), fyl = isfinite(ax->y_min),
        fyh = isfinite(ax->y_max);
    if (fxl) xlo = ax->x_min;
    if (fxh) xhi = ax->x_max;
    if (fyl) ylo = ax->y_min;
    if (fyh) yhi = ax->y_max;
    cairo_save(cr);
    draw_title(cr, r, ax->title);
    frame f;
    int max_x_ticks = r.w > 700 ? 10 : r.w > 400 ? 7 : 5;
    /* x: the data's own limits; y: 4 % of room above and below (limits
     * the caller gave are kept as they are) */
    int x_ok = n_pts && xhi > xlo, y_ok = n_pts && yhi > ylo;
    if (x_ok) { /* 2 %: points on the first and last x clear of the frame */
        double pad = 0.02 * (xhi - xlo);
        if (!fxl) xlo -= pad;
        if (!fxh) xhi += pad;
    }
    if (y_ok) {
        double pad = 0.04 * (yhi - ylo);
        if (!fyl) ylo -= pad;
        if (!fyh) yhi += pad;
    }
    make_ticks(&f.tx, xlo, xhi, max_x_ticks, ax->integer_x, fxl || x_ok, fxh || x_ok);
    make_ticks(&f.ty, ylo, yhi, r.h > 400 ? 8 : 6, 0, fyl || y_ok, fyh || y_ok);
    /* the legend column (outside) */
    double leg_w = 0;
    int n_leg = 0;
    font(cr, SZ_TICK, 0);
    for (int k = 0; k < n_series; k++)
        if (in_legend(&s[k])) {
            leg_w = fmax(leg_w, text_w(cr, s[k].label));
            n_leg++;
        }
    leg_w = n_leg ? leg_w + 26 + 8 + 16 : 0;
    double top = r.y + (ax->title ? 14 + SZ_TITLE : 10);
    double left = r.x + 10 + ticks_width(cr, &f.ty) + 8 + (ax->y_label ? SZ_LABEL + 12 : 0);
    double bottom = r.y + r.h - (8 + SZ_TICK + 8 + (ax->x_label ? SZ_LABEL + 10 : 0));
    double right = r.x + r.w - 14 - (ax->legend == HSI_PLOT_LEGEND_RIGHT ? leg_w + 6 : 0);
    f.x0 = left;
    f.y0 = top;
    f.w = fmax(right - left, 10);
    f.h = fmax(bottom - top, 10);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    draw_frame(cr, &f, ax->x_label, ax->y_label, 1, 1);
    cairo_save(cr);
    cairo_rectangle(cr, f.x0 - 4, f.y0 - 4, f.w + 8, f.h + 8); /* markers on the edges whole */
    cairo_clip(cr);
    for (int k = 0; k < n_series; k++)
        if (s[k].lo) {
            rgb(cr, s[k].rgb, s[k].band_alpha > 0 ? s[k].band_alpha : 0.18);
            fill_band(cr, &f, &s[k]);
        }
    for (int k = 0; k < n_series; k++) {
        rgb(cr, s[k].rgb, 1);
        cairo_set_line_width(cr, 2.2);
        if (s[k].dashed) {
            double d[2] = {7, 4};
            cairo_set_dash(cr, d, 2, 0);
        }
        path_y(cr, &f, &s[k], s[k].y);
        cairo_stroke(cr);
        cairo_set_dash(cr, NULL, 0, 0);
        if (s[k].markers)
            for (int64_t i = 0; i < s[k].n; i++) {
                if (!isfinite(sx(&s[k], i)) || !isfinite(s[k].y[i])) continue;
                cairo_arc(cr, fx(&f, sx(&s[k], i)), fy(&f, s[k].y[i]), 3.2, 0, 2 * M_PI);
                cairo_fill(cr);
            }
    }
    if (!n_pts) {
        font(cr, SZ_LABEL, 0);
        grey(cr, 0.45);
        text_at(cr, f.x0 + f.w / 2, f.y0 + f.h / 2, 0.5, "no data");
    }
    cairo_restore(cr);
    /* the legend */
    if (n_leg && ax->legend != HSI_PLOT_LEGEND_NONE) {
        double row = SZ_TICK + 8, bw = leg_w, bh = n_leg * row + 10, bx, by;
        if (ax->legend == HSI_PLOT_LEGEND_RIGHT) {
            bx = f.x0 + f.w + 12;
            by = f.y0;
        } else {
            double cx[4] = {f.x0 + f.w - bw - 8, f.x0 + 8, f.x0 + f.w - bw - 8, f.x0 + 8};
            double cy[4] = {f.y0 + 8, f.y0 + 8, f.y0 + f.h - bh - 8, f.y0 + f.h - bh - 8};
            int best = 0;
            int64_t least = -1;
            for (int c = 0; c < 4; c++) {
                int64_t k = points_in(&f, s, n_series, cx[c], cy[c], bw, bh);
                if (least < 0 || k < least) least = k, best = c;
            }
            bx = cx[best];
            by = cy[best];
        }
        cairo_set_source_rgba(cr, 1, 1, 1, 0.88);
        cairo_rectangle(cr, bx, by, bw, bh);
        cairo_fill_preserve(cr);
        grey(cr, 0.75);
        cairo_set_line_width(cr, 1);
        cairo_stroke(cr);
        double y = by + 5 + row / 2;
        font(cr, SZ_TICK, 0);
        for (int k = 0; k < n_series; k++) {
            if (!in_legend(&s[k])) continue;
            legend_swatch(cr, &s[k], bx + 8, y);
            grey(cr, 0.1);
            text_at(cr, bx + 8 + 26 + 8, y, 0, s[k].label);
            y += row;
        }
    }
    cairo_restore(cr);
    return cairo_check(p, "plot: line chart");
}

/* ------------------------------------------------------------ bars */

hsi_status hsi_plot_hbars(hsi_plot *p, hsi_plot_rect r, const char *title, const char *x_label,
                          const char *const *labels, const double *values, int n,
                          const char *value_fmt, const uint8_t color[3])
{
    cairo_t *cr = p->cr;
    if (n < 1 || !values) return HSI_FAIL(HSI_ERR_ARG, "plot: a bar chart of %d bars", n);
    double vmax = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(values[i]) || values[i] < 0)
            return HSI_FAIL(HSI_ERR_ARG, "plot: bar %d (%s) is %g; bars are finite and >= 0", i,
                            labels && labels[i] ? labels[i] : "?", values[i]);
        vmax = fmax(vmax, values[i]);
    }
    const char *vf = value_fmt ? value_fmt : "%g";
    cairo_save(cr);
    draw_title(cr, r, title);
    frame f;
    make_ticks(&f.tx, 0, vmax > 0 ? vmax : 1, r.w > 600 ? 8 : 5, 0, 1, 0);
    f.ty.lo = 0, f.ty.hi = n, f.ty.step = 1, f.ty.decimals = 0;
    font(cr, SZ_LABEL, 0);
    double lab_w = 0, val_w = 0;
    char buf[128];
    for (int i = 0; i < n; i++)
        lab_w = fmax(lab_w, text_w(cr, labels && labels[i] ? labels[i] : ""));
    font(cr, SZ_TICK, 0);
    for (int i = 0; i < n; i++) {
        snprintf(buf, sizeof buf, vf, values[i]);
        val_w = fmax(val_w, text_w(cr, buf));
    }
    f.x0 = r.x + 12 + lab_w + 10;
    f.y0 = r.y + (title ? 14 + SZ_TITLE : 10);
    f.w = fmax(r.x + r.w - 14 - val_w - 8 - f.x0, 10);
    f.h = fmax(r.y + r.h - (8 + SZ_TICK + 8 + (x_label ? SZ_LABEL + 10 : 0)) - f.y0, 10);
    /* x grid, ticks and label; no y ticks (the bars are labelled) */
    double v[64];
    int nt = tick_values(&f.tx, v, 64);
    cairo_set_line_width(cr, 1);
    for (int i = 0; i < nt; i++) {
        double x = round(fx(&f, v[i])) + 0.5;
        grey(cr, 0.9);
        cairo_move_to(cr, x, f.y0);
        cairo_line_to(cr, x, f.y0 + f.h);
        cairo_stroke(cr);
        grey(cr, 0.3);
        cairo_move_to(cr, x, f.y0 + f.h);
        cairo_line_to(cr, x, f.y0 + f.h + 5);
        cairo_stroke(cr);
        tick_label(buf, sizeof buf, &f.tx, v[i]);
        grey(cr, 0.15);
        text_at(cr, x, f.y0 + f.h + 8 + SZ_TICK * 0.5, 0.5, buf);
    }
    double slot = f.h / n, bh = fmin(slot * 0.7, 40);
    for (int i = 0; i < n; i++) {
        double yc = f.y0 + slot * (i + 0.5);
        double x1 = fx(&f, values[i]);
        rgb(cr, color, 1);
        cairo_rectangle(cr, f.x0, yc - bh / 2, fmax(x1 - f.x0, values[i] > 0 ? 1 : 0), bh);
        cairo_fill(cr);
        font(cr, SZ_LABEL, 0);
        grey(cr, 0.1);
        text_at(cr, f.x0 - 10, yc, 1, labels && labels[i] ? labels[i] : "");
        font(cr, SZ_TICK, 0);
        grey(cr, 0.2);
        snprintf(buf, sizeof buf, vf, values[i]);
        text_at(cr, x1 + 6, yc, 0, buf);
    }
    grey(cr, 0.3);
    cairo_move_to(cr, round(f.x0) + 0.5, f.y0);
    cairo_line_to(cr, round(f.x0) + 0.5, f.y0 + f.h);
    cairo_line_to(cr, f.x0 + f.w, f.y0 + f.h);
    cairo_stroke(cr);
    if (x_label) {
        font(cr, SZ_LABEL, 0);
        grey(cr, 0.1);
        text_at(cr, f.x0 + f.w / 2, f.y0 + f.h + 14 + SZ_TICK + SZ_LABEL * 0.8, 0.5, x_label);
    }
    cairo_restore(cr);
    return cairo_check(p, "plot: bar chart");
}

/* ------------------------------------------------------------ matrix */

/* matplotlib's "Blues" at nine stops, white to dark blue. */
static void blues(double t, double c[3])
{
    static const double stops[9][3] = {{247, 251, 255}, {222, 235, 247}, {198, 219, 239},
                                       {158, 202, 225}, {107, 174, 214}, {66, 146, 198},
                                       {33, 113, 181},  {8, 81, 156},    {8, 48, 107}};
    if (!(t >= 0)) t = 0;
    if (t > 1) t = 1;
    double u = t * 8;
    int i = (int)u;
    if (i > 7) i = 7;
    double a = u - i;
    for (int k = 0; k < 3; k++)
        c[k] = ((1 - a) * stops[i][k] + a * stops[i + 1][k]) / 255.0;
}

hsi_status hsi_plot_matrix(hsi_plot *p, hsi_plot_rect r, const hsi_plot_matrix_spec *sp)
{
    cairo_t *cr = p->cr;
    if (!sp || !sp->m || sp->rows < 1 || sp->cols < 1 || sp->rows > 4096 || sp->cols > 4096)
        return HSI_FAIL(HSI_ERR_ARG, "plot: a matrix of %d x %d", sp ? sp->rows : 0,
                        sp ? sp->cols : 0);
    if (!(sp->vmax > sp->vmin))
        return HSI_FAIL(HSI_ERR_ARG, "plot: matrix colour range [%g, %g] is empty", sp->vmin,
                        sp->vmax);
    const int R = sp->rows, C = sp->cols;
    const double scale = sp->scale != 0 ? sp->scale : 1;
    char buf[160];
    cairo_save(cr);
    draw_title(cr, r, sp->title);
    /* margins from the labels' extents */
    font(cr, SZ_TICK, 0);
    double row_w = 0, col_w = 0;
    for (int i = 0; i < R; i++) {
        snprintf(buf, sizeof buf, "%d", i + 1);
        row_w =
            fmax(row_w, text_w(cr, sp->row_labels && sp->row_labels[i] ? sp->row_labels[i] : buf));
    }
    for (int j = 0; j < C; j++) {
        snprintf(buf, sizeof buf, "%d", j + 1);
        col_w =
            fmax(col_w, text_w(cr, sp->col_labels && sp->col_labels[j] ? sp->col_labels[j] : buf));
    }
    const double slant = M_PI / 4; /* column labels at 45 degrees */
    double cbar_lab = 0;
    for (int k = 0; k <= 4; k++) {
        snprintf(buf, sizeof buf, sp->cell_fmt ? sp->cell_fmt : "%g",
                 (sp->vmin + (sp->vmax - sp->vmin) * k / 4) * scale);
        cbar_lab = fmax(cbar_lab, text_w(cr, buf));
    }
    double top = r.y + (sp->title ? 16 + SZ_TITLE : 10);
    double left = r.x + 10 + (sp->row_title ? SZ_LABEL + 14 : 0) + row_w + 8;
    double right = r.x + r.w - 12 - cbar_lab - 8 - 18 - 20;
    double bottom =
        r.y + r.h - 10 - (sp->col_title ? SZ_LABEL + 14 : 0) - col_w * sin(slant) - SZ_TICK - 8;
    double cell = fmin((right - left) / C, (bottom - top) / R);
    if (cell < 2) {
        cairo_restore(cr);
        return HSI_FAIL(HSI_ERR_ARG, "plot: a %d x %d matrix does not fit in %.0f x %.0f pixels", R,
                        C, r.w, r.h);
    }
    double mw = cell * C, mh = cell * R;
    double x0 = left + fmax(0, (right - left - mw) / 2), y0 = top;
    double cell_font = fmin(SZ_TICK, cell * 0.32);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            double v = sp->m[(size_t)i * C + j], c[3] = {0.85, 0.85, 0.85};
            if (isfinite(v)) blues((v - sp->vmin) / (sp->vmax - sp->vmin), c);
            cairo_set_source_rgb(cr, c[0], c[1], c[2]);
            cairo_rectangle(cr, x0 + j * cell, y0 + i * cell, cell + 0.5, cell + 0.5);
            cairo_fill(cr);
            if (sp->cell_fmt && isfinite(v) && cell >= 24 && !(sp->blank_zero && v == 0)) {
                double lum = 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
                font(cr, cell_font, i == j);
                if (lum < 0.5)
                    cairo_set_source_rgb(cr, 1, 1, 1);
                else
                    grey(cr, 0.1);
                char zero[64];
                snprintf(buf, sizeof buf, sp->cell_fmt, v * scale);
                snprintf(zero, sizeof zero, sp->cell_fmt, 0.0);
                if (v != 0 && sp->tiny_text && !strcmp(buf, zero))
                    snprintf(buf, sizeof buf, "%s", sp->tiny_text);
                text_at(cr, x0 + (j + 0.5) * cell, y0 + (i + 0.5) * cell, 0.5, buf);
            }
        }
    /* cell borders: light, so rows and columns can be followed */
    cairo_set_line_width(cr, 1);
    cairo_set_source_rgba(cr, 1, 1, 1, 0.6);
    for (int i = 1; i < R; i++) {
        cairo_move_to(cr, x0, round(y0 + i * cell) + 0.5);
        cairo_line_to(cr, x0 + mw, round(y0 + i * cell) + 0.5);
    }
    for (int j = 1; j < C; j++) {
        cairo_move_to(cr, round(x0 + j * cell) + 0.5, y0);
        cairo_line_to(cr, round(x0 + j * cell) + 0.5, y0 + mh);
    }
    cairo_stroke(cr);
    grey(cr, 0.3);
    cairo_rectangle(cr, round(x0) + 0.5, round(y0) + 0.5, round(mw), round(mh));
    cairo_stroke(cr);
    /* labels */
    font(cr, SZ_TICK, 0);
    grey(cr, 0.1);
    for (int i = 0; i < R; i++) {
        snprintf(buf, sizeof buf, "%d", i + 1);
        text_at(cr, x0 - 8, y0 + (i + 0.5) * cell, 1,
                sp->row_labels && sp->row_labels[i] ? sp->row_labels[i] : buf);
    }
    for (int j = 0; j < C; j++) {
        snprintf(buf, sizeof buf, "%d", j + 1);
        /* the label's end under its column, running down to the left */
        text_rot(cr, x0 + (j + 0.5) * cell + 4, y0 + mh + 8 + SZ_TICK * 0.3, 1, -slant,
                 sp->col_labels && sp->col_labels[j] ? sp->col_labels[j] : buf);
    }
    font(cr, SZ_LABEL, 1);
    if (sp->row_title)
        text_rot(cr, x0 - 8 - row_w - 8 - SZ_LABEL * 0.6, y0 + mh / 2, 0.5, -M_PI / 2,
                 sp->row_title);
    if (sp->col_title)
        text_at(cr, x0 + mw / 2, y0 + mh + 8 + col_w * sin(slant) + SZ_TICK + 8 + SZ_LABEL * 0.6,
                0.5, sp->col_title);
    /* colour bar */
    double bx = x0 + mw + 20, bw = 18;
    for (int k = 0; k < (int)mh; k++) {
        double c[3];
        blues(1 - (k + 0.5) / mh, c);
        cairo_set_source_rgb(cr, c[0], c[1], c[2]);
        cairo_rectangle(cr, bx, y0 + k, bw, 1.5);
        cairo_fill(cr);
    }
    grey(cr, 0.3);
    cairo_rectangle(cr, round(bx) + 0.5, round(y0) + 0.5, bw, round(mh));
    cairo_stroke(cr);
    font(cr, SZ_TICK, 0);
    for (int k = 0; k <= 4; k++) {
        double y = round(y0 + mh - mh * k / 4) + 0.5;
        grey(cr, 0.3);
        cairo_move_to(cr, bx + bw, y);
        cairo_line_to(cr, bx + bw + 4, y);
        cairo_stroke(cr);
        snprintf(buf, sizeof buf, sp->cell_fmt ? sp->cell_fmt : "%g",
                 (sp->vmin + (sp->vmax - sp->vmin) * k / 4) * scale);
        grey(cr, 0.15);
        text_at(cr, bx + bw + 7, y, 0, buf);
    }
    cairo_restore(cr);
    return cairo_check(p, "plot: matrix");
}

/* ------------------------------------------------------------ PNG */

static cairo_status_t png_write(void *closure, const unsigned char *data, unsigned int length)
{
    return fwrite(data, 1, length, closure) == length ? CAIRO_STATUS_SUCCESS
                                                      : CAIRO_STATUS_WRITE_ERROR;
}

hsi_status hsi_plot_write_png(const hsi_plot *p, const char *path)
{
    hsi_status st = cairo_check(p, path);
    if (st != HSI_OK) return st;
    hsi_atomic_file af;
    HSI_TRY(hsi_atomic_open(&af, path));
    cairo_surface_flush(p->surf);
    cairo_status_t cs = cairo_surface_write_to_png_stream(p->surf, png_write, af.fp);
    if (cs != CAIRO_STATUS_SUCCESS) {
        hsi_atomic_abort(&af);
        return HSI_FAIL(HSI_ERR_IO, "%s: writing the PNG failed (cairo: %s)", path,
                        cairo_status_to_string(cs));
    }
    st = hsi_atomic_commit(&af);
cleanup:
    return st;
}

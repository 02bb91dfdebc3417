/* plot.h — charts for people, drawn with cairo: line charts (optionally
 * with a shaded band per series, such as mean ± std), horizontal bar charts
 * and a heat-map matrix with a colour bar, each in a panel of a canvas,
 * written as PNG atomically. Axes have nice ticks and labels; text is UTF-8
 * in DejaVu Sans (any sans-serif fontconfig substitutes when it is absent).
 * Not a general plotting library: the charts a run report and a profile
 * need, drawn the same way every time. */
#ifndef HSI_IO_PLOT_H
#define HSI_IO_PLOT_H

#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A white RGB canvas of width x height pixels (each 16..8192). */
typedef struct hsi_plot hsi_plot;
hsi_status hsi_plot_new(hsi_plot **out, int width, int height);
void hsi_plot_free(hsi_plot *p); /* NULL is fine */
/* The same for a picture (a map with annotations): each side 1..32767. */
hsi_status hsi_plot_new_raster(hsi_plot **out, int width, int height);

/* Where a chart goes on the canvas, in pixels (the chart's title, axes,
 * labels and legend all fit inside). */
typedef struct hsi_plot_rect {
    double x, y, w, h;
} hsi_plot_rect;

typedef enum hsi_plot_legend {
    HSI_PLOT_LEGEND_INSIDE = 0, /* in the corner of the plot area with the fewest points */
    HSI_PLOT_LEGEND_RIGHT = 1,  /* a column right of the plot area */
    HSI_PLOT_LEGEND_NONE = 2
} hsi_plot_legend;

/* One line. x, y, lo, hi: (n) doubles; a NaN y (or lo/hi) leaves a gap. */
typedef struct hsi_plot_series {
    const char *label; /* legend text (UTF-8); NULL: not in the legend (nor is a series
                          without a finite point) */
    const double *x;   /* NULL: 1, 2, ..., n */
    const double *y;
    const double *lo, *hi; /* both or neither: a band shaded between them */
    int64_t n;
    uint8_t rgb[3];
    int dashed;        /* 1: a dashed line */
    int markers;       /* 1: a dot at each point */
    double band_alpha; /* opacity of the band (0: 0.18) */
} hsi_plot_series;

/* Axes of a line chart. Limits NaN: from the data (widened to the ticks). */
typedef struct hsi_plot_axes {
    const char *title, *x_label, *y_label; /* NULL: none */
    double x_min, x_max, y_min, y_max;
    int integer_x; /* 1: x ticks on integers only (epochs, band numbers) */
    hsi_plot_legend legend;
} hsi_plot_axes;

/* Axes with every limit NaN, no titles, legend inside. */
void hsi_plot_axes_init(hsi_plot_axes *ax);

/* A line chart of n_series series in r. A chart without one finite point
 * is drawn empty, with its axes, and says "no data". */
hsi_status hsi_plot_lines(hsi_plot *p, hsi_plot_rect r, const hsi_plot_axes *ax,
                          const hsi_plot_series *s, int n_series);

/* Horizontal bars, top to bottom: labels (n, UTF-8) left of the bars,
 * values (n, finite, >= 0) along x from 0, each bar's value written at its
 * end with value_fmt (a printf format taking one double, e.g. "%.3f s").
 * rgb: the bars' colour. */
hsi_status hsi_plot_hbars(hsi_plot *p, hsi_plot_rect r, const char *title, const char *x_label,
                          const char *const *labels, const double *values, int n,
                          const char *value_fmt, const uint8_t rgb[3]);

/* A heat map: m is (rows, cols) row-major; a cell's colour goes from white
 * (vmin) to dark blue (vmax), NaN cells grey. Row labels on the left (row
 * title beside them), column labels below, slanted (column title under
 * them), a colour bar on the right. Each cell shows its value as
 * cell_fmt(value * scale) when the cells are big enough to read it (NULL:
 * no text); the colour bar's ticks use the same format. */
typedef struct hsi_plot_matrix_spec {
    const char *title, *row_title, *col_title;
    const double *m;
    int rows, cols;
    const char *const *row_labels, *const *col_labels; /* rows / cols entries, or NULL: 1, 2, ... */
    double vmin, vmax;
    double scale;         /* 0 is taken as 1 */
    const char *cell_fmt; /* e.g. "%.0f%%" with scale 100 */
    int blank_zero;       /* 1: cells exactly 0 show no text */
    const char
        *tiny_text; /* shown instead when a non-zero value's text is zero's ("<1%"); NULL: none */
} hsi_plot_matrix_spec;
hsi_status hsi_plot_matrix(hsi_plot *p, hsi_plot_rect r, const hsi_plot_matrix_spec *spec);

/* Text on the canvas (UTF-8; a byte that is not well-formed UTF-8 is drawn
 * as '?'): x, y of the baseline's start; size in pixels; grey (0..255). */
void hsi_plot_text(hsi_plot *p, double x, double y, double size, int bold, int grey,
                   const char *text);
/* How far that text advances, in pixels. */
double hsi_plot_text_width(hsi_plot *p, double size, int bold, const char *text);

/* A rectangle filled with rgb (on whole pixels when x, y, w, h are whole). */
void hsi_plot_fill_rect(hsi_plot *p, double x, double y, double w, double h, const uint8_t rgb[3]);

/* rgb: (h, w, 3) packed 8-bit RGB, copied pixel for pixel with its top-left
 * at (x, y): no filtering, no blending; what falls off the canvas is left out. */
void hsi_plot_put_rgb(hsi_plot *p, int x, int y, const uint8_t *rgb, int w, int h);

/* Writes the canvas as an 8-bit RGB PNG, through a temporary file renamed
 * into place (core's hsi_atomic_*). */
hsi_status hsi_plot_write_png(const hsi_plot *p, const char *path);

#ifdef __cplusplus
}
#endif
#endif

/* cmd_quicklook.c — `hsi quicklook IN OUT.png`: a false-colour PNG of a cube
 * (three bands by index or nearest wavelength, per-channel percent linear
 * stretch) or a label map with a legend (class colour, name, pixel count). Only pictures: no statistics files, no GeoTIFF. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "io/cube.h"
#include "io/labels.h"
#include "io/quicklook.h"

static const char usage[] =
    "usage: hsi quicklook IN OUT.png [--rgb R,G,B | --bands R,G,B] [--stretch P]\n"
    "                     [--var NAME] [--image N] [--labels] [--no-legend]\n"
    "                     [--zoom K | --width W] [--overwrite]\n"
    "\n"
    "  --rgb R,G,B     wavelengths in nm; the nearest bands are used (default\n"
    "                  640,550,460 when the cube has wavelengths)\n"
    "  --bands R,G,B   band numbers, 1-based (default: the header's default\n"
    "                  bands, else nearest to 640,550,460 nm, else bands at 3/4,\n"
    "                  1/2 and 1/4 of the range; one band: grey)\n"
    "  --stretch P     linear stretch per channel between the P and 100-P\n"
    "                  percentiles (default 2; 0 = min..max)\n"
    "  --var NAME      .mat variable / GDAL subdataset; --image N: SPE region\n"
    "  --labels        treat IN as a label map (automatic for ENVI\n"
    "                  classification files, class GeoTIFFs and 2-D .mat maps)\n"
    "  --no-legend     label maps: no legend panel\n"
    "  --zoom K        K x K screen pixels per cube pixel (nearest neighbour)\n"
    "  --width W       the picture W pixels wide, the aspect kept (a width below\n"
    "                  the cube's shrinks it: a look at a long flight line)\n"
    "A label map is drawn with its class colours (or a fixed palette), 0 =\n"
    "unlabelled in black, and a legend with each present class's colour, id,\n"
    "name and pixel count.\n";

/* --zoom / --width: the picture's width for a cube of S samples (0: S) */
static long long g_zoom, g_width;
static int64_t pic_width(int64_t S) { return g_zoom ? g_zoom * S : g_width; }

static int labels_png(const char *cmd, const hsi_labels *l, const char *out, int legend)
{
    hsi_status st = hsi_quicklook_labels_sized(out, l, legend, pic_width(l->map.shape[1]));
    if (st != HSI_OK) return hsi_cli_fail(cmd, st);
    int present = 0;
    for (int c = 0; c < l->n_classes; c++) present += l->counts[c] > 0;
    printf("%s: label map of %lld samples x %lld lines, %d ids present (0 = unlabelled)%s\n", out,
           (long long)l->map.shape[1], (long long)l->map.shape[0], present,
           legend ? ", with legend" : "");
    return HSI_EXIT_OK;
}

static int64_t nearest_band(const hsi_meta *m, double nm)
{
    int64_t best = 0;
    double bd = INFINITY;
    for (int64_t b = 0; b < m->n_bands; b++) {
        double d = fabs(m->wavelength[b] - nm);
        if (d < bd) {
            bd = d;
            best = b;
        }
    }
    return best;
}

static int parse3(const char *s, double out[3])
{
    char *end = NULL;
    for (int k = 0; k < 3; k++) {
        out[k] = strtod(s, &end);
        if (end == s) return 0;
        s = end;
        if (k < 2) {
            if (*s != ',') return 0;
            s++;
        }
    }
    return *s == 0;
}

static int cube_png(const char *cmd, const hsi_cube *c, const char *out, const char *rgb_opt,
                    const char *bands_opt, double pct)
{
    const hsi_view *v = &c->view;
    const hsi_meta *m = &c->meta;
    int64_t B = v->shape[0], band[3];
    double x[3];
    const char *how;
    int have_wl = m->wavelength && m->n_bands == B;
    if (v->ndim != 3 || hsi_dtype_is_complex(v->dtype))
        return hsi_cli_usage_error(cmd, "IN is not a real (bands, lines, samples) cube");
    if (bands_opt) {
        if (!parse3(bands_opt, x))
            return hsi_cli_usage_error(cmd, "--bands expects three band numbers R,G,B, got '%s'",
                                       bands_opt);
        for (int k = 0; k < 3; k++) {
            if (x[k] < 1 || x[k] > (double)B || x[k] != floor(x[k]))
                return hsi_cli_usage_error(cmd, "--bands: band %g is not in 1..%lld", x[k],
                                           (long long)B);
            band[k] = (int64_t)x[k] - 1;
        }
        how = "--bands";
    } else if (rgb_opt || (have_wl && m->n_default_bands != 3)) {
        if (!have_wl)
            return hsi_cli_usage_error(cmd, "--rgb needs band wavelengths and %s has none (use "
                                            "--bands)",
                                       c->data_path ? c->data_path : "IN");
        if (rgb_opt && !parse3(rgb_opt, x))
            return hsi_cli_usage_error(cmd, "--rgb expects three wavelengths R,G,B in nm, got '%s'",
                                       rgb_opt);
        if (!rgb_opt) x[0] = 640, x[1] = 550, x[2] = 460;
        /* nm when the unit was known; unknown units below 100 are micrometres */
        double wmax = 0;
        for (int64_t b = 0; b < B; b++)
            if (m->wavelength[b] > wmax) wmax = m->wavelength[b];
        double f = m->wavelength_nm || wmax >= 100 ? 1.0 : 1e-3;
        for (int k = 0; k < 3; k++) band[k] = nearest_band(m, x[k] * f);
        how = "nearest wavelengths";
    } else if (m->n_default_bands == 3) {
        for (int k = 0; k < 3; k++) band[k] = m->default_bands[k];
        how = "default bands";
    } else if (B >= 3) {
        band[0] = (3 * B) / 4, band[1] = B / 2, band[2] = B / 4;
        how = "bands at 3/4, 1/2, 1/4";
    } else {
        band[0] = band[1] = band[2] = 0;
        how = "grey";
    }
    hsi_status st = hsi_quicklook_rgb_png_sized(out, v, band, pct, m, pic_width(v->shape[2]));
    if (st != HSI_OK) return hsi_cli_fail(cmd, st);
    printf("%s: %lld samples x %lld lines, bands %lld,%lld,%lld (1-based; %s)", out,
           (long long)v->shape[2], (long long)v->shape[1], (long long)band[0] + 1, (long long)band[1] + 1,
           (long long)band[2] + 1, how);
    if (have_wl)
        printf(" = %.4g,%.4g,%.4g%s", m->wavelength[band[0]], m->wavelength[band[1]],
               m->wavelength[band[2]], m->wavelength_nm ? " nm" : "");
    printf(", stretch %g%%\n", pct);
    return HSI_EXIT_OK;
}

static int is_label_cube(const hsi_cube *c)
{
    return c->view.shape[0] == 1 && !hsi_dtype_is_float(c->view.dtype) &&
           !hsi_dtype_is_complex(c->view.dtype) &&
           (c->meta.file_kind == HSI_FILE_CLASSIFICATION || c->meta.n_classes > 0);
}

static int run_quicklook(int argc, char **argv)
{
    const char *cmd = "quicklook", *in = NULL, *out = NULL, *rgb = NULL, *bands = NULL, *v = NULL;
    const char *var = NULL;
    double pct = 2.0;
    long long image = 0;
    int force_labels = 0, legend = 1, overwrite = 0;
    for (int i = 1; i < argc; i++) {
        if (hsi_cli_opt(argc, argv, &i, "--rgb", &v)) {
            if (!(rgb = v)) return hsi_cli_usage_error(cmd, "--rgb needs a value");
        } else if (hsi_cli_opt(argc, argv, &i, "--bands", &v)) {
            if (!(bands = v)) return hsi_cli_usage_error(cmd, "--bands needs a value");
        } else if (hsi_cli_opt(argc, argv, &i, "--stretch", &v)) {
            if (!hsi_cli_parse_double(cmd, "--stretch", v, &pct)) return HSI_EXIT_USAGE;
            if (!(pct >= 0 && pct < 50))
                return hsi_cli_usage_error(cmd, "--stretch expects a percentage in [0, 50), got %g",
                                           pct);
        } else if (hsi_cli_opt(argc, argv, &i, "--var", &v)) {
            if (!(var = v)) return hsi_cli_usage_error(cmd, "--var needs a value");
        } else if (hsi_cli_opt(argc, argv, &i, "--image", &v)) {
            if (!hsi_cli_parse_int(cmd, "--image", v, 0, 1 << 20, &image)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--zoom", &v)) {
            if (!hsi_cli_parse_int(cmd, "--zoom", v, 1, 64, &g_zoom)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--width", &v)) {
            if (!hsi_cli_parse_int(cmd, "--width", v, 1, 65535, &g_width)) return HSI_EXIT_USAGE;
        } else if (!strcmp(argv[i], "--labels")) {
            force_labels = 1;
        } else if (!strcmp(argv[i], "--no-legend")) {
            legend = 0;
        } else if (!strcmp(argv[i], "--overwrite")) {
            overwrite = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return hsi_cli_usage_error(cmd, "unknown option '%s'", argv[i]);
        } else if (!in) {
            in = argv[i];
        } else if (!out) {
            out = argv[i];
        } else {
            return hsi_cli_usage_error(cmd, "unexpected argument '%s'", argv[i]);
        }
    }
    if (!in || !out) return hsi_cli_usage_error(cmd, "needs IN and OUT.png");
    if (rgb && bands) return hsi_cli_usage_error(cmd, "--rgb and --bands exclude each other");
    if (g_zoom && g_width) return hsi_cli_usage_error(cmd, "--zoom and --width exclude each other");
    size_t ol = strlen(out);
    if (ol < 4 || strcasecmp(out + ol - 4, ".png") != 0)
        return hsi_cli_usage_error(cmd, "OUT must end in .png, got '%s'", out);

    hsi_labels l;
    hsi_status st = hsi_cli_check_output(out, in, NULL, overwrite);
    if (st != HSI_OK) return hsi_cli_fail(cmd, st);
    if (force_labels) {
        if ((st = hsi_labels_open(&l, in, var)) != HSI_OK) return hsi_cli_fail(cmd, st);
        int rc = labels_png(cmd, &l, out, legend);
        hsi_labels_free(&l);
        return rc;
    }
    hsi_cube c;
    hsi_open_options o = {var, (int)image};
    st = hsi_cube_open(&c, in, &o);
    if (st != HSI_OK) {
        /* a .mat holding only a 2-D map is a label map */
        char saved[1024];
        snprintf(saved, sizeof saved, "%s", hsi_last_error());
        if (hsi_labels_open(&l, in, var) == HSI_OK) {
            int rc = labels_png(cmd, &l, out, legend);
            hsi_labels_free(&l);
            return rc;
        }
        hsi_fail(st, "%s", saved);
        return hsi_cli_fail(cmd, st);
    }
    int rc;
    if (is_label_cube(&c) && !rgb && !bands) {
        hsi_view map;
        st = hsi_view_index(&map, &c.view, 0, 0);
        if (st == HSI_OK) st = hsi_labels_from_view(&l, &map, &c.meta);
        hsi_view_release(&map);
        rc = st == HSI_OK ? labels_png(cmd, &l, out, legend) : hsi_cli_fail(cmd, st);
        if (st == HSI_OK) hsi_labels_free(&l);
    } else {
        rc = cube_png(cmd, &c, out, rgb, bands, pct);
    }
    hsi_cube_free(&c);
    return rc;
}

HSI_CLI_COMMAND(quicklook, {"quicklook", "false-colour PNG of a cube, or a label map with legend",
                            usage, run_quicklook})

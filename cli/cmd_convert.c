/* cmd_convert.c — `hsi convert IN OUT`: any readable cube to ENVI (any
 * interleave, dtype, byte order, band subset) or, when OUT ends in .tif, to
 * GeoTIFF (io/convert.h does the work). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "core/dist.h"
#include "io/convert.h"
#include "kernels/bands.h"

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcasecmp(s + a - b, suf) == 0;
}

static int convert_run(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *bands = NULL;
    hsi_envi_write_options o;
    hsi_envi_write_options_init(&o);
    int have_il = 0, have_bo = 0, overwrite = 0, n_co = 0;
    hsi_open_options oo = {NULL, 0};
    const char *co[33] = {NULL}; /* --co KEY=VALUE, NULL-terminated */
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (hsi_cli_opt(argc, argv, &i, "--interleave", &v)) {
            if (v && !strcasecmp(v, "bsq")) o.interleave = HSI_BSQ;
            else if (v && !strcasecmp(v, "bil")) o.interleave = HSI_BIL;
            else if (v && !strcasecmp(v, "bip")) o.interleave = HSI_BIP;
            else return hsi_cli_usage_error("convert", "--interleave expects bsq, bil or bip");
            have_il = 1;
        } else if (hsi_cli_opt(argc, argv, &i, "--dtype", &v)) {
            o.dtype = hsi_dtype_from_name(v);
            if (o.dtype == HSI_DT_INVALID || o.dtype == HSI_I8)
                return hsi_cli_usage_error("convert",
                                           "--dtype expects uint8, int16, uint16, int32, uint32, "
                                           "int64, uint64, float32, float64, complex64 or "
                                           "complex128 (got '%s')", v ? v : "");
        } else if (hsi_cli_opt(argc, argv, &i, "--byte-order", &v)) {
            if (v && !strcasecmp(v, "little")) o.byte_order = 0;
            else if (v && !strcasecmp(v, "big")) o.byte_order = 1;
            else return hsi_cli_usage_error("convert", "--byte-order expects little or big");
            have_bo = 1;
        } else if (hsi_cli_opt(argc, argv, &i, "--bands", &v)) {
            if (!v) return hsi_cli_usage_error("convert", "--bands needs a list like 1-20,35,40-");
            bands = v;
        } else if (hsi_cli_opt(argc, argv, &i, "--co", &v)) {
            if (!v || !strchr(v, '=') || *v == '=')
                return hsi_cli_usage_error("convert", "--co expects KEY=VALUE (e.g. COMPRESS=ZSTD), got '%s'",
                                           v ? v : "");
            if (n_co == 32) return hsi_cli_usage_error("convert", "more than 32 --co options");
            co[n_co++] = v;
        } else if (hsi_cli_opt(argc, argv, &i, "--var", &v)) {
            oo.var = v;
        } else if (!strcmp(argv[i], "--overwrite")) {
            overwrite = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return hsi_cli_usage_error("convert", "unknown option '%s'", argv[i]);
        } else if (!in) {
            in = argv[i];
        } else if (!out) {
            out = argv[i];
        } else {
            return hsi_cli_usage_error("convert", "too many arguments ('%s')", argv[i]);
        }
    }
    if (!in || !out) return hsi_cli_usage_error("convert", "need IN and OUT");
    int tif = ends_with(out, ".tif") || ends_with(out, ".tiff");
    if (!tif && !ends_with(out, ".hdr"))
        return hsi_cli_usage_error("convert", "OUT must end in .hdr (ENVI) or .tif (GeoTIFF): '%s'",
                                   out);
    if (!tif && n_co)
        return hsi_cli_usage_error("convert", "--co is for GeoTIFF output (OUT.tif), not ENVI");
    if (tif && (have_il || have_bo))
        hsi_warn("--interleave/--byte-order do not apply to GeoTIFF output; ignored");
    hsi_cube c;
    hsi_cube_init(&c);
    int64_t *sel = NULL, n_sel = 0;
    hsi_status st = hsi_cube_open(&c, in, &oo);
    if (st == HSI_OK) st = hsi_cli_check_output(out, c.header_path, c.data_path, overwrite);
    if (st == HSI_OK) {
        if (!have_il) o.interleave = c.meta.interleave;
        if (bands) {
            st = hsi_bands_parse(&sel, &n_sel, bands, c.view.shape[0]);
        } else {
            n_sel = c.view.shape[0];
            sel = malloc((size_t)(n_sel ? n_sel : 1) * sizeof *sel);
            if (!sel) st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            for (int64_t b = 0; sel && b < n_sel; b++) sel[b] = b;
        }
    }
    /* under mpirun: every rank copies its share of the lines into the ENVI
     * output; GDAL writes a GeoTIFF on rank 0 while the others wait */
    if (st == HSI_OK && !tif) st = hsi_convert_envi(out, &c, sel, n_sel, &o, 1, 1);
    if (st == HSI_OK && tif && hsi_dist_rank() == 0) st = hsi_convert_geotiff(out, &c, sel, n_sel, o.dtype, co);
    if (st == HSI_OK && tif) st = hsi_dist_barrier();
    int rc = HSI_EXIT_OK;
    if (st != HSI_OK) rc = hsi_cli_fail("convert", st);
    else if (hsi_dist_rank() == 0)
        fprintf(stderr, "wrote %s: %lld bands x %lld lines x %lld samples\n", out, (long long)n_sel,
                (long long)c.view.shape[1], (long long)c.view.shape[2]);
    free(sel);
    hsi_cube_free(&c);
    return rc;
}

HSI_CLI_COMMAND(convert, {"convert", "convert a cube to ENVI (any layout/type) or GeoTIFF",
                          "usage: hsi convert IN OUT.hdr|OUT.tif [--interleave bsq|bil|bip]\n"
                          "                   [--dtype NAME] [--byte-order little|big]\n"
                          "                   [--bands SPEC] [--var NAME] [--co KEY=VALUE]...\n"
                          "                   [--overwrite]\n"
                          "\n"
                          "Reads IN (ENVI, SPE, .mat, any GDAL raster) and writes OUT: ENVI when\n"
                          "it ends in .hdr (data file beside it without the .hdr), GeoTIFF when\n"
                          "it ends in .tif (georeferenced from map info / coordinate system).\n"
                          "Lines are streamed in tiles; the output appears only when complete.\n"
                          "Under mpirun -np N each rank copies its share of the lines into the one\n"
                          "ENVI output (a GeoTIFF is written by rank 0).\n"
                          "An existing OUT is replaced only with --overwrite, never when it is IN.\n"
                          "\n"
                          "  --interleave   output interleave (default: the input's)\n"
                          "  --dtype        numpy name: uint8 int16 uint16 int32 uint32 int64 uint64\n"
                          "                 float32 float64 complex64 complex128 (default: input's);\n"
                          "                 integers are rounded and saturated\n"
                          "  --byte-order   little (default) or big\n"
                          "  --bands SPEC   1-based bands, e.g. 1-20,35,40- (metadata follows)\n"
                          "  --var NAME     .mat variable or GDAL subdataset\n"
                          "  --co KEY=VALUE GeoTIFF creation option, as gdal_translate -co (repeat;\n"
                          "                 default TILED=YES COMPRESS=DEFLATE INTERLEAVE=BAND);\n"
                          "                 e.g. COMPRESS=ZSTD, PREDICTOR=2, BLOCKXSIZE=512; COG=YES\n"
                          "                 writes a Cloud Optimized GeoTIFF (GDAL's COG driver,\n"
                          "                 whose options then apply); unknown options are refused\n",
                          convert_run})

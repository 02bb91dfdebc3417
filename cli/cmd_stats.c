/* cmd_stats.c — `hsi stats IN`: per-band count, mean, std, min, max (and
 * optional percentiles) of any readable cube in one streaming pass, as a
 * table or JSON. Reads through the kernels; writes nothing. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/dist.h"
#include "kcli.h"
#include "kernels/stats.h"

static const char usage[] =
    "usage: hsi stats IN [--json] [--mask LABELS] [--bands SPEC] [--percentiles P,P,...]\n"
    "                 [--bins N] [--no-ignore] [--tile-lines N] [--threads N]\n"
    "                 [--device cpu|cuda|auto]\n"
    "\n"
    "Per-band statistics of the cube IN (any format hsi reads) in one pass over\n"
    "the raw data (any interleave, dtype, byte order), accumulated in double.\n"
    "  --json            JSON instead of a table\n"
    "  --mask LABELS     only pixels whose label (a one-band image) is nonzero\n"
    "  --bands SPEC      1-based bands, e.g. 1-20,35,40- (default all)\n"
    "  --percentiles L   e.g. 2,50,98: read off a histogram (second pass), exact\n"
    "                    to one bin width (--bins, default 1024)\n"
    "  --no-ignore       count the header's 'data ignore value' like any value\n"
    "  --tile-lines N    lines per tile per thread (default 64)\n"
    "  --threads N       worker threads (default: HSI_THREADS or all cores)\n"
    KCLI_DEVICE_HELP
    "                    (histograms, percentiles and mpirun's shared pass: CPU)\n"
    "std is the population std (ddof 0, numpy's default); NaN and the ignore\n"
    "value are not counted.\n";

static int run_stats(int argc, char **argv)
{
    const char *cmd = "stats", *in = NULL, *mask_path = NULL, *bands = NULL, *pcts = NULL, *v = NULL;
    kcli_opts ko = {0};
    int json = 0, no_ignore = 0;
    long long bins = 1024;
    for (int i = 1; i < argc; i++) {
        int r = kcli_opt(cmd, argc, argv, &i, &ko, KCLI_OPT_TILES | KCLI_OPT_DEVICE);
        if (r < 0) return HSI_EXIT_USAGE;
        if (r) continue;
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--no-ignore")) no_ignore = 1;
        else if (hsi_cli_opt(argc, argv, &i, "--mask", &mask_path)) {
            if (!mask_path) return hsi_cli_usage_error(cmd, "--mask needs a file");
        } else if (hsi_cli_opt(argc, argv, &i, "--bands", &bands)) {
            if (!bands) return hsi_cli_usage_error(cmd, "--bands needs a list");
        } else if (hsi_cli_opt(argc, argv, &i, "--percentiles", &pcts)) {
            if (!pcts) return hsi_cli_usage_error(cmd, "--percentiles needs a list");
        } else if (hsi_cli_opt(argc, argv, &i, "--bins", &v)) {
            if (!hsi_cli_parse_int(cmd, "--bins", v, 2, 1 << 20, &bins)) return HSI_EXIT_USAGE;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return hsi_cli_usage_error(cmd, "unknown option '%s'", argv[i]);
        } else if (!in) {
            in = argv[i];
        } else {
            return hsi_cli_usage_error(cmd, "one input only (got '%s' and '%s')", in, argv[i]);
        }
    }
    if (!in) return hsi_cli_usage_error(cmd, "needs an input cube");
    double q[64];
    int nq = 0;
    if (pcts) {
        const char *p = pcts;
        while (*p) {
            char *end;
            double x = strtod(p, &end);
            if (end == p || nq == 64 || !(x >= 0 && x <= 100))
                return hsi_cli_usage_error(cmd, "--percentiles expects up to 64 numbers in 0..100, got '%s'", pcts);
            q[nq++] = x;
            p = *end == ',' ? end + 1 : end;
            if (*end && *end != ',') return hsi_cli_usage_error(cmd, "--percentiles: bad list '%s'", pcts);
        }
    }

    hsi_status st = HSI_OK;
    hsi_cube c;
    kcli_mask mk = {0};
    hsi_stats s = {0};
    hsi_view sub = {0};
    int64_t *sel = NULL, ns = 0, have_sub = 0;
    int rc = HSI_EXIT_OK;
    hsi_cube_init(&c);
    HSI_TRY(hsi_cli_device_ready(ko.device));
    HSI_TRY(hsi_cube_open(&c, in, NULL));
    if (mask_path) HSI_TRY(kcli_mask_open(&mk, mask_path, &c.view));
    HSI_TRY(hsi_prep_select_bands(&sel, &ns, &c.meta, bands, NULL, 0));
    /* band list -> one view per contiguous run is not needed: stats per band
     * are independent, so compute on the whole cube when the list is every
     * band, else on a view of the span and pick */
    hsi_stats_opts o = {.mask = mk.open ? &mk.view : NULL,
                        .has_ignore = !no_ignore && c.meta.has_ignore_value,
                        .ignore_value = c.meta.ignore_value,
                        .hist_bins = nq ? (int)bins : 0,
                        .n_percentiles = nq,
                        .percentiles = q,
                        .tile_lines = ko.tile_lines,
                        .n_threads = (int)ko.threads,
                        .progress_label = "stats",
                        /* under mpirun: each rank reads its share of the lines */
                        .split = nq ? NULL : hsi_prep_dist_split(),
                        .device = ko.device};
    int64_t lo = sel[0], hi = sel[0];
    for (int64_t i = 0; i < ns; i++) {
        lo = sel[i] < lo ? sel[i] : lo;
        hi = sel[i] > hi ? sel[i] : hi;
    }
    HSI_TRY(hsi_view_bands(&sub, &c.view, lo, hi - lo + 1));
    have_sub = 1;
    HSI_TRY(hsi_stats_compute(&s, &sub, &o));
    if (hsi_dist_rank() != 0) goto cleanup; /* rank 0 prints */
    const hsi_meta *m = &c.meta;
    if (json) {
        /* through cJSON: strings escaped, NaN and inf (a band without a valid
         * pixel) as null */
        cJSON *j = cJSON_CreateObject(), *arr = NULL;
        cJSON_AddStringToObject(j, "file", in);
        cJSON_AddNumberToObject(j, "lines", (double)c.view.shape[1]);
        cJSON_AddNumberToObject(j, "samples", (double)c.view.shape[2]);
        cJSON_AddNumberToObject(j, "bands", (double)c.view.shape[0]);
        cJSON_AddStringToObject(j, "dtype", hsi_dtype_name(c.view.dtype));
        if (o.has_ignore) cJSON_AddNumberToObject(j, "ignore_value", o.ignore_value);
        else cJSON_AddNullToObject(j, "ignore_value");
        cJSON_AddBoolToObject(j, "masked", mk.open);
        arr = cJSON_AddArrayToObject(j, "stats");
        for (int64_t i = 0; arr && i < ns; i++) {
            int64_t b = sel[i], jj = b - lo;
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "band", (double)b + 1);
            if (m->wavelength) cJSON_AddNumberToObject(e, "wavelength", m->wavelength[b]);
            if (m->band_names && m->band_names[b]) cJSON_AddStringToObject(e, "name", m->band_names[b]);
            cJSON_AddNumberToObject(e, "count", (double)s.count[jj]);
            cJSON_AddNumberToObject(e, "mean", s.mean[jj]);
            cJSON_AddNumberToObject(e, "std", s.std[jj]);
            cJSON_AddNumberToObject(e, "min", s.min[jj]);
            cJSON_AddNumberToObject(e, "max", s.max[jj]);
            if (nq) {
                cJSON *pc = cJSON_AddObjectToObject(e, "percentiles");
                for (int k = 0; k < nq; k++) {
                    char key[32];
                    snprintf(key, sizeof key, "%g", q[k]);
                    cJSON_AddNumberToObject(pc, key, s.percentile[jj * nq + k]);
                }
            }
            cJSON_AddItemToArray(arr, e);
        }
        char *text = arr ? cJSON_Print(j) : NULL;
        cJSON_Delete(j);
        if (!text) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        puts(text);
        free(text);
    } else {
        printf("# %s: %lld bands x %lld lines x %lld samples, %s%s\n", in, (long long)c.view.shape[0],
               (long long)c.view.shape[1], (long long)c.view.shape[2], hsi_dtype_name(c.view.dtype),
               mk.open ? ", masked" : "");
        printf("%5s %12s %12s %14s %14s %14s %14s", "band", "wavelength", "count", "mean", "std", "min", "max");
        for (int k = 0; k < nq; k++) printf("   p%-10g", q[k]);
        printf("\n");
        for (int64_t i = 0; i < ns; i++) {
            int64_t b = sel[i], j = b - lo;
            printf("%5lld %12.6g %12lld %14.8g %14.8g %14.8g %14.8g", (long long)b + 1,
                   m->wavelength ? m->wavelength[b] : 0.0 / 0.0, (long long)s.count[j], s.mean[j], s.std[j],
                   s.min[j], s.max[j]);
            for (int k = 0; k < nq; k++) printf(" %13.8g", s.percentile[j * nq + k]);
            printf("\n");
        }
    }
cleanup:
    if (st != HSI_OK) rc = hsi_cli_fail(cmd, st);
    hsi_stats_free(&s);
    if (have_sub) hsi_view_release(&sub);
    free(sel);
    kcli_mask_close(&mk);
    hsi_cube_free(&c);
    return rc;
}

HSI_CLI_COMMAND(stats, {"stats", "per-band mean/std/min/max (+ percentiles), one pass", usage, run_stats})

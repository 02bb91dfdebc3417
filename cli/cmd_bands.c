/* cmd_bands.c — `hsi bands IN`: which bands a selection keeps: an explicit
 * list, wavelength ranges, bbl, a ranking by variance or OPBS (greedy
 * orthogonal projection on the band covariance). Prints the bands; writes
 * no cube (use `hsi convert --bands` or `hsi preprocess --bands`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kcli.h"
#include "kernels/bands.h"
#include "kernels/pca.h"
#include "kernels/stats.h"

static const char usage[] =
    "usage: hsi bands IN (--select SPEC | --wavelengths SPEC | --rank variance | --opbs K)\n"
    "                [--drop-bbl] [--mask LABELS] [--top N] [--threads N]\n"
    "\n"
    "  --select SPEC      1-based list, e.g. 1-20,35,40-\n"
    "  --wavelengths SPEC ranges in nm, e.g. 400-1340,1450-1800,1960-2450\n"
    "  --rank variance    all (kept) bands by decreasing variance (--top N: first N)\n"
    "  --opbs K           K bands by orthogonal-projection band selection: the\n"
    "                     max-variance band, then each time the band with the\n"
    "                     largest variance left after projecting out the picked ones\n"
    "  --drop-bbl         leave out bands the header's bbl marks bad\n"
    "--select, --wavelengths and --drop-bbl also restrict what --rank/--opbs choose from.\n"
    "  --mask LABELS      compute variances/covariance on labelled pixels only\n"
    "Prints one line per band (1-based index, wavelength, score) and, last, the\n"
    "selection as a spec for --bands.\n";

static void print_band(const hsi_meta *m, int64_t b, const char *score_name, double score)
{
    printf("%5lld %12.6g", (long long)b + 1, m->wavelength ? m->wavelength[b] : 0.0 / 0.0);
    if (score_name) printf("  %s %.8g", score_name, score);
    if (m->band_names && m->band_names[b]) printf("  %s", m->band_names[b]);
    printf("\n");
}

static int run_bands(int argc, char **argv)
{
    const char *cmd = "bands", *in = NULL, *spec = NULL, *wls = NULL, *rank = NULL, *mask_path = NULL, *v = NULL;
    long long opbs = 0, top = 0, threads = 0;
    int drop_bbl = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--drop-bbl")) drop_bbl = 1;
        else if (hsi_cli_opt(argc, argv, &i, "--select", &spec)) {
            if (!spec) return hsi_cli_usage_error(cmd, "--select needs a list");
        } else if (hsi_cli_opt(argc, argv, &i, "--wavelengths", &wls)) {
            if (!wls) return hsi_cli_usage_error(cmd, "--wavelengths needs ranges");
        } else if (hsi_cli_opt(argc, argv, &i, "--rank", &rank)) {
            if (!rank || strcmp(rank, "variance")) return hsi_cli_usage_error(cmd, "--rank supports 'variance'");
        } else if (hsi_cli_opt(argc, argv, &i, "--opbs", &v)) {
            if (!hsi_cli_parse_int(cmd, "--opbs", v, 1, 1 << 20, &opbs)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--top", &v)) {
            if (!hsi_cli_parse_int(cmd, "--top", v, 1, 1 << 20, &top)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--mask", &mask_path)) {
            if (!mask_path) return hsi_cli_usage_error(cmd, "--mask needs a label file");
        } else if (hsi_cli_opt(argc, argv, &i, "--threads", &v)) {
            if (!hsi_cli_parse_int(cmd, "--threads", v, 1, 64, &threads)) return HSI_EXIT_USAGE;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return hsi_cli_usage_error(cmd, "unknown option '%s'", argv[i]);
        } else if (!in) {
            in = argv[i];
        } else {
            return hsi_cli_usage_error(cmd, "one input only");
        }
    }
    if (!in) return hsi_cli_usage_error(cmd, "needs an input cube");
    if (rank && opbs) return hsi_cli_usage_error(cmd, "give --rank or --opbs, not both");
    if (!spec && !wls && !rank && !opbs && !drop_bbl)
        return hsi_cli_usage_error(cmd, "give --select, --wavelengths, --rank, --opbs or --drop-bbl");

    hsi_status st = HSI_OK;
    int rc = HSI_EXIT_OK;
    hsi_cube c;
    kcli_mask mk = {0};
    hsi_stats s = {0};
    hsi_norm norm = {0};
    int64_t *sel = NULL, ns = 0, *out = NULL, n_out = 0;
    double *score = NULL, *mean = NULL, *cov = NULL;
    const char *score_name = NULL;
    hsi_cube_init(&c);
    HSI_TRY(hsi_cube_open(&c, in, NULL));
    if (mask_path) HSI_TRY(kcli_mask_open(&mk, mask_path, &c.view));
    HSI_TRY(hsi_prep_select_bands(&sel, &ns, &c.meta, spec, wls, drop_bbl));
    const hsi_meta *m = &c.meta;
    out = malloc(sizeof(int64_t) * (size_t)ns);
    score = calloc((size_t)ns, sizeof(double));
    if (!out || !score) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    if (rank) {
        hsi_stats_opts so = {.mask = mk.open ? &mk.view : NULL, .has_ignore = m->has_ignore_value,
                             .ignore_value = m->ignore_value, .n_threads = (int)threads,
                             .progress_label = "variance"};
        HSI_TRY(hsi_stats_compute(&s, &c.view, &so));
        double *var = malloc(sizeof(double) * (size_t)ns);
        int64_t *ord = malloc(sizeof(int64_t) * (size_t)ns);
        if (!var || !ord) {
            free(var);
            free(ord);
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        for (int64_t i = 0; i < ns; i++) var[i] = s.var[sel[i]];
        hsi_bands_rank_variance(ord, var, ns);
        n_out = top && top < ns ? top : ns;
        for (int64_t i = 0; i < n_out; i++) {
            out[i] = sel[ord[i]];
            score[i] = var[ord[i]];
        }
        score_name = "variance";
        free(var);
        free(ord);
    } else if (opbs) {
        if (opbs > ns) {
            st = HSI_FAIL(HSI_ERR_ARG, "--opbs %lld: only %lld bands to choose from", opbs, (long long)ns);
            goto cleanup;
        }
        HSI_TRY(hsi_norm_build(&norm, HSI_NORM_NONE, c.view.shape[0], sel, ns, NULL, NULL, 0, 0));
        mean = malloc(sizeof(double) * (size_t)ns);
        cov = malloc(sizeof(double) * (size_t)(ns * ns));
        if (!mean || !cov) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory for a %lld^2 covariance", (long long)ns);
            goto cleanup;
        }
        hsi_pca_opts po = {.mask = mk.open ? &mk.view : NULL, .n_threads = (int)threads,
                           .progress_label = "covariance"};
        HSI_TRY(hsi_covariance(mean, cov, NULL, &c.view, &norm, &po));
        int64_t *pick = malloc(sizeof(int64_t) * (size_t)opbs);
        if (!pick) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        st = hsi_bands_opbs(pick, score, cov, ns, opbs);
        for (int64_t i = 0; st == HSI_OK && i < opbs; i++) out[i] = sel[pick[i]];
        free(pick);
        if (st != HSI_OK) goto cleanup;
        n_out = opbs;
        score_name = "residual-variance";
    } else {
        memcpy(out, sel, sizeof(int64_t) * (size_t)ns);
        n_out = ns;
    }
    printf("# %s: %lld of %lld bands%s\n", in, (long long)n_out, (long long)m->n_bands,
           rank ? " by variance" : opbs ? " by OPBS (pick order)" : "");
    for (int64_t i = 0; i < n_out; i++) print_band(m, out[i], score_name, score[i]);
    printf("bands: ");
    for (int64_t i = 0; i < n_out;) {
        int64_t j = i;
        while (j + 1 < n_out && out[j + 1] == out[j] + 1) j++;
        if (j > i) printf("%s%lld-%lld", i ? "," : "", (long long)out[i] + 1, (long long)out[j] + 1);
        else printf("%s%lld", i ? "," : "", (long long)out[i] + 1);
        i = j + 1;
    }
    printf("\n");
cleanup:
    if (st != HSI_OK) rc = hsi_cli_fail(cmd, st);
    free(sel);
    free(out);
    free(score);
    free(mean);
    free(cov);
    hsi_norm_free(&norm);
    hsi_stats_free(&s);
    kcli_mask_close(&mk);
    hsi_cube_free(&c);
    return rc;
}

HSI_CLI_COMMAND(bands, {"bands", "band selection: list, wavelengths, bbl, variance ranking, OPBS", usage,
                        run_bands})

/* cmd_pca.c — `hsi pca fit IN MODEL` (covariance pass + eigenproblem, the
 * model saved with its band selection and normalisation) and `hsi pca
 * apply MODEL IN OUT.hdr` (fused projection to a float32 ENVI cube). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kcli.h"

static const char usage[] =
    "usage: hsi pca fit IN MODEL [-k K | --variance F] [--whiten] [--mask LABELS]\n"
    "                   [--bands SPEC] [--wavelengths SPEC] [--drop-bbl]\n"
    "                   [--normalize none|zscore|minmax|global-minmax|l2]\n"
    "                   [--tile-lines N] [--threads N] [--overwrite]\n"
    "       hsi pca apply MODEL IN OUT.hdr [--interleave bsq|bil|bip] [--tile-lines N]\n"
    "                   [--threads N] [--device cpu|cuda|auto] [--overwrite]\n"
    "\n"
    "fit: covariance of the selected (and normalised) spectra of IN by ssyrk over\n"
    "pixel blocks, eigenpairs by LAPACK dsyevr; keeps K components (default 10) or\n"
    "as many as explain more than F (0..1) of the variance. --mask fits on pixels\n"
    "whose label is nonzero only. Each component's largest loading is made positive.\n"
    "MODEL is a safetensors file (band list, normalisation, mean, components,\n"
    "explained variance; see docs/run-directory.md), the same as `hsi preprocess\n"
    "--save-model` writes; the summary goes to stdout.\n"
    "apply: projects IN (same band count as the cube the model was fitted on) and\n"
    "writes float32 scores with band names 'PCn (x.x %)'. MODEL may also be a\n"
    "preprocessing model without PCA, or an older hsi's binary PCA model.\n"
    KCLI_DEVICE_HELP "                    (apply only)\n";

static int fit(int argc, char **argv)
{
    const char *cmd = "pca fit", *in = NULL, *model = NULL;
    kcli_opts ko = {.normalize = "none"};
    const char *mask_path = NULL, *v = NULL;
    int whiten = 0, overwrite = 0;
    long long k = 0;
    double frac = 0;
    for (int i = 1; i < argc; i++) {
        int r = kcli_opt(cmd, argc, argv, &i, &ko, KCLI_OPT_BANDS | KCLI_OPT_NORMALIZE | KCLI_OPT_TILES);
        if (r < 0) return HSI_EXIT_USAGE;
        if (r) continue;
        if (!strcmp(argv[i], "--whiten")) whiten = 1;
        else if (!strcmp(argv[i], "--overwrite")) overwrite = 1;
        else if (hsi_cli_opt(argc, argv, &i, "-k", &v)) {
            if (!hsi_cli_parse_int(cmd, "-k", v, 1, 1 << 20, &k)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--variance", &v)) {
            if (!hsi_cli_parse_double(cmd, "--variance", v, &frac)) return HSI_EXIT_USAGE;
            if (!(frac > 0 && frac <= 1)) return hsi_cli_usage_error(cmd, "--variance expects 0 < F <= 1, got %s", v);
        } else if (hsi_cli_opt(argc, argv, &i, "--mask", &mask_path)) {
            if (!mask_path) return hsi_cli_usage_error(cmd, "--mask needs a label file");
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return hsi_cli_usage_error(cmd, "unknown option '%s'", argv[i]);
        } else if (!in) {
            in = argv[i];
        } else if (!model) {
            model = argv[i];
        } else {
            return hsi_cli_usage_error(cmd, "too many arguments ('%s')", argv[i]);
        }
    }
    if (!in || !model) return hsi_cli_usage_error(cmd, "needs IN and MODEL");
    if (k && frac) return hsi_cli_usage_error(cmd, "give -k or --variance, not both");
    if (!k && !frac) k = 10;
    hsi_norm_mode mode;
    if (hsi_norm_mode_parse(&mode, ko.normalize) != HSI_OK) return hsi_cli_usage_error(cmd, "%s", hsi_last_error());

    hsi_status st = HSI_OK;
    int rc = HSI_EXIT_OK;
    hsi_cube c;
    kcli_mask mk = {0};
    hsi_prep p = {0};
    hsi_cube_init(&c);
    HSI_TRY(hsi_cube_open(&c, in, NULL));
    HSI_TRY(hsi_cli_check_output(model, c.header_path, c.data_path, overwrite));
    if (mask_path) HSI_TRY(kcli_mask_open(&mk, mask_path, &c.view));
    HSI_TRY(kcli_fit(&p, &c, &mk, &ko, mode, k, frac, whiten, "-k", NULL));
    HSI_TRY(hsi_prep_save(&p, model));
    const hsi_pca *pca = &p.pca;
    printf("# %s: PCA of %lld bands (normalize %s%s) on %lld pixels -> %s\n", in,
           (long long)p.norm.n_bands, hsi_norm_mode_name(mode), whiten ? ", whitened" : "",
           (long long)pca->n_samples, model);
    printf("%4s %16s %10s %10s\n", "pc", "variance", "ratio %", "cum %");
    double cum = 0;
    for (int64_t i = 0; i < pca->n_components; i++) {
        cum += pca->explained_variance_ratio[i];
        printf("%4lld %16.8g %10.4f %10.4f\n", (long long)i + 1, pca->explained_variance[i],
               100 * pca->explained_variance_ratio[i], 100 * cum);
    }
cleanup:
    if (st != HSI_OK) rc = hsi_cli_fail(cmd, st);
    hsi_prep_free(&p);
    kcli_mask_close(&mk);
    hsi_cube_free(&c);
    return rc;
}

static int apply(int argc, char **argv)
{
    const char *cmd = "pca apply", *model = NULL, *in = NULL, *out = NULL, *il_s = "bsq";
    kcli_opts ko = {0};
    int overwrite = 0;
    for (int i = 1; i < argc; i++) {
        int r = kcli_opt(cmd, argc, argv, &i, &ko, KCLI_OPT_TILES | KCLI_OPT_DEVICE);
        if (r < 0) return HSI_EXIT_USAGE;
        if (r) continue;
        if (hsi_cli_opt(argc, argv, &i, "--interleave", &il_s)) {
            if (!il_s) return hsi_cli_usage_error(cmd, "--interleave needs bsq, bil or bip");
        } else if (!strcmp(argv[i], "--overwrite")) {
            overwrite = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return hsi_cli_usage_error(cmd, "unknown option '%s'", argv[i]);
        } else if (!model) {
            model = argv[i];
        } else if (!in) {
            in = argv[i];
        } else if (!out) {
            out = argv[i];
        } else {
            return hsi_cli_usage_error(cmd, "too many arguments ('%s')", argv[i]);
        }
    }
    if (!model || !in || !out) return hsi_cli_usage_error(cmd, "needs MODEL, IN and OUT.hdr");
    hsi_interleave il;
    if (!kcli_parse_interleave(cmd, il_s, &il)) return HSI_EXIT_USAGE;
    hsi_status st = HSI_OK;
    int rc = HSI_EXIT_OK;
    hsi_cube c;
    hsi_prep p = {0};
    hsi_meta om;
    hsi_meta_init(&om);
    hsi_cube_init(&c);
    HSI_TRY(hsi_cli_device_ready(ko.device));
    HSI_TRY(hsi_prep_load(&p, model));
    HSI_TRY(hsi_cube_open(&c, in, NULL));
    HSI_TRY(hsi_cli_check_output(out, c.header_path, c.data_path, overwrite));
    if (p.n_cube_bands != c.view.shape[0]) {
        st = HSI_FAIL(HSI_ERR_ARG, "%s: the model %s was fitted on a %lld-band cube, this one has %lld bands", in,
                      model, (long long)p.n_cube_bands, (long long)c.view.shape[0]);
        goto cleanup;
    }
    char what[256];
    snprintf(what, sizeof what, "hsi pca apply: %s", model);
    HSI_TRY(hsi_prep_out_meta(&om, &c.meta, &p, what));
    hsi_prep_pass pass = kcli_pass(&ko);
    HSI_TRY(hsi_prep_write_envi(out, &p, &c.view, &om, il, &pass));
cleanup:
    if (st != HSI_OK) rc = hsi_cli_fail(cmd, st);
    hsi_meta_free(&om);
    hsi_prep_free(&p);
    hsi_cube_free(&c);
    return rc;
}

static int run_pca(int argc, char **argv)
{
    if (argc < 2) return hsi_cli_usage_error("pca", "needs 'fit' or 'apply'");
    if (!strcmp(argv[1], "fit")) return fit(argc - 1, argv + 1);
    if (!strcmp(argv[1], "apply")) return apply(argc - 1, argv + 1);
    return hsi_cli_usage_error("pca", "expected 'fit' or 'apply', got '%s'", argv[1]);
}

HSI_CLI_COMMAND(pca, {"pca", "fit a PCA (saved model) or apply one: float32 scores", usage, run_pca})

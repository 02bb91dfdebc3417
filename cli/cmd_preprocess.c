/* cmd_preprocess.c — `hsi preprocess IN OUT.hdr`: band selection ->
 * normalisation -> optional PCA in one fused pass over the raw cube,
 * written as a float32 ENVI cube whose band names say what each band is.
 * Fitting (statistics, PCA) uses the --fit-mask pixels when given. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/dist.h"
#include "kcli.h"
#include "kernels/fused.h"

static const char usage[] =
    "usage: hsi preprocess IN OUT.hdr [--bands SPEC] [--wavelengths SPEC] [--drop-bbl]\n"
    "                      [--normalize none|zscore|minmax|global-minmax|l2]\n"
    "                      [--pca K | --pca-variance F] [--whiten] [--fit-mask LABELS]\n"
    "                      [--save-model MODEL] [--interleave bsq|bil|bip]\n"
    "                      [--tile-lines N] [--threads N] [--device cpu|cuda|auto]\n"
    "                      [--overwrite]\n"
    "\n"
    "Reads the raw cube in tiles, so memory stays bounded whatever the size, and\n"
    "writes float32: one read to fit (statistics and the PCA covariance together;\n"
    "a second when an ignore value or l2 needs the statistics first), one to write.\n"
    "  --bands SPEC        1-based bands, e.g. 1-20,35,40-\n"
    "  --wavelengths SPEC  wavelength ranges in nm, e.g. 400-1340,1450-1800,1960-2450\n"
    "                      (with --bands: the bands in both)\n"
    "  --drop-bbl          drop the bands the header's bbl marks bad (0)\n"
    "  --normalize MODE    per-band zscore or minmax, global-minmax over the selected\n"
    "                      bands, l2 (unit-norm spectra), none (default). The header's\n"
    "                      gain/offset and reflectance scale factor are applied first;\n"
    "                      'data ignore value' elements are replaced by the band mean.\n"
    "  --pca K             project on the first K principal components\n"
    "  --pca-variance F    ... on as many as explain more than F (0..1) of the variance\n"
    "  --whiten            divide each component by its standard deviation\n"
    "  --fit-mask LABELS   fit statistics and PCA on pixels whose label is nonzero only\n"
    "                      (e.g. the training labels: no test pixels in the fit)\n"
    "  --save-model MODEL  also write the fitted transform (safetensors; for 'hsi pca apply')\n"
    "  --interleave I      output interleave (default bsq)\n"
    "  --overwrite         replace OUT (and MODEL) when they exist (never IN)\n"
    KCLI_DEVICE_HELP
    "                    (the statistics, the PCA covariance and the fused pass;\n"
    "                    under mpirun the fit is on the CPU)\n"
    "With --normalize none --pca K the output is (x - mean) . V_k, like scikit-learn's\n"
    "PCA(K).fit_transform up to each component's sign (hsi makes the largest\n"
    "loading of each component positive). Band names read e.g. 'PC1 (41.3 %)'.\n";

static int run_preprocess(int argc, char **argv)
{
    const char *cmd = "preprocess", *in = NULL, *out = NULL;
    kcli_opts ko = {.normalize = "none"};
    const char *mask_path = NULL, *model_path = NULL, *il_s = "bsq", *v = NULL;
    int whiten = 0, overwrite = 0;
    long long k = 0;
    double frac = 0;
    for (int i = 1; i < argc; i++) {
        int r = kcli_opt(cmd, argc, argv, &i, &ko, KCLI_OPT_BANDS | KCLI_OPT_NORMALIZE | KCLI_OPT_TILES | KCLI_OPT_DEVICE);
        if (r < 0) return HSI_EXIT_USAGE;
        if (r) continue;
        if (!strcmp(argv[i], "--whiten")) whiten = 1;
        else if (hsi_cli_opt(argc, argv, &i, "--pca", &v)) {
            if (!hsi_cli_parse_int(cmd, "--pca", v, 1, 1 << 20, &k)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--pca-variance", &v)) {
            if (!hsi_cli_parse_double(cmd, "--pca-variance", v, &frac)) return HSI_EXIT_USAGE;
            if (!(frac > 0 && frac <= 1)) return hsi_cli_usage_error(cmd, "--pca-variance expects 0 < F <= 1, got %s", v);
        } else if (hsi_cli_opt(argc, argv, &i, "--fit-mask", &mask_path)) {
            if (!mask_path) return hsi_cli_usage_error(cmd, "--fit-mask needs a label file");
        } else if (hsi_cli_opt(argc, argv, &i, "--save-model", &model_path)) {
            if (!model_path) return hsi_cli_usage_error(cmd, "--save-model needs a path");
        } else if (hsi_cli_opt(argc, argv, &i, "--interleave", &il_s)) {
            if (!il_s) return hsi_cli_usage_error(cmd, "--interleave needs bsq, bil or bip");
        } else if (!strcmp(argv[i], "--overwrite")) {
            overwrite = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return hsi_cli_usage_error(cmd, "unknown option '%s'", argv[i]);
        } else if (!in) {
            in = argv[i];
        } else if (!out) {
            out = argv[i];
        } else {
            return hsi_cli_usage_error(cmd, "too many arguments ('%s')", argv[i]);
        }
    }
    if (!in || !out) return hsi_cli_usage_error(cmd, "needs IN and OUT.hdr");
    if (k && frac) return hsi_cli_usage_error(cmd, "give --pca or --pca-variance, not both");
    if (whiten && !k && !frac) return hsi_cli_usage_error(cmd, "--whiten needs --pca or --pca-variance");
    hsi_norm_mode mode;
    if (hsi_norm_mode_parse(&mode, ko.normalize) != HSI_OK) return hsi_cli_usage_error(cmd, "%s", hsi_last_error());
    hsi_interleave il;
    if (!kcli_parse_interleave(cmd, il_s, &il)) return HSI_EXIT_USAGE;

    hsi_status st = HSI_OK;
    int rc = HSI_EXIT_OK;
    hsi_cube c;
    kcli_mask mk = {0};
    hsi_prep p = {0};
    hsi_meta om;
    hsi_meta_init(&om);
    hsi_cube_init(&c);
    double t0 = hsi_now();
    HSI_TRY(hsi_cli_device_ready(ko.device));
    HSI_TRY(hsi_cube_open(&c, in, NULL));
    HSI_TRY(hsi_cli_check_output(out, c.header_path, c.data_path, overwrite));
    if (model_path) HSI_TRY(hsi_cli_check_output(model_path, c.header_path, c.data_path, overwrite));
    if (mask_path) HSI_TRY(kcli_mask_open(&mk, mask_path, &c.view));
    double t_open = hsi_now();
    HSI_TRY(kcli_fit(&p, &c, &mk, &ko, mode, k, frac, whiten, "--pca", hsi_prep_dist_split()));
    double t_fit = hsi_now();
    char what[256];
    snprintf(what, sizeof what, "hsi preprocess: %lld bands, normalize %s%s%s", (long long)p.norm.n_bands,
             hsi_norm_mode_name(mode), p.has_pca ? ", pca" : "", p.has_pca && whiten ? " (whitened)" : "");
    HSI_TRY(hsi_prep_out_meta(&om, &c.meta, &p, what));
    if (model_path && hsi_dist_rank() == 0) HSI_TRY(hsi_prep_save(&p, model_path));
    /* under mpirun: each rank projects and writes its share of the lines */
    hsi_prep_pass pass = kcli_pass(&ko);
    HSI_TRY(hsi_prep_write_envi_dist(out, &p, &c.view, &om, il, &pass));
    if (!hsi_is_quiet() && hsi_dist_rank() == 0) {
        double t1 = hsi_now(), gb = (double)c.view.shape[0] * (double)c.view.shape[1] * (double)c.view.shape[2] *
                                         (double)hsi_dtype_size(c.view.dtype) / 1e9;
        fprintf(stderr, "hsi preprocess: %s -> %s: %lld bands -> %lld float32 bands (%s) in %.2f s (%.2f GB/s)\n", in,
                out, (long long)c.view.shape[0], (long long)hsi_prep_n_out(&p), hsi_interleave_name(il), t1 - t0,
                gb / (t1 - t0));
        fprintf(stderr, "  open %.2f s, fit %.2f s, %s and write %.2f s\n", t_open - t0, t_fit - t_open,
                p.has_pca ? "project" : "normalise", t1 - t_fit);
        if (p.has_pca) {
            double cum = 0;
            for (int64_t i = 0; i < p.pca.n_components; i++) cum += p.pca.explained_variance_ratio[i];
            fprintf(stderr, "  %lld components explain %.2f %% of the variance (fit on %lld pixels)\n",
                    (long long)p.pca.n_components, 100 * cum, (long long)p.pca.n_samples);
        }
    }
cleanup:
    if (st != HSI_OK) rc = hsi_cli_fail(cmd, st);
    hsi_meta_free(&om);
    hsi_prep_free(&p);
    kcli_mask_close(&mk);
    hsi_cube_free(&c);
    return rc;
}

HSI_CLI_COMMAND(preprocess, {"preprocess", "select bands, normalise, PCA: one fused pass to float32 ENVI", usage,
                             run_preprocess})

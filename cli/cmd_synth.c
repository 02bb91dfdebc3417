/* cmd_synth.c — `hsi synth OUT [--seed N] ...`: writes the synthetic labelled
 * scene (OUT.hdr + OUT.img, uint16 BIL, and OUT_gt.hdr + OUT_gt, an ENVI
 * classification file). data_samples/ is made with it. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "io/envi.h"
#include "pipeline/synth.h"

static int synth_run(int argc, char **argv)
{
    hsi_synth_params p;
    hsi_synth_params_init(&p);
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v;
        long long k;
        double d;
        if (hsi_cli_opt(argc, argv, &i, "--seed", &v)) {
            if (!hsi_cli_parse_int("synth", "--seed", v, 0, (1LL << 62), &k)) return HSI_EXIT_USAGE;
            p.seed = (uint64_t)k;
        } else if (hsi_cli_opt(argc, argv, &i, "--size", &v)) {
            if (!hsi_cli_parse_int("synth", "--size", v, 8, 8192, &k)) return HSI_EXIT_USAGE;
            p.n_lines = p.n_samples = (int)k;
        } else if (hsi_cli_opt(argc, argv, &i, "--bands", &v)) {
            if (!hsi_cli_parse_int("synth", "--bands", v, 4, 1024, &k)) return HSI_EXIT_USAGE;
            p.n_bands = (int)k;
        } else if (hsi_cli_opt(argc, argv, &i, "--classes", &v)) {
            if (!hsi_cli_parse_int("synth", "--classes", v, 2, 8, &k)) return HSI_EXIT_USAGE;
            p.n_classes = (int)k;
        } else if (hsi_cli_opt(argc, argv, &i, "--fields", &v)) {
            if (!hsi_cli_parse_int("synth", "--fields", v, 2, 10000, &k)) return HSI_EXIT_USAGE;
            p.n_fields = (int)k;
        } else if (hsi_cli_opt(argc, argv, &i, "--noise", &v)) {
            if (!hsi_cli_parse_double("synth", "--noise", v, &d)) return HSI_EXIT_USAGE;
            if (d < 0 || d > 1) return hsi_cli_usage_error("synth", "--noise must be in 0..1");
            p.noise = d;
        } else if (argv[i][0] == '-') {
            return hsi_cli_usage_error("synth", "unknown option '%s'", argv[i]);
        } else if (!out) {
            out = argv[i];
        } else {
            return hsi_cli_usage_error("synth", "one output name only");
        }
    }
    if (!out) return hsi_cli_usage_error("synth", "where to? (hsi synth OUT)");
    hsi_view cube, labels;
    hsi_meta cm, lm;
    hsi_status st = hsi_synth_scene(&cube, &labels, &cm, &lm, &p);
    if (st != HSI_OK) return hsi_cli_fail("synth", st);
    size_t n = strlen(out) + 16;
    char *hdr = malloc(n), *gt = malloc(n);
    snprintf(hdr, n, "%s.hdr", out);
    snprintf(gt, n, "%s_gt.hdr", out);
    hsi_envi_write_options o;
    hsi_envi_write_options_init(&o);
    o.interleave = HSI_BIL;
    o.data_ext = ".img";
    st = hsi_envi_write(hdr, &cube, &cm, &o);
    if (st == HSI_OK) {
        hsi_view l3;
        int64_t shape[3] = {1, labels.shape[0], labels.shape[1]};
        st = hsi_view_reshape(&l3, &labels, 3, shape);
        if (st == HSI_OK) {
            hsi_envi_write_options_init(&o);
            st = hsi_envi_write(gt, &l3, &lm, &o);
            hsi_view_release(&l3);
        }
    }
    int rc = st == HSI_OK ? HSI_EXIT_OK : hsi_cli_fail("synth", st);
    if (st == HSI_OK)
        printf("wrote %s (%d x %d x %d uint16 BIL) and %s (%d classes)\n", hdr, p.n_samples,
               p.n_lines, p.n_bands, gt, p.n_classes);
    free(hdr);
    free(gt);
    hsi_view_release(&cube);
    hsi_view_release(&labels);
    hsi_meta_free(&cm);
    hsi_meta_free(&lm);
    return rc;
}

HSI_CLI_COMMAND(synth, {"synth", "write the deterministic synthetic labelled scene",
                        "usage: hsi synth OUT [--seed N] [--size N] [--bands N] [--classes N]\n"
                        "                 [--fields N] [--noise F]\n"
                        "\n"
                        "Writes OUT.hdr + OUT.img (uint16, BIL, wavelengths 400-2500 nm) and\n"
                        "OUT_gt.hdr + OUT_gt (ENVI classification, 0 = unlabelled, class names\n"
                        "and colours). Fields are spatially coherent; class spectra overlap;\n"
                        "illumination varies smoothly; field borders mix; sensor noise is\n"
                        "Gaussian. The same seed gives the same bytes.\n"
                        "Defaults: seed 42, 96 x 96 pixels, 128 bands, 8 classes, 40 fields,\n"
                        "noise 0.05.\n",
                        synth_run})

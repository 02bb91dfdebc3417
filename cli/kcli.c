/* kcli.c — what the preprocessing commands share: mask files and the
 * shared options. No command lives here (see cmd_stats.c, cmd_bands.c,
 * cmd_pca.c, cmd_preprocess.c), and no part of the job (that is
 * pipeline/preprocess.c). */
#include "kcli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

hsi_status kcli_mask_open(kcli_mask *m, const char *path, const hsi_view *like)
{
    hsi_status st = HSI_OK;
    memset(m, 0, sizeof *m);
    hsi_cube_init(&m->cube);
    /* a FIFO, a directory, ...: refused as "the mask" (a name that does not
     * exist may be a GDAL one: hsi_cube_open decides) */
    struct stat sb;
    if (lstat(path, &sb) == 0) HSI_TRY(hsi_input_check(path, "mask"));
    HSI_TRY(hsi_cube_open(&m->cube, path, NULL));
    m->open = 1;
    const hsi_view *v = &m->cube.view;
    if (v->shape[0] != 1 || v->shape[1] != like->shape[1] || v->shape[2] != like->shape[2]) {
        st = HSI_FAIL(HSI_ERR_ARG,
                      "%s: a mask must be one band of %lld lines x %lld samples like the cube, found %lld bands "
                      "x %lld lines x %lld samples",
                      path, (long long)like->shape[1], (long long)like->shape[2], (long long)v->shape[0],
                      (long long)v->shape[1], (long long)v->shape[2]);
        goto cleanup;
    }
    HSI_TRY(hsi_view_index(&m->view, v, 0, 0));
cleanup:
    if (st != HSI_OK) kcli_mask_close(m);
    return st;
}

void kcli_mask_close(kcli_mask *m)
{
    if (!m || !m->open) return;
    hsi_view_release(&m->view);
    hsi_cube_free(&m->cube);
    memset(m, 0, sizeof *m);
}

int kcli_parse_interleave(const char *cmd, const char *s, hsi_interleave *out)
{
    if (s && !strcmp(s, "bsq")) *out = HSI_BSQ;
    else if (s && !strcmp(s, "bil")) *out = HSI_BIL;
    else if (s && !strcmp(s, "bip")) *out = HSI_BIP;
    else {
        hsi_cli_usage_error(cmd, "--interleave expects bsq, bil or bip, got '%s'", s ? s : "");
        return 0;
    }
    return 1;
}

hsi_status kcli_fit(hsi_prep *p, const hsi_cube *c, const kcli_mask *mk, const kcli_opts *o,
                    hsi_norm_mode mode, long long k, double frac, int whiten, const char *k_opt,
                    const hsi_pass_split *split)
{
    int64_t *sel = NULL, ns = 0;
    hsi_status st = hsi_prep_select_bands(&sel, &ns, &c->meta, o->bands, o->wavelengths, o->drop_bbl);
    free(sel);
    if (st != HSI_OK) return st;
    if (k > ns) return HSI_FAIL(HSI_ERR_ARG, "%s %lld: only %lld bands are selected", k_opt, k, (long long)ns);
    hsi_prep_spec s;
    hsi_prep_spec_init(&s);
    s.bands = o->bands;
    s.wavelengths = o->wavelengths;
    s.drop_bbl = o->drop_bbl;
    s.norm = mode;
    s.pca = k;
    s.pca_variance = frac;
    s.whiten = whiten;
    s.tile_lines = o->tile_lines;
    s.n_threads = (int)o->threads;
    s.progress = 1;
    s.split = split;
    s.device = o->device;
    return hsi_prep_fit(p, c, mk && mk->open ? &mk->view : NULL, &s);
}

int kcli_opt(const char *cmd, int argc, char **argv, int *i, kcli_opts *o, unsigned which)
{
    const char *v = NULL;
    if (which & KCLI_OPT_BANDS) {
        if (!strcmp(argv[*i], "--drop-bbl")) {
            o->drop_bbl = 1;
            return 1;
        }
        if (hsi_cli_opt(argc, argv, i, "--bands", &o->bands))
            return o->bands ? 1 : (hsi_cli_usage_error(cmd, "--bands needs a list"), -1);
        if (hsi_cli_opt(argc, argv, i, "--wavelengths", &o->wavelengths))
            return o->wavelengths ? 1 : (hsi_cli_usage_error(cmd, "--wavelengths needs ranges"), -1);
    }
    if ((which & KCLI_OPT_NORMALIZE) && hsi_cli_opt(argc, argv, i, "--normalize", &o->normalize))
        return o->normalize ? 1 : (hsi_cli_usage_error(cmd, "--normalize needs a mode"), -1);
    if (which & KCLI_OPT_TILES) {
        if (hsi_cli_opt(argc, argv, i, "--tile-lines", &v))
            return hsi_cli_parse_int(cmd, "--tile-lines", v, 1, 1 << 30, &o->tile_lines) ? 1 : -1;
        if (hsi_cli_opt(argc, argv, i, "--threads", &v))
            return hsi_cli_parse_int(cmd, "--threads", v, 1, 64, &o->threads) ? 1 : -1;
    }
    if ((which & KCLI_OPT_DEVICE) && hsi_cli_opt(argc, argv, i, "--device", &v))
        return hsi_cli_parse_device(cmd, v, &o->device) ? 1 : -1;
    return 0;
}

hsi_prep_pass kcli_pass(const kcli_opts *o)
{
    return (hsi_prep_pass){.tile_lines = o->tile_lines, .n_threads = (int)o->threads,
                           .device = o->device};
}

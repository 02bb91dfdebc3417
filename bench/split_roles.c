/* split_roles.c — bench helper: writes the per-pixel roles of the split that
 * `hsi train` makes for the same options (hsi_split_make with the parameters
 * cli/train.c sets), so that bench/svm_baseline.py scores the SVM on exactly
 * the pixels the CNN was scored on. Not part of the library or the CLI.
 *
 *   split_roles LABELS VAR|- random|disjoint TRAIN_FRACTION VAL_FRACTION SEED PATCH BLOCK OUT
 *
 * OUT: raw uint8, (lines, samples) row-major, 0 none, 1 train, 2 val, 3 test;
 * the first line of stdout is "lines samples". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "io/labels.h"
#include "pipeline/split.h"

int main(int argc, char **argv)
{
    if (argc != 10) {
        fprintf(stderr, "usage: split_roles LABELS VAR|- random|disjoint TRAIN_FRACTION "
                        "VAL_FRACTION SEED PATCH BLOCK OUT\n");
        return 2;
    }
    hsi_status st = HSI_OK;
    hsi_labels lab;
    hsi_split sp;
    FILE *fp = NULL;
    int rc = 1;
    hsi_labels_init(&lab);
    memset(&sp, 0, sizeof sp);
    hsi_split_params p;
    hsi_split_params_init(&p);
    p.mode = strcmp(argv[3], "disjoint") == 0 ? HSI_SPLIT_DISJOINT : HSI_SPLIT_RANDOM;
    p.train_fraction = atof(argv[4]);
    p.val_fraction = atof(argv[5]);
    p.seed = strtoull(argv[6], NULL, 10);
    int patch = atoi(argv[7]);
    p.block = atoi(argv[8]);
    /* as cli/train.c: the guard band only in disjoint mode */
    p.patch_radius = p.mode == HSI_SPLIT_DISJOINT ? patch / 2 : 0;
    HSI_TRY(hsi_labels_open(&lab, argv[1], strcmp(argv[2], "-") ? argv[2] : NULL));
    HSI_TRY(hsi_split_make(&sp, &lab.map, &p));
    fp = fopen(argv[9], "wb");
    if (!fp) {
        st = HSI_FAIL(HSI_ERR_IO, "%s: cannot create", argv[9]);
        goto cleanup;
    }
    size_t n = (size_t)(sp.n_lines * sp.n_samples);
    if (fwrite(sp.role, 1, n, fp) != n) {
        st = HSI_FAIL(HSI_ERR_IO, "%s: short write", argv[9]);
        goto cleanup;
    }
    printf("%lld %lld\n", (long long)sp.n_lines, (long long)sp.n_samples);
    rc = 0;
cleanup:
    if (fp && fclose(fp) != 0 && rc == 0) rc = 1;
    if (st != HSI_OK) fprintf(stderr, "split_roles: %s\n", hsi_last_error());
    hsi_split_free(&sp);
    hsi_labels_free(&lab);
    return rc;
}

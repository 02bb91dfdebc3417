/* fuzz_prep.c — libFuzzer target for the saved preprocessing
 * (hsi_prep_parse from memory: the safetensors file of
 * docs/run-directory.md or an older hsi's HSIPCA1 pca.bin). A model that
 * parses must be consistent (bands inside the cube, components inside the
 * features) and is then applied to a small cube: the fused pass must stay
 * inside its arrays. Anything else traps. No file is opened. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/preprocess.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int init;
    if (!init) {
        hsi_set_quiet(1);
        init = 1;
    }
    hsi_prep p;
    if (hsi_prep_parse(&p, data, size, "fuzz.safetensors") != HSI_OK) return 0;
    const hsi_norm *n = p.has_pca ? &p.pca.norm : &p.norm;
    if (p.n_cube_bands < 1 || n->n_bands < 1 || n->n_bands > p.n_cube_bands) __builtin_trap();
    for (int64_t i = 0; i < n->n_bands; i++)
        if (n->bands[i] < 0 || n->bands[i] >= p.n_cube_bands) __builtin_trap();
    if (p.has_pca && (p.pca.n_components < 1 || p.pca.n_components > n->n_bands ||
                      p.pca.n_features != n->n_bands))
        __builtin_trap();
    int64_t n_out = hsi_prep_n_out(&p);
    if (n_out < 1) __builtin_trap();
    /* applied to a 2 x 3 cube of the bands it wants (small models only) */
    if (p.n_cube_bands <= 512) {
        hsi_view cube, feat;
        int64_t shape[3] = {p.n_cube_bands, 2, 3};
        if (hsi_view_alloc(&cube, HSI_F32, 3, shape, HSI_BUF_HOST) == HSI_OK) {
            float *c = cube.buf->data;
            for (int64_t i = 0; i < p.n_cube_bands * 6; i++)
                c[i] = (float)(i % 17) - 3.0f;
            if (hsi_prep_transform(&feat, &p, &cube, &(hsi_prep_pass){.tile_lines = 1, .n_threads = 1}) == HSI_OK) {
                if (feat.shape[0] != n_out || feat.shape[1] != 2 || feat.shape[2] != 3)
                    __builtin_trap();
                hsi_view_release(&feat);
            }
            hsi_view_release(&cube);
        }
    }
    hsi_prep_free(&p);
    return 0;
}

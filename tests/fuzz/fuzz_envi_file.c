/* fuzz_envi_file.c — libFuzzer target for the ENVI file-level reader from
 * memory (hsi_envi_open_memory): header parse, layout, size checks, gzip
 * inflation ('file compression = 1') and the view, as hsi_envi_open does
 * after it has found and mapped the files. Input: the header text, one NUL
 * byte, then the data file's bytes (no NUL: a header with an empty data
 * file); a header is text, so its own bytes never hold a NUL. A cube that
 * opens must be viewable at every corner and agree with its header; the
 * file lookup itself (names, FIFOs) is not fuzzed here. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/envi.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int init;
    if (!init) {
        hsi_set_quiet(1);
        init = 1;
    }
    const uint8_t *nul = memchr(data, 0, size);
    size_t hn = nul ? (size_t)(nul - data) : size;
    size_t dn = nul ? size - hn - 1 : 0;
    /* exact-size copies: ASan sees any read past either file */
    char *hdr = malloc(hn ? hn : 1);
    uint8_t *bytes = malloc(dn ? dn : 1);
    if (!hdr || !bytes) __builtin_trap();
    memcpy(hdr, data, hn);
    if (dn) memcpy(bytes, nul + 1, dn);

    hsi_cube c;
    if (hsi_envi_open_memory(&c, hdr, hn, dn ? bytes : NULL, dn, "fuzz.hdr", "fuzz") == HSI_OK) {
        const hsi_meta *m = &c.meta;
        const hsi_view *v = &c.view;
        if (v->ndim != 3 || v->shape[0] != m->n_bands || v->shape[1] != m->n_lines ||
            v->shape[2] != m->n_samples || v->dtype != m->dtype || c.file_size != (int64_t)dn)
            __builtin_trap();
        if (m->file_compression == 1 && v->buf->data == (void *)bytes) __builtin_trap();
        if (m->file_compression != 1 && v->buf->data != (void *)bytes) __builtin_trap();
        /* all 8 corners, then up to 4096 elements in order */
        volatile double sink = 0;
        for (int k = 0; k < 8; k++) {
            int64_t idx[3] = {(k & 1) ? v->shape[0] - 1 : 0, (k & 2) ? v->shape[1] - 1 : 0,
                              (k & 4) ? v->shape[2] - 1 : 0};
            sink += hsi_view_get_f64(v, idx);
        }
        int64_t n = hsi_view_count(v);
        for (int64_t i = 0; i < n && i < 4096; i++) {
            int64_t idx[3] = {i / (v->shape[1] * v->shape[2]) % v->shape[0],
                              i / v->shape[2] % v->shape[1], i % v->shape[2]};
            sink += hsi_view_get_f64(v, idx);
        }
        (void)sink;
        hsi_cube_free(&c);
    }
    free(hdr);
    free(bytes);
    return 0;
}

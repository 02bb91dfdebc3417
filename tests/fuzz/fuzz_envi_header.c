/* fuzz_envi_header.c — libFuzzer target for the ENVI header parser
 * (hsi_envi_parse from memory). A header that parses is also formatted back
 * (hsi_envi_format_header) and re-parsed: the geometry must survive. Not a
 * test of the file reader (no files are touched). */
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
    hsi_meta m, r;
    if (hsi_envi_parse(&m, (const char *)data, size, "fuzz.hdr") != HSI_OK) return 0;
    char *text = NULL;
    if (hsi_envi_format_header(&text, &m, m.n_bands, m.n_lines, m.n_samples, m.dtype,
                               m.interleave, m.byte_order, m.header_offset) == HSI_OK) {
        if (hsi_envi_parse(&r, text, strlen(text), "fuzz-rewritten.hdr") != HSI_OK)
            __builtin_trap(); /* what we write, we must read */
        if (r.n_bands != m.n_bands || r.n_lines != m.n_lines || r.n_samples != m.n_samples ||
            r.dtype != m.dtype || r.interleave != m.interleave ||
            r.byte_order != m.byte_order || r.header_offset != m.header_offset)
            __builtin_trap();
        hsi_meta_free(&r);
        free(text);
    }
    hsi_meta_free(&m);
    return 0;
}

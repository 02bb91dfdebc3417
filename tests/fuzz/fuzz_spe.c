/* fuzz_spe.c — libFuzzer target for the Princeton SPE header + XML footer
 * parser (hsi_spe_parse and hsi_spe_probe from memory). A file that parses
 * must describe frames that lie inside the data area; anything else traps.
 * Not a test of file mapping (no files are touched). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/spe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int init;
    if (!init) {
        hsi_set_quiet(1);
        init = 1;
    }
    char why[512];
    (void)hsi_spe_probe(data, size, why, sizeof why);
    hsi_spe_info s;
    if (hsi_spe_parse(&s, data, size, "fuzz.spe", 1) != HSI_OK) return 0;
    uint64_t end = s.footer_offset ? s.footer_offset : size;
    if (s.n_rois < 1 || s.n_rois > HSI_SPE_MAX_ROIS || s.n_frames < 1 ||
        s.dtype == HSI_DT_INVALID)
        __builtin_trap();
    for (int r = 0; r < s.n_rois; r++) {
        const hsi_spe_roi *q = &s.rois[r];
        uint64_t last = HSI_SPE_HEADER_SIZE + (uint64_t)(s.n_frames - 1) * (uint64_t)s.frame_stride +
                        (uint64_t)q->offset + (uint64_t)q->size;
        if (q->width < 1 || q->height < 1 || last > end) __builtin_trap();
        if (q->wavelength) {
            volatile double sink = q->wavelength[q->width - 1];
            (void)sink;
        }
    }
    hsi_spe_info_free(&s);
    return 0;
}

/* fuzz_safetensors.c — libFuzzer target for the safetensors reader
 * (hsi_safetensors_parse from memory). Every tensor a file declares valid is
 * viewed and summed: views must stay inside the buffer. Not a test of module
 * loading (no modules are touched). */
#include <stdint.h>
#include <stdlib.h>

#include "models/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int init;
    if (!init) {
        hsi_set_quiet(1);
        init = 1;
    }
    hsi_st_file *f = NULL;
    if (hsi_safetensors_parse(&f, data, size, "fuzz.safetensors") != HSI_OK) return 0;
    double sum = 0;
    for (int i = 0; i < hsi_safetensors_count(f); i++) {
        hsi_view v;
        if (hsi_safetensors_view(f, i, &v) != HSI_OK) __builtin_trap(); /* validated: must fit */
        int64_t n = hsi_view_count(&v), idx[HSI_MAX_DIMS] = {0};
        for (int64_t k = 0; k < n && k < 4096; k++) {
            int64_t q = k;
            for (int d = v.ndim - 1; d >= 0; d--) {
                idx[d] = q % v.shape[d];
                q /= v.shape[d];
            }
            sum += hsi_view_get_f64(&v, idx);
        }
        hsi_view_release(&v);
    }
    (void)hsi_safetensors_meta(f, "format");
    hsi_safetensors_close(f);
    return sum == 12345.678 ? 1 : 0;
}

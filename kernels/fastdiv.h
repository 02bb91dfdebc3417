/* fastdiv.h — division by a divisor fixed at launch time, as a multiply-high
 * and a shift (Granlund & Montgomery 1994; the form PyTorch's IntDivider
 * uses): for d >= 1 and n < 2^31, q = (umulhi(n, m) + n) >> s with
 * s = ceil(log2 d), m = floor(2^32 (2^s - d) / d) + 1. The GPU kernels
 * split flat element indices into (row, column) with it, where a 64-bit
 * division per element costs more than the element's memory traffic.
 * Host and device (the host side for tests/test_kernels.c). */
#ifndef HSI_FASTDIV_H
#define HSI_FASTDIV_H

#include <stdint.h>

#ifdef __CUDACC__
#define HSI_FD_HD __host__ __device__
#else
#define HSI_FD_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hsi_fastdiv {
    uint32_t d, m, s;
} hsi_fastdiv;

/* d in 1 .. 2^31 - 1 */
static inline hsi_fastdiv hsi_fastdiv_make(uint32_t d)
{
    hsi_fastdiv f;
    f.d = d;
    for (f.s = 0; f.s < 31 && ((uint32_t)1 << f.s) < d; f.s++) {
    }
    f.m = (uint32_t)(((uint64_t)1 << 32) * (((uint64_t)1 << f.s) - d) / d + 1);
    return f;
}

/* n / d for n in 0 .. 2^31 - 1 */
static inline HSI_FD_HD uint32_t hsi_fastdiv_q(hsi_fastdiv f, uint32_t n)
{
#ifdef __CUDA_ARCH__
    uint32_t t = __umulhi(n, f.m);
#else
    uint32_t t = (uint32_t)(((uint64_t)n * f.m) >> 32);
#endif
    return (t + n) >> f.s;
}

#ifdef __cplusplus
}
#endif
#endif

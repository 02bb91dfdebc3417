/* prng.h — the small counter-style generator pipeline/ uses for splits,
 * shuffles and augmentation: splitmix64 streams derived from (seed, key...)
 * so that every sample, class or epoch has its own stream whatever thread
 * draws it. Header-only; not a cryptographic RNG. */
#ifndef HSI_PRNG_H
#define HSI_PRNG_H

#include <math.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hsi_prng {
    uint64_t s;
} hsi_prng;

static inline uint64_t hsi_prng_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A key derived from a seed and one more value (order matters). */
static inline uint64_t hsi_prng_key(uint64_t seed, uint64_t v)
{
    return hsi_prng_mix64(hsi_prng_mix64(seed + 0x9E3779B97F4A7C15ull) ^
                          (v * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull));
}

static inline void hsi_prng_init(hsi_prng *r, uint64_t key) { r->s = hsi_prng_mix64(key); }

static inline uint64_t hsi_prng_next(hsi_prng *r)
{
    return hsi_prng_mix64(r->s += 0x9E3779B97F4A7C15ull);
}

/* Uniform integer in [0, n), n > 0 (multiply-shift; bias < n / 2^64). */
static inline uint64_t hsi_prng_below(hsi_prng *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)hsi_prng_next(r) * n) >> 64);
}

/* Uniform double in [0, 1) with 53 bits. */
static inline double hsi_prng_unif(hsi_prng *r)
{
    return (double)(hsi_prng_next(r) >> 11) * 0x1.0p-53;
}

/* Standard normal (Box-Muller, one value per call). */
static inline double hsi_prng_normal(hsi_prng *r)
{
    double u1 = 1.0 - hsi_prng_unif(r); /* (0, 1] */
    double u2 = hsi_prng_unif(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Fisher-Yates shuffle of n int64 values. */
static inline void hsi_prng_shuffle_i64(hsi_prng *r, int64_t *a, int64_t n)
{
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)hsi_prng_below(r, (uint64_t)i + 1);
        int64_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

#ifdef __cplusplus
}
#endif
#endif

/* bench_util.h — what the C benchmarks share: deterministic correlated
 * test cubes written as raw ENVI files and mapped, CPU time, and memcpy
 * timed on several threads (the machine's limit, measured in the same run).
 * Static functions: included by one benchmark program each. */
#ifndef HSI_BENCH_UTIL_H
#define HSI_BENCH_UTIL_H
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"

static const char *il_name[3] = {"bsq", "bil", "bip"};

static inline double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void strides_of(int il, int64_t B, int64_t L, int64_t S, int64_t e, int64_t st[3])
{
    int64_t t[3][3] = {{L * S * e, S * e, e}, {S * e, B * S * e, e}, {e, S * B * e, B * e}};
    memcpy(st, t[il], sizeof t[il]);
}

/* Correlated spectra: a few smooth components + noise, deterministic. */
static double value(int64_t b, int64_t y, int64_t x, int64_t B, int is_float)
{
    uint64_t h = (uint64_t)(y * 7919 + x * 104729) * 0x9E3779B97F4A7C15ull;
    double s1 = (double)((h >> 11) & 1023) / 1023.0, s2 = (double)((h >> 23) & 1023) / 1023.0;
    double s3 = (double)((h >> 37) & 1023) / 1023.0;
    double t = (double)b / (double)B;
    double v = 8000 + 3000 * t + 2500 * s1 * sin(3 * t + 1) + 1200 * s2 * cos(7 * t) + 500 * s3 * sin(13 * t);
    v += (double)(((h >> 47) + (uint64_t)b * 2654435761u) % 41) - 20;
    return is_float ? v / 10000.0 : floor(v);
}

static int write_cube(const char *dir, const char *name, int il, hsi_dtype dt, int64_t B, int64_t L,
                      int64_t S, hsi_view *out)
{
    char path[4096], hdr[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(hdr, sizeof hdr, "%s/%s.hdr", dir, name);
    int64_t e = (int64_t)hsi_dtype_size(dt), st[3];
    strides_of(il, B, L, S, e, st);
    FILE *fp = fopen(path, "rb");
    if (fp && fseek(fp, 0, SEEK_END) == 0 && ftell(fp) == (long)(B * L * S * e)) {
        fclose(fp); /* already there from an earlier run: same bytes */
        goto map;
    }
    if (fp) fclose(fp);
    fp = fopen(path, "wb");
    if (!fp) return -1;
    /* line by line in file order */
    uint8_t *line = malloc((size_t)(B * S * e));
    if (il == 0) {
        for (int64_t b = 0; b < B; b++)
            for (int64_t y = 0; y < L; y++) {
                for (int64_t x = 0; x < S; x++) {
                    double v = value(b, y, x, B, dt == HSI_F32);
                    hsi_convert(line + x * e, e, dt, 0, &v, 8, HSI_F64, 0, 1);
                }
                fwrite(line, (size_t)e, (size_t)S, fp);
            }
    } else {
        for (int64_t y = 0; y < L; y++) {
            for (int64_t b = 0; b < B; b++)
                for (int64_t x = 0; x < S; x++) {
                    double v = value(b, y, x, B, dt == HSI_F32);
                    int64_t off = il == 1 ? (b * S + x) * e : (x * B + b) * e;
                    hsi_convert(line + off, e, dt, 0, &v, 8, HSI_F64, 0, 1);
                }
            fwrite(line, (size_t)e, (size_t)(B * S), fp);
        }
    }
    free(line);
    fclose(fp);
    fp = fopen(hdr, "w");
    fprintf(fp, "ENVI\nsamples = %lld\nlines = %lld\nbands = %lld\nheader offset = 0\nfile type = ENVI Standard\n"
                "data type = %d\ninterleave = %s\nbyte order = 0\n",
            (long long)S, (long long)L, (long long)B, (int)dt, il_name[il]);
    fclose(fp);
map:;
    hsi_buffer *buf = NULL;
    if (hsi_buffer_map(&buf, path) != HSI_OK) return -1;
    int64_t shape[3] = {B, L, S};
    hsi_status st2 = hsi_view_make(out, buf, 0, dt, 3, shape, st, 0);
    hsi_buffer_release(buf);
    return st2 == HSI_OK ? 0 : -1;
}

typedef struct mc {
    uint8_t *dst;
    const uint8_t *src;
    size_t n;
} mc;
static void *mc_main(void *p)
{
    mc *a = p;
    memcpy(a->dst, a->src, a->n);
    return NULL;
}

/* Best of `reps` memcpy of n bytes with nt threads; seconds. */
static double time_memcpy(uint8_t *dst, const uint8_t *src, size_t n, int nt, int reps)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        pthread_t th[8];
        mc a[8];
        double t0 = hsi_now();
        for (int t = 0; t < nt; t++) {
            size_t lo = n * (size_t)t / (size_t)nt, hi = n * (size_t)(t + 1) / (size_t)nt;
            a[t] = (mc){dst + lo, src + lo, hi - lo};
            pthread_create(&th[t], NULL, mc_main, &a[t]);
        }
        for (int t = 0; t < nt; t++) pthread_join(th[t], NULL);
        double dt = hsi_now() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

#endif

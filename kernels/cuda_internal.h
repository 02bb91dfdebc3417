/* cuda_internal.h — what the .cu files share (C++ only, never included by
 * C sources): CUDA/cuBLAS error checks that set hsi's thread-local message,
 * the per-thread cuBLAS handle, grid sizing, and the device loader of raw
 * cube elements (any real dtype, either byte order, aligned or not).
 * Everything that includes it is built into the plugin, libhsi_cuda.so.
 * Not a public header: the API is kernels/cuda.h, models/layers_cuda.h,
 * pipeline/patches_cuda.h. */
#ifndef HSI_CUDA_INTERNAL_H
#define HSI_CUDA_INTERNAL_H

#ifndef __CUDACC__
#error "cuda_internal.h is for .cu files only"
#endif

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "core/core.h"
#include "kernels/cuda.h"
#include "kernels/cuda_ops.h"

/* Return HSI_ERR_CUDA naming `what` when a runtime call fails. */
#define HSI_CU_RET(call, what)                                                                     \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return hsi_fail(HSI_ERR_CUDA, "%s: %s (%s)", (what), cudaGetErrorString(e_), #call);   \
    } while (0)
/* Same for a cuBLAS call. */
#define HSI_CUBLAS_RET(call, what)                                                                 \
    do {                                                                                           \
        cublasStatus_t e_ = (call);                                                                \
        if (e_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return hsi_fail(HSI_ERR_CUDA, "%s: cuBLAS %s (%s)", (what), cublasGetStatusString(e_), \
                            #call);                                                                \
    } while (0)
/* After a kernel launch: a launch failure (bad configuration, no kernel
 * image for this device) becomes HSI_ERR_CUDA. Does not synchronise. */
#define HSI_CU_LAUNCHED(what) HSI_CU_RET(cudaGetLastError(), (what))
/* Status-returning helper: propagate. */
#define HSI_CU_TRY(expr)                                                                           \
    do {                                                                                           \
        hsi_status s_ = (expr);                                                                    \
        if (s_ != HSI_OK) return s_;                                                               \
    } while (0)


static inline cudaStream_t hsi_cu_stream(void) { return (cudaStream_t)hsi_cuda_stream(); }

/* This thread's cuBLAS handle, bound to this thread's stream (created on
 * first use; HSI_ERR_CUDA when cublasCreate fails). */
hsi_status hsi_cu_cublas(cublasHandle_t *out, const char *what);
/* Page-locked host memory from a cache (kernels/cuda_mem.cu): free a block
 * only once no copy uses it any more. "<what>: ..." on failure. */
hsi_status hsi_cu_pinned_alloc(void **out, size_t n, const char *what);
void hsi_cu_pinned_free(void *p);

/* Blocks for a grid-stride loop over n items with `threads` per block. */
static inline unsigned hsi_cu_blocks(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 65535LL * 16) b = 65535LL * 16;
    return (unsigned)b;
}

/* ------------------------------------------------ raw element loads */

__device__ __forceinline__ uint16_t hsi_cu_bswap16(uint16_t v)
{
    return (uint16_t)((v >> 8) | (v << 8));
}
__device__ __forceinline__ uint32_t hsi_cu_bswap32(uint32_t v) { return __byte_perm(v, 0, 0x0123); }
__device__ __forceinline__ uint64_t hsi_cu_bswap64(uint64_t v)
{
    return ((uint64_t)hsi_cu_bswap32((uint32_t)v) << 32) | hsi_cu_bswap32((uint32_t)(v >> 32));
}

/* Little-endian loads (the GPU and every CUDA host are little-endian).
 * AL: the address is a multiple of the size; else assembled from bytes. */
template <bool AL> __device__ __forceinline__ uint16_t hsi_cu_ld16(const unsigned char *p)
{
    if (AL) return *(const uint16_t *)p;
    return (uint16_t)(p[0] | ((unsigned)p[1] << 8));
}
template <bool AL> __device__ __forceinline__ uint32_t hsi_cu_ld32(const unsigned char *p)
{
    if (AL) return *(const uint32_t *)p;
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}
template <bool AL> __device__ __forceinline__ uint64_t hsi_cu_ld64(const unsigned char *p)
{
    if (AL) return *(const uint64_t *)p;
    return (uint64_t)hsi_cu_ld32<false>(p) | ((uint64_t)hsi_cu_ld32<false>(p + 4) << 32);
}

/* One element of dtype dt (hsi_dtype code) at p as double; sw: stored in
 * the other byte order; complex types give the real part. The same values
 * as core's hsi_load_f64. */
template <bool AL> __device__ __forceinline__ double hsi_cu_raw(const unsigned char *p, int dt, int sw)
{
    switch (dt) {
    case HSI_U8:
        return (double)p[0];
    case HSI_I8:
        return (double)(signed char)p[0];
    case HSI_U16: {
        uint16_t v = hsi_cu_ld16<AL>(p);
        return (double)(sw ? hsi_cu_bswap16(v) : v);
    }
    case HSI_I16: {
        uint16_t v = hsi_cu_ld16<AL>(p);
        return (double)(int16_t)(sw ? hsi_cu_bswap16(v) : v);
    }
    case HSI_U32: {
        uint32_t v = hsi_cu_ld32<AL>(p);
        return (double)(sw ? hsi_cu_bswap32(v) : v);
    }
    case HSI_I32: {
        uint32_t v = hsi_cu_ld32<AL>(p);
        return (double)(int32_t)(sw ? hsi_cu_bswap32(v) : v);
    }
    case HSI_U64: {
        uint64_t v = hsi_cu_ld64<AL>(p);
        return (double)(sw ? hsi_cu_bswap64(v) : v);
    }
    case HSI_I64: {
        uint64_t v = hsi_cu_ld64<AL>(p);
        return (double)(int64_t)(sw ? hsi_cu_bswap64(v) : v);
    }
    case HSI_F32:
    case HSI_C64: {
        uint32_t v = hsi_cu_ld32<AL>(p);
        return (double)__uint_as_float(sw ? hsi_cu_bswap32(v) : v);
    }
    case HSI_F64:
    case HSI_C128: {
        uint64_t v = hsi_cu_ld64<AL>(p);
        return __longlong_as_double((long long)(sw ? hsi_cu_bswap64(v) : v));
    }
    default:
        return 0.0;
    }
}

/* A cube as the kernels see it: element (b, l, s) at
 * base + b*sb + l*sl + s*ss (bytes, any sign), lines relative to a tile. */
/* Element loaders: one value of the cube as float (get) or double (getd;
 * exact for every dtype). The common dtypes of
 * an aligned cube get their own (no per-element dtype switch, no double);
 * fx_any<AL> takes every dtype, aligned or not, through hsi_cu_raw. The
 * values are the same either way. */
struct fx_u8 {
    static __device__ __forceinline__ float get(const unsigned char *p, int, int) { return (float)p[0]; }
    static __device__ __forceinline__ double getd(const unsigned char *p, int dt, int sw) { return get(p, dt, sw); }
};
struct fx_u16 {
    static __device__ __forceinline__ float get(const unsigned char *p, int, int sw)
    {
        uint16_t v = *(const uint16_t *)p;
        return (float)(sw ? hsi_cu_bswap16(v) : v);
    }
    static __device__ __forceinline__ double getd(const unsigned char *p, int dt, int sw) { return get(p, dt, sw); }
};
struct fx_i16 {
    static __device__ __forceinline__ float get(const unsigned char *p, int, int sw)
    {
        uint16_t v = *(const uint16_t *)p;
        return (float)(int16_t)(sw ? hsi_cu_bswap16(v) : v);
    }
    static __device__ __forceinline__ double getd(const unsigned char *p, int dt, int sw) { return get(p, dt, sw); }
};
struct fx_f32 {
    static __device__ __forceinline__ float get(const unsigned char *p, int, int sw)
    {
        uint32_t v = *(const uint32_t *)p;
        return __uint_as_float(sw ? hsi_cu_bswap32(v) : v);
    }
    static __device__ __forceinline__ double getd(const unsigned char *p, int dt, int sw) { return get(p, dt, sw); }
};
template <bool AL> struct fx_any {
    static __device__ __forceinline__ float get(const unsigned char *p, int dt, int sw)
    {
        return (float)hsi_cu_raw<AL>(p, dt, sw);
    }
    static __device__ __forceinline__ double getd(const unsigned char *p, int dt, int sw)
    {
        return hsi_cu_raw<AL>(p, dt, sw);
    }
};

/* Calls LAUNCH(loader type) with the loader for the tile dc. */
#define HSI_CU_BY_LOADER(dc, LAUNCH)                                                    \
    do {                                                                           \
        if ((dc).aligned && (dc).dtype == HSI_U8) LAUNCH(fx_u8);                   \
        else if ((dc).aligned && (dc).dtype == HSI_U16) LAUNCH(fx_u16);            \
        else if ((dc).aligned && (dc).dtype == HSI_I16) LAUNCH(fx_i16);            \
        else if ((dc).aligned && (dc).dtype == HSI_F32) LAUNCH(fx_f32);            \
        else if ((dc).aligned) LAUNCH(fx_any<true>);                               \
        else LAUNCH(fx_any<false>);                                                \
    } while (0)

typedef struct hsi_cu_cube {
    const unsigned char *base;
    int64_t sb, sl, ss;
    int64_t n_bands, n_lines, n_samples;
    int dtype, swapped, aligned;
} hsi_cu_cube;

/* Host -> device tile staging shared by the statistics and the fused pass
 * (kernels/cuda_tiles.cu). A cube on the device is used in place; a host
 * cube is copied tile by tile, raw, through two pinned slots. */
typedef struct hsi_cu_tiler {
    const hsi_view *cube;
    int on_device;
    int mode;                  /* 0 in place, 1 one span per tile, 2 one row per band, 3 packed copy */
    int64_t tile_lines, n_tiles;
    size_t cap;                /* bytes per slot */
    unsigned char *pinned[2];
    void *dev[2];
    cudaEvent_t copied[2];     /* the H2D copy out of pinned[slot] finished */
    int event_live[2];
    int64_t pitch;             /* mode 2: bytes per band row on the device */
    cudaStream_t cs;           /* the copies in (NULL: on this thread's stream) */
    cudaEvent_t freed;         /* this thread's stream's work so far (the slot's readers) */
} hsi_cu_tiler;

/* Streams of the tile stream: 1 with HSI_CUDA_TILE_STREAMS=1 (every copy
 * and kernel on this thread's stream, in order), else 3 (the copies in,
 * the kernels and the copies out each on their own, so that a tile's copy
 * in overlaps the previous tile's copy out). Read at each pass. */
int hsi_cu_tile_streams(void);

/* tile_lines 0: a host cube takes as many lines as fit 64 MiB per slot
 * (all lines when lines are its fastest axis); a device cube as many as
 * make 64 Mi band-pixel elements (the callers' float scratch). */
hsi_status hsi_cu_tiler_init(hsi_cu_tiler *T, const hsi_view *cube, int64_t tile_lines);
/* Makes lines [l0, l1) available on the device in slot `slot` (waits
 * until that slot's previous copy is done, packs on the host, copies
 * asynchronously: on the tiler's copy stream after the work queued so far
 * on this thread's stream, which then waits for the copy; with one stream,
 * on this thread's) and describes them in *dc (lines relative to l0). */
hsi_status hsi_cu_tiler_load(hsi_cu_tiler *T, int slot, int64_t l0, int64_t l1, hsi_cu_cube *dc);
void hsi_cu_tiler_free(hsi_cu_tiler *T);

#endif

/* tile_plan.h — how a host cube goes to the GPU tile by tile: the copy
 * mode and the lines per tile (kernels/cuda_tiles.cu). Plain C, no CUDA,
 * so that the plan is tested on the CPU (tests/test_kernels.c). Private to
 * kernels/: not installed. */
#ifndef HSI_KERNELS_TILE_PLAN_H
#define HSI_KERNELS_TILE_PLAN_H

#include "core/core.h"

/* bytes a tile should hold at most (the lines of a tile: as many as fit;
 * one line when one line alone is more) */
#define HSI_TILE_CAP ((int64_t)64 << 20)

/* Layout of a host cube (b, l, s): 1 = line axis outermost (BIL, BIP: a
 * tile is one contiguous span), 2 = band axis outermost (BSQ: one span per
 * band), 3 = anything else (negative strides, interleaved axes): packed
 * copy on the host. */
static inline int hsi_tile_host_mode(const hsi_view *c)
{
    int64_t es = (int64_t)hsi_dtype_size(c->dtype);
    int64_t nb = c->shape[0], L = c->shape[1], S = c->shape[2];
    int64_t sb = c->strides[0], sl = c->strides[1], ss = c->strides[2];
    if (sb < 0 || sl < 0 || ss < 0) return 3;
    if ((nb - 1) * sb + (S - 1) * ss + es <= sl || L == 1) return 1;
    if ((L - 1) * sl + (S - 1) * ss + es <= sb) return 2;
    return 3;
}

/* Bytes one tile of n lines takes in `mode` (*pitch: mode 2's bytes per
 * band, 16-aligned; else 0): a span (1), a span per band (2), the packed
 * elements (3). */
static inline int64_t hsi_tile_bytes(const hsi_view *c, int mode, int64_t n, int64_t *pitch)
{
    int64_t es = (int64_t)hsi_dtype_size(c->dtype);
    int64_t nb = c->shape[0], S = c->shape[2];
    int64_t sb = c->strides[0], sl = c->strides[1], ss = c->strides[2];
    *pitch = 0;
    if (mode == 1) return (n - 1) * sl + (nb - 1) * sb + (S - 1) * ss + es;
    if (mode == 2) {
        int64_t w = (n - 1) * sl + (S - 1) * ss + es;
        *pitch = (w + 15) / 16 * 16;
        return *pitch * nb;
    }
    return nb * n * S * es;
}

/* Bytes each further line adds to a tile in mode m (2: per band, before
 * the pitch's rounding, times the bands). */
static inline int64_t hsi_tile_line_step(const hsi_view *c, int m)
{
    if (m == 1) return c->strides[1];
    if (m == 2) return c->shape[0] * c->strides[1];
    return c->shape[0] * c->shape[2] * (int64_t)hsi_dtype_size(c->dtype);
}

/* The most lines whose tile fits HSI_TILE_CAP in mode m (1 when one line
 * alone is more), at most the cube's */
static inline int64_t hsi_tile_lines_fit(const hsi_view *c, int m)
{
    int64_t L = c->shape[1], nb = c->shape[0], pitch;
    int64_t one = hsi_tile_bytes(c, m, 1, &pitch), n;
    int64_t sl = c->strides[1];
    if (one >= HSI_TILE_CAP) return 1;
    if (m == 1) n = sl > 0 ? 1 + (HSI_TILE_CAP - one) / sl : L;
    else if (m == 2) { /* nb pitches of round16(w1 + (n - 1) sl) bytes */
        int64_t w1 = (c->shape[2] - 1) * c->strides[2] + (int64_t)hsi_dtype_size(c->dtype);
        int64_t room = HSI_TILE_CAP / nb / 16 * 16;
        n = sl > 0 ? 1 + (room - w1) / sl : L;
    } else
        n = HSI_TILE_CAP / one;
    return n < 1 ? 1 : n > L ? L : n;
}

/* The plan for a host cube: *mode, and *lines per tile (tile_lines > 0:
 * that many, at most the cube's; else as many as fit HSI_TILE_CAP). A span
 * (modes 1 and 2) that is mostly bytes outside the view goes to the packed
 * copy instead: a cropped view (one band of a BIL cube, a few samples of a
 * BIP or BSQ one) whose span grows by more than 4 times its elements per
 * line, and a column-major cube (lines the fastest axis) whose one-line
 * tile would span a quarter of the cube or more. */
static inline void hsi_tile_plan(const hsi_view *c, int64_t tile_lines, int *mode, int64_t *lines)
{
    int64_t L = c->shape[1], pitch;
    int m = hsi_tile_host_mode(c);
    if (m != 3 && L > 1) {
        int64_t dense = c->shape[0] * c->shape[2] * (int64_t)hsi_dtype_size(c->dtype);
        if (hsi_tile_line_step(c, m) > 4 * dense) m = 3;
        else if (m == 2 && hsi_tile_bytes(c, 2, 1, &pitch) * 4 > hsi_tile_bytes(c, 2, L, &pitch)) m = 3;
    }
    if (tile_lines <= 0) tile_lines = hsi_tile_lines_fit(c, m);
    if (tile_lines > L) tile_lines = L > 0 ? L : 1;
    *mode = m;
    *lines = tile_lines;
}

#endif

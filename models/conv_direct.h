/* conv_direct.h — the direct float convolution of layer_conv.c (internal):
 * no column matrix; AVX2 + FMA register tiles read the zero-padded input
 * plane of one sample at a time straight from cache. layer_conv.c calls it
 * for float convolutions it takes (hsi_conv_direct_usable) and keeps the
 * im2col + gemm path for everything else (double, strides, no AVX2). */
#ifndef HSI_CONV_DIRECT_H
#define HSI_CONV_DIRECT_H

#include <stddef.h>

#include "models/layers.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the direct kernels take d: every stride 1, every pad <= kernel - 1,
 * this CPU has AVX2 and FMA, and the direct path is not switched off
 * (hsi_conv_set_impl). */
int hsi_conv_direct_usable(const hsi_conv_dims *d);
/* Bytes of workspace the direct forward and backward of d need. */
size_t hsi_conv_direct_ws_bytes(const hsi_conv_dims *d);
/* Same contract as hsi_conv_forward_f32 / hsi_conv_backward_f32 (y
 * overwritten; dx, dw, db accumulated, each optional), except that
 * dx_accumulate = 0 overwrites dx (a gradient buffer nothing has written
 * yet: no zeroing pass, no read). */
void hsi_conv_direct_forward(float *y, const float *x, const float *w, const float *b,
                             const hsi_conv_dims *d, void *ws);
void hsi_conv_direct_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                              const float *w, const hsi_conv_dims *d, void *ws, int dx_accumulate);

#ifdef __cplusplus
}
#endif

#endif

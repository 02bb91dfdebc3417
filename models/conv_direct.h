/* conv_direct.h — the AVX2 / AVX-512 float convolution of layer_conv.c
 * (internal): no column matrix; register tiles read the zero-padded input
 * plane of one sample at a time straight from cache (Winograd F(2x2, 3x3)
 * for convolutions 3x3 in H and W with pad 0 or 1, 2-D and 3-D). layer_conv.c and the engine call it for the float
 * convolutions it takes (hsi_conv_direct_usable) and keep im2col + gemm for
 * everything else (double, strides, no AVX2). */
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
 * overwritten; dx, dw, db accumulated, each optional), except that relu = 1
 * stores max(0, y) (a fused ReLU) and dx_accumulate = 0 overwrites dx (a
 * gradient buffer nothing has written yet: no zeroing pass, no read). */
void hsi_conv_direct_forward(float *y, const float *x, const float *w, const float *b,
                             const hsi_conv_dims *d, void *ws, int relu);
void hsi_conv_direct_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                              const float *w, const hsi_conv_dims *d, void *ws, int dx_accumulate);

#ifdef __cplusplus
}
#endif

#endif

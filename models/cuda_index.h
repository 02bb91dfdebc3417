/* cuda_index.h — the index arithmetic of the GPU's im2col, col2im and
 * pooling (models/layers_cuda.cu) in 32 bits, every division by a fastdiv
 * (kernels/fastdiv.h): a 64-bit division costs tens of instructions and
 * im2col did ten per element. Host and device: tests/test_layers.c checks
 * it against loops over the layers' axes. For arrays of fewer than 2^31
 * elements (the *_make functions say when). Not the layers. */
#ifndef HSI_CUDA_INDEX_H
#define HSI_CUDA_INDEX_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fastdiv.h"
#include "models/layers.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when arrays of `elems` elements take the 32-bit kernels (fewer than
 * 2^31). HSI_CUDA_WIDE_INDEX=1 (read once per process) sends every size to
 * the 64-bit ones, so that the device suites reach them on small arrays. */
static inline int hsi_index32_fits(int64_t elems)
{
    static int wide = -1;
    if (wide < 0) {
        const char *e = getenv("HSI_CUDA_WIDE_INDEX");
        wide = e && *e && strcmp(e, "0") != 0;
    }
    return !wide && elems < ((int64_t)1 << 31);
}

/* g's kernel, stride, pad, input and output sizes per axis (KD .. OW) from
 * the dims d of a convolution or pooling; 2-D as 3-D with depth 1. */
#define HSI_AXES3(g, d)                                                                            \
    do {                                                                                           \
        int o_ = (d)->nd == 3 ? 0 : -1;                                                            \
        (g)->KD = o_ < 0 ? 1 : (d)->ker[0], (g)->SD = o_ < 0 ? 1 : (d)->stride[0];                 \
        (g)->PD = o_ < 0 ? 0 : (d)->pad[0], (g)->ID = o_ < 0 ? 1 : (d)->in[0];                     \
        (g)->OD = o_ < 0 ? 1 : (d)->out[0];                                                        \
        (g)->KH = (d)->ker[o_ + 1], (g)->SH = (d)->stride[o_ + 1], (g)->PH = (d)->pad[o_ + 1];     \
        (g)->IH = (d)->in[o_ + 1], (g)->OH = (d)->out[o_ + 1];                                     \
        (g)->KW = (d)->ker[o_ + 2], (g)->SW = (d)->stride[o_ + 2], (g)->PW = (d)->pad[o_ + 2];     \
        (g)->IW = (d)->in[o_ + 2], (g)->OW = (d)->out[o_ + 2];                                     \
    } while (0)

/* One chunk of nc samples of a convolution (2-D as 3-D with depth 1). */
typedef struct hsi_im2col_geom {
    int32_t C, KD, KH, KW, SD, SH, SW, PD, PH, PW, ID, IH, IW, OD, OH, OW;
    uint32_t CK, OS, IS;
    hsi_fastdiv os, ck, kw, kh, kd, ow, oh, iw, ih, id, c;
} hsi_im2col_geom;

/* g for nc samples of d: 1, or 0 when nc * CK * OS or nc * C * IS reach 2^31
 * (then the 64-bit kernels run). */
static inline int hsi_im2col_geom_make(hsi_im2col_geom *g, const hsi_conv_dims *d, int64_t nc)
{
    int64_t ck, os, is;
    g->C = d->c;
    HSI_AXES3(g, d);
    ck = (int64_t)g->C * g->KD * g->KH * g->KW;
    os = (int64_t)g->OD * g->OH * g->OW;
    is = (int64_t)g->ID * g->IH * g->IW;
    if (nc < 1 || !hsi_index32_fits(nc * ck * os) || !hsi_index32_fits(nc * g->C * is)) return 0;
    g->CK = (uint32_t)ck, g->OS = (uint32_t)os, g->IS = (uint32_t)is;
    g->os = hsi_fastdiv_make(g->OS), g->ck = hsi_fastdiv_make(g->CK);
    g->kw = hsi_fastdiv_make((uint32_t)g->KW), g->kh = hsi_fastdiv_make((uint32_t)g->KH);
    g->kd = hsi_fastdiv_make((uint32_t)g->KD), g->ow = hsi_fastdiv_make((uint32_t)g->OW);
    g->oh = hsi_fastdiv_make((uint32_t)g->OH), g->iw = hsi_fastdiv_make((uint32_t)g->IW);
    g->ih = hsi_fastdiv_make((uint32_t)g->IH), g->id = hsi_fastdiv_make((uint32_t)g->ID);
    g->c = hsi_fastdiv_make((uint32_t)g->C);
    return 1;
}

/* q = n / f.d and *r = n - q * f.d */
static inline HSI_FD_HD uint32_t hsi_im2col_divmod(hsi_fastdiv f, uint32_t n, int32_t *r)
{
    uint32_t q = hsi_fastdiv_q(f, n);
    *r = (int32_t)(n - q * f.d);
    return q;
}

/* im2col: the element of x (nc, C, ID, IH, IW) that column element i of
 * col (nc, CK, OS) holds, or -1 for padding (a zero). */
static inline HSI_FD_HD int64_t hsi_im2col_src(const hsi_im2col_geom *g, uint32_t i)
{
    int32_t o, ck, kw, kh, kd, ow, oh;
    uint32_t n = hsi_im2col_divmod(g->ck, hsi_im2col_divmod(g->os, i, &o), &ck);
    uint32_t c = hsi_im2col_divmod(g->kd,
                                   hsi_im2col_divmod(g->kh, hsi_im2col_divmod(g->kw, (uint32_t)ck, &kw), &kh),
                                   &kd);
    int32_t od = (int32_t)hsi_im2col_divmod(g->oh, hsi_im2col_divmod(g->ow, (uint32_t)o, &ow), &oh);
    int32_t iz = od * g->SD - g->PD + kd, iy = oh * g->SH - g->PH + kh, ix = ow * g->SW - g->PW + kw;
    if (iz < 0 || iz >= g->ID || iy < 0 || iy >= g->IH || ix < 0 || ix >= g->IW) return -1;
    return ((int64_t)n * g->C + c) * g->IS + ((int64_t)iz * g->IH + iy) * g->IW + ix;
}

/* col2im along one axis: the output whose window holds input position
 * t + kernel tap (t = position + pad - tap; stride s, n_out outputs), or -1
 * when none does. */
static inline HSI_FD_HD int32_t hsi_col2im_out(int32_t t, int32_t s, int32_t n_out)
{
    if (t < 0 || (s != 1 && t % s)) return -1;
    int32_t o = s == 1 ? t : t / s;
    return o < n_out ? o : -1;
}

/* col2im: the sum, in kd, kh, kw order, of the column elements of dcol
 * (nc, CK, OS) that came from element i of x (nc, C, ID, IH, IW). */
static inline HSI_FD_HD float hsi_col2im_sum(const hsi_im2col_geom *g, const float *dcol, uint32_t i)
{
    int32_t ix, iy, iz, c;
    uint32_t n = hsi_im2col_divmod(
        g->c,
        hsi_im2col_divmod(g->id, hsi_im2col_divmod(g->ih, hsi_im2col_divmod(g->iw, i, &ix), &iy), &iz),
        &c);
    const float *dn = dcol + (int64_t)n * g->CK * g->OS;
    float acc = 0.0f;
    for (int32_t kd = 0; kd < g->KD; kd++) {
        int32_t od = hsi_col2im_out(iz + g->PD - kd, g->SD, g->OD);
        for (int32_t kh = 0; od >= 0 && kh < g->KH; kh++) {
            int32_t oh = hsi_col2im_out(iy + g->PH - kh, g->SH, g->OH);
            for (int32_t kw = 0; oh >= 0 && kw < g->KW; kw++) {
                int32_t ow = hsi_col2im_out(ix + g->PW - kw, g->SW, g->OW);
                if (ow < 0) continue;
                int64_t ck = ((int64_t)(c * g->KD + kd) * g->KH + kh) * g->KW + kw;
                acc += dn[ck * g->OS + ((int64_t)od * g->OH + oh) * g->OW + ow];
            }
        }
    }
    return acc;
}

/* One pooling (2-D as 3-D with depth 1) over planes of n * C. */
typedef struct hsi_pool_geom32 {
    int32_t KD, KH, KW, SD, SH, SW, PD, PH, PW, ID, IH, IW, OD, OH, OW;
    uint32_t IS, OS;
    hsi_fastdiv os, ow, oh, is, iw, ih;
} hsi_pool_geom32;

/* g for d: 1, or 0 when the input or the output reach 2^31 elements. */
static inline int hsi_pool_geom32_make(hsi_pool_geom32 *g, const hsi_pool_dims *d)
{
    int64_t planes = (int64_t)d->n * d->c, is, os;
    HSI_AXES3(g, d);
    is = (int64_t)g->ID * g->IH * g->IW;
    os = (int64_t)g->OD * g->OH * g->OW;
    if (!hsi_index32_fits(planes * is) || !hsi_index32_fits(planes * os)) return 0;
    g->IS = (uint32_t)is, g->OS = (uint32_t)os;
    g->os = hsi_fastdiv_make(g->OS), g->ow = hsi_fastdiv_make((uint32_t)g->OW);
    g->oh = hsi_fastdiv_make((uint32_t)g->OH), g->is = hsi_fastdiv_make(g->IS);
    g->iw = hsi_fastdiv_make((uint32_t)g->IW), g->ih = hsi_fastdiv_make((uint32_t)g->IH);
    return 1;
}

/* The window of output element i: its plane, and the input ranges
 * [lo, hi) of depth, height and width (clipped to the input). */
static inline HSI_FD_HD uint32_t hsi_pool_window(const hsi_pool_geom32 *g, uint32_t i, int32_t *lo,
                                                 int32_t *hi)
{
    int32_t o, ow, oh;
    uint32_t p = hsi_im2col_divmod(g->os, i, &o);
    int32_t od = (int32_t)hsi_im2col_divmod(g->oh, hsi_im2col_divmod(g->ow, (uint32_t)o, &ow), &oh);
    const int32_t out[3] = {od, oh, ow}, st[3] = {g->SD, g->SH, g->SW}, pd[3] = {g->PD, g->PH, g->PW};
    const int32_t kr[3] = {g->KD, g->KH, g->KW}, len[3] = {g->ID, g->IH, g->IW};
    for (int a = 0; a < 3; a++) {
        int32_t b = out[a] * st[a] - pd[a], e = b + kr[a];
        lo[a] = b < 0 ? 0 : b;
        hi[a] = e > len[a] ? len[a] : e;
    }
    return p;
}

/* The outputs whose windows hold input element i: its plane, *q its place
 * in the plane, and the output ranges [lo, hi] (inclusive; empty when
 * lo > hi) of depth, height and width. */
static inline HSI_FD_HD uint32_t hsi_pool_outs(const hsi_pool_geom32 *g, uint32_t i, int32_t *q,
                                               int32_t *lo, int32_t *hi)
{
    int32_t ix, iy;
    uint32_t p = hsi_im2col_divmod(g->is, i, q);
    int32_t iz = (int32_t)hsi_im2col_divmod(g->ih, hsi_im2col_divmod(g->iw, (uint32_t)*q, &ix), &iy);
    const int32_t in[3] = {iz, iy, ix}, st[3] = {g->SD, g->SH, g->SW}, pd[3] = {g->PD, g->PH, g->PW};
    const int32_t kr[3] = {g->KD, g->KH, g->KW}, n_out[3] = {g->OD, g->OH, g->OW};
    for (int a = 0; a < 3; a++) {
        int32_t first = in[a] + pd[a] - kr[a] + 1; /* o * s >= first */
        int32_t l = first <= 0 ? 0 : (first + st[a] - 1) / st[a], h = (in[a] + pd[a]) / st[a];
        lo[a] = l;
        hi[a] = h < n_out[a] - 1 ? h : n_out[a] - 1;
    }
    return p;
}

#ifdef __cplusplus
}
#endif
#endif

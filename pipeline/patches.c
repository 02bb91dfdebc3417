/* patches.c — window extraction with padding and augmentation (see
 * patches.h). Each sample builds a table of P*P source offsets on the
 * stack (padding and the flip/rotation folded in), then gathers band by
 * band; the untransformed interior case copies rows. */
#include "patches.h"

#include <stdlib.h>
#include <string.h>

#include "core/prng.h"
#include "pipeline/patches_cuda.h"

hsi_status hsi_patcher_init(hsi_patcher *p, const hsi_view *cube, int patch, hsi_pad_mode pad,
                            const hsi_augment *aug)
{
    memset(p, 0, sizeof *p);
    if (!cube || !cube->buf) return HSI_FAIL(HSI_ERR_ARG, "patches: no cube given");
    if (cube->ndim != 3)
        return HSI_FAIL(HSI_ERR_ARG, "patches: expected a (bands, lines, samples) cube, found %d dims",
                        cube->ndim);
    if (cube->dtype != HSI_F32 || cube->swapped)
        return HSI_FAIL(HSI_ERR_UNSUPPORTED,
                        "patches: expected a float32 cube in native byte order, found %s%s "
                        "(convert it with hsi_view_contiguous)",
                        hsi_dtype_name(cube->dtype), cube->swapped ? " byte-swapped" : "");
    if (patch < 1 || patch % 2 == 0 || patch > HSI_PATCH_MAX)
        return HSI_FAIL(HSI_ERR_ARG, "patches: patch size must be odd and in [1, %d] (found %d)",
                        HSI_PATCH_MAX, patch);
    if (pad != HSI_PAD_MIRROR && pad != HSI_PAD_ZERO)
        return HSI_FAIL(HSI_ERR_ARG, "patches: unknown padding mode %d", (int)pad);
    if (aug && !(aug->noise_std >= 0))
        return HSI_FAIL(HSI_ERR_ARG, "patches: noise_std must be >= 0 (found %g)",
                        (double)aug->noise_std);
    for (int k = 0; k < 3; k++)
        if (cube->shape[k] <= 0)
            return HSI_FAIL(HSI_ERR_ARG, "patches: empty cube (%lld x %lld x %lld)",
                            (long long)cube->shape[0], (long long)cube->shape[1],
                            (long long)cube->shape[2]);
    if (cube->offset % 4 || cube->strides[0] % 4 || cube->strides[1] % 4 || cube->strides[2] % 4 ||
        ((uintptr_t)cube->buf->data % 4))
        return HSI_FAIL(HSI_ERR_UNSUPPORTED,
                        "patches: cube offset/strides (%lld; %lld, %lld, %lld bytes) are not "
                        "multiples of 4", (long long)cube->offset, (long long)cube->strides[0],
                        (long long)cube->strides[1], (long long)cube->strides[2]);
    hsi_view_ref(&p->cube, cube);
    p->on_device = hsi_view_on_device(cube);
    p->data = (const float *)((const char *)cube->buf->data + cube->offset);
    p->sb = cube->strides[0] / 4;
    p->sy = cube->strides[1] / 4;
    p->sx = cube->strides[2] / 4;
    p->n_bands = cube->shape[0];
    p->n_lines = cube->shape[1];
    p->n_samples = cube->shape[2];
    p->patch = patch;
    p->radius = patch / 2;
    p->pad = pad;
    if (aug) p->aug = *aug;
    return HSI_OK;
}

void hsi_patcher_free(hsi_patcher *p)
{
    if (!p) return;
    hsi_view_release(&p->cube);
    memset(p, 0, sizeof *p);
}

int64_t hsi_patcher_sample_floats(const hsi_patcher *p)
{
    return p->n_bands * p->patch * p->patch;
}

uint64_t hsi_patch_sample_seed(uint64_t batch_seed, int64_t i)
{
    return hsi_prng_key(batch_seed ^ 0x7061746368ull, (uint64_t)i);
}

void hsi_patch_draw_make(hsi_patch_draw *d, const hsi_augment *aug, uint64_t sample_seed)
{
    hsi_prng r;
    hsi_prng_init(&r, sample_seed);
    uint64_t u = hsi_prng_next(&r);
    d->flip_ud = aug->flips ? (int)(u & 1) : 0;
    d->flip_lr = aug->flips ? (int)((u >> 1) & 1) : 0;
    d->rot = aug->rotations ? (int)((u >> 2) & 3) : 0;
    d->noise_key = hsi_prng_next(&r);
}

/* Index t of an axis of length n after padding; -1 = zero. */
static int64_t pad_index(int64_t t, int64_t n, hsi_pad_mode pad)
{
    if (t >= 0 && t < n) return t;
    if (pad == HSI_PAD_ZERO) return -1;
    if (n == 1) return 0;
    int64_t period = 2 * (n - 1);
    t %= period;
    if (t < 0) t += period;
    return t < n ? t : period - t;
}

static void extract_one(const hsi_patcher *p, float *out, int64_t pixel, const hsi_patch_draw *d)
{
    int P = p->patch, r = p->radius;
    int64_t C = p->n_bands, PP = (int64_t)P * P;
    int64_t cy = pixel / p->n_samples, cx = pixel % p->n_samples;
    int64_t ys[HSI_PATCH_MAX], xs[HSI_PATCH_MAX];
    int inside = cy - r >= 0 && cy + r < p->n_lines && cx - r >= 0 && cx + r < p->n_samples;
    for (int t = 0; t < P; t++) {
        ys[t] = pad_index(cy - r + t, p->n_lines, p->pad);
        xs[t] = pad_index(cx - r + t, p->n_samples, p->pad);
    }
    int plain = !d || (!d->flip_ud && !d->flip_lr && !d->rot);
    if (plain && inside && p->sx == 1) {
        /* rows are contiguous in the cube: copy them */
        for (int64_t c = 0; c < C; c++) {
            const float *src = p->data + c * p->sb + (cy - r) * p->sy + (cx - r);
            float *dst = out + c * PP;
            for (int i = 0; i < P; i++) memcpy(dst + i * P, src + i * p->sy, (size_t)P * 4);
        }
        return;
    }
    /* off[i*P + j]: element offset of output (i, j) in band 0, -1 = zero */
    int64_t off[HSI_PATCH_MAX * HSI_PATCH_MAX];
    for (int i = 0; i < P; i++)
        for (int j = 0; j < P; j++) {
            /* undo the rotations (rot90: out[i][j] = in[j][P-1-i]), then the flips */
            int u = i, v = j;
            for (int k = 0; d && k < d->rot; k++) {
                int t = u;
                u = v;
                v = P - 1 - t;
            }
            if (d && d->flip_lr) v = P - 1 - v;
            if (d && d->flip_ud) u = P - 1 - u;
            off[i * P + j] = (ys[u] < 0 || xs[v] < 0) ? -1 : ys[u] * p->sy + xs[v] * p->sx;
        }
    if (p->sb == 1) {
        /* pixel-major: read each spectrum contiguously */
        for (int64_t q = 0; q < PP; q++) {
            if (off[q] < 0) {
                for (int64_t c = 0; c < C; c++) out[c * PP + q] = 0.0f;
                continue;
            }
            const float *src = p->data + off[q];
            for (int64_t c = 0; c < C; c++) out[c * PP + q] = src[c];
        }
        return;
    }
    for (int64_t c = 0; c < C; c++) {
        const float *band = p->data + c * p->sb;
        float *dst = out + c * PP;
        for (int64_t q = 0; q < PP; q++) dst[q] = off[q] < 0 ? 0.0f : band[off[q]];
    }
}

static void add_noise(float *out, int64_t n, float std, uint64_t key)
{
    hsi_prng r;
    hsi_prng_init(&r, key);
    for (int64_t i = 0; i < n; i += 2) {
        double u1 = 1.0 - hsi_prng_unif(&r), u2 = hsi_prng_unif(&r);
        double m = sqrt(-2.0 * log(u1)) * std, a = 6.283185307179586 * u2;
        out[i] += (float)(m * cos(a));
        if (i + 1 < n) out[i + 1] += (float)(m * sin(a));
    }
}

/* One sample into dst: plain, or augmented from its own seed. */
static void sample_into(const hsi_patcher *p, float *dst, int64_t pixel, int augment,
                        uint64_t sample_seed)
{
    if (!augment) {
        extract_one(p, dst, pixel, NULL);
        return;
    }
    hsi_patch_draw d;
    hsi_patch_draw_make(&d, &p->aug, sample_seed);
    extract_one(p, dst, pixel, &d);
    if (p->aug.noise_std > 0)
        add_noise(dst, hsi_patcher_sample_floats(p), p->aug.noise_std, d.noise_key);
}

static hsi_status check_pixel(const hsi_patcher *p, int64_t i, int64_t pixel)
{
    int64_t npix = p->n_lines * p->n_samples;
    if (pixel >= 0 && pixel < npix) return HSI_OK;
    return HSI_FAIL(HSI_ERR_ARG,
                    "patches: sample %lld asks for pixel %lld; the scene has %lld "
                    "(%lld lines x %lld samples)",
                    (long long)i, (long long)pixel, (long long)npix, (long long)p->n_lines,
                    (long long)p->n_samples);
}

hsi_status hsi_patches_check(const hsi_patcher *p, const int64_t *pixels, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        hsi_status st = check_pixel(p, i, pixels[i]);
        if (st != HSI_OK) return st;
    }
    return HSI_OK;
}

hsi_status hsi_patches_extract(const hsi_patcher *p, float *out, const int64_t *pixels, int64_t n,
                               int augment, uint64_t seed)
{
    int64_t per = hsi_patcher_sample_floats(p);
    hsi_device d;
    hsi_status st0 = hsi_device_pick(&d, HSI_DEVICE_CPU, p->on_device, "patches", NULL);
    if (st0 != HSI_OK) return st0;
    if (d == HSI_DEVICE_CUDA)
        return hsi_patches_extract_cuda(out, &p->cube, p->patch, p->pad, &p->aug, pixels, n, augment,
                                        seed);
    hsi_status st = hsi_patches_check(p, pixels, n);
    if (st != HSI_OK) return st;
    for (int64_t i = 0; i < n; i++)
        sample_into(p, out + i * per, pixels[i], augment, hsi_patch_sample_seed(seed, i));
    return HSI_OK;
}

hsi_status hsi_pixel_fill(void *ctx, const hsi_batch *b)
{
    const hsi_patch_dataset *ds = ctx;
    int64_t *x = b->x;
    int32_t *y = b->y;
    for (int64_t i = 0; i < b->n; i++) {
        int64_t px = ds->pixels[b->samples[i]];
        hsi_status st = check_pixel(ds->patcher, b->samples[i], px);
        if (st != HSI_OK) return st;
        x[i] = px;
        if (y && ds->labels) y[i] = ds->labels[b->samples[i]];
    }
    return HSI_OK;
}

hsi_status hsi_patch_fill(void *ctx, const hsi_batch *b)
{
    const hsi_patch_dataset *ds = ctx;
    const hsi_patcher *p = ds->patcher;
    int64_t per = hsi_patcher_sample_floats(p);
    float *x = b->x;
    if (p->on_device)
        return HSI_FAIL(HSI_ERR_UNSUPPORTED, "patches: the loader fills host batches, and this "
                                             "patcher's cube lives in GPU memory");
    int32_t *y = b->y;
    for (int64_t i = 0; i < b->n; i++) {
        int64_t px = ds->pixels[b->samples[i]];
        hsi_status st = check_pixel(p, b->samples[i], px);
        if (st != HSI_OK) return st;
        /* seeded by the position in the global batch: the same draw whichever
         * rank holds the sample */
        sample_into(p, x + i * per, px, ds->augment, hsi_patch_sample_seed(b->seed, b->first + i));
        if (y && ds->labels) y[i] = ds->labels[b->samples[i]];
    }
    return HSI_OK;
}

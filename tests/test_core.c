/* test_core.c — buffers, views and conversion. References are computed
 * here element by element from the index formula, not by the code under
 * test. */
#include "test.h"

#include <stdint.h>

/* A (3, 4, 5) uint16 cube stored BIL with value 1000*b + 10*y + x. */
static hsi_view make_bil(int swapped)
{
    int64_t B = 3, L = 4, S = 5;
    hsi_buffer *buf = NULL;
    hsi_buffer_alloc(&buf, (size_t)(B * L * S * 2 + 7), HSI_BUF_HOST);
    uint8_t *base = (uint8_t *)buf->data + 7; /* odd offset: unaligned reads */
    for (int64_t y = 0; y < L; y++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t x = 0; x < S; x++) {
                uint16_t v = (uint16_t)(1000 * b + 10 * y + x);
                if (swapped) v = __builtin_bswap16(v);
                memcpy(base + 2 * (y * B * S + b * S + x), &v, 2);
            }
    hsi_view v;
    int64_t shape[3] = {B, L, S}, strides[3] = {2 * S, 2 * S * B, 2};
    hsi_view_make(&v, buf, 7, HSI_U16, 3, shape, strides, swapped);
    hsi_buffer_release(buf);
    return v;
}

static void test_dtypes(void)
{
    CU_ASSERT_EQUAL(hsi_dtype_size(HSI_C128), 16);
    CU_ASSERT_EQUAL(hsi_dtype_size(HSI_U16), 2);
    CU_ASSERT_STRING_EQUAL(hsi_dtype_name(HSI_C64), "complex64");
    CU_ASSERT_EQUAL(hsi_dtype_from_name("uint64"), HSI_U64);
    CU_ASSERT_EQUAL(hsi_dtype_from_envi(7), HSI_DT_INVALID);
    CU_ASSERT_EQUAL(hsi_dtype_from_envi(12), HSI_U16);
    CU_ASSERT_EQUAL(hsi_dtype_size(hsi_dtype_from_envi(0)), 0);
}

static void test_view_bounds(void)
{
    hsi_buffer *buf = NULL;
    HSI_CHECK_OK(hsi_buffer_alloc(&buf, 100, HSI_BUF_HOST));
    hsi_view v;
    int64_t shape[2] = {10, 6}, strides[2] = {10, 1};
    /* last byte would be 9*10 + 5 + offset 5 = 100: one past the end */
    HSI_CHECK_FAILS(hsi_view_make(&v, buf, 5, HSI_U8, 2, shape, strides, 0), HSI_ERR_ARG,
                    "buffer has 100");
    HSI_CHECK_OK(hsi_view_make(&v, buf, 4, HSI_U8, 2, shape, strides, 0));
    CU_ASSERT_EQUAL(buf->refcount, 2);
    hsi_view_release(&v);
    CU_ASSERT_EQUAL(buf->refcount, 1);
    int64_t huge[2] = {INT64_MAX / 2, 4};
    HSI_CHECK_FAILS(hsi_view_make(&v, buf, 0, HSI_U8, 2, huge, strides, 0), HSI_ERR_OVERFLOW,
                    "overflow");
    hsi_buffer_release(buf);
}

static void check_cube(const hsi_view *v, int64_t b0, int64_t y0, int64_t x0, int64_t by,
                       int64_t yy, int64_t xy)
{
    int bad = 0;
    int64_t idx[3];
    for (idx[0] = 0; idx[0] < v->shape[0]; idx[0]++)
        for (idx[1] = 0; idx[1] < v->shape[1]; idx[1]++)
            for (idx[2] = 0; idx[2] < v->shape[2]; idx[2]++) {
                double want = 1000.0 * (b0 + by * idx[0]) + 10.0 * (y0 + yy * idx[1]) +
                              (x0 + xy * idx[2]);
                if (hsi_view_get_f64(v, idx) != want) bad++;
            }
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_view_ops(void)
{
    for (int sw = 0; sw < 2; sw++) {
        hsi_view v = make_bil(sw), a, b, c;
        check_cube(&v, 0, 0, 0, 1, 1, 1);
        HSI_CHECK_OK(hsi_view_bands(&a, &v, 1, 2));
        check_cube(&a, 1, 0, 0, 1, 1, 1);
        HSI_CHECK_OK(hsi_view_crop(&b, &a, 1, 2, 2, 3));
        check_cube(&b, 1, 1, 2, 1, 1, 1);
        HSI_CHECK_OK(hsi_view_slice(&c, &v, 2, 1, 5, 2));
        CU_ASSERT_EQUAL(c.shape[2], 2);
        check_cube(&c, 0, 0, 1, 1, 1, 2);
        HSI_CHECK_FAILS(hsi_view_crop(&c, &v, 3, 2, 0, 1), HSI_ERR_ARG, "outside");
        HSI_CHECK_FAILS(hsi_view_bands(&c, &v, 2, 2), HSI_ERR_ARG, "3 bands");
        /* nothing copied: same buffer, three extra references */
        CU_ASSERT_PTR_EQUAL(a.buf, v.buf);
        CU_ASSERT_EQUAL(v.buf->refcount, 4);
        /* permute to (line, sample, band) = BIP logical order */
        hsi_view p;
        int perm[3] = {1, 2, 0};
        HSI_CHECK_OK(hsi_view_permute(&p, &v, perm));
        int64_t idx[3] = {2, 3, 1};
        CU_ASSERT_EQUAL(hsi_view_get_f64(&p, idx), 1000 + 20 + 3);
        /* contiguous + conversion, byte order made native */
        hsi_view f;
        HSI_CHECK_OK(hsi_view_contiguous(&f, &p, HSI_F32));
        CU_ASSERT(hsi_view_is_packed(&f));
        CU_ASSERT_EQUAL(f.swapped, 0);
        const float *fp = f.buf->data;
        CU_ASSERT_EQUAL(fp[(2 * 5 + 3) * 3 + 1], 1023.0f);
        hsi_view_release(&f);
        hsi_view_release(&p);
        hsi_view_release(&a);
        hsi_view_release(&b);
        hsi_view_release(&c);
        hsi_view_release(&v);
    }
}

static void test_index_reshape(void)
{
    hsi_view v = make_bil(0), band, flat, bad;
    HSI_CHECK_OK(hsi_view_index(&band, &v, 0, 2));
    CU_ASSERT_EQUAL(band.ndim, 2);
    int64_t idx[2] = {3, 4};
    CU_ASSERT_EQUAL(hsi_view_get_f64(&band, idx), 2034);
    /* a band of a BIL cube is (lines, samples) with line stride B*S: the
     * two axes cannot merge into one without a copy */
    int64_t n1[1] = {20};
    HSI_CHECK_FAILS(hsi_view_reshape(&bad, &band, 1, n1), HSI_ERR_UNSUPPORTED, "copy");
    /* but one line of it can be split */
    hsi_view line;
    HSI_CHECK_OK(hsi_view_index(&line, &band, 0, 1));
    int64_t s2[2] = {1, 5};
    HSI_CHECK_OK(hsi_view_reshape(&flat, &line, 2, s2));
    int64_t i2[2] = {0, 4};
    CU_ASSERT_EQUAL(hsi_view_get_f64(&flat, i2), 2014);
    /* packed copy reshapes freely */
    hsi_view c, r;
    HSI_CHECK_OK(hsi_view_contiguous(&c, &v, HSI_DT_INVALID));
    int64_t s3[2] = {3, 20};
    HSI_CHECK_OK(hsi_view_reshape(&r, &c, 2, s3));
    int64_t i3[2] = {1, 13};
    CU_ASSERT_EQUAL(hsi_view_get_f64(&r, i3), 1000 + 20 + 3);
    hsi_view_release(&r);
    hsi_view_release(&c);
    hsi_view_release(&flat);
    hsi_view_release(&line);
    hsi_view_release(&band);
    hsi_view_release(&v);
}

static void test_convert_saturate(void)
{
    double src[6] = {-5.6, 0.4, 2.5, 70000, NAN, 255.5};
    uint16_t u[6];
    int8_t i8[6];
    hsi_convert(u, 2, HSI_U16, 0, src, 8, HSI_F64, 0, 6);
    CU_ASSERT_EQUAL(u[0], 0);
    CU_ASSERT_EQUAL(u[1], 0);
    CU_ASSERT_EQUAL(u[2], 2); /* round half to even */
    CU_ASSERT_EQUAL(u[3], 65535);
    CU_ASSERT_EQUAL(u[4], 0);
    hsi_convert(i8, 1, HSI_I8, 0, src, 8, HSI_F64, 0, 6);
    CU_ASSERT_EQUAL(i8[0], -6);
    CU_ASSERT_EQUAL(i8[5], 127);
    /* complex <-> complex swaps each part, real -> complex zero imaginary */
    float cf[4] = {1.5f, -2.0f, 3.0f, 4.0f};
    double cd[4];
    hsi_convert(cd, 16, HSI_C128, 0, cf, 8, HSI_C64, 0, 2);
    CU_ASSERT_EQUAL(cd[1], -2.0);
    CU_ASSERT_EQUAL(cd[3], 4.0);
    int16_t r[2] = {7, -9};
    float c2[4];
    hsi_convert(c2, 8, HSI_C64, 0, r, 2, HSI_I16, 0, 2);
    CU_ASSERT_EQUAL(c2[2], -9.0f);
    CU_ASSERT_EQUAL(c2[3], 0.0f);
    /* int64 extremes survive int64->int64 swap round trip */
    int64_t big = INT64_MIN + 3, sw, back;
    hsi_convert(&sw, 8, HSI_I64, 1, &big, 8, HSI_I64, 0, 1);
    CU_ASSERT_NOT_EQUAL(sw, big);
    hsi_convert(&back, 8, HSI_I64, 0, &sw, 8, HSI_I64, 1, 1);
    CU_ASSERT_EQUAL(back, big);
    /* complex -> real refused by the view API */
    hsi_view cv, out;
    int64_t shape[1] = {2};
    HSI_CHECK_OK(hsi_view_alloc(&cv, HSI_C64, 1, shape, HSI_BUF_HOST));
    HSI_CHECK_FAILS(hsi_view_contiguous(&out, &cv, HSI_F32), HSI_ERR_UNSUPPORTED, "imaginary");
    hsi_view_release(&cv);
}

static void test_load_swapped(void)
{
    float vals[3] = {1.25f, -3.5f, 1e30f};
    uint32_t be[3];
    for (int i = 0; i < 3; i++) {
        memcpy(&be[i], &vals[i], 4);
        be[i] = __builtin_bswap32(be[i]);
    }
    double d[3];
    hsi_load_f64(d, be, 4, HSI_F32, 1, 3);
    CU_ASSERT_EQUAL(d[0], 1.25);
    CU_ASSERT_EQUAL(d[1], -3.5);
    CU_ASSERT_EQUAL((float)d[2], 1e30f);
    int32_t iv[2] = {-70000, 5};
    float f[2];
    hsi_load_f32(f, iv, 4, HSI_I32, 0, 2);
    CU_ASSERT_EQUAL(f[0], -70000.0f);
}

static void test_mmap_and_atomic(void)
{
    const char *path = hsi_test_tmp("atomic.bin");
    hsi_atomic_file af;
    HSI_CHECK_OK(hsi_atomic_open(&af, path));
    fputs("first", af.fp);
    HSI_CHECK_OK(hsi_atomic_commit(&af));
    /* an aborted second write leaves the first intact */
    HSI_CHECK_OK(hsi_atomic_open(&af, path));
    fputs("second, longer", af.fp);
    hsi_atomic_abort(&af);
    hsi_buffer *b = NULL;
    HSI_CHECK_OK(hsi_buffer_map(&b, path));
    CU_ASSERT_EQUAL(b->size, 5);
    CU_ASSERT_EQUAL(memcmp(b->data, "first", 5), 0);
    CU_ASSERT_EQUAL(b->kind, HSI_BUF_MMAP);
    hsi_buffer_release(b);
    HSI_CHECK_FAILS(hsi_buffer_map(&b, hsi_test_tmp("does-not-exist")), HSI_ERR_IO,
                    "does-not-exist");
}

static void test_no_cuda_message(void)
{
    if (hsi_cuda_device_count() > 0) return; /* covered by the CUDA suite */
    hsi_buffer *b = NULL;
    HSI_CHECK_FAILS(hsi_buffer_alloc(&b, 64, HSI_BUF_DEVICE), HSI_ERR_NO_CUDA, "device");
    CU_ASSERT_PTR_NULL(b);
}

HSI_SUITE(core, 0, {"dtypes", test_dtypes}, {"view bounds", test_view_bounds},
          {"view ops never copy", test_view_ops}, {"index and reshape", test_index_reshape},
          {"conversion saturates", test_convert_saturate},
          {"swapped loads", test_load_swapped}, {"mmap and atomic write", test_mmap_and_atomic},
          {"no CUDA message", test_no_cuda_message})

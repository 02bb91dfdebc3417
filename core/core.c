/* core.c — status messages, dtypes, refcounted buffers, strided views and
 * element conversion. Formats live in the readers; this file only knows
 * bytes, shapes and strides. */
#define _GNU_SOURCE
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- status */

static _Thread_local char tl_msg[2048];
static int g_quiet;

const char *hsi_last_error(void) { return tl_msg; }
void hsi_clear_error(void) { tl_msg[0] = 0; }

const char *hsi_status_name(hsi_status st)
{
    switch (st) {
    case HSI_OK: return "ok";
    case HSI_ERR_ARG: return "invalid argument";
    case HSI_ERR_IO: return "I/O error";
    case HSI_ERR_FORMAT: return "format error";
    case HSI_ERR_NOMEM: return "out of memory";
    case HSI_ERR_UNSUPPORTED: return "unsupported";
    case HSI_ERR_OVERFLOW: return "size overflow";
    case HSI_ERR_NOT_FOUND: return "not found";
    case HSI_ERR_NO_CUDA: return "CUDA not available";
    case HSI_ERR_STATE: return "invalid state";
    case HSI_ERR_NUMERIC: return "numerical error";
    case HSI_ERR_CUDA: return "CUDA error";
    }
    return "unknown error";
}

hsi_status hsi_fail(hsi_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_msg, sizeof tl_msg, fmt, ap);
    va_end(ap);
    return code;
}

hsi_status hsi_fail_context(hsi_status code, const char *fmt, ...)
{
    char prefix[1024], old[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, tl_msg, sizeof old);
    snprintf(tl_msg, sizeof tl_msg, "%s: %s", prefix, old);
    return code;
}

void hsi_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "hsi: internal error: assertion '%s' failed at %s:%d\n",
            expr, file, line);
    abort();
}

void hsi_set_quiet(int quiet) { g_quiet = quiet; }
int hsi_is_quiet(void) { return g_quiet; }

void hsi_warn(const char *fmt, ...)
{
    if (g_quiet) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("hsi: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---------------------------------------------------------------- dtypes */

size_t hsi_dtype_size(hsi_dtype dt)
{
    switch (dt) {
    case HSI_U8: case HSI_I8: return 1;
    case HSI_I16: case HSI_U16: return 2;
    case HSI_I32: case HSI_U32: case HSI_F32: return 4;
    case HSI_F64: case HSI_I64: case HSI_U64: case HSI_C64: return 8;
    case HSI_C128: return 16;
    default: return 0;
    }
}

static const struct { hsi_dtype dt; const char *name; } dtype_names[] = {
    {HSI_U8, "uint8"},     {HSI_I8, "int8"},       {HSI_I16, "int16"},
    {HSI_U16, "uint16"},   {HSI_I32, "int32"},     {HSI_U32, "uint32"},
    {HSI_I64, "int64"},    {HSI_U64, "uint64"},    {HSI_F32, "float32"},
    {HSI_F64, "float64"},  {HSI_C64, "complex64"}, {HSI_C128, "complex128"},
};

const char *hsi_dtype_name(hsi_dtype dt)
{
    for (size_t i = 0; i < sizeof dtype_names / sizeof *dtype_names; i++)
        if (dtype_names[i].dt == dt) return dtype_names[i].name;
    return "invalid";
}

hsi_dtype hsi_dtype_from_name(const char *s)
{
    if (!s) return HSI_DT_INVALID;
    for (size_t i = 0; i < sizeof dtype_names / sizeof *dtype_names; i++)
        if (strcasecmp(dtype_names[i].name, s) == 0) return dtype_names[i].dt;
    if (strcasecmp(s, "byte") == 0) return HSI_U8;
    if (strcasecmp(s, "float") == 0) return HSI_F32;
    if (strcasecmp(s, "double") == 0) return HSI_F64;
    return HSI_DT_INVALID;
}

hsi_dtype hsi_dtype_from_envi(int code)
{
    switch (code) {
    case 1: case 2: case 3: case 4: case 5: case 6: case 9:
    case 12: case 13: case 14: case 15: return (hsi_dtype)code;
    default: return HSI_DT_INVALID;
    }
}

int hsi_dtype_is_complex(hsi_dtype dt) { return dt == HSI_C64 || dt == HSI_C128; }
int hsi_dtype_is_float(hsi_dtype dt) { return dt == HSI_F32 || dt == HSI_F64; }
int hsi_dtype_is_signed(hsi_dtype dt)
{
    return dt == HSI_I8 || dt == HSI_I16 || dt == HSI_I32 || dt == HSI_I64 ||
           hsi_dtype_is_float(dt) || hsi_dtype_is_complex(dt);
}

int hsi_host_is_little_endian(void)
{
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

/* --------------------------------------------------------------- buffers */

static int64_t g_live[4];

int64_t hsi_buffer_live_bytes(hsi_buf_kind kind)
{
    if ((int)kind < 0 || (int)kind > 3) return 0;
    return __atomic_load_n(&g_live[kind], __ATOMIC_RELAXED);
}

static void live_add(hsi_buf_kind kind, int64_t n)
{
    __atomic_add_fetch(&g_live[kind], n, __ATOMIC_RELAXED);
}

/* aligned allocations remember their size in a 64-byte prefix */
void *hsi_aligned_alloc(size_t size)
{
    if (size > SIZE_MAX - 64) return NULL;
    void *p = NULL;
    if (posix_memalign(&p, 64, size + 64) != 0) return NULL;
    *(size_t *)p = size;
    live_add(HSI_BUF_HOST, (int64_t)size);
    return (char *)p + 64;
}

void hsi_aligned_free(void *p)
{
    if (!p) return;
    char *base = (char *)p - 64;
    live_add(HSI_BUF_HOST, -(int64_t)*(size_t *)base);
    free(base);
}

static void release_host(hsi_buffer *b) { hsi_aligned_free(b->data); }

static void release_mmap(hsi_buffer *b)
{
    if (b->data) munmap(b->data, b->size);
}

/* in core_cuda.c (real or stub, depending on the build) */
hsi_status hsi_cuda_alloc_buffer(hsi_buffer *b, size_t size, hsi_buf_kind kind);

static hsi_buffer *buffer_new(void)
{
    hsi_buffer *b = calloc(1, sizeof *b);
    if (b) {
        b->refcount = 1;
        b->device = -1;
    }
    return b;
}

hsi_status hsi_buffer_alloc(hsi_buffer **out, size_t size, hsi_buf_kind kind)
{
    *out = NULL;
    hsi_buffer *b = buffer_new();
    if (!b) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory allocating a buffer");
    b->kind = kind;
    b->size = size;
    if (kind == HSI_BUF_HOST) {
        b->data = hsi_aligned_alloc(size ? size : 1);
        if (!b->data) {
            free(b);
            return HSI_FAIL(HSI_ERR_NOMEM, "out of memory allocating %zu bytes",
                            size);
        }
        memset(b->data, 0, size);
        b->release = release_host;
    } else if (kind == HSI_BUF_PINNED || kind == HSI_BUF_DEVICE) {
        hsi_status st = hsi_cuda_alloc_buffer(b, size, kind);
        if (st != HSI_OK) {
            free(b);
            return st;
        }
    } else {
        free(b);
        return HSI_FAIL(HSI_ERR_ARG, "hsi_buffer_alloc: kind %d cannot be allocated",
                        (int)kind);
    }
    *out = b;
    return HSI_OK;
}

hsi_status hsi_buffer_map(hsi_buffer **out, const char *path)
{
    *out = NULL;
    int fd = -1;
    int64_t size = 0;
    hsi_status st = hsi_input_open(&fd, path, NULL, &size);
    if (st != HSI_OK) return st;
    hsi_buffer *b = buffer_new();
    if (!b) {
        close(fd);
        return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    }
    b->kind = HSI_BUF_MMAP;
    b->size = (size_t)size;
    b->path = strdup(path);
    if (size > 0) {
        void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            free(b->path);
            free(b);
            return HSI_FAIL(HSI_ERR_IO, "%s: cannot map %lld bytes: %s", path,
                            (long long)size, strerror(e));
        }
        b->data = p;
        b->release = release_mmap;
    }
    close(fd);
    *out = b;
    return HSI_OK;
}

hsi_status hsi_buffer_wrap(hsi_buffer **out, void *data, size_t size,
                           hsi_buf_kind kind, void (*release)(hsi_buffer *),
                           void *ctx)
{
    *out = NULL;
    hsi_buffer *b = buffer_new();
    if (!b) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    b->data = data;
    b->size = size;
    b->kind = kind;
    b->release = release;
    b->ctx = ctx;
    *out = b;
    return HSI_OK;
}

hsi_buffer *hsi_buffer_retain(hsi_buffer *b)
{
    if (b) __atomic_add_fetch(&b->refcount, 1, __ATOMIC_RELAXED);
    return b;
}

void hsi_buffer_release(hsi_buffer *b)
{
    if (!b) return;
    if (__atomic_sub_fetch(&b->refcount, 1, __ATOMIC_ACQ_REL) == 0) {
        if (b->release) b->release(b);
        free(b->path);
        free(b);
    }
}

/* ----------------------------------------------------------------- views */

int hsi_mul_ok(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

/* Lowest and highest byte touched by a view (relative to buf->data). */
static int view_extent(const hsi_view *v, int64_t *lo, int64_t *hi)
{
    int64_t esz = (int64_t)hsi_dtype_size(v->dtype);
    int64_t l = v->offset, h = v->offset;
    for (int k = 0; k < v->ndim; k++) {
        if (v->shape[k] == 0) {
            *lo = v->offset;
            *hi = v->offset - 1; /* empty */
            return 1;
        }
        int64_t span;
        if (!hsi_mul_ok(v->shape[k] - 1, v->strides[k], &span)) return 0;
        if (span >= 0) {
            if (__builtin_add_overflow(h, span, &h)) return 0;
        } else {
            if (__builtin_add_overflow(l, span, &l)) return 0;
        }
    }
    if (__builtin_add_overflow(h, esz - 1, &h)) return 0;
    *lo = l;
    *hi = h;
    return 1;
}

hsi_status hsi_view_make(hsi_view *out, hsi_buffer *buf, int64_t offset,
                         hsi_dtype dtype, int ndim, const int64_t *shape,
                         const int64_t *strides, int swapped)
{
    hsi_view v;
    memset(&v, 0, sizeof v);
    if (!buf) return HSI_FAIL(HSI_ERR_ARG, "hsi_view_make: no buffer");
    if (ndim < 0 || ndim > HSI_MAX_DIMS)
        return HSI_FAIL(HSI_ERR_ARG, "hsi_view_make: ndim %d outside 0..%d", ndim,
                        HSI_MAX_DIMS);
    if (hsi_dtype_size(dtype) == 0)
        return HSI_FAIL(HSI_ERR_ARG, "hsi_view_make: invalid dtype %d", (int)dtype);
    v.offset = offset;
    v.dtype = dtype;
    v.ndim = ndim;
    v.swapped = swapped ? 1 : 0;
    for (int k = 0; k < ndim; k++) {
        if (shape[k] < 0)
            return HSI_FAIL(HSI_ERR_ARG, "hsi_view_make: negative extent %lld on axis %d",
                            (long long)shape[k], k);
        v.shape[k] = shape[k];
        v.strides[k] = strides[k];
    }
    int64_t lo, hi;
    if (!view_extent(&v, &lo, &hi))
        return HSI_FAIL(HSI_ERR_OVERFLOW, "hsi_view_make: extent overflows 64 bits");
    if (hi >= lo && (lo < 0 || (uint64_t)hi >= (uint64_t)buf->size))
        return HSI_FAIL(HSI_ERR_ARG,
                        "hsi_view_make: view spans bytes %lld..%lld but the buffer has %zu",
                        (long long)lo, (long long)hi, buf->size);
    v.buf = hsi_buffer_retain(buf);
    *out = v;
    return HSI_OK;
}

static void packed_strides(int ndim, const int64_t *shape, int64_t esz, int64_t *strides)
{
    int64_t s = esz;
    for (int k = ndim - 1; k >= 0; k--) {
        strides[k] = s;
        s *= shape[k] > 0 ? shape[k] : 1;
    }
}

hsi_status hsi_view_make_packed(hsi_view *out, hsi_buffer *buf, int64_t offset,
                                hsi_dtype dtype, int ndim, const int64_t *shape)
{
    int64_t strides[HSI_MAX_DIMS];
    if (ndim < 0 || ndim > HSI_MAX_DIMS)
        return HSI_FAIL(HSI_ERR_ARG, "ndim %d outside 0..%d", ndim, HSI_MAX_DIMS);
    packed_strides(ndim, shape, (int64_t)hsi_dtype_size(dtype), strides);
    return hsi_view_make(out, buf, offset, dtype, ndim, shape, strides, 0);
}

hsi_status hsi_view_alloc(hsi_view *out, hsi_dtype dtype, int ndim,
                          const int64_t *shape, hsi_buf_kind kind)
{
    int64_t n = (int64_t)hsi_dtype_size(dtype);
    if (n == 0) return HSI_FAIL(HSI_ERR_ARG, "hsi_view_alloc: invalid dtype");
    if (ndim < 0 || ndim > HSI_MAX_DIMS)
        return HSI_FAIL(HSI_ERR_ARG, "hsi_view_alloc: ndim %d outside 0..%d", ndim,
                        HSI_MAX_DIMS);
    for (int k = 0; k < ndim; k++) {
        if (shape[k] < 0) return HSI_FAIL(HSI_ERR_ARG, "hsi_view_alloc: negative extent");
        if (!hsi_mul_ok(n, shape[k], &n))
            return HSI_FAIL(HSI_ERR_OVERFLOW, "hsi_view_alloc: size overflows 64 bits");
    }
    hsi_buffer *b = NULL;
    hsi_status st = hsi_buffer_alloc(&b, (size_t)n, kind);
    if (st != HSI_OK) return st;
    st = hsi_view_make_packed(out, b, 0, dtype, ndim, shape);
    hsi_buffer_release(b);
    return st;
}

void hsi_view_release(hsi_view *v)
{
    if (!v) return;
    hsi_buffer_release(v->buf);
    memset(v, 0, sizeof *v);
}

void hsi_view_ref(hsi_view *out, const hsi_view *in)
{
    hsi_view t = *in;
    hsi_buffer_retain(t.buf);
    *out = t;
}

int64_t hsi_view_count(const hsi_view *v)
{
    int64_t n = 1;
    for (int k = 0; k < v->ndim; k++) n *= v->shape[k];
    return n;
}

int64_t hsi_view_nbytes(const hsi_view *v)
{
    return hsi_view_count(v) * (int64_t)hsi_dtype_size(v->dtype);
}

int hsi_view_is_packed(const hsi_view *v)
{
    if (v->swapped) return 0;
    int64_t s = (int64_t)hsi_dtype_size(v->dtype);
    for (int k = v->ndim - 1; k >= 0; k--) {
        if (v->shape[k] != 1 && v->strides[k] != s) return 0;
        s *= v->shape[k];
    }
    return 1;
}

void *hsi_view_ptr(const hsi_view *v, const int64_t *idx)
{
    int64_t off = v->offset;
    for (int k = 0; k < v->ndim; k++) off += idx[k] * v->strides[k];
    return (char *)v->buf->data + off;
}

hsi_status hsi_view_slice(hsi_view *out, const hsi_view *in, int axis, int64_t start,
                          int64_t stop, int64_t step)
{
    if (axis < 0 || axis >= in->ndim)
        return HSI_FAIL(HSI_ERR_ARG, "slice: axis %d outside 0..%d", axis, in->ndim - 1);
    if (step <= 0) return HSI_FAIL(HSI_ERR_ARG, "slice: step must be > 0 (got %lld)",
                                   (long long)step);
    int64_t n = in->shape[axis];
    if (start < 0 || stop > n || start > stop)
        return HSI_FAIL(HSI_ERR_ARG, "slice: range %lld..%lld outside 0..%lld on axis %d",
                        (long long)start, (long long)stop, (long long)n, axis);
    hsi_view t = *in;
    t.offset += start * in->strides[axis];
    t.shape[axis] = (stop - start + step - 1) / step;
    t.strides[axis] = in->strides[axis] * step;
    if (out == in) {
        *out = t; /* same buffer, same reference */
    } else {
        hsi_buffer_retain(t.buf);
        *out = t;
    }
    return HSI_OK;
}

hsi_status hsi_view_index(hsi_view *out, const hsi_view *in, int axis, int64_t i)
{
    if (axis < 0 || axis >= in->ndim)
        return HSI_FAIL(HSI_ERR_ARG, "index: axis %d outside 0..%d", axis, in->ndim - 1);
    if (i < 0 || i >= in->shape[axis])
        return HSI_FAIL(HSI_ERR_ARG, "index: %lld outside 0..%lld on axis %d",
                        (long long)i, (long long)in->shape[axis] - 1, axis);
    hsi_view t = *in;
    t.offset += i * in->strides[axis];
    for (int k = axis; k < in->ndim - 1; k++) {
        t.shape[k] = in->shape[k + 1];
        t.strides[k] = in->strides[k + 1];
    }
    t.ndim = in->ndim - 1;
    if (out != in) hsi_buffer_retain(t.buf);
    *out = t;
    return HSI_OK;
}

hsi_status hsi_view_permute(hsi_view *out, const hsi_view *in, const int *perm)
{
    int seen[HSI_MAX_DIMS] = {0};
    hsi_view t = *in;
    for (int k = 0; k < in->ndim; k++) {
        if (perm[k] < 0 || perm[k] >= in->ndim || seen[perm[k]])
            return HSI_FAIL(HSI_ERR_ARG, "permute: not a permutation of 0..%d", in->ndim - 1);
        seen[perm[k]] = 1;
        t.shape[k] = in->shape[perm[k]];
        t.strides[k] = in->strides[perm[k]];
    }
    if (out != in) hsi_buffer_retain(t.buf);
    *out = t;
    return HSI_OK;
}

hsi_status hsi_view_bands(hsi_view *out, const hsi_view *in, int64_t first, int64_t count)
{
    if (in->ndim != 3) return HSI_FAIL(HSI_ERR_ARG, "band range: expected a (band, line, sample) cube");
    if (first < 0 || count < 0 || first + count > in->shape[0])
        return HSI_FAIL(HSI_ERR_ARG, "band range %lld..%lld outside the cube's %lld bands",
                        (long long)first + 1, (long long)(first + count),
                        (long long)in->shape[0]);
    return hsi_view_slice(out, in, 0, first, first + count, 1);
}

hsi_status hsi_view_crop(hsi_view *out, const hsi_view *in, int64_t line0,
                         int64_t n_lines, int64_t sample0, int64_t n_samples)
{
    if (in->ndim != 3) return HSI_FAIL(HSI_ERR_ARG, "crop: expected a (band, line, sample) cube");
    if (line0 < 0 || n_lines < 0 || line0 + n_lines > in->shape[1] || sample0 < 0 ||
        n_samples < 0 || sample0 + n_samples > in->shape[2])
        return HSI_FAIL(HSI_ERR_ARG,
                        "crop: lines %lld+%lld, samples %lld+%lld outside the %lld x %lld image",
                        (long long)line0, (long long)n_lines, (long long)sample0,
                        (long long)n_samples, (long long)in->shape[1], (long long)in->shape[2]);
    hsi_view t = *in;
    t.offset += line0 * in->strides[1] + sample0 * in->strides[2];
    t.shape[1] = n_lines;
    t.shape[2] = n_samples;
    if (out != in) hsi_buffer_retain(t.buf);
    *out = t;
    return HSI_OK;
}

hsi_status hsi_view_reshape(hsi_view *out, const hsi_view *in, int ndim, const int64_t *shape)
{
    if (ndim < 0 || ndim > HSI_MAX_DIMS)
        return HSI_FAIL(HSI_ERR_ARG, "reshape: ndim %d outside 0..%d", ndim, HSI_MAX_DIMS);
    int64_t n = 1;
    for (int k = 0; k < ndim; k++) n *= shape[k];
    if (n != hsi_view_count(in))
        return HSI_FAIL(HSI_ERR_ARG, "reshape: %lld elements cannot become %lld",
                        (long long)hsi_view_count(in), (long long)n);
    /* PyTorch's view rule: group input axes that are contiguous with each
     * other into chunks; each chunk must map onto whole output axes. */
    hsi_view t = *in;
    int64_t newstrides[HSI_MAX_DIMS];
    int64_t esz = (int64_t)hsi_dtype_size(in->dtype);
    if (n == 0 || in->ndim == 0) {
        packed_strides(ndim, shape, esz, newstrides);
    } else {
        int view_d = ndim - 1;
        int64_t base = in->strides[in->ndim - 1], tn = 1, vn = 1;
        for (int d = in->ndim - 1; d >= 0; d--) {
            tn *= in->shape[d];
            if (d == 0 || (in->shape[d - 1] != 1 && in->strides[d - 1] != tn * base)) {
                while (view_d >= 0 && (vn < tn || shape[view_d] == 1)) {
                    newstrides[view_d] = vn * base;
                    vn *= shape[view_d];
                    view_d--;
                }
                if (vn != tn)
                    return HSI_FAIL(HSI_ERR_UNSUPPORTED,
                                    "reshape: the strides do not allow a view; copy first "
                                    "(hsi_view_contiguous)");
                if (d > 0) {
                    base = in->strides[d - 1];
                    tn = 1;
                    vn = 1;
                }
            }
        }
        if (view_d != -1)
            return HSI_FAIL(HSI_ERR_UNSUPPORTED, "reshape: the strides do not allow a view");
    }
    t.ndim = ndim;
    for (int k = 0; k < ndim; k++) {
        t.shape[k] = shape[k];
        t.strides[k] = newstrides[k];
    }
    if (out != in) hsi_buffer_retain(t.buf);
    *out = t;
    return HSI_OK;
}

/* ---------------------------------------------------- element conversion */

void hsi_bswap_inplace(void *p, size_t esz, int64_t n)
{
    uint8_t *b = p;
    for (int64_t i = 0; i < n; i++, b += esz) {
        switch (esz) {
        case 2: { uint16_t v; memcpy(&v, b, 2); v = __builtin_bswap16(v); memcpy(b, &v, 2); break; }
        case 4: { uint32_t v; memcpy(&v, b, 4); v = __builtin_bswap32(v); memcpy(b, &v, 4); break; }
        case 8: { uint64_t v; memcpy(&v, b, 8); v = __builtin_bswap64(v); memcpy(b, &v, 8); break; }
        default: break;
        }
    }
}

/* Load one scalar (real part) of type dt at p, optionally swapped. */
static inline double load_one(const uint8_t *p, hsi_dtype dt, int sw)
{
    switch (dt) {
    case HSI_U8: return *p;
    case HSI_I8: return (int8_t)*p;
    case HSI_I16: { uint16_t u; memcpy(&u, p, 2); if (sw) u = __builtin_bswap16(u); return (int16_t)u; }
    case HSI_U16: { uint16_t u; memcpy(&u, p, 2); if (sw) u = __builtin_bswap16(u); return u; }
    case HSI_I32: { uint32_t u; memcpy(&u, p, 4); if (sw) u = __builtin_bswap32(u); return (int32_t)u; }
    case HSI_U32: { uint32_t u; memcpy(&u, p, 4); if (sw) u = __builtin_bswap32(u); return u; }
    case HSI_I64: { uint64_t u; memcpy(&u, p, 8); if (sw) u = __builtin_bswap64(u); return (double)(int64_t)u; }
    case HSI_U64: { uint64_t u; memcpy(&u, p, 8); if (sw) u = __builtin_bswap64(u); return (double)u; }
    case HSI_F32: case HSI_C64: { uint32_t u; float f; memcpy(&u, p, 4); if (sw) u = __builtin_bswap32(u); memcpy(&f, &u, 4); return f; }
    case HSI_F64: case HSI_C128: { uint64_t u; double d; memcpy(&u, p, 8); if (sw) u = __builtin_bswap64(u); memcpy(&d, &u, 8); return d; }
    default: return 0;
    }
}

/* Typed inner loops: one switch per call, a tight loop per dtype. */
#define HSI_LOAD_LOOP(T, DST, CAST, SWAPFN, UT)                                \
    do {                                                                       \
        const uint8_t *p = src;                                                \
        if (!swapped) {                                                        \
            for (int64_t i = 0; i < n; i++, p += stride) {                     \
                T v;                                                           \
                memcpy(&v, p, sizeof v);                                       \
                dst[i] = (DST)(CAST)v;                                         \
            }                                                                  \
        } else {                                                               \
            for (int64_t i = 0; i < n; i++, p += stride) {                     \
                UT u;                                                          \
                T v;                                                           \
                memcpy(&u, p, sizeof u);                                       \
                u = SWAPFN(u);                                                 \
                memcpy(&v, &u, sizeof v);                                      \
                dst[i] = (DST)(CAST)v;                                         \
            }                                                                  \
        }                                                                      \
    } while (0)

#define HSI_NOSWAP(x) (x)
#define HSI_LOAD_SWITCH(DST)                                                          \
    switch (dt) {                                                                     \
    case HSI_U8: HSI_LOAD_LOOP(uint8_t, DST, uint8_t, HSI_NOSWAP, uint8_t); break;    \
    case HSI_I8: HSI_LOAD_LOOP(int8_t, DST, int8_t, HSI_NOSWAP, uint8_t); break;      \
    case HSI_I16: HSI_LOAD_LOOP(int16_t, DST, int16_t, __builtin_bswap16, uint16_t); break; \
    case HSI_U16: HSI_LOAD_LOOP(uint16_t, DST, uint16_t, __builtin_bswap16, uint16_t); break; \
    case HSI_I32: HSI_LOAD_LOOP(int32_t, DST, int32_t, __builtin_bswap32, uint32_t); break; \
    case HSI_U32: HSI_LOAD_LOOP(uint32_t, DST, uint32_t, __builtin_bswap32, uint32_t); break; \
    case HSI_I64: HSI_LOAD_LOOP(int64_t, DST, int64_t, __builtin_bswap64, uint64_t); break; \
    case HSI_U64: HSI_LOAD_LOOP(uint64_t, DST, uint64_t, __builtin_bswap64, uint64_t); break; \
    case HSI_F32: case HSI_C64: HSI_LOAD_LOOP(float, DST, float, __builtin_bswap32, uint32_t); break; \
    case HSI_F64: case HSI_C128: HSI_LOAD_LOOP(double, DST, double, __builtin_bswap64, uint64_t); break; \
    default: for (int64_t i = 0; i < n; i++) dst[i] = 0; break;                       \
    }

void hsi_load_f32(float *dst, const void *src, int64_t stride, hsi_dtype dt, int swapped,
                  int64_t n)
{
    HSI_LOAD_SWITCH(float)
}

void hsi_load_f64(double *dst, const void *src, int64_t stride, hsi_dtype dt, int swapped,
                  int64_t n)
{
    HSI_LOAD_SWITCH(double)
}

static inline double sat_round(double v, double lo, double hi)
{
    if (v != v) return 0; /* NaN -> 0 */
    v = nearbyint(v);
    return v < lo ? lo : v > hi ? hi : v;
}

static inline void store_one(uint8_t *p, hsi_dtype dt, int sw, double v)
{
    switch (dt) {
    case HSI_U8: *p = (uint8_t)sat_round(v, 0, 255); break;
    case HSI_I8: *p = (uint8_t)(int8_t)sat_round(v, -128, 127); break;
    case HSI_I16: { uint16_t u = (uint16_t)(int16_t)sat_round(v, -32768, 32767); if (sw) u = __builtin_bswap16(u); memcpy(p, &u, 2); break; }
    case HSI_U16: { uint16_t u = (uint16_t)sat_round(v, 0, 65535); if (sw) u = __builtin_bswap16(u); memcpy(p, &u, 2); break; }
    case HSI_I32: { uint32_t u = (uint32_t)(int32_t)sat_round(v, -2147483648.0, 2147483647.0); if (sw) u = __builtin_bswap32(u); memcpy(p, &u, 4); break; }
    case HSI_U32: { uint32_t u = (uint32_t)sat_round(v, 0, 4294967295.0); if (sw) u = __builtin_bswap32(u); memcpy(p, &u, 4); break; }
    case HSI_I64: { double r = sat_round(v, -9223372036854775808.0, 9223372036854774784.0); uint64_t u = (uint64_t)(int64_t)r; if (sw) u = __builtin_bswap64(u); memcpy(p, &u, 8); break; }
    case HSI_U64: { double r = sat_round(v, 0, 18446744073709549568.0); uint64_t u = (uint64_t)r; if (sw) u = __builtin_bswap64(u); memcpy(p, &u, 8); break; }
    case HSI_F32: case HSI_C64: { float f = (float)v; uint32_t u; memcpy(&u, &f, 4); if (sw) u = __builtin_bswap32(u); memcpy(p, &u, 4); break; }
    case HSI_F64: case HSI_C128: { uint64_t u; memcpy(&u, &v, 8); if (sw) u = __builtin_bswap64(u); memcpy(p, &u, 8); break; }
    default: break;
    }
}

static int is_int64_type(hsi_dtype dt) { return dt == HSI_I64 || dt == HSI_U64; }

void hsi_convert(void *dst, int64_t dst_stride, hsi_dtype ddt, int d_swapped,
                 const void *src, int64_t src_stride, hsi_dtype sdt, int s_swapped, int64_t n)
{
    HSI_ASSERT(!(hsi_dtype_is_complex(sdt) && !hsi_dtype_is_complex(ddt)));
    size_t esz = hsi_dtype_size(sdt);
    uint8_t *d = dst;
    const uint8_t *s = src;
    if (sdt == ddt) {
        /* same type: byte copy, swapping when the orders differ */
        int sw = s_swapped != d_swapped;
        size_t part = hsi_dtype_is_complex(sdt) ? esz / 2 : esz;
        for (int64_t i = 0; i < n; i++, d += dst_stride, s += src_stride) {
            memcpy(d, s, esz);
            if (sw && part > 1) hsi_bswap_inplace(d, part, (int64_t)(esz / part));
        }
        return;
    }
    if (is_int64_type(sdt) && is_int64_type(ddt)) {
        /* int64 <-> uint64 exactly, saturating at the type limits */
        for (int64_t i = 0; i < n; i++, d += dst_stride, s += src_stride) {
            uint64_t u;
            memcpy(&u, s, 8);
            if (s_swapped) u = __builtin_bswap64(u);
            if (sdt == HSI_I64 && (int64_t)u < 0) u = 0;
            else if (sdt == HSI_U64 && u > (uint64_t)INT64_MAX) u = (uint64_t)INT64_MAX;
            if (d_swapped) u = __builtin_bswap64(u);
            memcpy(d, &u, 8);
        }
        return;
    }
    int cs = hsi_dtype_is_complex(sdt), cd = hsi_dtype_is_complex(ddt);
    size_t dpart = hsi_dtype_size(ddt) / (cd ? 2 : 1);
    size_t spart = esz / (cs ? 2 : 1);
    for (int64_t i = 0; i < n; i++, d += dst_stride, s += src_stride) {
        double re = load_one(s, sdt, s_swapped);
        store_one(d, ddt, d_swapped, re);
        if (cd) {
            double im = cs ? load_one(s + spart, sdt, s_swapped) : 0.0;
            store_one(d + dpart, ddt, d_swapped, im);
        }
    }
}

double hsi_view_get_f64(const hsi_view *v, const int64_t *idx)
{
    return load_one(hsi_view_ptr(v, idx), v->dtype, v->swapped);
}

/* Iterates over all but the last axis of two same-shape views, converting
 * rows. Works for any ndim (0..5). */
hsi_status hsi_view_copy(hsi_view *dst, const hsi_view *src)
{
    if (dst->ndim != src->ndim)
        return HSI_FAIL(HSI_ERR_ARG, "copy: %d-D into %d-D", src->ndim, dst->ndim);
    for (int k = 0; k < src->ndim; k++)
        if (dst->shape[k] != src->shape[k])
            return HSI_FAIL(HSI_ERR_ARG, "copy: shapes differ on axis %d (%lld vs %lld)", k,
                            (long long)src->shape[k], (long long)dst->shape[k]);
    if (hsi_dtype_is_complex(src->dtype) && !hsi_dtype_is_complex(dst->dtype))
        return HSI_FAIL(HSI_ERR_UNSUPPORTED,
                        "cannot convert %s to %s: the imaginary part would be lost",
                        hsi_dtype_name(src->dtype), hsi_dtype_name(dst->dtype));
    if (src->buf->kind == HSI_BUF_DEVICE || dst->buf->kind == HSI_BUF_DEVICE)
        return HSI_FAIL(HSI_ERR_UNSUPPORTED, "copy: device views are copied by the CUDA backend");
    if (hsi_view_count(src) == 0) return HSI_OK;
    int nd = src->ndim;
    int64_t inner = nd ? src->shape[nd - 1] : 1;
    int64_t ss = nd ? src->strides[nd - 1] : 0, ds = nd ? dst->strides[nd - 1] : 0;
    int64_t rows = inner ? hsi_view_count(src) / inner : 0;
    int64_t idx[HSI_MAX_DIMS] = {0};
    for (int64_t r = 0; r < rows; r++) {
        hsi_convert(hsi_view_ptr(dst, idx), ds, dst->dtype, dst->swapped, hsi_view_ptr(src, idx),
                    ss, src->dtype, src->swapped, inner);
        for (int k = nd - 2; k >= 0; k--) {
            if (++idx[k] < src->shape[k]) break;
            idx[k] = 0;
        }
    }
    return HSI_OK;
}

hsi_status hsi_view_contiguous(hsi_view *out, const hsi_view *in, hsi_dtype dtype)
{
    hsi_status st = HSI_OK;
    hsi_view t;
    memset(&t, 0, sizeof t);
    if (dtype == HSI_DT_INVALID) dtype = in->dtype;
    if (hsi_dtype_is_complex(in->dtype) && !hsi_dtype_is_complex(dtype))
        return HSI_FAIL(HSI_ERR_UNSUPPORTED,
                        "cannot convert %s to %s: the imaginary part would be lost",
                        hsi_dtype_name(in->dtype), hsi_dtype_name(dtype));
    HSI_TRY(hsi_view_alloc(&t, dtype, in->ndim, in->shape, HSI_BUF_HOST));
    HSI_TRY(hsi_view_copy(&t, in));
    if (out == in) hsi_view_release(out);
    *out = t;
    return HSI_OK;
cleanup:
    hsi_view_release(&t);
    return st;
}

/* --------------------------------------------------------- small helpers */

double hsi_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int g_progress_force = -1;
void hsi_progress_force(int on) { g_progress_force = on; }

void hsi_progress_begin(hsi_progress *p, const char *label, int64_t total)
{
    memset(p, 0, sizeof *p);
    p->label = label;
    p->total = total > 0 ? total : 1;
    p->t0 = hsi_now();
    p->last_print = 0;
    p->active = !g_quiet && (g_progress_force >= 0 ? g_progress_force : isatty(2));
}

static void progress_draw(hsi_progress *p, int final)
{
    double el = hsi_now() - p->t0;
    double frac = (double)p->done / (double)p->total;
    if (frac > 1) frac = 1;
    int width = 30, fill = (int)(frac * width);
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
    bar[width] = 0;
    double eta = frac > 0 ? el / frac - el : 0;
    fprintf(stderr, "\r%s [%s] %5.1f%%  %.1fs elapsed", p->label ? p->label : "", bar,
            100 * frac, el);
    if (!final && frac > 0) fprintf(stderr, ", ~%.1fs left  ", eta);
    else fputs("              ", stderr);
    if (final) fputc('\n', stderr);
    fflush(stderr);
}

void hsi_progress_update(hsi_progress *p, int64_t done)
{
    p->done = done;
    if (!p->active) return;
    double t = hsi_now();
    if (t - p->last_print < 0.1 && done < p->total) return;
    p->last_print = t;
    progress_draw(p, 0);
}

void hsi_progress_end(hsi_progress *p)
{
    if (!p->active) return;
    p->done = p->total;
    progress_draw(p, 1);
    p->active = 0;
}

/* cuda_mem.cu — device presence, per-thread streams and cuBLAS handles, the
 * caching device allocator and host <-> device view copies (kernels/cuda.h).
 * Not a kernel: nothing here launches device code. Nothing runs at load
 * time: the device is looked up on the first call. Part of the plugin
 * (libhsi_cuda.so). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_internal.h"

/* ------------------------------------------------------ device, streams */

extern "C" hsi_status hsi_cuda_require(const char *what) { return hsi_cu_require(what); }

/* This thread's stream lives in libhsi (kernels/cuda_stub.c): setting it
 * loads nothing; hsi_cuda_stream() is resolved from there. */
static __thread cublasHandle_t t_cublas = NULL;
/* The handle's own workspace, set again after every cublasSetStream (which
 * puts the handle back on cuBLAS's pool): cuBLAS then allocates nothing
 * while a CUDA Graph is captured, and a step's measuring call and its
 * capture use the same memory. 32 MiB: cuBLAS's size for Hopper (4 MiB
 * before it). Kept for the thread's life, as the handle is. */
#define CUBLAS_WS_BYTES ((size_t)32 << 20)
static __thread void *t_cublas_ws = NULL;

extern "C" hsi_status hsi_cuda_sync(void)
{
    HSI_CU_TRY(hsi_cuda_require("synchronise"));
    HSI_CU_RET(cudaStreamSynchronize(hsi_cu_stream()), "waiting for the CUDA stream");
    return HSI_OK;
}

hsi_status hsi_cu_cublas(cublasHandle_t *out, const char *what)
{
    if (!t_cublas) HSI_CUBLAS_RET(cublasCreate(&t_cublas), what);
    if (!t_cublas_ws) HSI_CU_RET(cudaMalloc(&t_cublas_ws, CUBLAS_WS_BYTES), what);
    /* the handle follows this thread's current stream */
    HSI_CUBLAS_RET(cublasSetStream(t_cublas, hsi_cu_stream()), what);
    HSI_CUBLAS_RET(cublasSetWorkspace(t_cublas, t_cublas_ws, CUBLAS_WS_BYTES), what);
    *out = t_cublas;
    return HSI_OK;
}

/* ------------------------------------------------- caching allocator */

/* Blocks are rounded to size classes and kept for reuse when freed. A
 * freed block may still be read or written by kernels queued before the
 * free, on the stream that allocated it or on the freeing thread's stream:
 * at the free an event is recorded after that work (the freeing stream
 * first waits for the allocating one), and a later request reuses the
 * block at once from the stream it was freed on (stream order), from
 * another stream once the event has completed, or else makes its stream
 * wait for the event on the device (no host wait). HSI_CUDA_NO_CACHE=1:
 * exact cudaMalloc / cudaFree per request, so that compute-sanitizer sees
 * every overrun and every use after free. */

typedef struct cu_block {
    void *ptr;
    size_t size;         /* class size (exact size without the cache) */
    cudaStream_t stream; /* used: allocated on; free: freed on */
    cudaEvent_t ev;      /* after the work queued before the free (NULL: none needed) */
} cu_block;

typedef struct cu_list {
    cu_block *a;
    int64_t n, cap;
} cu_list;

static pthread_mutex_t g_mem_lock = PTHREAD_MUTEX_INITIALIZER;
static cu_list g_free, g_used;
static hsi_cuda_mem_stats g_mem;

/* HSI_CUDA_NO_CACHE set (not "0"): looked up at every request and free */
static int no_cache(void)
{
    const char *e = getenv("HSI_CUDA_NO_CACHE");
    return e && *e && strcmp(e, "0") != 0;
}

static size_t size_class(size_t n)
{
    if (n <= 512) return 512;
    if (n <= (1u << 20)) {
        size_t c = 512;
        while (c < n) c <<= 1;
        return c;
    }
    size_t step = (size_t)2 << 20;
    return (n + step - 1) / step * step;
}

static int list_push(cu_list *l, const cu_block *b)
{
    if (l->n == l->cap) {
        int64_t nc = l->cap ? 2 * l->cap : 64;
        cu_block *na = (cu_block *)realloc(l->a, sizeof(cu_block) * (size_t)nc);
        if (!na) return 0;
        l->a = na;
        l->cap = nc;
    }
    l->a[l->n++] = *b;
    return 1;
}

static void list_remove(cu_list *l, int64_t i)
{
    l->a[i] = l->a[l->n - 1];
    l->n--;
}

static void block_release(cu_block *b)
{
    if (b->ev) cudaEventDestroy(b->ev);
    cudaFree(b->ptr);
    g_mem.n_cuda_free++;
}

/* cudaFree of every free block; lock held. cudaFree waits for the device,
 * so pending work on them is over. */
static void trim_locked(void)
{
    for (int64_t i = 0; i < g_free.n; i++) block_release(&g_free.a[i]);
    g_free.n = 0;
    g_mem.cached_bytes = 0;
}

/* A free block of class cls that stream s may use now, or -1; lock held.
 * Newest first (warm in cache): the stream's own, then one whose free has
 * completed, then any other, which s will wait for (*wait set). */
static int64_t find_free(size_t cls, cudaStream_t s, int *wait)
{
    int64_t other = -1;
    *wait = 0;
    for (int64_t i = g_free.n - 1; i >= 0; i--) {
        const cu_block *b = &g_free.a[i];
        if (b->size != cls) continue;
        if (b->stream == s || !b->ev) return i;
        if (cudaEventQuery(b->ev) == cudaSuccess) return i;
        cudaGetLastError(); /* cudaErrorNotReady is not an error */
        if (other < 0) other = i;
    }
    *wait = other >= 0;
    return other;
}

static hsi_status hsi_cuda_malloc_cached(void **out, size_t size);

/* This thread's scratch (hsi_cuda_scratch_begin): a stack of the live
 * requests, each at its offset in the caller's block (when it fits; else
 * from the cache), so that the peak is what the block must hold. */
#define SCRATCH_MAX 64
typedef struct cu_scratch {
    int on, strict, n;
    char *base;
    size_t cap, top, need;
    struct {
        void *ptr;
        size_t off;
        int in_block, freed;
    } e[SCRATCH_MAX];
} cu_scratch;
static __thread cu_scratch t_scr;

extern "C" hsi_status hsi_cuda_scratch_begin(void *base, size_t bytes, int strict)
{
    HSI_CU_TRY(hsi_cuda_require("device scratch"));
    if (t_scr.on) return hsi_fail(HSI_ERR_ARG, "device scratch: already set on this thread");
    memset(&t_scr, 0, sizeof t_scr);
    t_scr.on = 1;
    t_scr.strict = strict;
    t_scr.base = (char *)base;
    t_scr.cap = base ? bytes : 0;
    return HSI_OK;
}

extern "C" size_t hsi_cuda_scratch_end(void)
{
    size_t need = t_scr.need;
    t_scr.on = 0;
    return need;
}

/* A request while the scratch is on: the block's next place, else (not
 * strict) the cache; pushed on the stack either way (beyond SCRATCH_MAX
 * live requests: the cache's, not tracked). */
static hsi_status scratch_malloc(void **out, size_t size)
{
    cu_scratch *S = &t_scr;
    size_t sz = size ? (size + 255) / 256 * 256 : 256;
    int fits = S->n < SCRATCH_MAX && S->top + sz <= S->cap;
    if (S->top + sz > S->need) S->need = S->top + sz;
    if (fits) {
        *out = S->base + S->top;
    } else {
        if (S->strict)
            return hsi_fail(HSI_ERR_NOMEM, "device scratch: a request of %zu bytes does not fit "
                                           "(%zu of %zu bytes in use, %d requests)",
                            size, S->top, S->cap, S->n);
        hsi_status st = hsi_cuda_malloc_cached(out, size);
        if (st != HSI_OK || S->n == SCRATCH_MAX) return st;
    }
    S->e[S->n].ptr = *out;
    S->e[S->n].off = S->top;
    S->e[S->n].in_block = fits;
    S->e[S->n].freed = 0;
    S->n++;
    S->top += sz;
    return HSI_OK;
}

/* 1 when p was the scratch's own (then nothing else to do); pops the
 * freed requests off the top of the stack */
static int scratch_give(void *p)
{
    cu_scratch *S = &t_scr;
    int i = S->n - 1, own = 0;
    while (i >= 0 && (S->e[i].ptr != p || S->e[i].freed)) i--;
    if (i < 0) return 0;
    S->e[i].freed = 1;
    own = S->e[i].in_block;
    while (S->n > 0 && S->e[S->n - 1].freed) S->top = S->e[--S->n].off;
    return own;
}

/* the size classes and the scratch's rounding wrap near SIZE_MAX (where
 * a negative count lands once cast): refused before any rounding */
#define CU_SIZE_MAX (SIZE_MAX / 4)

extern "C" hsi_status hsi_cuda_malloc(void **out, size_t size)
{
    *out = NULL;
    HSI_CU_TRY(hsi_cuda_require("device allocation"));
    if (size > CU_SIZE_MAX)
        return hsi_fail(HSI_ERR_OVERFLOW, "device allocation of %zu bytes: a negative or overflowed size", size);
    return t_scr.on ? scratch_malloc(out, size) : hsi_cuda_malloc_cached(out, size);
}

static hsi_status hsi_cuda_malloc_cached(void **out, size_t size)
{
    const cudaStream_t s = hsi_cu_stream();
    hsi_status st = HSI_OK;
    cu_block b = {NULL, 0, s, NULL};
    const int exact = no_cache();
    b.size = exact ? (size ? size : 1) : size_class(size);
    pthread_mutex_lock(&g_mem_lock);
    g_mem.n_requests++;
    int wait = 0;
    int64_t i = exact ? -1 : find_free(b.size, s, &wait);
    if (i >= 0) {
        b.ptr = g_free.a[i].ptr;
        b.ev = g_free.a[i].ev;
        cudaError_t e = wait ? cudaStreamWaitEvent(s, b.ev, 0) : cudaSuccess;
        list_remove(&g_free, i);
        g_mem.cached_bytes -= (int64_t)b.size;
        if (e != cudaSuccess) {
            cudaGetLastError();
            block_release(&b); /* cudaFree waits for the device */
            b.ptr = NULL, b.ev = NULL;
        }
    }
    if (!b.ptr) {
        cudaError_t e = cudaMalloc(&b.ptr, b.size);
        if (e != cudaSuccess) {
            cudaGetLastError();
            trim_locked();
            e = cudaMalloc(&b.ptr, b.size);
        }
        if (e != cudaSuccess) {
            cudaGetLastError();
            b.ptr = NULL;
            st = hsi_fail(HSI_ERR_NOMEM,
                          "device allocation of %zu bytes failed: %s (%lld bytes in use)", size,
                          cudaGetErrorString(e), (long long)g_mem.in_use_bytes);
        } else {
            g_mem.n_cuda_malloc++;
        }
    }
    if (b.ptr && !list_push(&g_used, &b)) {
        block_release(&b);
        b.ptr = NULL;
        st = hsi_fail(HSI_ERR_NOMEM, "device allocator: host bookkeeping out of memory");
    }
    if (b.ptr) {
        g_mem.in_use_bytes += (int64_t)b.size;
        if (g_mem.in_use_bytes > g_mem.peak_in_use_bytes)
            g_mem.peak_in_use_bytes = g_mem.in_use_bytes;
    }
    pthread_mutex_unlock(&g_mem_lock);
    *out = b.ptr;
    return st;
}

/* The event after the work queued on b's allocating stream and on stream
 * s; 0 when it cannot be recorded (the caller then frees the block). */
static int record_free(cu_block *b, cudaStream_t s)
{
    if (!b->ev && cudaEventCreateWithFlags(&b->ev, cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();
        b->ev = NULL;
        return 0;
    }
    if (b->stream != s && (cudaEventRecord(b->ev, b->stream) != cudaSuccess ||
                           cudaStreamWaitEvent(s, b->ev, 0) != cudaSuccess)) {
        cudaGetLastError();
        return 0;
    }
    if (cudaEventRecord(b->ev, s) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    b->stream = s;
    return 1;
}

extern "C" void hsi_cuda_free(void *p)
{
    if (!p) return;
    if (t_scr.on && scratch_give(p)) return;
    const cudaStream_t s = hsi_cu_stream();
    const int exact = no_cache();
    pthread_mutex_lock(&g_mem_lock);
    int64_t i = g_used.n - 1;
    while (i >= 0 && g_used.a[i].ptr != p) i--;
    HSI_ASSERT(i >= 0); /* not from hsi_cuda_malloc, or freed twice */
    cu_block b = g_used.a[i];
    list_remove(&g_used, i);
    g_mem.in_use_bytes -= (int64_t)b.size;
    if (!exact && record_free(&b, s) && list_push(&g_free, &b))
        g_mem.cached_bytes += (int64_t)b.size;
    else
        block_release(&b);
    pthread_mutex_unlock(&g_mem_lock);
}

/* Pinned host staging blocks (the tile stream's), cached as PyTorch's host
 * allocator does: page-locking costs about as much as copying the bytes,
 * so a second pass over a cube reuses the blocks of the first. A block is
 * given back only once no copy reads or writes it (the callers wait for
 * their events first), so reuse needs no event. At most HSI_PINNED_CACHE
 * bytes stay cached; HSI_CUDA_NO_CACHE=1: exact cudaHostAlloc/cudaFreeHost. */
#define HSI_PINNED_CACHE ((size_t)1 << 30)

/* cu_block's ptr and size only (no stream or event: see above) */
static cu_list g_pin_free, g_pin_used;
static size_t g_pin_cached;

hsi_status hsi_cu_pinned_alloc(void **out, size_t n, const char *what)
{
    *out = NULL;
    if (n > CU_SIZE_MAX)
        return hsi_fail(HSI_ERR_OVERFLOW, "%s: page-locked block of %zu bytes: a negative or overflowed size", what, n);
    cu_block b = {NULL, size_class(n ? n : 1), NULL, NULL};
    pthread_mutex_lock(&g_mem_lock);
    if (!no_cache())
        for (int64_t i = g_pin_free.n - 1; i >= 0; i--)
            if (g_pin_free.a[i].size == b.size && list_push(&g_pin_used, &g_pin_free.a[i])) {
                *out = g_pin_free.a[i].ptr;
                g_pin_cached -= b.size;
                list_remove(&g_pin_free, i);
                pthread_mutex_unlock(&g_mem_lock);
                return HSI_OK;
            }
    pthread_mutex_unlock(&g_mem_lock);
    cudaError_t e = cudaHostAlloc(&b.ptr, b.size, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return hsi_fail(HSI_ERR_NOMEM, "%s: cannot page-lock %.1f MiB of host memory: %s", what,
                        (double)b.size / 1048576, cudaGetErrorString(e));
    }
    pthread_mutex_lock(&g_mem_lock);
    int ok = list_push(&g_pin_used, &b);
    pthread_mutex_unlock(&g_mem_lock);
    if (!ok) {
        cudaFreeHost(b.ptr);
        return hsi_fail(HSI_ERR_NOMEM, "%s: out of memory", what);
    }
    *out = b.ptr;
    return HSI_OK;
}

void hsi_cu_pinned_free(void *p)
{
    if (!p) return;
    pthread_mutex_lock(&g_mem_lock);
    for (int64_t i = 0; i < g_pin_used.n; i++)
        if (g_pin_used.a[i].ptr == p) {
            cu_block b = g_pin_used.a[i];
            list_remove(&g_pin_used, i);
            if (!no_cache() && g_pin_cached + b.size <= HSI_PINNED_CACHE && list_push(&g_pin_free, &b)) {
                g_pin_cached += b.size;
                p = NULL;
            }
            break;
        }
    pthread_mutex_unlock(&g_mem_lock);
    if (p) cudaFreeHost(p);
}

static void pin_trim_locked(void)
{
    for (int64_t i = 0; i < g_pin_free.n; i++) cudaFreeHost(g_pin_free.a[i].ptr);
    g_pin_free.n = 0;
    g_pin_cached = 0;
}

extern "C" void hsi_cuda_cache_trim(void)
{
    if (hsi_cuda_require("trim") != HSI_OK) {
        hsi_clear_error();
        return;
    }
    pthread_mutex_lock(&g_mem_lock);
    trim_locked();
    pin_trim_locked();
    pthread_mutex_unlock(&g_mem_lock);
}

extern "C" void hsi_cuda_mem_get(hsi_cuda_mem_stats *s)
{
    pthread_mutex_lock(&g_mem_lock);
    *s = g_mem;
    pthread_mutex_unlock(&g_mem_lock);
}

static void release_cached(hsi_buffer *b) { hsi_cuda_free(b->data); }

extern "C" hsi_status hsi_cuda_buffer(hsi_buffer **out, size_t size)
{
    void *p = NULL;
    *out = NULL;
    HSI_CU_TRY(hsi_cuda_malloc(&p, size));
    hsi_status st = hsi_buffer_wrap(out, p, size, HSI_BUF_DEVICE, release_cached, NULL);
    if (st != HSI_OK) {
        hsi_cuda_free(p);
        return st;
    }
    int dev = 0;
    cudaGetDevice(&dev);
    (*out)->device = dev;
    return HSI_OK;
}

/* -------------------------------------------------------- view copies */

extern "C" hsi_status hsi_cuda_upload(void *dev, const void *host, size_t n)
{
    HSI_CU_TRY(hsi_cuda_require("host-to-device copy"));
    if (n == 0) return HSI_OK;
    HSI_CU_RET(cudaMemcpyAsync(dev, host, n, cudaMemcpyHostToDevice, hsi_cu_stream()),
               "host-to-device copy");
    HSI_CU_RET(cudaStreamSynchronize(hsi_cu_stream()), "host-to-device copy");
    return HSI_OK;
}

extern "C" hsi_status hsi_cuda_download(void *host, const void *dev, size_t n)
{
    HSI_CU_TRY(hsi_cuda_require("device-to-host copy"));
    if (n == 0) return HSI_OK;
    HSI_CU_RET(cudaMemcpyAsync(host, dev, n, cudaMemcpyDeviceToHost, hsi_cu_stream()),
               "device-to-host copy");
    HSI_CU_RET(cudaStreamSynchronize(hsi_cu_stream()), "device-to-host copy");
    return HSI_OK;
}

extern "C" hsi_status hsi_cuda_memset(void *dev, int value, size_t n)
{
    HSI_CU_TRY(hsi_cuda_require("device memset"));
    if (n == 0) return HSI_OK;
    HSI_CU_RET(cudaMemsetAsync(dev, value, n, hsi_cu_stream()), "device memset");
    return HSI_OK;
}

extern "C" hsi_status hsi_cuda_copy(void *dst, const void *src, size_t n)
{
    HSI_CU_TRY(hsi_cuda_require("device-to-device copy"));
    if (n == 0) return HSI_OK;
    HSI_CU_RET(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, hsi_cu_stream()),
               "device-to-device copy");
    return HSI_OK;
}

extern "C" hsi_status hsi_cuda_view_to_device(hsi_view *out, const hsi_view *in, hsi_dtype dtype)
{
    hsi_status st = HSI_OK;
    hsi_view packed;
    hsi_buffer *buf = NULL;
    const hsi_view *src = in;
    memset(out, 0, sizeof *out);
    memset(&packed, 0, sizeof packed);
    HSI_CU_TRY(hsi_cuda_require("view to device"));
    if (!in || !in->buf || in->buf->kind == HSI_BUF_DEVICE)
        return hsi_fail(HSI_ERR_ARG, "view to device: expected a host view, found %s",
                        in && in->buf ? "a device view" : "no view");
    if (dtype == HSI_DT_INVALID) dtype = in->dtype;
    if (!hsi_view_is_packed(in) || in->dtype != dtype) {
        st = hsi_view_contiguous(&packed, in, dtype);
        if (st != HSI_OK) return st;
        src = &packed;
    }
    {
        size_t nbytes = (size_t)hsi_view_nbytes(src);
        st = hsi_cuda_buffer(&buf, nbytes);
        if (st == HSI_OK)
            st = hsi_cuda_upload(buf->data, (const char *)src->buf->data + src->offset, nbytes);
        if (st == HSI_OK) st = hsi_view_make_packed(out, buf, 0, dtype, in->ndim, in->shape);
    }
    hsi_buffer_release(buf); /* the view holds its own reference */
    hsi_view_release(&packed);
    return st;
}

extern "C" hsi_status hsi_cuda_view_to_host(hsi_view *out, const hsi_view *in)
{
    hsi_status st;
    memset(out, 0, sizeof *out);
    HSI_CU_TRY(hsi_cuda_require("view to host"));
    if (!in || !in->buf || in->buf->kind != HSI_BUF_DEVICE)
        return hsi_fail(HSI_ERR_ARG, "view to host: expected a device view");
    {
        hsi_view probe = *in;
        probe.swapped = 0;
        if (!hsi_view_is_packed(&probe))
            return hsi_fail(HSI_ERR_UNSUPPORTED,
                            "view to host: the device view is not packed (copy it packed on the "
                            "device first)");
    }
    st = hsi_view_alloc(out, in->dtype, in->ndim, in->shape, HSI_BUF_HOST);
    if (st != HSI_OK) return st;
    out->swapped = in->swapped;
    st = hsi_cuda_download(out->buf->data, (const char *)in->buf->data + in->offset,
                           (size_t)hsi_view_nbytes(in));
    if (st != HSI_OK) hsi_view_release(out);
    return st;
}

/* ------------------------------------------------------ the plugin table */

/* This layer's part of the plugin's table (see cuda_ops.h). */
static hsi_cuda_kernel_ops make_ops(void)
{
    hsi_cuda_kernel_ops t;
    memset(&t, 0, sizeof t);
    t.sync = hsi_cuda_sync;
    t.malloc = hsi_cuda_malloc;
    t.free = hsi_cuda_free;
    t.buffer = hsi_cuda_buffer;
    t.cache_trim = hsi_cuda_cache_trim;
    t.mem_get = hsi_cuda_mem_get;
    t.view_to_device = hsi_cuda_view_to_device;
    t.view_to_host = hsi_cuda_view_to_host;
    t.upload = hsi_cuda_upload;
    t.download = hsi_cuda_download;
    t.memset = hsi_cuda_memset;
    t.copy = hsi_cuda_copy;
    t.scratch_begin = hsi_cuda_scratch_begin;
    t.scratch_end = hsi_cuda_scratch_end;
    t.stats_compute = hsi_stats_compute_cuda;
    t.fused_run = hsi_fused_run_cuda;
    t.covariance = hsi_covariance_cuda;
    return t;
}

extern "C" const hsi_cuda_kernel_ops *hsi_cu_kernel_ops(void)
{
    static const hsi_cuda_kernel_ops ops = make_ops(); /* thread-safe static init */
    return &ops;
}

/* cuda_plugin.cu — the plugin's side of core/cuda_plugin.h: the device count
 * (with the runtime's reason when there is none), pinned and device buffers
 * through cudart, the stream/event calls of the batch loader, and the one
 * exported symbol, hsi_cuda_plugin_entry, that hands libhsi the table of
 * every CUDA entry point. Built into libhsi_cuda.so only (hidden
 * visibility: calls inside the plugin bind here, not to libhsi's forwarders
 * of the same names). Not a kernel. */
#include <string.h>

#include "core/cuda_plugin.h"
#include "kernels/cuda_internal.h"

/* ------------------------------------------------------ device presence */

int hsi_cu_device_count(const char **why)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (why) *why = NULL;
    if (e != cudaSuccess) {
        if (why) *why = cudaGetErrorString(e);
        cudaGetLastError(); /* clear the sticky "no device" error */
        return 0;
    }
    return n;
}

/* ------------------------------------------------- pinned/device buffers */

static int64_t g_cuda_live[2];

static void release_pinned(hsi_buffer *b)
{
    if (b->data) cudaFreeHost(b->data);
    __atomic_sub_fetch(&g_cuda_live[0], (int64_t)b->size, __ATOMIC_RELAXED);
}

static void release_device(hsi_buffer *b)
{
    if (b->data) cudaFree(b->data);
    __atomic_sub_fetch(&g_cuda_live[1], (int64_t)b->size, __ATOMIC_RELAXED);
}

static hsi_status alloc_buffer(hsi_buffer *b, size_t size, hsi_buf_kind kind)
{
    const char *what = kind == HSI_BUF_PINNED ? "pinned" : "device";
    char ctx[64];
    snprintf(ctx, sizeof ctx, "cannot allocate %s memory", what);
    HSI_CU_TRY(hsi_cuda_require(ctx));
    cudaError_t e;
    void *p = NULL;
    size_t n = size ? size : 1;
    if (kind == HSI_BUF_PINNED) {
        e = cudaHostAlloc(&p, n, cudaHostAllocPortable);
        if (e == cudaSuccess) memset(p, 0, n);
        b->release = release_pinned;
    } else {
        e = cudaMalloc(&p, n);
        int dev = 0;
        cudaGetDevice(&dev);
        b->device = dev;
        b->release = release_device;
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        b->release = NULL;
        return hsi_fail(HSI_ERR_CUDA, "cannot allocate %zu bytes of %s memory: %s", size, what,
                        cudaGetErrorString(e));
    }
    b->data = p;
    __atomic_add_fetch(&g_cuda_live[kind == HSI_BUF_PINNED ? 0 : 1], (int64_t)size,
                       __ATOMIC_RELAXED);
    return HSI_OK;
}

/* --------------------------------------------- streams and events (loader) */

static hsi_status stream_create(void **out)
{
    cudaStream_t s = NULL;
    *out = NULL;
    HSI_CU_RET(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "creating a CUDA stream");
    *out = s;
    return HSI_OK;
}

static void stream_destroy(void *s)
{
    if (!s) return;
    cudaStreamSynchronize((cudaStream_t)s);
    cudaStreamDestroy((cudaStream_t)s);
}

static hsi_status event_create(void **out)
{
    cudaEvent_t e = NULL;
    *out = NULL;
    HSI_CU_RET(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "creating a CUDA event");
    *out = e;
    return HSI_OK;
}

static void event_destroy(void *e)
{
    if (e) cudaEventDestroy((cudaEvent_t)e);
}

static hsi_status event_record(void *e, void *s)
{
    HSI_CU_RET(cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s), "recording a CUDA event");
    return HSI_OK;
}

static hsi_status event_sync(void *e)
{
    HSI_CU_RET(cudaEventSynchronize((cudaEvent_t)e), "waiting for a CUDA event");
    return HSI_OK;
}

static hsi_status stream_wait_event(void *s, void *e)
{
    HSI_CU_RET(cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0),
               "making a CUDA stream wait for an event");
    return HSI_OK;
}

static hsi_status memcpy_async(void *dst, const void *src, size_t n, int dir, void *s)
{
    HSI_CU_RET(cudaMemcpyAsync(dst, src, n, dir ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                               (cudaStream_t)s),
               dir ? "device-to-host copy" : "host-to-device copy");
    return HSI_OK;
}

static int get_device(void)
{
    int d = 0;
    if (cudaGetDevice(&d) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return d;
}

static hsi_status set_device(int d)
{
    HSI_CU_RET(cudaSetDevice(d), "selecting the CUDA device");
    return HSI_OK;
}

/* ------------------------------------------------------------ the table */

static hsi_cuda_plugin make_table(void)
{
    hsi_cuda_plugin t;
    memset(&t, 0, sizeof t);
    t.abi = HSI_CUDA_PLUGIN_ABI;
    t.size = (uint32_t)sizeof t;
    t.device_count = hsi_cu_device_count;
    t.alloc_buffer = alloc_buffer;

    t.require = hsi_cuda_require;
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
    t.stats_compute = hsi_stats_compute_cuda;
    t.fused_run = hsi_fused_run_cuda;

    t.conv_workspace_bytes = hsi_conv_workspace_bytes_cuda;
    t.conv_forward = hsi_conv_forward_cuda;
    t.conv_backward = hsi_conv_backward_cuda;
    t.pool_forward = hsi_pool_forward_cuda;
    t.pool_backward = hsi_pool_backward_cuda;
    t.gap_forward = hsi_gap_forward_cuda;
    t.gap_backward = hsi_gap_backward_cuda;
    t.bn_forward = hsi_bn_forward_cuda;
    t.bn_backward = hsi_bn_backward_cuda;
    t.relu_forward = hsi_relu_forward_cuda;
    t.relu_backward = hsi_relu_backward_cuda;
    t.linear_forward = hsi_linear_forward_cuda;
    t.linear_backward = hsi_linear_backward_cuda;
    t.dropout_forward = hsi_dropout_forward_cuda;
    t.dropout_backward = hsi_dropout_backward_cuda;
    t.cross_entropy_forward = hsi_cross_entropy_forward_cuda;
    t.cross_entropy_backward = hsi_cross_entropy_backward_cuda;
    t.adam_step = hsi_adam_step_cuda;

    t.patches_extract = hsi_patches_extract_cuda;

    t.stream_create = stream_create;
    t.stream_destroy = stream_destroy;
    t.event_create = event_create;
    t.event_destroy = event_destroy;
    t.event_record = event_record;
    t.event_sync = event_sync;
    t.stream_wait_event = stream_wait_event;
    t.memcpy_async = memcpy_async;
    t.get_device = get_device;
    t.set_device = set_device;
    return t;
}

extern "C" __attribute__((visibility("default"))) const hsi_cuda_plugin *hsi_cuda_plugin_entry(void)
{
    static const hsi_cuda_plugin table = make_table(); /* thread-safe static init */
    return &table;
}

/* cuda_plugin.cu — the plugin's side of core/cuda_plugin.h: the device count
 * (with the runtime's reason when there is none), pinned and device buffers
 * through cudart, the stream/event calls of the batch loader, and the one
 * exported symbol, hsi_cuda_plugin_entry, that hands libhsi the table of
 * every CUDA entry point. Built into libhsi_cuda.so only (hidden
 * visibility: calls inside the plugin bind here, not to libhsi's forwarders
 * of the same names). Not a kernel. */
#include <string.h>

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>

#include "core/cuda_plugin.h"

/* The upper layers' parts of the table, filled in their own .cu files
 * (kernels/cuda_mem.cu, models/ops_cuda.cu, pipeline/patches_cuda.cu);
 * opaque here. */
extern "C" {
struct hsi_cuda_kernel_ops;
struct hsi_cuda_model_ops;
struct hsi_cuda_pipeline_ops;
const struct hsi_cuda_kernel_ops *hsi_cu_kernel_ops(void);
const struct hsi_cuda_model_ops *hsi_cu_model_ops(void);
const struct hsi_cuda_pipeline_ops *hsi_cu_pipeline_ops(void);
}

/* A runtime call that must succeed: HSI_ERR_CUDA naming it and the
 * runtime's text. */
#define CU_RET(call, what)                                                                         \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return hsi_fail(HSI_ERR_CUDA, "%s: %s (%s)", (what), cudaGetErrorString(e_), #call);   \
    } while (0)

/* ------------------------------------------------------ device presence */

int hsi_cu_device_count(const char **why)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (why) *why = NULL;
    if (e != cudaSuccess) {
        int drv = -1;
        /* no driver at all reads as "driver version is insufficient": say which */
        if (why)
            *why = e == cudaErrorInsufficientDriver && cudaDriverGetVersion(&drv) == cudaSuccess && drv == 0
                       ? "no CUDA driver is loaded (libcuda.so.1 not found: no NVIDIA driver on this "
                         "machine or in this container)"
                       : cudaGetErrorString(e);
        cudaGetLastError(); /* clear the sticky "no device" error */
        return 0;
    }
    return n;
}

static int g_have_device = -1;      /* -1 unknown, 0 no, 1 yes */
static const char *g_no_device_why; /* cudaGetErrorString of the probe, or NULL */
static pthread_once_t g_probe_once = PTHREAD_ONCE_INIT;

static void probe_device(void) { g_have_device = hsi_cu_device_count(&g_no_device_why) > 0; }

hsi_status hsi_cu_require(const char *what)
{
    pthread_once(&g_probe_once, probe_device);
    if (g_have_device) return HSI_OK;
    if (g_no_device_why)
        return hsi_fail(HSI_ERR_NO_CUDA, "%s: CUDA was asked for, but the CUDA runtime says: %s",
                        what ? what : "CUDA", g_no_device_why);
    return hsi_fail(HSI_ERR_NO_CUDA, "%s: CUDA was asked for, but the CUDA runtime reports no device",
                    what ? what : "CUDA");
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
    hsi_status st = hsi_cu_require(ctx);
    if (st != HSI_OK) return st;
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
    CU_RET(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "creating a CUDA stream");
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
    CU_RET(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "creating a CUDA event");
    *out = e;
    return HSI_OK;
}

static void event_destroy(void *e)
{
    if (e) cudaEventDestroy((cudaEvent_t)e);
}

static hsi_status event_record(void *e, void *s)
{
    CU_RET(cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s), "recording a CUDA event");
    return HSI_OK;
}

static hsi_status event_sync(void *e)
{
    CU_RET(cudaEventSynchronize((cudaEvent_t)e), "waiting for a CUDA event");
    return HSI_OK;
}

static hsi_status stream_wait_event(void *s, void *e)
{
    CU_RET(cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0),
               "making a CUDA stream wait for an event");
    return HSI_OK;
}

static hsi_status memcpy_async(void *dst, const void *src, size_t n, int dir, void *s)
{
    static const cudaMemcpyKind kinds[] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                           cudaMemcpyDeviceToDevice};
    static const char *const names[] = {"host-to-device copy", "device-to-host copy",
                                        "device-to-device copy"};
    if (dir < 0 || dir > 2) return hsi_fail(HSI_ERR_ARG, "CUDA copy: unknown direction %d", dir);
    CU_RET(cudaMemcpyAsync(dst, src, n, kinds[dir], (cudaStream_t)s), names[dir]);
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
    CU_RET(cudaSetDevice(d), "selecting the CUDA device");
    return HSI_OK;
}

static hsi_status mem_info(size_t *free_b, size_t *total_b)
{
    *free_b = *total_b = 0;
    CU_RET(cudaMemGetInfo(free_b, total_b), "reading the device's free memory");
    return HSI_OK;
}

/* ------------------------------------------------------------ CUDA Graphs */

static hsi_status capture_begin(void *s)
{
    CU_RET(cudaStreamBeginCapture((cudaStream_t)s, cudaStreamCaptureModeThreadLocal),
           "starting a CUDA Graph capture");
    return HSI_OK;
}

static hsi_status capture_end(void *s, void **exec)
{
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    *exec = NULL;
    cudaError_t e = cudaStreamEndCapture((cudaStream_t)s, &g);
    /* auto-free: a library's stream-ordered allocation captured without
     * its free (none of hsi's) cannot block the next launch */
    if (e == cudaSuccess) e = cudaGraphInstantiate(&x, g, cudaGraphInstantiateFlagAutoFreeOnLaunch);
    if (g) cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return hsi_fail(HSI_ERR_CUDA, "capturing a CUDA Graph: %s", cudaGetErrorString(e));
    }
    *exec = x;
    return HSI_OK;
}

static hsi_status graph_launch(void *x, void *s)
{
    CU_RET(cudaGraphLaunch((cudaGraphExec_t)x, (cudaStream_t)s), "launching a CUDA Graph");
    return HSI_OK;
}

static void graph_destroy(void *x)
{
    if (x) cudaGraphExecDestroy((cudaGraphExec_t)x);
}

/* ------------------------------------------------------------ the table */

static hsi_cuda_plugin make_table(void)
{
    hsi_cuda_plugin t;
    memset(&t, 0, sizeof t);
    t.abi = HSI_CUDA_PLUGIN_ABI;
    t.size = (uint32_t)sizeof t;
    t.device_count = hsi_cu_device_count;
    t.require = hsi_cu_require;
    t.alloc_buffer = alloc_buffer;

    t.kernels = hsi_cu_kernel_ops();
    t.models = hsi_cu_model_ops();
    t.pipeline = hsi_cu_pipeline_ops();

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
    t.mem_info = mem_info;
    t.capture_begin = capture_begin;
    t.capture_end = capture_end;
    t.graph_launch = graph_launch;
    t.graph_destroy = graph_destroy;
    return t;
}

extern "C" __attribute__((visibility("default"))) const hsi_cuda_plugin *hsi_cuda_plugin_entry(void)
{
    static const hsi_cuda_plugin table = make_table(); /* thread-safe static init */
    return &table;
}

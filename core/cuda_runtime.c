/* cuda_runtime.c — the CUDA runtime behind pinned and device buffers. Compiled
 * in every build; without HSI_HAVE_CUDA the entry points say CUDA is absent.
 * Kernels are elsewhere (*.cu); this file only allocates and frees. */
#include "core/core.h"

#include <string.h>

hsi_status hsi_cuda_alloc_buffer(hsi_buffer *b, size_t size, hsi_buf_kind kind);

#ifdef HSI_HAVE_CUDA
#include <cuda_runtime_api.h>

static int64_t g_cuda_live[2];

int hsi_cuda_built(void) { return 1; }

int hsi_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no device" error */
        return 0;
    }
    return n;
}

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

hsi_status hsi_cuda_alloc_buffer(hsi_buffer *b, size_t size, hsi_buf_kind kind)
{
    if (hsi_cuda_device_count() == 0)
        return HSI_FAIL(HSI_ERR_NO_CUDA, "cannot allocate %s memory: no CUDA device is present",
                        kind == HSI_BUF_PINNED ? "pinned" : "device");
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
    if (e != cudaSuccess)
        return HSI_FAIL(HSI_ERR_CUDA, "cannot allocate %zu bytes of %s memory: %s", size,
                        kind == HSI_BUF_PINNED ? "pinned" : "device", cudaGetErrorString(e));
    b->data = p;
    __atomic_add_fetch(&g_cuda_live[kind == HSI_BUF_PINNED ? 0 : 1], (int64_t)size,
                       __ATOMIC_RELAXED);
    return HSI_OK;
}

#else

int hsi_cuda_built(void) { return 0; }
int hsi_cuda_device_count(void) { return 0; }

hsi_status hsi_cuda_alloc_buffer(hsi_buffer *b, size_t size, hsi_buf_kind kind)
{
    (void)b;
    (void)size;
    return HSI_FAIL(HSI_ERR_NO_CUDA, "cannot allocate %s memory: this hsi was built without CUDA",
                    kind == HSI_BUF_PINNED ? "pinned" : "device");
}

#endif

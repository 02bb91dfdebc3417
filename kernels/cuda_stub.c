/* cuda_stub.c — the kernels/cuda.h entry points in a build without CUDA
 * (no nvcc, or CUDA=0): each says so with HSI_ERR_NO_CUDA. In a CUDA build
 * this file is empty and the .cu files define them. Not a fallback: no
 * entry point computes anything on the CPU. */
#include "kernels/cuda.h"

#include <string.h>

#ifndef HSI_HAVE_CUDA

static hsi_status no_cuda(const char *what)
{
    return hsi_fail(HSI_ERR_NO_CUDA, "%s: this hsi was built without CUDA", what);
}

hsi_status hsi_cuda_require(const char *what) { return no_cuda(what ? what : "CUDA"); }

static __thread void *t_stream;
void *hsi_cuda_set_stream(void *stream)
{
    void *prev = t_stream;
    t_stream = stream;
    return prev;
}
void *hsi_cuda_stream(void) { return t_stream; }
hsi_status hsi_cuda_sync(void) { return no_cuda("synchronise"); }

hsi_status hsi_cuda_malloc(void **out, size_t size)
{
    (void)size;
    *out = NULL;
    return no_cuda("device allocation");
}
void hsi_cuda_free(void *p) { HSI_ASSERT(p == NULL); }
hsi_status hsi_cuda_buffer(hsi_buffer **out, size_t size)
{
    (void)size;
    *out = NULL;
    return no_cuda("device buffer");
}
void hsi_cuda_cache_trim(void) {}
void hsi_cuda_mem_get(hsi_cuda_mem_stats *s) { memset(s, 0, sizeof *s); }

hsi_status hsi_cuda_view_to_device(hsi_view *out, const hsi_view *in, hsi_dtype dtype)
{
    (void)in, (void)dtype;
    memset(out, 0, sizeof *out);
    return no_cuda("view to device");
}
hsi_status hsi_cuda_view_to_host(hsi_view *out, const hsi_view *in)
{
    (void)in;
    memset(out, 0, sizeof *out);
    return no_cuda("view to host");
}
hsi_status hsi_cuda_upload(void *dev, const void *host, size_t n)
{
    (void)dev, (void)host, (void)n;
    return no_cuda("host-to-device copy");
}
hsi_status hsi_cuda_download(void *host, const void *dev, size_t n)
{
    (void)dev, (void)host, (void)n;
    return no_cuda("device-to-host copy");
}

hsi_status hsi_cuda_memset(void *dev, int value, size_t n)
{
    (void)dev, (void)value, (void)n;
    return no_cuda("device memset");
}

hsi_status hsi_stats_compute_cuda(hsi_stats *out, const hsi_view *cube, const hsi_stats_opts *opts)
{
    (void)cube, (void)opts;
    memset(out, 0, sizeof *out);
    return no_cuda("stats");
}

hsi_status hsi_fused_run_cuda(float *out, int out_on_device, const hsi_view *cube,
                              const hsi_norm *norm, const hsi_pca *pca, const hsi_fused_opts *opts)
{
    (void)out, (void)out_on_device, (void)cube, (void)norm, (void)pca, (void)opts;
    return no_cuda("fused pass");
}

#else
typedef int hsi_cuda_stub_unused; /* the .cu files define the API */
#endif

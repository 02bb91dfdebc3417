/* cuda_stub.c — the kernels/cuda.h entry points in libhsi: forwarding stubs
 * that load the CUDA plugin on first use (core/cuda_runtime.c) and call
 * through its table; when it cannot be loaded they return HSI_ERR_NO_CUDA
 * saying which file and why. This thread's stream is kept here, so setting
 * it loads nothing. The same in every build. Not a fallback: nothing here
 * computes on the CPU. */
#include "kernels/cuda.h"

#include <string.h>

#include "kernels/cuda_ops.h"
#include "kernels/kern_internal.h"
#include "kernels/stats.h"

/* The table, or NULL with HSI_ERR_NO_CUDA "<what>: <why not>" set. */
/* The kernels' functions that the plugin takes from the host process (see
 * core/cuda_host.c): named here so that a static link that reaches these
 * forwarders contains them. */
extern void *const hsi_cuda_host_symbols_kernels[];
void *const hsi_cuda_host_symbols_kernels[] = {
    (void *)hsi_stats_merge, (void *)hsi_stats_free, (void *)hsi_kern_mask_pack,
    (void *)hsi_cuda_stream, NULL,
};

static const hsi_cuda_kernel_ops *plugin(const char *what) { return hsi_cuda_kernel_ops_get(what); }

hsi_status hsi_cuda_require(const char *what)
{
    const hsi_cuda_plugin *t;
    return hsi_cuda_plugin_require(&t, what); /* the device probe is core's */
}

static __thread void *t_stream;
void *hsi_cuda_set_stream(void *stream)
{
    void *prev = t_stream;
    t_stream = stream;
    return prev;
}
void *hsi_cuda_stream(void) { return t_stream; }

hsi_status hsi_cuda_sync(void)
{
    const hsi_cuda_kernel_ops *t = plugin("synchronise");
    return t ? t->sync() : HSI_ERR_NO_CUDA;
}

hsi_status hsi_cuda_malloc(void **out, size_t size)
{
    *out = NULL;
    const hsi_cuda_kernel_ops *t = plugin("device allocation");
    return t ? t->malloc(out, size) : HSI_ERR_NO_CUDA;
}

void hsi_cuda_free(void *p)
{
    if (!p) return;
    const hsi_cuda_kernel_ops *t = plugin("device free");
    HSI_ASSERT(t != NULL); /* p came from hsi_cuda_malloc, so the plugin is loaded */
    t->free(p);
}

hsi_status hsi_cuda_buffer(hsi_buffer **out, size_t size)
{
    *out = NULL;
    const hsi_cuda_kernel_ops *t = plugin("device buffer");
    return t ? t->buffer(out, size) : HSI_ERR_NO_CUDA;
}

/* Loaded plugin or nothing: trimming or reading the statistics of a cache
 * that was never used does not load CUDA. */
static const hsi_cuda_kernel_ops *plugin_if_used(void)
{
    return hsi_cuda_plugin_loaded() ? plugin("CUDA") : NULL;
}

void hsi_cuda_cache_trim(void)
{
    const hsi_cuda_kernel_ops *t = plugin_if_used();
    if (t) t->cache_trim();
}

void hsi_cuda_mem_get(hsi_cuda_mem_stats *s)
{
    const hsi_cuda_kernel_ops *t = plugin_if_used();
    if (t) t->mem_get(s);
    else memset(s, 0, sizeof *s);
}

hsi_status hsi_cuda_view_to_device(hsi_view *out, const hsi_view *in, hsi_dtype dtype)
{
    memset(out, 0, sizeof *out);
    const hsi_cuda_kernel_ops *t = plugin("view to device");
    return t ? t->view_to_device(out, in, dtype) : HSI_ERR_NO_CUDA;
}

hsi_status hsi_cuda_view_to_host(hsi_view *out, const hsi_view *in)
{
    memset(out, 0, sizeof *out);
    const hsi_cuda_kernel_ops *t = plugin("view to host");
    return t ? t->view_to_host(out, in) : HSI_ERR_NO_CUDA;
}

hsi_status hsi_cuda_upload(void *dev, const void *host, size_t n)
{
    const hsi_cuda_kernel_ops *t = plugin("host-to-device copy");
    return t ? t->upload(dev, host, n) : HSI_ERR_NO_CUDA;
}

hsi_status hsi_cuda_download(void *host, const void *dev, size_t n)
{
    const hsi_cuda_kernel_ops *t = plugin("device-to-host copy");
    return t ? t->download(host, dev, n) : HSI_ERR_NO_CUDA;
}

hsi_status hsi_cuda_memset(void *dev, int value, size_t n)
{
    const hsi_cuda_kernel_ops *t = plugin("device memset");
    return t ? t->memset(dev, value, n) : HSI_ERR_NO_CUDA;
}

hsi_status hsi_cuda_copy(void *dst, const void *src, size_t n)
{
    const hsi_cuda_kernel_ops *t = plugin("device-to-device copy");
    return t ? t->copy(dst, src, n) : HSI_ERR_NO_CUDA;
}

hsi_status hsi_cuda_scratch_begin(void *base, size_t bytes, int strict)
{
    const hsi_cuda_kernel_ops *t = plugin("device scratch");
    return t ? t->scratch_begin(base, bytes, strict) : HSI_ERR_NO_CUDA;
}

size_t hsi_cuda_scratch_end(void)
{
    const hsi_cuda_kernel_ops *t = plugin_if_used();
    return t ? t->scratch_end() : 0;
}

hsi_status hsi_stats_compute_cuda(hsi_stats *out, const hsi_view *cube, const hsi_stats_opts *opts)
{
    memset(out, 0, sizeof *out);
    const hsi_cuda_kernel_ops *t = plugin("stats");
    return t ? t->stats_compute(out, cube, opts) : HSI_ERR_NO_CUDA;
}

hsi_status hsi_fused_run_cuda(float *out, int out_on_device, const hsi_view *cube,
                              const hsi_norm *norm, const hsi_pca *pca, const hsi_fused_opts *opts)
{
    const hsi_cuda_kernel_ops *t = plugin("fused pass");
    return t ? t->fused_run(out, out_on_device, cube, norm, pca, opts) : HSI_ERR_NO_CUDA;
}

hsi_status hsi_covariance_cuda(double *mean, double *cov, int64_t *n_used, const hsi_view *cube,
                               const hsi_norm *norm, const hsi_pca_opts *opts)
{
    const hsi_cuda_kernel_ops *t = plugin("covariance");
    return t ? t->covariance(mean, cov, n_used, cube, norm, opts) : HSI_ERR_NO_CUDA;
}

/* cuda_plugin.h — PRIVATE: the one function table between libhsi and the
 * CUDA plugin (libhsi_cuda.so, every *.cu file plus core/cuda_plugin.cu).
 * libhsi dlopens the plugin on the first device request and calls through
 * this table; the public entry points (kernels/cuda.h, models/layers_cuda.h,
 * pipeline/patches_cuda.h, hsi_cuda_device_count, pinned/device buffers)
 * are forwarders. Not installed, not an API: add a field at the end and
 * bump HSI_CUDA_PLUGIN_ABI when a signature changes. */
#ifndef HSI_CUDA_PLUGIN_H
#define HSI_CUDA_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "kernels/cuda.h"
#include "models/layers_cuda.h"
#include "pipeline/patches_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HSI_CUDA_PLUGIN_ABI 1
/* The plugin's file name and its one exported symbol, a
 * `const hsi_cuda_plugin *(void)` returning its table. */
#define HSI_CUDA_PLUGIN_FILE "libhsi_cuda.so"
#define HSI_CUDA_PLUGIN_ENTRY "hsi_cuda_plugin_entry"

typedef struct hsi_cuda_plugin {
    uint32_t abi;  /* HSI_CUDA_PLUGIN_ABI of the plugin's build */
    uint32_t size; /* sizeof(hsi_cuda_plugin) in the plugin's build */

    /* ---- device and buffers (core) */
    /* Devices present (0 when the runtime says none; *why, when not NULL,
     * gets cudaGetErrorString of the failure, or NULL). */
    int (*device_count)(const char **why);
    /* Fills b->data, b->release, b->device for a PINNED or DEVICE buffer. */
    hsi_status (*alloc_buffer)(hsi_buffer *b, size_t size, hsi_buf_kind kind);

    /* ---- kernels/cuda.h (same semantics) */
    hsi_status (*require)(const char *what);
    hsi_status (*sync)(void);
    hsi_status (*malloc)(void **out, size_t size);
    void (*free)(void *p);
    hsi_status (*buffer)(hsi_buffer **out, size_t size);
    void (*cache_trim)(void);
    void (*mem_get)(hsi_cuda_mem_stats *s);
    hsi_status (*view_to_device)(hsi_view *out, const hsi_view *in, hsi_dtype dtype);
    hsi_status (*view_to_host)(hsi_view *out, const hsi_view *in);
    hsi_status (*upload)(void *dev, const void *host, size_t n);
    hsi_status (*download)(void *host, const void *dev, size_t n);
    hsi_status (*memset)(void *dev, int value, size_t n);
    hsi_status (*stats_compute)(hsi_stats *out, const hsi_view *cube, const hsi_stats_opts *opts);
    hsi_status (*fused_run)(float *out, int out_on_device, const hsi_view *cube,
                            const hsi_norm *norm, const hsi_pca *pca, const hsi_fused_opts *opts);

    /* ---- models/layers_cuda.h (same semantics) */
    size_t (*conv_workspace_bytes)(const hsi_conv_dims *d);
    hsi_status (*conv_forward)(float *y, const float *x, const float *w, const float *b,
                               const hsi_conv_dims *d, void *ws);
    hsi_status (*conv_backward)(float *dx, float *dw, float *db, const float *dy, const float *x,
                                const float *w, const hsi_conv_dims *d, void *ws);
    hsi_status (*pool_forward)(float *y, int32_t *argmax, const float *x, const hsi_pool_dims *d);
    hsi_status (*pool_backward)(float *dx, const float *dy, const int32_t *argmax,
                                const hsi_pool_dims *d);
    hsi_status (*gap_forward)(float *y, const float *x, int n, int c, int64_t s);
    hsi_status (*gap_backward)(float *dx, const float *dy, int n, int c, int64_t s);
    hsi_status (*bn_forward)(float *y, float *save_mean, float *save_invstd, float *running_mean,
                             float *running_var, const float *x, const float *gamma,
                             const float *beta, int n, int c, int64_t s, float eps,
                             float momentum, int training);
    hsi_status (*bn_backward)(float *dx, float *dgamma, float *dbeta, const float *dy,
                              const float *x, const float *gamma, const float *save_mean,
                              const float *save_invstd, int n, int c, int64_t s, int training);
    hsi_status (*relu_forward)(float *y, const float *x, int64_t n);
    hsi_status (*relu_backward)(float *dx, const float *dy, const float *y, int64_t n);
    hsi_status (*linear_forward)(float *y, const float *x, const float *w, const float *b, int n,
                                 int in, int out);
    hsi_status (*linear_backward)(float *dx, float *dw, float *db, const float *dy,
                                  const float *x, const float *w, int n, int in, int out);
    hsi_status (*dropout_forward)(float *y, float *mask, const float *x, int64_t n, double p,
                                  uint64_t seed);
    hsi_status (*dropout_backward)(float *dx, const float *dy, const float *mask, int64_t n);
    hsi_status (*cross_entropy_forward)(float *loss, float *wsum, float *p, const float *z,
                                        const int32_t *target, const float *weight, int64_t n,
                                        int64_t c, double eps, int64_t ignore_index);
    hsi_status (*cross_entropy_backward)(float *dz, const float *dloss, const float *wsum,
                                         const float *p, const int32_t *target,
                                         const float *weight, int64_t n, int64_t c, double eps,
                                         int64_t ignore_index);
    hsi_status (*adam_step)(float *p, const float *g, float *m, float *v, int64_t n,
                            const hsi_optim_config *cfg, int64_t step);

    /* ---- pipeline/patches_cuda.h */
    hsi_status (*patches_extract)(float *out, const hsi_view *cube, int patch, hsi_pad_mode pad,
                                  const hsi_augment *aug, const int64_t *pixels, int64_t n,
                                  int augment, uint64_t seed);

    /* ---- streams and events for the batch loader (pipeline/loader.c).
     * Handles are cudaStream_t / cudaEvent_t; stream NULL = the legacy
     * default stream. Failures return HSI_ERR_CUDA with a message that
     * names the call and the runtime's error text. */
    hsi_status (*stream_create)(void **out); /* non-blocking stream */
    void (*stream_destroy)(void *stream);    /* waits for it first */
    hsi_status (*event_create)(void **out);  /* timing disabled */
    void (*event_destroy)(void *event);
    hsi_status (*event_record)(void *event, void *stream);
    hsi_status (*event_sync)(void *event);
    hsi_status (*stream_wait_event)(void *stream, void *event);
    /* dir: 0 host -> device, 1 device -> host. */
    hsi_status (*memcpy_async)(void *dst, const void *src, size_t n, int dir, void *stream);
    int (*get_device)(void);
    hsi_status (*set_device)(int device);
} hsi_cuda_plugin;

typedef const hsi_cuda_plugin *(*hsi_cuda_plugin_entry_fn)(void);

/* libhsi side (core/cuda_runtime.c). Loads the plugin once (thread-safe)
 * and returns its table; NULL when it cannot be loaded, with the reason
 * (which file, dlerror's text) set as this thread's error message. */
const hsi_cuda_plugin *hsi_cuda_plugin_get(void);
/* 1 when the plugin has been loaded (never loads it). */
int hsi_cuda_plugin_loaded(void);
/* The table when the plugin was loaded AND reports a device; else NULL
 * and HSI_ERR_NO_CUDA with the reason naming `what` (as hsi_cuda_require). */
hsi_status hsi_cuda_plugin_require(const hsi_cuda_plugin **out, const char *what);

#ifdef __cplusplus
}
#endif
#endif

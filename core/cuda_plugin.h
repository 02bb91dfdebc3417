/* cuda_plugin.h — PRIVATE: the one function table between libhsi and the
 * CUDA plugin (libhsi_cuda.so, every *.cu file plus core/cuda_plugin.cu).
 * libhsi dlopens the plugin on the first device request and calls through
 * this table; the public entry points (kernels/cuda.h, models/layers_cuda.h,
 * pipeline/patches_cuda.h, hsi_cuda_device_count, pinned/device buffers)
 * are forwarders. core's part (devices, buffers, streams, events) is here;
 * each upper layer declares its own part in its cuda_ops.h, so that core
 * names nothing above it. Not installed, not an API: bump
 * HSI_CUDA_PLUGIN_ABI when a field of any part changes. */
#ifndef HSI_CUDA_PLUGIN_H
#define HSI_CUDA_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HSI_CUDA_PLUGIN_ABI 7
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
    /* HSI_OK when a device is there, else HSI_ERR_NO_CUDA with the
     * runtime's reason, "<what>: ..." (hsi_cu_require). */
    hsi_status (*require)(const char *what);
    /* Fills b->data, b->release, b->device for a PINNED or DEVICE buffer. */
    hsi_status (*alloc_buffer)(hsi_buffer *b, size_t size, hsi_buf_kind kind);

    /* ---- the upper layers' parts, opaque here (each layer's cuda_ops.h
     * says what it holds): kernels/cuda_ops.h, models/cuda_ops.h,
     * pipeline/cuda_ops.h */
    const void *kernels, *models, *pipeline;

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
    /* dir: 0 host -> device, 1 device -> host, 2 device -> device. */
    hsi_status (*memcpy_async)(void *dst, const void *src, size_t n, int dir, void *stream);
    int (*get_device)(void);
    hsi_status (*set_device)(int device);
    /* The current device's free and total memory (cudaMemGetInfo). */
    hsi_status (*mem_info)(size_t *free_bytes, size_t *total_bytes);

    /* ---- CUDA Graphs (models/model_cuda.c: a captured training step).
     * capture_begin: from then on the work this thread queues on `stream`
     * (not the legacy stream) is recorded, not run; a call that cannot be
     * captured fails (thread-local mode: other threads are not
     * restricted). capture_end stops recording and instantiates the graph
     * (*exec: a cudaGraphExec_t), or fails when the capture went wrong
     * (nothing kept). graph_launch queues one run of it on `stream` (any
     * stream, the legacy one too). */
    hsi_status (*capture_begin)(void *stream);
    hsi_status (*capture_end)(void *stream, void **exec);
    hsi_status (*graph_launch)(void *exec, void *stream);
    void (*graph_destroy)(void *exec);
} hsi_cuda_plugin;

typedef const hsi_cuda_plugin *(*hsi_cuda_plugin_entry_fn)(void);

/* Plugin side (core/cuda_plugin.cu, inside libhsi_cuda.so): devices the
 * runtime reports (0 with *why = cudaGetErrorString of the failure, NULL
 * when it simply reports none), and HSI_OK when there is one, else
 * HSI_ERR_NO_CUDA "<what>: CUDA was asked for, but the CUDA runtime says:
 * <why>" (probed once). */
int hsi_cu_device_count(const char **why);
hsi_status hsi_cu_require(const char *what);

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

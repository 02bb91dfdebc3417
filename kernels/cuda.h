/* cuda.h — the CUDA side of the kernels: device selection and streams, a
 * caching device allocator (no cudaMalloc in a steady-state step), host <->
 * device view copies, and the GPU versions of the per-band statistics and
 * the fused select -> normalise -> project pass. Every entry point is
 * callable in every build: libhsi forwards it to the CUDA plugin
 * (libhsi_cuda.so, loaded on the first call; see core/cuda_runtime.c for
 * where it is looked for, HSI_CUDA_PLUGIN first). Without the plugin, or
 * without a device, it returns HSI_ERR_NO_CUDA with a message that says
 * why (the plugin file and dlerror's text, or the CUDA runtime's error).
 * Not the model ops (models/layers_cuda.h) or patch extraction
 * (pipeline/patches_cuda.h). */
#ifndef HSI_KERNELS_CUDA_H
#define HSI_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "kernels/fused.h"
#include "kernels/stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------ device, streams */

/* HSI_OK when this build has CUDA and a device is present (the answer is
 * looked up once, on the first call); else HSI_ERR_NO_CUDA with a message
 * naming `what` ("conv2d forward", ...). */
hsi_status hsi_cuda_require(const char *what);

/* The stream every launcher of this thread issues its work on (a
 * cudaStream_t; NULL = the legacy default stream, the initial value).
 * Thread-local. Launchers never synchronise the device; results are ready
 * in stream order. Returns the previous one. A thread's cuBLAS calls share
 * one workspace (the same memory measured and captured in a CUDA Graph):
 * switch streams once the work queued on the previous one is done
 * (hsi_cuda_sync), as hsi itself does, or two GEMMs may share it at once. */
void *hsi_cuda_set_stream(void *stream);
void *hsi_cuda_stream(void);
/* Waits for this thread's stream; HSI_ERR_CUDA names the first
 * asynchronous failure. */
hsi_status hsi_cuda_sync(void);

/* ------------------------------------------------- caching allocator */

/* Device memory from a process-wide cache (kernels/cuda_mem.cu). Sizes are
 * rounded up to a class (powers of two from 512 B to 1 MiB, then multiples
 * of 2 MiB); a freed block goes back to the cache of its class and is
 * handed out again by the next request of that class, so a training step
 * that repeats the same requests calls cudaMalloc only in its first step.
 * Reuse is safe across streams: the free records an event after the work
 * queued on the block's allocating stream and on the freeing thread's
 * stream (hsi_cuda_stream); a request reuses the block at once on the
 * stream it was freed on, on another stream once the event has completed,
 * or makes its stream wait for the event on the device. Work on a third
 * stream that still uses the block must be finished before the free (as
 * with PyTorch's allocator without record_stream). On cudaMalloc failure
 * the cache is emptied and the allocation tried once more.
 * HSI_CUDA_NO_CACHE=1 turns the cache off: every request is an exact
 * cudaMalloc and every free a cudaFree (for compute-sanitizer memcheck,
 * which cannot see overruns inside a rounded block nor uses of a cached
 * one). */
hsi_status hsi_cuda_malloc(void **out, size_t size);
void hsi_cuda_free(void *p); /* NULL is fine; p must come from hsi_cuda_malloc */
/* A HSI_BUF_DEVICE hsi_buffer (refcount 1) whose memory comes from the
 * cache and goes back to it on the last release. Not zeroed. */
hsi_status hsi_cuda_buffer(hsi_buffer **out, size_t size);
/* Returns every cached (free) block to the driver, device memory and the
 * page-locked host staging blocks. */
void hsi_cuda_cache_trim(void);

/* Scratch for a CUDA Graph capture: while set on this thread, the
 * launchers' temporary allocations (hsi_cuda_malloc ... hsi_cuda_free
 * within one call, last in first out) are carved out of [base, base +
 * bytes), a caller's device block, with no allocator call and at the same
 * addresses each time the same calls repeat. A request that does not fit
 * comes from the cache, or with `strict` fails with HSI_ERR_NOMEM.
 * hsi_cuda_scratch_end stops it and returns the bytes the requests since
 * begin needed at most (with base NULL and bytes 0: a measurement). Not
 * nested; ARG when already set. */
hsi_status hsi_cuda_scratch_begin(void *base, size_t bytes, int strict);
size_t hsi_cuda_scratch_end(void);

typedef struct hsi_cuda_mem_stats {
    int64_t in_use_bytes;  /* handed out and not freed (rounded sizes) */
    int64_t cached_bytes;  /* free blocks kept for reuse */
    int64_t peak_in_use_bytes;
    int64_t n_requests;    /* hsi_cuda_malloc calls */
    int64_t n_cuda_malloc; /* of which went to cudaMalloc (cache misses) */
    int64_t n_cuda_free;   /* cudaFree calls (trims; every free without the cache) */
} hsi_cuda_mem_stats;
void hsi_cuda_mem_get(hsi_cuda_mem_stats *s);

/* -------------------------------------------------------- view copies */

/* in: any host-visible view (host, mmap, pinned), any strides, dtype and
 * byte order. out: a new packed device view of dtype `dtype` (HSI_DT_INVALID
 * = keep in's dtype) in native byte order, in a cached device buffer.
 * Converts on the host (hsi_view_contiguous) when in is not already packed
 * and of that dtype. Waits for the copy before returning. */
hsi_status hsi_cuda_view_to_device(hsi_view *out, const hsi_view *in, hsi_dtype dtype);
/* in: a PACKED device view; out: a new packed host view (same dtype and
 * byte order). Waits for this thread's stream first (the data is final). */
hsi_status hsi_cuda_view_to_host(hsi_view *out, const hsi_view *in);
/* Copies n bytes host -> device / device -> host on this thread's stream
 * and waits for them (helpers for tests and small parameters). */
hsi_status hsi_cuda_upload(void *dev, const void *host, size_t n);
hsi_status hsi_cuda_download(void *host, const void *dev, size_t n);
/* Sets n bytes of device memory to `value` on this thread's stream (no wait). */
hsi_status hsi_cuda_memset(void *dev, int value, size_t n);
/* Copies n bytes device -> device on this thread's stream (no wait). */
hsi_status hsi_cuda_copy(void *dst, const void *src, size_t n);

/* ----------------------------------------------------------- kernels */

/* Per-band statistics on the GPU (kernels/stats_cuda.cu) with the
 * semantics of hsi_stats_compute: count, mean, var (ddof 0 and 1), std,
 * min, max over valid elements (not NaN, not the ignore value, in the
 * mask). Each block of 256 threads reduces its pixels of one band in double
 * (Welford per thread, Chan merges in the block); the per-block partials are
 * merged on the host in double, in a fixed order (results do not depend on
 * scheduling). cube: (band, line, sample) view of any real dtype, strides
 * and byte order, on the host (copied tile by tile through pinned memory,
 * tile_lines lines at a time) or on the device (read in place).
 * opts->mask: host view, as for the CPU. Histograms and percentiles are not
 * computed here: hist_bins > 0 gives HSI_ERR_UNSUPPORTED. Results are host
 * arrays; free them with hsi_stats_free. */
hsi_status hsi_stats_compute_cuda(hsi_stats *out, const hsi_view *cube,
                                  const hsi_stats_opts *opts);
/* NULL when hsi_stats_compute_cuda takes this call, else why not (what
 * hsi_stats_compute's backend rule says; never loads the plugin). */
const char *hsi_stats_cuda_unsupported(const hsi_view *cube, const hsi_stats_opts *opts);

/* The fused pass on the GPU (kernels/fused_cuda.cu), same semantics as
 * hsi_fused_run: raw elements (any real dtype, either byte order, any
 * strides) -> fill ignored/NaN -> per-band affine -> optional per-pixel L2
 * -> minus the PCA mean -> projection by cuBLAS sgemm on the whitened
 * components, in float32. cube: host/mmap/pinned view (each tile of
 * opts->tile_lines lines, 0 = about 64 MiB of raw input, is copied raw
 * through two pinned staging buffers so that packing tile t+1 on the host
 * overlaps the GPU's work on tile t, and its copy in the copy out of tile
 * t: the copies in, the kernels and the copies out each on their own
 * stream, HSI_CUDA_TILE_STREAMS=1 puts them all on this thread's) or a
 * device view (read in place; 0 = one tile). out: (n_out, lines, samples) or, with
 * opts->pixel_major, (lines, samples, n_out) packed float32; a device
 * pointer when out_on_device, else host memory (NULL with opts->sink: tiles
 * go to the sink in line order, from the calling thread). opts->n_threads
 * and progress are ignored. */
hsi_status hsi_fused_run_cuda(float *out, int out_on_device, const hsi_view *cube,
                              const hsi_norm *norm, const hsi_pca *pca,
                              const hsi_fused_opts *opts);
/* NULL when hsi_fused_run_cuda takes this call, else why not (never
 * loads the plugin). */
const char *hsi_fused_cuda_unsupported(const hsi_view *cube, const hsi_fused_opts *opts);

/* Mean and covariance (ddof 1) on the GPU (kernels/fused_cuda.cu) with the
 * semantics of hsi_covariance: per tile of lines (staged as for the fused
 * pass) the fused pass's loader makes the float32 features, which are
 * shifted by the first fitted pixel's spectrum and zeroed outside the mask
 * (host view); cuBLAS ssyrk over chunks of 8192 pixels, each chunk's float
 * product and the column sums added into double on the device (in a fixed
 * order: the bits do not depend on scheduling). n_threads, progress and
 * split are not used (a split is refused: see the supports check). */
hsi_status hsi_covariance_cuda(double *mean, double *cov, int64_t *n_used, const hsi_view *cube,
                               const hsi_norm *norm, const hsi_pca_opts *opts);
const char *hsi_covariance_cuda_unsupported(const hsi_view *cube, const hsi_pca_opts *opts);

#ifdef __cplusplus
}
#endif
#endif

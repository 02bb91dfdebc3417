/* fused.h — the fused preprocessing pass: select -> normalise -> (PCA)
 * project, reading the raw cube once (any dtype, byte order, interleave)
 * and writing float32 band-major or pixel-major, in pixel blocks that stay
 * in cache, on our pthreads (BLAS single-threaded inside them), tile by
 * tile with bounded memory. Takes views; writes no files itself (a sink
 * callback does). */
#ifndef HSI_FUSED_H
#define HSI_FUSED_H

#include <stdint.h>

#include "core/core.h"
#include "normalize.h"
#include "pca.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Called once per finished tile, from worker threads but one at a time
 * and in line order (tiles are dealt round-robin to the threads; at most
 * n_threads tiles exist at once). tile holds lines
 * [line0, line0+n_lines): band-major (n_out, n_lines, n_samples) or
 * pixel-major (n_lines, n_samples, n_out), packed float32. */
typedef hsi_status (*hsi_tile_sink)(void *ctx, const float *tile, int64_t line0, int64_t n_lines,
                                    int64_t n_out, int64_t n_samples, int pixel_major);

typedef struct hsi_fused_opts {
    int pixel_major;          /* 0: out is (n_out, lines, samples); 1: (lines, samples, n_out) */
    int64_t tile_lines;       /* lines per tile (0 = 64): bounds memory to
                                 n_threads * tile_lines * samples * n_out * 4 bytes + blocks */
    int n_threads;            /* 0 = hsi_threads() */
    const char *progress_label;
    hsi_tile_sink sink;       /* NULL: write into `out` */
    void *sink_ctx;
    hsi_device device;        /* where hsi_fused_run runs a host cube (core.h's rule; a
                                 device cube always goes to the GPU): CPU (0), CUDA, AUTO.
                                 `out` is host memory either way. */
} hsi_fused_opts;

/* Output bands: pca ? pca->n_components : norm->n_bands. */
int64_t hsi_fused_n_out(const hsi_norm *norm, const hsi_pca *pca);

/* cube: (band, line, sample) host view, any real dtype/strides/byte order.
 * With pca, its own norm (pca->norm) is applied and `norm` is ignored
 * (may be NULL); output = (norm(x) - mean) . components^T [/ sqrt(ev)].
 * Without pca, output = norm(x). out: packed float32 array in the layout
 * of opts->pixel_major (NULL when opts->sink is set). */
hsi_status hsi_fused_run(float *out, const hsi_view *cube, const hsi_norm *norm, const hsi_pca *pca,
                         const hsi_fused_opts *opts);

#ifdef __cplusplus
}
#endif
#endif

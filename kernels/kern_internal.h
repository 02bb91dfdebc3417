/* kern_internal.h — what the CPU kernels share internally: OpenBLAS thread
 * control, the "prep" block loader (band subset + per-band affine + optional
 * per-pixel L2 on any strided cube), mmap page release and mask packing.
 * Not a public header: kernels/ and models/ sources include it. The thread
 * pool is core/threads.h. */
#ifndef HSI_KERN_INTERNAL_H
#define HSI_KERN_INTERNAL_H

#include <stdint.h>

#include "core/core.h"
#include "core/threads.h"
#include "stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* For the length of a pass whose workers call BLAS: OpenBLAS to one
 * thread (returns the previous count), then back. Never nested pools. */
int hsi_kern_blas_single_begin(void);
void hsi_kern_blas_single_end(int previous);

/* How a block of pixels is turned into floats:
 *   y[j] = scale[j] * (raw(bands[j]) - center[j]) + offset[j]
 * raw equal to the ignore value (or NaN) is replaced by fill[j] first;
 * if l2, y is then divided by its Euclidean norm over j (0 stays 0);
 * then sub[j] is subtracted (PCA mean). NULL arrays mean identity
 * (scale 1, center 0, offset 0, sub 0, no fill). bands NULL = all. */
typedef struct hsi_kern_prep {
    int64_t n_bands;       /* number of selected bands */
    const int64_t *bands;  /* (n_bands) indices into the cube's band axis */
    const double *scale;   /* (n_bands) */
    const double *center;  /* (n_bands) */
    const double *offset;  /* (n_bands) */
    const double *sub;     /* (n_bands) */
    const double *fill;    /* (n_bands) value that replaces ignored raws */
    int has_ignore;
    double ignore_value;
    int l2;
} hsi_kern_prep;

/* Loads pixels (line, s0 .. s0+n_pix-1) of cube (band, line, sample) through
 * prep into dst. band_major: dst is (n_bands, ld) row-major, pixel p of band
 * j at dst[j*ld + p]; else dst is (n_pix, ld), dst[p*ld + j]. scratch must
 * hold hsi_kern_scratch_len(cube, n_pix, prep->n_bands) doubles. */
void hsi_kern_load_f64(double *dst, int64_t ld, int band_major, const hsi_view *cube,
                       const hsi_kern_prep *prep, int64_t line, int64_t s0, int64_t n_pix,
                       double *scratch);
/* Same in float (fused pass, covariance blocks). */
void hsi_kern_load_f32(float *dst, int64_t ld, int band_major, const hsi_view *cube,
                       const hsi_kern_prep *pp, int64_t line, int64_t s0, int64_t n_pix,
                       float *scratch);
/* Scratch elements (double or float) the loaders need for n_pix pixels. */
int64_t hsi_kern_scratch_len(const hsi_view *cube, int64_t n_pix, int64_t n_sel);
/* 1 when the band axis has the smallest |stride| (BIP-like): loaders read
 * whole spectra then; else they read rows of samples. */
int hsi_kern_pixel_major_input(const hsi_view *cube);

/* Releases the mmap pages under lines [l0, l1) of cube (no-op for other
 * buffers): keeps the resident set bounded when streaming a mapped file. */
void hsi_kern_release_lines(const hsi_view *cube, int64_t l0, int64_t l1);

/* Packs a (lines, samples) mask view of any real dtype into n bytes (1 =
 * selected, nonzero in the mask). */
hsi_status hsi_kern_mask_pack(uint8_t **out, const hsi_view *mask, int64_t n_lines,
                              int64_t n_samples);

/* The statistics pass splits the lines into n_chunks fixed chunks
 * (hsi_split_range(L, k, n_chunks)), each read by one thread in order and
 * merged in chunk order: the same bits on any number of threads. The
 * default count: about one chunk per 64 lines, at least min(16, lines)
 * and at most 64, fewer when each chunk also carries an n_features^2
 * covariance (64 MiB of partials at most, 4 chunks at least). */
int64_t hsi_kern_stats_chunks(const hsi_view *cube, int64_t n_features);
/* The chunks this process reads under a split (stats.h): [*k0, *k1), a
 * contiguous share; without a split, all of them. Threads then take
 * them one at a time (hsi_kern_next_chunk). */
void hsi_kern_split_range(const hsi_pass_split *sp, int64_t n_chunks, int64_t *k0, int64_t *k1);
/* The next chunk of [k0, k1) for a worker, or -1 when none is left; *next
 * starts at 0 and is shared by the pass's threads. Chunks are taken as
 * threads come free (a thread slowed by another process, page faults or a
 * BLAS worker spinning no longer holds the others at the end), and each is
 * read whole by one thread into its own partials, merged in chunk order:
 * the same bits whichever thread takes it. */
int64_t hsi_kern_next_chunk(int64_t *next, int64_t k0, int64_t k1);
/* rows: (n_chunks, width) partials, filled for the chunks read here; sets
 * the others to -inf and combines them across processes (no-op without a
 * split). */
hsi_status hsi_kern_split_exchange(const hsi_pass_split *sp, double *rows, int64_t n_chunks, int64_t width);
/* hsi_stats_compute with n_chunks (0 = hsi_kern_stats_chunks(cube, 0)) and
 * a hook it calls for each tile of lines [y0, y1) it has read (moments
 * phase only), on thread t, chunk k, in line order within the chunk,
 * before the tile's pages are released; a chunk's last tile ends at the
 * chunk's end. */
typedef void (*hsi_kern_tile_hook)(void *ctx, int64_t k, int t, int64_t y0, int64_t y1);
hsi_status hsi_stats_compute_hooked(hsi_stats *out, const hsi_view *cube, const hsi_stats_opts *opts,
                                    int64_t n_chunks, hsi_kern_tile_hook hook, void *hook_ctx);

/* Copies n floats to dst with non-temporal stores where the CPU has AVX
 * (x86-64-v3 builds; else memcpy): for outputs far bigger than the caches,
 * which then skip the read-for-ownership of every line. The writer calls
 * hsi_kern_stream_fence() before anyone else reads dst. */
void hsi_kern_stream_f32(float *dst, const float *src, int64_t n);
void hsi_kern_stream_fence(void);

/* dst[c * ldd + r] = src[r * lds + c] for a rows x cols block, by 8 x 8
 * register transposes where the CPU has AVX (the fused pass's other
 * orientation, the convolutions' channels-last planes). */
void hsi_kern_transpose_f32(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                            int64_t cols);

/* Whether the fused pass's projection and the PCA covariance run on the
 * AVX-512 register tiles (tiles512.h): the CPU has AVX-512F and
 * hsi_kern_set_tiles(0) has not asked for BLAS (sgemm, ssyrk) instead, as
 * tests and benchmarks do to compare them. Results differ only by float
 * rounding. Set it before a pass, not during one. */
int hsi_kern_tiles(void);
void hsi_kern_set_tiles(int on);
/* The covariance's exact int16 products (VNNI) on raw 8/16-bit bands: 1
 * when the CPU has AVX512-VNNI and hsi_kern_set_ints(0) (tests,
 * benchmarks) has not turned them off; the float tiles otherwise. */
int hsi_kern_ints(void);
void hsi_kern_set_ints(int on);

/* Checks that v is a host-visible (band, line, sample) real cube. */
hsi_status hsi_kern_check_cube(const hsi_view *v, const char *what);

#ifdef __cplusplus
}
#endif
#endif

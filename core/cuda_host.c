/* cuda_host.c — the libhsi functions that the CUDA plugin (libhsi_cuda.so)
 * leaves undefined and takes from the host process. Referenced here so
 * that every program that links libhsi.a statically and can reach the
 * plugin (core.o pulls this in through the buffer allocator) contains them;
 * such a program is linked with -rdynamic to export them. The plugin's
 * Makefile rule checks that each hsi_ symbol it needs is named below. Not
 * an API. */
#include "core/core.h"
#include "core/threads.h"

/* Read by core/cuda_runtime.c, so that the linker keeps this table. */
extern void *const hsi_cuda_host_symbols[];
void *const hsi_cuda_host_symbols[] = {
    /* errors */
    (void *)hsi_fail,
    (void *)hsi_fail_context,
    (void *)hsi_clear_error,
    (void *)hsi_assert_fail,
    /* dtypes, buffers, views */
    (void *)hsi_dtype_size,
    (void *)hsi_dtype_name,
    (void *)hsi_dtype_is_complex,
    (void *)hsi_buffer_wrap,
    (void *)hsi_buffer_release,
    (void *)hsi_view_alloc,
    (void *)hsi_view_release,
    (void *)hsi_view_contiguous,
    (void *)hsi_view_slice,
    (void *)hsi_view_nbytes,
    (void *)hsi_view_make_packed,
    (void *)hsi_view_is_packed,
    (void *)hsi_view_copy,
    /* threads (host-side packing of tiles) */
    (void *)hsi_parallel,
    (void *)hsi_split_range,
    (void *)hsi_threads,
    NULL,
};

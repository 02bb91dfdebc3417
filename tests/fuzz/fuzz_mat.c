/* fuzz_mat.c — libFuzzer target for the MATLAB .mat reader (io/mat.c: the v5
 * element walk, zlib checks and the matio/HDF5 read behind them). matio opens
 * files by name, so each input is written to a memfd and opened as
 * /proc/self/fd/N. A file that opens must give a view that lies inside its
 * buffer, with the shape the listing reported; anything else traps. Not a
 * test of matio's writer. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "io/mat.h"

/* HDF5 leaks internal blocks on some damaged files (seen: a bad address in
 * the object cache, H5C__verify_len_eoa); that is HDF5's, not ours. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libhdf5\n"; }

/* Every addressed byte of v inside v->buf, or trap. */
static void check_view(const hsi_view *v)
{
    if (!v->buf || !v->buf->data || v->ndim < 1 || v->ndim > HSI_MAX_DIMS) __builtin_trap();
    size_t es = hsi_dtype_size(v->dtype);
    if (es == 0 || v->offset < 0) __builtin_trap();
    int64_t lo = v->offset, hi = v->offset, n = 1;
    for (int d = 0; d < v->ndim; d++) {
        if (v->shape[d] < 0) __builtin_trap();
        if (v->shape[d] == 0) return; /* nothing addressed */
        int64_t span = (v->shape[d] - 1) * v->strides[d];
        if (span < 0) lo += span;
        else hi += span;
        n *= v->shape[d];
    }
    if (lo < 0 || (uint64_t)hi + es > v->buf->size) __builtin_trap();
    /* touch the first and last element (ASan sees a stray buffer) */
    int64_t idx[HSI_MAX_DIMS];
    for (int d = 0; d < v->ndim; d++) idx[d] = v->shape[d] - 1;
    volatile double sink = hsi_view_get_f64(v, idx);
    memset(idx, 0, sizeof idx);
    sink += hsi_view_get_f64(v, idx);
    (void)sink;
    (void)n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int init;
    if (!init) {
        hsi_set_quiet(1);
        init = 1;
    }
    int fd = memfd_create("fuzz.mat", MFD_CLOEXEC);
    if (fd < 0) return 0;
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) {
            close(fd);
            return 0;
        }
        done += (size_t)w;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);

    hsi_mat_var *vars = NULL;
    int n = 0;
    if (hsi_mat_list(&vars, &n, path) == HSI_OK) {
        if (n < 1 || !vars) __builtin_trap();
        for (int i = 0; i < n; i++)
            if (vars[i].rank < 0 || vars[i].rank > 8 || memchr(vars[i].name, 0, 64) == NULL)
                __builtin_trap();
    }

    hsi_cube c;
    if (hsi_mat_open(&c, path, NULL) == HSI_OK) {
        check_view(&c.view);
        if (c.view.ndim != 3 || c.meta.n_bands != c.view.shape[0]) __builtin_trap();
        /* the listing agrees with what was read */
        const hsi_kv *kv = hsi_meta_find(&c.meta, "mat variable");
        if (!kv || !vars) __builtin_trap();
        int found = 0;
        for (int i = 0; i < n; i++)
            if (!strcmp(vars[i].name, kv->value) && vars[i].dtype == c.view.dtype &&
                vars[i].dims[0] == c.view.shape[1] && vars[i].dims[1] == c.view.shape[2])
                found = 1;
        if (!found) __builtin_trap();
        hsi_cube_free(&c);
    }
    free(vars);

    hsi_view v;
    if (hsi_mat_open_2d(&v, NULL, path, NULL) == HSI_OK) {
        check_view(&v);
        if (v.ndim != 2) __builtin_trap();
        hsi_view_release(&v);
    }
    close(fd);
    return 0;
}

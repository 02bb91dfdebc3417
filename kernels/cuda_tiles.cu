/* cuda_tiles.cu — host -> device staging of a raw cube, tile of lines by
 * tile of lines, shared by the GPU statistics and the fused pass (see
 * hsi_cu_tiler in cuda_internal.h). The bytes keep their dtype and byte
 * order: the kernels convert. Not a kernel. */
#include <stdlib.h>
#include <string.h>

#include "core/threads.h"
#include "kernels/cuda_internal.h"
#include "kernels/tile_plan.h"

static int64_t iabs64(int64_t v) { return v < 0 ? -v : v; }

int hsi_cu_tile_streams(void)
{
    const char *e = getenv("HSI_CUDA_TILE_STREAMS");
    return e && !strcmp(e, "1") ? 1 : 3;
}

static int view_aligned(const void *base, const int64_t *strides, int64_t es)
{
    if ((uintptr_t)base % (uintptr_t)es) return 0;
    for (int k = 0; k < 3; k++)
        if (iabs64(strides[k]) % es) return 0;
    return 1;
}

hsi_status hsi_cu_tiler_init(hsi_cu_tiler *T, const hsi_view *cube, int64_t tile_lines)
{
    memset(T, 0, sizeof *T);
    T->cube = cube;
    int64_t L = cube->shape[1];
    T->on_device = cube->buf->kind == HSI_BUF_DEVICE;
    if (T->on_device) {
        T->mode = 0;
        if (tile_lines <= 0) { /* bounds the callers' float scratch to 64 Mi elements */
            int64_t per = cube->shape[0] * cube->shape[2];
            tile_lines = ((int64_t)64 << 20) / (per > 0 ? per : 1);
            if (tile_lines < 1) tile_lines = 1;
        }
        if (tile_lines > L) tile_lines = L > 0 ? L : 1;
        T->tile_lines = tile_lines;
        T->n_tiles = (L + T->tile_lines - 1) / T->tile_lines;
        return HSI_OK;
    }
    /* the copy mode and the lines per tile (kernels/tile_plan.h, tested on
     * the CPU): a tile within 64 MiB, sparse spans packed on the host */
    hsi_tile_plan(cube, tile_lines, &T->mode, &tile_lines);
    T->tile_lines = tile_lines;
    T->n_tiles = (L + tile_lines - 1) / tile_lines;
    T->cap = (size_t)hsi_tile_bytes(cube, T->mode, tile_lines, &T->pitch);
    for (int s = 0; s < 2 && s < T->n_tiles; s++) {
        HSI_CU_TRY(hsi_cu_pinned_alloc((void **)&T->pinned[s], T->cap, "cube staging"));
        HSI_CU_TRY(hsi_cuda_malloc(&T->dev[s], T->cap));
        HSI_CU_RET(cudaEventCreateWithFlags(&T->copied[s], cudaEventDisableTiming),
                   "cube staging: event");
        T->event_live[s] = 1;
    }
    if (hsi_cu_tile_streams() > 1) {
        HSI_CU_RET(cudaEventCreateWithFlags(&T->freed, cudaEventDisableTiming), "cube staging: event");
        HSI_CU_RET(cudaStreamCreateWithFlags(&T->cs, cudaStreamNonBlocking), "cube staging: copy stream");
    }
    return HSI_OK;
}

/* One tile packed into pinned memory by several host threads (a tile is
 * tens of MiB: one thread copies far below the host-to-device rate, and a
 * fresh mapping's page faults are taken in parallel too). mode 1: one span
 * cut in equal parts; 2: a span per band, bands split; 3: the bands
 * split, each part converted into its place in the packed tile. */
typedef struct pack_job {
    int mode;
    unsigned char *pin;
    const unsigned char *src;
    size_t bytes;      /* mode 1 */
    int64_t w, pitch;  /* mode 2: bytes per band and their pitch in pin */
    const hsi_view *crop; /* mode 3: the tile's lines, any layout */
} pack_job;

static hsi_status pack_part(void *ctx, int t, int nt)
{
    const pack_job *j = (const pack_job *)ctx;
    int64_t a, b;
    if (j->mode == 1) {
        hsi_split_range((int64_t)j->bytes, t, nt, &a, &b);
        memcpy(j->pin + a, j->src + a, (size_t)(b - a));
        return HSI_OK;
    }
    const hsi_view *c = j->crop;
    hsi_split_range(c->shape[0], t, nt, &a, &b);
    if (j->mode == 2) {
        for (int64_t k = a; k < b; k++) memcpy(j->pin + k * j->pitch, j->src + k * c->strides[0], (size_t)j->w);
        return HSI_OK;
    }
    if (a == b) return HSI_OK;
    /* bands [a, b) of the crop into their packed place (native order) */
    hsi_status st = HSI_OK;
    hsi_view part, dst;
    hsi_buffer *buf = NULL;
    int64_t es = (int64_t)hsi_dtype_size(c->dtype), plane = c->shape[1] * c->shape[2] * es;
    int64_t shape[3] = {b - a, c->shape[1], c->shape[2]};
    st = hsi_view_slice(&part, c, 0, a, b, 1);
    if (st != HSI_OK) return st;
    st = hsi_buffer_wrap(&buf, j->pin + a * plane, (size_t)((b - a) * plane), HSI_BUF_PINNED, NULL, NULL);
    if (st == HSI_OK) st = hsi_view_make_packed(&dst, buf, 0, c->dtype, 3, shape);
    if (st == HSI_OK) {
        st = hsi_view_copy(&dst, &part);
        hsi_view_release(&dst);
    }
    hsi_buffer_release(buf);
    hsi_view_release(&part);
    return st;
}

/* Threads for packing `bytes`: one per 4 MiB, at most hsi_threads(). */
static int pack_threads(size_t bytes, int64_t parts)
{
    int64_t n = (int64_t)(bytes >> 22) + 1, m = hsi_threads();
    if (n > m) n = m;
    if (n > parts) n = parts;
    return n < 1 ? 1 : (int)n;
}

hsi_status hsi_cu_tiler_load(hsi_cu_tiler *T, int slot, int64_t l0, int64_t l1,
                                        hsi_cu_cube *dc)
{
    const hsi_view *c = T->cube;
    int64_t es = (int64_t)hsi_dtype_size(c->dtype), n = l1 - l0;
    dc->n_bands = c->shape[0];
    dc->n_lines = n;
    dc->n_samples = c->shape[2];
    dc->dtype = (int)c->dtype;
    dc->swapped = c->swapped;
    dc->sb = c->strides[0];
    dc->sl = c->strides[1];
    dc->ss = c->strides[2];
    const unsigned char *src = (const unsigned char *)c->buf->data + c->offset + l0 * c->strides[1];
    if (T->mode == 0) {
        dc->base = src;
        dc->aligned = view_aligned(src, c->strides, es);
        return HSI_OK;
    }
    /* the slot's pinned memory is free again once its last copy is done */
    HSI_CU_RET(cudaEventSynchronize(T->copied[slot]), "cube staging: waiting for a copy");
    unsigned char *pin = T->pinned[slot];
    int64_t pitch = 0;
    size_t bytes = (size_t)hsi_tile_bytes(c, T->mode, n, &pitch);
    pack_job pj;
    memset(&pj, 0, sizeof pj);
    pj.mode = T->mode;
    pj.pin = pin;
    pj.src = src;
    if (T->mode == 1) {
        pj.bytes = bytes;
        HSI_CU_TRY(hsi_parallel(pack_threads(bytes, (int64_t)bytes), pack_part, &pj));
    } else if (T->mode == 2) {
        pj.w = (n - 1) * c->strides[1] + (c->shape[2] - 1) * c->strides[2] + es;
        pj.pitch = T->pitch;
        pj.crop = c; /* its band count and stride */
        HSI_CU_TRY(hsi_parallel(pack_threads(bytes, c->shape[0]), pack_part, &pj));
        dc->sb = T->pitch;
        bytes = (size_t)(T->pitch * c->shape[0]);
    } else {
        /* any other layout: a packed (band, line, sample) copy, native order */
        hsi_view crop;
        HSI_CU_TRY(hsi_view_slice(&crop, c, 1, l0, l1, 1));
        pj.crop = &crop;
        hsi_status st = hsi_parallel(pack_threads(bytes, c->shape[0]), pack_part, &pj);
        hsi_view_release(&crop);
        if (st != HSI_OK) return st;
        dc->ss = es;
        dc->sl = c->shape[2] * es;
        dc->sb = n * c->shape[2] * es;
        dc->swapped = 0;
    }
    /* the device slot is rewritten once the kernels queued so far (its
     * last readers among them) are done */
    cudaStream_t cs = T->cs ? T->cs : hsi_cu_stream();
    if (T->cs) {
        HSI_CU_RET(cudaEventRecord(T->freed, hsi_cu_stream()), "cube staging: event");
        HSI_CU_RET(cudaStreamWaitEvent(T->cs, T->freed, 0), "cube staging: stream wait");
    }
    HSI_CU_RET(cudaMemcpyAsync(T->dev[slot], pin, bytes, cudaMemcpyHostToDevice, cs),
               "cube staging: host-to-device copy");
    HSI_CU_RET(cudaEventRecord(T->copied[slot], cs), "cube staging: event");
    if (T->cs) HSI_CU_RET(cudaStreamWaitEvent(hsi_cu_stream(), T->copied[slot], 0), "cube staging: stream wait");
    dc->base = (const unsigned char *)T->dev[slot];
    int64_t st3[3] = {dc->sb, dc->sl, dc->ss};
    dc->aligned = view_aligned(dc->base, st3, es);
    return HSI_OK;
}

void hsi_cu_tiler_free(hsi_cu_tiler *T)
{
    if (T->cs) {
        cudaStreamSynchronize(T->cs);
        cudaStreamDestroy(T->cs);
    }
    if (T->freed) cudaEventDestroy(T->freed);
    for (int s = 0; s < 2; s++) {
        if (T->event_live[s]) {
            cudaEventSynchronize(T->copied[s]);
            cudaEventDestroy(T->copied[s]);
        }
        hsi_cu_pinned_free(T->pinned[s]);
        hsi_cuda_free(T->dev[s]);
    }
    memset(T, 0, sizeof *T);
}

/* test_pipeline_loader.c — the loader: identical batch sequences for 0, 1
 * and 3 workers (with augmented patches), ordered delivery against the
 * documented epoch order, drop_last, epoch ends, error propagation and
 * the wait statistics' bookkeeping. No timing assertions. */
#include "test.h"

#include <unistd.h>

#include "pipeline/loader.h"
#include "pipeline/patches.h"

#include "core/cuda_plugin.h"

typedef struct run_out {
    int64_t n_batches;
    int64_t n_samples;
    int64_t *samples; /* all delivered sample indices in order */
    unsigned char *x; /* all delivered x bytes in order */
    int32_t *y;
    int64_t *batch_n, *batch_epoch, *batch_index;
    uint64_t *batch_seed;
} run_out;

static void run_free(run_out *r)
{
    free(r->samples);
    free(r->x);
    free(r->y);
    free(r->batch_n);
    free(r->batch_epoch);
    free(r->batch_index);
    free(r->batch_seed);
    memset(r, 0, sizeof *r);
}

/* Runs `epochs` epochs and records everything delivered; counts the NULL
 * epoch ends in *ends. */
static hsi_status run_loader(run_out *r, const hsi_loader_params *p, int epochs, int *ends,
                             hsi_loader_stats *stats, double *sum_wait)
{
    hsi_loader *L = NULL;
    memset(r, 0, sizeof *r);
    *ends = 0;
    *sum_wait = 0;
    hsi_status st = hsi_loader_create(&L, p);
    if (st != HSI_OK) return st;
    int64_t nb = hsi_loader_batches_per_epoch(L), cap = nb * epochs;
    r->samples = malloc((size_t)(cap * p->batch_size) * 8);
    r->x = malloc((size_t)(cap * p->batch_size) * p->x_bytes);
    r->y = malloc((size_t)(cap * p->batch_size) * 4);
    r->batch_n = malloc((size_t)cap * 8);
    r->batch_epoch = malloc((size_t)cap * 8);
    r->batch_index = malloc((size_t)cap * 8);
    r->batch_seed = malloc((size_t)cap * 8);
    while (*ends < epochs) {
        hsi_batch *b;
        st = hsi_loader_next(L, &b);
        if (st != HSI_OK) break;
        if (!b) {
            (*ends)++;
            continue;
        }
        if (r->n_batches >= cap) {
            st = HSI_FAIL(HSI_ERR_STATE, "more batches than expected");
            break;
        }
        int64_t k = r->n_batches++;
        r->batch_n[k] = b->n;
        r->batch_epoch[k] = b->epoch;
        r->batch_index[k] = b->index;
        r->batch_seed[k] = b->seed;
        memcpy(r->samples + r->n_samples, b->samples, (size_t)b->n * 8);
        memcpy(r->x + r->n_samples * p->x_bytes, b->x, (size_t)b->n * p->x_bytes);
        if (b->y) memcpy(r->y + r->n_samples, b->y, (size_t)b->n * 4);
        r->n_samples += b->n;
        *sum_wait += b->wait_s;
    }
    if (stats) hsi_loader_get_stats(L, stats);
    hsi_loader_destroy(L);
    return st;
}

typedef struct scene {
    hsi_view cube;
    hsi_patcher pt;
    int64_t pixels[101];
    int32_t labels[101];
    hsi_patch_dataset ds;
} scene;

static void scene_make(scene *s)
{
    int64_t C = 5, L = 20, S = 18, shape[3] = {C, L, S};
    CU_ASSERT_EQUAL_FATAL(hsi_view_alloc(&s->cube, HSI_F32, 3, shape, HSI_BUF_HOST), HSI_OK);
    float *d = s->cube.buf->data;
    for (int64_t i = 0; i < C * L * S; i++) d[i] = (float)((i * 7919) % 1000) * 0.01f;
    hsi_augment aug = {1, 1, 0.05f};
    CU_ASSERT_EQUAL_FATAL(hsi_patcher_init(&s->pt, &s->cube, 5, HSI_PAD_MIRROR, &aug), HSI_OK);
    for (int i = 0; i < 101; i++) {
        s->pixels[i] = (i * 53) % (L * S);
        s->labels[i] = i % 7;
    }
    s->ds.patcher = &s->pt;
    s->ds.pixels = s->pixels;
    s->ds.labels = s->labels;
    s->ds.augment = 1;
}

static void scene_free(scene *s)
{
    hsi_patcher_free(&s->pt);
    hsi_view_release(&s->cube);
}

static void test_workers_identical(void)
{
    scene sc;
    scene_make(&sc);
    hsi_loader_params p;
    hsi_loader_params_init(&p);
    p.n_samples = 101;
    p.batch_size = 16;
    p.x_bytes = (size_t)hsi_patcher_sample_floats(&sc.pt) * 4;
    p.y_bytes = 4;
    p.seed = 2024;
    p.first_epoch = 3;
    p.fill = hsi_patch_fill;
    p.ctx = &sc.ds;
    int workers[3] = {0, 1, 3}, prefetch[3] = {2, 1, 3};
    run_out r[3];
    for (int w = 0; w < 3; w++) {
        p.n_workers = workers[w];
        p.prefetch = prefetch[w];
        int ends;
        double sw;
        HSI_CHECK_OK(run_loader(&r[w], &p, 2, &ends, NULL, &sw));
        CU_ASSERT_EQUAL(ends, 2);
        CU_ASSERT_EQUAL(r[w].n_batches, 14); /* ceil(101 / 16) = 7 per epoch */
        CU_ASSERT_EQUAL(r[w].n_samples, 202);
    }
    for (int w = 1; w < 3; w++) {
        CU_ASSERT_EQUAL(memcmp(r[0].samples, r[w].samples, 202 * 8), 0);
        CU_ASSERT_EQUAL(memcmp(r[0].x, r[w].x, 202 * p.x_bytes), 0);
        CU_ASSERT_EQUAL(memcmp(r[0].y, r[w].y, 202 * 4), 0);
        CU_ASSERT_EQUAL(memcmp(r[0].batch_seed, r[w].batch_seed, 14 * 8), 0);
    }
    /* the order is the documented one: epochs 3 and 4, each a permutation */
    int64_t perm[101];
    int bad = 0;
    for (int e = 0; e < 2; e++) {
        hsi_loader_epoch_order(perm, 101, 2024, 3 + e, 1);
        bad += memcmp(perm, r[0].samples + e * 101, sizeof perm) != 0;
        int seen[101] = {0};
        for (int i = 0; i < 101; i++) seen[r[0].samples[e * 101 + i]]++;
        for (int i = 0; i < 101; i++) bad += seen[i] != 1;
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_NOT_EQUAL(memcmp(r[0].samples, r[0].samples + 101, 101 * 8), 0);
    for (int k = 0; k < 14; k++) {
        CU_ASSERT_EQUAL(r[0].batch_epoch[k], 3 + k / 7);
        CU_ASSERT_EQUAL(r[0].batch_index[k], k % 7);
        CU_ASSERT_EQUAL(r[0].batch_n[k], k % 7 == 6 ? 5 : 16);
        CU_ASSERT_EQUAL(r[0].batch_seed[k], hsi_loader_batch_seed(2024, 3 + k / 7, k % 7));
    }
    /* content: what the patcher gives for those pixels and batch seeds */
    size_t per = p.x_bytes;
    float *ref = malloc(16 * per);
    int64_t pix[16], off = 0;
    bad = 0;
    for (int k = 0; k < 14; k++) {
        for (int i = 0; i < r[0].batch_n[k]; i++) pix[i] = sc.pixels[r[0].samples[off + i]];
        HSI_CHECK_OK(hsi_patches_extract(&sc.pt, ref, pix, r[0].batch_n[k], 1, r[0].batch_seed[k]));
        bad += memcmp(ref, r[0].x + off * per, (size_t)r[0].batch_n[k] * per) != 0;
        for (int i = 0; i < r[0].batch_n[k]; i++)
            bad += r[0].y[off + i] != sc.labels[r[0].samples[off + i]];
        off += r[0].batch_n[k];
    }
    CU_ASSERT_EQUAL(bad, 0);
    free(ref);
    for (int w = 0; w < 3; w++) run_free(&r[w]);
    scene_free(&sc);
}

/* Fill: x = sample index as int64 repeated, with a seed-dependent delay
 * so that workers finish out of order. */
static hsi_status slow_fill(void *ctx, const hsi_batch *b)
{
    int64_t *x = b->x;
    for (int64_t i = 0; i < b->n; i++) {
        x[2 * i] = b->samples[i];
        x[2 * i + 1] = (int64_t)(b->seed >> 1);
    }
    usleep((useconds_t)(b->seed % 400));
    return HSI_OK;
}

static void test_order_drop_last_stats(void)
{
    hsi_loader_params p;
    hsi_loader_params_init(&p);
    p.n_samples = 101;
    p.batch_size = 16;
    p.x_bytes = 16;
    p.shuffle = 0;
    p.drop_last = 1;
    p.n_workers = 4;
    p.prefetch = 1;
    p.fill = slow_fill;
    run_out r;
    int ends;
    double sum_wait;
    hsi_loader_stats stats;
    HSI_CHECK_OK(run_loader(&r, &p, 3, &ends, &stats, &sum_wait));
    CU_ASSERT_EQUAL(r.n_batches, 18); /* 6 full batches per epoch, 5 dropped samples */
    int bad = 0;
    const int64_t *x = (const int64_t *)r.x;
    for (int64_t i = 0; i < r.n_samples; i++) {
        bad += r.samples[i] != i % 96;
        bad += x[2 * i] != i % 96;
        bad += x[2 * i + 1] != (int64_t)(r.batch_seed[i / 16] >> 1);
    }
    for (int k = 0; k < 18; k++) bad += r.batch_n[k] != 16;
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(stats.batches, 18);
    CU_ASSERT_EQUAL(stats.samples, 18 * 16);
    CU_ASSERT_EQUAL(stats.n_slots, 4);
    CU_ASSERT_EQUAL(stats.pinned, hsi_cuda_device_count() > 0);
    CU_ASSERT(stats.wait_s >= 0 && stats.wait_max_s <= stats.wait_s + 1e-12);
    HSI_ASSERT_NEAR(stats.wait_s, sum_wait, 1e-9);
    CU_ASSERT(stats.fill_s > 0);
    run_free(&r);
    /* bad parameters */
    hsi_loader *L = NULL;
    p.batch_size = 200;
    HSI_CHECK_FAILS(hsi_loader_create(&L, &p), HSI_ERR_ARG, "leaves no batch");
    p.batch_size = 16;
    p.fill = NULL;
    HSI_CHECK_FAILS(hsi_loader_create(&L, &p), HSI_ERR_ARG, "fill callback");
    p.fill = slow_fill;
    if (hsi_cuda_device_count() == 0) {
        p.device_copy = 1;
        HSI_CHECK_FAILS(hsi_loader_create(&L, &p), HSI_ERR_NO_CUDA, "device_copy");
    }
}

static hsi_status failing_fill(void *ctx, const hsi_batch *b)
{
    if (b->index == 2) return HSI_FAIL(HSI_ERR_IO, "cube.dat: read failed at byte %d", 4096);
    memset(b->x, 1, (size_t)b->n * 8);
    return HSI_OK;
}

static void test_errors(void)
{
    for (int w = 0; w < 3; w += 2) {
        hsi_loader_params p;
        hsi_loader_params_init(&p);
        p.n_samples = 50;
        p.batch_size = 10;
        p.x_bytes = 8;
        p.n_workers = w;
        p.fill = failing_fill;
        hsi_loader *L = NULL;
        HSI_CHECK_OK(hsi_loader_create(&L, &p));
        hsi_batch *b = NULL;
        HSI_CHECK_OK(hsi_loader_next(L, &b));
        CU_ASSERT_PTR_NOT_NULL(b);
        HSI_CHECK_OK(hsi_loader_next(L, &b));
        HSI_CHECK_FAILS(hsi_loader_next(L, &b), HSI_ERR_IO, "batch 2: cube.dat: read failed at byte 4096");
        CU_ASSERT_PTR_NULL(b);
        HSI_CHECK_FAILS(hsi_loader_next(L, &b), HSI_ERR_STATE, "earlier batch failed");
        hsi_loader_destroy(L);
    }
}

static void test_destroy_early(void)
{
    /* destroying while workers are blocked on a full ring, mid-epoch */
    hsi_loader_params p;
    hsi_loader_params_init(&p);
    p.n_samples = 1000;
    p.batch_size = 8;
    p.x_bytes = 16;
    p.n_workers = 3;
    p.fill = slow_fill;
    hsi_loader *L = NULL;
    HSI_CHECK_OK(hsi_loader_create(&L, &p));
    hsi_batch *b = NULL;
    HSI_CHECK_OK(hsi_loader_next(L, &b));
    CU_ASSERT_PTR_NOT_NULL(b);
    CU_ASSERT_EQUAL(b->index, 0);
    hsi_loader_destroy(L);
    hsi_loader_destroy(NULL);
}

HSI_SUITE(pipeline_loader, 0, {"0, 1, 3 workers: identical batches", test_workers_identical},
          {"ordered delivery, drop_last, stats", test_order_drop_last_stats},
          {"fill errors propagate", test_errors}, {"destroy mid-epoch", test_destroy_early})

/* CUDA: each batch's device copy, read back on the consumer's stream after
 * hsi_loader_next made it wait for the copy event, equals the host batch. */
static void test_device_copy(void)
{
    /* a stream of the consumer's own, through the plugin's table (the
     * test links no CUDA library either) */
    const hsi_cuda_plugin *cu = NULL;
    HSI_CHECK_OK(hsi_cuda_plugin_require(&cu, "loader device copy test"));
    void *stream = NULL;
    HSI_CHECK_OK(cu->stream_create(&stream));
    hsi_loader_params p;
    hsi_loader_params_init(&p);
    p.n_samples = 203;
    p.batch_size = 32;
    p.x_bytes = 16;
    p.n_workers = 3;
    p.fill = slow_fill;
    p.device_copy = 1;
    p.cuda_stream = stream;
    hsi_loader *L = NULL;
    HSI_CHECK_OK(hsi_loader_create(&L, &p));
    int64_t back[64];
    int bad = 0, batches = 0, ends = 0;
    while (ends < 3) {
        hsi_batch *b;
        HSI_CHECK_OK(hsi_loader_next(L, &b));
        if (!b) {
            ends++;
            continue;
        }
        batches++;
        bad += b->x_dev == NULL;
        if (!b->x_dev) break;
        CU_ASSERT_EQUAL(cu->memcpy_async(back, b->x_dev, (size_t)b->n * 16, 1, stream), HSI_OK);
        void *done = NULL;
        CU_ASSERT_EQUAL_FATAL(cu->event_create(&done), HSI_OK);
        CU_ASSERT_EQUAL(cu->event_record(done, stream), HSI_OK);
        CU_ASSERT_EQUAL(cu->event_sync(done), HSI_OK);
        cu->event_destroy(done);
        bad += memcmp(back, b->x, (size_t)b->n * 16) != 0;
        for (int64_t i = 0; i < b->n; i++) bad += back[2 * i] != b->samples[i];
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(batches, 3 * 7);
    hsi_loader_stats st;
    hsi_loader_get_stats(L, &st);
    CU_ASSERT_EQUAL(st.pinned, 1);
    CU_ASSERT_EQUAL(st.device_copy, 1);
    hsi_loader_destroy(L);
    cu->stream_destroy(stream);
}

HSI_SUITE(pipeline_loader_cuda, HSI_SUITE_NEEDS_CUDA,
          {"device copies equal the host batches", test_device_copy})

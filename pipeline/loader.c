/* loader.c — the batch loader (see loader.h): a ring of slots, tickets
 * t = 0, 1, 2... mapped to (epoch, batch) and to slot t % n_slots; workers
 * take the next ticket when its slot has been handed back, the consumer
 * takes tickets in order. Batch contents depend only on (seed, epoch,
 * index), never on the worker that filled them. With device_copy the
 * workers also issue each batch's host-to-device copy on a copy stream,
 * through the CUDA plugin's table (core/cuda_plugin.h): nothing here links
 * CUDA. */
#include "loader.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda_plugin.h"
#include "core/prng.h"

void hsi_loader_params_init(hsi_loader_params *p)
{
    memset(p, 0, sizeof *p);
    p->prefetch = 2;
    p->shuffle = 1;
}

void hsi_loader_epoch_order(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch, int shuffle)
{
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    if (!shuffle) return;
    hsi_prng r;
    hsi_prng_init(&r, hsi_prng_key(seed ^ 0x73687566ull, (uint64_t)epoch));
    hsi_prng_shuffle_i64(&r, perm, n);
}

uint64_t hsi_loader_batch_seed(uint64_t seed, int64_t epoch, int64_t index)
{
    return hsi_prng_key(hsi_prng_key(seed ^ 0x6c6f6164ull, (uint64_t)epoch), (uint64_t)index);
}

int64_t hsi_loader_dist_batches(int64_t n_samples, int64_t batch_size, int n_ranks, int drop_last)
{
    if (n_ranks < 1) n_ranks = 1;
    if (drop_last) return n_samples / batch_size;
    int64_t total = (n_samples + n_ranks - 1) / n_ranks * n_ranks;
    return (total + batch_size - 1) / batch_size;
}

void hsi_loader_dist_batch(const int64_t *perm, int64_t n_samples, int64_t batch_size, int rank,
                           int n_ranks, int drop_last, int64_t index, int64_t *samples, int64_t *n,
                           int64_t *first, int64_t *n_global)
{
    if (n_ranks < 1) n_ranks = 1;
    int64_t total = drop_last ? n_samples / batch_size * batch_size
                              : (n_samples + n_ranks - 1) / n_ranks * n_ranks;
    int64_t g0 = index * batch_size, ng = total - g0;
    if (ng > batch_size) ng = batch_size;
    int64_t nl = ng / n_ranks, p0 = g0 + rank * nl;
    for (int64_t j = 0; j < nl; j++) {
        int64_t pos = (p0 + j) % n_samples; /* past the end: the padding, from the start */
        samples[j] = perm ? perm[pos] : pos;
    }
    *n = nl;
    *first = rank * nl;
    *n_global = ng;
}

typedef struct loader_slot {
    hsi_buffer *host, *dev;
    int64_t ticket; /* -1: never used */
    int ready;
    hsi_status status;
    char err[512];
    int64_t *samples; /* batch_size */
    hsi_batch b;
    void *copied, *released; /* cudaEvent_t, device_copy only */
    int copy_pending, release_recorded;
} loader_slot;

typedef struct perm_entry {
    int64_t epoch; /* -1: empty */
    int64_t *perm;
} perm_entry;

struct hsi_loader {
    hsi_loader_params p;
    int64_t nb;    /* batches per epoch */
    int n_ranks;   /* dist_size, at least 1 */
    int64_t local; /* samples per slot: batch_size / n_ranks */
    size_t x_cap;  /* bytes of x per slot, 64-aligned */
    size_t y_cap;
    int n_slots;
    loader_slot *slots;
    pthread_t *threads;
    int n_threads;
    int mutex_ok;
    pthread_mutex_t mu;
    pthread_cond_t cv_free, cv_ready;
    int stop;
    int64_t next_ticket; /* next ticket a worker takes */
    int64_t released;    /* tickets handed back by the consumer */
    int64_t consumed;    /* next ticket the consumer delivers */
    int holding, end_pending;
    hsi_status fail_st;
    char fail_msg[512];
    perm_entry *perms;
    int n_perms;
    hsi_loader_stats stats;
    double t0;
    int device; /* CUDA device of the copies */
    const hsi_cuda_plugin *cu; /* device_copy only */
    void *copy_stream;         /* cudaStream_t */
};

/* Sample indices of ticket t into s (under the mutex). */
static hsi_status prepare_slot(hsi_loader *L, loader_slot *s, int64_t t)
{
    const hsi_loader_params *p = &L->p;
    int64_t epoch = p->first_epoch + t / L->nb, index = t % L->nb;
    s->ticket = t;
    s->ready = 0;
    s->status = HSI_OK;
    s->err[0] = 0;
    const int64_t *perm = NULL;
    if (p->shuffle) {
        perm_entry *e = &L->perms[(uint64_t)epoch % (uint64_t)L->n_perms];
        if (e->epoch != epoch) {
            hsi_loader_epoch_order(e->perm, p->n_samples, p->seed, epoch, 1);
            e->epoch = epoch;
        }
        perm = e->perm;
    }
    int64_t n, first, n_global;
    hsi_loader_dist_batch(perm, p->n_samples, p->batch_size, p->dist_rank, L->n_ranks, p->drop_last,
                          index, s->samples, &n, &first, &n_global);
    hsi_batch *b = &s->b;
    b->epoch = epoch;
    b->index = index;
    b->n = n;
    b->first = first;
    b->n_global = n_global;
    b->samples = s->samples;
    b->seed = hsi_loader_batch_seed(p->seed, epoch, index);
    b->wait_s = 0;
    return HSI_OK;
}

/* Fills a prepared slot (outside the mutex) and issues its copy. */
static hsi_status fill_slot(hsi_loader *L, loader_slot *s, double *dt)
{
    hsi_status st = HSI_OK;
    const hsi_cuda_plugin *cu = L->cu;
    if (s->dev && s->copy_pending) {
        /* the previous copy out of this host buffer must be done */
        st = cu->event_sync(s->copied);
        s->copy_pending = 0;
        if (st != HSI_OK) return hsi_fail_context(st, "loader: previous copy of slot %d", s->b.slot);
    }
    double t0 = hsi_now();
    st = L->p.fill(L->p.ctx, &s->b);
    *dt = hsi_now() - t0;
    if (st != HSI_OK) return st;
    if (s->dev) {
        /* the consumer's work on the previous batch of this device buffer
         * must be done: wait for its release event on the copy stream */
        if (s->release_recorded) st = cu->stream_wait_event(L->copy_stream, s->released);
        if (st == HSI_OK)
            st = cu->memcpy_async(s->dev->data, s->host->data, L->x_cap + L->y_cap, 0,
                                  L->copy_stream);
        if (st == HSI_OK) st = cu->event_record(s->copied, L->copy_stream);
        if (st != HSI_OK)
            return hsi_fail_context(st, "loader: host-to-device copy of batch %lld",
                                    (long long)s->b.index);
        s->copy_pending = 1;
    }
    return HSI_OK;
}

static void finish_slot(hsi_loader *L, loader_slot *s, hsi_status st, double dt)
{
    s->status = st;
    if (st != HSI_OK) snprintf(s->err, sizeof s->err, "%s", hsi_last_error());
    s->ready = 1;
    L->stats.fill_s += dt;
}

static void *worker_main(void *arg)
{
    hsi_loader *L = arg;
    if (L->cu) L->cu->set_device(L->device); /* a failure shows in this worker's first copy */
    pthread_mutex_lock(&L->mu);
    for (;;) {
        while (!L->stop && L->next_ticket >= L->released + L->n_slots)
            pthread_cond_wait(&L->cv_free, &L->mu);
        if (L->stop) break;
        int64_t t = L->next_ticket++;
        loader_slot *s = &L->slots[t % L->n_slots];
        prepare_slot(L, s, t);
        pthread_mutex_unlock(&L->mu);
        double dt = 0;
        hsi_status st = fill_slot(L, s, &dt);
        pthread_mutex_lock(&L->mu);
        finish_slot(L, s, st, dt);
        pthread_cond_broadcast(&L->cv_ready);
    }
    pthread_mutex_unlock(&L->mu);
    return NULL;
}

int64_t hsi_loader_batches_per_epoch(const hsi_loader *L) { return L->nb; }

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

hsi_status hsi_loader_create(hsi_loader **out, const hsi_loader_params *p)
{
    hsi_status st = HSI_OK;
    *out = NULL;
    if (!p || !p->fill)
        return HSI_FAIL(HSI_ERR_ARG, "loader: a fill callback is required");
    if (p->n_samples <= 0 || p->batch_size <= 0 || p->x_bytes == 0)
        return HSI_FAIL(HSI_ERR_ARG,
                        "loader: n_samples, batch_size and x_bytes must be > 0 (found %lld, "
                        "%lld, %zu)", (long long)p->n_samples, (long long)p->batch_size,
                        p->x_bytes);
    if (p->n_workers < 0 || p->n_workers > 256 || p->prefetch < 0 || p->prefetch > 64)
        return HSI_FAIL(HSI_ERR_ARG,
                        "loader: n_workers must be in [0, 256] and prefetch in [0, 64] (found "
                        "%d, %d)", p->n_workers, p->prefetch);
    if (p->first_epoch < 0)
        return HSI_FAIL(HSI_ERR_ARG, "loader: first_epoch must be >= 0 (found %lld)",
                        (long long)p->first_epoch);
    int n_ranks = p->dist_size > 1 ? p->dist_size : 1;
    if (p->dist_rank < 0 || p->dist_rank >= n_ranks)
        return HSI_FAIL(HSI_ERR_ARG, "loader: dist_rank %d is not a rank of %d", p->dist_rank, n_ranks);
    if (p->batch_size % n_ranks != 0)
        return HSI_FAIL(HSI_ERR_ARG, "loader: the batch of %lld samples does not split into %d equal "
                                     "slices (give a batch size that is a multiple of the ranks)",
                        (long long)p->batch_size, n_ranks);
    if (p->drop_last && p->n_samples < p->batch_size)
        return HSI_FAIL(HSI_ERR_ARG,
                        "loader: drop_last with %lld samples and batch size %lld leaves no batch",
                        (long long)p->n_samples, (long long)p->batch_size);
    int64_t xb, yb, local = p->batch_size / n_ranks;
    if (!hsi_mul_ok(local, (int64_t)p->x_bytes, &xb) ||
        !hsi_mul_ok(local, (int64_t)p->y_bytes, &yb) || xb > ((int64_t)1 << 40))
        return HSI_FAIL(HSI_ERR_OVERFLOW, "loader: batch of %lld x %zu bytes is too large",
                        (long long)p->batch_size, p->x_bytes);
    const hsi_cuda_plugin *cu = NULL;
    if (p->device_copy) {
        st = hsi_cuda_plugin_require(&cu, "loader: device_copy");
        if (st != HSI_OK) return st;
    }
    /* pinned host slots only when CUDA is in use anyway: a CPU-only run
     * does not load the plugin to find out that there is no device */
    int ndev = cu || hsi_cuda_plugin_loaded() ? hsi_cuda_device_count() : 0;
    hsi_loader *L = calloc(1, sizeof *L);
    if (!L) return HSI_FAIL(HSI_ERR_NOMEM, "loader: out of memory");
    L->p = *p;
    L->cu = cu;
    if (L->p.prefetch == 0) L->p.prefetch = 2;
    L->n_ranks = n_ranks;
    L->local = local;
    L->nb = hsi_loader_dist_batches(p->n_samples, p->batch_size, n_ranks, p->drop_last);
    L->x_cap = round64((size_t)xb);
    L->y_cap = round64((size_t)yb);
    L->n_slots = p->n_workers > 0 ? p->n_workers * L->p.prefetch : 1;
    if (pthread_mutex_init(&L->mu, NULL) || pthread_cond_init(&L->cv_free, NULL) ||
        pthread_cond_init(&L->cv_ready, NULL)) {
        free(L);
        return HSI_FAIL(HSI_ERR_NOMEM, "loader: cannot create a mutex");
    }
    L->mutex_ok = 1;
    L->slots = calloc((size_t)L->n_slots, sizeof *L->slots);
    if (!L->slots) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "loader: out of memory");
        goto cleanup;
    }
    if (p->shuffle) {
        /* a cache of epoch orders, tagged by epoch: tickets in flight span
         * at most n_slots / nb + 2 epochs; a smaller cache would only cost
         * recomputation, never a wrong order */
        L->n_perms = (int)(L->n_slots / L->nb) + 3;
        L->perms = calloc((size_t)L->n_perms, sizeof *L->perms);
        if (!L->perms) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "loader: out of memory");
            goto cleanup;
        }
        for (int i = 0; i < L->n_perms; i++) {
            L->perms[i].epoch = -1;
            L->perms[i].perm = malloc((size_t)p->n_samples * sizeof(int64_t));
            if (!L->perms[i].perm) {
                st = HSI_FAIL(HSI_ERR_NOMEM, "loader: out of memory for %lld indices",
                              (long long)p->n_samples);
                goto cleanup;
            }
        }
    }
    hsi_buf_kind kind = ndev > 0 ? HSI_BUF_PINNED : HSI_BUF_HOST;
    L->stats.pinned = kind == HSI_BUF_PINNED;
    L->stats.device_copy = p->device_copy;
    L->stats.n_slots = L->n_slots;
    if (cu) {
        L->device = cu->get_device();
        st = cu->stream_create(&L->copy_stream);
        if (st != HSI_OK) {
            hsi_fail_context(st, "loader: the copy stream");
            goto cleanup;
        }
    }
    for (int i = 0; i < L->n_slots; i++) {
        loader_slot *s = &L->slots[i];
        s->ticket = -1;
        HSI_TRY(hsi_buffer_alloc(&s->host, L->x_cap + L->y_cap, kind));
        s->samples = malloc((size_t)local * sizeof *s->samples);
        if (!s->samples) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "loader: out of memory");
            goto cleanup;
        }
        s->b.x = s->host->data;
        s->b.y = p->y_bytes ? (char *)s->host->data + L->x_cap : NULL;
        s->b.slot = i;
        if (cu) {
            HSI_TRY(hsi_buffer_alloc(&s->dev, L->x_cap + L->y_cap, HSI_BUF_DEVICE));
            s->b.x_dev = s->dev->data;
            s->b.y_dev = p->y_bytes ? (char *)s->dev->data + L->x_cap : NULL;
            st = cu->event_create(&s->copied);
            if (st == HSI_OK) st = cu->event_create(&s->released);
            if (st != HSI_OK) {
                hsi_fail_context(st, "loader: slot %d", i);
                goto cleanup;
            }
        }
    }
    L->threads = calloc((size_t)(p->n_workers ? p->n_workers : 1), sizeof *L->threads);
    if (!L->threads) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "loader: out of memory");
        goto cleanup;
    }
    L->t0 = hsi_now();
    for (int i = 0; i < p->n_workers; i++) {
        if (pthread_create(&L->threads[i], NULL, worker_main, L) != 0) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "loader: cannot start worker thread %d of %d", i + 1,
                          p->n_workers);
            goto cleanup;
        }
        L->n_threads++;
    }
    *out = L;
    return HSI_OK;
cleanup:
    hsi_loader_destroy(L);
    return st;
}

static void release_current(hsi_loader *L)
{
    loader_slot *s = &L->slots[(L->consumed - 1) % L->n_slots];
    if (s->dev) {
        /* a failure here shows in the next copy or wait on these streams */
        if (L->cu->event_record(s->released, L->p.cuda_stream) == HSI_OK) s->release_recorded = 1;
        else hsi_clear_error();
    }
    pthread_mutex_lock(&L->mu);
    L->released++;
    pthread_cond_broadcast(&L->cv_free);
    pthread_mutex_unlock(&L->mu);
    L->holding = 0;
}

hsi_status hsi_loader_next(hsi_loader *L, hsi_batch **batch)
{
    *batch = NULL;
    if (L->fail_st != HSI_OK)
        return HSI_FAIL(HSI_ERR_STATE, "loader: an earlier batch failed (%s)", L->fail_msg);
    if (L->holding) release_current(L);
    if (L->end_pending) {
        L->end_pending = 0;
        return HSI_OK;
    }
    int64_t t = L->consumed;
    loader_slot *s = &L->slots[t % L->n_slots];
    double t0 = hsi_now();
    if (L->p.n_workers == 0) {
        double dt = 0;
        pthread_mutex_lock(&L->mu);
        prepare_slot(L, s, t);
        L->next_ticket = t + 1;
        pthread_mutex_unlock(&L->mu);
        hsi_status st = fill_slot(L, s, &dt);
        finish_slot(L, s, st, dt);
    } else {
        pthread_mutex_lock(&L->mu);
        while (!(s->ticket == t && s->ready)) pthread_cond_wait(&L->cv_ready, &L->mu);
        pthread_mutex_unlock(&L->mu);
    }
    double wait = hsi_now() - t0;
    if (s->status != HSI_OK) {
        L->fail_st = s->status;
        snprintf(L->fail_msg, sizeof L->fail_msg, "%s", s->err);
        return HSI_FAIL(s->status, "loader: epoch %lld batch %lld: %s", (long long)s->b.epoch,
                        (long long)s->b.index, s->err);
    }
    if (s->dev) {
        hsi_status e = L->cu->stream_wait_event(L->p.cuda_stream, s->copied);
        if (e != HSI_OK) {
            L->fail_st = e;
            snprintf(L->fail_msg, sizeof L->fail_msg, "%s", hsi_last_error());
            return hsi_fail_context(e, "loader: waiting for batch %lld's copy",
                                    (long long)s->b.index);
        }
    }
    s->b.wait_s = wait;
    L->stats.batches++;
    L->stats.samples += s->b.n;
    L->stats.wait_s += wait;
    if (wait > L->stats.wait_max_s) L->stats.wait_max_s = wait;
    L->consumed = t + 1;
    L->holding = 1;
    if (s->b.index == L->nb - 1) L->end_pending = 1;
    *batch = &s->b;
    return HSI_OK;
}

void hsi_loader_get_stats(const hsi_loader *L, hsi_loader_stats *s)
{
    pthread_mutex_lock((pthread_mutex_t *)&L->mu);
    *s = L->stats;
    pthread_mutex_unlock((pthread_mutex_t *)&L->mu);
    s->elapsed_s = hsi_now() - L->t0;
}

void hsi_loader_reset_stats(hsi_loader *L)
{
    pthread_mutex_lock(&L->mu);
    L->stats.batches = L->stats.samples = 0;
    L->stats.wait_s = L->stats.wait_max_s = L->stats.fill_s = 0;
    L->t0 = hsi_now();
    pthread_mutex_unlock(&L->mu);
}

void hsi_loader_destroy(hsi_loader *L)
{
    if (!L) return;
    if (L->mutex_ok) {
        pthread_mutex_lock(&L->mu);
        L->stop = 1;
        pthread_cond_broadcast(&L->cv_free);
        pthread_cond_broadcast(&L->cv_ready);
        pthread_mutex_unlock(&L->mu);
    }
    for (int i = 0; i < L->n_threads; i++) pthread_join(L->threads[i], NULL);
    free(L->threads);
    /* the copy stream is drained before the buffers it reads go away */
    if (L->copy_stream) L->cu->stream_destroy(L->copy_stream);
    for (int i = 0; L->slots && i < L->n_slots; i++) {
        loader_slot *s = &L->slots[i];
        if (s->copied) L->cu->event_destroy(s->copied);
        if (s->released) L->cu->event_destroy(s->released);
        hsi_buffer_release(s->host);
        hsi_buffer_release(s->dev);
        free(s->samples);
    }
    free(L->slots);
    for (int i = 0; L->perms && i < L->n_perms; i++) free(L->perms[i].perm);
    free(L->perms);
    if (L->mutex_ok) {
        pthread_mutex_destroy(&L->mu);
        pthread_cond_destroy(&L->cv_free);
        pthread_cond_destroy(&L->cv_ready);
    }
    free(L);
}

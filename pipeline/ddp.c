/* ddp.c — data-parallel steps (see ddp.h): buckets, the backward hook
 * that starts their allreduce, the tile loop, the deterministic tree, the
 * parameter hash. The communication is core/dist.h's; nothing here knows
 * of MPI. */
#include "pipeline/ddp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dist.h"
#include "core/threads.h"
#include "pipeline/run_internal.h"

#define DDP_MAX_BUCKETS 4096

typedef struct ddp_bucket {
    int lo, hi;    /* parameters hi, hi - 1, ..., lo (reverse order) */
    int64_t count; /* floats */
    int pending;   /* parameters whose gradient is not complete yet */
    int launched;
    float *buf;
    hsi_dist_req req;
} ddp_bucket;

struct hsi_ddp {
    hsi_ddp_config c;
    hsi_module *net;
    hsi_optim *opt;
    hsi_named_tensor *state; /* parameters and buffers, state_dict order */
    int n_state;
    int n_params;            /* opt->params */
    int64_t *p_off;          /* offset of parameter i in the flat gradient */
    int64_t total;           /* floats of all gradients */
    ddp_bucket *b;
    int n_b, next_launch;
    int *p_bucket, *uses;    /* per parameter: its bucket; nodes left to run in this backward */
    int hook_on;
    float *tiles;            /* deterministic: (n_tiles, total) */
    int64_t tiles_cap;
    void *snap;              /* deterministic: buffers after the first tile */
    size_t snap_bytes;
    int64_t step;
    hsi_ddp_stats st;
};

void hsi_ddp_config_init(hsi_ddp_config *c)
{
    memset(c, 0, sizeof *c);
    c->bucket_mb = 25;
    c->overlap = 1;
    c->hash_every = 50;
}

static hsi_status bn_reduce(void *ctx, double *v, int64_t n)
{
    (void)ctx;
    return hsi_dist_allreduce(v, n, HSI_F64, HSI_DIST_SUM);
}

static size_t tensor_bytes(const hsi_tensor *t)
{
    return (size_t)hsi_tensor_count(t) * hsi_dtype_size(t->data.dtype);
}

hsi_status hsi_ddp_create(hsi_ddp **out, hsi_module *net, hsi_optim *opt, const hsi_ddp_config *cfg)
{
    hsi_status st = HSI_OK;
    *out = NULL;
    if (cfg->deterministic && cfg->bn_sync)
        return HSI_FAIL(HSI_ERR_UNSUPPORTED,
                        "--deterministic with --bn sync: synchronised batch norm needs the whole "
                        "global batch in one pass, the deterministic mode runs fixed tiles apart; "
                        "use --bn local with --deterministic");
    if (cfg->tile < 0 || cfg->bucket_mb <= 0 || cfg->hash_every < 0)
        return HSI_FAIL(HSI_ERR_ARG, "ddp: tile must be >= 0, bucket_mb > 0 and hash_every >= 0 "
                                     "(found %d, %g, %d)", cfg->tile, cfg->bucket_mb, cfg->hash_every);
    hsi_ddp *d = calloc(1, sizeof *d);
    if (!d) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    d->c = *cfg;
    if (d->c.deterministic && d->c.tile == 0) d->c.tile = 4;
    d->net = net;
    d->opt = opt;
    d->n_params = opt->n;
    HSI_TRY(hsi_module_state(net, &d->state, &d->n_state));
    /* rank 0's state everywhere (the ranks built the same model from the
     * same seed, but a resumed or hand-made one may differ) */
    HSI_TRY(hsi_ddp_broadcast_state(d, 0));
    d->p_off = calloc((size_t)d->n_params + 1, sizeof *d->p_off);
    d->p_bucket = calloc((size_t)d->n_params + 1, sizeof *d->p_bucket);
    d->uses = calloc((size_t)d->n_params + 1, sizeof *d->uses);
    d->b = calloc(DDP_MAX_BUCKETS, sizeof *d->b);
    if (!d->p_off || !d->p_bucket || !d->uses || !d->b) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (int i = 0; i < d->n_params; i++) {
        hsi_tensor *p = opt->params[i].t;
        if (p->data.dtype != HSI_F32) {
            st = HSI_FAIL(HSI_ERR_UNSUPPORTED, "ddp: parameter %s is %s; data-parallel training is "
                                               "float32 only",
                          opt->params[i].name, hsi_dtype_name(p->data.dtype));
            goto cleanup;
        }
        d->p_off[i] = d->total;
        d->total += hsi_tensor_count(p);
    }
    d->p_off[d->n_params] = d->total;
    /* buckets in reverse parameter order: gradients come out of backward
     * last layer first (DDP: first bucket 1 MiB, then bucket_cap_mb) */
    double cap = 1024.0 * 1024.0, later = d->c.bucket_mb * 1024.0 * 1024.0;
    if (later < cap) cap = later; /* a smaller --bucket-mb caps the first one too */
    for (int i = d->n_params - 1; i >= 0;) {
        if (d->n_b == DDP_MAX_BUCKETS) {
            st = HSI_FAIL(HSI_ERR_ARG, "ddp: more than %d buckets; give a larger --bucket-mb",
                          DDP_MAX_BUCKETS);
            goto cleanup;
        }
        ddp_bucket *bk = &d->b[d->n_b];
        bk->hi = i;
        double bytes = 0;
        while (i >= 0) {
            bytes += 4.0 * (double)hsi_tensor_count(opt->params[i].t);
            d->p_bucket[i] = d->n_b;
            i--;
            if (bytes >= cap) break;
        }
        bk->lo = i + 1;
        bk->count = (int64_t)(bytes / 4);
        if (!(bk->buf = malloc((size_t)bk->count * sizeof *bk->buf + 64))) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        if (d->n_b < 64) d->st.bucket_bytes[d->n_b] = (int64_t)bytes;
        d->n_b++;
        cap = later;
    }
    d->st.n_buckets = d->n_b;
    d->st.grad_bytes = 4 * d->total;
    if (d->c.bn_sync) hsi_bn_set_sync(bn_reduce, d);
    *out = d;
    return HSI_OK;
cleanup:
    hsi_ddp_free(d);
    return st;
}

void hsi_ddp_free(hsi_ddp *d)
{
    if (!d) return;
    void *ctx = NULL;
    if (hsi_bn_get_sync(&ctx) == bn_reduce && ctx == d) hsi_bn_set_sync(NULL, NULL);
    for (int i = 0; d->b && i < d->n_b; i++) {
        (void)hsi_dist_wait(&d->b[i].req);
        free(d->b[i].buf);
    }
    free(d->b);
    free(d->p_off);
    free(d->p_bucket);
    free(d->uses);
    free(d->state);
    free(d->tiles);
    free(d->snap);
    free(d);
}

static float *grad_of(hsi_tensor *p) { return p->grad ? hsi_tensor_ptr(p->grad) : NULL; }

static hsi_status launch(hsi_ddp *d, int k)
{
    ddp_bucket *bk = &d->b[k];
    float *o = bk->buf;
    for (int i = bk->hi; i >= bk->lo; i--) {
        hsi_tensor *p = d->opt->params[i].t;
        int64_t n = hsi_tensor_count(p);
        const float *gp = grad_of(p);
        if (gp) memcpy(o, gp, (size_t)n * sizeof *o);
        else memset(o, 0, (size_t)n * sizeof *o);
        o += n;
    }
    bk->launched = 1;
    return hsi_dist_iallreduce_sum(bk->buf, bk->count, HSI_F32, &bk->req);
}

/* Starts the buckets that are complete, in bucket order (every rank issues
 * the same collectives in the same order), and lets MPI progress. */
static hsi_status launch_ready(hsi_ddp *d, int all)
{
    while (d->next_launch < d->n_b && (all || d->b[d->next_launch].pending == 0)) {
        hsi_status st = launch(d, d->next_launch);
        if (st != HSI_OK) return st;
        d->next_launch++;
    }
    for (int k = 0; k < d->next_launch; k++) {
        int done = 0;
        hsi_status st = hsi_dist_test(&d->b[k].req, &done);
        if (st != HSI_OK) return st;
    }
    return HSI_OK;
}

static hsi_status bw_hook(void *ctx, hsi_node *n)
{
    hsi_ddp *d = ctx;
    int any = 0;
    for (int i = 0; i < n->n_in; i++) {
        hsi_tensor *t = n->in[i];
        if (!t || t->grad_fn || !t->requires_grad) continue;
        for (int p = 0; p < d->n_params; p++)
            if (d->opt->params[p].t == t) {
                if (--d->uses[p] == 0) {
                    d->b[d->p_bucket[p]].pending--;
                    any = 1;
                }
                break;
            }
    }
    return any ? launch_ready(d, 0) : HSI_OK;
}

/* Before the last backward: how many recorded nodes take each parameter
 * (a bucket is complete when all of them have run; one that never runs,
 * off the loss's path, leaves its bucket for the end). */
static void count_uses(hsi_ddp *d, hsi_tensor *loss)
{
    for (int p = 0; p < d->n_params; p++) d->uses[p] = 0;
    for (int k = 0; k < d->n_b; k++) {
        d->b[k].pending = 0;
        d->b[k].launched = 0;
    }
    for (hsi_node *n = loss->grad_fn; n; n = n->prev)
        for (int i = 0; i < n->n_in; i++)
            for (int p = 0; n->in[i] && p < d->n_params; p++)
                if (d->opt->params[p].t == n->in[i]) {
                    d->uses[p]++;
                    break;
                }
    for (int p = 0; p < d->n_params; p++)
        if (d->uses[p]) d->b[d->p_bucket[p]].pending++;
    d->next_launch = 0;
}

static hsi_status finish_buckets(hsi_ddp *d)
{
    hsi_status st = launch_ready(d, 1);
    for (int k = 0; k < d->n_b && st == HSI_OK; k++) {
        st = hsi_dist_wait(&d->b[k].req);
        if (st != HSI_OK) break;
        ddp_bucket *bk = &d->b[k];
        const float *o = bk->buf;
        for (int i = bk->hi; i >= bk->lo; i--) {
            hsi_tensor *p = d->opt->params[i].t;
            int64_t n = hsi_tensor_count(p);
            float *gp = grad_of(p);
            if (gp) memcpy(gp, o, (size_t)n * sizeof *o);
            o += n;
        }
    }
    return st;
}

static size_t buffers_bytes(const hsi_ddp *d)
{
    size_t b = 0;
    for (int i = 0; i < d->n_state; i++)
        if (d->state[i].is_buffer) b += tensor_bytes(d->state[i].t);
    return b;
}

static void buffers_copy(hsi_ddp *d, int to_snap)
{
    char *s = d->snap;
    for (int i = 0; i < d->n_state; i++) {
        if (!d->state[i].is_buffer) continue;
        hsi_tensor *t = d->state[i].t;
        size_t k = tensor_bytes(t);
        if (to_snap) memcpy(s, hsi_tensor_ptr(t), k);
        else memcpy(hsi_tensor_ptr(t), s, k);
        s += k;
    }
}

hsi_status hsi_ddp_step(hsi_ddp *d, hsi_graph *g, const float *x, const int32_t *y, int64_t n,
                        int x_ndim, const int64_t *x_shape, int64_t first, int64_t n_global,
                        uint64_t seed, double *loss_sum, int64_t *correct)
{
    hsi_status st = HSI_OK;
    const int N = hsi_dist_size();
    const int det = d->c.deterministic;
    const int64_t T = d->c.tile > 0 && d->c.tile < n ? d->c.tile : n;
    const int64_t n_tiles = (n + T - 1) / T;
    int64_t per = 1;
    int threads_before = hsi_threads();
    *loss_sum = 0;
    *correct = 0;
    if (n <= 0 || x_ndim < 1 || x_ndim > 4)
        return HSI_FAIL(HSI_ERR_ARG, "ddp step: %lld samples of %d dims", (long long)n, x_ndim);
    for (int k = 0; k < x_ndim; k++) per *= x_shape[k];
    if (det && (n % T != 0 || first % T != 0))
        return HSI_FAIL(HSI_ERR_ARG,
                        "--deterministic: this rank's slice (%lld samples at %lld of the global "
                        "batch) does not split into tiles of %lld; give a --batch that is a "
                        "multiple of ranks x --tile, and at least --batch training samples",
                        (long long)n, (long long)first, (long long)T);
    if (det) {
        if (n_tiles * d->total > d->tiles_cap) {
            float *nt = realloc(d->tiles, (size_t)(n_tiles * d->total) * sizeof *nt);
            if (!nt) return HSI_FAIL(HSI_ERR_NOMEM, "ddp: out of memory for %lld tile gradients",
                                     (long long)n_tiles);
            d->tiles = nt;
            d->tiles_cap = n_tiles * d->total;
        }
        size_t bb = buffers_bytes(d);
        if (bb > d->snap_bytes) {
            void *ns = realloc(d->snap, bb);
            if (!ns) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            d->snap = ns;
            d->snap_bytes = bb;
        }
        /* one thread per sample: the convolutions' per-thread weight
         * partials are then per sample, whatever the cores */
        hsi_threads_set((int)T);
    }
    hsi_optim_zero_grad(d->opt);
    for (int64_t t = 0; t < n_tiles; t++) {
        int64_t o = t * T, nt = n - o < T ? n - o : T;
        double t0 = hsi_now();
        hsi_graph_reset(g);
        hsi_tensor *xt = NULL, *yt = NULL, *logits = NULL, *loss = NULL, *scaled = NULL;
        int64_t xs[5] = {nt}, ys[1] = {nt};
        for (int k = 0; k < x_ndim; k++) xs[k + 1] = x_shape[k];
        HSI_TRY(hsi_graph_tensor(&xt, g, HSI_F32, x_ndim + 1, xs, 0));
        HSI_TRY(hsi_graph_tensor(&yt, g, HSI_I32, 1, ys, 0));
        memcpy(hsi_tensor_ptr(xt), x + o * per, (size_t)(nt * per) * sizeof(float));
        memcpy(hsi_tensor_ptr(yt), y + o, (size_t)nt * sizeof(int32_t));
        hsi_dropout_key_set(seed ? seed : 1, first + o);
        hsi_ce_opts ce;
        hsi_ce_opts_default(&ce);
        HSI_TRY(hsi_module_forward(&logits, d->net, g, xt));
        HSI_TRY(hsi_cross_entropy(&loss, g, logits, yt, &ce));
        HSI_TRY(hsi_scale(&scaled, g, loss, (double)nt / (double)n_global));
        double l = hsi_tensor_item(loss);
        if (!isfinite(l)) {
            st = HSI_FAIL(HSI_ERR_NUMERIC, "training diverged: loss is %g (lower --lr?)", l);
            goto cleanup;
        }
        *loss_sum += l * (double)nt;
        *correct += hsi_run_count_correct(hsi_tensor_ptr(logits), nt, logits->data.shape[1], y + o);
        if (det && t == 0) buffers_copy(d, 1);
        double t1 = hsi_now();
        int hook = !det && N > 1 && d->c.overlap && t == n_tiles - 1;
        if (hook) {
            count_uses(d, scaled);
            hsi_backward_set_hook(bw_hook, d);
        }
        st = hsi_backward(scaled, 0);
        if (hook) hsi_backward_set_hook(NULL, NULL);
        if (st != HSI_OK) goto cleanup;
        if (det) { /* this tile's gradient apart, .grad zeroed for the next */
            float *row = d->tiles + t * d->total;
            for (int p = 0; p < d->n_params; p++) {
                hsi_tensor *pt = d->opt->params[p].t;
                int64_t cnt = hsi_tensor_count(pt);
                float *gp = grad_of(pt);
                if (gp) memcpy(row + d->p_off[p], gp, (size_t)cnt * sizeof *gp);
                else memset(row + d->p_off[p], 0, (size_t)cnt * sizeof *gp);
            }
            hsi_optim_zero_grad(d->opt);
        }
        d->st.forward += t1 - t0;
        d->st.backward += hsi_now() - t1;
    }
    hsi_dropout_key_set(0, 0);
    double tc = hsi_now();
    if (det) {
        hsi_threads_set(threads_before);
        buffers_copy(d, 0); /* the running statistics of the first tile only */
        float *sum = malloc((size_t)d->total * sizeof *sum + 64);
        if (!sum) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        st = hsi_dist_tree_sum_f32(sum, d->tiles, n_tiles, d->total);
        for (int p = 0; st == HSI_OK && p < d->n_params; p++) {
            hsi_tensor *pt = d->opt->params[p].t;
            float *gp = grad_of(pt);
            if (gp) memcpy(gp, sum + d->p_off[p], (size_t)hsi_tensor_count(pt) * sizeof *gp);
        }
        free(sum);
        if (st != HSI_OK) goto cleanup;
        d->st.tree += hsi_now() - tc;
    } else if (N > 1) {
        if (!d->c.overlap) {
            for (int k = 0; k < d->n_b; k++) d->b[k].pending = 0;
            d->next_launch = 0;
        }
        HSI_TRY(finish_buckets(d));
        d->st.comm_wait += hsi_now() - tc;
    }
    double to = hsi_now();
    HSI_TRY(hsi_optim_step(d->opt));
    d->st.optimizer += hsi_now() - to;
    d->step++;
    d->st.steps++;
    d->st.samples += n;
    if (N > 1 && d->c.hash_every > 0 && d->step % d->c.hash_every == 0) {
        double th = hsi_now();
        HSI_TRY(hsi_ddp_check(d));
        d->st.hash += hsi_now() - th;
    }
cleanup:
    hsi_dropout_key_set(0, 0);
    hsi_backward_set_hook(NULL, NULL);
    if (det) hsi_threads_set(threads_before);
    return st;
}

hsi_status hsi_ddp_broadcast_state(hsi_ddp *d, int buffers_only)
{
    for (int i = 0; i < d->n_state; i++) {
        if (buffers_only && !d->state[i].is_buffer) continue;
        hsi_tensor *t = d->state[i].t;
        hsi_status st = hsi_dist_bcast(hsi_tensor_ptr(t), tensor_bytes(t), 0);
        if (st != HSI_OK) return st;
    }
    return HSI_OK;
}

uint64_t hsi_ddp_param_hash(const hsi_ddp *d)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int p = 0; p < d->n_params; p++) {
        const hsi_tensor *t = d->opt->params[p].t;
        const unsigned char *b = hsi_tensor_ptr(t);
        size_t k = tensor_bytes(t);
        for (size_t i = 0; i < k; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    }
    return h;
}

hsi_status hsi_ddp_check(hsi_ddp *d)
{
    uint64_t h = hsi_ddp_param_hash(d);
    int64_t hi = (int64_t)h, lo = (int64_t)h; /* equal on all ranks iff max == min */
    hsi_status st = hsi_dist_allreduce(&hi, 1, HSI_I64, HSI_DIST_MAX);
    if (st == HSI_OK) st = hsi_dist_allreduce(&lo, 1, HSI_I64, HSI_DIST_MIN);
    if (st != HSI_OK) return st;
    if (hi != lo)
        return HSI_FAIL(HSI_ERR_STATE,
                        "data-parallel: the ranks' parameters differ after step %lld (rank %d "
                        "has hash %016llx; the ranks' hashes range from %016llx to %016llx)",
                        (long long)d->step, hsi_dist_rank(), (unsigned long long)h,
                        (unsigned long long)lo, (unsigned long long)hi);
    return HSI_OK;
}

void hsi_ddp_get_stats(const hsi_ddp *d, hsi_ddp_stats *s) { *s = d->st; }

void hsi_ddp_reset_stats(hsi_ddp *d)
{
    hsi_ddp_stats k = d->st;
    memset(&d->st, 0, sizeof d->st);
    d->st.n_buckets = k.n_buckets;
    memcpy(d->st.bucket_bytes, k.bucket_bytes, sizeof k.bucket_bytes);
    d->st.grad_bytes = k.grad_bytes;
}

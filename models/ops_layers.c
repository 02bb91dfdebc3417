/* ops_layers.c — the layer kernels of layers.h (conv, pooling, global
 * average pooling, batch norm) wrapped as graph nodes: shape checks, arena
 * outputs and scratch, saved state for backward. Not the kernels themselves. */
#include "models/conv_direct.h"
#include "models/layers.h"
#include "models/tensor_impl.h"

#include <math.h>
#include <string.h>

#define IS32(t) ((t)->data.dtype == HSI_F32)

static hsi_status shape_err(const char *op, const char *arg, const hsi_tensor *t,
                            const char *expected)
{
    char sh[96];
    return HSI_FAIL(HSI_ERR_ARG, "%s: %s has shape %s, expected %s", op, arg,
                    hsi_eng_shape_str(sh, sizeof sh, t->data.ndim, t->data.shape), expected);
}

/* ------------------------------------------------------------ conv */

typedef struct conv_saved {
    hsi_conv_dims d;
    void *ws;
} conv_saved;

static hsi_status bw_conv(hsi_node *n)
{
    const conv_saved *s = n->saved;
    int fresh = 0;
    void *dx = hsi_node_grad_in_fresh(n, 0, &fresh), *dw = hsi_node_grad_in(n, 1);
    void *db = n->n_in > 2 ? hsi_node_grad_in(n, 2) : NULL;
    if (!dx && !dw && !db) return HSI_OK;
    if (IS32(n->out) && hsi_conv_direct_usable(&s->d)) { /* writes a fresh dx, no zeroing */
        hsi_conv_direct_backward(dx, dw, db, hsi_node_grad_out(n), hsi_tensor_ptr(n->in[0]),
                                 hsi_tensor_ptr(n->in[1]), &s->d, s->ws, !fresh);
        return HSI_OK;
    }
    if (fresh) memset(dx, 0, (size_t)hsi_view_nbytes(&n->in[0]->data));
    if (IS32(n->out))
        hsi_conv_backward_f32(dx, dw, db, hsi_node_grad_out(n), hsi_tensor_ptr(n->in[0]),
                              hsi_tensor_ptr(n->in[1]), &s->d, s->ws);
    else
        hsi_conv_backward_f64(dx, dw, db, hsi_node_grad_out(n), hsi_tensor_ptr(n->in[0]),
                              hsi_tensor_ptr(n->in[1]), &s->d, s->ws);
    return HSI_OK;
}

/* An eval-mode batch norm folded into the convolution before it (then ReLU). */
typedef struct bn_fold {
    hsi_tensor *gamma, *beta, *mean, *var;
    double eps;
} bn_fold;

static hsi_status check_c(const char *arg, hsi_tensor *t, int64_t c, hsi_dtype dt);

/* wf (K, C*taps) and bf (K) = the filters and bias of conv then batch norm
 * (hsi_bn_fold: the device model folds with the same function) */
static void fold_bn(void *wf, void *bf, const hsi_tensor *w, const hsi_tensor *b,
                    const bn_fold *f, int f32)
{
    int64_t K = w->data.shape[0], per = hsi_tensor_count(w) / K;
#define P(t) ((t) ? hsi_tensor_ptr(t) : NULL)
    if (f32)
        hsi_bn_fold_f32(wf, bf, P(w), P(b), P(f->gamma), P(f->beta), P(f->mean), P(f->var), f->eps,
                        K, per);
    else
        hsi_bn_fold_f64(wf, bf, P(w), P(b), P(f->gamma), P(f->beta), P(f->mean), P(f->var), f->eps,
                        K, per);
#undef P
}

static hsi_status conv_any(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, hsi_tensor *w,
                           hsi_tensor *b, int nd, const int *stride, const int *pad,
                           const bn_fold *fold)
{
    hsi_status st = HSI_OK;
    const char *op = fold ? "conv_bn_relu" : nd == 3 ? "conv3d" : "conv2d";
    if (nd != 2 && nd != 3) return HSI_FAIL(HSI_ERR_ARG, "conv: nd must be 2 or 3 (got %d)", nd);
    HSI_TRY(hsi_eng_check_float(x, op, "x"));
    HSI_TRY(hsi_eng_check_float(w, op, "weight"));
    if (x->data.dtype != w->data.dtype)
        return HSI_FAIL(HSI_ERR_ARG, "%s: x is %s but weight is %s", op,
                        hsi_dtype_name(x->data.dtype), hsi_dtype_name(w->data.dtype));
    if (x->data.ndim != nd + 2) return shape_err(op, "x", x, nd == 3 ? "(N, C, D, H, W)"
                                                                      : "(N, C, H, W)");
    if (w->data.ndim != nd + 2 || w->data.shape[1] != x->data.shape[1])
        return shape_err(op, "weight", w, "(K, C, [kD,] kH, kW) with C matching x");
    if (b) {
        HSI_TRY(hsi_eng_check_float(b, op, "bias"));
        if (b->data.dtype != x->data.dtype || b->data.ndim != 1 ||
            b->data.shape[0] != w->data.shape[0])
            return shape_err(op, "bias", b, "(K) of x's dtype");
        HSI_TRY(hsi_eng_packed(&b, g, b));
    }
    HSI_TRY(hsi_eng_packed(&x, g, x));
    HSI_TRY(hsi_eng_packed(&w, g, w));
    conv_saved *s = hsi_graph_scratch(g, sizeof *s);
    if (!s) return HSI_FAIL(HSI_ERR_NOMEM, "%s: out of arena memory", op);
    int in[3], ker[3];
    for (int k = 0; k < nd; k++) {
        in[k] = (int)x->data.shape[2 + k];
        ker[k] = (int)w->data.shape[2 + k];
    }
    st = hsi_conv_dims_init(&s->d, nd, (int)x->data.shape[0], (int)x->data.shape[1],
                            (int)w->data.shape[0], in, ker, stride, pad);
    if (st != HSI_OK) return hsi_fail_context(st, "%s", op);
    size_t esz = hsi_dtype_size(x->data.dtype);
    s->ws = hsi_graph_scratch(g, hsi_conv_workspace_bytes(&s->d, esz));
    if (!s->ws) return HSI_FAIL(HSI_ERR_NOMEM, "%s: out of arena memory (workspace)", op);
    int64_t shape[5] = {x->data.shape[0], w->data.shape[0]};
    for (int k = 0; k < nd; k++) shape[2 + k] = s->d.out[k];
    HSI_TRY(hsi_op_output(out, g, x->data.dtype, nd + 2, shape));
    if (fold) { /* inference only: nothing is recorded, the folded weights are scratch */
        void *wf = hsi_graph_scratch(g, (size_t)hsi_view_nbytes(&w->data));
        void *bf = hsi_graph_scratch(g, (size_t)w->data.shape[0] * esz);
        if (!wf || !bf) return HSI_FAIL(HSI_ERR_NOMEM, "%s: out of arena memory", op);
        fold_bn(wf, bf, w, b, fold, IS32(x));
        void *y = hsi_tensor_ptr(*out);
        if (IS32(x) && hsi_conv_direct_usable(&s->d)) {
            hsi_conv_direct_forward(y, hsi_tensor_ptr(x), wf, bf, &s->d, s->ws, 1);
        } else { /* the ReLU as a pass of its own */
            int64_t n = hsi_tensor_count(*out);
            if (IS32(x)) {
                hsi_conv_forward_f32(y, hsi_tensor_ptr(x), wf, bf, &s->d, s->ws);
                for (int64_t i = 0; i < n; i++) ((float *)y)[i] = ((float *)y)[i] > 0 ? ((float *)y)[i] : 0;
            } else {
                hsi_conv_forward_f64(y, hsi_tensor_ptr(x), wf, bf, &s->d, s->ws);
                for (int64_t i = 0; i < n; i++) ((double *)y)[i] = ((double *)y)[i] > 0 ? ((double *)y)[i] : 0;
            }
        }
        hsi_op_record(g, op, NULL, *out, NULL, 0); /* for the op profiler only */
        HSI_TRY(hsi_op_check(*out, op));
        return HSI_OK;
    }
    if (IS32(x))
        hsi_conv_forward_f32(hsi_tensor_ptr(*out), hsi_tensor_ptr(x), hsi_tensor_ptr(w),
                             b ? hsi_tensor_ptr(b) : NULL, &s->d, s->ws);
    else
        hsi_conv_forward_f64(hsi_tensor_ptr(*out), hsi_tensor_ptr(x), hsi_tensor_ptr(w),
                             b ? hsi_tensor_ptr(b) : NULL, &s->d, s->ws);
    hsi_tensor *ins[3] = {x, w, b};
    hsi_node *n = hsi_op_record(g, op, bw_conv, *out, ins, b ? 3 : 2);
    if (n) n->saved = s;
    HSI_TRY(hsi_op_check(*out, op));
cleanup:
    return st;
}

hsi_status hsi_conv(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, hsi_tensor *w, hsi_tensor *b,
                    int nd, const int *stride, const int *pad)
{
    return conv_any(out, g, x, w, b, nd, stride, pad, NULL);
}

hsi_status hsi_conv_bn_relu_eval(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, hsi_tensor *w,
                                 hsi_tensor *b, int nd, const int *stride, const int *pad,
                                 hsi_tensor *gamma, hsi_tensor *beta, hsi_tensor *running_mean,
                                 hsi_tensor *running_var, double eps)
{
    hsi_status st = HSI_OK;
    if (hsi_is_grad_enabled())
        return HSI_FAIL(HSI_ERR_STATE, "conv_bn_relu: inference only (gradient recording is on; "
                                       "use hsi_conv, hsi_batch_norm_relu)");
    if (!running_mean || !running_var)
        return HSI_FAIL(HSI_ERR_ARG, "conv_bn_relu: needs running_mean and running_var");
    if (w->data.ndim < 1 || !hsi_view_is_packed(&w->data))
        return shape_err("conv_bn_relu", "weight", w, "packed (K, C, ...)");
    /* the batch norm's channels are the convolution's outputs */
    int64_t k = w->data.shape[0];
    HSI_TRY(check_c("weight", gamma, k, w->data.dtype));
    HSI_TRY(check_c("bias", beta, k, w->data.dtype));
    HSI_TRY(check_c("running_mean", running_mean, k, w->data.dtype));
    HSI_TRY(check_c("running_var", running_var, k, w->data.dtype));
    bn_fold f = {gamma, beta, running_mean, running_var, eps};
    return conv_any(out, g, x, w, b, nd, stride, pad, &f);
cleanup:
    return st;
}

/* --------------------------------------------------------- pooling */

typedef struct pool_saved {
    hsi_pool_dims d;
    int32_t *argmax;
} pool_saved;

static hsi_status bw_pool(hsi_node *n)
{
    void *dx = hsi_node_grad_in(n, 0);
    if (!dx) return HSI_OK;
    const pool_saved *s = n->saved;
    if (IS32(n->out))
        hsi_pool_backward_f32(dx, hsi_node_grad_out(n), s->argmax, &s->d);
    else
        hsi_pool_backward_f64(dx, hsi_node_grad_out(n), s->argmax, &s->d);
    return HSI_OK;
}

hsi_status hsi_pool(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, int kind, int nd,
                    const int *ker, const int *stride, const int *pad)
{
    static const char *names[2][2] = {{"max_pool2d", "max_pool3d"}, {"avg_pool2d", "avg_pool3d"}};
    hsi_status st = HSI_OK;
    if (nd != 2 && nd != 3) return HSI_FAIL(HSI_ERR_ARG, "pool: nd must be 2 or 3 (got %d)", nd);
    if (kind != 0 && kind != 1) return HSI_FAIL(HSI_ERR_ARG, "pool: kind must be 0 (max) or 1 "
                                                             "(avg), got %d", kind);
    const char *op = names[kind][nd - 2];
    HSI_TRY(hsi_eng_check_float(x, op, "x"));
    if (x->data.ndim != nd + 2) return shape_err(op, "x", x, nd == 3 ? "(N, C, D, H, W)"
                                                                      : "(N, C, H, W)");
    HSI_TRY(hsi_eng_packed(&x, g, x));
    pool_saved *s = hsi_graph_scratch(g, sizeof *s);
    if (!s) return HSI_FAIL(HSI_ERR_NOMEM, "%s: out of arena memory", op);
    int in[3];
    for (int k = 0; k < nd; k++) in[k] = (int)x->data.shape[2 + k];
    st = hsi_pool_dims_init(&s->d, kind ? HSI_POOL_AVG : HSI_POOL_MAX, nd,
                            (int)x->data.shape[0], (int)x->data.shape[1], in, ker, stride, pad);
    if (st != HSI_OK) return hsi_fail_context(st, "%s", op);
    int64_t shape[5] = {x->data.shape[0], x->data.shape[1]};
    for (int k = 0; k < nd; k++) shape[2 + k] = s->d.out[k];
    HSI_TRY(hsi_op_output(out, g, x->data.dtype, nd + 2, shape));
    s->argmax = NULL;
    if (kind == 0) {
        s->argmax = hsi_graph_scratch(g, (size_t)hsi_tensor_count(*out) * sizeof(int32_t));
        if (!s->argmax) return HSI_FAIL(HSI_ERR_NOMEM, "%s: out of arena memory", op);
    }
    if (IS32(x))
        hsi_pool_forward_f32(hsi_tensor_ptr(*out), s->argmax, hsi_tensor_ptr(x), &s->d);
    else
        hsi_pool_forward_f64(hsi_tensor_ptr(*out), s->argmax, hsi_tensor_ptr(x), &s->d);
    hsi_tensor *ins[1] = {x};
    hsi_node *n = hsi_op_record(g, op, bw_pool, *out, ins, 1);
    if (n) n->saved = s;
    HSI_TRY(hsi_op_check(*out, op));
cleanup:
    return st;
}

static int64_t spatial(const hsi_tensor *x)
{
    int64_t s = 1;
    for (int k = 2; k < x->data.ndim; k++) s *= x->data.shape[k];
    return s;
}

static hsi_status bw_gap(hsi_node *n)
{
    void *dx = hsi_node_grad_in(n, 0);
    if (!dx) return HSI_OK;
    hsi_tensor *x = n->in[0];
    int N = (int)x->data.shape[0], C = (int)x->data.shape[1];
    if (IS32(x))
        hsi_gap_backward_f32(dx, hsi_node_grad_out(n), N, C, spatial(x));
    else
        hsi_gap_backward_f64(dx, hsi_node_grad_out(n), N, C, spatial(x));
    return HSI_OK;
}

hsi_status hsi_global_avg_pool(hsi_tensor **out, hsi_graph *g, hsi_tensor *x)
{
    hsi_status st = HSI_OK;
    HSI_TRY(hsi_eng_check_float(x, "global_avg_pool", "x"));
    if (x->data.ndim < 3) return shape_err("global_avg_pool", "x", x, "(N, C, ...) with >= 1 "
                                                                      "spatial axis");
    HSI_TRY(hsi_eng_packed(&x, g, x));
    int64_t shape[2] = {x->data.shape[0], x->data.shape[1]};
    HSI_TRY(hsi_op_output(out, g, x->data.dtype, 2, shape));
    if (IS32(x))
        hsi_gap_forward_f32(hsi_tensor_ptr(*out), hsi_tensor_ptr(x), (int)shape[0],
                            (int)shape[1], spatial(x));
    else
        hsi_gap_forward_f64(hsi_tensor_ptr(*out), hsi_tensor_ptr(x), (int)shape[0],
                            (int)shape[1], spatial(x));
    hsi_tensor *ins[1] = {x};
    hsi_op_record(g, "global_avg_pool", bw_gap, *out, ins, 1);
    HSI_TRY(hsi_op_check(*out, "global_avg_pool"));
cleanup:
    return st;
}

/* ------------------------------------------------------ batch norm */

typedef struct bn_saved {
    void *mean, *invstd; /* (C) */
    int training, relu;  /* relu: fused ReLU, the node's output masks the gradient */
    hsi_bn_sync_fn sync; /* SyncBatchNorm: the statistics were summed over ranks */
    void *sync_ctx;
} bn_saved;

static __thread hsi_bn_sync_fn g_bn_sync;
static __thread void *g_bn_sync_ctx;

void hsi_bn_set_sync(hsi_bn_sync_fn fn, void *ctx)
{
    g_bn_sync = fn;
    g_bn_sync_ctx = ctx;
}

hsi_bn_sync_fn hsi_bn_get_sync(void **ctx)
{
    if (ctx) *ctx = g_bn_sync_ctx;
    return g_bn_sync;
}

static hsi_status bw_bn(hsi_node *n)
{
    const bn_saved *s = n->saved;
    hsi_tensor *x = n->in[0], *gamma = n->in[1];
    int fresh = 0;
    void *dx = hsi_node_grad_in_fresh(n, 0, &fresh);
    void *dg = gamma ? hsi_node_grad_in(n, 1) : NULL;
    void *db = n->in[2] ? hsi_node_grad_in(n, 2) : NULL;
    if (!dx && !dg && !db) return HSI_OK;
    int N = (int)x->data.shape[0], C = (int)x->data.shape[1];
    const void *y = s->relu ? hsi_tensor_ptr(n->out) : NULL;
    if (s->sync) {
        void *gp = gamma ? hsi_tensor_ptr(gamma) : NULL;
        if (IS32(x))
            return hsi_bn_sync_backward_f32(dx, dg, db, hsi_node_grad_out(n), hsi_tensor_ptr(x), y,
                                            gp, s->mean, s->invstd, N, C, spatial(x), !fresh,
                                            s->sync, s->sync_ctx);
        return hsi_bn_sync_backward_f64(dx, dg, db, hsi_node_grad_out(n), hsi_tensor_ptr(x), y, gp,
                                        s->mean, s->invstd, N, C, spatial(x), !fresh, s->sync,
                                        s->sync_ctx);
    }
    if (IS32(x))
        hsi_bn_relu_backward_f32(dx, dg, db, hsi_node_grad_out(n), hsi_tensor_ptr(x), y,
                                 gamma ? hsi_tensor_ptr(gamma) : NULL, s->mean, s->invstd, N, C,
                                 spatial(x), s->training, !fresh);
    else
        hsi_bn_relu_backward_f64(dx, dg, db, hsi_node_grad_out(n), hsi_tensor_ptr(x), y,
                                 gamma ? hsi_tensor_ptr(gamma) : NULL, s->mean, s->invstd, N, C,
                                 spatial(x), s->training, !fresh);
    return HSI_OK;
}

static hsi_status check_c(const char *arg, hsi_tensor *t, int64_t c, hsi_dtype dt)
{
    if (!t) return HSI_OK;
    hsi_status st = hsi_eng_check_float(t, "batch_norm", arg);
    if (st != HSI_OK) return st;
    if (t->data.dtype != dt || t->data.ndim != 1 || t->data.shape[0] != c ||
        !hsi_view_is_packed(&t->data)) {
        char e[64];
        snprintf(e, sizeof e, "(%lld) packed, dtype %s", (long long)c, hsi_dtype_name(dt));
        return shape_err("batch_norm", arg, t, e);
    }
    return HSI_OK;
}

static hsi_status batch_norm_any(hsi_tensor **out, hsi_graph *g, hsi_tensor *x,
                                 hsi_tensor *gamma, hsi_tensor *beta, hsi_tensor *running_mean,
                                 hsi_tensor *running_var, hsi_tensor *num_batches, int training,
                                 double momentum, double eps, int relu)
{
    hsi_status st = HSI_OK;
    const char *op = relu ? "batch_norm_relu" : "batch_norm";
    HSI_TRY(hsi_eng_check_float(x, op, "x"));
    if (x->data.ndim < 2) return shape_err(op, "x", x, "(N, C) or (N, C, ...)");
    HSI_TRY(check_c("weight", gamma, x->data.shape[1], x->data.dtype));
    HSI_TRY(check_c("bias", beta, x->data.shape[1], x->data.dtype));
    HSI_TRY(check_c("running_mean", running_mean, x->data.shape[1], x->data.dtype));
    HSI_TRY(check_c("running_var", running_var, x->data.shape[1], x->data.dtype));
    if (!training && (!running_mean || !running_var))
        return HSI_FAIL(HSI_ERR_ARG, "batch_norm: eval mode needs running_mean and running_var");
    HSI_TRY(hsi_eng_packed(&x, g, x));
    int N = (int)x->data.shape[0], C = (int)x->data.shape[1];
    int64_t S = spatial(x);
    if (training && !g_bn_sync && (int64_t)N * S < 2) /* synced: the count over ranks is checked */
        return HSI_FAIL(HSI_ERR_ARG, "batch_norm: training needs more than 1 value per channel "
                                     "(got N = %d, spatial size %lld)", N, (long long)S);
    size_t esz = hsi_dtype_size(x->data.dtype);
    bn_saved *s = hsi_graph_scratch(g, sizeof *s);
    if (!s) return HSI_FAIL(HSI_ERR_NOMEM, "batch_norm: out of arena memory");
    s->mean = hsi_graph_scratch(g, (size_t)C * esz);
    s->invstd = hsi_graph_scratch(g, (size_t)C * esz);
    s->training = training;
    s->relu = relu;
    s->sync = training ? g_bn_sync : NULL;
    s->sync_ctx = g_bn_sync_ctx;
    if (!s->mean || !s->invstd) return HSI_FAIL(HSI_ERR_NOMEM, "batch_norm: out of arena memory");
    HSI_TRY(hsi_op_output(out, g, x->data.dtype, x->data.ndim, x->data.shape));
    void *rm = running_mean ? hsi_tensor_ptr(running_mean) : NULL;
    void *rv = running_var ? hsi_tensor_ptr(running_var) : NULL;
    void *gp = gamma ? hsi_tensor_ptr(gamma) : NULL, *bp = beta ? hsi_tensor_ptr(beta) : NULL;
    if (!training) { /* statistics are constants of this step: keep a copy for backward */
        memcpy(s->mean, rm, (size_t)C * esz);
        for (int c = 0; c < C; c++) {
            if (IS32(x))
                ((float *)s->invstd)[c] = (float)(1.0 / sqrt(((float *)rv)[c] + eps));
            else
                ((double *)s->invstd)[c] = 1.0 / sqrt(((double *)rv)[c] + eps);
        }
    }
    if (s->sync && IS32(x))
        HSI_TRY(hsi_bn_sync_forward_f32(hsi_tensor_ptr(*out), s->mean, s->invstd, rm, rv,
                                        hsi_tensor_ptr(x), gp, bp, N, C, S, (float)eps,
                                        (float)momentum, relu, s->sync, s->sync_ctx));
    else if (s->sync)
        HSI_TRY(hsi_bn_sync_forward_f64(hsi_tensor_ptr(*out), s->mean, s->invstd, rm, rv,
                                        hsi_tensor_ptr(x), gp, bp, N, C, S, eps, momentum, relu,
                                        s->sync, s->sync_ctx));
    else if (IS32(x))
        (relu ? hsi_bn_relu_forward_f32 : hsi_bn_forward_f32)(
            hsi_tensor_ptr(*out), s->mean, s->invstd, rm, rv, hsi_tensor_ptr(x), gp, bp, N, C, S,
            (float)eps, (float)momentum, training);
    else
        (relu ? hsi_bn_relu_forward_f64 : hsi_bn_forward_f64)(
            hsi_tensor_ptr(*out), s->mean, s->invstd, rm, rv, hsi_tensor_ptr(x), gp, bp, N, C, S,
            eps, momentum, training);
    if (training && num_batches && num_batches->data.dtype == HSI_I64)
        (*(int64_t *)hsi_tensor_ptr(num_batches))++;
    hsi_tensor *ins[3] = {x, gamma, beta};
    hsi_node *n = hsi_op_record(g, op, bw_bn, *out, ins, 3);
    if (n) n->saved = s;
    HSI_TRY(hsi_op_check(*out, op));
cleanup:
    return st;
}

hsi_status hsi_batch_norm(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, hsi_tensor *gamma,
                          hsi_tensor *beta, hsi_tensor *running_mean, hsi_tensor *running_var,
                          hsi_tensor *num_batches, int training, double momentum, double eps)
{
    return batch_norm_any(out, g, x, gamma, beta, running_mean, running_var, num_batches,
                          training, momentum, eps, 0);
}

hsi_status hsi_batch_norm_relu(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, hsi_tensor *gamma,
                               hsi_tensor *beta, hsi_tensor *running_mean,
                               hsi_tensor *running_var, hsi_tensor *num_batches, int training,
                               double momentum, double eps)
{
    return batch_norm_any(out, g, x, gamma, beta, running_mean, running_var, num_batches,
                          training, momentum, eps, 1);
}

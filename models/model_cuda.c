/* model_cuda.c — a module trained on the GPU (see model_cuda.h): the
 * module's layer description (hsi_module_layers, nn.h: the leaves and
 * their per-sample shapes, the same the CPU engine runs) with, per module
 * kind, its device implementation (g_kinds: buffers, forward, backward by
 * the launchers of layers_cuda.h); every parameter gets a device copy plus
 * gradient and Adam state in one arena; at inference each conv -> batch
 * norm -> ReLU runs as one folded convolution. Plain C over the CUDA API of
 * kernels/cuda.h: compiled in every build (without CUDA the first call
 * says HSI_ERR_NO_CUDA). Not the engine's graph: the device backward is
 * each kind's own, checked against the engine's gradients by the parity
 * suites (tests/test_cuda.c). */
#include "models/model_cuda.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda_plugin.h"
#include "kernels/cuda.h"
#include "models/layers_cuda.h"

typedef struct dm_layer dm_layer;

/* The device implementation of a module kind: the buffers it needs beyond
 * its activations (plan, NULL: none), forward and backward of n samples by
 * the launchers of layers_cuda.h. x, y: the layer's input and output, dx,
 * dy: their gradients (dx NULL for the first layer); backward accumulates
 * into dx and the parameter gradients. forward NULL: an alias (flatten,
 * reshape), whose output is its input. The CPU implementations of the same
 * kinds are the engine's ops (nn.c's forward). */
typedef struct dm_kind {
    hsi_module_kind kind;
    const char *name; /* in the op profile (hsi_op_profile) */
    hsi_status (*plan)(hsi_dmodel *d, dm_layer *L);
    hsi_status (*forward)(hsi_dmodel *d, dm_layer *L, float *y, const float *x, int64_t n,
                          int training);
    hsi_status (*backward)(hsi_dmodel *d, dm_layer *L, float *dx, const float *dy, const float *x,
                           const float *y, int64_t n);
} dm_kind;

struct dm_layer {
    hsi_layer g;          /* the description (nn.h): module, per-sample shapes */
    const dm_kind *ops;
    int index;            /* in the model: dropout's mask stream */
    int dnn_fwd, dnn_bwd; /* conv: forward / backward by cuDNN (else im2col + cuBLAS) */
    int dnn_bn;           /* batch norm by cuDNN (else hsi's kernels) */
    int fold;             /* conv heading conv -> batch norm -> ReLU: at inference one
                             convolution with wf, bf (the batch norm folded in), then ReLU */
    float *wf, *bf;
    int64_t nw, nb;
    float *w, *b, *dw, *db, *mw, *vw, *mb, *vb;
    float *rm, *rv, *save_mean, *save_invstd, *mask;
    int32_t *argmax;
    int64_t num_batches;
};

/* A step captured as a CUDA Graph (training, or the eval forward). */
typedef struct dm_graph {
    int state;                    /* 0: not measured, 1: its scratch made, 2: captured */
    void *exec, *scratch;         /* cudaGraphExec_t; the launchers' scratch (bytes) */
    size_t bytes;
    int64_t launches;
} dm_graph;

#define DM_LREC 1024 /* training losses kept on the device between reads */

struct hsi_dmodel {
    dm_layer *l;
    int nl;
    int sample_nd;
    int64_t sample_shape[HSI_MAX_DIMS];
    int64_t max_batch;
    int classes;
    float **act, **dact;          /* nl + 1 each, set per call (aliases resolved) */
    float **own_act, **own_dact;  /* nl + 1 each: buffers owned (NULL for aliases) */
    void *ws;                     /* the gemm convolutions' workspace (NULL when none runs) */
    size_t ws_bytes;
    char conv_name[64];           /* hsi_dmodel_conv_name */
    float *prob, *loss;           /* (max_batch, classes); [loss, wsum] */
    /* the training losses since the last hsi_dmodel_loss_mean: each step's
     * copied on the device into the next slot of lrec (no host wait), its
     * batch size in lrec_w; a full record is added into lsum, lsum_w */
    float *lrec;
    int64_t lrec_n, lsteps;
    double lrec_w[DM_LREC], lsum, lsum_w;
    hsi_optim_config cfg;
    int64_t step, calls, last_n;
    uint64_t seed;
    /* every parameter, gradient and Adam moment in one device block: four
     * regions of arena_n floats (parameters, gradients, m, v), each tensor
     * at the same offset in all four (multiples of 16 floats, the gaps
     * zero): one memset zeroes the gradients, one launch steps AdamW */
    float *arena;
    int64_t arena_n, arena_used;
    int folds_valid;              /* the wf, bf of the fold layers match the parameters */
    hsi_step_scalars *scal;       /* this step's dropout key and Adam factors, on the device */
    hsi_step_scalars scal_h;      /* what *scal holds (set_scalars writes only a change) */
    int has_dropout;
    /* the training step and the eval forward as CUDA Graphs (hsi_dmodel_set_graph) */
    int graph;                    /* asked for */
    dm_graph gtrain, geval;
    void *gstream;                /* where they are captured */
    float *gx;                    /* the captured steps' input and labels */
    int32_t *gy;
};

/* f32 packed host tensor -> new device copy */
/* the device holds float32 only: a tensor of another dtype is refused,
 * never copied as if it were one */
static hsi_status packed_f32(const hsi_tensor *t, const char *what)
{
    if (t->data.dtype != HSI_F32 || !hsi_view_is_packed(&t->data))
        return HSI_FAIL(HSI_ERR_UNSUPPORTED, "device model: %s must be packed float32", what);
    return HSI_OK;
}

static hsi_status upload(float **dev, const hsi_tensor *t, const char *what)
{
    hsi_status st = packed_f32(t, what);
    if (st != HSI_OK) return st;
    size_t n = sizeof(float) * (size_t)hsi_tensor_count(t);
    st = hsi_cuda_malloc((void **)dev, n);
    if (st == HSI_OK) st = hsi_cuda_upload(*dev, hsi_tensor_ptr(t), n);
    return st;
}

#define ARENA_ALIGN 16 /* floats: every tensor starts on 64 bytes */

static int64_t arena_round(int64_t n) { return (n + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN; }

/* The trained tensors of a module: weight and bias of conv and linear
 * (the bias optional), batch norm's weight and bias; 0 for the others. */
static int n_trained(const hsi_module *m)
{
    if (m->kind == HSI_MOD_CONV || m->kind == HSI_MOD_LINEAR) return m->n_tensors > 1 ? 2 : 1;
    return m->kind == HSI_MOD_BATCHNORM ? 2 : 0;
}

/* The floats the arena needs for the model's trained tensors. */
static int64_t arena_need(const hsi_dmodel *d)
{
    int64_t n = 0;
    for (int i = 0; i < d->nl; i++) {
        const hsi_module *m = d->l[i].g.mod;
        for (int k = 0; k < n_trained(m); k++) n += arena_round(hsi_tensor_count(m->tensors[k].t));
    }
    return n;
}

/* Parameter t of a layer into the arena's next slot: *p its value
 * (uploaded), *g, *mo, *v its gradient and moments (zero). */
static hsi_status param_slot(hsi_dmodel *d, float **p, float **g, float **mo, float **v, const hsi_tensor *t,
                             const char *what)
{
    int64_t n = hsi_tensor_count(t), off = d->arena_used;
    hsi_status st = packed_f32(t, what);
    if (st != HSI_OK) return st;
    if (off + n > d->arena_n)
        return HSI_FAIL(HSI_ERR_STATE, "device model: parameter %s does not fit the arena", what);
    d->arena_used = off + arena_round(n);
    *p = d->arena + off;
    *g = d->arena + d->arena_n + off;
    *mo = d->arena + 2 * d->arena_n + off;
    *v = d->arena + 3 * d->arena_n + off;
    return hsi_cuda_upload(*p, hsi_tensor_ptr(t), sizeof(float) * (size_t)n);
}

/* The layer's weight (and bias, when it has one) into the arena. */
static hsi_status plan_params(hsi_dmodel *d, dm_layer *L)
{
    hsi_status st = HSI_OK;
    const hsi_module *m = L->g.mod;
    HSI_TRY(param_slot(d, &L->w, &L->dw, &L->mw, &L->vw, m->tensors[0].t, m->tensors[0].name));
    L->nw = hsi_tensor_count(m->tensors[0].t);
    if (n_trained(m) > 1) {
        HSI_TRY(param_slot(d, &L->b, &L->db, &L->mb, &L->vb, m->tensors[1].t, m->tensors[1].name));
        L->nb = hsi_tensor_count(m->tensors[1].t);
    }
cleanup:
    return st;
}

static hsi_status dzeros(float **dev, int64_t n)
{
    hsi_status st = hsi_cuda_malloc((void **)dev, sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (st == HSI_OK) st = hsi_cuda_memset(*dev, 0, sizeof(float) * (size_t)(n > 0 ? n : 1));
    return st;
}

/* ------------------------------------------------------------ the kinds */

static hsi_status conv_plan(hsi_dmodel *d, dm_layer *L)
{
    hsi_conv_dims cd;
    hsi_status st = hsi_layer_conv_dims(&cd, &L->g, (int)d->max_batch);
    if (st != HSI_OK) return st;
    size_t wsb = hsi_conv_workspace_bytes_cuda(&cd);
    if (wsb > d->ws_bytes) d->ws_bytes = wsb;
    return plan_params(d, L);
}

/* y = conv(x; w, b) by cuDNN or im2col + cuBLAS, as set for L */
static hsi_status conv_run(hsi_dmodel *d, dm_layer *L, float *y, const float *x, int64_t n,
                           const float *w, const float *b)
{
    hsi_conv_dims cd;
    hsi_status st = hsi_layer_conv_dims(&cd, &L->g, (int)n);
    if (st != HSI_OK) return st;
    if (L->dnn_fwd) return hsi_conv_forward_cudnn(y, x, w, b, &cd);
    return hsi_conv_forward_cuda(y, x, w, b, &cd, d->ws);
}

static hsi_status conv_fwd(hsi_dmodel *d, dm_layer *L, float *y, const float *x, int64_t n, int training)
{
    (void)training;
    return conv_run(d, L, y, x, n, L->w, L->b);
}

static hsi_status conv_bwd(hsi_dmodel *d, dm_layer *L, float *dx, const float *dy, const float *x,
                           const float *y, int64_t n)
{
    (void)y;
    hsi_conv_dims cd;
    hsi_status st = hsi_layer_conv_dims(&cd, &L->g, (int)n);
    if (st != HSI_OK) return st;
    if (L->dnn_bwd) return hsi_conv_backward_cudnn(dx, L->dw, L->db, dy, x, L->w, &cd);
    return hsi_conv_backward_cuda(dx, L->dw, L->db, dy, x, L->w, &cd, d->ws);
}

static hsi_status bn_plan(hsi_dmodel *d, dm_layer *L)
{
    hsi_status st = HSI_OK;
    hsi_module *m = L->g.mod;
    HSI_TRY(plan_params(d, L));
    HSI_TRY(upload(&L->rm, m->tensors[2].t, m->tensors[2].name));
    HSI_TRY(upload(&L->rv, m->tensors[3].t, m->tensors[3].name));
    L->num_batches = *(const int64_t *)hsi_tensor_ptr(m->tensors[4].t);
    HSI_TRY(dzeros(&L->save_mean, L->g.c));
    HSI_TRY(dzeros(&L->save_invstd, L->g.c));
cleanup:
    return st;
}

static hsi_status bn_fwd(hsi_dmodel *d, dm_layer *L, float *y, const float *x, int64_t n, int training)
{
    (void)d;
    const hsi_module *m = L->g.mod;
    return (L->dnn_bn ? hsi_bn_forward_cudnn : hsi_bn_forward_cuda)(
        y, L->save_mean, L->save_invstd, L->rm, L->rv, x, L->w, L->b, (int)n, L->g.c, L->g.s,
        (float)m->eps, (float)m->momentum, training); /* num_batches: count_step */
}

static hsi_status bn_bwd(hsi_dmodel *d, dm_layer *L, float *dx, const float *dy, const float *x,
                         const float *y, int64_t n)
{
    (void)d;
    (void)y;
    if (L->dnn_bn)
        return hsi_bn_backward_cudnn(dx, L->dw, L->db, dy, x, L->w, L->save_mean, L->save_invstd,
                                     (int)n, L->g.c, L->g.s, (float)L->g.mod->eps, 1);
    return hsi_bn_backward_cuda(dx, L->dw, L->db, dy, x, L->w, L->save_mean, L->save_invstd, (int)n,
                                L->g.c, L->g.s, 1);
}

static hsi_status linear_plan(hsi_dmodel *d, dm_layer *L) { return plan_params(d, L); }

static hsi_status linear_fwd(hsi_dmodel *d, dm_layer *L, float *y, const float *x, int64_t n,
                             int training)
{
    (void)d;
    (void)training;
    return hsi_linear_forward_cuda(y, x, L->w, L->b, (int)n, L->g.mod->in_features,
                                   L->g.mod->out_features);
}

static hsi_status linear_bwd(hsi_dmodel *d, dm_layer *L, float *dx, const float *dy, const float *x,
                             const float *y, int64_t n)
{
    (void)d;
    (void)y;
    return hsi_linear_backward_cuda(dx, L->dw, L->db, dy, x, L->w, (int)n, L->g.mod->in_features,
                                    L->g.mod->out_features);
}

static hsi_status relu_fwd(hsi_dmodel *d, dm_layer *L, float *y, const float *x, int64_t n, int training)
{
    (void)d;
    (void)training;
    return hsi_relu_forward_cuda(y, x, n * L->g.in_per);
}

static hsi_status relu_bwd(hsi_dmodel *d, dm_layer *L, float *dx, const float *dy, const float *x,
                           const float *y, int64_t n)
{
    (void)d;
    (void)x;
    return dx ? hsi_relu_backward_cuda(dx, dy, y, n * L->g.in_per) : HSI_OK;
}

static hsi_status dropout_plan(hsi_dmodel *d, dm_layer *L)
{
    d->has_dropout = 1;
    return dzeros(&L->mask, d->max_batch * L->g.in_per);
}

static hsi_status dropout_fwd(hsi_dmodel *d, dm_layer *L, float *y, const float *x, int64_t n,
                              int training)
{
    double p = training ? L->g.mod->p : 0.0; /* the key: set_scalars */
    return hsi_dropout_forward_dev_cuda(y, L->mask, x, n * L->g.in_per, p, d->scal, (uint64_t)L->index);
}

static hsi_status dropout_bwd(hsi_dmodel *d, dm_layer *L, float *dx, const float *dy, const float *x,
                              const float *y, int64_t n)
{
    (void)d;
    (void)x;
    (void)y;
    return dx ? hsi_dropout_backward_cuda(dx, dy, L->mask, n * L->g.in_per) : HSI_OK;
}

static hsi_status pool_plan(hsi_dmodel *d, dm_layer *L)
{
    if (L->g.mod->kind != HSI_MOD_MAXPOOL) return HSI_OK;
    return hsi_cuda_malloc((void **)&L->argmax, sizeof(int32_t) * (size_t)(d->max_batch * L->g.out_per));
}

static hsi_status pool_fwd(hsi_dmodel *d, dm_layer *L, float *y, const float *x, int64_t n, int training)
{
    (void)d;
    (void)training;
    hsi_pool_dims pd;
    hsi_status st = hsi_layer_pool_dims(&pd, &L->g, (int)n);
    return st == HSI_OK ? hsi_pool_forward_cuda(y, L->argmax, x, &pd) : st;
}

static hsi_status pool_bwd(hsi_dmodel *d, dm_layer *L, float *dx, const float *dy, const float *x,
                           const float *y, int64_t n)
{
    (void)d;
    (void)x;
    (void)y;
    hsi_pool_dims pd;
    if (!dx) return HSI_OK;
    hsi_status st = hsi_layer_pool_dims(&pd, &L->g, (int)n);
    return st == HSI_OK ? hsi_pool_backward_cuda(dx, dy, L->argmax, &pd) : st;
}

static hsi_status gap_fwd(hsi_dmodel *d, dm_layer *L, float *y, const float *x, int64_t n, int training)
{
    (void)d;
    (void)training;
    return hsi_gap_forward_cuda(y, x, (int)n, L->g.c, L->g.s);
}

static hsi_status gap_bwd(hsi_dmodel *d, dm_layer *L, float *dx, const float *dy, const float *x,
                          const float *y, int64_t n)
{
    (void)d;
    (void)x;
    (void)y;
    return dx ? hsi_gap_backward_cuda(dx, dy, (int)n, L->g.c, L->g.s) : HSI_OK;
}

static const dm_kind g_kinds[] = {
    {HSI_MOD_CONV, "conv", conv_plan, conv_fwd, conv_bwd},
    {HSI_MOD_BATCHNORM, "batch_norm", bn_plan, bn_fwd, bn_bwd},
    {HSI_MOD_LINEAR, "linear", linear_plan, linear_fwd, linear_bwd},
    {HSI_MOD_RELU, "relu", NULL, relu_fwd, relu_bwd},
    {HSI_MOD_DROPOUT, "dropout", dropout_plan, dropout_fwd, dropout_bwd},
    {HSI_MOD_MAXPOOL, "max_pool", pool_plan, pool_fwd, pool_bwd},
    {HSI_MOD_AVGPOOL, "avg_pool", pool_plan, pool_fwd, pool_bwd},
    {HSI_MOD_GAP, "global_avg_pool", NULL, gap_fwd, gap_bwd},
    {HSI_MOD_FLATTEN, "flatten", NULL, NULL, NULL},
    {HSI_MOD_RESHAPE, "reshape", NULL, NULL, NULL},
};

static const dm_kind *kind_ops(hsi_module_kind k)
{
    for (size_t i = 0; i < sizeof g_kinds / sizeof g_kinds[0]; i++)
        if (g_kinds[i].kind == k) return &g_kinds[i];
    return NULL;
}

hsi_status hsi_dmodel_create(hsi_dmodel **out, hsi_module *m, int sample_ndim,
                             const int64_t *sample_shape, int64_t max_batch,
                             const hsi_optim_config *cfg, uint64_t seed)
{
    hsi_status st = HSI_OK;
    hsi_dmodel *d = NULL;
    hsi_layer *geo = NULL;
    int nl = 0;
    *out = NULL;
    HSI_TRY(hsi_cuda_require("device model"));
    if (!m || sample_ndim < 1 || sample_ndim > HSI_MAX_DIMS - 1 || max_batch < 1 || !cfg ||
        (cfg->kind != HSI_OPT_ADAM && cfg->kind != HSI_OPT_ADAMW)) {
        st = HSI_FAIL(HSI_ERR_ARG, "device model: needs a module, a per-sample shape of 1..%d dims, "
                                   "max_batch >= 1 and an Adam/AdamW config", HSI_MAX_DIMS - 1);
        goto cleanup;
    }
    d = calloc(1, sizeof *d);
    if (!d) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "device model: out of memory");
        goto cleanup;
    }
    d->max_batch = max_batch;
    d->cfg = *cfg;
    d->seed = seed;
    d->sample_nd = sample_ndim;
    memcpy(d->sample_shape, sample_shape, sizeof(int64_t) * (size_t)sample_ndim);
    st = hsi_module_layers(&geo, &nl, m, sample_ndim, sample_shape);
    if (st != HSI_OK) {
        hsi_fail_context(st, "device model");
        goto cleanup;
    }
    d->l = calloc((size_t)nl, sizeof *d->l);
    d->act = calloc((size_t)nl + 1, sizeof(float *));
    d->dact = calloc((size_t)nl + 1, sizeof(float *));
    d->own_act = calloc((size_t)nl + 1, sizeof(float *));
    d->own_dact = calloc((size_t)nl + 1, sizeof(float *));
    if (!d->l || !d->act || !d->dact || !d->own_act || !d->own_dact) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "device model: out of memory");
        goto cleanup;
    }
    d->nl = nl;
    for (int i = 0; i < d->nl; i++) {
        dm_layer *L = &d->l[i];
        L->g = geo[i];
        L->index = i;
        L->ops = kind_ops(L->g.mod->kind);
        if (!L->ops) {
            st = HSI_FAIL(HSI_ERR_UNSUPPORTED,
                          "device model: module %s (kind %d) has no GPU version (supported: conv, "
                          "batch norm, linear, relu, max/avg pool, gap, dropout, flatten, reshape)",
                          hsi_module_label(L->g.mod), (int)L->g.mod->kind);
            goto cleanup;
        }
    }
    d->arena_n = arena_need(d);
    HSI_TRY(dzeros(&d->arena, 4 * d->arena_n));
    for (int i = 0; i < d->nl; i++) {
        dm_layer *L = &d->l[i];
        if (L->ops->plan && (st = L->ops->plan(d, L)) != HSI_OK) {
            hsi_fail_context(st, "device model, layer %s", hsi_module_label(L->g.mod));
            goto cleanup;
        }
        if (!L->g.alias) {
            HSI_TRY(dzeros(&d->own_act[i + 1], max_batch * L->g.out_per));
            HSI_TRY(dzeros(&d->own_dact[i + 1], max_batch * L->g.out_per));
        }
    }
    /* inference folds conv -> batch norm -> ReLU into one convolution, as
     * the CPU engine does (hsi_conv_bn_relu_eval) */
    for (int i = 0; i + 2 < d->nl; i++) {
        dm_layer *L = &d->l[i];
        if (L->g.mod->kind != HSI_MOD_CONV || d->l[i + 1].g.mod->kind != HSI_MOD_BATCHNORM ||
            d->l[i + 2].g.mod->kind != HSI_MOD_RELU || d->l[i + 1].g.c != L->g.k)
            continue;
        L->fold = 1;
        HSI_TRY(hsi_cuda_malloc((void **)&L->wf, sizeof(float) * (size_t)L->nw));
        HSI_TRY(hsi_cuda_malloc((void **)&L->bf, sizeof(float) * (size_t)L->g.k));
    }
    const hsi_layer *last = &d->l[d->nl - 1].g;
    if (last->out_nd != 1 || last->out_shape[0] < 1) {
        st = HSI_FAIL(HSI_ERR_ARG, "device model: the output must be (classes) per sample, found %d "
                                   "dims", last->out_nd);
        goto cleanup;
    }
    d->classes = (int)last->out_shape[0];
    if (!d->ws_bytes) d->ws_bytes = 4;
    HSI_TRY(hsi_cuda_malloc(&d->ws, d->ws_bytes));
    snprintf(d->conv_name, sizeof d->conv_name, "gemm");
    HSI_TRY(dzeros(&d->prob, max_batch * d->classes));
    HSI_TRY(dzeros(&d->loss, 2));
    HSI_TRY(dzeros(&d->lrec, DM_LREC));
    HSI_TRY(hsi_cuda_malloc((void **)&d->scal, sizeof *d->scal));
    HSI_TRY(hsi_cuda_memset(d->scal, 0, sizeof *d->scal));
    *out = d;
    d = NULL;
cleanup:
    free(geo);
    hsi_dmodel_free(d);
    return st;
}

static void graph_drop(hsi_dmodel *d);

void hsi_dmodel_free(hsi_dmodel *d)
{
    if (!d) return;
    graph_drop(d);
    const hsi_cuda_plugin *cu = d->gstream ? hsi_cuda_plugin_get() : NULL;
    if (cu) cu->stream_destroy(d->gstream);
    hsi_cuda_free(d->scal);
    for (int i = 0; i < d->nl; i++) {
        dm_layer *L = &d->l[i];
        float *p[] = {L->rm, L->rv, L->save_mean, L->save_invstd, L->mask, L->wf, L->bf}; /* the rest is in the arena */
        for (size_t k = 0; k < sizeof p / sizeof p[0]; k++) hsi_cuda_free(p[k]);
        hsi_cuda_free(L->argmax);
    }
    if (d->own_act)
        for (int i = 0; i <= d->nl; i++) hsi_cuda_free(d->own_act[i]);
    if (d->own_dact)
        for (int i = 0; i <= d->nl; i++) hsi_cuda_free(d->own_dact[i]);
    hsi_cuda_free(d->arena);
    hsi_cuda_free(d->ws);
    hsi_cuda_free(d->prob);
    hsi_cuda_free(d->loss);
    hsi_cuda_free(d->lrec);
    free(d->act);
    free(d->dact);
    free(d->own_act);
    free(d->own_dact);
    free(d->l);
    free(d);
}

void hsi_dmodel_set_lr(hsi_dmodel *d, double lr) { d->cfg.lr = lr; }

/* AUTO's rule, measured on an H200 with cuDNN 9.14 (batch 128-1024):
 * cuDNN's forwards were 2.5-5x and its 2-D backwards 2-3.5x faster than
 * im2col + cuBLAS, but its fastest deterministic 3-D backward (weight
 * gradients) 1.4-4x slower: a 3-D convolution's backward stays on gemm. */
static int auto_dnn_backward(const dm_layer *L) { return L->g.sp_nd == 2; }

hsi_status hsi_dmodel_set_conv(hsi_dmodel *d, hsi_gpu_conv mode)
{
    hsi_status st = HSI_OK;
    int version = 0, dnn = 0, any_gemm = 0, any_dnn = 0, dnn_bn = 0, any_bn = 0;
    if (mode != HSI_GPU_CONV_AUTO && mode != HSI_GPU_CONV_GEMM && mode != HSI_GPU_CONV_CUDNN)
        return HSI_FAIL(HSI_ERR_ARG, "device model: unknown convolution mode %d", (int)mode);
    if (mode != HSI_GPU_CONV_GEMM) {
        st = hsi_conv_cudnn_available(&version);
        for (int i = 0; st == HSI_OK && i < d->nl; i++) {
            hsi_conv_dims cd;
            if (d->l[i].g.mod->kind != HSI_MOD_CONV) continue;
            st = hsi_layer_conv_dims(&cd, &d->l[i].g, (int)d->max_batch);
            if (st == HSI_OK && !hsi_conv_cudnn_fits(&cd))
                st = HSI_FAIL(HSI_ERR_UNSUPPORTED, "layer %s at batch %lld has a tensor of 2^31 "
                                                   "elements or more, beyond cuDNN's int sizes",
                              hsi_module_label(d->l[i].g.mod), (long long)d->max_batch);
        }
        if (st != HSI_OK && mode == HSI_GPU_CONV_CUDNN)
            return hsi_fail_context(st, "device model: cuDNN convolutions");
        if (st != HSI_OK) hsi_clear_error(); /* AUTO: the gemm ones */
        dnn = st == HSI_OK;
        st = HSI_OK;
        /* CUDNN: batch norm by cuDNN too where it has it (AUTO keeps
         * hsi's kernels: not yet measured against cuDNN's) */
        if (mode == HSI_GPU_CONV_CUDNN) {
            dnn_bn = hsi_bn_cudnn_available() == HSI_OK;
            if (!dnn_bn) hsi_clear_error();
        }
    }
    for (int i = 0; i < d->nl; i++) {
        const dm_layer *L = &d->l[i];
        if (L->g.mod->kind != HSI_MOD_CONV) continue;
        any_dnn |= dnn;
        any_gemm |= !dnn || (mode == HSI_GPU_CONV_AUTO && !auto_dnn_backward(L));
    }
    /* the gemm workspace only while a gemm convolution runs */
    if (any_gemm && !d->ws) HSI_TRY(hsi_cuda_malloc(&d->ws, d->ws_bytes));
    if (!any_gemm && d->ws) {
        hsi_cuda_free(d->ws);
        d->ws = NULL;
    }
    for (int i = 0; i < d->nl; i++) {
        dm_layer *L = &d->l[i];
        if (L->g.mod->kind == HSI_MOD_BATCHNORM) {
            L->dnn_bn = dnn_bn;
            any_bn |= dnn_bn;
        }
        if (L->g.mod->kind != HSI_MOD_CONV) continue;
        L->dnn_fwd = dnn;
        L->dnn_bwd = dnn && (mode == HSI_GPU_CONV_CUDNN || auto_dnn_backward(L));
    }
    graph_drop(d); /* other launches from now on */
    if (!any_dnn)
        snprintf(d->conv_name, sizeof d->conv_name, "gemm");
    else
        snprintf(d->conv_name, sizeof d->conv_name, "cudnn %d.%d.%d%s%s%s", version / 10000,
                 version / 100 % 100, version % 100,
                 hsi_cudnn_algo_fastest() > 0 ? " fastest algorithms" : "",
                 any_gemm ? ", gemm for 3-D backward" : "", any_bn ? ", batch norm too" : "");
cleanup:
    return st;
}

const char *hsi_dmodel_conv_name(const hsi_dmodel *d) { return d->conv_name; }

hsi_status hsi_conv_option(const char *name, hsi_device dev, hsi_conv_impl *cpu, hsi_gpu_conv *gpu)
{
    static const struct {
        const char *name;
        hsi_conv_impl cpu;
        hsi_gpu_conv gpu;
        int on_cpu, on_gpu;
    } opts[] = {{"auto", HSI_CONV_IMPL_AUTO, HSI_GPU_CONV_AUTO, 1, 1},
                {"gemm", HSI_CONV_IMPL_GEMM, HSI_GPU_CONV_GEMM, 1, 1},
                {"direct", HSI_CONV_IMPL_DIRECT, HSI_GPU_CONV_AUTO, 1, 0},
                {"cudnn", HSI_CONV_IMPL_AUTO, HSI_GPU_CONV_CUDNN, 0, 1}};
    if (!name) name = "auto";
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        if (strcmp(name, opts[i].name) != 0) continue;
        if (dev == HSI_DEVICE_CUDA && !opts[i].on_gpu)
            return HSI_FAIL(HSI_ERR_ARG, "--conv %s runs on the CPU only; on the GPU: auto, gemm "
                                         "or cudnn", name);
        if (dev == HSI_DEVICE_CPU && !opts[i].on_cpu)
            return HSI_FAIL(HSI_ERR_ARG, "--conv %s runs on the GPU only (--device cuda); on the "
                                         "CPU: auto, direct or gemm", name);
        if (cpu) *cpu = opts[i].cpu;
        if (gpu) *gpu = opts[i].gpu;
        return HSI_OK;
    }
    return HSI_FAIL(HSI_ERR_ARG, "--conv expects auto, direct, gemm or cudnn (got '%s')", name);
}

int64_t hsi_dmodel_steps(const hsi_dmodel *d) { return d->step; }
int hsi_dmodel_classes(const hsi_dmodel *d) { return d->classes; }

/* act/dact pointers for this call: aliases share their input's buffers */
static void bind(hsi_dmodel *d, const float *x)
{
    d->act[0] = (float *)x;
    d->dact[0] = NULL; /* no gradient for the input */
    for (int i = 0; i < d->nl; i++) {
        d->act[i + 1] = d->l[i].g.alias ? d->act[i] : d->own_act[i + 1];
        d->dact[i + 1] = d->l[i].g.alias ? d->dact[i] : d->own_dact[i + 1];
    }
}

/* The op profile (hsi_op_profile, `hsi bench model --device cuda --ops`):
 * while it is on, each timed piece of a step waits for the stream before
 * and after (so the pieces add up to more than an unprofiled step). */
static hsi_status prof_begin(double *t0)
{
    *t0 = 0;
    if (!hsi_op_profile_on()) return HSI_OK; /* no clock read in an unprofiled step */
    hsi_status st = hsi_cuda_sync();
    *t0 = hsi_now();
    return st;
}

static hsi_status prof_end(hsi_status st, const char *op, const char *layer, double t0, int bwd)
{
    if (st != HSI_OK || !hsi_op_profile_on()) return st;
    st = hsi_cuda_sync();
    double t = hsi_now() - t0;
    if (st == HSI_OK) hsi_op_profile_add(op, layer, bwd ? 0 : t, bwd ? t : 0);
    return st;
}

static const char *op_name(const dm_layer *L, int bwd)
{
    if (L->g.mod->kind == HSI_MOD_BATCHNORM) return L->dnn_bn ? "batch_norm (cudnn)" : "batch_norm";
    if (L->g.mod->kind != HSI_MOD_CONV) return L->ops->name;
    return (bwd ? L->dnn_bwd : L->dnn_fwd) ? "conv (cudnn)" : "conv (gemm)";
}

/* The folded filters and biases of every fold layer from the parameters
 * and running statistics now on the device (hsi_bn_fold on the host, the
 * CPU's own fold: the same bits as its inference). Waits for the stream. */
static hsi_status fold_all(hsi_dmodel *d)
{
    hsi_status st = HSI_OK;
    float *h = NULL;
    int64_t most = 0;
    for (int i = 0; i < d->nl; i++)
        if (d->l[i].fold && d->l[i].nw + 6 * d->l[i].g.k > most) most = d->l[i].nw + 6 * d->l[i].g.k;
    if (!most) return HSI_OK;
    if (!(h = malloc(sizeof(float) * 2 * (size_t)most)))
        return HSI_FAIL(HSI_ERR_NOMEM, "device model: out of memory folding the batch norms");
    for (int i = 0; i < d->nl; i++) {
        dm_layer *L = &d->l[i], *B = &d->l[i + 1];
        if (!L->fold) continue;
        int64_t k = L->g.k, nw = L->nw;
        float *w = h, *g = w + nw, *be = g + k, *m = be + k, *v = m + k, *b = v + k, *wf = b + k,
              *bf = wf + nw;
        HSI_TRY(hsi_cuda_download(w, L->w, sizeof(float) * (size_t)nw));
        if (L->nb) HSI_TRY(hsi_cuda_download(b, L->b, sizeof(float) * (size_t)k));
        HSI_TRY(hsi_cuda_download(g, B->w, sizeof(float) * (size_t)k));
        HSI_TRY(hsi_cuda_download(be, B->b, sizeof(float) * (size_t)k));
        HSI_TRY(hsi_cuda_download(m, B->rm, sizeof(float) * (size_t)k));
        HSI_TRY(hsi_cuda_download(v, B->rv, sizeof(float) * (size_t)k));
        hsi_bn_fold_f32(wf, bf, w, L->nb ? b : NULL, g, be, m, v, B->g.mod->eps, k, nw / k);
        HSI_TRY(hsi_cuda_upload(L->wf, wf, sizeof(float) * (size_t)nw));
        HSI_TRY(hsi_cuda_upload(L->bf, bf, sizeof(float) * (size_t)k)); /* waits: h is free again */
    }
    d->folds_valid = 1;
cleanup:
    free(h);
    return st;
}

static hsi_status forward(hsi_dmodel *d, int64_t n, int training)
{
    hsi_status st = HSI_OK;
    for (int i = 0; i < d->nl; i++) {
        dm_layer *L = &d->l[i];
        double t0;
        if (!training && L->fold) { /* conv, batch norm and ReLU: one convolution, then ReLU in place */
            float *y = d->act[i + 3];
            if ((st = prof_begin(&t0)) == HSI_OK) st = conv_run(d, L, y, d->act[i], n, L->wf, L->bf);
            if (st == HSI_OK) st = hsi_relu_forward_cuda(y, y, n * L->g.out_per);
            if ((st = prof_end(st, "conv+bn+relu (folded)", L->g.mod->name, t0, 0)) != HSI_OK)
                return hsi_fail_context(st, "device model, layers %s to %s (folded)", hsi_module_label(L->g.mod),
                                        hsi_module_label(d->l[i + 2].g.mod));
            i += 2;
            continue;
        }
        if (!L->ops->forward) continue;
        if ((st = prof_begin(&t0)) == HSI_OK)
            st = prof_end(L->ops->forward(d, L, d->act[i + 1], d->act[i], n, training), op_name(L, 0),
                          L->g.mod->name, t0, 0);
        if (st != HSI_OK) return hsi_fail_context(st, "device model, layer %s", hsi_module_label(L->g.mod));
    }
    return st;
}

/* The values of the step the next launches belong to, into d->scal
 * (stream-ordered): dropout's key from the forward calls so far, Adam's
 * factors at `step` (the step forward_backward's optim_step will take).
 * The kernels read them when they run, so a captured step replays with
 * each step's. Launches only when they changed: once per step. */
static hsi_status set_scalars(hsi_dmodel *d, int64_t step)
{
    hsi_step_scalars v;
    memset(&v, 0, sizeof v);
    if (d->has_dropout) v.dropout_key = d->seed + (uint64_t)d->calls * 0x100000001B3ull;
    hsi_adam_factors(v.adam, &d->cfg, step);
    if (!memcmp(&v, &d->scal_h, sizeof v)) return HSI_OK;
    hsi_status st = hsi_step_scalars_set_cuda(d->scal, &v);
    if (st == HSI_OK) d->scal_h = v;
    return st;
}

/* forward_backward's launches: gradients zeroed, forward in training mode,
 * the loss and backward (the host counters: count_forward) */
static hsi_status fb_launch(hsi_dmodel *d, const float *x, const int32_t *y, int64_t n)
{
    hsi_status st = HSI_OK;
    bind(d, x);
    double t0;
    /* gradients accumulate: start from zero */
    HSI_TRY(prof_begin(&t0));
    for (int i = 1; i <= d->nl; i++)
        if (d->own_dact[i])
            HSI_TRY(hsi_cuda_memset(d->own_dact[i], 0, sizeof(float) * (size_t)(n * d->l[i - 1].g.out_per)));
    if (d->arena_n) HSI_TRY(hsi_cuda_memset(d->arena + d->arena_n, 0, sizeof(float) * (size_t)d->arena_n));
    HSI_TRY(prof_end(HSI_OK, "zero_grad", NULL, t0, 1));
    HSI_TRY(forward(d, n, 1));
    float *logits = d->act[d->nl];
    HSI_TRY(prof_begin(&t0));
    HSI_TRY(prof_end(hsi_cross_entropy_forward_cuda(d->loss, d->loss + 1, d->prob, logits, y, NULL, n,
                                                    d->classes, 0.0, -100), "cross_entropy", NULL, t0, 0));
    HSI_TRY(prof_begin(&t0));
    HSI_TRY(prof_end(hsi_cross_entropy_backward_cuda(d->dact[d->nl], NULL, d->loss + 1, d->prob, y, NULL,
                                                     n, d->classes, 0.0, -100), "cross_entropy", NULL, t0, 1));
    for (int i = d->nl - 1; i >= 0; i--) {
        dm_layer *L = &d->l[i];
        if (!L->ops->backward) continue;
        HSI_TRY(prof_begin(&t0));
        st = prof_end(L->ops->backward(d, L, d->dact[i], d->dact[i + 1], d->act[i], d->act[i + 1], n),
                      op_name(L, 1), L->g.mod->name, t0, 1);
        if (st != HSI_OK) {
            hsi_fail_context(st, "device model, layer %s (backward)", hsi_module_label(L->g.mod));
            goto cleanup;
        }
    }
cleanup:
    return st;
}

/* the host's side of a training forward: the counters the CPU engine keeps */
static void count_forward(hsi_dmodel *d, int64_t n)
{
    d->calls++;
    d->last_n = n;
    d->folds_valid = 0; /* the running statistics moved */
    for (int i = 0; i < d->nl; i++)
        if (d->l[i].g.mod->kind == HSI_MOD_BATCHNORM) d->l[i].num_batches++;
}

/* AdamW over the whole arena at once: the same operations per element as
 * one launch per tensor (the zero gaps stay zero); the factors: d->scal */
static hsi_status optim_launch(hsi_dmodel *d)
{
    hsi_status st = HSI_OK;
    double t0;
    HSI_TRY(prof_begin(&t0));
    if (d->arena_n)
        HSI_TRY(hsi_adam_step_dev_cuda(d->arena, d->arena + d->arena_n, d->arena + 2 * d->arena_n,
                                       d->arena + 3 * d->arena_n, d->arena_n, &d->cfg, d->scal));
    HSI_TRY(prof_end(HSI_OK, d->cfg.kind == HSI_OPT_ADAMW ? "adamw" : "adam", NULL, t0, 1));
cleanup:
    return st;
}

/* The record's losses added into the sums (waits for the stream) */
static hsi_status loss_fold(hsi_dmodel *d)
{
    float v[DM_LREC];
    if (d->lrec_n == 0) return HSI_OK;
    hsi_status st = hsi_cuda_download(v, d->lrec, sizeof(float) * (size_t)d->lrec_n);
    if (st != HSI_OK) return st;
    for (int64_t i = 0; i < d->lrec_n; i++) {
        d->lsum += d->lrec_w[i] * (double)v[i];
        d->lsum_w += d->lrec_w[i];
    }
    d->lrec_n = 0;
    return HSI_OK;
}

/* This step's loss (n samples) into the record: a device copy on the
 * stream, after the step's launches (never inside a capture) */
static hsi_status loss_record(hsi_dmodel *d, int64_t n)
{
    if (d->lrec_n == DM_LREC) {
        hsi_status st = loss_fold(d);
        if (st != HSI_OK) return st;
    }
    hsi_status st = hsi_cuda_copy(d->lrec + d->lrec_n, d->loss, sizeof(float));
    if (st == HSI_OK) {
        d->lrec_w[d->lrec_n++] = (double)n;
        d->lsteps++;
    }
    return st;
}

hsi_status hsi_dmodel_loss_mean(hsi_dmodel *d, double *mean, int64_t *steps)
{
    hsi_status st = loss_fold(d);
    if (st != HSI_OK) return st;
    *mean = d->lsum_w > 0 ? d->lsum / d->lsum_w : NAN;
    if (steps) *steps = d->lsteps;
    d->lsum = d->lsum_w = 0;
    d->lsteps = 0;
    return HSI_OK;
}

hsi_status hsi_dmodel_forward_backward(hsi_dmodel *d, const float *x, const int32_t *y, int64_t n)
{
    hsi_status st = HSI_OK;
    if (n < 1 || n > d->max_batch)
        return HSI_FAIL(HSI_ERR_ARG, "device model: batch of %lld samples (1..%lld)", (long long)n,
                        (long long)d->max_batch);
    HSI_TRY(set_scalars(d, d->step + 1));
    st = fb_launch(d, x, y, n);
    if (st == HSI_OK) count_forward(d, n);
    if (st == HSI_OK) st = loss_record(d, n);
cleanup:
    return st;
}

hsi_status hsi_dmodel_optim_step(hsi_dmodel *d)
{
    hsi_status st = set_scalars(d, d->step + 1);
    if (st == HSI_OK) st = optim_launch(d);
    if (st == HSI_OK) {
        d->step++;
        d->folds_valid = 0;
    }
    return st;
}

/* ------------------------------------------- the steps as CUDA Graphs */

/* Forgets a captured step (the next one measures and captures again).
 * Waits for the stream first: a launch may still be running. Called on
 * cleanup after a failure too: the failure's message is kept (a device
 * fault makes this wait fail as well). */
static void graph_forget(dm_graph *G)
{
    if (G->exec) {
        const hsi_cuda_plugin *cu = hsi_cuda_plugin_get();
        char keep[2048];
        snprintf(keep, sizeof keep, "%s", hsi_last_error());
        if (hsi_cuda_sync() != HSI_OK) {
            if (keep[0]) hsi_fail(HSI_ERR_CUDA, "%s", keep);
            else hsi_clear_error();
        }
        if (cu) cu->graph_destroy(G->exec);
    }
    hsi_cuda_free(G->scratch);
    int64_t launches = G->launches; /* counted over the model's life */
    memset(G, 0, sizeof *G);
    G->launches = launches;
}

static void graph_drop(hsi_dmodel *d)
{
    graph_forget(&d->gtrain);
    graph_forget(&d->geval);
    hsi_cuda_free(d->gx);
    hsi_cuda_free(d->gy);
    d->gx = NULL, d->gy = NULL;
}

hsi_status hsi_dmodel_set_graph(hsi_dmodel *d, int on)
{
    if (!on) graph_drop(d);
    d->graph = on != 0;
    return HSI_OK;
}

int64_t hsi_dmodel_graph_launches(const hsi_dmodel *d, int training)
{
    return (training ? &d->gtrain : &d->geval)->launches;
}

static hsi_status plain_step(hsi_dmodel *d, const float *x, const int32_t *y, int64_t n)
{
    hsi_status st = hsi_dmodel_forward_backward(d, x, y, n);
    if (st == HSI_OK) st = hsi_dmodel_optim_step(d);
    return st;
}

static hsi_status plain_predict(hsi_dmodel *d, const float *x, int64_t n)
{
    bind(d, x);
    hsi_status st = d->folds_valid ? HSI_OK : fold_all(d);
    return st == HSI_OK ? forward(d, n, 0) : st;
}

/* Records the launches of a training step (training) or an eval forward
 * of max_batch samples over d->gx (and d->gy), on the model's own stream,
 * with scratch from G's block only, as G->exec; runs nothing. */
static hsi_status capture(hsi_dmodel *d, dm_graph *G, int training)
{
    hsi_status st = HSI_OK;
    const hsi_cuda_plugin *cu = hsi_cuda_plugin_get();
    char why[512] = "";
    if (!cu) return HSI_ERR_NO_CUDA; /* the model exists: not reached */
    if (!d->gstream) HSI_TRY(cu->stream_create(&d->gstream));
    HSI_TRY(hsi_cuda_sync()); /* nothing queued on this thread's stream is left for the capture to wait for */
    void *prev = hsi_cuda_set_stream(d->gstream);
    st = hsi_cuda_scratch_begin(G->scratch, G->bytes, 1);
    if (st == HSI_OK) {
        st = cu->capture_begin(d->gstream);
        if (st == HSI_OK) {
            void *exec = NULL;
            if (training) {
                st = fb_launch(d, d->gx, d->gy, d->max_batch);
                if (st == HSI_OK) st = optim_launch(d);
            } else {
                bind(d, d->gx);
                st = forward(d, d->max_batch, 0); /* the folds are valid: plain_predict ran */
            }
            if (st != HSI_OK) snprintf(why, sizeof why, "%s", hsi_last_error());
            hsi_status e = cu->capture_end(d->gstream, &exec);
            if (st == HSI_OK) st = e;
            if (st == HSI_OK) G->exec = exec;
            else cu->graph_destroy(exec);
        }
        hsi_cuda_scratch_end();
    }
    hsi_cuda_set_stream(prev);
    if (st != HSI_OK && why[0]) hsi_fail(st, "%s", why); /* the first failure, not capture_end's */
cleanup:
    return st == HSI_OK ? st
                        : hsi_fail_context(st, "device model: capturing the %s as a CUDA Graph",
                                           training ? "training step" : "eval forward");
}

/* A training step (training) or an eval forward of max_batch samples by
 * its graph: the first runs as usual and measures the scratch its
 * launchers take, the second captures, and each from then on refreshes
 * what the graph reads (the step's values; the folded filters), copies x
 * (and y) in and launches the graph on this thread's stream. */
static hsi_status graph_call(hsi_dmodel *d, int training, const float *x, const int32_t *y, int64_t n)
{
    hsi_status st = HSI_OK;
    dm_graph *G = training ? &d->gtrain : &d->geval;
    const size_t xb = sizeof(float) * (size_t)(n * d->l[0].g.in_per);
    if (G->state == 0) {
        HSI_TRY(hsi_cuda_scratch_begin(NULL, 0, 0));
        st = training ? plain_step(d, x, y, n) : plain_predict(d, x, n);
        size_t need = hsi_cuda_scratch_end();
        if (st != HSI_OK) return st;
        if (!d->gx) HSI_TRY(hsi_cuda_malloc((void **)&d->gx, xb));
        if (!d->gy) HSI_TRY(hsi_cuda_malloc((void **)&d->gy, sizeof(int32_t) * (size_t)n));
        G->bytes = need ? need : 256;
        HSI_TRY(hsi_cuda_malloc(&G->scratch, G->bytes)); /* last: state 1 once it is held */
        G->state = 1;
        return HSI_OK;
    }
    if (training) HSI_TRY(set_scalars(d, d->step + 1));
    else if (!d->folds_valid) HSI_TRY(fold_all(d));
    if (G->state == 1) {
        HSI_TRY(capture(d, G, training));
        G->state = 2;
    }
    if (x != d->gx) HSI_TRY(hsi_cuda_copy(d->gx, x, xb));
    if (training && y != d->gy) HSI_TRY(hsi_cuda_copy(d->gy, y, sizeof(int32_t) * (size_t)n));
    HSI_TRY(hsi_cuda_plugin_get()->graph_launch(G->exec, hsi_cuda_stream()));
    bind(d, d->gx);
    if (training) {
        count_forward(d, n);
        d->step++;
    }
    G->launches++;
    if (training) HSI_TRY(loss_record(d, n));
cleanup:
    return st;
}

/* whether a call of n samples runs by its graph */
static int by_graph(const hsi_dmodel *d, int64_t n)
{
    return d->graph && n == d->max_batch && !hsi_op_profile_on();
}

hsi_status hsi_dmodel_train_step(hsi_dmodel *d, const float *x, const int32_t *y, int64_t n)
{
    return by_graph(d, n) ? graph_call(d, 1, x, y, n) : plain_step(d, x, y, n);
}

hsi_status hsi_dmodel_loss(hsi_dmodel *d, double *loss)
{
    float v[2];
    hsi_status st = hsi_cuda_download(v, d->loss, sizeof v);
    if (st == HSI_OK) *loss = v[0];
    return st;
}

hsi_status hsi_dmodel_predict(hsi_dmodel *d, const float **logits, const float *x, int64_t n)
{
    if (n < 1 || n > d->max_batch)
        return HSI_FAIL(HSI_ERR_ARG, "device model: batch of %lld samples (1..%lld)", (long long)n,
                        (long long)d->max_batch);
    hsi_status st = by_graph(d, n) ? graph_call(d, 0, x, NULL, n) : plain_predict(d, x, n);
    *logits = st == HSI_OK ? d->act[d->nl] : NULL;
    return st;
}

static hsi_status download(hsi_tensor *t, const float *dev)
{
    return hsi_cuda_download(hsi_tensor_ptr(t), dev, sizeof(float) * (size_t)hsi_tensor_count(t));
}

static hsi_status download_grad(hsi_tensor *t, const float *dev)
{
    if (!t->grad) {
        hsi_status st = hsi_tensor_new(&t->grad, t->data.dtype, t->data.ndim, t->data.shape, 0);
        if (st != HSI_OK) return st;
    }
    return download(t->grad, dev);
}

/* o's index of parameter t (-1: none) */
static int optim_index(const hsi_optim *o, const hsi_tensor *t)
{
    for (int j = 0; j < o->n; j++)
        if (o->params[j].t == t) return j;
    return -1;
}

/* One parameter's Adam moments between the arena (mo, v: n floats) and
 * o's state tensors for t (to_host: allocated when absent; to the device:
 * none yet means zero moments, as the arena's) */
static hsi_status moments_copy(hsi_optim *o, const hsi_tensor *t, float *mo, float *v, int to_host)
{
    int j = optim_index(o, t);
    if (j < 0) return HSI_FAIL(HSI_ERR_ARG, "device model: a parameter of the module is not in the optimiser");
    const size_t bytes = sizeof(float) * (size_t)hsi_tensor_count(t);
    for (int k = 0; k < 2; k++) {
        hsi_tensor **s = k ? &o->state2[j] : &o->state1[j];
        float *dev = k ? v : mo;
        hsi_status st = HSI_OK;
        if (to_host && !*s) st = hsi_tensor_new(s, HSI_F32, t->data.ndim, t->data.shape, 0);
        if (st == HSI_OK && *s) st = packed_f32(*s, o->params[j].name);
        if (st == HSI_OK && *s && hsi_tensor_count(*s) != hsi_tensor_count(t))
            st = HSI_FAIL(HSI_ERR_ARG, "device model: the optimiser's state of %s has %lld values, "
                                       "the parameter %lld", o->params[j].name,
                          (long long)hsi_tensor_count(*s), (long long)hsi_tensor_count(t));
        if (st == HSI_OK)
            st = to_host ? hsi_cuda_download(hsi_tensor_ptr(*s), dev, bytes)
                 : *s    ? hsi_cuda_upload(dev, hsi_tensor_ptr(*s), bytes)
                         : hsi_cuda_memset(dev, 0, bytes);
        if (st != HSI_OK) return st;
    }
    return HSI_OK;
}

/* *h: m's layers, checked against d's one by one (m must be d's module or
 * one of the same architecture), after d's queued work is done */
static hsi_status host_layers(hsi_dmodel *d, const hsi_module *m, hsi_layer **h, const char *what)
{
    int nh = 0;
    *h = NULL;
    hsi_status st = hsi_module_layers(h, &nh, (hsi_module *)m, d->sample_nd, d->sample_shape);
    if (st != HSI_OK) return hsi_fail_context(st, "device model: %s", what);
    if (nh != d->nl)
        st = HSI_FAIL(HSI_ERR_ARG, "device model: %s: the module has %d layers, the device model %d",
                      what, nh, d->nl);
    for (int i = 0; st == HSI_OK && i < d->nl; i++)
        if ((*h)[i].mod->kind != d->l[i].g.mod->kind || (*h)[i].out_per != d->l[i].g.out_per)
            st = HSI_FAIL(HSI_ERR_ARG, "device model: %s: layer %d is %s here, another layer on the "
                                       "device", what, i, hsi_module_label((*h)[i].mod));
    if (st == HSI_OK) st = hsi_cuda_sync();
    if (st != HSI_OK) {
        free(*h);
        *h = NULL;
    }
    return st;
}

hsi_status hsi_dmodel_optim_state(hsi_dmodel *d, const hsi_module *m, hsi_optim *o, int to_host)
{
    hsi_status st = HSI_OK;
    hsi_layer *h = NULL;
    if (o->cfg.kind != d->cfg.kind || !o->state1 || !o->state2)
        return HSI_FAIL(HSI_ERR_ARG, "device model: the optimiser is not the model's %s",
                        d->cfg.kind == HSI_OPT_ADAMW ? "AdamW" : "Adam");
    HSI_TRY(host_layers(d, m, &h, "the optimiser's state"));
    for (int i = 0; i < d->nl; i++) {
        dm_layer *L = &d->l[i];
        if (L->nw) HSI_TRY(moments_copy(o, h[i].mod->tensors[0].t, L->mw, L->vw, to_host));
        if (L->nb) HSI_TRY(moments_copy(o, h[i].mod->tensors[1].t, L->mb, L->vb, to_host));
    }
    if (to_host) o->step = d->step;
    else /* the next step's bias corrections and dropout key follow (set_scalars) */
        d->step = d->calls = o->step;
    HSI_TRY(hsi_cuda_sync());
cleanup:
    free(h);
    return st;
}

hsi_status hsi_dmodel_to_host(hsi_dmodel *d, hsi_module *m, int with_grads)
{
    hsi_status st = HSI_OK;
    hsi_layer *h = NULL;
    HSI_TRY(host_layers(d, m, &h, "copying back to a module"));
    for (int i = 0; i < d->nl; i++) {
        dm_layer *L = &d->l[i];
        hsi_module *hm = h[i].mod;
        if (L->nw) {
            HSI_TRY(download(hm->tensors[0].t, L->w));
            if (with_grads) HSI_TRY(download_grad(hm->tensors[0].t, L->dw));
        }
        if (L->nb) {
            HSI_TRY(download(hm->tensors[1].t, L->b));
            if (with_grads) HSI_TRY(download_grad(hm->tensors[1].t, L->db));
        }
        if (hm->kind == HSI_MOD_BATCHNORM) {
            HSI_TRY(download(hm->tensors[2].t, L->rm));
            HSI_TRY(download(hm->tensors[3].t, L->rv));
            *(int64_t *)hsi_tensor_ptr(hm->tensors[4].t) = L->num_batches;
        }
    }
cleanup:
    free(h);
    return st;
}

/* model_cuda.c — a module trained on the GPU (see model_cuda.h): the module
 * tree is flattened into a list of layers with per-sample shapes, every
 * parameter/buffer gets a device copy plus gradient and Adam state, and a
 * step calls the launchers of layers_cuda.h in order. Plain C over the CUDA
 * API of kernels/cuda.h: compiled in every build (without CUDA the first
 * call says HSI_ERR_NO_CUDA). Not the engine's graph. */
#include "models/model_cuda.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda.h"
#include "models/layers_cuda.h"

typedef struct dm_layer {
    hsi_module *mod;
    hsi_module_kind kind;
    int in_nd, out_nd;  /* per-sample dims */
    int64_t in_shape[HSI_MAX_DIMS], out_shape[HSI_MAX_DIMS];
    int64_t in_per, out_per;
    int alias;          /* flatten / reshape: the output is the input */
    int sp_nd;          /* conv/pool spatial dims */
    int sp_in[3];
    int c, k;           /* channels in / out (conv), channels (bn, gap, pool) */
    int64_t s;          /* bn / gap: elements per channel per sample */
    int has_bias;
    int dnn_fwd, dnn_bwd; /* conv: forward / backward by cuDNN (else im2col + cuBLAS) */
    int64_t nw, nb;
    float *w, *b, *dw, *db, *mw, *vw, *mb, *vb;
    float *rm, *rv, *save_mean, *save_invstd, *mask;
    int32_t *argmax;
    int64_t num_batches;
} dm_layer;

struct hsi_dmodel {
    dm_layer *l;
    int nl, cap;
    int64_t max_batch;
    int classes;
    float **act, **dact;          /* nl + 1 each, set per call (aliases resolved) */
    float **own_act, **own_dact;  /* nl + 1 each: buffers owned (NULL for aliases) */
    void *ws;                     /* the gemm convolutions' workspace (NULL when none runs) */
    size_t ws_bytes;
    char conv_name[64];           /* hsi_dmodel_conv_name */
    float *prob, *loss;           /* (max_batch, classes); [loss, wsum] */
    hsi_optim_config cfg;
    int64_t step, calls, last_n;
    uint64_t seed;
    /* every parameter, gradient and Adam moment in one device block: four
     * regions of arena_n floats (parameters, gradients, m, v), each tensor
     * at the same offset in all four (multiples of 16 floats, the gaps
     * zero): one memset zeroes the gradients, one launch steps AdamW */
    float *arena;
    int64_t arena_n, arena_used;
};

static int64_t prod(const int64_t *s, int n)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++) p *= s[i];
    return p;
}

static hsi_status collect(hsi_dmodel *d, hsi_module *m)
{
    if (m->kind == HSI_MOD_SEQUENTIAL) {
        for (int i = 0; i < m->n_children; i++) {
            hsi_status st = collect(d, m->children[i]);
            if (st != HSI_OK) return st;
        }
        return HSI_OK;
    }
    if (d->nl == d->cap) {
        int nc = d->cap ? 2 * d->cap : 16;
        dm_layer *nl = realloc(d->l, sizeof *nl * (size_t)nc);
        if (!nl) return HSI_FAIL(HSI_ERR_NOMEM, "device model: out of memory");
        d->l = nl;
        d->cap = nc;
    }
    memset(&d->l[d->nl], 0, sizeof d->l[d->nl]);
    d->l[d->nl].mod = m;
    d->l[d->nl].kind = m->kind;
    d->nl++;
    return HSI_OK;
}

static const char *mname(const hsi_module *m) { return m->name[0] ? m->name : "(root)"; }

/* f32 packed host tensor -> new device copy */
static hsi_status upload(float **dev, const hsi_tensor *t, const char *what)
{
    if (t->data.dtype != HSI_F32 || !hsi_view_is_packed(&t->data))
        return HSI_FAIL(HSI_ERR_UNSUPPORTED, "device model: %s must be packed float32", what);
    size_t n = sizeof(float) * (size_t)hsi_tensor_count(t);
    hsi_status st = hsi_cuda_malloc((void **)dev, n);
    if (st == HSI_OK) st = hsi_cuda_upload(*dev, hsi_tensor_ptr(t), n);
    return st;
}

#define ARENA_ALIGN 16 /* floats: every tensor starts on 64 bytes */

static int64_t arena_round(int64_t n) { return (n + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN; }

/* The floats the arena needs for m's parameters (the tensors plan_layer
 * puts in it: conv, batch norm and linear weights and biases). */
static int64_t arena_need(const hsi_dmodel *d)
{
    int64_t n = 0;
    for (int i = 0; i < d->nl; i++) {
        const hsi_module *m = d->l[i].mod;
        int np = m->kind == HSI_MOD_CONV || m->kind == HSI_MOD_LINEAR ? (m->n_tensors > 1 ? 2 : 1)
                 : m->kind == HSI_MOD_BATCHNORM ? 2 : 0;
        for (int k = 0; k < np && k < m->n_tensors; k++) n += arena_round(hsi_tensor_count(m->tensors[k].t));
    }
    return n;
}

/* Parameter t of a layer into the arena's next slot: *p its value
 * (uploaded), *g, *mo, *v its gradient and moments (zero). */
static hsi_status param_slot(hsi_dmodel *d, float **p, float **g, float **mo, float **v, const hsi_tensor *t,
                             const char *what)
{
    int64_t n = hsi_tensor_count(t), off = d->arena_used;
    if (off + n > d->arena_n)
        return HSI_FAIL(HSI_ERR_STATE, "device model: parameter %s does not fit the arena", what);
    d->arena_used = off + arena_round(n);
    *p = d->arena + off;
    *g = d->arena + d->arena_n + off;
    *mo = d->arena + 2 * d->arena_n + off;
    *v = d->arena + 3 * d->arena_n + off;
    return hsi_cuda_upload(*p, hsi_tensor_ptr(t), sizeof(float) * (size_t)n);
}

static hsi_status dzeros(float **dev, int64_t n)
{
    hsi_status st = hsi_cuda_malloc((void **)dev, sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (st == HSI_OK) st = hsi_cuda_memset(*dev, 0, sizeof(float) * (size_t)(n > 0 ? n : 1));
    return st;
}

static hsi_status conv_dims(hsi_conv_dims *cd, const dm_layer *L, int64_t n)
{
    const hsi_module *m = L->mod;
    return hsi_conv_dims_init(cd, L->sp_nd, (int)n, L->c, L->k, L->sp_in, m->ker, m->stride, m->pad);
}

static hsi_status pool_dims(hsi_pool_dims *pd, const dm_layer *L, int64_t n)
{
    const hsi_module *m = L->mod;
    return hsi_pool_dims_init(pd, L->kind == HSI_MOD_MAXPOOL ? HSI_POOL_MAX : HSI_POOL_AVG,
                              L->sp_nd, (int)n, L->c, L->sp_in, m->ker, m->stride, m->pad);
}

/* Shapes, parameters and buffers of layer L given its per-sample input. */
static hsi_status plan_layer(hsi_dmodel *d, dm_layer *L, size_t *ws_bytes)
{
    hsi_status st = HSI_OK;
    hsi_module *m = L->mod;
    int64_t N = d->max_batch;
    L->in_per = prod(L->in_shape, L->in_nd);
    L->out_nd = L->in_nd;
    memcpy(L->out_shape, L->in_shape, sizeof L->out_shape);
    switch (L->kind) {
    case HSI_MOD_CONV: {
        const hsi_tensor *w = m->tensors[0].t;
        if (L->in_nd != m->nd + 1 || w->data.shape[1] != L->in_shape[0])
            return HSI_FAIL(HSI_ERR_ARG, "device model: %s expects (%lld, %d spatial dims) per sample",
                            mname(m), (long long)w->data.shape[1], m->nd);
        L->sp_nd = m->nd;
        L->c = (int)L->in_shape[0];
        L->k = (int)w->data.shape[0];
        for (int i = 0; i < m->nd; i++) L->sp_in[i] = (int)L->in_shape[1 + i];
        hsi_conv_dims cd;
        HSI_TRY(conv_dims(&cd, L, N));
        L->out_shape[0] = L->k;
        for (int i = 0; i < m->nd; i++) L->out_shape[1 + i] = cd.out[i];
        size_t wsb = hsi_conv_workspace_bytes_cuda(&cd);
        if (wsb > *ws_bytes) *ws_bytes = wsb;
        L->has_bias = m->n_tensors > 1;
        HSI_TRY(param_slot(d, &L->w, &L->dw, &L->mw, &L->vw, w, m->tensors[0].name));
        L->nw = hsi_tensor_count(w);
        if (L->has_bias) {
            HSI_TRY(param_slot(d, &L->b, &L->db, &L->mb, &L->vb, m->tensors[1].t, m->tensors[1].name));
            L->nb = hsi_tensor_count(m->tensors[1].t);
        }
        break;
    }
    case HSI_MOD_BATCHNORM: {
        if (L->in_nd < 1 || m->n_tensors < 5)
            return HSI_FAIL(HSI_ERR_ARG, "device model: %s needs (C, ...) inputs", mname(m));
        L->c = (int)L->in_shape[0];
        L->s = prod(L->in_shape + 1, L->in_nd - 1);
        HSI_TRY(param_slot(d, &L->w, &L->dw, &L->mw, &L->vw, m->tensors[0].t, m->tensors[0].name));
        HSI_TRY(param_slot(d, &L->b, &L->db, &L->mb, &L->vb, m->tensors[1].t, m->tensors[1].name));
        HSI_TRY(upload(&L->rm, m->tensors[2].t, m->tensors[2].name));
        HSI_TRY(upload(&L->rv, m->tensors[3].t, m->tensors[3].name));
        L->num_batches = *(const int64_t *)hsi_tensor_ptr(m->tensors[4].t);
        L->nw = L->nb = L->c;
        L->has_bias = 1;
        HSI_TRY(dzeros(&L->save_mean, L->c));
        HSI_TRY(dzeros(&L->save_invstd, L->c));
        break;
    }
    case HSI_MOD_LINEAR:
        if (L->in_nd != 1 || L->in_shape[0] != m->in_features)
            return HSI_FAIL(HSI_ERR_ARG, "device model: %s expects %d features per sample, gets %lld "
                                         "(%d dims)", mname(m), m->in_features,
                            (long long)L->in_per, L->in_nd);
        L->out_shape[0] = m->out_features;
        L->has_bias = m->n_tensors > 1;
        HSI_TRY(param_slot(d, &L->w, &L->dw, &L->mw, &L->vw, m->tensors[0].t, m->tensors[0].name));
        L->nw = hsi_tensor_count(m->tensors[0].t);
        if (L->has_bias) {
            HSI_TRY(param_slot(d, &L->b, &L->db, &L->mb, &L->vb, m->tensors[1].t, m->tensors[1].name));
            L->nb = m->out_features;
        }
        break;
    case HSI_MOD_RELU:
    case HSI_MOD_DROPOUT:
        if (L->kind == HSI_MOD_DROPOUT) HSI_TRY(dzeros(&L->mask, N * L->in_per));
        break;
    case HSI_MOD_MAXPOOL:
    case HSI_MOD_AVGPOOL: {
        if (L->in_nd != m->nd + 1)
            return HSI_FAIL(HSI_ERR_ARG, "device model: %s expects %d spatial dims", mname(m), m->nd);
        L->sp_nd = m->nd;
        L->c = (int)L->in_shape[0];
        for (int i = 0; i < m->nd; i++) L->sp_in[i] = (int)L->in_shape[1 + i];
        hsi_pool_dims pd;
        HSI_TRY(pool_dims(&pd, L, N));
        for (int i = 0; i < m->nd; i++) L->out_shape[1 + i] = pd.out[i];
        if (L->kind == HSI_MOD_MAXPOOL)
            HSI_TRY(hsi_cuda_malloc((void **)&L->argmax,
                                    sizeof(int32_t) * (size_t)(N * prod(L->out_shape, L->out_nd))));
        break;
    }
    case HSI_MOD_GAP:
        if (L->in_nd < 2)
            return HSI_FAIL(HSI_ERR_ARG, "device model: %s needs (C, ...) inputs", mname(m));
        L->c = (int)L->in_shape[0];
        L->s = prod(L->in_shape + 1, L->in_nd - 1);
        L->out_nd = 1;
        break;
    case HSI_MOD_FLATTEN:
        L->alias = 1;
        L->out_nd = 1;
        L->out_shape[0] = L->in_per;
        break;
    case HSI_MOD_RESHAPE: {
        int64_t known = 1, infer = -1;
        L->alias = 1;
        L->out_nd = m->reshape_nd;
        for (int i = 0; i < m->reshape_nd; i++) {
            L->out_shape[i] = m->reshape[i];
            if (m->reshape[i] < 0) infer = i;
            else known *= m->reshape[i];
        }
        if (infer >= 0 && known > 0) L->out_shape[infer] = L->in_per / known;
        if (prod(L->out_shape, L->out_nd) != L->in_per)
            return HSI_FAIL(HSI_ERR_ARG, "device model: %s cannot reshape %lld elements per sample",
                            mname(m), (long long)L->in_per);
        break;
    }
    default:
        return HSI_FAIL(HSI_ERR_UNSUPPORTED,
                        "device model: module %s (kind %d) has no GPU version (supported: conv, "
                        "batch norm, linear, relu, max/avg pool, gap, dropout, flatten, reshape)",
                        mname(m), (int)L->kind);
    }
    L->out_per = prod(L->out_shape, L->out_nd);
cleanup:
    return st;
}

hsi_status hsi_dmodel_create(hsi_dmodel **out, hsi_module *m, int sample_ndim,
                             const int64_t *sample_shape, int64_t max_batch,
                             const hsi_optim_config *cfg, uint64_t seed)
{
    hsi_status st = HSI_OK;
    hsi_dmodel *d = NULL;
    size_t ws_bytes = 0;
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
    HSI_TRY(collect(d, m));
    if (d->nl == 0) {
        st = HSI_FAIL(HSI_ERR_ARG, "device model: the module has no layers");
        goto cleanup;
    }
    d->act = calloc((size_t)d->nl + 1, sizeof(float *));
    d->dact = calloc((size_t)d->nl + 1, sizeof(float *));
    d->own_act = calloc((size_t)d->nl + 1, sizeof(float *));
    d->own_dact = calloc((size_t)d->nl + 1, sizeof(float *));
    if (!d->act || !d->dact || !d->own_act || !d->own_dact) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "device model: out of memory");
        goto cleanup;
    }
    d->arena_n = arena_need(d);
    HSI_TRY(dzeros(&d->arena, 4 * d->arena_n));
    int nd = sample_ndim;
    int64_t shape[HSI_MAX_DIMS] = {0};
    memcpy(shape, sample_shape, sizeof(int64_t) * (size_t)nd);
    for (int i = 0; i < d->nl; i++) {
        dm_layer *L = &d->l[i];
        L->in_nd = nd;
        memcpy(L->in_shape, shape, sizeof shape);
        HSI_TRY(plan_layer(d, L, &ws_bytes));
        nd = L->out_nd;
        memcpy(shape, L->out_shape, sizeof shape);
        if (!L->alias) {
            HSI_TRY(dzeros(&d->own_act[i + 1], max_batch * L->out_per));
            HSI_TRY(dzeros(&d->own_dact[i + 1], max_batch * L->out_per));
        }
    }
    if (nd != 1 || shape[0] < 1) {
        st = HSI_FAIL(HSI_ERR_ARG, "device model: the output must be (classes) per sample, found %d "
                                   "dims", nd);
        goto cleanup;
    }
    d->classes = (int)shape[0];
    d->ws_bytes = ws_bytes ? ws_bytes : 4;
    HSI_TRY(hsi_cuda_malloc(&d->ws, d->ws_bytes));
    snprintf(d->conv_name, sizeof d->conv_name, "gemm");
    HSI_TRY(dzeros(&d->prob, max_batch * d->classes));
    HSI_TRY(dzeros(&d->loss, 2));
    *out = d;
    d = NULL;
cleanup:
    hsi_dmodel_free(d);
    return st;
}

void hsi_dmodel_free(hsi_dmodel *d)
{
    if (!d) return;
    for (int i = 0; i < d->nl; i++) {
        dm_layer *L = &d->l[i];
        float *p[] = {L->rm, L->rv, L->save_mean, L->save_invstd, L->mask}; /* the rest is in the arena */
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
static int auto_dnn_backward(const dm_layer *L) { return L->sp_nd == 2; }

hsi_status hsi_dmodel_set_conv(hsi_dmodel *d, hsi_gpu_conv mode)
{
    hsi_status st = HSI_OK;
    int version = 0, dnn = 0, any_gemm = 0, any_dnn = 0;
    if (mode != HSI_GPU_CONV_AUTO && mode != HSI_GPU_CONV_GEMM && mode != HSI_GPU_CONV_CUDNN)
        return HSI_FAIL(HSI_ERR_ARG, "device model: unknown convolution mode %d", (int)mode);
    if (mode != HSI_GPU_CONV_GEMM) {
        st = hsi_conv_cudnn_available(&version);
        for (int i = 0; st == HSI_OK && i < d->nl; i++) {
            hsi_conv_dims cd;
            if (d->l[i].kind != HSI_MOD_CONV) continue;
            st = conv_dims(&cd, &d->l[i], d->max_batch);
            if (st == HSI_OK && !hsi_conv_cudnn_fits(&cd))
                st = HSI_FAIL(HSI_ERR_UNSUPPORTED, "layer %s at batch %lld has a tensor of 2^31 "
                                                   "elements or more, beyond cuDNN's int sizes",
                              mname(d->l[i].mod), (long long)d->max_batch);
        }
        if (st != HSI_OK && mode == HSI_GPU_CONV_CUDNN)
            return hsi_fail_context(st, "device model: cuDNN convolutions");
        if (st != HSI_OK) hsi_clear_error(); /* AUTO: the gemm ones */
        dnn = st == HSI_OK;
        st = HSI_OK;
    }
    for (int i = 0; i < d->nl; i++) {
        const dm_layer *L = &d->l[i];
        if (L->kind != HSI_MOD_CONV) continue;
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
        if (L->kind != HSI_MOD_CONV) continue;
        L->dnn_fwd = dnn;
        L->dnn_bwd = dnn && (mode == HSI_GPU_CONV_CUDNN || auto_dnn_backward(L));
    }
    if (!any_dnn)
        snprintf(d->conv_name, sizeof d->conv_name, "gemm");
    else
        snprintf(d->conv_name, sizeof d->conv_name, "cudnn %d.%d.%d%s", version / 10000,
                 version / 100 % 100, version % 100, any_gemm ? ", gemm for 3-D backward" : "");
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
        d->act[i + 1] = d->l[i].alias ? d->act[i] : d->own_act[i + 1];
        d->dact[i + 1] = d->l[i].alias ? d->dact[i] : d->own_dact[i + 1];
    }
}

static hsi_status forward(hsi_dmodel *d, int64_t n, int training)
{
    hsi_status st = HSI_OK;
    int i;
    for (i = 0; i < d->nl; i++) {
        dm_layer *L = &d->l[i];
        float *x = d->act[i], *y = d->act[i + 1];
        switch (L->kind) {
        case HSI_MOD_CONV: {
            hsi_conv_dims cd;
            HSI_TRY(conv_dims(&cd, L, n));
            if (L->dnn_fwd) HSI_TRY(hsi_conv_forward_cudnn(y, x, L->w, L->b, &cd));
            else HSI_TRY(hsi_conv_forward_cuda(y, x, L->w, L->b, &cd, d->ws));
            break;
        }
        case HSI_MOD_BATCHNORM:
            HSI_TRY(hsi_bn_forward_cuda(y, L->save_mean, L->save_invstd, L->rm, L->rv, x, L->w, L->b,
                                        (int)n, L->c, L->s, (float)L->mod->eps,
                                        (float)L->mod->momentum, training));
            if (training) L->num_batches++;
            break;
        case HSI_MOD_LINEAR:
            HSI_TRY(hsi_linear_forward_cuda(y, x, L->w, L->b, (int)n, L->mod->in_features,
                                            L->mod->out_features));
            break;
        case HSI_MOD_RELU:
            HSI_TRY(hsi_relu_forward_cuda(y, x, n * L->in_per));
            break;
        case HSI_MOD_DROPOUT: {
            double p = training ? L->mod->p : 0.0;
            uint64_t key = d->seed + (uint64_t)d->calls * 0x100000001B3ull + (uint64_t)i;
            HSI_TRY(hsi_dropout_forward_cuda(y, L->mask, x, n * L->in_per, p, key));
            break;
        }
        case HSI_MOD_MAXPOOL:
        case HSI_MOD_AVGPOOL: {
            hsi_pool_dims pd;
            HSI_TRY(pool_dims(&pd, L, n));
            HSI_TRY(hsi_pool_forward_cuda(y, L->argmax, x, &pd));
            break;
        }
        case HSI_MOD_GAP:
            HSI_TRY(hsi_gap_forward_cuda(y, x, (int)n, L->c, L->s));
            break;
        default: /* flatten, reshape: aliases */
            break;
        }
    }
cleanup:
    if (st != HSI_OK && i < d->nl) hsi_fail_context(st, "device model, layer %s", mname(d->l[i].mod));
    return st;
}

hsi_status hsi_dmodel_forward_backward(hsi_dmodel *d, const float *x, const int32_t *y, int64_t n)
{
    hsi_status st = HSI_OK;
    if (n < 1 || n > d->max_batch)
        return HSI_FAIL(HSI_ERR_ARG, "device model: batch of %lld samples (1..%lld)", (long long)n,
                        (long long)d->max_batch);
    bind(d, x);
    /* gradients accumulate: start from zero */
    for (int i = 1; i <= d->nl; i++)
        if (d->own_dact[i])
            HSI_TRY(hsi_cuda_memset(d->own_dact[i], 0, sizeof(float) * (size_t)(n * d->l[i - 1].out_per)));
    if (d->arena_n) HSI_TRY(hsi_cuda_memset(d->arena + d->arena_n, 0, sizeof(float) * (size_t)d->arena_n));
    HSI_TRY(forward(d, n, 1));
    d->calls++;
    d->last_n = n;
    float *logits = d->act[d->nl];
    HSI_TRY(hsi_cross_entropy_forward_cuda(d->loss, d->loss + 1, d->prob, logits, y, NULL, n,
                                           d->classes, 0.0, -100));
    HSI_TRY(hsi_cross_entropy_backward_cuda(d->dact[d->nl], NULL, d->loss + 1, d->prob, y, NULL, n,
                                            d->classes, 0.0, -100));
    for (int i = d->nl - 1; i >= 0; i--) {
        dm_layer *L = &d->l[i];
        float *xi = d->act[i], *yi = d->act[i + 1], *dy = d->dact[i + 1], *dx = d->dact[i];
        switch (L->kind) {
        case HSI_MOD_CONV: {
            hsi_conv_dims cd;
            HSI_TRY(conv_dims(&cd, L, n));
            if (L->dnn_bwd) HSI_TRY(hsi_conv_backward_cudnn(dx, L->dw, L->db, dy, xi, L->w, &cd));
            else HSI_TRY(hsi_conv_backward_cuda(dx, L->dw, L->db, dy, xi, L->w, &cd, d->ws));
            break;
        }
        case HSI_MOD_BATCHNORM:
            HSI_TRY(hsi_bn_backward_cuda(dx, L->dw, L->db, dy, xi, L->w, L->save_mean,
                                         L->save_invstd, (int)n, L->c, L->s, 1));
            break;
        case HSI_MOD_LINEAR:
            HSI_TRY(hsi_linear_backward_cuda(dx, L->dw, L->db, dy, xi, L->w, (int)n,
                                             L->mod->in_features, L->mod->out_features));
            break;
        case HSI_MOD_RELU:
            if (dx) HSI_TRY(hsi_relu_backward_cuda(dx, dy, yi, n * L->in_per));
            break;
        case HSI_MOD_DROPOUT:
            if (dx) HSI_TRY(hsi_dropout_backward_cuda(dx, dy, L->mask, n * L->in_per));
            break;
        case HSI_MOD_MAXPOOL:
        case HSI_MOD_AVGPOOL:
            if (dx) {
                hsi_pool_dims pd;
                HSI_TRY(pool_dims(&pd, L, n));
                HSI_TRY(hsi_pool_backward_cuda(dx, dy, L->argmax, &pd));
            }
            break;
        case HSI_MOD_GAP:
            if (dx) HSI_TRY(hsi_gap_backward_cuda(dx, dy, (int)n, L->c, L->s));
            break;
        default:
            break;
        }
    }
cleanup:
    return st;
}

hsi_status hsi_dmodel_optim_step(hsi_dmodel *d)
{
    hsi_status st = HSI_OK;
    d->step++;
    /* the whole arena at once: the same operations per element as one
     * launch per tensor (the zero gaps stay zero) */
    if (d->arena_n)
        HSI_TRY(hsi_adam_step_cuda(d->arena, d->arena + d->arena_n, d->arena + 2 * d->arena_n,
                                   d->arena + 3 * d->arena_n, d->arena_n, &d->cfg, d->step));
cleanup:
    return st;
}

hsi_status hsi_dmodel_train_step(hsi_dmodel *d, const float *x, const int32_t *y, int64_t n)
{
    hsi_status st = hsi_dmodel_forward_backward(d, x, y, n);
    if (st == HSI_OK) st = hsi_dmodel_optim_step(d);
    return st;
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
    bind(d, x);
    hsi_status st = forward(d, n, 0);
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

hsi_status hsi_dmodel_to_host(hsi_dmodel *d, hsi_module *m, int with_grads)
{
    hsi_status st = HSI_OK;
    hsi_dmodel probe;
    memset(&probe, 0, sizeof probe);
    HSI_TRY(collect(&probe, m));
    if (probe.nl != d->nl) {
        st = HSI_FAIL(HSI_ERR_ARG, "device model: the module has %d layers, the device model %d",
                      probe.nl, d->nl);
        goto cleanup;
    }
    HSI_TRY(hsi_cuda_sync());
    for (int i = 0; i < d->nl; i++) {
        dm_layer *L = &d->l[i];
        hsi_module *h = probe.l[i].mod;
        if (h->kind != L->kind) {
            st = HSI_FAIL(HSI_ERR_ARG, "device model: layer %d is %s here, another kind on the device",
                          i, mname(h));
            goto cleanup;
        }
        if (L->nw) {
            HSI_TRY(download(h->tensors[0].t, L->w));
            if (with_grads) HSI_TRY(download_grad(h->tensors[0].t, L->dw));
        }
        if (L->nb) {
            HSI_TRY(download(h->tensors[1].t, L->b));
            if (with_grads) HSI_TRY(download_grad(h->tensors[1].t, L->db));
        }
        if (L->kind == HSI_MOD_BATCHNORM) {
            HSI_TRY(download(h->tensors[2].t, L->rm));
            HSI_TRY(download(h->tensors[3].t, L->rv));
            *(int64_t *)hsi_tensor_ptr(h->tensors[4].t) = L->num_batches;
        }
    }
cleanup:
    free(probe.l);
    return st;
}

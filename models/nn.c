/* nn.c — modules: construction, naming, forward, train/eval, state lists,
 * seeded initialisation, and the model zoo of the training issue (cnn2d,
 * hybridsn, cnn1d). Not the ops (ops.c, ops_layers.c). */
#include "models/nn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/tensor_impl.h"

static hsi_status module_alloc(hsi_module **out, hsi_module_kind kind)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory allocating a module");
    (*out)->kind = kind;
    (*out)->training = 1;
    return HSI_OK;
}

static hsi_status add_tensor(hsi_module *m, const char *name, hsi_dtype dt, int ndim,
                             const int64_t *shape, int is_buffer)
{
    hsi_named_tensor *nt = realloc(m->tensors, sizeof *nt * (size_t)(m->n_tensors + 1));
    if (!nt) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    m->tensors = nt;
    hsi_named_tensor *e = &nt[m->n_tensors];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->is_buffer = is_buffer;
    hsi_status st = hsi_tensor_new(&e->t, dt, ndim, shape, !is_buffer);
    if (st != HSI_OK) return st;
    m->n_tensors++;
    return HSI_OK;
}

static hsi_tensor *own(hsi_module *m, const char *local)
{
    const char *dot;
    for (int i = 0; i < m->n_tensors; i++) {
        dot = strrchr(m->tensors[i].name, '.');
        if (!strcmp(dot ? dot + 1 : m->tensors[i].name, local)) return m->tensors[i].t;
    }
    return NULL;
}

hsi_status hsi_sequential_new(hsi_module **out) { return module_alloc(out, HSI_MOD_SEQUENTIAL); }

hsi_status hsi_conv_new(hsi_module **out, hsi_dtype dt, int nd, int in_ch, int out_ch,
                        const int *ker, const int *stride, const int *pad, int bias)
{
    hsi_status st = HSI_OK;
    if (nd != 2 && nd != 3) return HSI_FAIL(HSI_ERR_ARG, "conv: nd must be 2 or 3 (got %d)", nd);
    if (in_ch < 1 || out_ch < 1)
        return HSI_FAIL(HSI_ERR_ARG, "conv: channels must be >= 1 (got %d -> %d)", in_ch, out_ch);
    HSI_TRY(module_alloc(out, HSI_MOD_CONV));
    hsi_module *m = *out;
    m->nd = nd;
    int64_t ws[5] = {out_ch, in_ch}, bs[1] = {out_ch};
    for (int k = 0; k < nd; k++) {
        if (ker[k] < 1 || stride[k] < 1 || pad[k] < 0) {
            st = HSI_FAIL(HSI_ERR_ARG, "conv: kernel/stride must be >= 1 and pad >= 0 (axis %d: "
                                       "%d/%d/%d)", k, ker[k], stride[k], pad[k]);
            goto cleanup;
        }
        m->ker[k] = ker[k];
        m->stride[k] = stride[k];
        m->pad[k] = pad[k];
        ws[2 + k] = ker[k];
    }
    m->in_features = in_ch;
    m->out_features = out_ch;
    HSI_TRY(add_tensor(m, "weight", dt, nd + 2, ws, 0));
    if (bias) HSI_TRY(add_tensor(m, "bias", dt, 1, bs, 0));
    return HSI_OK;
cleanup:
    hsi_module_free(*out);
    *out = NULL;
    return st;
}

hsi_status hsi_batchnorm_new(hsi_module **out, hsi_dtype dt, int channels, double momentum,
                             double eps)
{
    hsi_status st = HSI_OK;
    if (channels < 1) return HSI_FAIL(HSI_ERR_ARG, "batchnorm: channels must be >= 1");
    HSI_TRY(module_alloc(out, HSI_MOD_BATCHNORM));
    hsi_module *m = *out;
    m->momentum = momentum;
    m->eps = eps;
    m->out_features = channels;
    int64_t cs[1] = {channels};
    HSI_TRY(add_tensor(m, "weight", dt, 1, cs, 0));
    HSI_TRY(add_tensor(m, "bias", dt, 1, cs, 0));
    HSI_TRY(add_tensor(m, "running_mean", dt, 1, cs, 1));
    HSI_TRY(add_tensor(m, "running_var", dt, 1, cs, 1));
    HSI_TRY(add_tensor(m, "num_batches_tracked", HSI_I64, 0, cs, 1));
    return HSI_OK;
cleanup:
    hsi_module_free(*out);
    *out = NULL;
    return st;
}

hsi_status hsi_linear_new(hsi_module **out, hsi_dtype dt, int in_features, int out_features,
                          int bias)
{
    hsi_status st = HSI_OK;
    if (in_features < 1 || out_features < 1)
        return HSI_FAIL(HSI_ERR_ARG, "linear: features must be >= 1 (got %d -> %d)", in_features,
                        out_features);
    HSI_TRY(module_alloc(out, HSI_MOD_LINEAR));
    hsi_module *m = *out;
    m->in_features = in_features;
    m->out_features = out_features;
    int64_t ws[2] = {out_features, in_features}, bs[1] = {out_features};
    HSI_TRY(add_tensor(m, "weight", dt, 2, ws, 0));
    if (bias) HSI_TRY(add_tensor(m, "bias", dt, 1, bs, 0));
    return HSI_OK;
cleanup:
    hsi_module_free(*out);
    *out = NULL;
    return st;
}

hsi_status hsi_activation_new(hsi_module **out, hsi_module_kind kind, double slope)
{
    if (kind != HSI_MOD_RELU && kind != HSI_MOD_LEAKY_RELU && kind != HSI_MOD_GELU &&
        kind != HSI_MOD_SWISH && kind != HSI_MOD_GAP && kind != HSI_MOD_FLATTEN)
        return HSI_FAIL(HSI_ERR_ARG, "activation: kind %d is not a parameter-free layer",
                        (int)kind);
    hsi_status st = module_alloc(out, kind);
    if (st == HSI_OK) (*out)->slope = slope;
    return st;
}

hsi_status hsi_pool_new(hsi_module **out, hsi_module_kind kind, int nd, const int *ker,
                        const int *stride, const int *pad)
{
    if (kind != HSI_MOD_MAXPOOL && kind != HSI_MOD_AVGPOOL)
        return HSI_FAIL(HSI_ERR_ARG, "pool: kind must be MAXPOOL or AVGPOOL");
    if (nd != 2 && nd != 3) return HSI_FAIL(HSI_ERR_ARG, "pool: nd must be 2 or 3 (got %d)", nd);
    hsi_status st = module_alloc(out, kind);
    if (st != HSI_OK) return st;
    (*out)->nd = nd;
    for (int k = 0; k < nd; k++) {
        (*out)->ker[k] = ker[k];
        (*out)->stride[k] = stride ? stride[k] : ker[k];
        (*out)->pad[k] = pad ? pad[k] : 0;
    }
    return HSI_OK;
}

hsi_status hsi_dropout_new(hsi_module **out, double p)
{
    if (!(p >= 0 && p <= 1)) return HSI_FAIL(HSI_ERR_ARG, "dropout: p must be in [0, 1] (got %g)",
                                             p);
    hsi_status st = module_alloc(out, HSI_MOD_DROPOUT);
    if (st == HSI_OK) (*out)->p = p;
    return st;
}

hsi_status hsi_reshape_new(hsi_module **out, int ndim, const int64_t *shape)
{
    if (ndim < 1 || ndim > HSI_MAX_DIMS - 1)
        return HSI_FAIL(HSI_ERR_ARG, "reshape module: ndim %d outside 1..%d", ndim,
                        HSI_MAX_DIMS - 1);
    hsi_status st = module_alloc(out, HSI_MOD_RESHAPE);
    if (st != HSI_OK) return st;
    (*out)->reshape_nd = ndim;
    memcpy((*out)->reshape, shape, sizeof(int64_t) * (size_t)ndim);
    return HSI_OK;
}

static void rename_tree(hsi_module *m, const char *prefix)
{
    if (*prefix)
        snprintf(m->name, sizeof m->name, "%s%s%s", prefix, *m->local ? "." : "", m->local);
    else
        snprintf(m->name, sizeof m->name, "%s", m->local);
    for (int i = 0; i < m->n_tensors; i++) {
        const char *dot = strrchr(m->tensors[i].name, '.');
        char local[HSI_NAME_MAX];
        snprintf(local, sizeof local, "%s", dot ? dot + 1 : m->tensors[i].name);
        snprintf(m->tensors[i].name, sizeof m->tensors[i].name, "%s%s%s", m->name,
                 *m->name ? "." : "", local);
    }
    for (int i = 0; i < m->n_children; i++) rename_tree(m->children[i], m->name);
}

hsi_status hsi_sequential_add(hsi_module *seq, const char *name, hsi_module *child)
{
    if (!child) return HSI_FAIL(HSI_ERR_ARG, "sequential: child is NULL");
    if (seq->kind != HSI_MOD_SEQUENTIAL) {
        hsi_module_free(child);
        return HSI_FAIL(HSI_ERR_ARG, "sequential_add: the parent is not a sequential");
    }
    for (int i = 0; i < seq->n_children; i++)
        if (!strcmp(seq->children[i]->local, name)) {
            hsi_module_free(child);
            return HSI_FAIL(HSI_ERR_ARG, "sequential '%s': a child named '%s' exists already",
                            seq->name, name);
        }
    hsi_module **c = realloc(seq->children, sizeof *c * (size_t)(seq->n_children + 1));
    if (!c) {
        hsi_module_free(child);
        return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    }
    seq->children = c;
    c[seq->n_children++] = child;
    snprintf(child->local, sizeof child->local, "%s", name);
    rename_tree(child, seq->name);
    return HSI_OK;
}

void hsi_module_free(hsi_module *m)
{
    if (!m) return;
    for (int i = 0; i < m->n_children; i++) hsi_module_free(m->children[i]);
    for (int i = 0; i < m->n_tensors; i++) hsi_tensor_free(m->tensors[i].t);
    free(m->children);
    free(m->tensors);
    free(m);
}

void hsi_module_train(hsi_module *m, int on)
{
    m->training = !!on;
    for (int i = 0; i < m->n_children; i++) hsi_module_train(m->children[i], on);
}

static hsi_status forward_leaf(hsi_tensor **out, hsi_module *m, hsi_graph *g, hsi_tensor *x)
{
    switch (m->kind) {
    case HSI_MOD_CONV:
        return hsi_conv(out, g, x, own(m, "weight"), own(m, "bias"), m->nd, m->stride, m->pad);
    case HSI_MOD_BATCHNORM:
        return hsi_batch_norm(out, g, x, own(m, "weight"), own(m, "bias"), own(m, "running_mean"),
                              own(m, "running_var"), own(m, "num_batches_tracked"), m->training,
                              m->momentum, m->eps);
    case HSI_MOD_LINEAR: return hsi_linear(out, g, x, own(m, "weight"), own(m, "bias"));
    case HSI_MOD_RELU: return hsi_relu(out, g, x);
    case HSI_MOD_LEAKY_RELU: return hsi_leaky_relu(out, g, x, m->slope);
    case HSI_MOD_GELU: return hsi_gelu(out, g, x);
    case HSI_MOD_SWISH: return hsi_swish(out, g, x);
    case HSI_MOD_MAXPOOL: return hsi_pool(out, g, x, 0, m->nd, m->ker, m->stride, m->pad);
    case HSI_MOD_AVGPOOL: return hsi_pool(out, g, x, 1, m->nd, m->ker, m->stride, m->pad);
    case HSI_MOD_GAP: return hsi_global_avg_pool(out, g, x);
    case HSI_MOD_DROPOUT: return hsi_dropout(out, g, x, m->p, m->training, NULL);
    case HSI_MOD_FLATTEN: return hsi_flatten(out, g, x);
    case HSI_MOD_RESHAPE: {
        int64_t sh[HSI_MAX_DIMS];
        sh[0] = x->data.shape[0];
        memcpy(sh + 1, m->reshape, sizeof(int64_t) * (size_t)m->reshape_nd);
        return hsi_reshape(out, g, x, m->reshape_nd + 1, sh);
    }
    default: return HSI_FAIL(HSI_ERR_ARG, "module kind %d cannot run", (int)m->kind);
    }
}

/* How many modules from ch[0] on (n left) run as one fused op: conv + eval
 * batch norm + ReLU at inference (3: hsi_conv_bn_relu_eval), batch norm +
 * ReLU (2: hsi_batch_norm_relu), else 1. */
static int fused_span(hsi_module *const *ch, int n)
{
    if (n >= 3 && ch[0]->kind == HSI_MOD_CONV && ch[1]->kind == HSI_MOD_BATCHNORM &&
        !ch[1]->training && ch[2]->kind == HSI_MOD_RELU && !hsi_is_grad_enabled())
        return 3;
    if (n >= 2 && ch[0]->kind == HSI_MOD_BATCHNORM && ch[1]->kind == HSI_MOD_RELU) return 2;
    return 1;
}

/* span leaf modules from ch[0] as one op (fused_span), recorded under the
 * first one's name; an error names that layer */
static hsi_status forward_span(hsi_tensor **out, hsi_module *const *ch, int span, hsi_graph *g,
                               hsi_tensor *x)
{
    hsi_module *c = ch[0];
    const char *prev = hsi_set_layer_name(c->name);
    hsi_status st;
    if (span == 3)
        st = hsi_conv_bn_relu_eval(out, g, x, own(c, "weight"), own(c, "bias"), c->nd, c->stride,
                                   c->pad, own(ch[1], "weight"), own(ch[1], "bias"),
                                   own(ch[1], "running_mean"), own(ch[1], "running_var"),
                                   ch[1]->eps);
    else if (span == 2)
        st = hsi_batch_norm_relu(out, g, x, own(c, "weight"), own(c, "bias"),
                                 own(c, "running_mean"), own(c, "running_var"),
                                 own(c, "num_batches_tracked"), c->training, c->momentum, c->eps);
    else
        st = forward_leaf(out, c, g, x);
    hsi_set_layer_name(prev);
    if (st != HSI_OK && !strstr(hsi_last_error(), "anomaly"))
        hsi_fail_context(st, "layer '%s'", c->name);
    return st;
}

hsi_status hsi_module_forward(hsi_tensor **out, hsi_module *m, hsi_graph *g, hsi_tensor *x)
{
    hsi_status st = HSI_OK;
    if (m->kind != HSI_MOD_SEQUENTIAL) return forward_span(out, &m, 1, g, x);
    hsi_tensor *h = x;
    for (int i = 0, span; i < m->n_children; i += span) {
        span = fused_span(m->children + i, m->n_children - i);
        if (span == 1)
            HSI_TRY(hsi_module_forward(&h, m->children[i], g, h));
        else
            HSI_TRY(forward_span(&h, m->children + i, span, g, h));
    }
    *out = h;
cleanup:
    return st;
}

static hsi_status collect(hsi_module *m, hsi_named_tensor **arr, int *n, int *cap, int params_only)
{
    for (int i = 0; i < m->n_tensors; i++) {
        if (params_only && m->tensors[i].is_buffer) continue;
        if (*n == *cap) {
            int nc = *cap ? *cap * 2 : 16;
            hsi_named_tensor *a = realloc(*arr, sizeof *a * (size_t)nc);
            if (!a) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            *arr = a;
            *cap = nc;
        }
        (*arr)[(*n)++] = m->tensors[i];
    }
    for (int i = 0; i < m->n_children; i++) {
        hsi_status st = collect(m->children[i], arr, n, cap, params_only);
        if (st != HSI_OK) return st;
    }
    return HSI_OK;
}

hsi_status hsi_module_state(hsi_module *m, hsi_named_tensor **out, int *n)
{
    int cap = 0;
    *out = NULL;
    *n = 0;
    hsi_status st = collect(m, out, n, &cap, 0);
    if (st != HSI_OK) {
        free(*out);
        *out = NULL;
    }
    return st;
}

hsi_status hsi_module_params(hsi_module *m, hsi_named_tensor **out, int *n)
{
    int cap = 0;
    *out = NULL;
    *n = 0;
    hsi_status st = collect(m, out, n, &cap, 1);
    if (st != HSI_OK) {
        free(*out);
        *out = NULL;
    }
    return st;
}

int64_t hsi_module_param_count(hsi_module *m)
{
    int64_t c = 0;
    for (int i = 0; i < m->n_tensors; i++)
        if (!m->tensors[i].is_buffer) c += hsi_tensor_count(m->tensors[i].t);
    for (int i = 0; i < m->n_children; i++) c += hsi_module_param_count(m->children[i]);
    return c;
}

hsi_tensor *hsi_module_find(hsi_module *m, const char *full_name)
{
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, full_name)) return m->tensors[i].t;
    for (int i = 0; i < m->n_children; i++) {
        hsi_tensor *t = hsi_module_find(m->children[i], full_name);
        if (t) return t;
    }
    return NULL;
}

void hsi_module_zero_grad(hsi_module *m)
{
    for (int i = 0; i < m->n_tensors; i++) hsi_tensor_zero_grad(m->tensors[i].t);
    for (int i = 0; i < m->n_children; i++) hsi_module_zero_grad(m->children[i]);
}

/* ------------------------------------------------- layer description */

static int64_t shape_prod(const int64_t *s, int n)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++) p *= s[i];
    return p;
}

const char *hsi_module_label(const hsi_module *m) { return m->name[0] ? m->name : "(root)"; }

hsi_status hsi_layer_conv_dims(hsi_conv_dims *cd, const hsi_layer *L, int n)
{
    const hsi_module *m = L->mod;
    if (m->kind != HSI_MOD_CONV)
        return HSI_FAIL(HSI_ERR_ARG, "layer '%s' is not a convolution", hsi_module_label(m));
    return hsi_conv_dims_init(cd, L->sp_nd, n, L->c, L->k, L->sp_in, m->ker, m->stride, m->pad);
}

hsi_status hsi_layer_pool_dims(hsi_pool_dims *pd, const hsi_layer *L, int n)
{
    const hsi_module *m = L->mod;
    if (m->kind != HSI_MOD_MAXPOOL && m->kind != HSI_MOD_AVGPOOL)
        return HSI_FAIL(HSI_ERR_ARG, "layer '%s' is not a pooling layer", hsi_module_label(m));
    return hsi_pool_dims_init(pd, m->kind == HSI_MOD_MAXPOOL ? HSI_POOL_MAX : HSI_POOL_AVG, L->sp_nd,
                              n, L->c, L->sp_in, m->ker, m->stride, m->pad);
}

/* L's output shape from its input shape (set by the caller), with the rules
 * of the CPU ops (the same checks, said per sample). */
static hsi_status plan_shape(hsi_layer *L)
{
    hsi_status st = HSI_OK;
    hsi_module *m = L->mod;
    char got[160];
    hsi_eng_shape_str(got, sizeof got, L->in_nd, L->in_shape);
    L->in_per = shape_prod(L->in_shape, L->in_nd);
    L->out_nd = L->in_nd;
    memcpy(L->out_shape, L->in_shape, sizeof L->out_shape);
    switch (m->kind) {
    case HSI_MOD_CONV:
    case HSI_MOD_MAXPOOL:
    case HSI_MOD_AVGPOOL: {
        int conv = m->kind == HSI_MOD_CONV;
        int64_t want_c = conv ? m->tensors[0].t->data.shape[1] : L->in_shape[0];
        if (L->in_nd != m->nd + 1 || L->in_shape[0] != want_c) {
            char c[32] = "C";
            if (conv) snprintf(c, sizeof c, "%lld", (long long)want_c);
            return HSI_FAIL(HSI_ERR_ARG, "layer '%s' (%s %d-D) expects (%s, %d spatial dims) per "
                                         "sample, gets %s", hsi_module_label(m), conv ? "conv" : "pool",
                            m->nd, c, m->nd, got);
        }
        L->sp_nd = m->nd;
        L->c = (int)L->in_shape[0];
        for (int i = 0; i < m->nd; i++) L->sp_in[i] = (int)L->in_shape[1 + i];
        const int *out;
        hsi_conv_dims cd;
        hsi_pool_dims pd;
        if (conv) {
            L->k = (int)m->tensors[0].t->data.shape[0];
            L->out_shape[0] = L->k;
            st = hsi_layer_conv_dims(&cd, L, 1);
            out = cd.out;
        } else {
            st = hsi_layer_pool_dims(&pd, L, 1);
            out = pd.out;
        }
        if (st != HSI_OK) return hsi_fail_context(st, "layer '%s' on %s", hsi_module_label(m), got);
        for (int i = 0; i < m->nd; i++) L->out_shape[1 + i] = out[i];
        break;
    }
    case HSI_MOD_BATCHNORM:
    case HSI_MOD_GAP:
        if (L->in_nd < (m->kind == HSI_MOD_GAP ? 2 : 1) ||
            (m->kind == HSI_MOD_BATCHNORM && L->in_shape[0] != m->out_features))
            return HSI_FAIL(HSI_ERR_ARG, "layer '%s' (%s) expects (C%s, ...) per sample, gets %s",
                            hsi_module_label(m), m->kind == HSI_MOD_GAP ? "global average pool" : "batch norm",
                            m->kind == HSI_MOD_GAP ? "" : " = channels", got);
        L->c = (int)L->in_shape[0];
        L->s = shape_prod(L->in_shape + 1, L->in_nd - 1);
        if (m->kind == HSI_MOD_GAP) L->out_nd = 1;
        break;
    case HSI_MOD_LINEAR:
        if (L->in_nd != 1 || L->in_shape[0] != m->in_features)
            return HSI_FAIL(HSI_ERR_ARG, "layer '%s' (linear) expects (%d) per sample, gets %s",
                            hsi_module_label(m), m->in_features, got);
        L->out_shape[0] = m->out_features;
        break;
    case HSI_MOD_RELU:
    case HSI_MOD_LEAKY_RELU:
    case HSI_MOD_GELU:
    case HSI_MOD_SWISH:
    case HSI_MOD_DROPOUT: break;
    case HSI_MOD_FLATTEN:
        L->alias = 1;
        L->out_nd = 1;
        L->out_shape[0] = L->in_per;
        break;
    case HSI_MOD_RESHAPE: {
        int64_t known = 1;
        int infer = -1;
        L->alias = 1;
        L->out_nd = m->reshape_nd;
        for (int i = 0; i < m->reshape_nd; i++) {
            L->out_shape[i] = m->reshape[i];
            if (m->reshape[i] < 0) infer = i;
            else known *= m->reshape[i];
        }
        if (infer >= 0 && known > 0) L->out_shape[infer] = L->in_per / known;
        if (shape_prod(L->out_shape, L->out_nd) != L->in_per)
        {
            char want[160];
            return HSI_FAIL(HSI_ERR_ARG, "layer '%s' (reshape) cannot make %s of %s", hsi_module_label(m),
                            hsi_eng_shape_str(want, sizeof want, m->reshape_nd, m->reshape), got);
        }
        break;
    }
    default:
        return HSI_FAIL(HSI_ERR_ARG, "layer '%s': module kind %d cannot run", hsi_module_label(m),
                        (int)m->kind);
    }
    L->out_per = shape_prod(L->out_shape, L->out_nd);
    return HSI_OK;
}

static hsi_status push_leaves(hsi_layer **arr, int *n, int *cap, hsi_module *m)
{
    if (m->kind == HSI_MOD_SEQUENTIAL) {
        for (int i = 0; i < m->n_children; i++) {
            hsi_status st = push_leaves(arr, n, cap, m->children[i]);
            if (st != HSI_OK) return st;
        }
        return HSI_OK;
    }
    if (*n == *cap) {
        int nc = *cap ? 2 * *cap : 16;
        hsi_layer *a = realloc(*arr, sizeof *a * (size_t)nc);
        if (!a) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory listing the layers");
        *arr = a;
        *cap = nc;
    }
    memset(&(*arr)[*n], 0, sizeof **arr);
    (*arr)[(*n)++].mod = m;
    return HSI_OK;
}

hsi_status hsi_module_layers(hsi_layer **out, int *n, hsi_module *m, int sample_nd,
                             const int64_t *sample_shape)
{
    hsi_status st = HSI_OK;
    hsi_layer *l = NULL;
    int nl = 0, cap = 0;
    *out = NULL;
    *n = 0;
    if (!m || sample_nd < 1 || sample_nd > HSI_MAX_DIMS - 1)
        return HSI_FAIL(HSI_ERR_ARG, "module layers: needs a module and a per-sample shape of "
                                     "1..%d dims (got %d)", HSI_MAX_DIMS - 1, sample_nd);
    HSI_TRY(push_leaves(&l, &nl, &cap, m));
    if (nl == 0) {
        st = HSI_FAIL(HSI_ERR_ARG, "module layers: the module has no layers");
        goto cleanup;
    }
    for (int i = 0; i < nl; i++) {
        hsi_layer *L = &l[i];
        L->in_nd = i ? l[i - 1].out_nd : sample_nd;
        memcpy(L->in_shape, i ? l[i - 1].out_shape : sample_shape,
               sizeof(int64_t) * (size_t)L->in_nd);
        HSI_TRY(plan_shape(L));
    }
    *out = l;
    *n = nl;
    l = NULL;
cleanup:
    free(l);
    return st;
}

/* ------------------------------------------------------------ init */

static void fill(hsi_tensor *t, hsi_rng *r, int normal, double a)
{
    int64_t n = hsi_tensor_count(t);
    int f32 = t->data.dtype == HSI_F32;
    void *p = hsi_tensor_ptr(t);
    for (int64_t i = 0; i < n; i++) {
        double v = normal ? a * hsi_rng_normal(r) : a * (2 * hsi_rng_uniform(r) - 1);
        if (f32)
            ((float *)p)[i] = (float)v;
        else
            ((double *)p)[i] = v;
    }
}

static void set_const(hsi_tensor *t, double v)
{
    int64_t n = hsi_tensor_count(t);
    void *p = hsi_tensor_ptr(t);
    for (int64_t i = 0; i < n; i++) {
        if (t->data.dtype == HSI_F32)
            ((float *)p)[i] = (float)v;
        else if (t->data.dtype == HSI_F64)
            ((double *)p)[i] = v;
        else if (t->data.dtype == HSI_I64)
            ((int64_t *)p)[i] = (int64_t)v;
    }
}

static void init_rec(hsi_module *m, hsi_init scheme, hsi_rng *r)
{
    hsi_tensor *w = own(m, "weight"), *b = own(m, "bias");
    if (m->kind == HSI_MOD_CONV || m->kind == HSI_MOD_LINEAR) {
        int64_t rf = 1;
        for (int k = 2; k < w->data.ndim; k++) rf *= w->data.shape[k];
        double fan_in = (double)(w->data.shape[1] * rf), fan_out = (double)(w->data.shape[0] * rf);
        switch (scheme) {
        case HSI_INIT_TORCH: fill(w, r, 0, 1.0 / sqrt(fan_in)); break; /* kaiming_uniform(a=sqrt5) */
        case HSI_INIT_KAIMING_NORMAL: fill(w, r, 1, sqrt(2.0 / fan_in)); break;
        case HSI_INIT_KAIMING_UNIFORM: fill(w, r, 0, sqrt(6.0 / fan_in)); break;
        case HSI_INIT_XAVIER_NORMAL: fill(w, r, 1, sqrt(2.0 / (fan_in + fan_out))); break;
        default: fill(w, r, 0, sqrt(6.0 / (fan_in + fan_out))); break;
        }
        if (b) {
            if (scheme == HSI_INIT_TORCH)
                fill(b, r, 0, 1.0 / sqrt(fan_in));
            else
                set_const(b, 0);
        }
    } else if (m->kind == HSI_MOD_BATCHNORM) {
        set_const(w, 1);
        set_const(b, 0);
        set_const(own(m, "running_mean"), 0);
        set_const(own(m, "running_var"), 1);
        set_const(own(m, "num_batches_tracked"), 0);
    }
    for (int i = 0; i < m->n_children; i++) init_rec(m->children[i], scheme, r);
}

void hsi_module_init(hsi_module *m, hsi_init scheme, uint64_t seed)
{
    hsi_rng r;
    hsi_rng_seed(&r, seed);
    init_rec(m, scheme, &r);
}

/* ------------------------------------------------------------ models */

static const hsi_model_spec models[] = {
    {"cnn2d", "2-D CNN on (K, P, P) patches: 3 conv+BN+ReLU, max-pool, GAP, dropout, linear"},
    {"hybridsn", "HybridSN (Roy et al. 2019): 3 3-D convs, a 2-D conv, FC 256/128 with dropout"},
    {"cnn1d", "spectral-only 1-D CNN baseline on (K) spectra"},
    {NULL, NULL}};

const hsi_model_spec *hsi_model_list(void) { return models; }

int hsi_model_input_shape(const char *name, int batch, int bands, int patch, int64_t *shape)
{
    shape[0] = batch;
    if (!strcmp(name, "hybridsn")) {
        shape[1] = 1, shape[2] = bands, shape[3] = patch, shape[4] = patch;
        return 5;
    }
    if (!strcmp(name, "cnn1d")) {
        shape[1] = bands;
        return 2;
    }
    shape[1] = bands, shape[2] = patch, shape[3] = patch;
    return 4;
}

#define ADD(seq, nm, expr)                                                                     \
    do {                                                                                       \
        hsi_module *c_ = NULL;                                                                 \
        HSI_TRY(expr);                                                                         \
        HSI_TRY(hsi_sequential_add(seq, nm, c_));                                              \
    } while (0)

static hsi_status conv_bn_relu(hsi_module *seq, int *idx, hsi_dtype dt, int nd, int cin,
                               int cout, const int *ker, const int *pad)
{
    hsi_status st = HSI_OK;
    int one[3] = {1, 1, 1};
    char nm[3][8];
    for (int i = 0; i < 3; i++) snprintf(nm[i], sizeof nm[i], "%d", (*idx)++);
    ADD(seq, nm[0], hsi_conv_new(&c_, dt, nd, cin, cout, ker, one, pad, 1));
    ADD(seq, nm[1], hsi_batchnorm_new(&c_, dt, cout, 0.1, 1e-5));
    ADD(seq, nm[2], hsi_activation_new(&c_, HSI_MOD_RELU, 0));
cleanup:
    return st;
}

static hsi_status build_cnn2d(hsi_module *root, int bands, int classes, hsi_dtype dt)
{
    hsi_status st = HSI_OK;
    hsi_module *f = NULL;
    int k3[2] = {3, 3}, p1[2] = {1, 1}, k2[2] = {2, 2}, idx = 0;
    HSI_TRY(hsi_sequential_new(&f));
    HSI_TRY(hsi_sequential_add(root, "features", f));
    HSI_TRY(conv_bn_relu(f, &idx, dt, 2, bands, 64, k3, p1));
    HSI_TRY(conv_bn_relu(f, &idx, dt, 2, 64, 64, k3, p1));
    ADD(f, "6", hsi_pool_new(&c_, HSI_MOD_MAXPOOL, 2, k2, k2, NULL));
    idx = 7;
    HSI_TRY(conv_bn_relu(f, &idx, dt, 2, 64, 128, k3, p1));
    ADD(root, "pool", hsi_activation_new(&c_, HSI_MOD_GAP, 0));
    ADD(root, "dropout", hsi_dropout_new(&c_, 0.3));
    ADD(root, "classifier", hsi_linear_new(&c_, dt, 128, classes, 1));
cleanup:
    return st;
}

static hsi_status build_hybridsn(hsi_module *root, int bands, int patch, int classes,
                                 hsi_dtype dt)
{
    hsi_status st = HSI_OK;
    hsi_module *f = NULL, *c = NULL;
    int one[3] = {1, 1, 1}, zero[3] = {0, 0, 0}, k2[2] = {3, 3};
    int ks[3][3] = {{7, 3, 3}, {5, 3, 3}, {3, 3, 3}}, ch[4] = {1, 8, 16, 32};
    int d = bands, s = patch;
    for (int i = 0; i < 3; i++) d -= ks[i][0] - 1, s -= 2;
    if (d < 1 || s - 2 < 1)
        return HSI_FAIL(HSI_ERR_ARG, "hybridsn: %d bands and %dx%d patches are too small (needs "
                                     ">= 16 bands and >= 9x9)", bands, patch, patch);
    HSI_TRY(hsi_sequential_new(&f));
    HSI_TRY(hsi_sequential_add(root, "features", f));
    for (int i = 0; i < 3; i++) {
        char a[4], b[4];
        snprintf(a, sizeof a, "%d", 2 * i);
        snprintf(b, sizeof b, "%d", 2 * i + 1);
        ADD(f, a, hsi_conv_new(&c_, dt, 3, ch[i], ch[i + 1], ks[i], one, zero, 1));
        ADD(f, b, hsi_activation_new(&c_, HSI_MOD_RELU, 0));
    }
    int64_t rs[3] = {32 * d, s, s};
    ADD(f, "6", hsi_reshape_new(&c_, 3, rs));
    ADD(f, "7", hsi_conv_new(&c_, dt, 2, 32 * d, 64, k2, one, zero, 1));
    ADD(f, "8", hsi_activation_new(&c_, HSI_MOD_RELU, 0));
    ADD(f, "9", hsi_activation_new(&c_, HSI_MOD_FLATTEN, 0));
    HSI_TRY(hsi_sequential_new(&c));
    HSI_TRY(hsi_sequential_add(root, "classifier", c));
    ADD(c, "0", hsi_linear_new(&c_, dt, 64 * (s - 2) * (s - 2), 256, 1));
    ADD(c, "1", hsi_activation_new(&c_, HSI_MOD_RELU, 0));
    ADD(c, "2", hsi_dropout_new(&c_, 0.4));
    ADD(c, "3", hsi_linear_new(&c_, dt, 256, 128, 1));
    ADD(c, "4", hsi_activation_new(&c_, HSI_MOD_RELU, 0));
    ADD(c, "5", hsi_dropout_new(&c_, 0.4));
    ADD(c, "6", hsi_linear_new(&c_, dt, 128, classes, 1));
cleanup:
    return st;
}

static hsi_status build_cnn1d(hsi_module *root, int bands, int classes, hsi_dtype dt)
{
    hsi_status st = HSI_OK;
    hsi_module *f = NULL;
    int k7[2] = {1, 7}, p3[2] = {0, 3}, k5[2] = {1, 5}, p2[2] = {0, 2}, kp[2] = {1, 2}, idx = 1;
    if (bands < 2) return HSI_FAIL(HSI_ERR_ARG, "cnn1d: needs >= 2 bands (got %d)", bands);
    HSI_TRY(hsi_sequential_new(&f));
    HSI_TRY(hsi_sequential_add(root, "features", f));
    int64_t rs[3] = {1, 1, bands};
    ADD(f, "0", hsi_reshape_new(&c_, 3, rs));
    HSI_TRY(conv_bn_relu(f, &idx, dt, 2, 1, 32, k7, p3));
    ADD(f, "4", hsi_pool_new(&c_, HSI_MOD_MAXPOOL, 2, kp, kp, NULL));
    idx = 5;
    HSI_TRY(conv_bn_relu(f, &idx, dt, 2, 32, 64, k5, p2));
    ADD(root, "pool", hsi_activation_new(&c_, HSI_MOD_GAP, 0));
    ADD(root, "dropout", hsi_dropout_new(&c_, 0.3));
    ADD(root, "classifier", hsi_linear_new(&c_, dt, 64, classes, 1));
cleanup:
    return st;
}

hsi_status hsi_model_create(hsi_module **out, const char *name, int bands, int patch, int classes,
                            hsi_dtype dt, uint64_t seed)
{
    hsi_status st = HSI_OK;
    hsi_module *root = NULL;
    *out = NULL;
    if (bands < 1 || patch < 1 || classes < 2)
        return HSI_FAIL(HSI_ERR_ARG, "model %s: bands %d, patch %d, classes %d (need >= 1, >= 1, "
                                     ">= 2)", name, bands, patch, classes);
    HSI_TRY(hsi_sequential_new(&root));
    if (!strcmp(name, "cnn2d")) {
        if (patch < 2) {
            st = HSI_FAIL(HSI_ERR_ARG, "cnn2d: patch must be >= 2 (max-pool 2x2), got %d", patch);
            goto cleanup;
        }
        HSI_TRY(build_cnn2d(root, bands, classes, dt));
    } else if (!strcmp(name, "hybridsn")) {
        HSI_TRY(build_hybridsn(root, bands, patch, classes, dt));
    } else if (!strcmp(name, "cnn1d")) {
        HSI_TRY(build_cnn1d(root, bands, classes, dt));
    } else {
        st = HSI_FAIL(HSI_ERR_NOT_FOUND, "unknown model '%s' (known: cnn2d, hybridsn, cnn1d)",
                      name);
        goto cleanup;
    }
    hsi_module_init(root, HSI_INIT_TORCH, seed);
    *out = root;
    return HSI_OK;
cleanup:
    hsi_module_free(root);
    return st;
}

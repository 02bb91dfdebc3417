/* test_autograd.c — the engine against central finite differences in
 * double (every op, packed and strided inputs, every option) and its
 * semantics: leaf/non-leaf grads, accumulation, the double-backward error,
 * no-grad mode, views vs copies, anomaly mode, steady-state memory. */
#include "test.h"

#include "models/tensor.h"

/* ----------------------------------------------------------- helpers */

static hsi_rng trng;

/* Leaf double tensor with values from the test RNG in [-1, 1) * scale;
 * strided = 1 makes it a step-2 slice of a wider buffer (not packed). */
static hsi_tensor *leaf(int ndim, const int64_t *shape, int strided, double scale)
{
    hsi_tensor *t = NULL;
    if (!strided) {
        hsi_tensor_new(&t, HSI_F64, ndim, shape, 1);
    } else {
        int64_t wide[HSI_MAX_DIMS];
        for (int k = 0; k < ndim; k++) wide[k] = shape[k];
        wide[ndim - 1] *= 2;
        hsi_view v, s;
        hsi_view_alloc(&v, HSI_F64, ndim, wide, HSI_BUF_HOST);
        hsi_view_slice(&s, &v, ndim - 1, 1, wide[ndim - 1], 2);
        hsi_tensor_from_view(&t, &s, 1);
        hsi_view_release(&s);
        hsi_view_release(&v);
        CU_ASSERT_FALSE(hsi_view_is_packed(&t->data));
    }
    int64_t n = hsi_view_count(&t->data), idx[HSI_MAX_DIMS];
    for (int64_t i = 0; i < n; i++) {
        int64_t r = i;
        for (int k = ndim - 1; k >= 0; k--) {
            idx[k] = r % shape[k];
            r /= shape[k];
        }
        *(double *)hsi_view_ptr(&t->data, idx) = scale * (2 * hsi_rng_uniform(&trng) - 1);
    }
    return t;
}

typedef hsi_status (*fwd_fn)(hsi_tensor **out, hsi_graph *g, hsi_tensor **in, void *ctx);

static double weighted(hsi_tensor *out, const double *r)
{
    const double *y = hsi_tensor_ptr(out);
    double s = 0;
    for (int64_t i = 0; i < hsi_tensor_count(out); i++) s += y[i] * r[i];
    return s;
}

/* Checks d(sum r*f)/d in[i] from backward against central differences;
 * returns the number of mismatches. */
static int gradcheck(const char *name, fwd_fn f, hsi_tensor **in, int n_in, void *ctx,
                     double h, double atol, double rtol)
{
    hsi_graph *g = NULL;
    hsi_tensor *out = NULL;
    int bad = 0;
    HSI_CHECK_OK(hsi_graph_new(&g));
    for (int i = 0; i < n_in; i++)
        if (in[i]) hsi_tensor_zero_grad(in[i]);
    hsi_status st = f(&out, g, in, ctx);
    if (st != HSI_OK) fprintf(stderr, "\n%s: %s\n", name, hsi_last_error());
    CU_ASSERT_EQUAL_FATAL(st, HSI_OK);
    int64_t m = hsi_tensor_count(out);
    double *r = malloc(sizeof(double) * (size_t)m);
    for (int64_t i = 0; i < m; i++) r[i] = 2 * hsi_rng_uniform(&trng) - 1;
    HSI_CHECK_OK(hsi_backward_grad(out, r, 0));
    int prev = hsi_set_grad_enabled(0);
    for (int i = 0; i < n_in; i++) {
        hsi_tensor *t = in[i];
        if (!t || !t->requires_grad) continue;
        CU_ASSERT_PTR_NOT_NULL_FATAL(t->grad);
        const double *gr = hsi_tensor_ptr(t->grad);
        int nd = t->data.ndim;
        int64_t n = hsi_tensor_count(t), idx[HSI_MAX_DIMS];
        for (int64_t j = 0; j < n; j++) {
            int64_t q = j;
            for (int k = nd - 1; k >= 0; k--) {
                idx[k] = q % t->data.shape[k];
                q /= t->data.shape[k];
            }
            double *p = hsi_view_ptr(&t->data, idx), v = *p, lp, lm;
            *p = v + h;
            hsi_graph_reset(g);
            HSI_CHECK_OK(f(&out, g, in, ctx));
            lp = weighted(out, r);
            *p = v - h;
            hsi_graph_reset(g);
            HSI_CHECK_OK(f(&out, g, in, ctx));
            lm = weighted(out, r);
            *p = v;
            double num = (lp - lm) / (2 * h);
            if (fabs(num - gr[j]) > atol + rtol * fabs(num)) {
                if (bad < 3)
                    fprintf(stderr, "\n  %s: d/d in%d[%lld]: backward %.9g, numeric %.9g", name, i,
                            (long long)j, gr[j], num);
                bad++;
            }
        }
    }
    hsi_set_grad_enabled(prev);
    free(r);
    hsi_graph_free(g);
    return bad;
}

#define GC(name, f, in, n, ctx) CU_ASSERT_EQUAL(gradcheck(name, f, in, n, ctx, 1e-6, 1e-7, 1e-6), 0)

static void free_all(hsi_tensor **t, int n)
{
    for (int i = 0; i < n; i++) hsi_tensor_free(t[i]);
}

/* -------------------------------------------------- op wrappers */

static hsi_status f_add(hsi_tensor **o, hsi_graph *g, hsi_tensor **in, void *c)
{
    (void)c;
    return hsi_add(o, g, in[0], in[1]);
}
static hsi_status f_sub(hsi_tensor **o, hsi_graph *g, hsi_tensor **in, void *c)
{
    (void)c;
    return hsi_sub(o, g, in[0], in[1]);
}
static hsi_status f_mul(hsi_tensor **o, hsi_graph *g, hsi_tensor **in, void *c)
{
    (void)c;
    return hsi_mul(o, g, in[0], in[1]);
}
static hsi_status f_linear(hsi_tensor **o, hsi_graph *g, hsi_tensor **in, void *c)
{
    (void)c;
    return hsi_linear(o, g, in[0], in[1], in[2]);
}
static hsi_status f_matmul(hsi_tensor **o, hsi_graph *g, hsi_tensor **in, void *c)
{
    (void)c;
    return hsi_matmul(o, g, in[0], in[1]);
}
static hsi_status f_act(hsi_tensor **o, hsi_graph *g, hsi_tensor **in, void *c)
{
    int kind = *(int *)c;
    switch (kind) {
    case 0: return hsi_relu(o, g, in[0]);
    case 1: return hsi_leaky_relu(o, g, in[0], 0.2);
    case 2: return hsi_gelu(o, g, in[0]);
    case 3: return hsi_swish(o, g, in[0]);
    case 4: return hsi_log_softmax(o, g, in[0]);
    case 5: return hsi_sum(o, g, in[0]);
    case 6: return hsi_mean(o, g, in[0]);
    default: return hsi_scale(o, g, in[0], -2.5);
    }
}

static void test_gc_elementwise(void)
{
    hsi_rng_seed(&trng, 1);
    int64_t s4[4] = {2, 3, 2, 3}, c4[4] = {1, 3, 1, 1}, c3[3] = {3, 1, 1}, s2[2] = {4, 3};
    for (int strided = 0; strided < 2; strided++) {
        hsi_tensor *t[2] = {leaf(4, s4, strided, 1), leaf(4, s4, 0, 1)};
        GC("add", f_add, t, 2, NULL);
        GC("sub", f_sub, t, 2, NULL);
        GC("mul", f_mul, t, 2, NULL);
        free_all(t, 2);
        hsi_tensor *b[2] = {leaf(4, s4, strided, 1), leaf(4, c4, 0, 1)}; /* per-channel */
        GC("add bcast (1,C,1,1)", f_add, b, 2, NULL);
        GC("mul bcast (1,C,1,1)", f_mul, b, 2, NULL);
        GC("sub bcast (1,C,1,1)", f_sub, b, 2, NULL);
        free_all(b, 2);
        hsi_tensor *c[2] = {leaf(3, c3, 0, 1), leaf(4, s4, strided, 1)}; /* (C,1,1) first */
        GC("mul bcast (C,1,1)*(N,C,H,W)", f_mul, c, 2, NULL);
        GC("sub bcast (C,1,1)-(N,C,H,W)", f_sub, c, 2, NULL);
        free_all(c, 2);
        for (int kind = 0; kind < 8; kind++) {
            hsi_tensor *x[1] = {kind == 4 ? leaf(2, s2, strided, 3) : leaf(4, s4, strided, 2)};
            char nm[32];
            snprintf(nm, sizeof nm, "unary %d strided %d", kind, strided);
            GC(nm, f_act, x, 1, &kind);
            free_all(x, 1);
        }
    }
}

static void test_gc_linear(void)
{
    hsi_rng_seed(&trng, 2);
    int64_t xs[2] = {5, 4}, ws[2] = {3, 4}, bs[1] = {3}, ms[2] = {4, 6};
    for (int strided = 0; strided < 2; strided++) {
        hsi_tensor *t[3] = {leaf(2, xs, strided, 1), leaf(2, ws, strided, 1), leaf(1, bs, 0, 1)};
        GC("linear", f_linear, t, 3, NULL);
        hsi_tensor *nb[3] = {t[0], t[1], NULL};
        GC("linear no bias", f_linear, nb, 3, NULL);
        free_all(t, 3);
        hsi_tensor *m[2] = {leaf(2, xs, strided, 1), leaf(2, ms, 0, 1)};
        GC("matmul", f_matmul, m, 2, NULL);
        free_all(m, 2);
    }
}

typedef struct view_ctx {
    int kind;
} view_ctx;

static hsi_status f_views(hsi_tensor **o, hsi_graph *g, hsi_tensor **in, void *c)
{
    hsi_status st = HSI_OK;
    hsi_tensor *a = NULL, *b = NULL, *d = NULL;
    int kind = ((view_ctx *)c)->kind;
    if (kind == 0) { /* permute then reshape (copy needed) then mul by itself */
        int perm[3] = {2, 0, 1};
        int64_t sh[2] = {-1, 6};
        HSI_TRY(hsi_permute(&a, g, in[0], perm));
        HSI_TRY(hsi_reshape(&b, g, a, 2, sh));
        HSI_TRY(hsi_mul(o, g, b, b));
    } else if (kind == 1) { /* slices + concat */
        HSI_TRY(hsi_slice(&a, g, in[0], 1, 1, 3, 1));
        HSI_TRY(hsi_slice(&b, g, in[0], 2, 0, 4, 2));
        hsi_tensor *parts[3] = {a, in[1], a};
        HSI_TRY(hsi_concat(&d, g, parts, 3, 1));
        HSI_TRY(hsi_mul(o, g, d, d));
        (void)b;
    } else { /* flatten + linear-ish use of a view */
        HSI_TRY(hsi_flatten(&a, g, in[0]));
        HSI_TRY(hsi_gelu(o, g, a));
    }
cleanup:
    return st;
}

static void test_gc_views(void)
{
    hsi_rng_seed(&trng, 3);
    int64_t s3[3] = {2, 3, 4}, s3b[3] = {2, 1, 4};
    for (int strided = 0; strided < 2; strided++) {
        view_ctx c0 = {0}, c1 = {1}, c2 = {2};
        hsi_tensor *t[2] = {leaf(3, s3, strided, 1), leaf(3, s3b, strided, 1)};
        GC("permute+reshape", f_views, t, 1, &c0);
        GC("slice+concat", f_views, t, 2, &c1);
        GC("flatten", f_views, t, 1, &c2);
        free_all(t, 2);
    }
}

typedef struct ce_ctx {
    hsi_tensor *target;
    hsi_ce_opts o;
} ce_ctx;

static hsi_status f_ce(hsi_tensor **o, hsi_graph *g, hsi_tensor **in, void *c)
{
    ce_ctx *cc = c;
    cc->o.weight = in[1];
    return hsi_cross_entropy(o, g, in[0], cc->target, &cc->o);
}

static void test_gc_cross_entropy(void)
{
    hsi_rng_seed(&trng, 4);
    int64_t zs[2] = {6, 4}, ns[1] = {6}, cs[1] = {4};
    hsi_tensor *tg = NULL;
    HSI_CHECK_OK(hsi_tensor_new(&tg, HSI_I64, 1, ns, 0));
    int64_t lab[6] = {0, 3, -100, 2, 1, 3};
    memcpy(hsi_tensor_ptr(tg), lab, sizeof lab);
    for (int strided = 0; strided < 2; strided++)
        for (int opt = 0; opt < 4; opt++) {
            ce_ctx c = {tg, {0}};
            hsi_ce_opts_default(&c.o);
            c.o.label_smoothing = (opt & 1) ? 0.2 : 0.0;
            hsi_tensor *t[2] = {leaf(2, zs, strided, 3), NULL};
            if (opt & 2) {
                t[1] = leaf(1, cs, 0, 1);
                double *w = hsi_tensor_ptr(t[1]);
                for (int k = 0; k < 4; k++) w[k] = 0.5 + fabs(w[k]);
                hsi_tensor_set_requires_grad(t[1], 0);
            }
            char nm[48];
            snprintf(nm, sizeof nm, "cross_entropy opt %d strided %d", opt, strided);
            GC(nm, f_ce, t, 2, &c);
            free_all(t, 2);
        }
    hsi_tensor_free(tg);
}

typedef struct layer_ctx {
    int kind, nd, stride, pad, train;
    hsi_tensor *rm, *rv;
    hsi_rng rng;
} layer_ctx;

static hsi_status f_layer(hsi_tensor **o, hsi_graph *g, hsi_tensor **in, void *c)
{
    layer_ctx *l = c;
    int st3[3] = {l->stride, l->stride, l->stride}, pd3[3] = {l->pad, l->pad, l->pad};
    int k3[3] = {2, 2, 2};
    switch (l->kind) {
    case 0: return hsi_conv(o, g, in[0], in[1], in[2], l->nd, st3, pd3);
    case 1: return hsi_pool(o, g, in[0], 0, l->nd, k3, st3, pd3);
    case 2: return hsi_pool(o, g, in[0], 1, l->nd, k3, st3, pd3);
    case 3: return hsi_global_avg_pool(o, g, in[0]);
    case 4:
        return hsi_batch_norm(o, g, in[0], in[1], in[2], l->rm, l->rv, NULL, l->train, 0.1,
                              1e-5);
    default: {
        hsi_rng r = l->rng; /* same mask for every evaluation */
        return hsi_dropout(o, g, in[0], 0.4, 1, &r);
    }
    }
}

static void test_gc_layers(void)
{
    hsi_rng_seed(&trng, 5);
    for (int strided = 0; strided < 2; strided++)
        for (int nd = 2; nd <= 3; nd++) {
            int64_t xs[5] = {2, 3, 5, 5, 4}, ws[5] = {4, 3, 3, 3, 2}, bs[1] = {4};
            if (nd == 2) {
                xs[2] = 6, xs[3] = 5;
                ws[2] = 3, ws[3] = 2;
            }
            for (int stride = 1; stride <= 2; stride++)
                for (int pad = 0; pad <= 1; pad++) {
                    layer_ctx c = {0, nd, stride, pad, 1, NULL, NULL, {{0}}};
                    hsi_tensor *t[3] = {leaf(nd + 2, xs, strided, 1), leaf(nd + 2, ws, 0, 0.5),
                                        leaf(1, bs, 0, 0.5)};
                    char nm[64];
                    snprintf(nm, sizeof nm, "conv%dd s%d p%d strided %d", nd, stride, pad,
                             strided);
                    GC(nm, f_layer, t, 3, &c);
                    hsi_tensor *nb[3] = {t[0], t[1], NULL};
                    GC(nm, f_layer, nb, 3, &c);
                    for (int kind = 1; kind <= 2; kind++) {
                        c.kind = kind;
                        snprintf(nm, sizeof nm, "%s_pool%dd s%d p%d", kind == 1 ? "max" : "avg",
                                 nd, stride, pad);
                        GC(nm, f_layer, t, 1, &c);
                    }
                    free_all(t, 3);
                }
            layer_ctx c = {3, nd, 1, 0, 1, NULL, NULL, {{0}}};
            hsi_tensor *x[3] = {leaf(nd + 2, xs, strided, 1), NULL, NULL};
            GC("global_avg_pool", f_layer, x, 1, &c);
            c.kind = 5;
            hsi_rng_seed(&c.rng, 77);
            GC("dropout", f_layer, x, 1, &c);
            /* batch norm, train and eval, affine and not */
            int64_t cs[1] = {3};
            for (int train = 0; train < 2; train++)
                for (int affine = 0; affine < 2; affine++) {
                    layer_ctx b = {4, nd, 1, 0, train, NULL, NULL, {{0}}};
                    hsi_tensor_new(&b.rm, HSI_F64, 1, cs, 0);
                    hsi_tensor_new(&b.rv, HSI_F64, 1, cs, 0);
                    double *rv = hsi_tensor_ptr(b.rv), *rm = hsi_tensor_ptr(b.rm);
                    for (int k = 0; k < 3; k++) rv[k] = 0.5 + k, rm[k] = 0.1 * k;
                    hsi_tensor *t[3] = {x[0], affine ? leaf(1, cs, 0, 1) : NULL,
                                        affine ? leaf(1, cs, 0, 1) : NULL};
                    char nm[48];
                    snprintf(nm, sizeof nm, "batch_norm%dd train %d affine %d", nd, train,
                             affine);
                    GC(nm, f_layer, t, 3, &b);
                    hsi_tensor_free(t[1]);
                    hsi_tensor_free(t[2]);
                    hsi_tensor_free(b.rm);
                    hsi_tensor_free(b.rv);
                }
            free_all(x, 1);
        }
    /* BatchNorm1d on (N, C) */
    int64_t s2[2] = {5, 3}, cs[1] = {3};
    layer_ctx b = {4, 2, 1, 0, 1, NULL, NULL, {{0}}};
    hsi_tensor *t[3] = {leaf(2, s2, 1, 1), leaf(1, cs, 0, 1), leaf(1, cs, 0, 1)};
    GC("batch_norm1d", f_layer, t, 3, &b);
    free_all(t, 3);
}

/* ---------------------------------------------------- semantics */

static hsi_tensor *leaf_f32(int ndim, const int64_t *shape, const float *vals, int rg)
{
    hsi_tensor *t = NULL;
    hsi_tensor_new(&t, HSI_F32, ndim, shape, rg);
    memcpy(hsi_tensor_ptr(t), vals, sizeof(float) * (size_t)hsi_tensor_count(t));
    return t;
}

static void test_leaf_nonleaf_accumulate(void)
{
    int64_t s[1] = {3};
    float xv[3] = {1, 2, 3};
    hsi_tensor *x = leaf_f32(1, s, xv, 1), *y = NULL, *z = NULL, *l = NULL;
    hsi_graph *g = NULL;
    HSI_CHECK_OK(hsi_graph_new(&g));
    CU_ASSERT_TRUE(x->is_leaf);
    HSI_CHECK_OK(hsi_mul(&y, g, x, x)); /* y = x^2 */
    CU_ASSERT_FALSE(y->is_leaf);
    CU_ASSERT_TRUE(y->requires_grad);
    CU_ASSERT_PTR_NOT_NULL(y->grad_fn);
    CU_ASSERT_STRING_EQUAL(y->grad_fn->op, "mul");
    hsi_tensor_retain_grad(y);
    HSI_CHECK_OK(hsi_sum(&z, g, y));
    HSI_CHECK_OK(hsi_scale(&l, g, z, 3.0)); /* l = 3 sum x^2 */
    HSI_CHECK_OK(hsi_backward(l, 1));
    const float *gx = hsi_tensor_ptr(x->grad);
    for (int i = 0; i < 3; i++) HSI_ASSERT_NEAR(gx[i], 6 * xv[i], 1e-6);
    CU_ASSERT_PTR_NOT_NULL_FATAL(y->grad); /* retained non-leaf */
    HSI_ASSERT_NEAR(((float *)hsi_tensor_ptr(y->grad))[1], 3.0, 1e-6);
    CU_ASSERT_PTR_NULL(z->grad); /* not retained */
    /* second backward through the retained graph accumulates */
    HSI_CHECK_OK(hsi_backward(l, 0));
    for (int i = 0; i < 3; i++) HSI_ASSERT_NEAR(gx[i], 12 * xv[i], 1e-6);
    HSI_ASSERT_NEAR(((float *)hsi_tensor_ptr(y->grad))[1], 6.0, 1e-6);
    /* third one: the graph was freed by the second */
    HSI_CHECK_FAILS(hsi_backward(l, 0), HSI_ERR_STATE, "second time");
    for (int i = 0; i < 3; i++) HSI_ASSERT_NEAR(gx[i], 12 * xv[i], 1e-6); /* unchanged */
    hsi_tensor_zero_grad(x);
    CU_ASSERT_EQUAL(gx[2], 0.0f);
    /* a non-scalar loss is refused; leaves cannot be non-leaf'ed */
    HSI_CHECK_FAILS(hsi_backward(y, 0), HSI_ERR_ARG, "scalar");
    HSI_CHECK_FAILS(hsi_tensor_set_requires_grad(y, 0), HSI_ERR_STATE, "leaf");
    hsi_graph_free(g);
    hsi_tensor_free(x);
}

static void test_no_grad_and_detach(void)
{
    int64_t s[2] = {2, 3}, ws[2] = {4, 3};
    float xv[6] = {1, -2, 3, 4, -5, 6}, wv[12] = {0};
    hsi_tensor *x = leaf_f32(2, s, xv, 0), *w = leaf_f32(2, ws, wv, 1), *y = NULL, *d = NULL;
    hsi_graph *g = NULL;
    HSI_CHECK_OK(hsi_graph_new(&g));
    int prev = hsi_set_grad_enabled(0);
    CU_ASSERT_EQUAL(prev, 1);
    HSI_CHECK_OK(hsi_linear(&y, g, x, w, NULL));
    CU_ASSERT_FALSE(y->requires_grad);
    CU_ASSERT_PTR_NULL(y->grad_fn);
    CU_ASSERT_EQUAL(hsi_graph_n_nodes(g), 0);
    float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    HSI_CHECK_FAILS(hsi_backward_grad(y, ones, 0), HSI_ERR_STATE, "does not require grad");
    CU_ASSERT_PTR_NULL(w->grad); /* no gradient memory */
    hsi_set_grad_enabled(prev);
    HSI_CHECK_OK(hsi_linear(&y, g, x, w, NULL));
    CU_ASSERT_TRUE(y->requires_grad);
    HSI_CHECK_OK(hsi_detach(&d, g, y));
    CU_ASSERT_FALSE(d->requires_grad);
    CU_ASSERT_TRUE(d->is_leaf);
    CU_ASSERT_PTR_EQUAL(hsi_tensor_ptr(d), hsi_tensor_ptr(y)); /* shares data */
    hsi_graph_free(g);
    hsi_tensor_free(x);
    hsi_tensor_free(w);
}

static void test_view_vs_reshape(void)
{
    int64_t s[2] = {3, 4}, flat[1] = {12}, s3[3] = {2, 2, 3};
    float v[12];
    for (int i = 0; i < 12; i++) v[i] = (float)i;
    hsi_tensor *x = leaf_f32(2, s, v, 1), *a = NULL, *b = NULL, *c = NULL;
    hsi_graph *g = NULL;
    HSI_CHECK_OK(hsi_graph_new(&g));
    HSI_CHECK_OK(hsi_view_as_shape(&a, g, x, 1, flat));
    CU_ASSERT_PTR_EQUAL(hsi_tensor_ptr(a), hsi_tensor_ptr(x)); /* no copy */
    int perm[2] = {1, 0};
    HSI_CHECK_OK(hsi_permute(&b, g, x, perm));
    CU_ASSERT_EQUAL(b->data.buf, x->data.buf);
    HSI_CHECK_FAILS(hsi_view_as_shape(&c, g, b, 1, flat), HSI_ERR_UNSUPPORTED, "view");
    HSI_CHECK_OK(hsi_reshape(&c, g, b, 3, s3)); /* splits an axis: still a view */
    CU_ASSERT_EQUAL(c->data.buf, x->data.buf);
    HSI_CHECK_OK(hsi_reshape(&c, g, b, 1, flat)); /* needs a copy */
    CU_ASSERT_NOT_EQUAL(c->data.buf, x->data.buf);
    CU_ASSERT_TRUE(hsi_view_is_packed(&c->data));
    /* c[k] = b[k / 3, k % 3] = x[k % 3, k / 3] = 4 (k % 3) + k / 3 */
    for (int64_t k = 0; k < 12; k++) {
        int64_t idx[1] = {k};
        HSI_ASSERT_NEAR(hsi_view_get_f64(&c->data, idx), 4.0 * (k % 3) + k / 3, 1e-6);
    }
    hsi_graph_free(g);
    hsi_tensor_free(x);
}

static void test_anomaly_and_errors(void)
{
    int64_t s[2] = {2, 3};
    float xv[6] = {1, 2, 3, 4, 5, 6};
    hsi_tensor *x = leaf_f32(2, s, xv, 1), *y = NULL, *z = NULL, *l = NULL;
    hsi_graph *g = NULL;
    HSI_CHECK_OK(hsi_graph_new(&g));
    hsi_set_anomaly(1);
    /* forward: sqrt-free way to make an Inf: scale by a huge factor twice */
    const char *prev = hsi_set_layer_name("features.3");
    HSI_CHECK_OK(hsi_scale(&y, g, x, 1e30));
    HSI_CHECK_FAILS(hsi_scale(&z, g, y, 1e30), HSI_ERR_NUMERIC, "features.3");
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "'scale'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "Inf"));
    hsi_set_layer_name(prev);
    /* backward: finite forward, infinite gradient */
    hsi_graph_reset(g);
    hsi_set_layer_name("head");
    HSI_CHECK_OK(hsi_scale(&y, g, x, 1e20));
    hsi_set_layer_name("loss");
    HSI_CHECK_OK(hsi_sum(&l, g, y));
    hsi_set_layer_name(NULL);
    float big = 1e38f; /* d sum is finite, d scale = 1e58 is not */
    HSI_CHECK_FAILS(hsi_backward_grad(l, &big, 0), HSI_ERR_NUMERIC, "head");
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "backward of op 'scale'"));
    hsi_set_anomaly(0);
    /* bad shapes name both */
    int64_t s2[2] = {3, 2};
    hsi_tensor *w = leaf_f32(2, s2, xv, 1);
    HSI_CHECK_FAILS(hsi_linear(&y, g, x, w, NULL), HSI_ERR_ARG, "(3, 2)");
    HSI_CHECK_FAILS(hsi_add(&y, g, w, x), HSI_ERR_ARG, "broadcast");
    hsi_graph_free(g);
    hsi_tensor_free(x);
    hsi_tensor_free(w);
}

static void test_ce_values(void)
{
    /* a hand-computed case: logits 0 for 4 classes -> loss log(4) */
    int64_t zs[2] = {2, 4}, ns[1] = {2};
    float z[8] = {0};
    hsi_tensor *x = leaf_f32(2, zs, z, 1), *t = NULL, *l = NULL;
    HSI_CHECK_OK(hsi_tensor_new(&t, HSI_I32, 1, ns, 0));
    int32_t lab[2] = {1, 7};
    memcpy(hsi_tensor_ptr(t), lab, sizeof lab);
    hsi_graph *g = NULL;
    HSI_CHECK_OK(hsi_graph_new(&g));
    HSI_CHECK_FAILS(hsi_cross_entropy(&l, g, x, t, NULL), HSI_ERR_ARG, "target[1] = 7");
    hsi_ce_opts o;
    hsi_ce_opts_default(&o);
    o.ignore_index = 7;
    HSI_CHECK_OK(hsi_cross_entropy(&l, g, x, t, &o));
    HSI_ASSERT_NEAR(hsi_tensor_item(l), log(4.0), 1e-6);
    hsi_graph_free(g);
    hsi_tensor_free(x);
    hsi_tensor_free(t);
}

HSI_SUITE(autograd, 0, {"finite differences: elementwise, broadcast, unary", test_gc_elementwise},
          {"finite differences: linear, matmul", test_gc_linear},
          {"finite differences: permute, reshape, slice, concat", test_gc_views},
          {"finite differences: cross-entropy options", test_gc_cross_entropy},
          {"finite differences: conv, pool, gap, bn, dropout", test_gc_layers},
          {"leaf / non-leaf / accumulation / double backward", test_leaf_nonleaf_accumulate},
          {"no-grad mode and detach", test_no_grad_and_detach},
          {"view vs reshape", test_view_vs_reshape},
          {"anomaly mode names op and layer", test_anomaly_and_errors},
          {"cross-entropy values and errors", test_ce_values})

/* ops.c — the differentiable element, linear, activation, dropout, concat
 * and loss ops of the engine (forward + backward, float32 and float64).
 * Not the layer ops (ops_layers.c) and not the graph machinery (tensor.c). */
#include "core/prng.h"
#include "models/tensor_impl.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kern_internal.h"

/* The engine's gemms: OpenBLAS single-threaded, big ones split by rows of C
 * between our own threads (hsi_threads). OpenBLAS's pool is never
 * woken inside the engine: its threads spin for a while after each call
 * and would take a core from the convolution threads that follow. */
#define ENG_GEMM_SPLIT_FLOPS (1 << 22)

#define ENG_GEMM_DEF(NAME, T, BLAS)                                                            \
    typedef struct NAME##_job {                                                                \
        enum CBLAS_TRANSPOSE ta, tb;                                                           \
        int m, n, k, lda, ldb, ldc;                                                            \
        T alpha, beta;                                                                         \
        const T *a, *b;                                                                        \
        T *c;                                                                                  \
    } NAME##_job;                                                                              \
    static hsi_status NAME##_part(void *ctx, int t, int nt)                                    \
    {                                                                                          \
        const NAME##_job *j = ctx;                                                             \
        int64_t r0, r1;                                                                        \
        hsi_split_range(j->m, t, nt, &r0, &r1);                                                 \
        if (r1 > r0) /* rows [r0, r1) of C and of op(A) */                                     \
            BLAS(CblasRowMajor, j->ta, j->tb, (int)(r1 - r0), j->n, j->k, j->alpha,            \
                 j->a + (j->ta == CblasNoTrans ? r0 * j->lda : r0), j->lda, j->b, j->ldb,      \
                 j->beta, j->c + r0 * j->ldc, j->ldc);                                         \
        return HSI_OK;                                                                         \
    }                                                                                          \
    static void NAME(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, \
                     int m, int n, int k, T alpha, const T *a, int lda, const T *b, int ldb,   \
                     T beta, T *c, int ldc)                                                    \
    {                                                                                          \
        (void)order; /* always row-major here */                                               \
        NAME##_job j = {ta, tb, m, n, k, lda, ldb, ldc, alpha, beta, a, b, c};                 \
        int nt = hsi_threads();                                                           \
        double flops = 2.0 * m * n * k;                                                        \
        if (nt > m / 16) nt = m / 16;                                                          \
        if (flops < ENG_GEMM_SPLIT_FLOPS || nt < 2) nt = 1;                                    \
        int prev = hsi_kern_blas_single_begin();                                               \
        (void)hsi_parallel(nt, NAME##_part, &j);                                          \
        hsi_kern_blas_single_end(prev);                                                        \
    }
ENG_GEMM_DEF(eng_sgemm, float, cblas_sgemm)
ENG_GEMM_DEF(eng_dgemm, double, cblas_dgemm)

#define T float
#define SFX f32
#define GEMM eng_sgemm
#define EXPF expf
#define ERFF erff
#include "models/ops_kern.h"
#undef T
#undef SFX
#undef GEMM
#undef EXPF
#undef ERFF

#define T double
#define SFX f64
#define GEMM eng_dgemm
#define EXPF exp
#define ERFF erf
#include "models/ops_kern.h"
#undef T
#undef SFX
#undef GEMM
#undef EXPF
#undef ERFF

#define IS32(t) ((t)->data.dtype == HSI_F32)

static hsi_status same_dtype(const hsi_tensor *a, const hsi_tensor *b, const char *op)
{
    if (a->data.dtype != b->data.dtype)
        return HSI_FAIL(HSI_ERR_ARG, "%s: dtypes differ (%s and %s)", op,
                        hsi_dtype_name(a->data.dtype), hsi_dtype_name(b->data.dtype));
    return HSI_OK;
}

/* ------------------------------------------------------- broadcasting */

typedef struct bcast {
    int64_t sh[5];       /* output shape padded to 5 */
    int64_t as[5], bs[5]; /* element strides of a and b in output index space */
    int64_t os[5];
    int ndim;
    int64_t out_shape[HSI_MAX_DIMS];
} bcast;

static hsi_status bcast_make(bcast *bc, const hsi_tensor *a, const hsi_tensor *b, const char *op)
{
    int na = a->data.ndim, nb = b->data.ndim, nd = na > nb ? na : nb;
    int64_t ap[HSI_MAX_DIMS], bp[HSI_MAX_DIMS];
    hsi_eng_packed_strides(na, a->data.shape, ap);
    hsi_eng_packed_strides(nb, b->data.shape, bp);
    bc->ndim = nd;
    int pad = 5 - nd;
    for (int k = 0; k < 5; k++) {
        bc->sh[k] = 1;
        bc->as[k] = bc->bs[k] = 0;
    }
    for (int k = 0; k < nd; k++) {
        int ka = k - (nd - na), kb = k - (nd - nb);
        int64_t da = ka >= 0 ? a->data.shape[ka] : 1, db = kb >= 0 ? b->data.shape[kb] : 1;
        if (da != db && da != 1 && db != 1) {
            char s1[96], s2[96];
            return HSI_FAIL(HSI_ERR_ARG, "%s: shapes %s and %s do not broadcast (axis %d: %lld vs "
                                         "%lld)", op,
                            hsi_eng_shape_str(s1, sizeof s1, na, a->data.shape),
                            hsi_eng_shape_str(s2, sizeof s2, nb, b->data.shape), k,
                            (long long)da, (long long)db);
        }
        int64_t d = da > db ? da : db;
        if (da == 0 || db == 0) d = 0;
        bc->out_shape[k] = d;
        bc->sh[pad + k] = d;
        bc->as[pad + k] = (ka >= 0 && da == d) ? ap[ka] : 0;
        bc->bs[pad + k] = (kb >= 0 && db == d) ? bp[kb] : 0;
    }
    int64_t os[HSI_MAX_DIMS];
    hsi_eng_packed_strides(nd, bc->out_shape, os);
    for (int k = 0; k < 5; k++) bc->os[k] = k < pad ? 0 : os[k - pad];
    return HSI_OK;
}

typedef struct bin_saved {
    bcast bc;
    int kind; /* 0 add, 1 sub, 2 mul */
} bin_saved;

static hsi_status bw_binary(hsi_node *n)
{
    const bin_saved *s = n->saved;
    const bcast *bc = &s->bc;
    const void *gy = hsi_node_grad_out(n);
    void *ga = hsi_node_grad_in(n, 0), *gb = hsi_node_grad_in(n, 1);
    const void *a = hsi_tensor_ptr(n->in[0]), *b = hsi_tensor_ptr(n->in[1]);
    int f32 = IS32(n->out);
    for (int side = 0; side < 2; side++) {
        void *gd = side ? gb : ga;
        if (!gd) continue;
        const int64_t *dst_s = side ? bc->bs : bc->as;
        if (s->kind == 2) { /* d(side) += gy * other */
            const void *other = side ? a : b;
            const int64_t *os = side ? bc->as : bc->bs;
            if (f32)
                tern_f32(3, bc->sh, gd, dst_s, gy, bc->os, other, os, 1);
            else
                tern_f64(3, bc->sh, gd, dst_s, gy, bc->os, other, os, 1);
        } else {
            double alpha = (s->kind == 1 && side) ? -1.0 : 1.0;
            if (f32)
                tern_f32(2, bc->sh, gd, dst_s, gy, bc->os, NULL, NULL, (float)alpha);
            else
                tern_f64(2, bc->sh, gd, dst_s, gy, bc->os, NULL, NULL, alpha);
        }
    }
    return HSI_OK;
}

static hsi_status binary(hsi_tensor **out, hsi_graph *g, hsi_tensor *a, hsi_tensor *b, int kind)
{
    static const char *names[3] = {"add", "sub", "mul"};
    const char *op = names[kind];
    hsi_status st = HSI_OK;
    bcast bc;
    HSI_TRY(hsi_eng_check_float(a, op, "a"));
    HSI_TRY(hsi_eng_check_float(b, op, "b"));
    HSI_TRY(same_dtype(a, b, op));
    HSI_TRY(hsi_eng_packed(&a, g, a));
    HSI_TRY(hsi_eng_packed(&b, g, b));
    HSI_TRY(bcast_make(&bc, a, b, op));
    HSI_TRY(hsi_op_output(out, g, a->data.dtype, bc.ndim, bc.out_shape));
    void *y = hsi_tensor_ptr(*out);
    const void *pa = hsi_tensor_ptr(a), *pb = hsi_tensor_ptr(b);
    int mode = kind == 2 ? 1 : 0;
    double alpha = kind == 1 ? -1.0 : 1.0;
    if (IS32(a))
        tern_f32(mode, bc.sh, y, bc.os, pa, bc.as, pb, bc.bs, (float)alpha);
    else
        tern_f64(mode, bc.sh, y, bc.os, pa, bc.as, pb, bc.bs, alpha);
    hsi_tensor *in[2] = {a, b};
    hsi_node *n = hsi_op_record(g, op, bw_binary, *out, in, 2);
    if (n) {
        bin_saved *s = hsi_graph_scratch(g, sizeof *s);
        if (!s) return HSI_FAIL(HSI_ERR_NOMEM, "%s: out of arena memory", op);
        s->bc = bc;
        s->kind = kind;
        n->saved = s;
    }
    HSI_TRY(hsi_op_check(*out, op));
cleanup:
    return st;
}

hsi_status hsi_add(hsi_tensor **out, hsi_graph *g, hsi_tensor *a, hsi_tensor *b)
{
    return binary(out, g, a, b, 0);
}
hsi_status hsi_sub(hsi_tensor **out, hsi_graph *g, hsi_tensor *a, hsi_tensor *b)
{
    return binary(out, g, a, b, 1);
}
hsi_status hsi_mul(hsi_tensor **out, hsi_graph *g, hsi_tensor *a, hsi_tensor *b)
{
    return binary(out, g, a, b, 2);
}

/* ------------------------------------------------ scale, sum, mean */

static hsi_status bw_scale(hsi_node *n)
{
    void *dx = hsi_node_grad_in(n, 0);
    if (!dx) return HSI_OK;
    int64_t cnt = hsi_tensor_count(n->in[0]);
    const void *gy = hsi_node_grad_out(n);
    double s = n->a0;
    int reduce = n->a1 != 0; /* sum/mean: gy is a scalar */
    if (IS32(n->out)) {
        float *d = dx;
        const float *y = gy;
        for (int64_t i = 0; i < cnt; i++) d[i] += (float)s * y[reduce ? 0 : i];
    } else {
        double *d = dx;
        const double *y = gy;
        for (int64_t i = 0; i < cnt; i++) d[i] += s * y[reduce ? 0 : i];
    }
    return HSI_OK;
}

static hsi_status scale_like(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, double s, int reduce,
                             const char *op)
{
    hsi_status st = HSI_OK;
    HSI_TRY(hsi_eng_check_float(x, op, "x"));
    HSI_TRY(hsi_eng_packed(&x, g, x));
    int64_t cnt = hsi_tensor_count(x);
    if (reduce && !strcmp(op, "mean")) s = cnt ? 1.0 / (double)cnt : NAN;
    HSI_TRY(hsi_op_output(out, g, x->data.dtype, reduce ? 0 : x->data.ndim, x->data.shape));
    if (IS32(x)) {
        const float *a = hsi_tensor_ptr(x);
        float *y = hsi_tensor_ptr(*out);
        if (reduce) {
            double acc = 0;
            for (int64_t i = 0; i < cnt; i++) acc += a[i];
            y[0] = (float)(acc * s);
        } else {
            for (int64_t i = 0; i < cnt; i++) y[i] = (float)s * a[i];
        }
    } else {
        const double *a = hsi_tensor_ptr(x);
        double *y = hsi_tensor_ptr(*out);
        if (reduce) {
            double acc = 0;
            for (int64_t i = 0; i < cnt; i++) acc += a[i];
            y[0] = acc * s;
        } else {
            for (int64_t i = 0; i < cnt; i++) y[i] = s * a[i];
        }
    }
    hsi_tensor *in[1] = {x};
    hsi_node *n = hsi_op_record(g, op, bw_scale, *out, in, 1);
    if (n) {
        n->a0 = s;
        n->a1 = reduce;
    }
    HSI_TRY(hsi_op_check(*out, op));
cleanup:
    return st;
}

hsi_status hsi_scale(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, double s)
{
    return scale_like(out, g, x, s, 0, "scale");
}
hsi_status hsi_sum(hsi_tensor **out, hsi_graph *g, hsi_tensor *x)
{
    return scale_like(out, g, x, 1.0, 1, "sum");
}
hsi_status hsi_mean(hsi_tensor **out, hsi_graph *g, hsi_tensor *x)
{
    return scale_like(out, g, x, 1.0, 1, "mean");
}

/* --------------------------------------------------------- linear */

static hsi_status bw_linear(hsi_node *n)
{
    hsi_tensor *x = n->in[0], *w = n->in[1];
    int N = (int)x->data.shape[0], in = (int)x->data.shape[1], out = (int)w->data.shape[0];
    void *dx = hsi_node_grad_in(n, 0), *dw = hsi_node_grad_in(n, 1);
    void *db = n->n_in > 2 ? hsi_node_grad_in(n, 2) : NULL;
    if (IS32(x))
        linear_bwd_f32(dx, dw, db, hsi_node_grad_out(n), hsi_tensor_ptr(x), hsi_tensor_ptr(w), N,
                       in, out);
    else
        linear_bwd_f64(dx, dw, db, hsi_node_grad_out(n), hsi_tensor_ptr(x), hsi_tensor_ptr(w), N,
                       in, out);
    return HSI_OK;
}

hsi_status hsi_linear(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, hsi_tensor *w,
                      hsi_tensor *b)
{
    hsi_status st = HSI_OK;
    char s1[96], s2[96];
    HSI_TRY(hsi_eng_check_float(x, "linear", "x"));
    HSI_TRY(hsi_eng_check_float(w, "linear", "weight"));
    HSI_TRY(same_dtype(x, w, "linear"));
    if (x->data.ndim != 2 || w->data.ndim != 2 || x->data.shape[1] != w->data.shape[1]) {
        st = HSI_FAIL(HSI_ERR_ARG, "linear: x %s and weight %s: expected x (N, in) and weight "
                                   "(out, in)",
                      hsi_eng_shape_str(s1, sizeof s1, x->data.ndim, x->data.shape),
                      hsi_eng_shape_str(s2, sizeof s2, w->data.ndim, w->data.shape));
        goto cleanup;
    }
    if (b) {
        HSI_TRY(hsi_eng_check_float(b, "linear", "bias"));
        HSI_TRY(same_dtype(x, b, "linear"));
        if (b->data.ndim != 1 || b->data.shape[0] != w->data.shape[0]) {
            st = HSI_FAIL(HSI_ERR_ARG, "linear: bias %s, expected (%lld)",
                          hsi_eng_shape_str(s1, sizeof s1, b->data.ndim, b->data.shape),
                          (long long)w->data.shape[0]);
            goto cleanup;
        }
        HSI_TRY(hsi_eng_packed(&b, g, b));
    }
    HSI_TRY(hsi_eng_packed(&x, g, x));
    HSI_TRY(hsi_eng_packed(&w, g, w));
    int64_t shape[2] = {x->data.shape[0], w->data.shape[0]};
    HSI_TRY(hsi_op_output(out, g, x->data.dtype, 2, shape));
    if (IS32(x))
        linear_fwd_f32(hsi_tensor_ptr(*out), hsi_tensor_ptr(x), hsi_tensor_ptr(w),
                       b ? hsi_tensor_ptr(b) : NULL, (int)shape[0], (int)x->data.shape[1],
                       (int)shape[1]);
    else
        linear_fwd_f64(hsi_tensor_ptr(*out), hsi_tensor_ptr(x), hsi_tensor_ptr(w),
                       b ? hsi_tensor_ptr(b) : NULL, (int)shape[0], (int)x->data.shape[1],
                       (int)shape[1]);
    hsi_tensor *in[3] = {x, w, b};
    hsi_op_record(g, "linear", bw_linear, *out, in, b ? 3 : 2);
    HSI_TRY(hsi_op_check(*out, "linear"));
cleanup:
    return st;
}

static hsi_status bw_matmul(hsi_node *n)
{
    hsi_tensor *a = n->in[0], *b = n->in[1];
    int m = (int)a->data.shape[0], k = (int)a->data.shape[1], nn = (int)b->data.shape[1];
    void *da = hsi_node_grad_in(n, 0), *db = hsi_node_grad_in(n, 1);
    if (IS32(a))
        matmul_bwd_f32(da, db, hsi_node_grad_out(n), hsi_tensor_ptr(a), hsi_tensor_ptr(b), m, k,
                       nn);
    else
        matmul_bwd_f64(da, db, hsi_node_grad_out(n), hsi_tensor_ptr(a), hsi_tensor_ptr(b), m, k,
                       nn);
    return HSI_OK;
}

hsi_status hsi_matmul(hsi_tensor **out, hsi_graph *g, hsi_tensor *a, hsi_tensor *b)
{
    hsi_status st = HSI_OK;
    char s1[96], s2[96];
    HSI_TRY(hsi_eng_check_float(a, "matmul", "a"));
    HSI_TRY(hsi_eng_check_float(b, "matmul", "b"));
    HSI_TRY(same_dtype(a, b, "matmul"));
    if (a->data.ndim != 2 || b->data.ndim != 2 || a->data.shape[1] != b->data.shape[0]) {
        st = HSI_FAIL(HSI_ERR_ARG, "matmul: a %s and b %s: expected (M, K) and (K, N)",
                      hsi_eng_shape_str(s1, sizeof s1, a->data.ndim, a->data.shape),
                      hsi_eng_shape_str(s2, sizeof s2, b->data.ndim, b->data.shape));
        goto cleanup;
    }
    HSI_TRY(hsi_eng_packed(&a, g, a));
    HSI_TRY(hsi_eng_packed(&b, g, b));
    int64_t shape[2] = {a->data.shape[0], b->data.shape[1]};
    HSI_TRY(hsi_op_output(out, g, a->data.dtype, 2, shape));
    if (IS32(a))
        matmul_fwd_f32(hsi_tensor_ptr(*out), hsi_tensor_ptr(a), hsi_tensor_ptr(b), (int)shape[0],
                       (int)a->data.shape[1], (int)shape[1]);
    else
        matmul_fwd_f64(hsi_tensor_ptr(*out), hsi_tensor_ptr(a), hsi_tensor_ptr(b), (int)shape[0],
                       (int)a->data.shape[1], (int)shape[1]);
    hsi_tensor *in[2] = {a, b};
    hsi_op_record(g, "matmul", bw_matmul, *out, in, 2);
    HSI_TRY(hsi_op_check(*out, "matmul"));
cleanup:
    return st;
}

/* ---------------------------------------------------- activations */

static hsi_status bw_act(hsi_node *n)
{
    void *dx = hsi_node_grad_in(n, 0);
    if (!dx) return HSI_OK;
    int kind = (int)n->a0;
    int64_t cnt = hsi_tensor_count(n->out);
    if (IS32(n->out))
        act_bwd_f32(kind, dx, hsi_node_grad_out(n), hsi_tensor_ptr(n->in[0]),
                    hsi_tensor_ptr(n->out), n->saved, cnt, (float)n->a1);
    else
        act_bwd_f64(kind, dx, hsi_node_grad_out(n), hsi_tensor_ptr(n->in[0]),
                    hsi_tensor_ptr(n->out), n->saved, cnt, n->a1);
    return HSI_OK;
}

static hsi_status activation(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, int kind,
                             double slope)
{
    static const char *names[4] = {"relu", "leaky_relu", "gelu", "swish"};
    const char *op = names[kind];
    hsi_status st = HSI_OK;
    HSI_TRY(hsi_eng_check_float(x, op, "x"));
    HSI_TRY(hsi_eng_packed(&x, g, x));
    HSI_TRY(hsi_op_output(out, g, x->data.dtype, x->data.ndim, x->data.shape));
    int64_t cnt = hsi_tensor_count(x);
    int track = hsi_is_grad_enabled() && x->requires_grad;
    void *save = NULL;
    if (kind == 3 && track) { /* swish saves sigmoid(x) for its backward */
        save = hsi_graph_scratch(g, (size_t)cnt * hsi_dtype_size(x->data.dtype));
        if (!save) return HSI_FAIL(HSI_ERR_NOMEM, "swish: out of arena memory");
    }
    if (IS32(x))
        act_fwd_f32(kind, hsi_tensor_ptr(*out), save, hsi_tensor_ptr(x), cnt, (float)slope);
    else
        act_fwd_f64(kind, hsi_tensor_ptr(*out), save, hsi_tensor_ptr(x), cnt, slope);
    hsi_tensor *in[1] = {x};
    hsi_node *n = hsi_op_record(g, op, bw_act, *out, in, 1);
    if (n) {
        n->a0 = kind;
        n->a1 = slope;
        n->saved = save;
    }
    HSI_TRY(hsi_op_check(*out, op));
cleanup:
    return st;
}

hsi_status hsi_relu(hsi_tensor **out, hsi_graph *g, hsi_tensor *x)
{
    return activation(out, g, x, 0, 0);
}
hsi_status hsi_leaky_relu(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, double slope)
{
    return activation(out, g, x, 1, slope);
}
hsi_status hsi_gelu(hsi_tensor **out, hsi_graph *g, hsi_tensor *x)
{
    return activation(out, g, x, 2, 0);
}
hsi_status hsi_swish(hsi_tensor **out, hsi_graph *g, hsi_tensor *x)
{
    return activation(out, g, x, 3, 0);
}

/* -------------------------------------------------------- dropout */

static __thread uint64_t g_drop_key;
static __thread int64_t g_drop_row0;
static __thread uint64_t g_drop_k;

void hsi_dropout_key_set(uint64_t key, int64_t row0)
{
    g_drop_key = key;
    g_drop_row0 = row0;
    g_drop_k = 0;
}

static hsi_status bw_dropout(hsi_node *n)
{
    void *dx = hsi_node_grad_in(n, 0);
    if (!dx) return HSI_OK;
    int64_t cnt = hsi_tensor_count(n->out);
    const float *m = n->saved; /* 0 or 1/(1-p) per element */
    if (IS32(n->out)) {
        float *d = dx;
        const float *gy = hsi_node_grad_out(n);
        for (int64_t i = 0; i < cnt; i++) d[i] += gy[i] * m[i];
    } else {
        double *d = dx;
        const double *gy = hsi_node_grad_out(n);
        double keep = n->a0;
        for (int64_t i = 0; i < cnt; i++) d[i] += m[i] != 0 ? gy[i] * keep : 0;
    }
    return HSI_OK;
}

hsi_status hsi_dropout(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, double p, int training,
                       hsi_rng *rng)
{
    hsi_status st = HSI_OK;
    if (!(p >= 0 && p <= 1))
        return HSI_FAIL(HSI_ERR_ARG, "dropout: p must be in [0, 1] (got %g)", p);
    HSI_TRY(hsi_eng_check_float(x, "dropout", "x"));
    if (!training || p == 0) {
        *out = x;
        return HSI_OK;
    }
    int explicit_rng = rng != NULL;
    if (!rng) rng = hsi_default_rng();
    HSI_TRY(hsi_eng_packed(&x, g, x));
    HSI_TRY(hsi_op_output(out, g, x->data.dtype, x->data.ndim, x->data.shape));
    int64_t cnt = hsi_tensor_count(x);
    float *mask = hsi_graph_scratch(g, (size_t)cnt * sizeof(float));
    if (!mask) return HSI_FAIL(HSI_ERR_NOMEM, "dropout: out of arena memory");
    double keep = p < 1 ? 1.0 / (1.0 - p) : 0.0;
    /* 24-bit uniform numbers, two per RNG draw */
    uint32_t thr = (uint32_t)(p * 16777216.0);
    if (g_drop_key && !explicit_rng) { /* keyed by sample: one stream per row */
        int64_t rows = x->data.shape[0] > 0 ? x->data.shape[0] : 1, per = cnt / rows;
        uint64_t kk = hsi_prng_key(g_drop_key, g_drop_k++);
        for (int64_t r0 = 0; r0 < rows; r0++) {
            hsi_prng pr;
            hsi_prng_init(&pr, hsi_prng_key(kk, (uint64_t)(g_drop_row0 + r0)));
            float *mrow = mask + r0 * per;
            for (int64_t i = 0; i < per; i += 2) {
                uint64_t r = hsi_prng_next(&pr);
                uint32_t u0 = (uint32_t)(r >> 40), u1 = (uint32_t)((r >> 16) & 0xffffff);
                mrow[i] = u0 < thr ? 0.0f : (float)keep;
                if (i + 1 < per) mrow[i + 1] = u1 < thr ? 0.0f : (float)keep;
            }
        }
    } else {
        for (int64_t i = 0; i < cnt; i += 2) {
            uint64_t r = hsi_rng_next(rng);
            uint32_t u0 = (uint32_t)(r >> 40), u1 = (uint32_t)((r >> 16) & 0xffffff);
            mask[i] = u0 < thr ? 0.0f : (float)keep;
            if (i + 1 < cnt) mask[i + 1] = u1 < thr ? 0.0f : (float)keep;
        }
    }
    if (p >= 1)
        for (int64_t i = 0; i < cnt; i++) mask[i] = 0;
    if (IS32(x)) {
        const float *a = hsi_tensor_ptr(x);
        float *y = hsi_tensor_ptr(*out);
        for (int64_t i = 0; i < cnt; i++) y[i] = a[i] * mask[i];
    } else {
        const double *a = hsi_tensor_ptr(x);
        double *y = hsi_tensor_ptr(*out);
        for (int64_t i = 0; i < cnt; i++) y[i] = mask[i] != 0 ? a[i] * keep : 0;
    }
    hsi_tensor *in[1] = {x};
    hsi_node *n = hsi_op_record(g, "dropout", bw_dropout, *out, in, 1);
    if (n) {
        n->saved = mask;
        n->a0 = keep;
    }
    HSI_TRY(hsi_op_check(*out, "dropout"));
cleanup:
    return st;
}

/* --------------------------------------------------------- concat */

static void concat_geom(const hsi_tensor *o, int axis, int64_t *os, int64_t *sh, int ndim)
{
    hsi_eng_packed_strides(ndim, o->data.shape, os);
    (void)sh;
}

static hsi_status bw_concat(hsi_node *n)
{
    int axis = (int)n->a0, nd = n->out->data.ndim;
    int64_t os[HSI_MAX_DIMS], xs[HSI_MAX_DIMS];
    concat_geom(n->out, axis, os, NULL, nd);
    size_t esz = hsi_dtype_size(n->out->data.dtype);
    int64_t off = 0;
    for (int i = 0; i < n->n_in; i++) {
        hsi_tensor *x = n->in[i];
        void *dx = hsi_node_grad_in(n, i);
        if (dx) {
            hsi_eng_packed_strides(nd, x->data.shape, xs);
            hsi_eng_acc_strided(x->data.dtype, nd, x->data.shape, dx, xs,
                                (const char *)n->out->gflow + (size_t)(off * os[axis]) * esz, os);
        }
        off += x->data.shape[axis];
    }
    return HSI_OK;
}

hsi_status hsi_concat(hsi_tensor **out, hsi_graph *g, hsi_tensor *const *xs, int n, int axis)
{
    hsi_status st = HSI_OK;
    if (n < 1) return HSI_FAIL(HSI_ERR_ARG, "concat: no inputs");
    int nd = xs[0]->data.ndim;
    if (axis < 0 || axis >= nd)
        return HSI_FAIL(HSI_ERR_ARG, "concat: axis %d outside 0..%d", axis, nd - 1);
    hsi_tensor **in = hsi_graph_scratch(g, sizeof(hsi_tensor *) * (size_t)n);
    if (!in) return HSI_FAIL(HSI_ERR_NOMEM, "concat: out of arena memory");
    int64_t shape[HSI_MAX_DIMS];
    for (int k = 0; k < nd; k++) shape[k] = xs[0]->data.shape[k];
    shape[axis] = 0;
    for (int i = 0; i < n; i++) {
        HSI_TRY(hsi_eng_check_float(xs[i], "concat", "input"));
        HSI_TRY(same_dtype(xs[0], xs[i], "concat"));
        int bad = xs[i]->data.ndim != nd;
        for (int k = 0; k < nd && !bad; k++)
            if (k != axis && xs[i]->data.shape[k] != xs[0]->data.shape[k]) bad = 1;
        if (bad) {
            char s1[96], s2[96];
            st = HSI_FAIL(HSI_ERR_ARG, "concat: input %d has shape %s, incompatible with %s on "
                                       "axis %d", i,
                          hsi_eng_shape_str(s1, sizeof s1, xs[i]->data.ndim, xs[i]->data.shape),
                          hsi_eng_shape_str(s2, sizeof s2, nd, xs[0]->data.shape), axis);
            goto cleanup;
        }
        in[i] = xs[i];
        shape[axis] += xs[i]->data.shape[axis];
    }
    HSI_TRY(hsi_op_output(out, g, xs[0]->data.dtype, nd, shape));
    int64_t os[HSI_MAX_DIMS];
    hsi_eng_packed_strides(nd, shape, os);
    size_t esz = hsi_dtype_size(xs[0]->data.dtype);
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        const hsi_view *v = &in[i]->data;
        int64_t ss[HSI_MAX_DIMS];
        for (int k = 0; k < nd; k++) ss[k] = v->strides[k] / (int64_t)esz;
        hsi_eng_copy_strided(v->dtype, nd, v->shape,
                             (char *)hsi_tensor_ptr(*out) + (size_t)(off * os[axis]) * esz, os,
                             (const char *)v->buf->data + v->offset, ss);
        off += v->shape[axis];
    }
    hsi_node *nd_ = hsi_op_record(g, "concat", bw_concat, *out, in, n);
    if (nd_) nd_->a0 = axis;
    HSI_TRY(hsi_op_check(*out, "concat"));
cleanup:
    return st;
}

/* ------------------------------------------------------ losses */

static hsi_status bw_log_softmax(hsi_node *n)
{
    void *dx = hsi_node_grad_in(n, 0);
    if (!dx) return HSI_OK;
    int64_t c = n->out->data.shape[n->out->data.ndim - 1];
    int64_t rows = c ? hsi_tensor_count(n->out) / c : 0;
    if (IS32(n->out))
        log_softmax_bwd_f32(dx, hsi_node_grad_out(n), hsi_tensor_ptr(n->out), rows, c);
    else
        log_softmax_bwd_f64(dx, hsi_node_grad_out(n), hsi_tensor_ptr(n->out), rows, c);
    return HSI_OK;
}

hsi_status hsi_log_softmax(hsi_tensor **out, hsi_graph *g, hsi_tensor *x)
{
    hsi_status st = HSI_OK;
    HSI_TRY(hsi_eng_check_float(x, "log_softmax", "x"));
    if (x->data.ndim != 2 || x->data.shape[1] < 1) {
        char s1[96];
        st = HSI_FAIL(HSI_ERR_ARG, "log_softmax: x %s, expected (N, C) with C >= 1",
                      hsi_eng_shape_str(s1, sizeof s1, x->data.ndim, x->data.shape));
        goto cleanup;
    }
    HSI_TRY(hsi_eng_packed(&x, g, x));
    HSI_TRY(hsi_op_output(out, g, x->data.dtype, 2, x->data.shape));
    if (IS32(x))
        log_softmax_fwd_f32(hsi_tensor_ptr(*out), hsi_tensor_ptr(x), x->data.shape[0],
                            x->data.shape[1]);
    else
        log_softmax_fwd_f64(hsi_tensor_ptr(*out), hsi_tensor_ptr(x), x->data.shape[0],
                            x->data.shape[1]);
    hsi_tensor *in[1] = {x};
    hsi_op_record(g, "log_softmax", bw_log_softmax, *out, in, 1);
    HSI_TRY(hsi_op_check(*out, "log_softmax"));
cleanup:
    return st;
}

void hsi_ce_opts_default(hsi_ce_opts *o)
{
    memset(o, 0, sizeof *o);
    o->ignore_index = -100;
}

typedef struct ce_saved {
    void *p;         /* softmax (N, C) */
    int64_t *tgt;    /* (N) */
    uint8_t *ign;    /* (N) */
    const void *w;   /* (C) or NULL, packed */
    double eps, wsum;
} ce_saved;

static hsi_status bw_ce(hsi_node *n)
{
    void *dz = hsi_node_grad_in(n, 0);
    if (!dz) return HSI_OK;
    const ce_saved *s = n->saved;
    int64_t N = n->in[0]->data.shape[0], C = n->in[0]->data.shape[1];
    double gy = IS32(n->out) ? *(const float *)hsi_node_grad_out(n)
                             : *(const double *)hsi_node_grad_out(n);
    double scale = gy / s->wsum;
    if (IS32(n->out))
        ce_bwd_f32(dz, s->p, s->tgt, s->ign, s->w, N, C, s->eps, scale);
    else
        ce_bwd_f64(dz, s->p, s->tgt, s->ign, s->w, N, C, s->eps, scale);
    return HSI_OK;
}

hsi_status hsi_cross_entropy(hsi_tensor **out, hsi_graph *g, hsi_tensor *logits,
                             hsi_tensor *target, const hsi_ce_opts *opts)
{
    hsi_status st = HSI_OK;
    hsi_ce_opts def;
    char s1[96];
    if (!opts) {
        hsi_ce_opts_default(&def);
        opts = &def;
    }
    HSI_TRY(hsi_eng_check_float(logits, "cross_entropy", "logits"));
    if (logits->data.ndim != 2 || logits->data.shape[1] < 1) {
        st = HSI_FAIL(HSI_ERR_ARG, "cross_entropy: logits %s, expected (N, C)",
                      hsi_eng_shape_str(s1, sizeof s1, logits->data.ndim, logits->data.shape));
        goto cleanup;
    }
    int64_t N = logits->data.shape[0], C = logits->data.shape[1];
    if (!target || target->data.ndim != 1 || target->data.shape[0] != N ||
        (target->data.dtype != HSI_I32 && target->data.dtype != HSI_I64)) {
        st = HSI_FAIL(HSI_ERR_ARG, "cross_entropy: target must be int32/int64 of shape (%lld)",
                      (long long)N);
        goto cleanup;
    }
    if (!(opts->label_smoothing >= 0 && opts->label_smoothing <= 1)) {
        st = HSI_FAIL(HSI_ERR_ARG, "cross_entropy: label_smoothing must be in [0, 1] (got %g)",
                      opts->label_smoothing);
        goto cleanup;
    }
    hsi_tensor *w = opts->weight;
    if (w) {
        HSI_TRY(hsi_eng_check_float(w, "cross_entropy", "weight"));
        HSI_TRY(same_dtype(logits, w, "cross_entropy"));
        if (w->data.ndim != 1 || w->data.shape[0] != C) {
            st = HSI_FAIL(HSI_ERR_ARG, "cross_entropy: weight %s, expected (%lld)",
                          hsi_eng_shape_str(s1, sizeof s1, w->data.ndim, w->data.shape),
                          (long long)C);
            goto cleanup;
        }
        HSI_TRY(hsi_eng_packed(&w, g, w));
    }
    HSI_TRY(hsi_eng_packed(&logits, g, logits));
    ce_saved *s = hsi_graph_scratch(g, sizeof *s);
    size_t esz = hsi_dtype_size(logits->data.dtype);
    if (s) {
        s->p = hsi_graph_scratch(g, (size_t)(N * C) * esz);
        s->tgt = hsi_graph_scratch(g, (size_t)N * sizeof(int64_t));
        s->ign = hsi_graph_scratch(g, (size_t)N + 1);
    }
    if (!s || !s->p || !s->tgt || !s->ign) return HSI_FAIL(HSI_ERR_NOMEM, "cross_entropy: arena");
    for (int64_t i = 0; i < N; i++) {
        int64_t idx[1] = {i};
        int64_t y = (int64_t)hsi_view_get_f64(&target->data, idx);
        s->ign[i] = y == opts->ignore_index;
        s->tgt[i] = s->ign[i] ? 0 : y;
        if (!s->ign[i] && (y < 0 || y >= C)) {
            st = HSI_FAIL(HSI_ERR_ARG, "cross_entropy: target[%lld] = %lld is outside 0..%lld "
                                       "(and is not the ignore index %lld)",
                          (long long)i, (long long)y, (long long)C - 1,
                          (long long)opts->ignore_index);
            goto cleanup;
        }
    }
    s->w = w ? hsi_tensor_ptr(w) : NULL;
    s->eps = opts->label_smoothing;
    double total;
    if (IS32(logits))
        total = ce_fwd_f32(s->p, hsi_tensor_ptr(logits), s->tgt, s->ign, s->w, N, C, s->eps,
                           &s->wsum);
    else
        total = ce_fwd_f64(s->p, hsi_tensor_ptr(logits), s->tgt, s->ign, s->w, N, C, s->eps,
                           &s->wsum);
    HSI_TRY(hsi_op_output(out, g, logits->data.dtype, 0, NULL));
    double loss = total / s->wsum; /* NaN when every sample is ignored, like PyTorch */
    if (IS32(logits))
        *(float *)hsi_tensor_ptr(*out) = (float)loss;
    else
        *(double *)hsi_tensor_ptr(*out) = loss;
    hsi_tensor *in[1] = {logits};
    hsi_node *n = hsi_op_record(g, "cross_entropy", bw_ce, *out, in, 1);
    if (n) n->saved = s;
    HSI_TRY(hsi_op_check(*out, "cross_entropy"));
cleanup:
    return st;
}

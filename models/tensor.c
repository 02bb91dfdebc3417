/* tensor.c — the engine core: memory accounting, RNG, grad/anomaly modes,
 * graph arenas, tensors, the backward walk, and the view-like ops (reshape,
 * permute, slice, contiguous, detach). Not the numeric ops (ops.c,
 * ops_layers.c). */
#include "models/tensor_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------ memory accounting */

static int64_t g_live, g_peak, g_allocs, g_frees;

void hsi_mem_get(hsi_mem_stats *out)
{
    out->live_bytes = __atomic_load_n(&g_live, __ATOMIC_RELAXED);
    out->peak_bytes = __atomic_load_n(&g_peak, __ATOMIC_RELAXED);
    out->n_allocs = __atomic_load_n(&g_allocs, __ATOMIC_RELAXED);
    out->n_frees = __atomic_load_n(&g_frees, __ATOMIC_RELAXED);
}

void hsi_mem_reset_peak(void) { __atomic_store_n(&g_peak, g_live, __ATOMIC_RELAXED); }

void hsi_mem_report(FILE *fp)
{
    hsi_mem_stats s;
    hsi_mem_get(&s);
    fprintf(fp, "engine memory: live %.2f MiB, peak %.2f MiB, %lld allocations, %lld frees\n",
            s.live_bytes / 1048576.0, s.peak_bytes / 1048576.0, (long long)s.n_allocs,
            (long long)s.n_frees);
}

void *hsi_mem_alloc(size_t size)
{
    /* the size is kept in a 64-byte prefix so that free can account it */
    char *p = hsi_aligned_alloc(size + 64);
    if (!p) return NULL;
    *(size_t *)p = size;
    int64_t live = __atomic_add_fetch(&g_live, (int64_t)size, __ATOMIC_RELAXED);
    __atomic_add_fetch(&g_allocs, 1, __ATOMIC_RELAXED);
    int64_t pk = __atomic_load_n(&g_peak, __ATOMIC_RELAXED);
    while (live > pk &&
           !__atomic_compare_exchange_n(&g_peak, &pk, live, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    return p + 64;
}

void hsi_mem_free(void *p)
{
    if (!p) return;
    char *base = (char *)p - 64;
    __atomic_sub_fetch(&g_live, (int64_t) * (size_t *)base, __ATOMIC_RELAXED);
    __atomic_add_fetch(&g_frees, 1, __ATOMIC_RELAXED);
    hsi_aligned_free(base);
}

static void mem_buffer_release(hsi_buffer *b) { hsi_mem_free(b->data); }

hsi_status hsi_mem_buffer(hsi_buffer **out, size_t size)
{
    *out = NULL;
    void *p = hsi_mem_alloc(size ? size : 1);
    if (!p) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory allocating %zu bytes", size);
    memset(p, 0, size);
    hsi_status st = hsi_buffer_wrap(out, p, size, HSI_BUF_HOST, mem_buffer_release, NULL);
    if (st != HSI_OK) hsi_mem_free(p);
    return st;
}

/* ------------------------------------------------------------ RNG */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void hsi_rng_seed(hsi_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t hsi_rng_next(hsi_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double hsi_rng_uniform(hsi_rng *r) { return (double)(hsi_rng_next(r) >> 11) * 0x1.0p-53; }

double hsi_rng_normal(hsi_rng *r)
{
    double u1 = hsi_rng_uniform(r), u2 = hsi_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static hsi_rng g_rng = {{0x853c49e6748fea9bULL, 0xda3e39cb94b95bdbULL, 0x0123456789abcdefULL,
                         0xfedcba9876543210ULL}};
hsi_rng *hsi_default_rng(void) { return &g_rng; }
void hsi_manual_seed(uint64_t seed) { hsi_rng_seed(&g_rng, seed); }

/* ------------------------------------------------------ modes */

static _Thread_local int tl_no_grad;
static _Thread_local const char *tl_layer;
static int g_anomaly;
static __thread hsi_backward_hook_fn g_bw_hook;
static __thread void *g_bw_hook_ctx;

void hsi_backward_set_hook(hsi_backward_hook_fn fn, void *ctx)
{
    g_bw_hook = fn;
    g_bw_hook_ctx = ctx;
}

int hsi_set_grad_enabled(int on)
{
    int prev = !tl_no_grad;
    tl_no_grad = !on;
    return prev;
}
int hsi_is_grad_enabled(void) { return !tl_no_grad; }
void hsi_set_anomaly(int on) { g_anomaly = on; }
int hsi_anomaly_enabled(void) { return g_anomaly; }
/* ------------------------------------------------------ op profiler */

#define PROF_MAX 256
typedef struct prof_entry {
    const char *op, *layer; /* compared by pointer: both are static / module-owned */
    double fwd, bwd;
} prof_entry;
static struct {
    int on, n;
    double mark;
    prof_entry e[PROF_MAX];
} g_prof;

void hsi_op_profile(int on)
{
    if (on) g_prof.n = 0;
    g_prof.on = on;
    g_prof.mark = hsi_now();
}

void hsi_op_profile_mark(void) { g_prof.mark = hsi_now(); }

static void prof_add(const char *op, const char *layer, double fwd, double bwd)
{
    int i = 0;
    while (i < g_prof.n && !(g_prof.e[i].op == op && g_prof.e[i].layer == layer)) i++;
    if (i == g_prof.n) {
        if (g_prof.n == PROF_MAX) return;
        g_prof.e[g_prof.n++] = (prof_entry){op, layer, 0, 0};
    }
    g_prof.e[i].fwd += fwd, g_prof.e[i].bwd += bwd;
}

int hsi_op_profile_on(void) { return g_prof.on; }

void hsi_op_profile_add(const char *op, const char *layer, double fwd_s, double bwd_s)
{
    if (g_prof.on) prof_add(op, layer, fwd_s, bwd_s);
}

static int prof_cmp(const void *a, const void *b)
{
    const prof_entry *x = a, *y = b;
    double u = x->fwd + x->bwd, v = y->fwd + y->bwd;
    return u < v ? 1 : u > v ? -1 : 0;
}

void hsi_op_profile_report(FILE *f, int steps)
{
    prof_entry e[PROF_MAX];
    int n = g_prof.n;
    double tf = 0, tb = 0, k = steps > 0 ? 1e3 / steps : 1e3;
    memcpy(e, g_prof.e, sizeof e[0] * (size_t)n);
    qsort(e, (size_t)n, sizeof e[0], prof_cmp);
    fprintf(f, "  %-18s %-14s %10s %10s %10s\n", "op", "layer", "fwd ms", "bwd ms", "total");
    for (int i = 0; i < n; i++) {
        fprintf(f, "  %-18s %-14s %10.3f %10.3f %10.3f\n", e[i].op,
                e[i].layer ? e[i].layer : "-", e[i].fwd * k, e[i].bwd * k,
                (e[i].fwd + e[i].bwd) * k);
        tf += e[i].fwd, tb += e[i].bwd;
    }
    fprintf(f, "  %-18s %-14s %10.3f %10.3f %10.3f\n", "all ops", "", tf * k, tb * k,
            (tf + tb) * k);
}

const char *hsi_set_layer_name(const char *name)
{
    const char *prev = tl_layer;
    tl_layer = name;
    return prev;
}

/* ---------------------------------------------------------- graphs */

#define MAX_BLOCKS 48
typedef struct arena_block {
    hsi_buffer *buf;
    size_t used;
} arena_block;

struct hsi_graph {
    arena_block blocks[MAX_BLOCKS];
    int n_blocks;
    size_t high_water; /* bytes used in the fullest step so far */
    hsi_node *last;
    int64_t n_nodes;
};

hsi_status hsi_graph_new(hsi_graph **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory allocating a graph");
    return HSI_OK;
}

static size_t arena_used(const hsi_graph *g)
{
    size_t u = 0;
    for (int i = 0; i < g->n_blocks; i++) u += g->blocks[i].used;
    return u;
}

void hsi_graph_reset(hsi_graph *g)
{
    if (!g) return;
    size_t used = arena_used(g);
    if (used > g->high_water) g->high_water = used;
    if (g->n_blocks > 1) { /* coalesce: the next step fits in one block */
        for (int i = 0; i < g->n_blocks; i++) hsi_buffer_release(g->blocks[i].buf);
        g->n_blocks = 0;
        hsi_buffer *b = NULL;
        size_t cap = g->high_water + g->high_water / 8 + 4096;
        if (hsi_mem_buffer(&b, cap) == HSI_OK) {
            g->blocks[0].buf = b;
            g->n_blocks = 1;
        }
    }
    for (int i = 0; i < g->n_blocks; i++) g->blocks[i].used = 0;
    g->last = NULL;
    g->n_nodes = 0;
}

void hsi_graph_free(hsi_graph *g)
{
    if (!g) return;
    for (int i = 0; i < g->n_blocks; i++) hsi_buffer_release(g->blocks[i].buf);
    free(g);
}

int64_t hsi_graph_arena_bytes(const hsi_graph *g)
{
    int64_t n = 0;
    for (int i = 0; i < g->n_blocks; i++) n += (int64_t)g->blocks[i].buf->size;
    return n;
}

int64_t hsi_graph_n_nodes(const hsi_graph *g) { return g->n_nodes; }

/* Bump allocation; returns the block too so that views can point at it. */
static void *arena_alloc(hsi_graph *g, size_t size, hsi_buffer **blk)
{
    size = (size + 63) & ~(size_t)63;
    if (g->n_blocks > 0) {
        arena_block *b = &g->blocks[g->n_blocks - 1];
        if (b->used + size <= b->buf->size) {
            void *p = (char *)b->buf->data + b->used;
            b->used += size;
            if (blk) *blk = b->buf;
            return p;
        }
    }
    if (g->n_blocks == MAX_BLOCKS) {
        HSI_FAIL(HSI_ERR_NOMEM, "graph arena: more than %d blocks (call hsi_graph_reset "
                                "between steps)", MAX_BLOCKS);
        return NULL;
    }
    size_t cap = 1 << 20;
    if (g->n_blocks > 0) cap = g->blocks[g->n_blocks - 1].buf->size * 2;
    if (cap < size) cap = size;
    hsi_buffer *nb = NULL;
    if (hsi_mem_buffer(&nb, cap) != HSI_OK) return NULL;
    g->blocks[g->n_blocks].buf = nb;
    g->blocks[g->n_blocks].used = size;
    g->n_blocks++;
    if (blk) *blk = nb;
    return nb->data;
}

void *hsi_graph_scratch(hsi_graph *g, size_t size) { return arena_alloc(g, size, NULL); }

void *hsi_eng_zeroed(hsi_graph *g, size_t size)
{
    void *p = arena_alloc(g, size, NULL);
    if (p) memset(p, 0, size);
    return p;
}

/* -------------------------------------------------------- helpers */

void hsi_eng_packed_strides(int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int k = ndim - 1; k >= 0; k--) {
        strides[k] = s;
        s *= shape[k];
    }
}

const char *hsi_eng_shape_str(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t o = (size_t)snprintf(buf, n, "(");
    for (int k = 0; k < ndim && o < n; k++)
        o += (size_t)snprintf(buf + o, n - o, k ? ", %lld" : "%lld", (long long)shape[k]);
    if (o < n) snprintf(buf + o, n - o, ")");
    return buf;
}

hsi_status hsi_eng_check_float(const hsi_tensor *t, const char *op, const char *arg)
{
    if (!t) return HSI_FAIL(HSI_ERR_ARG, "%s: %s is NULL", op, arg);
    if (t->data.dtype != HSI_F32 && t->data.dtype != HSI_F64)
        return HSI_FAIL(HSI_ERR_UNSUPPORTED, "%s: %s has dtype %s, expected float32 or float64",
                        op, arg, hsi_dtype_name(t->data.dtype));
    if (t->data.buf->kind == HSI_BUF_DEVICE)
        return HSI_FAIL(HSI_ERR_UNSUPPORTED, "%s: %s is on a device; the CPU engine needs host "
                                             "memory", op, arg);
    if (t->data.swapped)
        return HSI_FAIL(HSI_ERR_UNSUPPORTED, "%s: %s is byte-swapped; convert it first", op, arg);
    return HSI_OK;
}

/* Pads to 5 dims (leading 1s) and runs f over rows of the last axis. */
#define STRIDED_LOOP(T, BODY)                                                                  \
    do {                                                                                       \
        int64_t sh[5], ds[5], ss[5];                                                           \
        int pad = 5 - ndim;                                                                    \
        for (int k = 0; k < 5; k++) {                                                          \
            sh[k] = k < pad ? 1 : shape[k - pad];                                              \
            ds[k] = k < pad ? 0 : dst_strides[k - pad];                                        \
            ss[k] = k < pad ? 0 : src_strides[k - pad];                                        \
        }                                                                                      \
        T *d0 = (T *)dst;                                                                      \
        const T *s0 = (const T *)src;                                                          \
        for (int64_t i0 = 0; i0 < sh[0]; i0++)                                                 \
            for (int64_t i1 = 0; i1 < sh[1]; i1++)                                             \
                for (int64_t i2 = 0; i2 < sh[2]; i2++)                                         \
                    for (int64_t i3 = 0; i3 < sh[3]; i3++) {                                   \
                        T *d = d0 + i0 * ds[0] + i1 * ds[1] + i2 * ds[2] + i3 * ds[3];         \
                        const T *s = s0 + i0 * ss[0] + i1 * ss[1] + i2 * ss[2] + i3 * ss[3];   \
                        int64_t n4 = sh[4], dd = ds[4], sd = ss[4];                            \
                        if (dd == 1 && sd == 1) {                                              \
                            for (int64_t i = 0; i < n4; i++) { BODY(d[i], s[i]); }             \
                        } else {                                                               \
                            for (int64_t i = 0; i < n4; i++) { BODY(d[i * dd], s[i * sd]); }   \
                        }                                                                      \
                    }                                                                          \
    } while (0)

#define ACC_BODY(a, b) (a) += (b)
#define COPY_BODY(a, b) (a) = (b)

void hsi_eng_acc_strided(hsi_dtype dt, int ndim, const int64_t *shape, void *dst,
                         const int64_t *dst_strides, const void *src,
                         const int64_t *src_strides)
{
    if (dt == HSI_F32)
        STRIDED_LOOP(float, ACC_BODY);
    else
        STRIDED_LOOP(double, ACC_BODY);
}

void hsi_eng_copy_strided(hsi_dtype dt, int ndim, const int64_t *shape, void *dst,
                          const int64_t *dst_strides, const void *src,
                          const int64_t *src_strides)
{
    if (dt == HSI_F32)
        STRIDED_LOOP(float, COPY_BODY);
    else if (dt == HSI_F64)
        STRIDED_LOOP(double, COPY_BODY);
    else if (hsi_dtype_size(dt) == 8)
        STRIDED_LOOP(int64_t, COPY_BODY);
    else if (hsi_dtype_size(dt) == 4)
        STRIDED_LOOP(int32_t, COPY_BODY);
    else
        HSI_ASSERT(!"copy_strided: element size");
}

static void view_elem_strides(const hsi_view *v, int64_t *es)
{
    int64_t esz = (int64_t)hsi_dtype_size(v->dtype);
    for (int k = 0; k < v->ndim; k++) es[k] = v->strides[k] / esz;
}

/* -------------------------------------------------------- tensors */

static hsi_tensor *tensor_struct(hsi_graph *g)
{
    hsi_tensor *t = g ? arena_alloc(g, sizeof *t, NULL) : calloc(1, sizeof *t);
    if (!t) return NULL;
    memset(t, 0, sizeof *t);
    t->device = -1;
    t->graph = g;
    t->is_leaf = 1;
    return t;
}

hsi_status hsi_tensor_new(hsi_tensor **out, hsi_dtype dtype, int ndim, const int64_t *shape,
                          int requires_grad)
{
    hsi_status st = HSI_OK;
    hsi_buffer *b = NULL;
    *out = NULL;
    if (ndim < 0 || ndim > HSI_MAX_DIMS)
        return HSI_FAIL(HSI_ERR_ARG, "tensor: ndim %d outside 0..%d", ndim, HSI_MAX_DIMS);
    int64_t n = (int64_t)hsi_dtype_size(dtype);
    if (!n) return HSI_FAIL(HSI_ERR_ARG, "tensor: invalid dtype %d", (int)dtype);
    for (int k = 0; k < ndim; k++) {
        if (shape[k] < 0 || !hsi_mul_ok(n, shape[k], &n))
            return HSI_FAIL(HSI_ERR_OVERFLOW, "tensor: shape axis %d (%lld) negative or too big",
                            k, (long long)shape[k]);
    }
    hsi_tensor *t = tensor_struct(NULL);
    if (!t) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    HSI_TRY(hsi_mem_buffer(&b, (size_t)n));
    HSI_TRY(hsi_view_make_packed(&t->data, b, 0, dtype, ndim, shape));
    t->owns_view = 1;
    hsi_buffer_release(b);
    b = NULL;
    if (requires_grad) HSI_TRY(hsi_tensor_set_requires_grad(t, 1));
    *out = t;
    return HSI_OK;
cleanup:
    hsi_buffer_release(b);
    hsi_tensor_free(t);
    return st;
}

hsi_status hsi_tensor_from_view(hsi_tensor **out, const hsi_view *v, int requires_grad)
{
    *out = NULL;
    hsi_tensor *t = tensor_struct(NULL);
    if (!t) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    hsi_view_ref(&t->data, v);
    t->owns_view = 1;
    hsi_status st = HSI_OK;
    if (requires_grad) st = hsi_tensor_set_requires_grad(t, 1);
    if (st != HSI_OK) {
        hsi_tensor_free(t);
        return st;
    }
    *out = t;
    return HSI_OK;
}

void hsi_tensor_free(hsi_tensor *t)
{
    if (!t) return;
    HSI_ASSERT(t->graph == NULL); /* arena tensors go with their graph */
    if (t->grad && t->grad->graph == NULL) hsi_tensor_free(t->grad);
    if (t->owns_view) hsi_view_release(&t->data);
    free(t);
}

hsi_status hsi_graph_tensor(hsi_tensor **out, hsi_graph *g, hsi_dtype dtype, int ndim,
                            const int64_t *shape, int requires_grad)
{
    HSI_ASSERT(g);
    hsi_status st = hsi_op_output(out, g, dtype, ndim, shape);
    if (st != HSI_OK) return st;
    if (requires_grad) return hsi_tensor_set_requires_grad(*out, 1);
    return HSI_OK;
}

hsi_status hsi_tensor_set_requires_grad(hsi_tensor *t, int on)
{
    if (!t->is_leaf)
        return HSI_FAIL(HSI_ERR_STATE, "requires_grad can only be changed on a leaf tensor "
                                       "(this one was made by op '%s')",
                        t->grad_fn ? t->grad_fn->op : "?");
    if (on && t->data.dtype != HSI_F32 && t->data.dtype != HSI_F64)
        return HSI_FAIL(HSI_ERR_ARG, "only float32/float64 tensors can require gradients "
                                     "(this one is %s)", hsi_dtype_name(t->data.dtype));
    t->requires_grad = !!on;
    return HSI_OK;
}

void hsi_tensor_retain_grad(hsi_tensor *t) { t->retain_grad = 1; }

void *hsi_tensor_ptr(const hsi_tensor *t)
{
    HSI_ASSERT(hsi_view_is_packed(&t->data));
    return (char *)t->data.buf->data + t->data.offset;
}

int64_t hsi_tensor_count(const hsi_tensor *t) { return hsi_view_count(&t->data); }

void hsi_tensor_zero_grad(hsi_tensor *t)
{
    if (t && t->grad) memset(hsi_tensor_ptr(t->grad), 0, (size_t)hsi_view_nbytes(&t->grad->data));
}

double hsi_tensor_item(const hsi_tensor *t)
{
    int64_t idx[HSI_MAX_DIMS] = {0};
    HSI_ASSERT(hsi_view_count(&t->data) == 1);
    return hsi_view_get_f64(&t->data, idx);
}

hsi_status hsi_op_output(hsi_tensor **out, hsi_graph *g, hsi_dtype dtype, int ndim,
                         const int64_t *shape)
{
    *out = NULL;
    int64_t n = (int64_t)hsi_dtype_size(dtype);
    for (int k = 0; k < ndim; k++) {
        if (shape[k] < 0 || !hsi_mul_ok(n, shape[k], &n))
            return HSI_FAIL(HSI_ERR_OVERFLOW, "op output: shape axis %d (%lld) too big", k,
                            (long long)shape[k]);
    }
    hsi_tensor *t = tensor_struct(g);
    hsi_buffer *blk = NULL;
    void *p = t ? arena_alloc(g, (size_t)(n ? n : 1), &blk) : NULL;
    if (!p) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory in the graph arena (%lld bytes)",
                            (long long)n);
    /* a borrowed view: the arena owns the block */
    hsi_view *v = &t->data;
    v->buf = blk;
    v->offset = (char *)p - (char *)blk->data;
    v->dtype = dtype;
    v->ndim = ndim;
    v->swapped = 0;
    int64_t es[HSI_MAX_DIMS];
    hsi_eng_packed_strides(ndim, shape, es);
    for (int k = 0; k < ndim; k++) {
        v->shape[k] = shape[k];
        v->strides[k] = es[k] * (int64_t)hsi_dtype_size(dtype);
    }
    *out = t;
    return HSI_OK;
}

hsi_node *hsi_op_record(hsi_graph *g, const char *op, hsi_backward_fn bw, hsi_tensor *out,
                        hsi_tensor *const *in, int n_in)
{
    if (g_prof.on) {
        double t = hsi_now();
        prof_add(op, tl_layer, t - g_prof.mark, 0);
        g_prof.mark = t;
    }
    if (tl_no_grad) return NULL;
    int any = 0;
    for (int i = 0; i < n_in; i++)
        if (in[i] && in[i]->requires_grad) any = 1;
    if (!any) return NULL;
    hsi_node *n = arena_alloc(g, sizeof *n + sizeof(hsi_tensor *) * (size_t)n_in, NULL);
    if (!n) return NULL;
    memset(n, 0, sizeof *n);
    n->op = op;
    n->layer = tl_layer;
    n->backward = bw;
    n->out = out;
    n->in = (hsi_tensor **)(n + 1);
    for (int i = 0; i < n_in; i++) n->in[i] = in[i];
    n->n_in = n_in;
    n->graph = g;
    n->prev = g->last;
    g->last = n;
    g->n_nodes++;
    out->grad_fn = n;
    out->requires_grad = 1;
    out->is_leaf = 0;
    return n;
}

static hsi_status check_finite(const void *p, hsi_dtype dt, int64_t n, int64_t *bad, double *val)
{
    if (dt == HSI_F32) {
        const float *f = p;
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(f[i])) {
                *bad = i;
                *val = f[i];
                return HSI_ERR_NUMERIC;
            }
    } else if (dt == HSI_F64) {
        const double *f = p;
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(f[i])) {
                *bad = i;
                *val = f[i];
                return HSI_ERR_NUMERIC;
            }
    }
    return HSI_OK;
}

hsi_status hsi_op_check(hsi_tensor *out, const char *op)
{
    if (!g_anomaly || !hsi_view_is_packed(&out->data)) return HSI_OK;
    int64_t bad = 0;
    double val = 0;
    if (check_finite(hsi_tensor_ptr(out), out->data.dtype, hsi_tensor_count(out), &bad, &val) ==
        HSI_OK)
        return HSI_OK;
    char sh[96];
    hsi_eng_shape_str(sh, sizeof sh, out->data.ndim, out->data.shape);
    return HSI_FAIL(HSI_ERR_NUMERIC,
                    "anomaly: forward of op '%s' in layer '%s' produced %s at element %lld of "
                    "its output %s",
                    op, tl_layer ? tl_layer : "(none)", isnan(val) ? "NaN" : "Inf",
                    (long long)bad, sh);
}

/* ------------------------------------------------------- backward */

static size_t tensor_bytes(const hsi_tensor *t)
{
    return (size_t)hsi_view_count(&t->data) * hsi_dtype_size(t->data.dtype);
}

static hsi_status leaf_grad(hsi_tensor *t, hsi_graph *g)
{
    if (t->grad) return HSI_OK;
    if (t->graph == NULL)
        return hsi_tensor_new(&t->grad, t->data.dtype, t->data.ndim, t->data.shape, 0);
    hsi_status st = hsi_op_output(&t->grad, t->graph, t->data.dtype, t->data.ndim, t->data.shape);
    if (st == HSI_OK) memset(hsi_tensor_ptr(t->grad), 0, tensor_bytes(t));
    (void)g;
    return st;
}

void *hsi_node_grad_out(hsi_node *n) { return n->out->gflow; }

void *hsi_node_grad_in(hsi_node *n, int i)
{
    hsi_tensor *t = n->in[i];
    if (!t || !t->requires_grad) return NULL;
    if (!t->grad_fn) { /* leaf: accumulate straight into .grad */
        if (leaf_grad(t, n->graph) != HSI_OK) return NULL;
        return hsi_tensor_ptr(t->grad);
    }
    if (!t->gflow) t->gflow = hsi_eng_zeroed(n->graph, tensor_bytes(t));
    return t->gflow;
}

void *hsi_node_grad_in_fresh(hsi_node *n, int i, int *fresh)
{
    *fresh = 0;
    hsi_tensor *t = n->in[i];
    if (t && t->requires_grad && t->grad_fn && !t->gflow) {
        t->gflow = arena_alloc(n->graph, tensor_bytes(t), NULL);
        *fresh = t->gflow != NULL;
        return t->gflow;
    }
    return hsi_node_grad_in(n, i);
}

static void add_into(hsi_dtype dt, void *dst, const void *src, int64_t n)
{
    if (dt == HSI_F32) {
        float *d = dst;
        const float *s = src;
        for (int64_t i = 0; i < n; i++) d[i] += s[i];
    } else {
        double *d = dst;
        const double *s = src;
        for (int64_t i = 0; i < n; i++) d[i] += s[i];
    }
}

hsi_status hsi_backward_grad(hsi_tensor *out, const void *grad_out, int retain_graph)
{
    hsi_status st = HSI_OK;
    if (!out->requires_grad)
        return HSI_FAIL(HSI_ERR_STATE, "backward: the tensor does not require grad and has no "
                                       "grad_fn (was it computed in no-grad mode, or from "
                                       "inputs that do not require grad?)");
    int64_t cnt = hsi_tensor_count(out);
    if (!out->grad_fn) { /* a leaf: its gradient is the upstream one */
        HSI_TRY(leaf_grad(out, NULL));
        add_into(out->data.dtype, hsi_tensor_ptr(out->grad), grad_out, cnt);
        return HSI_OK;
    }
    hsi_node *top = out->grad_fn;
    if (top->freed)
        return HSI_FAIL(HSI_ERR_STATE,
                        "backward: trying to backward through the graph a second time: op '%s' "
                        "(layer '%s') was freed by the first hsi_backward; pass retain_graph = 1 "
                        "to the first call if you need to backward twice",
                        top->op, top->layer ? top->layer : "(none)");
    hsi_graph *g = top->graph;
    for (hsi_node *n = top; n; n = n->prev) n->out->gflow = NULL;
    out->gflow = arena_alloc(g, tensor_bytes(out), NULL);
    if (!out->gflow) return HSI_FAIL(HSI_ERR_NOMEM, "backward: out of arena memory");
    memcpy(out->gflow, grad_out, tensor_bytes(out));
    for (hsi_node *n = top; n; n = n->prev) {
        hsi_tensor *o = n->out;
        if (!o->gflow) continue; /* not on a path from the loss */
        if (n->freed) {
            st = HSI_FAIL(HSI_ERR_STATE,
                          "backward: trying to backward through the graph a second time: op "
                          "'%s' (layer '%s') was freed by an earlier hsi_backward; pass "
                          "retain_graph = 1 to the earlier call",
                          n->op, n->layer ? n->layer : "(none)");
            goto cleanup;
        }
        if (o->retain_grad) {
            if (!o->grad) {
                HSI_TRY(hsi_op_output(&o->grad, g, o->data.dtype, o->data.ndim, o->data.shape));
                memset(hsi_tensor_ptr(o->grad), 0, tensor_bytes(o));
            }
            add_into(o->data.dtype, hsi_tensor_ptr(o->grad), o->gflow, hsi_tensor_count(o));
        }
        const char *prev_layer = hsi_set_layer_name(n->layer);
        double t0 = g_prof.on ? hsi_now() : 0;
        st = n->backward(n);
        if (g_prof.on) prof_add(n->op, n->layer, 0, hsi_now() - t0);
        hsi_set_layer_name(prev_layer);
        if (st != HSI_OK) {
            hsi_fail_context(st, "backward of op '%s' (layer '%s')", n->op,
                             n->layer ? n->layer : "(none)");
            goto cleanup;
        }
        if (g_anomaly) {
            for (int i = 0; i < n->n_in; i++) {
                hsi_tensor *t = n->in[i];
                if (!t || !t->requires_grad) continue;
                const void *gp = t->grad_fn ? t->gflow : (t->grad ? hsi_tensor_ptr(t->grad) : 0);
                int64_t bad = 0;
                double val = 0;
                if (gp && check_finite(gp, t->data.dtype, hsi_tensor_count(t), &bad, &val)) {
                    st = HSI_FAIL(HSI_ERR_NUMERIC,
                                  "anomaly: backward of op '%s' in layer '%s' produced %s in "
                                  "the gradient of its input %d (element %lld)",
                                  n->op, n->layer ? n->layer : "(none)",
                                  isnan(val) ? "NaN" : "Inf", i, (long long)bad);
                    goto cleanup;
                }
            }
        }
        if (!retain_graph) n->freed = 1;
        if (g_bw_hook) {
            st = g_bw_hook(g_bw_hook_ctx, n);
            if (st != HSI_OK) goto cleanup;
        }
    }
cleanup:
    return st;
}

hsi_status hsi_backward(hsi_tensor *loss, int retain_graph)
{
    if (hsi_tensor_count(loss) != 1) {
        char sh[96];
        return HSI_FAIL(HSI_ERR_ARG, "backward: the loss must be a scalar, found shape %s (use "
                                     "hsi_backward_grad for a vector-Jacobian product)",
                        hsi_eng_shape_str(sh, sizeof sh, loss->data.ndim, loss->data.shape));
    }
    double one = 1.0;
    float onef = 1.0f;
    return hsi_backward_grad(loss, loss->data.dtype == HSI_F32 ? (void *)&onef : (void *)&one,
                             retain_graph);
}

/* --------------------------------------------------- view-like ops */

/* an arena tensor whose data is a (borrowed) view */
static hsi_status view_output(hsi_tensor **out, hsi_graph *g, const hsi_view *v)
{
    hsi_tensor *t = tensor_struct(g);
    if (!t) return HSI_FAIL(HSI_ERR_NOMEM, "out of arena memory");
    t->data = *v; /* borrowed: the base tensor must outlive the graph step */
    *out = t;
    return HSI_OK;
}

hsi_status hsi_detach(hsi_tensor **out, hsi_graph *g, hsi_tensor *x)
{
    return view_output(out, g, &x->data);
}

static hsi_status bw_flat(hsi_node *n) /* reshape/view/contiguous: same packed order */
{
    void *dx = hsi_node_grad_in(n, 0);
    if (dx) add_into(n->out->data.dtype, dx, hsi_node_grad_out(n), hsi_tensor_count(n->out));
    return HSI_OK;
}

static hsi_status infer_shape(int64_t *shape, int ndim, const int64_t *in_shape, int64_t count,
                              const char *op)
{
    int neg = -1;
    int64_t p = 1;
    for (int k = 0; k < ndim; k++) {
        shape[k] = in_shape[k];
        if (shape[k] == -1) {
            if (neg >= 0) return HSI_FAIL(HSI_ERR_ARG, "%s: only one -1 allowed in a shape", op);
            neg = k;
        } else {
            p *= shape[k];
        }
    }
    if (neg >= 0) shape[neg] = p ? count / p : 0;
    int64_t q = 1;
    for (int k = 0; k < ndim; k++) q *= shape[k];
    if (q != count) {
        char sh[96];
        return HSI_FAIL(HSI_ERR_ARG, "%s: %lld elements cannot take the shape %s", op,
                        (long long)count, hsi_eng_shape_str(sh, sizeof sh, ndim, shape));
    }
    return HSI_OK;
}

hsi_status hsi_view_as_shape(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, int ndim,
                             const int64_t *shape)
{
    int64_t sh[HSI_MAX_DIMS];
    hsi_view v;
    if (ndim < 0 || ndim > HSI_MAX_DIMS) return HSI_FAIL(HSI_ERR_ARG, "view: ndim %d", ndim);
    hsi_status st = infer_shape(sh, ndim, shape, hsi_tensor_count(x), "view");
    if (st != HSI_OK) return st;
    st = hsi_view_reshape(&v, &x->data, ndim, sh);
    if (st != HSI_OK) return st;
    hsi_buffer_release(v.buf); /* borrowed, like every arena view */
    st = view_output(out, g, &v);
    if (st != HSI_OK) return st;
    hsi_tensor *in[1] = {x};
    hsi_op_record(g, "view", bw_flat, *out, in, 1);
    return HSI_OK;
}

hsi_status hsi_contiguous(hsi_tensor **out, hsi_graph *g, hsi_tensor *x)
{
    if (hsi_view_is_packed(&x->data)) {
        *out = x;
        return HSI_OK;
    }
    hsi_status st = hsi_op_output(out, g, x->data.dtype, x->data.ndim, x->data.shape);
    if (st != HSI_OK) return st;
    if (x->data.swapped || x->data.buf->kind == HSI_BUF_DEVICE) {
        st = hsi_view_copy(&(*out)->data, &x->data);
        if (st != HSI_OK) return st;
    } else {
        int64_t ds[HSI_MAX_DIMS], ss[HSI_MAX_DIMS];
        hsi_eng_packed_strides(x->data.ndim, x->data.shape, ds);
        view_elem_strides(&x->data, ss);
        hsi_eng_copy_strided(x->data.dtype, x->data.ndim, x->data.shape, hsi_tensor_ptr(*out), ds,
                             (char *)x->data.buf->data + x->data.offset, ss);
    }
    hsi_tensor *in[1] = {x};
    hsi_op_record(g, "contiguous", bw_flat, *out, in, 1);
    return HSI_OK;
}

hsi_status hsi_eng_packed(hsi_tensor **out, hsi_graph *g, hsi_tensor *x)
{
    return hsi_contiguous(out, g, x);
}

hsi_status hsi_reshape(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, int ndim,
                       const int64_t *shape)
{
    int64_t sh[HSI_MAX_DIMS];
    hsi_view v;
    if (ndim < 0 || ndim > HSI_MAX_DIMS) return HSI_FAIL(HSI_ERR_ARG, "reshape: ndim %d", ndim);
    hsi_status st = infer_shape(sh, ndim, shape, hsi_tensor_count(x), "reshape");
    if (st != HSI_OK) return st;
    if (hsi_view_reshape(&v, &x->data, ndim, sh) == HSI_OK) {
        hsi_buffer_release(v.buf);
        return hsi_view_as_shape(out, g, x, ndim, sh);
    }
    hsi_clear_error();
    hsi_tensor *c = NULL;
    st = hsi_contiguous(&c, g, x);
    if (st != HSI_OK) return st;
    return hsi_view_as_shape(out, g, c, ndim, sh);
}

hsi_status hsi_flatten(hsi_tensor **out, hsi_graph *g, hsi_tensor *x)
{
    int64_t sh[2] = {x->data.ndim ? x->data.shape[0] : 1, -1};
    if (sh[0] == 0) sh[1] = 0;
    return hsi_reshape(out, g, x, 2, sh);
}

static hsi_status bw_permute(hsi_node *n)
{
    void *dx = hsi_node_grad_in(n, 0);
    if (!dx) return HSI_OK;
    const int *perm = n->saved;
    hsi_tensor *x = n->in[0], *y = n->out;
    int64_t xs[HSI_MAX_DIMS], ds[HSI_MAX_DIMS], ys[HSI_MAX_DIMS];
    hsi_eng_packed_strides(x->data.ndim, x->data.shape, xs);
    for (int k = 0; k < y->data.ndim; k++) ds[k] = xs[perm[k]];
    hsi_eng_packed_strides(y->data.ndim, y->data.shape, ys);
    hsi_eng_acc_strided(y->data.dtype, y->data.ndim, y->data.shape, dx, ds, y->gflow, ys);
    return HSI_OK;
}

hsi_status hsi_permute(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, const int *perm)
{
    hsi_view v;
    hsi_status st = hsi_view_permute(&v, &x->data, perm);
    if (st != HSI_OK) return st;
    hsi_buffer_release(v.buf);
    st = view_output(out, g, &v);
    if (st != HSI_OK) return st;
    hsi_tensor *in[1] = {x};
    hsi_node *n = hsi_op_record(g, "permute", bw_permute, *out, in, 1);
    if (n) {
        int *p = hsi_graph_scratch(g, sizeof(int) * HSI_MAX_DIMS);
        if (!p) return HSI_FAIL(HSI_ERR_NOMEM, "permute: out of arena memory");
        memcpy(p, perm, sizeof(int) * (size_t)x->data.ndim);
        n->saved = p;
    }
    return HSI_OK;
}

typedef struct slice_saved {
    int axis;
    int64_t start, step;
} slice_saved;

static hsi_status bw_slice(hsi_node *n)
{
    void *dx = hsi_node_grad_in(n, 0);
    if (!dx) return HSI_OK;
    const slice_saved *s = n->saved;
    hsi_tensor *x = n->in[0], *y = n->out;
    int64_t xs[HSI_MAX_DIMS], ys[HSI_MAX_DIMS];
    hsi_eng_packed_strides(x->data.ndim, x->data.shape, xs);
    hsi_eng_packed_strides(y->data.ndim, y->data.shape, ys);
    size_t esz = hsi_dtype_size(x->data.dtype);
    char *base = (char *)dx + (size_t)(s->start * xs[s->axis]) * esz;
    xs[s->axis] *= s->step;
    hsi_eng_acc_strided(y->data.dtype, y->data.ndim, y->data.shape, base, xs, y->gflow, ys);
    return HSI_OK;
}

hsi_status hsi_slice(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, int axis, int64_t start,
                     int64_t stop, int64_t step)
{
    hsi_view v;
    if (step <= 0) return HSI_FAIL(HSI_ERR_ARG, "slice: step must be positive (got %lld)",
                                   (long long)step);
    hsi_status st = hsi_view_slice(&v, &x->data, axis, start, stop, step);
    if (st != HSI_OK) return st;
    hsi_buffer_release(v.buf);
    st = view_output(out, g, &v);
    if (st != HSI_OK) return st;
    hsi_tensor *in[1] = {x};
    hsi_node *n = hsi_op_record(g, "slice", bw_slice, *out, in, 1);
    if (n) {
        slice_saved *s = hsi_graph_scratch(g, sizeof *s);
        if (!s) return HSI_FAIL(HSI_ERR_NOMEM, "slice: out of arena memory");
        s->axis = axis;
        s->start = start < 0 ? start + x->data.shape[axis] : start;
        s->step = step;
        n->saved = s;
    }
    return HSI_OK;
}

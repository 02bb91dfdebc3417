/* tensor.h — the autograd engine: tensors (a view plus grad, grad_fn,
 * requires_grad, is_leaf, retain_grad), graphs recorded as ops run, reverse-mode
 * backward, no-grad and anomaly modes, memory accounting, the engine RNG, and
 * every differentiable op. Not the layer kernels (layers.h), not modules
 * (nn.h), not optimisers (optim.h).
 *
 * Lifetime model (ggml-like, so a training step allocates nothing):
 * - persistent tensors (parameters, buffers, inputs you keep) are made with
 *   hsi_tensor_new / hsi_tensor_from_view and freed with hsi_tensor_free;
 * - every tensor an op returns lives in the arena of an hsi_graph and stays
 *   valid until hsi_graph_reset / hsi_graph_free; reset keeps the memory for
 *   the next step (after the first step or two, no allocation at all).
 * Gradients are packed (C-contiguous) arrays with the tensor's logical shape
 * and dtype. Floating tensors are float32 (training) or float64 (gradient
 * checks); labels are int32/int64 tensors without gradients. */
#ifndef HSI_TENSOR_H
#define HSI_TENSOR_H

#include <stdint.h>
#include <stdio.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hsi_graph hsi_graph;
typedef struct hsi_node hsi_node;
typedef struct hsi_tensor hsi_tensor;

struct hsi_tensor {
    hsi_view data;       /* values; any strides (op outputs are packed) */
    hsi_tensor *grad;    /* leaves: accumulated gradient (persistent, packed);
                          * non-leaves: only when retain_grad (arena) */
    hsi_node *grad_fn;   /* op that produced it; NULL for leaves / untracked */
    int requires_grad;
    int is_leaf;         /* made by the user (or detached), not by a tracked op */
    int retain_grad;     /* non-leaf: keep .grad after backward */
    int device;          /* -1: host */
    /* engine-private */
    hsi_graph *graph;    /* arena owner; NULL for persistent tensors */
    int owns_view;       /* data holds a buffer reference (persistent tensors) */
    void *gflow;         /* gradient flowing during the current backward */
};

/* --------------------------------------------- data-parallel hooks */

/* Called on the backward's thread after each node's backward has run (a
 * data-parallel trainer starts a gradient bucket's allreduce as soon as
 * its parameters' gradients are complete). A non-OK status stops the
 * backward. NULL: none (the default). Thread-local. */
typedef hsi_status (*hsi_backward_hook_fn)(void *ctx, hsi_node *n);
void hsi_backward_set_hook(hsi_backward_hook_fn fn, void *ctx);

/* Synchronised batch norm (SyncBatchNorm): while set, batch norm in
 * training mode adds its per-channel statistics over all ranks through fn
 * (n doubles summed over the ranks in place) in forward and backward (see
 * hsi_bn_sync_forward_f32 in layers.h). NULL: each process's own batch
 * (the default). Thread-local (the thread that runs the steps). */
typedef hsi_status (*hsi_bn_sync_fn)(void *ctx, double *v, int64_t n);
void hsi_bn_set_sync(hsi_bn_sync_fn fn, void *ctx);
hsi_bn_sync_fn hsi_bn_get_sync(void **ctx);

/* Dropout masks keyed by sample: after hsi_dropout_key_set(key, row0)
 * with key != 0, the k-th training-mode dropout op since the call (k = 0,
 * 1, ...) draws the mask of row i (axis 0) from a stream keyed by (key, k,
 * row0 + i) instead of the engine RNG, so a sample's mask does not depend
 * on the rank or the micro-batch that holds it (data-parallel training:
 * key = the global batch's seed, row0 = the slice's position in it).
 * key 0: the engine RNG again (the default). Thread-local. */
void hsi_dropout_key_set(uint64_t key, int64_t row0);

/* ------------------------------------------------ memory accounting */

typedef struct hsi_mem_stats {
    int64_t live_bytes;  /* engine memory held now (arenas, tensors, grads, state) */
    int64_t peak_bytes;  /* high-water mark since start / last hsi_mem_reset_peak */
    int64_t n_allocs;    /* allocation calls made by the engine so far */
    int64_t n_frees;
} hsi_mem_stats;
void hsi_mem_get(hsi_mem_stats *out);
void hsi_mem_reset_peak(void);
/* One line: "live 12.3 MiB, peak 40.1 MiB, 57 allocations, 12 frees". */
void hsi_mem_report(FILE *fp);
/* Counted 64-byte aligned allocation used by the engine (not zeroed). */
void *hsi_mem_alloc(size_t size);
void hsi_mem_free(void *p);
/* A counted, zeroed host buffer (refcount 1). */
hsi_status hsi_mem_buffer(hsi_buffer **out, size_t size);

/* ------------------------------------------------------------ RNG */

/* xoshiro256** seeded by splitmix64; the engine's generator drives dropout
 * and initialisation. The state is 4 x uint64 (saved in training checkpoints). */
typedef struct hsi_rng {
    uint64_t s[4];
} hsi_rng;
void hsi_rng_seed(hsi_rng *r, uint64_t seed);
uint64_t hsi_rng_next(hsi_rng *r);
double hsi_rng_uniform(hsi_rng *r); /* [0, 1) with 53 bits */
double hsi_rng_normal(hsi_rng *r);  /* standard normal (Box-Muller) */
/* The process-wide engine generator (dropout, init). */
hsi_rng *hsi_default_rng(void);
void hsi_manual_seed(uint64_t seed);

/* ------------------------------------------------------ modes */

/* Gradient recording (thread-local, default on). Returns the previous value. */
int hsi_set_grad_enabled(int on);
int hsi_is_grad_enabled(void);
/* Anomaly mode (process-wide, default off): every op checks its output and,
 * in backward, the gradients it produces for NaN/Inf, and fails at the first
 * one with HSI_ERR_NUMERIC naming the op and the layer. */
void hsi_set_anomaly(int on);
int hsi_anomaly_enabled(void);
/* Op profiler (process-wide, default off; for `hsi bench model --ops`):
 * while on, every op's forward time (from the previous op or mark to its
 * output) and every node's backward time are added up per (op, layer).
 * hsi_op_profile(1) clears and starts, (0) stops; hsi_op_profile_mark()
 * starts the clock for the next op (call it before a forward);
 * hsi_op_profile_report prints the table in ms per step, largest first. */
void hsi_op_profile(int on);
void hsi_op_profile_mark(void);
void hsi_op_profile_report(FILE *f, int steps);
/* For executors outside the graph (the device model): 1 while the profiler
 * is on; adds measured seconds to (op, layer), compared by pointer (both
 * must outlive the report). Does nothing while it is off. */
int hsi_op_profile_on(void);
void hsi_op_profile_add(const char *op, const char *layer, double fwd_s, double bwd_s);
/* Name of the layer (module) now running forward; nodes record it. The module
 * system sets it; NULL clears. The string must outlive the graph. Returns the
 * previous one. */
const char *hsi_set_layer_name(const char *name);

/* ---------------------------------------------------------- graphs */

hsi_status hsi_graph_new(hsi_graph **out);
/* Drops every tensor and node of the graph; keeps (and coalesces) the arena
 * so the next step of the same size allocates nothing. */
void hsi_graph_reset(hsi_graph *g);
void hsi_graph_free(hsi_graph *g);
int64_t hsi_graph_arena_bytes(const hsi_graph *g); /* capacity held */
int64_t hsi_graph_n_nodes(const hsi_graph *g);
/* Raw scratch memory from the arena (64-byte aligned, not zeroed). */
void *hsi_graph_scratch(hsi_graph *g, size_t size);

/* -------------------------------------------------------- tensors */

/* Persistent zeroed packed tensor (a leaf). */
hsi_status hsi_tensor_new(hsi_tensor **out, hsi_dtype dtype, int ndim, const int64_t *shape,
                          int requires_grad);
/* Persistent leaf over an existing view (retained; any strides). */
hsi_status hsi_tensor_from_view(hsi_tensor **out, const hsi_view *v, int requires_grad);
void hsi_tensor_free(hsi_tensor *t); /* persistent tensors only; NULL is fine */
/* A packed tensor in g's arena (e.g. the input batch of a step); values
 * uninitialised; a leaf. */
hsi_status hsi_graph_tensor(hsi_tensor **out, hsi_graph *g, hsi_dtype dtype, int ndim,
                            const int64_t *shape, int requires_grad);
hsi_status hsi_tensor_set_requires_grad(hsi_tensor *t, int on); /* leaves only */
void hsi_tensor_retain_grad(hsi_tensor *t);
/* Packed host data pointer (asserts packed). */
void *hsi_tensor_ptr(const hsi_tensor *t);
int64_t hsi_tensor_count(const hsi_tensor *t);
/* Sets the gradient of a leaf to zero (no-op when it has none). */
void hsi_tensor_zero_grad(hsi_tensor *t);
/* Value of a scalar (count 1) float tensor. */
double hsi_tensor_item(const hsi_tensor *t);

/* Backward from a scalar loss: accumulates d loss / d leaf into every leaf
 * that requires grad (and retained non-leaves). retain_graph = 0 frees the
 * graph's saved state: a second backward through it fails with HSI_ERR_STATE. */
hsi_status hsi_backward(hsi_tensor *loss, int retain_graph);
/* Same with an explicit upstream gradient (packed, shape/dtype of out), for
 * non-scalar outputs (vector-Jacobian product). */
hsi_status hsi_backward_grad(hsi_tensor *out, const void *grad_out, int retain_graph);

/* --------------------------------------------------- view-like ops */

/* A new leaf sharing x's data, without history. */
hsi_status hsi_detach(hsi_tensor **out, hsi_graph *g, hsi_tensor *x);
/* PyTorch's view: fails with HSI_ERR_UNSUPPORTED when the strides do not
 * allow it (one -1 in shape is inferred). */
hsi_status hsi_view_as_shape(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, int ndim,
                             const int64_t *shape);
/* PyTorch's reshape: a view when possible, else a packed copy. */
hsi_status hsi_reshape(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, int ndim,
                       const int64_t *shape);
/* Keeps axis 0, flattens the rest: (N, ...) -> (N, prod). */
hsi_status hsi_flatten(hsi_tensor **out, hsi_graph *g, hsi_tensor *x);
hsi_status hsi_permute(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, const int *perm);
hsi_status hsi_slice(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, int axis, int64_t start,
                     int64_t stop, int64_t step);
/* Packed copy when x is not packed, else x itself. */
hsi_status hsi_contiguous(hsi_tensor **out, hsi_graph *g, hsi_tensor *x);

/* ---------------------------------------------------- elementwise */

/* NumPy broadcasting over up to 5 dims (e.g. (N,C,H,W) + (1,C,1,1) or (C,1,1)). */
hsi_status hsi_add(hsi_tensor **out, hsi_graph *g, hsi_tensor *a, hsi_tensor *b);
hsi_status hsi_sub(hsi_tensor **out, hsi_graph *g, hsi_tensor *a, hsi_tensor *b);
hsi_status hsi_mul(hsi_tensor **out, hsi_graph *g, hsi_tensor *a, hsi_tensor *b);
hsi_status hsi_scale(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, double s);
hsi_status hsi_sum(hsi_tensor **out, hsi_graph *g, hsi_tensor *x);  /* -> shape () */
hsi_status hsi_mean(hsi_tensor **out, hsi_graph *g, hsi_tensor *x); /* -> shape () */

/* --------------------------------------------------------- linear */

/* a: (M, K), b: (K, N) -> (M, N) */
hsi_status hsi_matmul(hsi_tensor **out, hsi_graph *g, hsi_tensor *a, hsi_tensor *b);
/* x: (N, in), w: (out, in), b: (out) or NULL -> (N, out) = x w^T + b */
hsi_status hsi_linear(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, hsi_tensor *w,
                      hsi_tensor *b);

/* ---------------------------------------------------- activations */

hsi_status hsi_relu(hsi_tensor **out, hsi_graph *g, hsi_tensor *x);
hsi_status hsi_leaky_relu(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, double slope);
/* exact GELU: x/2 (1 + erf(x / sqrt 2)) (PyTorch's default) */
hsi_status hsi_gelu(hsi_tensor **out, hsi_graph *g, hsi_tensor *x);
/* fused Swish / SiLU x * sigmoid(x): one node that saves sigmoid(x) */
hsi_status hsi_swish(hsi_tensor **out, hsi_graph *g, hsi_tensor *x);
/* Inverted dropout: zero with probability p, scale the rest by 1/(1-p);
 * identity when !training or p == 0. Mask from rng (NULL: engine RNG). */
hsi_status hsi_dropout(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, double p, int training,
                       hsi_rng *rng);
/* Concatenation of n tensors along axis (other dims equal). */
hsi_status hsi_concat(hsi_tensor **out, hsi_graph *g, hsi_tensor *const *xs, int n, int axis);

/* ------------------------------------------------------ losses */

/* x: (N, C) -> log softmax over C */
hsi_status hsi_log_softmax(hsi_tensor **out, hsi_graph *g, hsi_tensor *x);

typedef struct hsi_ce_opts {
    hsi_tensor *weight;     /* (C) class weights or NULL (no gradient taken) */
    double label_smoothing; /* 0 .. 1 */
    int64_t ignore_index;   /* PyTorch's default -100 */
} hsi_ce_opts;
void hsi_ce_opts_default(hsi_ce_opts *o);
/* Fused, numerically stable softmax cross-entropy with PyTorch's semantics,
 * mean reduction over non-ignored samples weighted by weight[target]:
 * logits (N, C) float; target (N) int32/int64 -> scalar. */
hsi_status hsi_cross_entropy(hsi_tensor **out, hsi_graph *g, hsi_tensor *logits,
                             hsi_tensor *target, const hsi_ce_opts *opts);

/* ---------------------------------------------------- layers (layers.h) */

/* x: (N, C, [D,] H, W), w: (K, C, [kD,] kH, kW), b: (K) or NULL.
 * stride/pad: nd ints ((D,) H, W). */
hsi_status hsi_conv(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, hsi_tensor *w, hsi_tensor *b,
                    int nd, const int *stride, const int *pad);
/* kind: 0 max, 1 avg (count_include_pad); ker/stride/pad: nd ints. */
hsi_status hsi_pool(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, int kind, int nd,
                    const int *ker, const int *stride, const int *pad);
/* (N, C, ...) -> (N, C) */
hsi_status hsi_global_avg_pool(hsi_tensor **out, hsi_graph *g, hsi_tensor *x);
/* x: (N, C) or (N, C, ...); gamma/beta (C) or NULL; running_mean/var (C) or
 * NULL (updated in training); num_batches (I64 scalar) or NULL, incremented in
 * training. */
hsi_status hsi_batch_norm(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, hsi_tensor *gamma,
                          hsi_tensor *beta, hsi_tensor *running_mean, hsi_tensor *running_var,
                          hsi_tensor *num_batches, int training, double momentum, double eps);
/* Inference only (gradient recording off, else HSI_ERR_STATE): conv, then
 * batch norm with its running statistics, then ReLU, as one pass: the batch
 * norm is folded into the filters and bias (s = gamma / sqrt(var + eps),
 * w s, (b - mean) s + beta) and the ReLU applied as the outputs are stored.
 * The same values as the three ops up to float rounding of the folding. The
 * module system uses it for conv + eval-mode batch norm + ReLU without
 * gradients. */
hsi_status hsi_conv_bn_relu_eval(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, hsi_tensor *w,
                                 hsi_tensor *b, int nd, const int *stride, const int *pad,
                                 hsi_tensor *gamma, hsi_tensor *beta, hsi_tensor *running_mean,
                                 hsi_tensor *running_var, double eps);
/* hsi_batch_norm then ReLU as one node ("batch_norm_relu"): the same values
 * and gradients as the two ops, without the intermediate tensor; the
 * module system uses it for a batch norm followed by a ReLU. */
hsi_status hsi_batch_norm_relu(hsi_tensor **out, hsi_graph *g, hsi_tensor *x, hsi_tensor *gamma,
                               hsi_tensor *beta, hsi_tensor *running_mean,
                               hsi_tensor *running_var, hsi_tensor *num_batches, int training,
                               double momentum, double eps);

/* ------------------------------------------- for writing custom ops */

typedef hsi_status (*hsi_backward_fn)(hsi_node *n);
struct hsi_node {
    const char *op;        /* "conv2d", "relu", ... */
    const char *layer;     /* module running when it was recorded (or NULL) */
    hsi_backward_fn backward;
    hsi_tensor *out;
    hsi_tensor **in;
    int n_in;
    int freed;             /* backward ran without retain_graph */
    hsi_node *prev;        /* previous node of the same graph */
    hsi_graph *graph;
    void *saved;           /* op state (arena) */
    double a0, a1;         /* small op parameters */
};
/* Makes an arena output tensor (packed, uninitialised) of dtype/shape. */
hsi_status hsi_op_output(hsi_tensor **out, hsi_graph *g, hsi_dtype dtype, int ndim,
                         const int64_t *shape);
/* Records a node producing out from in[0..n_in) when grad mode is on and an
 * input requires grad (returns NULL otherwise, and out stays untracked). */
hsi_node *hsi_op_record(hsi_graph *g, const char *op, hsi_backward_fn bw, hsi_tensor *out,
                        hsi_tensor *const *in, int n_in);
/* Inside a backward: the upstream gradient (packed) and the zero-initialised
 * packed gradient buffer of input i to accumulate into (NULL when input i
 * does not need one). */
void *hsi_node_grad_out(hsi_node *n);
void *hsi_node_grad_in(hsi_node *n, int i);
/* Like hsi_node_grad_in, but a non-leaf input's gradient buffer that no
 * node has written yet comes back uninitialised with *fresh = 1: the caller
 * must then write every element (= instead of +=), which saves zeroing it and
 * reading the zeros. *fresh = 0 otherwise (accumulate as usual). */
void *hsi_node_grad_in_fresh(hsi_node *n, int i, int *fresh);
/* Anomaly check of a forward output (HSI_OK when anomaly mode is off). */
hsi_status hsi_op_check(hsi_tensor *out, const char *op);

#ifdef __cplusplus
}
#endif
#endif

/* nn.h — a small module system over the autograd engine: layers that own
 * named parameters and buffers ("features.0.weight", PyTorch's state_dict
 * names), train/eval mode, seeded initialisation, parameter counts, and the
 * models of the training issue (cnn2d, hybridsn, cnn1d). Not the optimisers
 * (optim.h), not checkpoint files (checkpoint.h). */
#ifndef HSI_NN_H
#define HSI_NN_H

#include "models/layers.h"
#include "models/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hsi_module_kind {
    HSI_MOD_SEQUENTIAL = 0, /* named children run in order */
    HSI_MOD_CONV,           /* weight (K, C, [kD,] kH, kW), bias (K) */
    HSI_MOD_BATCHNORM,      /* weight, bias (C); buffers running_mean, running_var,
                             * num_batches_tracked */
    HSI_MOD_LINEAR,         /* weight (out, in), bias (out) */
    HSI_MOD_RELU,
    HSI_MOD_LEAKY_RELU,
    HSI_MOD_GELU,
    HSI_MOD_SWISH,
    HSI_MOD_MAXPOOL,
    HSI_MOD_AVGPOOL,
    HSI_MOD_GAP,            /* (N, C, ...) -> (N, C) */
    HSI_MOD_DROPOUT,
    HSI_MOD_FLATTEN,        /* (N, ...) -> (N, prod) */
    HSI_MOD_RESHAPE         /* (N, ...) -> (N, shape...) (-1 allowed once) */
} hsi_module_kind;

#define HSI_NAME_MAX 96

typedef struct hsi_named_tensor {
    char name[HSI_NAME_MAX]; /* full dotted name once the module is placed */
    hsi_tensor *t;
    int is_buffer;           /* running statistics etc.: saved, not trained */
} hsi_named_tensor;

typedef struct hsi_module hsi_module;
struct hsi_module {
    hsi_module_kind kind;
    char name[HSI_NAME_MAX]; /* full dotted name ("" for the root) */
    char local[32];          /* name inside the parent ("0", "features") */
    int training;
    hsi_module **children;
    int n_children;
    hsi_named_tensor *tensors; /* own parameters and buffers, state_dict order */
    int n_tensors;
    /* layer settings */
    int nd, ker[3], stride[3], pad[3];
    double p, slope, momentum, eps;
    int reshape_nd;
    int64_t reshape[HSI_MAX_DIMS];
    int in_features, out_features;
};

/* Constructors (tensors zero-initialised; call hsi_module_init). dtype:
 * HSI_F32 for training, HSI_F64 for gradient checks. ker/stride/pad: nd ints. */
hsi_status hsi_sequential_new(hsi_module **out);
hsi_status hsi_conv_new(hsi_module **out, hsi_dtype dt, int nd, int in_ch, int out_ch,
                        const int *ker, const int *stride, const int *pad, int bias);
hsi_status hsi_batchnorm_new(hsi_module **out, hsi_dtype dt, int channels, double momentum,
                             double eps);
hsi_status hsi_linear_new(hsi_module **out, hsi_dtype dt, int in_features, int out_features,
                          int bias);
/* RELU, GELU, SWISH, GAP, FLATTEN; LEAKY_RELU uses slope */
hsi_status hsi_activation_new(hsi_module **out, hsi_module_kind kind, double slope);
hsi_status hsi_pool_new(hsi_module **out, hsi_module_kind kind, int nd, const int *ker,
                        const int *stride, const int *pad);
hsi_status hsi_dropout_new(hsi_module **out, double p);
/* shape excludes the batch axis */
hsi_status hsi_reshape_new(hsi_module **out, int ndim, const int64_t *shape);
/* Appends child to a sequential under `name` (takes ownership, also on
 * failure); full names of the child's tensors become "<parent>.<name>.<...>". */
hsi_status hsi_sequential_add(hsi_module *seq, const char *name, hsi_module *child);
void hsi_module_free(hsi_module *m);

hsi_status hsi_module_forward(hsi_tensor **out, hsi_module *m, hsi_graph *g, hsi_tensor *x);
void hsi_module_train(hsi_module *m, int on); /* recursive; eval = 0 */

/* Every parameter and buffer in PyTorch state_dict order (pointers into the
 * modules; valid while they live). *out is malloc'd; free() it. */
hsi_status hsi_module_state(hsi_module *m, hsi_named_tensor **out, int *n);
/* Trainable parameters only (same order, buffers left out). */
hsi_status hsi_module_params(hsi_module *m, hsi_named_tensor **out, int *n);
int64_t hsi_module_param_count(hsi_module *m); /* trainable elements */
hsi_tensor *hsi_module_find(hsi_module *m, const char *full_name);
/* m's full name for messages: "(root)" for the root */
const char *hsi_module_label(const hsi_module *m);
void hsi_module_zero_grad(hsi_module *m);

/* One leaf module and the shapes it sees for one sample (no batch axis):
 * the layer description both backends run, the CPU engine through the ops
 * of tensor.h (hsi_module_forward), the device model through the launchers
 * of layers_cuda.h (model_cuda.c). Made by hsi_module_layers. */
typedef struct hsi_layer {
    hsi_module *mod;          /* the leaf: kind, settings, tensors */
    int in_nd, out_nd;        /* per-sample dims */
    int64_t in_shape[HSI_MAX_DIMS], out_shape[HSI_MAX_DIMS];
    int64_t in_per, out_per;  /* elements per sample */
    int c;                    /* channels in: conv, pool, batch norm, gap */
    int k;                    /* channels out: conv */
    int64_t s;                /* elements per channel per sample: batch norm, gap */
    int sp_nd, sp_in[3];      /* spatial dims in: conv, pool */
    int alias;                /* flatten, reshape: the output is the input's data */
} hsi_layer;

/* m's leaves in the order they run, each with its per-sample shapes, for
 * samples of sample_shape (sample_nd dims, 1..HSI_MAX_DIMS-1). HSI_ERR_ARG
 * naming the layer, what it expects and what it gets when a shape does not
 * fit (as the CPU forward would fail, before any work); *out is malloc'd
 * (free() it), *n >= 1. */
hsi_status hsi_module_layers(hsi_layer **out, int *n, hsi_module *m, int sample_nd,
                             const int64_t *sample_shape);
/* The geometry of a conv / pool layer at batch n (HSI_ERR_ARG for other kinds). */
hsi_status hsi_layer_conv_dims(hsi_conv_dims *cd, const hsi_layer *L, int n);
hsi_status hsi_layer_pool_dims(hsi_pool_dims *pd, const hsi_layer *L, int n);

typedef enum hsi_init {
    HSI_INIT_TORCH = 0,   /* PyTorch defaults: kaiming_uniform(a=sqrt 5), bias U(+-1/sqrt fan_in) */
    HSI_INIT_KAIMING_NORMAL,  /* N(0, 2 / fan_in), bias 0 */
    HSI_INIT_KAIMING_UNIFORM, /* U(+-sqrt(6 / fan_in)), bias 0 */
    HSI_INIT_XAVIER_NORMAL,   /* N(0, 2 / (fan_in + fan_out)), bias 0 */
    HSI_INIT_XAVIER_UNIFORM   /* U(+-sqrt(6 / (fan_in + fan_out))), bias 0 */
} hsi_init;
/* Seeded: the same seed gives the same weights. Batch norm: weight 1, bias 0,
 * running mean 0, var 1. */
void hsi_module_init(hsi_module *m, hsi_init scheme, uint64_t seed);

/* Models of the training issue. bands = K (input channels), patch = P. */
typedef struct hsi_model_spec {
    const char *name;
    const char *summary;
} hsi_model_spec;
/* The list, NULL-terminated. */
const hsi_model_spec *hsi_model_list(void);
/* cnn2d: conv3x3(K->64,p1) BN ReLU conv3x3(64->64,p1) BN ReLU maxpool2 conv3x3(64->128,p1)
 * BN ReLU GAP dropout(0.3) linear(128->classes); input (N, K, P, P).
 * hybridsn: input (N, 1, K, P, P). cnn1d: input (N, K). Initialised with
 * HSI_INIT_TORCH from seed. */
hsi_status hsi_model_create(hsi_module **out, const char *name, int bands, int patch, int classes,
                            hsi_dtype dt, uint64_t seed);
/* Input shape of a model for a batch (4 or 5 dims); returns ndim. */
int hsi_model_input_shape(const char *name, int batch, int bands, int patch, int64_t *shape);

#ifdef __cplusplus
}
#endif
#endif

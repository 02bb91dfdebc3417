/* model_cuda.h — a module (nn.h) trained on the GPU: its parameters and
 * buffers are copied to the device once, each step runs forward, softmax
 * cross-entropy, backward and Adam/AdamW there through the launchers of
 * layers_cuda.h, and nothing comes back to the host unless asked (the loss
 * is read when logged; parameters when checkpointing). This is what
 * `hsi train --device cuda` calls per batch, with the loader's device copy of
 * the batch. Not the engine: no graph is recorded; the module's layer
 * description (hsi_module_layers, the shapes the CPU engine sees too) is
 * run by each kind's device forward and backward.
 *
 * Supported modules: sequential, conv (2-D/3-D), batch norm, linear, ReLU,
 * max/avg pool, global average pool, dropout (its own device mask stream),
 * flatten, reshape — the cnn2d, hybridsn and cnn1d models. Others give
 * HSI_ERR_UNSUPPORTED naming the module. Without CUDA or a device every
 * function returns HSI_ERR_NO_CUDA. */
#ifndef HSI_MODEL_CUDA_H
#define HSI_MODEL_CUDA_H

#include <stdint.h>

#include "models/layers.h"
#include "models/nn.h"
#include "models/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hsi_dmodel hsi_dmodel;

/* m: a float32 module; sample_ndim/sample_shape: one sample's input shape
 * (e.g. 3, {K, P, P} for cnn2d; 4, {1, K, P, P} for hybridsn); max_batch:
 * the largest batch a step will get; cfg: HSI_OPT_ADAM or HSI_OPT_ADAMW
 * (lr may be changed between steps with hsi_dmodel_set_lr); seed: dropout
 * masks. Uploads every parameter and buffer; the output must be (classes). */
hsi_status hsi_dmodel_create(hsi_dmodel **out, hsi_module *m, int sample_ndim,
                             const int64_t *sample_shape, int64_t max_batch,
                             const hsi_optim_config *cfg, uint64_t seed);
void hsi_dmodel_free(hsi_dmodel *d);
void hsi_dmodel_set_lr(hsi_dmodel *d, double lr);

/* How the convolutions run on the GPU. A new device model runs GEMM (the
 * reference); the trainer, the predictor and `hsi bench model` ask for AUTO
 * unless told otherwise. */
typedef enum hsi_gpu_conv {
    HSI_GPU_CONV_AUTO = 0,  /* cuDNN when it loads (hsi_conv_cudnn_available), but the
                               backward of 3-D convolutions by GEMM (cuDNN's deterministic
                               3-D weight gradients measured slower); else GEMM */
    HSI_GPU_CONV_GEMM = 1,  /* im2col + cuBLAS sgemm (hsi_conv_*_cuda) */
    HSI_GPU_CONV_CUDNN = 2  /* every convolution by cuDNN (hsi_conv_*_cudnn), or an error
                               saying why it cannot run; batch norm by cuDNN too
                               (hsi_bn_*_cudnn) where it has it, else hsi's kernels */
} hsi_gpu_conv;
/* Chooses the convolutions of the next steps. CUDNN: the errors of
 * hsi_conv_cudnn_available, or HSI_ERR_UNSUPPORTED when a convolution at
 * max_batch exceeds cuDNN's int sizes; d is then unchanged. AUTO takes GEMM
 * in those cases (no error). */
hsi_status hsi_dmodel_set_conv(hsi_dmodel *d, hsi_gpu_conv mode);
/* What runs them: "gemm", "cudnn 9.14.0" (the loaded cuDNN's version), or
 * with AUTO and 3-D convolutions "cudnn 9.14.0, gemm for 3-D backward";
 * "cudnn 9.14.0 fastest algorithms" when HSI_CUDNN_ALGO=fastest lets cuDNN
 * take its fastest algorithms, deterministic or not (default:
 * deterministic ones only); ", batch norm too" when cuDNN runs it. */
const char *hsi_dmodel_conv_name(const hsi_dmodel *d);

/* The --conv option of hsi's commands and of the trainer: "auto" (NULL
 * too), "gemm" on either device, "direct" on the CPU only, "cudnn" on the
 * GPU only, for a job on dev (HSI_DEVICE_CPU or HSI_DEVICE_CUDA; AUTO:
 * the name alone is checked). *cpu (may be NULL): the CPU engine's choice
 * (hsi_conv_set_impl: AUTO, GEMM or DIRECT); *gpu (may be NULL): the
 * device model's. HSI_ERR_ARG naming --conv for any other name, and for
 * direct on the GPU or cudnn on the CPU. Sets nothing else. */
hsi_status hsi_conv_option(const char *name, hsi_device dev, hsi_conv_impl *cpu,
                           hsi_gpu_conv *gpu);

/* x: (n, sample shape) float32 DEVICE array; y: (n) int32 DEVICE class
 * indices (PyTorch's -100 = ignored); n <= max_batch. Zeroes the gradients,
 * runs forward in training mode (batch statistics; running statistics
 * updated; dropout on), the mean cross-entropy and backward: gradients stay
 * on the device. Queued on this thread's stream; no host synchronisation. */
hsi_status hsi_dmodel_forward_backward(hsi_dmodel *d, const float *x, const int32_t *y, int64_t n);
/* One Adam/AdamW update of every parameter from the last gradients. */
hsi_status hsi_dmodel_optim_step(hsi_dmodel *d);
/* forward_backward + optim_step: one training step. */
hsi_status hsi_dmodel_train_step(hsi_dmodel *d, const float *x, const int32_t *y, int64_t n);
/* Training steps and eval forwards (hsi_dmodel_predict) of max_batch
 * samples each as one CUDA Graph launch (on = 1; 0 drops them) instead of a
 * launch per kernel. For each, the first call runs as usual and measures
 * the temporary device memory its launchers take; the second records its
 * launches once (the training step: gradient zeroing, forward, loss,
 * backward, Adam/AdamW), on the model's own stream, over the model's own
 * input buffers and scratch; every later one refreshes what the graph
 * reads (the step's dropout key and Adam factors, read by the kernels from
 * the device; the folded filters), copies x (and y) into those buffers and
 * launches the graph on this thread's stream. The results are the same
 * bits as without. Shorter batches and profiled steps (hsi_op_profile)
 * run as usual; hsi_dmodel_set_conv drops the graphs. A capture that fails
 * returns the error (why, and that the capture failed). Off by default. */
hsi_status hsi_dmodel_set_graph(hsi_dmodel *d, int on);
/* Calls run as one graph launch so far: training steps (training = 1) or
 * eval forwards (0). */
int64_t hsi_dmodel_graph_launches(const hsi_dmodel *d, int training);
/* The last step's loss (waits for the stream: call it only when logging). */
hsi_status hsi_dmodel_loss(hsi_dmodel *d, double *loss);
/* The mean training loss, weighted by batch size, of the steps since the
 * last call (NaN when there were none; not finite when a loss was not), and
 * how many (steps may be NULL); starts the next count. Each step's loss is
 * copied on the device as it runs, so the steps wait for nothing; this
 * waits for the stream. The CPU trainer's epoch loss, on the device. */
hsi_status hsi_dmodel_loss_mean(hsi_dmodel *d, double *mean, int64_t *steps);
/* Eval-mode forward (running statistics, no dropout) of n samples; *logits:
 * (n, classes) device array owned by d, valid until the next call. Each
 * conv -> batch norm -> ReLU runs as one convolution with the batch norm
 * folded into its filters and bias (hsi_bn_fold_f32 on the host, redone
 * after a training step: the CPU engine's inference fold), then ReLU. */
hsi_status hsi_dmodel_predict(hsi_dmodel *d, const float **logits, const float *x, int64_t n);
/* Copies parameters and buffers (running statistics, num_batches_tracked)
 * back into m's host tensors (m must be the module d was made from, or one
 * of the same architecture); with_grads: also the gradients into each
 * parameter's .grad (allocated when absent). Waits for the stream. */
hsi_status hsi_dmodel_to_host(hsi_dmodel *d, hsi_module *m, int with_grads);
/* The Adam moments and step count between d and o, an Adam/AdamW
 * optimiser of module m (hsi_optim_new over the module d was made from, or
 * one of the same architecture): to_host: d's into o's state tensors
 * (allocated when absent), so that hsi_train_save checkpoints a device run
 * as it does a CPU one; else o's into d (a parameter o has not stepped yet
 * gets zero moments), to resume: the dropout keys go on from the step
 * count too, as one run's would. The parameters themselves go with
 * hsi_dmodel_to_host / hsi_dmodel_create. Waits for the stream. */
hsi_status hsi_dmodel_optim_state(hsi_dmodel *d, const hsi_module *m, hsi_optim *o, int to_host);
/* Optimiser steps taken, classes (output features). */
int64_t hsi_dmodel_steps(const hsi_dmodel *d);
int hsi_dmodel_classes(const hsi_dmodel *d);

#ifdef __cplusplus
}
#endif
#endif

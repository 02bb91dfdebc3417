/* optim.h — optimisers (SGD with momentum/Nesterov/weight decay, Adam,
 * AdamW — PyTorch's formulas, operation for operation), learning-rate
 * schedules (step, cosine with warm-up, reduce-on-plateau), gradient-norm
 * clipping and zero_grad. Not the modules (nn.h), not checkpoint files. */
#ifndef HSI_OPTIM_H
#define HSI_OPTIM_H

#include "models/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hsi_optim_kind { HSI_OPT_SGD = 0, HSI_OPT_ADAM = 1, HSI_OPT_ADAMW = 2 } hsi_optim_kind;

typedef struct hsi_optim_config {
    hsi_optim_kind kind;
    double lr;
    double momentum, dampening; /* SGD */
    int nesterov;               /* SGD (needs momentum > 0, dampening 0) */
    double weight_decay;        /* SGD/Adam: L2 added to the gradient; AdamW: decoupled */
    double beta1, beta2, eps;   /* Adam/AdamW */
} hsi_optim_config;
/* PyTorch's defaults for kind (lr 1e-3 for Adam/AdamW with weight decay 0 /
 * 1e-2, lr 0.01 for SGD). */
void hsi_optim_config_default(hsi_optim_config *c, hsi_optim_kind kind);

typedef struct hsi_optim {
    hsi_optim_config cfg;
    int n;                    /* parameters */
    hsi_named_tensor *params; /* names and tensors (not owned) */
    hsi_tensor **state1;      /* SGD momentum buffer / Adam exp_avg (NULL until used) */
    hsi_tensor **state2;      /* Adam exp_avg_sq */
    int64_t step;             /* Adam step count (one per hsi_optim_step) */
} hsi_optim;

/* Parameters: the module's trainable tensors (hsi_module_params). */
hsi_status hsi_optim_new(hsi_optim **out, const hsi_optim_config *cfg, hsi_module *m);
void hsi_optim_free(hsi_optim *o);
/* One update of every parameter that has a gradient. */
hsi_status hsi_optim_step(hsi_optim *o);
void hsi_optim_zero_grad(hsi_optim *o);
/* Total 2-norm of all gradients; when above max_norm every gradient is
 * scaled by max_norm / (norm + 1e-6) (torch.nn.utils.clip_grad_norm_).
 * Returns the norm before clipping. */
double hsi_clip_grad_norm(hsi_optim *o, double max_norm);

typedef enum hsi_sched_kind {
    HSI_SCHED_CONSTANT = 0,
    HSI_SCHED_STEP = 1,    /* lr = base * gamma^floor(epoch / step_size) */
    HSI_SCHED_COSINE = 2,  /* linear warm-up over warmup epochs, then cosine to min_lr at
                            * total epochs */
    HSI_SCHED_PLATEAU = 3  /* ReduceLROnPlateau(mode=min, threshold_mode=rel) */
} hsi_sched_kind;

typedef struct hsi_sched {
    hsi_sched_kind kind;
    double base_lr;
    int step_size;          /* STEP */
    double gamma;           /* STEP */
    int warmup, total;      /* COSINE (epochs) */
    double min_lr;          /* COSINE, PLATEAU */
    double factor;          /* PLATEAU (0.1) */
    int patience, cooldown; /* PLATEAU (10, 0) */
    double threshold;       /* PLATEAU (1e-4) */
    /* state */
    int epoch;              /* epochs completed */
    double best;
    int num_bad, cooldown_counter;
} hsi_sched;
void hsi_sched_init(hsi_sched *s, hsi_sched_kind kind, double base_lr);
/* Learning rate for epoch e (0-based) of STEP/COSINE/CONSTANT. */
double hsi_sched_lr_at(const hsi_sched *s, int epoch);
/* Call at the start of training (sets o->cfg.lr for epoch 0). */
void hsi_sched_begin(hsi_sched *s, hsi_optim *o);
/* Call at the end of each epoch with the validation loss (PLATEAU) or
 * anything (others); sets o->cfg.lr for the next epoch. */
void hsi_sched_epoch_end(hsi_sched *s, hsi_optim *o, double metric);

#ifdef __cplusplus
}
#endif
#endif

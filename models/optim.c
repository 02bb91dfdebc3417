/* optim.c — SGD, Adam, AdamW with PyTorch 1.13's single-tensor update
 * order (so float32 results match to rounding), learning-rate schedules and
 * gradient clipping. Not modules or checkpoints. */
#include "models/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void hsi_optim_config_default(hsi_optim_config *c, hsi_optim_kind kind)
{
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->lr = kind == HSI_OPT_SGD ? 0.01 : 1e-3;
    c->beta1 = 0.9;
    c->beta2 = 0.999;
    c->eps = 1e-8;
    c->weight_decay = kind == HSI_OPT_ADAMW ? 1e-2 : 0;
}

hsi_status hsi_optim_new(hsi_optim **out, const hsi_optim_config *cfg, hsi_module *m)
{
    hsi_status st = HSI_OK;
    *out = NULL;
    if (!(cfg->lr >= 0)) return HSI_FAIL(HSI_ERR_ARG, "optimiser: lr must be >= 0 (got %g)",
                                         cfg->lr);
    if (cfg->nesterov && (cfg->momentum <= 0 || cfg->dampening != 0))
        return HSI_FAIL(HSI_ERR_ARG, "SGD: Nesterov momentum needs momentum > 0 and dampening 0");
    if (cfg->kind != HSI_OPT_SGD &&
        !(cfg->beta1 >= 0 && cfg->beta1 < 1 && cfg->beta2 >= 0 && cfg->beta2 < 1))
        return HSI_FAIL(HSI_ERR_ARG, "Adam: betas must be in [0, 1) (got %g, %g)", cfg->beta1,
                        cfg->beta2);
    hsi_optim *o = calloc(1, sizeof *o);
    if (!o) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    o->cfg = *cfg;
    HSI_TRY(hsi_module_params(m, &o->params, &o->n));
    o->state1 = calloc((size_t)o->n + 1, sizeof *o->state1);
    o->state2 = calloc((size_t)o->n + 1, sizeof *o->state2);
    if (!o->state1 || !o->state2) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    *out = o;
    return HSI_OK;
cleanup:
    hsi_optim_free(o);
    return st;
}

void hsi_optim_free(hsi_optim *o)
{
    if (!o) return;
    for (int i = 0; i < o->n; i++) {
        if (o->state1) hsi_tensor_free(o->state1[i]);
        if (o->state2) hsi_tensor_free(o->state2[i]);
    }
    free(o->state1);
    free(o->state2);
    free(o->params);
    free(o);
}

void hsi_optim_zero_grad(hsi_optim *o)
{
    for (int i = 0; i < o->n; i++) hsi_tensor_zero_grad(o->params[i].t);
}

static hsi_status state_like(hsi_tensor **s, const hsi_tensor *p)
{
    if (*s) return HSI_OK;
    return hsi_tensor_new(s, p->data.dtype, p->data.ndim, p->data.shape, 0);
}

/* The updates, written once for float and double. T is the element type;
 * scalars are rounded to T first, like PyTorch's CPU kernels do. */
#define SGD_BODY(T)                                                                            \
    do {                                                                                       \
        T *p = pp, *g = gp, *b = bp;                                                           \
        T wd = (T)c->weight_decay, mom = (T)c->momentum, damp = (T)(1 - c->dampening),         \
          lr = (T)c->lr;                                                                       \
        for (int64_t k = 0; k < n; k++) {                                                      \
            T d = g[k];                                                                        \
            if (c->weight_decay != 0) d = d + wd * p[k];                                       \
            if (b) {                                                                           \
                b[k] = first ? d : b[k] * mom + damp * d;                                      \
                d = c->nesterov ? d + mom * b[k] : b[k];                                       \
            }                                                                                  \
            p[k] = p[k] - lr * d;                                                              \
        }                                                                                      \
    } while (0)

#define ADAM_BODY(T, SQRT)                                                                     \
    do {                                                                                       \
        T *restrict p = pp, *restrict g = gp, *restrict m = mp, *restrict v = vp;              \
        T b1 = (T)c->beta1, b2 = (T)c->beta2, omb1 = (T)(1 - c->beta1),                        \
          omb2 = (T)(1 - c->beta2), wd = (T)c->weight_decay, eps = (T)c->eps;                  \
        T step_size = (T)(c->lr / bc1), bc2s = (T)sqrt(bc2), decay = (T)(1 - c->lr * c->weight_decay); \
        for (int64_t k = 0; k < n; k++) {                                                      \
            T gi = g[k];                                                                       \
            if (c->kind == HSI_OPT_ADAMW)                                                      \
                p[k] = p[k] * decay;                                                           \
            else if (c->weight_decay != 0)                                                     \
                gi = gi + wd * p[k];                                                           \
            m[k] = m[k] * b1 + omb1 * gi;                                                      \
            v[k] = v[k] * b2 + omb2 * (gi * gi);                                                 \
            T denom = SQRT(v[k]) / bc2s + eps; /* float: sqrtf = (float)sqrt, both exact */      \
            p[k] = p[k] - step_size * (m[k] / denom);                                          \
        }                                                                                      \
    } while (0)

hsi_status hsi_optim_step(hsi_optim *o)
{
    hsi_status st = HSI_OK;
    const hsi_optim_config *c = &o->cfg;
    o->step++;
    double bc1 = 1 - pow(c->beta1, (double)o->step), bc2 = 1 - pow(c->beta2, (double)o->step);
    for (int i = 0; i < o->n; i++) {
        hsi_tensor *t = o->params[i].t;
        if (!t->grad) continue; /* no gradient yet: left alone, like PyTorch */
        int64_t n = hsi_tensor_count(t);
        void *pp = hsi_tensor_ptr(t), *gp = hsi_tensor_ptr(t->grad);
        int f32 = t->data.dtype == HSI_F32;
        if (c->kind == HSI_OPT_SGD) {
            int first = 0;
            void *bp = NULL;
            if (c->momentum != 0) {
                first = o->state1[i] == NULL;
                HSI_TRY(state_like(&o->state1[i], t));
                bp = hsi_tensor_ptr(o->state1[i]);
            }
            if (f32)
                SGD_BODY(float);
            else
                SGD_BODY(double);
        } else {
            HSI_TRY(state_like(&o->state1[i], t));
            HSI_TRY(state_like(&o->state2[i], t));
            void *mp = hsi_tensor_ptr(o->state1[i]), *vp = hsi_tensor_ptr(o->state2[i]);
            if (f32)
                ADAM_BODY(float, sqrtf);
            else
                ADAM_BODY(double, sqrt);
        }
    }
cleanup:
    return st;
}

double hsi_clip_grad_norm(hsi_optim *o, double max_norm)
{
    double total = 0;
    for (int i = 0; i < o->n; i++) {
        hsi_tensor *g = o->params[i].t->grad;
        if (!g) continue;
        int64_t n = hsi_tensor_count(g);
        if (g->data.dtype == HSI_F32) {
            const float *p = hsi_tensor_ptr(g);
            for (int64_t k = 0; k < n; k++) total += (double)p[k] * p[k];
        } else {
            const double *p = hsi_tensor_ptr(g);
            for (int64_t k = 0; k < n; k++) total += p[k] * p[k];
        }
    }
    total = sqrt(total);
    double coef = max_norm / (total + 1e-6);
    if (coef < 1) {
        for (int i = 0; i < o->n; i++) {
            hsi_tensor *g = o->params[i].t->grad;
            if (!g) continue;
            int64_t n = hsi_tensor_count(g);
            if (g->data.dtype == HSI_F32) {
                float *p = hsi_tensor_ptr(g), cf = (float)coef;
                for (int64_t k = 0; k < n; k++) p[k] *= cf;
            } else {
                double *p = hsi_tensor_ptr(g);
                for (int64_t k = 0; k < n; k++) p[k] *= coef;
            }
        }
    }
    return total;
}

/* ------------------------------------------------------ schedules */

void hsi_sched_init(hsi_sched *s, hsi_sched_kind kind, double base_lr)
{
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->base_lr = base_lr;
    s->step_size = 30;
    s->gamma = 0.1;
    s->total = 100;
    s->factor = 0.1;
    s->patience = 10;
    s->threshold = 1e-4;
    s->best = INFINITY;
}

double hsi_sched_lr_at(const hsi_sched *s, int e)
{
    switch (s->kind) {
    case HSI_SCHED_STEP: return s->base_lr * pow(s->gamma, (double)(e / (s->step_size > 0 ? s->step_size : 1)));
    case HSI_SCHED_COSINE:
        if (e < s->warmup) return s->base_lr * (double)(e + 1) / (double)s->warmup;
        if (s->total <= s->warmup) return s->base_lr;
        if (e >= s->total) return s->min_lr;
        return s->min_lr + (s->base_lr - s->min_lr) * 0.5 *
                               (1 + cos(3.14159265358979323846 * (double)(e - s->warmup) /
                                        (double)(s->total - s->warmup)));
    default: return s->base_lr;
    }
}

void hsi_sched_begin(hsi_sched *s, hsi_optim *o)
{
    s->epoch = 0;
    o->cfg.lr = hsi_sched_lr_at(s, 0);
    if (s->kind == HSI_SCHED_PLATEAU) o->cfg.lr = s->base_lr;
}

void hsi_sched_epoch_end(hsi_sched *s, hsi_optim *o, double metric)
{
    s->epoch++;
    if (s->kind != HSI_SCHED_PLATEAU) {
        o->cfg.lr = hsi_sched_lr_at(s, s->epoch);
        return;
    }
    if (metric < s->best * (1 - s->threshold)) {
        s->best = metric;
        s->num_bad = 0;
    } else {
        s->num_bad++;
    }
    if (s->cooldown_counter > 0) {
        s->cooldown_counter--;
        s->num_bad = 0;
    }
    if (s->num_bad > s->patience) {
        double old = o->cfg.lr, nl = fmax(old * s->factor, s->min_lr);
        if (old - nl > 1e-8) o->cfg.lr = nl;
        s->cooldown_counter = s->cooldown;
        s->num_bad = 0;
    }
}

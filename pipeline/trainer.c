/* trainer.c — the training job (see trainer.h): open, split, fit the
 * preprocessing on training pixels, fused pass, patches, loader, autograd
 * training with validation and early stopping, test metrics, whole-scene
 * map, run directory. Every step is a library call; this file owns the
 * order, the files written, the timings and the progress events. */
#define _GNU_SOURCE
#include "pipeline/trainer.h"

#include <cJSON.h>
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/cuda_plugin.h"
#include "core/dist.h"
#include "core/threads.h"
#include "io/cube.h"
#include "io/envi.h"
#include "io/gdal_io.h"
#include "io/labels.h"
#include "io/quicklook.h"
#include "kernels/cuda.h"
#include "models/checkpoint.h"
#include "models/model_cuda.h"
#include "models/tensor.h"
#include "pipeline/ddp.h"
#include "pipeline/loader.h"
#include "pipeline/metrics.h"
#include "pipeline/report.h"
#include "pipeline/run_internal.h"
#include "pipeline/workdir.h"

void hsi_train_config_init(hsi_train_config *c)
{
    memset(c, 0, sizeof *c);
    c->model = "cnn2d";
    c->norm = HSI_NORM_ZSCORE;
    c->pca = 30;
    c->patch = 11;
    c->pad = HSI_PAD_MIRROR;
    c->split = HSI_SPLIT_RANDOM;
    c->train_fraction = 0.1;
    c->val_fraction = 0; /* keep the last epoch: a few pixels per class cannot choose one */
    c->block = 0;        /* auto: max(16, 4 * (P / 2) + 4) */
    c->augment = 1;
    c->epochs = 40;
    c->batch = 16;
    c->lr = 1e-3;
    c->weight_decay = 1e-4;
    c->patience = 15;
    c->seed = 1;
    c->schedule = HSI_SCHED_COSINE;
    c->workers = 1;
    c->prefetch = 2;
    c->device = "cpu"; /* the GPU only when asked: auto or cuda */
    c->conv = "auto";
}

struct hsi_trainer {
    hsi_train_config c;
    hsi_cube cube;
    hsi_labels lab, ltr, lte;
    hsi_split sp;
    hsi_run run;    /* the pipeline being trained: preprocessing, classes, model */
    hsi_view fc;    /* the preprocessed (C, L, S) float32 cube: packed host, or BIP over a mapping */
    /* --mem-limit: the features streamed through a file (its names, until
     * they are removed), and the thread that gives back the pages of the
     * mappings bigger than the budget */
    int streamed;
    char *stream_hdr, *stream_data;
    pthread_t trim_thread;
    pthread_mutex_t trim_lock;
    pthread_cond_t trim_wake;
    int trim_running, trim_stop;
    const hsi_buffer *trim_buf[2]; /* the raw cube's mapping, the features' (NULL: none) */
    hsi_patcher pt;
    int have_patcher;
    /* GPU: the features on the device, the patches cut there (make_resident) */
    int resident;
    hsi_view fdev;
    hsi_patcher dpt;
    float *xpatch_d; /* (batch, C, P, P) */
    hsi_patch_dataset ds; /* the loader's view of the training pixels */
    hsi_loader *ld;
    hsi_dmodel *dm;
    hsi_gpu_classifier gq; /* validation on the device, with dm */
    hsi_optim *opt;
    hsi_optim_config oc;
    hsi_gpu_conv gconv; /* the device model's convolutions (--conv) */
    hsi_sched sched;
    hsi_graph *g;
    FILE *log;
    hsi_workdir wd; /* c.out_dir is wd.work until the run moves into place */
    char *history;  /* history.csv so far */
    size_t history_len;
    char *p_state, *p_best;
    int on_gpu, have_val, first_epoch, epoch, best_epoch, since_best, stop, finished;
    /* the epoch in progress (hsi_trainer_step) */
    int in_epoch;
    double ep_t0, ep_loss_sum, ep_wait; /* ep_wait: the loader's, GPU */
    int64_t ep_correct, ep_seen;
    double best_val, t_start, t_train;
    hsi_step_times pa;
    int64_t samples_total;
    hsi_train_result res;
    /* data-parallel (ddp.h): NULL on the single-process path */
    hsi_ddp *ddp;
    int writer; /* this process writes the run's files (rank 0) */
    int ranks;
};

/* ------------------------------------------------------------- helpers */

/* Sends text to the callback and train.log. log_text: what the log gets
 * when it differs (NULL = the same). Returns the callback's answer. */
static int emit(hsi_trainer *t, hsi_train_event *ev, const char *text, const char *log_text)
{
    if (t->log) {
        fputs(log_text ? log_text : text, t->log);
        fflush(t->log);
    }
    ev->text = text;
    return t->c.progress ? t->c.progress(t->c.progress_ctx, ev) : 0;
}

static void info(hsi_trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void info(hsi_trainer *t, const char *fmt, ...)
{
    char *s = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    hsi_train_event ev = {.kind = HSI_TRAIN_EV_INFO};
    if (emit(t, &ev, s, NULL)) t->stop = 1;
    free(s);
}

/* Text that a printing function writes to a FILE, as a string. */
typedef void (*print_fn)(const void *obj, FILE *fp, const void *arg, int flag);

static void print_split(const void *obj, FILE *fp, const void *names, int flag)
{
    (void)flag;
    hsi_split_print(obj, fp, names);
}

static void print_metrics(const void *obj, FILE *fp, const void *run, int with_confusion)
{
    const hsi_run *r = run;
    hsi_metrics_print(obj, fp, (const char *const *)r->names, r->label_ids, with_confusion);
}

static char *print_to_string(print_fn fn, const void *obj, const void *arg, int flag)
{
    char *s = NULL;
    size_t n = 0;
    FILE *fp = open_memstream(&s, &n);
    if (!fp) return NULL;
    fn(obj, fp, arg, flag);
    fclose(fp);
    return s;
}


static const char *split_name(const hsi_train_config *c)
{
    return c->train_labels ? "explicit" : c->split == HSI_SPLIT_DISJOINT ? "disjoint" : "random";
}

static cJSON *config_json(const hsi_train_config *c, int n_features, int patch)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "cube", c->cube_path);
    cJSON_AddStringToObject(o, "labels", c->labels_path ? c->labels_path : "");
    cJSON_AddStringToObject(o, "model", c->model);
    cJSON_AddNumberToObject(o, "features", n_features);
    cJSON_AddNumberToObject(o, "patch", patch);
    cJSON_AddStringToObject(o, "normalize", hsi_norm_mode_name(c->norm));
    cJSON_AddNumberToObject(o, "pca", c->pca);
    cJSON_AddNumberToObject(o, "pca_variance", c->pca_variance);
    cJSON_AddBoolToObject(o, "whiten", c->whiten);
    cJSON_AddStringToObject(o, "fit_on", c->fit_on_all ? "all" : "train");
    cJSON_AddStringToObject(o, "split", split_name(c));
    cJSON_AddNumberToObject(o, "train_fraction", c->train_fraction);
    cJSON_AddNumberToObject(o, "per_class", (double)c->per_class);
    cJSON_AddNumberToObject(o, "val_fraction", c->val_fraction);
    cJSON_AddNumberToObject(o, "epochs", c->epochs);
    cJSON_AddNumberToObject(o, "batch", c->batch);
    cJSON_AddNumberToObject(o, "lr", c->lr);
    cJSON_AddNumberToObject(o, "weight_decay", c->weight_decay);
    cJSON_AddNumberToObject(o, "seed", (double)c->seed);
    cJSON_AddNumberToObject(o, "workers", c->workers);
    cJSON_AddBoolToObject(o, "augment", c->augment);
    cJSON_AddStringToObject(o, "bands", c->bands_spec ? c->bands_spec : "");
    cJSON_AddStringToObject(o, "wavelengths", c->wavelengths_spec ? c->wavelengths_spec : "");
    cJSON_AddBoolToObject(o, "keep_bad_bands", c->keep_bad_bands);
    cJSON_AddStringToObject(o, "pad", c->pad == HSI_PAD_ZERO ? "zero" : "mirror");
    cJSON_AddNumberToObject(o, "block", c->block);
    cJSON_AddNumberToObject(o, "schedule", c->schedule);
    return o;
}

/* --resume: the options that change the model, the data or the steps must
 * be the run's (saved with each checkpoint); epochs may grow, and the
 * loader's workers, patience and threads do not change the results. */
static hsi_status check_resume_config(const hsi_train_config *c, const cJSON *saved, const char *path)
{
    static const char *const free_keys[] = {"epochs", "workers", "features"};
    hsi_status st = HSI_OK;
    if (!cJSON_IsObject(saved)) return HSI_OK; /* a checkpoint of an older hsi: nothing to compare */
    cJSON *now = config_json(c, 0, c->patch);
    const cJSON *e;
    cJSON_ArrayForEach(e, saved)
    {
        int skip = 0;
        for (size_t i = 0; i < sizeof free_keys / sizeof *free_keys; i++) skip |= !strcmp(e->string, free_keys[i]);
        const cJSON *n = cJSON_GetObjectItem(now, e->string);
        if (skip || !n || cJSON_Compare(e, n, 1)) continue;
        char *a = cJSON_PrintUnformatted(e), *b = cJSON_PrintUnformatted(n);
        st = HSI_FAIL(HSI_ERR_ARG, "--resume: '%s' was %s in the run (%s) and is %s now; resume with "
                                   "the run's options, or start again with --overwrite",
                      e->string, a ? a : "?", path, b ? b : "?");
        free(a);
        free(b);
        break;
    }
    cJSON_Delete(now);
    return st;
}

/* ------------------------------------------------------------- the step */

hsi_status hsi_train_step(hsi_module *net, hsi_optim *opt, hsi_graph *g, hsi_tensor *x,
                          hsi_tensor *y, const hsi_ce_opts *ce, double *loss_out,
                          hsi_tensor **logits_out, hsi_step_times *times)
{
    hsi_status st = HSI_OK;
    hsi_tensor *logits = NULL, *loss = NULL;
    double t0 = hsi_now();
    hsi_optim_zero_grad(opt);
    hsi_op_profile_mark(); /* op times start at the forward */
    HSI_TRY(hsi_module_forward(&logits, net, g, x));
    HSI_TRY(hsi_cross_entropy(&loss, g, logits, y, ce));
    double t1 = hsi_now();
    HSI_TRY(hsi_backward(loss, 0));
    double t2 = hsi_now();
    HSI_TRY(hsi_optim_step(opt));
    double t3 = hsi_now();
    if (times) {
        times->forward += t1 - t0;
        times->backward += t2 - t1;
        times->optimizer += t3 - t2;
    }
    *loss_out = hsi_tensor_item(loss);
    if (logits_out) *logits_out = logits;
cleanup:
    return st;
}

/* One batch on the CPU engine: the step, then the epoch's sums. */
static hsi_status step_cpu(hsi_trainer *t, const hsi_batch *b, const hsi_ce_opts *ce)
{
    hsi_status st = HSI_OK;
    const hsi_train_config *c = &t->c;
    int64_t shape[5];
    int nd = hsi_model_input_shape(c->model, (int)b->n, t->run.n_features, c->patch, shape);
    if (t->ddp) { /* this rank's slice of the global batch */
        double ls = 0;
        int64_t hits = 0;
        hsi_ddp_stats ds0, ds1;
        hsi_ddp_get_stats(t->ddp, &ds0);
        st = hsi_ddp_step(t->ddp, t->g, b->x, b->y, b->n, nd - 1, shape + 1, b->first, b->n_global,
                          b->seed, &ls, &hits);
        if (st != HSI_OK)
            return hsi_fail_context(st, "epoch %lld batch %lld", (long long)b->epoch + 1,
                                    (long long)b->index);
        hsi_ddp_get_stats(t->ddp, &ds1);
        t->pa.forward += ds1.forward - ds0.forward;
        t->pa.backward += ds1.backward - ds0.backward;
        t->pa.optimizer += ds1.optimizer - ds0.optimizer;
        t->ep_loss_sum += ls;
        t->ep_correct += hits;
        t->ep_seen += b->n;
        return HSI_OK;
    }
    hsi_graph_reset(t->g);
    hsi_tensor *x = NULL, *y = NULL, *logits = NULL;
    int64_t yshape[1] = {b->n};
    HSI_TRY(hsi_graph_tensor(&x, t->g, HSI_F32, nd, shape, 0));
    HSI_TRY(hsi_graph_tensor(&y, t->g, HSI_I32, 1, yshape, 0));
    memcpy(hsi_tensor_ptr(x), b->x, (size_t)hsi_tensor_count(x) * sizeof(float));
    memcpy(hsi_tensor_ptr(y), b->y, (size_t)b->n * sizeof(int32_t));
    double l = 0;
    HSI_TRY(hsi_train_step(t->run.net, t->opt, t->g, x, y, ce, &l, &logits, &t->pa));
    if (!isfinite(l))
        return HSI_FAIL(HSI_ERR_NUMERIC,
                        "training diverged: loss is %g at epoch %lld batch %lld (lower --lr?)", l,
                        (long long)b->epoch + 1, (long long)b->index);
    t->ep_loss_sum += l * (double)b->n;
    t->ep_correct += hsi_run_count_correct(hsi_tensor_ptr(logits), b->n, logits->data.shape[1], b->y);
    t->ep_seen += b->n;
cleanup:
    return st;
}

/* mean_loss (may be NULL): the pixels' mean cross-entropy, same pass.
 * across_ranks (collective; every rank holds the same model): each rank
 * classifies its contiguous share of the pixels, the predictions and the
 * shares' loss sums are exchanged, and every rank computes the same
 * metrics (the predictions, so OA and the rest, are those of one process;
 * the mean loss agrees to rounding). */
static hsi_status eval_role(hsi_trainer *t, hsi_metrics *m, int role, double *mean_loss,
                            int across_ranks)
{
    hsi_status st = HSI_OK;
    const hsi_split *sp = &t->sp;
    const int64_t n = sp->n[role];
    const int R = across_ranks ? hsi_dist_size() : 1, r = R > 1 ? hsi_dist_rank() : 0;
    const int64_t lo = n * r / R, hi = n * (r + 1) / R;
    int32_t *pred = malloc((size_t)(n ? n : 1) * sizeof *pred);
    int64_t *offs = malloc((size_t)(R + 1) * sizeof *offs);
    double *sums = calloc((size_t)R, sizeof *sums);
    if (!pred || !offs || !sums) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    double mine = 0;
    if (t->on_gpu) /* the device copy as it stands (one rank) */
        HSI_TRY(hsi_gpu_classify(&t->gq, &t->run, pred + lo, t->resident ? &t->dpt : &t->pt,
                                 sp->idx[role] + lo, hi - lo, mean_loss ? sp->cls[role] + lo : NULL,
                                 &mine));
    else if (mean_loss)
        HSI_TRY(hsi_run_classify_loss(&t->run, pred + lo, &t->pt, sp->idx[role] + lo, hi - lo,
                                      t->c.batch * 2, t->g, sp->cls[role] + lo, &mine));
    else
        HSI_TRY(hsi_run_classify(&t->run, pred + lo, &t->pt, sp->idx[role] + lo, hi - lo,
                                 t->c.batch * 2, t->g));
    if (R > 1) {
        for (int k = 0; k <= R; k++) offs[k] = (int64_t)sizeof *pred * (n * k / R);
        HSI_TRY(hsi_dist_share_parts(pred, offs));
        sums[r] = hi > lo ? mine * (double)(hi - lo) : 0;
        for (int k = 0; k <= R; k++) offs[k] = (int64_t)sizeof *sums * k;
        HSI_TRY(hsi_dist_share_parts(sums, offs));
        double total = 0; /* in rank order: the same on every rank */
        for (int k = 0; k < R; k++) total += sums[k];
        mine = n > 0 ? total / (double)n : NAN;
    }
    if (mean_loss) *mean_loss = mine;
    HSI_TRY(hsi_metrics_compute(m, sp->cls[role], pred, n, sp->n_classes));
cleanup:
    free(pred);
    free(offs);
    free(sums);
    return st;
}

/* Where the trainer's passes run: the device it trains on. */
static hsi_device trainer_device(const hsi_trainer *t)
{
    return t->on_gpu ? HSI_DEVICE_CUDA : HSI_DEVICE_CPU;
}

/* ------------------------------------------------------------- create */

static hsi_status check_config(hsi_train_config *c)
{
    if (!c->cube_path || !c->out_dir || !c->model || !c->device)
        return HSI_FAIL(HSI_ERR_ARG, "training needs a cube, labels and an output directory");
    if (!c->labels_path && !(c->train_labels && c->test_labels))
        return HSI_FAIL(HSI_ERR_ARG, "training needs labels (or train and test label maps)");
    int known = 0;
    for (const hsi_model_spec *s = hsi_model_list(); s && s->name; s++) known |= !strcmp(s->name, c->model);
    if (!known) return HSI_FAIL(HSI_ERR_ARG, "--model %s: not a model hsi knows (hsi train --list-models)", c->model);
    if (!strcmp(c->model, "cnn1d")) c->patch = 1;
    if (c->patch < 1 || c->patch % 2 == 0 || c->patch > HSI_PATCH_MAX)
        return HSI_FAIL(HSI_ERR_ARG, "--patch must be odd and in 1..%d (got %d)", HSI_PATCH_MAX,
                        c->patch);
    if (c->epochs < 1 || c->batch < 1)
        return HSI_FAIL(HSI_ERR_ARG, "--epochs and --batch must be >= 1");
    hsi_device dev;
    if (hsi_device_parse(&dev, c->device, "--device") != HSI_OK) return HSI_ERR_ARG;
    int ranks = hsi_dist_size();
    /* the GPU's own options against the device asked for: with auto
     * becoming the CPU they go unused, as predict's do */
    if (hsi_train_device_options(c, dev) != HSI_OK) return HSI_ERR_ARG;
    /* auto: the GPU when one is there and the run can use it (one rank),
     * else the CPU; the run records what was chosen */
    if (dev == HSI_DEVICE_AUTO)
        dev = !(c->ddp || c->deterministic || c->bn_sync || ranks > 1) &&
                      hsi_cuda_device_count() > 0 ? HSI_DEVICE_CUDA : HSI_DEVICE_CPU;
    c->device = hsi_device_name(dev);
    if (c->ddp || c->deterministic || c->bn_sync || ranks > 1) { /* the data-parallel path */
        if (!strcasecmp(c->device, "cuda"))
            return HSI_FAIL(HSI_ERR_UNSUPPORTED,
                            "data-parallel training on the GPU (NCCL gradients into the device "
                            "trainer) is not wired yet; use --device cpu with several ranks");
        if (c->batch % ranks != 0)
            return HSI_FAIL(HSI_ERR_ARG, "--batch %d is the global batch: it must split into %d "
                                         "equal slices, one per rank (give a multiple of %d)",
                            c->batch, ranks, ranks);
        if (c->tile < 0) return HSI_FAIL(HSI_ERR_ARG, "--tile must be >= 0 (got %d)", c->tile);
    }
    if (hsi_conv_option(c->conv, dev, NULL, NULL) != HSI_OK) return HSI_ERR_ARG;
    if (!strcasecmp(c->device, "cuda")) {
        /* the plugin's reason (dlerror, or the CUDA runtime's text) when there is no device */
        hsi_status st = hsi_cuda_require("--device cuda");
        if (st != HSI_OK) return st;
    }
    return HSI_OK;
}

hsi_status hsi_train_device_options(const hsi_train_config *c, hsi_device dev)
{
    if (hsi_conv_option(c->conv, dev, NULL, NULL) != HSI_OK) return HSI_ERR_ARG;
    if (dev != HSI_DEVICE_CPU) return HSI_OK;
    if (c->cuda_graph)
        return HSI_FAIL(HSI_ERR_ARG, "--cuda-graph captures the GPU's training step: it needs "
                                     "--device cuda (or auto)");
    if (c->host_patches)
        return HSI_FAIL(HSI_ERR_ARG, "--host-patches says where the GPU's training patches are cut: "
                                     "it needs --device cuda (or auto)");
    return HSI_OK;
}

/* Read, split, class names and colours. */
static hsi_status open_and_split(hsi_trainer *t)
{
    hsi_status st = HSI_OK;
    hsi_train_config *c = &t->c;
    hsi_train_profile *prof = &t->res.prof;
    double tm = hsi_now();
    HSI_TRY(hsi_cube_open(&t->cube, c->cube_path, &(hsi_open_options){c->cube_var, 0}));
    const int64_t L = t->cube.view.shape[1], S = t->cube.view.shape[2];
    if (c->train_labels) {
        HSI_TRY(hsi_labels_open(&t->ltr, c->train_labels, c->labels_var));
        HSI_TRY(hsi_labels_open(&t->lte, c->test_labels, c->labels_var));
    } else {
        HSI_TRY(hsi_labels_open(&t->lab, c->labels_path, c->labels_var));
    }
    const hsi_labels *lref = c->train_labels ? &t->ltr : &t->lab;
    if (lref->map.shape[0] != L || lref->map.shape[1] != S ||
        (c->train_labels && (t->lte.map.shape[0] != L || t->lte.map.shape[1] != S)))
        return HSI_FAIL(HSI_ERR_ARG, "labels are %lld x %lld but the cube is %lld lines x %lld samples",
                        (long long)lref->map.shape[0], (long long)lref->map.shape[1], (long long)L,
                        (long long)S);
    prof->read = hsi_now() - tm;

    tm = hsi_now();
    hsi_split_params spp;
    hsi_split_params_init(&spp);
    spp.mode = c->split;
    spp.train_fraction = c->train_fraction;
    spp.per_class = c->per_class;
    spp.val_fraction = c->val_fraction;
    spp.seed = c->seed;
    /* a lone training block narrower than 4 radii is eaten by the guard band */
    spp.block = c->block > 0 ? c->block : (4 * (c->patch / 2) + 4 > 16 ? 4 * (c->patch / 2) + 4 : 16);
    spp.patch_radius = c->split == HSI_SPLIT_DISJOINT ? c->patch / 2 : 0;
    if (c->train_labels) HSI_TRY(hsi_split_explicit(&t->sp, &t->ltr.map, &t->lte.map, &spp));
    else HSI_TRY(hsi_split_make(&t->sp, &t->lab.map, &spp));
    const hsi_split *sp = &t->sp;
    const int K = sp->n_classes;
    if (K < 2)
        return HSI_FAIL(HSI_ERR_ARG, "%s: only %d class is labelled; training needs at least 2",
                        c->labels_path ? c->labels_path : c->train_labels, K);
    if (sp->n[HSI_ROLE_TRAIN] == 0 || sp->n[HSI_ROLE_TEST] == 0)
        return HSI_FAIL(HSI_ERR_ARG, "the split left %lld training and %lld test pixels",
                        (long long)sp->n[HSI_ROLE_TRAIN], (long long)sp->n[HSI_ROLE_TEST]);
    hsi_run *r = &t->run;
    r->n_classes = K;
    r->label_ids = malloc((size_t)K * sizeof *r->label_ids);
    r->names = calloc((size_t)K, sizeof *r->names);
    r->colors = malloc((size_t)K * 3);
    if (!r->label_ids || !r->names || !r->colors) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    for (int k = 0; k < K; k++) {
        int64_t id = sp->class_ids[k];
        r->label_ids[k] = id;
        char buf[32];
        snprintf(buf, sizeof buf, "Class %lld", (long long)id); /* as the map's header names the rest */
        r->names[k] = strdup(lref->names && id < lref->n_classes && lref->names[id] ? lref->names[id]
                                                                                    : buf);
        if (!r->names[k]) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        /* the label file's colour, or (none, or black for a real class) the
         * palette the pictures use, by label value */
        const uint8_t *lc = lref->colors && id < lref->n_classes ? lref->colors + 3 * id : NULL;
        if (lc && (lc[0] || lc[1] || lc[2])) memcpy(r->colors + 3 * k, lc, 3);
        else hsi_quicklook_palette((int)id, r->colors + 3 * k);
    }
    info(t, "split (%s, seed %llu): %lld train, %lld validation, %lld test pixels in %d classes\n",
         c->train_labels ? "explicit" : c->split == HSI_SPLIT_DISJOINT ? "spatially disjoint" : "random",
         (unsigned long long)c->seed, (long long)sp->n[HSI_ROLE_TRAIN], (long long)sp->n[HSI_ROLE_VAL],
         (long long)sp->n[HSI_ROLE_TEST], K);
    char *table = print_to_string(print_split, sp, r->names, 0);
    if (table) {
        hsi_train_event ev = {.kind = HSI_TRAIN_EV_INFO};
        if (emit(t, &ev, table, NULL)) t->stop = 1;
        free(table);
    }
    char *path = t->writer ? hsi_run_path(c->out_dir, "split.json") : NULL;
    if (t->writer && !path) return HSI_ERR_NOMEM;
    if (path) st = hsi_split_save_json(sp, path, (const char *const *)r->names, 0);
    free(path);
    prof->split = hsi_now() - tm;
cleanup:
    return st;
}

/* ------------------------------------------------- --mem-limit: streaming */

/* Milliseconds between two looks at this process's resident file pages.
 * A read of a mapping maps more than it asked for (fault-around, large
 * page-cache folios: about 80 KiB per random 4 KiB touch on Linux 6.x), so
 * a random pass makes them grow by up to a few MiB per millisecond. */
#define TRIM_MS 20

static double mib(int64_t bytes) { return (double)bytes / (1 << 20); }

/* Resident file-backed and shared pages of this process, in bytes
 * (/proc/self/statm's third field); -1 when unknown. */
static int64_t resident_shared(void)
{
    long long pages = -1;
    FILE *fp = fopen("/proc/self/statm", "r");
    if (!fp) return -1;
    if (fscanf(fp, "%*s %*s %lld", &pages) != 1) pages = -1;
    fclose(fp);
    return pages < 0 ? -1 : (int64_t)pages * sysconf(_SC_PAGESIZE);
}

/* Gives back this process's pages of the mappings in trim_buf whenever
 * its resident file pages pass a quarter of the budget (looked at every
 * TRIM_MS: what a pass maps between two looks stays within the next
 * quarter; MADV_DONTNEED on a read-only file mapping: the page cache
 * keeps them, the next read is a minor fault), so resident memory does not grow with
 * the part of the scene a pass touches. The readers (the loader's
 * workers, validation, the map) never notice: the same bytes come back. */
static void *trim_main(void *arg)
{
    hsi_trainer *t = arg;
    const int64_t high = t->c.mem_limit / 4;
    pthread_mutex_lock(&t->trim_lock);
    while (!t->trim_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)TRIM_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&t->trim_wake, &t->trim_lock, &ts);
        if (t->trim_stop) break;
        int64_t rs = resident_shared();
        if (rs >= 0 && rs <= high) continue;
        for (int i = 0; i < 2; i++)
            if (t->trim_buf[i] && t->trim_buf[i]->data)
                madvise(t->trim_buf[i]->data, t->trim_buf[i]->size, MADV_DONTNEED);
    }
    pthread_mutex_unlock(&t->trim_lock);
    return NULL;
}

/* Adds a mapping (slot 0 the raw cube, 1 the features) to the trims,
 * starting the thread the first time. */
static hsi_status trim_add(hsi_trainer *t, int slot, const hsi_buffer *b)
{
    if (!b || b->kind != HSI_BUF_MMAP || !b->data) return HSI_OK;
    if (!t->trim_running) {
        pthread_mutex_init(&t->trim_lock, NULL);
        pthread_cond_init(&t->trim_wake, NULL);
        t->trim_stop = 0;
        int e = pthread_create(&t->trim_thread, NULL, trim_main, t);
        if (e) {
            pthread_cond_destroy(&t->trim_wake);
            pthread_mutex_destroy(&t->trim_lock);
            return HSI_FAIL(HSI_ERR_STATE, "--mem-limit: cannot start the thread that trims the "
                                           "mappings: %s", strerror(e));
        }
        t->trim_running = 1;
    }
    pthread_mutex_lock(&t->trim_lock);
    t->trim_buf[slot] = b;
    pthread_mutex_unlock(&t->trim_lock);
    return HSI_OK;
}

/* Before a mapping is unmapped: no trim may touch its addresses again. */
static void trim_stop(hsi_trainer *t)
{
    if (!t->trim_running) return;
    pthread_mutex_lock(&t->trim_lock);
    t->trim_stop = 1;
    pthread_cond_signal(&t->trim_wake);
    pthread_mutex_unlock(&t->trim_lock);
    pthread_join(t->trim_thread, NULL);
    pthread_cond_destroy(&t->trim_wake);
    pthread_mutex_destroy(&t->trim_lock);
    t->trim_running = 0;
    t->trim_buf[0] = t->trim_buf[1] = NULL;
}

/* The access pattern of the features mapping from now on (MADV_RANDOM for
 * shuffled patches: no readahead of neighbours that will not be read). */
static void features_advise(hsi_trainer *t, int advice)
{
    if (t->streamed && t->fc.buf && t->fc.buf->data)
        madvise(t->fc.buf->data, t->fc.buf->size, advice);
}

/* The temporary's names; the data stays reachable through the mapping
 * until it is unmapped, so this runs as soon as the cube is mapped (and on
 * every failure before): no run, however it ends, leaves the file. */
static void stream_remove(hsi_trainer *t)
{
    if (t->stream_data) unlink(t->stream_data);
    if (t->stream_hdr) unlink(t->stream_hdr);
    free(t->stream_data);
    free(t->stream_hdr);
    t->stream_data = t->stream_hdr = NULL;
}

/* The features through a file: the fused pass with the floats of the
 * cube in memory (hsi_prep_write_envi_exact), interleaved BIP (a patch row
 * is one run of bytes), written to out_dir, mapped read-only as t->fc, and
 * the names removed. tile_lines bounds the pass's buffers to the budget. */
static hsi_status stream_features(hsi_trainer *t, int64_t tile_lines)
{
    hsi_status st = HSI_OK;
    const hsi_train_config *c = &t->c;
    const hsi_prep *p = &t->run.prep;
    const int64_t no = hsi_prep_n_out(p), L = t->cube.view.shape[1], S = t->cube.view.shape[2];
    hsi_meta om;
    int have_meta = 0;
    hsi_cube fcube;
    hsi_cube_init(&fcube);
    char name[64];
    snprintf(name, sizeof name, "features-stream-%d.hdr", hsi_dist_rank());
    t->stream_hdr = hsi_run_path(c->out_dir, name);
    if (!t->stream_hdr || !(t->stream_data = strndup(t->stream_hdr, strlen(t->stream_hdr) - 4))) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    HSI_TRY(hsi_prep_check(p, &t->cube.view, c->cube_path));
    HSI_TRY(hsi_prep_out_meta(&om, &t->cube.meta, p, "hsi train --mem-limit: streamed features (temporary)"));
    have_meta = 1;
    hsi_prep_pass pass = {.tile_lines = tile_lines,
                          .progress_label = c->progress_bars ? "stream features" : NULL,
                          .device = trainer_device(t)};
    HSI_TRY(hsi_prep_write_envi_exact(t->stream_hdr, p, &t->cube.view, &om, HSI_BIP, &pass));
    HSI_TRY(hsi_envi_open(&fcube, t->stream_hdr));
    const hsi_view *v = &fcube.view;
    if (v->dtype != HSI_F32 || v->swapped || v->ndim != 3 || v->shape[0] != no || v->shape[1] != L ||
        v->shape[2] != S || !v->buf || v->buf->kind != HSI_BUF_MMAP) {
        st = HSI_FAIL(HSI_ERR_STATE, "%s: the streamed features do not read back as the (%lld, %lld, "
                                     "%lld) float32 mapping written",
                      t->stream_hdr, (long long)no, (long long)L, (long long)S);
        goto cleanup;
    }
    hsi_view_ref(&t->fc, v);
    t->streamed = 1;
cleanup:
    hsi_cube_free(&fcube);
    if (have_meta) hsi_meta_free(&om);
    stream_remove(t);
    return st;
}

/* The fused pass: into memory, or (the features over --mem-limit)
 * streamed through a file; says which on stderr and in train.log. */
static hsi_status make_features(hsi_trainer *t)
{
    const hsi_train_config *c = &t->c;
    const hsi_prep *p = &t->run.prep;
    const int64_t no = hsi_prep_n_out(p), L = t->cube.view.shape[1], S = t->cube.view.shape[2];
    int64_t bytes = 0;
    if (!hsi_mul_ok(no, L, &bytes) || !hsi_mul_ok(bytes, S, &bytes) || !hsi_mul_ok(bytes, 4, &bytes))
        return HSI_FAIL(HSI_ERR_ARG, "%s: %lld features x %lld lines x %lld samples overflow 64 bits",
                        c->cube_path, (long long)no, (long long)L, (long long)S);
    if (c->mem_limit <= 0 || bytes <= c->mem_limit)
        return hsi_prep_transform(&t->fc, p, &t->cube.view,
                                  &(hsi_prep_pass){.progress_label = c->progress_bars ? "preprocess" : NULL,
                                                   .device = trainer_device(t)});
    /* the pass's buffers (one tile of features per thread) within an
     * eighth of the budget; the tiling does not change the floats */
    int64_t per_line = no * S * 4 * (int64_t)hsi_threads();
    int64_t tl = per_line > 0 ? c->mem_limit / 8 / per_line : 64;
    tl = tl < 1 ? 1 : tl > 64 ? 64 : tl;
    char line[1024];
    snprintf(line, sizeof line,
             "features: %lld x %lld x %lld float32 = %.1f MiB, over --mem-limit %.1f MiB: streamed "
             "from disk (written pixel-interleaved to a temporary file in %s, mapped read-only, "
             "its name removed at once; the page cache holds what fits)\n",
             (long long)no, (long long)L, (long long)S, mib(bytes), mib(c->mem_limit), c->out_dir);
    if (!hsi_is_quiet()) fprintf(stderr, "hsi train: %s", line);
    if (t->log) {
        fputs(line, t->log);
        fflush(t->log);
    }
    hsi_status st = stream_features(t, tl);
    if (st != HSI_OK) return hsi_fail_context(st, "--mem-limit: streaming the features to %s", c->out_dir);
    return trim_add(t, 1, t->fc.buf);
}

/* Preprocessing fitted on the training pixels (or all, flagged leaky). */
static hsi_status fit_preprocessing(hsi_trainer *t)
{
    hsi_status st = HSI_OK;
    const hsi_train_config *c = &t->c;
    const int64_t L = t->cube.view.shape[1], S = t->cube.view.shape[2];
    double tm = hsi_now();
    hsi_view mask;
    memset(&mask, 0, sizeof mask);
    int64_t mshape[2] = {L, S};
    const hsi_buffer *raw = t->cube.view.buf;
    if (c->mem_limit > 0 && raw && (int64_t)raw->size > c->mem_limit) {
        /* the passes over a mapped raw cube bigger than the budget give its
         * pages back as they go; a cube read into memory cannot */
        if (raw->kind == HSI_BUF_MMAP) HSI_TRY(trim_add(t, 0, raw));
        else
            hsi_warn("--mem-limit %.1f MiB: %s is read whole into memory (%.1f MiB; a %s cube is not "
                     "mapped): convert it to ENVI (hsi convert) to keep it on disk",
                     mib(c->mem_limit), c->cube_path, mib((int64_t)raw->size),
                     t->cube.meta.format ? t->cube.meta.format : "compressed");
    }
    HSI_TRY(hsi_view_alloc(&mask, HSI_U8, 2, mshape, HSI_BUF_HOST));
    for (int64_t i = 0; i < L * S; i++)
        ((uint8_t *)mask.buf->data)[i] = c->fit_on_all ? 1 : t->sp.role[i] == HSI_ROLE_TRAIN;
    hsi_prep_spec ps;
    hsi_prep_spec_init(&ps);
    ps.device = trainer_device(t);
    ps.bands = c->bands_spec;
    ps.wavelengths = c->wavelengths_spec;
    ps.drop_bbl = !c->keep_bad_bands;
    ps.norm = c->norm;
    ps.pca = c->pca;
    ps.pca_variance = c->pca > 0 ? 0 : c->pca_variance;
    ps.whiten = c->whiten;
    ps.progress = c->progress_bars;
    /* --deterministic: the statistics, covariance and fused passes give the
     * same bits on any number of our threads (fixed chunks); OpenBLAS runs
     * the eigen solve on one thread, whose reductions could split */
    int blas_before = openblas_get_num_threads();
    if (c->deterministic) openblas_set_num_threads(1);
    st = hsi_prep_fit(&t->run.prep, &t->cube, &mask, &ps);
    hsi_view_release(&mask);
    const hsi_prep *p = &t->run.prep;
    if (st == HSI_OK) st = make_features(t);
    if (c->deterministic) openblas_set_num_threads(blas_before);
    if (st != HSI_OK) goto cleanup;
    features_advise(t, MADV_RANDOM); /* shuffled patches and validation */
    t->run.n_features = (int)t->fc.shape[0];
    t->run.patch = c->patch;
    t->run.pad = c->pad;
    snprintf(t->run.model, sizeof t->run.model, "%s", c->model);
    t->res.prof.preprocess = hsi_now() - tm;
    if (p->has_pca) {
        double ev = 0;
        for (int64_t k = 0; k < p->pca.n_components; k++) ev += p->pca.explained_variance_ratio[k];
        info(t, "preprocess: %lld bands -> %s -> PCA %lld components (%.2f %% of the variance), "
                "fitted on %s pixels%s (%.2f s)\n",
             (long long)p->norm.n_bands, hsi_norm_mode_name(c->norm), (long long)p->pca.n_components,
             100 * ev, c->fit_on_all ? "ALL" : "training", c->fit_on_all ? " - leaky protocol" : "",
             t->res.prof.preprocess);
    } else {
        info(t, "preprocess: %lld bands -> %s, no PCA (%.2f s)\n", (long long)p->norm.n_bands,
             hsi_norm_mode_name(c->norm), t->res.prof.preprocess);
    }
cleanup:
    return st;
}

/* GPU training with one rank: the features go to the device once, when
 * they are in memory (not streamed from a file) and take at most a quarter
 * of its free memory, unless host_patches; the loader then moves each
 * batch's pixel indices and labels (hsi_pixel_fill), and the patches are
 * cut on the device with the batch's seed: the batches of the host's
 * patches, bit for bit. t->resident says whether; else *why says why not. */
static hsi_status make_resident(hsi_trainer *t, const hsi_augment *aug, char *why, size_t n_why)
{
    hsi_status st = HSI_OK;
    const hsi_train_config *c = &t->c;
    const hsi_cuda_plugin *cu = hsi_cuda_plugin_get();
    size_t bytes = (size_t)hsi_view_nbytes(&t->fc), free_b = 0, total_b = 0;
    if (c->host_patches) {
        snprintf(why, n_why, "host_patches set");
        return HSI_OK;
    }
    if (t->ranks > 1) { /* not reached: GPU training takes one rank */
        snprintf(why, n_why, "%d ranks", t->ranks);
        return HSI_OK;
    }
    if (!hsi_view_is_packed(&t->fc)) {
        snprintf(why, n_why, "the features are streamed from a file, over the memory limit");
        return HSI_OK;
    }
    if (!cu || cu->mem_info(&free_b, &total_b) != HSI_OK) {
        snprintf(why, n_why, "the device's free memory is unknown: %s", hsi_last_error());
        hsi_clear_error();
        return HSI_OK;
    }
    if (bytes > free_b / 4) {
        snprintf(why, n_why, "the features' %.1f MB are over a quarter of the device's %.1f MB free",
                 (double)bytes / 1e6, (double)free_b / 1e6);
        return HSI_OK;
    }
    HSI_TRY(hsi_cuda_view_to_device(&t->fdev, &t->fc, HSI_F32));
    HSI_TRY(hsi_patcher_init(&t->dpt, &t->fdev, c->patch, c->pad, aug));
    t->resident = 1;
    HSI_TRY(hsi_cuda_malloc((void **)&t->xpatch_d,
                            sizeof(float) * (size_t)(c->batch * hsi_patcher_sample_floats(&t->dpt))));
cleanup:
    return st;
}

/* Model, optimiser, schedule (or the checkpoint's), loader. */
static hsi_status build_model(hsi_trainer *t)
{
    hsi_status st = HSI_OK;
    const hsi_train_config *c = &t->c;
    hsi_run *r = &t->run;
    HSI_TRY(hsi_model_create(&r->net, c->model, r->n_features, c->patch, r->n_classes, HSI_F32, c->seed));
    hsi_optim_config_default(&t->oc, HSI_OPT_ADAMW);
    t->oc.lr = c->lr;
    t->oc.weight_decay = c->weight_decay;
    HSI_TRY(hsi_optim_new(&t->opt, &t->oc, r->net));
    hsi_sched *sc = &t->sched;
    hsi_sched_init(sc, c->schedule, c->lr);
    sc->step_size = c->epochs > 3 ? c->epochs / 3 : 1;
    sc->gamma = 0.1;
    sc->warmup = c->epochs >= 10 ? 2 : 0;
    sc->total = c->epochs;
    sc->min_lr = c->lr * 0.01;
    hsi_manual_seed(c->seed);
    t->best_epoch = -1;
    t->best_val = -1;
    if (c->resume) {
        char *cfgs = NULL;
        int ep = 0;
        st = hsi_train_load(t->p_state, r->net, t->opt, sc, &ep, &cfgs);
        if (st != HSI_OK) {
            free(cfgs);
            hsi_fail_context(st, "--resume");
            goto cleanup;
        }
        cJSON *rj = NULL, *like = config_json(c, 0, c->patch);
        st = hsi_run_state_config(&rj, t->p_state, cfgs, like);
        cJSON_Delete(like);
        free(cfgs);
        if (st != HSI_OK) goto cleanup;
        const cJSON *bv = cJSON_GetObjectItem(rj, "best_val"), *be = cJSON_GetObjectItem(rj, "best_epoch"),
                    *sb = cJSON_GetObjectItem(rj, "since_best");
        if (cJSON_IsNumber(bv) && cJSON_IsNumber(be) && cJSON_IsNumber(sb)) {
            t->best_val = bv->valuedouble;
            t->best_epoch = be->valueint;
            t->since_best = sb->valueint;
        }
        st = check_resume_config(c, cJSON_GetObjectItem(rj, "config"), t->p_state);
        cJSON_Delete(rj);
        if (st != HSI_OK) goto cleanup;
        t->first_epoch = ep;
        if (t->first_epoch >= c->epochs)
            return HSI_FAIL(HSI_ERR_ARG, "--resume: %s already holds %d epochs; ask for more with "
                                         "--epochs N (N > %d)",
                            t->p_state, ep, ep);
        info(t, "resuming after epoch %d from %s\n", ep, t->p_state);
        if (sc->kind != HSI_SCHED_CONSTANT && sc->total != c->epochs) {
            /* the saved schedule was planned for its own epoch count: plan it
             * for the new one and go on from where the run stopped */
            int was = sc->total, was_step = sc->step_size;
            double before[64];
            int n_before = ep < 64 ? ep : 64;
            for (int e = 0; e < n_before; e++) before[e] = hsi_sched_lr_at(sc, e);
            sc->total = c->epochs;
            sc->step_size = c->epochs > 3 ? c->epochs / 3 : 1;
            int same = ep <= 64;
            for (int e = 0; e < n_before; e++) same &= hsi_sched_lr_at(sc, e) == before[e];
            t->opt->cfg.lr = hsi_sched_lr_at(sc, sc->epoch);
            if (same)
                info(t, "schedule: planned for %d epochs, re-planned for %d; epoch %d goes on at lr "
                        "%.3g (the epochs run so far had the rates of a %d-epoch run: the result "
                        "equals one)\n",
                     was, c->epochs, ep + 1, t->opt->cfg.lr, c->epochs);
            else
                info(t, "schedule: planned for %d epochs (step every %d), re-planned for %d; epoch "
                        "%d goes on at lr %.3g (a run of %d epochs from the start would have had "
                        "other rates before, so the result differs from one)\n",
                     was, was_step, c->epochs, ep + 1, t->opt->cfg.lr, c->epochs);
        }
    } else {
        hsi_sched_begin(sc, t->opt);
    }
    t->epoch = t->first_epoch;
    if (c->ddp || c->deterministic || c->bn_sync || t->ranks > 1) {
        hsi_ddp_config dc;
        hsi_ddp_config_init(&dc);
        dc.bn_sync = c->bn_sync;
        dc.deterministic = c->deterministic;
        dc.tile = c->tile;
        if (c->bucket_mb > 0) dc.bucket_mb = c->bucket_mb;
        if (c->hash_every) dc.hash_every = c->hash_every < 0 ? 0 : c->hash_every;
        dc.overlap = !c->no_overlap;
        HSI_TRY(hsi_ddp_create(&t->ddp, r->net, t->opt, &dc)); /* rank 0's state to all */
        hsi_ddp_stats ds;
        hsi_ddp_get_stats(t->ddp, &ds);
        info(t, "data-parallel: %d rank%s, global batch %d (%d per rank), batch norm %s, %s, %d "
                "gradient bucket%s (%.2f MB)%s\n",
             t->ranks, t->ranks == 1 ? "" : "s", c->batch, c->batch / t->ranks,
             c->bn_sync ? "synchronised" : "per rank",
             c->deterministic ? "deterministic (fixed tiles, tree sum)"
                              : c->no_overlap ? "allreduce after backward"
                                              : "allreduce overlapped with backward",
             ds.n_buckets, ds.n_buckets == 1 ? "" : "s", ds.grad_bytes / 1e6,
             t->ranks > 1 ? "; rank 0 writes the files" : "");
    }
    info(t, "model %s: %lld parameters, input %d x %d x %d, %d classes; AdamW lr %g, batch %d\n",
         c->model, (long long)hsi_module_param_count(r->net), r->n_features, c->patch, c->patch,
         r->n_classes, c->lr, c->batch);
    hsi_augment aug = {c->augment, c->augment, 0.0f};
    HSI_TRY(hsi_patcher_init(&t->pt, &t->fc, c->patch, c->pad, &aug));
    t->have_patcher = 1;
    if (t->on_gpu) {
        char why[256] = "";
        HSI_TRY(make_resident(t, &aug, why, sizeof why));
        if (t->resident)
            info(t, "patches: cut on the device from the features there (%.1f MB; the loader "
                    "moves each batch's pixel indices and labels)\n",
                 (double)hsi_view_nbytes(&t->fdev) / 1e6);
        else
            info(t, "patches: cut on the host and copied (%s)\n", why);
    }
    const hsi_split *sp = &t->sp;
    t->ds = (hsi_patch_dataset){&t->pt, sp->idx[HSI_ROLE_TRAIN], sp->cls[HSI_ROLE_TRAIN], c->augment};
    hsi_loader_params lp;
    hsi_loader_params_init(&lp);
    lp.n_samples = sp->n[HSI_ROLE_TRAIN];
    lp.batch_size = c->batch;
    lp.x_bytes = t->resident ? sizeof(int64_t) : (size_t)hsi_patcher_sample_floats(&t->pt) * sizeof(float);
    lp.y_bytes = sizeof(int32_t);
    lp.n_workers = c->workers;
    lp.prefetch = c->prefetch;
    lp.shuffle = 1;
    lp.drop_last = sp->n[HSI_ROLE_TRAIN] > c->batch;
    lp.seed = c->seed;
    lp.first_epoch = t->first_epoch;
    lp.fill = t->resident ? hsi_pixel_fill : hsi_patch_fill;
    lp.ctx = &t->ds;
    lp.device_copy = t->on_gpu;
    /* the consumer's stream, which the batches' copies are ordered before:
     * the device model launches on this thread's stream */
    if (t->on_gpu) lp.cuda_stream = hsi_cuda_stream();
    if (t->ddp) {
        lp.dist_rank = hsi_dist_rank();
        lp.dist_size = t->ranks;
        lp.drop_last = sp->n[HSI_ROLE_TRAIN] > c->batch;
    }
    HSI_TRY(hsi_loader_create(&t->ld, &lp));
    if (t->on_gpu) {
        int64_t ishape[5];
        int nd = hsi_model_input_shape(c->model, 1, r->n_features, c->patch, ishape);
        HSI_TRY(hsi_dmodel_create(&t->dm, r->net, nd - 1, ishape + 1, c->batch, &t->oc, c->seed));
        HSI_TRY(hsi_dmodel_set_conv(t->dm, t->gconv));
        HSI_TRY(hsi_dmodel_set_graph(t->dm, c->cuda_graph));
        /* resumed: the checkpoint's Adam moments and step count (a run of
         * either device: the state is the same) */
        if (t->first_epoch > 0) HSI_TRY(hsi_dmodel_optim_state(t->dm, r->net, t->opt, 0));
        HSI_TRY(hsi_gpu_classifier_init(&t->gq, r, t->dm, c->batch, t->gconv));
        info(t, "device: CUDA, convolutions by %s%s (batches copied on the loader's stream; "
                "validation and the map on the device; each epoch's checkpoint copied to the host)\n",
             hsi_dmodel_conv_name(t->dm), c->cuda_graph ? ", full batches as one CUDA Graph" : "");
    }
    HSI_TRY(hsi_graph_new(&t->g));
    t->have_val = sp->n[HSI_ROLE_VAL] > 0;
cleanup:
    return st;
}

static hsi_status history_begin(hsi_trainer *t);

hsi_status hsi_trainer_create(hsi_trainer **out, const hsi_train_config *cfg)
{
    hsi_status st = HSI_OK;
    *out = NULL;
    hsi_trainer *t = calloc(1, sizeof *t);
    if (!t) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    t->c = *cfg;
    t->wd.lock_fd = -1;
    t->t_start = hsi_now();
    hsi_cube_init(&t->cube);
    hsi_labels_init(&t->lab);
    hsi_labels_init(&t->ltr);
    hsi_labels_init(&t->lte);
    t->ranks = hsi_dist_size();
    t->writer = hsi_dist_rank() == 0;
    HSI_TRY(check_config(&t->c));
    t->on_gpu = !strcasecmp(t->c.device, "cuda");
    {
        hsi_conv_impl cimpl = HSI_CONV_IMPL_AUTO;
        HSI_TRY(hsi_conv_option(t->c.conv, t->on_gpu ? HSI_DEVICE_CUDA : HSI_DEVICE_CPU, &cimpl,
                                &t->gconv));
        if (!t->on_gpu && cimpl != HSI_CONV_IMPL_AUTO) hsi_conv_set_impl(cimpl);
    }
    if (t->c.threads > 0) hsi_threads_set(t->c.threads);
    /* new runs are written beside the directory and moved in at the end;
     * with several ranks rank 0 decides where and tells the others (they
     * read a checkpoint from there on --resume and write nothing) */
    if (t->writer) st = hsi_workdir_begin(&t->wd, cfg->out_dir, t->c.resume, t->c.overwrite);
    if (t->ranks > 1) {
        char where[4096] = "";
        if (t->writer && st == HSI_OK) snprintf(where, sizeof where, "%s", t->wd.work);
        hsi_status bst = hsi_dist_bcast(where, sizeof where, 0);
        if (st == HSI_OK) st = bst;
        if (st == HSI_OK && !where[0])
            st = HSI_FAIL(HSI_ERR_STATE, "rank 0 could not prepare %s (its message is above)",
                          cfg->out_dir);
        if (st == HSI_OK && !t->writer) {
            t->wd.kind = HSI_WD_IN_PLACE; /* rank 0's folder: never removed from here */
            if (!(t->wd.work = strdup(where))) st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        }
    }
    if (st != HSI_OK) goto cleanup;
    t->c.out_dir = t->wd.work;
    if (!(t->p_state = hsi_run_path(t->c.out_dir, "train_state.safetensors")) ||
        !(t->p_best = hsi_run_path(t->c.out_dir, "best.safetensors"))) {
        st = HSI_ERR_NOMEM;
        goto cleanup;
    }
    {
        char *lp = hsi_run_path(t->c.out_dir, "train.log");
        if (!lp) {
            st = HSI_ERR_NOMEM;
            goto cleanup;
        }
        t->log = t->writer ? fopen(lp, t->c.resume ? "a" : "w") : NULL;
        if (t->writer && !t->log) st = HSI_FAIL(HSI_ERR_IO, "%s: cannot write: %s", lp, strerror(errno));
        free(lp);
        if (st != HSI_OK) goto cleanup;
    }
    if (t->wd.note[0]) info(t, "%s", t->wd.note);
    HSI_TRY(open_and_split(t));
    HSI_TRY(fit_preprocessing(t));
    HSI_TRY(build_model(t));
    HSI_TRY(history_begin(t));
    t->t_train = hsi_now();
    *out = t;
    return HSI_OK;
cleanup:
    hsi_trainer_free(t);
    return st;
}

/* ------------------------------------------------------------- epochs */

/* After the loader's last batch of an epoch: validation, schedule, best
 * weights, the event, the checkpoint, early stopping. */
static const char history_head[] =
    "epoch,train_loss,train_acc,val_oa,val_loss,lr,samples_per_s,seconds\n";

static int history_add(hsi_trainer *t, const char *row)
{
    size_t k = strlen(row);
    char *nb = realloc(t->history, t->history_len + k + 1);
    if (!nb) return 0;
    memcpy(nb + t->history_len, row, k + 1);
    t->history = nb;
    t->history_len += k;
    return 1;
}

/* history.csv: the header, then (on --resume) the rows of the epochs the
 * state holds, from the run's own history.csv when it has one. */
static hsi_status history_begin(hsi_trainer *t)
{
    if (!history_add(t, history_head)) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    if (!t->c.resume || t->first_epoch == 0) return HSI_OK;
    char *p = hsi_run_path(t->c.out_dir, "history.csv"), *text = NULL;
    size_t n = 0;
    /* a run of an hsi before val_loss: its rows get an empty val_loss */
    static const char head_v1[] = "epoch,train_loss,train_acc,val_oa,lr,samples_per_s,seconds\n";
    int v1 = 0;
    if (p && access(p, F_OK) == 0 && hsi_read_file(p, &text, &n) == HSI_OK &&
        (!strncmp(text, history_head, strlen(history_head)) ||
         (v1 = !strncmp(text, head_v1, strlen(head_v1))))) {
        char *line = text + (v1 ? strlen(head_v1) : strlen(history_head));
        for (int e = 0; e < t->first_epoch && *line; e++) {
            char *end = strchr(line, '\n'), row[512];
            if (!end || end - line > 400) break;
            snprintf(row, sizeof row, "%.*s", (int)(end - line + 1), line);
            char *q = row;
            for (int f = 0; v1 && q && f < 4; f++) q = strchr(q, ',') ? strchr(q, ',') + 1 : NULL;
            if (v1 && q) { /* "e,l,a,v,lr..." -> "e,l,a,v,,lr..." */
                memmove(q + 1, q, strlen(q) + 1);
                *q = ',';
            }
            if (atoi(row) != e + 1 || !history_add(t, row)) break;
            line = end + 1;
        }
    }
    free(text);
    free(p);
    return HSI_OK;
}

/* One row per epoch (NaN: not measured, an empty field). */
static hsi_status history_write(hsi_trainer *t, int epoch, double loss, double acc, double val_oa,
                                double val_loss, double lr, double sps, double secs)
{
    char row[256], a[32] = "", v[32] = "", vl[32] = "";
    if (isfinite(acc)) snprintf(a, sizeof a, "%.6f", acc);
    if (isfinite(val_oa)) snprintf(v, sizeof v, "%.6f", val_oa);
    if (isfinite(val_loss)) snprintf(vl, sizeof vl, "%.6g", val_loss);
    snprintf(row, sizeof row, "%d,%.6g,%s,%s,%s,%.6g,%.1f,%.3f\n", epoch, loss, a, v, vl, lr, sps, secs);
    if (!history_add(t, row)) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    char *p = hsi_run_path(t->c.out_dir, "history.csv");
    if (!p) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    hsi_status st = hsi_write_file_atomic(p, t->history, t->history_len);
    free(p);
    return st;
}

static hsi_status end_epoch(hsi_trainer *t)
{
    hsi_status st = HSI_OK;
    const hsi_train_config *c = &t->c;
    hsi_train_profile *prof = &t->res.prof;
    const int epoch = t->epoch;
    if (t->ddp && t->ranks > 1) {
        /* the epoch's numbers over all ranks; rank 0's batch-norm buffers
         * to all (what it validates and saves; DDP's broadcast_buffers) */
        double v[3] = {t->ep_loss_sum, (double)t->ep_correct, (double)t->ep_seen};
        HSI_TRY(hsi_dist_allreduce(v, 3, HSI_F64, HSI_DIST_SUM));
        t->ep_loss_sum = v[0];
        t->ep_correct = (int64_t)v[1];
        t->ep_seen = (int64_t)v[2];
        HSI_TRY(hsi_ddp_broadcast_state(t->ddp, 1));
    }
    const int64_t n_seen = t->ep_seen;
    double loss = 0, acc = 0;
    if (t->on_gpu) {
        /* the epoch's mean, as the CPU's (waits for the stream) */
        HSI_TRY(hsi_dmodel_loss_mean(t->dm, &loss, NULL));
        /* forward+backward+update are not separated on the device */
        t->pa.forward += hsi_now() - t->ep_t0 - t->ep_wait;
        if (n_seen && !isfinite(loss)) {
            st = HSI_FAIL(HSI_ERR_NUMERIC, "training diverged: the mean loss of epoch %d is %g "
                                           "(lower --lr?)", epoch + 1, loss);
            goto cleanup;
        }
        HSI_TRY(hsi_dmodel_to_host(t->dm, t->run.net, 0)); /* the checkpoints (validation: on the device) */
        acc = NAN;
    } else {
        loss = n_seen ? t->ep_loss_sum / (double)n_seen : 0;
        acc = n_seen ? (double)t->ep_correct / (double)n_seen : 0;
    }
    t->samples_total += n_seen;
    double dt = hsi_now() - t->ep_t0;
    double val_oa = acc, val_loss = NAN;
    if (t->have_val) {
        double tv = hsi_now();
        /* the same model on every rank (buffers synced above): each
         * validates its share of the pixels, all get the same figures */
        hsi_metrics vm;
        HSI_TRY(eval_role(t, &vm, HSI_ROLE_VAL, &val_loss, t->ranks > 1));
        val_oa = vm.oa;
        hsi_metrics_free(&vm);
        prof->validate += hsi_now() - tv;
    }
    double lr_now = t->opt->cfg.lr;
    hsi_sched_epoch_end(&t->sched, t->opt, 1 - val_oa);
    /* without validation pixels the last epoch is kept; ties keep the later
     * epoch: tiny validation sets saturate early */
    int improved = !t->have_val || val_oa >= t->best_val;
    if (improved) {
        t->best_val = val_oa;
        t->best_epoch = epoch;
        t->since_best = 0;
        if (t->writer) HSI_TRY(hsi_module_save(t->run.net, t->p_best, NULL, 0));
    } else {
        t->since_best++;
    }
    double el = hsi_now() - t->t_train;
    double eta = el / (epoch - t->first_epoch + 1) * (c->epochs - epoch - 1);
    char vbuf[64] = "", line[288];
    if (t->have_val)
        snprintf(vbuf, sizeof vbuf, "  val OA %5.1f%%%s loss %.4f", 100 * val_oa, improved ? "*" : " ",
                 val_loss);
    double sps = dt > 0 ? (double)n_seen / dt : 0;
    snprintf(line, sizeof line,
             "epoch %3d/%d  loss %.4f  train acc %5.1f%%%s  lr %.2e  %6.0f samples/s  ETA %.0fs\n",
             epoch + 1, c->epochs, loss, 100 * acc, vbuf, lr_now, sps, eta);
    hsi_train_event ev = {.kind = HSI_TRAIN_EV_EPOCH,
                          .epoch = epoch + 1,
                          .epochs = c->epochs,
                          .loss = loss,
                          .train_acc = acc,
                          .val_oa = t->have_val ? val_oa : NAN,
                          .improved = improved,
                          .lr = lr_now,
                          .samples_per_s = sps,
                          .eta_s = eta,
                          .val_loss = val_loss};
    if (emit(t, &ev, line, NULL)) t->stop = 1;
    if (t->ranks > 1) { /* rank 0's callback may ask to stop: every rank stops */
        int stop = t->stop;
        HSI_TRY(hsi_dist_bcast(&stop, sizeof stop, 0));
        t->stop = stop;
    }
    if (t->writer)
        HSI_TRY(history_write(t, epoch + 1, loss, acc, t->have_val ? val_oa : NAN, val_loss, lr_now, sps, dt));
    if (t->writer) {
        /* a device run's Adam moments into the optimiser's state: the
         * checkpoint is the CPU's, and resumes on either device */
        if (t->on_gpu) HSI_TRY(hsi_dmodel_optim_state(t->dm, t->run.net, t->opt, 1));
        cJSON *rj = cJSON_CreateObject();
        cJSON_AddNumberToObject(rj, "best_val", t->best_val);
        cJSON_AddNumberToObject(rj, "best_epoch", t->best_epoch);
        cJSON_AddNumberToObject(rj, "since_best", t->since_best);
        cJSON_AddItemToObject(rj, "config", config_json(c, 0, c->patch));
        char *rs = cJSON_PrintUnformatted(rj);
        cJSON_Delete(rj);
        if (!rs) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        st = hsi_train_save(t->p_state, t->run.net, t->opt, &t->sched, epoch + 1, rs);
        free(rs);
        if (st != HSI_OK) goto cleanup;
    }
    if (t->ranks > 1) HSI_TRY(hsi_dist_barrier()); /* the checkpoint is on disk for every rank */
    t->epoch = epoch + 1;
    if (c->patience > 0 && t->have_val && t->since_best >= c->patience) {
        info(t, "early stop: no validation improvement for %d epochs\n", c->patience);
        t->stop = 1;
    }
cleanup:
    return st;
}

hsi_status hsi_trainer_step(hsi_trainer *t, int *epoch_done, int *done)
{
    hsi_status st = HSI_OK;
    *epoch_done = 0;
    *done = 0;
    if (t->finished || t->stop || t->epoch >= t->c.epochs) {
        *epoch_done = *done = 1;
        return HSI_OK;
    }
    if (!t->in_epoch) {
        t->in_epoch = 1;
        t->ep_t0 = hsi_now();
        t->ep_loss_sum = t->ep_wait = 0;
        t->ep_correct = t->ep_seen = 0;
        if (t->on_gpu) hsi_dmodel_set_lr(t->dm, t->opt->cfg.lr);
        else hsi_module_train(t->run.net, 1);
    }
    hsi_batch *b = NULL;
    HSI_TRY(hsi_loader_next(t->ld, &b));
    if (b) {
        if (t->on_gpu) {
            /* the loader has copied the batch (or its pixel indices) to the
             * device on its own stream; the step runs there with no host sync */
            const float *x = b->x_dev;
            if (t->resident) {
                HSI_TRY(hsi_patches_extract(&t->dpt, t->xpatch_d, b->x_dev, b->n, t->c.augment, b->seed));
                x = t->xpatch_d;
            }
            HSI_TRY(hsi_dmodel_train_step(t->dm, x, b->y_dev, b->n));
            t->ep_seen += b->n;
            t->ep_wait += b->wait_s;
        } else {
            hsi_ce_opts ce;
            hsi_ce_opts_default(&ce);
            HSI_TRY(step_cpu(t, b, &ce));
        }
        return HSI_OK;
    }
    t->in_epoch = 0;
    HSI_TRY(end_epoch(t));
    *epoch_done = 1;
    *done = t->stop || t->epoch >= t->c.epochs;
cleanup:
    return st;
}

hsi_status hsi_trainer_epoch(hsi_trainer *t, int *done)
{
    hsi_status st = HSI_OK;
    int epoch_done = 0;
    *done = 0;
    while (!epoch_done) HSI_TRY(hsi_trainer_step(t, &epoch_done, done));
cleanup:
    return st;
}

/* ------------------------------------------------------------- finish */

static hsi_status write_metrics(hsi_trainer *t, const hsi_metrics *mt, double train_time)
{
    const hsi_train_config *c = &t->c;
    const hsi_split *sp = &t->sp;
    hsi_train_profile *prof = &t->res.prof;
    cJSON *mj = hsi_metrics_json(mt, (const char *const *)t->run.names, t->run.label_ids);
    if (!mj) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    cJSON_AddStringToObject(mj, "split", split_name(c));
    cJSON_AddStringToObject(mj, "fit_on", c->fit_on_all ? "all" : "train");
    cJSON_AddBoolToObject(mj, "leaky_protocol", c->fit_on_all);
    cJSON *counts = cJSON_AddObjectToObject(mj, "split_counts");
    cJSON_AddNumberToObject(counts, "train", (double)sp->n[HSI_ROLE_TRAIN]);
    cJSON_AddNumberToObject(counts, "val", (double)sp->n[HSI_ROLE_VAL]);
    cJSON_AddNumberToObject(counts, "test", (double)sp->n[HSI_ROLE_TEST]);
    cJSON_AddNumberToObject(mj, "best_epoch", t->best_epoch + 1);
    if (t->have_val) {
        cJSON_AddNumberToObject(mj, "best_val_oa", t->best_val);
        cJSON_AddStringToObject(mj, "epoch_selection", "best validation OA");
    } else {
        cJSON_AddNullToObject(mj, "best_val_oa"); /* not measured: no validation pixels */
        cJSON_AddStringToObject(mj, "epoch_selection", "last epoch (no validation pixels)");
    }
    cJSON_AddNumberToObject(mj, "epochs_run", t->res.epochs_run);
    prof->total = hsi_now() - t->t_start;
    cJSON *tj = cJSON_AddObjectToObject(mj, "timings_s");
    cJSON_AddNumberToObject(tj, "read", prof->read);
    cJSON_AddNumberToObject(tj, "split", prof->split);
    cJSON_AddNumberToObject(tj, "preprocess", prof->preprocess);
    cJSON_AddNumberToObject(tj, "train", train_time);
    cJSON_AddNumberToObject(tj, "loader_wait", prof->loader_wait);
    cJSON_AddNumberToObject(tj, "forward", prof->forward);
    cJSON_AddNumberToObject(tj, "backward", prof->backward);
    cJSON_AddNumberToObject(tj, "optimizer", prof->optimizer);
    cJSON_AddNumberToObject(tj, "validate", prof->validate);
    cJSON_AddNumberToObject(tj, "predict", prof->predict);
    cJSON_AddNumberToObject(tj, "total", prof->total);
    cJSON_AddNumberToObject(mj, "train_samples_per_s", t->res.train_samples_per_s);
    char *pp = hsi_run_path(c->out_dir, "metrics.json");
    hsi_status st = pp ? hsi_run_save_json(pp, mj) : HSI_ERR_NOMEM;
    free(pp);
    cJSON_Delete(mj);
    return st;
}

hsi_status hsi_trainer_finish(hsi_trainer *t, hsi_train_result *res)
{
    hsi_status st = HSI_OK;
    const hsi_train_config *c = &t->c;
    hsi_train_profile *prof = &t->res.prof;
    hsi_run *r = &t->run;
    hsi_metrics mt;
    int have_metrics = 0;
    int32_t *map = NULL, *pred = NULL;
    cJSON *training = NULL;
    if (t->finished) return HSI_FAIL(HSI_ERR_STATE, "hsi_trainer_finish: already finished");
    t->finished = 1;
    features_advise(t, MADV_SEQUENTIAL); /* the map reads tiles of lines in order */
    const int64_t L = t->cube.view.shape[1], S = t->cube.view.shape[2];
    /* the best epoch's weights (rank 0's file) on every rank: the ranks
     * share the scene map's tiles; rank 0 writes the run */
    if (t->best_epoch >= 0 && t->writer) {
        hsi_load_report rep;
        HSI_TRY(hsi_module_load(r->net, t->p_best, 1, &rep));
    }
    /* the features already on the device: the map's patches cut there */
    hsi_predict_opts po = {.batch = c->batch * 2, .features = t->resident ? &t->fdev : &t->fc,
                           .across_ranks = t->ranks > 1, .device = trainer_device(t), .conv = t->gconv,
                           .cuda_graph = c->cuda_graph};
    if (t->ranks > 1) HSI_TRY(hsi_ddp_broadcast_state(t->ddp, 0));
    if (!t->writer) {
        t->res.epochs_run = t->epoch - t->first_epoch;
        if (res) *res = t->res;
        if (!(map = malloc((size_t)(L * S) * sizeof *map))) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        st = hsi_run_predict(r, map, &t->cube.view, &po);
        free(map);
        return st;
    }
    const int K = r->n_classes;
    t->res.epochs_run = t->epoch - t->first_epoch;
    double train_time = hsi_now() - t->t_train - prof->validate;
    hsi_loader_stats ls;
    hsi_loader_get_stats(t->ld, &ls);
    prof->loader_wait = ls.wait_s;
    prof->forward = t->pa.forward;
    prof->backward = t->pa.backward;
    prof->optimizer = t->pa.optimizer;
    prof->ranks = t->ranks;
    if (t->ddp) {
        hsi_ddp_stats ds;
        hsi_ddp_get_stats(t->ddp, &ds);
        prof->comm_wait = ds.comm_wait;
        prof->tree = ds.tree;
        prof->n_buckets = ds.n_buckets;
        prof->grad_bytes = ds.grad_bytes;
    }
    prof->train_samples = t->samples_total;
    prof->steps = ls.batches;
    t->res.train_samples_per_s = train_time > 0 ? (double)t->samples_total / train_time : 0;
    t->res.best_epoch = t->best_epoch + 1;
    t->res.best_val_oa = t->have_val ? t->best_val : NAN;
    info(t, "training: %.1f s, %.0f samples/s, loader wait %.2f s (%.1f %% of the step time); "
            "best epoch %d\n",
         train_time, t->res.train_samples_per_s, ls.wait_s,
         100 * ls.wait_s / (t->pa.forward + t->pa.backward + t->pa.optimizer + ls.wait_s + 1e-12),
         t->best_epoch + 1);
    if (t->dm && c->cuda_graph)
        info(t, "CUDA Graphs: %lld training steps and %lld validation forwards launched as graphs "
                "(the others ran one launch per kernel)\n",
             (long long)hsi_dmodel_graph_launches(t->dm, 1), (long long)hsi_dmodel_graph_launches(t->dm, 0));

    /* the whole-scene map; the test metrics are read off it (a pixel's
     * prediction does not depend on the tile it was computed in) */
    double tm = hsi_now();
    map = malloc((size_t)(L * S) * sizeof *map);
    int64_t nt = t->sp.n[HSI_ROLE_TEST];
    pred = malloc((size_t)(nt ? nt : 1) * sizeof *pred);
    if (!map || !pred) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    HSI_TRY(hsi_run_predict(r, map, &t->cube.view, &po));
    for (int64_t i = 0; i < nt; i++) {
        int k = hsi_run_class_of(r, map[t->sp.idx[HSI_ROLE_TEST][i]]);
        pred[i] = k < 0 ? 0 : k;
    }
    HSI_TRY(hsi_metrics_compute(&mt, t->sp.cls[HSI_ROLE_TEST], pred, nt, K));
    have_metrics = 1;
    t->res.oa = mt.oa;
    t->res.aa = mt.aa;
    t->res.kappa = mt.kappa;
    t->res.n_train = t->sp.n[HSI_ROLE_TRAIN];
    t->res.n_val = t->sp.n[HSI_ROLE_VAL];
    t->res.n_test = nt;
    {
        char *table = print_to_string(print_metrics, &mt, r, 0);
        char *full = print_to_string(print_metrics, &mt, r, 1);
        hsi_train_event ev = {.kind = HSI_TRAIN_EV_DONE};
        if (table && full) emit(t, &ev, table, full);
        free(table);
        free(full);
    }
    prof->predict += hsi_now() - tm;

    /* files */
    tm = hsi_now();
    static const char *const maps[] = {"map.hdr", "map.png", "map.tif"};
    double gt6[6];
    int n_maps = hsi_meta_geotransform(&t->cube.meta, gt6) ? 3 : 2;
    for (int i = 0; i < n_maps; i++) {
        char *pp = hsi_run_path(c->out_dir, maps[i]);
        if (!pp) {
            st = HSI_ERR_NOMEM;
            goto cleanup;
        }
        st = hsi_run_write_map(r, pp, map, L, S, &t->cube.meta);
        free(pp);
        if (st != HSI_OK) goto cleanup;
    }
    training = config_json(c, r->n_features, c->patch);
    HSI_TRY(hsi_run_save(r, c->out_dir, &t->sp, &t->cube.meta, training));
    prof->write = hsi_now() - tm;
    HSI_TRY(write_metrics(t, &mt, train_time));
    {
        /* the pictures and report.html, from the files just written; one
         * that cannot be drawn is a warning, the run is complete without it */
        hsi_report_pixels rp = {&t->cube.view, &t->cube.meta, t->sp.idx[HSI_ROLE_TRAIN],
                                t->sp.cls[HSI_ROLE_TRAIN], t->sp.n[HSI_ROLE_TRAIN]};
        if (hsi_report_write(c->out_dir, t->wd.final, &rp) != HSI_OK) {
            hsi_warn("report: %s (the run is complete without it)", hsi_last_error());
            if (t->log) fprintf(t->log, "warning: report: %s\n", hsi_last_error());
        }
    }
    remove(t->p_best);
    if (t->log) fflush(t->log);
    HSI_TRY(hsi_workdir_commit(&t->wd)); /* the run complete: into place */
    t->c.out_dir = t->wd.work;
    if (res) *res = t->res;
cleanup:
    cJSON_Delete(training);
    if (have_metrics) hsi_metrics_free(&mt);
    free(map);
    free(pred);
    return st;
}

const hsi_split *hsi_trainer_split(const hsi_trainer *t) { return &t->sp; }
const hsi_run *hsi_trainer_run(const hsi_trainer *t) { return &t->run; }
const hsi_view *hsi_trainer_features(const hsi_trainer *t) { return &t->fc; }

void hsi_trainer_free(hsi_trainer *t)
{
    if (!t) return;
    trim_stop(t); /* before any mapping goes */
    stream_remove(t);
    hsi_ddp_free(t->ddp);
    hsi_graph_free(t->g);
    hsi_loader_destroy(t->ld);
    hsi_gpu_classifier_free(&t->gq);
    hsi_dmodel_free(t->dm);
    hsi_optim_free(t->opt);
    if (t->have_patcher) hsi_patcher_free(&t->pt);
    if (t->resident) hsi_patcher_free(&t->dpt);
    hsi_view_release(&t->fdev);
    hsi_cuda_free(t->xpatch_d);
    hsi_view_release(&t->fc);
    hsi_run_free(&t->run);
    hsi_split_free(&t->sp);
    hsi_labels_free(&t->lab);
    hsi_labels_free(&t->ltr);
    hsi_labels_free(&t->lte);
    hsi_cube_free(&t->cube);
    if (t->log) fclose(t->log);
    hsi_workdir_free(&t->wd);
    free(t->history);
    free(t->p_state);
    free(t->p_best);
    free(t);
}

hsi_status hsi_train_run(const hsi_train_config *cfg, hsi_train_result *res)
{
    hsi_status st = HSI_OK;
    hsi_trainer *t = NULL;
    if (res) memset(res, 0, sizeof *res);
    HSI_TRY(hsi_trainer_create(&t, cfg));
    for (int done = 0; !done;) HSI_TRY(hsi_trainer_epoch(t, &done));
    HSI_TRY(hsi_trainer_finish(t, res));
    /* the other ranks wait (sleeping) until rank 0's run is in place */
    if (t->ranks > 1) HSI_TRY(hsi_dist_barrier());
cleanup:
    hsi_trainer_free(t);
    return st;
}

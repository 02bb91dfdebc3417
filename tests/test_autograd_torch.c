/* test_autograd_torch.c — the engine against PyTorch 1.13 references made by
 * tests/fixtures/make_autograd_fixtures.py: forward outputs and input/weight
 * gradients of every op (float32), three AdamW steps of a small CNN from the
 * same initial weights, optimiser and schedule formulas (float64), cnn2d's
 * state_dict names, and byte-identical safetensors output.
 * Tolerances (|ours - torch| <= atol + rtol |torch|), float32:
 *   linear, activations, log-softmax, broadcasting, cross-entropy: 1e-6 + 1e-5
 *   conv2d/conv3d, pools, batch norm (outputs, grads, running stats): 1e-5 + 1e-4
 *   small CNN after 3 AdamW steps: losses 1e-5 + 1e-5, weights/buffers 1e-4 + 1e-4
 *   optimisers and schedules (float64): 1e-12 + 1e-12 */
#include "test.h"

#include "models/layers.h"

#include "models/checkpoint.h"

#define FX(name) "tests/fixtures/autograd/" name

static hsi_st_file *fx_open(const char *path)
{
    hsi_st_file *f = NULL;
    hsi_status st = hsi_safetensors_open(&f, path);
    if (st != HSI_OK) fprintf(stderr, "\n  %s\n", hsi_last_error());
    return f;
}

/* A persistent copy of fixture tensor `name` (as dtype), requires_grad rg. */
static hsi_tensor *fx_tensor(hsi_st_file *f, const char *name, hsi_dtype dt, int rg)
{
    int i = hsi_safetensors_find(f, name);
    if (i < 0) {
        fprintf(stderr, "\n  fixture tensor '%s' missing\n", name);
        return NULL;
    }
    hsi_view v, c;
    hsi_tensor *t = NULL;
    if (hsi_safetensors_view(f, i, &v) != HSI_OK) return NULL;
    hsi_view_contiguous(&c, &v, dt);
    hsi_tensor_new(&t, dt, c.ndim, c.shape, 0);
    memcpy(hsi_tensor_ptr(t), c.buf->data, (size_t)hsi_view_nbytes(&c));
    hsi_view_release(&c);
    hsi_view_release(&v);
    if (rg) hsi_tensor_set_requires_grad(t, 1);
    return t;
}

/* Number of elements of `got` (packed float/double, count of the fixture)
 * further than atol + rtol |ref| from fixture tensor `name`. */
static int fx_compare(hsi_st_file *f, const char *name, const hsi_tensor *got, double atol,
                      double rtol)
{
    hsi_tensor *ref = fx_tensor(f, name, HSI_F64, 0);
    if (!ref) return 1;
    int bad = 0;
    int64_t n = hsi_tensor_count(ref);
    if (!got || hsi_tensor_count(got) != n) {
        fprintf(stderr, "\n  %s: %lld elements expected, got %lld\n", name, (long long)n,
                got ? (long long)hsi_tensor_count(got) : -1LL);
        hsi_tensor_free(ref);
        return 1;
    }
    const double *r = hsi_tensor_ptr(ref);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t idx[HSI_MAX_DIMS] = {0}, q = i;
        for (int k = got->data.ndim - 1; k >= 0; k--) {
            idx[k] = q % got->data.shape[k];
            q /= got->data.shape[k];
        }
        double v = hsi_view_get_f64(&got->data, idx), e = fabs(v - r[i]);
        if (!(e <= atol + rtol * fabs(r[i]))) {
            if (bad < 3) fprintf(stderr, "\n  %s[%lld]: ours %.9g, torch %.9g", name, (long long)i, v, r[i]);
            bad++;
        }
        if (e > worst) worst = e;
    }
    hsi_tensor_free(ref);
    return bad;
}

#define CMP(f, name, t, atol, rtol) CU_ASSERT_EQUAL(fx_compare(f, name, t, atol, rtol), 0)

static void run_backward(hsi_tensor *y, hsi_tensor *gy)
{
    HSI_CHECK_OK(hsi_backward_grad(y, hsi_tensor_ptr(gy), 0));
}

static void test_ops_parity(void)
{
    hsi_st_file *f = fx_open(FX("ops.safetensors"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    hsi_graph *g = NULL;
    HSI_CHECK_OK(hsi_graph_new(&g));
    const double A = 1e-6, R = 1e-5;
    /* linear */
    hsi_tensor *x = fx_tensor(f, "linear.x", HSI_F32, 1), *w = fx_tensor(f, "linear.w", HSI_F32, 1),
               *b = fx_tensor(f, "linear.b", HSI_F32, 1), *gy = fx_tensor(f, "linear.gy", HSI_F32, 0),
               *y = NULL;
    HSI_CHECK_OK(hsi_linear(&y, g, x, w, b));
    run_backward(y, gy);
    CMP(f, "linear.y", y, A, R);
    CMP(f, "linear.dx", x->grad, A, R);
    CMP(f, "linear.dw", w->grad, A, R);
    CMP(f, "linear.db", b->grad, A, R);
    hsi_tensor_free(x), hsi_tensor_free(w), hsi_tensor_free(b), hsi_tensor_free(gy);
    /* activations */
    static const char *acts[5] = {"relu", "leaky_relu", "gelu", "swish", "log_softmax"};
    gy = fx_tensor(f, "act.gy", HSI_F32, 0);
    for (int k = 0; k < 5; k++) {
        char nm[64];
        x = fx_tensor(f, "act.x", HSI_F32, 1);
        switch (k) {
        case 0: HSI_CHECK_OK(hsi_relu(&y, g, x)); break;
        case 1: HSI_CHECK_OK(hsi_leaky_relu(&y, g, x, 0.1)); break;
        case 2: HSI_CHECK_OK(hsi_gelu(&y, g, x)); break;
        case 3: HSI_CHECK_OK(hsi_swish(&y, g, x)); break;
        default: HSI_CHECK_OK(hsi_log_softmax(&y, g, x)); break;
        }
        run_backward(y, gy);
        snprintf(nm, sizeof nm, "%s.y", acts[k]);
        CMP(f, nm, y, A, R);
        snprintf(nm, sizeof nm, "%s.dx", acts[k]);
        CMP(f, nm, x->grad, A, R);
        hsi_tensor_free(x);
    }
    hsi_tensor_free(gy);
    /* broadcasting */
    static const char *bins[3] = {"add", "mul", "sub"};
    gy = fx_tensor(f, "bc.gy", HSI_F32, 0);
    for (int k = 0; k < 3; k++) {
        char nm[64];
        hsi_tensor *a = fx_tensor(f, "bc.a", HSI_F32, 1), *c = fx_tensor(f, "bc.c", HSI_F32, 1);
        if (k == 0) HSI_CHECK_OK(hsi_add(&y, g, a, c));
        if (k == 1) HSI_CHECK_OK(hsi_mul(&y, g, a, c));
        if (k == 2) HSI_CHECK_OK(hsi_sub(&y, g, a, c));
        run_backward(y, gy);
        snprintf(nm, sizeof nm, "%s.y", bins[k]);
        CMP(f, nm, y, A, R);
        snprintf(nm, sizeof nm, "%s.da", bins[k]);
        CMP(f, nm, a->grad, A, R);
        snprintf(nm, sizeof nm, "%s.dc", bins[k]);
        CMP(f, nm, c->grad, A, R);
        hsi_tensor_free(a), hsi_tensor_free(c);
    }
    hsi_tensor_free(gy);
    /* cross-entropy */
    hsi_tensor *tg = fx_tensor(f, "ce.target", HSI_I64, 0), *wt = fx_tensor(f, "ce.weight", HSI_F32, 0);
    for (int k = 0; k < 4; k++) {
        char nm[64];
        hsi_ce_opts o;
        hsi_ce_opts_default(&o);
        o.weight = (k & 1) ? wt : NULL;
        o.label_smoothing = (k & 2) ? 0.15 : 0;
        hsi_tensor *z = fx_tensor(f, "ce.z", HSI_F32, 1);
        HSI_CHECK_OK(hsi_cross_entropy(&y, g, z, tg, &o));
        HSI_CHECK_OK(hsi_backward(y, 0));
        snprintf(nm, sizeof nm, "ce%d.loss", k);
        CMP(f, nm, y, A, R);
        snprintf(nm, sizeof nm, "ce%d.dz", k);
        CMP(f, nm, z->grad, A, R);
        hsi_tensor_free(z);
    }
    hsi_tensor_free(tg), hsi_tensor_free(wt);
    hsi_graph_free(g);
    hsi_safetensors_close(f);
}

static void test_layer_ops_parity(void)
{
    hsi_st_file *f = fx_open(FX("ops.safetensors"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    hsi_graph *g = NULL;
    HSI_CHECK_OK(hsi_graph_new(&g));
    const double A = 1e-5, R = 1e-4;
    hsi_tensor *y = NULL;
    /* conv2d stride 2 pad 1 with bias */
    hsi_tensor *x = fx_tensor(f, "conv2d.x", HSI_F32, 1), *w = fx_tensor(f, "conv2d.w", HSI_F32, 1),
               *b = fx_tensor(f, "conv2d.b", HSI_F32, 1), *gy = fx_tensor(f, "conv2d.gy", HSI_F32, 0);
    int s2[3] = {2, 2, 2}, p1[3] = {1, 1, 1}, s1[3] = {1, 1, 1}, k2[3] = {2, 2, 2}, p0[3] = {0};
    HSI_CHECK_OK(hsi_conv(&y, g, x, w, b, 2, s2, p1));
    run_backward(y, gy);
    CMP(f, "conv2d.y", y, A, R);
    CMP(f, "conv2d.dx", x->grad, A, R);
    CMP(f, "conv2d.dw", w->grad, A, R);
    CMP(f, "conv2d.db", b->grad, A, R);
    hsi_tensor_free(x), hsi_tensor_free(w), hsi_tensor_free(b), hsi_tensor_free(gy);
    /* conv3d pad 1, no bias */
    x = fx_tensor(f, "conv3d.x", HSI_F32, 1), w = fx_tensor(f, "conv3d.w", HSI_F32, 1);
    gy = fx_tensor(f, "conv3d.gy", HSI_F32, 0);
    HSI_CHECK_OK(hsi_conv(&y, g, x, w, NULL, 3, s1, p1));
    run_backward(y, gy);
    CMP(f, "conv3d.y", y, A, R);
    CMP(f, "conv3d.dx", x->grad, A, R);
    CMP(f, "conv3d.dw", w->grad, A, R);
    hsi_tensor_free(x), hsi_tensor_free(w), hsi_tensor_free(gy);
    /* pools */
    x = fx_tensor(f, "maxpool2d.x", HSI_F32, 1), gy = fx_tensor(f, "maxpool2d.gy", HSI_F32, 0);
    HSI_CHECK_OK(hsi_pool(&y, g, x, 0, 2, k2, k2, p0));
    run_backward(y, gy);
    CMP(f, "maxpool2d.y", y, A, R);
    CMP(f, "maxpool2d.dx", x->grad, A, R);
    hsi_tensor_free(x), hsi_tensor_free(gy);
    x = fx_tensor(f, "avgpool3d.x", HSI_F32, 1), gy = fx_tensor(f, "avgpool3d.gy", HSI_F32, 0);
    HSI_CHECK_OK(hsi_pool(&y, g, x, 1, 3, k2, k2, p1));
    run_backward(y, gy);
    CMP(f, "avgpool3d.y", y, A, R);
    CMP(f, "avgpool3d.dx", x->grad, A, R);
    hsi_tensor_free(x), hsi_tensor_free(gy);
    /* batch norm, training, running statistics from zeros/ones */
    x = fx_tensor(f, "bn.x", HSI_F32, 1), gy = fx_tensor(f, "bn.gy", HSI_F32, 0);
    hsi_tensor *ga = fx_tensor(f, "bn.gamma", HSI_F32, 1), *be = fx_tensor(f, "bn.beta", HSI_F32, 1);
    hsi_tensor *rm = NULL, *rv = NULL;
    int64_t cs[1] = {3};
    HSI_CHECK_OK(hsi_tensor_new(&rm, HSI_F32, 1, cs, 0));
    HSI_CHECK_OK(hsi_tensor_new(&rv, HSI_F32, 1, cs, 0));
    for (int k = 0; k < 3; k++) ((float *)hsi_tensor_ptr(rv))[k] = 1;
    HSI_CHECK_OK(hsi_batch_norm(&y, g, x, ga, be, rm, rv, NULL, 1, 0.1, 1e-5));
    run_backward(y, gy);
    CMP(f, "bn.y", y, A, R);
    CMP(f, "bn.dx", x->grad, A, R);
    CMP(f, "bn.dgamma", ga->grad, A, R);
    CMP(f, "bn.dbeta", be->grad, A, R);
    CMP(f, "bn.running_mean", rm, A, R);
    CMP(f, "bn.running_var", rv, A, R);
    hsi_tensor_free(x), hsi_tensor_free(gy), hsi_tensor_free(ga), hsi_tensor_free(be);
    hsi_tensor_free(rm), hsi_tensor_free(rv);
    hsi_graph_free(g);
    hsi_safetensors_close(f);
}

/* The fixture's SmallCNN, declared with the module system (convs before
 * batch norm without bias, see the fixture script). */
static hsi_module *small_cnn(void)
{
    hsi_module *root = NULL, *fs = NULL, *c = NULL;
    int k3[2] = {3, 3}, one[2] = {1, 1}, k2[2] = {2, 2};
    hsi_sequential_new(&root);
    hsi_sequential_new(&fs);
    hsi_sequential_add(root, "features", fs);
    hsi_conv_new(&c, HSI_F32, 2, 3, 4, k3, one, one, 0), hsi_sequential_add(fs, "0", c);
    hsi_batchnorm_new(&c, HSI_F32, 4, 0.1, 1e-5), hsi_sequential_add(fs, "1", c);
    hsi_activation_new(&c, HSI_MOD_RELU, 0), hsi_sequential_add(fs, "2", c);
    hsi_pool_new(&c, HSI_MOD_MAXPOOL, 2, k2, k2, NULL), hsi_sequential_add(fs, "3", c);
    hsi_conv_new(&c, HSI_F32, 2, 4, 6, k3, one, one, 0), hsi_sequential_add(fs, "4", c);
    hsi_batchnorm_new(&c, HSI_F32, 6, 0.1, 1e-5), hsi_sequential_add(fs, "5", c);
    hsi_activation_new(&c, HSI_MOD_RELU, 0), hsi_sequential_add(fs, "6", c);
    hsi_activation_new(&c, HSI_MOD_GAP, 0), hsi_sequential_add(root, "pool", c);
    hsi_linear_new(&c, HSI_F32, 6, 3, 1), hsi_sequential_add(root, "classifier", c);
    return root;
}

/* The small CNN's three AdamW steps on one convolution implementation. */
static void run_small_cnn_adamw(void)
{
    hsi_module *m = small_cnn();
    CU_ASSERT_EQUAL_FATAL(hsi_module_param_count(m), 4 * 27 + 8 + 6 * 36 + 12 + 18 + 3);
    hsi_load_report rep;
    HSI_CHECK_OK(hsi_module_load(m, FX("small_cnn_init.safetensors"), 1, &rep));
    CU_ASSERT_EQUAL(rep.n_loaded, 14);
    /* our writer reproduces the reference file byte for byte (and that file
     * loads into torch: the fixture script checks it) */
    const char *out = hsi_test_tmp("small_cnn_init.safetensors");
    HSI_CHECK_OK(hsi_module_save(m, out, NULL, 0));
    char *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    HSI_CHECK_OK(hsi_read_file(out, &a, &la));
    HSI_CHECK_OK(hsi_read_file(FX("small_cnn_init.safetensors"), &b, &lb));
    CU_ASSERT_EQUAL(la, lb);
    CU_ASSERT_TRUE(la == lb && memcmp(a, b, la) == 0);
    free(a), free(b);

    hsi_st_file *f = fx_open(FX("small_cnn_adamw.safetensors"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    hsi_tensor *x = fx_tensor(f, "x", HSI_F32, 0), *y = fx_tensor(f, "y", HSI_I64, 0);
    hsi_optim_config cfg;
    hsi_optim_config_default(&cfg, HSI_OPT_ADAMW);
    cfg.lr = 1e-2;
    cfg.weight_decay = 1e-2;
    hsi_optim *o = NULL;
    HSI_CHECK_OK(hsi_optim_new(&o, &cfg, m));
    hsi_graph *g = NULL;
    HSI_CHECK_OK(hsi_graph_new(&g));
    hsi_tensor *losses = NULL;
    int64_t three[1] = {3};
    HSI_CHECK_OK(hsi_tensor_new(&losses, HSI_F64, 1, three, 0));
    for (int step = 0; step < 3; step++) {
        hsi_tensor *logits = NULL, *loss = NULL;
        hsi_graph_reset(g);
        hsi_optim_zero_grad(o);
        HSI_CHECK_OK(hsi_module_forward(&logits, m, g, x));
        HSI_CHECK_OK(hsi_cross_entropy(&loss, g, logits, y, NULL));
        HSI_CHECK_OK(hsi_backward(loss, 0));
        HSI_CHECK_OK(hsi_optim_step(o));
        ((double *)hsi_tensor_ptr(losses))[step] = hsi_tensor_item(loss);
    }
    CMP(f, "losses", losses, 1e-5, 1e-5);
    hsi_named_tensor *st = NULL;
    int n = 0;
    HSI_CHECK_OK(hsi_module_state(m, &st, &n));
    for (int i = 0; i < n; i++) {
        char nm[HSI_NAME_MAX + 8];
        snprintf(nm, sizeof nm, "final.%s", st[i].name);
        CMP(f, nm, st[i].t, 1e-4, 1e-4);
    }
    free(st);
    hsi_tensor_free(losses), hsi_tensor_free(x), hsi_tensor_free(y);
    hsi_graph_free(g);
    hsi_optim_free(o);
    hsi_module_free(m);
    hsi_safetensors_close(f);
}

/* ... on each float convolution: Winograd + direct (the default), direct
 * only, im2col + gemm (the engine's zero-then-accumulate gradient path) */
static void test_small_cnn_adamw(void)
{
    static const hsi_conv_impl impls[3] = {HSI_CONV_IMPL_AUTO, HSI_CONV_IMPL_DIRECT,
                                           HSI_CONV_IMPL_GEMM};
    for (int i = 0; i < 3; i++) {
        hsi_conv_set_impl(impls[i]);
        run_small_cnn_adamw();
    }
    hsi_conv_set_impl(HSI_CONV_IMPL_AUTO);
}

static void test_optim_parity(void)
{
    hsi_st_file *f = fx_open(FX("optim.safetensors"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    hsi_tensor *p0 = fx_tensor(f, "p0", HSI_F64, 0), *gs = fx_tensor(f, "g", HSI_F64, 0);
    static const char *names[4] = {"sgd_nesterov", "sgd_damp", "adam", "adamw"};
    for (int k = 0; k < 4; k++) {
        hsi_module *m = NULL;
        HSI_CHECK_OK(hsi_linear_new(&m, HSI_F64, 10, 1, 0)); /* weight (1, 10) as the parameter */
        hsi_tensor *w = hsi_module_find(m, "weight");
        CU_ASSERT_PTR_NOT_NULL_FATAL(w);
        memcpy(hsi_tensor_ptr(w), hsi_tensor_ptr(p0), 10 * sizeof(double));
        hsi_optim_config c;
        hsi_optim_config_default(&c, k < 2 ? HSI_OPT_SGD : (k == 2 ? HSI_OPT_ADAM : HSI_OPT_ADAMW));
        if (k < 2) {
            c.lr = 0.1;
            c.momentum = 0.9;
            c.nesterov = k == 0;
            c.weight_decay = k == 0 ? 1e-2 : 0;
            c.dampening = k == 1 ? 0.1 : 0;
        } else {
            c.lr = 0.05;
            c.weight_decay = k == 2 ? 1e-2 : 0.1;
        }
        hsi_optim *o = NULL;
        HSI_CHECK_OK(hsi_optim_new(&o, &c, m));
        HSI_CHECK_OK(hsi_tensor_new(&w->grad, HSI_F64, 2, w->data.shape, 0));
        for (int s = 0; s < 3; s++) {
            memcpy(hsi_tensor_ptr(w->grad), (double *)hsi_tensor_ptr(gs) + 10 * s, 10 * sizeof(double));
            HSI_CHECK_OK(hsi_optim_step(o));
        }
        CMP(f, names[k], w, 1e-12, 1e-12);
        hsi_optim_free(o);
        hsi_module_free(m);
    }
    /* schedules */
    hsi_module *m = NULL;
    HSI_CHECK_OK(hsi_linear_new(&m, HSI_F64, 1, 1, 0));
    hsi_optim_config c;
    hsi_optim_config_default(&c, HSI_OPT_SGD);
    hsi_optim *o = NULL;
    HSI_CHECK_OK(hsi_optim_new(&o, &c, m));
    int64_t n10[1] = {10}, n11[1] = {11}, n15[1] = {15};
    hsi_tensor *lr = NULL;
    hsi_sched s;
    hsi_sched_init(&s, HSI_SCHED_STEP, 0.1);
    s.step_size = 3, s.gamma = 0.5;
    HSI_CHECK_OK(hsi_tensor_new(&lr, HSI_F64, 1, n10, 0));
    hsi_sched_begin(&s, o);
    for (int e = 0; e < 10; e++) {
        ((double *)hsi_tensor_ptr(lr))[e] = o->cfg.lr;
        hsi_sched_epoch_end(&s, o, 0);
    }
    CMP(f, "step_lr", lr, 1e-12, 1e-12);
    hsi_tensor_free(lr);
    hsi_sched_init(&s, HSI_SCHED_COSINE, 0.1);
    s.warmup = 0, s.total = 10, s.min_lr = 1e-3;
    HSI_CHECK_OK(hsi_tensor_new(&lr, HSI_F64, 1, n11, 0));
    hsi_sched_begin(&s, o);
    for (int e = 0; e < 11; e++) {
        ((double *)hsi_tensor_ptr(lr))[e] = o->cfg.lr;
        hsi_sched_epoch_end(&s, o, 0);
    }
    CMP(f, "cosine_lr", lr, 1e-12, 1e-12);
    hsi_tensor_free(lr);
    hsi_tensor *metrics = fx_tensor(f, "plateau_metrics", HSI_F64, 0);
    hsi_sched_init(&s, HSI_SCHED_PLATEAU, 0.1);
    s.factor = 0.5, s.patience = 2, s.cooldown = 1, s.min_lr = 0.01;
    HSI_CHECK_OK(hsi_tensor_new(&lr, HSI_F64, 1, n15, 0));
    hsi_sched_begin(&s, o);
    for (int e = 0; e < 15; e++) {
        hsi_sched_epoch_end(&s, o, ((double *)hsi_tensor_ptr(metrics))[e]);
        ((double *)hsi_tensor_ptr(lr))[e] = o->cfg.lr;
    }
    CMP(f, "plateau_lr", lr, 1e-12, 1e-12);
    /* warm-up: linear ramp over the first epochs */
    hsi_sched_init(&s, HSI_SCHED_COSINE, 0.1);
    s.warmup = 4, s.total = 10;
    HSI_ASSERT_NEAR(hsi_sched_lr_at(&s, 0), 0.025, 1e-15);
    HSI_ASSERT_NEAR(hsi_sched_lr_at(&s, 3), 0.1, 1e-15);
    HSI_ASSERT_NEAR(hsi_sched_lr_at(&s, 7), 0.05, 1e-15);
    hsi_tensor_free(lr), hsi_tensor_free(metrics);
    hsi_optim_free(o);
    hsi_module_free(m);
    hsi_tensor_free(p0), hsi_tensor_free(gs);
    hsi_safetensors_close(f);
}

static void test_cnn2d_names(void)
{
    hsi_module *m = NULL;
    HSI_CHECK_OK(hsi_model_create(&m, "cnn2d", 30, 11, 16, HSI_F32, 1));
    hsi_named_tensor *st = NULL;
    int n = 0;
    HSI_CHECK_OK(hsi_module_state(m, &st, &n));
    char *text = NULL;
    size_t len = 0;
    HSI_CHECK_OK(hsi_read_file(FX("cnn2d_state.txt"), &text, &len));
    int i = 0;
    long long params = -1;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (sscanf(line, "# parameters %lld", &params) == 1 || line[0] == '#') continue;
        char name[128];
        int off = 0;
        CU_ASSERT_EQUAL_FATAL(sscanf(line, "%127s%n", name, &off), 1);
        CU_ASSERT_FATAL(i < n);
        CU_ASSERT_STRING_EQUAL(st[i].name, name);
        int64_t d;
        int k = 0, used = 0;
        while (sscanf(line + off, "%lld%n", (long long *)&d, &used) == 1) {
            CU_ASSERT(k < st[i].t->data.ndim && st[i].t->data.shape[k] == d);
            off += used;
            k++;
        }
        CU_ASSERT_EQUAL(k, st[i].t->data.ndim);
        i++;
    }
    CU_ASSERT_EQUAL(i, n);
    CU_ASSERT_EQUAL(hsi_module_param_count(m), params);
    free(text);
    free(st);
    hsi_module_free(m);
}

HSI_SUITE(autograd_torch, 0, {"ops vs PyTorch (forward, gradients)", test_ops_parity},
          {"conv/pool/bn nodes vs PyTorch", test_layer_ops_parity},
          {"small CNN: 3 AdamW steps vs PyTorch; byte-identical safetensors", test_small_cnn_adamw},
          {"SGD/Adam/AdamW and schedules vs PyTorch", test_optim_parity},
          {"cnn2d state_dict names and shapes vs PyTorch", test_cnn2d_names})

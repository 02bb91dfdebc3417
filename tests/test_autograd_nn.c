/* test_autograd_nn.c — modules, optimisers and checkpoints as a system:
 * steady-state training steps allocate nothing and keep live memory flat,
 * no-grad inference allocates no gradients, strict / non-strict loading
 * reports, resume from a training checkpoint is bit-identical, anomaly
 * mode names the layer of a module, seeded init is reproducible. */
#include "test.h"

#include "models/checkpoint.h"

enum { B = 8, K = 5, P = 7, NC = 4 };

static void fill_batch(hsi_tensor *x, hsi_tensor *y, uint64_t seed)
{
    hsi_rng r;
    hsi_rng_seed(&r, seed);
    float *xp = hsi_tensor_ptr(x);
    for (int64_t i = 0; i < hsi_tensor_count(x); i++) xp[i] = (float)hsi_rng_normal(&r);
    int64_t *yp = hsi_tensor_ptr(y);
    for (int64_t i = 0; i < hsi_tensor_count(y); i++) yp[i] = (int64_t)(hsi_rng_next(&r) % NC);
}

typedef struct rig {
    hsi_module *m;
    hsi_optim *o;
    hsi_graph *g;
    hsi_tensor *x, *y;
} rig;

static void rig_make(rig *r, uint64_t seed)
{
    int64_t xs[4] = {B, K, P, P}, ys[1] = {B};
    HSI_CHECK_OK(hsi_model_create(&r->m, "cnn2d", K, P, NC, HSI_F32, seed));
    hsi_optim_config c;
    hsi_optim_config_default(&c, HSI_OPT_ADAMW);
    HSI_CHECK_OK(hsi_optim_new(&r->o, &c, r->m));
    HSI_CHECK_OK(hsi_graph_new(&r->g));
    HSI_CHECK_OK(hsi_tensor_new(&r->x, HSI_F32, 4, xs, 0));
    HSI_CHECK_OK(hsi_tensor_new(&r->y, HSI_I64, 1, ys, 0));
}

static void rig_free(rig *r)
{
    hsi_tensor_free(r->x);
    hsi_tensor_free(r->y);
    hsi_graph_free(r->g);
    hsi_optim_free(r->o);
    hsi_module_free(r->m);
}

static double rig_step(rig *r, uint64_t batch_seed)
{
    hsi_tensor *logits = NULL, *loss = NULL;
    fill_batch(r->x, r->y, batch_seed);
    hsi_graph_reset(r->g);
    hsi_optim_zero_grad(r->o);
    HSI_CHECK_OK(hsi_module_forward(&logits, r->m, r->g, r->x));
    HSI_CHECK_OK(hsi_cross_entropy(&loss, r->g, logits, r->y, NULL));
    HSI_CHECK_OK(hsi_backward(loss, 0));
    hsi_clip_grad_norm(r->o, 5.0);
    HSI_CHECK_OK(hsi_optim_step(r->o));
    return hsi_tensor_item(loss);
}

static void test_steady_state_memory(void)
{
    rig r = {0};
    rig_make(&r, 7);
    for (int i = 0; i < 3; i++) rig_step(&r, 100 + i); /* warm-up: arena grows, state appears */
    hsi_mem_stats a, b;
    hsi_mem_get(&a);
    int64_t host_a = hsi_buffer_live_bytes(HSI_BUF_HOST);
    double first = 0, last = 0;
    for (int i = 0; i < 10; i++) {
        double l = rig_step(&r, 200 + (i % 2));
        if (i == 0) first = l;
        last = l;
    }
    hsi_mem_get(&b);
    CU_ASSERT_EQUAL(b.n_allocs, a.n_allocs); /* nothing allocated by the engine */
    CU_ASSERT_EQUAL(b.live_bytes, a.live_bytes);
    CU_ASSERT_EQUAL(hsi_buffer_live_bytes(HSI_BUF_HOST), host_a);
    CU_ASSERT_TRUE(b.peak_bytes >= b.live_bytes);
    CU_ASSERT_TRUE(last < first); /* it learns the two alternating batches */
    rig_free(&r);
}

static void test_no_grad_inference(void)
{
    rig r = {0};
    rig_make(&r, 8);
    hsi_module_train(r.m, 0);
    fill_batch(r.x, r.y, 5);
    int prev = hsi_set_grad_enabled(0);
    hsi_tensor *logits = NULL;
    HSI_CHECK_OK(hsi_module_forward(&logits, r.m, r.g, r.x));
    hsi_set_grad_enabled(prev);
    CU_ASSERT_EQUAL(logits->data.shape[0], B);
    CU_ASSERT_EQUAL(logits->data.shape[1], NC);
    CU_ASSERT_EQUAL(hsi_graph_n_nodes(r.g), 0);
    hsi_named_tensor *ps = NULL;
    int n = 0;
    HSI_CHECK_OK(hsi_module_params(r.m, &ps, &n));
    int with_grad = 0;
    for (int i = 0; i < n; i++) with_grad += ps[i].t->grad != NULL;
    CU_ASSERT_EQUAL(with_grad, 0);
    /* eval mode leaves running statistics alone */
    const float *rm = hsi_tensor_ptr(hsi_module_find(r.m, "features.1.running_mean"));
    CU_ASSERT_EQUAL(rm[0], 0.0f);
    CU_ASSERT_EQUAL(*(int64_t *)hsi_tensor_ptr(hsi_module_find(r.m, "features.1.num_batches_tracked")), 0);
    free(ps);
    rig_free(&r);
}

/* Inference folds each conv + eval batch norm + ReLU into one pass
 * (hsi_conv_bn_relu_eval): its logits match the three separate ops (the
 * same eval forward with gradient recording on) to float rounding, after a
 * few training steps have moved the running statistics, the weights and
 * biases away from their initial values. */
static void test_fused_eval_matches(void)
{
    rig r = {0};
    rig_make(&r, 9);
    for (int i = 0; i < 4; i++) rig_step(&r, 300 + i);
    hsi_module_train(r.m, 0);
    fill_batch(r.x, r.y, 6);
    hsi_tensor *sep = NULL, *fused = NULL;
    hsi_graph *g2 = NULL;
    HSI_CHECK_OK(hsi_graph_new(&g2));
    hsi_graph_reset(r.g);
    HSI_CHECK_OK(hsi_module_forward(&sep, r.m, r.g, r.x)); /* grad on: separate ops */
    CU_ASSERT(hsi_graph_n_nodes(r.g) > 0);
    int prev = hsi_set_grad_enabled(0);
    HSI_CHECK_OK(hsi_module_forward(&fused, r.m, g2, r.x));
    hsi_set_grad_enabled(prev);
    const float *a = hsi_tensor_ptr(sep), *b = hsi_tensor_ptr(fused);
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < hsi_tensor_count(sep); i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > worst) worst = d;
        if (fabs(a[i]) > scale) scale = fabs(a[i]);
    }
    CU_ASSERT(scale > 0.01);
    CU_ASSERT(worst <= 1e-5 + 1e-4 * scale);
    /* outside inference the fused op refuses to run */
    hsi_tensor *t = NULL;
    int s1[2] = {1, 1};
    HSI_CHECK_FAILS(hsi_conv_bn_relu_eval(&t, g2, r.x, hsi_module_find(r.m, "features.0.weight"),
                                          NULL, 2, s1, s1, NULL, NULL,
                                          hsi_module_find(r.m, "features.1.running_mean"),
                                          hsi_module_find(r.m, "features.1.running_var"), 1e-5),
                    HSI_ERR_STATE, "inference only");
    hsi_graph_free(g2);
    rig_free(&r);
}

static void test_strict_nonstrict(void)
{
    hsi_module *a = NULL, *b = NULL, *c = NULL;
    HSI_CHECK_OK(hsi_model_create(&a, "cnn2d", K, P, NC, HSI_F32, 1));
    HSI_CHECK_OK(hsi_model_create(&b, "cnn2d", K, P, NC, HSI_F32, 2));
    HSI_CHECK_OK(hsi_model_create(&c, "cnn2d", K, P, NC + 1, HSI_F32, 3));
    const char *path = hsi_test_tmp("a.safetensors");
    const char *meta[] = {"model", "cnn2d"};
    HSI_CHECK_OK(hsi_module_save(a, path, meta, 1));
    hsi_load_report rep;
    HSI_CHECK_OK(hsi_module_load(b, path, 1, &rep));
    CU_ASSERT_EQUAL(rep.n_loaded, 23);
    hsi_tensor *wa = hsi_module_find(a, "features.7.weight"), *wb = hsi_module_find(b, "features.7.weight");
    CU_ASSERT_EQUAL(memcmp(hsi_tensor_ptr(wa), hsi_tensor_ptr(wb), (size_t)hsi_view_nbytes(&wa->data)), 0);
    /* classes differ: strict refuses and loads nothing */
    float before = *(float *)hsi_tensor_ptr(hsi_module_find(c, "features.0.weight"));
    HSI_CHECK_FAILS(hsi_module_load(c, path, 1, &rep), HSI_ERR_FORMAT, "classifier.weight");
    CU_ASSERT_EQUAL(rep.n_mismatched, 2);
    CU_ASSERT_EQUAL(*(float *)hsi_tensor_ptr(hsi_module_find(c, "features.0.weight")), before);
    HSI_CHECK_OK(hsi_module_load(c, path, 0, &rep));
    CU_ASSERT_EQUAL(rep.n_loaded, 21);
    CU_ASSERT_EQUAL(rep.n_mismatched, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(rep.text, "classifier.bias (file F32 (4) vs model F32 (5))"));
    /* "module." prefixes (DataParallel) are stripped; missing/unexpected keys */
    hsi_named_tensor *st = NULL;
    int n = 0;
    HSI_CHECK_OK(hsi_module_state(a, &st, &n));
    for (int i = 0; i < n; i++) {
        char tmp[HSI_NAME_MAX];
        snprintf(tmp, sizeof tmp, "%s", st[i].name);
        snprintf(st[i].name, sizeof st[i].name, "module.%s", tmp);
    }
    snprintf(st[n - 1].name, sizeof st[n - 1].name, "module.head.bias"); /* classifier.bias -> */
    const char *p2 = hsi_test_tmp("dp.safetensors");
    HSI_CHECK_OK(hsi_safetensors_write(p2, st, n, NULL, 0));
    HSI_CHECK_FAILS(hsi_module_load(b, p2, 1, &rep), HSI_ERR_FORMAT, "missing: classifier.bias");
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "unexpected: module.head.bias"));
    HSI_CHECK_OK(hsi_module_load(b, p2, 0, &rep));
    CU_ASSERT_EQUAL(rep.n_missing, 1);
    CU_ASSERT_EQUAL(rep.n_unexpected, 1);
    CU_ASSERT_EQUAL(rep.n_loaded, 22);
    /* the reader checks what it reads */
    hsi_st_file *f = NULL;
    HSI_CHECK_OK(hsi_safetensors_open(&f, path));
    CU_ASSERT_STRING_EQUAL(hsi_safetensors_meta(f, "model"), "cnn2d");
    hsi_safetensors_close(f);
    char *raw = NULL;
    size_t len = 0;
    HSI_CHECK_OK(hsi_read_file(path, &raw, &len));
    HSI_CHECK_FAILS(hsi_safetensors_parse(&f, raw, len - 4, "cut"), HSI_ERR_FORMAT, "data_offsets");
    raw[8] = '[';
    HSI_CHECK_FAILS(hsi_safetensors_parse(&f, raw, len, "bad"), HSI_ERR_FORMAT, "JSON");
    HSI_CHECK_FAILS(hsi_safetensors_parse(&f, raw, 5, "tiny"), HSI_ERR_FORMAT, "8-byte");
    free(raw);
    free(st);
    hsi_module_free(a), hsi_module_free(b), hsi_module_free(c);
}

static int same_state(hsi_module *a, hsi_module *b)
{
    hsi_named_tensor *sa = NULL, *sb = NULL;
    int na = 0, nb = 0, same = 1;
    hsi_module_state(a, &sa, &na);
    hsi_module_state(b, &sb, &nb);
    same = na == nb;
    for (int i = 0; same && i < na; i++)
        same = memcmp(hsi_tensor_ptr(sa[i].t), hsi_tensor_ptr(sb[i].t),
                      (size_t)hsi_view_nbytes(&sa[i].t->data)) == 0;
    free(sa), free(sb);
    return same;
}

static void test_resume_bit_identical(void)
{
    /* reference: 6 steps straight through (dropout draws from the engine RNG) */
    hsi_manual_seed(42);
    rig a = {0};
    rig_make(&a, 11);
    hsi_sched s;
    hsi_sched_init(&s, HSI_SCHED_COSINE, 2e-3);
    s.warmup = 1, s.total = 6;
    hsi_sched_begin(&s, a.o);
    const char *ck = hsi_test_tmp("train.ckpt");
    double la[6];
    for (int i = 0; i < 6; i++) {
        la[i] = rig_step(&a, 300 + i);
        hsi_sched_epoch_end(&s, a.o, la[i]);
        if (i == 2) HSI_CHECK_OK(hsi_train_save(ck, a.m, a.o, &s, 3, "{\"model\":\"cnn2d\"}"));
    }
    /* resume into a differently initialised model and a disturbed RNG */
    hsi_manual_seed(999);
    rig b = {0};
    rig_make(&b, 12);
    hsi_sched sb;
    hsi_sched_init(&sb, HSI_SCHED_STEP, 1.0);
    int epoch = 0;
    char *cfg = NULL;
    HSI_CHECK_OK(hsi_train_load(ck, b.m, b.o, &sb, &epoch, &cfg));
    CU_ASSERT_EQUAL(epoch, 3);
    CU_ASSERT_STRING_EQUAL(cfg, "{\"model\":\"cnn2d\"}");
    CU_ASSERT_EQUAL(sb.kind, HSI_SCHED_COSINE);
    CU_ASSERT_EQUAL(b.o->step, 3);
    free(cfg);
    for (int i = 3; i < 6; i++) {
        double l = rig_step(&b, 300 + i);
        CU_ASSERT_EQUAL(memcmp(&l, &la[i], sizeof l), 0);
        hsi_sched_epoch_end(&sb, b.o, l);
    }
    CU_ASSERT_TRUE(same_state(a.m, b.m));
    CU_ASSERT_EQUAL(memcmp(&a.o->cfg.lr, &b.o->cfg.lr, sizeof(double)), 0);
    /* a model checkpoint is not a training checkpoint */
    const char *plain = hsi_test_tmp("plain.safetensors");
    HSI_CHECK_OK(hsi_module_save(a.m, plain, NULL, 0));
    HSI_CHECK_FAILS(hsi_train_load(plain, b.m, b.o, NULL, &epoch, NULL), HSI_ERR_FORMAT,
                    "not an hsi training checkpoint");
    rig_free(&a), rig_free(&b);
}

static void test_anomaly_names_module(void)
{
    rig r = {0};
    rig_make(&r, 9);
    fill_batch(r.x, r.y, 1);
    /* a NaN weight in the second conv */
    ((float *)hsi_tensor_ptr(hsi_module_find(r.m, "features.3.weight")))[5] = NAN;
    hsi_set_anomaly(1);
    hsi_tensor *logits = NULL;
    HSI_CHECK_FAILS(hsi_module_forward(&logits, r.m, r.g, r.x), HSI_ERR_NUMERIC, "features.3");
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "conv2d"));
    hsi_set_anomaly(0);
    rig_free(&r);
}

static void test_init_and_counts(void)
{
    hsi_module *a = NULL, *b = NULL, *h = NULL, *c1 = NULL;
    HSI_CHECK_OK(hsi_model_create(&a, "cnn2d", 30, 11, 16, HSI_F32, 5));
    HSI_CHECK_OK(hsi_model_create(&b, "cnn2d", 30, 11, 16, HSI_F32, 5));
    CU_ASSERT_TRUE(same_state(a, b));
    CU_ASSERT_EQUAL(hsi_module_param_count(a), 130704);
    /* PyTorch's default init: weights within +-1/sqrt(fan_in), and spread out */
    hsi_tensor *w = hsi_module_find(a, "features.3.weight");
    const float *p = hsi_tensor_ptr(w);
    double bound = 1 / sqrt(64.0 * 9), mx = 0, sum2 = 0;
    for (int64_t i = 0; i < hsi_tensor_count(w); i++) {
        mx = fmax(mx, fabs(p[i]));
        sum2 += (double)p[i] * p[i];
    }
    CU_ASSERT_TRUE(mx <= bound);
    HSI_ASSERT_NEAR(sqrt(sum2 / (double)hsi_tensor_count(w)), bound / sqrt(3.0), 0.02 * bound);
    hsi_module_init(b, HSI_INIT_KAIMING_NORMAL, 3);
    w = hsi_module_find(b, "features.3.weight");
    p = hsi_tensor_ptr(w);
    sum2 = 0;
    for (int64_t i = 0; i < hsi_tensor_count(w); i++) sum2 += (double)p[i] * p[i];
    HSI_ASSERT_NEAR(sqrt(sum2 / (double)hsi_tensor_count(w)), sqrt(2.0 / 576), 0.02 * sqrt(2.0 / 576));
    CU_ASSERT_EQUAL(*(float *)hsi_tensor_ptr(hsi_module_find(b, "features.3.bias")), 0.0f);
    HSI_CHECK_OK(hsi_model_create(&h, "hybridsn", 30, 25, 16, HSI_F32, 1));
    /* 3-D convs + 2-D conv + FC 18496->256->128->16, as in Roy et al. (Keras counts) */
    CU_ASSERT_EQUAL(hsi_module_param_count(h), 5122176);
    HSI_CHECK_OK(hsi_model_create(&c1, "cnn1d", 30, 1, 16, HSI_F32, 1));
    int64_t xs[2] = {4, 30};
    hsi_tensor *x = NULL, *y = NULL;
    hsi_graph *g = NULL;
    HSI_CHECK_OK(hsi_graph_new(&g));
    HSI_CHECK_OK(hsi_graph_tensor(&x, g, HSI_F32, 2, xs, 0));
    memset(hsi_tensor_ptr(x), 0, 4 * 30 * sizeof(float));
    HSI_CHECK_OK(hsi_module_forward(&y, c1, g, x));
    CU_ASSERT_EQUAL(y->data.shape[1], 16);
    hsi_module_free(a);
    HSI_CHECK_FAILS(hsi_model_create(&a, "resnet", 30, 11, 16, HSI_F32, 1), HSI_ERR_NOT_FOUND, "resnet");
    hsi_graph_free(g);
    hsi_module_free(b), hsi_module_free(h), hsi_module_free(c1);
}

/* The layer description (hsi_module_layers), which the device model runs,
 * against the CPU engine: each leaf of every model in the zoo, run alone on
 * the CPU on the previous leaf's output, gives the shape the description
 * says; an input the CPU forward refuses is refused by the description too,
 * naming the layer. */
static void check_layers(const char *name, int bands, int patch, int classes)
{
    hsi_module *m = NULL;
    hsi_graph *g = NULL;
    hsi_layer *l = NULL;
    hsi_tensor *x = NULL;
    int nl = 0;
    int64_t xs[HSI_MAX_DIMS];
    int nd = hsi_model_input_shape(name, 2, bands, patch, xs);
    HSI_CHECK_OK(hsi_model_create(&m, name, bands, patch, classes, HSI_F32, 1));
    hsi_module_train(m, 0);
    HSI_CHECK_OK(hsi_graph_new(&g));
    HSI_CHECK_OK(hsi_module_layers(&l, &nl, m, nd - 1, xs + 1));
    HSI_CHECK_OK(hsi_graph_tensor(&x, g, HSI_F32, nd, xs, 0));
    float *px = hsi_tensor_ptr(x);
    for (int64_t i = 0; i < hsi_tensor_count(x); i++) px[i] = (float)((i * 7919) % 101) / 50.0f - 1.0f;
    int prev = hsi_set_grad_enabled(0), leaves = 0;
    for (int i = 0; i < nl; i++) {
        hsi_tensor *y = NULL;
        CU_ASSERT_EQUAL(l[i].in_per, hsi_tensor_count(x) / 2);
        HSI_CHECK_OK(hsi_module_forward(&y, l[i].mod, g, x));
        if (!y) break;
        CU_ASSERT_EQUAL(y->data.ndim, l[i].out_nd + 1);
        for (int k = 0; k < l[i].out_nd && k + 1 < y->data.ndim; k++)
            CU_ASSERT_EQUAL(y->data.shape[k + 1], l[i].out_shape[k]);
        CU_ASSERT_EQUAL(l[i].out_per, hsi_tensor_count(y) / 2);
        CU_ASSERT_EQUAL(l[i].alias, l[i].mod->kind == HSI_MOD_FLATTEN || l[i].mod->kind == HSI_MOD_RESHAPE);
        x = y;
        leaves++;
    }
    CU_ASSERT_EQUAL(leaves, nl);
    CU_ASSERT_TRUE(nl >= 5);
    CU_ASSERT_EQUAL(l[nl - 1].out_nd, 1);
    CU_ASSERT_EQUAL(l[nl - 1].out_shape[0], classes);
    hsi_set_grad_enabled(prev);
    free(l);
    hsi_graph_free(g);
    hsi_module_free(m);
}

static void test_layers_match_cpu(void)
{
    check_layers("cnn2d", 30, 11, 16);
    check_layers("cnn2d", 5, 2, 3);
    check_layers("hybridsn", 30, 25, 16);
    check_layers("cnn1d", 30, 1, 16);
    check_layers("cnn1d", 7, 1, 2);

    /* what the CPU refuses, the description refuses, naming the layer */
    hsi_module *m = NULL;
    hsi_graph *g = NULL;
    hsi_layer *l = NULL;
    hsi_tensor *x = NULL, *y = NULL;
    int nl = -1;
    HSI_CHECK_OK(hsi_model_create(&m, "cnn2d", 30, 11, 16, HSI_F32, 1));
    HSI_CHECK_OK(hsi_graph_new(&g));
    int64_t bad_c[3] = {29, 11, 11}, xs[4] = {2, 29, 11, 11};
    HSI_CHECK_FAILS(hsi_module_layers(&l, &nl, m, 3, bad_c), HSI_ERR_ARG, "features.0");
    CU_ASSERT_PTR_NULL(l);
    CU_ASSERT_EQUAL(nl, 0);
    HSI_CHECK_OK(hsi_graph_tensor(&x, g, HSI_F32, 4, xs, 0));
    memset(hsi_tensor_ptr(x), 0, sizeof(float) * (size_t)hsi_tensor_count(x));
    CU_ASSERT_NOT_EQUAL(hsi_module_forward(&y, m, g, x), HSI_OK);
    int64_t tiny[3] = {30, 1, 1}; /* the 2x2 max pool has no output */
    HSI_CHECK_FAILS(hsi_module_layers(&l, &nl, m, 3, tiny), HSI_ERR_ARG, "features.6");
    int64_t xs1[4] = {2, 30, 1, 1};
    HSI_CHECK_OK(hsi_graph_tensor(&x, g, HSI_F32, 4, xs1, 0));
    memset(hsi_tensor_ptr(x), 0, sizeof(float) * (size_t)hsi_tensor_count(x));
    CU_ASSERT_NOT_EQUAL(hsi_module_forward(&y, m, g, x), HSI_OK);
    int64_t flat[1] = {30 * 11 * 11};
    HSI_CHECK_FAILS(hsi_module_layers(&l, &nl, m, 1, flat), HSI_ERR_ARG, "spatial dims");
    HSI_CHECK_FAILS(hsi_module_layers(&l, &nl, m, 0, flat), HSI_ERR_ARG, "per-sample shape");
    hsi_graph_free(g);
    hsi_module_free(m);
}

HSI_SUITE(autograd_nn, 0, {"steady-state steps allocate nothing", test_steady_state_memory},
          {"inference: fused conv + BN + ReLU = separate ops", test_fused_eval_matches},
          {"no-grad inference allocates no gradients", test_no_grad_inference},
          {"strict / non-strict loading, module. prefix", test_strict_nonstrict},
          {"resume from a training checkpoint is bit-identical", test_resume_bit_identical},
          {"anomaly mode names the module", test_anomaly_names_module},
          {"seeded init, parameter counts, model zoo", test_init_and_counts},
          {"layer description = the CPU forward's shapes", test_layers_match_cpu})

/* cmd_bench_model.c — `hsi bench model NAME`: training (forward, backward,
 * AdamW) and inference samples/s of a model of the zoo on random data, with
 * the per-step engine memory. bench/bench_model.sh runs PyTorch beside it.
 * Not a correctness test. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pipeline/trainer.h"
#include "models/layers.h"
#include "kernels/cuda.h"
#include "models/model_cuda.h"
#include "models/optim.h"

/* shape of the activations between layers while walking the model (batch axis left out) */
typedef struct fl_shape {
    int64_t ch, sp[3];
    int nd;
} fl_shape;

/* Adds the forward FLOPs per sample of the convolutions and linear layers of
 * m (2 per multiply-add), walking it in forward order from shape *s. */
static void model_flops(const hsi_module *m, fl_shape *s, double *flops)
{
    switch (m->kind) {
    case HSI_MOD_SEQUENTIAL:
        for (int i = 0; i < m->n_children; i++) model_flops(m->children[i], s, flops);
        break;
    case HSI_MOD_CONV: {
        const int64_t *ws = m->tensors[0].t->data.shape; /* (K, C, taps...) */
        double taps = 1, out_sp = 1;
        for (int i = 0; i < m->nd; i++) {
            taps *= m->ker[i];
            s->sp[i] = (s->sp[i] + 2 * m->pad[i] - m->ker[i]) / m->stride[i] + 1;
            out_sp *= (double)s->sp[i];
        }
        *flops += 2.0 * (double)ws[0] * (double)ws[1] * taps * out_sp;
        s->ch = ws[0], s->nd = m->nd;
        break;
    }
    case HSI_MOD_MAXPOOL:
    case HSI_MOD_AVGPOOL:
        for (int i = 0; i < m->nd; i++)
            s->sp[i] = (s->sp[i] + 2 * m->pad[i] - m->ker[i]) / m->stride[i] + 1;
        break;
    case HSI_MOD_GAP: s->nd = 0; break;
    case HSI_MOD_FLATTEN:
        for (int i = 0; i < s->nd; i++) s->ch *= s->sp[i];
        s->nd = 0;
        break;
    case HSI_MOD_RESHAPE: /* the model zoo's reshapes give every axis (no -1) */
        s->ch = m->reshape[0], s->nd = m->reshape_nd - 1;
        for (int i = 1; i < m->reshape_nd; i++) s->sp[i - 1] = m->reshape[i];
        break;
    case HSI_MOD_LINEAR:
        *flops += 2.0 * m->in_features * m->out_features;
        s->ch = m->out_features, s->nd = 0;
        break;
    default: break;
    }
}

/* sgemm GFLOP/s on `threads` OpenBLAS threads, square n = 1024, best of 5
 * (the engine's best case: its convolutions are no bigger a product than this) */
static double sgemm_rate(int threads)
{
    const int n = 1024;
    float *a = malloc(sizeof(float) * 3 * n * n);
    if (!a) return 0;
    for (int64_t i = 0; i < 3LL * n * n; i++) a[i] = (float)(i % 7) * 0.1f;
    openblas_set_num_threads(threads);
    double best = 1e30;
    for (int r = 0; r < 6; r++) {
        double t0 = hsi_now();
        /* (n x n) = (n x n) (n x n), row-major, ld n */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, a + n * n, n,
                    0.0f, a + 2 * n * n, n);
        double t = hsi_now() - t0;
        if (r > 0 && t < best) best = t; /* the first warms the threads up */
    }
    openblas_set_num_threads(1);
    free(a);
    return 2.0 * n * n * n / best / 1e9;
}

/* Training steps and eval-mode batches of m's copy on the GPU
 * (models/model_cuda.h) with the convolutions `conv`, timed to the stream's
 * end: samples/s; conv_name: what ran them (hsi_dmodel_conv_name). x: the
 * batch (xs, nd dims, host), y: its classes. ops: then `steps` more
 * training steps under the op profile (each layer waited for), its table
 * on stderr; the samples/s come from the unprofiled steps. */
static hsi_status time_on_gpu(double *train_sps, double *infer_sps, char *conv_name, size_t n_name,
                              hsi_module *m, const int64_t *xs, int nd, const hsi_tensor *x,
                              const hsi_tensor *y, long long steps, long long warmup,
                              hsi_gpu_conv conv, int ops, int graph, long long *launches)
{
    hsi_status st = HSI_OK;
    hsi_dmodel *dm = NULL;
    float *x_d = NULL;
    int32_t *y_d = NULL, *y32 = NULL;
    const float *z = NULL;
    const int64_t n = xs[0], nx = hsi_tensor_count(x);
    hsi_optim_config cfg;
    hsi_optim_config_default(&cfg, HSI_OPT_ADAMW);
    HSI_TRY(hsi_dmodel_create(&dm, m, nd - 1, xs + 1, n, &cfg, 1));
    HSI_TRY(hsi_dmodel_set_conv(dm, conv));
    HSI_TRY(hsi_dmodel_set_graph(dm, graph));
    snprintf(conv_name, n_name, "%s", hsi_dmodel_conv_name(dm));
    if (!(y32 = malloc(sizeof *y32 * (size_t)n))) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (int64_t i = 0; i < n; i++) y32[i] = (int32_t)((const int64_t *)hsi_tensor_ptr((hsi_tensor *)y))[i];
    HSI_TRY(hsi_cuda_malloc((void **)&x_d, sizeof(float) * (size_t)nx));
    HSI_TRY(hsi_cuda_malloc((void **)&y_d, sizeof *y_d * (size_t)n));
    HSI_TRY(hsi_cuda_upload(x_d, hsi_tensor_ptr((hsi_tensor *)x), sizeof(float) * (size_t)nx));
    HSI_TRY(hsi_cuda_upload(y_d, y32, sizeof *y_d * (size_t)n));
    double t0 = 0;
    for (long long s = 0; s < warmup + steps; s++) {
        if (s == warmup) {
            HSI_TRY(hsi_cuda_sync());
            t0 = hsi_now();
        }
        HSI_TRY(hsi_dmodel_train_step(dm, x_d, y_d, n));
    }
    HSI_TRY(hsi_cuda_sync());
    *train_sps = (double)(n * steps) / (hsi_now() - t0);
    *launches = (long long)hsi_dmodel_graph_launches(dm, 1);
    if (ops) {
        hsi_op_profile(1);
        for (long long s = 0; s < steps && st == HSI_OK; s++) st = hsi_dmodel_train_step(dm, x_d, y_d, n);
        hsi_op_profile(0);
        HSI_TRY(st);
        fprintf(stderr, "per op and layer on the GPU, training step (ms per step, %lld steps; each "
                        "piece waited for, so they add up to more than a step):\n", steps);
        hsi_op_profile_report(stderr, (int)steps);
    }
    for (long long s = 0; s < warmup + steps; s++) {
        if (s == warmup) {
            HSI_TRY(hsi_cuda_sync());
            t0 = hsi_now();
        }
        HSI_TRY(hsi_dmodel_predict(dm, &z, x_d, n));
    }
    HSI_TRY(hsi_cuda_sync());
    *infer_sps = (double)(n * steps) / (hsi_now() - t0);
cleanup:
    hsi_cuda_free(x_d);
    hsi_cuda_free(y_d);
    free(y32);
    hsi_dmodel_free(dm);
    return st;
}

static int bench_model(int argc, char **argv)
{
    const char *cmd = "bench model", *name = NULL, *conv = "auto";
    long long batch = 128, bands = 30, patch = 11, classes = 16, threads = 2, steps = 20,
              warmup = 3;
    hsi_conv_impl conv_impl = HSI_CONV_IMPL_AUTO;
    hsi_gpu_conv gpu_conv = HSI_GPU_CONV_AUTO;
    hsi_conv_simd simd = HSI_CONV_SIMD_AUTO;
    int json = 0, ops = 0, bound = 0, graph = 0, rc = HSI_EXIT_FAIL;
    hsi_device dev = HSI_DEVICE_CPU;
    hsi_status st = HSI_OK;
    hsi_module *m = NULL;
    hsi_optim *o = NULL;
    hsi_graph *g = NULL;
    hsi_tensor *x = NULL, *y = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (hsi_cli_opt(argc, argv, &i, "--batch", &v)) {
            if (!hsi_cli_parse_int(cmd, "--batch", v, 2, 1 << 20, &batch)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--bands", &v)) {
            if (!hsi_cli_parse_int(cmd, "--bands", v, 1, 100000, &bands)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--patch", &v)) {
            if (!hsi_cli_parse_int(cmd, "--patch", v, 1, 1000, &patch)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--classes", &v)) {
            if (!hsi_cli_parse_int(cmd, "--classes", v, 2, 100000, &classes)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--threads", &v)) {
            if (!hsi_cli_parse_int(cmd, "--threads", v, 1, 1024, &threads)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--steps", &v)) {
            if (!hsi_cli_parse_int(cmd, "--steps", v, 1, 1000000, &steps)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--warmup", &v)) {
            if (!hsi_cli_parse_int(cmd, "--warmup", v, 0, 1000000, &warmup)) return HSI_EXIT_USAGE;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--ops")) {
            ops = 1;
        } else if (!strcmp(argv[i], "--bound")) {
            bound = 1;
        } else if (!strcmp(argv[i], "--graph")) {
            graph = 1;
        } else if (hsi_cli_opt(argc, argv, &i, "--device", &v)) {
            if (!hsi_cli_parse_device(cmd, v, &dev)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--conv", &v)) {
            if (!v) return hsi_cli_usage_error(cmd, "--conv needs auto, direct, gemm or cudnn");
            conv = v;
        } else if (hsi_cli_opt(argc, argv, &i, "--simd", &v)) {
            if (!v) return hsi_cli_usage_error(cmd, "--simd needs auto or avx2");
            if (!strcmp(v, "auto")) simd = HSI_CONV_SIMD_AUTO;
            else if (!strcmp(v, "avx2")) simd = HSI_CONV_SIMD_AVX2;
            else return hsi_cli_usage_error(cmd, "--simd: expected auto or avx2, got '%s'", v);
        } else if (argv[i][0] == '-') {
            return hsi_cli_usage_error(cmd, "unknown option '%s'", argv[i]);
        } else if (!name) {
            name = argv[i];
        } else {
            return hsi_cli_usage_error(cmd, "one model name expected, got '%s' too", argv[i]);
        }
    }
    if (!name) return hsi_cli_usage_error(cmd, "which model? (cnn2d, hybridsn, cnn1d)");
    /* the name, and direct/cudnn against a device given as cpu or cuda */
    if (hsi_conv_option(conv, dev, NULL, NULL) != HSI_OK)
        return hsi_cli_usage_error(cmd, "%s", hsi_last_error());
    {
        char tb[16]; /* the engine's threads; its BLAS calls run single-threaded */
        snprintf(tb, sizeof tb, "%lld", threads);
        setenv("HSI_THREADS", tb, 1);
    }
    HSI_TRY(hsi_device_resolve(&dev, dev, strcmp(conv, "cudnn") ? "--device cuda"
                                                                 : "--device cuda --conv cudnn"));
    /* --device auto: against the device it became */
    if (hsi_conv_option(conv, dev, &conv_impl, &gpu_conv) != HSI_OK)
        return hsi_cli_usage_error(cmd, "%s", hsi_last_error());
    if (dev == HSI_DEVICE_CUDA && bound)
        return hsi_cli_usage_error(cmd, "--bound times the CPU engine (not with --device cuda)");
    if (dev != HSI_DEVICE_CUDA && graph)
        return hsi_cli_usage_error(cmd, "--graph captures the GPU's training step (--device cuda only)");
    hsi_conv_set_impl(conv_impl);
    hsi_conv_set_simd(simd);
    hsi_manual_seed(1);
    HSI_TRY(hsi_model_create(&m, name, (int)bands, (int)patch, (int)classes, HSI_F32, 1));
    hsi_optim_config cfg;
    hsi_optim_config_default(&cfg, HSI_OPT_ADAMW);
    HSI_TRY(hsi_optim_new(&o, &cfg, m));
    HSI_TRY(hsi_graph_new(&g));
    int64_t xs[5], ys[1] = {batch};
    int nd = hsi_model_input_shape(name, (int)batch, (int)bands, (int)patch, xs);
    HSI_TRY(hsi_tensor_new(&x, HSI_F32, nd, xs, 0));
    HSI_TRY(hsi_tensor_new(&y, HSI_I64, 1, ys, 0));
    hsi_rng r;
    hsi_rng_seed(&r, 7);
    float *xp = hsi_tensor_ptr(x);
    for (int64_t i = 0; i < hsi_tensor_count(x); i++) xp[i] = (float)hsi_rng_normal(&r);
    int64_t *yp = hsi_tensor_ptr(y);
    for (int64_t i = 0; i < batch; i++) yp[i] = (int64_t)(hsi_rng_next(&r) % (uint64_t)classes);
    if (dev == HSI_DEVICE_CUDA) {
        double tr = 0, inf = 0;
        long long launches = 0;
        char conv_name[64] = "";
        HSI_TRY(time_on_gpu(&tr, &inf, conv_name, sizeof conv_name, m, xs, nd, x, y, steps, warmup,
                            gpu_conv, ops, graph, &launches));
        if (json)
            printf("{\"model\": \"%s\", \"device\": \"cuda\", \"batch\": %lld, \"bands\": %lld, "
                   "\"patch\": %lld, \"classes\": %lld, \"steps\": %lld, \"train_samples_per_s\": "
                   "%.1f, \"infer_samples_per_s\": %.1f, \"params\": %lld, \"conv\": \"%s\", "
                   "\"graph_launches\": %lld}\n",
                   name, batch, bands, patch, classes, steps, tr, inf,
                   (long long)hsi_module_param_count(m), conv_name, launches);
        else
            printf("model %s on the GPU: batch %lld, input %lldx%lldx%lld, %lld classes, "
                   "convolutions by %s%s\n  train: %.1f samples/s\n  infer: %.1f samples/s\n",
                   name, batch, bands, patch, patch, classes, conv_name,
                   graph ? ", training steps as one CUDA Graph" : "", tr, inf);
        rc = HSI_EXIT_OK;
        goto cleanup;
    }

    double t_train = 0, t_fwd = 0, t_bwd = 0, t_opt = 0, loss_v = 0;
    hsi_mem_stats m0 = {0}, m1;
    for (long long s = 0; s < warmup + steps; s++) {
        if (s == warmup) hsi_mem_get(&m0);
        if (s == warmup && ops) hsi_op_profile(1);
        double t0 = hsi_now();
        hsi_step_times st_t = {0, 0, 0};
        hsi_graph_reset(g);
        HSI_TRY(hsi_train_step(m, o, g, x, y, NULL, &loss_v, NULL, &st_t));
        double t3 = hsi_now();
        if (s >= warmup) {
            t_train += t3 - t0;
            t_fwd += st_t.forward;
            t_bwd += st_t.backward;
            t_opt += st_t.optimizer;
        }
    }
    hsi_mem_get(&m1);
    if (ops) {
        hsi_op_profile(0);
        fprintf(stderr, "per op, training step (ms per step, %lld steps):\n", steps);
        hsi_op_profile_report(stderr, (int)steps);
    }
    hsi_module_train(m, 0);
    int prev = hsi_set_grad_enabled(0);
    double t_inf = 0;
    for (long long s = 0; s < warmup + steps; s++) {
        if (s == warmup && ops) hsi_op_profile(1);
        double t0 = hsi_now();
        hsi_tensor *logits = NULL;
        hsi_graph_reset(g);
        hsi_op_profile_mark();
        st = hsi_module_forward(&logits, m, g, x);
        if (st != HSI_OK) break;
        if (s >= warmup) t_inf += hsi_now() - t0;
    }
    hsi_set_grad_enabled(prev);
    if (ops) {
        hsi_op_profile(0);
        fprintf(stderr, "per op, inference batch (ms per batch):\n");
        hsi_op_profile_report(stderr, (int)steps);
    }
    HSI_TRY(st);
    double train_sps = (double)(batch * steps) / t_train, infer_sps = (double)(batch * steps) / t_inf;
    /* the sgemm bound: training is about 3 products per layer (forward, dx,
     * dw), inference 1; sgemm timed now, in the same run, on the same threads */
    fl_shape sh = {xs[1], {xs[2], nd > 3 ? xs[3] : 1, nd > 4 ? xs[4] : 1}, nd - 2};
    double fwd_flops = 0, gf = bound ? sgemm_rate((int)threads) : 0;
    model_flops(m, &sh, &fwd_flops);
    double train_bound = gf > 0 ? gf * 1e9 / (3 * fwd_flops) : 0,
           infer_bound = gf > 0 ? gf * 1e9 / fwd_flops : 0;
    if (json) {
        printf("{\"model\": \"%s\", \"batch\": %lld, \"bands\": %lld, \"patch\": %lld, \"classes\": "
               "%lld, \"threads\": %lld, \"steps\": %lld, \"train_samples_per_s\": %.1f, "
               "\"infer_samples_per_s\": %.1f, \"forward_ms\": %.3f, \"backward_ms\": %.3f, "
               "\"optimizer_ms\": %.3f, \"params\": %lld, \"arena_bytes\": %lld, "
               "\"steady_state_allocs\": %lld, \"last_loss\": %.6f, \"train_gflop_per_sample\": %.4f, "
               "\"sgemm_GFps\": %.1f, \"train_bound_samples_per_s\": %.1f, "
               "\"infer_bound_samples_per_s\": %.1f, \"conv_simd\": \"%s\"}\n",
               name, batch, bands, patch, classes, threads, steps, train_sps, infer_sps,
               1e3 * t_fwd / steps, 1e3 * t_bwd / steps, 1e3 * t_opt / steps,
               (long long)hsi_module_param_count(m), (long long)hsi_graph_arena_bytes(g),
               (long long)(m1.n_allocs - m0.n_allocs), loss_v, 3 * fwd_flops / 1e9, gf,
               train_bound, infer_bound, hsi_conv_uses_avx512() ? "avx512" : "avx2");
    } else {
        printf("model %s: batch %lld, input %lldx%lldx%lld, %lld classes, %lld threads, %lld "
               "parameters, %s convolution tiles\n", name, batch, bands, patch, patch, classes,
               threads, (long long)hsi_module_param_count(m),
               hsi_conv_uses_avx512() ? "AVX-512" : "AVX2");
        printf("  train: %.1f samples/s (forward %.2f ms, backward %.2f ms, AdamW %.2f ms per "
               "step)\n", train_sps, 1e3 * t_fwd / steps, 1e3 * t_bwd / steps,
               1e3 * t_opt / steps);
        printf("  infer: %.1f samples/s\n", infer_sps);
        if (bound)
            printf("  sgemm bound: %.1f GFLOP/s (1024^3, %lld threads); %.3f GFLOP per training "
                   "sample -> train %.1f samples/s (%.2f of it), infer %.1f (%.2f of it)\n", gf,
                   threads, 3 * fwd_flops / 1e9, train_bound, train_sps / train_bound, infer_bound,
                   infer_sps / infer_bound);
        printf("  engine allocations during the %lld timed steps: %lld; arena %.1f MiB\n", steps,
               (long long)(m1.n_allocs - m0.n_allocs), hsi_graph_arena_bytes(g) / 1048576.0);
    }
    rc = HSI_EXIT_OK;
cleanup:
    if (st != HSI_OK) rc = hsi_cli_fail(cmd, st);
    hsi_tensor_free(x);
    hsi_tensor_free(y);
    hsi_graph_free(g);
    hsi_optim_free(o);
    hsi_module_free(m);
    return rc;
}

HSI_CLI_COMMAND(bench_model,
                {"bench-model", "(reached as 'hsi bench model')",
                 "usage: hsi bench model NAME [--batch 128] [--bands 30] [--patch 11]\n"
                 "                             [--classes 16] [--threads 2] [--steps 20]\n"
                 "                             [--warmup 3] [--json] [--ops] [--bound]\n"
                 "                             [--conv auto|direct|gemm|cudnn] [--simd auto|avx2]\n"
                 "                             [--device cpu|cuda] [--graph]\n"
                 "\n"
                 "Times training steps (forward, cross-entropy, backward, AdamW) and\n"
                 "no-grad inference batches of model NAME (cnn2d, hybridsn, cnn1d) on random\n"
                 "data and prints samples/s (--json: train_samples_per_s,\n"
                 "infer_samples_per_s, per-phase ms; --ops: time per op and layer on\n"
                 "stderr; --bound: also time sgemm (1024^3) on the same threads and print\n"
                 "the samples/s it would allow at 3x the forward FLOPs of the convolutions\n"
                 "and linear layers per training sample, counted as direct convolutions\n"
                 "(Winograd multiplies less, so it can pass this bound); --conv: the float\n"
                 "convolution: auto = Winograd F(2x2,3x3) for kernels ending in 3x3 with\n"
                 "pad 0 or 1 (2-D and 3-D) and direct kernels for the rest, direct = no\n"
                 "Winograd, gemm = im2col + OpenBLAS; --simd: their register tiles, auto =\n"
                 "AVX-512 where the CPU has it, avx2 = the AVX2 ones). bench/bench_model.sh\n"
                 "and bench/bench_train.sh run PyTorch beside it with the same threads and\n"
                 "print the ratio.\n"
                 "--device cuda: the same steps and batches on the GPU (models/model_cuda.h),\n"
                 "timed to the end of the stream (auto: the GPU when there is one). Its\n"
                 "convolutions (--conv; the JSON's \"conv\" says which ran): auto = cuDNN\n"
                 "when it loads (but gemm for the backward of 3-D convolutions, faster\n"
                 "there), else gemm; gemm = im2col + cuBLAS sgemm; cudnn = every one, and\n"
                 "batch norm, by cuDNN 9 (loaded at run time: $HSI_CUDNN, else\n"
                 "libcudnn.so.9; FP32 math,\n"
                 "no TF32; the fastest deterministic algorithms, the fastest of all with\n"
                 "HSI_CUDNN_ALGO=fastest), or an error saying why it cannot run. direct\n"
                 "is the CPU's only and cudnn the GPU's only: each is a usage error on\n"
                 "the other device. --ops: the training step's time per op and layer on\n"
                 "stderr, from extra steps that wait for each layer. --graph: each\n"
                 "training step and inference batch from the second of its kind on is\n"
                 "one CUDA Graph launch instead of a launch per kernel (the same results\n"
                 "bit for bit; the JSON's graph_launches counts the training steps; the\n"
                 "first of each kind measures and the second captures, so the timed\n"
                 "steps are all launches with --warmup 2 or more).\n",
                 bench_model})

/* cmd_bench_dist.c — `hsi bench dist`: data-parallel training throughput
 * under mpirun (pipeline/ddp.h on random data): samples/s and scaling
 * efficiency against one process with the node's cores, ms per step per
 * phase, buckets, the bare allreduce's bus bandwidth, and a model of the
 * allreduce cost on a network the user names. Not a correctness test (the
 * dist suites are). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include "cli.h"
#include "core/dist.h"
#include "core/prng.h"
#include "core/threads.h"
#include "models/nn.h"
#include "models/optim.h"
#include "pipeline/ddp.h"
#include "pipeline/trainer.h"

static const char usage[] =
    "usage: mpirun -np N hsi bench dist [--model cnn2d|hybridsn|cnn1d] [--batch B] [--steps K]\n"
    "                [--warmup W] [--bands K] [--patch P] [--classes C] [--bucket-mb X]\n"
    "                [--bn local|sync] [--no-overlap] [--net-gbps G] [--lat-us A] [--json]\n"
    "\n"
    "Data-parallel training steps on random data with a global batch of B (64)\n"
    "samples split over the N ranks. Rank 0 first runs the same steps alone (the\n"
    "others sleep) with one rank's threads, T(1), and with all the node's cores.\n"
    "Then every rank: samples/s, the scaling efficiency E(N) = T(N) / (N T(1))\n"
    "of throughputs, the ratio to one process on the node's cores, ms per step in\n"
    "forward, backward (bucket launches included), allreduce not hidden by\n"
    "backward and optimizer, the buckets, and a bare MPI_Allreduce of the\n"
    "gradients (algorithm bandwidth S / t and bus bandwidth 2 (N - 1) / N S / t).\n"
    "Then the ring-allreduce model 2 (N - 1) a + 2 (N - 1) / N S / B for cnn2d\n"
    "and hybridsn gradients at N = 8 and 64 on 10 GbE, 100 GbE, InfiniBand HDR\n"
    "and --net-gbps/--lat-us, with the modelled E(N) of the measured model (one\n"
    "rank per node, the step's compute divided by N; with and without overlap).\n"
    "On one shared machine only N <= cores means anything for timing.\n";

typedef struct phase {
    double step, fwd, bwd, comm, opt;
} phase;

static void random_batch(float *x, int32_t *y, int64_t n, int64_t per, int classes, uint64_t seed)
{
    hsi_prng r;
    hsi_prng_init(&r, seed);
    for (int64_t i = 0; i < n * per; i++) x[i] = (float)hsi_prng_normal(&r);
    for (int64_t i = 0; i < n; i++) y[i] = (int32_t)hsi_prng_below(&r, (uint64_t)classes);
}

static int64_t grad_bytes_of(const char *model, int bands, int patch, int classes)
{
    hsi_module *m = NULL;
    if (hsi_model_create(&m, model, bands, patch, classes, HSI_F32, 0) != HSI_OK) return 0;
    int64_t b = 4 * hsi_module_param_count(m);
    hsi_module_free(m);
    return b;
}

static double ring_s(int n, double bytes, double gbps, double lat_us)
{
    return 2.0 * (n - 1) * lat_us * 1e-6 + 2.0 * (n - 1) / n * bytes / (gbps * 1e9 / 8);
}

static int bench_dist(int argc, char **argv)
{
    const char *cmd = "bench dist", *model = "cnn2d";
    long long batch = 64, steps = 20, warmup = 3, bands = 30, patch = -1, classes = 16;
    double bucket_mb = 25, net_gbps = 0, lat_us = 5;
    int json = 0, bn_sync = 0, no_overlap = 0, rc = HSI_EXIT_FAIL;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (hsi_cli_opt(argc, argv, &i, "--model", &v)) {
            if (!(model = v)) return hsi_cli_usage_error(cmd, "--model needs a name");
        } else if (hsi_cli_opt(argc, argv, &i, "--batch", &v)) {
            if (!hsi_cli_parse_int(cmd, "--batch", v, 2, 1 << 20, &batch)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--steps", &v)) {
            if (!hsi_cli_parse_int(cmd, "--steps", v, 1, 1000000, &steps)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--warmup", &v)) {
            if (!hsi_cli_parse_int(cmd, "--warmup", v, 0, 1000000, &warmup)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--bands", &v)) {
            if (!hsi_cli_parse_int(cmd, "--bands", v, 1, 100000, &bands)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--patch", &v)) {
            if (!hsi_cli_parse_int(cmd, "--patch", v, 1, 99, &patch)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--classes", &v)) {
            if (!hsi_cli_parse_int(cmd, "--classes", v, 2, 100000, &classes)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--bucket-mb", &v)) {
            if (!hsi_cli_parse_double(cmd, "--bucket-mb", v, &bucket_mb)) return HSI_EXIT_USAGE;
            if (!(bucket_mb > 0)) return hsi_cli_usage_error(cmd, "--bucket-mb must be > 0");
        } else if (hsi_cli_opt(argc, argv, &i, "--net-gbps", &v)) {
            if (!hsi_cli_parse_double(cmd, "--net-gbps", v, &net_gbps)) return HSI_EXIT_USAGE;
            if (!(net_gbps > 0)) return hsi_cli_usage_error(cmd, "--net-gbps must be > 0");
        } else if (hsi_cli_opt(argc, argv, &i, "--lat-us", &v)) {
            if (!hsi_cli_parse_double(cmd, "--lat-us", v, &lat_us)) return HSI_EXIT_USAGE;
            if (!(lat_us >= 0)) return hsi_cli_usage_error(cmd, "--lat-us must be >= 0");
        } else if (hsi_cli_opt(argc, argv, &i, "--bn", &v)) {
            if (!v || (strcmp(v, "local") && strcmp(v, "sync")))
                return hsi_cli_usage_error(cmd, "--bn expects local or sync");
            bn_sync = !strcmp(v, "sync");
        } else if (!strcmp(argv[i], "--no-overlap")) no_overlap = 1;
        else if (!strcmp(argv[i], "--json")) json = 1;
        else return hsi_cli_usage_error(cmd, "unknown option '%s'", argv[i]);
    }
    if (patch < 0) patch = !strcmp(model, "hybridsn") ? 25 : !strcmp(model, "cnn1d") ? 1 : 11;
    const int N = hsi_dist_size(), me = hsi_dist_rank();
    if (batch % N != 0)
        return hsi_cli_usage_error(cmd, "--batch %lld does not split into %d equal slices", batch, N);
    const int64_t b = batch / N;
    int64_t shape[5];
    int nd = hsi_model_input_shape(model, 1, (int)bands, (int)patch, shape);
    int64_t per = 1;
    for (int k = 1; k < nd; k++) per *= shape[k];
    float *x = malloc((size_t)(batch * per) * sizeof *x);
    int32_t *y = malloc((size_t)batch * sizeof *y);
    hsi_module *m = NULL;
    hsi_optim *o = NULL;
    hsi_graph *g = NULL;
    hsi_ddp *dd = NULL;
    hsi_tensor *xt = NULL, *yt = NULL;
    float *buf = NULL;
    hsi_status st = HSI_OK;
    phase one = {0}, node = {0}, mine = {0}, worst = {0};
    if (!x || !y) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory for a batch of %lld", batch);
        goto cleanup;
    }
    random_batch(x, y, batch, per, (int)classes, 3);
    hsi_optim_config oc;
    hsi_optim_config_default(&oc, HSI_OPT_ADAMW);
    int per_rank_threads = hsi_threads();
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    /* T(1): rank 0 alone (the others sleep in the barrier), with one
     * rank's threads (the baseline of E(N)) and with the node's cores */
    if (me == 0) {
        int blas = openblas_get_num_threads();
        for (int pass = 0; pass < (N > 1 ? 2 : 1); pass++) {
            phase *ph = pass ? &node : &one;
            hsi_threads_set(pass ? (int)(ncpu > 0 ? ncpu : 1) : per_rank_threads);
            HSI_TRY(hsi_model_create(&m, model, (int)bands, (int)patch, (int)classes, HSI_F32, 1));
            HSI_TRY(hsi_optim_new(&o, &oc, m));
            HSI_TRY(hsi_graph_new(&g));
            hsi_module_train(m, 1);
            int64_t xs[5];
            hsi_model_input_shape(model, (int)batch, (int)bands, (int)patch, xs);
            hsi_step_times tm = {0};
            double t0 = 0;
            for (long long s = 0; s < warmup + steps; s++) {
                if (s == warmup) {
                    memset(&tm, 0, sizeof tm);
                    t0 = hsi_now();
                }
                hsi_graph_reset(g);
                int64_t ys[1] = {batch};
                HSI_TRY(hsi_graph_tensor(&xt, g, HSI_F32, nd, xs, 0));
                HSI_TRY(hsi_graph_tensor(&yt, g, HSI_I32, 1, ys, 0));
                memcpy(hsi_tensor_ptr(xt), x, (size_t)(batch * per) * sizeof *x);
                memcpy(hsi_tensor_ptr(yt), y, (size_t)batch * sizeof *y);
                double loss;
                HSI_TRY(hsi_train_step(m, o, g, xt, yt, NULL, &loss, NULL, &tm));
            }
            ph->step = (hsi_now() - t0) / (double)steps;
            ph->fwd = tm.forward / (double)steps, ph->bwd = tm.backward / (double)steps;
            ph->opt = tm.optimizer / (double)steps;
            hsi_graph_free(g), hsi_optim_free(o), hsi_module_free(m);
            g = NULL, o = NULL, m = NULL;
        }
        if (N == 1) node = one;
        hsi_threads_set(per_rank_threads);
        openblas_set_num_threads(blas);
    }
    HSI_TRY(hsi_dist_barrier());
    HSI_TRY(hsi_dist_bcast(&one, sizeof one, 0));
    HSI_TRY(hsi_dist_bcast(&node, sizeof node, 0));
    /* T(N): every rank its slice, gradients summed */
    HSI_TRY(hsi_model_create(&m, model, (int)bands, (int)patch, (int)classes, HSI_F32, 1));
    HSI_TRY(hsi_optim_new(&o, &oc, m));
    HSI_TRY(hsi_graph_new(&g));
    hsi_module_train(m, 1);
    hsi_ddp_config dc;
    hsi_ddp_config_init(&dc);
    dc.bucket_mb = bucket_mb;
    dc.bn_sync = bn_sync;
    dc.overlap = !no_overlap;
    dc.hash_every = 0;
    HSI_TRY(hsi_ddp_create(&dd, m, o, &dc));
    double t0 = 0;
    for (long long s = 0; s < warmup + steps; s++) {
        if (s == warmup) {
            HSI_TRY(hsi_dist_barrier());
            hsi_ddp_reset_stats(dd);
            t0 = hsi_now();
        }
        double ls;
        int64_t hits;
        HSI_TRY(hsi_ddp_step(dd, g, x + me * b * per, y + me * b, b, nd - 1, shape + 1, me * b, batch,
                             (uint64_t)s + 1, &ls, &hits));
    }
    hsi_ddp_stats ds;
    hsi_ddp_get_stats(dd, &ds);
    mine.step = (hsi_now() - t0) / (double)steps;
    mine.fwd = ds.forward / (double)steps, mine.bwd = ds.backward / (double)steps;
    mine.comm = ds.comm_wait / (double)steps, mine.opt = ds.optimizer / (double)steps;
    worst = mine;
    HSI_TRY(hsi_dist_allreduce(&worst, 5, HSI_F64, HSI_DIST_MAX));
    /* the bare allreduce of all the gradients */
    const int64_t S = ds.grad_bytes / 4;
    if (!(buf = calloc((size_t)S + 1, sizeof *buf))) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    HSI_TRY(hsi_dist_allreduce(buf, S, HSI_F32, HSI_DIST_SUM));
    HSI_TRY(hsi_dist_barrier());
    double ta = hsi_now();
    for (long long s = 0; s < steps; s++) HSI_TRY(hsi_dist_allreduce(buf, S, HSI_F32, HSI_DIST_SUM));
    double t_ar = (hsi_now() - ta) / (double)steps;
    HSI_TRY(hsi_dist_allreduce(&t_ar, 1, HSI_F64, HSI_DIST_MAX));
    if (me != 0) {
        rc = HSI_EXIT_OK;
        goto cleanup;
    }
    {
        double sps1 = (double)batch / one.step, spsN = (double)batch / worst.step;
        double E = spsN / (N * sps1);
        double bytes = 4.0 * (double)S;
        double algbw = N > 1 ? bytes / t_ar / 1e9 : 0, busbw = algbw * 2.0 * (N - 1) / N;
        if (json) {
            printf("{\"model\": \"%s\", \"ranks\": %d, \"threads_per_rank\": %d, \"batch\": %lld, "
                   "\"steps\": %lld, \"samples_per_s_1\": %.1f, \"samples_per_s\": %.1f, \"E\": %.4f, "
                   "\"ms_step\": %.3f, \"ms_forward\": %.3f, \"ms_backward\": %.3f, "
                   "\"ms_comm_not_hidden\": %.3f, \"ms_optimizer\": %.3f, \"ms_step_1\": %.3f, "
                   "\"samples_per_s_node\": %.1f, "
                   "\"buckets\": %d, \"grad_bytes\": %lld, \"ms_allreduce\": %.3f, "
                   "\"algbw_gbs\": %.3f, \"busbw_gbs\": %.3f}\n",
                   model, N, per_rank_threads, batch, steps, sps1, spsN, E, 1e3 * worst.step,
                   1e3 * mine.fwd, 1e3 * mine.bwd, 1e3 * worst.comm, 1e3 * mine.opt, 1e3 * one.step,
                   (double)batch / node.step, ds.n_buckets, (long long)ds.grad_bytes, 1e3 * t_ar, algbw, busbw);
            rc = HSI_EXIT_OK;
            goto cleanup;
        }
        printf("hsi bench dist: %s, global batch %lld (%lld per rank), %d rank%s x %d thread%s, "
               "%lld steps\n", model, batch, (long long)b, N, N == 1 ? "" : "s", per_rank_threads,
               per_rank_threads == 1 ? "" : "s", steps);
        printf("one process, %d thread%s (one rank's share): %.1f samples/s, %.2f ms/step (forward "
               "%.2f, backward %.2f, optimizer %.2f)\n", per_rank_threads, per_rank_threads == 1 ? "" : "s",
               sps1, 1e3 * one.step, 1e3 * one.fwd, 1e3 * one.bwd, 1e3 * one.opt);
        if (N > 1)
            printf("one process, the node's %ld cores: %.1f samples/s, %.2f ms/step\n", ncpu,
                   (double)batch / node.step, 1e3 * node.step);
        printf("%d ranks: %.1f samples/s, E(%d) = T(%d) / (%d T(1)) = %.3f; against one process on "
               "the node's cores: %.3f\n", N, spsN, N, N, N, E, spsN / ((double)batch / node.step));
        printf("ms per step (rank 0; slowest rank's step and wait): step %.2f, forward %.2f, "
               "backward %.2f, allreduce not hidden by backward %.2f (slowest %.2f), optimizer %.2f\n",
               1e3 * worst.step, 1e3 * mine.fwd, 1e3 * mine.bwd, 1e3 * mine.comm, 1e3 * worst.comm,
               1e3 * mine.opt);
        printf("buckets: %d (", ds.n_buckets);
        for (int k = 0; k < ds.n_buckets && k < 64; k++)
            printf("%s%.3f", k ? ", " : "", ds.bucket_bytes[k] / 1e6);
        printf(" MB), reverse parameter order, MPI_Iallreduce %s\n",
               no_overlap ? "after backward" : "started from the backward hook");
        if (N > 1)
            printf("bare MPI_Allreduce of %.2f MB: %.3f ms, algorithm bandwidth %.2f GB/s, bus "
                   "bandwidth %.2f GB/s\n", bytes / 1e6, 1e3 * t_ar, algbw, busbw);
        /* the model */
        struct { const char *name; double gbps, lat; } nets[4] = {
            {"10 GbE", 10, 25}, {"100 GbE", 100, 10}, {"InfiniBand HDR", 200, 2}, {NULL, net_gbps, lat_us}};
        int n_nets = net_gbps > 0 ? 4 : 3;
        char user[64];
        snprintf(user, sizeof user, "%.0f Gb/s, %.1f us", net_gbps, lat_us);
        nets[3].name = user;
        double cnn = (double)grad_bytes_of("cnn2d", (int)bands, 11, (int)classes);
        double hyb = (double)grad_bytes_of("hybridsn", (int)bands, 25, (int)classes);
        printf("\nring allreduce 2(N-1) a + 2(N-1)/N S/B, ms; modelled E(N) of %s (one rank per node "
               "with %d thread%s: compute %.2f ms / N per step; no overlap / overlap with backward):\n",
               model, per_rank_threads, per_rank_threads == 1 ? "" : "s", 1e3 * one.step);
        printf("%-22s %4s %12s %12s %14s\n", "network", "N", "cnn2d", "hybridsn", "E(N) model");
        printf("%-22s %4s %9.2f MB %9.2f MB\n", "", "", cnn / 1e6, hyb / 1e6);
        for (int k = 0; k < n_nets; k++)
            for (int q = 0; q < 2; q++) {
                int n = q ? 64 : 8;
                double tm = ring_s(n, bytes, nets[k].gbps, nets[k].lat);
                double step_no = one.step / n + tm;
                double step_ov = (one.step - one.bwd) / n + fmax(one.bwd / n, tm);
                printf("%-22s %4d %12.3f %12.3f %6.3f / %5.3f\n", nets[k].name, n,
                       1e3 * ring_s(n, cnn, nets[k].gbps, nets[k].lat),
                       1e3 * ring_s(n, hyb, nets[k].gbps, nets[k].lat), one.step / (n * step_no),
                       one.step / (n * step_ov));
            }
        if (N > 1 && N > ncpu)
            printf("\n(%d ranks on %ld cores: the timings above are correctness only)\n", N, ncpu);
    }
    rc = HSI_EXIT_OK;
cleanup:
    hsi_ddp_free(dd);
    hsi_graph_free(g);
    hsi_optim_free(o);
    hsi_module_free(m);
    free(x);
    free(y);
    free(buf);
    if (st != HSI_OK) return hsi_cli_fail(cmd, st);
    return rc;
}

HSI_CLI_COMMAND(bench_dist, {"bench-dist", "(reached as 'hsi bench dist')", usage, bench_dist})

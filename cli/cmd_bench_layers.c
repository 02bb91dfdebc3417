/* cmd_bench_layers.c — `hsi bench layers`: forward and backward time of each
 * layer kernel of the cnn2d model (models/layers.h: conv, batch norm, max
 * pool, global average pool) on random data, best of N repetitions.
 * bench/bench_layers.sh puts PyTorch's time for the same layers beside it.
 * Not a correctness test, and not the engine: kernels only, no graph. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "models/layers.h"

typedef struct bl_timing {
    const char *name;
    double fwd, bwd; /* seconds, best of reps */
} bl_timing;

static float *bl_rand(size_t n, unsigned *seed)
{
    float *p = hsi_aligned_alloc(n * sizeof(float) + 64);
    if (!p) return NULL;
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        p[i] = (float)(*seed >> 8) * (1.0f / 16777216.0f) - 0.5f;
    }
    return p;
}

/* conv 3x3 pad 1 of x (n, c, hw, hw) to k channels; dx only when need_dx */
static hsi_status bl_conv(bl_timing *t, int n, int c, int k, int hw, int need_dx, int reps)
{
    hsi_status st = HSI_OK;
    hsi_conv_dims d;
    int in[2] = {hw, hw}, ker[2] = {3, 3}, s[2] = {1, 1}, p[2] = {1, 1};
    unsigned seed = 1;
    float *x = NULL, *w = NULL, *b = NULL, *y = NULL, *dy = NULL, *dx = NULL, *dw = NULL,
          *db = NULL;
    void *ws = NULL;
    HSI_TRY(hsi_conv_dims_init(&d, 2, n, c, k, in, ker, s, p));
    size_t nx = (size_t)n * c * hw * hw, nw = (size_t)k * c * 9,
           ny = (size_t)n * k * d.out[0] * d.out[1];
    x = bl_rand(nx, &seed), w = bl_rand(nw, &seed), b = bl_rand((size_t)k, &seed);
    y = bl_rand(ny, &seed), dy = bl_rand(ny, &seed), dx = bl_rand(nx, &seed);
    dw = bl_rand(nw, &seed), db = bl_rand((size_t)k, &seed);
    ws = hsi_aligned_alloc(hsi_conv_workspace_bytes(&d, sizeof(float)) + 64);
    if (!x || !w || !b || !y || !dy || !dx || !dw || !db || !ws) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "bench layers: out of memory");
        goto cleanup;
    }
    t->fwd = t->bwd = 1e30;
    for (int r = 0; r <= reps; r++) { /* r = 0 warms up */
        double t0 = hsi_now();
        hsi_conv_forward_f32(y, x, w, b, &d, ws);
        double t1 = hsi_now();
        hsi_conv_backward_f32(need_dx ? dx : NULL, dw, db, dy, x, w, &d, ws);
        double t2 = hsi_now();
        if (r && t1 - t0 < t->fwd) t->fwd = t1 - t0;
        if (r && t2 - t1 < t->bwd) t->bwd = t2 - t1;
    }
cleanup:
    hsi_aligned_free(x), hsi_aligned_free(w), hsi_aligned_free(b), hsi_aligned_free(y);
    hsi_aligned_free(dy), hsi_aligned_free(dx), hsi_aligned_free(dw), hsi_aligned_free(db);
    hsi_aligned_free(ws);
    return st;
}

/* kind 0: batch norm (training) over (n, c, s); 1: max pool 2x2 on (n, c, hw, hw);
 * 2: global average pool over (n, c, s) */
static hsi_status bl_other(bl_timing *t, int kind, int n, int c, int hw, int reps)
{
    hsi_status st = HSI_OK;
    unsigned seed = 2;
    int64_t s = (int64_t)hw * hw;
    size_t nx = (size_t)n * c * (size_t)s;
    float *x = bl_rand(nx, &seed), *y = bl_rand(nx, &seed), *dy = bl_rand(nx, &seed),
          *dx = bl_rand(nx, &seed), *pc = bl_rand((size_t)c * 8, &seed);
    int32_t *am = hsi_aligned_alloc(nx * sizeof(int32_t) + 64);
    if (!x || !y || !dy || !dx || !pc || !am) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "bench layers: out of memory");
        goto cleanup;
    }
    for (int i = 0; i < c; i++) pc[4 * c + i] = 1.0f; /* running variance */
    hsi_pool_dims pd;
    int in[2] = {hw, hw}, k2[2] = {2, 2}, s2[2] = {2, 2}, p0[2] = {0, 0};
    if (kind == 1) HSI_TRY(hsi_pool_dims_init(&pd, HSI_POOL_MAX, 2, n, c, in, k2, s2, p0));
    t->fwd = t->bwd = 1e30;
    for (int r = 0; r <= reps; r++) {
        double t0 = hsi_now();
        if (kind == 0)
            hsi_bn_forward_f32(y, pc, pc + c, pc + 2 * c, pc + 4 * c, x, pc + 5 * c, pc + 6 * c, n,
                               c, s, 1e-5f, 0.1f, 1);
        else if (kind == 1)
            hsi_pool_forward_f32(y, am, x, &pd);
        else
            hsi_gap_forward_f32(y, x, n, c, s);
        double t1 = hsi_now();
        if (kind == 0)
            hsi_bn_backward_f32(dx, pc + 3 * c, pc + 7 * c, dy, x, pc + 5 * c, pc, pc + c, n, c, s,
                                1);
        else if (kind == 1)
            hsi_pool_backward_f32(dx, dy, am, &pd);
        else
            hsi_gap_backward_f32(dx, dy, n, c, s);
        double t2 = hsi_now();
        if (r && t1 - t0 < t->fwd) t->fwd = t1 - t0;
        if (r && t2 - t1 < t->bwd) t->bwd = t2 - t1;
    }
cleanup:
    hsi_aligned_free(x), hsi_aligned_free(y), hsi_aligned_free(dy), hsi_aligned_free(dx);
    hsi_aligned_free(pc), hsi_aligned_free(am);
    return st;
}

static int bench_layers(int argc, char **argv)
{
    const char *cmd = "bench layers";
    long long batch = 128, bands = 30, patch = 11, threads = 2, reps = 10;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (hsi_cli_opt(argc, argv, &i, "--batch", &v)) {
            if (!hsi_cli_parse_int(cmd, "--batch", v, 2, 1 << 16, &batch)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--bands", &v)) {
            if (!hsi_cli_parse_int(cmd, "--bands", v, 1, 4096, &bands)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--patch", &v)) {
            if (!hsi_cli_parse_int(cmd, "--patch", v, 2, 255, &patch)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--threads", &v)) {
            if (!hsi_cli_parse_int(cmd, "--threads", v, 1, 1024, &threads)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--reps", &v)) {
            if (!hsi_cli_parse_int(cmd, "--reps", v, 1, 100000, &reps)) return HSI_EXIT_USAGE;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else {
            return hsi_cli_usage_error(cmd, "unknown argument '%s'", argv[i]);
        }
    }
    {
        char tb[16]; /* the engine's threads; its BLAS calls run single-threaded */
        snprintf(tb, sizeof tb, "%lld", threads);
        setenv("HSI_THREADS", tb, 1);
    }
    int n = (int)batch, p = (int)patch, h = p / 2, r = (int)reps;
    bl_timing t[8] = {{"conv1", 0, 0}, {"bn1", 0, 0},  {"conv2", 0, 0}, {"bn2", 0, 0},
                      {"maxpool", 0, 0}, {"conv3", 0, 0}, {"bn3", 0, 0},  {"gap", 0, 0}};
    hsi_status st = HSI_OK;
    if ((st = bl_conv(&t[0], n, (int)bands, 64, p, 0, r)) ||
        (st = bl_other(&t[1], 0, n, 64, p, r)) || (st = bl_conv(&t[2], n, 64, 64, p, 1, r)) ||
        (st = bl_other(&t[3], 0, n, 64, p, r)) || (st = bl_other(&t[4], 1, n, 64, p, r)) ||
        (st = bl_conv(&t[5], n, 64, 128, h, 1, r)) || (st = bl_other(&t[6], 0, n, 128, h, r)) ||
        (st = bl_other(&t[7], 2, n, 128, h, r)))
        return hsi_cli_fail(cmd, st);
    double total = 0;
    if (json) printf("{\"batch\": %d, \"threads\": %lld, \"layers\": [", n, threads);
    for (int i = 0; i < 8; i++) {
        total += t[i].fwd + t[i].bwd;
        if (json)
            printf("%s{\"name\": \"%s\", \"fwd_ms\": %.4f, \"bwd_ms\": %.4f}", i ? ", " : "",
                   t[i].name, t[i].fwd * 1e3, t[i].bwd * 1e3);
        else
            printf("%-8s forward %8.3f ms  backward %8.3f ms\n", t[i].name, t[i].fwd * 1e3,
                   t[i].bwd * 1e3);
    }
    if (json)
        printf("], \"total_ms\": %.4f}\n", total * 1e3);
    else
        printf("total    %.3f ms per batch of %d (cnn2d layer kernels, %lld threads)\n",
               total * 1e3, n, threads);
    return HSI_EXIT_OK;
}

HSI_CLI_COMMAND(bench_layers,
                {"bench-layers", "(reached as 'hsi bench layers')",
                 "usage: hsi bench layers [--batch 128] [--bands 30] [--patch 11] [--threads 2]\n"
                 "                        [--reps 10] [--json]\n"
                 "\n"
                 "Times the layer kernels of cnn2d (conv 3x3 bands->64, BN, conv 64->64, BN,\n"
                 "max pool 2x2, conv 64->128, BN, global average pool): forward and\n"
                 "backward, best of --reps, on random float32 data. The first conv computes\n"
                 "no input gradient (as in training). bench/bench_layers.sh runs PyTorch on\n"
                 "the same layers and prints the ratios.\n",
                 bench_layers})

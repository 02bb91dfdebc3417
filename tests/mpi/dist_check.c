/* dist_check.c — checks of core/dist.h and pipeline/ddp.h run under
 * `mpirun -np N` (built with make MPI=1 as build-mpi/hsi_dist_check; the
 * dist suites of tests/test_dist.c start it with N = 1..4 and compare what
 * the runs print). Every rank checks; the exit status is the number of
 * failed checks over all ranks (0 = all passed). Not a CUnit suite: CUnit
 * would run once per rank.
 *
 *   hsi_dist_check            the checks below; prints "det-hash HEX" (the
 *                             deterministic step's parameters, to compare
 *                             between N) and "checks: K failed of M"
 *   hsi_dist_check kill R     rank R kills itself (SIGKILL) inside a step
 *   hsi_dist_check fail R     rank R fails like the CLI does: message, abort
 *   hsi_dist_check nccl       an NCCL allreduce of device memory = the host sum */
#define _GNU_SOURCE
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/dist.h"
#include "core/prng.h"
#include "models/nn.h"
#include "models/optim.h"
#include "models/tensor.h"
#include "pipeline/ddp.h"
#include "pipeline/loader.h"

static int n_checks, n_failed;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        n_checks++;                                                                                \
        if (!(cond)) {                                                                             \
            n_failed++;                                                                            \
            fprintf(stderr, "rank %d: FAILED %s:%d: ", hsi_dist_rank(), __FILE__, __LINE__);      \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

#define OK(expr)                                                                                   \
    do {                                                                                           \
        hsi_status st_ = (expr);                                                                   \
        CHECK(st_ == HSI_OK, "%s: %s", #expr, hsi_last_error());                                   \
        if (st_ != HSI_OK) hsi_dist_abort(1);                                                      \
    } while (0)

/* The model and data of the step checks: cnn2d on (5, 5, 5) patches, 3 classes. */
enum { BANDS = 5, PATCH = 5, CLASSES = 3 };

static void make_batch(float *x, int32_t *y, int64_t n, uint64_t seed)
{
    hsi_prng r;
    hsi_prng_init(&r, seed);
    for (int64_t i = 0; i < n * BANDS * PATCH * PATCH; i++) x[i] = (float)hsi_prng_normal(&r);
    for (int64_t i = 0; i < n; i++) y[i] = (int32_t)hsi_prng_below(&r, CLASSES);
}

typedef struct net {
    hsi_module *m;
    hsi_optim *o;
    hsi_graph *g;
} net;

static void net_new(net *k, hsi_optim_kind kind)
{
    OK(hsi_model_create(&k->m, "cnn2d", BANDS, PATCH, CLASSES, HSI_F32, 7));
    hsi_optim_config oc;
    hsi_optim_config_default(&oc, kind);
    oc.lr = 0.1;
    OK(hsi_optim_new(&k->o, &oc, k->m));
    OK(hsi_graph_new(&k->g));
    hsi_module_train(k->m, 1);
}

static void net_free(net *k)
{
    hsi_graph_free(k->g);
    hsi_optim_free(k->o);
    hsi_module_free(k->m);
}

/* One process's step over the whole global batch of B, in groups of
 * `group` samples (local batch norm of N ranks = groups of B / N), with
 * the data-parallel step's dropout keys: the reference. */
static void reference_step(net *k, const float *x, const int32_t *y, int64_t B, int64_t group,
                           uint64_t seed)
{
    const int64_t per = BANDS * PATCH * PATCH;
    hsi_optim_zero_grad(k->o);
    for (int64_t o = 0; o < B; o += group) {
        hsi_graph_reset(k->g);
        hsi_tensor *xt, *yt, *lg, *loss, *sc;
        int64_t xs[4] = {group, BANDS, PATCH, PATCH}, ys[1] = {group};
        OK(hsi_graph_tensor(&xt, k->g, HSI_F32, 4, xs, 0));
        OK(hsi_graph_tensor(&yt, k->g, HSI_I32, 1, ys, 0));
        memcpy(hsi_tensor_ptr(xt), x + o * per, (size_t)(group * per) * sizeof(float));
        memcpy(hsi_tensor_ptr(yt), y + o, (size_t)group * sizeof(int32_t));
        hsi_dropout_key_set(seed, o);
        hsi_ce_opts ce;
        hsi_ce_opts_default(&ce);
        OK(hsi_module_forward(&lg, k->m, k->g, xt));
        OK(hsi_cross_entropy(&loss, k->g, lg, yt, &ce));
        OK(hsi_scale(&sc, k->g, loss, (double)group / (double)B));
        OK(hsi_backward(sc, 0));
    }
    hsi_dropout_key_set(0, 0);
    OK(hsi_optim_step(k->o));
}

/* max |a - b| / max(|b|) over all parameters */
static double param_rel_diff(net *a, net *b)
{
    double num = 0, den = 1e-30;
    for (int p = 0; p < a->o->n; p++) {
        const float *u = hsi_tensor_ptr(a->o->params[p].t), *v = hsi_tensor_ptr(b->o->params[p].t);
        for (int64_t i = 0; i < hsi_tensor_count(a->o->params[p].t); i++) {
            double d = fabs((double)u[i] - v[i]);
            if (d > num) num = d;
            if (fabs(v[i]) > den) den = fabs(v[i]);
        }
    }
    return num / den;
}

static int params_equal(net *a, net *b)
{
    for (int p = 0; p < a->o->n; p++)
        if (memcmp(hsi_tensor_ptr(a->o->params[p].t), hsi_tensor_ptr(b->o->params[p].t),
                   (size_t)hsi_tensor_count(a->o->params[p].t) * 4))
            return 0;
    return 1;
}

/* N ranks x b against one process x N b (SGD: AdamW's first step is
 * sign-like and would hide the gradients). */
static void check_step(int bn_sync, double bucket_mb, int overlap, net *keep)
{
    const int N = hsi_dist_size(), me = hsi_dist_rank();
    const int64_t b = 4, B = b * N, per = BANDS * PATCH * PATCH;
    float *x = malloc((size_t)(B * per) * sizeof *x);
    int32_t *y = malloc((size_t)B * sizeof *y);
    make_batch(x, y, B, 42); /* the same global batch on every rank */
    net d, r;
    net_new(&d, HSI_OPT_SGD);
    net_new(&r, HSI_OPT_SGD);
    hsi_ddp_config dc;
    hsi_ddp_config_init(&dc);
    dc.bn_sync = bn_sync;
    dc.bucket_mb = bucket_mb;
    dc.overlap = overlap;
    dc.hash_every = 1;
    hsi_ddp *dd = NULL;
    OK(hsi_ddp_create(&dd, d.m, d.o, &dc));
    double ls = 0;
    int64_t hits = 0;
    int64_t xs[3] = {BANDS, PATCH, PATCH};
    OK(hsi_ddp_step(dd, d.g, x + me * b * per, y + me * b, b, 3, xs, me * b, B, 99, &ls, &hits));
    hsi_ddp_stats ds;
    hsi_ddp_get_stats(dd, &ds);
    hsi_ddp_free(dd); /* removes the batch-norm reducer before the reference */
    reference_step(&r, x, y, B, bn_sync ? B : b, 99);
    double rel = param_rel_diff(&d, &r);
    CHECK(rel <= 1e-6, "N=%d bn_sync=%d bucket %g MB overlap %d: parameters differ from one process "
                       "by %.3g (relative)", N, bn_sync, bucket_mb, overlap, rel);
    if (me == 0)
        printf("step bn=%s bucket=%gMB overlap=%d: %d buckets, rel diff %.3g, comm wait %.3f ms\n",
               bn_sync ? "sync" : "local", bucket_mb, overlap, ds.n_buckets, rel, 1e3 * ds.comm_wait);
    if (keep && keep->m) {
        CHECK(params_equal(&d, keep), "bucket %g MB overlap %d: parameters differ from the first run",
              bucket_mb, overlap);
        if (me == 0) printf("  equal to the 25 MB run: %s\n", params_equal(&d, keep) ? "bitwise" : "NO");
    }
    net_free(&r);
    if (keep && !keep->m) *keep = d;
    else net_free(&d);
    free(x);
    free(y);
}

/* The deterministic step: its parameters' hash (the same for any N). */
static void check_deterministic(void)
{
    const int N = hsi_dist_size(), me = hsi_dist_rank();
    const int64_t B = 24, b = B / N, per = BANDS * PATCH * PATCH;
    if (B % N != 0) {
        if (me == 0) printf("det-hash skipped (24 samples do not split into %d)\n", N);
        return;
    }
    float *x = malloc((size_t)(B * per) * sizeof *x);
    int32_t *y = malloc((size_t)B * sizeof *y);
    make_batch(x, y, B, 43);
    net d;
    net_new(&d, HSI_OPT_ADAMW);
    hsi_ddp_config dc;
    hsi_ddp_config_init(&dc);
    dc.deterministic = 1;
    dc.tile = 2;
    hsi_ddp *dd = NULL;
    OK(hsi_ddp_create(&dd, d.m, d.o, &dc));
    int64_t xs[3] = {BANDS, PATCH, PATCH};
    for (int step = 0; step < 2; step++) {
        double ls;
        int64_t hits;
        OK(hsi_ddp_step(dd, d.g, x + me * b * per, y + me * b, b, 3, xs, me * b, B, 7 + step, &ls,
                        &hits));
    }
    OK(hsi_ddp_check(dd));
    if (me == 0) printf("det-hash %016llx\n", (unsigned long long)hsi_ddp_param_hash(dd));
    hsi_ddp_free(dd);
    net_free(&d);
    free(x);
    free(y);
}

/* Sampler: every sample once per epoch (padding / drop_last), the union of
 * the ranks' batches = the one-process batch, reshuffled per epoch. Run on
 * every rank with every rank's view (no communication needed). */
static void check_sampler(void)
{
    const int N = hsi_dist_size();
    const int64_t n = 37, B = 4 * N;
    int64_t *perm = malloc((size_t)n * sizeof *perm), *one = malloc((size_t)B * sizeof *one);
    int64_t *loc = malloc((size_t)B * sizeof *loc), *seen = calloc((size_t)n, sizeof *seen);
    for (int drop = 0; drop < 2; drop++) {
        memset(seen, 0, (size_t)n * sizeof *seen);
        hsi_loader_epoch_order(perm, n, 5, 3, 1);
        int64_t nb = hsi_loader_dist_batches(n, B, N, drop), total = 0;
        for (int64_t j = 0; j < nb; j++) {
            int64_t n1, f1, g1;
            hsi_loader_dist_batch(perm, n, B, 0, 1, drop, j, one, &n1, &f1, &g1);
            for (int r = 0; r < N; r++) {
                int64_t nl, f, g;
                hsi_loader_dist_batch(perm, n, B, r, N, drop, j, loc, &nl, &f, &g);
                CHECK(nl * N == g && f == r * nl, "batch %lld rank %d: %lld of %lld at %lld",
                      (long long)j, r, (long long)nl, (long long)g, (long long)f);
                for (int64_t i = 0; i < nl; i++) {
                    seen[loc[i]]++;
                    if (f + i < n1) CHECK(loc[i] == one[f + i], "union differs from one process");
                }
                total += nl;
            }
        }
        for (int64_t i = 0; i < n; i++)
            CHECK(drop ? seen[i] <= 1 : seen[i] >= 1 && seen[i] <= 1 + (N - 1) / n + 1,
                  "sample %lld seen %lld times (drop_last %d)", (long long)i, (long long)seen[i], drop);
        CHECK(total == (drop ? n / B * B : (n + N - 1) / N * N), "epoch of %lld samples", (long long)total);
    }
    int64_t *p2 = malloc((size_t)n * sizeof *p2);
    hsi_loader_epoch_order(p2, n, 5, 4, 1);
    CHECK(memcmp(perm, p2, (size_t)n * sizeof *p2) != 0, "epochs 3 and 4 have the same order");
    free(p2), free(perm), free(one), free(loc), free(seen);
}

static void check_collectives(void)
{
    const int N = hsi_dist_size(), me = hsi_dist_rank();
    int64_t v[2] = {me, 1};
    OK(hsi_dist_allreduce(v, 2, HSI_I64, HSI_DIST_SUM));
    CHECK(v[0] == (int64_t)N * (N - 1) / 2 && v[1] == N, "allreduce sum %lld %lld", (long long)v[0],
          (long long)v[1]);
    double m = me;
    OK(hsi_dist_allreduce(&m, 1, HSI_F64, HSI_DIST_MAX));
    CHECK(m == N - 1, "allreduce max %g", m);
    char word[16] = "";
    if (me == 0) strcpy(word, "from rank 0");
    OK(hsi_dist_bcast(word, sizeof word, 0));
    CHECK(!strcmp(word, "from rank 0"), "bcast gave '%s'", word);
    OK(hsi_dist_barrier());
    /* the tree: parts of very different sizes, so the order shows in the bits */
    const int64_t per_rank = 3, count = 1000, total = per_rank * N;
    double *all = malloc((size_t)(total * count) * sizeof *all), *out = malloc((size_t)count * sizeof *out);
    hsi_prng r;
    hsi_prng_init(&r, 11);
    for (int64_t i = 0; i < total * count; i++)
        all[i] = hsi_prng_normal(&r) * pow(10.0, (double)hsi_prng_below(&r, 12) - 6);
    OK(hsi_dist_tree_sum_f64(out, all + me * per_rank * count, per_rank, count));
    hsi_dist_tree_local_f64(all, total, count);
    CHECK(!memcmp(out, all, (size_t)count * sizeof *out), "tree sum differs from the one-process tree");
    /* uneven parts: rank r holds r + 1 of them */
    int64_t mine = me + 1, first = (int64_t)me * (me + 1) / 2, tot2 = (int64_t)N * (N + 1) / 2;
    double *p2 = malloc((size_t)(tot2 * 4) * sizeof *p2), *o2 = malloc(4 * sizeof *o2);
    for (int64_t i = 0; i < tot2 * 4; i++) p2[i] = 1.0 / (double)(i + 1);
    OK(hsi_dist_tree_sum_f64(o2, p2 + first * 4, mine, 4));
    hsi_dist_tree_local_f64(p2, tot2, 4);
    CHECK(!memcmp(o2, p2, 4 * sizeof *o2), "tree sum of uneven parts differs");
    char msg[32];
    int len = snprintf(msg, sizeof msg, "rank%d;", me);
    char *cat = NULL;
    int64_t *sizes = NULL;
    OK(hsi_dist_gather_bytes(&cat, &sizes, msg, len, 0));
    if (me == 0) {
        int64_t off = 0;
        for (int k = 0; k < N; k++) {
            char want[32];
            int wl = snprintf(want, sizeof want, "rank%d;", k);
            CHECK(sizes[k] == wl && !memcmp(cat + off, want, (size_t)wl), "gather part %d", k);
            off += sizes[k];
        }
    }
    free(cat), free(sizes), free(all), free(out), free(p2), free(o2);
}

/* A rank's parameters changed behind the others' backs: the check fails on every rank. */
static void check_hash_mismatch(void)
{
    if (hsi_dist_size() < 2) return;
    net d;
    net_new(&d, HSI_OPT_SGD);
    hsi_ddp_config dc;
    hsi_ddp_config_init(&dc);
    hsi_ddp *dd = NULL;
    OK(hsi_ddp_create(&dd, d.m, d.o, &dc));
    OK(hsi_ddp_check(dd));
    if (hsi_dist_rank() == 1) ((float *)hsi_tensor_ptr(d.o->params[0].t))[0] += 1e-3f;
    hsi_status st = hsi_ddp_check(dd);
    CHECK(st == HSI_ERR_STATE && strstr(hsi_last_error(), "parameters differ"),
          "a changed parameter on rank 1 was not found (%s)", hsi_last_error());
    hsi_ddp_free(dd);
    net_free(&d);
}

/* kill / fail modes: rank `who` dies inside a step while the others wait
 * in its allreduce; mpirun must end the job (the suite times it). */
static int die_in_step(int who, int kill_it)
{
    net d;
    net_new(&d, HSI_OPT_SGD);
    hsi_ddp_config dc;
    hsi_ddp_config_init(&dc);
    hsi_ddp *dd = NULL;
    OK(hsi_ddp_create(&dd, d.m, d.o, &dc));
    const int64_t b = 4, per = BANDS * PATCH * PATCH;
    float x[4 * BANDS * PATCH * PATCH];
    int32_t y[4];
    make_batch(x, y, b, 1);
    int64_t xs[3] = {BANDS, PATCH, PATCH};
    for (int step = 0;; step++) {
        if (step == 3 && hsi_dist_rank() == who) {
            if (kill_it) raise(SIGKILL);
            fprintf(stderr, "hsi_dist_check [rank %d/%d]: failing on purpose in step %d\n",
                    hsi_dist_rank(), hsi_dist_size(), step);
            hsi_dist_abort(3);
        }
        double ls;
        int64_t hits;
        OK(hsi_ddp_step(dd, d.g, x, y, b, 3, xs, hsi_dist_rank() * b, b * hsi_dist_size(), 5, &ls, &hits));
    }
    (void)per;
}

/* NCCL: a communicator over the ranks, an allreduce of device memory
 * against the sum on the host. Without a device (or the plugin) it says
 * why and exits 0 when the reason is a missing device or plugin; other
 * failures exit 1. */
static int nccl_check(void)
{
    hsi_nccl *c = NULL;
    hsi_status st = hsi_nccl_open(&c);
    if (st == HSI_ERR_NO_CUDA || st == HSI_ERR_UNSUPPORTED) {
        if (hsi_dist_rank() == 0) printf("nccl: unavailable: %s\n", hsi_last_error());
        return 0;
    }
    if (st != HSI_OK) {
        fprintf(stderr, "rank %d: nccl: %s\n", hsi_dist_rank(), hsi_last_error());
        return 1;
    }
    const int64_t n = 1000;
    float h[1000], want[1000];
    for (int64_t i = 0; i < n; i++) h[i] = (float)(i % 17) * 0.25f + (float)hsi_dist_rank();
    for (int64_t i = 0; i < n; i++) {
        want[i] = 0;
        for (int r = 0; r < hsi_dist_size(); r++) want[i] += (float)(i % 17) * 0.25f + (float)r;
    }
    void *d = NULL;
    int bad = 0;
    if (hsi_nccl_dev_alloc(c, &d, sizeof h) != HSI_OK || hsi_nccl_copy(c, d, h, sizeof h, 0) != HSI_OK ||
        hsi_nccl_allreduce_sum_f32(c, d, n, NULL) != HSI_OK || hsi_nccl_sync(c, NULL) != HSI_OK ||
        hsi_nccl_copy(c, h, d, sizeof h, 1) != HSI_OK) {
        fprintf(stderr, "rank %d: nccl: %s\n", hsi_dist_rank(), hsi_last_error());
        bad = 1;
    }
    for (int64_t i = 0; !bad && i < n; i++) bad = h[i] != want[i]; /* small integers x 0.25: exact */
    if (hsi_dist_rank() == 0)
        printf("nccl %d: %d rank%s, allreduce of device memory %s the host sum\n", hsi_nccl_version(c),
               hsi_dist_size(), hsi_dist_size() == 1 ? "" : "s", bad ? "DIFFERS from" : "equals");
    hsi_nccl_dev_free(c, d);
    hsi_nccl_close(c);
    return bad;
}

int main(int argc, char **argv)
{
    if (hsi_dist_init(&argc, &argv) != HSI_OK) {
        fprintf(stderr, "hsi_dist_check: %s\n", hsi_last_error());
        return 1;
    }
    const int N = hsi_dist_size(), me = hsi_dist_rank();
    if (argc == 2 && !strcmp(argv[1], "nccl")) {
        int bad = nccl_check();
        hsi_dist_finalize();
        return bad;
    }
    if (argc == 3 && (!strcmp(argv[1], "kill") || !strcmp(argv[1], "fail")))
        return die_in_step(atoi(argv[2]), !strcmp(argv[1], "kill"));
    if (me == 0)
        printf("hsi_dist_check: %d rank%s (%s), %d on this node, %d threads each\n", N, N == 1 ? "" : "s",
               hsi_dist_built() ? "MPI" : "no MPI", hsi_dist_local_size(), hsi_dist_threads_per_rank());
    check_collectives();
    check_sampler();
    check_step(0, 25, 1, NULL);
    check_step(1, 25, 1, NULL);
    net keep = {0};
    check_step(0, 25, 1, &keep);
    check_step(0, 0.01, 1, &keep); /* many small buckets */
    check_step(0, 0.1, 0, &keep);  /* after backward */
    if (keep.m) net_free(&keep);
    check_deterministic();
    check_hash_mismatch();
    int64_t f[2] = {n_failed, n_checks};
    if (hsi_dist_allreduce(f, 2, HSI_I64, HSI_DIST_SUM) != HSI_OK) hsi_dist_abort(1);
    if (me == 0) printf("checks: %lld failed of %lld\n", (long long)f[0], (long long)f[1]);
    fflush(stdout);
    hsi_dist_finalize();
    return f[0] > 100 ? 100 : (int)f[0];
}

/* test_dist.c — more than one process (core/dist.h, pipeline/ddp.h, the
 * distributed sampler, cli/ under mpirun).
 *
 * dist (every build): the one-rank implementation, the fixed-order tree,
 * the sampler through the real loader (every sample once per epoch,
 * padding / drop_last, reshuffled per epoch, the union of the ranks'
 * batches = the one-process batch), dropout masks keyed by sample,
 * synchronised batch norm against one batch (two threads as two ranks),
 * the backward hook, and `hsi train --deterministic` giving the same bits
 * for 1 and 2 threads.
 *
 * dist_mpi (built with MPI=1, mpirun present; `make test-mpi`): the MPI
 * checks program under mpirun -np 1..4 (steps equal to one process, bucket
 * sizes, the tree, the deterministic hash equal for every N), a rank killed
 * or failing mid-step ends the job non-zero before the timeout, a list of
 * cubes processed exactly once over 3 ranks, `hsi train --deterministic`
 * byte-identical for np 1..4, resume at np 2 equal to an uninterrupted
 * run, sync batch norm at np 2 against one process. */
#define _GNU_SOURCE
#include <cJSON.h>
#include <math.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dist.h"
#include "models/layers.h"
#include "models/tensor.h"
#include "pipeline/loader.h"
#include "test.h"

static char out[1 << 20];

/* ------------------------------------------------------------ one rank */

static void test_one_rank(void)
{
    HSI_CHECK_OK(hsi_dist_init(NULL, NULL));
    CU_ASSERT_EQUAL(hsi_dist_size(), 1); /* no launcher here */
    CU_ASSERT_EQUAL(hsi_dist_rank(), 0);
    CU_ASSERT(hsi_dist_threads_per_rank() >= 1);
    double v[2] = {1.5, -2};
    HSI_CHECK_OK(hsi_dist_allreduce(v, 2, HSI_F64, HSI_DIST_SUM));
    CU_ASSERT(v[0] == 1.5 && v[1] == -2);
    HSI_CHECK_FAILS(hsi_dist_allreduce(v, 2, HSI_U8, HSI_DIST_SUM), HSI_ERR_UNSUPPORTED, "dtype");
    HSI_CHECK_FAILS(hsi_dist_bcast(v, sizeof v, 1), HSI_ERR_ARG, "root 1 is not a rank");
    HSI_CHECK_OK(hsi_dist_barrier());
    char *all = NULL;
    int64_t *sizes = NULL;
    HSI_CHECK_OK(hsi_dist_gather_bytes(&all, &sizes, "abc", 3, 0));
    CU_ASSERT(sizes[0] == 3 && !memcmp(all, "abc", 3));
    free(all);
    free(sizes);
}

/* The tree's order is the documented one: for 5 parts ((p0 + p1) + (p2 +
 * p3)) + p4; a sequential sum of these values gives other bits. */
static void test_tree_order(void)
{
    double parts[5] = {1e16, 1, -1e16, 1, 3};
    double want = ((parts[0] + parts[1]) + (parts[2] + parts[3])) + parts[4];
    double seq = (((parts[0] + parts[1]) + parts[2]) + parts[3]) + parts[4];
    CU_ASSERT(want != seq); /* the test can tell the orders apart */
    double got;
    HSI_CHECK_OK(hsi_dist_tree_sum_f64(&got, parts, 5, 1));
    CU_ASSERT_EQUAL(got, want);
    /* several columns at once, floats summed in double */
    float fp[3 * 2] = {1, 2, 3, 4, 5, 6}, fo[2];
    HSI_CHECK_OK(hsi_dist_tree_sum_f32(fo, fp, 3, 2));
    CU_ASSERT(fo[0] == 9 && fo[1] == 12);
    double z = 7;
    HSI_CHECK_OK(hsi_dist_tree_sum_f64(&z, parts, 0, 1)); /* no parts: zero */
    CU_ASSERT_EQUAL(z, 0);
}

/* ------------------------------------------------------------ sampler */

typedef struct rec {
    int64_t n;
} rec;

static hsi_status nop_fill(void *ctx, const hsi_batch *b)
{
    (void)ctx;
    int32_t *y = b->y;
    for (int64_t i = 0; i < b->n; i++) y[i] = (int32_t)b->samples[i];
    return HSI_OK;
}

/* samples[epoch][batch][position in the global batch] of rank r of N */
static void run_loader(int64_t n, int64_t B, int N, int r, int drop, int64_t epochs, int64_t *got,
                       int64_t *nb_out)
{
    hsi_loader_params p;
    hsi_loader_params_init(&p);
    p.n_samples = n;
    p.batch_size = B;
    p.x_bytes = 4;
    p.y_bytes = 4;
    p.n_workers = 1;
    p.drop_last = drop;
    p.seed = 9;
    p.dist_rank = r;
    p.dist_size = N;
    p.fill = nop_fill;
    hsi_loader *L = NULL;
    HSI_CHECK_OK(hsi_loader_create(&L, &p));
    int64_t nb = hsi_loader_batches_per_epoch(L);
    *nb_out = nb;
    for (int64_t e = 0; e < epochs; e++)
        for (int64_t j = 0;; j++) {
            hsi_batch *b = NULL;
            HSI_CHECK_OK(hsi_loader_next(L, &b));
            if (!b) break;
            CU_ASSERT_EQUAL(b->index, j);
            CU_ASSERT_EQUAL(b->n * N, b->n_global);
            CU_ASSERT_EQUAL(b->first, r * b->n);
            for (int64_t i = 0; i < b->n; i++)
                got[(e * nb + j) * B + b->first + i] = ((int32_t *)b->y)[i];
        }
    hsi_loader_destroy(L);
}

static void test_sampler(void)
{
    const int64_t n = 37, epochs = 2;
    for (int N = 1; N <= 4; N++)
        for (int drop = 0; drop < 2; drop++) {
            const int64_t B = 4 * N;
            int64_t nb = 0, nb1 = 0;
            int64_t *all = malloc((size_t)(epochs * 64 * B) * sizeof *all);
            int64_t *one = malloc((size_t)(epochs * 64 * B) * sizeof *one);
            for (int64_t i = 0; i < epochs * 64 * B; i++) all[i] = one[i] = -1;
            for (int r = 0; r < N; r++) run_loader(n, B, N, r, drop, epochs, all, &nb);
            run_loader(n, B, 1, 0, drop, epochs, one, &nb1);
            CU_ASSERT_EQUAL(nb, hsi_loader_dist_batches(n, B, N, drop));
            CU_ASSERT(nb >= nb1);
            for (int64_t e = 0; e < epochs; e++) {
                int64_t seen[37] = {0}, total = 0;
                for (int64_t j = 0; j < nb; j++)
                    for (int64_t i = 0; i < B; i++) {
                        int64_t s = all[(e * nb + j) * B + i];
                        if (s < 0) continue;
                        CU_ASSERT_FATAL(s < n);
                        seen[s]++;
                        total++;
                        /* the union of the ranks' batch j is the one-process batch j */
                        int64_t o = j < nb1 ? one[(e * nb1 + j) * B + i] : -1;
                        if (o >= 0) CU_ASSERT_EQUAL(s, o);
                    }
                if (drop) {
                    CU_ASSERT_EQUAL(total, n / B * B);
                    for (int64_t s = 0; s < n; s++) CU_ASSERT(seen[s] <= 1);
                } else { /* padded to a multiple of N by repeating the start */
                    CU_ASSERT_EQUAL(total, (n + N - 1) / N * N);
                    int64_t twice = 0;
                    for (int64_t s = 0; s < n; s++) {
                        CU_ASSERT(seen[s] == 1 || seen[s] == 2);
                        twice += seen[s] == 2;
                    }
                    CU_ASSERT_EQUAL(twice, total - n);
                }
            }
            /* reshuffled per epoch */
            CU_ASSERT(memcmp(all, all + nb * B, (size_t)B * sizeof *all) != 0);
            free(all);
            free(one);
        }
    /* a batch that does not split into equal slices is refused */
    hsi_loader_params p;
    hsi_loader_params_init(&p);
    p.n_samples = 10, p.batch_size = 5, p.x_bytes = 4, p.fill = nop_fill, p.dist_size = 2;
    hsi_loader *L = NULL;
    HSI_CHECK_FAILS(hsi_loader_create(&L, &p), HSI_ERR_ARG, "equal");
}

/* ------------------------------------------------- dropout keyed by sample */

static void test_dropout_keyed(void)
{
    hsi_graph *g = NULL;
    HSI_CHECK_OK(hsi_graph_new(&g));
    int64_t sh[2] = {4, 50}, hs[2] = {2, 50};
    hsi_tensor *x = NULL, *a = NULL, *b1 = NULL, *b2 = NULL, *h1 = NULL, *h2 = NULL;
    HSI_CHECK_OK(hsi_graph_tensor(&x, g, HSI_F32, 2, sh, 0));
    for (int i = 0; i < 200; i++) ((float *)hsi_tensor_ptr(x))[i] = 1;
    hsi_dropout_key_set(77, 0);
    HSI_CHECK_OK(hsi_dropout(&a, g, x, 0.5, 1, NULL));
    /* the same rows as two halves at rows 0 and 2 */
    HSI_CHECK_OK(hsi_graph_tensor(&h1, g, HSI_F32, 2, hs, 0));
    HSI_CHECK_OK(hsi_graph_tensor(&h2, g, HSI_F32, 2, hs, 0));
    for (int i = 0; i < 100; i++) ((float *)hsi_tensor_ptr(h1))[i] = ((float *)hsi_tensor_ptr(h2))[i] = 1;
    hsi_dropout_key_set(77, 0);
    HSI_CHECK_OK(hsi_dropout(&b1, g, h1, 0.5, 1, NULL));
    hsi_dropout_key_set(77, 2);
    HSI_CHECK_OK(hsi_dropout(&b2, g, h2, 0.5, 1, NULL));
    CU_ASSERT(!memcmp(hsi_tensor_ptr(a), hsi_tensor_ptr(b1), 100 * sizeof(float)));
    CU_ASSERT(!memcmp((float *)hsi_tensor_ptr(a) + 100, hsi_tensor_ptr(b2), 100 * sizeof(float)));
    int zeros = 0;
    for (int i = 0; i < 200; i++) zeros += ((float *)hsi_tensor_ptr(a))[i] == 0;
    CU_ASSERT(zeros > 60 && zeros < 140);
    /* another key, other masks */
    hsi_dropout_key_set(78, 0);
    HSI_CHECK_OK(hsi_dropout(&b1, g, x, 0.5, 1, NULL));
    CU_ASSERT(memcmp(hsi_tensor_ptr(a), hsi_tensor_ptr(b1), 200 * sizeof(float)) != 0);
    hsi_dropout_key_set(0, 0);
    hsi_graph_free(g);
}

/* ------------------------------------- synchronised batch norm, 2 threads */

/* A two-rank "allreduce" between two threads: each adds its vector into a
 * shared sum, waits for the other, reads the sum. */
typedef struct pair_sum {
    pthread_barrier_t bar;
    pthread_mutex_t mu;
    double sum[512];
} pair_sum;

static hsi_status pair_reduce(void *ctx, double *v, int64_t n)
{
    pair_sum *p = ctx;
    pthread_mutex_lock(&p->mu);
    for (int64_t i = 0; i < n; i++) p->sum[i] += v[i];
    pthread_mutex_unlock(&p->mu);
    pthread_barrier_wait(&p->bar);
    for (int64_t i = 0; i < n; i++) v[i] = p->sum[i];
    if (pthread_barrier_wait(&p->bar) == PTHREAD_BARRIER_SERIAL_THREAD)
        memset(p->sum, 0, sizeof p->sum);
    pthread_barrier_wait(&p->bar);
    return HSI_OK;
}

enum { BN_N = 6, BN_C = 3, BN_S = 10 };
typedef struct bn_half {
    pair_sum *ps;
    int first, n; /* samples [first, first + n) */
    const float *x, *dy, *gamma, *beta;
    float y[BN_N * BN_C * BN_S], dx[BN_N * BN_C * BN_S], dg[BN_C], db[BN_C], rm[BN_C], rv[BN_C];
    hsi_status st;
} bn_half;

static void *bn_half_main(void *arg)
{
    bn_half *h = arg;
    float mean[BN_C], invstd[BN_C];
    const int64_t o = (int64_t)h->first * BN_C * BN_S;
    for (int c = 0; c < BN_C; c++) h->rm[c] = 0, h->rv[c] = 1, h->dg[c] = h->db[c] = 0;
    h->st = hsi_bn_sync_forward_f32(h->y, mean, invstd, h->rm, h->rv, h->x + o, h->gamma, h->beta,
                                    h->n, BN_C, BN_S, 1e-5f, 0.1f, 1, pair_reduce, h->ps);
    if (h->st == HSI_OK)
        h->st = hsi_bn_sync_backward_f32(h->dx, h->dg, h->db, h->dy + o, h->x + o, h->y, h->gamma,
                                         mean, invstd, h->n, BN_C, BN_S, 0, pair_reduce, h->ps);
    return NULL;
}

static void test_bn_sync(void)
{
    float x[BN_N * BN_C * BN_S], dy[BN_N * BN_C * BN_S], gamma[BN_C] = {1.5f, 0.5f, -1},
                                                         beta[BN_C] = {0.1f, 0, -0.3f};
    for (int i = 0; i < BN_N * BN_C * BN_S; i++) {
        x[i] = (float)sin(i * 0.7) * 3 + (float)(i % 7);
        dy[i] = (float)cos(i * 1.3);
    }
    /* one batch of 6 (batch norm + ReLU, as cnn2d has) */
    float y[BN_N * BN_C * BN_S], dx[BN_N * BN_C * BN_S], sm[BN_C], si[BN_C], rm[BN_C] = {0, 0, 0},
                                                       rv[BN_C] = {1, 1, 1}, dg[BN_C] = {0}, db[BN_C] = {0};
    hsi_bn_relu_forward_f32(y, sm, si, rm, rv, x, gamma, beta, BN_N, BN_C, BN_S, 1e-5f, 0.1f, 1);
    hsi_bn_relu_backward_f32(dx, dg, db, dy, x, y, gamma, sm, si, BN_N, BN_C, BN_S, 1, 0);
    /* two "ranks" of 2 and 4 samples */
    pair_sum ps;
    memset(&ps, 0, sizeof ps);
    pthread_barrier_init(&ps.bar, NULL, 2);
    pthread_mutex_init(&ps.mu, NULL);
    bn_half h[2] = {{.ps = &ps, .first = 0, .n = 2, .x = x, .dy = dy, .gamma = gamma, .beta = beta},
                    {.ps = &ps, .first = 2, .n = 4, .x = x, .dy = dy, .gamma = gamma, .beta = beta}};
    pthread_t th[2];
    for (int k = 0; k < 2; k++) pthread_create(&th[k], NULL, bn_half_main, &h[k]);
    for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
    HSI_CHECK_OK(h[0].st);
    HSI_CHECK_OK(h[1].st);
    double ey = 0, edx = 0, eg = 0;
    for (int k = 0; k < 2; k++) {
        int64_t o = (int64_t)h[k].first * BN_C * BN_S;
        for (int64_t i = 0; i < (int64_t)h[k].n * BN_C * BN_S; i++) {
            ey = fmax(ey, fabs(h[k].y[i] - y[o + i]));
            edx = fmax(edx, fabs(h[k].dx[i] - dx[o + i]));
        }
        for (int c = 0; c < BN_C; c++) { /* both ranks: the global running statistics */
            CU_ASSERT(fabs(h[k].rm[c] - rm[c]) < 1e-6 && fabs(h[k].rv[c] - rv[c]) < 1e-5);
        }
    }
    for (int c = 0; c < BN_C; c++) /* parameter gradients: the ranks' sums add up to one batch's */
        eg = fmax(eg, fabs(h[0].dg[c] + h[1].dg[c] - dg[c]) + fabs(h[0].db[c] + h[1].db[c] - db[c]));
    CU_ASSERT(ey < 1e-5);
    CU_ASSERT(edx < 1e-5);
    CU_ASSERT(eg < 1e-4);
    if (ey >= 1e-5 || edx >= 1e-5 || eg >= 1e-4)
        fprintf(stderr, "\n  sync batch norm vs one batch: y %g, dx %g, dgamma+dbeta %g\n", ey, edx, eg);
    /* a local batch norm of the halves is not the same (the test can fail) */
    float yl[BN_N * BN_C * BN_S];
    hsi_bn_relu_forward_f32(yl, sm, si, NULL, NULL, x, gamma, beta, 2, BN_C, BN_S, 1e-5f, 0.1f, 1);
    double el = 0;
    for (int i = 0; i < 2 * BN_C * BN_S; i++) el = fmax(el, fabs(yl[i] - y[i]));
    CU_ASSERT(el > 1e-3);
    pthread_barrier_destroy(&ps.bar);
    pthread_mutex_destroy(&ps.mu);
}

/* ------------------------------------------------------------ the hook */

static int hook_calls;
static hsi_status count_hook(void *ctx, hsi_node *n)
{
    (void)ctx;
    (void)n;
    hook_calls++;
    return HSI_OK;
}

static void test_backward_hook(void)
{
    hsi_graph *g = NULL;
    HSI_CHECK_OK(hsi_graph_new(&g));
    int64_t sh[1] = {3};
    hsi_tensor *w = NULL, *y = NULL, *s = NULL, *l = NULL;
    HSI_CHECK_OK(hsi_tensor_new(&w, HSI_F32, 1, sh, 1));
    HSI_CHECK_OK(hsi_relu(&y, g, w));   /* node 1 */
    HSI_CHECK_OK(hsi_scale(&s, g, y, 2)); /* node 2 */
    HSI_CHECK_OK(hsi_sum(&l, g, s));    /* node 3 */
    hook_calls = 0;
    hsi_backward_set_hook(count_hook, NULL);
    HSI_CHECK_OK(hsi_backward(l, 0));
    hsi_backward_set_hook(NULL, NULL);
    CU_ASSERT_EQUAL(hook_calls, 3);
    hsi_tensor_free(w);
    hsi_graph_free(g);
}

/* ------------------------------------------- deterministic across threads */

#define SCENE "data_samples/scene.hdr data_samples/scene_gt.hdr"
#define TRAIN_OPTS " --epochs 2 --train 0.04 --seed 5 --quiet --batch 24 --tile 2"

static void test_train_deterministic_threads(void)
{
    const char *a = hsi_test_tmp("det_t1"), *b = hsi_test_tmp("det_t2"), *c = hsi_test_tmp("det_plain");
    char pa[4096], pb[4096], pc[4096];
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, "HSI_THREADS=1 " HSI_BIN " train " SCENE
                                       " --out %s --deterministic" TRAIN_OPTS, a), 0);
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, "HSI_THREADS=2 " HSI_BIN " train " SCENE
                                       " --out %s --deterministic" TRAIN_OPTS, b), 0);
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, "HSI_THREADS=2 " HSI_BIN " train " SCENE
                                       " --out %s --ddp" TRAIN_OPTS, c), 0);
    snprintf(pa, sizeof pa, "%s/model.safetensors", a);
    snprintf(pb, sizeof pb, "%s/model.safetensors", b);
    snprintf(pc, sizeof pc, "%s/model.safetensors", c);
    CU_ASSERT(hsi_test_same_file(pa, pb));
    CU_ASSERT(!hsi_test_same_file(pa, pc)); /* another mode, other bits: the comparison can fail */
    /* the deterministic mode refuses sync batch norm and uneven tiles */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE
                                 " --out %s --deterministic --bn sync" TRAIN_OPTS,
                                 hsi_test_tmp("det_bad")), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--bn local with --deterministic"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE
                                 " --out %s --deterministic --epochs 1 --train 0.04 --quiet --batch 10 --tile 4",
                                 hsi_test_tmp("det_bad2")), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "tiles of 4"));
}

HSI_SUITE(dist, 0, {"one rank without MPI", test_one_rank}, {"tree sum order", test_tree_order},
          {"sampler: once per epoch, padding, drop_last, union = global batch", test_sampler},
          {"dropout masks keyed by sample", test_dropout_keyed},
          {"sync batch norm = one batch (two threads as ranks)", test_bn_sync},
          {"backward hook", test_backward_hook},
          {"train --deterministic: same bits for 1 and 2 threads", test_train_deterministic_threads})

/* -------------------------------------------------------------- MPI */

#define MPIRUN                                                                                     \
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none " \
    "timeout %d mpirun --oversubscribe -np %d "

/* build-x/hsi_dist_check beside build-x/hsi */
static const char *check_bin(void)
{
    static char p[4096];
    snprintf(p, sizeof p, "%s", HSI_BIN);
    char *s = strrchr(p, '/');
    snprintf(s ? s + 1 : p, sizeof p - (size_t)(s ? s + 1 - p : 0), "hsi_dist_check");
    return p;
}

static void test_mpi_checks(void)
{
    char hash[4][64] = {{0}};
    for (int n = 1; n <= 4; n++) {
        int rc = hsi_test_run(out, sizeof out, MPIRUN "%s", 240, n, check_bin());
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "checks: 0 failed"));
        const char *h = strstr(out, "det-hash ");
        if (h) sscanf(h + 9, "%63s", hash[n - 1]);
        if (rc != 0 || !strstr(out, "checks: 0 failed")) fprintf(stderr, "\n  np %d:\n%s\n", n, out);
    }
    for (int n = 2; n <= 4; n++) { /* the deterministic step: the same bits for any N */
        CU_ASSERT(hash[0][0] && !strcmp(hash[0], hash[n - 1]));
        if (strcmp(hash[0], hash[n - 1])) fprintf(stderr, "\n  det-hash np 1 %s, np %d %s\n", hash[0], n, hash[n - 1]);
    }
}

/* A rank dying inside a step (SIGKILL, or a failure that aborts like the
 * CLI) ends every rank, non-zero, well before the timeout. */
static void test_mpi_rank_dies(void)
{
    for (int kill = 0; kill < 2; kill++) {
        double t0 = hsi_now();
        int rc = hsi_test_run(out, sizeof out, MPIRUN "%s %s 1", 60, 3, check_bin(), kill ? "kill" : "fail");
        double dt = hsi_now() - t0;
        CU_ASSERT(rc != 0 && rc != 124); /* 124: timeout killed a hung job */
        CU_ASSERT(dt < 50);
        if (!kill) CU_ASSERT_PTR_NOT_NULL(strstr(out, "[rank 1/3]: failing on purpose"));
    }
    /* the CLI: rank 1 of `hsi train` killed mid-training */
    const char *d = hsi_test_tmp("mpi_killed");
    double t0 = hsi_now();
    int rc = hsi_test_run(out, sizeof out, MPIRUN "sh -c 'if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then "
                          "(sleep 2; kill -9 $$) & fi; exec %s train " SCENE " --out %s --epochs 200 "
                          "--train 0.04 --quiet'", 120, 2, HSI_BIN, d);
    CU_ASSERT(rc != 0 && rc != 124);
    CU_ASSERT(hsi_now() - t0 < 100);
    /* and rank 1 failing (a bad option only there): its message, every rank ends */
    rc = hsi_test_run(out, sizeof out, MPIRUN "sh -c 'x=; [ \"$OMPI_COMM_WORLD_RANK\" = 1 ] && x=--no-such; "
                      "exec %s train " SCENE " --out %s --epochs 200 --train 0.04 --quiet $x'", 120, 2,
                      HSI_BIN, hsi_test_tmp("mpi_failed"));
    CU_ASSERT(rc != 0 && rc != 124);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "unknown option '--no-such'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "rank 1 of 2 failed"));
}

/* 5 cubes of different sizes over 3 ranks: every cube once, in input order. */
static void test_mpi_batch_once(void)
{
    const char *d = hsi_test_tmp("mpi_cubes"), *o = hsi_test_tmp("mpi_cubes_out"), *l = hsi_test_tmp("mpi_list.txt");
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out,
                                       "mkdir -p %s && for i in 1 2 3 4 5; do cp data_samples/scene.hdr %s/c$i.hdr; "
                                       "cp data_samples/scene.img %s/c$i.img; done && "
                                       "cp data_samples/scene_gt.hdr data_samples/scene_gt %s/ && "
                                       "ls %s/*.hdr > %s", d, d, d, d, d, l), 0);
    int rc = hsi_test_run(out, sizeof out, "{ " MPIRUN "%s info --json @%s 2>/dev/null; }", 120, 3, HSI_BIN, l);
    CU_ASSERT_EQUAL(rc, 0);
    cJSON *j = cJSON_Parse(out);
    CU_ASSERT_FATAL(cJSON_IsArray(j));
    CU_ASSERT_EQUAL(cJSON_GetArraySize(j), 6);
    cJSON_Delete(j);
    rc = hsi_test_run(out, sizeof out, MPIRUN "%s convert @%s --out-dir %s --dtype float32", 120, 3, HSI_BIN, l, o);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "6 cubes: 6 done, 0 failed, 0 skipped (3 ranks)"));
    const char *names[6] = {"c1", "c2", "c3", "c4", "c5", "scene_gt"};
    for (int i = 0; i < 6; i++) {
        char line[256], p[4096];
        snprintf(line, sizeof line, "%s.hdr -> %s/%s.hdr: done", names[i], o, names[i]);
        const char *first = strstr(out, line);
        CU_ASSERT_PTR_NOT_NULL(first); /* reported once, written once */
        CU_ASSERT(first && !strstr(first + 1, line));
        snprintf(p, sizeof p, "%s/%s", o, names[i]);
        CU_ASSERT(access(p, F_OK) == 0);
    }
    /* a rerun has nothing left to do */
    rc = hsi_test_run(out, sizeof out, MPIRUN "%s convert @%s --out-dir %s --dtype float32", 120, 2, HSI_BIN, l, o);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "0 done, 0 failed, 6 skipped"));
    /* a failing cube: every rank exits non-zero, the summary names it */
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, "printf x > %s/c3.img", d), 0);
    rc = hsi_test_run(out, sizeof out, MPIRUN "%s convert @%s --out-dir %s --dtype float32 --overwrite "
                      "--continue-on-error", 120, 3, HSI_BIN, l, o);
    CU_ASSERT_EQUAL(rc, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "5 done, 1 failed"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "failed: ") && strstr(out, "c3.hdr"));
}

static int same_model(const char *a, const char *b)
{
    return hsi_test_same_in(a, b, "model.safetensors");
}

static void test_mpi_train_deterministic(void)
{
    const char *dir[4];
    char names[4][16];
    for (int n = 1; n <= 4; n++) {
        snprintf(names[n - 1], sizeof names[n - 1], "mpi_det%d", n);
        dir[n - 1] = strdup(hsi_test_tmp(names[n - 1]));
        int rc = hsi_test_run(out, sizeof out, MPIRUN "%s train " SCENE " --out %s --deterministic" TRAIN_OPTS,
                              300, n, HSI_BIN, dir[n - 1]);
        CU_ASSERT_EQUAL(rc, 0);
        if (rc) fprintf(stderr, "\n  np %d:\n%s\n", n, out);
    }
    for (int n = 2; n <= 4; n++) {
        CU_ASSERT(same_model(dir[0], dir[n - 1]));
        /* the scene map, its tiles classified by the ranks */
        CU_ASSERT(hsi_test_same_in(dir[0], dir[n - 1], "map"));
        CU_ASSERT(hsi_test_same_in(dir[0], dir[n - 1], "map.hdr"));
    }
    /* resume at np 2 = the uninterrupted run: 1 epoch, then 2 */
    const char *r = hsi_test_tmp("mpi_det_resume");
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, MPIRUN "%s train " SCENE " --out %s --deterministic --epochs 1 "
                                 "--train 0.04 --seed 5 --quiet --batch 24 --tile 2", 300, 2, HSI_BIN, r), 0);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, MPIRUN "%s train " SCENE " --out %s --deterministic --resume"
                                 TRAIN_OPTS, 300, 2, HSI_BIN, r), 0);
    CU_ASSERT(same_model(dir[1], r));
    /* and a resume on another N (3) of the np 2 run's first epoch */
    const char *r3 = hsi_test_tmp("mpi_det_resume3");
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, MPIRUN "%s train " SCENE " --out %s --deterministic --epochs 1 "
                                 "--train 0.04 --seed 5 --quiet --batch 24 --tile 2", 300, 2, HSI_BIN, r3), 0);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, MPIRUN "%s train " SCENE " --out %s --deterministic --resume"
                                 TRAIN_OPTS, 300, 3, HSI_BIN, r3), 0);
    CU_ASSERT(same_model(dir[1], r3));
    for (int n = 0; n < 4; n++) free((void *)dir[n]);
}

/* history.csv's val_oa and val_loss columns (epochs rows); 0 if unread */
static int val_columns(const char *dir, double *oa, double *loss, int epochs)
{
    char p[4096], *t = NULL;
    size_t n = 0;
    snprintf(p, sizeof p, "%s/history.csv", dir);
    if (hsi_read_file(p, &t, &n) != HSI_OK) return 0;
    const char *l = t;
    int got = 0;
    for (int e = 0; e < epochs && (l = strchr(l, '\n')) && l[1]; e++, l++)
        got += sscanf(l + 1, "%*d,%*f,%*f,%lf,%lf", &oa[e], &loss[e]) == 2;
    free(t);
    return got == epochs;
}

/* Validation split between the ranks (each its share of the pixels, the
 * predictions exchanged): val OA per epoch equal to one process, the mean
 * loss to rounding, so the same best epoch and model. Odd pixel counts:
 * the shares are unequal at np 3. The best epoch is not the last (seed
 * and lr chosen so): the scene map, whose tiles the ranks share, must be
 * made with rank 0's best weights on every rank. */
static void test_mpi_validation_split(void)
{
    enum { E = 4 };
    double oa[3][E], loss[3][E];
    const char *dir[3];
    for (int n = 1; n <= 3; n++) {
        char name[16];
        snprintf(name, sizeof name, "mpi_val%d", n);
        dir[n - 1] = strdup(hsi_test_tmp(name));
        int rc = hsi_test_run(out, sizeof out, MPIRUN "%s train " SCENE " --out %s --deterministic --val 0.3 "
                              "--epochs 4 --lr 0.02 --train 0.04 --seed 3 --quiet --batch 24 --tile 2",
                              300, n, HSI_BIN, dir[n - 1]);
        CU_ASSERT_EQUAL(rc, 0);
        if (rc) fprintf(stderr, "\n  np %d:\n%s\n", n, out);
        CU_ASSERT_FATAL(val_columns(dir[n - 1], oa[n - 1], loss[n - 1], E));
    }
    int best = 0;
    for (int e = 1; e < E; e++)
        if (oa[0][e] >= oa[0][best]) best = e;
    CU_ASSERT(best < E - 1); /* the premise: the kept weights are not the last ones */
    for (int n = 2; n <= 3; n++) {
        for (int e = 0; e < E; e++) {
            CU_ASSERT_EQUAL(oa[n - 1][e], oa[0][e]);
            CU_ASSERT_DOUBLE_EQUAL(loss[n - 1][e], loss[0][e], 1e-9 * fabs(loss[0][e]) + 1e-12);
        }
        CU_ASSERT(same_model(dir[0], dir[n - 1]));
        CU_ASSERT(hsi_test_same_in(dir[0], dir[n - 1], "map"));
    }
    for (int n = 0; n < 3; n++) free((void *)dir[n]);
}

/* the first epoch's loss (history.csv) of a run */
static double first_loss(const char *dir)
{
    char p[4096], *t = NULL;
    size_t n = 0;
    snprintf(p, sizeof p, "%s/history.csv", dir);
    if (hsi_read_file(p, &t, &n) != HSI_OK) return NAN;
    const char *l = strchr(t, '\n');
    double v = NAN;
    if (l && sscanf(l + 1, "%*d,%lf", &v) != 1) v = NAN;
    free(t);
    return v;
}

/* --bn sync at np 2 against one process (--ddp, the same sampler): the
 * first epoch's mean loss agrees; --bn local differs from both. */
static void test_mpi_train_sync_bn(void)
{
    const char *a = hsi_test_tmp("mpi_sync1"), *b = hsi_test_tmp("mpi_sync2"), *c = hsi_test_tmp("mpi_local2");
    const char *o = " --epochs 1 --train 0.04 --seed 5 --quiet --batch 16 --no-augment";
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, MPIRUN "%s train " SCENE " --out %s --bn sync%s", 300, 1,
                                 HSI_BIN, a, o), 0);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, MPIRUN "%s train " SCENE " --out %s --bn sync%s", 300, 2,
                                 HSI_BIN, b, o), 0);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, MPIRUN "%s train " SCENE " --out %s --bn local%s", 300, 2,
                                 HSI_BIN, c, o), 0);
    double la = first_loss(a), lb = first_loss(b), lc = first_loss(c);
    CU_ASSERT(isfinite(la) && fabs(la - lb) <= 1e-4 * fabs(la));
    CU_ASSERT(fabs(la - lc) > 1e-4 * fabs(la));
    if (!(fabs(la - lb) <= 1e-4 * fabs(la))) fprintf(stderr, "\n  loss np1 %.6g np2 sync %.6g local %.6g\n", la, lb, lc);
}

/* The NCCL plugin (built with MPI=1 where nvcc and nccl.h are): it links
 * against libnccl.so.2 and cudart; on a GPU a one-rank communicator's
 * allreduce equals the host sum, elsewhere it says there is no device. */
static void test_mpi_nccl(void)
{
    char plugin[4096];
    snprintf(plugin, sizeof plugin, "%s", check_bin());
    char *s = strrchr(plugin, '/');
    snprintf(s ? s + 1 : plugin, sizeof plugin - (size_t)(s ? s + 1 - plugin : 0), "libhsi_nccl.so");
    if (access(plugin, F_OK) != 0) {
        int have = access("/usr/local/cuda/include/nccl.h", F_OK) == 0 &&
                   access("/usr/local/cuda/bin/nvcc", X_OK) == 0;
        CU_ASSERT(!have); /* nvcc and nccl.h are here: the build should have made it */
        if (!have) fprintf(stderr, "\n  (no nvcc + nccl.h: no NCCL plugin to check) ");
        return;
    }
    int rc = hsi_test_run(out, sizeof out, "ldd %s", plugin);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "libnccl.so.2 => /"));
    CU_ASSERT_PTR_NULL(strstr(out, "not found"));
    rc = hsi_test_run(out, sizeof out, "nm -D --defined-only %s", plugin);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "hsi_nccl_plugin_entry"));
    for (int n = 1; n <= 2; n++) {
        /* two ranks on one GPU: NCCL refuses that (duplicate device), so one rank there */
        if (n == 2 && system("nvidia-smi -L 2>/dev/null | grep -c GPU | grep -qv '^1$'") != 0) break;
        rc = hsi_test_run(out, sizeof out, MPIRUN "%s nccl", 120, n, check_bin());
        CU_ASSERT_EQUAL(rc, 0);
        int gpu = system("nvidia-smi -L >/dev/null 2>&1") == 0;
        if (gpu && n == 1) CU_ASSERT_PTR_NOT_NULL(strstr(out, "allreduce of device memory equals"));
        if (!gpu) CU_ASSERT_PTR_NOT_NULL(strstr(out, "nccl: unavailable"));
        if (rc) fprintf(stderr, "\n%s\n", out);
    }
}

HSI_SUITE(dist_mpi, HSI_SUITE_NEEDS_MPI, {"NCCL plugin links; allreduce on a GPU", test_mpi_nccl}, {"dist_check under mpirun -np 1..4", test_mpi_checks},
          {"a rank killed or failing ends the job", test_mpi_rank_dies},
          {"a list of cubes over 3 ranks: each once", test_mpi_batch_once},
          {"train --deterministic: same bits for np 1..4, resume", test_mpi_train_deterministic},
          {"train --bn sync at np 2 = one process", test_mpi_train_sync_bn},
          {"validation split, best-epoch map shared, np 1..3 = one process", test_mpi_validation_split})

/* dist.c — the ranks of a job (see dist.h): MPI calls when HSI_MPI is
 * defined (make MPI=1 compiles this file alone with MPI's headers), one
 * rank otherwise. The fixed-order tree sum is ours in both. */
#define _GNU_SOURCE
#include "core/dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "core/dist_nccl.h"
#include "core/threads.h"

#ifdef HSI_MPI
#include <dlfcn.h>
#include <limits.h>
#include <mpi.h>
#endif

static struct {
    int init, rank, size, local_rank, local_size, threads;
    /* with MPI, the collectives below call MPI only when size > 1: a
     * one-rank job needs no communication (and may not have started MPI) */
    int mpi_owner; /* we called MPI_Init_thread (and so finalise) */
    pid_t pid;     /* of the process that initialised */
} g = {0, 0, 1, 0, 1, 1, 0, 0};

int hsi_dist_built(void)
{
#ifdef HSI_MPI
    return 1;
#else
    return 0;
#endif
}

/* A process forked from a rank (the batch commands' per-cube children) is
 * not one of the job's processes: it works alone, as rank 0 of 1. */
static int in_job(void) { return !g.init || getpid() == g.pid; }

int hsi_dist_initialized(void) { return g.init; }
int hsi_dist_rank(void) { return in_job() ? g.rank : 0; }
int hsi_dist_size(void) { return in_job() ? g.size : 1; }
int hsi_dist_local_rank(void) { return in_job() ? g.local_rank : 0; }
int hsi_dist_local_size(void) { return in_job() ? g.local_size : 1; }
int hsi_dist_threads_per_rank(void) { return g.threads; }

static void tree_rows(double *v, int64_t n_parts, int64_t count)
{
    for (int64_t s = 1; s < n_parts; s *= 2)
        for (int64_t i = 0; i + s < n_parts; i += 2 * s) {
            double *a = v + i * count;
            const double *b = v + (i + s) * count;
            for (int64_t e = 0; e < count; e++) a[e] += b[e];
        }
}

void hsi_dist_tree_local_f64(double *parts, int64_t n_parts, int64_t count)
{
    tree_rows(parts, n_parts, count);
}

/* Each rank's part broadcast from it in turn: N broadcasts carry what one
 * allgather would, with counts past 2^31 (hsi_dist_bcast chunks). */
hsi_status hsi_dist_share_parts(void *buf, const int64_t *offsets)
{
    const int N = hsi_dist_size();
    for (int r = 0; r < N; r++) {
        if (offsets[r + 1] < offsets[r])
            return HSI_FAIL(HSI_ERR_ARG, "share parts: rank %d's part ends before it starts", r);
        hsi_status st = hsi_dist_bcast((char *)buf + offsets[r], (size_t)(offsets[r + 1] - offsets[r]), r);
        if (st != HSI_OK) return st;
    }
    return HSI_OK;
}

/* The tree over this process's parts alone (one rank): into out. */
static hsi_status tree_sum_here(double *out, const double *parts, int64_t n_parts, int64_t count)
{
    if (n_parts == 0) {
        memset(out, 0, (size_t)count * sizeof *out);
        return HSI_OK;
    }
    double *v = malloc((size_t)(n_parts * count) * sizeof *v);
    if (!v) return HSI_FAIL(HSI_ERR_NOMEM, "tree sum: out of memory");
    memcpy(v, parts, (size_t)(n_parts * count) * sizeof *v);
    tree_rows(v, n_parts, count);
    memcpy(out, v, (size_t)count * sizeof *out);
    free(v);
    return HSI_OK;
}

/* Threads per rank: the node's cores shared by its ranks, and no more than
 * the rank may run on (mpirun binds ranks to cores by default). The
 * OpenBLAS call is here because its threads must be sized before the first
 * BLAS call, and this is where the ranks on the node are known. */
static void size_threads(void)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1) ncpu = 1;
    int n = (int)(ncpu / (g.local_size > 0 ? g.local_size : 1)), mine = hsi_cpus_available();
    if (n > mine) n = mine;
    g.threads = n < 1 ? 1 : n;
    if (g.local_size <= 1) return;
    const char *e = getenv("HSI_THREADS");
    if (!e || !*e) hsi_threads_set(g.threads);
    const char *b = getenv("OPENBLAS_NUM_THREADS");
    if (!b || !*b) openblas_set_num_threads(g.threads);
}

static hsi_status gather_local(char **out, int64_t **sizes, const void *mine, int64_t n, int root)
{
    *out = NULL;
    *sizes = NULL;
    if (root != 0) return HSI_FAIL(HSI_ERR_ARG, "gather: root %d of a one-rank job", root);
    char *b = malloc((size_t)n + 1);
    int64_t *s = malloc(sizeof *s);
    if (!b || !s) {
        free(b), free(s);
        return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    }
    if (n) memcpy(b, mine, (size_t)n);
    s[0] = n;
    *out = b;
    *sizes = s;
    return HSI_OK;
}

#ifdef HSI_MPI

static hsi_status mpi_fail(int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return HSI_FAIL(HSI_ERR_IO, "%s failed on rank %d of %d: %s", what, g.rank, g.size, msg);
}

#define MPI_TRY(call, what)                                                                        \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS) return mpi_fail(rc_, what);                                        \
    } while (0)

static MPI_Datatype mpi_type(hsi_dtype dt)
{
    switch (dt) {
    case HSI_F32: return MPI_FLOAT;
    case HSI_F64: return MPI_DOUBLE;
    case HSI_I32: return MPI_INT32_T;
    case HSI_I64: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL;
    }
}

static MPI_Op mpi_op(hsi_dist_op op)
{
    return op == HSI_DIST_MAX ? MPI_MAX : op == HSI_DIST_MIN ? MPI_MIN : MPI_SUM;
}

/* Started by a launcher (mpirun, srun with PMI/PMIx)? A plain `hsi` run
 * then starts no MPI at all (no singleton MPI_Init: it costs time and
 * prints warnings in containers). */
static int launched(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE",
                                       "MPI_LOCALNRANKS", "HSI_MPI_FORCE", NULL};
    for (int i = 0; vars[i]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

hsi_status hsi_dist_init(int *argc, char ***argv)
{
    if (g.init) return HSI_OK;
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited && !launched()) { /* one rank, no MPI */
        g.init = 1;
        g.pid = getpid();
        return HSI_OK;
    }
    if (!inited) {
        int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) return HSI_FAIL(HSI_ERR_IO, "MPI_Init_thread failed (code %d)", rc);
        g.mpi_owner = 1;
        if (provided < MPI_THREAD_FUNNELED)
            return HSI_FAIL(HSI_ERR_UNSUPPORTED,
                            "MPI gives thread level %d, hsi needs MPI_THREAD_FUNNELED (%d)",
                            provided, MPI_THREAD_FUNNELED);
    }
    /* errors come back as codes (then statuses), not as MPI's abort */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g.size);
    MPI_Comm node;
    MPI_TRY(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g.rank, MPI_INFO_NULL, &node),
            "MPI_Comm_split_type");
    MPI_Comm_rank(node, &g.local_rank);
    MPI_Comm_size(node, &g.local_size);
    MPI_Comm_free(&node);
    g.pid = getpid();
    g.init = 1;
    size_threads();
    return HSI_OK;
}

hsi_status hsi_dist_finalize(void)
{
    if (!g.init || !g.mpi_owner || getpid() != g.pid) return HSI_OK;
    g.init = 0;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_TRY(MPI_Finalize(), "MPI_Finalize");
    return HSI_OK;
}

hsi_status hsi_dist_bcast(void *buf, size_t bytes, int root)
{
    if (root < 0 || root >= g.size)
        return HSI_FAIL(HSI_ERR_ARG, "bcast: root %d is not a rank of %d", root, g.size);
    if (g.size <= 1) return HSI_OK;
    char *p = buf;
    while (bytes > 0) { /* MPI counts are int */
        int k = bytes > (1u << 30) ? (1 << 30) : (int)bytes;
        MPI_TRY(MPI_Bcast(p, k, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
        p += k;
        bytes -= (size_t)k;
    }
    return HSI_OK;
}

hsi_status hsi_dist_allreduce(void *buf, int64_t n, hsi_dtype dt, hsi_dist_op op)
{
    MPI_Datatype t = mpi_type(dt);
    if (t == MPI_DATATYPE_NULL)
        return HSI_FAIL(HSI_ERR_UNSUPPORTED, "allreduce: dtype %s is not one of f32, f64, i32, i64",
                        hsi_dtype_name(dt));
    if (g.size <= 1 || n <= 0) return HSI_OK;
    size_t esz = hsi_dtype_size(dt);
    char *p = buf;
    while (n > 0) {
        int k = n > (1 << 28) ? (1 << 28) : (int)n;
        MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, p, k, t, mpi_op(op), MPI_COMM_WORLD), "MPI_Allreduce");
        p += (size_t)k * esz;
        n -= k;
    }
    return HSI_OK;
}

hsi_status hsi_dist_iallreduce_sum(void *buf, int64_t n, hsi_dtype dt, hsi_dist_req *req)
{
    req->impl = NULL;
    if (g.size <= 1 || n <= 0) return HSI_OK;
    MPI_Datatype t = mpi_type(dt);
    if (t == MPI_DATATYPE_NULL || n > INT32_MAX)
        return HSI_FAIL(HSI_ERR_UNSUPPORTED, "iallreduce: %lld values of %s (at most 2^31 of f32, "
                                             "f64, i32, i64)",
                        (long long)n, hsi_dtype_name(dt));
    MPI_Request *r = malloc(sizeof *r);
    if (!r) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, t, MPI_SUM, MPI_COMM_WORLD, r);
    if (rc != MPI_SUCCESS) {
        free(r);
        return mpi_fail(rc, "MPI_Iallreduce");
    }
    req->impl = r;
    return HSI_OK;
}

hsi_status hsi_dist_test(hsi_dist_req *req, int *done)
{
    *done = 1;
    if (!req->impl) return HSI_OK;
    int flag = 0;
    MPI_TRY(MPI_Test(req->impl, &flag, MPI_STATUS_IGNORE), "MPI_Test");
    *done = flag;
    if (flag) {
        free(req->impl);
        req->impl = NULL;
    }
    return HSI_OK;
}

hsi_status hsi_dist_wait(hsi_dist_req *req)
{
    if (!req->impl) return HSI_OK;
    int rc = MPI_Wait(req->impl, MPI_STATUS_IGNORE);
    free(req->impl);
    req->impl = NULL;
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Wait");
    return HSI_OK;
}

hsi_status hsi_dist_barrier(void)
{
    if (g.size <= 1) return HSI_OK;
    MPI_Request r;
    MPI_TRY(MPI_Ibarrier(MPI_COMM_WORLD, &r), "MPI_Ibarrier");
    for (;;) {
        int flag = 0;
        MPI_TRY(MPI_Test(&r, &flag, MPI_STATUS_IGNORE), "MPI_Test (barrier)");
        if (flag) return HSI_OK;
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

void hsi_dist_abort(int code)
{
    fflush(stdout);
    fflush(stderr);
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (inited && !fin) MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
    _exit(code ? code : 1);
}

hsi_status hsi_dist_gather_bytes(char **out, int64_t **sizes, const void *mine, int64_t n, int root)
{
    hsi_status st = HSI_OK;
    if (g.size <= 1) return gather_local(out, sizes, mine, n, root);
    *out = NULL;
    *sizes = NULL;
    int N = g.size;
    long long nn = n, *all = NULL;
    int *cnt = NULL, *disp = NULL;
    char *buf = NULL;
    if (g.rank == root) {
        all = malloc((size_t)N * sizeof *all);
        cnt = malloc((size_t)N * sizeof *cnt);
        disp = malloc((size_t)N * sizeof *disp);
        if (!all || !cnt || !disp) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup; /* the others block in the gather: the caller aborts the job */
        }
    }
    long long dummy;
    if (n > INT32_MAX) n = -1; /* reported after the gather, by every rank */
    nn = n;
    int rc = MPI_Gather(&nn, 1, MPI_LONG_LONG, all ? all : &dummy, 1, MPI_LONG_LONG, root, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
        st = mpi_fail(rc, "MPI_Gather");
        goto cleanup;
    }
    if (g.rank == root && st == HSI_OK) {
        long long tot = 0;
        for (int r = 0; r < N; r++) {
            if (tot + all[r] > INT32_MAX) {
                st = HSI_FAIL(HSI_ERR_OVERFLOW, "gather: more than 2 GiB from the ranks");
                break;
            }
            disp[r] = (int)tot;
            cnt[r] = (int)all[r];
            tot += all[r];
        }
        if (st == HSI_OK && !(buf = malloc((size_t)tot + 1))) st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    }
    if (g.rank == root && st == HSI_OK)
        for (int r = 0; r < N; r++)
            if (all[r] < 0) st = HSI_FAIL(HSI_ERR_OVERFLOW, "gather: more than 2 GiB from rank %d", r);
    if (n < 0) n = 0;
    /* root could not take the data: the others block in the gather; the
     * caller reports and aborts the job */
    if (g.rank == root && st != HSI_OK) goto cleanup;
    rc = MPI_Gatherv(mine, (int)n, MPI_BYTE, buf, cnt, disp, MPI_BYTE, root, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS && st == HSI_OK) st = mpi_fail(rc, "MPI_Gatherv");
    if (st == HSI_OK && g.rank == root) {
        int64_t *sz = malloc((size_t)N * sizeof *sz);
        if (!sz) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        for (int r = 0; r < N; r++) sz[r] = all[r];
        *out = buf;
        *sizes = sz;
        buf = NULL;
    }
cleanup:
    free(buf);
    free(all);
    free(cnt);
    free(disp);
    return st;
}

hsi_status hsi_dist_tree_sum_f64(double *out, const double *parts, int64_t n_parts, int64_t count)
{
    hsi_status st = HSI_OK;
    const int N = g.size, me = g.rank;
    long long *np = NULL;
    double *sendb = NULL, *recvb = NULL, *mine = NULL;
    int *scnt = NULL, *sdisp = NULL, *rcnt = NULL, *rdisp = NULL;
    if (N <= 1) return tree_sum_here(out, parts, n_parts, count);
    np = malloc((size_t)N * sizeof *np);
    scnt = malloc((size_t)N * sizeof *scnt), sdisp = malloc((size_t)N * sizeof *sdisp);
    rcnt = malloc((size_t)N * sizeof *rcnt), rdisp = malloc((size_t)N * sizeof *rdisp);
    if (!np || !scnt || !sdisp || !rcnt || !rdisp) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "tree sum: out of memory");
        goto cleanup; /* the others then block: the caller aborts the job */
    }
    long long mine_n = n_parts;
    int rc = MPI_Allgather(&mine_n, 1, MPI_LONG_LONG, np, 1, MPI_LONG_LONG, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
        st = mpi_fail(rc, "MPI_Allgather (tree sum)");
        goto cleanup;
    }
    long long total = 0;
    for (int r = 0; r < N; r++) total += np[r];
    /* element slice s = [count * s / N, count * (s + 1) / N) goes to rank s */
    int64_t e0, e1;
    hsi_split_range(count, me, N, &e0, &e1);
    int64_t my_len = e1 - e0;
    if ((double)n_parts * (double)count > INT32_MAX || (double)total * (double)my_len > INT32_MAX) {
        st = HSI_FAIL(HSI_ERR_OVERFLOW, "tree sum: %lld parts of %lld values exceed MPI's int counts",
                      total, (long long)count);
        goto cleanup;
    }
    sendb = malloc((size_t)(n_parts * count + 1) * sizeof *sendb);
    recvb = malloc((size_t)(total * my_len + 1) * sizeof *recvb);
    if (!sendb || !recvb) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "tree sum: out of memory");
        goto cleanup;
    }
    /* send buffer: slice by slice, each slice part by part */
    int64_t off = 0;
    for (int s = 0; s < N; s++) {
        int64_t a, b;
        hsi_split_range(count, s, N, &a, &b);
        sdisp[s] = (int)off;
        for (int64_t p = 0; p < n_parts; p++) {
            memcpy(sendb + off, parts + p * count + a, (size_t)(b - a) * sizeof *sendb);
            off += b - a;
        }
        scnt[s] = (int)(off - sdisp[s]);
    }
    off = 0;
    for (int r = 0; r < N; r++) { /* from rank r: its np[r] parts of my slice, in its order */
        rdisp[r] = (int)off;
        rcnt[r] = (int)(np[r] * my_len);
        off += rcnt[r];
    }
    rc = MPI_Alltoallv(sendb, scnt, sdisp, MPI_DOUBLE, recvb, rcnt, rdisp, MPI_DOUBLE, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
        st = mpi_fail(rc, "MPI_Alltoallv (tree sum)");
        goto cleanup;
    }
    /* recvb is (total, my_len) in global part order: the tree, row 0 */
    if (total > 0) tree_rows(recvb, total, my_len);
    else memset(recvb, 0, (size_t)my_len * sizeof *recvb);
    for (int s = 0; s < N; s++) {
        int64_t a, b;
        hsi_split_range(count, s, N, &a, &b);
        rcnt[s] = (int)(b - a);
        rdisp[s] = (int)a;
    }
    rc = MPI_Allgatherv(recvb, (int)my_len, MPI_DOUBLE, out, rcnt, rdisp, MPI_DOUBLE, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) st = mpi_fail(rc, "MPI_Allgatherv (tree sum)");
cleanup:
    free(np);
    free(scnt), free(sdisp), free(rcnt), free(rdisp);
    free(sendb);
    free(recvb);
    free(mine);
    return st;
}

/* ------------------------------------------------------------- NCCL */

struct hsi_nccl {
    const hsi_nccl_plugin *p;
    void *comm;
};

static const hsi_nccl_plugin *nccl_load(char *why, size_t n)
{
    static const hsi_nccl_plugin *tab;
    static char err[512];
    if (tab) return tab;
    if (err[0]) {
        snprintf(why, n, "%s", err);
        return NULL;
    }
    char path[PATH_MAX] = "";
    const char *env = getenv("HSI_NCCL_PLUGIN");
    void *h = NULL;
    if (env && *env) {
        h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    } else {
        ssize_t k = readlink("/proc/self/exe", path, sizeof path - 1);
        if (k > 0) {
            path[k] = 0;
            char *slash = strrchr(path, '/');
            if (slash) snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), HSI_NCCL_PLUGIN_FILE);
            h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        }
        if (!h) h = dlopen(HSI_NCCL_PLUGIN_FILE, RTLD_NOW | RTLD_LOCAL);
    }
    if (!h) {
        const char *e = dlerror();
        snprintf(err, sizeof err, "NCCL plugin %s not loaded (%s); it is built with make MPI=1 "
                                  "where nvcc and nccl.h are found",
                 env && *env ? env : HSI_NCCL_PLUGIN_FILE, e ? e : "not found");
        snprintf(why, n, "%s", err);
        return NULL;
    }
    const hsi_nccl_plugin *(*entry)(void) = NULL;
    *(void **)&entry = dlsym(h, HSI_NCCL_PLUGIN_ENTRY);
    const hsi_nccl_plugin *t = entry ? entry() : NULL;
    if (!t || t->abi != HSI_NCCL_PLUGIN_ABI || t->size != sizeof *t) {
        snprintf(err, sizeof err, "NCCL plugin: %s, ABI %u (this libhsi wants %u)",
                 t ? "another version" : "no entry point", t ? t->abi : 0, HSI_NCCL_PLUGIN_ABI);
        snprintf(why, n, "%s", err);
        return NULL;
    }
    return tab = t;
}

hsi_status hsi_nccl_open(hsi_nccl **out)
{
    *out = NULL;
    char why[512] = "";
    int code = 0; /* 0 ok, 1 no plugin, 2 no device, 3 NCCL failed */
    const hsi_nccl_plugin *p = nccl_load(why, sizeof why);
    int ndev = 0;
    if (!p) code = 1;
    else if (p->device_count(&ndev, why, sizeof why) || ndev < 1) {
        code = 2;
        if (!why[0]) snprintf(why, sizeof why, "no CUDA device");
    }
    /* every rank learns the worst case: all fail alike, none waits in NCCL */
    int worst = code;
    if (g.size > 1) MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (worst)
        return HSI_FAIL(worst == 2 ? HSI_ERR_NO_CUDA : HSI_ERR_UNSUPPORTED, "NCCL on rank %d of %d: %s",
                        g.rank, g.size, why[0] ? why : "another rank could not start NCCL");
    char id[HSI_NCCL_ID_BYTES] = {0};
    int bad = g.rank == 0 && p->unique_id(id, why, sizeof why);
    if (g.size > 1) {
        MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (!bad) MPI_Bcast(id, HSI_NCCL_ID_BYTES, MPI_BYTE, 0, MPI_COMM_WORLD);
    }
    if (bad) return HSI_FAIL(HSI_ERR_CUDA, "NCCL: rank 0: %s", why[0] ? why : "no unique id");
    hsi_nccl *c = calloc(1, sizeof *c);
    if (!c) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    c->p = p;
    if (p->comm_init(&c->comm, id, g.size, g.rank, g.local_rank % ndev, why, sizeof why)) {
        free(c);
        return HSI_FAIL(HSI_ERR_CUDA, "NCCL on rank %d of %d (GPU %d): %s", g.rank, g.size,
                        g.local_rank % ndev, why);
    }
    *out = c;
    return HSI_OK;
}

void hsi_nccl_close(hsi_nccl *c)
{
    if (!c) return;
    c->p->comm_destroy(c->comm);
    free(c);
}

#define NCCL_CALL(expr, what)                                                                      \
    do {                                                                                           \
        char why_[512] = "";                                                                       \
        if (expr) return HSI_FAIL(HSI_ERR_CUDA, "%s on rank %d: %s", what, g.rank, why_);          \
    } while (0)

hsi_status hsi_nccl_allreduce_sum_f32(hsi_nccl *c, float *dev, int64_t count, void *stream)
{
    NCCL_CALL(c->p->allreduce_sum_f32(c->comm, dev, count, stream, why_, sizeof why_), "NCCL allreduce");
    return HSI_OK;
}

hsi_status hsi_nccl_sync(hsi_nccl *c, void *stream)
{
    NCCL_CALL(c->p->stream_sync(stream, why_, sizeof why_), "NCCL stream");
    return HSI_OK;
}

hsi_status hsi_nccl_dev_alloc(hsi_nccl *c, void **p, size_t bytes)
{
    NCCL_CALL(c->p->dev_alloc(p, bytes, why_, sizeof why_), "device memory");
    return HSI_OK;
}

void hsi_nccl_dev_free(hsi_nccl *c, void *p) { c->p->dev_free(p); }

hsi_status hsi_nccl_copy(hsi_nccl *c, void *dst, const void *src, size_t bytes, int dir)
{
    NCCL_CALL(c->p->copy(dst, src, bytes, dir, why_, sizeof why_), "device copy");
    return HSI_OK;
}

int hsi_nccl_version(const hsi_nccl *c) { return c ? c->p->version : 0; }

#else /* ------------------------------------------------ one rank */

hsi_status hsi_dist_init(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    g.init = 1;
    g.pid = getpid();
    size_threads();
    return HSI_OK;
}

hsi_status hsi_dist_finalize(void)
{
    g.init = 0;
    return HSI_OK;
}

hsi_status hsi_dist_bcast(void *buf, size_t bytes, int root)
{
    (void)buf, (void)bytes;
    if (root != 0) return HSI_FAIL(HSI_ERR_ARG, "bcast: root %d is not a rank of 1", root);
    return HSI_OK;
}

hsi_status hsi_dist_allreduce(void *buf, int64_t n, hsi_dtype dt, hsi_dist_op op)
{
    (void)buf, (void)n, (void)op;
    if (dt != HSI_F32 && dt != HSI_F64 && dt != HSI_I32 && dt != HSI_I64)
        return HSI_FAIL(HSI_ERR_UNSUPPORTED, "allreduce: dtype %s is not one of f32, f64, i32, i64",
                        hsi_dtype_name(dt));
    return HSI_OK;
}

hsi_status hsi_dist_iallreduce_sum(void *buf, int64_t n, hsi_dtype dt, hsi_dist_req *req)
{
    req->impl = NULL;
    return hsi_dist_allreduce(buf, n, dt, HSI_DIST_SUM);
}

hsi_status hsi_dist_test(hsi_dist_req *req, int *done)
{
    (void)req;
    *done = 1;
    return HSI_OK;
}

hsi_status hsi_dist_wait(hsi_dist_req *req)
{
    (void)req;
    return HSI_OK;
}

hsi_status hsi_dist_barrier(void) { return HSI_OK; }

void hsi_dist_abort(int code)
{
    fflush(stdout);
    fflush(stderr);
    _exit(code ? code : 1);
}

hsi_status hsi_dist_gather_bytes(char **out, int64_t **sizes, const void *mine, int64_t n, int root)
{
    return gather_local(out, sizes, mine, n, root);
}

hsi_status hsi_dist_tree_sum_f64(double *out, const double *parts, int64_t n_parts, int64_t count)
{
    return tree_sum_here(out, parts, n_parts, count);
}

/* NCCL needs the MPI build (its unique id goes over MPI) */
struct hsi_nccl {
    int unused;
};

hsi_status hsi_nccl_open(hsi_nccl **out)
{
    *out = NULL;
    return HSI_FAIL(HSI_ERR_UNSUPPORTED, "NCCL: this hsi was built without MPI (make MPI=1 builds "
                                         "the NCCL plugin where nvcc and nccl.h are found)");
}

void hsi_nccl_close(hsi_nccl *c) { (void)c; }

hsi_status hsi_nccl_allreduce_sum_f32(hsi_nccl *c, float *dev, int64_t count, void *stream)
{
    (void)c, (void)dev, (void)count, (void)stream;
    return HSI_FAIL(HSI_ERR_UNSUPPORTED, "NCCL: not built");
}

hsi_status hsi_nccl_sync(hsi_nccl *c, void *stream)
{
    (void)c, (void)stream;
    return HSI_FAIL(HSI_ERR_UNSUPPORTED, "NCCL: not built");
}

hsi_status hsi_nccl_dev_alloc(hsi_nccl *c, void **p, size_t bytes)
{
    (void)c, (void)bytes;
    *p = NULL;
    return HSI_FAIL(HSI_ERR_UNSUPPORTED, "NCCL: not built");
}

void hsi_nccl_dev_free(hsi_nccl *c, void *p) { (void)c, (void)p; }

hsi_status hsi_nccl_copy(hsi_nccl *c, void *dst, const void *src, size_t bytes, int dir)
{
    (void)c, (void)dst, (void)src, (void)bytes, (void)dir;
    return HSI_FAIL(HSI_ERR_UNSUPPORTED, "NCCL: not built");
}

int hsi_nccl_version(const hsi_nccl *c)
{
    (void)c;
    return 0;
}

#endif

hsi_status hsi_dist_tree_sum_f32(float *out, const float *parts, int64_t n_parts, int64_t count)
{
    double *p = malloc((size_t)(n_parts * count + 1) * sizeof *p);
    double *o = malloc((size_t)(count + 1) * sizeof *o);
    hsi_status st = HSI_OK;
    if (!p || !o) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "tree sum: out of memory");
        goto cleanup;
    }
    for (int64_t i = 0; i < n_parts * count; i++) p[i] = parts[i];
    HSI_TRY(hsi_dist_tree_sum_f64(o, p, n_parts, count));
    for (int64_t i = 0; i < count; i++) out[i] = (float)o[i];
cleanup:
    free(p);
    free(o);
    return st;
}

/* cmd_bench.c — `hsi bench WHAT ...`: throughput measurements, never tests.
 * `hsi bench io` is here (open time, full-pass GB/s per interleave against
 * memcpy); other benchmarks register themselves as commands named
 * "bench-WHAT" and are reached as `hsi bench WHAT`. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "io/envi.h"

/* ------------------------------------------------------- per-band sum pass */

typedef struct {
    const hsi_view *v;
    int64_t l0, l1;
    uint64_t *acc; /* n_bands */
} sum_job;

/* Sums one uint16 (band, line, sample) view per band, reading each byte
 * once in storage order: rows when samples are contiguous (BSQ, BIL),
 * spectra when bands are (BIP). */
static void *sum_worker(void *arg)
{
    sum_job *j = arg;
    const hsi_view *v = j->v;
    const int64_t B = v->shape[0], S = v->shape[2];
    const uint8_t *base = (const uint8_t *)v->buf->data + v->offset;
    if (v->strides[2] == 2 && v->strides[1] == 2 * S) {
        /* BSQ: each band's lines [l0, l1) are one contiguous run */
        const int64_t n = (j->l1 - j->l0) * S;
        for (int64_t b = 0; b < B; b++) {
            const uint16_t *p = (const uint16_t *)(base + b * v->strides[0] + j->l0 * v->strides[1]);
            uint64_t tot = 0;
            for (int64_t i0 = 0; i0 < n; i0 += 65536) { /* u32 cannot overflow in 65536 adds */
                int64_t i1 = i0 + 65536 < n ? i0 + 65536 : n;
                uint32_t s = 0;
                for (int64_t i = i0; i < i1; i++) s += p[i];
                tot += s;
            }
            j->acc[b] += tot;
        }
        return NULL;
    }
    uint32_t *line_acc = malloc((size_t)B * sizeof *line_acc); /* sums of one line, S * 65535 < 2^32 */
    for (int64_t y = j->l0; y < j->l1; y++) {
        const uint8_t *lp = base + y * v->strides[1];
        if (v->strides[2] == 2) {
            /* BIL: a line is B contiguous rows of S samples */
            for (int64_t b = 0; b < B; b++) {
                const uint16_t *p = (const uint16_t *)(lp + b * v->strides[0]);
                uint32_t s = 0;
                for (int64_t x = 0; x < S; x++) s += p[x];
                j->acc[b] += s;
            }
        } else {
            /* BIP: spectra. Blocks of 32 pixels (L1-resident) are swept once
             * per 64-band chunk whose sums stay in registers. */
            memset(line_acc, 0, (size_t)B * sizeof *line_acc);
            for (int64_t x0 = 0; x0 < S; x0 += 32) {
                int64_t x1 = x0 + 32 < S ? x0 + 32 : S;
                for (int64_t b0 = 0; b0 < B; b0 += 64) {
                    int64_t nb = B - b0 < 64 ? B - b0 : 64;
                    uint32_t acc[64];
                    memcpy(acc, line_acc + b0, (size_t)nb * sizeof *acc);
                    for (int64_t x = x0; x < x1; x++) {
                        const uint16_t *p = (const uint16_t *)(lp + x * v->strides[2]) + b0;
                        if (nb == 64)
                            for (int k = 0; k < 64; k++) acc[k] += p[k];
                        else
                            for (int64_t k = 0; k < nb; k++) acc[k] += p[k];
                    }
                    memcpy(line_acc + b0, acc, (size_t)nb * sizeof *acc);
                }
            }
            for (int64_t b = 0; b < B; b++) j->acc[b] += line_acc[b];
        }
    }
    free(line_acc);
    return NULL;
}

static double band_sum_pass(const hsi_view *v, int threads, uint64_t *total)
{
    const int64_t B = v->shape[0], L = v->shape[1];
    sum_job jobs[16];
    pthread_t th[16];
    double t0 = hsi_now();
    for (int t = 0; t < threads; t++) {
        jobs[t].v = v;
        jobs[t].l0 = L * t / threads;
        jobs[t].l1 = L * (t + 1) / threads;
        jobs[t].acc = calloc((size_t)B, sizeof(uint64_t));
        pthread_create(&th[t], NULL, sum_worker, &jobs[t]);
    }
    uint64_t s = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(th[t], NULL);
        for (int64_t b = 0; b < B; b++) s += jobs[t].acc[b];
        free(jobs[t].acc);
    }
    double dt = hsi_now() - t0;
    *total = s;
    return dt;
}

typedef struct {
    uint8_t *dst;
    const uint8_t *src;
    size_t n;
} copy_job;

static void *copy_worker(void *arg)
{
    copy_job *j = arg;
    memcpy(j->dst, j->src, j->n);
    return NULL;
}

static double memcpy_pass(uint8_t *dst, const uint8_t *src, size_t n, int threads)
{
    copy_job jobs[16];
    pthread_t th[16];
    double t0 = hsi_now();
    for (int t = 0; t < threads; t++) {
        size_t a = n * (size_t)t / (size_t)threads, b = n * (size_t)(t + 1) / (size_t)threads;
        jobs[t] = (copy_job){dst + a, src + a, b - a};
        pthread_create(&th[t], NULL, copy_worker, &jobs[t]);
    }
    for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
    return hsi_now() - t0;
}

/* --------------------------------------------------------- test cubes */

static hsi_status write_cube(const char *hdr, hsi_interleave il, int64_t B, int64_t L, int64_t S)
{
    hsi_status st = HSI_OK;
    hsi_meta m;
    hsi_meta_init(&m);
    hsi_envi_writer *w = NULL;
    hsi_view tile;
    memset(&tile, 0, sizeof tile);
    hsi_envi_write_options o;
    hsi_envi_write_options_init(&o);
    o.interleave = il;
    o.dtype = HSI_U16;
    const int64_t TL = 16;
    int64_t shape[3] = {B, TL, S};
    HSI_TRY(hsi_view_alloc(&tile, HSI_U16, 3, shape, HSI_BUF_HOST));
    HSI_TRY(hsi_envi_writer_open(&w, hdr, &m, B, L, S, &o));
    uint16_t *p = tile.buf->data;
    hsi_progress pr;
    hsi_progress_begin(&pr, "writing test cube", L);
    for (int64_t y0 = 0; y0 < L; y0 += TL) {
        for (int64_t b = 0; b < B; b++)
            for (int64_t y = 0; y < TL; y++)
                for (int64_t x = 0; x < S; x++)
                    p[(b * TL + y) * S + x] = (uint16_t)((b * 131 + (y0 + y) * 7 + x) & 0x0fff);
        HSI_TRY(hsi_envi_writer_write(w, &tile));
        hsi_progress_update(&pr, y0 + TL);
    }
    hsi_progress_end(&pr);
    st = hsi_envi_writer_finish(w);
    w = NULL;
cleanup:
    if (w) hsi_envi_writer_abort(w);
    hsi_view_release(&tile);
    hsi_meta_free(&m);
    return st;
}

static int file_size_is(const char *path, int64_t n)
{
    struct stat sb;
    return stat(path, &sb) == 0 && sb.st_size == n;
}

static hsi_status make_sparse(const char *dir, int64_t B, int64_t L, int64_t S, char *hdr, size_t n)
{
    char data[4096];
    snprintf(hdr, n, "%s/sparse16g.hdr", dir);
    snprintf(data, sizeof data, "%s/sparse16g", dir);
    FILE *fp = fopen(hdr, "w");
    if (!fp) return HSI_FAIL(HSI_ERR_IO, "%s: %s", hdr, strerror(errno));
    fprintf(fp, "ENVI\nsamples = %lld\nlines = %lld\nbands = %lld\nheader offset = 0\n"
                "file type = ENVI Standard\ndata type = 12\ninterleave = bsq\nbyte order = 0\n",
            (long long)S, (long long)L, (long long)B);
    fclose(fp);
    int fd = open(data, O_CREAT | O_WRONLY, 0644);
    if (fd < 0) return HSI_FAIL(HSI_ERR_IO, "%s: %s", data, strerror(errno));
    int rc = ftruncate(fd, (off_t)(B * L * S * 2));
    close(fd);
    if (rc != 0) return HSI_FAIL(HSI_ERR_IO, "%s: cannot extend to %lld bytes", data,
                                 (long long)(B * L * S * 2));
    return HSI_OK;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double open_time_us(const char *hdr, int reps)
{
    double t[64];
    if (reps > 64) reps = 64;
    for (int r = 0; r < reps; r++) {
        hsi_cube c;
        hsi_cube_init(&c);
        double t0 = hsi_now();
        hsi_status st = hsi_envi_open(&c, hdr);
        t[r] = (hsi_now() - t0) * 1e6;
        hsi_cube_free(&c);
        if (st != HSI_OK) return -1;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_d);
    return t[reps / 2];
}

static int bench_io(int argc, char **argv)
{
    const char *dir = "bench/out";
    int json = 0, threads = 2, reps = 3;
    long long mib = 512;
    for (int i = 1; i < argc; i++) {
        const char *v;
        long long k;
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (hsi_cli_opt(argc, argv, &i, "--dir", &v) && v) dir = v;
        else if (hsi_cli_opt(argc, argv, &i, "--mib", &v)) {
            if (!hsi_cli_parse_int("bench io", "--mib", v, 8, 65536, &mib)) return HSI_EXIT_USAGE;
        } else if (hsi_cli_opt(argc, argv, &i, "--threads", &v)) {
            if (!hsi_cli_parse_int("bench io", "--threads", v, 1, 16, &k)) return HSI_EXIT_USAGE;
            threads = (int)k;
        } else if (hsi_cli_opt(argc, argv, &i, "--reps", &v)) {
            if (!hsi_cli_parse_int("bench io", "--reps", v, 1, 50, &k)) return HSI_EXIT_USAGE;
            reps = (int)k;
        } else return hsi_cli_usage_error("bench io", "unknown option '%s'", argv[i]);
    }
    mkdir(dir, 0755);
    /* bands 256 x samples 1024, lines from the size */
    const int64_t B = 256, S = 1024, L = mib * 1024 * 1024 / (B * S * 2);
    const int64_t nbytes = B * L * S * 2;
    const hsi_interleave ils[3] = {HSI_BSQ, HSI_BIL, HSI_BIP};
    char hdr[3][4096], data[4096], sparse[4096];
    for (int k = 0; k < 3; k++) {
        snprintf(hdr[k], sizeof hdr[k], "%s/cube_%lldmib_%s.hdr", dir, mib,
                 hsi_interleave_name(ils[k]));
        snprintf(data, sizeof data, "%s/cube_%lldmib_%s", dir, mib, hsi_interleave_name(ils[k]));
        if (!file_size_is(data, nbytes)) {
            if (!json) fprintf(stderr, "creating %s (%lld MiB)\n", data, mib);
            hsi_status st = write_cube(hdr[k], ils[k], B, L, S);
            if (st != HSI_OK) return hsi_cli_fail("bench io", st);
        }
    }
    hsi_status st = make_sparse(dir, 256, 32768, 1024, sparse, sizeof sparse);
    if (st != HSI_OK) return hsi_cli_fail("bench io", st);

    double open_small = open_time_us(hdr[0], 21), open_sparse = open_time_us(sparse, 21);
    /* memcpy bandwidth in this run, same byte count, same threads */
    uint8_t *a = hsi_aligned_alloc((size_t)nbytes), *b = hsi_aligned_alloc((size_t)nbytes);
    if (!a || !b) return hsi_cli_fail("bench io", HSI_FAIL(HSI_ERR_NOMEM, "out of memory"));
    memset(a, 1, (size_t)nbytes);
    memset(b, 2, (size_t)nbytes);
    double best_cp = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = memcpy_pass(b, a, (size_t)nbytes, threads);
        if (t < best_cp) best_cp = t;
    }
    hsi_aligned_free(a);
    hsi_aligned_free(b);
    double gbs_memcpy = (double)nbytes / best_cp / 1e9;
    double gbs[3];
    uint64_t sums[3];
    for (int k = 0; k < 3; k++) {
        hsi_cube c;
        hsi_cube_init(&c);
        st = hsi_envi_open(&c, hdr[k]);
        if (st != HSI_OK) return hsi_cli_fail("bench io", st);
        double best = 1e30;
        for (int r = 0; r < reps + 1; r++) { /* first pass warms the page cache */
            double t = band_sum_pass(&c.view, threads, &sums[k]);
            if (r > 0 && t < best) best = t;
        }
        gbs[k] = (double)nbytes / best / 1e9;
        hsi_cube_free(&c);
    }
    int agree = sums[0] == sums[1] && sums[1] == sums[2];
    if (json) {
        printf("{\"cube_bytes\": %lld, \"bands\": %lld, \"lines\": %lld, \"samples\": %lld, "
               "\"threads\": %d, \"open_us_small\": %.2f, \"open_us_sparse16g\": %.2f, "
               "\"memcpy_gbs\": %.3f, \"pass_gbs\": {\"bsq\": %.3f, \"bil\": %.3f, \"bip\": %.3f}, "
               "\"checksum\": %llu, \"checksums_agree\": %s, \"dir\": \"%s\"}\n",
               (long long)nbytes, (long long)B, (long long)L, (long long)S, threads, open_small,
               open_sparse, gbs_memcpy, gbs[0], gbs[1], gbs[2], (unsigned long long)sums[0],
               agree ? "true" : "false", dir);
    } else {
        printf("cube: %lld MiB uint16, %lld bands x %lld lines x %lld samples; %d threads\n",
               mib, (long long)B, (long long)L, (long long)S, threads);
        printf("open (median of 21): %lld MiB cube %.1f us, 16 GiB sparse cube %.1f us\n", mib,
               open_small, open_sparse);
        printf("memcpy:              %7.2f GB/s\n", gbs_memcpy);
        for (int k = 0; k < 3; k++)
            printf("per-band sum, %s:   %7.2f GB/s  (%.0f%% of memcpy)\n",
                   hsi_interleave_name(ils[k]), gbs[k], 100 * gbs[k] / gbs_memcpy);
        printf("checksums %s\n", agree ? "agree across interleaves" : "DIFFER (bug)");
    }
    return agree ? HSI_EXIT_OK : HSI_EXIT_FAIL;
}

HSI_CLI_COMMAND(bench_io, {"bench-io", "(reached as 'hsi bench io')",
                           "usage: hsi bench io [--dir DIR] [--mib N] [--threads N] [--reps N] [--json]\n"
                           "\n"
                           "Creates (once) a N MiB uint16 cube in BSQ, BIL and BIP (default 512)\n"
                           "and a 16 GiB sparse cube under DIR (default bench/out), then reports\n"
                           "the open time of both, memcpy bandwidth, and a full per-band-sum\n"
                           "pass over each interleave in GB/s. bench/run.sh puts SPy and GDAL\n"
                           "beside these numbers.\n",
                           bench_io})

static int bench_run(int argc, char **argv)
{
    if (argc < 2) return hsi_cli_usage_error("bench", "what? (io, model, layers, dist)");
    char name[64];
    snprintf(name, sizeof name, "bench-%s", argv[1]);
    const hsi_cli_cmd *c = hsi_cli_find(name);
    if (!c) return hsi_cli_usage_error("bench", "no benchmark named '%s'", argv[1]);
    if (hsi_cli_wants_help(c, argc - 1, argv + 1)) return HSI_EXIT_OK;
    return c->run(argc - 1, argv + 1);
}

HSI_CLI_COMMAND(bench, {"bench", "throughput benchmarks: hsi bench io|model|layers ...",
                        "usage: hsi bench WHAT [OPTIONS]\n"
                        "\n"
                        "  io       open time and full-pass GB/s per interleave vs memcpy\n"
                        "  model    training/inference samples/s of a model (hsi bench model --help)\n"
                        "  layers   per-layer forward/backward times of cnn2d\n"
                        "  dist     data-parallel training under mpirun: samples/s, E(N), phases,\n"
                        "           allreduce bandwidth and a network cost model\n"
                        "\n"
                        "make bench runs them (and bench/bench_kernels.sh for statistics, the\n"
                        "fused pass and PCA) with the Python comparisons (SPy, GDAL,\n"
                        "scikit-learn, PyTorch) in the same run and prints ratios.\n",
                        bench_run})

/* runner.c — the one test runner: runs every registered CUnit suite (or
 * those whose names contain one of the arguments) and exits with the number
 * of failures, so `make test` fails when any test fails. */
#define _GNU_SOURCE
#include <cJSON.h>
#include "test.h"
#include "core/dist.h"

#include <CUnit/Basic.h>
#include <cpl_error.h>
#include <gdal.h>
#include <dirent.h>
#include <ftw.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_SUITES 256
static struct {
    const char *name;
    const hsi_test_case *cases;
    int flags;
} suites[MAX_SUITES];
static int n_suites;

void hsi_test_register(const char *name, const hsi_test_case *cases, int flags)
{
    if (n_suites < MAX_SUITES) {
        suites[n_suites].name = name;
        suites[n_suites].cases = cases;
        suites[n_suites].flags = flags;
        n_suites++;
    }
}

const char *hsi_test_shared(const char *rel)
{
    static _Thread_local char path[8][4096];
    static _Thread_local int slot;
    const char *base = getenv("HSI_SHARED_DATA");
    if (!base || !*base) base = "../shared/data";
    char *p = path[slot++ & 7];
    snprintf(p, 4096, "%s/%s", base, rel);
    return access(p, R_OK) == 0 ? p : NULL;
}

static char tmpdir[4096];

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

static void cleanup_tmp(void)
{
    if (tmpdir[0] && !getenv("HSI_KEEP_TMP")) nftw(tmpdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

const char *hsi_test_tmpdir(void)
{
    if (!tmpdir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/hsi-test-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(tmpdir)) {
            perror("mkdtemp");
            exit(2);
        }
        atexit(cleanup_tmp);
    }
    return tmpdir;
}

int hsi_test_png_size(const char *path, int *w, int *h, int *n)
{
    GDALAllRegister();
    CPLPushErrorHandler(CPLQuietErrorHandler);
    GDALDatasetH ds = GDALOpen(path, GA_ReadOnly);
    CPLPopErrorHandler();
    if (!ds) return 0;
    int ok = !strcmp(GDALGetDriverShortName(GDALGetDatasetDriver(ds)), "PNG");
    *w = GDALGetRasterXSize(ds);
    *h = GDALGetRasterYSize(ds);
    *n = GDALGetRasterCount(ds);
    uint8_t *row = malloc((size_t)*w); /* every pixel decodes */
    for (int b = 1; ok && row && b <= *n; b++)
        for (int y = 0; ok && y < *h; y++)
            ok = GDALRasterIO(GDALGetRasterBand(ds, b), GF_Read, 0, y, *w, 1, row, *w, 1, GDT_Byte, 0, 0) == CE_None;
    free(row);
    GDALClose(ds);
    return ok;
}

uint8_t *hsi_test_png_rgb(const char *path, int *w, int *h)
{
    GDALAllRegister();
    CPLPushErrorHandler(CPLQuietErrorHandler);
    GDALDatasetH ds = GDALOpen(path, GA_ReadOnly);
    CPLPopErrorHandler();
    if (!ds) return NULL;
    uint8_t *px = NULL;
    *w = GDALGetRasterXSize(ds);
    *h = GDALGetRasterYSize(ds);
    if (!strcmp(GDALGetDriverShortName(GDALGetDatasetDriver(ds)), "PNG") && GDALGetRasterCount(ds) == 3 &&
        (px = malloc((size_t)*w * (size_t)*h * 3))) {
        int bands[3] = {1, 2, 3};
        if (GDALDatasetRasterIO(ds, GF_Read, 0, 0, *w, *h, px, *w, *h, GDT_Byte, 3, bands, 3, (GSpacing)*w * 3,
                                1) != CE_None) {
            free(px);
            px = NULL;
        }
    }
    GDALClose(ds);
    return px;
}

const char *hsi_test_tmp(const char *name)
{
    static char buf[8][4096];
    static int slot;
    char *p = buf[slot++ & 7];
    snprintf(p, 4096, "%s/%s", hsi_test_tmpdir(), name);
    return p;
}

int hsi_test_run(char *out, size_t n, const char *fmt, ...)
{
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    strncat(cmd, " 2>&1", sizeof cmd - strlen(cmd) - 1);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t got = fread(out, 1, n - 1, p);
    out[got] = 0;
    /* drain what did not fit so the command is not killed by SIGPIPE */
    char sink[4096];
    while (fread(sink, 1, sizeof sink, p) > 0) {
    }
    int rc = pclose(p);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

int hsi_test_same_file(const char *a, const char *b)
{
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    int same = hsi_read_file(a, &x, &nx) == HSI_OK && hsi_read_file(b, &y, &ny) == HSI_OK &&
               nx == ny && memcmp(x, y, nx) == 0;
    free(x);
    free(y);
    return same;
}

int hsi_test_same_in(const char *dir_a, const char *dir_b, const char *name)
{
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s/%s", dir_a, name);
    snprintf(b, sizeof b, "%s/%s", dir_b, name);
    int same = hsi_test_same_file(a, b);
    if (!same) fprintf(stderr, "\n  %s differs between %s and %s\n", name, dir_a, dir_b);
    return same;
}

cJSON *hsi_test_load_json(const char *path)
{
    char *t = NULL;
    size_t n;
    if (hsi_read_file(path, &t, &n) != HSI_OK) return NULL;
    cJSON *j = cJSON_Parse(t);
    free(t);
    return j;
}

static int cmp_suite(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    return strcmp(x, y);
}

int main(int argc, char **argv)
{
    int require_cuda = 0;
    const char *filters[64];
    int n_filters = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--require-cuda") == 0) require_cuda = 1;
        else if (strcmp(argv[i], "--list") == 0) {
            for (int s = 0; s < n_suites; s++) printf("%s\n", suites[s].name);
            return 0;
        } else if (n_filters < 64) filters[n_filters++] = argv[i];
    }
    /* env var form for `make test TESTS=...` with several words */
    int have_shared = hsi_test_shared("SOURCES.md") != NULL;
    int have_cuda = hsi_cuda_device_count() > 0;
    if (require_cuda && !have_cuda) {
        fprintf(stderr, "hsi_tests: --require-cuda given but no CUDA device is present (%s)\n",
                hsi_cuda_built() ? "CUDA build" : "CPU-only build");
        return 1;
    }
    hsi_set_quiet(1);
    if (CU_initialize_registry() != CUE_SUCCESS) return 2;
    /* sort suites by name so the order does not depend on link order */
    const char *order[MAX_SUITES];
    for (int s = 0; s < n_suites; s++) order[s] = suites[s].name;
    qsort(order, (size_t)n_suites, sizeof *order, cmp_suite);
    int inactive_shared = 0, inactive_cuda = 0, inactive_numpy = 0, have_numpy = -1;
    int inactive_mpi = 0, have_mpi = -1;
    for (int o = 0; o < n_suites; o++) {
        int s = 0;
        while (strcmp(suites[s].name, order[o]) != 0) s++;
        if (n_filters) {
            int hit = 0;
            for (int f = 0; f < n_filters; f++) hit |= strstr(suites[s].name, filters[f]) != NULL;
            if (!hit) continue;
        }
        CU_pSuite cs = CU_add_suite(suites[s].name, NULL, NULL);
        for (const hsi_test_case *c = suites[s].cases; c->name; c++) CU_add_test(cs, c->name, c->fn);
        if ((suites[s].flags & HSI_SUITE_NEEDS_SHARED) && !have_shared) {
            CU_set_suite_active(cs, CU_FALSE);
            inactive_shared++;
        }
        if ((suites[s].flags & HSI_SUITE_NEEDS_CUDA) && !have_cuda) {
            CU_set_suite_active(cs, CU_FALSE);
            inactive_cuda++;
        }
        if (suites[s].flags & HSI_SUITE_NEEDS_MPI) {
            if (have_mpi < 0)
                have_mpi = hsi_dist_built() && system("command -v mpirun >/dev/null 2>&1") == 0;
            if (!have_mpi) {
                CU_set_suite_active(cs, CU_FALSE);
                inactive_mpi++;
            }
        }
        if (suites[s].flags & HSI_SUITE_NEEDS_NUMPY) {
            if (have_numpy < 0)
                have_numpy = system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
            if (!have_numpy) {
                CU_set_suite_active(cs, CU_FALSE);
                inactive_numpy++;
            }
        }
    }
    if (inactive_numpy)
        printf("skipped: %d suite(s) need numpy under /usr/bin/python3 (python3-numpy)\n",
               inactive_numpy);
    if (inactive_mpi)
        printf("skipped: %d MPI suite(s): %s\n", inactive_mpi,
               hsi_dist_built() ? "no mpirun on PATH (openmpi-bin)"
                                : "not an MPI build (make test-mpi builds one and runs them)");
    if (inactive_shared)
        printf("skipped: %d suite(s) need ../shared/data, which is absent\n", inactive_shared);
    if (inactive_cuda)
        printf("skipped: %d CUDA suite(s): no CUDA device here (%s)\n", inactive_cuda,
               hsi_cuda_built() ? "CUDA build" : "CPU-only build");
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned fails = CU_get_number_of_failures();
    unsigned tests_failed = CU_get_number_of_tests_failed();
    unsigned run = CU_get_number_of_tests_run();
    CU_cleanup_registry();
    printf("\n%u passed, %u failed\n", run - tests_failed, tests_failed);
    if (run == 0) {
        fprintf(stderr, "hsi_tests: no test ran\n");
        return 1;
    }
    return fails ? (tests_failed ? (int)(tests_failed > 255 ? 255 : tests_failed) : 1) : 0;
}

char *hsi_test_threads_set(const char *n)
{
    const char *prev = getenv("HSI_THREADS");
    char *saved = prev ? strdup(prev) : NULL;
    setenv("HSI_THREADS", n, 1);
    return saved;
}

void hsi_test_threads_restore(char *saved)
{
    if (saved) setenv("HSI_THREADS", saved, 1);
    else unsetenv("HSI_THREADS");
    free(saved);
}

/* test_cuda_plugin.c — CUDA as a plugin: no CUDA library is linked into the
 * test runner or the hsi binary, none is mapped before the first device
 * request, the first request loads libhsi_cuda.so (and with it the CUDA
 * runtime), and every way of not getting a device says why: the plugin
 * file and dlerror's text, or the CUDA runtime's own error string. Fresh
 * processes are this runner re-executed in a child mode that acts in a
 * constructor, before main, and exits. Runs in every build and on machines
 * without a GPU; not a test of the kernels (test_cuda.c). */
#define _GNU_SOURCE
#include "test.h"

#include <unistd.h>

#include "core/cuda_plugin.h"
#include "kernels/cuda.h"
#include "models/layers_cuda.h"

#define CHILD_ENV "HSI_TEST_CUDA_PLUGIN_CHILD"

/* 1 when a mapping of this process names `lib` (e.g. "libcudart"). */
static int mapped(const char *lib)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int hit = 0;
    if (!f) return -1;
    while (!hit && fgets(line, sizeof line, f)) hit = strstr(line, lib) != NULL;
    fclose(f);
    return hit;
}

static int g_cudart_at_start = -1, g_cublas_at_start = -1;

/* One line per fact, read back by the parent: the device request in a
 * fresh process, before main (so the runner has asked nothing yet). */
static void child_main(void)
{
    printf("before=%d %d\n", mapped("libcudart"), mapped("libcublas"));
    printf("built=%d\n", hsi_cuda_built());
    printf("after_built=%d\n", mapped("libcudart"));
    int n = hsi_cuda_device_count();
    printf("count=%d\n", n);
    hsi_status st = hsi_cuda_require("plugin test");
    printf("require=%d|%s\n", (int)st, st == HSI_OK ? "" : hsi_last_error());
    const hsi_cuda_plugin *t = hsi_cuda_plugin_get();
    const char *why = NULL;
    if (t) t->device_count(&why);
    printf("why=%s\n", why ? why : "");
    float y = 0;
    st = hsi_relu_forward_cuda(&y, &y, 1);
    printf("relu=%d|%s\n", (int)st, st == HSI_OK ? "" : hsi_last_error());
    hsi_buffer *b = NULL;
    st = hsi_buffer_alloc(&b, 64, HSI_BUF_PINNED);
    printf("pinned=%d|%s\n", (int)st, st == HSI_OK ? "" : hsi_last_error());
    hsi_buffer_release(b);
    printf("after=%d %d\n", mapped("libcudart"), mapped("libcublas"));
    fflush(stdout);
}

__attribute__((constructor)) static void cuda_plugin_at_load(void)
{
    g_cudart_at_start = mapped("libcudart");
    g_cublas_at_start = mapped("libcublas");
    if (getenv(CHILD_ENV)) {
        child_main();
        _exit(0);
    }
}

/* The value of "key=" in the child's output (up to the end of its line),
 * copied into v; "" when absent. */
static const char *field(const char *out, const char *key, char *v, size_t n)
{
    char k[64];
    snprintf(k, sizeof k, "\n%s=", key);
    const char *p = NULL;
    if (strncmp(out, k + 1, strlen(k + 1)) == 0) p = out + strlen(k + 1);
    else if ((p = strstr(out, k))) p += strlen(k);
    v[0] = 0;
    if (!p) return v;
    size_t i = 0;
    while (p[i] && p[i] != '\n' && i + 1 < n) {
        v[i] = p[i];
        i++;
    }
    v[i] = 0;
    return v;
}

/* Runs this runner as a fresh child with `env` prepended; 0 on success. */
static int run_child(char *out, size_t n, const char *env)
{
    char exe[4096];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) return -1;
    exe[k] = 0;
    return hsi_test_run(out, n, "env %s %s=1 '%s'", env, CHILD_ENV, exe);
}

static int has(const char *hay, const char *needle)
{
    int ok = strstr(hay, needle) != NULL;
    if (!ok) fprintf(stderr, "\n  '%s' lacks '%s'\n", hay, needle);
    return ok;
}

/* (a) nothing mapped before the first request; the request loads the
 * plugin and the runtime; no device gives the runtime's own words. */
static void test_first_request(void)
{
    CU_ASSERT_EQUAL(g_cudart_at_start, 0); /* this runner, before main */
    CU_ASSERT_EQUAL(g_cublas_at_start, 0);
    static char out[16384];
    char v[4096];
    CU_ASSERT_EQUAL_FATAL(run_child(out, sizeof out, ""), 0);
    CU_ASSERT_STRING_EQUAL(field(out, "before", v, sizeof v), "0 0");
    CU_ASSERT_STRING_EQUAL(field(out, "after_built", v, sizeof v), "0"); /* asking is free */
    int plugin = hsi_cuda_plugin_loaded(); /* the runner asked for the device count */
    if (!plugin) {
        /* a build without the plugin: the reason names the file and dlerror */
        CU_ASSERT_EQUAL(hsi_cuda_built(), 0);
        CU_ASSERT_STRING_EQUAL(field(out, "count", v, sizeof v), "0");
        field(out, "require", v, sizeof v);
        CU_ASSERT_EQUAL(atoi(v), HSI_ERR_NO_CUDA);
        CU_ASSERT(has(v, "plugin test: no CUDA plugin: libhsi_cuda.so"));
        CU_ASSERT(has(v, "cannot open shared object file"));
        CU_ASSERT_STRING_EQUAL(field(out, "after", v, sizeof v), "0 0");
        return;
    }
    CU_ASSERT_EQUAL(hsi_cuda_built(), 1);
    CU_ASSERT_EQUAL(mapped("libcudart"), 1); /* in this runner, after the count */
    CU_ASSERT_STRING_EQUAL(field(out, "after", v, sizeof v), "1 1");
    int n = atoi(field(out, "count", v, sizeof v));
    CU_ASSERT_EQUAL(n, hsi_cuda_device_count());
    if (n > 0) {
        CU_ASSERT_STRING_EQUAL(field(out, "require", v, sizeof v), "0|");
        CU_ASSERT_EQUAL(hsi_cuda_require("x"), HSI_OK);
        return;
    }
    /* no device: the runtime's error string, in the child and here */
    char why[512];
    field(out, "why", why, sizeof why);
    CU_ASSERT(strlen(why) > 5);
    field(out, "require", v, sizeof v);
    CU_ASSERT_EQUAL(atoi(v), HSI_ERR_NO_CUDA);
    CU_ASSERT(has(v, "plugin test: CUDA was asked for, but the CUDA runtime says: "));
    CU_ASSERT(has(v, why));
    field(out, "relu", v, sizeof v);
    CU_ASSERT_EQUAL(atoi(v), HSI_ERR_NO_CUDA);
    CU_ASSERT(has(v, why));
    field(out, "pinned", v, sizeof v);
    CU_ASSERT_EQUAL(atoi(v), HSI_ERR_NO_CUDA);
    CU_ASSERT(has(v, "cannot allocate pinned memory"));
    CU_ASSERT(has(v, why));
    const char *needle = why;
    HSI_CHECK_FAILS(hsi_cuda_require("x"), HSI_ERR_NO_CUDA, needle);
    HSI_CHECK_FAILS(hsi_cuda_require("x"), HSI_ERR_NO_CUDA, "x: CUDA was asked for");
}

/* (b) HSI_CUDA_PLUGIN naming a missing file: the error names it and
 * carries dlerror's text; nothing of CUDA gets mapped. */
static void test_plugin_missing(void)
{
    static char out[16384];
    char v[4096];
    CU_ASSERT_EQUAL_FATAL(
        run_child(out, sizeof out, "HSI_CUDA_PLUGIN=/nonexistent/libhsi_cuda.so"), 0);
    CU_ASSERT_STRING_EQUAL(field(out, "built", v, sizeof v), "0");
    CU_ASSERT_STRING_EQUAL(field(out, "count", v, sizeof v), "0");
    field(out, "require", v, sizeof v);
    CU_ASSERT_EQUAL(atoi(v), HSI_ERR_NO_CUDA);
    CU_ASSERT(has(v, "plugin test: cannot load the CUDA plugin /nonexistent/libhsi_cuda.so "
                     "(from HSI_CUDA_PLUGIN): "));
    CU_ASSERT(has(v, "/nonexistent/libhsi_cuda.so: cannot open shared object file: No such "
                     "file or directory"));
    field(out, "relu", v, sizeof v);
    CU_ASSERT_EQUAL(atoi(v), HSI_ERR_NO_CUDA);
    CU_ASSERT(has(v, "relu: cannot load the CUDA plugin /nonexistent/libhsi_cuda.so"));
    field(out, "pinned", v, sizeof v);
    CU_ASSERT_EQUAL(atoi(v), HSI_ERR_NO_CUDA);
    CU_ASSERT(has(v, "cannot allocate pinned memory: cannot load the CUDA plugin"));
    CU_ASSERT_STRING_EQUAL(field(out, "after", v, sizeof v), "0 0");
}

/* (c) neither this runner nor the hsi binary links a CUDA library, and
 * `hsi --help` loads none. */
static void test_no_cuda_linked(void)
{
    static char out[65536];
    char exe[4096];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    CU_ASSERT_FATAL(k > 0);
    exe[k] = 0;
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, "ldd '%s'", exe), 0);
    CU_ASSERT(strstr(out, "libcudart") == NULL && strstr(out, "libcublas") == NULL);
    CU_ASSERT(strstr(out, "libhsi_cuda") == NULL);
    if (access(HSI_BIN, X_OK) != 0) {
        fprintf(stderr, "\n  %s is absent: its checks skipped\n", HSI_BIN);
        return;
    }
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, "ldd %s", HSI_BIN), 0);
    CU_ASSERT(strstr(out, "libcudart") == NULL && strstr(out, "libcublas") == NULL);
    CU_ASSERT(strstr(out, "libhsi_cuda") == NULL);
    /* glibc's loader lists every object it loads, dlopen'ed ones too (a
     * build without the plugin may look for libhsi_cuda.so on the search
     * path, and not find it) */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, "LD_DEBUG=files %s --help", HSI_BIN), 0);
    CU_ASSERT(strstr(out, "file=libc.so") != NULL); /* LD_DEBUG did report */
    CU_ASSERT(strstr(out, "libcudart") == NULL && strstr(out, "libcublas") == NULL);
}

/* The stream setting lives in libhsi: setting one loads nothing. */
static void test_stream_local(void)
{
    void *prev = hsi_cuda_set_stream((void *)0x10);
    CU_ASSERT_PTR_EQUAL(hsi_cuda_stream(), (void *)0x10);
    CU_ASSERT_PTR_EQUAL(hsi_cuda_set_stream(prev), (void *)0x10);
    CU_ASSERT_PTR_EQUAL(hsi_cuda_stream(), prev);
}

HSI_SUITE(cuda_plugin, 0, {"first device request loads the plugin", test_first_request},
          {"HSI_CUDA_PLUGIN missing: file and dlerror", test_plugin_missing},
          {"no CUDA library linked or loaded by --help", test_no_cuda_linked},
          {"stream setting is local", test_stream_local})

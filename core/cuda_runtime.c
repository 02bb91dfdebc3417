/* cuda_runtime.c — libhsi's side of the CUDA plugin: finds and dlopens
 * libhsi_cuda.so once, on the first device request, and hands out its
 * function table (core/cuda_plugin.h); pinned/device buffers and the device
 * count forward through it. The same in every build: nothing here includes
 * or links CUDA, and a program that never asks for a device loads nothing.
 * Not the CUDA code itself (core/cuda_plugin.cu and the *.cu files). */
#define _GNU_SOURCE
#include "core/cuda_plugin.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

hsi_status hsi_cuda_alloc_buffer(hsi_buffer *b, size_t size, hsi_buf_kind kind);
/* core/cuda_host.c: what the plugin takes from libhsi */
extern void *const hsi_cuda_host_symbols[];

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static const hsi_cuda_plugin *g_table; /* set once by load_plugin */
static int g_state;                     /* 0 not tried, 1 loaded, -1 failed */
static char g_why[3072];                /* why it could not be loaded */

/* The directory of the object that holds this code: libhsi.so's, or the
 * executable's for a static link. Also promotes a dlopen'ed libhsi.so to
 * global scope, so that the plugin's references to libhsi's core
 * functions resolve to this copy. "" when unknown. */
static void home_dir(char *dir, size_t n)
{
    Dl_info info;
    struct link_map *lm = NULL;
    char path[PATH_MAX] = "";
    dir[0] = 0;
    if (dladdr1((void *)hsi_cuda_plugin_get, &info, (void **)&lm, RTLD_DL_LINKMAP) && lm &&
        lm->l_name && lm->l_name[0]) {
        snprintf(path, sizeof path, "%s", lm->l_name);
        void *self = dlopen(lm->l_name, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
        (void)self; /* one more reference, kept for the life of the process */
    } else {
        ssize_t k = readlink("/proc/self/exe", path, sizeof path - 1);
        if (k <= 0) return;
        path[k] = 0;
    }
    char *slash = strrchr(path, '/');
    if (!slash) return;
    *slash = 0;
    snprintf(dir, n, "%s", path[0] ? path : "/");
}

/* Entry point + ABI check of a loaded plugin; 1 on success, else 0 with
 * g_why set. */
static int use_plugin(void *h, const char *path, const char *how)
{
    hsi_cuda_plugin_entry_fn entry;
    *(void **)&entry = dlsym(h, HSI_CUDA_PLUGIN_ENTRY);
    if (!entry) {
        snprintf(g_why, sizeof g_why, "the CUDA plugin %s (%s) has no entry point: %s", path,
                 how, dlerror());
        return 0;
    }
    const hsi_cuda_plugin *t = entry();
    if (!t || t->abi != HSI_CUDA_PLUGIN_ABI || t->size < sizeof *t) {
        snprintf(g_why, sizeof g_why,
                 "the CUDA plugin %s (%s) has ABI %u with a %u-byte table; this libhsi expects "
                 "ABI %d with %zu bytes (rebuild the plugin with this libhsi)",
                 path, how, t ? t->abi : 0u, t ? t->size : 0u, HSI_CUDA_PLUGIN_ABI, sizeof *t);
        return 0; /* not dlclosed: its constructors registered kernels with cudart */
    }
    g_table = t;
    return 1;
}

/* RTLD_NOW: a symbol the plugin lacks is reported here, by name, rather
 * than at its first call. */
static int open_plugin(const char *path, const char *how)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(g_why, sizeof g_why, "cannot load the CUDA plugin %s (%s): %s", path, how,
                 dlerror());
        return 0;
    }
    return use_plugin(h, path, how);
}

/* Search order: $HSI_CUDA_PLUGIN (only that file), then beside the object
 * holding libhsi, then that directory's ../lib, then dlopen's own search
 * path (LD_LIBRARY_PATH, runpath, ld.so.cache). A candidate that exists but
 * fails to load ends the search with its own dlerror. 1 when loaded. */
static int find_and_open(void)
{
    /* keeps core/cuda_host.c (and the functions it names) in static links */
    if (!hsi_cuda_host_symbols[0]) return 0;
    const char *env = getenv("HSI_CUDA_PLUGIN");
    char dir[PATH_MAX], cand[2][PATH_MAX + 32];
    home_dir(dir, sizeof dir); /* first: a dlopen'ed libhsi to global scope, whichever plugin */
    if (env && env[0]) return open_plugin(env, "from HSI_CUDA_PLUGIN");
    int n_cand = 0;
    if (dir[0]) {
        snprintf(cand[n_cand++], sizeof cand[0], "%s/%s", dir, HSI_CUDA_PLUGIN_FILE);
        snprintf(cand[n_cand++], sizeof cand[0], "%s/../lib/%s", dir, HSI_CUDA_PLUGIN_FILE);
    }
    for (int i = 0; i < n_cand; i++)
        if (access(cand[i], F_OK) == 0)
            return open_plugin(cand[i], i == 0 ? "beside libhsi" : "in ../lib");
    void *h = dlopen(HSI_CUDA_PLUGIN_FILE, RTLD_NOW | RTLD_LOCAL);
    if (h) return use_plugin(h, HSI_CUDA_PLUGIN_FILE, "on the library search path");
    snprintf(g_why, sizeof g_why,
             "no CUDA plugin: %s is not in %s, nor in its ../lib, nor on the library search "
             "path (dlopen: %s); this hsi was built without CUDA, or the plugin was not "
             "installed beside it",
             HSI_CUDA_PLUGIN_FILE, dir[0] ? dir : "libhsi's directory", dlerror());
    return 0;
}

static void load_plugin(void)
{
    int ok = find_and_open();
    __atomic_store_n(&g_state, ok ? 1 : -1, __ATOMIC_RELEASE);
    /* a plugin that is there but does not load (another ABI, a library it
     * needs missing) would otherwise only show as no device: --device auto
     * would run on the CPU without a word (a CPU build has none: quiet) */
    if (!ok && strncmp(g_why, "no CUDA plugin", 14) != 0)
        hsi_warn("%s; CUDA is unavailable (--device auto runs on the CPU)", g_why);
}

const hsi_cuda_plugin *hsi_cuda_plugin_get(void)
{
    pthread_once(&g_once, load_plugin);
    if (!g_table) hsi_fail(HSI_ERR_NO_CUDA, "%s", g_why);
    return g_table;
}

int hsi_cuda_plugin_loaded(void) { return __atomic_load_n(&g_state, __ATOMIC_ACQUIRE) == 1; }

hsi_status hsi_cuda_plugin_require(const hsi_cuda_plugin **out, const char *what)
{
    const hsi_cuda_plugin *t = hsi_cuda_plugin_get();
    *out = NULL;
    if (!what) what = "CUDA";
    if (!t) return hsi_fail_context(HSI_ERR_NO_CUDA, "%s", what);
    hsi_status st = t->require(what);
    if (st == HSI_OK) *out = t;
    return st;
}

/* 1 when the plugin is loaded, or (before the first device request) when a
 * plugin file is where it would be looked for: `hsi --help` says "CUDA"
 * without loading the runtime. Falls back to loading it only when it could
 * only be on dlopen's search path. Whether a device is there is
 * hsi_cuda_device_count's question. */
int hsi_cuda_built(void)
{
    if (__atomic_load_n(&g_state, __ATOMIC_ACQUIRE) != 0) return g_table != NULL;
    const char *env = getenv("HSI_CUDA_PLUGIN");
    if (env && env[0]) return access(env, R_OK) == 0;
    char dir[PATH_MAX], path[PATH_MAX + 32];
    home_dir(dir, sizeof dir);
    if (dir[0]) {
        snprintf(path, sizeof path, "%s/%s", dir, HSI_CUDA_PLUGIN_FILE);
        if (access(path, R_OK) == 0) return 1;
        snprintf(path, sizeof path, "%s/../lib/%s", dir, HSI_CUDA_PLUGIN_FILE);
        if (access(path, R_OK) == 0) return 1;
    }
    pthread_once(&g_once, load_plugin);
    return g_table != NULL;
}

int hsi_cuda_device_count(void)
{
    pthread_once(&g_once, load_plugin);
    return g_table ? g_table->device_count(NULL) : 0;
}

/* Called by hsi_buffer_alloc for HSI_BUF_PINNED and HSI_BUF_DEVICE. */
hsi_status hsi_cuda_alloc_buffer(hsi_buffer *b, size_t size, hsi_buf_kind kind)
{
    const hsi_cuda_plugin *t;
    hsi_status st = hsi_cuda_plugin_require(
        &t, kind == HSI_BUF_PINNED ? "cannot allocate pinned memory"
                                   : "cannot allocate device memory");
    if (st != HSI_OK) return st;
    return t->alloc_buffer(b, size, kind);
}

/* ------------------------------------------------- the backend rule */

hsi_status hsi_device_parse(hsi_device *out, const char *text, const char *what)
{
    static const struct { const char *name; hsi_device d; } names[] = {
        {"cpu", HSI_DEVICE_CPU}, {"cuda", HSI_DEVICE_CUDA}, {"auto", HSI_DEVICE_AUTO}};
    for (size_t i = 0; text && i < sizeof names / sizeof names[0]; i++)
        if (!strcasecmp(text, names[i].name)) {
            *out = names[i].d;
            return HSI_OK;
        }
    return hsi_fail(HSI_ERR_ARG, "%s expects cpu, cuda or auto (got '%s')", what ? what : "--device",
                    text ? text : "");
}

const char *hsi_device_name(hsi_device d)
{
    return d == HSI_DEVICE_CUDA ? "cuda" : d == HSI_DEVICE_AUTO ? "auto" : "cpu";
}

hsi_status hsi_device_pick(hsi_device *out, hsi_device want, int data_on_device, const char *op,
                           const char *cuda_unsupported)
{
    const hsi_cuda_plugin *t;
    *out = HSI_DEVICE_CPU;
    if (!op) op = "this op";
    if (data_on_device) {
        if (cuda_unsupported)
            return hsi_fail(HSI_ERR_UNSUPPORTED,
                            "%s: the data is in device memory, and the GPU kernel does not take "
                            "this call: %s (copy it to the host first)", op, cuda_unsupported);
        *out = HSI_DEVICE_CUDA;
        return HSI_OK;
    }
    if (want == HSI_DEVICE_CPU) return HSI_OK;
    if (cuda_unsupported) {
        if (want == HSI_DEVICE_AUTO) return HSI_OK;
        return hsi_fail(HSI_ERR_UNSUPPORTED, "%s with --device cuda: the GPU kernel does not take "
                                             "this call: %s (use --device cpu or auto)",
                        op, cuda_unsupported);
    }
    if (want == HSI_DEVICE_AUTO) {
        if (hsi_cuda_device_count() > 0) *out = HSI_DEVICE_CUDA;
        return HSI_OK;
    }
    hsi_status st = hsi_cuda_plugin_require(&t, op);
    if (st == HSI_OK) *out = HSI_DEVICE_CUDA;
    return st;
}

hsi_status hsi_device_resolve(hsi_device *out, hsi_device want, const char *what)
{
    return hsi_device_pick(out, want, 0, what ? what : "--device cuda", NULL);
}

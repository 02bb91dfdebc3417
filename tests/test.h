/* test.h — what every test file includes: CUnit, self-registering suites
 * and helpers for ../shared data. Not part of the library. */
#ifndef HSI_TEST_H
#define HSI_TEST_H

#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

typedef struct hsi_test_case {
    const char *name;
    void (*fn)(void);
} hsi_test_case;

enum {
    HSI_SUITE_NEEDS_SHARED = 1, /* inactive when ../shared/data is absent */
    HSI_SUITE_NEEDS_CUDA = 2,   /* inactive when no CUDA device is present */
    HSI_SUITE_NEEDS_NUMPY = 4,  /* inactive when /usr/bin/python3 cannot import numpy */
    HSI_SUITE_NEEDS_MPI = 8     /* inactive unless built with MPI=1 and mpirun is on PATH */
};

void hsi_test_register(const char *name, const hsi_test_case *cases, int flags);

/* HSI_SUITE(name, flags, {"case", fn}, ...) registers a suite at load time. */
#define HSI_SUITE(sname, flags, ...)                                           \
    static const hsi_test_case sname##_cases[] = {__VA_ARGS__, {NULL, NULL}};  \
    __attribute__((constructor)) static void sname##_register(void)           \
    {                                                                          \
        hsi_test_register(#sname, sname##_cases, (flags));                     \
    }

/* Path of a file under the shared data folder (../shared/data or
 * $HSI_SHARED_DATA), or NULL when absent. Returned string is static per
 * call site-free: copy it if you need two at once. */
const char *hsi_test_shared(const char *rel);
/* A scratch directory for this run (created once, removed at exit). */
const char *hsi_test_tmpdir(void);
/* Joins tmpdir and name into a static buffer (rotates among 8 buffers). */
const char *hsi_test_tmp(const char *name);
/* A PNG as GDAL decodes it: (h, w, 3) packed RGB, malloc'd; NULL when GDAL
 * cannot read it as a 3-band PNG. */
uint8_t *hsi_test_png_rgb(const char *path, int *w, int *h);
/* 1 when GDAL reads path as a PNG and decodes every pixel; its width,
 * height and band count. */
int hsi_test_png_size(const char *path, int *w, int *h, int *n);

/* Assert that an hsi call succeeded; prints hsi_last_error() when not. */
#define HSI_CHECK_OK(expr)                                                     \
    do {                                                                       \
        hsi_status st_ = (expr);                                               \
        if (st_ != HSI_OK)                                                     \
            fprintf(stderr, "\n  %s:%d: %s -> %s: %s\n", __FILE__, __LINE__,   \
                    #expr, hsi_status_name(st_), hsi_last_error());            \
        CU_ASSERT_EQUAL_FATAL(st_, HSI_OK);                                    \
    } while (0)

/* Assert a specific failure whose message contains `needle`. */
#define HSI_CHECK_FAILS(expr, code, needle)                                    \
    do {                                                                       \
        hsi_status st_ = (expr);                                               \
        CU_ASSERT_EQUAL(st_, (code));                                          \
        if (st_ != (code))                                                     \
            fprintf(stderr, "\n  %s:%d: %s gave %s (%s)\n", __FILE__, __LINE__, \
                    #expr, hsi_status_name(st_), hsi_last_error());            \
        if ((needle) && !strstr(hsi_last_error(), (needle))) {                 \
            fprintf(stderr, "\n  %s:%d: message '%s' lacks '%s'\n", __FILE__,  \
                    __LINE__, hsi_last_error(), (const char *)(needle));       \
            CU_FAIL("error message lacks the expected words");                 \
        }                                                                      \
    } while (0)

/* The hsi binary the suite runs (make test builds it first; the Makefile
 * passes the build's own, so `make san` runs the sanitized one). */
#ifndef HSI_BIN
#define HSI_BIN "./build/hsi"
#endif
/* Runs a shell command (printf format), captures stdout+stderr into out
 * (NUL-terminated, cut at n - 1 bytes) and returns its exit status (-1 when
 * it could not run or was killed). */
/* Sets HSI_THREADS to n for a test and returns what it was (NULL: unset);
 * hsi_test_threads_restore puts that back and frees it. */
char *hsi_test_threads_set(const char *n);
void hsi_test_threads_restore(char *saved);
int hsi_test_run(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* 1 when files a and b hold the same bytes (both readable). */
int hsi_test_same_file(const char *a, const char *b);
/* dir_a/name and dir_b/name, the same bytes (says which differs on stderr) */
int hsi_test_same_in(const char *dir_a, const char *dir_b, const char *name);
/* A JSON file parsed with cJSON (NULL when unreadable or not JSON). */
struct cJSON *hsi_test_load_json(const char *path);

#define HSI_ASSERT_NEAR(a, b, tol) CU_ASSERT_DOUBLE_EQUAL((a), (b), (tol))

/* CUDA suites (tests/test_cuda.c): max |got - want| <= atol + rtol *
 * max|want| over n floats (NaN fails), the worst element said on stderr
 * under `what`; asserts and returns 1 when it holds. */
int hsi_test_close_f32(const float *got, const float *want, int64_t n, double rtol, double atol,
                       const char *what);

#endif

/* bands.c — band list parsing (indices and wavelength ranges), bbl
 * filtering, variance ranking and OPBS via pivoted Cholesky (LAPACKE).
 * Plain arrays only; reads no files. */
#include "bands.h"
#include "io/meta.h"
#include "kern_internal.h"

#include <ctype.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *skip_ws(const char *p)
{
    while (*p && isspace((unsigned char)*p)) p++;
    return p;
}

/* Reads a non-negative integer; returns NULL when none. */
static const char *read_int(const char *p, long long *v)
{
    p = skip_ws(p);
    if (!isdigit((unsigned char)*p)) return NULL;
    char *end;
    *v = strtoll(p, &end, 10);
    return skip_ws(end);
}

hsi_status hsi_bands_parse(int64_t **out, int64_t *n_out, const char *spec, int64_t n_bands)
{
    hsi_status st = HSI_OK;
    int64_t *list = NULL, n = 0, cap = 0;
    uint8_t *seen = NULL;
    *out = NULL;
    *n_out = 0;
    if (!spec || !*skip_ws(spec)) return HSI_FAIL(HSI_ERR_ARG, "band list: empty (expected e.g. '1-20,35,40-')");
    seen = calloc((size_t)n_bands + 1, 1);
    if (!seen) return HSI_FAIL(HSI_ERR_NOMEM, "band list: out of memory");
    const char *p = spec;
    while (1) {
        const char *item = skip_ws(p);
        long long a = 1, b;
        const char *q = read_int(item, &a);
        int has_a = q != NULL;
        if (!q) q = item;
        if (*q == '-') {
            const char *r = read_int(q + 1, &b);
            if (!r) {
                b = n_bands;
                r = skip_ws(q + 1);
            }
            if (!has_a && r == skip_ws(q + 1)) {
                st = HSI_FAIL(HSI_ERR_ARG, "band list '%s': '-' needs a band on at least one side (at offset %d)",
                              spec, (int)(q - spec));
                goto cleanup;
            }
            q = r;
        } else if (!has_a) {
            st = HSI_FAIL(HSI_ERR_ARG, "band list '%s': expected a band number or range at offset %d, found '%c'",
                          spec, (int)(item - spec), *item ? *item : ' ');
            goto cleanup;
        } else {
            b = a;
        }
        if (*q != ',' && *q != 0) {
            st = HSI_FAIL(HSI_ERR_ARG, "band list '%s': expected ',' or the end at offset %d, found '%c'", spec,
                          (int)(q - spec), *q);
            goto cleanup;
        }
        if (a < 1 || b > n_bands || a > b) {
            st = HSI_FAIL(HSI_ERR_ARG, "band list '%s': range %lld-%lld is outside 1..%lld or reversed", spec, a,
                          b, (long long)n_bands);
            goto cleanup;
        }
        for (long long i = a; i <= b; i++) {
            if (seen[i - 1]) {
                st = HSI_FAIL(HSI_ERR_ARG, "band list '%s': band %lld is listed twice", spec, i);
                goto cleanup;
            }
            seen[i - 1] = 1;
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                int64_t *nl = realloc(list, sizeof(int64_t) * (size_t)cap);
                if (!nl) {
                    st = HSI_FAIL(HSI_ERR_NOMEM, "band list: out of memory");
                    goto cleanup;
                }
                list = nl;
            }
            list[n++] = i - 1;
        }
        if (*q == 0) break;
        p = q + 1;
    }
    *out = list;
    *n_out = n;
    list = NULL;
cleanup:
    free(list);
    free(seen);
    return st;
}

hsi_status hsi_bands_from_wavelengths(int64_t **out, int64_t *n_out, const char *spec,
                                      const double *wl, int64_t n_bands)
{
    hsi_status st = HSI_OK;
    double lo[256], hi[256];
    int nr = 0;
    int64_t *list = NULL, n = 0;
    *out = NULL;
    *n_out = 0;
    if (!wl) return HSI_FAIL(HSI_ERR_ARG, "wavelength ranges: the cube has no 'wavelength' list");
    if (!spec || !*skip_ws(spec))
        return HSI_FAIL(HSI_ERR_ARG, "wavelength ranges: empty (expected e.g. '400-1340,1450-1800')");
    const char *p = spec;
    while (1) {
        char *end;
        const char *s = skip_ws(p);
        double a = strtod(s, &end);
        if (end == s) {
            st = HSI_FAIL(HSI_ERR_ARG, "wavelength ranges '%s': expected a number (nm) at offset %d", spec,
                          (int)(s - spec));
            goto cleanup;
        }
        s = skip_ws(end);
        double b = a;
        if (*s == '-') {
            const char *t = skip_ws(s + 1);
            b = strtod(t, &end);
            if (end == t) {
                st = HSI_FAIL(HSI_ERR_ARG, "wavelength ranges '%s': expected the end of the range at offset %d",
                              spec, (int)(t - spec));
                goto cleanup;
            }
            s = skip_ws(end);
        }
        if (!(a <= b)) {
            st = HSI_FAIL(HSI_ERR_ARG, "wavelength ranges '%s': range %g-%g is reversed", spec, a, b);
            goto cleanup;
        }
        if (nr == 256) {
            st = HSI_FAIL(HSI_ERR_ARG, "wavelength ranges '%s': more than 256 ranges", spec);
            goto cleanup;
        }
        lo[nr] = a;
        hi[nr++] = b;
        if (*s == 0) break;
        if (*s != ',') {
            st = HSI_FAIL(HSI_ERR_ARG, "wavelength ranges '%s': expected ',' at offset %d, found '%c'", spec,
                          (int)(s - spec), *s);
            goto cleanup;
        }
        p = s + 1;
    }
    list = malloc(sizeof(int64_t) * (size_t)(n_bands > 0 ? n_bands : 1));
    if (!list) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "wavelength ranges: out of memory");
        goto cleanup;
    }
    for (int64_t b = 0; b < n_bands; b++)
        for (int r = 0; r < nr; r++)
            if (wl[b] >= lo[r] && wl[b] <= hi[r]) {
                list[n++] = b;
                break;
            }
    if (n == 0) {
        st = HSI_FAIL(HSI_ERR_ARG, "wavelength ranges '%s' select no band (the cube covers %g-%g nm)", spec,
                      n_bands ? wl[0] : 0.0, n_bands ? wl[n_bands - 1] : 0.0);
        goto cleanup;
    }
    *out = list;
    *n_out = n;
    list = NULL;
cleanup:
    free(list);
    return st;
}

void hsi_wavelengths_to_nm(double *wl, int64_t n, const char *units)
{
    double f = hsi_wavelength_unit_to_nm(units);
    if (f == 0) {
        double mx = 0;
        for (int64_t i = 0; i < n; i++) mx = wl[i] > mx ? wl[i] : mx;
        f = mx > 100 ? 1.0 : 1000.0;
    }
    for (int64_t i = 0; i < n; i++) wl[i] *= f;
}

void hsi_bands_drop_bad(int64_t *bands, int64_t *n, const int *bbl)
{
    if (!bbl) return;
    int64_t k = 0;
    for (int64_t i = 0; i < *n; i++)
        if (bbl[bands[i]] != 0) bands[k++] = bands[i];
    *n = k;
}

void hsi_bands_rank_variance(int64_t *order, const double *var, int64_t n)
{
    for (int64_t i = 0; i < n; i++) order[i] = i;
    /* insertion sort: stable, n is a few hundred */
    for (int64_t i = 1; i < n; i++) {
        int64_t v = order[i], j = i;
        while (j > 0 && var[order[j - 1]] < var[v]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = v;
    }
}

hsi_status hsi_bands_opbs(int64_t *sel, double *residual, const double *cov, int64_t n, int64_t k)
{
    hsi_status st = HSI_OK;
    double *a = NULL;
    lapack_int *piv = NULL, rank = 0;
    if (k < 1 || k > n) return HSI_FAIL(HSI_ERR_ARG, "opbs: asked for %lld bands out of %lld", (long long)k, (long long)n);
    a = malloc(sizeof(double) * (size_t)(n * n));
    piv = malloc(sizeof(lapack_int) * (size_t)n);
    if (!a || !piv) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "opbs: out of memory for %lld bands", (long long)n);
        goto cleanup;
    }
    memcpy(a, cov, sizeof(double) * (size_t)(n * n));
    /* a: (n, n) row-major, lower triangle overwritten by L with P^T A P = L L^T;
     * piv: 1-based pivot order = greedy max-residual band order */
    int blas_prev = hsi_kern_blas_single_begin(); /* the same bits whatever OpenBLAS's threads */
    lapack_int info = LAPACKE_dpstrf(LAPACK_ROW_MAJOR, 'L', (lapack_int)n, a, (lapack_int)n, piv, &rank, -1.0);
    hsi_kern_blas_single_end(blas_prev);
    if (info < 0) {
        st = HSI_FAIL(HSI_ERR_NUMERIC, "opbs: LAPACKE_dpstrf failed (info %d)", (int)info);
        goto cleanup;
    }
    if (rank < k)
        hsi_warn("opbs: the covariance has rank %d < %lld: picks after %d have no residual variance left",
                 (int)rank, (long long)k, (int)rank);
    for (int64_t i = 0; i < k; i++) {
        sel[i] = piv[i] - 1;
        if (residual) residual[i] = i < rank ? a[i * n + i] * a[i * n + i] : 0.0;
    }
cleanup:
    free(a);
    free(piv);
    return st;
}

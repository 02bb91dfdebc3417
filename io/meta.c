/* meta.c — lifetime, copies and verbatim-key bookkeeping of hsi_meta. The
 * ENVI text syntax lives in envi_header.c, not here. */
#define _GNU_SOURCE
#include "meta.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void hsi_meta_init(hsi_meta *m)
{
    memset(m, 0, sizeof *m);
    m->x_start = 1;
    m->y_start = 1;
}

static void free_strv(char **v, int64_t n)
{
    if (!v) return;
    for (int64_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

void hsi_meta_free(hsi_meta *m)
{
    if (!m) return;
    free(m->file_type);
    free(m->format);
    free(m->wavelength);
    free(m->fwhm);
    free(m->wavelength_units);
    free(m->bbl);
    free_strv(m->band_names, m->n_bands);
    free(m->gain);
    free(m->offset);
    free(m->coordinate_system);
    free(m->description);
    free_strv(m->class_names, m->n_classes);
    free(m->class_lookup);
    for (int i = 0; i < m->n_keys; i++) {
        free(m->keys[i].key);
        free(m->keys[i].value);
    }
    free(m->keys);
    free_strv(m->warnings, m->n_warnings);
    hsi_meta_init(m);
}

static char *dupz(const char *s) { return s ? strdup(s) : NULL; }

static void *dup_mem(const void *p, size_t n)
{
    if (!p || !n) return NULL;
    void *q = malloc(n);
    if (q) memcpy(q, p, n);
    return q;
}

static char **dup_strv(char *const *v, int64_t n, int *bad)
{
    if (!v) return NULL;
    char **r = calloc((size_t)(n ? n : 1), sizeof *r);
    if (!r) {
        *bad = 1;
        return NULL;
    }
    for (int64_t i = 0; i < n; i++)
        if (v[i] && !(r[i] = strdup(v[i]))) *bad = 1;
    return r;
}

hsi_status hsi_meta_copy(hsi_meta *dst, const hsi_meta *src)
{
    int bad = 0;
    size_t nb = (size_t)(src->n_bands > 0 ? src->n_bands : 0);
    hsi_meta d = *src;
    d.file_type = dupz(src->file_type);
    d.format = dupz(src->format);
    d.wavelength = dup_mem(src->wavelength, nb * sizeof(double));
    d.fwhm = dup_mem(src->fwhm, nb * sizeof(double));
    d.wavelength_units = dupz(src->wavelength_units);
    d.bbl = dup_mem(src->bbl, nb * sizeof(int));
    d.band_names = dup_strv(src->band_names, src->n_bands, &bad);
    d.gain = dup_mem(src->gain, nb * sizeof(double));
    d.offset = dup_mem(src->offset, nb * sizeof(double));
    d.coordinate_system = dupz(src->coordinate_system);
    d.description = dupz(src->description);
    d.class_names = dup_strv(src->class_names, src->n_classes, &bad);
    d.class_lookup = dup_mem(src->class_lookup, (size_t)src->n_classes * 3);
    d.keys = NULL;
    d.n_keys = 0;
    d.warnings = dup_strv(src->warnings, src->n_warnings, &bad);
    if (src->n_keys) {
        d.keys = calloc((size_t)src->n_keys, sizeof *d.keys);
        if (!d.keys) bad = 1;
        else {
            d.n_keys = src->n_keys;
            for (int i = 0; i < src->n_keys; i++) {
                d.keys[i].key = dupz(src->keys[i].key);
                d.keys[i].value = dupz(src->keys[i].value);
                d.keys[i].braced = src->keys[i].braced;
                if (!d.keys[i].key || (src->keys[i].value && !d.keys[i].value)) bad = 1;
            }
        }
    }
    if (bad) {
        hsi_meta_free(&d);
        return HSI_FAIL(HSI_ERR_NOMEM, "out of memory copying metadata");
    }
    *dst = d;
    return HSI_OK;
}

void hsi_meta_normkey(char *dst, size_t n, const char *key)
{
    size_t o = 0;
    int space = 0;
    if (!n) return;
    while (*key && isspace((unsigned char)*key)) key++;
    for (; *key && o + 1 < n; key++) {
        unsigned char c = (unsigned char)*key;
        if (isspace(c)) {
            space = 1;
            continue;
        }
        if (space && o > 0 && o + 2 < n) dst[o++] = ' ';
        space = 0;
        dst[o++] = (char)tolower(c);
    }
    dst[o] = 0;
}

static int key_eq(const char *a, const char *b)
{
    char x[256], y[256];
    hsi_meta_normkey(x, sizeof x, a);
    hsi_meta_normkey(y, sizeof y, b);
    return strcmp(x, y) == 0;
}

const hsi_kv *hsi_meta_find(const hsi_meta *m, const char *key)
{
    for (int i = 0; i < m->n_keys; i++)
        if (key_eq(m->keys[i].key, key)) return &m->keys[i];
    return NULL;
}

hsi_status hsi_meta_set(hsi_meta *m, const char *key, const char *value, int braced)
{
    for (int i = 0; i < m->n_keys; i++)
        if (key_eq(m->keys[i].key, key)) {
            char *v = dupz(value ? value : "");
            if (!v) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            free(m->keys[i].value);
            m->keys[i].value = v;
            m->keys[i].braced = braced;
            return HSI_OK;
        }
    hsi_kv *k = realloc(m->keys, (size_t)(m->n_keys + 1) * sizeof *k);
    if (!k) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    m->keys = k;
    k[m->n_keys].key = strdup(key);
    k[m->n_keys].value = strdup(value ? value : "");
    k[m->n_keys].braced = braced;
    if (!k[m->n_keys].key || !k[m->n_keys].value) {
        free(k[m->n_keys].key);
        free(k[m->n_keys].value);
        return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    }
    m->n_keys++;
    return HSI_OK;
}

void hsi_meta_unset(hsi_meta *m, const char *key)
{
    for (int i = 0; i < m->n_keys; i++)
        if (key_eq(m->keys[i].key, key)) {
            free(m->keys[i].key);
            free(m->keys[i].value);
            memmove(&m->keys[i], &m->keys[i + 1], (size_t)(m->n_keys - i - 1) * sizeof *m->keys);
            m->n_keys--;
            return;
        }
}

static int g_warn_echo = 1;

int hsi_meta_warn_echo(int on) { return __atomic_exchange_n(&g_warn_echo, on ? 1 : 0, __ATOMIC_SEQ_CST); }

void hsi_meta_warn(hsi_meta *m, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (__atomic_load_n(&g_warn_echo, __ATOMIC_SEQ_CST)) hsi_warn("%s", buf);
    char **w = realloc(m->warnings, (size_t)(m->n_warnings + 1) * sizeof *w);
    if (!w) return;
    m->warnings = w;
    if ((w[m->n_warnings] = strdup(buf))) m->n_warnings++;
}

#define SELECT_ARRAY(arr, T)                                                   \
    do {                                                                       \
        if (m->arr) {                                                          \
            T *na = malloc((size_t)(n ? n : 1) * sizeof(T));                   \
            if (!na) goto nomem;                                               \
            for (int64_t i = 0; i < n; i++) na[i] = m->arr[bands[i]];          \
            free(m->arr);                                                      \
            m->arr = na;                                                       \
        }                                                                      \
    } while (0)

hsi_status hsi_meta_select_bands(hsi_meta *m, const int64_t *bands, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (bands[i] < 0 || bands[i] >= m->n_bands)
            return HSI_FAIL(HSI_ERR_ARG, "band %lld outside 1..%lld", (long long)bands[i] + 1,
                            (long long)m->n_bands);
    SELECT_ARRAY(wavelength, double);
    SELECT_ARRAY(fwhm, double);
    SELECT_ARRAY(bbl, int);
    SELECT_ARRAY(gain, double);
    SELECT_ARRAY(offset, double);
    if (m->band_names) {
        char **nn = calloc((size_t)(n ? n : 1), sizeof *nn);
        if (!nn) goto nomem;
        for (int64_t i = 0; i < n; i++) nn[i] = dupz(m->band_names[bands[i]]);
        free_strv(m->band_names, m->n_bands);
        m->band_names = nn;
    }
    int keep = 0, newdef[3];
    for (int d = 0; d < m->n_default_bands; d++)
        for (int64_t i = 0; i < n; i++)
            if (bands[i] == m->default_bands[d]) {
                newdef[keep++] = (int)i;
                break;
            }
    m->n_default_bands = keep == m->n_default_bands ? keep : 0;
    for (int d = 0; d < m->n_default_bands; d++) m->default_bands[d] = newdef[d];
    m->n_bands = n;
    return HSI_OK;
nomem:
    return HSI_FAIL(HSI_ERR_NOMEM, "out of memory selecting bands");
}

double hsi_wavelength_unit_to_nm(const char *u)
{
    if (!u) return 0;
    while (isspace((unsigned char)*u)) u++;
    char s[64];
    hsi_meta_normkey(s, sizeof s, u);
    if (!strcmp(s, "nanometers") || !strcmp(s, "nanometer") || !strcmp(s, "nm") ||
        !strcmp(s, "nanometres"))
        return 1;
    if (!strcmp(s, "micrometers") || !strcmp(s, "micrometer") || !strcmp(s, "um") ||
        !strcmp(s, "microns") || !strcmp(s, "micron") || !strcmp(s, "micrometres") ||
        !strcmp(s, "\xc2\xb5m"))
        return 1000;
    if (!strcmp(s, "millimeters") || !strcmp(s, "millimeter") || !strcmp(s, "mm")) return 1e6;
    if (!strcmp(s, "meters") || !strcmp(s, "meter") || !strcmp(s, "m")) return 1e9;
    return 0;
}

const char *hsi_interleave_name(hsi_interleave il)
{
    switch (il) {
    case HSI_BSQ: return "bsq";
    case HSI_BIL: return "bil";
    case HSI_BIP: return "bip";
    }
    return "?";
}

void hsi_interleave_strides(hsi_interleave il, int64_t B, int64_t L, int64_t S, int64_t e,
                            int64_t st[3])
{
    switch (il) {
    case HSI_BSQ: st[0] = L * S * e; st[1] = S * e; st[2] = e; break;
    case HSI_BIL: st[0] = S * e; st[1] = B * S * e; st[2] = e; break;
    case HSI_BIP: st[0] = e; st[1] = S * B * e; st[2] = B * e; break;
    }
}

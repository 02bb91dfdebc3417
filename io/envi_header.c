/* envi_header.c — the ENVI header text parser (hsi_envi_parse): syntax,
 * required keys, caps, and the typed fields of hsi_meta. It reads memory
 * only (the fuzz entry point); finding and mapping files is envi.c's job. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "envi.h"

#define MAX_HEADER_BYTES ((size_t)64 << 20) /* 64 MiB of header text */
#define MAX_KEYS 100000
#define MAX_WARNINGS 32
#define MAX_SAMPLES_LINES ((int64_t)INT32_MAX) /* per axis */
#define MAX_BANDS ((int64_t)1 << 20)
#define MAX_CLASSES 65536

/* ------------------------------------------------------------ utilities */

typedef struct strv {
    char **v;
    int64_t n;
} strv;

static void strv_free(strv *s)
{
    for (int64_t i = 0; s->v && i < s->n; i++) free(s->v[i]);
    free(s->v);
    s->v = NULL;
    s->n = 0;
}

/* Parser state: the warnings cap and the name used in messages. */
typedef struct parser {
    hsi_meta *m;
    const char *name;
    int n_warn;
    int mute; /* 1: warnings dropped (first pass over a header without ENVI) */
    /* normalised keys, parallel to m->keys, plus an open-addressing index */
    char **norm;
    int *slot; /* index+1 into m->keys, 0 = empty */
    size_t n_slots;
} parser;

static void pwarn(parser *p, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void pwarn(parser *p, const char *fmt, ...)
{
    char buf[768];
    va_list ap;
    if (p->mute) return;
    p->n_warn++;
    if (p->n_warn > MAX_WARNINGS + 1) return;
    if (p->n_warn == MAX_WARNINGS + 1) {
        hsi_meta_warn(p->m, "%s: more warnings were suppressed", p->name);
        return;
    }
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    hsi_meta_warn(p->m, "%s: %s", p->name, buf);
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static char *normkey_dup(const char *key)
{
    size_t n = strlen(key) + 1;
    char *d = malloc(n);
    if (d) hsi_meta_normkey(d, n, key);
    return d;
}

/* Index of a normalised key in m->keys, or -1. */
static int pfind(const parser *p, const char *norm)
{
    if (!p->n_slots) return -1;
    size_t mask = p->n_slots - 1;
    for (size_t i = fnv1a(norm) & mask;; i = (i + 1) & mask) {
        int s = p->slot[i];
        if (!s) return -1;
        if (!strcmp(p->norm[s - 1], norm)) return s - 1;
    }
}

static hsi_status pindex_grow(parser *p)
{
    size_t ns = p->n_slots ? p->n_slots * 2 : 256;
    int *slot = calloc(ns, sizeof *slot);
    if (!slot) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory parsing %s", p->name);
    for (int k = 0; k < p->m->n_keys; k++)
        for (size_t i = fnv1a(p->norm[k]) & (ns - 1);; i = (i + 1) & (ns - 1))
            if (!slot[i]) {
                slot[i] = k + 1;
                break;
            }
    free(p->slot);
    p->slot = slot;
    p->n_slots = ns;
    return HSI_OK;
}

/* Stores a key (the last of duplicates wins, keeping the first position). */
static hsi_status pstore(parser *p, const char *key, char *value, int braced, int line)
{
    hsi_meta *m = p->m;
    char *norm = normkey_dup(key);
    if (!norm) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory parsing %s", p->name);
    int at = pfind(p, norm);
    if (at >= 0) {
        pwarn(p, "line %d: key '%s' appears again; the last value is used", line, key);
        free(norm);
        free(m->keys[at].value);
        m->keys[at].value = value;
        m->keys[at].braced = braced;
        return HSI_OK;
    }
    if (m->n_keys >= MAX_KEYS) {
        free(norm);
        free(value);
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: line %d: more than %d keys (the cap)", p->name,
                        line, MAX_KEYS);
    }
    if ((size_t)(m->n_keys + 1) * 2 > p->n_slots) {
        hsi_status st = pindex_grow(p);
        if (st != HSI_OK) {
            free(norm);
            free(value);
            return st;
        }
    }
    hsi_kv *k = realloc(m->keys, (size_t)(m->n_keys + 1) * sizeof *k);
    char **nv = realloc(p->norm, (size_t)(m->n_keys + 1) * sizeof *nv);
    if (k) m->keys = k;
    if (nv) p->norm = nv;
    char *kd = strdup(key);
    if (!k || !nv || !kd) {
        free(kd);
        free(norm);
        free(value);
        return HSI_FAIL(HSI_ERR_NOMEM, "out of memory parsing %s", p->name);
    }
    k[m->n_keys].key = kd;
    k[m->n_keys].value = value;
    k[m->n_keys].braced = braced;
    p->norm[m->n_keys] = norm;
    size_t mask = p->n_slots - 1;
    for (size_t i = fnv1a(norm) & mask;; i = (i + 1) & mask)
        if (!p->slot[i]) {
            p->slot[i] = m->n_keys + 1;
            break;
        }
    m->n_keys++;
    return HSI_OK;
}

static const hsi_kv *pget(const parser *p, const char *norm)
{
    int at = pfind(p, norm);
    return at >= 0 ? &p->m->keys[at] : NULL;
}

static int is_blank(int c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

/* Copy of [s, e) with blanks trimmed at both ends. */
static char *trim_dup(const char *s, const char *e)
{
    while (s < e && (is_blank((unsigned char)*s) || *s == '\n')) s++;
    while (e > s && (is_blank((unsigned char)e[-1]) || e[-1] == '\n')) e--;
    char *d = malloc((size_t)(e - s) + 1);
    if (!d) return NULL;
    memcpy(d, s, (size_t)(e - s));
    d[e - s] = 0;
    return d;
}

/* Splits a list value at commas; items trimmed; a single trailing empty
 * item (a trailing comma) is dropped; an all-blank value gives 0 items.
 * More than max_items: only the count is returned (out->v NULL), so a
 * header of commas cannot make millions of allocations. */
static hsi_status split_list(strv *out, const char *value, const char *name, int64_t max_items)
{
    out->v = NULL;
    out->n = 0;
    const char *s = value;
    while (*s && (is_blank((unsigned char)*s) || *s == '\n')) s++;
    if (!*s) return HSI_OK;
    int64_t n = 1;
    for (const char *c = s; *c; c++) n += *c == ',';
    if (n > max_items + 1) { /* +1: a trailing comma */
        const char *e = s + strlen(s);
        while (e > s && (is_blank((unsigned char)e[-1]) || e[-1] == '\n')) e--;
        out->n = (e > s && e[-1] == ',') ? n - 1 : n;
        return HSI_OK;
    }
    out->v = calloc((size_t)n, sizeof *out->v);
    if (!out->v) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory parsing %s", name);
    const char *a = s;
    for (;;) {
        const char *e = strchr(a, ',');
        if (!e) e = a + strlen(a);
        char *item = trim_dup(a, e);
        if (!item) {
            strv_free(out);
            return HSI_FAIL(HSI_ERR_NOMEM, "out of memory parsing %s", name);
        }
        out->v[out->n++] = item;
        if (!*e) break;
        a = e + 1;
    }
    if (out->n > 1 && !out->v[out->n - 1][0]) {
        free(out->v[--out->n]);
        out->v[out->n] = NULL;
    }
    return HSI_OK;
}

/* Strict integer: optional sign, digits, optional ".0..." (a float with no
 * fraction, as some writers emit); 64-bit range checked. */
static int parse_i64(const char *s, int64_t *out)
{
    while (is_blank((unsigned char)*s) || *s == '\n') s++;
    if (!*s) return 0;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno == ERANGE) return 0;
    if (*end == '.') {
        end++;
        while (*end == '0') end++;
    }
    while (is_blank((unsigned char)*end) || *end == '\n') end++;
    if (*end) return 0;
    *out = v;
    return 1;
}

static int parse_f64(const char *s, double *out)
{
    while (is_blank((unsigned char)*s) || *s == '\n') s++;
    if (!*s) return 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s) return 0;
    while (is_blank((unsigned char)*end) || *end == '\n') end++;
    if (*end) return 0;
    *out = v;
    return 1;
}

/* Short printable excerpt of a value for messages. */
static const char *excerpt(const char *v, char *buf, size_t n)
{
    size_t o = 0;
    for (; *v && o + 4 < n; v++) {
        unsigned char c = (unsigned char)*v;
        buf[o++] = (c == '\n' || c == '\r' || c == '\t') ? ' ' : (c < 0x20 || c >= 0x7f) ? '?' : (char)c;
    }
    if (*v) {
        buf[o++] = '.';
        buf[o++] = '.';
        buf[o++] = '.';
    }
    buf[o] = 0;
    return buf;
}

/* ------------------------------------------------------------- syntax */

/* The first line must be "ENVI". Returns 1 when it is. */
static int first_line_is_envi(const char *t, const char *end, char *shown, size_t n)
{
    const char *e = t;
    while (e < end && *e != '\n') e++;
    const char *a = t;
    while (a < e && is_blank((unsigned char)*a)) a++;
    const char *b = e;
    while (b > a && is_blank((unsigned char)b[-1])) b--;
    size_t k = (size_t)(b - a) < n - 1 ? (size_t)(b - a) : n - 1;
    memcpy(shown, a, k);
    shown[k] = 0;
    return (b - a) == 4 && !strncasecmp(a, "ENVI", 4);
}

static hsi_status parse_syntax(parser *p, const char *text, size_t len, int *has_magic,
                               int *n_plain, char *first, size_t first_n)
{
    hsi_status st = HSI_OK;
    const char *t = text, *end = text + len;
    /* a UTF-8 byte order mark is tolerated */
    if (len >= 3 && !memcmp(t, "\xEF\xBB\xBF", 3)) t += 3;
    *has_magic = first_line_is_envi(t, end, first, first_n);
    *n_plain = 0;
    int line = 1;
    const char *ln = t;
    if (*has_magic) { /* skip the magic line */
        while (ln < end && *ln != '\n') ln++;
        if (ln < end) ln++;
        line = 2;
    }
    while (ln < end) {
        const char *le = ln;
        while (le < end && *le != '\n') le++;
        const char *a = ln;
        while (a < le && is_blank((unsigned char)*a)) a++;
        int this_line = line;
        const char *next = le < end ? le + 1 : end;
        line++;
        if (a == le || *a == ';') { /* blank line or comment */
            ln = next;
            continue;
        }
        const char *eq = memchr(a, '=', (size_t)(le - a));
        if (!eq) {
            char ex[64], tmp[64];
            size_t k = (size_t)(le - a) < sizeof tmp - 1 ? (size_t)(le - a) : sizeof tmp - 1;
            memcpy(tmp, a, k);
            tmp[k] = 0;
            pwarn(p, "line %d: no '=' in '%s' (line ignored)", this_line,
                  excerpt(tmp, ex, sizeof ex));
            (*n_plain)++;
            ln = next;
            continue;
        }
        char *key = trim_dup(a, eq);
        if (!key) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory parsing %s", p->name);
        if (!key[0]) {
            pwarn(p, "line %d: '=' with no key before it (line ignored)", this_line);
            free(key);
            ln = next;
            continue;
        }
        const char *v = eq + 1;
        while (v < le && is_blank((unsigned char)*v)) v++;
        if (v < le && *v == '{') {
            /* braced value: up to the first '}', across lines; ';' lines
             * inside are comments; line breaks are kept as '\n' */
            size_t cap = 256, n = 0;
            char *val = malloc(cap);
            if (!val) {
                free(key);
                return HSI_FAIL(HSI_ERR_NOMEM, "out of memory parsing %s", p->name);
            }
            const char *c = v + 1, *cl = le; /* cl: end of the current line */
            int closed = 0, first_seg = 1;
            for (;;) {
                /* current segment: [c, cl) */
                const char *seg = c;
                const char *sa = seg;
                while (sa < cl && is_blank((unsigned char)*sa)) sa++;
                int comment = !first_seg && sa < cl && *sa == ';';
                const char *close = comment ? NULL : memchr(seg, '}', (size_t)(cl - seg));
                const char *stop = close ? close : cl;
                if (!comment) {
                    size_t need = (size_t)(stop - seg) + 2;
                    if (n + need > cap) {
                        while (n + need > cap) cap *= 2;
                        char *nv = realloc(val, cap);
                        if (!nv) {
                            free(val);
                            free(key);
                            return HSI_FAIL(HSI_ERR_NOMEM, "out of memory parsing %s", p->name);
                        }
                        val = nv;
                    }
                    if (!first_seg && n > 0) val[n++] = '\n';
                    for (const char *q = seg; q < stop; q++)
                        if (*q != '\r') val[n++] = *q;
                }
                if (close) {
                    const char *r = close + 1;
                    while (r < cl && is_blank((unsigned char)*r)) r++;
                    if (r < cl)
                        pwarn(p, "line %d: text after '}' of key '%s' ignored", line - 1, key);
                    closed = 1;
                    break;
                }
                if (cl >= end) break;
                /* next line */
                c = cl + 1;
                cl = c;
                while (cl < end && *cl != '\n') cl++;
                line++;
                first_seg = 0;
            }
            if (!closed) {
                free(val);
                st = HSI_FAIL(HSI_ERR_FORMAT,
                              "%s: line %d: unterminated '{' in the value of key '%s' (no "
                              "closing '}' before the end of the header)",
                              p->name, this_line, key);
                free(key);
                return st;
            }
            val[n] = 0;
            /* trim blank/newline edges of the braced text */
            char *tv = trim_dup(val, val + n);
            free(val);
            if (!tv) {
                free(key);
                return HSI_FAIL(HSI_ERR_NOMEM, "out of memory parsing %s", p->name);
            }
            st = pstore(p, key, tv, 1, this_line);
            free(key);
            if (st != HSI_OK) return st;
            /* continue after the line holding '}' */
            const char *q = c;
            while (q < end && *q != '\n') q++;
            ln = q < end ? q + 1 : end;
            continue;
        }
        char *val = trim_dup(v, le);
        if (!val) {
            free(key);
            return HSI_FAIL(HSI_ERR_NOMEM, "out of memory parsing %s", p->name);
        }
        st = pstore(p, key, val, 0, this_line);
        free(key);
        if (st != HSI_OK) return st;
        ln = next;
    }
    return HSI_OK;
}

/* ------------------------------------------------------- typed fields */

static hsi_status req_int(parser *p, const char *key, int64_t *out, int64_t lo, int64_t hi,
                          int required, int64_t dflt)
{
    const hsi_kv *kv = pget(p, key);
    char ex[80];
    if (!kv) {
        if (required)
            return HSI_FAIL(HSI_ERR_FORMAT, "%s: missing required key '%s'", p->name, key);
        *out = dflt;
        return HSI_OK;
    }
    int64_t v;
    if (!parse_i64(kv->value, &v))
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: '%s' must be an integer, found '%s'", p->name, key,
                        excerpt(kv->value, ex, sizeof ex));
    if (v < lo || v > hi) {
        if (lo == 1 && v < 1)
            return HSI_FAIL(HSI_ERR_FORMAT, "%s: '%s' must be > 0, found %lld", p->name, key,
                            (long long)v);
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: '%s' = %lld is outside %lld..%lld (the cap)",
                        p->name, key, (long long)v, (long long)lo, (long long)hi);
    }
    *out = v;
    return HSI_OK;
}

/* A per-band numeric list. Count mismatches and bad numbers are warnings
 * (the field is then left NULL). */
static hsi_status band_doubles(parser *p, const char *key, double **out)
{
    *out = NULL;
    const hsi_kv *kv = pget(p, key);
    if (!kv) return HSI_OK;
    strv items;
    hsi_status st = split_list(&items, kv->value, p->name, p->m->n_bands);
    if (st != HSI_OK) return st;
    if (!items.v || items.n != p->m->n_bands) {
        /* a spectral library's spectral axis is its samples: kept as text */
        if (p->m->file_kind == HSI_FILE_SPECLIB && items.n == p->m->n_samples) goto done;
        pwarn(p, "'%s' has %lld values for %lld bands (ignored)", key, (long long)items.n,
              (long long)p->m->n_bands);
        goto done;
    }
    double *a = malloc((size_t)items.n * sizeof *a);
    if (!a) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory parsing %s", p->name);
        goto done;
    }
    for (int64_t i = 0; i < items.n; i++)
        if (!parse_f64(items.v[i], &a[i])) {
            char ex[48];
            pwarn(p, "'%s' item %lld is '%s', not a number (key ignored)", key,
                  (long long)i + 1, excerpt(items.v[i], ex, sizeof ex));
            free(a);
            goto done;
        }
    *out = a;
done:
    strv_free(&items);
    return st;
}

static void parse_map_info(parser *p, const char *value)
{
    hsi_map_info *mi = &p->m->map_info;
    memset(mi, 0, sizeof *mi);
    strv it;
    if (split_list(&it, value, p->name, 64) != HSI_OK) return;
    double num[6];
    if (!it.v || it.n < 7) {
        pwarn(p, "'map info' has %lld items, expected at least 7 (not used)", (long long)it.n);
        goto done;
    }
    for (int i = 0; i < 6; i++)
        if (!parse_f64(it.v[i + 1], &num[i])) {
            char ex[48];
            pwarn(p, "'map info' item %d is '%s', not a number (not used)", i + 2,
                  excerpt(it.v[i + 1], ex, sizeof ex));
            goto done;
        }
    snprintf(mi->projection, sizeof mi->projection, "%s", it.v[0]);
    mi->ref_x = num[0];
    mi->ref_y = num[1];
    mi->easting = num[2];
    mi->northing = num[3];
    mi->x_size = num[4];
    mi->y_size = num[5];
    int utm = !strncasecmp(it.v[0], "UTM", 3);
    int zoned = utm || !strncasecmp(it.v[0], "State Plane", 11);
    int pos = 0; /* positional items after the 7th: zone, hemisphere, datum */
    for (int64_t i = 7; i < it.n; i++) {
        const char *s = it.v[i];
        const char *eq = strchr(s, '=');
        if (eq) {
            char k[32];
            size_t kl = (size_t)(eq - s) < sizeof k - 1 ? (size_t)(eq - s) : sizeof k - 1;
            memcpy(k, s, kl);
            k[kl] = 0;
            char nk[32];
            hsi_meta_normkey(nk, sizeof nk, k);
            const char *v = eq + 1;
            while (is_blank((unsigned char)*v)) v++;
            if (!strcmp(nk, "units")) snprintf(mi->units, sizeof mi->units, "%s", v);
            else if (!strcmp(nk, "rotation") && !parse_f64(v, &mi->rotation))
                pwarn(p, "'map info' rotation '%s' is not a number", v);
            continue;
        }
        if (zoned && pos == 0) {
            int64_t z;
            if (parse_i64(s, &z) && z >= -1000000 && z <= 1000000) mi->zone = (int)z;
            else pwarn(p, "'map info' zone '%s' is not an integer", s);
            pos++;
            continue;
        }
        if (utm && pos == 1) {
            if (!strcasecmp(s, "North")) mi->north = 1;
            else if (!strcasecmp(s, "South")) mi->north = 0;
            else pwarn(p, "'map info' hemisphere '%s' is not North or South", s);
            pos++;
            continue;
        }
        if (!mi->datum[0]) snprintf(mi->datum, sizeof mi->datum, "%s", s);
        pos++;
    }
    if (utm && !mi->zone) pwarn(p, "'map info' is UTM but has no zone");
    mi->valid = 1;
done:
    strv_free(&it);
}

static hsi_status parse_typed(parser *p)
{
    hsi_status st = HSI_OK;
    hsi_meta *m = p->m;
    const hsi_kv *kv;
    char ex[80];
    strv it = {0};

    /* geometry, in the order a user fixes them */
    HSI_TRY(req_int(p, "samples", &m->n_samples, 1, MAX_SAMPLES_LINES, 1, 0));
    HSI_TRY(req_int(p, "lines", &m->n_lines, 1, MAX_SAMPLES_LINES, 1, 0));
    HSI_TRY(req_int(p, "bands", &m->n_bands, 1, MAX_BANDS, 1, 0));

    kv = pget(p, "data type");
    if (!kv) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: missing required key 'data type'", p->name);
        goto cleanup;
    }
    int64_t code;
    if (!parse_i64(kv->value, &code) || code < 0 || code > 1000 ||
        hsi_dtype_from_envi((int)code) == HSI_DT_INVALID || code == HSI_I8) {
        st = HSI_FAIL(HSI_ERR_FORMAT,
                      "%s: unknown 'data type' '%s' (expected one of 1, 2, 3, 4, 5, 6, 9, 12, "
                      "13, 14, 15)",
                      p->name, excerpt(kv->value, ex, sizeof ex));
        goto cleanup;
    }
    m->dtype = hsi_dtype_from_envi((int)code);

    kv = pget(p, "interleave");
    if (!kv) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: missing required key 'interleave'", p->name);
        goto cleanup;
    }
    if (!strcasecmp(kv->value, "bsq")) m->interleave = HSI_BSQ;
    else if (!strcasecmp(kv->value, "bil")) m->interleave = HSI_BIL;
    else if (!strcasecmp(kv->value, "bip")) m->interleave = HSI_BIP;
    else {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: 'interleave' must be bsq, bil or bip, found '%s'",
                      p->name, excerpt(kv->value, ex, sizeof ex));
        goto cleanup;
    }

    /* the total size must fit in 64 bits */
    int64_t cells, bytes;
    if (!hsi_mul_ok(m->n_samples, m->n_lines, &cells) || !hsi_mul_ok(cells, m->n_bands, &cells) ||
        !hsi_mul_ok(cells, (int64_t)hsi_dtype_size(m->dtype), &bytes)) {
        st = HSI_FAIL(HSI_ERR_OVERFLOW,
                      "%s: samples %lld x lines %lld x bands %lld x %zu bytes overflows 64 "
                      "bits",
                      p->name, (long long)m->n_samples, (long long)m->n_lines,
                      (long long)m->n_bands, hsi_dtype_size(m->dtype));
        goto cleanup;
    }

    kv = pget(p, "byte order");
    if (!kv) {
        pwarn(p, "no 'byte order' key; little-endian (0) assumed");
        m->byte_order = 0;
    } else {
        int64_t bo;
        if (!parse_i64(kv->value, &bo) || (bo != 0 && bo != 1)) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: 'byte order' must be 0 or 1, found '%s'", p->name,
                          excerpt(kv->value, ex, sizeof ex));
            goto cleanup;
        }
        m->byte_order = (int)bo;
    }
    HSI_TRY(req_int(p, "header offset", &m->header_offset, 0, INT64_MAX, 0, 0));

    int64_t comp = 0;
    HSI_TRY(req_int(p, "file compression", &comp, 0, 1, 0, 0));
    m->file_compression = (int)comp;

    const char *frames[2] = {"major frame offsets", "minor frame offsets"};
    int64_t *dst[2] = {m->major_frame_offsets, m->minor_frame_offsets};
    for (int f = 0; f < 2; f++) {
        kv = pget(p, frames[f]);
        if (!kv) continue;
        HSI_TRY(split_list(&it, kv->value, p->name, 2));
        if (it.n < 1 || it.n > 2) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: '%s' must have 1 or 2 values, found %lld",
                          p->name, frames[f], (long long)it.n);
            goto cleanup;
        }
        for (int64_t i = 0; i < it.n; i++)
            if (!parse_i64(it.v[i], &dst[f][i]) || dst[f][i] < 0 ||
                dst[f][i] > ((int64_t)1 << 40)) {
                st = HSI_FAIL(HSI_ERR_FORMAT,
                              "%s: '%s' item %lld must be an integer in 0..2^40, found '%s'",
                              p->name, frames[f], (long long)i + 1,
                              excerpt(it.v[i], ex, sizeof ex));
                goto cleanup;
            }
        strv_free(&it);
    }

    kv = pget(p, "file type");
    m->file_kind = HSI_FILE_STANDARD;
    if (kv) {
        if (!(m->file_type = strdup(kv->value))) goto nomem;
        char nt[64];
        hsi_meta_normkey(nt, sizeof nt, kv->value);
        if (!strcmp(nt, "envi classification")) m->file_kind = HSI_FILE_CLASSIFICATION;
        else if (!strcmp(nt, "envi spectral library")) m->file_kind = HSI_FILE_SPECLIB;
        else if (!strcmp(nt, "envi standard") || !strcmp(nt, "envi") || !nt[0])
            m->file_kind = HSI_FILE_STANDARD;
        else m->file_kind = HSI_FILE_OTHER;
    }

    /* spectral axis */
    HSI_TRY(band_doubles(p, "wavelength", &m->wavelength));
    HSI_TRY(band_doubles(p, "fwhm", &m->fwhm));
    kv = pget(p, "wavelength units");
    if (kv && !(m->wavelength_units = strdup(kv->value))) goto nomem;
    if (m->wavelength) {
        double f = hsi_wavelength_unit_to_nm(m->wavelength_units);
        const char *how = NULL;
        if (f == 0 && (!m->wavelength_units || !m->wavelength_units[0] ||
                       !strcasecmp(m->wavelength_units, "unknown"))) {
            /* no usable units: guess from the range (warned) */
            double lo = INFINITY, hi = -INFINITY;
            for (int64_t b = 0; b < m->n_bands; b++) {
                lo = fmin(lo, m->wavelength[b]);
                hi = fmax(hi, m->wavelength[b]);
            }
            if (lo >= 0.2 && hi <= 30) f = 1000, how = "micrometers";
            else if (lo >= 200 && hi <= 30000) f = 1, how = "nanometers";
            if (how)
                pwarn(p, "no usable 'wavelength units'; values %g..%g read as %s", lo, hi, how);
            else
                pwarn(p, "no usable 'wavelength units' and values %g..%g fit neither "
                         "micrometers nor nanometers; kept as written", lo, hi);
        }
        if (f > 0) {
            for (int64_t b = 0; b < m->n_bands; b++) {
                /* snap to 15 digits so that 0.46 um gives 460 nm, not 460.00000000000006 */
                char nb[40];
                snprintf(nb, sizeof nb, "%.15g", m->wavelength[b] * f);
                m->wavelength[b] = strtod(nb, NULL);
                if (m->fwhm) {
                    snprintf(nb, sizeof nb, "%.15g", m->fwhm[b] * f);
                    m->fwhm[b] = strtod(nb, NULL);
                }
            }
            m->wavelength_nm = 1;
        }
    }

    kv = pget(p, "bbl");
    if (kv) {
        double *bb = NULL;
        HSI_TRY(band_doubles(p, "bbl", &bb));
        if (bb) {
            if (!(m->bbl = malloc((size_t)m->n_bands * sizeof *m->bbl))) {
                free(bb);
                goto nomem;
            }
            for (int64_t b = 0; b < m->n_bands; b++) m->bbl[b] = bb[b] != 0;
            free(bb);
        }
    }

    kv = pget(p, "band names");
    if (kv) {
        HSI_TRY(split_list(&it, kv->value, p->name, m->n_bands));
        if (it.v && it.n == m->n_bands) {
            m->band_names = it.v;
            it.v = NULL;
            it.n = 0;
        } else {
            pwarn(p, "'band names' has %lld names for %lld bands (ignored)", (long long)it.n,
                  (long long)m->n_bands);
            strv_free(&it);
        }
    }

    /* radiometry */
    kv = pget(p, "data ignore value");
    if (kv && kv->value[0]) {
        if (parse_f64(kv->value, &m->ignore_value)) m->has_ignore_value = 1;
        else pwarn(p, "'data ignore value' '%s' is not a number (ignored)",
                   excerpt(kv->value, ex, sizeof ex));
    }
    HSI_TRY(band_doubles(p, "data gain values", &m->gain));
    HSI_TRY(band_doubles(p, "data offset values", &m->offset));
    kv = pget(p, "reflectance scale factor");
    if (kv && kv->value[0]) {
        if (parse_f64(kv->value, &m->reflectance_scale) && m->reflectance_scale != 0)
            m->has_reflectance_scale = 1;
        else pwarn(p, "'reflectance scale factor' '%s' is not a non-zero number (ignored)",
                   excerpt(kv->value, ex, sizeof ex));
    }

    /* display, geography, text */
    kv = pget(p, "default bands");
    if (kv) {
        HSI_TRY(split_list(&it, kv->value, p->name, 3));
        int ok = it.v && (it.n == 1 || it.n == 3);
        int db[3] = {0, 0, 0};
        for (int64_t i = 0; ok && i < it.n; i++) {
            int64_t b;
            if (!parse_i64(it.v[i], &b) || b < 1 || b > m->n_bands) ok = 0;
            else db[i] = (int)(b - 1);
        }
        if (ok) {
            m->n_default_bands = (int)it.n;
            memcpy(m->default_bands, db, sizeof db);
        } else {
            pwarn(p, "'default bands' must be 1 or 3 band numbers in 1..%lld, found '%s' "
                     "(ignored)",
                  (long long)m->n_bands, excerpt(kv->value, ex, sizeof ex));
        }
        strv_free(&it);
    }
    kv = pget(p, "map info");
    if (kv) parse_map_info(p, kv->value);
    kv = pget(p, "coordinate system string");
    if (kv && !(m->coordinate_system = strdup(kv->value))) goto nomem;
    kv = pget(p, "description");
    if (kv && !(m->description = strdup(kv->value))) goto nomem;
    const char *starts[2] = {"x start", "y start"};
    int64_t *sv[2] = {&m->x_start, &m->y_start};
    int *hv[2] = {&m->has_x_start, &m->has_y_start};
    for (int i = 0; i < 2; i++) {
        kv = pget(p, starts[i]);
        if (!kv) continue;
        double d;
        if (parse_f64(kv->value, &d) && d == floor(d) && fabs(d) < 9e15) {
            *sv[i] = (int64_t)d;
            *hv[i] = 1;
        } else {
            pwarn(p, "'%s' '%s' is not an integer (ignored)", starts[i],
                  excerpt(kv->value, ex, sizeof ex));
        }
    }

    /* classification */
    kv = pget(p, "class names");
    if (kv) {
        HSI_TRY(split_list(&it, kv->value, p->name, MAX_CLASSES));
        if (!it.v || it.n > MAX_CLASSES) {
            pwarn(p, "'class names' has %lld names, more than %d (ignored)", (long long)it.n,
                  MAX_CLASSES);
            strv_free(&it);
        } else {
            m->n_classes = (int)it.n;
            m->class_names = it.v;
            it.v = NULL;
            it.n = 0;
        }
    }
    kv = pget(p, "classes");
    if (kv) {
        int64_t nc;
        if (!parse_i64(kv->value, &nc) || nc < 0 || nc > MAX_CLASSES)
            pwarn(p, "'classes' '%s' is not a count in 0..%d (ignored)",
                  excerpt(kv->value, ex, sizeof ex), MAX_CLASSES);
        else if (m->class_names && nc != m->n_classes)
            pwarn(p, "'classes' = %lld but 'class names' has %d names", (long long)nc,
                  m->n_classes);
        else if (!m->class_names)
            m->n_classes = (int)nc;
    }
    kv = pget(p, "class lookup");
    if (kv && m->n_classes > 0) {
        HSI_TRY(split_list(&it, kv->value, p->name, 3 * (int64_t)m->n_classes));
        int ok = it.v && it.n == 3 * (int64_t)m->n_classes;
        uint8_t *lut = ok ? malloc((size_t)it.n) : NULL;
        if (ok && !lut) goto nomem;
        for (int64_t i = 0; ok && i < it.n; i++) {
            int64_t c;
            if (!parse_i64(it.v[i], &c) || c < 0 || c > 255) ok = 0;
            else lut[i] = (uint8_t)c;
        }
        if (ok) m->class_lookup = lut;
        else {
            free(lut);
            pwarn(p, "'class lookup' must be %d values in 0..255 (3 per class); ignored",
                  3 * m->n_classes);
        }
        strv_free(&it);
    }
    goto cleanup;
nomem:
    st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory parsing %s", p->name);
cleanup:
    strv_free(&it);
    return st;
}

/* ---------------------------------------------------------------- entry */

hsi_status hsi_envi_parse(hsi_meta *m, const char *text, size_t len, const char *name)
{
    hsi_status st = HSI_OK;
    hsi_meta_init(m);
    parser p = {.m = m, .name = name ? name : "header"};
    char first[64];
    int has_magic = 0, n_plain = 0;

    if (!text && len) return HSI_FAIL(HSI_ERR_ARG, "hsi_envi_parse: NULL text");
    if (len > MAX_HEADER_BYTES) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: header is %zu bytes, more than the %zu MiB cap",
                      p.name, len, MAX_HEADER_BYTES >> 20);
        goto cleanup;
    }
    /* a text file: no NUL, no control characters but blanks and line ends
     * (0x1A, the DOS end-of-file mark, ends the text) */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == 0x1A) { /* only trailing 0x1A / blanks may follow */
            size_t j = i;
            while (j < len && (text[j] == 0x1A || is_blank((unsigned char)text[j]) ||
                               text[j] == '\n'))
                j++;
            if (j == len) {
                len = i;
                break;
            }
        }
        if (c < 0x20 && c != '\n' && !is_blank(c)) {
            st = HSI_FAIL(HSI_ERR_FORMAT,
                          "%s: not an ENVI header: binary byte 0x%02x at offset %zu (a header "
                          "is text)",
                          p.name, c, i);
            goto cleanup;
        }
    }
    if (len == 0) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: not an ENVI header: the file is empty", p.name);
        goto cleanup;
    }
    {
        const char *t = text;
        if (len >= 3 && !memcmp(t, "\xEF\xBB\xBF", 3)) t += 3;
        has_magic = first_line_is_envi(t, text + len, first, sizeof first);
    }
    /* without the ENVI line, a silent first pass decides whether this is
     * ENVI key = value text at all (an ESRI .hdr must not spray warnings) */
    p.mute = !has_magic;
    HSI_TRY(parse_syntax(&p, text, len, &has_magic, &n_plain, first, sizeof first));
    if (!has_magic) {
        int body = pget(&p, "samples") && pget(&p, "lines") && pget(&p, "bands");
        if (!body) {
            char ex[64];
            st = HSI_FAIL(HSI_ERR_FORMAT,
                          "%s: not an ENVI header: the first line is '%s' (expected 'ENVI') and "
                          "there are no 'samples', 'lines' and 'bands' keys%s",
                          p.name, excerpt(first, ex, sizeof ex),
                          n_plain > 2 ? " (lines look like 'KEY VALUE', e.g. an ESRI .hdr)" : "");
            goto cleanup;
        }
        /* second pass, with warnings */
        for (int i = 0; i < m->n_keys; i++) free(p.norm[i]);
        free(p.norm);
        free(p.slot);
        p.norm = NULL;
        p.slot = NULL;
        p.n_slots = 0;
        hsi_meta_free(m);
        p.mute = 0;
        pwarn(&p, "first line is '%s', not 'ENVI'; read as an ENVI header anyway", first);
        HSI_TRY(parse_syntax(&p, text, len, &has_magic, &n_plain, first, sizeof first));
    }
    HSI_TRY(parse_typed(&p));
    if (!(m->format = strdup("envi"))) st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
cleanup:
    if (p.norm)
        for (int i = 0; i < m->n_keys; i++) free(p.norm[i]);
    free(p.norm);
    free(p.slot);
    if (st != HSI_OK) {
        /* keep the message: hsi_meta_free does not touch it */
        hsi_meta_free(m);
    }
    return st;
}

/* envi_header.c — the ENVI header text parser (hsi_envi_parse): syntax,
 * required keys, caps, and the typed fields of hsi_meta; then what the header
 * says about its data bytes (layout, size checks, gzip inflation, the view).
 * It reads memory only (hsi_envi_parse and hsi_envi_open_memory are the fuzz
 * entry points); finding, opening and mapping files is envi.c's job. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

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

/* 1 when s is written as an integer (sign, digits, optional ".0...") whatever
 * its size: tells "out of range" from "not an integer" when parse_i64 fails. */
static int is_integer_text(const char *s)
{
    while (is_blank((unsigned char)*s) || *s == '\n') s++;
    if (*s == '+' || *s == '-') s++;
    if (!isdigit((unsigned char)*s)) return 0;
    while (isdigit((unsigned char)*s)) s++;
    if (*s == '.') {
        s++;
        while (*s == '0') s++;
    }
    while (is_blank((unsigned char)*s) || *s == '\n') s++;
    return *s == 0;
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
    if (!parse_i64(kv->value, &v)) {
        if (!is_integer_text(kv->value))
            return HSI_FAIL(HSI_ERR_FORMAT, "%s: '%s' must be an integer, found '%s'", p->name,
                            key, excerpt(kv->value, ex, sizeof ex));
        /* an integer, beyond 64 bits */
        const char *t = kv->value;
        while (is_blank((unsigned char)*t) || *t == '\n') t++;
        if (lo == 1 && *t == '-')
            return HSI_FAIL(HSI_ERR_FORMAT, "%s: '%s' must be > 0, found %s", p->name, key,
                            excerpt(t, ex, sizeof ex));
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: '%s' = %s is outside %lld..%lld (%s)", p->name, key,
                        excerpt(t, ex, sizeof ex), (long long)lo, (long long)hi,
                        hi == INT64_MAX ? "the range of a 64-bit integer" : "the cap");
    }
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
    for (int64_t i = 0; i < items.n; i++) {
        int num = parse_f64(items.v[i], &a[i]);
        if (!num || !isfinite(a[i])) {
            /* NaN, inf and values beyond a double (1e400) are not a wavelength,
             * a width, a gain or a flag: the whole list is dropped, said so */
            char ex[48];
            pwarn(p, "'%s' item %lld is '%s', not a %snumber (key ignored)", key,
                  (long long)i + 1, excerpt(items.v[i], ex, sizeof ex), num ? "finite " : "");
            free(a);
            goto done;
        }
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
    static const char *const what[6] = {"reference pixel x", "reference pixel y", "easting",
                                         "northing", "pixel size x", "pixel size y"};
    for (int i = 0; i < 6; i++) {
        int ok = parse_f64(it.v[i + 1], &num[i]);
        if (!ok || !isfinite(num[i])) {
            char ex[48];
            pwarn(p, "'map info' item %d (%s) is '%s', not a %snumber (map info not used: no "
                     "georeferencing)",
                  i + 2, what[i], excerpt(it.v[i + 1], ex, sizeof ex), ok ? "finite " : "");
            goto done;
        }
    }
    if (!(num[4] > 0) || !(num[5] > 0)) {
        pwarn(p, "'map info' pixel size %g x %g (items 6 and 7) must be > 0 (map info not used: "
                 "no georeferencing)",
              num[4], num[5]);
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
            else if (!strcmp(nk, "rotation")) {
                double r = 0;
                if (!parse_f64(v, &r) || !isfinite(r)) {
                    char ex[48];
                    pwarn(p, "'map info' rotation '%s' is not a finite number of degrees (map "
                             "info not used: no georeferencing)",
                          excerpt(v, ex, sizeof ex));
                    memset(mi, 0, sizeof *mi);
                    goto done;
                }
                mi->rotation = r;
            }
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
            /* 1e300 m is finite as written, not in nm */
            for (int64_t b = 0; b < m->n_bands; b++)
                if (!isfinite(m->wavelength[b]) || (m->fwhm && !isfinite(m->fwhm[b]))) {
                    pwarn(p, "'wavelength' (or 'fwhm') item %lld does not fit a double once "
                             "converted to nm (x %g); key ignored",
                          (long long)b + 1, f);
                    free(m->wavelength);
                    free(m->fwhm);
                    m->wavelength = m->fwhm = NULL;
                    m->wavelength_nm = 0;
                    break;
                }
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
        if (parse_f64(kv->value, &m->reflectance_scale) && isfinite(m->reflectance_scale) &&
            m->reflectance_scale != 0)
            m->has_reflectance_scale = 1;
        else {
            m->reflectance_scale = 0;
            pwarn(p, "'reflectance scale factor' '%s' is not a finite non-zero number (ignored)",
                  excerpt(kv->value, ex, sizeof ex));
        }
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

/* ------------------------------------------------- the data file, in memory */

hsi_status hsi_envi_layout_of(hsi_envi_layout *ly, const hsi_meta *m, const char *hdr)
{
    memset(ly, 0, sizeof *ly);
    int64_t e = (int64_t)hsi_dtype_size(m->dtype);
    int64_t B = m->n_bands, L = m->n_lines, S = m->n_samples;
    int64_t o1 = m->major_frame_offsets[0], o2 = m->major_frame_offsets[1], t;
    if (e <= 0 || B <= 0 || L <= 0 || S <= 0 || m->header_offset < 0 || o1 < 0 || o2 < 0)
        return HSI_FAIL(HSI_ERR_ARG, "%s: no cube layout for %lld x %lld x %lld of %s", hdr,
                        (long long)S, (long long)L, (long long)B, hsi_dtype_name(m->dtype));
    int ok = hsi_mul_ok(S, L, &t) && hsi_mul_ok(t, B, &t) && hsi_mul_ok(t, e, &ly->payload);
    if (ok) hsi_interleave_strides(m->interleave, B, L, S, e, ly->strides);
    ly->offset = m->header_offset;
    if (ok && (o1 || o2)) {
        /* an embedded per-line (frame) header o1 and trailer o2 */
        int64_t line = 0, frame = o1 + o2;
        ok = !__builtin_add_overflow(m->header_offset, o1, &ly->offset);
        if (m->interleave == HSI_BSQ) {
            ok = ok && !__builtin_add_overflow(S * e, frame, &line);
            ly->strides[1] = line;
            ok = ok && hsi_mul_ok(line, L, &ly->strides[0]);
        } else {
            ok = ok && !__builtin_add_overflow(ly->strides[1], frame, &ly->strides[1]);
        }
    }
    /* the last byte addressed, plus one */
    int64_t need = ly->offset, p;
    int64_t shape[3] = {B, L, S};
    for (int k = 0; ok && k < 3; k++)
        ok = hsi_mul_ok(shape[k] - 1, ly->strides[k], &p) && !__builtin_add_overflow(need, p, &need);
    ok = ok && !__builtin_add_overflow(need, e, &need);
    ly->need = need;
    int64_t fb = 0; /* frame bytes: one frame per line (per line and band in BSQ) */
    ok = ok && hsi_mul_ok(o1 + o2, L, &fb);
    if (ok && m->interleave == HSI_BSQ) ok = hsi_mul_ok(fb, B, &fb);
    ok = ok && !__builtin_add_overflow(m->header_offset, ly->payload, &ly->nominal) &&
         !__builtin_add_overflow(ly->nominal, fb, &ly->nominal);
    if (!ok)
        return HSI_FAIL(HSI_ERR_OVERFLOW,
                        "%s: the data size (samples %lld x lines %lld x bands %lld x %lld bytes + "
                        "header offset %lld + frame offsets) overflows 64 bits",
                        hdr, (long long)S, (long long)L, (long long)B, (long long)e,
                        (long long)m->header_offset);
    if (ly->nominal < ly->need) ly->nominal = ly->need;
    return HSI_OK;
}

/* The size-check message: expected vs found, plus what would explain it. */
static hsi_status size_error(const char *data, const hsi_meta *m, const hsi_envi_layout *ly,
                             int64_t found)
{
    char hint[256] = "";
    int64_t cells = ly->payload / (int64_t)hsi_dtype_size(m->dtype);
    if (found >= ly->payload && !m->major_frame_offsets[0] && !m->major_frame_offsets[1])
        snprintf(hint, sizeof hint, "; a header offset of %lld would explain the size",
                 (long long)(found - ly->payload));
    else if (cells > 0 && found > m->header_offset && (found - m->header_offset) % cells == 0) {
        int64_t es = (found - m->header_offset) / cells;
        if (es != (int64_t)hsi_dtype_size(m->dtype) &&
            (es == 1 || es == 2 || es == 4 || es == 8 || es == 16))
            snprintf(hint, sizeof hint, "; a data type of %lld bytes per value would explain it",
                     (long long)es);
    }
    if (!hint[0])
        snprintf(hint, sizeof hint, "; the file is %lld bytes short (truncated?)",
                 (long long)(ly->need - found));
    return HSI_FAIL(HSI_ERR_FORMAT,
                    "%s: data file is %lld bytes, expected %lld (header offset %lld + samples "
                    "%lld x lines %lld x bands %lld x %zu bytes)%s",
                    data, (long long)found, (long long)ly->nominal, (long long)m->header_offset,
                    (long long)m->n_samples, (long long)m->n_lines, (long long)m->n_bands,
                    hsi_dtype_size(m->dtype), hint);
}

static void release_inflated(hsi_buffer *b) { hsi_aligned_free(b->data); }

hsi_status hsi_envi_inflate(hsi_buffer **out, const void *gz, size_t gz_len, int64_t want,
                            const char *data_name, hsi_meta *warn_to)
{
    hsi_status st = HSI_OK;
    const uint8_t *in = gz;
    uint8_t *dst = NULL;
    z_stream z;
    int z_open = 0;
    *out = NULL;
    if (gz_len == 0)
        return HSI_FAIL(HSI_ERR_FORMAT,
                        "%s: the header says 'file compression = 1' (gzip) but the data file is "
                        "empty",
                        data_name);
    if (gz_len < 2 || in[0] != 0x1f || in[1] != 0x8b) {
        char shown[16] = "";
        size_t w = 0;
        for (size_t i = 0; i < gz_len && i < 4; i++)
            w += (size_t)snprintf(shown + w, sizeof shown - w, "%s%02x", i ? " " : "", in[i]);
        return HSI_FAIL(HSI_ERR_FORMAT,
                        "%s: the header says 'file compression = 1' (gzip) but the data is not "
                        "gzip: it starts with bytes %s, not the gzip magic 1f 8b (raw data? then "
                        "set 'file compression = 0')",
                        data_name, shown);
    }
    /* deflate expands at most ~1032:1: refuse before allocating */
    if (want / 1100 > (int64_t)(gz_len > INT64_MAX / 2 ? INT64_MAX / 2 : gz_len) + 1024)
        return HSI_FAIL(HSI_ERR_FORMAT,
                        "%s: 'file compression = 1': a %zu-byte gzip file cannot inflate to the "
                        "%lld bytes the header describes",
                        data_name, gz_len, (long long)want);
    if (want < 0 || (uint64_t)want > (uint64_t)SIZE_MAX - 64)
        return HSI_FAIL(HSI_ERR_OVERFLOW, "%s: %lld bytes do not fit in memory", data_name,
                        (long long)want);
    /* one byte more than wanted: says whether the stream is longer */
    dst = hsi_aligned_alloc((size_t)want + 1);
    if (!dst)
        return HSI_FAIL(HSI_ERR_NOMEM, "%s: cannot allocate %lld bytes to inflate into",
                        data_name, (long long)want);
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 15 + 16) != Z_OK) { /* gzip wrapper only */
        st = HSI_FAIL(HSI_ERR_NOMEM, "%s: zlib cannot start inflating", data_name);
        goto cleanup;
    }
    z_open = 1;
    size_t used = 0;  /* input consumed */
    int64_t got = 0;  /* output produced */
    int members = 0, ended = 0;
    while (got < want + 1) {
        size_t in_left = gz_len - used;
        int64_t out_left = want + 1 - got;
        z.next_in = (Bytef *)(in + used);
        z.avail_in = in_left > (1u << 30) ? (1u << 30) : (uInt)in_left;
        z.next_out = dst + got;
        z.avail_out = out_left > (1 << 30) ? (1u << 30) : (uInt)out_left;
        uInt ai = z.avail_in, ao = z.avail_out;
        int r = inflate(&z, Z_NO_FLUSH);
        used += ai - z.avail_in;
        got += ao - z.avail_out;
        if (r == Z_STREAM_END) {
            members++;
            /* concatenated members are one stream (as gzip -d reads them) */
            if (used + 2 <= gz_len && in[used] == 0x1f && in[used + 1] == 0x8b) {
                inflateReset(&z);
                continue;
            }
            ended = 1;
            break;
        }
        if (r == Z_OK) continue;
        if (r == Z_BUF_ERROR && used == gz_len) break; /* input ran out */
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: gzip stream broken after %lld bytes: %s", data_name,
                      (long long)got, z.msg ? z.msg : "invalid data");
        goto cleanup;
    }
    if (!ended && got <= want) {
        st = HSI_FAIL(HSI_ERR_FORMAT,
                      "%s: gzip stream broken after %lld bytes: unexpected end of file (the "
                      "stream stops before its end and its gzip trailer; truncated?)",
                      data_name, (long long)got);
        goto cleanup;
    }
    if (got < want) {
        st = HSI_FAIL(HSI_ERR_FORMAT,
                      "%s: 'file compression = 1': the gzip stream inflates to %lld bytes, "
                      "expected %lld (truncated?)",
                      data_name, (long long)got, (long long)want);
        goto cleanup;
    }
    char note[256] = "";
    if (got > want)
        snprintf(note, sizeof note,
                 "%s: the gzip stream is longer than the %lld bytes the header describes",
                 data_name, (long long)want);
    else if (ended && used < gz_len)
        snprintf(note, sizeof note,
                 "%s: %zu bytes after the end of the gzip stream (%d member%s) ignored",
                 data_name, gz_len - used, members, members == 1 ? "" : "s");
    if (note[0] && warn_to) hsi_meta_warn(warn_to, "%s", note);
    else if (note[0]) hsi_warn("%s", note);
    st = hsi_buffer_wrap(out, dst, (size_t)want, HSI_BUF_HOST, release_inflated, NULL);
    if (st == HSI_OK) dst = NULL;
cleanup:
    if (z_open) inflateEnd(&z);
    hsi_aligned_free(dst);
    return st;
}

hsi_status hsi_envi_attach_data(hsi_cube *out, hsi_buffer *data, const char *data_name,
                                const char *hdr_name)
{
    hsi_status st = HSI_OK;
    hsi_buffer *inflated = NULL, *buf = data;
    const hsi_meta *m = &out->meta;
    hsi_envi_layout ly;
    if (m->minor_frame_offsets[0] || m->minor_frame_offsets[1])
        return HSI_FAIL(HSI_ERR_UNSUPPORTED,
                        "%s: 'minor frame offsets' {%lld, %lld} are not supported (only 0); "
                        "'major frame offsets' are",
                        hdr_name, (long long)m->minor_frame_offsets[0],
                        (long long)m->minor_frame_offsets[1]);
    HSI_TRY(hsi_envi_layout_of(&ly, m, hdr_name));
    out->file_size = (int64_t)data->size;
    if (m->file_compression == 1) {
        HSI_TRY(hsi_envi_inflate(&inflated, data->data, data->size, ly.nominal, data_name,
                                 &out->meta));
        buf = inflated;
    } else {
        int64_t found = (int64_t)data->size;
        if (found < ly.need) {
            st = size_error(data_name, m, &ly, found);
            goto cleanup;
        }
        if (found > ly.nominal) {
            char hint[96] = "";
            if (!m->major_frame_offsets[0] && !m->major_frame_offsets[1])
                snprintf(hint, sizeof hint, " (a header offset of %lld would explain it)",
                         (long long)(found - ly.payload));
            hsi_meta_warn(&out->meta,
                          "%s: data file is %lld bytes, %lld more than the %lld the header "
                          "describes%s",
                          data_name, (long long)found, (long long)(found - ly.nominal),
                          (long long)ly.nominal, hint);
        } else if (found < ly.nominal) {
            hsi_meta_warn(&out->meta,
                          "%s: data file is %lld bytes, %lld less than %lld (the last frame "
                          "trailer is missing)",
                          data_name, (long long)found, (long long)(ly.nominal - found),
                          (long long)ly.nominal);
        }
    }
    int64_t shape[3] = {m->n_bands, m->n_lines, m->n_samples};
    int swapped = hsi_dtype_size(m->dtype) > 1 &&
                  (m->byte_order == 1) == (hsi_host_is_little_endian() != 0);
    HSI_TRY(hsi_view_make(&out->view, buf, ly.offset, m->dtype, 3, shape, ly.strides, swapped));
cleanup:
    hsi_buffer_release(inflated); /* the view holds its own reference */
    return st;
}

hsi_status hsi_envi_open_memory(hsi_cube *out, const char *hdr_text, size_t hdr_len,
                                const void *data, size_t data_len, const char *hdr_name,
                                const char *data_name)
{
    hsi_status st = HSI_OK;
    hsi_buffer *buf = NULL;
    hsi_cube_init(out);
    if (!hdr_name) hdr_name = "header";
    if (!data_name) data_name = "data";
    if (!data && data_len) return HSI_FAIL(HSI_ERR_ARG, "hsi_envi_open_memory: NULL data");
    HSI_TRY(hsi_envi_parse(&out->meta, hdr_text, hdr_len, hdr_name));
    /* no copy, nothing to free: the caller's bytes must outlive the cube */
    HSI_TRY(hsi_buffer_wrap(&buf, (void *)data, data_len, HSI_BUF_HOST, NULL, NULL));
    HSI_TRY(hsi_envi_attach_data(out, buf, data_name, hdr_name));
cleanup:
    hsi_buffer_release(buf);
    if (st != HSI_OK) hsi_cube_free(out);
    return st;
}

/* envi.c — the ENVI reader: finds the data file for a header (or the header
 * for a data file), checks the size and returns a zero-copy (band, line,
 * sample) view over the mapped file. Header syntax is envi_header.c; writing
 * is envi_write.c. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <zlib.h>

#include "envi.h"

#define MAX_HEADER_FILE ((int64_t)64 << 20)

/* Data file extensions tried after the bare stem, in this order. */
static const char *const data_exts[] = {".img", ".dat", ".raw", ".bin", ".bsq", ".bil",
                                        ".bip", ".spe", ".sli", ".hyspex", ".pix"};
#define N_DATA_EXTS (sizeof data_exts / sizeof data_exts[0])

/* ------------------------------------------------------------ path bits */

static int ends_with_ci(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcasecmp(s + n - k, suffix);
}

static char *str_cat(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    char *r = malloc(na + nb + 1);
    if (!r) return NULL;
    memcpy(r, a, na);
    memcpy(r + na, b, nb + 1);
    return r;
}

/* Position of the extension's dot in the last path component, or NULL. */
static const char *ext_dot(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    const char *dot = strrchr(base, '.');
    return (dot && dot != base) ? dot : NULL;
}

static int is_regular(const char *path, struct stat *sb)
{
    struct stat s;
    if (!sb) sb = &s;
    return stat(path, sb) == 0 && S_ISREG(sb->st_mode);
}

/* Finds `want` in its directory: the exact name first, then a name that
 * differs only in letter case (by listing the directory). Returns a
 * malloc'd path or NULL. */
static char *match_ci(const char *want)
{
    if (is_regular(want, NULL)) return strdup(want);
    const char *slash = strrchr(want, '/');
    char *dir = slash ? strndup(want, (size_t)(slash - want + (slash == want))) : strdup(".");
    const char *base = slash ? slash + 1 : want;
    char *found = NULL;
    if (!dir) return NULL;
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strcasecmp(e->d_name, base)) continue;
            size_t n = strlen(dir) + strlen(e->d_name) + 2;
            char *cand = malloc(n);
            if (!cand) break;
            snprintf(cand, n, "%s/%s", dir, e->d_name);
            if (is_regular(cand, NULL)) {
                found = cand;
                break;
            }
            free(cand);
        }
        closedir(d);
    }
    free(dir);
    return found;
}

/* A growing "a, b, c" list of tried names for messages. */
typedef struct tried {
    char buf[1536];
    size_t n;
} tried;

static void tried_add(tried *t, const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *show = slash ? slash + 1 : path;
    if (t->n + strlen(show) + 8 >= sizeof t->buf) {
        if (t->n + 5 < sizeof t->buf && strcmp(t->buf + t->n - 3, "...")) {
            strcpy(t->buf + t->n, ", ...");
            t->n += 5;
        }
        return;
    }
    t->n += (size_t)snprintf(t->buf + t->n, sizeof t->buf - t->n, "%s%s", t->n ? ", " : "", show);
}

hsi_status hsi_envi_find_header(char **out, const char *data_path)
{
    *out = NULL;
    tried t = {.n = 0};
    t.buf[0] = 0;
    char *cands[2] = {NULL, NULL};
    int nc = 0;
    /* appended form first (X.ext.hdr), then replaced (X.hdr) */
    cands[nc++] = str_cat(data_path, ".hdr");
    const char *dot = ext_dot(data_path);
    if (dot) {
        char *stem = strndup(data_path, (size_t)(dot - data_path));
        if (stem) cands[nc++] = str_cat(stem, ".hdr");
        free(stem);
    }
    hsi_status st = HSI_OK;
    for (int i = 0; i < nc; i++) {
        if (!cands[i]) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        tried_add(&t, cands[i]);
        if ((*out = match_ci(cands[i]))) goto cleanup;
    }
    st = HSI_FAIL(HSI_ERR_NOT_FOUND,
                  "%s: no ENVI header found beside the data file (tried %s, any letter case)",
                  data_path, t.buf);
cleanup:
    for (int i = 0; i < nc; i++) free(cands[i]);
    return st;
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

hsi_status hsi_envi_find_data(char **out, const char *header_path, const hsi_meta *m)
{
    (void)m;
    *out = NULL;
    hsi_status st = HSI_OK;
    tried t = {.n = 0};
    t.buf[0] = 0;
    struct stat hsb;
    int have_h = stat(header_path, &hsb) == 0;
    int self_seen = 0;
    char *stem = ends_with_ci(header_path, ".hdr")
                     ? strndup(header_path, strlen(header_path) - 4)
                     : strdup(header_path);
    char *extra = NULL; /* a later match, reported as a warning */
    if (!stem) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i <= N_DATA_EXTS; i++) {
        char *cand = i == 0 ? strdup(stem) : str_cat(stem, data_exts[i - 1]);
        if (!cand) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        tried_add(&t, cand);
        char *hit = match_ci(cand);
        free(cand);
        if (!hit) continue;
        struct stat dsb;
        if (have_h && stat(hit, &dsb) == 0 && same_file(&hsb, &dsb)) {
            self_seen = 1;
            free(hit);
            continue;
        }
        if (!*out) *out = hit;
        else {
            if (!extra) extra = hit;
            else free(hit);
        }
    }
    if (*out) {
        if (extra)
            hsi_warn("%s: several data files match; using %s (also found %s)", header_path, *out,
                     extra);
        goto cleanup;
    }
    if (self_seen)
        st = HSI_FAIL(HSI_ERR_FORMAT,
                      "%s: the header is named as its own data file: the only candidate for the "
                      "data is the header itself (tried %s); name the header X.hdr beside data X",
                      header_path, t.buf);
    else
        st = HSI_FAIL(HSI_ERR_NOT_FOUND,
                      "%s: data file not found (tried %s, any letter case)", header_path,
                      t.buf);
cleanup:
    free(extra);
    free(stem);
    return st;
}

/* -------------------------------------------------------------- opening */

/* Does the file start like an ENVI header ("ENVI" + end of line)? */
static int looks_like_header(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return 0;
    unsigned char b[8] = {0};
    size_t n = fread(b, 1, sizeof b, fp);
    fclose(fp);
    size_t o = (n >= 3 && b[0] == 0xEF && b[1] == 0xBB && b[2] == 0xBF) ? 3 : 0;
    if (n < o + 4 || strncasecmp((const char *)b + o, "ENVI", 4)) return 0;
    return n == o + 4 || b[o + 4] == '\n' || b[o + 4] == '\r' || b[o + 4] == ' ' ||
           b[o + 4] == '\t';
}

static void release_host_gz(hsi_buffer *b) { hsi_aligned_free(b->data); }

/* Inflates a gzip data file into a host buffer of exactly `want` bytes. */
static hsi_status read_gzip(hsi_buffer **out, const char *path, int64_t want,
                            int64_t file_size)
{
    hsi_status st = HSI_OK;
    *out = NULL;
    /* deflate expands at most ~1032:1: refuse before allocating */
    if (want / 1100 > file_size + 1024)
        return HSI_FAIL(HSI_ERR_FORMAT,
                        "%s: 'file compression = 1': a %lld-byte gzip file cannot inflate to the "
                        "%lld bytes the header describes",
                        path, (long long)file_size, (long long)want);
    if ((uint64_t)want > (uint64_t)SIZE_MAX - 64)
        return HSI_FAIL(HSI_ERR_OVERFLOW, "%s: %lld bytes do not fit in memory", path,
                        (long long)want);
    uint8_t *data = hsi_aligned_alloc((size_t)want + 1);
    if (!data)
        return HSI_FAIL(HSI_ERR_NOMEM, "%s: cannot allocate %lld bytes to inflate into", path,
                        (long long)want);
    gzFile gz = gzopen(path, "rb");
    if (!gz) {
        hsi_aligned_free(data);
        return HSI_FAIL(HSI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    int64_t got = 0;
    while (got < want + 1) {
        int64_t chunk = want + 1 - got;
        if (chunk > (1 << 30)) chunk = 1 << 30;
        int r = gzread(gz, data + got, (unsigned)chunk);
        if (r < 0) {
            int en;
            const char *msg = gzerror(gz, &en);
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: gzip stream broken after %lld bytes: %s", path,
                          (long long)got, msg ? msg : "?");
            goto cleanup;
        }
        if (r == 0) break;
        got += r;
    }
    {
        int en = Z_OK;
        const char *msg = gzerror(gz, &en);
        if (en != Z_OK) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: gzip stream broken after %lld bytes: %s", path,
                          (long long)got, msg ? msg : "?");
            goto cleanup;
        }
    }
    if (got < want) {
        st = HSI_FAIL(HSI_ERR_FORMAT,
                      "%s: 'file compression = 1': the gzip stream inflates to %lld bytes, "
                      "expected %lld (truncated?)",
                      path, (long long)got, (long long)want);
        goto cleanup;
    }
    if (got > want)
        hsi_warn("%s: the gzip stream is longer than the %lld bytes the header describes", path,
                 (long long)want);
    st = hsi_buffer_wrap(out, data, (size_t)want, HSI_BUF_HOST, release_host_gz, NULL);
    if (st == HSI_OK) data = NULL;
cleanup:
    gzclose(gz);
    hsi_aligned_free(data);
    return st;
}

/* Byte layout of the cube in its (decompressed) data file. */
typedef struct layout {
    int64_t offset;     /* first element */
    int64_t strides[3]; /* band, line, sample */
    int64_t payload;    /* S*L*B*e */
    int64_t need;       /* bytes the view addresses, from 0 */
    int64_t nominal;    /* header offset + payload + frame bytes */
} layout;

static hsi_status compute_layout(layout *ly, const hsi_meta *m, const char *hdr)
{
    int64_t e = (int64_t)hsi_dtype_size(m->dtype);
    int64_t B = m->n_bands, L = m->n_lines, S = m->n_samples;
    int64_t o1 = m->major_frame_offsets[0], o2 = m->major_frame_offsets[1], t;
    hsi_interleave_strides(m->interleave, B, L, S, e, ly->strides);
    int ok = hsi_mul_ok(S, L, &t) && hsi_mul_ok(t, B, &t) && hsi_mul_ok(t, e, &ly->payload);
    ly->offset = m->header_offset;
    if (ok && (o1 || o2)) {
        /* embedded per-line (frame) header o1 and trailer o2 */
        int64_t line = 0, frame = o1 + o2;
        ok = ok && !__builtin_add_overflow(m->header_offset, o1, &ly->offset);
        if (m->interleave == HSI_BSQ) {
            ok = ok && !__builtin_add_overflow(S * e, frame, &line);
            ly->strides[1] = line;
            ok = ok && hsi_mul_ok(line, L, &ly->strides[0]);
        } else {
            ok = ok && !__builtin_add_overflow(ly->strides[1], frame, &ly->strides[1]);
        }
    }
    /* last byte addressed + 1 */
    int64_t need = ly->offset, p;
    int64_t shape[3] = {B, L, S};
    for (int k = 0; ok && k < 3; k++)
        ok = hsi_mul_ok(shape[k] - 1, ly->strides[k], &p) && !__builtin_add_overflow(need, p, &need);
    ok = ok && !__builtin_add_overflow(need, e, &need);
    ly->need = need;
    int64_t fb = 0;
    ok = ok && hsi_mul_ok(o1 + o2, m->interleave == HSI_BSQ ? L * 1 : L, &fb);
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
static hsi_status size_error(const char *data, const hsi_meta *m, const layout *ly,
                             int64_t found)
{
    char hint[256] = "";
    int64_t cells = ly->payload / (int64_t)hsi_dtype_size(m->dtype);
    if (found >= ly->payload && !m->major_frame_offsets[0] && !m->major_frame_offsets[1])
        snprintf(hint, sizeof hint, "; a header offset of %lld would explain the size",
                 (long long)(found - ly->payload));
    else if (cells > 0 && found > m->header_offset && (found - m->header_offset) % cells == 0) {
        int64_t es = (found - m->header_offset) / cells;
        if (es != (int64_t)hsi_dtype_size(m->dtype) && (es == 1 || es == 2 || es == 4 ||
                                                         es == 8 || es == 16))
            snprintf(hint, sizeof hint, "; a data type of %lld bytes per value would explain it",
                     (long long)es);
    }
    if (!hint[0])
        snprintf(hint, sizeof hint, "; the file is %lld bytes short (truncated?)",
                 (long long)(ly->need - found));
    return HSI_FAIL(HSI_ERR_FORMAT,
                    "%s: data file is %lld bytes, expected %lld (header offset %lld + samples "
                    "%lld x lines %lld x bands %lld x %zu bytes)%s",
                    data, (long long)found, (long long)ly->nominal,
                    (long long)m->header_offset, (long long)m->n_samples,
                    (long long)m->n_lines, (long long)m->n_bands, hsi_dtype_size(m->dtype),
                    hint);
}

hsi_status hsi_envi_read_header(hsi_meta *m, const char *hdr)
{
    hsi_status st = HSI_OK;
    char *text = NULL;
    size_t tlen = 0;
    struct stat hsb;
    hsi_meta_init(m);
    if (stat(hdr, &hsb) != 0)
        return HSI_FAIL(HSI_ERR_IO, "%s: cannot open: %s", hdr, strerror(errno));
    if (!S_ISREG(hsb.st_mode))
        return HSI_FAIL(HSI_ERR_ARG, "%s: not a regular file, expected an ENVI header", hdr);
    if ((int64_t)hsb.st_size > MAX_HEADER_FILE)
        return HSI_FAIL(HSI_ERR_FORMAT,
                        "%s: not an ENVI header: %lld bytes, more than the %lld MiB cap for a "
                        "header",
                        hdr, (long long)hsb.st_size, (long long)(MAX_HEADER_FILE >> 20));
    HSI_TRY(hsi_read_file(hdr, &text, &tlen));
    HSI_TRY(hsi_envi_parse(m, text, tlen, hdr));
cleanup:
    free(text);
    return st;
}

hsi_status hsi_envi_open(hsi_cube *out, const char *path)
{
    hsi_status st = HSI_OK;
    char *hdr = NULL, *data = NULL;
    hsi_buffer *buf = NULL;
    struct stat sb;
    hsi_cube_init(out);

    if (!path || !*path) return HSI_FAIL(HSI_ERR_ARG, "hsi_envi_open: empty path");
    if (stat(path, &sb) != 0)
        return HSI_FAIL(HSI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode))
        return HSI_FAIL(HSI_ERR_ARG, "%s: is a directory, expected an ENVI header or data file",
                        path);

    /* which one did the user name? */
    if (ends_with_ci(path, ".hdr") || looks_like_header(path)) {
        if (!(hdr = strdup(path))) goto nomem;
    } else {
        HSI_TRY(hsi_envi_find_header(&hdr, path));
        if (!(data = strdup(path))) goto nomem;
    }

    struct stat hsb;
    if (stat(hdr, &hsb) != 0) {
        st = HSI_FAIL(HSI_ERR_IO, "%s: cannot open: %s", hdr, strerror(errno));
        goto cleanup;
    }
    HSI_TRY(hsi_atomic_pair_check(hdr)); /* a write torn between data and header */
    HSI_TRY(hsi_envi_read_header(&out->meta, hdr));
    const hsi_meta *m = &out->meta;

    if (m->minor_frame_offsets[0] || m->minor_frame_offsets[1]) {
        st = HSI_FAIL(HSI_ERR_UNSUPPORTED,
                      "%s: 'minor frame offsets' {%lld, %lld} are not supported (only 0); "
                      "'major frame offsets' are",
                      hdr, (long long)m->minor_frame_offsets[0],
                      (long long)m->minor_frame_offsets[1]);
        goto cleanup;
    }
    if (!data) HSI_TRY(hsi_envi_find_data(&data, hdr, m));
    struct stat dsb;
    if (stat(data, &dsb) != 0) {
        st = HSI_FAIL(HSI_ERR_IO, "%s: cannot open: %s", data, strerror(errno));
        goto cleanup;
    }
    if (same_file(&hsb, &dsb)) {
        st = HSI_FAIL(HSI_ERR_FORMAT,
                      "%s: the header is named as its own data file; the data must be a "
                      "separate file",
                      hdr);
        goto cleanup;
    }

    layout ly;
    HSI_TRY(compute_layout(&ly, m, hdr));
    int64_t found;
    if (m->file_compression == 1) {
        HSI_TRY(read_gzip(&buf, data, ly.nominal, (int64_t)dsb.st_size));
        found = (int64_t)buf->size;
        out->file_size = (int64_t)dsb.st_size;
    } else {
        found = (int64_t)dsb.st_size;
        out->file_size = found;
        if (found < ly.need) {
            st = size_error(data, m, &ly, found);
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
                          data, (long long)found, (long long)(found - ly.nominal),
                          (long long)ly.nominal, hint);
        } else if (found < ly.nominal) {
            hsi_meta_warn(&out->meta,
                          "%s: data file is %lld bytes, %lld less than %lld (the last frame "
                          "trailer is missing)",
                          data, (long long)found, (long long)(ly.nominal - found),
                          (long long)ly.nominal);
        }
        HSI_TRY(hsi_buffer_map(&buf, data));
        if ((int64_t)buf->size < ly.need) { /* changed since stat */
            st = size_error(data, m, &ly, (int64_t)buf->size);
            goto cleanup;
        }
    }
    int64_t shape[3] = {m->n_bands, m->n_lines, m->n_samples};
    int swapped = hsi_dtype_size(m->dtype) > 1 &&
                  (m->byte_order == 1) == (hsi_host_is_little_endian() != 0);
    HSI_TRY(hsi_view_make(&out->view, buf, ly.offset, m->dtype, 3, shape, ly.strides, swapped));
    out->header_path = hdr;
    out->data_path = data;
    hdr = data = NULL;
    goto cleanup;
nomem:
    st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
cleanup:
    hsi_buffer_release(buf);
    free(hdr);
    free(data);
    if (st != HSI_OK) hsi_cube_free(out);
    return st;
}

/* envi_write.c — the streaming ENVI writer and header formatter: any view
 * to any interleave, dtype and byte order, tile by tile, through temporary
 * files renamed into place. Reading is envi.c / envi_header.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "envi.h"
#include "core/dist.h"

#define TILE_BYTES ((int64_t)8 << 20) /* target bytes per converted tile */

void hsi_envi_write_options_init(hsi_envi_write_options *o)
{
    memset(o, 0, sizeof *o);
    o->interleave = HSI_BSQ;
    o->dtype = HSI_DT_INVALID;
    o->byte_order = 0;
    o->header_offset = 0;
    o->data_ext = "";
}

/* ------------------------------------------------------ header text */

typedef struct sbuf {
    char *s;
    size_t n, cap;
    int bad;
} sbuf;

static void sb_add(sbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void sb_add(sbuf *b, const char *fmt, ...)
{
    if (b->bad) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->bad = 1;
            return;
        }
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t nc = b->cap ? b->cap * 2 : 4096;
        while (nc < b->n + (size_t)k + 1) nc *= 2;
        char *ns = realloc(b->s, nc);
        if (!ns) {
            b->bad = 1;
            return;
        }
        b->s = ns;
        b->cap = nc;
    }
}

/* Shortest %g text that reads back as exactly v. */
static void fmt_num(char *out, size_t n, double v)
{
    for (int p = 6; p <= 17; p++) {
        snprintf(out, n, "%.*g", p, v);
        if (strtod(out, NULL) == v) return;
    }
}

static void sb_num_list(sbuf *b, const char *key, const double *v, int64_t n)
{
    char t[40];
    sb_add(b, "%s = {", key);
    for (int64_t i = 0; i < n; i++) {
        fmt_num(t, sizeof t, v[i]);
        sb_add(b, "%s%s", i ? (i % 8 ? ", " : ",\n ") : "", t);
    }
    sb_add(b, "}\n");
}

/* Writes a text item: characters that would break the syntax are replaced
 * (',' in list items by '-', '{' '}' by '(' ')', line ends by blanks). */
static void sb_text(sbuf *b, const char *s, int list_item, int keep_newlines)
{
    for (; *s; s++) {
        char c = *s;
        if (c == '\n' && keep_newlines) {
            /* a line starting with ';' would read back as a comment */
            const char *q = s + 1;
            while (*q == ' ' || *q == '\t') q++;
            if (*q == ';') c = ' ';
        }
        if (c == '{') c = '(';
        else if (c == '}') c = ')';
        else if (list_item && c == ',') c = '-';
        else if (c == '\r' || (c == '\n' && !keep_newlines)) c = ' ';
        sb_add(b, "%c", c);
    }
}

static void sb_str_list(sbuf *b, const char *key, char *const *v, int64_t n)
{
    sb_add(b, "%s = {", key);
    for (int64_t i = 0; i < n; i++) {
        const char *t = v[i] ? v[i] : "";
        while (*t == ' ' || *t == '\t') t++;
        /* an item starting with ';' stays on the previous line (else a comment) */
        if (i) sb_add(b, *t == ';' ? ", " : ",\n ");
        sb_text(b, v[i] ? v[i] : "", 1, 0);
    }
    sb_add(b, "}\n");
}

/* Keys the writer derives from the storage it writes: never copied. */
static const char *const storage_keys[] = {
    "samples", "lines", "bands", "header offset", "file type", "data type", "interleave",
    "byte order", "file compression", "major frame offsets", "minor frame offsets",
    "default bands" /* band numbers: only meaningful from the typed field */};

static int key_in(const char *norm, const char *const *set, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(norm, set[i])) return 1;
    return 0;
}

hsi_status hsi_envi_format_header(char **out, const hsi_meta *m, int64_t B, int64_t L,
                                  int64_t S, hsi_dtype dt, hsi_interleave il, int byte_order,
                                  int64_t header_offset)
{
    *out = NULL;
    sbuf b = {0};
    char t[64];
    hsi_meta empty;
    if (!m) {
        hsi_meta_init(&empty);
        m = &empty;
    }
    if (dt == HSI_DT_INVALID)
        return HSI_FAIL(HSI_ERR_ARG, "ENVI header: no data type given (write options dtype or "
                                     "meta->dtype)");
    if (dt == HSI_I8 || hsi_dtype_size(dt) == 0)
        return HSI_FAIL(HSI_ERR_UNSUPPORTED, "ENVI has no data type for %s", hsi_dtype_name(dt));
    /* per-band arrays are written when they describe B bands; the verbatim
     * lists (any geometry) only when the geometry is unchanged */
    int bands_ok = m->n_bands == B;
    int same_geom = bands_ok && m->n_lines == L && m->n_samples == S;
    /* which typed keys are written from typed fields (their verbatim
     * copies are then skipped) */
    const char *typed[24];
    size_t nt = 0;

    sb_add(&b, "ENVI\n");
    if (m->description) {
        sb_add(&b, "description = {");
        sb_text(&b, m->description, 0, 1);
        sb_add(&b, "}\n");
        typed[nt++] = "description";
    }
    const char *ftype = "ENVI Standard";
    if (m->file_kind == HSI_FILE_CLASSIFICATION) ftype = "ENVI Classification";
    else if (m->file_kind == HSI_FILE_SPECLIB) ftype = "ENVI Spectral Library";
    else if (m->file_kind == HSI_FILE_OTHER && m->file_type && !strchr(m->file_type, '\n'))
        ftype = m->file_type;
    sb_add(&b, "samples = %lld\nlines = %lld\nbands = %lld\nheader offset = %lld\n", (long long)S,
           (long long)L, (long long)B, (long long)header_offset);
    sb_add(&b, "file type = %s\ndata type = %d\ninterleave = %s\nbyte order = %d\n", ftype,
           (int)dt, hsi_interleave_name(il), byte_order ? 1 : 0);

    if (bands_ok && m->wavelength) {
        const char *units = m->wavelength_nm ? "Nanometers" : m->wavelength_units;
        if (units && units[0] && !strchr(units, '\n')) sb_add(&b, "wavelength units = %s\n", units);
        typed[nt++] = "wavelength units";
        sb_num_list(&b, "wavelength", m->wavelength, B);
        typed[nt++] = "wavelength";
        if (m->fwhm) {
            sb_num_list(&b, "fwhm", m->fwhm, B);
            typed[nt++] = "fwhm";
        }
    }
    if (bands_ok && m->bbl) {
        sb_add(&b, "bbl = {");
        for (int64_t i = 0; i < B; i++)
            sb_add(&b, "%s%d", i ? (i % 16 ? ", " : ",\n ") : "", m->bbl[i] ? 1 : 0);
        sb_add(&b, "}\n");
        typed[nt++] = "bbl";
    }
    if (bands_ok && m->band_names) {
        sb_str_list(&b, "band names", m->band_names, B);
        typed[nt++] = "band names";
    }
    if (m->has_ignore_value) {
        fmt_num(t, sizeof t, m->ignore_value);
        sb_add(&b, "data ignore value = %s\n", t);
        typed[nt++] = "data ignore value";
    }
    if (bands_ok && m->gain) {
        sb_num_list(&b, "data gain values", m->gain, B);
        typed[nt++] = "data gain values";
    }
    if (bands_ok && m->offset) {
        sb_num_list(&b, "data offset values", m->offset, B);
        typed[nt++] = "data offset values";
    }
    if (m->has_reflectance_scale) {
        fmt_num(t, sizeof t, m->reflectance_scale);
        sb_add(&b, "reflectance scale factor = %s\n", t);
        typed[nt++] = "reflectance scale factor";
    }
    if (bands_ok && (m->n_default_bands == 1 || m->n_default_bands == 3)) {
        sb_add(&b, "default bands = {");
        for (int i = 0; i < m->n_default_bands; i++)
            sb_add(&b, "%s%d", i ? ", " : "", m->default_bands[i] + 1);
        sb_add(&b, "}\n");
        typed[nt++] = "default bands";
    }
    if (m->map_info.valid) {
        const hsi_map_info *mi = &m->map_info;
        char nums[6][40];
        const double v[6] = {mi->ref_x, mi->ref_y, mi->easting, mi->northing, mi->x_size,
                             mi->y_size};
        for (int i = 0; i < 6; i++) fmt_num(nums[i], sizeof nums[i], v[i]);
        sb_add(&b, "map info = {");
        sb_text(&b, mi->projection, 1, 0);
        for (int i = 0; i < 6; i++) sb_add(&b, ", %s", nums[i]);
        int utm = !strncasecmp(mi->projection, "UTM", 3);
        if (utm || !strncasecmp(mi->projection, "State Plane", 11)) sb_add(&b, ", %d", mi->zone);
        if (utm) sb_add(&b, ", %s", mi->north ? "North" : "South");
        if (mi->datum[0]) {
            sb_add(&b, ", ");
            sb_text(&b, mi->datum, 1, 0);
        }
        if (mi->units[0]) {
            sb_add(&b, ", units=");
            sb_text(&b, mi->units, 1, 0);
        }
        if (mi->rotation != 0) {
            fmt_num(t, sizeof t, mi->rotation);
            sb_add(&b, ", rotation=%s", t);
        }
        sb_add(&b, "}\n");
        typed[nt++] = "map info";
    }
    if (m->coordinate_system) {
        sb_add(&b, "coordinate system string = {");
        sb_text(&b, m->coordinate_system, 0, 0);
        sb_add(&b, "}\n");
        typed[nt++] = "coordinate system string";
    }
    if (m->has_x_start) {
        sb_add(&b, "x start = %lld\n", (long long)m->x_start);
        typed[nt++] = "x start";
    }
    if (m->has_y_start) {
        sb_add(&b, "y start = %lld\n", (long long)m->y_start);
        typed[nt++] = "y start";
    }
    if (m->n_classes > 0 && m->class_names) {
        sb_add(&b, "classes = %d\n", m->n_classes);
        typed[nt++] = "classes";
        sb_str_list(&b, "class names", m->class_names, m->n_classes);
        typed[nt++] = "class names";
        if (m->class_lookup) {
            sb_add(&b, "class lookup = {");
            for (int i = 0; i < 3 * m->n_classes; i++)
                sb_add(&b, "%s%d", i ? (i % 12 ? ", " : ",\n ") : "", m->class_lookup[i]);
            sb_add(&b, "}\n");
            typed[nt++] = "class lookup";
        }
    }

    /* every other key, verbatim, in header order */
    static const char *const per_band[] = {"wavelength", "fwhm", "bbl", "band names",
                                           "data gain values", "data offset values",
                                           "wavelength units"};
    for (int i = 0; i < m->n_keys; i++) {
        const hsi_kv *kv = &m->keys[i];
        char nk[256];
        hsi_meta_normkey(nk, sizeof nk, kv->key);
        if (!nk[0] || nk[0] == ';' || strchr(kv->key, '=') || strchr(kv->key, '\n')) continue;
        if (key_in(nk, storage_keys, sizeof storage_keys / sizeof *storage_keys)) continue;
        if (key_in(nk, typed, nt)) continue;
        /* stale lists tied to the old geometry are dropped */
        if (!same_geom && key_in(nk, per_band, sizeof per_band / sizeof *per_band)) continue;
        if (!same_geom && (!strcmp(nk, "spectra names") || !strcmp(nk, "map info"))) continue;
        const char *v = kv->value ? kv->value : "";
        if (kv->braced || strchr(v, '\n')) {
            sb_add(&b, "%s = {", kv->key);
            sb_text(&b, v, 0, 1);
            sb_add(&b, "}\n");
        } else {
            sb_add(&b, "%s = ", kv->key);
            sb_text(&b, v, 0, 0);
            sb_add(&b, "\n");
        }
    }
    if (b.bad) {
        free(b.s);
        return HSI_FAIL(HSI_ERR_NOMEM, "out of memory formatting an ENVI header");
    }
    *out = b.s;
    return HSI_OK;
}

/* --------------------------------------------------------- the writer */

struct hsi_envi_writer {
    hsi_atomic_file data, hdr;
    char *header_text;
    int64_t B, L, S, esz, header_offset;
    hsi_dtype dtype;
    hsi_interleave il;
    int byte_order;
    int64_t lines_done;
    uint8_t *tile;
    int64_t tile_cap;
    int attached; /* writes into another process's temporary file */
};

static void writer_free(hsi_envi_writer *w)
{
    if (!w) return;
    if (w->attached) { /* not ours to remove */
        if (w->data.fp) fclose(w->data.fp);
        free(w->data.final_path);
        w->data.fp = NULL;
        w->data.final_path = NULL;
    }
    hsi_atomic_abort(&w->data);
    hsi_atomic_abort(&w->hdr);
    free(w->header_text);
    hsi_aligned_free(w->tile);
    free(w);
}

/* A writer's dimensions and layout from the options (NULL = defaults). */
static hsi_envi_writer *writer_new(int64_t B, int64_t L, int64_t S, hsi_dtype dtype,
                                   const hsi_envi_write_options *o)
{
    hsi_envi_write_options def;
    if (!o) {
        hsi_envi_write_options_init(&def);
        o = &def;
    }
    hsi_envi_writer *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->dtype = o->dtype != HSI_DT_INVALID ? o->dtype : dtype;
    w->esz = (int64_t)hsi_dtype_size(w->dtype);
    w->B = B;
    w->L = L;
    w->S = S;
    w->il = o->interleave;
    w->byte_order = o->byte_order ? 1 : 0;
    w->header_offset = o->header_offset;
    return w;
}

hsi_status hsi_envi_writer_open(hsi_envi_writer **out, const char *hdr_path, const hsi_meta *meta,
                                int64_t B, int64_t L, int64_t S,
                                const hsi_envi_write_options *o)
{
    hsi_status st = HSI_OK;
    hsi_envi_write_options def;
    char *data_path = NULL;
    *out = NULL;
    if (!o) {
        hsi_envi_write_options_init(&def);
        o = &def;
    }
    hsi_envi_writer *w = writer_new(B, L, S, meta ? meta->dtype : HSI_DT_INVALID, o);
    if (!w) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");

    size_t n = strlen(hdr_path);
    if (n < 5 || strcasecmp(hdr_path + n - 4, ".hdr")) {
        st = HSI_FAIL(HSI_ERR_ARG, "%s: an ENVI header name must end in .hdr", hdr_path);
        goto cleanup;
    }
    if (B <= 0 || L <= 0 || S <= 0) {
        st = HSI_FAIL(HSI_ERR_ARG, "%s: cannot write a cube of %lld bands x %lld lines x %lld "
                                   "samples (all must be > 0)",
                      hdr_path, (long long)B, (long long)L, (long long)S);
        goto cleanup;
    }
    if (w->il != HSI_BSQ && w->il != HSI_BIL && w->il != HSI_BIP) {
        st = HSI_FAIL(HSI_ERR_ARG, "%s: unknown interleave %d", hdr_path, (int)w->il);
        goto cleanup;
    }
    if (w->header_offset < 0) {
        st = HSI_FAIL(HSI_ERR_ARG, "%s: header offset %lld < 0", hdr_path,
                      (long long)w->header_offset);
        goto cleanup;
    }
    int64_t total, t;
    if (!hsi_mul_ok(B, L, &t) || !hsi_mul_ok(t, S, &t) || !hsi_mul_ok(t, w->esz, &total) ||
        __builtin_add_overflow(total, w->header_offset, &total) || total > (int64_t)(INT64_MAX >> 1)) {
        st = HSI_FAIL(HSI_ERR_OVERFLOW, "%s: %lld x %lld x %lld x %lld bytes overflows 64 bits",
                      hdr_path, (long long)B, (long long)L, (long long)S, (long long)w->esz);
        goto cleanup;
    }
    HSI_TRY(hsi_envi_format_header(&w->header_text, meta, B, L, S, w->dtype, w->il,
                                   w->byte_order, w->header_offset));

    const char *ext = o->data_ext ? o->data_ext : "";
    if (!(data_path = malloc(n - 4 + strlen(ext) + 1))) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    memcpy(data_path, hdr_path, n - 4);
    strcpy(data_path + n - 4, ext);
    if (!strcasecmp(data_path, hdr_path)) {
        st = HSI_FAIL(HSI_ERR_ARG, "%s: data_ext '%s' would name the data file as the header",
                      hdr_path, ext);
        goto cleanup;
    }
    hsi_atomic_pair_recover(hdr_path); /* an interrupted write to the same pair first */
    HSI_TRY(hsi_atomic_open(&w->data, data_path));
    HSI_TRY(hsi_atomic_open(&w->hdr, hdr_path));
    /* full size at once: zeros for the header offset, a sparse file until
     * the tiles arrive */
    if (ftruncate(fileno(w->data.fp), (off_t)total) != 0) {
        st = HSI_FAIL(HSI_ERR_IO, "%s: cannot size the data file to %lld bytes: %s", data_path,
                      (long long)total, strerror(errno));
        goto cleanup;
    }
    *out = w;
    w = NULL;
cleanup:
    free(data_path);
    writer_free(w);
    return st;
}

static hsi_status pwrite_all(int fd, const uint8_t *p, int64_t n, int64_t off, const char *path)
{
    while (n > 0) {
        ssize_t k = pwrite(fd, p, (size_t)(n > (1 << 30) ? (1 << 30) : n), (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return HSI_FAIL(HSI_ERR_IO, "%s: write of %lld bytes at offset %lld failed: %s",
                            path, (long long)n, (long long)off,
                            k < 0 ? strerror(errno) : "no space?");
        p += k;
        n -= k;
        off += k;
    }
    return HSI_OK;
}

/* 1 when src's bytes are already the file's for this interleave (host
 * memory, the file's dtype and byte order, its strides for n lines or, in
 * BSQ, packed rows per band): then they are written as they are. */
static int chunk_is_file_order(const hsi_envi_writer *w, const hsi_view *src, int64_t n, int swapped)
{
    int64_t e = w->esz, fs[3];
    if (!src->buf || src->buf->kind == HSI_BUF_DEVICE || src->dtype != w->dtype || src->swapped != swapped)
        return 0;
    if (w->il == HSI_BSQ) return src->strides[1] == w->S * e && src->strides[2] == e;
    hsi_interleave_strides(w->il, w->B, n, w->S, e, fs);
    return src->strides[0] == fs[0] && src->strides[1] == fs[1] && src->strides[2] == fs[2];
}

/* n lines in the file's order at p (in BSQ, band b's rows at p + b *
 * band_stride) written as lines y0.. of the file. */
static hsi_status write_file_order(hsi_envi_writer *w, const uint8_t *p, int64_t band_stride, int64_t y0,
                                   int64_t n)
{
    int64_t B = w->B, S = w->S, e = w->esz;
    int fd = fileno(w->data.fp);
    hsi_status st = HSI_OK;
    if (w->il != HSI_BSQ)
        return pwrite_all(fd, p, B * n * S * e, w->header_offset + y0 * B * S * e, w->data.final_path);
    for (int64_t b = 0; b < B && st == HSI_OK; b++)
        st = pwrite_all(fd, p + b * band_stride, n * S * e, w->header_offset + (b * w->L + y0) * S * e,
                        w->data.final_path);
    return st;
}

/* One chunk of n lines: lines already in the file's order are written as
 * they are; others are converted into the tile in file order first. */
static hsi_status write_chunk(hsi_envi_writer *w, const hsi_view *src, int64_t y0, int64_t n)
{
    hsi_status st = HSI_OK;
    int64_t B = w->B, S = w->S, e = w->esz;
    int64_t bytes = B * n * S * e;
    int swapped = e > 1 && (w->byte_order == 1) == (hsi_host_is_little_endian() != 0);
    if (chunk_is_file_order(w, src, n, swapped))
        return write_file_order(w, (const uint8_t *)src->buf->data + src->offset, src->strides[0], y0, n);
    if (bytes > w->tile_cap) {
        hsi_aligned_free(w->tile);
        w->tile_cap = 0;
        if (!(w->tile = hsi_aligned_alloc((size_t)bytes)))
            return HSI_FAIL(HSI_ERR_NOMEM, "out of memory for a %lld-byte tile", (long long)bytes);
        w->tile_cap = bytes;
    }
    /* the tile as a (B, n, S) view in file order for this interleave */
    hsi_buffer *tb = NULL;
    hsi_view dst;
    memset(&dst, 0, sizeof dst);
    int64_t strides[3];
    if (w->il == HSI_BSQ) { /* tile: (B, n, S) packed; one write per band */
        strides[0] = n * S * e;
        strides[1] = S * e;
        strides[2] = e;
    } else {
        hsi_interleave_strides(w->il, B, n, S, e, strides);
    }
    int64_t shape[3] = {B, n, S};
    HSI_TRY(hsi_buffer_wrap(&tb, w->tile, (size_t)bytes, HSI_BUF_HOST, NULL, NULL));
    HSI_TRY(hsi_view_make(&dst, tb, 0, w->dtype, 3, shape, strides, swapped));
    HSI_TRY(hsi_view_copy(&dst, src));
    st = write_file_order(w, w->tile, n * S * e, y0, n);
cleanup:
    hsi_view_release(&dst);
    hsi_buffer_release(tb);
    return st;
}

/* lines (B, n, S) as lines y0.. of the file, in chunks of about TILE_BYTES
 * (at least one line): bounded memory. */
static hsi_status write_lines(hsi_envi_writer *w, int64_t y0, const hsi_view *lines)
{
    hsi_status st = HSI_OK;
    hsi_view part;
    memset(&part, 0, sizeof part);
    int64_t line_bytes = w->B * w->S * w->esz;
    int64_t per = TILE_BYTES / (line_bytes ? line_bytes : 1);
    if (per < 1) per = 1;
    for (int64_t y = 0; y < lines->shape[1]; y += per) {
        int64_t n = lines->shape[1] - y < per ? lines->shape[1] - y : per;
        HSI_TRY(hsi_view_slice(&part, lines, 1, y, y + n, 1));
        HSI_TRY(write_chunk(w, &part, y0 + y, n));
        hsi_view_release(&part);
    }
cleanup:
    hsi_view_release(&part);
    return st;
}

hsi_status hsi_envi_writer_write(hsi_envi_writer *w, const hsi_view *lines)
{
    if (!w) return HSI_FAIL(HSI_ERR_STATE, "ENVI writer: not open");
    if (lines->ndim != 3 || lines->shape[0] != w->B || lines->shape[2] != w->S)
        return HSI_FAIL(HSI_ERR_ARG,
                        "%s: lines must be a (bands %lld, n, samples %lld) view, got %d-D "
                        "(%lld, %lld, %lld)",
                        w->hdr.final_path, (long long)w->B, (long long)w->S, lines->ndim,
                        (long long)lines->shape[0], (long long)(lines->ndim > 1 ? lines->shape[1] : 0),
                        (long long)(lines->ndim > 2 ? lines->shape[2] : 0));
    if (w->lines_done + lines->shape[1] > w->L)
        return HSI_FAIL(HSI_ERR_ARG, "%s: %lld lines given after %lld of %lld", w->hdr.final_path,
                        (long long)lines->shape[1], (long long)w->lines_done, (long long)w->L);
    if (hsi_dtype_is_complex(lines->dtype) && !hsi_dtype_is_complex(w->dtype))
        return HSI_FAIL(HSI_ERR_UNSUPPORTED,
                        "%s: cannot write %s data as %s: the imaginary part would be lost",
                        w->hdr.final_path, hsi_dtype_name(lines->dtype), hsi_dtype_name(w->dtype));
    hsi_status st = write_lines(w, w->lines_done, lines);
    if (st == HSI_OK) w->lines_done += lines->shape[1];
    return st;
}

const char *hsi_envi_writer_data_temp(const hsi_envi_writer *w) { return w ? w->data.tmp_path : NULL; }

hsi_status hsi_envi_writer_attach(hsi_envi_writer **out, const char *data_temp, const char *hdr_path,
                                  int64_t B, int64_t L, int64_t S, const hsi_envi_write_options *o)
{
    *out = NULL;
    hsi_envi_writer *w = writer_new(B, L, S, HSI_DT_INVALID, o);
    if (!w) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    w->attached = 1;
    w->data.final_path = strdup(hdr_path); /* for messages */
    w->data.fp = fopen(data_temp, "r+b");
    if (!w->data.fp || !w->data.final_path) {
        hsi_status st = HSI_FAIL(HSI_ERR_IO, "%s: cannot open the shared temporary data file %s: %s", hdr_path,
                                 data_temp, strerror(errno));
        writer_free(w);
        return st;
    }
    *out = w;
    return HSI_OK;
}

hsi_status hsi_envi_writer_write_at(hsi_envi_writer *w, int64_t line0, const hsi_view *lines)
{
    if (!w) return HSI_FAIL(HSI_ERR_STATE, "ENVI writer: not open");
    if (lines->ndim != 3 || lines->shape[0] != w->B || lines->shape[2] != w->S || line0 < 0 ||
        line0 + lines->shape[1] > w->L)
        return HSI_FAIL(HSI_ERR_ARG, "%s: lines %lld..%lld of a (%lld, %lld, %lld) cube do not fit", w->data.final_path,
                        (long long)line0, (long long)(line0 + (lines->ndim == 3 ? lines->shape[1] : 0)),
                        (long long)w->B, (long long)w->L, (long long)w->S);
    hsi_status st = write_lines(w, line0, lines);
    if (st == HSI_OK) w->lines_done += lines->shape[1];
    return st;
}

void hsi_envi_writer_lines_elsewhere(hsi_envi_writer *w, int64_t n_lines)
{
    if (w) w->lines_done += n_lines;
}

hsi_status hsi_envi_writer_finish(hsi_envi_writer *w)
{
    hsi_status st = HSI_OK;
    if (!w) return HSI_FAIL(HSI_ERR_STATE, "ENVI writer: not open");
    if (w->attached) { /* our lines on disk before the opener commits */
        if (fflush(w->data.fp) != 0 || fsync(fileno(w->data.fp)) != 0)
            st = HSI_FAIL(HSI_ERR_IO, "%s: cannot write the shared data file: %s", w->data.final_path,
                          strerror(errno));
        goto cleanup;
    }
    if (w->lines_done != w->L) {
        st = HSI_FAIL(HSI_ERR_STATE, "%s: only %lld of %lld lines were written; nothing kept",
                      w->hdr.final_path, (long long)w->lines_done, (long long)w->L);
        goto cleanup;
    }
    size_t hn = strlen(w->header_text);
    if (fwrite(w->header_text, 1, hn, w->hdr.fp) != hn) {
        st = HSI_FAIL(HSI_ERR_IO, "%s: cannot write the header: %s", w->hdr.final_path,
                      strerror(errno));
        goto cleanup;
    }
    /* both complete: moved into place as a pair (core/files.c) */
    st = hsi_atomic_commit_pair(&w->data, &w->hdr);
cleanup:
    writer_free(w);
    return st;
}

void hsi_envi_writer_abort(hsi_envi_writer *w) { writer_free(w); }

hsi_status hsi_envi_write(const char *hdr_path, const hsi_view *cube, const hsi_meta *meta,
                          const hsi_envi_write_options *o)
{
    hsi_status st = HSI_OK;
    hsi_envi_writer *w = NULL;
    hsi_envi_write_options opt;
    hsi_meta tmp;
    int have_tmp = 0;
    if (!cube || cube->ndim != 3)
        return HSI_FAIL(HSI_ERR_ARG, "%s: hsi_envi_write needs a (band, line, sample) view",
                        hdr_path);
    if (o) opt = *o;
    else hsi_envi_write_options_init(&opt);
    if (opt.dtype == HSI_DT_INVALID) opt.dtype = cube->dtype;
    if (!meta) {
        hsi_meta_init(&tmp);
        have_tmp = 1;
        meta = &tmp;
    }
    hsi_progress pr;
    hsi_progress_begin(&pr, "writing", cube->shape[1]);
    HSI_TRY(hsi_envi_writer_open(&w, hdr_path, meta, cube->shape[0], cube->shape[1],
                                 cube->shape[2], &opt));
    /* the writer chunks internally; hand it bands-by-lines slabs so the
     * progress bar moves */
    int64_t slab = 256;
    hsi_view part;
    memset(&part, 0, sizeof part);
    for (int64_t y = 0; y < cube->shape[1]; y += slab) {
        int64_t n = cube->shape[1] - y < slab ? cube->shape[1] - y : slab;
        st = hsi_view_slice(&part, cube, 1, y, y + n, 1);
        if (st == HSI_OK) st = hsi_envi_writer_write(w, &part);
        hsi_view_release(&part);
        if (st != HSI_OK) goto cleanup;
        hsi_progress_update(&pr, y + n);
    }
    st = hsi_envi_writer_finish(w);
    w = NULL;
cleanup:
    hsi_progress_end(&pr);
    hsi_envi_writer_abort(w);
    if (have_tmp) hsi_meta_free(&tmp);
    return st;
}

/* Process r of N produces lines [L*r/N, L*(r+1)/N): process 0 opens and
 * sizes the output and hands the others its temporary data file, each
 * writes its lines where they go, and once all have flushed (a barrier)
 * process 0 renames the pair into place. One process: no communication. */
hsi_status hsi_envi_write_shared(const char *hdr_path, const hsi_meta *meta, int64_t n_bands,
                                 int64_t n_lines, int64_t n_samples, const hsi_envi_write_options *o,
                                 int across_ranks, hsi_envi_produce_fn produce, void *ctx)
{
    hsi_status st = HSI_OK;
    hsi_envi_writer *w = NULL;
    char tmp[4096] = "";
    const int r = across_ranks ? hsi_dist_rank() : 0, N = across_ranks ? hsi_dist_size() : 1;
    const int64_t L = n_lines;
    hsi_status opened = HSI_OK;
    if (r == 0) {
        opened = hsi_envi_writer_open(&w, hdr_path, meta, n_bands, L, n_samples, o);
        if (opened == HSI_OK) snprintf(tmp, sizeof tmp, "%s", hsi_envi_writer_data_temp(w));
    }
    if (N > 1) HSI_TRY(hsi_dist_bcast(tmp, sizeof tmp, 0));
    if (opened != HSI_OK) return opened;
    if (!tmp[0]) return HSI_FAIL(HSI_ERR_IO, "%s: rank 0 could not open the output", hdr_path);
    if (r != 0) HSI_TRY(hsi_envi_writer_attach(&w, tmp, hdr_path, n_bands, L, n_samples, o));
    int64_t y0 = L * r / N, y1 = L * (r + 1) / N;
    if (y1 > y0) HSI_TRY(produce(ctx, w, y0, y1));
    if (r != 0) { /* on disk before rank 0 commits */
        st = hsi_envi_writer_finish(w);
        w = NULL;
        if (st != HSI_OK) goto cleanup;
    }
    if (N > 1) HSI_TRY(hsi_dist_barrier());
    if (r == 0) {
        hsi_envi_writer_lines_elsewhere(w, L - (y1 - y0));
        st = hsi_envi_writer_finish(w);
        w = NULL;
    }
cleanup:
    if (w) hsi_envi_writer_abort(w);
    return st;
}

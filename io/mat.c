/* mat.c — MATLAB .mat files. v5 files (zlib-compressed or not) are read
 * here: the element stream is walked (every tag against the file size, every
 * variable header parsed, the data element against the dimensions) and a
 * variable's data is read in its stored type, a compressed one by inflating
 * its zlib stream to the end (checksum included). v7.3 files go through
 * libmatio and HDF5, after the HDF5 superblock's recorded size is checked
 * against the file and the dataset's storage against HDF5; matio's and
 * HDF5's read status is checked. A truncated or damaged file is refused,
 * never read as zeros. The view's strides express MATLAB's column-major
 * order (no copy after the read). Not a writer. */
#define _GNU_SOURCE
#include "mat.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <matio.h>
#include <zlib.h>
#if defined(__has_include)
#if __has_include(<hdf5.h>)
#include <hdf5.h>
#define HSI_MAT_HDF5 1
#endif
#endif

#include "meta.h"

#define MAT_HEADER 128          /* v5 / v7.3 text header */
#define MAT_MAX_ELEMENTS 100000 /* top-level elements walked */
#define MAT_HEAD_BYTES 4096     /* bytes of a variable parsed for its header */

/* ------------------------------------------------------------ matio's log */

/* matio reports through a log callback: keep its last message and count its
 * errors (per thread) for our messages instead of letting it print. HDF5's
 * error stack reaches the same callback (matio installs it). */
static _Thread_local char mat_msg[256];
static _Thread_local int mat_errors;

static void mat_log(int level, char *message)
{
    if (level & (MATIO_LOG_LEVEL_ERROR | MATIO_LOG_LEVEL_CRITICAL)) mat_errors++;
    /* one line: HDF5 stack frames come as "...\n      major: ...\n      minor: ..." */
    size_t w = 0;
    int space = 0;
    for (const char *p = message ? message : ""; *p && w + 1 < sizeof mat_msg; p++) {
        if (*p == '\n' || *p == '\r' || *p == '\t' || *p == ' ') {
            space = w > 0;
            continue;
        }
        if (space && w + 2 < sizeof mat_msg) mat_msg[w++] = ' ';
        space = 0;
        mat_msg[w++] = *p;
    }
    mat_msg[w] = 0;
}

static void mat_init(void)
{
    static int done;
    if (!__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL)) Mat_LogInitFunc("hsi", mat_log);
    mat_msg[0] = 0;
    mat_errors = 0;
}

static const char *mat_why(void) { return mat_msg[0] ? mat_msg : "matio gave no reason"; }

/* 1234567 -> "1,234,567" (six rotating buffers per thread, for messages). */
static const char *num(int64_t v)
{
    static _Thread_local char bufs[6][32];
    static _Thread_local int slot;
    char *o = bufs[slot++ % 6], t[24];
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    int n = snprintf(t, sizeof t, "%llu", (unsigned long long)u), w = 0;
    if (v < 0) o[w++] = '-';
    for (int i = 0; i < n; i++) {
        if (i && (n - i) % 3 == 0) o[w++] = ',';
        o[w++] = t[i];
    }
    o[w] = 0;
    return o;
}

int hsi_mat_probe(const void *data, size_t size)
{
    static const uint8_t hdf5[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    const uint8_t *p = data;
    if (size >= 10 && (memcmp(p, "MATLAB 5.0", 10) == 0 || memcmp(p, "MATLAB 7.", 9) == 0))
        return 1;
    if (size >= 8 && memcmp(p, hdf5, 8) == 0) return 1;
    if (size >= 520 && memcmp(p + 512, hdf5, 8) == 0) return 1;
    return 0;
}

/* ----------------------------------------------------------- class tables */

static const char *class_name(int c)
{
    static const char *names[] = {"empty",  "cell",   "struct", "object", "char",    "sparse",
                                  "double", "single", "int8",   "uint8",  "int16",   "uint16",
                                  "int32",  "uint32", "int64",  "uint64", "function", "opaque"};
    return c >= 0 && c < (int)(sizeof names / sizeof *names) ? names[c] : "unknown class";
}

static hsi_dtype class_dtype(int c)
{
    switch (c) {
    case MAT_C_DOUBLE: return HSI_F64;
    case MAT_C_SINGLE: return HSI_F32;
    case MAT_C_INT8: return HSI_I8;
    case MAT_C_UINT8: return HSI_U8;
    case MAT_C_INT16: return HSI_I16;
    case MAT_C_UINT16: return HSI_U16;
    case MAT_C_INT32: return HSI_I32;
    case MAT_C_UINT32: return HSI_U32;
    case MAT_C_INT64: return HSI_I64;
    case MAT_C_UINT64: return HSI_U64;
    default: return HSI_DT_INVALID;
    }
}

static enum matio_classes dtype_class(hsi_dtype dt)
{
    switch (dt) {
    case HSI_F64: return MAT_C_DOUBLE;
    case HSI_F32: return MAT_C_SINGLE;
    case HSI_I8: return MAT_C_INT8;
    case HSI_U8: return MAT_C_UINT8;
    case HSI_I16: return MAT_C_INT16;
    case HSI_U16: return MAT_C_UINT16;
    case HSI_I32: return MAT_C_INT32;
    case HSI_U32: return MAT_C_UINT32;
    case HSI_I64: return MAT_C_INT64;
    case HSI_U64: return MAT_C_UINT64;
    default: return MAT_C_EMPTY;
    }
}

/* v5 data types (miINT8 ... miUINT64) of numeric data. */
static hsi_dtype mi_dtype(uint32_t t)
{
    switch (t) {
    case 1: return HSI_I8;
    case 2: return HSI_U8;
    case 3: return HSI_I16;
    case 4: return HSI_U16;
    case 5: return HSI_I32;
    case 6: return HSI_U32;
    case 7: return HSI_F32;
    case 9: return HSI_F64;
    case 12: return HSI_I64;
    case 13: return HSI_U64;
    default: return HSI_DT_INVALID;
    }
}

/* ------------------------------------------------------- the file's table */

/* One variable (or a top-level element that is none) of a scanned file. */
typedef struct mat_entry {
    hsi_mat_var var;
    int mclass;       /* MATLAB class (matio's enum = the v5 class id) */
    int64_t n_elems;  /* product of all dimensions; -1 when it overflows */
    char bad[320];    /* why its data cannot be read ("" = no known problem) */
    /* v5: where it lies */
    int64_t offset;   /* of the element's tag in the file */
    uint32_t type;    /* 14 miMATRIX, 15 miCOMPRESSED */
    uint32_t size;    /* bytes after the tag */
    uint32_t inner;   /* compressed: the miMATRIX size inside the zlib stream */
    int64_t real_off; /* the real part's data, from the miMATRIX tag (in the
                         inflated stream when compressed) */
    uint32_t real_size;
} mat_entry;

typedef struct mat_scan {
    const char *path;
    int fd;
    int64_t file_size;
    int v73;
    int swap;
    mat_entry *e;
    int n, cap;
    int n_elements;     /* v5 top-level elements walked */
    char skipped[512];  /* elements that are not variables, for messages */
} mat_scan;

static void scan_free(mat_scan *s)
{
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
    free(s->e);
    s->e = NULL;
    s->n = s->cap = 0;
}

static hsi_status scan_add(mat_scan *s, mat_entry **out)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 8;
        mat_entry *ne = realloc(s->e, (size_t)cap * sizeof *ne);
        if (!ne) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory listing %s", s->path);
        s->e = ne;
        s->cap = cap;
    }
    *out = &s->e[s->n++];
    memset(*out, 0, sizeof **out);
    (*out)->n_elems = 1;
    return HSI_OK;
}

static void note_skipped(mat_scan *s, const char *fmt, int64_t a, int64_t b)
{
    size_t w = strlen(s->skipped);
    if (w + 4 >= sizeof s->skipped) return;
    snprintf(s->skipped + w, sizeof s->skipped - w, "%s", w ? "; " : "");
    w = strlen(s->skipped);
    snprintf(s->skipped + w, sizeof s->skipped - w, fmt, (long long)a, (long long)b);
}

/* Reads exactly n bytes at off (the caller has checked they lie in the file). */
static hsi_status read_at(const mat_scan *s, int64_t off, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(s->fd, (char *)buf + got, n - got, (off_t)(off + (int64_t)got));
        if (r <= 0)
            return HSI_FAIL(HSI_ERR_IO, "%s: read error at offset %s (%s bytes wanted)", s->path,
                            num(off + (int64_t)got), num((int64_t)(n - got)));
        got += (size_t)r;
    }
    return HSI_OK;
}

static uint32_t get_u32(const uint8_t *p, int swap)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return swap ? __builtin_bswap32(v) : v;
}

static uint16_t get_u16(const uint8_t *p, int swap)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return swap ? __builtin_bswap16(v) : v;
}

/* ------------------------------------------------ v5 miMATRIX header parse */

/* The v5 miMATRIX header, parsed from its first bytes (tag included). */
typedef struct v5_head {
    uint32_t size;   /* bytes after the miMATRIX tag */
    int mclass, is_complex, is_logical;
    int rank;
    int64_t dims[8];
    int64_t n_elems; /* -1 on overflow */
    char name[64];
    int has_real;
    uint32_t real_type, real_size;
    int64_t real_off; /* of the real part's data, from the miMATRIX tag */
} v5_head;

/* A sub-element's tag at off of p (n bytes): 1 read, -1 p too short, 0 bad. */
static int sub_tag(const uint8_t *p, size_t n, size_t off, int swap, uint32_t *type,
                   uint32_t *size, size_t *data, size_t *next)
{
    if (off + 8 > n) return -1;
    uint32_t w = get_u32(p + off, swap);
    if (w >> 16) { /* small data element: type and size share 4 bytes */
        *type = w & 0xffff;
        *size = w >> 16;
        if (*size > 4) return 0;
        *data = off + 4;
        *next = off + 8;
    } else {
        *type = w;
        *size = get_u32(p + off + 4, swap);
        *data = off + 8;
        *next = off + 8 + (((size_t)*size + 7) & ~(size_t)7);
    }
    return 1;
}

/* Parses a miMATRIX header from p (n bytes: all of it, or a prefix when the
 * variable is longer). 1: parsed; -1: p too short (needs more than n bytes
 * of the header); 0: malformed, why says what. */
static int v5_parse_head(v5_head *h, const uint8_t *p, size_t n, int swap, char *why,
                         size_t wlen)
{
    memset(h, 0, sizeof *h);
    if (n < 8) return -1;
    uint32_t t = get_u32(p, swap);
    if (t != 14) {
        snprintf(why, wlen, "its data is of type %u, expected miMATRIX (14)", t);
        return 0;
    }
    h->size = get_u32(p + 4, swap);
    size_t end = 8 + (size_t)h->size; /* the declared end of the variable */
    if (h->size == 0) return 1;       /* an empty placeholder ([]), no name */
    uint32_t type, size;
    size_t data, next, off = 8;
    int r = sub_tag(p, n, off, swap, &type, &size, &data, &next);
    if (r <= 0) goto short_or_bad;
    if (type != 6 || size != 8 || next > end) {
        snprintf(
            why, wlen,
            "its array flags (byte %zu of the variable) are %u bytes of type %u, expected 8 of "
            "miUINT32 (6)",
            off, size, type);
        return 0;
    }
    if (data + 8 > n) return -1;
    uint32_t flags = get_u32(p + data, swap);
    h->mclass = (int)(flags & 0xff);
    h->is_complex = (flags & 0x800) != 0;
    h->is_logical = (flags & 0x200) != 0;
    off = next;
    if (h->mclass != MAT_C_OPAQUE) { /* dimensions, except for opaque objects */
        r = sub_tag(p, n, off, swap, &type, &size, &data, &next);
        if (r <= 0) goto short_or_bad;
        if (type != 5 || size % 4 || size < 8 || next > end) {
            snprintf(why, wlen,
                     "its dimensions (byte %zu of the variable) are %u bytes of type %u, expected "
                     "a multiple of 4 (at least 8) of miINT32 (5)",
                     off, size, type);
            return 0;
        }
        if (data + size > n) return -1;
        h->rank = (int)(size / 4);
        int64_t cnt = 1;
        for (int k = 0; k < h->rank; k++) {
            int32_t d = (int32_t)get_u32(p + data + 4 * (size_t)k, swap);
            if (d < 0) {
                snprintf(why, wlen, "its dimension %d is %d, expected >= 0", k + 1, d);
                return 0;
            }
            if (k < 8) h->dims[k] = d;
            if (cnt >= 0 && !hsi_mul_ok(cnt, d, &cnt)) cnt = -1;
        }
        h->n_elems = cnt;
        off = next;
    }
    r = sub_tag(p, n, off, swap, &type, &size, &data, &next);
    if (r <= 0) goto short_or_bad;
    if (type != 1 || next > end) {
        snprintf(why, wlen,
                 "its name (byte %zu of the variable) is %u bytes of type %u, expected miINT8 (1)",
                 off, size, type);
        return 0;
    }
    if (data + (size < 64 ? size : 64) > n) return -1;
    size_t k = size < sizeof h->name - 1 ? size : sizeof h->name - 1;
    memcpy(h->name, p + data, k);
    h->name[k] = 0;
    off = next;
    if (class_dtype(h->mclass) == HSI_DT_INVALID) return 1; /* no numeric data to locate */
    r = sub_tag(p, n, off, swap, &type, &size, &data, &next);
    if (r <= 0) goto short_or_bad;
    if (data + (size_t)size > end) {
        snprintf(why, wlen,
                 "its data element (byte %zu of the variable) holds %s bytes, past the variable's "
                 "end at %s",
                 off, num(size), num((int64_t)end));
        return 0;
    }
    h->has_real = 1;
    h->real_type = type;
    h->real_size = size;
    h->real_off = (int64_t)data;
    return 1;
short_or_bad:
    if (r < 0) return -1;
    snprintf(why, wlen, "a small data element (byte %zu of the variable) claims more than 4 bytes",
             off);
    return 0;
}

/* Copies a parsed header into the entry; states why the data is unusable. */
static void v5_describe(mat_entry *e, const v5_head *h)
{
    hsi_mat_var *d = &e->var;
    snprintf(d->name, sizeof d->name, "%s", h->name);
    e->mclass = h->mclass;
    snprintf(d->mclass, sizeof d->mclass, "%s", class_name(h->mclass));
    d->rank = h->rank > 8 ? 8 : h->rank;
    memcpy(d->dims, h->dims, sizeof d->dims);
    d->is_complex = h->is_complex;
    d->is_logical = h->is_logical;
    e->n_elems = h->n_elems;
    d->dtype = HSI_DT_INVALID;
    if (class_dtype(h->mclass) == HSI_DT_INVALID || h->is_complex) return;
    hsi_dtype stored = mi_dtype(h->real_type);
    if (!h->has_real || stored == HSI_DT_INVALID) {
        snprintf(e->bad, sizeof e->bad, "variable '%s' (%s) stores its data as type %u, not a "
                                        "numeric type", h->name, class_name(h->mclass),
                 h->real_type);
        return;
    }
    d->dtype = stored; /* the stored type, as read_entry reads it */
    int64_t need;
    if (h->n_elems < 0 || !hsi_mul_ok(h->n_elems, (int64_t)hsi_dtype_size(stored), &need)) {
        snprintf(e->bad, sizeof e->bad, "variable '%s': its dimensions overflow 64 bits", h->name);
        return;
    }
    if (need != (int64_t)h->real_size)
        snprintf(e->bad, sizeof e->bad, "variable '%s' (%s elements of %s) needs %s bytes of "
                                        "data, its data element holds %s", h->name,
                 num(h->n_elems), hsi_dtype_name(stored), num(need), num(h->real_size));
}

/* ------------------------------------------------------------ v5 elements */

/* Inflates the start of a compressed element (avail = its bytes present in
 * the file) into out (cap bytes). *got: bytes produced; *zerr: the zlib
 * error (Z_OK when none) with its message in zmsg. */
static hsi_status inflate_head(const mat_scan *s, int64_t data_off, int64_t avail, uint8_t *out,
                               size_t cap, size_t *got, int *zerr, char *zmsg, size_t zlen)
{
    hsi_status st = HSI_OK;
    uint8_t in[16384];
    z_stream z;
    memset(&z, 0, sizeof z);
    *got = 0;
    *zerr = Z_OK;
    if (inflateInit(&z) != Z_OK) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory (zlib)");
    z.next_out = out;
    z.avail_out = (uInt)cap;
    int64_t pos = 0;
    while (z.avail_out > 0 && pos < avail) {
        size_t take = avail - pos < (int64_t)sizeof in ? (size_t)(avail - pos) : sizeof in;
        HSI_TRY(read_at(s, data_off + pos, in, take));
        pos += (int64_t)take;
        z.next_in = in;
        z.avail_in = (uInt)take;
        int r = inflate(&z, Z_SYNC_FLUSH);
        if (r == Z_STREAM_END) break;
        if (r != Z_OK && r != Z_BUF_ERROR) {
            *zerr = r;
            snprintf(zmsg, zlen, "%s", z.msg ? z.msg : zError(r));
            break;
        }
    }
cleanup:
    *got = cap - z.avail_out;
    inflateEnd(&z);
    return st;
}

/* Walks the v5 element stream: one entry per variable. A truncated element,
 * a corrupt zlib header or a malformed variable header refuses the file. */
static hsi_status scan_v5(mat_scan *s)
{
    hsi_status st = HSI_OK;
    uint8_t *head = malloc(MAT_HEAD_BYTES);
    if (!head) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    int64_t off = MAT_HEADER;
    for (int k = 1; off < s->file_size; k++) {
        if (k > MAT_MAX_ELEMENTS) {
            st = HSI_FAIL(HSI_ERR_UNSUPPORTED, "%s: more than %s top-level elements", s->path,
                          num(MAT_MAX_ELEMENTS));
            goto cleanup;
        }
        s->n_elements = k;
        int64_t left = s->file_size - off;
        uint8_t tag[8];
        if (left < 8) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: the file ends inside the tag of element %d at "
                                          "offset %s (8 bytes needed, %s found): the file is "
                                          "truncated", s->path, k, num(off), num(left));
            goto cleanup;
        }
        HSI_TRY(read_at(s, off, tag, 8));
        uint32_t type = get_u32(tag, s->swap), size = get_u32(tag + 4, s->swap);
        int64_t have = left - 8; /* bytes of the element's data in the file */
        /* compressed elements are not padded, the others to 8 bytes */
        int64_t next =
            off + 8 + (type == 15 ? (int64_t)size : (int64_t)(((uint64_t)size + 7) & ~(uint64_t)7));
        if (type != 14 && type != 15) {
            if ((int64_t)size > have) {
                st = HSI_FAIL(HSI_ERR_FORMAT,
                              "%s: element %d at offset %s (type %u) needs %s "
                              "bytes of data, the file ends after %s: the file "
                              "is truncated or not a MAT-file",
                              s->path, k, num(off), type, num(size), num(have));
                goto cleanup;
            }
            note_skipped(s, "element at offset %lld of type %lld (not a variable)", off, type);
            off = next;
            continue;
        }
        /* the variable's header: from the file, or inflated */
        size_t got = 0;
        int zerr = Z_OK;
        char zmsg[128] = "", why[256] = "";
        int64_t avail = (int64_t)size < have ? (int64_t)size : have;
        if (type == 15) {
            HSI_TRY(inflate_head(s, off + 8, avail, head, MAT_HEAD_BYTES, &got, &zerr, zmsg,
                                 sizeof zmsg));
        } else {
            memcpy(head, tag, 8);
            got = avail + 8 < MAT_HEAD_BYTES ? (size_t)avail + 8 : MAT_HEAD_BYTES;
            HSI_TRY(read_at(s, off + 8, head + 8, got - 8));
        }
        v5_head h;
        memset(&h, 0, sizeof h);
        int r = zerr == Z_OK ? v5_parse_head(&h, head, got, s->swap, why, sizeof why) : -1;
        char who[128];
        if (h.name[0])
            snprintf(who, sizeof who, "variable '%s' (element %d at offset %s)", h.name, k,
                     num(off));
        else
            snprintf(who, sizeof who, "element %d at offset %s", k, num(off));
        if ((int64_t)size > have) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: %s needs %s bytes of %sdata, the file ends after "
                                          "%s of them (file size %s): the file is truncated",
                          s->path, who, num(size), type == 15 ? "compressed " : "", num(have),
                          num(s->file_size));
            goto cleanup;
        }
        if (zerr != Z_OK) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: %s: its compressed data is corrupt (zlib: %s)",
                          s->path, who, zmsg);
            goto cleanup;
        }
        if (r == 0) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: %s: not a valid variable: %s", s->path, who, why);
            goto cleanup;
        }
        if (r < 0 && (type == 15 ? got < MAT_HEAD_BYTES : got < (size_t)size + 8)) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: %s: its %s%s bytes end inside the variable's "
                                          "header", s->path, who, num((int64_t)got),
                          type == 15 ? " inflated" : "");
            goto cleanup;
        }
        if (r < 0) { /* a header longer than MAT_HEAD_BYTES: listed, never read */
            note_skipped(s, "element at offset %lld (a variable header over %lld bytes)", off,
                         MAT_HEAD_BYTES);
        } else if (!h.name[0]) { /* MATLAB's subsystem data, or an empty [] placeholder */
            note_skipped(s, "unnamed element at offset %lld (%lld bytes)", off, size);
        } else {
            mat_entry *e = NULL;
            HSI_TRY(scan_add(s, &e));
            v5_describe(e, &h);
            e->offset = off;
            e->type = type;
            e->size = size;
            e->inner = h.size;
            e->real_off = h.real_off;
            e->real_size = h.real_size;
        }
        off = next;
    }
cleanup:
    free(head);
    return st;
}

/* Inflates a compressed variable to its end: the zlib stream must end (its
 * checksum verified) exactly at the size the variable's header promises.
 * The n bytes of its data (from e->real_off of the stream) go to dst. */
static hsi_status v5_inflate(const mat_scan *s, const mat_entry *e, uint8_t *dst, int64_t n)
{
    hsi_status st = HSI_OK;
    enum { CHUNK = 1 << 16 };
    uint8_t *in = malloc(CHUNK), *out = malloc(CHUNK);
    z_stream z;
    memset(&z, 0, sizeof z);
    int inited = 0;
    const char *name = e->var.name;
    int64_t want = 8 + (int64_t)e->inner, pos = 0;
    if (!in || !out) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    if (inflateInit(&z) != Z_OK) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory (zlib)");
        goto cleanup;
    }
    inited = 1;
    int r = Z_OK;
    while (r != Z_STREAM_END) {
        if (z.avail_in == 0) {
            if (pos >= (int64_t)e->size) break;
            size_t take = (int64_t)e->size - pos < CHUNK ? (size_t)((int64_t)e->size - pos) : CHUNK;
            HSI_TRY(read_at(s, e->offset + 8 + pos, in, take));
            pos += (int64_t)take;
            z.next_in = in;
            z.avail_in = (uInt)take;
        }
        int64_t at = (int64_t)z.total_out; /* stream offset of out[0] */
        z.next_out = out;
        z.avail_out = CHUNK;
        r = inflate(&z, Z_NO_FLUSH);
        if (r != Z_OK && r != Z_STREAM_END && r != Z_BUF_ERROR) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: variable '%s' (element at offset %s): its "
                                          "compressed data is corrupt (zlib: %s, after %s of "
                                          "its %s compressed bytes, %s inflated)", s->path, name,
                          num(e->offset), z.msg ? z.msg : zError(r), num((int64_t)z.total_in),
                          num(e->size), num((int64_t)z.total_out));
            goto cleanup;
        }
        if ((int64_t)z.total_out > want) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: variable '%s' (element at offset %s): its "
                                          "compressed data inflates to more than the %s bytes "
                                          "its header promises", s->path, name, num(e->offset),
                          num(want));
            goto cleanup;
        }
        /* the part of [at, total_out) that is the data: [real_off, real_off + n) */
        int64_t lo = at > e->real_off ? at : e->real_off;
        int64_t hi =
            (int64_t)z.total_out < e->real_off + n ? (int64_t)z.total_out : e->real_off + n;
        if (dst && hi > lo) memcpy(dst + (lo - e->real_off), out + (lo - at), (size_t)(hi - lo));
    }
    if (r != Z_STREAM_END || (int64_t)z.total_out != want)
        st = HSI_FAIL(HSI_ERR_FORMAT,
                      "%s: variable '%s' (element at offset %s): its %s bytes "
                      "of compressed data inflate to %s bytes%s; its header "
                      "promises %s",
                      s->path, name, num(e->offset), num(e->size), num((int64_t)z.total_out),
                      r == Z_STREAM_END ? "" : " without the end of the zlib stream", num(want));
cleanup:
    if (inited) inflateEnd(&z);
    free(in);
    free(out);
    return st;
}

/* v5: the variable's n bytes of data, in its stored type and native byte
 * order, into a new host buffer *out (the scan has placed the data inside
 * the variable and the variable inside the file). */
static hsi_status v5_read(hsi_buffer **out, const mat_scan *s, const mat_entry *e, int64_t n,
                          hsi_dtype dt)
{
    hsi_status st = HSI_OK;
    hsi_buffer *buf = NULL;
    if (n != (int64_t)e->real_size || e->real_off < 0 ||
        e->real_off + n > 8 + (int64_t)e->inner) { /* v5_describe and the scan saw to it */
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: variable '%s': its data (%s bytes at byte %s) does "
                                      "not fit its %s-byte element", s->path, e->var.name,
                      num(e->real_size), num(e->real_off), num(8 + (int64_t)e->inner));
        goto cleanup;
    }
    /* deflate expands at most 1032:1: refuse a lie before allocating for it */
    if (e->type == 15 && n / 1032 > (int64_t)e->size + 64) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: variable '%s' needs %s bytes of data, more than its "
                                      "%s compressed bytes can hold", s->path, e->var.name,
                      num(n), num(e->size));
        goto cleanup;
    }
    HSI_TRY(hsi_buffer_alloc(&buf, (size_t)(n ? n : 1), HSI_BUF_HOST));
    if (e->type == 15)
        HSI_TRY(v5_inflate(s, e, buf->data, n));
    else if (n > 0)
        HSI_TRY(read_at(s, e->offset + e->real_off, buf->data, (size_t)n));
    if (s->swap && hsi_dtype_size(dt) > 1)
        hsi_bswap_inplace(buf->data, hsi_dtype_size(dt), n / (int64_t)hsi_dtype_size(dt));
    *out = buf;
    buf = NULL;
cleanup:
    hsi_buffer_release(buf);
    return st;
}

/* ------------------------------------------------------------------ v7.3 */

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* An HDF5 superblock p (versions 0-3): the end-of-file address it records
 * (HDF5 refuses a file shorter than that). 0 when it cannot say. */
static uint64_t h5_stored_eof(const uint8_t *p, size_t n)
{
    if (n < 16) return 0;
    int ver = p[8];
    if (ver == 0 || ver == 1) {
        int so = p[13], base = ver == 0 ? 24 : 28;
        if ((so != 2 && so != 4 && so != 8) || (size_t)base + 3 * (size_t)so > n) return 0;
        return get_le(p + base + 2 * so, so);
    }
    if (ver == 2 || ver == 3) {
        int so = p[9];
        if ((so != 2 && so != 4 && so != 8) || 12 + 3 * (size_t)so > n) return 0;
        return get_le(p + 12 + 2 * so, so);
    }
    return 0;
}

/* A version 0/1 superblock sb (read at offset at) may point at a driver
 * information block, whose 4-byte size HDF5 allocates as it stands: a
 * damaged one made libhdf5 take 4 GiB for a 949-byte file (found by
 * fuzz_mat). The block (16 bytes, then its size) must lie in the file.
 * Its address is relative to the base address, which HDF5 takes to be
 * where it found the signature whatever the superblock records (a second
 * fuzz_mat file recorded 512 with its signature at 1024). */
static hsi_status check_h5_driver_info(const mat_scan *s, const uint8_t *sb, int64_t at)
{
    int ver = sb[8], so = sb[13], fields = ver == 0 ? 24 : 28;
    if ((ver != 0 && ver != 1) || (so != 2 && so != 4 && so != 8)) return HSI_OK;
    uint64_t undef = so == 8 ? UINT64_MAX : ((uint64_t)1 << (8 * so)) - 1;
    uint64_t base = (uint64_t)at, drv = get_le(sb + fields + 3 * so, so);
    if (drv == undef) return HSI_OK;
    uint64_t fs = (uint64_t)s->file_size, pos = base < fs && drv < fs ? base + drv : UINT64_MAX, size = 0;
    if (pos <= fs - 8) {
        uint8_t hd[8];
        hsi_status st = read_at(s, (int64_t)pos, hd, sizeof hd);
        if (st != HSI_OK) return st;
        size = get_le(hd + 4, 4);
    }
    if (pos > fs - 8 || pos + 16 + size > fs)
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: MATLAB 7.3 (HDF5) file: its superblock (offset %s) "
                                        "points at a driver information block at %s of %s bytes, "
                                        "the file ends after %s: the file is truncated or damaged",
                        s->path, num(at), num((int64_t)(pos > INT64_MAX ? INT64_MAX : pos)),
                        num((int64_t)size + 16), num(s->file_size));
    return HSI_OK;
}

static hsi_status check_h5_size(const mat_scan *s)
{
    static const uint8_t sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    uint8_t sb[64];
    for (int64_t at = 0; at <= 2048; at = at ? 2 * at : 512) {
        if (at + (int64_t)sizeof sb > s->file_size) break;
        hsi_status st = read_at(s, at, sb, sizeof sb);
        if (st != HSI_OK) return st;
        if (memcmp(sb, sig, 8) != 0) continue;
        uint64_t eof = h5_stored_eof(sb, sizeof sb);
        if (eof > (uint64_t)s->file_size)
            return HSI_FAIL(HSI_ERR_FORMAT, "%s: MATLAB 7.3 (HDF5) file: its superblock (offset "
                                            "%s) records %s bytes, the file ends after %s: the "
                                            "file is truncated", s->path, num(at),
                            num((int64_t)(eof > INT64_MAX ? INT64_MAX : eof)), num(s->file_size));
        return check_h5_driver_info(s, sb, at);
    }
    return HSI_FAIL(HSI_ERR_FORMAT, "%s: MATLAB 7.3 header, but no HDF5 signature at offset 0, "
                                    "512, 1024 or 2048 (file size %s): the file is truncated or "
                                    "not a MATLAB 7.3 file", s->path, num(s->file_size));
}

static void describe_matio(mat_entry *e, const matvar_t *v)
{
    hsi_mat_var *d = &e->var;
    snprintf(d->name, sizeof d->name, "%s", v->name ? v->name : "");
    e->mclass = (int)v->class_type;
    snprintf(d->mclass, sizeof d->mclass, "%s", class_name(e->mclass));
    d->rank = v->rank < 0 ? 0 : v->rank > 8 ? 8 : v->rank;
    e->n_elems = 1;
    for (int k = 0; k < v->rank && v->dims; k++) {
        if (k < 8) d->dims[k] = (int64_t)v->dims[k];
        if (e->n_elems >= 0 && (v->dims[k] > INT64_MAX ||
                                !hsi_mul_ok(e->n_elems, (int64_t)v->dims[k], &e->n_elems)))
            e->n_elems = -1;
    }
    d->is_complex = v->isComplex != 0;
    d->is_logical = v->isLogical != 0;
    d->dtype = v->isComplex ? HSI_DT_INVALID : class_dtype(e->mclass);
}

static hsi_status scan_v73(mat_scan *s)
{
    hsi_status st = HSI_OK;
    mat_t *mat = NULL;
    HSI_TRY(check_h5_size(s));
    mat_init();
    mat = Mat_Open(s->path, MAT_ACC_RDONLY);
    if (!mat) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: MATLAB 7.3 (HDF5) file that matio cannot open (%s)",
                      s->path, mat_why());
        goto cleanup;
    }
    matvar_t *v;
    while ((v = Mat_VarReadNextInfo(mat)) != NULL) {
        mat_entry *e = NULL;
        st = s->n >= MAT_MAX_ELEMENTS ? HSI_FAIL(HSI_ERR_UNSUPPORTED, "%s: more than %s variables",
                                                 s->path, num(MAT_MAX_ELEMENTS))
                                      : scan_add(s, &e);
        if (st != HSI_OK) {
            Mat_VarFree(v);
            goto cleanup;
        }
        describe_matio(e, v);
        Mat_VarFree(v);
    }
    if (mat_errors)
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: MATLAB 7.3 (HDF5) file: listing its variables failed "
                                      "after %d (%s)", s->path, s->n, mat_why());
cleanup:
    if (mat) Mat_Close(mat);
    return st;
}

/* ------------------------------------------------------------ the scanner */

/* Opens path (refused without blocking when not a regular file), checks the
 * 128-byte header and lists every variable. */
static hsi_status scan_open(mat_scan *s, const char *path)
{
    hsi_status st = HSI_OK;
    memset(s, 0, sizeof *s);
    s->path = path;
    s->fd = -1;
    HSI_TRY(hsi_input_open(&s->fd, path, "MATLAB file", &s->file_size));
    uint8_t hdr[MAT_HEADER];
    size_t n = s->file_size < MAT_HEADER ? (size_t)s->file_size : MAT_HEADER;
    HSI_TRY(read_at(s, 0, hdr, n));
    /* matio, too, decides by bytes 124-127 (version, endian indicator), so
     * that is what is checked; the text is only for the messages */
    int text = n >= 6 && memcmp(hdr, "MATLAB", 6) == 0, hdf5 = n >= 8 && hsi_mat_probe(hdr, 8);
    if (n < MAT_HEADER && (text || hdf5)) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: the MAT-file header needs %d bytes, the file has %s: "
                                      "the file is truncated", path, MAT_HEADER, num(s->file_size));
        goto cleanup;
    }
    int endian_ok = n == MAT_HEADER && ((hdr[126] == 'I' && hdr[127] == 'M') ||
                                        (hdr[126] == 'M' && hdr[127] == 'I'));
    if (!endian_ok && !text) {
        char seen[48];
        size_t w = 0;
        for (size_t i = 0; i < n && i < 10 && w + 5 < sizeof seen; i++)
            w += (size_t)snprintf(seen + w, sizeof seen - w,
                                  hdr[i] >= 32 && hdr[i] < 127 ? "%c" : "\\x%02x", hdr[i]);
        seen[w] = 0;
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: not a MAT-file: expected the text 'MATLAB 5.0' or "
                                      "'MATLAB 7.3' at offset 0 and 'IM' or 'MI' at offset 126, "
                                      "found '%s'%s (file size %s)", path, seen,
                      hdf5 ? ", an HDF5 file without the 128-byte MAT-file header" : "",
                      num(s->file_size));
        goto cleanup;
    }
    if (!endian_ok) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: MAT-file endian indicator (offset 126) is "
                                      "0x%02x%02x, expected 'IM' or 'MI'", path, hdr[126],
                      hdr[127]);
        goto cleanup;
    }
    s->swap = hdr[126] == 'M';
    unsigned ver = get_u16(hdr + 124, s->swap);
    if (ver == 0x0200) {
        s->v73 = 1;
        HSI_TRY(scan_v73(s));
    } else if (ver == 0x0100) {
        HSI_TRY(scan_v5(s));
    } else {
        st = HSI_FAIL(HSI_ERR_UNSUPPORTED, "%s: MAT-file version (offset 124) is 0x%04x, "
                                           "expected 0x0100 (v5) or 0x0200 (v7.3)", path, ver);
    }
cleanup:
    if (st != HSI_OK) scan_free(s);
    return st;
}

/* Why a file yields no variable at all. */
static hsi_status no_variables(const mat_scan *s)
{
    if (s->v73)
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: MATLAB 7.3 (HDF5) file holds no variable matio "
                                        "can list (%s)", s->path,
                        mat_msg[0] ? mat_msg : "its root group is empty");
    if (s->n_elements == 0)
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: MAT-file holds no variables: the file ends after "
                                        "its %d-byte header (file size %s): a truncated file?",
                        s->path, MAT_HEADER, num(s->file_size));
    return HSI_FAIL(HSI_ERR_FORMAT, "%s: MAT-file holds no named variable among its %d "
                                    "elements: %s", s->path, s->n_elements, s->skipped);
}

hsi_status hsi_mat_list(hsi_mat_var **vars, int *n, const char *path)
{
    hsi_status st = HSI_OK;
    mat_scan s;
    *vars = NULL;
    *n = 0;
    HSI_TRY(scan_open(&s, path));
    if (s.n == 0) {
        st = no_variables(&s);
        goto cleanup;
    }
    *vars = malloc((size_t)s.n * sizeof **vars);
    if (!*vars) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (int i = 0; i < s.n; i++) (*vars)[i] = s.e[i].var;
    *n = s.n;
cleanup:
    scan_free(&s);
    return st;
}

static void shape_text(char *buf, size_t n, const hsi_mat_var *d)
{
    size_t w = 0;
    buf[0] = 0;
    for (int k = 0; k < d->rank; k++) {
        int c = snprintf(buf + w, n - w, "%s%lld", k ? "x" : "", (long long)d->dims[k]);
        if (c < 0 || (size_t)c >= n - w) return;
        w += (size_t)c;
    }
}

static int is_integer(hsi_dtype dt) { return dt != HSI_DT_INVALID && !hsi_dtype_is_float(dt); }

/* "name (83x86x204 int16), s (1x1 struct), ..." of every variable, into buf.
 * want 3 or 2: each variable that does not fit says why ("2-D", "not
 * integer"); 0: just the list. */
static void list_text(char *buf, size_t n, const mat_scan *s, int want)
{
    size_t w = 0;
    buf[0] = 0;
    for (int i = 0; i < s->n; i++) {
        const hsi_mat_var *d = &s->e[i].var;
        char sh[96], why[48] = "";
        shape_text(sh, sizeof sh, d);
        const char *t = d->is_complex                  ? "complex"
                        : d->dtype == HSI_DT_INVALID ? d->mclass
                                                     : hsi_dtype_name(d->dtype);
        if (want && !d->is_complex && d->dtype != HSI_DT_INVALID) {
            if (d->rank != want)
                snprintf(why, sizeof why, ", %d-D", d->rank);
            else if (want == 2 && !is_integer(d->dtype))
                snprintf(why, sizeof why, ", not integer");
        }
        int c = snprintf(buf + w, n - w, "%s%s (%s %s%s)", i ? ", " : "", d->name, sh, t, why);
        if (c < 0 || (size_t)c >= n - w) return;
        w += (size_t)c;
    }
}

/* want: 3 = cube (3-D numeric), 2 = labels (2-D integer). *idx: the entry. */
static hsi_status choose(int *idx, const mat_scan *s, const char *var, int want)
{
    char list[1024];
    if (s->n == 0) return no_variables(s);
    list_text(list, sizeof list, s, 0);
    if (var) {
        for (int i = 0; i < s->n; i++)
            if (strcmp(s->e[i].var.name, var) == 0) {
                *idx = i;
                return HSI_OK;
            }
        return HSI_FAIL(HSI_ERR_NOT_FOUND, "%s: no variable '%s'; the file holds: %s", s->path,
                        var, list);
    }
    int found = -1, count = 0;
    for (int i = 0; i < s->n; i++) {
        const hsi_mat_var *d = &s->e[i].var;
        int ok = want == 3 ? (d->rank == 3 && d->dtype != HSI_DT_INVALID)
                           : (d->rank == 2 && is_integer(d->dtype));
        if (ok) {
            found = i;
            count++;
        }
    }
    if (count == 1) {
        *idx = found;
        return HSI_OK;
    }
    if (count == 0) list_text(list, sizeof list, s, want);
    return HSI_FAIL(HSI_ERR_ARG, "%s: %s %s; name one with --var NAME. Variables: %s", s->path,
                    count ? "more than one" : "no",
                    want == 3 ? "3-D numeric array (rows x cols x bands)"
                              : "2-D integer array (a label map)",
                    list);
}

/* ------------------------------------------------------------------ reads */

#ifdef HSI_MAT_HDF5
/* v7.3: the dataset's storage must be allocated in full (unwritten chunks
 * would read as the fill value). */
static hsi_status h5_check_storage(const mat_scan *s, const char *name)
{
    hsi_status st = HSI_OK;
    char dset[80];
    snprintf(dset, sizeof dset, "/%s", name);
    hid_t f = H5Fopen(s->path, H5F_ACC_RDONLY, H5P_DEFAULT), d = -1;
    if (f < 0) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: HDF5 cannot open the file (%s)", s->path, mat_why());
        goto cleanup;
    }
    d = H5Dopen2(f, dset, H5P_DEFAULT);
    if (d < 0) /* not a dataset (a group or a reference): matio's read decides */
        goto cleanup;
    H5D_space_status_t status = H5D_SPACE_STATUS_ERROR;
    if (H5Dget_space_status(d, &status) < 0 || status != H5D_SPACE_STATUS_ALLOCATED)
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: variable '%s': HDF5 dataset '%s' has %s storage "
                                      "allocated (unwritten chunks would read as fill values)",
                      s->path, name, dset,
                      status == H5D_SPACE_STATUS_PART_ALLOCATED ? "only part of its" : "no");
cleanup:
    if (d >= 0) H5Dclose(d);
    if (f >= 0) H5Fclose(f);
    mat_msg[0] = 0;
    mat_errors = 0; /* a missing dataset is not an error of the read */
    return st;
}
#endif

/* Reads entry e into a new host buffer in its stored type and views it:
 * MATLAB dims d0 x d1 [x d2], column-major. ndim_out 3: (d2, d0, d1);
 * ndim_out 2: (d0, d1). */
static hsi_status read_entry(hsi_view *out, const mat_scan *s, const mat_entry *e, int ndim_out,
                             char *mclass, size_t clen)
{
    hsi_status st = HSI_OK;
    hsi_buffer *buf = NULL;
    matvar_t *v = NULL;
    mat_t *mat = NULL;
    const char *path = s->path, *name = e->var.name;
    const hsi_mat_var *d0 = &e->var;
    hsi_dtype cls = class_dtype(e->mclass), dt = d0->dtype;
    if (cls == HSI_DT_INVALID || d0->is_complex) {
        st = HSI_FAIL(HSI_ERR_UNSUPPORTED,
                      "%s: variable '%s' is %s; expected a real numeric or logical array", path,
                      name, d0->is_complex ? "complex" : d0->mclass);
        goto cleanup;
    }
    if (mclass) snprintf(mclass, clen, "%s", hsi_dtype_name(cls));
    int rank = d0->rank;
    if (rank < 2 || rank > 3 || (ndim_out == 2 && rank != 2)) {
        st = HSI_FAIL(HSI_ERR_UNSUPPORTED, "%s: variable '%s' has %d dimensions; expected %s", path,
                      name, rank,
                      ndim_out == 2 ? "2 (rows x cols)" : "3 (rows x cols x bands) or 2");
        goto cleanup;
    }
    if (e->bad[0]) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: %s", path, e->bad);
        goto cleanup;
    }
    int64_t d[3] = {1, 1, 1};
    for (int k = 0; k < rank; k++) {
        d[k] = d0->dims[k];
        if (d[k] > INT32_MAX) {
            st = HSI_FAIL(HSI_ERR_UNSUPPORTED, "%s: variable '%s' dimension %d is %lld (> 2^31)",
                          path, name, k + 1, (long long)d[k]);
            goto cleanup;
        }
    }
    int64_t esize = (int64_t)hsi_dtype_size(dt), cnt, nbytes;
    if (!hsi_mul_ok(d[0], d[1], &cnt) || !hsi_mul_ok(cnt, d[2], &cnt) ||
        !hsi_mul_ok(cnt, esize, &nbytes)) {
        st = HSI_FAIL(HSI_ERR_OVERFLOW, "%s: variable '%s' size overflows", path, name);
        goto cleanup;
    }
    if (!s->v73) {
        HSI_TRY(v5_read(&buf, s, e, nbytes, dt));
    } else {
        /* zlib inflates at most ~1032:1: more data than that cannot be in the file */
        if (nbytes / 1032 > s->file_size) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: variable '%s' needs %s bytes of data, more than "
                                          "a %s-byte file can hold even compressed", path, name,
                          num(nbytes), num(s->file_size));
            goto cleanup;
        }
#ifdef HSI_MAT_HDF5
        if (nbytes > 0) HSI_TRY(h5_check_storage(s, name));
#endif
        mat_init();
        mat = Mat_Open(path, MAT_ACC_RDONLY);
        if (!mat) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: matio cannot open the file (%s)", path, mat_why());
            goto cleanup;
        }
        v = Mat_VarReadInfo(mat, name);
        if (!v) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: matio cannot find variable '%s' (%s)", path, name,
                          mat_why());
            goto cleanup;
        }
        /* matio must see the variable that was listed */
        int same = v->rank == rank && v->dims && (int)v->class_type == e->mclass && !v->isComplex;
        for (int k = 0; same && k < rank; k++) same = (int64_t)v->dims[k] == d[k];
        if (!same) {
            char sh[96];
            shape_text(sh, sizeof sh, d0);
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: variable '%s': matio reads it as a rank-%d %s "
                                          "array, its listing says %s %s", path, name, v->rank,
                          class_name((int)v->class_type), sh, d0->mclass);
            goto cleanup;
        }
        HSI_TRY(hsi_buffer_alloc(&buf, (size_t)(nbytes ? nbytes : 1), HSI_BUF_HOST));
        v->class_type = dtype_class(dt);
        if (nbytes > 0) {
            int start[3] = {0, 0, 0}, stride[3] = {1, 1, 1}, edge[3];
            for (int k = 0; k < 3; k++) edge[k] = (int)d[k];
            mat_msg[0] = 0;
            mat_errors = 0;
            int r = Mat_VarReadData(mat, v, buf->data, start, stride, edge);
            if (r != 0 || mat_errors) { /* H5Dread's status, or HDF5's error stack */
                st = HSI_FAIL(HSI_ERR_FORMAT, "%s: reading the %s bytes of variable '%s' failed "
                                              "(%s)", path, num(nbytes), name, mat_why());
                goto cleanup;
            }
        }
    }
    if (ndim_out == 3) {
        int64_t shape[3] = {d[2], d[0], d[1]};
        int64_t strides[3] = {d[0] * d[1] * esize, esize, d[0] * esize};
        HSI_TRY(hsi_view_make(out, buf, 0, dt, 3, shape, strides, 0));
    } else {
        int64_t shape[2] = {d[0], d[1]};
        int64_t strides[2] = {esize, d[0] * esize};
        HSI_TRY(hsi_view_make(out, buf, 0, dt, 2, shape, strides, 0));
    }
cleanup:
    hsi_buffer_release(buf);
    if (v) Mat_VarFree(v);
    if (mat) Mat_Close(mat);
    return st;
}

/* A label map opened as a cube: ENVI-classification metadata (ids 0..max,
 * default names) so that writers and viewers treat it as classes. */
static hsi_status mark_classification(hsi_meta *m, const hsi_view *v)
{
    double vmax = 0;
    int64_t idx[3] = {0, 0, 0};
    if (v->shape[1] == 0 || v->shape[2] == 0) return HSI_OK; /* no pixels (a lines loop of 2^30 empty rows) */
    for (idx[1] = 0; idx[1] < v->shape[1]; idx[1]++)
        for (idx[2] = 0; idx[2] < v->shape[2]; idx[2]++) {
            double x = hsi_view_get_f64(v, idx);
            if (x > vmax) vmax = x;
        }
    if (!(vmax < 65536)) return HSI_OK; /* not ids: leave it a plain band */
    int n = (int)vmax + 1;
    m->class_names = calloc((size_t)n, sizeof *m->class_names);
    if (!m->class_names) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    m->n_classes = n;
    for (int i = 0; i < n; i++) {
        char b[32];
        snprintf(b, sizeof b, i ? "Class %d" : "Unclassified", i);
        if (!(m->class_names[i] = strdup(b))) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    }
    m->file_kind = HSI_FILE_CLASSIFICATION;
    return HSI_OK;
}

hsi_status hsi_mat_open(hsi_cube *out, const char *path, const char *var)
{
    hsi_status st = HSI_OK;
    mat_scan s;
    char mclass[16];
    int label_map = 0, idx = -1;
    hsi_cube_init(out);
    HSI_TRY(scan_open(&s, path));
    st = choose(&idx, &s, var, 3);
    if (st == HSI_ERR_ARG && !var && strstr(hsi_last_error(), ": no 3-D")) {
        /* no cube, but maybe one 2-D integer map: a one-band classification */
        char saved[1200];
        snprintf(saved, sizeof saved, "%s", hsi_last_error());
        if (choose(&idx, &s, NULL, 2) == HSI_OK) {
            st = HSI_OK;
            label_map = 1;
        } else {
            hsi_fail(st, "%s", saved);
        }
    }
    if (st != HSI_OK) goto cleanup;
    const char *name = s.e[idx].var.name;
    HSI_TRY(read_entry(&out->view, &s, &s.e[idx], 3, mclass, sizeof mclass));
    hsi_meta *m = &out->meta;
    if (label_map) HSI_TRY(mark_classification(m, &out->view));
    m->n_bands = out->view.shape[0];
    m->n_lines = out->view.shape[1];
    m->n_samples = out->view.shape[2];
    m->dtype = out->view.dtype;
    m->interleave = HSI_BSQ;
    m->format = strdup("mat");
    out->data_path = strdup(path);
    if (!m->format || !out->data_path) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    HSI_TRY(hsi_meta_set(m, "mat variable", name, 0));
    HSI_TRY(hsi_meta_set(m, "mat version", s.v73 ? "7.3" : "5", 0));
    HSI_TRY(hsi_meta_set(m, "mat class", mclass, 0));
    out->file_size = (int64_t)out->view.buf->size;
cleanup:
    scan_free(&s);
    if (st != HSI_OK) hsi_cube_free(out);
    return st;
}

hsi_status hsi_mat_open_2d(hsi_view *out, char **name_out, const char *path, const char *var)
{
    hsi_status st = HSI_OK;
    mat_scan s;
    int idx = -1;
    memset(out, 0, sizeof *out);
    if (name_out) *name_out = NULL;
    HSI_TRY(scan_open(&s, path));
    HSI_TRY(choose(&idx, &s, var, 2));
    HSI_TRY(read_entry(out, &s, &s.e[idx], 2, NULL, 0));
    if (name_out && !(*name_out = strdup(s.e[idx].var.name))) {
        hsi_view_release(out);
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    }
cleanup:
    scan_free(&s);
    return st;
}

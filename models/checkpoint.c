/* checkpoint.c — safetensors reading (validated, zero-copy views over the
 * mapped file) and writing (canonical, atomic), module state load/save with
 * strict and non-strict reports, training checkpoints. Not the trainer. */
#include "models/checkpoint.h"
#include "models/tensor_impl.h"

#include <cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ST_MAX_HEADER ((uint64_t)100 << 20)

typedef struct st_entry {
    char *name;
    hsi_dtype dtype;
    int ndim;
    int64_t shape[HSI_MAX_DIMS];
    uint64_t begin, end; /* relative to the data area */
} st_entry;

struct hsi_st_file {
    hsi_buffer *buf;
    uint64_t data_off; /* 8 + header length */
    st_entry *e;
    int n;
    cJSON *meta; /* detached __metadata__ object or NULL */
};

static const struct {
    const char *name;
    hsi_dtype dt;
} st_types[] = {{"F32", HSI_F32}, {"F64", HSI_F64}, {"I64", HSI_I64}, {"I32", HSI_I32},
                {"U8", HSI_U8},   {"I16", HSI_I16}, {"U16", HSI_U16}, {"I8", HSI_I8}};

static hsi_dtype st_dtype(const char *s)
{
    for (size_t i = 0; i < sizeof st_types / sizeof *st_types; i++)
        if (!strcmp(st_types[i].name, s)) return st_types[i].dt;
    return HSI_DT_INVALID;
}

static const char *st_name(hsi_dtype dt)
{
    for (size_t i = 0; i < sizeof st_types / sizeof *st_types; i++)
        if (st_types[i].dt == dt) return st_types[i].name;
    return NULL;
}

void hsi_safetensors_close(hsi_st_file *f)
{
    if (!f) return;
    for (int i = 0; i < f->n; i++) free(f->e[i].name);
    free(f->e);
    cJSON_Delete(f->meta);
    hsi_buffer_release(f->buf);
    free(f);
}

/* A data_offsets item: an integer in 0..2^53 (JSON numbers are doubles). */
static int st_offset(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble > 9007199254740992.0 ||
        v->valuedouble != (double)(uint64_t)v->valuedouble)
        return 0;
    *out = (uint64_t)v->valuedouble;
    return 1;
}

/* Sort keys (qsort has no context argument: the keys carry the index). */
typedef struct st_key {
    const char *name;
    uint64_t begin, end;
    int i;
} st_key;
static int st_by_offset(const void *a, const void *b)
{
    const st_key *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->i - y->i;
}
static int st_by_name(const void *a, const void *b)
{
    const st_key *x = a, *y = b;
    return strcmp(x->name, y->name);
}

/* The format's layout rules, after every entry is read: names unique, and
 * the tensors tile the data area exactly (sorted by offset, each begins
 * where the previous ended, the first at 0, the last at the end of the
 * file): no overlap, no hole, nothing after. Byte positions in messages are
 * file offsets. */
static hsi_status st_check_layout(const hsi_st_file *f, uint64_t data_size, const char *what)
{
    hsi_status st = HSI_OK;
    st_key *k = malloc(sizeof *k * (size_t)(f->n + 1));
    if (!k) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    for (int i = 0; i < f->n; i++)
        k[i] = (st_key){f->e[i].name, f->e[i].begin, f->e[i].end, i};
    qsort(k, (size_t)f->n, sizeof *k, st_by_name);
    for (int i = 1; i < f->n; i++)
        if (!strcmp(k[i].name, k[i - 1].name)) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: tensor '%s' appears twice in the header", what,
                          k[i].name);
            goto cleanup;
        }
    qsort(k, (size_t)f->n, sizeof *k, st_by_offset);
    uint64_t at = 0;
    const st_key *prev = NULL;
    for (int i = 0; i < f->n; i++) {
        const st_key *e = &k[i];
        if (e->begin < at) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: tensor '%s' (data_offsets [%" PRIu64 ", %" PRIu64
                                          "], file bytes %" PRIu64 "..%" PRIu64 ") overlaps tensor "
                                          "'%s' (data_offsets [%" PRIu64 ", %" PRIu64 "]); the "
                                          "format wants each tensor to begin where the previous ends",
                          what, e->name, e->begin, e->end, f->data_off + e->begin,
                          f->data_off + e->end, prev->name, prev->begin, prev->end);
            goto cleanup;
        }
        if (e->begin > at) {
            char after[300];
            if (prev) snprintf(after, sizeof after, "tensor '%s'", prev->name);
            else snprintf(after, sizeof after, "the start of the data area");
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: data bytes %" PRIu64 "..%" PRIu64 " (file bytes %" PRIu64
                                          "..%" PRIu64 ") belong to no tensor: a hole after %s and "
                                          "before tensor '%s' (the format allows no holes)",
                          what, at, e->begin, f->data_off + at, f->data_off + e->begin, after, e->name);
            goto cleanup;
        }
        at = e->end;
        prev = e;
    }
    if (at != data_size) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: %" PRIu64 " byte%s after the last tensor (file bytes %" PRIu64
                                      "..%" PRIu64 "): the tensors end at data offset %" PRIu64
                                      " but the data area has %" PRIu64 " bytes; the format allows "
                                      "nothing after the last tensor",
                      what, data_size - at, data_size - at == 1 ? "" : "s", f->data_off + at,
                      f->data_off + data_size, at, data_size);
        goto cleanup;
    }
cleanup:
    free(k);
    return st;
}

static hsi_status st_parse_buffer(hsi_st_file **out, hsi_buffer *buf, const char *what)
{
    hsi_status st = HSI_OK;
    cJSON *root = NULL;
    hsi_st_file *f = calloc(1, sizeof *f);
    *out = NULL;
    if (!f) {
        hsi_buffer_release(buf);
        return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    }
    f->buf = buf;
    const uint8_t *p = buf->data;
    if (buf->size < 8) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: %zu bytes; a safetensors file starts with an 8-byte "
                                      "header length", what, buf->size);
        goto cleanup;
    }
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | p[i];
    if (hl > ST_MAX_HEADER || hl > buf->size - 8) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: header length %" PRIu64 " at byte 0 exceeds the file "
                                      "(%zu bytes) or the %" PRIu64 "-byte limit",
                      what, hl, buf->size, ST_MAX_HEADER);
        goto cleanup;
    }
    f->data_off = 8 + hl;
    uint64_t data_size = buf->size - f->data_off;
    root = cJSON_ParseWithLength((const char *)p + 8, (size_t)hl);
    if (!root || !cJSON_IsObject(root)) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: the header (bytes 8..%" PRIu64 ") is not a JSON object",
                      what, 8 + hl);
        goto cleanup;
    }
    int cnt = cJSON_GetArraySize(root), n_meta = 0;
    f->e = calloc((size_t)cnt + 1, sizeof *f->e);
    if (!f->e) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (cJSON *it = root->child; it; it = it->next) {
        if (!it->string) continue;
        if (!strcmp(it->string, "__metadata__")) {
            if (!cJSON_IsObject(it) || n_meta++) {
                st = HSI_FAIL(HSI_ERR_FORMAT, "%s: __metadata__ must be one object (found %s)",
                              what, cJSON_IsObject(it) ? "two" : "another JSON type");
                goto cleanup;
            }
            for (cJSON *m = it->child; m; m = m->next)
                if (!cJSON_IsString(m)) {
                    st = HSI_FAIL(HSI_ERR_FORMAT, "%s: __metadata__ value '%s' is not a string",
                                  what, m->string ? m->string : "?");
                    goto cleanup;
                }
            continue;
        }
        st_entry *e = &f->e[f->n];
        cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
        cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
        cJSON *of = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
        if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of) ||
            cJSON_GetArraySize(of) != 2) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: tensor '%s' needs \"dtype\" (string), \"shape\" "
                                          "(array) and \"data_offsets\" ([begin, end])",
                          what, it->string);
            goto cleanup;
        }
        e->dtype = st_dtype(dt->valuestring);
        if (e->dtype == HSI_DT_INVALID) {
            st = HSI_FAIL(HSI_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype \"%s\" (supported: F32, "
                                               "F64, I64, I32, I16, U16, U8, I8)",
                          what, it->string, dt->valuestring);
            goto cleanup;
        }
        e->ndim = cJSON_GetArraySize(sh);
        if (e->ndim > HSI_MAX_DIMS) {
            st = HSI_FAIL(HSI_ERR_UNSUPPORTED, "%s: tensor '%s' has %d dims (at most %d)", what,
                          it->string, e->ndim, HSI_MAX_DIMS);
            goto cleanup;
        }
        int64_t bytes = (int64_t)hsi_dtype_size(e->dtype);
        for (int k = 0; k < e->ndim; k++) {
            cJSON *d = cJSON_GetArrayItem(sh, k);
            if (!cJSON_IsNumber(d) || !(d->valuedouble >= 0) || d->valuedouble > 9.0e15 ||
                d->valuedouble != (double)(int64_t)d->valuedouble ||
                !hsi_mul_ok(bytes, (int64_t)d->valuedouble, &bytes)) {
                st = HSI_FAIL(HSI_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a valid size "
                                              "(a non-negative integer)",
                              what, it->string, k);
                goto cleanup;
            }
            e->shape[k] = (int64_t)d->valuedouble;
        }
        const cJSON *o0 = cJSON_GetArrayItem(of, 0), *o1 = cJSON_GetArrayItem(of, 1);
        if (!st_offset(o0, &e->begin) || !st_offset(o1, &e->end)) {
            char a[40] = "?", b[40] = "?";
            if (cJSON_IsNumber(o0)) snprintf(a, sizeof a, "%.17g", o0->valuedouble);
            if (cJSON_IsNumber(o1)) snprintf(b, sizeof b, "%.17g", o1->valuedouble);
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: tensor '%s': data_offsets must be two non-negative "
                                          "integers, found [%s, %s]",
                          what, it->string, cJSON_IsNumber(o0) ? a : "(not a number)",
                          cJSON_IsNumber(o1) ? b : "(not a number)");
            goto cleanup;
        }
        if (e->end < e->begin || e->end > data_size) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] "
                                          "%s the data area of %" PRIu64 " bytes",
                          what, it->string, e->begin, e->end,
                          e->end < e->begin ? "run backwards in" : "go beyond", data_size);
            goto cleanup;
        }
        if ((int64_t)(e->end - e->begin) != bytes) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: tensor '%s': data_offsets span %" PRIu64 " bytes "
                                          "but dtype %s and its shape need %lld",
                          what, it->string, e->end - e->begin, dt->valuestring, (long long)bytes);
            goto cleanup;
        }
        e->name = strdup(it->string);
        if (!e->name) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        f->n++;
    }
    HSI_TRY(st_check_layout(f, data_size, what));
    f->meta = cJSON_DetachItemFromObjectCaseSensitive(root, "__metadata__");
    *out = f;
    f = NULL;
cleanup:
    cJSON_Delete(root);
    hsi_safetensors_close(f);
    return st;
}

hsi_status hsi_safetensors_open(hsi_st_file **out, const char *path)
{
    hsi_buffer *b = NULL;
    hsi_status st = hsi_buffer_map(&b, path);
    if (st != HSI_OK) return st;
    return st_parse_buffer(out, b, path);
}

hsi_status hsi_safetensors_parse(hsi_st_file **out, const void *data, size_t size,
                                 const char *what)
{
    hsi_buffer *b = NULL;
    hsi_status st = hsi_buffer_alloc(&b, size, HSI_BUF_HOST);
    if (st != HSI_OK) return st;
    if (size) memcpy(b->data, data, size);
    return st_parse_buffer(out, b, what);
}

int hsi_safetensors_count(const hsi_st_file *f) { return f->n; }
const char *hsi_safetensors_name(const hsi_st_file *f, int i) { return f->e[i].name; }

int hsi_safetensors_find(const hsi_st_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->e[i].name, name)) return i;
    return -1;
}

hsi_status hsi_safetensors_view(const hsi_st_file *f, int i, hsi_view *out)
{
    const st_entry *e = &f->e[i];
    int64_t strides[HSI_MAX_DIMS], s = (int64_t)hsi_dtype_size(e->dtype);
    for (int k = e->ndim - 1; k >= 0; k--) {
        strides[k] = s;
        s *= e->shape[k];
    }
    return hsi_view_make(out, f->buf, (int64_t)(f->data_off + e->begin), e->dtype, e->ndim,
                         e->shape, strides, !hsi_host_is_little_endian());
}

const char *hsi_safetensors_meta(const hsi_st_file *f, const char *key)
{
    cJSON *v = f->meta ? cJSON_GetObjectItemCaseSensitive(f->meta, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ----------------------------------------------------------- writing */

hsi_status hsi_safetensors_write(const char *path, const hsi_named_tensor *ts, int n,
                                 const char *const *meta, int n_meta)
{
    hsi_status st = HSI_OK;
    hsi_atomic_file af = {0};
    cJSON *root = cJSON_CreateObject();
    char *hdr = NULL;
    if (!root) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    if (!hsi_host_is_little_endian())
        return HSI_FAIL(HSI_ERR_UNSUPPORTED, "safetensors writing needs a little-endian host");
    if (n_meta > 0) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; i < n_meta; i++) cJSON_AddStringToObject(m, meta[2 * i], meta[2 * i + 1]);
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const hsi_view *v = &ts[i].t->data;
        const char *dn = st_name(v->dtype);
        if (!dn) {
            st = HSI_FAIL(HSI_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s, which safetensors "
                                               "writing does not support", path, ts[i].name,
                          hsi_dtype_name(v->dtype));
            goto cleanup;
        }
        if (cJSON_GetObjectItemCaseSensitive(root, ts[i].name)) {
            st = HSI_FAIL(HSI_ERR_ARG, "%s: tensor name '%s' appears twice", path, ts[i].name);
            goto cleanup;
        }
        cJSON *e = cJSON_AddObjectToObject(root, ts[i].name);
        cJSON_AddStringToObject(e, "dtype", dn);
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        for (int k = 0; k < v->ndim; k++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)v->shape[k]));
        uint64_t nb = (uint64_t)hsi_view_nbytes(v);
        cJSON *of = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(off + nb)));
        off += nb;
    }
    hdr = cJSON_PrintUnformatted(root);
    if (!hdr) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory printing the header");
        goto cleanup;
    }
    size_t hl = strlen(hdr), padded = (hl + 7) & ~(size_t)7;
    HSI_TRY(hsi_atomic_open(&af, path));
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    int ok = fwrite(len8, 1, 8, af.fp) == 8 && fwrite(hdr, 1, hl, af.fp) == hl;
    for (size_t i = hl; i < padded && ok; i++) ok = fputc(' ', af.fp) != EOF;
    for (int i = 0; i < n && ok; i++) {
        const hsi_view *v = &ts[i].t->data;
        if (hsi_view_is_packed(v)) {
            size_t nb = (size_t)hsi_view_nbytes(v);
            ok = fwrite((const char *)v->buf->data + v->offset, 1, nb, af.fp) == nb;
        } else {
            hsi_view c;
            HSI_TRY(hsi_view_contiguous(&c, v, HSI_DT_INVALID));
            size_t nb = (size_t)hsi_view_nbytes(&c);
            ok = fwrite(c.buf->data, 1, nb, af.fp) == nb;
            hsi_view_release(&c);
        }
    }
    if (!ok) {
        st = HSI_FAIL(HSI_ERR_IO, "%s: write failed (disk full?)", path);
        goto cleanup;
    }
    HSI_TRY(hsi_atomic_commit(&af));
cleanup:
    if (st != HSI_OK && af.fp) hsi_atomic_abort(&af);
    free(hdr);
    cJSON_Delete(root);
    return st;
}

/* ------------------------------------------------------------ modules */

hsi_status hsi_module_save(hsi_module *m, const char *path, const char *const *meta, int n_meta)
{
    hsi_named_tensor *ts = NULL;
    int n = 0;
    hsi_status st = hsi_module_state(m, &ts, &n);
    if (st == HSI_OK) st = hsi_safetensors_write(path, ts, n, meta, n_meta);
    free(ts);
    return st;
}

static void rep_add(hsi_load_report *r, const char *section, const char *item)
{
    size_t len = strlen(r->text);
    if (len + 64 >= sizeof r->text) {
        if (!strstr(r->text, "...")) snprintf(r->text + len, sizeof r->text - len, " ...");
        return;
    }
    const char *last = strrchr(r->text, ';');
    int same = len > 0 && strstr(last ? last : r->text, section) != NULL;
    snprintf(r->text + len, sizeof r->text - len, "%s%s%s", same ? ", " : (len ? "; " : ""),
             same ? "" : section, item);
}

static const char *strip_prefix(const char *k)
{
    return strncmp(k, "module.", 7) == 0 ? k + 7 : k;
}

static int dtype_compatible(hsi_dtype a, hsi_dtype b)
{
    return a == b || (hsi_dtype_is_float(a) && hsi_dtype_is_float(b));
}

/* The first value of tensor j that is not finite (F32/F64; integer tensors
 * have none): its flat index or -1, and what it is. Reads the stored
 * little-endian bits, so it works on any host. */
static int64_t st_first_nonfinite(const hsi_st_file *f, int j, const char **kind)
{
    const st_entry *e = &f->e[j];
    const uint8_t *p = (const uint8_t *)f->buf->data + f->data_off + e->begin;
    const uint64_t n = e->end - e->begin;
    if (e->dtype == HSI_F32) {
        for (uint64_t i = 0; i + 4 <= n; i += 4) {
            uint32_t u = (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 | (uint32_t)p[i + 2] << 16 |
                         (uint32_t)p[i + 3] << 24;
            if ((u & 0x7f800000u) == 0x7f800000u) {
                *kind = (u & 0x7fffffu) ? "NaN" : (u >> 31) ? "-inf" : "+inf";
                return (int64_t)(i / 4);
            }
        }
    } else if (e->dtype == HSI_F64) {
        for (uint64_t i = 0; i + 8 <= n; i += 8) {
            uint64_t u = 0;
            for (int b = 7; b >= 0; b--) u = (u << 8) | p[i + (uint64_t)b];
            if ((u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull) {
                *kind = (u & 0xfffffffffffffull) ? "NaN" : (u >> 63) ? "-inf" : "+inf";
                return (int64_t)(i / 8);
            }
        }
    }
    return -1;
}

hsi_status hsi_safetensors_check_finite(const hsi_st_file *f, int i, const char *what)
{
    const char *kind = "";
    int64_t at = st_first_nonfinite(f, i, &kind);
    if (at < 0) return HSI_OK;
    const st_entry *e = &f->e[i];
    const size_t es = hsi_dtype_size(e->dtype);
    return HSI_FAIL(HSI_ERR_FORMAT, "%s: tensor '%s' holds %s at element %lld of %lld (file byte "
                                    "%" PRIu64 "); every value must be finite (a diverged or "
                                    "damaged run?)",
                    what, e->name, kind, (long long)at, (long long)((e->end - e->begin) / es),
                    f->data_off + e->begin + (uint64_t)at * es);
}

/* Loads from an open file into the state list; see hsi_module_load. */
static hsi_status load_state(const hsi_st_file *f, hsi_named_tensor *ts, int n, const char *prefix,
                             int strict, hsi_load_report *rep, const char *path)
{
    hsi_status st = HSI_OK;
    hsi_load_report local;
    if (!rep) rep = &local;
    memset(rep, 0, sizeof *rep);
    int *match = calloc((size_t)n + 1, sizeof *match);
    if (!match) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    size_t pl = strlen(prefix);
    for (int i = 0; i < n; i++) {
        match[i] = -1;
        for (int j = 0; j < f->n; j++) {
            const char *k = f->e[j].name;
            if (pl) {
                if (strncmp(k, prefix, pl) != 0) continue;
                k += pl;
            }
            if (!strcmp(strip_prefix(k), ts[i].name)) {
                match[i] = j;
                break;
            }
        }
        if (match[i] < 0) {
            rep->n_missing++;
            rep_add(rep, "missing: ", ts[i].name);
            continue;
        }
        const st_entry *e = &f->e[match[i]];
        const hsi_view *v = &ts[i].t->data;
        int same = e->ndim == v->ndim && dtype_compatible(e->dtype, v->dtype);
        for (int k = 0; same && k < v->ndim; k++) same = e->shape[k] == v->shape[k];
        if (!same) {
            char a[96], b[96], item[300];
            int64_t es[HSI_MAX_DIMS];
            for (int k = 0; k < e->ndim; k++) es[k] = e->shape[k];
            snprintf(item, sizeof item, "%s (file %s %s vs model %s %s)", ts[i].name,
                     st_name(e->dtype), hsi_eng_shape_str(a, sizeof a, e->ndim, es),
                     st_name(v->dtype), hsi_eng_shape_str(b, sizeof b, v->ndim, v->shape));
            rep->n_mismatched++;
            rep_add(rep, "shape mismatch: ", item);
            match[i] = -2;
        }
    }
    for (int j = 0; j < f->n; j++) {
        const char *k = f->e[j].name;
        if (pl) {
            if (strncmp(k, prefix, pl) != 0) continue;
            k += pl;
        }
        int used = 0;
        for (int i = 0; i < n && !used; i++) used = !strcmp(strip_prefix(k), ts[i].name);
        if (!used) {
            rep->n_unexpected++;
            rep_add(rep, "unexpected: ", f->e[j].name);
        }
    }
    if (strict && (rep->n_missing || rep->n_unexpected || rep->n_mismatched)) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: strict load failed (%d missing, %d unexpected, %d "
                                      "mismatched keys; nothing loaded): %s",
                      path, rep->n_missing, rep->n_unexpected, rep->n_mismatched, rep->text);
        goto cleanup;
    }
    /* every value checked before anything is copied: nothing loaded on failure */
    for (int i = 0; i < n; i++)
        if (match[i] >= 0) HSI_TRY(hsi_safetensors_check_finite(f, match[i], path));
    for (int i = 0; i < n; i++) {
        if (match[i] < 0) continue;
        hsi_view src;
        HSI_TRY(hsi_safetensors_view(f, match[i], &src));
        st = hsi_view_copy(&ts[i].t->data, &src);
        hsi_view_release(&src);
        if (st != HSI_OK) goto cleanup;
        rep->n_loaded++;
    }
cleanup:
    free(match);
    return st;
}

hsi_status hsi_module_load_file(hsi_module *m, const hsi_st_file *f, const char *path, int strict,
                                hsi_load_report *rep)
{
    hsi_status st = HSI_OK;
    hsi_named_tensor *ts = NULL;
    int n = 0;
    HSI_TRY(hsi_module_state(m, &ts, &n));
    HSI_TRY(load_state(f, ts, n, "", strict, rep, path));
cleanup:
    free(ts);
    return st;
}

hsi_status hsi_module_load(hsi_module *m, const char *path, int strict, hsi_load_report *rep)
{
    hsi_status st = HSI_OK;
    hsi_st_file *f = NULL;
    HSI_TRY(hsi_safetensors_open(&f, path));
    HSI_TRY(hsi_module_load_file(m, f, path, strict, rep));
cleanup:
    hsi_safetensors_close(f);
    return st;
}

/* --------------------------------------------------- training state */

#define OPT_PREFIX "optimizer."

hsi_status hsi_train_save(const char *path, hsi_module *m, const hsi_optim *o,
                          const hsi_sched *s, int epoch, const char *config_json)
{
    hsi_status st = HSI_OK;
    hsi_named_tensor *ts = NULL, *all = NULL;
    int n = 0, na = 0;
    char ep[32], step[32], rng[80], ocfg[512], sch[512];
    HSI_TRY(hsi_module_state(m, &ts, &n));
    all = calloc((size_t)(n + 2 * o->n) + 1, sizeof *all);
    if (!all) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (int i = 0; i < n; i++) all[na++] = ts[i];
    for (int i = 0; i < o->n; i++)
        for (int k = 0; k < 2; k++) {
            hsi_tensor *t = k ? o->state2[i] : o->state1[i];
            if (!t) continue;
            snprintf(all[na].name, sizeof all[na].name, OPT_PREFIX "%s.%s", k ? "exp_avg_sq" :
                     (o->cfg.kind == HSI_OPT_SGD ? "momentum_buffer" : "exp_avg"),
                     o->params[i].name);
            all[na++].t = t;
        }
    const hsi_rng *r = hsi_default_rng();
    snprintf(ep, sizeof ep, "%d", epoch);
    snprintf(step, sizeof step, "%lld", (long long)o->step);
    snprintf(rng, sizeof rng, "%016" PRIx64 "%016" PRIx64 "%016" PRIx64 "%016" PRIx64, r->s[0],
             r->s[1], r->s[2], r->s[3]);
    const hsi_optim_config *c = &o->cfg;
    /* %a keeps every bit of the doubles */
    snprintf(ocfg, sizeof ocfg, "%d %a %a %a %d %a %a %a %a", (int)c->kind, c->lr, c->momentum,
             c->dampening, c->nesterov, c->weight_decay, c->beta1, c->beta2, c->eps);
    if (s)
        snprintf(sch, sizeof sch, "%d %a %d %a %d %d %a %a %d %d %a %d %a %d %d", (int)s->kind,
                 s->base_lr, s->step_size, s->gamma, s->warmup, s->total, s->min_lr, s->factor,
                 s->patience, s->cooldown, s->threshold, s->epoch, s->best, s->num_bad,
                 s->cooldown_counter);
    else
        snprintf(sch, sizeof sch, "none");
    const char *meta[] = {"format", "hsi-train-checkpoint-1", "epoch", ep, "optimizer_step", step,
                          "rng", rng, "optimizer", ocfg, "schedule", sch, "config",
                          config_json ? config_json : "{}"};
    HSI_TRY(hsi_safetensors_write(path, all, na, meta, 7));
cleanup:
    free(all);
    free(ts);
    return st;
}

/* A metadata value that must be a decimal integer in lo..hi. */
static hsi_status meta_i64(int64_t *out, const hsi_st_file *f, const char *path, const char *key,
                           int64_t lo, int64_t hi)
{
    const char *s = hsi_safetensors_meta(f, key);
    char *end = NULL;
    if (!s)
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: __metadata__ '%s' is missing (an integer in "
                                        "%lld..%lld)",
                        path, key, (long long)lo, (long long)hi);
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!((s[0] >= '0' && s[0] <= '9') || s[0] == '-') || end == s || *end || errno == ERANGE ||
        v < lo || v > hi)
        return HSI_FAIL(HSI_ERR_FORMAT, "%s: __metadata__ '%s' must be an integer in %lld..%lld, "
                                        "found '%s'",
                        path, key, (long long)lo, (long long)hi, s);
    *out = v;
    return HSI_OK;
}

/* The names of optimiser state k (0: first moment / momentum, 1: second
 * moment) of parameter i, or "" when the kind keeps no such state. */
static void opt_state_name(char *buf, size_t n, const hsi_optim_config *c, int k, const char *param)
{
    buf[0] = 0;
    if (c->kind == HSI_OPT_SGD && (k == 1 || c->momentum == 0)) return;
    snprintf(buf, n, OPT_PREFIX "%s.%s",
             k ? "exp_avg_sq" : (c->kind == HSI_OPT_SGD ? "momentum_buffer" : "exp_avg"), param);
}

hsi_status hsi_train_load(const char *path, hsi_module *m, hsi_optim *o, hsi_sched *s,
                          int *epoch, char **config)
{
    hsi_status st = HSI_OK;
    hsi_st_file *f = NULL;
    hsi_named_tensor *ts = NULL;
    st_entry *model_e = NULL;
    int *opt_j = NULL, n = 0;
    cJSON *cj = NULL;
    if (config) *config = NULL;
    HSI_TRY(hsi_safetensors_open(&f, path));
    const char *fmt = hsi_safetensors_meta(f, "format");
    const char *rng = hsi_safetensors_meta(f, "rng"), *ocfg = hsi_safetensors_meta(f, "optimizer");
    const char *sch = hsi_safetensors_meta(f, "schedule"), *cfg = hsi_safetensors_meta(f, "config");
    if (!fmt || strcmp(fmt, "hsi-train-checkpoint-1")) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: not an hsi training checkpoint (__metadata__ 'format' "
                                      "is %s%s%s, expected 'hsi-train-checkpoint-1')",
                      path, fmt ? "'" : "", fmt ? fmt : "missing", fmt ? "'" : "");
        goto cleanup;
    }
    int64_t ep = 0, step = 0;
    HSI_TRY(meta_i64(&ep, f, path, "epoch", 0, 1000000000));
    HSI_TRY(meta_i64(&step, f, path, "optimizer_step", 0, INT64_MAX));
    if (!ocfg || !rng || !sch) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: __metadata__ '%s' is missing (a training checkpoint "
                                      "holds format, epoch, optimizer_step, rng, optimizer, "
                                      "schedule)",
                      path, !ocfg ? "optimizer" : !rng ? "rng" : "schedule");
        goto cleanup;
    }
    /* the optimiser: kind and 8 settings, doubles in %a */
    hsi_optim_config c = o->cfg;
    int kind = 0, nest = 0, used = -1;
    if (sscanf(ocfg, "%d %la %la %la %d %la %la %la %la%n", &kind, &c.lr, &c.momentum,
               &c.dampening, &nest, &c.weight_decay, &c.beta1, &c.beta2, &c.eps, &used) != 9 ||
        used < 0 || ocfg[used] || (nest != 0 && nest != 1) || !(c.lr >= 0) || !isfinite(c.lr) ||
        !isfinite(c.momentum) || !isfinite(c.dampening) || !isfinite(c.weight_decay) ||
        !isfinite(c.beta1) || !isfinite(c.beta2) || !isfinite(c.eps)) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: __metadata__ 'optimizer' must be 'kind lr momentum "
                                      "dampening nesterov weight_decay beta1 beta2 eps' (finite "
                                      "numbers, lr >= 0, nesterov 0 or 1), found '%s'",
                      path, ocfg);
        goto cleanup;
    }
    if (kind != (int)o->cfg.kind) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: __metadata__ 'optimizer' is of kind %d, the optimiser "
                                      "resumed is of kind %d (0 SGD, 1 Adam, 2 AdamW)",
                      path, kind, (int)o->cfg.kind);
        goto cleanup;
    }
    c.kind = (hsi_optim_kind)kind;
    c.nesterov = nest;
    uint64_t rs[4];
    int hex = (int)strlen(rng) == 64;
    for (int i = 0; hex && i < 64; i++)
        hex = (rng[i] >= '0' && rng[i] <= '9') || (rng[i] >= 'a' && rng[i] <= 'f') ||
              (rng[i] >= 'A' && rng[i] <= 'F');
    if (!hex || sscanf(rng, "%16" SCNx64 "%16" SCNx64 "%16" SCNx64 "%16" SCNx64, &rs[0], &rs[1],
                       &rs[2], &rs[3]) != 4) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: __metadata__ 'rng' must be 64 hexadecimal digits (the "
                                      "generator's 4 x 64-bit state), found '%s'",
                      path, rng);
        goto cleanup;
    }
    hsi_sched sc;
    memset(&sc, 0, sizeof sc);
    if (strcmp(sch, "none")) {
        int sk = -1;
        used = -1;
        if (sscanf(sch, "%d %la %d %la %d %d %la %la %d %d %la %d %la %d %d%n", &sk, &sc.base_lr,
                   &sc.step_size, &sc.gamma, &sc.warmup, &sc.total, &sc.min_lr, &sc.factor,
                   &sc.patience, &sc.cooldown, &sc.threshold, &sc.epoch, &sc.best, &sc.num_bad,
                   &sc.cooldown_counter, &used) != 15 ||
            used < 0 || sch[used] || sk < HSI_SCHED_CONSTANT || sk > HSI_SCHED_PLATEAU ||
            sc.step_size < (sk == HSI_SCHED_STEP ? 1 : 0) || sc.warmup < 0 || sc.total < 0 ||
            sc.patience < 0 || sc.cooldown < 0 || sc.epoch < 0 || sc.num_bad < 0 ||
            sc.cooldown_counter < 0 || !isfinite(sc.base_lr) || !isfinite(sc.gamma) ||
            !isfinite(sc.min_lr) || !isfinite(sc.factor) || !isfinite(sc.threshold) ||
            isnan(sc.best)) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: __metadata__ 'schedule' must be 'none' or 15 fields "
                                          "(kind 0..3, base_lr, step_size, gamma, warmup, total, "
                                          "min_lr, factor, patience, cooldown, threshold, epoch, "
                                          "best, num_bad, cooldown_counter; counts >= 0, rates "
                                          "finite), found '%s'",
                          path, sch);
            goto cleanup;
        }
        sc.kind = (hsi_sched_kind)sk;
    }
    if (cfg) {
        cj = cJSON_Parse(cfg);
        if (!cJSON_IsObject(cj)) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: __metadata__ 'config' must be a JSON object, found "
                                          "%s '%.60s%s'",
                          path, cj ? "another JSON value:" : "text that is not JSON:", cfg,
                          strlen(cfg) > 60 ? "..." : "");
            goto cleanup;
        }
    }
    /* the optimiser's tensors: after optimizer_step > 0 steps every parameter
     * holds its state (none before the first); shapes and dtypes those of
     * the parameter; nothing else under optimizer. */
    opt_j = malloc(sizeof *opt_j * (size_t)(2 * o->n + 1));
    if (!opt_j) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    int n_opt_expected = 0;
    for (int i = 0; i < o->n; i++)
        for (int k = 0; k < 2; k++) {
            char name[HSI_NAME_MAX + 32];
            opt_state_name(name, sizeof name, &c, k, o->params[i].name);
            int j = name[0] ? hsi_safetensors_find(f, name) : -1;
            opt_j[2 * i + k] = j;
            if (!name[0]) continue;
            n_opt_expected++;
            if (j < 0 && step > 0) {
                st = HSI_FAIL(HSI_ERR_FORMAT, "%s: tensor '%s' is missing: a checkpoint after %lld "
                                              "optimiser steps holds the %s state of every "
                                              "parameter",
                              path, name, (long long)step,
                              c.kind == HSI_OPT_SGD ? "SGD momentum" : "Adam moment");
                goto cleanup;
            }
            if (j >= 0 && step == 0) {
                st = HSI_FAIL(HSI_ERR_FORMAT, "%s: tensor '%s' is present but __metadata__ "
                                              "'optimizer_step' is 0 (no state before the first "
                                              "step)",
                              path, name);
                goto cleanup;
            }
            if (j < 0) continue;
            const st_entry *e = &f->e[j];
            const hsi_view *pv = &o->params[i].t->data;
            int same = e->ndim == pv->ndim && dtype_compatible(e->dtype, pv->dtype);
            for (int d = 0; same && d < pv->ndim; d++) same = e->shape[d] == pv->shape[d];
            if (!same) {
                char a[96], b[96];
                int64_t es[HSI_MAX_DIMS];
                for (int d = 0; d < e->ndim; d++) es[d] = e->shape[d];
                st = HSI_FAIL(HSI_ERR_FORMAT, "%s: tensor '%s' is %s %s but parameter '%s' is %s %s",
                              path, name, st_name(e->dtype), hsi_eng_shape_str(a, sizeof a, e->ndim, es),
                              o->params[i].name, st_name(pv->dtype) ? st_name(pv->dtype) : "?",
                              hsi_eng_shape_str(b, sizeof b, pv->ndim, pv->shape));
                goto cleanup;
            }
            HSI_TRY(hsi_safetensors_check_finite(f, j, path));
        }
    for (int j = 0; j < f->n; j++) {
        if (strncmp(f->e[j].name, OPT_PREFIX, strlen(OPT_PREFIX)) != 0) continue;
        int known = 0;
        for (int q = 0; q < 2 * o->n && !known; q++) known = opt_j[q] == j;
        if (!known) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: unexpected tensor '%s' (the %s optimiser of this "
                                          "model keeps %d state tensors, under optimizer.%s.<param>)",
                          path, f->e[j].name,
                          c.kind == HSI_OPT_SGD ? "SGD" : c.kind == HSI_OPT_ADAM ? "Adam" : "AdamW",
                          n_opt_expected,
                          c.kind == HSI_OPT_SGD ? "momentum_buffer" : "exp_avg[_sq]");
            goto cleanup;
        }
    }
    /* model state: strict, only the keys outside optimizer.*; validated
     * whole (names, shapes, finite values) before anything is copied */
    HSI_TRY(hsi_module_state(m, &ts, &n));
    {
        hsi_st_file view = *f;
        model_e = calloc((size_t)f->n + 1, sizeof *model_e);
        if (!model_e) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        int k = 0;
        for (int j = 0; j < f->n; j++)
            if (strncmp(f->e[j].name, OPT_PREFIX, strlen(OPT_PREFIX)) != 0) model_e[k++] = f->e[j];
        view.e = model_e;
        view.n = k;
        HSI_TRY(load_state(&view, ts, n, "", 1, NULL, path));
    }
    for (int i = 0; i < o->n; i++)
        for (int k = 0; k < 2; k++) {
            int j = opt_j[2 * i + k];
            hsi_tensor **slot = k ? &o->state2[i] : &o->state1[i];
            if (j < 0) {
                hsi_tensor_free(*slot);
                *slot = NULL;
                continue;
            }
            if (!*slot) {
                const hsi_tensor *p = o->params[i].t;
                HSI_TRY(hsi_tensor_new(slot, p->data.dtype, p->data.ndim, p->data.shape, 0));
            }
            hsi_view src;
            HSI_TRY(hsi_safetensors_view(f, j, &src));
            st = hsi_view_copy(&(*slot)->data, &src);
            hsi_view_release(&src);
            if (st != HSI_OK) {
                hsi_fail_context(st, "%s: %s", path, f->e[j].name);
                goto cleanup;
            }
        }
    o->cfg = c;
    o->step = step;
    if (s && strcmp(sch, "none")) *s = sc;
    hsi_rng *r = hsi_default_rng();
    for (int k = 0; k < 4; k++) r->s[k] = rs[k];
    *epoch = (int)ep;
    if (config && cfg) {
        *config = strdup(cfg);
        if (!*config) st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    }
cleanup:
    cJSON_Delete(cj);
    free(model_e);
    free(opt_j);
    free(ts);
    hsi_safetensors_close(f);
    return st;
}

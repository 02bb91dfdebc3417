/* mat.c — MATLAB .mat files through libmatio. matio reads each variable in
 * its stored type straight into an hsi_buffer, and the view's strides express
 * MATLAB's column-major order (no further copy). Not a writer. */
#define _GNU_SOURCE
#include "mat.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <matio.h>
#include <zlib.h>

#include "meta.h"

/* matio reports through a log callback: keep its last message (per thread)
 * for our errors instead of letting it print to stderr. */
static _Thread_local char mat_msg[256];

static void mat_log(int level, char *message)
{
    (void)level;
    snprintf(mat_msg, sizeof mat_msg, "%s", message ? message : "");
    size_t n = strlen(mat_msg);
    while (n && (mat_msg[n - 1] == '\n' || mat_msg[n - 1] == ' ')) mat_msg[--n] = 0;
}

static void mat_init(void)
{
    static int done;
    if (!__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL)) Mat_LogInitFunc("hsi", mat_log);
    mat_msg[0] = 0;
}

static const char *mat_why(void) { return mat_msg[0] ? mat_msg : "no detail from matio"; }

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

static hsi_dtype class_dtype(const matvar_t *v)
{
    if (v->isComplex) return HSI_DT_INVALID;
    switch (v->class_type) {
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

static hsi_dtype v5_stored_dtype(const char *path, const char *want);

static void describe(hsi_mat_var *d, const matvar_t *v)
{
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", v->name ? v->name : "");
    d->rank = v->rank < 0 ? 0 : v->rank > 8 ? 8 : v->rank;
    for (int k = 0; k < d->rank && v->dims; k++) d->dims[k] = (int64_t)v->dims[k];
    d->is_complex = v->isComplex != 0;
    d->is_logical = v->isLogical != 0;
    d->dtype = class_dtype(v);
}

hsi_status hsi_mat_list(hsi_mat_var **vars, int *n, const char *path)
{
    hsi_status st = HSI_OK;
    *vars = NULL;
    *n = 0;
    mat_init();
    mat_t *mat = Mat_Open(path, MAT_ACC_RDONLY);
    if (!mat) return HSI_FAIL(HSI_ERR_FORMAT, "%s: not a readable MATLAB file (%s)", path, mat_why());
    int cap = 0, v73 = Mat_GetVersion(mat) == MAT_FT_MAT73;
    matvar_t *v;
    while ((v = Mat_VarReadNextInfo(mat)) != NULL) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 8;
            hsi_mat_var *nv = realloc(*vars, (size_t)cap * sizeof *nv);
            if (!nv) {
                Mat_VarFree(v);
                st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
                goto cleanup;
            }
            *vars = nv;
        }
        hsi_mat_var *d = &(*vars)[(*n)++];
        describe(d, v);
        Mat_VarFree(v);
        if (!v73 && d->dtype != HSI_DT_INVALID) { /* the stored type, as read_view will */
            hsi_dtype stored = v5_stored_dtype(path, d->name);
            if (stored != HSI_DT_INVALID) d->dtype = stored;
        }
        if (*n > 100000) break;
    }
    if (*n == 0)
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: MATLAB file holds no readable variable (%s)", path,
                      mat_why());
cleanup:
    Mat_Close(mat);
    if (st != HSI_OK) {
        free(*vars);
        *vars = NULL;
        *n = 0;
    }
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

/* "name (83x86x204 int16), ..." of every variable, into buf. */
static void list_text(char *buf, size_t n, const hsi_mat_var *vars, int nv)
{
    size_t w = 0;
    buf[0] = 0;
    for (int i = 0; i < nv; i++) {
        char sh[96];
        shape_text(sh, sizeof sh, &vars[i]);
        const char *t = vars[i].is_complex                  ? "complex"
                        : vars[i].dtype == HSI_DT_INVALID ? "not numeric"
                                                          : hsi_dtype_name(vars[i].dtype);
        int c = snprintf(buf + w, n - w, "%s%s (%s %s)", i ? ", " : "", vars[i].name, sh, t);
        if (c < 0 || (size_t)c >= n - w) return;
        w += (size_t)c;
    }
}

static int is_integer(hsi_dtype dt) { return dt != HSI_DT_INVALID && !hsi_dtype_is_float(dt); }

/* want: 3 = cube (3-D numeric), 2 = labels (2-D integer). Chooses a name. */
static hsi_status choose(char *chosen, size_t len, const char *path, const char *var, int want)
{
    hsi_status st = HSI_OK;
    hsi_mat_var *vars = NULL;
    int nv = 0;
    char list[1024];
    HSI_TRY(hsi_mat_list(&vars, &nv, path));
    list_text(list, sizeof list, vars, nv);
    if (var) {
        for (int i = 0; i < nv; i++)
            if (strcmp(vars[i].name, var) == 0) {
                snprintf(chosen, len, "%s", var);
                goto cleanup;
            }
        st = HSI_FAIL(HSI_ERR_NOT_FOUND, "%s: no variable '%s'; the file holds: %s", path, var,
                      list);
        goto cleanup;
    }
    int found = -1, count = 0;
    for (int i = 0; i < nv; i++) {
        const hsi_mat_var *d = &vars[i];
        int ok = want == 3 ? (d->rank == 3 && d->dtype != HSI_DT_INVALID)
                           : (d->rank == 2 && is_integer(d->dtype));
        if (ok) {
            found = i;
            count++;
        }
    }
    if (count == 1) {
        snprintf(chosen, len, "%s", vars[found].name);
        goto cleanup;
    }
    st = HSI_FAIL(HSI_ERR_ARG,
                  "%s: %s %s; name one with --var NAME. Variables: %s", path,
                  count ? "more than one" : "no",
                  want == 3 ? "3-D numeric array (rows x cols x bands)"
                            : "2-D integer array (a label map)",
                  list);
cleanup:
    free(vars);
    return st;
}

/* ---- v5 storage types. matio converts data to the MATLAB class (SalinasA
 * is class double stored as int16); scipy and users expect the stored type,
 * which is exact. So the v5 element stream is walked here (tags only; a
 * compressed element's first bytes are inflated with zlib) to learn each
 * variable's stored type, and matio is asked to read into that type. */

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

static uint32_t get_u32(const uint8_t *p, int swap)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return swap ? __builtin_bswap32(v) : v;
}

/* Parses the start of a miMATRIX element (p, n bytes, tag included): name and
 * the type of the real-part data. Returns 1 when both were found. */
static int matrix_head(const uint8_t *p, size_t n, int swap, char *name, size_t nlen,
                       hsi_dtype *dt)
{
    size_t off = 8;
    if (n < 16 || get_u32(p, swap) != 14) return 0;
    for (int sub = 0; sub < 4; sub++) {
        if (off + 8 > n) return 0;
        uint32_t w = get_u32(p + off, swap), type, size;
        const uint8_t *data;
        size_t next;
        if (w >> 16) { /* small data element: type and size share 4 bytes */
            type = w & 0xffff;
            size = w >> 16;
            data = p + off + 4;
            next = off + 8;
            if (size > 4) return 0;
        } else {
            type = w;
            size = get_u32(p + off + 4, swap);
            data = p + off + 8;
            if (sub < 3 && size > n) return 0;
            next = off + 8 + (((size_t)size + 7) & ~(size_t)7);
        }
        if (sub == 2) { /* name */
            if (type != 1 || (size_t)(data - p) + size > n) return 0;
            size_t k = size < nlen - 1 ? size : nlen - 1;
            memcpy(name, data, k);
            name[k] = 0;
        } else if (sub == 3) { /* real part */
            *dt = mi_dtype(type);
            return *dt != HSI_DT_INVALID;
        }
        off = next;
    }
    return 0;
}

/* Stored type of variable `want` in a v5 file; HSI_DT_INVALID when unknown. */
static hsi_dtype v5_stored_dtype(const char *path, const char *want)
{
    hsi_dtype found = HSI_DT_INVALID;
    FILE *fp = fopen(path, "rb");
    uint8_t hdr[128], *comp = NULL, head[1024];
    if (!fp) return found;
    if (fread(hdr, 1, 128, fp) != 128) goto done;
    int swap = !(hdr[126] == 'I' && hdr[127] == 'M');
    if (swap && !(hdr[126] == 'M' && hdr[127] == 'I')) goto done;
    comp = malloc(4096);
    if (!comp) goto done;
    for (int e = 0; e < 100000; e++) {
        uint8_t tag[8];
        long pos = ftell(fp);
        if (pos < 0 || fread(tag, 1, 8, fp) != 8) break;
        uint32_t type = get_u32(tag, swap), size = get_u32(tag + 4, swap);
        size_t got = 0;
        char name[64] = "";
        hsi_dtype dt = HSI_DT_INVALID;
        if (type == 15) { /* miCOMPRESSED */
            size_t take = size < 4096 ? size : 4096;
            if (fread(comp, 1, take, fp) != take) break;
            z_stream z;
            memset(&z, 0, sizeof z);
            if (inflateInit(&z) != Z_OK) break;
            z.next_in = comp;
            z.avail_in = (uInt)take;
            z.next_out = head;
            z.avail_out = sizeof head;
            inflate(&z, Z_SYNC_FLUSH);
            got = sizeof head - z.avail_out;
            inflateEnd(&z);
            if (matrix_head(head, got, swap, name, sizeof name, &dt) && !strcmp(name, want)) {
                found = dt;
                break;
            }
            if (fseek(fp, pos + 8 + (long)size, SEEK_SET) != 0) break;
        } else {
            size_t take = size < sizeof head - 8 ? size : sizeof head - 8;
            memcpy(head, tag, 8);
            if (fread(head + 8, 1, take, fp) != take) break;
            if (matrix_head(head, take + 8, swap, name, sizeof name, &dt) && !strcmp(name, want)) {
                found = dt;
                break;
            }
            long next = pos + 8 + (long)(((size_t)size + 7) & ~(size_t)7);
            if (fseek(fp, next, SEEK_SET) != 0) break;
        }
    }
done:
    free(comp);
    fclose(fp);
    return found;
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

/* Reads a variable into a new host buffer in its stored type and views it:
 * MATLAB dims d0 x d1 [x d2], column-major. ndim_out 3: (d2, d0, d1);
 * ndim_out 2: (d0, d1). */
static hsi_status read_view(hsi_view *out, const char *path, const char *name, int ndim_out,
                            char *version, size_t vlen, char *mclass, size_t clen)
{
    hsi_status st = HSI_OK;
    hsi_buffer *buf = NULL;
    matvar_t *v = NULL;
    mat_init();
    mat_t *mat = Mat_Open(path, MAT_ACC_RDONLY);
    if (!mat) return HSI_FAIL(HSI_ERR_FORMAT, "%s: not a readable MATLAB file (%s)", path, mat_why());
    int v73 = Mat_GetVersion(mat) == MAT_FT_MAT73;
    if (version) snprintf(version, vlen, "%s", v73 ? "7.3" : "5");
    v = Mat_VarReadInfo(mat, name);
    if (!v) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: cannot read variable '%s' (%s)", path, name, mat_why());
        goto cleanup;
    }
    hsi_dtype dt = class_dtype(v);
    if (dt == HSI_DT_INVALID) {
        st = HSI_FAIL(HSI_ERR_UNSUPPORTED,
                      "%s: variable '%s' is %s; expected a real numeric or logical array", path,
                      name, v->isComplex ? "complex" : "not a numeric array");
        goto cleanup;
    }
    if (mclass) snprintf(mclass, clen, "%s", hsi_dtype_name(dt));
    if (!v73) {
        hsi_dtype stored = v5_stored_dtype(path, name);
        if (stored != HSI_DT_INVALID) dt = stored;
    }
    int rank = v->rank;
    int64_t d[3] = {1, 1, 1};
    if (rank < 2 || rank > 3 || (ndim_out == 2 && rank != 2) || !v->dims) {
        st = HSI_FAIL(HSI_ERR_UNSUPPORTED, "%s: variable '%s' has %d dimensions; expected %s", path,
                      name, rank, ndim_out == 2 ? "2 (rows x cols)" : "3 (rows x cols x bands) or 2");
        goto cleanup;
    }
    int start[3] = {0, 0, 0}, stride[3] = {1, 1, 1}, edge[3] = {1, 1, 1};
    for (int k = 0; k < rank; k++) {
        d[k] = (int64_t)v->dims[k];
        if (d[k] > INT32_MAX) {
            st = HSI_FAIL(HSI_ERR_UNSUPPORTED, "%s: variable '%s' dimension %d is %lld (> 2^31)",
                          path, name, k, (long long)d[k]);
            goto cleanup;
        }
        edge[k] = (int)d[k];
    }
    int64_t e = (int64_t)hsi_dtype_size(dt), cnt, nbytes;
    if (!hsi_mul_ok(d[0], d[1], &cnt) || !hsi_mul_ok(cnt, d[2], &cnt) ||
        !hsi_mul_ok(cnt, e, &nbytes)) {
        st = HSI_FAIL(HSI_ERR_OVERFLOW, "%s: variable '%s' size overflows", path, name);
        goto cleanup;
    }
    HSI_TRY(hsi_buffer_alloc(&buf, (size_t)(nbytes ? nbytes : 1), HSI_BUF_HOST));
    /* matio converts into class_type: asking for the stored type is exact */
    v->class_type = dtype_class(dt);
    if (nbytes > 0 && Mat_VarReadData(mat, v, buf->data, start, stride, edge) != 0) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: cannot read the data of variable '%s' (%s)", path,
                      name, mat_why());
        goto cleanup;
    }
    if (ndim_out == 3) {
        int64_t shape[3] = {d[2], d[0], d[1]};
        int64_t strides[3] = {d[0] * d[1] * e, e, d[0] * e};
        HSI_TRY(hsi_view_make(out, buf, 0, dt, 3, shape, strides, 0));
    } else {
        int64_t shape[2] = {d[0], d[1]};
        int64_t strides[2] = {e, d[0] * e};
        HSI_TRY(hsi_view_make(out, buf, 0, dt, 2, shape, strides, 0));
    }
cleanup:
    hsi_buffer_release(buf);
    if (v) Mat_VarFree(v);
    Mat_Close(mat);
    return st;
}

/* A label map opened as a cube: ENVI-classification metadata (ids 0..max,
 * default names) so that writers and viewers treat it as classes. */
static hsi_status mark_classification(hsi_meta *m, const hsi_view *v)
{
    double vmax = 0;
    int64_t idx[3] = {0, 0, 0};
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
    char name[64], version[8], mclass[16];
    int label_map = 0;
    hsi_cube_init(out);
    st = choose(name, sizeof name, path, var, 3);
    if (st == HSI_ERR_ARG && !var && strstr(hsi_last_error(), ": no 3-D")) {
        /* no cube, but maybe one 2-D integer map: a one-band classification */
        char saved[1200];
        snprintf(saved, sizeof saved, "%s", hsi_last_error());
        if (choose(name, sizeof name, path, NULL, 2) == HSI_OK) {
            st = HSI_OK;
            label_map = 1;
        } else {
            hsi_fail(st, "%s", saved);
        }
    }
    if (st != HSI_OK) goto cleanup;
    HSI_TRY(read_view(&out->view, path, name, 3, version, sizeof version, mclass, sizeof mclass));
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
    HSI_TRY(hsi_meta_set(m, "mat version", version, 0));
    HSI_TRY(hsi_meta_set(m, "mat class", mclass, 0));
    out->file_size = (int64_t)out->view.buf->size;
cleanup:
    if (st != HSI_OK) hsi_cube_free(out);
    return st;
}

hsi_status hsi_mat_open_2d(hsi_view *out, char **name_out, const char *path, const char *var)
{
    hsi_status st = HSI_OK;
    char name[64];
    memset(out, 0, sizeof *out);
    if (name_out) *name_out = NULL;
    HSI_TRY(choose(name, sizeof name, path, var, 2));
    HSI_TRY(read_view(out, path, name, 2, NULL, 0, NULL, 0));
    if (name_out && !(*name_out = strdup(name))) {
        hsi_view_release(out);
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    }
cleanup:
    return st;
}

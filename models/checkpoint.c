/* checkpoint.c — safetensors reading (validated, zero-copy views over the
 * mapped file) and writing (canonical, atomic), module state load/save with
 * strict and non-strict reports, training checkpoints. Not the trainer. */
#include "models/checkpoint.h"
#include "models/tensor_impl.h"

#include <cJSON.h>
#include <inttypes.h>
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
    int cnt = cJSON_GetArraySize(root);
    f->e = calloc((size_t)cnt + 1, sizeof *f->e);
    if (!f->e) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (cJSON *it = root->child; it; it = it->next) {
        if (!it->string) continue;
        if (!strcmp(it->string, "__metadata__")) {
            if (!cJSON_IsObject(it)) {
                st = HSI_FAIL(HSI_ERR_FORMAT, "%s: __metadata__ must be an object", what);
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
            if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 9.0e15 ||
                d->valuedouble != (double)(int64_t)d->valuedouble ||
                !hsi_mul_ok(bytes, (int64_t)d->valuedouble, &bytes)) {
                st = HSI_FAIL(HSI_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a valid size",
                              what, it->string, k);
                goto cleanup;
            }
            e->shape[k] = (int64_t)d->valuedouble;
        }
        double b0 = cJSON_GetArrayItem(of, 0)->valuedouble, b1 = cJSON_GetArrayItem(of, 1)->valuedouble;
        if (!cJSON_IsNumber(cJSON_GetArrayItem(of, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(of, 1)) ||
            b0 < 0 || b1 < b0 || b1 > (double)data_size) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: tensor '%s': data_offsets [%.0f, %.0f] outside the "
                                          "data area of %" PRIu64 " bytes",
                          what, it->string, b0, b1, data_size);
            goto cleanup;
        }
        e->begin = (uint64_t)b0;
        e->end = (uint64_t)b1;
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

/* Loads from an open file into the state list; see hsi_module_load. */
static hsi_status load_state(hsi_st_file *f, hsi_named_tensor *ts, int n, const char *prefix,
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

hsi_status hsi_module_load(hsi_module *m, const char *path, int strict, hsi_load_report *rep)
{
    hsi_status st = HSI_OK;
    hsi_st_file *f = NULL;
    hsi_named_tensor *ts = NULL;
    int n = 0;
    HSI_TRY(hsi_safetensors_open(&f, path));
    HSI_TRY(hsi_module_state(m, &ts, &n));
    HSI_TRY(load_state(f, ts, n, "", strict, rep, path));
cleanup:
    free(ts);
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

hsi_status hsi_train_load(const char *path, hsi_module *m, hsi_optim *o, hsi_sched *s,
                          int *epoch, char **config)
{
    hsi_status st = HSI_OK;
    hsi_st_file *f = NULL;
    hsi_named_tensor *ts = NULL;
    int n = 0;
    if (config) *config = NULL;
    HSI_TRY(hsi_safetensors_open(&f, path));
    const char *fmt = hsi_safetensors_meta(f, "format");
    const char *ep = hsi_safetensors_meta(f, "epoch"), *step = hsi_safetensors_meta(f, "optimizer_step");
    const char *rng = hsi_safetensors_meta(f, "rng"), *ocfg = hsi_safetensors_meta(f, "optimizer");
    const char *sch = hsi_safetensors_meta(f, "schedule"), *cfg = hsi_safetensors_meta(f, "config");
    if (!fmt || strcmp(fmt, "hsi-train-checkpoint-1") || !ep || !step || !rng || !ocfg || !sch) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: not an hsi training checkpoint (__metadata__ needs "
                                      "format = hsi-train-checkpoint-1, epoch, optimizer_step, rng, "
                                      "optimizer, schedule)", path);
        goto cleanup;
    }
    hsi_optim_config c = o->cfg;
    int kind = 0, nest = 0;
    uint64_t rs[4];
    if (sscanf(ocfg, "%d %la %la %la %d %la %la %la %la", &kind, &c.lr, &c.momentum, &c.dampening,
               &nest, &c.weight_decay, &c.beta1, &c.beta2, &c.eps) != 9 ||
        kind != (int)o->cfg.kind ||
        sscanf(rng, "%16" SCNx64 "%16" SCNx64 "%16" SCNx64 "%16" SCNx64, &rs[0], &rs[1], &rs[2],
               &rs[3]) != 4) {
        st = HSI_FAIL(HSI_ERR_FORMAT, "%s: optimizer '%s' (expected kind %d) or rng '%s' is "
                                      "malformed", path, ocfg, (int)o->cfg.kind, rng);
        goto cleanup;
    }
    c.kind = (hsi_optim_kind)kind;
    c.nesterov = nest;
    /* model state: strict, only the keys outside optimizer.* */
    HSI_TRY(hsi_module_state(m, &ts, &n));
    {
        /* a filtered copy of the entries without the optimiser ones */
        hsi_st_file view = *f;
        st_entry *e = calloc((size_t)f->n + 1, sizeof *e);
        if (!e) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        int k = 0;
        for (int j = 0; j < f->n; j++)
            if (strncmp(f->e[j].name, OPT_PREFIX, strlen(OPT_PREFIX)) != 0) e[k++] = f->e[j];
        view.e = e;
        view.n = k;
        st = load_state(&view, ts, n, "", 1, NULL, path);
        free(e);
        if (st != HSI_OK) goto cleanup;
    }
    for (int i = 0; i < o->n; i++) {
        for (int k = 0; k < 2; k++) {
            char name[HSI_NAME_MAX + 32];
            snprintf(name, sizeof name, OPT_PREFIX "%s.%s", k ? "exp_avg_sq" :
                     (c.kind == HSI_OPT_SGD ? "momentum_buffer" : "exp_avg"), o->params[i].name);
            int j = hsi_safetensors_find(f, name);
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
                hsi_fail_context(st, "%s: %s", path, name);
                goto cleanup;
            }
        }
    }
    o->cfg = c;
    o->step = strtoll(step, NULL, 10);
    if (s && strcmp(sch, "none")) {
        int sk = 0;
        if (sscanf(sch, "%d %la %d %la %d %d %la %la %d %d %la %d %la %d %d", &sk, &s->base_lr,
                   &s->step_size, &s->gamma, &s->warmup, &s->total, &s->min_lr, &s->factor,
                   &s->patience, &s->cooldown, &s->threshold, &s->epoch, &s->best, &s->num_bad,
                   &s->cooldown_counter) != 15) {
            st = HSI_FAIL(HSI_ERR_FORMAT, "%s: schedule '%s' is malformed", path, sch);
            goto cleanup;
        }
        s->kind = (hsi_sched_kind)sk;
    }
    hsi_rng *r = hsi_default_rng();
    for (int k = 0; k < 4; k++) r->s[k] = rs[k];
    *epoch = atoi(ep);
    if (config && cfg) *config = strdup(cfg);
cleanup:
    free(ts);
    hsi_safetensors_close(f);
    return st;
}

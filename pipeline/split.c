/* split.c — train/validation/test splits (see split.h): label reading,
 * class map, stratified random draws, block assignment with a guard band,
 * explicit maps, JSON and table output. No cube access here. */
#include "split.h"

#include <cJSON.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/prng.h"

void hsi_split_params_init(hsi_split_params *p)
{
    memset(p, 0, sizeof *p);
    p->mode = HSI_SPLIT_RANDOM;
    p->train_fraction = 0.1;
    p->block = 16;
}

/* ------------------------------------------------------------- helpers */

typedef struct split_ctx {
    hsi_split *s;
    int64_t L, S, N;
    int32_t *cls; /* (L, S): class index, -1 unlabelled */
} split_ctx;

static void split_warn(hsi_split *s, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    hsi_warn("%s", msg);
    size_t old = s->warnings ? strlen(s->warnings) : 0, add = strlen(msg) + 2;
    char *w = realloc(s->warnings, old + add);
    if (!w) return;
    memcpy(w + old, msg, add - 2);
    w[old + add - 2] = '\n';
    w[old + add - 1] = 0;
    s->warnings = w;
    s->n_warnings++;
}

/* lab: new (L, S) int64 array of a 2-D integer label view. */
static hsi_status read_labels(int64_t **lab, const hsi_view *v, const char *what, int64_t *L,
                              int64_t *S)
{
    hsi_status st = HSI_OK;
    *lab = NULL;
    if (!v || !v->buf) return HSI_FAIL(HSI_ERR_ARG, "%s labels: no view given", what);
    if (v->ndim != 2)
        return HSI_FAIL(HSI_ERR_ARG, "%s labels: expected a 2-D (lines, samples) view, found %d dims",
                        what, v->ndim);
    if (hsi_dtype_is_float(v->dtype) || hsi_dtype_is_complex(v->dtype) ||
        hsi_dtype_size(v->dtype) == 0)
        return HSI_FAIL(HSI_ERR_UNSUPPORTED,
                        "%s labels: expected an integer dtype, found %s", what,
                        hsi_dtype_name(v->dtype));
    if (v->buf->kind == HSI_BUF_DEVICE)
        return HSI_FAIL(HSI_ERR_UNSUPPORTED, "%s labels: the view lives in GPU memory", what);
    *L = v->shape[0];
    *S = v->shape[1];
    if (*L <= 0 || *S <= 0)
        return HSI_FAIL(HSI_ERR_ARG, "%s labels: empty scene (%lld x %lld)", what,
                        (long long)*L, (long long)*S);
    int64_t n;
    if (!hsi_mul_ok(*L, *S, &n) || !hsi_mul_ok(n, 8, &n))
        return HSI_FAIL(HSI_ERR_OVERFLOW, "%s labels: %lld x %lld overflows", what,
                        (long long)*L, (long long)*S);
    int64_t *a = malloc((size_t)n);
    if (!a) return HSI_FAIL(HSI_ERR_NOMEM, "%s labels: cannot allocate %lld bytes", what,
                            (long long)n);
    const char *base = (const char *)v->buf->data + v->offset;
    for (int64_t y = 0; y < *L; y++) {
        int64_t *row = a + y * *S;
        hsi_convert(row, 8, HSI_I64, 0, base + y * v->strides[0], v->strides[1], v->dtype,
                    v->swapped, *S);
        for (int64_t x = 0; x < *S; x++)
            if (row[x] < 0) {
                st = HSI_FAIL(HSI_ERR_ARG,
                              "%s labels: negative label %lld at line %lld, sample %lld "
                              "(expected 0 = unlabelled or a positive class id)",
                              what, (long long)row[x], (long long)y, (long long)x);
                goto cleanup;
            }
    }
    *lab = a;
    a = NULL;
cleanup:
    free(a);
    return st;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int hsi_split_class_of(const hsi_split *s, int64_t label)
{
    int lo = 0, hi = s->n_classes - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (s->class_ids[mid] == label) return mid;
        if (s->class_ids[mid] < label)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* Class map from one or two label arrays (N each); fills s->class_ids,
 * s->n_classes and c->cls. */
static hsi_status build_classes(split_ctx *c, const int64_t *a, const int64_t *b)
{
    hsi_status st = HSI_OK;
    hsi_split *s = c->s;
    int64_t n = 0, cap = 0;
    for (int64_t i = 0; i < c->N; i++) cap += (a[i] != 0) + (b && b[i] != 0);
    if (cap == 0) return HSI_FAIL(HSI_ERR_ARG, "labels: no labelled pixel (all %lld are 0)",
                                  (long long)c->N);
    int64_t *v = malloc((size_t)cap * sizeof *v);
    if (!v) return HSI_FAIL(HSI_ERR_NOMEM, "labels: out of memory");
    for (int64_t i = 0; i < c->N; i++) {
        if (a[i]) v[n++] = a[i];
        if (b && b[i]) v[n++] = b[i];
    }
    qsort(v, (size_t)n, sizeof *v, cmp_i64);
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (k == 0 || v[i] != v[k - 1]) v[k++] = v[i];
    if (k > INT32_MAX) {
        st = HSI_FAIL(HSI_ERR_ARG, "labels: %lld distinct classes is too many", (long long)k);
        goto cleanup;
    }
    s->n_classes = (int)k;
    s->class_ids = malloc((size_t)k * sizeof *s->class_ids);
    c->cls = malloc((size_t)c->N * sizeof *c->cls);
    if (!s->class_ids || !c->cls) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "labels: out of memory");
        goto cleanup;
    }
    memcpy(s->class_ids, v, (size_t)k * sizeof *v);
    for (int64_t i = 0; i < c->N; i++) {
        int64_t l = a[i] ? a[i] : (b ? b[i] : 0);
        c->cls[i] = l ? (int32_t)hsi_split_class_of(s, l) : -1;
    }
cleanup:
    free(v);
    return st;
}

/* Drops pixels of role `victim` whose (4r+1)^2 box holds a pixel of role
 * `against` (Chebyshev distance <= 2r), using a 2-D prefix count. */
static hsi_status guard_band(split_ctx *c, int victim, int against, int r)
{
    if (r <= 0) return HSI_OK;
    int64_t L = c->L, S = c->S, W = S + 1, g = 2 * (int64_t)r;
    int64_t *ps = calloc((size_t)((L + 1) * W), sizeof *ps);
    if (!ps) return HSI_FAIL(HSI_ERR_NOMEM, "guard band: out of memory");
    uint8_t *role = c->s->role;
    for (int64_t y = 0; y < L; y++)
        for (int64_t x = 0; x < S; x++)
            ps[(y + 1) * W + x + 1] = ps[y * W + x + 1] + ps[(y + 1) * W + x] - ps[y * W + x] +
                                      (role[y * S + x] == against);
    for (int64_t y = 0; y < L; y++)
        for (int64_t x = 0; x < S; x++) {
            if (role[y * S + x] != victim) continue;
            int64_t y0 = y - g < 0 ? 0 : y - g, y1 = y + g + 1 > L ? L : y + g + 1;
            int64_t x0 = x - g < 0 ? 0 : x - g, x1 = x + g + 1 > S ? S : x + g + 1;
            int64_t n = ps[y1 * W + x1] - ps[y0 * W + x1] - ps[y1 * W + x0] + ps[y0 * W + x0];
            if (n > 0) {
                role[y * S + x] = HSI_ROLE_NONE;
                c->s->n_guard++;
            }
        }
    free(ps);
    return HSI_OK;
}

static void count_roles(split_ctx *c, int64_t *counts /* (K, 4) */)
{
    memset(counts, 0, (size_t)c->s->n_classes * HSI_N_ROLES * sizeof *counts);
    for (int64_t i = 0; i < c->N; i++)
        if (c->cls[i] >= 0) counts[c->cls[i] * HSI_N_ROLES + c->s->role[i]]++;
}

typedef struct block_key {
    int64_t d2;   /* squared distance to the start block */
    uint64_t tie; /* seeded tie break */
    int64_t b;
} block_key;

static int cmp_block_key(const void *pa, const void *pb)
{
    const block_key *a = pa, *b = pb;
    if (a->d2 != b->d2) return a->d2 < b->d2 ? -1 : 1;
    if (a->tie != b->tie) return a->tie < b->tie ? -1 : 1;
    return (a->b > b->b) - (a->b < b->b);
}

static int block_majority(const int64_t *cnt, int K)
{
    int64_t best = 0;
    int k0 = -1;
    for (int k = 0; k < K; k++)
        if (cnt[k] > best) best = cnt[k], k0 = k;
    return k0;
}

/* Moves pixels of role src to dst by whole blocks until each class k has
 * target[k] pixels in dst, never taking a class's last src pixels. For
 * each class, blocks are visited from a seeded random start block outwards
 * (by distance), so that the moved part is compact and the guard band
 * only eats its rim. Global mode considers, for class k, the blocks whose
 * majority class is k and moves them whole; per-class mode considers the
 * blocks holding class k and moves only class k's pixels. */
static hsi_status move_blocks(split_ctx *c, int src, int dst, const int64_t *target, int per_class,
                              uint64_t key)
{
    hsi_status st = HSI_OK;
    hsi_split *s = c->s;
    int K = s->n_classes;
    int64_t B = s->params.block, nby = (c->L + B - 1) / B, nbx = (c->S + B - 1) / B,
            nb = nby * nbx;
    int64_t *bc = calloc((size_t)(nb * K), sizeof *bc);
    block_key *cand = malloc((size_t)nb * sizeof *cand);
    int64_t *rem = calloc((size_t)K, sizeof *rem), *got = calloc((size_t)K, sizeof *got);
    if (!bc || !cand || !rem || !got) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "disjoint split: out of memory (%lld blocks)", (long long)nb);
        goto cleanup;
    }
    for (int64_t y = 0; y < c->L; y++)
        for (int64_t x = 0; x < c->S; x++) {
            int64_t i = y * c->S + x;
            if (s->role[i] != src) continue;
            bc[((y / B) * nbx + x / B) * K + c->cls[i]]++;
            rem[c->cls[i]]++;
        }
    for (int k0 = 0; k0 < K; k0++) {
        if (got[k0] >= target[k0]) continue;
        int64_t n = 0;
        for (int64_t b = 0; b < nb; b++) {
            const int64_t *cnt = bc + b * K;
            if (cnt[k0] > 0 && (per_class || block_majority(cnt, K) == k0)) cand[n++].b = b;
        }
        if (n == 0) continue;
        hsi_prng r;
        hsi_prng_init(&r, hsi_prng_key(key, (uint64_t)s->class_ids[k0]));
        int64_t start = cand[hsi_prng_below(&r, (uint64_t)n)].b;
        int64_t sy = start / nbx, sx = start % nbx;
        for (int64_t j = 0; j < n; j++) {
            int64_t dy = cand[j].b / nbx - sy, dx = cand[j].b % nbx - sx;
            cand[j].d2 = dy * dy + dx * dx;
            cand[j].tie = hsi_prng_next(&r);
        }
        qsort(cand, (size_t)n, sizeof *cand, cmp_block_key);
        for (int64_t j = 0; j < n && got[k0] < target[k0]; j++) {
            int64_t b = cand[j].b, *cnt = bc + b * K;
            if (got[k0] > 0 && got[k0] + cnt[k0] > target[k0] + target[k0] / 2) continue;
            int ok = 1;
            for (int k = 0; k < K; k++)
                if ((k == k0 || !per_class) && cnt[k] > 0 && rem[k] - cnt[k] < 1) ok = 0;
            if (!ok) continue;
            int64_t by = b / nbx, bx = b % nbx;
            for (int64_t y = by * B; y < (by + 1) * B && y < c->L; y++)
                for (int64_t x = bx * B; x < (bx + 1) * B && x < c->S; x++) {
                    int64_t i = y * c->S + x;
                    if (s->role[i] != src || (per_class && c->cls[i] != k0)) continue;
                    s->role[i] = (uint8_t)dst;
                }
            for (int k = 0; k < K; k++) {
                if (per_class && k != k0) continue;
                got[k] += cnt[k];
                rem[k] -= cnt[k];
                cnt[k] = 0;
            }
        }
    }
cleanup:
    free(bc);
    free(cand);
    free(rem);
    free(got);
    return st;
}

/* Random per-class draw of validation pixels among the training ones. */
static hsi_status carve_val_random(split_ctx *c, const int64_t *counts)
{
    hsi_split *s = c->s;
    int K = s->n_classes;
    if (s->params.val_fraction <= 0) return HSI_OK;
    int64_t *list = malloc((size_t)c->N * sizeof *list);
    if (!list) return HSI_FAIL(HSI_ERR_NOMEM, "validation split: out of memory");
    for (int k = 0; k < K; k++) {
        int64_t ntr = counts[k * HSI_N_ROLES + HSI_ROLE_TRAIN], n = 0;
        int64_t nv = (int64_t)(s->params.val_fraction * (double)ntr + 0.5);
        if (nv > ntr - 1) nv = ntr - 1;
        if (nv <= 0) continue;
        for (int64_t i = 0; i < c->N; i++)
            if (c->cls[i] == k && s->role[i] == HSI_ROLE_TRAIN) list[n++] = i;
        hsi_prng r;
        hsi_prng_init(&r, hsi_prng_key(hsi_prng_key(s->params.seed, 0x7661ull),
                                       (uint64_t)s->class_ids[k]));
        hsi_prng_shuffle_i64(&r, list, n);
        for (int64_t j = 0; j < nv; j++) s->role[list[j]] = HSI_ROLE_VAL;
    }
    free(list);
    return HSI_OK;
}

static hsi_status finish(split_ctx *c)
{
    hsi_split *s = c->s;
    int K = s->n_classes;
    s->counts = calloc((size_t)K * HSI_N_ROLES, sizeof *s->counts);
    if (!s->counts) return HSI_FAIL(HSI_ERR_NOMEM, "split: out of memory");
    count_roles(c, s->counts);
    for (int r = 1; r < HSI_N_ROLES; r++) {
        int64_t n = 0;
        for (int64_t i = 0; i < c->N; i++) n += s->role[i] == r;
        s->n[r] = n;
        s->idx[r] = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
        s->cls[r] = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
        if (!s->idx[r] || !s->cls[r]) return HSI_FAIL(HSI_ERR_NOMEM, "split: out of memory");
        n = 0;
        for (int64_t i = 0; i < c->N; i++)
            if (s->role[i] == r) {
                s->idx[r][n] = i;
                s->cls[r][n++] = c->cls[i];
            }
    }
    for (int k = 0; k < K; k++) {
        const int64_t *cnt = s->counts + k * HSI_N_ROLES;
        if (cnt[HSI_ROLE_TRAIN] == 0)
            split_warn(s, "class %lld has no training pixel (%lld labelled, %lld test, %lld "
                          "dropped by the guard band)",
                       (long long)s->class_ids[k],
                       (long long)(cnt[0] + cnt[1] + cnt[2] + cnt[3]), (long long)cnt[3],
                       (long long)cnt[0]);
        if (cnt[HSI_ROLE_TEST] == 0)
            split_warn(s, "class %lld has no test pixel", (long long)s->class_ids[k]);
    }
    return HSI_OK;
}

static hsi_status check_params(const hsi_split_params *p)
{
    if (p->per_class < 0)
        return HSI_FAIL(HSI_ERR_ARG, "split: per_class must be >= 0 (found %lld)",
                        (long long)p->per_class);
    if (p->per_class == 0 && !(p->train_fraction > 0 && p->train_fraction < 1))
        return HSI_FAIL(HSI_ERR_ARG, "split: train_fraction must be in (0, 1) (found %g)",
                        p->train_fraction);
    if (!(p->val_fraction >= 0 && p->val_fraction < 1))
        return HSI_FAIL(HSI_ERR_ARG, "split: val_fraction must be in [0, 1) (found %g)",
                        p->val_fraction);
    if (p->patch_radius < 0)
        return HSI_FAIL(HSI_ERR_ARG, "split: patch_radius must be >= 0 (found %d)",
                        p->patch_radius);
    if (p->mode == HSI_SPLIT_DISJOINT && p->block < 1)
        return HSI_FAIL(HSI_ERR_ARG, "split: block must be >= 1 (found %d)", p->block);
    if (p->mode != HSI_SPLIT_RANDOM && p->mode != HSI_SPLIT_DISJOINT &&
        p->mode != HSI_SPLIT_EXPLICIT)
        return HSI_FAIL(HSI_ERR_ARG, "split: unknown mode %d", (int)p->mode);
    return HSI_OK;
}

static hsi_status split_begin(hsi_split *out, split_ctx *c, const hsi_split_params *p,
                              int64_t L, int64_t S)
{
    memset(out, 0, sizeof *out);
    memset(c, 0, sizeof *c);
    out->params = *p;
    out->n_lines = L;
    out->n_samples = S;
    c->s = out;
    c->L = L;
    c->S = S;
    c->N = L * S;
    out->role = calloc((size_t)c->N, 1);
    out->warnings = calloc(1, 1);
    if (!out->role || !out->warnings) return HSI_FAIL(HSI_ERR_NOMEM, "split: out of memory");
    return HSI_OK;
}

/* -------------------------------------------------------------- random */

static int64_t train_target(hsi_split *s, int k, int64_t n_c, int clamp_test)
{
    const hsi_split_params *p = &s->params;
    long long id = (long long)s->class_ids[k];
    int64_t t = p->per_class > 0 ? p->per_class : (int64_t)(p->train_fraction * (double)n_c + 0.5);
    if (n_c < 2) {
        split_warn(s, "class %lld has %lld labelled pixel: it goes to test, none to training",
                   id, (long long)n_c);
        return 0;
    }
    if (t > n_c - 1 && clamp_test) {
        split_warn(s, "class %lld has %lld labelled pixels; %lld training pixels asked, %lld "
                      "given so that one test pixel remains",
                   id, (long long)n_c, (long long)t, (long long)(n_c - 1));
        t = n_c - 1;
    }
    if (t < 1) {
        split_warn(s, "class %lld: %g of %lld pixels rounds to 0; 1 training pixel given", id,
                   p->train_fraction, (long long)n_c);
        t = 1;
    }
    return t;
}

static hsi_status split_random(split_ctx *c)
{
    hsi_split *s = c->s;
    int K = s->n_classes;
    int64_t *off = calloc((size_t)K + 1, sizeof *off);
    int64_t *list = malloc((size_t)c->N * sizeof *list);
    if (!off || !list) {
        free(off);
        free(list);
        return HSI_FAIL(HSI_ERR_NOMEM, "split: out of memory");
    }
    for (int64_t i = 0; i < c->N; i++)
        if (c->cls[i] >= 0) off[c->cls[i] + 1]++;
    for (int k = 0; k < K; k++) off[k + 1] += off[k];
    int64_t *pos = malloc((size_t)K * sizeof *pos);
    if (!pos) {
        free(off);
        free(list);
        return HSI_FAIL(HSI_ERR_NOMEM, "split: out of memory");
    }
    memcpy(pos, off, (size_t)K * sizeof *pos);
    for (int64_t i = 0; i < c->N; i++)
        if (c->cls[i] >= 0) list[pos[c->cls[i]]++] = i;
    for (int k = 0; k < K; k++) {
        int64_t *a = list + off[k], n_c = off[k + 1] - off[k];
        int64_t t = train_target(s, k, n_c, 1);
        int64_t nv = (int64_t)(s->params.val_fraction * (double)t + 0.5);
        if (nv > t - 1) nv = t - 1;
        if (nv < 0) nv = 0;
        hsi_prng r;
        hsi_prng_init(&r, hsi_prng_key(hsi_prng_key(s->params.seed, 0x7472ull),
                                       (uint64_t)s->class_ids[k]));
        hsi_prng_shuffle_i64(&r, a, n_c);
        for (int64_t j = 0; j < n_c; j++)
            s->role[a[j]] = j < nv ? HSI_ROLE_VAL : j < t ? HSI_ROLE_TRAIN : HSI_ROLE_TEST;
    }
    free(pos);
    free(off);
    free(list);
    return HSI_OK;
}

/* ------------------------------------------------------------ disjoint */

static hsi_status split_disjoint(split_ctx *c)
{
    hsi_status st = HSI_OK;
    hsi_split *s = c->s;
    const hsi_split_params *p = &s->params;
    int K = s->n_classes;
    int64_t *counts = malloc((size_t)K * HSI_N_ROLES * sizeof *counts);
    int64_t *target = malloc((size_t)K * sizeof *target);
    if (!counts || !target) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "split: out of memory");
        goto cleanup;
    }
    for (int64_t i = 0; i < c->N; i++)
        if (c->cls[i] >= 0) s->role[i] = HSI_ROLE_TEST;
    count_roles(c, counts);
    for (int k = 0; k < K; k++)
        target[k] = train_target(s, k, counts[k * HSI_N_ROLES + HSI_ROLE_TEST], 0);
    HSI_TRY(move_blocks(c, HSI_ROLE_TEST, HSI_ROLE_TRAIN, target, p->per_class_blocks,
                        hsi_prng_key(p->seed, 0x626c6b31ull)));
    HSI_TRY(guard_band(c, HSI_ROLE_TRAIN, HSI_ROLE_TEST, p->patch_radius));
    count_roles(c, counts);
    if (p->val_fraction > 0 && !p->val_disjoint) {
        HSI_TRY(carve_val_random(c, counts));
    } else if (p->val_fraction > 0) {
        for (int k = 0; k < K; k++) {
            int64_t ntr = counts[k * HSI_N_ROLES + HSI_ROLE_TRAIN];
            target[k] = (int64_t)(p->val_fraction * (double)ntr + 0.5);
        }
        HSI_TRY(move_blocks(c, HSI_ROLE_TRAIN, HSI_ROLE_VAL, target, p->per_class_blocks,
                            hsi_prng_key(p->seed, 0x626c6b32ull)));
        HSI_TRY(guard_band(c, HSI_ROLE_TRAIN, HSI_ROLE_VAL, p->patch_radius));
    }
cleanup:
    free(counts);
    free(target);
    return st;
}

/* -------------------------------------------------------------- public */

hsi_status hsi_split_make(hsi_split *out, const hsi_view *labels, const hsi_split_params *p)
{
    hsi_status st = HSI_OK;
    split_ctx c;
    int64_t *lab = NULL, L = 0, S = 0;
    hsi_split_params def;
    if (!p) {
        hsi_split_params_init(&def);
        p = &def;
    }
    memset(out, 0, sizeof *out);
    memset(&c, 0, sizeof c);
    HSI_TRY(check_params(p));
    if (p->mode == HSI_SPLIT_EXPLICIT) {
        st = HSI_FAIL(HSI_ERR_ARG, "split: explicit mode needs two maps (hsi_split_explicit)");
        goto cleanup;
    }
    HSI_TRY(read_labels(&lab, labels, "split", &L, &S));
    HSI_TRY(split_begin(out, &c, p, L, S));
    HSI_TRY(build_classes(&c, lab, NULL));
    if (p->mode == HSI_SPLIT_RANDOM)
        HSI_TRY(split_random(&c));
    else
        HSI_TRY(split_disjoint(&c));
    HSI_TRY(finish(&c));
cleanup:
    if (st != HSI_OK) hsi_split_free(out);
    free(c.cls);
    free(lab);
    return st;
}

hsi_status hsi_split_explicit(hsi_split *out, const hsi_view *train, const hsi_view *test,
                              const hsi_split_params *p)
{
    hsi_status st = HSI_OK;
    split_ctx c;
    int64_t *a = NULL, *b = NULL, L = 0, S = 0, L2 = 0, S2 = 0;
    hsi_split_params q;
    if (p)
        q = *p;
    else
        hsi_split_params_init(&q);
    q.mode = HSI_SPLIT_EXPLICIT;
    memset(out, 0, sizeof *out);
    memset(&c, 0, sizeof c);
    if (!(q.val_fraction >= 0 && q.val_fraction < 1) || q.patch_radius < 0) {
        st = HSI_FAIL(HSI_ERR_ARG, "split: val_fraction must be in [0, 1) and patch_radius >= 0 "
                                   "(found %g, %d)", q.val_fraction, q.patch_radius);
        goto cleanup;
    }
    HSI_TRY(read_labels(&a, train, "training", &L, &S));
    HSI_TRY(read_labels(&b, test, "test", &L2, &S2));
    if (L != L2 || S != S2) {
        st = HSI_FAIL(HSI_ERR_ARG, "split: the training map is %lld x %lld but the test map is "
                                   "%lld x %lld", (long long)L, (long long)S, (long long)L2,
                      (long long)S2);
        goto cleanup;
    }
    for (int64_t i = 0; i < L * S; i++)
        if (a[i] && b[i]) {
            st = HSI_FAIL(HSI_ERR_ARG, "split: pixel (line %lld, sample %lld) is labelled in both "
                                       "the training map (%lld) and the test map (%lld)",
                          (long long)(i / S), (long long)(i % S), (long long)a[i],
                          (long long)b[i]);
            goto cleanup;
        }
    HSI_TRY(split_begin(out, &c, &q, L, S));
    HSI_TRY(build_classes(&c, a, b));
    for (int64_t i = 0; i < c.N; i++)
        out->role[i] = a[i] ? HSI_ROLE_TRAIN : b[i] ? HSI_ROLE_TEST : HSI_ROLE_NONE;
    if (q.guard_explicit) HSI_TRY(guard_band(&c, HSI_ROLE_TRAIN, HSI_ROLE_TEST, q.patch_radius));
    {
        int64_t *counts = malloc((size_t)out->n_classes * HSI_N_ROLES * sizeof *counts);
        if (!counts) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "split: out of memory");
            goto cleanup;
        }
        count_roles(&c, counts);
        st = carve_val_random(&c, counts);
        free(counts);
        if (st != HSI_OK) goto cleanup;
    }
    HSI_TRY(finish(&c));
cleanup:
    if (st != HSI_OK) hsi_split_free(out);
    free(c.cls);
    free(a);
    free(b);
    return st;
}

void hsi_split_free(hsi_split *s)
{
    if (!s) return;
    free(s->role);
    free(s->class_ids);
    free(s->counts);
    free(s->warnings);
    for (int r = 0; r < HSI_N_ROLES; r++) {
        free(s->idx[r]);
        free(s->cls[r]);
    }
    memset(s, 0, sizeof *s);
}

hsi_status hsi_split_mask(hsi_view *out, const hsi_split *s, unsigned roles)
{
    int64_t shape[2] = {s->n_lines, s->n_samples};
    hsi_status st = hsi_view_alloc(out, HSI_U8, 2, shape, HSI_BUF_HOST);
    if (st != HSI_OK) return st;
    uint8_t *m = out->buf->data;
    for (int64_t i = 0; i < s->n_lines * s->n_samples; i++) m[i] = (roles >> s->role[i]) & 1u;
    return HSI_OK;
}

int64_t hsi_split_min_distance(const hsi_split *s, int role_a, int role_b)
{
    /* Chessboard distance transform to role_b (two chamfer passes, exact
     * for the 8-neighbour unit mask), then the minimum over role_a. */
    int64_t L = s->n_lines, S = s->n_samples, N = L * S, best = INT64_MAX;
    const int64_t inf = INT64_MAX / 4;
    int64_t *d = malloc((size_t)N * sizeof *d);
    if (!d) return -1;
    for (int64_t i = 0; i < N; i++) d[i] = s->role[i] == role_b ? 0 : inf;
    for (int64_t y = 0; y < L; y++)
        for (int64_t x = 0; x < S; x++) {
            int64_t v = d[y * S + x];
            if (x > 0 && d[y * S + x - 1] + 1 < v) v = d[y * S + x - 1] + 1;
            if (y > 0)
                for (int64_t dx = -1; dx <= 1; dx++)
                    if (x + dx >= 0 && x + dx < S && d[(y - 1) * S + x + dx] + 1 < v)
                        v = d[(y - 1) * S + x + dx] + 1;
            d[y * S + x] = v;
        }
    for (int64_t y = L - 1; y >= 0; y--)
        for (int64_t x = S - 1; x >= 0; x--) {
            int64_t v = d[y * S + x];
            if (x < S - 1 && d[y * S + x + 1] + 1 < v) v = d[y * S + x + 1] + 1;
            if (y < L - 1)
                for (int64_t dx = -1; dx <= 1; dx++)
                    if (x + dx >= 0 && x + dx < S && d[(y + 1) * S + x + dx] + 1 < v)
                        v = d[(y + 1) * S + x + dx] + 1;
            d[y * S + x] = v;
        }
    for (int64_t i = 0; i < N; i++)
        if (s->role[i] == role_a && d[i] < inf && d[i] < best) best = d[i];
    free(d);
    return best;
}

/* ---------------------------------------------------------------- output */

static const char *mode_name(hsi_split_mode m)
{
    return m == HSI_SPLIT_RANDOM ? "random" : m == HSI_SPLIT_DISJOINT ? "disjoint" : "explicit";
}

static const char *role_key[HSI_N_ROLES] = {"unused", "train", "val", "test"};

cJSON *hsi_split_json(const hsi_split *s, const char *const *names, int with_indices)
{
    const hsi_split_params *p = &s->params;
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON *prm = cJSON_AddObjectToObject(o, "params");
    if (!prm) goto fail;
    cJSON_AddStringToObject(prm, "mode", mode_name(p->mode));
    if (p->mode != HSI_SPLIT_EXPLICIT) {
        if (p->per_class > 0)
            cJSON_AddNumberToObject(prm, "per_class", (double)p->per_class);
        else
            cJSON_AddNumberToObject(prm, "train_fraction", p->train_fraction);
    }
    cJSON_AddNumberToObject(prm, "val_fraction", p->val_fraction);
    cJSON_AddNumberToObject(prm, "seed", (double)p->seed);
    if (p->mode == HSI_SPLIT_DISJOINT) {
        cJSON_AddNumberToObject(prm, "block", p->block);
        cJSON_AddStringToObject(prm, "blocks", p->per_class_blocks ? "per_class" : "global");
        cJSON_AddBoolToObject(prm, "val_disjoint", p->val_disjoint != 0);
    }
    if (p->mode != HSI_SPLIT_RANDOM) {
        cJSON_AddNumberToObject(prm, "patch_radius", p->patch_radius);
        int guarded = p->mode == HSI_SPLIT_DISJOINT || p->guard_explicit;
        cJSON_AddNumberToObject(prm, "guard_distance", guarded ? 2 * p->patch_radius + 1 : 0);
    }
    cJSON_AddNumberToObject(o, "lines", (double)s->n_lines);
    cJSON_AddNumberToObject(o, "samples", (double)s->n_samples);
    cJSON *cl = cJSON_AddArrayToObject(o, "classes");
    if (!cl) goto fail;
    for (int k = 0; k < s->n_classes; k++) {
        cJSON *c = cJSON_CreateObject();
        if (!c) goto fail;
        cJSON_AddItemToArray(cl, c);
        cJSON_AddNumberToObject(c, "index", k);
        cJSON_AddNumberToObject(c, "label", (double)s->class_ids[k]);
        if (names && names[k]) cJSON_AddStringToObject(c, "name", names[k]);
        int64_t t = 0;
        for (int r = 0; r < HSI_N_ROLES; r++) {
            int rr = (r + 1) % HSI_N_ROLES; /* train, val, test, unused */
            cJSON_AddNumberToObject(c, role_key[rr], (double)s->counts[k * HSI_N_ROLES + rr]);
            t += s->counts[k * HSI_N_ROLES + r];
        }
        cJSON_AddNumberToObject(c, "labelled", (double)t);
    }
    cJSON *tot = cJSON_AddObjectToObject(o, "totals");
    if (!tot) goto fail;
    for (int r = 1; r < HSI_N_ROLES; r++) cJSON_AddNumberToObject(tot, role_key[r], (double)s->n[r]);
    cJSON_AddNumberToObject(tot, "guard_dropped", (double)s->n_guard);
    cJSON *w = cJSON_AddArrayToObject(o, "warnings");
    if (!w) goto fail;
    for (const char *q = s->warnings; q && *q;) {
        const char *e = strchr(q, '\n');
        size_t n = e ? (size_t)(e - q) : strlen(q);
        char buf[600];
        snprintf(buf, sizeof buf, "%.*s", (int)(n < 599 ? n : 599), q);
        cJSON_AddItemToArray(w, cJSON_CreateString(buf));
        q += n + (e != NULL);
    }
    if (with_indices) {
        cJSON *ix = cJSON_AddObjectToObject(o, "indices");
        if (!ix) goto fail;
        for (int r = 1; r < HSI_N_ROLES; r++) {
            cJSON *a = cJSON_AddArrayToObject(ix, role_key[r]);
            if (!a) goto fail;
            for (int64_t j = 0; j < s->n[r]; j++)
                cJSON_AddItemToArray(a, cJSON_CreateNumber((double)s->idx[r][j]));
        }
    }
    return o;
fail:
    cJSON_Delete(o);
    return NULL;
}

hsi_status hsi_split_save_json(const hsi_split *s, const char *path, const char *const *names,
                               int with_indices)
{
    hsi_status st = HSI_OK;
    char *text = NULL;
    cJSON *o = hsi_split_json(s, names, with_indices);
    if (!o || !(text = cJSON_Print(o))) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "%s: cannot build the split JSON", path);
        goto cleanup;
    }
    st = hsi_write_file_atomic(path, text, strlen(text));
cleanup:
    free(text);
    cJSON_Delete(o);
    return st;
}

void hsi_split_print(const hsi_split *s, FILE *fp, const char *const *names)
{
    fprintf(fp, "%5s %8s  %-20s %8s %8s %8s %8s %8s\n", "class", "label", "name", "train", "val",
            "test", "unused", "total");
    int64_t tot[HSI_N_ROLES] = {0};
    for (int k = 0; k < s->n_classes; k++) {
        const int64_t *c = s->counts + k * HSI_N_ROLES;
        fprintf(fp, "%5d %8lld  %-20.20s %8lld %8lld %8lld %8lld %8lld\n", k,
                (long long)s->class_ids[k], names && names[k] ? names[k] : "", (long long)c[1],
                (long long)c[2], (long long)c[3], (long long)c[0],
                (long long)(c[0] + c[1] + c[2] + c[3]));
        for (int r = 0; r < HSI_N_ROLES; r++) tot[r] += c[r];
    }
    fprintf(fp, "%5s %8s  %-20s %8lld %8lld %8lld %8lld %8lld\n", "all", "", "",
            (long long)tot[1], (long long)tot[2], (long long)tot[3], (long long)tot[0],
            (long long)(tot[0] + tot[1] + tot[2] + tot[3]));
}

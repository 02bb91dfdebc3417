/* test_pipeline_split.c — splits: counts per class and role, determinism,
 * label reading through odd views, the disjoint guard band checked by
 * brute force (pairwise distances and window overlap), explicit maps,
 * JSON. References are computed here by naive loops. */
#include "test.h"

#include <cJSON.h>

#include "pipeline/split.h"

/* A blocky label map: 5 classes with ids 3, 7, 10, 11, 200 in stripes and
 * tiles, plus unlabelled holes. Shape (L, S). */
static int64_t lab_at(int64_t y, int64_t x)
{
    static const int64_t ids[5] = {3, 7, 10, 11, 200};
    if ((y % 17 == 5) || (x % 23 == 0)) return 0;
    return ids[((y / 9) * 3 + (x / 13) * 2) % 5];
}

/* An int16 label view stored transposed and byte-swapped inside a bigger
 * buffer: the reader must follow strides and the swap flag. */
static hsi_view make_labels(int64_t L, int64_t S, int64_t (*f)(int64_t, int64_t))
{
    hsi_buffer *buf = NULL;
    CU_ASSERT_EQUAL_FATAL(hsi_buffer_alloc(&buf, (size_t)(L * S * 2 + 6), HSI_BUF_HOST), HSI_OK);
    uint8_t *base = (uint8_t *)buf->data + 6;
    for (int64_t y = 0; y < L; y++)
        for (int64_t x = 0; x < S; x++) {
            uint16_t v = __builtin_bswap16((uint16_t)(int16_t)f(y, x));
            memcpy(base + 2 * (x * L + y), &v, 2); /* column-major */
        }
    hsi_view v;
    int64_t shape[2] = {L, S}, strides[2] = {2, 2 * L};
    CU_ASSERT_EQUAL(hsi_view_make(&v, buf, 6, HSI_I16, 2, shape, strides, 1), HSI_OK);
    hsi_buffer_release(buf);
    return v;
}

/* Checks the representation against the role array and the label
 * function: index lists ascending and complete, classes mapped right,
 * counts consistent. */
static void check_consistent(const hsi_split *s, int64_t (*f)(int64_t, int64_t))
{
    int64_t S = s->n_samples, N = s->n_lines * S;
    int bad = 0;
    for (int k = 1; k < s->n_classes; k++) bad += s->class_ids[k] <= s->class_ids[k - 1];
    int64_t *cnt = calloc((size_t)s->n_classes * 4, sizeof *cnt);
    for (int64_t i = 0; i < N; i++) {
        int64_t l = f(i / S, i % S);
        if (l == 0) {
            bad += s->role[i] != HSI_ROLE_NONE;
            continue;
        }
        int k = hsi_split_class_of(s, l);
        bad += k < 0;
        if (k >= 0) cnt[k * 4 + s->role[i]]++;
    }
    for (int64_t j = 0; j < s->n_classes * 4; j++) bad += cnt[j] != s->counts[j];
    for (int r = 1; r < 4; r++) {
        int64_t n = 0;
        for (int64_t i = 0; i < N; i++) n += s->role[i] == r;
        bad += n != s->n[r];
        for (int64_t j = 0; j < s->n[r]; j++) {
            int64_t i = s->idx[r][j];
            bad += s->role[i] != r;
            bad += j > 0 && i <= s->idx[r][j - 1];
            bad += s->class_ids[s->cls[r][j]] != f(i / S, i % S);
        }
    }
    free(cnt);
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_random_fraction(void)
{
    int64_t L = 61, S = 47;
    hsi_view lab = make_labels(L, S, lab_at);
    hsi_split_params p;
    hsi_split_params_init(&p);
    p.train_fraction = 0.25;
    p.val_fraction = 0.2;
    p.seed = 7;
    hsi_split s, s2, s3;
    HSI_CHECK_OK(hsi_split_make(&s, &lab, &p));
    CU_ASSERT_EQUAL(s.n_classes, 5);
    CU_ASSERT_EQUAL(s.class_ids[0], 3);
    CU_ASSERT_EQUAL(s.class_ids[4], 200);
    CU_ASSERT_EQUAL(hsi_split_class_of(&s, 11), 3);
    CU_ASSERT_EQUAL(hsi_split_class_of(&s, 4), -1);
    check_consistent(&s, lab_at);
    /* per class: train+val = round(0.25 n), val = round(0.2 * that) */
    for (int k = 0; k < 5; k++) {
        int64_t n = 0;
        for (int64_t y = 0; y < L; y++)
            for (int64_t x = 0; x < S; x++) n += lab_at(y, x) == s.class_ids[k];
        int64_t t = (int64_t)floor(0.25 * (double)n + 0.5), v = (int64_t)floor(0.2 * (double)t + 0.5);
        const int64_t *c = s.counts + k * 4;
        CU_ASSERT(n > 100);
        CU_ASSERT_EQUAL(c[HSI_ROLE_TRAIN], t - v);
        CU_ASSERT_EQUAL(c[HSI_ROLE_VAL], v);
        CU_ASSERT_EQUAL(c[HSI_ROLE_TEST], n - t);
        CU_ASSERT_EQUAL(c[HSI_ROLE_NONE], 0);
    }
    CU_ASSERT_EQUAL(s.n_warnings, 0);
    /* masks for fitting on training pixels */
    hsi_view m;
    HSI_CHECK_OK(hsi_split_mask(&m, &s, (1u << HSI_ROLE_TRAIN) | (1u << HSI_ROLE_VAL)));
    CU_ASSERT_EQUAL(m.shape[0], L);
    CU_ASSERT_EQUAL(m.shape[1], S);
    int64_t on = 0, wrong = 0;
    for (int64_t i = 0; i < L * S; i++) {
        uint8_t v = ((uint8_t *)m.buf->data)[i];
        on += v;
        wrong += v != (s.role[i] == HSI_ROLE_TRAIN || s.role[i] == HSI_ROLE_VAL);
    }
    CU_ASSERT_EQUAL(on, s.n[HSI_ROLE_TRAIN] + s.n[HSI_ROLE_VAL]);
    CU_ASSERT_EQUAL(wrong, 0);
    hsi_view_release(&m);
    /* same seed: same roles; another seed: other roles, same counts */
    HSI_CHECK_OK(hsi_split_make(&s2, &lab, &p));
    CU_ASSERT_EQUAL(memcmp(s.role, s2.role, (size_t)(L * S)), 0);
    p.seed = 8;
    HSI_CHECK_OK(hsi_split_make(&s3, &lab, &p));
    CU_ASSERT_NOT_EQUAL(memcmp(s.role, s3.role, (size_t)(L * S)), 0);
    CU_ASSERT_EQUAL(memcmp(s.counts, s3.counts, 20 * sizeof(int64_t)), 0);
    /* validation is carved out of the same draw: without it, train+val of
     * the same seed are the training set */
    p.seed = 7;
    p.val_fraction = 0;
    hsi_split_free(&s3);
    HSI_CHECK_OK(hsi_split_make(&s3, &lab, &p));
    int bad = 0;
    for (int64_t i = 0; i < L * S; i++)
        bad += (s.role[i] == HSI_ROLE_TRAIN || s.role[i] == HSI_ROLE_VAL) !=
               (s3.role[i] == HSI_ROLE_TRAIN);
    CU_ASSERT_EQUAL(bad, 0);
    hsi_split_free(&s);
    hsi_split_free(&s2);
    hsi_split_free(&s3);
    hsi_view_release(&lab);
}

/* Class 1: 1 pixel, class 2: 3 pixels, class 5: 40 pixels. */
static int64_t lab_small(int64_t y, int64_t x)
{
    if (y == 0 && x == 0) return 1;
    if (y == 1 && x < 3) return 2;
    if (y >= 2 && y < 6) return 5;
    return 0;
}

static void test_random_count_small_classes(void)
{
    hsi_view lab = make_labels(7, 10, lab_small);
    hsi_split_params p;
    hsi_split_params_init(&p);
    p.per_class = 5;
    p.seed = 3;
    hsi_set_quiet(1);
    hsi_split s;
    HSI_CHECK_OK(hsi_split_make(&s, &lab, &p));
    hsi_set_quiet(0);
    check_consistent(&s, lab_small);
    CU_ASSERT_EQUAL(s.n_classes, 3);
    /* 1 pixel: test only; 3 pixels: 2 train + 1 test; 40: 5 + 35 */
    CU_ASSERT_EQUAL(s.counts[0 * 4 + HSI_ROLE_TRAIN], 0);
    CU_ASSERT_EQUAL(s.counts[0 * 4 + HSI_ROLE_TEST], 1);
    CU_ASSERT_EQUAL(s.counts[1 * 4 + HSI_ROLE_TRAIN], 2);
    CU_ASSERT_EQUAL(s.counts[1 * 4 + HSI_ROLE_TEST], 1);
    CU_ASSERT_EQUAL(s.counts[2 * 4 + HSI_ROLE_TRAIN], 5);
    CU_ASSERT_EQUAL(s.counts[2 * 4 + HSI_ROLE_TEST], 35);
    CU_ASSERT(s.n_warnings >= 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(s.warnings, "class 1 has 1 labelled pixel"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s.warnings, "class 2 has 3 labelled pixels"));
    hsi_split_free(&s);
    hsi_view_release(&lab);
}

/* Largest Chebyshev distance between two role sets by brute force. */
static int64_t naive_min_dist(const hsi_split *s, int ra, int rb)
{
    int64_t best = INT64_MAX, S = s->n_samples;
    for (int64_t i = 0; i < s->n[ra]; i++)
        for (int64_t j = 0; j < s->n[rb]; j++) {
            int64_t a = s->idx[ra][i], b = s->idx[rb][j];
            int64_t dy = llabs(a / S - b / S), dx = llabs(a % S - b % S);
            int64_t d = dy > dx ? dy : dx;
            if (d < best) best = d;
        }
    return best;
}

/* Marks the clipped (2r+1)^2 windows of roles ra and rb and counts cells
 * covered by both. */
static int64_t window_overlap(const hsi_split *s, int ra, int rb, int r)
{
    int64_t L = s->n_lines, S = s->n_samples, n = 0;
    uint8_t *m = calloc((size_t)(L * S), 1);
    int roles[2] = {ra, rb};
    for (int q = 0; q < 2; q++)
        for (int64_t j = 0; j < s->n[roles[q]]; j++) {
            int64_t y0 = s->idx[roles[q]][j] / S, x0 = s->idx[roles[q]][j] % S;
            for (int64_t y = y0 - r; y <= y0 + r; y++)
                for (int64_t x = x0 - r; x <= x0 + r; x++)
                    if (y >= 0 && y < L && x >= 0 && x < S) m[y * S + x] |= (uint8_t)(1 << q);
        }
    for (int64_t i = 0; i < L * S; i++) n += m[i] == 3;
    free(m);
    return n;
}

/* Fields of 32 x 32 like a farm scene: classes 3, 7, 10, 11, 200 with one
 * or two fields each, and unlabelled tracks. */
static int64_t lab_fields(int64_t y, int64_t x)
{
    static const int64_t ids[5] = {3, 7, 10, 11, 200};
    if (y % 29 == 5 || x == 50) return 0;
    return ids[((y / 32) * 3 + x / 32) % 5];
}

static void check_disjoint(int per_class_blocks, int val_disjoint)
{
    int64_t L = 96, S = 90;
    int r = 2, B = 8;
    hsi_view lab = make_labels(L, S, lab_fields);
    hsi_split_params p;
    hsi_split_params_init(&p);
    p.mode = HSI_SPLIT_DISJOINT;
    p.train_fraction = 0.5;
    p.val_fraction = 0.2;
    p.block = B;
    p.patch_radius = r;
    p.per_class_blocks = per_class_blocks;
    p.val_disjoint = val_disjoint;
    p.seed = 11;
    hsi_split s, s2;
    HSI_CHECK_OK(hsi_split_make(&s, &lab, &p));
    check_consistent(&s, lab_fields);
    for (int k = 0; k < s.n_classes; k++) {
        CU_ASSERT(s.counts[k * 4 + HSI_ROLE_TRAIN] > 0);
        CU_ASSERT(s.counts[k * 4 + HSI_ROLE_TEST] > 0);
    }
    CU_ASSERT(s.n[HSI_ROLE_VAL] > 0);
    CU_ASSERT(s.n_guard > 0);
    int64_t dropped = 0;
    for (int k = 0; k < s.n_classes; k++) dropped += s.counts[k * 4 + HSI_ROLE_NONE];
    CU_ASSERT_EQUAL(dropped, s.n_guard);
    /* the guarantee, checked two ways by brute force */
    int64_t d_tt = naive_min_dist(&s, HSI_ROLE_TRAIN, HSI_ROLE_TEST);
    int64_t d_vt = naive_min_dist(&s, HSI_ROLE_VAL, HSI_ROLE_TEST);
    int64_t d_tv = naive_min_dist(&s, HSI_ROLE_TRAIN, HSI_ROLE_VAL);
    CU_ASSERT(d_tt >= 2 * r + 1);
    CU_ASSERT(d_vt >= 2 * r + 1);
    if (val_disjoint) CU_ASSERT(d_tv >= 2 * r + 1);
    CU_ASSERT_EQUAL(window_overlap(&s, HSI_ROLE_TRAIN, HSI_ROLE_TEST, r), 0);
    CU_ASSERT_EQUAL(window_overlap(&s, HSI_ROLE_VAL, HSI_ROLE_TEST, r), 0);
    if (val_disjoint) CU_ASSERT_EQUAL(window_overlap(&s, HSI_ROLE_TRAIN, HSI_ROLE_VAL, r), 0);
    if (!val_disjoint) /* random validation: round(0.2 * guarded training pixels) */
        for (int k = 0; k < s.n_classes; k++) {
            int64_t tv = s.counts[k * 4 + HSI_ROLE_TRAIN] + s.counts[k * 4 + HSI_ROLE_VAL];
            CU_ASSERT_EQUAL(s.counts[k * 4 + HSI_ROLE_VAL], (int64_t)floor(0.2 * (double)tv + 0.5));
        }
    /* the library's distance transform agrees with brute force */
    CU_ASSERT_EQUAL(hsi_split_min_distance(&s, HSI_ROLE_TRAIN, HSI_ROLE_TEST), d_tt);
    CU_ASSERT_EQUAL(hsi_split_min_distance(&s, HSI_ROLE_TRAIN, HSI_ROLE_VAL), d_tv);
    /* blocks: a block never holds test pixels together with training or
     * validation pixels (of the same class, in per-class mode) */
    int bad = 0;
    for (int64_t by = 0; by < L; by += B)
        for (int64_t bx = 0; bx < S; bx += B)
            for (int k = 0; k < s.n_classes; k++) {
                int has[4] = {0};
                for (int64_t y = by; y < by + B && y < L; y++)
                    for (int64_t x = bx; x < bx + B && x < S; x++)
                        if (per_class_blocks ? lab_fields(y, x) == s.class_ids[k] : lab_fields(y, x) != 0)
                            has[s.role[y * S + x]] = 1;
                bad += has[HSI_ROLE_TEST] && (has[HSI_ROLE_TRAIN] || has[HSI_ROLE_VAL]);
                if (val_disjoint) bad += has[HSI_ROLE_VAL] && has[HSI_ROLE_TRAIN];
            }
    CU_ASSERT_EQUAL(bad, 0);
    /* determinism */
    HSI_CHECK_OK(hsi_split_make(&s2, &lab, &p));
    CU_ASSERT_EQUAL(memcmp(s.role, s2.role, (size_t)(L * S)), 0);
    hsi_split_free(&s2);
    /* without a guard band nothing is dropped */
    p.patch_radius = 0;
    HSI_CHECK_OK(hsi_split_make(&s2, &lab, &p));
    CU_ASSERT_EQUAL(s2.n_guard, 0);
    CU_ASSERT_EQUAL(s2.n[HSI_ROLE_TRAIN] + s2.n[HSI_ROLE_VAL] + s2.n[HSI_ROLE_TEST],
                    s.n[HSI_ROLE_TRAIN] + s.n[HSI_ROLE_VAL] + s.n[HSI_ROLE_TEST] + s.n_guard);
    hsi_split_free(&s2);
    hsi_split_free(&s);
    hsi_view_release(&lab);
}

static void test_disjoint_global(void) { check_disjoint(0, 1); }
static void test_disjoint_per_class(void) { check_disjoint(1, 1); }
static void test_disjoint_random_val(void) { check_disjoint(0, 0); }

static int64_t lab_train(int64_t y, int64_t x) { return (y < 10 && x < 10) ? 1 + (x >= 5) : 0; }
static int64_t lab_test(int64_t y, int64_t x)
{
    if (y >= 11 && x < 10) return 1 + (x >= 5);
    if (y == 19 && x == 19) return 9; /* a class with no training pixel */
    return 0;
}
static int64_t lab_both(int64_t y, int64_t x) { return lab_train(y, x) ? lab_train(y, x) : lab_test(y, x); }

static void test_explicit(void)
{
    hsi_view tr = make_labels(20, 20, lab_train), te = make_labels(20, 20, lab_test);
    hsi_view bad = make_labels(20, 20, lab_both);
    hsi_split_params p;
    hsi_split_params_init(&p);
    p.val_fraction = 0.1;
    p.patch_radius = 1;
    p.guard_explicit = 1;
    hsi_set_quiet(1);
    hsi_split s;
    HSI_CHECK_OK(hsi_split_explicit(&s, &tr, &te, &p));
    hsi_set_quiet(0);
    check_consistent(&s, lab_both);
    CU_ASSERT_EQUAL(s.n_classes, 3);
    CU_ASSERT_EQUAL(s.class_ids[2], 9);
    /* train rows 0..9, test from row 11: the guard (distance >= 2r+1 = 3)
     * drops train row 9 (distance 2): 10 pixels; row 8 (distance 3) stays */
    CU_ASSERT_EQUAL(s.n_guard, 10);
    CU_ASSERT_EQUAL(s.counts[0 * 4 + HSI_ROLE_TRAIN] + s.counts[0 * 4 + HSI_ROLE_VAL], 45);
    CU_ASSERT_EQUAL(s.counts[0 * 4 + HSI_ROLE_VAL], 5); /* round(0.1 * 45) = 5 (4.5 up) */
    CU_ASSERT_EQUAL(s.counts[1 * 4 + HSI_ROLE_TEST], 45);
    CU_ASSERT_EQUAL(s.counts[2 * 4 + HSI_ROLE_TEST], 1);
    CU_ASSERT_EQUAL(s.counts[2 * 4 + HSI_ROLE_TRAIN], 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(s.warnings, "class 9 has no training pixel"));
    CU_ASSERT(naive_min_dist(&s, HSI_ROLE_TRAIN, HSI_ROLE_TEST) >= 3);
    hsi_split_free(&s);
    HSI_CHECK_FAILS(hsi_split_explicit(&s, &bad, &te, &p), HSI_ERR_ARG,
                    "line 11, sample 0) is labelled in both");
    hsi_view_release(&tr);
    hsi_view_release(&te);
    hsi_view_release(&bad);
}

static int64_t lab_neg(int64_t y, int64_t x) { return (y == 2 && x == 3) ? -4 : 1; }
static int64_t lab_zero(int64_t y, int64_t x) { return 0; }

static void test_errors(void)
{
    hsi_split s;
    hsi_view neg = make_labels(4, 5, lab_neg), zero = make_labels(4, 5, lab_zero), fl;
    int64_t shape[2] = {4, 5};
    HSI_CHECK_OK(hsi_view_alloc(&fl, HSI_F32, 2, shape, HSI_BUF_HOST));
    HSI_CHECK_FAILS(hsi_split_make(&s, &neg, NULL), HSI_ERR_ARG, "-4 at line 2, sample 3");
    HSI_CHECK_FAILS(hsi_split_make(&s, &zero, NULL), HSI_ERR_ARG, "no labelled pixel");
    HSI_CHECK_FAILS(hsi_split_make(&s, &fl, NULL), HSI_ERR_UNSUPPORTED, "float32");
    hsi_split_params p;
    hsi_split_params_init(&p);
    p.train_fraction = 1.5;
    HSI_CHECK_FAILS(hsi_split_make(&s, &neg, &p), HSI_ERR_ARG, "train_fraction");
    hsi_view_release(&neg);
    hsi_view_release(&zero);
    hsi_view_release(&fl);
}

static void test_json_and_table(void)
{
    hsi_view lab = make_labels(30, 30, lab_at);
    hsi_split_params p;
    hsi_split_params_init(&p);
    p.train_fraction = 0.5;
    hsi_split s;
    HSI_CHECK_OK(hsi_split_make(&s, &lab, &p));
    const char *names[5] = {"a", "b", "c", "d", "e"};
    const char *path = hsi_test_tmp("split.json");
    HSI_CHECK_OK(hsi_split_save_json(&s, path, names, 1));
    char *text = NULL;
    size_t len = 0;
    HSI_CHECK_OK(hsi_read_file(path, &text, &len));
    cJSON *o = cJSON_Parse(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    cJSON *cl = cJSON_GetObjectItem(o, "classes");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cl), 5);
    cJSON *c4 = cJSON_GetArrayItem(cl, 4);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(c4, "label")->valuedouble, 200);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(c4, "name")->valuestring, "e");
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(c4, "train")->valuedouble, (double)s.counts[4 * 4 + 1]);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(c4, "test")->valuedouble, (double)s.counts[4 * 4 + 3]);
    cJSON *ix = cJSON_GetObjectItem(cJSON_GetObjectItem(o, "indices"), "test");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(ix), s.n[HSI_ROLE_TEST]);
    CU_ASSERT_EQUAL(cJSON_GetArrayItem(ix, 3)->valuedouble, (double)s.idx[HSI_ROLE_TEST][3]);
    CU_ASSERT_STRING_EQUAL(
        cJSON_GetObjectItem(cJSON_GetObjectItem(o, "params"), "mode")->valuestring, "random");
    cJSON_Delete(o);
    free(text);
    char *buf = NULL;
    size_t blen = 0;
    FILE *fp = open_memstream(&buf, &blen);
    hsi_split_print(&s, fp, names);
    fclose(fp);
    char want[128];
    snprintf(want, sizeof want, "%5d %8d  %-20s %8lld", 4, 200, "e", (long long)s.counts[4 * 4 + 1]);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, want));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "all"));
    free(buf);
    hsi_split_free(&s);
    hsi_view_release(&lab);
}

HSI_SUITE(pipeline_split, 0, {"random by fraction, val, seeds", test_random_fraction},
          {"random by count, small classes", test_random_count_small_classes},
          {"disjoint global blocks + guard band", test_disjoint_global},
          {"disjoint per-class blocks + guard band", test_disjoint_per_class},
          {"disjoint, random validation", test_disjoint_random_val},
          {"explicit maps + guard", test_explicit}, {"errors", test_errors},
          {"JSON and table", test_json_and_table})

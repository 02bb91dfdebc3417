/* test_spe.c — Princeton SPE 2.x/3.0 reader against the independent numpy
 * reader of tests/fixtures/make_formats_fixtures.py (spe_expected.txt):
 * dimensions, dtype, checksums, wavelengths, exposure; plus malformed files. */
#define _GNU_SOURCE /* memmem */
#include <string.h>

#include "test.h"

#include <cJSON.h>

#include "io/cube.h"
#include "io/spe.h"

#define FIX "tests/fixtures/formats/"

typedef struct spe_expect {
    char name[160];
    int roi;
    long long frames, height, width;
    char dtype[16];
    double sum, wsum, first, last, wl0, wlmid, wllast, exp_ms;
} spe_expect;

/* Reads spe_expected.txt; returns the number of lines (max n). */
static int load_expect(spe_expect *e, int n)
{
    FILE *fp = fopen(FIX "spe_expected.txt", "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    char line[1024];
    int k = 0;
    while (k < n && fgets(line, sizeof line, fp)) {
        if (line[0] == '#') continue;
        spe_expect *x = &e[k];
        if (sscanf(line, "%159s %d %lld %lld %lld %15s %lf %lf %lf %lf %lf %lf %lf %lf", x->name,
                   &x->roi, &x->frames, &x->height, &x->width, x->dtype, &x->sum, &x->wsum,
                   &x->first, &x->last, &x->wl0, &x->wlmid, &x->wllast, &x->exp_ms) == 14)
            k++;
    }
    fclose(fp);
    return k;
}

static double key_double(const hsi_meta *m, const char *key)
{
    const hsi_kv *kv = hsi_meta_find(m, key);
    return kv ? strtod(kv->value, NULL) : NAN;
}

/* Parses the first, middle and last value of the "sample wavelength" key. */
static int key_wavelengths(const hsi_meta *m, int64_t n, double out[3])
{
    const hsi_kv *kv = hsi_meta_find(m, "sample wavelength");
    if (!kv) return 0;
    const char *s = kv->value;
    int64_t i = 0;
    while (*s && i < n) {
        char *end = NULL;
        double d = strtod(s, &end);
        if (end == s) break;
        if (i == 0) out[0] = d;
        if (i == n / 2) out[1] = d;
        if (i == n - 1) out[2] = d;
        i++;
        s = end;
        while (*s == ',' || *s == ' ') s++;
    }
    return i == n;
}

static int check_one(const spe_expect *x, const char *path)
{
    hsi_cube c;
    hsi_spe_options o = {x->roi, 1};
    hsi_status st = hsi_spe_open(&c, path, &o);
    if (st != HSI_OK) {
        fprintf(stderr, "\n  %s: %s\n", path, hsi_last_error());
        CU_FAIL("open failed");
        return 0;
    }
    int bad = 0;
#define EXPECT(cond)                                                           \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "\n  %s roi %d: %s\n", x->name, x->roi, #cond);    \
            bad++;                                                             \
        }                                                                      \
    } while (0)
    EXPECT(c.view.ndim == 3);
    EXPECT(c.view.shape[0] == x->frames && c.view.shape[1] == x->height &&
           c.view.shape[2] == x->width);
    EXPECT(strcmp(hsi_dtype_name(c.view.dtype), x->dtype) == 0);
    EXPECT(c.view.buf->kind == HSI_BUF_MMAP);
    EXPECT(strcmp(c.meta.format, "spe") == 0);
    EXPECT(c.meta.n_bands == x->frames && c.meta.n_lines == x->height &&
           c.meta.n_samples == x->width);
    EXPECT(c.image_index == x->roi && c.n_images >= 1);
    EXPECT(key_double(&c.meta, "frames") == (double)x->frames);
    double sum = 0, wsum = 0;
    int64_t idx[3], flat = 0;
    for (idx[0] = 0; idx[0] < x->frames; idx[0]++)
        for (idx[1] = 0; idx[1] < x->height; idx[1]++)
            for (idx[2] = 0; idx[2] < x->width; idx[2]++, flat++) {
                double v = hsi_view_get_f64(&c.view, idx);
                sum += v;
                wsum += v * (double)(flat % 251);
            }
    EXPECT(fabs(sum - x->sum) <= 1e-9 * fabs(x->sum) + 1e-9);
    EXPECT(fabs(wsum - x->wsum) <= 1e-9 * fabs(x->wsum) + 1e-9);
    idx[0] = idx[1] = idx[2] = 0;
    EXPECT(hsi_view_get_f64(&c.view, idx) == x->first);
    idx[0] = x->frames - 1, idx[1] = x->height - 1, idx[2] = x->width - 1;
    EXPECT(hsi_view_get_f64(&c.view, idx) == x->last);
    double wl[3] = {NAN, NAN, NAN};
    if (isnan(x->wl0)) {
        EXPECT(hsi_meta_find(&c.meta, "sample wavelength") == NULL);
    } else {
        EXPECT(key_wavelengths(&c.meta, x->width, wl));
        EXPECT(fabs(wl[0] - x->wl0) < 1e-5 && fabs(wl[1] - x->wlmid) < 1e-5 &&
               fabs(wl[2] - x->wllast) < 1e-5);
    }
    double e = key_double(&c.meta, "exposure time ms");
    EXPECT(isnan(x->exp_ms) ? isnan(e) : fabs(e - x->exp_ms) < 1e-6);
#undef EXPECT
    hsi_cube_free(&c);
    CU_ASSERT_EQUAL(bad, 0);
    return bad == 0;
}

static void run_expect(int shared)
{
    spe_expect e[64];
    int n = load_expect(e, 64), done = 0;
    for (int k = 0; k < n; k++) {
        int is_shared = strncmp(e[k].name, "spe/", 4) == 0;
        if (is_shared != shared) continue;
        char path[512];
        if (shared) {
            const char *p = hsi_test_shared(e[k].name);
            if (!p) continue;
            snprintf(path, sizeof path, "%s", p);
        } else {
            snprintf(path, sizeof path, FIX "%s", e[k].name);
        }
        done += check_one(&e[k], path);
        /* the content dispatcher finds the same file and region */
        hsi_cube c;
        hsi_open_options o = {NULL, e[k].roi};
        HSI_CHECK_OK(hsi_cube_open(&c, path, &o));
        CU_ASSERT_STRING_EQUAL(c.meta.format, "spe");
        CU_ASSERT_EQUAL(c.view.shape[1], e[k].height);
        CU_ASSERT_EQUAL(c.view.shape[2], e[k].width);
        hsi_cube_free(&c);
    }
    /* 7 synthetic (8 ROIs); 16 real files (19 ROIs) */
    CU_ASSERT_EQUAL(done, shared ? 19 : 8);
}

static void test_synthetic(void) { run_expect(0); }
static void test_real_files(void) { run_expect(1); }

/* Frame stride with per-frame metadata, the ROI offsets, and the metadata. */
static void test_v3_layout(void)
{
    hsi_cube c;
    hsi_spe_options o = {1, 1};
    HSI_CHECK_OK(hsi_spe_open(&c, FIX "synth_v3_meta.spe", &o));
    CU_ASSERT_EQUAL(c.n_images, 2);
    CU_ASSERT_EQUAL(c.view.strides[0], 8 * 2 + 3 * 2 + 16);
    CU_ASSERT_EQUAL(c.view.offset, 4100 + 16);
    int64_t idx[3] = {2, 0, 1};
    CU_ASSERT_EQUAL(hsi_view_get_f64(&c.view, idx), 1000 + 200 + 1);
    const hsi_kv *kv = hsi_meta_find(&c.meta, "roi 1");
    CU_ASSERT_PTR_NOT_NULL_FATAL(kv);
    CU_ASSERT_STRING_EQUAL(kv->value, "3, 1, x 3, y 4, binning 2, 2");
    kv = hsi_meta_find(&c.meta, "frame metadata");
    CU_ASSERT_PTR_NOT_NULL_FATAL(kv);
    CU_ASSERT_STRING_EQUAL(kv->value, "TimeStamp ExposureStarted 64 bit, TimeStamp ExposureEnded 64 bit");
    kv = hsi_meta_find(&c.meta, "software");
    CU_ASSERT_PTR_NOT_NULL_FATAL(kv);
    CU_ASSERT_STRING_EQUAL(kv->value, "Synth 1.0");
    hsi_cube_free(&c);
    o.roi = 2;
    HSI_CHECK_FAILS(hsi_spe_open(&c, FIX "synth_v3_meta.spe", &o), HSI_ERR_ARG, "has 2");
}

/* 0-based pixel numbering shifts the polynomial by one pixel. */
static void test_pixel_base(void)
{
    hsi_cube c;
    hsi_spe_options o = {0, 0};
    HSI_CHECK_OK(hsi_spe_open(&c, FIX "synth_v2_i16.spe", &o));
    double wl[3];
    CU_ASSERT_FATAL(key_wavelengths(&c.meta, 5, wl));
    HSI_ASSERT_NEAR(wl[0], 500.0, 1e-9); /* 500 + 2 p + 0.01 p^2 at p = 0 */
    HSI_ASSERT_NEAR(wl[2], 500.0 + 8.0 + 0.16, 1e-9);
    hsi_cube_free(&c);
}

static uint8_t *slurp(const char *path, size_t *n)
{
    char *t = NULL;
    if (hsi_read_file(path, &t, n) != HSI_OK) return NULL;
    return (uint8_t *)t;
}

static void put_u64(uint8_t *p, size_t o, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[o + (size_t)i] = (uint8_t)(v >> (8 * i));
}

static void test_malformed(void)
{
    size_t n2 = 0, n3 = 0;
    uint8_t *v2 = slurp(FIX "synth_v2_i32.spe", &n2), *v3 = slurp(FIX "synth_v3_meta.spe", &n3);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v3);
    hsi_spe_info s;
    HSI_CHECK_OK(hsi_spe_parse(&s, v2, n2, "v2", 1));
    hsi_spe_info_free(&s);
    char why[512];
    CU_ASSERT_EQUAL(hsi_spe_probe(v2, n2, why, sizeof why), 1);

    /* shorter than a header */
    HSI_CHECK_FAILS(hsi_spe_parse(&s, v2, 4000, "short", 1), HSI_ERR_FORMAT, "4100-byte header");
    CU_ASSERT_EQUAL(hsi_spe_probe(v2, 4000, why, sizeof why), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "size 4000"));
    /* truncated data */
    HSI_CHECK_FAILS(hsi_spe_parse(&s, v2, n2 - 10, "trunc", 1), HSI_ERR_FORMAT,
                    "room for 3 whole frames");
    CU_ASSERT_EQUAL(hsi_spe_probe(v2, n2 - 10, why, sizeof why), 0);
    /* lying header: more frames than the file holds */
    uint8_t *bad = malloc(n3 > n2 ? n3 : n2);
    memcpy(bad, v2, n2);
    bad[1446] = 9;
    HSI_CHECK_FAILS(hsi_spe_parse(&s, bad, n2, "lie", 1), HSI_ERR_FORMAT, "9 frames");
    /* unknown data type */
    memcpy(bad, v2, n2);
    bad[108] = 4;
    HSI_CHECK_FAILS(hsi_spe_parse(&s, bad, n2, "dt", 1), HSI_ERR_FORMAT, "datatype @108 = 4");
    CU_ASSERT_EQUAL(hsi_spe_probe(bad, n2, why, sizeof why), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "datatype @108 = 4"));
    /* zero dims */
    memcpy(bad, v2, n2);
    bad[42] = bad[43] = 0;
    HSI_CHECK_FAILS(hsi_spe_parse(&s, bad, n2, "dims", 1), HSI_ERR_FORMAT, "xdim @42 = 0");

    /* 3.0: footer offset past the end, inside the header, broken XML */
    uint64_t foot = 0;
    for (int i = 7; i >= 0; i--) foot = (foot << 8) | v3[678 + i];
    memcpy(bad, v3, n3);
    put_u64(bad, 678, n3 + 100);
    HSI_CHECK_FAILS(hsi_spe_parse(&s, bad, n3, "past", 1), HSI_ERR_FORMAT, "past the end");
    CU_ASSERT_EQUAL(hsi_spe_probe(bad, n3, why, sizeof why), 0);
    put_u64(bad, 678, 100);
    HSI_CHECK_FAILS(hsi_spe_parse(&s, bad, n3, "inside", 1), HSI_ERR_FORMAT, "inside the");
    memcpy(bad, v3, n3);
    bad[n3 - 3] = '!'; /* </SpeFormat> -> </SpeFor!at> */
    HSI_CHECK_FAILS(hsi_spe_parse(&s, bad, n3, "xml", 1), HSI_ERR_FORMAT, "not well-formed XML");
    /* footer moved earlier: the frames no longer fit before it */
    memcpy(bad, v3, n3);
    put_u64(bad, 678, foot - 40);
    memmove(bad + foot - 40, v3 + foot, n3 - foot);
    HSI_CHECK_FAILS(hsi_spe_parse(&s, bad, n3 - 40, "fit", 1), HSI_ERR_FORMAT,
                    "XML footer starts at byte");
    /* truncated footer */
    HSI_CHECK_FAILS(hsi_spe_parse(&s, v3, n3 - 200, "cut", 1), HSI_ERR_FORMAT, "XML");
    /* a region wider than its stride */
    memcpy(bad, v3, n3);
    char *w = strstr((char *)bad + foot, "width=\"4\"");
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    w[7] = '9';
    HSI_CHECK_FAILS(hsi_spe_parse(&s, bad, n3, "stride", 1), HSI_ERR_FORMAT, "stride");
    /* no frames: XML count 0 */
    memcpy(bad, v3, n3);
    w = strstr((char *)bad + foot, "count=\"3\"");
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    w[7] = '0';
    HSI_CHECK_FAILS(hsi_spe_parse(&s, bad, n3, "count", 1), HSI_ERR_FORMAT, "count");
    /* the same through the file API: error names the file */
    const char *tp = hsi_test_tmp("bad.spe");
    FILE *fp = fopen(tp, "wb");
    fwrite(v2, 1, n2 - 10, fp);
    fclose(fp);
    hsi_cube c;
    HSI_CHECK_FAILS(hsi_spe_open(&c, tp, NULL), HSI_ERR_FORMAT, "bad.spe");
    free(bad);
    free(v2);
    free(v3);
}

static void put_f64(uint8_t *p, size_t o, double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    put_u64(p, o, u);
}

static int info_warned(const hsi_spe_info *s, const char *words)
{
    for (int i = 0; i < s->n_warnings; i++)
        if (strstr(s->warnings[i], words)) return 1;
    return 0;
}

static int meta_warned(const hsi_meta *m, const char *words)
{
    for (int i = 0; i < m->n_warnings; i++)
        if (strstr(m->warnings[i], words)) return 1;
    return 0;
}

/* synth_v3_meta.spe with its <Wavelength> text replaced: header and frames
 * kept, the footer rebuilt after them. *n: the new size. */
static uint8_t *v3_with_wavelengths(const uint8_t *v3, size_t n3, const char *list, size_t *n)
{
    uint64_t foot = 0;
    for (int i = 7; i >= 0; i--) foot = (foot << 8) | v3[678 + i];
    const char *xml = (const char *)v3 + foot;
    const char *a = strstr(xml, "<Wavelength xml:space=\"preserve\">");
    const char *b = a ? strstr(a, "</Wavelength>") : NULL;
    if (!a || !b) return NULL;
    a += strlen("<Wavelength xml:space=\"preserve\">");
    size_t head = (size_t)(a - (const char *)v3), tail = n3 - (size_t)(b - (const char *)v3);
    *n = head + strlen(list) + tail;
    uint8_t *o = malloc(*n);
    memcpy(o, v3, head);
    memcpy(o + head, list, strlen(list));
    memcpy(o + head + strlen(list), b, tail);
    return o;
}

static int write_file(const char *path, const uint8_t *d, size_t n)
{
    FILE *fp = fopen(path, "wb");
    if (!fp) return 0;
    int ok = fwrite(d, 1, n, fp) == n;
    return fclose(fp) == 0 && ok;
}

/* Calibrations that cannot give wavelengths are warned, naming the counts
 * or the value, and give none (never NaN, never silently nothing). */
static void test_bad_calibration(void)
{
    size_t n2 = 0, n3 = 0, n = 0;
    uint8_t *v2 = slurp(FIX "synth_v2_i16.spe", &n2), *v3 = slurp(FIX "synth_v3_meta.spe", &n3);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v3);
    hsi_spe_info s;
    hsi_cube c;

    /* 3.0: 2 wavelengths for regions of 4 (sensor x 1) and 3 (x 3, binning 2) */
    uint8_t *w = v3_with_wavelengths(v3, n3, "400.0,401.0", &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    HSI_CHECK_OK(hsi_spe_parse(&s, w, n, "two.spe", 1));
    CU_ASSERT_PTR_NULL(s.rois[0].wavelength);
    CU_ASSERT_PTR_NULL(s.rois[1].wavelength);
    CU_ASSERT(info_warned(&s, "two.spe: the XML <Wavelength> list has 2 values, region 0 needs 5 "
                              "(sensor x 1 + width 4 x binning 1) or exactly its width 4"));
    CU_ASSERT(info_warned(&s, "has 2 values, region 1 needs 9 (sensor x 3 + width 3 x binning 2)"));
    hsi_spe_info_free(&s);
    const char *tp = hsi_test_tmp("two_wl.spe");
    CU_ASSERT_FATAL(write_file(tp, w, n));
    hsi_set_quiet(1);
    HSI_CHECK_OK(hsi_spe_open(&c, tp, NULL));
    hsi_set_quiet(0);
    CU_ASSERT_PTR_NULL(hsi_meta_find(&c.meta, "sample wavelength"));
    CU_ASSERT(meta_warned(&c.meta, "two_wl.spe: the XML <Wavelength> list has 2 values, region 0"));
    hsi_cube_free(&c);
    free(w);
    /* exactly a region's width is used as is; the other region is warned */
    w = v3_with_wavelengths(v3, n3, "500,501,502", &n);
    HSI_CHECK_OK(hsi_spe_parse(&s, w, n, "three.spe", 1));
    CU_ASSERT_PTR_NULL(s.rois[0].wavelength);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s.rois[1].wavelength);
    CU_ASSERT_EQUAL(s.rois[1].wavelength[2], 502);
    CU_ASSERT_EQUAL(s.n_warnings, 1);
    hsi_spe_info_free(&s);
    free(w);

    /* 3.0: a NaN (or inf, or 1e400) in the list: no wavelengths, warned */
    const char *bad_lists[] = {"400,400.5,NaN,401.5,402,402.5,403,403.5,404,404.5",
                               "400,400.5,401,401.5,inf,402.5,403,403.5,404,404.5",
                               "400,400.5,401,401.5,402,402.5,403,403.5,404,1e400"};
    const char *bad_pos[] = {"value 3 (of 10) is nan", "value 5 (of 10) is inf",
                             "value 10 (of 10) is inf"};
    for (int i = 0; i < 3; i++) {
        w = v3_with_wavelengths(v3, n3, bad_lists[i], &n);
        HSI_CHECK_OK(hsi_spe_parse(&s, w, n, "nan.spe", 1));
        CU_ASSERT_PTR_NULL(s.rois[0].wavelength);
        CU_ASSERT_PTR_NULL(s.rois[1].wavelength);
        CU_ASSERT(info_warned(&s, bad_pos[i]));
        CU_ASSERT(info_warned(&s, "not a finite wavelength: the calibration is not used"));
        hsi_spe_info_free(&s);
        free(w);
    }

    /* 2.x: a NaN polynomial coefficient in a calibration marked valid */
    uint8_t *b = malloc(n2);
    memcpy(b, v2, n2);
    put_f64(b, 3000 + 263 + 8, NAN);
    HSI_CHECK_OK(hsi_spe_parse(&s, b, n2, "nan2.spe", 1));
    CU_ASSERT_PTR_NULL(s.rois[0].wavelength);
    CU_ASSERT(info_warned(&s, "nan2.spe: the x calibration @3000 is marked valid (@3098) but "
                              "coefficient 1 @3271 is nan, not a finite number"));
    hsi_spe_info_free(&s);
    tp = hsi_test_tmp("nan2.spe");
    CU_ASSERT_FATAL(write_file(tp, b, n2));
    hsi_set_quiet(1);
    HSI_CHECK_OK(hsi_spe_open(&c, tp, NULL));
    hsi_set_quiet(0);
    CU_ASSERT_PTR_NULL(hsi_meta_find(&c.meta, "sample wavelength"));
    CU_ASSERT_PTR_NULL(hsi_meta_find(&c.meta, "x calibration")); /* no NaN kept */
    CU_ASSERT(meta_warned(&c.meta, "coefficient 1 @3271 is nan"));
    hsi_cube_free(&c);
    /* finite coefficients whose polynomial overflows */
    memcpy(b, v2, n2);
    put_f64(b, 3000 + 263 + 16, 1e308);
    HSI_CHECK_OK(hsi_spe_parse(&s, b, n2, "big.spe", 1));
    CU_ASSERT_PTR_NULL(s.rois[0].wavelength);
    CU_ASSERT(info_warned(&s, "big.spe: the x calibration @3000 gives inf at pixel 2"));
    hsi_spe_info_free(&s);
    /* marked valid with an order outside 1..5 */
    memcpy(b, v2, n2);
    b[3000 + 101] = 9;
    HSI_CHECK_OK(hsi_spe_parse(&s, b, n2, "order.spe", 1));
    CU_ASSERT_PTR_NULL(s.rois[0].wavelength);
    CU_ASSERT(info_warned(&s, "its polynomial order @3101 is 9 (expected 1..5)"));
    hsi_spe_info_free(&s);
    /* the good file: wavelengths, no warning */
    HSI_CHECK_OK(hsi_spe_parse(&s, v2, n2, "good.spe", 1));
    CU_ASSERT_PTR_NOT_NULL(s.rois[0].wavelength);
    CU_ASSERT_EQUAL(s.n_warnings, 0);
    hsi_spe_info_free(&s);
    free(b);
    free(v2);
    free(v3);
}

/* A 3.0 footer offset inside the header: the content sniffer and the
 * dispatcher say so (not "xdim @42 = 0 ...": a 3.0 file has zero dims). */
static void test_footer_inside_header(void)
{
    size_t n3 = 0;
    uint8_t *v3 = slurp(FIX "synth_v3_meta.spe", &n3);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v3);
    put_u64(v3, 678, 100);
    v3[42] = v3[43] = v3[656] = v3[657] = 0; /* as LightField writes multi-ROI files */
    char why[512];
    CU_ASSERT_EQUAL(hsi_spe_probe(v3, n3, why, sizeof why), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "the XML footer offset @678 = 100 points inside the "
                                       "4100-byte header"));
    CU_ASSERT_PTR_NULL(strstr(why, "xdim"));
    hsi_spe_info s;
    HSI_CHECK_FAILS(hsi_spe_parse(&s, v3, n3, "inside.spe", 1), HSI_ERR_FORMAT,
                    "inside.spe: SPE 3.0 XML footer offset @678 = 100 points inside the "
                    "4100-byte header");
    const char *tp = hsi_test_tmp("inside.spe");
    CU_ASSERT_FATAL(write_file(tp, v3, n3));
    hsi_cube c;
    HSI_CHECK_FAILS(hsi_cube_open(&c, tp, NULL), HSI_ERR_FORMAT,
                    "footer offset @678 = 100 points inside the 4100-byte header");
    CU_ASSERT_PTR_NULL(strstr(hsi_last_error(), "xdim"));
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "inside.spe"));
    free(v3);
}

/* info --json: frames and regions typed, as the parser read them; the text
 * form names the per-sample calibration instead of "none". */
static void test_info_typed(void)
{
    size_t n = 0;
    uint8_t *raw = slurp(FIX "synth_v3_meta.spe", &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(raw);
    hsi_spe_info s;
    HSI_CHECK_OK(hsi_spe_parse(&s, raw, n, "synth_v3_meta.spe", 1));
    static char out[1 << 16];
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, "{ " HSI_BIN " info " FIX "synth_v3_meta.spe --json 2>/dev/null; }"), 0);
    cJSON *j = cJSON_Parse(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(j, "frames")->valueint, s.n_frames);
    cJSON *ra = cJSON_GetObjectItem(j, "rois");
    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(ra), s.n_rois);
    for (int r = 0; r < s.n_rois; r++) {
        cJSON *q = cJSON_GetArrayItem(ra, r);
        CU_ASSERT_EQUAL(cJSON_GetObjectItem(q, "width")->valueint, s.rois[r].width);
        CU_ASSERT_EQUAL(cJSON_GetObjectItem(q, "height")->valueint, s.rois[r].height);
        CU_ASSERT_EQUAL(cJSON_GetObjectItem(q, "x")->valueint, s.rois[r].x);
        CU_ASSERT_EQUAL(cJSON_GetObjectItem(q, "y")->valueint, s.rois[r].y);
        CU_ASSERT_EQUAL(cJSON_GetObjectItem(q, "x_binning")->valueint, s.rois[r].x_binning);
        CU_ASSERT_EQUAL(cJSON_GetObjectItem(q, "y_binning")->valueint, s.rois[r].y_binning);
    }
    int calibrated = s.rois[0].wavelength != NULL;
    cJSON_Delete(j);
    hsi_spe_info_free(&s);
    free(raw);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " info " FIX "synth_v3_meta.spe"), 0);
    if (calibrated) CU_ASSERT_PTR_NOT_NULL(strstr(out, "per sample (SPE calibration)"));
}

/* An XML footer in an encoding it does not hold: libxml2 reports through
 * its generic handler even with NOERROR; nothing of it reaches stderr
 * (the library prints nothing but its own warnings). */
static void test_xml_encoding_quiet(void)
{
    size_t n = 0;
    uint8_t *raw = slurp(FIX "synth_v3_meta.spe", &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(raw);
    const char *decl = "<?xml version=\"1.0\" encoding=\"utf-8\"?>", *bad = "<?xml version=\"1.0\" encoding=\"ISO-2022-JP\"?>";
    uint8_t *x = memmem(raw, n, decl, strlen(decl));
    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    const char *path = hsi_test_tmp("enc.spe");
    FILE *fp = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    fwrite(raw, 1, (size_t)(x - raw), fp);
    fputs(bad, fp);
    fwrite(x + strlen(decl), 1, n - (size_t)(x - raw) - strlen(decl), fp);
    fwrite("\x1b\x24\x42\xff\xfe", 1, 5, fp);
    fclose(fp);
    free(raw);
    static char out[1 << 15];
    hsi_test_run(out, sizeof out, HSI_BIN " info %s", path);
    CU_ASSERT_PTR_NULL(strstr(out, "encoding error"));
    CU_ASSERT_PTR_NULL(strstr(out, "I/O error"));
}

HSI_SUITE(spe, 0, {"synthetic 2.x/3.0 files vs numpy reader", test_synthetic},
          {"3.0 frame stride, ROI offsets, metadata", test_v3_layout},
          {"pixel numbering base", test_pixel_base}, {"malformed files", test_malformed},
          {"unusable calibrations warned, none kept", test_bad_calibration},
          {"3.0 footer offset inside the header", test_footer_inside_header},
          {"info --json: typed frames and regions", test_info_typed},
          {"libxml2's encoding errors do not reach stderr", test_xml_encoding_quiet})
HSI_SUITE(spe_shared, HSI_SUITE_NEEDS_SHARED, {"16 real SPE files vs numpy reader", test_real_files})

/* test_envi.c — ENVI header syntax, typed metadata, data/header finding,
 * gzip, frame offsets, size checks and writer round trips. Expected file
 * bytes are encoded here element by element from the index formula (own
 * little encoder below), never by the code under test. */
#define _GNU_SOURCE
#include "test.h"

#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "io/envi.h"

/* ---------------------------------------------------------- helpers */

static void write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    fputs(text, fp);
    fclose(fp);
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *fp = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    CU_ASSERT_EQUAL(fwrite(p, 1, n, fp), n);
    fclose(fp);
}

static int has_warning(const hsi_meta *m, const char *needle)
{
    for (int i = 0; i < m->n_warnings; i++)
        if (strstr(m->warnings[i], needle)) return 1;
    return 0;
}

static hsi_status parse_str(hsi_meta *m, const char *text)
{
    return hsi_envi_parse(m, text, strlen(text), "test.hdr");
}

/* A fresh empty directory under the test tmpdir. */
static const char *fresh_dir(const char *name)
{
    const char *d = hsi_test_tmp(name);
    mkdir(d, 0755);
    return d;
}

static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    if (!d) return -1;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

/* ---------------------------------------------------------- syntax */

static const char *tricky =
    "ENVI\r\n"
    "; a comment = not a key\r\n"
    "Description = {first line\r\n"
    "  second = line with equals}\r\n"
    "SAMPLES = 5\r\n"
    "  lines   = 4\r\n"
    "Bands= 3\r\n"
    "header offset = 16\r\n"
    "data type = 12\r\n"
    "Interleave = Bil\r\n"
    "byte  order = 1\r\n"
    "wavelength units =\r\n"
    "vendor key = a = b\r\n"
    "wavelength = {\r\n"
    "0.4\r\n"
    "; comment inside braces, 99\r\n"
    ",0.5\r\n"
    ",0.6}\r\n"
    "empty list = {}\r\n"
    "zzz = last\r\n";

static void test_parse_syntax(void)
{
    hsi_meta m;
    HSI_CHECK_OK(parse_str(&m, tricky));
    CU_ASSERT_EQUAL(m.n_samples, 5);
    CU_ASSERT_EQUAL(m.n_lines, 4);
    CU_ASSERT_EQUAL(m.n_bands, 3);
    CU_ASSERT_EQUAL(m.header_offset, 16);
    CU_ASSERT_EQUAL(m.dtype, HSI_U16);
    CU_ASSERT_EQUAL(m.interleave, HSI_BIL); /* SPy reads 'Bil' as BSQ */
    CU_ASSERT_EQUAL(m.byte_order, 1);
    CU_ASSERT_STRING_EQUAL(m.description, "first line\n  second = line with equals");
    /* comment line inside the braces skipped; leading commas */
    CU_ASSERT_PTR_NOT_NULL_FATAL(m.wavelength);
    /* empty units: guessed as micrometers from the range, converted */
    CU_ASSERT_EQUAL(m.wavelength_nm, 1);
    HSI_ASSERT_NEAR(m.wavelength[0], 400, 0);
    HSI_ASSERT_NEAR(m.wavelength[2], 600, 0);
    CU_ASSERT(has_warning(&m, "micrometers"));
    /* verbatim keys: in order, original spelling, split at the first '=' */
    CU_ASSERT_EQUAL_FATAL(m.n_keys, 13);
    CU_ASSERT_STRING_EQUAL(m.keys[0].key, "Description");
    CU_ASSERT_EQUAL(m.keys[0].braced, 1);
    CU_ASSERT_STRING_EQUAL(m.keys[1].key, "SAMPLES");
    const hsi_kv *kv = hsi_meta_find(&m, "vendor key");
    CU_ASSERT_PTR_NOT_NULL_FATAL(kv);
    CU_ASSERT_STRING_EQUAL(kv->value, "a = b");
    kv = hsi_meta_find(&m, "wavelength units");
    CU_ASSERT_PTR_NOT_NULL_FATAL(kv);
    CU_ASSERT_STRING_EQUAL(kv->value, "");
    CU_ASSERT_STRING_EQUAL(m.keys[12].key, "zzz");
    CU_ASSERT_PTR_NULL(hsi_meta_find(&m, "; a comment"));
    CU_ASSERT_STRING_EQUAL(m.format, "envi");
    hsi_meta_free(&m);
}

static void test_parse_vendor_and_defaults(void)
{
    hsi_meta m;
    /* a vendor string instead of ENVI, no byte order, no header offset */
    HSI_CHECK_OK(parse_str(&m, "Camera XYZ v2 header\nsamples = 2\nlines = 3\nbands = 4\n"
                               "data type = 4\ninterleave = bip\n"));
    CU_ASSERT(has_warning(&m, "not 'ENVI'"));
    CU_ASSERT(has_warning(&m, "little-endian"));
    CU_ASSERT_EQUAL(m.byte_order, 0);
    CU_ASSERT_EQUAL(m.header_offset, 0);
    CU_ASSERT_EQUAL(m.interleave, HSI_BIP);
    CU_ASSERT_EQUAL(m.file_kind, HSI_FILE_STANDARD);
    CU_ASSERT_PTR_NULL(m.file_type);
    hsi_meta_free(&m);
    /* duplicated key: the last wins, with a warning */
    HSI_CHECK_OK(parse_str(&m, "ENVI\nsamples = 2\nlines = 3\nbands = 4\nsamples = 7\n"
                               "data type = 1\ninterleave = bsq\nbyte order = 0\n"));
    CU_ASSERT_EQUAL(m.n_samples, 7);
    CU_ASSERT(has_warning(&m, "appears again"));
    hsi_meta_free(&m);
}

static const char *rich =
    "ENVI\n"
    "description = {A rich header}\n"
    "samples = 4\nlines = 3\nbands = 3\n"
    "header offset = 0\n"
    "file type = ENVI Classification\n"
    "data type = 1\ninterleave = bsq\nbyte order = 0\n"
    "sensor type = Unknown\n"
    "wavelength units = Micrometers\n"
    "wavelength = {0.46, 0.465, 2.5}\n"
    "fwhm = {0.01, 0.01, 0.02}\n"
    "bbl = {1, 0, 1.0}\n"
    "band names = {Red, Green, Blue}\n"
    "data ignore value = -99\n"
    "data gain values = {1.5, 2, 2.5}\n"
    "data offset values = {0, -1, 1e-3}\n"
    "reflectance scale factor = 10000\n"
    "default bands = {3, 2, 1}\n"
    "map info = { UTM , 1.000 , 1.000 , 736600.089 , 4078126.750 , 2.7e+00 , 2.7e+00 , 12 , "
    "South , WGS-84 , units=Meters , rotation=-66.00000000}\n"
    "coordinate system string = {PROJCS[\"UTM_Zone_12N\",GEOGCS[\"GCS_WGS_1984\"]]}\n"
    "x start = 100\ny start = 24\n"
    "classes = 3\n"
    "class names = {Unclassified, Water, Trees}\n"
    "class lookup = {0, 0, 0, 0, 0, 255, 0, 128, 0}\n"
    "major frame offsets = {0, 0}\n"
    "acquisition time = 2009-08-20T09:44:50\n"
    "z plot titles = {wavelength [!7l!3m]!N, reflectance [*10000]}\n";

static void check_rich(const hsi_meta *m)
{
    CU_ASSERT_EQUAL(m->file_kind, HSI_FILE_CLASSIFICATION);
    CU_ASSERT_EQUAL_FATAL(m->wavelength_nm, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m->wavelength);
    CU_ASSERT_EQUAL(m->wavelength[0], 460); /* exact: snapped, not 460.00000000000006 */
    CU_ASSERT_EQUAL(m->wavelength[1], 465);
    CU_ASSERT_EQUAL(m->wavelength[2], 2500);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m->fwhm);
    CU_ASSERT_EQUAL(m->fwhm[2], 20);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m->bbl);
    CU_ASSERT(m->bbl[0] == 1 && m->bbl[1] == 0 && m->bbl[2] == 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m->band_names);
    CU_ASSERT_STRING_EQUAL(m->band_names[2], "Blue");
    CU_ASSERT(m->has_ignore_value && m->ignore_value == -99);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m->gain);
    CU_ASSERT(m->gain[0] == 1.5 && m->gain[2] == 2.5);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m->offset);
    CU_ASSERT(m->offset[1] == -1 && m->offset[2] == 1e-3);
    CU_ASSERT(m->has_reflectance_scale && m->reflectance_scale == 10000);
    CU_ASSERT_EQUAL(m->n_default_bands, 3);
    CU_ASSERT(m->default_bands[0] == 2 && m->default_bands[2] == 0);
    const hsi_map_info *mi = &m->map_info;
    CU_ASSERT_EQUAL(mi->valid, 1);
    CU_ASSERT_STRING_EQUAL(mi->projection, "UTM");
    CU_ASSERT(mi->ref_x == 1 && mi->ref_y == 1 && mi->easting == 736600.089 &&
              mi->northing == 4078126.750 && mi->x_size == 2.7 && mi->y_size == 2.7);
    CU_ASSERT_EQUAL(mi->zone, 12);
    CU_ASSERT_EQUAL(mi->north, 0);
    CU_ASSERT_STRING_EQUAL(mi->datum, "WGS-84");
    CU_ASSERT_STRING_EQUAL(mi->units, "Meters");
    CU_ASSERT_EQUAL(mi->rotation, -66);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m->coordinate_system);
    CU_ASSERT_STRING_EQUAL(m->coordinate_system, "PROJCS[\"UTM_Zone_12N\",GEOGCS[\"GCS_WGS_1984\"]]");
    CU_ASSERT_STRING_EQUAL(m->description, "A rich header");
    CU_ASSERT(m->has_x_start && m->x_start == 100 && m->has_y_start && m->y_start == 24);
    CU_ASSERT_EQUAL_FATAL(m->n_classes, 3);
    CU_ASSERT_STRING_EQUAL(m->class_names[1], "Water");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m->class_lookup);
    CU_ASSERT(m->class_lookup[5] == 255 && m->class_lookup[7] == 128);
    const hsi_kv *kv = hsi_meta_find(m, "acquisition time");
    CU_ASSERT(kv && !strcmp(kv->value, "2009-08-20T09:44:50"));
    kv = hsi_meta_find(m, "z plot titles");
    CU_ASSERT(kv && kv->braced && !strcmp(kv->value, "wavelength [!7l!3m]!N, reflectance [*10000]"));
}

static void test_parse_typed(void)
{
    hsi_meta m;
    HSI_CHECK_OK(parse_str(&m, rich));
    check_rich(&m);
    CU_ASSERT_EQUAL(m.n_warnings, 0);
    hsi_meta_free(&m);
    /* speclib: wavelength per sample is the normal form, kept as text */
    HSI_CHECK_OK(parse_str(&m, "ENVI\nsamples = 3\nlines = 2\nbands = 1\ndata type = 5\n"
                               "interleave = bsq\nbyte order = 0\n"
                               "file type = ENVI Spectral Library\n"
                               "wavelength = {1, 2, 3}\nspectra names = {a, b}\n"));
    CU_ASSERT_EQUAL(m.file_kind, HSI_FILE_SPECLIB);
    CU_ASSERT_PTR_NULL(m.wavelength);
    CU_ASSERT_EQUAL(m.n_warnings, 0);
    CU_ASSERT_PTR_NOT_NULL(hsi_meta_find(&m, "wavelength"));
    hsi_meta_free(&m);
    /* per-band list with the wrong count: warned, not used */
    HSI_CHECK_OK(parse_str(&m, "ENVI\nsamples = 3\nlines = 2\nbands = 2\ndata type = 5\n"
                               "interleave = bsq\nbyte order = 0\nfwhm = {1,2,3}\n"));
    CU_ASSERT_PTR_NULL(m.fwhm);
    CU_ASSERT(has_warning(&m, "'fwhm' has 3 values for 2 bands"));
    hsi_meta_free(&m);
    /* a list of 300000 commas: counted, not split into 300001 strings */
    const char *head = "ENVI\nsamples = 3\nlines = 2\nbands = 2\ndata type = 5\n"
                       "interleave = bsq\nbyte order = 0\nband names = {";
    size_t nh = strlen(head), nc = 300000;
    char *big = malloc(nh + nc + 3);
    memcpy(big, head, nh);
    memset(big + nh, ',', nc);
    memcpy(big + nh + nc, "}\n", 3);
    HSI_CHECK_OK(hsi_envi_parse(&m, big, nh + nc + 2, "commas.hdr"));
    CU_ASSERT_PTR_NULL(m.band_names);
    CU_ASSERT(has_warning(&m, "'band names' has 300000 names for 2 bands"));
    hsi_meta_free(&m);
    free(big);
}

/* ------------------------------------------------ element encoding */

/* Test value at (b, y, x): small integers that every dtype holds exactly;
 * negative for signed types; complex gets an imaginary part. */
static double val_re(hsi_dtype dt, int64_t b, int64_t y, int64_t x)
{
    double v = (double)(b * 20 + y * 5 + x);
    if (hsi_dtype_is_signed(dt) || hsi_dtype_is_float(dt) || hsi_dtype_is_complex(dt)) v -= 30;
    if (hsi_dtype_is_float(dt) || hsi_dtype_is_complex(dt)) v += 0.25;
    return v;
}
static double val_im(int64_t b, int64_t y, int64_t x) { return (double)(x - y) * 0.5 + b; }

/* Encodes one element into out in the given byte order (independent of
 * hsi_convert: integer and IEEE bit patterns assembled here). */
static void encode(uint8_t *out, hsi_dtype dt, double re, double im, int big)
{
    uint8_t le[16];
    size_t n = hsi_dtype_size(dt), part = hsi_dtype_is_complex(dt) ? n / 2 : n;
    double comp[2] = {re, im};
    for (int c = 0; c < (hsi_dtype_is_complex(dt) ? 2 : 1); c++) {
        uint64_t bits = 0;
        double v = comp[c];
        switch (dt) {
        case HSI_U8: case HSI_U16: case HSI_U32: case HSI_U64: bits = (uint64_t)v; break;
        case HSI_I16: case HSI_I32: case HSI_I64: bits = (uint64_t)(int64_t)v; break;
        case HSI_F32: case HSI_C64: {
            float f = (float)v;
            uint32_t u;
            memcpy(&u, &f, 4);
            bits = u;
            break;
        }
        default: memcpy(&bits, &v, 8); break;
        }
        for (size_t k = 0; k < part; k++) le[c * part + k] = (uint8_t)(bits >> (8 * k));
    }
    for (size_t c = 0; c < n / part; c++)
        for (size_t k = 0; k < part; k++)
            out[c * part + k] = big ? le[c * part + part - 1 - k] : le[c * part + k];
}

static const hsi_dtype all_dtypes[] = {HSI_U8,  HSI_I16, HSI_I32, HSI_F32, HSI_F64, HSI_C64,
                                       HSI_C128, HSI_U16, HSI_U32, HSI_I64, HSI_U64};
#define N_DT ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))

/* Source cube (B, L, S) of dtype dt stored in a BIP-like order (not the
 * view order) so the writer sees a non-packed view; swapped on request. */
static hsi_view make_source(hsi_dtype dt, int64_t B, int64_t L, int64_t S, int swapped)
{
    size_t e = hsi_dtype_size(dt);
    hsi_buffer *buf = NULL;
    hsi_buffer_alloc(&buf, (size_t)(B * L * S) * e + 3, HSI_BUF_HOST);
    uint8_t *base = (uint8_t *)buf->data + 3;
    int big_store = hsi_host_is_little_endian() ? swapped : !swapped;
    for (int64_t b = 0; b < B; b++)
        for (int64_t y = 0; y < L; y++)
            for (int64_t x = 0; x < S; x++)
                encode(base + ((y * S + x) * B + b) * e, dt, val_re(dt, b, y, x),
                       val_im(b, y, x), big_store);
    int64_t shape[3] = {B, L, S};
    int64_t strides[3] = {(int64_t)e, (int64_t)(S * B * e), (int64_t)(B * e)};
    hsi_view v;
    memset(&v, 0, sizeof v);
    hsi_view_make(&v, buf, 3, dt, 3, shape, strides, swapped);
    hsi_buffer_release(buf);
    return v;
}

/* Expected data file bytes for a cube written with these options. */
static uint8_t *expected_file(hsi_dtype dt, hsi_interleave il, int big, int64_t off, int64_t B,
                              int64_t L, int64_t S, size_t *n)
{
    size_t e = hsi_dtype_size(dt);
    *n = (size_t)off + (size_t)(B * L * S) * e;
    uint8_t *p = calloc(1, *n);
    for (int64_t b = 0; b < B; b++)
        for (int64_t y = 0; y < L; y++)
            for (int64_t x = 0; x < S; x++) {
                int64_t i = il == HSI_BSQ   ? (b * L + y) * S + x
                            : il == HSI_BIL ? (y * B + b) * S + x
                                            : (y * S + x) * B + b;
                encode(p + off + (size_t)i * e, dt, val_re(dt, b, y, x), val_im(b, y, x), big);
            }
    return p;
}

static int file_equals(const char *path, const uint8_t *want, size_t n)
{
    char *got = NULL;
    size_t len = 0;
    if (hsi_read_file(path, &got, &len) != HSI_OK) return 0;
    int ok = len == n && !memcmp(got, want, n);
    free(got);
    return ok;
}

/* ------------------------------------------------------ round trips */

static void test_roundtrip_matrix(void)
{
    const int64_t B = 3, L = 4, S = 5;
    const char *dir = fresh_dir("rt");
    int combos = 0, bad_bytes = 0, bad_values = 0;
    for (int d = 0; d < N_DT; d++)
        for (int il = 0; il < 3; il++)
            for (int big = 0; big < 2; big++)
                for (int oi = 0; oi < 2; oi++) {
                    hsi_dtype dt = all_dtypes[d];
                    int64_t off = oi ? 37 : 0;
                    char hdr[4096], dat[4096];
                    snprintf(hdr, sizeof hdr, "%s/c%d_%d_%d_%d.hdr", dir, d, il, big, oi);
                    snprintf(dat, sizeof dat, "%s/c%d_%d_%d_%d.img", dir, d, il, big, oi);
                    /* source in the other byte order half of the time */
                    hsi_view src = make_source(dt, B, L, S, (d + il + big) & 1);
                    hsi_envi_write_options o;
                    hsi_envi_write_options_init(&o);
                    o.interleave = (hsi_interleave)il;
                    o.byte_order = big;
                    o.header_offset = off;
                    o.data_ext = ".img";
                    HSI_CHECK_OK(hsi_envi_write(hdr, &src, NULL, &o));
                    size_t n;
                    uint8_t *want = expected_file(dt, (hsi_interleave)il, big, off, B, L, S, &n);
                    if (!file_equals(dat, want, n)) {
                        bad_bytes++;
                        fprintf(stderr, "\n  bytes differ: %s %s big=%d off=%lld\n",
                                hsi_dtype_name(dt), hsi_interleave_name((hsi_interleave)il),
                                big, (long long)off);
                    }
                    free(want);
                    /* read back through the header */
                    hsi_cube c;
                    HSI_CHECK_OK(hsi_envi_open(&c, hdr));
                    CU_ASSERT_EQUAL(c.meta.dtype, dt);
                    CU_ASSERT_EQUAL(c.meta.interleave, (hsi_interleave)il);
                    CU_ASSERT_EQUAL(c.meta.byte_order, big);
                    CU_ASSERT_EQUAL(c.meta.header_offset, off);
                    CU_ASSERT_EQUAL(c.meta.n_warnings, 0);
                    CU_ASSERT_EQUAL(c.view.buf->kind, HSI_BUF_MMAP);
                    int64_t idx[3];
                    for (idx[0] = 0; idx[0] < B; idx[0]++)
                        for (idx[1] = 0; idx[1] < L; idx[1]++)
                            for (idx[2] = 0; idx[2] < S; idx[2]++)
                                if (hsi_view_get_f64(&c.view, idx) !=
                                    val_re(dt, idx[0], idx[1], idx[2]))
                                    bad_values++;
                    hsi_cube_free(&c);
                    hsi_view_release(&src);
                    unlink(hdr);
                    unlink(dat);
                    combos++;
                }
    CU_ASSERT_EQUAL(combos, N_DT * 3 * 2 * 2);
    CU_ASSERT_EQUAL(bad_bytes, 0);
    CU_ASSERT_EQUAL(bad_values, 0);
    CU_ASSERT_EQUAL(count_files(dir), 0); /* no temporary left behind */
}

/* Conversion on write: uint16 source -> every real dtype, exact values. */
static void test_write_convert(void)
{
    const int64_t B = 2, L = 3, S = 4;
    hsi_view src = make_source(HSI_U16, B, L, S, 1);
    const char *hdr = hsi_test_tmp("conv.hdr");
    for (int d = 0; d < N_DT; d++) {
        hsi_dtype dt = all_dtypes[d];
        hsi_envi_write_options o;
        hsi_envi_write_options_init(&o);
        o.dtype = dt;
        o.interleave = HSI_BIP;
        HSI_CHECK_OK(hsi_envi_write(hdr, &src, NULL, &o));
        hsi_cube c;
        HSI_CHECK_OK(hsi_envi_open(&c, hdr));
        CU_ASSERT_EQUAL(c.meta.dtype, dt);
        int bad = 0;
        int64_t idx[3];
        for (idx[0] = 0; idx[0] < B; idx[0]++)
            for (idx[1] = 0; idx[1] < L; idx[1]++)
                for (idx[2] = 0; idx[2] < S; idx[2]++)
                    bad += hsi_view_get_f64(&c.view, idx) != val_re(HSI_U16, idx[0], idx[1], idx[2]);
        CU_ASSERT_EQUAL(bad, 0);
        hsi_cube_free(&c);
    }
    /* complex -> real is refused and leaves nothing */
    hsi_view cs = make_source(HSI_C64, B, L, S, 0);
    hsi_envi_write_options o;
    hsi_envi_write_options_init(&o);
    o.dtype = HSI_F32;
    const char *hdr2 = hsi_test_tmp("conv_bad.hdr");
    HSI_CHECK_FAILS(hsi_envi_write(hdr2, &cs, NULL, &o), HSI_ERR_UNSUPPORTED, "imaginary");
    CU_ASSERT_NOT_EQUAL(access(hdr2, F_OK), 0);
    hsi_view_release(&cs);
    hsi_view_release(&src);
}

static void test_meta_roundtrip(void)
{
    hsi_meta m;
    HSI_CHECK_OK(parse_str(&m, rich));
    hsi_view src = make_source(HSI_U8, 3, 3, 4, 0);
    const char *hdr = hsi_test_tmp("meta.hdr");
    HSI_CHECK_OK(hsi_envi_write(hdr, &src, &m, NULL));
    hsi_cube c;
    HSI_CHECK_OK(hsi_envi_open(&c, hdr));
    check_rich(&c.meta);
    CU_ASSERT_EQUAL(c.meta.n_warnings, 0);
    for (int i = 0; i < c.meta.n_warnings; i++) fprintf(stderr, "\n  warning: %s", c.meta.warnings[i]);
    /* unknown keys: all there, same values, same relative order */
    const char *unknown[] = {"sensor type", "acquisition time", "z plot titles"};
    int last = -1;
    for (int i = 0; i < 3; i++) {
        const hsi_kv *a = hsi_meta_find(&m, unknown[i]), *b = hsi_meta_find(&c.meta, unknown[i]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(b);
        CU_ASSERT_STRING_EQUAL(a->value, b->value);
        CU_ASSERT_EQUAL(a->braced, b->braced);
        int pos = (int)(b - c.meta.keys);
        CU_ASSERT(pos > last);
        last = pos;
    }
    /* every required key written */
    const char *req[] = {"samples", "lines", "bands", "header offset", "file type",
                         "data type", "interleave", "byte order"};
    for (int i = 0; i < 8; i++) CU_ASSERT_PTR_NOT_NULL(hsi_meta_find(&c.meta, req[i]));
    hsi_cube_free(&c);
    /* band subset: per-band arrays follow, stale lists are not copied */
    int64_t keep[2] = {2, 0};
    HSI_CHECK_OK(hsi_meta_select_bands(&m, keep, 2));
    hsi_view two;
    HSI_CHECK_OK(hsi_view_bands(&two, &src, 0, 2));
    HSI_CHECK_OK(hsi_envi_write(hdr, &two, &m, NULL));
    HSI_CHECK_OK(hsi_envi_open(&c, hdr));
    CU_ASSERT_EQUAL(c.meta.n_bands, 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c.meta.wavelength);
    CU_ASSERT_EQUAL(c.meta.wavelength[0], 2500);
    CU_ASSERT_STRING_EQUAL(c.meta.band_names[1], "Red");
    CU_ASSERT_EQUAL(c.meta.n_warnings, 0);
    hsi_cube_free(&c);
    hsi_view_release(&two);
    hsi_view_release(&src);
    hsi_meta_free(&m);
}

/* Found by the fuzzer: a list item or text line starting with ';' must not
 * be written at the start of a line (it would read back as a comment). */
static void test_format_semicolon_items(void)
{
    hsi_meta m, r;
    HSI_CHECK_OK(parse_str(&m, "ENVI\nsamples = 1\nlines = 1\nbands = 3\ndata type = 1\n"
                               "interleave = bsq\nbyte order = 0\n"
                               "band names = {Red, Green,;Blue}\n"));
    free(m.description);
    m.description = strdup("line one\n ;line two");
    char *text = NULL;
    HSI_CHECK_OK(hsi_envi_format_header(&text, &m, 3, 1, 1, HSI_U8, HSI_BSQ, 0, 0));
    HSI_CHECK_OK(hsi_envi_parse(&r, text, strlen(text), "rewritten.hdr"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(r.band_names);
    CU_ASSERT_STRING_EQUAL(r.band_names[2], ";Blue");
    CU_ASSERT(r.description && strstr(r.description, ";line two"));
    free(text);
    hsi_meta_free(&r);
    hsi_meta_free(&m);
}

static void test_writer_streaming_abort(void)
{
    const char *dir = fresh_dir("abort");
    char hdr[4096];
    snprintf(hdr, sizeof hdr, "%s/x.hdr", dir);
    hsi_view src = make_source(HSI_F32, 2, 6, 3, 0);
    hsi_envi_writer *w = NULL;
    hsi_envi_write_options o;
    hsi_envi_write_options_init(&o);
    o.interleave = HSI_BSQ;
    o.dtype = HSI_F32;
    /* lines in three pieces, then finish: same as a whole write */
    HSI_CHECK_OK(hsi_envi_writer_open(&w, hdr, NULL, 2, 6, 3, &o));
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    hsi_view part;
    for (int y = 0; y < 6; y += 2) {
        HSI_CHECK_OK(hsi_view_slice(&part, &src, 1, y, y + 2, 1));
        HSI_CHECK_OK(hsi_envi_writer_write(w, &part));
        hsi_view_release(&part);
        CU_ASSERT_EQUAL(access(hdr, F_OK), -1); /* nothing at the destination yet */
    }
    HSI_CHECK_OK(hsi_envi_writer_finish(w));
    size_t n;
    uint8_t *want = expected_file(HSI_F32, HSI_BSQ, 0, 0, 2, 6, 3, &n);
    char dat[4096];
    snprintf(dat, sizeof dat, "%s/x", dir);
    CU_ASSERT(file_equals(dat, want, n));
    free(want);
    CU_ASSERT_EQUAL(count_files(dir), 2);
    unlink(hdr);
    unlink(dat);
    /* abort half-way: nothing left */
    HSI_CHECK_OK(hsi_envi_writer_open(&w, hdr, NULL, 2, 6, 3, &o));
    HSI_CHECK_OK(hsi_view_slice(&part, &src, 1, 0, 3, 1));
    HSI_CHECK_OK(hsi_envi_writer_write(w, &part));
    hsi_view_release(&part);
    hsi_envi_writer_abort(w);
    CU_ASSERT_EQUAL(count_files(dir), 0);
    /* finish with lines missing: refused, nothing left */
    HSI_CHECK_OK(hsi_envi_writer_open(&w, hdr, NULL, 2, 6, 3, &o));
    HSI_CHECK_OK(hsi_view_slice(&part, &src, 1, 0, 3, 1));
    HSI_CHECK_OK(hsi_envi_writer_write(w, &part));
    hsi_view_release(&part);
    HSI_CHECK_FAILS(hsi_envi_writer_finish(w), HSI_ERR_STATE, "3 of 6 lines");
    CU_ASSERT_EQUAL(count_files(dir), 0);
    /* too many lines, wrong shape */
    HSI_CHECK_OK(hsi_envi_writer_open(&w, hdr, NULL, 2, 6, 3, &o));
    HSI_CHECK_OK(hsi_envi_writer_write(w, &src));
    HSI_CHECK_FAILS(hsi_envi_writer_write(w, &src), HSI_ERR_ARG, "after 6 of 6");
    hsi_envi_writer_abort(w);
    HSI_CHECK_FAILS(hsi_envi_writer_open(&w, "no_suffix", NULL, 2, 6, 3, &o), HSI_ERR_ARG,
                    "must end in .hdr");
    o.data_ext = ".HDR";
    HSI_CHECK_FAILS(hsi_envi_writer_open(&w, hdr, NULL, 2, 6, 3, &o), HSI_ERR_ARG,
                    "would name the data file as the header");
    CU_ASSERT_EQUAL(count_files(dir), 0);
    hsi_view_release(&src);
}

/* ------------------------------------------------------ finding files */

static const char *small_hdr = "ENVI\nsamples = 2\nlines = 2\nbands = 1\nheader offset = 0\n"
                               "data type = 1\ninterleave = bsq\nbyte order = 0\n";

static void test_find_files(void)
{
    const char *dir = fresh_dir("find");
    char p[4096], q[4096];
    const uint8_t px[4] = {1, 2, 3, 4};
    hsi_cube c;
    /* X.hdr + X.IMG (other letter case) */
    snprintf(p, sizeof p, "%s/scene.hdr", dir);
    write_text(p, small_hdr);
    snprintf(q, sizeof q, "%s/scene.IMG", dir);
    write_bytes(q, px, 4);
    HSI_CHECK_OK(hsi_envi_open(&c, p));
    CU_ASSERT(strstr(c.data_path, "scene.IMG") != NULL);
    int64_t idx[3] = {0, 1, 1};
    CU_ASSERT_EQUAL(hsi_view_get_f64(&c.view, idx), 4);
    hsi_cube_free(&c);
    /* naming the data file finds the header */
    HSI_CHECK_OK(hsi_envi_open(&c, q));
    CU_ASSERT(strstr(c.header_path, "scene.hdr") != NULL);
    hsi_cube_free(&c);
    /* X.spe with X.spe.HDR (appended form, case) : ENVI */
    snprintf(p, sizeof p, "%s/cam.spe.HDR", dir);
    write_text(p, small_hdr);
    snprintf(q, sizeof q, "%s/cam.spe", dir);
    write_bytes(q, px, 4);
    HSI_CHECK_OK(hsi_envi_open(&c, q));
    CU_ASSERT(strstr(c.header_path, "cam.spe.HDR") != NULL);
    CU_ASSERT_STRING_EQUAL(c.meta.format, "envi");
    hsi_cube_free(&c);
    HSI_CHECK_OK(hsi_envi_open(&c, p));
    CU_ASSERT(strstr(c.data_path, "cam.spe") != NULL);
    hsi_cube_free(&c);
    /* data file without a header: names tried */
    snprintf(q, sizeof q, "%s/lonely.bil", dir);
    write_bytes(q, px, 4);
    HSI_CHECK_FAILS(hsi_envi_open(&c, q), HSI_ERR_NOT_FOUND, "tried lonely.bil.hdr, lonely.hdr");
    /* header without data: every name tried is listed */
    snprintf(p, sizeof p, "%s/nodata.hdr", dir);
    write_text(p, small_hdr);
    HSI_CHECK_FAILS(hsi_envi_open(&c, p), HSI_ERR_NOT_FOUND, "nodata.img, nodata.dat, nodata.raw");
    HSI_CHECK_FAILS(hsi_envi_open(&c, p), HSI_ERR_NOT_FOUND, "nodata.hyspex, nodata.pix");
    /* ... while the header alone still reads (what `hsi info` shows) */
    hsi_meta hm;
    HSI_CHECK_OK(hsi_envi_read_header(&hm, p));
    CU_ASSERT(hm.n_samples == 2 && hm.n_lines == 2 && hm.dtype == HSI_U8);
    hsi_meta_free(&hm);
    /* header named as its own data file */
    snprintf(p, sizeof p, "%s/selfish", dir);
    write_text(p, small_hdr);
    HSI_CHECK_FAILS(hsi_envi_open(&c, p), HSI_ERR_FORMAT, "named as its own data file");
    char *found = NULL;
    snprintf(p, sizeof p, "%s/scene.hdr", dir);
    HSI_CHECK_OK(hsi_envi_find_data(&found, p, NULL));
    CU_ASSERT(strstr(found, "scene.IMG") != NULL);
    free(found);
}

/* ------------------------------------------ gzip, frames, size checks */

static void test_gzip(void)
{
    const int64_t B = 2, L = 3, S = 4;
    size_t n;
    uint8_t *raw = expected_file(HSI_I16, HSI_BIL, 1, 10, B, L, S, &n);
    char p[4096];
    snprintf(p, sizeof p, "%s", hsi_test_tmp("gz.img"));
    gzFile gz = gzopen(p, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(gz);
    CU_ASSERT_EQUAL(gzwrite(gz, raw, (unsigned)n), (int)n);
    gzclose(gz);
    write_text(hsi_test_tmp("gz.hdr"), "ENVI\nsamples = 4\nlines = 3\nbands = 2\n"
                                       "header offset = 10\nfile compression = 1\n"
                                       "data type = 2\ninterleave = bil\nbyte order = 1\n");
    hsi_cube c;
    HSI_CHECK_OK(hsi_envi_open(&c, hsi_test_tmp("gz.hdr")));
    CU_ASSERT_EQUAL(c.view.buf->kind, HSI_BUF_HOST);
    int bad = 0;
    int64_t idx[3];
    for (idx[0] = 0; idx[0] < B; idx[0]++)
        for (idx[1] = 0; idx[1] < L; idx[1]++)
            for (idx[2] = 0; idx[2] < S; idx[2]++)
                bad += hsi_view_get_f64(&c.view, idx) != val_re(HSI_I16, idx[0], idx[1], idx[2]);
    CU_ASSERT_EQUAL(bad, 0);
    hsi_cube_free(&c);
    /* truncated stream */
    gz = gzopen(p, "wb");
    gzwrite(gz, raw, (unsigned)(n - 5));
    gzclose(gz);
    HSI_CHECK_FAILS(hsi_envi_open(&c, hsi_test_tmp("gz.hdr")), HSI_ERR_FORMAT,
                    "inflates to 53 bytes, expected 58");
    free(raw);
}

static void test_major_frames(void)
{
    /* BIL uint16, 2 bands x 3 lines x 4 samples; each line (frame) has a
     * 6-byte prefix and a 2-byte trailer; file header offset 5 */
    const int64_t B = 2, L = 3, S = 4, pre = 6, post = 2, off = 5;
    size_t line = (size_t)(B * S * 2 + pre + post);
    size_t n = (size_t)off + L * line;
    uint8_t *f = malloc(n);
    memset(f, 0xEE, n);
    for (int64_t y = 0; y < L; y++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t x = 0; x < S; x++)
                encode(f + off + y * line + pre + (b * S + x) * 2, HSI_U16,
                       val_re(HSI_U16, b, y, x), 0, 0);
    write_bytes(hsi_test_tmp("frames.raw"), f, n);
    write_text(hsi_test_tmp("frames.hdr"),
               "ENVI\nsamples = 4\nlines = 3\nbands = 2\nheader offset = 5\ndata type = 12\n"
               "interleave = bil\nbyte order = 0\nmajor frame offsets = {6, 2}\n");
    hsi_cube c;
    HSI_CHECK_OK(hsi_envi_open(&c, hsi_test_tmp("frames.hdr")));
    CU_ASSERT_EQUAL(c.view.strides[1], (int64_t)line);
    int bad = 0;
    int64_t idx[3];
    for (idx[0] = 0; idx[0] < B; idx[0]++)
        for (idx[1] = 0; idx[1] < L; idx[1]++)
            for (idx[2] = 0; idx[2] < S; idx[2]++)
                bad += hsi_view_get_f64(&c.view, idx) != val_re(HSI_U16, idx[0], idx[1], idx[2]);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(c.meta.n_warnings, 0);
    hsi_cube_free(&c);
    free(f);
    /* minor frame offsets: refused clearly */
    write_text(hsi_test_tmp("frames.hdr"),
               "ENVI\nsamples = 4\nlines = 3\nbands = 2\ndata type = 12\n"
               "interleave = bil\nbyte order = 0\nminor frame offsets = {4, 0}\n");
    HSI_CHECK_FAILS(hsi_envi_open(&c, hsi_test_tmp("frames.hdr")), HSI_ERR_UNSUPPORTED,
                    "'minor frame offsets' {4, 0} are not supported");
}

static void test_size_checks(void)
{
    uint8_t data[64] = {0};
    const char *hdr = "ENVI\nsamples = 4\nlines = 3\nbands = 2\nheader offset = 0\n"
                      "data type = 2\ninterleave = bsq\nbyte order = 0\n";
    write_text(hsi_test_tmp("sz.hdr"), hdr);
    hsi_cube c;
    /* 48 bytes expected; 56 found: opens with a warning naming offset 8 */
    write_bytes(hsi_test_tmp("sz"), data, 56);
    HSI_CHECK_OK(hsi_envi_open(&c, hsi_test_tmp("sz.hdr")));
    CU_ASSERT(has_warning(&c.meta, "a header offset of 8 would explain it"));
    CU_ASSERT_EQUAL(c.file_size, 56);
    hsi_cube_free(&c);
    /* 40 found: short */
    write_bytes(hsi_test_tmp("sz"), data, 40);
    HSI_CHECK_FAILS(hsi_envi_open(&c, hsi_test_tmp("sz.hdr")), HSI_ERR_FORMAT,
                    "data file is 40 bytes, expected 48");
    /* 24 found: half: the message suggests a 1-byte type */
    write_bytes(hsi_test_tmp("sz"), data, 24);
    HSI_CHECK_FAILS(hsi_envi_open(&c, hsi_test_tmp("sz.hdr")), HSI_ERR_FORMAT,
                    "a data type of 1 bytes per value would explain it");
}

/* Opening costs the same whatever the size: a sparse 8 GiB file maps. */
static void test_open_sparse_large(void)
{
    const char *p = hsi_test_tmp("big.img");
    FILE *fp = fopen(p, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    int ok = ftruncate(fileno(fp), (off_t)8 << 30) == 0;
    fclose(fp);
    if (!ok) return; /* file system without sparse files: nothing to check */
    write_text(hsi_test_tmp("big.hdr"), "ENVI\nsamples = 65536\nlines = 32768\nbands = 2\n"
                                        "header offset = 0\ndata type = 12\ninterleave = bsq\n"
                                        "byte order = 0\n");
    hsi_cube c;
    HSI_CHECK_OK(hsi_envi_open(&c, hsi_test_tmp("big.hdr")));
    CU_ASSERT_EQUAL(c.view.shape[1], 32768);
    CU_ASSERT_EQUAL(c.view.strides[0], (int64_t)65536 * 32768 * 2);
    int64_t idx[3] = {1, 32767, 65535};
    CU_ASSERT_EQUAL(hsi_view_get_f64(&c.view, idx), 0);
    hsi_cube_free(&c);
    unlink(p);
}

/* The writer converts tile by tile: host memory held while writing a
 * 24 MiB cube from a mapped (uncounted) file stays near one tile. */
static void test_writer_bounded_memory(void)
{
    const int64_t B = 3, L = 1024, S = 4096; /* uint16: 24 MiB */
    const char *p = hsi_test_tmp("mem_src.img");
    FILE *fp = fopen(p, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    CU_ASSERT_EQUAL_FATAL(ftruncate(fileno(fp), (off_t)(B * L * S * 2)), 0);
    fclose(fp);
    write_text(hsi_test_tmp("mem_src.hdr"), "ENVI\nsamples = 4096\nlines = 1024\nbands = 3\n"
                                            "header offset = 0\ndata type = 12\n"
                                            "interleave = bip\nbyte order = 0\n");
    hsi_cube c;
    HSI_CHECK_OK(hsi_envi_open(&c, hsi_test_tmp("mem_src.hdr")));
    int64_t before = hsi_buffer_live_bytes(HSI_BUF_HOST);
    hsi_envi_writer *w = NULL;
    hsi_envi_write_options o;
    hsi_envi_write_options_init(&o);
    o.interleave = HSI_BSQ;
    o.dtype = HSI_F32; /* 48 MiB out */
    HSI_CHECK_OK(hsi_envi_writer_open(&w, hsi_test_tmp("mem_dst.hdr"), &c.meta, B, L, S, &o));
    HSI_CHECK_OK(hsi_envi_writer_write(w, &c.view));
    int64_t held = hsi_buffer_live_bytes(HSI_BUF_HOST) - before;
    CU_ASSERT(held > 0 && held <= ((int64_t)9 << 20));
    HSI_CHECK_OK(hsi_envi_writer_finish(w));
    hsi_cube_free(&c);
    HSI_CHECK_OK(hsi_envi_open(&c, hsi_test_tmp("mem_dst.hdr")));
    CU_ASSERT_EQUAL(c.file_size, B * L * S * 4);
    hsi_cube_free(&c);
    unlink(hsi_test_tmp("mem_dst"));
    unlink(p);
}

/* Occurrences of needle in hay. */
static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* `hsi info` shows each warning once: the "several data files" warning is
 * one of the header's warnings (the report lists them), and none of them
 * is printed on stderr as well (issue 15: one warning printed twice). */
static void test_info_warning_once(void)
{
    const char *dir = fresh_dir("warn_once");
    char hdr[4096], a[4096], b[4096];
    const uint8_t px[4] = {1, 2, 3, 4};
    snprintf(hdr, sizeof hdr, "%s/x.hdr", dir);
    write_text(hdr, "ENVI\nsamples = 2\nlines = 2\nbands = 1\nheader offset = 0\n"
                    "file type = ENVI Standard\ndata type = 1\ninterleave = bsq\nbyte order = 0\n"
                    "wavelength = {nan}\n");
    snprintf(a, sizeof a, "%s/x", dir);
    write_bytes(a, px, 4);
    snprintf(b, sizeof b, "%s/x.img", dir);
    write_bytes(b, px, 4);
    /* the library: recorded with the header's warnings */
    hsi_cube c;
    hsi_set_quiet(1);
    hsi_status st = hsi_envi_open(&c, hdr);
    hsi_set_quiet(0);
    HSI_CHECK_OK(st);
    int several = 0, nan_w = 0;
    for (int i = 0; i < c.meta.n_warnings; i++) {
        several += strstr(c.meta.warnings[i], "several data files match") != NULL;
        nan_w += strstr(c.meta.warnings[i], "'wavelength'") != NULL;
    }
    CU_ASSERT_EQUAL(several, 1);
    CU_ASSERT_EQUAL(nan_w, 1);
    hsi_cube_free(&c);
    /* the command: stdout and stderr together hold each warning once */
    static char out[1 << 16];
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, "%s info '%s'", HSI_BIN, hdr), 0);
    CU_ASSERT_EQUAL(count_of(out, "several data files match"), 1);
    CU_ASSERT_EQUAL(count_of(out, "'wavelength' item 1 is 'nan'"), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "warning:       ")); /* in the report */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, "( %s info '%s' 2>&1 >/dev/null )", HSI_BIN, hdr), 0);
    CU_ASSERT_EQUAL(count_of(out, "warning"), 0);
    /* with the header's data missing, the header is shown (read twice): still once */
    CU_ASSERT_EQUAL(unlink(a), 0);
    CU_ASSERT_EQUAL(unlink(b), 0);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, "%s info '%s'", HSI_BIN, hdr), 1);
    CU_ASSERT_EQUAL(count_of(out, "'wavelength' item 1 is 'nan'"), 1);
    /* --json: in "warnings", and once on stderr (stdout is JSON) */
    write_bytes(a, px, 4);
    write_bytes(b, px, 4);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, "( %s info --json '%s' 2>/dev/null )", HSI_BIN, hdr), 0);
    CU_ASSERT_EQUAL(count_of(out, "several data files match"), 1);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, "( %s info --json '%s' 2>&1 >/dev/null )", HSI_BIN, hdr), 0);
    CU_ASSERT_EQUAL(count_of(out, "several data files match"), 1);
    CU_ASSERT_EQUAL(count_of(out, "'wavelength' item 1 is 'nan'"), 1);
}

HSI_SUITE(envi, 0, {"parse syntax (case, comments, braces, CRLF)", test_parse_syntax},
          {"parse vendor first line, defaults, duplicates", test_parse_vendor_and_defaults},
          {"parse typed metadata", test_parse_typed},
          {"round trip interleave x dtype x order x offset", test_roundtrip_matrix},
          {"write with dtype conversion", test_write_convert},
          {"metadata round trip", test_meta_roundtrip},
          {"';' at the start of list items and text lines", test_format_semicolon_items},
          {"streaming writer, abort", test_writer_streaming_abort},
          {"finding data and header files", test_find_files},
          {"info shows each warning once", test_info_warning_once}, {"gzip data", test_gzip},
          {"major frame offsets", test_major_frames}, {"size checks", test_size_checks},
          {"open a sparse 8 GiB cube", test_open_sparse_large},
          {"writer memory stays at one tile", test_writer_bounded_memory})

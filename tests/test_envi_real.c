/* test_envi_real.c — every real ENVI header under ../shared/data/envi/
 * against tests/fixtures/envi_real.txt (made by Spectral Python / GDAL via
 * tests/fixtures/make_envi_fixtures.py): header fields, per-band sums and
 * sampled values of every cube whose data file is there. */
#include "test.h"

#include "io/envi.h"

#define FIXTURE "tests/fixtures/envi_real.txt"

/* Items of a verbatim list value (commas + 1; 0 when blank). */
static int64_t list_count(const hsi_meta *m, const char *key)
{
    const hsi_kv *kv = hsi_meta_find(m, key);
    if (!kv) return 0;
    const char *s = kv->value;
    while (*s == ' ' || *s == '\n') s++;
    if (!*s) return 0;
    int64_t n = 1;
    for (; *s; s++) n += *s == ',';
    /* a trailing comma does not start an item */
    const char *e = kv->value + strlen(kv->value);
    while (e > kv->value && (e[-1] == ' ' || e[-1] == '\n')) e--;
    if (e > kv->value && e[-1] == ',') n--;
    return n;
}

static hsi_status parse_file(hsi_meta *m, const char *path)
{
    char *text = NULL;
    size_t len = 0;
    hsi_status st = hsi_read_file(path, &text, &len);
    if (st == HSI_OK) st = hsi_envi_parse(m, text, len, path);
    free(text);
    return st;
}

/* Per-band sums in double, over any strides. */
static double *band_sums(const hsi_view *v)
{
    double *s = calloc((size_t)v->shape[0], sizeof *s);
    double *row = malloc((size_t)v->shape[2] * sizeof *row);
    for (int64_t b = 0; b < v->shape[0]; b++)
        for (int64_t y = 0; y < v->shape[1]; y++) {
            int64_t idx[3] = {b, y, 0};
            hsi_load_f64(row, hsi_view_ptr(v, idx), v->strides[2], v->dtype, v->swapped,
                         v->shape[2]);
            for (int64_t x = 0; x < v->shape[2]; x++) s[b] += row[x];
        }
    free(row);
    return s;
}

static void test_real_headers_and_data(void)
{
    FILE *fp = fopen(FIXTURE, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    char line[4096], rel[1024] = "";
    int n_headers = 0, n_cubes = 0, n_sums = 0, n_pts = 0, bad = 0;
    hsi_cube cube;
    int open = 0;
    double *sums = NULL;
    hsi_cube_init(&cube);
    while (fgets(line, sizeof line, fp)) {
        char dt[32], il[8];
        long long S, L, B, bo, off, nwl, nbn, b, y, x;
        double v;
        if (line[0] == '#') continue;
        if (sscanf(line, "header %1023s %lld %lld %lld %31s %7s %lld %lld %lld %lld", rel, &S, &L,
                   &B, dt, il, &bo, &off, &nwl, &nbn) == 10) {
            const char *path = hsi_test_shared(rel);
            CU_ASSERT_PTR_NOT_NULL_FATAL(path);
            hsi_meta m;
            hsi_status st = parse_file(&m, path);
            if (st != HSI_OK) fprintf(stderr, "\n  %s: %s\n", rel, hsi_last_error());
            CU_ASSERT_EQUAL_FATAL(st, HSI_OK);
            n_headers++;
            int ok = m.n_samples == S && m.n_lines == L && m.n_bands == B &&
                     !strcmp(hsi_dtype_name(m.dtype), dt) &&
                     !strcmp(hsi_interleave_name(m.interleave), il) && m.byte_order == bo &&
                     m.header_offset == off;
            /* spectral axis: typed when it has one value per band */
            int64_t got_wl = m.wavelength ? m.n_bands : list_count(&m, "wavelength");
            int64_t got_bn = m.band_names ? m.n_bands : list_count(&m, "band names");
            ok = ok && got_wl == nwl && got_bn == nbn;
            if (!ok) {
                fprintf(stderr, "\n  %s disagrees with the fixture (wl %lld/%lld, names %lld/%lld)\n",
                        rel, (long long)got_wl, nwl, (long long)got_bn, nbn);
                bad++;
            }
            hsi_meta_free(&m);
        } else if (!strncmp(line, "data ", 5)) {
            hsi_status st = hsi_envi_open(&cube, hsi_test_shared(rel));
            if (st != HSI_OK) fprintf(stderr, "\n  %s: %s\n", rel, hsi_last_error());
            CU_ASSERT_EQUAL_FATAL(st, HSI_OK);
            CU_ASSERT_EQUAL(cube.view.buf->kind, HSI_BUF_MMAP); /* zero copy */
            open = 1;
            n_cubes++;
            sums = band_sums(&cube.view);
        } else if (sscanf(line, "sum %lld %lf", &b, &v) == 2) {
            CU_ASSERT_FATAL(open && b < cube.view.shape[0]);
            double tol = 1e-9 * (fabs(v) + 1);
            if (fabs(sums[b] - v) > tol) {
                if (bad < 10)
                    fprintf(stderr, "\n  %s band %lld: sum %.17g, reference %.17g\n", rel, b,
                            sums[b], v);
                bad++;
            }
            n_sums++;
        } else if (sscanf(line, "pt %lld %lld %lld %lf", &b, &y, &x, &v) == 4) {
            CU_ASSERT_FATAL(open);
            int64_t idx[3] = {b, y, x};
            double got = hsi_view_get_f64(&cube.view, idx);
            if (!(got == v || (isnan(got) && isnan(v)))) {
                fprintf(stderr, "\n  %s (%lld, %lld, %lld): %.17g, reference %.17g\n", rel, b,
                        y, x, got, v);
                bad++;
            }
            n_pts++;
        } else if (!strncmp(line, "end", 3)) {
            hsi_cube_free(&cube);
            free(sums);
            sums = NULL;
            open = 0;
        }
    }
    fclose(fp);
    free(sums);
    hsi_cube_free(&cube);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(n_headers, 19);
    CU_ASSERT_EQUAL(n_cubes, 11);
    CU_ASSERT_EQUAL(n_sums, 2987);
    CU_ASSERT_EQUAL(n_pts, 11 * 13);
}

/* Fields the fixture does not carry, checked against the header texts. */
static void test_real_details(void)
{
    hsi_meta m;
    const char *p;
    p = hsi_test_shared("envi/plantcv_headwall/arcgis_esri_bil_NOT_ENVI.hdr");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    HSI_CHECK_FAILS(parse_file(&m, p), HSI_ERR_FORMAT, "not an ENVI header");
    hsi_cube c;
    HSI_CHECK_FAILS(hsi_envi_open(&c, p), HSI_ERR_FORMAT, "not an ENVI header");

    /* no byte order, no header offset, no file type; comment lines */
    HSI_CHECK_OK(parse_file(&m, hsi_test_shared("envi/plantcv_headwall/corn-kernel-hyperspectral.hdr")));
    CU_ASSERT_EQUAL(m.byte_order, 0);
    CU_ASSERT(m.n_warnings == 1 && strstr(m.warnings[0], "byte order"));
    CU_ASSERT_EQUAL(m.wavelength_nm, 1);
    CU_ASSERT_EQUAL(m.wavelength[0], 366.551);
    hsi_meta_free(&m);

    /* leading-comma wavelengths, default bands, ';' lines after the lists */
    HSI_CHECK_OK(parse_file(&m, hsi_test_shared("envi/plantcv_headwall/darkReference.hdr")));
    CU_ASSERT_EQUAL(m.n_default_bands, 3);
    CU_ASSERT(m.default_bands[0] == 158 && m.default_bands[1] == 252 && m.default_bands[2] == 519);
    CU_ASSERT_EQUAL(m.wavelength[1], 379.663);
    CU_ASSERT_PTR_NULL(hsi_meta_find(&m, ";AOI height"));
    CU_ASSERT_STRING_EQUAL(m.description, "[HEADWALL Hyperspec III]");
    hsi_meta_free(&m);

    /* map info with blanks inside braces, ignore value */
    HSI_CHECK_OK(parse_file(&m, hsi_test_shared("envi/isofit_avirisng_topoflux/ang20160910t185702_obs_ortdem_mod.hdr")));
    CU_ASSERT_EQUAL(m.map_info.valid, 1);
    CU_ASSERT_STRING_EQUAL(m.map_info.projection, "UTM");
    CU_ASSERT_EQUAL(m.map_info.zone, 11);
    CU_ASSERT_EQUAL(m.map_info.north, 1);
    CU_ASSERT(m.has_ignore_value && m.ignore_value == -9999);
    CU_ASSERT_PTR_NOT_NULL(m.coordinate_system);
    hsi_meta_free(&m);

    /* rotation in map info */
    HSI_CHECK_OK(parse_file(&m, hsi_test_shared("envi/gdal_autotest_headers/rotation.hdr")));
    CU_ASSERT_EQUAL(m.map_info.rotation, -66);
    CU_ASSERT_STRING_EQUAL(m.map_info.units, "Meters");
    CU_ASSERT_EQUAL(m.map_info.zone, 12);
    hsi_meta_free(&m);

    /* compression, big-endian */
    HSI_CHECK_OK(parse_file(&m, hsi_test_shared("envi/gdal_autotest_headers/aea_compressed.hdr")));
    CU_ASSERT_EQUAL(m.file_compression, 1);
    CU_ASSERT_EQUAL(m.byte_order, 1);
    CU_ASSERT_STRING_EQUAL(m.map_info.projection, "Albers Equal Area Example");
    CU_ASSERT_PTR_NOT_NULL(hsi_meta_find(&m, "projection info"));
    hsi_meta_free(&m);

    /* Specim 'file type = ENVI', vendor keys kept, x/y start 0 */
    HSI_CHECK_OK(parse_file(&m, hsi_test_shared("envi/hylite_specim_fenix/Radiometric_8x2_1x1.hdr")));
    CU_ASSERT_EQUAL(m.file_kind, HSI_FILE_STANDARD);
    CU_ASSERT(m.has_x_start && m.x_start == 0 && m.has_y_start && m.y_start == 0);
    const hsi_kv *kv = hsi_meta_find(&m, "acquisition date");
    CU_ASSERT(kv && !strcmp(kv->value, "DATE(yyyy-mm-dd): 2019-01-29"));
    kv = hsi_meta_find(&m, "binning");
    CU_ASSERT(kv && kv->braced && !strcmp(kv->value, "8, 2"));
    CU_ASSERT_EQUAL(m.n_default_bands, 3);
    hsi_meta_free(&m);

    /* speclib in micrometers; y start; EnMAP um -> nm */
    HSI_CHECK_OK(parse_file(&m, hsi_test_shared("envi/enmapbox/library_berlin.hdr")));
    CU_ASSERT_EQUAL(m.file_kind, HSI_FILE_SPECLIB);
    CU_ASSERT_EQUAL(list_count(&m, "spectra names"), 75);
    hsi_meta_free(&m);
    HSI_CHECK_OK(parse_file(&m, hsi_test_shared("envi/enmapbox/enmap_berlin_header_only.hdr")));
    CU_ASSERT(m.has_y_start && m.y_start == 24);
    CU_ASSERT_EQUAL(m.wavelength_nm, 1);
    CU_ASSERT(m.wavelength[0] > 400 && m.wavelength[0] < 500);
    CU_ASSERT(m.has_reflectance_scale);
    CU_ASSERT(m.has_ignore_value && m.ignore_value == -99);
    hsi_meta_free(&m);
    HSI_CHECK_OK(parse_file(&m, hsi_test_shared("envi/hylite_specim_fenix/hylite_test_image_header_only.hdr")));
    kv = hsi_meta_find(&m, "test");
    CU_ASSERT(kv && !strcmp(kv->value, "testing this"));
    CU_ASSERT_EQUAL(m.interleave, HSI_BSQ);
    hsi_meta_free(&m);
}

/* Real cube -> every interleave, big-endian, offset -> back: identical. */
static void test_real_rewrite(void)
{
    hsi_cube a, b;
    HSI_CHECK_OK(hsi_envi_open(&a, hsi_test_shared("envi/isofit_avirisng_small_chunk/ang20170323t202244_rdn_7000-7010.hdr")));
    const char *hdr = hsi_test_tmp("rdn_rw.hdr");
    for (int il = 0; il < 3; il++) {
        hsi_envi_write_options o;
        hsi_envi_write_options_init(&o);
        o.interleave = (hsi_interleave)il;
        o.byte_order = 1;
        o.header_offset = 512;
        HSI_CHECK_OK(hsi_envi_write(hdr, &a.view, &a.meta, &o));
        HSI_CHECK_OK(hsi_envi_open(&b, hdr));
        int bad = 0;
        int64_t idx[3];
        for (idx[0] = 0; idx[0] < a.view.shape[0]; idx[0]++)
            for (idx[1] = 0; idx[1] < a.view.shape[1]; idx[1]++)
                for (idx[2] = 0; idx[2] < a.view.shape[2]; idx[2]++) {
                    double x = hsi_view_get_f64(&a.view, idx), y = hsi_view_get_f64(&b.view, idx);
                    bad += !(x == y || (isnan(x) && isnan(y)));
                }
        CU_ASSERT_EQUAL(bad, 0);
        CU_ASSERT_STRING_EQUAL(b.meta.description, a.meta.description);
        CU_ASSERT_EQUAL(memcmp(b.meta.wavelength, a.meta.wavelength, 425 * sizeof(double)), 0);
        CU_ASSERT_EQUAL(memcmp(b.meta.fwhm, a.meta.fwhm, 425 * sizeof(double)), 0);
        hsi_cube_free(&b);
    }
    hsi_cube_free(&a);
}

HSI_SUITE(envi_real, HSI_SUITE_NEEDS_SHARED,
          {"real headers and data vs SPy/GDAL", test_real_headers_and_data},
          {"real header details, ESRI refused", test_real_details},
          {"real cube rewritten in every layout", test_real_rewrite})

/* test_envi_malformed.c — the malformed ENVI corpus (tests/malformed/,
 * written by its make_corpus.py): every case must fail with its status and
 * an error naming the problem (or, STATUS WARN, open with a warning naming
 * it), never crash, through the file reader and the same bytes from memory.
 * Also drives the parser over every prefix of a good header (truncation at
 * any byte), checks what non-finite numbers leave in hsi_meta (nothing, and
 * never a NaN geotransform in a GeoTIFF), that `hsi info --json` of a
 * Latin-1 header is valid UTF-8 JSON, and that a label beyond the classes a
 * classification header declares is refused. */
#include "test.h"

#include <cJSON.h>
#include <gdal.h>
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>

#include "io/envi.h"
#include "io/gdal_io.h"
#include "io/labels.h"

#define CORPUS "tests/malformed"

/* HSI_OK stands for WARN: opens, with a warning holding the words */
static hsi_status status_from(const char *s, int *known)
{
    *known = 1;
    if (!strcmp(s, "FORMAT")) return HSI_ERR_FORMAT;
    if (!strcmp(s, "OVERFLOW")) return HSI_ERR_OVERFLOW;
    if (!strcmp(s, "NOT_FOUND")) return HSI_ERR_NOT_FOUND;
    if (!strcmp(s, "UNSUPPORTED")) return HSI_ERR_UNSUPPORTED;
    if (!strcmp(s, "IO")) return HSI_ERR_IO;
    *known = !strcmp(s, "WARN");
    return HSI_OK;
}

static int has_warning(const hsi_meta *m, const char *words)
{
    for (int i = 0; i < m->n_warnings; i++)
        if (strstr(m->warnings[i], words)) return 1;
    return 0;
}

/* Checks one outcome against the case; returns 1 when it matches. */
static int outcome_ok(const char *how, const char *file, hsi_status st, hsi_status want,
                      const char *words, hsi_cube *c)
{
    int ok;
    if (want == HSI_OK) {
        ok = st == HSI_OK && has_warning(&c->meta, words);
        if (!ok)
            fprintf(stderr, "\n  %s (%s): got %s '%s' (%d warnings)\n    want a warning with '%s'\n",
                    file, how, hsi_status_name(st), st == HSI_OK ? "" : hsi_last_error(),
                    st == HSI_OK ? c->meta.n_warnings : 0, words);
        for (int i = 0; !ok && st == HSI_OK && i < c->meta.n_warnings; i++)
            fprintf(stderr, "    warning: %s\n", c->meta.warnings[i]);
    } else {
        ok = st == want && strstr(hsi_last_error(), words);
        if (!ok)
            fprintf(stderr, "\n  %s (%s): got %s '%s'\n    want %s with '%s'\n", file, how,
                    hsi_status_name(st), hsi_last_error(), hsi_status_name(want), words);
        /* the message names the file */
        if (st != HSI_OK && !strstr(hsi_last_error(), file) &&
            !strstr(hsi_last_error(), "tests/malformed")) {
            fprintf(stderr, "\n  %s (%s): message does not name the file: %s\n", file, how,
                    hsi_last_error());
            ok = 0;
        }
    }
    if (st == HSI_OK) hsi_cube_free(c);
    return ok;
}

static void test_corpus(void)
{
    FILE *fp = fopen(CORPUS "/cases.txt", "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    char line[1024];
    int n = 0, n_mem = 0, n_warn = 0, bad = 0;
    while (fgets(line, sizeof line, fp)) {
        if (line[0] == '#') continue;
        line[strcspn(line, "\n")] = 0;
        char *file = strtok(line, "\t"), *status = strtok(NULL, "\t"), *words = strtok(NULL, "");
        if (!file || !status || !words) continue;
        char path[2048];
        snprintf(path, sizeof path, CORPUS "/%s", file);
        int known;
        hsi_status want = status_from(status, &known);
        CU_ASSERT(known);
        n_warn += want == HSI_OK;
        hsi_cube c;
        hsi_set_quiet(1);
        hsi_status st = hsi_envi_open(&c, path);
        hsi_set_quiet(0);
        bad += !outcome_ok("file", file, st, want, words, &c);
        n++;

        /* the same bytes from memory, where the case is not about finding files */
        size_t fl = strlen(file);
        char data[2048];
        snprintf(data, sizeof data, "%s", path);
        if (fl < 4 || strcmp(file + fl - 4, ".hdr")) continue;
        data[strlen(data) - 4] = 0;
        char *ht = NULL, *dt = NULL;
        size_t hn = 0, dn = 0;
        if (hsi_read_file(data, &dt, &dn) != HSI_OK) continue; /* no data file: missing_data */
        CU_ASSERT_EQUAL_FATAL(hsi_read_file(path, &ht, &hn), HSI_OK);
        hsi_set_quiet(1);
        st = hsi_envi_open_memory(&c, ht, hn, dt, dn, path, data);
        hsi_set_quiet(0);
        bad += !outcome_ok("memory", file, st, want, words, &c);
        n_mem++;
        free(ht);
        free(dt);
    }
    fclose(fp);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(n >= 55);
    CU_ASSERT(n_mem >= 50);
    CU_ASSERT(n_warn >= 9);
}

/* What the WARN cases leave in hsi_meta: the field unset, never a NaN. */
static void test_non_finite_fields(void)
{
    static const char *base = "ENVI\nsamples = 4\nlines = 3\nbands = 2\ndata type = 2\n"
                              "interleave = bsq\nbyte order = 0\n";
    static const char *bands[] = {"wavelength = {400, nan}\n", "wavelength = {-inf, 800}\n",
                                  "wavelength = {400, 1e400}\n",
                                  "wavelength units = Meters\nwavelength = {1e300, 1}\n",
                                  "wavelength = {400, 800}\nfwhm = {10, nan}\n",
                                  "data gain values = {1, nan}\n", "bbl = {1, inf}\n"};
    char text[512];
    hsi_meta m;
    hsi_set_quiet(1);
    for (size_t i = 0; i < sizeof bands / sizeof *bands; i++) {
        snprintf(text, sizeof text, "%s%s", base, bands[i]);
        HSI_CHECK_OK(hsi_envi_parse(&m, text, strlen(text), "nf.hdr"));
        int any = (m.wavelength && (!isfinite(m.wavelength[0]) || !isfinite(m.wavelength[1]))) ||
                  (m.fwhm && (!isfinite(m.fwhm[0]) || !isfinite(m.fwhm[1]))) || m.gain || m.bbl;
        CU_ASSERT_FALSE(any);
        CU_ASSERT(m.n_warnings >= 1);
        if (i == 4) CU_ASSERT_PTR_NULL(m.fwhm);
        if (i < 4) CU_ASSERT_PTR_NULL(m.wavelength);
        hsi_meta_free(&m);
    }
    static const char *maps[] = {
        "map info = {UTM, 1, 1, 500000, 4100000, nan, 30, 33, North, WGS-84}\n",
        "map info = {UTM, 1, 1, 500000, 4100000, 0, 30, 33, North, WGS-84}\n",
        "map info = {UTM, 1, 1, 500000, 4100000, 30, -30, 33, North, WGS-84}\n",
        "map info = {UTM, nan, 1, 500000, 4100000, 30, 30, 33, North, WGS-84}\n",
        "map info = {UTM, 1, 1, 500000, 1e999, 30, 30, 33, North, WGS-84}\n",
        "map info = {UTM, 1, 1, 500000, 4100000, 30, 30, 33, North, WGS-84, rotation=inf}\n"};
    for (size_t i = 0; i < sizeof maps / sizeof *maps; i++) {
        snprintf(text, sizeof text, "%s%s", base, maps[i]);
        HSI_CHECK_OK(hsi_envi_parse(&m, text, strlen(text), "map.hdr"));
        CU_ASSERT_EQUAL(m.map_info.valid, 0);
        CU_ASSERT(has_warning(&m, "map.hdr: 'map info'") && has_warning(&m, "map info not used"));
        double gt[6];
        CU_ASSERT_EQUAL(hsi_meta_geotransform(&m, gt), 0);
        hsi_meta_free(&m);
    }
    /* a good map info still works, and a NaN reflectance scale is not kept */
    snprintf(text, sizeof text, "%s%s", base,
             "map info = {UTM, 1, 1, 500000, 4100000, 30, 30, 33, North, WGS-84}\n"
             "reflectance scale factor = nan\n");
    HSI_CHECK_OK(hsi_envi_parse(&m, text, strlen(text), "map.hdr"));
    CU_ASSERT_EQUAL(m.map_info.valid, 1);
    CU_ASSERT_EQUAL(m.has_reflectance_scale, 0);
    CU_ASSERT_FALSE(isnan(m.reflectance_scale));
    double gt[6];
    CU_ASSERT_EQUAL(hsi_meta_geotransform(&m, gt), 1);
    HSI_ASSERT_NEAR(gt[0], 500000, 1e-9);
    HSI_ASSERT_NEAR(gt[5], -30, 1e-12);
    /* a meta made by hand (not by the parser) with a NaN rotation: no geotransform */
    m.map_info.rotation = NAN;
    CU_ASSERT_EQUAL(hsi_meta_geotransform(&m, gt), 0);
    m.map_info.rotation = 0;
    m.map_info.x_size = 1e308;
    m.map_info.ref_x = -1e308; /* finite inputs, an infinite origin */
    CU_ASSERT_EQUAL(hsi_meta_geotransform(&m, gt), 0);
    hsi_meta_free(&m);
    hsi_set_quiet(0);
}

static int count_entries(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix))) n++;
    if (d) closedir(d);
    return n;
}

/* A GeoTIFF of a cube whose map info is unusable carries no geotransform
 * at all (GDAL's default), never a NaN one; it is written through the core's
 * atomic temporary ("<path>.hsi-tmp-XXXXXX"), whose stale copies a killed
 * run left (and their .aux.xml side-cars) the next write removes. */
static void test_geotiff_no_nan_geotransform(void)
{
    const char *dir = hsi_test_tmp("geo_nan");
    char path[1024], stale[1100], side[1200];
    CU_ASSERT_FATAL(mkdir(dir, 0755) == 0 || errno == EEXIST);
    snprintf(path, sizeof path, "%s/out.tif", dir);
    snprintf(stale, sizeof stale, "%s.hsi-tmp-Ab12Cd", path);
    snprintf(side, sizeof side, "%s.hsi-tmp-Zz99Yy.aux.xml", path);
    FILE *fp = fopen(stale, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    fputs("left by a killed run", fp);
    fclose(fp);
    fp = fopen(side, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    fclose(fp);

    hsi_view v;
    int64_t shape[3] = {2, 3, 4};
    HSI_CHECK_OK(hsi_view_alloc(&v, HSI_F32, 3, shape, HSI_BUF_HOST));
    float *d = v.buf->data;
    for (int i = 0; i < 24; i++) d[i] = (float)i;
    hsi_meta m;
    hsi_meta_init(&m);
    m.map_info.valid = 1; /* by hand, past the parser's checks */
    snprintf(m.map_info.projection, sizeof m.map_info.projection, "UTM");
    m.map_info.zone = 33;
    m.map_info.north = 1;
    m.map_info.ref_x = m.map_info.ref_y = 1;
    m.map_info.easting = 500000;
    m.map_info.northing = 4100000;
    m.map_info.x_size = m.map_info.y_size = 30;
    m.map_info.rotation = NAN;
    hsi_set_quiet(1);
    hsi_status st = hsi_gdal_write_geotiff(path, &v, &m, HSI_DT_INVALID);
    hsi_set_quiet(0);
    HSI_CHECK_OK(st);
    GDALAllRegister();
    GDALDatasetH ds = GDALOpen(path, GA_ReadOnly);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ds);
    double gt[6];
    CPLPushErrorHandler(CPLQuietErrorHandler);
    int have = GDALGetGeoTransform(ds, gt) == CE_None;
    CPLPopErrorHandler();
    for (int i = 0; i < 6; i++) CU_ASSERT(isfinite(gt[i]));
    CU_ASSERT_FALSE(have); /* none set: GDAL's default (0, 1, 0, 0, 0, 1) */
    GDALClose(ds);
    /* the stale temporary and side-car are gone, nothing of ours is left */
    CU_ASSERT_EQUAL(count_entries(dir, "out.tif.hsi-tmp-"), 0);
    CU_ASSERT_EQUAL(count_entries(dir, "out.tif.tmp-"), 0);
    CU_ASSERT_EQUAL(count_entries(dir, "out.tif"), 1);
    /* the same with a good map info: a finite geotransform */
    m.map_info.rotation = 0;
    HSI_CHECK_OK(hsi_gdal_write_geotiff(path, &v, &m, HSI_DT_INVALID));
    ds = GDALOpen(path, GA_ReadOnly);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ds);
    CU_ASSERT_EQUAL(GDALGetGeoTransform(ds, gt), CE_None);
    HSI_ASSERT_NEAR(gt[0], 500000, 1e-6);
    HSI_ASSERT_NEAR(gt[1], 30, 1e-9);
    GDALClose(ds);
    CU_ASSERT_EQUAL(count_entries(dir, "out.tif"), 1);
    hsi_meta_free(&m);
    hsi_view_release(&v);
}

/* Length of the valid UTF-8 sequence at s, 0 when none (RFC 3629). */
static size_t utf8_len(const unsigned char *s, size_t left)
{
    if (s[0] < 0x80) return 1;
    size_t n = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3
             : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
    if (!n || n > left) return 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] > 0x9f) ||
        (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] > 0x8f))
        return 0;
    return n;
}

static int valid_utf8(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t k = utf8_len((const unsigned char *)s + i, n - i);
        if (!k) return 0;
        i += k;
    }
    return 1;
}

/* `hsi info --json` of a Latin-1 header (and bytes that are no text in any
 * encoding) is valid UTF-8 JSON: bad bytes become U+FFFD, a warning says so. */
static void test_info_json_utf8(void)
{
    const char *hdr = hsi_test_tmp("latin1.hdr");
    FILE *fp = fopen(hdr, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    fputs("ENVI\ndescription = {caf\xe9 \xff\xfe \xed\xa0\x80 \xc0\xaf end}\nsamples = 4\n"
          "lines = 3\nbands = 2\ndata type = 2\ninterleave = bsq\nbyte order = 0\n"
          "band names = {r\xe9" "d, \xc3}\nsensor \xb5 = \x80\x81\n",
          fp);
    fclose(fp);
    const char *dat = hsi_test_tmp("latin1");
    fp = fopen(dat, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    for (int i = 0; i < 48; i++) fputc(i, fp);
    fclose(fp);
    static char out[1 << 16];
    int rc = hsi_test_run(out, sizeof out, "( %s info --json '%s' 2>/dev/null )", HSI_BIN, hdr);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT(valid_utf8(out, strlen(out)));
    cJSON *j = cJSON_Parse(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "description");
    CU_ASSERT_FATAL(cJSON_IsString(d));
    CU_ASSERT_STRING_EQUAL(d->valuestring, "caf\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd "
                                           "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd "
                                           "\xef\xbf\xbd\xef\xbf\xbd end");
    const cJSON *names = cJSON_GetObjectItemCaseSensitive(j, "band_names");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(names), 2);
    CU_ASSERT_STRING_EQUAL(cJSON_GetArrayItem(names, 0)->valuestring, "r\xef\xbf\xbd" "d");
    const cJSON *keys = cJSON_GetObjectItemCaseSensitive(j, "keys");
    CU_ASSERT_PTR_NOT_NULL(cJSON_GetObjectItemCaseSensitive(keys, "sensor \xef\xbf\xbd"));
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(j, "warnings"), *e;
    int said = 0;
    cJSON_ArrayForEach(e, w) said += cJSON_IsString(e) && strstr(e->valuestring, "not UTF-8") &&
                                     strstr(e->valuestring, "U+FFFD");
    CU_ASSERT_EQUAL(said, 1);
    cJSON_Delete(j);
    /* stderr says it too */
    rc = hsi_test_run(out, sizeof out, "( %s info --json '%s' 2>&1 >/dev/null )", HSI_BIN, hdr);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "replaced by U+FFFD"));
    /* a valid UTF-8 header is left as it is, without that warning */
    fp = fopen(hdr, "wb");
    fputs("ENVI\ndescription = {caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x8c\x88}\nsamples = 4\n"
          "lines = 3\nbands = 2\ndata type = 2\ninterleave = bsq\nbyte order = 0\n",
          fp);
    fclose(fp);
    rc = hsi_test_run(out, sizeof out, "( %s info --json '%s' 2>/dev/null )", HSI_BIN, hdr);
    CU_ASSERT_EQUAL(rc, 0);
    j = cJSON_Parse(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    d = cJSON_GetObjectItemCaseSensitive(j, "description");
    CU_ASSERT_FATAL(cJSON_IsString(d));
    CU_ASSERT_STRING_EQUAL(d->valuestring, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x8c\x88");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "warnings")), 0);
    cJSON_Delete(j);
}

/* Every prefix of a full header parses or fails cleanly (ASan checks the
 * exact-size copies); prefixes that cut inside the wavelength braces report
 * that unterminated brace. */
static void test_every_prefix(void)
{
    const char *text = "ENVI\ndescription = {x}\nsamples = 4\nlines = 3\nbands = 2\n"
                       "data type = 2\ninterleave = bil\nbyte order = 0\n"
                       "wavelength = {400,\n500}\nmap info = {UTM, 1, 1, 5, 6, 30, 30, 33, "
                       "North, WGS-84}\n";
    size_t len = strlen(text);
    const char *brace = strstr(text, "wavelength = {") + 13;
    const char *close = strstr(brace, "}");
    int ok = 0, unterminated = 0, wrong = 0;
    hsi_set_quiet(1);
    for (size_t k = 0; k <= len; k++) {
        char *copy = malloc(k ? k : 1); /* exact size: ASan sees any over-read */
        memcpy(copy, text, k);
        hsi_meta m;
        hsi_status st = hsi_envi_parse(&m, copy, k, "prefix");
        if (st == HSI_OK) {
            ok++;
            hsi_meta_free(&m);
        } else if (text + k > brace && text + k <= close) {
            /* cut inside the wavelength braces */
            if (strstr(hsi_last_error(), "unterminated '{' in the value of key 'wavelength'"))
                unterminated++;
            else
                wrong++;
        }
        free(copy);
    }
    hsi_set_quiet(0);
    CU_ASSERT_EQUAL(wrong, 0);
    CU_ASSERT_EQUAL(unterminated, (int)(close - brace));
    CU_ASSERT(ok > 0);
}

/* A classification file declaring 2 classes with a pixel of value 200: no
 * class of the file, refused as a label map (naming the value, the pixel,
 * the declared count and the file); in range it reads. */
static void test_label_beyond_classes(void)
{
    const char *hdr = hsi_test_tmp("cls2.hdr"), *dat = hsi_test_tmp("cls2");
    FILE *fp = fopen(hdr, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    fputs("ENVI\nsamples = 4\nlines = 3\nbands = 1\nheader offset = 0\n"
          "file type = ENVI Classification\ndata type = 1\ninterleave = bsq\n"
          "byte order = 0\nclasses = 2\nclass names = {Unclassified, a}\n",
          fp);
    fclose(fp);
    uint8_t px[12] = {0, 1, 1, 0, 1, 1, 200, 0, 0, 0, 1, 0};
    fp = fopen(dat, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    fwrite(px, 1, sizeof px, fp);
    fclose(fp);
    hsi_labels lab;
    HSI_CHECK_FAILS(hsi_labels_open(&lab, hdr, NULL), HSI_ERR_FORMAT,
                    "value 200 at line 1 sample 2 is not one of the 2 classes the header "
                    "declares");
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "cls2"));
    px[6] = 1;
    fp = fopen(dat, "wb");
    fwrite(px, 1, sizeof px, fp);
    fclose(fp);
    HSI_CHECK_OK(hsi_labels_open(&lab, hdr, NULL));
    CU_ASSERT_EQUAL(lab.n_classes, 2);
    CU_ASSERT_EQUAL(lab.counts[1], 6);
    hsi_labels_free(&lab);
}

HSI_SUITE(envi_malformed, 0, {"malformed corpus: specific errors, file and memory", test_corpus},
          {"every prefix of a header", test_every_prefix},
          {"NaN/inf/1e400 numbers leave nothing in hsi_meta", test_non_finite_fields},
          {"GeoTIFF: no NaN geotransform, atomic temporaries", test_geotiff_no_nan_geotransform},
          {"info --json of a Latin-1 header is UTF-8 JSON", test_info_json_utf8},
          {"a label beyond the declared classes", test_label_beyond_classes})

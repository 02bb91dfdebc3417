/* test_cli.c — the hsi command end to end (info, convert, synth), run as a
 * user would run it. Values are checked through the library reader against
 * the source, element by element. */
#include <cJSON.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/cube.h"
#include "io/envi.h"
#include "test.h"


static char out[1 << 16];

static void test_help(void)
{
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " --help"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "info"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "convert"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " help convert"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--interleave"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " frobnicate"), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "unknown command"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " convert only-one-arg.hdr"), 2);
    /* a subcommand's own help, not its parent's */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " bench model --help"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "usage: hsi bench model"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--conv"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " bench --help"), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "usage: hsi bench WHAT"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " bench model cnn2d --conv fast"), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "auto, direct, gemm or cudnn"));
}

static void test_synth_reproduces_samples(void)
{
    const char *base = hsi_test_tmp("synth");
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " synth %s --seed 42", base), 0);
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s.img", base);
    CU_ASSERT(hsi_test_same_file(a, "data_samples/scene.img"));
    snprintf(a, sizeof a, "%s_gt", base);
    CU_ASSERT(hsi_test_same_file(a, "data_samples/scene_gt"));
    /* another seed gives another scene */
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " synth %s --seed 7", base), 0);
    snprintf(b, sizeof b, "%s.img", base);
    CU_ASSERT(!hsi_test_same_file(b, "data_samples/scene.img"));
    /* the committed labels: >= 6 classes, each with >= 100 pixels, and unlabelled pixels */
    hsi_cube gt;
    hsi_cube_init(&gt);
    HSI_CHECK_OK(hsi_envi_open(&gt, "data_samples/scene_gt.hdr"));
    int64_t counts[256] = {0};
    const uint8_t *p = gt.view.buf->data;
    for (int64_t i = 0; i < gt.view.shape[1] * gt.view.shape[2]; i++) counts[p[i]]++;
    int classes = 0;
    for (int c = 1; c < 256; c++) classes += counts[c] >= 100;
    CU_ASSERT(classes >= 6);
    CU_ASSERT(counts[0] > 0);
    CU_ASSERT_EQUAL(gt.meta.n_classes, 9);
    hsi_cube_free(&gt);
}

static void test_info_json(void)
{
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " info data_samples/scene.hdr --json"), 0);
    cJSON *j = cJSON_Parse(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(j, "format")->valuestring, "envi");
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(j, "samples")->valueint, 96);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(j, "lines")->valueint, 96);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(j, "bands")->valueint, 128);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(j, "dtype")->valuestring, "uint16");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(j, "interleave")->valuestring, "bil");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(j, "byte_order")->valuestring, "little");
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(j, "header_offset")->valueint, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(cJSON_GetObjectItem(j, "data_file")->valuestring, "scene.img"));
    cJSON *wl = cJSON_GetObjectItem(j, "wavelengths");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(wl), 128);
    HSI_ASSERT_NEAR(cJSON_GetArrayItem(wl, 0)->valuedouble, 400.0, 1e-9);
    HSI_ASSERT_NEAR(cJSON_GetArrayItem(wl, 127)->valuedouble, 2500.0, 1e-9);
    cJSON_Delete(j);
    /* a label map: pixels per class, counted here from the raw file */
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " info data_samples/scene_gt.hdr --json"), 0);
    j = cJSON_Parse(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    cJSON *cl = cJSON_GetObjectItem(j, "classes");
    char *raw = NULL;
    size_t n = 0;
    HSI_CHECK_OK(hsi_read_file("data_samples/scene_gt", &raw, &n));
    CU_ASSERT_EQUAL(n, 96 * 96);
    int64_t counts[9] = {0};
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)raw[i] < 9) counts[(unsigned char)raw[i]]++;
    free(raw);
    for (int k = 1; k < 9; k++) {
        char id[4];
        snprintf(id, sizeof id, "%d", k);
        cJSON *e = cJSON_GetObjectItem(cl, id);
        CU_ASSERT_PTR_NOT_NULL_FATAL(e);
        CU_ASSERT_EQUAL((int64_t)e->valuedouble, counts[k]);
    }
    cJSON_Delete(j);
}

static void test_info_missing_data(void)
{
    const char *hdr = hsi_test_tmp("lonely.hdr");
    FILE *fp = fopen(hdr, "w");
    fputs("ENVI\nsamples = 7\nlines = 5\nbands = 3\ndata type = 4\ninterleave = bip\n"
          "byte order = 1\nwavelength units = Micrometers\nwavelength = {0.5, 0.6, 0.7}\n", fp);
    fclose(fp);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " info %s", hdr), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "7 samples x 5 lines x 3 bands"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "500.00 - 700.00 nm"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "big-endian"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "lonely.img")); /* the names tried */
}

/* out view (band, line, sample) equals src bands sel[] element by element */
static int64_t count_mismatch(const hsi_view *o, const hsi_view *s, const int64_t *sel, int64_t n)
{
    int64_t bad = 0, io[3], is[3];
    for (int64_t k = 0; k < n; k++)
        for (io[1] = 0; io[1] < s->shape[1]; io[1]++)
            for (io[2] = 0; io[2] < s->shape[2]; io[2]++) {
                io[0] = k;
                is[0] = sel[k];
                is[1] = io[1];
                is[2] = io[2];
                bad += hsi_view_get_f64(o, io) != hsi_view_get_f64(s, is);
            }
    return bad;
}

static void test_convert_roundtrip(void)
{
    const char *dst = hsi_test_tmp("conv_bip.hdr");
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out,
                              HSI_BIN " convert data_samples/scene.hdr %s --interleave bip "
                                      "--dtype float32 --byte-order big --bands 1-10,20",
                              dst),
                          0);
    hsi_cube a, b;
    hsi_cube_init(&a);
    hsi_cube_init(&b);
    HSI_CHECK_OK(hsi_envi_open(&a, "data_samples/scene.hdr"));
    HSI_CHECK_OK(hsi_envi_open(&b, dst));
    CU_ASSERT_EQUAL(b.meta.interleave, HSI_BIP);
    CU_ASSERT_EQUAL(b.meta.byte_order, 1);
    CU_ASSERT_EQUAL(b.view.dtype, HSI_F32);
    CU_ASSERT_EQUAL_FATAL(b.view.shape[0], 11);
    int64_t sel[11] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 19};
    CU_ASSERT_EQUAL(count_mismatch(&b.view, &a.view, sel, 11), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b.meta.wavelength);
    HSI_ASSERT_NEAR(b.meta.wavelength[10], a.meta.wavelength[19], 1e-9);
    CU_ASSERT_STRING_EQUAL(b.meta.description, a.meta.description);
    hsi_cube_free(&b);
    /* GeoTIFF output reopens (through GDAL) with the same values */
    const char *tif = hsi_test_tmp("conv.tif");
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out,
                              HSI_BIN " convert data_samples/scene.hdr %s --bands 5,6", tif), 0);
    HSI_CHECK_OK(hsi_cube_open(&b, tif, NULL));
    CU_ASSERT_EQUAL_FATAL(b.view.shape[0], 2);
    int64_t sel2[2] = {4, 5};
    CU_ASSERT_EQUAL(count_mismatch(&b.view, &a.view, sel2, 2), 0);
    hsi_cube_free(&b);
    hsi_cube_free(&a);
    /* a bad band list fails without leaving an output behind */
    const char *bad = hsi_test_tmp("never.hdr");
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " convert data_samples/scene.hdr %s --bands 0-3",
                        bad),
                    1);
    CU_ASSERT_EQUAL(access(bad, F_OK), -1);
}

/* hsi reads what it writes: a GeoTIFF or PNG beside an ENVI header of the
 * same name is opened by its own content, not through the header. */
static void test_content_before_sidecar(void)
{
    char base[4096];
    snprintf(base, sizeof base, "%s", hsi_test_tmp("sidecar"));
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, "mkdir -p %s && cp data_samples/scene.hdr data_samples/scene.img %s/",
                                       base, base), 0);
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " convert %s/scene.hdr %s/scene.tif", base, base), 0);
    char tif[4200], hdr[4200];
    snprintf(tif, sizeof tif, "%s/scene.tif", base);
    snprintf(hdr, sizeof hdr, "%s/scene.hdr", base);
    hsi_cube t, e;
    hsi_cube_init(&t);
    hsi_cube_init(&e);
    HSI_CHECK_OK(hsi_cube_open(&t, tif, NULL));
    HSI_CHECK_OK(hsi_cube_open(&e, hdr, NULL));
    CU_ASSERT_STRING_EQUAL(t.meta.format, "gdal");
    CU_ASSERT(t.view.shape[0] == 128 && t.view.shape[1] == 96 && t.view.shape[2] == 96);
    int64_t idx[3] = {77, 50, 13};
    HSI_ASSERT_NEAR(hsi_view_get_f64(&t.view, idx), hsi_view_get_f64(&e.view, idx), 0);
    hsi_cube_free(&t);
    hsi_cube_free(&e);
    /* and the raw data file itself still goes through its header */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " info %s/scene.img", base), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "envi"));
}

/* Nothing is overwritten without being asked, and never the input: the
 * header of the input, or its data file under another name. */
static void test_no_silent_overwrite(void)
{
    char base[4096], hdr[4200], before[1 << 13];
    snprintf(base, sizeof base, "%s", hsi_test_tmp("noover"));
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, "mkdir -p %s && cp data_samples/scene.hdr data_samples/scene.img %s/",
                                       base, base), 0);
    snprintf(hdr, sizeof hdr, "%s/scene.hdr", base);
    FILE *fp = fopen(hdr, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    size_t nb = fread(before, 1, sizeof before, fp);
    fclose(fp);
    /* the input itself, even with --overwrite */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " convert %s %s --dtype uint8 --overwrite", hdr, hdr), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "would overwrite the input"));
    /* an output whose data file is the input's data file */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " preprocess %s %s/scene.img.hdr --overwrite", hdr, base), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "would overwrite the input"));
    char after[1 << 13];
    fp = fopen(hdr, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    size_t na = fread(after, 1, sizeof after, fp);
    fclose(fp);
    CU_ASSERT(na == nb && memcmp(before, after, nb) == 0);
    char stray[4200];
    snprintf(stray, sizeof stray, "%s/scene", base);
    CU_ASSERT_NOT_EQUAL(access(stray, F_OK), 0); /* no second data file beside scene.img */
    /* an existing output: refused, then replaced with --overwrite */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " convert %s %s/o.hdr", hdr, base), 0);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " convert %s %s/o.hdr --dtype float32", hdr, base), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--overwrite"));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " convert %s %s/o.hdr --dtype float32 --overwrite", hdr, base),
                    0);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " quicklook %s %s/q.png", hdr, base), 0);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " quicklook %s %s/q.png", hdr, base), 1);
}

/* stats --json is valid JSON whatever the header's strings hold. */
static void test_stats_json_escapes(void)
{
    const char *hdr = hsi_test_tmp("esc.hdr"), *dat = hsi_test_tmp("esc");
    FILE *fp = fopen(hdr, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    fprintf(fp, "ENVI\nsamples = 2\nlines = 2\nbands = 2\nheader offset = 0\ndata type = 4\n"
                "interleave = bsq\nbyte order = 0\nband names = {say \"hi\"\\, \ttabbed}\n");
    fclose(fp);
    float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    fp = fopen(dat, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    fwrite(v, sizeof v, 1, fp);
    fclose(fp);
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, "{ " HSI_BIN " stats %s --json 2>/dev/null; }", hdr), 0);
    cJSON *j = cJSON_Parse(out);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    cJSON *b0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "stats"), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cJSON_GetObjectItem(b0, "name"));
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(b0, "name")->valuestring, "say \"hi\"\\");
    HSI_ASSERT_NEAR(cJSON_GetObjectItem(b0, "mean")->valuedouble, 2.5, 0);
    cJSON_Delete(j);
}

HSI_SUITE(cli, 0, {"help and usage errors", test_help},
          {"synth reproduces data_samples", test_synth_reproduces_samples},
          {"info --json", test_info_json}, {"info with missing data file", test_info_missing_data},
          {"convert round trip", test_convert_roundtrip},
          {"a file's own format before an ENVI side-car", test_content_before_sidecar},
          {"no output replaced unasked, never the input", test_no_silent_overwrite},
          {"stats --json escapes the header's strings", test_stats_json_escapes})

/* test_mat.c — MATLAB .mat reader: files written by scipy.io.savemat
 * (tests/fixtures/make_formats_fixtures.py), v5 and v7.3 (HDF5) files written
 * here through matio with values from an index formula, SalinasA against
 * scipy's loadmat samples, and malformed input: truncated copies of every
 * fixture and of the real ../shared files at several points, corrupt zlib
 * data, data elements shorter than their dimensions, FIFOs. */
#include "test.h"

#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <matio.h>
#if defined(__has_include)
#if __has_include(<hdf5.h>)
#include <hdf5.h>
#define HAVE_HDF5_H 1
#endif
#endif

#include "io/mat.h"

#define FIX "tests/fixtures/formats/"

/* cube(r, c, b) = 100 r + 10 c + b, MATLAB shape (5, 4, 3) */
static int check_formula(const hsi_view *v, double scale, double add)
{
    int bad = 0;
    int64_t idx[3];
    for (idx[0] = 0; idx[0] < v->shape[0]; idx[0]++)
        for (idx[1] = 0; idx[1] < v->shape[1]; idx[1]++)
            for (idx[2] = 0; idx[2] < v->shape[2]; idx[2]++) {
                double want = (100.0 * idx[1] + 10.0 * idx[2] + idx[0]) * scale + add;
                if (hsi_view_get_f64(v, idx) != want) bad++;
            }
    return bad;
}

static void test_v5_compressed(void)
{
    hsi_cube c;
    HSI_CHECK_OK(hsi_mat_open(&c, FIX "synth_u16.mat", NULL));
    CU_ASSERT_EQUAL(c.view.ndim, 3);
    CU_ASSERT_EQUAL(c.view.shape[0], 3); /* bands */
    CU_ASSERT_EQUAL(c.view.shape[1], 5); /* lines = MATLAB rows */
    CU_ASSERT_EQUAL(c.view.shape[2], 4); /* samples = MATLAB cols */
    CU_ASSERT_EQUAL(c.view.dtype, HSI_U16);
    /* column-major, no copy: row stride is one element */
    CU_ASSERT_EQUAL(c.view.strides[1], 2);
    CU_ASSERT_EQUAL(c.view.strides[2], 10);
    CU_ASSERT_EQUAL(c.view.strides[0], 40);
    CU_ASSERT_EQUAL(check_formula(&c.view, 1, 0), 0);
    CU_ASSERT_STRING_EQUAL(c.meta.format, "mat");
    CU_ASSERT_EQUAL(c.meta.n_bands, 3);
    const hsi_kv *kv = hsi_meta_find(&c.meta, "mat variable");
    CU_ASSERT_PTR_NOT_NULL_FATAL(kv);
    CU_ASSERT_STRING_EQUAL(kv->value, "cube");
    hsi_cube_free(&c);

    HSI_CHECK_OK(hsi_mat_open(&c, FIX "synth_v5_uncompressed.mat", NULL));
    CU_ASSERT_EQUAL(c.view.dtype, HSI_F32);
    CU_ASSERT_EQUAL(check_formula(&c.view, 0.5, 0), 0);
    hsi_cube_free(&c);
}

static void test_var_choice(void)
{
    hsi_cube c;
    HSI_CHECK_FAILS(hsi_mat_open(&c, FIX "synth_two.mat", NULL), HSI_ERR_ARG, "--var");
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "a (5x4x3 float64)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "b (5x4x3 int16)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "gt (5x4 uint8)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "z (5x4x3 complex)"));
    HSI_CHECK_FAILS(hsi_mat_open(&c, FIX "synth_two.mat", "z"), HSI_ERR_UNSUPPORTED, "complex");
    HSI_CHECK_OK(hsi_mat_open(&c, FIX "synth_two.mat", "b"));
    CU_ASSERT_EQUAL(c.view.dtype, HSI_I16);
    CU_ASSERT_EQUAL(check_formula(&c.view, 1, -7), 0);
    hsi_cube_free(&c);
    HSI_CHECK_OK(hsi_mat_open(&c, FIX "synth_two.mat", "a"));
    CU_ASSERT_EQUAL(check_formula(&c.view, 0.25, 0), 0);
    hsi_cube_free(&c);
    HSI_CHECK_FAILS(hsi_mat_open(&c, FIX "synth_two.mat", "zz"), HSI_ERR_NOT_FOUND, "no variable 'zz'");
    /* the 2-D label map is chosen automatically among 3-D arrays */
    hsi_view v;
    char *name = NULL;
    HSI_CHECK_OK(hsi_mat_open_2d(&v, &name, FIX "synth_two.mat", NULL));
    CU_ASSERT_STRING_EQUAL(name, "gt");
    CU_ASSERT_EQUAL(v.shape[0], 5);
    CU_ASSERT_EQUAL(v.shape[1], 4);
    int64_t idx[2] = {4, 2};
    CU_ASSERT_EQUAL(hsi_view_get_f64(&v, idx), 1); /* r % 3 */
    free(name);
    hsi_view_release(&v);
    /* a 2-D map opened as a cube by name: one band */
    HSI_CHECK_OK(hsi_mat_open(&c, FIX "synth_two.mat", "gt"));
    CU_ASSERT_EQUAL(c.view.shape[0], 1);
    CU_ASSERT_EQUAL(c.view.shape[1], 5);
    hsi_cube_free(&c);
}

/* A ground-truth file (one 2-D map, no cube) opens as a one-band
 * classification cube. */
static void test_gt_as_cube(void)
{
    hsi_cube c;
    HSI_CHECK_OK(hsi_mat_open(&c, FIX "synth_gt.mat", NULL));
    CU_ASSERT(c.view.shape[0] == 1 && c.view.shape[1] == 6 && c.view.shape[2] == 7);
    CU_ASSERT_EQUAL(c.view.dtype, HSI_U8);
    CU_ASSERT_EQUAL(c.meta.file_kind, HSI_FILE_CLASSIFICATION);
    CU_ASSERT_EQUAL(c.meta.n_classes, 6);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c.meta.class_names);
    CU_ASSERT_STRING_EQUAL(c.meta.class_names[5], "Class 5");
    int64_t i[3] = {0, 4, 3};
    CU_ASSERT_EQUAL(hsi_view_get_f64(&c.view, i), 5);
    hsi_cube_free(&c);
}

static void test_v73(void)
{
    const char *p = hsi_test_tmp("v73.mat");
    mat_t *mat = Mat_CreateVer(p, NULL, MAT_FT_MAT73);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mat);
    double data[5 * 4 * 3];
    for (int b = 0; b < 3; b++)
        for (int col = 0; col < 4; col++)
            for (int r = 0; r < 5; r++) data[r + 5 * col + 20 * b] = 100.0 * r + 10.0 * col + b;
    size_t dims[3] = {5, 4, 3};
    matvar_t *mv = Mat_VarCreate("hsi", MAT_C_DOUBLE, MAT_T_DOUBLE, 3, dims, data, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mv);
    CU_ASSERT_EQUAL(Mat_VarWrite(mat, mv, MAT_COMPRESSION_NONE), 0);
    Mat_VarFree(mv);
    Mat_Close(mat);
    hsi_cube c;
    HSI_CHECK_OK(hsi_mat_open(&c, p, NULL));
    CU_ASSERT_EQUAL(c.view.shape[0], 3);
    CU_ASSERT_EQUAL(c.view.shape[1], 5);
    CU_ASSERT_EQUAL(c.view.shape[2], 4);
    CU_ASSERT_EQUAL(check_formula(&c.view, 1, 0), 0);
    const hsi_kv *kv = hsi_meta_find(&c.meta, "mat version");
    CU_ASSERT_PTR_NOT_NULL_FATAL(kv);
    CU_ASSERT_STRING_EQUAL(kv->value, "7.3");
    hsi_cube_free(&c);
}

static void test_malformed(void)
{
    hsi_cube c;
    hsi_status st = hsi_mat_open(&c, FIX "bad_truncated.mat", NULL);
    CU_ASSERT_NOT_EQUAL(st, HSI_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "bad_truncated.mat"));
    /* a text header followed by garbage */
    const char *p = hsi_test_tmp("garbage.mat");
    FILE *fp = fopen(p, "wb");
    char hdr[128];
    memset(hdr, ' ', sizeof hdr);
    memcpy(hdr, "MATLAB 5.0 MAT-file", 19);
    hdr[124] = 0;
    hdr[125] = 1;
    hdr[126] = 'I';
    hdr[127] = 'M';
    fwrite(hdr, 1, sizeof hdr, fp);
    for (int i = 0; i < 300; i++) fputc((i * 37) & 0xff, fp);
    fclose(fp);
    st = hsi_mat_open(&c, p, NULL);
    CU_ASSERT_NOT_EQUAL(st, HSI_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "garbage.mat"));
    HSI_CHECK_FAILS(hsi_mat_open(&c, hsi_test_tmp("missing.mat"), NULL), HSI_ERR_IO,
                    "missing.mat");
    char probe[16] = "MATLAB 5.0 MAT";
    CU_ASSERT_EQUAL(hsi_mat_probe(probe, 14), 1);
    CU_ASSERT_EQUAL(hsi_mat_probe("ENVI\nsamples", 12), 0);
}

/* ------------------------------------------------ truncated and damaged */

/* Copies the first n bytes of src (size bytes, in memory) to tmp/name. */
static const char *write_prefix(const char *name, const unsigned char *src, size_t n)
{
    const char *p = hsi_test_tmp(name);
    FILE *fp = fopen(p, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    CU_ASSERT_EQUAL(fwrite(src, 1, n, fp), n);
    fclose(fp);
    return p;
}

/* Every way in (list, cube, 2-D map) refuses path with HSI_ERR_FORMAT and a
 * message naming the file and containing want (NULL: any). Returns the
 * number of calls that did not. */
static int refused(const char *path, const char *want)
{
    int bad = 0;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    hsi_cube c;
    hsi_view v;
    hsi_mat_var *vars = NULL;
    int n = -1;
    hsi_status st[3];
    char msg[3][1024];
    st[0] = hsi_mat_list(&vars, &n, path);
    snprintf(msg[0], sizeof msg[0], "%s", hsi_last_error());
    st[1] = hsi_mat_open(&c, path, NULL);
    snprintf(msg[1], sizeof msg[1], "%s", hsi_last_error());
    st[2] = hsi_mat_open_2d(&v, NULL, path, NULL);
    snprintf(msg[2], sizeof msg[2], "%s", hsi_last_error());
    if (st[0] == HSI_OK) free(vars);
    if (st[1] == HSI_OK) hsi_cube_free(&c);
    if (st[2] == HSI_OK) hsi_view_release(&v);
    CU_ASSERT(vars == NULL || st[0] == HSI_OK);
    for (int k = 0; k < 3; k++) {
        int ok = st[k] == HSI_ERR_FORMAT && strstr(msg[k], base) && (!want || strstr(msg[k], want));
        if (!ok) {
            fprintf(stderr, "\n  %s: call %d gave %s: %s (wanted '%s')\n", base, k,
                    hsi_status_name(st[k]), msg[k], want ? want : "");
            bad++;
        }
    }
    return bad;
}

static unsigned char *slurp(const char *path, size_t *n)
{
    char *t = NULL;
    HSI_CHECK_OK(hsi_read_file(path, &t, n));
    return (unsigned char *)t;
}

/* A file cut at each point refuses to open: 50 %, inside the 128-byte
 * header, the header alone, inside the first tag, one byte short, and (for
 * files over 1,000 bytes) a 1,000-byte prefix. */
static int truncations(const char *tag, const char *src_path)
{
    size_t n;
    unsigned char *src = slurp(src_path, &n);
    size_t cuts[] = {n / 2, 64, 128, 131, n - 1, 1000};
    int bad = 0;
    for (size_t k = 0; k < sizeof cuts / sizeof *cuts; k++) {
        if (cuts[k] >= n) continue;
        char name[96];
        snprintf(name, sizeof name, "cut_%s_%zu.mat", tag, cuts[k]);
        const char *p = write_prefix(name, src, cuts[k]);
        bad += refused(p, "truncated");
    }
    free(src);
    return bad;
}

static void test_truncated_fixtures(void)
{
    const char *files[] = {"synth_u16", "synth_v5_uncompressed", "synth_two", "synth_gt"};
    for (int i = 0; i < 4; i++) {
        char p[256];
        snprintf(p, sizeof p, FIX "%s.mat", files[i]);
        CU_ASSERT_EQUAL(truncations(files[i], p), 0);
    }
    /* the committed truncated file, and the exact words of one message */
    CU_ASSERT_EQUAL(refused(FIX "bad_truncated.mat", "needs 149 bytes of compressed data, the "
                                                     "file ends after 14 of them"), 0);
    size_t n;
    unsigned char *src = slurp(FIX "synth_v5_uncompressed.mat", &n);
    const char *p = write_prefix("cut_v5u_300.mat", src, 300);
    CU_ASSERT_EQUAL(refused(p, "variable 'cube' (element 1 at offset 128) needs 296 bytes of "
                               "data, the file ends after 164 of them"), 0);
    free(src);
    /* a header-only file says so */
    src = slurp(FIX "synth_u16.mat", &n);
    p = write_prefix("header_only.mat", src, 128);
    CU_ASSERT_EQUAL(refused(p, "holds no variables: the file ends after its 128-byte header"), 0);
    free(src);
}

/* Damage inside a complete file: the data element shorter or longer than
 * the dimensions, dimensions larger than the data, corrupt zlib data. */
static void test_damaged(void)
{
    size_t n;
    unsigned char *src = slurp(FIX "synth_v5_uncompressed.mat", &n);
    CU_ASSERT_EQUAL_FATAL(n, 432);
    /* real part tag at 184: miSINGLE (7), 240 bytes = 5 x 4 x 3 float32 */
    CU_ASSERT_EQUAL_FATAL(src[184], 7);
    CU_ASSERT_EQUAL_FATAL(src[188], 240);
    hsi_cube c;
    src[188] = 232;
    const char *p = write_prefix("short_data.mat", src, n);
    HSI_CHECK_FAILS(hsi_mat_open(&c, p, NULL), HSI_ERR_FORMAT,
                    "variable 'cube' (60 elements of float32) needs 240 bytes of data, its data "
                    "element holds 232");
    src[188] = 248; /* past the variable's end */
    p = write_prefix("long_data.mat", src, n);
    CU_ASSERT_EQUAL(refused(p, "past the variable's end"), 0);
    src[188] = 240;
    src[160] = 50; /* dims 50 x 4 x 3: the data is a tenth of that */
    p = write_prefix("big_dims.mat", src, n);
    HSI_CHECK_FAILS(hsi_mat_open(&c, p, NULL), HSI_ERR_FORMAT, "needs 2,400 bytes of data");
    free(src);

    /* one corrupt byte inside zlib data: the stream's checksum catches it */
    src = slurp(FIX "synth_u16.mat", &n);
    src[128 + 8 + 100] ^= 0x5a;
    p = write_prefix("corrupt_zlib.mat", src, n);
    CU_ASSERT_EQUAL(refused(p, "corrupt"), 0);
    free(src);
}

/* Files matio writes (v5, compressed or not) read back bit-exactly. */
static void test_matio_v5(void)
{
    for (int z = 0; z < 2; z++) {
        const char *p = hsi_test_tmp(z ? "matio_z.mat" : "matio_raw.mat");
        mat_t *mat = Mat_CreateVer(p, NULL, MAT_FT_MAT5);
        CU_ASSERT_PTR_NOT_NULL_FATAL(mat);
        uint16_t data[5 * 4 * 3];
        for (int b = 0; b < 3; b++)
            for (int col = 0; col < 4; col++)
                for (int r = 0; r < 5; r++)
                    data[r + 5 * col + 20 * b] = (uint16_t)(100 * r + 10 * col + b);
        size_t dims[3] = {5, 4, 3};
        matvar_t *mv = Mat_VarCreate("hsi", MAT_C_UINT16, MAT_T_UINT16, 3, dims, data, 0);
        CU_ASSERT_PTR_NOT_NULL_FATAL(mv);
        CU_ASSERT_EQUAL(Mat_VarWrite(mat, mv, z ? MAT_COMPRESSION_ZLIB : MAT_COMPRESSION_NONE), 0);
        Mat_VarFree(mv);
        size_t sd[2] = {1, 5};
        mv = Mat_VarCreate("note", MAT_C_CHAR, MAT_T_UINT8, 2, sd, "hello", 0);
        CU_ASSERT_PTR_NOT_NULL_FATAL(mv);
        CU_ASSERT_EQUAL(Mat_VarWrite(mat, mv, z ? MAT_COMPRESSION_ZLIB : MAT_COMPRESSION_NONE), 0);
        Mat_VarFree(mv);
        Mat_Close(mat);
        hsi_cube c;
        HSI_CHECK_OK(hsi_mat_open(&c, p, NULL));
        CU_ASSERT_EQUAL(c.view.dtype, HSI_U16);
        CU_ASSERT_EQUAL(check_formula(&c.view, 1, 0), 0);
        hsi_cube_free(&c);
        HSI_CHECK_FAILS(hsi_mat_open(&c, p, "note"), HSI_ERR_UNSUPPORTED, "'note' is char");
        CU_ASSERT_EQUAL(truncations(z ? "matio_z" : "matio_raw", p), 0);
    }
}

/* A big-endian ('MI') v5 file: the fixture with every 4-byte word swapped
 * (the name's bytes stay), read to the same values. */
static void test_big_endian(void)
{
    size_t n;
    unsigned char *src = slurp(FIX "synth_v5_uncompressed.mat", &n);
    CU_ASSERT_EQUAL_FATAL(n, 432);
    unsigned char *be = malloc(n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(be);
    memcpy(be, src, n);
    be[124] = 0x01; /* version 0x0100 written big-endian */
    be[125] = 0x00;
    be[126] = 'M';
    be[127] = 'I';
    for (size_t off = 128; off + 4 <= n; off += 4) {
        if (off == 180) continue; /* "cube", the small element's data */
        for (int k = 0; k < 4; k++) be[off + k] = src[off + 3 - k];
    }
    const char *p = write_prefix("big_endian.mat", be, n);
    hsi_cube c;
    HSI_CHECK_OK(hsi_mat_open(&c, p, NULL));
    CU_ASSERT_EQUAL(c.view.dtype, HSI_F32);
    CU_ASSERT_EQUAL(check_formula(&c.view, 0.5, 0), 0);
    hsi_cube_free(&c);
    CU_ASSERT_EQUAL(truncations("big_endian", p), 0);
    free(be);
    free(src);
}

/* A file of no variables says what it found. */
static void test_no_variables(void)
{
    const char *p = hsi_test_tmp("only_char.mat");
    mat_t *mat = Mat_CreateVer(p, NULL, MAT_FT_MAT5);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mat);
    size_t sd[2] = {1, 5};
    matvar_t *mv = Mat_VarCreate("s", MAT_C_CHAR, MAT_T_UINT8, 2, sd, "hello", 0);
    CU_ASSERT_EQUAL(Mat_VarWrite(mat, mv, MAT_COMPRESSION_NONE), 0);
    Mat_VarFree(mv);
    double x[20] = {0};
    size_t xd[2] = {5, 4};
    mv = Mat_VarCreate("x", MAT_C_DOUBLE, MAT_T_DOUBLE, 2, xd, x, 0);
    CU_ASSERT_EQUAL(Mat_VarWrite(mat, mv, MAT_COMPRESSION_ZLIB), 0);
    Mat_VarFree(mv);
    Mat_Close(mat);
    hsi_cube c;
    /* each variable says why it is not the cube / the label map */
    HSI_CHECK_FAILS(hsi_mat_open(&c, p, NULL), HSI_ERR_ARG,
                    "no 3-D numeric array (rows x cols x bands); name one with --var NAME. "
                    "Variables: s (1x5 char), x (5x4 float64, 2-D)");
    hsi_view v;
    HSI_CHECK_FAILS(hsi_mat_open_2d(&v, NULL, p, NULL), HSI_ERR_ARG,
                    "Variables: s (1x5 char), x (5x4 float64, not integer)");
    HSI_CHECK_FAILS(hsi_mat_open(&c, p, "s"), HSI_ERR_UNSUPPORTED,
                    "variable 's' is char; expected a real numeric or logical array");
    /* an element that is not a variable */
    size_t n;
    unsigned char *src = slurp(FIX "synth_u16.mat", &n);
    unsigned char buf[128 + 16];
    memcpy(buf, src, 128);
    memset(buf + 128, 0, 16);
    buf[128] = 7; /* miSINGLE, 8 bytes */
    buf[132] = 8;
    p = write_prefix("no_var.mat", buf, sizeof buf);
    CU_ASSERT_EQUAL(refused(p, "no named variable among its 1 elements: element at offset 128 "
                               "of type 7 (not a variable)"), 0);
    free(src);
    /* not a MAT-file at all */
    p = write_prefix("text.mat", (const unsigned char *)"ENVI\nsamples = 3\n", 17);
    HSI_CHECK_FAILS(hsi_mat_open(&c, p, NULL), HSI_ERR_FORMAT, "not a MAT-file");
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "found 'ENVI\\x0asampl'"));
}

/* v7.3: a file shorter than its HDF5 superblock says is refused, and one
 * whose superblock points at a driver information block past its end. */
static void test_v73_truncated(void)
{
    const char *p = hsi_test_tmp("v73_full.mat");
    mat_t *mat = Mat_CreateVer(p, NULL, MAT_FT_MAT73);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mat);
    double data[20 * 10 * 6];
    for (int i = 0; i < 1200; i++) data[i] = i + 1;
    size_t dims[3] = {20, 10, 6};
    matvar_t *mv = Mat_VarCreate("hsi", MAT_C_DOUBLE, MAT_T_DOUBLE, 3, dims, data, 0);
    CU_ASSERT_EQUAL(Mat_VarWrite(mat, mv, MAT_COMPRESSION_NONE), 0);
    Mat_VarFree(mv);
    Mat_Close(mat);
    size_t n;
    unsigned char *src = slurp(p, &n);
    size_t cuts[] = {n / 2, n - 1, 600, 4000};
    for (int k = 0; k < 4; k++) {
        if (cuts[k] >= n) continue;
        char name[64];
        snprintf(name, sizeof name, "v73_cut_%zu.mat", cuts[k]);
        CU_ASSERT_EQUAL(refused(write_prefix(name, src, cuts[k]), "truncated"), 0);
    }
    /* a superblock pointing at a driver information block whose size runs
     * past the end (libhdf5 would allocate it: 4 GiB for a 949-byte file
     * that fuzz_mat found) */
    const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    size_t at = 0;
    while (at + 64 <= n && memcmp(src + at, sig, 8) != 0) at = at ? 2 * at : 512;
    CU_ASSERT_FATAL(at + 64 <= n && src[at + 8] == 0 && src[at + 13] == 8); /* matio: version 0 */
    uint64_t base = 0;
    for (int i = 7; i >= 0; i--) base = base << 8 | src[at + 24 + i];
    uint64_t drv = n - 8 - base; /* the block's header in the file's last 8 bytes */
    for (int i = 0; i < 8; i++) src[at + 48 + i] = (unsigned char)(drv >> (8 * i));
    memset(src + n - 4, 0xff, 4); /* its size: 2^32 - 1 */
    CU_ASSERT_EQUAL(refused(write_prefix("v73_driver_info.mat", src, n), "driver information block"), 0);
    /* the same block addressed from where the signature lies while the
     * superblock records another base address (HDF5 goes by the signature's
     * place: a second file from fuzz_mat) */
    for (int i = 0; i < 8; i++) src[at + 24 + i] = 0;
    drv = n - 8 - at;
    for (int i = 0; i < 8; i++) src[at + 48 + i] = (unsigned char)(drv >> (8 * i));
    memset(src + drv + 4, 0, 4); /* a size of 0 where the recorded base would put the block */
    CU_ASSERT_EQUAL(refused(write_prefix("v73_driver_info_base.mat", src, n), "driver information block"), 0);
    free(src);
    hsi_cube c;
    HSI_CHECK_OK(hsi_mat_open(&c, p, NULL));
    int64_t idx[3] = {5, 19, 9}; /* last element: 1200 */
    CU_ASSERT_EQUAL(hsi_view_get_f64(&c.view, idx), 1200);
    hsi_cube_free(&c);
}

#ifdef HAVE_HDF5_H
/* A v7.3 file (written here with HDF5: the 128-byte MAT header in a 512-byte
 * user block, dataset "/hsi" with its MATLAB_class attribute) whose chunked
 * dataset has only one of its three chunks written: the other two would
 * read as fill values, so the read is refused. With every chunk written the
 * same file reads back exactly. */
static void write_h5_mat(const char *p, int all_chunks)
{
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    H5Pset_userblock(fcpl, 512);
    hid_t f = H5Fcreate(p, H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
    CU_ASSERT_FATAL(f >= 0);
    hsize_t dims[3] = {3, 4, 5}, chunk[3] = {1, 4, 5}; /* MATLAB 5 x 4 x 3 */
    hid_t space = H5Screate_simple(3, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 3, chunk);
    hid_t d = H5Dcreate2(f, "/hsi", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    CU_ASSERT_FATAL(d >= 0);
    double v[60];
    for (int b = 0; b < 3; b++)
        for (int col = 0; col < 4; col++)
            for (int r = 0; r < 5; r++) v[r + 5 * col + 20 * b] = 100.0 * r + 10.0 * col + b;
    hsize_t start[3] = {0, 0, 0}, count[3] = {all_chunks ? 3 : 1, 4, 5};
    hid_t mem = H5Screate_simple(3, count, NULL);
    H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, count, NULL);
    CU_ASSERT(H5Dwrite(d, H5T_NATIVE_DOUBLE, mem, space, H5P_DEFAULT, v) >= 0);
    hid_t str = H5Tcopy(H5T_C_S1), as = H5Screate(H5S_SCALAR);
    H5Tset_size(str, 6);
    hid_t a = H5Acreate2(d, "MATLAB_class", str, as, H5P_DEFAULT, H5P_DEFAULT);
    CU_ASSERT(H5Awrite(a, str, "double") >= 0);
    H5Aclose(a);
    H5Sclose(as);
    H5Tclose(str);
    H5Sclose(mem);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(f);
    H5Pclose(fcpl);
    unsigned char hdr[128];
    memset(hdr, ' ', sizeof hdr);
    memcpy(hdr, "MATLAB 7.3 MAT-file, written by test_mat.c", 42);
    memset(hdr + 116, 0, 8);
    hdr[124] = 0x00; /* version 0x0200, little-endian */
    hdr[125] = 0x02;
    hdr[126] = 'I';
    hdr[127] = 'M';
    FILE *fp = fopen(p, "r+b");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    CU_ASSERT_EQUAL(fwrite(hdr, 1, sizeof hdr, fp), sizeof hdr);
    fclose(fp);
}

static void test_v73_unwritten_chunks(void)
{
    const char *p = hsi_test_tmp("v73_part.mat");
    write_h5_mat(p, 1);
    hsi_cube c;
    HSI_CHECK_OK(hsi_mat_open(&c, p, NULL));
    CU_ASSERT_EQUAL(check_formula(&c.view, 1, 0), 0);
    hsi_cube_free(&c);
    write_h5_mat(p, 0);
    HSI_CHECK_FAILS(hsi_mat_open(&c, p, NULL), HSI_ERR_FORMAT,
                    "HDF5 dataset '/hsi' has only part of its storage allocated");
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "v73_part.mat: variable 'hsi'"));
}
#else
static void test_v73_unwritten_chunks(void)
{
    fprintf(stderr, "\n  hdf5.h not found at build time: case skipped\n");
}
#endif

/* A FIFO or a directory is refused at once, never waited on (in a child
 * under alarm(10): a hang is a failure, not a stuck suite). */
static void test_not_regular(void)
{
    const char *fifo = hsi_test_tmp("pipe.mat");
    if (mkfifo(fifo, 0600) != 0) {
        fprintf(stderr, "\n  mkfifo %s: %s: FIFO case skipped\n", fifo, strerror(errno));
    } else {
        pid_t pid = fork();
        CU_ASSERT_FATAL(pid >= 0);
        if (pid == 0) {
            alarm(10);
            hsi_mat_var *vars;
            int n;
            hsi_status st = hsi_mat_list(&vars, &n, fifo);
            _exit(st == HSI_ERR_IO && strstr(hsi_last_error(), "FIFO") &&
                          strstr(hsi_last_error(), "MATLAB file")
                      ? 0
                      : 1);
        }
        int status = 0;
        CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
        CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    hsi_cube c;
    HSI_CHECK_FAILS(hsi_mat_open(&c, hsi_test_tmpdir(), NULL), HSI_ERR_IO, "a directory");
}

static void test_salinas_a(void)
{
    const char *p = hsi_test_shared("salinas_a/SalinasA_corrected.mat");
    if (!p) return;
    FILE *fp = fopen(FIX "salinas_a_samples.txt", "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    hsi_cube c;
    HSI_CHECK_OK(hsi_mat_open(&c, p, NULL));
    CU_ASSERT_EQUAL(c.view.shape[0], 204);
    CU_ASSERT_EQUAL(c.view.shape[1], 83);
    CU_ASSERT_EQUAL(c.view.shape[2], 86);
    CU_ASSERT_EQUAL(c.view.dtype, HSI_I16); /* stored type; the MATLAB class is double */
    const hsi_kv *kv = hsi_meta_find(&c.meta, "mat class");
    CU_ASSERT_PTR_NOT_NULL_FATAL(kv);
    CU_ASSERT_STRING_EQUAL(kv->value, "float64");
    char line[256];
    int n = 0, bad = 0;
    while (fgets(line, sizeof line, fp)) {
        long long r, col, b, val;
        double sum;
        if (sscanf(line, "sum %lf", &sum) == 1) {
            double s = 0;
            int64_t idx[3];
            for (idx[0] = 0; idx[0] < 204; idx[0]++)
                for (idx[1] = 0; idx[1] < 83; idx[1]++)
                    for (idx[2] = 0; idx[2] < 86; idx[2]++) s += hsi_view_get_f64(&c.view, idx);
            CU_ASSERT_EQUAL(s, sum);
        } else if (sscanf(line, "%lld %lld %lld %lld", &r, &col, &b, &val) == 4) {
            int64_t idx[3] = {b, r, col}; /* (band, line = row, sample = col) */
            if (hsi_view_get_f64(&c.view, idx) != (double)val) bad++;
            n++;
        }
    }
    fclose(fp);
    CU_ASSERT_EQUAL(n, 64);
    CU_ASSERT_EQUAL(bad, 0);
    hsi_cube_free(&c);
}

/* The real files cut at several points: every one refused with its name;
 * the whole files still open (their values are checked above and in
 * test_labels.c). A corrupt byte deep inside SalinasA's zlib stream is
 * found by inflating the variable to its end. */
static void test_shared_truncated(void)
{
    const char *files[] = {"salinas_a/SalinasA_corrected.mat", "salinas_a/SalinasA_gt.mat",
                           "indian_pines/Indian_pines_gt.mat", "pavia_university/PaviaU_gt.mat",
                           "salinas/Salinas_gt.mat", "ksc/KSC_gt.mat", "botswana/Botswana_gt.mat"};
    int seen = 0;
    for (int i = 0; i < 7; i++) {
        const char *p = hsi_test_shared(files[i]);
        if (!p) continue;
        seen++;
        char full[4096], tag[64];
        snprintf(full, sizeof full, "%s", p);
        snprintf(tag, sizeof tag, "shared%d", i);
        CU_ASSERT_EQUAL(truncations(tag, full), 0);
        hsi_mat_var *vars;
        int n;
        HSI_CHECK_OK(hsi_mat_list(&vars, &n, full));
        CU_ASSERT_EQUAL(n, 1);
        free(vars);
    }
    CU_ASSERT(seen > 0);
    const char *p = hsi_test_shared("salinas_a/SalinasA_corrected.mat");
    if (!p) return;
    size_t n;
    unsigned char *src = slurp(p, &n);
    CU_ASSERT_EQUAL_FATAL(n, 1539086);
    hsi_cube c;
    const char *q = write_prefix("salinas_half.mat", src, n / 2);
    HSI_CHECK_FAILS(hsi_mat_open(&c, q, NULL), HSI_ERR_FORMAT,
                    "variable 'salinasA_corrected' (element 1 at offset 128) needs 1,538,950 "
                    "bytes of compressed data, the file ends after 769,407 of them");
    src[1000000] ^= 0x01;
    q = write_prefix("salinas_flip.mat", src, n);
    HSI_CHECK_FAILS(hsi_mat_open(&c, q, NULL), HSI_ERR_FORMAT, "compressed data is corrupt");
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "salinasA_corrected"));
    free(src);
}

HSI_SUITE(mat, 0, {"v5 compressed/uncompressed orientation", test_v5_compressed},
          {"variable choice and --var", test_var_choice},
          {"ground truth as a classification cube", test_gt_as_cube},
          {"v7.3 (HDF5) via matio", test_v73}, {"malformed files", test_malformed},
          {"truncated fixtures at 50 %, in the header, 1 byte short", test_truncated_fixtures},
          {"data element vs dimensions, corrupt zlib", test_damaged},
          {"matio-written v5 files, whole and cut", test_matio_v5},
          {"big-endian v5", test_big_endian},
          {"no variables: what was found instead", test_no_variables},
          {"v7.3 cut short of its superblock's size, or its driver block past the end", test_v73_truncated},
          {"v7.3 with unwritten chunks", test_v73_unwritten_chunks},
          {"FIFO and directory refused without blocking", test_not_regular})
HSI_SUITE(mat_shared, HSI_SUITE_NEEDS_SHARED, {"SalinasA vs scipy loadmat", test_salinas_a},
          {"real .mat files cut and corrupted", test_shared_truncated})

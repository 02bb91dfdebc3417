/* test_report.c — what a training run leaves to look at (pipeline/report.h):
 * curves.png, confusion.png and spectra.png decode with GDAL at their
 * documented sizes; report.html holds every number of metrics.json (found
 * under its JSON path, formatted as report.h says), embeds the very PNG
 * files and says whether the protocol leaked; history.csv's val_loss is
 * measured with validation and empty without; a picture that cannot be
 * drawn leaves the rest written; `hsi profile train --plot` draws its bar
 * chart. Tiny runs on data_samples/. */
#include <cJSON.h>
#include <unistd.h>

#include "pipeline/report.h"
#include "test.h"

#define SCENE "data_samples/scene.hdr data_samples/scene_gt.hdr"

static char out[1 << 16];

static void check_png(const char *dir, const char *name, int w, int h)
{
    char p[4096];
    int pw = 0, ph = 0, pn = 0;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int ok = hsi_test_png_size(p, &pw, &ph, &pn);
    if (!ok || pw != w || ph != h || pn != 3)
        fprintf(stderr, "\n  %s: decoded %d, %d x %d x %d (expected %d x %d x 3)\n", p, ok, pw, ph,
                pn, w, h);
    CU_ASSERT(ok && pw == w && ph == h && pn == 3);
}

static char *slurp(const char *dir, const char *name)
{
    char p[4096], *text = NULL;
    size_t n = 0;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (hsi_read_file(p, &text, &n) != HSI_OK) return NULL;
    return text;
}

/* report.h's number rule, written again here. */
static void fmt(char *b, size_t n, double v)
{
    if (v == floor(v) && fabs(v) < 1e15)
        snprintf(b, n, "%.0f", v);
    else
        snprintf(b, n, "%.4g", v);
}

/* Every number (and null) of v is in html as data-m="path">value<. */
static int figures_missing(const char *html, const cJSON *v, const char *path, int *checked)
{
    int missing = 0;
    if (cJSON_IsNumber(v) || cJSON_IsNull(v)) {
        char want[600], num[64];
        if (cJSON_IsNumber(v))
            fmt(num, sizeof num, v->valuedouble);
        else
            snprintf(num, sizeof num, "—");
        snprintf(want, sizeof want, "data-m=\"%s\">%s<", path, num);
        (*checked)++;
        if (!strstr(html, want)) {
            fprintf(stderr, "\n  report.html lacks %s", want);
            missing++;
        }
        return missing;
    }
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, v)
    {
        char sub[512];
        if (cJSON_IsArray(v))
            snprintf(sub, sizeof sub, "%s%s%d", path, *path ? "." : "", i);
        else
            snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", e->string);
        missing += figures_missing(html, e, sub, checked);
        i++;
    }
    return missing;
}

static int b64v(int c)
{
    const char *t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char *p = c ? strchr(t, c) : NULL;
    return p ? (int)(p - t) : -1;
}

/* The picture embedded for name (alt="name") decoded from base64 equals
 * the file beside the page. */
static int embedded_is_file(const char *html, const char *dir, const char *name)
{
    char key[128];
    snprintf(key, sizeof key, "alt=\"%s\" src=\"data:image/png;base64,", name);
    const char *p = strstr(html, key);
    if (!p) return 0;
    p += strlen(key);
    char path[4096], *file = NULL;
    size_t fn = 0;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (hsi_read_file(path, &file, &fn) != HSI_OK) return 0;
    size_t k = 0;
    int ok = 1;
    while (ok && *p && *p != '"') {
        int v[4];
        for (int j = 0; j < 4; j++)
            v[j] = p[j] == '=' ? 0 : b64v(p[j]);
        if (v[0] < 0 || v[1] < 0 || v[2] < 0 || v[3] < 0) {
            ok = 0;
            break;
        }
        unsigned u =
            (unsigned)v[0] << 18 | (unsigned)v[1] << 12 | (unsigned)v[2] << 6 | (unsigned)v[3];
        unsigned char b[3] = {(unsigned char)(u >> 16), (unsigned char)(u >> 8), (unsigned char)u};
        int nb = p[2] == '=' ? 1 : p[3] == '=' ? 2 : 3;
        for (int j = 0; j < nb; j++)
            ok &= k < fn && (unsigned char)file[k++] == b[j];
        p += 4;
    }
    ok &= k == fn && *p == '"';
    free(file);
    return ok;
}

/* history.csv: the header, then rows whose val_loss field (5th) is
 * non-empty (want 1) or empty (want 0); returns the rows, -1 on a bad row. */
static int history_rows(const char *text, int want_val_loss)
{
    const char *head = "epoch,train_loss,train_acc,val_oa,val_loss,lr,samples_per_s,seconds\n";
    if (strncmp(text, head, strlen(head))) return -1;
    int rows = 0;
    for (const char *p = text + strlen(head); *p; rows++) {
        const char *f = p;
        for (int c = 0; c < 4 && f; c++)
            f = strchr(f, ',') ? strchr(f, ',') + 1 : NULL;
        if (!f) return -1;
        if ((*f != ',') != want_val_loss) return -1;
        if (want_val_loss && !(strtod(f, NULL) > 0)) return -1;
        p = strchr(p, '\n');
        if (!p) return -1;
        p++;
    }
    return rows;
}

static void test_run_report(void)
{
    const char *dir = hsi_test_tmp("rep1");
    int rc = hsi_test_run(out, sizeof out,
                          HSI_BIN " train " SCENE
                                  " --out %s --epochs 3 --train 0.05 --val 0.3 --quiet --seed 3",
                          dir);
    if (rc) fprintf(stderr, "%s\n", out);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_PTR_NULL(strstr(out, "warning"));
    check_png(dir, "curves.png", HSI_REPORT_CURVES_W, HSI_REPORT_CURVES_H);
    check_png(dir, "confusion.png", HSI_REPORT_CONFUSION_W, HSI_REPORT_CONFUSION_H);
    check_png(dir, "spectra.png", HSI_REPORT_SPECTRA_W, HSI_REPORT_SPECTRA_H);
    char *hist = slurp(dir, "history.csv");
    CU_ASSERT_PTR_NOT_NULL_FATAL(hist);
    CU_ASSERT_EQUAL(history_rows(hist, 1), 3);
    free(hist);
    char *html = slurp(dir, "report.html"), mp[4096];
    CU_ASSERT_PTR_NOT_NULL_FATAL(html);
    snprintf(mp, sizeof mp, "%s/metrics.json", dir);
    cJSON *m = hsi_test_load_json(mp);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    int checked = 0;
    CU_ASSERT_EQUAL(figures_missing(html, m, "", &checked), 0);
    CU_ASSERT(checked > 8 * 8 + 8 * 7 + 10); /* confusion, per class, the rest */
    cJSON_Delete(m);
    /* self-contained: the three PNGs inside, nothing fetched from elsewhere */
    CU_ASSERT(embedded_is_file(html, dir, "curves.png"));
    CU_ASSERT(embedded_is_file(html, dir, "confusion.png"));
    CU_ASSERT(embedded_is_file(html, dir, "spectra.png"));
    CU_ASSERT_PTR_NULL(strstr(html, "http"));
    CU_ASSERT_PTR_NULL(strstr(html, "<script"));
    CU_ASSERT_PTR_NOT_NULL(strstr(html, "Protocol: not leaky."));
    CU_ASSERT_PTR_NOT_NULL(strstr(html, "Young maize"));              /* class names */
    CU_ASSERT_PTR_NOT_NULL(strstr(html, "training.seed</th><td>3<")); /* the configuration */
    CU_ASSERT_PTR_NOT_NULL(
        strstr(html, dir)); /* named as the user named it, not its working folder */
    CU_ASSERT_PTR_NULL(strstr(html, ".hsi-tmp-"));
    free(html);

    /* a picture that cannot be drawn (history.csv unreadable as one): the
     * others and the page are written, the page says why, the call fails */
    char hp[4096], cp[4096];
    snprintf(hp, sizeof hp, "%s/history.csv", dir);
    snprintf(cp, sizeof cp, "%s/curves.png", dir);
    FILE *fp = fopen(hp, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    fputs("not,a,history\n", fp);
    fclose(fp);
    unlink(cp);
    hsi_set_quiet(1);
    hsi_status st = hsi_report_write(dir, NULL, NULL);
    hsi_set_quiet(0);
    CU_ASSERT_EQUAL(st, HSI_ERR_FORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "no 'epoch'"));
    CU_ASSERT_NOT_EQUAL(access(cp, F_OK), 0);
    check_png(dir, "confusion.png", HSI_REPORT_CONFUSION_W, HSI_REPORT_CONFUSION_H);
    html = slurp(dir, "report.html");
    CU_ASSERT_PTR_NOT_NULL_FATAL(html);
    CU_ASSERT_PTR_NOT_NULL(strstr(html, "curves.png was not drawn"));
    CU_ASSERT(embedded_is_file(html, dir, "confusion.png"));
    CU_ASSERT_PTR_NULL(strstr(html, "alt=\"spectra.png\"")); /* no pixels given: no spectra */
    free(html);
}

/* --val 0 and --fit-on all through `hsi profile train --plot`: val_loss
 * empty, best_val_oa null in the page, the protocol called leaky, the bar
 * chart written (and not replaced without --overwrite). */
static void test_profile_leaky(void)
{
    const char *dir = hsi_test_tmp("rep2"), *png = hsi_test_tmp("rep2_profile.png");
    int rc =
        hsi_test_run(out, sizeof out,
                     HSI_BIN " profile train " SCENE " --out %s --epochs 2 --train 0.03 --val 0 "
                             "--fit-on all --quiet --seed 4 --plot %s",
                     dir, png);
    if (rc) fprintf(stderr, "%s\n", out);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    int w = 0, h = 0, n = 0;
    CU_ASSERT(hsi_test_png_size(png, &w, &h, &n));
    CU_ASSERT(w == HSI_REPORT_PROFILE_W && h == HSI_REPORT_PROFILE_H && n == 3);
    char *hist = slurp(dir, "history.csv");
    CU_ASSERT_PTR_NOT_NULL_FATAL(hist);
    CU_ASSERT_EQUAL(history_rows(hist, 0), 2);
    free(hist);
    check_png(dir, "curves.png", HSI_REPORT_CURVES_W, HSI_REPORT_CURVES_H);
    char *html = slurp(dir, "report.html");
    CU_ASSERT_PTR_NOT_NULL_FATAL(html);
    CU_ASSERT_PTR_NOT_NULL(strstr(html, "Protocol: leaky."));
    CU_ASSERT_PTR_NOT_NULL(strstr(html, "data-m=\"best_val_oa\">—<"));
    free(html);
    /* the picture exists: refused before any work */
    rc = hsi_test_run(out, sizeof out,
                      HSI_BIN " profile train " SCENE " --out %s2 --epochs 1 --plot %s", dir, png);
    CU_ASSERT_EQUAL(rc, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "--overwrite"));
    char d2[4096];
    snprintf(d2, sizeof d2, "%s2", dir);
    CU_ASSERT_NOT_EQUAL(access(d2, F_OK), 0); /* no run started */
    rc = hsi_test_run(out, sizeof out, HSI_BIN " profile train " SCENE " --out %s --plot %s.jpg",
                      d2, png);
    CU_ASSERT_EQUAL(rc, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, ".png"));
}

/* --resume of a run whose history.csv is an older hsi's (no val_loss
 * column): its rows kept with an empty val_loss, the new epoch measured. */
static void test_resume_old_history(void)
{
    const char *dir = hsi_test_tmp("rep3");
    const char *opts = "--train 0.03 --val 0.3 --quiet --seed 5";
    CU_ASSERT_EQUAL_FATAL(
        hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " --out %s --epochs 2 %s", dir, opts),
        0);
    char hp[4096];
    snprintf(hp, sizeof hp, "%s/history.csv", dir);
    FILE *fp = fopen(hp, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    fputs("epoch,train_loss,train_acc,val_oa,lr,samples_per_s,seconds\n"
          "1,1.5,0.5,0.6,0.001,1000.0,0.100\n2,1.25,0.625,0.75,0.0005,1000.0,0.100\n",
          fp);
    fclose(fp);
    int rc = hsi_test_run(out, sizeof out,
                          HSI_BIN " train " SCENE " --out %s --epochs 3 --resume %s", dir, opts);
    if (rc) fprintf(stderr, "%s\n", out);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    char *hist = slurp(dir, "history.csv");
    CU_ASSERT_PTR_NOT_NULL_FATAL(hist);
    const char *want =
        "epoch,train_loss,train_acc,val_oa,val_loss,lr,samples_per_s,seconds\n"
        "1,1.5,0.5,0.6,,0.001,1000.0,0.100\n2,1.25,0.625,0.75,,0.0005,1000.0,0.100\n3,";
    CU_ASSERT_NSTRING_EQUAL(hist, want, strlen(want));
    const char *row3 = strstr(hist, "\n3,");
    CU_ASSERT_PTR_NOT_NULL_FATAL(row3);
    const char *f = row3 + 1;
    for (int c = 0; c < 4 && f; c++)
        f = strchr(f, ',') ? strchr(f, ',') + 1 : NULL;
    CU_ASSERT(f && strtod(f, NULL) > 0); /* the resumed epoch's val_loss */
    free(hist);
    check_png(dir, "curves.png", HSI_REPORT_CURVES_W, HSI_REPORT_CURVES_H);
}

HSI_SUITE(report, 0, {"train: pictures, report.html with every figure, val_loss", test_run_report},
          {"profile --plot, no validation, leaky protocol", test_profile_leaky},
          {"resume keeps an older history.csv's rows", test_resume_old_history})

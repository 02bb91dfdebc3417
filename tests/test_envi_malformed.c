/* test_envi_malformed.c — the malformed ENVI corpus (tests/malformed/,
 * written by its make_corpus.py): every case must fail with its status and
 * an error naming the problem, never crash. Also drives the parser over
 * every prefix of a good header (truncation at any byte). */
#include "test.h"

#include "io/envi.h"

#define CORPUS "tests/malformed"

static hsi_status status_from(const char *s)
{
    if (!strcmp(s, "FORMAT")) return HSI_ERR_FORMAT;
    if (!strcmp(s, "OVERFLOW")) return HSI_ERR_OVERFLOW;
    if (!strcmp(s, "NOT_FOUND")) return HSI_ERR_NOT_FOUND;
    if (!strcmp(s, "UNSUPPORTED")) return HSI_ERR_UNSUPPORTED;
    if (!strcmp(s, "IO")) return HSI_ERR_IO;
    return HSI_OK;
}

static void test_corpus(void)
{
    FILE *fp = fopen(CORPUS "/cases.txt", "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    char line[1024];
    int n = 0, bad = 0;
    while (fgets(line, sizeof line, fp)) {
        if (line[0] == '#') continue;
        line[strcspn(line, "\n")] = 0;
        char *file = strtok(line, "\t"), *status = strtok(NULL, "\t"), *words = strtok(NULL, "");
        if (!file || !status || !words) continue;
        char path[2048];
        snprintf(path, sizeof path, CORPUS "/%s", file);
        hsi_status want = status_from(status);
        CU_ASSERT_NOT_EQUAL(want, HSI_OK);
        hsi_cube c;
        hsi_set_quiet(1);
        hsi_status st = hsi_envi_open(&c, path);
        hsi_set_quiet(0);
        if (st == HSI_OK) hsi_cube_free(&c);
        if (st != want || !strstr(hsi_last_error(), words)) {
            fprintf(stderr, "\n  %s: got %s '%s'\n    want %s with '%s'\n", file,
                    hsi_status_name(st), hsi_last_error(), hsi_status_name(want), words);
            bad++;
        }
        /* the message names the file */
        if (st != HSI_OK && !strstr(hsi_last_error(), file) &&
            !strstr(hsi_last_error(), "tests/malformed")) {
            fprintf(stderr, "\n  %s: message does not name the file: %s\n", file,
                    hsi_last_error());
            bad++;
        }
        n++;
    }
    fclose(fp);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(n >= 30);
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

HSI_SUITE(envi_malformed, 0, {"malformed corpus: specific errors", test_corpus},
          {"every prefix of a header", test_every_prefix})

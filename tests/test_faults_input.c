/* test_faults_input.c — no input blocks hsi (issue 17): FIFOs named as an
 * ENVI header, an ENVI data file, an .spe, a .mat, a .tif, a mask, a label
 * map and a run directory's model.safetensors / pipeline.json are refused
 * with the file's name and "FIFO", never waited on; a data file that is a
 * directory, a symlink loop, a dangling symlink or /dev/zero says what was
 * found. Every library call runs in a forked child under alarm(10), every
 * command under timeout 10, so a regression fails instead of hanging the
 * suite. Cases skip (with a note) where mkfifo fails. */
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/cube.h"
#include "io/envi.h"
#include "io/labels.h"
#include "pipeline/run.h"
#include "test.h"

#define SCENE   "data_samples/scene.hdr"
#define TIMEOUT "timeout -s KILL 10 "

static char out[1 << 16];

static const char *fresh_dir(const char *name)
{
    const char *d = hsi_test_tmp(name);
    mkdir(d, 0755);
    return d;
}

/* dir/name into buf (PATH-sized). */
static const char *join(char *buf, size_t n, const char *dir, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
    return buf;
}

/* Makes a FIFO at path; 0 (and a note) when this file system has none. */
static int fifo_at(const char *path)
{
    unlink(path);
    if (mkfifo(path, 0644) == 0) return 1;
    fprintf(stderr, "\n  mkfifo %s: %s: case skipped\n", path, strerror(errno));
    return 0;
}

static int copy(const char *from, const char *to)
{
    return hsi_test_run(out, sizeof out, "cp '%s' '%s'", from, to) == 0;
}

/* ------------------------------------------------ guarded library calls */

typedef hsi_status (*open_fn)(const char *path);

typedef struct outcome {
    int hung;       /* killed by the alarm: the call blocked */
    hsi_status st;  /* the call's status (when it returned) */
    char msg[4096]; /* hsi_last_error() after it */
} outcome;

/* Runs fn(path) in a child with alarm(10); its status and message come
 * back through a pipe. */
static outcome guarded(open_fn fn, const char *path)
{
    outcome o;
    memset(&o, 0, sizeof o);
    o.st = HSI_OK;
    int p[2];
    if (pipe(p) != 0) {
        o.hung = -1;
        return o;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        o.hung = -1;
        return o;
    }
    if (pid == 0) {
        close(p[0]);
        alarm(10);
        int st = (int)fn(path);
        char buf[4200];
        int len = snprintf(buf, sizeof buf, "%d\n%s", st, hsi_last_error());
        if (len > (int)sizeof buf - 1) len = (int)sizeof buf - 1;
        ssize_t w = write(p[1], buf, (size_t)len);
        (void)w;
        _exit(0); /* no atexit handlers: the scratch directory is the parent's */
    }
    close(p[1]);
    char buf[4200];
    size_t got = 0;
    for (;;) {
        ssize_t r = read(p[0], buf + got, sizeof buf - 1 - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
        if (got == sizeof buf - 1) break;
    }
    buf[got] = 0;
    close(p[0]);
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(ws)) {
        o.hung = WTERMSIG(ws) == SIGALRM ? 1 : -1;
        return o;
    }
    char *nl = strchr(buf, '\n');
    if (!nl) {
        o.hung = -1;
        return o;
    }
    *nl = 0;
    o.st = (hsi_status)atoi(buf);
    snprintf(o.msg, sizeof o.msg, "%s", nl + 1);
    return o;
}

/* The call returned (no hang), failed, and its message holds every word. */
static void check_refused(const outcome *o, const char *call, const char *path, const char *w1,
                          const char *w2)
{
    CU_ASSERT_EQUAL(o->hung, 0);
    if (o->hung)
        fprintf(stderr, "\n  %s(%s): %s\n", call, path,
                o->hung > 0 ? "blocked (killed after 10 s)" : "crashed");
    CU_ASSERT_NOT_EQUAL(o->st, HSI_OK);
    const char *words[] = {path, w1, w2};
    for (int i = 0; i < 3; i++) {
        if (!words[i] || strstr(o->msg, words[i])) continue;
        fprintf(stderr, "\n  %s(%s): message '%s' lacks '%s'\n", call, path, o->msg, words[i]);
        CU_FAIL("error message lacks the expected words");
    }
}

static hsi_status call_cube_open(const char *path)
{
    hsi_cube c;
    hsi_status st = hsi_cube_open(&c, path, NULL);
    if (st == HSI_OK) hsi_cube_free(&c);
    return st;
}

static hsi_status call_envi_open(const char *path)
{
    hsi_cube c;
    hsi_status st = hsi_envi_open(&c, path);
    if (st == HSI_OK) hsi_cube_free(&c);
    return st;
}

static hsi_status call_read_header(const char *path)
{
    hsi_meta m;
    hsi_status st = hsi_envi_read_header(&m, path);
    hsi_meta_free(&m);
    return st;
}

static hsi_status call_labels_open(const char *path)
{
    hsi_labels l;
    hsi_status st = hsi_labels_open(&l, path, NULL);
    if (st == HSI_OK) hsi_labels_free(&l);
    return st;
}

static hsi_status call_run_load(const char *path)
{
    hsi_run r;
    memset(&r, 0, sizeof r);
    hsi_status st = hsi_run_load(&r, path);
    hsi_run_free(&r);
    return st;
}

#define REFUSED(fn, path, w1, w2)                                                                  \
    do {                                                                                           \
        outcome o_ = guarded(fn, (path));                                                          \
        check_refused(&o_, #fn, (path), (w1), (w2));                                               \
    } while (0)

/* A command under timeout 10: exit status 1 (not 124/137: a hang) and the
 * words in its output. */
static void cli_refused(const char *what, const char *w1, const char *w2, int rc)
{
    CU_ASSERT_EQUAL(rc, 1);
    if (rc != 1)
        fprintf(stderr, "\n  %s: exit %d%s\n%s\n", what, rc,
                rc == 124 || rc == 137 || rc == -1 ? " (blocked: killed after 10 s)" : "", out);
    const char *words[] = {w1, w2};
    for (int i = 0; i < 2; i++) {
        if (!words[i] || strstr(out, words[i])) continue;
        fprintf(stderr, "\n  %s: output '%s' lacks '%s'\n", what, out, words[i]);
        CU_FAIL("command output lacks the expected words");
    }
}

/* ------------------------------------------------------------ the cases */

/* A FIFO named as the header (.hdr): every reader of headers refuses it. */
static void test_fifo_header(void)
{
    const char *d = fresh_dir("fi_hdr");
    char h[4096], data[4096];
    join(h, sizeof h, d, "scene.hdr");
    if (!fifo_at(h)) return;
    CU_ASSERT_FATAL(copy("data_samples/scene.img", join(data, sizeof data, d, "scene.img")));
    REFUSED(call_cube_open, h, "FIFO", NULL);
    REFUSED(call_envi_open, h, "FIFO", "ENVI header");
    REFUSED(call_read_header, h, "FIFO", "ENVI header");
    /* the data file named: its side-car header is the FIFO */
    REFUSED(call_cube_open, data, "scene.hdr", "FIFO");
    REFUSED(call_envi_open, data, "scene.hdr", "FIFO");
    cli_refused("hsi info FIFO.hdr", "scene.hdr", "FIFO",
                hsi_test_run(out, sizeof out, TIMEOUT HSI_BIN " info %s", h));
    cli_refused("hsi info data (FIFO header)", "scene.hdr", "FIFO",
                hsi_test_run(out, sizeof out, TIMEOUT HSI_BIN " info %s", data));
}

/* A FIFO as the ENVI data file: found by the lookup and named, whether the
 * header or the data file itself is given. */
static void test_fifo_data(void)
{
    const char *d = fresh_dir("fi_data");
    char h[4096], data[4096];
    CU_ASSERT_FATAL(copy(SCENE, join(h, sizeof h, d, "scene.hdr")));
    join(data, sizeof data, d, "scene.img");
    if (!fifo_at(data)) return;
    REFUSED(call_cube_open, h, "scene.img", "is a FIFO (named pipe), expected a regular file");
    REFUSED(call_envi_open, h, "scene.img", "data file is a FIFO");
    REFUSED(call_cube_open, data, "FIFO", NULL);
    REFUSED(call_envi_open, data, "FIFO", NULL);
    cli_refused("hsi info (FIFO data)", "scene.img", "FIFO",
                hsi_test_run(out, sizeof out, TIMEOUT HSI_BIN " info %s", h));
    cli_refused("hsi convert (FIFO data)", "scene.img", "FIFO",
                hsi_test_run(out, sizeof out, TIMEOUT HSI_BIN " convert %s %s/o.hdr", h, d));
    cli_refused("hsi quicklook (FIFO data)", "scene.img", "FIFO",
                hsi_test_run(out, sizeof out, TIMEOUT HSI_BIN " quicklook %s %s/q.png", h, d));
}

/* FIFOs named as an .spe, a .mat, a .tif: refused before any format reader
 * (matio, GDAL) opens them by name. */
static void test_fifo_formats(void)
{
    const char *d = fresh_dir("fi_formats");
    const char *names[] = {"cube.spe", "cube.mat", "cube.tif", "NETCDF:x.nc:v"};
    for (int i = 0; i < 4; i++) {
        char p[4096];
        join(p, sizeof p, d, names[i]);
        if (!fifo_at(p)) return;
        REFUSED(call_cube_open, p, "FIFO", NULL);
        REFUSED(call_labels_open, p, "FIFO", NULL);
        cli_refused(names[i], names[i], "FIFO",
                    hsi_test_run(out, sizeof out, TIMEOUT HSI_BIN " info '%s'", p));
        cli_refused(names[i], names[i], "FIFO",
                    hsi_test_run(out, sizeof out, TIMEOUT HSI_BIN " stats '%s'", p));
        cli_refused(
            names[i], names[i], "FIFO",
            hsi_test_run(out, sizeof out, TIMEOUT HSI_BIN " pca fit '%s' %s/p.model -k 2", p, d));
    }
}

/* A FIFO as a --mask / --fit-mask and as a label map. */
static void test_fifo_mask_and_labels(void)
{
    const char *d = fresh_dir("fi_mask");
    char m[4096];
    join(m, sizeof m, d, "mask.hdr");
    if (!fifo_at(m)) return;
    cli_refused("stats --mask", "mask.hdr", "mask is a FIFO",
                hsi_test_run(out, sizeof out, TIMEOUT HSI_BIN " stats " SCENE " --mask %s", m));
    cli_refused("pca fit --mask", "mask.hdr", "mask is a FIFO",
                hsi_test_run(out, sizeof out,
                             TIMEOUT HSI_BIN " pca fit " SCENE " %s/p.model -k 2 --mask %s", d, m));
    cli_refused("bands --mask", "mask.hdr", "mask is a FIFO",
                hsi_test_run(out, sizeof out,
                             TIMEOUT HSI_BIN " bands " SCENE " --rank variance --mask %s", m));
    cli_refused("preprocess --fit-mask", "mask.hdr", "mask is a FIFO",
                hsi_test_run(
                    out, sizeof out,
                    TIMEOUT HSI_BIN " preprocess " SCENE " %s/pp.hdr --pca 2 --fit-mask %s", d, m));
    /* a label map */
    char l[4096];
    join(l, sizeof l, d, "labels");
    if (!fifo_at(l)) return;
    REFUSED(call_labels_open, l, "label map is a FIFO", NULL);
    cli_refused("train LABELS", "labels", "FIFO",
                hsi_test_run(out, sizeof out,
                             TIMEOUT HSI_BIN " train " SCENE " %s --out %s/run --epochs 1 --quiet",
                             l, d));
    cli_refused(
        "quicklook LABELS", "labels", "FIFO",
        hsi_test_run(out, sizeof out, TIMEOUT HSI_BIN " quicklook %s %s/q.png --labels", l, d));
    cli_refused("quicklook", "labels", "FIFO",
                hsi_test_run(out, sizeof out, TIMEOUT HSI_BIN " quicklook %s %s/q.png", l, d));
}

/* A run directory whose model.safetensors / pipeline.json is a FIFO:
 * loading, predict and eval refuse it. The run is a tiny one (16 x 16
 * pixels, 8 bands, one epoch: well under a second). */
static void test_fifo_run_files(void)
{
    const char *d = fresh_dir("fi_run");
    char run[4096], cube[4096], gt[4096], bad[4096], p[4096];
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(cube, sizeof cube, "%s/t.hdr", d);
    snprintf(gt, sizeof gt, "%s/t_gt.hdr", d);
    CU_ASSERT_EQUAL_FATAL(
        hsi_test_run(out, sizeof out,
                     HSI_BIN " synth %s/t --size 16 --bands 8 --classes 3 --fields 6", d),
        0);
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out,
                                       TIMEOUT HSI_BIN " train %s %s --train 0.3 --val 0 --quiet "
                                                       "--seed 5 --epochs 1 --out %s",
                                       cube, gt, run),
                          0);
    const char *files[] = {"model.safetensors", "pipeline.json", "preprocessing.safetensors"};
    for (int i = 0; i < 3; i++) {
        snprintf(bad, sizeof bad, "%s/bad%d", d, i);
        CU_ASSERT_EQUAL_FATAL(
            hsi_test_run(out, sizeof out, "rm -rf %s && cp -r %s %s", bad, run, bad), 0);
        join(p, sizeof p, bad, files[i]);
        if (!fifo_at(p)) return;
        REFUSED(call_run_load, bad, files[i], "FIFO");
        cli_refused("predict", files[i], "FIFO",
                    hsi_test_run(out, sizeof out, TIMEOUT HSI_BIN " predict %s %s %s/map%d.hdr",
                                 bad, cube, d, i));
        cli_refused("eval", files[i], "FIFO",
                    hsi_test_run(out, sizeof out, TIMEOUT HSI_BIN " eval %s %s %s", bad, cube, gt));
    }
    /* the intact run still loads and evaluates (the FIFOs were the fault) */
    CU_ASSERT_EQUAL(
        hsi_test_run(out, sizeof out, TIMEOUT HSI_BIN " eval %s %s %s --json", run, cube, gt), 0);
}

/* The data-file lookup says what it found instead of "not found": a
 * directory, a symlink loop, a dangling symlink, /dev/zero; with nothing
 * there it still lists what was tried; a usable candidate wins over an
 * unusable one. */
static void test_data_file_not_a_file(void)
{
    const char *d = fresh_dir("fi_kinds");
    char h[4096], p[4096];
    /* a directory */
    CU_ASSERT_FATAL(copy(SCENE, join(h, sizeof h, d, "dir.hdr")));
    CU_ASSERT_EQUAL_FATAL(mkdir(join(p, sizeof p, d, "dir.img"), 0755), 0);
    REFUSED(call_cube_open, h, "dir.img", "data file is a directory, expected a regular file");
    REFUSED(call_envi_open, h, "tried dir, dir.img, dir.dat", NULL);
    /* a symlink loop */
    CU_ASSERT_FATAL(copy(SCENE, join(h, sizeof h, d, "loop.hdr")));
    CU_ASSERT_EQUAL_FATAL(symlink("loop.img", join(p, sizeof p, d, "loop.img")), 0);
    REFUSED(call_cube_open, h, "loop.img", "symlink loop");
    /* a dangling symlink */
    CU_ASSERT_FATAL(copy(SCENE, join(h, sizeof h, d, "gone.hdr")));
    CU_ASSERT_EQUAL_FATAL(symlink("elsewhere.img", join(p, sizeof p, d, "gone.img")), 0);
    REFUSED(call_cube_open, h, "gone.img",
            "symbolic link to 'elsewhere.img', which does not exist");
    /* /dev/zero */
    if (access("/dev/zero", R_OK) == 0) {
        CU_ASSERT_FATAL(copy(SCENE, join(h, sizeof h, d, "zero.hdr")));
        CU_ASSERT_EQUAL_FATAL(symlink("/dev/zero", join(p, sizeof p, d, "zero.img")), 0);
        REFUSED(call_cube_open, h, "zero.img", "data file is a character device");
        REFUSED(call_envi_open, h, "/dev/zero", NULL);
        cli_refused("hsi info (data = /dev/zero)", "zero.img", "character device",
                    hsi_test_run(out, sizeof out, TIMEOUT HSI_BIN " info %s", h));
        /* named directly */
        REFUSED(call_envi_open, "/dev/zero", "character device", NULL);
    }
    /* nothing there: the names tried, as before */
    CU_ASSERT_FATAL(copy(SCENE, join(h, sizeof h, d, "none.hdr")));
    {
        outcome o = guarded(call_cube_open, h);
        CU_ASSERT_EQUAL(o.hung, 0);
        CU_ASSERT_EQUAL(o.st, HSI_ERR_NOT_FOUND);
        CU_ASSERT_PTR_NOT_NULL(
            strstr(o.msg, "data file not found (tried none, none.img, none.dat"));
    }
    /* a directory named like the stem beside a good data file: the file wins */
    CU_ASSERT_FATAL(copy(SCENE, join(h, sizeof h, d, "good.hdr")));
    CU_ASSERT_FATAL(copy("data_samples/scene.img", join(p, sizeof p, d, "good.img")));
    CU_ASSERT_EQUAL_FATAL(mkdir(join(p, sizeof p, d, "good"), 0755), 0);
    {
        hsi_cube c;
        HSI_CHECK_OK(hsi_cube_open(&c, h, NULL));
        CU_ASSERT_PTR_NOT_NULL(strstr(c.data_path, "good.img"));
        hsi_cube_free(&c);
    }
    /* a FIFO and a directory both unusable: the FIFO is the one reported */
    CU_ASSERT_FATAL(copy(SCENE, join(h, sizeof h, d, "both.hdr")));
    CU_ASSERT_EQUAL_FATAL(mkdir(join(p, sizeof p, d, "both"), 0755), 0);
    if (!fifo_at(join(p, sizeof p, d, "both.raw"))) return;
    REFUSED(call_cube_open, h, "both.raw", "FIFO");
}

/* A directory or a symlink loop named as the cube itself. */
static void test_named_input_not_a_file(void)
{
    const char *d = fresh_dir("fi_named");
    char p[4096];
    CU_ASSERT_EQUAL_FATAL(mkdir(join(p, sizeof p, d, "cube.hdr"), 0755), 0);
    REFUSED(call_cube_open, p, "is a directory", NULL);
    REFUSED(call_envi_open, p, "ENVI header is a directory", NULL);
    CU_ASSERT_EQUAL_FATAL(symlink("self.hdr", join(p, sizeof p, d, "self.hdr")), 0);
    REFUSED(call_cube_open, p, "symlink loop", NULL);
    REFUSED(call_labels_open, p, "symlink loop", NULL);
    cli_refused("stats --mask loop", "self.hdr", "symlink loop",
                hsi_test_run(out, sizeof out, TIMEOUT HSI_BIN " stats " SCENE " --mask %s", p));
}

HSI_SUITE(faults_input, 0,
          {"FIFO as an ENVI header (.hdr, and as a data file's side-car)", test_fifo_header},
          {"FIFO as the ENVI data file", test_fifo_data},
          {"FIFO as .spe, .mat, .tif and a GDAL-looking name", test_fifo_formats},
          {"FIFO as --mask / --fit-mask and as a label map", test_fifo_mask_and_labels},
          {"FIFO as a run's model.safetensors / pipeline.json / preprocessing",
           test_fifo_run_files},
          {"data file a directory, symlink loop, dangling link, /dev/zero",
           test_data_file_not_a_file},
          {"a directory or a symlink loop named as the cube", test_named_input_not_a_file});

/* test_faults_write.c — nothing is lost or torn at the rename (issue 17):
 * kills and I/O errors injected at each step of the atomic writer
 * (HSI_FAULT, core/files.c), SIGTERM, a full disk (RLIMIT_FSIZE), a full
 * standard output (/dev/full), stale temporaries, and a run directory
 * replaced or resumed after a kill. After every fault the destination reads
 * as the old cube or the new one, never a mix, and nothing else of the
 * user's is touched. */
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/cube.h"
#include "test.h"

#define SCENE "data_samples/scene.hdr"
#define LABELS "data_samples/scene_gt.hdr"

static char out[1 << 16];

/* Band 0's first values and the dtype and byte order of a cube. */
typedef struct seen {
    int ok;
    hsi_dtype dt;
    int big;
    double v[16];
} seen;

static seen look(const char *hdr)
{
    seen s = {0};
    hsi_cube c;
    if (hsi_cube_open(&c, hdr, NULL) != HSI_OK) return s;
    s.ok = 1;
    s.dt = c.view.dtype;
    s.big = c.meta.byte_order;
    hsi_view f = {0};
    if (hsi_view_contiguous(&f, &c.view, HSI_F64) == HSI_OK) {
        for (int i = 0; i < 16; i++) s.v[i] = ((const double *)f.buf->data)[i];
        hsi_view_release(&f);
    } else {
        s.ok = 0;
    }
    hsi_cube_free(&c);
    return s;
}

static int same_values(const seen *a, const seen *b)
{
    for (int i = 0; i < 16; i++)
        if (a->v[i] != b->v[i]) return 0;
    return 1;
}

/* Entries of dir whose name contains needle. */
static int count_named(const char *dir, const char *needle)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, needle)) n++;
    closedir(d);
    return n;
}

static int leftovers(const char *dir)
{
    return count_named(dir, ".hsi-tmp-") + count_named(dir, ".hsi-old-") +
           count_named(dir, ".hsi-pair");
}

static const char *fresh_dir(const char *name)
{
    const char *d = hsi_test_tmp(name);
    mkdir(d, 0755);
    return d;
}

/* The old pair: scene as uint16 little-endian. */
static void write_old(const char *hdr)
{
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " convert " SCENE " %s --overwrite", hdr), 0);
}

/* Killed before the data moved: the old pair whole; the next write
 * cleans up after the killed one. */
static void test_kill_before_data(void)
{
    const char *d = fresh_dir("kill_data");
    char hdr[4096];
    snprintf(hdr, sizeof hdr, "%s/c.hdr", d);
    write_old(hdr);
    seen old = look(hdr);
    CU_ASSERT_FATAL(old.ok);
    int rc = hsi_test_run(out, sizeof out, "HSI_FAULT=pair-data " HSI_BIN " convert " SCENE " %s --dtype float64 --overwrite", hdr);
    CU_ASSERT_NOT_EQUAL(rc, 0);
    seen now = look(hdr);
    CU_ASSERT(now.ok);
    CU_ASSERT_EQUAL(now.dt, old.dt);
    CU_ASSERT(same_values(&now, &old));
    CU_ASSERT(leftovers(d) > 0); /* the killed write's files are still there... */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " convert " SCENE " %s --dtype float64 --overwrite", hdr), 0);
    CU_ASSERT_EQUAL(leftovers(d), 0); /* ...until the next write to the same cube */
    now = look(hdr);
    CU_ASSERT(now.ok && now.dt == HSI_F64 && same_values(&now, &old));
}

/* Killed between the data and the header renames, with a change the sizes
 * cannot reveal (byte order): the torn pair is refused with what happened;
 * the next write completes it. */
static void test_kill_between_renames(void)
{
    const char *d = fresh_dir("kill_hdr");
    char hdr[4096];
    snprintf(hdr, sizeof hdr, "%s/c.hdr", d);
    write_old(hdr);
    seen old = look(hdr);
    int rc = hsi_test_run(out, sizeof out, "HSI_FAULT=pair-header " HSI_BIN " convert " SCENE " %s --byte-order big --overwrite", hdr);
    CU_ASSERT_NOT_EQUAL(rc, 0);
    hsi_cube c;
    HSI_CHECK_FAILS(hsi_cube_open(&c, hdr, NULL), HSI_ERR_STATE, "interrupted");
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " info %s", hdr), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "interrupted between its data file and its header"));
    /* any later write to it finishes the interrupted one first */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " convert " SCENE " %s --byte-order big --overwrite", hdr), 0);
    seen now = look(hdr);
    CU_ASSERT(now.ok && now.big == 1 && same_values(&now, &old));
    CU_ASSERT_EQUAL(leftovers(d), 0);
}

/* An error at the header rename: the old pair is put back, whole. */
static void test_header_rename_error(void)
{
    const char *d = fresh_dir("eio_hdr");
    char hdr[4096];
    snprintf(hdr, sizeof hdr, "%s/c.hdr", d);
    write_old(hdr);
    seen old = look(hdr);
    int rc = hsi_test_run(out, sizeof out, "HSI_FAULT=pair-header:eio " HSI_BIN " convert " SCENE " %s --dtype float32 --overwrite", hdr);
    CU_ASSERT_EQUAL(rc, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "the previous files are unchanged"));
    seen now = look(hdr);
    CU_ASSERT(now.ok && now.dt == old.dt && same_values(&now, &old));
    CU_ASSERT_EQUAL(leftovers(d), 0);
    /* a fresh destination: nothing half-written stays */
    snprintf(hdr, sizeof hdr, "%s/new.hdr", d);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, "HSI_FAULT=pair-header:eio " HSI_BIN " convert " SCENE " %s", hdr), 1);
    CU_ASSERT_EQUAL(count_named(d, "new"), 0);
}

/* SIGTERM removes the temporaries; a single-file write failing at its
 * rename keeps the old file. */
static void test_sigterm_and_single_file(void)
{
    const char *d = fresh_dir("term");
    char hdr[4096], png[4096];
    snprintf(hdr, sizeof hdr, "%s/c.hdr", d);
    int rc = hsi_test_run(out, sizeof out, "HSI_FAULT=pair-data:term " HSI_BIN " convert " SCENE " %s", hdr);
    CU_ASSERT_NOT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(count_named(d, ".hsi-tmp-"), 0);
    snprintf(png, sizeof png, "%s/pca.model", d);
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " pca fit " SCENE " %s -k 3", png), 0);
    struct stat a, b;
    CU_ASSERT_EQUAL_FATAL(stat(png, &a), 0);
    rc = hsi_test_run(out, sizeof out, "HSI_FAULT=rename:eio " HSI_BIN " pca fit " SCENE " %s -k 4 --overwrite", png);
    CU_ASSERT_EQUAL(rc, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "cannot rename the temporary file into place"));
    CU_ASSERT_EQUAL(stat(png, &b), 0);
    CU_ASSERT_EQUAL(a.st_ino, b.st_ino);
    CU_ASSERT_EQUAL(count_named(d, ".hsi-tmp-"), 0);
}

/* Stale temporaries of the same destination (no live writer) go at the
 * next write; look-alikes of the user's stay. */
static void test_stale_temporaries(void)
{
    const char *d = fresh_dir("stale");
    char hdr[4096], p[4096];
    snprintf(hdr, sizeof hdr, "%s/c.hdr", d);
    const char *names[] = {"c.hsi-tmp-Ab12Cd", "c.hdr.hsi-tmp-Zz99zz", "c.tmp-keep", "c.hsi-tmp-toolong1",
                           "other.hsi-tmp-Ab12Cd"};
    for (int i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/%s", d, names[i]);
        FILE *fp = fopen(p, "w");
        CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
        fputs("x", fp);
        fclose(fp);
    }
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " convert " SCENE " %s", hdr), 0);
    for (int i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/%s", d, names[i]);
        CU_ASSERT_EQUAL(access(p, F_OK) == 0, i >= 2); /* the first two removed */
    }
}

/* A full disk (RLIMIT_FSIZE: writes past it fail with EFBIG) and a full
 * standard output: clear failures, nothing half-written left. */
static void test_full_disk_and_stdout(void)
{
    const char *d = fresh_dir("full");
    char hdr[4096];
    snprintf(hdr, sizeof hdr, "%s/c.hdr", d);
    write_old(hdr);
    seen old = look(hdr);
    int rc = hsi_test_run(out, sizeof out, "trap '' XFSZ; ulimit -f 64; " HSI_BIN " convert " SCENE " %s --dtype float64 --overwrite", hdr);
    CU_ASSERT_EQUAL(rc, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "File too large")); /* EFBIG, said */
    seen now = look(hdr);
    CU_ASSERT(now.ok && now.dt == old.dt && same_values(&now, &old));
    CU_ASSERT_EQUAL(leftovers(d), 0);
    if (access("/dev/full", W_OK) == 0) {
        /* stdout to /dev/full, stderr to the test */
        const char *cmds[] = {" stats " SCENE " --json", " info " SCENE " --json", " --help"};
        for (int i = 0; i < 3; i++) {
            CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, "{ " HSI_BIN "%s >/dev/full 2>&3; } 3>&1", cmds[i]), 1);
            CU_ASSERT_PTR_NOT_NULL(strstr(out, "error writing to standard output"));
        }
    }
}

#define TRAIN HSI_BIN " train " SCENE " " LABELS " --train 0.03 --val 0 --quiet --seed 5 "

/* A run replaced with --overwrite and killed before it is moved into place:
 * the old run is untouched (not a mix); a new run refuses while the killed
 * one is there; --resume finishes it and moves it in. */
static void test_run_directory_kill(void)
{
    const char *p = fresh_dir("runs");
    char dir[4096], keep[4096], a[4096], b[4096];
    snprintf(dir, sizeof dir, "%s/run", p);
    snprintf(keep, sizeof keep, "%s/keep-model", p);
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, TRAIN "--out %s --epochs 1", dir), 0);
    snprintf(a, sizeof a, "%s/model.safetensors", dir);
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, "cp %s %s", a, keep), 0);
    int rc = hsi_test_run(out, sizeof out, "HSI_FAULT=run-swap " TRAIN "--out %s --epochs 2 --seed 6 --overwrite", dir);
    CU_ASSERT_NOT_EQUAL(rc, 0);
    CU_ASSERT(hsi_test_same_file(a, keep)); /* the old run, whole */
    snprintf(b, sizeof b, "%s/pipeline.json", dir);
    CU_ASSERT_EQUAL(access(b, F_OK), 0);
    CU_ASSERT_EQUAL(count_named(p, "run.hsi-tmp-"), 1);
    /* a new run refuses while the interrupted one is there */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, TRAIN "--out %s --epochs 2", dir), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "interrupted run"));
    /* --resume continues the interrupted one (2 epochs done: one more) and moves it in */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " " LABELS " --train 0.03 --val 0 "
                                 "--seed 6 --out %s --epochs 3 --resume", dir), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "resuming the interrupted run"));
    CU_ASSERT_EQUAL(count_named(p, "run.hsi-tmp-"), 0);
    CU_ASSERT(!hsi_test_same_file(a, keep));
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, HSI_BIN " eval %s " SCENE " " LABELS " --json", dir), 0);
    /* --overwrite refuses to remove what a run does not hold */
    snprintf(b, sizeof b, "%s/notes.txt", dir);
    FILE *fp = fopen(b, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    fclose(fp);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, TRAIN "--out %s --epochs 1 --overwrite", dir), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "notes.txt"));
    CU_ASSERT_EQUAL(count_named(p, "run.hsi-tmp-"), 0);
    /* an existing folder without a run: the files moved in, the user's kept */
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, "rm -f %s/*", dir), 0);
    fp = fopen(b, "w");
    fclose(fp);
    CU_ASSERT_EQUAL(hsi_test_run(out, sizeof out, TRAIN "--out %s --epochs 1", dir), 0);
    CU_ASSERT_EQUAL(access(b, F_OK), 0);
    CU_ASSERT_EQUAL(access(a, F_OK), 0);
    CU_ASSERT_EQUAL(count_named(p, "run.hsi-tmp-"), 0);
}

/* 1 + 1 epochs of a cosine schedule = 2 epochs, bit for bit, and the log
 * says so. */
static void test_resume_replans_bitwise(void)
{
    const char *p = fresh_dir("replan");
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s/two", p);
    snprintf(b, sizeof b, "%s/onemore", p);
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, TRAIN "--out %s --epochs 2", a), 0);
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, TRAIN "--out %s --epochs 1", b), 0);
    CU_ASSERT_EQUAL_FATAL(hsi_test_run(out, sizeof out, HSI_BIN " train " SCENE " " LABELS " --train 0.03 --val 0 "
                                      "--seed 5 --out %s --epochs 2 --resume", b), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "the result equals one"));
    char ma[4200], mb[4200];
    snprintf(ma, sizeof ma, "%s/model.safetensors", a);
    snprintf(mb, sizeof mb, "%s/model.safetensors", b);
    CU_ASSERT(hsi_test_same_file(ma, mb));
    /* history.csv: a row per epoch, the resumed run's rows those of the
     * straight run but for the timings */
    snprintf(ma, sizeof ma, "%s/history.csv", a);
    snprintf(mb, sizeof mb, "%s/history.csv", b);
    char *x = NULL, *y = NULL;
    size_t nx, ny;
    HSI_CHECK_OK(hsi_read_file(ma, &x, &nx));
    HSI_CHECK_OK(hsi_read_file(mb, &y, &ny));
    if (x && y) {
        const char *head = "epoch,train_loss,train_acc,val_oa,val_loss,lr,samples_per_s,seconds\n";
        CU_ASSERT_NSTRING_EQUAL(x, head, strlen(head));
        char *px = x, *py = y;
        int rows = 0;
        for (; (px = strchr(px, '\n')) && (py = strchr(py, '\n')); rows++) {
            px++, py++;
            if (!*px) break;
            /* epoch,loss,acc,val_oa,val_loss,lr: the first six fields */
            int kx = 0, ky = 0, f = 0;
            while (f < 6 && px[kx]) f += px[kx++] == ',';
            for (f = 0; f < 6 && py[ky];) f += py[ky++] == ',';
            CU_ASSERT_EQUAL(kx, ky);
            CU_ASSERT(strncmp(px, py, (size_t)kx) == 0);
            CU_ASSERT_EQUAL(atoi(px), rows + 1);
        }
        CU_ASSERT_EQUAL(rows, 2);
    }
    free(x);
    free(y);
}

HSI_SUITE(faults_write, 0,
          {"killed before the data rename: old pair whole, cleaned next time", test_kill_before_data},
          {"killed between the renames: torn pair refused, completed next time", test_kill_between_renames},
          {"EIO at the header rename: old pair put back", test_header_rename_error},
          {"SIGTERM removes temporaries; a failed rename keeps the old file", test_sigterm_and_single_file},
          {"stale temporaries removed, the user's look-alikes kept", test_stale_temporaries},
          {"full disk and full standard output fail clearly", test_full_disk_and_stdout},
          {"run directory: kill at the swap, resume, foreign files", test_run_directory_kill},
          {"resume with more epochs = the longer run, bit for bit", test_resume_replans_bitwise});

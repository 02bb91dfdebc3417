/* files.c — how hsi touches the file system: inputs opened without ever
 * blocking (a FIFO named as a cube is refused, not waited on), whole-file
 * reads, and atomic writes (a temporary beside the target, then rename),
 * including a header + data pair replaced so that no reader sees a torn
 * pair, temporaries removed on SIGINT/SIGTERM and by the next write to the
 * same destination, and the test hook that injects faults at each step. */
#define _GNU_SOURCE
#include "core/core.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ inputs */

static const char *kind_name(mode_t m)
{
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO (named pipe)";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    return "not a regular file";
}

static hsi_status open_fail(const char *path, const char *what, int e)
{
    const char *w = what ? what : "file";
    if (e == ELOOP)
        return HSI_FAIL(HSI_ERR_IO, "%s: cannot open the %s: a symlink loop (too many levels of "
                                    "symbolic links)", path, w);
    if (e == ENOENT)
        return HSI_FAIL(HSI_ERR_IO, "%s: cannot open the %s: no such file", path, w);
    return HSI_FAIL(HSI_ERR_IO, "%s: cannot open the %s: %s", path, w, strerror(e));
}

hsi_status hsi_input_open(int *fd_out, const char *path, const char *what, int64_t *size)
{
    *fd_out = -1;
    if (size) *size = 0;
    const char *w = what ? what : "file";
    /* O_NONBLOCK: opening a FIFO for reading would wait for a writer */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return open_fail(path, what, errno);
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return HSI_FAIL(HSI_ERR_IO, "%s: cannot stat the %s: %s", path, w, strerror(e));
    }
    int64_t n = (int64_t)sb.st_size;
    if (S_ISBLK(sb.st_mode)) {
        uint64_t bytes = 0;
        if (ioctl(fd, BLKGETSIZE64, &bytes) != 0 || bytes > (uint64_t)INT64_MAX) {
            close(fd);
            return HSI_FAIL(HSI_ERR_IO, "%s: the %s is a block device of unknown size", path, w);
        }
        n = (int64_t)bytes;
    } else if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return HSI_FAIL(HSI_ERR_IO, "%s: the %s is %s, expected a regular file", path, w,
                        kind_name(sb.st_mode));
    }
    /* reads block normally from here on */
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    *fd_out = fd;
    if (size) *size = n;
    return HSI_OK;
}

hsi_status hsi_input_fopen(FILE **out, const char *path, const char *what)
{
    *out = NULL;
    int fd;
    hsi_status st = hsi_input_open(&fd, path, what, NULL);
    if (st != HSI_OK) return st;
    FILE *fp = fdopen(fd, "rb");
    if (!fp) {
        int e = errno;
        close(fd);
        return HSI_FAIL(HSI_ERR_IO, "%s: cannot open the %s: %s", path, what ? what : "file",
                        strerror(e));
    }
    *out = fp;
    return HSI_OK;
}

hsi_status hsi_input_check(const char *path, const char *what)
{
    int fd;
    hsi_status st = hsi_input_open(&fd, path, what, NULL);
    if (st == HSI_OK) close(fd);
    return st;
}

hsi_status hsi_read_file(const char *path, char **out, size_t *len)
{
    *out = NULL;
    if (len) *len = 0;
    FILE *fp;
    hsi_status st = hsi_input_fopen(&fp, path, NULL);
    if (st != HSI_OK) return st;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(fp);
        return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    }
    for (;;) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(fp);
                return HSI_FAIL(HSI_ERR_NOMEM, "out of memory reading %s", path);
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, fp);
        n += got;
        if (got == 0) break;
    }
    int err = ferror(fp);
    fclose(fp);
    if (err) {
        free(buf);
        return HSI_FAIL(HSI_ERR_IO, "%s: read error", path);
    }
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return HSI_OK;
}

/* -------------------------------------------------------------- fault hook */

/* HSI_FAULT=<point>[:eio|:term] (tests only): at <point> the process kills
 * itself with SIGKILL; with ":term" it sends itself SIGTERM (as a user's
 * kill would); with ":eio" the step fails as if the disk had said EIO. */
int hsi_fault_point(const char *point)
{
    const char *f = getenv("HSI_FAULT");
    if (!f || !*f) return 0;
    size_t n = strlen(point);
    if (strncmp(f, point, n) != 0 || (f[n] != 0 && f[n] != ':')) return 0;
    if (f[n] == ':' && !strcmp(f + n + 1, "eio")) {
        errno = EIO;
        return 1;
    }
    if (f[n] == ':' && !strcmp(f + n + 1, "term")) {
        raise(SIGTERM);
        return 0;
    }
    raise(SIGKILL);
    return 0;
}

/* ------------------------------------------------- temporaries and signals */

/* Live temporaries, removed by the signal handler. Slots hold copies of the
 * paths so the handler (async-signal-safe: unlink only) never reads freed
 * memory. */
#define TMP_SLOTS 64
static struct {
    volatile sig_atomic_t used;
    char path[PATH_MAX];
} g_tmp[TMP_SLOTS];
static pthread_mutex_t g_tmp_lock = PTHREAD_MUTEX_INITIALIZER;

static int tmp_register(const char *path)
{
    if (strlen(path) >= PATH_MAX) return -1;
    pthread_mutex_lock(&g_tmp_lock);
    int slot = -1;
    for (int i = 0; i < TMP_SLOTS; i++)
        if (!g_tmp[i].used) {
            strcpy(g_tmp[i].path, path);
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            g_tmp[i].used = 1;
            slot = i;
            break;
        }
    pthread_mutex_unlock(&g_tmp_lock);
    return slot;
}

/* slot: as returned by tmp_register plus one (0: none, as in a zeroed struct) */
static void tmp_unregister(int slot)
{
    if (slot < 1 || slot > TMP_SLOTS) return;
    pthread_mutex_lock(&g_tmp_lock);
    g_tmp[slot - 1].used = 0;
    pthread_mutex_unlock(&g_tmp_lock);
}

static void on_signal(int sig)
{
    for (int i = 0; i < TMP_SLOTS; i++)
        if (g_tmp[i].used) unlink(g_tmp[i].path);
    signal(sig, SIG_DFL);
    raise(sig);
}

void hsi_tmp_cleanup_on_signals(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) != 0) continue;
        if (old.sa_handler != SIG_DFL) continue; /* the program has its own */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

/* "dir/base" -> dir ("." when none) and base. */
static void split_path(const char *path, char *dir, size_t dn, const char **base)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, dn, ".");
        *base = path;
    } else {
        size_t k = (size_t)(slash - path);
        if (k == 0) k = 1; /* "/x" */
        snprintf(dir, dn, "%.*s", (int)k, path);
        *base = slash + 1;
    }
}

/* name is "<base><tag>XXXXXX" (six characters of mkstemp's alphabet) */
static int is_tmp_of(const char *name, const char *base, const char *tag)
{
    size_t b = strlen(base), t = strlen(tag);
    if (strncmp(name, base, b) || strncmp(name + b, tag, t)) return 0;
    const char *x = name + b + t;
    if (strlen(x) != 6) return 0;
    for (int i = 0; i < 6; i++)
        if (!((x[i] >= 'a' && x[i] <= 'z') || (x[i] >= 'A' && x[i] <= 'Z') ||
              (x[i] >= '0' && x[i] <= '9')))
            return 0;
    return 1;
}

/* 1 when path exists and no live writer holds its lock. */
static int unlocked(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0) return 0;
    struct stat sb;
    int ok = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && flock(fd, LOCK_EX | LOCK_NB) == 0;
    close(fd);
    return ok;
}


/* Removes "<base>.hsi-tmp-XXXXXX" files beside path that no live hsi
 * process is writing (a killed run's leftovers); nothing else. */
static void remove_stale(const char *path)
{
    char dir[PATH_MAX], full[PATH_MAX];
    const char *base;
    split_path(path, dir, sizeof dir, &base);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_tmp_of(e->d_name, base, ".hsi-tmp-")) continue;
        if ((size_t)snprintf(full, sizeof full, "%s/%s", dir, e->d_name) >= sizeof full) continue;
        if (unlocked(full)) unlink(full);
    }
    closedir(d);
}

hsi_status hsi_atomic_open(hsi_atomic_file *af, const char *path)
{
    memset(af, 0, sizeof *af);
    size_t n = strlen(path);
    if (n + 16 >= PATH_MAX) return HSI_FAIL(HSI_ERR_ARG, "%s: path too long", path);
    size_t pn = strlen(path);
    if (pn > 4 && !strcasecmp(path + pn - 4, ".hdr")) hsi_atomic_pair_recover(path);
    remove_stale(path);
    af->final_path = strdup(path);
    af->tmp_path = malloc(n + 16);
    if (!af->final_path || !af->tmp_path) {
        hsi_atomic_abort(af);
        return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    }
    snprintf(af->tmp_path, n + 16, "%s.hsi-tmp-XXXXXX", path);
    int fd = mkostemp(af->tmp_path, O_CLOEXEC);
    if (fd < 0) {
        hsi_status st = HSI_FAIL(HSI_ERR_IO, "%s: cannot create a temporary file beside it: %s",
                                 path, strerror(errno));
        free(af->tmp_path);
        af->tmp_path = NULL;
        hsi_atomic_abort(af);
        return st;
    }
    af->slot = tmp_register(af->tmp_path) + 1;
    flock(fd, LOCK_EX); /* held until commit or abort: "a live writer" */
    fchmod(fd, 0644);
    af->fp = fdopen(fd, "wb");
    if (!af->fp) {
        close(fd);
        hsi_atomic_abort(af);
        return HSI_FAIL(HSI_ERR_IO, "%s: fdopen failed", path);
    }
    return HSI_OK;
}

/* Flushes and syncs the temporary (still open, still locked). */
static hsi_status atomic_flush(hsi_atomic_file *af)
{
    if (!af->fp) return HSI_FAIL(HSI_ERR_STATE, "atomic commit without an open file");
    int bad = ferror(af->fp);
    if (fflush(af->fp) != 0) bad = 1;
    if (!bad && fsync(fileno(af->fp)) != 0 && errno != EINVAL) bad = 1;
    if (bad)
        return HSI_FAIL(HSI_ERR_IO, "%s: write failed: %s", af->final_path, strerror(errno));
    return HSI_OK;
}

void hsi_sync_parent_dir(const char *path)
{
    char dir[PATH_MAX];
    const char *base;
    split_path(path, dir, sizeof dir, &base);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* The temporary is in place under its final name: forget it. */
static void atomic_done(hsi_atomic_file *af)
{
    tmp_unregister(af->slot);
    af->slot = 0;
    free(af->tmp_path);
    af->tmp_path = NULL;
}

hsi_status hsi_atomic_commit(hsi_atomic_file *af)
{
    hsi_status st = atomic_flush(af);
    if (st == HSI_OK) {
        if (hsi_fault_point("rename") || rename(af->tmp_path, af->final_path) != 0) {
            st = HSI_FAIL(HSI_ERR_IO, "%s: cannot rename the temporary file into place: %s",
                          af->final_path, strerror(errno));
        } else {
            atomic_done(af);
            hsi_sync_parent_dir(af->final_path);
        }
    }
    hsi_atomic_abort(af);
    return st;
}

void hsi_atomic_abort(hsi_atomic_file *af)
{
    if (af->tmp_path) unlink(af->tmp_path);
    if (af->fp) fclose(af->fp); /* after the unlink: the lock is held until then */
    tmp_unregister(af->slot);
    free(af->tmp_path);
    free(af->final_path);
    memset(af, 0, sizeof *af);
}

hsi_status hsi_write_file_atomic(const char *path, const void *data, size_t len)
{
    hsi_atomic_file af;
    hsi_status st = hsi_atomic_open(&af, path);
    if (st != HSI_OK) return st;
    if (len && fwrite(data, 1, len, af.fp) != len) {
        hsi_atomic_abort(&af);
        return HSI_FAIL(HSI_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    }
    return hsi_atomic_commit(&af);
}

/* ------------------------------------------------------ header + data pair */

/* A pair write moves two files; between the two renames a reader would see
 * the new data under the old header. So, with both temporaries complete and
 * synced:
 *   1. "<hdr>.hsi-pair" is written (atomically): the names of the data and
 *      header temporaries and of the backup of the old data;
 *   2. the old data file is hard-linked to that backup name;
 *   3. data temporary -> data; 4. header temporary -> header;
 *   5. backup and marker removed.
 * A reader finding the marker with the data temporary gone and the header
 * temporary still there knows the pair is torn and refuses it, saying so.
 * The next write to the same header finishes the interrupted one first
 * (both new files were complete: roll forward). A failed header rename puts
 * the old data back from the backup: the old pair stays whole. */

static void marker_path(char *buf, size_t n, const char *hdr_path)
{
    snprintf(buf, n, "%s.hsi-pair", hdr_path);
}

typedef struct pair_marker {
    char data_tmp[PATH_MAX], hdr_tmp[PATH_MAX], backup[PATH_MAX], data[PATH_MAX];
} pair_marker;

/* Reads the marker (paths inside are basenames in the header's folder). */
static int marker_read(pair_marker *m, const char *hdr_path)
{
    char mp[PATH_MAX], dir[PATH_MAX], line[PATH_MAX + 32], val[PATH_MAX];
    const char *base;
    marker_path(mp, sizeof mp, hdr_path);
    split_path(hdr_path, dir, sizeof dir, &base);
    int fd = open(mp, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0) return 0;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return 0;
    }
    FILE *fp = fdopen(fd, "r");
    if (!fp) {
        close(fd);
        return 0;
    }
    memset(m, 0, sizeof *m);
    int ok = fgets(line, sizeof line, fp) && !strcmp(line, "hsi pair 1\n");
    while (ok && fgets(line, sizeof line, fp)) {
        char key[32];
        if (sscanf(line, "%31s %4095[^\n]", key, val) != 2 || strchr(val, '/')) continue;
        char *dst = !strcmp(key, "data-tmp") ? m->data_tmp
                    : !strcmp(key, "header-tmp") ? m->hdr_tmp
                    : !strcmp(key, "backup") ? m->backup
                    : !strcmp(key, "data") ? m->data : NULL;
        if (dst && strcmp(val, "-"))
            snprintf(dst, PATH_MAX, "%s/%s", dir, val);
    }
    fclose(fp);
    return ok && m->hdr_tmp[0] && m->data[0];
}

static int exists(const char *p) { return p[0] && access(p, F_OK) == 0; }

/* Torn: the new data moved, the new header not. The backup is a hard link of
 * the old data, so "moved" is "the data file is no longer the backup's
 * inode"; with no old data, "moved" is "a data file exists". */
static int pair_torn(const pair_marker *m, int named_backup)
{
    struct stat d, b;
    if (!exists(m->hdr_tmp) || stat(m->data, &d) != 0) return 0;
    if (!named_backup) return 1;
    return stat(m->backup, &b) == 0 && (d.st_ino != b.st_ino || d.st_dev != b.st_dev);
}

void hsi_atomic_pair_recover(const char *hdr_path)
{
    pair_marker m;
    char mp[PATH_MAX];
    marker_path(mp, sizeof mp, hdr_path);
    if (access(mp, F_OK) != 0) return;
    if (!marker_read(&m, hdr_path)) {
        unlink(mp);
        return;
    }
    if ((exists(m.data_tmp) && !unlocked(m.data_tmp)) || (exists(m.hdr_tmp) && !unlocked(m.hdr_tmp)))
        return; /* its writer is alive */
    if (pair_torn(&m, m.backup[0] != 0)) {
        /* new data, old header; the new header is complete: roll forward */
        if (rename(m.hdr_tmp, hdr_path) != 0) return;
    } else {
        /* killed before the data moved: the old pair is whole */
        if (m.data_tmp[0]) unlink(m.data_tmp);
        unlink(m.hdr_tmp);
    }
    if (m.backup[0]) unlink(m.backup);
    unlink(mp);
    hsi_sync_parent_dir(hdr_path);
}

hsi_status hsi_atomic_pair_check(const char *hdr_path)
{
    pair_marker m;
    char mp[PATH_MAX];
    marker_path(mp, sizeof mp, hdr_path);
    if (access(mp, F_OK) != 0 || !marker_read(&m, hdr_path)) return HSI_OK;
    if (pair_torn(&m, m.backup[0] != 0))
        return HSI_FAIL(HSI_ERR_STATE,
                        "%s: a write of this cube was interrupted between its data file and its "
                        "header (%s records it): %s is the new data, the header is the old one, so "
                        "the pair does not match; the next hsi write to %s completes it (or "
                        "delete the pair and write it again)",
                        hdr_path, mp, m.data, hdr_path);
    return HSI_OK;
}

static const char *base_of(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

hsi_status hsi_atomic_commit_pair(hsi_atomic_file *data, hsi_atomic_file *hdr)
{
    hsi_status st = HSI_OK;
    char mp[PATH_MAX], backup[PATH_MAX] = "";
    int have_backup = 0, have_marker = 0;
    HSI_TRY(atomic_flush(data));
    HSI_TRY(atomic_flush(hdr));
    marker_path(mp, sizeof mp, hdr->final_path);

    struct stat sb;
    if (lstat(data->final_path, &sb) == 0 && S_ISREG(sb.st_mode)) {
        /* a name for the backup, unique in the folder */
        for (int tries = 0; tries < 100 && !backup[0]; tries++) {
            snprintf(backup, sizeof backup, "%s.hsi-old-%06x", data->final_path,
                     (unsigned)((getpid() * 2654435761u + (unsigned)tries * 40503u +
                                 (unsigned)sb.st_ino) & 0xffffff));
            if (access(backup, F_OK) == 0) backup[0] = 0;
        }
        if (!backup[0]) {
            st = HSI_FAIL(HSI_ERR_IO, "%s: no free name for the old data's backup", data->final_path);
            goto cleanup;
        }
    }
    {
        char text[4 * PATH_MAX];
        snprintf(text, sizeof text, "hsi pair 1\ndata %s\ndata-tmp %s\nheader-tmp %s\nbackup %s\n",
                 base_of(data->final_path), base_of(data->tmp_path), base_of(hdr->tmp_path),
                 backup[0] ? base_of(backup) : "-");
        HSI_TRY(hsi_write_file_atomic(mp, text, strlen(text)));
        have_marker = 1;
    }
    if (backup[0]) {
        if (link(data->final_path, backup) != 0) {
            st = HSI_FAIL(HSI_ERR_IO, "%s: cannot keep the old data as %s while the new pair moves "
                                      "into place: %s", data->final_path, backup, strerror(errno));
            goto cleanup;
        }
        have_backup = 1;
    }
    if (hsi_fault_point("pair-data") || rename(data->tmp_path, data->final_path) != 0) {
        st = HSI_FAIL(HSI_ERR_IO, "%s: cannot rename the temporary file into place: %s",
                      data->final_path, strerror(errno));
        goto cleanup;
    }
    atomic_done(data);
    if (hsi_fault_point("pair-header") || rename(hdr->tmp_path, hdr->final_path) != 0) {
        int e = errno;
        /* put the old data back (or remove the new one when there was none) */
        int restored = have_backup ? rename(backup, data->final_path) == 0
                                   : unlink(data->final_path) == 0;
        if (restored) have_backup = 0;
        st = HSI_FAIL(HSI_ERR_IO, "%s: cannot rename the temporary file into place: %s; %s",
                      hdr->final_path, strerror(e),
                      restored ? "the previous files are unchanged"
                               : "the data file is new and the header old (see the .hsi-pair file)");
        if (!restored) have_marker = 0, have_backup = 0; /* leave them for recovery */
        goto cleanup;
    }
    atomic_done(hdr);
cleanup:
    if (have_backup) unlink(backup);
    if (have_marker) unlink(mp);
    if (st == HSI_OK) hsi_sync_parent_dir(hdr->final_path);
    hsi_atomic_abort(data);
    hsi_atomic_abort(hdr);
    return st;
}

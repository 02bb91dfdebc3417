/* workdir.c — a training run's working folder and its move into place (see
 * workdir.h). */
#define _GNU_SOURCE
#include "pipeline/workdir.h"

#include "pipeline/run_internal.h" /* hsi_run_path */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* Every file a run directory holds (docs/run-directory.md); with hsi's own
 * temporaries these are the files --overwrite may replace. */
static const char *const run_files[] = {
    "pipeline.json", "model.safetensors", "preprocessing.safetensors", "train_state.safetensors",
    "best.safetensors", "split.json", "split.hdr", "split", "metrics.json", "map.hdr", "map",
    "map.png", "map.tif", "map.tif.aux.xml", "map.png.aux.xml", "train.log", "profile.json",
    "pca.bin", "history.csv", "curves.png", "confusion.png", "spectra.png", "report.html",
    ".hsi-lock", NULL};
/* any one of these: the folder holds a run */
static const char *const run_marks[] = {"pipeline.json", "train_state.safetensors",
                                        "model.safetensors", NULL};

static int is_run_file(const char *name)
{
    for (int i = 0; run_files[i]; i++)
        if (!strcmp(name, run_files[i])) return 1;
    return strstr(name, ".hsi-tmp-") || strstr(name, ".hsi-old-") || strstr(name, ".hsi-pair");
}

static int has(const char *dir, const char *name)
{
    char *p = hsi_run_path(dir, name);
    int r = p && access(p, F_OK) == 0;
    free(p);
    return r;
}

static const char *run_mark(const char *dir)
{
    for (int i = 0; run_marks[i]; i++)
        if (has(dir, run_marks[i])) return run_marks[i];
    return NULL;
}

/* The first entry of dir that is not a run's file (NULL: none) in buf. */
static const char *foreign_file(const char *dir, char *buf, size_t n)
{
    DIR *d = opendir(dir);
    if (!d) return NULL;
    const char *found = NULL;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && !is_run_file(e->d_name)) {
            snprintf(buf, n, "%s", e->d_name);
            found = buf;
            break;
        }
    closedir(d);
    return found;
}

/* Removes a run's files from dir, then dir itself when empty. */
static void remove_run(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_run_file(e->d_name)) continue;
        char *p = hsi_run_path(dir, e->d_name);
        if (p) unlink(p);
        free(p);
    }
    closedir(d);
    rmdir(dir);
}

hsi_status hsi_make_dirs(const char *dir)
{
    char *p = strdup(dir);
    if (!p) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    for (char *q = p + 1; *q; q++) {
        if (*q != '/') continue;
        *q = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            hsi_status st = HSI_FAIL(HSI_ERR_IO, "%s: cannot create the folder %s: %s", dir, p,
                                     strerror(errno));
            free(p);
            return st;
        }
        *q = '/';
    }
    free(p);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return HSI_FAIL(HSI_ERR_IO, "%s: cannot create the directory: %s", dir, strerror(errno));
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return HSI_FAIL(HSI_ERR_IO, "%s: exists and is not a directory", dir);
    return HSI_OK;
}

/* Locks work/.hsi-lock: a live run holds it. Returns the fd or -1. */
static int lock_work(const char *work, int create)
{
    char *p = hsi_run_path(work, ".hsi-lock");
    if (!p) return -1;
    int fd = open(p, O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0), 0644);
    free(p);
    if (fd < 0) return -1;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The newest interrupted run of final ("<final>.hsi-tmp-XXXXXX" holding a
 * training state, not held by a live run) into *out (NULL: none); its lock
 * taken into *fd. With remove_all, every such folder is removed instead. */
static hsi_status find_interrupted(const char *final, char **out, int *fd, int remove_all)
{
    *out = NULL;
    *fd = -1;
    char dir[PATH_MAX];
    const char *slash = strrchr(final, '/');
    const char *base = slash ? slash + 1 : final;
    if (slash) snprintf(dir, sizeof dir, "%.*s", slash == final ? 1 : (int)(slash - final), final);
    else snprintf(dir, sizeof dir, ".");
    DIR *d = opendir(dir);
    if (!d) return HSI_OK;
    size_t bn = strlen(base);
    double newest = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, base, bn) || strncmp(e->d_name + bn, ".hsi-tmp-", 9) ||
            strlen(e->d_name + bn + 9) != 6)
            continue;
        char *w = hsi_run_path(dir, e->d_name);
        struct stat sb;
        if (!w || lstat(w, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            free(w);
            continue;
        }
        int lfd = lock_work(w, 0);
        if (lfd < 0 && has(w, ".hsi-lock")) { /* a live run */
            free(w);
            continue;
        }
        char *state = hsi_run_path(w, "train_state.safetensors");
        struct stat ss;
        int resumable = state && stat(state, &ss) == 0;
        free(state);
        if (remove_all || !resumable) {
            remove_run(w);
            if (lfd >= 0) close(lfd);
            free(w);
            continue;
        }
        double t = (double)ss.st_mtim.tv_sec + 1e-9 * (double)ss.st_mtim.tv_nsec;
        if (t > newest) {
            newest = t;
            free(*out);
            if (*fd >= 0) close(*fd);
            *out = w;
            *fd = lfd;
        } else {
            if (lfd >= 0) close(lfd);
            free(w);
        }
    }
    closedir(d);
    return HSI_OK;
}

hsi_status hsi_workdir_begin(hsi_workdir *w, const char *final, int resume, int overwrite)
{
    hsi_status st = HSI_OK;
    memset(w, 0, sizeof *w);
    w->lock_fd = -1;
    char *interrupted = NULL, buf[NAME_MAX + 1];
    int ifd = -1;
    size_t fn = strlen(final);
    while (fn > 1 && final[fn - 1] == '/') fn--; /* "run/" names run */
    if (!(w->final = strndup(final, fn))) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    struct stat sb;
    int exists = stat(w->final, &sb) == 0;
    if (exists && !S_ISDIR(sb.st_mode)) {
        st = HSI_FAIL(HSI_ERR_ARG, "%s: exists and is not a directory (the run directory)", w->final);
        goto cleanup;
    }
    const char *mark = exists ? run_mark(w->final) : NULL;
    HSI_TRY(find_interrupted(w->final, &interrupted, &ifd, !resume && overwrite));
    if (resume) {
        if (interrupted) {
            w->work = interrupted;
            w->lock_fd = ifd >= 0 ? ifd : lock_work(interrupted, 1);
            interrupted = NULL;
            snprintf(w->note, sizeof w->note, "resuming the interrupted run in %s; it moves to %s "
                                              "when it finishes\n", w->work, w->final);
        } else if (exists && has(w->final, "train_state.safetensors")) {
            if (!(w->work = strdup(w->final))) goto nomem;
            w->kind = HSI_WD_IN_PLACE;
            goto cleanup;
        } else {
            st = HSI_FAIL(HSI_ERR_NOT_FOUND, "--resume: %s/train_state.safetensors: no training "
                                             "state to resume (nor an interrupted run of %s beside it)",
                          w->final, w->final);
            goto cleanup;
        }
    } else {
        if (interrupted) {
            st = HSI_FAIL(HSI_ERR_ARG, "%s: an interrupted run of %s is there: give --resume to "
                                       "continue it or --overwrite to start again",
                          interrupted, w->final);
            goto cleanup;
        }
        if (mark && !overwrite) {
            st = HSI_FAIL(HSI_ERR_ARG, "%s holds a training run already (%s): give --overwrite to "
                                       "replace it or --resume to continue it", w->final, mark);
            goto cleanup;
        }
        /* the working folder beside the destination, parents created */
        size_t n = fn + 16;
        if (!(w->work = malloc(n))) goto nomem;
        snprintf(w->work, n, "%s.hsi-tmp-XXXXXX", w->final);
        char *slash = strrchr(w->final, '/');
        if (slash && slash != w->final) {
            *slash = 0;
            st = hsi_make_dirs(w->final);
            *slash = '/';
            if (st != HSI_OK) goto cleanup;
        }
        if (!mkdtemp(w->work)) {
            st = HSI_FAIL(HSI_ERR_IO, "%s: cannot create the working folder beside it: %s", w->final,
                          strerror(errno));
            free(w->work);
            w->work = NULL;
            goto cleanup;
        }
        chmod(w->work, 0755);
        w->lock_fd = lock_work(w->work, 1);
    }
    w->kind = !exists ? HSI_WD_NEW : mark ? HSI_WD_REPLACE : HSI_WD_FILL;
    if (w->kind == HSI_WD_REPLACE && foreign_file(w->final, buf, sizeof buf)) {
        st = HSI_FAIL(HSI_ERR_ARG, "%s holds '%s', which is not part of a run: replacing the run "
                                   "would remove it; move it away or choose another --out",
                      w->final, buf);
        goto cleanup;
    }
cleanup:
    free(interrupted);
    if (ifd >= 0) close(ifd);
    if (st != HSI_OK) {
        if (resume) w->kind = HSI_WD_IN_PLACE; /* an interrupted run stays as it is */
        hsi_workdir_free(w);
    }
    return st;
nomem:
    st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    goto cleanup;
}

hsi_status hsi_workdir_commit(hsi_workdir *w)
{
    if (w->kind == HSI_WD_IN_PLACE) return HSI_OK;
    char *lock = hsi_run_path(w->work, ".hsi-lock");
    if (lock) unlink(lock); /* the fd keeps the lock until hsi_workdir_free */
    free(lock);
    if (hsi_fault_point("run-swap")) {
        return HSI_FAIL(HSI_ERR_IO, "%s: cannot move the finished run from %s: %s", w->final,
                        w->work, strerror(errno));
    }
    if (w->kind == HSI_WD_NEW) {
        if (rename(w->work, w->final) != 0)
            return HSI_FAIL(HSI_ERR_IO, "%s: cannot move the finished run from %s into place: %s",
                            w->final, w->work, strerror(errno));
    } else if (w->kind == HSI_WD_REPLACE) {
        /* one step: the old run and the new exchange names */
        if (renameat2(AT_FDCWD, w->work, AT_FDCWD, w->final, RENAME_EXCHANGE) != 0) {
            if (errno != EINVAL && errno != ENOSYS)
                return HSI_FAIL(HSI_ERR_IO, "%s: cannot exchange the finished run %s with it: %s",
                                w->final, w->work, strerror(errno));
            /* no exchange on this file system: the old run aside, then the new one in */
            size_t n = strlen(w->final) + 16;
            char *old = malloc(n);
            if (!old) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            snprintf(old, n, "%s.hsi-old-XXXXXX", w->final);
            int fd = mkstemp(old);
            if (fd >= 0) close(fd), unlink(old);
            if (fd < 0 || rename(w->final, old) != 0 || rename(w->work, w->final) != 0) {
                hsi_status st = HSI_FAIL(HSI_ERR_IO, "%s: cannot move the finished run %s into "
                                                     "place: %s", w->final, w->work, strerror(errno));
                if (access(w->final, F_OK) != 0) rename(old, w->final);
                free(old);
                return st;
            }
            free(w->work);
            w->work = old; /* now the old run */
        }
        remove_run(w->work); /* the old run's files */
    } else { /* FILL: file by file, the run's index last */
        DIR *d = opendir(w->work);
        if (!d) return HSI_FAIL(HSI_ERR_IO, "%s: cannot list %s: %s", w->final, w->work, strerror(errno));
        struct dirent *e;
        hsi_status st = HSI_OK;
        for (int pass = 0; pass < 2 && st == HSI_OK; pass++) {
            rewinddir(d);
            while ((e = readdir(d)) && st == HSI_OK) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
                if ((pass == 0) == !strcmp(e->d_name, "pipeline.json")) continue;
                char *a = hsi_run_path(w->work, e->d_name), *b = hsi_run_path(w->final, e->d_name);
                if (!a || !b || rename(a, b) != 0)
                    st = HSI_FAIL(HSI_ERR_IO, "%s: cannot move %s into it: %s", w->final,
                                  a ? a : "?", strerror(errno));
                free(a);
                free(b);
            }
        }
        closedir(d);
        if (st != HSI_OK) return st;
        rmdir(w->work);
    }
    hsi_sync_parent_dir(w->final);
    free(w->work);
    w->work = strdup(w->final);
    w->kind = HSI_WD_IN_PLACE;
    return HSI_OK;
}

void hsi_workdir_free(hsi_workdir *w)
{
    /* a run that stopped before its first checkpoint leaves nothing to resume */
    if (w->work && w->kind != HSI_WD_IN_PLACE && !has(w->work, "train_state.safetensors"))
        remove_run(w->work);
    if (w->lock_fd >= 0) close(w->lock_fd);
    free(w->final);
    free(w->work);
    memset(w, 0, sizeof *w);
    w->lock_fd = -1;
}

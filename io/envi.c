/* envi.c — the ENVI reader's file side: finds the data file for a header
 * (or the header for a data file), opens both without blocking (a FIFO, a
 * directory, a device or a symlink loop is refused, saying which) and maps
 * the data. Header syntax, the size checks, gzip and the view are
 * envi_header.c (the memory reader); writing is envi_write.c. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "envi.h"

#define MAX_HEADER_FILE ((int64_t)64 << 20)

/* Data file extensions tried after the bare stem, in this order. */
static const char *const data_exts[] = {".img", ".dat", ".raw", ".bin", ".bsq", ".bil",
                                        ".bip", ".spe", ".sli", ".hyspex", ".pix"};
#define N_DATA_EXTS (sizeof data_exts / sizeof data_exts[0])

/* ------------------------------------------------------------ path bits */

static int ends_with_ci(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcasecmp(s + n - k, suffix);
}

static char *str_cat(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    char *r = malloc(na + nb + 1);
    if (!r) return NULL;
    memcpy(r, a, na);
    memcpy(r + na, b, nb + 1);
    return r;
}

/* Position of the extension's dot in the last path component, or NULL. */
static const char *ext_dot(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    const char *dot = strrchr(base, '.');
    return (dot && dot != base) ? dot : NULL;
}

/* What hsi_input_open accepts (a regular file or a block device), asked
 * with stat only: a lookup never opens a candidate. */
static int is_input(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && (S_ISREG(sb.st_mode) || S_ISBLK(sb.st_mode));
}

/* Names that exist but cannot be read as a file (a FIFO, a directory, a
 * device, a symlink loop or a dangling symlink): the first one other than
 * a directory, and the first directory, for the message when no usable
 * candidate is found. */
typedef struct unusable {
    char *other, *dir;
} unusable;

static void unusable_note(unusable *u, const char *path)
{
    struct stat sb;
    if (!u || lstat(path, &sb) != 0) return;
    int is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    char **slot = is_dir ? &u->dir : &u->other;
    if (!*slot) *slot = strdup(path);
}

static void unusable_free(unusable *u)
{
    free(u->other);
    free(u->dir);
}

/* The failure for an unusable candidate of the given role ("data file"),
 * with the names tried: "X: the data file is a FIFO (named pipe), expected
 * a regular file (tried ...)". Returns HSI_OK when there is none (or it
 * has become usable meanwhile). */
static hsi_status unusable_fail(const unusable *u, const char *owner, const char *what,
                                const char *tried_list)
{
    const char *path = u->other ? u->other : u->dir;
    if (!path) return HSI_OK;
    char why[1024];
    hsi_status st;
    struct stat sb;
    char target[PATH_MAX];
    ssize_t tn;
    if (lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode) && stat(path, &sb) != 0 && errno == ENOENT &&
        (tn = readlink(path, target, sizeof target - 1)) >= 0) {
        target[tn] = 0;
        st = HSI_ERR_IO;
        snprintf(why, sizeof why, "%s: the %s is a symbolic link to '%s', which does not exist",
                 path, what, target);
    } else {
        st = hsi_input_check(path, what);
        if (st == HSI_OK) return HSI_OK;
        int is_link = lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode);
        if (is_link && (tn = readlink(path, target, sizeof target - 1)) >= 0) {
            target[tn] = 0;
            snprintf(why, sizeof why, "%s; it is a symbolic link to '%s'", hsi_last_error(),
                     target);
        } else {
            snprintf(why, sizeof why, "%s", hsi_last_error());
        }
    }
    return HSI_FAIL(st, "%s: %s (tried %s, any letter case)", owner, why, tried_list);
}

/* Finds `want` in its directory: the exact name first, then a name that
 * differs only in letter case (by listing the directory). Returns a
 * malloc'd path or NULL; names that exist but are no file to read go to
 * *u (may be NULL). */
static char *match_ci(const char *want, unusable *u)
{
    if (is_input(want)) return strdup(want);
    unusable_note(u, want);
    const char *slash = strrchr(want, '/');
    char *dir = slash ? strndup(want, (size_t)(slash - want + (slash == want))) : strdup(".");
    const char *base = slash ? slash + 1 : want;
    char *found = NULL;
    if (!dir) return NULL;
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strcasecmp(e->d_name, base)) continue;
            size_t n = strlen(dir) + strlen(e->d_name) + 2;
            char *cand = malloc(n);
            if (!cand) break;
            snprintf(cand, n, "%s/%s", dir, e->d_name);
            if (is_input(cand)) {
                found = cand;
                break;
            }
            if (strcmp(e->d_name, base)) unusable_note(u, cand); /* the exact name: noted above */
            free(cand);
        }
        closedir(d);
    }
    free(dir);
    return found;
}

/* A growing "a, b, c" list of tried names for messages. */
typedef struct tried {
    char buf[1536];
    size_t n;
} tried;

static void tried_add(tried *t, const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *show = slash ? slash + 1 : path;
    if (t->n + strlen(show) + 8 >= sizeof t->buf) {
        if (t->n + 5 < sizeof t->buf && strcmp(t->buf + t->n - 3, "...")) {
            strcpy(t->buf + t->n, ", ...");
            t->n += 5;
        }
        return;
    }
    t->n += (size_t)snprintf(t->buf + t->n, sizeof t->buf - t->n, "%s%s", t->n ? ", " : "", show);
}

hsi_status hsi_envi_find_header(char **out, const char *data_path)
{
    *out = NULL;
    tried t = {.n = 0};
    t.buf[0] = 0;
    char *cands[2] = {NULL, NULL};
    int nc = 0;
    unusable u = {NULL, NULL};
    /* appended form first (X.ext.hdr), then replaced (X.hdr) */
    cands[nc++] = str_cat(data_path, ".hdr");
    const char *dot = ext_dot(data_path);
    if (dot) {
        char *stem = strndup(data_path, (size_t)(dot - data_path));
        if (stem) cands[nc++] = str_cat(stem, ".hdr");
        free(stem);
    }
    hsi_status st = HSI_OK;
    for (int i = 0; i < nc; i++) {
        if (!cands[i]) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        tried_add(&t, cands[i]);
        if ((*out = match_ci(cands[i], &u))) goto cleanup;
    }
    /* a header name that is a FIFO, a directory, ...: say so */
    if ((st = unusable_fail(&u, data_path, "ENVI header", t.buf)) != HSI_OK) goto cleanup;
    st = HSI_FAIL(HSI_ERR_NOT_FOUND,
                  "%s: no ENVI header found beside the data file (tried %s, any letter case)",
                  data_path, t.buf);
cleanup:
    for (int i = 0; i < nc; i++) free(cands[i]);
    unusable_free(&u);
    return st;
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

hsi_status hsi_envi_find_data(char **out, const char *header_path, hsi_meta *m)
{
    *out = NULL;
    hsi_status st = HSI_OK;
    tried t = {.n = 0};
    t.buf[0] = 0;
    struct stat hsb;
    int have_h = stat(header_path, &hsb) == 0;
    int self_seen = 0;
    unusable u = {NULL, NULL};
    char *stem = ends_with_ci(header_path, ".hdr")
                     ? strndup(header_path, strlen(header_path) - 4)
                     : strdup(header_path);
    char *extra = NULL; /* a later match, reported as a warning */
    if (!stem) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i <= N_DATA_EXTS; i++) {
        char *cand = i == 0 ? strdup(stem) : str_cat(stem, data_exts[i - 1]);
        if (!cand) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        tried_add(&t, cand);
        char *hit = match_ci(cand, &u);
        free(cand);
        if (!hit) continue;
        struct stat dsb;
        if (have_h && stat(hit, &dsb) == 0 && same_file(&hsb, &dsb)) {
            self_seen = 1;
            free(hit);
            continue;
        }
        if (!*out) *out = hit;
        else {
            if (!extra) extra = hit;
            else free(hit);
        }
    }
    if (*out) {
        /* with the header's other warnings (hsi info shows them once) */
        if (extra && m)
            hsi_meta_warn(m, "%s: several data files match; using %s (also found %s)", header_path,
                          *out, extra);
        else if (extra)
            hsi_warn("%s: several data files match; using %s (also found %s)", header_path, *out,
                     extra);
        goto cleanup;
    }
    /* a candidate that is a FIFO, a directory, a device, a symlink loop:
     * say what was found (a directory only when nothing else was) */
    if ((st = unusable_fail(&u, header_path, "data file", t.buf)) != HSI_OK) goto cleanup;
    if (self_seen)
        st = HSI_FAIL(HSI_ERR_FORMAT,
                      "%s: the header is named as its own data file: the only candidate for the "
                      "data is the header itself (tried %s); name the header X.hdr beside data X",
                      header_path, t.buf);
    else
        st = HSI_FAIL(HSI_ERR_NOT_FOUND,
                      "%s: data file not found (tried %s, any letter case)", header_path,
                      t.buf);
cleanup:
    unusable_free(&u);
    free(extra);
    free(stem);
    return st;
}

/* -------------------------------------------------------------- opening */

/* Does the file open on fd start like an ENVI header ("ENVI" + end of
 * line)? fd: from hsi_input_open (never a FIFO), read at offset 0. */
static int looks_like_header(int fd)
{
    unsigned char b[8] = {0};
    ssize_t got = pread(fd, b, sizeof b, 0);
    size_t n = got > 0 ? (size_t)got : 0;
    size_t o = (n >= 3 && b[0] == 0xEF && b[1] == 0xBB && b[2] == 0xBF) ? 3 : 0;
    if (n < o + 4 || strncasecmp((const char *)b + o, "ENVI", 4)) return 0;
    return n == o + 4 || b[o + 4] == '\n' || b[o + 4] == '\r' || b[o + 4] == ' ' ||
           b[o + 4] == '\t';
}

hsi_status hsi_envi_read_header(hsi_meta *m, const char *hdr)
{
    hsi_status st = HSI_OK;
    char *text = NULL;
    size_t tlen = 0;
    int fd = -1;
    int64_t size = 0;
    hsi_meta_init(m);
    HSI_TRY(hsi_input_open(&fd, hdr, "ENVI header", &size));
    close(fd);
    if (size > MAX_HEADER_FILE) {
        st = HSI_FAIL(HSI_ERR_FORMAT,
                      "%s: not an ENVI header: %lld bytes, more than the %lld MiB cap for a "
                      "header",
                      hdr, (long long)size, (long long)(MAX_HEADER_FILE >> 20));
        goto cleanup;
    }
    HSI_TRY(hsi_read_file(hdr, &text, &tlen));
    HSI_TRY(hsi_envi_parse(m, text, tlen, hdr));
cleanup:
    free(text);
    return st;
}

hsi_status hsi_envi_open(hsi_cube *out, const char *path)
{
    hsi_status st = HSI_OK;
    char *hdr = NULL, *data = NULL;
    hsi_buffer *buf = NULL;
    int fd = -1;
    hsi_cube_init(out);

    if (!path || !*path) return HSI_FAIL(HSI_ERR_ARG, "hsi_envi_open: empty path");
    /* which one did the user name? (a FIFO, a directory...: refused here) */
    int hdr_ext = ends_with_ci(path, ".hdr");
    HSI_TRY(hsi_input_open(&fd, path, hdr_ext ? "ENVI header" : "ENVI header or data file", NULL));
    int named_header = hdr_ext || looks_like_header(fd);
    close(fd);
    fd = -1;
    if (named_header) {
        if (!(hdr = strdup(path))) goto nomem;
    } else {
        HSI_TRY(hsi_envi_find_header(&hdr, path));
        if (!(data = strdup(path))) goto nomem;
    }

    struct stat hsb;
    HSI_TRY(hsi_input_open(&fd, hdr, "ENVI header", NULL));
    if (fstat(fd, &hsb) != 0) {
        st = HSI_FAIL(HSI_ERR_IO, "%s: cannot stat the ENVI header: %s", hdr, strerror(errno));
        goto cleanup;
    }
    close(fd);
    fd = -1;
    HSI_TRY(hsi_atomic_pair_check(hdr)); /* a write torn between data and header */
    HSI_TRY(hsi_envi_read_header(&out->meta, hdr));
    const hsi_meta *m = &out->meta;

    if (m->minor_frame_offsets[0] || m->minor_frame_offsets[1]) {
        st = HSI_FAIL(HSI_ERR_UNSUPPORTED,
                      "%s: 'minor frame offsets' {%lld, %lld} are not supported (only 0); "
                      "'major frame offsets' are",
                      hdr, (long long)m->minor_frame_offsets[0],
                      (long long)m->minor_frame_offsets[1]);
        goto cleanup;
    }
    if (!data) HSI_TRY(hsi_envi_find_data(&data, hdr, &out->meta));
    struct stat dsb;
    HSI_TRY(hsi_input_open(&fd, data, "data file", NULL));
    if (fstat(fd, &dsb) != 0) {
        st = HSI_FAIL(HSI_ERR_IO, "%s: cannot stat the data file: %s", data, strerror(errno));
        goto cleanup;
    }
    close(fd);
    fd = -1;
    if (same_file(&hsb, &dsb)) {
        st = HSI_FAIL(HSI_ERR_FORMAT,
                      "%s: the header is named as its own data file; the data must be a "
                      "separate file",
                      hdr);
        goto cleanup;
    }
    /* mapped as stored (a block device at its full size); the size checks,
     * gzip and the view are the memory reader's (envi_header.c), so a file
     * and the same bytes in memory give the same cube and messages */
    HSI_TRY(hsi_buffer_map(&buf, data));
    HSI_TRY(hsi_envi_attach_data(out, buf, data, hdr));
    out->header_path = hdr;
    out->data_path = data;
    hdr = data = NULL;
    goto cleanup;
nomem:
    st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
cleanup:
    if (fd >= 0) close(fd);
    hsi_buffer_release(buf);
    free(hdr);
    free(data);
    if (st != HSI_OK) hsi_cube_free(out);
    return st;
}

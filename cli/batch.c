/* batch.c — many cubes in one command: `hsi info|stats|convert|quicklook|
 * preprocess|predict` given several inputs, a directory or @list.txt.
 *
 * Each cube runs as the single-cube command in a child process (--jobs at
 * a time, the cores shared between them through HSI_THREADS), so a cube
 * that fails or crashes cannot take the others down and every output is
 * written atomically as before. Outputs go to --out-dir, named after the
 * input (scene.hdr -> DIR/scene.hdr; --out-ext changes the extension);
 * an output that exists is skipped (a killed batch run again does only what
 * is left), replaced with --overwrite. Standard output of the children is
 * printed in input order (info/stats --json: one JSON array); a line per
 * cube and a summary go to stderr; the exit status is 1 when any cube
 * failed. Without --continue-on-error the first failure stops new cubes
 * from starting. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "core/dist.h"

/* How each command takes its arguments: positionals before the cube
 * (predict's run directory), whether it writes an output named after the
 * cube and with what extension, and its options that take no value. */
typedef struct batch_spec {
    const char *name;
    int n_fixed;
    const char *out_ext; /* NULL: no output file */
    const char *flags[6];
    int json_flag; /* --json makes its stdout one JSON document per cube */
} batch_spec;

static const batch_spec specs[] = {
    {"info", 0, NULL, {"--json"}, 1},
    {"stats", 0, NULL, {"--json", "--no-ignore"}, 1},
    {"convert", 0, ".hdr", {"--overwrite"}, 0},
    {"quicklook", 0, ".png", {"--labels", "--no-legend", "--overwrite"}, 0},
    {"preprocess", 0, ".hdr", {"--drop-bbl", "--whiten", "--overwrite"}, 0},
    {"predict", 1, ".hdr", {"--quiet", "--overwrite"}, 0},
};

static const batch_spec *spec_of(const char *name)
{
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++)
        if (!strcmp(specs[i].name, name)) return &specs[i];
    return NULL;
}

static int is_flag(const batch_spec *s, const char *a)
{
    if (strchr(a, '=')) return 1; /* --name=value */
    for (int i = 0; i < 6 && s->flags[i]; i++)
        if (!strcmp(s->flags[i], a)) return 1;
    return 0;
}

typedef struct strv {
    char **v;
    int n, cap;
} strv;

static int strv_add(strv *s, const char *x)
{
    if (s->n == s->cap) {
        int c = s->cap ? 2 * s->cap : 16;
        char **nv = realloc(s->v, (size_t)c * sizeof *nv);
        if (!nv) return 0;
        s->v = nv;
        s->cap = c;
    }
    return (s->v[s->n] = strdup(x)) != NULL && ++s->n;
}

/* argv-style: a NULL after the last string */
static int strv_end(strv *s)
{
    if (!strv_add(s, "")) return 0;
    free(s->v[--s->n]);
    s->v[s->n] = NULL;
    return 1;
}

static void strv_free(strv *s)
{
    for (int i = 0; i < s->n; i++) free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The cubes of a directory: headers and self-describing files, not the
 * data files beside headers, not hidden or temporary files. */
static int looks_like_cube(const char *name)
{
    static const char *const ext[] = {".hdr", ".tif", ".tiff", ".spe", ".mat", ".nc", ".h5", ".hdf5", NULL};
    if (name[0] == '.' || strstr(name, ".hsi-tmp-") || strstr(name, ".hsi-old-")) return 0;
    size_t n = strlen(name);
    for (int i = 0; ext[i]; i++) {
        size_t k = strlen(ext[i]);
        if (n > k && !strcasecmp(name + n - k, ext[i])) return 1;
    }
    return 0;
}

static int add_input(const char *cmd, strv *in, const char *arg)
{
    struct stat sb;
    if (arg[0] == '@') { /* one path a line; blank lines and # comments skipped */
        FILE *fp = fopen(arg + 1, "r");
        if (!fp) {
            fprintf(stderr, "hsi %s: %s: cannot read the list: %s\n", cmd, arg + 1, strerror(errno));
            return 0;
        }
        char line[4096];
        int ok = 1;
        while (ok && fgets(line, sizeof line, fp)) {
            size_t n = strcspn(line, "\r\n");
            line[n] = 0;
            char *p = line;
            while (*p == ' ' || *p == '\t') p++;
            if (*p && *p != '#') ok = strv_add(in, p);
        }
        fclose(fp);
        return ok;
    }
    if (stat(arg, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(arg);
        if (!d) {
            fprintf(stderr, "hsi %s: %s: cannot list: %s\n", cmd, arg, strerror(errno));
            return 0;
        }
        strv found = {0};
        struct dirent *e;
        int ok = 1;
        while (ok && (e = readdir(d))) {
            if (!looks_like_cube(e->d_name)) continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", arg, e->d_name);
            ok = strv_add(&found, p);
        }
        closedir(d);
        if (found.n) qsort(found.v, (size_t)found.n, sizeof *found.v, cmp_str);
        for (int i = 0; ok && i < found.n; i++) ok = strv_add(in, found.v[i]);
        if (ok && !found.n) fprintf(stderr, "hsi %s: warning: %s holds no cube\n", cmd, arg);
        strv_free(&found);
        return ok;
    }
    return strv_add(in, arg);
}

/* DIR/<input's name without its extension><ext> */
static char *output_for(const char *dir, const char *input, const char *ext)
{
    const char *b = strrchr(input, '/');
    b = b ? b + 1 : input;
    const char *dot = strrchr(b, '.');
    int n = dot && dot != b ? (int)(dot - b) : (int)strlen(b);
    size_t len = strlen(dir) + (size_t)n + strlen(ext) + 2;
    char *o = malloc(len);
    if (o) snprintf(o, len, "%s/%.*s%s", dir, n, b, ext);
    return o;
}

typedef struct job {
    pid_t pid;
    int fd_out, fd_err; /* -1 when closed */
    char *out, *err;     /* what the child wrote */
    size_t n_out, n_err;
    int status;          /* 0 pending, 1 done, 2 failed, 3 skipped */
    double t0, secs;
} job;

static void append(char **buf, size_t *n, const char *p, size_t k)
{
    char *nb = realloc(*buf, *n + k + 1);
    if (!nb) return;
    memcpy(nb + *n, p, k);
    *n += k;
    nb[*n] = 0;
    *buf = nb;
}

/* Runs the single-cube command in a child, its stdout and stderr captured. */
static int start(job *j, const hsi_cli_cmd *c, strv *args, int threads)
{
    int po[2], pe[2];
    if (pipe(po) != 0) return 0;
    if (pipe(pe) != 0) {
        close(po[0]);
        close(po[1]);
        return 0;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(po[0]), close(po[1]), close(pe[0]), close(pe[1]);
        return 0;
    }
    if (pid == 0) {
        dup2(po[1], 1);
        dup2(pe[1], 2);
        close(po[0]), close(po[1]), close(pe[0]), close(pe[1]);
        char tb[16];
        snprintf(tb, sizeof tb, "%d", threads);
        setenv("HSI_THREADS", tb, 0); /* the user's own setting wins */
        exit(c->run(args->n, args->v));
    }
    close(po[1]);
    close(pe[1]);
    j->pid = pid;
    j->fd_out = po[0];
    j->fd_err = pe[0];
    return 1;
}

/* Reads what the running children wrote; reaps those that ended. */
static void pump(job *jobs, int n)
{
    struct pollfd pf[128];
    int who[128], m = 0;
    for (int i = 0; i < n && m < 126; i++) {
        if (jobs[i].fd_out >= 0) pf[m] = (struct pollfd){jobs[i].fd_out, POLLIN, 0}, who[m++] = 2 * i;
        if (jobs[i].fd_err >= 0) pf[m] = (struct pollfd){jobs[i].fd_err, POLLIN, 0}, who[m++] = 2 * i + 1;
    }
    if (m == 0) return;
    if (poll(pf, (nfds_t)m, 200) <= 0) return;
    char buf[65536];
    for (int k = 0; k < m; k++) {
        if (!(pf[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        job *j = &jobs[who[k] / 2];
        int is_err = who[k] % 2;
        ssize_t r = read(pf[k].fd, buf, sizeof buf);
        if (r > 0) {
            if (is_err) append(&j->err, &j->n_err, buf, (size_t)r);
            else append(&j->out, &j->n_out, buf, (size_t)r);
        } else if (r == 0 || (r < 0 && errno != EINTR)) {
            close(pf[k].fd);
            if (is_err) j->fd_err = -1;
            else j->fd_out = -1;
        }
    }
}

/* The child's last error line, for the summary. */
static const char *last_line(const char *s, char *buf, size_t n)
{
    if (!s || !*s) return "no message";
    size_t len = strlen(s);
    while (len && (s[len - 1] == '\n' || s[len - 1] == '\r')) len--;
    size_t b = len;
    while (b && s[b - 1] != '\n') b--;
    snprintf(buf, n, "%.*s", (int)(len - b), s + b);
    return buf;
}

static const char batch_usage_out[] =
    "\nSeveral cubes: give several inputs, a folder (its .hdr/.tif/.spe/.mat/.nc/.h5\n"
    "files) or @list.txt (one path a line, # comments):\n"
    "  --out-dir DIR        outputs named after the inputs (scene.hdr -> DIR/scene%s)\n"
    "  --out-ext EXT        another extension for them (e.g. .tif)\n"
    "  --jobs N             cubes at a time (default: the cores; threads shared)\n"
    "  --continue-on-error  go on after a cube fails (default: stop starting new ones)\n"
    "An output that exists is skipped (a rerun does what is left) unless --overwrite.\n"
    "A line per cube and a summary go to stderr; exit status 1 if any cube failed.\n";
static const char batch_usage_noout[] =
    "\nSeveral cubes: give several inputs, a folder (its .hdr/.tif/.spe/.mat/.nc/.h5\n"
    "files) or @list.txt (one path a line, # comments), with --jobs N and\n"
    "--continue-on-error; output in input order (--json: one JSON array); exit\n"
    "status 1 if any cube failed.\n";

const char *hsi_cli_batch_usage(const char *name)
{
    static char buf[1024];
    const batch_spec *s = spec_of(name);
    if (!s) return NULL;
    if (!s->out_ext) return batch_usage_noout;
    snprintf(buf, sizeof buf, batch_usage_out, s->out_ext);
    return buf;
}

/* What the summary counts, and the JSON array's separator state. */
typedef struct reporter {
    const char *cmd;
    int n, json, n_json, n_done, n_failed, n_skipped;
    char **inputs, **outs;
} reporter;

/* Cube i's output, its line on stderr and its count. */
static void report(reporter *r, job *jobs, int i)
{
    job *j = &jobs[i];
    char line[1024];
    if (j->status == 1) {
        r->n_done++;
        if (r->json && j->n_out && r->n_json++) fputs(",\n", stdout);
        if (j->n_out) fwrite(j->out, 1, j->n_out, stdout);
        if (j->n_err) fwrite(j->err, 1, j->n_err, stderr); /* its warnings */
        if (r->outs[i])
            fprintf(stderr, "[%d/%d] %s -> %s: done (%.1f s)\n", i + 1, r->n, r->inputs[i], r->outs[i],
                    j->secs);
    } else if (j->status == 2) {
        r->n_failed++;
        fprintf(stderr, "[%d/%d] %s: failed: %s\n", i + 1, r->n, r->inputs[i],
                last_line(j->err, line, sizeof line));
    } else if (j->status == 3) {
        r->n_skipped++;
        fprintf(stderr, "[%d/%d] %s: skipped, %s exists (--overwrite replaces it)\n", i + 1, r->n,
                r->inputs[i], r->outs[i]);
    }
}

/* Bytes of a cube: the file, and for a header the largest data file
 * beside it (scene.hdr: scene, scene.img, .raw, .dat, .bsq, .bil, .bip). */
static double cube_bytes(const char *path)
{
    struct stat sb;
    double best = stat(path, &sb) == 0 ? (double)sb.st_size : 0;
    size_t n = strlen(path);
    if (n > 4 && !strcasecmp(path + n - 4, ".hdr")) {
        static const char *const ext[] = {"", ".img", ".raw", ".dat", ".bsq", ".bil", ".bip", NULL};
        for (int k = 0; ext[k]; k++) {
            char p[4096];
            snprintf(p, sizeof p, "%.*s%s", (int)(n - 4), path, ext[k]);
            if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode) && (double)sb.st_size > best)
                best = (double)sb.st_size;
        }
    }
    return best;
}

static const double *g_sort_bytes;
static int cmp_largest(const void *a, const void *b)
{
    int i = *(const int *)a, k = *(const int *)b;
    if (g_sort_bytes[i] != g_sort_bytes[k]) return g_sort_bytes[i] < g_sort_bytes[k] ? 1 : -1;
    return i - k; /* ties in input order */
}

/* Several ranks: rank 0 sorts the cubes largest first and deals them out
 * round-robin (rank 0 the largest, rank 1 the next...), the same plan on
 * every rank; this rank's others are marked 5. Deterministic: the same
 * inputs give the same plan. */
static int assign_ranks(job *jobs, char **inputs, int n)
{
    const int N = hsi_dist_size(), me = hsi_dist_rank();
    int *owner = calloc((size_t)n, sizeof *owner), *order = malloc((size_t)n * sizeof *order);
    double *bytes = malloc((size_t)n * sizeof *bytes);
    int ok = owner && order && bytes;
    if (ok && me == 0) {
        for (int i = 0; i < n; i++) bytes[i] = cube_bytes(inputs[i]), order[i] = i;
        g_sort_bytes = bytes;
        qsort(order, (size_t)n, sizeof *order, cmp_largest);
        for (int k = 0; k < n; k++) owner[order[k]] = k % N;
    }
    if (!ok) hsi_fail(HSI_ERR_NOMEM, "out of memory");
    /* every rank takes part in the broadcast, even one out of memory (the
     * failure then ends the job through MPI_Abort) */
    ok = ok && hsi_dist_bcast(owner, (size_t)n * sizeof *owner, 0) == HSI_OK;
    for (int i = 0; ok && i < n; i++)
        if (owner[i] != me) jobs[i].status = 5;
    free(owner), free(order), free(bytes);
    return ok;
}

/* Serialised results of this rank's cubes: (index, status, secs, out, err). */
static void put(char **b, size_t *n, const void *p, size_t k) { append(b, n, p, k); }

static int gather_jobs(job *jobs, int n)
{
    char *blob = NULL, *all = NULL;
    size_t nb = 0;
    int64_t *sizes = NULL;
    put(&blob, &nb, "", 0);
    for (int i = 0; i < n; i++) {
        job *j = &jobs[i];
        if (j->status == 5) continue;
        int64_t idx = i, st = j->status, no = (int64_t)j->n_out, ne = (int64_t)j->n_err;
        put(&blob, &nb, &idx, sizeof idx);
        put(&blob, &nb, &st, sizeof st);
        put(&blob, &nb, &j->secs, sizeof j->secs);
        put(&blob, &nb, &no, sizeof no);
        if (no) put(&blob, &nb, j->out, (size_t)no);
        put(&blob, &nb, &ne, sizeof ne);
        if (ne) put(&blob, &nb, j->err, (size_t)ne);
    }
    hsi_status st = hsi_dist_gather_bytes(&all, &sizes, blob ? blob : "", (int64_t)nb, 0);
    free(blob);
    if (st != HSI_OK) return 0;
    int64_t counts[3] = {0, 0, 0}; /* failed, not started, pending: for every rank's exit status */
    if (hsi_dist_rank() == 0) {
        const char *p = all;
        int64_t total = 0;
        for (int r = 0; r < hsi_dist_size(); r++) total += sizes[r];
        const char *end = all + total;
        while (p + 4 * sizeof(int64_t) + sizeof(double) <= end) {
            int64_t idx, stt, no, ne;
            double secs;
            memcpy(&idx, p, 8), p += 8;
            memcpy(&stt, p, 8), p += 8;
            memcpy(&secs, p, 8), p += 8;
            memcpy(&no, p, 8), p += 8;
            if (idx < 0 || idx >= n || no < 0 || p + no + 8 > end) break;
            job *j = &jobs[idx];
            if (j->status == 5) { /* another rank's cube: take its result */
                j->status = (int)stt;
                j->secs = secs;
                if (no) append(&j->out, &j->n_out, p, (size_t)no);
            }
            p += no;
            memcpy(&ne, p, 8), p += 8;
            if (ne < 0 || p + ne > end) break;
            if (ne && j->n_err == 0) append(&j->err, &j->n_err, p, (size_t)ne);
            p += ne;
        }
        for (int i = 0; i < n; i++) {
            counts[0] += jobs[i].status == 2;
            counts[1] += jobs[i].status == 4 || jobs[i].status == 0 || jobs[i].status == 5;
        }
    }
    free(all);
    free(sizes);
    /* every rank learns the totals, so every rank exits with the same status */
    if (hsi_dist_bcast(counts, sizeof counts, 0) != HSI_OK) return 0;
    if (hsi_dist_rank() != 0)
        for (int i = 0; i < n; i++) {
            jobs[i].status = 1; /* its own totals are rank 0's */
            if (i < counts[0]) jobs[i].status = 2;
            else if (i < counts[0] + counts[1]) jobs[i].status = 4;
        }
    return 1;
}

int hsi_cli_batch(const hsi_cli_cmd *c, int argc, char **argv, int *rc)
{
    const batch_spec *s = spec_of(c->name);
    if (!s) return 0;
    const char *cmd = c->name, *out_dir = NULL, *ext = s->out_ext;
    long long jobs_n = 0;
    int cont = 0, overwrite = 0, json = 0, any_batch_opt = 0, bad = 0;
    strv opts = {0}, pos = {0}, inputs = {0};
    for (int i = 1; i < argc && !bad; i++) {
        const char *a = argv[i], *v = NULL;
        if (hsi_cli_opt(argc, argv, &i, "--out-dir", &out_dir)) {
            any_batch_opt = 1;
            if (!out_dir) bad = hsi_cli_usage_error(cmd, "--out-dir needs a folder");
        } else if (hsi_cli_opt(argc, argv, &i, "--out-ext", &ext)) {
            any_batch_opt = 1;
            if (!ext || ext[0] != '.' || strchr(ext, '/'))
                bad = hsi_cli_usage_error(cmd, "--out-ext needs an extension such as .tif");
        } else if (hsi_cli_opt(argc, argv, &i, "--jobs", &v)) {
            any_batch_opt = 1;
            if (!hsi_cli_parse_int(cmd, "--jobs", v, 1, 1024, &jobs_n)) bad = HSI_EXIT_USAGE;
        } else if (!strcmp(a, "--continue-on-error")) {
            any_batch_opt = cont = 1;
        } else if (a[0] == '-' && a[1]) {
            overwrite |= !strcmp(a, "--overwrite");
            json |= s->json_flag && !strcmp(a, "--json");
            if (!strv_add(&opts, a)) bad = HSI_EXIT_FAIL;
            if (!is_flag(s, a) && i + 1 < argc && !strv_add(&opts, argv[++i])) bad = HSI_EXIT_FAIL;
        } else if (!strv_add(&pos, a)) {
            bad = HSI_EXIT_FAIL;
        }
    }
    if (bad) {
        *rc = bad;
        goto done;
    }
    /* the single-cube form: hand it over untouched */
    int n_single = s->n_fixed + 1 + (s->out_ext ? 1 : 0);
    int batch = any_batch_opt || pos.n > n_single;
    for (int i = s->n_fixed; i < pos.n && !batch; i++) {
        struct stat sb;
        batch = pos.v[i][0] == '@' || (i == s->n_fixed && stat(pos.v[i], &sb) == 0 && S_ISDIR(sb.st_mode) &&
                                       strcmp(cmd, "predict"));
    }
    if (!batch) {
        strv_free(&opts), strv_free(&pos);
        return 0;
    }
    *rc = HSI_EXIT_USAGE;
    if (pos.n <= s->n_fixed) {
        hsi_cli_usage_error(cmd, "no input cubes");
        goto done;
    }
    if (s->out_ext && !out_dir) {
        hsi_cli_usage_error(cmd, "several inputs need --out-dir DIR (outputs are named after the inputs)");
        goto done;
    }
    if (!s->out_ext && out_dir) {
        hsi_cli_usage_error(cmd, "writes no files: --out-dir does not apply");
        goto done;
    }
    for (int i = 0; i < opts.n; i++)
        if (!strcmp(opts.v[i], "--save-model") || !strncmp(opts.v[i], "--save-model=", 13)) {
            hsi_cli_usage_error(cmd, "--save-model with several inputs would write one model over another; "
                                     "fit once (hsi pca fit), then apply it to each cube");
            goto done;
        }
    *rc = HSI_EXIT_FAIL;
    for (int i = s->n_fixed; i < pos.n; i++)
        if (!add_input(cmd, &inputs, pos.v[i])) goto done;
    int n = inputs.n;
    if (n == 0) {
        fprintf(stderr, "hsi %s: no input cubes found\n", cmd);
        goto done;
    }
    char **outs = calloc((size_t)n, sizeof *outs);
    job *jobs = calloc((size_t)n, sizeof *jobs);
    if (!outs || !jobs) {
        free(outs), free(jobs);
        goto done;
    }
    if (out_dir) {
        if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "hsi %s: %s: cannot create: %s\n", cmd, out_dir, strerror(errno));
            free(outs), free(jobs);
            goto done;
        }
        for (int i = 0; i < n; i++) {
            outs[i] = output_for(out_dir, inputs.v[i], ext);
            for (int k = 0; k < i && outs[i]; k++)
                if (!strcmp(outs[i], outs[k])) {
                    fprintf(stderr, "hsi %s: %s and %s would both write %s; rename one\n", cmd,
                            inputs.v[k], inputs.v[i], outs[i]);
                    for (int q = 0; q <= i; q++) free(outs[q]);
                    free(outs), free(jobs);
                    goto done;
                }
        }
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1) ncpu = 1;
    int J = jobs_n ? (int)jobs_n : (int)ncpu;
    if (J > n) J = n;
    if (J > 60) J = 60; /* two pipes each under one poll */
    int threads = (int)(ncpu / J) > 0 ? (int)(ncpu / J) : 1;

    for (int i = 0; i < n; i++) {
        jobs[i].fd_out = jobs[i].fd_err = -1;
        struct stat sb;
        if (outs[i] && !overwrite && stat(outs[i], &sb) == 0) jobs[i].status = 3;
    }
    reporter rp = {.cmd = cmd, .n = n, .inputs = inputs.v, .outs = outs, .json = json};
    if (json && hsi_dist_rank() == 0) fputs("[\n", stdout);
    /* under mpirun: this rank's share (the others are marked 5) */
    const int ranks = hsi_dist_size();
    if (ranks > 1 && !assign_ranks(jobs, inputs.v, n)) {
        fprintf(stderr, "hsi %s [rank %d/%d]: cannot share the cubes between the ranks: %s\n", cmd,
                hsi_dist_rank(), ranks, hsi_last_error());
        goto free_jobs;
    }
    hsi_progress pr;
    hsi_progress_begin(&pr, cmd, n);
    if (ranks > 1) pr.active = 0; /* N bars on one terminal would be noise */
    int next = 0, running = 0, printed = 0, stop = 0;
    while (printed < n) {
        /* start cubes while there are free slots */
        while (!stop && running < J && next < n) {
            job *j = &jobs[next];
            if (j->status == 3 || j->status == 5) {
                next++;
                continue;
            }
            strv args = {0};
            int ok = strv_add(&args, cmd);
            for (int k = 0; ok && k < s->n_fixed; k++) ok = strv_add(&args, pos.v[k]);
            ok = ok && strv_add(&args, inputs.v[next]);
            if (ok && outs[next]) ok = strv_add(&args, outs[next]);
            for (int k = 0; ok && k < opts.n; k++) ok = strv_add(&args, opts.v[k]);
            ok = ok && strv_end(&args);
            j->t0 = hsi_now();
            if (!ok || !start(j, c, &args, threads)) {
                j->status = 2;
                append(&j->err, &j->n_err, "cannot start a process\n", 23);
            } else {
                running++;
            }
            strv_free(&args);
            next++;
        }
        pump(jobs, n);
        for (int i = 0; i < n; i++) {
            job *j = &jobs[i];
            if (!j->pid || j->status || j->fd_out >= 0 || j->fd_err >= 0) continue;
            int ws = 0;
            if (waitpid(j->pid, &ws, 0) < 0) ws = 1 << 8;
            j->secs = hsi_now() - j->t0;
            j->status = WIFEXITED(ws) && WEXITSTATUS(ws) == 0 ? 1 : 2;
            if (j->status == 2 && WIFSIGNALED(ws)) {
                char m[64];
                snprintf(m, sizeof m, "killed by signal %d\n", WTERMSIG(ws));
                append(&j->err, &j->n_err, m, strlen(m));
            }
            running--;
            if (j->status == 2 && !cont) stop = 1;
        }
        /* report in input order (several ranks: rank 0 does, at the end) */
        while (printed < n && (jobs[printed].status || (stop && printed >= next))) {
            if (!jobs[printed].status) jobs[printed].status = 4; /* not started: a cube failed */
            if (ranks == 1) report(&rp, jobs, printed);
            printed++;
            hsi_progress_update(&pr, printed);
        }
        if (stop && running == 0 && printed >= next) {
            for (; printed < n; printed++) jobs[printed].status = jobs[printed].status ? jobs[printed].status : 4;
            break;
        }
    }
    hsi_progress_end(&pr);
    if (ranks > 1) { /* every rank's cubes to rank 0, which reports them in input order */
        if (!gather_jobs(jobs, n)) {
            fprintf(stderr, "hsi %s [rank %d/%d]: cannot collect the ranks' results: %s\n", cmd,
                    hsi_dist_rank(), ranks, hsi_last_error());
            goto free_jobs;
        }
        if (hsi_dist_rank() == 0)
            for (int i = 0; i < n; i++) report(&rp, jobs, i);
    }
    int n_left = 0, n_failed = 0;
    for (int i = 0; i < n; i++) {
        n_left += jobs[i].status == 4 || jobs[i].status == 0;
        n_failed += jobs[i].status == 2;
    }
    if (hsi_dist_rank() == 0) {
        if (json) fputs("\n]\n", stdout);
        fprintf(stderr, "hsi %s: %d cube%s: %d done, %d failed, %d skipped", cmd, n, n == 1 ? "" : "s",
                rp.n_done, rp.n_failed, rp.n_skipped);
        if (n_left) fprintf(stderr, ", %d not started (a cube failed; --continue-on-error goes on)", n_left);
        if (ranks > 1) fprintf(stderr, " (%d ranks)", ranks);
        fputc('\n', stderr);
        if (n_failed) {
            char line[1024];
            for (int i = 0; i < n; i++)
                if (jobs[i].status == 2)
                    fprintf(stderr, "  failed: %s: %s\n", inputs.v[i], last_line(jobs[i].err, line, sizeof line));
        }
    }
    *rc = n_failed || n_left ? HSI_EXIT_FAIL : HSI_EXIT_OK;
    if (ranks > 1) hsi_cli_dist_agreed = 1; /* every rank has every cube's status */
free_jobs:
    for (int i = 0; i < n; i++) {
        free(outs[i]);
        free(jobs[i].out);
        free(jobs[i].err);
    }
    free(outs);
    free(jobs);
done:
    strv_free(&opts);
    strv_free(&pos);
    strv_free(&inputs);
    return 1;
}

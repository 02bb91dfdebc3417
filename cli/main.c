/* main.c — the `hsi` command: dispatches to self-registered subcommands,
 * prints help. Subcommands live one per file in cli/. */
#include "cli.h"
#include "core/dist.h"
#include "core/threads.h"

#include <stdarg.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>
#include <sys/stat.h>

#define MAX_CMDS 64
static const hsi_cli_cmd *cmds[MAX_CMDS];
static int n_cmds;

void hsi_cli_register(const hsi_cli_cmd *cmd)
{
    if (n_cmds < MAX_CMDS) cmds[n_cmds++] = cmd;
}

const hsi_cli_cmd *hsi_cli_find(const char *name)
{
    for (int i = 0; i < n_cmds; i++)
        if (strcmp(cmds[i]->name, name) == 0) return cmds[i];
    return NULL;
}

int hsi_cli_dist_agreed;

int hsi_cli_fail(const char *cmd, hsi_status st)
{
    const char *msg = hsi_last_error();
    char who[64] = "";
    if (hsi_dist_size() > 1) snprintf(who, sizeof who, " [rank %d/%d]", hsi_dist_rank(), hsi_dist_size());
    fprintf(stderr, "hsi %s%s: %s\n", cmd, who, msg && *msg ? msg : hsi_status_name(st));
    return HSI_EXIT_FAIL;
}

int hsi_cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "hsi %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n(see 'hsi help %s')\n", cmd);
    va_end(ap);
    return HSI_EXIT_USAGE;
}

int hsi_cli_wants_help(const hsi_cli_cmd *cmd, int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(cmd->usage, stdout);
            const char *b = hsi_cli_batch_usage(cmd->name);
            if (b) fputs(b, stdout);
            return 1;
        }
    return 0;
}

int hsi_cli_opt(int argc, char **argv, int *i, const char *name, const char **val)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != 0) return 0;
    if (*i + 1 >= argc) {
        *val = NULL; /* caller reports the missing value */
        return 1;
    }
    *val = argv[++*i];
    return 1;
}

int hsi_cli_parse_int(const char *cmd, const char *opt, const char *s, long long lo, long long hi,
                      long long *out)
{
    char *end = NULL;
    if (!s) return hsi_cli_usage_error(cmd, "%s needs a value", opt) && 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || v < lo || v > hi) {
        hsi_cli_usage_error(cmd, "%s expects an integer in %lld..%lld, got '%s'", opt, lo, hi, s);
        return 0;
    }
    *out = v;
    return 1;
}

static int same_file(const struct stat *a, const char *path)
{
    struct stat b;
    return path && stat(path, &b) == 0 && a->st_dev == b.st_dev && a->st_ino == b.st_ino;
}

hsi_status hsi_cli_check_output(const char *out, const char *in_header, const char *in_data,
                                int overwrite)
{
    char data[4096] = "";
    size_t n = strlen(out);
    if (n > 4 && !strcasecmp(out + n - 4, ".hdr") && n - 4 < sizeof data) {
        memcpy(data, out, n - 4);
        data[n - 4] = 0;
    }
    const char *cand[2] = {out, data[0] ? data : NULL};
    for (int k = 0; k < 2; k++) {
        struct stat sb;
        if (!cand[k] || stat(cand[k], &sb) != 0) continue;
        if (same_file(&sb, in_header) || same_file(&sb, in_data))
            return HSI_FAIL(HSI_ERR_ARG, "%s: the output would overwrite the input (%s); write it "
                                         "elsewhere",
                            out, cand[k]);
        if (!overwrite)
            return HSI_FAIL(HSI_ERR_ARG, "%s exists already; give --overwrite to replace it",
                            cand[k]);
    }
    return HSI_OK;
}

int hsi_cli_parse_double(const char *cmd, const char *opt, const char *s, double *out)
{
    char *end = NULL;
    if (!s) return hsi_cli_usage_error(cmd, "%s needs a value", opt) && 0;
    double v = strtod(s, &end);
    if (end == s || *end) {
        hsi_cli_usage_error(cmd, "%s expects a number, got '%s'", opt, s);
        return 0;
    }
    *out = v;
    return 1;
}

int hsi_cli_parse_device(const char *cmd, const char *s, hsi_device *out)
{
    if (!s) return hsi_cli_usage_error(cmd, "--device needs cpu, cuda or auto") && 0;
    if (hsi_device_parse(out, s, "--device") != HSI_OK) {
        hsi_cli_usage_error(cmd, "%s", hsi_last_error());
        return 0;
    }
    return 1;
}

hsi_status hsi_cli_device_ready(hsi_device d)
{
    hsi_device got;
    return d == HSI_DEVICE_CUDA ? hsi_device_resolve(&got, d, "--device cuda") : HSI_OK;
}

static int cmp_cmd(const void *a, const void *b)
{
    return strcmp((*(const hsi_cli_cmd *const *)a)->name, (*(const hsi_cli_cmd *const *)b)->name);
}

static void print_help(FILE *fp)
{
    fprintf(fp, "hsi — hyperspectral cubes from disk to a trained classifier and a map\n\n"
                "usage: hsi COMMAND [ARGS...]\n       hsi help COMMAND\n\ncommands:\n");
    for (int i = 0; i < n_cmds; i++)
        if (strncmp(cmds[i]->name, "bench-", 6) != 0) /* reached through `hsi bench` */
            fprintf(fp, "  %-12s %s\n", cmds[i]->name, cmds[i]->summary);
    fprintf(fp, "\nSeveral cubes: info, stats, convert, quicklook, preprocess and predict take\n"
                "several inputs, a folder or @list.txt (--out-dir, --jobs, --continue-on-error).\n");
    fprintf(fp, "\nbuild: %s, %s\n", hsi_cuda_built() ? "CUDA" : "CPU only",
            hsi_dist_built() ? "MPI (mpirun -np N hsi ...)" : "one process (make MPI=1 for mpirun)");
}

/* Standard output checked at exit, as GNU tools do (close_stdout): a
 * failed write (a full disk, /dev/full, a closed pipe) fails the command
 * with a message instead of exiting 0 with the output lost. */
static void close_stdout(void)
{
    int bad = ferror(stdout);
    int e = 0;
    if (fflush(stdout) != 0) {
        bad = 1;
        e = errno;
    }
    if (fclose(stdout) != 0 && errno != EBADF) {
        bad = 1;
        if (!e) e = errno;
    }
    if (bad) {
        fprintf(stderr, "hsi: error writing to standard output%s%s\n", e ? ": " : "",
                e ? strerror(e) : "");
        _exit(HSI_EXIT_FAIL);
    }
}

/* Commands that divide the work between the ranks themselves (every
 * rank runs them under mpirun): training, `hsi bench dist`, and one cube's
 * stats, preprocess, convert, predict and eval (each rank reads, copies or
 * classifies its share of the lines; rank 0 prints, and writes what is not
 * written in place by every rank). */
static int is_dist_cmd(const hsi_cli_cmd *c, int argc, char **argv)
{
    static const char *const names[] = {"train", "profile", "stats", "preprocess", "convert",
                                        "predict", "eval", NULL};
    for (int i = 0; names[i]; i++)
        if (!strcmp(c->name, names[i])) return 1;
    return !strcmp(c->name, "bench") && argc > 1 && !strcmp(argv[1], "dist");
}

/* A command under mpirun with several ranks: every rank runs a dist one;
 * rank 0 runs the others while the rest wait for it (sleeping). */
static int run_cmd(const hsi_cli_cmd *c, int argc, char **argv)
{
    if (hsi_dist_size() <= 1 || is_dist_cmd(c, argc, argv)) return c->run(argc, argv);
    if (hsi_dist_rank() != 0) {
        hsi_status st = hsi_dist_barrier();
        hsi_cli_dist_agreed = 1;
        return st == HSI_OK ? HSI_EXIT_OK : hsi_cli_fail(c->name, st);
    }
    int rc = c->run(argc, argv);
    if (rc == HSI_EXIT_OK) {
        fflush(stdout);
        hsi_status st = hsi_dist_barrier();
        if (st != HSI_OK) return hsi_cli_fail(c->name, st);
        hsi_cli_dist_agreed = 1;
    }
    return rc;
}

static int run_main(int argc, char **argv);

/* Under mpirun: a rank that fails ends every rank (MPI_Abort after its
 * message is out), so no rank waits forever for it in a collective; a
 * status all ranks agree on ends the job normally. */
int main(int argc, char **argv)
{
    atexit(close_stdout);
    hsi_blas_workers_stop(); /* they would spin on a core for ~0.1 s */
    hsi_tmp_cleanup_on_signals(); /* SIGINT/SIGTERM remove half-written files */
    if (hsi_dist_init(&argc, &argv) != HSI_OK) {
        fprintf(stderr, "hsi: %s\n", hsi_last_error());
        return HSI_EXIT_FAIL;
    }
    int rc = run_main(argc, argv);
    if (hsi_dist_size() > 1 && rc != HSI_EXIT_OK && !hsi_cli_dist_agreed) {
        fprintf(stderr, "hsi: rank %d of %d failed (exit status %d): ending every rank of the job\n",
                hsi_dist_rank(), hsi_dist_size(), rc);
        hsi_dist_abort(rc);
    }
    fflush(stdout);
    if (hsi_dist_finalize() != HSI_OK && rc == HSI_EXIT_OK) {
        fprintf(stderr, "hsi: %s\n", hsi_last_error());
        rc = HSI_EXIT_FAIL;
    }
    return rc;
}

static int run_main(int argc, char **argv)
{
    qsort(cmds, (size_t)n_cmds, sizeof *cmds, cmp_cmd);
    if (argc < 2) {
        print_help(stderr);
        return HSI_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (!strcmp(name, "-h") || !strcmp(name, "--help")) {
        print_help(stdout);
        return HSI_EXIT_OK;
    }
    if (!strcmp(name, "--version")) {
        printf("hsi 0.1 (%s)\n", hsi_cuda_built() ? "CUDA build" : "CPU build");
        return HSI_EXIT_OK;
    }
    if (!strcmp(name, "help")) {
        if (argc < 3) {
            print_help(stdout);
            return HSI_EXIT_OK;
        }
        const hsi_cli_cmd *c = hsi_cli_find(argv[2]);
        if (!c) {
            fprintf(stderr, "hsi help: unknown command '%s'\n", argv[2]);
            return HSI_EXIT_USAGE;
        }
        fputs(c->usage, stdout);
        return HSI_EXIT_OK;
    }
    const hsi_cli_cmd *c = hsi_cli_find(name);
    if (!c) {
        fprintf(stderr, "hsi: unknown command '%s' (see 'hsi --help')\n", name);
        return HSI_EXIT_USAGE;
    }
    /* "hsi bench model --help": the help of the subcommand ("bench-model"),
     * which the command's own dispatch shows */
    char sub[128] = "";
    if (argc > 2 && argv[2][0] != '-') snprintf(sub, sizeof sub, "%s-%s", name, argv[2]);
    if (!(sub[0] && hsi_cli_find(sub)) && hsi_cli_wants_help(c, argc - 1, argv + 1))
        return HSI_EXIT_OK;
    int rc;
    if (hsi_cli_batch(c, argc - 1, argv + 1, &rc)) return rc; /* several cubes */
    return run_cmd(c, argc - 1, argv + 1);
}

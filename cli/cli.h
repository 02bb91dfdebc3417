/* cli.h — what every `hsi` subcommand shares: self-registration, option
 * parsing helpers and exit codes. Only cli/ includes this. */
#ifndef HSI_CLI_H
#define HSI_CLI_H

#include <stdio.h>

#include "core/core.h"

typedef struct hsi_cli_cmd {
    const char *name;
    const char *summary; /* one line for `hsi --help` */
    const char *usage;   /* full text for `hsi help CMD` / `hsi CMD --help` */
    int (*run)(int argc, char **argv); /* argv[0] is the command name */
} hsi_cli_cmd;

void hsi_cli_register(const hsi_cli_cmd *cmd);

#define HSI_CLI_COMMAND(ident, ...)                                            \
    static const hsi_cli_cmd ident##_cmd = __VA_ARGS__;                        \
    __attribute__((constructor)) static void ident##_register(void)           \
    {                                                                          \
        hsi_cli_register(&ident##_cmd);                                        \
    }

/* Exit codes: 0 ok, 1 failure (error printed), 2 usage error. */
enum { HSI_EXIT_OK = 0, HSI_EXIT_FAIL = 1, HSI_EXIT_USAGE = 2 };

/* Under mpirun: set by a command whose exit status every rank agrees on
 * (the batch's summary), so a failure ends the job normally instead of
 * through MPI_Abort. */
extern int hsi_cli_dist_agreed;

/* Prints "hsi CMD: <hsi_last_error()>" ("hsi CMD [rank R/N]: ..." under
 * mpirun with several ranks) and returns HSI_EXIT_FAIL. */
int hsi_cli_fail(const char *cmd, hsi_status st);
/* Prints "hsi CMD: message" + a hint to --help, returns HSI_EXIT_USAGE. */
int hsi_cli_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* 1 when argv has -h/--help (then the usage has been printed). */
int hsi_cli_wants_help(const hsi_cli_cmd *cmd, int argc, char **argv);
/* Looks a registered command up by name (NULL if unknown). */
const hsi_cli_cmd *hsi_cli_find(const char *name);

/* Option values: "--name VALUE" or "--name=VALUE". Returns 1 and sets *val
 * (and advances *i) when argv[*i] is that option. */
int hsi_cli_opt(int argc, char **argv, int *i, const char *name, const char **val);
int hsi_cli_parse_int(const char *cmd, const char *opt, const char *s, long long lo, long long hi,
                      long long *out);
int hsi_cli_parse_double(const char *cmd, const char *opt, const char *s, double *out);
/* --device cpu|cuda|auto; 1 on success, else 0 after a usage error. */
int hsi_cli_parse_device(const char *cmd, const char *s, hsi_device *out);
/* With --device cuda: HSI_OK when a device is there, else why not (called
 * before any work starts). */
hsi_status hsi_cli_device_ready(hsi_device d);

/* Before writing `out` (for an ENVI .hdr also its data file, the .hdr
 * stripped): refused when it is one of the input's files (header or data,
 * after links: the same device and inode), and, unless overwrite, when it
 * exists already. in_header/in_data may be NULL. */
hsi_status hsi_cli_check_output(const char *out, const char *in_header, const char *in_data,
                                int overwrite);

/* Several cubes in one command (cli/batch.c): when argv holds more inputs
 * than the command takes, a directory, @list or a batch option (--out-dir,
 * --out-ext, --jobs, --continue-on-error), runs the batch, sets *rc and
 * returns 1; returns 0 for the single-cube form (or a command without one). */
int hsi_cli_batch(const hsi_cli_cmd *cmd, int argc, char **argv, int *rc);
/* The batch options' help for a command that has a batch form (else NULL). */
const char *hsi_cli_batch_usage(const char *name);

#endif

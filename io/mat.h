/* mat.h — MATLAB .mat reader (v5 with or without zlib compression, read by
 * io/mat.c itself; v7.3 = HDF5 through libmatio): lists variables, picks the
 * cube (one 3-D numeric array) or the label map (one 2-D integer array), and
 * returns a zero-copy view over the host buffer the data is read into. A
 * file that is truncated, whose compressed data does not inflate to its end,
 * or whose data element does not match its dimensions is refused
 * (HSI_ERR_FORMAT, naming the file, the variable and the bytes expected and
 * found). Not a writer. */
#ifndef HSI_MAT_H
#define HSI_MAT_H

#include "core/core.h"
#include "cube.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hsi_mat_var {
    char name[64];
    int rank;
    int64_t dims[8];  /* MATLAB dims (rows, cols, ...) */
    hsi_dtype dtype;  /* stored type (v5) / class (v7.3); HSI_DT_INVALID when
                         not a real numeric/logical array */
    int is_complex;
    int is_logical;
    char mclass[16];  /* MATLAB class: "double", "uint8", "struct", "cell"... */
} hsi_mat_var;

/* 1 when the first bytes look like a MAT-file ("MATLAB 5.0"/"MATLAB 7.3" text
 * header, or an HDF5 signature at 0 or 512). */
int hsi_mat_probe(const void *data, size_t size);

/* Lists every variable (headers only: data is not read). The file is opened
 * without blocking and must be a regular file; every v5 element must lie
 * inside the file (else the error names the element, its variable, and the
 * bytes it needs and the file has), a v7.3 file must be as long as its HDF5
 * superblock says. *vars is malloc'd. */
hsi_status hsi_mat_list(hsi_mat_var **vars, int *n, const char *path);

/* Opens a 3-D numeric variable as a cube: MATLAB (rows, cols, bands) becomes
 * a (band, line, sample) view with line = MATLAB row, sample = column, over
 * the column-major buffer the data was read into (no copy; v5: the stored
 * type, e.g. int16 for SalinasA's doubles; native byte order). var NULL = the only 3-D
 * numeric variable (else the error lists the candidates). A named 2-D
 * variable opens as a one-band cube; with no 3-D variable and exactly one
 * 2-D integer one (a ground-truth file), that map opens as a one-band cube
 * marked as an ENVI classification (ids 0..max, names "Class N").
 * meta.format = "mat". */
hsi_status hsi_mat_open(hsi_cube *out, const char *path, const char *var);

/* Opens a 2-D variable as a (line, sample) view (line = MATLAB row). var
 * NULL = the only 2-D integer/logical variable. *name (malloc'd, may be
 * NULL to skip) receives the variable's name. */
hsi_status hsi_mat_open_2d(hsi_view *out, char **name, const char *path, const char *var);

#ifdef __cplusplus
}
#endif
#endif

/* meta.h — hsi_meta: everything a header said about a cube, typed where hsi
 * understands it, plus every key kept verbatim so that writing it back loses
 * nothing. Format readers fill it; writers and the CLI read it. No parsing of
 * any file format lives here. */
#ifndef HSI_META_H
#define HSI_META_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hsi_interleave {
    HSI_BSQ = 0,
    HSI_BIL = 1,
    HSI_BIP = 2
} hsi_interleave;

typedef enum hsi_file_kind {
    HSI_FILE_STANDARD = 0,       /* "ENVI Standard" (or unknown/vendor) */
    HSI_FILE_CLASSIFICATION = 1, /* "ENVI Classification" */
    HSI_FILE_SPECLIB = 2,        /* "ENVI Spectral Library" (.sli) */
    HSI_FILE_OTHER = 3           /* any other declared file type */
} hsi_file_kind;

/* A key as written in the header (original spelling and raw value text,
 * braces removed for {...} values, newlines inside braces kept). */
typedef struct hsi_kv {
    char *key;
    char *value;
    int braced; /* the value was written inside { } */
} hsi_kv;

/* ENVI "map info" parsed: {proj, ref x, ref y, easting, northing, x size,
 * y size, [zone, North|South], datum, units=..., rotation=...}. ref_x/ref_y
 * are 1-based pixel coordinates of the tie point, as in the header. */
typedef struct hsi_map_info {
    int valid;
    char projection[64];
    double ref_x, ref_y, easting, northing, x_size, y_size;
    int zone;  /* 0 when absent */
    int north; /* 1 North, 0 South (UTM) */
    char datum[64];
    char units[32];
    double rotation; /* degrees, 0 when absent */
} hsi_map_info;

typedef struct hsi_meta {
    /* geometry and storage (as the header declared them) */
    int64_t n_samples, n_lines, n_bands;
    hsi_dtype dtype;
    hsi_interleave interleave;
    int byte_order;        /* 0 little, 1 big */
    int64_t header_offset; /* bytes */
    int64_t major_frame_offsets[2];
    int64_t minor_frame_offsets[2];
    int file_compression; /* 1 = gzip */
    hsi_file_kind file_kind;
    char *file_type; /* the declared text, NULL if absent */
    char *format;    /* "envi", "spe", "mat", "gdal", ... (set by the reader) */

    /* spectral axis, arrays of n_bands or NULL when absent */
    double *wavelength;     /* nanometres when wavelength_nm, else as written */
    double *fwhm;           /* same units as wavelength */
    char *wavelength_units; /* as written, NULL if absent */
    int wavelength_nm;      /* 1 when units were known and converted to nm */
    int *bbl;               /* 1 good, 0 bad */
    char **band_names;

    /* radiometry */
    int has_ignore_value;
    double ignore_value;
    double *gain, *offset; /* data gain/offset values, n_bands or NULL */
    int has_reflectance_scale;
    double reflectance_scale;

    /* display, geography, text */
    int n_default_bands;  /* 0, 1 or 3 */
    int default_bands[3]; /* 0-based band indices (the header is 1-based) */
    hsi_map_info map_info;
    char *coordinate_system; /* ESRI WKT, NULL if absent */
    char *description;
    int64_t x_start, y_start; /* 1 when absent (ENVI's default) */
    int has_x_start, has_y_start;

    /* classification files */
    int n_classes;
    char **class_names;    /* n_classes or NULL */
    uint8_t *class_lookup; /* 3 * n_classes (r, g, b) or NULL */

    /* every key in header order, verbatim */
    hsi_kv *keys;
    int n_keys;

    /* problems found while reading that were not fatal */
    char **warnings;
    int n_warnings;
} hsi_meta;

void hsi_meta_init(hsi_meta *m);
void hsi_meta_free(hsi_meta *m);
/* Deep copy. */
hsi_status hsi_meta_copy(hsi_meta *dst, const hsi_meta *src);

/* Verbatim keys: case-insensitive lookup with blanks normalised
 * ("Byte  Order" finds "byte order"). NULL when absent. */
const hsi_kv *hsi_meta_find(const hsi_meta *m, const char *key);
/* Appends a key, or replaces the value of an existing one (same match rule). */
hsi_status hsi_meta_set(hsi_meta *m, const char *key, const char *value, int braced);
/* Removes a key if present. */
void hsi_meta_unset(hsi_meta *m, const char *key);
/* Normalises a key for comparison: lower case, runs of blanks -> one space,
 * trimmed. Writes at most n bytes including the NUL. */
void hsi_meta_normkey(char *dst, size_t n, const char *key);

/* Records a warning (also printed through hsi_warn while echo is on). */
void hsi_meta_warn(hsi_meta *m, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Whether hsi_meta_warn prints as it records: on (1) by default; off for
 * a program that shows the recorded warnings itself (hsi info), so that
 * each is shown once. Process-wide; returns the previous setting. */
int hsi_meta_warn_echo(int on);

/* Keeps only the listed bands (0-based, in the given order) in every
 * per-band array (wavelength, fwhm, bbl, band names, gain, offset) and sets
 * n_bands = n; default bands that were dropped are cleared. */
hsi_status hsi_meta_select_bands(hsi_meta *m, const int64_t *bands, int64_t n);

/* Converts a wavelength unit name to a factor to nanometres: micrometers/um/
 * microns -> 1000, nanometers/nm -> 1, millimeters/mm -> 1e6, meters/m -> 1e9,
 * wavenumber and unknown -> 0 (not convertible). */
double hsi_wavelength_unit_to_nm(const char *units);

const char *hsi_interleave_name(hsi_interleave il); /* "bsq", "bil", "bip" */
/* Byte strides (band, line, sample) of a cube stored with this interleave. */
void hsi_interleave_strides(hsi_interleave il, int64_t n_bands, int64_t n_lines,
                            int64_t n_samples, int64_t elem_size, int64_t strides[3]);

#ifdef __cplusplus
}
#endif
#endif

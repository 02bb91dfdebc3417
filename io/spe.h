/* spe.h — Princeton Instruments SPE 2.x (WinView/WinSpec) and SPE 3.0
 * (LightField, XML footer) reader: header + footer parser over memory (the
 * fuzz entry point) and a zero-copy (frames, y, x) view over the mapped file
 * per region of interest. It does not write SPE and does not decide whether a
 * ".spe" is ENVI data (hsi_cube_open does, see cube.c). */
#ifndef HSI_SPE_H
#define HSI_SPE_H

#include "core/core.h"
#include "cube.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HSI_SPE_HEADER_SIZE 4100
#define HSI_SPE_MAX_ROIS 64
#define HSI_SPE_MAX_WARNINGS 8

/* WinSpec calibration struct (x at byte 3000, y at 3489). */
typedef struct hsi_spe_calib {
    int valid;        /* calib_valid byte @+98 */
    int order;        /* polynoorder @+101 (0..5) */
    double coeff[6];  /* polynocoeff @+263: lambda = sum c_j p^j */
    double offset, factor;
} hsi_spe_calib;

typedef struct hsi_spe_roi {
    int64_t width, height;   /* pixels after binning */
    int64_t offset;          /* bytes from the start of a frame */
    int64_t size;            /* bytes of pixel data: width*height*elem */
    int64_t x, y;            /* sensor position (0-based); -1 when unknown */
    int64_t x_binning, y_binning; /* 1 when unknown */
    double *wavelength;      /* width values (nm) or NULL when not calibrated */
} hsi_spe_roi;

typedef struct hsi_spe_info {
    double version;     /* file_header_ver @1992 (0 in some 2.x files) */
    int datatype;       /* code @108 */
    hsi_dtype dtype;
    int64_t xdim, ydim; /* @42 / @656 (0 in multi-ROI 3.0 files) */
    int64_t n_frames;   /* NumFrames @1446 (int32), or the XML frame count */
    int64_t frame_stride; /* bytes from one frame to the next (3.0: incl. metadata) */
    int64_t frame_size;   /* bytes of pixel data per frame (all ROIs) */
    uint64_t footer_offset; /* @678, 0 for 2.x */
    int n_rois;
    hsi_spe_roi rois[HSI_SPE_MAX_ROIS];
    double exposure_ms; /* 2.x exp_sec*1000 @10; 3.0 ShutterTiming/ExposureTime; NAN if unknown */
    char date[48];      /* 2.x header date (UTF-8, from Latin-1) or 3.0 Origin created */
    char software[96];  /* 3.0 Origin software + version, "" otherwise */
    char camera[96];    /* 3.0 camera model, "" otherwise */
    char comments[5 * 81]; /* 2.x comments joined by " | " (UTF-8) */
    char frame_meta[256];  /* 3.0 per-frame metadata blocks (MetaFormat), e.g.
                              "TimeStamp ExposureStarted 64 bit, ..."; "" if none */
    hsi_spe_calib xcal, ycal; /* 2.x binary calibration (also filled in 3.0) */
    int pixel_base;     /* pixel numbering used for the 2.x polynomial (0 or 1) */
    char *xml;          /* the 3.0 footer text (NUL-terminated) or NULL */
    size_t xml_len;
    /* problems that did not stop the parse (a calibration not used and
     * why); hsi_spe_open copies them into meta.warnings */
    int n_warnings;
    char warnings[HSI_SPE_MAX_WARNINGS][320];
} hsi_spe_info;

void hsi_spe_info_init(hsi_spe_info *s);
void hsi_spe_info_free(hsi_spe_info *s);

/* Parses the 4100-byte header and, for 3.0, the XML footer from memory.
 * data: the whole file (size bytes). name: used in messages. pixel_base: 1
 * (WinSpec numbering, the default) or 0 for the 2.x x-calibration
 * polynomial. Validates dtype, dimensions, frame count and that every frame
 * of every ROI lies before the footer / end of file. Wavelengths are kept
 * only when finite and as many as a region needs: a 2.x calibration marked
 * valid but unusable (order outside 1..5, NaN/inf or all-zero coefficients,
 * non-finite values), a 3.0 <Wavelength> list with a NaN/inf value or too
 * few values for a region are warned (out->warnings, naming the counts)
 * and leave that region without wavelengths. */
hsi_status hsi_spe_parse(hsi_spe_info *out, const void *data, size_t size, const char *name,
                         int pixel_base);

/* Cheap content sniffing: 1 when the buffer passes the Princeton checks
 * (size > 4100, known data type, positive dims or a 3.0 footer, data fits
 * before footer/end), else 0 with the failed checks listed in why (a 3.0
 * footer offset inside the header or past the end is named as such). */
int hsi_spe_probe(const void *data, size_t size, char *why, size_t why_len);

/* Evaluates a calibration polynomial at pixels base .. base+n-1. out: n. */
void hsi_spe_calib_eval(const hsi_spe_calib *c, int64_t n, int base, double *out);

typedef struct hsi_spe_options {
    int roi;        /* region of interest (0-based), default 0 */
    int pixel_base; /* 1 (default) or 0 */
} hsi_spe_options;

/* Opens one ROI of an SPE file: out->view is (frames, height, width) over the
 * mapped file (no copy), out->meta holds the metadata (format "spe"),
 * n_images = number of ROIs. options may be NULL. */
hsi_status hsi_spe_open(hsi_cube *out, const char *path, const hsi_spe_options *options);

#ifdef __cplusplus
}
#endif
#endif

/* report.h — what a person looks at after training: a run directory's
 * pictures (curves.png, confusion.png, spectra.png) and report.html, one
 * self-contained page (pictures embedded as data: URIs, no script, no
 * external file) with the configuration, the split counts, OA/AA/kappa, the
 * per-class table, the confusion counts, the timings per stage and what the
 * protocol leaked. Built from the directory's own history.csv, metrics.json
 * and pipeline.json, so the page says what the files say; the spectra from
 * the cube and the training pixels. Also the profile's bar chart. It draws
 * through io/plot.h; it trains and scores nothing. */
#ifndef HSI_PIPELINE_REPORT_H
#define HSI_PIPELINE_REPORT_H

#include <stdint.h>

#include "core/core.h"
#include "io/meta.h"
#include "pipeline/trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Picture sizes in pixels (width x height). */
#define HSI_REPORT_CURVES_W    1200
#define HSI_REPORT_CURVES_H    480
#define HSI_REPORT_CONFUSION_W 1000
#define HSI_REPORT_CONFUSION_H 900
#define HSI_REPORT_SPECTRA_W   1100
#define HSI_REPORT_SPECTRA_H   620
#define HSI_REPORT_PROFILE_W   900
#define HSI_REPORT_PROFILE_H   480

/* The training pixels the spectra are averaged over. */
typedef struct hsi_report_pixels {
    const hsi_view *cube;   /* (bands, lines, samples) as the run read it: any dtype, strides,
                               byte order; host or mapped memory */
    const hsi_meta *meta;   /* its header (wavelengths for the x axis, bad bands, ignore
                               value); NULL: band numbers, every band */
    const int64_t *pixels;  /* (n) flat indices line * samples + sample */
    const int32_t *classes; /* (n) class indices 0..K-1, pipeline.json's order */
    int64_t n;
} hsi_report_pixels;

/* In run directory dir: curves.png (loss and accuracy per epoch from
 * history.csv, validation when measured), confusion.png (metrics.json's
 * confusion matrix normalised per true class, class names from
 * pipeline.json), spectra.png (mean ± std per class of px's pixels over
 * the cube's values as stored, at the header's wavelengths when it has
 * them; bad bands, NaN and the ignore value left out; px NULL: no
 * spectra), then report.html. A picture that cannot be drawn is left out
 * of the page (which says why) and the rest goes on; the first failure is
 * returned (HSI_OK when every file was written). In report.html every
 * number of metrics.json stands in an element carrying its JSON path,
 * data-m="oa", "classes.3.recall", "confusion.2.5", "timings_s.read"...:
 * integers as integers, other numbers with 4 significant digits (%.4g).
 * name: the run as the page names it (the directory the user gave, when
 * dir is the run's working folder; NULL: dir). */
hsi_status hsi_report_write(const char *dir, const char *name, const hsi_report_pixels *px);

/* A bar chart of a training profile's seconds per stage (read, split,
 * preprocess, loader wait, forward, backward, optimizer, validate,
 * predict, write), titled with the total; PNG of HSI_REPORT_PROFILE_W x
 * HSI_REPORT_PROFILE_H, written atomically. */
hsi_status hsi_report_profile_png(const char *path, const hsi_train_profile *p);

#ifdef __cplusplus
}
#endif
#endif

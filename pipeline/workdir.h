/* workdir.h — where a training run writes while it runs (internal to
 * pipeline/). A new run, or one replacing a run with --overwrite, is written
 * in "<dir>.hsi-tmp-XXXXXX" beside the directory the user named and moved
 * into place at the end, so the old run stays whole until the new one is
 * complete and a killed run never leaves a mix of old and new files:
 *   - the directory did not exist: the folder is renamed to it;
 *   - it held a run (only files a run holds): the two are exchanged in one
 *     rename (renameat2 RENAME_EXCHANGE; two renames where the file system
 *     cannot) and the old run's files removed;
 *   - it existed without a run: the files are moved in, pipeline.json last.
 * A killed run's folder keeps its checkpoint: --resume continues in it (the
 * newest one not held by a live process); a new run without --overwrite
 * refuses while one is there. --resume of a finished run works in place. */
#ifndef HSI_PIPELINE_WORKDIR_H
#define HSI_PIPELINE_WORKDIR_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hsi_workdir_kind {
    HSI_WD_NEW,      /* the directory did not exist */
    HSI_WD_REPLACE,  /* it holds a run: exchanged at the end */
    HSI_WD_FILL,     /* it exists without a run: files moved in */
    HSI_WD_IN_PLACE  /* --resume of the run in the directory itself */
} hsi_workdir_kind;

typedef struct hsi_workdir {
    char *final;  /* the run directory the user named */
    char *work;   /* where the files are written (final when in place) */
    hsi_workdir_kind kind;
    int lock_fd;  /* flock held on work/.hsi-lock while the run lives (-1: none) */
    char note[512]; /* what was decided, for the log ("" when nothing to say) */
} hsi_workdir;

/* Decides where the run writes, checks --resume/--overwrite against what is
 * there (refusing before any work), creates the folders. */
hsi_status hsi_workdir_begin(hsi_workdir *w, const char *final, int resume, int overwrite);
/* Moves the finished run into place (nothing for HSI_WD_IN_PLACE). */
hsi_status hsi_workdir_commit(hsi_workdir *w);
/* Releases the lock. A working folder with a training state stays (the
 * run resumes from it); one without is removed. */
void hsi_workdir_free(hsi_workdir *w);
/* mkdir -p */
hsi_status hsi_make_dirs(const char *dir);

#ifdef __cplusplus
}
#endif

#endif

/* cube.c — hsi_cube lifetime and the content-based open dispatcher. Each
 * format's reader lives in its own file; this file only chooses. */
#include "cube.h"

#include <stdlib.h>
#include <string.h>

#include "envi.h"

void hsi_cube_init(hsi_cube *c)
{
    memset(c, 0, sizeof *c);
    hsi_meta_init(&c->meta);
    c->n_images = 1;
}

void hsi_cube_free(hsi_cube *c)
{
    if (!c) return;
    hsi_view_release(&c->view);
    hsi_meta_free(&c->meta);
    free(c->header_path);
    free(c->data_path);
    hsi_cube_init(c);
}

hsi_status hsi_cube_open(hsi_cube *out, const char *path, const hsi_open_options *options)
{
    (void)options;
    return hsi_envi_open(out, path);
}

/* cube.c — hsi_cube lifetime and the content-based open dispatcher: ENVI
 * header text, or a data file without a format signature of its own that
 * has an ENVI side-car -> ENVI; MATLAB magic ->
 * matio; Princeton SPE checks -> SPE; anything else -> GDAL. Each format's
 * reader lives in its own file; this file only chooses. */
#define _GNU_SOURCE
#include "cube.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "envi.h"
#include "gdal_io.h"
#include "mat.h"
#include "spe.h"

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

/* Text that looks like an ENVI header: "ENVI" on the first non-blank line,
 * or (vendor headers without the magic) samples/lines/bands keys with '='. */
static int looks_envi(const uint8_t *p, size_t n)
{
    size_t i = 0;
    if (n >= 3 && p[0] == 0xef && p[1] == 0xbb && p[2] == 0xbf) i = 3; /* UTF-8 BOM */
    while (i < n && isspace(p[i])) i++;
    if (n - i >= 4 && memcmp(p + i, "ENVI", 4) == 0) return 1;
    /* no magic: must be text with the three dimension keys */
    size_t lim = n < 65536 ? n : 65536;
    char *t = malloc(lim + 1);
    if (!t) return 0;
    for (size_t k = 0; k < lim; k++) {
        if (p[k] == 0) {
            free(t);
            return 0;
        }
        t[k] = (char)tolower(p[k]);
    }
    t[lim] = 0;
    int ok = strstr(t, "samples") && strstr(t, "lines") && strstr(t, "bands") && strchr(t, '=');
    free(t);
    return ok;
}

/* path: a side-car header found by hsi_envi_find_header; opened without
 * blocking (hsi_input_fopen), so one that became a FIFO is not waited on. */
static int file_looks_envi(const char *path)
{
    FILE *fp = NULL;
    if (hsi_input_fopen(&fp, path, "ENVI header") != HSI_OK) return 0;
    uint8_t buf[65536];
    size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    return looks_envi(buf, n);
}

static uint32_t rd32(const uint8_t *p, int big)
{
    return big ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]
               : (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

/* A file whose first bytes say what it is (TIFF with an IFD inside the file,
 * BigTIFF, PNG, HDF5, NetCDF classic, MATLAB): its own content decides, not
 * an ENVI header that happens to sit beside it (hsi writes map.hdr and
 * map.tif side by side). Raw data and SPE files keep the side-car rule. */
static int self_describing(const uint8_t *p, size_t n)
{
    if (n >= 8 && (!memcmp(p, "II*\0", 4) || !memcmp(p, "MM\0*", 4)))
        return rd32(p + 4, p[0] == 'M') >= 8 && rd32(p + 4, p[0] == 'M') < n;
    if (n >= 16 && (!memcmp(p, "II+\0", 4) || !memcmp(p, "MM\0+", 4))) return 1;
    if (n >= 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8)) return 1;
    if (n >= 8 && !memcmp(p, "\x89HDF\r\n\x1a\n", 8)) return 1;
    if (n >= 4 && !memcmp(p, "CDF", 3) && (p[3] == 1 || p[3] == 2 || p[3] == 5)) return 1;
    return hsi_mat_probe(p, n);
}

static int has_ext(const char *path, const char *ext)
{
    size_t n = strlen(path), e = strlen(ext);
    return n > e && strcasecmp(path + n - e, ext) == 0;
}

static hsi_status set_format(hsi_cube *c, const char *name)
{
    if (c->meta.format) return HSI_OK;
    c->meta.format = strdup(name);
    return c->meta.format ? HSI_OK : HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
}

hsi_status hsi_cube_open(hsi_cube *out, const char *path, const hsi_open_options *options)
{
    hsi_status st = HSI_OK;
    hsi_buffer *buf = NULL;
    char *hdr = NULL;
    const char *var = options ? options->var : NULL;
    int image = options ? options->image : 0;
    hsi_cube_init(out);

    st = hsi_buffer_map(&buf, path);
    if (st != HSI_OK) {
        /* not a file: maybe a GDAL name ("NETCDF:f.nc:var", "/vsizip/...").
         * A name that exists (a FIFO, a directory, a device, a symlink
         * loop) keeps the map's error: GDAL would open it by name and wait
         * on a FIFO. */
        char saved[1024];
        snprintf(saved, sizeof saved, "%s", hsi_last_error());
        struct stat sb;
        int exists = lstat(path, &sb) == 0 || (errno != ENOENT && errno != ENOTDIR);
        if (!exists && (strchr(path, ':') || strncmp(path, "/vsi", 4) == 0)) {
            st = hsi_gdal_open(out, path, var);
            if (st == HSI_OK) goto cleanup;
        }
        hsi_fail(st, "%s", saved);
        goto cleanup;
    }
    const uint8_t *p = buf->data;
    size_t n = buf->size;

    /* 1. ENVI: the header itself, or a data file with an ENVI side-car */
    int envi = (n > 0 && looks_envi(p, n < 65536 ? n : 65536));
    if (!envi && !self_describing(p, n)) {
        st = hsi_envi_find_header(&hdr, path);
        /* a side-car header name that is a FIFO, a directory, ...: say so */
        if (st != HSI_OK && st != HSI_ERR_NOT_FOUND) goto cleanup;
        st = HSI_OK;
        envi = hdr && file_looks_envi(hdr);
    }
    hsi_clear_error();
    if (envi) {
        hsi_buffer_release(buf);
        buf = NULL;
        HSI_TRY(hsi_envi_open(out, path));
        HSI_TRY(set_format(out, "envi"));
        goto cleanup;
    }
    /* 2. MATLAB */
    if (hsi_mat_probe(p, n)) {
        hsi_buffer_release(buf);
        buf = NULL;
        HSI_TRY(hsi_mat_open(out, path, var));
        goto cleanup;
    }
    /* 3. Princeton SPE */
    char why[1024];
    if (hsi_spe_probe(p, n, why, sizeof why)) {
        hsi_buffer_release(buf);
        buf = NULL;
        hsi_spe_options so = {image, 1};
        HSI_TRY(hsi_spe_open(out, path, &so));
        goto cleanup;
    }
    if (has_ext(path, ".spe")) {
        st = HSI_FAIL(HSI_ERR_FORMAT,
                      "%s: neither ENVI data (no ENVI header X.hdr / X.spe.hdr beside it) nor "
                      "Princeton SPE (%s)",
                      path, why);
        goto cleanup;
    }
    /* 4. anything GDAL reads */
    hsi_buffer_release(buf);
    buf = NULL;
    HSI_TRY(hsi_gdal_open(out, path, var));
cleanup:
    hsi_buffer_release(buf);
    free(hdr);
    if (st != HSI_OK) hsi_cube_free(out);
    return st;
}

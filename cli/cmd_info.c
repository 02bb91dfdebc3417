/* cmd_info.c — `hsi info FILE [--json]`: what a cube's header says and what
 * was found on disk, for every format hsi_cube_open reads. It opens nothing
 * but the header and a mapping, so it is instant whatever the file size. */
#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "io/cube.h"
#include "io/envi.h"
#include "io/gdal_io.h"
#include "io/labels.h"

static void print_range_list(FILE *fp, const int *bbl, int64_t n)
{
    int first = 1;
    for (int64_t b = 0; b < n; b++) {
        if (bbl[b]) continue;
        int64_t e = b;
        while (e + 1 < n && !bbl[e + 1]) e++;
        fprintf(fp, "%s%lld", first ? "" : ",", (long long)b + 1);
        if (e > b) fprintf(fp, "-%lld", (long long)e + 1);
        first = 0;
        b = e;
    }
}

static void print_text(const hsi_meta *m, const hsi_cube *c, FILE *fp)
{
    const char *ft = m->file_type ? m->file_type : "";
    fprintf(fp, "format:        %s%s%s%s\n", m->format ? m->format : "?", *ft ? " (" : "", ft,
            *ft ? ")" : "");
    if (c && c->header_path) fprintf(fp, "header:        %s\n", c->header_path);
    if (c && c->data_path)
        fprintf(fp, "data file:     %s (%lld bytes)\n", c->data_path, (long long)c->file_size);
    fprintf(fp, "dimensions:    %lld samples x %lld lines x %lld bands\n", (long long)m->n_samples,
            (long long)m->n_lines, (long long)m->n_bands);
    fprintf(fp, "data type:     %s\n", hsi_dtype_name(m->dtype));
    fprintf(fp, "interleave:    %s\n", hsi_interleave_name(m->interleave));
    fprintf(fp, "byte order:    %s (%d)\n", m->byte_order ? "big-endian" : "little-endian",
            m->byte_order);
    fprintf(fp, "header offset: %lld\n", (long long)m->header_offset);
    if (m->major_frame_offsets[0] || m->major_frame_offsets[1])
        fprintf(fp, "frame offsets: major {%lld, %lld}\n", (long long)m->major_frame_offsets[0],
                (long long)m->major_frame_offsets[1]);
    if (m->file_compression) fprintf(fp, "compression:   gzip\n");
    if (c && c->n_images > 1)
        fprintf(fp, "images:        %d (showing image %d)\n", c->n_images, c->image_index);
    if (m->wavelength && m->n_bands > 0) {
        double lo = m->wavelength[0], hi = m->wavelength[0];
        for (int64_t b = 1; b < m->n_bands; b++) {
            lo = fmin(lo, m->wavelength[b]);
            hi = fmax(hi, m->wavelength[b]);
        }
        fprintf(fp, "wavelengths:   %.2f - %.2f %s (%lld values)%s\n", lo, hi,
                m->wavelength_nm ? "nm" : (m->wavelength_units ? m->wavelength_units : "(units unknown)"),
                (long long)m->n_bands, m->fwhm ? ", fwhm given" : "");
        if (!m->wavelength_nm && m->wavelength_units)
            fprintf(fp, "               units '%s' not convertible to nm\n", m->wavelength_units);
    } else if (hsi_meta_find(m, "sample wavelength")) {
        /* an SPE calibration: a wavelength per sample (the spectrometer's
         * x axis), not per band (frames) */
        const hsi_kv *kv = hsi_meta_find(m, "sample wavelength"), *u = hsi_meta_find(m, "sample wavelength units");
        double lo = INFINITY, hi = -INFINITY;
        int64_t n = 0;
        for (const char *p = kv->value; *p;) {
            char *end;
            double x = strtod(p, &end);
            if (end == p) break;
            lo = fmin(lo, x), hi = fmax(hi, x), n++;
            p = end;
            while (*p == ',' || *p == ' ') p++;
        }
        fprintf(fp, "wavelengths:   per sample (SPE calibration): %.2f - %.2f %s (%lld values); "
                    "none per band\n", lo, hi, u ? u->value : "", (long long)n);
    } else {
        fprintf(fp, "wavelengths:   none\n");
    }
    if (m->bbl) {
        int64_t bad = 0;
        for (int64_t b = 0; b < m->n_bands; b++) bad += !m->bbl[b];
        fprintf(fp, "bad bands:     %lld of %lld", (long long)bad, (long long)m->n_bands);
        if (bad) {
            fputs(" (", fp);
            print_range_list(fp, m->bbl, m->n_bands);
            fputc(')', fp);
        }
        fputc('\n', fp);
    }
    if (m->has_ignore_value) fprintf(fp, "ignore value:  %g\n", m->ignore_value);
    if (m->gain || m->offset) fprintf(fp, "calibration:   per-band gain/offset given\n");
    if (m->has_reflectance_scale)
        fprintf(fp, "refl. scale:   %g\n", m->reflectance_scale);
    if (m->n_default_bands) {
        fprintf(fp, "default bands:");
        for (int i = 0; i < m->n_default_bands; i++)
            fprintf(fp, " %d", m->default_bands[i] + 1);
        fputc('\n', fp);
    }
    if (m->map_info.valid) {
        const hsi_map_info *mi = &m->map_info;
        fprintf(fp, "map info:      %s", mi->projection);
        if (mi->zone) fprintf(fp, " zone %d %s", mi->zone, mi->north ? "North" : "South");
        fprintf(fp, ", %s, pixel %g x %g %s, pixel (%g, %g) at (%.3f, %.3f)", mi->datum,
                mi->x_size, mi->y_size, mi->units, mi->ref_x, mi->ref_y, mi->easting,
                mi->northing);
        if (mi->rotation != 0) fprintf(fp, ", rotation %g deg", mi->rotation);
        fputc('\n', fp);
    }
    if (m->coordinate_system)
        fprintf(fp, "crs:           %.70s%s\n", m->coordinate_system,
                strlen(m->coordinate_system) > 70 ? "..." : "");
    if (m->n_classes) {
        fprintf(fp, "classes:       %d:", m->n_classes);
        for (int i = 0; i < m->n_classes && i < 32; i++)
            fprintf(fp, "%s %d=%s", i ? "," : "", i,
                    m->class_names && m->class_names[i] ? m->class_names[i] : "?");
        fputc('\n', fp);
    }
    if (m->description) {
        char d[81];
        snprintf(d, sizeof d, "%s", m->description);
        for (char *p = d; *p; p++)
            if (*p == '\n' || *p == '\r') *p = ' ';
        fprintf(fp, "description:   %s%s\n", d, strlen(m->description) > 80 ? "..." : "");
    }
    if (m->format && strcmp(m->format, "envi") != 0 && m->n_keys) {
        fprintf(fp, "metadata:\n");
        for (int i = 0; i < m->n_keys; i++)
            fprintf(fp, "  %-24s %.100s\n", m->keys[i].key, m->keys[i].value);
    }
    for (int i = 0; i < m->n_warnings; i++) fprintf(fp, "warning:       %s\n", m->warnings[i]);
}

static cJSON *meta_json(const hsi_meta *m, const hsi_cube *c)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "format", m->format ? m->format : "unknown");
    if (m->file_type) cJSON_AddStringToObject(o, "file_type", m->file_type);
    cJSON_AddNumberToObject(o, "samples", (double)m->n_samples);
    cJSON_AddNumberToObject(o, "lines", (double)m->n_lines);
    cJSON_AddNumberToObject(o, "bands", (double)m->n_bands);
    cJSON_AddStringToObject(o, "dtype", hsi_dtype_name(m->dtype));
    cJSON_AddStringToObject(o, "interleave", hsi_interleave_name(m->interleave));
    cJSON_AddStringToObject(o, "byte_order", m->byte_order ? "big" : "little");
    cJSON_AddNumberToObject(o, "header_offset", (double)m->header_offset);
    if (c && c->header_path) cJSON_AddStringToObject(o, "header_file", c->header_path);
    if (c && c->data_path) {
        cJSON_AddStringToObject(o, "data_file", c->data_path);
        cJSON_AddNumberToObject(o, "file_size", (double)c->file_size);
    } else {
        cJSON_AddNullToObject(o, "data_file");
    }
    if (c) cJSON_AddNumberToObject(o, "images", c->n_images);
    if (m->wavelength && m->wavelength_nm)
        cJSON_AddItemToObject(o, "wavelengths",
                              cJSON_CreateDoubleArray(m->wavelength, (int)m->n_bands));
    else if (m->wavelength) {
        cJSON_AddItemToObject(o, "wavelengths_raw",
                              cJSON_CreateDoubleArray(m->wavelength, (int)m->n_bands));
        if (m->wavelength_units)
            cJSON_AddStringToObject(o, "wavelength_units", m->wavelength_units);
    }
    if (m->fwhm && m->wavelength_nm)
        cJSON_AddItemToObject(o, "fwhm", cJSON_CreateDoubleArray(m->fwhm, (int)m->n_bands));
    if (m->bbl) cJSON_AddItemToObject(o, "bbl", cJSON_CreateIntArray(m->bbl, (int)m->n_bands));
    if (m->band_names)
        cJSON_AddItemToObject(o, "band_names",
                              cJSON_CreateStringArray((const char *const *)m->band_names,
                                                      (int)m->n_bands));
    if (m->has_ignore_value) cJSON_AddNumberToObject(o, "ignore_value", m->ignore_value);
    if (m->has_reflectance_scale)
        cJSON_AddNumberToObject(o, "reflectance_scale", m->reflectance_scale);
    if (m->n_default_bands) {
        int d[3];
        for (int i = 0; i < m->n_default_bands; i++) d[i] = m->default_bands[i] + 1;
        cJSON_AddItemToObject(o, "default_bands", cJSON_CreateIntArray(d, m->n_default_bands));
    }
    if (m->map_info.valid) {
        const hsi_map_info *mi = &m->map_info;
        cJSON *mj = cJSON_AddObjectToObject(o, "map_info");
        cJSON_AddStringToObject(mj, "projection", mi->projection);
        cJSON_AddNumberToObject(mj, "ref_x", mi->ref_x);
        cJSON_AddNumberToObject(mj, "ref_y", mi->ref_y);
        cJSON_AddNumberToObject(mj, "easting", mi->easting);
        cJSON_AddNumberToObject(mj, "northing", mi->northing);
        cJSON_AddNumberToObject(mj, "x_size", mi->x_size);
        cJSON_AddNumberToObject(mj, "y_size", mi->y_size);
        if (mi->zone) {
            cJSON_AddNumberToObject(mj, "zone", mi->zone);
            cJSON_AddStringToObject(mj, "hemisphere", mi->north ? "North" : "South");
        }
        cJSON_AddStringToObject(mj, "datum", mi->datum);
        cJSON_AddStringToObject(mj, "units", mi->units);
        cJSON_AddNumberToObject(mj, "rotation", mi->rotation);
    }
    const hsi_kv *fr = m->format && !strcmp(m->format, "spe") ? hsi_meta_find(m, "frames") : NULL;
    if (fr) { /* SPE: frames and regions typed (the keys keep the text) */
        cJSON_AddNumberToObject(o, "frames", atof(fr->value));
        cJSON *ra = cJSON_AddArrayToObject(o, "rois");
        for (int r = 0;; r++) {
            char key[32];
            snprintf(key, sizeof key, "roi %d", r);
            const hsi_kv *kv = hsi_meta_find(m, key);
            long long w, h, x, y, bx, by;
            if (!kv || sscanf(kv->value, "%lld, %lld, x %lld, y %lld, binning %lld, %lld", &w, &h, &x, &y,
                              &bx, &by) != 6)
                break;
            cJSON *rj = cJSON_CreateObject();
            cJSON_AddNumberToObject(rj, "width", (double)w);
            cJSON_AddNumberToObject(rj, "height", (double)h);
            cJSON_AddNumberToObject(rj, "x", (double)x);
            cJSON_AddNumberToObject(rj, "y", (double)y);
            cJSON_AddNumberToObject(rj, "x_binning", (double)bx);
            cJSON_AddNumberToObject(rj, "y_binning", (double)by);
            cJSON_AddItemToArray(ra, rj);
        }
    }
    double gt[6];
    if (hsi_meta_geotransform(m, gt)) { /* as gdalinfo -json / rio info give them */
        cJSON_AddItemToObject(o, "geotransform", cJSON_CreateDoubleArray(gt, 6));
        double lo_x = INFINITY, hi_x = -INFINITY, lo_y = INFINITY, hi_y = -INFINITY;
        for (int k = 0; k < 4; k++) { /* the four corners of the raster */
            double px = (k & 1) ? (double)m->n_samples : 0, py = (k & 2) ? (double)m->n_lines : 0;
            double x = gt[0] + px * gt[1] + py * gt[2], y = gt[3] + px * gt[4] + py * gt[5];
            lo_x = fmin(lo_x, x), hi_x = fmax(hi_x, x), lo_y = fmin(lo_y, y), hi_y = fmax(hi_y, y);
        }
        cJSON *b = cJSON_AddObjectToObject(o, "bounds");
        cJSON_AddNumberToObject(b, "left", lo_x);
        cJSON_AddNumberToObject(b, "bottom", lo_y);
        cJSON_AddNumberToObject(b, "right", hi_x);
        cJSON_AddNumberToObject(b, "top", hi_y);
        int epsg = hsi_meta_epsg(m);
        if (epsg) cJSON_AddNumberToObject(o, "epsg", epsg);
        else cJSON_AddNullToObject(o, "epsg");
    }
    if (m->coordinate_system) cJSON_AddStringToObject(o, "crs", m->coordinate_system);
    if (m->description) cJSON_AddStringToObject(o, "description", m->description);
    if (m->n_classes && m->class_names)
        cJSON_AddItemToObject(o, "class_names",
                              cJSON_CreateStringArray((const char *const *)m->class_names,
                                                      m->n_classes));
    cJSON *keys = cJSON_AddObjectToObject(o, "keys");
    for (int i = 0; i < m->n_keys; i++) cJSON_AddStringToObject(keys, m->keys[i].key, m->keys[i].value);
    cJSON *w = cJSON_AddArrayToObject(o, "warnings");
    for (int i = 0; i < m->n_warnings; i++) cJSON_AddItemToArray(w, cJSON_CreateString(m->warnings[i]));
    return o;
}

/* Length of the valid UTF-8 sequence at s (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF), 0 when s does not start one. */
static size_t utf8_seq(const unsigned char *s)
{
    unsigned c = s[0];
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) return (s[1] & 0xc0) == 0x80 ? 2 : 0;
    if (c >= 0xe0 && c <= 0xef) {
        unsigned lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
        return s[1] >= lo && s[1] <= hi && (s[2] & 0xc0) == 0x80 ? 3 : 0;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        unsigned lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
        return s[1] >= lo && s[1] <= hi && (s[2] & 0xc0) == 0x80 && (s[3] & 0xc0) == 0x80 ? 4
                                                                                      : 0;
    }
    return 0;
}

/* s with every byte that starts no valid UTF-8 sequence replaced by U+FFFD
 * (cJSON_malloc'd), or NULL when s is valid already. *n_bad counts them. */
static char *utf8_fixed(const char *s, int64_t *n_bad)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t len = 0, bad = 0;
    for (size_t i = 0; u[i];) {
        size_t k = utf8_seq(u + i); /* never reads past the NUL: it fails the tests */
        if (k) i += k, len += k;
        else i++, len += 3, bad++;
    }
    if (!bad) return NULL;
    char *out = cJSON_malloc(len + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; u[i];) {
        size_t k = utf8_seq(u + i);
        if (k) {
            memcpy(out + o, u + i, k);
            i += k, o += k;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            i++, o += 3;
        }
    }
    out[o] = 0;
    *n_bad += (int64_t)bad;
    return out;
}

/* Makes every key and string of the tree valid UTF-8 (headers are often
 * Latin-1, and JSON must be UTF-8): counts the bytes replaced in *n and
 * names the first member they were found in (parent: the enclosing key). */
static void json_utf8_fix(cJSON *item, const char *parent, int64_t *n, char *first,
                          size_t first_n)
{
    for (; item; item = item->next) {
        int64_t before = *n;
        char *f;
        if (item->string && !(item->type & cJSON_StringIsConst) &&
            (f = utf8_fixed(item->string, n))) {
            cJSON_free(item->string);
            item->string = f;
        }
        if (cJSON_IsString(item) && item->valuestring && (f = utf8_fixed(item->valuestring, n))) {
            cJSON_free(item->valuestring);
            item->valuestring = f;
        }
        const char *here = item->string ? item->string : parent;
        if (*n > before && !first[0] && here) snprintf(first, first_n, "%s", here);
        if (item->child) json_utf8_fix(item->child, here, n, first, first_n);
    }
}

/* A classification file (declared as such, or carrying class names) is
 * shown as a label map too: pixels per class. */
static int is_label_map(const hsi_cube *c)
{
    return c && c->view.ndim == 3 && c->view.shape[0] == 1 && !hsi_dtype_is_float(c->view.dtype) &&
           !hsi_dtype_is_complex(c->view.dtype) &&
           (c->meta.file_kind == HSI_FILE_CLASSIFICATION || c->meta.n_classes > 0);
}

static void emit(const hsi_meta *m, const hsi_cube *c, int json, const char *error,
                 const hsi_labels *lab)
{
    if (json) {
        cJSON *o = meta_json(m, c);
        if (error) cJSON_AddStringToObject(o, "error", error);
        if (lab) {
            cJSON *cl = cJSON_AddObjectToObject(o, "classes");
            for (int k = 1; k < lab->n_classes; k++) {
                if (!lab->counts[k]) continue;
                char id[16];
                snprintf(id, sizeof id, "%d", k);
                cJSON_AddNumberToObject(cl, id, (double)lab->counts[k]);
            }
            cJSON_AddNumberToObject(o, "labelled_pixels", (double)hsi_labels_n_labelled(lab));
            cJSON_AddNumberToObject(o, "unlabelled_pixels", (double)lab->counts[0]);
        }
        int64_t n_bad = 0;
        char first[80] = "";
        json_utf8_fix(o, NULL, &n_bad, first, sizeof first);
        if (n_bad) {
            char note[320];
            snprintf(note, sizeof note,
                     "text that is not UTF-8 (a Latin-1 header?): %lld byte%s replaced by U+FFFD "
                     "in this JSON output, first in '%s'; the file is unchanged",
                     (long long)n_bad, n_bad == 1 ? "" : "s", first[0] ? first : "?");
            cJSON *w = cJSON_GetObjectItemCaseSensitive(o, "warnings");
            if (w) cJSON_AddItemToArray(w, cJSON_CreateString(note));
            hsi_warn("%s", note);
        }
        /* stdout holds JSON: the header's warnings go to stderr too, once
         * (hsi_meta_warn does not print them while info runs) */
        for (int i = 0; i < m->n_warnings; i++) hsi_warn("%s", m->warnings[i]);
        char *s = cJSON_Print(o);
        if (s) puts(s);
        free(s);
        cJSON_Delete(o);
    } else {
        print_text(m, c, stdout);
        if (lab) {
            printf("class counts:  %lld labelled, %lld unlabelled;", (long long)hsi_labels_n_labelled(lab),
                   (long long)lab->counts[0]);
            for (int k = 1; k < lab->n_classes; k++)
                if (lab->counts[k])
                    printf(" %d%s%s: %lld", k, lab->names && lab->names[k] ? " " : "",
                           lab->names && lab->names[k] ? lab->names[k] : "", (long long)lab->counts[k]);
            putchar('\n');
        }
    }
}

static int info_run(int argc, char **argv)
{
    int json = 0;
    const char *path = NULL;
    hsi_open_options opt = {NULL, 0};
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (hsi_cli_opt(argc, argv, &i, "--var", &v)) {
            if (!v) return hsi_cli_usage_error("info", "--var needs a name");
            opt.var = v;
        } else if (hsi_cli_opt(argc, argv, &i, "--image", &v)) {
            long long k;
            if (!hsi_cli_parse_int("info", "--image", v, 0, 1 << 20, &k)) return HSI_EXIT_USAGE;
            opt.image = (int)k;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return hsi_cli_usage_error("info", "unknown option '%s'", argv[i]);
        } else if (!path) {
            path = argv[i];
        } else {
            return hsi_cli_usage_error("info", "one file at a time (got '%s' and '%s')", path, argv[i]);
        }
    }
    if (!path) return hsi_cli_usage_error("info", "which file? (hsi info FILE)");
    /* the report shows every warning of the header: not on stderr as well */
    hsi_meta_warn_echo(0);
    hsi_cube c;
    hsi_cube_init(&c);
    hsi_status st = hsi_cube_open(&c, path, &opt);
    if (st == HSI_OK) {
        hsi_labels lab;
        hsi_labels_init(&lab);
        int have_lab = 0;
        if (is_label_map(&c)) {
            have_lab = hsi_labels_open(&lab, path, opt.var) == HSI_OK;
            if (!have_lab) /* say why there are no class counts */
                hsi_meta_warn(&c.meta, "not read as a label map: %s", hsi_last_error());
        }
        emit(&c.meta, &c, json, NULL, have_lab ? &lab : NULL);
        hsi_labels_free(&lab);
        hsi_cube_free(&c);
        return HSI_EXIT_OK;
    }
    /* The header may be fine while the data are not: show what it says,
     * then fail with the reader's error. */
    char err[2048];
    snprintf(err, sizeof err, "%s", hsi_last_error());
    hsi_meta m;
    hsi_meta_init(&m);
    if (hsi_envi_read_header(&m, path) == HSI_OK) {
        if (!m.format) m.format = strdup("envi");
        emit(&m, NULL, json, err, NULL);
    }
    hsi_meta_free(&m);
    fprintf(stderr, "hsi info: %s\n", err);
    return HSI_EXIT_FAIL;
}

HSI_CLI_COMMAND(info, {"info", "show a cube's dimensions, type, layout, wavelengths and metadata",
                       "usage: hsi info FILE [--json] [--var NAME] [--image N]\n"
                       "\n"
                       "Shows what FILE's header says (ENVI .hdr or its data file, Princeton\n"
                       ".spe, MATLAB .mat, any GDAL raster): dimensions, data type, interleave,\n"
                       "byte order, header offset, data file and size, wavelength range and\n"
                       "units, bad bands, map info and CRS, classes, and any warnings.\n"
                       "Opening is instant: the data are mapped, not read.\n"
                       "\n"
                       "  --json       machine-readable output (keys: format, samples, lines,\n"
                       "               bands, dtype, interleave, byte_order, header_offset,\n"
                       "               data_file, wavelengths (nm) when known, ...);\n"
                       "               always UTF-8: bytes of the header that are not UTF-8\n"
                       "               are shown as U+FFFD and a warning says how many\n"
                       "  --var NAME   variable of a .mat file / GDAL subdataset\n"
                       "  --image N    region of interest / image N (0-based) of an SPE file\n"
                       "\n"
                       "When the header is readable but the data file is missing or too short,\n"
                       "the header is shown and the command fails with the reason (exit 1).\n",
                       info_run})

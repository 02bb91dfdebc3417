/* labels.c — label maps: opening (through hsi_cube_open or the .mat 2-D
 * reader), validation of ids, per-class counts, names and colours. Not a
 * sampler: pipeline/ builds splits from these. */
#define _GNU_SOURCE
#include "labels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cube.h"
#include "mat.h"

void hsi_labels_init(hsi_labels *l)
{
    memset(l, 0, sizeof *l);
    hsi_meta_init(&l->meta);
}

void hsi_labels_free(hsi_labels *l)
{
    if (!l) return;
    hsi_view_release(&l->map);
    free(l->counts);
    if (l->names)
        for (int i = 0; i < l->n_classes; i++) free(l->names[i]);
    free(l->names);
    free(l->colors);
    hsi_meta_free(&l->meta);
    free(l->source);
    hsi_labels_init(l);
}

int64_t hsi_labels_n_labelled(const hsi_labels *l)
{
    int64_t n = 0;
    for (int i = 1; i < l->n_classes; i++) n += l->counts[i];
    return n;
}

hsi_status hsi_labels_from_view(hsi_labels *out, const hsi_view *map, const hsi_meta *meta)
{
    hsi_status st = HSI_OK;
    hsi_labels_init(out);
    if (map->ndim != 2)
        return HSI_FAIL(HSI_ERR_ARG, "label map must be (lines, samples), got %d dimensions",
                        map->ndim);
    if (hsi_dtype_is_complex(map->dtype))
        return HSI_FAIL(HSI_ERR_UNSUPPORTED, "label map of complex type %s",
                        hsi_dtype_name(map->dtype));
    int64_t L = map->shape[0], S = map->shape[1];
    /* validate in double first (catches fractions and out-of-range ids) */
    if (hsi_dtype_is_float(map->dtype) || map->dtype == HSI_I64 || map->dtype == HSI_U64 ||
        map->dtype == HSI_U32) {
        int64_t idx[2];
        for (idx[0] = 0; idx[0] < L; idx[0]++)
            for (idx[1] = 0; idx[1] < S; idx[1]++) {
                double v = hsi_view_get_f64(map, idx);
                if (!(v >= 0 && v <= HSI_LABELS_MAX_CLASS) || v != floor(v)) {
                    st = HSI_FAIL(HSI_ERR_FORMAT,
                                  "label map: value %g at line %lld sample %lld is not a class id "
                                  "(an integer in 0..%d)",
                                  v, (long long)idx[0], (long long)idx[1], HSI_LABELS_MAX_CLASS);
                    goto cleanup;
                }
            }
    }
    HSI_TRY(hsi_view_contiguous(&out->map, map, HSI_I32));
    const int32_t *d = (const int32_t *)((const uint8_t *)out->map.buf->data + out->map.offset);
    int32_t vmax = 0;
    for (int64_t i = 0; i < L * S; i++) {
        if (d[i] < 0 || d[i] > HSI_LABELS_MAX_CLASS) {
            st = HSI_FAIL(HSI_ERR_FORMAT,
                          "label map: value %d at line %lld sample %lld is not a class id (0..%d)",
                          d[i], (long long)(i / S), (long long)(i % S), HSI_LABELS_MAX_CLASS);
            goto cleanup;
        }
        if (d[i] > vmax) vmax = d[i];
    }
    /* an ENVI header that declares its classes ('classes', 'class names'):
     * an id beyond them is no class of the file */
    if (meta && meta->n_classes > 0 && vmax >= meta->n_classes && meta->format &&
        !strcmp(meta->format, "envi") &&
        (hsi_meta_find(meta, "classes") || hsi_meta_find(meta, "class names"))) {
        int64_t i = 0;
        while (d[i] < meta->n_classes) i++;
        st = HSI_FAIL(HSI_ERR_FORMAT,
                      "label map: value %d at line %lld sample %lld is not one of the %d "
                      "classes the header declares ('classes' = %d: ids 0..%d); fix 'classes' "
                      "and 'class names', or the map",
                      d[i], (long long)(i / S), (long long)(i % S), meta->n_classes,
                      meta->n_classes, meta->n_classes - 1);
        goto cleanup;
    }
    int n = vmax + 1;
    if (meta && meta->n_classes > n && meta->n_classes <= HSI_LABELS_MAX_CLASS + 1)
        n = meta->n_classes;
    out->n_classes = n;
    out->counts = calloc((size_t)n, sizeof *out->counts);
    if (!out->counts) goto nomem;
    for (int64_t i = 0; i < L * S; i++) out->counts[d[i]]++;
    if (meta && meta->class_names && meta->n_classes > 0) {
        out->names = calloc((size_t)n, sizeof *out->names);
        if (!out->names) goto nomem;
        for (int i = 0; i < n && i < meta->n_classes; i++)
            if (meta->class_names[i] && !(out->names[i] = strdup(meta->class_names[i])))
                goto nomem;
    }
    if (meta && meta->class_lookup && meta->n_classes > 0) {
        out->colors = calloc((size_t)n, 3);
        if (!out->colors) goto nomem;
        memcpy(out->colors, meta->class_lookup,
               3 * (size_t)(meta->n_classes < n ? meta->n_classes : n));
    }
    if (meta) HSI_TRY(hsi_meta_copy(&out->meta, meta));
    out->meta.n_bands = 1;
    out->meta.n_lines = L;
    out->meta.n_samples = S;
    goto cleanup;
nomem:
    st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
cleanup:
    if (st != HSI_OK) hsi_labels_free(out);
    return st;
}

hsi_status hsi_labels_open(hsi_labels *out, const char *path, const char *var)
{
    hsi_status st = HSI_OK;
    hsi_view v = {0};
    hsi_cube c;
    char *name = NULL;
    hsi_cube_init(&c);
    hsi_labels_init(out);
    uint8_t head[1024];
    size_t n = 0;
    struct stat sb;
    if (lstat(path, &sb) == 0) {
        /* a file-system name (else a GDAL one, for hsi_cube_open): sniffed
         * without blocking, a FIFO or a directory refused */
        FILE *fp = NULL;
        HSI_TRY(hsi_input_fopen(&fp, path, "label map"));
        n = fread(head, 1, sizeof head, fp);
        fclose(fp);
    }
    if (hsi_mat_probe(head, n)) {
        HSI_TRY(hsi_mat_open_2d(&v, &name, path, var));
        HSI_TRY(hsi_labels_from_view(out, &v, NULL));
        out->meta.format = strdup("mat");
    } else {
        hsi_open_options o = {var, 0};
        HSI_TRY(hsi_cube_open(&c, path, &o));
        if (c.view.shape[0] != 1) {
            st = HSI_FAIL(HSI_ERR_FORMAT,
                          "%s: a label map has one band; this %s file has %lld bands", path,
                          c.meta.format ? c.meta.format : "", (long long)c.view.shape[0]);
            goto cleanup;
        }
        HSI_TRY(hsi_view_index(&v, &c.view, 0, 0));
        st = hsi_labels_from_view(out, &v, &c.meta);
        if (st != HSI_OK) {
            hsi_fail_context(st, "%s", path);
            goto cleanup;
        }
    }
    size_t len = strlen(path) + (name ? strlen(name) + 2 : 1);
    out->source = malloc(len);
    if (!out->source) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    snprintf(out->source, len, "%s%s%s", path, name ? ":" : "", name ? name : "");
cleanup:
    if (st != HSI_OK && st != HSI_ERR_NOMEM && !strstr(hsi_last_error(), path))
        hsi_fail_context(st, "%s", path);
    if (st != HSI_OK) hsi_labels_free(out);
    free(name);
    hsi_view_release(&v);
    hsi_cube_free(&c);
    return st;
}

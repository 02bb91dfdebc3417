/* spe.c — Princeton Instruments SPE 2.x / 3.0 reader. The binary header is
 * read field by field with memcpy (little-endian, packed, unaligned); the 3.0
 * XML footer is parsed with libxml2. Not a writer, and not the ENVI-vs-SPE
 * decision for ".spe" files (cube.c makes it). */
#define _GNU_SOURCE
#include "spe.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/parser.h>
#include <libxml/tree.h>

#include "meta.h"

/* ------------------------------------------------------------ raw fields */

static uint16_t rd_u16(const uint8_t *p, size_t o)
{
    return (uint16_t)(p[o] | (p[o + 1] << 8));
}
static int16_t rd_i16(const uint8_t *p, size_t o) { return (int16_t)rd_u16(p, o); }
static uint32_t rd_u32(const uint8_t *p, size_t o)
{
    return (uint32_t)p[o] | ((uint32_t)p[o + 1] << 8) | ((uint32_t)p[o + 2] << 16) |
           ((uint32_t)p[o + 3] << 24);
}
static uint64_t rd_u64(const uint8_t *p, size_t o)
{
    return (uint64_t)rd_u32(p, o) | ((uint64_t)rd_u32(p, o + 4) << 32);
}
static float rd_f32(const uint8_t *p, size_t o)
{
    uint32_t u = rd_u32(p, o);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static double rd_f64(const uint8_t *p, size_t o)
{
    uint64_t u = rd_u64(p, o);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

static hsi_dtype spe_dtype(int code)
{
    switch (code) {
    case 0: return HSI_F32;
    case 1: return HSI_I32;
    case 2: return HSI_I16;
    case 3: return HSI_U16;
    case 5: return HSI_F64;
    case 6: return HSI_U8;
    case 8: return HSI_U32;
    default: return HSI_DT_INVALID;
    }
}

/* Copies a fixed-size Latin-1 text field as UTF-8 up to the first NUL;
 * control characters become spaces, trailing blanks are trimmed. */
static void latin1_to_utf8(char *dst, size_t n, const uint8_t *src, size_t len)
{
    size_t j = 0;
    for (size_t i = 0; i < len && src[i]; i++) {
        uint8_t c = src[i];
        if (c < 0x20 || c == 0x7f) c = ' ';
        if (c < 0x80) {
            if (j + 1 >= n) break;
            dst[j++] = (char)c;
        } else {
            if (j + 2 >= n) break;
            dst[j++] = (char)(0xc0 | (c >> 6));
            dst[j++] = (char)(0x80 | (c & 0x3f));
        }
    }
    while (j > 0 && dst[j - 1] == ' ') j--;
    dst[j] = 0;
}

static void read_calib(hsi_spe_calib *c, const uint8_t *p, size_t base)
{
    c->offset = rd_f64(p, base + 0);
    c->factor = rd_f64(p, base + 8);
    c->valid = p[base + 98] != 0;
    c->order = p[base + 101];
    for (int j = 0; j < 6; j++) c->coeff[j] = rd_f64(p, base + 263 + 8 * (size_t)j);
}

void hsi_spe_calib_eval(const hsi_spe_calib *c, int64_t n, int base, double *out)
{
    int order = c->order < 0 ? 0 : c->order > 5 ? 5 : c->order;
    for (int64_t i = 0; i < n; i++) {
        double p = (double)(i + base), v = 0.0;
        for (int j = order; j >= 0; j--) v = v * p + c->coeff[j];
        out[i] = v;
    }
}

static int calib_usable(const hsi_spe_calib *c)
{
    if (!c->valid || c->order < 1 || c->order > 5) return 0;
    int nonzero = 0;
    for (int j = 0; j <= c->order; j++) {
        if (!isfinite(c->coeff[j])) return 0;
        if (c->coeff[j] != 0.0) nonzero = 1;
    }
    return nonzero;
}

void hsi_spe_info_init(hsi_spe_info *s)
{
    memset(s, 0, sizeof *s);
    s->exposure_ms = NAN;
    s->pixel_base = 1;
}

void hsi_spe_info_free(hsi_spe_info *s)
{
    if (!s) return;
    for (int r = 0; r < HSI_SPE_MAX_ROIS; r++) free(s->rois[r].wavelength);
    free(s->xml);
    hsi_spe_info_init(s);
}

static void spe_warn(hsi_spe_info *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void spe_warn(hsi_spe_info *s, const char *fmt, ...)
{
    if (s->n_warnings >= HSI_SPE_MAX_WARNINGS) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->warnings[s->n_warnings], sizeof s->warnings[0], fmt, ap);
    va_end(ap);
    s->n_warnings++;
}

/* Why a calibration marked valid cannot give wavelengths ("" when it can). */
static void calib_problem(const hsi_spe_calib *c, size_t base, char *why, size_t n)
{
    why[0] = 0;
    if (c->order < 1 || c->order > 5) {
        snprintf(why, n, "its polynomial order @%zu is %d (expected 1..5)", base + 101, c->order);
        return;
    }
    int nonzero = 0;
    for (int j = 0; j <= c->order; j++) {
        if (!isfinite(c->coeff[j])) {
            snprintf(why, n, "coefficient %d @%zu is %g, not a finite number", j,
                     base + 263 + 8 * (size_t)j, c->coeff[j]);
            return;
        }
        if (c->coeff[j] != 0.0) nonzero = 1;
    }
    if (!nonzero) snprintf(why, n, "its %d coefficients @%zu are all zero", c->order + 1, base + 263);
}

/* ------------------------------------------------------------ XML helpers */

static const char *lname(const xmlNode *n) { return (const char *)n->name; }

static xmlNode *child(xmlNode *n, const char *name)
{
    for (xmlNode *c = n ? n->children : NULL; c; c = c->next)
        if (c->type == XML_ELEMENT_NODE && strcmp(lname(c), name) == 0) return c;
    return NULL;
}

/* First element named `name` anywhere below n (depth first), whose parent is
 * named `parent` when parent != NULL. Depth is bounded against hostile input. */
static xmlNode *find_deep(xmlNode *n, const char *name, const char *parent, int depth)
{
    if (!n || depth > 64) return NULL;
    for (xmlNode *c = n->children; c; c = c->next) {
        if (c->type != XML_ELEMENT_NODE) continue;
        if (strcmp(lname(c), name) == 0 && (!parent || strcmp(lname(n), parent) == 0)) return c;
        xmlNode *r = find_deep(c, name, parent, depth + 1);
        if (r) return r;
    }
    return NULL;
}

/* Attribute as text into buf ("" when absent); returns 1 when present. */
static int attr_str(xmlNode *n, const char *name, char *buf, size_t len)
{
    buf[0] = 0;
    xmlChar *v = xmlGetProp(n, (const xmlChar *)name);
    if (!v) return 0;
    snprintf(buf, len, "%s", (const char *)v);
    xmlFree(v);
    return 1;
}

/* Integer attribute: 1 ok, 0 absent, -1 not an integer in [lo, hi]. */
static int attr_i64(xmlNode *n, const char *name, int64_t lo, int64_t hi, int64_t *out)
{
    char buf[64], *end = NULL;
    if (!attr_str(n, name, buf, sizeof buf)) return 0;
    long long v = strtoll(buf, &end, 10);
    if (end == buf || *end || v < lo || v > hi) return -1;
    *out = v;
    return 1;
}

static hsi_dtype pixel_format_dtype(const char *s)
{
    if (!strcmp(s, "MonochromeUnsigned16")) return HSI_U16;
    if (!strcmp(s, "MonochromeUnsigned32")) return HSI_U32;
    if (!strcmp(s, "MonochromeFloating32")) return HSI_F32;
    if (!strcmp(s, "MonochromeSigned16")) return HSI_I16;
    if (!strcmp(s, "MonochromeSigned32")) return HSI_I32;
    if (!strcmp(s, "MonochromeFloating64")) return HSI_F64;
    if (!strcmp(s, "MonochromeUnsigned8")) return HSI_U8;
    return HSI_DT_INVALID;
}

/* Parses a list of numbers separated by commas/blanks. With pairs != 0 the
 * list is "a,b a,b ..." and only the first of each pair is kept. *bad: the
 * 1-based position of the first kept value that is not finite (NaN, inf,
 * 1e400), 0 when all are. */
static int64_t parse_numbers(const char *s, double **out, int pairs, int64_t *bad)
{
    *bad = 0;
    int64_t cap = 256, n = 0, k = 0;
    double *v = malloc((size_t)cap * sizeof *v);
    if (!v) return -1;
    while (*s) {
        while (*s == ',' || *s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
        if (!*s) break;
        char *end = NULL;
        double d = strtod(s, &end);
        if (end == s) {
            free(v);
            return -2;
        }
        s = end;
        if (pairs && (k++ & 1)) continue;
        if (n == cap) {
            if (cap > (1 << 24)) {
                free(v);
                return -2;
            }
            cap *= 2;
            double *nv = realloc(v, (size_t)cap * sizeof *nv);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        if (!isfinite(d) && !*bad) *bad = n + 1;
        v[n++] = d;
    }
    *out = v;
    return n;
}

/* The footer's calibration id list ("2,3") contains id? */
static int id_in_list(const char *list, const char *id)
{
    size_t n = strlen(id);
    const char *p = list;
    while (*p) {
        while (*p == ',' || *p == ' ') p++;
        if (!strncmp(p, id, n) && (p[n] == ',' || p[n] == ' ' || p[n] == 0)) return 1;
        while (*p && *p != ',') p++;
    }
    return 0;
}

/* Fills ROI wavelengths from the sensor-wide wavelength list: column j of a
 * region at sensor x with binning b is the mean of sensor pixels
 * x + j*b .. x + j*b + b - 1. A list as long as the region is used as is. */
static void roi_wavelengths(hsi_spe_info *s, int k, const double *wl, int64_t n_wl,
                            const char *name)
{
    hsi_spe_roi *r = &s->rois[k];
    int64_t x = r->x < 0 ? 0 : r->x, b = r->x_binning < 1 ? 1 : r->x_binning;
    int64_t need = -1;
    int direct = 0;
    if (hsi_mul_ok(r->width, b, &need) && x + need <= n_wl && n_wl > 0) {
        direct = 0;
    } else if (n_wl == r->width) {
        direct = 1;
    } else {
        spe_warn(s,
                 "%s: the XML <Wavelength> list has %lld values, region %d needs %lld (sensor "
                 "x %lld + width %lld x binning %lld) or exactly its width %lld: region %d has "
                 "no wavelengths",
                 name, (long long)n_wl, k, (long long)(need >= 0 ? x + need : -1), (long long)x,
                 (long long)r->width, (long long)b, (long long)r->width, k);
        return;
    }
    double *o = malloc((size_t)(r->width ? r->width : 1) * sizeof *o);
    if (!o) return;
    for (int64_t j = 0; j < r->width; j++) {
        if (direct) {
            o[j] = wl[j];
            continue;
        }
        double sum = 0;
        for (int64_t q = 0; q < b; q++) sum += wl[x + j * b + q];
        o[j] = sum / (double)b;
    }
    r->wavelength = o;
}

#define XFAIL(...)                                                             \
    do {                                                                       \
        st = HSI_FAIL(HSI_ERR_FORMAT, __VA_ARGS__);                            \
        goto cleanup;                                                          \
    } while (0)

static void xml_silent(void *ctx, const char *fmt, ...)
{
    (void)ctx;
    (void)fmt;
}

static hsi_status parse_footer(hsi_spe_info *s, const char *name, int64_t data_end)
{
    hsi_status st = HSI_OK;
    xmlParserCtxtPtr ctx = NULL;
    xmlDocPtr doc = NULL;
    double *wl = NULL;
    xmlChar *text = NULL;
    char buf[256];

    if (s->xml_len > INT_MAX) XFAIL("%s: XML footer of %zu bytes is too large", name, s->xml_len);
    xmlInitParser();
    ctx = xmlNewParserCtxt();
    if (!ctx) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory (XML parser)");
        goto cleanup;
    }
    /* libxml2's encoding layer reports through the generic handler even
     * with NOERROR: silence it (per thread) so that nothing reaches stderr;
     * the error still comes back through the context */
    xmlSetGenericErrorFunc(NULL, xml_silent);
    doc = xmlCtxtReadMemory(ctx, s->xml, (int)s->xml_len, NULL, NULL,
                            XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
    xmlSetGenericErrorFunc(NULL, NULL);
    if (!doc) {
        const xmlError *e = xmlCtxtGetLastError(ctx);
        char msg[160] = "unknown error";
        if (e && e->message) {
            snprintf(msg, sizeof msg, "%s", e->message);
            size_t l = strlen(msg);
            while (l && (msg[l - 1] == '\n' || msg[l - 1] == ' ')) msg[--l] = 0;
        }
        XFAIL("%s: XML footer at byte %llu is not well-formed XML (line %d: %s)", name,
              (unsigned long long)s->footer_offset, e ? e->line : 0, msg);
    }
    xmlNode *root = xmlDocGetRootElement(doc);
    if (!root || strcmp(lname(root), "SpeFormat") != 0)
        XFAIL("%s: XML footer at byte %llu: expected root element <SpeFormat>, found <%s>", name,
              (unsigned long long)s->footer_offset, root ? lname(root) : "(none)");

    xmlNode *fmt = child(root, "DataFormat");
    xmlNode *frame = NULL;
    for (xmlNode *c = fmt ? fmt->children : NULL; c; c = c->next) {
        if (c->type != XML_ELEMENT_NODE || strcmp(lname(c), "DataBlock")) continue;
        attr_str(c, "type", buf, sizeof buf);
        if (!strcmp(buf, "Frame")) {
            frame = c;
            break;
        }
    }
    if (!frame) XFAIL("%s: XML footer has no <DataFormat><DataBlock type=\"Frame\">", name);

    /* pixel format */
    if (attr_str(frame, "pixelFormat", buf, sizeof buf)) {
        hsi_dtype dt = pixel_format_dtype(buf);
        if (dt == HSI_DT_INVALID)
            XFAIL("%s: XML DataBlock pixelFormat '%s' is not one of MonochromeUnsigned16, "
                  "MonochromeUnsigned32, MonochromeFloating32",
                  name, buf);
        s->dtype = dt;
    }
    if (s->dtype == HSI_DT_INVALID)
        XFAIL("%s: no usable data type: header datatype @108 = %d and no XML pixelFormat", name,
              s->datatype);
    int64_t elem = (int64_t)hsi_dtype_size(s->dtype), v;
    int r;
    if ((r = attr_i64(frame, "count", 1, INT32_MAX, &v)) < 0)
        XFAIL("%s: XML frame DataBlock count is not a positive integer", name);
    if (r > 0) s->n_frames = v;
    int64_t fsize = -1, fstride = -1;
    if (attr_i64(frame, "size", 1, INT64_MAX / 4, &fsize) < 0 ||
        attr_i64(frame, "stride", 1, INT64_MAX / 4, &fstride) < 0)
        XFAIL("%s: XML frame DataBlock size/stride are not positive integers", name);

    /* regions */
    int n = 0;
    int64_t off = 0;
    char calib_ids[HSI_SPE_MAX_ROIS][64];
    for (xmlNode *c = frame->children; c; c = c->next) {
        if (c->type != XML_ELEMENT_NODE || strcmp(lname(c), "DataBlock")) continue;
        attr_str(c, "type", buf, sizeof buf);
        if (strcmp(buf, "Region") != 0) continue;
        if (n == HSI_SPE_MAX_ROIS) XFAIL("%s: more than %d regions in the XML footer", name, n);
        hsi_spe_roi *ro = &s->rois[n];
        int64_t w = 0, h = 0, rs = -1;
        if (attr_i64(c, "width", 1, 1 << 24, &w) != 1 || attr_i64(c, "height", 1, 1 << 24, &h) != 1)
            XFAIL("%s: XML region %d: width/height missing or not in 1..16777216", name, n);
        int64_t px, sz;
        if (!hsi_mul_ok(w, h, &px) || !hsi_mul_ok(px, elem, &sz))
            XFAIL("%s: XML region %d: %lld x %lld pixels overflow", name, n, (long long)w,
                  (long long)h);
        if (attr_i64(c, "stride", 1, INT64_MAX / 4, &rs) < 0)
            XFAIL("%s: XML region %d: stride is not a positive integer", name, n);
        if (rs < 0) rs = sz;
        if (rs < sz)
            XFAIL("%s: XML region %d: stride %lld bytes is smaller than its %lld x %lld x %lld-byte "
                  "pixels (%lld bytes)",
                  name, n, (long long)rs, (long long)w, (long long)h, (long long)elem,
                  (long long)sz);
        ro->width = w;
        ro->height = h;
        ro->size = sz;
        ro->offset = off;
        ro->x = ro->y = -1;
        ro->x_binning = ro->y_binning = 1;
        if (off > INT64_MAX / 4 - rs) XFAIL("%s: XML region strides overflow", name);
        off += rs;
        attr_str(c, "calibrations", calib_ids[n], sizeof calib_ids[n]);
        n++;
    }
    if (n == 0) {
        /* A footer without regions: one region from the binary header. */
        if (s->xdim <= 0 || s->ydim <= 0)
            XFAIL("%s: XML footer has no <DataBlock type=\"Region\"> and the header dims are "
                  "%lld x %lld",
                  name, (long long)s->xdim, (long long)s->ydim);
        hsi_spe_roi *ro = &s->rois[0];
        ro->width = s->xdim;
        ro->height = s->ydim;
        ro->size = s->xdim * s->ydim * elem;
        ro->x = ro->y = -1;
        ro->x_binning = ro->y_binning = 1;
        off = ro->size;
        calib_ids[0][0] = 0;
        n = 1;
    }
    if (s->n_frames <= 0)
        XFAIL("%s: frame count is %lld (XML DataBlock count absent, NumFrames @1446); expected "
              "> 0",
              name, (long long)s->n_frames);
    s->n_rois = n;
    s->frame_size = fsize > 0 ? fsize : off;
    s->frame_stride = fstride > 0 ? fstride : s->frame_size;
    if (off > s->frame_stride)
        XFAIL("%s: XML regions need %lld bytes per frame but the frame stride is %lld", name,
              (long long)off, (long long)s->frame_stride);
    int64_t total;
    if (!hsi_mul_ok(s->frame_stride, s->n_frames, &total) ||
        total > data_end - HSI_SPE_HEADER_SIZE)
        XFAIL("%s: %lld frames of %lld bytes need %lld bytes after the 4100-byte header, but the "
              "XML footer starts at byte %lld (%lld bytes available)",
              name, (long long)s->n_frames, (long long)s->frame_stride,
              (long long)(total > 0 ? total : -1), (long long)data_end,
              (long long)(data_end - HSI_SPE_HEADER_SIZE));
    /* calibrations: sensor mappings and wavelengths */
    xmlNode *cal = child(root, "Calibrations");
    char frame_cal[64];
    attr_str(frame, "calibrations", frame_cal, sizeof frame_cal);
    int64_t n_wl = 0;
    for (xmlNode *c = cal ? cal->children : NULL; c; c = c->next) {
        if (c->type != XML_ELEMENT_NODE) continue;
        char id[32];
        attr_str(c, "id", id, sizeof id);
        if (!strcmp(lname(c), "SensorMapping")) {
            for (int k = 0; k < n; k++) {
                if (!id[0] || !id_in_list(calib_ids[k], id)) continue;
                hsi_spe_roi *ro = &s->rois[k];
                int64_t t;
                if (attr_i64(c, "x", 0, 1 << 24, &t) == 1) ro->x = t;
                if (attr_i64(c, "y", 0, 1 << 24, &t) == 1) ro->y = t;
                if (attr_i64(c, "xBinning", 1, 1 << 24, &t) == 1) ro->x_binning = t;
                if (attr_i64(c, "yBinning", 1, 1 << 24, &t) == 1) ro->y_binning = t;
            }
        } else if (!strcmp(lname(c), "WavelengthMapping") && !wl) {
            if (frame_cal[0] && id[0] && !id_in_list(frame_cal, id)) continue;
            xmlNode *w = child(c, "Wavelength");
            int pairs = 0;
            if (!w) {
                w = child(c, "WavelengthError");
                pairs = 1;
            }
            if (!w) continue;
            text = xmlNodeGetContent(w);
            if (!text) continue;
            int64_t bad = 0;
            n_wl = parse_numbers((const char *)text, &wl, pairs, &bad);
            xmlFree(text);
            text = NULL;
            if (n_wl == -1) {
                st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory (wavelengths)");
                goto cleanup;
            }
            if (n_wl < 0)
                XFAIL("%s: XML <%s> list holds something that is not a number", name,
                      pairs ? "WavelengthError" : "Wavelength");
            if (bad) {
                spe_warn(s,
                         "%s: the XML <%s> list's value %lld (of %lld) is %g, not a finite "
                         "wavelength: the calibration is not used (no wavelengths)",
                         name, pairs ? "WavelengthError" : "Wavelength", (long long)bad,
                         (long long)n_wl, wl[bad - 1]);
                free(wl);
                wl = NULL;
                n_wl = 0;
            }
        }
    }
    if (wl)
        for (int k = 0; k < n; k++) roi_wavelengths(s, k, wl, n_wl, name);

    /* per-frame metadata blocks (they sit after each frame, inside the stride) */
    xmlNode *mf = child(root, "MetaFormat");
    size_t fw = 0;
    for (xmlNode *c = mf ? mf->children : NULL; c; c = c->next) {
        if (c->type != XML_ELEMENT_NODE || strcmp(lname(c), "MetaBlock")) continue;
        char ty[48], ev[48], bits[16];
        attr_str(c, "type", ty, sizeof ty);
        if (!attr_str(c, "event", ev, sizeof ev)) attr_str(c, "component", ev, sizeof ev);
        attr_str(c, "bitDepth", bits, sizeof bits);
        int k = snprintf(s->frame_meta + fw, sizeof s->frame_meta - fw, "%s%s%s%s%s%s",
                         fw ? ", " : "", ty[0] ? ty : lname(c), ev[0] ? " " : "", ev,
                         bits[0] ? " " : "", bits);
        if (k < 0 || (size_t)k >= sizeof s->frame_meta - fw) break;
        fw += (size_t)k;
        if (bits[0]) {
            k = snprintf(s->frame_meta + fw, sizeof s->frame_meta - fw, " bit");
            if (k < 0 || (size_t)k >= sizeof s->frame_meta - fw) break;
            fw += (size_t)k;
        }
    }

    /* descriptive fields */
    xmlNode *e = find_deep(root, "ExposureTime", "ShutterTiming", 0);
    if (e && (text = xmlNodeGetContent(e))) {
        char *end = NULL;
        double d = strtod((const char *)text, &end);
        if (end != (const char *)text && isfinite(d)) s->exposure_ms = d;
        xmlFree(text);
        text = NULL;
    }
    e = find_deep(root, "Origin", NULL, 0);
    if (e) {
        char sw[48], ver[40];
        attr_str(e, "software", sw, sizeof sw);
        attr_str(e, "softwareVersion", ver, sizeof ver);
        snprintf(s->software, sizeof s->software, "%s%s%s", sw, ver[0] ? " " : "", ver);
        if (attr_str(e, "created", buf, sizeof buf)) snprintf(s->date, sizeof s->date, "%s", buf);
    }
    for (xmlNode *cam = find_deep(root, "Camera", NULL, 0); cam; cam = NULL)
        attr_str(cam, "model", s->camera, sizeof s->camera);

cleanup:
    free(wl);
    if (text) xmlFree(text);
    if (doc) xmlFreeDoc(doc);
    if (ctx) xmlFreeParserCtxt(ctx);
    return st;
}

/* ------------------------------------------------------------- the header */

int hsi_spe_probe(const void *data, size_t size, char *why, size_t why_len)
{
    const uint8_t *p = data;
    size_t w = 0;
    int ok = 1;
#define WHY(...)                                                               \
    do {                                                                       \
        ok = 0;                                                                \
        if (why && w < why_len) {                                              \
            int k_ = snprintf(why + w, why_len - w, "%s", w ? "; " : "");      \
            if (k_ > 0) w += (size_t)k_;                                       \
            if (w < why_len) {                                                 \
                k_ = snprintf(why + w, why_len - w, __VA_ARGS__);              \
                if (k_ > 0) w += (size_t)k_;                                   \
            }                                                                  \
        }                                                                      \
    } while (0)
    if (why && why_len) why[0] = 0;
    if (size <= HSI_SPE_HEADER_SIZE) {
        WHY("size %zu is not > 4100 bytes (SPE header)", size);
        return 0;
    }
    int code = rd_i16(p, 108);
    hsi_dtype dt = spe_dtype(code);
    if (dt == HSI_DT_INVALID) WHY("datatype @108 = %d is not one of 0,1,2,3,5,6,8", code);
    int64_t x = rd_u16(p, 42), y = rd_u16(p, 656);
    int64_t nf = (int32_t)rd_u32(p, 1446);
    float ver = rd_f32(p, 1992);
    uint64_t foot = rd_u64(p, 678);
    int v3 = ver >= 3.0f && ver < 4.0f && foot != 0;
    if (v3) {
        if (foot < HSI_SPE_HEADER_SIZE)
            WHY("version %.1f, but the XML footer offset @678 = %llu points inside the 4100-byte "
                "header (the footer follows the header and the frames)",
                ver, (unsigned long long)foot);
        else if (foot >= size)
            WHY("version %.1f, but the XML footer offset @678 = %llu is not below the file size "
                "%zu",
                ver, (unsigned long long)foot, size);
        else if (p[foot] != '<')
            WHY("the XML footer offset @678 = %llu does not point at '<'",
                (unsigned long long)foot);
    } else {
        if (x <= 0 || y <= 0) WHY("xdim @42 = %lld and ydim @656 = %lld must be > 0", (long long)x,
                                  (long long)y);
        if (nf <= 0) WHY("NumFrames @1446 = %lld must be > 0", (long long)nf);
        if (ok && dt != HSI_DT_INVALID) {
            int64_t need = 0;
            if (!hsi_mul_ok(x * y * (int64_t)hsi_dtype_size(dt), nf, &need) ||
                (uint64_t)need > size - HSI_SPE_HEADER_SIZE)
                WHY("%lld x %lld x %lld frames of %s need %lld bytes after the header, the file "
                    "has %zu",
                    (long long)x, (long long)y, (long long)nf, hsi_dtype_name(dt),
                    (long long)need, size - HSI_SPE_HEADER_SIZE);
        }
    }
#undef WHY
    return ok;
}

hsi_status hsi_spe_parse(hsi_spe_info *out, const void *data, size_t size, const char *name,
                         int pixel_base)
{
    hsi_status st = HSI_OK;
    const uint8_t *p = data;
    hsi_spe_info_init(out);
    out->pixel_base = pixel_base ? 1 : 0;
    if (!name) name = "(memory)";
    if (!p || size <= HSI_SPE_HEADER_SIZE)
        XFAIL("%s: %zu bytes; an SPE file has a 4100-byte header followed by data", name,
              p ? size : 0);

    out->version = rd_f32(p, 1992);
    out->datatype = rd_i16(p, 108);
    out->dtype = spe_dtype(out->datatype);
    out->xdim = rd_u16(p, 42);
    out->ydim = rd_u16(p, 656);
    out->n_frames = (int32_t)rd_u32(p, 1446);
    float exp_s = rd_f32(p, 10);
    if (isfinite(exp_s) && exp_s > 0) out->exposure_ms = (double)exp_s * 1000.0;
    latin1_to_utf8(out->date, sizeof out->date, p + 20, 10);
    {
        size_t w = 0;
        for (int k = 0; k < 5; k++) {
            char c[81 * 2];
            latin1_to_utf8(c, sizeof c, p + 200 + 80 * k, 80);
            if (!c[0]) continue;
            int n = snprintf(out->comments + w, sizeof out->comments - w, "%s%s", w ? " | " : "", c);
            if (n < 0 || (size_t)n >= sizeof out->comments - w) break;
            w += (size_t)n;
        }
    }
    read_calib(&out->xcal, p, 3000);
    read_calib(&out->ycal, p, 3489);

    uint64_t foot = rd_u64(p, 678);
    int v3 = isfinite(out->version) && out->version >= 3.0 && out->version < 4.0;
    if (v3 && foot != 0) {
        if (foot >= size)
            XFAIL("%s: SPE %.1f XML footer offset @678 = %llu is past the end of the file "
                  "(%zu bytes)",
                  name, out->version, (unsigned long long)foot, size);
        if (foot < HSI_SPE_HEADER_SIZE)
            XFAIL("%s: SPE %.1f XML footer offset @678 = %llu points inside the 4100-byte header "
                  "(the footer follows the header and the frames)",
                  name, out->version, (unsigned long long)foot);
        out->footer_offset = foot;
        out->xml_len = size - (size_t)foot;
        out->xml = malloc(out->xml_len + 1);
        if (!out->xml) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory (%zu-byte XML footer)", out->xml_len);
            goto cleanup;
        }
        memcpy(out->xml, p + foot, out->xml_len);
        out->xml[out->xml_len] = 0;
        HSI_TRY(parse_footer(out, name, (int64_t)foot));
    } else {
        if (out->dtype == HSI_DT_INVALID)
            XFAIL("%s: datatype @108 = %d is not an SPE data type (0 float32, 1 int32, 2 int16, 3 "
                  "uint16, 5 float64, 6 uint8, 8 uint32)",
                  name, out->datatype);
        if (out->xdim <= 0 || out->ydim <= 0)
            XFAIL("%s: xdim @42 = %lld and ydim @656 = %lld must both be > 0", name,
                  (long long)out->xdim, (long long)out->ydim);
        if (out->n_frames <= 0)
            XFAIL("%s: NumFrames @1446 = %lld must be > 0", name, (long long)out->n_frames);
        int64_t elem = (int64_t)hsi_dtype_size(out->dtype);
        int64_t fs = out->xdim * out->ydim * elem, need;
        if (!hsi_mul_ok(fs, out->n_frames, &need) ||
            (uint64_t)need > size - HSI_SPE_HEADER_SIZE) {
            int64_t have = (int64_t)(size - HSI_SPE_HEADER_SIZE);
            XFAIL("%s: %lld frames of %lld x %lld %s need %lld bytes after the 4100-byte header, "
                  "the file has %lld (room for %lld whole frames)",
                  name, (long long)out->n_frames, (long long)out->xdim, (long long)out->ydim,
                  hsi_dtype_name(out->dtype), (long long)need, (long long)have,
                  (long long)(have / fs));
        }
        out->frame_size = out->frame_stride = fs;
        out->n_rois = 1;
        hsi_spe_roi *r = &out->rois[0];
        r->width = out->xdim;
        r->height = out->ydim;
        r->size = fs;
        r->offset = 0;
        r->x = r->y = -1;
        r->x_binning = r->y_binning = 1;
        if (calib_usable(&out->xcal)) {
            r->wavelength = malloc((size_t)out->xdim * sizeof(double));
            if (!r->wavelength) {
                st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
                goto cleanup;
            }
            hsi_spe_calib_eval(&out->xcal, out->xdim, out->pixel_base, r->wavelength);
            for (int64_t i = 0; i < out->xdim; i++)
                if (!isfinite(r->wavelength[i])) {
                    spe_warn(out,
                             "%s: the x calibration @3000 gives %g at pixel %lld (not finite): "
                             "not used (no wavelengths)",
                             name, r->wavelength[i], (long long)i + out->pixel_base);
                    free(r->wavelength);
                    r->wavelength = NULL;
                    break;
                }
        } else if (out->xcal.valid) {
            char why[160];
            calib_problem(&out->xcal, 3000, why, sizeof why);
            spe_warn(out,
                     "%s: the x calibration @3000 is marked valid (@3098) but %s: not used (no "
                     "wavelengths)",
                     name, why);
        }
    }
cleanup:
    if (st != HSI_OK) hsi_spe_info_free(out);
    return st;
}

/* --------------------------------------------------------------- opening */

static hsi_status set_keyf(hsi_meta *m, const char *key, int braced, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static hsi_status set_keyf(hsi_meta *m, const char *key, int braced, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return hsi_meta_set(m, key, buf, braced);
}

/* "a, b, c" of n doubles, malloc'd. */
static char *join_doubles(const double *v, int64_t n)
{
    size_t cap = (size_t)n * 26 + 8, w = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    s[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        int k = snprintf(s + w, cap - w, "%s%.10g", i ? ", " : "", v[i]);
        if (k < 0 || (size_t)k >= cap - w) break;
        w += (size_t)k;
    }
    return s;
}

static hsi_status fill_meta(hsi_meta *m, const hsi_spe_info *s, int roi)
{
    hsi_status st = HSI_OK;
    char *wl = NULL;
    const hsi_spe_roi *r = &s->rois[roi];
    m->n_bands = s->n_frames;
    m->n_lines = r->height;
    m->n_samples = r->width;
    m->dtype = s->dtype;
    m->interleave = HSI_BSQ;
    m->byte_order = 0;
    m->header_offset = HSI_SPE_HEADER_SIZE + r->offset;
    m->format = strdup("spe");
    if (!m->format) return HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
    HSI_TRY(set_keyf(m, "spe version", 0, "%.2f", s->version));
    HSI_TRY(set_keyf(m, "spe datatype", 0, "%d", s->datatype));
    HSI_TRY(set_keyf(m, "frames", 0, "%lld", (long long)s->n_frames));
    HSI_TRY(set_keyf(m, "frame stride", 0, "%lld", (long long)s->frame_stride));
    HSI_TRY(set_keyf(m, "regions of interest", 0, "%d", s->n_rois));
    for (int k = 0; k < s->n_rois; k++) {
        const hsi_spe_roi *q = &s->rois[k];
        char key[48];
        snprintf(key, sizeof key, "roi %d", k);
        if (q->x >= 0)
            HSI_TRY(set_keyf(m, key, 1, "%lld, %lld, x %lld, y %lld, binning %lld, %lld",
                             (long long)q->width, (long long)q->height, (long long)q->x,
                             (long long)q->y, (long long)q->x_binning, (long long)q->y_binning));
        else
            HSI_TRY(set_keyf(m, key, 1, "%lld, %lld", (long long)q->width, (long long)q->height));
    }
    if (isfinite(s->exposure_ms)) HSI_TRY(set_keyf(m, "exposure time ms", 0, "%.10g", s->exposure_ms));
    if (s->date[0]) HSI_TRY(hsi_meta_set(m, "acquisition date", s->date, 0));
    if (s->software[0]) HSI_TRY(hsi_meta_set(m, "software", s->software, 0));
    if (s->camera[0]) HSI_TRY(hsi_meta_set(m, "camera", s->camera, 0));
    if (s->comments[0]) HSI_TRY(hsi_meta_set(m, "comments", s->comments, 1));
    if (s->frame_meta[0]) HSI_TRY(hsi_meta_set(m, "frame metadata", s->frame_meta, 1));
    for (int i = 0; i < s->n_warnings; i++) hsi_meta_warn(m, "%s", s->warnings[i]);
    if (!s->xml && calib_usable(&s->xcal)) {
        char c[256];
        size_t w = 0;
        for (int j = 0; j <= s->xcal.order && j < 6; j++) {
            int k = snprintf(c + w, sizeof c - w, "%s%.10g", j ? ", " : "", s->xcal.coeff[j]);
            if (k < 0 || (size_t)k >= sizeof c - w) break;
            w += (size_t)k;
        }
        HSI_TRY(set_keyf(m, "x calibration", 1, "order %d, pixel base %d, %s", s->xcal.order,
                         s->pixel_base, c));
    }
    if (r->wavelength) {
        /* Wavelengths run along x (samples), not along frames (bands), so they
         * go into a verbatim key rather than meta.wavelength. */
        wl = join_doubles(r->wavelength, r->width);
        if (!wl) {
            st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        HSI_TRY(hsi_meta_set(m, "sample wavelength", wl, 1));
        HSI_TRY(hsi_meta_set(m, "sample wavelength units", "nm", 0));
    }
cleanup:
    free(wl);
    return st;
}

hsi_status hsi_spe_open(hsi_cube *out, const char *path, const hsi_spe_options *options)
{
    hsi_status st = HSI_OK;
    hsi_buffer *buf = NULL;
    hsi_spe_info info;
    hsi_spe_info_init(&info);
    hsi_cube_init(out);
    int roi = options ? options->roi : 0;
    int base = options ? options->pixel_base : 1;

    HSI_TRY(hsi_buffer_map(&buf, path));
    HSI_TRY(hsi_spe_parse(&info, buf->data, buf->size, path, base));
    if (roi < 0 || roi >= info.n_rois) {
        st = HSI_FAIL(HSI_ERR_ARG, "%s: region of interest %d asked for, the file has %d (0..%d)",
                      path, roi, info.n_rois, info.n_rois - 1);
        goto cleanup;
    }
    const hsi_spe_roi *r = &info.rois[roi];
    int64_t elem = (int64_t)hsi_dtype_size(info.dtype);
    int64_t shape[3] = {info.n_frames, r->height, r->width};
    int64_t strides[3] = {info.frame_stride, r->width * elem, elem};
    HSI_TRY(hsi_view_make(&out->view, buf, HSI_SPE_HEADER_SIZE + r->offset, info.dtype, 3, shape,
                          strides, !hsi_host_is_little_endian()));
    HSI_TRY(fill_meta(&out->meta, &info, roi));
    out->data_path = strdup(path);
    if (!out->data_path) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    out->file_size = (int64_t)buf->size;
    out->n_images = info.n_rois;
    out->image_index = roi;
cleanup:
    hsi_buffer_release(buf);
    hsi_spe_info_free(&info);
    if (st != HSI_OK) hsi_cube_free(out);
    return st;
}

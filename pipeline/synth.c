/* synth.c — the synthetic labelled scene behind data_samples/ (see synth.h).
 * Fields are Voronoi cells; each has a class, a vegetation cover and small
 * parameter offsets; pixels get smooth illumination changes, mixing near
 * field borders and Gaussian sensor noise. Deterministic from the seed. */
#include "synth.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void hsi_synth_params_init(hsi_synth_params *p)
{
    memset(p, 0, sizeof *p);
    p->seed = 42;
    p->n_lines = 96;
    p->n_samples = 96;
    p->n_bands = 128;
    p->n_classes = 8;
    p->n_fields = 40;
    p->noise = 0.05;
    p->unlabelled_fraction = 0.15;
}

typedef struct { uint64_t s; } rng_t;

static uint64_t rng_next(rng_t *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_unif(rng_t *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

static double rng_gauss(rng_t *r)
{
    double u1 = rng_unif(r), u2 = rng_unif(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

static double gauss(double x, double mu, double sd)
{
    double t = (x - mu) / sd;
    return exp(-0.5 * t * t);
}

/* class spectral model parameters */
typedef struct {
    int kind; /* 0 soil, 1 vegetation, 2 asphalt */
    double green, red_edge, nir, water, cover, brightness;
} class_model;

static const char *class_names[] = {"Unlabelled",   "Bare soil",       "Dry grass",
                                    "Young maize",  "Mature maize",    "Wheat",
                                    "Lettuce early", "Lettuce late",   "Asphalt",
                                    "Class 9",      "Class 10",        "Class 11",
                                    "Class 12"};
static const uint8_t class_rgb[][3] = {{0, 0, 0},       {160, 110, 60},  {210, 190, 100},
                                       {120, 200, 80},  {30, 120, 40},   {230, 210, 40},
                                       {140, 230, 170}, {20, 160, 140},  {90, 90, 100},
                                       {200, 60, 60},   {60, 60, 200},   {200, 60, 200},
                                       {60, 200, 200}};
static const class_model models[] = {
    {0, 0, 0, 0, 0, 0, 0},
    {0, 0, 0, 0, 0.0, 0.0, 1.00},       /* bare soil */
    {1, 0.30, 705, 0.32, 0.10, 0.60, 1.05}, /* dry grass */
    {1, 1.00, 716, 0.44, 0.55, 0.60, 1.0},  /* young maize */
    {1, 1.00, 721, 0.48, 0.60, 0.78, 1.0},  /* mature maize */
    {1, 0.95, 714, 0.45, 0.50, 0.65, 1.0},  /* wheat */
    {1, 1.05, 717, 0.43, 0.60, 0.58, 1.0},  /* lettuce early */
    {1, 1.05, 720, 0.47, 0.65, 0.75, 1.0},  /* lettuce late */
    {2, 0, 0, 0, 0, 0, 1.0},            /* asphalt */
};
#define N_MODELS ((int)(sizeof models / sizeof *models) - 1)

static double soil(double l, double b)
{
    double r = 0.10 + 0.20 * (l - 400) / 2100 - 0.03 * gauss(l, 2200, 60) -
               0.02 * gauss(l, 1450, 60) - 0.03 * gauss(l, 1940, 70);
    return b * r;
}

static double veg(double l, const class_model *m, double dre, double dnir)
{
    double re = m->red_edge + dre, nir = m->nir + dnir;
    double r = 0.04 + 0.06 * m->green * gauss(l, 550, 35) - 0.02 * gauss(l, 670, 25);
    r += (nir - 0.05) / (1 + exp(-(l - re) / 15));
    if (l > 1300) r *= 1 - 0.35 * (l - 1300) / 1200;
    r *= 1 - m->water * (0.5 * gauss(l, 1450, 60) + 0.7 * gauss(l, 1940, 70) +
                         0.2 * gauss(l, 980, 40) + 0.25 * gauss(l, 1200, 50));
    return r;
}

/* reflectance of class c at wavelength l with per-field offsets */
static double reflectance(int c, double l, double cover, double dre, double dnir, double soil_b)
{
    const class_model *m = &models[c];
    if (m->kind == 0) return soil(l, m->brightness * soil_b);
    if (m->kind == 2) return 0.07 + 0.03 * (l - 400) / 2100;
    return cover * veg(l, m, dre, dnir) + (1 - cover) * soil(l, soil_b);
}

typedef struct {
    double y, x;
    int cls, labelled;
    double cover, dre, dnir, soil_b;
} field_t;

hsi_status hsi_synth_scene(hsi_view *cube, hsi_view *labels, hsi_meta *cm, hsi_meta *lm,
                           const hsi_synth_params *p)
{
    hsi_status st = HSI_OK;
    field_t *f = NULL;
    double *wl = NULL, *illum = NULL;
    hsi_buffer *cb = NULL;
    memset(cube, 0, sizeof *cube);
    memset(labels, 0, sizeof *labels);
    hsi_meta_init(cm);
    hsi_meta_init(lm);
    const int L = p->n_lines, S = p->n_samples, B = p->n_bands, K = p->n_classes;
    if (L < 8 || S < 8 || L > 8192 || S > 8192)
        return HSI_FAIL(HSI_ERR_ARG, "synth: lines and samples must be in 8..8192 (got %d x %d)",
                        L, S);
    if (B < 4 || B > 1024) return HSI_FAIL(HSI_ERR_ARG, "synth: bands must be in 4..1024 (got %d)", B);
    if (K < 2 || K > N_MODELS)
        return HSI_FAIL(HSI_ERR_ARG, "synth: classes must be in 2..%d (got %d)", N_MODELS, K);
    int nf = p->n_fields < 2 * K ? 2 * K : p->n_fields;
    rng_t r = {p->seed * 0x2545F4914F6CDD1Dull + 1};

    f = calloc((size_t)nf, sizeof *f);
    wl = malloc((size_t)B * sizeof *wl);
    illum = malloc((size_t)L * S * sizeof *illum);
    if (!f || !wl || !illum) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "synth: out of memory");
        goto cleanup;
    }
    for (int b = 0; b < B; b++) wl[b] = 400.0 + 2100.0 * b / (B - 1);
    for (int i = 0; i < nf; i++) {
        f[i].y = rng_unif(&r) * L;
        f[i].x = rng_unif(&r) * S;
        f[i].cls = i < 2 * K ? i % K + 1 : 1 + (int)(rng_unif(&r) * K);
        f[i].labelled = i < 2 * K || rng_unif(&r) >= p->unlabelled_fraction;
        double c0 = models[f[i].cls].cover;
        f[i].cover = fmin(0.98, fmax(0.05, c0 + 0.15 * rng_gauss(&r)));
        f[i].dre = 5.0 * rng_gauss(&r);
        f[i].dnir = 0.04 * rng_gauss(&r);
        f[i].soil_b = 1.0 + 0.15 * rng_gauss(&r);
    }
    /* smooth illumination: a few random plane waves */
    double amp[4], ky[4], kx[4], ph[4];
    for (int k = 0; k < 4; k++) {
        amp[k] = 0.04 * rng_unif(&r);
        ky[k] = 2 * M_PI * rng_gauss(&r) / L * 1.5;
        kx[k] = 2 * M_PI * rng_gauss(&r) / S * 1.5;
        ph[k] = 2 * M_PI * rng_unif(&r);
    }
    for (int y = 0; y < L; y++)
        for (int x = 0; x < S; x++) {
            double v = 1.0;
            for (int k = 0; k < 4; k++) v += amp[k] * sin(ky[k] * y + kx[k] * x + ph[k]);
            illum[y * S + x] = v;
        }

    int64_t shape[3] = {B, L, S}, strides[3];
    hsi_interleave_strides(HSI_BIL, B, L, S, 2, strides);
    HSI_TRY(hsi_buffer_alloc(&cb, (size_t)B * L * S * 2, HSI_BUF_HOST));
    HSI_TRY(hsi_view_make(cube, cb, 0, HSI_U16, 3, shape, strides, 0));
    int64_t lshape[2] = {L, S};
    HSI_TRY(hsi_view_alloc(labels, HSI_U8, 2, lshape, HSI_BUF_HOST));
    uint16_t *dn = cb->data;
    uint8_t *lab = labels->buf->data;
    for (int y = 0; y < L; y++)
        for (int x = 0; x < S; x++) {
            int i1 = 0, i2 = 1;
            double d1 = 1e30, d2 = 1e30;
            for (int i = 0; i < nf; i++) {
                double d = hypot(y + 0.5 - f[i].y, x + 0.5 - f[i].x);
                if (d < d1) {
                    d2 = d1;
                    i2 = i1;
                    d1 = d;
                    i1 = i;
                } else if (d < d2) {
                    d2 = d;
                    i2 = i;
                }
            }
            /* distance to the border between the two nearest seeds */
            double gap = (d2 * d2 - d1 * d1) /
                         (2 * hypot(f[i1].y - f[i2].y, f[i1].x - f[i2].x) + 1e-9);
            double mix = gap < 1.5 ? 0.5 * (1 - gap / 1.5) : 0;
            double pix_cover = 0.15 * rng_gauss(&r);
            const field_t *a = &f[i1], *o = &f[i2];
            for (int b = 0; b < B; b++) {
                double ra = reflectance(a->cls, wl[b], fmin(0.99, fmax(0, a->cover + pix_cover)),
                                        a->dre, a->dnir, a->soil_b);
                double v = ra;
                if (mix > 0)
                    v = (1 - mix) * ra +
                        mix * reflectance(o->cls, wl[b], o->cover, o->dre, o->dnir, o->soil_b);
                v *= illum[y * S + x];
                v += p->noise * (0.5 * v + 0.02) * rng_gauss(&r);
                double d = 100 + 10000 * v;
                dn[(int64_t)y * B * S + (int64_t)b * S + x] =
                    (uint16_t)(d < 0 ? 0 : d > 65535 ? 65535 : lrint(d));
            }
            lab[y * S + x] = (a->labelled && gap >= 1.0) ? (uint8_t)a->cls : 0;
        }

    /* cube metadata */
    cm->n_bands = B;
    cm->n_lines = L;
    cm->n_samples = S;
    cm->dtype = HSI_U16;
    cm->interleave = HSI_BIL;
    cm->format = strdup("synth");
    cm->wavelength = malloc((size_t)B * sizeof(double));
    cm->fwhm = malloc((size_t)B * sizeof(double));
    cm->wavelength_units = strdup("Nanometers");
    if (!cm->wavelength || !cm->fwhm || !cm->wavelength_units || !cm->format) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "synth: out of memory");
        goto cleanup;
    }
    cm->wavelength_nm = 1;
    for (int b = 0; b < B; b++) {
        cm->wavelength[b] = wl[b];
        cm->fwhm[b] = 1.1 * 2100.0 / (B - 1);
    }
    char desc[256];
    snprintf(desc, sizeof desc,
             "hsi synthetic scene: seed %llu, %d classes, %d fields, noise %.3f; DN = 100 + "
             "10000 * reflectance",
             (unsigned long long)p->seed, K, nf, p->noise);
    cm->description = strdup(desc);
    cm->n_default_bands = 3;
    /* nearest bands to 640, 550, 460 nm */
    const double rgb[3] = {640, 550, 460};
    for (int c = 0; c < 3; c++) {
        int best = 0;
        for (int b = 1; b < B; b++)
            if (fabs(wl[b] - rgb[c]) < fabs(wl[best] - rgb[c])) best = b;
        cm->default_bands[c] = best;
    }
    /* label metadata: an ENVI classification file */
    lm->n_bands = 1;
    lm->n_lines = L;
    lm->n_samples = S;
    lm->dtype = HSI_U8;
    lm->interleave = HSI_BSQ;
    lm->file_kind = HSI_FILE_CLASSIFICATION;
    lm->file_type = strdup("ENVI Classification");
    lm->format = strdup("synth");
    lm->n_classes = K + 1;
    lm->class_names = calloc((size_t)K + 1, sizeof(char *));
    lm->class_lookup = malloc((size_t)(K + 1) * 3);
    lm->description = strdup("hsi synthetic scene ground truth (0 = unlabelled)");
    if (!lm->class_names || !lm->class_lookup || !lm->file_type || !lm->format) {
        st = HSI_FAIL(HSI_ERR_NOMEM, "synth: out of memory");
        goto cleanup;
    }
    for (int c = 0; c <= K; c++) {
        lm->class_names[c] = strdup(class_names[c]);
        memcpy(lm->class_lookup + 3 * c, class_rgb[c], 3);
    }

cleanup:
    if (st != HSI_OK) {
        hsi_view_release(cube);
        hsi_view_release(labels);
        hsi_meta_free(cm);
        hsi_meta_free(lm);
    }
    hsi_buffer_release(cb);
    free(f);
    free(wl);
    free(illum);
    return st;
}

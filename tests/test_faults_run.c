/* test_faults_run.c — run directories corrupted one way at a time, as the
 * fault campaign of issue 17 did: safetensors that break the format
 * (overlap, fractional offsets, a hole, trailing bytes), NaN weights,
 * train_state with a missing optimiser tensor, an epoch that is a word, a
 * config that is not JSON, pipeline.json with a path out of the directory,
 * wrong types and inconsistent counts. Each must fail through hsi_run_load,
 * hsi_train_load / --resume or `hsi eval` with a message naming the file and
 * the key; the untouched run must still load, evaluate and resume. One small
 * run is trained once and copied per case. Not the writers' atomicity
 * (test_faults_write.c). */
#include <cJSON.h>
#include <stdint.h>
#include <unistd.h>

#include "models/checkpoint.h"
#include "models/optim.h"
#include "pipeline/preprocess.h"
#include "pipeline/run.h"
#include "test.h"

#define CUBE "data_samples/scene.hdr"
#define GT   "data_samples/scene_gt.hdr"
#define OPTS "--epochs 1 --train 0.03 --seed 3 --quiet"

static char out[1 << 16];

/* The run every case copies (trained once, on first use). */
static const char *base_run(void)
{
    static char dir[4096];
    static int made = -1;
    if (made < 0) {
        snprintf(dir, sizeof dir, "%s", hsi_test_tmp("faults_run_base"));
        made = hsi_test_run(out, sizeof out, HSI_BIN " train " CUBE " " GT " --out %s " OPTS,
                            dir) == 0;
        if (!made) fprintf(stderr, "\n  training the base run failed:\n%s\n", out);
    }
    return made ? dir : NULL;
}

/* A fresh copy of the base run in dst (a buffer of 4096). */
static int copy_run(char *dst, const char *name)
{
    const char *b = base_run();
    if (!b) return 0;
    snprintf(dst, 4096, "%s", hsi_test_tmp(name));
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dst, b, dst);
    return system(cmd) == 0;
}

#define COPY(dir, name) CU_ASSERT_FATAL(copy_run(dir, name))

static const char *join(const char *dir, const char *name)
{
    static char buf[4][4096];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* ------------------------------------------------------ safetensors edits */

typedef struct st_edit {
    cJSON *hdr;
    uint8_t *data; /* the data area */
    size_t n;
} st_edit;

static int st_load(st_edit *e, const char *path)
{
    char *raw = NULL;
    size_t len = 0;
    memset(e, 0, sizeof *e);
    if (hsi_read_file(path, &raw, &len) != HSI_OK || len < 8) return 0;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = (hl << 8) | (uint8_t)raw[i];
    e->hdr = cJSON_ParseWithLength(raw + 8, (size_t)hl);
    e->n = len - 8 - (size_t)hl;
    e->data = malloc(e->n + 1);
    memcpy(e->data, raw + 8 + hl, e->n);
    free(raw);
    return e->hdr != NULL;
}

/* Writes header (padded to 8 with spaces) + data + extra bytes. */
static int st_save(const st_edit *e, const char *path, const void *extra, size_t n_extra)
{
    char *h = cJSON_PrintUnformatted(e->hdr);
    size_t hl = strlen(h), padded = (hl + 7) & ~(size_t)7;
    FILE *fp = fopen(path, "wb");
    if (!fp) return 0;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    fwrite(len8, 1, 8, fp);
    fwrite(h, 1, hl, fp);
    for (size_t i = hl; i < padded; i++)
        fputc(' ', fp);
    fwrite(e->data, 1, e->n, fp);
    if (n_extra) fwrite(extra, 1, n_extra, fp);
    free(h);
    return fclose(fp) == 0;
}

static void st_free(st_edit *e)
{
    cJSON_Delete(e->hdr);
    free(e->data);
}

static cJSON *st_tensor(st_edit *e, const char *name)
{
    return cJSON_GetObjectItemCaseSensitive(e->hdr, name);
}

static double st_off(cJSON *t, int k)
{
    return cJSON_GetArrayItem(cJSON_GetObjectItem(t, "data_offsets"), k)->valuedouble;
}

static void st_set_off(cJSON *t, double b0, double b1)
{
    cJSON *of = cJSON_GetObjectItem(t, "data_offsets");
    cJSON_ReplaceItemInArray(of, 0, cJSON_CreateNumber(b0));
    cJSON_ReplaceItemInArray(of, 1, cJSON_CreateNumber(b1));
}

/* Drops a tensor: its entry and its bytes (the rest stays a valid file). */
static void st_drop(st_edit *e, const char *name)
{
    cJSON *t = st_tensor(e, name);
    size_t b0 = (size_t)st_off(t, 0), b1 = (size_t)st_off(t, 1);
    memmove(e->data + b0, e->data + b1, e->n - b1);
    e->n -= b1 - b0;
    for (cJSON *it = e->hdr->child; it; it = it->next) {
        if (!strcmp(it->string, "__metadata__") || it == t) continue;
        double a = st_off(it, 0), b = st_off(it, 1);
        if (a >= (double)b1) st_set_off(it, a - (double)(b1 - b0), b - (double)(b1 - b0));
    }
    cJSON_DeleteItemFromObjectCaseSensitive(e->hdr, name);
}

static void st_set_meta(st_edit *e, const char *key, const char *value)
{
    cJSON *m = cJSON_GetObjectItemCaseSensitive(e->hdr, "__metadata__");
    cJSON_DeleteItemFromObjectCaseSensitive(m, key);
    if (value) cJSON_AddStringToObject(m, key, value);
}

/* The float32 element i of a tensor set to v. */
static void st_poke_f32(st_edit *e, const char *name, int64_t i, float v)
{
    cJSON *t = st_tensor(e, name);
    memcpy(e->data + (size_t)st_off(t, 0) + 4 * (size_t)i, &v, 4);
}

/* The tensor of the largest begin offset (the last in the data area). */
static cJSON *st_last(st_edit *e)
{
    cJSON *best = NULL;
    for (cJSON *it = e->hdr->child; it; it = it->next)
        if (strcmp(it->string, "__metadata__") && (!best || st_off(it, 0) > st_off(best, 0)))
            best = it;
    return best;
}

/* ---------------------------------------------------------- JSON edits */

static void json_save(const char *path, cJSON *j)
{
    char *t = cJSON_Print(j);
    FILE *fp = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    fputs(t, fp);
    fclose(fp);
    free(t);
    cJSON_Delete(j);
}

/* pipeline.json of dir with key set to v (NULL: removed). */
static void pipeline_set(const char *dir, const char *key, cJSON *v)
{
    const char *p = join(dir, "pipeline.json");
    cJSON *j = hsi_test_load_json(p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    cJSON_DeleteItemFromObjectCaseSensitive(j, key);
    if (v) cJSON_AddItemToObject(j, key, v);
    json_save(p, j);
}

/* ----------------------------------------------------------- checks */

static void has_all(int line, const char *msg, const char *const *needles)
{
    for (int i = 0; needles[i]; i++)
        if (!strstr(msg, needles[i])) {
            fprintf(stderr, "\n  test_faults_run.c:%d: message '%s' lacks '%s'\n", line, msg,
                    needles[i]);
            CU_FAIL("error message lacks the expected words");
        }
}

/* hsi_run_load(dir) fails with HSI_ERR_FORMAT and every needle. */
static void load_fails(int line, const char *dir, const char *const *needles)
{
    hsi_run r;
    hsi_status st = hsi_run_load(&r, dir);
    if (st == HSI_OK) {
        fprintf(stderr, "\n  test_faults_run.c:%d: %s loaded\n", line, dir);
        hsi_run_free(&r);
        CU_FAIL("a corrupted run directory loaded");
        return;
    }
    CU_ASSERT_EQUAL(st, HSI_ERR_FORMAT);
    if (st != HSI_ERR_FORMAT)
        fprintf(stderr, "\n  test_faults_run.c:%d: %s: %s\n", line, hsi_status_name(st),
                hsi_last_error());
    has_all(line, hsi_last_error(), needles);
}
#define LOAD_FAILS(dir, ...) load_fails(__LINE__, dir, (const char *const[]){__VA_ARGS__, NULL})

/* `hsi eval dir CUBE GT` exits 1 with every needle in its output. */
static void eval_fails(int line, const char *dir, const char *const *needles)
{
    int rc = hsi_test_run(out, sizeof out, HSI_BIN " eval %s " CUBE " " GT, dir);
    CU_ASSERT_EQUAL(rc, 1);
    if (rc != 1) fprintf(stderr, "\n  test_faults_run.c:%d: eval gave %d:\n%s\n", line, rc, out);
    has_all(line, out, needles);
}
#define EVAL_FAILS(dir, ...) eval_fails(__LINE__, dir, (const char *const[]){__VA_ARGS__, NULL})

/* `hsi train ... --resume --epochs 2` exits 1 with every needle. */
static void resume_fails(int line, const char *dir, const char *const *needles)
{
    int rc =
        hsi_test_run(out, sizeof out,
                     HSI_BIN " train " CUBE " " GT " --out %s --epochs 2 --train 0.03 --seed 3 "
                             "--quiet --resume",
                     dir);
    CU_ASSERT_EQUAL(rc, 1);
    if (rc != 1) fprintf(stderr, "\n  test_faults_run.c:%d: resume gave %d:\n%s\n", line, rc, out);
    has_all(line, out, needles);
}
#define RESUME_FAILS(dir, ...) resume_fails(__LINE__, dir, (const char *const[]){__VA_ARGS__, NULL})

/* The model and optimiser the base run trains (cnn2d, 30 PCA features,
 * patch 11, 8 classes, AdamW), for hsi_train_load in process. */
typedef struct rig {
    hsi_module *net;
    hsi_optim *opt;
    hsi_sched sc;
} rig;

static void rig_make(rig *r)
{
    HSI_CHECK_OK(hsi_model_create(&r->net, "cnn2d", 30, 11, 8, HSI_F32, 0));
    hsi_optim_config oc;
    hsi_optim_config_default(&oc, HSI_OPT_ADAMW);
    HSI_CHECK_OK(hsi_optim_new(&r->opt, &oc, r->net));
    hsi_sched_init(&r->sc, HSI_SCHED_COSINE, 1e-3);
}

static void rig_free(rig *r)
{
    hsi_optim_free(r->opt);
    hsi_module_free(r->net);
}

static void state_fails(int line, const char *path, const char *const *needles)
{
    rig r;
    rig_make(&r);
    int ep = -7;
    char *cfg = NULL;
    hsi_status st = hsi_train_load(path, r.net, r.opt, &r.sc, &ep, &cfg);
    CU_ASSERT_EQUAL(st, HSI_ERR_FORMAT);
    if (st != HSI_ERR_FORMAT)
        fprintf(stderr, "\n  test_faults_run.c:%d: hsi_train_load gave %s (%s)\n", line,
                hsi_status_name(st), hsi_last_error());
    else
        has_all(line, hsi_last_error(), needles);
    CU_ASSERT_EQUAL(ep, -7); /* nothing handed back */
    CU_ASSERT_EQUAL(r.opt->step, 0);
    free(cfg);
    rig_free(&r);
}
#define STATE_FAILS(path, ...) state_fails(__LINE__, path, (const char *const[]){__VA_ARGS__, NULL})

/* ------------------------------------------------------------- cases */

/* The run as written loads, evaluates and resumes under the strict checks. */
static void test_pristine_run_valid(void)
{
    char dir[4096];
    COPY(dir, "fr_pristine");
    hsi_run r;
    HSI_CHECK_OK(hsi_run_load(&r, dir));
    CU_ASSERT_EQUAL(r.n_features, 30);
    CU_ASSERT_EQUAL(r.n_classes, 8);
    hsi_run_free(&r);
    rig g;
    rig_make(&g);
    int ep = 0;
    char *cfg = NULL;
    HSI_CHECK_OK(
        hsi_train_load(join(dir, "train_state.safetensors"), g.net, g.opt, &g.sc, &ep, &cfg));
    CU_ASSERT_EQUAL(ep, 1);
    CU_ASSERT(g.opt->step > 0);
    CU_ASSERT_PTR_NOT_NULL(g.opt->state1[0]);
    CU_ASSERT_PTR_NOT_NULL(g.opt->state2[g.opt->n - 1]);
    free(cfg);
    rig_free(&g);
    hsi_prep p;
    HSI_CHECK_OK(hsi_prep_load(&p, join(dir, "preprocessing.safetensors")));
    CU_ASSERT_EQUAL(hsi_prep_n_out(&p), 30);
    hsi_prep_free(&p);
    int rc = hsi_test_run(out, sizeof out, HSI_BIN " eval %s " CUBE " " GT, dir);
    if (rc) fprintf(stderr, "%s\n", out);
    CU_ASSERT_EQUAL(rc, 0);
    rc = hsi_test_run(out, sizeof out,
                      HSI_BIN " train " CUBE " " GT
                              " --out %s --epochs 2 --train 0.03 --seed 3 --quiet --resume",
                      dir);
    if (rc) fprintf(stderr, "%s\n", out);
    CU_ASSERT_EQUAL(rc, 0);
}

/* safetensors layout: overlap, fractional offsets, a hole, trailing bytes. */
static void test_safetensors_layout(void)
{
    char dir[4096];
    st_edit e;
    COPY(dir, "fr_st");
    const char *mp = join(dir, "model.safetensors");
    /* overlap: a tensor moved 4 bytes back into its predecessor */
    CU_ASSERT_FATAL(st_load(&e, mp));
    cJSON *t = st_tensor(&e, "features.3.weight");
    st_set_off(t, st_off(t, 0) - 4, st_off(t, 1) - 4);
    CU_ASSERT_FATAL(st_save(&e, mp, NULL, 0));
    st_free(&e);
    LOAD_FAILS(dir, "model.safetensors", "'features.3.weight'", "overlaps");
    EVAL_FAILS(dir, "model.safetensors", "'features.3.weight'", "overlaps");
    /* fractional offsets, same span */
    COPY(dir, "fr_st");
    CU_ASSERT_FATAL(st_load(&e, mp));
    t = st_tensor(&e, "classifier.bias");
    st_set_off(t, st_off(t, 0) + 0.5, st_off(t, 1) + 0.5);
    CU_ASSERT_FATAL(st_save(&e, mp, NULL, 0));
    st_free(&e);
    LOAD_FAILS(dir, "model.safetensors", "'classifier.bias'", "integers", ".5");
    /* trailing bytes after the last tensor */
    COPY(dir, "fr_st");
    CU_ASSERT_FATAL(st_load(&e, mp));
    CU_ASSERT_FATAL(st_save(&e, mp, "0123456789abcdef", 16));
    st_free(&e);
    LOAD_FAILS(dir, "model.safetensors", "16 bytes after the last tensor");
    /* a hole: the last tensor moved 8 bytes on, the file 8 bytes longer */
    COPY(dir, "fr_st");
    CU_ASSERT_FATAL(st_load(&e, mp));
    t = st_last(&e);
    char last[128];
    snprintf(last, sizeof last, "'%s'", t->string);
    st_set_off(t, st_off(t, 0) + 8, st_off(t, 1) + 8);
    CU_ASSERT_FATAL(st_save(&e, mp, "\0\0\0\0\0\0\0\0", 8));
    st_free(&e);
    LOAD_FAILS(dir, "model.safetensors", "belong to no tensor", last);
    /* the same rules in train_state and the preprocessing file */
    COPY(dir, "fr_st");
    const char *sp = join(dir, "train_state.safetensors");
    CU_ASSERT_FATAL(st_load(&e, sp));
    CU_ASSERT_FATAL(st_save(&e, sp, "x", 1));
    st_free(&e);
    STATE_FAILS(sp, "train_state.safetensors", "1 byte after the last tensor");
    const char *pp = join(dir, "preprocessing.safetensors");
    CU_ASSERT_FATAL(st_load(&e, pp));
    cJSON *sc = st_tensor(&e, "scale");
    st_set_off(st_tensor(&e, "center"), st_off(sc, 0), st_off(sc, 1)); /* center aliases scale */
    CU_ASSERT_FATAL(st_save(&e, pp, NULL, 0));
    st_free(&e);
    LOAD_FAILS(dir, "preprocessing.safetensors", "overlaps", "'preprocessing_file'");
}

/* NaN and infinite weights are refused, naming the tensor, in the model
 * (load, eval) and in train_state (resume: not "training diverged"). */
static void test_nonfinite_weights(void)
{
    char dir[4096];
    st_edit e;
    COPY(dir, "fr_nan");
    const char *mp = join(dir, "model.safetensors");
    CU_ASSERT_FATAL(st_load(&e, mp));
    st_poke_f32(&e, "features.0.weight", 3, NAN);
    CU_ASSERT_FATAL(st_save(&e, mp, NULL, 0));
    st_free(&e);
    LOAD_FAILS(dir, "model.safetensors", "'features.0.weight'", "NaN at element 3");
    EVAL_FAILS(dir, "model.safetensors", "'features.0.weight'", "NaN");
    int rc = hsi_test_run(out, sizeof out, HSI_BIN " predict %s " CUBE " %s --quiet", dir,
                          hsi_test_tmp("fr_nan_map.hdr"));
    CU_ASSERT_EQUAL(rc, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "'features.0.weight'"));
    /* an infinity in a batch-norm statistic */
    COPY(dir, "fr_nan");
    CU_ASSERT_FATAL(st_load(&e, mp));
    st_poke_f32(&e, "features.4.running_var", 0, -INFINITY);
    CU_ASSERT_FATAL(st_save(&e, mp, NULL, 0));
    st_free(&e);
    LOAD_FAILS(dir, "model.safetensors", "'features.4.running_var'", "-inf");
    /* train_state: a weight and an optimiser moment */
    COPY(dir, "fr_nan");
    const char *sp = join(dir, "train_state.safetensors");
    CU_ASSERT_FATAL(st_load(&e, sp));
    st_poke_f32(&e, "features.3.weight", 5, NAN);
    CU_ASSERT_FATAL(st_save(&e, sp, NULL, 0));
    st_free(&e);
    STATE_FAILS(sp, "train_state.safetensors", "'features.3.weight'", "NaN");
    RESUME_FAILS(dir, "train_state.safetensors", "'features.3.weight'", "NaN");
    CU_ASSERT_PTR_NULL(strstr(out, "training diverged"));
    COPY(dir, "fr_nan");
    CU_ASSERT_FATAL(st_load(&e, sp));
    st_poke_f32(&e, "optimizer.exp_avg_sq.classifier.weight", 0, INFINITY);
    CU_ASSERT_FATAL(st_save(&e, sp, NULL, 0));
    st_free(&e);
    STATE_FAILS(sp, "train_state.safetensors", "'optimizer.exp_avg_sq.classifier.weight'", "+inf");
}

/* train_state: every tensor and metadata value as hsi writes them. */
static void test_train_state_strict(void)
{
    char dir[4096];
    st_edit e;
    COPY(dir, "fr_state");
    const char *sp = join(dir, "train_state.safetensors");
    /* a missing optimiser tensor (the file otherwise valid) */
    CU_ASSERT_FATAL(st_load(&e, sp));
    st_drop(&e, "optimizer.exp_avg.features.0.weight");
    CU_ASSERT_FATAL(st_save(&e, sp, NULL, 0));
    st_free(&e);
    STATE_FAILS(sp, "train_state.safetensors", "'optimizer.exp_avg.features.0.weight' is missing");
    RESUME_FAILS(dir, "train_state.safetensors",
                 "'optimizer.exp_avg.features.0.weight' is missing");
    /* an optimiser tensor under a name no parameter has */
    COPY(dir, "fr_state");
    CU_ASSERT_FATAL(st_load(&e, sp));
    cJSON *t = cJSON_DetachItemFromObjectCaseSensitive(e.hdr, "optimizer.exp_avg.classifier.bias");
    cJSON_AddItemToObject(e.hdr, "optimizer.exp_avg.classifier.bogus", t);
    CU_ASSERT_FATAL(st_save(&e, sp, NULL, 0));
    st_free(&e);
    STATE_FAILS(sp, "train_state.safetensors", "'optimizer.exp_avg.classifier.bias' is missing");
    /* a missing model tensor */
    COPY(dir, "fr_state");
    CU_ASSERT_FATAL(st_load(&e, sp));
    st_drop(&e, "features.8.running_mean");
    CU_ASSERT_FATAL(st_save(&e, sp, NULL, 0));
    st_free(&e);
    STATE_FAILS(sp, "train_state.safetensors", "missing: features.8.running_mean");
    /* epoch as a word, as a negative number */
    static const char *const bad_epochs[] = {"one", "-1", "1.5", " 1", ""};
    for (size_t i = 0; i < sizeof bad_epochs / sizeof *bad_epochs; i++) {
        COPY(dir, "fr_state");
        CU_ASSERT_FATAL(st_load(&e, sp));
        st_set_meta(&e, "epoch", bad_epochs[i]);
        CU_ASSERT_FATAL(st_save(&e, sp, NULL, 0));
        st_free(&e);
        char found[64];
        snprintf(found, sizeof found, "found '%s'", bad_epochs[i]);
        STATE_FAILS(sp, "train_state.safetensors", "'epoch' must be an integer", found);
    }
    RESUME_FAILS(dir, "train_state.safetensors", "'epoch' must be an integer");
    CU_ASSERT_PTR_NULL(strstr(out, "first_epoch"));
    /* config: not JSON, not an object, and typed members */
    static const char *const bad_configs[][2] = {
        {"not json {", "'config' must be a JSON object"},
        {"[1, 2]", "'config' must be a JSON object"},
    };
    for (size_t i = 0; i < sizeof bad_configs / sizeof *bad_configs; i++) {
        COPY(dir, "fr_state");
        CU_ASSERT_FATAL(st_load(&e, sp));
        st_set_meta(&e, "config", bad_configs[i][0]);
        CU_ASSERT_FATAL(st_save(&e, sp, NULL, 0));
        st_free(&e);
        STATE_FAILS(sp, "train_state.safetensors", bad_configs[i][1]);
    }
    RESUME_FAILS(dir, "train_state.safetensors", "'config' must be a JSON object");
    /* the trainer's fields inside config */
    COPY(dir, "fr_state");
    CU_ASSERT_FATAL(st_load(&e, sp));
    cJSON *m = cJSON_GetObjectItem(e.hdr, "__metadata__");
    cJSON *cfg = cJSON_Parse(cJSON_GetObjectItem(m, "config")->valuestring);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    cJSON *opts = cJSON_GetObjectItem(cfg, "config");
    cJSON_ReplaceItemInObject(opts, "patch", cJSON_CreateString("11"));
    char *cs = cJSON_PrintUnformatted(cfg);
    st_set_meta(&e, "config", cs);
    free(cs);
    CU_ASSERT_FATAL(st_save(&e, sp, NULL, 0));
    RESUME_FAILS(dir, "train_state.safetensors", "'config.config.patch' must be a finite number",
                 "a string");
    cJSON_ReplaceItemInObject(opts, "patch", cJSON_CreateNumber(11));
    cJSON_ReplaceItemInObject(cfg, "best_val", cJSON_CreateString("high"));
    cs = cJSON_PrintUnformatted(cfg);
    st_set_meta(&e, "config", cs);
    free(cs);
    CU_ASSERT_FATAL(st_save(&e, sp, NULL, 0));
    st_free(&e);
    cJSON_Delete(cfg);
    RESUME_FAILS(dir, "train_state.safetensors", "'config.best_val' must be a finite number");
    /* the generator's state and the schedule */
    static const char *const bad_meta[][3] = {
        {"rng", "d6681df5c34852ce", "'rng' must be 64 hexadecimal digits"},
        {"schedule", "2 0x1p-10 1", "'schedule' must be 'none' or 15 fields"},
        {"optimizer_step", "twelve", "'optimizer_step' must be an integer"},
        {"optimizer", "2 nan 0 0 0 0 0.9 0.999 1e-8", "'optimizer' must be"},
        {"format", "hsi-train-checkpoint-9", "not an hsi training checkpoint"},
    };
    for (size_t i = 0; i < sizeof bad_meta / sizeof *bad_meta; i++) {
        COPY(dir, "fr_state");
        CU_ASSERT_FATAL(st_load(&e, sp));
        st_set_meta(&e, bad_meta[i][0], bad_meta[i][1]);
        CU_ASSERT_FATAL(st_save(&e, sp, NULL, 0));
        st_free(&e);
        STATE_FAILS(sp, "train_state.safetensors", bad_meta[i][2]);
    }
}

/* pipeline.json: every file name stays inside the run directory. */
static void test_pipeline_paths_confined(void)
{
    char dir[4096];
    static const char *const keys[] = {"model_file", "preprocessing_file", "split_file"};
    static const char *const values[] = {"../../../../../../etc/passwd", "/etc/passwd", "..",
                                         "sub/model.safetensors", ""};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
        for (size_t v = 0; v < sizeof values / sizeof *values; v++) {
            COPY(dir, "fr_paths");
            pipeline_set(dir, keys[k], cJSON_CreateString(values[v]));
            char key[64], val[128];
            snprintf(key, sizeof key, "'%s'", keys[k]);
            snprintf(val, sizeof val, "'%s'", values[v]);
            LOAD_FAILS(dir, "pipeline.json", key, val, "inside the run directory");
        }
    EVAL_FAILS(dir, "pipeline.json", "'split_file'", "inside the run directory");
    COPY(dir, "fr_paths");
    pipeline_set(dir, "model_file", cJSON_CreateString("../../../../../../etc/passwd"));
    EVAL_FAILS(dir, "pipeline.json", "'model_file'", "'../../../../../../etc/passwd'");
    /* a name that is not a string */
    COPY(dir, "fr_paths");
    pipeline_set(dir, "model_file", cJSON_CreateNumber(3));
    LOAD_FAILS(dir, "pipeline.json", "'model_file' must be a string, found 3");
}

/* pipeline.json: each field's type, range and agreement with the files. */
static void test_pipeline_types(void)
{
    char dir[4096];
    struct {
        const char *key, *json, *needle;
    } cases[] = {
        {"patch", "\"11\"", "'patch' must be an integer in 1..99, found a string (\"11\")"},
        {"patch", "10000000000", "'patch' must be an integer in 1..99, found 10000000000"},
        {"patch", "9.5", "'patch' must be an integer in 1..99, found 9.5"},
        {"patch", "12", "'patch' must be odd"},
        {"patch", NULL, "'patch' is missing"},
        {"model", "42", "'model' must be a string, found 42"},
        {"model", "\"resnet\"", "'model' is 'resnet'"},
        {"pad", "\"wrap\"", "'pad' must be \"mirror\" or \"zero\""},
        {"version", "\"2\"", "'version' must be an integer in 1..2, found a string"},
        {"version", "3", "version 2 (a newer hsi wrote it)"},
        {"features", "\"30\"", "'features' must be an integer"},
        {"features", "29", "'features' is 29 but preprocessing.safetensors"},
        {"cube_bands", "64", "'cube_bands' is 64 but preprocessing.safetensors"},
        {"classes", "{}", "'classes' must be a list"},
        {"classes", "[{\"label\": 1}]", "'classes' must list 2..65535 classes, found 1"},
        {"classes", "[{\"label\": 1}, {\"label\": \"2\"}]",
         "'classes[1].label' must be an integer"},
        {"classes", "[{\"label\": 1}, {\"label\": 1}]",
         "'classes[1].label' is 1, the label of an earlier"},
        {"classes", "[{\"label\": 1}, {\"label\": 0}]",
         "'classes[1].label' must be an integer in 1..65535, found 0"},
        {"classes", "[{\"label\": 1, \"color\": [1, 2, 300]}, {\"label\": 2}]",
         "'classes[0].color[2]' must be an integer in 0..255, found 300"},
        {"classes", "[{\"label\": 1, \"name\": 7}, {\"label\": 2}]",
         "'classes[0].name' must be a string"},
        {"classes", "[{\"label\": 1, \"index\": 1}, {\"label\": 2}]", "'classes[0].index' is 1"},
        {"training", "[]", "'training' must be an object"},
        {"preprocessing_file", NULL, "'preprocessing_file' is missing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        COPY(dir, "fr_types");
        cJSON *v = cases[i].json ? cJSON_Parse(cases[i].json) : NULL;
        CU_ASSERT_FATAL(!cases[i].json || v);
        pipeline_set(dir, cases[i].key, v);
        LOAD_FAILS(dir, "pipeline.json", cases[i].needle);
    }
    /* the CLI says the same */
    COPY(dir, "fr_types");
    pipeline_set(dir, "patch", cJSON_CreateString("11"));
    EVAL_FAILS(dir, "pipeline.json", "'patch' must be an integer in 1..99, found a string");
    /* not JSON, not an object */
    COPY(dir, "fr_types");
    FILE *fp = fopen(join(dir, "pipeline.json"), "w");
    fputs("[1, 2, 3]", fp);
    fclose(fp);
    LOAD_FAILS(dir, "pipeline.json", "must hold a JSON object, found a list");
    /* a missing model file is named, not a shape mismatch */
    COPY(dir, "fr_types");
    CU_ASSERT_EQUAL(unlink(join(dir, "model.safetensors")), 0);
    hsi_run r;
    CU_ASSERT_NOT_EQUAL(hsi_run_load(&r, dir), HSI_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(hsi_last_error(), "model.safetensors"));
    /* model.safetensors for other classes than pipeline.json's */
    COPY(dir, "fr_types");
    const char *p = join(dir, "pipeline.json");
    cJSON *j = hsi_test_load_json(p);
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "classes"), 0);
    cJSON_ReplaceItemInObject(c0, "label", cJSON_CreateNumber(99));
    json_save(p, j);
    LOAD_FAILS(dir, "model.safetensors", "'label_ids'");
}

/* A version 1 run (normalisation in the JSON, PCA in pca_file). */
static void write_v1(const char *dir, const hsi_run *run, int with_pca_file, int bad_last_band)
{
    char path[4096];
    const hsi_norm *n = &run->prep.pca.norm;
    snprintf(path, sizeof path, "%s/pca.bin", dir);
    HSI_CHECK_OK(hsi_pca_save(&run->prep.pca, path));
    cJSON *j = cJSON_CreateObject(), *nj = cJSON_CreateObject(), *cl = cJSON_CreateArray();
    cJSON_AddNumberToObject(j, "version", 1);
    cJSON_AddStringToObject(j, "model", run->model);
    cJSON_AddNumberToObject(j, "patch", run->patch);
    cJSON_AddStringToObject(j, "pad", "mirror");
    cJSON_AddStringToObject(nj, "mode", hsi_norm_mode_name(n->mode));
    cJSON_AddNumberToObject(nj, "n_cube_bands", (double)n->n_cube_bands);
    cJSON *b = cJSON_CreateArray();
    for (int64_t i = 0; i < n->n_bands; i++) {
        int64_t v = bad_last_band && i == n->n_bands - 1 ? n->n_cube_bands : n->bands[i];
        cJSON_AddItemToArray(b, cJSON_CreateNumber((double)v));
    }
    cJSON_AddItemToObject(nj, "bands", b);
    cJSON_AddItemToObject(nj, "scale", cJSON_CreateDoubleArray(n->scale, (int)n->n_bands));
    cJSON_AddItemToObject(nj, "center", cJSON_CreateDoubleArray(n->center, (int)n->n_bands));
    cJSON_AddItemToObject(nj, "offset", cJSON_CreateDoubleArray(n->offset, (int)n->n_bands));
    cJSON_AddItemToObject(nj, "fill", cJSON_CreateDoubleArray(n->fill, (int)n->n_bands));
    cJSON_AddItemToObject(j, "normalization", nj);
    if (with_pca_file) cJSON_AddStringToObject(j, "pca_file", "pca.bin");
    for (int k = 0; k < run->n_classes; k++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "label", (double)run->label_ids[k]);
        cJSON_AddStringToObject(e, "name", run->names[k]);
        cJSON_AddItemToArray(cl, e);
    }
    cJSON_AddItemToObject(j, "classes", cl);
    snprintf(path, sizeof path, "%s/pipeline.json", dir);
    json_save(path, j);
}

/* Version 1: the pca_file and the band counts of 'normalization'. */
static void test_v1_messages(void)
{
    char dir[4096];
    hsi_run run, old;
    COPY(dir, "fr_v1");
    HSI_CHECK_OK(hsi_run_load(&run, dir));
    write_v1(dir, &run, 1, 0);
    HSI_CHECK_OK(hsi_run_load(&old, dir)); /* the well-formed v1 run loads */
    CU_ASSERT_EQUAL(old.n_features, 30);
    hsi_run_free(&old);
    /* pca_file dropped: said, not a shape mismatch of features.0.weight */
    write_v1(dir, &run, 0, 0);
    LOAD_FAILS(dir, "model.safetensors", "'input_shape'", "no 'pca_file'");
    /* pca_file naming a file that is not there */
    write_v1(dir, &run, 1, 0);
    CU_ASSERT_EQUAL(unlink(join(dir, "pca.bin")), 0);
    hsi_status st = hsi_run_load(&old, dir);
    CU_ASSERT_NOT_EQUAL(st, HSI_OK);
    has_all(__LINE__, hsi_last_error(), (const char *const[]){"'pca_file'", "pca.bin", NULL});
    /* a band beyond 'normalization.n_cube_bands': which key, which counts */
    write_v1(dir, &run, 1, 1);
    const int64_t nb = run.prep.pca.norm.n_bands, ncb = run.prep.pca.norm.n_cube_bands;
    char want[160];
    snprintf(want, sizeof want, "'normalization.bands[%lld]' = %lld is outside the bands 0..%lld",
             (long long)nb - 1, (long long)ncb, (long long)ncb - 1);
    LOAD_FAILS(dir, "pipeline.json", want, "'normalization.n_cube_bands' = 128");
    EVAL_FAILS(dir, "pipeline.json", want);
    hsi_run_free(&run);
}

/* The preprocessing file's metadata and tensors, typed. */
static void test_prep_strict(void)
{
    char dir[4096];
    st_edit e;
    struct {
        const char *key, *value, *needle;
    } cases[] = {
        {"n_cube_bands", "many", "'n_cube_bands' must be an integer in 1..1000000 (found 'many')"},
        {"pca", "yes", "'pca' must be an integer in 0..1"},
        {"ignore_value", "nan", "'ignore_value' must be a finite number"},
        {"pca_n_samples", "-3", "'pca_n_samples' must be an integer"},
        {"normalize", "zscored", "'normalize' is 'zscored'"},
        {"version", "2", "'version' is '2'"},
        {"n_cube_bands", "64", "tensor 'bands' lists 128 bands; expected 1..64"},
    };
    COPY(dir, "fr_prep");
    const char *pp = join(dir, "preprocessing.safetensors");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        COPY(dir, "fr_prep");
        CU_ASSERT_FATAL(st_load(&e, pp));
        st_set_meta(&e, cases[i].key, cases[i].value);
        CU_ASSERT_FATAL(st_save(&e, pp, NULL, 0));
        st_free(&e);
        LOAD_FAILS(dir, "preprocessing.safetensors", cases[i].needle);
    }
    /* a NaN in the PCA components */
    COPY(dir, "fr_prep");
    CU_ASSERT_FATAL(st_load(&e, pp));
    cJSON *t = st_tensor(&e, "pca.components");
    double nan = NAN;
    memcpy(e.data + (size_t)st_off(t, 0) + 8 * 7, &nan, 8);
    CU_ASSERT_FATAL(st_save(&e, pp, NULL, 0));
    st_free(&e);
    LOAD_FAILS(dir, "preprocessing.safetensors", "'pca.components'", "NaN at element 7");
    /* a tensor of the wrong dtype, and an unexpected one */
    COPY(dir, "fr_prep");
    CU_ASSERT_FATAL(st_load(&e, pp));
    cJSON_ReplaceItemInObject(st_tensor(&e, "fill"), "dtype", cJSON_CreateString("I64"));
    CU_ASSERT_FATAL(st_save(&e, pp, NULL, 0));
    st_free(&e);
    LOAD_FAILS(dir, "preprocessing.safetensors", "'fill' must be float64");
    COPY(dir, "fr_prep");
    CU_ASSERT_FATAL(st_load(&e, pp));
    t = cJSON_DetachItemFromObjectCaseSensitive(e.hdr, "fill");
    cJSON_AddItemToObject(e.hdr, "fil", t);
    CU_ASSERT_FATAL(st_save(&e, pp, NULL, 0));
    st_free(&e);
    LOAD_FAILS(dir, "preprocessing.safetensors", "unexpected tensor 'fil'");
    /* the memory entry point says the same as the file one */
    CU_ASSERT_FATAL(st_load(&e, pp));
    char *raw = NULL;
    size_t n = 0;
    HSI_CHECK_OK(hsi_read_file(pp, &raw, &n));
    hsi_prep p;
    HSI_CHECK_FAILS(hsi_prep_parse(&p, raw, n, "mem.safetensors"), HSI_ERR_FORMAT,
                    "mem.safetensors: unexpected tensor 'fil'");
    free(raw);
    st_free(&e);
}

HSI_SUITE(
    faults_run, 0, {"the run as written loads, evaluates and resumes", test_pristine_run_valid},
    {"safetensors: overlap, fraction, hole, trailing bytes refused", test_safetensors_layout},
    {"NaN/inf weights refused naming the tensor (load, eval, predict, resume)",
     test_nonfinite_weights},
    {"train_state: optimiser tensors, epoch, config, rng, schedule typed", test_train_state_strict},
    {"pipeline.json: file names confined to the run directory", test_pipeline_paths_confined},
    {"pipeline.json: every field typed, counts checked against the files", test_pipeline_types},
    {"version 1: pca_file and band counts named", test_v1_messages},
    {"preprocessing file: metadata and tensors typed, finite", test_prep_strict})

/* fuzz_pipeline_json.c — libFuzzer target for the run directory's JSON:
 * pipeline.json (hsi_run_spec_parse from memory) and the trainer's config
 * of train_state.safetensors (hsi_run_state_config). What parses must hold
 * what the parser promises (odd patch in range, 2..65535 classes with
 * unique labels, file names without '/' or "..", version 1 bands inside the
 * cube); anything else traps. No file is opened. */
#include <cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/run_internal.h"

static void check_name(const char *s)
{
    if (s && (!*s || strchr(s, '/') || !strcmp(s, "..") || !strcmp(s, "."))) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int init;
    static cJSON *like;
    if (!init) {
        hsi_set_quiet(1);
        like = cJSON_Parse("{\"cube\":\"a\",\"patch\":11,\"whiten\":false,\"lr\":0.001}");
        init = 1;
    }
    hsi_run_spec s;
    if (hsi_run_spec_parse(&s, (const char *)data, size, "fuzz/pipeline.json") == HSI_OK) {
        if (s.version < 1 || s.version > HSI_RUN_VERSION || s.patch < 1 ||
            s.patch > HSI_PATCH_MAX || s.patch % 2 == 0 || s.n_classes < 2 || s.n_classes > 65535 ||
            !s.label_ids || !s.names || (!s.preprocessing_file && !s.has_norm))
            __builtin_trap();
        for (int k = 0; k < s.n_classes; k++) {
            if (s.label_ids[k] < 1 || s.label_ids[k] > 65535 || !s.names[k]) __builtin_trap();
            for (int q = 0; q < k && q < 64; q++)
                if (s.label_ids[q] == s.label_ids[k]) __builtin_trap();
        }
        check_name(s.model_file);
        check_name(s.preprocessing_file);
        check_name(s.split_file);
        check_name(s.pca_file);
        if (s.has_norm) {
            const hsi_norm *n = &s.norm;
            if (n->n_bands < 1 || n->n_bands > n->n_cube_bands) __builtin_trap();
            for (int64_t i = 0; i < n->n_bands; i++)
                if (n->bands[i] < 0 || n->bands[i] >= n->n_cube_bands || n->scale[i] != n->scale[i])
                    __builtin_trap();
        }
        hsi_run_spec_free(&s);
    }
    /* the same bytes as a train_state config (NUL-terminated copy) */
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    cJSON *j = NULL;
    if (hsi_run_state_config(&j, "fuzz/train_state.safetensors", text, like) == HSI_OK && text[0] &&
        !cJSON_IsObject(j))
        __builtin_trap();
    cJSON_Delete(j);
    free(text);
    return 0;
}

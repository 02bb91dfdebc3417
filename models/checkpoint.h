/* checkpoint.h — model weights in the safetensors format (8-byte little-endian
 * header length, JSON header with dtype/shape/data_offsets and optional
 * __metadata__, raw little-endian data), strict / non-strict loading with a
 * report of missing, unexpected and mismatched keys, and training checkpoints
 * (weights + optimiser state + epoch + RNG + schedule + configuration) that
 * resume bit-identically on CPU. Writes are atomic. Not the training loop.
 *
 * Loading in PyTorch (no extra package needed):
 *   import json, struct, numpy as np, torch
 *   raw = open("model.safetensors", "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
 *   hdr = json.loads(raw[8:8 + n]); base = 8 + n
 *   dt = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32}
 *   sd = {k: torch.from_numpy(np.frombuffer(raw[base + v["data_offsets"][0]:base +
 *         v["data_offsets"][1]], dt[v["dtype"]]).reshape(v["shape"]).copy())
 *         for k, v in hdr.items() if k != "__metadata__"}
 *   model.load_state_dict(sd)        # or safetensors.torch.load_file(path) */
#ifndef HSI_CHECKPOINT_H
#define HSI_CHECKPOINT_H

#include "models/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes tensors (any strides; F32/F64/I32/I64) in the given order with
 * optional metadata pairs meta[2i] = key, meta[2i+1] = value. The layout is
 * canonical: compact JSON, "__metadata__" first, header padded with spaces
 * to a multiple of 8, data in tensor order. */
hsi_status hsi_safetensors_write(const char *path, const hsi_named_tensor *ts, int n,
                                 const char *const *meta, int n_meta);

typedef struct hsi_st_file hsi_st_file;
/* Maps and validates a file as the format requires: header size, a JSON
 * object, string metadata, dtypes, integer shapes and data_offsets, sizes
 * matching shapes, unique names, and tensors that tile the data area
 * exactly (no overlap, no hole, no byte after the last). */
hsi_status hsi_safetensors_open(hsi_st_file **out, const char *path);
/* Same over memory (copied); `what` names it in messages. For fuzzing. */
hsi_status hsi_safetensors_parse(hsi_st_file **out, const void *data, size_t size,
                                 const char *what);
void hsi_safetensors_close(hsi_st_file *f);
int hsi_safetensors_count(const hsi_st_file *f);
const char *hsi_safetensors_name(const hsi_st_file *f, int i);
/* A view of tensor i (retained; release it). */
hsi_status hsi_safetensors_view(const hsi_st_file *f, int i, hsi_view *out);
/* Index of a name (-1 when absent). */
int hsi_safetensors_find(const hsi_st_file *f, const char *name);
/* A metadata value or NULL. */
const char *hsi_safetensors_meta(const hsi_st_file *f, const char *key);
/* HSI_ERR_FORMAT naming the tensor, the element and its file byte when
 * tensor i (F32/F64) holds a NaN or an infinity; HSI_OK otherwise (and for
 * integer tensors). `what` names the file. */
hsi_status hsi_safetensors_check_finite(const hsi_st_file *f, int i, const char *what);

/* --------------------------------------------------------- modules */

typedef struct hsi_load_report {
    int n_missing, n_unexpected, n_mismatched, n_loaded;
    char text[2048]; /* "missing: a, b; unexpected: c; shape mismatch: d (file (3) vs model (4))" */
} hsi_load_report;

/* Saves the module's state (parameters and buffers) under their names. */
hsi_status hsi_module_save(hsi_module *m, const char *path, const char *const *meta, int n_meta);
/* Loads a state file; a leading "module." (DataParallel) is stripped from
 * every key. strict: any missing/unexpected/mismatched key fails with
 * HSI_ERR_FORMAT and nothing is loaded. Non-strict: loads what matches and
 * reports the rest in rep (may be NULL). F32 <-> F64 convert. */
hsi_status hsi_module_load(hsi_module *m, const char *path, int strict, hsi_load_report *rep);
/* The same from an open file (path names it in messages). Both refuse a
 * NaN or infinite value in any tensor they would load (naming it), before
 * anything is copied. */
hsi_status hsi_module_load_file(hsi_module *m, const hsi_st_file *f, const char *path, int strict,
                                hsi_load_report *rep);

/* Training checkpoint: the module state, optimiser state (buffers, step,
 * configuration), schedule state, epoch, the engine RNG state and a free
 * configuration string (JSON) in one safetensors file. */
hsi_status hsi_train_save(const char *path, hsi_module *m, const hsi_optim *o,
                          const hsi_sched *s, int epoch, const char *config_json);
/* Restores everything saved by hsi_train_save (s may be NULL); *config is
 * malloc'd (free it) or NULL when config is NULL. Validated whole before
 * anything is changed: every metadata value parsed strictly (epoch and
 * optimizer_step integers, rng 64 hex digits, optimizer and schedule their
 * exact field lists, config a JSON object), the model state strict, the
 * optimiser state of every parameter present once optimizer_step > 0 (none
 * before), shaped like its parameter, no other optimizer.* tensor, and every
 * value finite. */
hsi_status hsi_train_load(const char *path, hsi_module *m, hsi_optim *o, hsi_sched *s,
                          int *epoch, char **config);

#ifdef __cplusplus
}
#endif
#endif

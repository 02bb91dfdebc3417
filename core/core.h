/* core.h — the vocabulary every hsi module shares: status codes with a
 * thread-local message, refcounted buffers (host, mmap, pinned, device),
 * strided views (<= 5 dims) and element conversion. Nothing here knows
 * about file formats, kernels or models. */
#ifndef HSI_CORE_H
#define HSI_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- status */

typedef enum hsi_status {
    HSI_OK = 0,
    HSI_ERR_ARG = -1,         /* bad argument from the caller */
    HSI_ERR_IO = -2,          /* open/read/write/mmap failed */
    HSI_ERR_FORMAT = -3,      /* a file is malformed */
    HSI_ERR_NOMEM = -4,       /* allocation failed */
    HSI_ERR_UNSUPPORTED = -5, /* valid, but not handled (layout, dtype...) */
    HSI_ERR_OVERFLOW = -6,    /* a size product does not fit */
    HSI_ERR_NOT_FOUND = -7,   /* file, key, variable not found */
    HSI_ERR_NO_CUDA = -8,     /* CUDA asked for, not built or no device */
    HSI_ERR_STATE = -9,       /* call not valid in this state */
    HSI_ERR_NUMERIC = -10,    /* NaN/Inf, singular matrix, no convergence */
    HSI_ERR_CUDA = -11        /* a CUDA runtime/library call failed */
} hsi_status;

/* The message of the last failure on this thread ("" when none). */
const char *hsi_last_error(void);
/* Short name of a status code ("format error", ...). */
const char *hsi_status_name(hsi_status st);
/* Sets the thread-local message (printf format) and returns code. */
hsi_status hsi_fail(hsi_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Prepends "context: " to the current message; returns code unchanged. */
hsi_status hsi_fail_context(hsi_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void hsi_clear_error(void);

#define HSI_FAIL(code, ...) hsi_fail((code), __VA_ARGS__)
/* Needs a local `hsi_status st` and a `cleanup:` label. */
#define HSI_TRY(expr)                                                          \
    do {                                                                       \
        st = (expr);                                                           \
        if (st != HSI_OK) goto cleanup;                                        \
    } while (0)
/* Programming errors only; always compiled in. */
#define HSI_ASSERT(cond)                                                       \
    do {                                                                       \
        if (!(cond)) hsi_assert_fail(#cond, __FILE__, __LINE__);               \
    } while (0)
void hsi_assert_fail(const char *expr, const char *file, int line);

/* Warnings: printed to stderr as "hsi: warning: ..." unless silenced. */
void hsi_warn(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
void hsi_set_quiet(int quiet); /* 1: no warnings, no progress */
int hsi_is_quiet(void);

/* ---------------------------------------------------------------- dtypes */

/* Values are the ENVI data type codes where ENVI has one. */
typedef enum hsi_dtype {
    HSI_DT_INVALID = 0,
    HSI_U8 = 1,
    HSI_I16 = 2,
    HSI_I32 = 3,
    HSI_F32 = 4,
    HSI_F64 = 5,
    HSI_C64 = 6,  /* complex: 2 x float32 (re, im) */
    HSI_C128 = 9, /* complex: 2 x float64 */
    HSI_U16 = 12,
    HSI_U32 = 13,
    HSI_I64 = 14,
    HSI_U64 = 15,
    HSI_I8 = 16 /* not an ENVI type; used by models and labels */
} hsi_dtype;

size_t hsi_dtype_size(hsi_dtype dt);          /* 0 for invalid */
const char *hsi_dtype_name(hsi_dtype dt);     /* numpy name: "uint16" */
hsi_dtype hsi_dtype_from_name(const char *s); /* numpy names; invalid if unknown */
hsi_dtype hsi_dtype_from_envi(int code);      /* invalid if not an ENVI code */
int hsi_dtype_is_complex(hsi_dtype dt);
int hsi_dtype_is_float(hsi_dtype dt); /* f32, f64 (not complex) */
int hsi_dtype_is_signed(hsi_dtype dt);
int hsi_host_is_little_endian(void);

/* --------------------------------------------------------------- buffers */

typedef enum hsi_buf_kind {
    HSI_BUF_HOST = 0,   /* malloc'd, 64-byte aligned */
    HSI_BUF_MMAP = 1,   /* read-only mapping of a file */
    HSI_BUF_PINNED = 2, /* page-locked host memory (cudaHostAlloc) */
    HSI_BUF_DEVICE = 3  /* GPU memory (cudaMalloc) */
} hsi_buf_kind;

typedef struct hsi_buffer hsi_buffer;
struct hsi_buffer {
    void *data;
    size_t size;
    hsi_buf_kind kind;
    int device;                      /* CUDA device ordinal, -1 on host */
    int refcount;                    /* atomic */
    void (*release)(hsi_buffer *b);  /* frees data; NULL = nothing to free */
    void *ctx;                       /* for release */
    char *path;                      /* file behind an mmap buffer, else NULL */
};

/* Allocates size bytes (zeroed for host/pinned). Pinned needs a CUDA build
 * with a device, else HSI_ERR_NO_CUDA; same for device. */
hsi_status hsi_buffer_alloc(hsi_buffer **out, size_t size, hsi_buf_kind kind);
/* Maps a whole file read-only. Cost does not depend on the file size.
 * An empty file gives a buffer of size 0 and data NULL. */
hsi_status hsi_buffer_map(hsi_buffer **out, const char *path);
/* Wraps memory owned elsewhere; release(b) is called on the last release. */
hsi_status hsi_buffer_wrap(hsi_buffer **out, void *data, size_t size,
                           hsi_buf_kind kind, void (*release)(hsi_buffer *),
                           void *ctx);
hsi_buffer *hsi_buffer_retain(hsi_buffer *b);
void hsi_buffer_release(hsi_buffer *b); /* NULL is fine */
/* Live bytes currently held by host/pinned/device buffers of this process. */
int64_t hsi_buffer_live_bytes(hsi_buf_kind kind);

/* ----------------------------------------------------------------- views */

#define HSI_MAX_DIMS 5

/* A strided window over a buffer. Element (i0..in-1) lives at byte
 * offset + sum(i_k * strides[k]) of buf->data. Strides may be negative or
 * zero. `swapped` says the elements are stored in the non-native byte
 * order. A view holds one reference to its buffer (release it with
 * hsi_view_release). Cubes use logical axes (band, line, sample). */
typedef struct hsi_view {
    hsi_buffer *buf;
    int64_t offset;
    hsi_dtype dtype;
    int ndim;
    int swapped;
    int64_t shape[HSI_MAX_DIMS];
    int64_t strides[HSI_MAX_DIMS];
} hsi_view;

/* 1 when v's buffer is device memory (the CUDA kernels' data). */
static inline int hsi_view_on_device(const hsi_view *v)
{
    return v && v->buf && v->buf->kind == HSI_BUF_DEVICE;
}

/* Makes a view over buf (retained) after checking that every addressed byte
 * lies inside the buffer. Zero-size shapes are allowed. */
hsi_status hsi_view_make(hsi_view *out, hsi_buffer *buf, int64_t offset,
                         hsi_dtype dtype, int ndim, const int64_t *shape,
                         const int64_t *strides, int swapped);
/* A C-contiguous view (strides from the shape). */
hsi_status hsi_view_make_packed(hsi_view *out, hsi_buffer *buf, int64_t offset,
                                hsi_dtype dtype, int ndim, const int64_t *shape);
/* Allocates a new zeroed packed host (or other kind) buffer and views it. */
hsi_status hsi_view_alloc(hsi_view *out, hsi_dtype dtype, int ndim,
                          const int64_t *shape, hsi_buf_kind kind);
void hsi_view_release(hsi_view *v);
/* out becomes another reference to the same window. */
void hsi_view_ref(hsi_view *out, const hsi_view *in);

int64_t hsi_view_count(const hsi_view *v);  /* number of elements */
int64_t hsi_view_nbytes(const hsi_view *v); /* count * element size */
int hsi_view_is_packed(const hsi_view *v);  /* C-contiguous, native order */
/* Address of an element (host-visible buffers only). */
void *hsi_view_ptr(const hsi_view *v, const int64_t *idx);

/* No-copy operations; `in` is unchanged and `out` holds its own reference.
 * out may alias in. */
hsi_status hsi_view_slice(hsi_view *out, const hsi_view *in, int axis,
                          int64_t start, int64_t stop, int64_t step);
hsi_status hsi_view_index(hsi_view *out, const hsi_view *in, int axis,
                          int64_t i); /* drops the axis */
hsi_status hsi_view_permute(hsi_view *out, const hsi_view *in, const int *perm);
/* Cube helpers, for (band, line, sample) views. */
hsi_status hsi_view_bands(hsi_view *out, const hsi_view *in, int64_t first,
                          int64_t count);
hsi_status hsi_view_crop(hsi_view *out, const hsi_view *in, int64_t line0,
                         int64_t n_lines, int64_t sample0, int64_t n_samples);
/* A reshape that never copies: fails with HSI_ERR_UNSUPPORTED when the
 * strides do not allow it. */
hsi_status hsi_view_reshape(hsi_view *out, const hsi_view *in, int ndim,
                            const int64_t *shape);

/* The one copying operation: a packed host view in native byte order with
 * dtype `dtype` (HSI_DT_INVALID = keep). Integer targets round to nearest
 * and saturate; complex to real is refused (HSI_ERR_UNSUPPORTED). */
hsi_status hsi_view_contiguous(hsi_view *out, const hsi_view *in,
                               hsi_dtype dtype);
/* Copies in into an existing view of the same shape (any strides/dtype);
 * same conversion rules as hsi_view_contiguous. */
hsi_status hsi_view_copy(hsi_view *dst, const hsi_view *src);

/* One element as double (real part for complex); idx has v->ndim entries. */
double hsi_view_get_f64(const hsi_view *v, const int64_t *idx);

/* ---------------------------------------------------- element conversion */

/* Reads n elements of type `dt` starting at src, `stride` bytes apart,
 * byte-swapping when swapped != 0, into dst as float/double. For complex
 * types the real part is taken. These are the building blocks of every
 * kernel that reads raw cubes. */
void hsi_load_f32(float *dst, const void *src, int64_t stride, hsi_dtype dt,
                  int swapped, int64_t n);
void hsi_load_f64(double *dst, const void *src, int64_t stride, hsi_dtype dt,
                  int swapped, int64_t n);
/* Generic element conversion: n elements from (src, src_stride, sdt,
 * s_swapped) to (dst, dst_stride, ddt, d_swapped). Real->complex sets the
 * imaginary part to 0; complex->real is a programming error. */
void hsi_convert(void *dst, int64_t dst_stride, hsi_dtype ddt, int d_swapped,
                 const void *src, int64_t src_stride, hsi_dtype sdt,
                 int s_swapped, int64_t n);
void hsi_bswap_inplace(void *p, size_t elem_size, int64_t n);

/* --------------------------------------------------------- small helpers */

/* 64-bit overflow-checked products; return 0 on overflow. */
int hsi_mul_ok(int64_t a, int64_t b, int64_t *out);
/* Inputs (core/files.c). Every file hsi reads is opened this way: without
 * blocking (a FIFO is refused, never waited on) and checked to be a regular
 * file or a block device; the error says what it is instead ("is a
 * directory", "is a FIFO (named pipe)", "a symlink loop"). what names the
 * file's role in messages ("cube", "mask"; NULL: "file"). size (may be NULL)
 * receives the file's size in bytes. */
hsi_status hsi_input_open(int *fd, const char *path, const char *what, int64_t *size);
hsi_status hsi_input_fopen(FILE **fp, const char *path, const char *what);
/* The same checks for libraries that open by name (matio, GDAL). */
hsi_status hsi_input_check(const char *path, const char *what);
/* Whole-file read into a NUL-terminated malloc'd string. */
hsi_status hsi_read_file(const char *path, char **out, size_t *len);
/* Atomic writes: open "<path>.hsi-tmp-XXXXXX" beside the target (locked
 * while it is written; stale ones of the same target that no live process
 * holds are removed first), then commit (fsync + rename) or abort (unlink).
 * Temporaries are also removed on SIGINT/SIGTERM/SIGHUP once a program has
 * called hsi_tmp_cleanup_on_signals() (the CLI does; it installs handlers
 * only for signals still at their default). */
typedef struct hsi_atomic_file {
    FILE *fp;
    char *tmp_path;
    char *final_path;
    int slot; /* in the signal handler's list, plus one (0: none) */
} hsi_atomic_file;
hsi_status hsi_atomic_open(hsi_atomic_file *af, const char *path);
hsi_status hsi_atomic_commit(hsi_atomic_file *af);
void hsi_atomic_abort(hsi_atomic_file *af);
/* Writes len bytes of data to path atomically (temporary file + rename). */
hsi_status hsi_write_file_atomic(const char *path, const void *data, size_t len);
/* A header and its data file replaced as a pair: no reader ever sees the
 * new data under the old header (a "<hdr>.hsi-pair" marker and a hard-link
 * backup of the old data cover the moment between the two renames; see
 * core/files.c). Both files must be fully written; both are committed or
 * aborted. A failed rename never loses the old pair. */
hsi_status hsi_atomic_commit_pair(hsi_atomic_file *data, hsi_atomic_file *hdr);
/* Readers: HSI_ERR_STATE with what happened when hdr_path's pair was torn
 * by an interrupted write (HSI_OK otherwise). */
hsi_status hsi_atomic_pair_check(const char *hdr_path);
/* Writers: completes an interrupted pair write to hdr_path (no-op if none
 * or if its writer is still alive). hsi_atomic_open of a .hdr calls it. */
void hsi_atomic_pair_recover(const char *hdr_path);
void hsi_tmp_cleanup_on_signals(void);
/* fsync of the folder holding path (a rename in it made durable). */
void hsi_sync_parent_dir(const char *path);
/* Test hook: HSI_FAULT=<point> kills the process with SIGKILL at <point>;
 * HSI_FAULT=<point>:eio returns 1 there with errno = EIO (the step fails);
 * HSI_FAULT=<point>:term sends the process SIGTERM there.
 * Points: "rename" (any atomic commit), "pair-data", "pair-header",
 * "run-swap". */
int hsi_fault_point(const char *point);

/* Progress on a terminal (stderr is a tty and not quiet); silent otherwise. */
typedef struct hsi_progress {
    const char *label;
    int64_t total;
    int64_t done;
    double t0;
    double last_print;
    int active;
} hsi_progress;
void hsi_progress_begin(hsi_progress *p, const char *label, int64_t total);
void hsi_progress_update(hsi_progress *p, int64_t done);
void hsi_progress_end(hsi_progress *p);
/* Forces progress output on/off (-1 = decide by isatty, the default). */
void hsi_progress_force(int on);

double hsi_now(void); /* monotonic seconds */
/* 64-byte aligned malloc/free counted in hsi_buffer_live_bytes(HOST). */
void *hsi_aligned_alloc(size_t size);
void hsi_aligned_free(void *p);

/* CUDA presence (always callable; 0 in a CPU-only build). */
int hsi_cuda_built(void);
int hsi_cuda_device_count(void);

/* Where an op runs: what --device says (zero = the CPU, so zeroed options
 * keep today's behaviour). */
typedef enum hsi_device {
    HSI_DEVICE_CPU = 0,
    HSI_DEVICE_CUDA = 1, /* the GPU, or an error saying why not */
    HSI_DEVICE_AUTO = 2  /* the GPU when there is one and the op takes the call, else the CPU */
} hsi_device;

/* "cpu", "cuda" or "auto" (any case); else HSI_ERR_ARG naming `what`
 * (the option, "--device"). */
hsi_status hsi_device_parse(hsi_device *out, const char *text, const char *what);
const char *hsi_device_name(hsi_device d); /* "cpu", "cuda", "auto" */

/* The one backend rule every dispatching op follows (as ggml's
 * supports_op): data in device memory goes to the CUDA kernel (or, when
 * cuda_unsupported says why it cannot take the call, HSI_ERR_UNSUPPORTED:
 * copy it to the host first); host data goes where `want` says: CPU; CUDA
 * when the op takes the call and a device is there (else
 * HSI_ERR_UNSUPPORTED naming the op and cuda_unsupported, or
 * HSI_ERR_NO_CUDA with the plugin's or the runtime's reason); AUTO: CUDA
 * when both hold, else the CPU. cuda_unsupported: NULL when the op's CUDA
 * kernel takes this call, else why not. *out is CPU or CUDA. */
hsi_status hsi_device_pick(hsi_device *out, hsi_device want, int data_on_device, const char *op,
                           const char *cuda_unsupported);

/* A whole job's device, decided once at its start: AUTO becomes CUDA when
 * a device is present, else CPU; CUDA is checked (HSI_ERR_NO_CUDA naming
 * `what` and the reason when there is no device). */
hsi_status hsi_device_resolve(hsi_device *out, hsi_device want, const char *what);

#ifdef __cplusplus
}
#endif
#endif

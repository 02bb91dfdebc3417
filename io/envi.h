/* envi.h — ENVI header parsing, the zero-copy ENVI reader and the streaming
 * ENVI writer. The header parser and the file-level reader take memory too
 * (hsi_envi_parse, hsi_envi_open_memory: the fuzz entry points); the reader
 * maps the data file and returns a strided view over it. */
#ifndef HSI_ENVI_H
#define HSI_ENVI_H

#include "core/core.h"
#include "cube.h"
#include "meta.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parses header text (len bytes, need not be NUL-terminated) into m
 * (initialised here). `name` is used in messages (the header's path).
 * Checks syntax and required keys (samples, lines, bands, data type,
 * interleave) and fills every typed field it understands; non-fatal
 * problems go to m->warnings.
 * Policies (envi_header.c): caps samples/lines <= 2^31-1, bands <= 2^20,
 * header <= 64 MiB; a missing 'byte order' means 0 (warned); per-band lists
 * with the wrong count are warned and left NULL (kept verbatim), except a
 * spectral library's per-sample wavelength list (kept verbatim, no warning);
 * wavelengths (and fwhm) are converted to nm when the units are known, or
 * guessed from the range (0.2-30 -> um, 200-30000 -> nm, warned) when the
 * units are absent/'Unknown'. Per-band numbers must be finite: a NaN, inf
 * or 1e400 item drops the list, warned with the key and the item number.
 * 'map info' needs finite numbers, pixel sizes > 0 and a finite rotation,
 * else it is warned and not used (no georeferencing, never a NaN one).
 * An integer key beyond 64 bits is reported as out of range, not as "not
 * an integer". Gain/offset, ignore value and reflectance scale are
 * metadata only: no reader or view applies them. */
hsi_status hsi_envi_parse(hsi_meta *m, const char *text, size_t len, const char *name);

/* Byte layout of a cube in its (decompressed) data file, from the header. */
typedef struct hsi_envi_layout {
    int64_t offset;     /* byte of the first element (header offset + frame header) */
    int64_t strides[3]; /* bytes, (band, line, sample) */
    int64_t payload;    /* samples x lines x bands x element size */
    int64_t need;       /* bytes the view addresses, from byte 0 */
    int64_t nominal;    /* header offset + payload + frame bytes: the expected size */
} hsi_envi_layout;
/* Every product overflow-checked (HSI_ERR_OVERFLOW naming hdr_name). */
hsi_status hsi_envi_layout_of(hsi_envi_layout *ly, const hsi_meta *m, const char *hdr_name);

/* Inflates a whole gzip file held in memory (gz_len bytes; concatenated
 * members read as one stream) into a new host buffer of exactly `want`
 * bytes. Refused: data without the gzip magic 1f 8b (the header says gzip,
 * the data is not), a size no deflate stream of gz_len bytes can reach, a
 * broken or short stream (message: bytes inflated vs expected). A longer
 * stream or bytes after it are warned (into warn_to when not NULL). */
hsi_status hsi_envi_inflate(hsi_buffer **out, const void *gz, size_t gz_len, int64_t want,
                            const char *data_name, hsi_meta *warn_to);

/* The reader's checks on the data file's bytes, which need no file system:
 * out->meta holds the parsed header; data holds the whole data file as
 * stored (mapped or in memory). Refuses minor frame offsets, checks the
 * size (the message says expected vs found and which header offset or data
 * type would explain it; extra bytes are warned), inflates gzip data (see
 * hsi_envi_inflate) and makes out->view, a (band, line, sample) view over
 * data (retained) or over the inflated copy. Sets out->file_size. */
hsi_status hsi_envi_attach_data(hsi_cube *out, hsi_buffer *data, const char *data_name,
                                const char *hdr_name);

/* The ENVI file-level reader from memory (the fuzz entry point): header
 * text (hdr_len bytes) and the data file's bytes (data_len) give the same
 * cube, errors and warnings as hsi_envi_open of such a pair, file lookup
 * aside. The data are not copied: they must outlive out (gzip data are
 * inflated into a buffer of the cube's own). Names are for messages. */
hsi_status hsi_envi_open_memory(hsi_cube *out, const char *hdr_text, size_t hdr_len,
                                const void *data, size_t data_len, const char *hdr_name,
                                const char *data_name);

/* Reads and parses a header file (size capped at 64 MiB) without looking
 * for its data: what `hsi info` shows when the data file is missing. */
hsi_status hsi_envi_read_header(hsi_meta *m, const char *hdr_path);

/* Opens an ENVI cube given its header or its data file. The data file is
 * mapped (gzip-compressed files are inflated into a host buffer) and
 * out->view is a (band, line, sample) view over it. */
hsi_status hsi_envi_open(hsi_cube *out, const char *path);

/* Finds the header for a data file or the data file for a header.
 * *out is malloc'd. On failure the message lists every name tried. */
hsi_status hsi_envi_find_header(char **out, const char *data_path);
/* m (may be NULL): where a warning goes (several data files match). */
hsi_status hsi_envi_find_data(char **out, const char *header_path, hsi_meta *m);

typedef struct hsi_envi_write_options {
    hsi_interleave interleave; /* default BSQ */
    hsi_dtype dtype;           /* HSI_DT_INVALID = the source view's dtype */
    int byte_order;            /* 0 little (default), 1 big */
    int64_t header_offset;     /* bytes of zeros before the data, default 0 */
    const char *data_ext;      /* data file name: header path minus ".hdr" plus this
                                  (default "" -> "X.hdr" + "X"); e.g. ".img" */
} hsi_envi_write_options;
void hsi_envi_write_options_init(hsi_envi_write_options *o);

/* Streaming writer: lines arrive in order as (bands, n, samples) views;
 * data and header go to temporary names and are renamed into place by
 * finish; abort (or any error) leaves nothing at the destination. */
typedef struct hsi_envi_writer hsi_envi_writer;
hsi_status hsi_envi_writer_open(hsi_envi_writer **w, const char *hdr_path, const hsi_meta *meta,
                                int64_t n_bands, int64_t n_lines, int64_t n_samples,
                                const hsi_envi_write_options *o);
/* lines: (n_bands, n, n_samples) view, any dtype/strides/byte order */
hsi_status hsi_envi_writer_write(hsi_envi_writer *w, const hsi_view *lines);
hsi_status hsi_envi_writer_finish(hsi_envi_writer *w); /* frees w */
void hsi_envi_writer_abort(hsi_envi_writer *w);        /* frees w */

/* One output written by several processes (MPI ranks): the opener hands
 * the others its temporary data file (hsi_envi_writer_data_temp); each
 * attaches to it and writes its lines where they go (write_at), then
 * finishes (flushed to disk, closed: it renames nothing). The opener writes
 * its own lines, counts the others' (lines_elsewhere) once they finished,
 * and finishes: header, then the pair renamed into place. */
const char *hsi_envi_writer_data_temp(const hsi_envi_writer *w);
hsi_status hsi_envi_writer_attach(hsi_envi_writer **w, const char *data_temp, const char *hdr_path,
                                  int64_t n_bands, int64_t n_lines, int64_t n_samples,
                                  const hsi_envi_write_options *o);
/* lines: (n_bands, n, n_samples) written as lines line0 .. line0+n-1 */
hsi_status hsi_envi_writer_write_at(hsi_envi_writer *w, int64_t line0, const hsi_view *lines);
void hsi_envi_writer_lines_elsewhere(hsi_envi_writer *w, int64_t n_lines);

/* One output made by the ranks of this job (core/dist.h; every rank calls
 * it) or, across_ranks 0 or one rank, by this process: each produces its
 * share of the lines, [n_lines * rank / size, n_lines * (rank + 1) / size),
 * by calling produce, which writes them with hsi_envi_writer_write_at
 * (line numbers of the whole output). Rank 0 opens and sizes the output
 * and renames the pair into place once every rank has flushed its lines;
 * nothing is at hdr_path before. */
typedef hsi_status (*hsi_envi_produce_fn)(void *ctx, hsi_envi_writer *w, int64_t y0, int64_t y1);
hsi_status hsi_envi_write_shared(const char *hdr_path, const hsi_meta *meta, int64_t n_bands,
                                 int64_t n_lines, int64_t n_samples, const hsi_envi_write_options *o,
                                 int across_ranks, hsi_envi_produce_fn produce, void *ctx);

/* Whole-view convenience on top of the streaming writer (tile by tile). */
hsi_status hsi_envi_write(const char *hdr_path, const hsi_view *cube, const hsi_meta *meta,
                          const hsi_envi_write_options *o);

/* Header text for meta with the given storage (the writer uses it).
 * Writes every required key, the typed fields, then every other verbatim
 * key in its original order. *out is malloc'd. */
hsi_status hsi_envi_format_header(char **out, const hsi_meta *meta, int64_t n_bands,
                                  int64_t n_lines, int64_t n_samples, hsi_dtype dtype,
                                  hsi_interleave il, int byte_order, int64_t header_offset);

#ifdef __cplusplus
}
#endif
#endif

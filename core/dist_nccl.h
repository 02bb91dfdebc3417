/* dist_nccl.h — PRIVATE: the function table between core/dist.c (MPI
 * build) and the NCCL plugin libhsi_nccl.so (core/nccl/dist_nccl.cu, built
 * with MPI=1 when nvcc and nccl.h are found). libhsi dlopens the plugin the
 * first time hsi_nccl_open is called, so a build with NCCL starts no CUDA
 * library until then. The plugin calls nothing of libhsi: failures come
 * back as nonzero with the CUDA or NCCL text in err. Not installed. */
#ifndef HSI_DIST_NCCL_H
#define HSI_DIST_NCCL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HSI_NCCL_PLUGIN_ABI 1
#define HSI_NCCL_PLUGIN_FILE "libhsi_nccl.so"
#define HSI_NCCL_PLUGIN_ENTRY "hsi_nccl_plugin_entry"
#define HSI_NCCL_ID_BYTES 128 /* sizeof(ncclUniqueId) */

typedef struct hsi_nccl_plugin {
    uint32_t abi, size;
    int version;                                   /* NCCL's, 22809 = 2.28.9 */
    int (*device_count)(int *n, char *err, size_t n_err);
    int (*unique_id)(void *id, char *err, size_t n_err); /* HSI_NCCL_ID_BYTES */
    /* cudaSetDevice(device), then ncclCommInitRank (collective over the ranks) */
    int (*comm_init)(void **comm, const void *id, int nranks, int rank, int device, char *err,
                     size_t n_err);
    void (*comm_destroy)(void *comm);
    /* in-place sum of count floats of device memory, enqueued on stream
     * (cudaStream_t, NULL = the default stream) */
    int (*allreduce_sum_f32)(void *comm, float *buf, int64_t count, void *stream, char *err,
                             size_t n_err);
    int (*stream_sync)(void *stream, char *err, size_t n_err);
    /* device memory and copies, for the checks (dir 0: host to device) */
    int (*dev_alloc)(void **p, size_t bytes, char *err, size_t n_err);
    void (*dev_free)(void *p);
    int (*copy)(void *dst, const void *src, size_t bytes, int dir, char *err, size_t n_err);
} hsi_nccl_plugin;

#ifdef __cplusplus
}
#endif
#endif

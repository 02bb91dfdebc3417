/* dist_nccl.cu — the NCCL plugin (see core/dist_nccl.h): NCCL
 * communicators and allreduce on device buffers, for data-parallel
 * gradients on GPUs (Debian's Open MPI is not CUDA-aware: device buffers go
 * through NCCL, the unique id through MPI in core/dist.c). Built alone as
 * libhsi_nccl.so, not into the CUDA plugin. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>

#include "core/dist_nccl.h"

static_assert(sizeof(ncclUniqueId) == HSI_NCCL_ID_BYTES, "ncclUniqueId size");

#define CU_CHECK(call, what)                                                                       \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            snprintf(err, n_err, "%s: %s", what, cudaGetErrorString(e_));                          \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define NC_CHECK(call, what)                                                                       \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess) {                                                                   \
            snprintf(err, n_err, "%s: %s", what, ncclGetErrorString(r_));                          \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static int p_device_count(int *n, char *err, size_t n_err)
{
    *n = 0;
    CU_CHECK(cudaGetDeviceCount(n), "cudaGetDeviceCount");
    return 0;
}

static int p_unique_id(void *id, char *err, size_t n_err)
{
    NC_CHECK(ncclGetUniqueId((ncclUniqueId *)id), "ncclGetUniqueId");
    return 0;
}

static int p_comm_init(void **comm, const void *id, int nranks, int rank, int device, char *err,
                       size_t n_err)
{
    CU_CHECK(cudaSetDevice(device), "cudaSetDevice");
    ncclComm_t c;
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    NC_CHECK(ncclCommInitRank(&c, nranks, u, rank), "ncclCommInitRank");
    *comm = c;
    return 0;
}

static void p_comm_destroy(void *comm)
{
    if (comm) ncclCommDestroy((ncclComm_t)comm);
}

static int p_allreduce(void *comm, float *buf, int64_t count, void *stream, char *err, size_t n_err)
{
    NC_CHECK(ncclAllReduce(buf, buf, (size_t)count, ncclFloat32, ncclSum, (ncclComm_t)comm,
                           (cudaStream_t)stream),
             "ncclAllReduce");
    return 0;
}

static int p_stream_sync(void *stream, char *err, size_t n_err)
{
    CU_CHECK(cudaStreamSynchronize((cudaStream_t)stream), "cudaStreamSynchronize");
    return 0;
}

static int p_dev_alloc(void **p, size_t bytes, char *err, size_t n_err)
{
    CU_CHECK(cudaMalloc(p, bytes), "cudaMalloc");
    return 0;
}

static void p_dev_free(void *p) { cudaFree(p); }

static int p_copy(void *dst, const void *src, size_t bytes, int dir, char *err, size_t n_err)
{
    CU_CHECK(cudaMemcpy(dst, src, bytes, dir ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice),
             "cudaMemcpy");
    return 0;
}

extern "C" __attribute__((visibility("default"))) const hsi_nccl_plugin *hsi_nccl_plugin_entry(void)
{
    static hsi_nccl_plugin t;
    t.abi = HSI_NCCL_PLUGIN_ABI;
    t.size = sizeof t;
    t.version = NCCL_VERSION_CODE;
    t.device_count = p_device_count;
    t.unique_id = p_unique_id;
    t.comm_init = p_comm_init;
    t.comm_destroy = p_comm_destroy;
    t.allreduce_sum_f32 = p_allreduce;
    t.stream_sync = p_stream_sync;
    t.dev_alloc = p_dev_alloc;
    t.dev_free = p_dev_free;
    t.copy = p_copy;
    return &t;
}

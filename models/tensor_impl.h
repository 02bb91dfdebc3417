/* tensor_impl.h — helpers shared by the engine's own files (tensor.c, ops.c,
 * ops_layers.c, nn.c, optim.c): strided loops, argument checks. Not a public
 * header: library users include tensor.h. */
#ifndef HSI_TENSOR_IMPL_H
#define HSI_TENSOR_IMPL_H

#include "models/tensor.h"

/* dst += src elementwise over shape (ndim <= 5); strides in ELEMENTS, any
 * sign, zero allowed (a zero dst stride sums over that axis). dt: F32/F64. */
void hsi_eng_acc_strided(hsi_dtype dt, int ndim, const int64_t *shape, void *dst,
                         const int64_t *dst_strides, const void *src,
                         const int64_t *src_strides);
/* dst = src (same rules). */
void hsi_eng_copy_strided(hsi_dtype dt, int ndim, const int64_t *shape, void *dst,
                          const int64_t *dst_strides, const void *src,
                          const int64_t *src_strides);
/* Packed element strides of a shape. */
void hsi_eng_packed_strides(int ndim, const int64_t *shape, int64_t *strides);
/* Checks that t is a host float tensor (F32/F64); names the op and argument. */
hsi_status hsi_eng_check_float(const hsi_tensor *t, const char *op, const char *arg);
/* Returns a packed float version of x (x itself when already packed). */
hsi_status hsi_eng_packed(hsi_tensor **out, hsi_graph *g, hsi_tensor *x);
/* Shape as text "(2, 3, 4)" into buf. */
const char *hsi_eng_shape_str(char *buf, size_t n, int ndim, const int64_t *shape);
/* Allocates out; copies the flags of a tracked output. Arena memory, zeroed. */
void *hsi_eng_zeroed(hsi_graph *g, size_t size);

#endif

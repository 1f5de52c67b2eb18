// TMA tensor maps for the native kernels, encoded through the driver entry point that the
// runtime hands out (cudaGetDriverEntryPointByVersion): the library never links libcuda, so
// it loads, and fails cleanly, on machines without a driver.
#pragma once

#include <cstdint>

#include <cuda.h>

#include "moegemm/moegemm.h"

namespace moegemm::native {

/// A row-major [rows, k] matrix of 16-bit `type` at `base`, moved in boxes of
/// box_rows x box_k elements to or from 128-byte-swizzled shared memory (box_k * 2 == 128).
/// Boxes past the last row or column are zero-filled. Throws Error.
CUtensorMap make_kmajor_tensor_map(const void* base, moegemm_dtype_t type, int64_t rows,
                                   int64_t k, int box_rows, int box_k);

}  // namespace moegemm::native

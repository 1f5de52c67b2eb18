// TMA tensor maps for the native kernels, encoded through the driver entry point that the
// runtime hands out (cudaGetDriverEntryPointByVersion): the library never links libcuda, so
// it loads, and fails cleanly, on machines without a driver.
#pragma once

#include <cstdint>

#include <cuda.h>

#include "moegemm/moegemm.h"

namespace moegemm::native {

/// How much of L2 a box's row fetch fills. Widened: 256 bytes, so a 128-byte row piece brings
/// the row's next 128 bytes along (tiles that come back to the same rows soon: prefill).
/// Exact: only the bytes the box asks for. Decode streams each weight once in 128-byte row
/// pieces, one k-block per stage, and there the widened fills cost bandwidth: a TMA stream of
/// 128 x 64 boxes took 85.5 µs with 256-byte fills and 81.8 with exact ones for 355 MB
/// (bench/tools/start_delay.cu, bench/NOTES.md §34).
enum class L2Fill { Widened, Exact };

/// A row-major [rows, k] matrix of `type` (BF16, F16, or E4M3 moved as bytes) at `base`, moved
/// in boxes of box_rows x box_k elements to or from 128-byte-swizzled shared memory (box_k
/// elements are 128 bytes). Boxes past the last row or column are zero-filled. Throws Error.
CUtensorMap make_kmajor_tensor_map(const void* base, moegemm_dtype_t type, int64_t rows,
                                   int64_t k, int box_rows, int box_k,
                                   L2Fill fill = L2Fill::Widened);

/// The same matrix, boxes and shared-memory layout as make_kmajor_tensor_map (box_k elements of
/// 128 bytes by box_rows rows), described as a 4-D tensor (box_k elements, 8 rows, k / box_k
/// k-blocks, rows / 8 groups of rows) whose k-block stride (128 bytes) is below its row stride:
/// a box is 8-row atoms of one k-block, the 1 KB units of the 128-byte swizzle, landing where
/// the 2-D map's box puts them, but the TMA unit reads the rows of each atom before the next
/// atom's, and a stream of such boxes runs 0.5-1.7% faster (bench/NOTES.md §44). Boxes are
/// addressed as (0, 0, k-block, first row / 8). Requires k % box_k == 0, rows % 8 == 0 and
/// box_rows % 8 == 0 (nothing to zero-fill inside a group or k-block; groups past the last
/// are). Throws Error.
CUtensorMap make_kmajor_row_group_tensor_map(const void* base, moegemm_dtype_t type,
                                             int64_t rows, int64_t k, int box_rows, int box_k,
                                             L2Fill fill = L2Fill::Widened);

/// The weights [E, K, N] as a 3-D tensor (N innermost), moved in boxes of 64 K-rows x 64
/// N-values into 128-byte-swizzled shared memory; K-rows past K and columns past N are
/// zero-filled, never taken from the next expert. Throws Error.
CUtensorMap make_nmajor_weights_tensor_map(const void* base, moegemm_dtype_t type,
                                           int64_t experts, int64_t k, int64_t n,
                                           L2Fill fill = L2Fill::Widened);

}  // namespace moegemm::native

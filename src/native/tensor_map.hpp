// TMA tensor maps for the native kernels, encoded through the driver entry point that the
// runtime hands out (cudaGetDriverEntryPointByVersion): the library never links libcuda, so
// it loads, and fails cleanly, on machines without a driver.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda.h>

#include "moegemm/moegemm.h"

namespace moegemm::native {

/// How much of L2 a box's row fetch fills. Widened: 256 bytes, so a 128-byte row piece brings
/// the row's next 128 bytes along (tiles that come back to the same rows soon: prefill).
/// Exact: only the bytes the box asks for. Decode streams each weight once in 128-byte row
/// pieces, one k-block per stage, and there the widened fills only cost bandwidth.
enum class L2Fill { Widened, Exact };

/// A row-major [rows, k] matrix of `type` (BF16, F16, or E4M3 moved as bytes) at `base`, moved
/// in boxes of box_rows x box_k elements to or from 128-byte-swizzled shared memory (box_k
/// elements are 128 bytes). Boxes past the last row or column are zero-filled. Throws Error.
CUtensorMap make_kmajor_tensor_map(const void* base, moegemm_dtype_t type, int64_t rows,
                                   int64_t k, int box_rows, int box_k,
                                   L2Fill fill = L2Fill::Widened);

/// The weights [E, K, N] as a 3-D tensor (N innermost), moved in boxes of 64 K-rows x 64
/// N-values into 128-byte-swizzled shared memory; K-rows past K and columns past N are
/// zero-filled, never taken from the next expert. Throws Error.
CUtensorMap make_nmajor_weights_tensor_map(const void* base, moegemm_dtype_t type,
                                           int64_t experts, int64_t k, int64_t n,
                                           L2Fill fill = L2Fill::Widened);

/// The rank, dimensions (innermost first), byte strides and box of the gate/up map (pure,
/// CPU-tested).
struct GateUpMapShape {
    int rank;
    cuuint64_t dims[5];
    cuuint64_t strides[4];
    cuuint32_t box[5];
};
GateUpMapShape gate_up_map_shape(int64_t experts, int64_t n, int64_t k, std::size_t element_bytes,
                                 int box_rows, int box_k, bool interleaved, int group);

/// The weights [E, n, K] of a gated activation, whose n rows are n / 2 gate and up pairs (two
/// halves, or interleaved), for B tiles of `box_rows` rows x box_k elements in which `group`
/// pairs' first rows come before the same pairs' second rows (gate_up_group), so that an
/// epilogue thread holds both values of a pair (epilogue_ops.cuh). Groups of 8 (swap-AB):
/// a 5-D map whose one box is the whole tile. Larger groups: a 4-D map (k, pair, kind,
/// expert) whose box is one group of one kind. n / 2 must be a multiple of 8. Throws Error.
CUtensorMap make_gate_up_weights_tensor_map(const void* base, moegemm_dtype_t type,
                                            int64_t experts, int64_t n, int64_t k, int box_rows,
                                            int box_k, bool interleaved, int group,
                                            L2Fill fill = L2Fill::Widened);

}  // namespace moegemm::native

// The entry points of the native grouped GEMM instances, by type and tile width, as plain
// function pointers so that host-only code can pick one without seeing device templates.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "moegemm/moegemm.h"
#include "native/grouped_gemm_params.hpp"

namespace moegemm::native {

struct GroupedGemmEntry {
    cudaError_t (*configure)();
    /// Pipeline stages for `experts` experts: the plan puts them in GroupedGemmParams::stages.
    int (*stages)(int experts);
    /// The stages with which fp8 BLOCK scales are staged in shared memory with `experts`
    /// experts (as many as fit, or one fewer), or 0 where they do not fit.
    int (*block_scale_ring_stages)(int experts);
    /// Where they are staged with `experts` experts and `stages` stages
    /// (GroupedGemmParams::block_scale_ring).
    int (*block_scale_ring)(int experts, int stages);
    /// templates: see TensorMapIndex; the D map (64 x 64 boxes, 128-byte swizzle) is read by
    /// the TMA-store epilogue only.
    cudaError_t (*launch)(const TensorMapTemplates& templates, const GroupedGemmParams& params,
                          int grid, cudaStream_t stream);
};

/// What selects an instance besides the types.
struct GroupedGemmShape {
    int block_m;    ///< tile rows: 128, or 64 (with block_n 256, register epilogue only)
    int block_n;    ///< tile columns: 128 or 256
    bool tma_store; ///< TMA-store epilogue (16-bit outputs, 128-row tiles)
    int cluster_n;  ///< CTAs per cluster along N sharing the A tile: 1 or 2
    bool n_major_b; ///< B is [E, K, N] (map_b 3-D, 64 x 64 boxes) instead of [E, N, K]
    bool swap_ab;   ///< weights as wgmma's A, tokens as its B (decode)
};

/// Whether swap-AB instances exist for `shape` (its block_n, 128 or 256, picks one): 64-row
/// tiles on single CTAs with the register epilogue.
constexpr bool has_swap_ab_instance(const GroupedGemmShape& shape) {
    return shape.swap_ab && shape.block_m == 64 && !shape.tma_store && shape.cluster_n == 1 &&
           (shape.block_n == 128 || shape.block_n == 256);
}

/// The instance for `shape` and output `out`; a null entry when none was built. One function
/// per input type, each in its own translation unit. With cluster_n == 2, each CTA reads
/// (at most) block_m / 2 rows of A per box.
GroupedGemmEntry grouped_gemm_bf16(const GroupedGemmShape& shape, moegemm_dtype_t out);
GroupedGemmEntry grouped_gemm_f16(const GroupedGemmShape& shape, moegemm_dtype_t out);
/// E4M3 inputs: 128 x {128, 256} and 64 x {128, 256} tiles, swap-AB or not, [E, N, K] weights,
/// BF16 (either epilogue on 128-row tiles) or F32 output.
GroupedGemmEntry grouped_gemm_e4m3(const GroupedGemmShape& shape, moegemm_dtype_t out);

}  // namespace moegemm::native

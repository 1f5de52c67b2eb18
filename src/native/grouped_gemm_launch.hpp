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
    /// map_d: D as a [rows, n] tensor in 64 x 64 boxes with 128-byte swizzle, for 16-bit
    /// outputs (ignored for F32).
    cudaError_t (*launch)(const CUtensorMap& map_a, const CUtensorMap& map_b,
                          const CUtensorMap& map_d, const GroupedGemmParams& params, int grid,
                          cudaStream_t stream);
};

/// The instance for output `out`, tile width `block_n` (128 or 256), epilogue (`staged`:
/// shared memory + TMA store, 16-bit outputs only) and CTAs per cluster along N (`cluster_n`,
/// 1 or 2; with 2, A is read in boxes of 64 rows); a null entry when none was built. One
/// function per input type, each in its own translation unit.
GroupedGemmEntry grouped_gemm_bf16(moegemm_dtype_t out, int block_n, bool staged, int cluster_n);
GroupedGemmEntry grouped_gemm_f16(moegemm_dtype_t out, int block_n, bool staged, int cluster_n);

}  // namespace moegemm::native

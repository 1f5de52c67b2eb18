// Instances of the native grouped GEMM with E4M3 inputs: 128 x 128 and 128 x 256 tiles, and
// 64 x 256, 64 x 128 and 64 x 128 swap-AB for decode (each consumer thread holds the fp32 accumulators and the promotion
// temporaries of one 128-column half of a k-block), [E, N, K] weights, BF16 output through
// either epilogue (the TMA-store one on 128-row tiles) or F32 output from registers, clusters
// of 1 or 2.
#include "native/grouped_gemm_launch.hpp"
#include "native/sm90_grouped_gemm.cuh"

namespace moegemm::native {

namespace {
using In = __nv_fp8_e4m3;

template <typename Out, int BlockM, int BlockN, bool Staged, int ClusterN, bool SwapAB = false>
constexpr GroupedGemmEntry entry() {
    return {configure_grouped_gemm<In, Out, BlockM, BlockN, Staged, ClusterN, false, SwapAB>,
            grouped_gemm_stages<BlockM, BlockN, Staged>,
            grouped_gemm_block_scale_ring_stages<BlockM, BlockN, Staged>,
            grouped_gemm_block_scale_ring<BlockM, BlockN, Staged>,
            launch_grouped_gemm<In, Out, BlockM, BlockN, Staged, ClusterN, false, SwapAB>};
}

template <int BlockM, int BlockN, bool Staged>
GroupedGemmEntry by_output(moegemm_dtype_t out, int cluster_n) {
    if (out == MOEGEMM_DTYPE_BF16) {
        return cluster_n == 2 ? entry<__nv_bfloat16, BlockM, BlockN, Staged, 2>()
                              : entry<__nv_bfloat16, BlockM, BlockN, Staged, 1>();
    }
    if constexpr (!Staged) {
        if (out == MOEGEMM_DTYPE_F32)
            return cluster_n == 2 ? entry<float, BlockM, BlockN, false, 2>()
                                  : entry<float, BlockM, BlockN, false, 1>();
    }
    return {};
}

// Swap-AB decode: 64 x 128 tiles on single CTAs, the register epilogue (no BLOCK scales:
// can_implement).
template <int BlockN>
GroupedGemmEntry swapped(moegemm_dtype_t out) {
    if (out == MOEGEMM_DTYPE_BF16) return entry<__nv_bfloat16, 64, BlockN, false, 1, true>();
    if (out == MOEGEMM_DTYPE_F32) return entry<float, 64, BlockN, false, 1, true>();
    return {};
}

template <int BlockN>
GroupedGemmEntry by_epilogue(const GroupedGemmShape& shape, moegemm_dtype_t out) {
    return shape.staged ? by_output<128, BlockN, true>(out, shape.cluster_n)
                        : by_output<128, BlockN, false>(out, shape.cluster_n);
}
}  // namespace

GroupedGemmEntry grouped_gemm_e4m3(const GroupedGemmShape& shape, moegemm_dtype_t out) {
    if (shape.n_major_b) return {};
    if (shape.cluster_n != 1 && shape.cluster_n != 2) return {};
    if (shape.swap_ab) {
        if (!has_swap_ab_instance(shape)) return {};
        return shape.block_n == 128 ? swapped<128>(out) : swapped<256>(out);
    }
    if (shape.block_m == 64) {
        // Decode: the two consumers take 128 (or 64) columns each of the 64 rows.
        if (shape.staged) return {};
        if (shape.block_n == 256) return by_output<64, 256, false>(out, shape.cluster_n);
        if (shape.block_n == 128) return by_output<64, 128, false>(out, shape.cluster_n);
        return {};
    }
    if (shape.block_m != 128) return {};
    if (shape.block_n == 128) return by_epilogue<128>(shape, out);
    if (shape.block_n == 256) return by_epilogue<256>(shape, out);
    return {};
}

}  // namespace moegemm::native

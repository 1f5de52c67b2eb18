// Instances of the native grouped GEMM with E4M3 inputs: 128 x 128 and 128 x 256 tiles, and
// 64 x 256, 64 x 128 and swap-AB 64 x 128 / 64 x 256 for decode; [E, N, K] weights; BF16
// output through either epilogue (TMA stores on 128-row tiles) or F32 output from registers;
// clusters of 1 or 2.
#include "native/grouped_gemm_launch.hpp"
#include "native/sm90/grouped_gemm_kernel.cuh"

namespace moegemm::native {

namespace {
using In = __nv_fp8_e4m3;
constexpr EpilogueKind kRegister = EpilogueKind::Register;
constexpr EpilogueKind kTmaStore = EpilogueKind::TmaStore;

template <typename Out, int BlockM, int BlockN, EpilogueKind Epilogue, int ClusterN,
          bool SwapAB = false>
GroupedGemmEntry entry() {
    return grouped_gemm_entry<
        KernelTraits<In, Out, BlockM, BlockN, Epilogue, ClusterN, false, SwapAB>>();
}

template <int BlockM, int BlockN, EpilogueKind Epilogue>
GroupedGemmEntry by_output(moegemm_dtype_t out, int cluster_n) {
    if (out == MOEGEMM_DTYPE_BF16) {
        return cluster_n == 2 ? entry<__nv_bfloat16, BlockM, BlockN, Epilogue, 2>()
                              : entry<__nv_bfloat16, BlockM, BlockN, Epilogue, 1>();
    }
    if constexpr (Epilogue == kRegister) {
        if (out == MOEGEMM_DTYPE_F32)
            return cluster_n == 2 ? entry<float, BlockM, BlockN, kRegister, 2>()
                                  : entry<float, BlockM, BlockN, kRegister, 1>();
    }
    return {};
}

// Swap-AB decode: single CTAs, the register epilogue (no BLOCK scales: can_implement).
template <int BlockN>
GroupedGemmEntry swapped(moegemm_dtype_t out) {
    if (out == MOEGEMM_DTYPE_BF16) return entry<__nv_bfloat16, 64, BlockN, kRegister, 1, true>();
    if (out == MOEGEMM_DTYPE_F32) return entry<float, 64, BlockN, kRegister, 1, true>();
    return {};
}

template <int BlockN>
GroupedGemmEntry by_epilogue(const GroupedGemmShape& shape, moegemm_dtype_t out) {
    return shape.tma_store ? by_output<128, BlockN, kTmaStore>(out, shape.cluster_n)
                           : by_output<128, BlockN, kRegister>(out, shape.cluster_n);
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
        if (shape.tma_store) return {};
        if (shape.block_n == 256) return by_output<64, 256, kRegister>(out, shape.cluster_n);
        if (shape.block_n == 128) return by_output<64, 128, kRegister>(out, shape.cluster_n);
        return {};
    }
    if (shape.block_m != 128) return {};
    if (shape.block_n == 128) return by_epilogue<128>(shape, out);
    if (shape.block_n == 256) return by_epilogue<256>(shape, out);
    return {};
}

}  // namespace moegemm::native

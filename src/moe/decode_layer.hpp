// The MoE layer for a few tokens (decode): two kernels instead of routing, FC1, FC2 and the
// combine.
//
// At a few tokens the layer is a stream of the touched experts' weights, a few hundred KB to a
// few hundred MB, each element used by one or a few rows. The grouped GEMM path spends fixed
// costs there that no weight stream hides: four to five launches, a tile schedule per GEMM,
// waves of 128-row tiles that leave SMs idle when few experts are touched. These kernels
// spread the weight rows of the touched experts over every warp of the grid instead, dot them
// with the token rows on the CUDA cores (fp32), and fuse everything around them:
//
//   FC1 kernel: every block routes the choices itself (at most kDecodeMaxChoices, in one
//     warp), stages x's rows in shared memory, then each warp takes
//     (expert, output column) items: the gate and up rows of a gated activation (or two
//     adjacent rows), dotted with the expert's token rows; alpha, bias and the activation
//     applied, the result rounded to the layer's type into h [choice, I] in the workspace.
//   FC2 kernel: routes again (before it waits for FC1, so that it can prefetch its weight rows
//     into L2 while FC1 streams its own), stages h in shared memory, then each warp takes
//     output columns n of the hidden dimension: for every routed choice, the dot of its
//     expert's w2 row n with h, alpha and bias applied and rounded to the layer's type (FC2's
//     output as the GEMM path stores it), then out[t, n] = sum over j in increasing j of
//     topk_weights[t, j] * y[t, j] in fp32 with separate roundings (the GEMM path's combine,
//     bit for bit given the same y).
//
// Every value is a fixed-order sum, so results are bitwise reproducible. They equal the GEMM
// path's up to the order of FC1's and FC2's fp32 sums. Hostile ids and device token counts
// are dropped, clamped and flagged as routing does (routing.hpp).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "moegemm/moegemm.h"

namespace moegemm::moe {

/// Choices (tokens x top_k) the decode kernels take, routed in one warp, one per lane: where
/// they beat the grouped GEMM path (docs/design.md has the measurements).
inline constexpr int64_t kDecodeMaxChoices = 32;
/// Shared memory each decode kernel stages its input rows in (x for FC1, h for FC2): small
/// enough for two blocks on one SM.
inline constexpr int64_t kDecodeStageBytes = 96 * 1024;

/// What the decode kernels need to know of the layer; fixed for a plan.
struct DecodeShape {
    int32_t num_experts = 0;
    int32_t first_expert = 0;
    int32_t local_experts = 0;
    int32_t top_k = 0;
    int64_t hidden = 0;        ///< H, a multiple of 8
    int64_t intermediate = 0;  ///< I, a multiple of 8
    int64_t max_tokens = 0;
    moegemm_dtype_t dtype = MOEGEMM_DTYPE_BF16;  ///< x, weights, biases, out: BF16 or F16
    moegemm_activation_t activation = MOEGEMM_ACTIVATION_NONE;
    moegemm_gate_layout_t gate_layout = MOEGEMM_GATE_UP_HALVES;
    float activation_alpha = 0.0f;
    float activation_limit = 0.0f;
    bool ids_int64 = false;
};

/// The most tokens an execution may have for the decode kernels: choices within
/// kDecodeMaxChoices, x's rows and FC1's output rows within kDecodeStageBytes. 0 when not even
/// one token fits. Pure (CPU-tested).
inline int64_t decode_token_limit(const DecodeShape& s) {
    if (s.top_k < 1 || s.hidden < 1 || s.intermediate < 1) return 0;
    const int64_t element = 2;  // BF16 or F16
    const int64_t by_choices = kDecodeMaxChoices / s.top_k;
    const int64_t by_x = kDecodeStageBytes / (s.hidden * element);
    const int64_t by_h = kDecodeStageBytes / (s.intermediate * element * s.top_k);
    return std::max<int64_t>(0, std::min({by_choices, by_x, by_h, s.max_tokens}));
}

/// One execution's tensors (moegemm_moe_tensors_t's, checked by the plan).
struct DecodeTensors {
    const void* x;
    const void* topk_ids;
    const float* topk_weights;
    const void* w1;
    const void* w2;
    const void* b1;  ///< NULL: no bias
    const void* b2;
    const float* alpha1;  ///< NULL: 1
    const float* alpha2;
    void* out;
    int64_t num_tokens;                ///< when num_tokens_device is NULL
    const int32_t* num_tokens_device;  ///< clamped to [0, max_tokens] and flagged
};

/// Lets the decode kernels of `dtype` (BF16 or F16) take kDecodeStageBytes of shared memory on
/// the current device. Throws Error on failure.
void prepare_decode_layer(moegemm_dtype_t dtype);

/// Enqueues the two kernels on `stream`. T (num_tokens, or max_tokens with a device count)
/// must be at most decode_token_limit(shape). h: [T * top_k, I] of dtype in the workspace,
/// 16-byte aligned. status_word: the layer's (MOEGEMM_ROWS_CLAMPED_INDEX,
/// MOEGEMM_SIZES_CLAMPED_*; trace_bit too when not 0, tests only). l2_bytes: the device's L2,
/// which bounds FC2's prefetch. Throws Error for a failed launch.
void launch_decode_layer(const DecodeShape& shape, const DecodeTensors& tensors, void* h,
                         uint32_t* status_word, uint32_t trace_bit, int32_t sm_count,
                         std::size_t l2_bytes, bool dependent_launch, cudaStream_t stream);

}  // namespace moegemm::moe

// E4M3 quantization of the fp8 MoE layer's activations (weight_scales BLOCK): x on its way
// into expert order for FC1, and FC1's activated output for FC2, each in groups of 1 x 128
// along a row, the A-side layout of the grouped GEMM's BLOCK scale mode ([rows, ceil(K / 128)]
// fp32 scales beside [rows, K] codes).
//
// A group's scale is amax / 448 (0 for a group of zeros); each value's code is x / scale
// rounded to nearest even and saturated at 448 (e4m3_code). The division and the conversion
// are IEEE-exact on host and device, so a host reference reproduces every code and scale bit
// for bit.
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "moe/routing.hpp"
#include "moegemm/moegemm.h"

namespace moegemm::moe {

inline constexpr int64_t kQuantGroup = 128;
inline constexpr float kE4m3Max = 448.0f;

/// Scales per row of `columns` values.
constexpr int64_t quant_groups(int64_t columns) { return (columns + kQuantGroup - 1) / kQuantGroup; }

/// The scale of a group whose largest magnitude is `amax`.
__host__ __device__ inline float group_scale(float amax) { return amax / kE4m3Max; }

/// The E4M3 code of `x` in a group of scale `scale`: x / scale rounded to nearest even,
/// saturated at +-448; 0 in a group of zeros (scale 0).
__host__ __device__ inline uint8_t e4m3_code(float x, float scale) {
    return scale > 0.0f ? static_cast<uint8_t>(__nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE,
                                                                     __NV_E4M3))
                        : uint8_t{0};
}

/// Enqueues the quantizing token copy (one kernel): for every choice i < T * top_k whose row
/// r = row_of_choice[i] is in [0, max_tokens * top_k), codes[r, :] and scales[r, :] quantize
/// x[i / top_k, :] (BF16, shape.hidden columns, a multiple of 16). codes: [rows, H] bytes,
/// scales: fp32 [rows, quant_groups(H)], both 16-byte aligned. T, dependent_launch and
/// sm_count as launch_gather_tokens (routing.hpp).
void launch_quantize_tokens(const CombineShape& shape, const void* x, const int32_t* row_of_choice,
                            int64_t num_tokens, const int32_t* num_tokens_device, void* codes,
                            float* scales, int32_t sm_count, bool dependent_launch,
                            cudaStream_t stream);

/// What the activation between the fp8 layer's GEMMs needs to know; fixed for a plan.
struct ActivationShape {
    int64_t intermediate = 0;   ///< I: output columns, a positive multiple of 16
    moegemm_activation_t activation = MOEGEMM_ACTIVATION_NONE;  ///< gated: h has 2I columns
    moegemm_gate_layout_t gate_layout = MOEGEMM_GATE_UP_HALVES;
    float alpha = 0.0f, limit = 0.0f;  ///< SWIGLU_CLAMPED's
    int32_t local_experts = 0;
    int64_t max_rows = 0;       ///< rows of h, codes and scales
};

/// Enqueues FC1's activation and quantization (one kernel): for the rows below the sum of
/// expert_sizes (device int32 [local_experts], read on the GPU), codes[r, :] and scales[r, :]
/// quantize act(h[r, :]) (h BF16 [rows, 2I or I], the gate and up columns laid out as
/// gate_layout says; codes [rows, I] bytes; scales fp32 [rows, quant_groups(I)]).
void launch_activate_quantize(const ActivationShape& shape, const void* h,
                              const int32_t* expert_sizes, void* codes, float* scales,
                              int32_t sm_count, bool dependent_launch, cudaStream_t stream);

}  // namespace moegemm::moe

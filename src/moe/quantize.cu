// The fp8 MoE layer's quantizing kernels (interface and rounding: quantize.hpp): x's token rows
// into expert order as E4M3, and FC1's product through the activation into E4M3.
//
// Design. One warp per row at a time (launch.hpp's row kernels), one 128-column group per
// step: lane l holds the group's columns 4l..4l+3, the group's amax is a warp maximum, and
// each lane writes its four codes as one 32-bit word (lane 0 the scale). Warps stride over the
// rows, so the grid is fixed by the plan and blocks past the work exit at once.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "error.hpp"
#include "moe/launch.hpp"
#include "moe/quantize.hpp"
#include "native/sm90/epilogue_ops.cuh"
#include "problem.hpp"

namespace moegemm::moe {
namespace {

namespace ptx = ::moegemm::native::ptx;

/// Quantizes a group held 4 values per lane (lanes past the row's end hold zeros): returns the
/// lane's four codes packed (column 4l in the low byte) and the group's scale in `scale`.
__device__ __forceinline__ uint32_t quantize_group(const float (&v)[4], float* scale) {
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    *scale = group_scale(amax);
    uint32_t packed = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) packed |= uint32_t{e4m3_code(v[i], *scale)} << (8 * i);
    return packed;
}

struct QuantizeTokensParams {
    const __nv_bfloat16* x;  // [max_tokens, hidden]
    RoutedChoices choices;
    int64_t hidden;
    uint32_t* codes;  // [max_tokens * top_k, hidden / 4]
    float* scales;    // [max_tokens * top_k, groups]
    int64_t groups;
};

__global__ void __launch_bounds__(kRowThreads, kRowBlocksPerSm)
    quantize_tokens_kernel(QuantizeTokensParams p) {
    ptx::allow_dependent_grids();
    ptx::wait_for_prior_grids();
    for_each_routed_choice(p.choices, [&](int64_t i, int32_t row, int lane) {
        const __nv_bfloat16* src = p.x + (i / p.choices.top_k) * p.hidden;
        for (int64_t g = 0; g < p.groups; ++g) {
            const int64_t col = g * kQuantGroup + 4 * lane;  // hidden % 4 == 0: all 4 or none
            float v[4] = {};
            if (col < p.hidden) {
                const uint2 raw = *reinterpret_cast<const uint2*>(src + col);
                const auto* pair = reinterpret_cast<const __nv_bfloat162*>(&raw);
                const float2 lo = __bfloat1622float2(pair[0]), hi = __bfloat1622float2(pair[1]);
                v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
            }
            float scale = 0.0f;
            const uint32_t packed = quantize_group(v, &scale);
            if (col < p.hidden) p.codes[(row * p.hidden + col) / 4] = packed;
            if (lane == 0) p.scales[row * p.groups + g] = scale;
        }
    });
}

struct ActivateParams {
    const __nv_bfloat16* h;      // [max_rows, h_cols]
    const int32_t* expert_sizes; // [local_experts]
    int32_t local_experts;
    int64_t max_rows;
    int64_t intermediate;        // I: output columns
    int64_t h_cols;              // 2I (gated) or I
    int64_t gate_offset, up_offset, pair_stride;  // gated: column of output j's gate / up =
                                                  // offset + pair_stride * j
    moegemm_activation_t activation;
    float alpha, limit;
    uint32_t* codes;             // [max_rows, I / 4]
    float* scales;               // [max_rows, groups]
    int64_t groups;
};

/// act(h[row, j]) for a plain activation, or the gated one of j's gate and up columns.
__device__ __forceinline__ float activated(const ActivateParams& p, const __nv_bfloat16* row,
                                           int64_t j) {
    using namespace ::moegemm::native;
    switch (p.activation) {
        case MOEGEMM_ACTIVATION_SILU: return silu(__bfloat162float(row[j]));
        case MOEGEMM_ACTIVATION_GELU_TANH: return gelu_tanh(__bfloat162float(row[j]));
        case MOEGEMM_ACTIVATION_NONE: return __bfloat162float(row[j]);
        default: break;
    }
    const float gate = __bfloat162float(row[p.gate_offset + p.pair_stride * j]);
    const float up = __bfloat162float(row[p.up_offset + p.pair_stride * j]);
    switch (p.activation) {
        case MOEGEMM_ACTIVATION_GEGLU: return Geglu{}(gate, up);
        case MOEGEMM_ACTIVATION_SWIGLU_CLAMPED: return ClampedSwiglu{p.alpha, p.limit}(gate, up);
        default: return Swiglu{}(gate, up);
    }
}

__global__ void __launch_bounds__(kRowThreads, kRowBlocksPerSm)
    activate_quantize_kernel(ActivateParams p) {
    ptx::allow_dependent_grids();
    ptx::wait_for_prior_grids();
    const int lane = static_cast<int>(threadIdx.x % 32);
    // The routed rows: the sum of the expert sizes (each warp adds them up itself).
    int64_t rows = 0;
    for (int32_t e = lane; e < p.local_experts; e += 32) rows += p.expert_sizes[e];
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
        rows += __shfl_xor_sync(0xffffffffu, rows, offset);
    rows = rows < p.max_rows ? rows : p.max_rows;
    const int64_t warps = int64_t{gridDim.x} * kRowWarps;
    for (int64_t r = int64_t{blockIdx.x} * kRowWarps + threadIdx.x / 32; r < rows; r += warps) {
        const __nv_bfloat16* row = p.h + r * p.h_cols;
        for (int64_t g = 0; g < p.groups; ++g) {
            const int64_t col = g * kQuantGroup + 4 * lane;  // I % 4 == 0: all 4 or none
            float v[4] = {};
            if (col < p.intermediate) {
#pragma unroll
                for (int i = 0; i < 4; ++i) v[i] = activated(p, row, col + i);
            }
            float scale = 0.0f;
            const uint32_t packed = quantize_group(v, &scale);
            if (col < p.intermediate) p.codes[(r * p.intermediate + col) / 4] = packed;
            if (lane == 0) p.scales[r * p.groups + g] = scale;
        }
    }
}


}  // namespace

void launch_quantize_tokens(const CombineShape& shape, const void* x, const int32_t* row_of_choice,
                            int64_t num_tokens, const int32_t* num_tokens_device, void* codes,
                            float* scales, int32_t sm_count, bool dependent_launch,
                            cudaStream_t stream) {
    (void)combine_grid(shape, sm_count);  // checks the shape (the same as the combine's)
    require(shape.dtype == MOEGEMM_DTYPE_BF16 && shape.hidden % 16 == 0,
            MOEGEMM_STATUS_NOT_SUPPORTED,
            "fp8 quantization: x must be BF16 with a multiple of 16 columns (hidden = {})",
            shape.hidden);
    require_aligned16("fp8 token quantization", "x, codes and scales", {x, codes, scales});
    QuantizeTokensParams params{};
    params.x = static_cast<const __nv_bfloat16*>(x);
    params.choices = {row_of_choice, num_tokens_device, num_tokens, shape.max_tokens, shape.top_k};
    params.hidden = shape.hidden;
    params.codes = static_cast<uint32_t*>(codes);
    params.scales = scales;
    params.groups = quant_groups(shape.hidden);
    launch_layer_kernel(quantize_tokens_kernel, "quantize_tokens_kernel",
                        row_grid(shape.max_tokens * shape.top_k, sm_count), kRowThreads, 0,
                        dependent_launch, stream, params);
}

void launch_activate_quantize(const ActivationShape& shape, const void* h,
                              const int32_t* expert_sizes, void* codes, float* scales,
                              int32_t sm_count, bool dependent_launch, cudaStream_t stream) {
    require(shape.intermediate > 0 && shape.intermediate % 16 == 0 && shape.local_experts > 0 &&
                shape.max_rows > 0,
            MOEGEMM_STATUS_INVALID_VALUE,
            "fp8 activation: intermediate {} (a positive multiple of 16), {} experts, {} rows",
            shape.intermediate, shape.local_experts, shape.max_rows);
    require_aligned16("fp8 activation", "h, codes and scales", {h, codes, scales});
    const bool gated = is_gated(shape.activation);
    const bool interleaved = shape.gate_layout == MOEGEMM_GATE_UP_INTERLEAVED;
    const bool up_first = shape.gate_layout == MOEGEMM_UP_GATE_HALVES;
    ActivateParams params{};
    params.h = static_cast<const __nv_bfloat16*>(h);
    params.expert_sizes = expert_sizes;
    params.local_experts = shape.local_experts;
    params.max_rows = shape.max_rows;
    params.intermediate = shape.intermediate;
    params.h_cols = gated ? 2 * shape.intermediate : shape.intermediate;
    params.pair_stride = interleaved ? 2 : 1;
    params.gate_offset = interleaved ? 0 : (up_first ? shape.intermediate : 0);
    params.up_offset = interleaved ? 1 : (up_first ? 0 : shape.intermediate);
    params.activation = shape.activation;
    params.alpha = shape.alpha;
    params.limit = shape.limit;
    params.codes = static_cast<uint32_t*>(codes);
    params.scales = scales;
    params.groups = quant_groups(shape.intermediate);
    launch_layer_kernel(activate_quantize_kernel, "activate_quantize_kernel",
                        row_grid(shape.max_rows, sm_count), kRowThreads, 0, dependent_launch, stream,
                        params);
}

}  // namespace moegemm::moe

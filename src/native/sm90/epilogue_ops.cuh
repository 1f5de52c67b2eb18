// The epilogue's fused operations on a tile's fp32 sums, in the header's order: the expert's
// alpha, the row's scale, the column's bias, then the activation; gated activations fold each
// gate and up pair into one output column. Served for 16-bit inputs (GroupedGemmParams::
// fused_epilogue); the plain product skips all of it with one test per tile.
#pragma once

#include "native/sm90/kernel_traits.cuh"

namespace moegemm::native {

__device__ __forceinline__ float tanh_approx(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float sigmoid(float x) { return __fdividef(1.0f, 1.0f + __expf(-x)); }
__device__ __forceinline__ float silu(float x) { return x * sigmoid(x); }
__device__ __forceinline__ float gelu_tanh(float x) {
    // sqrt(2 / pi) (x + 0.044715 x^3)
    const float inner = 0.7978845608f * fmaf(0.044715f * x, x * x, x);
    return 0.5f * x * (1.0f + tanh_approx(inner));
}

/// A plain (not gated) activation.
__device__ __forceinline__ float activate(int32_t activation, float x) {
    switch (activation) {
        case MOEGEMM_ACTIVATION_SILU: return silu(x);
        case MOEGEMM_ACTIVATION_GELU_TANH: return gelu_tanh(x);
        default: return x;
    }
}

/// A gated activation of one gate and up pair.
__device__ __forceinline__ float activate_gated(const GroupedGemmParams& p, float gate, float up) {
    switch (p.activation) {
        case MOEGEMM_ACTIVATION_GEGLU: return gelu_tanh(gate) * up;
        case MOEGEMM_ACTIVATION_SWIGLU_CLAMPED: {
            const float g = fminf(gate, p.activation_limit);
            const float u = fminf(fmaxf(up, -p.activation_limit), p.activation_limit);
            return (u + 1.0f) * g * sigmoid(p.activation_alpha * g);
        }
        default: return silu(gate) * up;  // SWIGLU
    }
}

/// The output of a pair as the gate/up map delivers it: the first kind, then the second (gate
/// then up, or up then gate for UP_GATE_HALVES).
__device__ __forceinline__ float fold_pair(const GroupedGemmParams& p, float first, float second) {
    return p.up_first ? activate_gated(p, second, first) : activate_gated(p, first, second);
}

/// The column of B (and of the bias) whose sum sits at column `s` of the product as the kernel
/// computes it (gate_up_row when B is read through the gate/up map).
__device__ __forceinline__ int32_t product_column(const GroupedGemmParams& p, int32_t s) {
    if (!p.gated) return s;
    return gate_up_row(s, p.n, p.gate_layout == MOEGEMM_GATE_UP_INTERLEAVED);
}

/// bias[expert, column] as fp32 (0 without a bias or past N).
__device__ __forceinline__ float bias_at(const GroupedGemmParams& p, int32_t expert, int32_t s) {
    if (p.bias == nullptr || s >= p.n) return 0.0f;
    const int64_t at = static_cast<int64_t>(expert) * p.n + product_column(p, s);
    switch (p.bias_type) {
        case MOEGEMM_DTYPE_F16: return __half2float(static_cast<const __half*>(p.bias)[at]);
        case MOEGEMM_DTYPE_F32: return static_cast<const float*>(p.bias)[at];
        default: return __bfloat162float(static_cast<const __nv_bfloat16*>(p.bias)[at]);
    }
}

/// alpha[expert] * row_scale[row] for a row of D (`row` < 0: a row past the expert's, whose
/// result is never stored, and whose scale is not read).
__device__ __forceinline__ float row_factor(const GroupedGemmParams& p, int32_t expert, int64_t row) {
    const float alpha = p.alpha ? p.alpha[expert] : 1.0f;
    return p.row_scale && row >= 0 ? alpha * p.row_scale[row] : alpha;
}

/// A consumer's fragment (acc[4j + 2h + q]: row `row0` + 8h, column `col0` + 8j + q; rows
/// from `row0` are the expert's while below `expert_rows`, counted from `row_base`):
/// x = acc * alpha * row_scale + bias, then a plain activation.
template <int Count>
__device__ __forceinline__ void scale_bias_activate(float (&acc)[Count], const GroupedGemmParams& p,
                                                    int32_t expert, int64_t row_base,
                                                    int32_t row0, int32_t expert_rows,
                                                    int32_t col0) {
    float factor[2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
        factor[h] = row_factor(p, expert, row0 + 8 * h < expert_rows ? row_base + row0 + 8 * h : -1);
#pragma unroll
    for (int j = 0; j < Count / 4; ++j) {
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            const float bias = bias_at(p, expert, col0 + 8 * j + q);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float& x = acc[4 * j + 2 * h + q];
                x = fmaf(x, factor[h], bias);
                if (!p.gated) x = activate(p.activation, x);
            }
        }
    }
}

/// Gated: folds the fragment's pairs of 8-column groups (2m: the first kind, 2m + 1: the
/// second; product_column) into `out`, a fragment of half the columns (out[4m + 2h + q]).
template <int Count>
__device__ __forceinline__ void fold_gate_up(const float (&acc)[Count], float (&out)[Count / 2],
                                             const GroupedGemmParams& p) {
#pragma unroll
    for (int m = 0; m < Count / 8; ++m) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            out[4 * m + i] = fold_pair(p, acc[8 * m + i], acc[8 * m + 4 + i]);
        }
    }
}

/// Swap-AB's fragment of one 64-column weight block (acc[4j + 2h + q]: column `col` + 8h, token
/// `token0` + 8j + q, the expert's while below `expert_rows`, counted from `row_base`): as
/// scale_bias_activate.
template <int Count>
__device__ __forceinline__ void scale_bias_activate_swapped(float (&acc)[Count],
                                                            const GroupedGemmParams& p,
                                                            int32_t expert, int64_t row_base,
                                                            int32_t token0, int32_t expert_rows,
                                                            int32_t col) {
    const float bias[2] = {bias_at(p, expert, col), bias_at(p, expert, col + 8)};
#pragma unroll
    for (int j = 0; j < Count / 4; ++j) {
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            const int32_t token = token0 + 8 * j + q;
            const float factor = row_factor(p, expert, token < expert_rows ? row_base + token : -1);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float& x = acc[4 * j + 2 * h + q];
                x = fmaf(x, factor, bias[h]);
                if (!p.gated) x = activate(p.activation, x);
            }
        }
    }
}

/// Gated swap-AB: the gate/up pair of a token sits at h = 0 and h = 1 (the weight block's rows
/// 16 w + 8 g + i_lo); out[2j + q] is the token's output column.
template <int Count>
__device__ __forceinline__ void fold_gate_up_swapped(const float (&acc)[Count],
                                                     float (&out)[Count / 2],
                                                     const GroupedGemmParams& p) {
#pragma unroll
    for (int j = 0; j < Count / 4; ++j) {
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            out[2 * j + q] = fold_pair(p, acc[4 * j + q], acc[4 * j + 2 + q]);
        }
    }
}

}  // namespace moegemm::native

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

/// The gated activations, each on one gate and up pair.
struct Swiglu {
    __device__ __forceinline__ float operator()(float gate, float up) const {
        return silu(gate) * up;
    }
};
struct Geglu {
    __device__ __forceinline__ float operator()(float gate, float up) const {
        return gelu_tanh(gate) * up;
    }
};
struct ClampedSwiglu {  // gpt-oss's
    float alpha, limit;
    __device__ __forceinline__ float operator()(float gate, float up) const {
        const float g = fminf(gate, limit);
        const float u = fminf(fmaxf(up, -limit), limit);
        return (u + 1.0f) * g * sigmoid(alpha * g);
    }
};

// The fused operations run on a thread's accumulator fragment, fully unrolled (its values
// are registers). Every runtime choice (which inputs, the bias type, the activation) is made
// once, outside the unrolled loops: a test inside them is repeated for every value, and the
// code of every case, which a tile then walks through, outgrows the instruction cache and
// stalls the consumers on instruction fetches.

/// The column of B (and of the bias) whose sum sits at product column `s`: gate_up_row, pairs
/// in groups of `Group`, when B is read through the gate/up map. Branch-free.
template <int Group>
__device__ __forceinline__ int32_t product_column(const GroupedGemmParams& p, int32_t s) {
    const int32_t row = gate_up_row(s, p.n, p.gate_layout == MOEGEMM_GATE_UP_INTERLEAVED, Group);
    return p.gated ? row : s;
}

/// The bias of the fragment's distinct columns (0 past N), from a bias of type Bias.
template <typename Bias, bool Swapped, int Group, int Columns>
__device__ __forceinline__ void load_bias(float (&bias)[Columns], const GroupedGemmParams& p,
                                          int32_t expert, int32_t col0) {
    const Bias* const row = static_cast<const Bias*>(p.bias) + static_cast<int64_t>(expert) * p.n;
#pragma unroll
    for (int c = 0; c < Columns; ++c) {
        // (Bounded on the B row: with a gate/up map a valid pair's product column may be past
        // N, and a pair past N / 2, in a column never stored, has a B row past N or none.)
        const int32_t column =
            product_column<Group>(p, col0 + FragmentLayout<Swapped>::column_offset(c));
        bias[c] = column < p.n ? static_cast<float>(row[column]) : 0.0f;
    }
}

/// x = acc * alpha[expert] * row_scale[row] + bias[expert, column] on a fragment whose first
/// row (counted in the expert, whose rows start at `row_base`) is `row0` and first product
/// column `col0`. Rows from `expert_rows` on are past the expert's: never stored, their scale
/// not read. `Group`: gate_up_group.
template <bool Swapped, int Group, int Count>
__device__ __forceinline__ void scale_and_bias(float (&acc)[Count], const GroupedGemmParams& p,
                                               int32_t expert, int64_t row_base, int32_t row0,
                                               int32_t expert_rows, int32_t col0) {
    using Layout = FragmentLayout<Swapped>;
    constexpr int kRows = Layout::rows(Count);
    constexpr int kColumns = Layout::columns(Count);
    float factor[kRows];
    const float alpha = p.alpha != nullptr ? p.alpha[expert] : 1.0f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const int32_t row = row0 + Layout::row_offset(r);
        factor[r] = p.row_scale != nullptr && row < expert_rows
                        ? alpha * p.row_scale[row_base + row]
                        : alpha;
    }
    float bias[kColumns] = {};
    if (p.bias != nullptr) {
        switch (p.bias_type) {
            case MOEGEMM_DTYPE_F32: load_bias<float, Swapped, Group>(bias, p, expert, col0); break;
            case MOEGEMM_DTYPE_F16: load_bias<__half, Swapped, Group>(bias, p, expert, col0); break;
            default: load_bias<__nv_bfloat16, Swapped, Group>(bias, p, expert, col0); break;
        }
    }
#pragma unroll
    for (int i = 0; i < Count; ++i)
        acc[i] = fmaf(acc[i], factor[Layout::row_index(i)], bias[Layout::column_index(i)]);
}

/// A plain activation on every value.
template <typename Act, int Count>
__device__ __forceinline__ void activate_all(float (&acc)[Count], Act act) {
#pragma unroll
    for (int i = 0; i < Count; ++i) acc[i] = act(acc[i]);
}
template <int Count>
__device__ __forceinline__ void activate(float (&acc)[Count], const GroupedGemmParams& p) {
    switch (p.activation) {
        case MOEGEMM_ACTIVATION_SILU: activate_all(acc, [](float x) { return silu(x); }); break;
        case MOEGEMM_ACTIVATION_GELU_TANH:
            activate_all(acc, [](float x) { return gelu_tanh(x); });
            break;
        default: break;
    }
}

/// Gated: folds each gate and up pair of the fragment into `out`, a fragment of half the
/// columns in the same layout. A consumer's columns are one group (gate_up_group): value k of
/// its first half pairs with value k of its second. Swap-AB's pair sits at h = 0 and 1 (weight
/// rows 8 apart): out[2j + q] from acc[4j + q] and acc[4j + 2 + q]. The first of a pair is the
/// gate, or the up half with UP_GATE_HALVES (GroupedGemmParams::up_first).
template <bool Swapped, typename Act, int Count>
__device__ __forceinline__ void fold_pairs(const float (&acc)[Count], float (&out)[Count / 2],
                                           bool up_first, Act act) {
#pragma unroll
    for (int k = 0; k < Count / 2; ++k) {
        const float first = Swapped ? acc[4 * (k / 2) + k % 2] : acc[k];
        const float second = Swapped ? acc[4 * (k / 2) + 2 + k % 2] : acc[Count / 2 + k];
        out[k] = act(up_first ? second : first, up_first ? first : second);
    }
}
template <bool Swapped, int Count>
__device__ __forceinline__ void fold_gate_up(const float (&acc)[Count], float (&out)[Count / 2],
                                             const GroupedGemmParams& p) {
    const bool up_first = p.up_first != 0;
    switch (p.activation) {
        case MOEGEMM_ACTIVATION_GEGLU: fold_pairs<Swapped>(acc, out, up_first, Geglu{}); break;
        case MOEGEMM_ACTIVATION_SWIGLU_CLAMPED:
            fold_pairs<Swapped>(acc, out, up_first,
                                ClampedSwiglu{p.activation_alpha, p.activation_limit});
            break;
        default: fold_pairs<Swapped>(acc, out, up_first, Swiglu{}); break;
    }
}

}  // namespace moegemm::native

// Weighted combine of the MoE layer (interface and semantics: routing.hpp):
//   out[t, :] = sum over j in increasing j of topk_weights[t, j] * y[row_of_choice[t, j], :]
//
// Design. The work is (token, column slab) items: a slab is kCombineThreads x
// kCombineVectorsPerThread 16-byte vectors of a row (2048 columns), so a token of H = 7168 is
// 4 items and T = 1 already spreads over several SMs. The grid is fixed by the plan
// (combine_grid: max_tokens x slabs, capped at the blocks the device keeps resident) and
// blocks stride over the items of this execution's T; blocks with no item exit at once.
// Per item a warp loads the token's row indices and weights once (one lane per choice) and
// broadcasts them with shuffles; each thread then issues the loads of a batch of choices for
// both its vectors before it accumulates them, so several 16-byte loads per thread are in
// flight (bandwidth at large T, latency at T = 1). Products and sums are __fmul_rn and
// __fadd_rn: no FMA contraction, the same bits as a plain fp32 loop in the same order, so the
// result is reproducible and checkable bitwise. y is read once: streaming loads.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>

#include "error.hpp"
#include "moe/launch.hpp"
#include "moe/routing.hpp"
#include "native/ptx.cuh"

namespace moegemm::moe {
namespace {

namespace ptx = ::moegemm::native::ptx;

constexpr unsigned kFullWarp = 0xffffffffu;
constexpr int kVectorElements = 8;  // 16-bit elements per 16-byte vector
constexpr int kSlabVectors = kCombineThreads * kCombineVectorsPerThread;
// Choices whose loads one thread issues together (x kCombineVectorsPerThread loads): enough
// in flight per SM at 8 resident blocks, few enough registers for them.
constexpr int kBatch = 2;
static_assert(32 % kBatch == 0, "a batch never straddles a group of 32 choices");

struct CombineParams {
    const uint4* y;                    // [max_tokens * top_k, vectors]
    const int32_t* row_of_choice;      // [T, top_k]
    const float* topk_weights;         // [T, top_k]
    const int32_t* num_tokens_device;  // NULL: num_tokens
    int64_t num_tokens;
    int64_t max_tokens;
    int64_t vectors;  // hidden / 8
    int64_t slabs;    // ceil(vectors / kSlabVectors)
    uint4* out;       // [max_tokens, vectors]
    int32_t top_k;
};

/// T of this execution; a device count is clamped to [0, max_tokens] (routing flags it).
__device__ __forceinline__ int64_t tokens_this_execution(const CombineParams& p) {
    return token_count(p.num_tokens, p.num_tokens_device, p.max_tokens);
}

template <typename Half>
struct Pair;
template <>
struct Pair<__nv_bfloat16> {
    using Type = __nv_bfloat162;
    static __device__ __forceinline__ float2 to_float2(Type v) { return __bfloat1622float2(v); }
    static __device__ __forceinline__ Type from_floats(float a, float b) {
        return __floats2bfloat162_rn(a, b);
    }
};
template <>
struct Pair<__half> {
    using Type = __half2;
    static __device__ __forceinline__ float2 to_float2(Type v) { return __half22float2(v); }
    static __device__ __forceinline__ Type from_floats(float a, float b) {
        return __floats2half2_rn(a, b);
    }
};

/// acc[c] += weight * element c of `packed`, as a rounded product then a rounded sum.
template <typename Half>
__device__ __forceinline__ void accumulate(float (&acc)[kVectorElements], const uint4& packed,
                                           float weight) {
    using P = Pair<Half>;
    const auto* pairs = reinterpret_cast<const typename P::Type*>(&packed);
#pragma unroll
    for (int c = 0; c < kVectorElements / 2; ++c) {
        const float2 v = P::to_float2(pairs[c]);
        acc[2 * c] = __fadd_rn(acc[2 * c], __fmul_rn(weight, v.x));
        acc[2 * c + 1] = __fadd_rn(acc[2 * c + 1], __fmul_rn(weight, v.y));
    }
}

template <typename Half>
__device__ __forceinline__ uint4 convert(const float (&acc)[kVectorElements]) {
    using P = Pair<Half>;
    uint4 packed;
    auto* pairs = reinterpret_cast<typename P::Type*>(&packed);
#pragma unroll
    for (int c = 0; c < kVectorElements / 2; ++c)
        pairs[c] = P::from_floats(acc[2 * c], acc[2 * c + 1]);
    return packed;
}

template <typename Half>
__global__ void __launch_bounds__(kCombineThreads, kCombineBlocksPerSm)
    combine_kernel(CombineParams p) {
    constexpr int kV = kCombineVectorsPerThread;
    ptx::allow_dependent_grids();
    ptx::wait_for_prior_grids();
    const int64_t items = tokens_this_execution(p) * p.slabs;
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int64_t rows_of_y = p.max_tokens * p.top_k;

    for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        const int64_t token = item / p.slabs;
        const int64_t slab = item - token * p.slabs;
        int64_t column[kV];
        bool in_row[kV];
        float acc[kV][kVectorElements];
#pragma unroll
        for (int v = 0; v < kV; ++v) {
            column[v] = slab * kSlabVectors + v * kCombineThreads + threadIdx.x;
            in_row[v] = column[v] < p.vectors;
#pragma unroll
            for (int c = 0; c < kVectorElements; ++c) acc[v][c] = 0.0f;
        }
        const int32_t* rows = p.row_of_choice + token * p.top_k;
        const float* weights = p.topk_weights + token * p.top_k;

        // Choices in groups of 32, one lane each; loop bounds are uniform over the block, so
        // every lane takes part in every shuffle.
        for (int first = 0; first < p.top_k; first += 32) {
            const int count = min(32, p.top_k - first);
            int32_t my_row = -1;
            float my_weight = 0.0f;
            if (lane < count) {
                my_row = rows[first + lane];
                my_weight = weights[first + lane];
                if (my_row >= rows_of_y) my_row = -1;  // not a row of y: dropped
            }
            for (int b = 0; b < count; b += kBatch) {
                uint4 values[kBatch][kV];
                float weight[kBatch];
                bool take[kBatch];
#pragma unroll
                for (int u = 0; u < kBatch; ++u) {
                    const int j = b + u;  // < 32
                    const int32_t row = __shfl_sync(kFullWarp, my_row, j);
                    weight[u] = __shfl_sync(kFullWarp, my_weight, j);
                    take[u] = j < count && row >= 0;
#pragma unroll
                    for (int v = 0; v < kV; ++v) {
                        if (take[u] && in_row[v])
                            values[u][v] = __ldcs(p.y + int64_t{row} * p.vectors + column[v]);
                    }
                }
#pragma unroll
                for (int u = 0; u < kBatch; ++u) {
#pragma unroll
                    for (int v = 0; v < kV; ++v) {
                        if (take[u] && in_row[v]) accumulate<Half>(acc[v], values[u][v], weight[u]);
                    }
                }
            }
        }
#pragma unroll
        for (int v = 0; v < kV; ++v) {
            if (in_row[v]) p.out[token * p.vectors + column[v]] = convert<Half>(acc[v]);
        }
    }
}

int64_t slabs_of(int64_t hidden) {
    const int64_t vectors = hidden / kVectorElements;
    return (vectors + kSlabVectors - 1) / kSlabVectors;
}

void check_shape(const CombineShape& s) {
    require(s.hidden >= kVectorElements && s.hidden % kVectorElements == 0,
            MOEGEMM_STATUS_MISALIGNED, "combine: hidden = {} must be a positive multiple of 8",
            s.hidden);
    require(s.top_k >= 1, MOEGEMM_STATUS_INVALID_VALUE, "combine: top_k = {} must be >= 1",
            s.top_k);
    require(s.max_tokens >= 1 && s.max_tokens <= std::numeric_limits<int32_t>::max() / s.top_k,
            MOEGEMM_STATUS_INVALID_VALUE,
            "combine: max_tokens = {} must be in [1, (2^31 - 1) / top_k]", s.max_tokens);
    require(s.dtype == MOEGEMM_DTYPE_BF16 || s.dtype == MOEGEMM_DTYPE_F16,
            MOEGEMM_STATUS_NOT_SUPPORTED, "combine: dtype {} is not BF16 or F16",
            static_cast<int>(s.dtype));
}

}  // namespace

int32_t combine_grid(const CombineShape& shape, int32_t sm_count) {
    check_shape(shape);
    require(sm_count >= 1, MOEGEMM_STATUS_INVALID_VALUE, "combine: sm_count = {} must be >= 1",
            sm_count);
    const int64_t items = shape.max_tokens * slabs_of(shape.hidden);
    const int64_t resident = int64_t{sm_count} * kCombineBlocksPerSm;
    return static_cast<int32_t>(std::min(items, resident));
}

void launch_combine(const CombineShape& shape, const void* y, const int32_t* row_of_choice,
                    const float* topk_weights, int64_t num_tokens, const int32_t* num_tokens_device,
                    void* out, int32_t sm_count, bool dependent_launch, cudaStream_t stream) {
    const int32_t grid = combine_grid(shape, sm_count);
    if (num_tokens_device == nullptr) {
        require(num_tokens >= 0 && num_tokens <= shape.max_tokens, MOEGEMM_STATUS_INVALID_VALUE,
                "combine: num_tokens = {} must be in [0, max_tokens = {}]", num_tokens,
                shape.max_tokens);
    }
    const bool no_tokens = num_tokens_device == nullptr && num_tokens == 0;
    require(no_tokens || (y != nullptr && row_of_choice != nullptr && topk_weights != nullptr &&
                          out != nullptr),
            MOEGEMM_STATUS_INVALID_VALUE, "combine: y, row_of_choice, topk_weights or out is NULL");
    require_aligned16("combine", "y and out", {y, out});

    CombineParams p{};
    p.y = static_cast<const uint4*>(y);
    p.row_of_choice = row_of_choice;
    p.topk_weights = topk_weights;
    p.num_tokens_device = num_tokens_device;
    p.num_tokens = num_tokens_device ? 0 : num_tokens;
    p.max_tokens = shape.max_tokens;
    p.vectors = shape.hidden / kVectorElements;
    p.slabs = slabs_of(shape.hidden);
    p.out = static_cast<uint4*>(out);
    p.top_k = shape.top_k;

    if (shape.dtype == MOEGEMM_DTYPE_BF16) {
        launch_layer_kernel(combine_kernel<__nv_bfloat16>, "combine_kernel<bf16>", grid,
                            kCombineThreads, 0, dependent_launch, stream, p);
    } else {
        launch_layer_kernel(combine_kernel<__half>, "combine_kernel<f16>", grid, kCombineThreads,
                            0, dependent_launch, stream, p);
    }
}

}  // namespace moegemm::moe

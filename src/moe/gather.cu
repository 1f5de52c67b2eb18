// Token copy of the MoE layer (interface and semantics: routing.hpp): each routed choice's
// token row of x into its sorted row, so that FC1 reads A in expert order with whole-tile
// TMA boxes instead of gathering single rows in its producer.
//
// Design. One warp per choice at a time, 16-byte vectors, lanes striding over the row with
// four loads in flight each; warps stride over this execution's T * k choices, so the grid is
// fixed by the plan (at most what the device keeps resident) and blocks past the work exit
// at once. A token's row is read top_k times, from L2 after the first.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "error.hpp"
#include "moe/launch.hpp"
#include "moe/routing.hpp"
#include "native/ptx.cuh"

namespace moegemm::moe {
namespace {

namespace ptx = ::moegemm::native::ptx;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 4;
constexpr int kBlocksPerSm = 8;

struct GatherParams {
    const uint4* x;                    // [max_tokens, vectors]
    const int32_t* row_of_choice;      // [T, top_k]
    const int32_t* num_tokens_device;  // NULL: num_tokens
    int64_t num_tokens;
    int64_t max_tokens;
    int64_t vectors;  // hidden / 8
    uint4* sorted;    // [max_tokens * top_k, vectors]
    int32_t top_k;
};

__global__ void __launch_bounds__(kThreads, kBlocksPerSm) gather_tokens_kernel(GatherParams p) {
    ptx::allow_dependent_grids();
    ptx::wait_for_prior_grids();
    int64_t tokens = p.num_tokens;
    if (p.num_tokens_device != nullptr) {
        const int64_t t = *p.num_tokens_device;
        tokens = t < 0 ? 0 : (t > p.max_tokens ? p.max_tokens : t);  // routing flags it
    }
    const int64_t choices = tokens * p.top_k;
    const int64_t rows = p.max_tokens * p.top_k;
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int64_t warps = int64_t{gridDim.x} * kWarps;
    for (int64_t i = int64_t{blockIdx.x} * kWarps + threadIdx.x / 32; i < choices; i += warps) {
        const int32_t row = p.row_of_choice[i];
        if (row < 0 || row >= rows) continue;  // dropped, or another rank's expert
        const uint4* src = p.x + (i / p.top_k) * p.vectors;
        uint4* dst = p.sorted + row * p.vectors;
        for (int64_t v = lane; v < p.vectors; v += 32 * kUnroll) {
            uint4 part[kUnroll];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u)
                if (v + 32 * u < p.vectors) part[u] = src[v + 32 * u];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u)
                if (v + 32 * u < p.vectors) dst[v + 32 * u] = part[u];
        }
    }
}

}  // namespace

void launch_gather_tokens(const CombineShape& shape, const void* x, const int32_t* row_of_choice,
                          int64_t num_tokens, const int32_t* num_tokens_device, void* sorted,
                          int32_t sm_count, bool dependent_launch, cudaStream_t stream) {
    (void)combine_grid(shape, sm_count);  // checks the shape (the same as the combine's)
    require(reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                reinterpret_cast<uintptr_t>(sorted) % 16 == 0,
            MOEGEMM_STATUS_MISALIGNED, "token copy: x {} and sorted {} must be 16-byte aligned",
            x, sorted);
    GatherParams params{};
    params.x = static_cast<const uint4*>(x);
    params.row_of_choice = row_of_choice;
    params.num_tokens_device = num_tokens_device;
    params.num_tokens = num_tokens;
    params.max_tokens = shape.max_tokens;
    params.vectors = shape.hidden / 8;
    params.sorted = static_cast<uint4*>(sorted);
    params.top_k = shape.top_k;
    const int64_t choice_blocks = (shape.max_tokens * shape.top_k + kWarps - 1) / kWarps;
    const auto grid = static_cast<int32_t>(
        std::min<int64_t>(choice_blocks, int64_t{std::max(sm_count, 1)} * kBlocksPerSm));
    launch_layer_kernel(gather_tokens_kernel, "gather_tokens_kernel", grid, kThreads, 0,
                        dependent_launch, stream, params);
}

}  // namespace moegemm::moe

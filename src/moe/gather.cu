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

constexpr int kUnroll = 4;

struct GatherParams {
    const uint4* x;  // [max_tokens, vectors]
    RoutedChoices choices;
    int64_t vectors;  // hidden / 8
    uint4* sorted;    // [max_tokens * top_k, vectors]
};

__global__ void __launch_bounds__(kRowThreads, kRowBlocksPerSm) gather_tokens_kernel(GatherParams p) {
    ptx::allow_dependent_grids();
    ptx::wait_for_prior_grids();
    for_each_routed_choice(p.choices, [&](int64_t i, int32_t row, int lane) {
        const uint4* src = p.x + (i / p.choices.top_k) * p.vectors;
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
    });
}

}  // namespace

void launch_gather_tokens(const CombineShape& shape, const void* x, const int32_t* row_of_choice,
                          int64_t num_tokens, const int32_t* num_tokens_device, void* sorted,
                          int32_t sm_count, bool dependent_launch, cudaStream_t stream) {
    (void)combine_grid(shape, sm_count);  // checks the shape (the same as the combine's)
    require_aligned16("token copy", "x and sorted", {x, sorted});
    GatherParams params{};
    params.x = static_cast<const uint4*>(x);
    params.choices = {row_of_choice, num_tokens_device, num_tokens, shape.max_tokens, shape.top_k};
    params.vectors = shape.hidden / 8;
    params.sorted = static_cast<uint4*>(sorted);
    launch_layer_kernel(gather_tokens_kernel, "gather_tokens_kernel",
                        row_grid(shape.max_tokens * shape.top_k, sm_count), kRowThreads, 0,
                        dependent_launch, stream, params);
}

}  // namespace moegemm::moe

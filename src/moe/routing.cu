// Routing of the MoE layer: top-k choices -> expert sizes, sorted rows, gather index
// (interface and semantics: routing.hpp).
//
// Design. The flattened choices (i = t * k + j) are cut into fixed chunks of C choices, one
// block per chunk; the grid (chunks of max_tokens * k) depends on the plan only and blocks
// past T * k exit at once. Two kernels:
//
//  1. rank_choices: each warp walks its contiguous slice of the chunk 32 choices at a time;
//     __match_any_sync groups the lanes choosing one expert, a lane's rank in its group plus
//     the warp's running count of that expert (shared memory, written by the group's lowest
//     lane only) is its stable rank in the warp's slice. An exclusive sum over the warps gives
//     each choice its stable rank within the chunk, and the chunk's count per expert goes to
//     chunk_counts[chunk][e]. The (expert, rank) pair is parked in row_of_choice.
//  2. scatter_rows: each block sums chunk_counts over the active chunks (all of them: the
//     expert totals, whose exclusive scan gives the expert offsets; and those before its own
//     chunk), then turns its choices' (expert, rank) into rows:
//     row = offset[e] + count of e in earlier chunks + rank. Block 0 writes expert_sizes.
//  A plan of one chunk (max_tokens * k within it: decode) runs both in one block, one launch.
//
// Why this shape: positions come from prefix sums and ranks in index order, never from the
// order of atomics, so outputs are bitwise reproducible; there is no counter to reset, so the
// workspace needs no zeroing (no memset node, nothing kept between executions); at T = 1 each
// kernel is one active block, its cost the launch. Every scatter block re-reads all active
// chunk counts instead of one block scanning them (a "last block" pattern would need a zeroed
// counter): routing_layout sizes the chunk so that chunks x experts stays within
// kRoutingCountBudget (128 KiB read per block from L2; T = 16384, k = 8 takes 128 chunks of
// 1024 at E = 128, 32 chunks of 4096 at E = 1024). Past the budget even with the largest chunk
// (max_tokens * k * experts above 2^28) each block's read grows with the number of chunks;
// the GEMMs of such a layer grow faster still.
// Both kernels and the combine wait for the previous kernel (griddepcontrol.wait) before any
// global access, so each may be launched with PDL; they let the next kernel launch at once.
#include <cuda_runtime.h>

#include <limits>

#include "error.hpp"
#include "moe/launch.hpp"
#include "moe/routing.hpp"
#include "native/ptx.cuh"

namespace moegemm::moe {
namespace {

namespace ptx = ::moegemm::native::ptx;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFullWarp = 0xffffffffu;
// A parked (expert, rank-in-chunk) pair: rank in the low bits (chunks hold at most 8192).
constexpr int kRankBits = 16;
constexpr int32_t kRankMask = (1 << kRankBits) - 1;
static_assert(kRoutingChunkChoices[3] <= (1 << kRankBits), "ranks must fit the packed field");
static_assert(MOEGEMM_MAX_EXPERTS <= (1 << (31 - kRankBits)), "experts must fit the packed field");
static_assert(MOEGEMM_MAX_EXPERTS <= 4 * kThreads, "one scatter thread per 4 experts");

constexpr std::size_t kAlignment = 256;

std::size_t align_up(std::size_t bytes) {
    return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

struct RoutingParams {
    const void* topk_ids;
    const int32_t* num_tokens_device;  // NULL: num_tokens
    int64_t num_tokens;
    int64_t max_tokens;
    uint32_t* status_word;
    int32_t* expert_sizes;
    int32_t* token_of_row;
    int32_t* row_of_choice;
    int32_t* chunk_counts;
    int32_t num_experts;
    int32_t first_expert;
    int32_t local_experts;
    int32_t top_k;
    int32_t count_stride;
};

/// T of this execution: the device count clamped to [0, max_tokens] (flagged by the caller
/// chosen to report it), or the host count.
__device__ __forceinline__ int64_t tokens_this_execution(const RoutingParams& p, bool report) {
    if (p.num_tokens_device == nullptr) return p.num_tokens;
    const int64_t tokens = *p.num_tokens_device;
    if (tokens < 0) {
        if (report) atomicOr(p.status_word, MOEGEMM_SIZES_CLAMPED_NEGATIVE);
        return 0;
    }
    if (tokens > p.max_tokens) {
        if (report) atomicOr(p.status_word, MOEGEMM_SIZES_CLAMPED_CAPACITY);
        return p.max_tokens;
    }
    return tokens;
}

__device__ __forceinline__ int4 operator+(int4 a, int4 b) {
    return make_int4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

// Kernel 1 (see the top of the file): this block's chunk. warp_counts: shared int32
// [kWarps][count_stride]. Returns at once (the whole block) when the chunk holds no choice.
template <int kChunk, typename Id>
__device__ __forceinline__ void rank_choices(const RoutingParams& p, int32_t* warp_counts) {
    constexpr int kPerWarp = kChunk / kWarps;
    constexpr int kSteps = kPerWarp / 32;
    const int64_t choices = tokens_this_execution(p, blockIdx.x == 0 && threadIdx.x == 0) * p.top_k;
    const int64_t chunk_begin = int64_t{blockIdx.x} * kChunk;
    if (chunk_begin >= choices) return;

    const int stride = p.count_stride;
    for (int i = threadIdx.x; i < kWarps * stride; i += kThreads) warp_counts[i] = 0;

    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int64_t warp_begin = chunk_begin + int64_t{warp} * kPerWarp;
    const Id* ids = static_cast<const Id*>(p.topk_ids);

    // Local expert of each of this lane's choices, -1 when dropped, skipped or past T * k.
    int32_t slot[kSteps];
    bool out_of_range = false;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
        const int64_t i = warp_begin + s * 32 + lane;
        int32_t expert = -1;
        if (i < choices) {
            const int64_t id = static_cast<int64_t>(ids[i]);
            if (id < 0 || id >= p.num_experts) {
                out_of_range = true;
            } else if (id >= p.first_expert && id < int64_t{p.first_expert} + p.local_experts) {
                expert = static_cast<int32_t>(id - p.first_expert);
            }
        }
        slot[s] = expert;
    }
    __syncthreads();  // warp_counts zeroed

    // Stable rank within the warp's slice: earlier steps, then lower lanes of this step.
    int32_t* my_counts = warp_counts + warp * stride;
    const unsigned lanes_below = (1u << lane) - 1u;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
        if (warp_begin + s * 32 >= choices) break;  // warp-uniform
        const int32_t expert = slot[s];
        const unsigned peers = __match_any_sync(kFullWarp, expert);
        const int32_t below = __popc(peers & lanes_below);
        int32_t rank = 0;
        if (expert >= 0) rank = my_counts[expert] + below;
        __syncwarp();  // every lane read the count before the group's lowest lane moves it
        if (expert >= 0 && below == 0) my_counts[expert] = rank + __popc(peers);
        __syncwarp();
        slot[s] = expert >= 0 ? (expert << kRankBits) | rank : -1;
    }

    if (__syncthreads_or(out_of_range) && threadIdx.x == 0)
        atomicOr(p.status_word, MOEGEMM_ROWS_CLAMPED_INDEX);

    // Per expert: warp counts -> their exclusive sum over the warps; the chunk's total out.
    int32_t* chunk_counts = p.chunk_counts + int64_t{blockIdx.x} * stride;
    for (int e = threadIdx.x; e < stride; e += kThreads) {
        int32_t running = 0;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
            const int32_t count = warp_counts[w * stride + e];
            warp_counts[w * stride + e] = running;
            running += count;
        }
        chunk_counts[e] = running;
    }
    __syncthreads();

#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
        const int64_t i = warp_begin + s * 32 + lane;
        if (i >= choices) break;
        int32_t packed = slot[s];
        if (packed >= 0) packed += my_counts[packed >> kRankBits];  // rank in the chunk
        p.row_of_choice[i] = packed;
    }
}

template <int kChunk, typename Id>
__global__ void __launch_bounds__(kThreads) rank_choices_kernel(RoutingParams p) {
    extern __shared__ int32_t warp_counts[];  // [kWarps][count_stride]
    ptx::allow_dependent_grids();
    ptx::wait_for_prior_grids();
    rank_choices<kChunk, Id>(p, warp_counts);
}

// Kernel 2 (see the top of the file): this block's chunk.
template <int kChunk>
__device__ __forceinline__ void scatter_rows(const RoutingParams& p) {
    __shared__ int4 partial_total[kThreads];
    __shared__ int4 partial_before[kThreads];
    __shared__ int32_t row_base[4 * kThreads];
    __shared__ int32_t warp_sums[kWarps];

    const int64_t choices = tokens_this_execution(p, false) * p.top_k;
    const int active_chunks = static_cast<int>((choices + kChunk - 1) / kChunk);
    const int chunk = static_cast<int>(blockIdx.x);
    if (chunk >= active_chunks && chunk != 0) return;  // block 0 writes the sizes, even for T = 0

    // Column sums of chunk_counts: thread (slice, group) adds 4 experts' counts of the chunks
    // slice, slice + slices, ... (int4 loads, consecutive groups coalesced); then the slices
    // are summed by a tree.
    const int groups = p.count_stride / 4;  // <= kThreads
    int slices = 1;
    while (slices * 2 * groups <= kThreads) slices *= 2;
    const int group = static_cast<int>(threadIdx.x) % groups;
    const int slice = static_cast<int>(threadIdx.x) / groups;
    int4 total = make_int4(0, 0, 0, 0);
    int4 before = make_int4(0, 0, 0, 0);
    if (slice < slices) {
        const int4* counts = reinterpret_cast<const int4*>(p.chunk_counts) + group;
#pragma unroll 4
        for (int c = slice; c < active_chunks; c += slices) {
            const int4 v = counts[int64_t{c} * groups];
            total = total + v;
            if (c < chunk) before = before + v;
        }
    }
    partial_total[threadIdx.x] = total;
    partial_before[threadIdx.x] = before;
    __syncthreads();
    for (int half = slices / 2; half > 0; half /= 2) {
        if (slice < half) {
            partial_total[threadIdx.x] =
                partial_total[threadIdx.x] + partial_total[threadIdx.x + half * groups];
            partial_before[threadIdx.x] =
                partial_before[threadIdx.x] + partial_before[threadIdx.x + half * groups];
        }
        __syncthreads();
    }

    // Thread g < groups owns experts 4g..4g+3: exclusive scan of the totals over the block.
    const bool owns = static_cast<int>(threadIdx.x) < groups;
    const int4 mine = owns ? partial_total[threadIdx.x] : make_int4(0, 0, 0, 0);
    const int4 mine_before = owns ? partial_before[threadIdx.x] : make_int4(0, 0, 0, 0);
    const int32_t sum = mine.x + mine.y + mine.z + mine.w;
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    int32_t inclusive = sum;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
        const int32_t other = __shfl_up_sync(kFullWarp, inclusive, d);
        if (lane >= d) inclusive += other;
    }
    if (lane == 31) warp_sums[warp] = inclusive;
    __syncthreads();
    int32_t offset = inclusive - sum;
    for (int w = 0; w < warp; ++w) offset += warp_sums[w];
    if (owns) {
        const int32_t totals[4] = {mine.x, mine.y, mine.z, mine.w};
        const int32_t befores[4] = {mine_before.x, mine_before.y, mine_before.z, mine_before.w};
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int e = 4 * static_cast<int>(threadIdx.x) + c;
            row_base[e] = offset + befores[c];
            offset += totals[c];
            if (chunk == 0 && e < p.local_experts) p.expert_sizes[e] = totals[c];
        }
    }
    __syncthreads();
    if (chunk >= active_chunks) return;

    const int64_t chunk_begin = int64_t{chunk} * kChunk;
#pragma unroll 4
    for (int s = 0; s < kChunk / kThreads; ++s) {
        const int64_t i = chunk_begin + s * kThreads + threadIdx.x;
        if (i >= choices) break;
        const int32_t packed = p.row_of_choice[i];
        if (packed < 0) continue;
        const int32_t row = row_base[packed >> kRankBits] + (packed & kRankMask);
        p.row_of_choice[i] = row;
        p.token_of_row[row] = static_cast<int32_t>(i / p.top_k);
    }
}

template <int kChunk>
__global__ void __launch_bounds__(kThreads) scatter_rows_kernel(RoutingParams p) {
    ptx::allow_dependent_grids();
    ptx::wait_for_prior_grids();
    scatter_rows<kChunk>(p);
}

// Plans whose choices fit one chunk (decode: max_tokens * top_k up to the chunk) run both
// steps in one block and one launch: the scatter reads the chunk counts this block just wrote
// (visible to it after the barrier).
template <int kChunk, typename Id>
__global__ void __launch_bounds__(kThreads) route_one_chunk_kernel(RoutingParams p) {
    extern __shared__ int32_t warp_counts[];  // [kWarps][count_stride]
    ptx::allow_dependent_grids();
    ptx::wait_for_prior_grids();
    rank_choices<kChunk, Id>(p, warp_counts);
    __syncthreads();
    scatter_rows<kChunk>(p);
}

template <int kChunk>
void launch_routing_kernels(const RoutingLayout& layout, bool ids_int64,
                            const RoutingParams& params, bool dependent_launch,
                            cudaStream_t stream) {
    const std::size_t smem = std::size_t{kWarps} * layout.count_stride * sizeof(int32_t);
    if (layout.chunks == 1) {
        if (ids_int64) {
            launch_layer_kernel(route_one_chunk_kernel<kChunk, int64_t>,
                                "route_one_chunk_kernel<int64>", 1, kThreads, smem,
                                dependent_launch, stream, params);
        } else {
            launch_layer_kernel(route_one_chunk_kernel<kChunk, int32_t>,
                                "route_one_chunk_kernel<int32>", 1, kThreads, smem,
                                dependent_launch, stream, params);
        }
        return;
    }
    if (ids_int64) {
        launch_layer_kernel(rank_choices_kernel<kChunk, int64_t>, "rank_choices_kernel<int64>",
                            layout.chunks, kThreads, smem, dependent_launch, stream, params);
    } else {
        launch_layer_kernel(rank_choices_kernel<kChunk, int32_t>, "rank_choices_kernel<int32>",
                            layout.chunks, kThreads, smem, dependent_launch, stream, params);
    }
    launch_layer_kernel(scatter_rows_kernel<kChunk>, "scatter_rows_kernel", layout.chunks,
                        kThreads, 0, dependent_launch, stream, params);
}

}  // namespace

RoutingLayout routing_layout(const RoutingShape& s) {
    require(s.num_experts >= 1, MOEGEMM_STATUS_INVALID_VALUE,
            "routing: num_experts = {} must be >= 1", s.num_experts);
    require(s.local_experts >= 1 && s.local_experts <= MOEGEMM_MAX_EXPERTS,
            MOEGEMM_STATUS_INVALID_VALUE, "routing: local_experts = {} must be in [1, {}]",
            s.local_experts, MOEGEMM_MAX_EXPERTS);
    require(s.first_expert >= 0 && int64_t{s.first_expert} + s.local_experts <= s.num_experts,
            MOEGEMM_STATUS_INVALID_VALUE,
            "routing: experts [{}, {} + {}) are not within the model's [0, {})", s.first_expert,
            s.first_expert, s.local_experts, s.num_experts);
    require(s.top_k >= 1, MOEGEMM_STATUS_INVALID_VALUE, "routing: top_k = {} must be >= 1",
            s.top_k);
    constexpr int64_t kMaxRows = std::numeric_limits<int32_t>::max();
    require(s.max_tokens >= 1 && s.max_tokens <= kMaxRows / s.top_k, MOEGEMM_STATUS_INVALID_VALUE,
            "routing: max_tokens = {} must be in [1, (2^31 - 1) / top_k = {}]", s.max_tokens,
            kMaxRows / s.top_k);

    RoutingLayout l;
    l.max_choices = s.max_tokens * s.top_k;
    l.count_stride = (s.local_experts + 3) / 4 * 4;
    for (const int32_t chunk : kRoutingChunkChoices) {
        l.chunk_choices = chunk;
        l.chunks = static_cast<int32_t>((l.max_choices + chunk - 1) / chunk);
        if (int64_t{l.chunks} * l.count_stride <= kRoutingCountBudget) break;
    }
    const auto rows_bytes = static_cast<std::size_t>(l.max_choices) * sizeof(int32_t);
    std::size_t at = 0;
    l.expert_sizes = at;
    at += align_up(static_cast<std::size_t>(s.local_experts) * sizeof(int32_t));
    l.token_of_row = at;
    at += align_up(rows_bytes);
    l.row_of_choice = at;
    at += align_up(rows_bytes);
    l.chunk_counts = at;
    at += align_up(static_cast<std::size_t>(l.chunks) * l.count_stride * sizeof(int32_t));
    l.total_bytes = at;
    return l;
}

RoutingBuffers routing_buffers(const RoutingLayout& layout, void* workspace) noexcept {
    auto* base = static_cast<unsigned char*>(workspace);
    RoutingBuffers b;
    b.expert_sizes = reinterpret_cast<int32_t*>(base + layout.expert_sizes);
    b.token_of_row = reinterpret_cast<int32_t*>(base + layout.token_of_row);
    b.row_of_choice = reinterpret_cast<int32_t*>(base + layout.row_of_choice);
    return b;
}

void launch_routing(const RoutingShape& shape, const void* topk_ids, int64_t num_tokens,
                    const int32_t* num_tokens_device, void* workspace, uint32_t* status_word,
                    bool dependent_launch, cudaStream_t stream) {
    const RoutingLayout layout = routing_layout(shape);
    if (num_tokens_device == nullptr) {
        require(num_tokens >= 0 && num_tokens <= shape.max_tokens, MOEGEMM_STATUS_INVALID_VALUE,
                "routing: num_tokens = {} must be in [0, max_tokens = {}]", num_tokens,
                shape.max_tokens);
    }
    require(topk_ids != nullptr || (num_tokens_device == nullptr && num_tokens == 0),
            MOEGEMM_STATUS_INVALID_VALUE, "routing: topk_ids is NULL");
    require(workspace != nullptr && reinterpret_cast<uintptr_t>(workspace) % kAlignment == 0,
            MOEGEMM_STATUS_MISALIGNED, "routing: workspace {} is not 256-byte aligned", workspace);
    require(status_word != nullptr, MOEGEMM_STATUS_INVALID_VALUE, "routing: status_word is NULL");

    auto* base = static_cast<unsigned char*>(workspace);
    const RoutingBuffers buffers = routing_buffers(layout, workspace);
    RoutingParams p{};
    p.topk_ids = topk_ids;
    p.num_tokens_device = num_tokens_device;
    p.num_tokens = num_tokens_device ? 0 : num_tokens;
    p.max_tokens = shape.max_tokens;
    p.status_word = status_word;
    p.expert_sizes = buffers.expert_sizes;
    p.token_of_row = buffers.token_of_row;
    p.row_of_choice = buffers.row_of_choice;
    p.chunk_counts = reinterpret_cast<int32_t*>(base + layout.chunk_counts);
    p.num_experts = shape.num_experts;
    p.first_expert = shape.first_expert;
    p.local_experts = shape.local_experts;
    p.top_k = shape.top_k;
    p.count_stride = layout.count_stride;

    switch (layout.chunk_choices) {
        case 1024:
            launch_routing_kernels<1024>(layout, shape.ids_int64, p, dependent_launch, stream);
            break;
        case 2048:
            launch_routing_kernels<2048>(layout, shape.ids_int64, p, dependent_launch, stream);
            break;
        case 4096:
            launch_routing_kernels<4096>(layout, shape.ids_int64, p, dependent_launch, stream);
            break;
        case 8192:
            launch_routing_kernels<8192>(layout, shape.ids_int64, p, dependent_launch, stream);
            break;
        default:
            fail(MOEGEMM_STATUS_INTERNAL_ERROR, "routing: no kernel for chunks of {} choices",
                 layout.chunk_choices);
    }
}

}  // namespace moegemm::moe

namespace moegemm::testing {
namespace {

/// The status of what `body` throws, its message as the thread's last error.
template <typename Body>
moegemm_status_t status_of(Body&& body) noexcept {
    try {
        body();
        return MOEGEMM_STATUS_SUCCESS;
    } catch (const moegemm::Error& e) {
        moegemm::set_last_error(e.what());
        return e.status();
    } catch (...) {
        moegemm::set_last_error("internal error");
        return MOEGEMM_STATUS_INTERNAL_ERROR;
    }
}

}  // namespace

moegemm_status_t moe_routing_layout(const moe::RoutingShape& shape, moe::RoutingLayout* layout) {
    return status_of([&] {
        require(layout != nullptr, MOEGEMM_STATUS_INVALID_VALUE, "layout is NULL");
        *layout = moe::routing_layout(shape);
    });
}

moegemm_status_t moe_launch_routing(const moe::RoutingShape& shape, const void* topk_ids,
                                    int64_t num_tokens, const int32_t* num_tokens_device,
                                    void* workspace, uint32_t* status_word, bool dependent_launch,
                                    cudaStream_t stream) {
    return status_of([&] {
        moe::launch_routing(shape, topk_ids, num_tokens, num_tokens_device, workspace, status_word,
                            dependent_launch, stream);
    });
}

moegemm_status_t moe_launch_combine(const moe::CombineShape& shape, const void* y,
                                    const int32_t* row_of_choice, const float* topk_weights,
                                    int64_t num_tokens, const int32_t* num_tokens_device, void* out,
                                    int32_t sm_count, bool dependent_launch, cudaStream_t stream) {
    return status_of([&] {
        moe::launch_combine(shape, y, row_of_choice, topk_weights, num_tokens, num_tokens_device,
                            out, sm_count, dependent_launch, stream);
    });
}

}  // namespace moegemm::testing

// Routing and combine of the MoE layer (moegemm_moe_execute): from the router's top-k choices
// to the grouped GEMMs' expert sizes and gather index, and from FC2's rows back to tokens.
//
//   routing:  topk_ids [T, k] -> expert_sizes [L], token_of_row [rows], row_of_choice [T, k]
//   gather:   (larger layers) x rows copied into expert order, sorted[row_of_choice] = x[t]
//   FC1, FC2: the grouped GEMMs (VARIABLE, device sizes = expert_sizes; FC1 reads the sorted
//             copy, or gathers x rows itself through token_of_row); y = FC2's output,
//             [max_tokens * k, H]
//   combine:  out[t] = sum over j in increasing j with row_of_choice[t, j] >= 0 of
//             topk_weights[t, j] * y[row_of_choice[t, j]]      (fp32, converted once)
//
// Sorted rows: local expert e (expert id first_expert + e) owns rows [off_e, off_e + M_e),
// off_e the sum of the sizes before it; within an expert, rows follow the flattened choice
// index t * k + j. Positions never depend on the order of atomics, so every output is bitwise
// reproducible. A choice whose id is outside [0, num_experts) is dropped and flagged
// (MOEGEMM_ROWS_CLAMPED_INDEX); an id of another rank's expert is skipped silently. A device
// token count outside [0, max_tokens] is clamped and flagged (MOEGEMM_SIZES_CLAMPED_*).
//
// Everything here is host code and plain data (CPU-tested); the kernels are in routing.cu and
// combine.cu. Launchers never synchronize, allocate or read device memory, so an execution
// can be captured in a CUDA graph and replayed with a new device token count. They throw
// moegemm::Error (src/error.hpp) on invalid shapes or a failed launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "moegemm/moegemm.h"

// Exported from the testing build of the library only (plan_options.hpp defines the same).
#ifndef MOEGEMM_TESTING_API
#define MOEGEMM_TESTING_API __attribute__((visibility("default")))
#endif

namespace moegemm::moe {

/// Choices per routing chunk: one block of the routing kernels owns one chunk. The plan picks
/// one of these (routing_layout); each is a compiled kernel variant.
inline constexpr int32_t kRoutingChunkChoices[] = {1024, 2048, 4096, 8192};
/// The chunk is the smallest whose per-chunk expert counts (chunks x count_stride int32) stay
/// within this many entries, since every scatter block reads all of them (routing.cu).
inline constexpr int64_t kRoutingCountBudget = 32768;

/// What routing needs to know of the layer; fixed for a plan.
struct RoutingShape {
    int32_t num_experts = 0;    ///< ids are valid in [0, num_experts)
    int32_t first_expert = 0;   ///< this rank's experts: [first_expert, + local_experts)
    int32_t local_experts = 0;  ///< 1..MOEGEMM_MAX_EXPERTS
    int32_t top_k = 0;          ///< choices per token, >= 1
    int64_t max_tokens = 0;     ///< >= 1; max_tokens * top_k rows must fit int32
    bool ids_int64 = false;     ///< topk_ids are int64 (torch.topk) rather than int32
};

/// Where routing's arrays live in the workspace (byte offsets from its 256-byte aligned base,
/// each 256-byte aligned) and the launch geometry that sized them.
struct RoutingLayout {
    std::size_t expert_sizes = 0;   ///< int32 [local_experts]
    std::size_t token_of_row = 0;   ///< int32 [max_tokens * top_k]
    std::size_t row_of_choice = 0;  ///< int32 [max_tokens * top_k]
    std::size_t chunk_counts = 0;   ///< scratch, int32 [chunks][count_stride]
    std::size_t total_bytes = 0;    ///< a multiple of 256
    int64_t max_choices = 0;        ///< max_tokens * top_k
    int32_t chunk_choices = 0;      ///< one of kRoutingChunkChoices
    int32_t chunks = 0;             ///< blocks of each routing kernel: ceil(max_choices / chunk)
    int32_t count_stride = 0;       ///< local_experts rounded up to a multiple of 4
};

/// The layout for `shape`, pure host arithmetic. Throws Error(INVALID_VALUE) for a shape out
/// of range.
RoutingLayout routing_layout(const RoutingShape& shape);

/// Typed views of routing's outputs inside a workspace.
struct RoutingBuffers {
    int32_t* expert_sizes = nullptr;
    int32_t* token_of_row = nullptr;
    int32_t* row_of_choice = nullptr;
};
RoutingBuffers routing_buffers(const RoutingLayout& layout, void* workspace) noexcept;

/// Enqueues routing (two kernels) on `stream`.
///  - topk_ids: device [T, top_k], int32 or int64 (shape.ids_int64), row-major.
///  - T: num_tokens_device (device int32, clamped on the GPU) when not NULL, else num_tokens
///    (host, must be in [0, max_tokens]).
///  - workspace: routing_layout(shape).total_bytes, 256-byte aligned; its content on entry does
///    not matter (nothing needs zeroing).
///  - status_word: device word the kernels OR their flags into (not NULL).
///  - dependent_launch: launch with programmatic stream serialization (PDL). Either way each
///    kernel touches global memory only after the previous kernel of the stream completed.
/// Outputs (workspace): expert_sizes (all local experts, also for T = 0), token_of_row for the
/// rows < sum of sizes, row_of_choice for the choices of tokens t < T (-1: dropped or
/// skipped). Other entries are left as they were.
void launch_routing(const RoutingShape& shape, const void* topk_ids, int64_t num_tokens,
                    const int32_t* num_tokens_device, void* workspace, uint32_t* status_word,
                    bool dependent_launch, cudaStream_t stream);

/// What the combine needs to know of the layer; fixed for a plan.
struct CombineShape {
    int64_t hidden = 0;      ///< H: columns of y and out, a positive multiple of 8
    int32_t top_k = 0;       ///< >= 1
    int64_t max_tokens = 0;  ///< >= 1; y has max_tokens * top_k rows
    moegemm_dtype_t dtype = MOEGEMM_DTYPE_BF16;  ///< of y and out: BF16 or F16
};

/// Threads per combine block; each thread owns kCombineVectorsPerThread 16-byte columns.
inline constexpr int32_t kCombineThreads = 128;
inline constexpr int32_t kCombineVectorsPerThread = 2;
/// Resident combine blocks per SM the grid is sized for (the kernel's launch bounds).
inline constexpr int32_t kCombineBlocksPerSm = 8;

/// Blocks of the combine grid: one per (token, column slab) up to max_tokens, capped at what
/// the device keeps resident (blocks then stride over the work). Pure; throws Error for a
/// shape out of range (MISALIGNED: hidden; NOT_SUPPORTED: dtype; INVALID_VALUE: the rest).
int32_t combine_grid(const CombineShape& shape, int32_t sm_count);

/// Enqueues the weighted combine on `stream` (one kernel):
///   out[t, :] = sum_{j < top_k, row_of_choice[t, j] >= 0} topk_weights[t, j] * y[row, :]
/// in increasing j, each term rounded as fp32 multiply then fp32 add (no FMA), converted to
/// dtype once; tokens with no valid choice get zeros; rows t >= T of out are not written.
///  - y: device [max_tokens * top_k, H]; out: device [max_tokens, H]; both 16-byte aligned
///    and not overlapping.
///  - row_of_choice: device int32 [T, top_k] (routing's); entries outside
///    [0, max_tokens * top_k) count as dropped.
///  - topk_weights: device fp32 [T, top_k].
///  - T, dependent_launch: as launch_routing (the device count is clamped, not flagged:
///    routing flags it).
///  - sm_count: the device's SMs (DeviceCaps::sm_count), for the grid.
void launch_combine(const CombineShape& shape, const void* y, const int32_t* row_of_choice,
                    const float* topk_weights, int64_t num_tokens, const int32_t* num_tokens_device,
                    void* out, int32_t sm_count, bool dependent_launch, cudaStream_t stream);

/// Enqueues the token copy on `stream` (one kernel): sorted[row_of_choice[i], :] =
/// x[i / top_k, :] for every choice i < T * top_k whose row is in [0, max_tokens * top_k)
/// (others: dropped or another rank's). Other rows of sorted are left as they were.
///  - x: device [max_tokens, H]; sorted: device [max_tokens * top_k, H]; both 16-byte aligned
///    and not overlapping; shape as for launch_combine (dtype only sizes the rows).
///  - row_of_choice, T, dependent_launch, sm_count: as launch_combine.
void launch_gather_tokens(const CombineShape& shape, const void* x, const int32_t* row_of_choice,
                          int64_t num_tokens, const int32_t* num_tokens_device, void* sorted,
                          int32_t sm_count, bool dependent_launch, cudaStream_t stream);

}  // namespace moegemm::moe

// The same entry points for the GPU tests, which link the testing build of the library: its
// version script exports moegemm::testing only. They return the status of the Error a call
// throws (its message as the thread's last error, moegemm_get_last_error_message).
namespace moegemm::testing {

MOEGEMM_TESTING_API moegemm_status_t moe_routing_layout(const moe::RoutingShape& shape,
                                                        moe::RoutingLayout* layout);
MOEGEMM_TESTING_API moegemm_status_t moe_launch_routing(const moe::RoutingShape& shape,
                                                        const void* topk_ids, int64_t num_tokens,
                                                        const int32_t* num_tokens_device,
                                                        void* workspace, uint32_t* status_word,
                                                        bool dependent_launch, cudaStream_t stream);
MOEGEMM_TESTING_API moegemm_status_t
moe_launch_combine(const moe::CombineShape& shape, const void* y, const int32_t* row_of_choice,
                   const float* topk_weights, int64_t num_tokens, const int32_t* num_tokens_device,
                   void* out, int32_t sm_count, bool dependent_launch, cudaStream_t stream);

}  // namespace moegemm::testing

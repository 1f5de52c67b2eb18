// Launches of the layer's own kernels (routing, token copy, combine). Each of them waits for
// the previous kernel of the stream before its first global access and lets the next one
// launch at once, so each may be launched with programmatic stream serialization (PDL).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "error.hpp"

namespace moegemm::moe {

/// Throws MISALIGNED unless every one of `pointers` (named `names`, comma-separated) is 16-byte
/// aligned, as the layer kernels' vector accesses need; `kernel` names the caller.
inline void require_aligned16(const char* kernel, const char* names,
                              std::initializer_list<const void*> pointers) {
    for (const void* p : pointers)
        require(reinterpret_cast<uintptr_t>(p) % 16 == 0, MOEGEMM_STATUS_MISALIGNED,
                "{}: {} must be 16-byte aligned ({} is not)", kernel, names, p);
}

/// This execution's token count on the GPU: the host's `num_tokens`, or the device count
/// clamped to [0, max_tokens] (routing flags a clamped count; the later kernels only clamp).
__device__ __forceinline__ int64_t token_count(int64_t num_tokens, const int32_t* device_count,
                                               int64_t max_tokens) {
    if (device_count == nullptr) return num_tokens;
    const int64_t t = *device_count;
    return t < 0 ? 0 : (t > max_tokens ? max_tokens : t);
}

/// The warp-per-row kernels (token copy, fp8 quantization): threads per block, warps, and the
/// resident blocks per SM their grid is sized for (their launch bounds).
inline constexpr int kRowThreads = 256;
inline constexpr int kRowWarps = kRowThreads / 32;
inline constexpr int kRowBlocksPerSm = 8;

/// The routed choices of one execution, as routing left them: row_of_choice [T, top_k], T on
/// the host or the device (token_count).
struct RoutedChoices {
    const int32_t* row_of_choice;
    const int32_t* num_tokens_device;  // NULL: num_tokens
    int64_t num_tokens;
    int64_t max_tokens;
    int32_t top_k;
};

/// Runs body(i, row, lane) on one warp for every routed choice i < T * top_k whose row
/// (row_of_choice[i]) is in [0, max_tokens * top_k): dropped choices and those of another
/// rank's experts are skipped. Warps of the grid stride over the choices.
template <typename Body>
__device__ __forceinline__ void for_each_routed_choice(const RoutedChoices& c, Body body) {
    const int64_t choices = token_count(c.num_tokens, c.num_tokens_device, c.max_tokens) * c.top_k;
    const int64_t rows = c.max_tokens * c.top_k;
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int64_t warps = int64_t{gridDim.x} * kRowWarps;
    for (int64_t i = int64_t{blockIdx.x} * kRowWarps + threadIdx.x / 32; i < choices; i += warps) {
        const int32_t row = c.row_of_choice[i];
        if (row >= 0 && row < rows) body(i, row, lane);
    }
}

/// Blocks for `rows` rows of a warp-per-row kernel, capped at what the device keeps resident
/// (warps then stride over the rows; blocks past this execution's rows exit at once).
inline int32_t row_grid(int64_t rows, int32_t sm_count) {
    const int64_t blocks = (rows + kRowWarps - 1) / kRowWarps;
    return static_cast<int32_t>(std::max<int64_t>(
        1, std::min<int64_t>(blocks, int64_t{std::max(sm_count, 1)} * kRowBlocksPerSm)));
}

/// Enqueues `kernel` (grid blocks of `threads`, `smem` bytes of dynamic shared memory) on
/// `stream`, with PDL when `dependent_launch`; throws the launch's error, naming `name`.
template <typename Params>
void launch_layer_kernel(void (*kernel)(Params), const char* name, int grid, int threads,
                         std::size_t smem, bool dependent_launch, cudaStream_t stream,
                         const Params& params) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(grid));
    config.blockDim = dim3(static_cast<unsigned>(threads));
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &attribute;
    config.numAttrs = dependent_launch ? 1 : 0;
    const cudaError_t error = cudaLaunchKernelEx(&config, kernel, params);
    if (error != cudaSuccess) throw_cuda_error(static_cast<int>(error), name);
}

}  // namespace moegemm::moe

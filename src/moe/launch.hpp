// Launches of the layer's own kernels (routing, token copy, combine). Each of them waits for
// the previous kernel of the stream before its first global access and lets the next one
// launch at once, so each may be launched with programmatic stream serialization (PDL).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "error.hpp"

namespace moegemm::moe {

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

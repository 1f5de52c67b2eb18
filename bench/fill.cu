#include "fill.hpp"

#include "cuda_utils.hpp"

#include <cuda_bf16.h>

#include <algorithm>

namespace moegemm_bench {

namespace {

/// A 32-bit mix of the index and the seed (murmur3's finalizer): cheap, and with no visible
/// pattern across rows, columns or experts.
__device__ uint32_t hash(uint64_t index, uint32_t seed) {
    uint32_t h =
        static_cast<uint32_t>(index) ^ (static_cast<uint32_t>(index >> 32) * 0x9e3779b9u) ^ seed;
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

__global__ void fill_uniform_bf16_kernel(__nv_bfloat16* data, size_t count, uint32_t seed) {
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += stride) {
        // 24 random bits -> [-1, 1).
        const float value = static_cast<float>(hash(i, seed) >> 8) * (2.0f / 16777216.0f) - 1.0f;
        data[i] = __float2bfloat16(value);
    }
}

}  // namespace

void fill_uniform_bf16(void* data, size_t count, uint32_t seed, cudaStream_t stream) {
    if (count == 0) return;
    constexpr int kThreads = 256;
    // A grid-stride loop over a bounded grid: enough blocks to fill any GPU, whatever the size.
    const size_t wanted_blocks = (count + kThreads - 1) / kThreads;
    const int blocks = static_cast<int>(std::min<size_t>(wanted_blocks, 65536));
    fill_uniform_bf16_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(data),
                                                              count, seed);
    BENCH_CUDA_CHECK(cudaGetLastError());
}

}  // namespace moegemm_bench

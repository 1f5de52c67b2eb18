// The bench's own device code (device_kernels.hpp).
#include "device_kernels.hpp"

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

/// 24 random bits -> [0, 1).
__device__ float unit_interval(uint32_t bits) {
    return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

// What each fill stores at index i from 32 random bits: one functor per element kind, so that
// one kernel and one launcher serve them all.

struct UniformBf16 {
    __nv_bfloat16* data;
    __device__ void operator()(size_t i, uint32_t bits) const {
        data[i] = __float2bfloat16(2.0f * unit_interval(bits) - 1.0f);
    }
};

struct E4m3Code {
    uint8_t* data;
    __device__ void operator()(size_t i, uint32_t bits) const {
        // Bit 7 sign, bits 6..3 exponent (bias 7), bits 2..0 mantissa. Exponent 5..8 keeps every
        // value normal and away from the all-ones NaN code.
        const uint32_t sign = bits >> 31;
        const uint32_t exponent = 5 + ((bits >> 8) & 3u);
        const uint32_t mantissa = bits & 7u;
        data[i] = static_cast<uint8_t>(sign << 7 | exponent << 3 | mantissa);
    }
};

struct UniformF32 {
    float* data;
    float lo;
    float width;
    __device__ void operator()(size_t i, uint32_t bits) const {
        data[i] = lo + width * unit_interval(bits);
    }
};

template <typename Store>
__global__ void fill_kernel(Store store, size_t count, uint32_t seed) {
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += stride) {
        store(i, hash(i, seed));
    }
}

template <typename Store>
void launch_fill(Store store, size_t count, uint32_t seed, cudaStream_t stream) {
    if (count == 0) return;
    constexpr int kThreads = 256;
    // A grid-stride loop over a bounded grid: enough blocks to fill any GPU, whatever the size.
    const size_t wanted_blocks = (count + kThreads - 1) / kThreads;
    const int blocks = static_cast<int>(std::min<size_t>(wanted_blocks, 65536));
    fill_kernel<<<blocks, kThreads, 0, stream>>>(store, count, seed);
    BENCH_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void fill_uniform_bf16(void* data, size_t count, uint32_t seed, cudaStream_t stream) {
    launch_fill(UniformBf16{static_cast<__nv_bfloat16*>(data)}, count, seed, stream);
}

void fill_inputs(void* data, size_t count, moegemm_dtype_t type, uint32_t seed,
                 cudaStream_t stream) {
    if (type == MOEGEMM_DTYPE_E4M3) {
        launch_fill(E4m3Code{static_cast<uint8_t*>(data)}, count, seed, stream);
    } else {
        fill_uniform_bf16(data, count, seed, stream);
    }
}

void fill_scales(float* data, size_t count, uint32_t seed, cudaStream_t stream) {
    launch_fill(UniformF32{data, 0.5f, 1.5f}, count, seed, stream);
}

// ---- The bare launch -------------------------------------------------------------------
namespace {

struct BareParams {
    unsigned char bytes[kBareLaunchParamBytes];
};

__global__ void __launch_bounds__(384) bare_kernel(const __grid_constant__ BareParams params,
                                                   long long busy_ns) {
    (void)params;
    if (threadIdx.x != 0 || busy_ns <= 0) return;
    unsigned long long start = 0, now = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < static_cast<unsigned long long>(busy_ns));
}

}  // namespace

void launch_bare_kernel(cudaStream_t stream, int ctas, bool dependent_launch, long long busy_ns) {
    static const BareParams params{};
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(ctas > 0 ? ctas : 1));
    config.blockDim = dim3(384);
    config.stream = stream;
    cudaLaunchAttribute attribute{};
    if (dependent_launch) {
        attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attribute.val.programmaticStreamSerializationAllowed = 1;
        config.attrs = &attribute;
        config.numAttrs = 1;
    }
    BENCH_CUDA_CHECK(cudaLaunchKernelEx(&config, bare_kernel, params, busy_ns));
}

}  // namespace moegemm_bench

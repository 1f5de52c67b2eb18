// What the standalone stream tools (weight_order.cu, register_stream.cu) stream: the active
// experts' weights of the six decode workloads of bench/workloads/moe.txt, each as one
// [rows, K] bf16 matrix, and the buffer that holds them.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdio>

struct DecodeWeights {
    const char* name;
    int rows;  // active experts x N
    int k;
};

inline constexpr DecodeWeights kDecodeWeights[] = {
    {"mixtral-fc1", 8 * 28672, 4096},  {"mixtral-fc2", 8 * 4096, 14336},
    {"dsv3ep8-fc1", 32 * 4096, 7168},  {"dsv3ep8-fc2", 32 * 7168, 2048},
    {"qwen3moe-fc1", 113 * 1536, 2048}, {"qwen3moe-fc2", 113 * 2048, 768},
};

/// `bytes` of device memory, every byte 1 (bf16 values that are neither NaN nor zero), or
/// null after saying why (`what` names the buffer).
inline void* filled_device_buffer(const char* what, std::size_t bytes) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        std::printf("%s: cudaMalloc of %zu bytes failed\n", what, bytes);
        return nullptr;
    }
    cudaMemset(p, 1, bytes);
    return p;
}

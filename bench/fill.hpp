// Random initialization of device buffers.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace moegemm_bench {

/// Fills `count` bf16 values at `data` with values uniform in [-1, 1), a pure function of
/// (`seed`, index) so runs are reproducible. Never zeros on purpose: a kernel that skips work or
/// writes nothing must not look right by accident. Enqueued on `stream`; throws BenchError if the
/// launch fails.
void fill_uniform_bf16(void* data, size_t count, uint32_t seed, cudaStream_t stream);

}  // namespace moegemm_bench

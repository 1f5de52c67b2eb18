// Random initialization of device buffers.
#pragma once

#include <moegemm/moegemm.h>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace moegemm_bench {

/// Fills `count` bf16 values at `data` with values uniform in [-1, 1), a pure function of
/// (`seed`, index) so runs are reproducible. Never zeros on purpose: a kernel that skips work or
/// writes nothing must not look right by accident. Enqueued on `stream`; throws BenchError if the
/// launch fails.
void fill_uniform_bf16(void* data, size_t count, uint32_t seed, cudaStream_t stream);

/// Fills `count` elements of A or B of type `type`: BF16 as fill_uniform_bf16; E4M3 with random
/// codes of random sign, exponent 5..8 and mantissa, so |value| lies in [0.25, 3.75] (never zero,
/// never NaN, and sums of products far from overflow in fp32). Otherwise as fill_uniform_bf16.
void fill_inputs(void* data, size_t count, moegemm_dtype_t type, uint32_t seed,
                 cudaStream_t stream);

/// Fills `count` fp32 fp8 scales with values uniform in [0.5, 2): far enough from 1 that a scale
/// applied to the wrong row, column or block changes the result. Otherwise as fill_uniform_bf16.
void fill_scales(float* data, size_t count, uint32_t seed, cudaStream_t stream);

}  // namespace moegemm_bench

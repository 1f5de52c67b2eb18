// The bench's own device code: random initialization of device buffers, and the bare launch
// under the library's host cost.
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

/// Parameter bytes of the bare launch: what the library's native kernels take (their parameter
/// struct with room for MOEGEMM_MAX_EXPERTS host sizes by value, 4256 bytes, and five 128-byte
/// tensor-map templates). Into a queue of pending kernels a smaller launch costs less host
/// time, so the floor uses the library's own size (docs/design.md, launch cost).
constexpr std::size_t kBareLaunchParamBytes = 4896;

/// Enqueues on `stream` a kernel of `ctas` CTAs of 384 threads taking kBareLaunchParamBytes of
/// parameters that does nothing but stay resident for `busy_ns` nanoseconds (0: an empty
/// kernel), through cudaLaunchKernelEx with programmatic stream serialization where the device
/// has it (compute capability 9.0 and newer), as the library launches its native kernels: the
/// floor under moegemm_execute's host cost on this machine. Given the library's kernel time,
/// the bare launches queue up behind each other as the library's do: a launch into a queue
/// of pending kernels costs the host about 1 µs more than one into an idle queue. Throws
/// BenchError if the launch fails.
void launch_bare_kernel(cudaStream_t stream, int ctas, bool dependent_launch, long long busy_ns);

}  // namespace moegemm_bench

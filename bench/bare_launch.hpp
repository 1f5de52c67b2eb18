// What a kernel launch alone costs the host, measured beside moegemm_execute's host cost.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace moegemm_bench {

/// Parameter bytes of the bare launch: what the library's native kernels take (their parameter
/// struct with room for MOEGEMM_MAX_EXPERTS host sizes by value, 4256 bytes, and five 128-byte
/// tensor-map templates; sessions 24-25 used 5504). Into a queue of pending kernels a launch of
/// 2.4 KB costs 0.35-0.55 µs less than one of 5.5 KB (bench/NOTES.md §44-§45).
constexpr std::size_t kBareLaunchParamBytes = 4896;

/// Enqueues on `stream` a kernel of `ctas` CTAs of 384 threads taking kBareLaunchParamBytes of
/// parameters that does nothing but stay resident for `busy_ns` nanoseconds (0: an empty
/// kernel), through cudaLaunchKernelEx with programmatic stream serialization where the device
/// has it (compute capability 9.0 and newer), as the library launches its native kernels: the
/// floor under moegemm_execute's host cost on this machine. Given the library's kernel time,
/// the bare launches queue up behind each other as the library's do: a launch into a queue
/// of pending kernels costs the host ~1 µs more than one into an idle queue (bench/NOTES.md
/// §44). Throws BenchError if the launch fails.
void launch_bare_kernel(cudaStream_t stream, int ctas, bool dependent_launch, long long busy_ns);

}  // namespace moegemm_bench

// The two ceilings every workload is held against, measured in the same run as the workloads.
#pragma once

#include "cublas_gemm.hpp"
#include "timing.hpp"

#include <cstdint>

namespace moegemm_bench {

/// M = N = K of the dense GEMM ceiling: large enough for any GPU to reach its peak.
inline constexpr int64_t kDenseGemmSize = 8192;

struct Ceilings {
    /// Dense cuBLASLt GEMM of dense_size^3, fp32 accumulation, bf16 out, inputs of the run's
    /// type: bf16, or E4M3 with per-tensor scales (the fastest fp8 form cuBLASLt has).
    moegemm_dtype_t dense_input_type = MOEGEMM_DTYPE_BF16;
    int64_t dense_size = 0;
    TimingStats dense;
    double dense_tflops = 0.0;

    /// cudaMemcpyAsync device to device of copy_bytes; bandwidth counts the bytes read plus the
    /// bytes written, as the floors count every byte a GEMM reads or writes.
    int64_t copy_bytes = 0;
    TimingStats copy;
    double copy_gbps = 0.0;
};

/// Measures the dense GEMM ceiling with inputs of `input_type` (BF16 or E4M3) into
/// ceilings.dense*. Throws BenchError.
void measure_dense_gemm(Ceilings& ceilings, Timer& timer, const TimingPolicy& policy,
                        const CublasContext& cublas, moegemm_dtype_t input_type);

/// Measures the copy ceiling into ceilings.copy*. Throws BenchError.
void measure_device_copy(Ceilings& ceilings, Timer& timer, const TimingPolicy& policy);

/// The least time a workload of `flops` and `bytes` can take on this device: each of the two
/// floors and the larger of them.
struct Floors {
    double compute_us = 0.0;
    double bandwidth_us = 0.0;
    double floor_us() const { return compute_us > bandwidth_us ? compute_us : bandwidth_us; }
    const char* bound() const { return compute_us > bandwidth_us ? "compute" : "memory"; }
};

Floors floors_for(const Ceilings& ceilings, double flops, double bytes);

}  // namespace moegemm_bench

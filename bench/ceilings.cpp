#include "ceilings.hpp"

#include "fill.hpp"

#include <algorithm>

namespace moegemm_bench {

namespace {

constexpr int64_t kCopyBytes = int64_t{2} << 30;  // 2 GiB: far past any L2, long enough to time

}  // namespace

void measure_dense_gemm(Ceilings& ceilings, Timer& timer, const TimingPolicy& policy,
                        const CublasContext& cublas) {
    const int64_t n = kDenseGemmSize;
    const auto matrix_bytes = static_cast<size_t>(n * n * kBf16Bytes);
    DeviceBuffer a(matrix_bytes), b(matrix_bytes), d(matrix_bytes);
    fill_uniform_bf16(a.get(), matrix_bytes / kBf16Bytes, 0xa11ce, timer.stream());
    fill_uniform_bf16(b.get(), matrix_bytes / kBf16Bytes, 0xb0b, timer.stream());

    // D = A · B^T, the same TN form and the same setup as every cuBLASLt peer. The three 128 MiB
    // matrices are far past L2: no rotation.
    const LtRowMajorGemm gemm(cublas, RowMajorGemmShape{n, n, n}, 256);
    ceilings.dense_size = n;
    ceilings.dense =
        timer.measure([&](int) { gemm.enqueue(a.get(), b.get(), d.get()); }, 1, policy);
    ceilings.dense_tflops = 2.0 * n * n * n / (ceilings.dense.median_us * 1e-6) / 1e12;
}

void measure_device_copy(Ceilings& ceilings, Timer& timer, const TimingPolicy& policy) {
    // Smaller than 2 GiB only on a device without room for two such buffers.
    const int64_t bytes = std::min<int64_t>(
        kCopyBytes, static_cast<int64_t>(free_device_memory() / 4) & ~int64_t{255});
    DeviceBuffer source(static_cast<size_t>(bytes)), destination(static_cast<size_t>(bytes));
    BENCH_CUDA_CHECK(cudaMemsetAsync(source.get(), 0x5a, source.bytes(), timer.stream()));

    ceilings.copy_bytes = bytes;
    ceilings.copy = timer.measure(
        [&](int) {
            BENCH_CUDA_CHECK(cudaMemcpyAsync(destination.get(), source.get(), source.bytes(),
                                             cudaMemcpyDeviceToDevice, timer.stream()));
        },
        1, policy);
    ceilings.copy_gbps = 2.0 * static_cast<double>(bytes) / (ceilings.copy.median_us * 1e-6) / 1e9;
}

Floors floors_for(const Ceilings& ceilings, double flops, double bytes) {
    Floors floors;
    floors.compute_us = flops / (ceilings.dense_tflops * 1e12) * 1e6;
    floors.bandwidth_us = bytes / (ceilings.copy_gbps * 1e9) * 1e6;
    return floors;
}

}  // namespace moegemm_bench

#include "ceilings.hpp"

#include "device_kernels.hpp"
#include "workloads.hpp"

#include <algorithm>

namespace moegemm_bench {

namespace {

constexpr int64_t kCopyBytes = int64_t{2} << 30;  // 2 GiB: far past any L2, long enough to time

}  // namespace

void measure_dense_gemm(Ceilings& ceilings, Timer& timer, const TimingPolicy& policy,
                        const CublasContext& cublas, moegemm_dtype_t input_type) {
    const int64_t n = kDenseGemmSize;
    const auto elements = static_cast<size_t>(n * n);
    const auto input_bytes = static_cast<size_t>(element_bytes(input_type));
    DeviceBuffer a(elements * input_bytes), b(elements * input_bytes), d(elements * kBf16Bytes);
    fill_inputs(a.get(), elements, input_type, 0xa11ce, timer.stream());
    fill_inputs(b.get(), elements, input_type, 0xb0b, timer.stream());
    // fp8: one scale per operand, each in an allocation of its own (cuBLASLt wants 16-byte
    // aligned scale pointers); empty and unused for bf16.
    const size_t scale_count = input_type == MOEGEMM_DTYPE_E4M3 ? 1 : 0;
    DeviceBuffer a_scale(scale_count * sizeof(float)), b_scale(scale_count * sizeof(float));
    fill_scales(static_cast<float*>(a_scale.get()), scale_count, 0x5ca1e, timer.stream());
    fill_scales(static_cast<float*>(b_scale.get()), scale_count, 0x5ca1f, timer.stream());

    // D = A · B^T, the same TN form and the same setup as every cuBLASLt peer. The three
    // matrices (64 to 128 MiB each) are far past L2: no rotation.
    RowMajorGemmShape shape{n, n, n};
    shape.input_type = cuda_type(input_type);
    const LtRowMajorGemm gemm(cublas, shape, 256);
    ceilings.dense_input_type = input_type;
    ceilings.dense_size = n;
    ceilings.dense = timer.measure(
        [&](int) {
            gemm.enqueue(a.get(), b.get(), d.get(), static_cast<const float*>(a_scale.get()),
                         static_cast<const float*>(b_scale.get()));
        },
        1, policy);
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

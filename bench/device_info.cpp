#include "device_info.hpp"

#include "cuda_utils.hpp"

#include <fmt/format.h>

namespace moegemm_bench {

namespace {

/// CUDA 13 removed the clock fields from cudaDeviceProp; attributes remain. A device that does
/// not report one gets 0, not an error: it is information, not something the bench needs.
int optional_attribute(cudaDeviceAttr attribute, int ordinal) {
    int value = 0;
    if (cudaDeviceGetAttribute(&value, attribute, ordinal) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return value;
}

}  // namespace

DeviceInfo query_device_info(int ordinal, cublasHandle_t blas) {
    DeviceInfo info;
    info.ordinal = ordinal;
    cudaDeviceProp properties{};
    BENCH_CUDA_CHECK(cudaGetDeviceProperties(&properties, ordinal));
    info.name = properties.name;
    info.cc_major = properties.major;
    info.cc_minor = properties.minor;
    info.sm_count = properties.multiProcessorCount;
    info.l2_bytes = static_cast<size_t>(properties.l2CacheSize);
    info.global_memory_bytes = properties.totalGlobalMem;
    info.clock_khz = optional_attribute(cudaDevAttrClockRate, ordinal);
    info.memory_clock_khz = optional_attribute(cudaDevAttrMemoryClockRate, ordinal);
    info.memory_bus_width_bits = optional_attribute(cudaDevAttrGlobalMemoryBusWidth, ordinal);

    BENCH_CUDA_CHECK(cudaDriverGetVersion(&info.driver_version));
    BENCH_CUDA_CHECK(cudaRuntimeGetVersion(&info.runtime_version));
    BENCH_CUBLAS_CHECK(cublasGetVersion(blas, &info.cublas_version));
    info.cublaslt_version = cublasLtGetVersion();
    return info;
}

std::string cuda_version_text(int version) {
    return fmt::format("{}.{}", version / 1000, (version % 1000) / 10);
}

std::string cublas_version_text(size_t version) {
    return fmt::format("{}.{}.{}", version / 10000, (version % 10000) / 100, version % 100);
}

}  // namespace moegemm_bench

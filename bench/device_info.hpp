// What the results were measured on: device, clocks and the versions of every component.
#pragma once

#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace moegemm_bench {

struct DeviceInfo {
    int ordinal = 0;
    std::string name;
    int cc_major = 0;
    int cc_minor = 0;
    int sm_count = 0;
    int clock_khz = 0;         ///< peak SM clock (cudaDevAttrClockRate); 0 if unknown
    int memory_clock_khz = 0;  ///< peak memory clock (cudaDevAttrMemoryClockRate); 0 if unknown
    int memory_bus_width_bits = 0;  ///< 0 if unknown
    size_t l2_bytes = 0;
    size_t global_memory_bytes = 0;

    int driver_version = 0;   ///< cudaDriverGetVersion: 1000 * major + 10 * minor
    int runtime_version = 0;  ///< cudaRuntimeGetVersion, same encoding
    int cublas_version = 0;   ///< cublasGetVersion: 10000 * major + 100 * minor + patch
    size_t cublaslt_version = 0;
};

/// Queries the device (the current one must be `ordinal`). Throws BenchError.
DeviceInfo query_device_info(int ordinal, cublasHandle_t blas);

/// "13.0" from 13000.
std::string cuda_version_text(int version);
/// "13.1.0" from 130100.
std::string cublas_version_text(size_t version);

}  // namespace moegemm_bench

// The only place that asks CUDA about devices.
#include "device_caps.hpp"

#include <cuda_runtime_api.h>

#include "error.hpp"

namespace moegemm {

DeviceCaps query_device_caps(int ordinal) {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        fail(MOEGEMM_STATUS_NO_DEVICE, "no usable CUDA device: cudaGetDeviceCount failed: {} ({})",
             cudaGetErrorName(err), cudaGetErrorString(err));
    }
    require(count > 0, MOEGEMM_STATUS_NO_DEVICE, "no CUDA device is visible to this process");
    require(ordinal < count, MOEGEMM_STATUS_INVALID_VALUE,
            "problem->device = {} does not exist: {} device(s) visible", ordinal, count);

    DeviceCaps caps;
    caps.ordinal = ordinal;
    auto attribute = [ordinal](cudaDeviceAttr attr) {
        int value = 0;
        MOEGEMM_CUDA_CHECK(cudaDeviceGetAttribute(&value, attr, ordinal));
        return value;
    };
    caps.cc_major = attribute(cudaDevAttrComputeCapabilityMajor);
    caps.cc_minor = attribute(cudaDevAttrComputeCapabilityMinor);
    caps.sm_count = attribute(cudaDevAttrMultiProcessorCount);
    caps.smem_per_block_optin =
        static_cast<std::size_t>(attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin));
    caps.l2_bytes = static_cast<std::size_t>(attribute(cudaDevAttrL2CacheSize));
    cudaDeviceProp prop{};
    MOEGEMM_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
    caps.name = prop.name;
    return caps;
}

ScopedDevice::ScopedDevice(int ordinal) {
    MOEGEMM_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != ordinal) MOEGEMM_CUDA_CHECK(cudaSetDevice(ordinal));
    else previous_ = -1;  // nothing to restore
}

ScopedDevice::~ScopedDevice() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

RelaxedCaptureMode::RelaxedCaptureMode() {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    MOEGEMM_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    previous_ = static_cast<int>(mode);
}

RelaxedCaptureMode::~RelaxedCaptureMode() {
    if (previous_ < 0) return;
    auto mode = static_cast<cudaStreamCaptureMode>(previous_);
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
}

}  // namespace moegemm

// What the library needs to know of a GPU, as plain data. Queried once per plan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace moegemm {

struct DeviceCaps {
    int ordinal = 0;
    int cc_major = 0;
    int cc_minor = 0;
    int sm_count = 0;
    std::size_t smem_per_block_optin = 0;  ///< bytes of shared memory one block may opt into
    std::size_t l2_bytes = 0;
    std::string name;

    // 64-bit so that no pair of ints (a fuzzed or corrupt caps record) overflows.
    int64_t compute_capability() const noexcept { return int64_t{cc_major} * 10 + cc_minor; }
};

/// Checks that a driver and device `ordinal` exist and reads its capabilities.
/// Throws Error: NO_DEVICE (no driver / no GPU), INVALID_VALUE (no such ordinal).
DeviceCaps query_device_caps(int ordinal);

/// One T per device, made by `make()` at the device's first use and never destroyed: for what
/// the library shares among plans and must not release while they may run (a cuBLASLt
/// handle, small device buffers: cublasLtDestroy and cudaFree synchronize the device). Create
/// instances with new and never delete them, so that plans destroyed at exit outlive none.
/// Thread safe.
template <typename T>
class PerDevice {
public:
    template <typename Make>
    T& get(int device, Make&& make) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = values_.find(device);
        if (it == values_.end()) it = values_.emplace(device, make()).first;
        return it->second;
    }

private:
    std::mutex mutex_;
    std::map<int, T> values_;
};

/// Makes `ordinal` the calling thread's current device for the guard's lifetime, then puts
/// back the device that was current, so that the library never changes the caller's state.
class ScopedDevice {
public:
    explicit ScopedDevice(int ordinal);
    ~ScopedDevice();
    ScopedDevice(const ScopedDevice&) = delete;
    ScopedDevice& operator=(const ScopedDevice&) = delete;

private:
    int previous_ = -1;
};

/// Puts the calling thread in cudaStreamCaptureModeRelaxed for the guard's lifetime, then
/// restores its mode. A kernel's first launch in a process may load it (CUDA's lazy loading;
/// cuBLASLt loads its kernels on their first matmul). Loading is one of the calls CUDA refuses
/// to a thread whose stream is being captured in global or thread-local mode, or to any thread
/// while another captures in global mode, and the refusal invalidates that capture. The
/// library's launches enqueue only stream-ordered work, so lifting the check changes nothing
/// else.
class RelaxedCaptureMode {
public:
    RelaxedCaptureMode();
    ~RelaxedCaptureMode();
    RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
    RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

private:
    int previous_ = -1;  // cudaStreamCaptureMode; -1: nothing to restore
};

}  // namespace moegemm

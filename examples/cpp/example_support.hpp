// What the C++ examples share: errors as exceptions carrying the library's message, a skip
// (exit status 77) when there is no usable GPU, RAII owners of a plan, device and pinned
// memory and a stream, and bf16 on the host. Header-only; each example includes it once.
#pragma once

#include <moegemm/moegemm.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

namespace example {

constexpr int kSkip = 77;  // CTest's SKIP_RETURN_CODE for the examples

// --- Errors -------------------------------------------------------------------------------

/// No usable GPU: the example reports SKIP and exits kSkip.
struct Skip : std::runtime_error {
    using std::runtime_error::runtime_error;
};

inline void check(moegemm_status_t st, const char* what) {
    if (st != MOEGEMM_STATUS_SUCCESS)
        throw std::runtime_error(std::string(what) + ": " + moegemm_status_name(st) + ": " +
                                 moegemm_get_last_error_message());
}

inline void check(cudaError_t err, const char* what) {
    if (err != cudaSuccess)
        throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

#define MOE_CHECK(call) ::example::check((call), #call)
#define CUDA_CHECK(call) ::example::check((call), #call)

/// Throws Skip where the CUDA runtime sees no device.
inline void require_device() {
    int device_count = 0;
    if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0)
        throw Skip("no CUDA device available");
}

/// Runs `run` and turns its outcome into the exit status: its own, kSkip after a Skip (and
/// "SKIP: why"), 1 after any other exception (and "FAIL: why").
template <typename Run>
int exit_status_of(Run&& run) {
    try {
        return run();
    } catch (const Skip& s) {
        std::printf("SKIP: %s\n", s.what());
        return kSkip;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "FAIL: %s\n", e.what());
        return 1;
    }
}

// --- RAII wrappers ---------------------------------------------------------------------------

/// Owns a moegemm plan; destroys it when it goes out of scope. Creating one on a machine
/// without a usable GPU (MOEGEMM_STATUS_NO_DEVICE, MOEGEMM_STATUS_ARCH_MISMATCH) throws Skip;
/// any other failure throws std::runtime_error with the library's message.
class Plan {
public:
    explicit Plan(const moegemm_problem_t& problem) {
        moegemm_plan_t raw = nullptr;
        const moegemm_status_t st = moegemm_plan_create(&problem, &raw);
        if (st == MOEGEMM_STATUS_NO_DEVICE || st == MOEGEMM_STATUS_ARCH_MISMATCH)
            throw Skip(std::string(moegemm_status_name(st)) + ": " +
                       moegemm_get_last_error_message());
        check(st, "moegemm_plan_create");
        plan_.reset(raw);
    }
    moegemm_plan_t get() const { return plan_.get(); }

    std::string describe() const {
        char buf[MOEGEMM_DESCRIBE_MAX];
        MOE_CHECK(moegemm_plan_describe(get(), buf, sizeof buf));
        return buf;
    }

private:
    struct Destroy {
        void operator()(moegemm_plan_t p) const { moegemm_plan_destroy(p); }
    };
    std::unique_ptr<moegemm_plan_s, Destroy> plan_;
};

/// Device memory of `bytes` bytes (cudaMalloc: 256-byte aligned).
class DeviceBuffer {
public:
    explicit DeviceBuffer(size_t bytes) {
        if (bytes > 0)
            CUDA_CHECK(cudaMalloc(&ptr_, bytes));
    }
    ~DeviceBuffer() { cudaFree(ptr_); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    void* get() const { return ptr_; }
    template <class T> T* as() const { return static_cast<T*>(ptr_); }

private:
    void* ptr_ = nullptr;
};

/// Pinned host memory: what cudaMemcpyAsync needs to be truly asynchronous.
template <class T> class PinnedBuffer {
public:
    explicit PinnedBuffer(size_t count) : count_(count) {
        CUDA_CHECK(cudaMallocHost(&ptr_, count * sizeof(T)));
    }
    ~PinnedBuffer() { cudaFreeHost(ptr_); }
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;
    T* get() const { return static_cast<T*>(ptr_); }
    T& operator[](size_t i) const { return get()[i]; }
    size_t count() const { return count_; }
    size_t bytes() const { return count_ * sizeof(T); }

private:
    void* ptr_ = nullptr;
    size_t count_;
};

/// A stream that is drained before it is destroyed. Declare it after the plan and the buffers
/// that its work uses, so that it is destroyed first: no work is pending when they are released.
class Stream {
public:
    Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
    ~Stream() {
        cudaStreamSynchronize(stream_);
        cudaStreamDestroy(stream_);
    }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    cudaStream_t get() const { return stream_; }
    void sync() const { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

private:
    cudaStream_t stream_ = nullptr;
};

// --- bf16 on the host (exact for the small integers the examples use) -----------------------

inline uint16_t to_bf16(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    return static_cast<uint16_t>(bits >> 16);
}

inline float from_bf16(uint16_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

}  // namespace example

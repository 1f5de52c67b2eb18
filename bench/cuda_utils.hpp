// The bench's one exception type, error checking and RAII owners for the CUDA runtime and
// cuBLAS objects that moegemm-bench uses.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>

namespace moegemm_bench {

/// A failed CUDA, cuBLAS or libmoegemm call. status() is the machine-readable name of the error
/// ("cudaErrorMemoryAllocation", "CUBLAS_STATUS_NOT_SUPPORTED", "MOEGEMM_STATUS_INVALID_VALUE"),
/// what() says which call failed and why. Inside one backend's measurement it is recorded and the
/// run goes on; anywhere else it ends the run.
class BenchError : public std::runtime_error {
public:
    BenchError(std::string status, const std::string& message)
        : std::runtime_error(message), status_(std::move(status)) {}
    const std::string& status() const noexcept { return status_; }

private:
    std::string status_;
};

[[noreturn]] void throw_cuda_error(cudaError_t error, const char* expression, const char* file,
                                   int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* expression,
                                     const char* file, int line);

#define BENCH_CUDA_CHECK(expression)                                                          \
    do {                                                                                      \
        const cudaError_t bench_error_ = (expression);                                        \
        if (bench_error_ != cudaSuccess)                                                      \
            ::moegemm_bench::throw_cuda_error(bench_error_, #expression, __FILE__, __LINE__); \
    } while (0)

#define BENCH_CUBLAS_CHECK(expression)                                                           \
    do {                                                                                         \
        const cublasStatus_t bench_status_ = (expression);                                       \
        if (bench_status_ != CUBLAS_STATUS_SUCCESS)                                              \
            ::moegemm_bench::throw_cublas_error(bench_status_, #expression, __FILE__, __LINE__); \
    } while (0)

/// Owns one handle of a C API and releases it with `Destroy` (whose status is ignored: there is
/// nothing useful to do with a failed release during cleanup).
template <typename Handle, auto Destroy>
class UniqueHandle {
public:
    UniqueHandle() = default;
    explicit UniqueHandle(Handle handle) : handle_(handle) {}
    ~UniqueHandle() { reset(); }
    UniqueHandle(UniqueHandle&& other) noexcept : handle_(std::exchange(other.handle_, Handle{})) {}
    UniqueHandle& operator=(UniqueHandle&& other) noexcept {
        if (this != &other) {
            reset();
            handle_ = std::exchange(other.handle_, Handle{});
        }
        return *this;
    }
    UniqueHandle(const UniqueHandle&) = delete;
    UniqueHandle& operator=(const UniqueHandle&) = delete;

    Handle get() const noexcept { return handle_; }
    void reset() noexcept {
        if (handle_) (void)Destroy(handle_);
        handle_ = Handle{};
    }

private:
    Handle handle_{};
};

using CudaStream = UniqueHandle<cudaStream_t, cudaStreamDestroy>;
using CudaEvent = UniqueHandle<cudaEvent_t, cudaEventDestroy>;
using CudaGraph = UniqueHandle<cudaGraph_t, cudaGraphDestroy>;
using CudaGraphExec = UniqueHandle<cudaGraphExec_t, cudaGraphExecDestroy>;

CudaStream make_stream();
CudaEvent make_event();

/// Captures the work that `enqueue` puts on `stream` (thread-local capture mode: other threads
/// may keep using CUDA meanwhile), instantiates it and uploads it to the device, so that the
/// first launch costs no more than the next ones. If `enqueue` throws, the capture is ended
/// (the stream is usable again) before the exception goes on.
CudaGraphExec capture_graph(cudaStream_t stream, const std::function<void()>& enqueue);

/// Device memory from cudaMalloc (so at least 256-byte aligned), released on destruction.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t bytes);

    void* get() const noexcept { return memory_.get(); }
    size_t bytes() const noexcept { return bytes_; }

private:
    UniqueHandle<void*, cudaFree> memory_;
    size_t bytes_ = 0;
};

/// `pointer` advanced by `bytes`: the bench addresses sub-matrices in bytes so that no bf16 type
/// is needed on the host side.
inline const void* byte_offset(const void* pointer, int64_t bytes) {
    return static_cast<const char*>(pointer) + bytes;
}
inline void* byte_offset(void* pointer, int64_t bytes) {
    return static_cast<char*>(pointer) + bytes;
}

/// The largest power of two, up to 256, that divides the address: what cuBLASLt's alignment
/// preferences ask for.
uint32_t pointer_alignment(const void* pointer);

/// Free device memory of the current device now.
size_t free_device_memory();

/// Clears a pending non-sticky error and makes sure the CUDA context still works after a failed
/// measurement. Throws BenchError when it does not (an illegal address poisons the context: no
/// later measurement could be trusted).
void ensure_device_healthy();

}  // namespace moegemm_bench

#include "cuda_utils.hpp"

#include <fmt/format.h>

namespace moegemm_bench {

void throw_cuda_error(cudaError_t error, const char* expression, const char* file, int line) {
    throw BenchError(cudaGetErrorName(error), fmt::format("{} failed: {} ({}:{})", expression,
                                                          cudaGetErrorString(error), file, line));
}

void throw_cublas_error(cublasStatus_t status, const char* expression, const char* file, int line) {
    throw BenchError(cublasGetStatusName(status),
                     fmt::format("{} failed: {} ({}:{})", expression, cublasGetStatusString(status),
                                 file, line));
}

CudaStream make_stream() {
    cudaStream_t stream = nullptr;
    // Non-blocking: nothing on the legacy default stream (which other libraries might use)
    // serializes with the timed work.
    BENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    return CudaStream(stream);
}

CudaEvent make_event() {
    cudaEvent_t event = nullptr;
    BENCH_CUDA_CHECK(cudaEventCreate(&event));
    return CudaEvent(event);
}

CudaGraphExec capture_graph(cudaStream_t stream, const std::function<void()>& enqueue) {
    BENCH_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    cudaGraph_t captured = nullptr;
    try {
        enqueue();
    } catch (...) {
        (void)cudaStreamEndCapture(stream, &captured);
        const CudaGraph discarded(captured);  // whatever was captured before the failure
        throw;
    }
    BENCH_CUDA_CHECK(cudaStreamEndCapture(stream, &captured));
    const CudaGraph graph(captured);
    cudaGraphExec_t instantiated = nullptr;
    BENCH_CUDA_CHECK(cudaGraphInstantiate(&instantiated, graph.get(), 0));
    CudaGraphExec exec(instantiated);
    BENCH_CUDA_CHECK(cudaGraphUpload(exec.get(), stream));
    return exec;
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    void* memory = nullptr;
    BENCH_CUDA_CHECK(cudaMalloc(&memory, bytes));
    memory_ = UniqueHandle<void*, cudaFree>(memory);
}

uint32_t pointer_alignment(const void* pointer) {
    const auto address = reinterpret_cast<uintptr_t>(pointer);
    uint32_t alignment = 256;
    while (alignment > 1 && address % alignment != 0) alignment /= 2;
    return alignment;
}

size_t free_device_memory() {
    size_t free_bytes = 0, total_bytes = 0;
    BENCH_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return free_bytes;
}

void ensure_device_healthy() {
    (void)cudaGetLastError();
    const cudaError_t error = cudaDeviceSynchronize();
    if (error != cudaSuccess) {
        throw BenchError(cudaGetErrorName(error),
                         fmt::format("the CUDA context is unusable after a failed measurement: {}",
                                     cudaGetErrorString(error)));
    }
}

}  // namespace moegemm_bench

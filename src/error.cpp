// Status strings, the thread-local last-error message, and CUDA/cuBLAS error translation.
#include "error.hpp"

#include <cstring>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

namespace moegemm {

namespace {
// Fixed-size so that storing a message never allocates (it may run while handling bad_alloc).
constexpr std::size_t kMaxMessage = 1024;
thread_local char t_last_error[kMaxMessage] = "";
}  // namespace

void set_last_error(const char* message) noexcept {
    std::strncpy(t_last_error, message ? message : "", kMaxMessage - 1);
    t_last_error[kMaxMessage - 1] = '\0';
}

const char* last_error() noexcept { return t_last_error; }

const char* status_string(int status) noexcept {
    switch (status) {
        case MOEGEMM_STATUS_SUCCESS: return "success";
        case MOEGEMM_STATUS_INVALID_VALUE: return "invalid value";
        case MOEGEMM_STATUS_NOT_SUPPORTED: return "not supported";
        case MOEGEMM_STATUS_NO_DEVICE: return "no usable CUDA device or driver";
        case MOEGEMM_STATUS_ARCH_MISMATCH: return "GPU architecture not supported";
        case MOEGEMM_STATUS_MISALIGNED: return "misaligned pointer or stride";
        case MOEGEMM_STATUS_WORKSPACE_TOO_SMALL: return "workspace too small";
        case MOEGEMM_STATUS_INVALID_STATE: return "plan not ready for this call";
        case MOEGEMM_STATUS_ALLOC_FAILED: return "memory allocation failed";
        case MOEGEMM_STATUS_CUDA_ERROR: return "CUDA runtime error";
        case MOEGEMM_STATUS_CUBLAS_ERROR: return "cuBLAS error";
        case MOEGEMM_STATUS_INTERNAL_ERROR: return "internal error";
    }
    return "unknown status";
}

const char* status_name(int status) noexcept {
    switch (status) {
#define MOEGEMM_NAME_CASE(s) \
    case s: return #s;
        MOEGEMM_NAME_CASE(MOEGEMM_STATUS_SUCCESS)
        MOEGEMM_NAME_CASE(MOEGEMM_STATUS_INVALID_VALUE)
        MOEGEMM_NAME_CASE(MOEGEMM_STATUS_NOT_SUPPORTED)
        MOEGEMM_NAME_CASE(MOEGEMM_STATUS_NO_DEVICE)
        MOEGEMM_NAME_CASE(MOEGEMM_STATUS_ARCH_MISMATCH)
        MOEGEMM_NAME_CASE(MOEGEMM_STATUS_MISALIGNED)
        MOEGEMM_NAME_CASE(MOEGEMM_STATUS_WORKSPACE_TOO_SMALL)
        MOEGEMM_NAME_CASE(MOEGEMM_STATUS_INVALID_STATE)
        MOEGEMM_NAME_CASE(MOEGEMM_STATUS_ALLOC_FAILED)
        MOEGEMM_NAME_CASE(MOEGEMM_STATUS_CUDA_ERROR)
        MOEGEMM_NAME_CASE(MOEGEMM_STATUS_CUBLAS_ERROR)
        MOEGEMM_NAME_CASE(MOEGEMM_STATUS_INTERNAL_ERROR)
#undef MOEGEMM_NAME_CASE
    }
    return "MOEGEMM_STATUS_UNKNOWN";
}

void throw_cuda_error(int error, const char* what) {
    const auto e = static_cast<cudaError_t>(error);
    // Consume a non-sticky error so the caller's next CUDA call does not see ours.
    (void)cudaGetLastError();
    moegemm_status_t status = MOEGEMM_STATUS_CUDA_ERROR;
    switch (e) {
        case cudaErrorMemoryAllocation: status = MOEGEMM_STATUS_ALLOC_FAILED; break;
        case cudaErrorNoDevice:
        case cudaErrorInsufficientDriver:
        case cudaErrorCompatNotSupportedOnDevice:
        case cudaErrorSystemDriverMismatch:
        case cudaErrorDevicesUnavailable: status = MOEGEMM_STATUS_NO_DEVICE; break;
        default: break;
    }
    fail(status, "{} failed: {} ({})", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

void throw_cublas_error(int status, const char* what) {
    const auto s = static_cast<cublasStatus_t>(status);
    const moegemm_status_t ours =
        s == CUBLAS_STATUS_ALLOC_FAILED ? MOEGEMM_STATUS_ALLOC_FAILED : MOEGEMM_STATUS_CUBLAS_ERROR;
    fail(ours, "{} failed: {} ({})", what, cublasLtGetStatusName(s), cublasLtGetStatusString(s));
}

}  // namespace moegemm

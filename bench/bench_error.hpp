// The one exception type of moegemm-bench.
#pragma once

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

}  // namespace moegemm_bench

// Internal error model: code inside the library throws moegemm::Error; the extern "C" layer
// (api.cpp) catches it, stores the message for moegemm_get_last_error_message and returns
// the status. Nothing here prints.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "moegemm/moegemm.h"

namespace moegemm {

class Error : public std::runtime_error {
public:
    Error(moegemm_status_t status, std::string message)
        : std::runtime_error(std::move(message)), status_(status) {}
    moegemm_status_t status() const noexcept { return status_; }

private:
    moegemm_status_t status_;
};

/// Throws Error(status, formatted message). The message names the argument and the rule.
template <typename... Args>
[[noreturn]] void fail(moegemm_status_t status, fmt::format_string<Args...> format,
                       Args&&... args) {
    throw Error(status, fmt::format(format, std::forward<Args>(args)...));
}

/// Throws with `status` unless `condition` holds.
template <typename... Args>
void require(bool condition, moegemm_status_t status, fmt::format_string<Args...> format,
             Args&&... args) {
    if (!condition) fail(status, format, std::forward<Args>(args)...);
}

/// Records `message` as the calling thread's last error (api.cpp calls it).
void set_last_error(const char* message) noexcept;
const char* last_error() noexcept;

/// Static strings for the public status functions. They take the status as an int: a C
/// caller may pass any value, and loading an out-of-range value through the enum type would
/// be undefined behaviour in C++.
const char* status_string(int status) noexcept;
const char* status_name(int status) noexcept;

// CUDA and cuBLAS calls are checked with these; `what` is the call as written.
void throw_cuda_error(int error, const char* what);
void throw_cublas_error(int status, const char* what);

}  // namespace moegemm

#define MOEGEMM_CUDA_CHECK(call)                                                   \
    do {                                                                           \
        const int moegemm_cuda_status_ = static_cast<int>(call);                   \
        if (moegemm_cuda_status_ != 0) ::moegemm::throw_cuda_error(moegemm_cuda_status_, #call); \
    } while (0)

#define MOEGEMM_CUBLAS_CHECK(call)                                                 \
    do {                                                                           \
        const int moegemm_cublas_status_ = static_cast<int>(call);                 \
        if (moegemm_cublas_status_ != 0)                                           \
            ::moegemm::throw_cublas_error(moegemm_cublas_status_, #call);          \
    } while (0)

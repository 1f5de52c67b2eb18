// A deliberately bad shared library for the check_exports.cmake self-test: it exports a
// symbol without the moegemm_ prefix, a moegemm_ symbol the header does not declare, only
// one of the header's functions, has the wrong SONAME, and needs libcudart and libfmt.
// The self-test passes only if check_exports.cmake reports every one of these.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <string>

extern "C" {

__attribute__((visibility("default"))) int foo(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : -1;
}

__attribute__((visibility("default"))) int moegemm_not_in_header(void) {
    return static_cast<int>(fmt::format("{}", 42).size());
}

__attribute__((visibility("default"))) int moegemm_get_version(void) { return 0; }

}  // extern "C"

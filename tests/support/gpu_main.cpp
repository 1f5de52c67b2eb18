// Entry point of moegemm_gpu_tests. Without a usable GPU the tests cannot run, and they must
// not pass either: exit with 77, which CTest reports as skipped (SKIP_RETURN_CODE).
#define CATCH_CONFIG_RUNNER
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "moegemm/moegemm.h"
#include "support/gpu_harness.hpp"

namespace {

constexpr int kSkipCode = 77;

// On a machine that is meant to have a GPU (MOEGEMM_REQUIRE_GPU=1, set by
// tests/gpu_session.sh), "no usable GPU" is a failure, not a skip: a broken driver must not
// turn the GPU suite green.
int skip() {
    const char* require = std::getenv("MOEGEMM_REQUIRE_GPU");
    return require && std::strcmp(require, "1") == 0 ? 1 : kSkipCode;
}

}  // namespace

int main(int argc, char* argv[]) {
    // A misspelt backend filter must not turn the suite green by skipping everything.
    unsigned mask = 0;
    std::string filter_error;
    if (!mgt::parse_backend_filter(std::getenv("MOEGEMM_TEST_BACKENDS"), &mask, &filter_error)) {
        std::fprintf(stderr, "moegemm_gpu_tests: %s\n", filter_error.c_str());
        return 2;
    }
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        std::fprintf(stderr, "moegemm_gpu_tests: SKIPPED: no usable GPU (cudaGetDeviceCount: %s: %s)\n",
                     cudaGetErrorName(err), cudaGetErrorString(err));
        return skip();
    }
    if (count <= 0) {
        std::fprintf(stderr, "moegemm_gpu_tests: SKIPPED: no CUDA device found\n");
        return skip();
    }
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) dev = 0;
    cudaDeviceProp prop{};
    const cudaError_t perr = cudaGetDeviceProperties(&prop, dev);
    if (perr != cudaSuccess) {
        std::fprintf(stderr, "moegemm_gpu_tests: SKIPPED: cannot query device %d (%s: %s)\n", dev,
                     cudaGetErrorName(perr), cudaGetErrorString(perr));
        return skip();
    }
    if (prop.major < 8) {
        std::fprintf(stderr,
                     "moegemm_gpu_tests: SKIPPED: device %d (%s) has compute capability %d.%d; "
                     "libmoegemm needs 8.0 or newer\n",
                     dev, prop.name, prop.major, prop.minor);
        return skip();
    }
    std::printf("moegemm_gpu_tests: device %d: %s (sm_%d%d, %d SMs), libmoegemm %s, %s\n", dev,
                prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                moegemm_get_version_string(), mgt::backend_filter_str().c_str());
    std::fflush(stdout);
    return Catch::Session().run(argc, argv);
}

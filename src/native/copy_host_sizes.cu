// The copy of host sizes into the workspace for plans with more experts than a GEMM launch's
// parameters hold (grouped_gemm_launch.hpp, launch_copy_host_sizes).
#include "native/grouped_gemm_launch.hpp"
#include "native/ptx.cuh"

namespace moegemm::native {

namespace {

struct HostSizesCopy {
    int32_t sizes[MOEGEMM_MAX_EXPERTS];
    int32_t* dst;
    int32_t count;
};

__global__ void __launch_bounds__(256) copy_host_sizes_kernel(
    const __grid_constant__ HostSizesCopy copy) {
    // The GEMM launched after this one may start its prologue now: it reads the sizes only
    // after waiting for this grid to complete (device sizes wait first).
    ptx::allow_dependent_grids();
    for (int i = static_cast<int>(threadIdx.x); i < copy.count; i += static_cast<int>(blockDim.x))
        copy.dst[i] = copy.sizes[i];
}

}  // namespace

cudaError_t launch_copy_host_sizes(const int32_t* sizes, int count, int32_t* dst,
                                   cudaStream_t stream) {
    if (count < 0 || count > MOEGEMM_MAX_EXPERTS) return cudaErrorInvalidValue;
    HostSizesCopy copy{};
    for (int i = 0; i < count; ++i) copy.sizes[i] = sizes[i];
    copy.dst = dst;
    copy.count = count;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(1);
    config.blockDim = dim3(256);
    config.stream = stream;
    return cudaLaunchKernelEx(&config, copy_host_sizes_kernel, copy);
}

}  // namespace moegemm::native

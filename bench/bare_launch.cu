// The bare launch of bare_launch.hpp.
#include "bare_launch.hpp"

#include "cuda_utils.hpp"

namespace moegemm_bench {
namespace {

struct BareParams {
    unsigned char bytes[kBareLaunchParamBytes];
};

__global__ void __launch_bounds__(384) bare_kernel(const __grid_constant__ BareParams params,
                                                   long long busy_ns) {
    (void)params;
    if (threadIdx.x != 0 || busy_ns <= 0) return;
    unsigned long long start = 0, now = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < static_cast<unsigned long long>(busy_ns));
}

}  // namespace

void launch_bare_kernel(cudaStream_t stream, int ctas, bool dependent_launch, long long busy_ns) {
    static const BareParams params{};
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(ctas > 0 ? ctas : 1));
    config.blockDim = dim3(384);
    config.stream = stream;
    cudaLaunchAttribute attribute{};
    if (dependent_launch) {
        attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attribute.val.programmaticStreamSerializationAllowed = 1;
        config.attrs = &attribute;
        config.numAttrs = 1;
    }
    BENCH_CUDA_CHECK(cudaLaunchKernelEx(&config, bare_kernel, params, busy_ns));
}

}  // namespace moegemm_bench

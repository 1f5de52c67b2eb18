// Does a MASKED plan's launch run slower after a batch of resident do-nothing kernels? In
// moegemm-bench such a batch (20 x 100 launches of 132 CTAs that stay ~230 µs, as its bare
// launches did between the rows in session 25) slowed the MASKED row timed after it by up to
// 10% while the eager and graph rows were unchanged (bench/NOTES.md §44). This tool repeats the
// pattern without the bench: one dsv3ep8-fc2-decode128-shaped problem (E = 32, N = 7168,
// K = 2048, 4-44 rows per expert) as a MASKED plan with device sizes and as a VARIABLE plan with
// host sizes; for each, repetitions timed as the bench times them (an event pair around each
// execute, all enqueued back to back; 200 after 20 warm-up), first from an idle GPU, then
// right after a resident batch, then once more. Prints the median and the median of the first
// 20 repetitions of each set.
//
//   nvcc -O2 -std=c++17 -arch=sm_90a -Iinclude -Ibench/tools bench/tools/masked_after_busy.cu \
//        -Lbuild -lmoegemm -o masked_after_busy
//   LD_LIBRARY_PATH=<dir of libmoegemm.so> ./masked_after_busy
// Session 26 (NOTES §46): no slowdown here (MASKED 224.0-224.2 µs in every set, two runs).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "event_timing.cuh"
#include "moegemm/moegemm.h"

namespace {

constexpr int kExperts = 32;
constexpr long long kN = 7168, kK = 2048;

// The bench's resident bare kernel: thread 0 of each CTA stays `ns` nanoseconds.
__global__ void __launch_bounds__(384) resident_kernel(long long ns) {
    if (threadIdx.x != 0) return;
    const unsigned long long start = global_timer();
    while (global_timer() - start < static_cast<unsigned long long>(ns)) {
    }
}

bool ok(moegemm_status_t s, const char* what) {
    if (s != MOEGEMM_STATUS_SUCCESS)
        std::printf("%s: %s (%s)\n", what, moegemm_status_name(s), moegemm_get_last_error_message());
    return s == MOEGEMM_STATUS_SUCCESS;
}

struct Timed {
    double median_us, first20_us;
};

// `reps` executes, each between two events, enqueued back to back after 20 untimed ones.
template <typename Execute>
Timed time_reps(const Execute& execute, cudaStream_t stream, int reps = 200) {
    std::vector<double> us =
        event_pair_times(execute, stream, reps, [&] { for (int i = 0; i < 20; ++i) execute(); });
    std::vector<double> first(us.begin(), us.begin() + 20);
    std::sort(us.begin(), us.end());
    std::sort(first.begin(), first.end());
    return {us[us.size() / 2], first[first.size() / 2]};
}

void resident_batch(cudaStream_t stream, long long ns) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(132);
    config.blockDim = dim3(384);
    config.stream = stream;
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    for (int batch = 0; batch < 20; ++batch) {
        for (int i = 0; i < 100; ++i) cudaLaunchKernelEx(&config, resident_kernel, ns);
        cudaStreamSynchronize(stream);
    }
}

}  // namespace

int main() {
    std::vector<int32_t> sizes(kExperts);
    int32_t largest = 0;
    long long total = 0;
    for (int e = 0; e < kExperts; ++e) {
        sizes[e] = (e * 7) % 41 + 4;
        largest = std::max(largest, sizes[e]);
        total += sizes[e];
    }
    const long long slab = 2 * largest;  // MASKED max_rows, as the bench's
    void *a = nullptr, *b = nullptr, *d = nullptr, *dev_sizes = nullptr;
    if (cudaMalloc(&a, kExperts * slab * kK * 2) != cudaSuccess ||
        cudaMalloc(&b, kExperts * kN * kK * 2) != cudaSuccess ||
        cudaMalloc(&d, kExperts * slab * kN * 2) != cudaSuccess ||
        cudaMalloc(&dev_sizes, kExperts * sizeof(int32_t)) != cudaSuccess) {
        std::printf("no GPU or not enough memory\n");
        return 2;
    }
    cudaMemset(a, 0, kExperts * slab * kK * 2);
    cudaMemset(b, 0, kExperts * kN * kK * 2);
    cudaMemcpy(dev_sizes, sizes.data(), kExperts * sizeof(int32_t), cudaMemcpyHostToDevice);
    cudaStream_t stream = nullptr;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);

    struct Variant {
        const char* name;
        moegemm_layout_t layout;
        moegemm_plan_t plan = nullptr;
        void* workspace = nullptr;
        size_t workspace_bytes = 0;
    } variants[] = {{"MASKED, device sizes", MOEGEMM_LAYOUT_MASKED},
                    {"VARIABLE, host sizes", MOEGEMM_LAYOUT_VARIABLE}};
    for (Variant& v : variants) {
        moegemm_problem_t p;
        moegemm_problem_init(&p);
        p.layout = v.layout;
        p.num_experts = kExperts;
        p.n = kN;
        p.k = kK;
        p.max_rows = v.layout == MOEGEMM_LAYOUT_MASKED ? slab : kExperts * slab;
        p.expected_rows = v.layout == MOEGEMM_LAYOUT_MASKED ? total / kExperts : 0;
        if (!ok(moegemm_plan_create(&p, &v.plan), "plan_create") ||
            !ok(moegemm_plan_set_expert_sizes(
                    v.plan,
                    v.layout == MOEGEMM_LAYOUT_MASKED ? static_cast<const int32_t*>(dev_sizes)
                                                      : sizes.data(),
                    v.layout == MOEGEMM_LAYOUT_MASKED ? MOEGEMM_MEMORY_DEVICE
                                                      : MOEGEMM_MEMORY_HOST),
                "set_expert_sizes") ||
            !ok(moegemm_plan_get_workspace_size(v.plan, &v.workspace_bytes), "workspace_size"))
            return 1;
        cudaMalloc(&v.workspace, std::max<size_t>(v.workspace_bytes, 256));
    }
    const long long resident_ns = 230000;
    for (Variant& v : variants) {
        auto execute = [&] {
            moegemm_execute(v.plan, a, b, d, nullptr, nullptr, v.workspace, v.workspace_bytes,
                            stream);
        };
        const Timed idle = time_reps(execute, stream);
        resident_batch(stream, resident_ns);
        const Timed after = time_reps(execute, stream);
        const Timed again = time_reps(execute, stream);
        resident_batch(stream, resident_ns);
        const Timed after2 = time_reps(execute, stream);
        std::printf("%-22s idle %.1f (first 20: %.1f) | after a resident batch %.1f (%.1f) | "
                    "then %.1f (%.1f) | after another %.1f (%.1f) us\n",
                    v.name, idle.median_us, idle.first20_us, after.median_us, after.first20_us,
                    again.median_us, again.first20_us, after2.median_us, after2.first20_us);
    }
    std::printf("(%s)\n", cudaGetErrorString(cudaStreamSynchronize(stream)));
    for (Variant& v : variants) moegemm_plan_destroy(v.plan);
    return 0;
}

// Does the time of one moegemm_execute depend on where its workspace lies? The native kernels
// keep their per-CTA tensor maps (and the tile-ticket word) in the workspace, and the TMA unit
// reads a map from there; moegemm-bench gives each of its three libmoegemm rows (eager, graph,
// MASKED) a workspace of its own, and on some H200s those rows of one workload differ by 5-7%,
// in a pattern that moves when the allocation order changes (bench/NOTES.md §25).
//
// One plan (dsv3ep8-fc1-decode128's shape and sizes, bf16, host sizes), fixed A, B and D; the
// workspace is placed at a series of offsets inside one large allocation, and each placement is
// timed like moegemm-bench times a repetition (an event before and after each call, the median
// of the reps), twice over the whole series, so that a placement effect shows up as the same
// offsets being slow in both passes.
//
//   nvcc -O2 -std=c++17 -arch=sm_90a -Iinclude bench/tools/workspace_placement.cu \
//        -Lbuild -lmoegemm -Xlinker -rpath,build -o build/workspace_placement
//   build/workspace_placement [reps]
#include <moegemm/moegemm.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

#define CHECK_CUDA(call)                                                                     \
    do {                                                                                     \
        cudaError_t err_ = (call);                                                           \
        if (err_ != cudaSuccess) {                                                           \
            std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(err_));               \
            std::exit(1);                                                                    \
        }                                                                                    \
    } while (0)
#define CHECK_MOE(call)                                                                      \
    do {                                                                                     \
        moegemm_status_t st_ = (call);                                                       \
        if (st_ != MOEGEMM_STATUS_SUCCESS) {                                                 \
            std::fprintf(stderr, "%s: %s: %s\n", #call, moegemm_status_name(st_),            \
                         moegemm_get_last_error_message());                                  \
            std::exit(1);                                                                    \
        }                                                                                    \
    } while (0)

__global__ void fill_bf16(__nv_bfloat16* x, size_t count, uint32_t seed) {
    for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
         i += size_t{gridDim.x} * blockDim.x) {
        uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        x[i] = __float2bfloat16(static_cast<float>(h % 2001) / 1000.0f - 1.0f);
    }
}

}  // namespace

int main(int argc, char** argv) {
    const int reps = argc > 1 ? std::atoi(argv[1]) : 60;
    // dsv3ep8-fc1-decode128 (bench/workloads/moe.txt).
    const std::vector<int32_t> sizes = {62, 12, 17, 9,  15, 10, 19, 9, 59, 21, 69, 11, 10, 29, 20, 9,
                                        10, 63, 12, 22, 49, 9,  13, 10, 16, 11, 41, 28, 16, 30, 11, 16};
    const int experts = static_cast<int>(sizes.size());
    const int64_t n = 4096, k = 7168;
    int64_t rows = 0;
    for (int32_t s : sizes) rows += s;

    moegemm_problem_t problem;
    CHECK_MOE(moegemm_problem_init(&problem));
    problem.layout = MOEGEMM_LAYOUT_VARIABLE;
    problem.num_experts = experts;
    problem.n = n;
    problem.k = k;
    problem.max_rows = rows;
    moegemm_plan_t plan = nullptr;
    CHECK_MOE(moegemm_plan_create(&problem, &plan));
    CHECK_MOE(moegemm_plan_set_expert_sizes(plan, sizes.data(), MOEGEMM_MEMORY_HOST));
    char described[MOEGEMM_DESCRIBE_MAX];
    CHECK_MOE(moegemm_plan_describe(plan, described, sizeof described));
    size_t workspace_bytes = 0;
    CHECK_MOE(moegemm_plan_get_workspace_size(plan, &workspace_bytes));
    std::printf("plan: %s\nworkspace %zu bytes\n", described, workspace_bytes);

    const size_t a_count = static_cast<size_t>(rows * k);
    const size_t b_count = static_cast<size_t>(experts * n * k);
    __nv_bfloat16 *a = nullptr, *b = nullptr, *d = nullptr;
    CHECK_CUDA(cudaMalloc(&a, a_count * 2));
    CHECK_CUDA(cudaMalloc(&b, b_count * 2));
    CHECK_CUDA(cudaMalloc(&d, static_cast<size_t>(rows * n) * 2));
    fill_bf16<<<1024, 256>>>(a, a_count, 1u);
    fill_bf16<<<1024, 256>>>(b, b_count, 2u);
    CHECK_CUDA(cudaGetLastError());
    // Offsets up to 64 MB, at strides that move the maps across L2 sets and slices and DRAM
    // channels: 1 KB steps, then larger ones.
    std::vector<size_t> offsets;
    for (size_t i = 0; i < 8; ++i) offsets.push_back(i * 1024);
    for (size_t i = 1; i < 16; ++i) offsets.push_back(i * 4u * 1024 * 1024 + i * 3u * 1024);
    const size_t pool_bytes = offsets.back() + workspace_bytes + 4096;
    unsigned char* pool = nullptr;
    CHECK_CUDA(cudaMalloc(&pool, pool_bytes));
    CHECK_CUDA(cudaMemset(pool, 0, pool_bytes));

    cudaStream_t stream;
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    std::vector<cudaEvent_t> events(static_cast<size_t>(reps) + 1);
    for (cudaEvent_t& e : events) CHECK_CUDA(cudaEventCreate(&e));
    auto run = [&](unsigned char* workspace) {
        CHECK_MOE(moegemm_execute(plan, a, b, d, nullptr, nullptr, workspace, workspace_bytes,
                                  stream));
    };
    for (int pass = 0; pass < 2; ++pass) {
        for (size_t offset : offsets) {
            unsigned char* workspace = pool + offset;
            for (int i = 0; i < 20; ++i) run(workspace);  // warm-up
            CHECK_CUDA(cudaEventRecord(events[0], stream));
            for (int i = 0; i < reps; ++i) {
                run(workspace);
                CHECK_CUDA(cudaEventRecord(events[static_cast<size_t>(i) + 1], stream));
            }
            CHECK_CUDA(cudaStreamSynchronize(stream));
            std::vector<float> us(static_cast<size_t>(reps));
            for (int i = 0; i < reps; ++i) {
                CHECK_CUDA(cudaEventElapsedTime(&us[static_cast<size_t>(i)],
                                                events[static_cast<size_t>(i)],
                                                events[static_cast<size_t>(i) + 1]));
                us[static_cast<size_t>(i)] *= 1000.0f;
            }
            std::sort(us.begin(), us.end());
            std::printf("pass %d  workspace %p (offset %9zu)  median %7.1f us  min %7.1f  max %7.1f\n",
                        pass, static_cast<void*>(workspace), offset, us[us.size() / 2], us.front(),
                        us.back());
        }
    }
    moegemm_plan_destroy(plan);
    return 0;
}

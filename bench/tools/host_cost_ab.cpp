// Host cost of moegemm_execute in two builds of the library, in one process, batches
// alternating: the machines' launch cost drifts by ~1 µs between passes and calls (bench/NOTES.md
// §44), more than a change to the library's own share can move it, so two builds are compared
// only batch against neighbouring batch. Each library is loaded by its path with
// dlopen(RTLD_LOCAL | RTLD_DEEPBIND), which maps a second file of the same soname as an object
// of its own (the tool refuses to run if both paths resolve to the same code: give two files,
// not two links to one). Each carries its own static CUDA runtime; both share the device's
// primary context and the one driver library. Each library
// gets its own plan, workspace and output for one decode problem (VARIABLE, host
// sizes, bf16; the contents of A and B do not matter to the timing), and executes on one stream
// in batches of 100 back-to-back calls, thread CPU time per call; 12 pairs of batches after a
// warm-up, A first in even pairs and B first in odd ones (so that neither gains from its
// place). Prints each pair (A / B), both means, and the median of B - A over the pairs. Exits
// 1 on any failed library or CUDA call. Run both orders and a null pair (one build as A and
// a copy of it as B): on an H200 machine the library loaded second read ~0.15 µs faster with
// the same build on both sides (bench/NOTES.md §45).
//
//   g++ -O2 -std=c++17 -Iinclude -I/usr/local/cuda/include bench/tools/host_cost_ab.cpp \
//       -L/usr/local/cuda/lib64 -lcudart_static -ldl -lrt -lpthread -o host_cost_ab
//   ./host_cost_ab libA.so libB.so [E N K rows_per_expert]     (default 8 4096 14336 16)
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "moegemm/moegemm.h"

namespace {

struct Library {
    decltype(&moegemm_problem_init) problem_init = nullptr;
    decltype(&moegemm_plan_create) plan_create = nullptr;
    decltype(&moegemm_plan_set_expert_sizes) set_sizes = nullptr;
    decltype(&moegemm_plan_get_workspace_size) workspace_size = nullptr;
    decltype(&moegemm_execute) execute = nullptr;
    decltype(&moegemm_plan_destroy) plan_destroy = nullptr;
    moegemm_plan_t plan = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
    void* d = nullptr;
};

bool cuda_ok(cudaError_t err, const char* what) {
    if (err != cudaSuccess) std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    return err == cudaSuccess;
}

template <typename F>
bool resolve(void* handle, const char* name, F& f) {
    f = reinterpret_cast<F>(dlsym(handle, name));
    if (!f) std::fprintf(stderr, "%s: %s\n", name, dlerror());
    return f != nullptr;
}

double thread_seconds() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s libA.so libB.so [E N K rows_per_expert]\n", argv[0]);
        return 2;
    }
    const int experts = argc > 3 ? std::atoi(argv[3]) : 8;
    const long long n = argc > 4 ? std::atoll(argv[4]) : 4096;
    const long long k = argc > 5 ? std::atoll(argv[5]) : 14336;
    const int rows = argc > 6 ? std::atoi(argv[6]) : 16;
    const long long total = static_cast<long long>(experts) * rows;
    void *a = nullptr, *b = nullptr;
    if (cudaMalloc(&a, total * k * 2) != cudaSuccess ||
        cudaMalloc(&b, static_cast<long long>(experts) * n * k * 2) != cudaSuccess) {
        std::printf("no GPU or not enough memory\n");
        return 2;
    }
    cudaStream_t stream = nullptr;
    if (!cuda_ok(cudaMemset(a, 0, total * k * 2), "cudaMemset") ||
        !cuda_ok(cudaMemset(b, 0, static_cast<long long>(experts) * n * k * 2), "cudaMemset") ||
        !cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"))
        return 1;
    const std::vector<int32_t> sizes(static_cast<size_t>(experts), rows);
    Library lib[2];
    for (int i = 0; i < 2; ++i) {
        void* handle = dlopen(argv[1 + i], RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
        if (!handle) {
            std::fprintf(stderr, "%s\n", dlerror());
            return 1;
        }
        Library& l = lib[i];
        if (!resolve(handle, "moegemm_problem_init", l.problem_init) ||
            !resolve(handle, "moegemm_plan_create", l.plan_create) ||
            !resolve(handle, "moegemm_plan_set_expert_sizes", l.set_sizes) ||
            !resolve(handle, "moegemm_plan_get_workspace_size", l.workspace_size) ||
            !resolve(handle, "moegemm_execute", l.execute) ||
            !resolve(handle, "moegemm_plan_destroy", l.plan_destroy))
            return 1;
        moegemm_problem_t p;
        if (l.problem_init(&p) != MOEGEMM_STATUS_SUCCESS) return 1;
        p.layout = MOEGEMM_LAYOUT_VARIABLE;
        p.num_experts = experts;
        p.n = n;
        p.k = k;
        p.max_rows = total;
        p.a_type = p.b_type = p.d_type = MOEGEMM_DTYPE_BF16;
        if (l.plan_create(&p, &l.plan) != MOEGEMM_STATUS_SUCCESS ||
            l.set_sizes(l.plan, sizes.data(), MOEGEMM_MEMORY_HOST) != MOEGEMM_STATUS_SUCCESS ||
            l.workspace_size(l.plan, &l.workspace_bytes) != MOEGEMM_STATUS_SUCCESS) {
            std::fprintf(stderr, "%s: plan failed\n", argv[1 + i]);
            return 1;
        }
        if (!cuda_ok(cudaMalloc(&l.workspace, std::max<size_t>(l.workspace_bytes, 256)),
                     "cudaMalloc") ||
            !cuda_ok(cudaMalloc(&l.d, total * n * 2), "cudaMalloc"))
            return 1;
    }
    if (lib[0].execute == lib[1].execute) {
        std::fprintf(stderr, "%s and %s resolved to one loaded library\n", argv[1], argv[2]);
        return 1;
    }
    int failed_calls = 0;  // counted, not checked one by one: a check would be timed too
    auto batch = [&](Library& l) {
        cudaStreamSynchronize(stream);
        const double start = thread_seconds();
        for (int i = 0; i < 100; ++i) {
            failed_calls += l.execute(l.plan, a, b, l.d, nullptr, nullptr, l.workspace,
                                      l.workspace_bytes, stream) != MOEGEMM_STATUS_SUCCESS;
        }
        return 1e6 * (thread_seconds() - start) / 100;
    };
    for (int warm = 0; warm < 3; ++warm) {
        batch(lib[0]);
        batch(lib[1]);
    }
    if (failed_calls > 0 || !cuda_ok(cudaStreamSynchronize(stream), "warm-up")) {
        std::fprintf(stderr, "moegemm_execute failed %d times in the warm-up\n", failed_calls);
        return 1;
    }
    std::vector<double> diffs;
    double sum_a = 0, sum_b = 0;
    std::printf("E=%d N=%lld K=%lld %d rows per expert, us per call (A / B):", experts, n, k, rows);
    for (int pair = 0; pair < 12; ++pair) {
        double ta = 0, tb = 0;
        if (pair % 2 == 0) {
            ta = batch(lib[0]);
            tb = batch(lib[1]);
        } else {
            tb = batch(lib[1]);
            ta = batch(lib[0]);
        }
        std::printf(" %.2f/%.2f", ta, tb);
        diffs.push_back(tb - ta);
        sum_a += ta;
        sum_b += tb;
    }
    std::sort(diffs.begin(), diffs.end());
    std::printf("\n  means %.2f / %.2f us, B - A median %+.2f us, %d of 12 pairs B faster (%s)\n",
                sum_a / 12, sum_b / 12, 0.5 * (diffs[5] + diffs[6]),
                static_cast<int>(std::count_if(diffs.begin(), diffs.end(),
                                               [](double x) { return x < 0; })),
                cudaGetErrorString(cudaStreamSynchronize(stream)));
    for (Library& l : lib) {
        l.plan_destroy(l.plan);
        cudaFree(l.workspace);
        cudaFree(l.d);
    }
    cudaFree(a);
    cudaFree(b);
    cudaStreamDestroy(stream);
    if (failed_calls > 0) {
        std::fprintf(stderr, "moegemm_execute failed %d times\n", failed_calls);
        return 1;
    }
    return 0;
}

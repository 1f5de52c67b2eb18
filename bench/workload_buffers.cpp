#include "fill.hpp"
#include "grouped_gemm.hpp"

#include <algorithm>

namespace moegemm_bench {

namespace {

constexpr int kMaxRotationSets = 64;
// Rotation copies are a refinement; never let them take more than this share of free memory,
// which the peers' extra buffers (padded copies, the library's workspace) also need.
constexpr double kRotationMemoryShare = 0.5;

}  // namespace

int rotation_sets_for(size_t touched_bytes, size_t bytes_per_set, size_t l2_bytes) {
    if (touched_bytes == 0 || bytes_per_set == 0) return 1;
    const size_t target = 2 * l2_bytes;
    const size_t wanted = touched_bytes > target ? 1 : target / touched_bytes + 1;
    const auto affordable =
        static_cast<size_t>(kRotationMemoryShare * static_cast<double>(free_device_memory())) /
        bytes_per_set;
    return static_cast<int>(
        std::max<size_t>(1, std::min({wanted, affordable, size_t{kMaxRotationSets}})));
}

WorkloadBuffers::WorkloadBuffers(const Workload& workload, size_t l2_bytes, cudaStream_t stream)
    : workload_(workload) {
    int64_t offset = 0;
    for (const int32_t rows : workload.rows) {
        row_offsets_.push_back(offset);
        offset += rows;
    }

    // A repetition touches A, D and the weights of the experts with rows only: a workload whose
    // few active experts fit in L2 needs copies even if all of B does not fit.
    const auto set_bytes = static_cast<size_t>(a_bytes() + b_bytes() + d_bytes());
    const auto touched_bytes = static_cast<size_t>(workload.min_bytes());
    const int num_sets = rotation_sets_for(touched_bytes, set_bytes, l2_bytes);
    for (int s = 0; s < num_sets; ++s) {
        Set set{};
        for (auto [pointer, bytes] : {std::pair{&set.a, a_bytes()}, std::pair{&set.b, b_bytes()},
                                      std::pair{&set.d, d_bytes()}}) {
            memory_.emplace_back(static_cast<size_t>(bytes));
            *pointer = memory_.back().get();
            // A distinct seed per buffer and per set: no two sets share values either.
            fill_uniform_bf16(*pointer, static_cast<size_t>(bytes / kBf16Bytes),
                              static_cast<uint32_t>(memory_.size()) * 0x632be5abu, stream);
        }
        sets_.push_back(set);
    }
    BENCH_CUDA_CHECK(cudaStreamSynchronize(stream));
}

int64_t WorkloadBuffers::a_bytes() const noexcept {
    return workload_.total_rows() * workload_.k * kBf16Bytes;
}

int64_t WorkloadBuffers::b_bytes() const noexcept {
    return int64_t{workload_.experts} * workload_.n * workload_.k * kBf16Bytes;
}

int64_t WorkloadBuffers::d_bytes() const noexcept {
    return workload_.total_rows() * workload_.n * kBf16Bytes;
}

}  // namespace moegemm_bench

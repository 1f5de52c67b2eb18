#include "device_kernels.hpp"
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
    const int64_t a_scales = workload.a_scale_count(workload.total_rows());
    const int64_t b_scales = workload.b_scale_count();
    const auto set_bytes = static_cast<size_t>(a_bytes() + b_bytes() + d_bytes() +
                                               (a_scales + b_scales) * int64_t{sizeof(float)});
    const auto touched_bytes = static_cast<size_t>(workload.min_bytes());
    const int num_sets = rotation_sets_for(touched_bytes, set_bytes, l2_bytes);
    for (int s = 0; s < num_sets; ++s) {
        Set set{};
        set.a = add_buffer(a_bytes() / workload.input_bytes(), Contents::inputs, stream);
        set.b = add_buffer(b_bytes() / workload.input_bytes(), Contents::inputs, stream);
        set.d = add_buffer(d_bytes() / kBf16Bytes, Contents::output, stream);
        set.a_scale = static_cast<const float*>(add_buffer(a_scales, Contents::scales, stream));
        set.b_scale = static_cast<const float*>(add_buffer(b_scales, Contents::scales, stream));
        sets_.push_back(set);
    }
    BENCH_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void* WorkloadBuffers::add_buffer(int64_t elements, Contents contents, cudaStream_t stream) {
    if (elements == 0) return nullptr;
    const int64_t element_bytes = contents == Contents::inputs   ? workload_.input_bytes()
                                  : contents == Contents::output ? kBf16Bytes
                                                                 : int64_t{sizeof(float)};
    memory_.emplace_back(static_cast<size_t>(elements * element_bytes));
    void* data = memory_.back().get();
    // A distinct seed per buffer and per set: no two sets share values either.
    const uint32_t seed = static_cast<uint32_t>(memory_.size()) * 0x632be5abu;
    const auto count = static_cast<size_t>(elements);
    switch (contents) {
        case Contents::inputs:
            fill_inputs(data, count, workload_.input_type, seed, stream);
            break;
        case Contents::output:
            fill_uniform_bf16(data, count, seed, stream);
            break;
        case Contents::scales:
            fill_scales(static_cast<float*>(data), count, seed, stream);
            break;
    }
    return data;
}

int64_t WorkloadBuffers::a_bytes() const noexcept {
    return workload_.total_rows() * workload_.k * workload_.input_bytes();
}

int64_t WorkloadBuffers::b_bytes() const noexcept {
    return int64_t{workload_.experts} * workload_.n * workload_.k * workload_.input_bytes();
}

int64_t WorkloadBuffers::d_bytes() const noexcept {
    return workload_.total_rows() * workload_.n * kBf16Bytes;
}

}  // namespace moegemm_bench

// libmoegemm in C++17: the MASKED layout with expert sizes in device memory.
//
//   A [E, MAX_ROWS, K] and D [E, MAX_ROWS, N]: one slab per expert; expert e owns rows
//   [0, M_e) of its slab. This is the layout of expert-parallel dispatch buffers, where the
//   number of tokens each expert received is only known on the GPU.
//
// With MOEGEMM_MEMORY_DEVICE the plan keeps the device pointer to the sizes and the GPU reads
// them at every execution: the host never sees them, so it cannot validate them. The native
// kernels clamp bad values instead (a negative size counts as 0, a size above MAX_ROWS is cut
// at MAX_ROWS) and OR what they clamped into the plan's device status word. This program
// runs once with valid sizes, then once with a deliberately negative size, and reads the
// word after each run.
//
// Resources are owned by small RAII wrappers; errors are exceptions carrying the library's
// message (both in example_support.hpp, shared with cuda_graph.cpp). Exit status: 0 and "PASS" on success; 77 when there is no usable GPU; 1 on failure.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "example_support.hpp"

namespace {

using namespace example;

// --- The problem ------------------------------------------------------------------------------

constexpr int E = 4, N = 128, K = 64, MAX_ROWS = 48;

float a_value(int e, int r, int k) { return static_cast<float>((e + r * 5 + k * 3) % 3 - 1); }
float b_value(int e, int n, int k) { return static_cast<float>((e * 3 + n + k * 7) % 5 - 2); }

// Compares rows [0, sizes[e]) of every slab (negative sizes count as 0) with the host
// reference. Rows past M_e of a slab are unspecified in the MASKED layout: not compared.
int verify(const std::vector<int32_t>& sizes, const PinnedBuffer<uint16_t>& d) {
    int mismatches = 0;
    for (int e = 0; e < E; ++e) {
        for (int r = 0; r < sizes[e]; ++r) {
            for (int n = 0; n < N; ++n) {
                float expected = 0.0f;
                for (int k = 0; k < K; ++k)
                    expected += a_value(e, r, k) * b_value(e, n, k);
                const float got = from_bf16(d[(static_cast<size_t>(e) * MAX_ROWS + r) * N + n]);
                if (got != expected && mismatches++ < 10)
                    std::fprintf(stderr, "mismatch: expert %d row %d col %d: got %g, expected %g\n",
                                 e, r, n, got, expected);
            }
        }
    }
    return mismatches;
}

std::string word_bits(uint32_t w) {
    if (w == 0)
        return "0 (nothing clamped)";
    std::string s = std::to_string(w) + " (";
    if (w & MOEGEMM_SIZES_CLAMPED_NEGATIVE)
        s += "MOEGEMM_SIZES_CLAMPED_NEGATIVE ";
    if (w & MOEGEMM_SIZES_CLAMPED_CAPACITY)
        s += "MOEGEMM_SIZES_CLAMPED_CAPACITY ";
    s.back() = ')';
    return s;
}

int run() {
    require_device();

    moegemm_problem_t problem;
    MOE_CHECK(moegemm_problem_init(&problem));
    problem.layout = MOEGEMM_LAYOUT_MASKED;
    problem.num_experts = E;
    problem.n = N;
    problem.k = K;
    problem.max_rows = MAX_ROWS;          // rows per expert slab
    problem.expected_rows = 16;           // a hint for the heuristic; sizes live on the GPU
    problem.backend = MOEGEMM_BACKEND_NATIVE;

    // The native sm_90a backend (H100, H200) reads device sizes and sets the status word.
    // Elsewhere the cuBLASLt baseline serves MASKED by computing whole slabs: the results of
    // the valid rows are the same, and the word stays 0.
    std::unique_ptr<Plan> plan_owner;
    try {
        plan_owner = std::make_unique<Plan>(problem);
    } catch (const Skip&) {
        throw;
    } catch (const std::exception& e) {
        if (std::string(e.what()).find("MOEGEMM_STATUS_NOT_SUPPORTED") == std::string::npos)
            throw;
        std::printf("native backend unavailable on this GPU; using AUTO (cuBLASLt baseline)\n");
        problem.backend = MOEGEMM_BACKEND_AUTO;
        plan_owner = std::make_unique<Plan>(problem);
    }
    const Plan& plan = *plan_owner;
    const bool native = problem.backend == MOEGEMM_BACKEND_NATIVE;

    size_t workspace_bytes = 0;
    MOE_CHECK(moegemm_plan_get_workspace_size(plan.get(), &workspace_bytes));

    // Host inputs.
    const size_t a_count = static_cast<size_t>(E) * MAX_ROWS * K;
    const size_t b_count = static_cast<size_t>(E) * N * K;
    const size_t d_count = static_cast<size_t>(E) * MAX_ROWS * N;
    std::vector<uint16_t> h_a(a_count), h_b(b_count);
    for (int e = 0; e < E; ++e)
        for (int r = 0; r < MAX_ROWS; ++r)
            for (int k = 0; k < K; ++k)
                h_a[(static_cast<size_t>(e) * MAX_ROWS + r) * K + k] = to_bf16(a_value(e, r, k));
    for (int e = 0; e < E; ++e)
        for (int n = 0; n < N; ++n)
            for (int k = 0; k < K; ++k)
                h_b[(static_cast<size_t>(e) * N + n) * K + k] = to_bf16(b_value(e, n, k));

    // Device memory, then the stream (destroyed first, see Stream).
    DeviceBuffer a(a_count * 2), b(b_count * 2), d(d_count * 2), workspace(workspace_bytes);
    DeviceBuffer sizes(E * sizeof(int32_t));
    PinnedBuffer<uint16_t> h_d(d_count);
    PinnedBuffer<int32_t> h_sizes(E);
    PinnedBuffer<uint32_t> h_word(1);
    Stream stream;

    CUDA_CHECK(cudaMemcpyAsync(a.get(), h_a.data(), a_count * 2, cudaMemcpyHostToDevice,
                               stream.get()));
    CUDA_CHECK(cudaMemcpyAsync(b.get(), h_b.data(), b_count * 2, cudaMemcpyHostToDevice,
                               stream.get()));

    // The plan keeps this device pointer; the values are read by the GPU at each execution.
    MOE_CHECK(moegemm_plan_set_expert_sizes(plan.get(), sizes.as<int32_t>(),
                                            MOEGEMM_MEMORY_DEVICE));
    std::printf("plan: %s\n", plan.describe().c_str());

    // The plan's status word: a uint32_t in device memory that the kernels OR bits into.
    uint32_t* word = nullptr;
    MOE_CHECK(moegemm_plan_get_status_word(plan.get(), &word));
    CUDA_CHECK(cudaMemsetAsync(word, 0, sizeof(uint32_t), stream.get()));

    // Executes with `values` as the sizes, copies D and the status word back, verifies.
    auto run_once = [&](const std::vector<int32_t>& values, const char* name) -> uint32_t {
        for (int e = 0; e < E; ++e)
            h_sizes[e] = values[e];
        // In a real MoE layer a routing kernel writes these; here a copy on the same stream.
        CUDA_CHECK(cudaMemcpyAsync(sizes.get(), h_sizes.get(), h_sizes.bytes(),
                                   cudaMemcpyHostToDevice, stream.get()));
        MOE_CHECK(moegemm_execute(plan.get(), a.get(), b.get(), d.get(), nullptr, nullptr,
                                  workspace.get(), workspace_bytes, stream.get()));
        // Read the word without stalling the stream: an async copy into pinned memory.
        CUDA_CHECK(cudaMemcpyAsync(h_word.get(), word, sizeof(uint32_t), cudaMemcpyDeviceToHost,
                                   stream.get()));
        CUDA_CHECK(cudaMemcpyAsync(h_d.get(), d.get(), h_d.bytes(), cudaMemcpyDeviceToHost,
                                   stream.get()));
        stream.sync();
        const int bad = verify(values, h_d);
        if (bad != 0)
            throw std::runtime_error(std::string(name) + ": " + std::to_string(bad) +
                                     " mismatching elements");
        std::printf("%s: sizes {%d, %d, %d, %d}: valid rows match; status word = %s\n", name,
                    values[0], values[1], values[2], values[3], word_bits(h_word[0]).c_str());
        return h_word[0];
    };

    // 1. Valid sizes (expert 2 is empty): nothing clamped.
    const uint32_t w1 = run_once({7, 48, 0, 13}, "run 1");
    if (w1 != 0)
        throw std::runtime_error("run 1: status word should be 0");

    // 2. A deliberately negative size for expert 1: the GPU reads it as 0 (nothing computed
    //    for that expert, nothing out of bounds) and sets MOEGEMM_SIZES_CLAMPED_NEGATIVE.
    //    The host validation of MOEGEMM_MEMORY_HOST would have rejected it with INVALID_VALUE.
    const uint32_t w2 = run_once({5, -3, 20, 1}, "run 2");
    if (native && (w2 & MOEGEMM_SIZES_CLAMPED_NEGATIVE) == 0)
        throw std::runtime_error("run 2: MOEGEMM_SIZES_CLAMPED_NEGATIVE expected");
    if (!native && w2 != 0)
        throw std::runtime_error("run 2: the cuBLASLt baseline leaves the status word at 0");

    // The bits stay set until cleared; clear them before the next batch of interest.
    CUDA_CHECK(cudaMemsetAsync(word, 0, sizeof(uint32_t), stream.get()));
    stream.sync();

    std::printf("PASS\n");
    return 0;
}

} // namespace

int main() { return example::exit_status_of(run); }

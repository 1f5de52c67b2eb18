// libmoegemm in a CUDA graph: capture once, replay with new expert sizes each time.
//
// In a MoE layer the router decides on the GPU how many tokens each expert receives, and
// the layer runs inside a CUDA graph. With sizes in DEVICE memory, moegemm_execute enqueues
// work that reads the sizes when it runs, so one captured graph serves every routing: write
// the new sizes into the same device buffer (here a cudaMemcpyAsync on the stream, in a
// model the router's kernel), then launch the graph again. No re-capture, no host sync.
// (Sizes given from HOST memory are baked into the captured work instead: set new host
// sizes, then capture again.)
//
// Layout: VARIABLE (tokens sorted by expert, one [max_rows, K] buffer) with the native sm_90a
// backend (H100, H200). The cuBLASLt baseline cannot read VARIABLE sizes from the device; on
// other GPUs this program uses the MASKED layout instead ([E, max_rows, K] slabs), which the
// baseline serves with device sizes.
//
// Every replay is compared exactly with a host reference. Exit status: 0 and "PASS" on
// success; 77 when there is no usable GPU; 1 on any failure.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "example_support.hpp"

namespace {

using namespace example;

// A captured graph and its instance, destroyed with it.
struct Graph {
    ~Graph() {
        if (exec != nullptr)
            cudaGraphExecDestroy(exec);
        if (graph != nullptr)
            cudaGraphDestroy(graph);
    }
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
};

// --- The problem ------------------------------------------------------------------------------

constexpr int E = 6, N = 64, K = 128, MAX_ROWS = 96;
constexpr uint16_t kSentinel = 0xFFFF; // a bf16 NaN: rows never written keep it

// A is filled by global row (VARIABLE: row of the [MAX_ROWS, K] buffer; MASKED: e * MAX_ROWS
// + row of the slab). |A| <= 1, |B| <= 1, K = 128: |D| <= 128, exact in bf16.
float a_value(int row, int k) { return static_cast<float>((row * 5 + k) % 3 - 1); }
float b_value(int e, int n, int k) { return static_cast<float>((e * 7 + n * 3 + k * 5) % 3 - 1); }

int run() {
    require_device();

    // 1. A plan with device sizes. VARIABLE needs the native backend; fall back to MASKED.
    moegemm_problem_t problem;
    MOE_CHECK(moegemm_problem_init(&problem));
    problem.layout = MOEGEMM_LAYOUT_VARIABLE;
    problem.num_experts = E;
    problem.n = N;
    problem.k = K;
    problem.max_rows = MAX_ROWS;
    problem.expected_rows = MAX_ROWS / E; // heuristic hint only

    DeviceBuffer sizes(E * sizeof(int32_t)); // the device-resident sizes, written before each replay
    auto plan = std::make_unique<Plan>(problem);  // Skip where there is no usable GPU
    {
        const moegemm_status_t st = moegemm_plan_set_expert_sizes(
            plan->get(), sizes.as<int32_t>(), MOEGEMM_MEMORY_DEVICE);
        if (st == MOEGEMM_STATUS_NOT_SUPPORTED) {
            // The cuBLASLt baseline: VARIABLE with device sizes is not available there.
            std::printf("VARIABLE with device sizes unavailable (%s); using MASKED\n",
                        moegemm_get_last_error_message());
            problem.layout = MOEGEMM_LAYOUT_MASKED;
            plan.reset();
            plan = std::make_unique<Plan>(problem);
            MOE_CHECK(moegemm_plan_set_expert_sizes(plan->get(), sizes.as<int32_t>(),
                                                    MOEGEMM_MEMORY_DEVICE));
        } else {
            check(st, "moegemm_plan_set_expert_sizes");
        }
    }
    const bool variable = problem.layout == MOEGEMM_LAYOUT_VARIABLE;
    std::printf("plan: %s\n", plan->describe().c_str());

    size_t workspace_bytes = 0;
    MOE_CHECK(moegemm_plan_get_workspace_size(plan->get(), &workspace_bytes));

    // 2. Inputs. A has MAX_ROWS rows (VARIABLE) or E slabs of MAX_ROWS rows (MASKED).
    const int a_rows = variable ? MAX_ROWS : E * MAX_ROWS;
    std::vector<uint16_t> h_a(static_cast<size_t>(a_rows) * K);
    std::vector<uint16_t> h_b(static_cast<size_t>(E) * N * K);
    for (int r = 0; r < a_rows; ++r)
        for (int k = 0; k < K; ++k)
            h_a[static_cast<size_t>(r) * K + k] = to_bf16(a_value(r, k));
    for (int e = 0; e < E; ++e)
        for (int n = 0; n < N; ++n)
            for (int k = 0; k < K; ++k)
                h_b[(static_cast<size_t>(e) * N + n) * K + k] = to_bf16(b_value(e, n, k));

    DeviceBuffer a(h_a.size() * 2), b(h_b.size() * 2), d(static_cast<size_t>(a_rows) * N * 2);
    DeviceBuffer workspace(workspace_bytes);
    PinnedBuffer<int32_t> h_sizes(E);
    PinnedBuffer<uint16_t> h_d(static_cast<size_t>(a_rows) * N);
    uint32_t* word = nullptr; // clamp bits (native backend); must stay 0 with valid sizes
    MOE_CHECK(moegemm_plan_get_status_word(plan->get(), &word));
    PinnedBuffer<uint32_t> h_word(1);
    Graph graph;   // destroyed after the stream below is drained
    Stream stream; // declared last: drained and destroyed first

    CUDA_CHECK(cudaMemcpyAsync(a.get(), h_a.data(), h_a.size() * 2, cudaMemcpyHostToDevice, stream.get()));
    CUDA_CHECK(cudaMemcpyAsync(b.get(), h_b.data(), h_b.size() * 2, cudaMemcpyHostToDevice, stream.get()));
    CUDA_CHECK(cudaMemsetAsync(word, 0, sizeof(uint32_t), stream.get()));
    CUDA_CHECK(cudaStreamSynchronize(stream.get())); // inputs ready before capture

    // 3. Capture one execution. Nothing runs now: the stream records the work into a graph.
    //    moegemm_execute never allocates or synchronizes, so it is legal under capture.
    CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal));
    const moegemm_status_t captured = moegemm_execute(plan->get(), a.get(), b.get(), d.get(), nullptr,
                                                      nullptr, workspace.get(), workspace_bytes,
                                                      stream.get());
    const cudaError_t ended = cudaStreamEndCapture(stream.get(), &graph.graph); // always end it
    MOE_CHECK(captured);
    CUDA_CHECK(ended);
    CUDA_CHECK(cudaGraphInstantiate(&graph.exec, graph.graph, 0));

    // 4. Replays, each with another routing. Every list sums to at most MAX_ROWS (VARIABLE)
    //    and holds values <= MAX_ROWS (MASKED); zeros are empty experts.
    const std::vector<std::vector<int32_t>> routings = {
        {16, 16, 16, 16, 16, 16},
        {40, 0, 3, 0, 25, 28},
        {0, 0, 0, 0, 0, 0},
        {1, 2, 3, 4, 5, 81},
        {0, 96, 0, 0, 0, 0},
    };
    for (size_t replay = 0; replay < routings.size(); ++replay) {
        const std::vector<int32_t>& m = routings[replay];
        for (int e = 0; e < E; ++e)
            h_sizes[e] = m[e];
        // Same stream, before the launch: the graph reads these values when it runs.
        CUDA_CHECK(cudaMemcpyAsync(sizes.get(), h_sizes.get(), h_sizes.bytes(),
                                   cudaMemcpyHostToDevice, stream.get()));
        // A sentinel in D, so that each replay must write every valid row itself.
        CUDA_CHECK(cudaMemsetAsync(d.get(), 0xFF, h_d.bytes(), stream.get()));
        CUDA_CHECK(cudaGraphLaunch(graph.exec, stream.get()));
        CUDA_CHECK(cudaMemcpyAsync(h_d.get(), d.get(), h_d.bytes(), cudaMemcpyDeviceToHost, stream.get()));
        CUDA_CHECK(cudaMemcpyAsync(h_word.get(), word, sizeof(uint32_t), cudaMemcpyDeviceToHost,
                                   stream.get()));
        CUDA_CHECK(cudaStreamSynchronize(stream.get()));

        // Verify: expert e's rows start at off_e (VARIABLE) or at slab e (MASKED).
        int mismatches = 0, offset = 0;
        for (int e = 0; e < E; ++e) {
            const int base = variable ? offset : e * MAX_ROWS;
            for (int r = 0; r < m[e]; ++r) {
                const int row = base + r;
                for (int n = 0; n < N; ++n) {
                    float expected = 0.0f;
                    for (int k = 0; k < K; ++k)
                        expected += a_value(row, k) * b_value(e, n, k);
                    const float got = from_bf16(h_d[static_cast<size_t>(row) * N + n]);
                    if (got != expected && mismatches++ < 10)
                        std::fprintf(stderr, "replay %zu: expert %d row %d col %d: got %g, "
                                     "expected %g\n", replay, e, row, n, got, expected);
                }
            }
            offset += m[e];
        }
        if (variable) // VARIABLE writes exactly rows [0, sum): the rest keeps the sentinel
            for (size_t i = static_cast<size_t>(offset) * N; i < h_d.count(); ++i)
                if (h_d[i] != kSentinel && mismatches++ < 10)
                    std::fprintf(stderr, "replay %zu: row %zu past the sum was written\n", replay,
                                 i / N);
        if (h_word[0] != 0)
            throw std::runtime_error("status word " + std::to_string(h_word[0]) +
                                     " set with valid sizes");
        if (mismatches != 0)
            throw std::runtime_error("replay " + std::to_string(replay) + ": " +
                                     std::to_string(mismatches) + " mismatching elements");
        std::printf("replay %zu: sizes {%d, %d, %d, %d, %d, %d} (%d rows): match\n", replay, m[0],
                    m[1], m[2], m[3], m[4], m[5], offset);
    }

    std::printf("PASS\n");
    return 0;
}

} // namespace

int main() { return example::exit_status_of(run); }

// libmoegemm, measured exactly as a user calls it: through the public C API of libmoegemm.so.
#include "grouped_gemm.hpp"

#include <fmt/format.h>

namespace moegemm_bench {

namespace {

/// Turns a failed libmoegemm call into a BenchError carrying the library's own diagnosis.
void check_library(moegemm_status_t status, const char* call) {
    if (status == MOEGEMM_STATUS_SUCCESS) return;
    throw BenchError(moegemm_status_name(status),
                     fmt::format("{} failed: {}", call, moegemm_get_last_error_message()));
}

#define BENCH_MOEGEMM_CHECK(call) check_library((call), #call)

class LibraryGemm final : public GroupedGemm {
public:
    LibraryGemm(const WorkloadBuffers& buffers, moegemm_backend_t backend, int device,
                cudaStream_t stream, const std::string& force_kernel)
        : buffers_(buffers), stream_(stream) {
        const Workload& workload = buffers.workload();
        moegemm_problem_t problem;
        BENCH_MOEGEMM_CHECK(moegemm_problem_init(&problem));
        problem.layout = MOEGEMM_LAYOUT_VARIABLE;
        problem.num_experts = workload.experts;
        problem.n = workload.n;
        problem.k = workload.k;
        problem.max_rows = workload.total_rows();
        problem.backend = backend;
        problem.device = device;
        problem.force_kernel = force_kernel.empty() ? nullptr : force_kernel.c_str();
        // a_type, b_type, d_type (bf16), weight_layout (NK) and scale_mode (none) keep the
        // defaults of moegemm_problem_init, which are what the workloads describe.

        moegemm_plan_t plan = nullptr;
        BENCH_MOEGEMM_CHECK(moegemm_plan_create(&problem, &plan));
        plan_ = Plan(plan);
        BENCH_MOEGEMM_CHECK(
            moegemm_plan_set_expert_sizes(plan, workload.rows.data(), MOEGEMM_MEMORY_HOST));

        char text[MOEGEMM_DESCRIBE_MAX] = {};
        BENCH_MOEGEMM_CHECK(moegemm_plan_describe(plan, text, sizeof(text)));
        description_ = text;

        size_t workspace_bytes = 0;
        BENCH_MOEGEMM_CHECK(moegemm_plan_get_workspace_size(plan, &workspace_bytes));
        workspace_ = DeviceBuffer(workspace_bytes);
    }

    ~LibraryGemm() override {
        // The plan may own device memory that queued executions read (see moegemm_plan_destroy).
        (void)cudaStreamSynchronize(stream_);
    }

    void enqueue(int set) override {
        const WorkloadBuffers::Set& io = buffers_.set(set);
        BENCH_MOEGEMM_CHECK(moegemm_execute(plan_.get(), io.a, io.b, io.d, nullptr, nullptr,
                                            workspace_.get(), workspace_.bytes(), stream_));
    }

    bool writes_workload_output() const override { return true; }
    std::string description() const override { return description_; }

private:
    using Plan = UniqueHandle<moegemm_plan_t, moegemm_plan_destroy>;

    const WorkloadBuffers& buffers_;
    cudaStream_t stream_;
    Plan plan_;
    DeviceBuffer workspace_;
    std::string description_;
};

}  // namespace

std::unique_ptr<GroupedGemm> make_library_gemm(const WorkloadBuffers& buffers,
                                               moegemm_backend_t backend, int device,
                                               cudaStream_t stream,
                                               const std::string& force_kernel) {
    return std::make_unique<LibraryGemm>(buffers, backend, device, stream, force_kernel);
}

}  // namespace moegemm_bench

// libmoegemm, measured exactly as a user calls it: through the public C API of libmoegemm.so.
#include "grouped_gemm.hpp"

#include "device_kernels.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <utility>

namespace moegemm_bench {

namespace {

/// Turns a failed libmoegemm call into a BenchError carrying the library's own diagnosis.
void check_library(moegemm_status_t status, const char* call) {
    if (status == MOEGEMM_STATUS_SUCCESS) return;
    throw BenchError(moegemm_status_name(status),
                     fmt::format("{} failed: {}", call, moegemm_get_last_error_message()));
}

#define BENCH_MOEGEMM_CHECK(call) check_library((call), #call)

// moegemm_plan_autotune is new in 0.2: referenced weakly, so that the bench still loads a
// library without it (the build before, in an A/B run), and --autotune says what is missing.
#pragma weak moegemm_plan_autotune

/// What differs between the plans the bench asks for, besides the workload's shape, input type
/// and scale mode. Everything else keeps the defaults of moegemm_problem_init: bf16 output and
/// [E, N, K] weights, which are what the workloads describe.
moegemm::PlanOptions& library_plan_options() {
    static moegemm::PlanOptions options;
    return options;
}

/// The library's plan creation with the --set options; moegemm_plan_create with a library
/// that lacks the comparison entry point (a release build given in place of the testing one,
/// as an A/B of two builds does: the options must then be the defaults).
moegemm_status_t create_plan(const moegemm_problem_t& problem, moegemm_plan_t* plan) {
    if (moegemm::testing::plan_create_with_options != nullptr)
        return moegemm::testing::plan_create_with_options(&problem, library_plan_options(), plan);
    if (!moegemm::changed_plan_options(library_plan_options()).empty())
        throw BenchError("--set", "this libmoegemm has no comparison options (a release build)");
    return moegemm_plan_create(&problem, plan);
}

struct PlanRequest {
    moegemm_layout_t layout = MOEGEMM_LAYOUT_VARIABLE;
    int64_t max_rows = 0;
    int64_t expected_rows = 0;  ///< 0: unknown (the library's default)
    moegemm_backend_t backend = MOEGEMM_BACKEND_AUTO;
    int device = 0;
    std::string force_kernel;  ///< empty: the heuristic's pick
    bool autotune = false;     ///< moegemm_plan_autotune on the first rotation set's buffers
};

/// A plan for a workload's shape with its sizes set, its workspace and its description: what
/// every libmoegemm variant of the bench sets up alike.
class LibraryPlan {
public:
    /// `sizes`: the workload's E row counts, in host or device memory as `where` says (a device
    /// array must outlive the plan: the library keeps the pointer).
    LibraryPlan(const Workload& workload, const PlanRequest& request, const int32_t* sizes,
                moegemm_memory_t where, cudaStream_t stream)
        : stream_(stream) {
        moegemm_problem_t problem;
        BENCH_MOEGEMM_CHECK(moegemm_problem_init(&problem));
        problem.layout = request.layout;
        problem.num_experts = workload.experts;
        problem.n = workload.n;
        problem.k = workload.k;
        problem.max_rows = request.max_rows;
        problem.a_type = problem.b_type = workload.input_type;
        problem.scale_mode = workload.scale_mode;
        problem.expected_rows = request.expected_rows;
        problem.backend = request.backend;
        problem.device = request.device;
        problem.force_kernel =
            request.force_kernel.empty() ? nullptr : request.force_kernel.c_str();

        moegemm_plan_t plan = nullptr;
        BENCH_MOEGEMM_CHECK(create_plan(problem, &plan));
        plan_ = Plan(plan);
        BENCH_MOEGEMM_CHECK(moegemm_plan_set_expert_sizes(plan, sizes, where));

        char text[MOEGEMM_DESCRIBE_MAX] = {};
        BENCH_MOEGEMM_CHECK(moegemm_plan_describe(plan, text, sizeof(text)));
        description_ = text;

        size_t workspace_bytes = 0;
        BENCH_MOEGEMM_CHECK(moegemm_plan_get_workspace_size(plan, &workspace_bytes));
        workspace_ = DeviceBuffer(workspace_bytes);
    }

    ~LibraryPlan() {
        // The plan may own device memory that queued executions read (see moegemm_plan_destroy).
        (void)cudaStreamSynchronize(stream_);
    }

    LibraryPlan(const LibraryPlan&) = delete;
    LibraryPlan& operator=(const LibraryPlan&) = delete;

    /// `a_scale`, `b_scale`: the fp8 scales in the plan's layout, nullptr for bf16.
    void execute(const void* a, const void* b, void* d, const float* a_scale,
                 const float* b_scale) const {
        BENCH_MOEGEMM_CHECK(moegemm_execute(plan_.get(), a, b, d, a_scale, b_scale,
                                            workspace_.get(), workspace_.bytes(), stream_));
    }

    /// moegemm_plan_autotune on these buffers (the arguments of execute); the description
    /// then says what was chosen.
    void autotune(const void* a, const void* b, void* d, const float* a_scale,
                  const float* b_scale) {
        if (&moegemm_plan_autotune == nullptr)
            throw BenchError("--autotune", "this libmoegemm has no moegemm_plan_autotune");
        moegemm_tensors_t tensors;
        BENCH_MOEGEMM_CHECK(moegemm_tensors_init(&tensors));
        tensors.a = a;
        tensors.b = b;
        tensors.d = d;
        tensors.a_scale = a_scale;
        tensors.b_scale = b_scale;
        // A workspace that covers every backend's kernels lets the tuner time them all; the
        // plan keeps running with it (a kernel of another backend may need it).
        constexpr size_t kEveryBackendBytes = size_t{32} << 20;
        if (workspace_.bytes() < kEveryBackendBytes) workspace_ = DeviceBuffer(kEveryBackendBytes);
        BENCH_MOEGEMM_CHECK(moegemm_plan_autotune(plan_.get(), &tensors, workspace_.get(),
                                                  workspace_.bytes(), stream_));
        char text[MOEGEMM_DESCRIBE_MAX] = {};
        BENCH_MOEGEMM_CHECK(moegemm_plan_describe(plan_.get(), text, sizeof(text)));
        description_ = text;
    }

    const std::string& description() const noexcept { return description_; }

private:
    using Plan = UniqueHandle<moegemm_plan_t, moegemm_plan_destroy>;

    cudaStream_t stream_;
    Plan plan_;
    DeviceBuffer workspace_;
    std::string description_;
};

// ---------------------------------------------------------------------------------------------

/// The workload's row counts copied to the device, for a plan that reads its sizes there.
DeviceBuffer device_sizes(const Workload& workload) {
    DeviceBuffer sizes(workload.rows.size() * sizeof(int32_t));
    BENCH_CUDA_CHECK(
        cudaMemcpy(sizes.get(), workload.rows.data(), sizes.bytes(), cudaMemcpyHostToDevice));
    return sizes;
}

/// The mean rows per expert, rounded up: what a caller knows of sizes that stay on the GPU.
int64_t mean_expert_rows(const Workload& workload) {
    const int64_t experts = std::max<int64_t>(1, workload.experts);
    return std::max<int64_t>(1, (workload.total_rows() + experts - 1) / experts);
}

/// The VARIABLE layout on the workload's own buffers, max_rows = sum of rows; the sizes on the
/// host, or (`where` DEVICE) copied to device memory with the mean rows as expected_rows.
class LibraryGemm final : public GroupedGemm {
public:
    LibraryGemm(const WorkloadBuffers& buffers, PlanRequest request, moegemm_memory_t where,
                cudaStream_t stream)
        : buffers_(buffers),
          sizes_(where == MOEGEMM_MEMORY_DEVICE ? device_sizes(buffers.workload())
                                                : DeviceBuffer()),
          plan_(buffers.workload(), with_expected_rows(request, buffers.workload(), where),
                where == MOEGEMM_MEMORY_DEVICE ? static_cast<const int32_t*>(sizes_.get())
                                               : buffers.workload().rows.data(),
                where, stream) {
        if (request.autotune) {
            const WorkloadBuffers::Set& io = buffers.set(0);
            plan_.autotune(io.a, io.b, io.d, io.a_scale, io.b_scale);
        }
    }

    void enqueue(int set) override {
        const WorkloadBuffers::Set& io = buffers_.set(set);
        plan_.execute(io.a, io.b, io.d, io.a_scale, io.b_scale);
    }

    bool writes_workload_output() const override { return true; }
    std::string description() const override { return plan_.description(); }

private:
    static PlanRequest with_expected_rows(PlanRequest request, const Workload& workload,
                                          moegemm_memory_t where) {
        if (where == MOEGEMM_MEMORY_DEVICE) request.expected_rows = mean_expert_rows(workload);
        return request;
    }

    const WorkloadBuffers& buffers_;
    DeviceBuffer sizes_;  // device sizes, read by the plan at every execution: outlives it
    LibraryPlan plan_;
};

// ---------------------------------------------------------------------------------------------

/// The MASKED layout with device sizes (see make_library_masked_gemm).
class LibraryMaskedGemm final : public GroupedGemm {
public:
    LibraryMaskedGemm(const WorkloadBuffers& buffers, const PlanRequest& request,
                      cudaStream_t stream)
        : buffers_(buffers),
          stream_(stream),
          slab_rows_(slab_rows_for(buffers.workload())),
          sizes_(device_sizes(buffers.workload())),
          plan_(buffers.workload(), masked_request(request, buffers.workload(), slab_rows_),
                static_cast<const int32_t*>(sizes_.get()), MOEGEMM_MEMORY_DEVICE, stream) {
        const Workload& workload = buffers.workload();
        const int64_t slabs_rows = workload.experts * slab_rows_;
        for (int s = 0; s < buffers.num_sets(); ++s) {
            Slabs slabs{DeviceBuffer(slab_bytes(a_row_bytes())),
                        DeviceBuffer(slab_bytes(d_row_bytes())),
                        DeviceBuffer(slab_bytes(a_scale_row_bytes()))};
            // Random values everywhere first: the rows past each expert's count are never
            // meaningful, and values there must not change the result.
            const uint32_t seed = kSeed + 3 * static_cast<uint32_t>(s);
            fill_inputs(slabs.a.get(), static_cast<size_t>(slabs_rows * workload.k),
                        workload.input_type, seed, stream);
            fill_uniform_bf16(slabs.d.get(), static_cast<size_t>(slabs_rows * workload.n),
                              seed + 1, stream);
            fill_scales(static_cast<float*>(slabs.a_scale.get()),
                        static_cast<size_t>(slabs_rows * workload.a_scales_per_row()), seed + 2,
                        stream);
            // Then the workload's rows (and their scales), so that D matches the reference of
            // --check.
            const WorkloadBuffers::Set& io = buffers.set(s);
            copy_expert_rows(slabs.a.get(), io.a, a_row_bytes(), Direction::into_slabs,
                             cudaMemcpyDeviceToDevice);
            copy_expert_rows(slabs.a_scale.get(), io.a_scale, a_scale_row_bytes(),
                             Direction::into_slabs, cudaMemcpyDeviceToDevice);
            slabs_.push_back(std::move(slabs));
        }
        BENCH_CUDA_CHECK(cudaStreamSynchronize(stream));
    }

    void enqueue(int set) override {
        const Slabs& slabs = slabs_.at(static_cast<size_t>(set));
        const WorkloadBuffers::Set& io = buffers_.set(set);
        // Scales per row of A follow the slabs; one A scale for all rows is the workload's.
        const float* a_scale =
            slabs.a_scale.get() ? static_cast<const float*>(slabs.a_scale.get()) : io.a_scale;
        plan_.execute(slabs.a.get(), io.b, slabs.d.get(), a_scale, io.b_scale);
    }

    bool writes_workload_output() const override { return false; }

    std::optional<std::vector<uint16_t>> compact_output(int set) override {
        const Workload& workload = buffers_.workload();
        void* d = slabs_.at(static_cast<size_t>(set)).d.get();
        fill_uniform_bf16(d, static_cast<size_t>(workload.experts * slab_rows_ * workload.n),
                          0xdeadbeefu, stream_);
        enqueue(set);
        std::vector<uint16_t> output(static_cast<size_t>(buffers_.d_bytes() / kBf16Bytes));
        copy_expert_rows(output.data(), d, d_row_bytes(), Direction::out_of_slabs,
                         cudaMemcpyDeviceToHost);
        BENCH_CUDA_CHECK(cudaStreamSynchronize(stream_));
        return output;
    }

    std::string description() const override { return plan_.description(); }

private:
    // Distinct from the seeds of WorkloadBuffers, so that the padding never equals real rows.
    static constexpr uint32_t kSeed = 0x5bd1e995u;

    /// A, D and, for scales per row of A (ROWWISE, BLOCK), a_scale of one rotation set:
    /// [E, slab_rows, K], [E, slab_rows, N], [E, slab_rows, scales per row] (empty otherwise).
    struct Slabs {
        DeviceBuffer a;
        DeviceBuffer d;
        DeviceBuffer a_scale;
    };

    enum class Direction { into_slabs, out_of_slabs };

    /// Twice the largest expert: room to spare, as a capacity sized for the worst routing has.
    static int64_t slab_rows_for(const Workload& workload) {
        return std::max<int64_t>(1, 2 * int64_t{workload.max_expert_rows()});
    }

    static PlanRequest masked_request(PlanRequest request, const Workload& workload,
                                      int64_t slab_rows) {
        request.layout = MOEGEMM_LAYOUT_MASKED;
        request.max_rows = slab_rows;
        request.expected_rows = mean_expert_rows(workload);
        return request;
    }

    int64_t a_row_bytes() const {
        return buffers_.workload().k * buffers_.workload().input_bytes();
    }
    int64_t d_row_bytes() const { return buffers_.workload().n * kBf16Bytes; }
    int64_t a_scale_row_bytes() const {
        return buffers_.workload().a_scales_per_row() * int64_t{sizeof(float)};
    }

    /// Bytes of E slabs of rows `row_bytes` long.
    size_t slab_bytes(int64_t row_bytes) const {
        return static_cast<size_t>(buffers_.workload().experts * slab_rows_ * row_bytes);
    }

    /// Copies every expert's rows, `row_bytes` each, between a [sum rows, ...] tensor of the
    /// workload's VARIABLE layout and that expert's slab of a [E, slab_rows, ...] tensor, in
    /// `direction`, enqueued on the stream.
    void copy_expert_rows(void* destination, const void* source, int64_t row_bytes,
                          Direction direction, cudaMemcpyKind kind) const {
        if (row_bytes == 0) return;
        const Workload& workload = buffers_.workload();
        for (int e = 0; e < workload.experts; ++e) {
            const int64_t slab_offset = e * slab_rows_ * row_bytes;
            const int64_t variable_offset = buffers_.first_row(e) * row_bytes;
            const bool into = direction == Direction::into_slabs;
            BENCH_CUDA_CHECK(cudaMemcpyAsync(
                byte_offset(destination, into ? slab_offset : variable_offset),
                byte_offset(source, into ? variable_offset : slab_offset),
                static_cast<size_t>(workload.rows[e] * row_bytes), kind, stream_));
        }
    }

    const WorkloadBuffers& buffers_;
    cudaStream_t stream_;
    int64_t slab_rows_;
    DeviceBuffer sizes_;        // read by the plan at every execution: outlives it
    std::vector<Slabs> slabs_;  // one per rotation set
    LibraryPlan plan_;          // last: destroyed first, after its executions have finished
};

}  // namespace

void set_library_plan_options(const moegemm::PlanOptions& options) {
    library_plan_options() = options;
}

namespace {

/// A VARIABLE plan over the workload's own buffers: max_rows = the sum of its rows.
PlanRequest variable_request(const WorkloadBuffers& buffers, moegemm_backend_t backend,
                             int device) {
    PlanRequest request;
    request.max_rows = buffers.workload().total_rows();
    request.backend = backend;
    request.device = device;
    return request;
}

}  // namespace

std::unique_ptr<GroupedGemm> make_library_gemm(const WorkloadBuffers& buffers,
                                               moegemm_backend_t backend, int device,
                                               cudaStream_t stream,
                                               const std::string& force_kernel) {
    PlanRequest request = variable_request(buffers, backend, device);
    request.force_kernel = force_kernel;
    return std::make_unique<LibraryGemm>(buffers, request, MOEGEMM_MEMORY_HOST, stream);
}

std::unique_ptr<GroupedGemm> make_library_device_sizes_gemm(const WorkloadBuffers& buffers,
                                                            moegemm_backend_t backend, int device,
                                                            cudaStream_t stream) {
    return std::make_unique<LibraryGemm>(buffers, variable_request(buffers, backend, device),
                                         MOEGEMM_MEMORY_DEVICE, stream);
}

std::unique_ptr<GroupedGemm> make_library_tuned_gemm(const WorkloadBuffers& buffers,
                                                     moegemm_backend_t backend, int device,
                                                     moegemm_memory_t where, cudaStream_t stream) {
    PlanRequest request = variable_request(buffers, backend, device);
    request.autotune = true;
    return std::make_unique<LibraryGemm>(buffers, request, where, stream);
}

std::unique_ptr<GroupedGemm> make_library_masked_gemm(const WorkloadBuffers& buffers,
                                                      moegemm_backend_t backend, int device,
                                                      cudaStream_t stream) {
    PlanRequest request;
    request.backend = backend;
    request.device = device;
    return std::make_unique<LibraryMaskedGemm>(buffers, request, stream);
}

namespace {

// The library replayed from CUDA graphs: the launch cost a framework that captures its decode
// step pays, instead of one eager call's host work.
class GraphGemm final : public GroupedGemm {
public:
    GraphGemm(std::unique_ptr<GroupedGemm> eager, int num_sets, cudaStream_t stream)
        : eager_(std::move(eager)), stream_(stream) {
        // One eager call first, as frameworks warm up before capturing: one-time costs (module
        // loading, lazy initialization) stay out of the graphs.
        eager_->enqueue(0);
        BENCH_CUDA_CHECK(cudaStreamSynchronize(stream));
        for (int s = 0; s < num_sets; ++s) {
            graphs_.push_back(capture_graph(stream, [this, s] { eager_->enqueue(s); }));
        }
    }

    ~GraphGemm() override {
        // Replays still queued read eager_'s plan and buffers: let them finish before the
        // graphs, then eager_, are released.
        (void)cudaStreamSynchronize(stream_);
    }

    void enqueue(int set) override {
        BENCH_CUDA_CHECK(cudaGraphLaunch(graphs_.at(static_cast<size_t>(set)).get(), stream_));
    }

    bool writes_workload_output() const override { return eager_->writes_workload_output(); }
    std::string description() const override { return eager_->description(); }

private:
    std::unique_ptr<GroupedGemm> eager_;
    cudaStream_t stream_;
    std::vector<CudaGraphExec> graphs_;  // one per rotation set
};

}  // namespace

std::unique_ptr<GroupedGemm> make_graph_gemm(std::unique_ptr<GroupedGemm> eager, int num_sets,
                                             cudaStream_t stream) {
    return std::make_unique<GraphGemm>(std::move(eager), num_sets, stream);
}

}  // namespace moegemm_bench

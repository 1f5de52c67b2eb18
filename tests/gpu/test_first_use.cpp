// [.first_use]: a process whose first matmul is captured into a CUDA graph. A kernel's first
// launch may load it (CUDA's lazy loading; cuBLASLt loads its kernels on their first matmul),
// and loading is an operation a capturing thread is refused: the library must still capture
// its work. Hidden from the default run: in one process with the other tests the kernels are
// loaded long before. CTest runs it in a process of its own (gpu.first_use).
#include <string>
#include <vector>

#include "support/gpu_harness.hpp"

using namespace mgt;

namespace {

/// Creates a plan for `w` on `backend`, captures its first execute (global capture mode, the
/// strictest), replays the graph and checks D against the GPU oracle.
void capture_first_execute(const Workload& w, moegemm_dtype_t out, moegemm_backend_t backend,
                           SizesFrom from) {
    const Geometry& g = w.geometry();
    Plan plan(make_problem(g, w.in_type(), out, backend));
    DeviceBuffer dev_sizes(w.sizes().size() * sizeof(int32_t));
    dev_sizes.upload(w.sizes().data(), w.sizes().size() * sizeof(int32_t));
    if (from == SizesFrom::Device)
        MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(
            plan.get(), static_cast<const int32_t*>(dev_sizes.get()), MOEGEMM_MEMORY_DEVICE));
    else
        MGT_REQUIRE_OK(
            moegemm_plan_set_expert_sizes(plan.get(), w.sizes().data(), MOEGEMM_MEMORY_HOST));
    INFO(w.str() << "; plan: " << plan.describe());
    const size_t ws_bytes = plan.workspace_size();
    DeviceBuffer ws(ws_bytes);
    OutputBuffer d(g.d_elems() * dtype_bytes(out));
    Stream s;
    Graph graph;
    capture_execute(graph, s.get(), plan.get(), w, d.d(), ws.get(), ws_bytes);
    MGT_CUDA_REQUIRE(cudaGraphLaunch(graph.exec, s.get()));
    MGT_CUDA_REQUIRE(cudaStreamSynchronize(s.get()));
    const CompareReport rep = check_result(w, out, d.download());
    INFO(rep.summary());
    CHECK(rep.ok());
}

}  // namespace

TEST_CASE("CUDA graph: the process's first matmuls are captured, kernels loaded meanwhile",
          "[.first_use]") {
    if (!backend_enabled(MOEGEMM_BACKEND_CUBLASLT)) return;
    // cuBLASLt first (its kernels load on their first matmul): one matmul per expert, then one
    // strided-batched matmul over MASKED slabs with device sizes, of another type.
    Geometry variable;
    variable.experts = 3;
    variable.n = 192;
    variable.k = 256;
    variable.max_rows = 100;
    const Workload first(variable, MOEGEMM_DTYPE_BF16, {40, 0, 57}, 31);
    capture_first_execute(first, MOEGEMM_DTYPE_BF16, MOEGEMM_BACKEND_CUBLASLT, SizesFrom::Host);

    Geometry masked = variable;
    masked.layout = MOEGEMM_LAYOUT_MASKED;
    masked.max_rows = 48;
    const Workload second(masked, MOEGEMM_DTYPE_F16, {48, 3, 0}, 32);
    capture_first_execute(second, MOEGEMM_DTYPE_F32, MOEGEMM_BACKEND_CUBLASLT, SizesFrom::Device);

    // The native kernels where they run (the plan's creation prepares its kernel).
    if (device_cc() == 90 && backend_enabled(MOEGEMM_BACKEND_NATIVE))
        capture_first_execute(first, MOEGEMM_DTYPE_BF16, MOEGEMM_BACKEND_NATIVE, SizesFrom::Host);
}

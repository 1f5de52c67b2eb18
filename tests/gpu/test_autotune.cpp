// [autotune]: moegemm_plan_autotune times the candidate kernels on the caller's buffers, makes
// the fastest the plan's kernel (D then holds its product) and the choice of later plans of
// the same problem and size bucket, writes the named tune cache file, and refuses what it
// cannot do: no sizes, a stream under capture, a forced kernel. Shapes no other test uses, so
// that the process's tuned choices change no other test's plans.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "support/gpu_harness.hpp"

using namespace mgt;

namespace {

/// The kernel name of a plan's description ("... kernel=NAME ...").
std::string kernel_of(const std::string& description) {
    const size_t at = description.find("kernel=");
    if (at == std::string::npos) return {};
    const size_t end = description.find(' ', at);
    return description.substr(at + 7, end == std::string::npos ? std::string::npos : end - at - 7);
}

/// How many kernels autotune timed, from a tuned plan's description ("... the fastest of N
/// kernels timed ..."); 0 when it does not say.
int timed_count(const std::string& description) {
    const size_t at = description.find("the fastest of ");
    return at == std::string::npos ? 0 : std::atoi(description.c_str() + at + 15);
}

moegemm_tensors_t tensors_of(const Workload& w, void* d) {
    moegemm_tensors_t t;
    REQUIRE(moegemm_tensors_init(&t) == MOEGEMM_STATUS_SUCCESS);
    t.a = w.a();
    t.b = w.b();
    t.d = d;
    return t;
}

/// Executes `plan` on poisoned D and checks D against the oracle.
void execute_and_check(const Plan& plan, const moegemm_tensors_t& t, const DeviceBuffer& ws,
                       size_t ws_bytes, const Stream& s, const Workload& w, OutputBuffer& d) {
    d.poison();
    MGT_REQUIRE_OK(moegemm_execute_tensors(plan.get(), &t, ws.get(), ws_bytes, s.get()));
    MGT_CUDA_REQUIRE(cudaStreamSynchronize(s.get()));
    const CompareReport executed = check_result(w, MOEGEMM_DTYPE_BF16, d.download());
    INFO(executed.summary());
    CHECK(executed.ok());
}

/// Autotunes a plan of `w` with the sizes `from` gives, checks D, and returns the plan's
/// description after tuning.
std::string tune_and_check(const Workload& w, SizesFrom from, int64_t expected_rows = 0) {
    const Geometry& g = w.geometry();
    moegemm_problem_t problem = make_problem(g, MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_BF16);
    problem.expected_rows = expected_rows;
    Plan plan(problem);
    DeviceBuffer dev_sizes(w.sizes().size() * sizeof(int32_t));
    dev_sizes.upload(w.sizes().data(), w.sizes().size() * sizeof(int32_t));
    MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(
        plan.get(),
        from == SizesFrom::Device ? static_cast<const int32_t*>(dev_sizes.get())
                                  : w.sizes().data(),
        from == SizesFrom::Device ? MOEGEMM_MEMORY_DEVICE : MOEGEMM_MEMORY_HOST));
    const std::string before = plan.describe();
    const size_t ws_bytes = plan.workspace_size();
    DeviceBuffer ws(ws_bytes);
    OutputBuffer d(g.d_elems() * 2);
    Stream s;
    const moegemm_tensors_t t = tensors_of(w, d.d());
    MGT_REQUIRE_OK(moegemm_plan_autotune(plan.get(), &t, ws.get(), ws_bytes, s.get()));
    const std::string after = plan.describe();
    INFO("before: " << before << "\nafter: " << after);
    CHECK(after.find("tuned:") != std::string::npos);
    CHECK(plan.workspace_size() == ws_bytes);
    // D holds the chosen kernel's product.
    const CompareReport tuned_d = check_result(w, MOEGEMM_DTYPE_BF16, d.download());
    INFO(tuned_d.summary());
    CHECK(tuned_d.ok());
    // And execute runs it.
    execute_and_check(plan, t, ws, ws_bytes, s, w, d);
    return after;
}

}  // namespace

TEST_CASE("autotune: the fastest kernel becomes the plan's and later plans' choice, and the "
          "file's", "[autotune]") {
    if (!backend_enabled(MOEGEMM_BACKEND_NATIVE) || device_cc() != 90) return;
    const std::string path = "/tmp/moegemm_autotune_test_" + std::to_string(getpid());
    std::remove(path.c_str());
    MGT_REQUIRE_OK(moegemm_set_tune_cache_file(path.c_str()));  // missing: ignored, then written

    const Geometry g = geometry(MOEGEMM_LAYOUT_VARIABLE, 6, 328, 536, 700);
    const Workload w(g, MOEGEMM_DTYPE_BF16, {150, 0, 97, 211, 3, 120}, 515);
    const std::string tuned = tune_and_check(w, SizesFrom::Host);
    const std::string kernel = kernel_of(tuned);
    REQUIRE_FALSE(kernel.empty());

    // A new plan of the same problem with sizes of the same bucket takes the tuned kernel
    // without timing anything.
    Plan again(make_problem(g, MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_BF16));
    const std::vector<int32_t> similar = {140, 0, 100, 200, 10, 130};
    MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(again.get(), similar.data(), MOEGEMM_MEMORY_HOST));
    INFO("tuned plan: " << tuned << "\nnew plan: " << again.describe());
    CHECK(kernel_of(again.describe()) == kernel);
    CHECK(again.describe().find("tuned:") != std::string::npos);

    // The file holds the result.
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    CHECK(text.str().rfind("libmoegemm tune cache 2\n", 0) == 0);
    CHECK(text.str().find("\t" + kernel + "\t") != std::string::npos);
    CHECK(text.str().find("E=6 N=328 K=536") != std::string::npos);

    // MASKED with device sizes and an expected_rows hint: its own bucket.
    const Geometry m = geometry(MOEGEMM_LAYOUT_MASKED, 5, 264, 328, 96);
    const Workload wm(m, MOEGEMM_DTYPE_BF16, {96, 0, 17, 64, 5}, 516);
    tune_and_check(wm, SizesFrom::Device, 40);

    MGT_REQUIRE_OK(moegemm_set_tune_cache_file(nullptr));
    std::remove(path.c_str());
}

TEST_CASE("autotune: refused without sizes, under stream capture and with a forced kernel; "
          "nothing written", "[autotune]") {
    if (!backend_enabled(MOEGEMM_BACKEND_NATIVE) || device_cc() != 90) return;
    const Geometry g = geometry(MOEGEMM_LAYOUT_VARIABLE, 3, 344, 552, 300);
    const std::vector<int32_t> sizes = {100, 50, 0};
    const Workload w(g, MOEGEMM_DTYPE_BF16, sizes, 517);
    OutputBuffer d(g.d_elems() * 2);
    const moegemm_tensors_t t = tensors_of(w, d.d());
    Stream s;

    Plan plan(make_problem(g, MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_BF16));
    const size_t ws_bytes = plan.workspace_size();
    DeviceBuffer ws(ws_bytes);
    Outcome o = outcome(moegemm_plan_autotune(plan.get(), &t, ws.get(), ws_bytes, s.get()));
    CHECK(o.status == MOEGEMM_STATUS_INVALID_STATE);

    MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(plan.get(), sizes.data(), MOEGEMM_MEMORY_HOST));
    const std::string before = plan.describe();
    MGT_CUDA_REQUIRE(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal));
    o = outcome(moegemm_plan_autotune(plan.get(), &t, ws.get(), ws_bytes, s.get()));
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(s.get(), &graph);
    CHECK(o.status == MOEGEMM_STATUS_INVALID_STATE);
    CHECK_THAT(o.message, Catch::Contains("captured"));
    CHECK(ended == cudaSuccess);  // the caller's capture is intact
    if (graph) {
        size_t nodes = 1;
        MGT_CUDA_REQUIRE(cudaGraphGetNodes(graph, nullptr, &nodes));
        CHECK(nodes == 0);
        MGT_CUDA_REQUIRE(cudaGraphDestroy(graph));
    }
    CHECK(plan.describe() == before);

    moegemm_problem_t forced = make_problem(g, MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_BF16);
    forced.force_kernel = "sm90_grouped_128x128";
    Plan fixed(forced);
    MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(fixed.get(), sizes.data(), MOEGEMM_MEMORY_HOST));
    o = outcome(moegemm_plan_autotune(fixed.get(), &t, ws.get(), ws_bytes, s.get()));
    CHECK(o.status == MOEGEMM_STATUS_INVALID_STATE);
    CHECK_THAT(o.message, Catch::Contains("force_kernel"));

    MGT_CUDA_REQUIRE(cudaDeviceSynchronize());
    CHECK(d.unpoisoned() == 0);
}

TEST_CASE("autotune: kernels of the other backend compete where the workspace covers theirs",
          "[autotune]") {
    if (!backend_enabled(MOEGEMM_BACKEND_NATIVE) || !backend_enabled(MOEGEMM_BACKEND_CUBLASLT) ||
        device_cc() != 90)
        return;
    // One expert of 9 rows with K = 23,040: one wave of output tiles, each with a long K
    // loop, where cuBLASLt's split-K kernels run several times faster than any native one.
    const Geometry g = geometry(MOEGEMM_LAYOUT_VARIABLE, 1, 1280, 23040, 16);
    const Workload w(g, MOEGEMM_DTYPE_BF16, {9}, 518);
    OutputBuffer d(g.d_elems() * 2);
    const moegemm_tensors_t t = tensors_of(w, d.d());
    Stream s;
    const moegemm_problem_t problem = make_problem(g, MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_BF16);

    // The workspace the plan asked for covers native kernels only: they alone compete.
    Plan native(problem);
    MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(native.get(), w.sizes().data(),
                                                 MOEGEMM_MEMORY_HOST));
    const size_t native_bytes = native.workspace_size();
    DeviceBuffer small(native_bytes);
    MGT_REQUIRE_OK(moegemm_plan_autotune(native.get(), &t, small.get(), native_bytes, s.get()));
    INFO("tuned with the plan's workspace: " << native.describe());
    CHECK(kernel_of(native.describe()).rfind("sm90_", 0) == 0);
    CHECK(native.workspace_size() == native_bytes);

    // 32 MiB covers cuBLASLt's: its kernels are timed too. On an H100 and an H200 its expert
    // loop (split-K) wins here by several times; where it does, the plan needs that
    // workspace from then on.
    const size_t every_backend = size_t{32} << 20;
    DeviceBuffer large(every_backend);
    Plan open(problem);
    MGT_REQUIRE_OK(
        moegemm_plan_set_expert_sizes(open.get(), w.sizes().data(), MOEGEMM_MEMORY_HOST));
    d.poison();
    MGT_REQUIRE_OK(moegemm_plan_autotune(open.get(), &t, large.get(), every_backend, s.get()));
    INFO("tuned with 32 MiB: " << open.describe());
    CHECK(timed_count(open.describe()) > timed_count(native.describe()));
    const CompareReport tuned_d = check_result(w, MOEGEMM_DTYPE_BF16, d.download());
    INFO(tuned_d.summary());
    CHECK(tuned_d.ok());
    if (kernel_of(open.describe()) == "cublaslt_expert_loop") {
        CHECK(open.workspace_size() > native_bytes);
        CHECK(open.workspace_size() <= every_backend);
        const Outcome o = outcome(
            moegemm_execute_tensors(open.get(), &t, small.get(), native_bytes, s.get()));
        CHECK(o.status == MOEGEMM_STATUS_WORKSPACE_TOO_SMALL);
        // Device sizes, which cuBLASLt's kernels cannot read: back to a native kernel, the
        // workspace covering both.
        DeviceBuffer dev_sizes(sizeof(int32_t));
        dev_sizes.upload(w.sizes().data(), sizeof(int32_t));
        MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(
            open.get(), static_cast<const int32_t*>(dev_sizes.get()), MOEGEMM_MEMORY_DEVICE));
        CHECK(kernel_of(open.describe()).rfind("sm90_", 0) == 0);
        execute_and_check(open, t, large, every_backend, s, w, d);
    } else {
        WARN("cuBLASLt's expert loop did not win here: " << open.describe());
        CHECK(open.workspace_size() == native_bytes);
    }

    // A plan created now, given the same sizes after creation, stays on the backend its
    // workspace was sized for at creation (no sizes then, so no tuned result applied), and
    // takes that backend's tuned result, which the cross-backend one did not replace.
    Plan later(problem);
    MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(later.get(), w.sizes().data(),
                                                 MOEGEMM_MEMORY_HOST));
    INFO("a later plan: " << later.describe());
    CHECK(kernel_of(later.describe()).rfind("sm90_", 0) == 0);
    CHECK(later.describe().find("tuned:") != std::string::npos);
    execute_and_check(later, t, small, native_bytes, s, w, d);
}

// [concurrency]: the threading and stream rules of moegemm.h ("Threading", "Streams and CUDA
// graphs"), each result checked against the GPU reference (support/gpu_case.hpp):
//  - 8 host threads, each with its own stream and plans, creating, executing (repeatedly, with
//    sizes changing between executions) and destroying at the same time;
//  - one plan executed on two streams at once, each with its own workspace, inputs and output;
//  - determinism: ten executions of one plan give bitwise identical D, whatever the workspace
//    held before each;
//  - misuse with two GPUs (skipped with a warning on a machine with one): a stream of the other
//    device; a workspace and output on the other device; and, as positive controls, the NULL
//    stream while the other device is current, and a plan of the other device.
//
// Catch's assertion macros are not thread-safe: worker threads only use support/gpu_case.hpp
// (which reports instead of asserting) and the main thread asserts on what they report.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "support/gpu_case.hpp"
#include "support/gpu_harness.hpp"
#include "support/random_case.hpp"

using namespace mgt;
using Catch::Matchers::Contains;

namespace {

/// Lets a group of threads start each phase together (std::barrier is C++20).
class StartLine {
public:
    explicit StartLine(int parties) : parties_(parties) {}
    void arrive_and_wait() {
        std::unique_lock<std::mutex> lock(m_);
        const int generation = generation_;
        if (++waiting_ == parties_) {
            waiting_ = 0;
            ++generation_;
            cv_.notify_all();
            return;
        }
        cv_.wait(lock, [&] { return generation != generation_; });
    }

private:
    std::mutex m_;
    std::condition_variable cv_;
    const int parties_;
    int waiting_ = 0;
    int generation_ = 0;
};

/// What one worker thread did.
struct WorkerReport {
    int plans = 0;           ///< cases whose plan was created
    int skipped = 0;         ///< cases NOT_SUPPORTED on this machine
    int executions = 0;      ///< executions checked and correct
    std::vector<std::string> failures;
};

/// Makes `device` current for the scope.
class OnDevice {
public:
    explicit OnDevice(int device) {
        MGT_CUDA_REQUIRE(cudaGetDevice(&previous_));
        MGT_CUDA_REQUIRE(cudaSetDevice(device));
    }
    ~OnDevice() { (void)cudaSetDevice(previous_); }
    OnDevice(const OnDevice&) = delete;
    OnDevice& operator=(const OnDevice&) = delete;

private:
    int previous_ = 0;
};

std::vector<moegemm_backend_t> enabled_backends() {
    std::vector<moegemm_backend_t> out;
    for (moegemm_backend_t b :
         {MOEGEMM_BACKEND_AUTO, MOEGEMM_BACKEND_NATIVE, MOEGEMM_BACKEND_CUBLASLT})
        if (backend_enabled(b)) out.push_back(b);
    return out;
}

/// The body of one worker: its own stream, checker and plans; creation, execution and
/// destruction each start when every worker is ready for them. Never throws, never asserts.
void worker(int device, int cc, const std::vector<CaseSpec>& specs, int iterations,
            StartLine& line, WorkerReport& report) {
    const auto record = [&report](const std::string& what) {
        if (report.failures.size() < 10) report.failures.push_back(what);
    };
    cudaStream_t stream = nullptr;
    std::unique_ptr<DeviceChecker> checker;
    std::vector<std::unique_ptr<CaseBuffers>> buffers;
    std::vector<std::unique_ptr<CaseRun>> runs;
    try {
        MGT_CUDA_THROW(cudaSetDevice(device));
        MGT_CUDA_THROW(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        checker = std::make_unique<DeviceChecker>();
    } catch (const std::exception& e) {
        record(std::string("setup: ") + e.what());
    }

    line.arrive_and_wait();  // every thread creates its plans at once
    if (checker) {
        for (const CaseSpec& spec : specs) {
            buffers.push_back(std::make_unique<CaseBuffers>());
            runs.push_back(std::make_unique<CaseRun>(spec, *buffers.back(), stream));
            const CaseResult& st = runs.back()->state();
            if (st.kind == CaseResult::Kind::Skipped) {
                ++report.skipped;
                if (!documented_not_supported(spec, cc))
                    record("NOT_SUPPORTED where the documented rules predict support: " +
                           st.message);
            } else if (st.kind == CaseResult::Kind::Failed) {
                record(st.message);
            }
            else ++report.plans;
        }
    }

    line.arrive_and_wait();  // every thread executes at once
    for (int it = 0; it < iterations && checker; ++it) {
        for (const auto& run : runs) {
            if (!run->state().passed()) continue;
            const size_t round = static_cast<size_t>(it) % run->spec().rounds.size();
            const CaseResult res = run->round(round, *checker);
            if (res.passed()) ++report.executions;
            else if (res.kind == CaseResult::Kind::Skipped) ++report.skipped;
            else record("iteration " + std::to_string(it) + ": " + res.message);
        }
    }

    line.arrive_and_wait();  // every thread destroys its plans at once
    runs.clear();
    checker.reset();
    if (stream) (void)cudaStreamDestroy(stream);
}

}  // namespace

TEST_CASE("concurrency: 8 threads with their own plans and streams at the same time",
          "[concurrency][threads]") {
    constexpr int kThreads = 8;
    constexpr int kCasesPerThread = 3;
    constexpr int kIterations = 6;
    constexpr uint64_t kSeed = 8;

    // Small random problems (every layout, dtype, E4M3 with each scale mode in a quarter of
    // them, weight layout, sizes source, backend), different for every thread, with sizes
    // changing between executions.
    CaseLimits limits;
    limits.max_experts = 64;
    limits.max_dim = 1024;
    limits.mac_cap = int64_t{8} << 20;
    limits.elem_cap = int64_t{8} << 20;
    limits.big_fraction = 0.0;
    limits.multi_round_fraction = 0.5;
    CaseChoices choices;
    choices.backends = enabled_backends();
    choices.e4m3_fraction = 0.25;
    REQUIRE_FALSE(choices.backends.empty());
    int device = 0;
    MGT_CUDA_REQUIRE(cudaGetDevice(&device));
    const int cc = device_cc();

    std::vector<std::vector<CaseSpec>> specs(kThreads);
    for (int t = 0; t < kThreads; ++t) {
        for (int i = 0; i < kCasesPerThread; ++i) {
            CaseSpec spec =
                random_case(case_seed(kSeed, static_cast<uint64_t>(t * kCasesPerThread + i)),
                            limits, choices)
                    .spec;
            spec.default_stream = false;  // each thread's own stream
            specs[static_cast<size_t>(t)].push_back(std::move(spec));
        }
    }

    StartLine line(kThreads);
    std::vector<WorkerReport> reports(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back(worker, device, cc, std::cref(specs[static_cast<size_t>(t)]), kIterations,
                             std::ref(line), std::ref(reports[static_cast<size_t>(t)]));
    for (std::thread& th : threads) th.join();

    int plans = 0, skipped = 0, executions = 0;
    for (int t = 0; t < kThreads; ++t) {
        const WorkerReport& r = reports[static_cast<size_t>(t)];
        plans += r.plans;
        skipped += r.skipped;
        executions += r.executions;
        for (const std::string& f : r.failures) FAIL_CHECK("thread " << t << ": " << f);
    }
    std::printf("[concurrency] %d threads: %d plans, %d NOT_SUPPORTED, %d executions checked\n",
                kThreads, plans, skipped, executions);
    std::fflush(stdout);
    // Every refusal was documented (the workers record the others); with both backends at
    // least one case of each thread runs.
    if (plans == 0) WARN("every case was NOT_SUPPORTED on this machine");
    else CHECK(executions > 0);
}

TEST_CASE("concurrency: one plan on two streams at once with a workspace and an output each",
          "[concurrency][streams]") {
    const moegemm_backend_t backend =
        GENERATE(MOEGEMM_BACKEND_AUTO, MOEGEMM_BACKEND_CUBLASLT, MOEGEMM_BACKEND_NATIVE);
    const moegemm_layout_t layout = GENERATE(MOEGEMM_LAYOUT_VARIABLE, MOEGEMM_LAYOUT_MASKED);
    const SizesFrom from = GENERATE(SizesFrom::Host, SizesFrom::Device);
    if (!backend_enabled(backend)) return;  // MOEGEMM_TEST_BACKENDS
    constexpr int kRepeats = 8;

    // Few tiles, so that the kernels of the two streams fit on the GPU side by side.
    CaseSpec spec;
    spec.g.layout = layout;
    spec.g.experts = 6;
    spec.g.n = 256;
    spec.g.k = 512;
    spec.g.max_rows = layout == MOEGEMM_LAYOUT_VARIABLE ? 434 + 16 : 200 + 8;
    spec.backend = backend;
    spec.sizes_from = from;
    spec.rounds = {{40, 0, 129, 1, 64, 200}};
    spec.seed = 1;
    CaseSpec other = spec;  // other inputs, same problem
    other.seed = 1001;
    other.d_offset = 16;
    INFO("case: " << spec.str());

    Gate gate1, gate2;  // declared before the streams they hold
    Stream s1, s2;
    CaseBuffers buf1, buf2;
    DeviceChecker check1, check2;
    CaseRun owner(spec, buf1, s1.get());
    CaseResult st = owner.state();
    if (st.kind == CaseResult::Kind::Passed) st = owner.prepare(0);
    if (st.kind == CaseResult::Kind::Skipped) {
        // Only a refusal the header documents (no native kernels off Hopper, no device sizes
        // for VARIABLE on cuBLASLt) ends the case; any other is the library's failure.
        INFO("not supported here: " << st.message);
        CHECK(documented_not_supported(spec, device_cc()));
        return;
    }
    INFO(st.message);
    REQUIRE(st.passed());
    CaseRun second(other, buf2, s2.get(), owner);
    REQUIRE(second.state().passed());
    REQUIRE(second.prepare(0).passed());
    INFO("plan: " << owner.state().plan << "; workspace " << owner.workspace_bytes() << " bytes each");

    // Each alone first: checks them, and loads the kernels (lazy module loading may
    // synchronize the context, which a held stream would turn into a 10 s stall).
    for (CaseRun* run : {&owner, &second}) {
        CaseResult r = run->launch();
        if (r.passed()) r = run->check(run == &owner ? check1 : check2);
        INFO("alone: " << r.message);
        REQUIRE(r.passed());
    }
    MGT_CUDA_REQUIRE(cudaDeviceSynchronize());

    // Both streams are held while the executions are enqueued, then released together.
    struct Release {
        Gate& a;
        Gate& b;
        ~Release() { a.open = b.open = true; }
    } release{gate1, gate2};
    MGT_CUDA_REQUIRE(cudaLaunchHostFunc(s1.get(), hold_stream, &gate1));
    MGT_CUDA_REQUIRE(cudaLaunchHostFunc(s2.get(), hold_stream, &gate2));
    for (int i = 0; i < kRepeats; ++i) {
        const CaseResult r1 = owner.launch();
        const CaseResult r2 = second.launch();
        INFO("repeat " << i << ": " << r1.message << r2.message);
        REQUIRE(r1.passed());
        REQUIRE(r2.passed());
    }
    gate1.open = true;
    gate2.open = true;
    const CaseResult c1 = owner.check(check1);
    const CaseResult c2 = second.check(check2);
    CHECK_FALSE(gate1.timed_out.load());
    CHECK_FALSE(gate2.timed_out.load());
    {
        INFO("stream 1: " << c1.message);
        CHECK(c1.passed());
    }
    {
        INFO("stream 2: " << c2.message);
        CHECK(c2.passed());
    }
}

TEST_CASE("concurrency: two plans back to back on one stream share one workspace",
          "[concurrency][pdl]") {
    // Native kernels are launched with programmatic dependent launch (moegemm.h, MOEGEMM_PDL):
    // the second kernel's CTAs may start on SMs the first leaves idle while it still runs. The
    // first here is long (K = 8192) on 8 tiles, the second short on other tiles, and both use
    // the same workspace, where each CTA writes its tensor maps: the second must not write them
    // (nor read its inputs) before the first has finished. Nothing is enqueued between the two
    // executions, so that the second follows the first kernel directly.
    if (device_cc() != 90 || !backend_enabled(MOEGEMM_BACKEND_NATIVE)) return;  // nothing to test
    const int pdl = GENERATE(1, 0);  // with, then without programmatic dependent launch
    const ScopedPlanOption setting("dependent_launch", pdl != 0);
    CaseSpec first;
    first.g.layout = MOEGEMM_LAYOUT_VARIABLE;
    first.g.experts = 2;
    first.g.n = 512;
    first.g.k = 8192;
    first.g.max_rows = 400;
    first.backend = MOEGEMM_BACKEND_NATIVE;
    first.rounds = {{200, 150}};
    first.seed = 11;
    CaseSpec second = first;
    second.g.experts = 3;
    second.g.n = 768;
    second.g.k = 320;
    second.g.max_rows = 300;
    second.rounds = {{97, 0, 130}};
    second.seed = 23;
    INFO("first: " << first.str() << "\nsecond: " << second.str() << "\ndependent_launch=" << pdl);

    Stream stream;
    CaseBuffers buffers1, buffers2;
    DeviceChecker checker;
    CaseRun run1(first, buffers1, stream.get());
    CaseRun run2(second, buffers2, stream.get());
    REQUIRE(run1.state().passed());
    REQUIRE(run2.state().passed());
    REQUIRE(run1.prepare(0).passed());
    REQUIRE(run2.prepare(0).passed());
    const size_t shared_bytes = std::max(run1.workspace_bytes(), run2.workspace_bytes());
    REQUIRE(shared_bytes <= run1.workspace_bytes());  // native plans: the same size
    for (int repeat = 0; repeat < 5; ++repeat) {
        INFO("repeat " << repeat);
        REQUIRE(run2.poison_output().passed());
        REQUIRE(run1.poison_output().passed());
        REQUIRE(run1.execute_with(run1.workspace(), shared_bytes).passed());
        REQUIRE(run2.execute_with(run1.workspace(), shared_bytes).passed());
        const CaseResult c1 = run1.check(checker);
        const CaseResult c2 = run2.check(checker);
        INFO("first: " << c1.message << "\nsecond: " << c2.message);
        CHECK(c1.passed());
        CHECK(c2.passed());
    }
}

TEST_CASE("concurrency: a plan reading the D that the plan before it writes, back to back",
          "[concurrency][pdl]") {
    // The layer chain of an MoE block: the second GEMM's A is the first one's D, and nothing
    // is enqueued between the two executions. With programmatic dependent launch the second
    // kernel's CTAs start on the SMs the first leaves idle (it has 8 long tiles) while the
    // first still computes D; reading A before the first kernel completed would read the
    // poison D holds. Both GEMMs must agree with the oracle, and the second result must be
    // bitwise the one computed with the stream synchronized between the two (the kernels are
    // deterministic).
    if (device_cc() != 90 || !backend_enabled(MOEGEMM_BACKEND_NATIVE)) return;  // nothing to test
    const int pdl = GENERATE(1, 0);
    const ScopedPlanOption setting("dependent_launch", pdl != 0);
    INFO("dependent_launch=" << pdl);
    constexpr int kExperts = 2, kMaxRows = 400, kK1 = 8192, kN1 = 512, kN2 = 768;
    const int32_t sizes[kExperts] = {200, 150};
    constexpr int kRows = 350;
    auto problem = [&](int n, int k) {
        moegemm_problem_t p;
        REQUIRE(moegemm_problem_init(&p) == MOEGEMM_STATUS_SUCCESS);
        p.layout = MOEGEMM_LAYOUT_VARIABLE;
        p.num_experts = kExperts;
        p.n = n;
        p.k = k;
        p.max_rows = kMaxRows;
        p.backend = MOEGEMM_BACKEND_NATIVE;
        return p;
    };
    Plan first(problem(kN1, kK1));
    Plan second(problem(kN2, kN1));
    MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(first.get(), sizes, MOEGEMM_MEMORY_HOST));
    MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(second.get(), sizes, MOEGEMM_MEMORY_HOST));

    // Small integers: every sum is exact in fp32, so D1 holds exact bf16 values too.
    auto random_bf16 = [](size_t count, uint32_t seed) {
        std::vector<uint16_t> v(count);
        uint32_t x = seed;
        for (auto& e : v) {
            x = x * 1664525u + 1013904223u;
            e = bf16_from_float(static_cast<float>(static_cast<int>((x >> 24) % 5) - 2) / 64.0f);
        }
        return v;
    };
    DeviceBuffer a1(size_t{kMaxRows} * kK1 * 2), b1(size_t{kExperts} * kN1 * kK1 * 2);
    DeviceBuffer d1(size_t{kMaxRows} * kN1 * 2), b2(size_t{kExperts} * kN2 * kN1 * 2);
    DeviceBuffer d2(size_t{kMaxRows} * kN2 * 2);
    a1.upload(random_bf16(a1.size() / 2, 1).data(), a1.size());
    b1.upload(random_bf16(b1.size() / 2, 2).data(), b1.size());
    b2.upload(random_bf16(b2.size() / 2, 3).data(), b2.size());
    // One workspace for both, as a layer loop would pass.
    const size_t ws_bytes = std::max(first.workspace_size(), second.workspace_size());
    DeviceBuffer workspace(std::max<size_t>(ws_bytes, 256));
    Stream stream;

    auto run = [&](bool synchronize_between) {
        MGT_CUDA_REQUIRE(cudaMemsetAsync(d1.get(), 0xFF, d1.size(), stream.get()));  // NaN
        MGT_CUDA_REQUIRE(cudaMemsetAsync(d2.get(), 0xFF, d2.size(), stream.get()));
        MGT_REQUIRE_OK(moegemm_execute(first.get(), a1.get(), b1.get(), d1.get(), nullptr,
                                       nullptr, workspace.get(), ws_bytes, stream.get()));
        if (synchronize_between) MGT_CUDA_REQUIRE(cudaStreamSynchronize(stream.get()));
        MGT_REQUIRE_OK(moegemm_execute(second.get(), d1.get(), b2.get(), d2.get(), nullptr,
                                       nullptr, workspace.get(), ws_bytes, stream.get()));
        MGT_CUDA_REQUIRE(cudaStreamSynchronize(stream.get()));
        return d2.download();
    };
    // Both GEMMs of the run that just ended against the GPU oracle: D1 from A1 and B1, D2 from
    // that D1 and B2, every valid element, rows past the sum still poison.
    const std::vector<int32_t> size_list(sizes, sizes + kExperts);
    auto check_chain = [&](const char* which) {
        DeviceChecker checker;
        checker.begin(stream.get());
        checker.output(geometry(MOEGEMM_LAYOUT_VARIABLE, kExperts, kN1, kK1, kMaxRows),
                       MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_BF16, a1.get(), b1.get(), d1.get(),
                       size_list, stream.get());
        const CheckReport first_gemm = checker.finish(stream.get());
        checker.begin(stream.get());
        checker.output(geometry(MOEGEMM_LAYOUT_VARIABLE, kExperts, kN2, kN1, kMaxRows),
                       MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_BF16, d1.get(), b2.get(), d2.get(),
                       size_list, stream.get());
        const CheckReport second_gemm = checker.finish(stream.get());
        INFO(which << ": first GEMM " << first_gemm.summary() << "; second GEMM "
                   << second_gemm.summary());
        CHECK(first_gemm.ok());
        CHECK(second_gemm.ok());
        CHECK(first_gemm.checked == int64_t{kRows} * kN1);
        CHECK(second_gemm.checked == int64_t{kRows} * kN2);
    };
    const std::vector<uint8_t> expected = run(true);
    check_chain("synchronized between the GEMMs");
    for (int repeat = 0; repeat < 10; ++repeat) {
        INFO("repeat " << repeat);
        const std::vector<uint8_t> got = run(false);
        REQUIRE(got.size() == expected.size());
        int64_t differing = 0;
        for (size_t i = 0; i < got.size(); ++i) differing += got[i] != expected[i];
        REQUIRE(differing == 0);
    }
    check_chain("back to back");
}

TEST_CASE("concurrency: ten executions give bitwise identical D whatever the workspace held",
          "[concurrency][determinism]") {
    const moegemm_backend_t backend =
        GENERATE(MOEGEMM_BACKEND_NATIVE, MOEGEMM_BACKEND_CUBLASLT, MOEGEMM_BACKEND_AUTO);
    const moegemm_layout_t layout =
        GENERATE(MOEGEMM_LAYOUT_VARIABLE, MOEGEMM_LAYOUT_MASKED, MOEGEMM_LAYOUT_FIXED);
    const moegemm_dtype_t out = GENERATE(MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_F32);
    if (!backend_enabled(backend)) return;  // MOEGEMM_TEST_BACKENDS
    constexpr int kRuns = 10;
    const uint8_t workspace_bytes[] = {0x00, 0xFF, 0x5A, 0x81, 0x7F, 0x01, 0xC3, 0x3C, 0xAA};

    // Long K and few rows: where a split of K would show up as run-to-run differences.
    CaseSpec spec;
    spec.g.layout = layout;
    spec.g.experts = 4;
    spec.g.n = 256;
    spec.g.k = 4096;
    spec.g.max_rows = layout == MOEGEMM_LAYOUT_VARIABLE ? 360 + 5
                                                        : (layout == MOEGEMM_LAYOUT_MASKED ? 257 : 100);
    spec.out = out;
    spec.backend = backend;
    spec.sizes_from = layout == MOEGEMM_LAYOUT_FIXED ? SizesFrom::None : SizesFrom::Host;
    spec.rounds = {layout == MOEGEMM_LAYOUT_FIXED ? std::vector<int32_t>{}
                                                  : std::vector<int32_t>{3, 100, 0, 257}};
    spec.seed = 31337;
    INFO("case: " << spec.str());

    Stream stream;
    CaseBuffers bufs;
    DeviceChecker checker;
    CaseRun run(spec, bufs, stream.get());
    const CaseResult first = run.round(0, checker);
    if (first.kind == CaseResult::Kind::Skipped) {
        INFO("not supported here: " << first.message);
        CHECK(documented_not_supported(spec, device_cc()));
        return;
    }
    INFO(first.message);
    REQUIRE(first.passed());
    const std::vector<uint8_t> reference = run.download_output();
    const std::vector<int32_t> sizes = run.expected_sizes();

    // The other runs are compared with the first bit for bit on every valid row (the first
    // was checked against the reference).
    for (int i = 1; i < kRuns; ++i) {
        run.fill_workspace(workspace_bytes[i - 1]);
        const CaseResult r = run.launch();
        INFO("run " << i << ": " << r.message);
        REQUIRE(r.passed());
        std::string where;
        const int64_t diffs =
            diff_valid_rows(spec.g, out, sizes, reference, run.download_output(), 0, &where);
        INFO("run " << i << " after the workspace was filled with 0x" << std::hex
                    << static_cast<int>(workspace_bytes[i - 1]) << std::dec << ": " << diffs
                    << " elements differ from run 0; first: " << where);
        CHECK(diffs == 0);
    }
}

// ------------------------------------------------------------------------------------------
// Misuse with two GPUs
// ------------------------------------------------------------------------------------------

TEST_CASE("concurrency: a plan of device 0 with a stream or workspace or output of device 1",
          "[concurrency][multi_gpu]") {
    int count = 0;
    MGT_CUDA_REQUIRE(cudaGetDeviceCount(&count));
    if (count < 2) {
        WARN("needs two GPUs, this machine has " << count << ": skipped");
        return;
    }
    const moegemm_backend_t backend = GENERATE(MOEGEMM_BACKEND_AUTO, MOEGEMM_BACKEND_CUBLASLT);
    if (!backend_enabled(backend)) return;  // MOEGEMM_TEST_BACKENDS
    int here = 0;
    MGT_CUDA_REQUIRE(cudaGetDevice(&here));
    const int there = here == 0 ? 1 : 0;

    const Geometry g{MOEGEMM_LAYOUT_VARIABLE, MOEGEMM_WEIGHTS_NK, 4, 72, 40, 48};
    const std::vector<int32_t> sizes = {6, 0, 11, 3};
    const moegemm_dtype_t out = MOEGEMM_DTYPE_BF16;
    const Workload w(g, MOEGEMM_DTYPE_BF16, sizes, 5);  // on `here`
    Plan plan(make_problem(g, MOEGEMM_DTYPE_BF16, out, backend));
    MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(plan.get(), w.sizes().data(), MOEGEMM_MEMORY_HOST));
    const size_t ws_bytes = plan.workspace_size();
    DeviceBuffer ws(ws_bytes);
    OutputBuffer d(g.d_elems() * dtype_bytes(out));
    INFO("plan on device " << here << ": " << plan.describe());

    SECTION("a stream of the other device is refused; nothing is written") {
        cudaStream_t foreign = nullptr;
        {
            OnDevice on(there);
            MGT_CUDA_REQUIRE(cudaStreamCreateWithFlags(&foreign, cudaStreamNonBlocking));
        }
        const Outcome o = outcome(moegemm_execute(plan.get(), w.a(), w.b(), d.d(), nullptr,
                                                  nullptr, ws.get(), ws_bytes, foreign));
        int current = -1;
        MGT_CUDA_REQUIRE(cudaGetDevice(&current));
        MGT_CUDA_REQUIRE(cudaStreamSynchronize(foreign));
        MGT_CUDA_REQUIRE(cudaDeviceSynchronize());
        (void)cudaStreamDestroy(foreign);
        INFO("execute on a stream of device " << there << " -> " << o.str());
        CHECK(o.status == MOEGEMM_STATUS_INVALID_VALUE);
        CHECK_THAT(o.message, Contains("device"));
        CHECK(current == here);
        CHECK(d.unpoisoned() == 0);
    }

    SECTION("positive control: the NULL stream while the other device is current") {
        // The legacy stream of the plan's device: accepted, and the caller's device is kept.
        Outcome o;
        int current = -1;
        {
            OnDevice on(there);
            o = outcome(moegemm_execute(plan.get(), w.a(), w.b(), d.d(), nullptr, nullptr,
                                        ws.get(), ws_bytes, nullptr));
            MGT_CUDA_REQUIRE(cudaGetDevice(&current));
        }
        MGT_CUDA_REQUIRE(cudaDeviceSynchronize());
        INFO("execute on NULL with device " << there << " current -> " << o.str());
        REQUIRE(o.status == MOEGEMM_STATUS_SUCCESS);
        CHECK(current == there);
        const CompareReport rep = check_result(w, out, d.download());
        INFO(rep.summary());
        CHECK(rep.ok());
    }

    SECTION("positive control: a plan of the other device, called from this one") {
        std::unique_ptr<Workload> w1;
        std::unique_ptr<DeviceBuffer> ws1;
        std::unique_ptr<OutputBuffer> d1;
        cudaStream_t s1 = nullptr;
        {
            OnDevice on(there);
            w1 = std::make_unique<Workload>(g, MOEGEMM_DTYPE_BF16, sizes, 6);
            MGT_CUDA_REQUIRE(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
        }
        moegemm_problem_t p = make_problem(g, MOEGEMM_DTYPE_BF16, out, backend);
        p.device = there;
        Plan plan1(p);
        MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(plan1.get(), w1->sizes().data(), MOEGEMM_MEMORY_HOST));
        const size_t ws1_bytes = plan1.workspace_size();
        {
            OnDevice on(there);
            ws1 = std::make_unique<DeviceBuffer>(ws1_bytes);
            d1 = std::make_unique<OutputBuffer>(g.d_elems() * dtype_bytes(out));
        }
        const Outcome o = outcome(moegemm_execute(plan1.get(), w1->a(), w1->b(), d1->d(), nullptr,
                                                  nullptr, ws1->get(), ws1_bytes, s1));
        int current = -1;
        MGT_CUDA_REQUIRE(cudaGetDevice(&current));
        MGT_CUDA_REQUIRE(cudaStreamSynchronize(s1));
        (void)cudaStreamDestroy(s1);
        INFO("plan of device " << there << " executed from device " << here << " -> " << o.str());
        REQUIRE(o.status == MOEGEMM_STATUS_SUCCESS);
        CHECK(current == here);
        OnDevice on(there);  // the oracle runs where w1's A and B are
        const CompareReport rep = check_result(*w1, out, d1->download());
        INFO(rep.summary());
        CHECK(rep.ok());
    }

    SECTION("a workspace and an output on the other device") {
        std::unique_ptr<DeviceBuffer> ws1;
        std::unique_ptr<OutputBuffer> d1;
        {
            OnDevice on(there);
            ws1 = std::make_unique<DeviceBuffer>(std::max<size_t>(ws_bytes, 256));
            d1 = std::make_unique<OutputBuffer>(g.d_elems() * dtype_bytes(out));
        }
        // Probed under stream capture, so that nothing runs: if the call is accepted and the
        // device cannot reach the other's memory, the kernel would fault and take the CUDA
        // context (and every later test of this process) with it.
        Stream capture;
        MGT_CUDA_REQUIRE(cudaStreamBeginCapture(capture.get(), cudaStreamCaptureModeThreadLocal));
        const Outcome o = outcome(moegemm_execute(plan.get(), w.a(), w.b(), d1->d(), nullptr,
                                                  nullptr, ws1->get(), ws_bytes, capture.get()));
        cudaGraph_t graph = nullptr;
        const cudaError_t ended = cudaStreamEndCapture(capture.get(), &graph);
        if (graph) (void)cudaGraphDestroy(graph);
        MGT_CUDA_REQUIRE(ended);
        INFO("execute with workspace and D on device " << there << " -> " << o.str());
        // Refused before anything is enqueued (the launch would fault and take the context):
        // with its reason, nothing written.
        CHECK(o.status == MOEGEMM_STATUS_INVALID_VALUE);
        CHECK_THAT(o.message, Contains("plan runs on device"));
        CHECK(d1->unpoisoned() == 0);
    }
}

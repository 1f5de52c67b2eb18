// [correctness]: libmoegemm's output against an fp64 host reference, for every layout,
// weight layout, input and output dtype, on the AUTO, CUBLASLT and NATIVE backends.
//
// Backend filter: when MOEGEMM_TEST_BACKENDS is set (a comma list of auto, cublaslt,
// native; see support/gpu_harness.hpp), check_everywhere and every backend loop or
// GENERATE here skip the backends not listed, including the cuBLASLt-specific cases. For
// compute-sanitizer racecheck, which crashes inside cuBLASLt's kernels on sm_90, run
//     MOEGEMM_TEST_BACKENDS=native compute-sanitizer --tool racecheck moegemm_gpu_tests "~[large]"
// ("auto" is excluded there on purpose: AUTO falls back to cuBLASLt for KN weights).
//
// Every run poisons D (and 256 guard bytes on each side) with 0xFF, a NaN in every output
// type, so an element that should have been written and was not fails as "not finite", and
// a byte that must stay untouched (VARIABLE rows past the sum, the guards) is compared
// bitwise with the poison. Tolerances: see tolerance_for() in support/reference.cpp.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <thread>

#include "plan_options.hpp"
#include "support/gpu_harness.hpp"

using namespace mgt;
using Catch::Matchers::Contains;

namespace {

const moegemm_backend_t kBackends[] = {MOEGEMM_BACKEND_AUTO, MOEGEMM_BACKEND_CUBLASLT,
                                       MOEGEMM_BACKEND_NATIVE};
const moegemm_dtype_t kOutTypes[] = {MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_F16, MOEGEMM_DTYPE_F32};

/// One set of expert sizes and the dimensions to run it with, for all three layouts.
struct SizeCase {
    const char* name;
    int32_t experts;
    int64_t n, k;
    std::vector<int32_t> sizes;  // VARIABLE and MASKED
    int64_t variable_slack;      // VARIABLE: max_rows = sum(sizes) + slack (rows past the sum)
    int64_t masked_slack;        // MASKED: max_rows = max(sizes) + slack
    int64_t fixed_rows;          // FIXED: max_rows
};

std::vector<int32_t> many_experts_sizes() {
    // 33 experts, a third of them empty (the first one too), sizes 1..70.
    std::vector<int32_t> s(33);
    for (int e = 0; e < 33; ++e) s[static_cast<size_t>(e)] = (e % 3 == 0) ? 0 : (e * 29) % 70 + 1;
    return s;
}

const std::vector<SizeCase>& size_cases() {
    // N and K are multiples of 8 and (except the last) not of 64; N != K everywhere so that a
    // swapped N/K or a wrong transpose of B cannot pass by symmetry.
    static const std::vector<SizeCase> cases = {
        {"first expert empty, sizes around tile edges", 6, 72, 40, {0, 7, 63, 1, 65, 129}, 37, 3, 65},
        {"last and several experts empty", 7, 136, 264, {200, 0, 0, 65, 1, 3, 0}, 37, 0, 63},
        {"single expert", 1, 64, 128, {129}, 37, 0, 129},
        {"single expert, one row, smallest N and K; max_rows == sum", 1, 8, 16, {1}, 0, 0, 1},
        {"33 experts, a third empty", 33, 24, 56, many_experts_sizes(), 37, 5, 7},
    };
    return cases;
}

Geometry geometry_for(const SizeCase& c, moegemm_layout_t layout, moegemm_weight_layout_t w) {
    Geometry g;
    g.layout = layout;
    g.weights = w;
    g.experts = c.experts;
    g.n = c.n;
    g.k = c.k;
    const int64_t sum = std::accumulate(c.sizes.begin(), c.sizes.end(), int64_t{0});
    const int64_t mx = c.sizes.empty() ? 0 : *std::max_element(c.sizes.begin(), c.sizes.end());
    switch (layout) {
        case MOEGEMM_LAYOUT_VARIABLE: g.max_rows = std::max<int64_t>(1, sum + c.variable_slack); break;
        case MOEGEMM_LAYOUT_MASKED: g.max_rows = std::max<int64_t>(1, mx + c.masked_slack); break;
        case MOEGEMM_LAYOUT_FIXED: g.max_rows = c.fixed_rows; break;
    }
    return g;
}

std::vector<SizesFrom> sizes_sources(moegemm_layout_t layout) {
    switch (layout) {
        case MOEGEMM_LAYOUT_VARIABLE: return {SizesFrom::Host, SizesFrom::Device};
        case MOEGEMM_LAYOUT_MASKED: return {SizesFrom::Host, SizesFrom::Device};
        case MOEGEMM_LAYOUT_FIXED: return {SizesFrom::None};
    }
    return {};
}

// What each backend serves (moegemm.h: a combination that is not implemented is
// NOT_SUPPORTED, never a wrong answer). The cuBLASLt baseline writes the input type or F32 and
// needs host sizes for VARIABLE; the native kernel runs on sm_90 with either weight layout and
// serves every output type and sizes source.
bool native_serves(moegemm_weight_layout_t) { return device_cc() == 90; }

bool cublaslt_serves(moegemm_layout_t layout, SizesFrom src, moegemm_dtype_t in, moegemm_dtype_t out) {
    return (out == in || out == MOEGEMM_DTYPE_F32) &&
           !(layout == MOEGEMM_LAYOUT_VARIABLE && src == SizesFrom::Device);
}

bool expect_supported(moegemm_backend_t backend, const Geometry& g, SizesFrom src,
                      moegemm_dtype_t in, moegemm_dtype_t out) {
    const bool native = native_serves(g.weights);
    const bool cublaslt = cublaslt_serves(g.layout, src, in, out);
    switch (backend) {
        case MOEGEMM_BACKEND_NATIVE: return native;
        case MOEGEMM_BACKEND_CUBLASLT: return cublaslt;
        default: return native || cublaslt;
    }
}

uint32_t seed_of(size_t a, int b, int c, int d) {
    return static_cast<uint32_t>(0x9E3779B9u * (a + 1) ^ (b * 977u + c * 131u + d * 17u + 12345u));
}

/// Runs the workload on every backend (the heuristic's pick) and, with the native backend,
/// on every native kernel variant by name; all output types and every sizes source of its
/// layout. Every run is compared with the reference. Failures are CHECKs, so one failing
/// combination does not hide the others; each names its case.
void check_everywhere(const Workload& w) {
    std::vector<std::pair<moegemm_backend_t, std::string>> runs;  // backend, forced kernel
    for (moegemm_backend_t backend : kBackends) {
        if (!backend_enabled(backend)) continue;  // MOEGEMM_TEST_BACKENDS
        runs.emplace_back(backend, std::string());
        if (backend == MOEGEMM_BACKEND_NATIVE && native_serves(w.geometry().weights))
            for (const std::string& name : native_kernel_names()) runs.emplace_back(backend, name);
    }
    for (const auto& [backend, kernel] : runs) {
        for (moegemm_dtype_t out : kOutTypes) {
            for (SizesFrom src : sizes_sources(w.geometry().layout)) {
                RunOptions opt;
                opt.backend = backend;
                opt.out = out;
                opt.sizes_from = src;
                opt.force_kernel = kernel;
                INFO("case: " << w.str() << " " << opt.str());
                const RunResult r = run_once(w, opt);
                if (!forced_kernel_serves(kernel, w.geometry(), out, w.in_type()) ||
                    !expect_supported(backend, w.geometry(), src, w.in_type(), out)) {
                    CHECK_FALSE(r.ok);
                    CHECK_THAT(r.error, Catch::Contains("MOEGEMM_STATUS_NOT_SUPPORTED"));
                    continue;
                }
                if (!r.ok) {
                    FAIL_CHECK("library call failed: " << r.error);
                    continue;
                }
                INFO("plan: " << r.description);
                const CompareReport rep = check_result(w, out, r.buffer);
                INFO(rep.summary());
                CHECK(rep.ok());
            }
        }
    }
    w.check_inputs_unchanged();
}

/// Runs `w` once with `opt`, requires that the library call succeeded and checks D against the
/// reference; the result goes on to comparisons with other runs.
RunResult run_checked(const Workload& w, const RunOptions& opt) {
    RunResult r = run_once(w, opt);
    INFO(r.error);
    REQUIRE(r.ok);
    INFO("plan: " << r.description);
    const CompareReport rep = check_result(w, opt.out, r.buffer);
    INFO(rep.summary());
    CHECK(rep.ok());
    return r;
}

/// Checks that two runs' D (buffers with guards) agree bit for bit on every valid row of `w`.
void check_identical(const Workload& w, moegemm_dtype_t out, const std::vector<uint8_t>& expected,
                     const std::vector<uint8_t>& got, const std::string& what) {
    std::string where;
    const int64_t diffs =
        diff_valid_rows(w.geometry(), out, w.sizes(), expected, got, kGuardBytes, &where);
    INFO(what << ": " << diffs << " elements differ; first: " << where);
    CHECK(diffs == 0);
}

}  // namespace

namespace {

// Counts the 16-bit patterns a converter pair gets wrong: every finite pattern must round-trip,
// every midpoint between neighbours must round to the even one, and the floats just either
// side of a midpoint to the nearer one. `last_finite` is the largest finite magnitude pattern.
template <typename ToFloat, typename FromFloat>
int64_t rounding_errors(ToFloat to_float, FromFloat from_float, uint32_t last_finite) {
    int64_t bad = 0;
    for (uint32_t h = 0; h < 0x10000u; ++h) {
        const uint16_t bits = static_cast<uint16_t>(h);
        const float v = to_float(bits);
        if (std::isnan(v)) {
            bad += !std::isnan(to_float(from_float(v)));
            continue;
        }
        bad += from_float(v) != bits;
        if ((h & 0x7fffu) >= last_finite) continue;  // no finite successor
        const uint16_t up = static_cast<uint16_t>(h + 1);
        const float next = to_float(up);
        const float mid = static_cast<float>((static_cast<double>(v) + next) / 2);  // exact
        bad += from_float(mid) != ((h & 1u) ? up : bits);
        bad += from_float(std::nextafter(mid, v)) != bits;
        bad += from_float(std::nextafter(mid, next)) != up;
    }
    return bad;
}

}  // namespace

TEST_CASE("host bf16/f16 converters round to nearest even", "[correctness][host]") {
    // The reference is only as good as these converters: check them exhaustively.
    SECTION("bf16") {
        CHECK(rounding_errors(float_from_bf16, bf16_from_float, 0x7f7fu) == 0);
        CHECK(bf16_from_float(1.0f) == 0x3F80);
        CHECK(bf16_from_float(-2.0f) == 0xC000);
        CHECK(bf16_from_float(3.4e38f) == 0x7F80);  // rounds up to infinity
    }
    SECTION("f16") {
        CHECK(rounding_errors(float_from_f16, f16_from_float, 0x7bffu) == 0);
        CHECK(f16_from_float(1.0f) == 0x3C00);
        CHECK(f16_from_float(65504.0f) == 0x7BFF);
        CHECK(f16_from_float(65519.0f) == 0x7BFF);
        CHECK(f16_from_float(65520.0f) == 0x7C00);
        CHECK(f16_from_float(std::ldexp(1.0f, -24)) == 0x0001);
        CHECK(f16_from_float(std::ldexp(1.0f, -25)) == 0x0000);  // tie: to even (zero)
        CHECK(f16_from_float(std::ldexp(1.5f, -25)) == 0x0001);
        CHECK(f16_from_float(-std::ldexp(1.0f, -14)) == 0x8400);
    }
}

TEST_CASE("grouped GEMM matches the fp64 reference: ragged sizes, empty experts, odd shapes",
          "[correctness]") {
    const size_t ci = static_cast<size_t>(GENERATE(range(0, 5)));
    const moegemm_layout_t layout =
        GENERATE(MOEGEMM_LAYOUT_VARIABLE, MOEGEMM_LAYOUT_MASKED, MOEGEMM_LAYOUT_FIXED);
    const moegemm_weight_layout_t weights = GENERATE(MOEGEMM_WEIGHTS_NK, MOEGEMM_WEIGHTS_KN);
    const moegemm_dtype_t in = GENERATE(MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_F16);
    REQUIRE(size_cases().size() == 5);
    const SizeCase& c = size_cases()[ci];
    INFO("size case: " << c.name);
    const Workload w(geometry_for(c, layout, weights), in, c.sizes,
                     seed_of(ci, layout, weights, in));
    check_everywhere(w);
}

TEST_CASE("grouped GEMM matches the fp64 reference: E=8, N=512, K=1024",
          "[correctness][large]") {
    const moegemm_layout_t layout =
        GENERATE(MOEGEMM_LAYOUT_VARIABLE, MOEGEMM_LAYOUT_MASKED, MOEGEMM_LAYOUT_FIXED);
    const moegemm_weight_layout_t weights = GENERATE(MOEGEMM_WEIGHTS_NK, MOEGEMM_WEIGHTS_KN);
    const moegemm_dtype_t in = GENERATE(MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_F16);
    SizeCase c{"E=8 N=512 K=1024, sizes 100..300", 8, 512, 1024, {}, 37, 11, 237};
    std::mt19937 rng(2024);
    std::uniform_int_distribution<int32_t> dist(100, 300);
    for (int e = 0; e < 8; ++e) c.sizes.push_back(dist(rng));
    const Workload w(geometry_for(c, layout, weights), in, c.sizes,
                     seed_of(99, layout, weights, in));
    check_everywhere(w);
}

TEST_CASE("all-zero sizes compute nothing", "[correctness]") {
    // VARIABLE: no row is valid, so every byte of D must keep its poison. MASKED: every slab
    // row is past M_e = 0, so D's contents are unspecified; only the guards are checked.
    const moegemm_layout_t layout = GENERATE(MOEGEMM_LAYOUT_VARIABLE, MOEGEMM_LAYOUT_MASKED);
    const moegemm_dtype_t in = GENERATE(MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_F16);
    Geometry g;
    g.layout = layout;
    g.experts = 5;
    g.n = 32;
    g.k = 48;
    g.max_rows = layout == MOEGEMM_LAYOUT_VARIABLE ? 37 : 16;
    const Workload w(g, in, {0, 0, 0, 0, 0}, 77);
    check_everywhere(w);
}

TEST_CASE("VARIABLE layout with device sizes is NOT_SUPPORTED on the cuBLASLt backend",
          "[correctness]") {
    Geometry g;
    g.layout = MOEGEMM_LAYOUT_VARIABLE;
    g.experts = 3;
    g.n = 64;
    g.k = 32;
    g.max_rows = 40;
    const Workload w(g, MOEGEMM_DTYPE_BF16, {5, 0, 9}, 5);
    DeviceBuffer dev_sizes(3 * sizeof(int32_t));
    dev_sizes.upload(w.sizes().data(), 3 * sizeof(int32_t));
    const auto* dptr = static_cast<const int32_t*>(dev_sizes.get());

    for (moegemm_backend_t backend : kBackends) {
        if (!backend_enabled(backend)) continue;  // MOEGEMM_TEST_BACKENDS
        INFO("backend " << backend_name(backend));
        Plan plan(make_problem(g, MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_BF16, backend));
        const Outcome o = outcome(moegemm_plan_set_expert_sizes(plan.get(), dptr, MOEGEMM_MEMORY_DEVICE));
        INFO("set_expert_sizes(DEVICE) -> " << o.str());
        if (backend != MOEGEMM_BACKEND_CUBLASLT && o.status == MOEGEMM_STATUS_SUCCESS) {
            // AUTO found a backend that reads VARIABLE sizes on the GPU (the native one):
            // then it must compute the right thing.
            CHECK(native_serves(g.weights));
            const RunResult r = execute_plan(plan, w, MOEGEMM_DTYPE_BF16);
            INFO(r.error);
            REQUIRE(r.ok);
            const CompareReport rep = check_result(w, MOEGEMM_DTYPE_BF16, r.buffer);
            INFO(rep.summary());
            CHECK(rep.ok());
            continue;
        }
        CHECK(o.status == MOEGEMM_STATUS_NOT_SUPPORTED);
        CHECK_FALSE(o.message.empty());
        CHECK_THAT(o.message, Contains("native", Catch::CaseSensitive::No));

        // The failure left the plan without sizes...
        const size_t need = plan.workspace_size();
        DeviceBuffer ws(need + 256);
        OutputBuffer d(g.d_elems() * 2);
        const Outcome e = outcome(moegemm_execute(plan.get(), w.a(), w.b(), d.d(), nullptr,
                                                  nullptr, ws.get(), need, nullptr));
        {
            INFO("execute after the failed set -> " << e.str());
            CHECK(e.status == MOEGEMM_STATUS_INVALID_STATE);
        }
        MGT_CUDA_REQUIRE(cudaDeviceSynchronize());
        CHECK(d.unpoisoned() == 0);
        // ...and host sizes still work on it.
        MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(plan.get(), w.sizes().data(), MOEGEMM_MEMORY_HOST));
        const RunResult r = execute_plan(plan, w, MOEGEMM_DTYPE_BF16);
        INFO(r.error);
        REQUIRE(r.ok);
        const CompareReport rep = check_result(w, MOEGEMM_DTYPE_BF16, r.buffer);
        INFO(rep.summary());
        CHECK(rep.ok());
    }
}

TEST_CASE("determinism: the same plan and a second plan give bitwise identical D",
          "[correctness]") {
    // Large K and few rows invite split-K; the results must still be bitwise reproducible.
    const moegemm_layout_t layout =
        GENERATE(MOEGEMM_LAYOUT_VARIABLE, MOEGEMM_LAYOUT_MASKED, MOEGEMM_LAYOUT_FIXED);
    const moegemm_dtype_t out = GENERATE(MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_F32);
    const moegemm_backend_t backend = GENERATE(MOEGEMM_BACKEND_AUTO, MOEGEMM_BACKEND_CUBLASLT);
    if (!backend_enabled(backend)) return;  // MOEGEMM_TEST_BACKENDS
    Geometry g;
    g.layout = layout;
    g.experts = 4;
    g.n = 256;
    g.k = 2048;
    const std::vector<int32_t> sizes = {3, 100, 0, 257};
    g.max_rows = layout == MOEGEMM_LAYOUT_VARIABLE ? 360 + 5 : (layout == MOEGEMM_LAYOUT_MASKED ? 257 : 100);
    const Workload w(g, MOEGEMM_DTYPE_BF16, sizes, 31337);
    INFO("case: " << w.str() << " out=" << dtype_name(out) << " backend=" << backend_name(backend));

    Plan plan(make_problem(g, MOEGEMM_DTYPE_BF16, out, backend));
    if (layout != MOEGEMM_LAYOUT_FIXED)
        MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(plan.get(), w.sizes().data(), MOEGEMM_MEMORY_HOST));
    INFO("plan: " << plan.describe());
    const RunResult first = execute_plan(plan, w, out);
    INFO(first.error);
    REQUIRE(first.ok);
    {
        const CompareReport rep = check_result(w, out, first.buffer);
        INFO(rep.summary());
        CHECK(rep.ok());
    }

    // Another execution must reproduce `first` bit for bit on every valid row.
    auto expect_identical = [&](Plan& p, const char* what) {
        const RunResult again = execute_plan(p, w, out);
        INFO(again.error);
        REQUIRE(again.ok);
        check_identical(w, out, first.buffer, again.buffer, what);
    };
    expect_identical(plan, "same plan executed twice");

    Plan second_plan(make_problem(g, MOEGEMM_DTYPE_BF16, out, backend));
    if (layout != MOEGEMM_LAYOUT_FIXED)
        MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(second_plan.get(), w.sizes().data(), MOEGEMM_MEMORY_HOST));
    expect_identical(second_plan, "a second plan for the same problem");
}

TEST_CASE("decode: unhinted first weight copies change no bit of D, and the plan says where "
          "they are taken", "[correctness][large]") {
    if (device_cc() != 90 || !backend_enabled(MOEGEMM_BACKEND_NATIVE)) return;
    // The rule (unhinted_copies_for_stream over weight_copies_without_l2_hint, restated here
    // from the device's properties): a swap-AB launch's CTAs each issue their first
    // ceil(2 L2 / (CTAs x 16 KB)) weight copies unhinted (59 on an H200, 49 on an H100 SXM),
    // but only where that is at most a quarter of each CTA's copies. 2 experts of one column
    // tile per SM between them, so that the grid is every SM with host sizes as with device
    // sizes (expected_rows 2: one row tile per column tile), and K of 4 x or 2 x the unhinted
    // copies in k-blocks of 64: taken, not taken.
    int device = 0;
    MGT_CUDA_REQUIRE(cudaGetDevice(&device));
    cudaDeviceProp prop{};
    MGT_CUDA_REQUIRE(cudaGetDeviceProperties(&prop, device));
    const int64_t sms = prop.multiProcessorCount;
    const int64_t copy_bytes = 128 * 128;  // a 128-row weight tile's k-block
    const int64_t unhinted = (2 * int64_t{prop.l2CacheSize} + sms * copy_bytes - 1) /
                             (sms * copy_bytes);
    const bool long_stream = GENERATE(true, false);
    const SizesFrom from = GENERATE(SizesFrom::Host, SizesFrom::Device);
    const bool host = from == SizesFrom::Host;
    const int64_t k = 64 * std::max<int64_t>(1, (long_stream ? 4 : 2) * unhinted);
    const Geometry g = geometry(host ? MOEGEMM_LAYOUT_VARIABLE : MOEGEMM_LAYOUT_MASKED, 2,
                                128 * ((sms + 1) / 2), k, host ? 3 : 16);
    const Workload w(g, MOEGEMM_DTYPE_BF16, {1, 2}, 4711);
    INFO("case: " << w.str() << ", sizes from " << sizes_from_name(from) << "; " << sms
                  << " SMs, L2 " << prop.l2CacheSize << " bytes: " << unhinted
                  << " unhinted copies per CTA, " << k / 64 << " k-blocks per tile");
    RunOptions opt;
    opt.backend = MOEGEMM_BACKEND_NATIVE;
    opt.sizes_from = from;
    if (!host) opt.expected_rows = 2;  // about the mean of {1, 2}: decode
    const char* const unhinted_text = "weight copies unhinted";
    const ScopedPlanOption traced("trace_features", true);

    const RunResult by_default = run_checked(w, opt);
    INFO("plan: " << by_default.description);
    // 1-2 rows: decode, on the 64 x 128 swap-AB tiles whose 16 KB copies the rule above counts
    // (and whose 2 x ceil(SMs / 2) column tiles fill the grid).
    CHECK(by_default.description.find("kernel=sm90_grouped_64x128_swap_ab ") != std::string::npos);
    CHECK((by_default.description.find(unhinted_text) != std::string::npos) == long_stream);
    // And the producers did issue unhinted copies (the kernel's trace, not the description).
    CHECK(((by_default.status_word & moegemm::kTraceUnhintedCopy) != 0) == long_stream);

    // (Where the stream is short both runs copy evict-first throughout: the comparison below
    // then only confirms that the switch changes nothing else.)
    const ScopedPlanOption off("unhinted_weight_copies", false);
    const RunResult evict_first = run_once(w, opt);
    INFO(evict_first.error);
    REQUIRE(evict_first.ok);
    INFO("plan with unhinted_weight_copies=0: " << evict_first.description);
    CHECK(evict_first.description.find(unhinted_text) == std::string::npos);
    CHECK((evict_first.status_word & moegemm::kTraceUnhintedCopy) == 0);
    check_identical(w, MOEGEMM_DTYPE_BF16, by_default.buffer, evict_first.buffer,
                    "unhinted_weight_copies=0 against the default");
}

TEST_CASE("host sizes of up to 1024 experts reach the native kernel, also from a CUDA graph "
          "after the plan's sizes changed", "[correctness]") {
    if (device_cc() != 90 || !backend_enabled(MOEGEMM_BACKEND_NATIVE)) return;
    // A launch's parameters carry the host sizes (the schedule the host built, 3E + 1 ints, up
    // to 341 experts; the raw sizes beyond, up to MOEGEMM_MAX_EXPERTS). FIXED plans' full
    // slabs too.
    const int32_t experts = GENERATE(129, 341, 342, 1024);
    const moegemm_layout_t layout =
        GENERATE(MOEGEMM_LAYOUT_VARIABLE, MOEGEMM_LAYOUT_MASKED, MOEGEMM_LAYOUT_FIXED);
    std::vector<int32_t> sizes(static_cast<size_t>(experts));
    int64_t total = 0;
    for (int32_t e = 0; e < experts; ++e) {
        sizes[static_cast<size_t>(e)] = e % 4 == 0 ? 0 : (e * 7) % 13 + 1;  // 0..13 rows
        total += sizes[static_cast<size_t>(e)];
    }
    const int64_t max_rows = layout == MOEGEMM_LAYOUT_VARIABLE ? total + 5
                             : layout == MOEGEMM_LAYOUT_MASKED ? 16
                                                               : 3;
    const Geometry g = geometry(layout, experts, 72, 96, max_rows);
    const Workload w(g, MOEGEMM_DTYPE_BF16, sizes, 977 + experts);
    INFO("case: " << w.str());
    RunOptions opt;
    opt.backend = MOEGEMM_BACKEND_NATIVE;
    opt.sizes_from = layout == MOEGEMM_LAYOUT_FIXED ? SizesFrom::None : SizesFrom::Host;
    const RunResult eager = run_checked(w, opt);
    INFO("plan: " << eager.description);

    // Host sizes are baked into the captured launch: a replay computes the same D, bit for bit,
    // after the plan's sizes changed.
    Plan plan(make_problem(g, MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_BF16, MOEGEMM_BACKEND_NATIVE));
    if (layout != MOEGEMM_LAYOUT_FIXED)
        MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(plan.get(), sizes.data(), MOEGEMM_MEMORY_HOST));
    const size_t ws_bytes = plan.workspace_size();
    DeviceBuffer ws(ws_bytes);
    MGT_CUDA_REQUIRE(cudaMemset(ws.get(), 0xA5, ws_bytes));
    OutputBuffer d(g.d_elems() * dtype_bytes(MOEGEMM_DTYPE_BF16));
    Stream s;
    Graph graph;
    capture_execute(graph, s.get(), plan.get(), w, d.d(), ws.get(), ws_bytes);
    if (layout != MOEGEMM_LAYOUT_FIXED) {
        std::vector<int32_t> other(sizes.size(), 1);
        MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(plan.get(), other.data(), MOEGEMM_MEMORY_HOST));
    }
    for (int replay = 0; replay < 2; ++replay) {
        d.poison();
        MGT_CUDA_REQUIRE(cudaGraphLaunch(graph.exec, s.get()));
        MGT_CUDA_REQUIRE(cudaStreamSynchronize(s.get()));
        check_identical(w, MOEGEMM_DTYPE_BF16, eager.buffer, d.download(),
                        "replay " + std::to_string(replay) + " against the eager run");
    }
}

TEST_CASE("execute on a stream created by the test: asynchronous and on that stream",
          "[correctness]") {
    // The stream is held by a host function until the test opens it. execute must return
    // while the stream is held (it never synchronizes), D must still be poisoned then (the
    // work went to this stream, not to another), and after the stream is released D must
    // match the reference.
    const SizesFrom src = GENERATE(SizesFrom::Host, SizesFrom::Device);
    const moegemm_backend_t backend = GENERATE(MOEGEMM_BACKEND_AUTO, MOEGEMM_BACKEND_CUBLASLT);
    if (!backend_enabled(backend)) return;  // MOEGEMM_TEST_BACKENDS
    Geometry g;
    g.layout = src == SizesFrom::Host ? MOEGEMM_LAYOUT_VARIABLE : MOEGEMM_LAYOUT_MASKED;
    g.experts = 5;
    g.n = 128;
    g.k = 96;
    const std::vector<int32_t> sizes = {17, 0, 64, 1, 33};
    g.max_rows = src == SizesFrom::Host ? 115 + 37 : 70;
    const Workload w(g, MOEGEMM_DTYPE_BF16, sizes, 4242);
    const moegemm_dtype_t out = MOEGEMM_DTYPE_F32;
    INFO("case: " << w.str() << " sizes from " << sizes_from_name(src) << " backend "
                  << backend_name(backend));

    Gate gate;      // declared before the stream: the host function may read it until the
    Stream stream;  // stream is destroyed (its destructor synchronizes)
    Plan plan(make_problem(g, MOEGEMM_DTYPE_BF16, out, backend));
    DeviceBuffer dev_sizes(sizes.size() * sizeof(int32_t));
    dev_sizes.upload(sizes.data(), sizes.size() * sizeof(int32_t));
    if (src == SizesFrom::Host) {
        MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(plan.get(), sizes.data(), MOEGEMM_MEMORY_HOST));
    } else {
        MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(
            plan.get(), static_cast<const int32_t*>(dev_sizes.get()), MOEGEMM_MEMORY_DEVICE));
    }
    const size_t ws_bytes = plan.workspace_size();
    DeviceBuffer ws(ws_bytes);
    OutputBuffer d(g.d_elems() * dtype_bytes(out));

    // Warm-up on the stream: loads the kernels (lazy module loading may synchronize the
    // context, which would otherwise look like execute blocking) and checks the result.
    MGT_REQUIRE_OK(moegemm_execute(plan.get(), w.a(), w.b(), d.d(), nullptr, nullptr, ws.get(),
                                   ws_bytes, stream.get()));
    MGT_CUDA_REQUIRE(cudaStreamSynchronize(stream.get()));
    {
        const CompareReport rep = check_result(w, out, d.download());
        INFO("warm-up run: " << rep.summary());
        CHECK(rep.ok());
    }

    // Everything the held phase needs is allocated first: allocations of device or
    // page-locked memory may serialize streams.
    Stream other;
    void* early = nullptr;
    const size_t early_bytes = d.d_bytes() + 2 * kGuardBytes;
    MGT_CUDA_REQUIRE(cudaMallocHost(&early, early_bytes));
    struct PinnedFree {
        void* p;
        ~PinnedFree() { (void)cudaFreeHost(p); }
    } early_free{early};
    d.poison();
    struct Opener {  // opens the gate on every exit, including a failed REQUIRE
        Gate& g;
        ~Opener() { g.open = true; }
    } opener{gate};
    MGT_CUDA_REQUIRE(cudaLaunchHostFunc(stream.get(), hold_stream, &gate));
    const Outcome o = outcome(moegemm_execute(plan.get(), w.a(), w.b(), d.d(), nullptr, nullptr,
                                              ws.get(), ws_bytes, stream.get()));
    const bool blocked = gate.timed_out.load();
    {
        INFO("execute -> " << o.str());
        CHECK(o.status == MOEGEMM_STATUS_SUCCESS);
    }
    {
        INFO("execute returned only after the held stream timed out: it synchronized");
        CHECK_FALSE(blocked);
    }

    if (!blocked) {
        // Work wrongly sent to the legacy default stream would finish here (a non-blocking
        // stream does not wait for it, nor it for the held stream).
        MGT_CUDA_REQUIRE(cudaStreamSynchronize(cudaStreamLegacy));
        MGT_CUDA_REQUIRE(cudaMemcpyAsync(early, static_cast<uint8_t*>(d.d()) - kGuardBytes,
                                         early_bytes, cudaMemcpyDeviceToHost, other.get()));
        MGT_CUDA_REQUIRE(cudaStreamSynchronize(other.get()));
        const auto* bytes = static_cast<const uint8_t*>(early);
        const std::vector<uint8_t> copy(bytes, bytes + early_bytes);
        INFO("D changed while its stream was held: the work did not go (only) to that stream");
        CHECK(count_unpoisoned(copy, 0, copy.size()) == 0);
    }
    gate.open = true;
    MGT_CUDA_REQUIRE(cudaStreamSynchronize(stream.get()));
    CHECK(gate.entered.load());
    const CompareReport rep = check_result(w, out, d.download());
    INFO(rep.summary());
    CHECK(rep.ok());
}

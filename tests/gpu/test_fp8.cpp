// [fp8]: E4M3 x E4M3 inputs with each scale mode, BF16 and F32 outputs, against the fp64
// reference of the dequantized inputs, for the three layouts and ragged sizes; and the fp8
// combinations that are refused, each with its status and message. The reference is the GPU
// oracle (support/gpu_reference.hpp, itself checked against the host fp64 reference by the
// "stress oracle, E4M3" test): a host fp64 reference of these shapes takes minutes.
//
// On sm_90 the native kernels serve every scale mode (AUTO picks them); the cuBLASLt baseline
// serves PER_TENSOR (forced here with CUBLASLT, and AUTO's choice on other GPUs). The inputs
// are random E4M3 codes drawn directly (no rounding step to get wrong): sign, exponent 5..8,
// any mantissa, i.e. magnitudes 0.25 .. 3.75, never zero, never NaN; scales in [0.5, 2). Tagged [correctness] too, so that
// ctest's gpu.correctness runs them.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "plan_options.hpp"
#include "support/gpu_case.hpp"
#include "support/gpu_harness.hpp"

using namespace mgt;

namespace {

/// Elements of D the reference must compare: N values of every row the sizes give an expert.
int64_t expected_checked(const Geometry& g, const std::vector<int32_t>& sizes) {
    int64_t rows = 0;
    for (const int32_t m : sizes) rows += m;
    return rows * g.n;
}

struct Fp8Case {
    Geometry g;
    std::vector<int32_t> sizes;  // ignored for FIXED
    moegemm_scale_mode_t mode;
    SizesFrom sizes_from;
};

/// What a run leaves to look at: the plan's description and its status word (with the plan
/// option trace_features, the kTrace* bits of what the kernel did).
struct Fp8Run {
    std::string description;
    uint32_t status_word = 0;
};

/// Runs one case on `backend` and compares D with the reference; `out` is BF16 or F32.
Fp8Run check_fp8_case(const Fp8Case& c, moegemm_dtype_t out, moegemm_backend_t backend,
                    uint32_t seed, const std::string& force_kernel = {}) {
    const Geometry& g = c.g;
    std::vector<int32_t> sizes = c.sizes;
    if (g.layout == MOEGEMM_LAYOUT_FIXED)
        sizes.assign(static_cast<size_t>(g.experts), static_cast<int32_t>(g.max_rows));
    INFO(g.str() << " sizes=" << sizes_str(sizes) << " mode=" << c.mode
                 << " out=" << dtype_name(out) << " backend=" << backend_name(backend)
                 << " kernel=" << (force_kernel.empty() ? "(heuristic)" : force_kernel));

    // Codes and scales generated on the GPU (gpuref::fill_random): host generation of the
    // larger cases would cost more than the runs. Scales as the header lays them out
    // (moegemm_scale_mode_t).
    const auto [a_count, b_count] = scale_counts(g, c.mode);
    DeviceBuffer a(g.a_elems() + kInputSlack), b(g.b_elems() + kInputSlack);
    DeviceBuffer a_scale_dev(a_count * sizeof(float)), b_scale_dev(b_count * sizeof(float));
    a.fill(0);
    b.fill(0);
    const uint64_t base = static_cast<uint64_t>(seed) << 2;
    MGT_CUDA_REQUIRE(gpuref::fill_random(a.get(), g.a_elems(), MOEGEMM_DTYPE_E4M3, base, nullptr));
    MGT_CUDA_REQUIRE(gpuref::fill_random(b.get(), g.b_elems(), MOEGEMM_DTYPE_E4M3, base + 1, nullptr));
    MGT_CUDA_REQUIRE(gpuref::fill_random(a_scale_dev.get(), a_count, MOEGEMM_DTYPE_F32, base + 2, nullptr));
    MGT_CUDA_REQUIRE(gpuref::fill_random(b_scale_dev.get(), b_count, MOEGEMM_DTYPE_F32, base + 3, nullptr));

    moegemm_problem_t problem = make_problem(g, MOEGEMM_DTYPE_E4M3, out, backend);
    problem.scale_mode = c.mode;
    if (!force_kernel.empty()) problem.force_kernel = force_kernel.c_str();
    Plan plan(problem);
    DeviceBuffer sizes_dev(sizes.size() * sizeof(int32_t));
    if (g.layout != MOEGEMM_LAYOUT_FIXED) {
        sizes_dev.upload(sizes.data(), sizes.size() * sizeof(int32_t));
        const bool device = c.sizes_from == SizesFrom::Device;
        MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(
            plan.get(), device ? static_cast<const int32_t*>(sizes_dev.get()) : sizes.data(),
            device ? MOEGEMM_MEMORY_DEVICE : MOEGEMM_MEMORY_HOST));
    }
    const std::string description = plan.describe();
    INFO(description);
    const size_t ws_bytes = plan.workspace_size();
    DeviceBuffer ws(ws_bytes);
    OutputBuffer d(g.d_elems() * dtype_bytes(out));
    MGT_REQUIRE_OK(moegemm_execute(plan.get(), a.get(), b.get(), d.d(),
                                   static_cast<const float*>(a_scale_dev.get()),
                                   static_cast<const float*>(b_scale_dev.get()), ws.get(),
                                   ws_bytes, nullptr));
    // D against the dequantized inputs' product, rows past the sum and both guards still poison.
    DeviceChecker checker;
    checker.begin(nullptr);
    checker.output(g, MOEGEMM_DTYPE_E4M3, out, a.get(), b.get(), d.d(), sizes, nullptr, c.mode,
                   static_cast<const float*>(a_scale_dev.get()),
                   static_cast<const float*>(b_scale_dev.get()));
    const auto* d_bytes = static_cast<const uint8_t*>(d.d());
    checker.bytes("guard before D", d_bytes - kGuardBytes, kGuardBytes, kPoisonByte, nullptr);
    checker.bytes("guard after D", d_bytes + d.d_bytes(), kGuardBytes, kPoisonByte, nullptr);
    const CheckReport report = checker.finish(nullptr);
    INFO(report.summary());
    CHECK(report.ok());
    CHECK(report.checked == expected_checked(g, sizes));
    Fp8Run run{description, 0};
    uint32_t* word = nullptr;
    MGT_REQUIRE_OK(moegemm_plan_get_status_word(plan.get(), &word));
    MGT_CUDA_REQUIRE(cudaMemcpy(&run.status_word, word, sizeof run.status_word,
                                cudaMemcpyDeviceToHost));
    return run;
}

/// Runs case `c` on the native backend with the heuristic's pick, then with every native variant
/// forced by name that serves it; `each(kernel, run)` sees each forced run.
template <typename Each>
void check_every_native_kernel(const Fp8Case& c, moegemm_dtype_t out, uint32_t& seed, Each each) {
    check_fp8_case(c, out, MOEGEMM_BACKEND_NATIVE, ++seed);
    for (const std::string& kernel : native_kernel_names()) {
        if (!forced_kernel_serves(kernel, c.g, out, MOEGEMM_DTYPE_E4M3, c.mode)) continue;
        each(kernel, check_fp8_case(c, out, MOEGEMM_BACKEND_NATIVE, ++seed, kernel));
    }
}
void check_every_native_kernel(const Fp8Case& c, moegemm_dtype_t out, uint32_t& seed) {
    check_every_native_kernel(c, out, seed, [](const std::string&, const Fp8Run&) {});
}

bool fp8_capable() {
    if (device_cc() >= 89) return true;
    WARN("E4M3 matmuls need compute capability 8.9 or newer: fp8 cases skipped");
    return false;
}

}  // namespace

TEST_CASE("fp8: E4M3 with per-tensor scales matches the fp64 reference (both backends)",
          "[fp8][correctness]") {
    if (!fp8_capable() || !backend_enabled(MOEGEMM_BACKEND_CUBLASLT)) return;
    constexpr auto V = MOEGEMM_LAYOUT_VARIABLE;
    constexpr auto M = MOEGEMM_LAYOUT_MASKED;
    constexpr auto F = MOEGEMM_LAYOUT_FIXED;
    const Fp8Case cases[] = {
        // Ragged, an empty expert, rows past the sum (VARIABLE), K not a multiple of 64.
        {geometry(V, 5, 272, 336, 420), {37, 0, 129, 1, 200}, MOEGEMM_SCALE_PER_TENSOR, SizesFrom::Host},
        {geometry(V, 3, 1024, 2048, 700), {300, 250, 64}, MOEGEMM_SCALE_PER_TENSOR, SizesFrom::Host},
        {geometry(M, 4, 144, 208, 96), {96, 0, 17, 64}, MOEGEMM_SCALE_PER_TENSOR, SizesFrom::Host},
        {geometry(M, 4, 144, 208, 96), {96, 0, 17, 64}, MOEGEMM_SCALE_PER_TENSOR, SizesFrom::Device},
        {geometry(F, 3, 128, 512, 40), {}, MOEGEMM_SCALE_PER_TENSOR, SizesFrom::None},
    };
    uint32_t seed = 8000;
    for (const Fp8Case& c : cases) {
        for (moegemm_dtype_t out : {MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_F32}) {
            for (moegemm_backend_t backend : {MOEGEMM_BACKEND_AUTO, MOEGEMM_BACKEND_CUBLASLT})
                check_fp8_case(c, out, backend, ++seed);
        }
    }
}

TEST_CASE("fp8: what is not implemented or not valid is refused with its reason",
          "[fp8][api]") {
    if (!fp8_capable()) return;
    const Geometry g = geometry(MOEGEMM_LAYOUT_VARIABLE, 4, 128, 256, 64);
    struct Refused {
        const char* what;
        moegemm_scale_mode_t mode;
        moegemm_weight_layout_t weights;
        moegemm_backend_t backend;
        const char* word;
    };
    const Refused refused[] = {
        {"per-expert scales on cuBLASLt", MOEGEMM_SCALE_PER_EXPERT, MOEGEMM_WEIGHTS_NK, MOEGEMM_BACKEND_CUBLASLT, "PER_EXPERT"},
        {"rowwise scales on cuBLASLt", MOEGEMM_SCALE_ROWWISE, MOEGEMM_WEIGHTS_NK, MOEGEMM_BACKEND_CUBLASLT, "ROWWISE"},
        {"block scales on cuBLASLt", MOEGEMM_SCALE_BLOCK, MOEGEMM_WEIGHTS_NK, MOEGEMM_BACKEND_CUBLASLT, "BLOCK"},
        {"[E, K, N] weights", MOEGEMM_SCALE_PER_TENSOR, MOEGEMM_WEIGHTS_KN, MOEGEMM_BACKEND_AUTO, "[E, N, K]"},
    };
    for (const Refused& r : refused) {
        INFO(r.what);
        moegemm_problem_t problem =
            make_problem(g, MOEGEMM_DTYPE_E4M3, MOEGEMM_DTYPE_BF16, r.backend);
        problem.scale_mode = r.mode;
        problem.weight_layout = r.weights;
        Plan plan;
        const Outcome o = plan.try_create(problem);
        CHECK(o.status == MOEGEMM_STATUS_NOT_SUPPORTED);
        CHECK_THAT(o.message, Catch::Contains(r.word));
    }

    // A live fp8 plan: missing scales are INVALID_VALUE, nothing is written.
    moegemm_problem_t problem = make_problem(g, MOEGEMM_DTYPE_E4M3, MOEGEMM_DTYPE_BF16);
    problem.scale_mode = MOEGEMM_SCALE_PER_TENSOR;
    Plan plan(problem);
    const std::vector<int32_t> sizes = {10, 0, 30, 24};
    MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(plan.get(), sizes.data(), MOEGEMM_MEMORY_HOST));
    DeviceBuffer a(g.a_elems()), b(g.b_elems()), scale(sizeof(float));
    const size_t ws_bytes = plan.workspace_size();
    DeviceBuffer ws(ws_bytes);
    OutputBuffer d(g.d_elems() * 2);
    const Outcome o = outcome(moegemm_execute(plan.get(), a.get(), b.get(), d.d(), nullptr,
                                              static_cast<const float*>(scale.get()), ws.get(),
                                              ws_bytes, nullptr));
    CHECK(o.status == MOEGEMM_STATUS_INVALID_VALUE);
    CHECK_THAT(o.message, Catch::Contains("a_scale is NULL"));
    MGT_CUDA_REQUIRE(cudaDeviceSynchronize());
    CHECK(d.unpoisoned() == 0);
}

TEST_CASE("fp8: the native kernels match the fp64 reference in every scale mode",
          "[fp8][correctness]") {
    if (!fp8_capable() || device_cc() != 90 || !backend_enabled(MOEGEMM_BACKEND_NATIVE)) return;
    constexpr auto V = MOEGEMM_LAYOUT_VARIABLE;
    constexpr auto M = MOEGEMM_LAYOUT_MASKED;
    constexpr auto F = MOEGEMM_LAYOUT_FIXED;
    uint32_t seed = 9000;
    for (moegemm_scale_mode_t mode : {MOEGEMM_SCALE_PER_TENSOR, MOEGEMM_SCALE_PER_EXPERT,
                                      MOEGEMM_SCALE_ROWWISE, MOEGEMM_SCALE_BLOCK}) {
        // N and K not multiples of 128 (partial column and K blocks), an empty expert, rows
        // past the sum, a tile with a handful of rows.
        const Fp8Case cases[] = {
            {geometry(V, 5, 272, 336, 420), {37, 0, 129, 1, 200}, mode, SizesFrom::Host},
            {geometry(V, 3, 384, 1024, 700), {300, 250, 64}, mode, SizesFrom::Device},
            {geometry(M, 4, 144, 208, 96), {96, 0, 17, 64}, mode, SizesFrom::Device},
            {geometry(F, 3, 128, 512, 40), {}, mode, SizesFrom::None},
        };
        // The heuristic's pick, and every native variant forced by name where it serves the case.
        for (const Fp8Case& c : cases)
            for (moegemm_dtype_t out : {MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_F32})
                check_every_native_kernel(c, out, seed);
    }
    // Several waves of tiles, most of them handed out by tile ticket (BLOCK scales go round
    // robin): 64 experts of 0-32 rows, N = 1024, so that 64-row tiles and 128-row ones both
    // have more tile groups than the grid has slots.
    std::vector<int32_t> decode_sizes;
    for (int e = 0; e < 64; ++e) decode_sizes.push_back(e % 9 == 4 ? 0 : (e * 7) % 33);
    // And a few groups, fewer than SMs, with host and with device sizes.
    const std::vector<int32_t> few_sizes = {1, 16, 0, 7, 3, 12, 5, 9};
    // With host sizes the schedule built on the host (the default) and by the kernel
    // (host_schedule off; 128 x 256 instances always build it: their prologue is serial).
    for (const bool host_schedule : {true, false}) {
        for (moegemm_scale_mode_t mode : {MOEGEMM_SCALE_PER_TENSOR, MOEGEMM_SCALE_ROWWISE}) {
            INFO("host_schedule=" << host_schedule);
            const ScopedPlanOption schedule_setting("host_schedule", host_schedule);
            const Fp8Case cases[] = {
                {geometry(V, 64, 1024, 256, 64 * 32), decode_sizes, mode, SizesFrom::Host},
                {geometry(V, 8, 768, 336, 8 * 32), few_sizes, mode, SizesFrom::Host},
                {geometry(M, 8, 768, 336, 32), few_sizes, mode, SizesFrom::Device},
            };
            for (const Fp8Case& c : cases) check_every_native_kernel(c, MOEGEMM_DTYPE_BF16, seed);
        }
    }
}

TEST_CASE("fp8: BLOCK scales staged in shared memory and read from global memory agree with the "
          "reference", "[fp8][correctness]") {
    if (!fp8_capable() || device_cc() != 90 || !backend_enabled(MOEGEMM_BACKEND_NATIVE)) return;
    constexpr auto V = MOEGEMM_LAYOUT_VARIABLE;
    constexpr auto M = MOEGEMM_LAYOUT_MASKED;
    // 40 experts (the ring fits beside 4 stages of 128 x 256 tiles up to 56) of 0-160 rows,
    // N = 1024: more tiles than CTAs, so that a CTA's ring runs on from one tile (expert, column
    // tile) into the next; K = 640: five k-blocks, more than the stages of 128 x 256 tiles. 64
    // experts: past those 56 on 128 x 256 TMA-store tiles (3 stages and the ring there), 4
    // stages and the ring on 128 x 256 register-epilogue tiles. 64-row tiles never use it.
    std::vector<int32_t> forty;
    for (int e = 0; e < 40; ++e) forty.push_back(e % 11 == 3 ? 0 : (e * 37 + 5) % 161);
    std::vector<int32_t> sixty_four;
    for (int e = 0; e < 64; ++e)
        sixty_four.push_back(e % 9 == 4 ? 0 : (e * 7) % 33 + 100 * (e % 3));
    const std::vector<int32_t> few_sizes = {1, 16, 0, 7, 3, 12, 5, 9};
    const Fp8Case cases[] = {
        {geometry(V, 40, 1024, 640, 40 * 160), forty, MOEGEMM_SCALE_BLOCK, SizesFrom::Host},
        {geometry(V, 64, 768, 384, 64 * 300), sixty_four, MOEGEMM_SCALE_BLOCK, SizesFrom::Device},
        {geometry(M, 8, 768, 336, 32), few_sizes, MOEGEMM_SCALE_BLOCK, SizesFrom::Device},
    };
    const char* const staged = "BLOCK scales staged in shared memory";
    const ScopedPlanOption traced("trace_features", true);
    uint32_t seed = 9500;
    for (const bool ring : {true, false}) {
        INFO("block_scale_ring=" << ring);
        const ScopedPlanOption ring_setting("block_scale_ring", ring);
        const ScopedPlanOption tickets_setting("tile_tickets", true);  // the default
        for (const Fp8Case& c : cases) {
            check_every_native_kernel(c, MOEGEMM_DTYPE_BF16, seed, [&](const std::string& kernel,
                                                                   const Fp8Run& run) {
                const std::string& description = run.description;
                // Where the ring is used (TileConfig::block_scale_ring_stages, pinned by the
                // CPU tests "BLOCK scale ring"): never with the switch off, never on 64-row
                // tiles, on every 128-row tile at these expert counts (with one stage fewer
                // where it does not fit beside all of them: 128 x 256 TMA-store from 60
                // experts, 128 x 128 below 154 or 69).
                const bool fits = kernel.rfind("sm90_grouped_128", 0) == 0;
                const bool expected = ring && fits;
                INFO(kernel << ": " << description);
                CHECK((description.find(staged) != std::string::npos) == expected);
                // Plans with the ring take tiles by ticket (the producer hands each group to
                // the scale warps); BLOCK plans without it, round robin.
                CHECK((description.find("tile tickets") != std::string::npos) == expected);
                // And the consumers did read the staged scales.
                CHECK(((run.status_word & moegemm::kTraceScaleRing) != 0) == expected);
            });
        }
    }
}

TEST_CASE("fp8: halves of 128-row tiles without rows skip their MMAs where the plan says so, and "
          "agree with the reference", "[fp8][correctness]") {
    if (!fp8_capable() || device_cc() != 90 || !backend_enabled(MOEGEMM_BACKEND_NATIVE)) return;
    constexpr auto V = MOEGEMM_LAYOUT_VARIABLE;
    constexpr auto M = MOEGEMM_LAYOUT_MASKED;
    // 24 experts of 0-99 rows: most row tiles have an upper half without rows (35% of the MMA
    // work, idle_half_share). 8 experts of which one ends with a tile of 2 rows: 3.1%, below
    // the 6% from which round-robin plans (BLOCK scales read from global memory) skip. MASKED
    // with device sizes: the host cannot count, so round-robin plans do not skip, ticket plans
    // do.
    std::vector<int32_t> small;
    for (int e = 0; e < 24; ++e) small.push_back(e % 7 == 2 ? 0 : (e * 29 + 3) % 100);
    const std::vector<int32_t> few_idle = {256, 200, 384, 130, 0, 128, 250, 512};
    const std::vector<int32_t> masked = {96, 0, 17, 64, 130, 5};
    struct Case {
        Geometry g;
        const std::vector<int32_t>& sizes;
        SizesFrom from;
        bool round_robin_skips;  // idle_half_share >= 6% with host sizes
    };
    const Case cases[] = {
        {geometry(V, 24, 640, 512, 24 * 100), small, SizesFrom::Host, true},
        {geometry(V, 8, 512, 384, 2000), few_idle, SizesFrom::Host, false},
        {geometry(M, 6, 384, 256, 160), masked, SizesFrom::Device, false},
    };
    const char* const skipping = "halves without rows skip their MMAs";
    const ScopedPlanOption traced("trace_features", true);
    uint32_t seed = 9700;
    for (const bool setting : {true, false}) {
        INFO("skip_idle_halves=" << setting);
        const ScopedPlanOption skip_setting("skip_idle_halves", setting);
        // BLOCK twice: with the scale ring (tickets) and without it (round robin, scales read
        // from global memory), the only plans where the 6% threshold decides.
        struct Mode {
            moegemm_scale_mode_t scale_mode;
            bool block_scale_ring;
        };
        for (const Mode mode : {Mode{MOEGEMM_SCALE_PER_TENSOR, true}, Mode{MOEGEMM_SCALE_BLOCK, true},
                                Mode{MOEGEMM_SCALE_BLOCK, false}}) {
            INFO("block_scale_ring=" << mode.block_scale_ring);
            const ScopedPlanOption ring_setting("block_scale_ring", mode.block_scale_ring);
            for (const Case& c : cases) {
                const Fp8Case fp8_case{c.g, c.sizes, mode.scale_mode, c.from};
                check_every_native_kernel(fp8_case, MOEGEMM_DTYPE_BF16, seed,
                                          [&](const std::string& kernel, const Fp8Run& run) {
                    const std::string& description = run.description;
                    // 128-row tiles only; with tile tickets always (BLOCK with the scale
                    // ring too), round robin only from 6% of the work (skips_idle_halves,
                    // pinned by the CPU test "idle halves").
                    const bool tall = kernel.rfind("sm90_grouped_128", 0) == 0;
                    const bool tickets = description.find("tile tickets") != std::string::npos;
                    const bool expected =
                        setting && tall && (tickets || c.round_robin_skips);
                    INFO(kernel << ": " << description);
                    // The ring-off pass must reach round robin, or the threshold goes untested.
                    if (mode.scale_mode == MOEGEMM_SCALE_BLOCK && !mode.block_scale_ring)
                        CHECK_FALSE(tickets);
                    CHECK((description.find(skipping) != std::string::npos) == expected);
                    // Every case has a tile with an idle half: where the plan skips, one did.
                    CHECK(((run.status_word & moegemm::kTraceIdleHalfSkipped) != 0) == expected);
                });
            }
        }
    }
}

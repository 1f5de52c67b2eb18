// [fp8]: E4M3 x E4M3 inputs with per-tensor scales, BF16 and F32 outputs,
// against the fp64 reference of the dequantized inputs, for the three layouts and ragged
// sizes; and the fp8 combinations that are refused, each with its status and message.
//
// Today the cuBLASLt baseline serves fp8 with per-tensor scales for every layout; the native
// fp8 kernels are not written yet, so AUTO picks cuBLASLt and NATIVE, PER_EXPERT, ROWWISE
// and BLOCK are NOT_SUPPORTED. The inputs are random E4M3
// codes drawn directly (no rounding step to get wrong): sign, exponent 5..8, any mantissa,
// i.e. magnitudes 0.25 .. 3.75, never zero, never NaN. Tagged [correctness] too, so that
// ctest's gpu.correctness runs them.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "support/gpu_harness.hpp"

using namespace mgt;

namespace {

/// The value of an E4M3 (fn) code: bias 7, subnormals below exponent 1, no infinities.
double from_e4m3(uint8_t code) {
    const int sign = code >> 7;
    const int exponent = (code >> 3) & 0xF;
    const int mantissa = code & 0x7;
    const double magnitude = exponent == 0 ? std::ldexp(mantissa, -9)
                                           : std::ldexp(8 + mantissa, exponent - 10);
    return sign ? -magnitude : magnitude;
}

/// Random codes with exponent 5..8 (|x| in [0.25, 3.75]); `values` gets their values.
std::vector<uint8_t> random_e4m3(size_t count, std::mt19937& rng, std::vector<double>* values) {
    std::uniform_int_distribution<int> sign(0, 1), exponent(5, 8), mantissa(0, 7);
    std::vector<uint8_t> codes(count);
    values->resize(count);
    for (size_t i = 0; i < count; ++i) {
        codes[i] = static_cast<uint8_t>(sign(rng) << 7 | exponent(rng) << 3 | mantissa(rng));
        (*values)[i] = from_e4m3(codes[i]);
    }
    return codes;
}

struct Fp8Case {
    Geometry g;
    std::vector<int32_t> sizes;  // ignored for FIXED
    moegemm_scale_mode_t mode;
    SizesFrom sizes_from;
};

/// Runs one case on `backend` and compares D with the reference; `out` is BF16 or F32.
void check_fp8_case(const Fp8Case& c, moegemm_dtype_t out, moegemm_backend_t backend,
                    uint32_t seed) {
    const Geometry& g = c.g;
    std::vector<int32_t> sizes = c.sizes;
    if (g.layout == MOEGEMM_LAYOUT_FIXED)
        sizes.assign(static_cast<size_t>(g.experts), static_cast<int32_t>(g.max_rows));
    INFO(g.str() << " sizes=" << sizes_str(sizes) << " mode=" << c.mode
                 << " out=" << dtype_name(out) << " backend=" << backend_name(backend));

    std::mt19937 rng(seed);
    std::vector<double> a_values, b_values;
    const std::vector<uint8_t> a_codes = random_e4m3(g.a_elems(), rng, &a_values);
    const std::vector<uint8_t> b_codes = random_e4m3(g.b_elems(), rng, &b_values);
    std::uniform_real_distribution<float> scale(0.5f, 2.0f);
    const float a_scale = scale(rng);
    std::vector<float> b_scales(c.mode == MOEGEMM_SCALE_PER_EXPERT ? g.experts : 1);
    for (float& s : b_scales) s = scale(rng);

    // The reference of the dequantized inputs: A * a_scale, B_e * b_scale(e).
    for (double& v : a_values) v *= a_scale;
    const size_t per_expert = static_cast<size_t>(g.n * g.k);
    for (size_t i = 0; i < b_values.size(); ++i)
        b_values[i] *= b_scales[b_scales.size() == 1 ? 0 : i / per_expert];
    const Reference ref(g, a_values, b_values, valid_rows(g, sizes));

    DeviceBuffer a(a_codes.size() + kInputSlack), b(b_codes.size() + kInputSlack);
    a.upload(a_codes.data(), a_codes.size());
    b.upload(b_codes.data(), b_codes.size());
    DeviceBuffer a_scale_dev(sizeof(float)), b_scale_dev(b_scales.size() * sizeof(float));
    a_scale_dev.upload(&a_scale, sizeof a_scale);
    b_scale_dev.upload(b_scales.data(), b_scales.size() * sizeof(float));

    moegemm_problem_t problem = make_problem(g, MOEGEMM_DTYPE_E4M3, out, backend);
    problem.scale_mode = c.mode;
    Plan plan(problem);
    DeviceBuffer sizes_dev(sizes.size() * sizeof(int32_t));
    if (g.layout != MOEGEMM_LAYOUT_FIXED) {
        sizes_dev.upload(sizes.data(), sizes.size() * sizeof(int32_t));
        const bool device = c.sizes_from == SizesFrom::Device;
        MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(
            plan.get(), device ? static_cast<const int32_t*>(sizes_dev.get()) : sizes.data(),
            device ? MOEGEMM_MEMORY_DEVICE : MOEGEMM_MEMORY_HOST));
    }
    INFO(plan.describe());
    const size_t ws_bytes = plan.workspace_size();
    DeviceBuffer ws(ws_bytes);
    OutputBuffer d(g.d_elems() * dtype_bytes(out));
    MGT_REQUIRE_OK(moegemm_execute(plan.get(), a.get(), b.get(), d.d(),
                                   static_cast<const float*>(a_scale_dev.get()),
                                   static_cast<const float*>(b_scale_dev.get()), ws.get(),
                                   ws_bytes, nullptr));
    MGT_CUDA_REQUIRE(cudaDeviceSynchronize());
    const CompareReport report =
        compare_output(g, out, sizes, ref, d.download(), kGuardBytes, MOEGEMM_DTYPE_E4M3);
    INFO(report.summary());
    CHECK(report.ok());
    CHECK(report.checked > 0);
}

bool fp8_capable() {
    if (device_cc() >= 89) return true;
    WARN("E4M3 matmuls need compute capability 8.9 or newer: fp8 cases skipped");
    return false;
}

}  // namespace

TEST_CASE("fp8: E4M3 with per-tensor scales matches the fp64 reference",
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
        {"per-expert scales", MOEGEMM_SCALE_PER_EXPERT, MOEGEMM_WEIGHTS_NK, MOEGEMM_BACKEND_AUTO, "PER_EXPERT"},
        {"rowwise scales", MOEGEMM_SCALE_ROWWISE, MOEGEMM_WEIGHTS_NK, MOEGEMM_BACKEND_AUTO, "ROWWISE"},
        {"block scales", MOEGEMM_SCALE_BLOCK, MOEGEMM_WEIGHTS_NK, MOEGEMM_BACKEND_AUTO, "BLOCK"},
        {"[E, K, N] weights", MOEGEMM_SCALE_PER_TENSOR, MOEGEMM_WEIGHTS_KN, MOEGEMM_BACKEND_AUTO, "[E, N, K]"},
        {"native kernels", MOEGEMM_SCALE_PER_TENSOR, MOEGEMM_WEIGHTS_NK, MOEGEMM_BACKEND_NATIVE, "E4M3"},
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

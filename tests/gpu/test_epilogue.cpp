// [epilogue]: the grouped GEMM's fused operations (alpha, row scale, bias, plain and gated
// activations) and gathered A rows, against a host reference that applies the header's
// formula in fp64 to the fp64 product, on every native kernel that serves the problem
// (forced one by one), ragged sizes with empty experts, N and K off the tile sizes, host and
// device sizes. Outputs are poisoned (NaN) first, guards around D must stay poisoned.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "support/gpu_harness.hpp"

using namespace mgt;

namespace {

double silu(double x) { return x / (1.0 + std::exp(-x)); }
double gelu_tanh(double x) {
    return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

struct EpilogueCase {
    moegemm_activation_t activation = MOEGEMM_ACTIVATION_NONE;
    moegemm_gate_layout_t gate_layout = MOEGEMM_GATE_UP_HALVES;
    uint32_t inputs = 0;
    moegemm_dtype_t bias_type = MOEGEMM_DTYPE_BF16;
    moegemm_dtype_t out = MOEGEMM_DTYPE_BF16;
    bool gather = false;
    std::string str() const {
        return fmt_case();
    }
    std::string fmt_case() const {
        std::string s = "activation " + std::to_string(static_cast<int>(activation)) +
                        " gate_layout " + std::to_string(static_cast<int>(gate_layout)) +
                        " inputs " + std::to_string(inputs) + " bias " + dtype_name(bias_type) +
                        " out " + dtype_name(out) + (gather ? " gathered" : "");
        return s;
    }
};

bool gated(moegemm_activation_t a) {
    return a == MOEGEMM_ACTIVATION_SWIGLU || a == MOEGEMM_ACTIVATION_GEGLU ||
           a == MOEGEMM_ACTIVATION_SWIGLU_CLAMPED;
}

constexpr double kClampAlpha = 1.702, kClampLimit = 7.0;

double activate_gated(moegemm_activation_t a, double g, double u) {
    switch (a) {
        case MOEGEMM_ACTIVATION_GEGLU: return gelu_tanh(g) * u;
        case MOEGEMM_ACTIVATION_SWIGLU_CLAMPED: {
            const double gc = std::min(g, kClampLimit);
            const double uc = std::min(std::max(u, -kClampLimit), kClampLimit);
            return (uc + 1.0) * gc / (1.0 + std::exp(-kClampAlpha * gc));
        }
        default: return silu(g) * u;
    }
}

/// One problem with its inputs on host and device and the expected D.
struct Fixture {
    EpilogueCase ec;
    int32_t experts;
    int64_t n, k, max_rows, tokens;  // tokens: rows of the gathered token matrix
    std::vector<int32_t> sizes;
    std::vector<float> a, b, alpha, row_scale, bias;  // values as the device sees them
    std::vector<int32_t> a_rows;                      // gather index per grouped row
    DeviceBuffer a_dev, b_dev, alpha_dev, row_scale_dev, bias_dev, a_rows_dev, sizes_dev;

    int64_t out_cols() const { return gated(ec.activation) ? n / 2 : n; }

    Fixture(const EpilogueCase& c, int32_t e, int64_t n_, int64_t k_, std::vector<int32_t> s,
            uint32_t seed)
        : ec(c), experts(e), n(n_), k(k_), sizes(std::move(s)) {
        max_rows = std::max<int64_t>(1, std::accumulate(sizes.begin(), sizes.end(), int64_t{0}) + 5);
        tokens = ec.gather ? max_rows / 2 + 3 : max_rows;
        std::mt19937 rng(seed);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f), pos(0.5f, 1.5f);
        auto bf16 = [&](float x) { return float_from_bf16(bf16_from_float(x)); };
        a.resize(static_cast<size_t>(tokens * k));
        b.resize(static_cast<size_t>(int64_t{experts} * n * k));
        for (auto& x : a) x = bf16(u(rng));
        for (auto& x : b) x = bf16(u(rng) * 0.5f);
        alpha.resize(static_cast<size_t>(experts));
        for (auto& x : alpha) x = pos(rng);
        row_scale.resize(static_cast<size_t>(max_rows));
        for (auto& x : row_scale) x = pos(rng);
        bias.resize(static_cast<size_t>(int64_t{experts} * n));
        for (auto& x : bias) {
            x = u(rng);
            if (ec.bias_type == MOEGEMM_DTYPE_BF16) x = bf16(x);
            if (ec.bias_type == MOEGEMM_DTYPE_F16) x = float_from_f16(f16_from_float(x));
        }
        std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(tokens - 1));
        a_rows.resize(static_cast<size_t>(max_rows));
        for (auto& r : a_rows) r = pick(rng);  // repeats on purpose

        std::vector<uint16_t> a16(a.size()), b16(b.size());
        for (size_t i = 0; i < a.size(); ++i) a16[i] = bf16_from_float(a[i]);
        for (size_t i = 0; i < b.size(); ++i) b16[i] = bf16_from_float(b[i]);
        a_dev = DeviceBuffer(a16.size() * 2 + kInputSlack);
        a_dev.upload(a16.data(), a16.size() * 2);
        b_dev = DeviceBuffer(b16.size() * 2 + kInputSlack);
        b_dev.upload(b16.data(), b16.size() * 2);
        alpha_dev = DeviceBuffer(alpha.size() * 4);
        alpha_dev.upload(alpha.data(), alpha.size() * 4);
        row_scale_dev = DeviceBuffer(row_scale.size() * 4);
        row_scale_dev.upload(row_scale.data(), row_scale.size() * 4);
        const size_t bias_elem = dtype_bytes(ec.bias_type);
        std::vector<uint8_t> bias_bits(bias.size() * bias_elem);
        for (size_t i = 0; i < bias.size(); ++i) {
            if (ec.bias_type == MOEGEMM_DTYPE_F32) {
                std::memcpy(&bias_bits[i * 4], &bias[i], 4);
            } else {
                const uint16_t h = ec.bias_type == MOEGEMM_DTYPE_BF16 ? bf16_from_float(bias[i])
                                                                      : f16_from_float(bias[i]);
                std::memcpy(&bias_bits[i * 2], &h, 2);
            }
        }
        bias_dev = DeviceBuffer(bias_bits.size());
        bias_dev.upload(bias_bits.data(), bias_bits.size());
        a_rows_dev = DeviceBuffer(a_rows.size() * 4);
        a_rows_dev.upload(a_rows.data(), a_rows.size() * 4);
        sizes_dev = DeviceBuffer(sizes.size() * 4);
        sizes_dev.upload(sizes.data(), sizes.size() * 4);
    }

    moegemm_problem_t problem(const char* kernel) const {
        Geometry g;
        g.experts = experts;
        g.n = n;
        g.k = k;
        g.max_rows = max_rows;
        moegemm_problem_t p = make_problem(g, MOEGEMM_DTYPE_BF16, ec.out, MOEGEMM_BACKEND_NATIVE);
        p.force_kernel = kernel;
        p.epilogue_inputs = ec.inputs;
        p.bias_type = ec.bias_type;
        p.activation = ec.activation;
        p.gate_layout = ec.gate_layout;
        if (ec.activation == MOEGEMM_ACTIVATION_SWIGLU_CLAMPED) {
            p.activation_alpha = static_cast<float>(kClampAlpha);
            p.activation_limit = static_cast<float>(kClampLimit);
        }
        p.gather_rows = ec.gather ? tokens : 0;
        return p;
    }

    moegemm_tensors_t tensors(void* d) const {
        moegemm_tensors_t t;
        REQUIRE(moegemm_tensors_init(&t) == MOEGEMM_STATUS_SUCCESS);
        t.a = a_dev.get();
        t.b = b_dev.get();
        t.d = d;
        if (ec.inputs & MOEGEMM_EPILOGUE_ALPHA) t.alpha = static_cast<const float*>(alpha_dev.get());
        if (ec.inputs & MOEGEMM_EPILOGUE_ROW_SCALE)
            t.row_scale = static_cast<const float*>(row_scale_dev.get());
        if (ec.inputs & MOEGEMM_EPILOGUE_BIAS) t.bias = bias_dev.get();
        if (ec.gather) t.a_rows = static_cast<const int32_t*>(a_rows_dev.get());
        return t;
    }

    /// The product column of B (and bias) for output column c of kind g (0 gate, 1 up).
    int64_t gated_column(int64_t c, int g) const {
        const int64_t half = n / 2;
        switch (ec.gate_layout) {
            case MOEGEMM_UP_GATE_HALVES: return g == 0 ? half + c : c;
            case MOEGEMM_GATE_UP_INTERLEAVED: return 2 * c + g;
            default: return g == 0 ? c : half + c;
        }
    }

    /// x = acc * alpha * row_scale + bias for row `r` (grouped) of expert e, product column j.
    double pre_activation(int64_t r, int32_t e, int64_t j) const {
        const int64_t src = ec.gather ? a_rows[static_cast<size_t>(r)] : r;
        double acc = 0;
        for (int64_t q = 0; q < k; ++q)
            acc += double{a[static_cast<size_t>(src * k + q)]} *
                   double{b[static_cast<size_t>((int64_t{e} * n + j) * k + q)]};
        if (ec.inputs & MOEGEMM_EPILOGUE_ALPHA) acc *= alpha[static_cast<size_t>(e)];
        if (ec.inputs & MOEGEMM_EPILOGUE_ROW_SCALE) acc *= row_scale[static_cast<size_t>(r)];
        if (ec.inputs & MOEGEMM_EPILOGUE_BIAS) acc += bias[static_cast<size_t>(int64_t{e} * n + j)];
        return acc;
    }

    double expected(int64_t r, int32_t e, int64_t c, double* scale) const {
        if (gated(ec.activation)) {
            const double g = pre_activation(r, e, gated_column(c, 0));
            const double u = pre_activation(r, e, gated_column(c, 1));
            *scale = (1.0 + std::fabs(g)) * (1.0 + std::fabs(u));
            return activate_gated(ec.activation, g, u);
        }
        const double x = pre_activation(r, e, c);
        *scale = 1.0 + std::fabs(x);
        switch (ec.activation) {
            case MOEGEMM_ACTIVATION_SILU: return silu(x);
            case MOEGEMM_ACTIVATION_GELU_TANH: return gelu_tanh(x);
            default: return x;
        }
    }

    /// Runs the plan and checks every valid element and the guards; returns the elements
    /// checked.
    int64_t run_and_check(const char* kernel, bool device_sizes, cudaStream_t stream) {
        Plan plan;
        const Outcome created = plan.try_create(problem(kernel));
        if (created.status == MOEGEMM_STATUS_NOT_SUPPORTED) return -1;
        INFO(created.str());
        REQUIRE(created.status == MOEGEMM_STATUS_SUCCESS);
        if (device_sizes)
            MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(
                plan.get(), static_cast<const int32_t*>(sizes_dev.get()), MOEGEMM_MEMORY_DEVICE));
        else
            MGT_REQUIRE_OK(
                moegemm_plan_set_expert_sizes(plan.get(), sizes.data(), MOEGEMM_MEMORY_HOST));
        INFO(plan.describe());
        const size_t out_elem = dtype_bytes(ec.out);
        const size_t d_bytes = static_cast<size_t>(max_rows * out_cols()) * out_elem;
        OutputBuffer d(d_bytes);
        d.poison();
        DeviceBuffer ws(std::max<size_t>(plan.workspace_size(), 256));
        const moegemm_tensors_t t = tensors(d.d());
        MGT_REQUIRE_OK(moegemm_execute_tensors(plan.get(), &t, ws.get(), ws.size(), stream));
        MGT_CUDA_REQUIRE(cudaStreamSynchronize(stream));
        const std::vector<uint8_t> got = d.download();
        const uint8_t* base = got.data() + kGuardBytes;
        for (size_t i = 0; i < kGuardBytes; ++i) {
            REQUIRE(got[i] == 0xFF);
            REQUIRE(got[kGuardBytes + d_bytes + i] == 0xFF);
        }
        fill_expected();
        int64_t checked = 0, row = 0;
        const double rtol = ec.out == MOEGEMM_DTYPE_F32 ? 2e-3 : 1.2e-2;
        for (int32_t e = 0; e < experts; ++e) {
            for (int32_t m = 0; m < sizes[static_cast<size_t>(e)]; ++m, ++row) {
                for (int64_t c = 0; c < out_cols(); ++c) {
                    const size_t at = static_cast<size_t>(row * out_cols() + c);
                    const double want = want_[at], scale = scale_[at];
                    const double have =
                        decode_element(ec.out, base, static_cast<size_t>(row * out_cols() + c));
                    const double tol = rtol * std::fabs(want) + 2e-3 * scale;
                    if (!(std::fabs(have - want) <= tol)) {
                        FAIL_CHECK("row " << row << " (expert " << e << ") column " << c
                                          << ": got " << have << ", expected " << want
                                          << " (tolerance " << tol << ")");
                        return checked;
                    }
                    ++checked;
                }
            }
        }
        // VARIABLE: rows past the sum stay poisoned.
        for (size_t i = static_cast<size_t>(row * out_cols()) * out_elem; i < d_bytes; ++i)
            REQUIRE(base[i] == 0xFF);
        return checked;
    }

private:
    /// The expected value and its error scale of every valid element, computed once: every
    /// kernel of a case is checked against the same fp64 values.
    void fill_expected() {
        if (!want_.empty()) return;
        const int64_t rows = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
        want_.resize(static_cast<size_t>(rows * out_cols()));
        scale_.resize(want_.size());
        int64_t row = 0;
        for (int32_t e = 0; e < experts; ++e)
            for (int32_t m = 0; m < sizes[static_cast<size_t>(e)]; ++m, ++row)
                for (int64_t c = 0; c < out_cols(); ++c) {
                    const size_t at = static_cast<size_t>(row * out_cols() + c);
                    want_[at] = expected(row, e, c, &scale_[at]);
                }
    }
    std::vector<double> want_, scale_;
};

std::vector<std::string> native_kernels() {
    std::vector<std::string> names;
    for (int i = 0; i < moegemm_kernel_count(); ++i) {
        const std::string name = moegemm_kernel_name(i);
        if (name.rfind("sm90_", 0) == 0) names.push_back(name);
    }
    return names;
}

const std::vector<int32_t> kRagged = {70, 0, 3, 129, 0, 64, 1};

}  // namespace

TEST_CASE("fused epilogue options on every native kernel", "[epilogue][gpu]") {
    Stream stream;
    const std::vector<EpilogueCase> cases = {
        {MOEGEMM_ACTIVATION_NONE, MOEGEMM_GATE_UP_HALVES,
         MOEGEMM_EPILOGUE_ALPHA | MOEGEMM_EPILOGUE_ROW_SCALE | MOEGEMM_EPILOGUE_BIAS,
         MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_BF16, false},
        {MOEGEMM_ACTIVATION_SILU, MOEGEMM_GATE_UP_HALVES, MOEGEMM_EPILOGUE_BIAS,
         MOEGEMM_DTYPE_F32, MOEGEMM_DTYPE_F32, false},
        {MOEGEMM_ACTIVATION_GELU_TANH, MOEGEMM_GATE_UP_HALVES, MOEGEMM_EPILOGUE_ALPHA,
         MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_F16, false},
        {MOEGEMM_ACTIVATION_SWIGLU, MOEGEMM_GATE_UP_HALVES, 0, MOEGEMM_DTYPE_BF16,
         MOEGEMM_DTYPE_BF16, false},
        {MOEGEMM_ACTIVATION_SWIGLU, MOEGEMM_UP_GATE_HALVES, MOEGEMM_EPILOGUE_BIAS,
         MOEGEMM_DTYPE_F16, MOEGEMM_DTYPE_BF16, true},
        {MOEGEMM_ACTIVATION_GEGLU, MOEGEMM_GATE_UP_HALVES, MOEGEMM_EPILOGUE_ROW_SCALE,
         MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_F32, false},
        {MOEGEMM_ACTIVATION_SWIGLU_CLAMPED, MOEGEMM_GATE_UP_INTERLEAVED,
         MOEGEMM_EPILOGUE_BIAS | MOEGEMM_EPILOGUE_ALPHA, MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_BF16,
         true},
        {MOEGEMM_ACTIVATION_NONE, MOEGEMM_GATE_UP_HALVES, 0, MOEGEMM_DTYPE_BF16,
         MOEGEMM_DTYPE_BF16, true},
    };
    const EpilogueCase ec = GENERATE_COPY(from_range(cases));
    // N: 400 is neither a multiple of 128 nor 256 (a partial column tile; gated: 200 outputs).
    Fixture fx(ec, static_cast<int32_t>(kRagged.size()), 400, 200, kRagged, 7u);
    int served = 0;
    for (const std::string& kernel : native_kernels()) {
        for (const bool device_sizes : {false, true}) {
            INFO(ec.str() << ", kernel " << kernel << (device_sizes ? ", device sizes" : ""));
            const int64_t checked = fx.run_and_check(kernel.c_str(), device_sizes, stream.get());
            if (checked < 0) continue;
            CHECK(checked == std::accumulate(kRagged.begin(), kRagged.end(), int64_t{0}) *
                                 fx.out_cols());
            ++served;
        }
    }
    // Every native kernel takes the 16-bit epilogues (but TMA stores no F32), twice; clusters
    // refuse a gather.
    CHECK(served >= (ec.gather ? 12 : 20));
}

TEST_CASE("gathered A: out-of-range indices read zeros and are flagged", "[epilogue][gpu]") {
    Stream stream;
    EpilogueCase ec;
    ec.gather = true;
    Fixture fx(ec, 2, 64, 64, {5, 3}, 11u);
    fx.a_rows[1] = -1;
    fx.a_rows[6] = static_cast<int32_t>(fx.tokens);  // one past the matrix
    fx.a_rows_dev.upload(fx.a_rows.data(), fx.a_rows.size() * 4);
    Plan plan(fx.problem(nullptr));
    MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(plan.get(), fx.sizes.data(), MOEGEMM_MEMORY_HOST));
    uint32_t* word = nullptr;
    MGT_REQUIRE_OK(moegemm_plan_get_status_word(plan.get(), &word));
    OutputBuffer d(static_cast<size_t>(fx.max_rows * fx.n) * 2);
    d.poison();
    DeviceBuffer ws(std::max<size_t>(plan.workspace_size(), 256));
    const moegemm_tensors_t t = fx.tensors(d.d());
    MGT_REQUIRE_OK(moegemm_execute_tensors(plan.get(), &t, ws.get(), ws.size(), stream.get()));
    MGT_CUDA_REQUIRE(cudaStreamSynchronize(stream.get()));
    uint32_t flags = 0;
    MGT_CUDA_REQUIRE(cudaMemcpy(&flags, word, 4, cudaMemcpyDeviceToHost));
    CHECK((flags & MOEGEMM_ROWS_CLAMPED_INDEX) != 0);
    const std::vector<uint8_t> got = d.download();
    for (const int64_t row : {int64_t{1}, int64_t{6}}) {
        for (int64_t c = 0; c < fx.n; ++c)
            CHECK(decode_element(MOEGEMM_DTYPE_BF16, got.data() + kGuardBytes,
                                 static_cast<size_t>(row * fx.n + c)) == 0.0);
    }
}

TEST_CASE("epilogue options: bad combinations are refused with their reason", "[epilogue][api]") {
    EpilogueCase ec;
    ec.inputs = MOEGEMM_EPILOGUE_ALPHA;
    Fixture fx(ec, 2, 64, 64, {5, 3}, 3u);
    Plan plan(fx.problem(nullptr));
    MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(plan.get(), fx.sizes.data(), MOEGEMM_MEMORY_HOST));
    OutputBuffer d(static_cast<size_t>(fx.max_rows * fx.n) * 2);
    d.poison();
    DeviceBuffer ws(std::max<size_t>(plan.workspace_size(), 256));
    moegemm_tensors_t t = fx.tensors(d.d());
    SECTION("a missing alpha") {
        t.alpha = nullptr;
        CHECK(moegemm_execute_tensors(plan.get(), &t, ws.get(), ws.size(), nullptr) ==
              MOEGEMM_STATUS_INVALID_VALUE);
        CHECK(std::string(moegemm_get_last_error_message()).find("alpha") != std::string::npos);
    }
    SECTION("a bias the plan does not take") {
        t.bias = fx.bias_dev.get();
        CHECK(moegemm_execute_tensors(plan.get(), &t, ws.get(), ws.size(), nullptr) ==
              MOEGEMM_STATUS_INVALID_VALUE);
    }
    SECTION("the plain execute of a plan with epilogue inputs") {
        CHECK(moegemm_execute(plan.get(), t.a, t.b, t.d, nullptr, nullptr, ws.get(), ws.size(),
                              nullptr) == MOEGEMM_STATUS_INVALID_VALUE);
    }
    CHECK(d.unpoisoned() == 0);

    moegemm_problem_t p = fx.problem(nullptr);
    moegemm_plan_t refused = nullptr;
    SECTION("gated activation with N / 2 not 16-byte strided") {
        p.activation = MOEGEMM_ACTIVATION_SWIGLU;
        p.n = 72;
        CHECK(moegemm_plan_create(&p, &refused) == MOEGEMM_STATUS_MISALIGNED);
    }
    SECTION("cuBLASLt has no row scale") {
        p.epilogue_inputs = MOEGEMM_EPILOGUE_ROW_SCALE;
        p.backend = MOEGEMM_BACKEND_CUBLASLT;
        CHECK(moegemm_plan_create(&p, &refused) == MOEGEMM_STATUS_NOT_SUPPORTED);
    }
    SECTION("gated activation with [E, K, N] weights") {
        p.activation = MOEGEMM_ACTIVATION_SWIGLU;
        p.weight_layout = MOEGEMM_WEIGHTS_KN;
        CHECK(moegemm_plan_create(&p, &refused) == MOEGEMM_STATUS_NOT_SUPPORTED);
    }
    CHECK(refused == nullptr);
}

// [cublaslt_epilogue]: the epilogue options of the cuBLASLt baseline (backend CUBLASLT): the
// per-expert alpha, a bias of each type (with the output type it comes with), GELU (tanh)
// and their combinations, on VARIABLE with host sizes, MASKED with host and device sizes and
// FIXED, [E, N, K] and [E, K, N] weights, against a host reference that applies the header's
// formula in fp64 to the fp64 product. Outputs are poisoned (NaN) first; the guards around D
// and VARIABLE rows past the sizes must stay poisoned. A second execute of the same plan with
// other alpha and bias arrays must use them (cuBLASLt's descriptor holds the bias pointer).
// And the refusals: what cuBLASLt has no epilogue for is NOT_SUPPORTED, the message naming it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "support/gpu_harness.hpp"

using namespace mgt;

namespace {

double gelu_tanh(double x) {
    return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

/// A value as the device sees it in type t (BF16, F16 or F32).
float quantize(moegemm_dtype_t t, float x) {
    if (t == MOEGEMM_DTYPE_BF16) return float_from_bf16(bf16_from_float(x));
    if (t == MOEGEMM_DTYPE_F16) return float_from_f16(f16_from_float(x));
    return x;
}

/// `values` encoded as type t (BF16, F16 or F32).
std::vector<uint8_t> encode(moegemm_dtype_t t, const std::vector<float>& values) {
    std::vector<uint8_t> bits(values.size() * dtype_bytes(t));
    for (size_t i = 0; i < values.size(); ++i) {
        if (t == MOEGEMM_DTYPE_F32) {
            std::memcpy(&bits[i * 4], &values[i], 4);
        } else {
            const uint16_t h = t == MOEGEMM_DTYPE_BF16 ? bf16_from_float(values[i])
                                                       : f16_from_float(values[i]);
            std::memcpy(&bits[i * 2], &h, 2);
        }
    }
    return bits;
}

DeviceBuffer upload(const std::vector<uint8_t>& bits) {
    DeviceBuffer buf(bits.size() + kInputSlack);
    buf.upload(bits.data(), bits.size());
    return buf;
}

struct LtCase {
    moegemm_layout_t layout = MOEGEMM_LAYOUT_VARIABLE;
    moegemm_dtype_t in = MOEGEMM_DTYPE_BF16;
    moegemm_dtype_t out = MOEGEMM_DTYPE_BF16;  // and the bias type: cuBLASLt adds D's type
    uint32_t inputs = 0;
    moegemm_activation_t activation = MOEGEMM_ACTIVATION_NONE;
    moegemm_weight_layout_t weights = MOEGEMM_WEIGHTS_NK;
    bool device_sizes = false;  // MASKED: sizes in device memory (whole slabs computed)

    std::string str() const {
        return std::string(layout_name(layout)) + " " + dtype_name(in) + " -> " +
               dtype_name(out) + " " + weights_name(weights) +
               ((inputs & MOEGEMM_EPILOGUE_ALPHA) ? " alpha" : "") +
               ((inputs & MOEGEMM_EPILOGUE_BIAS) ? " bias" : "") +
               (activation == MOEGEMM_ACTIVATION_GELU_TANH ? " GELU" : "") +
               (device_sizes ? " device sizes" : "");
    }
};

/// One problem with its inputs on host and device and the expected D.
struct Fixture {
    LtCase lc;
    Geometry g;
    std::vector<int32_t> sizes;
    std::vector<float> a, b_nk, alpha, bias;  // values as the device sees them; B as [E, N, K]
    DeviceBuffer a_dev, b_dev, alpha_dev, bias_dev, sizes_dev;

    Fixture(const LtCase& c, std::vector<int32_t> s, int64_t n, int64_t k, uint32_t seed)
        : lc(c), sizes(std::move(s)) {
        const int64_t sum = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
        const int64_t largest = *std::max_element(sizes.begin(), sizes.end());
        const int64_t max_rows = c.layout == MOEGEMM_LAYOUT_VARIABLE ? sum + 5 : largest + 1;
        g = geometry(c.layout, static_cast<int32_t>(sizes.size()), n, k, max_rows, c.weights);
        std::mt19937 rng(seed);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        a.resize(g.a_elems());
        for (auto& x : a) x = quantize(c.in, u(rng));
        b_nk.resize(g.b_elems());
        for (auto& x : b_nk) x = quantize(c.in, u(rng) * 0.5f);
        a_dev = upload(encode(c.in, a));
        b_dev = upload(encode(c.in, weights_as_stored()));
        sizes_dev = upload(encode_sizes());
        reroll_epilogue(seed + 1);
    }

    /// New alpha and bias values in new device buffers (so at other addresses).
    void reroll_epilogue(uint32_t seed) {
        std::mt19937 rng(seed);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f), pos(0.5f, 1.5f);
        alpha.resize(static_cast<size_t>(g.experts));
        for (auto& x : alpha) x = pos(rng);
        bias.resize(static_cast<size_t>(int64_t{g.experts} * g.n));
        for (auto& x : bias) x = quantize(lc.out, u(rng));
        alpha_dev = upload(encode(MOEGEMM_DTYPE_F32, alpha));
        bias_dev = upload(encode(lc.out, bias));
    }

    std::vector<float> weights_as_stored() const {
        if (g.weights == MOEGEMM_WEIGHTS_NK) return b_nk;
        std::vector<float> kn(b_nk.size());
        for (int64_t e = 0; e < g.experts; ++e)
            for (int64_t j = 0; j < g.n; ++j)
                for (int64_t q = 0; q < g.k; ++q)
                    kn[static_cast<size_t>((e * g.k + q) * g.n + j)] =
                        b_nk[static_cast<size_t>((e * g.n + j) * g.k + q)];
        return kn;
    }

    std::vector<uint8_t> encode_sizes() const {
        std::vector<uint8_t> bits(sizes.size() * 4);
        std::memcpy(bits.data(), sizes.data(), bits.size());
        return bits;
    }

    moegemm_problem_t problem() const {
        moegemm_problem_t p = make_problem(g, lc.in, lc.out, MOEGEMM_BACKEND_CUBLASLT);
        p.epilogue_inputs = lc.inputs;
        p.bias_type = lc.out;
        p.activation = lc.activation;
        return p;
    }

    void set_sizes(const Plan& plan) const {
        if (g.layout == MOEGEMM_LAYOUT_FIXED) return;
        if (lc.device_sizes)
            MGT_REQUIRE_OK(moegemm_plan_set_expert_sizes(
                plan.get(), static_cast<const int32_t*>(sizes_dev.get()), MOEGEMM_MEMORY_DEVICE));
        else
            MGT_REQUIRE_OK(
                moegemm_plan_set_expert_sizes(plan.get(), sizes.data(), MOEGEMM_MEMORY_HOST));
    }

    moegemm_tensors_t tensors(void* d) const {
        moegemm_tensors_t t;
        REQUIRE(moegemm_tensors_init(&t) == MOEGEMM_STATUS_SUCCESS);
        t.a = a_dev.get();
        t.b = b_dev.get();
        t.d = d;
        if (lc.inputs & MOEGEMM_EPILOGUE_ALPHA) t.alpha = static_cast<const float*>(alpha_dev.get());
        if (lc.inputs & MOEGEMM_EPILOGUE_BIAS) t.bias = bias_dev.get();
        return t;
    }

    /// act(acc * alpha[e] + bias[e, n]) for row `r` of A and D, owned by expert e; `scale`
    /// gets the size of the terms, for the tolerance.
    double expected(int64_t r, int32_t e, int64_t n, double* scale) const {
        double x = 0;
        for (int64_t q = 0; q < g.k; ++q)
            x += double{a[static_cast<size_t>(r * g.k + q)]} *
                 double{b_nk[static_cast<size_t>((int64_t{e} * g.n + n) * g.k + q)]};
        if (lc.inputs & MOEGEMM_EPILOGUE_ALPHA) x *= alpha[static_cast<size_t>(e)];
        if (lc.inputs & MOEGEMM_EPILOGUE_BIAS) x += bias[static_cast<size_t>(int64_t{e} * g.n + n)];
        *scale = 1.0 + std::fabs(x);
        return lc.activation == MOEGEMM_ACTIVATION_GELU_TANH ? gelu_tanh(x) : x;
    }

    /// Executes the plan into a poisoned D and checks every valid element, the guards and
    /// the rows that must stay untouched; returns the elements checked.
    int64_t execute_and_check(const Plan& plan, cudaStream_t stream) const {
        const size_t d_bytes = g.d_elems() * dtype_bytes(lc.out);
        OutputBuffer d(d_bytes);
        d.poison();
        DeviceBuffer ws(std::max<size_t>(plan.workspace_size(), 256));
        const moegemm_tensors_t t = tensors(d.d());
        MGT_REQUIRE_OK(moegemm_execute_tensors(plan.get(), &t, ws.get(), ws.size(), stream));
        MGT_CUDA_REQUIRE(cudaStreamSynchronize(stream));
        const std::vector<uint8_t> got = d.download();
        for (size_t i = 0; i < kGuardBytes; ++i) {
            REQUIRE(got[i] == kPoisonByte);
            REQUIRE(got[kGuardBytes + d_bytes + i] == kPoisonByte);
        }
        const uint8_t* base = got.data() + kGuardBytes;
        const RowSet rows = valid_rows(g, sizes);
        const double rtol = lc.out == MOEGEMM_DTYPE_F32 ? 2e-3 : 1.2e-2;
        int64_t checked = 0;
        for (size_t i = 0; i < rows.size(); ++i) {
            for (int64_t n = 0; n < g.n; ++n) {
                double scale = 0;
                const double want = expected(rows.row[i], rows.expert[i], n, &scale);
                const double have =
                    decode_element(lc.out, base, static_cast<size_t>(rows.row[i] * g.n + n));
                const double tol = rtol * std::fabs(want) + 2e-3 * scale;
                if (!(std::fabs(have - want) <= tol)) {
                    FAIL_CHECK("row " << rows.row[i] << " (expert " << rows.expert[i]
                                      << ") column " << n << ": got " << have << ", expected "
                                      << want << " (tolerance " << tol << ")");
                    return checked;
                }
                ++checked;
            }
        }
        const auto untouched = untouched_rows(g, sizes);
        const size_t row_bytes = static_cast<size_t>(g.n) * dtype_bytes(lc.out);
        for (size_t i = static_cast<size_t>(untouched.first) * row_bytes;
             i < static_cast<size_t>(untouched.second) * row_bytes; ++i)
            REQUIRE(base[i] == kPoisonByte);
        return checked;
    }
};

// Ragged, with empty experts: the expert loop skips them, and the experts it runs point at
// alpha + e for e = 2, 3, 5, 6 (4-byte aligned only) and at bias rows 16-byte aligned only
// (N = 400: 800 bytes per 16-bit row).
const std::vector<int32_t> kRagged = {70, 0, 3, 129, 0, 64, 1};

constexpr uint32_t kAlpha = MOEGEMM_EPILOGUE_ALPHA;
constexpr uint32_t kBias = MOEGEMM_EPILOGUE_BIAS;
constexpr auto kGelu = MOEGEMM_ACTIVATION_GELU_TANH;
constexpr auto kNone = MOEGEMM_ACTIVATION_NONE;
constexpr auto kNK = MOEGEMM_WEIGHTS_NK;
constexpr auto kKN = MOEGEMM_WEIGHTS_KN;
constexpr auto kVariable = MOEGEMM_LAYOUT_VARIABLE;
constexpr auto kMasked = MOEGEMM_LAYOUT_MASKED;
constexpr auto kFixed = MOEGEMM_LAYOUT_FIXED;
constexpr auto BF16 = MOEGEMM_DTYPE_BF16;
constexpr auto F16 = MOEGEMM_DTYPE_F16;
constexpr auto F32 = MOEGEMM_DTYPE_F32;

/// A 16-bit VARIABLE problem on backend CUBLASLT whose creation the tests below alter.
moegemm_problem_t small_problem() {
    moegemm_problem_t p;
    REQUIRE(moegemm_problem_init(&p) == MOEGEMM_STATUS_SUCCESS);
    p.layout = MOEGEMM_LAYOUT_VARIABLE;
    p.num_experts = 2;
    p.n = 64;
    p.k = 64;
    p.max_rows = 16;
    p.backend = MOEGEMM_BACKEND_CUBLASLT;
    return p;
}

}  // namespace

TEST_CASE("cuBLASLt epilogues: alpha, bias, GELU", "[cublaslt_epilogue][gpu]") {
    if (!backend_enabled(MOEGEMM_BACKEND_CUBLASLT)) return;  // MOEGEMM_TEST_BACKENDS
    Stream stream;
    const std::vector<LtCase> cases = {
        // VARIABLE, host sizes: one matmul per expert.
        {kVariable, BF16, BF16, kAlpha, kNone, kNK, false},
        {kVariable, BF16, BF16, kBias, kNone, kNK, false},
        {kVariable, F16, F16, kBias, kNone, kNK, false},
        {kVariable, BF16, F32, kBias, kNone, kNK, false},
        {kVariable, F16, F16, 0, kGelu, kNK, false},
        {kVariable, BF16, BF16, kAlpha | kBias, kGelu, kNK, false},
        {kVariable, F16, F32, kAlpha | kBias, kGelu, kKN, false},
        {kVariable, BF16, BF16, kBias, kGelu, kKN, false},
        // MASKED and FIXED: strided-batched without alpha (the bias strided by expert), one
        // matmul per expert with it.
        {kMasked, BF16, BF16, kBias, kGelu, kNK, false},
        {kMasked, F16, F16, kAlpha, kNone, kNK, false},
        {kMasked, BF16, F32, kAlpha | kBias, kGelu, kKN, true},
        {kMasked, F16, F32, kBias, kNone, kNK, true},
        {kMasked, F16, F16, 0, kGelu, kKN, true},
        {kFixed, BF16, BF16, kAlpha | kBias, kNone, kNK, false},
        {kFixed, F16, F16, kBias, kGelu, kNK, false},
    };
    const LtCase lc = GENERATE_COPY(from_range(cases));
    INFO(lc.str());
    // N = 400, K = 200: off every power-of-two tile.
    Fixture fx(lc, kRagged, 400, 200, 17u);
    Plan plan(fx.problem());
    fx.set_sizes(plan);
    const std::string text = plan.describe();
    INFO("description: " << text);
    CHECK(text.find("backend=cublaslt") != std::string::npos);
    const int64_t checked = fx.execute_and_check(plan, stream.get());
    const RowSet rows = valid_rows(fx.g, fx.sizes);
    CHECK(checked == static_cast<int64_t>(rows.size()) * fx.g.n);

    // The same plan with other alpha and bias arrays: each call's pointers are used.
    if (lc.inputs != 0) {
        fx.reroll_epilogue(99u);
        CHECK(fx.execute_and_check(plan, stream.get()) == checked);
    }
}

TEST_CASE("cuBLASLt refuses what it has no epilogue for, naming it",
          "[cublaslt_epilogue][gpu]") {
    if (!backend_enabled(MOEGEMM_BACKEND_CUBLASLT)) return;  // MOEGEMM_TEST_BACKENDS
    struct Refusal {
        const char* what;
        moegemm_activation_t activation;
        uint32_t inputs;
        int64_t gather_rows;
        const char* reason;  // in the message
    };
    const Refusal refusals[] = {
        {"SiLU", MOEGEMM_ACTIVATION_SILU, 0, 0, "no SiLU epilogue"},
        {"SwiGLU", MOEGEMM_ACTIVATION_SWIGLU, 0, 0, "no gated epilogue"},
        {"GeGLU", MOEGEMM_ACTIVATION_GEGLU, 0, 0, "no gated epilogue"},
        {"clamped SwiGLU", MOEGEMM_ACTIVATION_SWIGLU_CLAMPED, 0, 0, "no gated epilogue"},
        {"row scale", MOEGEMM_ACTIVATION_NONE, MOEGEMM_EPILOGUE_ROW_SCALE, 0, "row scale"},
        {"row scale with alpha and bias", MOEGEMM_ACTIVATION_NONE,
         MOEGEMM_EPILOGUE_ROW_SCALE | MOEGEMM_EPILOGUE_ALPHA | MOEGEMM_EPILOGUE_BIAS, 0,
         "row scale"},
        {"gathered A rows", MOEGEMM_ACTIVATION_NONE, 0, 32, "gather"},
    };
    for (const moegemm_layout_t layout : {kVariable, kMasked, kFixed}) {
        for (const Refusal& r : refusals) {
            INFO(r.what << ", " << layout_name(layout));
            moegemm_problem_t p = small_problem();
            p.layout = layout;
            p.activation = r.activation;
            if (r.activation == MOEGEMM_ACTIVATION_SWIGLU_CLAMPED) {
                p.activation_alpha = 1.702f;
                p.activation_limit = 7.0f;
            }
            p.epilogue_inputs = r.inputs;
            p.gather_rows = r.gather_rows;
            Plan plan;
            const Outcome o = plan.try_create(p);
            INFO(o.str());
            CHECK(o.status == MOEGEMM_STATUS_NOT_SUPPORTED);
            CHECK(o.message.find(r.reason) != std::string::npos);
            CHECK(plan.get() == nullptr);
        }
    }
}

TEST_CASE("cuBLASLt refuses a bias of another type than the output",
          "[cublaslt_epilogue][gpu]") {
    if (!backend_enabled(MOEGEMM_BACKEND_CUBLASLT)) return;  // MOEGEMM_TEST_BACKENDS
    struct Types {
        moegemm_dtype_t in, out, bias;
    };
    const Types mismatches[] = {
        {BF16, BF16, F32}, {BF16, BF16, F16}, {F16, F16, BF16}, {BF16, F32, BF16}, {F16, F32, F16},
    };
    const std::vector<int32_t> sizes = {5, 3};
    for (const moegemm_layout_t layout : {kVariable, kMasked, kFixed}) {
        for (const Types& t : mismatches) {
            INFO(layout_name(layout) << " " << dtype_name(t.in) << " -> " << dtype_name(t.out)
                                     << ", bias " << dtype_name(t.bias));
            moegemm_problem_t p = small_problem();
            p.layout = layout;
            p.a_type = p.b_type = t.in;
            p.d_type = t.out;
            p.epilogue_inputs = MOEGEMM_EPILOGUE_BIAS;
            p.bias_type = t.bias;
            // The refusal comes when the kernel is made: at plan creation (FIXED, or once the
            // heuristic sees the bias type), else when the sizes are set.
            Plan plan;
            Outcome o = plan.try_create(p);
            if (o.status == MOEGEMM_STATUS_SUCCESS && layout != kFixed)
                o = outcome(moegemm_plan_set_expert_sizes(plan.get(), sizes.data(),
                                                          MOEGEMM_MEMORY_HOST));
            INFO(o.str());
            CHECK(o.status == MOEGEMM_STATUS_NOT_SUPPORTED);
            CHECK(o.message.find("bias") != std::string::npos);
        }
    }
}

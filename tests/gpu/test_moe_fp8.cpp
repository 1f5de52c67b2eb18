// [moe_layer] with E4M3 weights and 128 x 128 block scales (weight_scales BLOCK): against a host
// reference that quantizes x and FC1's activated output as the header defines (groups of
// 1 x 128, scale = amax / 448, codes rounded to nearest even and saturated; the codes found by
// searching the format's values, not by the library's quantizer), multiplies in fp64, and
// rounds FC1's and FC2's products to BF16 where the library stores them. Partial scale groups
// (H and I not multiples of 128), hostile ids, a rank's expert range, a device token count;
// bitwise reproducibility; what an fp8 layer refuses.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "support/e4m3.hpp"
#include "support/gpu_harness.hpp"
#include "support/layer_check.hpp"

using namespace mgt;

namespace {

struct Fp8LayerCase : LayerShape {
    bool ids64, hostile, device_count;
};

float bf16r(double x) { return float_from_bf16(bf16_from_float(static_cast<float>(x))); }

/// The E4M3 value nearest to y (ties to the even code), saturated at 448.
double e4m3_round(float y) {
    const double target = std::fmin(std::fabs(static_cast<double>(y)), 448.0);
    double best = 0.0, best_error = INFINITY;
    for (int code = 0; code < 0x7F; ++code) {
        const double v = e4m3_value(static_cast<uint8_t>(code));
        const double error = std::fabs(v - target);
        if (error < best_error || (error == best_error && (code & 1) == 0)) {
            best = v;
            best_error = error;
        }
    }
    return y < 0.0f ? -best : best;
}

/// The values a row quantized per 1 x 128 group represents: code value times group scale.
std::vector<double> quantized(const std::vector<float>& row) {
    std::vector<double> out(row.size());
    for (size_t g = 0; g < row.size(); g += 128) {
        const size_t end = std::min(row.size(), g + 128);
        float amax = 0.0f;
        for (size_t i = g; i < end; ++i) amax = std::fmax(amax, std::fabs(row[i]));
        const float scale = amax / 448.0f;
        for (size_t i = g; i < end; ++i)
            out[i] = scale > 0.0f ? e4m3_round(row[i] / scale) * scale : 0.0;
    }
    return out;
}

double silu(double x) { return x / (1.0 + std::exp(-x)); }

class Fp8Layer {
public:
    Fp8Layer(const Fp8LayerCase& c, uint32_t seed) : c_(c), rng_(seed) {
        n1_ = gated() ? 2 * c.intermediate : c.intermediate;
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        x_.resize(static_cast<size_t>(c.tokens * c.hidden));
        for (float& v : x_) v = bf16r(u(rng_));
        w1_ = random_codes(static_cast<size_t>(c.local * n1_ * c.hidden));
        w2_ = random_codes(static_cast<size_t>(c.local * c.hidden * c.intermediate));
        w1_scale_ = random_scales(static_cast<size_t>(c.local * blocks(n1_) * blocks(c.hidden)));
        w2_scale_ =
            random_scales(static_cast<size_t>(c.local * blocks(c.hidden) * blocks(c.intermediate)));
        std::vector<uint16_t> x_bits(x_.size());
        for (size_t i = 0; i < x_.size(); ++i) x_bits[i] = bf16_from_float(x_[i]);
        x_dev_ = upload(x_bits.data(), x_bits.size() * 2);
        w1_dev_ = upload(w1_.data(), w1_.size());
        w2_dev_ = upload(w2_.data(), w2_.size());
        w1_scale_dev_ = upload(w1_scale_.data(), w1_scale_.size() * 4);
        w2_scale_dev_ = upload(w2_scale_.data(), w2_scale_.size() * 4);

        std::uniform_int_distribution<int32_t> expert(0, c.experts - 1);
        std::uniform_real_distribution<float> weight(0.1f, 1.0f);
        ids_.resize(static_cast<size_t>(c.tokens * c.top_k));
        weights_.resize(ids_.size());
        for (size_t i = 0; i < ids_.size(); ++i) {
            ids_[i] = expert(rng_);
            weights_[i] = weight(rng_);
        }
        if (c.tokens > 2 && c.top_k > 1) ids_[1] = ids_[0];
        if (c.hostile && ids_.size() > 3) {
            ids_[2] = -1;
            ids_[3] = c.experts + 7;
        }
        if (c.ids64) {
            const std::vector<int64_t> wide(ids_.begin(), ids_.end());
            ids_dev_ = upload(wide.data(), wide.size() * 8);
        } else {
            ids_dev_ = upload(ids_.data(), ids_.size() * 4);
        }
        weights_dev_ = upload(weights_.data(), weights_.size() * 4);
        count_dev_ = upload(&c.tokens, 4);  // little-endian: the low half of the int64
    }

    bool gated() const { return mgt::gated(c_); }

    moegemm_moe_problem_t problem() const {
        moegemm_moe_problem_t p = layer_problem(c_, c_.tokens);
        p.id_type = c_.ids64 ? MOEGEMM_INDEX_INT64 : MOEGEMM_INDEX_INT32;
        p.weight_scales = MOEGEMM_SCALE_BLOCK;
        return p;
    }

    moegemm_moe_tensors_t tensors(void* out) const {
        moegemm_moe_tensors_t t = layer_tensors(x_dev_.get(), ids_dev_.get(), weights_dev_.get(),
                                                w1_dev_.get(), w2_dev_.get(), out);
        t.w1_scale = static_cast<const float*>(w1_scale_dev_.get());
        t.w2_scale = static_cast<const float*>(w2_scale_dev_.get());
        t.num_tokens = c_.tokens;
        if (c_.device_count) t.num_tokens_device = static_cast<const int32_t*>(count_dev_.get());
        return t;
    }

    /// Checks rows [0, tokens) of a downloaded BF16 out against the reference.
    void check(const std::vector<uint8_t>& got) const {
        check_layer_output(c_.name, got, c_.tokens, c_.hidden,
                           [this](int64_t t, double* magnitude) { return reference(t, magnitude); });
    }

private:
    static int64_t blocks(int64_t n) { return (n + 127) / 128; }

    std::vector<uint8_t> random_codes(size_t count) {
        std::uniform_int_distribution<int> sign(0, 1), exponent(5, 8), mantissa(0, 7);
        std::vector<uint8_t> codes(count);
        for (uint8_t& code : codes)
            code = static_cast<uint8_t>(sign(rng_) << 7 | exponent(rng_) << 3 | mantissa(rng_));
        return codes;
    }
    std::vector<float> random_scales(size_t count) {
        std::uniform_real_distribution<float> s(0.01f, 0.03f);
        std::vector<float> v(count);
        for (float& x : v) x = s(rng_);
        return v;
    }
    static DeviceBuffer upload(const void* data, size_t bytes) {
        DeviceBuffer d(std::max<size_t>(bytes, 16) + kInputSlack);
        d.upload(data, bytes);
        return d;
    }
    double w1_at(int64_t e, int64_t n, int64_t h) const {
        const size_t at = static_cast<size_t>((e * n1_ + n) * c_.hidden + h);
        return e4m3_value(w1_[at]) *
               w1_scale_[static_cast<size_t>((e * blocks(n1_) + n / 128) * blocks(c_.hidden) + h / 128)];
    }
    double w2_at(int64_t e, int64_t h, int64_t i) const {
        const size_t at = static_cast<size_t>((e * c_.hidden + h) * c_.intermediate + i);
        return e4m3_value(w2_[at]) *
               w2_scale_[static_cast<size_t>((e * blocks(c_.hidden) + h / 128) *
                                                 blocks(c_.intermediate) +
                                             i / 128)];
    }

    std::vector<double> reference(int64_t t, double* magnitude) const {
        std::vector<double> out(static_cast<size_t>(c_.hidden), 0.0);
        *magnitude = 0;
        const std::vector<float> row(x_.begin() + t * c_.hidden, x_.begin() + (t + 1) * c_.hidden);
        const std::vector<double> xq = quantized(row);
        for (int32_t j = 0; j < c_.top_k; ++j) {
            const int64_t id = ids_[static_cast<size_t>(t * c_.top_k + j)];
            if (id < c_.first || id >= c_.first + c_.local) continue;
            const int64_t e = id - c_.first;
            std::vector<float> pre(static_cast<size_t>(n1_));
            for (int64_t n = 0; n < n1_; ++n) {
                double acc = 0;
                for (int64_t h = 0; h < c_.hidden; ++h) acc += xq[static_cast<size_t>(h)] * w1_at(e, n, h);
                pre[static_cast<size_t>(n)] = bf16r(acc);  // FC1's BF16 product
            }
            std::vector<float> act(static_cast<size_t>(c_.intermediate));
            for (int64_t i = 0; i < c_.intermediate; ++i) {
                const bool inter = c_.gate_layout == MOEGEMM_GATE_UP_INTERLEAVED;
                const bool up_first = c_.gate_layout == MOEGEMM_UP_GATE_HALVES;
                const int64_t first = inter ? 2 * i : i;
                const int64_t second = inter ? 2 * i + 1 : c_.intermediate + i;
                const double g = pre[static_cast<size_t>(gated() && up_first ? second : first)];
                double v = g;
                if (gated()) {
                    const double u = pre[static_cast<size_t>(up_first ? first : second)];
                    if (c_.activation == MOEGEMM_ACTIVATION_SWIGLU_CLAMPED) {
                        const double gc = std::min(g, 7.0), uc = std::min(std::max(u, -7.0), 7.0);
                        v = (uc + 1.0) * gc / (1.0 + std::exp(-1.702 * gc));
                    } else {
                        v = silu(g) * u;
                    }
                }
                act[static_cast<size_t>(i)] = static_cast<float>(v);
            }
            const std::vector<double> hq = quantized(act);
            const double w = weights_[static_cast<size_t>(t * c_.top_k + j)];
            for (int64_t h = 0; h < c_.hidden; ++h) {
                double acc = 0, mag = 0;
                for (int64_t i = 0; i < c_.intermediate; ++i) {
                    const double term = hq[static_cast<size_t>(i)] * w2_at(e, h, i);
                    acc += term;
                    mag += std::fabs(term);
                }
                out[static_cast<size_t>(h)] += w * bf16r(acc);
                *magnitude = std::max(*magnitude, w * (mag + std::fabs(acc)));
            }
        }
        return out;
    }

    Fp8LayerCase c_;
    std::mt19937 rng_;
    int64_t n1_ = 0;
    std::vector<float> x_, w1_scale_, w2_scale_, weights_;
    std::vector<uint8_t> w1_, w2_;
    std::vector<int32_t> ids_;
    DeviceBuffer x_dev_, w1_dev_, w2_dev_, w1_scale_dev_, w2_scale_dev_, ids_dev_, weights_dev_,
        count_dev_;
};

struct LayerPlan {
    explicit LayerPlan(const moegemm_moe_problem_t& p) {
        MGT_REQUIRE_OK(moegemm_moe_plan_create(&p, &plan));
        MGT_REQUIRE_OK(moegemm_moe_plan_get_workspace_size(plan, &bytes));
        ws = DeviceBuffer(std::max<size_t>(bytes, 256));
    }
    ~LayerPlan() { (void)moegemm_moe_plan_destroy(plan); }
    moegemm_moe_plan_t plan = nullptr;
    size_t bytes = 0;
    DeviceBuffer ws;
};

bool native_layer_here() {
    if (device_cc() == 90 && backend_enabled(MOEGEMM_BACKEND_NATIVE)) return true;
    WARN("the fp8 layer needs the native sm_90 kernels: skipped");
    return false;
}

}  // namespace

TEST_CASE("moe layer, fp8 block scales: equals the quantizing reference, bitwise reproducible",
          "[moe_layer]") {
    if (!native_layer_here()) return;
    const Fp8LayerCase cases[] = {
        {"swiglu, 8 experts, top-2, hostile ids", 8, 0, 8, 2, 256, 128, 37,
         MOEGEMM_ACTIVATION_SWIGLU, MOEGEMM_GATE_UP_HALVES, false, true, false},
        {"partial scale groups: H = 272, I = 144, clamped swiglu interleaved, int64 ids", 6, 0, 6,
         3, 272, 144, 20, MOEGEMM_ACTIVATION_SWIGLU_CLAMPED, MOEGEMM_GATE_UP_INTERLEAVED, true,
         true, false},
        {"a rank owning experts [2, 5) of 6, device token count", 6, 2, 3, 3, 128, 96, 300,
         MOEGEMM_ACTIVATION_SWIGLU, MOEGEMM_GATE_UP_HALVES, false, false, true},
        {"one token, up before gate", 16, 0, 16, 4, 128, 64, 1, MOEGEMM_ACTIVATION_SWIGLU,
         MOEGEMM_UP_GATE_HALVES, false, false, false},
        {"k = 1, no activation", 4, 0, 4, 1, 144, 160, 50, MOEGEMM_ACTIVATION_NONE,
         MOEGEMM_GATE_UP_HALVES, false, false, false},
    };
    uint32_t seed = 600;
    for (const Fp8LayerCase& c : cases) {
        INFO(c.name);
        const Fp8Layer layer(c, ++seed);
        const LayerPlan plan(layer.problem());
        char text[MOEGEMM_DESCRIBE_MAX];
        MGT_REQUIRE_OK(moegemm_moe_plan_describe(plan.plan, text, sizeof text));
        INFO(text);
        CHECK(std::string(text).find("E4M3 weights") != std::string::npos);
        OutputBuffer out(static_cast<size_t>(c.tokens * c.hidden) * 2);
        const moegemm_moe_tensors_t t = layer.tensors(out.d());
        MGT_REQUIRE_OK(moegemm_moe_execute(plan.plan, &t, plan.ws.get(), plan.bytes, nullptr));
        MGT_CUDA_REQUIRE(cudaDeviceSynchronize());
        const std::vector<uint8_t> first = out.download();
        layer.check(std::vector<uint8_t>(first.begin() + kGuardBytes, first.end() - kGuardBytes));
        // Guards untouched; the same again bit for bit (the workspace still holds the first
        // run's intermediates, which must not matter).
        CHECK(count_unpoisoned(first, 0, kGuardBytes) == 0);
        CHECK(count_unpoisoned(first, first.size() - kGuardBytes, first.size()) == 0);
        out.poison();
        MGT_REQUIRE_OK(moegemm_moe_execute(plan.plan, &t, plan.ws.get(), plan.bytes, nullptr));
        MGT_CUDA_REQUIRE(cudaDeviceSynchronize());
        CHECK(out.download() == first);
    }
}

TEST_CASE("moe layer, fp8 block scales: missing or unexpected tensors are refused, nothing "
          "written", "[moe_layer][api]") {
    if (!native_layer_here()) return;
    const Fp8LayerCase c{"refusals", 4, 0, 4, 2, 128, 64, 8, MOEGEMM_ACTIVATION_SWIGLU,
                         MOEGEMM_GATE_UP_HALVES, false, false, false};
    const Fp8Layer layer(c, 77);
    const LayerPlan plan(layer.problem());
    OutputBuffer out(static_cast<size_t>(c.tokens * c.hidden) * 2);
    SECTION("no w2_scale") {
        moegemm_moe_tensors_t t = layer.tensors(out.d());
        t.w2_scale = nullptr;
        const Outcome o = outcome(moegemm_moe_execute(plan.plan, &t, plan.ws.get(), plan.bytes, nullptr));
        CHECK(o.status == MOEGEMM_STATUS_INVALID_VALUE);
        CHECK_THAT(o.message, Catch::Contains("w2_scale"));
    }
    SECTION("a bias the plan does not take") {
        moegemm_moe_tensors_t t = layer.tensors(out.d());
        t.b1 = t.w1;
        const Outcome o = outcome(moegemm_moe_execute(plan.plan, &t, plan.ws.get(), plan.bytes, nullptr));
        CHECK(o.status == MOEGEMM_STATUS_INVALID_VALUE);
        CHECK_THAT(o.message, Catch::Contains("b1"));
    }
    SECTION("scales on a 16-bit layer") {
        moegemm_moe_problem_t p = layer.problem();
        p.weight_scales = MOEGEMM_SCALE_NONE;
        const LayerPlan plain(p);
        moegemm_moe_tensors_t t = layer.tensors(out.d());
        const Outcome o = outcome(moegemm_moe_execute(plain.plan, &t, plain.ws.get(), plain.bytes, nullptr));
        CHECK(o.status == MOEGEMM_STATUS_INVALID_VALUE);
        CHECK_THAT(o.message, Catch::Contains("w1_scale"));
    }
    MGT_CUDA_REQUIRE(cudaDeviceSynchronize());
    CHECK(out.unpoisoned() == 0);
}

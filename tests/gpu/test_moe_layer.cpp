// [moe_layer]: moegemm_moe_execute against a host reference of the layer (the header's
// formula, with FC1's and FC2's outputs rounded to the layer's dtype as the library stores
// them), random routing with empty experts, repeated and hostile ids, a rank owning a range of
// the experts, T = 1, k = 1, E = 1; bitwise reproducibility; CUDA graph replays with the token
// count and the routing changed between replays; bad input refused with nothing written.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "support/gpu_harness.hpp"
#include "support/layer_check.hpp"

using namespace mgt;

namespace {

struct LayerCase : LayerShape {
    uint32_t fc1_inputs, fc2_inputs;
    bool ids64;
    bool hostile;  // some ids out of [0, E)
    /// FC1 gathers its rows from x (the plan expects one token, so one row per expert) instead
    /// of reading a sorted copy: the gather path whatever the executed token count.
    bool gathers;
};

double silu(double x) { return x / (1.0 + std::exp(-x)); }

double gelu_tanh(double x) {
    return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

double act_gated(moegemm_activation_t a, double g, double u) {
    if (a == MOEGEMM_ACTIVATION_SWIGLU_CLAMPED) {
        const double gc = std::min(g, 7.0), uc = std::min(std::max(u, -7.0), 7.0);
        return (uc + 1.0) * gc / (1.0 + std::exp(-1.702 * gc));
    }
    if (a == MOEGEMM_ACTIVATION_GEGLU) return gelu_tanh(g) * u;
    return silu(g) * u;
}

double act_plain(moegemm_activation_t a, double v) {
    if (a == MOEGEMM_ACTIVATION_SILU) return silu(v);
    if (a == MOEGEMM_ACTIVATION_GELU_TANH) return gelu_tanh(v);
    return v;
}

float bf16r(double x) { return float_from_bf16(bf16_from_float(static_cast<float>(x))); }

class Layer {
public:
    explicit Layer(const LayerCase& c, uint32_t seed) : c_(c), rng_(seed) {
        n1_ = gated() ? 2 * c.intermediate : c.intermediate;
        x_ = random_bf16(static_cast<size_t>(c.tokens * c.hidden), 1.0f);
        w1_ = random_bf16(static_cast<size_t>(c.local * n1_ * c.hidden), 0.25f);
        w2_ = random_bf16(static_cast<size_t>(c.local * c.hidden * c.intermediate), 0.25f);
        b1_ = random_bf16(static_cast<size_t>(c.local * n1_), 0.5f);
        b2_ = random_bf16(static_cast<size_t>(c.local * c.hidden), 0.5f);
        std::uniform_real_distribution<float> pos(0.5f, 1.5f);
        for (int i = 0; i < c.local; ++i) {
            alpha1_.push_back(pos(rng_));
            alpha2_.push_back(pos(rng_));
        }
        x_dev_ = upload_bf16(x_);
        w1_dev_ = upload_bf16(w1_);
        w2_dev_ = upload_bf16(w2_);
        b1_dev_ = upload_bf16(b1_);
        b2_dev_ = upload_bf16(b2_);
        alpha1_dev_ = upload(alpha1_);
        alpha2_dev_ = upload(alpha2_);
        reroute(seed);
    }

    bool gated() const { return mgt::gated(c_); }

    /// New random routing (and weights) into the same device buffers.
    void reroute(uint32_t seed) {
        std::mt19937 rng(seed);
        std::uniform_int_distribution<int32_t> expert(0, c_.experts - 1);
        std::uniform_real_distribution<float> weight(0.1f, 1.0f);
        ids_.assign(static_cast<size_t>(c_.tokens * c_.top_k), 0);
        weights_.assign(ids_.size(), 0.0f);
        for (size_t i = 0; i < ids_.size(); ++i) {
            ids_[i] = expert(rng);
            weights_[i] = weight(rng);
        }
        if (c_.tokens > 2 && c_.top_k > 1) ids_[1] = ids_[0];  // a token sent twice to one expert
        if (c_.hostile && ids_.size() > 3) {
            ids_[2] = -1;
            ids_[3] = c_.experts;
            ids_.back() = c_.ids64 ? 0 : c_.experts + 1000;
        }
        std::vector<int64_t> ids64(ids_.begin(), ids_.end());
        if (c_.hostile && c_.ids64 && !ids64.empty()) ids64.back() = int64_t{1} << 33;
        // Allocated once: a captured graph keeps reading the first pointers.
        const size_t id_bytes = ids_.size() * (c_.ids64 ? 8 : 4);
        if (ids_dev_.get() == nullptr) {
            ids_dev_ = DeviceBuffer(id_bytes + 8);
            weights_dev_ = DeviceBuffer(std::max<size_t>(weights_.size() * 4, 16) + kInputSlack);
        }
        if (c_.ids64)
            ids_dev_.upload(ids64.data(), id_bytes);
        else
            ids_dev_.upload(ids_.data(), id_bytes);
        weights_dev_.upload(weights_.data(), weights_.size() * 4);
        ids_64_ = ids64;
    }

    moegemm_moe_problem_t problem(int64_t max_tokens) const {
        moegemm_moe_problem_t p = layer_problem(c_, max_tokens);
        p.fc1_inputs = c_.fc1_inputs;
        p.fc2_inputs = c_.fc2_inputs;
        p.id_type = c_.ids64 ? MOEGEMM_INDEX_INT64 : MOEGEMM_INDEX_INT32;
        if (c_.gathers) p.expected_tokens = 1;
        return p;
    }

    moegemm_moe_tensors_t tensors(void* out, int64_t tokens, const int32_t* tokens_dev) const {
        moegemm_moe_tensors_t t = layer_tensors(x_dev_.get(), ids_dev_.get(), weights_dev_.get(),
                                                w1_dev_.get(), w2_dev_.get(), out);
        if (c_.fc1_inputs & MOEGEMM_EPILOGUE_BIAS) t.b1 = b1_dev_.get();
        if (c_.fc2_inputs & MOEGEMM_EPILOGUE_BIAS) t.b2 = b2_dev_.get();
        if (c_.fc1_inputs & MOEGEMM_EPILOGUE_ALPHA)
            t.alpha1 = static_cast<const float*>(alpha1_dev_.get());
        if (c_.fc2_inputs & MOEGEMM_EPILOGUE_ALPHA)
            t.alpha2 = static_cast<const float*>(alpha2_dev_.get());
        t.num_tokens = tokens;
        t.num_tokens_device = tokens_dev;
        return t;
    }

    /// The reference output row of token t (H values) and a magnitude for the tolerance.
    std::vector<double> reference(int64_t t, double* magnitude) const {
        std::vector<double> out(static_cast<size_t>(c_.hidden), 0.0);
        *magnitude = 0;
        for (int32_t j = 0; j < c_.top_k; ++j) {
            const int64_t id = c_.ids64 ? ids_64_[static_cast<size_t>(t * c_.top_k + j)]
                                        : ids_[static_cast<size_t>(t * c_.top_k + j)];
            if (id < c_.first || id >= c_.first + c_.local) continue;
            const int64_t e = id - c_.first;
            std::vector<double> pre(static_cast<size_t>(n1_));
            for (int64_t n = 0; n < n1_; ++n) {
                double acc = 0;
                for (int64_t h = 0; h < c_.hidden; ++h)
                    acc += double{x_[static_cast<size_t>(t * c_.hidden + h)]} *
                           w1_[static_cast<size_t>((e * n1_ + n) * c_.hidden + h)];
                if (c_.fc1_inputs & MOEGEMM_EPILOGUE_ALPHA) acc *= alpha1_[static_cast<size_t>(e)];
                if (c_.fc1_inputs & MOEGEMM_EPILOGUE_BIAS) acc += b1_[static_cast<size_t>(e * n1_ + n)];
                pre[static_cast<size_t>(n)] = acc;
            }
            std::vector<float> hid(static_cast<size_t>(c_.intermediate));
            for (int64_t i = 0; i < c_.intermediate; ++i) {
                double v;
                if (gated()) {
                    const bool inter = c_.gate_layout == MOEGEMM_GATE_UP_INTERLEAVED;
                    const double first = pre[static_cast<size_t>(inter ? 2 * i : i)];
                    const double second = pre[static_cast<size_t>(inter ? 2 * i + 1 : c_.intermediate + i)];
                    v = c_.gate_layout == MOEGEMM_UP_GATE_HALVES
                            ? act_gated(c_.activation, second, first)
                            : act_gated(c_.activation, first, second);
                } else {
                    v = act_plain(c_.activation, pre[static_cast<size_t>(i)]);
                }
                hid[static_cast<size_t>(i)] = bf16r(v);
            }
            const double w = weights_[static_cast<size_t>(t * c_.top_k + j)];
            for (int64_t h = 0; h < c_.hidden; ++h) {
                double acc = 0, mag = 0;
                for (int64_t i = 0; i < c_.intermediate; ++i) {
                    const double term = double{hid[static_cast<size_t>(i)]} *
                                        w2_[static_cast<size_t>((e * c_.hidden + h) * c_.intermediate + i)];
                    acc += term;
                    mag += std::fabs(term);
                }
                if (c_.fc2_inputs & MOEGEMM_EPILOGUE_ALPHA) acc *= alpha2_[static_cast<size_t>(e)];
                if (c_.fc2_inputs & MOEGEMM_EPILOGUE_BIAS) acc += b2_[static_cast<size_t>(e * c_.hidden + h)];
                out[static_cast<size_t>(h)] += w * bf16r(acc);
                *magnitude = std::max(*magnitude, w * (mag + std::fabs(acc)));
            }
        }
        return out;
    }

    /// Checks rows [0, tokens) of a downloaded out (bf16) against the reference.
    void check(const std::vector<uint8_t>& got, int64_t tokens) const {
        check_layer_output(c_.name, got, tokens, c_.hidden,
                           [this](int64_t t, double* magnitude) { return reference(t, magnitude); });
    }

    const LayerCase& c() const { return c_; }

private:
    std::vector<float> random_bf16(size_t count, float scale) {
        std::uniform_real_distribution<float> u(-scale, scale);
        std::vector<float> v(count);
        for (auto& x : v) x = bf16r(u(rng_));
        return v;
    }
    static DeviceBuffer upload_bf16(const std::vector<float>& v) {
        std::vector<uint16_t> bits(v.size());
        for (size_t i = 0; i < v.size(); ++i) bits[i] = bf16_from_float(v[i]);
        DeviceBuffer d(std::max<size_t>(bits.size() * 2, 16) + kInputSlack);
        d.upload(bits.data(), bits.size() * 2);
        return d;
    }
    static DeviceBuffer upload(const std::vector<float>& v) {
        DeviceBuffer d(std::max<size_t>(v.size() * 4, 16) + kInputSlack);
        d.upload(v.data(), v.size() * 4);
        return d;
    }

    LayerCase c_;
    std::mt19937 rng_;
    int64_t n1_ = 0;
    std::vector<float> x_, w1_, w2_, b1_, b2_, alpha1_, alpha2_, weights_;
    std::vector<int32_t> ids_;
    std::vector<int64_t> ids_64_;
    DeviceBuffer x_dev_, w1_dev_, w2_dev_, b1_dev_, b2_dev_, alpha1_dev_, alpha2_dev_, ids_dev_,
        weights_dev_;
};

class MoePlan {
public:
    explicit MoePlan(const moegemm_moe_problem_t& p) {
        MGT_REQUIRE_OK(create_moe_plan(p, &plan_));
        MGT_REQUIRE_OK(moegemm_moe_plan_get_workspace_size(plan_, &bytes_));
        ws_ = DeviceBuffer(std::max<size_t>(bytes_, 256));
    }
    ~MoePlan() { (void)moegemm_moe_plan_destroy(plan_); }
    moegemm_moe_plan_t get() const { return plan_; }
    void* workspace() const { return ws_.get(); }
    size_t bytes() const { return bytes_; }

private:
    moegemm_moe_plan_t plan_ = nullptr;
    size_t bytes_ = 0;
    DeviceBuffer ws_;
};

const std::vector<LayerCase>& cases() {
    static const std::vector<LayerCase> list = {
        {"swiglu, 8 experts, top-2, hostile ids, gathered", 8, 0, 8, 2, 136, 72, 37,
         MOEGEMM_ACTIVATION_SWIGLU, MOEGEMM_GATE_UP_HALVES, 0, 0, false, true, true},
        {"clamped swiglu interleaved with biases and alphas, int64 ids, gathered", 6, 0, 6, 3, 64,
         48, 20, MOEGEMM_ACTIVATION_SWIGLU_CLAMPED, MOEGEMM_GATE_UP_INTERLEAVED,
         MOEGEMM_EPILOGUE_BIAS | MOEGEMM_EPILOGUE_ALPHA, MOEGEMM_EPILOGUE_BIAS | MOEGEMM_EPILOGUE_ALPHA,
         true, true, true},
        {"a rank owning experts [3, 7) of 10, gathered", 10, 3, 4, 4, 64, 32, 25,
         MOEGEMM_ACTIVATION_SWIGLU, MOEGEMM_GATE_UP_HALVES, 0, MOEGEMM_EPILOGUE_BIAS, false, false,
         true},
        {"one token", 16, 0, 16, 4, 128, 64, 1, MOEGEMM_ACTIVATION_SWIGLU,
         MOEGEMM_GATE_UP_HALVES, 0, 0, false, false, true},
        {"k = 1, no activation", 4, 0, 4, 1, 64, 64, 30, MOEGEMM_ACTIVATION_NONE,
         MOEGEMM_GATE_UP_HALVES, 0, 0, false, false, false},
        {"one expert", 1, 0, 1, 1, 64, 32, 70, MOEGEMM_ACTIVATION_SWIGLU, MOEGEMM_GATE_UP_HALVES,
         0, 0, false, false, false},
        // 18 rows per expert where the plan expects one: the gather path past its own range.
        {"many tokens on 128 experts, gathered", 128, 0, 128, 8, 128, 64, 300,
         MOEGEMM_ACTIVATION_SWIGLU, MOEGEMM_GATE_UP_HALVES, 0, 0, false, false, true},
        {"tokens copied into expert order, hostile int64 ids", 4, 0, 4, 2, 136, 72, 300,
         MOEGEMM_ACTIVATION_SWIGLU, MOEGEMM_GATE_UP_HALVES, MOEGEMM_EPILOGUE_BIAS, 0, true, true,
         false},
        {"tokens copied into expert order, a rank owning experts [2, 5) of 6", 6, 2, 3, 3, 64, 48,
         400, MOEGEMM_ACTIVATION_SWIGLU_CLAMPED, MOEGEMM_GATE_UP_INTERLEAVED, 0,
         MOEGEMM_EPILOGUE_BIAS, false, false, false},
        // Sizes for the decode kernels: rows that are not a multiple of the lanes' vectors, up
        // and gate halves, plain activations, more rows of one expert than one pass takes.
        {"geglu with up and gate halves, biases and alphas, 5 tokens, gathered", 12, 0, 12, 3,
         264, 40, 5, MOEGEMM_ACTIVATION_GEGLU, MOEGEMM_UP_GATE_HALVES,
         MOEGEMM_EPILOGUE_BIAS | MOEGEMM_EPILOGUE_ALPHA, MOEGEMM_EPILOGUE_BIAS | MOEGEMM_EPILOGUE_ALPHA,
         false, false, true},
        {"silu, a rank owning experts [1, 3) of 5, hostile ids, 9 tokens, gathered", 5, 1, 2, 2, 200,
         56, 9, MOEGEMM_ACTIVATION_SILU, MOEGEMM_GATE_UP_HALVES, MOEGEMM_EPILOGUE_BIAS, 0, false,
         true, true},
        {"gelu, one expert, 21 tokens (three passes of 8 rows), gathered", 1, 0, 1, 1, 64, 32, 21,
         MOEGEMM_ACTIVATION_GELU_TANH, MOEGEMM_GATE_UP_HALVES, 0, MOEGEMM_EPILOGUE_ALPHA, false,
         false, true},
    };
    return list;
}

/// N of a layer description's "up to N tokens in the two decode kernels", 0 without it.
int64_t decode_tokens_in(const std::string& description) {
    const std::string marker = "up to ";
    const size_t at = description.find(" tokens in the two decode kernels");
    if (at == std::string::npos) return 0;
    const size_t from = description.rfind(marker, at);
    REQUIRE(from != std::string::npos);
    return std::stoll(description.substr(from + marker.size(), at - from - marker.size()));
}

uint32_t read_word(uint32_t* word) {
    uint32_t v = 0;
    REQUIRE(cudaMemcpy(&v, word, 4, cudaMemcpyDeviceToHost) == cudaSuccess);
    return v;
}

}  // namespace

TEST_CASE("moe layer: equals the reference layer, bitwise reproducible", "[moe_layer]") {
    const LayerCase c = GENERATE(from_range(cases()));
    // Each case with the decode kernels allowed (they run where the tokens fit them) and off.
    const bool decode_allowed = GENERATE(true, false);
    INFO(c.name << (decode_allowed ? "" : ", decode kernels off"));
    const ScopedPlanOption decode_option("decode_layer", decode_allowed);
    const ScopedPlanOption trace("trace_features", true);
    Layer layer(c, 1234u);
    Stream stream;
    MoePlan plan(layer.problem(c.tokens));
    char text[MOEGEMM_DESCRIBE_MAX];
    MGT_REQUIRE_OK(moegemm_moe_plan_describe(plan.get(), text, sizeof text));
    INFO(text);
    const int64_t decode_limit = decode_tokens_in(text);
    CHECK((decode_limit > 0) == decode_allowed);  // every case's rows fit the stage
    const bool decodes = c.tokens <= decode_limit;
    // The plan's path for FC1's rows: gathered where it expects one row per expert, else a
    // sorted copy (from kCopyTokensRowsPerExpert expected rows per expert; every copying case
    // expects at least that many: max_tokens is the expected count).
    CHECK((std::string(text).find("tokens copied into expert order") != std::string::npos) ==
          !c.gathers);
    CHECK((std::string(text).find("A rows gathered") != std::string::npos) == c.gathers);
    const size_t out_bytes = static_cast<size_t>(c.tokens * c.hidden) * 2;
    OutputBuffer out(out_bytes);
    out.poison();
    const moegemm_moe_tensors_t t = layer.tensors(out.d(), c.tokens, nullptr);
    MGT_REQUIRE_OK(moegemm_moe_execute(plan.get(), &t, plan.workspace(), plan.bytes(), stream.get()));
    MGT_CUDA_REQUIRE(cudaStreamSynchronize(stream.get()));
    const std::vector<uint8_t> first = out.download();
    for (size_t i = 0; i < kGuardBytes; ++i) {
        REQUIRE(first[i] == 0xFF);
        REQUIRE(first[kGuardBytes + out_bytes + i] == 0xFF);
    }
    const std::vector<uint8_t> rows(first.begin() + kGuardBytes,
                                    first.begin() + static_cast<std::ptrdiff_t>(kGuardBytes + out_bytes));
    layer.check(rows, c.tokens);
    uint32_t* word = nullptr;
    MGT_REQUIRE_OK(moegemm_moe_plan_get_status_word(plan.get(), &word));
    const uint32_t status = read_word(word);
    CHECK(((status & MOEGEMM_ROWS_CLAMPED_INDEX) != 0) == c.hostile);
    CHECK(((status & moegemm::kTraceDecodeLayer) != 0) == decodes);

    // Again, over a poisoned output: the same bits.
    out.poison();
    MGT_REQUIRE_OK(moegemm_moe_execute(plan.get(), &t, plan.workspace(), plan.bytes(), stream.get()));
    MGT_CUDA_REQUIRE(cudaStreamSynchronize(stream.get()));
    CHECK(out.download() == first);
}

TEST_CASE("moe layer: a CUDA graph replayed with new tokens and routing", "[moe_layer]") {
    // FC1 gathering its rows, reading a sorted copy, and the decode kernels (9 tokens of 2
    // choices: within their 32).
    const LayerCase c = cases()[GENERATE(0, 7, 10)];
    INFO(c.name);
    Layer layer(c, 99u);
    Stream stream;
    MoePlan plan(layer.problem(c.tokens));
    const size_t out_bytes = static_cast<size_t>(c.tokens * c.hidden) * 2;
    OutputBuffer out(out_bytes);
    DeviceBuffer count(4);
    int32_t tokens = static_cast<int32_t>(c.tokens);
    count.upload(&tokens, 4);
    const moegemm_moe_tensors_t t =
        layer.tensors(out.d(), 0, static_cast<const int32_t*>(count.get()));
    cudaGraph_t graph = nullptr;
    MGT_CUDA_REQUIRE(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
    const moegemm_status_t captured =
        moegemm_moe_execute(plan.get(), &t, plan.workspace(), plan.bytes(), stream.get());
    MGT_CUDA_REQUIRE(cudaStreamEndCapture(stream.get(), &graph));
    REQUIRE(captured == MOEGEMM_STATUS_SUCCESS);
    cudaGraphExec_t exec = nullptr;
    MGT_CUDA_REQUIRE(cudaGraphInstantiate(&exec, graph, 0));
    std::vector<uint8_t> previous;
    for (int replay = 0; replay < 4; ++replay) {
        INFO("replay " << replay);
        // Replays 0 and 1 run the same routing (bitwise equal); the others change it and T.
        if (replay >= 2) layer.reroute(1000u + static_cast<uint32_t>(replay));
        tokens = static_cast<int32_t>(replay == 3 ? std::min<int64_t>(11, c.tokens - 2) : c.tokens);
        count.upload(&tokens, 4);
        out.poison();
        MGT_CUDA_REQUIRE(cudaGraphLaunch(exec, stream.get()));
        MGT_CUDA_REQUIRE(cudaStreamSynchronize(stream.get()));
        const std::vector<uint8_t> got = out.download();
        const std::vector<uint8_t> rows(got.begin() + kGuardBytes,
                                        got.begin() + static_cast<std::ptrdiff_t>(kGuardBytes + out_bytes));
        layer.check(rows, tokens);
        // Rows past T stay untouched.
        for (size_t i = static_cast<size_t>(tokens * c.hidden) * 2; i < out_bytes; ++i)
            REQUIRE(rows[i] == 0xFF);
        if (replay == 1) CHECK(got == previous);
        previous = got;
    }
    // The deterministic combine: 100 more replays of the last routing, every one the same bits.
    int differing = 0;
    for (int replay = 0; replay < 100; ++replay) {
        out.poison();
        MGT_CUDA_REQUIRE(cudaGraphLaunch(exec, stream.get()));
        MGT_CUDA_REQUIRE(cudaStreamSynchronize(stream.get()));
        differing += out.download() != previous ? 1 : 0;
    }
    CHECK(differing == 0);
    (void)cudaGraphExecDestroy(exec);
    (void)cudaGraphDestroy(graph);
}

TEST_CASE("moe layer: bad input is refused and nothing is written", "[moe_layer][api]") {
    const LayerCase c = cases()[1];
    Layer layer(c, 5u);
    MoePlan plan(layer.problem(c.tokens));
    const size_t out_bytes = static_cast<size_t>(c.tokens * c.hidden) * 2;
    OutputBuffer out(out_bytes);
    out.poison();
    moegemm_moe_tensors_t t = layer.tensors(out.d(), c.tokens, nullptr);
    moegemm_status_t expected = MOEGEMM_STATUS_INVALID_VALUE;
    size_t bytes = plan.bytes();
    SECTION("missing b1") { t.b1 = nullptr; }
    SECTION("too many tokens") { t.num_tokens = c.tokens + 1; }
    SECTION("out overlaps x") { t.out = const_cast<void*>(t.x); }
    SECTION("misaligned x") {
        t.x = static_cast<const uint8_t*>(t.x) + 2;
        expected = MOEGEMM_STATUS_MISALIGNED;
    }
    SECTION("small workspace") {
        bytes -= 256;
        expected = MOEGEMM_STATUS_WORKSPACE_TOO_SMALL;
    }
    CHECK(moegemm_moe_execute(plan.get(), &t, plan.workspace(), bytes, nullptr) == expected);
    MGT_CUDA_REQUIRE(cudaDeviceSynchronize());
    CHECK(out.unpoisoned() == 0);
}

TEST_CASE("moe layer: bad problems are refused with their reason", "[moe_layer][api]") {
    const LayerCase c = cases()[1];
    Layer layer(c, 5u);
    moegemm_moe_problem_t p = layer.problem(c.tokens);
    moegemm_moe_plan_t refused = nullptr;
    SECTION("top_k above the experts") {
        p.top_k = p.num_experts + 1;
        CHECK(moegemm_moe_plan_create(&p, &refused) == MOEGEMM_STATUS_INVALID_VALUE);
    }
    SECTION("an expert range outside the model") {
        p.first_expert = 4;
        p.local_experts = 3;
        CHECK(moegemm_moe_plan_create(&p, &refused) == MOEGEMM_STATUS_INVALID_VALUE);
    }
    SECTION("fp8 layer") {
        p.dtype = MOEGEMM_DTYPE_E4M3;
        CHECK(moegemm_moe_plan_create(&p, &refused) == MOEGEMM_STATUS_NOT_SUPPORTED);
    }
    SECTION("odd hidden") {
        p.hidden = 60;
        CHECK(moegemm_moe_plan_create(&p, &refused) == MOEGEMM_STATUS_MISALIGNED);
    }
    CHECK(refused == nullptr);
}

TEST_CASE("moe layer: autotune tunes FC1 and FC2 on the call's routing; refused under capture",
          "[moe_layer][autotune]") {
    if (device_cc() != 90) return;
    // A shape no other test uses: the tuned kernels become the process's choice for it.
    const LayerCase c{"autotuned: 8 experts, top-2, a bias on FC1", 8, 0, 8, 2, 144, 80, 90,
                      MOEGEMM_ACTIVATION_SWIGLU, MOEGEMM_GATE_UP_HALVES, MOEGEMM_EPILOGUE_BIAS,
                      0, false, false};
    Layer layer(c, 4321u);
    Stream stream;
    MoePlan plan(layer.problem(c.tokens));
    const size_t out_bytes = static_cast<size_t>(c.tokens * c.hidden) * 2;
    OutputBuffer out(out_bytes);
    out.poison();
    const moegemm_moe_tensors_t t = layer.tensors(out.d(), c.tokens, nullptr);

    MGT_CUDA_REQUIRE(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal));
    const Outcome refused = outcome(
        moegemm_moe_plan_autotune(plan.get(), &t, plan.workspace(), plan.bytes(), stream.get()));
    cudaGraph_t graph = nullptr;
    CHECK(cudaStreamEndCapture(stream.get(), &graph) == cudaSuccess);
    CHECK(refused.status == MOEGEMM_STATUS_INVALID_STATE);
    if (graph) {
        size_t nodes = 1;
        MGT_CUDA_REQUIRE(cudaGraphGetNodes(graph, nullptr, &nodes));
        CHECK(nodes == 0);
        MGT_CUDA_REQUIRE(cudaGraphDestroy(graph));
    }
    CHECK(out.unpoisoned() == 0);

    MGT_REQUIRE_OK(
        moegemm_moe_plan_autotune(plan.get(), &t, plan.workspace(), plan.bytes(), stream.get()));
    char text[MOEGEMM_DESCRIBE_MAX];
    MGT_REQUIRE_OK(moegemm_moe_plan_describe(plan.get(), text, sizeof text));
    INFO(text);
    const std::string description = text;
    // Both GEMMs' kernels, named first in the line.
    const size_t first_tuned = description.find(" (tuned), FC2 ");
    CHECK(first_tuned != std::string::npos);
    CHECK(description.find(" (tuned);", first_tuned + 1) != std::string::npos);
    const std::vector<uint8_t> tuned = out.download();
    const std::vector<uint8_t> rows(tuned.begin() + kGuardBytes,
                                    tuned.begin() + static_cast<std::ptrdiff_t>(kGuardBytes + out_bytes));
    layer.check(rows, c.tokens);

    // Executions run the tuned kernels: the same bits as the tuning call's output.
    out.poison();
    MGT_REQUIRE_OK(moegemm_moe_execute(plan.get(), &t, plan.workspace(), plan.bytes(), stream.get()));
    MGT_CUDA_REQUIRE(cudaStreamSynchronize(stream.get()));
    CHECK(out.download() == tuned);
}

// [moe_routing]: the MoE layer's routing and combine kernels (src/moe/routing.hpp), reached
// through the testing build's exports (moegemm::testing::moe_*).
//
// Routing is checked exactly against a CPU reference written from the header's rules: expert
// sizes, the sorted rows' tokens (experts in order, choices in flattened order within one),
// each choice's row or -1, and the status word's bits. The workspace is filled with a poison
// pattern before each run (its content is undefined at every call: nothing may rely on
// zeros), entries past T * k and past the rows routed must still hold it afterwards, and a
// second run over a different poison must give the same bits. Ids cover hostile values
// (negative, >= E, int64 past 2^31 that truncate to valid ids), every choice on one expert,
// repeated experts in one token, empty experts, a rank owning a sub-range, T = 0 and 1, and
// each chunk size the plan can pick (1024 to 8192 choices).
//
// The combine is checked bitwise against fp32 products and sums in increasing j (the kernel
// rounds each product and sum, no FMA), converted once; rows t >= T and the guards around out
// must keep their poison. Device token counts (clamped, flagged) and a CUDA graph replayed
// with new counts are covered too. The kernels are built for sm_90a only: elsewhere the
// cases WARN and return. Tagged [correctness] too, so that ctest's gpu.correctness runs them.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "moe/routing.hpp"
#include "support/gpu_harness.hpp"

using namespace mgt;
using moegemm::moe::CombineShape;
using moegemm::moe::RoutingLayout;
using moegemm::moe::RoutingShape;

namespace {

constexpr uint32_t kIndexFlag = MOEGEMM_ROWS_CLAMPED_INDEX;
constexpr uint32_t kNegFlag = MOEGEMM_SIZES_CLAMPED_NEGATIVE;
constexpr uint32_t kCapFlag = MOEGEMM_SIZES_CLAMPED_CAPACITY;
constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kI32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();

bool not_sm90() {
    const int cc = device_cc();
    if (cc == 90) return false;
    WARN("the MoE routing and combine kernels are built for sm_90a; this device is sm_"
         << cc << ": test case skipped");
    return true;
}

RoutingShape shape_of(int32_t experts, int32_t top_k, int64_t max_tokens, bool ids_int64 = false,
                      int32_t first = 0, int32_t local = 0) {
    RoutingShape s;
    s.num_experts = experts;
    s.first_expert = first;
    s.local_experts = local > 0 ? local : experts;
    s.top_k = top_k;
    s.max_tokens = max_tokens;
    s.ids_int64 = ids_int64;
    return s;
}

uint32_t word_of(uint8_t poison) {
    return 0x01010101u * poison;
}

/// Uploads and waits: a cudaMemcpy from pageable memory may return before the copy has landed,
/// and the kernels run on non-blocking streams.
void upload_now(DeviceBuffer& buffer, const void* host, size_t bytes) {
    buffer.upload(host, bytes);
    MGT_CUDA_REQUIRE(cudaDeviceSynchronize());
}

/// Index of the first difference (or -1), comparing `a` with `b` over [0, n).
int64_t first_difference(const int32_t* a, const int32_t* b, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
        if (a[i] != b[i]) return i;
    return -1;
}

// ------------------------------------------------------------------------------------------
// Routing
// ------------------------------------------------------------------------------------------

struct Routed {
    std::vector<int32_t> expert_sizes;   // [local_experts]
    std::vector<int32_t> token_of_row;   // reference: [rows]; device: [max_choices]
    std::vector<int32_t> row_of_choice;  // reference: [T * k]; device: [max_choices]
    uint32_t flags = 0;
};

/// The header's rules, on the CPU. `ids` holds at least tokens * top_k values.
Routed reference_routing(const RoutingShape& s, const std::vector<int64_t>& ids, int64_t tokens) {
    Routed r;
    const int64_t choices = tokens * s.top_k;
    std::vector<std::vector<int32_t>> choices_of(static_cast<size_t>(s.local_experts));
    r.row_of_choice.assign(static_cast<size_t>(choices), -1);
    for (int64_t i = 0; i < choices; ++i) {
        const int64_t id = ids[static_cast<size_t>(i)];
        if (id < 0 || id >= s.num_experts) {
            r.flags |= kIndexFlag;
        } else if (id >= s.first_expert && id < int64_t{s.first_expert} + s.local_experts) {
            choices_of[static_cast<size_t>(id - s.first_expert)].push_back(static_cast<int32_t>(i));
        }
    }
    for (const std::vector<int32_t>& of_expert : choices_of) {
        r.expert_sizes.push_back(static_cast<int32_t>(of_expert.size()));
        for (const int32_t i : of_expert) {
            r.row_of_choice[static_cast<size_t>(i)] = static_cast<int32_t>(r.token_of_row.size());
            r.token_of_row.push_back(i / s.top_k);
        }
    }
    return r;
}

/// Device buffers of one routing shape: ids (max_tokens * top_k of them), the workspace, the
/// status word and a device token count.
class RoutingRig {
public:
    explicit RoutingRig(const RoutingShape& s) : shape_(s) {
        MGT_REQUIRE_OK(moegemm::testing::moe_routing_layout(s, &layout_));
        ids_ = DeviceBuffer(static_cast<size_t>(layout_.max_choices) * id_bytes() + kInputSlack);
        workspace_ = DeviceBuffer(layout_.total_bytes);
        status_ = DeviceBuffer(sizeof(uint32_t));
        tokens_ = DeviceBuffer(sizeof(int32_t));
    }
    const RoutingShape& shape() const { return shape_; }
    const RoutingLayout& layout() const { return layout_; }
    size_t id_bytes() const { return shape_.ids_int64 ? 8 : 4; }
    void* workspace() const { return workspace_.get(); }
    const int32_t* row_of_choice() const {
        return reinterpret_cast<const int32_t*>(workspace_.bytes_ptr() + layout_.row_of_choice);
    }
    int32_t* tokens_device() const { return static_cast<int32_t*>(tokens_.get()); }
    uint32_t* status_device() const { return static_cast<uint32_t*>(status_.get()); }

    /// Uploads ids (int32 ids are the values' low 32 bits, as a caller's cast would give).
    void upload_ids(const std::vector<int64_t>& ids) {
        REQUIRE(ids.size() <= static_cast<size_t>(layout_.max_choices));
        if (shape_.ids_int64) {
            upload_now(ids_, ids.data(), ids.size() * 8);
        } else {
            std::vector<int32_t> narrow(ids.size());
            for (size_t i = 0; i < ids.size(); ++i) narrow[i] = static_cast<int32_t>(ids[i]);
            upload_now(ids_, narrow.data(), narrow.size() * 4);
        }
    }
    /// Poisons the workspace with `poison` and clears the status word.
    void prepare(uint8_t poison) {
        workspace_.fill(poison);
        status_.fill(0);
    }
    /// Enqueues routing with a host count (device_count false) or the device count.
    void launch(int64_t tokens, bool device_count, bool dependent_launch, cudaStream_t stream) {
        MGT_REQUIRE_OK(moegemm::testing::moe_launch_routing(
            shape_, ids_.get(), device_count ? 0 : tokens, device_count ? tokens_device() : nullptr,
            workspace_.get(), status_device(), dependent_launch, stream));
    }
    void set_device_tokens(int32_t tokens) { upload_now(tokens_, &tokens, sizeof tokens); }
    Routed download() const {
        const std::vector<uint8_t> bytes = workspace_.download();
        const auto words = [&](size_t offset, int64_t count) {
            std::vector<int32_t> v(static_cast<size_t>(count));
            std::memcpy(v.data(), bytes.data() + offset, v.size() * 4);
            return v;
        };
        Routed r;
        r.expert_sizes = words(layout_.expert_sizes, shape_.local_experts);
        r.token_of_row = words(layout_.token_of_row, layout_.max_choices);
        r.row_of_choice = words(layout_.row_of_choice, layout_.max_choices);
        uint32_t flags = 0;
        const std::vector<uint8_t> status = status_.download();
        std::memcpy(&flags, status.data(), 4);
        r.flags = flags;
        return r;
    }

private:
    RoutingShape shape_;
    RoutingLayout layout_{};
    DeviceBuffer ids_, workspace_, status_, tokens_;
};

/// Checks a device result against the reference for `tokens` (the clamped T): equal where
/// written, the poison where not.
void check_routed(const RoutingRig& rig, const Routed& got, const Routed& want, int64_t tokens,
                  uint8_t poison) {
    const RoutingShape& s = rig.shape();
    const int64_t choices = tokens * s.top_k;
    const auto rows = static_cast<int64_t>(want.token_of_row.size());
    const int32_t poisoned = static_cast<int32_t>(word_of(poison));
    INFO("T " << tokens << " of " << s.max_tokens << ", k " << s.top_k << ", experts ["
              << s.first_expert << ", +" << s.local_experts << ") of " << s.num_experts
              << (s.ids_int64 ? ", int64 ids" : ", int32 ids") << ", chunks of "
              << rig.layout().chunk_choices);
    CHECK(got.flags == want.flags);
    const int64_t size_diff =
        first_difference(got.expert_sizes.data(), want.expert_sizes.data(), s.local_experts);
    INFO("first expert size that differs: " << size_diff);
    CHECK(size_diff < 0);
    const int64_t choice_diff =
        first_difference(got.row_of_choice.data(), want.row_of_choice.data(), choices);
    INFO("first row_of_choice that differs: " << choice_diff);
    CHECK(choice_diff < 0);
    const int64_t row_diff =
        first_difference(got.token_of_row.data(), want.token_of_row.data(), rows);
    INFO("first token_of_row that differs: " << row_diff);
    CHECK(row_diff < 0);
    const std::vector<int32_t> untouched(static_cast<size_t>(rig.layout().max_choices), poisoned);
    const int64_t choice_tail = first_difference(
        got.row_of_choice.data() + choices, untouched.data(), rig.layout().max_choices - choices);
    INFO("first row_of_choice past T * k that was written: " << choice_tail);
    CHECK(choice_tail < 0);
    const int64_t row_tail = first_difference(got.token_of_row.data() + rows, untouched.data(),
                                              rig.layout().max_choices - rows);
    INFO("first token_of_row past the routed rows that was written: " << row_tail);
    CHECK(row_tail < 0);
}

/// Runs routing twice (two poisons, the second with PDL) and checks both against the
/// reference and each other.
void check_routing(const RoutingShape& s, const std::vector<int64_t>& ids, int64_t tokens,
                   const std::string& name) {
    INFO("case: " << name);
    RoutingRig rig(s);
    rig.upload_ids(ids);
    const Routed want = reference_routing(s, ids, tokens);
    Stream stream;
    Routed first;
    for (const uint8_t poison : {uint8_t{0xA5}, uint8_t{0x00}}) {
        rig.prepare(poison);
        rig.launch(tokens, false, poison == 0x00, stream.get());
        MGT_CUDA_REQUIRE(cudaStreamSynchronize(stream.get()));
        const Routed got = rig.download();
        check_routed(rig, got, want, tokens, poison);
        if (poison == 0xA5) {
            first = got;
        } else {
            const int64_t rows = static_cast<int64_t>(want.token_of_row.size());
            CHECK(first.expert_sizes == got.expert_sizes);
            CHECK(first_difference(first.row_of_choice.data(), got.row_of_choice.data(),
                                   tokens * s.top_k) < 0);
            CHECK(first_difference(first.token_of_row.data(), got.token_of_row.data(), rows) < 0);
        }
    }
}

/// tokens * top_k ids: uniform over [lo, hi], with each id replaced by one of `hostile` with
/// probability `hostile_rate`.
std::vector<int64_t> random_ids(int64_t count, int64_t lo, int64_t hi, uint32_t seed,
                                const std::vector<int64_t>& hostile = {},
                                double hostile_rate = 0.0) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> id(lo, hi);
    std::uniform_real_distribution<double> coin(0.0, 1.0);
    std::uniform_int_distribution<size_t> pick(0, hostile.empty() ? 0 : hostile.size() - 1);
    std::vector<int64_t> ids(static_cast<size_t>(count));
    for (int64_t& v : ids)
        v = (!hostile.empty() && coin(rng) < hostile_rate) ? hostile[pick(rng)] : id(rng);
    return ids;
}

// ------------------------------------------------------------------------------------------
// Combine
// ------------------------------------------------------------------------------------------

float to_float(moegemm_dtype_t t, uint16_t bits) {
    return t == MOEGEMM_DTYPE_BF16 ? float_from_bf16(bits) : float_from_f16(bits);
}
uint16_t from_float(moegemm_dtype_t t, float x) {
    return t == MOEGEMM_DTYPE_BF16 ? bf16_from_float(x) : f16_from_float(x);
}

/// out rows [0, tokens): fp32 products and sums in increasing j, each rounded (the volatile
/// product keeps the compiler from fusing them), converted once.
std::vector<uint16_t> reference_combine(const CombineShape& s, const std::vector<uint16_t>& y,
                                        const std::vector<int32_t>& rows,
                                        const std::vector<float>& weights, int64_t tokens) {
    const int64_t h = s.hidden;
    const int64_t rows_of_y = s.max_tokens * s.top_k;
    std::vector<uint16_t> out(static_cast<size_t>(tokens * h));
    std::vector<float> acc(static_cast<size_t>(h));
    for (int64_t t = 0; t < tokens; ++t) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = 0; j < s.top_k; ++j) {
            const int32_t r = rows[static_cast<size_t>(t * s.top_k + j)];
            if (r < 0 || r >= rows_of_y) continue;
            const float w = weights[static_cast<size_t>(t * s.top_k + j)];
            const uint16_t* src = y.data() + static_cast<size_t>(r) * h;
            for (int64_t c = 0; c < h; ++c) {
                volatile float product = w * to_float(s.dtype, src[c]);
                acc[static_cast<size_t>(c)] = acc[static_cast<size_t>(c)] + product;
            }
        }
        for (int64_t c = 0; c < h; ++c)
            out[static_cast<size_t>(t * h + c)] = from_float(s.dtype, acc[static_cast<size_t>(c)]);
    }
    return out;
}

int sm_count() {
    int device = 0, sms = 0;
    MGT_CUDA_REQUIRE(cudaGetDevice(&device));
    MGT_CUDA_REQUIRE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return sms;
}

/// y, weights and an out buffer with guards for one combine shape.
struct CombineRig {
    CombineShape shape;
    std::vector<uint16_t> y;
    std::vector<float> weights;  // [max_tokens, top_k]
    DeviceBuffer y_dev, weights_dev;
    OutputBuffer out;

    CombineRig(const CombineShape& s, uint32_t seed)
        : shape(s), out(static_cast<size_t>(s.max_tokens * s.hidden) * 2) {
        std::mt19937 rng(seed);
        std::uniform_real_distribution<float> value(-4.0f, 4.0f);
        std::uniform_real_distribution<float> weight(-1.5f, 1.5f);
        y.resize(static_cast<size_t>(s.max_tokens * s.top_k * s.hidden));
        for (uint16_t& v : y) v = from_float(s.dtype, value(rng));
        weights.resize(static_cast<size_t>(s.max_tokens * s.top_k));
        for (float& w : weights) w = weight(rng);
        y_dev = DeviceBuffer(y.size() * 2);
        upload_now(y_dev, y.data(), y.size() * 2);
        weights_dev = DeviceBuffer(weights.size() * 4 + kInputSlack);
        upload_now(weights_dev, weights.data(), weights.size() * 4);
    }
    void launch(const int32_t* rows_dev, int64_t tokens, const int32_t* tokens_dev,
                bool dependent_launch, cudaStream_t stream) {
        MGT_REQUIRE_OK(moegemm::testing::moe_launch_combine(
            shape, y_dev.get(), rows_dev, static_cast<const float*>(weights_dev.get()),
            tokens_dev ? 0 : tokens, tokens_dev, out.d(), sm_count(), dependent_launch, stream));
    }
    /// Checks out's rows [0, tokens) bitwise, and that the rest and the guards kept the poison.
    void check(const std::vector<int32_t>& rows, int64_t tokens) const {
        const std::vector<uint16_t> want = reference_combine(shape, y, rows, weights, tokens);
        const std::vector<uint8_t> got = out.download();
        std::vector<uint16_t> written(want.size());
        std::memcpy(written.data(), got.data() + kGuardBytes, written.size() * 2);
        int64_t first = -1;
        for (size_t i = 0; i < want.size() && first < 0; ++i)
            if (written[i] != want[i]) first = static_cast<int64_t>(i);
        INFO("H " << shape.hidden << ", k " << shape.top_k << ", T " << tokens << " of "
                  << shape.max_tokens << ", " << dtype_name(shape.dtype));
        if (first >= 0) {
            INFO("first difference: token " << first / shape.hidden << ", column "
                                            << first % shape.hidden << ": got 0x" << std::hex
                                            << written[first] << ", want 0x" << want[first]);
            CHECK(first < 0);
        }
        const size_t written_end = kGuardBytes + want.size() * 2;
        CHECK(count_unpoisoned(got, 0, kGuardBytes) == 0);
        CHECK(count_unpoisoned(got, written_end, got.size()) == 0);
    }
};

/// Routes `ids` on the GPU, combines the routed rows, checks both; twice, bitwise equal.
void check_layer(const RoutingShape& rs, int64_t hidden, moegemm_dtype_t dtype,
                 const std::vector<int64_t>& ids, int64_t tokens, uint32_t seed) {
    RoutingRig rig(rs);
    rig.upload_ids(ids);
    CombineShape cs;
    cs.hidden = hidden;
    cs.top_k = rs.top_k;
    cs.max_tokens = rs.max_tokens;
    cs.dtype = dtype;
    CombineRig combine(cs, seed);
    const Routed want = reference_routing(rs, ids, tokens);
    Stream stream;
    std::vector<uint8_t> first_out;
    for (int run = 0; run < 2; ++run) {
        rig.prepare(0xA5);
        combine.out.poison();
        rig.launch(tokens, false, run == 1, stream.get());
        combine.launch(rig.row_of_choice(), tokens, nullptr, run == 1, stream.get());
        MGT_CUDA_REQUIRE(cudaStreamSynchronize(stream.get()));
        check_routed(rig, rig.download(), want, tokens, 0xA5);
        combine.check(want.row_of_choice, tokens);
        const std::vector<uint8_t> out = combine.out.download();
        if (run == 0)
            first_out = out;
        else
            CHECK(out == first_out);
    }
}

}  // namespace

TEST_CASE("routing matches the reference exactly, hostile ids included",
          "[moe_routing][correctness]") {
    if (not_sm90()) return;
    const int64_t n1k = 16384;
    // Decode and small cases.
    check_routing(shape_of(1, 1, 1), {0}, 1, "T = 1, k = 1, E = 1");
    check_routing(shape_of(1, 1, 1), {7}, 1, "T = 1, E = 1, an id past E");
    check_routing(shape_of(128, 8, n1k), random_ids(8, 0, 127, 1), 1, "T = 1 of 16384, k = 8");
    check_routing(shape_of(8, 2, 64), random_ids(128, 0, 7, 2), 37, "T = 37 of 64");
    check_routing(shape_of(8, 2, 64), random_ids(128, 0, 7, 3), 0, "T = 0: sizes are zeros");
    check_routing(shape_of(8, 2, 64), random_ids(128, 0, 7, 4), 64, "T = max_tokens");

    // Hostile ids.
    check_routing(shape_of(16, 4, 300),
                  random_ids(1200, 0, 15, 5, {-1, 16, 17, -16, kI32Min, kI32Max}, 0.1), 300,
                  "int32 ids: negative and >= E");
    check_routing(shape_of(16, 4, 300, true),
                  random_ids(1200, 0, 15, 6,
                             {-1, 16, int64_t{1} << 31, (int64_t{1} << 32) + 3,
                              -(int64_t{1} << 32) + 2, kI64Min, kI64Max},
                             0.1),
                  300, "int64 ids: negative, >= E, past 2^31 (truncating to valid ids)");
    check_routing(shape_of(16, 4, 300, true), random_ids(1200, -5, 20, 7), 300,
                  "int64 ids, about a third out of range");
    check_routing(shape_of(4, 2, 50), std::vector<int64_t>(100, -3), 50, "every id negative");

    // Shapes of the distribution.
    check_routing(shape_of(16, 8, n1k), std::vector<int64_t>(8 * n1k, 5), n1k,
                  "every choice on one expert (each token picks it 8 times), 131072 rows");
    check_routing(shape_of(8, 4, 100), random_ids(400, 2, 3, 8), 100,
                  "tokens choosing the same expert twice or more");
    {
        std::vector<int64_t> even = random_ids(1000, 0, 7, 9);
        for (int64_t& v : even) v *= 2;  // experts 0, 2, ..., 14 of 64
        check_routing(shape_of(64, 2, 500), even, 500, "experts with no tokens");
    }
    {
        // Skewed: half the choices on expert 0, so it spans every chunk.
        std::vector<int64_t> skewed = random_ids(8 * n1k, 0, 255, 10);
        for (size_t i = 0; i < skewed.size(); i += 2) skewed[i] = 0;
        check_routing(shape_of(256, 8, n1k), skewed, n1k, "skewed: half the choices on expert 0");
    }

    // Every chunk size: 1024 (E = 128), 2048 (E = 512), 4096 (E = 1024), 8192 (past the budget).
    check_routing(shape_of(128, 8, n1k), random_ids(8 * n1k, 0, 127, 11), n1k,
                  "E 128, T 16384, k 8");
    check_routing(shape_of(128, 8, n1k), random_ids(8 * n1k, 0, 127, 12), 12345,
                  "E 128, T 12345 of 16384");
    check_routing(shape_of(512, 8, n1k), random_ids(8 * n1k, 0, 511, 13), n1k,
                  "E 512, T 16384, k 8");
    check_routing(shape_of(1024, 8, n1k), random_ids(8 * n1k, 0, 1023, 14), n1k,
                  "E 1024, T 16384, k 8");
    check_routing(shape_of(1024, 8, 65536, true), random_ids(8 * 65536, 0, 1023, 15), 65536,
                  "E 1024, T 65536, k 8: chunks of 8192");
    check_routing(shape_of(1024, 8, 65536, true), random_ids(8 * 65536, 0, 1023, 16), 40001,
                  "E 1024, T 40001 of 65536");
    check_routing(shape_of(1024, 1, n1k), random_ids(n1k, 0, 1023, 17), n1k, "E 1024, k 1");
    check_routing(shape_of(64, 40, 300), random_ids(40 * 300, 0, 63, 18), 300, "k 40");

    // Expert parallelism: ids of other ranks' experts are skipped without a flag.
    check_routing(shape_of(64, 6, 2000, false, 16, 16),
                  random_ids(12000, 0, 63, 19, {-1, 64}, 0.02), 2000,
                  "a rank owning [16, 32) of 64, a few ids out of range");
    check_routing(shape_of(64, 6, 2000, true, 16, 16), random_ids(12000, 0, 63, 20), 2000,
                  "a rank owning [16, 32) of 64: no flag");
    check_routing(shape_of(1024, 8, 4096, false, 1023, 1), random_ids(8 * 4096, 1000, 1023, 21),
                  4096, "a rank owning the last expert only");
    check_routing(shape_of(1024, 8, 4096, false, 0, 1000), random_ids(8 * 4096, 0, 1023, 22), 4096,
                  "a rank owning [0, 1000) of 1024");
}

TEST_CASE("routing reads T from device memory, clamped and flagged", "[moe_routing][correctness]") {
    if (not_sm90()) return;
    const RoutingShape s = shape_of(32, 4, 1000);
    std::vector<int64_t> ids = random_ids(4000, 0, 31, 30);
    ids[4 * 700 + 1] = 99;  // out of range, but only read when T > 700
    RoutingRig rig(s);
    rig.upload_ids(ids);
    Stream stream;
    struct Case {
        int32_t device_tokens;
        int64_t clamped;
        uint32_t flags;
    };
    const Case cases[] = {
        {0, 0, 0},
        {1, 1, 0},
        {517, 517, 0},
        {700, 700, 0},
        {701, 701, kIndexFlag},
        {1000, 1000, kIndexFlag},
        {1001, 1000, kCapFlag | kIndexFlag},
        {static_cast<int32_t>(kI32Max), 1000, kCapFlag | kIndexFlag},
        {-1, 0, kNegFlag},
        {static_cast<int32_t>(kI32Min), 0, kNegFlag},
    };
    for (const Case& c : cases) {
        INFO("device T = " << c.device_tokens);
        for (const bool pdl : {false, true}) {
            rig.prepare(0x5A);
            rig.set_device_tokens(c.device_tokens);
            rig.launch(0, true, pdl, stream.get());
            MGT_CUDA_REQUIRE(cudaStreamSynchronize(stream.get()));
            Routed want = reference_routing(s, ids, c.clamped);
            want.flags |= c.flags;
            check_routed(rig, rig.download(), want, c.clamped, 0x5A);
        }
    }
}

TEST_CASE("combine matches fp32 sums in increasing j bitwise", "[moe_routing][correctness]") {
    if (not_sm90()) return;
    // Routed rows from the routing kernels, then the combine over them.
    check_layer(shape_of(16, 8, 300), 7168, MOEGEMM_DTYPE_BF16, random_ids(2400, -1, 16, 40), 300,
                41);
    check_layer(shape_of(8, 1, 1), 2048, MOEGEMM_DTYPE_BF16, {3}, 1, 42);
    check_layer(shape_of(8, 8, 1), 7168, MOEGEMM_DTYPE_BF16, random_ids(8, 0, 7, 43), 1, 43);
    check_layer(shape_of(8, 2, 64), 8, MOEGEMM_DTYPE_F16, random_ids(128, 0, 7, 44), 37, 44);
    check_layer(shape_of(64, 40, 50), 2056, MOEGEMM_DTYPE_F16, random_ids(2000, 0, 63, 45), 50, 45);
    check_layer(shape_of(128, 8, 4096), 2048, MOEGEMM_DTYPE_BF16, random_ids(8 * 4096, 0, 127, 46),
                4096, 46);
    check_layer(shape_of(64, 6, 2000, true, 16, 16), 4096, MOEGEMM_DTYPE_BF16,
                random_ids(12000, 0, 63, 47), 1500, 47);  // most tokens have no local choice
    check_layer(shape_of(8, 2, 64), 2048, MOEGEMM_DTYPE_BF16, random_ids(128, 0, 7, 48), 0, 48);
}

TEST_CASE("combine drops rows outside y and honours the device T", "[moe_routing][correctness]") {
    if (not_sm90()) return;
    CombineShape s;
    s.hidden = 2304;
    s.top_k = 4;
    s.max_tokens = 100;
    CombineRig rig(s, 50);
    const int64_t rows_of_y = s.max_tokens * s.top_k;
    std::mt19937 rng(51);
    std::uniform_int_distribution<int32_t> row(0, static_cast<int32_t>(rows_of_y - 1));
    const int32_t hostile[] = {-1, -7, static_cast<int32_t>(rows_of_y),
                               static_cast<int32_t>(kI32Max), static_cast<int32_t>(kI32Min)};
    std::vector<int32_t> rows(static_cast<size_t>(rows_of_y));
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = i % 3 == 1 ? hostile[i % 5] : row(rng);
    for (int j = 0; j < s.top_k; ++j)
        rows[static_cast<size_t>(10 * s.top_k + j)] = -1;  // no choice
    DeviceBuffer rows_dev(rows.size() * 4);
    upload_now(rows_dev, rows.data(), rows.size() * 4);
    DeviceBuffer tokens_dev(4);
    Stream stream;
    const auto* rows_ptr = static_cast<const int32_t*>(rows_dev.get());

    rig.out.poison();
    rig.launch(rows_ptr, 77, nullptr, false, stream.get());
    MGT_CUDA_REQUIRE(cudaStreamSynchronize(stream.get()));
    rig.check(rows, 77);

    struct Case {
        int32_t device_tokens;
        int64_t clamped;
    };
    for (const Case c : {Case{-3, 0}, Case{0, 0}, Case{42, 42}, Case{100, 100}, Case{101, 100},
                         Case{static_cast<int32_t>(kI32Max), 100}}) {
        INFO("device T = " << c.device_tokens);
        rig.out.poison();
        upload_now(tokens_dev, &c.device_tokens, 4);
        rig.launch(rows_ptr, 0, static_cast<const int32_t*>(tokens_dev.get()), true, stream.get());
        MGT_CUDA_REQUIRE(cudaStreamSynchronize(stream.get()));
        rig.check(rows, c.clamped);
    }
}

TEST_CASE("routing and combine replay in a CUDA graph with new device counts",
          "[moe_routing][correctness]") {
    if (not_sm90()) return;
    const RoutingShape rs = shape_of(32, 4, 1000, true);
    const std::vector<int64_t> ids = random_ids(4000, -2, 33, 60);
    RoutingRig rig(rs);
    rig.upload_ids(ids);
    CombineShape cs;
    cs.hidden = 1024;
    cs.top_k = rs.top_k;
    cs.max_tokens = rs.max_tokens;
    CombineRig combine(cs, 61);
    Stream stream;

    Graph graph;
    MGT_CUDA_REQUIRE(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
    rig.launch(0, true, true, stream.get());
    combine.launch(rig.row_of_choice(), 0, rig.tokens_device(), true, stream.get());
    MGT_CUDA_REQUIRE(cudaStreamEndCapture(stream.get(), &graph.graph));
    MGT_CUDA_REQUIRE(cudaGraphInstantiate(&graph.exec, graph.graph, 0));

    for (const int32_t tokens : {5, 1000, 0, 1, 333}) {
        INFO("replay with device T = " << tokens);
        rig.prepare(0xA5);
        combine.out.poison();
        rig.set_device_tokens(tokens);
        MGT_CUDA_REQUIRE(cudaGraphLaunch(graph.exec, stream.get()));
        MGT_CUDA_REQUIRE(cudaStreamSynchronize(stream.get()));
        const Routed want = reference_routing(rs, ids, tokens);
        check_routed(rig, rig.download(), want, tokens, 0xA5);
        combine.check(want.row_of_choice, tokens);
    }
}

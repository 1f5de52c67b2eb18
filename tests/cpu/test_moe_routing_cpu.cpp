// The host half of the MoE layer's routing and combine (src/moe/routing.hpp), no GPU needed:
// the workspace layout (aligned, disjoint, sized for the worst execution), the chunk the plan
// picks, the combine grid, the launchers' argument checks, which throw before anything
// reaches CUDA, and how many tokens the decode kernels take. The GPU suite ([moe_routing],
// [moe_layer]) runs the kernels.
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "error.hpp"
#include "expect_error.hpp"
#include "moe/decode_layer.hpp"
#include "moe/routing.hpp"

using namespace moegemm;
using namespace moegemm::moe;
using moegemm::testing::expect_error;

namespace {

RoutingShape shape_of(int32_t experts, int32_t top_k, int64_t max_tokens, int32_t first = 0,
                      int32_t local = 0) {
    RoutingShape s;
    s.num_experts = experts;
    s.first_expert = first;
    s.local_experts = local > 0 ? local : experts;
    s.top_k = top_k;
    s.max_tokens = max_tokens;
    return s;
}

// Every property the kernels rely on, for any valid shape.
void check_layout(const RoutingShape& s) {
    INFO("experts " << s.num_experts << " [" << s.first_expert << ", +" << s.local_experts
                    << ") top_k " << s.top_k << " max_tokens " << s.max_tokens);
    const RoutingLayout l = routing_layout(s);
    const int64_t choices = s.max_tokens * s.top_k;
    CHECK(l.max_choices == choices);

    // Regions: [offset, offset + bytes needed), each 256-byte aligned, in order, disjoint,
    // all within total_bytes.
    const auto stride_bytes = static_cast<std::size_t>(l.count_stride) * sizeof(int32_t);
    const std::vector<std::pair<std::size_t, std::size_t>> regions = {
        {l.expert_sizes, static_cast<std::size_t>(s.local_experts) * sizeof(int32_t)},
        {l.token_of_row, static_cast<std::size_t>(choices) * sizeof(int32_t)},
        {l.row_of_choice, static_cast<std::size_t>(choices) * sizeof(int32_t)},
        {l.chunk_counts, static_cast<std::size_t>(l.chunks) * stride_bytes},
    };
    std::size_t end = 0;
    for (const auto& [offset, bytes] : regions) {
        CHECK(offset % 256 == 0);
        CHECK(offset >= end);
        end = offset + bytes;
    }
    CHECK(end <= l.total_bytes);
    CHECK(l.total_bytes % 256 == 0);
    CHECK(l.total_bytes - end < 256);  // no slack beyond the last region's alignment

    // Counts: rows of 16-byte int4 groups covering every local expert (the scatter kernel
    // gives each of its 256 threads one group).
    CHECK(l.count_stride % 4 == 0);
    CHECK(l.count_stride >= s.local_experts);
    CHECK(l.count_stride < s.local_experts + 4);
    CHECK(l.count_stride / 4 <= 256);

    // Chunks: one of the compiled sizes, covering every choice with no empty chunk; the
    // smallest within the count budget (or the largest size when none is).
    bool known = false;
    for (const int32_t c : kRoutingChunkChoices) known = known || c == l.chunk_choices;
    CHECK(known);
    CHECK(int64_t{l.chunks} * l.chunk_choices >= choices);
    CHECK(int64_t{l.chunks - 1} * l.chunk_choices < choices);
    const bool within_budget = int64_t{l.chunks} * l.count_stride <= kRoutingCountBudget;
    CHECK((within_budget || l.chunk_choices == kRoutingChunkChoices[3]));
    if (l.chunk_choices > kRoutingChunkChoices[0]) {
        const int64_t smaller = l.chunk_choices / 2;
        const int64_t smaller_chunks = (choices + smaller - 1) / smaller;
        CHECK(smaller_chunks * l.count_stride > kRoutingCountBudget);
    }
    // Packed (expert, rank) pairs: ranks below 2^16, experts below 2^15.
    CHECK(l.chunk_choices <= 65536);
    CHECK(s.local_experts <= 32768);

    // Typed views land on the offsets.
    unsigned char* base = reinterpret_cast<unsigned char*>(uintptr_t{1} << 20);
    const RoutingBuffers b = routing_buffers(l, base);
    CHECK(reinterpret_cast<unsigned char*>(b.expert_sizes) == base + l.expert_sizes);
    CHECK(reinterpret_cast<unsigned char*>(b.token_of_row) == base + l.token_of_row);
    CHECK(reinterpret_cast<unsigned char*>(b.row_of_choice) == base + l.row_of_choice);
}

}  // namespace

TEST_CASE("routing workspace layout: aligned, disjoint, sized for max_tokens", "[moe_routing]") {
    const int32_t experts[] = {1, 2, 3, 4, 5, 8, 60, 128, 129, 256, 1000, 1024};
    const int32_t top_ks[] = {1, 2, 6, 8};
    const int64_t tokens[] = {1, 2, 7, 128, 129, 1000, 4096, 16384, 65536, 1 << 20};
    for (const int32_t e : experts)
        for (const int32_t k : top_ks)
            for (const int64_t t : tokens)
                if (k <= e) check_layout(shape_of(e, k, t));
    // A rank owning a sub-range, and a single expert of many.
    check_layout(shape_of(256, 8, 16384, 64, 32));
    check_layout(shape_of(1024, 8, 16384, 1023, 1));
    check_layout(shape_of(3000, 4, 5000, 2000, 1000));
    // The capacity bound: max_tokens * top_k = 2^31 - 1.
    check_layout(shape_of(1, 1, std::numeric_limits<int32_t>::max()));
    check_layout(shape_of(8, 7, std::numeric_limits<int32_t>::max() / 7));
}

TEST_CASE("routing chunk choice at the layer's sizes", "[moe_routing]") {
    struct Expect {
        int32_t experts, top_k;
        int64_t max_tokens;
        int32_t chunk, chunks;
    };
    const Expect cases[] = {
        {128, 8, 16384, 1024, 128},  // 131072 choices, 128 x 128 counts
        {256, 8, 16384, 1024, 128},  // 128 x 256 = the budget exactly
        {1024, 8, 16384, 4096, 32},  // 32 x 1024
        {8, 2, 1, 1024, 1},          // decode: one block
        {1024, 8, 1, 1024, 1},
        {1024, 8, 1 << 20, 8192, 1024},  // past the budget: the largest chunk
    };
    for (const Expect& c : cases) {
        const RoutingLayout l = routing_layout(shape_of(c.experts, c.top_k, c.max_tokens));
        INFO("E " << c.experts << " k " << c.top_k << " max_tokens " << c.max_tokens);
        CHECK(l.chunk_choices == c.chunk);
        CHECK(l.chunks == c.chunks);
    }
}

TEST_CASE("routing rejects shapes out of range", "[moe_routing]") {
    const auto layout_of = [](RoutingShape s) { return [s] { routing_layout(s); }; };
    RoutingShape s = shape_of(8, 2, 100);
    s.num_experts = 0;
    expect_error(layout_of(s), MOEGEMM_STATUS_INVALID_VALUE, "num_experts = 0");
    s = shape_of(8, 2, 100);
    s.local_experts = 0;
    expect_error(layout_of(s), MOEGEMM_STATUS_INVALID_VALUE, "local_experts = 0");
    s = shape_of(2048, 2, 100);
    s.local_experts = 1025;
    expect_error(layout_of(s), MOEGEMM_STATUS_INVALID_VALUE, "local_experts = 1025");
    expect_error(layout_of(shape_of(8, 2, 100, 6, 3)), MOEGEMM_STATUS_INVALID_VALUE, "not within");
    expect_error(layout_of(shape_of(8, 2, 100, -1, 3)), MOEGEMM_STATUS_INVALID_VALUE, "not within");
    expect_error(layout_of(shape_of(8, 0, 100)), MOEGEMM_STATUS_INVALID_VALUE, "top_k = 0");
    expect_error(layout_of(shape_of(8, 2, 0)), MOEGEMM_STATUS_INVALID_VALUE, "max_tokens = 0");
    expect_error(layout_of(shape_of(8, 2, -5)), MOEGEMM_STATUS_INVALID_VALUE, "max_tokens = -5");
    const int64_t too_many = std::numeric_limits<int32_t>::max() / 8 + 1;
    expect_error(layout_of(shape_of(8, 8, too_many)), MOEGEMM_STATUS_INVALID_VALUE, "max_tokens");
}

TEST_CASE("routing launcher checks its arguments before launching", "[moe_routing]") {
    const RoutingShape s = shape_of(8, 2, 100);
    void* const workspace = reinterpret_cast<void*>(uintptr_t{1} << 20);
    const void* const ids = reinterpret_cast<const void*>(uintptr_t{1} << 24);
    uint32_t* const status = reinterpret_cast<uint32_t*>(uintptr_t{1} << 28);
    expect_error([&] { launch_routing(s, ids, 101, nullptr, workspace, status, false, nullptr); },
                 MOEGEMM_STATUS_INVALID_VALUE, "num_tokens = 101");
    expect_error([&] { launch_routing(s, ids, -1, nullptr, workspace, status, false, nullptr); },
                 MOEGEMM_STATUS_INVALID_VALUE, "num_tokens = -1");
    expect_error([&] { launch_routing(s, nullptr, 5, nullptr, workspace, status, false, nullptr); },
                 MOEGEMM_STATUS_INVALID_VALUE, "topk_ids is NULL");
    expect_error(
        [&] {
            launch_routing(s, ids, 5, nullptr, static_cast<char*>(workspace) + 16, status, false,
                           nullptr);
        },
        MOEGEMM_STATUS_MISALIGNED, "256-byte");
    expect_error([&] { launch_routing(s, ids, 5, nullptr, workspace, nullptr, false, nullptr); },
                 MOEGEMM_STATUS_INVALID_VALUE, "status_word is NULL");
    expect_error(
        [&] {
            launch_routing(shape_of(8, 2, 0), ids, 0, nullptr, workspace, status, false, nullptr);
        },
        MOEGEMM_STATUS_INVALID_VALUE, "max_tokens = 0");
}

TEST_CASE("combine grid: one block per item up to the resident blocks", "[moe_routing]") {
    CombineShape s;
    s.hidden = 7168;  // 896 vectors: 4 slabs of 256
    s.top_k = 8;
    s.max_tokens = 1;
    CHECK(combine_grid(s, 132) == 4);
    s.hidden = 2048;  // 1 slab
    CHECK(combine_grid(s, 132) == 1);
    s.hidden = 8;
    CHECK(combine_grid(s, 132) == 1);
    s.max_tokens = 100;
    CHECK(combine_grid(s, 132) == 100);
    s.max_tokens = 16384;
    CHECK(combine_grid(s, 132) == 132 * kCombineBlocksPerSm);
    CHECK(combine_grid(s, 1) == kCombineBlocksPerSm);
    s.hidden = 2056;  // 257 vectors: 2 slabs
    s.max_tokens = 3;
    CHECK(combine_grid(s, 132) == 6);
}

TEST_CASE("combine rejects shapes and arguments out of range", "[moe_routing]") {
    CombineShape s;
    s.hidden = 4096;
    s.top_k = 2;
    s.max_tokens = 64;
    const auto grid_of = [](CombineShape c, int32_t sms) {
        return [c, sms] { combine_grid(c, sms); };
    };
    expect_error(grid_of(s, 0), MOEGEMM_STATUS_INVALID_VALUE, "sm_count = 0");
    CombineShape bad = s;
    bad.hidden = 4100;
    expect_error(grid_of(bad, 132), MOEGEMM_STATUS_MISALIGNED, "hidden = 4100");
    bad.hidden = 0;
    expect_error(grid_of(bad, 132), MOEGEMM_STATUS_MISALIGNED, "hidden = 0");
    bad = s;
    bad.top_k = 0;
    expect_error(grid_of(bad, 132), MOEGEMM_STATUS_INVALID_VALUE, "top_k = 0");
    bad = s;
    bad.max_tokens = 0;
    expect_error(grid_of(bad, 132), MOEGEMM_STATUS_INVALID_VALUE, "max_tokens = 0");
    bad = s;
    bad.dtype = MOEGEMM_DTYPE_F32;
    expect_error(grid_of(bad, 132), MOEGEMM_STATUS_NOT_SUPPORTED, "BF16 or F16");

    const void* const y = reinterpret_cast<const void*>(uintptr_t{1} << 24);
    const int32_t* const rows = reinterpret_cast<const int32_t*>(uintptr_t{1} << 26);
    const float* const weights = reinterpret_cast<const float*>(uintptr_t{1} << 27);
    void* const out = reinterpret_cast<void*>(uintptr_t{1} << 28);
    expect_error(
        [&] { launch_combine(s, y, rows, weights, 65, nullptr, out, 132, false, nullptr); },
        MOEGEMM_STATUS_INVALID_VALUE, "num_tokens = 65");
    expect_error(
        [&] { launch_combine(s, nullptr, rows, weights, 3, nullptr, out, 132, false, nullptr); },
        MOEGEMM_STATUS_INVALID_VALUE, "is NULL");
    expect_error(
        [&] {
            launch_combine(s, static_cast<const char*>(y) + 8, rows, weights, 3, nullptr, out, 132,
                           false, nullptr);
        },
        MOEGEMM_STATUS_MISALIGNED, "16-byte");
}

TEST_CASE("decode kernels: tokens within 32 choices and the staged rows", "[moe_routing]") {
    DecodeShape s;
    s.top_k = 8;
    s.hidden = 2048;
    s.intermediate = 768;
    s.max_tokens = 4096;
    CHECK(decode_token_limit(s) == 4);  // Qwen3-30B-A3B: 4 tokens are 32 choices
    s.max_tokens = 3;
    CHECK(decode_token_limit(s) == 3);  // never above the plan's capacity
    // Mixtral-8x7B (top-2, I = 14336): one token's two FC1 rows take 56 KB, two would not fit.
    s = DecodeShape{};
    s.top_k = 2;
    s.hidden = 4096;
    s.intermediate = 14336;
    s.max_tokens = 256;
    CHECK(decode_token_limit(s) == 1);
    // DeepSeek-V3 at one rank (H = 7168, I = 2048, top-8): the FC1 rows of 3 tokens.
    s.top_k = 8;
    s.hidden = 7168;
    s.intermediate = 2048;
    CHECK(decode_token_limit(s) == 3);
    // x's rows bound it: H = 65536 is 128 KB a token.
    s.top_k = 1;
    s.hidden = 65536;
    s.intermediate = 64;
    CHECK(decode_token_limit(s) == 0);
    s.hidden = 1024;
    CHECK(decode_token_limit(s) == 32);
    s.top_k = 32;
    CHECK(decode_token_limit(s) == 1);
    s.top_k = 33;  // more choices than one token may take
    CHECK(decode_token_limit(s) == 0);
    s.top_k = 0;
    CHECK(decode_token_limit(s) == 0);
}

// The native plan's launch decisions (src/native/launch_plan.hpp), run on the CPU: the grid,
// the stages, the tile hand-out, the host schedule and the switches the kernel reads, for each
// kind of problem and each comparison option.
#include <cstdint>
#include <numeric>
#include <vector>

#include <catch2/catch.hpp>

#include "native/grouped_gemm_launch.hpp"
#include "native/grouped_gemm_params.hpp"
#include "native/launch_plan.hpp"
#include "native/tile_scheduler.cuh"
#include "problem.hpp"

using namespace moegemm;
using namespace moegemm::native;

namespace {

DeviceCaps h100(int sms = 132) {
    DeviceCaps d;
    d.cc_major = 9;
    d.sm_count = sms;
    d.smem_per_block_optin = 227 * 1024;
    d.l2_bytes = 50u << 20;
    return d;
}

struct Case {
    ProblemDesc problem;
    Config config;
    GroupedGemmEntry instance;
};

Case make_case(moegemm_dtype_t in, moegemm_scale_mode_t scales, int32_t experts, int64_t n,
               int64_t k, int64_t max_rows, Config config,
               moegemm_layout_t layout = MOEGEMM_LAYOUT_VARIABLE,
               moegemm_dtype_t out = MOEGEMM_DTYPE_BF16) {
    moegemm_problem_t raw = default_problem();
    raw.layout = layout;
    raw.num_experts = experts;
    raw.n = n;
    raw.k = k;
    raw.max_rows = max_rows;
    raw.a_type = raw.b_type = in;
    raw.d_type = out;
    raw.scale_mode = scales;
    Case c{validate_problem(&raw), config, {}};
    const GroupedGemmShape shape{config.block_m, config.block_n, config.tma_store,
                                 config.cluster_n, false, config.swap_ab};
    c.instance = in == MOEGEMM_DTYPE_E4M3 ? grouped_gemm_e4m3(shape, out)
                                          : grouped_gemm_bf16(shape, out);
    REQUIRE(c.instance.stages != nullptr);
    return c;
}

LaunchPlan plan_host(const Case& c, const std::vector<int32_t>& rows, DeviceCaps d = h100()) {
    return plan_launch(c.config, c.problem, d, make_host_sizes(c.problem, rows.data()),
                       c.instance);
}

LaunchPlan plan_device(const Case& c, DeviceCaps d = h100()) {
    static const int32_t fake_device_sizes[MOEGEMM_MAX_EXPERTS] = {};
    return plan_launch(c.config, c.problem, d, make_device_sizes(c.problem, fake_device_sizes),
                       c.instance);
}

constexpr Config kWide{128, 256, true, 1};
constexpr Config kWidePair{128, 256, true, 2};
constexpr Config kDecode{64, 128, false, 1};
constexpr Config kSwapAB{64, 128, false, 1, true};

}  // namespace

TEST_CASE("launch plan: the grid is one CTA per SM in whole clusters, fewer with fewer tiles",
          "[launch]") {
    const std::vector<int32_t> many(8, 2048);  // 8 x 16 x 16 tiles of 128 x 256
    const Case wide = make_case(MOEGEMM_DTYPE_BF16, MOEGEMM_SCALE_NONE, 8, 4096, 4096, 16384, kWide);
    CHECK(plan_host(wide, many).grid == 132);
    CHECK(plan_device(wide).grid == 132);
    CHECK(plan_host(wide, many, h100(131)).grid == 131);
    const Case pair =
        make_case(MOEGEMM_DTYPE_E4M3, MOEGEMM_SCALE_PER_TENSOR, 8, 4096, 4096, 16384, kWidePair);
    CHECK(plan_host(pair, many, h100(131)).grid == 130);  // whole clusters of 2
    // 3 experts of 100 rows, N 512: 3 x 1 x 2 tiles.
    const Case few = make_case(MOEGEMM_DTYPE_BF16, MOEGEMM_SCALE_NONE, 3, 512, 256, 300, kWide);
    CHECK(plan_host(few, {100, 100, 100}).grid == 6);
    CHECK(plan_host(few, {0, 0, 0}).grid == 0);  // nothing to launch
    CHECK(plan_device(few).grid == 132);         // the GPU decides how many tiles there are
}

TEST_CASE("launch plan: the host builds the schedule where the instance can copy it", "[launch]") {
    const std::vector<int32_t> rows = {300, 0, 17, 1024, 5};
    Case bf16 = make_case(MOEGEMM_DTYPE_BF16, MOEGEMM_SCALE_NONE, 5, 1024, 512, 2000, kWide);
    const LaunchPlan built = plan_host(bf16, rows);
    REQUIRE(built.host_schedule);
    std::vector<int32_t> expected(static_cast<std::size_t>(schedule_ints(5)));
    build_host_schedule(RowLayout::Variable, rows.data(), 5, 2000, 128, 4, expected.data());
    CHECK(built.host_words == expected);
    // With the option off, or with device sizes, or in the serial-prologue instances (fp8
    // 128 x 256), the kernel builds it from the raw sizes.
    bf16.problem.options.host_schedule = false;
    LaunchPlan raw = plan_host(bf16, rows);
    CHECK_FALSE(raw.host_schedule);
    CHECK(raw.host_words == rows);
    CHECK(plan_device(bf16).host_words.empty());
    const Case fp8 = make_case(MOEGEMM_DTYPE_E4M3, MOEGEMM_SCALE_PER_TENSOR, 5, 1024, 512, 2000, kWide);
    raw = plan_host(fp8, rows);
    CHECK_FALSE(raw.host_schedule);
    CHECK(raw.host_words == rows);
    // A schedule of more words than the parameter holds (3 E + 1 > MOEGEMM_MAX_EXPERTS).
    const int32_t experts = MOEGEMM_MAX_EXPERTS / 3 + 1;
    const Case wide = make_case(MOEGEMM_DTYPE_BF16, MOEGEMM_SCALE_NONE, experts, 256, 256,
                                experts * 10, kWide);
    CHECK_FALSE(plan_host(wide, std::vector<int32_t>(experts, 10)).host_schedule);
}

TEST_CASE("launch plan: tile tickets, and fp8 BLOCK scales in shared memory or from memory",
          "[launch]") {
    const std::vector<int32_t> rows(32, 300);
    Case block = make_case(MOEGEMM_DTYPE_E4M3, MOEGEMM_SCALE_BLOCK, 32, 2048, 1024, 32 * 300, kWide);
    const LaunchPlan ring = plan_host(block, rows);
    CHECK(ring.block_scale_ring > 0);
    CHECK(ring.stages == block.instance.block_scale_ring_stages(32));
    CHECK(ring.block_scale_ring == block.instance.block_scale_ring(32, ring.stages));
    CHECK(ring.tile_tickets);  // the producer hands each cluster tile to the scale warps
    // Without the ring the consumers load the scales of a tile before its first stage: round
    // robin, so that they know the tile in advance.
    block.problem.options.block_scale_ring = false;
    const LaunchPlan global = plan_host(block, rows);
    CHECK(global.block_scale_ring == 0);
    CHECK(global.stages == block.instance.stages(32));
    CHECK_FALSE(global.tile_tickets);
    // 64-row tiles (decode) read BLOCK scales from memory.
    const Case decode =
        make_case(MOEGEMM_DTYPE_E4M3, MOEGEMM_SCALE_BLOCK, 32, 2048, 1024, 32 * 300, kDecode);
    CHECK(plan_host(decode, std::vector<int32_t>(32, 8)).block_scale_ring == 0);
    // Other modes: tickets unless the option is off.
    Case bf16 = make_case(MOEGEMM_DTYPE_BF16, MOEGEMM_SCALE_NONE, 32, 2048, 1024, 32 * 300, kWide);
    CHECK(plan_host(bf16, rows).tile_tickets);
    CHECK(plan_device(bf16).tile_tickets);
    bf16.problem.options.tile_tickets = false;
    CHECK_FALSE(plan_host(bf16, rows).tile_tickets);
}

TEST_CASE("launch plan: halves without rows skip their MMAs where it pays and the instance can",
          "[launch]") {
    // 64 rows per expert on 128-row tiles: half of the MMA work is in halves without rows.
    const std::vector<int32_t> half(16, 64);
    // A 2-row tail in one expert of eight: under the round-robin threshold.
    std::vector<int32_t> tail(8, 1024);
    tail[3] = 1026;
    Case bf16 = make_case(MOEGEMM_DTYPE_BF16, MOEGEMM_SCALE_NONE, 16, 1024, 512, 16 * 1100, kWide);
    CHECK(plan_host(bf16, half).skip_idle_halves);
    CHECK(plan_device(bf16).skip_idle_halves);  // tickets: at any share
    bf16.problem.options.skip_idle_halves = false;
    CHECK_FALSE(plan_host(bf16, half).skip_idle_halves);
    // Round robin (BLOCK scales from memory) only from the threshold share of the host sizes.
    Case block = make_case(MOEGEMM_DTYPE_E4M3, MOEGEMM_SCALE_BLOCK, 16, 1024, 512, 16 * 1100, kWide);
    block.problem.options.block_scale_ring = false;
    CHECK(plan_host(block, half).skip_idle_halves);
    Case block8 = make_case(MOEGEMM_DTYPE_E4M3, MOEGEMM_SCALE_BLOCK, 8, 1024, 512, 8 * 1100, kWide);
    block8.problem.options.block_scale_ring = false;
    CHECK_FALSE(plan_host(block8, tail).skip_idle_halves);
    CHECK_FALSE(plan_device(block8).skip_idle_halves);  // round robin, share unknown
    // 64-row tiles have no halves; the one instance without uniform offsets never skips.
    const Case decode = make_case(MOEGEMM_DTYPE_BF16, MOEGEMM_SCALE_NONE, 16, 1024, 512, 16 * 1100,
                                  kDecode);
    CHECK_FALSE(plan_host(decode, half).skip_idle_halves);
    const Case spilling = make_case(MOEGEMM_DTYPE_E4M3, MOEGEMM_SCALE_PER_TENSOR, 16, 1024, 512,
                                    16 * 1100, Config{128, 256, false, 2},
                                    MOEGEMM_LAYOUT_VARIABLE, MOEGEMM_DTYPE_F32);
    CHECK_FALSE(plan_host(spilling, half).skip_idle_halves);
}

TEST_CASE("launch plan: swap-AB decode's first weight copies go without an L2 hint", "[launch]") {
    // qwen3-sized decode: 128 experts of 4 tokens, N 1536, K 2048: a long weight stream.
    const std::vector<int32_t> rows(128, 4);
    Case swap = make_case(MOEGEMM_DTYPE_BF16, MOEGEMM_SCALE_NONE, 128, 1536, 2048, 512, kSwapAB);
    const LaunchPlan plan = plan_host(swap, rows);
    const int64_t tiles = 128 * 12;
    const int64_t copies_per_cta = tiles * (2048 / 64) / plan.grid;
    const int32_t unhinted = weight_copies_without_l2_hint(50u << 20, plan.grid, 128 * 128);
    CHECK(plan.unhinted_weight_copies == unhinted_copies_for_stream(unhinted, copies_per_cta));
    CHECK(plan.unhinted_weight_copies > 0);
    swap.problem.options.unhinted_weight_copies = false;
    CHECK(plan_host(swap, rows).unhinted_weight_copies == 0);
    // Not swap-AB: every copy as the tile's policy says.
    const Case decode = make_case(MOEGEMM_DTYPE_BF16, MOEGEMM_SCALE_NONE, 128, 1536, 2048, 512,
                                  kDecode);
    CHECK(plan_host(decode, rows).unhinted_weight_copies == 0);
}

// The native plan's launch decisions (launch_plan.hpp): pure host code, no CUDA calls.
#include "native/launch_plan.hpp"

#include <algorithm>

#include "error.hpp"
#include "native/grouped_gemm_params.hpp"
#include "native/tile_scheduler.cuh"

namespace moegemm::native {

namespace {

// K-blocks per tile: 128 bytes of each row per k-block, whatever the input type.
int64_t k_blocks_of(const ProblemDesc& p) {
    return (p.k + block_k(p.a_type) - 1) / block_k(p.a_type);
}

// Tile tickets everywhere but with fp8 BLOCK scales read from global memory, whose consumers
// load a tile's first scales before its first stage is full (with tickets they would learn the
// tile only then, and wait for the scales once per tile). BLOCK scales staged in shared memory
// take tickets: the producer hands each cluster tile to the scale warps.
bool uses_tile_tickets(const ProblemDesc& p, bool scale_ring) {
    return p.options.tile_tickets && (p.scale_mode != MOEGEMM_SCALE_BLOCK || scale_ring);
}

}  // namespace

int block_k(moegemm_dtype_t in) { return 128 / static_cast<int>(dtype_bytes(in)); }

RowLayout row_layout(moegemm_layout_t layout) {
    switch (layout) {
        case MOEGEMM_LAYOUT_VARIABLE: return RowLayout::Variable;
        case MOEGEMM_LAYOUT_MASKED: return RowLayout::Masked;
        case MOEGEMM_LAYOUT_FIXED: return RowLayout::Fixed;
    }
    fail(MOEGEMM_STATUS_INTERNAL_ERROR, "unhandled layout {}", static_cast<int>(layout));
}

LaunchPlan plan_launch(const Config& config, const ProblemDesc& p, const DeviceCaps& d,
                       const ExpertSizes& sizes, const GroupedGemmEntry& instance) {
    LaunchPlan plan;
    plan.stages = instance.stages(p.num_experts);
    const bool fp8 = p.a_type == MOEGEMM_DTYPE_E4M3;
    const int32_t tiles_n = static_cast<int32_t>((p.n + config.block_n - 1) / config.block_n);
    // Whole clusters only: a grid of as many clusters as fit on the SMs.
    const int max_grid = d.sm_count / config.cluster_n * config.cluster_n;
    double idle_share = 0;     // idle_half_share of the host sizes (unknown with device sizes)
    int64_t launch_tiles = 0;  // counted from host sizes; with device sizes, expected
    if (sizes.source == SizesSource::Device) {
        plan.grid = max_grid;  // the GPU decides how many tiles there are
        // expected_rows (the caller's hint) rows in every expert
        launch_tiles = int64_t{p.num_experts} * tiles_n *
                       ((std::max<int64_t>(p.expected_rows, 1) + config.block_m - 1) /
                        config.block_m);
    } else {
        // Host sizes (FIXED: full slabs) were validated: the clamps of the schedule change
        // nothing; it counts the tiles the way the kernel will, and may be passed instead.
        plan.host_words = sizes.host;
        std::vector<int32_t> schedule(static_cast<std::size_t>(schedule_ints(p.num_experts)));
        const uint32_t clamps =
            build_host_schedule(row_layout(p.layout), sizes.host.data(), p.num_experts,
                                p.max_rows, config.block_m, tiles_n, schedule.data());
        launch_tiles = schedule.back();  // the tile prefix's total
        plan.grid = static_cast<int>(std::min<int64_t>(launch_tiles, max_grid));
        idle_share = idle_half_share(schedule.data() + p.num_experts, p.num_experts);
        // Unless the option is off, the kernel copies the schedule built here instead of
        // building it, where the instance copies its sizes in parallel (has_parallel_prologue)
        // and the schedule fits where the sizes were.
        if (p.options.host_schedule && clamps == 0 &&
            has_parallel_prologue(fp8, config.block_m, config.block_n) &&
            schedule.size() <= MOEGEMM_MAX_EXPERTS) {
            plan.host_words = std::move(schedule);
            plan.host_schedule = true;
        }
    }
    // fp8 BLOCK scales staged in shared memory by producer warps, which walk the tiles the way
    // the consumers do. On 128-row tiles only (never swap-AB): decode's 64-row tiles have too
    // few k-blocks per tile to gain (docs/design.md). With one stage fewer where that makes
    // room for it (128 x 256 TMA-store tiles from 60 to 153 experts).
    const int ring_stages = fp8 && p.scale_mode == MOEGEMM_SCALE_BLOCK &&
                                    p.options.block_scale_ring && config.block_m == 128
                                ? instance.block_scale_ring_stages(p.num_experts)
                                : 0;
    if (ring_stages > 0) {
        plan.stages = ring_stages;
        plan.block_scale_ring = instance.block_scale_ring(p.num_experts, ring_stages);
    }
    plan.tile_tickets = uses_tile_tickets(p, plan.block_scale_ring != 0);
    // A k-block of a weight tile is 128 bytes of each of its block_n rows, whatever the type;
    // each CTA copies one per k-block of its share of the tiles.
    if (config.swap_ab && p.options.unhinted_weight_copies && plan.grid > 0) {
        plan.unhinted_weight_copies = unhinted_copies_for_stream(
            weight_copies_without_l2_hint(d.l2_bytes, plan.grid,
                                          static_cast<std::size_t>(config.block_n) * 128),
            launch_tiles * k_blocks_of(p) / plan.grid);
    }
    // Consumer warpgroups whose 64 rows of a tile hold none of the expert's skip their MMAs
    // (fewer MMAs keep the clock up under the power cap), in the instances that can
    // (has_uniform_consumer_offsets).
    const bool can_skip = has_uniform_consumer_offsets(
        fp8, config.block_n, config.cluster_n, config.tma_store,
        static_cast<int>(dtype_bytes(p.d_type)));
    plan.skip_idle_halves = can_skip && skips_idle_halves(p.options.skip_idle_halves,
                                                          config.block_m, plan.tile_tickets,
                                                          idle_share);
    return plan;
}

}  // namespace moegemm::native

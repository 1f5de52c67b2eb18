// What a native plan decides before its launches, as a pure function of plain data (the
// problem, the device's capabilities, the sizes, the variant and what its instance reports):
// the grid, the stages, the tile hand-out, and the switches the kernel reads from its
// parameters. The CPU tests pin it without a GPU.
#pragma once

#include <cstdint>
#include <vector>

#include "device_caps.hpp"
#include "native/grouped_gemm_launch.hpp"
#include "problem.hpp"

namespace moegemm::native {

/// What distinguishes the native variants.
struct Config {
    int block_m;    ///< output tile height: 128, or 64 for decode
    int block_n;    ///< output tile width: 128 or 256
    bool tma_store; ///< TMA-store epilogue (16-bit outputs) instead of stores from registers
    int cluster_n;  ///< CTAs per cluster along N sharing the A tile (1 or 2)
    bool swap_ab = false;  ///< weights as wgmma's A, tokens as its B (decode, 64-row tiles)
};

struct LaunchPlan {
    int grid = 0;            ///< CTAs: one per SM in whole clusters, fewer with fewer tiles
    int stages = 0;          ///< pipeline stages (GroupedGemmParams::stages)
    int block_scale_ring = 0;  ///< GroupedGemmParams::block_scale_ring (0: scales from memory)
    bool tile_tickets = false;
    /// GroupedGemmParams::host_sizes: the raw host sizes, or (host_schedule) the schedule the
    /// host built from them; empty with device sizes.
    std::vector<int32_t> host_words;
    bool host_schedule = false;
    bool skip_idle_halves = false;
    int32_t unhinted_weight_copies = 0;
};

/// The launch of variant `config` for problem `p` with `sizes` on device `d`; `instance`: the
/// kernel instance's host functions (stages and BLOCK-ring room per expert count).
LaunchPlan plan_launch(const Config& config, const ProblemDesc& p, const DeviceCaps& d,
                       const ExpertSizes& sizes, const GroupedGemmEntry& instance);

/// The row layout of the kernel's schedule (tile_scheduler.cuh) for a problem's layout.
RowLayout row_layout(moegemm_layout_t layout);

/// K-values per k-block: a 128-byte row of the tile (64 of 16-bit types, 128 of E4M3).
int block_k(moegemm_dtype_t in);

}  // namespace moegemm::native

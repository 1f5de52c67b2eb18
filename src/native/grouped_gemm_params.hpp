// What the host passes to the native grouped GEMM kernel, and the kernel's shared-memory
// layout (host code sizes the launch with it). Plain C++: no device code here.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda.h>

#include "moegemm/moegemm.h"
#include "native/tile_scheduler.cuh"
#include "plan_options.hpp"

namespace moegemm::native {

/// Kernel arguments besides the two tensor maps. Host sizes travel by value (4 KB: kernel
/// parameters may be up to 32 KB since CUDA 12.1), so that a captured graph keeps the sizes
/// it was captured with and no device buffer is rewritten under a launch still in flight.
struct GroupedGemmParams {
    const void* a;                 ///< activations base
    const void* b;                 ///< weights base
    void* d;                       ///< output base
    /// Workspace: kTensorMapsPerCta tensor maps per CTA (128 bytes each), made at launch from
    /// the plan's templates with the addresses above.
    void* tensor_maps;
    const int32_t* device_sizes;   ///< sizes in device memory, or null: use host_sizes
    uint32_t* status_word;         ///< where clamps are recorded (may be null)
    int64_t max_rows;
    int32_t num_experts;
    int32_t n;
    int32_t k;
    RowLayout layout;
    int32_t stages;                ///< pipeline stages: TileConfig::stages(num_experts), set
                                   ///< by the plan (launch sizes shared memory from the same)
    /// 16-byte aligned: the kernel reads them four at a time (copy_sizes_to_smem).
    alignas(16) int32_t host_sizes[MOEGEMM_MAX_EXPERTS];
    // E4M3 inputs only (after the sizes, so that the 16-bit kernels' parameter offsets stay
    // what they were): the scales and how to read them (moegemm_scale_mode_t, header).
    const float* a_scale;
    const float* b_scale;
    int32_t scale_mode;
    /// BLOCK scales only: 0, or where the ring of scale slots starts in shared memory (bytes
    /// from the aligned base, TileConfig::block_scale_ring_offset) when producer warps copy each
    /// k-block's scales there beside its stage, so that the consumers read them there instead
    /// of from global memory; the launch then asks for all of kSmemLimit.
    int32_t block_scale_ring;
    /// Tile tickets (tile_scheduler.cuh): the workspace word from which clusters take their
    /// cluster tiles after the first, or null for round robin (fp8 BLOCK scales not staged in
    /// shared memory).
    unsigned long long* tile_tickets;
    /// Host sizes only: host_sizes holds the schedule the host built (build_host_schedule,
    /// schedule_ints(E) values) instead of the raw sizes; the kernel copies it instead of
    /// building it. Only for instances with the parallel prologue (has_parallel_prologue).
    int32_t host_schedule;
    /// Host side only: launch with programmatic stream serialization (the prologue may overlap
    /// the previous kernel's end; the dependent_launch plan option, MOEGEMM_PDL=0).
    int32_t dependent_launch;
    /// 1: on 128-row tiles, a consumer warpgroup whose 64 rows hold none of the expert's waits
    /// for and frees each stage without multiplying (skips_idle_halves decides).
    int32_t skip_idle_halves;
    /// Swap-AB (decode) only: each CTA's producer issues its first this many weight copies with
    /// no L2 policy and the rest evict-first; 0 where the CTAs' streams are short
    /// (weight_copies_without_l2_hint, unhinted_copies_for_stream; set by the plan).
    int32_t unhinted_weight_copies;

    // Epilogue and gather (16-bit inputs; moegemm_problem_t's 0.2 fields). After the fields
    // above, so that their offsets stay put.
    int32_t d_cols;                ///< columns of D: n, or n / 2 after a gated activation
    /// Nonzero when any of the operations below applies (one uniform test per tile).
    int32_t fused_epilogue;
    const float* alpha;            ///< [E] or null
    const float* row_scale;        ///< one per row of D, or null
    const void* bias;              ///< [E, n] of bias_type, or null
    int32_t bias_type;             ///< moegemm_dtype_t
    int32_t activation;            ///< moegemm_activation_t
    /// Gated activations: B is read through a gate/up tensor map (gate_up_group,
    /// make_gate_up_weights_tensor_map) whose boxes put gate and up rows in groups side by
    /// side, so that every thread's accumulator fragment holds the gate and the up value of
    /// the same output column.
    int32_t gated;
    /// Gated activations: 1 when the first group of each pair of groups (gate_up_group) is the
    /// up half (MOEGEMM_UP_GATE_HALVES), 0 when it is the gate.
    int32_t up_first;
    int32_t gate_layout;           ///< moegemm_gate_layout_t (the bias's column order)
    float activation_alpha;
    float activation_limit;
    /// Gathered A: the row of A (a [gather_rows, K] matrix) of each row of the problem; the
    /// A tensor map then reads single rows (kMapAFull, box height 1). Null otherwise.
    const int32_t* a_rows;
    int32_t gather_rows;
    /// Tests only (the trace_features plan option): nonzero when the kernel ORs the kTrace*
    /// bits of what it did into status_word, the evidence that a feature the plan chose ran.
    int32_t trace_features;
};

/// Whether an instance builds its prologue in parallel (every thread stages the sizes, warps
/// make the tensor maps while one builds the schedule) or serially (one warp each): fp8 with
/// 128 x 256 tiles keeps the serial one, as its consumers have no register to spare (128
/// sums, a 64-register temporary and the scales): with the parallel prologue's code before
/// the role split ptxas spilled two of their values. Those instances serve prefill, where the
/// serial prologue's extra microsecond is negligible. Host and kernel decide it here, together.
constexpr MOEGEMM_HD bool has_parallel_prologue(bool fp8, int block_m, int block_n) {
    return !(fp8 && block_m == 128 && block_n == 256);
}

/// How many weight copies each of `ctas` CTAs of a swap-AB (decode) launch issues with no L2
/// policy before it marks the rest evict-first: enough (`copy_bytes` each) to stream twice
/// the L2's `l2_bytes` through it. Decode reads each weight once, and evict-first copies run
/// faster than unhinted ones from a clean L2. But after a kernel that left the L2 full of
/// dirty lines, an evict-first stream is slowed all along, where an unhinted one pays once to
/// write them back. Two L2s of unhinted copies first (one was not enough) keep most of both
/// (docs/design.md).
constexpr int32_t weight_copies_without_l2_hint(std::size_t l2_bytes, int ctas,
                                                std::size_t copy_bytes) {
    if (ctas <= 0 || copy_bytes == 0) return 0;
    const std::size_t per_cta = static_cast<std::size_t>(ctas) * copy_bytes;
    const std::size_t copies = (2 * l2_bytes + per_cta - 1) / per_cta;
    return copies > 1000000 ? 1000000 : static_cast<int32_t>(copies);
}

/// The unhinted copies each CTA takes of `unhinted` (weight_copies_without_l2_hint) when it
/// has about `copies_per_cta` weight copies in all: all of them where they are at most a
/// quarter of its stream, else none. Unhinted copies run slower than evict-first ones from a
/// clean L2, which short streams pay on too large a share of their copies, while what a dirty
/// L2 costs an evict-first stream grows with its length.
constexpr int32_t unhinted_copies_for_stream(int32_t unhinted, int64_t copies_per_cta) {
    return copies_per_cta >= 4 * static_cast<int64_t>(unhinted) ? unhinted : 0;
}

/// Whether an instance's consumers keep their tile offsets in uniform registers, and, the same
/// instances, can skip the MMAs of 64-row halves without rows (GroupedGemmParams::
/// skip_idle_halves, 128-row tiles only): all but fp8 into F32 on 128 x 256 tiles in clusters
/// with the register epilogue, where either made ptxas spill. Host and kernel decide it here,
/// together.
constexpr MOEGEMM_HD bool has_uniform_consumer_offsets(bool fp8, int block_n, int cluster_n,
                                                       bool tma_store, int out_bytes) {
    return !(fp8 && block_n == 256 && cluster_n == 2 && !tma_store && out_bytes == 4);
}

/// Where value i = 4j + 2h + q of a fragment sits, from the thread's first row and first
/// product column: consumers hold rows + 8h and columns + 8j + q; swap-AB's hold the tile
/// transposed (tokens + 8j + q, weight columns + 8h). A fragment of `count` values has
/// rows(count) distinct rows and columns(count) distinct columns; value i has the
/// row_index(i)-th and the column_index(i)-th, whose offsets are row_offset and column_offset.
template <bool Swapped>
struct FragmentLayout {
    static constexpr MOEGEMM_HD int rows(int count) { return Swapped ? count / 2 : 2; }
    static constexpr MOEGEMM_HD int columns(int count) { return Swapped ? 2 : count / 2; }
    static constexpr MOEGEMM_HD int row_index(int i) {
        return Swapped ? 2 * (i / 4) + i % 2 : i / 2 % 2;
    }
    static constexpr MOEGEMM_HD int column_index(int i) {
        return Swapped ? i / 2 % 2 : 2 * (i / 4) + i % 2;
    }
    static constexpr MOEGEMM_HD int row_offset(int r) {
        return Swapped ? 8 * (r / 2) + r % 2 : 8 * r;
    }
    static constexpr MOEGEMM_HD int column_offset(int c) {
        return Swapped ? 8 * c : 8 * (c / 2) + c % 2;
    }
};

/// Gated activations: how many pairs' rows of one kind the B tile of an instance holds side by
/// side before those pairs' rows of the other kind (make_gate_up_weights_tensor_map), chosen so
/// that each epilogue thread holds both values of its output columns. A consumer that owns
/// whole tile columns (all but swap-AB) takes its columns as one group: its first half of one
/// kind, its second half of the other, read as two plain boxes. Swap-AB's consumers own weight
/// rows split by warp and by 8-row half, so pairs sit 8 rows apart.
constexpr MOEGEMM_HD int gate_up_group(bool swap_ab, int block_m, int block_n) {
    return swap_ab ? 8 : (block_m == 128 ? block_n : block_n / 2) / 2;
}

/// Gated activations: the row of B (and column of the bias) whose product a kernel holds at
/// product column `s`, with pairs in groups of `group` (gate_up_group): s = 2 group g + group
/// kind + j is pair i = group g + j, which is row kind * n / 2 + i of two halves, or 2 i +
/// kind interleaved.
constexpr MOEGEMM_HD int32_t gate_up_row(int32_t s, int32_t n, bool interleaved, int32_t group) {
    const int32_t pair = s / (2 * group) * group + s % group;
    const int32_t kind = s / group % 2;
    return interleaved ? 2 * pair + kind : kind * (n / 2) + pair;
}

/// The tensor maps of a launch, in this order. A is read in boxes of three heights: the tile's
/// rows (per CTA of a cluster), a half and a quarter of them, so that a tile whose expert has
/// few rows (decode) loads only the rows it needs, not the next expert's or the slab's unused
/// rows (MASKED).
enum TensorMapIndex : int {
    kMapAFull = 0,
    kMapAHalf = 1,
    kMapAQuarter = 2,
    kMapB = 3,
    kMapD = 4,  ///< TMA-store epilogue only
    kTensorMapsPerCta = 5,
};
constexpr int kABoxHeights = 3;

/// Which A box (kMapAFull + the result) a tile with `tile_rows` rows (1 to block_m) loads: the
/// lowest of the kABoxHeights heights, block_m >> index, that covers them. The producer loads
/// it; swap-AB consumers multiply exactly its rows (wgmma's N), so it must cover the tile.
constexpr MOEGEMM_HD int a_box_index(int32_t tile_rows, int block_m) {
    int a_box = 0;
    while (a_box + 1 < kABoxHeights && tile_rows <= (block_m >> (a_box + 1))) ++a_box;
    return a_box;
}
constexpr std::size_t kTensorMapBytes = 128;

/// Most pipeline stages of any instance (TileConfig::stages() takes as many as fit, up to this).
constexpr int kMaxPipelineStages = 8;

/// Shared memory of the tile hand-off with tile tickets (GroupedGemmParams::tile_tickets): the
/// producer writes the cluster tile a tile's stages belong to (-1: no more) into the word of
/// its first stage, where the consumers read it once the stage is full; in a cluster, the
/// leader (rank 0) takes the tickets and passes each cluster tile to its peer through a
/// two-slot ring (st.async into peer_tile, completing peer_full; the peer frees the slot on
/// the leader's peer_empty).
struct TileHandOff {
    int32_t stage_tile[kMaxPipelineStages];
    int32_t peer_tile[2];
    uint64_t peer_full[2];
    uint64_t peer_empty[2];
};

/// With tile tickets and the fp8 BLOCK scale ring, the producer passes each cluster tile after
/// the first (and the final -1) to the scale warps through this two-slot ring, which follows
/// the scale slots: the producer writes `tile` and arrives on `full`, each reading lane of the
/// scale warps arrives on `empty`.
struct ScaleWarpHandOff {
    int32_t tile[2];
    int32_t unused[2];  // 8-byte aligned barriers
    uint64_t full[2];
    uint64_t empty[2];
};

/// The plan's tensor maps, encoded once with a placeholder address: each CTA copies them into
/// the workspace at launch and replaces the global addresses (a kernel parameter).
struct TensorMapTemplates {
    CUtensorMap maps[kTensorMapsPerCta];
};

/// Tile configuration of one kernel instance. Two consumer warpgroups share each tile: with
/// 128-row tiles each takes 64 rows and all BlockN columns; with 64-row tiles (decode: fewer
/// wasted rows per tile) both take the 64 rows and half of the columns each. With the TMA-store
/// epilogue (16-bit outputs, 128-row tiles) each consumer writes its outputs, one 64 x 64 box
/// at a time, into two alternating shared-memory box buffers that TMA stores while the consumer
/// fills the other one and then goes on with the next tile.
///
/// The number of pipeline stages is chosen per launch (stages()): everything else in shared
/// memory is fixed except the schedule, which grows with the number of experts, and the stages
/// take what is left. A deeper ring hides more of the load latency; with up to 153 experts a
/// 128 x 256 tile gets 4 stages of 48 KB.
template <int BlockM, int BlockN, bool TmaStore>
struct TileConfig {
    static_assert(BlockM == 128 || BlockM == 64, "tiles of 128 or 64 rows");
    static_assert(BlockM == 128 || !TmaStore, "the TMA-store epilogue serves 128-row tiles");
    static constexpr int kBlockM = BlockM;
    static constexpr int kBlockN = BlockN;
    static constexpr int kBlockK = 64;   // 128 bytes of 16-bit values: one swizzle atom row
    static constexpr int kThreads = 384;  // producer warpgroup + 2 consumer warpgroups
    static constexpr int kMaxStages = kMaxPipelineStages;
    /// What one consumer warpgroup computes: 64 rows (one m64 wgmma) x kConsumerN columns.
    static constexpr int kConsumerN = BlockM == 128 ? BlockN : BlockN / 2;
    static constexpr std::size_t kTileABytes = std::size_t{kBlockM} * kBlockK * 2;
    static constexpr std::size_t kTileBBytes = std::size_t{kBlockN} * kBlockK * 2;
    /// One stage: the A tile, then the B tile (both 1024-byte aligned).
    static constexpr std::size_t kStageBytes = kTileABytes + kTileBBytes;
    /// A 64 x 64 box of 16-bit outputs, the unit of the epilogue's TMA stores.
    static constexpr std::size_t kEpilogueBoxBytes = 64 * 64 * 2;
    /// Two box buffers per consumer warpgroup.
    static constexpr std::size_t kEpilogueBytes = TmaStore ? 2 * 2 * kEpilogueBoxBytes : 0;
    /// The tensor maps are made in shared memory before the first tile: they borrow the
    /// epilogue buffers, or have room of their own when there are none
    /// (A multiple of 1024 bytes: the stages follow.)
    static constexpr std::size_t kScratchBytes = TmaStore ? kEpilogueBytes : 1024;
    static_assert(kScratchBytes >= kTensorMapsPerCta * kTensorMapBytes, "room for the maps");
    /// Opt-in shared memory of one block on sm_90.
    static constexpr std::size_t kSmemLimit = 232448;
    /// Everything but the stages and the schedule: 1024-byte alignment slack (128-byte swizzled
    /// TMA boxes want 1024-byte aligned addresses), scratch/epilogue, full and empty barriers
    /// and the tile hand-off.
    static constexpr std::size_t kFixedBytes = 1024 + kScratchBytes +
                                               2 * kMaxStages * sizeof(uint64_t) +
                                               sizeof(TileHandOff);
    /// The schedule in shared memory: row starts, rows and the tile prefix (E + 1), 32-bit.
    static constexpr std::size_t schedule_bytes(int experts) {
        return sizeof(int32_t) * (3 * static_cast<std::size_t>(experts) + 1);
    }
    /// Pipeline stages for a launch over `experts` experts: as many as fit, at most kMaxStages
    /// (0 when not even one fits, which kMinStagesForMaxExperts below rules out).
    static constexpr int stages(int experts) {
        const std::size_t free = kSmemLimit - kFixedBytes - schedule_bytes(experts);
        const std::size_t fit = free / kStageBytes;
        return static_cast<int>(fit < kMaxStages ? fit : kMaxStages);
    }
    static_assert(stages(MOEGEMM_MAX_EXPERTS) >= 3, "a three-stage ring fits for every E");

    /// Dynamic shared memory of a launch over `experts` experts.
    static constexpr std::size_t smem_bytes(int experts) {
        return kFixedBytes + stages(experts) * kStageBytes + schedule_bytes(experts);
    }

    /// fp8 BLOCK scales of one stage's k-block in shared memory: one per tile row (A), then one
    /// per 128-column block of the tile (B), then (8-byte aligned) the mbarrier on which the
    /// consumers hand the slot back; 16-byte aligned.
    static constexpr std::size_t kBlockScaleSlotBarrierOffset =
        (sizeof(float) * (kBlockM + (kBlockN + 127) / 128) + 7) / 8 * 8;
    static constexpr std::size_t kBlockScaleSlotBytes =
        (kBlockScaleSlotBarrierOffset + sizeof(uint64_t) + 15) / 16 * 16;
    /// Where the ring of BLOCK scale slots (one per stage) starts, from the aligned base: after
    /// the `ring_stages` stages and the schedule.
    static constexpr std::size_t block_scale_ring_offset(int experts, int ring_stages) {
        return (kFixedBytes - 1024 + ring_stages * kStageBytes + schedule_bytes(experts) + 15) /
               16 * 16;
    }
    static constexpr std::size_t block_scale_ring_offset(int experts) {
        return block_scale_ring_offset(experts, stages(experts));
    }
    /// The ring's bytes: a slot per stage, then the scale warps' hand-off (ScaleWarpHandOff).
    static constexpr std::size_t block_scale_ring_bytes(int ring_stages) {
        return ring_stages * kBlockScaleSlotBytes + sizeof(ScaleWarpHandOff);
    }
    /// Whether the ring fits in kSmemLimit beside `ring_stages` stages. With as many stages as
    /// fit (stages(experts)) it does only in the 1024 bytes kept for aligning a misaligned
    /// shared-memory base (kFixedBytes), so the kernel uses it only where its base is aligned
    /// (128 x 256 TMA-store tiles: up to 59 experts, and from 154 on).
    static constexpr bool block_scale_ring_fits(int experts, int ring_stages) {
        return ring_stages >= 1 &&
               block_scale_ring_offset(experts, ring_stages) + block_scale_ring_bytes(ring_stages) <=
                   kSmemLimit;
    }
    static constexpr bool block_scale_ring_fits(int experts) {
        return block_scale_ring_fits(experts, stages(experts));
    }
    /// The stages of a launch with the ring: as many as fit, or one fewer where the ring then
    /// fits (128 x 256 TMA-store tiles from 60 to 153 experts: 3 stages instead of 4), never
    /// fewer than 3; 0 where it does not fit.
    static constexpr int block_scale_ring_stages(int experts) {
        const int most = stages(experts);
        if (block_scale_ring_fits(experts, most)) return most;
        return most - 1 >= 3 && block_scale_ring_fits(experts, most - 1) ? most - 1 : 0;
    }
};

}  // namespace moegemm::native

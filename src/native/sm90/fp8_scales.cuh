// fp8 (E4M3) scales: the promotion of each k-block's sums into the fp32 accumulators, the
// BLOCK scale ring that producer warps fill beside the pipeline stages, and the scales of the
// other modes applied once to the finished sums. moegemm_scale_mode_t in the header says how
// the scales are laid out.
//
// A thread's fragment of m64nN: acc[4j + 2h + q] is row `row` + 8h, column `col` + 8j + q,
// rows relative to the expert, columns absolute.
#pragma once

#include "native/sm90/kernel_traits.cuh"

namespace moegemm::native {

/// BLOCK: where a thread's scales start in one tile, found once per tile so that each k-block's
/// are 2 + `Slices` loads at offset kb: its two rows' in a_scale[rows, KB] and, for each
/// 128-column block of the consumer from `col` on, b_scale[E, NB, KB]. Rows past the expert's
/// and column blocks past N are never stored: their indices are clamped into the arrays rather
/// than tested, so the loads are unconditional (no branch around each).
template <int Slices>
struct BlockScaleRows {
    const float* row[2];
    const float* col[Slices];

    __device__ __forceinline__ BlockScaleRows(const GroupedGemmParams& p, const Schedule& s,
                                              const TileCoord& c, int32_t k_blocks,
                                              int32_t first_row, int32_t first_col) {
        const int32_t last_row = s.rows[c.expert] - 1;  // a tile of the expert: it has rows
        const int64_t expert_first = s.row_start[c.expert];
#pragma unroll
        for (int h = 0; h < 2; ++h)
            row[h] = p.a_scale + (expert_first + min(first_row + 8 * h, last_row)) * k_blocks;
        const int64_t column_blocks = (p.n + 127) / 128;
#pragma unroll
        for (int h = 0; h < Slices; ++h) {
            const int32_t n = min(first_col + 128 * h, p.n - 1);
            col[h] = p.b_scale + (c.expert * column_blocks + n / 128) * k_blocks;
        }
    }

    /// The scales of k-block kb.
    __device__ __forceinline__ void load(int32_t kb, float (&row_scale)[2],
                                         float (&col_scale)[Slices]) const {
#pragma unroll
        for (int h = 0; h < 2; ++h) row_scale[h] = row[h][kb];
#pragma unroll
        for (int h = 0; h < Slices; ++h) col_scale[h] = col[h][kb];
    }
};

/// acc[Offset ...] += tmp * row_scale[h] * col_scale: one k-block's sums of a column slice
/// (fragment registers [Offset, Offset + TmpCount)) into the fp32 accumulators, which the tile
/// zeroed (BLOCK scales). (A first-k-block multiply chosen per element instead of the add
/// costs a predicated FMUL beside each FFMA: twice the promotion's issue.)
template <int Offset, int Count, int TmpCount>
__device__ __forceinline__ void promote(float (&acc)[Count], const float (&tmp)[TmpCount],
                                        const float (&row_scale)[2], float col_scale) {
    static_assert(Offset + TmpCount <= Count, "a slice of the accumulators");
#pragma unroll
    for (int j = 0; j < TmpCount / 4; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float f = row_scale[h] * col_scale;
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                const int i = 4 * j + 2 * h + q;
                acc[Offset + i] = fmaf(tmp[i], f, acc[Offset + i]);
            }
        }
    }
}

/// acc[Offset ...] += tmp: the promotion of the other scale modes, whose scales apply once to
/// the finished sums (apply_output_scales).
template <int Offset, int Count, int TmpCount>
__device__ __forceinline__ void promote(float (&acc)[Count], const float (&tmp)[TmpCount]) {
    static_assert(Offset + TmpCount <= Count, "a slice of the accumulators");
#pragma unroll
    for (int i = 0; i < TmpCount; ++i) acc[Offset + i] += tmp[i];
}

/// Where an fp8 consumer's k-block loop finds BLOCK scales: none (the other modes), global
/// memory (BlockScaleRows), or the ring in shared memory that stage_block_scales fills.
enum class ScaleSource { None, Global, Ring };

// ---- The BLOCK scale ring ---------------------------------------------------------------
// Warps 1.. of the producer warpgroup fill it, 64 tile rows each (two rows per lane: with four,
// the 128-row instances spilled on the producer's 40 registers). Its slots are handed back to
// those warps on an mbarrier in each slot (TileConfig::kBlockScaleSlotBarrierOffset) on which
// every consumer thread arrives once it has read the slot. (Each reader's own arrival: with one
// lane's release after a __syncwarp, or with named barriers, racecheck reports the other
// readers' reads against the next write.)

__host__ __device__ constexpr int block_scale_warps(int block_m) { return block_m / 64; }
constexpr uint32_t kScaleSlotReaders = 256;

/// The slot of stage `stage` in the ring at `slots`: its scales, then its barrier.
template <typename Config>
__device__ __forceinline__ float* scale_slot(float* slots, int stage) {
    return reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(slots) +
                                    stage * Config::kBlockScaleSlotBytes);
}
template <typename Config>
__device__ __forceinline__ uint64_t* scale_slot_empty(float* slots, int stage) {
    return reinterpret_cast<uint64_t*>(reinterpret_cast<unsigned char*>(
                                           scale_slot<Config>(slots, stage)) +
                                       Config::kBlockScaleSlotBarrierOffset);
}
/// The scale warps' tile hand-off (ScaleWarpHandOff), after the ring's `stages` slots.
template <typename Config>
__device__ __forceinline__ ScaleWarpHandOff* scale_warp_hand_off(float* slots, int stages) {
    return reinterpret_cast<ScaleWarpHandOff*>(reinterpret_cast<unsigned char*>(slots) +
                                               stages * Config::kBlockScaleSlotBytes);
}

/// The ring's barriers: each slot's, and the scale warps' hand-off.
template <typename K>
__device__ __forceinline__ void init_scale_ring_barriers(const GroupedGemmParams& p,
                                                         float* slots) {
    using Config = typename K::Config;
    for (int s = 0; s < p.stages; ++s)
        ptx::mbarrier_init(scale_slot_empty<Config>(slots, s), kScaleSlotReaders);
    ScaleWarpHandOff* const hand_off = scale_warp_hand_off<Config>(slots, p.stages);
    for (int slot = 0; slot < 2; ++slot) {
        ptx::mbarrier_init(&hand_off->full[slot], 1);
        ptx::mbarrier_init(&hand_off->empty[slot], 32 * block_scale_warps(K::kBlockM));
    }
    ptx::fence_barrier_init();
}

/// BLOCK scales staged in shared memory by scale warp `part` (warp 1 + part of the producer
/// warpgroup): for each k-block of the tiles the consumers walk (round robin, or with tile
/// tickets as the producer hands them on through ScaleWarpHandOff), its 64 of the tile's row
/// scales and (part 0) the scales of the tile's 128-column blocks into the slot of the
/// k-block's stage, then each lane's arrival on the stage's full barrier (beside the copies').
/// The loads are issued before the wait for the slot, so their latency hides behind the ring.
/// Rows past the expert's and column blocks past N are clamped into the arrays, as
/// BlockScaleRows does.
template <typename K>
__device__ __forceinline__ void stage_block_scales(const GroupedGemmParams& p,
                                                   const SharedStorage<K>& smem, uint32_t rank,
                                                   int32_t k_blocks, float* slots, int part) {
    using Config = typename K::Config;
    constexpr int BlockM = K::kBlockM;
    constexpr int BlockN = K::kBlockN;
    static_assert(BlockN % 128 == 0, "128-column blocks");
    constexpr int kRowsPerLane = 2;  // 64 rows per warp
    constexpr int kColumnBlocks = BlockN / 128;
    static_assert(sizeof(float) * (BlockM + kColumnBlocks) <= Config::kBlockScaleSlotBarrierOffset,
                  "a slot holds the tile's scales before its barrier");
    const Schedule& schedule = smem.schedule;
    const int stages = p.stages;
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int first_row = 64 * part + lane;  // of the tile: this lane's, and 32 rows on
    const int32_t column_blocks = (p.n + 127) / 128;
    RingPosition ring;
    for (int32_t index = 0;; ++index) {
        // The work item's cluster tile: round robin, or with tile tickets the producer's (the
        // first is the cluster's slot, as everywhere; later ones come through the hand-off).
        int32_t cluster_tile = tile_scheduler<K>(p, schedule).round_robin(index);
        if (p.tile_tickets != nullptr && index > 0) {
            ScaleWarpHandOff* const hand_off = scale_warp_hand_off<Config>(slots, stages);
            const auto [slot, parity] = hand_off_slot(index);
            ptx::mbarrier_wait(&hand_off->full[slot], parity);
            cluster_tile = *reinterpret_cast<volatile int32_t*>(&hand_off->tile[slot]);
            ptx::mbarrier_arrive(&hand_off->empty[slot]);  // each reader's own release
        }
        if (cluster_tile < 0) {
            if (p.tile_tickets != nullptr) {
                // The producer ends the consumers with a stage whose word says -1 and whose
                // full barrier it completes with its arrival alone, which with the ring counts
                // these lanes' too: each arrives once the stage's previous phase is done (its
                // slot was read).
                ptx::mbarrier_wait(scale_slot_empty<Config>(slots, ring.stage), ring.phase ^ 1);
                ptx::mbarrier_arrive(&smem.full[ring.stage]);
            }
            break;
        }
        const TileCoord c = tile_of<K>(p, schedule, cluster_tile, rank);
        const int32_t last_row = schedule.rows[c.expert] - 1;  // a tile of the expert: it has rows
        // The expert's scales, and each of the lane's rows' offsets from them (32-bit: the
        // warp runs on 40 registers).
        const float* expert_scales = p.a_scale + int64_t{schedule.row_start[c.expert]} * k_blocks;
        int32_t row[kRowsPerLane];
#pragma unroll
        for (int i = 0; i < kRowsPerLane; ++i)
            row[i] = min(c.m_tile * BlockM + first_row + 32 * i, last_row) * k_blocks;
        const int32_t block =
            min(c.n_tile * kColumnBlocks + lane % kColumnBlocks, column_blocks - 1);
        const float* col = p.b_scale + (int64_t{c.expert} * column_blocks + block) * k_blocks;
        // (Rolled: unrolled, ptxas spilled on the 40 registers.)
#pragma unroll 1
        for (int32_t kb = 0; kb < k_blocks; ++kb) {
            float row_scale[kRowsPerLane];
#pragma unroll
            for (int i = 0; i < kRowsPerLane; ++i) row_scale[i] = expert_scales[row[i] + kb];
            const float col_scale = col[kb];
            // (The first pass waits on the phase before the barrier's first: it returns.)
            ptx::mbarrier_wait(scale_slot_empty<Config>(slots, ring.stage), ring.phase ^ 1);
            float* slot = scale_slot<Config>(slots, ring.stage);
#pragma unroll
            for (int i = 0; i < kRowsPerLane; ++i) slot[first_row + 32 * i] = row_scale[i];
            if (part == 0 && lane < kColumnBlocks) slot[BlockM + lane] = col_scale;
            // Each lane's arrival (a release) orders its own stores before the consumers' wait
            // on the stage. (One lane's after a __syncwarp would too, but racecheck does not
            // follow that chain.)
            ptx::mbarrier_arrive(&smem.full[ring.stage]);
            ring.advance(stages);
        }
    }
}

/// PER_TENSOR, PER_EXPERT and ROWWISE scales, applied once to the finished accumulators
/// (BLOCK scales were applied at each promotion).
template <int ConsumerN>
__device__ __forceinline__ void apply_output_scales(float (&acc)[ConsumerN / 2],
                                                    const GroupedGemmParams& p,
                                                    const Schedule& s, const TileCoord& c,
                                                    int32_t row, int32_t col) {
    if (p.scale_mode == MOEGEMM_SCALE_BLOCK) return;
    if (p.scale_mode != MOEGEMM_SCALE_ROWWISE) {
        const float tensor = p.a_scale[0] * (p.scale_mode == MOEGEMM_SCALE_PER_EXPERT
                                                 ? p.b_scale[c.expert]
                                                 : p.b_scale[0]);
#pragma unroll
        for (int i = 0; i < ConsumerN / 2; ++i) acc[i] *= tensor;
        return;
    }
    // ROWWISE. Rows past the expert and columns past N are never stored: their indices are
    // clamped into the arrays rather than tested, so that every load is unconditional and all
    // can be in flight at once (under a condition each load is a branch of its own, used right
    // after: one dependent trip to L2 after another).
    const int32_t last_row = s.rows[c.expert] - 1;  // a tile of the expert: it has rows
    const int64_t first = s.row_start[c.expert];
    float row_factor[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) row_factor[h] = p.a_scale[first + min(row + 8 * h, last_row)];
    // Column pairs (n, n + 1), n even: N is a multiple of 8, so both are below N or neither,
    // and the pair is 8-byte aligned (b_scale is 16-byte aligned, each expert's N scales too).
    const float2* column_pairs =
        reinterpret_cast<const float2*>(p.b_scale + static_cast<int64_t>(c.expert) * p.n);
#pragma unroll
    for (int j = 0; j < ConsumerN / 8; ++j) {
        const float2 column = column_pairs[min(col + 8 * j, p.n - 2) / 2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            acc[4 * j + 2 * h] *= row_factor[h] * column.x;
            acc[4 * j + 2 * h + 1] *= row_factor[h] * column.y;
        }
    }
}

/// Swap-AB: the same scales (not BLOCK) on accumulators that hold the tile transposed:
/// acc[4j + 2h + q] is output column `col` + 8h of token `token` + 8j + q (tokens relative to
/// the expert, columns absolute).
template <int ConsumerN>
__device__ __forceinline__ void apply_output_scales_swapped(float (&acc)[ConsumerN / 2],
                                                            const GroupedGemmParams& p,
                                                            const Schedule& s, const TileCoord& c,
                                                            int32_t token, int32_t col) {
    if (p.scale_mode != MOEGEMM_SCALE_ROWWISE) {
        // One factor for every element: the row / column roles do not matter.
        apply_output_scales<ConsumerN>(acc, p, s, c, 0, 0);
        return;
    }
    // As in apply_output_scales: indices clamped, not tested, so every load is unconditional.
    const int32_t last_token = s.rows[c.expert] - 1;
    const float* row_scales = p.a_scale + s.row_start[c.expert];
    const float* column_scales = p.b_scale + static_cast<int64_t>(c.expert) * p.n;
    float column_factor[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) column_factor[h] = column_scales[min(col + 8 * h, p.n - 1)];
#pragma unroll
    for (int j = 0; j < ConsumerN / 8; ++j) {
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            const float row_factor = row_scales[min(token + 8 * j + q, last_token)];
#pragma unroll
            for (int h = 0; h < 2; ++h) acc[4 * j + 2 * h + q] *= row_factor * column_factor[h];
        }
    }
}

}  // namespace moegemm::native

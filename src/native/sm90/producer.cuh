// The producer: one thread of warpgroup 0 walks the CTA's tiles and streams their A and B
// k-blocks into the ring of shared-memory stages with TMA (128-byte swizzle), each stage
// guarded by a "full" and an "empty" mbarrier. In a cluster each CTA loads a share of the A
// rows for both (multicast), and a stage is refilled only when the consumers of both CTAs
// released it.
#pragma once

#include "native/sm90/kernel_traits.cuh"
#include "native/sm90/tile_hand_off.cuh"

namespace moegemm::native {

/// The weights of k-block `kb` of tile `c` into stage `stage`; `policy...`: nothing, or the
/// function giving each copy's L2 policy.
template <typename K, typename... Policy>
__device__ __forceinline__ void load_weights(const GroupedGemmParams& p, const SharedStorage<K>& smem,
                                             const CUtensorMap* map_b, int stage,
                                             const TileCoord& c, int32_t b_row, int32_t kb,
                                             Policy... policy) {
    if (!K::kFp8 && !K::kNMajorB && p.gated) {
        // Gate/up map (make_gate_up_weights_tensor_map) in groups of K::kGateUpGroup pairs.
        if constexpr (K::kSwapAB) {
            static_assert(K::kGateUpGroup == 8, "the 5-D gate/up map");
            // Coordinates (k, pair in group, kind, group, expert): one box is the tile's
            // kBlockN / 16 groups, both kinds each.
            ptx::tma_load_5d(smem.stage_b(stage), map_b, &smem.full[stage], kb * K::kBlockKElems,
                             0, 0, c.n_tile * (K::kBlockN / 16), c.expert, policy()...);
        } else {
            // Coordinates (k, pair, kind, expert): box `part` is group part / 2, kind part % 2.
            // (The 4-D map of groups above 8; prefill copies take no L2 policy.)
            constexpr int kGroup = K::kGateUpGroup;
            static_assert(kGroup > 8 && sizeof...(Policy) == 0, "the 4-D gate/up map");
#pragma unroll
            for (int part = 0; part < K::kBlockN / kGroup; ++part)
                ptx::tma_load_4d(smem.stage_b(stage) + part * kGroup * 128, map_b,
                                 &smem.full[stage], kb * K::kBlockKElems,
                                 c.n_tile * (K::kBlockN / 2) + part / 2 * kGroup, part % 2,
                                 c.expert);
        }
        return;
    }
    if constexpr (K::kNMajorB) {
        // [E, K, N]: boxes of 64 K-rows x 64 columns, one per 64 columns.
#pragma unroll
        for (int box = 0; box < K::kBlockN / 64; ++box)
            ptx::tma_load_3d(smem.stage_b(stage) + box * 64 * 128, map_b, &smem.full[stage],
                             c.n_tile * K::kBlockN + box * 64, kb * K::kBlockK, c.expert,
                             policy()...);
    } else {
        ptx::tma_load_2d(smem.stage_b(stage), map_b, &smem.full[stage], kb * K::kBlockKElems,
                         b_row, policy()...);
    }
}

/// The weights of a stage. Swap-AB (decode): each weight tile is read once, so it goes into L2
/// to be evicted first and leaves the tokens, read once per column tile, in place; but the
/// first copies (`unhinted`, counted down) go unhinted, to push out dirty lines that an
/// evict-first stream would leave resident and run slower beside
/// (weight_copies_without_l2_hint). Prefill tiles of one expert read the same weights again
/// from L2.
template <typename K>
__device__ __forceinline__ void copy_weights(const GroupedGemmParams& p, const SharedStorage<K>& smem,
                                             const CUtensorMap* map_b, int stage,
                                             const TileCoord& c, int32_t b_row, int32_t kb,
                                             int32_t& unhinted) {
    if constexpr (K::kSwapAB) {
        if (unhinted > 0) {
            if (p.trace_features != 0 && unhinted == p.unhinted_weight_copies)
                atomicOr(p.status_word, kTraceUnhintedCopy);  // the first one (tests only)
            --unhinted;
            load_weights<K>(p, smem, map_b, stage, c, b_row, kb);
        } else {
            load_weights<K>(p, smem, map_b, stage, c, b_row, kb, ptx::evict_first_policy);
        }
    } else {
        load_weights<K>(p, smem, map_b, stage, c, b_row, kb);
    }
}

/// The producer thread's loop over the CTA's work items. Ends the consumers (tile tickets)
/// with a stage whose word says -1.
template <typename K>
__device__ __forceinline__ void run_producer(const GroupedGemmParams& p,
                                             const SharedStorage<K>& smem, uint32_t rank,
                                             int32_t k_blocks) {
    using Config = typename K::Config;
    constexpr int kBlockM = K::kBlockM;
    CUtensorMap* const maps = cta_tensor_maps(p);
    const CUtensorMap* const map_b = &maps[kMapB];
    const int stages = p.stages;
    RingPosition ring;
    ProducerTiles<K> tiles(p, smem, rank);
    int32_t unhinted_weight_copies = p.unhinted_weight_copies;  // swap-AB only
    for (int32_t index = 0;; ++index) {
        const int32_t cluster_tile = tiles.cluster_tile(index);
        if (cluster_tile < 0) {
            if (p.tile_tickets != nullptr) {
                // The consumers learn that there is no more from the next stage's word: its
                // full barrier completes with this arrival alone. (Once the stage is free: a
                // phase must not complete before they waited on the one before.)
                ptx::mbarrier_wait(&smem.empty[ring.stage], ring.phase ^ 1);
                smem.hand_off->stage_tile[ring.stage] = -1;
                ptx::mbarrier_arrive(&smem.full[ring.stage]);
            }
            break;
        }
        const TileCoord c = tile_of<K>(p, smem.schedule, cluster_tile, rank);
        const int32_t a_row = smem.schedule.row_start[c.expert] + c.m_tile * kBlockM;
        const int32_t b_row = c.expert * p.n + c.n_tile * K::kBlockN;
        // The A box: the lowest of the three heights that covers the tile's rows; the tile's
        // other A rows in shared memory keep stale values, which only feed accumulator rows
        // that are never stored.
        const int32_t rows = tile_rows(smem.schedule, c, kBlockM);
        const int a_box = a_box_index(rows, kBlockM);
        const CUtensorMap* const map_a = &maps[kMapAFull + a_box];
        constexpr int kFullBoxRows = kBlockM / K::kClusterN;  // rows each CTA loads
        const int box_rows = kFullBoxRows >> a_box;
        // In a cluster each CTA loads a share of the A rows for both, but where one box already
        // covers the tile's rows (a few decode rows) the leader's box alone does: the peer's
        // would read only rows past the tile's, which in MASKED slabs are padding that nothing
        // else reads, from DRAM.
        const bool a_from_leader = K::kClusterN > 1 && rows <= box_rows;
        const uint32_t stage_bytes = static_cast<uint32_t>(
            (a_from_leader ? 1 : K::kClusterN) * box_rows * 128 + Config::kTileBBytes);
        for (int32_t kb = 0; kb < k_blocks; ++kb) {
            const int s = ring.stage;
            // A stage is free once the consumers released it in the previous pass (in a
            // cluster, those of both CTAs: this CTA's A half lands in the peer's too).
            ptx::mbarrier_wait(&smem.empty[s], ring.phase ^ 1);
            // A tile's first stage also carries its cluster tile, for the consumers (read with
            // tile tickets; the arrival below releases the store).
            if (kb == 0) smem.hand_off->stage_tile[s] = cluster_tile;
            // The whole stage (the A rows, B) arrives on this CTA's full barrier.
            ptx::mbarrier_arrive_expect_tx(&smem.full[s], stage_bytes);
            if constexpr (K::kClusterN > 1) {
                if (rank == 0 || !a_from_leader) {
                    ptx::tma_load_2d_multicast(smem.stage_a(s) + rank * box_rows * 128, map_a,
                                               &smem.full[s], kb * K::kBlockKElems,
                                               a_row + static_cast<int32_t>(rank) * box_rows, 0x3);
                }
            } else {
                ptx::tma_load_2d(smem.stage_a(s), map_a, &smem.full[s], kb * K::kBlockKElems,
                                 a_row);
            }
            copy_weights<K>(p, smem, map_b, s, c, b_row, kb, unhinted_weight_copies);
            if (kb + 1 == k_blocks) tiles.draw_next(index);
            ring.advance(stages);
        }
    }
}

/// Gathered A (GroupedGemmParams::a_rows): the A row of grouped row `row`, or gather_rows (past
/// the tensor: TMA fills the box with zeros) for an index out of range, which is flagged (as
/// is a missing index array, which argument checks rule out).
__device__ __forceinline__ int32_t gathered_row(const GroupedGemmParams& p, int64_t row) {
    const int32_t index = p.a_rows != nullptr ? p.a_rows[row] : -1;
    if (index >= 0 && index < p.gather_rows) return index;
    if (p.status_word) atomicOr(p.status_word, MOEGEMM_ROWS_CLAMPED_INDEX);
    return p.gather_rows;
}

/// The producer with gathered A, run by all of warp 0 (single CTAs only). TMA cannot gather
/// rows, so each row of a tile is its own one-row box (kMapAFull has box height 1): 128 copies
/// per stage are too many for one thread to issue at the tensor cores' pace, so lane l copies
/// rows l, l + 32, ..., whose source rows it reads once per tile. The 128-byte swizzle of a
/// row box depends only on its shared-memory address, so the rows land as a whole-tile box
/// would have put them. Lane 0 does the rest as run_producer does: the tile hand-off, the
/// stage's expected bytes (before the other lanes' copies can complete), the weights.
template <typename K>
__device__ __forceinline__ void run_gather_producer(const GroupedGemmParams& p,
                                                    const SharedStorage<K>& smem,
                                                    int32_t k_blocks) {
    static_assert(K::kClusterN == 1 && !K::kFp8, "gathered A: 16-bit inputs, single CTAs");
    constexpr int kBlockM = K::kBlockM;
    constexpr int kRowsPerLane = kBlockM / 32;
    constexpr uint32_t kRowBytes = K::kBlockKElems * sizeof(typename K::In);
    const int lane = static_cast<int>(threadIdx.x % 32);
    CUtensorMap* const maps = cta_tensor_maps(p);
    const CUtensorMap* const map_rows = &maps[kMapAFull];
    const CUtensorMap* const map_b = &maps[kMapB];
    // (Lane 0 acquired every map with the producer's other maps.)
    if (lane != 0) ptx::tensor_map_acquire(map_rows);
    RingPosition ring;
    ProducerTiles<K> tiles(p, smem, 0);
    int32_t unhinted_weight_copies = p.unhinted_weight_copies;  // swap-AB only
    for (int32_t index = 0;; ++index) {
        int32_t cluster_tile = 0;
        if (lane == 0) cluster_tile = tiles.cluster_tile(index);
        cluster_tile = __shfl_sync(0xffffffffu, cluster_tile, 0);
        if (cluster_tile < 0) {
            if (lane == 0 && p.tile_tickets != nullptr) {
                ptx::mbarrier_wait(&smem.empty[ring.stage], ring.phase ^ 1);
                smem.hand_off->stage_tile[ring.stage] = -1;
                ptx::mbarrier_arrive(&smem.full[ring.stage]);
            }
            break;
        }
        const TileCoord c = tile_of<K>(p, smem.schedule, cluster_tile, 0);
        const int64_t first_row = smem.schedule.row_start[c.expert] + c.m_tile * kBlockM;
        const int32_t b_row = c.expert * p.n + c.n_tile * K::kBlockN;
        const int32_t rows = tile_rows(smem.schedule, c, kBlockM);
        int32_t source[kRowsPerLane];  // -1: a row past the expert's, not copied
#pragma unroll
        for (int i = 0; i < kRowsPerLane; ++i) {
            const int32_t r = lane + 32 * i;
            source[i] = r < rows ? gathered_row(p, first_row + r) : -1;
        }
        const uint32_t stage_bytes =
            static_cast<uint32_t>(rows) * kRowBytes + static_cast<uint32_t>(K::Config::kTileBBytes);
        for (int32_t kb = 0; kb < k_blocks; ++kb) {
            const int s = ring.stage;
            ptx::mbarrier_wait(&smem.empty[s], ring.phase ^ 1);
            if (lane == 0) {
                if (kb == 0) smem.hand_off->stage_tile[s] = cluster_tile;
                ptx::mbarrier_arrive_expect_tx(&smem.full[s], stage_bytes);
            }
            __syncwarp();
#pragma unroll
            for (int i = 0; i < kRowsPerLane; ++i) {
                if (source[i] >= 0)
                    ptx::tma_load_2d(smem.stage_a(s) + (lane + 32 * i) * 128, map_rows,
                                     &smem.full[s], kb * K::kBlockKElems, source[i]);
            }
            if (lane == 0) {
                copy_weights<K>(p, smem, map_b, s, c, b_row, kb, unhinted_weight_copies);
                if (kb + 1 == k_blocks) tiles.draw_next(index);
            }
            ring.advance(p.stages);
        }
    }
}

}  // namespace moegemm::native

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
__device__ __forceinline__ void load_weights(const SharedStorage<K>& smem, const CUtensorMap* map_b,
                                             int stage, const TileCoord& c, int32_t b_row,
                                             int32_t kb, Policy... policy) {
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
            // Swap-AB (decode): each weight tile is read once, so it goes into L2 to be evicted
            // first and leaves the tokens, read once per column tile, in place; but the first
            // copies go unhinted, to push out dirty lines that an evict-first stream would leave
            // resident and run slower beside (weight_copies_without_l2_hint). (Prefill tiles of
            // one expert read the same weights again from L2.)
            if constexpr (K::kSwapAB) {
                if (unhinted_weight_copies > 0) {
                    --unhinted_weight_copies;
                    load_weights<K>(smem, map_b, s, c, b_row, kb);
                } else {
                    load_weights<K>(smem, map_b, s, c, b_row, kb, ptx::evict_first_policy);
                }
            } else {
                load_weights<K>(smem, map_b, s, c, b_row, kb);
            }
            if (kb + 1 == k_blocks) tiles.draw_next(index);
            ring.advance(stages);
        }
    }
}

}  // namespace moegemm::native

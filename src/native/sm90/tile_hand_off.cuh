// How every warp role of a CTA learns the cluster tile of its next work item (tile_scheduler.cuh
// decides the order): with round robin each computes it; with tile tickets the cluster
// leader's producer thread draws tickets from the workspace word and hands each cluster tile
// on, to its peer CTA, to the BLOCK scale warps and, in the first stage of the tile, to the
// consumers.
#pragma once

#include "native/sm90/fp8_scales.cuh"
#include "native/sm90/kernel_traits.cuh"

namespace moegemm::native {

/// Makes the ticket word this launch's, (tag, 0), unless it already carries the tag; `seen`: a
/// value it held (tile_scheduler.cuh says why this ends).
__device__ __forceinline__ void claim_ticket_word(unsigned long long* word, unsigned long long seen,
                                                  uint32_t tag) {
    while (!ticket_word_is_current(seen, tag)) {
        const unsigned long long found = atomicCAS(word, seen, ticket_word(tag, 0));
        if (found == seen) return;
        seen = found;
    }
}

/// The ticket that an atomic add on the claimed word returned as `taken`. (Were the word stale
/// after all, which only another kernel writing this workspace at the same time could cause,
/// the add is dropped: claim again and take another.)
__device__ __forceinline__ uint32_t resolve_ticket(unsigned long long* word,
                                                   unsigned long long taken, uint32_t tag) {
    while (!ticket_word_is_current(taken, tag)) {
        claim_ticket_word(word, taken + 1, tag);
        taken = atomicAdd(word, 1ull);
    }
    return static_cast<uint32_t>(taken);
}

/// The producer thread's side: the cluster tile of each work item, and (leader) the ticket
/// draws. The leader draws the ticket of the next work item with the copies of this one's last
/// k-block (draw_next), so that the atomic's round trip overlaps the stages still in the ring.
template <typename K>
struct ProducerTiles {
    const GroupedGemmParams& p;
    const SharedStorage<K>& smem;
    uint32_t rank;
    /// The leader's reads of the ticket word: what it held at the start (used only at the end
    /// of the first tile, so the load's latency is hidden), then what its last add returned.
    unsigned long long taken;

    __device__ __forceinline__ ProducerTiles(const GroupedGemmParams& params,
                                             const SharedStorage<K>& storage, uint32_t cta_rank)
        : p(params), smem(storage), rank(cta_rank),
          taken(params.tile_tickets && cta_rank == 0
                    ? *reinterpret_cast<volatile unsigned long long*>(params.tile_tickets)
                    : 0) {}

    /// This launch's tag, read where needed rather than held (the producer thread runs on 40
    /// registers).
    __device__ __forceinline__ static uint32_t tag() {
        return static_cast<uint32_t>(ptx::grid_id());
    }

    /// The cluster tile of work item `index`, or -1: no more.
    __device__ __forceinline__ int32_t cluster_tile(int32_t index) {
        if (p.tile_tickets == nullptr) return tile_scheduler<K>(p, smem.schedule).round_robin(index);
        // With tickets too, both CTAs of a cluster know its first cluster tile (its slot): the
        // peer does not wait for the leader's hand-off before its first copies (which the
        // leader's first stage needs too: each CTA multicasts its half of A).
        if (index == 0) return tile_scheduler<K>(p, smem.schedule).round_robin(0);
        int32_t tile = -1;
        if (rank == 0) {
            const uint32_t ticket = resolve_ticket(p.tile_tickets, taken, tag());
            const TileScheduler scheduler = tile_scheduler<K>(p, smem.schedule);
            tile = scheduler.after_ticket(ticket);
            // Every other add of this launch is done: leave the word as a claim would, for
            // the next launch with this tag (a CUDA graph's replay).
            if (scheduler.is_last_ticket(ticket)) atomicExch(p.tile_tickets, ticket_word(tag(), 0));
        }
        TileHandOff* const hand_off = smem.hand_off;
        if constexpr (K::kClusterN > 1) {
            // Cluster tiles after the first go to the peer through the two-slot ring.
            const auto [slot, parity] = hand_off_slot(index);
            if (rank == 0) {
                ptx::mbarrier_wait(&hand_off->peer_empty[slot], parity ^ 1);
                ptx::store_to_peer(&hand_off->peer_tile[slot], tile, &hand_off->peer_full[slot], 1);
            } else {
                ptx::mbarrier_arrive_expect_tx(&hand_off->peer_full[slot], sizeof(int32_t));
                ptx::mbarrier_wait<true>(&hand_off->peer_full[slot], parity);
                tile = *reinterpret_cast<volatile int32_t*>(&hand_off->peer_tile[slot]);
                ptx::mbarrier_arrive_cluster_release(&hand_off->peer_empty[slot], 0);
            }
        }
        // The BLOCK scale warps walk the same tiles: those after the first (and the final -1)
        // through their two-slot ring.
        if (smem.scale_ring(p)) {
            ScaleWarpHandOff* const scale_hand_off =
                scale_warp_hand_off<typename K::Config>(smem.scale_slots(p), p.stages);
            const auto [slot, parity] = hand_off_slot(index);
            ptx::mbarrier_wait(&scale_hand_off->empty[slot], parity ^ 1);
            scale_hand_off->tile[slot] = tile;
            ptx::mbarrier_arrive(&scale_hand_off->full[slot]);
        }
        return tile;
    }

    /// With the copies of work item `index`'s last k-block: the leader draws the next ticket
    /// (claiming the word for this launch first).
    __device__ __forceinline__ void draw_next(int32_t index) {
        if (p.tile_tickets == nullptr || rank != 0) return;
        if (index == 0) claim_ticket_word(p.tile_tickets, taken, tag());
        taken = atomicAdd(p.tile_tickets, 1ull);
    }
};

/// The consumers' side, in a warp: the cluster tile of work item `index`. With tile tickets the
/// producer wrote it (or -1) into the word of the tile's first stage, `at`, which is full once
/// this returns. Lane 0 reads it for its warp: the lane that frees the stage must be the one
/// whose read that arrival orders before the producer's next write of the word (racecheck
/// reports the other lanes' reads as WAR hazards).
template <typename K>
__device__ __forceinline__ int32_t consumer_cluster_tile(const GroupedGemmParams& p,
                                                         const SharedStorage<K>& smem,
                                                         const RingPosition& at, int32_t index) {
    if (p.tile_tickets == nullptr) return tile_scheduler<K>(p, smem.schedule).round_robin(index);
    ptx::mbarrier_wait(&smem.full[at.stage], at.phase);
    int32_t tile = 0;
    if (threadIdx.x % 32 == 0)
        tile = *reinterpret_cast<volatile int32_t*>(&smem.hand_off->stage_tile[at.stage]);
    return __shfl_sync(0xffffffffu, tile, 0);
}

}  // namespace moegemm::native

// The consumers' main loops: each of the two consumer warpgroups computes its 64 rows x
// kConsumerN columns of a tile with wgmma (fp32 accumulators in registers), one k-block per
// full stage, and releases each stage to the producers. 16-bit inputs accumulate in place
// (m64nNk16); E4M3 inputs (m64nNk32) go through a temporary per column slice that is promoted
// into the accumulators with the BLOCK scales, if any (fp8_scales.cuh). Swap-AB multiplies the
// weights (wgmma's A) by the tile's tokens (its N).
#pragma once

#include "native/sm90/fp8_scales.cuh"
#include "native/sm90/kernel_traits.cuh"
#include "native/wgmma.cuh"

namespace moegemm::native {

/// A consumer thread: which warpgroup, and where its share of the tile starts. With 128-row
/// tiles each consumer takes 64 rows; with 64-row tiles (decode) half of the columns.
template <typename K>
struct ConsumerThread {
    int consumer;    ///< 0 or 1
    int t;           ///< thread in the warpgroup
    int warp;        ///< warp in the warpgroup
    int lane;
    int row_offset;  ///< first row of the tile this consumer computes
    int col_offset;  ///< first column of the tile this consumer computes

    __device__ __forceinline__ explicit ConsumerThread(int warpgroup)
        : consumer(warpgroup - 1), t(threadIdx.x % 128), warp(t / 32), lane(t % 32) {
        // Broadcast from lane 0, the compiler then knows they are the same in every lane and
        // keeps them, and what derives from them (the fp8 loop's wgmma descriptors), in uniform
        // registers: a shorter path between an fp8 k-block's last promotion and the next
        // k-block's MMAs. Not in the instance where the uniform registers this takes make ptxas
        // spill (has_uniform_consumer_offsets).
        row_offset = uniform(K::kBlockM == 128 ? 64 * consumer : 0);
        col_offset = uniform(K::kBlockM == 128 ? 0 : K::kConsumerN * consumer);
    }
    __device__ __forceinline__ static int uniform(int value) {
        return K::kUniformOffsets ? ptx::warp_uniform(value) : value;
    }

    /// Frees `stage` for the producers that fill it: this CTA's, and the peer's, whose A half
    /// lands here too.
    __device__ __forceinline__ void release(const SharedStorage<K>& smem, int stage,
                                            uint32_t rank) const {
        if (lane != 0) return;
        ptx::mbarrier_arrive(&smem.empty[stage]);
        if constexpr (K::kClusterN > 1) ptx::mbarrier_arrive_cluster(&smem.empty[stage], rank ^ 1);
    }
};

/// What a consumer's main loop works on for one tile: the descriptors of its operands in
/// stage 0 (both loops advance them by the stage's offset and the k-step, on the uniform
/// datapath; rows of 128 bytes, offsets multiples of the 1024-byte swizzle atom; an N-major B,
/// 16-bit only, is stored as boxes of 64 columns, 8 KB apart), the k-blocks, and the ring.
template <typename K>
struct MainloopArgs {
    const SharedStorage<K>& smem;
    const ConsumerThread<K>& thread;
    uint32_t rank;
    int stages;
    int32_t k_blocks;
    uint64_t desc_a0;
    uint64_t desc_b0;

    __device__ __forceinline__ MainloopArgs(const SharedStorage<K>& storage,
                                            const ConsumerThread<K>& consumer, uint32_t cta_rank,
                                            int ring_stages, int32_t blocks)
        : smem(storage), thread(consumer), rank(cta_rank), stages(ring_stages), k_blocks(blocks),
          desc_a0(ptx::kmajor_sw128_descriptor(storage.stage_a(0) + consumer.row_offset * 128)),
          desc_b0(K::kNMajorB ? ptx::nmajor_sw128_descriptor(storage.stage_b(0) +
                                                             consumer.col_offset / 64 * 64 * 128)
                              : ptx::kmajor_sw128_descriptor(storage.stage_b(0) +
                                                             consumer.col_offset * 128)) {}
};

/// A consumer whose 64 rows of a 128-row tile hold none of the expert's (the upper half of an
/// expert's last row tile when at most 64 rows are left) skips its MMAs: it only waits for
/// each stage and frees it. Under the power cap the MMAs of rows that are never stored cost
/// clock. (Its sums keep the last tile's values: none is stored. Zeroing them here made
/// ptxas serialize every instance's MMAs.)
template <typename K>
__device__ __forceinline__ void skip_mainloop(const GroupedGemmParams& p, const MainloopArgs<K>& a,
                                              RingPosition& ring) {
    for (int32_t kb = 0; kb < a.k_blocks; ++kb) {
        ptx::mbarrier_wait(&a.smem.full[ring.stage], ring.phase);
        if constexpr (K::kScaleRingInstance) {
            // The scale warps wait for every consumer thread before refilling.
            if (p.scale_mode == MOEGEMM_SCALE_BLOCK && a.smem.scale_ring(p)) {
                ptx::mbarrier_arrive(
                    scale_slot_empty<typename K::Config>(a.smem.scale_slots(p), ring.stage));
            }
        }
        a.thread.release(a.smem, ring.stage, a.rank);
        ring.advance(a.stages);
    }
}

/// 16-bit inputs: every k-block's k16 MMAs into `acc`, one k-block kept in flight; the
/// previous one is done when the next is issued, and its stage is freed then. Tokens > 0
/// (swap-AB): the weights (B's descriptor) are wgmma's A, the tile's first `Tokens` rows its
/// N (stale rows past the tile's only feed accumulator columns that are never stored).
/// `prev_stage`: the stage of the MMAs still in flight (-1: none), which the caller frees
/// once they are done (one wait after the token variants rather than one in each).
template <typename K, int Tokens, int Count>
__device__ __forceinline__ void mainloop_16bit(float (&acc)[Count], const MainloopArgs<K>& a,
                                               RingPosition& ring, int& prev_stage) {
    using Config = typename K::Config;
    // An N-major B's k16 step is 16 of its 128-byte K-rows.
    constexpr uint32_t kStepBytesB = K::kNMajorB ? 16 * 128 : 32;
    for (int32_t kb = 0; kb < a.k_blocks; ++kb) {
        ptx::mbarrier_wait(&a.smem.full[ring.stage], ring.phase);
        // The stage broadcast from lane 0: ptxas then keeps the descriptor arithmetic on the
        // uniform datapath (with the stage per lane, each MMA's descriptors were moved over by
        // four R2URs).
        const uint32_t stage_offset =
            static_cast<uint32_t>(ptx::warp_uniform(ring.stage)) * Config::kStageBytes;
        const uint64_t desc_a = ptx::advance_descriptor(a.desc_a0, stage_offset);
        const uint64_t desc_b = ptx::advance_descriptor(a.desc_b0, stage_offset);
        ptx::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < K::kBlockK / 16; ++kk) {
            const uint64_t tokens_k = ptx::advance_descriptor(desc_a, kk * 32);
            const uint64_t weights_k = ptx::advance_descriptor(desc_b, kk * kStepBytesB);
            const int accumulate = kb > 0 || kk > 0;
            if constexpr (Tokens > 0)
                mma_weight_blocks<WgmmaSwapped<Tokens, K::kF16, K::kNMajorB>, K::kWeightBlocks>(
                    acc, weights_k, tokens_k, accumulate);
            else
                Wgmma<K::kConsumerN, K::kF16, K::kNMajorB>::mma(acc, tokens_k, weights_k,
                                                                accumulate);
        }
        ptx::wgmma_commit();
        // Keep this k-block's MMAs in flight; the previous one is done: free its stage.
        ptx::wgmma_wait<1>();
        if (prev_stage >= 0) a.thread.release(a.smem, prev_stage, a.rank);
        prev_stage = ring.stage;
        ring.advance(a.stages);
    }
}

/// E4M3 inputs: each k-block runs slice by slice (kSliceN columns): the slice's MMAs into
/// `tmp`, then its promotion (the k-block's sums of those columns are complete); the stage is
/// free after the last slice. Between the last promotion of one k-block and the first MMAs of
/// the next, the other consumer warpgroup's MMAs alone keep the tensor cores busy, so the loop
/// keeps that path short: descriptors advance from ones made once per tile, and only BLOCK
/// scales are handled per k-block (the other modes' scales apply to the finished sums).
/// Source: where BLOCK scales come from; Tokens as in mainloop_16bit. `acc` is zeroed first.
template <typename K, ScaleSource Source, int Tokens, int Count, int TmpCount>
__device__ __forceinline__ void mainloop_e4m3(float (&acc)[Count], float (&tmp)[TmpCount],
                                              const GroupedGemmParams& p, const MainloopArgs<K>& a,
                                              RingPosition& ring, const TileCoord& c) {
    using Config = typename K::Config;
    constexpr bool kBlockScales = Source == ScaleSource::Global;
    constexpr bool kRingScales = Source == ScaleSource::Ring;
    constexpr int kSlices = K::kSlices;
    const ConsumerThread<K>& thread = a.thread;
    const int32_t k_blocks = a.k_blocks;
    // BLOCK: a k-block's scales, loaded one k-block ahead. (Loaded just before the full-barrier
    // wait, their L2 latency is exposed whenever the ring is ahead and the wait returns at once.)
    struct Scales {
        float row[2];
        float col[kSlices];
    };
    [[maybe_unused]] const auto scales = [&] {
        if constexpr (kBlockScales) {
            // The thread's first row and the consumer's first column of scales.
            return BlockScaleRows<kSlices>(
                p, a.smem.schedule, c, k_blocks,
                c.m_tile * K::kBlockM + thread.row_offset + thread.warp * 16 + thread.lane / 4,
                c.n_tile * K::kBlockN + thread.col_offset);
        } else {
            return 0;
        }
    }();
    // Ring: where this thread's two rows and the consumer's column blocks sit in a stage's
    // slot (stage_block_scales).
    [[maybe_unused]] const int ring_row = thread.row_offset + thread.warp * 16 + thread.lane / 4;
    [[maybe_unused]] const int ring_col = K::kBlockM + thread.col_offset / 128;
    [[maybe_unused]] float* const slots = kRingScales ? a.smem.scale_slots(p) : nullptr;
    // One k-block, promoted with `current` scales while the next k-block's load into
    // `upcoming` (the last k-block loads its own again: in bounds, and no branch around the
    // loads). With the ring, with the scales of its stage's slot.
    auto k_block = [&](int32_t kb, const Scales& current, Scales& upcoming) {
        if constexpr (kBlockScales) scales.load(min(kb + 1, k_blocks - 1), upcoming.row, upcoming.col);
        ptx::mbarrier_wait(&a.smem.full[ring.stage], ring.phase);
        [[maybe_unused]] Scales staged;
        if constexpr (kRingScales) {
            const float* slot = scale_slot<Config>(slots, ring.stage);
#pragma unroll
            for (int h = 0; h < 2; ++h) staged.row[h] = slot[ring_row + 8 * h];
#pragma unroll
            for (int h = 0; h < kSlices; ++h) staged.col[h] = slot[ring_col + h];
        }
        const uint32_t stage_offset = static_cast<uint32_t>(ring.stage) * Config::kStageBytes;
        auto slice = [&](auto slice_index) {
            constexpr int kSlice = decltype(slice_index)::value;
            const uint64_t desc_a = ptx::advance_descriptor(a.desc_a0, stage_offset);
            const uint64_t desc_b =
                ptx::advance_descriptor(a.desc_b0, stage_offset + kSlice * K::kSliceN * 128);
            ptx::wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < K::kBlockKElems / 32; ++kk) {
                // k32 steps, 32 bytes apart along the 128-byte rows
                const uint64_t tokens_k = ptx::advance_descriptor(desc_a, kk * 32);
                const uint64_t weights_k = ptx::advance_descriptor(desc_b, kk * 32);
                if constexpr (Tokens > 0)
                    mma_weight_blocks<WgmmaE4m3Swapped<Tokens>, K::kWeightBlocks>(
                        tmp, weights_k, tokens_k, kk > 0);
                else
                    WgmmaE4m3<K::kSliceN>::mma(tmp, tokens_k, weights_k, kk > 0);
            }
            ptx::wgmma_commit();
            ptx::wgmma_wait<0>();
            constexpr int kOffset = kSlice * K::kSliceN / 2;
            if constexpr (kBlockScales)
                promote<kOffset>(acc, tmp, current.row, current.col[kSlice]);
            else if constexpr (kRingScales)
                promote<kOffset>(acc, tmp, staged.row, staged.col[kSlice]);
            else
                promote<kOffset>(acc, tmp);
        };
        slice(std::integral_constant<int, 0>{});
        if constexpr (kSlices == 2) slice(std::integral_constant<int, 1>{});
        // Every thread read the slot: each tells the scale warps it may be written again.
        if constexpr (kRingScales) ptx::mbarrier_arrive(scale_slot_empty<Config>(slots, ring.stage));
        thread.release(a.smem, ring.stage, a.rank);
        ring.advance(a.stages);
    };
    [[maybe_unused]] Scales even, odd;
    if constexpr (kBlockScales) {
        scales.load(0, even.row, even.col);
        // Two k-blocks per trip, the scale registers trading roles: carried from trip to trip
        // in one set, ptxas moved each fresh load into it wherever it chose, and the move
        // waited for L2 between a k-block's two slices.
        for (int32_t kb = 0; kb < k_blocks; kb += 2) {
            k_block(kb, even, odd);
            if (kb + 1 < k_blocks) k_block(kb + 1, odd, even);
        }
    } else {
        for (int32_t kb = 0; kb < k_blocks; ++kb) k_block(kb, even, odd);
    }
}

/// body(tokens): the tile's main loop. Swap-AB multiplies as many tokens as the A box the
/// producer loaded (16, 32 or 64); otherwise tokens is 0.
template <typename K, typename Body>
__device__ __forceinline__ void with_tokens(int32_t rows, const Body& body) {
    if constexpr (K::kSwapAB) {
        switch (a_box_index(rows, K::kBlockM)) {
            case 0: body(std::integral_constant<int, K::kBlockM>{}); break;
            case 1: body(std::integral_constant<int, K::kBlockM / 2>{}); break;
            default: body(std::integral_constant<int, K::kBlockM / 4>{}); break;
        }
    } else {
        body(std::integral_constant<int, 0>{});
    }
}

/// Tests only: ORs `Bit` into the status word (thread 0 of the warpgroup) when the plan asks
/// for the trace of what ran (GroupedGemmParams::trace_features).
template <uint32_t Bit>
__device__ __forceinline__ void trace(const GroupedGemmParams& p, int t) {
    if (p.trace_features != 0 && t == 0) atomicOr(p.status_word, Bit);
}

/// One tile's main loop for this consumer: skipped where its rows are idle, else the loop of
/// the input type, tokens and scale source.
template <typename K, int Count, int TmpCount>
__device__ __forceinline__ void run_mainloop(float (&acc)[Count], float (&tmp)[TmpCount],
                                             const GroupedGemmParams& p, const MainloopArgs<K>& a,
                                             RingPosition& ring, const TileCoord& c) {
    const int32_t rows = tile_rows(a.smem.schedule, c, K::kBlockM);
    const bool idle = K::kSkipsIdleHalves && p.skip_idle_halves != 0 && a.thread.row_offset >= rows;
    if constexpr (K::kFp8) {
#pragma unroll
        for (float& x : acc) x = 0.0f;  // promote() adds every k-block's sums
        if (idle) {
            trace<kTraceIdleHalfSkipped>(p, a.thread.t);
            skip_mainloop<K>(p, a, ring);
            return;
        }
        with_tokens<K>(rows, [&](auto tokens) {
            constexpr int kTokens = decltype(tokens)::value;
            // (Swap-AB serves no BLOCK scales: can_implement.)
            if constexpr (!K::kSwapAB) {
                if (p.scale_mode == MOEGEMM_SCALE_BLOCK) {
                    if (a.smem.scale_ring(p)) {
                        trace<kTraceScaleRing>(p, a.thread.t);
                        mainloop_e4m3<K, ScaleSource::Ring, kTokens>(acc, tmp, p, a, ring, c);
                    } else {
                        mainloop_e4m3<K, ScaleSource::Global, kTokens>(acc, tmp, p, a, ring, c);
                    }
                    return;
                }
            }
            mainloop_e4m3<K, ScaleSource::None, kTokens>(acc, tmp, p, a, ring, c);
        });
    } else {
        int prev_stage = -1;
        if (idle) {
            trace<kTraceIdleHalfSkipped>(p, a.thread.t);
            skip_mainloop<K>(p, a, ring);
        } else {
            with_tokens<K>(rows, [&](auto tokens) {
                mainloop_16bit<K, decltype(tokens)::value>(acc, a, ring, prev_stage);
            });
        }
        ptx::wgmma_wait<0>();
        if (prev_stage >= 0) a.thread.release(a.smem, prev_stage, a.rank);
    }
}

}  // namespace moegemm::native

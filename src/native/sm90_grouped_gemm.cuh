// The native Hopper (sm_90a) grouped GEMM: one persistent, warp-specialized kernel for the
// VARIABLE, MASKED and FIXED layouts, with the expert sizes read on the GPU.
//
//   warpgroup 0   producer: one thread walks the CTA's tiles and streams A and B k-blocks into
//                 a ring of shared-memory stages with TMA (128-byte swizzle), each stage
//                 guarded by a "full" and an "empty" mbarrier;
//   warpgroups 1-2 consumers: each computes 64 rows x kConsumerN columns of the tile with
//                 wgmma (m64 x N x k16, fp32 accumulators in registers): with 128-row tiles
//                 each takes half the rows, with 64-row tiles (decode) half the columns.
//   epilogue      full 64-row slices of 16-bit outputs go through a swizzled shared-memory
//                 tile and TMA stores that overlap the next tile (Staged); the rest is stored
//                 from registers, bounded to the expert's rows and to N.
//   swap-AB       (decode) the weights as wgmma's A, the tile's 16, 32 or 64 tokens as its N:
//                 the tensor cores skip the padding rows that 64-row tiles multiply, which
//                 keeps the SM clock up under the power cap (bench/NOTES.md §27).
//   E4M3          wgmma k32 over k-blocks of 128 values (the same 128-byte stage rows); each
//                 k-block runs as 128-column halves into a 64-register temporary, and each
//                 half is promoted (scaled, BLOCK) into the fp32 accumulators before the next:
//                 Hopper's fp8 MMAs accumulate with fewer bits than fp32.
//   clusters      with ClusterN = 2, two CTAs compute neighbouring column tiles of the same
//                 rows and each loads half of the A tile for both (TMA multicast); a stage is
//                 refilled only when the consumers of both CTAs have released it.
//
// Every CTA first builds the tile schedule in shared memory from the raw sizes (clamped, see
// tile_schedule.cuh). Its first tile group is blockIdx.x / ClusterN; after that it takes the
// next free group by tile ticket (a counter in the workspace, tile_schedule.cuh), or, without
// tickets (stream-K, BLOCK scales read from global memory), groups + gridDim.x / ClusterN, ...
// With host sizes the host may pass the schedule itself (host_schedule), which the CTA then
// only copies.
// A tile's A rows past its expert's last row belong to the next expert (or are zero-filled by
// TMA past the tensor): they only feed accumulator rows that are never stored.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda.h>

#include <type_traits>

#include "native/grouped_gemm_params.hpp"
#include "native/ptx.cuh"
#include "native/tile_schedule.cuh"
#include "native/wgmma.cuh"

namespace moegemm::native {

namespace detail {

/// Per-CTA schedule in shared memory. Row starts fit in 32 bits: the native backend refuses
/// tensors of more than 2^31 - 1 rows (TMA coordinates are 32-bit).
struct Schedule {
    int32_t* row_start;  // [E]  first row of each expert in A and D
    int32_t* rows;       // [E]  clamped rows
    int32_t* tile_start; // [E+1] exclusive prefix of tiles; tile_start[E] = total
};

/// Rows of tile `c` that its expert has (1 to block_m): what the producer's A box covers and
/// what swap-AB multiplies.
__device__ __forceinline__ int32_t tile_rows(const Schedule& s, const TileCoord& c, int block_m) {
    return min(block_m, s.rows[c.expert] - c.m_tile * block_m);
}

/// Copies the first `count` ints of the sizes into `staged` (shared memory), all threads of the
/// CTA together: the raw sizes (E ints, from the device or the parameters), or the schedule
/// the host built (GroupedGemmParams::host_schedule). Host sizes are a kernel parameter, and a
/// warp that reads different parameter words is served one word at a time: read by warp 1
/// alone, eight words per lane, 128 experts made the prologue 3.4 µs instead of 1.2-1.4
/// (bench/NOTES.md §17). Here each thread reads at most one 16-byte group per 384 groups, dealt
/// out across the warps (group lane * 12 + warp) so that each warp's share of the serialized
/// reads is small; device sizes the same way.
__device__ __forceinline__ void stage_sizes(const GroupedGemmParams& p, int count,
                                            int32_t* staged) {
    constexpr int kWarps = 12;  // the CTA's 384 threads
    const int first =
        static_cast<int>(threadIdx.x % 32) * kWarps + static_cast<int>(threadIdx.x / 32);
    static_assert(MOEGEMM_MAX_EXPERTS % 4 == 0, "host sizes are read in whole groups of four");
    for (int g = first; 4 * g < count; g += 32 * kWarps) {
        const int4 host = p.device_sizes ? int4{} : reinterpret_cast<const int4*>(p.host_sizes)[g];
        const int32_t host_values[4] = {host.x, host.y, host.z, host.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int e = 4 * g + i;
            if (e < count) staged[e] = p.device_sizes ? p.device_sizes[e] : host_values[i];
        }
    }
}

/// MOEGEMM_PHASE_STAMPS builds: this CTA's time at `slot` (PhaseSlot); otherwise nothing.
__device__ __forceinline__ void phase_stamp(const GroupedGemmParams& p, int slot) {
#if defined(MOEGEMM_PHASE_STAMPS)
    uint64_t* mine = p.phase_stamps + static_cast<std::size_t>(blockIdx.x) * kPhaseSlots;
    mine[slot] = ptx::global_timer_ns();
    if (slot < kPhaseClock) mine[kPhaseClock + slot] = clock64();
#else
    (void)p;
    (void)slot;
#endif
}

/// MOEGEMM_PHASE_STAMPS builds: waits GroupedGemmParams::start_delay_ns (the producer, before
/// its first copy); otherwise nothing.
__device__ __forceinline__ void debug_start_delay(const GroupedGemmParams& p) {
#if defined(MOEGEMM_PHASE_STAMPS)
    const uint64_t start = ptx::global_timer_ns();
    while (ptx::global_timer_ns() - start < static_cast<uint64_t>(p.start_delay_ns)) {
    }
#else
    (void)p;
#endif
}

/// `body(e)` for e in [first, last): a loop the compiler may unroll, or (Rolled) one it must
/// not.
template <bool Rolled, typename Body>
__device__ __forceinline__ void for_each_expert(int first, int last, const Body& body) {
    if constexpr (Rolled) {
#pragma unroll 1
        for (int e = first; e < last; ++e) body(e);
    } else {
        for (int e = first; e < last; ++e) body(e);
    }
}

/// The sum of `value` over this lane and the lanes below it (the whole warp takes part).
__device__ __forceinline__ int32_t warp_inclusive_sum(int32_t value) {
    const int lane = threadIdx.x % 32;
    for (int offset = 1; offset < 32; offset *= 2) {
        const int32_t up = __shfl_up_sync(0xffffffffu, value, offset);
        if (lane >= offset) value += up;
    }
    return value;
}

/// One warp builds the schedule: each lane takes a contiguous run of experts, and warp scans
/// give the row prefix (VARIABLE only) and the tile prefix. `raw(e)`: expert e's raw size, read
/// twice; it may be s.rows[e] (staged), as a lane reads each of its experts' sizes before it
/// overwrites them with clamped rows. Returns the clamp flags seen (lane 0).
///
/// The prologue waits for this (bench/NOTES.md §18a: a chain of latencies, not work), so the
/// usual case takes one pass and one round of scans: a VARIABLE expert's tiles depend on its
/// row prefix only when the rows overflow max_rows (a clamp), so the first pass counts tiles
/// from the unclamped rows while it sums them, and both scans run side by side. Only when the
/// raw rows' total exceeds max_rows does a second pass count the clamped tiles and scan again.
/// MASKED and FIXED need no row prefix and take a shorter way.
///
/// Rolled: the per-lane loops stay loops. A lane has 1-4 experts in the usual cases, and
/// unrolled (by 4, with remainders) they made the build ~490 instructions longer for code that
/// runs once per launch; rolled, MASKED decode measured 0.3-0.5% faster (bench/NOTES.md §32).
/// Not for the fp8 instances: there the change moved ptxas's register allocation of the
/// consumers enough to serialize the 64 x 128 swap-AB loop's wgmmas (C7511;
/// tests/sass_check.py now fails on that).
template <int BlockM, bool Rolled, typename RawSize>
__device__ uint32_t build_schedule(const GroupedGemmParams& p, int32_t tiles_n, Schedule s,
                                   const RawSize& raw) {
    const int lane = threadIdx.x % 32;
    const int per_lane = (p.num_experts + 31) / 32;
    const int first = lane * per_lane;
    const int last = min(first + per_lane, p.num_experts);

    if (p.layout != RowLayout::Variable) {
        // MASKED and FIXED clamp each expert alone and start it at e x max_rows: no row
        // prefix. One pass writes the rows and counts the tiles, one 32-bit scan, one pass
        // writes the tile prefix (MASKED decode waits for this: bench/NOTES.md §33).
        int32_t lane_tiles = 0;
        uint32_t flags = 0;
        for_each_expert<Rolled>(first, last, [&](int e) {
            const ExpertRows x = clamp_expert_rows(p.layout, e, raw(e), 0, p.max_rows);
            s.row_start[e] = static_cast<int32_t>(x.row_start);
            s.rows[e] = x.rows;
            lane_tiles += expert_tiles(x.rows, BlockM, tiles_n);
            flags |= x.flags;
        });
        if (threadIdx.x == 32) phase_stamp(p, kPhaseSchedulePass1);
        int32_t tiles_before = warp_inclusive_sum(lane_tiles);
        const int32_t total_tiles = __shfl_sync(0xffffffffu, tiles_before, 31);
        tiles_before -= lane_tiles;
        if (threadIdx.x == 32) phase_stamp(p, kPhaseScheduleScanned);
        for_each_expert<Rolled>(first, last, [&](int e) {
            s.tile_start[e] = tiles_before;
            tiles_before += expert_tiles(s.rows[e], BlockM, tiles_n);
        });
        if (lane == 0) s.tile_start[p.num_experts] = total_tiles;
        return __reduce_or_sync(0xffffffffu, flags);
    }

    // VARIABLE. Rows (non-negative raw sizes, 64-bit offsets) and tiles as if unclamped.
    int64_t lane_rows = 0;
    int32_t lane_tiles = 0;
    for_each_expert<Rolled>(first, last, [&](int e) {
        const int32_t r = max(raw(e), 0);
        lane_rows += r;
        lane_tiles += expert_tiles(r, BlockM, tiles_n);
    });
    if (threadIdx.x == 32) phase_stamp(p, kPhaseSchedulePass1);
    int64_t rows_before = lane_rows;
    int32_t tiles_before = lane_tiles;
    for (int offset = 1; offset < 32; offset *= 2) {
        const int64_t rows_up = __shfl_up_sync(0xffffffffu, rows_before, offset);
        const int32_t tiles_up = __shfl_up_sync(0xffffffffu, tiles_before, offset);
        if (lane >= offset) {
            rows_before += rows_up;
            tiles_before += tiles_up;
        }
    }
    const int64_t total_rows = __shfl_sync(0xffffffffu, rows_before, 31);
    rows_before -= lane_rows;
    if (total_rows > p.max_rows) {
        // Capacity clamps: count the tiles of the clamped rows, which depend on the prefix.
        lane_tiles = 0;
        int64_t prefix = rows_before;
        for_each_expert<Rolled>(first, last, [&](int e) {
            const int32_t r = raw(e);
            lane_tiles += expert_tiles(clamp_expert_rows(p.layout, e, r, prefix, p.max_rows).rows,
                                       BlockM, tiles_n);
            prefix += max(r, 0);
        });
        tiles_before = warp_inclusive_sum(lane_tiles);
    }
    const int32_t total_tiles = __shfl_sync(0xffffffffu, tiles_before, 31);
    tiles_before -= lane_tiles;
    if (threadIdx.x == 32) phase_stamp(p, kPhaseScheduleScanned);

    uint32_t flags = 0;
    for_each_expert<Rolled>(first, last, [&](int e) {
        const int32_t r = raw(e);
        const ExpertRows x = clamp_expert_rows(p.layout, e, r, rows_before, p.max_rows);
        rows_before += max(r, 0);
        s.row_start[e] = static_cast<int32_t>(x.row_start);
        s.rows[e] = x.rows;
        s.tile_start[e] = tiles_before;
        tiles_before += expert_tiles(x.rows, BlockM, tiles_n);
        flags |= x.flags;
    });
    if (lane == 0) s.tile_start[p.num_experts] = total_tiles;
    return __reduce_or_sync(0xffffffffu, flags);
}

/// One warp makes this CTA's tensor map `index` in the workspace: the plan's template (a kernel
/// parameter, encoded once on the host) with the launch's global `address`, so that no
/// descriptor is encoded on the host per call. `scratch`: 128-byte aligned shared memory with
/// room for the map at `index`. Lane 0 copies the template, then the warp publishes it (a
/// release at GPU scope).
__device__ __forceinline__ void make_tensor_map(const TensorMapTemplates& templates, int index,
                                                const void* address, unsigned char* scratch,
                                                CUtensorMap* maps) {
    static_assert(sizeof(CUtensorMap) == 8 * sizeof(uint4), "a tensor map is 128 bytes");
    const int lane = threadIdx.x % 32;
    unsigned char* map = scratch + index * sizeof(CUtensorMap);
    if (lane == 0) {
        const uint4* from = reinterpret_cast<const uint4*>(&templates.maps[index]);
#pragma unroll
        for (int part = 0; part < 8; ++part) reinterpret_cast<uint4*>(map)[part] = from[part];
        ptx::tensor_map_replace_address(map, address);
    }
    // A plain store first: compute-sanitizer's initcheck models the copy below as reading its
    // (uninitialized) destination. Costs 128 bytes per map.
    reinterpret_cast<uint32_t*>(&maps[index])[lane] = 0u;
    __syncwarp();
    ptx::tensor_map_publish(&maps[index], map);
}

/// The global address tensor map `index` (TensorMapIndex) describes.
__device__ __forceinline__ const void* tensor_map_address(const GroupedGemmParams& p, int index) {
    return index < kMapB ? p.a : index == kMapB ? p.b : p.d;
}


/// The producer's stamp `base` + `index` (kPhaseProducerGroup, kPhaseProducerFirstCopy) of the
/// first kPhaseMaxTiles tiles.
__device__ __forceinline__ void phase_stamp_producer(const GroupedGemmParams& p, int base,
                                                     int32_t index) {
#if defined(MOEGEMM_PHASE_STAMPS)
    if (index < kPhaseMaxTiles) phase_stamp(p, base + index);
#else
    (void)p;
    (void)base;
    (void)index;
#endif
}

/// Consumer 0's stamps of tile `index`: the end of its main loop, or (`epilogue`) of its
/// epilogue, which also records the count of tiles so far.
__device__ __forceinline__ void phase_stamp_tile(const GroupedGemmParams& p, int32_t index,
                                                 bool epilogue) {
#if defined(MOEGEMM_PHASE_STAMPS)
    if (threadIdx.x != 128) return;
    if (index < kPhaseMaxTiles) phase_stamp(p, kPhaseTile + 2 * index + (epilogue ? 1 : 0));
    if (epilogue) {
        p.phase_stamps[static_cast<std::size_t>(blockIdx.x) * kPhaseSlots + kPhaseTileCount] =
            static_cast<uint64_t>(index + 1);
    }
#else
    (void)p;
    (void)index;
    (void)epilogue;
#endif
}

// ---- fp8 scales (moegemm_scale_mode_t in the header says how they are laid out) ----------
// A thread's fragment of m64nN: acc[4j + 2h + q] is row `row` + 8h, column `col` + 8j + q,
// rows relative to the expert, columns absolute.

/// BLOCK: where a thread's scales start in one tile, found once per tile so that each k-block's
/// are 2 + `Halves` loads at offset kb: its two rows' in a_scale[rows, KB] and, for each
/// 128-column block of the consumer from `col` on, b_scale[E, NB, KB]. Rows past the expert's
/// and column blocks past N are never stored: their indices are clamped into the arrays rather
/// than tested, so the loads are unconditional (no branch around each).
template <int Halves>
struct BlockScaleRows {
    const float* row[2];
    const float* col[Halves];

    __device__ __forceinline__ BlockScaleRows(const GroupedGemmParams& p, const Schedule& s,
                                              const TileCoord& c, int32_t k_blocks, int32_t first_row,
                                              int32_t first_col) {
        const int32_t last_row = s.rows[c.expert] - 1;  // a tile of the expert: it has rows
        const int64_t expert_first = s.row_start[c.expert];
#pragma unroll
        for (int h = 0; h < 2; ++h)
            row[h] = p.a_scale + (expert_first + min(first_row + 8 * h, last_row)) * k_blocks;
        const int64_t column_blocks = (p.n + 127) / 128;
#pragma unroll
        for (int h = 0; h < Halves; ++h) {
            const int32_t n = min(first_col + 128 * h, p.n - 1);
            col[h] = p.b_scale + (c.expert * column_blocks + n / 128) * k_blocks;
        }
    }

    /// The scales of k-block kb.
    __device__ __forceinline__ void load(int32_t kb, float (&row_scale)[2],
                                         float (&col_scale)[Halves]) const {
#pragma unroll
        for (int h = 0; h < 2; ++h) row_scale[h] = row[h][kb];
#pragma unroll
        for (int h = 0; h < Halves; ++h) col_scale[h] = col[h][kb];
    }
};

/// acc[Offset ...] += tmp * row_scale[h] * col_scale: one k-block's sums of a slice of columns
/// (fragment registers [Offset, Offset + TmpCount)) into the fp32 accumulators, which the tile
/// zeroed (BLOCK scales). (Choosing between a first-k-block multiply and the add per element
/// cost both, as a predicated FMUL and FFMA pair: twice the promotion's instruction issue.)
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

/// The BLOCK scale ring is filled by warps 1.. of the producer warpgroup, 64 tile rows each
/// (two rows per lane: with four, the 128-row instances spilled on the producer's 40 registers).
__host__ __device__ constexpr int block_scale_warps(int block_m) { return block_m / 64; }
/// Its slots are handed back to those warps on an mbarrier in each slot
/// (TileConfig::kBlockScaleSlotBarrierOffset) on which every consumer thread arrives once it has
/// read the slot. (Each reader's own arrival: with one lane's release after a __syncwarp, and
/// with named barriers (bar.arrive / bar.sync) in the TMA-store instances, racecheck reports
/// the other readers' reads against the next write.)
constexpr uint32_t kScaleSlotReaders = 256;
/// The slot of stage `stage` in the ring at `slots`: its scales, then its barrier.
template <typename Config>
__device__ __forceinline__ float* scale_slot(float* slots, int stage) {
    return reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(slots) +
                                    stage * Config::kBlockScaleSlotBytes);
}
/// Where the group a CTA takes with work index `index` (> 0) passes through a two-slot group
/// hand-off (TileHandOut's peer slots, ScaleGroupHandOff): the slot, used by indices 1, 3, ...
/// and 2, 4, ... in turn, and the parity of that slot's `full` phase (`empty` waits on the
/// other parity).
struct HandOffSlot {
    int slot;
    uint32_t parity;
};
__device__ __forceinline__ HandOffSlot hand_off_slot(int32_t index) {
    const int32_t handed = index - 1;
    return {handed % 2, static_cast<uint32_t>(handed / 2) & 1};
}
/// The ring's group hand-off (ScaleGroupHandOff), after its `stages` slots.
template <typename Config>
__device__ __forceinline__ ScaleGroupHandOff* scale_group_hand_off(float* slots, int stages) {
    return reinterpret_cast<ScaleGroupHandOff*>(reinterpret_cast<unsigned char*>(slots) +
                                                stages * Config::kBlockScaleSlotBytes);
}
template <typename Config>
__device__ __forceinline__ uint64_t* scale_slot_empty(float* slots, int stage) {
    return reinterpret_cast<uint64_t*>(reinterpret_cast<unsigned char*>(
                                           scale_slot<Config>(slots, stage)) +
                                       Config::kBlockScaleSlotBarrierOffset);
}

/// BLOCK scales staged in shared memory by scale warp `part` (warp 1 + part of the producer
/// warpgroup): for each k-block of the tiles the consumers walk (round robin, or by tile
/// ticket as the producer hands them on through ScaleGroupHandOff), its 64 of the
/// tile's row scales and (part 0) the scales of the tile's
/// 128-column blocks into the slot of the k-block's stage, then each lane's arrival on the
/// stage's full barrier (beside the copies'). The loads are issued before the wait for the
/// slot, so their latency hides behind the ring. Rows past the expert's and column blocks past
/// N are clamped into the arrays, as BlockScaleRows does. (In the consumers the same loads
/// cost 3-6% of the BLOCK prefill time: bench/NOTES.md §39.)
template <typename Config, int ClusterN>
__device__ __forceinline__ void stage_block_scales(const GroupedGemmParams& p,
                                                   const Schedule& schedule,
                                                   const StreamKPlan& work, int32_t first_group,
                                                   uint32_t rank, int32_t tiles_n, int32_t k_blocks,
                                                   int stages, uint64_t* full, float* slots,
                                                   int part) {
    constexpr int BlockM = Config::kBlockM;
    constexpr int BlockN = Config::kBlockN;
    static_assert(BlockN % 128 == 0, "128-column blocks");
    constexpr int kRowsPerLane = 2;  // 64 rows per warp
    constexpr int kColumnBlocks = BlockN / 128;
    static_assert(sizeof(float) * (BlockM + kColumnBlocks) <= Config::kBlockScaleSlotBarrierOffset,
                  "a slot holds the tile's scales before its barrier");
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int first_row = 64 * part + lane;  // of the tile: this lane's, and 32 rows on
    const int32_t column_blocks = (p.n + 127) / 128;
    int s = 0;
    uint32_t phase = 0;  // parity of the ring's current pass
    for (int32_t index = 0;; ++index) {
        // The tile's group: round robin, or with tile tickets the producer's (its first one is
        // the CTA's slot, as everywhere; later ones come through its ScaleGroupHandOff).
        int32_t group = stream_k_work_item(work, first_group, index).group;
        if (p.tile_tickets != nullptr && index > 0) {
            ScaleGroupHandOff* const hand_off = scale_group_hand_off<Config>(slots, stages);
            const auto [slot, parity] = hand_off_slot(index);
            ptx::mbarrier_wait(&hand_off->full[slot], parity);
            group = *reinterpret_cast<volatile int32_t*>(&hand_off->group[slot]);
            ptx::mbarrier_arrive(&hand_off->empty[slot]);  // each reader's own release
        }
        if (group < 0) {
            if (p.tile_tickets != nullptr) {
                // The producer ends the consumers with a stage whose word says -1 and whose
                // full barrier it completes with its arrival alone, which with the ring counts
                // these lanes' too: each arrives once the stage's previous phase is done (its
                // slot was read).
                ptx::mbarrier_wait(scale_slot_empty<Config>(slots, s), phase ^ 1);
                ptx::mbarrier_arrive(&full[s]);
            }
            break;
        }
        const TileCoord c = map_tile(group * ClusterN + static_cast<int32_t>(rank),
                                     schedule.tile_start, p.num_experts, tiles_n, ClusterN);
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
        // (fp8 tiles are never split along K: every item is whole. Rolled: unrolled, ptxas
        // spilled on the 40 registers.)
#pragma unroll 1
        for (int32_t kb = 0; kb < k_blocks; ++kb) {
            float row_scale[kRowsPerLane];
#pragma unroll
            for (int i = 0; i < kRowsPerLane; ++i) row_scale[i] = expert_scales[row[i] + kb];
            const float col_scale = col[kb];
            // (The first pass waits on the phase before the barrier's first: it returns.)
            ptx::mbarrier_wait(scale_slot_empty<Config>(slots, s), phase ^ 1);
            float* slot = scale_slot<Config>(slots, s);
#pragma unroll
            for (int i = 0; i < kRowsPerLane; ++i) slot[first_row + 32 * i] = row_scale[i];
            if (part == 0 && lane < kColumnBlocks) slot[BlockM + lane] = col_scale;
            // Each lane's arrival (a release) orders its own stores before the consumers' wait
            // on the stage. (One lane's after a __syncwarp would too, but racecheck does not
            // follow that chain.)
            ptx::mbarrier_arrive(&full[s]);
            if (++s == stages) {
                s = 0;
                phase ^= 1;
            }
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
    // can be in flight at once. (Under a condition each load was a branch of its own, used
    // right after: 64 dependent trips to L2 per tile, which measured twice the per-tensor time
    // on qwen3moe-fc2-decode64.)
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

// ---- Stream-K partial sums ---------------------------------------------------------------
// A split tile has two pieces, on two workers (tile_schedule.cuh): the Contributor's (its
// worker's first tail item) and the Finisher's (its worker's last). Each piece writes its fp32
// partial sums to a slot of its CTA in the workspace and counts itself in on the tile's counter
// (the Contributor CTA's); the second to arrive adds the other piece's sums and stores the tile.
// Nobody waits for another CTA, so the CTAs of the grid need not be resident together, and the
// result does not depend on who arrives last: two partial sums add commutatively. Fragments are
// stored as float4 [register / 4][consumer thread] so that a warp's stores coalesce, and the
// thread with the same index in the other CTA reads back exactly its own registers'
// counterparts.

/// The barrier of both consumer warpgroups (1 and 2 are their epilogues'). Used unaligned:
/// after a tile whose last rows end inside the second slice, one warpgroup finishes from the
/// TMA-store path and the other from the register path, at different instructions (bar.sync
/// there is undefined; synccheck reports it).
constexpr uint32_t kStreamKBarrier = 3;
constexpr int kConsumerThreads = 256;

/// The fp32 partial sums of slot `slot` in the workspace.
__device__ __forceinline__ float* partial_slot(const GroupedGemmParams& p, uint32_t slot) {
    return p.stream_k_partials + static_cast<size_t>(slot) * p.stream_k_slot_floats;
}

/// Writes this piece's partial sums to `slot`, then counts the piece in on the tile's
/// counter. True for the second piece to arrive (which then stores the tile), with the first
/// piece's sums visible to every consumer thread.
template <int ConsumerN>
__device__ __forceinline__ bool publish_partial(const float (&acc)[ConsumerN / 2],
                                                const GroupedGemmParams& p, uint32_t slot,
                                                uint32_t tile_counter, int thread) {
    float4* partial = reinterpret_cast<float4*>(partial_slot(p, slot));
#pragma unroll
    for (int i = 0; i < ConsumerN / 8; ++i) {
        partial[i * kConsumerThreads + thread] =
            make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]);
    }
    ptx::named_barrier_unaligned(kStreamKBarrier, kConsumerThreads);
    bool second = false;
    if (thread == 0) {
        __threadfence();  // this CTA's partial sums before the count (release)
        second = atomicAdd(&p.stream_k_flags[tile_counter], 1u) == 1u;
        if (second) __threadfence();  // the other piece's sums after its count (acquire)
    }
    return ptx::named_barrier_or(kStreamKBarrier, kConsumerThreads, second);
}

/// The other piece's partial sums (slot `other`) for the second piece to arrive. A
/// Finisher's piece is its worker's last item, so the pipeline's shared memory is idle: the
/// sums this thread will add are staged there (`scratch`), and the epilogue adds them 4
/// registers at a time (add_partial_unit) as it stores (all at once needs registers the
/// 128 x 256 consumers do not have; read one float4 at a time from L2 in the store loop, they
/// measured 3-4% slower). A Contributor's ring is still in use: it reads them from memory.
template <int ConsumerN>
__device__ __forceinline__ const float4* other_partial(const GroupedGemmParams& p,
                                                       uint32_t other, unsigned char* scratch,
                                                       bool stage, int thread) {
    const float4* partial = reinterpret_cast<const float4*>(partial_slot(p, other));
    if (!stage) return partial;
    float4* staged = reinterpret_cast<float4*>(scratch);
    // The stages were last read by wgmma (async proxy); these are generic-proxy writes.
    ptx::fence_async_shared();
#pragma unroll
    for (int i = 0; i < ConsumerN / 8; ++i) {
        const int unit = i * kConsumerThreads + thread;  // only this thread reads it back
        ptx::cp_async_16_cg(&staged[unit], &partial[unit]);
    }
    ptx::cp_async_wait_all();
    return staged;
}

/// acc[4j .. 4j + 3] += the other piece's counterparts, from other_partial (shared or global
/// memory; nothing without a partial).
template <int ConsumerN>
__device__ __forceinline__ void add_partial_unit(float (&acc)[ConsumerN / 2],
                                                 const float4* partial, int j, int thread) {
    if (partial == nullptr) return;
    const float4 v = partial[j * kConsumerThreads + thread];
    acc[4 * j] += v.x;
    acc[4 * j + 1] += v.y;
    acc[4 * j + 2] += v.z;
    acc[4 * j + 3] += v.w;
}

/// The second piece, after its epilogue: every consumer thread has read the other piece's sums;
/// the tile's counter goes back to 0 for the next launch.
__device__ __forceinline__ void finish_partial(const GroupedGemmParams& p, uint32_t tile_counter,
                                               int thread) {
    ptx::named_barrier_unaligned(kStreamKBarrier, kConsumerThreads);
    if (thread == 0) p.stream_k_flags[tile_counter] = 0u;
}

/// Makes the ticket word this launch's, (tag, 0), unless it already carries the tag; `seen`: a
/// value it held (tile_schedule.cuh says why this ends).
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

template <typename Out>
__device__ __forceinline__ void store_pair(Out* dst, float x, float y);

template <>
__device__ __forceinline__ void store_pair<__nv_bfloat16>(__nv_bfloat16* dst, float x, float y) {
    *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(x, y);
}
template <>
__device__ __forceinline__ void store_pair<__half>(__half* dst, float x, float y) {
    *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(x, y);
}
template <>
__device__ __forceinline__ void store_pair<float>(float* dst, float x, float y) {
    *reinterpret_cast<float2*>(dst) = make_float2(x, y);
}

/// Swap-AB epilogue: the accumulators hold the tile transposed, acc[4j + 2h + q] being output
/// column `col` + 8h (col: this thread's, from lane / 4) of token 8j + 2 (lane % 4) + q. Lanes
/// l and l ^ 4 hold neighbouring columns of the same tokens, so each pair swaps one value and
/// stores two column pairs: the even column's thread that of its first token, the odd one's
/// that of its second. Tokens from `first_row` on (of A and D), `tile_rows` of them valid
/// (stale ones were multiplied too); columns past N are not stored (N is a multiple of 8, so
/// a pair is both in or both out).
template <typename Out, int Count>
__device__ __forceinline__ void store_swapped(const float (&acc)[Count], const GroupedGemmParams& p,
                                              int64_t first_row, int32_t tile_rows, int32_t col,
                                              int lane) {
    const bool even = (lane / 4) % 2 == 0;
    const int32_t pair_col = even ? col : col - 1;
    Out* d = static_cast<Out*>(p.d) + first_row * p.n + pair_col;
#pragma unroll
    for (int j = 0; j < Count / 4; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float first = acc[4 * j + 2 * h];
            const float second = acc[4 * j + 2 * h + 1];
            const float other = __shfl_xor_sync(0xffffffffu, even ? second : first, 4);
            const int32_t token = 8 * j + 2 * (lane % 4) + (even ? 0 : 1);
            if (token < tile_rows && pair_col + 8 * h < p.n) {
                detail::store_pair(d + token * static_cast<int64_t>(p.n) + 8 * h,
                                   even ? first : other, even ? other : second);
            }
        }
    }
}

}  // namespace detail

/// templates: the plan's tensor maps (global addresses replaced per launch, see
/// make_tensor_map and TensorMapIndex). In: __nv_bfloat16 or __half. Out: __nv_bfloat16, __half or float. Staged: full 64-row
/// slices leave through shared memory and TMA stores (16-bit outputs only; costs a pipeline
/// stage, so it pays when experts have many rows); map_d is used by it alone. ClusterN: CTAs
/// per cluster along N (1 or 2); a pair of CTAs computes two neighbouring column tiles of the
/// same rows, and each loads half of the A tile for both (TMA multicast), which cuts the A
/// traffic from L2 in half. It needs an even number of column tiles. NMajorB: B is [E, K, N]
/// (map_b a 3-D [E, K, N] tensor read in 64 x 64 boxes) instead of [E, N, K]. SwapAB (decode:
/// 64 x 128 or 64 x 256 tiles on single CTAs, 16-bit inputs, or E4M3 without BLOCK scales; each
/// consumer's 64 or 128 weight columns are one or two MMAs of 64 per k-step): the weights are
/// wgmma's A operand and the tokens its B, so that a tile multiplies only the 16, 32 or 64 rows
/// of its A box (wgmma's M is 64, its N may be smaller) instead of 64 rows whatever the expert
/// holds; the stages and the producer are the same, the accumulators hold the output
/// transposed.
template <typename In, typename Out, int BlockM, int BlockN, bool Staged, int ClusterN,
          bool NMajorB, bool SwapAB>
__global__ void __launch_bounds__(384, 1)
    sm90_grouped_gemm_kernel(const __grid_constant__ TensorMapTemplates templates,
                             const __grid_constant__ GroupedGemmParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr bool kStaged = Staged;
    static_assert(!Staged || sizeof(Out) == 2, "the staged epilogue stores 16-bit outputs");
    using Config = TileConfig<BlockM, BlockN, kStaged>;
    static_assert(Config::kThreads == 384, "launch bounds above assume 384 threads");
    constexpr int kConsumerN = Config::kConsumerN;
    constexpr int kBlockM = Config::kBlockM;
    constexpr int kBlockK = Config::kBlockK;
    const int stages = p.stages;  // chosen per launch from the number of experts
    constexpr bool kF16 = std::is_same_v<In, __half>;
    // E4M3: a stage holds 128 K-values per row instead of 64 (the same 128 bytes), each
    // k-block goes into a temporary accumulator that is then added, scaled, into the fp32
    // one (promotion: Hopper's fp8 MMAs accumulate with fewer bits than fp32).
    constexpr bool kFp8 = std::is_same_v<In, __nv_fp8_e4m3>;
    static_assert(!kFp8 || (!NMajorB && (kConsumerN == 64 || kConsumerN == 128 ||
                                         kConsumerN == 256)),
                  "fp8: K-major B, 64, 128 or 256 columns per consumer");
    static_assert(!SwapAB || (!Staged && BlockM == 64 && (BlockN == 128 || BlockN == 256) &&
                              ClusterN == 1),
                  "swap-AB: 64 x 128 or 64 x 256 tiles, single CTAs, register epilogue");
    // Swap-AB: wgmma's M is 64 weight columns, so a consumer's kConsumerN columns are
    // kWeightBlocks MMAs per k-step (mma_weight_blocks, weight_block: wgmma.cuh).
    constexpr int kWeightBlocks = SwapAB ? Config::kConsumerN / 64 : 1;
    // fp8 k-blocks run as 128-column halves (m64n128k32), each promoted before the next: the
    // temporary is 64 registers whatever the tile width.
    // (64-column consumers, 64 x 128 decode tiles: one 64-column slice, a 32-register
    // temporary.)
    constexpr int kSliceN = kConsumerN < 128 ? kConsumerN : 128;  // columns per promotion
    constexpr int kHalves = kFp8 ? kConsumerN / kSliceN : 1;
    constexpr int kBlockKElems = kFp8 ? 128 : kBlockK;  // K-values per k-block
    using Mma = Wgmma<Config::kConsumerN, kF16, NMajorB>;
    // The prologue runs in parallel (tensor maps, sizes, barriers: NOTES §17) except for fp8
    // with 128 x 256 tiles, whose consumers have no register to spare (128 sums, a 64-register
    // temporary and the scales in 232): with the parallel prologue's code before the role
    // split ptxas spilled two of their values. Those instances serve prefill, where the ~1 µs
    // the serial prologue costs is under 0.1% of the kernel.
    constexpr bool kParallelPrologue = has_parallel_prologue(kFp8, BlockM, BlockN);

    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // TMA with 128-byte swizzle wants 1024-byte aligned destinations.
    // Offset from smem_raw rather than rounded as an integer: the compiler then still knows
    // every pointer below is shared memory (32-bit addresses, LDS instead of generic loads).
    const uint32_t misalignment = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) & 1023;
    unsigned char* smem = smem_raw + ((1024 - misalignment) & 1023);
    // [epilogue box buffers | tensor-map scratch][stages: A tile, B tile]...[barriers][schedule]
    unsigned char* const scratch = smem;
    unsigned char* const epilogue_buffer = smem;
    unsigned char* const stage_base = smem + Config::kScratchBytes;
    auto stage_a = [&](int s) { return stage_base + s * Config::kStageBytes; };
    auto stage_b = [&](int s) { return stage_base + s * Config::kStageBytes + Config::kTileABytes; };
    auto* full = reinterpret_cast<uint64_t*>(stage_base + stages * Config::kStageBytes);
    uint64_t* empty = full + Config::kMaxStages;
    detail::Schedule schedule;
    // The stream-K plan sits in shared memory, not in every thread's registers (the consumers
    // of 128 x 256 tiles have none to spare).
    auto* work_plan = reinterpret_cast<StreamKPlan*>(empty + Config::kMaxStages);
    static_assert(sizeof(StreamKPlan) <= kWorkPlanBytes, "room for the plan");
    auto* hand_out = reinterpret_cast<TileHandOut*>(reinterpret_cast<unsigned char*>(work_plan) +
                                                    kWorkPlanBytes);
    schedule.row_start = reinterpret_cast<int32_t*>(hand_out + 1);
    schedule.rows = schedule.row_start + p.num_experts;
    schedule.tile_start = schedule.rows + p.num_experts;
    // fp8 BLOCK: each stage's k-block scales, copied by warps 1.. (stage_block_scales) into
    // a slot beside the stage, after the schedule. With as many stages as fit, the ring uses the
    // bytes kept for aligning the base (TileConfig::block_scale_ring_stages), so it is used only
    // where the base is aligned.
    constexpr bool kScaleRingInstance = kFp8 && !SwapAB;
    // (Both recomputed where used rather than held: kept from here, ptxas spilled them in
    // the fp8 128 x 256 instances.)
    auto scale_ring = [&] {
        return kScaleRingInstance && p.block_scale_ring != 0 && misalignment == 0;
    };
    // (The offset comes from the host, TileConfig::block_scale_ring_offset: the schedule's end
    // rounded up to 16 bytes.)
    auto scale_slots = [&] { return reinterpret_cast<float*>(smem + p.block_scale_ring); };

    // Unsigned (N > 0): one shift from the parameter, cheap enough for ptxas to recompute
    // where it would otherwise keep it in a register (or spill it) through the main loop.
    const int32_t tiles_n = static_cast<int32_t>(static_cast<uint32_t>(p.n + BlockN - 1) / BlockN);
    const int32_t k_blocks = (p.k + kBlockKElems - 1) / kBlockKElems;
    const int warpgroup = threadIdx.x / 128;
    static_assert(ClusterN == 1 || ClusterN == 2, "clusters of 1 or 2 CTAs along N");
    const uint32_t rank = ClusterN > 1 ? ptx::cluster_rank() : 0;
    // The CTAs of a cluster take the tiles of one group together: tile = group * ClusterN + rank.
    const int32_t first_group = static_cast<int32_t>(blockIdx.x) / ClusterN;
    const int32_t group_stride = static_cast<int32_t>(gridDim.x) / ClusterN;

    // This CTA's tensor maps, made in the workspace below (TensorMapIndex).
    CUtensorMap* const maps =
        static_cast<CUtensorMap*>(p.tensor_maps) + blockIdx.x * kTensorMapsPerCta;
    const CUtensorMap* const map_b = &maps[kMapB];
    const CUtensorMap* const map_d = &maps[kMapD];

    if (threadIdx.x == 0) detail::phase_stamp(p, kPhaseEntry);
    // The prologue: thread 0 initializes the barriers, some warps make the tensor maps, warp 1
    // builds the schedule (below).
    auto init_barriers = [&] {
        for (int s = 0; s < stages; ++s) {
            // The producer's expect_tx, and with the BLOCK scale ring each lane of the scale
            // warps.
            ptx::mbarrier_init(
                &full[s], scale_ring() ? 1 + 32 * detail::block_scale_warps(BlockM) : 1);
            // Lane 0 of each consumer warp of every CTA that reads this stage's A half.
            ptx::mbarrier_init(&empty[s], 8 * ClusterN);
        }
        if constexpr (ClusterN > 1) {
            for (int slot = 0; slot < 2; ++slot) {
                ptx::mbarrier_init(&hand_out->peer_full[slot], 1);   // the peer's expect_tx
                ptx::mbarrier_init(&hand_out->peer_empty[slot], 1);  // the peer's release
            }
        }
        ptx::fence_barrier_init();
    };
    // Thread 32 (warp 1, after the schedule): the clamp flags, and the work of this CTA's slot
    // (its cluster): round-robin groups, then, with stream-K, its piece of the tail
    // (tile_schedule.cuh). Producer and consumers walk the same items.
    auto finish_schedule = [&](uint32_t flags) {
        if (threadIdx.x != 32) return;
        if (flags != 0 && blockIdx.x == 0 && p.status_word) atomicOr(p.status_word, flags);
        *work_plan = make_stream_k_plan(schedule.tile_start[p.num_experts] / ClusterN,
                                        group_stride, k_blocks, p.stream_k != 0);
        // The BLOCK scale ring's slot barriers. (Here rather than with the others: made by
        // thread 0 there, they cost ptxas its uniform-datapath proof of the consumers' k-block
        // loops.)
        if (scale_ring()) {
            for (int s = 0; s < stages; ++s)
                ptx::mbarrier_init(detail::scale_slot_empty<Config>(scale_slots(), s),
                                   detail::kScaleSlotReaders);
            // With tile tickets, the producer's hand-off of groups to the scale warps.
            ScaleGroupHandOff* const hand_off =
                detail::scale_group_hand_off<Config>(scale_slots(), stages);
            for (int slot = 0; slot < 2; ++slot) {
                ptx::mbarrier_init(&hand_off->full[slot], 1);
                ptx::mbarrier_init(&hand_off->empty[slot],
                                   32 * detail::block_scale_warps(BlockM));
            }
            ptx::fence_barrier_init();
        }
    };
    const int warp_index = static_cast<int>(threadIdx.x / 32);
    constexpr int kMapCount = kStaged ? kTensorMapsPerCta : kMapB + 1;
    // Programmatic dependent launch (launch_grouped_gemm): this grid may start while the
    // previous kernel of the stream still runs, and lets the next one start its CTAs as this
    // one's leave. Until wait_for_prior_grids() a thread touches only shared memory and the
    // parameters: the previous kernel may still write A, the sizes or the scales, or read the
    // workspace (its tensor maps, the ticket word: a plan sharing this workspace) or D. Host
    // sizes are staged and the schedule built before the wait, which hides them behind the
    // previous kernel's end; device sizes wait first.
    ptx::allow_dependent_grids();
    if constexpr (kParallelPrologue) {
        // Thread 0 initializes the barriers and every thread copies its share of the sizes into
        // shared memory; then warps 2-6 make one tensor map each while warp 1 builds the
        // schedule from the copied sizes.
        if (threadIdx.x == 0) init_barriers();
        if (p.device_sizes) ptx::wait_for_prior_grids();
        // The schedule the host built (host sizes) lands where the kernel would build it: the
        // arrays follow each other from row_start on.
        if (p.host_schedule)
            detail::stage_sizes(p, schedule_ints(p.num_experts), schedule.row_start);
        else
            detail::stage_sizes(p, p.num_experts, schedule.rows);
        __syncthreads();
        if (threadIdx.x == 0) detail::phase_stamp(p, kPhaseSizesStaged);
        if (warp_index >= 2 && warp_index < 2 + kMapCount) {
            ptx::wait_for_prior_grids();
            detail::make_tensor_map(templates, warp_index - 2,
                                    detail::tensor_map_address(p, warp_index - 2), scratch, maps);
            if (threadIdx.x == 64) detail::phase_stamp(p, kPhaseMapPublished);
        } else if (warp_index == 1) {
            if (threadIdx.x == 32) detail::phase_stamp(p, kPhaseScheduleStart);
            // (Host sizes were validated: a schedule the host built clamps nothing.)
            const uint32_t flags =
                p.host_schedule ? 0u
                                : detail::build_schedule<kBlockM, !kFp8>(
                                      p, tiles_n, schedule, [&](int e) { return schedule.rows[e]; });
            if (threadIdx.x == 32) detail::phase_stamp(p, kPhaseScheduleBuilt);
            ptx::wait_for_prior_grids();  // before the status word
            if (threadIdx.x == 32) detail::phase_stamp(p, kPhaseScheduleWaited);
            finish_schedule(flags);
            if (threadIdx.x == 32) detail::phase_stamp(p, kPhaseScheduleDone);
        }
    } else {
        // Warp 0 makes the barriers, then the tensor maps one after another, while warp 1
        // builds the schedule from the sizes where they are.
        if (warp_index == 0) {
            if (threadIdx.x == 0) init_barriers();
            ptx::wait_for_prior_grids();
#pragma unroll
            for (int m = 0; m < kMapCount; ++m)
                detail::make_tensor_map(templates, m, detail::tensor_map_address(p, m), scratch,
                                        maps);
        } else if (warp_index == 1) {
            if (p.device_sizes) ptx::wait_for_prior_grids();
            const uint32_t flags = detail::build_schedule<kBlockM, !kFp8>(p, tiles_n, schedule, [&](int e) {
                return p.device_sizes ? p.device_sizes[e] : p.host_sizes[e];
            });
            ptx::wait_for_prior_grids();  // before the status word
            finish_schedule(flags);
        }
    }
    __syncthreads();
    // Everything below reads or writes global memory; the warps that waited return at once.
    ptx::wait_for_prior_grids();
    // The peer's barriers must be initialized before anything multicasts or arrives on them.
    // With the parallel prologue every thread arrives here and waits where it first reaches
    // the peer, so that the producer's tensor-map acquires overlap the cluster barrier.
    if constexpr (ClusterN > 1) {
        if constexpr (kParallelPrologue) {
            ptx::cluster_arrive_relaxed();
        } else {
            ptx::cluster_sync();
        }
    }
    const StreamKPlan& work = *work_plan;
    if (threadIdx.x == 0) detail::phase_stamp(p, kPhasePrologueDone);

    if (warpgroup == 0) {
        // Producer. One thread issues every copy; the rest of the warpgroup only gives its
        // registers to the consumers.
        ptx::release_registers<40>();
        if (threadIdx.x == 0) {
            detail::phase_stamp(p, kPhaseProducerStart);
            for (int m = kMapAFull; m <= kMapB; ++m) {
                ptx::tensor_map_acquire(&maps[m]);
                ptx::prefetch_tensor_map(&maps[m]);
            }
            detail::phase_stamp(p, kPhaseProducerAcquire);
        }
        if constexpr (ClusterN > 1 && kParallelPrologue) ptx::cluster_wait();
        if constexpr (kScaleRingInstance) {
            const int part = warp_index - 1;
            if (part >= 0 && part < detail::block_scale_warps(BlockM) && scale_ring())
                detail::stage_block_scales<Config, ClusterN>(
                    p, schedule, work, first_group, rank, tiles_n, k_blocks, stages, full,
                    scale_slots(), part);
        }
        if (threadIdx.x == 0) {
            detail::phase_stamp(p, kPhaseProducerReady);
            detail::debug_start_delay(p);
            int s = 0;            // stage of the ring
            uint32_t phase = 0;   // parity of the ring's current pass
            // Tile tickets (tile_schedule.cuh): the group of tile `index`. The leader takes the
            // ticket of the next group with the copies of this one's last k-block, so that the
            // atomic's round trip overlaps the stages still in the ring, and passes each group
            // after the first to its peer.
            const bool tickets = p.tile_tickets != nullptr;
            // This launch's tag, read where needed rather than held (the producer thread runs
            // on 40 registers).
            auto tag = [] { return static_cast<uint32_t>(ptx::grid_id()); };
            // The leader's reads of the ticket word: what it held at the start (used only at
            // the end of the first tile, so the load's latency is hidden), then what its last
            // add returned.
            unsigned long long taken =
                tickets && rank == 0 ? *reinterpret_cast<volatile unsigned long long*>(p.tile_tickets)
                                     : 0;
            auto ticket_group_of = [&](int32_t index) {
                // Both CTAs of a cluster know its first group (its index): the peer does not
                // wait for the leader's hand-off before its first copies (which the leader's
                // first stage needs too: each CTA multicasts its half of A).
                const int32_t groups = schedule.tile_start[p.num_experts] / ClusterN;
                if (index == 0) return first_group < groups ? first_group : -1;
                int32_t group = -1;
                if (rank == 0) {
                    const uint32_t ticket = detail::resolve_ticket(p.tile_tickets, taken, tag());
                    group = ticket_group(ticket, group_stride, groups);
                    // Every other add of this launch is done: leave the word as a claim
                    // would, for the next launch with this tag (a CUDA graph's replay).
                    if (is_last_ticket(ticket, groups))
                        atomicExch(p.tile_tickets, ticket_word(tag(), 0));
                }
                if constexpr (ClusterN > 1) {
                    // Groups after the first go through the two-slot ring, one per tile.
                    const auto [slot, parity] = detail::hand_off_slot(index);
                    if (rank == 0) {
                        ptx::mbarrier_wait(&hand_out->peer_empty[slot], parity ^ 1);
                        ptx::store_to_peer(&hand_out->peer_group[slot], group,
                                           &hand_out->peer_full[slot], 1);
                    } else {
                        ptx::mbarrier_arrive_expect_tx(&hand_out->peer_full[slot],
                                                       sizeof(int32_t));
                        ptx::mbarrier_wait<true>(&hand_out->peer_full[slot], parity);
                        group = *reinterpret_cast<volatile int32_t*>(&hand_out->peer_group[slot]);
                        ptx::mbarrier_arrive_cluster_release(&hand_out->peer_empty[slot], 0);
                    }
                }
                // The BLOCK scale warps walk the same tiles: groups after the first (and the
                // final -1) through their two-slot ring.
                if (index > 0 && scale_ring()) {
                    ScaleGroupHandOff* const hand_off =
                        detail::scale_group_hand_off<Config>(scale_slots(), stages);
                    const auto [slot, parity] = detail::hand_off_slot(index);
                    ptx::mbarrier_wait(&hand_off->empty[slot], parity ^ 1);
                    hand_off->group[slot] = group;
                    ptx::mbarrier_arrive(&hand_off->full[slot]);
                }
                return group;
            };
            int32_t unhinted_weight_copies = p.unhinted_weight_copies;  // swap-AB only
            for (int32_t index = 0;; ++index) {
                const WorkItem item =
                    tickets ? WorkItem{ticket_group_of(index), 0, k_blocks, WorkRole::Whole, 0}
                            : stream_k_work_item(work, first_group, index);
                if (item.group < 0) {
                    if (tickets) {
                        // The consumers learn that there is no more from the next stage's
                        // word: its full barrier completes with this arrival alone. (Once
                        // the stage is free: a phase must not complete before they waited on
                        // the one before.)
                        ptx::mbarrier_wait(&empty[s], phase ^ 1);
                        hand_out->stage_group[s] = -1;
                        ptx::mbarrier_arrive(&full[s]);
                    }
                    break;
                }
                detail::phase_stamp_producer(p, kPhaseProducerGroup, index);
                const TileCoord c = map_tile(item.group * ClusterN + rank, schedule.tile_start,
                                             p.num_experts, tiles_n, ClusterN);
                const int32_t a_row = schedule.row_start[c.expert] + c.m_tile * kBlockM;
                const int32_t b_row = c.expert * p.n + c.n_tile * BlockN;
                // The A box: the lowest of the three heights that covers the tile's rows; the
                // tile's other A rows in shared memory keep stale values, which only feed
                // accumulator rows that are never stored.
                const int32_t tile_rows = detail::tile_rows(schedule, c, kBlockM);
                const int a_box = a_box_index(tile_rows, kBlockM);
                const CUtensorMap* const map_a = &maps[kMapAFull + a_box];
                constexpr int kFullBoxRows = kBlockM / ClusterN;  // rows each CTA loads
                const int box_rows = kFullBoxRows >> a_box;
                // In a cluster each CTA loads a share of the A rows for both, but where one
                // box already covers the tile's rows (a few decode rows) the leader's box
                // alone does: the peer's would read only rows past the tile's, which in MASKED
                // slabs are padding that nothing else reads, from DRAM.
                const bool a_from_leader = ClusterN > 1 && tile_rows <= box_rows;
                const uint32_t stage_bytes = static_cast<uint32_t>(
                    (a_from_leader ? 1 : ClusterN) * box_rows * 128 + Config::kTileBBytes);
                for (int32_t kb = item.k_begin; kb < item.k_end; ++kb) {
                    // A stage is free once the consumers released it in the previous pass.
                    const uint32_t parity = phase ^ 1;
                    // (In a cluster, free only once the consumers of both CTAs are done with
                    // it: this CTA's A half lands in the peer's shared memory too.)
                    ptx::mbarrier_wait(&empty[s], parity);
                    // A tile's first stage also carries its group, for the consumers (read with
                    // tile tickets; the arrival below releases the store).
                    if (kb == item.k_begin) {
                        hand_out->stage_group[s] = item.group;
                        detail::phase_stamp_producer(p, kPhaseProducerFirstCopy, index);
                    }
                    // The whole stage (the A rows, B) arrives on this CTA's full barrier.
                    ptx::mbarrier_arrive_expect_tx(&full[s], stage_bytes);
                    if constexpr (ClusterN > 1) {
                        if (rank == 0 || !a_from_leader) {
                            ptx::tma_load_2d_multicast(stage_a(s) + rank * box_rows * 128, map_a,
                                                       &full[s], kb * kBlockKElems,
                                                       a_row + static_cast<int32_t>(rank) * box_rows,
                                                       0x3);
                        }
                    } else {
                        ptx::tma_load_2d(stage_a(s), map_a, &full[s], kb * kBlockKElems, a_row);
                    }
                    // The weights; `policy...`: nothing, or the function giving each copy's L2
                    // policy.
                    auto load_weights = [&](auto... policy) {
                        if constexpr (NMajorB) {
                            // [E, K, N]: boxes of 64 K-rows x 64 columns, one per 64 columns.
#pragma unroll
                            for (int box = 0; box < BlockN / 64; ++box)
                                ptx::tma_load_3d(stage_b(s) + box * 64 * 128, map_b, &full[s],
                                                 c.n_tile * BlockN + box * 64, kb * kBlockK,
                                                 c.expert, policy()...);
                        } else {
                            ptx::tma_load_2d(stage_b(s), map_b, &full[s], kb * kBlockKElems,
                                             b_row, policy()...);
                        }
                    };
                    // Swap-AB (decode): each weight tile is read once, so it goes into L2 to be
                    // evicted first and leaves the tokens, read once per column tile, in place
                    // (NOTES §28); but the first copies go unhinted, to push out dirty lines
                    // that an evict-first stream would leave resident and run slower beside
                    // (weight_copies_without_l2_hint, NOTES §43). (Prefill tiles of one expert
                    // read the same weights again from L2.)
                    if constexpr (SwapAB) {
                        if (unhinted_weight_copies > 0) {
                            --unhinted_weight_copies;
                            load_weights();
                        } else {
                            load_weights(ptx::evict_first_policy);
                        }
                    } else {
                        load_weights();
                    }
                    if (tickets && rank == 0 && kb + 1 == item.k_end) {
                        if (index == 0) detail::claim_ticket_word(p.tile_tickets, taken, tag());
                        taken = atomicAdd(p.tile_tickets, 1ull);
                    }
                    if (++s == stages) {
                        s = 0;
                        phase ^= 1;
                    }
                }
            }
            detail::phase_stamp(p, kPhaseProducerDone);
        }
    } else {
        ptx::acquire_registers<232>();
        if (threadIdx.x == 128) detail::phase_stamp(p, kPhaseConsumerStart);
        if constexpr (ClusterN > 1 && kParallelPrologue) ptx::cluster_wait();
        // This consumer's 64 rows and kConsumerN columns of the tile.
        const int consumer = warpgroup - 1;
        // Broadcast from lane 0, the compiler then knows they are the same in every lane and
        // keeps them, and what derives from them (the fp8 loop's wgmma descriptors), in uniform
        // registers: half the instructions between an fp8 k-block's last promotion and the
        // next k-block's MMAs. Not in one instance: fp8 into F32 from registers on 128 x 256
        // tiles in clusters of 2, where the uniform registers it takes make ptxas spill 4
        // bytes of the epilogue's values (has_uniform_consumer_offsets).
        constexpr bool kUniformOffsets = has_uniform_consumer_offsets(
            kFp8, BlockN, ClusterN, kStaged, static_cast<int>(sizeof(Out)));
        auto uniform = [](int value) { return kUniformOffsets ? ptx::warp_uniform(value) : value; };
        const int row_offset = uniform(BlockM == 128 ? 64 * consumer : 0);
        const int col_offset = uniform(BlockM == 128 ? 0 : kConsumerN * consumer);
        const int t = threadIdx.x % 128;
        const int warp = t / 32;
        const int lane = t % 32;
        if (kStaged && t == 0) ptx::tensor_map_acquire(map_d);  // this thread issues the stores
        float acc[kConsumerN / 2];
        [[maybe_unused]] float tmp[kFp8 ? kSliceN / 2 : 1];  // fp8: one k-block's sums of a slice
        int s = 0;            // stage of the ring
        uint32_t phase = 0;   // parity of the ring's current pass
        // Frees a stage for the producers that fill it: this CTA's, and the peer's, whose A
        // half lands here too.
        auto release = [&](int stage) {
            if (lane != 0) return;
            ptx::mbarrier_arrive(&empty[stage]);
            if constexpr (ClusterN > 1) ptx::mbarrier_arrive_cluster(&empty[stage], rank ^ 1);
        };
        const bool tickets = p.tile_tickets != nullptr;
        for (int32_t index = 0;; ++index) {
            WorkItem item;
            if (tickets) {
                // The producer wrote the tile's group (or -1) into its first stage's word.
                // Lane 0 reads it for its warp: the lane that frees the stage (release) must
                // be the one whose read that arrival orders before the producer's next write
                // of the word (racecheck reported the other lanes' reads as WAR hazards).
                ptx::mbarrier_wait(&full[s], phase);
                int32_t group = 0;
                if (lane == 0) group = *reinterpret_cast<volatile int32_t*>(&hand_out->stage_group[s]);
                group = __shfl_sync(0xffffffffu, group, 0);
                item = WorkItem{group, 0, k_blocks, WorkRole::Whole, 0};
            } else {
                item = stream_k_work_item(work, first_group, index);
            }
            if (item.group < 0) break;
            const TileCoord c = map_tile(item.group * ClusterN + rank, schedule.tile_start,
                                         p.num_experts, tiles_n, ClusterN);
            int prev_stage = -1;
            // E4M3 plans never split tiles along K (stream-K is for 16-bit inputs): every item
            // is whole, and these are constants there (registers the fp8 consumers need).
            const int32_t k_begin = kFp8 ? 0 : item.k_begin;
            const int32_t k_end = kFp8 ? k_blocks : item.k_end;
            // fp8 BLOCK: the thread's first row and the consumer's first column of scales.
            [[maybe_unused]] const int32_t scale_row =
                c.m_tile * kBlockM + row_offset + warp * 16 + lane / 4;
            [[maybe_unused]] const int32_t scale_col = c.n_tile * BlockN + col_offset;
            // Moves the ring on by one stage.
            auto next_stage = [&] {
                if (++s == stages) {
                    s = 0;
                    phase ^= 1;
                }
            };
            // body(tokens): the tile's main loop. Swap-AB multiplies as many tokens as the A box
            // the producer loaded (16, 32 or 64: stale rows past the tile's only feed
            // accumulator columns that are never stored); otherwise tokens is 0.
            auto with_tokens = [&](auto body) {
                if constexpr (SwapAB) {
                    switch (a_box_index(detail::tile_rows(schedule, c, kBlockM), kBlockM)) {
                        case 0: body(std::integral_constant<int, kBlockM>{}); break;
                        case 1: body(std::integral_constant<int, kBlockM / 2>{}); break;
                        default: body(std::integral_constant<int, kBlockM / 4>{}); break;
                    }
                } else {
                    body(std::integral_constant<int, 0>{});
                }
            };
            // The descriptors of this consumer's operands in stage 0, made once per tile; both
            // main loops advance them by the stage's offset and the k-step (uniform registers).
            // Rows of 128 bytes; offsets are multiples of the 1024-byte swizzle atom. An N-major
            // B (16-bit only) is stored as boxes of 64 columns, 8 KB apart.
            const uint64_t desc_a0 = ptx::kmajor_sw128_descriptor(stage_a(0) + row_offset * 128);
            const uint64_t desc_b0 =
                NMajorB ? ptx::nmajor_sw128_descriptor(stage_b(0) + col_offset / 64 * 64 * 128)
                        : ptx::kmajor_sw128_descriptor(stage_b(0) + col_offset * 128);
            // On 128-row tiles, a consumer whose 64 rows hold none of the expert's (the upper
            // half of an expert's last row tile when at most 64 rows are left: most of
            // gptoss's experts) skips its MMAs: it only waits for each stage and frees it.
            // Under the power cap the MMAs of rows that are never stored cost clock (bench/
            // NOTES.md §40). (64-row tiles split the columns; with the same test for columns
            // past N, ptxas serialized the fp8 swap-AB MMAs. Not the instance without uniform
            // offsets above either, which spilled.) The plan decides where (skips_idle_halves).
            constexpr bool kSkipsIdleSlices = BlockM == 128 && kUniformOffsets;
            const bool idle = kSkipsIdleSlices && p.skip_idle_slices != 0 &&
                              row_offset >= detail::tile_rows(schedule, c, kBlockM);
            auto skip_main_loop = [&] {
                for (int32_t kb = k_begin; kb < k_end; ++kb) {
                    ptx::mbarrier_wait(&full[s], phase);
                    if constexpr (kScaleRingInstance) {
                        // The scale warps wait for every consumer thread before refilling.
                        if (p.scale_mode == MOEGEMM_SCALE_BLOCK && scale_ring()) {
                            ptx::mbarrier_arrive(
                                detail::scale_slot_empty<Config>(scale_slots(), s));
                        }
                    }
                    release(s);
                    next_stage();
                }
            };
            if constexpr (kFp8) {
#pragma unroll
                for (float& x : acc) x = 0.0f;  // promote() adds every k-block's sums
                // Each k-block runs slice by slice (128 columns, or a 64-column consumer's
                // whole width): the slice's MMAs into the temporary, then its promotion (the
                // k-block's sums of those columns are complete); the stage is free after the
                // last slice. Between the last promotion of one k-block and the first MMAs of
                // the next, the other consumer warpgroup's MMAs alone keep the tensor cores
                // busy, so the loop keeps that path short: descriptors advance from ones made
                // once per tile, and only BLOCK scales are handled per k-block (the other
                // modes' scales apply to the finished sums), in a loop of their own.
                // tokens: 0, or with swap-AB the tokens of the tile's A box (wgmma's N).
                // block_scales: ScaleSource (BLOCK scales, and where the loop reads them).
                auto main_loop = [&](auto block_scales, auto tokens) {
                    constexpr detail::ScaleSource kSource = decltype(block_scales)::value;
                    constexpr bool kBlockScales = kSource == detail::ScaleSource::Global;
                    constexpr bool kRingScales = kSource == detail::ScaleSource::Ring;
                    constexpr int kTokens = decltype(tokens)::value;
                    // BLOCK: a k-block's scales, loaded one k-block ahead. (Loaded just
                    // before the full-barrier wait, their L2 latency was exposed whenever the
                    // ring was ahead and the wait returned at once.)
                    struct Scales {
                        float row[2];
                        float col[kHalves];
                    };
                    [[maybe_unused]] const auto scales = [&] {
                        if constexpr (kBlockScales)
                            return detail::BlockScaleRows<kHalves>(p, schedule, c, k_blocks,
                                                                   scale_row, scale_col);
                        else
                            return 0;
                    }();
                    // Ring: where this thread's two rows and the consumer's column blocks sit
                    // in a stage's slot (stage_block_scales).
                    [[maybe_unused]] const int ring_row = row_offset + warp * 16 + lane / 4;
                    [[maybe_unused]] const int ring_col = kBlockM + col_offset / 128;
                    [[maybe_unused]] float* const ring = kRingScales ? scale_slots() : nullptr;
                    // One k-block, promoted with `current` scales while the next k-block's
                    // load into `upcoming` (the last k-block loads its own again: in bounds,
                    // and no branch around the loads). With the ring, with the scales of its
                    // stage's slot.
                    auto k_block = [&](int32_t kb, const Scales& current, Scales& upcoming) {
                        if constexpr (kBlockScales)
                            scales.load(min(kb + 1, k_end - 1), upcoming.row, upcoming.col);
                        ptx::mbarrier_wait(&full[s], phase);
                        [[maybe_unused]] Scales staged;
                        if constexpr (kRingScales) {
                            const float* slot = detail::scale_slot<Config>(ring, s);
#pragma unroll
                            for (int h = 0; h < 2; ++h) staged.row[h] = slot[ring_row + 8 * h];
#pragma unroll
                            for (int h = 0; h < kHalves; ++h) staged.col[h] = slot[ring_col + h];
                        }
                        if (index == 0 && kb == k_begin && threadIdx.x == 128)
                            detail::phase_stamp(p, kPhaseFirstFull);
                        const uint32_t stage_offset = static_cast<uint32_t>(s) * Config::kStageBytes;
                        auto slice = [&](auto slice_index) {
                            constexpr int kSlice = decltype(slice_index)::value;
                            const uint64_t desc_a = ptx::advance_descriptor(desc_a0, stage_offset);
                            const uint64_t desc_b = ptx::advance_descriptor(
                                desc_b0, stage_offset + kSlice * kSliceN * 128);
                            ptx::wgmma_fence();
#pragma unroll
                            for (int kk = 0; kk < kBlockKElems / 32; ++kk) {
                                // k32 steps, 32 bytes apart along the 128-byte rows
                                const uint64_t tokens_k = ptx::advance_descriptor(desc_a, kk * 32);
                                const uint64_t weights_k = ptx::advance_descriptor(desc_b, kk * 32);
                                if constexpr (kTokens > 0)
                                    mma_weight_blocks<WgmmaE4m3Swapped<kTokens>, kWeightBlocks>(
                                        tmp, weights_k, tokens_k, kk > 0);
                                else
                                    WgmmaE4m3<kSliceN>::mma(tmp, tokens_k, weights_k, kk > 0);
                            }
                            ptx::wgmma_commit();
                            ptx::wgmma_wait<0>();
                            constexpr int kOffset = kSlice * kSliceN / 2;
                            if constexpr (kBlockScales)
                                detail::promote<kOffset>(acc, tmp, current.row, current.col[kSlice]);
                            else if constexpr (kRingScales)
                                detail::promote<kOffset>(acc, tmp, staged.row, staged.col[kSlice]);
                            else
                                detail::promote<kOffset>(acc, tmp);
                        };
                        slice(std::integral_constant<int, 0>{});
                        if constexpr (kHalves == 2) slice(std::integral_constant<int, 1>{});
                        // Every thread read the slot: each tells the scale warps it may be
                        // written again.
                        if constexpr (kRingScales)
                            ptx::mbarrier_arrive(detail::scale_slot_empty<Config>(ring, s));
                        release(s);
                        next_stage();
                    };
                    [[maybe_unused]] Scales even, odd;
                    if constexpr (kBlockScales) {
                        scales.load(k_begin, even.row, even.col);
                        // Two k-blocks per trip, the scale registers trading roles: carried
                        // from trip to trip in one set, ptxas moved each fresh load into it
                        // wherever it chose, and the move waited for L2 between a k-block's
                        // two slices (SASS of 27ab429).
                        for (int32_t kb = k_begin; kb < k_end; kb += 2) {
                            k_block(kb, even, odd);
                            if (kb + 1 < k_end) k_block(kb + 1, odd, even);
                        }
                    } else {
                        for (int32_t kb = k_begin; kb < k_end; ++kb) k_block(kb, even, odd);
                    }
                };
                if (idle) {
                    skip_main_loop();
                } else with_tokens([&](auto tokens) {
                    using detail::ScaleSource;
                    // (Swap-AB serves no BLOCK scales: can_implement.)
                    if constexpr (!SwapAB) {
                        if (p.scale_mode == MOEGEMM_SCALE_BLOCK) {
                            if (scale_ring())
                                main_loop(std::integral_constant<ScaleSource, ScaleSource::Ring>{},
                                          tokens);
                            else
                                main_loop(
                                    std::integral_constant<ScaleSource, ScaleSource::Global>{},
                                    tokens);
                            return;
                        }
                    }
                    main_loop(std::integral_constant<ScaleSource, ScaleSource::None>{}, tokens);
                });
            } else {
                // mma(desc_a, desc_b, accumulate): the k16 step of the tile's A rows (tokens)
                // and B columns (weights) whose descriptors are given. As in the fp8 loop, the
                // descriptors advance from desc_a0 / desc_b0: built from pointers per k16 step
                // they took ~88 instructions per k-block and warp around four MMAs
                // (bench/NOTES.md §31). An N-major B's k16 step is 16 of its 128-byte K-rows.
                constexpr uint32_t kStepBytesB = NMajorB ? 16 * 128 : 32;
                auto main_loop = [&](auto mma) {
                    for (int32_t kb = k_begin; kb < k_end; ++kb) {
                        ptx::mbarrier_wait(&full[s], phase);
                        if (index == 0 && kb == k_begin && threadIdx.x == 128)
                            detail::phase_stamp(p, kPhaseFirstFull);
                        // The stage broadcast from lane 0: ptxas then keeps the descriptor
                        // arithmetic on the uniform datapath (with `s` as it is, which it keeps
                        // per lane here, each MMA's descriptors were moved over by four R2URs).
                        const uint32_t stage_offset =
                            static_cast<uint32_t>(ptx::warp_uniform(s)) * Config::kStageBytes;
                        const uint64_t desc_a = ptx::advance_descriptor(desc_a0, stage_offset);
                        const uint64_t desc_b = ptx::advance_descriptor(desc_b0, stage_offset);
                        ptx::wgmma_fence();
#pragma unroll
                        for (int kk = 0; kk < kBlockK / 16; ++kk)
                            mma(ptx::advance_descriptor(desc_a, kk * 32),
                                ptx::advance_descriptor(desc_b, kk * kStepBytesB),
                                kb > k_begin || kk > 0);
                        ptx::wgmma_commit();
                        // Keep this k-block's MMAs in flight; the previous one is done: free
                        // its stage.
                        ptx::wgmma_wait<1>();
                        if (prev_stage >= 0) release(prev_stage);
                        prev_stage = s;
                        next_stage();
                    }
                };
                // (An idle consumer's sums keep the last tile's values: none is stored, nor
                // added by a stream-K Finisher, which stores only rows and columns that exist.
                // Zeroing them here made ptxas serialize every instance's MMAs.)
                if (idle) {
                    skip_main_loop();
                } else with_tokens([&](auto tokens) {
                    constexpr int kTokens = decltype(tokens)::value;
                    main_loop([&](uint64_t desc_a, uint64_t desc_b, int accumulate) {
                        // Swap-AB: the weights (B's descriptor) are wgmma's A, the tokens its B.
                        if constexpr (kTokens > 0)
                            mma_weight_blocks<WgmmaSwapped<kTokens, kF16, NMajorB>, kWeightBlocks>(
                                acc, desc_b, desc_a, accumulate);
                        else
                            Mma::mma(acc, desc_a, desc_b, accumulate);
                    });
                });
            }
            if constexpr (!kFp8) {
                ptx::wgmma_wait<0>();
                if (prev_stage >= 0) release(prev_stage);
            }
            detail::phase_stamp_tile(p, index, false);

            // Stream-K: both pieces of a split tile publish their partial sums; the second to
            // arrive adds the other's and stores the tile, the first goes on. The Contributor
            // is always the next worker (tile_schedule.cuh), and its CTA's counter is the
            // tile's.
            uint32_t tile_counter = 0;
            const float4* partial = nullptr;
            if (!kFp8 && item.role != WorkRole::Whole) {
                static_assert(3 * Config::kStageBytes >=
                                  std::size_t{detail::kConsumerThreads} * kConsumerN * 2,
                              "a three-stage ring holds a tile of fp32 partial sums");
                // Each CTA has two slots: its Contributor piece's (2 cta) and its Finisher
                // piece's (2 cta + 1). One slot would not do: a CTA's Finisher piece could
                // overwrite its Contributor piece's sums before the previous worker read them.
                const bool finisher = item.role == WorkRole::Finisher;
                tile_counter = finisher ? blockIdx.x + ClusterN : blockIdx.x;
                const uint32_t own_slot = 2 * blockIdx.x + (finisher ? 1 : 0);
                const uint32_t other_slot =
                    finisher ? 2 * (blockIdx.x + ClusterN) : 2 * (blockIdx.x - ClusterN) + 1;
                if (!detail::publish_partial<kConsumerN>(acc, p, own_slot, tile_counter,
                                                         consumer * 128 + t))
                    continue;
                partial = detail::other_partial<kConsumerN>(p, other_slot, stage_base, finisher,
                                                            consumer * 128 + t);
            }

            // Epilogue: fragment (warp, lane) of m64nN holds rows warp*16 + lane/4 (+8) and
            // columns 8j + 2*(lane%4) (+1) for j < N/8.
            const int32_t expert_rows = schedule.rows[c.expert];
            const int32_t slice_row = c.m_tile * kBlockM + row_offset;
            // Swap-AB: the thread's first output column in weight block w.
            auto swapped_col = [&](int w) {
                return c.n_tile * BlockN + col_offset + 64 * w + warp * 16 + lane / 4;
            };
            if constexpr (kFp8 && SwapAB) {
#pragma unroll
                for (int w = 0; w < kWeightBlocks; ++w)
                    detail::apply_output_scales_swapped<64>(weight_block(acc, w), p, schedule, c,
                                                            c.m_tile * kBlockM + 2 * (lane % 4),
                                                            swapped_col(w));
            } else if constexpr (kFp8) {
                detail::apply_output_scales<kConsumerN>(
                    acc, p, schedule, c, slice_row + warp * 16 + lane / 4,
                    c.n_tile * BlockN + col_offset + 2 * (lane % 4));
            }
            if constexpr (SwapAB) {
                // (A split tile's other piece ran with the same tokens: the same fragments.)
                if (partial) {
#pragma unroll
                    for (int j = 0; j < kConsumerN / 8; ++j)
                        detail::add_partial_unit<kConsumerN>(acc, partial, j, consumer * 128 + t);
                }
#pragma unroll
                for (int w = 0; w < kWeightBlocks; ++w)
                    detail::store_swapped<Out>(weight_block(acc, w), p,
                                               schedule.row_start[c.expert] + c.m_tile * kBlockM,
                                               expert_rows - c.m_tile * kBlockM, swapped_col(w),
                                               lane);
                if (partial) detail::finish_partial(p, tile_counter, consumer * 128 + t);
                detail::phase_stamp_tile(p, index, true);
                continue;
            }
            if constexpr (kStaged) {
                // A slice whose 64 rows all belong to the expert goes through shared memory
                // and TMA, and the tensor cores move on while the store drains. A partial
                // slice (the expert's last rows) is stored from registers, bounded, below:
                // a whole-box store would write into the next expert's rows.
                if (slice_row + 64 <= expert_rows) {
                    // The slice leaves one 64 x 64 box at a time through this consumer's two
                    // box buffers: box j is written into buffer j % 2 once the store that last
                    // used that buffer has read it (only the latest store group, which uses
                    // the other buffer, may still be reading).
                    unsigned char* const buffers =
                        epilogue_buffer + consumer * 2 * Config::kEpilogueBoxBytes;
                    const int32_t row = schedule.row_start[c.expert] + slice_row;
#pragma unroll
                    for (int box = 0; box < kConsumerN / 64; ++box) {
                        unsigned char* const buffer =
                            buffers + (box % 2) * Config::kEpilogueBoxBytes;
                        if (t == 0) ptx::bulk_wait_read<1>();
                        ptx::named_barrier(1 + consumer, 128);
#pragma unroll
                        for (int unit = 0; unit < 8; ++unit) {
                            const int j = box * 8 + unit;  // 8-column group of the fragment
                            detail::add_partial_unit<kConsumerN>(acc, partial, j,
                                                                 consumer * 128 + t);
#pragma unroll
                            for (int half = 0; half < 2; ++half) {
                                // 128-byte swizzle of a [64 rows x 64 columns] box: the 16-byte
                                // unit u of row r lands at unit u ^ (r % 8).
                                const int r = warp * 16 + lane / 4 + 8 * half;
                                unsigned char* dst = buffer + r * 128 + ((unit ^ (r % 8)) * 16) +
                                                     (lane % 4) * 4;
                                detail::store_pair(reinterpret_cast<Out*>(dst),
                                                   acc[4 * j + 2 * half],
                                                   acc[4 * j + 2 * half + 1]);
                            }
                        }
                        ptx::fence_async_shared();
                        ptx::named_barrier(1 + consumer, 128);
                        if (t == 0) {
                            ptx::tma_store_2d(map_d, buffer, c.n_tile * BlockN + box * 64, row);
                            ptx::bulk_commit();
                        }
                    }
                    if (partial) detail::finish_partial(p, tile_counter, consumer * 128 + t);
                    detail::phase_stamp_tile(p, index, true);
                    continue;
                }
            }
            const int32_t row0 = slice_row + warp * 16 + lane / 4;
            const int32_t col0 = c.n_tile * BlockN + col_offset + 2 * (lane % 4);
            Out* d = static_cast<Out*>(p.d) +
                     (static_cast<int64_t>(schedule.row_start[c.expert]) + row0) * p.n + col0;
#pragma unroll
            for (int j = 0; j < kConsumerN / 8; ++j) {
                detail::add_partial_unit<kConsumerN>(acc, partial, j, consumer * 128 + t);
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    if (row0 + 8 * half < expert_rows && col0 + 8 * j < p.n)
                        detail::store_pair(d + 8 * half * static_cast<int64_t>(p.n) + 8 * j,
                                           acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]);
                }
            }
            if (partial) detail::finish_partial(p, tile_counter, consumer * 128 + t);
            detail::phase_stamp_tile(p, index, true);
        }
        // Stores still in flight must finish before the CTA's shared memory goes away.
        if (kStaged && t == 0) ptx::bulk_wait<0>();
        if (threadIdx.x == 128) detail::phase_stamp(p, kPhaseConsumerExit);
    }
    // No CTA may leave while its peer can still arrive on its barriers.
    if constexpr (ClusterN > 1) ptx::cluster_sync();
#endif
}

}  // namespace moegemm::native

namespace moegemm::native {

/// Host side of one instance: raises its shared-memory limit (once per plan, at creation).
template <typename In, typename Out, int BlockM, int BlockN, bool Staged, int ClusterN,
          bool NMajorB, bool SwapAB>
cudaError_t configure_grouped_gemm() {
    using Config = TileConfig<BlockM, BlockN, Staged>;
    return cudaFuncSetAttribute(
        sm90_grouped_gemm_kernel<In, Out, BlockM, BlockN, Staged, ClusterN, NMajorB, SwapAB>,
        cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(Config::kSmemLimit));
}

/// Pipeline stages of a launch over `experts` experts.
template <int BlockM, int BlockN, bool Staged>
int grouped_gemm_stages(int experts) {
    return TileConfig<BlockM, BlockN, Staged>::stages(experts);
}

/// The stages of a launch over `experts` experts with the BLOCK scale ring, or 0 where it has
/// no room (TileConfig::block_scale_ring_stages).
template <int BlockM, int BlockN, bool Staged>
int grouped_gemm_block_scale_ring_stages(int experts) {
    return TileConfig<BlockM, BlockN, Staged>::block_scale_ring_stages(experts);
}

/// Where a launch over `experts` experts with `stages` stages puts the BLOCK scale ring.
template <int BlockM, int BlockN, bool Staged>
int grouped_gemm_block_scale_ring(int experts, int stages) {
    return static_cast<int>(
        TileConfig<BlockM, BlockN, Staged>::block_scale_ring_offset(experts, stages));
}

/// Enqueues one launch; returns the launch error, if any.
template <typename In, typename Out, int BlockM, int BlockN, bool Staged, int ClusterN,
          bool NMajorB, bool SwapAB>
cudaError_t launch_grouped_gemm(const TensorMapTemplates& templates,
                                const GroupedGemmParams& params, int grid, cudaStream_t stream) {
    using Config = TileConfig<BlockM, BlockN, Staged>;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(grid));
    config.blockDim = dim3(Config::kThreads);
    // (The BLOCK scale ring takes the bytes kept for aligning the base: TileConfig.)
    config.dynamicSmemBytes =
        params.block_scale_ring ? Config::kSmemLimit : Config::smem_bytes(params.num_experts);
    config.stream = stream;
    cudaLaunchAttribute attributes[2]{};
    unsigned count = 0;
    if (params.dependent_launch) {
        // The prologue may overlap the previous kernel's end (the kernel's wait_for_prior_grids).
        attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attributes[count++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (ClusterN > 1) {
        attributes[count].id = cudaLaunchAttributeClusterDimension;
        attributes[count].val.clusterDim.x = ClusterN;
        attributes[count].val.clusterDim.y = 1;
        attributes[count++].val.clusterDim.z = 1;
    }
    config.attrs = attributes;
    config.numAttrs = count;
    return cudaLaunchKernelEx(
        &config,
        sm90_grouped_gemm_kernel<In, Out, BlockM, BlockN, Staged, ClusterN, NMajorB, SwapAB>,
        templates, params);
}

}  // namespace moegemm::native

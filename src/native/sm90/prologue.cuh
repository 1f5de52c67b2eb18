// The kernel's prologue: every CTA initializes its barriers, copies the expert sizes into
// shared memory and builds the tile schedule from them (clamped), and makes its tensor maps
// in the workspace from the plan's templates, before any warp role starts.
#pragma once

#include "native/sm90/fp8_scales.cuh"
#include "native/sm90/kernel_traits.cuh"

namespace moegemm::native {

/// Copies the first `count` ints of the sizes into `smem`, all threads of the CTA together: the
/// raw sizes (E ints, from the device or the parameters), or the schedule the host built
/// (GroupedGemmParams::host_schedule). Host sizes are a kernel parameter, and a warp that reads
/// different parameter words is served one word at a time: each thread reads at most one
/// 16-byte group per 384 groups, dealt out across the warps (group lane * 12 + warp) so that
/// each warp's share of the serialized reads is small; device sizes the same way.
__device__ __forceinline__ void copy_sizes_to_smem(const GroupedGemmParams& p, int count,
                                                   int32_t* smem) {
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
            if (e < count) smem[e] = p.device_sizes ? p.device_sizes[e] : host_values[i];
        }
    }
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

template <typename K>
inline constexpr bool kRolledSchedule = !K::kFp8 || K::kSwapAB;

/// One warp builds the schedule: each lane takes a contiguous run of experts, and warp scans
/// give the row prefix (VARIABLE only) and the tile prefix. `raw(e)`: expert e's raw size, read
/// twice; it may be s.rows[e] (copied there), as a lane reads each of its experts' sizes before
/// it overwrites them with clamped rows. Returns the clamp flags seen (lane 0).
///
/// The prologue waits for this (a chain of latencies, not work), so the usual case takes one
/// pass and one round of scans: a VARIABLE expert's tiles depend on its row prefix only when
/// the rows overflow max_rows (a clamp), so the first pass counts tiles from the unclamped rows
/// while it sums them, and both scans run side by side. Only when the raw rows' total exceeds
/// max_rows does a second pass count the clamped tiles and scan again. MASKED and FIXED need no
/// row prefix and take a shorter way.
///
/// Rolled: the per-lane loops stay loops (a lane has 1-4 experts in the usual cases; unrolled
/// they only lengthen code that runs once per launch). Not for the fp8 instances: there it
/// moved ptxas's register allocation of the consumers enough to serialize the 64 x 128
/// swap-AB loop's wgmmas (tests/sass_check.py fails on that).
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
        // writes the tile prefix.
        int32_t lane_tiles = 0;
        uint32_t flags = 0;
        for_each_expert<Rolled>(first, last, [&](int e) {
            const ExpertRows x = clamp_expert_rows(p.layout, e, raw(e), 0, p.max_rows);
            s.row_start[e] = static_cast<int32_t>(x.row_start);
            s.rows[e] = x.rows;
            lane_tiles += expert_tiles(x.rows, BlockM, tiles_n);
            flags |= x.flags;
        });
        int32_t tiles_before = warp_inclusive_sum(lane_tiles);
        const int32_t total_tiles = __shfl_sync(0xffffffffu, tiles_before, 31);
        tiles_before -= lane_tiles;
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

/// Thread 0: the stage barriers (and in a cluster the peer hand-off's).
template <typename K>
__device__ __forceinline__ void init_barriers(const GroupedGemmParams& p,
                                              const SharedStorage<K>& smem) {
    for (int s = 0; s < p.stages; ++s) {
        // The producer's expect_tx, and with the BLOCK scale ring each lane of the scale warps.
        ptx::mbarrier_init(&smem.full[s],
                           smem.scale_ring(p) ? 1 + 32 * block_scale_warps(K::kBlockM) : 1);
        // Lane 0 of each consumer warp of every CTA that reads this stage's A half.
        ptx::mbarrier_init(&smem.empty[s], 8 * K::kClusterN);
    }
    if constexpr (K::kClusterN > 1) {
        for (int slot = 0; slot < 2; ++slot) {
            ptx::mbarrier_init(&smem.hand_off->peer_full[slot], 1);   // the peer's expect_tx
            ptx::mbarrier_init(&smem.hand_off->peer_empty[slot], 1);  // the peer's release
        }
    }
    ptx::fence_barrier_init();
}

/// Thread 32 (warp 1, after the schedule): records the clamp flags, and initializes the BLOCK
/// scale ring's barriers. (Here rather than with the others: made by thread 0 there, they
/// cost ptxas its uniform-datapath proof of the consumers' k-block loops.)
template <typename K>
__device__ __forceinline__ void finish_schedule(const GroupedGemmParams& p,
                                                const SharedStorage<K>& smem, uint32_t flags) {
    if (threadIdx.x != 32) return;
    if (flags != 0 && blockIdx.x == 0 && p.status_word) atomicOr(p.status_word, flags);
    if (smem.scale_ring(p)) init_scale_ring_barriers<K>(p, smem.scale_slots(p));
}

/// The prologue, all threads of the CTA. Programmatic dependent launch: this grid may start
/// while the previous kernel of the stream still runs, and lets the next one start its CTAs as
/// this one's leave. Until wait_for_prior_grids() a thread touches only shared memory and the
/// parameters: the previous kernel may still write A, the sizes or the scales, or read the
/// workspace (its tensor maps, the ticket word: a plan sharing this workspace) or D. Host
/// sizes are copied and the schedule built before the wait, which hides them behind the
/// previous kernel's end; device sizes wait first.
template <typename K>
__device__ __forceinline__ void run_prologue(const TensorMapTemplates& templates,
                                             const GroupedGemmParams& p,
                                             const SharedStorage<K>& smem, int32_t tiles_n) {
    const int warp_index = static_cast<int>(threadIdx.x / 32);
    CUtensorMap* const maps = cta_tensor_maps(p);
    const Schedule& schedule = smem.schedule;
    ptx::allow_dependent_grids();
    if constexpr (K::kParallelPrologue) {
        // Thread 0 initializes the barriers and every thread copies its share of the sizes into
        // shared memory; then warps 2-6 make one tensor map each while warp 1 builds the
        // schedule from the copied sizes.
        if (threadIdx.x == 0) init_barriers<K>(p, smem);
        if (p.device_sizes) ptx::wait_for_prior_grids();
        // The schedule the host built (host sizes) lands where the kernel would build it: the
        // arrays follow each other from row_start on.
        if (p.host_schedule)
            copy_sizes_to_smem(p, schedule_ints(p.num_experts), schedule.row_start);
        else
            copy_sizes_to_smem(p, p.num_experts, schedule.rows);
        __syncthreads();
        if (warp_index >= 2 && warp_index < 2 + K::kMapCount) {
            ptx::wait_for_prior_grids();
            make_tensor_map(templates, warp_index - 2, tensor_map_address(p, warp_index - 2),
                            smem.scratch(), maps);
        } else if (warp_index == 1) {
            // (Host sizes were validated: a schedule the host built clamps nothing.)
            const uint32_t flags =
                p.host_schedule ? 0u
                                : build_schedule<K::kBlockM, kRolledSchedule<K>>(
                                      p, tiles_n, schedule, [&](int e) { return schedule.rows[e]; });
            ptx::wait_for_prior_grids();  // before the status word
            finish_schedule<K>(p, smem, flags);
        }
    } else {
        // Warp 0 makes the barriers, then the tensor maps one after another, while warp 1
        // builds the schedule from the sizes where they are.
        if (warp_index == 0) {
            if (threadIdx.x == 0) init_barriers<K>(p, smem);
            ptx::wait_for_prior_grids();
#pragma unroll
            for (int m = 0; m < K::kMapCount; ++m)
                make_tensor_map(templates, m, tensor_map_address(p, m), smem.scratch(), maps);
        } else if (warp_index == 1) {
            if (p.device_sizes) ptx::wait_for_prior_grids();
            const uint32_t flags =
                build_schedule<K::kBlockM, kRolledSchedule<K>>(p, tiles_n, schedule, [&](int e) {
                    return p.device_sizes ? p.device_sizes[e] : p.host_sizes[e];
                });
            ptx::wait_for_prior_grids();  // before the status word
            finish_schedule<K>(p, smem, flags);
        }
    }
    __syncthreads();
    // Everything after this reads or writes global memory; the warps that waited return at once.
    ptx::wait_for_prior_grids();
    // The peer's barriers must be initialized before anything multicasts or arrives on them.
    // With the parallel prologue every thread arrives here and waits where it first reaches
    // the peer (cluster_wait_for_peer), so that the producer's tensor-map acquires overlap the
    // cluster barrier.
    if constexpr (K::kClusterN > 1) {
        if constexpr (K::kParallelPrologue) {
            ptx::cluster_arrive_relaxed();
        } else {
            ptx::cluster_sync();
        }
    }
}

/// Where each role first reaches the peer CTA: the second half of the prologue's cluster
/// barrier (parallel prologue only; the serial one synchronized the cluster already).
template <typename K>
__device__ __forceinline__ void cluster_wait_for_peer() {
    if constexpr (K::kClusterN > 1 && K::kParallelPrologue) ptx::cluster_wait();
}

}  // namespace moegemm::native

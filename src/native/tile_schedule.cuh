// The grouped tile schedule, shared by the native kernel (device) and the CPU tests (host).
//
// The kernel reads the raw rows per expert (host values passed by value, or device memory the
// caller may change between launches), clamps them, lays the experts' rows out as the layout
// says, and numbers the output tiles expert after expert. A persistent CTA takes linear tile
// indices and maps each back to (expert, row tile, column tile) with map_tile(). Tiles never
// straddle two experts: each expert's row tiles start at its first row, and the epilogue
// stores only the rows the expert owns.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MOEGEMM_HD __host__ __device__ __forceinline__
#else
#define MOEGEMM_HD inline
#endif

namespace moegemm::native {

/// Bits of the device status word: what the GPU had to clamp in the sizes it read.
enum SizeClampFlags : uint32_t {
    kClampedNegative = 1u << 0,  ///< a size was negative: read as 0
    kClampedCapacity = 1u << 1,  ///< rows past max_rows (VARIABLE sum, or a MASKED slab): dropped
};

enum class RowLayout : int32_t { Variable = 0, Masked = 1, Fixed = 2 };

/// An expert's rows once clamped: where they start in A/D, how many there are, and the flags
/// that clamping raised.
struct ExpertRows {
    int64_t row_start;
    int32_t rows;
    uint32_t flags;
};

/// Clamps expert `e`'s raw size. For VARIABLE, `raw_prefix` is the sum of the non-negative raw
/// sizes of the experts before it (64-bit: 1024 sizes near 2^31 do not overflow); capacity cuts
/// the running sum at max_rows, so an expert keeps only the rows that still fit.
MOEGEMM_HD ExpertRows clamp_expert_rows(RowLayout layout, int32_t e, int32_t raw_rows,
                                        int64_t raw_prefix, int64_t max_rows) {
    ExpertRows out{0, 0, 0u};
    const int64_t wanted = raw_rows < 0 ? 0 : raw_rows;
    if (raw_rows < 0) out.flags |= kClampedNegative;
    if (layout == RowLayout::Variable) {
        const int64_t begin = raw_prefix < max_rows ? raw_prefix : max_rows;
        const int64_t end_raw = raw_prefix + wanted;
        const int64_t end = end_raw < max_rows ? end_raw : max_rows;
        if (end_raw > max_rows && wanted > 0) out.flags |= kClampedCapacity;
        out.row_start = begin;
        out.rows = static_cast<int32_t>(end - begin);
    } else {
        const int64_t rows = layout == RowLayout::Fixed ? max_rows
                             : wanted < max_rows        ? wanted
                                                        : max_rows;
        if (layout == RowLayout::Masked && wanted > max_rows) out.flags |= kClampedCapacity;
        out.row_start = static_cast<int64_t>(e) * max_rows;
        out.rows = static_cast<int32_t>(rows);
    }
    return out;
}

/// Output tiles of an expert with `rows` rows. Rounded up in 64 bits: rows may be close to
/// 2^31 - 1. The result fits in 32 bits for every problem the native backend accepts (its
/// can-implement bounds the total tile count).
MOEGEMM_HD int32_t expert_tiles(int32_t rows, int32_t block_m, int32_t tiles_n) {
    return static_cast<int32_t>((static_cast<int64_t>(rows) + block_m - 1) / block_m * tiles_n);
}

/// Ints of a schedule laid out as the kernel keeps it in shared memory: row starts [E], rows
/// [E], then the tile prefix [E + 1].
MOEGEMM_HD int32_t schedule_ints(int32_t num_experts) { return 3 * num_experts + 1; }

/// The schedule of `raw` sizes (host side), laid out as schedule_ints says, into `out`: what the
/// kernel's warp would build from the same sizes, so that a launch with host sizes can copy it
/// instead of building it (GroupedGemmParams::host_schedule). Row starts must fit in 32 bits
/// (the native backend's bound). Returns the clamp flags (SizeClampFlags) the sizes raise.
inline uint32_t build_host_schedule(RowLayout layout, const int32_t* raw, int32_t num_experts,
                                    int64_t max_rows, int32_t block_m, int32_t tiles_n,
                                    int32_t* out) {
    int32_t* row_start = out;
    int32_t* rows = out + num_experts;
    int32_t* tile_start = out + 2 * num_experts;
    uint32_t flags = 0;
    int64_t prefix = 0;
    int32_t tiles = 0;
    for (int32_t e = 0; e < num_experts; ++e) {
        const ExpertRows x = clamp_expert_rows(layout, e, raw[e], prefix, max_rows);
        prefix += raw[e] < 0 ? 0 : raw[e];
        row_start[e] = static_cast<int32_t>(x.row_start);
        rows[e] = x.rows;
        tile_start[e] = tiles;
        tiles += expert_tiles(x.rows, block_m, tiles_n);
        flags |= x.flags;
    }
    tile_start[num_experts] = tiles;
    return flags;
}

/// Host sizes on 128-row tiles: the share of the MMA work that consumer warpgroups skip where
/// their 64 rows hold none of the expert's (the upper half of an expert's last row tile when
/// at most 64 rows are left): 1 - sum 64 ceil(r / 64) / sum 128 ceil(r / 128) over the experts'
/// (clamped) rows `rows`; 0 when no expert has rows.
inline double idle_half_share(const int32_t* rows, int32_t num_experts) {
    int64_t halves = 0;  // 64-row halves of all row tiles, and those with rows
    int64_t busy = 0;
    for (int32_t e = 0; e < num_experts; ++e) {
        const int64_t r = rows[e] < 0 ? 0 : rows[e];
        halves += (r + 127) / 128 * 2;
        busy += (r + 63) / 64;
    }
    return halves == 0 ? 0.0 : 1.0 - static_cast<double>(busy) / static_cast<double>(halves);
}

/// The least idle_half_share at which plans whose tiles go round robin (fp8 BLOCK scales read
/// from global memory, stream-K) skip idle halves. There, tiles of uneven length leave CTAs
/// unevenly loaded: fp8 BLOCK on an H200 measured +3.1% on dsv3ep8-fc1 (4.1% skipped), -2.7% on
/// qwen3moe-fc1 (8.6%), -11.4% on gptoss-fc1 (35.8%; bench/NOTES.md §40), all then round robin.
/// Tile tickets hand out tiles as CTAs free up, and skip at any share.
constexpr double kRoundRobinIdleHalfShare = 0.06;

/// Whether a plan's consumers skip the MMAs of halves without rows (GroupedGemmParams::
/// skip_idle_slices): `enabled` (MOEGEMM_SKIP_IDLE_SLICES), 128-row tiles only, and with round
/// robin only from kRoundRobinIdleHalfShare of `idle_share` (0 where the sizes are on the GPU).
inline bool skips_idle_halves(bool enabled, int32_t block_m, bool tile_tickets,
                              double idle_share) {
    return enabled && block_m == 128 &&
           (tile_tickets || idle_share >= kRoundRobinIdleHalfShare);
}

struct TileCoord {
    int32_t expert;
    int32_t m_tile;  ///< row tile within the expert
    int32_t n_tile;  ///< column tile
};

/// Maps linear tile `tile` (0 <= tile < tile_start[num_experts]) to its expert and tile.
/// `tile_start` holds num_experts + 1 exclusive prefix sums of expert_tiles(); empty experts
/// repeat a value and are skipped. Within an expert, tiles come in groups of `n_group`
/// neighbouring column tiles of one row tile (the CTAs of a cluster, which share the A rows),
/// and consecutive groups walk down the rows of the same columns, so CTAs running side by
/// side share weight columns in L2. n_group must divide tiles_n.
MOEGEMM_HD TileCoord map_tile(int32_t tile, const int32_t* tile_start, int32_t num_experts,
                              int32_t tiles_n, int32_t n_group = 1) {
    // The last expert e with tile_start[e] <= tile: binary search over the prefix.
    int32_t lo = 0;
    int32_t hi = num_experts - 1;
    while (lo < hi) {
        const int32_t mid = (lo + hi + 1) / 2;
        if (tile_start[mid] <= tile) lo = mid;
        else hi = mid - 1;
    }
    const int32_t local = tile - tile_start[lo];
    const int32_t tiles_of_expert = tile_start[lo + 1] - tile_start[lo];
    TileCoord c;
    c.expert = lo;
    if (tiles_of_expert == tiles_n) {
        // One row tile (every decode expert): the column tile is the local index, whatever
        // the groups. No division: the producer and the consumers map every tile, and the two
        // runtime divisions of the general case sat on their path between tiles (fp8
        // qwen3moe-fc2, 6 k-blocks per tile: -1%, bench/NOTES.md §33).
        c.m_tile = 0;
        c.n_tile = local;
        return c;
    }
    const int32_t tiles_m = tiles_of_expert / tiles_n;
    const int32_t group = local / n_group;
    c.m_tile = group % tiles_m;
    c.n_tile = group / tiles_m * n_group + local % n_group;
    return c;
}

// ---- Tile tickets (dynamic hand-out) --------------------------------------------------------
// Round robin gives every CTA the same number of tiles, but not the same time: when the
// weights stream from DRAM, bandwidth is shared unevenly between SMs, and the CTAs of a
// decode kernel left between 52 and 69 µs of one 66-69 µs launch (bench/NOTES.md §17). With
// tickets each CTA (cluster) takes its first tile group by its index, then the next free one
// from a counter in the workspace, so the ones that ran fast take more.
//
// The counter is never reset and the workspace is not zeroed per call (a memset per launch
// costs more than it saves): the 64-bit word holds this launch's tag (the grid's %gridid,
// distinct for every launch in a context) above the count. Before its first add, a taker
// makes sure the word carries the tag: from a value it read (`seen`), while that is stale (an
// earlier launch's, or whatever the workspace held), it swaps in (tag, 0) by compare-and-swap,
// taking the value the swap found as its new `seen` when it fails. Nobody adds to a stale
// word, so a stale word changes only by that swap: each taker's loop ends after at most two
// swaps, and the first swap that succeeds makes the word (tag, 0). From then on the word only
// counts up, so tickets 0, 1, 2, ... go out exactly once each. (A first version let stale
// adds and swaps race, each failed swap adding again: with 64 takers the swaps kept failing
// and the kernel never ended.)
//
// The tag alone does not tell launches apart under CUDA graphs: every replay of a graph's
// kernel node runs with the same %gridid, and found the previous replay's spent count
// carrying its own tag (it then skipped nearly every tile). So each launch also leaves the
// word as (tag, 0): every taker that started a group takes tickets until one is past the end,
// so a launch takes exactly `groups` tickets (groups - slots that are used and one past the
// end per taker, or, with fewer groups than slots, one per taker), and the taker that draws
// the last one, groups - 1, knows that every other add and claim of the launch is done and
// rewinds the word. A replay then finds its own tag with a count of 0, as a claim would leave
// it; a launch with another tag finds a stale word and claims it as before.

MOEGEMM_HD uint64_t ticket_word(uint32_t tag, uint32_t count) {
    return (static_cast<uint64_t>(tag) << 32) | count;
}

/// Whether `word` carries this launch's tag.
MOEGEMM_HD bool ticket_word_is_current(uint64_t word, uint32_t tag) {
    return static_cast<uint32_t>(word >> 32) == tag;
}

/// Whether `ticket` is the last a launch over `groups` tile groups hands out (see above): its
/// taker rewinds the word to (tag, 0) for the next launch.
MOEGEMM_HD bool is_last_ticket(uint32_t ticket, int32_t groups) {
    return groups > 0 && ticket == static_cast<uint32_t>(groups - 1);
}

/// The group a cluster works on after `ticket` (its first group was its index, below
/// `slots`), or -1 past the last of `groups`.
MOEGEMM_HD int32_t ticket_group(uint32_t ticket, int32_t slots, int32_t groups) {
    const int64_t group = static_cast<int64_t>(slots) + ticket;
    return group < groups ? static_cast<int32_t>(group) : -1;
}

// ---- Stream-K tail --------------------------------------------------------------------------
// A persistent grid of `slots` workers (CTAs, or clusters of CTAs that take tile groups
// together) over `groups` tile groups of `k_blocks` k-blocks each. Round robin leaves the last
// wave partly empty (groups % slots busy workers): with 15.5 waves, 3% of the time. Stream-K
// instead splits the last full wave plus the remainder evenly along K: those
// (slots + groups % slots) * k_blocks k-block units are cut into `slots` contiguous ranges.
// Every worker then has less than two groups' worth of units, so a range is at most
//   [the end of a group (Contributor)] [whole groups (Whole)] [the start of a group (Finisher)];
// the Contributor of a group is always the worker right after its Finisher, and it works on
// that group first, while the Finisher works on it last. Both write their partial sums to
// memory; whichever arrives second adds the other's and stores the tile (nobody waits).

enum class WorkRole : int32_t {
    Whole = 0,        ///< every k-block of the group: compute and store
    Contributor = 1,  ///< k-blocks [k_begin, k_blocks) of a split group
    Finisher = 2,     ///< k-blocks [0, k_end) of a split group
};

struct WorkItem {
    int32_t group;   ///< -1: no more work for this worker
    int32_t k_begin;
    int32_t k_end;
    WorkRole role;
    int32_t peer;  ///< Finisher: the Contributor's worker; Contributor: the Finisher's
};

/// Everything 32-bit (the kernel's producer runs on 40 registers): the tail's units are split
/// as `share` per worker, the first `extra` workers taking one more.
struct StreamKPlan {
    int32_t groups = 0;
    int32_t slots = 1;
    int32_t k_blocks = 1;
    int32_t dp_groups = 0;  ///< groups [0, dp_groups) go round robin, whole
    int32_t sk_units = 0;   ///< k-block units of the groups after them, split evenly
    int32_t share = 0;      ///< sk_units / slots
    int32_t extra = 0;      ///< sk_units % slots
};

/// The plan: stream-K only when `enable`, there is more than one wave, the last one is
/// partial and the tail's units fit in 32 bits; otherwise everything is round robin.
MOEGEMM_HD StreamKPlan make_stream_k_plan(int32_t groups, int32_t slots, int32_t k_blocks,
                                          bool enable) {
    StreamKPlan p;
    p.groups = groups;
    p.slots = slots;
    p.k_blocks = k_blocks;
    p.dp_groups = groups;
    if (!enable || slots < 2 || groups <= slots || groups % slots == 0) return p;
    const int32_t dp_groups = (groups / slots - 1) * slots;
    const int64_t units = static_cast<int64_t>(groups - dp_groups) * k_blocks;
    if (units > 0x7fffffff) return p;
    p.dp_groups = dp_groups;
    p.sk_units = static_cast<int32_t>(units);
    p.share = p.sk_units / slots;
    p.extra = p.sk_units % slots;
    return p;
}

/// First tail unit of worker `slot`'s range; `slot` may be plan.slots (the end).
MOEGEMM_HD int32_t stream_k_range_begin(const StreamKPlan& p, int32_t slot) {
    return slot * p.share + (slot < p.extra ? slot : p.extra);
}

/// The worker whose range holds tail unit `u` (0 <= u < sk_units).
MOEGEMM_HD int32_t stream_k_owner(const StreamKPlan& p, int32_t u) {
    const int32_t long_units = p.extra * (p.share + 1);  // the first `extra` ranges
    return u < long_units ? u / (p.share + 1) : p.extra + (u - long_units) / p.share;
}

/// Work item `index` (0, 1, ...) of worker `slot`: its round-robin groups first, then the
/// pieces of its stream-K range in order; group -1 past the last one.
MOEGEMM_HD WorkItem stream_k_work_item(const StreamKPlan& p, int32_t slot, int32_t index) {
    WorkItem item{-1, 0, 0, WorkRole::Whole, slot};
    const int32_t dp_items =
        slot < p.dp_groups ? (p.dp_groups - slot + p.slots - 1) / p.slots : 0;
    if (index < dp_items) {
        item.group = slot + index * p.slots;
        item.k_end = p.k_blocks;
        return item;
    }
    if (p.sk_units == 0) return item;
    // A range holds at most three pieces: the end of a group, whole groups, a group's start.
    int32_t u = stream_k_range_begin(p, slot);
    const int32_t end = stream_k_range_begin(p, slot + 1);
    for (int32_t piece = index - dp_items; u < end; --piece) {
        const int32_t group = u / p.k_blocks;
        const int32_t group_end = (group + 1) * p.k_blocks;
        const int32_t stop = end < group_end ? end : group_end;
        if (piece == 0) {
            item.group = p.dp_groups + group;
            item.k_begin = u - group * p.k_blocks;
            item.k_end = stop - group * p.k_blocks;
            if (item.k_begin > 0) {
                item.role = WorkRole::Contributor;
                item.peer = stream_k_owner(p, group * p.k_blocks);
            } else if (item.k_end < p.k_blocks) {
                item.role = WorkRole::Finisher;
                item.peer = stream_k_owner(p, stop);
            }
            return item;
        }
        u = stop;
    }
    return item;
}

}  // namespace moegemm::native

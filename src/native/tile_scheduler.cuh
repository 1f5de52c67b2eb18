// The grouped tile schedule and the tile scheduler: plain arithmetic shared by the native
// kernel (device) and the CPU tests (host).
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

/// Output tiles of an expert with `rows` rows (0 <= rows <= 2^31 - 1). Rounded up in unsigned
/// 32-bit arithmetic, which rows close to 2^31 - 1 cannot overflow, and which is a shift for a
/// power-of-two block_m: the kernel's prologue counts tiles per expert, and its length moves
/// ptxas's register allocation of the consumers. The result fits in 32 bits for every problem
/// the native backend accepts (its can-implement bounds the total tile count).
MOEGEMM_HD int32_t expert_tiles(int32_t rows, int32_t block_m, int32_t tiles_n) {
    const uint32_t row_tiles = (static_cast<uint32_t>(rows) + static_cast<uint32_t>(block_m) - 1u) /
                               static_cast<uint32_t>(block_m);
    return static_cast<int32_t>(row_tiles * static_cast<uint32_t>(tiles_n));
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
/// from global memory) skip idle halves. There, tiles of uneven length leave CTAs unevenly
/// loaded, which costs more than the skipped MMAs save until enough of the work is skipped
/// (docs/design.md). Tile tickets hand out tiles as CTAs free up, and skip at any share.
constexpr double kRoundRobinIdleHalfShare = 0.06;

/// Whether a plan's consumers skip the MMAs of halves without rows (GroupedGemmParams::
/// skip_idle_halves): `enabled` (the plan option), 128-row tiles only, and with round robin
/// only from kRoundRobinIdleHalfShare of `idle_share` (0 where the sizes are on the GPU).
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
/// repeat a value and are skipped. Within an expert, tiles come as cluster tiles of
/// `cluster_n` neighbouring column tiles of one row tile (the CTAs of a cluster, which share
/// the A rows), and consecutive cluster tiles walk down the rows of the same columns, so CTAs
/// running side by side share weight columns in L2. cluster_n must divide tiles_n.
MOEGEMM_HD TileCoord map_tile(int32_t tile, const int32_t* tile_start, int32_t num_experts,
                              int32_t tiles_n, int32_t cluster_n = 1) {
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
        // the cluster. No division: the producer and the consumers map every tile, and the two
        // runtime divisions of the general case sit on their path between tiles.
        c.m_tile = 0;
        c.n_tile = local;
        return c;
    }
    const int32_t tiles_m = tiles_of_expert / tiles_n;
    const int32_t cluster_tile = local / cluster_n;
    c.m_tile = cluster_tile % tiles_m;
    c.n_tile = cluster_tile / tiles_m * cluster_n + local % cluster_n;
    return c;
}

// ---- Tile tickets (dynamic hand-out) --------------------------------------------------------
// Round robin gives every CTA the same number of tiles, but not the same time: when the
// weights stream from DRAM, bandwidth is shared unevenly between SMs, and CTAs of one decode
// launch finish far apart. With tickets each cluster takes its first cluster tile by its
// index, then the next free one from a counter in the workspace, so the ones that ran fast
// take more.
//
// The counter is never reset and the workspace is not zeroed per call (a memset per launch
// costs more than it saves): the 64-bit word holds this launch's tag (the grid's %gridid,
// distinct for every launch in a context) above the count. Before its first add, a taker
// makes sure the word carries the tag: from a value it read (`seen`), while that is stale (an
// earlier launch's, or whatever the workspace held), it swaps in (tag, 0) by compare-and-swap,
// taking the value the swap found as its new `seen` when it fails. Nobody adds to a stale
// word, so a stale word changes only by that swap: each taker's loop ends after at most two
// swaps, and the first swap that succeeds makes the word (tag, 0). From then on the word only
// counts up, so tickets 0, 1, 2, ... go out exactly once each. (Were stale adds allowed to
// race the swaps, each failed swap adding again, the swaps could keep failing forever.)
//
// The tag alone does not tell launches apart under CUDA graphs: every replay of a graph's
// kernel node runs with the same %gridid, and would find the previous replay's spent count
// carrying its own tag. So each launch also leaves the
// word as (tag, 0): every taker that started takes tickets until one is past the end, so a
// launch over T cluster tiles and S slots takes exactly T tickets (T - S that are used and one
// past the end per taker, or, with fewer tiles than slots, one per taker), and the taker that
// draws the last one, T - 1, knows that every other add and claim of the launch is done and
// rewinds the word. A replay then finds its own tag with a count of 0, as a claim would leave
// it; a launch with another tag finds a stale word and claims it as before.

MOEGEMM_HD uint64_t ticket_word(uint32_t tag, uint32_t count) {
    return (static_cast<uint64_t>(tag) << 32) | count;
}

/// Whether `word` carries this launch's tag.
MOEGEMM_HD bool ticket_word_is_current(uint64_t word, uint32_t tag) {
    return static_cast<uint32_t>(word >> 32) == tag;
}

// ---- The tile scheduler ------------------------------------------------------------------
// The CTAs of a cluster (ClusterN of them, along N) compute ClusterN neighbouring output
// tiles of one row tile together: a cluster tile. Cluster tile c is made of output tiles
// c * ClusterN + rank (map_tile's cluster tiles). A cluster's work items are cluster tiles, taken in
// turn: the first is its slot (its index in the grid); after that either the next by round
// robin (slot + i * slots, fixed in advance) or, with tile tickets, slots + the ticket its
// leader drew. Every warp role of a CTA walks the same sequence: the leader's producer
// decides it and hands each cluster tile on (sm90/tile_hand_off.cuh).

struct TileScheduler {
    int32_t slot;           ///< this cluster's index in the grid: its first cluster tile
    int32_t slots;          ///< clusters in the grid
    int32_t cluster_tiles;  ///< cluster tiles of the launch: tile_start[E] / ClusterN

    /// Work item `index` in round-robin order, or -1 past the last cluster tile. With tile
    /// tickets too, work item 0 is the cluster's slot (or -1 where there are fewer cluster tiles
    /// than slots) ...
    MOEGEMM_HD int32_t round_robin(int32_t index) const {
        const int64_t tile = slot + static_cast<int64_t>(index) * slots;
        return tile < cluster_tiles ? static_cast<int32_t>(tile) : -1;
    }
    /// ... and the ones after it the cluster tile after drawing `ticket`, or -1 past the last.
    MOEGEMM_HD int32_t after_ticket(uint32_t ticket) const {
        const int64_t tile = static_cast<int64_t>(slots) + ticket;
        return tile < cluster_tiles ? static_cast<int32_t>(tile) : -1;
    }
    /// Whether `ticket` is the last a launch hands out (see above): its taker rewinds the word
    /// to (tag, 0) for the next launch.
    MOEGEMM_HD bool is_last_ticket(uint32_t ticket) const {
        return cluster_tiles > 0 && ticket == static_cast<uint32_t>(cluster_tiles - 1);
    }
};

}  // namespace moegemm::native

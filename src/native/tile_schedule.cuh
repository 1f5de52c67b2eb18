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
    const int32_t tiles_m = (tile_start[lo + 1] - tile_start[lo]) / tiles_n;
    const int32_t group = local / n_group;
    TileCoord c;
    c.expert = lo;
    c.m_tile = group % tiles_m;
    c.n_tile = group / tiles_m * n_group + local % n_group;
    return c;
}

}  // namespace moegemm::native

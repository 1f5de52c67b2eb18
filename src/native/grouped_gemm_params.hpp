// What the host passes to the native grouped GEMM kernel, and the kernel's shared-memory
// layout (host code sizes the launch with it). Plain C++: no device code here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moegemm/moegemm.h"
#include "native/tile_schedule.cuh"

namespace moegemm::native {

/// Kernel arguments besides the two tensor maps. Host sizes travel by value (4 KB: kernel
/// parameters may be up to 32 KB since CUDA 12.1), so that a captured graph keeps the sizes
/// it was captured with and no device buffer is rewritten under a launch still in flight.
struct GroupedGemmParams {
    void* d;                       ///< output base
    const int32_t* device_sizes;   ///< sizes in device memory, or null: use host_sizes
    uint32_t* status_word;         ///< where clamps are recorded (may be null)
    int64_t max_rows;
    int32_t num_experts;
    int32_t n;
    int32_t k;
    RowLayout layout;
    int32_t host_sizes[MOEGEMM_MAX_EXPERTS];
};

/// Tile configuration of one kernel instance. With a staged epilogue (16-bit outputs) each
/// consumer warpgroup writes its 64 x BlockN outputs into a shared-memory buffer that TMA
/// stores while the next tile's main loop runs; the buffer costs one pipeline stage.
template <int BlockN, bool StagedEpilogue>
struct TileConfig {
    static constexpr int kBlockM = 128;  // two consumer warpgroups of 64 rows
    static constexpr int kBlockN = BlockN;
    static constexpr int kBlockK = 64;   // 128 bytes of 16-bit values: one swizzle atom row
    static constexpr int kThreads = 384;  // producer warpgroup + 2 consumer warpgroups
    static constexpr std::size_t kTileABytes = std::size_t{kBlockM} * kBlockK * 2;
    static constexpr std::size_t kTileBBytes = std::size_t{kBlockN} * kBlockK * 2;
    static constexpr std::size_t kStageBytes = kTileABytes + kTileBBytes;
    static constexpr std::size_t kEpilogueBytes =
        StagedEpilogue ? std::size_t{kBlockM} * kBlockN * 2 : 0;
    static constexpr int kStages = (BlockN == 256 ? 4 : 6) - (StagedEpilogue ? 1 : 0);

    /// Dynamic shared memory: 1024-byte alignment slack, the stages, the epilogue buffer,
    /// 2 barriers per stage, then the schedule (row starts, rows, tile starts) for `experts`.
    static constexpr std::size_t smem_bytes(int experts) {
        return 1024 + kStages * kStageBytes + kEpilogueBytes + 2 * kStages * sizeof(uint64_t) +
               sizeof(int64_t) * experts + sizeof(int32_t) * (2 * experts + 1);
    }
};

}  // namespace moegemm::native

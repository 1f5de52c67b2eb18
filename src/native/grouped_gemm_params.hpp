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
    const void* a;                 ///< activations base
    const void* b;                 ///< weights base
    void* d;                       ///< output base
    /// Workspace: kTensorMapsPerCta tensor maps per CTA (128 bytes each), made at launch from
    /// the plan's templates with the addresses above.
    void* tensor_maps;
    const int32_t* device_sizes;   ///< sizes in device memory, or null: use host_sizes
    uint32_t* status_word;         ///< where clamps are recorded (may be null)
    int64_t max_rows;
    int32_t num_experts;
    int32_t n;
    int32_t k;
    RowLayout layout;
    int32_t host_sizes[MOEGEMM_MAX_EXPERTS];
};

/// Tensor maps each CTA makes in the workspace at launch: A, B and D.
constexpr int kTensorMapsPerCta = 3;
constexpr std::size_t kTensorMapBytes = 128;

/// Tile configuration of one kernel instance. Two consumer warpgroups share each tile: with
/// 128-row tiles each takes 64 rows and all BlockN columns; with 64-row tiles (decode: fewer
/// wasted rows per tile) both take the 64 rows and half of the columns each. With a staged
/// epilogue (16-bit outputs, 128-row tiles) each consumer writes its outputs into a
/// shared-memory buffer that TMA stores while the next tile's main loop runs.
template <int BlockM, int BlockN, bool StagedEpilogue>
struct TileConfig {
    static_assert(BlockM == 128 || BlockM == 64, "tiles of 128 or 64 rows");
    static_assert(BlockM == 128 || !StagedEpilogue, "the staged epilogue serves 128-row tiles");
    static constexpr int kBlockM = BlockM;
    static constexpr int kBlockN = BlockN;
    static constexpr int kBlockK = 64;   // 128 bytes of 16-bit values: one swizzle atom row
    static constexpr int kThreads = 384;  // producer warpgroup + 2 consumer warpgroups
    /// What one consumer warpgroup computes: 64 rows (one m64 wgmma) x kConsumerN columns.
    static constexpr int kConsumerN = BlockM == 128 ? BlockN : BlockN / 2;
    static constexpr std::size_t kTileABytes = std::size_t{kBlockM} * kBlockK * 2;
    static constexpr std::size_t kTileBBytes = std::size_t{kBlockN} * kBlockK * 2;
    static constexpr std::size_t kStageBytes = kTileABytes + kTileBBytes;
    static constexpr std::size_t kEpilogueBytes =
        StagedEpilogue ? std::size_t{kBlockM} * kBlockN * 2 : 0;
    /// Shared memory for stages and the epilogue buffer: the opt-in maximum (227 KB) less the
    /// alignment slack, the barriers and the schedule of MOEGEMM_MAX_EXPERTS experts.
    static constexpr std::size_t kStageBudget = 232448 - 1024 - 256 -
                                                kTensorMapsPerCta * kTensorMapBytes -
                                                16 * MOEGEMM_MAX_EXPERTS - 4;
    static constexpr int kStages = static_cast<int>(
        (kStageBudget - kEpilogueBytes) / kStageBytes < 8 ? (kStageBudget - kEpilogueBytes) / kStageBytes
                                                         : 8);

    /// Dynamic shared memory: 1024-byte alignment slack, the stages, the epilogue buffer, the
    /// tensor maps being made, 2 barriers per stage, then the schedule (row starts, rows, tile
    /// starts) for `experts`.
    static constexpr std::size_t smem_bytes(int experts) {
        return 1024 + kStages * kStageBytes + kEpilogueBytes +
               kTensorMapsPerCta * kTensorMapBytes + 2 * kStages * sizeof(uint64_t) +
               sizeof(int64_t) * experts + sizeof(int32_t) * (2 * experts + 1);
    }
};

}  // namespace moegemm::native

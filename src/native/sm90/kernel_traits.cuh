// One instance of the native sm_90 grouped GEMM as a set of compile-time constants, and its
// shared memory carved into the parts every warp role uses.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <type_traits>

#include "native/grouped_gemm_params.hpp"
#include "native/ptx.cuh"

namespace moegemm::native {

/// How a tile leaves the consumers: stored from registers, bounded to the expert's rows and to
/// N; or (16-bit outputs, 128-row tiles) through a swizzled shared-memory box and TMA stores
/// that overlap the next tile, for every 64-row half that the expert fills.
enum class EpilogueKind : int { Register = 0, TmaStore = 1 };

/// In: __nv_bfloat16, __half or __nv_fp8_e4m3. Out: __nv_bfloat16, __half or float.
/// ClusterN: CTAs per cluster along N (1 or 2); a pair computes two neighbouring column tiles
/// of the same rows and each loads half of the A tile for both (TMA multicast). NMajorB: B is
/// [E, K, N] (read in 64 x 64 boxes) instead of [E, N, K]. SwapAB (decode: 64 x 128 or
/// 64 x 256 tiles on single CTAs): the weights are wgmma's A operand and the tile's 16, 32 or
/// 64 tokens its N, so that the MMAs skip the padding rows a 64-row tile would multiply; the
/// producer and the stages are the same, the accumulators hold the output transposed.
template <typename In_, typename Out_, int BlockM, int BlockN, EpilogueKind Epilogue,
          int ClusterN, bool NMajorB, bool SwapAB>
struct KernelTraits {
    using In = In_;
    using Out = Out_;
    static constexpr bool kTmaStore = Epilogue == EpilogueKind::TmaStore;
    using Config = TileConfig<BlockM, BlockN, kTmaStore>;
    static constexpr int kBlockM = BlockM;
    static constexpr int kBlockN = BlockN;
    static constexpr int kClusterN = ClusterN;
    static constexpr bool kNMajorB = NMajorB;
    static constexpr bool kSwapAB = SwapAB;
    static constexpr int kConsumerN = Config::kConsumerN;
    static constexpr int kBlockK = Config::kBlockK;
    static constexpr bool kF16 = std::is_same_v<In, __half>;
    /// E4M3: a stage row holds 128 K-values instead of 64 (the same 128 bytes); each k-block's
    /// sums go into a temporary that is then added, scaled, into the fp32 accumulators
    /// (promotion: Hopper's fp8 MMAs accumulate with fewer bits than fp32).
    static constexpr bool kFp8 = std::is_same_v<In, __nv_fp8_e4m3>;
    static constexpr int kBlockKElems = kFp8 ? 128 : kBlockK;  ///< K-values per k-block
    /// fp8 k-blocks run as column slices of 128 (a 64-column consumer: its whole width), each
    /// promoted before the next: the temporary stays 64 registers whatever the tile width.
    static constexpr int kSliceN = kConsumerN < 128 ? kConsumerN : 128;
    static constexpr int kSlices = kFp8 ? kConsumerN / kSliceN : 1;
    /// Swap-AB: wgmma's M is 64 weight columns, so a consumer's columns are this many MMAs per
    /// k-step (mma_weight_blocks).
    static constexpr int kWeightBlocks = SwapAB ? kConsumerN / 64 : 1;
    /// Gated activations: pairs per group of the B tile (gate_up_group).
    static constexpr int kGateUpGroup = gate_up_group(SwapAB, BlockM, BlockN);
    static constexpr bool kParallelPrologue = has_parallel_prologue(kFp8, BlockM, BlockN);
    /// fp8 prefill instances stage BLOCK scales in a ring beside the stages (fp8_scales.cuh).
    static constexpr bool kScaleRingInstance = kFp8 && !SwapAB;
    static constexpr bool kUniformOffsets =
        has_uniform_consumer_offsets(kFp8, BlockN, ClusterN, kTmaStore, sizeof(Out));
    /// On 128-row tiles a consumer whose 64 rows hold none of the expert's can skip its MMAs
    /// (not in the instance without uniform offsets: there the test made ptxas spill).
    static constexpr bool kSkipsIdleHalves = BlockM == 128 && kUniformOffsets;
    /// Tensor maps each CTA makes: the three A boxes and B, and D for TMA stores.
    static constexpr int kMapCount = kTmaStore ? kTensorMapsPerCta : kMapB + 1;

    static_assert(Config::kThreads == 384, "the kernel's launch bounds assume 384 threads");
    static_assert(!kTmaStore || sizeof(Out) == 2, "TMA stores write 16-bit outputs");
    static_assert(ClusterN == 1 || ClusterN == 2, "clusters of 1 or 2 CTAs along N");
    static_assert(!kFp8 || (!NMajorB && (kConsumerN == 64 || kConsumerN == 128 ||
                                         kConsumerN == 256)),
                  "fp8: K-major B, 64, 128 or 256 columns per consumer");
    static_assert(!SwapAB || (!kTmaStore && BlockM == 64 && (BlockN == 128 || BlockN == 256) &&
                              ClusterN == 1),
                  "swap-AB: 64 x 128 or 64 x 256 tiles, single CTAs, register epilogue");
};

/// The schedule in shared memory. Row starts fit in 32 bits: the native backend refuses
/// tensors of more than 2^31 - 1 rows (TMA coordinates are 32-bit).
struct Schedule {
    int32_t* row_start;   ///< [E]  first row of each expert in A and D
    int32_t* rows;        ///< [E]  clamped rows
    int32_t* tile_start;  ///< [E+1] exclusive prefix of tiles; tile_start[E] = total
};

/// Rows of tile `c` that its expert has (1 to block_m): what the producer's A box covers and
/// what swap-AB multiplies.
__device__ __forceinline__ int32_t tile_rows(const Schedule& s, const TileCoord& c, int block_m) {
    return min(block_m, s.rows[c.expert] - c.m_tile * block_m);
}

/// The CTA's dynamic shared memory, from a 1024-byte aligned base (128-byte swizzled TMA boxes
/// want it): [scratch: tensor maps, then the TMA-store box buffers][stages: A tile, B tile]...
/// [full and empty barriers][tile hand-off][schedule][fp8: BLOCK scale ring].
template <typename K>
struct SharedStorage {
    using Config = typename K::Config;
    unsigned char* base;
    /// The raw base's distance from 1024-byte alignment. The BLOCK scale ring uses the bytes
    /// kept for aligning it, so it is used only where they are free (TileConfig).
    uint32_t misalignment;
    unsigned char* stage_base;
    uint64_t* full;   ///< per stage: its copies landed (and, with the ring, its scales)
    uint64_t* empty;  ///< per stage: its consumers (of every CTA of the cluster) released it
    TileHandOff* hand_off;
    Schedule schedule;

    __device__ __forceinline__ SharedStorage(unsigned char* raw, const GroupedGemmParams& p) {
        // Offset from `raw` rather than rounded as an integer: the compiler then still knows
        // every pointer below is shared memory (32-bit addresses, LDS instead of generic loads).
        misalignment = static_cast<uint32_t>(__cvta_generic_to_shared(raw)) & 1023;
        base = raw + ((1024 - misalignment) & 1023);
        stage_base = base + Config::kScratchBytes;
        full = reinterpret_cast<uint64_t*>(stage_base + p.stages * Config::kStageBytes);
        empty = full + Config::kMaxStages;
        hand_off = reinterpret_cast<TileHandOff*>(empty + Config::kMaxStages);
        schedule.row_start = reinterpret_cast<int32_t*>(hand_off + 1);
        schedule.rows = schedule.row_start + p.num_experts;
        schedule.tile_start = schedule.rows + p.num_experts;
    }

    __device__ __forceinline__ unsigned char* stage_a(int s) const {
        return stage_base + s * Config::kStageBytes;
    }
    __device__ __forceinline__ unsigned char* stage_b(int s) const {
        return stage_base + s * Config::kStageBytes + Config::kTileABytes;
    }
    /// Where the tensor maps are made before the first tile; later the TMA-store epilogue's
    /// box buffers.
    __device__ __forceinline__ unsigned char* scratch() const { return base; }

    /// Whether this launch stages fp8 BLOCK scales in shared memory. (Recomputed where used
    /// rather than held: held, ptxas spilled it in the fp8 128 x 256 instances.)
    __device__ __forceinline__ bool scale_ring(const GroupedGemmParams& p) const {
        return K::kScaleRingInstance && p.block_scale_ring != 0 && misalignment == 0;
    }
    /// The ring's slots (TileConfig::block_scale_ring_offset, passed by the host).
    __device__ __forceinline__ float* scale_slots(const GroupedGemmParams& p) const {
        return reinterpret_cast<float*>(base + p.block_scale_ring);
    }
};

/// A persistent CTA's walk over the stages of the ring: the stage, and the parity of the ring's
/// current pass.
struct RingPosition {
    int stage = 0;
    uint32_t phase = 0;

    __device__ __forceinline__ void advance(int stages) {
        if (++stage == stages) {
            stage = 0;
            phase ^= 1;
        }
    }
};

/// This CTA's tensor maps in the workspace (TensorMapIndex).
__device__ __forceinline__ CUtensorMap* cta_tensor_maps(const GroupedGemmParams& p) {
    return static_cast<CUtensorMap*>(p.tensor_maps) + blockIdx.x * kTensorMapsPerCta;
}

/// The tile scheduler of this launch (tile_scheduler.cuh). Made where it is asked rather than
/// held: the launch's cluster tiles are read from the schedule in shared memory each time (the
/// producer thread runs on 40 registers).
template <typename K>
__device__ __forceinline__ TileScheduler tile_scheduler(const GroupedGemmParams& p,
                                                        const Schedule& schedule) {
    return {static_cast<int32_t>(blockIdx.x) / K::kClusterN,
            static_cast<int32_t>(gridDim.x) / K::kClusterN,
            schedule.tile_start[p.num_experts] / K::kClusterN};
}

/// Output tile `cluster_tile` * ClusterN + `rank` as (expert, row tile, column tile).
template <typename K>
__device__ __forceinline__ TileCoord tile_of(const GroupedGemmParams& p, const Schedule& schedule,
                                             int32_t cluster_tile, uint32_t rank) {
    return map_tile(cluster_tile * K::kClusterN + static_cast<int32_t>(rank), schedule.tile_start,
                    p.num_experts,
                    static_cast<int32_t>(static_cast<uint32_t>(p.n + K::kBlockN - 1) / K::kBlockN),
                    K::kClusterN);
}

/// Where the cluster tile of work item `index` (> 0) passes through a two-slot hand-off ring
/// (TileHandOff's peer slots, ScaleWarpHandOff): the slot, used by indices 1, 3, ... and
/// 2, 4, ... in turn, and the parity of that slot's `full` phase (`empty` waits on the other
/// parity).
struct HandOffSlot {
    int slot;
    uint32_t parity;
};
__device__ __forceinline__ HandOffSlot hand_off_slot(int32_t index) {
    const int32_t handed = index - 1;
    return {handed % 2, static_cast<uint32_t>(handed / 2) & 1};
}

}  // namespace moegemm::native

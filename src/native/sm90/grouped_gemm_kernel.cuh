// The native Hopper (sm_90a) grouped GEMM: one persistent, warp-specialized kernel for the
// VARIABLE, MASKED and FIXED layouts, with the expert sizes read on the GPU, composed of a
// prologue, a tile scheduler, a producer, the consumers' main loops and an epilogue (the map:
// docs/design.md). This file is the orchestration and the host side of one instance.
//
//   warpgroup 0   producer.cuh: one thread streams A and B k-blocks into the stage ring with
//                 TMA; with fp8 BLOCK scales, warps 1.. copy each k-block's scales beside its
//                 stage (fp8_scales.cuh). The rest of the warpgroup gives its registers away.
//   warpgroups 1-2 consumers: mainloop.cuh into fp32 accumulators, then epilogue.cuh.
//
// A tile's A rows past its expert's last row belong to the next expert (or are zero-filled by
// TMA past the tensor): they only feed accumulator rows that are never stored.
#pragma once

#include <cuda.h>

#include "native/grouped_gemm_launch.hpp"
#include "native/sm90/epilogue.cuh"
#include "native/sm90/fp8_scales.cuh"
#include "native/sm90/kernel_traits.cuh"
#include "native/sm90/mainloop.cuh"
#include "native/sm90/producer.cuh"
#include "native/sm90/prologue.cuh"
#include "native/sm90/tile_hand_off.cuh"

namespace moegemm::native {

/// The consumers' loop over the CTA's work items: each tile's main loop, then its epilogue.
template <typename K>
__device__ __forceinline__ void run_consumer(const GroupedGemmParams& p,
                                             const SharedStorage<K>& smem, uint32_t rank,
                                             int32_t k_blocks, int warpgroup) {
    const ConsumerThread<K> thread(warpgroup);
    if (K::kTmaStore && thread.t == 0) ptx::tensor_map_acquire(&cta_tensor_maps(p)[kMapD]);
    float acc[K::kConsumerN / 2];
    [[maybe_unused]] float tmp[K::kFp8 ? K::kSliceN / 2 : 1];  // fp8: one k-block's slice
    RingPosition ring;
    for (int32_t index = 0;; ++index) {
        const int32_t cluster_tile = consumer_cluster_tile<K>(p, smem, ring, index);
        if (cluster_tile < 0) break;
        const TileCoord c = tile_of<K>(p, smem.schedule, cluster_tile, rank);
        // (Made per tile rather than held through the epilogue: registers.)
        const MainloopArgs<K> args(smem, thread, rank, p.stages, k_blocks);
        run_mainloop<K>(acc, tmp, p, args, ring, c);
        run_epilogue<K>(acc, p, smem, thread, c);
    }
    // Stores still in flight must finish before the CTA's shared memory goes away.
    if (K::kTmaStore && thread.t == 0) ptx::bulk_wait<0>();
}

/// templates: the plan's tensor maps, whose global addresses each CTA replaces (TensorMapIndex).
template <typename K>
__global__ void __launch_bounds__(384, 1)
    sm90_grouped_gemm_kernel(const __grid_constant__ TensorMapTemplates templates,
                             const __grid_constant__ GroupedGemmParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const SharedStorage<K> smem(smem_raw, p);
    // Unsigned (N > 0): one shift from the parameter, cheap enough for ptxas to recompute
    // where it would otherwise keep it in a register (or spill it) through the main loop.
    const int32_t tiles_n =
        static_cast<int32_t>(static_cast<uint32_t>(p.n + K::kBlockN - 1) / K::kBlockN);
    const int32_t k_blocks = (p.k + K::kBlockKElems - 1) / K::kBlockKElems;
    const int warpgroup = threadIdx.x / 128;
    const uint32_t rank = K::kClusterN > 1 ? ptx::cluster_rank() : 0;

    run_prologue<K>(templates, p, smem, tiles_n);

    if (warpgroup == 0) {
        // Producer. One thread issues every copy; the rest of the warpgroup only gives its
        // registers to the consumers (and, with the BLOCK scale ring, stages the scales).
        ptx::release_registers<40>();
        if (threadIdx.x == 0) {
            CUtensorMap* const maps = cta_tensor_maps(p);
            for (int m = kMapAFull; m <= kMapB; ++m) {
                ptx::tensor_map_acquire(&maps[m]);
                ptx::prefetch_tensor_map(&maps[m]);
            }
        }
        cluster_wait_for_peer<K>();
        if constexpr (K::kScaleRingInstance) {
            const int part = static_cast<int>(threadIdx.x / 32) - 1;
            if (part >= 0 && part < block_scale_warps(K::kBlockM) && smem.scale_ring(p))
                stage_block_scales<K>(p, smem, rank, k_blocks, smem.scale_slots(p), part);
        }
        if constexpr (K::kClusterN == 1 && !K::kFp8) {
            // (By the plan's kind, not the pointer: its A maps read one row per box.)
            if (p.gather_rows > 0) {
                if (threadIdx.x < 32) run_gather_producer<K>(p, smem, k_blocks);
            } else if (threadIdx.x == 0) {
                run_producer<K>(p, smem, rank, k_blocks);
            }
        } else {
            if (threadIdx.x == 0) run_producer<K>(p, smem, rank, k_blocks);
        }
    } else {
        ptx::acquire_registers<232>();
        cluster_wait_for_peer<K>();
        run_consumer<K>(p, smem, rank, k_blocks, warpgroup);
    }
    // No CTA may leave while its peer can still arrive on its barriers.
    if constexpr (K::kClusterN > 1) ptx::cluster_sync();
#endif
}

/// Host side of one instance: raises its shared-memory limit (once per plan, at creation).
template <typename K>
cudaError_t configure_grouped_gemm() {
    return cudaFuncSetAttribute(sm90_grouped_gemm_kernel<K>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(K::Config::kSmemLimit));
}

/// Pipeline stages of a launch over `experts` experts.
template <typename K>
int grouped_gemm_stages(int experts) {
    return K::Config::stages(experts);
}

/// The stages of a launch over `experts` experts with the BLOCK scale ring, or 0 where it has
/// no room (TileConfig::block_scale_ring_stages).
template <typename K>
int grouped_gemm_block_scale_ring_stages(int experts) {
    return K::Config::block_scale_ring_stages(experts);
}

/// Where a launch over `experts` experts with `stages` stages puts the BLOCK scale ring.
template <typename K>
int grouped_gemm_block_scale_ring(int experts, int stages) {
    return static_cast<int>(K::Config::block_scale_ring_offset(experts, stages));
}

/// Enqueues one launch; returns the launch error, if any.
template <typename K>
cudaError_t launch_grouped_gemm(const TensorMapTemplates& templates,
                                const GroupedGemmParams& params, int grid, cudaStream_t stream) {
    using Config = typename K::Config;
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
        // The prologue may overlap the previous kernel's end (its wait_for_prior_grids).
        attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attributes[count++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (K::kClusterN > 1) {
        attributes[count].id = cudaLaunchAttributeClusterDimension;
        attributes[count].val.clusterDim.x = K::kClusterN;
        attributes[count].val.clusterDim.y = 1;
        attributes[count++].val.clusterDim.z = 1;
    }
    config.attrs = attributes;
    config.numAttrs = count;
    return cudaLaunchKernelEx(&config, sm90_grouped_gemm_kernel<K>, templates, params);
}

/// The entry of instance K: what the instance files return.
template <typename K>
GroupedGemmEntry grouped_gemm_entry() {
    return {configure_grouped_gemm<K>, grouped_gemm_stages<K>,
            grouped_gemm_block_scale_ring_stages<K>, grouped_gemm_block_scale_ring<K>,
            launch_grouped_gemm<K>};
}

}  // namespace moegemm::native

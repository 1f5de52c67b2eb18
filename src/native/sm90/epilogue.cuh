// The consumers' epilogue: a finished tile's fp32 sums, scaled (fp8 output scales) or put
// through the fused operations (epilogue_ops.cuh), converted and stored. Three stores: from registers, bounded to the expert's rows and to N; through
// shared memory and TMA for every 64-row half the expert fills (TMA-store instances), so the
// tensor cores move on while the store drains; and swap-AB's, whose sums hold the tile
// transposed.
//
// A thread's fragment of m64nN holds rows warp * 16 + lane / 4 + 8h and columns
// 8j + 2 (lane % 4) + q for j < N / 8, h and q in {0, 1}: acc[4j + 2h + q].
#pragma once

#include "native/sm90/epilogue_ops.cuh"
#include "native/sm90/fp8_scales.cuh"
#include "native/sm90/kernel_traits.cuh"
#include "native/sm90/mainloop.cuh"

namespace moegemm::native {

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

/// Columns of D: N, or N / 2 after a gated activation, which only 16-bit inputs take (fp8
/// instances read N alone: one parameter less to keep through their main loops, where ptxas
/// otherwise serializes the 64 x 256 swap-AB instances' MMAs).
template <typename K>
__device__ __forceinline__ int32_t output_columns(const GroupedGemmParams& p) {
    if constexpr (K::kFp8) return p.n;
    else return p.d_cols;
}

/// Swap-AB: the accumulators hold the tile transposed, acc[2 Halves j + 2h + q] being output
/// column `col` + 8h (col: this thread's, from lane / 4; h < Halves: 2, or 1 for a gated
/// activation's folded fragment) of token 8j + 2 (lane % 4) + q. Lanes l and l ^ 4 hold
/// neighbouring columns of the same tokens, so each pair swaps one value and stores two column
/// pairs: the even column's thread that of its first token, the odd one's that of its second.
/// Tokens from `first_row` on (of A and D), `tile_rows` of them valid (stale ones were
/// multiplied too); columns past D's are not stored (a multiple of 8, so a pair is both in or
/// both out).
template <typename K, int Halves, int Count>
__device__ __forceinline__ void store_swapped(const float (&acc)[Count], const GroupedGemmParams& p,
                                              int64_t first_row, int32_t tile_rows, int32_t col,
                                              int lane) {
    using Out = typename K::Out;
    const int32_t d_cols = output_columns<K>(p);
    const bool even = (lane / 4) % 2 == 0;
    const int32_t pair_col = even ? col : col - 1;
    Out* d = static_cast<Out*>(p.d) + first_row * d_cols + pair_col;
#pragma unroll
    for (int j = 0; j < Count / (2 * Halves); ++j) {
#pragma unroll
        for (int h = 0; h < Halves; ++h) {
            const float first = acc[2 * Halves * j + 2 * h];
            const float second = acc[2 * Halves * j + 2 * h + 1];
            const float other = __shfl_xor_sync(0xffffffffu, even ? second : first, 4);
            const int32_t token = 8 * j + 2 * (lane % 4) + (even ? 0 : 1);
            if (token < tile_rows && pair_col + 8 * h < d_cols) {
                store_pair(d + token * static_cast<int64_t>(d_cols) + 8 * h,
                           even ? first : other, even ? other : second);
            }
        }
    }
}

/// A consumer's 64 rows, all the expert's, through shared memory and TMA: one 64 x 64 box at a
/// time through this consumer's two box buffers; box j is written into buffer j % 2 once the
/// store that last used that buffer has read it. With an even number of boxes per tile the
/// latest store group uses the other buffer and may still be reading; with one box per tile (a
/// gated 128 x 128 tile's 64 output columns) every tile writes buffer 0, so the previous
/// tile's store must have read it. `row`: the half's first row in D.
template <typename K, int Count>
__device__ __forceinline__ void store_half_with_tma(const float (&acc)[Count],
                                                    const SharedStorage<K>& smem,
                                                    const ConsumerThread<K>& thread,
                                                    const CUtensorMap* map_d, int32_t row,
                                                    int32_t first_col) {
    using Out = typename K::Out;
    using Config = typename K::Config;
    unsigned char* const buffers =
        smem.scratch() + thread.consumer * 2 * Config::kEpilogueBoxBytes;
    constexpr int kBoxes = Count / 32;
    static_assert(kBoxes == 1 || kBoxes % 2 == 0, "buffers alternate between tiles only for 1 box");
#pragma unroll
    for (int box = 0; box < kBoxes; ++box) {
        unsigned char* const buffer = buffers + (box % 2) * Config::kEpilogueBoxBytes;
        if (thread.t == 0) {
            if constexpr (kBoxes == 1) ptx::bulk_wait_read<0>();
            else ptx::bulk_wait_read<1>();
        }
        ptx::named_barrier(1 + thread.consumer, 128);
#pragma unroll
        for (int unit = 0; unit < 8; ++unit) {
            const int j = box * 8 + unit;  // 8-column group of the fragment
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                // 128-byte swizzle of a [64 rows x 64 columns] box: the 16-byte unit u of row
                // r lands at unit u ^ (r % 8).
                const int r = thread.warp * 16 + thread.lane / 4 + 8 * h;
                unsigned char* dst =
                    buffer + r * 128 + ((unit ^ (r % 8)) * 16) + (thread.lane % 4) * 4;
                store_pair(reinterpret_cast<Out*>(dst), acc[4 * j + 2 * h],
                           acc[4 * j + 2 * h + 1]);
            }
        }
        ptx::fence_async_shared();
        ptx::named_barrier(1 + thread.consumer, 128);
        if (thread.t == 0) {
            ptx::tma_store_2d(map_d, buffer, first_col + box * 64, row);
            ptx::bulk_commit();
        }
    }
}

/// A consumer's rows from registers, bounded to the expert's `expert_rows` and to D's columns.
/// `half_row`: the consumer's first row in the expert; `first_col`: its first column of D.
template <typename K, int Count>
__device__ __forceinline__ void store_registers(const float (&acc)[Count],
                                                const GroupedGemmParams& p,
                                                const ConsumerThread<K>& thread,
                                                int64_t expert_first_row, int32_t expert_rows,
                                                int32_t half_row, int32_t first_col) {
    using Out = typename K::Out;
    const int32_t d_cols = output_columns<K>(p);
    const int32_t row0 = half_row + thread.warp * 16 + thread.lane / 4;
    const int32_t col0 = first_col + 2 * (thread.lane % 4);
    Out* d = static_cast<Out*>(p.d) + (expert_first_row + row0) * d_cols + col0;
#pragma unroll
    for (int j = 0; j < Count / 4; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            if (row0 + 8 * h < expert_rows && col0 + 8 * j < d_cols)
                store_pair(d + 8 * h * static_cast<int64_t>(d_cols) + 8 * j,
                           acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
        }
    }
}

/// A consumer's fragment into D: through TMA where its 64 rows are all the expert's (TMA-store
/// instances), else from registers. `tile_col`: the tile's first column of D; `first_col`: the
/// consumer's.
template <typename K, int Count>
__device__ __forceinline__ void store_fragment(const float (&acc)[Count], const GroupedGemmParams& p,
                                               const SharedStorage<K>& smem,
                                               const ConsumerThread<K>& thread, const TileCoord& c,
                                               int32_t half_row, int32_t tile_col,
                                               int32_t first_col) {
    const Schedule& schedule = smem.schedule;
    const int32_t expert_rows = schedule.rows[c.expert];
    if constexpr (K::kTmaStore) {
        // A partial half (the expert's last rows) is stored from registers, bounded: a
        // whole-box store would write into the next expert's rows.
        if (half_row + 64 <= expert_rows) {
            store_half_with_tma<K>(acc, smem, thread, &cta_tensor_maps(p)[kMapD],
                                   schedule.row_start[c.expert] + half_row, tile_col);
            return;
        }
    }
    store_registers<K>(acc, p, thread, schedule.row_start[c.expert], expert_rows, half_row,
                       first_col);
}

/// Swap-AB's epilogue of one tile for this consumer: the fused operations (16-bit inputs) or the
/// fp8 output scales, then the stores, one 64-column weight block at a time.
template <typename K, int Count>
__device__ __forceinline__ void run_swapped_epilogue(float (&acc)[Count], const GroupedGemmParams& p,
                                                     const Schedule& schedule,
                                                     const ConsumerThread<K>& thread,
                                                     const TileCoord& c, int32_t expert_rows,
                                                     int32_t first_col) {
    // The thread's first product column in weight block w.
    auto swapped_col = [&](int w) { return first_col + 64 * w + thread.warp * 16 + thread.lane / 4; };
    if constexpr (K::kFp8) {
#pragma unroll
        for (int w = 0; w < K::kWeightBlocks; ++w)
            apply_output_scales_swapped<64>(weight_block(acc, w), p, schedule, c,
                                            c.m_tile * K::kBlockM + 2 * (thread.lane % 4),
                                            swapped_col(w));
    } else if (p.fused_epilogue) {
        static_assert(K::kGateUpGroup == 8, "swap-AB folds weight rows 8 apart");
        const int32_t first_token = c.m_tile * K::kBlockM;
#pragma unroll
        for (int w = 0; w < K::kWeightBlocks; ++w) {
            auto& block = weight_block(acc, w);
            scale_and_bias<true, 8>(block, p, c.expert, schedule.row_start[c.expert],
                                    first_token + 2 * (thread.lane % 4), expert_rows,
                                    swapped_col(w));
            if (p.gated) {
                float folded[sizeof(block) / sizeof(float) / 2];
                fold_gate_up<true>(block, folded, p);
                // Gate and up of pair i share the weight block's rows 16 i_hi + i_lo and + 8.
                store_swapped<K, 1>(folded, p, schedule.row_start[c.expert] + first_token,
                                      expert_rows - first_token,
                                      first_col / 2 + 32 * w + thread.warp * 8 + thread.lane / 4,
                                      thread.lane);
            } else {
                activate(block, p);
            }
        }
        if (p.gated) return;
    }
#pragma unroll
    for (int w = 0; w < K::kWeightBlocks; ++w)
        store_swapped<K, 2>(weight_block(acc, w), p,
                              schedule.row_start[c.expert] + c.m_tile * K::kBlockM,
                              expert_rows - c.m_tile * K::kBlockM, swapped_col(w), thread.lane);
}

/// The epilogue of one tile for this consumer: output scales (fp8 modes other than BLOCK) or
/// the fused operations (16-bit inputs), then the store that fits the instance and the tile.
template <typename K, int Count>
__device__ __forceinline__ void run_epilogue(float (&acc)[Count], const GroupedGemmParams& p,
                                             const SharedStorage<K>& smem,
                                             const ConsumerThread<K>& thread, const TileCoord& c) {
    const Schedule& schedule = smem.schedule;
    const int32_t expert_rows = schedule.rows[c.expert];
    const int32_t half_row = c.m_tile * K::kBlockM + thread.row_offset;
    const int32_t tile_col = c.n_tile * K::kBlockN;
    const int32_t first_col = tile_col + thread.col_offset;
    if constexpr (K::kSwapAB) {
        run_swapped_epilogue<K>(acc, p, schedule, thread, c, expert_rows, first_col);
    } else {
        const int32_t row0 = half_row + thread.warp * 16 + thread.lane / 4;
        const int32_t col0 = first_col + 2 * (thread.lane % 4);
        if constexpr (K::kFp8) {
            apply_output_scales<K::kConsumerN>(acc, p, schedule, c, row0, col0);
        } else if (p.fused_epilogue) {
            scale_and_bias<false, K::kGateUpGroup>(acc, p, c.expert, schedule.row_start[c.expert],
                                                   row0, schedule.rows[c.expert], col0);
            if (p.gated) {
                static_assert(Count == K::kGateUpGroup, "a consumer's columns are one group");
                float folded[Count / 2];
                fold_gate_up<false>(acc, folded, p);
                store_fragment<K>(folded, p, smem, thread, c, half_row, tile_col / 2,
                                  first_col / 2);
                return;
            }
            activate(acc, p);
        }
        store_fragment<K>(acc, p, smem, thread, c, half_row, tile_col, first_col);
    }
}

}  // namespace moegemm::native

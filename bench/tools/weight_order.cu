// Does the order in which CTAs walk K change how fast the decode weights stream? The decode
// kernels read each 128-row weight tile one k-block (128 bytes of each of its rows) per stage,
// every CTA from k-block 0 up, and the CTAs run in near lockstep: at any moment all of them read
// the same 128-byte column of rows whose stride (2K bytes: 28 KB for mixtral-fc2, 14 KB for
// dsv3ep8-fc1) is a multiple of 4 KB, so their addresses agree in the low 12 bits. If DRAM
// channels or banks are picked from those bits, the stream crowds onto a few of them. This
// tool streams each decode workload's weights ([rows, K] bf16, 128 x 64 TMA boxes, 128-byte
// swizzle, no L2 promotion, 8 stages of 16 KB per CTA, one thread per CTA, 132 CTAs: the
// box stream of start_delay.cu) with the k-blocks of each tile walked from different starts:
//   0  from 0 (the kernels today)
//   1  CTA c starts at c * KB / 132 (starts spread evenly over K)
//   2  CTA c starts at (c % 8) * KB / 8
//   3  CTA c starts at c % KB (neighbours one k-block apart)
//   4  tile t starts at (t * 37) % KB (varies from tile to tile)
// each with and without an L2 evict-first policy on the copies (with --orders; by default only
// order 0); then the lockstep walk with a token box of 16, 32 or 64 rows beside each stage's
// weights (what the decode kernels' token re-reads cost the stream); bursts of 2, 4 and 8
// consecutive k-blocks; boxes of 256
// and 512 bytes per row (no swizzle, 16 KB each); boxes of 8-row atoms holding 1-16
// consecutive k-blocks in wgmma's swizzled layout (a 4-D map: kGroupChunks); and 1-D bulk
// copies of 128 B-16 KB of each row. Printed: median event time of one launch (queued,
// event_timing.cuh) and GB/s.
//
//   nvcc -O2 -std=c++17 -arch=sm_90a -Ibench/tools bench/tools/weight_order.cu -o weight_order
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "bf16_box_map.cuh"
#include "decode_weights.cuh"
#include "event_timing.cuh"
#include "stream_ring.cuh"

namespace {

constexpr int kCtas = 132;
constexpr int kStages = 8;
constexpr uint32_t kStageBytes = 16384;  // 128 rows x 128 bytes

// How the token boxes are read: 2-D with 256-byte L2 fills (the kernels' A maps), without
// them, or two k-blocks per box (kTokenPairs).
enum class TokenMap { Fills256, Exact, Pairs };

__device__ __forceinline__ int first_k_block(int order, int tile, int k_blocks) {
    const int cta = static_cast<int>(blockIdx.x);
    switch (order) {
        case 1: return cta * k_blocks / kCtas;
        case 2: return (cta % 8) * k_blocks / 8;
        case 3: return cta % k_blocks;
        case 4: return (tile * 37) % k_blocks;
        default: return 0;
    }
}

// kGroupChunks > 0: the lockstep walk (order 0) with boxes that hold kGroupChunks consecutive
// k-blocks of 128 / kGroupChunks rows, laid out as wgmma's 128-byte-swizzled K-major operand
// still reads them (8-row atoms of 1 KB: k-block c of row group g at (g * kGroupChunks + c)
// KB): `map` is then the 4-D map (64 elements, 8 rows, k-blocks, row groups) whose k-block
// stride (128 B) is below its row stride. TMA walks a box in dimension order, so DRAM sees 8
// rows of 128 * kGroupChunks contiguous bytes each before the next 8 rows.
// kTokenRows > 0: each stage also carries a box of kTokenRows rows x 128 bytes of the tile's
// expert's tokens (`tokens`: 8 experts of 64 rows, L2-resident after the first reads), as the
// decode kernels' stages do: what the token re-reads cost the weight stream. kTokenPairs: the
// even stages carry the tokens of two k-blocks in one box (`tokens` then a 3-D map of 2
// k-blocks per box), the odd ones none: half the token copies, the same bytes.
template <bool kEvictFirst, int kBurst = 1, int kGroupChunks = 0, int kTokenRows = 0,
          bool kTokenPairs = false>
__global__ void __launch_bounds__(32) ordered_box_stream(const __grid_constant__ CUtensorMap map,
                                                         int tiles, int k_blocks, int order,
                                                         unsigned long long* span, int box_k,
                                                         int box_rows,
                                                         const __grid_constant__ CUtensorMap tokens) {
    extern __shared__ __align__(1024) unsigned char ring[];
    constexpr uint32_t kTokenBytes = kTokenRows * 128 * (kTokenPairs ? 2 : 1);
    __shared__ __align__(8) uint64_t full[kStages];
    if (threadIdx.x != 0) return;
    const unsigned long long entry = global_timer();
    init_barriers(full, kStages);
    uint64_t policy = 0;
    if constexpr (kEvictFirst)
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    const int my_tiles = (tiles - static_cast<int>(blockIdx.x) + kCtas - 1) / kCtas;
    const long long total = static_cast<long long>(my_tiles) * k_blocks;
    auto issue = [&](long long chunk) {
        const int s = static_cast<int>(chunk % kStages);
        const int tile = static_cast<int>(blockIdx.x) + static_cast<int>(chunk / k_blocks) * kCtas;
        const int kb = (static_cast<int>(chunk % k_blocks) + first_k_block(order, tile, k_blocks)) %
                       k_blocks;
        const uint32_t bar = shared_address(&full[s]);
        // (Every workload's k-blocks are even in number: a pair never crosses a tile.)
        const bool token_copy = kTokenRows > 0 && (!kTokenPairs || chunk % 2 == 0);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                     "r"(kStageBytes + (token_copy ? kTokenBytes : 0))
                     : "memory");
        if (kTokenPairs && token_copy) {
            const int expert = tile * 8 / tiles;
            asm volatile(
                "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes "
                "[%0], [%1, {%2, %3, %4}], [%5];" ::"r"(
                    shared_address(ring + kStages * kStageBytes + s * kTokenBytes)),
                "l"(&tokens), "r"(0), "r"(expert * 64), "r"(kb), "r"(bar)
                : "memory");
        } else if (token_copy) {
            const int expert = tile * 8 / tiles;
            asm volatile(
                "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
                "[%0], [%1, {%2, %3}], [%4];" ::"r"(
                    shared_address(ring + kStages * kStageBytes + s * kTokenBytes)),
                "l"(&tokens), "r"(kb * 64), "r"(expert * 64), "r"(bar)
                : "memory");
        }
        if constexpr (kGroupChunks > 0) {
            const int in_tile = static_cast<int>(chunk % k_blocks);
            const int box_k_block = (in_tile / kGroupChunks) * kGroupChunks;
            const int box_group = tile * 16 + (in_tile % kGroupChunks) * (16 / kGroupChunks);
            asm volatile(
                "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes "
                "[%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(
                    shared_address(ring + s * kStageBytes)),
                "l"(&map), "r"(0), "r"(0), "r"(box_k_block), "r"(box_group), "r"(bar)
                : "memory");
        } else if constexpr (kEvictFirst) {
            asm volatile(
                "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                ".L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(
                    shared_address(ring + s * kStageBytes)),
                "l"(&map), "r"(kb * box_k), "r"(tile * box_rows), "r"(bar), "l"(policy)
                : "memory");
        } else {
            asm volatile(
                "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
                "[%0], [%1, {%2, %3}], [%4];" ::"r"(shared_address(ring + s * kStageBytes)),
                "l"(&map), "r"(kb * box_k), "r"(tile * box_rows), "r"(bar)
                : "memory");
        }
    };
    long long issued = 0;
    for (long long c = 0; c < total; ++c) {
        while (issued < total && issued - c <= kStages - kBurst)
            for (int b = 0; b < kBurst && issued < total; ++b) issue(issued++);
        wait_parity(shared_address(&full[c % kStages]), static_cast<uint32_t>(c / kStages) & 1);
    }
    span[2 * blockIdx.x] = entry;
    span[2 * blockIdx.x + 1] = global_timer();
}

// The same bytes read as 1-D bulk copies of `chunk` contiguous bytes from each of 16384 / chunk
// rows per stage (tiles of that many rows, walked along K): how much of the box stream's gap to
// contiguous copies is the 128-byte pieces. Thread t copies rows t, t + 128, ... of the stage.
__global__ void __launch_bounds__(128) row_chunk_stream(const unsigned char* src, int rows,
                                                       int row_bytes, int chunk,
                                                       unsigned long long* span) {
    extern __shared__ __align__(1024) unsigned char ring[];
    __shared__ __align__(8) uint64_t full[kStages];
    const unsigned long long entry = global_timer();
    const int lane = static_cast<int>(threadIdx.x);
    if (lane == 0) init_barriers(full, kStages);
    __syncthreads();
    const int tile_rows = static_cast<int>(kStageBytes) / chunk;
    const int tiles = rows / tile_rows;
    const int chunks = row_bytes / chunk;
    const int my_tiles = (tiles - static_cast<int>(blockIdx.x) + kCtas - 1) / kCtas;
    const long long total = static_cast<long long>(my_tiles) * chunks;
    auto issue = [&](long long c) {
        const int s = static_cast<int>(c % kStages);
        const int tile = static_cast<int>(blockIdx.x) + static_cast<int>(c / chunks) * kCtas;
        const size_t column = static_cast<size_t>(c % chunks) * chunk;
        const uint32_t bar = shared_address(&full[s]);
        if (lane == 0)
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                         "r"(kStageBytes)
                         : "memory");
        __syncthreads();
        for (int r = lane; r < tile_rows; r += static_cast<int>(blockDim.x)) {
            const unsigned char* from =
                src + static_cast<size_t>(tile * tile_rows + r) * row_bytes + column;
            asm volatile(
                "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                "%2, [%3];" ::"r"(shared_address(ring + s * kStageBytes + r * chunk)),
                "l"(from), "r"(chunk), "r"(bar)
                : "memory");
        }
    };
    long long issued = 0;
    for (long long c = 0; c < total; ++c) {
        while (issued < total && issued - c < kStages) issue(issued++);
        wait_parity(shared_address(&full[c % kStages]), static_cast<uint32_t>(c / kStages) & 1);
        __syncthreads();
    }
    if (lane == 0) {
        span[2 * blockIdx.x] = entry;
        span[2 * blockIdx.x + 1] = global_timer();
    }
}

void measure(EncodeTiled encode, const char* name, int rows, int k, unsigned long long* span,
             bool full_orders) {
    const size_t bytes = static_cast<size_t>(rows) * k * 2;
    void* src = filled_device_buffer(name, bytes);
    if (!src) return;
    CUtensorMap map{};
    encode_bf16_matrix(encode, &map, src, rows, k, 64, 128, CU_TENSOR_MAP_SWIZZLE_128B,
                       CU_TENSOR_MAP_L2_PROMOTION_NONE);
    const int tiles = rows / 128;
    const int k_blocks = k / 64;
    std::printf("%s: %d x %d (%.1f MB), %d tiles of %d k-blocks\n", name, rows, k, 1e-6 * bytes,
                tiles, k_blocks);
    // The tokens of 8 experts, 64 rows each (kTokenRows), read through a map as the kernels'
    // A maps are encoded (256-byte L2 fills).
    void* token_rows = filled_device_buffer(name, static_cast<size_t>(8 * 64) * k * 2);
    if (!token_rows) {
        cudaFree(src);
        return;
    }
    CUtensorMap tokens{};
    // Event time of one launch of `kernel` (an ordered_box_stream instance) over `m`: `t` tiles
    // of `kbs` boxes of box_k x box_rows each, walked in `order`.
    auto stream_us = [&](auto kernel, const CUtensorMap& m, int t, int kbs, int order, int box_k,
                         int box_rows, int token_box_rows = 0,
                         TokenMap token_map = TokenMap::Fills256) {
        if (token_map == TokenMap::Pairs) {
            const cuuint64_t dims3[3] = {64, 8 * 64, static_cast<cuuint64_t>(k / 64)};
            const cuuint64_t strides3[2] = {static_cast<cuuint64_t>(k) * 2, 128};
            const cuuint32_t box3[3] = {64, static_cast<cuuint32_t>(token_box_rows), 2};
            const cuuint32_t element_strides3[3] = {1, 1, 1};
            encode(&tokens, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, token_rows, dims3, strides3,
                   box3, element_strides3, CU_TENSOR_MAP_INTERLEAVE_NONE,
                   CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        } else if (token_box_rows > 0) {
            encode_bf16_matrix(encode, &tokens, token_rows, 8 * 64, k, 64, token_box_rows,
                               CU_TENSOR_MAP_SWIZZLE_128B,
                               token_map == TokenMap::Exact ? CU_TENSOR_MAP_L2_PROMOTION_NONE
                                                            : CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
        }
        const int shared =
            kStages * (kStageBytes + 128 * token_box_rows * (token_map == TokenMap::Pairs ? 2 : 1));
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
        return time_queued_launch(
                   [&] {
                       kernel<<<kCtas, 32, shared>>>(m, t, kbs, order, span, box_k, box_rows,
                                                     tokens);
                   },
                   span, kCtas)
            .event_us;
    };
    for (int order = 0; order <= (full_orders ? 4 : 0); ++order) {
        const double us[2] = {
            stream_us(ordered_box_stream<false>, map, tiles, k_blocks, order, 64, 128),
            stream_us(ordered_box_stream<true>, map, tiles, k_blocks, order, 64, 128)};
        std::printf("  order %d: %7.2f us (%4.0f GB/s); evict-first %7.2f us (%4.0f GB/s) %s\n",
                    order, us[0], 1e-3 * bytes / us[0], us[1], 1e-3 * bytes / us[1],
                    cudaGetErrorString(cudaGetLastError()));
    }
    std::printf("  evict-first weights with a token box per stage (rows):");
    std::printf(" 16: %.2f us;", stream_us(ordered_box_stream<true, 1, 0, 16>, map, tiles, k_blocks, 0, 64, 128, 16));
    std::printf(" 32: %.2f us;", stream_us(ordered_box_stream<true, 1, 0, 32>, map, tiles, k_blocks, 0, 64, 128, 32));
    std::printf(" 64: %.2f us;", stream_us(ordered_box_stream<true, 1, 0, 64>, map, tiles, k_blocks, 0, 64, 128, 64));
    std::printf(" 16 without L2 fills: %.2f us;", stream_us(ordered_box_stream<true, 1, 0, 16>, map, tiles, k_blocks, 0, 64, 128, 16, TokenMap::Exact));
    std::printf(" 16 for two k-blocks every other stage: %.2f us;", stream_us(ordered_box_stream<true, 1, 0, 16, true>, map, tiles, k_blocks, 0, 64, 128, 16, TokenMap::Pairs));
    std::printf(" 32 for two every other: %.2f us;", stream_us(ordered_box_stream<true, 1, 0, 32, true>, map, tiles, k_blocks, 0, 64, 128, 32, TokenMap::Pairs));
    std::printf(" and bursts of 2 with 16: %.2f us\n", stream_us(ordered_box_stream<true, 2, 0, 16>, map, tiles, k_blocks, 0, 64, 128, 16));
    std::printf("  bursts of consecutive k-blocks (no promotion):");
    auto burst = [&](auto kernel, int b) {
        std::printf(" %d: %.2f us;", b, stream_us(kernel, map, tiles, k_blocks, 0, 64, 128));
    };
    burst(ordered_box_stream<false, 2>, 2);
    burst(ordered_box_stream<false, 4>, 4);
    burst(ordered_box_stream<false, 8>, 8);
    // Boxes with more bytes of each row: without swizzle a box row may hold 256 elements (512
    // bytes). 16 KB per copy throughout; the decode kernels' 128-byte swizzled boxes first.
    std::printf("\n  boxes (row bytes x rows, swizzle):");
    struct Shape {
        cuuint32_t k, rows;
        CUtensorMapSwizzle swizzle;
    };
    for (const Shape shape : {Shape{64, 128, CU_TENSOR_MAP_SWIZZLE_128B},
                              Shape{64, 128, CU_TENSOR_MAP_SWIZZLE_NONE},
                              Shape{128, 64, CU_TENSOR_MAP_SWIZZLE_NONE},
                              Shape{256, 32, CU_TENSOR_MAP_SWIZZLE_NONE}}) {
        if (k % static_cast<int>(shape.k) != 0 || rows % static_cast<int>(shape.rows) != 0) continue;
        CUtensorMap shaped{};
        const CUresult encoded = encode_bf16_matrix(encode, &shaped, src, rows, k, shape.k,
                                                    shape.rows, shape.swizzle,
                                                    CU_TENSOR_MAP_L2_PROMOTION_NONE);
        const double t = stream_us(ordered_box_stream<false>, shaped,
                                   rows / static_cast<int>(shape.rows),
                                   k / static_cast<int>(shape.k), 0, static_cast<int>(shape.k),
                                   static_cast<int>(shape.rows));
        std::printf(" %u B x %u %s: %.2f us (encode %d);", 2 * shape.k, shape.rows,
                    shape.swizzle == CU_TENSOR_MAP_SWIZZLE_128B ? "128B" : "none", t,
                    static_cast<int>(encoded));
    }
    std::printf("\n  grouped boxes (8-row atoms, k-blocks per box):");
    auto grouped = [&](auto kernel, int chunks, int token_box_rows = 0) {
        if (k_blocks % chunks != 0) {
            std::printf(" %d: K not in whole boxes;", chunks);
            return;
        }
        CUtensorMap map4{};
        const cuuint64_t dims4[4] = {64, 8, static_cast<cuuint64_t>(k_blocks),
                                     static_cast<cuuint64_t>(rows / 8)};
        const cuuint64_t strides4[3] = {static_cast<cuuint64_t>(k) * 2, 128,
                                        static_cast<cuuint64_t>(k) * 16};
        const cuuint32_t box4[4] = {64, 8, static_cast<cuuint32_t>(chunks),
                                    static_cast<cuuint32_t>(16 / chunks)};
        const cuuint32_t element_strides4[4] = {1, 1, 1, 1};
        const CUresult encoded = encode(&map4, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, src, dims4,
                                        strides4, box4, element_strides4,
                                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                        CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (encoded != CUDA_SUCCESS) {
            std::printf(" %d: encode %d;", chunks, static_cast<int>(encoded));
            return;
        }
        const double t = stream_us(kernel, map4, tiles, k_blocks, 0, 64, 128, token_box_rows);
        std::printf(" %d: %.2f us (%.0f GB/s);", chunks, t, 1e-3 * bytes / t);
    };
    grouped(ordered_box_stream<false, 1, 1>, 1);
    grouped(ordered_box_stream<false, 1, 2>, 2);
    grouped(ordered_box_stream<false, 1, 4>, 4);
    grouped(ordered_box_stream<false, 1, 8>, 8);
    grouped(ordered_box_stream<false, 1, 16>, 16);
    std::printf("\n  grouped boxes with a 16-row token box per stage:");
    grouped(ordered_box_stream<false, 1, 1, 16>, 1, 16);
    grouped(ordered_box_stream<false, 1, 2, 16>, 2, 16);
    grouped(ordered_box_stream<false, 1, 4, 16>, 4, 16);
    std::printf("\n  row chunks:");
    cudaFuncSetAttribute(row_chunk_stream, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         kStages * kStageBytes);
    for (const int chunk : {128, 256, 512, 1024, 2048, 4096, 16384}) {
        if ((2 * k) % chunk != 0 || rows % (static_cast<int>(kStageBytes) / chunk) != 0) continue;
        const double t = time_queued_launch(
                             [&] {
                                 row_chunk_stream<<<kCtas, 128, kStages * kStageBytes>>>(
                                     static_cast<const unsigned char*>(src), rows, 2 * k, chunk,
                                     span);
                             },
                             span, kCtas)
                             .event_us;
        std::printf(" %d B %.2f us (%.0f GB/s);", chunk, t, 1e-3 * bytes / t);
    }
    std::printf(" %s\n", cudaGetErrorString(cudaGetLastError()));
    cudaFree(token_rows);
    cudaFree(src);
}

}  // namespace

int main(int argc, char** argv) {
    const bool orders = argc > 1 && std::string(argv[1]) == "--orders";
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("no GPU\n");
        return 0;
    }
    const EncodeTiled encode = encode_tiled_entry();
    if (!encode) {
        std::printf("no cuTensorMapEncodeTiled\n");
        return 1;
    }
    unsigned long long* span = nullptr;
    cudaMalloc(&span, 2 * kCtas * sizeof(unsigned long long));
    for (const DecodeWeights& w : kDecodeWeights) measure(encode, w.name, w.rows, w.k, span, orders);
    cudaFree(span);
    return 0;
}

// Does a bandwidth-bound launch end later when its first copy leaves later? A decode kernel's
// first TMA copy left 0.5-1 µs earlier after two changes (bench/NOTES.md §29, §33) and neither
// launch got shorter. This isolates the question from the library: 132 CTAs stream a buffer
// the size of a decode workload's weights through an 8-stage ring of 16 KB bulk copies (the
// decode kernels' bytes in flight), each CTA first spinning `delay` ns (globaltimer) before
// its first copy. Printed per delay: the median event time of one launch (queued behind other
// work, as moegemm-bench times a repetition), the median CTA span, and the event time minus
// the delay-free one. If a launch's length follows its start, the last column equals the delay.
// Then the same stream with 4 and 12 stages: what more bytes in flight per CTA buy. Last, the
// decode kernels' own access pattern (TMA boxes of 128 rows x 128 bytes of a [rows, K]
// matrix, one k-block per stage) against those contiguous 16 KB copies: with k-blocks issued
// in bursts, more or fewer stages, and each L2 promotion of the box's row fetches.
//
//   nvcc -O2 -std=c++17 -arch=sm_90a bench/tools/start_delay.cu -o start_delay && ./start_delay
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "bf16_box_map.cuh"
#include "event_timing.cuh"
#include "stream_ring.cuh"

namespace {

constexpr int kCtas = 132;
constexpr int kMaxStages = 12;
constexpr uint32_t kStageBytes = 16384;

// One thread per CTA: copy chunk i into stage i % kStages, wait for the oldest, refill it.
template <int kStages>
__global__ void __launch_bounds__(32) stream_kernel(const unsigned char* src, size_t chunks_per_cta,
                                                    long long delay_ns, unsigned long long* span) {
    extern __shared__ __align__(1024) unsigned char ring[];
    __shared__ __align__(8) uint64_t full[kStages];
    if (threadIdx.x != 0) return;
    const unsigned long long entry = global_timer();
    init_barriers(full, kStages);
    while (global_timer() - entry < static_cast<unsigned long long>(delay_ns)) {
    }
    const unsigned char* base = src + blockIdx.x * chunks_per_cta * kStageBytes;
    auto issue = [&](size_t chunk) {
        const int s = static_cast<int>(chunk % kStages);
        const uint32_t bar = shared_address(&full[s]);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                     "r"(kStageBytes)
                     : "memory");
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
            "[%3];" ::"r"(shared_address(ring + s * kStageBytes)),
            "l"(base + chunk * kStageBytes), "r"(kStageBytes), "r"(bar)
            : "memory");
    };
    for (size_t c = 0; c < chunks_per_cta && c < kStages; ++c) issue(c);
    for (size_t c = 0; c < chunks_per_cta; ++c) {
        wait_parity(shared_address(&full[c % kStages]), static_cast<uint32_t>(c / kStages) & 1);
        if (c + kStages < chunks_per_cta) issue(c + kStages);
    }
    span[2 * blockIdx.x] = entry;
    span[2 * blockIdx.x + 1] = global_timer();
}

// The decode kernels' access pattern: each CTA reads whole 128-row tiles of a [rows, K] bf16
// weight matrix (tiles blockIdx.x, + 132, ...), one stage per k-block: a TMA box of 128 rows
// x 64 values, 128 bytes of each row, 128-byte swizzle, as the library's map_b. The producer
// issues `Burst` consecutive k-blocks together once that many stages are free: with Burst = 1
// (the library's producer) a row's 128-byte pieces reach DRAM a stage period apart.
template <int Burst, int kStages = 8>
__global__ void __launch_bounds__(32) box_stream_kernel(const __grid_constant__ CUtensorMap map,
                                                        int tiles, int k_blocks,
                                                        unsigned long long* span) {
    extern __shared__ __align__(1024) unsigned char ring[];
    __shared__ __align__(8) uint64_t full[kStages];
    if (threadIdx.x != 0) return;
    const unsigned long long entry = global_timer();
    init_barriers(full, kStages);
    const int my_tiles = (tiles - static_cast<int>(blockIdx.x) + kCtas - 1) / kCtas;
    const long long total = static_cast<long long>(my_tiles) * k_blocks;
    auto issue = [&](long long chunk) {
        const int s = static_cast<int>(chunk % kStages);
        const int tile = static_cast<int>(blockIdx.x) + static_cast<int>(chunk / k_blocks) * kCtas;
        const int k = static_cast<int>(chunk % k_blocks) * 64;
        const uint32_t bar = shared_address(&full[s]);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                     "r"(kStageBytes)
                     : "memory");
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], "
            "[%1, {%2, %3}], [%4];" ::"r"(shared_address(ring + s * kStageBytes)),
            "l"(&map), "r"(k), "r"(tile * 128), "r"(bar)
            : "memory");
    };
    long long issued = 0;
    for (long long c = 0; c < total; ++c) {
        while (issued < total && issued - c <= kStages - Burst) {
            for (int b = 0; b < Burst && issued < total; ++b) issue(issued++);
        }
        wait_parity(shared_address(&full[c % kStages]), static_cast<uint32_t>(c / kStages) & 1);
    }
    span[2 * blockIdx.x] = entry;
    span[2 * blockIdx.x + 1] = global_timer();
}

using Timing = EventTiming;

template <int kStages>
Timing measure(const unsigned char* src, size_t chunks_per_cta, long long delay_ns,
               unsigned long long* span) {
    return time_queued_launch(
        [&] {
            stream_kernel<kStages><<<kCtas, 32, kStages * kStageBytes>>>(src, chunks_per_cta,
                                                                         delay_ns, span);
        },
        span, kCtas);
}

/// The box stream over a [rows, k] bf16 matrix with bursts of 1, 2 and 4 k-blocks.
void measure_boxes(EncodeTiled encode, const char* name, int rows, int k,
                   unsigned long long* span) {
    void* src = nullptr;
    const size_t bytes = static_cast<size_t>(rows) * k * 2;
    cudaMalloc(&src, bytes);
    cudaMemset(src, 1, bytes);
    CUtensorMap map{};
    const CUresult encoded =
        encode_bf16_matrix(encode, &map, src, rows, k, 64, 128, CU_TENSOR_MAP_SWIZZLE_128B,
                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
    const int tiles = rows / 128;
    const int k_blocks = k / 64;
    auto run = [&](auto kernel, int stages) {
        const int shared = stages * kStageBytes;
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
        return time_queued_launch(
            [&] { kernel<<<kCtas, 32, shared>>>(map, tiles, k_blocks, span); }, span, kCtas);
    };
    const Timing one = run(box_stream_kernel<1>, 8);
    const Timing two = run(box_stream_kernel<2>, 8);
    const Timing four = run(box_stream_kernel<4>, 8);
    const Timing stages4 = run(box_stream_kernel<1, 4>, 4);
    const Timing stages12 = run(box_stream_kernel<1, kMaxStages>, kMaxStages);
    std::printf("%s: %.1f MB as 128-row tiles of 128 x 64 boxes, 8 stages (encode %d, %s)\n"
                "  bursts of 1: event %7.2f us (%4.0f GB/s), span %7.2f\n"
                "  bursts of 2: event %7.2f us (%4.0f GB/s), span %7.2f\n"
                "  bursts of 4: event %7.2f us (%4.0f GB/s), span %7.2f\n",
                name, 1e-6 * bytes, static_cast<int>(encoded),
                cudaGetErrorString(cudaGetLastError()), one.event_us, 1e-3 * bytes / one.event_us,
                one.span_us, two.event_us, 1e-3 * bytes / two.event_us, two.span_us,
                four.event_us, 1e-3 * bytes / four.event_us, four.span_us);
    std::printf("  bursts of 1, 4 stages: event %7.2f us; 12 stages: event %7.2f us\n",
                stages4.event_us, stages12.event_us);
    // The same with the L2 fills of the box's rows not promoted, or promoted to 128 bytes.
    for (const auto promotion : {CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B}) {
        encode_bf16_matrix(encode, &map, src, rows, k, 64, 128, CU_TENSOR_MAP_SWIZZLE_128B,
                           promotion);
        const Timing t = run(box_stream_kernel<1>, 8);
        std::printf("  L2 promotion %s: event %7.2f us\n",
                    promotion == CU_TENSOR_MAP_L2_PROMOTION_NONE ? "none" : "128 B", t.event_us);
    }
    cudaFree(src);
}

}  // namespace

int main() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("no GPU\n");
        return 0;
    }
    cudaFuncSetAttribute(stream_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         4 * kStageBytes);
    cudaFuncSetAttribute(stream_kernel<8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         8 * kStageBytes);
    cudaFuncSetAttribute(stream_kernel<kMaxStages>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         kMaxStages * kStageBytes);
    unsigned long long* span = nullptr;
    cudaMalloc(&span, 2 * kCtas * sizeof(unsigned long long));
    // The weights of qwen3moe-fc2-decode64 (113 experts x 2048 x 768 bf16) and of
    // mixtral-fc2-decode64 (8 x 4096 x 14336 bf16), rounded to whole chunks per CTA.
    for (const double megabytes : {355.5, 939.5}) {
        const size_t chunks_per_cta =
            static_cast<size_t>(megabytes * 1e6 / kStageBytes / kCtas);
        const size_t bytes = chunks_per_cta * kCtas * kStageBytes;
        unsigned char* src = nullptr;
        cudaMalloc(&src, bytes);
        cudaMemset(src, 1, bytes);
        const Timing base = measure<8>(src, chunks_per_cta, 0, span);
        std::printf("%.1f MB in %zu chunks of %u bytes per CTA, 8 stages (%s)\n", 1e-6 * bytes,
                    chunks_per_cta, kStageBytes, cudaGetErrorString(cudaGetLastError()));
        for (const long long delay : {0LL, 500LL, 1000LL, 2000LL, 4000LL}) {
            const Timing t = delay == 0 ? base : measure<8>(src, chunks_per_cta, delay, span);
            std::printf("  delay %5.2f us: event %7.2f us, CTA span %7.2f us, event - delay-free "
                        "event %+6.2f us, %.0f GB/s over the event\n",
                        1e-3 * delay, t.event_us, t.span_us, t.event_us - base.event_us,
                        1e-3 * bytes / t.event_us);
        }
        // Bytes in flight: the same stream through 4 and 12 stages (64 and 192 KB per CTA).
        const Timing four = measure<4>(src, chunks_per_cta, 0, span);
        const Timing twelve = measure<kMaxStages>(src, chunks_per_cta, 0, span);
        std::printf("  4 stages: event %7.2f us (span %7.2f); 12 stages: event %7.2f us (span "
                    "%7.2f) (%s)\n", four.event_us, four.span_us, twelve.event_us,
                    twelve.span_us, cudaGetErrorString(cudaGetLastError()));
        cudaFree(src);
    }
    if (const EncodeTiled encode = encode_tiled_entry()) {
        // qwen3moe-fc2's 113 active experts x 2048 rows x K = 768 (here as one matrix), and
        // mixtral-fc2's 8 x 4096 rows x K = 14336.
        measure_boxes(encode, "qwen3moe-fc2 weights", 113 * 2048, 768, span);
        measure_boxes(encode, "mixtral-fc2 weights", 8 * 4096, 14336, span);
    }
    cudaFree(span);
    return 0;
}

// How fast can the decode weights stream into registers, with no TMA and no shared memory? The
// decode kernels read each weight tile one k-block (128 bytes of each of 64 rows) per TMA box,
// and that box stream runs at ~4.4 TB/s on an H200, while 1-D bulk copies of 4 KB of each row
// ran 1-3% faster (bench/NOTES.md §43): DRAM likes longer runs of one row. A kernel that feeds
// mma.sync from registers (the weights as the A fragment, tokens as B) could read each row in
// longer runs. This tool measures only the stream such a kernel would make: each warp reads a
// group of 16 weight rows over a range of K with 16-byte loads, `kRowsPerLoad` rows per load
// instruction (32 / kRowsPerLoad lanes on each row: 8 rows of 64 bytes is mma.sync's A
// fragment, 1 row of 512 bytes the most contiguous), `kLoadsPerRow` consecutive loads of each
// row in flight, and folds what it read into one word so that no load is dead. Grid: 2 CTAs
// of 256 threads per SM; a warp's items are (16-row group, 1/splits of K), round robin.
// Cache hints: 0 = ld.global.nc, 1 = .L1::no_allocate with an evict-first L2 policy, 2 = 1 with
// .L2::256B (the L2 fetches 256 bytes around each miss). Also: a grid-stride read of the whole
// array (8 loads in flight per thread) and cudaMemcpyAsync device to device of the same bytes.
// Printed: median event time of one launch (queued, event_timing.cuh) and GB/s of weights read.
//
//   nvcc -O2 -std=c++17 -arch=sm_90a -Ibench/tools bench/tools/register_stream.cu -o register_stream
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "decode_weights.cuh"
#include "event_timing.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kGroupRows = 16;

template <int kHint>
__device__ __forceinline__ uint4 load_vector(const uint4* p) {
    uint4 v;
    if constexpr (kHint == 0) {
        asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    } else {
        // (.L2::evict_first as an eviction priority needs 256-bit loads: a cache policy instead.)
        uint64_t policy;
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
        if constexpr (kHint == 1) {
            asm volatile(
                "ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(policy));
        } else {
            asm volatile(
                "ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4.u32 {%0, %1, %2, %3}, "
                "[%4], %5;"
                : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(policy));
        }
    }
    return v;
}

__device__ __forceinline__ uint32_t fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

/// Writes the folded word where no one reads it unless it is a value the data cannot give
/// (every byte of the weights is 1), so that the loads stay live and nothing is stored.
__device__ __forceinline__ void keep(uint32_t word, uint32_t* sink) {
    if (word == 0xdeadbeefu) sink[threadIdx.x] = word;
}

template <int kRowsPerLoad, int kLoadsPerRow, int kHint>
__global__ void __launch_bounds__(kThreads) row_group_stream(const uint4* src, long long rows,
                                                             int row_vectors, int splits,
                                                             uint32_t* sink) {
    constexpr int kLanesPerRow = 32 / kRowsPerLoad;
    constexpr int kPasses = kGroupRows / kRowsPerLoad;
    constexpr int kStep = kLanesPerRow * kLoadsPerRow;  // vectors of each row per iteration
    const int lane = static_cast<int>(threadIdx.x) & 31;
    const int row_in_load = lane / kLanesPerRow, column = lane % kLanesPerRow;
    const long long warps = static_cast<long long>(gridDim.x) * (kThreads / 32);
    const long long first_item =
        static_cast<long long>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
    const long long items = rows / kGroupRows * splits;
    const int part_vectors = row_vectors / splits;
    uint32_t word = 0;
    for (long long item = first_item; item < items; item += warps) {
        const long long group = item / splits;
        const int part = static_cast<int>(item % splits);
        const uint4* base = src + (group * kGroupRows + row_in_load) * row_vectors +
                            static_cast<long long>(part) * part_vectors + column;
        for (int v = 0; v < part_vectors; v += kStep) {
            uint4 r[kPasses][kLoadsPerRow];
#pragma unroll
            for (int p = 0; p < kPasses; ++p)
#pragma unroll
                for (int u = 0; u < kLoadsPerRow; ++u) {
                    const int at = v + u * kLanesPerRow;
                    r[p][u] = at + column < part_vectors
                                  ? load_vector<kHint>(base + static_cast<long long>(p) *
                                                                  kRowsPerLoad * row_vectors +
                                                       at)
                                  : uint4{};
                }
#pragma unroll
            for (int p = 0; p < kPasses; ++p)
#pragma unroll
                for (int u = 0; u < kLoadsPerRow; ++u) word ^= fold(r[p][u]);
        }
    }
    keep(word, sink);
}

template <int kHint>
__global__ void __launch_bounds__(kThreads) linear_stream(const uint4* src, long long vectors,
                                                          uint32_t* sink) {
    constexpr int kInFlight = 8;
    const long long threads = static_cast<long long>(gridDim.x) * kThreads;
    const long long first = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
    uint32_t word = 0;
    for (long long i = first; i < vectors; i += threads * kInFlight) {
        uint4 r[kInFlight];
#pragma unroll
        for (int u = 0; u < kInFlight; ++u)
            r[u] = i + u * threads < vectors ? load_vector<kHint>(src + i + u * threads) : uint4{};
#pragma unroll
        for (int u = 0; u < kInFlight; ++u) word ^= fold(r[u]);
    }
    keep(word, sink);
}

// The fewest splits of K (dividing the row's vectors) that give every warp of the grid two
// items or more.
int splits_for(long long rows, int row_vectors, long long warps) {
    for (int s = 1; s <= row_vectors; ++s)
        if (row_vectors % s == 0 && rows / kGroupRows * s >= 2 * warps) return s;
    return row_vectors;
}

struct Stream {
    const uint4* src;
    long long rows;
    int row_vectors;
    int grid;
    uint32_t* sink;
    unsigned long long* span;  // unused by these kernels; time_queued_launch reads it
    size_t bytes() const { return static_cast<size_t>(rows) * row_vectors * 16; }
};

template <typename Launch>
double queued_us(const Launch& launch, const Stream& s) {
    return time_queued_launch(launch, s.span, 1).event_us;
}

template <int kRowsPerLoad, int kLoadsPerRow, int kHint>
void row_groups(const Stream& s, int splits) {
    const double us = queued_us(
        [&] {
            row_group_stream<kRowsPerLoad, kLoadsPerRow, kHint>
                <<<s.grid, kThreads>>>(s.src, s.rows, s.row_vectors, splits, s.sink);
        },
        s);
    std::printf(" %d x %d B x %d, hint %d: %.2f us (%.0f GB/s);", kRowsPerLoad,
                512 / kRowsPerLoad, kLoadsPerRow, kHint, us, 1e-3 * s.bytes() / us);
}

void measure(const char* name, long long rows, int k, int sms, uint32_t* sink,
             unsigned long long* span) {
    const size_t bytes = static_cast<size_t>(rows) * k * 2;
    void* src = filled_device_buffer(name, bytes);
    if (!src) return;
    const Stream s{static_cast<const uint4*>(src), rows, k / 8, 2 * sms, sink, span};
    const int splits = splits_for(rows, s.row_vectors, static_cast<long long>(s.grid) * 8);
    std::printf("%s: %lld x %d (%.1f MB), %d splits of K\n", name, rows, k, 1e-6 * bytes, splits);
    void* copy = nullptr;
    if (cudaMalloc(&copy, bytes) == cudaSuccess) {
        const double us = queued_us([&] { cudaMemcpyAsync(copy, src, bytes, cudaMemcpyDeviceToDevice); }, s);
        std::printf("  copy D2D %.2f us (%.0f GB/s of bytes read);", us, 1e-3 * bytes / us);
        cudaFree(copy);
    }
    auto linear = [&](auto kernel, int hint) {
        const double us = queued_us(
            [&] { kernel<<<s.grid, kThreads>>>(s.src, static_cast<long long>(bytes / 16), sink); }, s);
        std::printf(" linear, hint %d: %.2f us (%.0f GB/s);", hint, us, 1e-3 * bytes / us);
    };
    linear(linear_stream<0>, 0);
    linear(linear_stream<1>, 1);
    linear(linear_stream<2>, 2);
    std::printf("\n  row groups (rows per load x bytes per row per load x loads in flight per row):\n ");
    row_groups<8, 2, 0>(s, splits);
    row_groups<8, 4, 0>(s, splits);
    row_groups<8, 8, 0>(s, splits);
    row_groups<8, 4, 1>(s, splits);
    row_groups<8, 4, 2>(s, splits);
    std::printf("\n ");
    row_groups<4, 4, 0>(s, splits);
    row_groups<2, 2, 0>(s, splits);
    row_groups<1, 1, 0>(s, splits);
    row_groups<1, 1, 2>(s, splits);
    row_groups<1, 2, 2>(s, splits);
    std::printf(" %s\n", cudaGetErrorString(cudaGetLastError()));
    cudaFree(src);
}

}  // namespace

int main() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("no GPU\n");
        return 0;
    }
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    uint32_t* sink = nullptr;
    unsigned long long* span = nullptr;
    cudaMalloc(&sink, kThreads * sizeof(uint32_t));
    cudaMalloc(&span, 2 * sizeof(unsigned long long));
    for (const DecodeWeights& w : kDecodeWeights) measure(w.name, w.rows, w.k, sms, sink, span);
    cudaFree(sink);
    cudaFree(span);
    return 0;
}

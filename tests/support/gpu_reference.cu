// Kernels of the GPU oracle (see gpu_reference.hpp). Deliberately naive: one thread per
// element of D and a plain loop over K, nothing shared with the library's kernels, so that a
// bug in those cannot be mirrored here.
#include "support/gpu_reference.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "moegemm/moegemm.h"
#include "support/e4m3.hpp"

namespace mgt {
namespace gpuref {

namespace {

constexpr int kBf16 = MOEGEMM_DTYPE_BF16;
constexpr int kF16 = MOEGEMM_DTYPE_F16;
constexpr int kF32 = MOEGEMM_DTYPE_F32;
constexpr int kE4m3 = MOEGEMM_DTYPE_E4M3;
constexpr int kVariable = MOEGEMM_LAYOUT_VARIABLE;
constexpr int kWeightsKn = MOEGEMM_WEIGHTS_KN;

constexpr int kThreads = 256;
// The check's tiles: the native kernels' largest tile side; a tile's error ratio counts from
// kMinTileElements finite elements (fewer say little about a bias).
constexpr int kCheckTile = 128;
constexpr int kTileSlices = 8;  // blocks per tile: 16 rows x 128 columns each
constexpr unsigned long long kMinTileElements = 32;
constexpr int64_t kMaxCheckBlocks = 65535;

int grid_for(size_t items) {
    const size_t blocks = (items + kThreads - 1) / kThreads;
    return static_cast<int>(std::max<size_t>(1, std::min<size_t>(blocks, 8192)));
}

// splitmix64's finalizer.
__device__ __forceinline__ uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

__device__ __forceinline__ uint16_t random_bits(uint64_t seed, uint64_t i, int dtype) {
    const uint64_t h = mix64(seed ^ mix64(i));
    const float u = static_cast<float>(h >> 40) * (2.0f / 16777216.0f) - 1.0f;  // [-1, 1)
    uint16_t bits = dtype == kBf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(u))
                                   : __half_as_ushort(__float2half_rn(u));
    if ((bits & 0x7fffu) == 0) {  // never zero: +-2^-8
        bits = static_cast<uint16_t>((bits & 0x8000u) | (dtype == kBf16 ? 0x3b80u : 0x1c00u));
    }
    return bits;
}

// An E4M3 code with exponent field 5..8: sign, exponent and mantissa from separate hash bits.
__device__ __forceinline__ uint8_t random_e4m3(uint64_t seed, uint64_t i) {
    const uint64_t h = mix64(seed ^ mix64(i));
    return static_cast<uint8_t>((h >> 63) << 7 | (5 + ((h >> 40) & 3)) << 3 | ((h >> 20) & 7));
}

// An fp8 scale: uniform in [0.5, 2) (24 random bits).
__device__ __forceinline__ float random_scale(uint64_t seed, uint64_t i) {
    const uint64_t h = mix64(seed ^ mix64(i));
    return 0.5f + static_cast<float>(h >> 40) * (1.5f / 16777216.0f);
}

__device__ __forceinline__ double decode16(uint16_t bits, int dtype) {
    return dtype == kBf16 ? static_cast<double>(__uint_as_float(static_cast<uint32_t>(bits) << 16))
                          : static_cast<double>(__half2float(__ushort_as_half(bits)));
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ unsigned int warp_max(unsigned int v) {
    for (int offset = 16; offset > 0; offset /= 2)
        v = max(v, __shfl_down_sync(0xffffffffu, v, offset));
    return v;
}

// Element i of a tensor fill_random wrote, as raw bits of the element's width.
__device__ __forceinline__ uint32_t random_element(uint64_t seed, uint64_t i, int dtype) {
    if (dtype == kE4m3) return random_e4m3(seed, i);
    if (dtype == kF32) return __float_as_uint(random_scale(seed, i));
    return random_bits(seed, i, dtype);
}

__device__ __forceinline__ uint32_t load_element(const void* data, size_t i, int dtype) {
    if (dtype == kE4m3) return static_cast<const uint8_t*>(data)[i];
    if (dtype == kF32) return static_cast<const uint32_t*>(data)[i];
    return static_cast<const uint16_t*>(data)[i];
}

__global__ void fill_random_kernel(void* data, size_t count, int dtype, uint64_t seed) {
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += stride) {
        const uint32_t bits = random_element(seed, i, dtype);
        if (dtype == kE4m3) static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(bits);
        else if (dtype == kF32) static_cast<uint32_t*>(data)[i] = bits;
        else static_cast<uint16_t*>(data)[i] = static_cast<uint16_t>(bits);
    }
}

// Every thread of the grid reaches the warp reductions: no early return in these kernels.
__global__ void count_random_kernel(const void* data, size_t count, int dtype, uint64_t seed,
                                    unsigned long long* mismatches) {
    unsigned long long bad = 0;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += stride)
        bad += load_element(data, i, dtype) != random_element(seed, i, dtype);
    bad = warp_sum(bad);
    if ((threadIdx.x & 31) == 0 && bad) atomicAdd(mismatches, bad);
}

__global__ void count_bytes_kernel(const uint8_t* data, size_t bytes, uint8_t pattern,
                                   unsigned long long* mismatches) {
    unsigned long long bad = 0;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < bytes;
         i += stride)
        bad += data[i] != pattern;
    bad = warp_sum(bad);
    if ((threadIdx.x & 31) == 0 && bad) atomicAdd(mismatches, bad);
}

// Which expert owns global row `row`, and whether the row is valid (true), or must keep the
// poison (*untouched) or is unspecified (neither).
__device__ __forceinline__ bool row_role(const OutputCheck& p, int64_t row, int32_t* expert,
                                         bool* untouched) {
    *untouched = false;
    if (p.layout == kVariable) {
        if (row >= p.offsets[p.experts]) {
            *untouched = true;
            return false;
        }
        // The last e with offsets[e] <= row: experts before it that are empty share its offset.
        int32_t lo = 0, hi = p.experts - 1;
        while (lo < hi) {
            const int32_t mid = lo + (hi - lo + 1) / 2;
            if (p.offsets[mid] <= row) lo = mid;
            else hi = mid - 1;
        }
        *expert = lo;
        return true;
    }
    const int32_t e = static_cast<int32_t>(row / p.max_rows);
    *expert = e;
    return row - int64_t{e} * p.max_rows < p.rows[e];
}

__device__ __forceinline__ uint32_t element_bits(const OutputCheck& p, size_t idx) {
    if (p.out_type == kF32) return static_cast<const uint32_t*>(p.d)[idx];
    return static_cast<const uint16_t*>(p.d)[idx];
}

__device__ __forceinline__ double element_value(const OutputCheck& p, uint32_t bits) {
    if (p.out_type == kF32) return static_cast<double>(__uint_as_float(bits));
    return decode16(static_cast<uint16_t>(bits), p.out_type == kF16 ? kF16 : kBf16);
}

__device__ void take_sample(CheckStats* st, const CheckSample& s) {
    const unsigned int slot = atomicAdd(&st->samples_taken, 1u);
    if (slot < static_cast<unsigned int>(kMaxSamples)) st->samples[slot] = s;
}

/// A thread's counts over every element it checked.
struct ElementSums {
    unsigned long long checked = 0, bad_values = 0, untouched = 0, bad_untouched = 0;
    float worst = 0.0f;
};
/// A thread's share of one tile's error sums, over the tile's finite valid elements.
struct ErrorSums {
    unsigned long long checked = 0;
    double diff2 = 0.0, x2 = 0.0, r2 = 0.0;
};

/// One element of D: compared with its reference (valid rows) or with the poison (rows that
/// must stay untouched); adds to the thread's counts and to its tile's error sums.
__device__ void check_element(const OutputCheck& p, CheckStats* st, int64_t row, int64_t col,
                              ElementSums* counts, ErrorSums* tile) {
    const uint32_t poison = p.out_type == kF32 ? 0xffffffffu : 0xffffu;
    int32_t e = 0;
    bool must_keep = false;
    const bool valid = row_role(p, row, &e, &must_keep);
    if (!valid && !must_keep) return;  // unspecified (MASKED past M_e): never read
    const size_t idx = static_cast<size_t>(row) * static_cast<size_t>(p.n) + static_cast<size_t>(col);
    const uint32_t bits = element_bits(p, idx);
    if (must_keep) {
        ++counts->untouched;
        if (bits != poison) {
            ++counts->bad_untouched;
            take_sample(st, CheckSample{row, col, -1, kSampleUntouched, 0.0, 0.0, 0.0, bits});
        }
        return;
    }

    // The reference: exact products (of the dequantized inputs for E4M3), summed in fp64.
    const size_t a_row = static_cast<size_t>(row) * static_cast<size_t>(p.k);
    size_t b_at, b_step;
    if (p.weights == kWeightsKn) {  // B_e[k][n]
        b_at = static_cast<size_t>(e) * static_cast<size_t>(p.k) * static_cast<size_t>(p.n) +
               static_cast<size_t>(col);
        b_step = static_cast<size_t>(p.n);
    } else {  // B_e[n][k]
        b_at = (static_cast<size_t>(e) * static_cast<size_t>(p.n) + static_cast<size_t>(col)) *
               static_cast<size_t>(p.k);
        b_step = 1;
    }
    double ref = 0.0, abs_sum = 0.0;
    if (p.in_type == kE4m3) {
        const auto* a = static_cast<const uint8_t*>(p.a);
        const auto* b = static_cast<const uint8_t*>(p.b);
        for (int64_t kk = 0; kk < p.k; ++kk, b_at += b_step) {
            const double sa = p.a_scale[a_scale_index(p.scale_mode, p.k, row, kk)];
            const double sb = p.b_scale[b_scale_index(p.scale_mode, p.n, p.k, e, col, kk)];
            const double prod = e4m3_value(a[a_row + kk]) * sa * (e4m3_value(b[b_at]) * sb);
            ref += prod;
            abs_sum += fabs(prod);
        }
    } else {
        const auto* a = static_cast<const uint16_t*>(p.a);
        const auto* b = static_cast<const uint16_t*>(p.b);
        for (int64_t kk = 0; kk < p.k; ++kk, b_at += b_step) {
            const double prod = decode16(a[a_row + kk], p.in_type) * decode16(b[b_at], p.in_type);
            ref += prod;
            abs_sum += fabs(prod);
        }
    }

    const double x = element_value(p, bits);
    const double bound = p.rtol * fabs(ref) + (1.0 + p.rtol) * p.acc * abs_sum + p.atol;
    ++counts->checked;
    const bool finite = isfinite(x);
    const double err = finite ? fabs(x - ref) : 0.0;
    if (finite) counts->worst = fmaxf(counts->worst, static_cast<float>(err / bound));
    if (finite && err <= bound) {
        // The error sums look for a bias that every element's bound lets through: elements
        // over their bound are reported as such, not counted again here.
        ++tile->checked;
        tile->diff2 += (x - ref) * (x - ref);
        tile->x2 += x * x;
        tile->r2 += ref * ref;
    }
    if (!finite || err > bound) {
        ++counts->bad_values;
        take_sample(st, CheckSample{row, col, e, kSampleBadValue, x, ref, bound, bits});
    }
}

/// Sums a value over the block (kThreads threads); every thread gets the total.
template <typename T>
__device__ T block_sum(T v, T* scratch) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    T total = T(0);
    for (int w = 0; w < kThreads / 32; ++w) total += scratch[w];
    __syncthreads();
    return total;
}

// Each 128 x 128 tile of D is checked by kTileSlices blocks, a slice of its rows each, which
// add their error sums into the tile's TileSums; a second kernel holds every tile's ratio to the
// global bound, so that a fault confined to one tile of a large output is not diluted by the
// rest (and adds the tiles' sums into the global ones).
__global__ void __launch_bounds__(kThreads)
    check_elements_kernel(OutputCheck p, CheckStats* st, TileSums* tile_sums) {
    __shared__ double scratch_d[kThreads / 32];
    __shared__ unsigned long long scratch_u[kThreads / 32];
    ElementSums counts;
    const int64_t tile_cols = (p.n + kCheckTile - 1) / kCheckTile;
    const int64_t items = (p.total_rows + kCheckTile - 1) / kCheckTile * tile_cols * kTileSlices;
    constexpr int kSliceRows = kCheckTile / kTileSlices;
    for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {  // block-uniform
        const int64_t tile = item / kTileSlices;
        const int64_t row0 = tile / tile_cols * kCheckTile + item % kTileSlices * kSliceRows;
        const int64_t col0 = tile % tile_cols * kCheckTile;
        ErrorSums sums;
        for (int i = threadIdx.x; i < kSliceRows * kCheckTile; i += kThreads) {
            const int64_t row = row0 + i / kCheckTile, col = col0 + i % kCheckTile;
            if (row < p.total_rows && col < p.n) check_element(p, st, row, col, &counts, &sums);
        }
        const unsigned long long checked = block_sum(sums.checked, scratch_u);
        const double diff2 = block_sum(sums.diff2, scratch_d);
        const double x2 = block_sum(sums.x2, scratch_d);
        const double r2 = block_sum(sums.r2, scratch_d);
        if (threadIdx.x == 0 && checked) {
            TileSums& t = tile_sums[tile];
            atomicAdd(&t.checked, checked);
            atomicAdd(&t.diff2, diff2);
            atomicAdd(&t.x2, x2);
            atomicAdd(&t.r2, r2);
        }
    }

    counts.checked = warp_sum(counts.checked);
    counts.bad_values = warp_sum(counts.bad_values);
    counts.untouched = warp_sum(counts.untouched);
    counts.bad_untouched = warp_sum(counts.bad_untouched);
    const unsigned int worst_bits = warp_max(__float_as_uint(counts.worst));  // >= 0: ordered
    if ((threadIdx.x & 31) == 0) {
        if (counts.checked) atomicAdd(&st->checked, counts.checked);
        if (counts.bad_values) atomicAdd(&st->bad_values, counts.bad_values);
        if (counts.untouched) atomicAdd(&st->untouched, counts.untouched);
        if (counts.bad_untouched) atomicAdd(&st->bad_untouched, counts.bad_untouched);
        if (worst_bits) atomicMax(&st->worst_ratio_bits, worst_bits);
    }
}

__global__ void __launch_bounds__(kThreads)
    check_tiles_kernel(OutputCheck p, CheckStats* st, const TileSums* tile_sums, int64_t tiles) {
    const int64_t tile_cols = (p.n + kCheckTile - 1) / kCheckTile;
    double diff2 = 0.0, x2 = 0.0, r2 = 0.0;
    for (int64_t tile = int64_t{blockIdx.x} * kThreads + threadIdx.x; tile < tiles;
         tile += int64_t{gridDim.x} * kThreads) {
        const TileSums t = tile_sums[tile];
        diff2 += t.diff2;
        x2 += t.x2;
        r2 += t.r2;
        const double ratio = t.x2 + t.r2 > 0.0 ? t.diff2 / (t.x2 + t.r2) : 0.0;
        if (p.tile_limit > 0.0 && t.checked >= kMinTileElements && !(ratio <= p.tile_limit)) {
            atomicAdd(&st->bad_tiles, 1ull);
            take_sample(st, CheckSample{tile / tile_cols * kCheckTile, tile % tile_cols * kCheckTile,
                                        -1, kSampleBadTile, ratio, 0.0, p.tile_limit, 0u});
        }
    }
    diff2 = warp_sum(diff2);
    x2 = warp_sum(x2);
    r2 = warp_sum(r2);
    if ((threadIdx.x & 31) == 0 && (x2 != 0.0 || r2 != 0.0)) {
        atomicAdd(&st->sum_diff2, diff2);
        atomicAdd(&st->sum_x2, x2);
        atomicAdd(&st->sum_r2, r2);
    }
}

int64_t check_tiles(const OutputCheck& check) {
    return (check.total_rows + kCheckTile - 1) / kCheckTile *
           ((check.n + kCheckTile - 1) / kCheckTile);
}

}  // namespace

cudaError_t fill_random(void* data, size_t count, int dtype, uint64_t seed, cudaStream_t stream) {
    if (count == 0) return cudaSuccess;
    fill_random_kernel<<<grid_for(count), kThreads, 0, stream>>>(data, count, dtype, seed);
    return cudaGetLastError();
}

cudaError_t count_random_mismatches(const void* data, size_t count, int dtype, uint64_t seed,
                                    unsigned long long* mismatches, cudaStream_t stream) {
    if (count == 0) return cudaSuccess;
    count_random_kernel<<<grid_for(count), kThreads, 0, stream>>>(data, count, dtype, seed,
                                                                   mismatches);
    return cudaGetLastError();
}

cudaError_t count_bytes_not(const void* data, size_t bytes, uint8_t pattern,
                            unsigned long long* mismatches, cudaStream_t stream) {
    if (bytes == 0) return cudaSuccess;
    count_bytes_kernel<<<grid_for(bytes), kThreads, 0, stream>>>(
        static_cast<const uint8_t*>(data), bytes, pattern, mismatches);
    return cudaGetLastError();
}

size_t check_scratch_bytes(const OutputCheck& check) {
    if (check.total_rows <= 0 || check.n <= 0) return 0;
    return static_cast<size_t>(check_tiles(check)) * sizeof(TileSums);
}

cudaError_t check_output(const OutputCheck& check, CheckStats* stats, void* scratch,
                         cudaStream_t stream) {
    if (check.total_rows <= 0 || check.n <= 0) return cudaSuccess;
    const int64_t tiles = check_tiles(check);
    auto* tile_sums = static_cast<TileSums*>(scratch);
    cudaError_t err = cudaMemsetAsync(tile_sums, 0, static_cast<size_t>(tiles) * sizeof(TileSums),
                                      stream);
    if (err != cudaSuccess) return err;
    const auto element_blocks =
        static_cast<unsigned int>(std::min<int64_t>(tiles * kTileSlices, kMaxCheckBlocks));
    check_elements_kernel<<<element_blocks, kThreads, 0, stream>>>(check, stats, tile_sums);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
    const auto tile_blocks = static_cast<unsigned int>(
        std::min<int64_t>((tiles + kThreads - 1) / kThreads, kMaxCheckBlocks));
    check_tiles_kernel<<<tile_blocks, kThreads, 0, stream>>>(check, stats, tile_sums, tiles);
    return cudaGetLastError();
}

}  // namespace gpuref
}  // namespace mgt

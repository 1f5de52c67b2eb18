// The GPU oracle of the stress and concurrency tests: plain CUDA kernels (gpu_reference.cu)
// that fill inputs with reproducible random values, recompute every element of D from the
// same A and B with a naive dot product, compare it with what the library wrote, and count
// bytes that changed where nothing may change (poisoned rows, guard bands, inputs).
//
// A host (fp64) reference is too slow for thousands of problems; this one runs on the GPU,
// next to the library, and only a few counters come back to the host.
//
// The reference element: products of two 16-bit floats are exact in fp32 and in fp64; they are
// summed in fp64 (exactly enough for any K the API accepts), together with sum |a_k b_k| for
// the error bound. E4M3 inputs are dequantized first, as the header defines D for them:
// (a * sa(r, k)) * (b * sb(e, n, k)) in fp64, with the scales of the plan's scale mode. The comparison then uses the tolerance model of support/reference.cpp
// (tolerance_for) unchanged: the oracle adds no error of its own that the bound would have
// to absorb.
//
// Nothing here uses Catch: the launch functions return CUDA's error, so that test threads
// other than Catch's may call them.
#ifndef MOEGEMM_TESTS_SUPPORT_GPU_REFERENCE_HPP
#define MOEGEMM_TESTS_SUPPORT_GPU_REFERENCE_HPP

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace mgt {
namespace gpuref {

/// Deterministic random inputs: element i of a tensor filled with `seed` is a pure function of
/// (seed, i). `dtype`:
///  - MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_F16: uniform in [-1, 1), rounded to nearest, never zero;
///  - MOEGEMM_DTYPE_E4M3: a random code with exponent field 5..8 (|x| in [0.25, 3.75], any
///    sign and mantissa: never zero, never NaN), as the [fp8] tests draw them;
///  - MOEGEMM_DTYPE_F32: fp8 scales, uniform in [0.5, 2).
cudaError_t fill_random(void* data, size_t count, int dtype, uint64_t seed, cudaStream_t stream);

/// Adds to *mismatches (device) the number of elements of `data` that no longer hold what
/// fill_random(data, count, dtype, seed) wrote.
cudaError_t count_random_mismatches(const void* data, size_t count, int dtype, uint64_t seed,
                                    unsigned long long* mismatches, cudaStream_t stream);

/// Adds to *mismatches (device) the number of bytes of [data, data + bytes) that differ from
/// `pattern`.
cudaError_t count_bytes_not(const void* data, size_t bytes, uint8_t pattern,
                            unsigned long long* mismatches, cudaStream_t stream);

/// One output tensor to check against the reference.
///
/// Rows of A and D share one global index (as in support/reference.hpp's Geometry): the row
/// of the [max_rows, *] matrix for VARIABLE, e * max_rows + m for MASKED and FIXED. Row roles:
///  - VARIABLE: rows [offsets[e], offsets[e + 1]) belong to expert e and must match the
///    reference; rows from offsets[experts] on must still hold the poison (every byte 0xFF).
///  - MASKED: rows m < rows[e] of slab e must match; the others are unspecified (not read).
///  - FIXED: every row matches (pass rows[e] = max_rows).
/// `rows` (experts values) and `offsets` (experts + 1 values, VARIABLE only; may be NULL
/// otherwise) are device pointers; they describe the sizes the library should have used
/// (for device sizes: after the clamp moegemm.h documents).
struct OutputCheck {  // aggregate: DeviceChecker::output fills it in this order
    int layout = 0;   ///< moegemm_layout_t
    int weights = 0;  ///< moegemm_weight_layout_t: 0 = B is [E, N, K], 1 = [E, K, N]
    int in_type = 0;  ///< moegemm_dtype_t of A and B (BF16, F16 or E4M3)
    int out_type = 0; ///< moegemm_dtype_t of D (BF16, F16 or F32)
    int32_t experts = 0;
    int64_t n = 0, k = 0, max_rows = 0;
    int64_t total_rows = 0;  ///< rows of A and D: max_rows, or experts * max_rows
    const void* a = nullptr;
    const void* b = nullptr;
    const void* d = nullptr;
    const int32_t* rows = nullptr;
    const int64_t* offsets = nullptr;
    /// E4M3 inputs: the moegemm_scale_mode_t and the fp32 scales as the header lays them out
    /// (a_scale indexed by the global row); NONE and NULL for 16-bit inputs.
    int scale_mode = 0;
    const float* a_scale = nullptr;
    const float* b_scale = nullptr;
    /// Tolerance (support/reference.hpp's Tolerance): an element x with reference r passes
    /// when it is finite and |x - r| <= rtol |r| + (1 + rtol) acc sum|a b| + atol.
    double rtol = 0.0, acc = 0.0, atol = 0.0;
    /// Bound of each 128 x 128 tile's relative error sum (x-r)^2 / (sum x^2 + sum r^2), over
    /// its finite valid elements (from 32 of them); 0: no per-tile check.
    double tile_limit = 0.0;
};

/// A failing element, for the message.
struct CheckSample {
    int64_t row = 0, col = 0;
    int32_t expert = 0;
    int32_t kind = 0;  ///< kSampleBadValue or kSampleUntouched
    double x = 0.0, ref = 0.0, bound = 0.0;
    uint32_t bits = 0;  ///< the element's raw bits
};
constexpr int32_t kSampleBadValue = 1;   ///< valid element non-finite or out of tolerance
constexpr int32_t kSampleUntouched = 2;  ///< element that must keep the poison changed
constexpr int32_t kSampleBadTile = 3;    ///< a tile (row, col: its origin) whose error sum
                                         ///< ratio (x) exceeds the bound (bound)
constexpr int kMaxSamples = 8;

/// What check_output accumulates (device memory; zero it before a check).
struct CheckStats {
    unsigned long long checked;        ///< valid elements compared
    unsigned long long bad_values;     ///< of them non-finite or out of tolerance
    unsigned long long untouched;      ///< elements that must keep the poison
    unsigned long long bad_untouched;  ///< of them changed
    double sum_diff2, sum_x2, sum_r2;  ///< over valid elements within their bound: the global check
    unsigned long long bad_tiles;      ///< tiles over OutputCheck::tile_limit
    unsigned int worst_ratio_bits;     ///< float bits of max |x - r| / bound
    unsigned int samples_taken;
    CheckSample samples[kMaxSamples];
};

/// One 128 x 128 tile's error sums over its valid elements within their bound: check_output's
/// scratch.
struct TileSums {
    unsigned long long checked;
    double diff2, x2, r2;
};

/// Bytes of device scratch check_output needs for `check` (a TileSums per tile of D).
size_t check_scratch_bytes(const OutputCheck& check);

/// Enqueues the comparison of one output tensor; adds into *stats (device). `scratch`:
/// check_scratch_bytes(check) bytes of device memory, whatever they hold, not in use by another
/// check in flight.
cudaError_t check_output(const OutputCheck& check, CheckStats* stats, void* scratch,
                         cudaStream_t stream);

}  // namespace gpuref
}  // namespace mgt

#endif  // MOEGEMM_TESTS_SUPPORT_GPU_REFERENCE_HPP

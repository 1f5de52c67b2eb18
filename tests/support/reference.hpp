// Host-side half of the GPU tests: 16-bit float converters, random inputs, the fp64
// reference GEMM, the tolerance model and the comparison of a downloaded D buffer.
//
// Nothing here touches CUDA or Catch: it is plain C++ that the harness (gpu_harness.hpp)
// and the test files build on.
#ifndef MOEGEMM_TESTS_SUPPORT_REFERENCE_HPP
#define MOEGEMM_TESTS_SUPPORT_REFERENCE_HPP

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "moegemm/moegemm.h"
#include "support/e4m3.hpp"

namespace mgt {

// ------------------------------------------------------------------------------------------
// 16-bit floats. All conversions from float round to nearest, ties to even; NaN stays NaN,
// overflow goes to infinity, f16 subnormals are produced and decoded exactly.
// ------------------------------------------------------------------------------------------
uint16_t bf16_from_float(float x);
float float_from_bf16(uint16_t bits);
uint16_t f16_from_float(float x);
float float_from_f16(uint16_t bits);

/// Bytes per element of a dtype (BF16/F16: 2, F32: 4, E4M3: 1).
size_t dtype_bytes(moegemm_dtype_t t);

/// Reads element `index` of a buffer of dtype `t` (BF16, F16 or F32) as a double.
double decode_element(moegemm_dtype_t t, const uint8_t* base, size_t index);

const char* layout_name(moegemm_layout_t l);
const char* weights_name(moegemm_weight_layout_t w);
const char* dtype_name(moegemm_dtype_t t);
const char* backend_name(moegemm_backend_t b);

// ------------------------------------------------------------------------------------------
// Geometry: which rows exist, which are valid, which must stay untouched.
// A and D share one global row index: for VARIABLE it is the row of the [max_rows, *]
// matrix, for MASKED and FIXED it is e * max_rows + m in the [E, max_rows, *] tensor.
// ------------------------------------------------------------------------------------------
struct Geometry {
    moegemm_layout_t layout = MOEGEMM_LAYOUT_VARIABLE;
    moegemm_weight_layout_t weights = MOEGEMM_WEIGHTS_NK;
    int32_t experts = 1;
    int64_t n = 8;
    int64_t k = 8;
    int64_t max_rows = 1;

    /// Rows of A and D: max_rows for VARIABLE, experts * max_rows otherwise.
    int64_t total_rows() const;
    size_t a_elems() const { return static_cast<size_t>(total_rows() * k); }
    size_t b_elems() const { return static_cast<size_t>(int64_t{experts} * n * k); }
    size_t d_elems() const { return static_cast<size_t>(total_rows() * n); }
    std::string str() const;
};

/// A geometry with [E, N, K] weights unless said otherwise.
inline Geometry geometry(moegemm_layout_t layout, int32_t experts, int64_t n, int64_t k,
                         int64_t max_rows,
                         moegemm_weight_layout_t weights = MOEGEMM_WEIGHTS_NK) {
    return Geometry{layout, weights, experts, n, k, max_rows};
}

/// The rows the library must write, each with its expert. `sizes` is ignored for FIXED.
struct RowSet {
    std::vector<int64_t> row;
    std::vector<int32_t> expert;
    size_t size() const { return row.size(); }
};
RowSet valid_rows(const Geometry& g, const std::vector<int32_t>& sizes);

/// Every row of A/D with the expert that owns its slab (MASKED/FIXED), used when a test
/// needs the reference for sizes that change after the workload was built.
RowSet all_slab_rows(const Geometry& g);

/// Row range [first, last) that must never be written: VARIABLE rows past the sum of the
/// sizes. Empty (first == last) for MASKED and FIXED.
std::pair<int64_t, int64_t> untouched_rows(const Geometry& g, const std::vector<int32_t>& sizes);

std::string sizes_str(const std::vector<int32_t>& sizes);

// ------------------------------------------------------------------------------------------
// Device-size clamping: what the GPU must make of raw sizes it reads from device memory,
// written from the header's rules (moegemm_plan_get_status_word), independently of the
// library's own code so that a wrong clamp in the library cannot also be in the oracle:
//   - a negative size counts as 0                                  -> MOEGEMM_SIZES_CLAMPED_NEGATIVE
//   - VARIABLE: the running sum of the (non-negative) sizes is cut at max_rows: an expert
//     keeps only the rows that still fit, later experts get 0        -> MOEGEMM_SIZES_CLAMPED_CAPACITY
//     (set iff the sum of the non-negative sizes, in 64 bits, exceeds max_rows)
//   - MASKED: each size is cut at max_rows                           -> MOEGEMM_SIZES_CLAMPED_CAPACITY
//     (set iff some size exceeds max_rows)
//   - exactly at capacity is not a clamp; FIXED ignores sizes (every slab full, no flags).
// ------------------------------------------------------------------------------------------
struct ClampedSizes {
    std::vector<int32_t> sizes;  ///< valid sizes: usable for valid_rows() and the reference
    uint32_t flags = 0;          ///< MOEGEMM_SIZES_CLAMPED_* bits the clamp raises
};
ClampedSizes clamp_sizes(const Geometry& g, const std::vector<int32_t>& raw);

/// "0", "NEGATIVE", "CAPACITY", "NEGATIVE|CAPACITY", unknown bits in hex.
std::string clamp_flags_str(uint32_t flags);

// ------------------------------------------------------------------------------------------
// Inputs
// ------------------------------------------------------------------------------------------

/// `count` values uniform in [-1, 1], rounded to `t` (BF16 or F16), never exactly zero.
/// Returns the bit patterns; `values` receives the exact decoded values.
std::vector<uint16_t> random_16bit(size_t count, moegemm_dtype_t t, std::mt19937& rng,
                                   std::vector<double>* values);

/// B as [E, N, K] doubles whatever the weight layout of `b` ([E,N,K] or [E,K,N]).
std::vector<double> b_as_nk(const Geometry& g, const std::vector<double>& b);

/// Elements of the fp32 scale arrays of A and B for `mode` (moegemm_scale_mode_t's table);
/// 0 for NONE.
std::pair<size_t, size_t> scale_counts(const Geometry& g, moegemm_scale_mode_t mode);

/// E4M3 inputs: multiplies the decoded A (rows x K) and B ([E, N, K]) by their scales, laid
/// out for `mode` as moegemm_scale_mode_t's table says, giving the dequantized inputs
/// A[r, k] * sa(r, k) and B_e[n, k] * sb(e, n, k) that the header defines D from.
void dequantize(const Geometry& g, moegemm_scale_mode_t mode, const std::vector<float>& a_scale,
                const std::vector<float>& b_scale, std::vector<double>& a, std::vector<double>& b);

// ------------------------------------------------------------------------------------------
// Reference: D[row, j] = sum_k A[row, k] * B_e[j, k] in fp64 from the exact (already
// rounded) inputs, plus sum_k |A[row, k] * B_e[j, k]| for the error bound. Products of two
// 16-bit floats are exact in fp64 and K <= 2^31 terms of <= 22 significant bits sum with
// an error far below anything the comparison can see, so the reference is exact for the
// purpose of these tests.
// ------------------------------------------------------------------------------------------
class Reference {
public:
    Reference() = default;
    /// `a` is [total_rows, K]; `b_nk` is [E, N, K]. Computes the rows of `rows` only.
    Reference(const Geometry& g, const std::vector<double>& a, const std::vector<double>& b_nk,
              const RowSet& rows);

    bool has_row(int64_t row) const;
    /// N values of row `row` (which must have been computed).
    const double* value(int64_t row) const;
    const double* abs_sum(int64_t row) const;
    /// Sum of squares of every computed value (0 means the test would be trivial).
    double norm2() const { return norm2_; }

private:
    int64_t n_ = 0;
    std::vector<int64_t> slot_;  // per global row: index into value_/abs_ rows, or -1
    std::vector<double> value_;
    std::vector<double> abs_;
    double norm2_ = 0.0;
};

// ------------------------------------------------------------------------------------------
// Tolerance. An element x passes when
//     |x - ref| <= rtol * |ref| + acc * sum_k |a_k b_k| + atol
// See tolerance_for() in reference.cpp for the derivation of each term.
// ------------------------------------------------------------------------------------------
struct Tolerance {
    double rtol = 0.0;   ///< output rounding, relative to |ref|
    double acc = 0.0;    ///< fp32 accumulation, relative to sum |a_k b_k|
    double atol = 0.0;   ///< absolute floor (f16 subnormal spacing)
    double max_global_diff = 0.0;  ///< bound on sum (x-r)^2 / (sum x^2 + sum r^2)
    double bound(double ref, double abs_sum) const;
};
/// `in`: the input type; E4M3 products are summed by the tensor cores with fewer bits than
/// fp32 between promotions (see reference.cpp), which widens the accumulation term.
Tolerance tolerance_for(moegemm_dtype_t out, int64_t k, moegemm_dtype_t in = MOEGEMM_DTYPE_BF16);

/// The byte every poisoned buffer is filled with: 0xFF is a NaN in bf16, f16 and f32.
constexpr uint8_t kPoisonByte = 0xFF;

// ------------------------------------------------------------------------------------------
// Comparison of a downloaded output buffer laid out as
//     [guard bytes][D: d_elems * dtype_bytes(out)][guard bytes]
// with every byte poisoned before the run. Checks (1) every valid row's element is finite
// and within tolerance of the reference, (2) every untouched row (VARIABLE past the sum)
// still holds the poison bytes, (3) both guards still hold the poison bytes, (4) the global
// relative error of the valid elements is small (catches a systematic bias that stays
// inside the per-element bound).
// ------------------------------------------------------------------------------------------
struct CompareReport {
    int64_t checked = 0;        ///< valid elements compared with the reference
    int64_t bad_values = 0;     ///< non-finite or out of tolerance
    int64_t missing_ref = 0;    ///< valid rows the reference did not cover (a test bug)
    int64_t bad_untouched = 0;  ///< bytes of rows past the sum that changed
    int64_t bad_guard = 0;      ///< bytes outside D that changed
    double worst_ratio = 0.0;   ///< max |x - ref| / bound over valid elements
    double global_diff = 0.0;   ///< sum (x-r)^2 / (sum x^2 + sum r^2)
    bool global_diff_bad = false;
    std::vector<std::string> samples;  ///< the first few failures, human readable

    bool ok() const {
        return bad_values == 0 && missing_ref == 0 && bad_untouched == 0 && bad_guard == 0 &&
               !global_diff_bad;
    }
    std::string summary() const;
};

CompareReport compare_output(const Geometry& g, moegemm_dtype_t out,
                             const std::vector<int32_t>& sizes, const Reference& ref,
                             const std::vector<uint8_t>& buffer, size_t guard_bytes,
                             moegemm_dtype_t in = MOEGEMM_DTYPE_BF16);

/// Bitwise equality of the valid rows of two downloaded buffers (same layout as above).
/// Returns the number of differing elements; `first` receives a description of the first.
int64_t diff_valid_rows(const Geometry& g, moegemm_dtype_t out, const std::vector<int32_t>& sizes,
                        const std::vector<uint8_t>& x, const std::vector<uint8_t>& y,
                        size_t guard_bytes, std::string* first);

/// Number of bytes of `buffer` in [begin, end) that differ from kPoisonByte.
int64_t count_unpoisoned(const std::vector<uint8_t>& buffer, size_t begin, size_t end);

}  // namespace mgt

#endif  // MOEGEMM_TESTS_SUPPORT_REFERENCE_HPP

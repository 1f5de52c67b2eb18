#include "support/reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace mgt {

// ------------------------------------------------------------------------------------------
// 16-bit floats
// ------------------------------------------------------------------------------------------

static uint32_t bits_of(float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return u;
}

static float float_of(uint32_t u) {
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
}

uint16_t bf16_from_float(float x) {
    uint32_t u = bits_of(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN, sign kept
    }
    // Round to nearest even on the 16 dropped bits; a carry into the exponent is correct
    // (including rounding the largest finite values up to infinity).
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}

float float_from_bf16(uint16_t bits) { return float_of(static_cast<uint32_t>(bits) << 16); }

uint16_t f16_from_float(float x) {
    const uint32_t u = bits_of(x);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t mag = u & 0x7fffffffu;
    if (mag > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
    // 65520 = 65504 + half an ulp: from there on round-to-nearest-even gives infinity.
    if (mag >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
    if (mag < 0x38800000u) {  // below 2^-14: f16 subnormal (or zero)
        const int e = static_cast<int>(mag >> 23);  // biased fp32 exponent
        if (e < 102) return static_cast<uint16_t>(sign);  // below 2^-25: rounds to zero
        const uint32_t m = (mag & 0x7fffffu) | 0x800000u;  // value = m * 2^(e - 150)
        const int shift = 126 - e;                         // value / 2^-24 = m >> shift
        uint32_t q = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1u);
        const uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) ++q;  // may become 0x400: min normal
        return static_cast<uint16_t>(sign | q);
    }
    const uint32_t r = mag - 0x38000000u;  // rebias the exponent from 127 to 15
    uint32_t q = r >> 13;
    const uint32_t rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;  // carry into exponent is fine
    return static_cast<uint16_t>(sign | q);
}

float float_from_f16(uint16_t bits) {
    const uint32_t sign = (static_cast<uint32_t>(bits) & 0x8000u) << 16;
    const uint32_t exp = (bits >> 10) & 0x1fu;
    const uint32_t man = bits & 0x3ffu;
    if (exp == 0) {
        const float v = std::ldexp(static_cast<float>(man), -24);  // exact
        return sign ? -v : v;
    }
    if (exp == 31) return float_of(sign | 0x7f800000u | (man << 13));
    return float_of(sign | ((exp + 112u) << 23) | (man << 13));
}

size_t dtype_bytes(moegemm_dtype_t t) {
    switch (t) {
        case MOEGEMM_DTYPE_BF16:
        case MOEGEMM_DTYPE_F16: return 2;
        case MOEGEMM_DTYPE_F32: return 4;
        case MOEGEMM_DTYPE_E4M3: return 1;
    }
    return 0;
}

double decode_element(moegemm_dtype_t t, const uint8_t* base, size_t index) {
    switch (t) {
        case MOEGEMM_DTYPE_BF16: {
            uint16_t h;
            std::memcpy(&h, base + index * 2, 2);
            return float_from_bf16(h);
        }
        case MOEGEMM_DTYPE_F16: {
            uint16_t h;
            std::memcpy(&h, base + index * 2, 2);
            return float_from_f16(h);
        }
        case MOEGEMM_DTYPE_F32: {
            float f;
            std::memcpy(&f, base + index * 4, 4);
            return f;
        }
        default: break;
    }
    throw std::invalid_argument("decode_element: unsupported dtype");
}

const char* layout_name(moegemm_layout_t l) {
    switch (l) {
        case MOEGEMM_LAYOUT_VARIABLE: return "VARIABLE";
        case MOEGEMM_LAYOUT_MASKED: return "MASKED";
        case MOEGEMM_LAYOUT_FIXED: return "FIXED";
    }
    return "layout?";
}

const char* weights_name(moegemm_weight_layout_t w) {
    switch (w) {
        case MOEGEMM_WEIGHTS_NK: return "NK";
        case MOEGEMM_WEIGHTS_KN: return "KN";
    }
    return "weights?";
}

const char* dtype_name(moegemm_dtype_t t) {
    switch (t) {
        case MOEGEMM_DTYPE_BF16: return "BF16";
        case MOEGEMM_DTYPE_F16: return "F16";
        case MOEGEMM_DTYPE_F32: return "F32";
        case MOEGEMM_DTYPE_E4M3: return "E4M3";
    }
    return "dtype?";
}

const char* backend_name(moegemm_backend_t b) {
    switch (b) {
        case MOEGEMM_BACKEND_AUTO: return "AUTO";
        case MOEGEMM_BACKEND_NATIVE: return "NATIVE";
        case MOEGEMM_BACKEND_CUBLASLT: return "CUBLASLT";
    }
    return "backend?";
}

// ------------------------------------------------------------------------------------------
// Geometry
// ------------------------------------------------------------------------------------------

int64_t Geometry::total_rows() const {
    return layout == MOEGEMM_LAYOUT_VARIABLE ? max_rows : int64_t{experts} * max_rows;
}

std::string Geometry::str() const {
    std::ostringstream os;
    os << layout_name(layout) << " weights=" << weights_name(weights) << " E=" << experts
       << " N=" << n << " K=" << k << " max_rows=" << max_rows;
    return os.str();
}

std::string sizes_str(const std::vector<int32_t>& sizes) {
    std::ostringstream os;
    os << '{';
    for (size_t i = 0; i < sizes.size(); ++i) os << (i ? "," : "") << sizes[i];
    os << '}';
    return os.str();
}

ClampedSizes clamp_sizes(const Geometry& g, const std::vector<int32_t>& raw) {
    if (raw.size() != static_cast<size_t>(g.experts))
        throw std::invalid_argument("clamp_sizes: one size per expert expected");
    ClampedSizes out;
    out.sizes.assign(raw.size(), 0);
    if (g.layout == MOEGEMM_LAYOUT_FIXED) {
        std::fill(out.sizes.begin(), out.sizes.end(), static_cast<int32_t>(g.max_rows));
        return out;
    }
    int64_t asked = 0;  // sum of the non-negative sizes so far (64-bit: never wraps)
    int64_t used = 0;   // rows handed out so far (VARIABLE)
    for (size_t e = 0; e < raw.size(); ++e) {
        int64_t want = raw[e];
        if (want < 0) {
            out.flags |= MOEGEMM_SIZES_CLAMPED_NEGATIVE;
            want = 0;
        }
        int64_t keep = want;
        if (g.layout == MOEGEMM_LAYOUT_VARIABLE) {
            asked += want;
            keep = std::min(want, g.max_rows - used);
            used += keep;
        } else if (want > g.max_rows) {
            keep = g.max_rows;
            out.flags |= MOEGEMM_SIZES_CLAMPED_CAPACITY;
        }
        out.sizes[e] = static_cast<int32_t>(keep);
    }
    if (g.layout == MOEGEMM_LAYOUT_VARIABLE && asked > g.max_rows)
        out.flags |= MOEGEMM_SIZES_CLAMPED_CAPACITY;
    return out;
}

std::string clamp_flags_str(uint32_t flags) {
    if (flags == 0) return "0";
    std::string s;
    auto add = [&](const char* name) { s += s.empty() ? name : std::string("|") + name; };
    if (flags & MOEGEMM_SIZES_CLAMPED_NEGATIVE) add("NEGATIVE");
    if (flags & MOEGEMM_SIZES_CLAMPED_CAPACITY) add("CAPACITY");
    const uint32_t other =
        flags & ~(MOEGEMM_SIZES_CLAMPED_NEGATIVE | MOEGEMM_SIZES_CLAMPED_CAPACITY);
    if (other) {
        std::ostringstream os;
        os << "0x" << std::hex << other;
        add(os.str().c_str());
    }
    return s;
}

RowSet valid_rows(const Geometry& g, const std::vector<int32_t>& sizes) {
    RowSet rs;
    switch (g.layout) {
        case MOEGEMM_LAYOUT_VARIABLE: {
            int64_t off = 0;
            for (int32_t e = 0; e < g.experts; ++e) {
                for (int64_t m = 0; m < sizes.at(static_cast<size_t>(e)); ++m) {
                    rs.row.push_back(off + m);
                    rs.expert.push_back(e);
                }
                off += sizes[static_cast<size_t>(e)];
            }
            break;
        }
        case MOEGEMM_LAYOUT_MASKED:
            for (int32_t e = 0; e < g.experts; ++e) {
                for (int64_t m = 0; m < sizes.at(static_cast<size_t>(e)); ++m) {
                    rs.row.push_back(int64_t{e} * g.max_rows + m);
                    rs.expert.push_back(e);
                }
            }
            break;
        case MOEGEMM_LAYOUT_FIXED: return all_slab_rows(g);
    }
    return rs;
}

RowSet all_slab_rows(const Geometry& g) {
    RowSet rs;
    for (int64_t r = 0; r < g.total_rows(); ++r) {
        rs.row.push_back(r);
        // For VARIABLE there are no slabs; callers use this for MASKED/FIXED only.
        rs.expert.push_back(static_cast<int32_t>(r / g.max_rows));
    }
    return rs;
}

std::pair<int64_t, int64_t> untouched_rows(const Geometry& g, const std::vector<int32_t>& sizes) {
    if (g.layout != MOEGEMM_LAYOUT_VARIABLE) return {0, 0};
    int64_t sum = 0;
    for (int32_t s : sizes) sum += s;
    return {sum, g.max_rows};
}

// ------------------------------------------------------------------------------------------
// Inputs
// ------------------------------------------------------------------------------------------

std::vector<uint16_t> random_16bit(size_t count, moegemm_dtype_t t, std::mt19937& rng,
                                   std::vector<double>* values) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<uint16_t> bits(count);
    if (values) values->resize(count);
    for (size_t i = 0; i < count; ++i) {
        uint16_t h = 0;
        double v = 0.0;
        do {  // never exactly zero: every element contributes to every dot product
            const float x = dist(rng);
            if (t == MOEGEMM_DTYPE_BF16) {
                h = bf16_from_float(x);
                v = float_from_bf16(h);
            } else {
                h = f16_from_float(x);
                v = float_from_f16(h);
            }
        } while (v == 0.0);
        bits[i] = h;
        if (values) (*values)[i] = v;
    }
    return bits;
}

std::vector<double> b_as_nk(const Geometry& g, const std::vector<double>& b) {
    if (g.weights == MOEGEMM_WEIGHTS_NK) return b;
    std::vector<double> out(b.size());
    for (int64_t e = 0; e < g.experts; ++e) {
        const double* src = b.data() + e * g.k * g.n;  // [K, N]
        double* dst = out.data() + e * g.n * g.k;      // [N, K]
        for (int64_t kk = 0; kk < g.k; ++kk)
            for (int64_t j = 0; j < g.n; ++j) dst[j * g.k + kk] = src[kk * g.n + j];
    }
    return out;
}

std::pair<size_t, size_t> scale_counts(const Geometry& g, moegemm_scale_mode_t mode) {
    const auto rows = static_cast<size_t>(g.total_rows());
    const auto experts = static_cast<size_t>(g.experts);
    const auto kb = static_cast<size_t>((g.k + 127) / 128);
    const auto nb = static_cast<size_t>((g.n + 127) / 128);
    switch (mode) {
        case MOEGEMM_SCALE_PER_TENSOR: return {1, 1};
        case MOEGEMM_SCALE_PER_EXPERT: return {1, experts};
        case MOEGEMM_SCALE_ROWWISE: return {rows, experts * static_cast<size_t>(g.n)};
        case MOEGEMM_SCALE_BLOCK: return {rows * kb, experts * nb * kb};
        default: return {0, 0};
    }
}

void dequantize(const Geometry& g, moegemm_scale_mode_t mode, const std::vector<float>& a_scale,
                const std::vector<float>& b_scale, std::vector<double>& a, std::vector<double>& b) {
    const int64_t rows = g.total_rows();
    auto sa = [&](int64_t r, int64_t k) -> double {
        return a_scale.at(static_cast<size_t>(a_scale_index(mode, g.k, r, k)));
    };
    auto sb = [&](int64_t e, int64_t n, int64_t k) -> double {
        return b_scale.at(static_cast<size_t>(b_scale_index(mode, g.n, g.k, e, n, k)));
    };
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < g.k; ++k) a.at(static_cast<size_t>(r * g.k + k)) *= sa(r, k);
    for (int64_t e = 0; e < g.experts; ++e)
        for (int64_t n = 0; n < g.n; ++n)
            for (int64_t k = 0; k < g.k; ++k)
                b.at(static_cast<size_t>((e * g.n + n) * g.k + k)) *= sb(e, n, k);
}

// ------------------------------------------------------------------------------------------
// Reference
// ------------------------------------------------------------------------------------------

Reference::Reference(const Geometry& g, const std::vector<double>& a,
                     const std::vector<double>& b_nk, const RowSet& rows)
    : n_(g.n), slot_(static_cast<size_t>(g.total_rows()), -1) {
    if (a.size() != g.a_elems() || b_nk.size() != g.b_elems())
        throw std::invalid_argument("Reference: input sizes do not match the geometry");
    for (size_t i = 0; i < rows.size(); ++i) slot_.at(static_cast<size_t>(rows.row[i])) =
        static_cast<int64_t>(i);
    value_.assign(rows.size() * static_cast<size_t>(g.n), 0.0);
    abs_.assign(rows.size() * static_cast<size_t>(g.n), 0.0);

    auto work = [&](size_t first, size_t last) {
        for (size_t i = first; i < last; ++i) {
            const double* arow = a.data() + rows.row[i] * g.k;
            const double* bexp = b_nk.data() + int64_t{rows.expert[i]} * g.n * g.k;
            double* out = value_.data() + i * static_cast<size_t>(g.n);
            double* out_abs = abs_.data() + i * static_cast<size_t>(g.n);
            for (int64_t j = 0; j < g.n; ++j) {
                const double* brow = bexp + j * g.k;
                double s = 0.0, sa = 0.0;
                for (int64_t kk = 0; kk < g.k; ++kk) {
                    const double p = arow[kk] * brow[kk];
                    s += p;
                    sa += std::fabs(p);
                }
                out[j] = s;
                out_abs[j] = sa;
            }
        }
    };
    const size_t work_items = rows.size() * static_cast<size_t>(g.n * g.k);
    unsigned threads = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
    if (work_items < (size_t{1} << 22) || rows.size() < 2 * threads) threads = 1;
    if (threads == 1) {
        work(0, rows.size());
    } else {
        std::vector<std::thread> pool;
        const size_t chunk = (rows.size() + threads - 1) / threads;
        for (unsigned t = 0; t < threads; ++t) {
            const size_t first = std::min(rows.size(), t * chunk);
            const size_t last = std::min(rows.size(), first + chunk);
            if (first < last) pool.emplace_back(work, first, last);
        }
        for (auto& th : pool) th.join();
    }
    for (double v : value_) norm2_ += v * v;
}

bool Reference::has_row(int64_t row) const {
    return row >= 0 && row < static_cast<int64_t>(slot_.size()) &&
           slot_[static_cast<size_t>(row)] >= 0;
}

const double* Reference::value(int64_t row) const {
    return value_.data() + slot_.at(static_cast<size_t>(row)) * n_;
}

const double* Reference::abs_sum(int64_t row) const {
    return abs_.data() + slot_.at(static_cast<size_t>(row)) * n_;
}

// ------------------------------------------------------------------------------------------
// Tolerance
//
// x is the library's output element, ref the exact dot product S = sum_k a_k b_k.
//
// 1. Products. a_k and b_k are bf16 (8 significant bits) or f16 (11 bits; the smallest
//    input, a subnormal near 2^-24, times another input stays far above fp32's normal
//    range), so every product has <= 22 significant bits and is exact in fp32.
//
// 2. Accumulation in fp32. Whatever the order (k loop, tensor-core blocks, split-K partial
//    sums reduced in fp32), the classic bound for a summation tree of K terms is
//        |y - S| <= gamma_K * sum_k |a_k b_k|,   gamma_K ~= K * u32,  u32 = 2^-24,
//    for round-to-nearest. Tensor cores do not round to nearest inside an MMA: they align
//    the products of a block to the largest exponent and truncate, so one step can lose a
//    full ulp instead of half, and the alignment loses up to another ulp of the largest
//    term. We allow 4x the round-to-nearest bound: acc = K * 2^-22, a coefficient of
//    sum |a_k b_k| that we compute per element in the reference. This is a worst-case bound,
//    so it is not a source of flaky failures, yet it stays 100-1000x below the error of any
//    structural bug (a wrong row, expert or transpose changes x by O(|S|)), and below the
//    error of accumulating in bf16 or f16 for the K used here.
//
// 3. Output rounding. The fp32 value y is rounded once to the output type with unit
//    roundoff u_out = 2^-8 (bf16), 2^-11 (f16), 0 (f32). We allow 2 * u_out (rtol), which
//    also accepts round-toward-zero or one extra intermediate rounding:
//        |x - S| <= |x - y| + |y - S| <= rtol (|S| + E_acc) + E_acc.
//    That is about 2 bf16 ulps (rtol 2^-7) and 2 f16 ulps (rtol 2^-10).
//
// 4. Absolute floor: f16 results below 2^-14 are subnormal with spacing 2^-24, so their
//    rounding error is absolute, not relative: atol = 2^-24 for f16. bf16 and f32 keep
//    the fp32 exponent range; atol = 2^-126 there covers a flush-to-zero epilogue.
//
// 5. Global check (DeepGEMM's calc_diff): sum (x-r)^2 / (sum x^2 + sum r^2). With
//    round-to-nearest output it is at most u_out^2 / 2 (+ the accumulation error, which is
//    far smaller): 7.6e-6 for bf16, 1.2e-7 for f16; a host simulation measured 1.4e-6 and
//    2.2e-8. Thresholds: 1e-5 (DeepGEMM's bf16 value), 1e-6 for f16 and 1e-8 for f32
//    (a simulated fp32 accumulation gives ~1e-14). It is an aggregate second opinion: the
//    per-element bound lets every element be 2 ulps off, this one requires that on average
//    they are about as close as correct rounding makes them.
// ------------------------------------------------------------------------------------------

double Tolerance::bound(double ref, double abs_sum) const {
    return rtol * std::fabs(ref) + (1.0 + rtol) * acc * abs_sum + atol;
}

Tolerance tolerance_for(moegemm_dtype_t out, int64_t k, moegemm_dtype_t in) {
    Tolerance t;
    t.acc = static_cast<double>(k) * std::ldexp(1.0, -22);
    if (in == MOEGEMM_DTYPE_E4M3) {
        // Hopper's fp8 MMAs add their products into the accumulator with ~14 significant
        // bits between promotions to fp32 (why DeepSeek promotes every 128 K): measured on an
        // H200 (cuBLASLt, K = 336, F32 out) up to 1.2e-4 * sum |a b|. 2^-11 leaves 4x room and
        // is still 100x below what a wrong scale, row or expert produces.
        t.acc = std::max(t.acc, std::ldexp(1.0, -11));
    }
    switch (out) {
        case MOEGEMM_DTYPE_BF16:
            t.rtol = 2.0 * std::ldexp(1.0, -8);
            t.atol = std::ldexp(1.0, -126);
            t.max_global_diff = 1e-5;
            break;
        case MOEGEMM_DTYPE_F16:
            t.rtol = 2.0 * std::ldexp(1.0, -11);
            t.atol = std::ldexp(1.0, -24);
            t.max_global_diff = 1e-6;
            break;
        default:
            t.rtol = 0.0;
            t.atol = std::ldexp(1.0, -126);
            t.max_global_diff = in == MOEGEMM_DTYPE_E4M3 ? 1e-6 : 1e-8;
            break;
    }
    return t;
}

// ------------------------------------------------------------------------------------------
// Comparison
// ------------------------------------------------------------------------------------------

static std::string hex_bytes(const uint8_t* p, size_t n) {
    std::ostringstream os;
    os << "0x" << std::hex << std::setfill('0');
    for (size_t i = n; i-- > 0;) os << std::setw(2) << static_cast<unsigned>(p[i]);
    return os.str();
}

int64_t count_unpoisoned(const std::vector<uint8_t>& buffer, size_t begin, size_t end) {
    int64_t bad = 0;
    end = std::min(end, buffer.size());
    for (size_t i = begin; i < end; ++i) bad += buffer[i] != kPoisonByte;
    return bad;
}

// Row's local index inside its expert, for messages.
static int64_t local_row(const Geometry& g, const std::vector<int32_t>& sizes, int64_t row,
                         int32_t expert) {
    if (g.layout != MOEGEMM_LAYOUT_VARIABLE) return row - int64_t{expert} * g.max_rows;
    int64_t off = 0;
    for (int32_t e = 0; e < expert; ++e) off += sizes[static_cast<size_t>(e)];
    return row - off;
}

CompareReport compare_output(const Geometry& g, moegemm_dtype_t out,
                             const std::vector<int32_t>& sizes, const Reference& ref,
                             const std::vector<uint8_t>& buffer, size_t guard_bytes,
                             moegemm_dtype_t in) {
    CompareReport rep;
    const size_t eb = dtype_bytes(out);
    const size_t d_bytes = g.d_elems() * eb;
    if (buffer.size() != d_bytes + 2 * guard_bytes) {
        rep.missing_ref = 1;
        rep.samples.push_back("test bug: downloaded buffer has the wrong size");
        return rep;
    }
    const uint8_t* d = buffer.data() + guard_bytes;
    const Tolerance tol = tolerance_for(out, g.k, in);
    const size_t max_samples = 8;

    const RowSet rows = valid_rows(g, sizes);
    double sum_diff2 = 0.0, sum_x2 = 0.0, sum_r2 = 0.0;
    for (size_t i = 0; i < rows.size(); ++i) {
        const int64_t row = rows.row[i];
        if (!ref.has_row(row)) {
            ++rep.missing_ref;
            if (rep.samples.size() < max_samples)
                rep.samples.push_back("test bug: no reference for row " + std::to_string(row));
            continue;
        }
        const double* rv = ref.value(row);
        const double* ra = ref.abs_sum(row);
        for (int64_t j = 0; j < g.n; ++j) {
            const size_t idx = static_cast<size_t>(row * g.n + j);
            const double x = decode_element(out, d, idx);
            const double r = rv[j];
            const double bound = tol.bound(r, ra[j]);
            ++rep.checked;
            const bool finite = std::isfinite(x);
            const double err = finite ? std::fabs(x - r) : std::numeric_limits<double>::infinity();
            if (finite) {
                rep.worst_ratio = std::max(rep.worst_ratio, err / bound);
                sum_diff2 += (x - r) * (x - r);
                sum_x2 += x * x;
                sum_r2 += r * r;
            }
            if (!finite || err > bound) {
                ++rep.bad_values;
                if (rep.samples.size() < max_samples) {
                    std::ostringstream os;
                    os << std::setprecision(9) << "expert " << rows.expert[i] << " row "
                       << local_row(g, sizes, row, rows.expert[i]) << " (D row " << row
                       << ") col " << j << ": got " << x << " ["
                       << hex_bytes(d + idx * eb, eb) << "], want " << r;
                    if (finite) os << ", |diff| " << err << " > bound " << bound;
                    else os << " (not finite: never written?)";
                    rep.samples.push_back(os.str());
                }
            }
        }
    }
    if (sum_x2 + sum_r2 > 0.0) {
        rep.global_diff = sum_diff2 / (sum_x2 + sum_r2);
        rep.global_diff_bad = rep.global_diff > tol.max_global_diff;
    }

    const auto untouched = untouched_rows(g, sizes);
    if (untouched.second > untouched.first) {
        const size_t row_bytes = static_cast<size_t>(g.n) * eb;
        for (int64_t row = untouched.first; row < untouched.second; ++row) {
            const size_t begin = static_cast<size_t>(row) * row_bytes;
            const int64_t bad = count_unpoisoned(buffer, guard_bytes + begin,
                                                 guard_bytes + begin + row_bytes);
            if (bad && rep.samples.size() < max_samples) {
                rep.samples.push_back("D row " + std::to_string(row) +
                                      " lies past the sum of the sizes but " +
                                      std::to_string(bad) + " of its bytes were written");
            }
            rep.bad_untouched += bad;
        }
    }

    const int64_t front = count_unpoisoned(buffer, 0, guard_bytes);
    const int64_t back = count_unpoisoned(buffer, guard_bytes + d_bytes, buffer.size());
    rep.bad_guard = front + back;
    if (front) rep.samples.push_back(std::to_string(front) + " bytes written before D");
    if (back) rep.samples.push_back(std::to_string(back) + " bytes written past the end of D");
    return rep;
}

std::string CompareReport::summary() const {
    std::ostringstream os;
    os << std::setprecision(3) << "checked " << checked << " elements: " << bad_values
       << " wrong, worst |diff|/bound " << worst_ratio << ", global diff " << global_diff
       << (global_diff_bad ? " (TOO LARGE)" : "") << "; " << bad_untouched
       << " bytes written in rows that must stay untouched; " << bad_guard
       << " bytes written outside D";
    if (missing_ref) os << "; " << missing_ref << " rows without reference (test bug)";
    for (const auto& s : samples) os << "\n  " << s;
    return os.str();
}

int64_t diff_valid_rows(const Geometry& g, moegemm_dtype_t out, const std::vector<int32_t>& sizes,
                        const std::vector<uint8_t>& x, const std::vector<uint8_t>& y,
                        size_t guard_bytes, std::string* first) {
    const size_t eb = dtype_bytes(out);
    const size_t row_bytes = static_cast<size_t>(g.n) * eb;
    if (x.size() != y.size() || x.size() < guard_bytes + g.d_elems() * eb) {
        if (first) *first = "buffers of different sizes";
        return -1;
    }
    int64_t diffs = 0;
    const RowSet rows = valid_rows(g, sizes);
    for (size_t i = 0; i < rows.size(); ++i) {
        const size_t base = guard_bytes + static_cast<size_t>(rows.row[i]) * row_bytes;
        for (int64_t j = 0; j < g.n; ++j) {
            const size_t at = base + static_cast<size_t>(j) * eb;
            if (std::memcmp(x.data() + at, y.data() + at, eb) != 0) {
                if (diffs == 0 && first) {
                    std::ostringstream os;
                    os << "D row " << rows.row[i] << " col " << j << ": "
                       << hex_bytes(x.data() + at, eb) << " vs " << hex_bytes(y.data() + at, eb);
                    *first = os.str();
                }
                ++diffs;
            }
        }
    }
    return diffs;
}

}  // namespace mgt

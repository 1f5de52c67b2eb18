// E4M3 inputs as the header defines them, for both references: the value of a code, and where
// an element's scale sits in the a_scale / b_scale arrays of each scale mode
// (moegemm_scale_mode_t's table). Plain inline functions, compiled for the host reference
// (reference.cpp, the tests) and for the GPU oracle (gpu_reference.cu) alike, so the two
// read the layout one way; nothing here is shared with the library.
#ifndef MOEGEMM_TESTS_SUPPORT_E4M3_HPP
#define MOEGEMM_TESTS_SUPPORT_E4M3_HPP

#include <cmath>
#include <cstdint>

#include "moegemm/moegemm.h"

#if defined(__CUDACC__)
#define MGT_HOST_DEVICE __host__ __device__
#else
#define MGT_HOST_DEVICE
#endif

namespace mgt {

/// The value of an E4M3 (fn) code: bias 7, subnormals below exponent field 1, no infinities
/// (0x7F and 0xFF are NaN).
MGT_HOST_DEVICE inline double e4m3_value(uint8_t code) {
    const int exponent = (code >> 3) & 0xF;
    const int mantissa = code & 0x7;
    if (exponent == 0xF && mantissa == 0x7) return NAN;
    // Exact powers of two (no ldexp: the same code on host and device).
    const double unit = exponent == 0 ? 1.0 / 512.0
                                      : static_cast<double>(int64_t{1} << exponent) / 1024.0;
    const double magnitude = (exponent == 0 ? mantissa : 8 + mantissa) * unit;
    return (code & 0x80) ? -magnitude : magnitude;
}

/// Index in a_scale of the scale of A[row, k] (`row` the global row of A; K the problem's).
MGT_HOST_DEVICE inline int64_t a_scale_index(int mode, int64_t k_size, int64_t row, int64_t k) {
    switch (mode) {
        case MOEGEMM_SCALE_ROWWISE: return row;
        case MOEGEMM_SCALE_BLOCK: return row * ((k_size + 127) / 128) + k / 128;
        default: return 0;
    }
}

/// Index in b_scale of the scale of B_e[n, k] (N and K the problem's).
MGT_HOST_DEVICE inline int64_t b_scale_index(int mode, int64_t n_size, int64_t k_size,
                                             int64_t e, int64_t n, int64_t k) {
    switch (mode) {
        case MOEGEMM_SCALE_PER_EXPERT: return e;
        case MOEGEMM_SCALE_ROWWISE: return e * n_size + n;
        case MOEGEMM_SCALE_BLOCK:
            return (e * ((n_size + 127) / 128) + n / 128) * ((k_size + 127) / 128) + k / 128;
        default: return 0;
    }
}

}  // namespace mgt

#undef MGT_HOST_DEVICE

#endif  // MOEGEMM_TESTS_SUPPORT_E4M3_HPP

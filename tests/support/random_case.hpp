// Random problems for the stress and concurrency tests: every field of a CaseSpec drawn from a
// seed, biased towards what breaks kernels (empty experts, row counts around tile edges, N and
// K that are multiples of 8 but not of the tile, unaligned-to-256 tensors, hostile device
// sizes) and capped so that thousands of cases run in about a minute.
//
// The generator uses its own integer arithmetic (no std:: distributions, whose results differ
// between standard libraries), so a (seed, index) pair names the same case everywhere.
#ifndef MOEGEMM_TESTS_SUPPORT_RANDOM_CASE_HPP
#define MOEGEMM_TESTS_SUPPORT_RANDOM_CASE_HPP

#include <cstdint>
#include <string>
#include <vector>

#include "support/gpu_case.hpp"

namespace mgt {

/// Bounds on one random case. "rows" below is every row of A and D (max_rows for VARIABLE,
/// experts * max_rows otherwise), so the caps hold whatever the sizes.
struct CaseLimits {
    int32_t max_experts = 512;
    int64_t max_dim = 8192;                     ///< N and K, multiples of 8 from 8
    int64_t mac_cap = int64_t{64} << 20;        ///< rows * N * K
    int64_t elem_cap = int64_t{64} << 20;       ///< elements of A, of B and of D
    double big_fraction = 0.03;                 ///< cases that get the big caps instead
    int64_t big_mac_cap = int64_t{1} << 30;
    int64_t big_elem_cap = int64_t{256} << 20;
    double multi_round_fraction = 0.15;         ///< cases that execute 2-3 times, new sizes
    double hostile_fraction = 0.3;              ///< device-size cases with hostile values
};

/// What the generator may pick from.
struct CaseChoices {
    std::vector<moegemm_backend_t> backends;  ///< non-empty
    /// Native kernel names that a NATIVE case may force (problem.force_kernel); may be empty.
    std::vector<std::string> native_kernels;
    /// Fraction of cases with E4M3 inputs (a scale mode drawn uniformly). Drawn from a stream
    /// of their own: the 16-bit cases of a seed are the same whatever this is.
    double e4m3_fraction = 0.0;
};

struct RandomCase {
    CaseSpec spec;
    bool big = false;      ///< drawn with the big caps
    bool hostile = false;  ///< device sizes with negative or over-capacity values
};

/// The seed of case `index` of a run seeded with `base`.
uint64_t case_seed(uint64_t base, uint64_t index);

/// One random case. Host sizes are always valid; device sizes may be hostile.
RandomCase random_case(uint64_t seed, const CaseLimits& limits, const CaseChoices& choices);

/// Multiply-accumulates the library performs on valid rows over all rounds (2 FLOPs each),
/// from the sizes clamped as the GPU clamps device sizes.
int64_t case_macs(const CaseSpec& spec);

}  // namespace mgt

#endif  // MOEGEMM_TESTS_SUPPORT_RANDOM_CASE_HPP

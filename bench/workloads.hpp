// MoE workloads: the file format of bench/workloads/moe.txt and the quantities derived from it.
#pragma once

#include <moegemm/moegemm.h>

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

namespace moegemm_bench {

/// Bytes of an element of A or B of `input_type`: 1 for E4M3, 2 for bf16.
int64_t element_bytes(moegemm_dtype_t input_type);

/// One grouped GEMM in the VARIABLE layout: A [sum rows, K] sorted by expert, B [E, N, K],
/// D [sum rows, N]; D is bf16, A and B bf16 or E4M3.
struct Workload {
    std::string name;
    int32_t experts = 0;
    int64_t n = 0;
    int64_t k = 0;
    std::vector<int32_t> rows;  ///< rows of each expert, `experts` values
    /// Type of A and B and, for E4M3, the layout of their scales (moegemm_scale_mode_t; NONE for
    /// bf16). The file gives shapes only: the run's --dtype and --scale-mode set these.
    moegemm_dtype_t input_type = MOEGEMM_DTYPE_BF16;
    moegemm_scale_mode_t scale_mode = MOEGEMM_SCALE_NONE;

    int64_t total_rows() const;
    int32_t max_expert_rows() const;
    int32_t min_expert_rows() const;
    int32_t active_experts() const;  ///< experts with at least one row

    /// 2 * sum(M_e) * N * K: valid rows only, whatever a backend computes beyond them.
    double flops() const;
    /// The least traffic any implementation needs: A + D + the weights of the experts that get
    /// rows (the weights of idle experts need not be read), A and B at input_bytes() an element,
    /// D at 2. fp8 scales are not counted (at most 1/32 of A's bytes, BLOCK's).
    double min_bytes() const;

    /// Bytes of an element of A and B: element_bytes(input_type).
    int64_t input_bytes() const { return element_bytes(input_type); }

    /// fp32 values of the fp8 scales, laid out as moegemm.h documents for each scale mode, for
    /// a plan of `plan_rows` rows of A ("rows" there: the sum of rows here, E x max_rows for
    /// MASKED). a_scales_per_row: values per row of A (ROWWISE 1, BLOCK ceil(K / 128)), or 0
    /// when one value serves every row (PER_TENSOR, PER_EXPERT). All 0 without scales (bf16).
    int64_t a_scales_per_row() const;
    int64_t a_scale_count(int64_t plan_rows) const;
    int64_t b_scale_count() const;
};

/// Reads workloads, one per line: `name E N K rows_0 ... rows_{E-1}`. `#` starts a comment.
/// Throws BenchError ("invalid workload file") naming the source, line and rule broken.
std::vector<Workload> parse_workloads(std::istream& in, const std::string& source);
/// A workload file, or, for a path `random:COUNT[:SEED]`, random_workloads(COUNT, SEED) (seed
/// 1 by default).
std::vector<Workload> load_workloads(const std::string& path);

/// Caps of random_workloads' problems.
inline constexpr int32_t kRandomMaxExperts = 512;
inline constexpr int64_t kRandomMinDim = 256, kRandomMaxDim = 32768;  ///< N and K
inline constexpr int64_t kRandomMaxTokens = 16384;
inline constexpr int32_t kRandomMaxExpertRows = 16384;
inline constexpr double kRandomMaxWeightBytes = 8.0 * (1 << 30);      ///< E * N * K * 2
inline constexpr double kRandomMaxActivationBytes = 2.0 * (1 << 30);  ///< routed rows * max(N, K) * 2

/// Random MoE problems beyond the workload file, for judging the heuristic against an
/// exhaustive oracle (`moegemm-bench --workloads random:200 --exhaustive`). Problem i of a seed
/// is the same on every machine (its own splitmix64 stream; no std distribution): E
/// log-uniform in [1, 512]; top_k one of 1, 2, 4, 6, 8 up to E; T tokens log-uniform in
/// [1, 16384] (decode to prefill); N and K multiples of 256, log-uniform in [256, 32768],
/// halved while the weights pass 8 GiB; each token's top_k distinct experts drawn with
/// P(rank r) proportional to 1 / (r + 1)^s, s uniform in [0, 1.5], ranks a random permutation
/// of the experts; rows per expert capped at 16384 (the rest dropped). Names:
/// `rand<seed>-<i>-E<E>-k<k>-T<T>-N<N>-K<K>`.
std::vector<Workload> random_workloads(int count, uint64_t seed);

/// The workloads whose names are listed in `names` (in file order); all when `names` is empty.
/// Throws BenchError for a name the file does not have.
std::vector<Workload> select_workloads(const std::vector<Workload>& all,
                                       const std::vector<std::string>& names);

}  // namespace moegemm_bench

// MoE workloads: the file format of bench/workloads/moe.txt and the quantities derived from it.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

namespace moegemm_bench {

/// One grouped GEMM in the VARIABLE layout: A [sum rows, K] sorted by expert, B [E, N, K],
/// D [sum rows, N], all bf16.
struct Workload {
    std::string name;
    int32_t experts = 0;
    int64_t n = 0;
    int64_t k = 0;
    std::vector<int32_t> rows;  ///< rows of each expert, `experts` values

    int64_t total_rows() const;
    int32_t max_expert_rows() const;
    int32_t min_expert_rows() const;
    int32_t active_experts() const;  ///< experts with at least one row

    /// 2 * sum(M_e) * N * K: valid rows only, whatever a backend computes beyond them.
    double flops() const;
    /// The least traffic any implementation needs: A + D + the weights of the experts that get
    /// rows (the weights of idle experts need not be read).
    double min_bytes() const;
};

/// Reads workloads, one per line: `name E N K rows_0 ... rows_{E-1}`. `#` starts a comment.
/// Throws BenchError ("invalid workload file") naming the source, line and rule broken.
std::vector<Workload> parse_workloads(std::istream& in, const std::string& source);
std::vector<Workload> load_workloads(const std::string& path);

/// The workloads whose names are listed in `names` (in file order); all when `names` is empty.
/// Throws BenchError for a name the file does not have.
std::vector<Workload> select_workloads(const std::vector<Workload>& all,
                                       const std::vector<std::string>& names);

}  // namespace moegemm_bench

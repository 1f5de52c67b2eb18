// Command line of moegemm-bench.
#pragma once

#include <moegemm/moegemm.h>

#include "plan_options.hpp"  // the library's comparison options (src/)

#include <stdexcept>
#include <string>
#include <vector>

namespace moegemm_bench {

struct Options {
    std::string workloads_path;     ///< empty: the default file (see default_workloads_path)
    std::string json_path;          ///< --json; empty: none (besides $OUT/bench.json)
    std::vector<std::string> only;  ///< workload names; empty: all
    int min_reps = 20;
    double min_time_ms = 200.0;
    double warmup_ms = 300.0;       ///< --warmup: time spent before timing (steady clocks)
    int rounds = 1;                 ///< --rounds: each workload's rows measured in turn, N times
    bool check = false;
    bool exhaustive = false;        ///< also time every kernel variant the library has
    bool autotune = false;          ///< --autotune: also time autotuned plans
    bool no_peers = false;          ///< --no-peers: libmoegemm's rows only (A/B runs)
    moegemm_backend_t library_backend = MOEGEMM_BACKEND_AUTO;
    /// --dtype: type of A and B (BF16 or E4M3); D is always bf16.
    moegemm_dtype_t dtype = MOEGEMM_DTYPE_BF16;
    /// --scale-mode: PER_TENSOR unless given for E4M3; always NONE for bf16.
    moegemm_scale_mode_t scale_mode = MOEGEMM_SCALE_NONE;
    int device = 0;
    /// --set NAME=0|1: comparison options of every libmoegemm plan (src/plan_options.hpp).
    moegemm::PlanOptions plan_options;
    bool help = false;
};

/// A malformed command line; the message says what was wrong.
class UsageError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

Options parse_options(int argc, const char* const* argv);
std::string usage_text();

/// "auto", "native", "cublaslt".
const char* backend_name(moegemm_backend_t backend);
/// "bf16", "e4m3" (the --dtype values), "f16", "f32".
const char* dtype_name(moegemm_dtype_t dtype);
/// "none", "per_tensor", "per_expert", "rowwise", "block" (the --scale-mode values but "none").
const char* scale_mode_name(moegemm_scale_mode_t mode);

/// bench/workloads/moe.txt: the source path compiled in when it exists (the build machine),
/// else the same file below the current directory or beside the executable's build tree (a
/// checkout copied to another machine). Throws BenchError naming every path tried.
std::string default_workloads_path();

}  // namespace moegemm_bench

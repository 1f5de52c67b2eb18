#include "options.hpp"

#include "cuda_utils.hpp"

#include <fmt/format.h>

#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <string_view>
#include <vector>

#ifndef MOEGEMM_BENCH_DEFAULT_WORKLOADS
#define MOEGEMM_BENCH_DEFAULT_WORKLOADS "bench/workloads/moe.txt"
#endif

namespace moegemm_bench {

namespace {

constexpr std::string_view kRelativeWorkloads = "bench/workloads/moe.txt";

int parse_int(const std::string& option, const std::string& text, int lo, int hi) {
    char* end = nullptr;
    errno = 0;
    const long value = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno != 0 || value < lo || value > hi) {
        throw UsageError(
            fmt::format("{} expects an integer in [{}, {}], got '{}'", option, lo, hi, text));
    }
    return static_cast<int>(value);
}

double parse_positive(const std::string& option, const std::string& text) {
    char* end = nullptr;
    errno = 0;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || errno != 0 || !(value > 0.0)) {
        throw UsageError(fmt::format("{} expects a positive number, got '{}'", option, text));
    }
    return value;
}

std::vector<std::string> split_names(const std::string& text) {
    std::vector<std::string> names;
    size_t start = 0;
    while (start <= text.size()) {
        const size_t comma = std::min(text.find(',', start), text.size());
        if (comma > start) names.push_back(text.substr(start, comma - start));
        start = comma + 1;
    }
    if (names.empty()) throw UsageError("--only expects NAME[,NAME...]");
    return names;
}

/// An enumerator of the C API and its name on the command line and in the report.
template <typename Enum>
struct Named {
    Enum value;
    const char* name;
};

constexpr Named<moegemm_backend_t> kBackendNames[] = {{MOEGEMM_BACKEND_AUTO, "auto"},
                                                      {MOEGEMM_BACKEND_NATIVE, "native"},
                                                      {MOEGEMM_BACKEND_CUBLASLT, "cublaslt"}};
constexpr Named<moegemm_dtype_t> kDtypeNames[] = {{MOEGEMM_DTYPE_BF16, "bf16"},
                                                  {MOEGEMM_DTYPE_F16, "f16"},
                                                  {MOEGEMM_DTYPE_F32, "f32"},
                                                  {MOEGEMM_DTYPE_E4M3, "e4m3"}};
constexpr Named<moegemm_scale_mode_t> kScaleModeNames[] = {
    {MOEGEMM_SCALE_NONE, "none"},
    {MOEGEMM_SCALE_PER_TENSOR, "per_tensor"},
    {MOEGEMM_SCALE_PER_EXPERT, "per_expert"},
    {MOEGEMM_SCALE_ROWWISE, "rowwise"},
    {MOEGEMM_SCALE_BLOCK, "block"}};

template <typename Enum, size_t N>
const char* name_in(const Named<Enum> (&names)[N], Enum value) {
    for (const Named<Enum>& named : names) {
        if (named.value == value) return named.name;
    }
    return "unknown";
}

/// The value among `values` whose name (`name_of`) is `text`, else a UsageError listing the names.
template <typename Enum>
Enum parse_name(const std::string& option, const std::string& text,
                std::initializer_list<Enum> values, const char* (*name_of)(Enum)) {
    std::string names;
    for (const Enum value : values) {
        if (text == name_of(value)) return value;
        names += (names.empty() ? "" : ", ") + std::string(name_of(value));
    }
    throw UsageError(fmt::format("{} expects one of {}, got '{}'", option, names, text));
}

bool file_exists(const std::string& path) {
    return std::ifstream(path).good();
}

/// The directory of the running executable, from /proc (Linux); empty if unknown.
std::string executable_directory() {
    std::string path(4096, '\0');
    const ssize_t length = readlink("/proc/self/exe", path.data(), path.size() - 1);
    if (length <= 0) return {};
    path.resize(static_cast<size_t>(length));
    return path.substr(0, path.rfind('/'));
}

}  // namespace

const char* backend_name(moegemm_backend_t backend) {
    return name_in(kBackendNames, backend);
}

const char* dtype_name(moegemm_dtype_t dtype) {
    return name_in(kDtypeNames, dtype);
}

const char* scale_mode_name(moegemm_scale_mode_t mode) {
    return name_in(kScaleModeNames, mode);
}

std::string usage_text() {
    return R"(usage: moegemm-bench [options]

Times libmoegemm on MoE grouped-GEMM workloads beside cuBLAS peers measured in the same run
(a cuBLASLt per-expert loop, cublasGemmGroupedBatchedEx, padded strided-batched cuBLASLt), and
holds every time against the device's ceilings (dense GEMM of the run's input type, device
copy).

libmoegemm is measured three ways; the table's "vs lib" column holds each row against the first:
  libmoegemm[B]       eager moegemm_execute: VARIABLE layout, host sizes (B = --backend)
  libmoegemm[graph]   the same plan, each rotation set's execute captured once into a CUDA
                      graph and replayed (cudaGraphLaunch)
  libmoegemm[masked]  MASKED layout, sizes in device memory, max_rows = 2 x the largest
                      expert, expected_rows = mean rows per expert; only on workloads whose
                      largest expert has <= 256 rows (decode: the masked buffers of prefill
                      workloads would be huge)
For libmoegemm[B] and [masked] it also reports the host cost of one call: CPU time of the
calling thread, median of 20 batches of 100 back-to-back calls (stream synchronized between
batches, outside the timed part); and, after all rows, that of a bare launch with the library's
parameter size and launch attributes of a kernel that stays as long as libmoegemm[B]'s, the
floor under it.

options:
  --workloads FILE    workload file (default: bench/workloads/moe.txt of the source tree),
                      or random:COUNT[:SEED]: COUNT seed-stable random MoE problems
                      (bench/workloads.hpp, random_workloads)
  --only NAME[,NAME]  measure only these workloads
  --backend B         libmoegemm backend: auto (default), cublaslt or native
  --dtype T           type of A and B: bf16 (default) or e4m3; D is bf16 either way. e4m3:
                      random codes with |x| in [0.25, 3.75], FLOPs and min bytes count 1 byte
                      per A and B element, the dense ceiling is an fp8 cuBLASLt GEMM with
                      per-tensor scales; of the peers only the cuBLASLt loop runs, and only
                      with per_tensor scales (cublasGemmGroupedBatchedEx and padded-batched
                      are skipped, as the report says); a libmoegemm row whose scale mode
                      this build or GPU does not serve reads "not supported", not a failure
  --scale-mode S      e4m3 scales: per_tensor (default), per_expert, rowwise or block, laid
                      out as moegemm.h says (random values in [0.5, 2)); with masked, the
                      per-row A scales follow the masked rows (e x max_rows + m)
  --reps N            at least N timed repetitions per measurement (default 20)
  --min-time MS       and at least MS milliseconds of them (default 200)
  --warmup MS         run each measurement untimed for MS milliseconds first (default 300):
                      under sustained load the GPU's clocks settle lower, and measurements
                      taken before they settle favour whatever runs after an idle pause
  --rounds N          measure each workload's rows in turn, the whole turn N times (default
                      1), and report each row's median over the rounds' medians (the JSON
                      keeps every round's): a GPU at its power cap lowers its clocks for
                      tenths of a second at a time, which a single round reads as a
                      difference between rows
  --check             compare libmoegemm's D (each of the three ways; masked: its valid rows)
                      and cublasGemmGroupedBatchedEx's with the cuBLASLt loop's;
                      max |diff| / max |ref| above 1e-2 fails. e4m3: only with per_tensor
                      scales (the loop's only mode); other modes skip it with a note
  --no-peers          time libmoegemm's rows only (comparisons of two builds or settings);
                      not with --check, whose reference is the cuBLASLt loop
  --exhaustive        also time every kernel variant of libmoegemm (moegemm_kernel_name,
                      forced through problem.force_kernel) and report how far the
                      heuristic's pick is from the best one
  --autotune          also time plans tuned by moegemm_plan_autotune (host and device sizes),
                      after every other row of the workload: a tuned result becomes the
                      process's choice for the problem (with --exhaustive: how far the tuned
                      plan is from the best variant)
  --json FILE         write the results as JSON to FILE (also to $OUT/bench.json when OUT is set)
  --device N          CUDA device ordinal (default 0)
  --set NAME=0|1      a comparison option of every libmoegemm plan (repeatable): tile_tickets,
                      host_schedule, dependent_launch, swap_ab, block_scale_ring,
                      skip_idle_halves, unhinted_weight_copies (all 1 by default: the
                      library's choices; bench/README.md)
  -h, --help          this text

environment:
  MOEGEMM_GIT_COMMIT  commit recorded in the results (default: the commit at configure time)
  OUT                 directory that also receives bench.json

exit status: 0 all measured; 1 error; 2 no CUDA GPU; 3 some measurement or check failed
(recorded in the table and the JSON; e4m3 rows "not supported" and skipped checks are not
failures).
)";
}

Options parse_options(int argc, const char* const* argv) {
    Options options;
    for (int i = 1; i < argc; ++i) {
        std::string argument = argv[i];
        if (argument == "-h" || argument == "--help") {
            options.help = true;
            continue;
        }
        if (argument.rfind("--", 0) != 0)
            throw UsageError(fmt::format("unexpected argument '{}'", argument));

        // Both "--name value" and "--name=value".
        std::string name = argument, value;
        bool has_value = false;
        if (const size_t equals = argument.find('='); equals != std::string::npos) {
            name = argument.substr(0, equals);
            value = argument.substr(equals + 1);
            has_value = true;
        }
        if (name == "--autotune") {
            if (has_value) throw UsageError("--autotune takes no value");
            options.autotune = true;
            continue;
        }
        if (name == "--exhaustive") {
            if (has_value) throw UsageError("--exhaustive takes no value");
            options.exhaustive = true;
            continue;
        }
        if (name == "--check") {
            if (has_value) throw UsageError("--check takes no value");
            options.check = true;
            continue;
        }
        if (name == "--no-peers") {
            if (has_value) throw UsageError("--no-peers takes no value");
            options.no_peers = true;
            continue;
        }
        if (!has_value) {
            if (i + 1 >= argc) throw UsageError(fmt::format("{} expects a value", name));
            value = argv[++i];
        }
        if (name == "--workloads") {
            options.workloads_path = value;
        } else if (name == "--json") {
            options.json_path = value;
        } else if (name == "--only") {
            options.only = split_names(value);
        } else if (name == "--reps") {
            options.min_reps = parse_int(name, value, 1, 1000000);
        } else if (name == "--min-time") {
            options.min_time_ms = parse_positive(name, value);
        } else if (name == "--warmup") {
            options.warmup_ms = parse_positive(name, value);
        } else if (name == "--rounds") {
            options.rounds = parse_int(name, value, 1, 100);
        } else if (name == "--backend") {
            options.library_backend = parse_name(
                name, value,
                {MOEGEMM_BACKEND_AUTO, MOEGEMM_BACKEND_CUBLASLT, MOEGEMM_BACKEND_NATIVE},
                backend_name);
        } else if (name == "--dtype") {
            options.dtype =
                parse_name(name, value, {MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_E4M3}, dtype_name);
        } else if (name == "--scale-mode") {
            options.scale_mode = parse_name(name, value,
                                            {MOEGEMM_SCALE_PER_TENSOR, MOEGEMM_SCALE_PER_EXPERT,
                                             MOEGEMM_SCALE_ROWWISE, MOEGEMM_SCALE_BLOCK},
                                            scale_mode_name);
        } else if (name == "--device") {
            options.device = parse_int(name, value, 0, std::numeric_limits<int>::max());
        } else if (name == "--set") {
            const std::size_t eq = value.find('=');
            const std::string key = value.substr(0, eq);
            const std::string setting = eq == std::string::npos ? "" : value.substr(eq + 1);
            if ((setting != "0" && setting != "1") ||
                !moegemm::set_plan_option(options.plan_options, key, setting == "1")) {
                std::string names;
                for (const moegemm::NamedPlanOption& o : moegemm::kPlanOptions)
                    names += fmt::format(" {}", o.name);
                throw UsageError(fmt::format("--set {}: expected NAME=0 or NAME=1, NAME one of{}",
                                             value, names));
            }
        } else {
            throw UsageError(fmt::format("unknown option '{}'", name));
        }
    }
    if (options.no_peers && options.check)
        throw UsageError("--check compares with the cuBLASLt loop, which --no-peers leaves out");
    // Scales belong to fp8 inputs only (moegemm_scale_mode_t): NONE for bf16, and E4M3 is
    // scaled per tensor unless told otherwise.
    if (options.dtype == MOEGEMM_DTYPE_E4M3 && options.scale_mode == MOEGEMM_SCALE_NONE)
        options.scale_mode = MOEGEMM_SCALE_PER_TENSOR;
    if (options.dtype != MOEGEMM_DTYPE_E4M3 && options.scale_mode != MOEGEMM_SCALE_NONE)
        throw UsageError("--scale-mode applies to --dtype e4m3 only");
    return options;
}

std::string default_workloads_path() {
    std::vector<std::string> candidates{MOEGEMM_BENCH_DEFAULT_WORKLOADS,
                                        std::string(kRelativeWorkloads)};
    // build/bench/moegemm-bench or build/moegemm-bench inside a checkout.
    if (const std::string dir = executable_directory(); !dir.empty()) {
        candidates.push_back(dir + "/../../" + std::string(kRelativeWorkloads));
        candidates.push_back(dir + "/../" + std::string(kRelativeWorkloads));
    }
    std::string tried;
    for (const std::string& path : candidates) {
        if (file_exists(path)) return path;
        tried += (tried.empty() ? "" : ", ") + path;
    }
    throw BenchError(
        "invalid workload file",
        fmt::format("no default workload file found (tried {}); pass --workloads FILE", tried));
}

}  // namespace moegemm_bench

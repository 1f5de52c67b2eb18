#include "options.hpp"

#include "bench_error.hpp"

#include <fmt/format.h>

#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
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

moegemm_backend_t parse_backend(const std::string& text) {
    for (const moegemm_backend_t backend :
         {MOEGEMM_BACKEND_AUTO, MOEGEMM_BACKEND_NATIVE, MOEGEMM_BACKEND_CUBLASLT}) {
        if (text == backend_name(backend)) return backend;
    }
    throw UsageError(fmt::format("--backend expects auto, cublaslt or native, got '{}'", text));
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
    switch (backend) {
        case MOEGEMM_BACKEND_AUTO:
            return "auto";
        case MOEGEMM_BACKEND_NATIVE:
            return "native";
        case MOEGEMM_BACKEND_CUBLASLT:
            return "cublaslt";
    }
    return "unknown";
}

std::string usage_text() {
    return R"(usage: moegemm-bench [options]

Times libmoegemm on MoE grouped-GEMM workloads beside cuBLAS peers measured in the same run
(a cuBLASLt per-expert loop, cublasGemmGroupedBatchedEx, padded strided-batched cuBLASLt), and
holds every time against the device's ceilings (dense bf16 GEMM, device copy).

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
batches, outside the timed part).

options:
  --workloads FILE    workload file (default: bench/workloads/moe.txt of the source tree)
  --only NAME[,NAME]  measure only these workloads
  --backend B         libmoegemm backend: auto (default), cublaslt or native
  --reps N            at least N timed repetitions per measurement (default 20)
  --min-time MS       and at least MS milliseconds of them (default 200)
  --warmup MS         run each measurement untimed for MS milliseconds first (default 300):
                      under sustained load the GPU's clocks settle lower, and measurements
                      taken before they settle favour whatever runs after an idle pause
  --check             compare libmoegemm's D (each of the three ways; masked: its valid rows)
                      and cublasGemmGroupedBatchedEx's with the cuBLASLt loop's;
                      max |diff| / max |ref| above 1e-2 fails
  --exhaustive        also time every kernel variant of libmoegemm (moegemm_kernel_name,
                      forced through problem.force_kernel) and report how far the
                      heuristic's pick is from the best one
  --json FILE         write the results as JSON to FILE (also to $OUT/bench.json when OUT is set)
  --device N          CUDA device ordinal (default 0)
  -h, --help          this text

environment:
  MOEGEMM_GIT_COMMIT  commit recorded in the results (default: the commit at configure time)
  OUT                 directory that also receives bench.json

exit status: 0 all measured; 1 error; 2 no CUDA GPU; 3 some measurement or check failed
(recorded in the table and the JSON).
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
        } else if (name == "--backend") {
            options.library_backend = parse_backend(value);
        } else if (name == "--device") {
            options.device = parse_int(name, value, 0, std::numeric_limits<int>::max());
        } else {
            throw UsageError(fmt::format("unknown option '{}'", name));
        }
    }
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

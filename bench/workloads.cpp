#include "workloads.hpp"

#include "cuda_utils.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <numeric>
#include <set>
#include <sstream>

namespace moegemm_bench {

int64_t Workload::total_rows() const {
    return std::accumulate(rows.begin(), rows.end(), int64_t{0});
}

int32_t Workload::max_expert_rows() const {
    return rows.empty() ? 0 : *std::max_element(rows.begin(), rows.end());
}

int32_t Workload::min_expert_rows() const {
    return rows.empty() ? 0 : *std::min_element(rows.begin(), rows.end());
}

int32_t Workload::active_experts() const {
    return static_cast<int32_t>(
        std::count_if(rows.begin(), rows.end(), [](int32_t r) { return r > 0; }));
}

double Workload::flops() const {
    return 2.0 * static_cast<double>(total_rows()) * static_cast<double>(n) *
           static_cast<double>(k);
}

double Workload::min_bytes() const {
    const double m = static_cast<double>(total_rows());
    const double a = m * k, d = m * n, b = static_cast<double>(active_experts()) * n * k;
    return static_cast<double>(input_bytes()) * (a + b) + 2.0 * d;  // D is bf16
}

int64_t element_bytes(moegemm_dtype_t input_type) {
    return input_type == MOEGEMM_DTYPE_E4M3 ? 1 : 2;
}

namespace {

/// The side of the square blocks of the BLOCK scale mode (moegemm.h): A's scales cover 1 x 128
/// along K, B's 128 x 128.
constexpr int64_t kScaleBlock = 128;

int64_t blocks_of(int64_t extent) {
    return (extent + kScaleBlock - 1) / kScaleBlock;
}

}  // namespace

int64_t Workload::a_scales_per_row() const {
    switch (scale_mode) {
        case MOEGEMM_SCALE_ROWWISE:
            return 1;
        case MOEGEMM_SCALE_BLOCK:
            return blocks_of(k);
        case MOEGEMM_SCALE_NONE:
        case MOEGEMM_SCALE_PER_TENSOR:
        case MOEGEMM_SCALE_PER_EXPERT:
            break;
    }
    return 0;
}

int64_t Workload::a_scale_count(int64_t plan_rows) const {
    if (scale_mode == MOEGEMM_SCALE_NONE) return 0;
    const int64_t per_row = a_scales_per_row();
    return per_row > 0 ? plan_rows * per_row : 1;
}

int64_t Workload::b_scale_count() const {
    switch (scale_mode) {
        case MOEGEMM_SCALE_NONE:
            return 0;
        case MOEGEMM_SCALE_PER_TENSOR:
            return 1;
        case MOEGEMM_SCALE_PER_EXPERT:
            return experts;
        case MOEGEMM_SCALE_ROWWISE:
            return int64_t{experts} * n;
        case MOEGEMM_SCALE_BLOCK:
            return int64_t{experts} * blocks_of(n) * blocks_of(k);
    }
    return 0;
}

namespace {

[[noreturn]] void reject(const std::string& source, int line, const std::string& why) {
    throw BenchError("invalid workload file", fmt::format("{}:{}: {}", source, line, why));
}

/// Reads one integer token in [lo, hi] or rejects the line, naming `what`.
int64_t read_integer(std::istringstream& tokens, const char* what, int64_t lo, int64_t hi,
                     const std::string& source, int line) {
    std::string token;
    if (!(tokens >> token)) reject(source, line, fmt::format("missing {}", what));
    size_t used = 0;
    long long value = 0;
    try {
        value = std::stoll(token, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != token.size())
        reject(source, line, fmt::format("{} '{}' is not an integer", what, token));
    if (value < lo || value > hi) {
        reject(source, line, fmt::format("{} = {} is outside [{}, {}]", what, value, lo, hi));
    }
    return value;
}

}  // namespace

std::vector<Workload> parse_workloads(std::istream& in, const std::string& source) {
    // Bounds the peers can take: cuBLAS takes 32-bit dimensions and leading dimensions.
    constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max();
    std::vector<Workload> workloads;
    std::set<std::string> names;
    std::string text;
    for (int line = 1; std::getline(in, text); ++line) {
        text = text.substr(0, text.find('#'));
        std::istringstream tokens(text);
        Workload w;
        if (!(tokens >> w.name)) continue;  // blank or comment-only line
        if (!names.insert(w.name).second)
            reject(source, line, fmt::format("duplicate workload name '{}'", w.name));
        w.experts =
            static_cast<int32_t>(read_integer(tokens, "E (experts)", 1, 1 << 20, source, line));
        w.n = read_integer(tokens, "N", 1, kMaxDim, source, line);
        w.k = read_integer(tokens, "K", 1, kMaxDim, source, line);
        for (int32_t e = 0; e < w.experts; ++e) {
            const std::string what = fmt::format("rows of expert {}", e);
            w.rows.push_back(
                static_cast<int32_t>(read_integer(tokens, what.c_str(), 0, kMaxDim, source, line)));
        }
        std::string extra;
        if (tokens >> extra) {
            reject(source, line,
                   fmt::format("more than E = {} row counts ('{}')", w.experts, extra));
        }
        if (w.total_rows() == 0)
            reject(source, line, "every expert has 0 rows: nothing to measure");
        if (w.total_rows() > kMaxDim)
            reject(source, line, fmt::format("{} rows in all, more than 2^31 - 1", w.total_rows()));
        workloads.push_back(std::move(w));
    }
    if (workloads.empty())
        throw BenchError("invalid workload file", fmt::format("{}: no workload in it", source));
    return workloads;
}

std::vector<Workload> load_workloads(const std::string& path) {
    std::ifstream in(path);
    if (!in)
        throw BenchError("invalid workload file",
                         fmt::format("cannot open workload file '{}'", path));
    return parse_workloads(in, path);
}

std::vector<Workload> select_workloads(const std::vector<Workload>& all,
                                       const std::vector<std::string>& names) {
    if (names.empty()) return all;
    for (const std::string& name : names) {
        const bool known =
            std::any_of(all.begin(), all.end(), [&](const Workload& w) { return w.name == name; });
        if (!known) {
            std::string available;
            for (const Workload& w : all) available += (available.empty() ? "" : ", ") + w.name;
            throw BenchError(
                "unknown workload",
                fmt::format("no workload named '{}' (available: {})", name, available));
        }
    }
    std::vector<Workload> selected;
    for (const Workload& w : all) {
        if (std::find(names.begin(), names.end(), w.name) != names.end()) selected.push_back(w);
    }
    return selected;
}

}  // namespace moegemm_bench

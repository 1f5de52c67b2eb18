#include "workloads.hpp"

#include "cuda_utils.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
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

namespace {

/// splitmix64: a stream of 64-bit values from one seed, the same on every platform.
class SplitMix {
public:
    explicit SplitMix(uint64_t seed) : state_(seed) {}
    uint64_t next() {
        uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }  ///< [0, 1)
    int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
    /// log-uniform integer in [lo, hi].
    int64_t log_uniform(int64_t lo, int64_t hi) {
        const double v = std::exp(std::log(static_cast<double>(lo)) +
                                  uniform() * std::log(static_cast<double>(hi) / lo));
        return std::clamp<int64_t>(std::llround(v), lo, hi);
    }

private:
    uint64_t state_;
};

Workload random_workload(uint64_t seed, int index) {
    SplitMix rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(index) + 1);
    Workload w;
    w.experts = static_cast<int32_t>(rng.log_uniform(1, kRandomMaxExperts));
    std::vector<int32_t> top_ks;
    for (const int32_t k : {1, 2, 4, 6, 8})
        if (k <= w.experts) top_ks.push_back(k);
    const int32_t top_k = top_ks[static_cast<size_t>(rng.below(static_cast<int64_t>(top_ks.size())))];
    int64_t tokens = rng.log_uniform(1, kRandomMaxTokens);
    const int64_t steps = kRandomMaxDim / kRandomMinDim;
    w.n = kRandomMinDim * rng.log_uniform(1, steps);
    w.k = kRandomMinDim * rng.log_uniform(1, steps);
    while (2.0 * w.experts * static_cast<double>(w.n) * static_cast<double>(w.k) >
           kRandomMaxWeightBytes) {
        int64_t& larger = w.n >= w.k ? w.n : w.k;
        larger = std::max(kRandomMinDim, larger / 2 / kRandomMinDim * kRandomMinDim);
    }
    while (tokens > 1 && 2.0 * static_cast<double>(tokens * top_k) *
                                 static_cast<double>(std::max(w.n, w.k)) >
                             kRandomMaxActivationBytes)
        tokens /= 2;

    // Routing: experts ranked by a random permutation, P(rank r) ~ 1 / (r + 1)^s.
    const double skew = 1.5 * rng.uniform();
    std::vector<int32_t> expert_of_rank(static_cast<size_t>(w.experts));
    for (int32_t e = 0; e < w.experts; ++e) expert_of_rank[static_cast<size_t>(e)] = e;
    for (int32_t r = w.experts - 1; r > 0; --r)
        std::swap(expert_of_rank[static_cast<size_t>(r)],
                  expert_of_rank[static_cast<size_t>(rng.below(r + 1))]);
    std::vector<double> cumulative(static_cast<size_t>(w.experts));
    double total = 0.0;
    for (int32_t r = 0; r < w.experts; ++r) {
        total += std::pow(static_cast<double>(r + 1), -skew);
        cumulative[static_cast<size_t>(r)] = total;
    }
    w.rows.assign(static_cast<size_t>(w.experts), 0);
    std::vector<int32_t> chosen;
    for (int64_t t = 0; t < tokens; ++t) {
        chosen.clear();
        for (int32_t j = 0; j < top_k; ++j) {
            int32_t rank = 0;
            for (int attempt = 0;; ++attempt) {
                const double u = rng.uniform() * total;
                rank = static_cast<int32_t>(
                    std::upper_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin());
                rank = std::min(rank, w.experts - 1);
                if (std::find(chosen.begin(), chosen.end(), rank) == chosen.end()) break;
                if (attempt == 64) {  // a very skewed draw: the best-ranked expert not chosen
                    rank = 0;
                    while (std::find(chosen.begin(), chosen.end(), rank) != chosen.end()) ++rank;
                    break;
                }
            }
            chosen.push_back(rank);
            int32_t& rows = w.rows[static_cast<size_t>(expert_of_rank[static_cast<size_t>(rank)])];
            if (rows < kRandomMaxExpertRows) ++rows;
        }
    }
    w.name = fmt::format("rand{}-{}-E{}-k{}-T{}-N{}-K{}", seed, index, w.experts, top_k, tokens,
                         w.n, w.k);
    return w;
}

}  // namespace

std::vector<Workload> random_workloads(int count, uint64_t seed) {
    std::vector<Workload> workloads;
    for (int i = 0; i < count; ++i) workloads.push_back(random_workload(seed, i));
    return workloads;
}

std::vector<Workload> load_workloads(const std::string& path) {
    if (path.rfind("random:", 0) == 0) {
        unsigned long long count = 0, seed = 1;
        int end = 0;
        const char* text = path.c_str();
        bool ok = std::sscanf(text, "random:%llu%n", &count, &end) == 1;
        if (ok && text[end] == ':') {
            int more = 0;
            ok = std::sscanf(text + end, ":%llu%n", &seed, &more) == 1;
            end += more;
        }
        if (!ok || text[end] != '\0' || count == 0 || count > 100000)
            throw BenchError("invalid workload file",
                             fmt::format("'{}': expected random:COUNT[:SEED], COUNT in "
                                         "[1, 100000]",
                                         path));
        return random_workloads(static_cast<int>(count), seed);
    }
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

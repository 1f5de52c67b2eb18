#include "support/random_case.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace mgt {

namespace {

uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/// splitmix64: small, fast, and the same sequence on every platform.
class Rng {
public:
    explicit Rng(uint64_t seed) : state_(seed) {}
    uint64_t next() { return mix64(state_ += 0x9E3779B97F4A7C15ull); }
    /// Uniform in [0, 1).
    double unit() { return static_cast<double>(next() >> 11) * std::ldexp(1.0, -53); }
    bool chance(double p) { return unit() < p; }
    /// Uniform in [lo, hi] (the modulo bias is irrelevant here).
    int64_t range(int64_t lo, int64_t hi) {
        return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
    }
    template <typename T>
    const T& pick(const std::vector<T>& v) {
        return v[static_cast<size_t>(range(0, static_cast<int64_t>(v.size()) - 1))];
    }
    /// Log-uniform in [lo, hi], lo >= 1.
    int64_t log_range(int64_t lo, int64_t hi) {
        const double l = std::log2(static_cast<double>(lo));
        const double h = std::log2(static_cast<double>(hi) + 1.0);
        const auto v = static_cast<int64_t>(std::exp2(l + unit() * (h - l)));
        return std::clamp(v, lo, hi);
    }

private:
    uint64_t state_;
};

int64_t round_to(int64_t v, int64_t m) { return std::max(m, v / m * m); }

/// N or K: a multiple of 8, often not of 64, biased to small (log-uniform).
int64_t random_dim(Rng& r, int64_t max_dim) {
    static const std::vector<int64_t> interesting = {8,   16,  24,  40,   56,   64,   72,
                                                     120, 128, 136, 192,  248,  256,  264,
                                                     384, 512, 776, 1024, 1536, 2048, 2880,
                                                     4096, 5120, 7168, 8192};
    if (r.chance(0.2)) {
        const int64_t v = r.pick(interesting);
        if (v <= max_dim) return v;
    }
    const int64_t v = r.log_range(8, max_dim);
    return std::min(max_dim, round_to(v, r.chance(0.3) ? 64 : 8));
}

int32_t random_experts(Rng& r, int32_t max_experts) {
    const double u = r.unit();
    if (u < 0.1) return 1;
    if (u < 0.2) {
        const int32_t v = static_cast<int32_t>(r.pick(std::vector<int64_t>{256, 384, 511, 512}));
        return std::min(v, max_experts);
    }
    return static_cast<int32_t>(r.log_range(2, max_experts));
}

enum class Regime { Decode, TileEdges, Medium, Prefill, Hot };

int32_t random_rows(Rng& r, Regime regime) {
    static const std::vector<int64_t> edges = {1,   2,   7,   63,  64,  65,  127, 128,
                                               129, 191, 192, 193, 255, 256, 257, 383,
                                               384, 385, 511, 512, 513};
    switch (regime) {
        case Regime::Decode: return static_cast<int32_t>(r.range(1, 16));
        case Regime::TileEdges: return static_cast<int32_t>(r.pick(edges));
        case Regime::Medium: return static_cast<int32_t>(r.range(1, 300));
        case Regime::Prefill:
        case Regime::Hot: return static_cast<int32_t>(r.log_range(1, 4096));
    }
    return 1;
}

/// One size per expert: many zeros, the rest from the regime; "hot" puts most rows on one
/// expert.
std::vector<int32_t> random_sizes(Rng& r, int32_t experts, Regime regime, double p_zero) {
    std::vector<int32_t> s(static_cast<size_t>(experts), 0);
    for (int32_t& v : s) {
        if (!r.chance(p_zero)) v = random_rows(r, regime == Regime::Hot ? Regime::Decode : regime);
    }
    if (regime == Regime::Hot)
        s[static_cast<size_t>(r.range(0, experts - 1))] = static_cast<int32_t>(r.range(300, 4096));
    return s;
}

int64_t total_rows(moegemm_layout_t layout, int32_t experts, int64_t max_rows) {
    return layout == MOEGEMM_LAYOUT_VARIABLE ? max_rows : int64_t{experts} * max_rows;
}

/// Scale factor (< 1) that brings `rows` within the caps, or 1 when they fit.
double shrink_factor(int64_t rows, int64_t n, int64_t k, int64_t mac_cap, int64_t elem_cap) {
    const double r = static_cast<double>(rows);
    double f = 1.0;
    f = std::min(f, static_cast<double>(mac_cap) / (r * static_cast<double>(n) * static_cast<double>(k)));
    f = std::min(f, static_cast<double>(elem_cap) / (r * static_cast<double>(k)));
    f = std::min(f, static_cast<double>(elem_cap) / (r * static_cast<double>(n)));
    return f;
}

int32_t scaled(int32_t v, double f) { return static_cast<int32_t>(std::floor(v * f)); }

/// Capacity for the sizes: VARIABLE sum + slack, MASKED largest + slack (at least 1).
int64_t capacity_for(moegemm_layout_t layout, const std::vector<int32_t>& sizes, int64_t slack) {
    const int64_t sum = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
    const int64_t largest = sizes.empty() ? 0 : *std::max_element(sizes.begin(), sizes.end());
    return std::max<int64_t>(1, (layout == MOEGEMM_LAYOUT_VARIABLE ? sum : largest) + slack);
}

/// Makes valid host sizes of `s` for capacity `max_rows` (scales a VARIABLE sum down, cuts
/// MASKED sizes).
void fit_sizes(moegemm_layout_t layout, int64_t max_rows, std::vector<int32_t>& s) {
    if (layout == MOEGEMM_LAYOUT_MASKED) {
        for (int32_t& v : s) v = static_cast<int32_t>(std::min<int64_t>(v, max_rows));
        return;
    }
    int64_t sum = std::accumulate(s.begin(), s.end(), int64_t{0});
    if (sum <= max_rows) return;
    const double f = static_cast<double>(max_rows) / static_cast<double>(sum);
    for (int32_t& v : s) v = scaled(v, f);
    sum = std::accumulate(s.begin(), s.end(), int64_t{0});
    for (size_t e = 0; sum > max_rows; e = (e + 1) % s.size()) {  // rounding leftovers
        if (s[e] > 0) {
            --s[e];
            --sum;
        }
    }
}

/// Replaces some sizes with values the GPU has to clamp: negative, past the slab, past the
/// whole capacity, INT32 extremes.
void make_hostile(Rng& r, int64_t max_rows, std::vector<int32_t>& s) {
    constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
    const std::vector<int64_t> values = {-1,
                                         -7,
                                         std::numeric_limits<int32_t>::min(),
                                         std::min(kMax, max_rows + 1),
                                         std::min(kMax, 2 * max_rows),
                                         kMax};
    bool changed = false;
    for (int32_t& v : s) {
        if (r.chance(0.15)) {
            v = static_cast<int32_t>(r.pick(values));
            changed = true;
        }
    }
    if (!changed) s[static_cast<size_t>(r.range(0, static_cast<int64_t>(s.size()) - 1))] = -1;
}

}  // namespace

uint64_t case_seed(uint64_t base, uint64_t index) { return mix64(base ^ mix64(index + 1)); }

RandomCase random_case(uint64_t seed, const CaseLimits& lim, const CaseChoices& choices) {
    Rng r(seed);
    RandomCase rc;
    CaseSpec& c = rc.spec;
    rc.big = r.chance(lim.big_fraction);
    const int64_t mac_cap = rc.big ? lim.big_mac_cap : lim.mac_cap;
    const int64_t elem_cap = rc.big ? lim.big_elem_cap : lim.elem_cap;

    Geometry& g = c.g;
    g.layout = r.pick(std::vector<moegemm_layout_t>{
        MOEGEMM_LAYOUT_VARIABLE, MOEGEMM_LAYOUT_MASKED, MOEGEMM_LAYOUT_FIXED});
    g.weights = r.chance(0.5) ? MOEGEMM_WEIGHTS_NK : MOEGEMM_WEIGHTS_KN;
    c.in = r.chance(0.5) ? MOEGEMM_DTYPE_BF16 : MOEGEMM_DTYPE_F16;
    c.out = r.pick(std::vector<moegemm_dtype_t>{MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_F16,
                                                MOEGEMM_DTYPE_F32});
    c.backend = r.pick(choices.backends);
    g.experts = random_experts(r, lim.max_experts);

    // N and K such that B (E x N x K) fits the element cap.
    for (int attempt = 0; attempt < 32; ++attempt) {
        g.n = random_dim(r, lim.max_dim);
        g.k = random_dim(r, lim.max_dim);
        if (int64_t{g.experts} * g.n * g.k <= elem_cap) break;
    }
    while (int64_t{g.experts} * g.n * g.k > elem_cap) {
        if (g.n >= g.k) g.n = round_to(g.n / 2, 8);
        else g.k = round_to(g.k / 2, 8);
    }

    // Sizes, then the capacity, shrunk until the caps hold (max_rows = 1 always fits:
    // E * N * K <= elem_cap <= mac_cap).
    const Regime regime = r.pick(std::vector<Regime>{Regime::Decode, Regime::TileEdges,
                                                     Regime::Medium, Regime::Prefill,
                                                     Regime::Hot});
    const double p_zero = r.pick(std::vector<double>{0.0, 0.2, 0.5, 0.8, 0.95});
    std::vector<int32_t> sizes = r.chance(0.02) ? std::vector<int32_t>(static_cast<size_t>(g.experts), 0)
                                                : random_sizes(r, g.experts, regime, p_zero);
    const double u = r.unit();
    int64_t slack = u < 0.3 ? 0 : (u < 0.6 ? r.range(1, 7) : r.range(8, 300));
    if (g.layout == MOEGEMM_LAYOUT_FIXED) {
        g.max_rows = random_rows(r, regime == Regime::Hot ? Regime::Prefill : regime);
    } else {
        g.max_rows = capacity_for(g.layout, sizes, slack);
    }
    for (;;) {
        const double f =
            shrink_factor(total_rows(g.layout, g.experts, g.max_rows), g.n, g.k, mac_cap, elem_cap);
        if (f >= 1.0 || g.max_rows == 1) break;
        if (g.layout == MOEGEMM_LAYOUT_FIXED) {
            g.max_rows = std::max<int64_t>(1, static_cast<int64_t>(std::floor(static_cast<double>(g.max_rows) * f)));
        } else {
            for (int32_t& v : sizes) v = scaled(v, f);
            slack = static_cast<int64_t>(std::floor(static_cast<double>(slack) * f));
            g.max_rows = capacity_for(g.layout, sizes, slack);
        }
    }

    // Where the sizes come from, and the rounds.
    c.sizes_from = g.layout == MOEGEMM_LAYOUT_FIXED
                       ? SizesFrom::None
                       : (r.chance(0.55) ? SizesFrom::Host : SizesFrom::Device);
    rc.hostile = c.sizes_from == SizesFrom::Device && r.chance(lim.hostile_fraction);
    size_t rounds = 1;
    if (r.chance(g.layout == MOEGEMM_LAYOUT_FIXED ? lim.multi_round_fraction / 2
                                                  : lim.multi_round_fraction))
        rounds = static_cast<size_t>(r.range(2, 3));
    for (size_t i = 0; i < rounds; ++i) {
        if (g.layout == MOEGEMM_LAYOUT_FIXED) {
            c.rounds.emplace_back();
            continue;
        }
        std::vector<int32_t> s = sizes;
        if (i > 0) {
            s = random_sizes(r, g.experts, regime, p_zero);
            fit_sizes(g.layout, g.max_rows, s);
        }
        if (rc.hostile) make_hostile(r, g.max_rows, s);
        c.rounds.push_back(std::move(s));
    }

    // E4M3: N and K multiples of 16 (16-byte rows), BF16 or F32 out, [E, N, K] weights, and
    // now and then what the API refuses (F16 out, [E, K, N] weights: NOT_SUPPORTED). N and K
    // round down (8 up to 16: that only grows the smallest problems).
    Rng fp8_rng(seed ^ 0xE4A3E4A3E4A3E4A3ull);
    if (fp8_rng.chance(choices.e4m3_fraction)) {
        c.in = MOEGEMM_DTYPE_E4M3;
        c.scale_mode = fp8_rng.pick(std::vector<moegemm_scale_mode_t>{
            MOEGEMM_SCALE_PER_TENSOR, MOEGEMM_SCALE_PER_EXPERT, MOEGEMM_SCALE_ROWWISE,
            MOEGEMM_SCALE_BLOCK});
        c.out = fp8_rng.chance(0.05) ? MOEGEMM_DTYPE_F16
                                     : (fp8_rng.chance(0.7) ? MOEGEMM_DTYPE_BF16 : MOEGEMM_DTYPE_F32);
        g.weights = fp8_rng.chance(0.05) ? MOEGEMM_WEIGHTS_KN : MOEGEMM_WEIGHTS_NK;
        g.n = round_to(g.n, 16);
        g.k = round_to(g.k, 16);
    }

    if (c.backend == MOEGEMM_BACKEND_NATIVE && !choices.native_kernels.empty() && r.chance(0.4))
        c.force_kernel = r.pick(choices.native_kernels);
    if (c.sizes_from == SizesFrom::Device && r.chance(0.5)) c.expected_rows = r.range(1, 512);
    c.seed = r.next();
    auto offset = [&r] { return r.chance(0.35) ? static_cast<size_t>(16 * r.range(1, 15)) : size_t{0}; };
    c.a_offset = offset();
    c.b_offset = offset();
    c.d_offset = offset();
    c.null_workspace = r.chance(0.5);
    c.default_stream = r.chance(0.1);
    return rc;
}

int64_t case_macs(const CaseSpec& spec) {
    int64_t rows = 0;
    for (const std::vector<int32_t>& raw : spec.rounds) {
        const std::vector<int32_t> s =
            spec.g.layout == MOEGEMM_LAYOUT_FIXED
                ? std::vector<int32_t>(static_cast<size_t>(spec.g.experts), 0)
                : raw;
        const ClampedSizes clamped = clamp_sizes(spec.g, s);
        rows += std::accumulate(clamped.sizes.begin(), clamped.sizes.end(), int64_t{0});
    }
    return rows * spec.g.n * spec.g.k;
}

}  // namespace mgt

// Kernel selection: ranks the registered variants that can serve a problem and explains the
// choice. Evidence behind each preference is in docs/design.md.
#include "heuristic.hpp"

#include <fmt/format.h>

#include "registry.hpp"

namespace moegemm {

ProblemSummary summarize(const ProblemDesc& p, const ExpertSizes& sizes) noexcept {
    ProblemSummary s;
    s.layout = p.layout;
    s.weight_layout = p.weight_layout;
    s.a_type = p.a_type;
    s.d_type = p.d_type;
    s.scale_mode = p.scale_mode;
    s.backend = p.backend;
    s.num_experts = p.num_experts;
    s.n = p.n;
    s.k = p.k;
    s.max_rows = p.max_rows;
    s.sizes = sizes.source;
    s.total_rows = sizes.total_rows;
    s.largest_expert = sizes.largest;
    s.active_experts = sizes.active_experts;
    s.expected_rows = p.expected_rows;
    s.swap_ab = p.options.swap_ab;
    s.epilogue_inputs = p.epilogue_inputs;
    s.bias_type = p.bias_type;
    s.activation = p.activation;
    s.gather = p.gather_rows > 0;
    return s;
}

namespace {
// GPUs older than compute capability 8.0 run nothing: ARCH_MISMATCH, whether the kernel is
// the heuristic's or forced. Returns whether `out` now says so.
bool refuse_older_than_ampere(const DeviceCaps& device, Selection* out) {
    if (device.cc_major >= 8) return false;
    out->status = MOEGEMM_STATUS_ARCH_MISMATCH;
    out->reason = fmt::format(
        "device {} ({}) has compute capability {}.{}; libmoegemm needs 8.0 or newer",
        device.ordinal, device.name, device.cc_major, device.cc_minor);
    return true;
}

// Typical rows per expert: measured from host sizes, else the caller's hint, else unknown (0).
int64_t typical_rows(const ProblemSummary& p) {
    if (p.sizes == SizesSource::Host && p.active_experts > 0)
        return p.total_rows / p.active_experts;
    if (p.layout == MOEGEMM_LAYOUT_FIXED) return p.max_rows;
    return p.expected_rows;
}

// Decode (up to 32 rows per expert): 64-row tiles halve the tensor-core work spent on rows
// that do not exist, which otherwise takes about as long as streaming the weights. From ~64
// rows per expert on, 128-row tiles are faster again.
bool is_decode(const ProblemSummary& p) {
    const int64_t rows = typical_rows(p);
    return rows > 0 && rows <= 32;
}
int preferred_block_m(const ProblemSummary& p) { return is_decode(p) ? 64 : 128; }

bool is_e4m3(const ProblemSummary& p) { return p.a_type == MOEGEMM_DTYPE_E4M3; }

// Native kernels first (one launch for all experts, sizes on the GPU). Among them, 128 x 256
// tiles halve the A traffic per output when N is wide (for E4M3 too); narrower N keeps
// 128 x 128 so that enough tiles exist to fill the GPU. Decode takes 64 x 128 tiles: they
// stream the same weights in half the tile time, so the end of a launch, where the last tiles
// finish with fewer and fewer CTAs drawing on DRAM, is half as long. Swap-AB 64 x 256 tiles
// are no faster than swap-AB 64 x 128, so they are not preferred.
int preferred_block_n(const ProblemSummary& p) {
    if (is_decode(p)) return 128;
    return p.n >= 1024 ? 256 : 128;
}

// Clusters of 2 share the A tile, which pays only where A is read again by many column
// tiles: E4M3 prefill with N >= 16384. Elsewhere single CTAs win, because a pair stalls on
// the slower of its two CTAs; in decode the weight tiles are not shared between rows at all,
// so a pair would only wait on its slower half.
int preferred_cluster_n(const ProblemSummary& p) {
    return is_e4m3(p) && !is_decode(p) && p.n >= 16384 ? 2 : 1;
}

// The TMA-store epilogue serves full 64-row slices (the rest store from registers) and costs
// a pipeline stage; it is faster on every 128-row workload, including one-wave and ~64-row
// ones. Decode (every slice partial) stores from registers. Unknown row counts are taken as
// prefill.
bool prefers_tma_store(const ProblemSummary& p) { return !is_decode(p); }

// Decode multiplies the tokens as wgmma's N (swap-AB: 16, 32 or 64 of them per tile) instead
// of 64 rows whatever the expert holds. The decode kernels stream the weights at the power
// cap, where the padded rows' MMAs cost SM clock, and the clock costs time. E4M3 with BLOCK
// scales has no swap-AB kernel (can_implement refuses it), so the 64-row tiles rank first there.
bool prefers_swap_ab(const ProblemSummary& p) { return p.swap_ab && is_decode(p); }

// Tile height, then width, then the cluster, then the epilogue, then swap-AB.
int rank(const KernelVariant& v, const ProblemSummary& p) {
    if (v.backend != MOEGEMM_BACKEND_NATIVE) return 100;
    return (v.block_m == preferred_block_m(p) ? 0 : 16) +
           (v.block_n == preferred_block_n(p) ? 0 : 8) +
           (v.cluster_n == preferred_cluster_n(p) ? 0 : 4) +
           (v.tma_store_epilogue == prefers_tma_store(p) ? 0 : 2) +
           (v.swap_ab == prefers_swap_ab(p) ? 0 : 1);
}

std::string rank_reason(const KernelVariant& v, const ProblemSummary& p) {
    if (v.backend != MOEGEMM_BACKEND_NATIVE) return "no native kernel fits; cuBLASLt baseline";
    return fmt::format("native, {}x{} tiles for N = {} and ~{} rows per expert, {}, {} epilogue{}",
                       v.block_m, v.block_n, p.n, typical_rows(p),
                       v.cluster_n == 2 ? "A shared by 2 CTAs" : "single CTAs",
                       v.tma_store_epilogue ? "TMA-store" : "register",
                       v.swap_ab ? ", swap-AB (tokens on wgmma N)" : "");
}

}  // namespace

Selection select_kernel(const ProblemSummary& p, const DeviceCaps& device, uint32_t backends) {
    Selection out;
    if (refuse_older_than_ampere(device, &out)) return out;

    // Rank the variants that can implement the problem (lower is better); registration
    // order breaks ties. Reasons of the rejected ones are kept for the error message.
    std::string rejected;
    const KernelVariant* best = nullptr;
    int best_rank = 0;
    for (const KernelVariant* v = registry_begin(); v != registry_end(); ++v) {
        if (!backend_allowed(v->backend, p, backends)) continue;
        std::string why;
        if (!v->can_implement(p, device, &why)) {
            rejected += fmt::format("{}{}: {}", rejected.empty() ? "" : "; ", v->name, why);
            continue;
        }
        const int r = rank(*v, p);
        if (!best || r < best_rank) {
            best = v;
            best_rank = r;
        }
    }
    if (best) {
        out.kernel = best->id;
        out.reason = fmt::format("{} (backend {})", rank_reason(*best, p), backend_name(p.backend));
        return out;
    }
    out.status = MOEGEMM_STATUS_NOT_SUPPORTED;
    out.reason = fmt::format("no kernel of backend {} serves this problem ({})",
                             backend_name(p.backend), rejected);
    return out;
}

Selection select_named_kernel(const ProblemSummary& p, const DeviceCaps& device,
                              const std::string& name) {
    Selection out;
    const KernelVariant* v = registry_begin();
    while (v != registry_end() && name != v->name) ++v;
    if (v == registry_end()) {
        std::string names;
        for (const KernelVariant* w = registry_begin(); w != registry_end(); ++w)
            names += fmt::format("{}{}", names.empty() ? "" : ", ", w->name);
        out.status = MOEGEMM_STATUS_INVALID_VALUE;
        out.reason = fmt::format("problem->force_kernel = \"{}\" names no kernel (kernels: {})",
                                 name, names);
        return out;
    }
    if (!backend_allowed(v->backend, p)) {
        out.status = MOEGEMM_STATUS_INVALID_VALUE;
        out.reason = fmt::format("problem->force_kernel = \"{}\" is not a kernel of backend {}",
                                 name, backend_name(p.backend));
        return out;
    }
    if (refuse_older_than_ampere(device, &out)) return out;
    std::string why;
    if (!v->can_implement(p, device, &why)) {
        out.status = MOEGEMM_STATUS_NOT_SUPPORTED;
        out.reason = fmt::format("problem->force_kernel = \"{}\" cannot serve this problem: {}",
                                 name, why);
        return out;
    }
    out.kernel = v->id;
    out.reason = "forced by problem->force_kernel";
    return out;
}

}  // namespace moegemm

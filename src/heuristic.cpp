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
    return s;
}

namespace {
const char* backend_name(moegemm_backend_t b) {
    switch (b) {
        case MOEGEMM_BACKEND_AUTO: return "AUTO";
        case MOEGEMM_BACKEND_NATIVE: return "NATIVE";
        case MOEGEMM_BACKEND_CUBLASLT: return "CUBLASLT";
    }
    return "?";
}
// Native kernels first (one launch for all experts, sizes on the GPU). Among them, 128 x 256
// tiles halve the A traffic per output when N is wide; narrower N keeps 128 x 128 so that
// enough tiles exist to fill the GPU.
int preferred_block_n(const ProblemSummary& p) { return p.n >= 1024 ? 256 : 128; }

// The width rank() prefers: E4M3 keeps 128-column tiles until 128 x 256 (each k-block as two
// promoted halves) is measured against them (bench/NOTES.md §14b); it can be forced meanwhile.
int ranked_block_n(const ProblemSummary& p) {
    return p.a_type == MOEGEMM_DTYPE_E4M3 ? 128 : preferred_block_n(p);
}

// Typical rows per expert: measured from host sizes, else the caller's hint, else unknown (0).
int64_t typical_rows(const ProblemSummary& p) {
    if (p.sizes == SizesSource::Host && p.active_experts > 0)
        return p.total_rows / p.active_experts;
    if (p.layout == MOEGEMM_LAYOUT_FIXED) return p.max_rows;
    return p.expected_rows;
}

// Output tiles of 128 rows x block_n, estimated from the typical rows per expert.
int64_t estimated_tiles(const ProblemSummary& p, int block_n) {
    const int64_t rows = typical_rows(p);
    const int64_t experts = p.sizes == SizesSource::Host ? p.active_experts : p.num_experts;
    return experts * ((rows + 127) / 128) * ((p.n + block_n - 1) / block_n);
}

// The TMA-store epilogue serves only full 64-row slices and costs a pipeline stage. It pays
// when experts have many rows and each CTA has several tiles, so that a tile's store overlaps
// the next tile's main loop. Decode (every slice partial) and single-wave problems (nothing to
// overlap; the extra stage matters more) store from registers. Unknown row counts are taken
// as prefill.
bool prefers_staged_epilogue(const ProblemSummary& p, const DeviceCaps& device) {
    const int64_t rows = typical_rows(p);
    if (rows == 0) return true;
    return rows >= 128 && estimated_tiles(p, preferred_block_n(p)) > device.sm_count;
}

// Decode (up to 64 rows per expert): 64-row tiles halve the tensor-core work spent on rows
// that do not exist, which otherwise takes about as long as streaming the weights (measured
// 92-101% of the bandwidth floor against 85-96% with 128-row tiles, bench/NOTES.md).
int preferred_block_m(const ProblemSummary& p) {
    const int64_t rows = typical_rows(p);
    return rows > 0 && rows <= 64 ? 64 : 128;
}

// Tile height, then width, then clusters of 2 sharing the A tile where the column tiles pair up
// (measured 0-3% faster on prefill and decode, bench/NOTES.md), then the epilogue.
int rank(const KernelVariant& v, const ProblemSummary& p, const DeviceCaps& device) {
    if (v.backend != MOEGEMM_BACKEND_NATIVE) return 100;
    return (v.block_m == preferred_block_m(p) ? 0 : 8) +
           (v.block_n == ranked_block_n(p) ? 0 : 4) +
           (v.cluster_n == 2 ? 0 : 2) +
           (v.staged_epilogue == prefers_staged_epilogue(p, device) ? 0 : 1);
}

std::string rank_reason(const KernelVariant& v, const ProblemSummary& p) {
    if (v.backend != MOEGEMM_BACKEND_NATIVE) return "no native kernel fits; cuBLASLt baseline";
    return fmt::format("native, {}x{} tiles for N = {} and ~{} rows per expert, {}, {} epilogue",
                       v.block_m, v.block_n, p.n, typical_rows(p),
                       v.cluster_n == 2 ? "A shared by 2 CTAs" : "single CTAs",
                       v.staged_epilogue ? "TMA-store" : "register");
}

}  // namespace

Selection select_kernel(const ProblemSummary& p, const DeviceCaps& device) {
    Selection out;
    if (device.cc_major < 8) {
        out.status = MOEGEMM_STATUS_ARCH_MISMATCH;
        out.reason = fmt::format(
            "device {} ({}) has compute capability {}.{}; libmoegemm needs 8.0 or newer",
            device.ordinal, device.name, device.cc_major, device.cc_minor);
        return out;
    }

    // Rank the variants that can implement the problem (lower is better); registration
    // order breaks ties. Reasons of the rejected ones are kept for the error message.
    std::string rejected;
    const KernelVariant* best = nullptr;
    int best_rank = 0;
    for (const KernelVariant* v = registry_begin(); v != registry_end(); ++v) {
        if (p.backend != MOEGEMM_BACKEND_AUTO && p.backend != v->backend) continue;
        std::string why;
        if (!v->can_implement(p, device, &why)) {
            rejected += fmt::format("{}{}: {}", rejected.empty() ? "" : "; ", v->name, why);
            continue;
        }
        const int r = rank(*v, p, device);
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
    if (p.backend != MOEGEMM_BACKEND_AUTO && p.backend != v->backend) {
        out.status = MOEGEMM_STATUS_INVALID_VALUE;
        out.reason = fmt::format("problem->force_kernel = \"{}\" is not a kernel of backend {}",
                                 name, backend_name(p.backend));
        return out;
    }
    std::string why;
    if (device.cc_major < 8 || !v->can_implement(p, device, &why)) {
        out.status = MOEGEMM_STATUS_NOT_SUPPORTED;
        out.reason = fmt::format("problem->force_kernel = \"{}\" cannot serve this problem: {}",
                                 name, device.cc_major < 8 ? "device older than 8.0" : why);
        return out;
    }
    out.kernel = v->id;
    out.reason = "forced by problem->force_kernel";
    return out;
}

}  // namespace moegemm

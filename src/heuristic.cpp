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

int rank(const KernelVariant& v, const ProblemSummary& p) {
    if (v.backend != MOEGEMM_BACKEND_NATIVE) return 10;
    return v.block_n == preferred_block_n(p) ? 0 : 1;
}

std::string rank_reason(const KernelVariant& v, const ProblemSummary& p) {
    if (v.backend != MOEGEMM_BACKEND_NATIVE) return "no native kernel fits; cuBLASLt baseline";
    return fmt::format("native, {}-wide tiles for N = {}", v.block_n, p.n);
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

}  // namespace moegemm

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

    // The first registered variant of an allowed backend that can implement the problem.
    // Variants are registered in order of preference, so the order is the policy; reasons
    // of the rejected ones are kept for the error message.
    std::string rejected;
    for (const KernelVariant* v = registry_begin(); v != registry_end(); ++v) {
        if (p.backend != MOEGEMM_BACKEND_AUTO && p.backend != v->backend) continue;
        std::string why;
        if (v->can_implement(p, device, &why)) {
            out.kernel = v->id;
            out.reason = fmt::format("first variant that fits (backend {})", backend_name(p.backend));
            return out;
        }
        rejected += fmt::format("{}{}: {}", rejected.empty() ? "" : "; ", v->name, why);
    }
    out.status = MOEGEMM_STATUS_NOT_SUPPORTED;
    if (p.backend == MOEGEMM_BACKEND_NATIVE) {
        out.reason = "backend NATIVE: this build has no native sm_90a kernels yet; use "
                     "MOEGEMM_BACKEND_AUTO or MOEGEMM_BACKEND_CUBLASLT";
    } else {
        out.reason = fmt::format("no kernel of backend {} serves this problem ({})",
                                 backend_name(p.backend), rejected);
    }
    return out;
}

}  // namespace moegemm

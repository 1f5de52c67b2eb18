// Comparison options of a plan: the alternatives to the library's chosen defaults that the
// test suite and moegemm-bench set to measure or check against them. Not part of the C API:
// users get the defaults (and MOEGEMM_PDL=0, the one documented escape hatch).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "moegemm/moegemm.h"

// Exported from the testing build of the library only (libmoegemm.so's version script keeps
// everything but the C API local).
#define MOEGEMM_TESTING_API __attribute__((visibility("default")))

namespace moegemm {

struct PlanOptions {
    /// Native kernels hand out tiles after each CTA's first one by tile ticket (a counter in
    /// the workspace) instead of round robin. Results are bitwise identical either way.
    bool tile_tickets = true;
    /// Native plans with host sizes pass the tile schedule built on the host, which the kernel
    /// copies, instead of the sizes it would build it from. Bitwise identical.
    bool host_schedule = true;
    /// Native kernels are launched with programmatic dependent launch (also off when
    /// MOEGEMM_PDL=0 is set at plan creation). Bitwise identical.
    bool dependent_launch = true;
    /// The heuristic may pick the swap-AB decode kernels. Results agree to fp32 rounding.
    bool swap_ab = true;
    /// E4M3 BLOCK scales are staged in shared memory by producer warps (128-row tiles) instead
    /// of read from global memory by the consumers. Bitwise identical.
    bool block_scale_ring = true;
    /// Consumer warpgroups whose 64 rows of a 128-row tile hold none of the expert's skip
    /// their MMAs. Bitwise identical.
    bool skip_idle_halves = true;
    /// Swap-AB kernels issue their first weight copies without an L2 policy (the rest
    /// evict-first). Bitwise identical.
    bool unhinted_weight_copies = true;
    /// MoE layer plans run executions of few tokens in their two decode kernels
    /// (moe/decode_layer.hpp) instead of routing, the grouped GEMMs and the combine. Results
    /// agree to fp32 rounding.
    bool decode_layer = true;
    /// Tests only, off by default: native kernels OR bits of what they did into the plan's
    /// status word (the BLOCK scale ring read, an idle half skipped, an unhinted weight copy),
    /// so that a test sees a feature run rather than the plan's description of it.
    bool trace_features = false;
};

/// Bits of a plan's status word above the MOEGEMM_* ones, written only with trace_features.
inline constexpr uint32_t kTraceScaleRing = 1u << 16;        ///< consumers read staged scales
inline constexpr uint32_t kTraceIdleHalfSkipped = 1u << 17;  ///< a half skipped its MMAs
inline constexpr uint32_t kTraceUnhintedCopy = 1u << 18;     ///< a weight copy went unhinted
inline constexpr uint32_t kTraceDecodeLayer = 1u << 19;      ///< the layer's decode kernels ran

/// The options by name (the field names above), for the test suite's and the bench's settings.
struct NamedPlanOption {
    const char* name;
    bool PlanOptions::*field;
};
inline constexpr NamedPlanOption kPlanOptions[] = {
    {"tile_tickets", &PlanOptions::tile_tickets},
    {"host_schedule", &PlanOptions::host_schedule},
    {"dependent_launch", &PlanOptions::dependent_launch},
    {"swap_ab", &PlanOptions::swap_ab},
    {"block_scale_ring", &PlanOptions::block_scale_ring},
    {"skip_idle_halves", &PlanOptions::skip_idle_halves},
    {"unhinted_weight_copies", &PlanOptions::unhinted_weight_copies},
    {"decode_layer", &PlanOptions::decode_layer},
    {"trace_features", &PlanOptions::trace_features},
};

/// Sets the option called `name` to `value`; false for an unknown name.
inline bool set_plan_option(PlanOptions& options, std::string_view name, bool value) noexcept {
    for (const NamedPlanOption& o : kPlanOptions) {
        if (name == o.name) {
            options.*o.field = value;
            return true;
        }
    }
    return false;
}

/// The options that differ from the defaults, as "name=0" or "name=1": for reports, and empty
/// where a plan runs the library's choices.
inline std::vector<std::string> changed_plan_options(const PlanOptions& options) {
    const PlanOptions defaults;
    std::vector<std::string> changed;
    for (const NamedPlanOption& o : kPlanOptions) {
        if (options.*o.field != defaults.*o.field)
            changed.push_back(std::string(o.name) + (options.*o.field ? "=1" : "=0"));
    }
    return changed;
}

namespace testing {

/// moegemm_plan_create with comparison options instead of the defaults. (Weak: moegemm-bench
/// also runs on a release build of the library, which lacks it, for A/B comparisons.)
MOEGEMM_TESTING_API __attribute__((weak)) moegemm_status_t plan_create_with_options(
    const moegemm_problem_t* problem, const PlanOptions& options, moegemm_plan_t* out);

/// moegemm_moe_plan_create with comparison options (its GEMM plans take them too). Weak, as
/// plan_create_with_options.
MOEGEMM_TESTING_API __attribute__((weak)) moegemm_status_t moe_plan_create_with_options(
    const moegemm_moe_problem_t* problem, const PlanOptions& options, moegemm_moe_plan_t* out);

}  // namespace testing
}  // namespace moegemm

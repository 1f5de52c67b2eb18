// The native sm_90a backend: one persistent TMA + wgmma kernel for every layout, with the
// expert sizes read on the GPU (host sizes travel by value in the launch).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "device_caps.hpp"
#include "heuristic.hpp"
#include "native/launch_plan.hpp"
#include "problem.hpp"

namespace moegemm {

class Kernel;
struct BackendResources;

namespace native {

bool can_implement(const Config& config, const ProblemSummary& p, const DeviceCaps& d,
                   std::string* why);
std::size_t workspace_bytes(const ProblemDesc& p, const DeviceCaps& d);
std::unique_ptr<Kernel> create(const Config& config, const ProblemDesc& p, const DeviceCaps& d,
                               const ExpertSizes& sizes, BackendResources& r);

/// The registry's function pointers for one configuration.
template <int BlockM, int BlockN, bool TmaStore, int ClusterN, bool SwapAB>
bool can_implement_variant(const ProblemSummary& p, const DeviceCaps& d, std::string* why) {
    return can_implement(Config{BlockM, BlockN, TmaStore, ClusterN, SwapAB}, p, d, why);
}
template <int BlockM, int BlockN, bool TmaStore, int ClusterN, bool SwapAB>
std::unique_ptr<Kernel> create_variant(const ProblemDesc& p, const DeviceCaps& d,
                                       const ExpertSizes& sizes, BackendResources& r) {
    return create(Config{BlockM, BlockN, TmaStore, ClusterN, SwapAB}, p, d, sizes, r);
}

}  // namespace native
}  // namespace moegemm

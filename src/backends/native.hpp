// The native sm_90a backend: one persistent TMA + wgmma kernel for every layout, with the
// expert sizes read on the GPU (host sizes travel by value in the launch).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "device_caps.hpp"
#include "heuristic.hpp"
#include "problem.hpp"

namespace moegemm {

class Kernel;
struct BackendResources;

namespace native {

bool can_implement(const ProblemSummary& p, const DeviceCaps& d, std::string* why);
/// The staged (TMA-store) epilogue also needs a 16-bit output.
bool can_implement_staged(const ProblemSummary& p, const DeviceCaps& d, std::string* why);
std::size_t workspace_bytes(const ProblemDesc& p, const DeviceCaps& d);

std::unique_ptr<Kernel> create_bn128(const ProblemDesc& p, const DeviceCaps& d,
                                     const ExpertSizes& sizes, BackendResources& r);
std::unique_ptr<Kernel> create_bn256(const ProblemDesc& p, const DeviceCaps& d,
                                     const ExpertSizes& sizes, BackendResources& r);
std::unique_ptr<Kernel> create_bn128_staged(const ProblemDesc& p, const DeviceCaps& d,
                                            const ExpertSizes& sizes, BackendResources& r);
std::unique_ptr<Kernel> create_bn256_staged(const ProblemDesc& p, const DeviceCaps& d,
                                            const ExpertSizes& sizes, BackendResources& r);

}  // namespace native
}  // namespace moegemm

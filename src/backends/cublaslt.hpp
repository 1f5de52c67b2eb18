// The cuBLASLt baseline backend: serves every layout on any GPU of compute capability >= 8.0
// except VARIABLE with device-resident sizes (cuBLASLt needs the row counts on the host), and
// the epilogue options cuBLASLt's epilogues have: per-expert alpha, a bias of the output's
// type, GELU (tanh). Row scales, SiLU, gated activations and gathered A rows are refused with
// NOT_SUPPORTED and the reason; an unsupported bias type when the kernel is created.
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

namespace cublaslt {

bool can_implement_expert_loop(const ProblemSummary& p, const DeviceCaps& d, std::string* why);
bool can_implement_strided_batched(const ProblemSummary& p, const DeviceCaps& d,
                                   std::string* why);
std::size_t workspace_bytes(const ProblemDesc& p, const DeviceCaps& d);

std::unique_ptr<Kernel> create_expert_loop(const ProblemDesc& p, const DeviceCaps& d,
                                           const ExpertSizes& sizes, BackendResources& r);
std::unique_ptr<Kernel> create_strided_batched(const ProblemDesc& p, const DeviceCaps& d,
                                               const ExpertSizes& sizes, BackendResources& r);

}  // namespace cublaslt
}  // namespace moegemm

// The registry of kernel variants: for each, its name, the backend it belongs to, a pure
// can-implement predicate, the workspace it needs, and how to instantiate it for a plan.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "device_caps.hpp"
#include "heuristic.hpp"
#include "problem.hpp"

struct CUstream_st;

namespace moegemm {

class CublasLtContext;

/// Per-plan resources that kernels of one backend share (handles, caches). Created lazily.
struct BackendResources {
    BackendResources();
    ~BackendResources();
    void release() noexcept;  ///< destroys every backend's handles
    std::unique_ptr<CublasLtContext> cublaslt;
    uint32_t* status_word = nullptr;  ///< the plan's device word for size clamps (not owned)
};

/// A variant instantiated for one plan and one set of sizes; immutable once built, so that
/// concurrent executions on different streams are safe.
class Kernel {
public:
    virtual ~Kernel() = default;
    virtual void launch(const ExecuteArgs& args, CUstream_st* stream) const = 0;
    /// Kernel-specific detail for moegemm_plan_describe (algorithm, tile...).
    virtual std::string describe() const = 0;
};

struct KernelVariant {
    KernelId id;
    const char* name;
    moegemm_backend_t backend;
    int block_m;           ///< output tile height of native variants (0: chosen by cuBLASLt)
    int block_n;           ///< output tile width of native variants (0: chosen by cuBLASLt)
    bool tma_store_epilogue;  ///< native: outputs leave through shared memory and TMA stores
    int cluster_n;         ///< native: CTAs per cluster along N sharing the A tile
    bool swap_ab;          ///< native: weights as wgmma's A, tokens as its B (decode)
    /// Pure: whether the variant can serve `problem` on `device`; if not, says why in `why`.
    bool (*can_implement)(const ProblemSummary& problem, const DeviceCaps& device,
                          std::string* why);
    /// Pure: device workspace bytes, independent of the expert sizes.
    std::size_t (*workspace_bytes)(const ProblemDesc& problem, const DeviceCaps& device);
    std::unique_ptr<Kernel> (*create)(const ProblemDesc& problem, const DeviceCaps& device,
                                      const ExpertSizes& sizes, BackendResources& resources);
};

/// All variants, in the heuristic's order of preference.
const KernelVariant* registry_begin() noexcept;
const KernelVariant* registry_end() noexcept;
const KernelVariant& variant(KernelId id);

}  // namespace moegemm

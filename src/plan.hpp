// A plan: the validated problem, the device's capabilities (queried once), the expert sizes,
// the heuristic's selection and the instantiated kernel. All host work happens here, at
// creation and when sizes are set, so that execute only enqueues.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "device_caps.hpp"
#include "device_words.hpp"
#include "heuristic.hpp"
#include "moegemm/moegemm.h"
#include "plan_options.hpp"
#include "problem.hpp"
#include "recently_checked.hpp"
#include "registry.hpp"

namespace moegemm {

/// Whether native kernels may be launched with programmatic dependent launch: unless the
/// environment says MOEGEMM_PDL=0 (read at each plan creation).
bool dependent_launch_allowed();

/// The workspace a plan of `backend` needs for `p`: the most any of its variants may need.
std::size_t backend_workspace_bytes(const ProblemDesc& p, const DeviceCaps& d,
                                    moegemm_backend_t backend);

/// The backends (backend_bit) whose kernels a workspace of `workspace_bytes` covers.
uint32_t backends_covered(const ProblemDesc& p, const DeviceCaps& d,
                          std::size_t workspace_bytes);

/// Throws INVALID_STATE when `stream` is being captured: autotune launches and waits (the
/// plan's device current).
void require_autotune_not_captured(CUstream_st* stream);

class Plan {
public:
    /// Validates the problem, checks the device, selects a kernel. Throws Error.
    explicit Plan(const moegemm_problem_t* problem, const PlanOptions& options = {});
    ~Plan();
    Plan(const Plan&) = delete;
    Plan& operator=(const Plan&) = delete;

    /// Strong guarantee: on failure the plan keeps its previous sizes and kernel.
    void set_expert_sizes(const int32_t* sizes, moegemm_memory_t where);
    std::size_t workspace_bytes() const noexcept { return workspace_bytes_; }
    uint32_t* status_word() const noexcept { return status_word_.get(); }
    std::string describe() const;
    /// The kernel's name, and "(tuned)" after it where moegemm_plan_autotune chose it: what a
    /// layer's one-line description has room for.
    std::string kernel_brief() const;
    void execute(const ExecuteArgs& args, CUstream_st* stream) const;
    /// execute without its argument checks, for the MoE layer, whose own checks cover the
    /// tensors it passes (its intermediates live in its workspace).
    void enqueue(const ExecuteArgs& args, CUstream_st* stream) const;
    /// Times every kernel that serves the plan's problem and sizes on the caller's buffers
    /// (of the plan's backend, and of another the problem allows where the workspace passed
    /// covers that backend's), makes the fastest the plan's kernel and records it in the
    /// process's tune cache (autotune.cpp). Waits for the stream. Strong guarantee, as
    /// set_expert_sizes.
    void autotune(const ExecuteArgs& args, CUstream_st* stream);

    const ProblemDesc& problem() const noexcept { return problem_; }

private:
    /// execute's checks (the plan's device current); false when no row can be computed.
    bool check_execute(const ExecuteArgs& args, CUstream_st* stream) const;

    ProblemDesc problem_;
    DeviceCaps device_;
    ExpertSizes sizes_;
    Selection selection_;
    std::size_t workspace_bytes_ = 0;
    /// Device word where kernels that read device sizes record what they clamped.
    DeviceWord status_word_;  // from the device's pool: destroying a plan frees no memory
    BackendResources resources_;
    std::unique_ptr<Kernel> kernel_;  // null until sizes are known
    /// Streams whose device was checked and found to be the plan's: execute skips the two
    /// runtime queries of that check when one comes again, a third of the host cost of a call.
    /// A stream destroyed and re-created at the same address on another device is then not
    /// caught here: its launch fails instead (MOEGEMM_STATUS_CUDA_ERROR rather than
    /// INVALID_VALUE). The null (legacy default) stream counts as checked from the start: it
    /// is always the current device's, which execute makes the plan's.
    mutable RecentlyChecked<CUstream_st*> checked_streams_;
    /// Likewise workspaces and outputs found to be memory the plan's device can write.
    mutable RecentlyChecked<const void*> checked_workspaces_;
    mutable RecentlyChecked<const void*> checked_outputs_;
};

}  // namespace moegemm

/// The opaque handle of the C API. The magic word lets the API detect (best effort) a handle
/// that is not a live plan, such as one destroyed already.
struct moegemm_plan_s {
    static constexpr uint32_t kAlive = 0x4d6f4547u;  // "MoEG"
    static constexpr uint32_t kDead = 0xdeadbeefu;

    moegemm_plan_s(const moegemm_problem_t* problem, const moegemm::PlanOptions& options)
        : plan(problem, options) {}

    uint32_t magic = kAlive;
    moegemm::Plan plan;
};

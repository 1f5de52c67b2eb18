// The MoE layer plan (moegemm_moe_plan_*): routing, FC1 with its gather and activation, FC2,
// and the weighted combine, enqueued from device data. FC1 and FC2 are grouped GEMM plans of
// the native backend (VARIABLE, sizes on the device) whose sizes and gather indices routing
// writes into the caller's workspace at each execution.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "device_caps.hpp"
#include "device_words.hpp"
#include "moe/decode_layer.hpp"
#include "moe/quantize.hpp"
#include "moe/routing.hpp"
#include "moegemm/moegemm.h"
#include "plan.hpp"
#include "plan_options.hpp"

namespace moegemm {

/// A moegemm_moe_problem_t that passed validate_moe_problem.
struct MoeDesc {
    int32_t num_experts = 0;
    int32_t first_expert = 0;
    int32_t local_experts = 0;
    int32_t top_k = 0;
    int64_t hidden = 0;
    int64_t intermediate = 0;
    int64_t max_tokens = 0;
    moegemm_dtype_t dtype = MOEGEMM_DTYPE_BF16;
    moegemm_activation_t activation = MOEGEMM_ACTIVATION_NONE;
    moegemm_gate_layout_t gate_layout = MOEGEMM_GATE_UP_HALVES;
    float activation_alpha = 0.0f;
    float activation_limit = 0.0f;
    uint32_t fc1_inputs = 0;
    uint32_t fc2_inputs = 0;
    bool ids_int64 = false;
    int32_t device = 0;
    int64_t expected_tokens = 0;
    /// weight_scales BLOCK: E4M3 weights with 128 x 128 block scales; x and FC1's activated
    /// output quantized to E4M3 per 1 x 128 group on the way into the GEMMs.
    bool fp8 = false;
};

/// Checks every host-visible rule of a layer problem; throws Error naming the field.
MoeDesc validate_moe_problem(const moegemm_moe_problem_t* problem);

/// Whether FC1 reads x copied into expert order by a gather kernel (moe::launch_gather_tokens)
/// rather than gathering single rows in its producer: from kCopyTokensRowsPerExpert expected
/// rows per expert on. Each gathered row is a TMA copy of its own (128 bytes a k-block): from a
/// few rows per tile on, these small copies hold the producer back and the weights no longer
/// stream at DRAM speed, while the sorted copy costs one kernel and 4 bytes per row element,
/// little beside FC1's weights. Below (decode) the extra kernel costs more than the gather.
/// fp8 layers always copy: the copy quantizes x. Pure.
inline constexpr int64_t kCopyTokensRowsPerExpert = 4;
bool copies_tokens(const MoeDesc& desc);

/// The grouped GEMM problems of FC1 and FC2 (pure; CPU-tested).
moegemm_problem_t fc1_problem(const MoeDesc& desc);
moegemm_problem_t fc2_problem(const MoeDesc& desc);

/// Where the layer's intermediates live in its workspace (byte offsets, 256-byte aligned).
struct MoeWorkspace {
    std::size_t routing = 0;       ///< moe::RoutingLayout's region
    /// [max_tokens * top_k, I] of dtype; fp8: [rows, 2I or I] BF16, FC1's product before its
    /// activation
    std::size_t fc1_output = 0;
    /// [max_tokens * top_k, H] of dtype; before FC2 also the sorted copy of x (copies_tokens),
    /// which FC1 has read by then
    std::size_t fc2_output = 0;
    /// fp8 only (else 0): x quantized in expert order [rows, H] E4M3 and its scales
    /// [rows, ceil(H / 128)]; FC1's activated output quantized [rows, I] E4M3 and its scales
    /// [rows, ceil(I / 128)]
    std::size_t fc1_input = 0, fc1_input_scale = 0;
    std::size_t fc2_input = 0, fc2_input_scale = 0;
    std::size_t gemm = 0;          ///< the GEMMs' workspace, shared (one stream)
    std::size_t gemm_bytes = 0;
    std::size_t total_bytes = 0;
};
MoeWorkspace moe_workspace(const MoeDesc& desc, const moe::RoutingLayout& routing,
                           std::size_t gemm_bytes);

class MoePlan {
public:
    explicit MoePlan(const moegemm_moe_problem_t* problem, const PlanOptions& options = {});
    ~MoePlan();
    MoePlan(const MoePlan&) = delete;
    MoePlan& operator=(const MoePlan&) = delete;

    std::size_t workspace_bytes() const noexcept { return workspace_.total_bytes; }
    uint32_t* status_word() const noexcept { return status_word_.get(); }
    std::string describe() const;
    void execute(const moegemm_moe_tensors_t& tensors, void* workspace,
                 std::size_t workspace_bytes, CUstream_st* stream) const;
    /// The layer once, with FC1 and FC2 tuned in turn on the buffers of this call
    /// (Plan::autotune); waits for the stream. Not under stream capture.
    void autotune(const moegemm_moe_tensors_t& tensors, void* workspace,
                  std::size_t workspace_bytes, CUstream_st* stream);

private:
    /// execute's checks and steps, with `run_gemm(plan, args)` for FC1 and FC2; executions of
    /// at most decode_tokens_ tokens run the decode kernels instead where `may_decode`.
    template <typename RunGemm>
    void run(const moegemm_moe_tensors_t& tensors, void* workspace, std::size_t workspace_bytes,
             CUstream_st* stream, bool may_decode, RunGemm&& run_gemm) const;

    MoeDesc desc_;
    DeviceCaps device_;
    moe::RoutingShape routing_shape_;
    moe::RoutingLayout routing_;
    moe::CombineShape combine_shape_;
    moe::ActivationShape activation_shape_;  // fp8: between FC1 and FC2
    std::unique_ptr<Plan> fc1_;
    std::unique_ptr<Plan> fc2_;
    bool copies_tokens_ = false;  // copies_tokens(desc_): FC1's plan was made for it
    moe::DecodeShape decode_shape_;
    /// Executions of at most this many tokens (max_tokens with a device count) run the decode
    /// kernels; 0: never (fp8 layers, the decode_layer option off, rows too long to stage).
    int64_t decode_tokens_ = 0;
    uint32_t trace_bit_ = 0;  // kTraceDecodeLayer with the trace_features option
    MoeWorkspace workspace_;
    DeviceWord status_word_;  // from the device's pool: destroying a plan frees no memory
    bool dependent_launch_ = true;
};

}  // namespace moegemm

/// The opaque handle of the C API (as moegemm_plan_s).
struct moegemm_moe_plan_s {
    static constexpr uint32_t kAlive = 0x4d6f4c61u;  // "MoLa"
    static constexpr uint32_t kDead = 0xdeadbeefu;

    moegemm_moe_plan_s(const moegemm_moe_problem_t* problem, const moegemm::PlanOptions& options)
        : plan(problem, options) {}

    uint32_t magic = kAlive;
    moegemm::MoePlan plan;
};

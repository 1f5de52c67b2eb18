// The MoE layer plan: validation of the layer, its two grouped GEMM plans, its workspace, and
// the sequence of kernels each execution enqueues (moe_plan.hpp).
#include "moe/moe_plan.hpp"

#include <algorithm>
#include <limits>
#include <tuple>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "error.hpp"
#include "moe/quantize.hpp"
#include "versioned_struct.hpp"

namespace moegemm {

namespace {

constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max();
/// Most experts a model may have (ids are checked against it on the GPU).
constexpr int32_t kMaxModelExperts = 1 << 16;
/// Most choices per token (the combine sums them in order).
constexpr int32_t kMaxTopK = 64;

constexpr std::size_t align256(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

// Typical rows per local expert, the GEMMs' kernel hint: tokens x top_k spread over the
// model's experts, at least 1.
int64_t expected_rows_per_expert(const MoeDesc& d) {
    const int64_t tokens = d.expected_tokens > 0 ? d.expected_tokens : d.max_tokens;
    return std::max<int64_t>(1, tokens * d.top_k / d.num_experts);
}

moegemm_problem_t gemm_problem(const MoeDesc& d, int64_t n, int64_t k, uint32_t inputs) {
    moegemm_problem_t p = default_problem();
    p.layout = MOEGEMM_LAYOUT_VARIABLE;
    p.num_experts = d.local_experts;
    p.n = n;
    p.k = k;
    p.max_rows = d.max_tokens * d.top_k;
    p.a_type = p.b_type = p.d_type = d.dtype;
    if (d.fp8) {  // quantized activations and weights, BF16 products
        p.a_type = p.b_type = MOEGEMM_DTYPE_E4M3;
        p.scale_mode = MOEGEMM_SCALE_BLOCK;
    }
    p.backend = MOEGEMM_BACKEND_NATIVE;
    p.device = d.device;
    p.expected_rows = std::min(expected_rows_per_expert(d), p.max_rows);
    p.epilogue_inputs = inputs;
    p.bias_type = d.dtype;
    return p;
}

}  // namespace

MoeDesc validate_moe_problem(const moegemm_moe_problem_t* caller) {
    require(caller != nullptr, MOEGEMM_STATUS_INVALID_VALUE, "problem is NULL");
    const moegemm_moe_problem_t p = read_versioned_struct(
        *caller, sizeof(moegemm_moe_problem_t), "problem", "moegemm_moe_problem_init");
    check_enum(p.dtype, MOEGEMM_DTYPE_E4M3, "dtype");
    check_enum(p.activation, MOEGEMM_ACTIVATION_SWIGLU_CLAMPED, "activation");
    check_enum(p.gate_layout, MOEGEMM_GATE_UP_INTERLEAVED, "gate_layout");
    check_enum(p.id_type, MOEGEMM_INDEX_INT64, "id_type");
    check_enum(p.backend, MOEGEMM_BACKEND_CUBLASLT, "backend");
    check_enum(p.weight_scales, MOEGEMM_SCALE_BLOCK, "weight_scales");

    require(p.num_experts >= 1 && p.num_experts <= kMaxModelExperts, MOEGEMM_STATUS_INVALID_VALUE,
            "problem->num_experts = {} must be in [1, {}]", p.num_experts, kMaxModelExperts);
    const int32_t local = p.local_experts == 0 ? p.num_experts : p.local_experts;
    require(local >= 1 && local <= MOEGEMM_MAX_EXPERTS, MOEGEMM_STATUS_INVALID_VALUE,
            "problem->local_experts = {} must be in [1, {}] (0: all num_experts = {})",
            p.local_experts, MOEGEMM_MAX_EXPERTS, p.num_experts);
    require(p.first_expert >= 0 && int64_t{p.first_expert} + local <= p.num_experts,
            MOEGEMM_STATUS_INVALID_VALUE,
            "problem: this rank's experts [{}, {}) are not within the model's [0, {})",
            p.first_expert, int64_t{p.first_expert} + local, p.num_experts);
    require(p.top_k >= 1 && p.top_k <= std::min(p.num_experts, kMaxTopK),
            MOEGEMM_STATUS_INVALID_VALUE, "problem->top_k = {} must be in [1, min(num_experts, {})]",
            p.top_k, kMaxTopK);
    for (const auto& [name, value] : {std::pair{"hidden", p.hidden},
                                      std::pair{"intermediate", p.intermediate},
                                      std::pair{"max_tokens", p.max_tokens}}) {
        require(value >= 1 && value <= kMaxDim, MOEGEMM_STATUS_INVALID_VALUE,
                "problem->{} = {} must be in [1, 2^31 - 1]", name, value);
    }
    require(p.max_tokens * p.top_k <= kMaxDim, MOEGEMM_STATUS_INVALID_VALUE,
            "problem: max_tokens * top_k = {} routed rows must stay below 2^31",
            p.max_tokens * p.top_k);
    require(p.expected_tokens >= 0, MOEGEMM_STATUS_INVALID_VALUE,
            "problem->expected_tokens = {} must be >= 0 (0: unknown)", p.expected_tokens);
    require(p.device >= 0, MOEGEMM_STATUS_INVALID_VALUE,
            "problem->device = {} must be a device ordinal >= 0", p.device);
    constexpr uint32_t kLayerInputs = MOEGEMM_EPILOGUE_ALPHA | MOEGEMM_EPILOGUE_BIAS;
    for (const auto& [name, bits] : {std::pair{"fc1_inputs", p.fc1_inputs},
                                     std::pair{"fc2_inputs", p.fc2_inputs}}) {
        require((bits & ~kLayerInputs) == 0, MOEGEMM_STATUS_INVALID_VALUE,
                "problem->{} = {:#x}: only MOEGEMM_EPILOGUE_ALPHA and MOEGEMM_EPILOGUE_BIAS "
                "(the router weights are applied in the combine)",
                name, bits);
    }
    require(p.dtype == MOEGEMM_DTYPE_BF16 || p.dtype == MOEGEMM_DTYPE_F16,
            p.dtype == MOEGEMM_DTYPE_F32 ? MOEGEMM_STATUS_INVALID_VALUE
                                         : MOEGEMM_STATUS_NOT_SUPPORTED,
            "problem->dtype = {}: the layer runs BF16 or F16 (E4M3 weights: weight_scales "
            "BLOCK)",
            dtype_name(p.dtype));
    require(p.backend != MOEGEMM_BACKEND_CUBLASLT, MOEGEMM_STATUS_NOT_SUPPORTED,
            "problem->backend = CUBLASLT: the layer's gather and fused epilogues need the native "
            "sm_90 kernels");
    for (const auto& [name, value] : {std::pair{"hidden", p.hidden},
                                      std::pair{"intermediate", p.intermediate}}) {
        require(value % 8 == 0, MOEGEMM_STATUS_MISALIGNED,
                "problem->{} = {} must be a multiple of 8 (16-byte rows)", name, value);
    }
    check_activation_parameters(p.activation, p.activation_alpha, p.activation_limit);
    check_gate_layout(p.activation, p.gate_layout);
    const bool fp8 = p.weight_scales == MOEGEMM_SCALE_BLOCK;
    require(p.weight_scales == MOEGEMM_SCALE_NONE || fp8, MOEGEMM_STATUS_NOT_SUPPORTED,
            "problem->weight_scales = {}: the layer takes weights of dtype (NONE) or E4M3 with "
            "128 x 128 block scales (BLOCK)",
            scale_mode_name(p.weight_scales));
    if (fp8) {
        require(p.dtype == MOEGEMM_DTYPE_BF16, MOEGEMM_STATUS_NOT_SUPPORTED,
                "problem->dtype = {} with weight_scales BLOCK: fp8 layers take and write BF16",
                dtype_name(p.dtype));
        require(p.fc1_inputs == 0 && p.fc2_inputs == 0, MOEGEMM_STATUS_NOT_SUPPORTED,
                "problem: fc1_inputs {:#x} and fc2_inputs {:#x} with weight_scales BLOCK: fp8 "
                "layers take no alpha or bias",
                p.fc1_inputs, p.fc2_inputs);
        for (const auto& [name, value] : {std::pair{"hidden", p.hidden},
                                          std::pair{"intermediate", p.intermediate}}) {
            require(value % 16 == 0, MOEGEMM_STATUS_MISALIGNED,
                    "problem->{} = {} must be a multiple of 16 with weight_scales BLOCK "
                    "(E4M3 rows of 16 bytes)",
                    name, value);
        }
    }

    MoeDesc d;
    d.num_experts = p.num_experts;
    d.first_expert = p.first_expert;
    d.local_experts = local;
    d.top_k = p.top_k;
    d.hidden = p.hidden;
    d.intermediate = p.intermediate;
    d.max_tokens = p.max_tokens;
    d.dtype = p.dtype;
    d.activation = p.activation;
    d.gate_layout = p.gate_layout;
    d.activation_alpha = p.activation_alpha;
    d.activation_limit = p.activation_limit;
    d.fc1_inputs = p.fc1_inputs;
    d.fc2_inputs = p.fc2_inputs;
    d.ids_int64 = p.id_type == MOEGEMM_INDEX_INT64;
    d.device = p.device;
    d.expected_tokens = std::min(p.expected_tokens, p.max_tokens);
    d.fp8 = fp8;
    return d;
}

bool copies_tokens(const MoeDesc& d) {
    return d.fp8 || expected_rows_per_expert(d) >= kCopyTokensRowsPerExpert;
}

moegemm_problem_t fc1_problem(const MoeDesc& d) {
    const int64_t n = is_gated(d.activation) ? 2 * d.intermediate : d.intermediate;
    moegemm_problem_t p = gemm_problem(d, n, d.hidden, d.fc1_inputs);
    if (d.fp8) return p;  // the plain product: activation and quantization follow (quantize.hpp)
    p.activation = d.activation;
    p.gate_layout = d.gate_layout;
    p.activation_alpha = d.activation_alpha;
    p.activation_limit = d.activation_limit;
    p.gather_rows = copies_tokens(d) ? 0 : d.max_tokens;
    return p;
}

moegemm_problem_t fc2_problem(const MoeDesc& d) {
    return gemm_problem(d, d.hidden, d.intermediate, d.fc2_inputs);
}

MoeWorkspace moe_workspace(const MoeDesc& d, const moe::RoutingLayout& routing,
                           std::size_t gemm_bytes) {
    const auto rows = static_cast<std::size_t>(d.max_tokens) * static_cast<std::size_t>(d.top_k);
    const std::size_t element = dtype_bytes(d.dtype);
    const auto hidden = static_cast<std::size_t>(d.hidden);
    const auto intermediate = static_cast<std::size_t>(d.intermediate);
    // fp8: FC1's product before the activation, with gate and up columns.
    const std::size_t fc1_columns = d.fp8 && is_gated(d.activation) ? 2 * intermediate
                                                                     : intermediate;
    MoeWorkspace w;
    w.routing = 0;
    w.fc1_output = align256(routing.total_bytes);
    w.fc2_output = w.fc1_output + align256(rows * fc1_columns * element);
    std::size_t end = w.fc2_output + align256(rows * hidden * element);
    if (d.fp8) {
        const auto scales = [rows](std::size_t columns) {
            return align256(rows * static_cast<std::size_t>(moe::quant_groups(
                                       static_cast<int64_t>(columns))) * sizeof(float));
        };
        w.fc1_input = end;
        w.fc1_input_scale = w.fc1_input + align256(rows * hidden);
        w.fc2_input = w.fc1_input_scale + scales(hidden);
        w.fc2_input_scale = w.fc2_input + align256(rows * intermediate);
        end = w.fc2_input_scale + scales(intermediate);
    }
    w.gemm = end;
    w.gemm_bytes = gemm_bytes;
    w.total_bytes = w.gemm + align256(gemm_bytes);
    return w;
}

MoePlan::MoePlan(const moegemm_moe_problem_t* problem, const PlanOptions& options)
    : desc_(validate_moe_problem(problem)),
      device_(query_device_caps(desc_.device)),
      status_word_(nullptr, DeviceWordRelease{desc_.device}) {
    routing_shape_.num_experts = desc_.num_experts;
    routing_shape_.first_expert = desc_.first_expert;
    routing_shape_.local_experts = desc_.local_experts;
    routing_shape_.top_k = desc_.top_k;
    routing_shape_.max_tokens = desc_.max_tokens;
    routing_shape_.ids_int64 = desc_.ids_int64;
    routing_ = moe::routing_layout(routing_shape_);
    combine_shape_.hidden = desc_.hidden;
    combine_shape_.top_k = desc_.top_k;
    combine_shape_.max_tokens = desc_.max_tokens;
    combine_shape_.dtype = desc_.dtype;
    (void)moe::combine_grid(combine_shape_, device_.sm_count);  // checks the shape
    activation_shape_.intermediate = desc_.intermediate;
    activation_shape_.activation = desc_.activation;
    activation_shape_.gate_layout = desc_.gate_layout;
    activation_shape_.alpha = desc_.activation_alpha;
    activation_shape_.limit = desc_.activation_limit;
    activation_shape_.local_experts = desc_.local_experts;
    activation_shape_.max_rows = desc_.max_tokens * desc_.top_k;
    dependent_launch_ = dependent_launch_allowed();

    copies_tokens_ = copies_tokens(desc_);
    const moegemm_problem_t fc1 = fc1_problem(desc_);
    const moegemm_problem_t fc2 = fc2_problem(desc_);
    fc1_ = std::make_unique<Plan>(&fc1, options);
    fc2_ = std::make_unique<Plan>(&fc2, options);
    // The sizes live in each execution's workspace (routing writes them there), so the GEMM
    // plans take device sizes now, at a placeholder of device memory, and each execution
    // passes the real pointer (ExecuteArgs::device_sizes).
    for (Plan* gemm : {fc1_.get(), fc2_.get()})
        gemm->set_expert_sizes(reinterpret_cast<const int32_t*>(gemm->status_word()),
                               MOEGEMM_MEMORY_DEVICE);
    workspace_ = moe_workspace(desc_, routing_,
                               std::max(fc1_->workspace_bytes(), fc2_->workspace_bytes()));

    decode_shape_.num_experts = desc_.num_experts;
    decode_shape_.first_expert = desc_.first_expert;
    decode_shape_.local_experts = desc_.local_experts;
    decode_shape_.top_k = desc_.top_k;
    decode_shape_.hidden = desc_.hidden;
    decode_shape_.intermediate = desc_.intermediate;
    decode_shape_.max_tokens = desc_.max_tokens;
    decode_shape_.dtype = desc_.dtype;
    decode_shape_.activation = desc_.activation;
    decode_shape_.gate_layout = desc_.gate_layout;
    decode_shape_.activation_alpha = desc_.activation_alpha;
    decode_shape_.activation_limit = desc_.activation_limit;
    decode_shape_.ids_int64 = desc_.ids_int64;
    if (options.decode_layer && !desc_.fp8) {
        decode_tokens_ = moe::decode_token_limit(decode_shape_);
        ScopedDevice on(desc_.device);
        if (decode_tokens_ > 0) moe::prepare_decode_layer(desc_.dtype);
    }
    trace_bit_ = options.trace_features ? kTraceDecodeLayer : 0;

    status_word_ = acquire_device_word(desc_.device);
}

MoePlan::~MoePlan() {
    try {
        ScopedDevice on(desc_.device);
        fc1_.reset();
        fc2_.reset();
        status_word_.reset();
    } catch (...) {
    }
}

std::string MoePlan::describe() const {
    // The GEMMs' kernels first, their details after: a long line is cut at the end.
    std::string text = fmt::format(
        "moe layer E={} (local [{}, {})) top_k={} H={} I={} {} {}{}{}; FC1 {}, FC2 {}; FC1: {}; "
        "FC2: {}",
        desc_.num_experts, desc_.first_expert, desc_.first_expert + desc_.local_experts,
        desc_.top_k, desc_.hidden, desc_.intermediate, dtype_name(desc_.dtype),
        activation_name(desc_.activation),
        decode_tokens_ > 0
            ? fmt::format(", up to {} tokens in the two decode kernels", decode_tokens_)
            : std::string(),
        desc_.fp8 ? ", E4M3 weights with 128 x 128 block scales, tokens quantized per 1 x 128 "
                    "into expert order, FC1's activated output quantized per 1 x 128"
                  : (copies_tokens_ ? ", tokens copied into expert order" : ""),
        fc1_->kernel_brief(), fc2_->kernel_brief(), fc1_->describe(), fc2_->describe());
    if (text.size() >= MOEGEMM_DESCRIBE_MAX) text.resize(MOEGEMM_DESCRIBE_MAX - 1);
    return text;
}

void MoePlan::execute(const moegemm_moe_tensors_t& tensors, void* workspace,
                      std::size_t workspace_bytes, CUstream_st* stream) const {
    run(tensors, workspace, workspace_bytes, stream, true,
        [stream](Plan& gemm, const ExecuteArgs& args) { gemm.enqueue(args, stream); });
}

void MoePlan::autotune(const moegemm_moe_tensors_t& tensors, void* workspace,
                       std::size_t workspace_bytes, CUstream_st* stream) {
    {
        ScopedDevice on(desc_.device);
        require_autotune_not_captured(stream);
    }
    // The layer's steps as execute enqueues them, each GEMM tuned on the buffers the steps
    // before it filled (Plan::autotune leaves its product in place for the next step).
    run(tensors, workspace, workspace_bytes, stream, false,
        [stream](Plan& gemm, const ExecuteArgs& args) { gemm.autotune(args, stream); });
    ScopedDevice on(desc_.device);
    MOEGEMM_CUDA_CHECK(cudaStreamSynchronize(stream));
}

template <typename RunGemm>
void MoePlan::run(const moegemm_moe_tensors_t& caller, void* workspace,
                  std::size_t workspace_bytes, CUstream_st* stream, bool may_decode,
                  RunGemm&& run_gemm) const {
    const moegemm_moe_tensors_t t = read_versioned_struct(
        caller, sizeof(moegemm_moe_tensors_t), "tensors", "moegemm_moe_tensors_init");
    const bool device_count = t.num_tokens_device != nullptr;
    require(device_count || (t.num_tokens >= 0 && t.num_tokens <= desc_.max_tokens),
            MOEGEMM_STATUS_INVALID_VALUE,
            "tensors->num_tokens = {} must be in [0, max_tokens = {}]", t.num_tokens,
            desc_.max_tokens);
    // Rows an execution may touch: T, or the capacity when T lives on the device.
    const auto tokens = static_cast<std::size_t>(device_count ? desc_.max_tokens : t.num_tokens);
    const bool has_rows = tokens > 0;
    const std::size_t element = dtype_bytes(desc_.dtype);
    const std::size_t weight_element = desc_.fp8 ? 1 : element;
    const auto local = static_cast<std::size_t>(desc_.local_experts);
    const auto hidden = static_cast<std::size_t>(desc_.hidden);
    const auto intermediate = static_cast<std::size_t>(desc_.intermediate);
    const auto fc1_n = static_cast<std::size_t>(is_gated(desc_.activation) ? 2 : 1) * intermediate;
    const auto k = static_cast<std::size_t>(desc_.top_k);
    const auto blocks = [](std::size_t columns) {
        return static_cast<std::size_t>(moe::quant_groups(static_cast<int64_t>(columns)));
    };
    struct Tensor {
        const char* name;
        const void* ptr;
        bool taken;
        std::size_t alignment;
        std::size_t bytes;
    };
    const Tensor tensors[] = {
        {"x", t.x, true, 16, tokens * hidden * element},
        {"topk_ids", t.topk_ids, true, desc_.ids_int64 ? 8u : 4u,
         tokens * k * (desc_.ids_int64 ? 8 : 4)},
        {"topk_weights", t.topk_weights, true, 4, tokens * k * sizeof(float)},
        {"w1", t.w1, true, 16, local * fc1_n * hidden * weight_element},
        {"w2", t.w2, true, 16, local * hidden * intermediate * weight_element},
        {"w1_scale", t.w1_scale, desc_.fp8, 16,
         local * blocks(fc1_n) * blocks(hidden) * sizeof(float)},
        {"w2_scale", t.w2_scale, desc_.fp8, 16,
         local * blocks(hidden) * blocks(intermediate) * sizeof(float)},
        {"b1", t.b1, (desc_.fc1_inputs & MOEGEMM_EPILOGUE_BIAS) != 0, 16, local * fc1_n * element},
        {"b2", t.b2, (desc_.fc2_inputs & MOEGEMM_EPILOGUE_BIAS) != 0, 16, local * hidden * element},
        {"alpha1", t.alpha1, (desc_.fc1_inputs & MOEGEMM_EPILOGUE_ALPHA) != 0, 4,
         local * sizeof(float)},
        {"alpha2", t.alpha2, (desc_.fc2_inputs & MOEGEMM_EPILOGUE_ALPHA) != 0, 4,
         local * sizeof(float)},
        {"num_tokens_device", t.num_tokens_device, device_count, 4, sizeof(int32_t)},
    };
    const std::size_t out_bytes = tokens * hidden * element;
    // Which tensors are given is checked for all of them before any extent: a tensor the plan
    // does not take is named as such, not as an overlap its extent under the plan's types makes.
    for (const Tensor& x : tensors) {
        if (!x.taken) {
            require(x.ptr == nullptr, MOEGEMM_STATUS_INVALID_VALUE,
                    "tensors->{} is given but the plan does not take it (fc1_inputs / "
                    "fc2_inputs / weight_scales)",
                    x.name);
            continue;
        }
        require(x.ptr != nullptr || !has_rows, MOEGEMM_STATUS_INVALID_VALUE,
                "tensors->{} is NULL", x.name);
    }
    for (const Tensor& x : tensors) {
        if (!x.taken) continue;
        require(is_aligned(x.ptr, x.alignment), MOEGEMM_STATUS_MISALIGNED,
                "tensors->{} = {} is not {}-byte aligned", x.name, x.ptr, x.alignment);
        require(!ranges_overlap(t.out, out_bytes, x.ptr, x.bytes), MOEGEMM_STATUS_INVALID_VALUE,
                "tensors->out overlaps tensors->{}: the output must not alias an input", x.name);
    }
    require(t.out != nullptr || !has_rows, MOEGEMM_STATUS_INVALID_VALUE, "tensors->out is NULL");
    require(is_aligned(t.out, 16), MOEGEMM_STATUS_MISALIGNED,
            "tensors->out = {} is not 16-byte aligned", t.out);
    require(workspace_bytes >= workspace_.total_bytes, MOEGEMM_STATUS_WORKSPACE_TOO_SMALL,
            "workspace_bytes = {} is below the {} bytes this layer plan needs "
            "(moegemm_moe_plan_get_workspace_size)",
            workspace_bytes, workspace_.total_bytes);
    require(workspace != nullptr || !has_rows, MOEGEMM_STATUS_INVALID_VALUE,
            "workspace is NULL but the plan needs {} bytes", workspace_.total_bytes);
    require(is_aligned(workspace, 256), MOEGEMM_STATUS_MISALIGNED,
            "workspace = {} is not 256-byte aligned", workspace);
    for (const Tensor& x : tensors) {
        require(!ranges_overlap(workspace, workspace_bytes, x.ptr, x.taken ? x.bytes : 0),
                MOEGEMM_STATUS_INVALID_VALUE, "workspace overlaps tensors->{}", x.name);
    }
    require(!ranges_overlap(workspace, workspace_bytes, t.out, out_bytes), MOEGEMM_STATUS_INVALID_VALUE,
            "workspace overlaps tensors->out");
    if (!has_rows) return;

    ScopedDevice on(desc_.device);
    // The layer's own kernels (routing, gather, quantize, combine) load on their first launch.
    RelaxedCaptureMode first_launches_may_load;
    auto* const ws = static_cast<unsigned char*>(workspace);
    if (may_decode && static_cast<int64_t>(tokens) <= decode_tokens_) {
        const moe::DecodeTensors decode{t.x,  t.topk_ids, t.topk_weights, t.w1,     t.w2,
                                        t.b1, t.b2,       t.alpha1,       t.alpha2, t.out,
                                        t.num_tokens,     t.num_tokens_device};
        moe::launch_decode_layer(decode_shape_, decode, ws + workspace_.fc1_output,
                                 status_word_.get(), trace_bit_, device_.sm_count,
                                 device_.l2_bytes, dependent_launch_, stream);
        return;
    }
    void* const routing_ws = ws + workspace_.routing;
    const moe::RoutingBuffers routed = moe::routing_buffers(routing_, routing_ws);
    moe::launch_routing(routing_shape_, t.topk_ids, t.num_tokens, t.num_tokens_device, routing_ws,
                        status_word_.get(), dependent_launch_, stream);

    // FC1's product (fp8: before its activation) and FC2's; FC2's region first holds the
    // sorted copy of x, which FC1 has read by the time FC2 writes there.
    void* const fc1_out = ws + workspace_.fc1_output;
    void* const fc2_out = ws + workspace_.fc2_output;
    ExecuteArgs fc1;
    if (desc_.fp8) {  // x quantized into expert order, BLOCK scales beside it
        auto* const codes = ws + workspace_.fc1_input;
        auto* const scales = reinterpret_cast<float*>(ws + workspace_.fc1_input_scale);
        moe::launch_quantize_tokens(combine_shape_, t.x, routed.row_of_choice, t.num_tokens,
                                    t.num_tokens_device, codes, scales, device_.sm_count,
                                    dependent_launch_, stream);
        fc1.a = codes;
        fc1.a_scale = scales;
        fc1.b_scale = t.w1_scale;
    } else if (copies_tokens_) {
        moe::launch_gather_tokens(combine_shape_, t.x, routed.row_of_choice, t.num_tokens,
                                  t.num_tokens_device, fc2_out, device_.sm_count,
                                  dependent_launch_, stream);
        fc1.a = fc2_out;
    } else {
        fc1.a = t.x;
        fc1.a_rows = routed.token_of_row;
    }
    fc1.b = t.w1;
    fc1.d = fc1_out;
    fc1.alpha = t.alpha1;
    fc1.bias = t.b1;
    fc1.device_sizes = routed.expert_sizes;
    fc1.workspace = ws + workspace_.gemm;
    fc1.workspace_bytes = workspace_.gemm_bytes;
    run_gemm(*fc1_, fc1);

    ExecuteArgs fc2 = fc1;
    fc2.a = fc1_out;
    fc2.b = t.w2;
    fc2.d = fc2_out;
    fc2.alpha = t.alpha2;
    fc2.bias = t.b2;
    fc2.a_rows = nullptr;
    if (desc_.fp8) {  // FC1's activation, quantized with BLOCK scales beside it
        auto* const codes = ws + workspace_.fc2_input;
        auto* const scales = reinterpret_cast<float*>(ws + workspace_.fc2_input_scale);
        moe::launch_activate_quantize(activation_shape_, fc1_out, routed.expert_sizes, codes,
                                      scales, device_.sm_count, dependent_launch_, stream);
        fc2.a = codes;
        fc2.a_scale = scales;
        fc2.b_scale = t.w2_scale;
    }
    run_gemm(*fc2_, fc2);

    moe::launch_combine(combine_shape_, fc2_out, routed.row_of_choice, t.topk_weights,
                        t.num_tokens, t.num_tokens_device, t.out, device_.sm_count,
                        dependent_launch_, stream);
}

}  // namespace moegemm

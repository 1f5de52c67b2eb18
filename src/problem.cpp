// Validation of problems, expert sizes and execute arguments: the host-visible rules that
// moegemm.h documents. Each failure names the argument and the rule, and throws before
// anything changes.
#include "problem.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>

#include "error.hpp"

namespace moegemm {

namespace {

constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max();

void check_dimension(int64_t value, const char* field) {
    require(value >= 1 && value <= kMaxDim, MOEGEMM_STATUS_INVALID_VALUE,
            "problem->{} = {} must be in [1, 2^31 - 1]", field, value);
}

// The epilogue and gather fields (0.2).
void check_epilogue_and_gather(const moegemm_problem_t& p) {
    constexpr uint32_t kKnownInputs =
        MOEGEMM_EPILOGUE_ALPHA | MOEGEMM_EPILOGUE_ROW_SCALE | MOEGEMM_EPILOGUE_BIAS;
    require((p.epilogue_inputs & ~kKnownInputs) == 0, MOEGEMM_STATUS_INVALID_VALUE,
            "problem->epilogue_inputs = {:#x} has bits other than MOEGEMM_EPILOGUE_ALPHA, "
            "_ROW_SCALE and _BIAS",
            p.epilogue_inputs);
    check_enum(p.bias_type, MOEGEMM_DTYPE_E4M3, "bias_type");
    require(p.bias_type != MOEGEMM_DTYPE_E4M3, MOEGEMM_STATUS_NOT_SUPPORTED,
            "problem->bias_type = E4M3: biases are BF16, F16 or F32");
    check_enum(p.activation, MOEGEMM_ACTIVATION_SWIGLU_CLAMPED, "activation");
    check_enum(p.gate_layout, MOEGEMM_GATE_UP_INTERLEAVED, "gate_layout");
    check_activation_parameters(p.activation, p.activation_alpha, p.activation_limit);
    if (is_gated(p.activation)) {
        // The output has N / 2 columns whose rows must stay 16-byte strided.
        require(p.n % 16 == 0, MOEGEMM_STATUS_MISALIGNED,
                "problem->n = {} must be a multiple of 16 for the gated activation {} (D has "
                "n / 2 columns, 16-byte row strides)",
                p.n, activation_name(p.activation));
    }
    check_gate_layout(p.activation, p.gate_layout);
    require(p.gather_rows >= 0 && p.gather_rows <= kMaxDim, MOEGEMM_STATUS_INVALID_VALUE,
            "problem->gather_rows = {} must be in [0, 2^31 - 1] (0: A is not gathered)",
            p.gather_rows);
    if (p.gather_rows > 0 || p.epilogue_inputs != 0 || p.activation != MOEGEMM_ACTIVATION_NONE) {
        require(p.a_type != MOEGEMM_DTYPE_E4M3, MOEGEMM_STATUS_NOT_SUPPORTED,
                "problem->a_type = E4M3 with {}: epilogue options and gathered A serve BF16 "
                "and F16 inputs",
                p.gather_rows > 0 ? "gather_rows" : "an epilogue option");
    }
}

// The epilogue's arrays and the gather indices of one execution: each given exactly when the
// plan takes it, aligned, and not overlapping D (which the kernel writes while reading them).
void check_epilogue_args(const ProblemDesc& p, const ExecuteArgs& args, const TensorExtents& x,
                         bool has_rows) {
    const auto experts = static_cast<std::size_t>(p.num_experts);
    struct Array {
        const char* name;
        const void* ptr;
        bool taken;           // the plan reads it
        const char* rule;     // what makes the plan take it
        std::size_t alignment;
        std::size_t bytes;
    };
    const Array arrays[] = {
        {"alpha", args.alpha, (p.epilogue_inputs & MOEGEMM_EPILOGUE_ALPHA) != 0,
         "MOEGEMM_EPILOGUE_ALPHA in epilogue_inputs", 4, experts * sizeof(float)},
        {"row_scale", args.row_scale, (p.epilogue_inputs & MOEGEMM_EPILOGUE_ROW_SCALE) != 0,
         "MOEGEMM_EPILOGUE_ROW_SCALE in epilogue_inputs", 4, x.rows * sizeof(float)},
        {"bias", args.bias, (p.epilogue_inputs & MOEGEMM_EPILOGUE_BIAS) != 0,
         "MOEGEMM_EPILOGUE_BIAS in epilogue_inputs", kTensorAlignment,
         experts * static_cast<std::size_t>(p.n) * dtype_bytes(p.bias_type)},
        {"a_rows", args.a_rows, p.gather_rows > 0, "gather_rows > 0", 4,
         x.rows * sizeof(int32_t)},
    };
    for (const Array& t : arrays) {
        if (!t.taken) {
            require(t.ptr == nullptr, MOEGEMM_STATUS_INVALID_VALUE,
                    "{} is given but the plan does not read it (it needs {})", t.name, t.rule);
            continue;
        }
        require(t.ptr != nullptr || !has_rows, MOEGEMM_STATUS_INVALID_VALUE,
                "{} is NULL but the plan reads it ({})", t.name, t.rule);
        require(is_aligned(t.ptr, t.alignment), MOEGEMM_STATUS_MISALIGNED,
                "{} = {} is not {}-byte aligned", t.name, t.ptr, t.alignment);
        require(!ranges_overlap(args.d, x.d_bytes, t.ptr, t.bytes), MOEGEMM_STATUS_INVALID_VALUE,
                "d overlaps {}: the output must not alias an input", t.name);
    }
}

}  // namespace

void check_gate_layout(moegemm_activation_t activation, moegemm_gate_layout_t gate_layout) {
    require(is_gated(activation) || gate_layout == MOEGEMM_GATE_UP_HALVES,
            MOEGEMM_STATUS_INVALID_VALUE,
            "problem->gate_layout = {} is set but activation {} is not gated",
            enum_value(gate_layout), activation_name(activation));
}

void check_activation_parameters(moegemm_activation_t activation, float alpha, float limit) {
    const bool clamped = activation == MOEGEMM_ACTIVATION_SWIGLU_CLAMPED;
    for (const auto& [name, value] :
         {std::pair{"activation_alpha", alpha}, std::pair{"activation_limit", limit}}) {
        if (clamped) {
            require(std::isfinite(value) && value > 0.0f, MOEGEMM_STATUS_INVALID_VALUE,
                    "problem->{} = {} must be finite and > 0 for SWIGLU_CLAMPED (gpt-oss: "
                    "alpha 1.702, limit 7.0)",
                    name, value);
        } else {
            require(value == 0.0f, MOEGEMM_STATUS_INVALID_VALUE,
                    "problem->{} = {} is set but activation is {}: it applies to "
                    "SWIGLU_CLAMPED only (leave it 0)",
                    name, value, activation_name(activation));
        }
    }
}

const char* activation_name(moegemm_activation_t activation) noexcept {
    switch (activation) {
        case MOEGEMM_ACTIVATION_NONE: return "NONE";
        case MOEGEMM_ACTIVATION_SILU: return "SILU";
        case MOEGEMM_ACTIVATION_GELU_TANH: return "GELU_TANH";
        case MOEGEMM_ACTIVATION_SWIGLU: return "SWIGLU";
        case MOEGEMM_ACTIVATION_GEGLU: return "GEGLU";
        case MOEGEMM_ACTIVATION_SWIGLU_CLAMPED: return "SWIGLU_CLAMPED";
    }
    return "?";
}

moegemm_problem_t default_problem() noexcept {
    moegemm_problem_t p;
    std::memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.layout = MOEGEMM_LAYOUT_VARIABLE;
    p.a_type = p.b_type = p.d_type = MOEGEMM_DTYPE_BF16;
    p.weight_layout = MOEGEMM_WEIGHTS_NK;
    p.scale_mode = MOEGEMM_SCALE_NONE;
    p.backend = MOEGEMM_BACKEND_AUTO;
    return p;
}

void init_problem_prefix(moegemm_problem_t* problem, std::size_t struct_size) noexcept {
    moegemm_problem_t defaults = default_problem();
    defaults.struct_size = struct_size;
    const std::size_t known = std::min(struct_size, sizeof defaults);
    std::memcpy(problem, &defaults, known);
    if (struct_size > known)
        std::memset(reinterpret_cast<unsigned char*>(problem) + known, 0, struct_size - known);
}

std::size_t dtype_bytes(moegemm_dtype_t type) noexcept {
    switch (type) {
        case MOEGEMM_DTYPE_BF16:
        case MOEGEMM_DTYPE_F16: return 2;
        case MOEGEMM_DTYPE_F32: return 4;
        case MOEGEMM_DTYPE_E4M3: return 1;
    }
    return 0;
}

const char* dtype_name(moegemm_dtype_t type) noexcept {
    switch (type) {
        case MOEGEMM_DTYPE_BF16: return "BF16";
        case MOEGEMM_DTYPE_F16: return "F16";
        case MOEGEMM_DTYPE_F32: return "F32";
        case MOEGEMM_DTYPE_E4M3: return "E4M3";
    }
    return "?";
}

const char* scale_mode_name(moegemm_scale_mode_t mode) noexcept {
    switch (mode) {
        case MOEGEMM_SCALE_NONE: return "NONE";
        case MOEGEMM_SCALE_PER_TENSOR: return "PER_TENSOR";
        case MOEGEMM_SCALE_PER_EXPERT: return "PER_EXPERT";
        case MOEGEMM_SCALE_ROWWISE: return "ROWWISE";
        case MOEGEMM_SCALE_BLOCK: return "BLOCK";
    }
    return "?";
}

const char* layout_name(moegemm_layout_t layout) noexcept {
    switch (layout) {
        case MOEGEMM_LAYOUT_VARIABLE: return "VARIABLE";
        case MOEGEMM_LAYOUT_MASKED: return "MASKED";
        case MOEGEMM_LAYOUT_FIXED: return "FIXED";
    }
    return "?";
}

const char* backend_name(moegemm_backend_t backend) noexcept {
    switch (backend) {
        case MOEGEMM_BACKEND_AUTO: return "AUTO";
        case MOEGEMM_BACKEND_NATIVE: return "NATIVE";
        case MOEGEMM_BACKEND_CUBLASLT: return "CUBLASLT";
    }
    return "?";
}

ProblemDesc validate_problem(const moegemm_problem_t* problem) {
    require(problem != nullptr, MOEGEMM_STATUS_INVALID_VALUE, "problem is NULL");
    // An uninitialized struct_size must not send the tail check below through arbitrary
    // memory: any future version of the struct stays far below this bound.
    require(problem->struct_size <= kMaxStructSize, MOEGEMM_STATUS_INVALID_VALUE,
            "problem->struct_size is {}, larger than any version of moegemm_problem_t (at most "
            "{}): initialize the struct with moegemm_problem_init",
            problem->struct_size, kMaxStructSize);
    require(problem->struct_size >= MOEGEMM_PROBLEM_SIZE_0_1, MOEGEMM_STATUS_INVALID_VALUE,
            "problem->struct_size is {}, below the first version's {} bytes: initialize the "
            "struct with moegemm_problem_init",
            problem->struct_size, MOEGEMM_PROBLEM_SIZE_0_1);
    if (problem->struct_size > sizeof(moegemm_problem_t)) {
        // A caller built against a newer header: fine as long as it left the fields this
        // version does not know at zero (their defaults).
        const auto* tail = reinterpret_cast<const unsigned char*>(problem) + sizeof(moegemm_problem_t);
        for (std::size_t i = 0; i < problem->struct_size - sizeof(moegemm_problem_t); ++i) {
            require(tail[i] == 0, MOEGEMM_STATUS_NOT_SUPPORTED,
                    "problem->struct_size is {} and sets fields beyond the {} bytes this "
                    "version of libmoegemm ({}) knows",
                    problem->struct_size, sizeof(moegemm_problem_t), MOEGEMM_VERSION);
        }
    }
    // An older caller's struct ends early: the fields it lacks keep their defaults (zero).
    const std::size_t prefix = std::min(problem->struct_size, sizeof(moegemm_problem_t));
    if (prefix < sizeof(moegemm_problem_t)) {
        require(prefix == MOEGEMM_PROBLEM_SIZE_0_1, MOEGEMM_STATUS_INVALID_VALUE,
                "problem->struct_size is {}: not the size of any version of moegemm_problem_t "
                "({} or {}); initialize the struct with moegemm_problem_init",
                problem->struct_size, MOEGEMM_PROBLEM_SIZE_0_1, MOEGEMM_PROBLEM_SIZE_0_2);
    }
    moegemm_problem_t full = default_problem();
    std::memcpy(&full, problem, prefix);
    problem = &full;

    check_enum(problem->layout, MOEGEMM_LAYOUT_FIXED, "layout");
    check_enum(problem->a_type, MOEGEMM_DTYPE_E4M3, "a_type");
    check_enum(problem->b_type, MOEGEMM_DTYPE_E4M3, "b_type");
    check_enum(problem->d_type, MOEGEMM_DTYPE_E4M3, "d_type");
    check_enum(problem->weight_layout, MOEGEMM_WEIGHTS_KN, "weight_layout");
    check_enum(problem->scale_mode, MOEGEMM_SCALE_BLOCK, "scale_mode");
    check_enum(problem->backend, MOEGEMM_BACKEND_CUBLASLT, "backend");

    require(problem->num_experts >= 1 && problem->num_experts <= MOEGEMM_MAX_EXPERTS,
            MOEGEMM_STATUS_INVALID_VALUE, "problem->num_experts = {} must be in [1, {}]",
            problem->num_experts, MOEGEMM_MAX_EXPERTS);
    check_dimension(problem->n, "n");
    check_dimension(problem->k, "k");
    check_dimension(problem->max_rows, "max_rows");
    require(problem->device >= 0, MOEGEMM_STATUS_INVALID_VALUE,
            "problem->device = {} must be a device ordinal >= 0", problem->device);
    require(problem->expected_rows >= 0, MOEGEMM_STATUS_INVALID_VALUE,
            "problem->expected_rows = {} must be >= 0 (0 means unknown)", problem->expected_rows);

    // Every tensor (A and D: E slabs of max_rows rows of k or n values; B: E matrices of
    // n x k) must be addressable with 64-bit byte offsets, counting 4-byte elements.
    const long double experts = static_cast<long double>(problem->num_experts);
    const long double activations = experts * static_cast<long double>(problem->max_rows) *
                                    static_cast<long double>(std::max(problem->n, problem->k));
    const long double weights = experts * static_cast<long double>(problem->n) *
                                static_cast<long double>(problem->k);
    const long double limit = static_cast<long double>(std::numeric_limits<int64_t>::max() / 2);
    require(activations * 4 < limit, MOEGEMM_STATUS_INVALID_VALUE,
            "problem is too large: num_experts * max_rows * max(n, k) = {:.3g} elements "
            "overflows 64-bit byte offsets",
            static_cast<double>(activations));
    const long double gathered = static_cast<long double>(std::max<int64_t>(problem->gather_rows, 0)) *
                                 static_cast<long double>(problem->k);
    require(gathered * 4 < limit, MOEGEMM_STATUS_INVALID_VALUE,
            "problem is too large: gather_rows * k = {:.3g} elements overflows 64-bit byte "
            "offsets",
            static_cast<double>(gathered));
    require(weights * 4 < limit, MOEGEMM_STATUS_INVALID_VALUE,
            "problem is too large: num_experts * n * k = {:.3g} weight elements overflows "
            "64-bit byte offsets",
            static_cast<double>(weights));

    // Type rules. A valid combination that is not implemented is NOT_SUPPORTED, never
    // INVALID_VALUE, so that callers can tell "wrong" from "not yet".
    const bool fp8 = problem->a_type == MOEGEMM_DTYPE_E4M3;
    require(problem->a_type != MOEGEMM_DTYPE_F32, MOEGEMM_STATUS_NOT_SUPPORTED,
            "problem->a_type = F32: fp32 inputs are not supported (inputs are BF16, F16 or "
            "E4M3)");
    require(problem->a_type == problem->b_type, MOEGEMM_STATUS_NOT_SUPPORTED,
            "problem->a_type = {} with b_type = {}: mixed input types are not supported",
            dtype_name(problem->a_type), dtype_name(problem->b_type));
    require(problem->d_type != MOEGEMM_DTYPE_E4M3, MOEGEMM_STATUS_NOT_SUPPORTED,
            "problem->d_type = E4M3: fp8 output is not supported (BF16, F16 or F32)");
    require(!fp8 || problem->d_type != MOEGEMM_DTYPE_F16, MOEGEMM_STATUS_NOT_SUPPORTED,
            "problem->d_type = F16 with E4M3 inputs: fp8 products are written as BF16 or F32");
    if (!fp8) {
        require(problem->scale_mode == MOEGEMM_SCALE_NONE, MOEGEMM_STATUS_INVALID_VALUE,
                "problem->scale_mode = {} but inputs are {}: scales apply to E4M3 inputs only",
                static_cast<int>(problem->scale_mode), dtype_name(problem->a_type));
    } else {
        require(problem->scale_mode != MOEGEMM_SCALE_NONE, MOEGEMM_STATUS_INVALID_VALUE,
                "problem->scale_mode = NONE but inputs are E4M3: fp8 inputs need a scale mode");
    }

    check_epilogue_and_gather(*problem);

    // Row strides of A, B and D must be multiples of 16 bytes (TMA and cuBLASLt vector loads).
    const std::size_t elems16 = kTensorAlignment / dtype_bytes(problem->a_type);
    require(problem->k % static_cast<int64_t>(elems16) == 0, MOEGEMM_STATUS_MISALIGNED,
            "problem->k = {} must be a multiple of {} for {} inputs (16-byte row strides)",
            problem->k, elems16, dtype_name(problem->a_type));
    require(problem->n % static_cast<int64_t>(elems16) == 0, MOEGEMM_STATUS_MISALIGNED,
            "problem->n = {} must be a multiple of {} for {} inputs (16-byte row strides)",
            problem->n, elems16, dtype_name(problem->a_type));

    ProblemDesc d;
    d.layout = problem->layout;
    d.num_experts = problem->num_experts;
    d.n = problem->n;
    d.k = problem->k;
    d.max_rows = problem->max_rows;
    d.a_type = problem->a_type;
    d.b_type = problem->b_type;
    d.d_type = problem->d_type;
    d.weight_layout = problem->weight_layout;
    d.scale_mode = problem->scale_mode;
    d.backend = problem->backend;
    d.device = problem->device;
    // A hint past the capacity says no more than the capacity does; bounding it here keeps
    // the tile counts the plan derives from it (expected_rows x tiles) far from overflow.
    d.expected_rows = std::min(problem->expected_rows, problem->max_rows);
    if (problem->force_kernel) d.force_kernel = problem->force_kernel;
    d.epilogue_inputs = problem->epilogue_inputs;
    d.bias_type = problem->bias_type;
    d.activation = problem->activation;
    d.gate_layout = problem->gate_layout;
    d.activation_alpha = problem->activation_alpha;
    d.activation_limit = problem->activation_limit;
    d.gather_rows = problem->gather_rows;
    return d;
}

ExpertSizes make_host_sizes(const ProblemDesc& problem, const int32_t* sizes) {
    require(problem.layout != MOEGEMM_LAYOUT_FIXED, MOEGEMM_STATUS_INVALID_VALUE,
            "sizes: a FIXED plan takes no expert sizes (every slab holds max_rows rows)");
    require(sizes != nullptr, MOEGEMM_STATUS_INVALID_VALUE, "sizes is NULL");
    ExpertSizes out;
    out.source = SizesSource::Host;
    out.host.assign(sizes, sizes + problem.num_experts);
    for (int32_t e = 0; e < problem.num_experts; ++e) {
        const int32_t m = out.host[e];
        require(m >= 0, MOEGEMM_STATUS_INVALID_VALUE, "sizes[{}] = {} is negative", e, m);
        if (problem.layout == MOEGEMM_LAYOUT_MASKED) {
            require(m <= problem.max_rows, MOEGEMM_STATUS_INVALID_VALUE,
                    "sizes[{}] = {} exceeds max_rows = {} (rows per MASKED slab)", e, m,
                    problem.max_rows);
        }
        out.total_rows += m;
        out.largest = std::max(out.largest, m);
        out.active_experts += m > 0 ? 1 : 0;
    }
    if (problem.layout == MOEGEMM_LAYOUT_VARIABLE) {
        require(out.total_rows <= problem.max_rows, MOEGEMM_STATUS_INVALID_VALUE,
                "sizes sum to {} rows, past max_rows = {} (rows of A and D)", out.total_rows,
                problem.max_rows);
    }
    return out;
}

ExpertSizes make_device_sizes(const ProblemDesc& problem, const int32_t* sizes) {
    require(problem.layout != MOEGEMM_LAYOUT_FIXED, MOEGEMM_STATUS_INVALID_VALUE,
            "sizes: a FIXED plan takes no expert sizes (every slab holds max_rows rows)");
    require(sizes != nullptr, MOEGEMM_STATUS_INVALID_VALUE, "sizes is NULL");
    require(is_aligned(sizes, alignof(int32_t)), MOEGEMM_STATUS_MISALIGNED,
            "sizes = {} (device memory) is not 4-byte aligned", static_cast<const void*>(sizes));
    ExpertSizes out;
    out.source = SizesSource::Device;
    out.device = sizes;
    return out;
}

ExpertSizes initial_sizes(const ProblemDesc& problem) {
    ExpertSizes out;
    if (problem.layout == MOEGEMM_LAYOUT_FIXED) {
        out.source = SizesSource::Host;
        out.host.assign(static_cast<std::size_t>(problem.num_experts),
                        static_cast<int32_t>(problem.max_rows));
        out.total_rows = problem.max_rows * problem.num_experts;
        out.largest = static_cast<int32_t>(problem.max_rows);
        out.active_experts = problem.num_experts;
    }
    return out;
}

bool may_compute_rows(const ProblemDesc&, const ExpertSizes& sizes) noexcept {
    return sizes.source != SizesSource::Host || sizes.total_rows > 0;
}

TensorExtents tensor_extents(const ProblemDesc& p, const ExpertSizes& sizes) noexcept {
    const auto in = dtype_bytes(p.a_type);
    const auto out = dtype_bytes(p.d_type);
    const auto experts = static_cast<std::size_t>(p.num_experts);
    // VARIABLE with host sizes touches only the first sum(M_e) rows; otherwise the capacity.
    std::size_t rows = static_cast<std::size_t>(p.max_rows);
    if (p.layout != MOEGEMM_LAYOUT_VARIABLE) rows *= experts;
    else if (sizes.source == SizesSource::Host) rows = static_cast<std::size_t>(sizes.total_rows);
    TensorExtents x;
    x.rows = rows;
    // A gathered A is the caller's whole token matrix: any of its rows may be read.
    const std::size_t a_rows = p.gather_rows > 0 ? static_cast<std::size_t>(p.gather_rows) : rows;
    x.a_bytes = a_rows * static_cast<std::size_t>(p.k) * in;
    x.b_bytes = experts * static_cast<std::size_t>(p.n) * static_cast<std::size_t>(p.k) * in;
    x.d_bytes = rows * static_cast<std::size_t>(output_columns(p)) * out;
    return x;
}

void validate_execute_args(const ProblemDesc& problem, const ExpertSizes& sizes,
                           const ExecuteArgs& args, std::size_t workspace_needed) {
    require(sizes.source != SizesSource::None, MOEGEMM_STATUS_INVALID_STATE,
            "the expert sizes of this {} plan were never set: call "
            "moegemm_plan_set_expert_sizes before moegemm_execute",
            layout_name(problem.layout));

    const bool has_rows = may_compute_rows(problem, sizes);
    struct Operand {
        const char* name;
        const void* ptr;
    };
    for (const Operand& t : {Operand{"a", args.a}, Operand{"b", args.b}, Operand{"d", args.d}}) {
        require(t.ptr != nullptr || !has_rows, MOEGEMM_STATUS_INVALID_VALUE,
                "{} is NULL but there are rows to compute", t.name);
        require(is_aligned(t.ptr, kTensorAlignment), MOEGEMM_STATUS_MISALIGNED,
                "{} = {} is not 16-byte aligned", t.name, t.ptr);
    }

    const bool fp8 = problem.a_type == MOEGEMM_DTYPE_E4M3;
    if (!fp8) {
        require(args.a_scale == nullptr && args.b_scale == nullptr, MOEGEMM_STATUS_INVALID_VALUE,
                "a_scale/b_scale must be NULL for {} inputs (scales apply to E4M3 only)",
                dtype_name(problem.a_type));
    } else {
        for (const auto& [name, ptr] : {std::pair{"a_scale", args.a_scale},
                                        std::pair{"b_scale", args.b_scale}}) {
            require(ptr != nullptr, MOEGEMM_STATUS_INVALID_VALUE,
                    "{} is NULL: E4M3 inputs need device scales ({} mode)", name,
                    scale_mode_name(problem.scale_mode));
            // cuBLASLt refuses scale pointers that are not 16-byte aligned.
            require(is_aligned(ptr, kTensorAlignment), MOEGEMM_STATUS_MISALIGNED,
                    "{} = {} is not 16-byte aligned", name, static_cast<const void*>(ptr));
        }
    }

    const TensorExtents x = tensor_extents(problem, sizes);
    check_epilogue_args(problem, args, x, has_rows);
    require(!ranges_overlap(args.d, x.d_bytes, args.a, x.a_bytes), MOEGEMM_STATUS_INVALID_VALUE,
            "d overlaps a: the output must not alias an input");
    require(!ranges_overlap(args.d, x.d_bytes, args.b, x.b_bytes), MOEGEMM_STATUS_INVALID_VALUE,
            "d overlaps b: the output must not alias an input");

    require(args.workspace_bytes >= workspace_needed, MOEGEMM_STATUS_WORKSPACE_TOO_SMALL,
            "workspace_bytes = {} is below the {} bytes this plan needs "
            "(moegemm_plan_get_workspace_size)",
            args.workspace_bytes, workspace_needed);
    if (workspace_needed > 0) {
        require(args.workspace != nullptr, MOEGEMM_STATUS_INVALID_VALUE,
                "workspace is NULL but the plan needs {} bytes", workspace_needed);
        require(is_aligned(args.workspace, kWorkspaceAlignment), MOEGEMM_STATUS_MISALIGNED,
                "workspace = {} is not 256-byte aligned", args.workspace);
        // The workspace is written during execute: it must not alias any tensor.
        for (const auto& [name, ptr, bytes] :
             {std::tuple{"a", args.a, x.a_bytes}, std::tuple{"b", args.b, x.b_bytes},
              std::tuple{"d", static_cast<const void*>(args.d), x.d_bytes}}) {
            require(!ranges_overlap(args.workspace, args.workspace_bytes, ptr, bytes),
                    MOEGEMM_STATUS_INVALID_VALUE, "workspace overlaps {}", name);
        }
    }
}

}  // namespace moegemm

// The problem as the library sees it once validated, the expert sizes a plan holds, and the
// checks on execute's arguments. Everything here is pure host code (no CUDA calls) so that the
// CPU tests can exercise every rule without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "moegemm/moegemm.h"
#include "error.hpp"
#include "plan_options.hpp"
#include "versioned_struct.hpp"

namespace moegemm {

/// The int stored in a C enum of the public header. A C caller may store any value there, and
/// loading an out-of-range value through the enum type is undefined behaviour in C++, so every
/// enum that comes from a caller is read through this before it is compared or switched on.
template <typename Enum>
int enum_value(const Enum& value) noexcept {
    static_assert(sizeof(Enum) == sizeof(int), "C enums of the public header are int-sized");
    int v = 0;
    std::memcpy(&v, &value, sizeof v);
    return v;
}

/// A moegemm_problem_t that passed validate_problem: every field is in range.
struct ProblemDesc {
    moegemm_layout_t layout = MOEGEMM_LAYOUT_VARIABLE;
    int32_t num_experts = 0;
    int64_t n = 0;
    int64_t k = 0;
    int64_t max_rows = 0;
    moegemm_dtype_t a_type = MOEGEMM_DTYPE_BF16;
    moegemm_dtype_t b_type = MOEGEMM_DTYPE_BF16;
    moegemm_dtype_t d_type = MOEGEMM_DTYPE_BF16;
    moegemm_weight_layout_t weight_layout = MOEGEMM_WEIGHTS_NK;
    moegemm_scale_mode_t scale_mode = MOEGEMM_SCALE_NONE;
    moegemm_backend_t backend = MOEGEMM_BACKEND_AUTO;
    int32_t device = 0;
    int64_t expected_rows = 0;
    std::string force_kernel;  ///< empty: the heuristic chooses
    // Epilogue and gather (header: moegemm_problem_t since 0.2).
    uint32_t epilogue_inputs = 0;  ///< MOEGEMM_EPILOGUE_* bits
    moegemm_dtype_t bias_type = MOEGEMM_DTYPE_BF16;
    moegemm_activation_t activation = MOEGEMM_ACTIVATION_NONE;
    moegemm_gate_layout_t gate_layout = MOEGEMM_GATE_UP_HALVES;
    float activation_alpha = 0.0f;
    float activation_limit = 0.0f;
    int64_t gather_rows = 0;  ///< > 0: A rows are read through a_rows from [gather_rows, K]
    /// Comparison options (tests and moegemm-bench); defaults for users.
    PlanOptions options;
};

/// Throws INVALID_VALUE naming `problem->field` unless the C enum's int is in [0, last].
template <typename Enum>
void check_enum(const Enum& field_value, int last, const char* field) {
    const int value = enum_value(field_value);
    require(value >= 0 && value <= last, MOEGEMM_STATUS_INVALID_VALUE,
            "problem->{} = {} is out of range (valid values are 0..{})", field, value, last);
}

/// The activation's parameters: finite and > 0 for SWIGLU_CLAMPED, 0 for any other activation
/// (`activation` already in range). Throws INVALID_VALUE naming the field.
void check_activation_parameters(moegemm_activation_t activation, float alpha, float limit);
/// A gate/up layout other than the default only with a gated activation (INVALID_VALUE).
void check_gate_layout(moegemm_activation_t activation, moegemm_gate_layout_t gate_layout);

inline bool is_aligned(const void* p, std::size_t alignment) noexcept {
    return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

/// Whether `activation` combines a gate and an up column into one output column.
constexpr bool is_gated(moegemm_activation_t activation) noexcept {
    return activation == MOEGEMM_ACTIVATION_SWIGLU || activation == MOEGEMM_ACTIVATION_GEGLU ||
           activation == MOEGEMM_ACTIVATION_SWIGLU_CLAMPED;
}

/// Columns of D: N, or N / 2 after a gated activation.
inline int64_t output_columns(const ProblemDesc& p) noexcept {
    return is_gated(p.activation) ? p.n / 2 : p.n;
}

/// Whether the problem asks for anything beyond the plain product: an epilogue input, an
/// activation or a gather.
inline bool has_epilogue_or_gather(const ProblemDesc& p) noexcept {
    return p.epilogue_inputs != 0 || p.activation != MOEGEMM_ACTIVATION_NONE ||
           p.gather_rows > 0;
}

const char* activation_name(moegemm_activation_t activation) noexcept;

/// The defaults moegemm_problem_init writes.
moegemm_problem_t default_problem() noexcept;

static_assert(sizeof(moegemm_problem_t) >= MOEGEMM_PROBLEM_SIZE_0_1,
              "moegemm_problem_t only grows: its first version had MOEGEMM_PROBLEM_SIZE_0_1 bytes");
static_assert(sizeof(moegemm_problem_t) == MOEGEMM_PROBLEM_SIZE_0_2,
              "moegemm_problem_t of this version: MOEGEMM_PROBLEM_SIZE_0_2 bytes");

/// moegemm_problem_init_sized's work: the defaults into the first `struct_size` bytes of
/// `problem` (the library's fields, then zeros up to a newer caller's size), struct_size
/// set; `struct_size` in [MOEGEMM_PROBLEM_SIZE_0_1, kMaxStructSize] (checked by the
/// caller).
void init_problem_prefix(moegemm_problem_t* problem, std::size_t struct_size) noexcept;

/// Checks every host-visible rule of a problem struct; throws Error naming the field.
ProblemDesc validate_problem(const moegemm_problem_t* problem);

std::size_t dtype_bytes(moegemm_dtype_t type) noexcept;
const char* dtype_name(moegemm_dtype_t type) noexcept;
const char* layout_name(moegemm_layout_t layout) noexcept;
const char* backend_name(moegemm_backend_t backend) noexcept;  ///< "AUTO", "NATIVE", "CUBLASLT"
const char* scale_mode_name(moegemm_scale_mode_t mode) noexcept;

enum class SizesSource { None, Host, Device };

/// What a plan knows of the rows per expert.
struct ExpertSizes {
    SizesSource source = SizesSource::None;
    std::vector<int32_t> host;          ///< Host: the copied values (num_experts of them).
    const int32_t* device = nullptr;    ///< Device: the caller's pointer, read by the GPU.
    // Host statistics (0 unless source == Host).
    int64_t total_rows = 0;
    int32_t largest = 0;
    int32_t active_experts = 0;
};

/// Validates and copies host sizes (each >= 0; VARIABLE: sum <= max_rows; MASKED: each
/// <= max_rows; FIXED takes none). Throws Error on the first broken rule.
ExpertSizes make_host_sizes(const ProblemDesc& problem, const int32_t* sizes);

/// Validates a device sizes pointer (non-NULL, 4-byte aligned; FIXED takes none).
ExpertSizes make_device_sizes(const ProblemDesc& problem, const int32_t* sizes);

/// Sizes of a FIXED plan: every slab full. VARIABLE and MASKED start with source None.
ExpertSizes initial_sizes(const ProblemDesc& problem);

/// Whether an execution may have rows to compute (false only when host sizes are all zero).
bool may_compute_rows(const ProblemDesc& problem, const ExpertSizes& sizes) noexcept;

/// Arguments of one moegemm_execute call.
struct ExecuteArgs {
    const void* a = nullptr;
    const void* b = nullptr;
    void* d = nullptr;
    const float* a_scale = nullptr;
    const float* b_scale = nullptr;
    const float* alpha = nullptr;       ///< MOEGEMM_EPILOGUE_ALPHA: [E]
    const float* row_scale = nullptr;   ///< MOEGEMM_EPILOGUE_ROW_SCALE: per row of D
    const void* bias = nullptr;         ///< MOEGEMM_EPILOGUE_BIAS: [E, N] of bias_type
    const int32_t* a_rows = nullptr;    ///< gather_rows > 0: A row of each grouped row
    /// Internal (the MoE layer): device sizes for this execution in place of the pointer the
    /// plan was given, which must be DEVICE sizes too. The layer's routing writes them into
    /// the caller's workspace of each execution.
    const int32_t* device_sizes = nullptr;
    void* workspace = nullptr;
    std::size_t workspace_bytes = 0;
};

/// Byte extents of A, B and D that an execution may touch (for the overlap check).
struct TensorExtents {
    std::size_t a_bytes = 0;
    std::size_t b_bytes = 0;
    std::size_t d_bytes = 0;
    std::size_t rows = 0;  ///< rows of D (and of row_scale, a_rows) an execution may touch
};
TensorExtents tensor_extents(const ProblemDesc& problem, const ExpertSizes& sizes) noexcept;

/// Every host-visible check of moegemm_execute except the stream's device (which needs CUDA).
/// Throws Error: INVALID_STATE (sizes never set), INVALID_VALUE, MISALIGNED,
/// WORKSPACE_TOO_SMALL.
void validate_execute_args(const ProblemDesc& problem, const ExpertSizes& sizes,
                           const ExecuteArgs& args, std::size_t workspace_needed);

/// Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte (empty ranges and NULL share
/// none). Exact for any sizes: no sum that could wrap around the address space.
inline bool ranges_overlap(const void* a, std::size_t a_bytes, const void* b,
                           std::size_t b_bytes) noexcept {
    if (!a || !b || a_bytes == 0 || b_bytes == 0) return false;
    const auto x = reinterpret_cast<std::uintptr_t>(a);
    const auto y = reinterpret_cast<std::uintptr_t>(b);
    return x <= y ? y - x < a_bytes : x - y < b_bytes;
}

constexpr std::size_t kTensorAlignment = 16;
constexpr std::size_t kWorkspaceAlignment = 256;

}  // namespace moegemm

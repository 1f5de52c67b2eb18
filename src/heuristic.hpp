// Kernel selection: a pure function from plain data (problem summary + device capabilities)
// to a choice. No CUDA calls, no environment, no globals, so the CPU tests pin its answers
// with a golden table.
#pragma once

#include <cstdint>
#include <string>

#include "device_caps.hpp"
#include "moegemm/moegemm.h"
#include "problem.hpp"

namespace moegemm {

/// Every kernel variant the library can run. Values are internal (never part of the ABI).
enum class KernelId : int {
    // sm_90a persistent grouped kernel: 128 x {256, 128} tiles; TMA-store epilogue or
    // stores from registers (one more pipeline stage); clusters of 2 CTAs along N (C2)
    // sharing the A tile, or single CTAs.
    NativeBn256TmaStoreC2,
    NativeBn256TmaStore,
    NativeBn256C2,
    NativeBn256,
    NativeBn128TmaStoreC2,
    NativeBn128TmaStore,
    NativeBn128C2,
    NativeBn128,
    NativeBm64Bn256C2,       ///< 64 x 256 tiles for decode (two consumers split the columns)
    NativeBm64Bn256,
    NativeBm64Bn128C2,       ///< 64 x 128 tiles for 16-bit decode (64 columns per consumer)
    NativeBm64Bn128,
    NativeBm64Bn128Swap,     ///< 64 x 128 tiles, swap-AB: only the A box's 16/32/64 rows multiplied
    NativeBm64Bn256Swap,     ///< 64 x 256 swap-AB: two 64-column MMAs per consumer per k-step
    CublasLtExpertLoop,      ///< VARIABLE, host sizes: one cublasLtMatmul per non-empty expert
    CublasLtStridedBatched,  ///< MASKED / FIXED: one strided-batched cublasLtMatmul
};

/// What the heuristic sees of a problem and its sizes.
struct ProblemSummary {
    moegemm_layout_t layout = MOEGEMM_LAYOUT_VARIABLE;
    moegemm_weight_layout_t weight_layout = MOEGEMM_WEIGHTS_NK;
    moegemm_dtype_t a_type = MOEGEMM_DTYPE_BF16;
    moegemm_dtype_t d_type = MOEGEMM_DTYPE_BF16;
    moegemm_scale_mode_t scale_mode = MOEGEMM_SCALE_NONE;
    moegemm_backend_t backend = MOEGEMM_BACKEND_AUTO;
    int32_t num_experts = 0;
    int64_t n = 0;
    int64_t k = 0;
    int64_t max_rows = 0;
    SizesSource sizes = SizesSource::None;
    int64_t total_rows = 0;      ///< host sizes only
    int32_t largest_expert = 0;  ///< host sizes only
    int32_t active_experts = 0;  ///< host sizes only
    int64_t expected_rows = 0;   ///< the caller's hint (0: unknown)
    bool swap_ab = true;         ///< swap-AB decode kernels may be picked
    uint32_t epilogue_inputs = 0;  ///< MOEGEMM_EPILOGUE_* bits
    moegemm_dtype_t bias_type = MOEGEMM_DTYPE_BF16;
    moegemm_activation_t activation = MOEGEMM_ACTIVATION_NONE;
    bool gather = false;           ///< A rows read through indices
};

ProblemSummary summarize(const ProblemDesc& problem, const ExpertSizes& sizes) noexcept;

/// The heuristic's answer: a kernel, or why none fits (status + message).
struct Selection {
    moegemm_status_t status = MOEGEMM_STATUS_SUCCESS;
    KernelId kernel = KernelId::CublasLtExpertLoop;
    std::string reason;  ///< why this kernel, or why none
    bool tuned = false;  ///< chosen by moegemm_plan_autotune's timing, not the heuristic
};

/// A set of backends, one bit each (1 << moegemm_backend_t).
inline constexpr uint32_t backend_bit(moegemm_backend_t b) noexcept {
    return 1u << static_cast<unsigned>(b);
}
inline constexpr uint32_t kAnyBackend = ~0u;
/// The backends that own kernels (AUTO is a choice among them).
inline constexpr moegemm_backend_t kConcreteBackends[] = {MOEGEMM_BACKEND_NATIVE,
                                                         MOEGEMM_BACKEND_CUBLASLT};

/// Whether a kernel of `backend` may serve `problem`: one of the backends the problem names
/// (AUTO: any) and in `backends`.
inline bool backend_allowed(moegemm_backend_t backend, const ProblemSummary& problem,
                            uint32_t backends = kAnyBackend) noexcept {
    return (problem.backend == MOEGEMM_BACKEND_AUTO || problem.backend == backend) &&
           (backends & backend_bit(backend)) != 0;
}

/// The best kernel for `problem` among those of `backends` (a plan whose workspace is sized
/// takes only kernels of the backends that workspace covers).
Selection select_kernel(const ProblemSummary& problem, const DeviceCaps& device,
                        uint32_t backends = kAnyBackend);

/// The variant named `name`, if it can serve the problem (status NOT_SUPPORTED, with why, if
/// not; INVALID_VALUE if no variant has that name or it belongs to another backend than the
/// one requested).
Selection select_named_kernel(const ProblemSummary& problem, const DeviceCaps& device,
                              const std::string& name);

}  // namespace moegemm

// The MoE layer tests' comparison of a downloaded BF16 output with a host reference of the
// layer (test_moe_layer.cpp, test_moe_fp8.cpp).
#ifndef MOEGEMM_TESTS_SUPPORT_LAYER_CHECK_HPP
#define MOEGEMM_TESTS_SUPPORT_LAYER_CHECK_HPP

#include <cmath>
#include <cstdint>
#include <vector>

#include "support/gpu_harness.hpp"

namespace mgt {

/// What every layer test case sets: the model, this rank's experts and the activation; the
/// tests' case types add their own fields (aggregates: a case is written flat, in this order).
struct LayerShape {
    const char* name;
    int32_t experts, first, local, top_k;
    int64_t hidden, intermediate, tokens;
    moegemm_activation_t activation;
    moegemm_gate_layout_t gate_layout;
};

/// Whether the case's activation folds gate and up columns (FC1 has 2I rows).
inline bool gated(const LayerShape& c) {
    return c.activation == MOEGEMM_ACTIVATION_SWIGLU ||
           c.activation == MOEGEMM_ACTIVATION_SWIGLU_CLAMPED ||
           c.activation == MOEGEMM_ACTIVATION_GEGLU;
}

/// The layer problem of `c` with capacity `max_tokens` (gpt-oss's parameters for the clamped
/// SwiGLU); the caller sets the rest.
inline moegemm_moe_problem_t layer_problem(const LayerShape& c, int64_t max_tokens) {
    moegemm_moe_problem_t p;
    REQUIRE(moegemm_moe_problem_init(&p) == MOEGEMM_STATUS_SUCCESS);
    p.num_experts = c.experts;
    p.first_expert = c.first;
    p.local_experts = c.local;
    p.top_k = c.top_k;
    p.hidden = c.hidden;
    p.intermediate = c.intermediate;
    p.max_tokens = max_tokens;
    p.activation = c.activation;
    p.gate_layout = c.gate_layout;
    if (c.activation == MOEGEMM_ACTIVATION_SWIGLU_CLAMPED) {
        p.activation_alpha = 1.702f;
        p.activation_limit = 7.0f;
    }
    return p;
}

/// Layer tensors with the five every layer takes and the output; the caller adds the rest.
inline moegemm_moe_tensors_t layer_tensors(const void* x, const void* ids, const void* weights,
                                           const void* w1, const void* w2, void* out) {
    moegemm_moe_tensors_t t;
    REQUIRE(moegemm_moe_tensors_init(&t) == MOEGEMM_STATUS_SUCCESS);
    t.x = x;
    t.topk_ids = ids;
    t.topk_weights = static_cast<const float*>(weights);
    t.w1 = w1;
    t.w2 = w2;
    t.out = out;
    return t;
}

/// Checks rows [0, tokens) of `got` (BF16 [tokens, hidden]) against `reference(t, &magnitude)`,
/// which returns token t's H reference values and a magnitude (the largest sum of absolute
/// terms) for the tolerance: 1.6e-2 of the value (BF16 outputs of FC1, FC2 and the combine)
/// plus 2e-2 of the magnitude. Fails the test at the first element out of tolerance.
template <typename Reference>
void check_layer_output(const char* name, const std::vector<uint8_t>& got, int64_t tokens,
                        int64_t hidden, Reference reference) {
    for (int64_t t = 0; t < tokens; ++t) {
        double magnitude = 0;
        const std::vector<double> want = reference(t, &magnitude);
        for (int64_t h = 0; h < hidden; ++h) {
            const double have =
                decode_element(MOEGEMM_DTYPE_BF16, got.data(), static_cast<size_t>(t * hidden + h));
            const double w = want[static_cast<size_t>(h)];
            const double tol = 1.6e-2 * std::fabs(w) + 2e-2 * magnitude + 1e-6;
            if (!(std::fabs(have - w) <= tol)) {
                FAIL_CHECK(name << ": token " << t << " column " << h << ": got " << have
                                << ", expected " << w << " (tolerance " << tol << ")");
                return;
            }
        }
    }
}

}  // namespace mgt

#endif  // MOEGEMM_TESTS_SUPPORT_LAYER_CHECK_HPP

// The rules moegemm.h documents for moegemm_plan_create's problem, written from the header
// alone (not from the library's validator), for the API fuzzer's oracle.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>

#include "moegemm/moegemm.h"

namespace fuzz_rules {

/// The verdict of the host-checkable rules on a problem image: the status of each broken rule
/// (moegemm_plan_create must return one of them), or none; `ambiguous` where a size lies so
/// close to the 64-bit addressing bound that rounding may decide either way (INVALID_VALUE may
/// then come too).
struct Verdict {
    std::set<int> broken;
    bool ambiguous = false;
};

template <typename T>
int read_int(const T& field) {
    static_assert(sizeof(T) == sizeof(int), "enum fields are int-sized");
    int v = 0;
    std::memcpy(&v, &field, sizeof v);
    return v;
}

/// The activation rules both problems document: SWIGLU_CLAMPED's parameters finite and > 0,
/// other activations' 0; a gate/up layout other than HALVES only with a gated activation
/// (judged when the enums are in range).
inline void check_activation_rules(int activation, int gate, float alpha, float limit,
                                   bool enums_ok, Verdict& v) {
    const bool gated = activation >= MOEGEMM_ACTIVATION_SWIGLU && activation <= 5;
    const bool clamped = activation == MOEGEMM_ACTIVATION_SWIGLU_CLAMPED;
    for (const float x : {alpha, limit}) {
        const bool positive = x > 0.0f && x <= 3.4e38f;  // finite and > 0 (NaN fails)
        if (clamped ? !positive : x != 0.0f) v.broken.insert(MOEGEMM_STATUS_INVALID_VALUE);
    }
    if (enums_ok && !gated && gate != MOEGEMM_GATE_UP_HALVES)
        v.broken.insert(MOEGEMM_STATUS_INVALID_VALUE);
}

/// `image`: the caller's `size` bytes, a moegemm_problem_t at their start.
inline Verdict check_problem(const unsigned char* image, std::size_t size) {
    Verdict v;
    moegemm_problem_t p;
    std::memcpy(&p, image, sizeof p);
    constexpr int kInvalid = MOEGEMM_STATUS_INVALID_VALUE;
    constexpr int kNotSupported = MOEGEMM_STATUS_NOT_SUPPORTED;
    // struct_size: the size of a version of the struct (0.1's MOEGEMM_PROBLEM_SIZE_0_1, whose
    // later fields then take their defaults, zero; or this header's) or more, up to 4096
    // bytes; past this header's struct, a newer caller's fields must be zero (their
    // defaults), or the library does not know them.
    const std::size_t claimed = p.struct_size;
    if (claimed < MOEGEMM_PROBLEM_SIZE_0_1 || claimed > 4096 ||
        (claimed > MOEGEMM_PROBLEM_SIZE_0_1 && claimed < sizeof p)) {
        v.broken.insert(kInvalid);
    } else {
        if (claimed < sizeof p)
            std::memset(reinterpret_cast<unsigned char*>(&p) + claimed, 0, sizeof p - claimed);
        for (std::size_t i = sizeof p; i < claimed && i < size; ++i)
            if (image[i] != 0) v.broken.insert(kNotSupported);
    }
    // Every enum in range.
    const int layout = read_int(p.layout), a = read_int(p.a_type), b = read_int(p.b_type),
              d = read_int(p.d_type), weights = read_int(p.weight_layout),
              scales = read_int(p.scale_mode), backend = read_int(p.backend);
    const auto in = [](int x, int lo, int hi) { return x >= lo && x <= hi; };
    const bool enums_ok = in(layout, 0, 2) && in(a, 0, 3) && in(b, 0, 3) && in(d, 0, 3) &&
                          in(weights, 0, 1) && in(scales, 0, 4) && in(backend, 0, 2);
    if (!enums_ok) v.broken.insert(kInvalid);
    // Dimensions and the other numbers.
    constexpr int64_t kMaxDim = INT32_MAX;
    if (!in(p.num_experts, 1, MOEGEMM_MAX_EXPERTS)) v.broken.insert(kInvalid);
    for (const int64_t x : {p.n, p.k, p.max_rows})
        if (x < 1 || x > kMaxDim) v.broken.insert(kInvalid);
    if (p.device < 0 || p.expected_rows < 0) v.broken.insert(kInvalid);
    // Tensors addressable with 64-bit byte offsets (4-byte elements counted, the widest).
    if (in(p.num_experts, 1, MOEGEMM_MAX_EXPERTS) && in(p.n, 1, kMaxDim) && in(p.k, 1, kMaxDim) &&
        in(p.max_rows, 1, kMaxDim)) {
        using u128 = unsigned __int128;
        const u128 e = static_cast<u128>(p.num_experts);
        const u128 widest = static_cast<u128>(p.n > p.k ? p.n : p.k);
        const u128 bytes[] = {e * static_cast<u128>(p.max_rows) * widest * 4,
                              e * static_cast<u128>(p.n) * static_cast<u128>(p.k) * 4};
        const u128 bound = u128{1} << 62;
        const u128 slack = u128{1} << 50;
        for (const u128 x : bytes) {
            if (x + slack >= bound && x <= bound + slack) v.ambiguous = true;
            else if (x > bound) v.broken.insert(kInvalid);
        }
    }
    // The epilogue and gather fields (0.2).
    const int bias = read_int(p.bias_type), activation = read_int(p.activation),
              gate = read_int(p.gate_layout);
    const bool epilogue_enums_ok = in(bias, 0, 3) && in(activation, 0, 5) && in(gate, 0, 2);
    if (!epilogue_enums_ok) v.broken.insert(kInvalid);
    if ((p.epilogue_inputs & ~7u) != 0) v.broken.insert(kInvalid);
    const bool gated = activation >= MOEGEMM_ACTIVATION_SWIGLU && activation <= 5;
    check_activation_rules(activation, gate, p.activation_alpha, p.activation_limit,
                           epilogue_enums_ok, v);
    if (p.gather_rows < 0 || p.gather_rows > kMaxDim) v.broken.insert(kInvalid);
    if (bias == MOEGEMM_DTYPE_E4M3) v.broken.insert(kNotSupported);
    if (enums_ok && epilogue_enums_ok && a == MOEGEMM_DTYPE_E4M3 &&
        (p.epilogue_inputs != 0 || activation != 0 || p.gather_rows > 0))
        v.broken.insert(kNotSupported);
    if (epilogue_enums_ok && gated && p.n % 16 != 0) v.broken.insert(MOEGEMM_STATUS_MISALIGNED);
    if (p.gather_rows > 0 && p.gather_rows <= kMaxDim && in(p.k, 1, kMaxDim)) {
        using u128 = unsigned __int128;
        const u128 x = static_cast<u128>(p.gather_rows) * static_cast<u128>(p.k) * 4;
        const u128 bound = u128{1} << 62, slack = u128{1} << 50;
        if (x + slack >= bound && x <= bound + slack) v.ambiguous = true;
        else if (x > bound) v.broken.insert(kInvalid);
    }
    if (enums_ok) {
        // Inputs BF16, F16 or E4M3, both the same; outputs BF16, F16 or F32, E4M3 into BF16 or
        // F32 only: anything else is a valid combination that is not served.
        const bool e4m3 = a == MOEGEMM_DTYPE_E4M3;
        if (a == MOEGEMM_DTYPE_F32 || a != b || d == MOEGEMM_DTYPE_E4M3 ||
            (e4m3 && d == MOEGEMM_DTYPE_F16))
            v.broken.insert(kNotSupported);
        // Scales for E4M3 inputs, and only for them.
        if ((scales != MOEGEMM_SCALE_NONE) != e4m3) v.broken.insert(kInvalid);
        // 16-byte row strides: N and K multiples of 8 (16-bit inputs) or 16 (E4M3).
        if (a != MOEGEMM_DTYPE_F32) {
            const int64_t multiple = e4m3 ? 16 : 8;
            if (p.n % multiple != 0 || p.k % multiple != 0)
                v.broken.insert(MOEGEMM_STATUS_MISALIGNED);
        }
    }
    return v;
}

/// The rules moegemm.h documents for moegemm_moe_plan_create's layer problem. `image`: the
/// caller's `size` bytes, a moegemm_moe_problem_t at their start.
inline Verdict check_moe_problem(const unsigned char* image, std::size_t size) {
    Verdict v;
    moegemm_moe_problem_t p;
    std::memcpy(&p, image, sizeof p);
    constexpr int kInvalid = MOEGEMM_STATUS_INVALID_VALUE;
    constexpr int kNotSupported = MOEGEMM_STATUS_NOT_SUPPORTED;
    constexpr int kMisaligned = MOEGEMM_STATUS_MISALIGNED;
    // struct_size: this header's struct (the layer's first version) up to 4096 bytes; a newer
    // caller's fields past it must be zero.
    const std::size_t claimed = p.struct_size;
    if (claimed < sizeof p || claimed > 4096) {
        v.broken.insert(kInvalid);
        return v;  // nothing else is read
    }
    for (std::size_t i = sizeof p; i < claimed && i < size; ++i)
        if (image[i] != 0) v.broken.insert(kNotSupported);
    const auto in = [](int64_t x, int64_t lo, int64_t hi) { return x >= lo && x <= hi; };
    const int dtype = read_int(p.dtype), activation = read_int(p.activation),
              gate = read_int(p.gate_layout), ids = read_int(p.id_type),
              backend = read_int(p.backend), scales = read_int(p.weight_scales);
    const bool enums_ok = in(dtype, 0, 3) && in(activation, 0, 5) && in(gate, 0, 2) &&
                          in(ids, 0, 1) && in(backend, 0, 2) && in(scales, 0, 4);
    if (!enums_ok) v.broken.insert(kInvalid);
    constexpr int64_t kMaxDim = INT32_MAX;
    if (!in(p.num_experts, 1, 65536)) v.broken.insert(kInvalid);
    const int64_t local = p.local_experts == 0 ? p.num_experts : p.local_experts;
    if (!in(local, 1, MOEGEMM_MAX_EXPERTS) || p.first_expert < 0 ||
        int64_t{p.first_expert} + local > p.num_experts)
        v.broken.insert(kInvalid);
    if (!in(p.top_k, 1, p.num_experts < 64 ? p.num_experts : 64)) v.broken.insert(kInvalid);
    bool dims_ok = true;
    for (const int64_t x : {p.hidden, p.intermediate, p.max_tokens}) {
        if (!in(x, 1, kMaxDim)) {
            v.broken.insert(kInvalid);
            dims_ok = false;
        }
    }
    if (dims_ok && in(p.top_k, 1, 64) && p.max_tokens * p.top_k > kMaxDim) v.broken.insert(kInvalid);
    if (p.expected_tokens < 0 || p.device < 0) v.broken.insert(kInvalid);
    for (const uint32_t bits : {p.fc1_inputs, p.fc2_inputs})
        if ((bits & ~uint32_t{MOEGEMM_EPILOGUE_ALPHA | MOEGEMM_EPILOGUE_BIAS}) != 0)
            v.broken.insert(kInvalid);
    if (dtype == MOEGEMM_DTYPE_F32) v.broken.insert(kInvalid);
    if (dtype == MOEGEMM_DTYPE_E4M3) v.broken.insert(kNotSupported);
    if (backend == MOEGEMM_BACKEND_CUBLASLT) v.broken.insert(kNotSupported);
    check_activation_rules(activation, gate, p.activation_alpha, p.activation_limit, enums_ok, v);
    for (const int64_t x : {p.hidden, p.intermediate})
        if (in(x, 1, kMaxDim) && x % 8 != 0) v.broken.insert(kMisaligned);
    if (in(scales, 1, 3)) v.broken.insert(kNotSupported);
    if (scales == MOEGEMM_SCALE_BLOCK) {
        if (dtype != MOEGEMM_DTYPE_BF16 || p.fc1_inputs != 0 || p.fc2_inputs != 0)
            v.broken.insert(kNotSupported);
        for (const int64_t x : {p.hidden, p.intermediate})
            if (in(x, 1, kMaxDim) && x % 16 != 0) v.broken.insert(kMisaligned);
    }
    return v;
}

}  // namespace fuzz_rules

// libFuzzer target over the MoE layer's C API (moegemm_moe_*), linked from the library's own
// objects.
//
// The input is read as: a mode byte, a moegemm_moe_problem_t image (hostile struct_size, enum
// values and dimensions, or mostly plausible values), the bytes past the struct when
// struct_size says the struct is larger, and two struct sizes for the init functions.
// Invariants checked:
//  - every call returns a defined status and, when it fails, leaves a last error message;
//  - moe_plan_create fails with the status of a rule the header documents as broken (rules
//    written from the header, documented_rules.hpp, not the library's validator), and with
//    NO_DEVICE without a GPU where every rule holds; a failing create leaves its output alone;
//  - every layer function given a NULL plan fails with INVALID_VALUE (destroy: SUCCESS);
//  - the init functions write exactly struct_size bytes (an exactly-sized buffer: ASan);
//  - no crash, no leak, no ASan/UBSan report.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "documented_rules.hpp"
#include "fuzz_common.hpp"
#include "moegemm/moegemm.h"

namespace {

template <typename T>
void set_int_field(T& field, int value) {
    static_assert(sizeof(T) == sizeof(int), "enum fields are int-sized");
    std::memcpy(&field, &value, sizeof value);
}

const auto kSentinelPlan =
    reinterpret_cast<moegemm_moe_plan_t>(static_cast<uintptr_t>(0x5eed0002));

/// A struct of `size` bytes filled by `init`: success exactly for sizes the header allows,
/// every byte written zero but the size (an exactly-sized buffer, so ASan sees any overrun).
template <typename Init>
void check_init(Init init, std::size_t first_size, std::size_t size) {
    const std::size_t alloc = size > 0 && size <= 4096 ? size : 1;
    auto* buf = static_cast<unsigned char*>(std::malloc(alloc));
    FUZZ_CHECK(buf != nullptr);
    std::memset(buf, 0xA5, alloc);
    const int s = init(buf, size);
    check_failure(s);
    const bool allowed = size >= first_size && size <= 4096;
    FUZZ_CHECK((s == MOEGEMM_STATUS_SUCCESS) == allowed);
    if (allowed) {
        std::size_t written = 0;
        std::memcpy(&written, buf, sizeof written);
        FUZZ_CHECK(written == size);
        for (std::size_t i = sizeof written; i < size; ++i) FUZZ_CHECK(buf[i] == 0);
    } else {
        for (std::size_t i = 0; i < alloc; ++i) FUZZ_CHECK(buf[i] == 0xA5);
    }
    std::free(buf);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzedDataProvider fdp(data, size);
    const uint8_t mode = fdp.ConsumeIntegral<uint8_t>();

    // --- the problem image ---
    moegemm_moe_problem_t img;
    {
        std::vector<uint8_t> raw = fdp.ConsumeBytes<uint8_t>(sizeof img);
        raw.resize(sizeof img, 0);
        std::memcpy(&img, raw.data(), sizeof img);
    }
    if (mode & 0x04) {
        // Mostly plausible: the defaults, then fields near their valid ranges.
        moegemm_moe_problem_t base;
        FUZZ_CHECK(moegemm_moe_problem_init(&base) == MOEGEMM_STATUS_SUCCESS);
        base.num_experts = 1 + static_cast<int32_t>(static_cast<uint32_t>(img.num_experts) % 300);
        base.first_expert = static_cast<int32_t>(static_cast<uint32_t>(img.first_expert) % 8);
        base.local_experts = static_cast<int32_t>(static_cast<uint32_t>(img.local_experts) % 300);
        base.top_k = static_cast<int32_t>(static_cast<uint32_t>(img.top_k) % 12);
        base.hidden = 8 * static_cast<int64_t>(static_cast<uint64_t>(img.hidden) % 600);
        base.intermediate = 8 * static_cast<int64_t>(static_cast<uint64_t>(img.intermediate) % 600);
        base.max_tokens = static_cast<int64_t>(static_cast<uint64_t>(img.max_tokens) % 70000);
        base.expected_tokens = img.expected_tokens % 5000;
        base.fc1_inputs = img.fc1_inputs % 5;
        base.fc2_inputs = img.fc2_inputs % 5;
        base.device = img.device % 3;
        unsigned char enums[6];
        std::memcpy(enums, &img.dtype, sizeof enums);  // a few input bytes
        set_int_field(base.dtype, enums[0] % 5);
        set_int_field(base.activation, enums[1] % 7);
        set_int_field(base.gate_layout, enums[2] % 8 < 6 ? 0 : enums[2] % 4);
        set_int_field(base.id_type, enums[3] % 3);
        set_int_field(base.backend, enums[4] % 4);
        set_int_field(base.weight_scales, enums[5] % 8 < 5 ? 0 : enums[5] % 6);
        if (base.activation == MOEGEMM_ACTIVATION_SWIGLU_CLAMPED && (mode & 0x08)) {
            base.activation_alpha = 1.702f;
            base.activation_limit = 7.0f;
        }
        img = base;
    }
    if (mode & 0x01) img.struct_size = sizeof img;

    size_t alloc = 0;
    unsigned char* buf = struct_buffer(img, (mode & 0x02) != 0, fdp, &alloc);
    const auto* problem = reinterpret_cast<const moegemm_moe_problem_t*>(buf);
    const fuzz_rules::Verdict verdict = fuzz_rules::check_moe_problem(buf, alloc);

    moegemm_moe_plan_t out = kSentinelPlan;
    const int s = moegemm_moe_plan_create(problem, &out);
    check_failure(s);
    check_create_status(s, verdict,
                        {MOEGEMM_STATUS_MISALIGNED, MOEGEMM_STATUS_INVALID_VALUE,
                         MOEGEMM_STATUS_INTERNAL_ERROR});
    if (s != MOEGEMM_STATUS_SUCCESS) {
        FUZZ_CHECK(out == kSentinelPlan);
    } else {
        FUZZ_CHECK(out != kSentinelPlan && out != nullptr);
        FUZZ_CHECK(moegemm_moe_plan_destroy(out) == MOEGEMM_STATUS_SUCCESS);
    }
    FUZZ_CHECK(moegemm_moe_plan_create(problem, nullptr) == MOEGEMM_STATUS_INVALID_VALUE);
    check_failure(MOEGEMM_STATUS_INVALID_VALUE);
    out = kSentinelPlan;
    FUZZ_CHECK(moegemm_moe_plan_create(nullptr, &out) == MOEGEMM_STATUS_INVALID_VALUE);
    FUZZ_CHECK(out == kSentinelPlan);
    std::free(buf);

    // --- the init functions, at sizes from the input ---
    const auto problem_size = fdp.ConsumeIntegralInRange<std::size_t>(0, 4200);
    check_init([](void* p, std::size_t n) {
        return static_cast<int>(moegemm_moe_problem_init_sized(
            static_cast<moegemm_moe_problem_t*>(p), n));
    }, sizeof(moegemm_moe_problem_t), problem_size);
    const auto tensors_size = fdp.ConsumeIntegralInRange<std::size_t>(0, 4200);
    check_init([](void* p, std::size_t n) {
        return static_cast<int>(moegemm_moe_tensors_init_sized(
            static_cast<moegemm_moe_tensors_t*>(p), n));
    }, sizeof(moegemm_moe_tensors_t), tensors_size);

    // --- every layer function with a NULL plan ---
    FUZZ_CHECK(moegemm_moe_plan_destroy(nullptr) == MOEGEMM_STATUS_SUCCESS);
    size_t bytes = 12345;
    FUZZ_CHECK(moegemm_moe_plan_get_workspace_size(nullptr, &bytes) == MOEGEMM_STATUS_INVALID_VALUE);
    FUZZ_CHECK(bytes == 12345);
    uint32_t* word = nullptr;
    FUZZ_CHECK(moegemm_moe_plan_get_status_word(nullptr, &word) == MOEGEMM_STATUS_INVALID_VALUE);
    FUZZ_CHECK(word == nullptr);
    char text[16] = "untouched";
    FUZZ_CHECK(moegemm_moe_plan_describe(nullptr, text, sizeof text) ==
               MOEGEMM_STATUS_INVALID_VALUE);
    moegemm_moe_tensors_t tensors;
    FUZZ_CHECK(moegemm_moe_tensors_init(&tensors) == MOEGEMM_STATUS_SUCCESS);
    FUZZ_CHECK(moegemm_moe_execute(nullptr, &tensors, nullptr, 0, nullptr) ==
               MOEGEMM_STATUS_INVALID_VALUE);
    check_failure(MOEGEMM_STATUS_INVALID_VALUE);
    return 0;
}

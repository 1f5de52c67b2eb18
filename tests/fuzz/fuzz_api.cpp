// libFuzzer target over the public C API, linked from the library's own objects.
//
// The input is read as: a mode byte, a moegemm_problem_t image (hostile struct_size, enum values
// and dimensions; force_kernel NULL, a real kernel name, or a NUL-terminated copy of input
// bytes), the bytes past the struct when struct_size says the struct is larger, a log level,
// and a few arbitrary ints for the status / kernel-name functions. Invariants checked:
//  - every fallible call returns a defined status (0..11);
//  - a failing call leaves its output untouched and leaves a non-empty last error message;
//  - plan_create fails with the status of a rule the header documents as broken (rules written
//    from the header, documented_rules.hpp, not the library's validator), and with none of
//    those statuses' kinds where every rule holds: NO_DEVICE without a GPU;
//  - every plan function given a NULL plan fails with INVALID_VALUE (destroy: SUCCESS);
//  - log callbacks get a NUL-terminated message at a level they asked for;
//  - no crash, no leak, no ASan/UBSan report.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "documented_rules.hpp"
#include "error.hpp"
#include "fuzz_common.hpp"
#include "moegemm/moegemm.h"

extern "C" {
const char* fuzz_status_string(int status);
const char* fuzz_status_name(int status);
moegemm_status_t fuzz_set_log_callback(moegemm_log_callback_t cb, void* user, int level);
moegemm_status_t fuzz_set_expert_sizes(moegemm_plan_t plan, const int32_t* sizes, int where);
}

namespace {

int g_log_level = 0;  // what the callback was registered for
long g_log_messages = 0;

void log_callback(moegemm_log_level_t level, const char* message, void* user) {
    int value = 0;
    std::memcpy(&value, &level, sizeof value);
    FUZZ_CHECK(user == &g_log_messages);
    FUZZ_CHECK(value >= MOEGEMM_LOG_ERROR && value <= g_log_level);
    FUZZ_CHECK(message != nullptr);
    FUZZ_CHECK(std::strlen(message) < (1u << 20));
    ++g_log_messages;
}


template <typename T>
void set_int_field(T& field, int value) {
    static_assert(sizeof(T) == sizeof(int), "enum fields are int-sized");
    std::memcpy(&field, &value, sizeof value);  // any int, as a C caller may store
}

const auto kSentinelPlan = reinterpret_cast<moegemm_plan_t>(static_cast<uintptr_t>(0x5eed0001));

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzedDataProvider fdp(data, size);
    const uint8_t mode = fdp.ConsumeIntegral<uint8_t>();

    // --- logging, so that the error paths format their messages through the callback ---
    const int level = (mode & 0x80) ? fdp.ConsumeIntegral<int>() : fdp.ConsumeIntegralInRange<int>(0, 4);
    {
        const int s = fuzz_set_log_callback(log_callback, &g_log_messages, level);
        check_failure(s);
        FUZZ_CHECK((s == MOEGEMM_STATUS_SUCCESS) == (level >= 0 && level <= 4));
        if (s == MOEGEMM_STATUS_SUCCESS) g_log_level = level;
    }

    // --- the problem image ---
    moegemm_problem_t img;
    {
        std::vector<uint8_t> raw = fdp.ConsumeBytes<uint8_t>(sizeof img);
        raw.resize(sizeof img, 0);
        std::memcpy(&img, raw.data(), sizeof img);
    }
    if (mode & 0x04) {
        // Mostly plausible: defaults, then dimensions and enums near their valid ranges.
        moegemm_problem_t base;
        FUZZ_CHECK(moegemm_problem_init(&base) == MOEGEMM_STATUS_SUCCESS);
        base.num_experts = 1 + static_cast<int32_t>(static_cast<uint32_t>(img.num_experts) % 1100);
        base.n = 8 * (1 + static_cast<int64_t>(static_cast<uint64_t>(img.n) % 1024));
        base.k = 8 * (1 + static_cast<int64_t>(static_cast<uint64_t>(img.k) % 1024));
        base.max_rows = static_cast<int64_t>(static_cast<uint64_t>(img.max_rows) % 70000);
        base.expected_rows = img.expected_rows % 5000;
        base.device = img.device % 3;
        unsigned char enums[7];
        std::memcpy(enums, &img.layout, sizeof enums);  // a few input bytes
        set_int_field(base.layout, enums[0] % 4);
        set_int_field(base.a_type, enums[1] % 5);
        set_int_field(base.b_type, enums[2] % 5 == 4 ? enums[1] % 5 : enums[2] % 5);
        set_int_field(base.d_type, enums[3] % 5);
        set_int_field(base.weight_layout, enums[4] % 3);
        set_int_field(base.scale_mode, enums[5] % 8 < 5 ? 0 : enums[5] % 6);
        set_int_field(base.backend, enums[6] % 4);
        img = base;
    }
    if (mode & 0x01) img.struct_size = sizeof img;
    // force_kernel must be a valid pointer or NULL (anything else is the caller's bug).
    std::string name;
    switch ((mode >> 4) & 3) {
        case 0: img.force_kernel = nullptr; break;
        case 1:
            name = fdp.ConsumeRandomLengthString(96);
            img.force_kernel = name.c_str();
            break;
        case 2: {
            const char* k = moegemm_kernel_name(fdp.ConsumeIntegralInRange<int>(0, 63));
            name = k ? k : "";
            img.force_kernel = name.c_str();
            break;
        }
        default:
            name.clear();
            img.force_kernel = name.c_str();
            break;
    }

    size_t alloc = 0;
    unsigned char* buf = struct_buffer(img, (mode & 0x02) != 0, fdp, &alloc);
    const auto* problem = reinterpret_cast<const moegemm_problem_t*>(buf);

    // The oracle: the header's rules on the same bytes, judged independently of the library.
    const fuzz_rules::Verdict verdict = fuzz_rules::check_problem(buf, alloc);

    moegemm_plan_t out = kSentinelPlan;
    int s = moegemm_plan_create(problem, &out);
    check_failure(s);
    // Where every host-visible rule holds, what remains depends on the machine and the kernels
    // (no GPU, an old GPU, an ordinal not on this machine, a forced kernel that is not
    // registered or cannot serve, a combination no kernel serves here).
    check_create_status(s, verdict,
                        {MOEGEMM_STATUS_MISALIGNED, MOEGEMM_STATUS_INVALID_STATE,
                         MOEGEMM_STATUS_WORKSPACE_TOO_SMALL, MOEGEMM_STATUS_INTERNAL_ERROR});
    if (s != MOEGEMM_STATUS_SUCCESS) {
        FUZZ_CHECK(out == kSentinelPlan);
    } else {
        // Only on a machine with a GPU: a live plan.
        FUZZ_CHECK(out != kSentinelPlan && out != nullptr);
        FUZZ_CHECK(moegemm_plan_destroy(out) == MOEGEMM_STATUS_SUCCESS);
    }
    FUZZ_CHECK(moegemm_plan_create(problem, nullptr) == MOEGEMM_STATUS_INVALID_VALUE);
    check_failure(MOEGEMM_STATUS_INVALID_VALUE);
    out = kSentinelPlan;
    FUZZ_CHECK(moegemm_plan_create(nullptr, &out) == MOEGEMM_STATUS_INVALID_VALUE);
    FUZZ_CHECK(out == kSentinelPlan);
    check_failure(MOEGEMM_STATUS_INVALID_VALUE);
    std::free(buf);

    // problem_init writes exactly the struct.
    {
        auto* p = static_cast<moegemm_problem_t*>(std::malloc(sizeof(moegemm_problem_t)));
        FUZZ_CHECK(moegemm_problem_init(p) == MOEGEMM_STATUS_SUCCESS);
        FUZZ_CHECK(p->struct_size == sizeof(moegemm_problem_t) && p->force_kernel == nullptr &&
                   p->num_experts == 0);
        std::free(p);
        FUZZ_CHECK((moegemm_problem_init)(nullptr) == MOEGEMM_STATUS_INVALID_VALUE);
        check_failure(MOEGEMM_STATUS_INVALID_VALUE);
    }

    // --- every plan function with a NULL plan ---
    FUZZ_CHECK(moegemm_plan_destroy(nullptr) == MOEGEMM_STATUS_SUCCESS);
    {
        int32_t sizes[4] = {1, 2, 3, 4};
        const int where = fdp.ConsumeIntegral<int>();
        s = fuzz_set_expert_sizes(nullptr, (mode & 0x08) ? sizes : nullptr, where);
        check_failure(s);
        FUZZ_CHECK(s == MOEGEMM_STATUS_INVALID_VALUE);
        FUZZ_CHECK(sizes[0] == 1 && sizes[3] == 4);

        size_t bytes = 0x5eed;
        s = moegemm_plan_get_workspace_size(nullptr, (mode & 0x08) ? &bytes : nullptr);
        check_failure(s);
        FUZZ_CHECK(s == MOEGEMM_STATUS_INVALID_VALUE && bytes == 0x5eed);

        uint32_t* word = reinterpret_cast<uint32_t*>(static_cast<uintptr_t>(0x5eed0));
        s = moegemm_plan_get_status_word(nullptr, (mode & 0x08) ? &word : nullptr);
        check_failure(s);
        FUZZ_CHECK(s == MOEGEMM_STATUS_INVALID_VALUE &&
                   word == reinterpret_cast<uint32_t*>(static_cast<uintptr_t>(0x5eed0)));

        char text[MOEGEMM_DESCRIBE_MAX];
        std::memset(text, 'x', sizeof text);
        const size_t len = fdp.ConsumeIntegralInRange<size_t>(0, sizeof text);
        s = moegemm_plan_describe(nullptr, (mode & 0x08) ? text : nullptr, len);
        check_failure(s);
        FUZZ_CHECK(s == MOEGEMM_STATUS_INVALID_VALUE);
        for (char c : text) FUZZ_CHECK(c == 'x');

        const auto ptr = [&] {
            return reinterpret_cast<void*>(static_cast<uintptr_t>(fdp.ConsumeIntegral<uint32_t>()) << 4);
        };
        void* a = ptr();
        void* b = ptr();
        void* d = ptr();
        void* ws = ptr();
        s = moegemm_execute(nullptr, a, b, d, nullptr, nullptr, ws,
                            fdp.ConsumeIntegral<size_t>(), nullptr);
        check_failure(s);
        FUZZ_CHECK(s == MOEGEMM_STATUS_INVALID_VALUE);
    }

    // --- status and kernel names on arbitrary ints ---
    for (int i = 0; i < 4; ++i) {
        int v = i == 0 ? fdp.ConsumeIntegralInRange<int>(-2, 13) : fdp.ConsumeIntegral<int>();
        // Any int, as a C caller may pass: the library reads it as an int (this target found
        // that it once switched on an out-of-range moegemm_status_t, undefined in C++).
        const char* str = fuzz_status_string(v);
        const char* nm = fuzz_status_name(v);
        FUZZ_CHECK(str != nullptr && str[0] != '\0' && nm != nullptr && nm[0] != '\0');
        FUZZ_CHECK(std::strncmp(nm, "MOEGEMM_STATUS_", 15) == 0);
        const bool known = std::strcmp(nm, "MOEGEMM_STATUS_UNKNOWN") != 0;
        FUZZ_CHECK(known == defined_status(v));
        FUZZ_CHECK((std::strcmp(str, "unknown status") != 0) == defined_status(v));

        const int count = moegemm_kernel_count();
        FUZZ_CHECK(count > 0);
        const int ki = fdp.ConsumeBool() ? v : fdp.ConsumeIntegral<int>();
        const char* kn = moegemm_kernel_name(ki);
        FUZZ_CHECK((kn != nullptr) == (ki >= 0 && ki < count));
        if (kn) FUZZ_CHECK(kn[0] != '\0');
    }
    FUZZ_CHECK(moegemm_get_version() == MOEGEMM_VERSION);
    FUZZ_CHECK(moegemm_get_version_string() != nullptr);

    // --- logging back off ---
    FUZZ_CHECK(fuzz_set_log_callback(nullptr, nullptr, MOEGEMM_LOG_OFF) == MOEGEMM_STATUS_SUCCESS);
    g_log_level = 0;
    return 0;
}

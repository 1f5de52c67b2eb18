// The public C API where no GPU is needed: problem validation through moegemm_plan_create
// (checked before the device is touched), NULL handles, status strings, version, the
// thread-local error message, and a clean NO_DEVICE when there is no GPU or driver.
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>

#include "moegemm/moegemm.h"

namespace {

moegemm_problem_t valid_problem() {
    moegemm_problem_t p;
    REQUIRE(moegemm_problem_init(&p) == MOEGEMM_STATUS_SUCCESS);
    p.num_experts = 8;
    p.n = 256;
    p.k = 512;
    p.max_rows = 1024;
    return p;
}

std::string last_error() { return moegemm_get_last_error_message(); }

bool gpu_present() {
    int count = 0;
    const bool ok = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
    (void)cudaGetLastError();
    return ok;
}

}  // namespace

TEST_CASE("problem_init fills the defaults and the struct size", "[api]") {
    moegemm_problem_t p;
    std::memset(&p, 0xAB, sizeof p);
    REQUIRE(moegemm_problem_init(&p) == MOEGEMM_STATUS_SUCCESS);
    CHECK(p.struct_size == sizeof(moegemm_problem_t));
    CHECK(p.layout == MOEGEMM_LAYOUT_VARIABLE);
    CHECK(p.a_type == MOEGEMM_DTYPE_BF16);
    CHECK(p.b_type == MOEGEMM_DTYPE_BF16);
    CHECK(p.d_type == MOEGEMM_DTYPE_BF16);
    CHECK(p.weight_layout == MOEGEMM_WEIGHTS_NK);
    CHECK(p.scale_mode == MOEGEMM_SCALE_NONE);
    CHECK(p.backend == MOEGEMM_BACKEND_AUTO);
    CHECK(p.num_experts == 0);
    CHECK(p.n == 0);
    CHECK(p.k == 0);
    CHECK(p.max_rows == 0);
    CHECK(p.device == 0);
    CHECK(p.expected_rows == 0);
    CHECK((moegemm_problem_init)(nullptr) == MOEGEMM_STATUS_INVALID_VALUE);
    CHECK(last_error().find("problem") != std::string::npos);
}

// One row per host-visible rule of a problem: how to break it, the exact status, and a word
// the message must contain.
struct BadProblem {
    const char* what;
    std::function<void(moegemm_problem_t&)> mutate;
    moegemm_status_t status;
    const char* message;
};

TEST_CASE("plan_create rejects every bad problem with its own status and message", "[api]") {
    const BadProblem cases[] = {
        {"struct_size zero", [](auto& p) { p.struct_size = 0; }, MOEGEMM_STATUS_INVALID_VALUE, "struct_size"},
        {"struct_size garbage (huge)", [](auto& p) { p.struct_size = size_t{1} << 40; }, MOEGEMM_STATUS_INVALID_VALUE, "larger than any version"},
        {"struct_size smaller", [](auto& p) { p.struct_size = sizeof p - 8; }, MOEGEMM_STATUS_INVALID_VALUE, "not the size of any version"},
        {"layout out of range", [](auto& p) { p.layout = static_cast<moegemm_layout_t>(3); }, MOEGEMM_STATUS_INVALID_VALUE, "layout"},
        {"layout negative", [](auto& p) { p.layout = static_cast<moegemm_layout_t>(-1); }, MOEGEMM_STATUS_INVALID_VALUE, "layout"},
        {"a_type out of range", [](auto& p) { p.a_type = static_cast<moegemm_dtype_t>(9); }, MOEGEMM_STATUS_INVALID_VALUE, "a_type"},
        {"b_type out of range", [](auto& p) { p.b_type = static_cast<moegemm_dtype_t>(9); }, MOEGEMM_STATUS_INVALID_VALUE, "b_type"},
        {"d_type out of range", [](auto& p) { p.d_type = static_cast<moegemm_dtype_t>(-2); }, MOEGEMM_STATUS_INVALID_VALUE, "d_type"},
        {"weight_layout out of range", [](auto& p) { p.weight_layout = static_cast<moegemm_weight_layout_t>(2); }, MOEGEMM_STATUS_INVALID_VALUE, "weight_layout"},
        {"scale_mode out of range", [](auto& p) { p.scale_mode = static_cast<moegemm_scale_mode_t>(5); }, MOEGEMM_STATUS_INVALID_VALUE, "scale_mode"},
        {"backend out of range", [](auto& p) { p.backend = static_cast<moegemm_backend_t>(3); }, MOEGEMM_STATUS_INVALID_VALUE, "backend"},
        {"num_experts zero", [](auto& p) { p.num_experts = 0; }, MOEGEMM_STATUS_INVALID_VALUE, "num_experts"},
        {"num_experts negative", [](auto& p) { p.num_experts = -4; }, MOEGEMM_STATUS_INVALID_VALUE, "num_experts"},
        {"num_experts too many", [](auto& p) { p.num_experts = MOEGEMM_MAX_EXPERTS + 1; }, MOEGEMM_STATUS_INVALID_VALUE, "num_experts"},
        {"n zero", [](auto& p) { p.n = 0; }, MOEGEMM_STATUS_INVALID_VALUE, "n = 0"},
        {"n negative", [](auto& p) { p.n = -8; }, MOEGEMM_STATUS_INVALID_VALUE, "n = -8"},
        {"n too large", [](auto& p) { p.n = int64_t{1} << 31; }, MOEGEMM_STATUS_INVALID_VALUE, "n = "},
        {"k zero", [](auto& p) { p.k = 0; }, MOEGEMM_STATUS_INVALID_VALUE, "k = 0"},
        {"max_rows zero", [](auto& p) { p.max_rows = 0; }, MOEGEMM_STATUS_INVALID_VALUE, "max_rows"},
        {"device negative", [](auto& p) { p.device = -1; }, MOEGEMM_STATUS_INVALID_VALUE, "device"},
        {"expected_rows negative", [](auto& p) { p.expected_rows = -1; }, MOEGEMM_STATUS_INVALID_VALUE, "expected_rows"},
        {"byte size overflows", [](auto& p) { p.num_experts = 1024; p.max_rows = (int64_t{1} << 31) - 1; p.k = (int64_t{1} << 31) - 8; }, MOEGEMM_STATUS_INVALID_VALUE, "too large"},
        {"weight bytes overflow", [](auto& p) { p.num_experts = 4; p.max_rows = 1; p.n = p.k = (int64_t{1} << 31) - 8; }, MOEGEMM_STATUS_INVALID_VALUE, "weight elements"},
        {"scales for bf16", [](auto& p) { p.scale_mode = MOEGEMM_SCALE_PER_TENSOR; }, MOEGEMM_STATUS_INVALID_VALUE, "scale_mode"},
        {"k not a multiple of 8", [](auto& p) { p.k = 500; }, MOEGEMM_STATUS_MISALIGNED, "k = 500"},
        {"n not a multiple of 8", [](auto& p) { p.n = 260; }, MOEGEMM_STATUS_MISALIGNED, "n = 260"},
        {"fp32 inputs", [](auto& p) { p.a_type = p.b_type = MOEGEMM_DTYPE_F32; }, MOEGEMM_STATUS_NOT_SUPPORTED, "F32"},
        {"mixed inputs", [](auto& p) { p.b_type = MOEGEMM_DTYPE_F16; }, MOEGEMM_STATUS_NOT_SUPPORTED, "mixed"},
        {"fp8 output", [](auto& p) { p.d_type = MOEGEMM_DTYPE_E4M3; }, MOEGEMM_STATUS_NOT_SUPPORTED, "E4M3"},
        {"fp8 without scales", [](auto& p) { p.a_type = p.b_type = MOEGEMM_DTYPE_E4M3; }, MOEGEMM_STATUS_INVALID_VALUE, "scale_mode"},
        {"fp8 into F16", [](auto& p) { p.a_type = p.b_type = MOEGEMM_DTYPE_E4M3; p.d_type = MOEGEMM_DTYPE_F16; p.scale_mode = MOEGEMM_SCALE_PER_TENSOR; }, MOEGEMM_STATUS_NOT_SUPPORTED, "BF16 or F32"},
        {"fp8 K not a multiple of 16", [](auto& p) { p.a_type = p.b_type = MOEGEMM_DTYPE_E4M3; p.scale_mode = MOEGEMM_SCALE_PER_TENSOR; p.k = 40; }, MOEGEMM_STATUS_MISALIGNED, "multiple of 16"},
    };
    for (const BadProblem& c : cases) {
        INFO(c.what);
        moegemm_problem_t p = valid_problem();
        c.mutate(p);
        moegemm_plan_t plan = reinterpret_cast<moegemm_plan_t>(0x1234);
        CHECK(moegemm_plan_create(&p, &plan) == c.status);
        CHECK(plan == reinterpret_cast<moegemm_plan_t>(0x1234));  // untouched on failure
        CHECK_THAT(last_error(), Catch::Contains(c.message));
    }
}

TEST_CASE("problem_init_sized writes the caller's size and nothing past it", "[api]") {
    // The exported function (no macro) and the macro form agree on a struct of this header.
    moegemm_problem_t direct, through_macro;
    std::memset(&direct, 0xAB, sizeof direct);
    std::memset(&through_macro, 0xCD, sizeof through_macro);
    REQUIRE((moegemm_problem_init)(&direct) == MOEGEMM_STATUS_SUCCESS);
    REQUIRE(moegemm_problem_init(&through_macro) == MOEGEMM_STATUS_SUCCESS);
    CHECK(std::memcmp(&direct, &through_macro, sizeof direct) == 0);
    CHECK(sizeof(moegemm_problem_t) == MOEGEMM_PROBLEM_SIZE_0_2);

    // A newer caller's larger struct: the library's fields get their defaults, the rest is
    // zeroed, the byte after struct_size is never written.
    unsigned char buffer[sizeof(moegemm_problem_t) + 24];
    std::memset(buffer, 0xEE, sizeof buffer);
    auto* p = reinterpret_cast<moegemm_problem_t*>(buffer);
    const std::size_t newer = sizeof(moegemm_problem_t) + 16;
    REQUIRE(moegemm_problem_init_sized(p, newer) == MOEGEMM_STATUS_SUCCESS);
    CHECK(p->struct_size == newer);
    CHECK(p->layout == MOEGEMM_LAYOUT_VARIABLE);
    CHECK(std::memcmp(reinterpret_cast<const unsigned char*>(p) + sizeof(std::size_t),
                      reinterpret_cast<const unsigned char*>(&direct) + sizeof(std::size_t),
                      sizeof(moegemm_problem_t) - sizeof(std::size_t)) == 0);
    for (std::size_t i = sizeof(moegemm_problem_t); i < newer; ++i) CHECK(buffer[i] == 0);
    for (std::size_t i = newer; i < sizeof buffer; ++i) CHECK(buffer[i] == 0xEE);

    // Sizes below the first version's, above the bound, and NULL are refused, writing nothing.
    std::memset(buffer, 0xEE, sizeof buffer);
    CHECK(moegemm_problem_init_sized(p, MOEGEMM_PROBLEM_SIZE_0_1 - 8) == MOEGEMM_STATUS_INVALID_VALUE);
    CHECK_THAT(last_error(), Catch::Contains("struct_size is"));
    CHECK(moegemm_problem_init_sized(p, 4097) == MOEGEMM_STATUS_INVALID_VALUE);
    // Between two versions' sizes: no struct has that size.
    CHECK(moegemm_problem_init_sized(p, MOEGEMM_PROBLEM_SIZE_0_1 + 8) == MOEGEMM_STATUS_INVALID_VALUE);
    for (unsigned char b : buffer) CHECK(b == 0xEE);
    CHECK(moegemm_problem_init_sized(nullptr, sizeof(moegemm_problem_t)) ==
          MOEGEMM_STATUS_INVALID_VALUE);
}

TEST_CASE("a larger struct from a newer header is accepted only with a zero tail", "[api]") {
    struct Bigger {
        moegemm_problem_t base;
        uint64_t future_field;
    } big{};
    REQUIRE(moegemm_problem_init(&big.base) == MOEGEMM_STATUS_SUCCESS);
    big.base.struct_size = sizeof big;
    big.base.num_experts = 2;
    big.base.n = big.base.k = big.base.max_rows = 64;
    big.future_field = 7;
    moegemm_plan_t plan = nullptr;
    CHECK(moegemm_plan_create(&big.base, &plan) == MOEGEMM_STATUS_NOT_SUPPORTED);
    CHECK_THAT(last_error(), Catch::Contains("struct_size"));
    CHECK(plan == nullptr);
    big.future_field = 0;
    const moegemm_status_t s = moegemm_plan_create(&big.base, &plan);
    if (s == MOEGEMM_STATUS_SUCCESS) {
        CHECK(moegemm_plan_destroy(plan) == MOEGEMM_STATUS_SUCCESS);
    } else {
        CHECK(s == MOEGEMM_STATUS_NO_DEVICE);  // valid problem, no GPU here
    }
}

TEST_CASE("NULL arguments to plan_create", "[api]") {
    moegemm_problem_t p = valid_problem();
    moegemm_plan_t plan = nullptr;
    CHECK(moegemm_plan_create(nullptr, &plan) == MOEGEMM_STATUS_INVALID_VALUE);
    CHECK_THAT(last_error(), Catch::Contains("problem is NULL"));
    CHECK(moegemm_plan_create(&p, nullptr) == MOEGEMM_STATUS_INVALID_VALUE);
    CHECK_THAT(last_error(), Catch::Contains("out is NULL"));
}

TEST_CASE("every plan function rejects a NULL plan", "[api]") {
    const int32_t sizes[1] = {1};
    size_t bytes = 0;
    char buf[16];
    CHECK(moegemm_plan_set_expert_sizes(nullptr, sizes, MOEGEMM_MEMORY_HOST) == MOEGEMM_STATUS_INVALID_VALUE);
    CHECK_THAT(last_error(), Catch::Contains("plan is NULL"));
    CHECK(moegemm_plan_get_workspace_size(nullptr, &bytes) == MOEGEMM_STATUS_INVALID_VALUE);
    CHECK(moegemm_plan_describe(nullptr, buf, sizeof buf) == MOEGEMM_STATUS_INVALID_VALUE);
    CHECK(moegemm_execute(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr) ==
          MOEGEMM_STATUS_INVALID_VALUE);
    CHECK_THAT(last_error(), Catch::Contains("plan is NULL"));
    CHECK(moegemm_plan_destroy(nullptr) == MOEGEMM_STATUS_SUCCESS);
}

TEST_CASE("without a usable GPU, plan creation fails cleanly with NO_DEVICE", "[api][nogpu]") {
    if (gpu_present()) {
        WARN("a GPU is visible: the NO_DEVICE path is exercised only without one "
             "(ctest runs this binary with CUDA_VISIBLE_DEVICES empty)");
        return;
    }
    moegemm_problem_t p = valid_problem();
    moegemm_plan_t plan = nullptr;
    CHECK(moegemm_plan_create(&p, &plan) == MOEGEMM_STATUS_NO_DEVICE);
    CHECK(plan == nullptr);
    CHECK_THAT(last_error(), Catch::Contains("CUDA device"));
}

TEST_CASE("status strings and names are defined for every status", "[api]") {
    for (int s = MOEGEMM_STATUS_SUCCESS; s <= MOEGEMM_STATUS_INTERNAL_ERROR; ++s) {
        const auto status = static_cast<moegemm_status_t>(s);
        INFO(s);
        CHECK(std::string(moegemm_status_string(status)) != "unknown status");
        CHECK(std::string(moegemm_status_name(status)).rfind("MOEGEMM_STATUS_", 0) == 0);
    }
    CHECK(std::string(moegemm_status_name(MOEGEMM_STATUS_WORKSPACE_TOO_SMALL)) ==
          "MOEGEMM_STATUS_WORKSPACE_TOO_SMALL");
    CHECK(std::string(moegemm_status_string(static_cast<moegemm_status_t>(999))) == "unknown status");
    CHECK(std::string(moegemm_status_name(static_cast<moegemm_status_t>(-1))) == "MOEGEMM_STATUS_UNKNOWN");
}

TEST_CASE("status values are pinned", "[api]") {
    // These integers are ABI: renumbering any of them breaks every compiled caller.
    STATIC_REQUIRE(MOEGEMM_STATUS_SUCCESS == 0);
    STATIC_REQUIRE(MOEGEMM_STATUS_INVALID_VALUE == 1);
    STATIC_REQUIRE(MOEGEMM_STATUS_NOT_SUPPORTED == 2);
    STATIC_REQUIRE(MOEGEMM_STATUS_NO_DEVICE == 3);
    STATIC_REQUIRE(MOEGEMM_STATUS_ARCH_MISMATCH == 4);
    STATIC_REQUIRE(MOEGEMM_STATUS_MISALIGNED == 5);
    STATIC_REQUIRE(MOEGEMM_STATUS_WORKSPACE_TOO_SMALL == 6);
    STATIC_REQUIRE(MOEGEMM_STATUS_INVALID_STATE == 7);
    STATIC_REQUIRE(MOEGEMM_STATUS_ALLOC_FAILED == 8);
    STATIC_REQUIRE(MOEGEMM_STATUS_CUDA_ERROR == 9);
    STATIC_REQUIRE(MOEGEMM_STATUS_CUBLAS_ERROR == 10);
    STATIC_REQUIRE(MOEGEMM_STATUS_INTERNAL_ERROR == 11);
}

TEST_CASE("runtime version matches the header", "[api]") {
    CHECK(moegemm_get_version() == MOEGEMM_VERSION);
    const std::string expected = std::to_string(MOEGEMM_VERSION_MAJOR) + "." +
                                 std::to_string(MOEGEMM_VERSION_MINOR) + "." +
                                 std::to_string(MOEGEMM_VERSION_PATCH);
    CHECK(moegemm_get_version_string() == expected);
}

TEST_CASE("the last error message is per thread", "[api]") {
    CHECK(moegemm_plan_create(nullptr, nullptr) == MOEGEMM_STATUS_INVALID_VALUE);
    const std::string mine = last_error();
    REQUIRE_FALSE(mine.empty());
    std::string theirs = "unset";
    std::thread([&] {
        theirs = moegemm_get_last_error_message();
        (moegemm_problem_init)(nullptr);
    }).join();
    CHECK(theirs.empty());             // a new thread starts with no message
    CHECK(last_error() == mine);       // the other thread's failure did not replace ours
}

TEST_CASE("kernel names can be listed for force_kernel", "[api]") {
    const int count = moegemm_kernel_count();
    REQUIRE(count >= 2);
    for (int i = 0; i < count; ++i) {
        INFO(i);
        REQUIRE(moegemm_kernel_name(i) != nullptr);
        CHECK(std::string(moegemm_kernel_name(i)).size() > 0);
    }
    CHECK(moegemm_kernel_name(-1) == nullptr);
    CHECK(moegemm_kernel_name(count) == nullptr);
}

TEST_CASE("an unknown force_kernel never yields a plan", "[api]") {
    // Validation of the name happens with the heuristic, after the device query: without a GPU
    // the plan fails with NO_DEVICE; the name itself is covered by the heuristic tests.
    moegemm_problem_t p = valid_problem();
    p.force_kernel = "no_such_kernel";
    moegemm_plan_t plan = nullptr;
    const moegemm_status_t s = moegemm_plan_create(&p, &plan);
    CHECK((s == MOEGEMM_STATUS_NO_DEVICE || s == MOEGEMM_STATUS_INVALID_VALUE));
    CHECK(plan == nullptr);
}

namespace {
struct Captured {
    std::vector<std::pair<moegemm_log_level_t, std::string>> messages;
};
void capture(moegemm_log_level_t level, const char* message, void* user_data) {
    static_cast<Captured*>(user_data)->messages.emplace_back(level, message);
}
}  // namespace

TEST_CASE("logging: a callback gets failures at ERROR, calls at TRACE, nothing when OFF", "[api][log]") {
    Captured got;
    REQUIRE(moegemm_set_log_callback(capture, &got, MOEGEMM_LOG_ERROR) == MOEGEMM_STATUS_SUCCESS);
    CHECK((moegemm_problem_init)(nullptr) == MOEGEMM_STATUS_INVALID_VALUE);
    REQUIRE(got.messages.size() == 1);
    CHECK(got.messages[0].first == MOEGEMM_LOG_ERROR);
    CHECK_THAT(got.messages[0].second, Catch::Contains("moegemm_problem_init"));
    CHECK_THAT(got.messages[0].second, Catch::Contains("MOEGEMM_STATUS_INVALID_VALUE"));
    CHECK_THAT(got.messages[0].second, Catch::Contains("problem is NULL"));

    moegemm_problem_t p;
    CHECK(moegemm_problem_init(&p) == MOEGEMM_STATUS_SUCCESS);  // success: nothing at ERROR
    CHECK(got.messages.size() == 1);

    REQUIRE(moegemm_set_log_callback(capture, &got, MOEGEMM_LOG_TRACE) == MOEGEMM_STATUS_SUCCESS);
    got.messages.clear();
    CHECK(moegemm_problem_init(&p) == MOEGEMM_STATUS_SUCCESS);
    REQUIRE(got.messages.size() == 1);
    CHECK(got.messages[0].first == MOEGEMM_LOG_TRACE);

    REQUIRE(moegemm_set_log_callback(capture, &got, MOEGEMM_LOG_OFF) == MOEGEMM_STATUS_SUCCESS);
    got.messages.clear();
    CHECK((moegemm_problem_init)(nullptr) == MOEGEMM_STATUS_INVALID_VALUE);
    CHECK(got.messages.empty());

    CHECK(moegemm_set_log_callback(capture, &got, static_cast<moegemm_log_level_t>(5)) ==
          MOEGEMM_STATUS_INVALID_VALUE);
    CHECK(moegemm_set_log_callback(nullptr, nullptr, MOEGEMM_LOG_OFF) == MOEGEMM_STATUS_SUCCESS);
}

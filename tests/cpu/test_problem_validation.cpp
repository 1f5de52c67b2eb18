// The host-visible rules of moegemm_plan_set_expert_sizes and moegemm_execute, checked through
// the pure validation functions the plan calls (no GPU needed). The GPU suite repeats each
// case through the public API on a live plan.
#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "error.hpp"
#include "expect_error.hpp"
#include "problem.hpp"

using namespace moegemm;
using moegemm::testing::expect_error;

namespace {

// 4 experts, N 64, K 128, 100 rows of capacity; `in` inputs (E4M3 with per-expert scales).
ProblemDesc problem_of(moegemm_layout_t layout, moegemm_dtype_t in = MOEGEMM_DTYPE_BF16) {
    moegemm_problem_t p = default_problem();
    p.layout = layout;
    p.num_experts = 4;
    p.n = 64;
    p.k = 128;
    p.max_rows = 100;
    p.a_type = p.b_type = in;
    if (in == MOEGEMM_DTYPE_E4M3) p.scale_mode = MOEGEMM_SCALE_PER_EXPERT;
    return validate_problem(&p);
}


// Fake, well-aligned device addresses: validation never dereferences them.
const void* const kA = reinterpret_cast<const void*>(0x10000);
const void* const kB = reinterpret_cast<const void*>(0x4000000);
void* const kD = reinterpret_cast<void*>(0x8000000);
void* const kWorkspace = reinterpret_cast<void*>(0x10000000);

ExecuteArgs good_args() {
    ExecuteArgs a;
    a.a = kA;
    a.b = kB;
    a.d = kD;
    a.workspace = kWorkspace;
    a.workspace_bytes = 1 << 20;
    return a;
}

}  // namespace

TEST_CASE("expected_rows past the capacity is read as the capacity", "[validation]") {
    for (int64_t hint : {int64_t{100}, int64_t{101}, int64_t{1} << 40, INT64_MAX}) {
        moegemm_problem_t p = default_problem();
        p.num_experts = 4;
        p.n = 64;
        p.k = 128;
        p.max_rows = 100;
        p.expected_rows = hint;
        INFO("expected_rows = " << hint);
        CHECK(validate_problem(&p).expected_rows == 100);
    }
    moegemm_problem_t p = default_problem();
    p.num_experts = 4;
    p.n = 64;
    p.k = 128;
    p.max_rows = 100;
    p.expected_rows = 16;
    CHECK(validate_problem(&p).expected_rows == 16);
}

TEST_CASE("host sizes: valid vectors are copied with their statistics", "[validation]") {
    const ProblemDesc p = problem_of(MOEGEMM_LAYOUT_VARIABLE);
    const int32_t sizes[] = {0, 37, 0, 63};
    const ExpertSizes s = make_host_sizes(p, sizes);
    CHECK(s.source == SizesSource::Host);
    CHECK(s.host == std::vector<int32_t>{0, 37, 0, 63});
    CHECK(s.total_rows == 100);  // exactly the capacity is allowed
    CHECK(s.largest == 63);
    CHECK(s.active_experts == 2);
    CHECK(may_compute_rows(p, s));
    const int32_t zeros[] = {0, 0, 0, 0};
    CHECK_FALSE(may_compute_rows(p, make_host_sizes(p, zeros)));
}

TEST_CASE("host sizes: each bad vector has its status and message", "[validation]") {
    const ProblemDesc variable = problem_of(MOEGEMM_LAYOUT_VARIABLE);
    const ProblemDesc masked = problem_of(MOEGEMM_LAYOUT_MASKED);
    const ProblemDesc fixed = problem_of(MOEGEMM_LAYOUT_FIXED);
    const int32_t negative[] = {3, -1, 0, 0};
    const int32_t past_capacity[] = {50, 50, 1, 0};
    const int32_t slab_overflow[] = {0, 101, 0, 0};
    const int32_t fine[] = {1, 2, 3, 4};
    const int32_t near_int_max[] = {INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX};

    expect_error([&] { make_host_sizes(variable, nullptr); }, MOEGEMM_STATUS_INVALID_VALUE, "sizes is NULL");
    expect_error([&] { make_host_sizes(variable, negative); }, MOEGEMM_STATUS_INVALID_VALUE, "sizes[1] = -1");
    expect_error([&] { make_host_sizes(variable, past_capacity); }, MOEGEMM_STATUS_INVALID_VALUE, "past max_rows");
    // The sum is computed in 64 bits: four INT32_MAX do not wrap around to a small number.
    expect_error([&] { make_host_sizes(variable, near_int_max); }, MOEGEMM_STATUS_INVALID_VALUE, "past max_rows");
    expect_error([&] { make_host_sizes(masked, slab_overflow); }, MOEGEMM_STATUS_INVALID_VALUE, "sizes[1] = 101");
    expect_error([&] { make_host_sizes(fixed, fine); }, MOEGEMM_STATUS_INVALID_VALUE, "FIXED");
    // MASKED bounds each slab, not the sum.
    const int32_t full_slabs[] = {100, 100, 100, 100};
    CHECK(make_host_sizes(masked, full_slabs).total_rows == 400);
}

TEST_CASE("device sizes: pointer rules", "[validation]") {
    const ProblemDesc masked = problem_of(MOEGEMM_LAYOUT_MASKED);
    const auto* aligned = reinterpret_cast<const int32_t*>(0x1000);
    const auto* misaligned = reinterpret_cast<const int32_t*>(0x1002);
    const ExpertSizes s = make_device_sizes(masked, aligned);
    CHECK(s.source == SizesSource::Device);
    CHECK(s.device == aligned);
    CHECK(may_compute_rows(masked, s));
    expect_error([&] { make_device_sizes(masked, nullptr); }, MOEGEMM_STATUS_INVALID_VALUE, "sizes is NULL");
    expect_error([&] { make_device_sizes(masked, misaligned); }, MOEGEMM_STATUS_MISALIGNED, "4-byte");
    expect_error([&] { make_device_sizes(problem_of(MOEGEMM_LAYOUT_FIXED), aligned); },
                 MOEGEMM_STATUS_INVALID_VALUE, "FIXED");
}

TEST_CASE("FIXED plans start with full slabs; others with no sizes", "[validation]") {
    const ExpertSizes fixed = initial_sizes(problem_of(MOEGEMM_LAYOUT_FIXED));
    CHECK(fixed.source == SizesSource::Host);
    CHECK(fixed.total_rows == 400);
    CHECK(fixed.largest == 100);
    CHECK(initial_sizes(problem_of(MOEGEMM_LAYOUT_VARIABLE)).source == SizesSource::None);
    CHECK(initial_sizes(problem_of(MOEGEMM_LAYOUT_MASKED)).source == SizesSource::None);
}

TEST_CASE("tensor extents follow the layout", "[validation]") {
    const ProblemDesc variable = problem_of(MOEGEMM_LAYOUT_VARIABLE);
    const int32_t sizes[] = {10, 0, 20, 0};
    const TensorExtents host = tensor_extents(variable, make_host_sizes(variable, sizes));
    CHECK(host.a_bytes == 30u * 128 * 2);
    CHECK(host.b_bytes == 4u * 64 * 128 * 2);
    CHECK(host.d_bytes == 30u * 64 * 2);
    const ProblemDesc masked = problem_of(MOEGEMM_LAYOUT_MASKED);
    const TensorExtents slabs = tensor_extents(masked, make_device_sizes(masked, reinterpret_cast<const int32_t*>(0x100)));
    CHECK(slabs.a_bytes == 4u * 100 * 128 * 2);
    CHECK(slabs.d_bytes == 4u * 100 * 64 * 2);
}

TEST_CASE("execute arguments: each bad argument has its status and message", "[validation]") {
    const ProblemDesc p = problem_of(MOEGEMM_LAYOUT_VARIABLE);
    const int32_t sizes_raw[] = {10, 0, 20, 5};
    const ExpertSizes sizes = make_host_sizes(p, sizes_raw);
    const std::size_t need = 4096;
    auto check = [&](ExecuteArgs args, moegemm_status_t status, const std::string& word) {
        expect_error([&] { validate_execute_args(p, sizes, args, need); }, status, word);
    };

    validate_execute_args(p, sizes, good_args(), need);  // the baseline passes

    expect_error([&] { validate_execute_args(p, ExpertSizes{}, good_args(), need); },
                 MOEGEMM_STATUS_INVALID_STATE, "never set");

    {
        ExecuteArgs a = good_args();
        a.a = nullptr;
        check(a, MOEGEMM_STATUS_INVALID_VALUE, "a is NULL");
    }
    {
        ExecuteArgs a = good_args();
        a.b = nullptr;
        check(a, MOEGEMM_STATUS_INVALID_VALUE, "b is NULL");
    }
    {
        ExecuteArgs a = good_args();
        a.d = nullptr;
        check(a, MOEGEMM_STATUS_INVALID_VALUE, "d is NULL");
    }
    {
        ExecuteArgs a = good_args();
        a.a = static_cast<const char*>(kA) + 2;
        check(a, MOEGEMM_STATUS_MISALIGNED, "a = ");
    }
    {
        ExecuteArgs a = good_args();
        a.b = static_cast<const char*>(kB) + 8;
        check(a, MOEGEMM_STATUS_MISALIGNED, "b = ");
    }
    {
        ExecuteArgs a = good_args();
        a.d = static_cast<char*>(kD) + 2;
        check(a, MOEGEMM_STATUS_MISALIGNED, "d = ");
    }
    {
        ExecuteArgs a = good_args();
        static const float scale = 1.0f;
        a.a_scale = &scale;
        check(a, MOEGEMM_STATUS_INVALID_VALUE, "a_scale/b_scale");
        a.a_scale = nullptr;
        a.b_scale = &scale;
        check(a, MOEGEMM_STATUS_INVALID_VALUE, "a_scale/b_scale");
    }
    {
        ExecuteArgs a = good_args();
        a.d = const_cast<void*>(kA);  // D on top of A
        check(a, MOEGEMM_STATUS_INVALID_VALUE, "d overlaps a");
        a.d = static_cast<char*>(const_cast<void*>(kA)) + 35 * 128 * 2 - 16;  // last bytes of A
        check(a, MOEGEMM_STATUS_INVALID_VALUE, "d overlaps a");
        a.d = static_cast<char*>(const_cast<void*>(kA)) + 35 * 128 * 2;  // just past A: fine
        validate_execute_args(p, sizes, a, need);
    }
    {
        ExecuteArgs a = good_args();
        a.d = static_cast<char*>(const_cast<void*>(kB)) + 64;
        check(a, MOEGEMM_STATUS_INVALID_VALUE, "d overlaps b");
    }
    {
        ExecuteArgs a = good_args();
        a.workspace_bytes = need - 1;
        check(a, MOEGEMM_STATUS_WORKSPACE_TOO_SMALL, "workspace_bytes = 4095");
    }
    {
        ExecuteArgs a = good_args();
        a.workspace = nullptr;
        check(a, MOEGEMM_STATUS_INVALID_VALUE, "workspace is NULL");
    }
    {
        ExecuteArgs a = good_args();
        a.workspace = static_cast<char*>(kWorkspace) + 128;
        check(a, MOEGEMM_STATUS_MISALIGNED, "256-byte");
    }
    {
        ExecuteArgs a = good_args();
        a.workspace = static_cast<char*>(kD) - 256;  // workspace running into D
        check(a, MOEGEMM_STATUS_INVALID_VALUE, "workspace overlaps d");
    }
    for (const void* tensor : {kA, kB}) {
        ExecuteArgs a = good_args();
        a.workspace = const_cast<void*>(tensor);  // the workspace is written: it must not alias an input either
        check(a, MOEGEMM_STATUS_INVALID_VALUE, tensor == kA ? "workspace overlaps a"
                                                            : "workspace overlaps b");
    }
}

TEST_CASE("execute arguments: fp8 scales are required, aligned device pointers", "[validation]") {
    const ProblemDesc p = problem_of(MOEGEMM_LAYOUT_VARIABLE, MOEGEMM_DTYPE_E4M3);
    const int32_t sizes_raw[] = {10, 0, 20, 5};
    const ExpertSizes sizes = make_host_sizes(p, sizes_raw);
    const float* const scale = reinterpret_cast<const float*>(0x20000);
    ExecuteArgs good = good_args();
    good.a_scale = scale;
    good.b_scale = scale;
    validate_execute_args(p, sizes, good, 4096);
    for (const bool a_side : {true, false}) {
        ExecuteArgs args = good;
        (a_side ? args.a_scale : args.b_scale) = nullptr;
        expect_error([&] { validate_execute_args(p, sizes, args, 4096); },
                     MOEGEMM_STATUS_INVALID_VALUE,
                     a_side ? "a_scale is NULL: E4M3 inputs need device scales (PER_EXPERT"
                            : "b_scale is NULL");
        (a_side ? args.a_scale : args.b_scale) =
            reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(scale) + 4);
        expect_error([&] { validate_execute_args(p, sizes, args, 4096); },
                     MOEGEMM_STATUS_MISALIGNED, a_side ? "a_scale" : "b_scale");
    }
}

TEST_CASE("execute arguments: nothing to compute allows NULL tensors", "[validation]") {
    const ProblemDesc p = problem_of(MOEGEMM_LAYOUT_VARIABLE);
    const int32_t zeros[] = {0, 0, 0, 0};
    ExecuteArgs a;  // all NULL, no workspace
    validate_execute_args(p, make_host_sizes(p, zeros), a, 0);
    // ...but not when the GPU decides the rows (device sizes) or every row is valid (FIXED).
    const ProblemDesc masked = problem_of(MOEGEMM_LAYOUT_MASKED);
    expect_error([&] {
        validate_execute_args(masked, make_device_sizes(masked, reinterpret_cast<const int32_t*>(0x100)), a, 0);
    }, MOEGEMM_STATUS_INVALID_VALUE, "a is NULL");
    const ProblemDesc fixed = problem_of(MOEGEMM_LAYOUT_FIXED);
    expect_error([&] { validate_execute_args(fixed, initial_sizes(fixed), a, 0); },
                 MOEGEMM_STATUS_INVALID_VALUE, "a is NULL");
}

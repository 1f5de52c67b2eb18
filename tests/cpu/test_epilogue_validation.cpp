// The host-visible rules of the 0.2 fields (epilogue options, gathered A, the older struct
// size) and of the MoE layer's problem, its GEMM problems and its workspace: pure functions,
// no GPU.
#include <cstdint>
#include <cstring>
#include <string>

#include <catch2/catch.hpp>

#include "error.hpp"
#include "expect_error.hpp"
#include "moe/moe_plan.hpp"
#include "problem.hpp"
#include "versioned_struct.hpp"

using namespace moegemm;
using moegemm::testing::expect_error;

namespace {

moegemm_problem_t base_problem() {
    moegemm_problem_t p = default_problem();
    p.num_experts = 4;
    p.n = 64;
    p.k = 128;
    p.max_rows = 100;
    return p;
}


moegemm_moe_problem_t base_layer() {
    moegemm_moe_problem_t p;
    std::memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.num_experts = 128;
    p.top_k = 8;
    p.hidden = 2048;
    p.intermediate = 768;
    p.max_tokens = 4096;
    p.activation = MOEGEMM_ACTIVATION_SWIGLU;
    return p;
}

}  // namespace

TEST_CASE("a 0.1 caller's problem is read with the later fields at their defaults",
          "[validation][epilogue]") {
    moegemm_problem_t p = base_problem();
    p.struct_size = MOEGEMM_PROBLEM_SIZE_0_1;
    // Bytes past the 0.1 struct are not the caller's: they must not be read.
    std::memset(reinterpret_cast<unsigned char*>(&p) + MOEGEMM_PROBLEM_SIZE_0_1, 0xAB,
                sizeof p - MOEGEMM_PROBLEM_SIZE_0_1);
    const ProblemDesc d = validate_problem(&p);
    CHECK(d.epilogue_inputs == 0);
    CHECK(d.activation == MOEGEMM_ACTIVATION_NONE);
    CHECK(d.gather_rows == 0);
    CHECK_FALSE(has_epilogue_or_gather(d));
    p.struct_size = MOEGEMM_PROBLEM_SIZE_0_1 + 8;  // no version has this size
    expect_error([&] { validate_problem(&p); }, MOEGEMM_STATUS_INVALID_VALUE, "struct_size");
}

TEST_CASE("epilogue fields: each bad value has its status and message", "[validation][epilogue]") {
    moegemm_problem_t p = base_problem();
    SECTION("unknown epilogue bit") {
        p.epilogue_inputs = 8;
        expect_error([&] { validate_problem(&p); }, MOEGEMM_STATUS_INVALID_VALUE, "epilogue_inputs");
    }
    SECTION("activation out of range") {
        int bad = 6;
        std::memcpy(&p.activation, &bad, sizeof bad);
        expect_error([&] { validate_problem(&p); }, MOEGEMM_STATUS_INVALID_VALUE, "activation");
    }
    SECTION("clamped SwiGLU without its parameters") {
        p.activation = MOEGEMM_ACTIVATION_SWIGLU_CLAMPED;
        expect_error([&] { validate_problem(&p); }, MOEGEMM_STATUS_INVALID_VALUE, "activation_alpha");
    }
    SECTION("clamped SwiGLU with a NaN limit") {
        p.activation = MOEGEMM_ACTIVATION_SWIGLU_CLAMPED;
        p.activation_alpha = 1.702f;
        p.activation_limit = std::nanf("");
        expect_error([&] { validate_problem(&p); }, MOEGEMM_STATUS_INVALID_VALUE, "activation_limit");
    }
    SECTION("a parameter of another activation") {
        p.activation = MOEGEMM_ACTIVATION_SILU;
        p.activation_limit = 7.0f;
        expect_error([&] { validate_problem(&p); }, MOEGEMM_STATUS_INVALID_VALUE, "SWIGLU_CLAMPED");
    }
    SECTION("a gate layout without a gated activation") {
        p.gate_layout = MOEGEMM_GATE_UP_INTERLEAVED;
        expect_error([&] { validate_problem(&p); }, MOEGEMM_STATUS_INVALID_VALUE, "gate_layout");
    }
    SECTION("gated N / 2 not 16-byte strided") {
        p.activation = MOEGEMM_ACTIVATION_SWIGLU;
        p.n = 72;
        expect_error([&] { validate_problem(&p); }, MOEGEMM_STATUS_MISALIGNED, "multiple of 16");
    }
    SECTION("negative gather_rows") {
        p.gather_rows = -1;
        expect_error([&] { validate_problem(&p); }, MOEGEMM_STATUS_INVALID_VALUE, "gather_rows");
    }
    SECTION("E4M3 with an epilogue") {
        p.a_type = p.b_type = MOEGEMM_DTYPE_E4M3;
        p.scale_mode = MOEGEMM_SCALE_PER_TENSOR;
        p.epilogue_inputs = MOEGEMM_EPILOGUE_BIAS;
        expect_error([&] { validate_problem(&p); }, MOEGEMM_STATUS_NOT_SUPPORTED, "E4M3");
    }
    SECTION("E4M3 bias") {
        p.bias_type = MOEGEMM_DTYPE_E4M3;
        expect_error([&] { validate_problem(&p); }, MOEGEMM_STATUS_NOT_SUPPORTED, "bias_type");
    }
}

TEST_CASE("epilogue arrays: required exactly when the plan takes them", "[validation][epilogue]") {
    moegemm_problem_t p = base_problem();
    p.epilogue_inputs = MOEGEMM_EPILOGUE_ALPHA | MOEGEMM_EPILOGUE_BIAS;
    p.activation = MOEGEMM_ACTIVATION_SWIGLU;
    p.gather_rows = 50;
    const ProblemDesc d = validate_problem(&p);
    CHECK(output_columns(d) == 32);
    const ExpertSizes sizes = make_host_sizes(d, std::vector<int32_t>{10, 0, 20, 5}.data());
    const TensorExtents x = tensor_extents(d, sizes);
    CHECK(x.a_bytes == 50u * 128 * 2);  // the whole token matrix
    CHECK(x.d_bytes == 35u * 32 * 2);   // the gated output's columns
    ExecuteArgs a;
    a.a = reinterpret_cast<const void*>(0x10000);
    a.b = reinterpret_cast<const void*>(0x4000000);
    a.d = reinterpret_cast<void*>(0x8000000);
    a.alpha = reinterpret_cast<const float*>(0x9000000);
    a.bias = reinterpret_cast<const void*>(0x9100000);
    a.a_rows = reinterpret_cast<const int32_t*>(0x9200000);
    validate_execute_args(d, sizes, a, 0);
    SECTION("missing alpha") {
        a.alpha = nullptr;
        expect_error([&] { validate_execute_args(d, sizes, a, 0); }, MOEGEMM_STATUS_INVALID_VALUE,
                     "alpha");
    }
    SECTION("a row scale the plan does not take") {
        a.row_scale = reinterpret_cast<const float*>(0x9300000);
        expect_error([&] { validate_execute_args(d, sizes, a, 0); }, MOEGEMM_STATUS_INVALID_VALUE,
                     "row_scale");
    }
    SECTION("misaligned bias") {
        a.bias = reinterpret_cast<const void*>(0x9100004);
        expect_error([&] { validate_execute_args(d, sizes, a, 0); }, MOEGEMM_STATUS_MISALIGNED,
                     "bias");
    }
    SECTION("D over the gather indices") {
        a.a_rows = reinterpret_cast<const int32_t*>(0x8000000 + 64);
        expect_error([&] { validate_execute_args(d, sizes, a, 0); }, MOEGEMM_STATUS_INVALID_VALUE,
                     "a_rows");
    }
}

TEST_CASE("versioned structs: older sizes read with zero defaults, newer fields refused",
          "[validation][epilogue]") {
    moegemm_tensors_t t;
    init_versioned_struct(&t, sizeof t, sizeof t, "tensors", "moegemm_tensors_t");
    CHECK(t.struct_size == sizeof t);
    CHECK(t.a == nullptr);
    unsigned char newer[sizeof t + 16] = {};
    init_versioned_struct(reinterpret_cast<moegemm_tensors_t*>(newer), sizeof newer, sizeof t,
                          "tensors", "moegemm_tensors_t");
    newer[sizeof t + 3] = 1;
    expect_error(
        [&] {
            read_versioned_struct(*reinterpret_cast<const moegemm_tensors_t*>(newer), sizeof t,
                                  "tensors", "moegemm_tensors_init");
        },
        MOEGEMM_STATUS_NOT_SUPPORTED, "beyond");
    expect_error(
        [&] { init_versioned_struct(&t, sizeof t - 8, sizeof t, "tensors", "moegemm_tensors_t"); },
        MOEGEMM_STATUS_INVALID_VALUE, "struct_size");
}

TEST_CASE("moe layer: the problem's rules", "[validation][moe]") {
    moegemm_moe_problem_t p = base_layer();
    const MoeDesc d = validate_moe_problem(&p);
    CHECK(d.local_experts == 128);
    SECTION("FC1 and FC2 as grouped GEMMs") {
        const moegemm_problem_t fc1 = fc1_problem(d);
        CHECK(fc1.n == 2 * 768);
        CHECK(fc1.k == 2048);
        CHECK(fc1.max_rows == 4096 * 8);
        // 4096 tokens x 8 over 128 experts: 256 rows per expert, FC1 reads a sorted copy.
        CHECK(copies_tokens(d));
        CHECK(fc1.gather_rows == 0);
        CHECK(fc1.layout == MOEGEMM_LAYOUT_VARIABLE);
        CHECK(fc1.expected_rows == 4096 * 8 / 128);
        const moegemm_problem_t fc2 = fc2_problem(d);
        CHECK(fc2.n == 2048);
        CHECK(fc2.k == 768);
        CHECK(fc2.gather_rows == 0);
        CHECK(fc2.activation == MOEGEMM_ACTIVATION_NONE);
        // Both are valid grouped GEMM problems.
        CHECK(validate_problem(&fc1).n == 2 * 768);
        CHECK(validate_problem(&fc2).n == 2048);
    }
    SECTION("FC1 gathers its rows itself below kCopyTokensRowsPerExpert rows per expert") {
        p.expected_tokens = kCopyTokensRowsPerExpert * 128 / 8 - 1;
        const MoeDesc small = validate_moe_problem(&p);
        CHECK_FALSE(copies_tokens(small));
        const moegemm_problem_t fc1 = fc1_problem(small);
        CHECK(fc1.gather_rows == 4096);
        CHECK(validate_problem(&fc1).gather_rows == 4096);
        p.expected_tokens = kCopyTokensRowsPerExpert * 128 / 8;
        CHECK(copies_tokens(validate_moe_problem(&p)));
    }
    SECTION("the workspace's regions are aligned and disjoint") {
        moe::RoutingLayout routing;
        routing.total_bytes = 1000 * 256;
        const MoeWorkspace w = moe_workspace(d, routing, 77777);
        CHECK(w.fc1_output >= routing.total_bytes);
        CHECK(w.fc2_output - w.fc1_output >= size_t{4096} * 8 * 768 * 2);
        CHECK(w.gemm - w.fc2_output >= size_t{4096} * 8 * 2048 * 2);
        CHECK(w.total_bytes - w.gemm >= 77777u);
        for (size_t offset : {w.fc1_output, w.fc2_output, w.gemm, w.total_bytes})
            CHECK(offset % 256 == 0);
    }
    SECTION("bad fields") {
        SECTION("top_k above the experts") {
            p.top_k = 129;
            expect_error([&] { validate_moe_problem(&p); }, MOEGEMM_STATUS_INVALID_VALUE, "top_k");
        }
        SECTION("expert range outside the model") {
            p.first_expert = 100;
            p.local_experts = 29;
            expect_error([&] { validate_moe_problem(&p); }, MOEGEMM_STATUS_INVALID_VALUE,
                         "rank's experts");
        }
        SECTION("row scale as an FC input") {
            p.fc2_inputs = MOEGEMM_EPILOGUE_ROW_SCALE;
            expect_error([&] { validate_moe_problem(&p); }, MOEGEMM_STATUS_INVALID_VALUE,
                         "fc2_inputs");
        }
        SECTION("fp8") {
            p.dtype = MOEGEMM_DTYPE_E4M3;
            expect_error([&] { validate_moe_problem(&p); }, MOEGEMM_STATUS_NOT_SUPPORTED, "dtype");
        }
        SECTION("cuBLASLt") {
            p.backend = MOEGEMM_BACKEND_CUBLASLT;
            expect_error([&] { validate_moe_problem(&p); }, MOEGEMM_STATUS_NOT_SUPPORTED,
                         "native");
        }
        SECTION("hidden not 16-byte strided") {
            p.hidden = 2044;
            expect_error([&] { validate_moe_problem(&p); }, MOEGEMM_STATUS_MISALIGNED, "hidden");
        }
        SECTION("routed rows past 2^31") {
            p.max_tokens = int64_t{1} << 29;
            expect_error([&] { validate_moe_problem(&p); }, MOEGEMM_STATUS_INVALID_VALUE,
                         "top_k");
        }
    }
}

TEST_CASE("moe layer: fp8 weights with block scales", "[validation][moe]") {
    moegemm_moe_problem_t p = base_layer();
    p.weight_scales = MOEGEMM_SCALE_BLOCK;
    p.expected_tokens = 16;  // few rows per expert: a 16-bit layer would gather in FC1
    const MoeDesc d = validate_moe_problem(&p);
    CHECK(d.fp8);
    SECTION("both GEMMs are E4M3 BLOCK into BF16, FC1 plain over the copied, quantized tokens") {
        CHECK(copies_tokens(d));
        const moegemm_problem_t fc1 = fc1_problem(d);
        CHECK(fc1.a_type == MOEGEMM_DTYPE_E4M3);
        CHECK(fc1.b_type == MOEGEMM_DTYPE_E4M3);
        CHECK(fc1.scale_mode == MOEGEMM_SCALE_BLOCK);
        CHECK(fc1.d_type == MOEGEMM_DTYPE_BF16);
        CHECK(fc1.n == 2 * 768);
        CHECK(fc1.activation == MOEGEMM_ACTIVATION_NONE);  // applied by the quantizing kernel
        CHECK(fc1.gather_rows == 0);
        const moegemm_problem_t fc2 = fc2_problem(d);
        CHECK(fc2.a_type == MOEGEMM_DTYPE_E4M3);
        CHECK(fc2.scale_mode == MOEGEMM_SCALE_BLOCK);
        CHECK(fc2.d_type == MOEGEMM_DTYPE_BF16);
        CHECK(validate_problem(&fc1).scale_mode == MOEGEMM_SCALE_BLOCK);
        CHECK(validate_problem(&fc2).scale_mode == MOEGEMM_SCALE_BLOCK);
    }
    SECTION("the workspace holds FC1's gated product and both quantized inputs") {
        moe::RoutingLayout routing;
        routing.total_bytes = 1000 * 256;
        const MoeWorkspace w = moe_workspace(d, routing, 77777);
        const size_t rows = size_t{4096} * 8;
        CHECK(w.fc2_output - w.fc1_output >= rows * 2 * 768 * 2);  // BF16 [rows, 2I]
        CHECK(w.fc1_input >= w.fc2_output + rows * 2048 * 2);
        CHECK(w.fc1_input_scale - w.fc1_input >= rows * 2048);
        CHECK(w.fc2_input - w.fc1_input_scale >= rows * 16 * sizeof(float));  // 2048 / 128
        CHECK(w.fc2_input_scale - w.fc2_input >= rows * 768);
        CHECK(w.gemm - w.fc2_input_scale >= rows * 6 * sizeof(float));  // ceil(768 / 128)
        CHECK(w.total_bytes - w.gemm >= 77777u);
        for (size_t offset : {w.fc1_output, w.fc2_output, w.fc1_input, w.fc1_input_scale,
                              w.fc2_input, w.fc2_input_scale, w.gemm, w.total_bytes})
            CHECK(offset % 256 == 0);
    }
    SECTION("what an fp8 layer refuses") {
        SECTION("F16 activations") {
            p.dtype = MOEGEMM_DTYPE_F16;
            expect_error([&] { validate_moe_problem(&p); }, MOEGEMM_STATUS_NOT_SUPPORTED,
                         "BF16");
        }
        SECTION("a bias") {
            p.fc1_inputs = MOEGEMM_EPILOGUE_BIAS;
            expect_error([&] { validate_moe_problem(&p); }, MOEGEMM_STATUS_NOT_SUPPORTED,
                         "no alpha or bias");
        }
        SECTION("intermediate not a multiple of 16") {
            p.intermediate = 760;
            expect_error([&] { validate_moe_problem(&p); }, MOEGEMM_STATUS_MISALIGNED,
                         "intermediate");
        }
        SECTION("another scale mode") {
            p.weight_scales = MOEGEMM_SCALE_ROWWISE;
            expect_error([&] { validate_moe_problem(&p); }, MOEGEMM_STATUS_NOT_SUPPORTED,
                         "weight_scales");
        }
        SECTION("a gate/up layout without a gated activation") {
            p.activation = MOEGEMM_ACTIVATION_SILU;
            p.gate_layout = MOEGEMM_GATE_UP_INTERLEAVED;
            expect_error([&] { validate_moe_problem(&p); }, MOEGEMM_STATUS_INVALID_VALUE,
                         "not gated");
        }
        SECTION("a scale mode out of range") {
            p.weight_scales = static_cast<moegemm_scale_mode_t>(9);
            expect_error([&] { validate_moe_problem(&p); }, MOEGEMM_STATUS_INVALID_VALUE,
                         "weight_scales");
        }
    }
}

TEST_CASE("ranges_overlap is exact near the end of the address space", "[validation]") {
    const auto at = [](std::uintptr_t v) { return reinterpret_cast<const void*>(v); };
    const std::uintptr_t top = ~std::uintptr_t{0};
    // A range reaching past 2^64 would wrap in a naive end-pointer sum.
    CHECK(ranges_overlap(at(0x1000), top, at(0x2000), 16));
    CHECK(ranges_overlap(at(0x2000), 16, at(0x1000), top));
    CHECK_FALSE(ranges_overlap(at(0x1000), 0x1000, at(0x2000), top));
    CHECK(ranges_overlap(at(top - 15), 16, at(top - 1), 1));
    CHECK_FALSE(ranges_overlap(at(0x1000), 16, nullptr, 16));
    CHECK_FALSE(ranges_overlap(at(0x1000), 0, at(0x1000), 16));
}

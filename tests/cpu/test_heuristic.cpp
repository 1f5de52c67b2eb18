// The heuristic's golden table: plain problem summaries and device capabilities in, the
// exact choice (or status) out. A change of policy must change this table on purpose.
#include <string>

#include <catch2/catch.hpp>

#include "heuristic.hpp"
#include "registry.hpp"

using namespace moegemm;

namespace {

DeviceCaps device(int major, int minor, int sms = 132) {
    DeviceCaps d;
    d.cc_major = major;
    d.cc_minor = minor;
    d.sm_count = sms;
    d.name = "test GPU";
    d.smem_per_block_optin = 227 * 1024;
    d.l2_bytes = 50u << 20;
    return d;
}

ProblemSummary summary(moegemm_layout_t layout, SizesSource sizes,
                       moegemm_backend_t backend = MOEGEMM_BACKEND_AUTO,
                       moegemm_dtype_t a = MOEGEMM_DTYPE_BF16,
                       moegemm_dtype_t d = MOEGEMM_DTYPE_BF16) {
    ProblemSummary p;
    p.layout = layout;
    p.sizes = sizes;
    p.backend = backend;
    p.a_type = a;
    p.d_type = d;
    p.num_experts = 8;
    p.n = 4096;
    p.k = 4096;
    p.max_rows = 16384;
    if (sizes == SizesSource::Host) {
        p.total_rows = 8192;
        p.largest_expert = 1894;
        p.active_experts = 8;
    }
    return p;
}

struct Row {
    const char* what;
    ProblemSummary problem;
    DeviceCaps device;
    moegemm_status_t status;
    KernelId kernel;       // when status is SUCCESS
    const char* message;   // a word of the reason when status is not SUCCESS
};

constexpr auto V = MOEGEMM_LAYOUT_VARIABLE;
constexpr auto M = MOEGEMM_LAYOUT_MASKED;
constexpr auto F = MOEGEMM_LAYOUT_FIXED;
constexpr auto OK = MOEGEMM_STATUS_SUCCESS;
constexpr auto NS = MOEGEMM_STATUS_NOT_SUPPORTED;
constexpr auto Loop = KernelId::CublasLtExpertLoop;
constexpr auto Strided = KernelId::CublasLtStridedBatched;

}  // namespace

TEST_CASE("heuristic golden table", "[heuristic]") {
    const DeviceCaps h100 = device(9, 0);
    const DeviceCaps a100 = device(8, 0, 108);
    const DeviceCaps v100 = device(7, 0, 80);
    const Row table[] = {
        {"VARIABLE, host sizes, H100", summary(V, SizesSource::Host), h100, OK, Loop, ""},
        {"VARIABLE, host sizes, A100", summary(V, SizesSource::Host), a100, OK, Loop, ""},
        {"VARIABLE, sizes not yet set", summary(V, SizesSource::None), h100, OK, Loop, ""},
        {"VARIABLE, device sizes: baseline cannot", summary(V, SizesSource::Device), h100, NS, Loop, "native sm_90a"},
        {"VARIABLE, forced cuBLASLt", summary(V, SizesSource::Host, MOEGEMM_BACKEND_CUBLASLT), h100, OK, Loop, ""},
        {"MASKED, host sizes", summary(M, SizesSource::Host), h100, OK, Strided, ""},
        {"MASKED, device sizes", summary(M, SizesSource::Device), h100, OK, Strided, ""},
        {"MASKED, sizes not yet set", summary(M, SizesSource::None), a100, OK, Strided, ""},
        {"FIXED", summary(F, SizesSource::Host), h100, OK, Strided, ""},
        {"FIXED, f16 -> f32", summary(F, SizesSource::Host, MOEGEMM_BACKEND_AUTO, MOEGEMM_DTYPE_F16, MOEGEMM_DTYPE_F32), h100, OK, Strided, ""},
        {"VARIABLE, bf16 -> f32", summary(V, SizesSource::Host, MOEGEMM_BACKEND_AUTO, MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_F32), h100, OK, Loop, ""},
        {"VARIABLE, f16 -> f16", summary(V, SizesSource::Host, MOEGEMM_BACKEND_AUTO, MOEGEMM_DTYPE_F16, MOEGEMM_DTYPE_F16), h100, OK, Loop, ""},
        {"bf16 -> f16 has no cuBLASLt kernel", summary(V, SizesSource::Host, MOEGEMM_BACKEND_AUTO, MOEGEMM_DTYPE_BF16, MOEGEMM_DTYPE_F16), h100, NS, Loop, "BF16 x BF16 -> F16"},
        {"f16 -> bf16 has no cuBLASLt kernel", summary(M, SizesSource::Host, MOEGEMM_BACKEND_AUTO, MOEGEMM_DTYPE_F16, MOEGEMM_DTYPE_BF16), h100, NS, Loop, "F16 x F16 -> BF16"},
        {"NATIVE requested: none in this build", summary(V, SizesSource::Host, MOEGEMM_BACKEND_NATIVE), h100, NS, Loop, "NATIVE"},
        {"Volta is too old", summary(V, SizesSource::Host), v100, MOEGEMM_STATUS_ARCH_MISMATCH, Loop, "compute capability 7.0"},
    };
    for (const Row& row : table) {
        INFO(row.what);
        const Selection s = select_kernel(row.problem, row.device);
        CHECK(s.status == row.status);
        if (row.status == OK) {
            CHECK(s.kernel == row.kernel);
            CHECK(variant(s.kernel).id == row.kernel);
        } else {
            CHECK_THAT(s.reason, Catch::Contains(row.message));
        }
    }
}

TEST_CASE("heuristic is deterministic and independent of call order", "[heuristic]") {
    const ProblemSummary p = summary(V, SizesSource::Host);
    const DeviceCaps d = device(9, 0);
    const Selection first = select_kernel(p, d);
    for (int i = 0; i < 100; ++i) {
        const Selection again = select_kernel(p, d);
        CHECK(again.status == first.status);
        CHECK(again.kernel == first.kernel);
        CHECK(again.reason == first.reason);
    }
}

TEST_CASE("registry: names are unique and workspace needs are fixed by the problem", "[heuristic]") {
    int count = 0;
    for (const KernelVariant* v = registry_begin(); v != registry_end(); ++v, ++count) {
        for (const KernelVariant* w = v + 1; w != registry_end(); ++w) {
            CHECK(std::string(v->name) != w->name);
            CHECK(v->id != w->id);
        }
        moegemm_problem_t raw = default_problem();
        raw.num_experts = 4;
        raw.n = raw.k = raw.max_rows = 64;
        const ProblemDesc p = validate_problem(&raw);
        CHECK(v->workspace_bytes(p, device(9, 0)) == (32u << 20));
        CHECK(v->workspace_bytes(p, device(8, 0)) == (4u << 20));
        CHECK(v->workspace_bytes(p, device(9, 0)) % 256 == 0);
    }
    CHECK(count == 2);
}

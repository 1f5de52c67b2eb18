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
constexpr auto WideTmaStoreC2 = KernelId::NativeBn256TmaStoreC2;
constexpr auto WideTmaStore = KernelId::NativeBn256TmaStore;
constexpr auto WideC2 = KernelId::NativeBn256C2;
constexpr auto Wide = KernelId::NativeBn256;
constexpr auto NarrowTmaStore = KernelId::NativeBn128TmaStore;
constexpr auto Narrow = KernelId::NativeBn128;
constexpr auto ShortNarrow = KernelId::NativeBm64Bn128;
constexpr auto SwapDecode = KernelId::NativeBm64Bn128Swap;
constexpr auto AUTO = MOEGEMM_BACKEND_AUTO;
constexpr auto NATIVE = MOEGEMM_BACKEND_NATIVE;
constexpr auto CUBLASLT = MOEGEMM_BACKEND_CUBLASLT;
constexpr auto BF16 = MOEGEMM_DTYPE_BF16;
constexpr auto F16 = MOEGEMM_DTYPE_F16;
constexpr auto F32 = MOEGEMM_DTYPE_F32;

ProblemSummary with_n(ProblemSummary p, int64_t n) {
    p.n = n;
    return p;
}

// Decode: a handful of rows per expert (host sizes), or the hint for device sizes.
ProblemSummary decode(ProblemSummary p) {
    p.total_rows = 128;
    p.largest_expert = 28;
    p.expected_rows = 16;
    return p;
}

ProblemSummary with_rows(ProblemSummary p, int64_t total_rows) {
    p.total_rows = total_rows;  // over the 8 active experts
    return p;
}

// tutorial-8x2048: 8 experts of ~132 rows, N = 2048: about 128 tiles of 128 x 256, one wave.
ProblemSummary small_prefill(ProblemSummary p) {
    p.n = 2048;
    p.k = 2048;
    p.total_rows = 1060;
    p.largest_expert = 201;
    return p;
}

// 2^31 - 1 rows of capacity and N = 2^20: far more output tiles than 32-bit indices hold.
ProblemSummary huge(ProblemSummary p) {
    p.max_rows = (int64_t{1} << 31) - 1;
    p.n = int64_t{1} << 20;
    p.num_experts = 1;
    return p;
}

ProblemSummary kn(ProblemSummary p) {
    p.weight_layout = MOEGEMM_WEIGHTS_KN;
    return p;
}

// E4M3 inputs with a scale mode, BF16 output.
ProblemSummary fp8(ProblemSummary p, moegemm_scale_mode_t mode) {
    p.a_type = MOEGEMM_DTYPE_E4M3;
    p.d_type = MOEGEMM_DTYPE_BF16;
    p.scale_mode = mode;
    return p;
}
constexpr auto PerTensor = MOEGEMM_SCALE_PER_TENSOR;
constexpr auto PerExpert = MOEGEMM_SCALE_PER_EXPERT;
constexpr auto Rowwise = MOEGEMM_SCALE_ROWWISE;
constexpr auto Block = MOEGEMM_SCALE_BLOCK;

}  // namespace

TEST_CASE("heuristic golden table", "[heuristic]") {
    const DeviceCaps h100 = device(9, 0);
    const DeviceCaps a100 = device(8, 0, 108);
    const DeviceCaps b200 = device(10, 0, 148);
    const DeviceCaps v100 = device(7, 0, 80);
    const auto Host = SizesSource::Host;
    const auto Device = SizesSource::Device;
    const auto None = SizesSource::None;
    const Row table[] = {
        // Hopper: the native kernel for every layout and sizes source it supports. Prefill
        // (or unknown sizes): 128-row tiles on single CTAs, TMA-store epilogue; decode (up to
        // 32 rows per expert): 64 x 128 tiles on single CTAs, register epilogue, swap-AB for
        // 16-bit inputs unless the swap_ab option is off.
        {"H100 VARIABLE host, N 4096", summary(V, Host), h100, OK, WideTmaStore, ""},
        {"H100 VARIABLE device, no hint", summary(V, Device), h100, OK, WideTmaStore, ""},
        {"H100 VARIABLE not yet set", summary(V, None), h100, OK, WideTmaStore, ""},
        {"H100 MASKED device", summary(M, Device), h100, OK, WideTmaStore, ""},
        {"H100 FIXED", summary(F, Host), h100, OK, WideTmaStore, ""},
        {"H100 decode, host sizes: 64-row tiles", decode(summary(V, Host)), h100, OK, SwapDecode, ""},
        {"H100 decode, device sizes with hint", decode(summary(M, Device)), h100, OK, SwapDecode, ""},
        {"H100 decode, swap_ab option off", [] { auto p = decode(summary(V, Host)); p.swap_ab = false; return p; }(), h100, OK, ShortNarrow, ""},
        {"H100 f16 -> f32 decode: swap-AB", decode(summary(M, Device, AUTO, F16, F32)), h100, OK, SwapDecode, ""},
        {"H100 32 rows per expert: still decode", with_rows(summary(V, Host), 256), h100, OK, SwapDecode, ""},
        {"H100 33 rows per expert: 128-row tiles", with_rows(summary(V, Host), 264), h100, OK, WideTmaStore, ""},
        {"H100 64 rows per expert (gptoss): 128-row tiles", with_rows(summary(V, Host), 512), h100, OK, WideTmaStore, ""},
        {"H100 N 768: narrow tiles", with_n(summary(V, Host), 768), h100, OK, NarrowTmaStore, ""},
        {"H100 N 768 decode: 64 x 128 tiles", decode(with_n(summary(V, Host), 768)), h100, OK, SwapDecode, ""},
        {"H100 N 1280: wide tiles", with_n(summary(V, Host), 1280), h100, OK, WideTmaStore, ""},
        {"H100 N 1280 decode: 64 x 128 tiles", decode(with_n(summary(V, Host), 1280)), h100, OK, SwapDecode, ""},
        {"H100 N 1024: wide tiles", with_n(summary(V, Host), 1024), h100, OK, WideTmaStore, ""},
        {"H100 one wave of tiles: TMA-store epilogue too", small_prefill(summary(V, Host)), h100, OK, WideTmaStore, ""},
        {"H100 bf16 -> f16 (native writes any output)", summary(V, Host, AUTO, BF16, F16), h100, OK, WideTmaStore, ""},
        {"H100 f16 -> f32: register epilogue", summary(M, Host, AUTO, F16, F32), h100, OK, Wide, ""},
        {"H100 KN weights: native too", kn(summary(V, Host)), h100, OK, WideTmaStore, ""},
        {"H100 KN MASKED device", kn(summary(M, Device)), h100, OK, WideTmaStore, ""},
        {"H100 KN decode", decode(kn(summary(V, Device))), h100, OK, SwapDecode, ""},
        {"A100 KN: cuBLASLt loop", kn(summary(V, Host)), a100, OK, Loop, ""},
        {"A100 KN VARIABLE device: nothing", kn(summary(V, Device)), a100, NS, Loop, "native sm_90a"},
        {"H100 forced cuBLASLt", summary(V, Host, CUBLASLT), h100, OK, Loop, ""},
        {"H100 forced cuBLASLt, MASKED", summary(M, Host, CUBLASLT), h100, OK, Strided, ""},
        {"H100 forced native", summary(M, Host, NATIVE), h100, OK, WideTmaStore, ""},
        {"H100 more than 2^31 tiles: cuBLASLt", huge(summary(V, Host)), h100, OK, Loop, ""},
        {"H100 more than 2^31 tiles, forced native", huge(summary(V, Host, NATIVE)), h100, NS, Loop, "tile indices"},
        {"H100 forced native, KN", kn(summary(V, Host, NATIVE)), h100, OK, WideTmaStore, ""},
        // Other GPUs: the cuBLASLt baseline.
        {"A100 VARIABLE host", summary(V, Host), a100, OK, Loop, ""},
        {"A100 MASKED device", summary(M, Device), a100, OK, Strided, ""},
        {"A100 MASKED not yet set", summary(M, None), a100, OK, Strided, ""},
        {"A100 FIXED f16 -> f32", summary(F, Host, AUTO, F16, F32), a100, OK, Strided, ""},
        {"B200 VARIABLE host: baseline", summary(V, Host), b200, OK, Loop, ""},
        {"A100 VARIABLE device: native needed", summary(V, Device), a100, NS, Loop, "native sm_90a"},
        {"A100 bf16 -> f16: no cuBLASLt kernel", summary(V, Host, AUTO, BF16, F16), a100, NS, Loop, "BF16 x BF16 -> F16"},
        {"A100 f16 -> bf16: no cuBLASLt kernel", summary(M, Host, AUTO, F16, BF16), a100, NS, Loop, "F16 x F16 -> BF16"},
        {"A100 forced native", summary(V, Host, NATIVE), a100, NS, Loop, "sm_90a"},
        {"V100 is too old", summary(V, Host), v100, MOEGEMM_STATUS_ARCH_MISMATCH, Loop, "compute capability 7.0"},
        // E4M3: native kernels on Hopper for every scale mode, the tile widths of 16-bit
        // inputs, single CTAs but where N >= 16384 (clusters of 2 sharing A: mixtral-fc1);
        // elsewhere the cuBLASLt baseline with per-tensor scales only.
        {"H100 fp8 per tensor, VARIABLE host", fp8(summary(V, Host), PerTensor), h100, OK, WideTmaStore, ""},
        {"H100 fp8 per tensor, MASKED device", fp8(summary(M, Device), PerTensor), h100, OK, WideTmaStore, ""},
        {"H100 fp8 per expert", fp8(summary(V, Host), PerExpert), h100, OK, WideTmaStore, ""},
        {"H100 fp8 rowwise", fp8(summary(V, Host), Rowwise), h100, OK, WideTmaStore, ""},
        {"H100 fp8 block", fp8(summary(V, Host), Block), h100, OK, WideTmaStore, ""},
        {"H100 fp8 block, F32 out: register epilogue", [] { auto p = fp8(summary(V, Host), Block); p.d_type = F32; return p; }(), h100, OK, Wide, ""},
        {"H100 fp8 N 28672 (mixtral-fc1): pairs share A", with_n(fp8(summary(V, Host), Block), 28672), h100, OK, WideTmaStoreC2, ""},
        {"H100 fp8 N 16384: pairs share A", with_n(fp8(summary(V, Host), PerTensor), 16384), h100, OK, WideTmaStoreC2, ""},
        {"H100 fp8 N 14336: single CTAs", with_n(fp8(summary(V, Host), PerTensor), 14336), h100, OK, WideTmaStore, ""},
        {"H100 fp8 N 28672, F32 out: pairs, register epilogue", [] { auto p = with_n(fp8(summary(V, Host), Rowwise), 28672); p.d_type = F32; return p; }(), h100, OK, WideC2, ""},
        {"H100 fp8 N 5760 (gptoss): single CTAs", with_n(fp8(summary(V, Host), Rowwise), 5760), h100, OK, WideTmaStore, ""},
        {"H100 fp8 N 768: narrow tiles, single CTAs", with_n(fp8(summary(V, Host), Block), 768), h100, OK, NarrowTmaStore, ""},
        {"H100 fp8 decode: 64 x 128 swap-AB tiles, single CTAs", decode(fp8(summary(V, Host), PerTensor)), h100, OK, SwapDecode, ""},
        {"H100 fp8 decode, F32 out", [] { auto p = decode(fp8(summary(M, Device), Rowwise)); p.d_type = F32; return p; }(), h100, OK, SwapDecode, ""},
        {"H100 fp8 decode, BLOCK scales: no swap-AB", decode(fp8(summary(V, Host), Block)), h100, OK, ShortNarrow, ""},
        {"H100 fp8 KN weights", kn(fp8(summary(V, Host), PerTensor)), h100, NS, Loop, "[E, N, K]"},
        {"H100 fp8 forced cuBLASLt", fp8(summary(V, Host, CUBLASLT), PerTensor), h100, OK, Loop, ""},
        {"H100 fp8 forced cuBLASLt, block: not there", fp8(summary(V, Host, CUBLASLT), Block), h100, NS, Loop, "BLOCK"},
        {"A100 fp8: needs 8.9", fp8(summary(V, Host), PerTensor), a100, NS, Loop, "8.9"},
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
        if (v->backend == MOEGEMM_BACKEND_CUBLASLT) {
            CHECK(v->workspace_bytes(p, device(9, 0)) == (32u << 20));
            CHECK(v->workspace_bytes(p, device(8, 0)) == (4u << 20));
        } else {
            // Per CTA, one CTA per SM at most: five 128-byte tensor maps (A in three box
            // heights, B, D); then the tile-ticket word (a 256-byte region). The same for every
            // input type.
            CHECK(v->workspace_bytes(p, device(9, 0)) == 132u * 5 * 128 + 256);
            CHECK(v->workspace_bytes(p, device(9, 0, 114)) == 114u * 5 * 128 + 256);
            ProblemDesc fp8 = p;
            fp8.a_type = fp8.b_type = MOEGEMM_DTYPE_E4M3;
            CHECK(v->workspace_bytes(fp8, device(9, 0)) == 132u * 5 * 128 + 256);
        }
    }
    CHECK(count == 16);
}

TEST_CASE("force_kernel: a named variant, or why not", "[heuristic]") {
    const DeviceCaps h100 = device(9, 0);
    const DeviceCaps a100 = device(8, 0, 108);
    const ProblemSummary p = summary(V, SizesSource::Host);
    CHECK(select_named_kernel(p, h100, "sm90_grouped_128x128").kernel == Narrow);
    CHECK(select_named_kernel(p, h100, "cublaslt_expert_loop").kernel == Loop);
    const Selection unknown = select_named_kernel(p, h100, "no_such_kernel");
    CHECK(unknown.status == MOEGEMM_STATUS_INVALID_VALUE);
    CHECK_THAT(unknown.reason, Catch::Contains("sm90_grouped_128x256_tma_store"));  // lists names
    const Selection off_arch = select_named_kernel(p, a100, "sm90_grouped_128x256");
    CHECK(off_arch.status == MOEGEMM_STATUS_NOT_SUPPORTED);
    CHECK_THAT(off_arch.reason, Catch::Contains("sm_90a"));
    // A GPU older than 8.0 runs nothing, forced or not: the same status as the heuristic's.
    const Selection too_old = select_named_kernel(p, device(7, 0), "cublaslt_expert_loop");
    CHECK(too_old.status == MOEGEMM_STATUS_ARCH_MISMATCH);
    CHECK_THAT(too_old.reason, Catch::Contains("compute capability 7.0"));
    const Selection wrong_layout = select_named_kernel(p, h100, "cublaslt_strided_batched");
    CHECK(wrong_layout.status == MOEGEMM_STATUS_NOT_SUPPORTED);
    const Selection f32 = select_named_kernel(summary(V, SizesSource::Host, AUTO, BF16, F32), h100,
                                              "sm90_grouped_128x256_tma_store");
    CHECK(f32.status == MOEGEMM_STATUS_NOT_SUPPORTED);
    CHECK_THAT(f32.reason, Catch::Contains("16-bit"));
    // Clusters of 2 along N need an even number of column tiles: N = 768 has 3 of 256.
    const Selection odd_tiles = select_named_kernel(with_n(p, 768), h100, "sm90_grouped_128x256_c2");
    CHECK(odd_tiles.status == MOEGEMM_STATUS_NOT_SUPPORTED);
    CHECK_THAT(odd_tiles.reason, Catch::Contains("column tiles"));
    CHECK(select_named_kernel(with_n(p, 768), h100, "sm90_grouped_128x128_c2").status == OK);
    // 16-bit inputs: 64 x 128 tiles, single or paired.
    CHECK(select_named_kernel(p, h100, "sm90_grouped_64x128").kernel == ShortNarrow);
    CHECK(select_named_kernel(p, h100, "sm90_grouped_64x128_c2").status == OK);
    CHECK(select_named_kernel(p, h100, "sm90_grouped_64x128_swap_ab").kernel ==
          KernelId::NativeBm64Bn128Swap);
    CHECK(select_named_kernel(kn(p), h100, "sm90_grouped_64x128_swap_ab").status == OK);
    CHECK(select_named_kernel(p, h100, "sm90_grouped_64x256_swap_ab").kernel ==
          KernelId::NativeBm64Bn256Swap);
    CHECK(select_named_kernel(kn(p), h100, "sm90_grouped_64x256_swap_ab").status == OK);
    // E4M3: every native variant can be forced, 64-row tiles too; [E, K, N] weights cannot.
    const ProblemSummary e4m3 = fp8(p, MOEGEMM_SCALE_BLOCK);
    CHECK(select_named_kernel(e4m3, h100, "sm90_grouped_128x256_tma_store_c2").status == OK);
    CHECK(select_named_kernel(e4m3, h100, "sm90_grouped_128x128").status == OK);
    CHECK(select_named_kernel(e4m3, h100, "sm90_grouped_64x256_c2").status == OK);
    CHECK(select_named_kernel(e4m3, h100, "sm90_grouped_64x128").status == OK);
    // ... swap-AB too, except with BLOCK scales.
    for (const auto& [name, id] : {std::pair{"sm90_grouped_64x128_swap_ab", KernelId::NativeBm64Bn128Swap},
                                   std::pair{"sm90_grouped_64x256_swap_ab", KernelId::NativeBm64Bn256Swap}}) {
        INFO(name);
        const Selection fp8_swap = select_named_kernel(e4m3, h100, name);
        CHECK(fp8_swap.status == MOEGEMM_STATUS_NOT_SUPPORTED);
        CHECK_THAT(fp8_swap.reason, Catch::Contains("BLOCK"));
        for (moegemm_scale_mode_t mode :
             {MOEGEMM_SCALE_PER_TENSOR, MOEGEMM_SCALE_PER_EXPERT, MOEGEMM_SCALE_ROWWISE})
            CHECK(select_named_kernel(fp8(p, mode), h100, name).kernel == id);
    }
    const Selection fp8_kn = select_named_kernel(kn(e4m3), h100, "sm90_grouped_64x256_c2");
    CHECK(fp8_kn.status == MOEGEMM_STATUS_NOT_SUPPORTED);
    CHECK_THAT(fp8_kn.reason, Catch::Contains("[E, N, K]"));
    const Selection other_backend =
        select_named_kernel(summary(V, SizesSource::Host, CUBLASLT), h100, "sm90_grouped_128x256");
    CHECK(other_backend.status == MOEGEMM_STATUS_INVALID_VALUE);
    CHECK_THAT(other_backend.reason, Catch::Contains("CUBLASLT"));
}

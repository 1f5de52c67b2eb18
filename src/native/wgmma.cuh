// wgmma.mma_async wrappers, m64nNk16 (16-bit inputs, tokens as A or, swapped, as B) and
// m64nNk32 (E4M3) with both operands in shared memory (descriptors), fp32 accumulators. The
// operand lists are long and regular, so they are macros generated once by a short script;
// edit with care.
#pragma once

#include <cstdint>

#include "native/ptx.cuh"

namespace moegemm::native {

// The 8 accumulator registers of m64n16: asm text and operand list.
#define MOEGEMM_WGMMA_N16_REGS "{%0, %1, %2, %3, %4, %5, %6, %7}"
#define MOEGEMM_WGMMA_N16_OPERANDS \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])

// The 16 accumulator registers of m64n32: asm text and operand list.
#define MOEGEMM_WGMMA_N32_REGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define MOEGEMM_WGMMA_N32_OPERANDS \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])

// The 32 accumulator registers of m64n64: asm text and operand list.
#define MOEGEMM_WGMMA_N64_REGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define MOEGEMM_WGMMA_N64_OPERANDS \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

// The 64 accumulator registers of m64n128: asm text and operand list.
#define MOEGEMM_WGMMA_N128_REGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define MOEGEMM_WGMMA_N128_OPERANDS \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// The 128 accumulator registers of m64n256: asm text and operand list.
#define MOEGEMM_WGMMA_N256_REGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define MOEGEMM_WGMMA_N256_OPERANDS \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// wgmma with predicate p = (accumulate != 0): p false means d = A * B (fresh accumulators).
// ITA, ITB: the operand numbers of the transpose immediates ("n" constraints): 0 for a K-major
// operand, 1 for an M-major A or an N-major B.
#define MOEGEMM_WGMMA_ASM(SHAPE, TYPE, REGS, IA, IB, IP, ITA, ITB)                        \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %" #IP ", 0;\n"                                    \
    "wgmma.mma_async.sync.aligned." SHAPE ".f32." TYPE "." TYPE " " REGS ", %" #IA ", %" #IB \
    ", p, 1, 1, %" #ITA ", %" #ITB ";\n}\n"

// One m64nNk16 wgmma on the accumulators `d` of the enclosing function (descriptors `desc_a`,
// `desc_b`, predicate `accumulate`, transposes TransA and TransB); IA, IB, IP, ITA, ITB are the
// operand numbers after the N/2 accumulator registers.
#define MOEGEMM_WGMMA_CALL(N, TYPE, IA, IB, IP, ITA, ITB)                                     \
    asm volatile(MOEGEMM_WGMMA_ASM("m64n" #N "k16", TYPE, MOEGEMM_WGMMA_N##N##_REGS, IA, IB, IP, \
                                   ITA, ITB)                                                  \
                 : MOEGEMM_WGMMA_N##N##_OPERANDS                                              \
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TransA), "n"(TransB))

/// d (+)= A (64 x 16, descriptor) * B (16 x N, descriptor) for one warpgroup, 16-bit inputs
/// (F16: fp16, otherwise bf16). A is K-major, or M-major when TransA is 1; B is K-major, or
/// N-major when TransB is 1. The m64nN fragment takes the first N / 2 registers of d.
template <int N, bool F16, int TransA, int TransB>
struct Wgmma16;

// Each input type needs its own asm text: a type name cannot be an operand.
#define MOEGEMM_WGMMA16_SPECIALIZATION(N, IA, IB, IP, ITA, ITB)                              \
    template <bool F16, int TransA, int TransB>                                               \
    struct Wgmma16<N, F16, TransA, TransB> {                                                  \
        template <int Count>                                                                  \
        static __device__ __forceinline__ void mma(float (&d)[Count], uint64_t desc_a,       \
                                                   uint64_t desc_b, int accumulate) {         \
            static_assert(Count >= N / 2, "room for the m64nN fragment");                    \
            if constexpr (F16) MOEGEMM_WGMMA_CALL(N, "f16", IA, IB, IP, ITA, ITB);            \
            else MOEGEMM_WGMMA_CALL(N, "bf16", IA, IB, IP, ITA, ITB);                         \
        }                                                                                     \
    };

MOEGEMM_WGMMA16_SPECIALIZATION(16, 8, 9, 10, 11, 12)
MOEGEMM_WGMMA16_SPECIALIZATION(32, 16, 17, 18, 19, 20)
MOEGEMM_WGMMA16_SPECIALIZATION(64, 32, 33, 34, 35, 36)
MOEGEMM_WGMMA16_SPECIALIZATION(128, 64, 65, 66, 67, 68)
MOEGEMM_WGMMA16_SPECIALIZATION(256, 128, 129, 130, 131, 132)
#undef MOEGEMM_WGMMA16_SPECIALIZATION

/// The tokens as A (64 rows, K-major) and the weights as B (N columns, K-major, or N-major
/// when NMajorB: [E, K, N]).
template <int N, bool F16, bool NMajorB>
using Wgmma = Wgmma16<N, F16, 0, NMajorB ? 1 : 0>;

/// Swap-AB (decode): the weights as A (64 weight columns of the output: K-major for [E, N, K]
/// weights, M-major when MMajorW, [E, K, N]) and N tokens as B (the activation rows,
/// K-major); the fragment is the output transposed, weight column x token.
template <int N, bool F16, bool MMajorW>
using WgmmaSwapped = Wgmma16<N, F16, MMajorW ? 1 : 0, 0>;

// One m64nNk32 E4M3 wgmma on the accumulators `d` (both operands K-major: fp8 wgmma has no
// transposed operands); IA, IB, IP as for MOEGEMM_WGMMA_CALL.
#define MOEGEMM_WGMMA_E4M3_SPECIALIZATION(N, IA, IB, IP)                                      \
    template <>                                                                               \
    struct WgmmaE4m3<N> {                                                                     \
        template <int Count>                                                                  \
        static __device__ __forceinline__ void mma(float (&d)[Count], uint64_t desc_a,       \
                                                   uint64_t desc_b, int accumulate) {         \
            static_assert(Count >= N / 2, "room for the m64nN fragment");                    \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #IP ", 0;\n"                    \
                         "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 "          \
                         MOEGEMM_WGMMA_N##N##_REGS ", %" #IA ", %" #IB ", p, 1, 1;\n}\n"      \
                         : MOEGEMM_WGMMA_N##N##_OPERANDS                                      \
                         : "l"(desc_a), "l"(desc_b), "r"(accumulate));                        \
        }                                                                                     \
    };

/// d (+)= A (64 x 32 E4M3, descriptor) * B (32 x N E4M3, descriptor), both K-major; the first
/// N / 2 registers of d take the m64nN fragment. N = 128: each promotion temporary of the
/// unswapped kernels is 128 columns (64 registers), and wider consumer tiles run as 128-column
/// halves; N = 64 for the 64-column consumers of 64 x 128 tiles; 16, 32 and 64 tokens for
/// swap-AB (WgmmaE4m3Swapped).
template <int N>
struct WgmmaE4m3;

MOEGEMM_WGMMA_E4M3_SPECIALIZATION(16, 8, 9, 10)
MOEGEMM_WGMMA_E4M3_SPECIALIZATION(32, 16, 17, 18)
MOEGEMM_WGMMA_E4M3_SPECIALIZATION(64, 32, 33, 34)
MOEGEMM_WGMMA_E4M3_SPECIALIZATION(128, 64, 65, 66)
#undef MOEGEMM_WGMMA_E4M3_SPECIALIZATION

/// Swap-AB with E4M3 inputs: the weights as A (64 x 32) and N tokens as B, as WgmmaSwapped;
/// the same instruction as the unswapped one, its operands named the other way round.
template <int N>
using WgmmaE4m3Swapped = WgmmaE4m3<N>;

/// Swap-AB: the fragment of a consumer's weight block `w` (64 weight columns) in `d`: the 32
/// registers from d[32 w], room for the most tokens a tile multiplies (64).
template <int Count>
__device__ __forceinline__ float (&weight_block(float (&d)[Count], int w))[32] {
    return *reinterpret_cast<float(*)[32]>(&d[32 * w]);
}

/// Swap-AB, one k-step over a consumer's `Blocks` weight blocks on the same tokens (`Mma`:
/// WgmmaSwapped or WgmmaE4m3Swapped): block w's weights start 64 rows of 128 bytes (8 KB) after
/// block w - 1's in the stage, its fragment is weight_block(d, w).
template <typename Mma, int Blocks, int Count>
__device__ __forceinline__ void mma_weight_blocks(float (&d)[Count], uint64_t desc_weights,
                                                  uint64_t desc_tokens, int accumulate) {
    static_assert(Count >= 32 * Blocks, "a fragment of 32 registers per weight block");
#pragma unroll
    for (int w = 0; w < Blocks; ++w)
        Mma::mma(weight_block(d, w), ptx::advance_descriptor(desc_weights, w * 64u * 128u),
                 desc_tokens, accumulate);
}

}  // namespace moegemm::native

// The table of kernel variants (native sm_90a tiles and the cuBLASLt baseline) that the
// heuristic ranks and force_kernel names.
#include "registry.hpp"

#include <iterator>

#include "backends/cublaslt.hpp"
#include "backends/native.hpp"
#include "error.hpp"

namespace moegemm {

namespace {

// The heuristic ranks the variants that can implement a problem; registration order breaks
// ties.
#define MOEGEMM_NATIVE_VARIANT_SWAP(ID, NAME, BLOCK_M, BLOCK_N, STAGED, CLUSTER_N, SWAP_AB)    \
    {KernelId::ID, NAME, MOEGEMM_BACKEND_NATIVE, BLOCK_M, BLOCK_N, STAGED, CLUSTER_N, SWAP_AB, \
     native::can_implement_variant<BLOCK_M, BLOCK_N, STAGED, CLUSTER_N, SWAP_AB>,             \
     native::workspace_bytes,                                                                  \
     native::create_variant<BLOCK_M, BLOCK_N, STAGED, CLUSTER_N, SWAP_AB>}
#define MOEGEMM_NATIVE_VARIANT(ID, NAME, BLOCK_M, BLOCK_N, STAGED, CLUSTER_N) \
    MOEGEMM_NATIVE_VARIANT_SWAP(ID, NAME, BLOCK_M, BLOCK_N, STAGED, CLUSTER_N, false)

const KernelVariant kVariants[] = {
    MOEGEMM_NATIVE_VARIANT(NativeBn256TmaStoreC2, "sm90_grouped_128x256_tma_store_c2", 128, 256, true, 2),
    MOEGEMM_NATIVE_VARIANT(NativeBn256TmaStore, "sm90_grouped_128x256_tma_store", 128, 256, true, 1),
    MOEGEMM_NATIVE_VARIANT(NativeBn256C2, "sm90_grouped_128x256_c2", 128, 256, false, 2),
    MOEGEMM_NATIVE_VARIANT(NativeBn256, "sm90_grouped_128x256", 128, 256, false, 1),
    MOEGEMM_NATIVE_VARIANT(NativeBn128TmaStoreC2, "sm90_grouped_128x128_tma_store_c2", 128, 128, true, 2),
    MOEGEMM_NATIVE_VARIANT(NativeBn128TmaStore, "sm90_grouped_128x128_tma_store", 128, 128, true, 1),
    MOEGEMM_NATIVE_VARIANT(NativeBn128C2, "sm90_grouped_128x128_c2", 128, 128, false, 2),
    MOEGEMM_NATIVE_VARIANT(NativeBn128, "sm90_grouped_128x128", 128, 128, false, 1),
    MOEGEMM_NATIVE_VARIANT(NativeBm64Bn256C2, "sm90_grouped_64x256_c2", 64, 256, false, 2),
    MOEGEMM_NATIVE_VARIANT(NativeBm64Bn256, "sm90_grouped_64x256", 64, 256, false, 1),
    MOEGEMM_NATIVE_VARIANT(NativeBm64Bn128C2, "sm90_grouped_64x128_c2", 64, 128, false, 2),
    MOEGEMM_NATIVE_VARIANT(NativeBm64Bn128, "sm90_grouped_64x128", 64, 128, false, 1),
    MOEGEMM_NATIVE_VARIANT_SWAP(NativeBm64Bn128Swap, "sm90_grouped_64x128_swap_ab", 64, 128, false,
                                1, true),
    MOEGEMM_NATIVE_VARIANT_SWAP(NativeBm64Bn256Swap, "sm90_grouped_64x256_swap_ab", 64, 256, false,
                                1, true),
    {KernelId::CublasLtExpertLoop, "cublaslt_expert_loop", MOEGEMM_BACKEND_CUBLASLT, 0, 0, false, 1,
     false, cublaslt::can_implement_expert_loop, cublaslt::workspace_bytes,
     cublaslt::create_expert_loop},
    {KernelId::CublasLtStridedBatched, "cublaslt_strided_batched", MOEGEMM_BACKEND_CUBLASLT, 0, 0,
     false, 1, false, cublaslt::can_implement_strided_batched, cublaslt::workspace_bytes,
     cublaslt::create_strided_batched},
};
#undef MOEGEMM_NATIVE_VARIANT
#undef MOEGEMM_NATIVE_VARIANT_SWAP

}  // namespace

const KernelVariant* registry_begin() noexcept { return std::begin(kVariants); }
const KernelVariant* registry_end() noexcept { return std::end(kVariants); }

const KernelVariant& variant(KernelId id) {
    for (const KernelVariant& v : kVariants) {
        if (v.id == id) return v;
    }
    fail(MOEGEMM_STATUS_INTERNAL_ERROR, "kernel id {} is not registered", static_cast<int>(id));
}

}  // namespace moegemm

#include "registry.hpp"

#include <iterator>

#include "backends/cublaslt.hpp"
#include "backends/native.hpp"
#include "error.hpp"

namespace moegemm {

namespace {

// The heuristic ranks the variants that can implement a problem; registration order breaks
// ties.
const KernelVariant kVariants[] = {
    {KernelId::NativeBn256Staged, "sm90_grouped_128x256_tma_store", MOEGEMM_BACKEND_NATIVE, 256,
     true, native::can_implement_staged, native::workspace_bytes, native::create_bn256_staged},
    {KernelId::NativeBn256, "sm90_grouped_128x256", MOEGEMM_BACKEND_NATIVE, 256, false,
     native::can_implement, native::workspace_bytes, native::create_bn256},
    {KernelId::NativeBn128Staged, "sm90_grouped_128x128_tma_store", MOEGEMM_BACKEND_NATIVE, 128,
     true, native::can_implement_staged, native::workspace_bytes, native::create_bn128_staged},
    {KernelId::NativeBn128, "sm90_grouped_128x128", MOEGEMM_BACKEND_NATIVE, 128, false,
     native::can_implement, native::workspace_bytes, native::create_bn128},
    {KernelId::CublasLtExpertLoop, "cublaslt_expert_loop", MOEGEMM_BACKEND_CUBLASLT, 0, false,
     cublaslt::can_implement_expert_loop, cublaslt::workspace_bytes,
     cublaslt::create_expert_loop},
    {KernelId::CublasLtStridedBatched, "cublaslt_strided_batched", MOEGEMM_BACKEND_CUBLASLT, 0,
     false, cublaslt::can_implement_strided_batched, cublaslt::workspace_bytes,
     cublaslt::create_strided_batched},
};

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

#include "registry.hpp"

#include <iterator>

#include "backends/cublaslt.hpp"
#include "error.hpp"

namespace moegemm {

namespace {

// Order matters: the heuristic takes the first variant that can implement the problem.
// Native sm_90a variants will come first once they exist.
const KernelVariant kVariants[] = {
    {KernelId::CublasLtExpertLoop, "cublaslt_expert_loop", MOEGEMM_BACKEND_CUBLASLT,
     cublaslt::can_implement_expert_loop, cublaslt::workspace_bytes,
     cublaslt::create_expert_loop},
    {KernelId::CublasLtStridedBatched, "cublaslt_strided_batched", MOEGEMM_BACKEND_CUBLASLT,
     cublaslt::can_implement_strided_batched, cublaslt::workspace_bytes,
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

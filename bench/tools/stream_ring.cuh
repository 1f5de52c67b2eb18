// The shared-memory ring of the standalone stream tools (start_delay.cu, weight_order.cu): one
// thread copies into stages that complete on single-arrival mbarriers, and waits for the oldest.
#pragma once

#include <cstdint>

__device__ __forceinline__ uint32_t shared_address(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// Initializes `count` single-arrival barriers (one thread).
__device__ __forceinline__ void init_barriers(uint64_t* barriers, int count) {
    for (int s = 0; s < count; ++s)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(&barriers[s])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

/// Waits until the barrier at shared address `bar` completes the phase of parity `parity`.
__device__ __forceinline__ void wait_parity(uint32_t bar, uint32_t parity) {
    uint32_t done = 0;
    while (!done) {
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
            "selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    }
}

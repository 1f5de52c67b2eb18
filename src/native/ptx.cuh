// Thin wrappers over the sm_90 PTX the native kernels use: shared-memory addresses, mbarriers,
// TMA tile loads, wgmma fences and descriptors, register reallocation.
#pragma once

#include <cstdint>
#if defined(MOEGEMM_DEBUG_HANG_CHECK)
#include <cstdio>  // the timed-out wait's report
#endif

namespace moegemm::native::ptx {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarriers --------------------------------------------------------------------------------

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(arrivals));
}

/// Makes barrier initialization visible to the async proxy (TMA) and to the other threads
/// once they pass the __syncthreads that follows.
__device__ __forceinline__ void fence_barrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n"
                 "fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

/// One arrival that also announces `bytes` of TMA transactions to come on this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
                 "r"(bytes)
                 : "memory");
}

#if defined(MOEGEMM_DEBUG_HANG_CHECK)
/// Debug builds: a wait that has not completed after this many nanoseconds is a hang (a phase
/// or transaction-count mismatch); the waiter reports where it stopped and traps, rather than
/// holding the GPU forever.
#ifndef MOEGEMM_DEBUG_HANG_NS
#define MOEGEMM_DEBUG_HANG_NS 10000000000ull
#endif
#endif

/// The GPU-wide nanosecond timer (comparable across SMs, unlike clock64).
__device__ __forceinline__ uint64_t global_timer_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/// Waits until the barrier's phase with parity `parity` has completed. `ClusterScope`: acquire
/// at cluster scope, for data that another CTA of the cluster stored (st.async); the default
/// acquires at CTA scope.
template <bool ClusterScope = false>
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
    uint32_t done = 0;
#if defined(MOEGEMM_DEBUG_HANG_CHECK)
    const uint64_t start = global_timer_ns();
    uint32_t tries = 0;
#endif
    do {
        if constexpr (ClusterScope) {
            asm volatile(
                "{\n.reg .pred p;\n"
                "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                "selp.u32 %0, 1, 0, p;\n}\n"
                : "=r"(done)
                : "r"(smem_addr(bar)), "r"(parity)
                : "memory");
        } else {
            asm volatile(
                "{\n.reg .pred p;\n"
                "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                "selp.u32 %0, 1, 0, p;\n}\n"
                : "=r"(done)
                : "r"(smem_addr(bar)), "r"(parity)
                : "memory");
        }
#if defined(MOEGEMM_DEBUG_HANG_CHECK)
        if (!done && (++tries % 1024) == 0 && global_timer_ns() - start > MOEGEMM_DEBUG_HANG_NS) {
            printf("moegemm: mbarrier wait timed out: block %u thread %u barrier at shared 0x%x "
                   "parity %u\n",
                   blockIdx.x, threadIdx.x, smem_addr(bar), parity);
            __trap();
        }
#endif
    } while (!done);
}

// ---- TMA --------------------------------------------------------------------------------------

__device__ __forceinline__ void prefetch_tensor_map(const void* map) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// A tensor map (128 bytes) is made per launch from a template encoded at plan time: the warp
// copies the template into shared memory, one lane replaces the global address, and the warp
// copies it to global memory with a release of the tensor-map proxy. Each thread that then
// issues TMA with it acquires it first (tensor_map_acquire).

/// Replaces the global address of the tensor map at `map` (shared memory, 128-byte aligned).
__device__ __forceinline__ void tensor_map_replace_address(void* map, const void* address) {
    asm volatile(
        "tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%0], %1;" ::"r"(
            smem_addr(map)),
        "l"(reinterpret_cast<uint64_t>(address))
        : "memory");
}

/// Whole warp: copies the 128-byte tensor map at `src` (shared) to `dst` (global) and releases
/// it to the tensor-map proxy at GPU scope.
__device__ __forceinline__ void tensor_map_publish(void* dst, const void* src) {
    asm volatile(
        "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned "
        "[%0], [%1], 128;" ::"l"(reinterpret_cast<uint64_t>(dst)),
        "r"(smem_addr(src))
        : "memory");
}

/// Makes the tensor map at `map` (global), published by tensor_map_publish before a barrier
/// this thread passed, visible to this thread's TMA instructions.
__device__ __forceinline__ void tensor_map_acquire(const void* map) {
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(
                     reinterpret_cast<uint64_t>(map))
                 : "memory");
}

/// Loads the box at (inner, outer) of a 2-D tensor map into shared memory; completion is
/// counted in bytes on `bar`. Out-of-range elements are zero-filled.
__device__ __forceinline__ void tma_load_2d(void* dst, const void* map, uint64_t* bar,
                                            int32_t inner, int32_t outer) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4}], [%2];" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(inner), "r"(outer)
        : "memory");
}

/// An L2 policy that evicts what it covers first: for data read once (decode's weights), so
/// that it does not push out what is read again (the tokens, the workspace).
__device__ __forceinline__ uint64_t evict_first_policy() {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}

/// tma_load_2d with an L2 cache policy (evict_first_policy).
__device__ __forceinline__ void tma_load_2d(void* dst, const void* map, uint64_t* bar,
                                            int32_t inner, int32_t outer, uint64_t policy) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(inner), "r"(outer),
        "l"(policy)
        : "memory");
}

/// Stores a box of shared memory (laid out as the tensor map's swizzle says) to the 2-D tensor
/// at (inner, outer); elements past the tensor's extent are not written. Completion is
/// tracked per thread with bulk groups.
__device__ __forceinline__ void tma_store_2d(const void* map, const void* src, int32_t inner,
                                             int32_t outer) {
    asm volatile(
        "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
            reinterpret_cast<uint64_t>(map)),
        "r"(smem_addr(src)), "r"(inner), "r"(outer)
        : "memory");
}
__device__ __forceinline__ void bulk_commit() {
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
/// Waits until at most `Pending` bulk groups still read their shared-memory source.
template <int Pending>
__device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(Pending) : "memory");
}
/// Waits until at most `Pending` bulk groups are still incomplete (writes visible).
template <int Pending>
__device__ __forceinline__ void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;" ::"n"(Pending) : "memory");
}
/// 16 bytes global -> shared, cached in L2 only (coherent with other SMs' writes), async.
__device__ __forceinline__ void cp_async_16_cg(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src)
                 : "memory");
}
/// Waits until every cp.async this thread issued has landed.
__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.commit_group;\n\tcp.async.wait_group 0;" ::: "memory");
}
/// Orders this thread's ordinary shared-memory writes before later async-proxy (TMA) reads.
__device__ __forceinline__ void fence_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
/// Barrier over `threads` threads (a multiple of 32) on hardware barrier `id` (1..15). Aligned
/// (bar.sync): every participating thread must execute this same instruction.
__device__ __forceinline__ void named_barrier(uint32_t id, uint32_t threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
/// Barrier over `threads` threads on barrier `id` that also returns whether any of them passed
/// `value` true (barrier.red.or, unaligned).
__device__ __forceinline__ bool named_barrier_or(uint32_t id, uint32_t threads, bool value) {
    uint32_t result;
    asm volatile(
        "{\n .reg .pred in, out;\n setp.ne.u32 in, %1, 0;\n"
        " barrier.cta.red.or.pred out, %2, %3, in;\n selp.u32 %0, 1, 0, out;\n}"
        : "=r"(result)
        : "r"(static_cast<uint32_t>(value)), "r"(id), "r"(threads)
        : "memory");
    return result != 0;
}
/// named_barrier for threads that may reach the barrier at different instructions (e.g. the
/// two consumer warpgroups after different epilogue paths): barrier.sync without .aligned.
__device__ __forceinline__ void named_barrier_unaligned(uint32_t id, uint32_t threads) {
    asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

/// tma_load_2d for a 3-D tensor map (innermost coordinate first).
__device__ __forceinline__ void tma_load_3d(void* dst, const void* map, uint64_t* bar,
                                            int32_t c0, int32_t c1, int32_t c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
}

/// tma_load_3d with an L2 cache policy (evict_first_policy).
__device__ __forceinline__ void tma_load_3d(void* dst, const void* map, uint64_t* bar,
                                            int32_t c0, int32_t c1, int32_t c2, uint64_t policy) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1, {%3, %4, %5}], [%2], %6;" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2),
        "l"(policy)
        : "memory");
}

/// tma_load_2d for a 4-D tensor map (innermost coordinate first).
__device__ __forceinline__ void tma_load_4d(void* dst, const void* map, uint64_t* bar,
                                            int32_t c0, int32_t c1, int32_t c2, int32_t c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2),
        "r"(c3)
        : "memory");
}

/// tma_load_2d for a 5-D tensor map (innermost coordinate first), with or without an L2
/// policy (evict_first_policy).
__device__ __forceinline__ void tma_load_5d(void* dst, const void* map, uint64_t* bar,
                                            int32_t c0, int32_t c1, int32_t c2, int32_t c3,
                                            int32_t c4) {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2),
        "r"(c3), "r"(c4)
        : "memory");
}
__device__ __forceinline__ void tma_load_5d(void* dst, const void* map, uint64_t* bar,
                                            int32_t c0, int32_t c1, int32_t c2, int32_t c3,
                                            int32_t c4, uint64_t policy) {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1, {%3, %4, %5, %6, %7}], [%2], %8;" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2),
        "r"(c3), "r"(c4), "l"(policy)
        : "memory");
}

// ---- programmatic dependent launch ------------------------------------------------------------

/// Waits until the grids this one depends on (the previous kernel of the stream, when this one
/// was launched with programmatic stream serialization) have completed and their memory is
/// visible; returns at once otherwise. Nothing an earlier kernel wrote may be read, and nothing
/// it may still read may be written, before this.
__device__ __forceinline__ void wait_for_prior_grids() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

/// Lets the next kernel of the stream (when launched with programmatic stream serialization)
/// start its CTAs once every CTA of this grid has issued this or exited; that kernel still
/// waits for this grid's completion before it touches memory (wait_for_prior_grids).
__device__ __forceinline__ void allow_dependent_grids() {
    asm volatile("griddepcontrol.launch_dependents;" :::);
}

// ---- clusters -----------------------------------------------------------------------------

__device__ __forceinline__ uint32_t cluster_rank() {
    uint32_t rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    return rank;
}

/// Every thread of every CTA of the cluster arrives, then waits for all the others.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

/// cluster_sync in two halves, for threads that have work between them: every thread arrives
/// (relaxed: what must be visible to the peer before it, the barrier initialization, is
/// ordered by fence_barrier_init), and waits before it first touches the peer. Not .aligned:
/// the threads of a warp may wait at different points.
__device__ __forceinline__ void cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}

/// One arrival on the mbarrier at the same shared-memory offset in CTA `rank` of the cluster.
/// CTA-scope release (the default): the arrival only says "this stage was read", and the
/// reads were tensor-core reads already completed (wgmma.wait_group); a cluster-scope release
/// would fence every earlier memory access of the thread for nothing.
__device__ __forceinline__ void mbarrier_arrive_cluster(uint64_t* bar, uint32_t rank) {
    asm volatile(
        "{\n.reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}" ::"r"(
            smem_addr(bar)),
        "r"(rank)
        : "memory");
}

/// mbarrier_arrive_cluster with a cluster-scope release: the CTA that waits on the barrier
/// then overwrites shared memory this thread has read (a slot of the tile hand-out's ring).
__device__ __forceinline__ void mbarrier_arrive_cluster_release(uint64_t* bar, uint32_t rank) {
    asm volatile(
        "{\n.reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}" ::"r"(
            smem_addr(bar)),
        "r"(rank)
        : "memory");
}

/// Stores `value` at `slot`'s shared-memory offset in CTA `rank` of the cluster and completes
/// 4 bytes of transactions on the barrier at `bar`'s offset there (st.async): the receiver
/// announces the 4 bytes with mbarrier_arrive_expect_tx and waits (cluster scope).
__device__ __forceinline__ void store_to_peer(int32_t* slot, int32_t value, uint64_t* bar,
                                              uint32_t rank) {
    asm volatile(
        "{\n.reg .b32 remote_slot, remote_bar;\n"
        "mapa.shared::cluster.u32 remote_slot, %0, %3;\n"
        "mapa.shared::cluster.u32 remote_bar, %1, %3;\n"
        "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [remote_slot], %2, "
        "[remote_bar];\n}" ::"r"(smem_addr(slot)),
        "r"(smem_addr(bar)), "r"(value), "r"(rank)
        : "memory");
}

/// This launch's grid identifier (%gridid): the same in every CTA of a grid, distinct for
/// every launch in the context.
__device__ __forceinline__ uint64_t grid_id() {
    uint64_t id;
    asm volatile("mov.u64 %0, %%gridid;" : "=l"(id));
    return id;
}

/// tma_load_2d into the same shared-memory offset of every CTA in `cta_mask`, signalling the
/// barrier at the same offset in each of them.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const void* map, uint64_t* bar,
                                                      int32_t inner, int32_t outer,
                                                      uint16_t cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        ".multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(inner), "r"(outer),
        "h"(cta_mask)
        : "memory");
}

// ---- wgmma ------------------------------------------------------------------------------------

__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int Pending>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(Pending) : "memory");
}

/// Descriptor of a K-major operand tile in shared memory written by TMA with 128-byte swizzle:
/// rows of 64 16-bit elements (128 bytes), 8-row swizzle atoms 1024 bytes apart. Advancing
/// `p` by 32 bytes moves 16 elements along K inside the atom.
__device__ __forceinline__ uint64_t kmajor_sw128_descriptor(const void* p) {
    const uint64_t addr = smem_addr(p);
    return ((addr & 0x3FFFFu) >> 4)          // start address
           | (uint64_t{16 >> 4} << 16)       // leading byte offset (unused when swizzled)
           | (uint64_t{1024 >> 4} << 32)     // stride byte offset: one 8-row atom
           | (uint64_t{1} << 62);            // 128-byte swizzle
}

/// `value`, the same in every lane of the warp, as lane 0 holds it: a value the compiler then
/// knows to be warp-uniform (uniform registers, no per-lane copies of what derives from it).
__device__ __forceinline__ int warp_uniform(int value) { return __shfl_sync(0xffffffffu, value, 0); }

/// `desc` (either layout) moved `bytes` further into shared memory, a multiple of 16: one
/// 32-bit add instead of a descriptor built again. The start address is the low 14-bit field
/// and every operand lies below 256 KB, so the add never carries out of it (and the high word,
/// left alone, needs no carry either).
__device__ __forceinline__ uint64_t advance_descriptor(uint64_t desc, uint32_t bytes) {
    const uint32_t low = static_cast<uint32_t>(desc) + (bytes >> 4);
    return (desc & 0xFFFFFFFF00000000ull) | low;
}

/// Descriptor of an N-major operand (B of [K, N] rows) written by TMA with 128-byte swizzle in
/// boxes of 64 K-rows x 64 N-values (128 bytes): 8 K-rows form a 1024-byte swizzle atom (the
/// stride byte offset), and the next 64 N-values sit one box further (the leading byte
/// offset). Advancing `p` by 16 K-rows (2048 bytes) moves one k16 step.
__device__ __forceinline__ uint64_t nmajor_sw128_descriptor(const void* p) {
    constexpr uint64_t kBoxBytes = 64 * 128;
    const uint64_t addr = smem_addr(p);
    return ((addr & 0x3FFFFu) >> 4)            // start address
           | (uint64_t{kBoxBytes >> 4} << 16)  // leading byte offset: next 64 N-values
           | (uint64_t{1024 >> 4} << 32)       // stride byte offset: next 8 K-rows
           | (uint64_t{1} << 62);              // 128-byte swizzle
}

// ---- registers --------------------------------------------------------------------------------

template <uint32_t Count>
__device__ __forceinline__ void release_registers() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(Count));
}
template <uint32_t Count>
__device__ __forceinline__ void acquire_registers() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(Count));
}

}  // namespace moegemm::native::ptx

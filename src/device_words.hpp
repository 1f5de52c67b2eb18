// 32-bit words of device memory for plans' status words, from slabs that are never freed.
// Returning a word is a host-side list operation: destroying a plan then makes no CUDA call
// that synchronizes the device (cudaFree does), which would stall the caller's streams and
// invalidate a stream capture under way in another thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace moegemm {

/// Words handed out from slabs of `kSlabWords`, allocated by `allocate_slab` (cudaMalloc on
/// the pool's device; a host allocator in the CPU tests) and never released; a released word
/// is handed out again. Thread safe.
class DeviceWordPool {
public:
    static constexpr std::size_t kSlabWords = 1024;

    /// `allocate_slab(bytes)` returns memory of at least `bytes`, or throws.
    explicit DeviceWordPool(std::function<void*(std::size_t)> allocate_slab);
    DeviceWordPool(const DeviceWordPool&) = delete;
    DeviceWordPool& operator=(const DeviceWordPool&) = delete;

    /// A word no one else holds (its contents are whatever its last holder left).
    uint32_t* acquire();
    /// Hands `word` back; it must come from acquire() of this pool. Allocates nothing (acquire
    /// reserved room for every word); throws only where the mutex cannot be locked.
    void release(uint32_t* word);

    std::size_t slabs() const;       ///< slabs allocated so far
    std::size_t free_words() const;  ///< words released or never handed out

private:
    std::function<void*(std::size_t)> allocate_slab_;
    mutable std::mutex mutex_;
    std::vector<uint32_t*> free_;
    std::size_t slabs_ = 0;
};

/// Returns a word to the pool of the device it came from.
struct DeviceWordRelease {
    int device = 0;
    void operator()(uint32_t* word) const noexcept;
};
using DeviceWord = std::unique_ptr<uint32_t, DeviceWordRelease>;

/// A word of `device`'s pool (created on first use, never destroyed: plans may outlive
/// statics), set to 0 before it is returned (on a stream of its own, waited for: the zero is
/// in place before any later work on any of the caller's streams).
DeviceWord acquire_device_word(int device);

}  // namespace moegemm

#include "device_words.hpp"

#include <cuda_runtime_api.h>

#include "device_caps.hpp"
#include "error.hpp"

namespace moegemm {

DeviceWordPool::DeviceWordPool(std::function<void*(std::size_t)> allocate_slab)
    : allocate_slab_(std::move(allocate_slab)) {}

uint32_t* DeviceWordPool::acquire() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.empty()) {
        // Room for every word of every slab, so that release never allocates.
        free_.reserve((slabs_ + 1) * kSlabWords);
        auto* slab = static_cast<uint32_t*>(allocate_slab_(kSlabWords * sizeof(uint32_t)));
        // Handed out from the slab's start: the last word pushed is the first popped.
        for (std::size_t i = kSlabWords; i-- > 0;) free_.push_back(slab + i);
        ++slabs_;
    }
    uint32_t* word = free_.back();
    free_.pop_back();
    return word;
}

void DeviceWordPool::release(uint32_t* word) {
    if (word == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(word);  // within the capacity acquire reserved: no allocation
}

std::size_t DeviceWordPool::slabs() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return slabs_;
}

std::size_t DeviceWordPool::free_words() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return free_.size();
}

namespace {

DeviceWordPool& pool_of(int device) {
    static auto* pools = new PerDevice<std::unique_ptr<DeviceWordPool>>();
    return *pools->get(device, [device] {
        return std::make_unique<DeviceWordPool>([device](std::size_t bytes) {
            ScopedDevice on(device);
            void* slab = nullptr;
            MOEGEMM_CUDA_CHECK(cudaMalloc(&slab, bytes));
            return slab;
        });
    });
}

// The stream that zeroes `device`'s words, made once (non-blocking: it waits for nothing of
// the caller's).
cudaStream_t zeroing_stream(int device) {
    static auto* streams = new PerDevice<cudaStream_t>();
    return streams->get(device, [device] {
        ScopedDevice on(device);
        cudaStream_t stream = nullptr;
        MOEGEMM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        return stream;
    });
}

}  // namespace

void DeviceWordRelease::operator()(uint32_t* word) const noexcept {
    try {
        pool_of(device).release(word);
    } catch (...) {
        // pool_of (a mutex, and a pool made at the device's first use, which every word's
        // acquire already made): a failure here leaks one word, never the plan's caller.
    }
}

DeviceWord acquire_device_word(int device) {
    DeviceWordPool& pool = pool_of(device);
    DeviceWord word(pool.acquire(), DeviceWordRelease{device});
    // Zeroed on a stream of its own and waited for: a word handed out again holds its last
    // plan's bits, and a memset on the legacy default stream would not be ordered before the
    // caller's non-blocking streams. Waiting for this stream alone stalls nothing else.
    const cudaStream_t stream = zeroing_stream(device);
    ScopedDevice on(device);
    MOEGEMM_CUDA_CHECK(cudaMemsetAsync(word.get(), 0, sizeof(uint32_t), stream));
    MOEGEMM_CUDA_CHECK(cudaStreamSynchronize(stream));
    return word;
}

}  // namespace moegemm

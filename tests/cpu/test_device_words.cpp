// The pool of device words (plans' status words) with a host allocator in place of cudaMalloc:
// distinct words, slabs allocated only when every word is held, released words handed out
// again, and no allocation on release (what lets a plan's destruction avoid cudaFree).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <set>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "device_words.hpp"

using moegemm::DeviceWordPool;

namespace {

// Slabs from the host heap, kept until the test ends; counts calls.
struct HostSlabs {
    std::vector<std::unique_ptr<uint32_t[]>> slabs;
    std::size_t bytes_asked = 0;
    void* allocate(std::size_t bytes) {
        bytes_asked = bytes;
        slabs.emplace_back(new uint32_t[bytes / sizeof(uint32_t)]);
        return slabs.back().get();
    }
};

}  // namespace

TEST_CASE("device words: distinct words from slabs, released words handed out again") {
    HostSlabs host;
    DeviceWordPool pool([&](std::size_t bytes) { return host.allocate(bytes); });
    CHECK(pool.slabs() == 0);
    constexpr std::size_t kSlab = DeviceWordPool::kSlabWords;

    std::vector<uint32_t*> held;
    std::set<uint32_t*> distinct;
    for (std::size_t i = 0; i < kSlab + 3; ++i) {
        held.push_back(pool.acquire());
        distinct.insert(held.back());
    }
    CHECK(distinct.size() == kSlab + 3);  // no word handed out twice
    CHECK(pool.slabs() == 2);              // the second only once the first was used up
    CHECK(host.bytes_asked == kSlab * sizeof(uint32_t));
    CHECK(pool.free_words() == kSlab - 3);
    // Words are aligned and within their slabs.
    for (uint32_t* w : held) {
        CHECK(reinterpret_cast<std::uintptr_t>(w) % alignof(uint32_t) == 0);
        const bool in_a_slab = std::any_of(host.slabs.begin(), host.slabs.end(), [&](auto& s) {
            return w >= s.get() && w < s.get() + kSlab;
        });
        CHECK(in_a_slab);
    }

    // Released words come back before any new slab.
    uint32_t* const returned = held[5];
    pool.release(returned);
    CHECK(pool.acquire() == returned);
    for (uint32_t* w : held) pool.release(w);
    CHECK(pool.free_words() == 2 * kSlab);
    for (std::size_t i = 0; i < 2 * kSlab; ++i) (void)pool.acquire();
    CHECK(pool.slabs() == 2);
    pool.release(nullptr);  // ignored
    CHECK(pool.free_words() == 0);
}

TEST_CASE("device words: a slab that cannot be allocated throws and changes nothing") {
    bool fail = true;
    HostSlabs host;
    DeviceWordPool pool([&](std::size_t bytes) -> void* {
        if (fail) throw std::bad_alloc();
        return host.allocate(bytes);
    });
    CHECK_THROWS_AS(pool.acquire(), std::bad_alloc);
    CHECK(pool.slabs() == 0);
    CHECK(pool.free_words() == 0);
    fail = false;
    CHECK(pool.acquire() != nullptr);
    CHECK(pool.slabs() == 1);
}

TEST_CASE("device words: threads acquiring and releasing at once never share a word") {
    HostSlabs host;
    DeviceWordPool pool([&](std::size_t bytes) { return host.allocate(bytes); });
    constexpr int kThreads = 4, kRounds = 2000;
    std::vector<std::vector<uint32_t*>> kept(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&pool, &kept, t] {
            for (int i = 0; i < kRounds; ++i) {
                uint32_t* w = pool.acquire();
                *w = static_cast<uint32_t>(t);  // written by its holder alone
                if (i % 2 == 0) {
                    kept[t].push_back(w);
                } else {
                    if (*w != static_cast<uint32_t>(t)) std::abort();
                    pool.release(w);
                }
            }
        });
    }
    for (std::thread& th : threads) th.join();
    std::set<uint32_t*> distinct;
    for (const auto& words : kept)
        for (uint32_t* w : words) distinct.insert(w);
    CHECK(distinct.size() == static_cast<std::size_t>(kThreads) * kRounds / 2);
}

// RecentlyChecked: a small lock-free set of the last few values found good (streams, buffers,
// workspaces), so that the per-call path skips work it already did for them.
#pragma once

#include <atomic>
#include <cstdint>

namespace moegemm {

/// The last few values (streams, buffers, workspaces) found good, so that execute skips the
/// runtime queries that check them, or the work that prepares them, when one comes again. A few
/// rather than one: callers rotate between buffers (double-buffered outputs) and streams, and
/// with one entry each rotation would pay the query (cudaPointerGetAttributes) on every
/// call. Lock-free; a lost update only costs a repeated check (so every use must be safe to
/// repeat).
template <typename T>
class RecentlyChecked {
public:
    /// Starts out holding T{} (a null pointer) in every entry.
    RecentlyChecked() noexcept {
        for (auto& entry : entries_) entry.store(T{}, std::memory_order_relaxed);
    }
    bool contains(T value) const noexcept {
        for (const auto& entry : entries_)
            if (entry.load(std::memory_order_relaxed) == value) return true;
        return false;
    }
    void add(T value) noexcept {
        const uint32_t slot = next_.fetch_add(1, std::memory_order_relaxed) % kEntries;
        entries_[slot].store(value, std::memory_order_relaxed);
    }

private:
    static constexpr uint32_t kEntries = 4;
    std::atomic<T> entries_[kEntries];
    std::atomic<uint32_t> next_{0};
};

}  // namespace moegemm

// RecentlyChecked (recently_checked.hpp): the few streams and buffers a plan found good, so
// that execute skips their runtime checks when they come again.
#include <cstdint>

#include <catch2/catch.hpp>

#include "recently_checked.hpp"

namespace {

const void* address(uintptr_t value) { return reinterpret_cast<const void*>(value); }

}  // namespace

TEST_CASE("RecentlyChecked holds null from the start and nothing else", "[cpu][plan]") {
    moegemm::RecentlyChecked<const void*> checked;
    CHECK(checked.contains(nullptr));
    CHECK_FALSE(checked.contains(address(0x1000)));
}

TEST_CASE("RecentlyChecked keeps the last four values and forgets the oldest", "[cpu][plan]") {
    moegemm::RecentlyChecked<const void*> checked;
    // Two buffers used in turn (double buffering) both stay known.
    checked.add(address(0x1000));
    checked.add(address(0x2000));
    CHECK(checked.contains(address(0x1000)));
    CHECK(checked.contains(address(0x2000)));
    checked.add(address(0x3000));
    checked.add(address(0x4000));
    for (uintptr_t a : {0x1000u, 0x2000u, 0x3000u, 0x4000u}) CHECK(checked.contains(address(a)));
    // A fifth replaces the oldest, and null is no longer held once every entry was written.
    checked.add(address(0x5000));
    CHECK_FALSE(checked.contains(address(0x1000)));
    CHECK(checked.contains(address(0x5000)));
    CHECK_FALSE(checked.contains(nullptr));
}

// Finding the global address in the driver's tensor maps (src/native/tensor_map.hpp), on
// made-up encodings: the plan completes its maps on the host only when one 8-byte word holds
// each probe address as it is and nothing else changes with it; anything else must say no.
#include <cstdint>
#include <cstring>

#include <catch2/catch.hpp>

#include "native/tensor_map.hpp"

using moegemm::native::find_address_word;
using moegemm::native::write_address;

namespace {

constexpr uint64_t kAddresses[3] = {uint64_t{1} << 20, 0x7f0123456780, 0x123456789a10};

// A map whose bytes are a fixed pattern, with `address` (shifted right by `shift`) in word
// `word`.
CUtensorMap encoding(int word, uint64_t address, int shift = 0) {
    CUtensorMap map;
    auto* bytes = reinterpret_cast<unsigned char*>(&map);
    for (int i = 0; i < 128; ++i) bytes[i] = static_cast<unsigned char>(i * 37 + 11);
    const uint64_t value = address >> shift;
    std::memcpy(bytes + 8 * word, &value, 8);
    return map;
}

}  // namespace

TEST_CASE("tensor-map address: found where the encodings hold it as it is", "[tensor_map]") {
    for (int word = 0; word < 16; ++word) {
        CUtensorMap at[3];
        for (int i = 0; i < 3; ++i) at[i] = encoding(word, kAddresses[i]);
        CHECK(find_address_word(at, kAddresses, 3) == word);
        // Writing another address there gives what encoding at it would.
        CUtensorMap patched = at[0];
        const uint64_t other = 0x5555aaaa5550;
        write_address(patched, word, reinterpret_cast<const void*>(other));
        const CUtensorMap want = encoding(word, other);
        CHECK(std::memcmp(&patched, &want, sizeof want) == 0);
    }
}

TEST_CASE("tensor-map address: anything but one verbatim word is refused", "[tensor_map]") {
    CUtensorMap at[3];
    // Kept shifted (a bit field): not the address as it is.
    for (int i = 0; i < 3; ++i) at[i] = encoding(2, kAddresses[i], 4);
    CHECK(find_address_word(at, kAddresses, 3) == -1);
    // Another byte changes with the address (a field derived from it).
    for (int i = 0; i < 3; ++i) {
        at[i] = encoding(0, kAddresses[i]);
        reinterpret_cast<unsigned char*>(&at[i])[100] = static_cast<unsigned char>(i);
    }
    CHECK(find_address_word(at, kAddresses, 3) == -1);
    // Two words hold it (which one would the hardware read?).
    for (int i = 0; i < 3; ++i) {
        at[i] = encoding(0, kAddresses[i]);
        std::memcpy(reinterpret_cast<unsigned char*>(&at[i]) + 8 * 5, &kAddresses[i], 8);
    }
    CHECK(find_address_word(at, kAddresses, 3) == -1);
    // The address in the word for two probes but not the third.
    for (int i = 0; i < 3; ++i) at[i] = encoding(1, kAddresses[i]);
    at[2] = encoding(1, kAddresses[2] + 16);
    CHECK(find_address_word(at, kAddresses, 3) == -1);
    // Nothing changes (the encoder ignored the address), and too few probes.
    for (int i = 0; i < 3; ++i) at[i] = encoding(1, kAddresses[0]);
    CHECK(find_address_word(at, kAddresses, 3) == -1);
    CHECK(find_address_word(at, kAddresses, 1) == -1);
}

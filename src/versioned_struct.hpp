// Structs of the public header that carry their own size (struct_size first) so that they can
// grow at the end: how the library fills them for a caller of any version and reads what a
// caller of any version filled in.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "error.hpp"

namespace moegemm {

/// The largest struct_size any version of a public struct may have: bounds what an
/// uninitialized struct_size can make the library read or write.
constexpr std::size_t kMaxStructSize = 4096;

/// Zeroes the caller's `struct_size` bytes of `s` (the argument `name`) and records the size:
/// the defaults of every field of these structs are zero. `first_size`: the struct's size in
/// its first version.
template <typename Struct>
void init_versioned_struct(Struct* s, std::size_t struct_size, std::size_t first_size,
                           const char* name, const char* type) {
    require(s != nullptr, MOEGEMM_STATUS_INVALID_VALUE, "{} is NULL", name);
    require(struct_size >= first_size && struct_size <= kMaxStructSize,
            MOEGEMM_STATUS_INVALID_VALUE,
            "struct_size is {}: {} has {} bytes in its first version and this library's has "
            "{} (at most {} accepted)",
            struct_size, type, first_size, sizeof(Struct), kMaxStructSize);
    std::memset(static_cast<void*>(s), 0, struct_size);
    const std::size_t size = struct_size;
    std::memcpy(static_cast<void*>(s), &size, sizeof size);
}

/// A copy of the caller's struct as this version knows it: the fields an older caller's
/// smaller struct lacks are zero; a newer caller's fields past this version's must be zero
/// (NOT_SUPPORTED otherwise: the caller asks for something this library cannot do).
/// `name`: the argument; `init`: the function that fills the struct.
template <typename Struct>
Struct read_versioned_struct(const Struct& caller, std::size_t first_size, const char* name,
                             const char* init) {
    std::size_t size = 0;
    std::memcpy(&size, &caller, sizeof size);
    require(size >= first_size && size <= kMaxStructSize, MOEGEMM_STATUS_INVALID_VALUE,
            "{}->struct_size is {}, expected {} to {}: initialize the struct with {}", name,
            size, first_size, kMaxStructSize, init);
    const auto* bytes = reinterpret_cast<const unsigned char*>(&caller);
    for (std::size_t i = sizeof(Struct); i < size; ++i) {
        require(bytes[i] == 0, MOEGEMM_STATUS_NOT_SUPPORTED,
                "{}->struct_size is {} and sets fields beyond the {} bytes this version of "
                "libmoegemm ({}) knows",
                name, size, sizeof(Struct), MOEGEMM_VERSION);
    }
    Struct out;
    std::memset(static_cast<void*>(&out), 0, sizeof out);
    std::memcpy(static_cast<void*>(&out), &caller, std::min(size, sizeof(Struct)));
    return out;
}

}  // namespace moegemm

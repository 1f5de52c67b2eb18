// Helpers shared by the fuzz targets.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>

#include "documented_rules.hpp"
#include "moegemm/moegemm.h"

// An invariant of the library broke: report it and abort, so that libFuzzer saves the input.
#define FUZZ_CHECK(cond)                                                                     \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            std::fprintf(stderr, "FUZZ INVARIANT BROKEN at %s:%d: %s\n", __FILE__, __LINE__, \
                         #cond);                                                             \
            std::abort();                                                                    \
        }                                                                                    \
    } while (0)

inline bool defined_status(int s) {
    return s >= MOEGEMM_STATUS_SUCCESS && s <= MOEGEMM_STATUS_INTERNAL_ERROR;
}

// Checks the thread's last error after a call that returned `s`: a defined status, and a
// message whenever it failed.
inline void check_failure(int s) {
    FUZZ_CHECK(defined_status(s));
    if (s != MOEGEMM_STATUS_SUCCESS) {
        const char* msg = moegemm_get_last_error_message();
        FUZZ_CHECK(msg != nullptr && msg[0] != '\0');
    }
}

// The status `s` of a plan create against the header's rules on its problem: one of the
// broken rules' statuses (or INVALID_VALUE where the size rule is too close to call), else
// none of `never` (the statuses only a broken rule can cause) and, without a GPU, NO_DEVICE.
inline void check_create_status(int s, const fuzz_rules::Verdict& verdict,
                                std::initializer_list<int> never) {
    if (!verdict.broken.empty()) {
        FUZZ_CHECK(verdict.broken.count(s) == 1 ||
                   (verdict.ambiguous && s == MOEGEMM_STATUS_INVALID_VALUE));
        return;
    }
    if (verdict.ambiguous) return;
    for (const int status : never) FUZZ_CHECK(s != status);
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        (void)cudaGetLastError();
        FUZZ_CHECK(s == MOEGEMM_STATUS_NO_DEVICE);
    }
}

// The caller's buffer for a struct image: exactly as large as its struct_size claims when that
// is a size the library may read (so that any read past it is an ASan report), else the
// image's size; past the image zeros, or input bytes when `tail`. malloc'd (the caller frees
// it); `*size` gets its size.
template <typename Struct>
unsigned char* struct_buffer(const Struct& image, bool tail, FuzzedDataProvider& fdp,
                             std::size_t* size) {
    const std::size_t claimed = image.struct_size;
    const std::size_t alloc =
        claimed > sizeof image && claimed <= 4096 ? claimed : sizeof image;
    auto* buf = static_cast<unsigned char*>(std::malloc(alloc));
    FUZZ_CHECK(buf != nullptr);
    std::memcpy(buf, &image, sizeof image);
    if (alloc > sizeof image) {
        std::memset(buf + sizeof image, 0, alloc - sizeof image);
        if (tail) {
            std::vector<uint8_t> bytes = fdp.ConsumeBytes<uint8_t>(alloc - sizeof image);
            if (!bytes.empty()) std::memcpy(buf + sizeof image, bytes.data(), bytes.size());
        }
    }
    *size = alloc;
    return buf;
}

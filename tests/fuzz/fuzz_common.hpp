// Helpers shared by the fuzz targets.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>

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

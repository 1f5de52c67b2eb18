// Helpers shared by the fuzz targets.
#pragma once

#include <cstdio>
#include <cstdlib>

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

/* libmoegemm version: the single source of truth (CMakeLists.txt parses it). */
#ifndef MOEGEMM_VERSION_H
#define MOEGEMM_VERSION_H

#define MOEGEMM_VERSION_MAJOR 0
#define MOEGEMM_VERSION_MINOR 2
#define MOEGEMM_VERSION_PATCH 0

/** major*10000 + minor*100 + patch, as moegemm_get_version() returns it. */
#define MOEGEMM_VERSION \
    (MOEGEMM_VERSION_MAJOR * 10000 + MOEGEMM_VERSION_MINOR * 100 + MOEGEMM_VERSION_PATCH)

#endif /* MOEGEMM_VERSION_H */

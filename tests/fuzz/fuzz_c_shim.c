/* Calls from C, where an enum parameter may hold any int: this is how a C or FFI caller
 * passes out-of-range values, without the C++ fuzzer itself creating invalid enum values. */
#include "moegemm/moegemm.h"

const char* fuzz_status_string(int status) { return moegemm_status_string((moegemm_status_t)status); }
const char* fuzz_status_name(int status) { return moegemm_status_name((moegemm_status_t)status); }
moegemm_status_t fuzz_set_log_callback(moegemm_log_callback_t cb, void* user, int level) {
    return moegemm_set_log_callback(cb, user, (moegemm_log_level_t)level);
}
moegemm_status_t fuzz_set_expert_sizes(moegemm_plan_t plan, const int32_t* sizes, int where) {
    return moegemm_plan_set_expert_sizes(plan, sizes, (moegemm_memory_t)where);
}

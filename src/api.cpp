// The extern "C" layer: argument checks on handles, and the one place where C++ errors become
// statuses. No exception crosses this boundary; nothing is printed.
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "error.hpp"
#include "log.hpp"
#include "moe/moe_plan.hpp"
#include "moegemm/moegemm.h"
#include "plan.hpp"
#include "plan_options.hpp"
#include "registry.hpp"
#include "tune_cache.hpp"
#include "versioned_struct.hpp"

namespace {

using moegemm::Error;

// Records a failure: the thread's last error and, when enabled, the log.
moegemm_status_t failed(const char* call, moegemm_status_t status, const char* message) noexcept {
    moegemm::set_last_error(message);
    moegemm::log(MOEGEMM_LOG_ERROR, "{} -> {}: {}", call, moegemm::status_name(status), message);
    return status;
}

template <typename Body>
moegemm_status_t guard(const char* call, Body&& body) noexcept {
    moegemm::log(MOEGEMM_LOG_TRACE, "{}", call);
    try {
        body();
        return MOEGEMM_STATUS_SUCCESS;
    } catch (const Error& e) {
        return failed(call, e.status(), e.what());
    } catch (const std::bad_alloc&) {
        return failed(call, MOEGEMM_STATUS_ALLOC_FAILED, "out of host memory");
    } catch (const std::exception& e) {
        try {
            return failed(call, MOEGEMM_STATUS_INTERNAL_ERROR,
                          fmt::format("internal error: {}", e.what()).c_str());
        } catch (...) {
            return failed(call, MOEGEMM_STATUS_INTERNAL_ERROR, "internal error");
        }
    } catch (...) {
        return failed(call, MOEGEMM_STATUS_INTERNAL_ERROR, "internal error: unknown exception");
    }
}

moegemm::Plan& live(moegemm_plan_t plan) {
    moegemm::require(plan != nullptr, MOEGEMM_STATUS_INVALID_VALUE, "plan is NULL");
    moegemm::require(plan->magic == moegemm_plan_s::kAlive, MOEGEMM_STATUS_INVALID_STATE,
                     "plan is not a live plan (destroyed already, or not from "
                     "moegemm_plan_create)");
    return plan->plan;
}

moegemm_status_t create_plan(const char* call, const moegemm_problem_t* problem,
                             const moegemm::PlanOptions& options, moegemm_plan_t* out) noexcept {
    return guard(call, [&] {
        moegemm::require(out != nullptr, MOEGEMM_STATUS_INVALID_VALUE, "out is NULL");
        *out = new moegemm_plan_s(problem, options);
        if (moegemm::log_enabled(MOEGEMM_LOG_INFO))
            moegemm::log(MOEGEMM_LOG_INFO, "plan {}: {}", static_cast<const void*>(*out),
                         (*out)->plan.describe());
    });
}

moegemm_status_t create_moe_plan(const char* call, const moegemm_moe_problem_t* problem,
                                 const moegemm::PlanOptions& options,
                                 moegemm_moe_plan_t* out) noexcept {
    return guard(call, [&] {
        moegemm::require(out != nullptr, MOEGEMM_STATUS_INVALID_VALUE, "out is NULL");
        *out = new moegemm_moe_plan_s(problem, options);
        if (moegemm::log_enabled(MOEGEMM_LOG_INFO))
            moegemm::log(MOEGEMM_LOG_INFO, "layer plan {}: {}", static_cast<const void*>(*out),
                         (*out)->plan.describe());
    });
}

moegemm::MoePlan& live(moegemm_moe_plan_t plan) {
    moegemm::require(plan != nullptr, MOEGEMM_STATUS_INVALID_VALUE, "plan is NULL");
    moegemm::require(plan->magic == moegemm_moe_plan_s::kAlive, MOEGEMM_STATUS_INVALID_STATE,
                     "plan is not a live layer plan (destroyed already, or not from "
                     "moegemm_moe_plan_create)");
    return plan->plan;
}

// The arguments of moegemm_execute_tensors and moegemm_plan_autotune.
moegemm::ExecuteArgs execute_args(const moegemm_tensors_t* tensors, void* workspace,
                                  size_t workspace_bytes) {
    moegemm::require(tensors != nullptr, MOEGEMM_STATUS_INVALID_VALUE, "tensors is NULL");
    const moegemm_tensors_t t = moegemm::read_versioned_struct(
        *tensors, sizeof(moegemm_tensors_t), "tensors", "moegemm_tensors_init");
    moegemm::ExecuteArgs args;
    args.a = t.a;
    args.b = t.b;
    args.d = t.d;
    args.a_scale = t.a_scale;
    args.b_scale = t.b_scale;
    args.alpha = t.alpha;
    args.row_scale = t.row_scale;
    args.bias = t.bias;
    args.a_rows = t.a_rows;
    args.workspace = workspace;
    args.workspace_bytes = workspace_bytes;
    return args;
}

// The text of a plan's description into the caller's buffer, truncated.
void copy_description(const std::string& text, char* buf, size_t len) {
    moegemm::require(buf != nullptr, MOEGEMM_STATUS_INVALID_VALUE, "buf is NULL");
    moegemm::require(len > 0, MOEGEMM_STATUS_INVALID_VALUE, "len is 0");
    const size_t n = std::min(text.size(), len - 1);
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
}

}  // namespace

moegemm_status_t moegemm::testing::plan_create_with_options(const moegemm_problem_t* problem,
                                                            const PlanOptions& options,
                                                            moegemm_plan_t* out) {
    return create_plan("plan_create_with_options", problem, options, out);
}

moegemm_status_t moegemm::testing::moe_plan_create_with_options(
    const moegemm_moe_problem_t* problem, const PlanOptions& options, moegemm_moe_plan_t* out) {
    return create_moe_plan("moe_plan_create_with_options", problem, options, out);
}

extern "C" {

// (The name in parentheses: the header's function-like macro of the same name routes C and
// C++ callers to moegemm_problem_init_sized; this is the exported function itself.)
moegemm_status_t(moegemm_problem_init)(moegemm_problem_t* problem) {
    return guard("moegemm_problem_init", [&] {
        moegemm::require(problem != nullptr, MOEGEMM_STATUS_INVALID_VALUE, "problem is NULL");
        moegemm::init_problem_prefix(problem, sizeof(moegemm_problem_t));
    });
}

moegemm_status_t moegemm_problem_init_sized(moegemm_problem_t* problem, size_t struct_size) {
    return guard("moegemm_problem_init_sized", [&] {
        moegemm::require(problem != nullptr, MOEGEMM_STATUS_INVALID_VALUE, "problem is NULL");
        moegemm::require(struct_size == MOEGEMM_PROBLEM_SIZE_0_1 ||
                             (struct_size >= sizeof(moegemm_problem_t) &&
                              struct_size <= moegemm::kMaxStructSize),
                         MOEGEMM_STATUS_INVALID_VALUE,
                         "struct_size is {}: moegemm_problem_t has {} bytes in its first "
                         "version and {} in this library's (a newer caller's may be larger, up "
                         "to {})",
                         struct_size, MOEGEMM_PROBLEM_SIZE_0_1, sizeof(moegemm_problem_t),
                         moegemm::kMaxStructSize);
        moegemm::init_problem_prefix(problem, struct_size);
    });
}

moegemm_status_t moegemm_plan_create(const moegemm_problem_t* problem, moegemm_plan_t* out) {
    return create_plan("moegemm_plan_create", problem, moegemm::PlanOptions{}, out);
}

moegemm_status_t moegemm_plan_destroy(moegemm_plan_t plan) {
    if (plan == nullptr) return MOEGEMM_STATUS_SUCCESS;
    return guard("moegemm_plan_destroy", [&] {
        live(plan);
        plan->magic = moegemm_plan_s::kDead;
        delete plan;
    });
}

moegemm_status_t moegemm_plan_set_expert_sizes(moegemm_plan_t plan, const int32_t* sizes,
                                               moegemm_memory_t where) {
    return guard("moegemm_plan_set_expert_sizes", [&] { live(plan).set_expert_sizes(sizes, where); });
}

moegemm_status_t moegemm_plan_get_workspace_size(moegemm_plan_t plan, size_t* bytes) {
    return guard("moegemm_plan_get_workspace_size", [&] {
        const moegemm::Plan& p = live(plan);
        moegemm::require(bytes != nullptr, MOEGEMM_STATUS_INVALID_VALUE, "bytes is NULL");
        *bytes = p.workspace_bytes();
    });
}

moegemm_status_t moegemm_plan_get_status_word(moegemm_plan_t plan, uint32_t** device_word) {
    return guard("moegemm_plan_get_status_word", [&] {
        const moegemm::Plan& p = live(plan);
        moegemm::require(device_word != nullptr, MOEGEMM_STATUS_INVALID_VALUE,
                         "device_word is NULL");
        *device_word = p.status_word();
    });
}

moegemm_status_t moegemm_plan_describe(moegemm_plan_t plan, char* buf, size_t len) {
    return guard("moegemm_plan_describe", [&] {
        copy_description(live(plan).describe(), buf, len);
    });
}

moegemm_status_t moegemm_execute(moegemm_plan_t plan, const void* a, const void* b, void* d,
                                 const float* a_scale, const float* b_scale, void* workspace,
                                 size_t workspace_bytes, struct CUstream_st* stream) {
    return guard("moegemm_execute", [&] {
        moegemm::ExecuteArgs args;
        args.a = a;
        args.b = b;
        args.d = d;
        args.a_scale = a_scale;
        args.b_scale = b_scale;
        args.workspace = workspace;
        args.workspace_bytes = workspace_bytes;
        live(plan).execute(args, stream);
    });
}

moegemm_status_t moegemm_tensors_init_sized(moegemm_tensors_t* tensors, size_t struct_size) {
    return guard("moegemm_tensors_init_sized", [&] {
        moegemm::init_versioned_struct(tensors, struct_size, sizeof(moegemm_tensors_t), "tensors",
                                       "moegemm_tensors_t");
    });
}

moegemm_status_t moegemm_execute_tensors(moegemm_plan_t plan, const moegemm_tensors_t* tensors,
                                         void* workspace, size_t workspace_bytes,
                                         struct CUstream_st* stream) {
    return guard("moegemm_execute_tensors", [&] {
        moegemm::Plan& p = live(plan);
        p.execute(execute_args(tensors, workspace, workspace_bytes), stream);
    });
}

moegemm_status_t moegemm_plan_autotune(moegemm_plan_t plan, const moegemm_tensors_t* tensors,
                                       void* workspace, size_t workspace_bytes,
                                       struct CUstream_st* stream) {
    return guard("moegemm_plan_autotune", [&] {
        moegemm::Plan& p = live(plan);
        p.autotune(execute_args(tensors, workspace, workspace_bytes), stream);
    });
}

moegemm_status_t moegemm_set_tune_cache_file(const char* path) {
    return guard("moegemm_set_tune_cache_file", [&] {
        moegemm::set_tune_cache_file(path ? path : "");
    });
}

moegemm_status_t moegemm_moe_problem_init_sized(moegemm_moe_problem_t* problem,
                                                size_t struct_size) {
    return guard("moegemm_moe_problem_init_sized", [&] {
        // Every default of the layer problem is zero (BF16, NONE, INT32, AUTO, device 0).
        moegemm::init_versioned_struct(problem, struct_size, sizeof(moegemm_moe_problem_t),
                                       "problem", "moegemm_moe_problem_t");
    });
}

moegemm_status_t moegemm_moe_tensors_init_sized(moegemm_moe_tensors_t* tensors,
                                                size_t struct_size) {
    return guard("moegemm_moe_tensors_init_sized", [&] {
        moegemm::init_versioned_struct(tensors, struct_size, sizeof(moegemm_moe_tensors_t),
                                       "tensors", "moegemm_moe_tensors_t");
    });
}

moegemm_status_t moegemm_moe_plan_create(const moegemm_moe_problem_t* problem,
                                         moegemm_moe_plan_t* out) {
    return create_moe_plan("moegemm_moe_plan_create", problem, moegemm::PlanOptions{}, out);
}

moegemm_status_t moegemm_moe_plan_destroy(moegemm_moe_plan_t plan) {
    if (plan == nullptr) return MOEGEMM_STATUS_SUCCESS;
    return guard("moegemm_moe_plan_destroy", [&] {
        live(plan);
        plan->magic = moegemm_moe_plan_s::kDead;
        delete plan;
    });
}

moegemm_status_t moegemm_moe_plan_get_workspace_size(moegemm_moe_plan_t plan, size_t* bytes) {
    return guard("moegemm_moe_plan_get_workspace_size", [&] {
        const moegemm::MoePlan& p = live(plan);
        moegemm::require(bytes != nullptr, MOEGEMM_STATUS_INVALID_VALUE, "bytes is NULL");
        *bytes = p.workspace_bytes();
    });
}

moegemm_status_t moegemm_moe_plan_get_status_word(moegemm_moe_plan_t plan,
                                                  uint32_t** device_word) {
    return guard("moegemm_moe_plan_get_status_word", [&] {
        const moegemm::MoePlan& p = live(plan);
        moegemm::require(device_word != nullptr, MOEGEMM_STATUS_INVALID_VALUE,
                         "device_word is NULL");
        *device_word = p.status_word();
    });
}

moegemm_status_t moegemm_moe_plan_describe(moegemm_moe_plan_t plan, char* buf, size_t len) {
    return guard("moegemm_moe_plan_describe",
                 [&] { copy_description(live(plan).describe(), buf, len); });
}

moegemm_status_t moegemm_moe_execute(moegemm_moe_plan_t plan, const moegemm_moe_tensors_t* tensors,
                                     void* workspace, size_t workspace_bytes,
                                     struct CUstream_st* stream) {
    return guard("moegemm_moe_execute", [&] {
        const moegemm::MoePlan& p = live(plan);
        moegemm::require(tensors != nullptr, MOEGEMM_STATUS_INVALID_VALUE, "tensors is NULL");
        p.execute(*tensors, workspace, workspace_bytes, stream);
    });
}

moegemm_status_t moegemm_moe_plan_autotune(moegemm_moe_plan_t plan,
                                           const moegemm_moe_tensors_t* tensors, void* workspace,
                                           size_t workspace_bytes, struct CUstream_st* stream) {
    return guard("moegemm_moe_plan_autotune", [&] {
        moegemm::MoePlan& p = live(plan);
        moegemm::require(tensors != nullptr, MOEGEMM_STATUS_INVALID_VALUE, "tensors is NULL");
        p.autotune(*tensors, workspace, workspace_bytes, stream);
    });
}

moegemm_status_t moegemm_set_log_callback(moegemm_log_callback_t callback, void* user_data,
                                          moegemm_log_level_t level) {
    return guard("moegemm_set_log_callback", [&] {
        const int value = moegemm::enum_value(level);
        moegemm::require(value >= MOEGEMM_LOG_OFF && value <= MOEGEMM_LOG_TRACE,
                         MOEGEMM_STATUS_INVALID_VALUE, "level = {} is out of range (0..4)", value);
        moegemm::set_log_callback(callback, user_data, level);
    });
}

int moegemm_kernel_count(void) {
    return static_cast<int>(moegemm::registry_end() - moegemm::registry_begin());
}

const char* moegemm_kernel_name(int index) {
    if (index < 0 || index >= moegemm_kernel_count()) return nullptr;
    return moegemm::registry_begin()[index].name;
}

const char* moegemm_status_string(moegemm_status_t status) {
    return moegemm::status_string(moegemm::enum_value(status));
}

const char* moegemm_status_name(moegemm_status_t status) {
    return moegemm::status_name(moegemm::enum_value(status));
}

const char* moegemm_get_last_error_message(void) { return moegemm::last_error(); }

int moegemm_get_version(void) { return MOEGEMM_VERSION; }

const char* moegemm_get_version_string(void) {
#define MOEGEMM_STR2(x) #x
#define MOEGEMM_STR(x) MOEGEMM_STR2(x)
    return MOEGEMM_STR(MOEGEMM_VERSION_MAJOR) "." MOEGEMM_STR(MOEGEMM_VERSION_MINOR) "." MOEGEMM_STR(
        MOEGEMM_VERSION_PATCH);
#undef MOEGEMM_STR
#undef MOEGEMM_STR2
}

}  // extern "C"

// The library's logger: off by default, configured from the environment (MOEGEMM_LOG_LEVEL,
// MOEGEMM_LOG_FILE) or by moegemm_set_log_callback; never writes to stdout.
#pragma once

#include <string>

#include <fmt/format.h>

#include "moegemm/moegemm.h"

namespace moegemm {

/// Whether a message at `level` would be emitted (cheap: check before formatting).
bool log_enabled(moegemm_log_level_t level) noexcept;

/// Emits `message` at `level`; never throws.
void log_message(moegemm_log_level_t level, const std::string& message) noexcept;

template <typename... Args>
void log(moegemm_log_level_t level, fmt::format_string<Args...> format, Args&&... args) noexcept {
    if (!log_enabled(level)) return;
    try {
        log_message(level, fmt::format(format, std::forward<Args>(args)...));
    } catch (...) {
    }
}

/// moegemm_set_log_callback (validated by the caller).
void set_log_callback(moegemm_log_callback_t callback, void* user_data, moegemm_log_level_t level);

}  // namespace moegemm

// The library's logger: level and destination from MOEGEMM_LOG_LEVEL / MOEGEMM_LOG_FILE or
// moegemm_set_log_callback; serialized, never writes to stdout.
#include "log.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <unistd.h>

namespace moegemm {

namespace {

const char* level_name(moegemm_log_level_t level) {
    switch (level) {
        case MOEGEMM_LOG_ERROR: return "error";
        case MOEGEMM_LOG_WARN: return "warn";
        case MOEGEMM_LOG_INFO: return "info";
        case MOEGEMM_LOG_TRACE: return "trace";
        default: return "off";
    }
}

int parse_level(const char* text) {
    if (!text || !*text) return MOEGEMM_LOG_OFF;
    if (text[0] >= '0' && text[0] <= '9') {
        const int value = std::atoi(text);
        return value < 0 ? 0 : value > MOEGEMM_LOG_TRACE ? MOEGEMM_LOG_TRACE : value;
    }
    for (int l = MOEGEMM_LOG_OFF; l <= MOEGEMM_LOG_TRACE; ++l)
        if (std::strcmp(text, level_name(static_cast<moegemm_log_level_t>(l))) == 0) return l;
    return MOEGEMM_LOG_OFF;
}

// Where messages go. Guarded by `mutex` except `level`, read on every log call.
struct Logger {
    std::once_flag from_environment;
    std::mutex mutex;
    std::atomic<int> level{MOEGEMM_LOG_OFF};
    moegemm_log_callback_t callback = nullptr;
    void* user_data = nullptr;
    std::FILE* file = nullptr;  // MOEGEMM_LOG_FILE, opened at the first message
    std::string file_path;      // empty: stderr
};

Logger& logger() {
    static Logger instance;  // never destroyed before other statics that may log
    return instance;
}

void read_environment(Logger& l) {
    std::call_once(l.from_environment, [&l] {
        l.level.store(parse_level(std::getenv("MOEGEMM_LOG_LEVEL")));
        if (const char* path = std::getenv("MOEGEMM_LOG_FILE"); path && *path) {
            // (Called from noexcept functions: out of memory here logs to stderr instead of
            // terminating the caller.)
            try {
                std::string p = path;
                if (const auto at = p.find("%i"); at != std::string::npos)
                    p.replace(at, 2, std::to_string(static_cast<long>(getpid())));
                l.file_path = std::move(p);
            } catch (...) {
                l.file_path.clear();
            }
        }
    });
}

}  // namespace

bool log_enabled(moegemm_log_level_t level) noexcept {
    Logger& l = logger();
    read_environment(l);
    return level != MOEGEMM_LOG_OFF && static_cast<int>(level) <= l.level.load();
}

void log_message(moegemm_log_level_t level, const std::string& message) noexcept {
    Logger& l = logger();
    std::lock_guard<std::mutex> lock(l.mutex);
    if (l.callback) {
        l.callback(level, message.c_str(), l.user_data);
        return;
    }
    if (!l.file && !l.file_path.empty()) l.file = std::fopen(l.file_path.c_str(), "a");
    std::FILE* out = l.file ? l.file : stderr;
    std::fprintf(out, "[moegemm %s] %s\n", level_name(level), message.c_str());
    std::fflush(out);
}

void set_log_callback(moegemm_log_callback_t callback, void* user_data,
                      moegemm_log_level_t level) {
    Logger& l = logger();
    read_environment(l);
    std::lock_guard<std::mutex> lock(l.mutex);
    l.callback = callback;
    l.user_data = user_data;
    l.level.store(static_cast<int>(level));
}

}  // namespace moegemm

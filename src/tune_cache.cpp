// The autotuner's results: their keys, their text form and file, the process's cache, and how
// a plan's selection consults it (tune_cache.hpp).
#include "tune_cache.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <locale>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>

#include "log.hpp"
#include "problem.hpp"
#include "registry.hpp"

namespace moegemm {

namespace {

// The smallest power of two >= v (1 for v <= 1).
int64_t round_up_pow2(int64_t v) {
    int64_t p = 1;
    while (p < v && p < (int64_t{1} << 62)) p <<= 1;
    return p;
}

// Tabs and line ends would break the text form; GPU names hold neither, but be sure.
std::string one_field(std::string s) {
    for (char& c : s)
        if (c == '\t' || c == '\n' || c == '\r') c = ' ';
    return s;
}

std::vector<std::string> split(const std::string& line, char sep) {
    std::vector<std::string> parts;
    std::size_t start = 0;
    for (;;) {
        const std::size_t at = line.find(sep, start);
        parts.push_back(line.substr(start, at == std::string::npos ? std::string::npos : at - start));
        if (at == std::string::npos) return parts;
        start = at + 1;
    }
}

// Adds the results of the file at `path` (named by `named_by`) to `cache`, logging the outcome:
// a file that cannot be used is ignored. Whether it was loaded.
bool load_and_log(const std::string& path, const char* named_by, TuneCache& cache) {
    std::string why;
    if (!load_tune_file(path, cache, &why)) {
        log(MOEGEMM_LOG_WARN, "tune cache {} ({}) ignored: {}", path, named_by, why);
        return false;
    }
    log(MOEGEMM_LOG_INFO, "tune cache {} ({}) loaded: {} results", path, named_by, cache.size());
    return true;
}

struct ProcessCache {
    TuneCache cache;
    std::mutex file_mutex;  // guards `file` and serializes saves
    std::string file;
};

// The process's results, created at their first use (a plan's kernel selection): with the
// file MOEGEMM_TUNE_CACHE names loaded, until moegemm_set_tune_cache_file names another.
ProcessCache& process() {
    static ProcessCache* p = [] {
        auto* created = new ProcessCache();  // never destroyed: plans may outlive statics
        const char* path = std::getenv("MOEGEMM_TUNE_CACHE");
        if (path != nullptr && *path != '\0') {
            created->file = path;
            load_and_log(created->file, "MOEGEMM_TUNE_CACHE", created->cache);
        }
        return created;
    }();
    return *p;
}

}  // namespace

std::string size_bucket(const ProblemSummary& p) {
    switch (p.sizes) {
        case SizesSource::Host: {
            const int64_t active = std::max<int32_t>(p.active_experts, 1);
            return fmt::format("host rows<={} experts<={}",
                               round_up_pow2(p.total_rows / active), round_up_pow2(active));
        }
        case SizesSource::Device:
            return p.expected_rows > 0
                       ? fmt::format("device rows<={}", round_up_pow2(p.expected_rows))
                       : std::string("device rows unknown");
        case SizesSource::None: break;
    }
    return "no sizes";
}

std::string tune_key(const ProblemSummary& p, const DeviceCaps& d,
                     moegemm_backend_t result_backend) {
    return one_field(fmt::format(
        "{} sm={} cc={}.{} | {} weights={} {}->{} scales={} E={} N={} K={} max_rows={} "
        "backend={} swap_ab={} epilogue={} bias={} act={} gather={} | {} | result {}",
        d.name, d.sm_count, d.cc_major, d.cc_minor, layout_name(p.layout),
        p.weight_layout == MOEGEMM_WEIGHTS_NK ? "NK" : "KN", dtype_name(p.a_type),
        dtype_name(p.d_type), scale_mode_name(p.scale_mode), p.num_experts, p.n, p.k, p.max_rows,
        static_cast<int>(p.backend), p.swap_ab ? 1 : 0, p.epilogue_inputs,
        dtype_name(p.bias_type), activation_name(p.activation), p.gather ? 1 : 0,
        size_bucket(p), backend_name(result_backend)));
}

std::optional<TuneEntry> TuneCache::find(const std::string& key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = entries_.find(key);
    if (it == entries_.end()) return std::nullopt;
    return it->second;
}

void TuneCache::put(const std::string& key, const TuneEntry& entry) {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_[key] = entry;
}

void TuneCache::clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.clear();
}

std::size_t TuneCache::size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.size();
}

std::string TuneCache::serialize() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string text = std::string(kHeader) + "\n";
    for (const auto& [key, entry] : entries_)
        text += fmt::format("{}\t{}\t{:.3f}\n", key, entry.kernel, entry.microseconds);
    return text;
}

bool TuneCache::merge_text(const std::string& text, std::string* why) {
    std::istringstream in(text);
    std::string line;
    if (!std::getline(in, line) || line != kHeader) {
        *why = fmt::format("its first line is not \"{}\" (another version of the library, or "
                           "not a tune cache)", kHeader);
        return false;
    }
    std::map<std::string, TuneEntry> parsed;
    for (int number = 2; std::getline(in, line); ++number) {
        if (!line.empty() && line.back() == '\r') line.pop_back();  // a file edited on Windows
        if (line.empty()) continue;
        const std::vector<std::string> fields = split(line, '\t');
        double us = -1.0;
        if (fields.size() == 3) {
            // Whatever the process's locale: serialize writes a '.' (fmt is locale-free).
            std::istringstream field(fields[2]);
            field.imbue(std::locale::classic());
            if (!(field >> us) || !field.eof()) us = -1.0;
        }
        if (fields.size() != 3 || fields[0].empty() || fields[1].empty() || !std::isfinite(us) ||
            us < 0.0) {
            *why = fmt::format("line {} is not \"key<TAB>kernel<TAB>microseconds\"", number);
            return false;
        }
        parsed[fields[0]] = TuneEntry{fields[1], us};
    }
    std::lock_guard<std::mutex> lock(mutex_);
    // Results of this process are newer than a file's: they stay.
    for (auto& [key, entry] : parsed) entries_.emplace(key, std::move(entry));
    return true;
}

bool load_tune_file(const std::string& path, TuneCache& cache, std::string* why) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        *why = fmt::format("cannot open it ({})", std::strerror(errno));
        return false;
    }
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) {
        *why = "reading it failed";
        return false;
    }
    return cache.merge_text(text.str(), why);
}

bool save_tune_file(const std::string& path, const TuneCache& cache, std::string* why) {
    const std::string temporary = fmt::format("{}.tmp.{}", path, static_cast<long>(getpid()));
    {
        std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
        if (!out) {
            *why = fmt::format("cannot create {} ({})", temporary, std::strerror(errno));
            return false;
        }
        out << cache.serialize();
        out.flush();
        if (!out) {
            *why = fmt::format("writing {} failed", temporary);
            std::remove(temporary.c_str());
            return false;
        }
    }
    if (std::rename(temporary.c_str(), path.c_str()) != 0) {
        *why = fmt::format("cannot rename {} to it ({})", temporary, std::strerror(errno));
        std::remove(temporary.c_str());
        return false;
    }
    return true;
}

TuneCache& process_tune_cache() { return process().cache; }

bool set_tune_cache_file(const std::string& path) {
    ProcessCache& p = process();
    std::lock_guard<std::mutex> lock(p.file_mutex);
    p.file = path;
    return !path.empty() && load_and_log(path, "moegemm_set_tune_cache_file", p.cache);
}

std::string tune_cache_file() {
    ProcessCache& p = process();
    std::lock_guard<std::mutex> lock(p.file_mutex);
    return p.file;
}

void save_process_tune_cache() noexcept {
    try {
        ProcessCache& p = process();
        std::lock_guard<std::mutex> lock(p.file_mutex);
        if (p.file.empty()) return;
        std::string why;
        if (!save_tune_file(p.file, p.cache, &why))
            log(MOEGEMM_LOG_WARN, "tune cache {} not written: {}", p.file, why);
    } catch (...) {
    }
}

std::size_t choose_backend_result(const std::vector<BackendTime>& results,
                                  moegemm_backend_t heuristic_backend) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < results.size(); ++i)
        if (results[i].microseconds < results[best].microseconds) best = i;
    for (std::size_t i = 0; i < results.size(); ++i) {
        if (results[i].backend == heuristic_backend &&
            !replaces_incumbent(results[best].microseconds, results[i].microseconds))
            return i;
    }
    return best;
}

Selection apply_tune_cache(const Selection& heuristic, const ProblemSummary& p,
                           const DeviceCaps& d, const TuneCache& cache,
                           uint32_t backends) {
    if (heuristic.status != MOEGEMM_STATUS_SUCCESS) return heuristic;
    std::vector<Selection> selections;
    std::vector<BackendTime> times;
    for (const moegemm_backend_t backend : kConcreteBackends) {
        const std::string key = tune_key(p, d, backend);
        const std::optional<TuneEntry> entry = cache.find(key);
        if (!entry) continue;
        Selection tuned = select_named_kernel(p, d, entry->kernel);
        if (tuned.status != MOEGEMM_STATUS_SUCCESS || variant(tuned.kernel).backend != backend) {
            log(MOEGEMM_LOG_WARN, "tuned kernel {} not used for [{}]: {}", entry->kernel, key,
                tuned.status != MOEGEMM_STATUS_SUCCESS ? tuned.reason
                                                       : std::string("not of that backend"));
            continue;
        }
        if ((backends & backend_bit(backend)) == 0) {
            // Expected, not a fault: a plan whose workspace was sized for the other backend.
            log(MOEGEMM_LOG_TRACE, "tuned kernel {} not used for [{}]: the plan's workspace "
                "does not cover its backend", entry->kernel, key);
            continue;
        }
        selections.push_back(std::move(tuned));
        times.push_back({backend, entry->microseconds});
    }
    if (times.empty()) return heuristic;
    const std::size_t chosen = choose_backend_result(times, variant(heuristic.kernel).backend);
    Selection tuned = std::move(selections[chosen]);
    tuned.tuned = true;
    tuned.reason = fmt::format("tuned: {:.1f} us when timed, the fastest for this problem and "
                               "size bucket; the heuristic picks {}",
                               times[chosen].microseconds, variant(heuristic.kernel).name);
    return tuned;
}

}  // namespace moegemm

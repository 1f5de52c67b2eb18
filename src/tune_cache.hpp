// The autotuner's memory: which kernel measured fastest for a GPU, a problem and a bucket of
// its sizes, kept for the process and, where the caller names a file, across processes.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "device_caps.hpp"
#include "heuristic.hpp"

namespace moegemm {

/// The bucket of a problem's sizes: plans whose sizes fall into one bucket share a tuning
/// result. Host sizes: rows per active expert and active experts, each rounded up to a power
/// of two (FIXED plans count as host sizes of full slabs); device sizes: the expected_rows
/// hint, likewise (the kernels differ from the host-size ones, so the source is part of it).
std::string size_bucket(const ProblemSummary& p);

/// The key of one result: the GPU (name and SM count), every field of the problem that the
/// kernel choice depends on, the size bucket, and the backend of the kernel it names. A
/// problem keeps the best kernel of each backend timed, so that a plan whose workspace covers
/// only one backend still finds that one's. One line, no tab.
std::string tune_key(const ProblemSummary& p, const DeviceCaps& d,
                     moegemm_backend_t result_backend);

/// A tuned kernel replaces the heuristic's pick (or the result of the heuristic's backend)
/// only when it is this much faster: closer timings are within the noise of a few
/// milliseconds of measurement.
inline constexpr double kTunedGain = 0.01;

/// Whether a result timed at `us` replaces one timed at `incumbent_us` (the heuristic's
/// kernel, or the result of its backend): only when kTunedGain faster.
inline bool replaces_incumbent(double us, double incumbent_us) noexcept {
    return us <= (1.0 - kTunedGain) * incumbent_us;
}

/// A tuned result's backend and time, as autotune and plan selection weigh them.
struct BackendTime {
    moegemm_backend_t backend;
    double microseconds;
};

/// Of results of different backends (not empty), the index of the one a plan takes: the
/// fastest, but that of `heuristic_backend` unless another replaces it. Pure.
std::size_t choose_backend_result(const std::vector<BackendTime>& results,
                                  moegemm_backend_t heuristic_backend);

struct TuneEntry {
    std::string kernel;         ///< a registry name
    double microseconds = 0.0;  ///< its median time when it was tuned
};

/// Results by key; safe to use from several threads.
class TuneCache {
public:
    /// The first line of the text form; a file with another first line is stale.
    static constexpr const char* kHeader = "libmoegemm tune cache 2";

    std::optional<TuneEntry> find(const std::string& key) const;
    void put(const std::string& key, const TuneEntry& entry);
    void clear();
    std::size_t size() const;

    /// kHeader, then one line per entry: key, kernel and microseconds separated by tabs.
    std::string serialize() const;
    /// Adds the entries of `text` (serialize's form) whose keys the cache does not hold. A
    /// wrong first line or a malformed line leaves the cache unchanged and returns false with
    /// the reason in `why`.
    bool merge_text(const std::string& text, std::string* why);

private:
    mutable std::mutex mutex_;
    std::map<std::string, TuneEntry> entries_;
};

/// Adds the file's entries to `cache`. A missing, unreadable, stale or corrupt file changes
/// nothing and returns false with the reason.
bool load_tune_file(const std::string& path, TuneCache& cache, std::string* why);

/// Writes the cache to `path` through a temporary file beside it and a rename, so that a
/// reader never sees half a file. Returns false with the reason on failure.
bool save_tune_file(const std::string& path, const TuneCache& cache, std::string* why);

/// The process's results, which plans consult when they select a kernel.
TuneCache& process_tune_cache();

/// Names the file that backs the process's results ("" for none), loads what it holds (a
/// file that cannot be used is logged and ignored) and returns whether it was loaded.
bool set_tune_cache_file(const std::string& path);

/// The file set_tune_cache_file named ("" for none).
std::string tune_cache_file();

/// Saves the process's results to its file, if one is named; a failure is logged.
void save_process_tune_cache() noexcept;

/// `heuristic`, or the fastest kernel `cache` holds for this problem among those the
/// problem's backend allows, that can still serve it (a result of another library version
/// may not) and whose backend is in `backends` (a plan whose workspace is fixed takes only
/// kernels of the backends that workspace covers); the result of the heuristic's backend
/// stays unless another is kTunedGain faster, as autotune decides.
Selection apply_tune_cache(const Selection& heuristic, const ProblemSummary& p,
                           const DeviceCaps& d, const TuneCache& cache,
                           uint32_t backends = kAnyBackend);

}  // namespace moegemm

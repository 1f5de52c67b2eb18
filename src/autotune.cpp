// moegemm_plan_autotune: every kernel of the plan's backend that can serve its problem and
// sizes, timed on the caller's buffers; the fastest becomes the plan's kernel and the process's
// tuned choice for that problem and size bucket (tune_cache.hpp).
#include <algorithm>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "error.hpp"
#include "log.hpp"
#include "plan.hpp"
#include "tune_cache.hpp"

namespace moegemm {

namespace {

class Event {
public:
    Event() { MOEGEMM_CUDA_CHECK(cudaEventCreate(&event_)); }
    ~Event() { (void)cudaEventDestroy(event_); }
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
    cudaEvent_t get() const noexcept { return event_; }

private:
    cudaEvent_t event_ = nullptr;
};

// Launches per candidate: enough for about 2 ms of kernel time, at least 5 (a median of
// fewer is one noisy launch), at most 50.
constexpr double kTargetMicroseconds = 2000.0;
constexpr int kMinLaunches = 5;
constexpr int kMaxLaunches = 50;

float elapsed_us(const Event& start, const Event& stop) {
    float ms = 0.0f;
    MOEGEMM_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    return ms * 1000.0f;
}

// The median time of one launch of `kernel`, in microseconds, after a launch that warms it
// up (and loads it, on its first use in the process). Each launch has its own pair of events,
// so that the launches of the median are the kernel's alone.
double median_launch_us(const Kernel& kernel, const ExecuteArgs& args, CUstream_st* stream) {
    Event start, stop;
    kernel.launch(args, stream);
    MOEGEMM_CUDA_CHECK(cudaEventRecord(start.get(), stream));
    kernel.launch(args, stream);
    MOEGEMM_CUDA_CHECK(cudaEventRecord(stop.get(), stream));
    MOEGEMM_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    const double first = std::max(1.0f, elapsed_us(start, stop));
    const int launches = std::clamp(static_cast<int>(kTargetMicroseconds / first), kMinLaunches,
                                    kMaxLaunches);
    std::vector<Event> marks(static_cast<std::size_t>(launches) + 1);
    MOEGEMM_CUDA_CHECK(cudaEventRecord(marks[0].get(), stream));
    for (int i = 1; i <= launches; ++i) {
        kernel.launch(args, stream);
        MOEGEMM_CUDA_CHECK(cudaEventRecord(marks[static_cast<std::size_t>(i)].get(), stream));
    }
    MOEGEMM_CUDA_CHECK(cudaEventSynchronize(marks.back().get()));
    std::vector<float> times;
    for (std::size_t i = 1; i < marks.size(); ++i)
        times.push_back(elapsed_us(marks[i - 1], marks[i]));
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    return times[times.size() / 2];
}

struct Candidate {
    const KernelVariant* variant = nullptr;
    std::unique_ptr<Kernel> kernel;
    double microseconds = 0.0;
};

}  // namespace

void Plan::autotune(const ExecuteArgs& args, CUstream_st* stream) {
    require(problem_.force_kernel.empty(), MOEGEMM_STATUS_INVALID_STATE,
            "problem->force_kernel = \"{}\" fixed the plan's kernel: there is nothing to tune",
            problem_.force_kernel);
    ScopedDevice on(problem_.device);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    MOEGEMM_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    require(capture == cudaStreamCaptureStatusNone, MOEGEMM_STATUS_INVALID_STATE,
            "autotune times kernels and waits for them: it cannot run while the stream is "
            "being captured (tune before capturing)");
    if (!check_execute(args, stream)) return;  // every size 0: nothing to time

    const ProblemSummary summary = summarize(problem_, sizes_);
    const KernelVariant& heuristic = variant(select_kernel(summary, device_).kernel);
    const moegemm_backend_t backend = variant(selection_.kernel).backend;
    std::vector<Candidate> candidates;
    for (const KernelVariant* v = registry_begin(); v != registry_end(); ++v) {
        std::string why;
        if (v->backend != backend || !v->can_implement(summary, device_, &why)) continue;
        candidates.push_back({v, v->create(problem_, device_, sizes_, resources_), 0.0});
    }
    require(!candidates.empty(), MOEGEMM_STATUS_INTERNAL_ERROR,
            "no kernel of the plan's backend serves its problem, although one was selected");
    for (Candidate& c : candidates) c.microseconds = median_launch_us(*c.kernel, args, stream);

    Candidate* best = &candidates.front();
    double heuristic_us = 0.0;
    for (Candidate& c : candidates) {
        if (c.microseconds < best->microseconds) best = &c;
        if (c.variant == &heuristic) heuristic_us = c.microseconds;
    }
    // D holds the chosen kernel's product when autotune returns.
    best->kernel->launch(args, stream);
    MOEGEMM_CUDA_CHECK(cudaStreamSynchronize(stream));

    Selection tuned;
    tuned.kernel = best->variant->id;
    tuned.reason = fmt::format("tuned: {:.1f} us, the fastest of {} kernels timed; the "
                               "heuristic's {} took {:.1f} us",
                               best->microseconds, candidates.size(), heuristic.name,
                               heuristic_us);
    const std::string key = tune_key(summary, device_);
    process_tune_cache().put(key, TuneEntry{best->variant->name, best->microseconds});
    // Nothing below throws: commit.
    selection_ = std::move(tuned);
    kernel_ = std::move(best->kernel);
    log(MOEGEMM_LOG_INFO, "autotune [{}]: {} ({:.1f} us; heuristic {} {:.1f} us)", key,
        best->variant->name, best->microseconds, heuristic.name, heuristic_us);
    save_process_tune_cache();
}

}  // namespace moegemm

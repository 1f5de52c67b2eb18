// The one timing loop of moegemm-bench: warm-up, then CUDA events around each repetition, median.
#pragma once

#include "cuda_utils.hpp"

#include <functional>
#include <vector>

namespace moegemm_bench {

/// How long to measure. The number of timed repetitions is the larger of min_reps and what
/// fills min_time_ms, the latter never more than max_time_reps (so that microsecond kernels do
/// not record hundreds of thousands of events).
struct TimingPolicy {
    int min_reps = 20;
    double min_time_ms = 200.0;
    int max_time_reps = 10000;
    double warmup_ms = 50.0;
    /// Host cost (Timer::host_us_per_call): batches, and back-to-back calls per batch.
    int host_batches = 20;
    int host_calls_per_batch = 100;
};

/// Statistics of one measurement, in microseconds per repetition.
struct TimingStats {
    double median_us = 0.0;
    double min_us = 0.0;
    double max_us = 0.0;
    double mean_us = 0.0;
    /// GPU time per repetition of `reps` repetitions with no event between them (one before,
    /// one after): what a stream of back-to-back calls sees. An event recorded between two
    /// kernels ends a programmatic dependent launch, so only this time can show one.
    double back_to_back_us = 0.0;
    int reps = 0;
    int warmup_reps = 0;
    int rotation_sets = 1;
    /// The median of each round (moegemm-bench --rounds), in the order measured; one entry for
    /// a single measurement.
    std::vector<double> round_median_us;
};

/// One backend's measurements of several rounds (the rows of a workload measured in turn, the
/// whole turn repeated) as one: the median of the rounds' medians (so that a slow stretch
/// that falls on one round, the power cap's, does not move it), the back-to-back
/// time likewise, the extremes of all, the mean weighted by repetitions, the repetitions
/// summed, and every round's median kept. `rounds` must not be empty.
TimingStats combine_rounds(const std::vector<TimingStats>& rounds);

/// Times GPU work enqueued by a callback on one stream.
///
/// Repetitions are enqueued back to back, without a host synchronization in between, with one
/// event between consecutive repetitions: the time of a repetition is then the GPU time from the
/// end of the previous one to its own end. Work bound by host launch overhead (a loop over 128
/// experts) pays that overhead, as it would inside a model step; work longer than its launch
/// cost is timed on the GPU alone. Repetition i reads rotation set i % num_sets, so that inputs
/// that would fit in L2 come from DRAM as they would in a real layer.
class Timer {
public:
    /// Enqueues one repetition on the timer's stream, reading rotation set `set`.
    using Enqueue = std::function<void(int set)>;

    explicit Timer(cudaStream_t stream) : stream_(stream) {}

    TimingStats measure(const Enqueue& enqueue, int num_sets, const TimingPolicy& policy);

    /// CPU time of the calling thread per call of `enqueue`, in microseconds: the median over
    /// policy.host_batches batches of (CPU time of policy.host_calls_per_batch back-to-back calls,
    /// from clock_gettime(CLOCK_THREAD_CPUTIME_ID) around the calls only) / calls. The stream is
    /// synchronized between batches, untimed, so that a batch starts with an empty launch queue:
    /// what is left is the host work of the calls themselves (a call that launches hundreds of
    /// kernels, like the cuBLASLt baseline's per-expert loop, may still fill the queue within a
    /// batch and then pays the wait where the driver spins). Call it after measure(), which has
    /// paid the one-time costs.
    double host_us_per_call(const Enqueue& enqueue, int num_sets, const TimingPolicy& policy);

    cudaStream_t stream() const noexcept { return stream_; }

private:
    /// Milliseconds of GPU time for `count` repetitions (from set `first_set` on), synchronized.
    double time_batch(const Enqueue& enqueue, int count, int first_set, int num_sets);
    void reserve_events(size_t count);

    cudaStream_t stream_;
    std::vector<CudaEvent> events_;  // grown on demand and reused across measurements
};

}  // namespace moegemm_bench

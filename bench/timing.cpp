#include "timing.hpp"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>

namespace moegemm_bench {

namespace {

// Repetitions timed together to estimate the cost of one before choosing the counts.
constexpr int kProbeReps = 3;
// Bounds on the warm-up: enough to reach steady clocks and caches of descriptors, not so many
// that microsecond kernels spend seconds there.
constexpr int kMinWarmupReps = 2;
constexpr int kMaxWarmupReps = 1000;
// Event timing resolution is about half a microsecond; never divide by less.
constexpr double kMinEstimateMs = 1e-3;

int clamp_count(double count, int lo, int hi) {
    if (!(count < hi)) return hi;  // also catches NaN and infinity
    return std::max(lo, static_cast<int>(std::ceil(count)));
}

double median_of_sorted(const std::vector<double>& sorted) {
    const size_t n = sorted.size();
    return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

/// CPU time consumed so far by the calling thread, in nanoseconds: time spent waiting (blocked
/// in a synchronization, descheduled) does not count.
int64_t thread_cpu_ns() {
    timespec now{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

}  // namespace

void Timer::reserve_events(size_t count) {
    while (events_.size() < count) events_.push_back(make_event());
}

double Timer::time_batch(const Enqueue& enqueue, int count, int first_set, int num_sets) {
    reserve_events(2);
    BENCH_CUDA_CHECK(cudaEventRecord(events_[0].get(), stream_));
    for (int i = 0; i < count; ++i) enqueue((first_set + i) % num_sets);
    BENCH_CUDA_CHECK(cudaEventRecord(events_[1].get(), stream_));
    BENCH_CUDA_CHECK(cudaEventSynchronize(events_[1].get()));
    float ms = 0.0f;
    BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[0].get(), events_[1].get()));
    return ms;
}

TimingStats Timer::measure(const Enqueue& enqueue, int num_sets, const TimingPolicy& policy) {
    num_sets = std::max(1, num_sets);
    TimingStats stats;
    stats.rotation_sets = num_sets;

    // The first call pays one-time costs (module loading, cuBLAS's lazy initialization) and
    // surfaces errors before anything is queued behind it.
    enqueue(0);
    BENCH_CUDA_CHECK(cudaStreamSynchronize(stream_));

    const double estimate_ms =
        std::max(kMinEstimateMs, time_batch(enqueue, kProbeReps, 1, num_sets) / kProbeReps);

    stats.warmup_reps = clamp_count(policy.warmup_ms / estimate_ms, kMinWarmupReps, kMaxWarmupReps);
    for (int i = 0; i < stats.warmup_reps; ++i) enqueue(i % num_sets);

    const int time_reps = clamp_count(policy.min_time_ms / estimate_ms, 1, policy.max_time_reps);
    stats.reps = std::max(policy.min_reps, time_reps);

    // One event before the first repetition and one after each: repetition i spans
    // events_[i] .. events_[i + 1].
    reserve_events(static_cast<size_t>(stats.reps) + 1);
    BENCH_CUDA_CHECK(cudaEventRecord(events_[0].get(), stream_));
    for (int i = 0; i < stats.reps; ++i) {
        enqueue(i % num_sets);
        BENCH_CUDA_CHECK(cudaEventRecord(events_[i + 1].get(), stream_));
    }
    BENCH_CUDA_CHECK(cudaEventSynchronize(events_[stats.reps].get()));

    std::vector<double> times_us(stats.reps);
    for (int i = 0; i < stats.reps; ++i) {
        float ms = 0.0f;
        BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i].get(), events_[i + 1].get()));
        times_us[i] = 1e3 * ms;
    }
    std::sort(times_us.begin(), times_us.end());
    stats.median_us = median_of_sorted(times_us);
    stats.min_us = times_us.front();
    stats.max_us = times_us.back();
    stats.mean_us = std::accumulate(times_us.begin(), times_us.end(), 0.0) /
                    static_cast<double>(times_us.size());
    stats.back_to_back_us = 1e3 * time_batch(enqueue, stats.reps, 0, num_sets) / stats.reps;
    stats.round_median_us = {stats.median_us};
    return stats;
}

TimingStats combine_rounds(const std::vector<TimingStats>& rounds) {
    TimingStats all = rounds.at(0);
    all.round_median_us.clear();
    std::vector<double> medians, back_to_back;
    double weighted_mean = 0.0;
    all.reps = 0;
    all.warmup_reps = 0;
    for (const TimingStats& round : rounds) {
        medians.push_back(round.median_us);
        back_to_back.push_back(round.back_to_back_us);
        all.round_median_us.insert(all.round_median_us.end(), round.round_median_us.begin(),
                                   round.round_median_us.end());
        all.min_us = std::min(all.min_us, round.min_us);
        all.max_us = std::max(all.max_us, round.max_us);
        weighted_mean += round.mean_us * round.reps;
        all.reps += round.reps;
        all.warmup_reps += round.warmup_reps;
    }
    std::sort(medians.begin(), medians.end());
    std::sort(back_to_back.begin(), back_to_back.end());
    all.median_us = median_of_sorted(medians);
    all.back_to_back_us = median_of_sorted(back_to_back);
    all.mean_us = all.reps > 0 ? weighted_mean / all.reps : all.mean_us;
    return all;
}

double Timer::host_us_per_call(const Enqueue& enqueue, int num_sets, const TimingPolicy& policy) {
    num_sets = std::max(1, num_sets);
    const int calls = std::max(1, policy.host_calls_per_batch);
    std::vector<double> per_call_us;
    for (int batch = 0; batch < std::max(1, policy.host_batches); ++batch) {
        BENCH_CUDA_CHECK(cudaStreamSynchronize(stream_));
        const int64_t start = thread_cpu_ns();
        for (int i = 0; i < calls; ++i) enqueue(i % num_sets);
        const int64_t elapsed = thread_cpu_ns() - start;
        per_call_us.push_back(1e-3 * static_cast<double>(elapsed) / calls);
    }
    BENCH_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::sort(per_call_us.begin(), per_call_us.end());
    return median_of_sorted(per_call_us);
}

}  // namespace moegemm_bench

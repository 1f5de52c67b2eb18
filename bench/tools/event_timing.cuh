// Event timing of one launch the way moegemm-bench times a repetition, for the standalone
// tools beside it (launch_cost.cu, start_delay.cu, weight_order.cu): each launch queued behind other work, so
// that both events and the launch are in the stream before the GPU reaches them (else the
// first event is stamped while the CPU is still launching), and its CTAs' span read back
// from the entry / exit stamps they write.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

__device__ __forceinline__ unsigned long long global_timer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/// Keeps the GPU busy for about `nanoseconds` (one thread).
__global__ void spin_kernel(long long nanoseconds) {
    const long long start = clock64();
    // ~1.7 cycles per ns on an H100 / H200 at full clock: long enough either way.
    while (clock64() - start < 2 * nanoseconds) {
    }
}

/// `pairs` launches, each between two events, all enqueued back to back on `stream` behind
/// whatever `before()` enqueues first (a spin kernel keeps the GPU from waiting for the CPU;
/// nothing: the queue as it is), then synchronized: each launch's event time in µs, in order.
template <typename Launch, typename Before>
std::vector<double> event_pair_times(const Launch& launch, cudaStream_t stream, int pairs,
                                     const Before& before) {
    std::vector<cudaEvent_t> marks(2 * static_cast<size_t>(pairs));
    for (cudaEvent_t& e : marks) cudaEventCreate(&e);
    before();
    for (int i = 0; i < pairs; ++i) {
        cudaEventRecord(marks[2 * i], stream);
        launch();
        cudaEventRecord(marks[2 * i + 1], stream);
    }
    cudaStreamSynchronize(stream);
    std::vector<double> us;
    for (int i = 0; i < pairs; ++i) {
        float ms = 0;
        cudaEventElapsedTime(&ms, marks[2 * i], marks[2 * i + 1]);
        us.push_back(1e3 * ms);
    }
    for (cudaEvent_t& e : marks) cudaEventDestroy(e);
    return us;
}

struct EventTiming {
    double event_us;  ///< median event time of one launch
    double span_us;   ///< median span of its CTAs, the first entry to the last exit
};

/// Times `launch()` (one launch on `stream` whose `ctas` CTAs write their globaltimer entry
/// and exit into span[2 * block] and span[2 * block + 1]) `reps` times after `warmup`.
template <typename Launch>
EventTiming time_queued_launch(const Launch& launch, unsigned long long* span, int ctas,
                               cudaStream_t stream = nullptr, int reps = 100, int warmup = 20) {
    std::vector<unsigned long long> host(2 * static_cast<size_t>(ctas));
    cudaEvent_t before, after;
    cudaEventCreate(&before);
    cudaEventCreate(&after);
    std::vector<double> events, spans;
    for (int rep = 0; rep < warmup + reps; ++rep) {
        spin_kernel<<<1, 1, 0, stream>>>(50000);
        cudaEventRecord(before, stream);
        launch();
        cudaEventRecord(after, stream);
        cudaEventSynchronize(after);
        if (rep < warmup) continue;
        float ms = 0;
        cudaEventElapsedTime(&ms, before, after);
        cudaMemcpy(host.data(), span, host.size() * sizeof(host[0]), cudaMemcpyDeviceToHost);
        unsigned long long first = ~0ull, last = 0;
        for (int b = 0; b < ctas; ++b) {
            first = std::min(first, host[2 * b]);
            last = std::max(last, host[2 * b + 1]);
        }
        events.push_back(1e3 * ms);
        spans.push_back(1e-3 * static_cast<double>(last - first));
    }
    std::sort(events.begin(), events.end());
    std::sort(spans.begin(), spans.end());
    cudaEventDestroy(before);
    cudaEventDestroy(after);
    return {events[events.size() / 2], spans[spans.size() / 2]};
}

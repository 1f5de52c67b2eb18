// moegemm_plan_autotune: every kernel that can serve the plan's problem and sizes, of its
// backend or of another the problem allows whose workspace the caller's covers, timed on the
// caller's buffers; the fastest becomes the plan's kernel and the process's
// tuned choice for that problem and size bucket (tune_cache.hpp).
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
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

// A buffer as large as the device's L2 cache, zeroed before each timed launch so that every
// candidate reads its operands from DRAM, as a plan does between a model's other layers:
// timed back to back, a problem whose operands fit in L2 would rank the kernels by their
// L2 behaviour. One per device, made at its first autotune and never freed (cudaFree would
// synchronize the device). Without the memory for it, candidates are timed unflushed.
class L2Flush {
public:
    static const L2Flush& of(int device, std::size_t bytes) {
        static std::mutex mutex;
        static auto* buffers = new std::map<int, std::unique_ptr<L2Flush>>();  // never freed
        std::lock_guard<std::mutex> lock(mutex);
        std::unique_ptr<L2Flush>& flush = (*buffers)[device];
        if (!flush || !flush->active()) flush.reset(new L2Flush(bytes));
        return *flush;
    }
    bool active() const noexcept { return buffer_ != nullptr; }
    void enqueue(CUstream_st* stream) const {
        if (buffer_) MOEGEMM_CUDA_CHECK(cudaMemsetAsync(buffer_, 0, bytes_, stream));
    }

private:
    explicit L2Flush(std::size_t bytes) : bytes_(bytes) {
        if (bytes_ == 0) return;
        const cudaError_t err = cudaMalloc(&buffer_, bytes_);
        if (err != cudaSuccess) {
            (void)cudaGetLastError();
            buffer_ = nullptr;
            log(MOEGEMM_LOG_WARN, "autotune: no {} byte L2 flush buffer ({}); candidates are "
                "timed without flushing L2 between launches", bytes_, cudaGetErrorString(err));
        }
    }

    std::size_t bytes_ = 0;
    void* buffer_ = nullptr;
};

// A CUDA graph of `launches` launches of `launch`, each after an L2 flush, instantiated.
class LaunchGraph {
public:
    template <typename Launch>
    LaunchGraph(const Launch& launch, const L2Flush& flush, CUstream_st* stream, int launches) {
        MOEGEMM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        try {
            for (int i = 0; i < launches; ++i) {
                flush.enqueue(stream);
                launch(stream);
            }
        } catch (...) {
            cudaGraph_t broken = nullptr;
            (void)cudaStreamEndCapture(stream, &broken);
            if (broken) (void)cudaGraphDestroy(broken);
            throw;
        }
        MOEGEMM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph_));
        MOEGEMM_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
    }
    ~LaunchGraph() {
        if (exec_) (void)cudaGraphExecDestroy(exec_);
        if (graph_) (void)cudaGraphDestroy(graph_);
    }
    LaunchGraph(const LaunchGraph&) = delete;
    LaunchGraph& operator=(const LaunchGraph&) = delete;
    void launch(CUstream_st* stream) const { MOEGEMM_CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

private:
    cudaGraph_t graph_ = nullptr;
    cudaGraphExec_t exec_ = nullptr;
};

// The stream autotune times on: its own, ordered after the work the caller's stream holds.
// CUDA graphs cannot be captured on the legacy default stream, which is where many callers
// (PyTorch's default) submit; and the caller's stream is left free of the timing launches.
class TuningStream {
public:
    explicit TuningStream(CUstream_st* caller) {
        MOEGEMM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
        try {
            Event inputs_ready;
            MOEGEMM_CUDA_CHECK(cudaEventRecord(inputs_ready.get(), caller));
            MOEGEMM_CUDA_CHECK(cudaStreamWaitEvent(stream_, inputs_ready.get(), 0));
        } catch (...) {
            (void)cudaStreamDestroy(stream_);
            throw;
        }
    }
    ~TuningStream() {
        (void)cudaStreamSynchronize(stream_);
        (void)cudaStreamDestroy(stream_);
    }
    TuningStream(const TuningStream&) = delete;
    TuningStream& operator=(const TuningStream&) = delete;
    CUstream_st* get() const noexcept { return stream_; }

private:
    cudaStream_t stream_ = nullptr;
};

// Launches per timing: enough for about 2 ms of kernel time, at least 5, at most 50.
constexpr double kTargetMicroseconds = 2000.0;
constexpr int kMinLaunches = 5;
constexpr int kMaxLaunches = 50;
// Timings of one candidate: the median is kept.
constexpr int kTimings = 3;

float elapsed_us(const Event& start, const Event& stop) {
    float ms = 0.0f;
    MOEGEMM_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    return ms * 1000.0f;
}

// The median time, in microseconds, of one replay of `graph` of `launches` launches, divided
// by `launches`.
double replay_us(const LaunchGraph& graph, int launches, CUstream_st* stream) {
    Event start, stop;
    graph.launch(stream);  // the graph's own first launch
    std::vector<double> times;
    for (int i = 0; i < kTimings; ++i) {
        MOEGEMM_CUDA_CHECK(cudaEventRecord(start.get(), stream));
        graph.launch(stream);
        MOEGEMM_CUDA_CHECK(cudaEventRecord(stop.get(), stream));
        MOEGEMM_CUDA_CHECK(cudaEventSynchronize(stop.get()));
        times.push_back(elapsed_us(start, stop) / launches);
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

// The time of one launch of `kernel` after an L2 flush, in microseconds: launches replayed
// from a CUDA graph (launched one by one from the host, kernels of a few microseconds would
// wait for the host between launches, and every candidate would time the host), less the
// flushes' own time (`flush_us`, a graph of flushes alone). First a launch that warms the
// kernel up (and loads it, on its first use) and sizes the graph.
double launch_us(const Kernel& kernel, const ExecuteArgs& args, const L2Flush& flush,
                 double flush_us, CUstream_st* stream) {
    Event start, stop;
    kernel.launch(args, stream);
    MOEGEMM_CUDA_CHECK(cudaEventRecord(start.get(), stream));
    kernel.launch(args, stream);
    MOEGEMM_CUDA_CHECK(cudaEventRecord(stop.get(), stream));
    MOEGEMM_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    const double first = std::max(1.0f, elapsed_us(start, stop));
    const int launches = std::clamp(static_cast<int>(kTargetMicroseconds / first), kMinLaunches,
                                    kMaxLaunches);
    const LaunchGraph graph([&](CUstream_st* s) { kernel.launch(args, s); }, flush, stream,
                            launches);
    return std::max(0.0, replay_us(graph, launches, stream) - flush_us);
}

// The time of one L2 flush in a graph of kMaxLaunches of them (0 without a flush).
double flush_us(const L2Flush& flush, CUstream_st* stream) {
    if (!flush.active()) return 0.0;
    const LaunchGraph graph([](CUstream_st*) {}, flush, stream, kMaxLaunches);
    return replay_us(graph, kMaxLaunches, stream);
}

struct Candidate {
    const KernelVariant* variant = nullptr;
    std::unique_ptr<Kernel> kernel;
    double microseconds = 0.0;
};

// The candidate of `backend` autotune keeps: the fastest, but `heuristic` (when it is of that
// backend) unless the fastest is kTunedGain faster. Null where none of `backend` was timed.
Candidate* fastest_of(std::vector<Candidate>& candidates, moegemm_backend_t backend,
                      const KernelVariant& heuristic) {
    Candidate* best = nullptr;
    Candidate* picked = nullptr;
    for (Candidate& c : candidates) {
        if (c.variant->backend != backend) continue;
        if (best == nullptr || c.microseconds < best->microseconds) best = &c;
        if (c.variant == &heuristic) picked = &c;
    }
    if (picked != nullptr && !replaces_incumbent(best->microseconds, picked->microseconds))
        return picked;
    return best;
}

}  // namespace

void require_autotune_not_captured(CUstream_st* stream) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    MOEGEMM_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    require(capture == cudaStreamCaptureStatusNone, MOEGEMM_STATUS_INVALID_STATE,
            "autotune times kernels and waits for them: it cannot run while the stream is "
            "being captured (tune before capturing)");
}

void Plan::autotune(const ExecuteArgs& args, CUstream_st* stream) {
    require(problem_.force_kernel.empty(), MOEGEMM_STATUS_INVALID_STATE,
            "problem->force_kernel = \"{}\" fixed the plan's kernel: there is nothing to tune",
            problem_.force_kernel);
    ScopedDevice on(problem_.device);
    require_autotune_not_captured(stream);
    if (!check_execute(args, stream)) return;  // every size 0: nothing to time

    const ProblemSummary summary = summarize(problem_, sizes_);
    const KernelVariant& heuristic = variant(select_kernel(summary, device_).kernel);
    const KernelVariant& current = variant(selection_.kernel);
    // Kernels of another backend the problem allows compete where the caller's workspace
    // covers that backend's (the plan's own is covered: execute's checks passed); the plan
    // then needs that workspace from here on.
    const uint32_t covered = backends_covered(problem_, device_, args.workspace_bytes);
    const TuningStream tuning(stream);
    const L2Flush& flush = L2Flush::of(problem_.device, device_.l2_bytes);
    const double flush_time = flush_us(flush, tuning.get());
    std::vector<Candidate> candidates;
    for (const KernelVariant* v = registry_begin(); v != registry_end(); ++v) {
        std::string why;
        if (!backend_allowed(v->backend, summary, covered) ||
            !v->can_implement(summary, device_, &why))
            continue;
        try {
            Candidate c{v, v->create(problem_, device_, sizes_, resources_), 0.0};
            c.microseconds = launch_us(*c.kernel, args, flush, flush_time, tuning.get());
            candidates.push_back(std::move(c));
        } catch (const Error& e) {
            // A variant that cannot run here (a launch configuration refused, no cuBLASLt
            // algorithm) is left out; but the plan's own kernel must run, and an error that
            // broke the context ends the call.
            (void)cudaGetLastError();
            const cudaError_t state = cudaStreamQuery(tuning.get());
            if (v == &current || (state != cudaSuccess && state != cudaErrorNotReady)) throw;
            log(MOEGEMM_LOG_WARN, "autotune: {} left out: {}", v->name, e.what());
        }
    }
    require(!candidates.empty(), MOEGEMM_STATUS_INTERNAL_ERROR,
            "no kernel of the plan's backend serves its problem, although one was selected");

    // The result of each backend timed, kept per backend (a plan whose workspace covers one
    // backend finds that one's); the plan takes the fastest, the heuristic's backend's unless
    // another is kTunedGain faster (choose_backend_result, as apply_tune_cache).
    std::vector<Candidate*> results;
    std::vector<BackendTime> times;
    for (const moegemm_backend_t backend : kConcreteBackends) {
        if (Candidate* c = fastest_of(candidates, backend, heuristic)) {
            results.push_back(c);
            times.push_back({backend, c->microseconds});
        }
    }
    Candidate* const best = results[choose_backend_result(times, heuristic.backend)];
    double heuristic_us = 0.0;
    for (const Candidate& c : candidates)
        if (c.variant == &heuristic) heuristic_us = c.microseconds;
    // D holds the chosen kernel's product when autotune returns.
    best->kernel->launch(args, tuning.get());
    MOEGEMM_CUDA_CHECK(cudaStreamSynchronize(tuning.get()));

    Selection tuned;
    tuned.kernel = best->variant->id;
    tuned.tuned = true;
    tuned.reason = fmt::format("tuned: {:.1f} us, the fastest of {} kernels timed (another than "
                               "the heuristic's only when {:.0f}% faster); the heuristic's {} "
                               "took {:.1f} us",
                               best->microseconds, candidates.size(), 100 * kTunedGain,
                               heuristic.name, heuristic_us);
    const std::string key = tune_key(summary, device_, best->variant->backend);
    const std::size_t workspace_bytes =
        backend_workspace_bytes(problem_, device_, best->variant->backend);
    for (const Candidate* c : results)
        process_tune_cache().put(tune_key(summary, device_, c->variant->backend),
                                 TuneEntry{c->variant->name, c->microseconds});
    // Nothing below throws: commit.
    selection_ = std::move(tuned);
    kernel_ = std::move(best->kernel);
    workspace_bytes_ = workspace_bytes;
    log(MOEGEMM_LOG_INFO, "autotune [{}]: {} ({:.1f} us; heuristic {} {:.1f} us)", key,
        best->variant->name, best->microseconds, heuristic.name, heuristic_us);
    save_process_tune_cache();
}

}  // namespace moegemm

// moegemm-bench: times libmoegemm on MoE grouped-GEMM workloads beside cuBLAS peers measured in
// the same run, and holds every time against the device's measured ceilings.
#include "device_kernels.hpp"
#include "ceilings.hpp"
#include "cublas_gemm.hpp"
#include "cuda_utils.hpp"
#include "grouped_gemm.hpp"
#include "options.hpp"
#include "output_check.hpp"
#include "report.hpp"
#include "timing.hpp"
#include "workloads.hpp"

#include <moegemm/moegemm.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <tuple>
#include <vector>

#ifndef MOEGEMM_BENCH_GIT_COMMIT
#define MOEGEMM_BENCH_GIT_COMMIT "unknown"
#endif

namespace moegemm_bench {

namespace {

constexpr int kExitSuccess = 0;
constexpr int kExitError = 1;
constexpr int kExitNoGpu = 2;
constexpr int kExitSomeFailed = 3;

// Workspace of the cuBLAS peers: what PyTorch gives cuBLASLt on Hopper, so the peers get the
// algorithms a framework would.
constexpr size_t kPeerWorkspaceBytes = size_t{32} << 20;

// The peer whose D is the reference of --check: the most direct use of cuBLASLt.
constexpr const char* kReferenceId = kCublasLtLoopId;
constexpr const char* kReferenceLabel = "cublaslt-loop";

/// The cuBLAS peers, in the table's order.
struct PeerName {
    const char* id;
    const char* label;
};
constexpr PeerName kPeers[] = {{kReferenceId, kReferenceLabel},
                               {kCublasGroupedId, "cublas-grouped"},
                               {kPaddedBatchedId, "padded-batched"}};

/// Everything shared by the measurements of one run.
struct Session {
    Options options;
    TimingPolicy policy;
    DeviceInfo device;
    CudaStream stream;
    std::unique_ptr<CublasContext> cublas;
    std::unique_ptr<Timer> timer;
    Ceilings ceilings;
};

/// A backend to measure on a workload: its ids, how to set it up, and whether to measure the host
/// cost of its calls too.
struct BackendSpec {
    std::string id;
    std::string label;
    std::function<std::unique_ptr<GroupedGemm>()> make;
    bool host_cost = false;
};

std::string utc_now() {
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    gmtime_r(&now, &utc);
    char text[32];
    std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
    return text;
}

/// The commit the results belong to: $MOEGEMM_GIT_COMMIT when set (a build copied to another
/// machine, or configured before the last commit), else the commit at configure time.
std::string git_commit() {
    const char* from_environment = std::getenv("MOEGEMM_GIT_COMMIT");
    return from_environment && *from_environment ? from_environment : MOEGEMM_BENCH_GIT_COMMIT;
}

/// Progress goes to stderr, a line per measurement, so that stdout holds only the report.
template <typename... Args>
void progress(fmt::format_string<Args...> format, Args&&... args) {
    fmt::print(stderr, format, std::forward<Args>(args)...);
    std::fflush(stderr);
}

/// Why the peer `id` is left out of a run with `options`, or empty when it is measured. cuBLAS
/// multiplies fp8 only in cuBLASLt, with one scale per operand.
std::string peer_skip_reason(const std::string& id, const Options& options) {
    if (options.no_peers) return "--no-peers";
    if (options.dtype != MOEGEMM_DTYPE_E4M3) return {};
    if (id == kReferenceId) {
        if (options.scale_mode == MOEGEMM_SCALE_PER_TENSOR) return {};
        return fmt::format("cuBLASLt scales an fp8 matmul per tensor only (scale mode {}); "
                           "measured with --scale-mode per_tensor",
                           scale_mode_name(options.scale_mode));
    }
    if (id == kCublasGroupedId) return "cublasGemmGroupedBatchedEx has no fp8 scales";
    return "measured in bf16 runs only";
}

std::vector<SkippedPeer> skipped_peers(const Options& options) {
    std::vector<SkippedPeer> skipped;
    for (const PeerName& peer : kPeers) {
        std::string reason = peer_skip_reason(peer.id, options);
        if (!reason.empty()) skipped.push_back({peer.id, peer.label, std::move(reason)});
    }
    return skipped;
}

std::vector<BackendSpec> backends_for(Session& session, const WorkloadBuffers& buffers) {
    const CublasContext& cublas = *session.cublas;
    const cudaStream_t stream = session.stream.get();
    const size_t l2_bytes = session.device.l2_bytes;
    const moegemm_backend_t backend = session.options.library_backend;
    const int device = session.options.device;
    const auto eager = [&buffers, backend, device, stream] {
        return make_library_gemm(buffers, backend, device, stream);
    };
    std::vector<BackendSpec> specs = {
        {kLibraryBackendId, fmt::format("libmoegemm[{}]", backend_name(backend)), eager, true},
        {kLibraryGraphId, "libmoegemm[graph]",
         [&buffers, eager, stream] {
             return make_graph_gemm(eager(), buffers.num_sets(), stream);
         }},
    };
    specs.push_back({kLibraryDeviceSizesId, "libmoegemm[device]",
                     [&buffers, backend, device, stream] {
                         return make_library_device_sizes_gemm(buffers, backend, device, stream);
                     },
                     true});
    // Decode-sized workloads only (see kMaskedMaxExpertRows): the MASKED buffers of prefill
    // workloads would be huge.
    if (buffers.workload().max_expert_rows() <= kMaskedMaxExpertRows) {
        specs.push_back({kLibraryMaskedId, "libmoegemm[masked]",
                         [&buffers, backend, device, stream] {
                             return make_library_masked_gemm(buffers, backend, device, stream);
                         },
                         true});
    }
    const std::function<std::unique_ptr<GroupedGemm>()> make_peer[] = {
        [&buffers, &cublas] { return make_cublaslt_loop(buffers, cublas); },
        [&buffers, &cublas] { return make_cublas_grouped(buffers, cublas); },
        [&buffers, &cublas, l2_bytes] { return make_padded_batched(buffers, cublas, l2_bytes); },
    };
    static_assert(std::extent_v<decltype(make_peer)> == std::size(kPeers));
    for (size_t i = 0; i < std::size(kPeers); ++i) {
        if (peer_skip_reason(kPeers[i].id, session.options).empty())
            specs.push_back({kPeers[i].id, kPeers[i].label, make_peer[i]});
    }
    if (session.options.exhaustive) {
        // Every kernel variant, forced; those that cannot serve the workload are left out.
        for (int i = 0; i < moegemm_kernel_count(); ++i) {
            const std::string name = moegemm_kernel_name(i);
            specs.push_back({kKernelIdPrefix + name, fmt::format("libmoegemm[{}]", name),
                             [&buffers, device, stream, name] {
                                 return make_library_gemm(buffers, MOEGEMM_BACKEND_AUTO, device,
                                                          stream, name);
                             }});
        }
    }
    if (session.options.autotune) {
        // Last: a tuned result is the process's choice from then on, for every plan of the
        // same problem and size bucket.
        for (const auto& [id, label, where] :
             {std::tuple{kLibraryTunedId, "libmoegemm[tuned]", MOEGEMM_MEMORY_HOST},
              std::tuple{kLibraryTunedDeviceSizesId, "libmoegemm[tuned device]",
                         MOEGEMM_MEMORY_DEVICE}}) {
            specs.push_back({id, label, [&buffers, backend, device, stream, where = where] {
                                 return make_library_tuned_gemm(buffers, backend, device, where,
                                                                stream);
                             }});
        }
    }
    return specs;
}

/// The floor under each workload's eager host cost on this machine: a bare launch of the
/// library's parameter size whose CTAs stay as long as the library's kernel took, so that it
/// too is launched into a queue of pending kernels (which costs about 1 µs more per launch than
/// an idle queue), timed as the host cost is. After every workload's rows: measured between
/// the rows, these batches of resident do-nothing CTAs slowed the MASKED row timed after them.
/// So the library's reading and this one are taken up to a few minutes apart, and the
/// machine's launch cost drifts by about 1 µs between passes: compare two builds' host cost
/// batch by batch in one process, not across runs.
void measure_bare_launches(Session& session, std::vector<WorkloadResult>& results) {
    const bool dependent_launch = session.device.cc_major >= 9;
    for (WorkloadResult& result : results) {
        const auto library =
            std::find_if(result.backends.begin(), result.backends.end(),
                         [](const BackendResult& b) { return b.id == kLibraryBackendId; });
        if (library == result.backends.end() || !library->ok || library->host_us_per_call < 0)
            continue;
        const auto busy_ns = static_cast<long long>(1e3 * library->timing.median_us);
        try {
            result.bare_launch_host_us = session.timer->host_us_per_call(
                [&](int) {
                    launch_bare_kernel(session.stream.get(), session.device.sm_count,
                                       dependent_launch, busy_ns);
                },
                1, session.policy);
        } catch (const BenchError& error) {
            // A reference, not a result: the run's rows stand without it.
            progress("[bare launch] {}: {}\n", result.workload.name, error.what());
            ensure_device_healthy();
        }
    }
}

/// --exhaustive: how far the heuristic's pick (AUTO) is from the fastest kernel variant.
void print_exhaustive_summary(std::FILE* out, const std::vector<WorkloadResult>& results) {
    fmt::print(out, "\nheuristic pick vs. best kernel variant (time of pick / time of best):\n");
    for (const WorkloadResult& r : results) {
        const BackendResult* pick = nullptr;
        const BackendResult* best = nullptr;
        for (const BackendResult& b : r.backends) {
            if (!b.ok) continue;
            if (b.id == kLibraryBackendId) pick = &b;
            if (is_forced_kernel(b.id) &&
                (!best || b.timing.median_us < best->timing.median_us))
                best = &b;
        }
        if (!pick || !best) continue;
        fmt::print(out, "  {:<24} pick {:>9.1f} µs   best {:>9.1f} µs {:<40} {:.3f}",
                   r.workload.name, pick->timing.median_us, best->timing.median_us, best->label,
                   pick->timing.median_us / best->timing.median_us);
        for (const BackendResult& b : r.backends) {
            if (b.ok && b.id == kLibraryTunedId)
                fmt::print(out, "   tuned {:>9.1f} µs {:.3f}", b.timing.median_us,
                           b.timing.median_us / best->timing.median_us);
        }
        fmt::print(out, "\n");
    }
}

/// Sets up, captures the output of (when `capture`, into `outputs`), and times one backend,
/// with its host cost where the spec asks for it and `host_cost`. A BenchError on the way is
/// recorded in the result (and the run goes on) unless the CUDA context is broken.
BackendResult measure_backend(Session& session, const BackendSpec& spec,
                              const WorkloadBuffers& buffers, WorkloadResult& result,
                              bool capture, bool host_cost,
                              std::map<std::string, std::vector<uint16_t>>& outputs) {
    BackendResult measured;
    measured.id = spec.id;
    measured.label = spec.label;
    try {
        const std::unique_ptr<GroupedGemm> gemm = spec.make();
        measured.plan = gemm->description();
        if (spec.id == kLibraryBackendId) result.plan_description = measured.plan;
        if (capture) {
            if (auto output = capture_output(*gemm, buffers, session.stream.get()))
                outputs[spec.id] = std::move(*output);
        }
        const Timer::Enqueue enqueue = [&](int set) { gemm->enqueue(set); };
        measured.timing = session.timer->measure(enqueue, buffers.num_sets(), session.policy);
        if (spec.host_cost && host_cost) {
            measured.host_us_per_call =
                session.timer->host_us_per_call(enqueue, buffers.num_sets(), session.policy);
        }
        measured.ok = true;
    } catch (const BenchError& error) {
        measured.error_status = error.status();
        measured.error_message = error.what();
        // libmoegemm serves only some fp8 scale modes today (moegemm.h, MOEGEMM_DTYPE_E4M3).
        measured.not_supported =
            !is_peer(spec.id) && buffers.workload().input_type == MOEGEMM_DTYPE_E4M3 &&
            error.status() == moegemm_status_name(MOEGEMM_STATUS_NOT_SUPPORTED);
        if (spec.id == kLibraryBackendId && result.plan_description.empty()) {
            result.plan_description = fmt::format("no plan: {}", error.status());
        }
        ensure_device_healthy();
    }
    return measured;
}

/// --check: every measured backend's D against the reference's. `reference_skipped`: why the
/// run has no reference (see peer_skip_reason), or empty; then nothing is compared and each
/// backend gets a skipped check saying why.
std::vector<CheckResult> check_outputs(
    const std::vector<BackendResult>& backends,
    const std::map<std::string, std::vector<uint16_t>>& outputs,
    const std::string& reference_skipped) {
    std::vector<CheckResult> checks;
    const auto reference = outputs.find(kReferenceId);
    for (const BackendResult& backend : backends) {
        if (backend.id == kReferenceId || !backend.ok) continue;
        CheckResult unchecked;
        unchecked.backend = backend.label;
        unchecked.reference = kReferenceLabel;
        if (!reference_skipped.empty()) {
            unchecked.skipped = true;
            unchecked.note = "no reference: " + reference_skipped;
            checks.push_back(unchecked);
            continue;
        }
        // A failed backend is reported as such; one that writes its own buffers has no output here.
        const auto output = outputs.find(backend.id);
        if (output == outputs.end()) continue;
        if (reference == outputs.end()) {
            unchecked.note = "the reference failed";
            checks.push_back(unchecked);
            continue;
        }
        checks.push_back(
            compare_outputs(backend.label, output->second, kReferenceLabel, reference->second));
    }
    return checks;
}

/// The progress line of one measurement.
void report_progress(const Workload& workload, const Floors& floors,
                     const BackendResult& measured) {
    if (measured.ok) {
        const Throughput t = throughput_of(workload, floors, measured.timing.median_us);
        progress("{:.1f} µs, {:.1f} TFLOP/s, {:.0f}% of floor", measured.timing.median_us,
                 t.tflops, 100.0 * t.floor_fraction);
        progress(" ({:.1f} µs back to back)", measured.timing.back_to_back_us);
        // The floor is a measured ceiling, and a read-only stream may beat the copy rate by a
        // few percent; far above it, the backend skipped work (it went unnoticed once).
        if (t.floor_fraction > 1.15)
            progress(" [{:.0f}% of the floor: is D right?]", 100.0 * t.floor_fraction);
        if (measured.host_us_per_call >= 0.0)
            progress(", host {:.2f} µs per call", measured.host_us_per_call);
        progress("\n");
    } else if (measured.not_supported) {
        progress("not supported: {}\n", measured.error_message);
    } else {
        progress("FAILED: {}: {}\n", measured.error_status, measured.error_message);
    }
}

WorkloadResult run_workload(Session& session, const Workload& workload, int index, int count) {
    WorkloadResult result;
    result.workload = workload;
    result.floors = floors_for(session.ceilings, workload.flops(), workload.min_bytes());

    progress("[{}/{}] {}: filling inputs... ", index, count, workload.name);
    const WorkloadBuffers buffers(workload, session.device.l2_bytes, session.stream.get());
    progress("{} rotation set(s)\n", buffers.num_sets());

    // D of each backend, for --check; not captured when there is no reference to compare with.
    const std::string reference_skipped = peer_skip_reason(kReferenceId, session.options);
    const bool capture = session.options.check && reference_skipped.empty();
    std::map<std::string, std::vector<uint16_t>> outputs;
    // --rounds: every backend in turn, the whole turn repeated; the first round also captures
    // D and the host cost, later ones only time again what the first measured.
    const std::vector<BackendSpec> specs = backends_for(session, buffers);
    const int rounds = std::max(1, session.options.rounds);
    std::vector<std::optional<BackendResult>> measured_of(specs.size());
    std::vector<std::vector<TimingStats>> timings_of(specs.size());
    for (int round = 0; round < rounds; ++round) {
        for (size_t i = 0; i < specs.size(); ++i) {
            const BackendSpec& spec = specs[i];
            if (round > 0 && !(measured_of[i] && measured_of[i]->ok)) continue;
            if (rounds > 1) {
                progress("[{}/{}] {} (round {}/{}): {}... ", index, count, workload.name,
                         round + 1, rounds, spec.label);
            } else {
                progress("[{}/{}] {}: {}... ", index, count, workload.name, spec.label);
            }
            BackendResult measured = measure_backend(session, spec, buffers, result,
                                                     capture && round == 0, round == 0, outputs);
            if (round == 0 && !measured.ok && is_forced_kernel(spec.id) &&
                measured.error_status == moegemm_status_name(MOEGEMM_STATUS_NOT_SUPPORTED)) {
                progress("not applicable\n");
                continue;
            }
            report_progress(workload, result.floors, measured);
            if (measured.ok) timings_of[i].push_back(measured.timing);
            if (round == 0) {
                measured_of[i] = std::move(measured);
            } else if (!measured.ok) {
                measured_of[i] = std::move(measured);  // a later round's failure is the result
            }
        }
    }
    for (size_t i = 0; i < specs.size(); ++i) {
        if (!measured_of[i]) continue;
        BackendResult measured = std::move(*measured_of[i]);
        if (measured.ok) measured.timing = combine_rounds(timings_of[i]);
        result.backends.push_back(std::move(measured));
    }
    if (session.options.check)
        result.checks = check_outputs(result.backends, outputs, reference_skipped);
    return result;
}

/// Returns false, after saying why on stderr, when there is no GPU to measure.
bool gpu_available() {
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    if (error == cudaSuccess && count > 0) return true;
    const std::string why = error != cudaSuccess
                                ? fmt::format("cudaGetDeviceCount: {}: {}", cudaGetErrorName(error),
                                              cudaGetErrorString(error))
                                : std::string("cudaGetDeviceCount found 0 devices");
    fmt::print(stderr, "moegemm-bench: no CUDA GPU available ({}); nothing to measure\n", why);
    return false;
}

int run(int argc, const char* const* argv) {
    Session session;
    session.options = parse_options(argc, argv);
    if (session.options.help) {
        fmt::print("{}", usage_text());
        return kExitSuccess;
    }
    set_library_plan_options(session.options.plan_options);
    session.policy.min_reps = session.options.min_reps;
    session.policy.min_time_ms = session.options.min_time_ms;
    session.policy.warmup_ms = session.options.warmup_ms;

    // The workload file is read before looking for a GPU, so that a bad file is reported anywhere.
    RunInfo run_info;
    run_info.workloads_path = session.options.workloads_path.empty()
                                  ? default_workloads_path()
                                  : session.options.workloads_path;
    std::vector<Workload> workloads =
        select_workloads(load_workloads(run_info.workloads_path), session.options.only);
    for (Workload& workload : workloads) {
        workload.input_type = session.options.dtype;
        workload.scale_mode = session.options.scale_mode;
    }

    if (!gpu_available()) return kExitNoGpu;
    int device_count = 0;
    BENCH_CUDA_CHECK(cudaGetDeviceCount(&device_count));
    if (session.options.device >= device_count) {
        throw UsageError(fmt::format("--device {}: this machine has {} CUDA device(s)",
                                     session.options.device, device_count));
    }
    BENCH_CUDA_CHECK(cudaSetDevice(session.options.device));

    session.stream = make_stream();
    session.cublas = std::make_unique<CublasContext>(session.stream.get(), kPeerWorkspaceBytes);
    session.timer = std::make_unique<Timer>(session.stream.get());
    session.device = query_device_info(session.options.device, session.cublas->blas());

    run_info.date_utc = utc_now();
    run_info.git_commit = git_commit();
    run_info.library_version = moegemm_get_version_string();
    run_info.library_version_number = moegemm_get_version();
    if (run_info.library_version_number != MOEGEMM_VERSION) {
        fmt::print(stderr,
                   "moegemm-bench: warning: libmoegemm reports version {} but was built against "
                   "header {}\n",
                   run_info.library_version_number, MOEGEMM_VERSION);
    }
    run_info.options = session.options;
    run_info.policy = session.policy;
    run_info.device = session.device;
    run_info.skipped_peers = skipped_peers(session.options);
    progress("moegemm-bench: {} ({} SMs), libmoegemm {}, {} workload(s) from {}\n",
             session.device.name, session.device.sm_count, run_info.library_version,
             workloads.size(), run_info.workloads_path);

    progress("[ceilings] dense {} GEMM {}^3 (cuBLASLt)... ", dtype_name(session.options.dtype),
             kDenseGemmSize);
    measure_dense_gemm(session.ceilings, *session.timer, session.policy, *session.cublas,
                       session.options.dtype);
    progress("{:.1f} TFLOP/s\n", session.ceilings.dense_tflops);
    progress("[ceilings] device-to-device copy... ");
    measure_device_copy(session.ceilings, *session.timer, session.policy);
    progress("{:.0f} GB/s (read + write)\n", session.ceilings.copy_gbps);
    run_info.ceilings = session.ceilings;

    std::vector<WorkloadResult> results;
    for (size_t i = 0; i < workloads.size(); ++i) {
        results.push_back(run_workload(session, workloads[i], static_cast<int>(i) + 1,
                                       static_cast<int>(workloads.size())));
    }
    measure_bare_launches(session, results);

    print_report(stdout, run_info, results);
    if (session.options.exhaustive) print_exhaustive_summary(stdout, results);

    std::vector<std::string> json_paths;
    if (!session.options.json_path.empty()) json_paths.push_back(session.options.json_path);
    if (const char* out = std::getenv("OUT"); out && *out)
        json_paths.push_back(std::string(out) + "/bench.json");
    for (const std::string& path : json_paths) {
        write_json_report(path, run_info, results);
        progress("moegemm-bench: wrote {}\n", path);
    }
    return has_failures(results) ? kExitSomeFailed : kExitSuccess;
}

}  // namespace

}  // namespace moegemm_bench

int main(int argc, char** argv) {
    using namespace moegemm_bench;
    try {
        return run(argc, argv);
    } catch (const UsageError& error) {
        fmt::print(stderr, "moegemm-bench: {}\n(see moegemm-bench --help)\n", error.what());
    } catch (const BenchError& error) {
        fmt::print(stderr, "moegemm-bench: error: {} [{}]\n", error.what(), error.status());
    } catch (const std::exception& error) {
        fmt::print(stderr, "moegemm-bench: error: {}\n", error.what());
    }
    return kExitError;
}

#include "report.hpp"

#include "device_kernels.hpp"
#include "cuda_utils.hpp"
#include "json_writer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>

namespace moegemm_bench {

namespace {

const BackendResult* find_library(const WorkloadResult& result) {
    for (const BackendResult& backend : result.backends) {
        if (backend.id == kLibraryBackendId) return &backend;
    }
    return nullptr;
}

/// Peer time over library time (> 1: the library is faster); NaN when either failed.
double ratio_to_library(const WorkloadResult& result, const BackendResult& backend) {
    const BackendResult* library = find_library(result);
    if (!library || !library->ok || !backend.ok) return NAN;
    return backend.timing.median_us / library->timing.median_us;
}

std::string mib_text(double bytes) {
    return fmt::format("{:.0f} MiB", bytes / (1 << 20));
}

std::string percent(double fraction) {
    return fmt::format("{:.1f}%", 100.0 * fraction);
}

/// "bf16", or "e4m3 (per-tensor scales)": the inputs of the dense GEMM ceiling.
std::string dense_gemm_text(const Ceilings& ceilings) {
    const char* type = dtype_name(ceilings.dense_input_type);
    return ceilings.dense_input_type == MOEGEMM_DTYPE_E4M3
               ? fmt::format("{} (per-tensor scales)", type)
               : std::string(type);
}

// --- table ------------------------------------------------------------------------------------

/// Column widths of the table; the text columns fit their longest entry.
struct Columns {
    int workload = 8;
    int backend = 7;
    static constexpr int rows = 7, active = 8, floor = 9, bound = 8, time = 10, tflops = 8,
                         gbps = 8, compute = 8, memory = 8, ratio = 8;
};

void print_header(std::FILE* out, const RunInfo& run) {
    const DeviceInfo& d = run.device;
    const Ceilings& c = run.ceilings;
    fmt::print(out, "moegemm-bench: libmoegemm {} (commit {}), {}\n", run.library_version,
               run.git_commit, run.date_utc);
    for (const std::string& setting : moegemm::changed_plan_options(run.options.plan_options))
        fmt::print(out, "plan option (--set): {}\n", setting);
    fmt::print(out, "device {}: {}, sm_{}{}, {} SMs, SM clock {} MHz, ", d.ordinal, d.name,
               d.cc_major, d.cc_minor, d.sm_count, d.clock_khz / 1000);
    fmt::print(out, "memory clock {} MHz x {} bit, L2 {}, {:.1f} GiB memory\n",
               d.memory_clock_khz / 1000, d.memory_bus_width_bits,
               mib_text(static_cast<double>(d.l2_bytes)),
               static_cast<double>(d.global_memory_bytes) / (1 << 30));
    fmt::print(
        out,
        "software: driver {}, CUDA runtime {}, cuBLAS {}, cuBLASLt {}; libmoegemm backend {}\n",
        cuda_version_text(d.driver_version), cuda_version_text(d.runtime_version),
        cublas_version_text(static_cast<size_t>(d.cublas_version)),
        cublas_version_text(d.cublaslt_version), backend_name(run.options.library_backend));
    fmt::print(out,
               "ceilings: dense {} cuBLASLt GEMM {}^3 {:.1f} TFLOP/s ({:.1f} µs); "
               "device copy {:.0f} GB/s read + write ({}, {:.1f} µs)\n",
               dense_gemm_text(c), c.dense_size, c.dense_tflops, c.dense.median_us, c.copy_gbps,
               mib_text(static_cast<double>(c.copy_bytes)), c.copy.median_us);
    if (run.options.dtype == MOEGEMM_DTYPE_E4M3) {
        fmt::print(out,
                   "inputs: A and B e4m3 (random codes, |x| in [0.25, 3.75]), scale mode {} "
                   "(random scales in [0.5, 2)), D bf16; FLOPs and min bytes count 1 byte per "
                   "A and B element\n",
                   scale_mode_name(run.options.scale_mode));
    }
    for (const SkippedPeer& peer : run.skipped_peers)
        fmt::print(out, "not measured: {}: {}\n", peer.label, peer.reason);
    fmt::print(
        out,
        "timing: median of >= {} repetitions and >= {:.0f} ms per measurement, after warm-up; "
        "inputs rotated while one set fits in 2x L2\n",
        run.policy.min_reps, run.policy.min_time_ms);
    if (run.options.rounds > 1) {
        fmt::print(out,
                   "rounds: each workload's rows measured in turn {} times; a row's time is the "
                   "median of its rounds' medians\n",
                   run.options.rounds);
    }
    fmt::print(out,
               "floor = max(FLOPs / dense rate, min bytes / copy rate); FLOPs = 2 sum(M_e) N K; "
               "min bytes = A + D + B of experts with rows\n");
    fmt::print(out,
               "vs lib = time / time of the workload's first row, eager libmoegemm (VARIABLE, "
               "host sizes); libmoegemm[graph]:\n  the same call replayed from a CUDA graph; "
               "libmoegemm[masked]: MASKED layout, device sizes (workloads of <= {} rows per "
               "expert)\n\n",
               kMaskedMaxExpertRows);
}

void print_table(std::FILE* out, const std::vector<WorkloadResult>& results) {
    Columns w;
    for (const WorkloadResult& result : results) {
        w.workload = std::max<int>(w.workload, static_cast<int>(result.workload.name.size()));
        for (const BackendResult& backend : result.backends) {
            w.backend = std::max<int>(w.backend, static_cast<int>(backend.label.size()));
        }
    }
    const std::string header = fmt::format(
        "{:<{}} {:>{}} {:>{}} {:>{}} {:<{}} {:<{}} {:>{}} {:>{}} {:>{}} {:>{}} {:>{}} {:>{}}",
        "workload", w.workload, "rows", w.rows, "active", w.active, "floor µs", w.floor, "bound",
        w.bound, "backend", w.backend, "time µs", w.time, "TFLOP/s", w.tflops, "GB/s", w.gbps,
        "%compute", w.compute, "%memory", w.memory, "vs lib", w.ratio);
    fmt::print(out, "{}\n{}\n", header, std::string(header.size() - 2, '-'));  // "µ" is 2 bytes

    for (const WorkloadResult& result : results) {
        const Workload& workload = result.workload;
        bool first = true;
        for (const BackendResult& backend : result.backends) {
            // The workload's columns, floor included (it does not depend on the backend), are
            // printed on its first row only.
            std::string line = fmt::format(
                "{:<{}} {:>{}} {:>{}} {:>{}} {:<{}} {:<{}} ", first ? workload.name : "",
                w.workload, first ? std::to_string(workload.total_rows()) : "", w.rows,
                first ? fmt::format("{}/{}", workload.active_experts(), workload.experts) : "",
                w.active, first ? fmt::format("{:.1f}", result.floors.floor_us()) : "", w.floor,
                first ? result.floors.bound() : "", w.bound, backend.label, w.backend);
            first = false;
            if (backend.not_supported) {
                line += "not supported";
            } else if (!backend.ok) {
                line += fmt::format("FAILED: {}", backend.error_status);
            } else {
                const Throughput t =
                    throughput_of(workload, result.floors, backend.timing.median_us);
                const double ratio = ratio_to_library(result, backend);
                const bool show_ratio = backend.id != kLibraryBackendId && !std::isnan(ratio);
                line += fmt::format("{:>{}.1f} {:>{}.1f} {:>{}.0f} {:>{}} {:>{}} {:>{}}",
                                    backend.timing.median_us, w.time, t.tflops, w.tflops, t.gbps,
                                    w.gbps, percent(t.compute_fraction), w.compute,
                                    percent(t.bandwidth_fraction), w.memory,
                                    show_ratio ? fmt::format("{:.2f}x", ratio) : "", w.ratio);
            }
            line.erase(line.find_last_not_of(' ') + 1);
            fmt::print(out, "{}\n", line);
        }
    }
}

/// Geometric means of ratios per label, printed in the order the labels were first seen.
class LogMeans {
public:
    void add(const std::string& label, double ratio) {
        if (!logs_.count(label)) order_.push_back(label);
        logs_[label].first += std::log(ratio);
        logs_[label].second += 1;
    }
    bool empty() const { return order_.empty(); }
    void print(std::FILE* out) const {
        for (const std::string& label : order_) {
            const auto [sum, count] = logs_.at(label);
            fmt::print(out, "  {:<20} {:.2f}x over {} workloads\n", label, std::exp(sum / count),
                       count);
        }
    }

private:
    std::vector<std::string> order_;
    std::map<std::string, std::pair<double, int>> logs_;  // sum of log ratios, count
};

void print_geomeans(std::FILE* out, const std::vector<WorkloadResult>& results) {
    LogMeans peers, variants, best_peer;
    for (const WorkloadResult& result : results) {
        double best = NAN;
        for (const BackendResult& backend : result.backends) {
            const double ratio = ratio_to_library(result, backend);
            if (backend.id == kLibraryBackendId || std::isnan(ratio)) continue;
            if (is_peer(backend.id)) {
                peers.add(backend.label, ratio);
                best = std::isnan(best) ? ratio : std::min(best, ratio);
            } else if (!is_forced_kernel(backend.id)) {  // --exhaustive has its own summary
                variants.add(backend.label, ratio);
            }
        }
        if (!std::isnan(best)) best_peer.add("best peer", best);
    }
    if (!peers.empty()) {
        fmt::print(out,
                   "\npeer time / libmoegemm time, geometric mean over the workloads both ran "
                   "(> 1: libmoegemm faster):\n");
        peers.print(out);
        best_peer.print(out);
    }
    if (!variants.empty()) {
        fmt::print(out,
                   "\nlibmoegemm variant time / eager libmoegemm time, geometric mean over the "
                   "workloads both ran (< 1: the variant faster):\n");
        variants.print(out);
    }
}

/// libmoegemm's host cost per call, on the workloads and backends where it was measured.
void print_host_costs(std::FILE* out, const RunInfo& run,
                      const std::vector<WorkloadResult>& results) {
    bool any = false;
    for (const WorkloadResult& result : results) {
        std::string line;
        for (const BackendResult& backend : result.backends) {
            if (!backend.ok || backend.host_us_per_call < 0.0) continue;
            line += fmt::format("{}{} {:.2f} µs", line.empty() ? "" : ", ", backend.label,
                                backend.host_us_per_call);
        }
        if (line.empty()) continue;
        if (result.bare_launch_host_us >= 0.0)
            line += fmt::format("; bare launch {:.2f} µs", result.bare_launch_host_us);
        if (!any) {
            fmt::print(out,
                       "\nlibmoegemm host cost per moegemm_execute (CPU time of the calling "
                       "thread, median of {} batches of {} back-to-back calls), and, timed the "
                       "same way after all rows, a bare launch with the library's parameter size "
                       "({} bytes) and launch attributes of a kernel that stays as long as the "
                       "library's:\n",
                       run.policy.host_batches, run.policy.host_calls_per_batch,
                       kBareLaunchParamBytes);
            any = true;
        }
        fmt::print(out, "  {:<24} {}\n", result.workload.name, line);
    }
}

/// The backends that were not measured, under `title`: those libmoegemm does not support
/// (`not_supported`) or those that failed, each with its status and message.
void print_unmeasured(std::FILE* out, const std::vector<WorkloadResult>& results,
                      bool not_supported, const char* title) {
    bool any = false;
    for (const WorkloadResult& result : results) {
        for (const BackendResult& backend : result.backends) {
            if (backend.ok || backend.not_supported != not_supported) continue;
            if (!any) {
                fmt::print(out, "\n{}\n", title);
                any = true;
            }
            fmt::print(out, "  {} / {}: {}: {}\n", result.workload.name, backend.label,
                       backend.error_status, backend.error_message);
        }
    }
}

void print_notes(std::FILE* out, const std::vector<WorkloadResult>& results) {
    fmt::print(out, "\nlibmoegemm plans (moegemm_plan_describe):\n");
    for (const WorkloadResult& result : results) {
        fmt::print(out, "  {}: {}\n", result.workload.name, result.plan_description);
        // The MASKED plan, with device sizes, may pick another kernel (from expected_rows).
        for (const BackendResult& backend : result.backends) {
            if ((backend.id == kLibraryMaskedId || backend.id == kLibraryDeviceSizesId ||
                 backend.id == kLibraryTunedId || backend.id == kLibraryTunedDeviceSizesId) &&
                !backend.plan.empty())
                fmt::print(out, "  {} {}: {}\n", result.workload.name, backend.label, backend.plan);
        }
    }

    bool any_check = false;
    for (const WorkloadResult& result : results) {
        for (const CheckResult& check : result.checks) {
            if (!any_check) {
                fmt::print(out,
                           "\nchecks (max |D - D_ref| / max |D_ref|, tolerance {:g}; Frobenius "
                           "relative error):\n",
                           kCheckTolerance);
                any_check = true;
            }
            if (!check.compared) {
                fmt::print(out, "  {} / {} vs {}: {}: {}\n", result.workload.name,
                           check.backend, check.reference,
                           check.skipped ? "skipped" : "not compared", check.note);
                continue;
            }
            fmt::print(out, "  {} / {} vs {}: {} max {:.3e}, Frobenius {:.3e}{}{}\n",
                       result.workload.name, check.backend, check.reference,
                       check.passed ? "ok  " : "FAIL", check.max_error, check.frobenius_error,
                       check.note.empty() ? "" : "; ", check.note);
        }
    }

    print_unmeasured(out, results, true,
                     "not supported (libmoegemm serves no kernel for these fp8 inputs and scales "
                     "in this build or on this device):");
    print_unmeasured(out, results, false, "failures:");
}

// --- JSON -------------------------------------------------------------------------------------

void write_timing(JsonWriter& json, const TimingStats& timing) {
    json.field("median_us", timing.median_us);
    json.field("min_us", timing.min_us);
    json.field("max_us", timing.max_us);
    json.field("mean_us", timing.mean_us);
    json.field("back_to_back_us", timing.back_to_back_us);
    json.field("reps", timing.reps);
    json.field("warmup_reps", timing.warmup_reps);
    json.field("rotation_sets", timing.rotation_sets);
    json.key("round_median_us");
    json.begin_array();
    for (double median : timing.round_median_us) json.value(median);
    json.end_array();
}

void write_run(JsonWriter& json, const RunInfo& run) {
    json.field("tool", "moegemm-bench");
    json.field("schema_version", 1);
    json.field("date_utc", run.date_utc);
    json.field("git_commit", run.git_commit);

    json.key("library");
    json.begin_object();
    json.field("version", run.library_version);
    json.field("version_number", run.library_version_number);
    json.field("backend", backend_name(run.options.library_backend));
    json.key("plan_options");
    json.begin_array();
    for (const std::string& setting : moegemm::changed_plan_options(run.options.plan_options))
        json.value(setting);
    json.end_array();
    json.end_object();

    const DeviceInfo& d = run.device;
    json.key("device");
    json.begin_object();
    json.field("ordinal", d.ordinal);
    json.field("name", d.name);
    json.field("compute_capability", fmt::format("{}.{}", d.cc_major, d.cc_minor));
    json.field("sm_count", d.sm_count);
    json.field("clock_khz", d.clock_khz);
    json.field("memory_clock_khz", d.memory_clock_khz);
    json.field("memory_bus_width_bits", d.memory_bus_width_bits);
    json.field("l2_bytes", d.l2_bytes);
    json.field("global_memory_bytes", d.global_memory_bytes);
    json.end_object();

    json.key("software");
    json.begin_object();
    json.field("driver_version", d.driver_version);
    json.field("driver", cuda_version_text(d.driver_version));
    json.field("runtime_version", d.runtime_version);
    json.field("runtime", cuda_version_text(d.runtime_version));
    json.field("cublas_version", d.cublas_version);
    json.field("cublaslt_version", d.cublaslt_version);
    json.end_object();

    json.key("settings");
    json.begin_object();
    json.field("workloads_file", run.workloads_path);
    json.field("min_reps", run.policy.min_reps);
    json.field("min_time_ms", run.policy.min_time_ms);
    json.field("warmup_ms", run.policy.warmup_ms);
    json.field("rounds", run.options.rounds);
    json.field("host_cost_batches", run.policy.host_batches);
    json.field("host_cost_calls_per_batch", run.policy.host_calls_per_batch);
    json.field("check", run.options.check);
    json.field("check_tolerance", kCheckTolerance);
    json.field("dtype", dtype_name(run.options.dtype));
    json.field("scale_mode", scale_mode_name(run.options.scale_mode));
    // Backend id -> why the run leaves it out.
    json.key("skipped_peers");
    json.begin_object();
    for (const SkippedPeer& peer : run.skipped_peers) json.field(peer.id, peer.reason);
    json.end_object();
    json.end_object();

    const Ceilings& c = run.ceilings;
    json.key("ceilings");
    json.begin_object();
    // "dense_bf16_gemm" or "dense_e4m3_gemm": a reader of bf16 runs never mistakes an fp8 rate
    // for the bf16 one.
    json.key(fmt::format("dense_{}_gemm", dtype_name(c.dense_input_type)));
    json.begin_object();
    json.field("input_type", dtype_name(c.dense_input_type));
    if (c.dense_input_type == MOEGEMM_DTYPE_E4M3) json.field("scale_mode", "per_tensor");
    json.field("m", c.dense_size);
    json.field("n", c.dense_size);
    json.field("k", c.dense_size);
    json.field("tflops", c.dense_tflops);
    write_timing(json, c.dense);
    json.end_object();
    json.key("device_copy");
    json.begin_object();
    json.field("bytes_each_way", c.copy_bytes);
    json.field("gbps_read_plus_write", c.copy_gbps);
    write_timing(json, c.copy);
    json.end_object();
    json.end_object();
}

void write_workload(JsonWriter& json, const WorkloadResult& result) {
    const Workload& w = result.workload;
    json.begin_object();
    json.field("name", w.name);
    json.field("experts", w.experts);
    json.field("n", w.n);
    json.field("k", w.k);
    json.key("rows");
    json.begin_array();
    for (const int32_t rows : w.rows) json.value(rows);
    json.end_array();
    json.field("total_rows", w.total_rows());
    json.field("active_experts", w.active_experts());
    json.field("min_expert_rows", w.min_expert_rows());
    json.field("max_expert_rows", w.max_expert_rows());
    json.field("flops", w.flops());
    json.field("min_bytes", w.min_bytes());
    json.field("compute_floor_us", result.floors.compute_us);
    json.field("bandwidth_floor_us", result.floors.bandwidth_us);
    json.field("floor_us", result.floors.floor_us());
    json.field("bound", result.floors.bound());
    json.field("plan", result.plan_description);
    if (result.bare_launch_host_us >= 0.0)
        json.field("bare_launch_host_us", result.bare_launch_host_us);

    json.key("backends");
    json.begin_array();
    for (const BackendResult& backend : result.backends) {
        json.begin_object();
        json.field("backend", backend.id);
        json.field("label", backend.label);
        json.field("ok", backend.ok);
        if (!backend.plan.empty()) json.field("plan", backend.plan);
        if (backend.ok) {
            write_timing(json, backend.timing);
            const Throughput t =
                throughput_of(result.workload, result.floors, backend.timing.median_us);
            json.field("tflops", t.tflops);
            json.field("gbps", t.gbps);
            json.field("compute_floor_fraction", t.compute_fraction);
            json.field("bandwidth_floor_fraction", t.bandwidth_fraction);
            json.field("floor_fraction", t.floor_fraction);
            json.field("time_over_library", ratio_to_library(result, backend));
            if (backend.host_us_per_call >= 0.0)
                json.field("host_us_per_call", backend.host_us_per_call);
        } else {
            if (backend.not_supported) json.field("not_supported", true);
            json.field("status", backend.error_status);
            json.field("message", backend.error_message);
        }
        json.end_object();
    }
    json.end_array();

    if (!result.checks.empty()) {
        json.key("checks");
        json.begin_array();
        for (const CheckResult& check : result.checks) {
            json.begin_object();
            json.field("backend", check.backend);
            json.field("reference", check.reference);
            json.field("compared", check.compared);
            json.field("passed", check.passed);
            if (check.skipped) json.field("skipped", true);
            if (check.compared) {
                json.field("max_error", check.max_error);
                json.field("frobenius_error", check.frobenius_error);
            }
            json.field("note", check.note);
            json.end_object();
        }
        json.end_array();
    }
    json.end_object();
}

/// CUDA 13 removed the clock fields from cudaDeviceProp; attributes remain. A device that does
/// not report one gets 0, not an error: it is information, not something the bench needs.
int optional_attribute(cudaDeviceAttr attribute, int ordinal) {
    int value = 0;
    if (cudaDeviceGetAttribute(&value, attribute, ordinal) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return value;
}

}  // namespace

bool is_forced_kernel(const std::string& id) {
    return id.rfind(kKernelIdPrefix, 0) == 0;
}

bool is_peer(const std::string& id) {
    return id != kLibraryBackendId && id != kLibraryGraphId && id != kLibraryMaskedId &&
           id != kLibraryDeviceSizesId && id != kLibraryTunedId &&
           id != kLibraryTunedDeviceSizesId && !is_forced_kernel(id);
}

Throughput throughput_of(const Workload& workload, const Floors& floors, double time_us) {
    Throughput t;
    t.tflops = workload.flops() / (time_us * 1e-6) / 1e12;
    t.gbps = workload.min_bytes() / (time_us * 1e-6) / 1e9;
    t.compute_fraction = floors.compute_us / time_us;
    t.bandwidth_fraction = floors.bandwidth_us / time_us;
    t.floor_fraction = floors.floor_us() / time_us;
    return t;
}

bool has_failures(const std::vector<WorkloadResult>& results) {
    for (const WorkloadResult& result : results) {
        for (const BackendResult& backend : result.backends) {
            if (!backend.ok && !backend.not_supported) return true;
        }
        for (const CheckResult& check : result.checks) {
            if (!check.passed && !check.skipped) return true;
        }
    }
    return false;
}

void print_report(std::FILE* out, const RunInfo& run, const std::vector<WorkloadResult>& results) {
    print_header(out, run);
    print_table(out, results);
    print_geomeans(out, results);
    print_host_costs(out, run, results);
    print_notes(out, results);
    std::fflush(out);
}

void write_json_report(const std::string& path, const RunInfo& run,
                       const std::vector<WorkloadResult>& results) {
    std::string text;
    JsonWriter json(text);
    json.begin_object();
    write_run(json, run);
    json.key("workloads");
    json.begin_array();
    for (const WorkloadResult& result : results) write_workload(json, result);
    json.end_array();
    json.end_object();

    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file << text;
    file.close();
    if (!file) {
        throw BenchError("io error",
                         fmt::format("cannot write '{}': {}", path, std::strerror(errno)));
    }
}

DeviceInfo query_device_info(int ordinal, cublasHandle_t blas) {
    DeviceInfo info;
    info.ordinal = ordinal;
    cudaDeviceProp properties{};
    BENCH_CUDA_CHECK(cudaGetDeviceProperties(&properties, ordinal));
    info.name = properties.name;
    info.cc_major = properties.major;
    info.cc_minor = properties.minor;
    info.sm_count = properties.multiProcessorCount;
    info.l2_bytes = static_cast<size_t>(properties.l2CacheSize);
    info.global_memory_bytes = properties.totalGlobalMem;
    info.clock_khz = optional_attribute(cudaDevAttrClockRate, ordinal);
    info.memory_clock_khz = optional_attribute(cudaDevAttrMemoryClockRate, ordinal);
    info.memory_bus_width_bits = optional_attribute(cudaDevAttrGlobalMemoryBusWidth, ordinal);

    BENCH_CUDA_CHECK(cudaDriverGetVersion(&info.driver_version));
    BENCH_CUDA_CHECK(cudaRuntimeGetVersion(&info.runtime_version));
    BENCH_CUBLAS_CHECK(cublasGetVersion(blas, &info.cublas_version));
    info.cublaslt_version = cublasLtGetVersion();
    return info;
}

std::string cuda_version_text(int version) {
    return fmt::format("{}.{}", version / 1000, (version % 1000) / 10);
}

std::string cublas_version_text(size_t version) {
    return fmt::format("{}.{}.{}", version / 10000, (version % 10000) / 100, version % 100);
}

}  // namespace moegemm_bench

// Results of a moegemm-bench run, and the two ways they are written: an aligned table for
// people and JSON for tools.
#pragma once

#include "ceilings.hpp"
#include "options.hpp"
#include "output_check.hpp"
#include "timing.hpp"
#include "workloads.hpp"

#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace moegemm_bench {

/// What the results were measured on: device, clocks and the versions of every component.
struct DeviceInfo {
    int ordinal = 0;
    std::string name;
    int cc_major = 0;
    int cc_minor = 0;
    int sm_count = 0;
    int clock_khz = 0;         ///< peak SM clock (cudaDevAttrClockRate); 0 if unknown
    int memory_clock_khz = 0;  ///< peak memory clock (cudaDevAttrMemoryClockRate); 0 if unknown
    int memory_bus_width_bits = 0;  ///< 0 if unknown
    size_t l2_bytes = 0;
    size_t global_memory_bytes = 0;

    int driver_version = 0;   ///< cudaDriverGetVersion: 1000 * major + 10 * minor
    int runtime_version = 0;  ///< cudaRuntimeGetVersion, same encoding
    int cublas_version = 0;   ///< cublasGetVersion: 10000 * major + 100 * minor + patch
    size_t cublaslt_version = 0;
};

/// Queries the device (the current one must be `ordinal`). Throws BenchError.
DeviceInfo query_device_info(int ordinal, cublasHandle_t blas);

/// "13.0" from 13000.
std::string cuda_version_text(int version);
/// "13.1.0" from 130100.
std::string cublas_version_text(size_t version);


/// BackendResult::id of libmoegemm called eagerly (VARIABLE, host sizes): what every other
/// backend's time is held against.
inline constexpr const char* kLibraryBackendId = "library";
/// The same plan replayed from a CUDA graph captured per rotation set.
inline constexpr const char* kLibraryGraphId = "library_graph";
/// The MASKED layout with device sizes, measured only on workloads whose largest expert has at
/// most kMaskedMaxExpertRows rows (decode): its slabs hold twice the largest expert's rows for
/// every expert, which for prefill would take gigabytes per rotation set.
inline constexpr const char* kLibraryMaskedId = "library_masked";
/// The VARIABLE layout with the sizes in device memory (the graph-safe form of the eager row),
/// expected_rows = mean rows per expert: every workload.
inline constexpr const char* kLibraryDeviceSizesId = "library_device_sizes";
/// --autotune: the eager plan and the device-sizes plan after moegemm_plan_autotune.
inline constexpr const char* kLibraryTunedId = "library_tuned";
inline constexpr const char* kLibraryTunedDeviceSizesId = "library_tuned_device_sizes";
inline constexpr int32_t kMaskedMaxExpertRows = 256;
/// The cuBLAS peers (peer_gemms.cpp); the cuBLASLt loop is the reference of --check.
inline constexpr const char* kCublasLtLoopId = "cublaslt_loop";
inline constexpr const char* kCublasGroupedId = "cublas_grouped";
inline constexpr const char* kPaddedBatchedId = "padded_batched";
/// Ids of --exhaustive candidates: this prefix and the kernel name.
inline constexpr const char* kKernelIdPrefix = "kernel:";

/// Whether a backend is one of libmoegemm's kernels forced by name (--exhaustive).
bool is_forced_kernel(const std::string& id);
/// Whether a backend is a peer: anything but libmoegemm in any form.
bool is_peer(const std::string& id);

/// One backend measured on one workload.
struct BackendResult {
    std::string id;     ///< stable JSON key: "library", "library_graph", "library_masked",
                        ///< "cublaslt_loop", "cublas_grouped", "padded_batched", "kernel:NAME"
    std::string label;  ///< table label: "libmoegemm[auto]", "cublaslt-loop", ...
    bool ok = false;
    TimingStats timing;  ///< valid when ok
    /// CPU time per enqueue() (Timer::host_us_per_call) where measured (the eager and masked
    /// libmoegemm calls), else negative.
    double host_us_per_call = -1.0;
    std::string plan;          ///< moegemm_plan_describe for libmoegemm's rows; empty for peers
    /// When !ok in an fp8 run: libmoegemm answered MOEGEMM_STATUS_NOT_SUPPORTED, i.e. this
    /// build or device has no kernel for the scale mode (moegemm.h, MOEGEMM_DTYPE_E4M3).
    /// Reported as such, not as a failure.
    bool not_supported = false;
    std::string error_status;  ///< when !ok: the status name (MOEGEMM_STATUS_...,
                               ///< CUBLAS_STATUS_..., cuda...)
    std::string error_message;
};

struct WorkloadResult {
    Workload workload;
    Floors floors;                        ///< of this workload, against the run's ceilings
    std::string plan_description;         ///< moegemm_plan_describe, or why there is no plan
    std::vector<BackendResult> backends;  ///< the library, its variants, then the peers
    std::vector<CheckResult> checks;      ///< with --check
    /// Host cost of a bare kernel launch of the library's parameter size whose CTAs stay for the
    /// library's kernel time (launch_bare_kernel), measured after all of the run's rows; < 0:
    /// not measured.
    double bare_launch_host_us = -1.0;
};

/// A peer that the run's options leave out, and why (fp8 runs: cuBLAS has no such fp8 GEMM).
struct SkippedPeer {
    std::string id;
    std::string label;
    std::string reason;
};

/// Everything about the run that is not a per-workload number.
struct RunInfo {
    std::string date_utc;
    std::string git_commit;
    std::string library_version;  ///< moegemm_get_version_string()
    int library_version_number = 0;
    std::string workloads_path;
    Options options;
    TimingPolicy policy;
    DeviceInfo device;
    Ceilings ceilings;
    std::vector<SkippedPeer> skipped_peers;
};

/// What one time means for a workload, against the ceilings of the same run.
struct Throughput {
    double tflops = 0.0;              ///< valid-row FLOPs per second
    double gbps = 0.0;                ///< minimum bytes per second
    double compute_fraction = 0.0;    ///< compute floor / time
    double bandwidth_fraction = 0.0;  ///< bandwidth floor / time
    double floor_fraction = 0.0;      ///< the larger floor / time
};

Throughput throughput_of(const Workload& workload, const Floors& floors, double time_us);

/// True when a backend failed (not_supported aside) or a check failed (skipped aside) anywhere
/// in the run.
bool has_failures(const std::vector<WorkloadResult>& results);

/// The header, the table (one row per workload and backend), the geometric means of the peers'
/// and libmoegemm variants' times over the eager library's, libmoegemm's host cost per call, the
/// plans, the checks and the failures' messages.
void print_report(std::FILE* out, const RunInfo& run, const std::vector<WorkloadResult>& results);

/// The same as JSON (schema in bench/README.md). Throws BenchError if the file cannot be written.
void write_json_report(const std::string& path, const RunInfo& run,
                       const std::vector<WorkloadResult>& results);

}  // namespace moegemm_bench

// Results of a moegemm-bench run, and the two ways they are written: an aligned table for
// people and JSON for tools.
#pragma once

#include "ceilings.hpp"
#include "device_info.hpp"
#include "options.hpp"
#include "output_check.hpp"
#include "timing.hpp"
#include "workloads.hpp"

#include <cstdio>
#include <string>
#include <vector>

namespace moegemm_bench {

/// BackendResult::id of libmoegemm; every other id is a peer.
inline constexpr const char* kLibraryBackendId = "library";

/// One backend measured on one workload.
struct BackendResult {
    std::string
        id;  ///< stable JSON key: "library", "cublaslt_loop", "cublas_grouped", "padded_batched"
    std::string label;  ///< table label: "libmoegemm[auto]", "cublaslt-loop", ...
    bool ok = false;
    TimingStats timing;        ///< valid when ok
    std::string error_status;  ///< when !ok: the status name (MOEGEMM_STATUS_...,
                               ///< CUBLAS_STATUS_..., cuda...)
    std::string error_message;
};

struct WorkloadResult {
    Workload workload;
    Floors floors;                        ///< of this workload, against the run's ceilings
    std::string plan_description;         ///< moegemm_plan_describe, or why there is no plan
    std::vector<BackendResult> backends;  ///< the library first, then the peers
    std::vector<CheckResult> checks;      ///< with --check
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

/// True when a backend failed or a check failed anywhere in the run.
bool has_failures(const std::vector<WorkloadResult>& results);

/// The header, the table (one row per workload and backend), the geometric means of the peers'
/// times over the library's, the plans, the checks and the failures' messages.
void print_report(std::FILE* out, const RunInfo& run, const std::vector<WorkloadResult>& results);

/// The same as JSON (schema in bench/RESULTS.md). Throws BenchError if the file cannot be written.
void write_json_report(const std::string& path, const RunInfo& run,
                       const std::vector<WorkloadResult>& results);

}  // namespace moegemm_bench

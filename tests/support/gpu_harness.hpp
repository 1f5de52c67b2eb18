// GPU half of the test support: checked CUDA calls, RAII for device memory, streams and
// plans, a Workload (random inputs on host and device plus their fp64 reference), and one
// function that runs the library on a workload and downloads the poisoned-then-written D.
#ifndef MOEGEMM_TESTS_SUPPORT_GPU_HARNESS_HPP
#define MOEGEMM_TESTS_SUPPORT_GPU_HARNESS_HPP

#include <cuda_runtime_api.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "moegemm/moegemm.h"
#include "plan_options.hpp"
#include "support/reference.hpp"

/// Every CUDA runtime call of the tests goes through this: a failure ends the test case
/// with the expression, CUDA's error name and text.
#define MGT_CUDA_REQUIRE(expr)                                                              \
    do {                                                                                    \
        const cudaError_t mgt_err_ = (expr);                                                \
        INFO(#expr << " -> " << cudaGetErrorName(mgt_err_) << ": "                          \
                   << cudaGetErrorString(mgt_err_));                                        \
        REQUIRE(mgt_err_ == cudaSuccess);                                                   \
    } while (0)

/// A libmoegemm call that must succeed; on failure the status name and the library's last
/// error message are printed.
#define MGT_REQUIRE_OK(expr)                                                                \
    do {                                                                                    \
        const ::mgt::Outcome mgt_out_ = ::mgt::outcome((expr));                             \
        INFO(#expr << " -> " << mgt_out_.str());                                            \
        REQUIRE(mgt_out_.status == MOEGEMM_STATUS_SUCCESS);                                 \
    } while (0)

#define MGT_CHECK_OK(expr)                                                                  \
    do {                                                                                    \
        const ::mgt::Outcome mgt_out_ = ::mgt::outcome((expr));                             \
        INFO(#expr << " -> " << mgt_out_.str());                                            \
        CHECK(mgt_out_.status == MOEGEMM_STATUS_SUCCESS);                                   \
    } while (0)

namespace mgt {

/// A status with the thread's last error message, read right after the call (the message
/// is only valid until the next libmoegemm call).
struct Outcome {
    moegemm_status_t status = MOEGEMM_STATUS_SUCCESS;
    std::string message;
    /// "MOEGEMM_STATUS_X: message"
    std::string str() const;
};
Outcome outcome(moegemm_status_t status);

/// Bytes of poison around every output buffer; 256 keeps D 256-byte aligned.
constexpr size_t kGuardBytes = 256;
/// Slack after every input buffer so that a test can pass `ptr + 2` without the library
/// reading past the allocation even if it wrongly accepted the pointer.
constexpr size_t kInputSlack = 256;

// ------------------------------------------------------------------------------------------
// RAII
// ------------------------------------------------------------------------------------------

/// cudaMalloc'd bytes (256-byte aligned), freed on destruction.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t bytes);
    ~DeviceBuffer();
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& o) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;

    void* get() const { return ptr_; }
    uint8_t* bytes_ptr() const { return static_cast<uint8_t*>(ptr_); }
    size_t size() const { return bytes_; }

    void upload(const void* host, size_t bytes, size_t offset = 0);
    std::vector<uint8_t> download() const;
    void fill(uint8_t byte);

private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

/// An output tensor surrounded by kGuardBytes of poison on each side.
class OutputBuffer {
public:
    OutputBuffer() = default;
    explicit OutputBuffer(size_t d_bytes);
    void* d() const { return buf_.bytes_ptr() + kGuardBytes; }
    size_t d_bytes() const { return d_bytes_; }
    /// Fills D and both guards with kPoisonByte and waits for it.
    void poison();
    /// The whole buffer, guards included (synchronous; call after the work finished).
    std::vector<uint8_t> download() const { return buf_.download(); }
    /// Number of bytes, guards included, that no longer hold the poison.
    int64_t unpoisoned() const;

private:
    DeviceBuffer buf_;
    size_t d_bytes_ = 0;
};

/// A non-blocking stream, destroyed (after a synchronization) with the object.
class Stream {
public:
    Stream();
    ~Stream();
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    cudaStream_t get() const { return s_; }

private:
    cudaStream_t s_ = nullptr;
};

/// Owns a moegemm_plan_t.
class Plan {
public:
    Plan() = default;
    /// Creates the plan; the test case fails (REQUIRE) if creation fails.
    explicit Plan(const moegemm_problem_t& problem);
    ~Plan();
    Plan(const Plan&) = delete;
    Plan& operator=(const Plan&) = delete;
    Plan(Plan&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }

    /// Creation that may fail: returns the outcome, sets the plan only on success.
    Outcome try_create(const moegemm_problem_t& problem);
    moegemm_plan_t get() const { return p_; }
    /// moegemm_plan_get_workspace_size, REQUIREd to succeed.
    size_t workspace_size() const;
    /// moegemm_plan_describe with MOEGEMM_DESCRIBE_MAX, REQUIREd to succeed.
    std::string describe() const;

private:
    moegemm_plan_t p_ = nullptr;
};

// ------------------------------------------------------------------------------------------
// Problems and workloads
// ------------------------------------------------------------------------------------------

/// A problem for `g` with 16-bit inputs `in`, output `out`, on `backend`.
moegemm_problem_t make_problem(const Geometry& g, moegemm_dtype_t in, moegemm_dtype_t out,
                               moegemm_backend_t backend = MOEGEMM_BACKEND_AUTO);

/// Random A and B on the GPU (gpuref::fill_random of two seeds drawn from `seed`) for one
/// geometry, input dtype and set of sizes; check_result compares an output with them on the
/// GPU. The inputs are never modified by a run, so one workload serves every backend, output
/// dtype and set of sizes.
class Workload {
public:
    Workload(const Geometry& g, moegemm_dtype_t in, std::vector<int32_t> sizes, uint32_t seed);

    const Geometry& geometry() const { return g_; }
    moegemm_dtype_t in_type() const { return in_; }
    const std::vector<int32_t>& sizes() const { return sizes_; }
    const void* a() const { return a_dev_.get(); }
    const void* b() const { return b_dev_.get(); }
    size_t a_bytes() const { return g_.a_elems() * 2; }
    size_t b_bytes() const { return g_.b_elems() * 2; }
    std::string str() const;

    /// CHECKs on the GPU that A and B still hold what was generated (inputs are never
    /// written).
    void check_inputs_unchanged() const;

private:
    Geometry g_;
    moegemm_dtype_t in_;
    std::vector<int32_t> sizes_;
    uint64_t a_seed_ = 0, b_seed_ = 0;
    DeviceBuffer a_dev_, b_dev_;
};

/// Where a run takes the expert sizes from.
enum class SizesFrom { None, Host, Device };
const char* sizes_from_name(SizesFrom s);

struct RunOptions {
    moegemm_backend_t backend = MOEGEMM_BACKEND_AUTO;
    moegemm_dtype_t out = MOEGEMM_DTYPE_BF16;
    SizesFrom sizes_from = SizesFrom::Host;
    cudaStream_t stream = nullptr;
    std::string force_kernel;  ///< problem.force_kernel; empty: the heuristic's pick
    int64_t expected_rows = 0; ///< problem.expected_rows (0: none given)
    std::string str() const;
};

struct RunResult {
    bool ok = false;
    std::string error;              ///< which call failed, its status and message
    std::string description;        ///< moegemm_plan_describe of the plan, after its sizes are set
    std::vector<uint8_t> buffer;    ///< D with guards, poisoned before the run
    uint32_t status_word = 0;       ///< the plan's status word after the run
};

/// Creates a plan for the workload, sets its sizes (unless FIXED), allocates the workspace
/// it asks for, poisons D, executes on opt.stream, synchronizes and downloads D. Library
/// failures are returned (ok = false), not asserted, so a caller looping over cases can
/// report one and go on; CUDA failures end the test case.
RunResult run_once(const Workload& w, const RunOptions& opt);

/// Executes an existing plan (sizes already set as the caller wants) on the workload's A
/// and B into a freshly poisoned D with a workspace of the plan's size, synchronizes and
/// downloads D. Same error handling as run_once.
RunResult execute_plan(const Plan& plan, const Workload& w, moegemm_dtype_t out,
                       cudaStream_t stream = nullptr);

/// Sizes a plan of `g` accepts: one per expert, none negative, within the capacity.
bool valid_sizes(const Geometry& g, const std::vector<int32_t>& sizes);

/// A downloaded D with guards (as compare_output reads it) against the workload's inputs, on
/// the GPU oracle (support/gpu_reference.hpp, which applies reference.hpp's tolerance model):
/// every valid row of `sizes` within tolerance, VARIABLE rows past their sum and both guards
/// still poison, the global relative error within its bound. `sizes` (valid, e.g. the clamped
/// sizes of a device-size run or one graph replay's) default to the workload's.
CompareReport check_result(const Workload& w, moegemm_dtype_t out,
                           const std::vector<int32_t>& sizes, const std::vector<uint8_t>& buffer);
CompareReport check_result(const Workload& w, moegemm_dtype_t out,
                           const std::vector<uint8_t>& buffer);

/// Sets a comparison option (src/plan_options.hpp: tile_tickets, host_schedule, ...) of the
/// plans this thread creates through the harness (create_plan) for its lifetime, then
/// restores the previous value. An unknown name fails the test case.
class ScopedPlanOption {
public:
    ScopedPlanOption(const char* name, bool value);
    ~ScopedPlanOption();
    ScopedPlanOption(const ScopedPlanOption&) = delete;
    ScopedPlanOption& operator=(const ScopedPlanOption&) = delete;

private:
    moegemm::PlanOptions saved_;
};

/// moegemm_plan_create with the options ScopedPlanOption set on this thread.
moegemm_status_t create_plan(const moegemm_problem_t& problem, moegemm_plan_t* out);
/// moegemm_moe_plan_create with the options ScopedPlanOption set on this thread.
moegemm_status_t create_moe_plan(const moegemm_moe_problem_t& problem, moegemm_moe_plan_t* out);

/// Compute capability of the current device (major * 10 + minor).
int device_cc();

// ------------------------------------------------------------------------------------------
// Backend filter: MOEGEMM_TEST_BACKENDS
//
// Unset or empty: every backend is tested. Otherwise a comma-separated list of auto,
// cublaslt, native (case-insensitive, spaces ignored): test cases that loop over or pick
// backends explicitly skip the backends not in the list. It filters the backend a plan
// ASKS for: "auto" plans may still run cuBLASLt kernels (KN weights, or off sm_90); to run
// native kernels only (compute-sanitizer racecheck crashes inside cuBLASLt's kernels on
// sm_90) use MOEGEMM_TEST_BACKENDS=native. Test cases that never choose a backend (most of
// [api]) use AUTO and are not filtered. An unknown name makes moegemm_gpu_tests exit with an
// error at startup, so a typo cannot silently skip everything.
// ------------------------------------------------------------------------------------------

/// Parses a filter; returns false (and fills *error) on an unknown name. `mask` gets bit
/// (1 << backend) for each backend listed; NULL or empty text enables every backend.
bool parse_backend_filter(const char* text, unsigned* mask, std::string* error);
/// Whether MOEGEMM_TEST_BACKENDS lets test cases run plans asking for `backend`.
bool backend_enabled(moegemm_backend_t backend);
/// The active filter, for the start-up banner ("all backends" when unset).
std::string backend_filter_str();

// ------------------------------------------------------------------------------------------
// Native backend, device sizes, status word
// ------------------------------------------------------------------------------------------

/// Whether the plan's kernel (as moegemm_plan_describe tells) is a native one: the text
/// names "native" and not "cublaslt". Call after the sizes are set (AUTO may re-select).
bool plan_runs_native(const Plan& plan);

/// Every native kernel variant of this build by name (moegemm_kernel_name), for force_kernel.
std::vector<std::string> native_kernel_names();

/// Whether a native variant forced by name serves a problem of geometry `g` reading `in` and
/// writing `out` (E4M3: with scale mode `scales`): the TMA-store epilogue writes 16-bit
/// outputs only; clusters of 2 along N need an even number of column tiles; swap-AB takes no
/// BLOCK scales. An empty name (the heuristic's pick) always does.
bool forced_kernel_serves(const std::string& kernel, const Geometry& g, moegemm_dtype_t out,
                          moegemm_dtype_t in = MOEGEMM_DTYPE_BF16,
                          moegemm_scale_mode_t scales = MOEGEMM_SCALE_NONE);

/// A plan's device status word (moegemm_plan_get_status_word), read and cleared
/// synchronously: call after the executions of interest finished.
class StatusWord {
public:
    /// Gets the word's address; the test case fails (REQUIRE) if that fails or is NULL.
    explicit StatusWord(const Plan& plan);
    uint32_t* get() const { return word_; }
    uint32_t read() const;
    void clear() const;

private:
    uint32_t* word_ = nullptr;
};

// ------------------------------------------------------------------------------------------
// CUDA graphs and held streams
// ------------------------------------------------------------------------------------------

/// A captured graph and its instance, destroyed with the object.
struct Graph {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    Graph() = default;
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;
    ~Graph();
};

/// Captures one moegemm_execute of `plan` on the workload's A and B into `d` on stream `s`
/// into `g` and instantiates it (capture is always ended, also on failure). REQUIREs that
/// execute succeeded under capture and that the graph has nodes.
Outcome capture_execute(Graph& g, cudaStream_t s, moegemm_plan_t plan, const Workload& w, void* d,
                        void* ws, size_t ws_bytes);

/// A host function that holds a stream until the test opens it (or 10 s pass). Declare the
/// Gate before the Stream it holds: the host function reads it until the stream is done.
struct Gate {
    std::atomic<bool> open{false};
    std::atomic<bool> entered{false};
    std::atomic<bool> timed_out{false};
};
/// cudaLaunchHostFunc callback; `p` is a Gate*.
void CUDART_CB hold_stream(void* p);

}  // namespace mgt

#endif  // MOEGEMM_TESTS_SUPPORT_GPU_HARNESS_HPP

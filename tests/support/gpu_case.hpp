// Running the library on one problem and checking everything on the GPU, for tests that run
// thousands of problems ([stress]) or run them from several host threads ([concurrency]).
//
// Unlike gpu_harness.hpp's helpers, nothing here uses Catch's assertion macros (they are not
// thread-safe): CUDA failures throw CudaFailure, and library failures and wrong results come
// back as a CaseResult for the calling test to assert on its own thread.
//
// Every buffer lies between two guard bands of kBandBytes filled with a known byte; inputs are
// generated on the GPU from a seed (gpuref::fill_random) so that they can be checked for
// changes without a host copy; D is poisoned with kPoisonByte before every execution; the
// reference is gpuref::check_output.
#ifndef MOEGEMM_TESTS_SUPPORT_GPU_CASE_HPP
#define MOEGEMM_TESTS_SUPPORT_GPU_CASE_HPP

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "moegemm/moegemm.h"
#include "support/gpu_harness.hpp"
#include "support/gpu_reference.hpp"
#include "support/reference.hpp"

namespace mgt {

/// A CUDA call of the support code failed; the text names the call and CUDA's error.
class CudaFailure : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};
void throw_on_cuda_error(cudaError_t err, const char* what);
#define MGT_CUDA_THROW(expr) ::mgt::throw_on_cuda_error((expr), #expr)

/// Guard band on each side of every buffer: far wider than a row of any tile, so that a
/// kernel overrunning a tensor by whole tile rows lands in it.
constexpr size_t kBandBytes = size_t{64} << 10;
constexpr uint8_t kInputBandByte = 0xA5;      ///< around A and B
constexpr uint8_t kWorkspaceBandByte = 0x5A;  ///< around (and initially inside) the workspace
constexpr uint8_t kSizesBandByte = 0xC3;      ///< around device sizes
// D and its bands: kPoisonByte (0xFF, a NaN in every output type).

// ------------------------------------------------------------------------------------------
// Guarded device memory
// ------------------------------------------------------------------------------------------

/// Device memory laid out as [band + offset][payload][band]: the payload starts `offset`
/// bytes past a 256-byte boundary (offsets that are multiples of 16 give tensors that are
/// 16-byte but not 256-byte aligned). Grow-only: one region serves many cases and is only
/// reallocated when a larger payload is asked for. Memory is allocated on the device that is
/// current at the first reserve().
class GuardedRegion {
public:
    GuardedRegion() = default;
    ~GuardedRegion();
    GuardedRegion(const GuardedRegion&) = delete;
    GuardedRegion& operator=(const GuardedRegion&) = delete;

    /// Lays out a payload of `bytes` at `offset` (< 256) past alignment; throws CudaFailure.
    void reserve(size_t bytes, size_t offset = 0);
    uint8_t* payload() const { return base_ + kBandBytes + offset_; }
    size_t payload_bytes() const { return bytes_; }
    /// The band before the payload (kBandBytes + offset bytes) and the one after it.
    const uint8_t* front() const { return base_; }
    size_t front_bytes() const { return kBandBytes + offset_; }
    const uint8_t* back() const { return payload() + bytes_; }
    size_t back_bytes() const { return kBandBytes; }

    /// Enqueue memsets: the bands and the payload, or the payload only.
    void fill(uint8_t byte, cudaStream_t s) const;
    void fill_payload(uint8_t byte, cudaStream_t s) const;
    /// The payload's bytes (synchronizes `s`).
    std::vector<uint8_t> download(cudaStream_t s) const;

private:
    uint8_t* base_ = nullptr;
    size_t capacity_ = 0;
    size_t offset_ = 0;
    size_t bytes_ = 0;
};

// ------------------------------------------------------------------------------------------
// The checker
// ------------------------------------------------------------------------------------------

/// What one round of checks found.
struct CheckReport {
    int64_t checked = 0;        ///< valid elements compared with the reference
    int64_t bad_values = 0;     ///< non-finite or out of tolerance
    int64_t untouched = 0;      ///< elements that had to keep the poison
    int64_t bad_untouched = 0;  ///< of them changed
    double worst_ratio = 0.0;   ///< max |x - ref| / bound
    double global_diff = 0.0;   ///< sum (x-r)^2 / (sum x^2 + sum r^2)
    double global_limit = 0.0;
    bool global_bad = false;
    int64_t bad_tiles = 0;      ///< 128 x 128 tiles whose own error ratio exceeds global_limit
    /// Named byte ranges (guard bands, inputs) and how many bytes or elements changed: only
    /// the ranges with changes.
    std::vector<std::pair<std::string, int64_t>> changed;
    std::vector<std::string> samples;  ///< the first failing elements

    bool ok() const {
        return bad_values == 0 && bad_untouched == 0 && !global_bad && bad_tiles == 0 &&
               changed.empty();
    }
    std::string summary() const;
};

/// Bound of the global relative error for `out` and `k`: tolerance_for's, or, for long
/// reductions, what a bias of one fp32 ulp per 16-wide MMA step gives (doubled).
double global_diff_limit(moegemm_dtype_t out, int64_t k, moegemm_dtype_t in = MOEGEMM_DTYPE_BF16);

/// Enqueues the oracle's checks on a stream and reads their counters back. One per thread
/// (or stream); its device memory is on the device current at construction.
class DeviceChecker {
public:
    DeviceChecker();
    ~DeviceChecker();
    DeviceChecker(const DeviceChecker&) = delete;
    DeviceChecker& operator=(const DeviceChecker&) = delete;

    /// Starts a round: clears the counters.
    void begin(cudaStream_t s);
    /// D against the reference computed from A and B (E4M3: dequantized with `scales` and the
    /// scale arrays, laid out as the header says). `sizes` are the sizes the library should
    /// have used (clamped when they came from the device); ignored for FIXED.
    void output(const Geometry& g, moegemm_dtype_t in, moegemm_dtype_t out, const void* a,
                const void* b, const void* d, const std::vector<int32_t>& sizes,
                cudaStream_t s, moegemm_scale_mode_t scales = MOEGEMM_SCALE_NONE,
                const float* a_scale = nullptr, const float* b_scale = nullptr);
    /// Counts bytes of [p, p + n) that differ from `pattern`.
    void bytes(const std::string& name, const void* p, size_t n, uint8_t pattern, cudaStream_t s);
    /// Both bands of a region.
    void bands(const std::string& name, const GuardedRegion& r, uint8_t pattern, cudaStream_t s);
    /// Counts elements that no longer hold what gpuref::fill_random wrote.
    void random_input(const std::string& name, const void* p, size_t count, moegemm_dtype_t t,
                      uint64_t seed, cudaStream_t s);
    /// Synchronizes `s` (a kernel fault surfaces here as CudaFailure) and reports.
    CheckReport finish(cudaStream_t s);

private:
    static constexpr int kMaxCounters = 32;
    gpuref::CheckStats* stats_ = nullptr;       // device
    unsigned long long* counters_ = nullptr;    // device
    gpuref::CheckStats* host_stats_ = nullptr;  // pinned
    unsigned long long* host_counters_ = nullptr;
    int32_t* rows_ = nullptr;                   // device, per expert
    int64_t* offsets_ = nullptr;                // device, experts + 1
    int32_t* host_rows_ = nullptr;              // pinned staging of rows_
    int64_t* host_offsets_ = nullptr;           // pinned staging of offsets_
    void* scratch_ = nullptr;                   // device, check_output's tile sums (grow-only)
    size_t scratch_bytes_ = 0;
    std::vector<std::string> names_;
    bool has_output_ = false;
    double global_limit_ = 0.0;
    unsigned long long* counter(const std::string& name);
    void release() noexcept;
};

// ------------------------------------------------------------------------------------------
// Cases
// ------------------------------------------------------------------------------------------

/// One problem to run, and how.
struct CaseSpec {
    Geometry g;
    moegemm_dtype_t in = MOEGEMM_DTYPE_BF16;
    moegemm_dtype_t out = MOEGEMM_DTYPE_BF16;
    /// E4M3 inputs: the scale mode; its scales are drawn from `seed` + 2 (A) and + 3 (B).
    moegemm_scale_mode_t scale_mode = MOEGEMM_SCALE_NONE;
    moegemm_backend_t backend = MOEGEMM_BACKEND_AUTO;
    SizesFrom sizes_from = SizesFrom::Host;  ///< None for FIXED
    std::string force_kernel;                ///< problem.force_kernel; empty: none
    int64_t expected_rows = 0;               ///< problem.expected_rows
    /// One raw size vector per round (FIXED: one empty vector per round). Host sizes are set
    /// with moegemm_plan_set_expert_sizes before each round and must be valid; device sizes
    /// are copied into the buffer the plan reads (set once) and may be hostile.
    std::vector<std::vector<int32_t>> rounds;
    uint64_t seed = 1;  ///< inputs: A with seed, B with seed + 1
    /// Bytes past 256-byte alignment (multiples of 16) of A, B and D.
    size_t a_offset = 0, b_offset = 0, d_offset = 0;
    bool null_workspace = false;  ///< pass NULL when the plan needs 0 bytes
    bool default_stream = false;  ///< execute on the legacy default stream (NULL)
    std::string str() const;
};

/// What became of a case, or of one round of it.
struct CaseResult {
    enum class Kind { Passed, Skipped, Failed };
    Kind kind = Kind::Passed;
    std::string message;  ///< Skipped: which call and its status/message; Failed: details
    std::string plan;     ///< moegemm_plan_describe once the sizes were set
    bool native = false;  ///< the plan runs a native kernel (per describe)
    int rounds = 0;       ///< rounds executed and checked
    int64_t elements = 0; ///< elements of D the oracle compared, over those rounds
    bool fatal = false;   ///< a CUDA error: the context may be unusable from now on
    bool passed() const { return kind == Kind::Passed; }
};

/// The buffers of one case; a thread reuses them from case to case.
struct CaseBuffers {
    GuardedRegion a, b, d, workspace, sizes;
    GuardedRegion a_scale, b_scale;  ///< E4M3 only
};

/// A plan with its inputs and outputs, ready to run rounds. The plan is created (or, for a
/// second run on another stream, borrowed from another CaseRun), A and B generated, D, the
/// workspace and the device sizes laid out between guard bands. Nothing throws out: every
/// step reports through a CaseResult.
class CaseRun {
public:
    /// Creates the plan on the current device. `stream` is where everything is enqueued
    /// (spec.default_stream overrides it with NULL).
    CaseRun(const CaseSpec& spec, CaseBuffers& buffers, cudaStream_t stream);
    /// Executes `owner`'s plan with buffers of its own: never sets sizes nor touches the
    /// plan's status word (the owner does). `spec` must have the owner's problem and rounds.
    CaseRun(const CaseSpec& spec, CaseBuffers& buffers, cudaStream_t stream, const CaseRun& owner);
    ~CaseRun();
    CaseRun(const CaseRun&) = delete;
    CaseRun& operator=(const CaseRun&) = delete;

    /// After construction: Passed means ready; Skipped (NOT_SUPPORTED) or Failed otherwise.
    const CaseResult& state() const { return state_; }
    moegemm_plan_t plan() const { return plan_; }
    const CaseSpec& spec() const { return spec_; }
    cudaStream_t stream() const { return stream_; }
    size_t workspace_bytes() const { return ws_bytes_; }

    /// The whole round r: prepare, launch, check.
    CaseResult round(size_t r, DeviceChecker& checker);
    /// Step 1: sets the round's sizes (host: set_expert_sizes; device: copies them into the
    /// buffer the plan reads, setting the pointer on the first round). Borrowing runs only
    /// record the sizes to expect.
    CaseResult prepare(size_t r);
    /// Step 2: poisons D, clears the status word, executes. Asynchronous.
    CaseResult launch();
    /// launch() in two parts, for kernels that must follow each other with nothing between
    /// them in the stream: poison_output() poisons D and clears the status word, then
    /// execute_with(workspace, bytes) only calls moegemm_execute, with a workspace of the
    /// caller's (another run's, to share one between plans). Asynchronous.
    CaseResult poison_output();
    CaseResult execute_with(void* workspace, size_t workspace_bytes);
    /// The workspace launch() passes to moegemm_execute.
    void* workspace() const { return bufs_.workspace.payload(); }
    /// The E4M3 scales moegemm_execute gets (the buffers' a_scale and b_scale); NULL for
    /// 16-bit inputs.
    const float* a_scale() const { return scales(bufs_.a_scale); }
    const float* b_scale() const { return scales(bufs_.b_scale); }
    /// Step 3: checks D, the guard bands, the inputs, the device sizes and the status word of
    /// the last launch (synchronizes the stream).
    CaseResult check(DeviceChecker& checker);

    /// Fills the workspace (not its bands) with `byte`, e.g. to show a result does not depend
    /// on what the workspace held.
    void fill_workspace(uint8_t byte) const;
    /// D's bytes after the last launch (synchronizes the stream).
    std::vector<uint8_t> download_output() const;
    /// The sizes the last prepared round must produce (clamped device sizes; FIXED: full).
    const std::vector<int32_t>& expected_sizes() const { return expected_.sizes; }

private:
    void setup(cudaStream_t stream);
    const float* scales(const GuardedRegion& r) const {
        return spec_.scale_mode == MOEGEMM_SCALE_NONE ? nullptr
                                                      : reinterpret_cast<const float*>(r.payload());
    }
    CaseResult fail(const std::string& what) const;
    CaseResult skip_or_fail(const char* call, const Outcome& o) const;

    CaseSpec spec_;
    CaseBuffers& bufs_;
    cudaStream_t stream_ = nullptr;
    moegemm_plan_t plan_ = nullptr;
    bool owns_plan_ = true;
    bool device_sizes_set_ = false;
    size_t ws_bytes_ = 0;
    uint32_t* status_word_ = nullptr;
    ClampedSizes expected_;
    std::vector<int32_t> raw_;  // the raw sizes of the prepared round
    CaseResult state_;
};

/// Whether the header's documented rules say the case's backend cannot serve it on a device
/// of compute capability `cc` (90 for 9.0), so that NOT_SUPPORTED is the right answer; any
/// other refusal is a failure of the library. Uses no Catch macro: worker threads call it.
bool documented_not_supported(const CaseSpec& c, int cc);

/// Creates the case, runs all its rounds, destroys it: Passed, the first Skipped or Failed
/// round, or the failed creation.
CaseResult run_case(const CaseSpec& spec, CaseBuffers& buffers, DeviceChecker& checker,
                    cudaStream_t stream);

/// Field `key` of a describe text ("backend=native kernel=sm90_... " -> "native", ...), or "".
std::string describe_field(const std::string& text, const std::string& key);

}  // namespace mgt

#endif  // MOEGEMM_TESTS_SUPPORT_GPU_CASE_HPP

// A plan: validation, the device query, kernel selection at creation and when sizes are set,
// and the checks of execute before it enqueues (plan.hpp).
#include "plan.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "error.hpp"
#include "tune_cache.hpp"

namespace moegemm {

// The workspace is fixed for the plan's life (but for an autotune that moves it to another
// backend's kernel): the most any variant of the chosen backend may need. Selection for new
// sizes takes only kernels of backends that workspace covers: a native plan needs no
// cuBLASLt workspace and never moves to cuBLASLt; a plan sized for cuBLASLt may come back.
std::size_t backend_workspace_bytes(const ProblemDesc& p, const DeviceCaps& d,
                                    moegemm_backend_t backend) {
    std::size_t bytes = 0;
    for (const KernelVariant* v = registry_begin(); v != registry_end(); ++v) {
        if (v->backend == backend) bytes = std::max(bytes, v->workspace_bytes(p, d));
    }
    return bytes;
}

uint32_t backends_covered(const ProblemDesc& p, const DeviceCaps& d,
                          std::size_t workspace_bytes) {
    uint32_t covered = 0;
    for (const moegemm_backend_t b : kConcreteBackends)
        if (backend_workspace_bytes(p, d, b) <= workspace_bytes) covered |= backend_bit(b);
    return covered;
}

namespace {

std::size_t plan_workspace_bytes(const ProblemDesc& p, const DeviceCaps& d,
                                 const Selection& chosen) {
    return backend_workspace_bytes(p, d, variant(chosen.kernel).backend);
}

// The kernel for `sizes`, of `backends`: at creation any; once the plan's workspace is
// sized, those it covers. A forced kernel is the caller's word; otherwise a tuned result for
// this problem and size bucket (moegemm_plan_autotune) outranks the heuristic.
Selection select_or_throw(const ProblemDesc& problem, const ExpertSizes& sizes,
                          const DeviceCaps& device, uint32_t backends = kAnyBackend) {
    const ProblemSummary summary = summarize(problem, sizes);
    const Selection s =
        problem.force_kernel.empty()
            ? apply_tune_cache(select_kernel(summary, device, backends), summary, device,
                               process_tune_cache(), backends)
            : select_named_kernel(summary, device, problem.force_kernel);
    if (s.status != MOEGEMM_STATUS_SUCCESS) throw Error(s.status, s.reason);
    return s;
}

// The options a plan runs with: the caller's, with programmatic dependent launch also off
// where MOEGEMM_PDL=0 (the escape hatch the header documents). Read once, at plan creation.
ProblemDesc with_options(ProblemDesc p, const PlanOptions& options) {
    p.options = options;
    if (!dependent_launch_allowed()) p.options.dependent_launch = false;
    return p;
}

const char* sizes_name(SizesSource s) {
    switch (s) {
        case SizesSource::None: return "not set";
        case SizesSource::Host: return "host";
        case SizesSource::Device: return "device";
    }
    return "?";
}

// A stream of another device would fail inside cuBLASLt with a less helpful error. CUDA
// refuses cudaStreamGetDevice on a capturing stream (and the refusal would invalidate the
// capture), so the check is made only outside capture; a captured launch onto a foreign
// stream still fails, at instantiation.
/// Throws INVALID_VALUE when `stream` belongs to another device than the plan. Returns whether
/// the device could be checked (not under stream capture, and the driver can tell).
bool check_stream_device(cudaStream_t stream, int plan_device) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    MOEGEMM_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    if (capture != cudaStreamCaptureStatusNone) return false;
    int stream_device = -1;
    const cudaError_t err = cudaStreamGetDevice(stream, &stream_device);
    if (err == cudaErrorCallRequiresNewerDriver || err == cudaErrorNotSupported) {
        (void)cudaGetLastError();  // a driver older than the toolkit: the check is unavailable
        return false;
    }
    MOEGEMM_CUDA_CHECK(err);
    require(stream_device == plan_device, MOEGEMM_STATUS_INVALID_VALUE,
            "stream belongs to device {} but the plan was created for device {}", stream_device,
            plan_device);
    return true;
}

/// Throws INVALID_VALUE when `ptr` (a buffer the kernels write: D, the workspace; or device
/// sizes, which they read at every launch) is device memory of another device than the
/// plan's, or pageable host memory: the launch would fault and take the caller's CUDA context
/// with it. Managed and pinned host memory are accepted. A and B (read only) are not checked:
/// the check costs a driver query per new pointer, and execute sees new A and B often.
void check_gpu_memory(const void* ptr, const char* name, int plan_device) {
    cudaPointerAttributes attributes{};
    const cudaError_t err = cudaPointerGetAttributes(&attributes, ptr);
    if (err == cudaErrorInvalidValue) {
        (void)cudaGetLastError();
        fail(MOEGEMM_STATUS_INVALID_VALUE, "{} = {} is not memory that CUDA knows", name, ptr);
    }
    MOEGEMM_CUDA_CHECK(err);
    require(attributes.type != cudaMemoryTypeUnregistered, MOEGEMM_STATUS_INVALID_VALUE,
            "{} = {} is pageable host memory: it must be device (or managed) memory", name, ptr);
    require(attributes.type != cudaMemoryTypeDevice || attributes.device == plan_device,
            MOEGEMM_STATUS_INVALID_VALUE,
            "{} = {} is memory of device {} but the plan runs on device {}", name, ptr,
            attributes.device, plan_device);
}

/// check_gpu_memory unless `ptr` is one recently found good (`checked`); records it.
void check_gpu_memory_once(const void* ptr, const char* name, int plan_device,
                           RecentlyChecked<const void*>& checked) {
    if (ptr == nullptr || checked.contains(ptr)) return;
    check_gpu_memory(ptr, name, plan_device);
    checked.add(ptr);
}

}  // namespace

bool dependent_launch_allowed() {
    const char* pdl = std::getenv("MOEGEMM_PDL");
    return !(pdl && std::strcmp(pdl, "0") == 0);
}

Plan::Plan(const moegemm_problem_t* problem, const PlanOptions& options)
    : problem_(with_options(validate_problem(problem), options)),
      device_(query_device_caps(problem_.device)),
      sizes_(initial_sizes(problem_)),
      selection_(select_or_throw(problem_, sizes_, device_)),
      workspace_bytes_(plan_workspace_bytes(problem_, device_, selection_)),
      status_word_(acquire_device_word(problem_.device)) {
    ScopedDevice on(problem_.device);
    resources_.status_word = status_word_.get();
    if (sizes_.source != SizesSource::None)
        kernel_ = variant(selection_.kernel).create(problem_, device_, sizes_, resources_);
}

Plan::~Plan() {
    // Handles must be destroyed on the plan's device; never let a failure escape.
    try {
        ScopedDevice on(problem_.device);
        kernel_.reset();
        resources_.release();
        status_word_.reset();
    } catch (...) {
    }
}

void Plan::set_expert_sizes(const int32_t* sizes, moegemm_memory_t where) {
    const int where_value = enum_value(where);
    require(where_value == MOEGEMM_MEMORY_HOST || where_value == MOEGEMM_MEMORY_DEVICE,
            MOEGEMM_STATUS_INVALID_VALUE, "where = {} is out of range (HOST = 0, DEVICE = 1)",
            where_value);
    ExpertSizes next = where == MOEGEMM_MEMORY_HOST ? make_host_sizes(problem_, sizes)
                                                    : make_device_sizes(problem_, sizes);
    Selection selection = select_or_throw(problem_, next, device_,
                                          backends_covered(problem_, device_, workspace_bytes_));
    ScopedDevice on(problem_.device);
    // DEVICE sizes in host memory (the `where` mixed up) would fault at the first launch.
    if (next.source == SizesSource::Device) check_gpu_memory(sizes, "sizes", problem_.device);
    std::unique_ptr<Kernel> kernel =
        variant(selection.kernel).create(problem_, device_, next, resources_);
    // Nothing below throws: commit.
    sizes_ = std::move(next);
    selection_ = std::move(selection);
    kernel_ = std::move(kernel);
}

std::string Plan::kernel_brief() const {
    return fmt::format("{}{}", variant(selection_.kernel).name, selection_.tuned ? " (tuned)" : "");
}

std::string Plan::describe() const {
    const KernelVariant& v = variant(selection_.kernel);
    std::string text = fmt::format("backend={} kernel={} layout={} E={} N={} K={} {}->{} weights={} sizes={}: {}",
                       v.backend == MOEGEMM_BACKEND_CUBLASLT ? "cublaslt" : "native", v.name,
                       layout_name(problem_.layout), problem_.num_experts, problem_.n, problem_.k,
                       dtype_name(problem_.a_type), dtype_name(problem_.d_type),
                       problem_.weight_layout == MOEGEMM_WEIGHTS_NK ? "NK" : "KN",
                       sizes_name(sizes_.source),
                       kernel_ ? kernel_->describe() : std::string("awaiting sizes")) +
           fmt::format(" [{}]", selection_.reason);
    // The header promises MOEGEMM_DESCRIBE_MAX bytes always suffice.
    if (text.size() >= MOEGEMM_DESCRIBE_MAX) text.resize(MOEGEMM_DESCRIBE_MAX - 1);
    return text;
}

bool Plan::check_execute(const ExecuteArgs& args, CUstream_st* stream) const {
    validate_execute_args(problem_, sizes_, args, workspace_bytes_);
    if (!checked_streams_.contains(stream) && check_stream_device(stream, problem_.device))
        checked_streams_.add(stream);
    if (!may_compute_rows(problem_, sizes_)) return false;
    check_gpu_memory_once(args.workspace, "workspace", problem_.device, checked_workspaces_);
    check_gpu_memory_once(args.d, "d", problem_.device, checked_outputs_);
    return true;
}

void Plan::execute(const ExecuteArgs& args, CUstream_st* stream) const {
    ScopedDevice on(problem_.device);
    if (!check_execute(args, stream)) return;
    kernel_->launch(args, stream);
}

void Plan::enqueue(const ExecuteArgs& args, CUstream_st* stream) const {
    require(kernel_ != nullptr, MOEGEMM_STATUS_INTERNAL_ERROR, "plan enqueued before its sizes");
    ScopedDevice on(problem_.device);
    kernel_->launch(args, stream);
}

}  // namespace moegemm

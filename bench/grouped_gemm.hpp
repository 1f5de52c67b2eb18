// What moegemm-bench measures on a workload: libmoegemm and three cuBLAS peers (fewer in fp8
// runs), each behind one interface, all reading the same rotated buffers.
#pragma once

#include "plan_options.hpp"

#include "cublas_gemm.hpp"
#include "cuda_utils.hpp"
#include "workloads.hpp"

#include <moegemm/moegemm.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace moegemm_bench {

/// How many copies of a set of buffers to rotate among: enough that the bytes one repetition
/// touches (`touched_bytes`), over all copies, exceed twice the L2 cache, so that each repetition
/// reads its inputs from DRAM as a real layer does; at most 64 copies, and copies of
/// `bytes_per_set` taking at most half of the free device memory.
int rotation_sets_for(size_t touched_bytes, size_t bytes_per_set, size_t l2_bytes);

/// The inputs and output of one workload in the VARIABLE layout (A [sum rows, K], B [E, N, K],
/// D [sum rows, N]; A and B of the workload's input type, D bf16) and, for E4M3, the scales of
/// its scale mode (a_scale over the sum of rows, b_scale; moegemm.h), replicated into rotation
/// sets. Everything is filled with random values (D too, so that rows a backend fails to write
/// stand out in --check); each scale tensor has a cudaMalloc allocation of its own (16-byte
/// aligned, as libmoegemm and cuBLASLt require).
class WorkloadBuffers {
public:
    struct Set {
        void* a;
        void* b;
        void* d;
        const float* a_scale;  ///< nullptr for bf16
        const float* b_scale;  ///< nullptr for bf16
    };

    WorkloadBuffers(const Workload& workload, size_t l2_bytes, cudaStream_t stream);

    const Workload& workload() const noexcept { return workload_; }
    int num_sets() const noexcept { return static_cast<int>(sets_.size()); }
    const Set& set(int index) const { return sets_.at(static_cast<size_t>(index)); }

    int64_t a_bytes() const noexcept;
    int64_t b_bytes() const noexcept;
    int64_t d_bytes() const noexcept;
    /// Expert e's first row in A and D.
    int64_t first_row(int expert) const noexcept { return row_offsets_[expert]; }
    /// Byte offsets of expert e's first row in A and D, and of its weights in B.
    int64_t a_offset(int expert) const noexcept {
        return first_row(expert) * workload_.k * workload_.input_bytes();
    }
    int64_t d_offset(int expert) const noexcept {
        return first_row(expert) * workload_.n * kBf16Bytes;
    }
    int64_t b_offset(int expert) const noexcept {
        return expert * workload_.n * workload_.k * workload_.input_bytes();
    }

private:
    /// What a buffer holds, for its random fill.
    enum class Contents { inputs, output, scales };

    /// A new allocation of `elements` elements of `contents`, filled on `stream` with a seed of
    /// its own; nullptr for 0 elements.
    void* add_buffer(int64_t elements, Contents contents, cudaStream_t stream);

    const Workload& workload_;
    std::vector<int64_t> row_offsets_;  // first row of each expert in A and D
    std::vector<DeviceBuffer> memory_;
    std::vector<Set> sets_;
};

/// One way of computing a workload's grouped GEMM. Everything that is not the GEMM itself
/// (plans, descriptors, algorithm choice, pointer tables, extra buffers) is set up at
/// construction, so that timing measures enqueue() alone.
class GroupedGemm {
public:
    virtual ~GroupedGemm() = default;

    /// Enqueues the grouped GEMM of rotation set `set` on the bench stream. Throws BenchError.
    virtual void enqueue(int set) = 0;

    /// Whether enqueue() writes D of the WorkloadBuffers, so that --check can compare it with
    /// the reference. Backends with buffers of their own (the padded peer, libmoegemm's MASKED
    /// layout) say false.
    virtual bool writes_workload_output() const = 0;

    /// For a backend with buffers of its own: refills its D of rotation set `set` with fresh
    /// random values, runs enqueue(set), and returns the valid rows of that D gathered into the
    /// workload's VARIABLE layout ([sum rows, N], bf16 bits), so that --check compares it with
    /// the reference like the others. nullopt (the default): it cannot, and goes unchecked.
    virtual std::optional<std::vector<uint16_t>> compact_output(int /*set*/) {
        return std::nullopt;
    }

    /// A line for the report; for libmoegemm, moegemm_plan_describe.
    virtual std::string description() const { return {}; }
};

/// libmoegemm through its public C API: a VARIABLE plan with max_rows = sum of rows, host
/// expert sizes, its own workspace; the workload's input type and scale mode, with the scales
/// of the WorkloadBuffers for E4M3. A library failure becomes a BenchError whose status is the
/// moegemm status name and whose message is moegemm_get_last_error_message().
/// `force_kernel`: a kernel name for problem.force_kernel, or empty for the heuristic's pick.
/// The comparison options (moegemm-bench --set) of every libmoegemm plan made after the call.
void set_library_plan_options(const moegemm::PlanOptions& options);

std::unique_ptr<GroupedGemm> make_library_gemm(const WorkloadBuffers& buffers,
                                               moegemm_backend_t backend, int device,
                                               cudaStream_t stream,
                                               const std::string& force_kernel = {});

/// libmoegemm as make_library_gemm, with the sizes in device memory and the mean rows per
/// expert as expected_rows: the graph-safe VARIABLE call, on every workload.
std::unique_ptr<GroupedGemm> make_library_device_sizes_gemm(const WorkloadBuffers& buffers,
                                                            moegemm_backend_t backend, int device,
                                                            cudaStream_t stream);

/// libmoegemm as make_library_gemm (`where` HOST) or make_library_device_sizes_gemm (DEVICE),
/// tuned by moegemm_plan_autotune on the first rotation set's buffers before it is timed. The
/// tuned kernel becomes the process's choice for the problem and size bucket: plans made
/// after it for the same workload take it too.
std::unique_ptr<GroupedGemm> make_library_tuned_gemm(const WorkloadBuffers& buffers,
                                                     moegemm_backend_t backend, int device,
                                                     moegemm_memory_t where, cudaStream_t stream);

/// libmoegemm in the MASKED layout with device-resident sizes, as a decode step calls it when
/// the router's counts stay on the GPU: max_rows = twice the largest expert's rows,
/// problem.expected_rows = mean rows per expert (rounded up, at least 1), sizes from a device
/// int32 array. A [E, max_rows, K] and D [E, max_rows, N] are its own, one pair per rotation set:
/// each expert's rows of the workload's A copied into its slab, random values past them (they
/// must not matter); B is the workload's. With per-row fp8 scales (ROWWISE, BLOCK) a_scale is
/// its own too, its rows following A's (row e * max_rows + m); other scales are the workload's.
/// Its buffers grow with E x the largest expert's rows: meant for decode-sized workloads.
std::unique_ptr<GroupedGemm> make_library_masked_gemm(const WorkloadBuffers& buffers,
                                                      moegemm_backend_t backend, int device,
                                                      cudaStream_t stream);

/// `eager` replayed from CUDA graphs: its enqueue(set) is captured once per rotation set, at
/// construction, and enqueue(set) launches that set's graph. What a framework that captures its
/// decode step pays per call. Checked by --check through the workload's D only.
std::unique_ptr<GroupedGemm> make_graph_gemm(std::unique_ptr<GroupedGemm> eager, int num_sets,
                                             cudaStream_t stream);

/// Peer: one cublasLtMatmul per expert with rows, algorithms chosen once up front. bf16, or E4M3
/// with PER_TENSOR scales (cuBLASLt's scale pointers); a BenchError for other scale modes.
std::unique_ptr<GroupedGemm> make_cublaslt_loop(const WorkloadBuffers& buffers,
                                                const CublasContext& cublas);

/// Peer: one cublasGemmGroupedBatchedEx call, one group per expert with rows. bf16 only.
std::unique_ptr<GroupedGemm> make_cublas_grouped(const WorkloadBuffers& buffers,
                                                 const CublasContext& cublas);

/// Peer: every expert padded to the largest expert's rows, one strided-batched cuBLASLt matmul
/// over all E experts (what a framework without grouped GEMM does; it reads every expert's
/// weights and computes the padding). bf16 only.
std::unique_ptr<GroupedGemm> make_padded_batched(const WorkloadBuffers& buffers,
                                                 const CublasContext& cublas, size_t l2_bytes);

}  // namespace moegemm_bench

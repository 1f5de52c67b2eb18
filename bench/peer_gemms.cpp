// The cuBLAS peers of libmoegemm, written directly against cuBLAS / cuBLASLt (never through the
// library), so that they measure what a user without libmoegemm would get.
#include "grouped_gemm.hpp"

#include "device_kernels.hpp"
#include "options.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace moegemm_bench {

namespace {

/// The least alignment of expert e's A, B and D pointers over every rotation set: the alignment
/// that cuBLAS algorithms chosen for that expert must accept.
uint32_t expert_alignment(const WorkloadBuffers& buffers, int expert) {
    uint32_t alignment = 256;
    for (int s = 0; s < buffers.num_sets(); ++s) {
        const WorkloadBuffers::Set& io = buffers.set(s);
        alignment =
            std::min({alignment, pointer_alignment(byte_offset(io.a, buffers.a_offset(expert))),
                      pointer_alignment(byte_offset(io.b, buffers.b_offset(expert))),
                      pointer_alignment(byte_offset(io.d, buffers.d_offset(expert)))});
    }
    return alignment;
}

/// Refuses, as a BenchError, a workload whose inputs a peer cannot take: the factories are only
/// called for runs that suit them (moegemm_bench.cpp leaves the others out), so this guards
/// against a misuse, not a routine case.
void require(bool supported, const char* peer, const Workload& workload) {
    if (supported) return;
    throw BenchError("not supported",
                     fmt::format("{} is not measured with {} inputs, scale mode {}", peer,
                                 dtype_name(workload.input_type),
                                 scale_mode_name(workload.scale_mode)));
}

// ---------------------------------------------------------------------------------------------

class CublasLtLoop final : public GroupedGemm {
public:
    CublasLtLoop(const WorkloadBuffers& buffers, const CublasContext& cublas) : buffers_(buffers) {
        const Workload& workload = buffers.workload();
        for (int e = 0; e < workload.experts; ++e) {
            if (workload.rows[e] == 0) continue;  // nothing to compute, nothing to launch
            RowMajorGemmShape shape{workload.rows[e], workload.n, workload.k};
            shape.input_type = cuda_type(workload.input_type);
            experts_.push_back({e, LtRowMajorGemm(cublas, shape, expert_alignment(buffers, e))});
        }
    }

    void enqueue(int set) override {
        const WorkloadBuffers::Set& io = buffers_.set(set);
        for (const Expert& expert : experts_) {
            expert.gemm.enqueue(byte_offset(io.a, buffers_.a_offset(expert.index)),
                                byte_offset(io.b, buffers_.b_offset(expert.index)),
                                byte_offset(io.d, buffers_.d_offset(expert.index)), io.a_scale,
                                io.b_scale);
        }
    }

    bool writes_workload_output() const override { return true; }

private:
    struct Expert {
        int index;
        LtRowMajorGemm gemm;
    };

    const WorkloadBuffers& buffers_;
    std::vector<Expert> experts_;
};

// ---------------------------------------------------------------------------------------------

class CublasGrouped final : public GroupedGemm {
public:
    CublasGrouped(const WorkloadBuffers& buffers, const CublasContext& cublas)
        : buffers_(buffers), cublas_(cublas) {
        const Workload& workload = buffers.workload();
        // Same column-major mapping as LtRowMajorGemm: cuBLAS's A is our B (op T, ld K), its B
        // is our A (op N, ld K), its C is D^T (ld N), and its (m, n, k) is our (N, M_e, K).
        for (int e = 0; e < workload.experts; ++e) {
            if (workload.rows[e] == 0) continue;
            experts_.push_back(e);
            transa_.push_back(CUBLAS_OP_T);
            transb_.push_back(CUBLAS_OP_N);
            m_.push_back(static_cast<int>(workload.n));
            n_.push_back(workload.rows[e]);
            k_.push_back(static_cast<int>(workload.k));
            lda_.push_back(static_cast<int>(workload.k));
            ldb_.push_back(static_cast<int>(workload.k));
            ldc_.push_back(static_cast<int>(workload.n));
            alpha_.push_back(1.0f);
            beta_.push_back(0.0f);
            group_size_.push_back(1);
        }

        // cuBLAS reads the matrix pointers from device memory: build one table per rotation set
        // now, laid out [set][A pointers | B pointers | C pointers].
        std::vector<const void*> table;
        for (int s = 0; s < buffers.num_sets(); ++s) {
            const WorkloadBuffers::Set& io = buffers.set(s);
            for (int e : experts_) table.push_back(byte_offset(io.b, buffers.b_offset(e)));
            for (int e : experts_) table.push_back(byte_offset(io.a, buffers.a_offset(e)));
            for (int e : experts_) table.push_back(byte_offset(io.d, buffers.d_offset(e)));
        }
        pointer_tables_ = DeviceBuffer(table.size() * sizeof(void*));
        BENCH_CUDA_CHECK(cudaMemcpy(pointer_tables_.get(), table.data(), pointer_tables_.bytes(),
                                    cudaMemcpyHostToDevice));
    }

    void enqueue(int set) override {
        const int groups = static_cast<int>(experts_.size());
        auto* table = static_cast<void**>(pointer_tables_.get()) + size_t{3} * groups * set;
        BENCH_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(
            cublas_.blas(), transa_.data(), transb_.data(), m_.data(), n_.data(), k_.data(),
            alpha_.data(), table, CUDA_R_16BF, lda_.data(), table + groups, CUDA_R_16BF,
            ldb_.data(), beta_.data(), table + 2 * groups, CUDA_R_16BF, ldc_.data(), groups,
            group_size_.data(), CUBLAS_COMPUTE_32F));
    }

    bool writes_workload_output() const override { return true; }

private:
    const WorkloadBuffers& buffers_;
    const CublasContext& cublas_;
    std::vector<int> experts_;  // the experts with rows, one group each
    std::vector<cublasOperation_t> transa_, transb_;
    std::vector<int> m_, n_, k_, lda_, ldb_, ldc_, group_size_;
    std::vector<float> alpha_, beta_;
    DeviceBuffer pointer_tables_;
};

// ---------------------------------------------------------------------------------------------

class PaddedBatched final : public GroupedGemm {
public:
    PaddedBatched(const WorkloadBuffers& buffers, const CublasContext& cublas, size_t l2_bytes)
        : buffers_(buffers),
          gemm_(cublas, padded_shape(buffers.workload()), padded_alignment(buffers)) {
        const RowMajorGemmShape& shape = gemm_.shape();
        const int64_t a_bytes = shape.batch * shape.stride_a * kBf16Bytes;
        const int64_t d_bytes = shape.batch * shape.stride_d * kBf16Bytes;

        // The weights rotate with the workload's sets; the padded A and D are this peer's own,
        // rotated too, in no more sets than the workload's. A repetition touches them and every
        // expert's weights.
        const auto own_bytes = static_cast<size_t>(a_bytes + d_bytes);
        const auto touched_bytes = own_bytes + static_cast<size_t>(buffers.b_bytes());
        const int num_sets =
            std::min(buffers.num_sets(), rotation_sets_for(touched_bytes, own_bytes, l2_bytes));
        for (int s = 0; s < num_sets; ++s) {
            padded_a_.emplace_back(static_cast<size_t>(a_bytes));
            padded_d_.emplace_back(static_cast<size_t>(d_bytes));
            // Padding rows hold random values too: the peer computes them, whatever they hold.
            fill_uniform_bf16(padded_a_.back().get(), static_cast<size_t>(a_bytes / kBf16Bytes),
                              0x5eed0000u + static_cast<uint32_t>(s), cublas.stream());
        }
        BENCH_CUDA_CHECK(cudaStreamSynchronize(cublas.stream()));
    }

    void enqueue(int set) override {
        const size_t own = static_cast<size_t>(set) % padded_a_.size();
        gemm_.enqueue(padded_a_[own].get(), buffers_.set(set).b, padded_d_[own].get());
    }

    bool writes_workload_output() const override { return false; }

private:
    /// E batch entries of [max rows, K] x [N, K]^T, packed back to back.
    static RowMajorGemmShape padded_shape(const Workload& workload) {
        RowMajorGemmShape shape{workload.max_expert_rows(), workload.n, workload.k};
        shape.batch = workload.experts;
        shape.stride_a = shape.m * shape.k;
        shape.stride_b = shape.n * shape.k;
        shape.stride_d = shape.m * shape.n;
        return shape;
    }

    /// Padded buffers come from cudaMalloc (256-byte aligned), but the batch strides are only
    /// multiples of 8 elements when N or K is, and B is the workload's.
    static uint32_t padded_alignment(const WorkloadBuffers& buffers) {
        const RowMajorGemmShape shape = padded_shape(buffers.workload());
        uint32_t alignment = 256;
        for (const int64_t stride : {shape.stride_a, shape.stride_b, shape.stride_d}) {
            const auto stride_bytes = static_cast<uintptr_t>(stride * kBf16Bytes);
            alignment =
                std::min(alignment, pointer_alignment(reinterpret_cast<const void*>(stride_bytes)));
        }
        for (int s = 0; s < buffers.num_sets(); ++s) {
            alignment = std::min(alignment, pointer_alignment(buffers.set(s).b));
        }
        return alignment;
    }

    const WorkloadBuffers& buffers_;
    LtRowMajorGemm gemm_;
    std::vector<DeviceBuffer> padded_a_, padded_d_;
};

}  // namespace

std::unique_ptr<GroupedGemm> make_cublaslt_loop(const WorkloadBuffers& buffers,
                                                const CublasContext& cublas) {
    // cuBLASLt scales an fp8 matmul by one value per operand.
    const moegemm_scale_mode_t mode = buffers.workload().scale_mode;
    require(mode == MOEGEMM_SCALE_NONE || mode == MOEGEMM_SCALE_PER_TENSOR, "the cuBLASLt loop",
            buffers.workload());
    return std::make_unique<CublasLtLoop>(buffers, cublas);
}

std::unique_ptr<GroupedGemm> make_cublas_grouped(const WorkloadBuffers& buffers,
                                                 const CublasContext& cublas) {
    require(buffers.workload().input_type == MOEGEMM_DTYPE_BF16, "cublasGemmGroupedBatchedEx",
            buffers.workload());
    return std::make_unique<CublasGrouped>(buffers, cublas);
}

std::unique_ptr<GroupedGemm> make_padded_batched(const WorkloadBuffers& buffers,
                                                 const CublasContext& cublas, size_t l2_bytes) {
    require(buffers.workload().input_type == MOEGEMM_DTYPE_BF16, "the padded batched peer",
            buffers.workload());
    return std::make_unique<PaddedBatched>(buffers, cublas, l2_bytes);
}

}  // namespace moegemm_bench

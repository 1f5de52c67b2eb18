// The cuBLAS / cuBLASLt setup that every cuBLAS-based measurement of moegemm-bench shares: the
// handles, one workspace, and the row-major GEMM D = A · B^T (bf16 or fp8 inputs, bf16 out)
// mapped onto column-major cuBLAS.
#pragma once

#include "cuda_utils.hpp"

#include <moegemm/moegemm.h>

#include <cstdint>
#include <string>

namespace moegemm_bench {

/// Bytes of a bf16 element: D's type always, A's and B's unless the run measures E4M3.
inline constexpr int64_t kBf16Bytes = 2;

/// The CUDA type of a libmoegemm input type the bench measures: CUDA_R_16BF or CUDA_R_8F_E4M3.
cudaDataType_t cuda_type(moegemm_dtype_t input_type);

/// cuBLAS and cuBLASLt handles bound to the bench's stream, sharing one workspace. All the work
/// of the bench is serialized on that one stream, so one workspace serves every peer.
class CublasContext {
public:
    CublasContext(cudaStream_t stream, size_t workspace_bytes);

    cublasLtHandle_t lt() const noexcept { return lt_.get(); }
    cublasHandle_t blas() const noexcept { return blas_.get(); }
    cudaStream_t stream() const noexcept { return stream_; }
    void* workspace() const noexcept { return workspace_.get(); }
    size_t workspace_bytes() const noexcept { return workspace_.bytes(); }

private:
    cudaStream_t stream_;
    UniqueHandle<cublasLtHandle_t, cublasLtDestroy> lt_;
    UniqueHandle<cublasHandle_t, cublasDestroy_v2> blas_;
    DeviceBuffer workspace_;
};

/// One row-major GEMM D[m, n] = A[m, k] · B[n, k]^T, bf16 out, fp32 accumulation; with
/// batch > 1, `batch` of them at the given element strides (strided-batched).
struct RowMajorGemmShape {
    int64_t m = 0;
    int64_t n = 0;
    int64_t k = 0;
    int32_t batch = 1;
    int64_t stride_a = 0;  ///< elements from one batch entry of A to the next
    int64_t stride_b = 0;
    int64_t stride_d = 0;
    /// Type of A and B: CUDA_R_16BF, or CUDA_R_8F_E4M3, scaled per tensor (see enqueue).
    cudaDataType_t input_type = CUDA_R_16BF;
};

std::string to_string(const RowMajorGemmShape& shape);

/// A cuBLASLt matmul for one RowMajorGemmShape, with the algorithm that
/// cublasLtMatmulAlgoGetHeuristic ranks first chosen once, at construction, so that timing measures
/// only cublasLtMatmul.
///
/// Mapping: cuBLASLt is column-major. Row-major D[m, n] is column-major D^T (n x m, ld n), and
/// D^T = B · A^T where row-major B[n, k] is column-major k x n (ld k), used transposed, and
/// row-major A[m, k] is column-major k x m (ld k), used as is. So cuBLAS's "A" operand is our B
/// (op T), its "B" operand is our A (op N), and its (m, n, k) is our (n, m, k).
class LtRowMajorGemm {
public:
    /// `pointer_alignment`: the least alignment of every A, B and D pointer that enqueue() will
    /// get; the heuristic only proposes algorithms valid for it (cuBLASLt assumes 256 bytes
    /// unless told otherwise, which sub-matrices of a grouped layout do not always have).
    LtRowMajorGemm(const CublasContext& cublas, const RowMajorGemmShape& shape,
                   uint32_t pointer_alignment);

    /// Enqueues D = A · B^T on the context's stream. E4M3 inputs: D = a_scale[0] · b_scale[0] ·
    /// A · B^T, the scales device pointers to one fp32 each, 16-byte aligned (cuBLASLt refuses
    /// others), read when the matmul runs; ignored for bf16.
    void enqueue(const void* a, const void* b, void* d, const float* a_scale = nullptr,
                 const float* b_scale = nullptr) const;

    const RowMajorGemmShape& shape() const noexcept { return shape_; }

private:
    using MatmulDesc = UniqueHandle<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
    using MatrixLayout = UniqueHandle<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;

    const CublasContext& cublas_;
    RowMajorGemmShape shape_;
    MatmulDesc matmul_;
    MatrixLayout weights_layout_;      // our B: cuBLAS operand A
    MatrixLayout activations_layout_;  // our A: cuBLAS operand B
    MatrixLayout output_layout_;       // our D: cuBLAS C and D
    cublasLtMatmulAlgo_t algorithm_{};
};

}  // namespace moegemm_bench

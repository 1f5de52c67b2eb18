#include "cublas_gemm.hpp"

#include <fmt/format.h>

namespace moegemm_bench {

CublasContext::CublasContext(cudaStream_t stream, size_t workspace_bytes)
    : stream_(stream), workspace_(workspace_bytes) {
    cublasLtHandle_t lt = nullptr;
    BENCH_CUBLAS_CHECK(cublasLtCreate(&lt));
    lt_ = decltype(lt_)(lt);

    cublasHandle_t blas = nullptr;
    BENCH_CUBLAS_CHECK(cublasCreate(&blas));
    blas_ = decltype(blas_)(blas);
    // cublasSetStream resets the handle's workspace to cuBLAS's own pool, so the workspace is
    // set after it.
    BENCH_CUBLAS_CHECK(cublasSetStream(blas, stream));
    BENCH_CUBLAS_CHECK(cublasSetWorkspace(blas, workspace_.get(), workspace_.bytes()));
}

cudaDataType_t cuda_type(moegemm_dtype_t input_type) {
    return input_type == MOEGEMM_DTYPE_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
}

std::string to_string(const RowMajorGemmShape& shape) {
    std::string text = fmt::format("m={} n={} k={}", shape.m, shape.n, shape.k);
    if (shape.batch > 1) text += fmt::format(" batch={}", shape.batch);
    if (shape.input_type == CUDA_R_8F_E4M3) text += " e4m3";
    return text;
}

namespace {

template <typename Value>
void set_layout_attribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attribute,
                          Value value) {
    BENCH_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, attribute, &value, sizeof(value)));
}

/// A column-major matrix layout of `type`, `rows` x `cols` with leading dimension `ld`, strided
/// batched when batch > 1.
UniqueHandle<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> make_layout(
    cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int32_t batch,
    int64_t batch_stride) {
    cublasLtMatrixLayout_t raw = nullptr;
    BENCH_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&raw, type, static_cast<uint64_t>(rows),
                                                  static_cast<uint64_t>(cols), ld));
    UniqueHandle<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> layout(raw);
    if (batch > 1) {
        set_layout_attribute(raw, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch);
        set_layout_attribute(raw, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, batch_stride);
    }
    return layout;
}

template <typename Value>
void set_matmul_attribute(cublasLtMatmulDesc_t matmul, cublasLtMatmulDescAttributes_t attribute,
                          Value value) {
    BENCH_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(matmul, attribute, &value, sizeof(value)));
}

template <typename Value>
void set_preference(cublasLtMatmulPreference_t preference,
                    cublasLtMatmulPreferenceAttributes_t attribute, Value value) {
    BENCH_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value)));
}

}  // namespace

LtRowMajorGemm::LtRowMajorGemm(const CublasContext& cublas, const RowMajorGemmShape& shape,
                               uint32_t pointer_alignment)
    : cublas_(cublas), shape_(shape) {
    cublasLtMatmulDesc_t matmul = nullptr;
    BENCH_CUBLAS_CHECK(cublasLtMatmulDescCreate(&matmul, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    matmul_ = MatmulDesc(matmul);
    set_matmul_attribute(matmul, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    set_matmul_attribute(matmul, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);

    // fp8 matmuls need both operands K-major, which this TN form is; their C (unused, beta = 0)
    // must have D's type, bf16.
    weights_layout_ =
        make_layout(shape.input_type, shape.k, shape.n, shape.k, shape.batch, shape.stride_b);
    activations_layout_ =
        make_layout(shape.input_type, shape.k, shape.m, shape.k, shape.batch, shape.stride_a);
    output_layout_ =
        make_layout(CUDA_R_16BF, shape.n, shape.m, shape.n, shape.batch, shape.stride_d);

    cublasLtMatmulPreference_t raw_preference = nullptr;
    BENCH_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw_preference));
    UniqueHandle<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy> preference(
        raw_preference);
    set_preference(raw_preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                   static_cast<uint64_t>(cublas.workspace_bytes()));
    for (const auto attribute :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
        set_preference(raw_preference, attribute, pointer_alignment);
    }

    cublasLtMatmulHeuristicResult_t best{};
    int found = 0;
    BENCH_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(
        cublas.lt(), matmul, weights_layout_.get(), activations_layout_.get(), output_layout_.get(),
        output_layout_.get(), raw_preference, 1, &best, &found));
    if (found == 0 || best.state != CUBLAS_STATUS_SUCCESS) {
        throw BenchError("CUBLAS_STATUS_NOT_SUPPORTED",
                         fmt::format("cublasLtMatmulAlgoGetHeuristic found no algorithm for {} "
                                     "(pointer alignment {} bytes)",
                                     to_string(shape), pointer_alignment));
    }
    algorithm_ = best.algo;
}

void LtRowMajorGemm::enqueue(const void* a, const void* b, void* d, const float* a_scale,
                             const float* b_scale) const {
    if (shape_.input_type == CUDA_R_8F_E4M3) {
        // Scale pointers are attributes of the descriptor (two host-side stores): cuBLAS's A is
        // our B and its B our A, as for the data.
        set_matmul_attribute(matmul_.get(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, b_scale);
        set_matmul_attribute(matmul_.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, a_scale);
    }
    const float alpha = 1.0f, beta = 0.0f;
    BENCH_CUBLAS_CHECK(cublasLtMatmul(cublas_.lt(), matmul_.get(), &alpha, b, weights_layout_.get(),
                                      a, activations_layout_.get(), &beta, d, output_layout_.get(),
                                      d, output_layout_.get(), &algorithm_, cublas_.workspace(),
                                      cublas_.workspace_bytes(), cublas_.stream()));
}

}  // namespace moegemm_bench

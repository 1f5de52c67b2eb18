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

std::string to_string(const RowMajorGemmShape& shape) {
    std::string text = fmt::format("m={} n={} k={}", shape.m, shape.n, shape.k);
    if (shape.batch > 1) text += fmt::format(" batch={}", shape.batch);
    return text;
}

namespace {

template <typename Value>
void set_layout_attribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attribute,
                          Value value) {
    BENCH_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, attribute, &value, sizeof(value)));
}

/// A column-major bf16 matrix layout of `rows` x `cols` with leading dimension `ld`, strided
/// batched when batch > 1.
UniqueHandle<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> make_layout(
    int64_t rows, int64_t cols, int64_t ld, int32_t batch, int64_t batch_stride) {
    cublasLtMatrixLayout_t raw = nullptr;
    BENCH_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&raw, CUDA_R_16BF, static_cast<uint64_t>(rows),
                                                  static_cast<uint64_t>(cols), ld));
    UniqueHandle<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> layout(raw);
    if (batch > 1) {
        set_layout_attribute(raw, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch);
        set_layout_attribute(raw, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, batch_stride);
    }
    return layout;
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
    const cublasOperation_t transpose = CUBLAS_OP_T, no_transpose = CUBLAS_OP_N;
    BENCH_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(matmul, CUBLASLT_MATMUL_DESC_TRANSA,
                                                      &transpose, sizeof(transpose)));
    BENCH_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(matmul, CUBLASLT_MATMUL_DESC_TRANSB,
                                                      &no_transpose, sizeof(no_transpose)));

    weights_layout_ = make_layout(shape.k, shape.n, shape.k, shape.batch, shape.stride_b);
    activations_layout_ = make_layout(shape.k, shape.m, shape.k, shape.batch, shape.stride_a);
    output_layout_ = make_layout(shape.n, shape.m, shape.n, shape.batch, shape.stride_d);

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

void LtRowMajorGemm::enqueue(const void* a, const void* b, void* d) const {
    const float alpha = 1.0f, beta = 0.0f;
    BENCH_CUBLAS_CHECK(cublasLtMatmul(cublas_.lt(), matmul_.get(), &alpha, b, weights_layout_.get(),
                                      a, activations_layout_.get(), &beta, d, output_layout_.get(),
                                      d, output_layout_.get(), &algorithm_, cublas_.workspace(),
                                      cublas_.workspace_bytes(), cublas_.stream()));
}

}  // namespace moegemm_bench

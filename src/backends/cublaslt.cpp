// The cuBLASLt baseline.
//
// cuBLASLt is column-major; our tensors are row-major. Row-major D[M, N] = A[M, K] * B_e^T is
// column-major D^T (N x M, ld N) = op(B_e) * A^T, where the memory of A is a column-major
// K x M matrix (ld K) and the memory of B_e is a column-major K x N matrix (ld K) for
// WEIGHTS_NK, used transposed, or an N x K matrix (ld N) for WEIGHTS_KN, used as is. So
// cuBLASLt's "A" is our B and its "B" is our A.
//
// Algorithms are chosen when sizes are set and cached per distinct row count, so that
// execute only issues cublasLtMatmul calls: no heuristic query, no allocation, no sync.
#include "backends/cublaslt.hpp"

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "error.hpp"
#include "registry.hpp"

namespace moegemm {

namespace {

cudaDataType_t cuda_type(moegemm_dtype_t t) {
    switch (t) {
        case MOEGEMM_DTYPE_BF16: return CUDA_R_16BF;
        case MOEGEMM_DTYPE_F16: return CUDA_R_16F;
        case MOEGEMM_DTYPE_F32: return CUDA_R_32F;
        case MOEGEMM_DTYPE_E4M3: return CUDA_R_8F_E4M3;
    }
    fail(MOEGEMM_STATUS_INTERNAL_ERROR, "unhandled dtype {}", static_cast<int>(t));
}

struct LayoutDeleter {
    void operator()(cublasLtMatrixLayoutOpaque_t* p) const noexcept {
        (void)cublasLtMatrixLayoutDestroy(p);
    }
};
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDeleter>;

// A column-major rows x cols matrix with leading dimension ld; batched when batch > 1.
Layout make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int32_t batch,
                   int64_t batch_stride) {
    cublasLtMatrixLayout_t raw = nullptr;
    MOEGEMM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&raw, type, static_cast<uint64_t>(rows),
                                                    static_cast<uint64_t>(cols), ld));
    Layout layout(raw);
    if (batch > 1) {
        MOEGEMM_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
            raw, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
        MOEGEMM_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
            raw, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride, sizeof batch_stride));
    }
    return layout;
}

// Compatible output types: cuBLASLt computes 16-bit inputs into the same type or fp32, and
// fp8 into BF16 or fp32 (problem validation already refuses F16).
bool output_type_supported(moegemm_dtype_t a, moegemm_dtype_t d) {
    if (a == MOEGEMM_DTYPE_E4M3) return d == MOEGEMM_DTYPE_BF16 || d == MOEGEMM_DTYPE_F32;
    return d == a || d == MOEGEMM_DTYPE_F32;
}

// fp8 matmuls scale A and B by one device scale each (scale pointers, read when the matmul
// runs) and need both operands K-major; on Hopper cuBLASLt has no row-, column- or
// block-wise fp8 scales. Per-expert B scales are not served either: the expert loop would
// point at b_scale + e, and cuBLASLt refuses scale pointers that are not 16-byte aligned
// (CUBLAS_STATUS_NOT_SUPPORTED at the second expert, H200, cuBLASLt 13.1).
bool fp8_can_implement(const ProblemSummary& p, const DeviceCaps& d, std::string* why) {
    if (d.compute_capability() < 89) {
        *why = fmt::format("cuBLASLt runs E4M3 matmuls on compute capability 8.9 and newer; "
                           "the device is {}.{}", d.cc_major, d.cc_minor);
        return false;
    }
    if (p.weight_layout != MOEGEMM_WEIGHTS_NK) {
        *why = "E4M3 weights must be [E, N, K] (K contiguous, WEIGHTS_NK): fp8 tensor-core "
               "matmuls read both operands K-major; transpose the weights once when loading them";
        return false;
    }
    if (p.scale_mode != MOEGEMM_SCALE_PER_TENSOR) {
        *why = fmt::format("the cuBLASLt baseline scales E4M3 matmuls per tensor only; scale "
                           "mode {} needs the native fp8 kernels (sm_90)",
                           scale_mode_name(p.scale_mode));
        return false;
    }
    return true;
}

bool common_can_implement(const ProblemSummary& p, const DeviceCaps& d, std::string* why) {
    if (!output_type_supported(p.a_type, p.d_type)) {
        *why = fmt::format("cuBLASLt has no {} x {} -> {} matmul (outputs are {})",
                           dtype_name(p.a_type), dtype_name(p.a_type), dtype_name(p.d_type),
                           p.a_type == MOEGEMM_DTYPE_E4M3
                               ? "BF16 or F32"
                               : fmt::format("{} or F32", dtype_name(p.a_type)));
        return false;
    }
    if (p.a_type == MOEGEMM_DTYPE_E4M3) return fp8_can_implement(p, d, why);
    return true;
}

}  // namespace

/// Per-plan cuBLASLt state: the handle, the matmul descriptor (fixed by the problem), the
/// preference, and matmul configurations cached by (rows, batch).
class CublasLtContext {
public:
    /// One configured matmul: layouts of its three operands and the algorithm.
    struct Matmul {
        Layout weights;      // cuBLASLt's "A": our B_e
        Layout activations;  // cuBLASLt's "B": our A rows
        Layout output;       // C and D: our D rows
        cublasLtMatmulAlgo_t algo{};
        std::size_t algo_workspace = 0;
        int algo_id = -1;
        int tile_id = -1;
    };

    CublasLtContext(const ProblemDesc& p, const DeviceCaps& d)
        : problem_(p), workspace_limit_(cublaslt::workspace_bytes(p, d)) {
        MOEGEMM_CUBLAS_CHECK(cublasLtCreate(&handle_));
        try {
            MOEGEMM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
            const cublasOperation_t op_weights =
                p.weight_layout == MOEGEMM_WEIGHTS_NK ? CUBLAS_OP_T : CUBLAS_OP_N;
            const cublasOperation_t op_activations = CUBLAS_OP_N;
            MOEGEMM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
                desc_, CUBLASLT_MATMUL_DESC_TRANSA, &op_weights, sizeof op_weights));
            MOEGEMM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
                desc_, CUBLASLT_MATMUL_DESC_TRANSB, &op_activations, sizeof op_activations));

            MOEGEMM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference_));
            MOEGEMM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
                preference_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_limit_,
                sizeof workspace_limit_));
            // Expert offsets make pointers only 16-byte aligned; cuBLASLt would otherwise
            // assume 256 bytes and may pick kernels that fault on them.
            const uint32_t alignment = static_cast<uint32_t>(kTensorAlignment);
            for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                              CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                              CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                              CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
                MOEGEMM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
                    preference_, attr, &alignment, sizeof alignment));
            }
        } catch (...) {
            release();
            throw;
        }
    }

    ~CublasLtContext() { release(); }
    CublasLtContext(const CublasLtContext&) = delete;
    CublasLtContext& operator=(const CublasLtContext&) = delete;

    /// The matmul for `rows` rows of A (per batch entry), over `batch` experts strided by
    /// their slabs (batch == 1: a single expert). Created and cached on first use.
    const Matmul& matmul_for(int64_t rows, int32_t batch) {
        const auto key = std::make_pair(rows, batch);
        auto it = cache_.find(key);
        if (it != cache_.end()) return *it->second;

        const ProblemDesc& p = problem_;
        const cudaDataType_t in = cuda_type(p.a_type);
        const cudaDataType_t out = cuda_type(p.d_type);
        auto m = std::make_unique<Matmul>();
        m->weights = p.weight_layout == MOEGEMM_WEIGHTS_NK
                         ? make_layout(in, p.k, p.n, p.k, batch, p.n * p.k)
                         : make_layout(in, p.n, p.k, p.n, batch, p.n * p.k);
        m->activations = make_layout(in, p.k, rows, p.k, batch, p.max_rows * p.k);
        m->output = make_layout(out, p.n, rows, p.n, batch, p.max_rows * p.n);

        cublasLtMatmulHeuristicResult_t result{};
        int found = 0;
        MOEGEMM_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(
            handle_, desc_, m->weights.get(), m->activations.get(), m->output.get(),
            m->output.get(), preference_, 1, &result, &found));
        require(found > 0, MOEGEMM_STATUS_NOT_SUPPORTED,
                "cuBLASLt has no algorithm for {} x {} -> {}, M = {}, N = {}, K = {}, batch {}",
                dtype_name(p.a_type), dtype_name(p.b_type), dtype_name(p.d_type), rows, p.n,
                p.k, batch);
        m->algo = result.algo;
        m->algo_workspace = result.workspaceSize;
        std::size_t written = 0;
        (void)cublasLtMatmulAlgoConfigGetAttribute(&m->algo, CUBLASLT_ALGO_CONFIG_ID, &m->algo_id,
                                                   sizeof m->algo_id, &written);
        (void)cublasLtMatmulAlgoConfigGetAttribute(&m->algo, CUBLASLT_ALGO_CONFIG_TILE_ID,
                                                   &m->tile_id, sizeof m->tile_id, &written);
        return *cache_.emplace(key, std::move(m)).first->second;
    }

    /// Enqueues one matmul: D rows = A rows x B_e (batched over slabs when the config is).
    /// fp8: D = activation_scale * weight_scale * (A x B_e), both device pointers.
    void run(const Matmul& m, const void* weights, const void* activations, void* output,
             const ExecuteArgs& args, cudaStream_t stream, const float* weight_scale = nullptr,
             const float* activation_scale = nullptr) const {
        const float alpha = 1.0f;
        const float beta = 0.0f;
        // fp8: the scale pointers are attributes of the shared descriptor, read when the
        // matmul is enqueued: executes of this plan on other threads must not change them in
        // between.
        std::unique_lock<std::mutex> lock(scales_mutex_, std::defer_lock);
        if (problem_.a_type == MOEGEMM_DTYPE_E4M3) {
            lock.lock();
            MOEGEMM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
                desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &weight_scale, sizeof weight_scale));
            MOEGEMM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
                desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &activation_scale,
                sizeof activation_scale));
        }
        MOEGEMM_CUBLAS_CHECK(cublasLtMatmul(handle_, desc_, &alpha, weights, m.weights.get(),
                                            activations, m.activations.get(), &beta, output,
                                            m.output.get(), output, m.output.get(), &m.algo,
                                            args.workspace, args.workspace_bytes, stream));
    }

    const ProblemDesc& problem() const noexcept { return problem_; }

private:
    void release() noexcept {
        cache_.clear();
        if (preference_) (void)cublasLtMatmulPreferenceDestroy(preference_);
        if (desc_) (void)cublasLtMatmulDescDestroy(desc_);
        if (handle_) (void)cublasLtDestroy(handle_);
        preference_ = nullptr;
        desc_ = nullptr;
        handle_ = nullptr;
    }

    ProblemDesc problem_;
    std::size_t workspace_limit_;
    cublasLtHandle_t handle_ = nullptr;
    cublasLtMatmulDesc_t desc_ = nullptr;
    cublasLtMatmulPreference_t preference_ = nullptr;
    std::map<std::pair<int64_t, int32_t>, std::unique_ptr<Matmul>> cache_;
    mutable std::mutex scales_mutex_;  // fp8: guards the scale pointers of desc_
};

BackendResources::BackendResources() = default;
BackendResources::~BackendResources() = default;
void BackendResources::release() noexcept { cublaslt.reset(); }

namespace {

CublasLtContext& context(const ProblemDesc& p, const DeviceCaps& d, BackendResources& r) {
    if (!r.cublaslt) r.cublaslt = std::make_unique<CublasLtContext>(p, d);
    return *r.cublaslt;
}

std::string describe_matmul(const CublasLtContext::Matmul& m) {
    return fmt::format("algo {} tile {}", m.algo_id, m.tile_id);
}

/// VARIABLE with host sizes: one matmul per non-empty expert, at its row offset.
class ExpertLoop final : public Kernel {
public:
    ExpertLoop(CublasLtContext& ctx, const ExpertSizes& sizes) : ctx_(ctx) {
        const ProblemDesc& p = ctx.problem();
        int64_t offset = 0;
        for (int32_t e = 0; e < p.num_experts; ++e) {
            const int32_t rows = sizes.host[static_cast<std::size_t>(e)];
            if (rows > 0) steps_.push_back(Step{e, rows, offset, &ctx.matmul_for(rows, 1)});
            offset += rows;
        }
    }

    void launch(const ExecuteArgs& args, CUstream_st* stream) const override {
        const ProblemDesc& p = ctx_.problem();
        const std::size_t in = dtype_bytes(p.a_type);
        const std::size_t out = dtype_bytes(p.d_type);
        const auto* a = static_cast<const char*>(args.a);
        const auto* b = static_cast<const char*>(args.b);
        auto* d = static_cast<char*>(args.d);
        for (const Step& s : steps_) {
            const auto row = static_cast<std::size_t>(s.row_offset);
            ctx_.run(*s.matmul, b + static_cast<std::size_t>(s.expert) * p.n * p.k * in,
                     a + row * p.k * in, d + row * p.n * out, args, stream, args.b_scale,
                     args.a_scale);
        }
    }

    std::string describe() const override {
        const Step* largest = nullptr;
        for (const Step& s : steps_) {
            if (!largest || s.rows > largest->rows) largest = &s;
        }
        if (!largest) return "no rows";
        return fmt::format("{} matmuls, largest ({} rows): {}", steps_.size(), largest->rows,
                           describe_matmul(*largest->matmul));
    }

private:
    struct Step {
        int32_t expert;
        int32_t rows;
        int64_t row_offset;
        const CublasLtContext::Matmul* matmul;
    };
    CublasLtContext& ctx_;
    std::vector<Step> steps_;
};

/// MASKED and FIXED: one strided-batched matmul over the slabs, as many rows per slab as the
/// largest expert (host sizes) or the whole slab (FIXED, or device sizes).
class StridedBatched final : public Kernel {
public:
    StridedBatched(CublasLtContext& ctx, const ExpertSizes& sizes) : ctx_(ctx) {
        const ProblemDesc& p = ctx.problem();
        rows_ = sizes.source == SizesSource::Host ? sizes.largest : p.max_rows;
        if (rows_ > 0) matmul_ = &ctx.matmul_for(rows_, p.num_experts);
    }

    void launch(const ExecuteArgs& args, CUstream_st* stream) const override {
        if (matmul_) ctx_.run(*matmul_, args.b, args.a, args.d, args, stream, args.b_scale,
                              args.a_scale);
    }

    std::string describe() const override {
        return matmul_ ? fmt::format("{} rows per slab, {}", rows_, describe_matmul(*matmul_))
                       : std::string("no rows");
    }

private:
    CublasLtContext& ctx_;
    int64_t rows_ = 0;
    const CublasLtContext::Matmul* matmul_ = nullptr;
};

}  // namespace

namespace cublaslt {

bool can_implement_expert_loop(const ProblemSummary& p, const DeviceCaps& d, std::string* why) {
    if (p.layout != MOEGEMM_LAYOUT_VARIABLE) {
        *why = "serves the VARIABLE layout only";
        return false;
    }
    if (p.sizes == SizesSource::Device) {
        *why = "VARIABLE with device-resident sizes: cuBLASLt needs the row counts on the host; "
               "the native sm_90a backend (H100/H200) serves it; pass HOST sizes to use cuBLASLt";
        return false;
    }
    return common_can_implement(p, d, why);
}

bool can_implement_strided_batched(const ProblemSummary& p, const DeviceCaps& d,
                                   std::string* why) {
    if (p.layout == MOEGEMM_LAYOUT_VARIABLE) {
        *why = "serves the MASKED and FIXED layouts only";
        return false;
    }
    return common_can_implement(p, d, why);
}

std::size_t workspace_bytes(const ProblemDesc&, const DeviceCaps& d) {
    // NVIDIA's recommendation for cuBLASLt: 32 MiB on Hopper and newer, 4 MiB before.
    return d.cc_major >= 9 ? std::size_t{32} << 20 : std::size_t{4} << 20;
}

std::unique_ptr<Kernel> create_expert_loop(const ProblemDesc& p, const DeviceCaps& d,
                                           const ExpertSizes& sizes, BackendResources& r) {
    return std::make_unique<ExpertLoop>(context(p, d, r), sizes);
}

std::unique_ptr<Kernel> create_strided_batched(const ProblemDesc& p, const DeviceCaps& d,
                                               const ExpertSizes& sizes, BackendResources& r) {
    return std::make_unique<StridedBatched>(context(p, d, r), sizes);
}

}  // namespace cublaslt
}  // namespace moegemm

// The cuBLASLt baseline.
//
// cuBLASLt is column-major; our tensors are row-major. Row-major D[M, N] = A[M, K] * B_e^T is
// column-major D^T (N x M, ld N) = op(B_e) * A^T, where the memory of A is a column-major
// K x M matrix (ld K) and the memory of B_e is a column-major K x N matrix (ld K) for
// WEIGHTS_NK, used transposed, or an N x K matrix (ld N) for WEIGHTS_KN, used as is. So
// cuBLASLt's "A" is our B and its "B" is our A.
//
// Epilogue: cuBLASLt computes D = act(alpha * op(A) op(B) + beta * C + bias), its bias
// holding one element per row of its D, broadcast over its columns (cublasLt.h,
// CUBLASLT_EPILOGUE_BIAS). Its rows are our columns n and its columns our rows, so that vector
// is our bias[e, 0..N): x = acc * alpha[e] + bias[e, n], then GELU, the header's formula. The
// per-expert alpha is a device scalar, one pointer per expert matmul. What cuBLASLt has no
// epilogue for (row scales, SiLU, gated activations, gathered rows) is refused with
// NOT_SUPPORTED and the reason.
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

bool takes(uint32_t epilogue_inputs, uint32_t bit) noexcept { return (epilogue_inputs & bit) != 0; }

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

template <typename T>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                   const T& value) {
    MOEGEMM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value));
}

// The process's cuBLASLt handle for `device`, created on first use and never destroyed:
// cublasLtDestroy synchronizes the whole context, which at every plan's destruction would stall
// all of the caller's streams, and it breaks (or crashes in) captures under way in other
// threads. cuBLASLt's functions are thread safe on a shared handle, and everything per call
// (stream, workspace, algorithm) is passed to cublasLtMatmul, so plans share it.
cublasLtHandle_t shared_handle(int device) {
    static auto* handles = new PerDevice<cublasLtHandle_t>();
    return handles->get(device, [] {
        cublasLtHandle_t handle = nullptr;
        MOEGEMM_CUBLAS_CHECK(cublasLtCreate(&handle));
        return handle;
    });
}

// A float 0 in device memory of `device`, shared by its plans and never freed (a cudaFree at
// each plan's destruction would synchronize the device): beta, read from device memory like
// alpha in CUBLASLT_POINTER_MODE_DEVICE. Waited for when it is made, so that no stream of the
// caller (a non-blocking one does not order itself after the default stream) reads it before
// it is 0.
const float* shared_device_zero(int device) {
    static auto* zeros = new PerDevice<const float*>();
    return zeros->get(device, [device] {
        ScopedDevice on(device);
        void* raw = nullptr;
        MOEGEMM_CUDA_CHECK(cudaMalloc(&raw, sizeof(float)));
        MOEGEMM_CUDA_CHECK(cudaMemsetAsync(raw, 0, sizeof(float), nullptr));
        MOEGEMM_CUDA_CHECK(cudaStreamSynchronize(nullptr));
        return static_cast<const float*>(raw);
    });
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

// The epilogue cuBLASLt has: a scalar alpha (per expert: one device pointer per matmul), a
// bias vector along our columns, GELU; nothing else. (E4M3 inputs take no epilogue option:
// problem validation refuses them first.)
bool epilogue_can_implement(const ProblemSummary& p, std::string* why) {
    if (p.gather) {
        *why = "gathered A rows (gather_rows): cuBLASLt reads A with one row stride and cannot "
               "follow row indices; the native sm_90 kernels serve it";
        return false;
    }
    if (takes(p.epilogue_inputs, MOEGEMM_EPILOGUE_ROW_SCALE)) {
        *why = "row scales (MOEGEMM_EPILOGUE_ROW_SCALE): cuBLASLt has no per-row scale epilogue "
               "(its vector alpha runs along the rows of its output, our columns); the native "
               "sm_90 kernels serve it";
        return false;
    }
    // For 16-bit inputs cuBLASLt adds a bias of D's type (cublasLt.h, BIAS_DATA_TYPE: "Bias
    // vector elements are the same type as the elements of output matrix (Dtype)", save for
    // int8 and fp8 kernels).
    if (takes(p.epilogue_inputs, MOEGEMM_EPILOGUE_BIAS) && p.bias_type != p.d_type) {
        *why = fmt::format("bias_type {} with d_type {}: cuBLASLt adds a bias of the output's "
                           "type only (pass a {} bias); the native sm_90 kernels take BF16, F16 "
                           "and F32 biases",
                           dtype_name(p.bias_type), dtype_name(p.d_type), dtype_name(p.d_type));
        return false;
    }
    // CUBLASLT_EPILOGUE_GELU is the tanh form (cublasLt.h names no formula): PyTorch's
    // _addmm_activation(use_gelu=True) runs it and, without cuBLASLt, gelu(approximate="tanh"),
    // and its tests check the epilogue against the tanh form on CUDA.
    switch (enum_value(p.activation)) {
        case MOEGEMM_ACTIVATION_NONE:
        case MOEGEMM_ACTIVATION_GELU_TANH: return true;
        case MOEGEMM_ACTIVATION_SILU:
            *why = "cuBLASLt has no SiLU epilogue; the native sm_90 kernels serve it";
            return false;
        default:
            *why = fmt::format("cuBLASLt has no gated epilogue ({} combines a gate and an up "
                               "column into one output column); the native sm_90 kernels serve it",
                               activation_name(p.activation));
            return false;
    }
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
    if (!epilogue_can_implement(p, why)) return false;
    if (p.a_type == MOEGEMM_DTYPE_E4M3) return fp8_can_implement(p, d, why);
    return true;
}

cublasLtEpilogue_t epilogue_of(const ProblemDesc& p) {
    const bool bias = takes(p.epilogue_inputs, MOEGEMM_EPILOGUE_BIAS);
    if (p.activation == MOEGEMM_ACTIVATION_GELU_TANH)
        return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// The bias pointer of heuristic queries. They never read the bias but infer its alignment
// from the pointer (cublasLt.h, BIAS_POINTER). An expert's row of the caller's bias is only
// 16-byte aligned (the bias is, and N is a multiple of 8), so the placeholder is as well;
// every matmul sets its real row.
const void* const kBiasPlaceholder = reinterpret_cast<const void*>(kTensorAlignment);

// The epilogue's attributes, set on the descriptor before any heuristic query so that
// cublasLtMatmulAlgoGetHeuristic picks algorithms for what cublasLtMatmul will run.
void set_epilogue(cublasLtMatmulDesc_t desc, const ProblemDesc& p) {
    if (takes(p.epilogue_inputs, MOEGEMM_EPILOGUE_ALPHA)) {
        // alpha[e] stays in device memory: each expert's matmul points at its element. The
        // vector modes would scale the rows of cuBLASLt's output (our columns) instead.
        set_attribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE,
                      static_cast<int32_t>(CUBLASLT_POINTER_MODE_DEVICE));
    }
    set_attribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(epilogue_of(p)));
    if (!takes(p.epilogue_inputs, MOEGEMM_EPILOGUE_BIAS)) return;
    set_attribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                  static_cast<int32_t>(cuda_type(p.bias_type)));
    // Strided-batched matmuls step through bias [E, N] one expert row per slab.
    set_attribute(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, int64_t{p.n});
    set_attribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, kBiasPlaceholder);
}

// "alpha, bias BF16, GELU" for moegemm_plan_describe; empty for the plain product.
std::string epilogue_description(const ProblemDesc& p) {
    std::string text;
    auto add = [&text](const std::string& part) { text += (text.empty() ? "" : ", ") + part; };
    if (takes(p.epilogue_inputs, MOEGEMM_EPILOGUE_ALPHA)) add("alpha per expert");
    if (takes(p.epilogue_inputs, MOEGEMM_EPILOGUE_BIAS))
        add(fmt::format("bias {}", dtype_name(p.bias_type)));
    if (p.activation == MOEGEMM_ACTIVATION_GELU_TANH) add("GELU");
    return text;
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

    /// The device pointers of one matmul.
    struct Operands {
        const void* weights = nullptr;      // B_e, or B (batched)
        const void* activations = nullptr;  // the A rows
        void* output = nullptr;             // the D rows
        const float* alpha = nullptr;       // ALPHA: alpha + e
        const void* bias = nullptr;         // BIAS: expert e's row, or the first (batched)
    };

    CublasLtContext(const ProblemDesc& p, const DeviceCaps& d)
        : problem_(p),
          workspace_limit_(cublaslt::workspace_bytes(p, d)),
          device_alpha_(takes(p.epilogue_inputs, MOEGEMM_EPILOGUE_ALPHA)),
          per_call_pointers_(p.a_type == MOEGEMM_DTYPE_E4M3 ||
                             takes(p.epilogue_inputs, MOEGEMM_EPILOGUE_BIAS)) {
        handle_ = shared_handle(p.device);
        try {
            MOEGEMM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
            const cublasOperation_t op_weights =
                p.weight_layout == MOEGEMM_WEIGHTS_NK ? CUBLAS_OP_T : CUBLAS_OP_N;
            set_attribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, op_weights);
            set_attribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
            set_epilogue(desc_, p);
            if (device_alpha_) zero_ = shared_device_zero(p.device);

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
        const int found = query_heuristic(*m, &result);
        const std::string epilogue = epilogue_description(p);
        require(found > 0, MOEGEMM_STATUS_NOT_SUPPORTED,
                "cuBLASLt has no algorithm for {} x {} -> {}{}{}, M = {}, N = {}, K = {}, batch {}",
                dtype_name(p.a_type), dtype_name(p.b_type), dtype_name(p.d_type),
                epilogue.empty() ? "" : " with ", epilogue, rows, p.n, p.k, batch);
        m->algo = result.algo;
        m->algo_workspace = result.workspaceSize;
        std::size_t written = 0;
        (void)cublasLtMatmulAlgoConfigGetAttribute(&m->algo, CUBLASLT_ALGO_CONFIG_ID, &m->algo_id,
                                                   sizeof m->algo_id, &written);
        (void)cublasLtMatmulAlgoConfigGetAttribute(&m->algo, CUBLASLT_ALGO_CONFIG_TILE_ID,
                                                   &m->tile_id, sizeof m->tile_id, &written);
        return *cache_.emplace(key, std::move(m)).first->second;
    }

    /// Expert e's operands, its rows of A and D starting at row `row`.
    Operands expert_operands(const ExecuteArgs& args, int32_t e, int64_t row) const {
        const ProblemDesc& p = problem_;
        const auto expert = static_cast<std::size_t>(e);
        const auto r = static_cast<std::size_t>(row);
        const auto n = static_cast<std::size_t>(p.n);
        const auto k = static_cast<std::size_t>(p.k);
        Operands o;
        o.weights = static_cast<const char*>(args.b) + expert * n * k * dtype_bytes(p.b_type);
        o.activations = static_cast<const char*>(args.a) + r * k * dtype_bytes(p.a_type);
        o.output = static_cast<char*>(args.d) + r * n * dtype_bytes(p.d_type);
        if (args.alpha) o.alpha = args.alpha + e;
        if (args.bias)
            o.bias = static_cast<const char*>(args.bias) + expert * n * dtype_bytes(p.bias_type);
        return o;
    }

    /// The operands of one strided-batched matmul over every slab (one alpha for all: none).
    static Operands batched_operands(const ExecuteArgs& args) {
        Operands o;
        o.weights = args.b;
        o.activations = args.a;
        o.output = args.d;
        o.bias = args.bias;
        return o;
    }

    /// Enqueues one matmul: D rows = epilogue(A rows x B_e) (batched over slabs when the
    /// config is). fp8: D = a_scale * b_scale * (A x B_e), both device pointers. Callers hold
    /// a RelaxedCaptureMode: cuBLASLt loads a kernel on its first matmul, and under a caller's
    /// capture that load must not invalidate it (native kernels load when their plan is made).
    void run(const Matmul& m, const Operands& o, const ExecuteArgs& args,
             cudaStream_t stream) const {
        static const float kOne = 1.0f;
        static const float kZero = 0.0f;
        const void* alpha = device_alpha_ ? static_cast<const void*>(o.alpha) : &kOne;
        const void* beta = device_alpha_ ? static_cast<const void*>(zero_) : &kZero;
        // The fp8 scale pointers and the bias row are attributes of the shared descriptor,
        // read when the matmul is enqueued: executes of this plan on other threads must not
        // change them in between.
        std::unique_lock<std::mutex> lock(pointers_mutex_, std::defer_lock);
        if (per_call_pointers_) {
            lock.lock();
            if (problem_.a_type == MOEGEMM_DTYPE_E4M3) {
                set_attribute(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, args.b_scale);
                set_attribute(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, args.a_scale);
            }
            if (takes(problem_.epilogue_inputs, MOEGEMM_EPILOGUE_BIAS))
                set_attribute(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, o.bias);
        }
        MOEGEMM_CUBLAS_CHECK(cublasLtMatmul(handle_, desc_, alpha, o.weights, m.weights.get(),
                                            o.activations, m.activations.get(), beta, o.output,
                                            m.output.get(), o.output, m.output.get(), &m.algo,
                                            args.workspace, args.workspace_bytes, stream));
    }

    const ProblemDesc& problem() const noexcept { return problem_; }

private:
    /// The best algorithm for `m` with the descriptor execute runs with (its epilogue:
    /// set_epilogue); returns how many were found (0 or 1).
    int query_heuristic(const Matmul& m, cublasLtMatmulHeuristicResult_t* result) {
        std::lock_guard<std::mutex> lock(pointers_mutex_);
        // An execute left a real bias row on the descriptor, perhaps better aligned than the
        // other experts' rows: back to the placeholder of set_epilogue.
        if (takes(problem_.epilogue_inputs, MOEGEMM_EPILOGUE_BIAS))
            set_attribute(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, kBiasPlaceholder);
        int found = 0;
        MOEGEMM_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(
            handle_, desc_, m.weights.get(), m.activations.get(), m.output.get(), m.output.get(),
            preference_, 1, result, &found));
        return found;
    }

    void release() noexcept {
        cache_.clear();
        if (preference_) (void)cublasLtMatmulPreferenceDestroy(preference_);
        if (desc_) (void)cublasLtMatmulDescDestroy(desc_);
        preference_ = nullptr;
        desc_ = nullptr;
        handle_ = nullptr;
    }

    ProblemDesc problem_;
    std::size_t workspace_limit_;
    bool device_alpha_;       // ALPHA: alpha and beta are device pointers
    bool per_call_pointers_;  // fp8 scales or the bias row change per call
    cublasLtHandle_t handle_ = nullptr;
    cublasLtMatmulDesc_t desc_ = nullptr;
    cublasLtMatmulPreference_t preference_ = nullptr;
    const float* zero_ = nullptr;  // beta when device_alpha_ (shared_device_zero)
    std::map<std::pair<int64_t, int32_t>, std::unique_ptr<Matmul>> cache_;
    mutable std::mutex pointers_mutex_;  // guards the per-call pointers of desc_
};

BackendResources::BackendResources() = default;
BackendResources::~BackendResources() = default;
void BackendResources::release() noexcept { cublaslt.reset(); }

namespace {

CublasLtContext& context(const ProblemDesc& p, const DeviceCaps& d, BackendResources& r) {
    if (!r.cublaslt) r.cublaslt = std::make_unique<CublasLtContext>(p, d);
    return *r.cublaslt;
}

std::string describe_matmul(const CublasLtContext::Matmul& m, const ProblemDesc& p) {
    const std::string epilogue = epilogue_description(p);
    return fmt::format("algo {} tile {}{}{}", m.algo_id, m.tile_id,
                       epilogue.empty() ? "" : ", epilogue: ", epilogue);
}

/// One matmul per expert with rows: VARIABLE (host sizes) at its row offset; MASKED and FIXED
/// at its slab when alpha is per expert (a strided-batched matmul scales all by one alpha).
class ExpertLoop final : public Kernel {
public:
    struct Step {
        int32_t expert;
        int32_t rows;
        int64_t row;  // its first row of A and D
        const CublasLtContext::Matmul* matmul;
    };

    ExpertLoop(CublasLtContext& ctx, std::vector<Step> steps)
        : ctx_(ctx), steps_(std::move(steps)) {}

    void launch(const ExecuteArgs& args, CUstream_st* stream) const override {
        const RelaxedCaptureMode first_matmuls_may_load;
        for (const Step& s : steps_)
            ctx_.run(*s.matmul, ctx_.expert_operands(args, s.expert, s.row), args, stream);
    }

    std::string describe() const override {
        const Step* largest = nullptr;
        for (const Step& s : steps_) {
            if (!largest || s.rows > largest->rows) largest = &s;
        }
        if (!largest) return "no rows";
        return fmt::format("{} matmuls, largest ({} rows): {}", steps_.size(), largest->rows,
                           describe_matmul(*largest->matmul, ctx_.problem()));
    }

private:
    CublasLtContext& ctx_;
    std::vector<Step> steps_;
};

/// VARIABLE: expert e's rows follow those of the experts before it; empty experts are skipped.
std::vector<ExpertLoop::Step> variable_steps(CublasLtContext& ctx, const ExpertSizes& sizes) {
    std::vector<ExpertLoop::Step> steps;
    int64_t row = 0;
    for (int32_t e = 0; e < ctx.problem().num_experts; ++e) {
        const int32_t rows = sizes.host[static_cast<std::size_t>(e)];
        if (rows > 0) steps.push_back({e, rows, row, &ctx.matmul_for(rows, 1)});
        row += rows;
    }
    return steps;
}

/// MASKED and FIXED: expert e's rows start its slab; as many as host sizes give, or the whole
/// slab for device sizes (cuBLASLt cannot read them).
std::vector<ExpertLoop::Step> slab_steps(CublasLtContext& ctx, const ExpertSizes& sizes) {
    const ProblemDesc& p = ctx.problem();
    std::vector<ExpertLoop::Step> steps;
    for (int32_t e = 0; e < p.num_experts; ++e) {
        const int32_t rows = sizes.source == SizesSource::Host
                                 ? sizes.host[static_cast<std::size_t>(e)]
                                 : static_cast<int32_t>(p.max_rows);
        if (rows > 0) steps.push_back({e, rows, e * p.max_rows, &ctx.matmul_for(rows, 1)});
    }
    return steps;
}

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
        const RelaxedCaptureMode first_matmul_may_load;
        if (matmul_) ctx_.run(*matmul_, CublasLtContext::batched_operands(args), args, stream);
    }

    std::string describe() const override {
        return matmul_ ? fmt::format("{} rows per slab, {}", rows_,
                                     describe_matmul(*matmul_, ctx_.problem()))
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
    CublasLtContext& ctx = context(p, d, r);
    return std::make_unique<ExpertLoop>(ctx, variable_steps(ctx, sizes));
}

std::unique_ptr<Kernel> create_strided_batched(const ProblemDesc& p, const DeviceCaps& d,
                                               const ExpertSizes& sizes, BackendResources& r) {
    CublasLtContext& ctx = context(p, d, r);
    // A strided-batched matmul has one alpha for every batch: per-expert alphas take one
    // matmul per expert.
    if (takes(p.epilogue_inputs, MOEGEMM_EPILOGUE_ALPHA))
        return std::make_unique<ExpertLoop>(ctx, slab_steps(ctx, sizes));
    return std::make_unique<StridedBatched>(ctx, sizes);
}

}  // namespace cublaslt
}  // namespace moegemm

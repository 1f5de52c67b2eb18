/*
 * libmoegemm — grouped expert GEMMs for Mixture-of-Experts layers on NVIDIA GPUs.
 *
 * For every expert e:   D_e[m, n] = sum_k A_e[m, k] * B_e[n, k]   (fp32 accumulation)
 *
 * This is the whole public API. It is C99, includes no CUDA header and exports only
 * `moegemm_*` symbols, so it can be called from C, C++, and through FFI from Python,
 * Rust or Julia.
 *
 * Life cycle
 * ----------
 *     moegemm_problem_t p;
 *     moegemm_problem_init(&p);            // defaults + the struct's size
 *     p.layout = MOEGEMM_LAYOUT_VARIABLE; p.num_experts = 8; p.n = 4096; p.k = 4096;
 *     p.max_rows = 16384;
 *     moegemm_plan_t plan;
 *     moegemm_plan_create(&p, &plan);      // validates, picks a kernel, creates handles
 *     moegemm_plan_set_expert_sizes(plan, rows_per_expert, MOEGEMM_MEMORY_HOST);
 *     size_t ws; moegemm_plan_get_workspace_size(plan, &ws);
 *     moegemm_execute(plan, a, b, d, NULL, NULL, workspace, ws, stream);   // async
 *     moegemm_plan_destroy(plan);
 *
 * Errors
 * ------
 * Every function that can fail returns a moegemm_status_t. When an argument check fails,
 * nothing was written (no output element, no plan state) and moegemm_get_last_error_message()
 * returns a message, local to the calling thread, that names the argument and the rule it
 * broke. A CUDA or cuBLAS failure while moegemm_execute enqueues work (CUDA_ERROR,
 * CUBLAS_ERROR) may leave D partly written: work enqueued before the failure runs.
 * The library never prints, never exits, never aborts, and no C++ exception leaves it.
 *
 * Threading
 * ---------
 * Distinct plans are independent: they may be created, used and destroyed from different
 * threads at once (moegemm_plan_autotune's results are the one thing they share: the kernel
 * later plans of the same problem pick). One plan must not be modified (set_expert_sizes,
 * autotune, destroy) while another thread uses it. One plan may execute on several streams
 * at once when each stream gets its own workspace.
 *
 * Streams and CUDA graphs
 * -----------------------
 * moegemm_execute only enqueues work on the given stream: it never allocates, never
 * synchronizes and never reads device memory from the host, so it can be captured in a
 * CUDA graph. Expert sizes given from HOST memory are baked into the work that execute
 * enqueues (and so into a captured graph): set new host sizes, then capture again. Sizes
 * given from DEVICE memory are read by the GPU at every execution, including every replay
 * of a captured graph. Kernel faults surface, as for any CUDA library, at the caller's next
 * synchronization with the stream.
 *
 * Layouts (all matrices dense and row-major)
 * ------------------------------------------
 *   VARIABLE: A [max_rows, K], rows sorted by expert; expert e owns rows
 *             [off_e, off_e + M_e) with off_e = M_0 + ... + M_{e-1}; D [max_rows, N].
 *             Exactly rows [0, sum M_e) of D are written; rows past the sum are untouched.
 *   MASKED:   A [E, max_rows, K], D [E, max_rows, N]; expert e owns rows [0, M_e) of slab e.
 *             Rows >= M_e of a slab may be overwritten (contents unspecified), never read
 *             as meaningful.
 *   FIXED:    A [E, max_rows, K], D [E, max_rows, N]; every row is valid; no sizes.
 *   B is [E, N, K] (MOEGEMM_WEIGHTS_NK, the nn.Linear layout) or [E, K, N] (MOEGEMM_WEIGHTS_KN).
 *
 * Versioning
 * ----------
 * Versions with the same major number are ABI compatible. Status and enum values are
 * pinned and never renumbered. moegemm_problem_t carries its own size so it can grow.
 */
#ifndef MOEGEMM_MOEGEMM_H
#define MOEGEMM_MOEGEMM_H

#include <stddef.h>
#include <stdint.h>

#include "moegemm/version.h"

#if defined(_WIN32)
#  if defined(MOEGEMM_BUILDING_LIBRARY)
#    define MOEGEMM_API __declspec(dllexport)
#  else
#    define MOEGEMM_API __declspec(dllimport)
#  endif
#else
#  define MOEGEMM_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** Same type as cudaStream_t and CUstream; NULL is the legacy default stream. */
struct CUstream_st;

/* ------------------------------------------------------------------------------------------ */
/* Status codes                                                                                */
/* ------------------------------------------------------------------------------------------ */

/** Result of every fallible call. Values are pinned: they are never renumbered or reused. */
typedef enum moegemm_status {
    MOEGEMM_STATUS_SUCCESS = 0,
    /** An argument breaks a documented rule (NULL pointer, non-positive dimension, enum out
     *  of range, negative host size, sizes summing past capacity, wrong struct size...). */
    MOEGEMM_STATUS_INVALID_VALUE = 1,
    /** The request is valid but this build or this device has no implementation for it
     *  (a dtype combination, a backend, or VARIABLE with device sizes on the baseline). */
    MOEGEMM_STATUS_NOT_SUPPORTED = 2,
    /** No usable GPU: no CUDA driver, no device, or the driver is too old for this build. */
    MOEGEMM_STATUS_NO_DEVICE = 3,
    /** The device exists but its architecture is too old (compute capability < 8.0). */
    MOEGEMM_STATUS_ARCH_MISMATCH = 4,
    /** A pointer, a row stride or the workspace is not aligned as required (16 bytes for
     *  tensors and row strides, 256 bytes for the workspace). */
    MOEGEMM_STATUS_MISALIGNED = 5,
    /** The workspace given to moegemm_execute is smaller than moegemm_plan_get_workspace_size. */
    MOEGEMM_STATUS_WORKSPACE_TOO_SMALL = 6,
    /** The plan is not ready for this call (VARIABLE or MASKED executed before its sizes
     *  were set), or the handle is not a live plan. */
    MOEGEMM_STATUS_INVALID_STATE = 7,
    /** Host or device memory could not be allocated (plan creation, setting sizes). */
    MOEGEMM_STATUS_ALLOC_FAILED = 8,
    /** A CUDA runtime call failed; the message names it and CUDA's error. */
    MOEGEMM_STATUS_CUDA_ERROR = 9,
    /** A cuBLAS / cuBLASLt call failed; the message names it and cuBLAS's status. */
    MOEGEMM_STATUS_CUBLAS_ERROR = 10,
    /** A bug in libmoegemm; please report the message. */
    MOEGEMM_STATUS_INTERNAL_ERROR = 11
} moegemm_status_t;

/* ------------------------------------------------------------------------------------------ */
/* Problem description                                                                         */
/* ------------------------------------------------------------------------------------------ */

/** How the rows of A and D are grouped by expert (see "Layouts" above). */
typedef enum moegemm_layout {
    MOEGEMM_LAYOUT_VARIABLE = 0,
    MOEGEMM_LAYOUT_MASKED = 1,
    MOEGEMM_LAYOUT_FIXED = 2
} moegemm_layout_t;

/** Element types. */
typedef enum moegemm_dtype {
    MOEGEMM_DTYPE_BF16 = 0,
    MOEGEMM_DTYPE_F16 = 1,
    MOEGEMM_DTYPE_F32 = 2,  /**< output only */
    /** fp8 e4m3, inputs only, with a scale mode; outputs BF16 or F32; weights WEIGHTS_NK.
     *  On sm_90 the native kernels serve every scale mode and layout (fp32 promotion
     *  every 128 K); elsewhere (compute capability 8.9+) the cuBLASLt baseline
     *  serves PER_TENSOR only. */
    MOEGEMM_DTYPE_E4M3 = 3
} moegemm_dtype_t;

/** Layout of the weights B. */
typedef enum moegemm_weight_layout {
    MOEGEMM_WEIGHTS_NK = 0, /**< B is [E, N, K], K contiguous (nn.Linear weight). Default. */
    MOEGEMM_WEIGHTS_KN = 1  /**< B is [E, K, N], N contiguous. */
} moegemm_weight_layout_t;

/**
 * How fp8 inputs are scaled. Must be NONE for bf16/f16 inputs.
 *
 * With E4M3 inputs, D[r, n] = sum_k (A[r, k] * sa(r, k)) * (B_e[n, k] * sb(e, n, k)) for
 * the rows r of expert e, computed in fp32. The scales are fp32 arrays in device memory,
 * passed to moegemm_execute as a_scale and b_scale, 16-byte aligned, laid out as below.
 * "Rows" are the rows of A and D: max_rows for VARIABLE, num_experts * max_rows for MASKED
 * and FIXED (row e * max_rows + m of slab e); KB = ceil(K / 128), NB = ceil(N / 128).
 *
 *   mode         a_scale                       b_scale
 *   PER_TENSOR   [1]                           [1]
 *   PER_EXPERT   [1]                           [E]
 *   ROWWISE      [rows]                        [E, N]        (one per output column)
 *   BLOCK        [rows, KB] (row-major)        [E, NB, KB]   (one per 128 x 128 block)
 *
 * BLOCK is DeepSeek-V3's scheme: A in 1 x 128 groups along K, B in 128 x 128 blocks. Which
 * modes are implemented: see MOEGEMM_DTYPE_E4M3.
 */
typedef enum moegemm_scale_mode {
    MOEGEMM_SCALE_NONE = 0,
    MOEGEMM_SCALE_PER_TENSOR = 1, /**< one fp32 scale for A, one for all of B */
    MOEGEMM_SCALE_PER_EXPERT = 2, /**< one fp32 scale for A, one per expert for B */
    MOEGEMM_SCALE_ROWWISE = 3,    /**< one per A row; one per output column per expert */
    MOEGEMM_SCALE_BLOCK = 4       /**< A: one per row per 128 K; B: one per 128x128 block */
} moegemm_scale_mode_t;

/** Which implementation family may serve the plan. */
typedef enum moegemm_backend {
    MOEGEMM_BACKEND_AUTO = 0,     /**< the heuristic decides (default) */
    MOEGEMM_BACKEND_NATIVE = 1,   /**< hand-written sm_90a kernels: H100/H200 */
    MOEGEMM_BACKEND_CUBLASLT = 2  /**< the cuBLASLt baseline, any GPU of compute capability >= 8.0 */
} moegemm_backend_t;

/** Where the expert sizes passed to moegemm_plan_set_expert_sizes live. */
typedef enum moegemm_memory {
    MOEGEMM_MEMORY_HOST = 0,
    MOEGEMM_MEMORY_DEVICE = 1
} moegemm_memory_t;

/**
 * Activation applied in the epilogue (moegemm_problem_t.activation), after the alpha, row
 * scale and bias (see "Epilogue" at moegemm_problem_t). x is the fp32 value of an output
 * element; gated activations combine two columns of the product, the gate g and the up u,
 * into one output column, so D has N / 2 columns.
 */
typedef enum moegemm_activation {
    MOEGEMM_ACTIVATION_NONE = 0,
    MOEGEMM_ACTIVATION_SILU = 1,       /**< x * sigmoid(x) */
    MOEGEMM_ACTIVATION_GELU_TANH = 2,  /**< 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) */
    MOEGEMM_ACTIVATION_SWIGLU = 3,     /**< gated: silu(g) * u */
    MOEGEMM_ACTIVATION_GEGLU = 4,      /**< gated: gelu_tanh(g) * u */
    /** gated, gpt-oss's clamped SwiGLU with activation_alpha (a) and activation_limit (l):
     *  g' = min(g, l), u' = clamp(u, -l, l), out = (u' + 1) * g' * sigmoid(a * g'). */
    MOEGEMM_ACTIVATION_SWIGLU_CLAMPED = 5
} moegemm_activation_t;

/** Where a gated activation finds its gate and up columns among the N columns of the
 *  product (the rows of B_e in WEIGHTS_NK). */
typedef enum moegemm_gate_layout {
    MOEGEMM_GATE_UP_HALVES = 0,     /**< columns [0, N/2) gate, [N/2, N) up (default) */
    MOEGEMM_UP_GATE_HALVES = 1,     /**< columns [0, N/2) up, [N/2, N) gate */
    MOEGEMM_GATE_UP_INTERLEAVED = 2 /**< even columns gate, odd columns up (gpt-oss) */
} moegemm_gate_layout_t;

/** Bits of moegemm_problem_t.epilogue_inputs: the per-call arrays of the epilogue that
 *  moegemm_execute_tensors will be given (moegemm_tensors_t). */
#define MOEGEMM_EPILOGUE_ALPHA 0x1u     /**< alpha: fp32 [E], one factor per expert */
#define MOEGEMM_EPILOGUE_ROW_SCALE 0x2u /**< row_scale: fp32, one factor per row of D */
#define MOEGEMM_EPILOGUE_BIAS 0x4u      /**< bias: [E, N] of bias_type, added per column */

/** Largest number of experts a plan accepts. */
#define MOEGEMM_MAX_EXPERTS 1024

/** Buffer size that always holds the text of moegemm_plan_describe (NUL included). */
#define MOEGEMM_DESCRIBE_MAX 512

/**
 * What to compute. Always fill it with moegemm_problem_init first, then change fields:
 * the struct records its own size so that later versions can add fields at the end
 * without breaking callers compiled against this header.
 */
typedef struct moegemm_problem {
    size_t struct_size;            /**< set by moegemm_problem_init; do not change */
    moegemm_layout_t layout;       /**< default VARIABLE */
    int32_t num_experts;           /**< E, 1..MOEGEMM_MAX_EXPERTS (default 0: must be set) */
    int64_t n;                     /**< output columns per expert (default 0: must be set) */
    int64_t k;                     /**< reduction length (default 0: must be set) */
    /** Capacity: rows of A and D for VARIABLE; rows per expert slab for MASKED and FIXED.
     *  Must be >= 1 (default 0: must be set). */
    int64_t max_rows;
    moegemm_dtype_t a_type;        /**< default BF16 */
    moegemm_dtype_t b_type;        /**< default BF16; must equal a_type */
    moegemm_dtype_t d_type;        /**< default BF16; BF16, F16 or F32 */
    moegemm_weight_layout_t weight_layout; /**< default WEIGHTS_NK */
    moegemm_scale_mode_t scale_mode;       /**< default NONE */
    moegemm_backend_t backend;     /**< default AUTO */
    int32_t device;                /**< CUDA device ordinal (default 0) */
    /** Typical rows per expert, the heuristic's hint when sizes live on the device;
     *  0 (default) means unknown (taken as prefill). On sm_90, 1..32 selects the decode
     *  kernels: decode problems of up to ~32 rows per expert run on swap-AB kernels, which
     *  multiply the weights by only the 16, 32 or 64 token rows a tile loads. A hint above
     *  max_rows is read as max_rows. Never used for correctness. */
    int64_t expected_rows;
    /** Name of a kernel variant (see moegemm_kernel_name) to use instead of the heuristic's
     *  choice, or NULL (default). Meant for benchmarks and tests; the names are not part of
     *  the stable ABI. The string is copied by moegemm_plan_create. */
    const char* force_kernel;

    /* Since 0.2. Every field below defaults to 0, which keeps the 0.1 behaviour: a caller of
     * an older, smaller struct gets the plain product. */

    /** Epilogue: OR of MOEGEMM_EPILOGUE_* bits naming the arrays each
     *  moegemm_execute_tensors call will pass (default 0: none). With activation NONE and no
     *  bits the output is the plain product. Per row r of D of expert e and column n:
     *      x = acc[r, n] * alpha[e] * row_scale[r] + bias[e, n]
     *  (each factor only when its bit is set), then the activation, then the conversion to
     *  d_type. Native sm_90 kernels serve every combination for BF16 and F16 inputs (gated
     *  activations with WEIGHTS_NK). The cuBLASLt baseline serves alpha, a bias of d_type and
     *  GELU_TANH, and refuses row scales, SiLU and the gated activations with
     *  NOT_SUPPORTED. */
    uint32_t epilogue_inputs;
    moegemm_dtype_t bias_type;          /**< BF16 (default), F16 or F32 */
    moegemm_activation_t activation;    /**< default NONE */
    /** Gated activations only (any other activation: leave GATE_UP_HALVES, the default). */
    moegemm_gate_layout_t gate_layout;
    /** SWIGLU_CLAMPED only, both finite and > 0 (gpt-oss: 1.702 and 7.0); 0 otherwise. */
    float activation_alpha;
    float activation_limit;
    /** Gathered A (default 0: A dense in the plan's layout). When > 0, A is a token-major
     *  [gather_rows, K] matrix, and row r of the grouped problem (of A's rows in the layout:
     *  max_rows rows for VARIABLE, E * max_rows for MASKED and FIXED) reads A row a_rows[r]
     *  (moegemm_tensors_t.a_rows, int32 in device memory). No permuted copy of A exists. An
     *  index outside [0, gather_rows) reads a row of zeros and sets
     *  MOEGEMM_ROWS_CLAMPED_INDEX in the status word. Native sm_90 kernels only, BF16 and F16
     *  inputs. */
    int64_t gather_rows;
} moegemm_problem_t;

/** Size of the first version of moegemm_problem_t (0.1): every version accepts it. */
#define MOEGEMM_PROBLEM_SIZE_0_1 88
/** Size of moegemm_problem_t in 0.2 (epilogue and gather fields). */
#define MOEGEMM_PROBLEM_SIZE_0_2 120

/**
 * Fills `problem` with the defaults listed above and sets `struct_size` to the size of this
 * header's struct. From C and C++ the macro below routes each call to
 * moegemm_problem_init_sized with the caller's `sizeof`, so that a program built against
 * this header never has a later, larger struct written into its smaller one. The exported
 * function (for FFI callers whose struct is the library's own) writes the library's size:
 * bindings call moegemm_problem_init_sized instead.
 * \retval MOEGEMM_STATUS_SUCCESS
 * \retval MOEGEMM_STATUS_INVALID_VALUE  `problem` is NULL.
 */
MOEGEMM_API moegemm_status_t moegemm_problem_init(moegemm_problem_t* problem);

/**
 * Fills the first `struct_size` bytes of `problem` with the defaults and sets `struct_size`:
 * the fields this library knows get their defaults, any bytes of a newer caller's larger
 * struct past them are zeroed (the defaults of fields added later are zero), and nothing
 * past `struct_size` is written. Meant for callers whose struct may be of another version
 * than the library's: language bindings pass the size of the struct they mirror.
 * \retval MOEGEMM_STATUS_SUCCESS
 * \retval MOEGEMM_STATUS_INVALID_VALUE  `problem` is NULL, or `struct_size` is neither
 *                                       MOEGEMM_PROBLEM_SIZE_0_1 nor from
 *                                       sizeof(moegemm_problem_t) to 4096.
 */
MOEGEMM_API moegemm_status_t moegemm_problem_init_sized(moegemm_problem_t* problem,
                                                        size_t struct_size);

/* C and C++ callers: the caller's own struct size (call `(moegemm_problem_init)(p)` for the
 * exported function itself). */
#define moegemm_problem_init(problem) moegemm_problem_init_sized((problem), sizeof *(problem))

/* ------------------------------------------------------------------------------------------ */
/* Plans                                                                                       */
/* ------------------------------------------------------------------------------------------ */

/** Opaque plan: the problem, the device's capabilities, the sizes and the chosen kernel. */
typedef struct moegemm_plan_s* moegemm_plan_t;

/**
 * Validates `problem`, queries the device once and picks a kernel. Kernels that need the
 * expert sizes (VARIABLE, MASKED) are instantiated, with their handles, when the sizes are
 * set. The problem is copied: the caller may reuse its struct. The calling thread's current
 * CUDA device is left as it was.
 *
 * Rules checked, each failure naming the field. INVALID_VALUE: struct_size from
 * sizeof(moegemm_problem_t) up to 4096; every enum in range; 1 <= num_experts <=
 * MOEGEMM_MAX_EXPERTS; n, k, max_rows in [1, 2^31 - 1]; tensors addressable with 64-bit byte
 * offsets; scale_mode NONE for 16-bit inputs and not NONE for E4M3; device >= 0; expected_rows
 * >= 0; force_kernel NULL or the name of a kernel of the requested backend; struct_size
 * MOEGEMM_PROBLEM_SIZE_0_1 (the later fields then keep their defaults) or from
 * sizeof(moegemm_problem_t) up. Epilogue and gather (INVALID_VALUE): epilogue_inputs only
 * MOEGEMM_EPILOGUE_* bits; bias_type, activation and gate_layout in range; gate_layout
 * GATE_UP_HALVES unless the activation is gated; activation_alpha and activation_limit finite
 * and > 0 for SWIGLU_CLAMPED, 0 otherwise; gather_rows in [0, 2^31 - 1], the gathered A
 * addressable with 64-bit byte offsets. MISALIGNED: n and k multiples of 8 for 16-bit inputs, of
 * 16 for E4M3 (16-byte row strides); n a multiple of 16 for a gated activation. NOT_SUPPORTED: a
 * struct_size past this version's struct with a nonzero byte past the fields it knows (a newer
 * caller setting a field this library does not have), a_type != b_type, F32 inputs, E4M3 output,
 * E4M3 bias, E4M3 inputs with an epilogue option or a gather, and any valid combination no
 * kernel serves on this device (or force_kernel cannot serve: the cuBLASLt baseline takes no row
 * scale, no SiLU or gated activation, no bias of another type than d_type and no gather; gated
 * activations need WEIGHTS_NK).
 *
 * \param problem  the problem, initialized by moegemm_problem_init.
 * \param out      receives the plan; left untouched on failure.
 * \retval MOEGEMM_STATUS_SUCCESS
 * \retval MOEGEMM_STATUS_INVALID_VALUE  a NULL argument, a rule above broken, or `device`
 *                                       is not an ordinal of this machine.
 * \retval MOEGEMM_STATUS_MISALIGNED     n or k is not a multiple of 8 (16 for E4M3).
 * \retval MOEGEMM_STATUS_NOT_SUPPORTED  a valid combination this device's backend cannot run
 *                                       (an fp8 scale mode or weight layout the cuBLASLt
 *                                       baseline lacks, E4M3 below compute capability 8.9;
 *                                       backend NATIVE off sm_90), or fields set that this
 *                                       version does not know.
 * \retval MOEGEMM_STATUS_NO_DEVICE      no CUDA driver or no GPU.
 * \retval MOEGEMM_STATUS_ARCH_MISMATCH  the GPU is older than compute capability 8.0.
 * \retval MOEGEMM_STATUS_ALLOC_FAILED, MOEGEMM_STATUS_CUDA_ERROR, MOEGEMM_STATUS_CUBLAS_ERROR
 */
MOEGEMM_API moegemm_status_t moegemm_plan_create(const moegemm_problem_t* problem,
                                                 moegemm_plan_t* out);

/**
 * Releases the plan and everything it owns. NULL is a no-op. Executions of the plan still
 * pending on a stream must have finished first (synchronize the stream, or an event
 * recorded after the last execute): the plan may own device memory that they read. CUDA
 * graphs that captured executions of the plan must not be launched after it is destroyed:
 * their kernels keep the addresses of that memory (the status word, among others).
 * \retval MOEGEMM_STATUS_SUCCESS
 * \retval MOEGEMM_STATUS_INVALID_STATE  `plan` is not a live plan (for instance destroyed
 *                                       twice; detected on a best-effort basis).
 */
MOEGEMM_API moegemm_status_t moegemm_plan_destroy(moegemm_plan_t plan);

/**
 * Sets the rows of each expert, `problem.num_experts` int32 values.
 *
 * HOST: the values are copied and validated now (each >= 0; for VARIABLE their sum
 * <= max_rows; for MASKED each <= max_rows) and may refine the kernel choice. Later
 * executions (and graphs captured from them) use these values.
 *
 * DEVICE: `sizes` is a device pointer (16-byte aligned not required, 4-byte aligned
 * required) that the plan keeps; the GPU reads it at every execution, so the caller may
 * change the values between executions and between CUDA-graph replays. Values are never
 * read on the host. Not available for VARIABLE on the cuBLASLt backend.
 *
 * FIXED plans take no sizes (every slab holds max_rows valid rows).
 *
 * \retval MOEGEMM_STATUS_SUCCESS
 * \retval MOEGEMM_STATUS_INVALID_VALUE  NULL plan or sizes, `where` out of range, a negative
 *                                       size, sizes past capacity, a FIXED plan, or DEVICE
 *                                       sizes in pageable host memory or in another
 *                                       device's memory (the kernels would fault reading
 *                                       them; managed and pinned host memory are accepted).
 * \retval MOEGEMM_STATUS_MISALIGNED     a DEVICE pointer not 4-byte aligned.
 * \retval MOEGEMM_STATUS_NOT_SUPPORTED  DEVICE sizes for VARIABLE on the cuBLASLt backend
 *                                       (the native sm_90a backend serves them), or no
 *                                       cuBLASLt algorithm for these sizes.
 * \retval MOEGEMM_STATUS_ALLOC_FAILED, MOEGEMM_STATUS_CUDA_ERROR, MOEGEMM_STATUS_CUBLAS_ERROR
 *                                       while instantiating the kernel for the new sizes.
 * On failure the plan keeps its previous sizes and kernel.
 */
MOEGEMM_API moegemm_status_t moegemm_plan_set_expert_sizes(moegemm_plan_t plan,
                                                           const int32_t* sizes,
                                                           moegemm_memory_t where);

/**
 * Bytes of device workspace that moegemm_execute needs (0 is possible). The value is fixed
 * at plan creation: it does not change when sizes are set, so one allocation serves the
 * plan's whole life. Several plans executed on one stream may share one workspace.
 * \retval MOEGEMM_STATUS_SUCCESS
 * \retval MOEGEMM_STATUS_INVALID_VALUE  NULL argument.
 */
MOEGEMM_API moegemm_status_t moegemm_plan_get_workspace_size(moegemm_plan_t plan,
                                                             size_t* bytes);

/** Bits of a plan's device status word (see moegemm_plan_get_status_word). */
#define MOEGEMM_SIZES_CLAMPED_NEGATIVE 0x1u /**< a device size was negative: read as 0 */
#define MOEGEMM_SIZES_CLAMPED_CAPACITY 0x2u /**< rows past max_rows were dropped */
/** A gather index (a_rows) or a routing id was out of range: the row read as zeros, or the
 *  token's choice dropped. */
#define MOEGEMM_ROWS_CLAMPED_INDEX 0x4u

/**
 * Device-resident sizes cannot be checked on the host. Kernels that read them clamp them on
 * the GPU (a negative size counts as 0; VARIABLE rows past max_rows, and MASKED sizes above
 * max_rows, are cut at the capacity) so that nothing is read or written out of bounds, and
 * OR the MOEGEMM_SIZES_CLAMPED_* bits of what they clamped into a 32-bit word in device
 * memory that the plan owns. The bits stay set until the caller clears the word.
 *
 * This returns the word's device address: read it whenever convenient, without stalling the
 * stream (cudaMemcpyAsync into pinned memory after the executions of interest), and clear it
 * with cudaMemsetAsync. Nothing is ever trapped: a CUDA context stays usable.
 * Only the native backend reads device sizes; the cuBLASLt baseline computes whole MASKED
 * slabs and leaves the word at 0.
 * \retval MOEGEMM_STATUS_SUCCESS
 * \retval MOEGEMM_STATUS_INVALID_VALUE  NULL plan or device_word.
 */
MOEGEMM_API moegemm_status_t moegemm_plan_get_status_word(moegemm_plan_t plan,
                                                          uint32_t** device_word);

/**
 * Writes a one-line description of what the heuristic chose (backend, kernel, tile, why)
 * into `buf`, NUL-terminated and truncated to `len` bytes. MOEGEMM_DESCRIBE_MAX always
 * suffices.
 * \retval MOEGEMM_STATUS_SUCCESS
 * \retval MOEGEMM_STATUS_INVALID_VALUE  NULL plan or buf, or len == 0.
 */
MOEGEMM_API moegemm_status_t moegemm_plan_describe(moegemm_plan_t plan, char* buf, size_t len);

/* ------------------------------------------------------------------------------------------ */
/* Execution                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/**
 * Enqueues D = grouped(A x B) on `stream` and returns without waiting.
 *
 * \param a, b, d    device pointers to A, B and D in the plan's layout, 16-byte aligned.
 *                   They may be NULL only when the plan's host sizes are all zero (nothing
 *                   to compute). D must not overlap A or B.
 * \param a_scale, b_scale  fp8 scales (device pointers to fp32, 16-byte aligned), required
 *                   for E4M3 inputs, read when the work runs; must be NULL for 16-bit
 *                   inputs.
 * \param workspace  device memory of at least moegemm_plan_get_workspace_size bytes,
 *                   256-byte aligned, overlapping none of A, B and D; it must not be used
 *                   by anything else until the work enqueued here has finished (executes on
 *                   two streams at once need two workspaces). May be NULL when 0 bytes are
 *                   needed. The native kernels keep the TMA descriptors they make for this
 *                   call's A, B and D there, so no descriptor is encoded on the host per call.
 *                   Its contents need no initialization; an execute may enqueue a small
 *                   cudaMemsetAsync into it before the kernel (on a workspace the plan has
 *                   not used lately).
 * \param stream     a stream of the plan's device, or NULL (legacy default stream).
 *
 * Never allocates, never synchronizes: graph-capturable (see "Streams and CUDA graphs").
 * The calling thread's current device is left as it was.
 *
 * \retval MOEGEMM_STATUS_SUCCESS               the work was enqueued.
 * \retval MOEGEMM_STATUS_INVALID_VALUE         NULL plan, NULL tensor with rows to compute,
 *                                              scales given for 16-bit inputs or missing
 *                                              for E4M3, a NULL workspace when bytes are
 *                                              needed, D overlapping A or B, the workspace
 *                                              overlapping A, B or D, D or the workspace in
 *                                              pageable host memory or another device's
 *                                              memory, a stream of another device (checked
 *                                              outside stream capture, when the stream is
 *                                              not among the last few that passed; the
 *                                              legacy default stream is not checked; under
 *                                              capture a foreign stream fails at
 *                                              instantiation).
 * \retval MOEGEMM_STATUS_MISALIGNED            a, b, d or the scales not 16-byte aligned, or
 *                                              workspace not 256-byte aligned.
 * \retval MOEGEMM_STATUS_WORKSPACE_TOO_SMALL   workspace_bytes below the plan's need.
 * \retval MOEGEMM_STATUS_INVALID_STATE         sizes of a VARIABLE or MASKED plan never set.
 * \retval MOEGEMM_STATUS_CUDA_ERROR, MOEGEMM_STATUS_CUBLAS_ERROR  the launch failed.
 * Nothing is enqueued when a check fails.
 */
MOEGEMM_API moegemm_status_t moegemm_execute(moegemm_plan_t plan, const void* a, const void* b,
                                             void* d, const float* a_scale,
                                             const float* b_scale, void* workspace,
                                             size_t workspace_bytes, struct CUstream_st* stream);

/**
 * The tensors of one execution, for moegemm_execute_tensors: moegemm_execute's arguments plus
 * the epilogue's per-call arrays and the gather indices. Fill it with moegemm_tensors_init
 * first (all NULL, struct_size set), then set the pointers the plan needs.
 */
typedef struct moegemm_tensors {
    size_t struct_size;      /**< set by moegemm_tensors_init; do not change */
    const void* a;           /**< A (see moegemm_execute; with gather_rows: [gather_rows, K]) */
    const void* b;           /**< B */
    void* d;                 /**< D: N columns, or N / 2 with a gated activation */
    const float* a_scale;    /**< E4M3 inputs: see moegemm_scale_mode_t */
    const float* b_scale;
    /** MOEGEMM_EPILOGUE_ALPHA: fp32 [E], 4-byte aligned. */
    const float* alpha;
    /** MOEGEMM_EPILOGUE_ROW_SCALE: fp32, one per row of D in the plan's layout (max_rows for
     *  VARIABLE, E * max_rows for MASKED and FIXED), 4-byte aligned. */
    const float* row_scale;
    /** MOEGEMM_EPILOGUE_BIAS: [E, N] of the problem's bias_type (N: the product's columns,
     *  before a gated activation halves them), 16-byte aligned. */
    const void* bias;
    /** gather_rows > 0: int32 A-row index per row of the grouped problem, 4-byte aligned. */
    const int32_t* a_rows;
} moegemm_tensors_t;

/** Fills `tensors` with NULL pointers and its struct_size (the caller's sizeof through the
 *  macro below, like moegemm_problem_init).
 * \retval MOEGEMM_STATUS_SUCCESS
 * \retval MOEGEMM_STATUS_INVALID_VALUE  `tensors` is NULL, or struct_size is below the first
 *                                       version's or above 4096. */
MOEGEMM_API moegemm_status_t moegemm_tensors_init_sized(moegemm_tensors_t* tensors,
                                                        size_t struct_size);
#define moegemm_tensors_init(tensors) moegemm_tensors_init_sized((tensors), sizeof *(tensors))

/**
 * moegemm_execute with the plan's epilogue inputs and gather indices: the same rules for a,
 * b, d, the scales, the workspace and the stream, and:
 *  - alpha, row_scale and bias are required exactly when their MOEGEMM_EPILOGUE_* bit is in
 *    the problem's epilogue_inputs, NULL otherwise; a_rows exactly when gather_rows > 0;
 *  - D must not overlap A, B or any of these arrays.
 * moegemm_execute(plan, a, b, d, a_scale, b_scale, ...) is this call with those five
 * pointers: plans with epilogue inputs or a gather refuse it (INVALID_VALUE).
 * \retval as moegemm_execute; INVALID_VALUE also for a NULL `tensors`, a struct_size out of
 *         range, a missing or unexpected epilogue array; MISALIGNED for an array below its
 *         alignment.
 */
MOEGEMM_API moegemm_status_t moegemm_execute_tensors(moegemm_plan_t plan,
                                                     const moegemm_tensors_t* tensors,
                                                     void* workspace, size_t workspace_bytes,
                                                     struct CUstream_st* stream);

/* ------------------------------------------------------------------------------------------ */
/* Tuning                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/**
 * Times every kernel that can serve the plan's problem and current sizes, on the caller's
 * buffers (the arguments of moegemm_execute_tensors, under the same rules), and makes the
 * fastest the plan's kernel. The candidates are the kernels of the plan's backend and, where
 * the problem's backend is AUTO, those of the other backend whose workspace `workspace_bytes`
 * covers (32 MiB covers every cuBLASLt kernel on sm_90; the size moegemm_plan_get_workspace_size
 * gave covers the plan's backend only). The result is also the process's choice for every
 * plan, created or given sizes later, of the same GPU, problem and size bucket (host sizes:
 * rows per active expert and active experts, each rounded up to a power of two; device
 * sizes: expected_rows, likewise), and is written to the tune cache file if one is named
 * (moegemm_set_tune_cache_file). moegemm_plan_describe then says "tuned" and what the
 * heuristic would have picked.
 *
 * Blocking: it launches each candidate a few dozen times after the work on `stream` (replayed
 * from a CUDA graph, so that short kernels are timed without the host's launch gaps; each
 * launch after the L2 cache is flushed through a buffer of its size, so that operands come
 * from DRAM as they do between a model's other layers; the process keeps that buffer, one per
 * device, for later autotunes) and waits for them
 * (tens of milliseconds). Another kernel replaces the heuristic's pick only when it is at least
 * 1% faster. D then holds the product as the chosen kernel computes it. A kernel of the other
 * backend, when chosen, raises the plan's workspace size to that backend's (never above
 * `workspace_bytes`: query it again). The fastest kernel of each backend timed is kept: a plan
 * given sizes after creation chooses among the backends its workspace covers, so it takes the
 * other backend's result only where its workspace covers that backend, and its own backend's
 * result otherwise; plans whose sizes are known when they are created (FIXED) take the
 * fastest. Device sizes are
 * read where they are at the call: they must hold typical values (an all-zero buffer times empty
 * launches). A plan whose host sizes are all 0 times nothing and keeps its kernel. A candidate
 * that cannot run here is left out (logged).
 *
 * Never implicit: no other call times anything. It changes what later plans of the same GPU,
 * problem and bucket pick, on any thread (plans with force_kernel excepted; the GEMMs of MoE
 * layer plans included), and is not thread-safe against other calls on the same plan (as
 * moegemm_plan_set_expert_sizes). A tune cache file that cannot be written is logged, not an
 * error.
 * \retval MOEGEMM_STATUS_SUCCESS
 * \retval MOEGEMM_STATUS_INVALID_STATE  sizes never set; `stream` is being captured into a
 *                                       CUDA graph (tune before capturing); the problem
 *                                       names a force_kernel.
 * \retval as moegemm_execute_tensors for bad arguments, and CUDA_ERROR / CUBLAS_ERROR if the
 *         plan's own kernel fails to run or the CUDA context broke (the plan then keeps its
 *         kernel; D may hold a candidate's partial output).
 */
MOEGEMM_API moegemm_status_t moegemm_plan_autotune(moegemm_plan_t plan,
                                                   const moegemm_tensors_t* tensors,
                                                   void* workspace, size_t workspace_bytes,
                                                   struct CUstream_st* stream);

/**
 * Names the file that keeps moegemm_plan_autotune's results across processes, and adds the
 * results it holds to the process's (plans created from now on use them); NULL or "" names none.
 * Without this call, the environment variable MOEGEMM_TUNE_CACHE names the file, read once, when
 * the process first selects a kernel. The file is rewritten after each autotune (through a
 * temporary file and a rename: readers never see half of it; with several writers the last one
 * wins). Its format is text: the line "libmoegemm tune cache 2", then one line per result: a key
 * (GPU name, SM count and compute capability; the problem; the size bucket; the backend of the
 * kernel, one result per backend), the kernel's name and its time in microseconds, separated
 * by tabs. A missing, unreadable, stale (another first
 * line) or corrupt file is ignored with a warning in the log, never an error: the heuristic then
 * decides, and the next autotune writes a fresh file. Results this process has already tuned are
 * kept over the file's for the same key. A result naming a kernel that this version of the
 * library does not have, or that cannot serve the problem, is ignored too.
 * \retval MOEGEMM_STATUS_SUCCESS  also when the file was ignored.
 */
MOEGEMM_API moegemm_status_t moegemm_set_tune_cache_file(const char* path);

/* ------------------------------------------------------------------------------------------ */
/* The MoE layer                                                                               */
/* ------------------------------------------------------------------------------------------ */

/** Element type of routing ids. */
typedef enum moegemm_index_type {
    MOEGEMM_INDEX_INT32 = 0,
    MOEGEMM_INDEX_INT64 = 1 /**< torch.topk's indices */
} moegemm_index_type_t;

/**
 * A Mixture-of-Experts layer's experts, from routed tokens to the combined output:
 *
 *   for every token t and choice j < top_k with e = topk_ids[t, j] among this rank's experts:
 *       h = act(x[t] . w1[e]^T  (* alpha1[e], + b1[e]))          FC1, [2I or I] -> [I]
 *       y = h . w2[e]^T  (* alpha2[e], + b2[e])                   FC2, [I] -> [H]
 *   out[t] = sum over those j, in increasing j, of topk_weights[t, j] * y      (fp32 sum)
 *
 * Fill it with moegemm_moe_problem_init, then set the fields marked "must be set".
 */
typedef struct moegemm_moe_problem {
    size_t struct_size;          /**< set by moegemm_moe_problem_init; do not change */
    int32_t num_experts;         /**< the model's experts, 1..65536: ids are in [0, num_experts) */
    /** This rank's experts are [first_expert, first_expert + local_experts), within
     *  [0, num_experts); w1, w2, b1, b2, alpha1 and alpha2 hold only those. Choices of other
     *  experts are skipped (expert parallelism). local_experts 0 (default): all experts; at
     *  most MOEGEMM_MAX_EXPERTS. */
    int32_t first_expert;
    int32_t local_experts;
    int32_t top_k;               /**< choices per token, 1..min(num_experts, 64) (must be set) */
    /** H, I and the capacity (T of any execution): each 1..2^31 - 1, max_tokens * top_k below
     *  2^31; H and I multiples of 8 (MISALIGNED otherwise). All must be set. */
    int64_t hidden;              /**< H: columns of x and out */
    int64_t intermediate;        /**< I: FC2's K; FC1 has 2I rows when gated */
    int64_t max_tokens;
    /** x, w1, w2 (but see weight_scales), b1, b2 and out: BF16 (default) or F16; F32 is an
     *  output-only type (INVALID_VALUE), E4M3 is NOT_SUPPORTED. */
    moegemm_dtype_t dtype;
    moegemm_activation_t activation;   /**< default NONE; SWIGLU for most models */
    /** gated activations: w1's gate and up rows; other activations leave it HALVES */
    moegemm_gate_layout_t gate_layout;
    /** SWIGLU_CLAMPED only, finite and > 0 (gpt-oss: alpha 1.702, limit 7.0); 0 otherwise */
    float activation_alpha;
    float activation_limit;
    /** OR of MOEGEMM_EPILOGUE_ALPHA and MOEGEMM_EPILOGUE_BIAS (other bits: INVALID_VALUE):
     *  which of alpha1/b1 and alpha2/b2 each execute passes (FC2's row scale is the router
     *  weight, applied in the combine). */
    uint32_t fc1_inputs;
    uint32_t fc2_inputs;
    moegemm_index_type_t id_type;  /**< topk_ids' type; default INT32 */
    moegemm_backend_t backend;     /**< AUTO (default) or NATIVE: the layer needs sm_90 */
    int32_t device;                /**< CUDA device ordinal (default 0), >= 0 */
    /** Typical tokens per execution, >= 0 (0: unknown, taken as max_tokens): the kernels' hint, and
     *  whether FC1 gathers the token rows itself or reads a copy in expert order (from 4
     *  expected rows per expert). */
    int64_t expected_tokens;
    /** NONE (default): w1 and w2 are of dtype. BLOCK: w1 and w2 are E4M3 with DeepSeek-V3's
     *  128 x 128 block scales (tensors w1_scale, w2_scale; see moegemm_scale_mode_t); both
     *  GEMMs run in fp8. The layer quantizes x and FC1's activated output to E4M3 in groups of
     *  1 x 128 along their rows: scale = amax / 448 of the group (0 for a group of zeros),
     *  value = x / scale rounded to nearest even and saturated at 448. dtype (x, out) must be
     *  BF16; hidden and intermediate multiples of 16; fc1_inputs and fc2_inputs 0 (each
     *  NOT_SUPPORTED, or MISALIGNED for the multiples). Other scale modes: NOT_SUPPORTED. */
    moegemm_scale_mode_t weight_scales;
} moegemm_moe_problem_t;

/** Fills `problem` with the defaults above (the caller's sizeof through the macro).
 * \retval MOEGEMM_STATUS_SUCCESS
 * \retval MOEGEMM_STATUS_INVALID_VALUE  NULL, or struct_size out of range. */
MOEGEMM_API moegemm_status_t moegemm_moe_problem_init_sized(moegemm_moe_problem_t* problem,
                                                            size_t struct_size);
#define moegemm_moe_problem_init(problem) \
    moegemm_moe_problem_init_sized((problem), sizeof *(problem))

/** Opaque layer plan. */
typedef struct moegemm_moe_plan_s* moegemm_moe_plan_t;

/**
 * Validates the layer, picks its kernels and sizes its workspace (fixed for the plan's life).
 * \retval MOEGEMM_STATUS_SUCCESS
 * \retval MOEGEMM_STATUS_INVALID_VALUE  NULL argument, a field out of range (top_k above
 *                                       num_experts, the expert range outside the model's,
 *                                       activation parameters missing, ...).
 * \retval MOEGEMM_STATUS_MISALIGNED     hidden or intermediate not a multiple of 8 (16 with
 *                                       weight_scales BLOCK).
 * \retval MOEGEMM_STATUS_NOT_SUPPORTED  a device other than sm_90, a dtype other than BF16
 *                                       or F16, backend CUBLASLT; with weight_scales BLOCK a
 *                                       dtype other than BF16 or fc1_inputs / fc2_inputs;
 *                                       weight_scales other than NONE and BLOCK.
 * \retval MOEGEMM_STATUS_NO_DEVICE, MOEGEMM_STATUS_ARCH_MISMATCH, MOEGEMM_STATUS_ALLOC_FAILED,
 *         MOEGEMM_STATUS_CUDA_ERROR
 */
MOEGEMM_API moegemm_status_t moegemm_moe_plan_create(const moegemm_moe_problem_t* problem,
                                                     moegemm_moe_plan_t* out);
/** Releases the plan (NULL is a no-op); its executions must have finished. */
MOEGEMM_API moegemm_status_t moegemm_moe_plan_destroy(moegemm_moe_plan_t plan);
/** Bytes of device workspace moegemm_moe_execute needs, fixed at plan creation. */
MOEGEMM_API moegemm_status_t moegemm_moe_plan_get_workspace_size(moegemm_moe_plan_t plan,
                                                                 size_t* bytes);
/** The plan's device status word (see moegemm_plan_get_status_word): out-of-range routing ids
 *  set MOEGEMM_ROWS_CLAMPED_INDEX; a device token count above max_tokens sets
 *  MOEGEMM_SIZES_CLAMPED_CAPACITY (read as max_tokens), a negative one
 *  MOEGEMM_SIZES_CLAMPED_NEGATIVE (read as 0). */
MOEGEMM_API moegemm_status_t moegemm_moe_plan_get_status_word(moegemm_moe_plan_t plan,
                                                              uint32_t** device_word);
/** One line on the layer's kernels, as moegemm_plan_describe. */
MOEGEMM_API moegemm_status_t moegemm_moe_plan_describe(moegemm_moe_plan_t plan, char* buf,
                                                       size_t len);

/** The tensors of one layer execution (device memory, row-major, 16-byte aligned unless
 *  noted). Fill with moegemm_moe_tensors_init, then set the pointers. */
typedef struct moegemm_moe_tensors {
    size_t struct_size;          /**< set by moegemm_moe_tensors_init; do not change */
    const void* x;               /**< [T, H] */
    const void* topk_ids;        /**< [T, top_k] of id_type (4- or 8-byte aligned) */
    const float* topk_weights;   /**< [T, top_k] fp32 (4-byte aligned) */
    const void* w1;              /**< [local_experts, 2I (gated) or I, H] */
    const void* w2;              /**< [local_experts, H, I] */
    const void* b1;              /**< fc1_inputs BIAS: [local_experts, 2I or I] */
    const void* b2;              /**< fc2_inputs BIAS: [local_experts, H] */
    const float* alpha1;         /**< fc1_inputs ALPHA: fp32 [local_experts] */
    const float* alpha2;         /**< fc2_inputs ALPHA: fp32 [local_experts] */
    void* out;                   /**< [T, H]; rows of tokens with no local choice get zeros */
    /** T, when num_tokens_device is NULL: 0..max_tokens. */
    int64_t num_tokens;
    /** Or T in device memory (int32), read by the GPU at every execution (CUDA graphs with a
     *  token count that changes between replays); values outside [0, max_tokens] are clamped
     *  and flagged in the status word. Rows of out from T to max_tokens are not written. */
    const int32_t* num_tokens_device;
    /** weight_scales BLOCK: fp32 [local_experts, ceil(2I or I / 128), ceil(H / 128)] */
    const float* w1_scale;
    /** weight_scales BLOCK: fp32 [local_experts, ceil(H / 128), ceil(I / 128)] */
    const float* w2_scale;
} moegemm_moe_tensors_t;

/** Fills `tensors` with NULL pointers, num_tokens 0 and its struct_size. */
MOEGEMM_API moegemm_status_t moegemm_moe_tensors_init_sized(moegemm_moe_tensors_t* tensors,
                                                            size_t struct_size);
#define moegemm_moe_tensors_init(tensors) \
    moegemm_moe_tensors_init_sized((tensors), sizeof *(tensors))

/**
 * Enqueues the layer on `stream`: routing, FC1 with its gather and activation, FC2 and the
 * weighted combine, all from device data. Executions of at most 32 choices (T x top_k; T is
 * max_tokens with num_tokens_device) of a 16-bit layer run them in two kernels instead, the
 * weights streamed over the whole GPU: the same results up to the order of FC1's and FC2's
 * fp32 sums (moegemm_moe_plan_describe says up to how many tokens). Never synchronizes, never allocates, never reads
 * device memory on the host: with num_tokens_device it can be captured once and replayed
 * with new tokens, ids and weights. The combine sums each token's choices in increasing j in
 * fp32: results are bitwise reproducible run to run and replay to replay.
 * \retval MOEGEMM_STATUS_SUCCESS
 * \retval MOEGEMM_STATUS_INVALID_VALUE  NULL plan or tensors, a required pointer NULL (or an
 *                                       optional one given that the plan does not take),
 *                                       num_tokens out of [0, max_tokens], out overlapping an
 *                                       input or the workspace.
 * \retval MOEGEMM_STATUS_MISALIGNED     a pointer below its alignment, a workspace not
 *                                       256-byte aligned.
 * \retval MOEGEMM_STATUS_WORKSPACE_TOO_SMALL, MOEGEMM_STATUS_CUDA_ERROR
 */
MOEGEMM_API moegemm_status_t moegemm_moe_execute(moegemm_moe_plan_t plan,
                                                 const moegemm_moe_tensors_t* tensors,
                                                 void* workspace, size_t workspace_bytes,
                                                 struct CUstream_st* stream);

/**
 * Runs the layer once on these tensors (moegemm_moe_execute's arguments and rules) with its two
 * grouped GEMMs tuned in turn, as moegemm_plan_autotune tunes a plan: FC1 on the routed tokens
 * of this call, then FC2 on FC1's product. The chosen kernels stay the layer plan's and become
 * the process's choice for layers of the same shapes (and are written to the tune cache file
 * if one is named). Tune with routing typical of the workload: the timing uses this call's
 * expert sizes. The GEMMs are tuned for the executions that run them: those of more tokens
 * than the decode kernels take (see moegemm_moe_execute), whatever this call's count. Blocking; `out` then holds the layer's output. moegemm_moe_plan_describe
 * shows the kernels chosen.
 * \retval MOEGEMM_STATUS_SUCCESS
 * \retval MOEGEMM_STATUS_INVALID_STATE  `stream` is being captured into a CUDA graph.
 * \retval as moegemm_moe_execute for bad arguments.
 */
MOEGEMM_API moegemm_status_t moegemm_moe_plan_autotune(moegemm_moe_plan_t plan,
                                                       const moegemm_moe_tensors_t* tensors,
                                                       void* workspace, size_t workspace_bytes,
                                                       struct CUstream_st* stream);

/* ------------------------------------------------------------------------------------------ */
/* Diagnostics and version                                                                     */
/* ------------------------------------------------------------------------------------------ */

/**
 * The kernel variants this build contains, for moegemm_problem_t.force_kernel: index 0 to
 * moegemm_kernel_count() - 1. Names are stable within a version only.
 */
MOEGEMM_API int moegemm_kernel_count(void);
/** Name of kernel variant `index`, or NULL when `index` is out of range. */
MOEGEMM_API const char* moegemm_kernel_name(int index);

/** Static text for a status ("invalid value", ...); "unknown status" for other values. */
MOEGEMM_API const char* moegemm_status_string(moegemm_status_t status);

/** The enumerator's name ("MOEGEMM_STATUS_INVALID_VALUE"); "MOEGEMM_STATUS_UNKNOWN" otherwise. */
MOEGEMM_API const char* moegemm_status_name(moegemm_status_t status);

/**
 * Detail of the last failure on the calling thread ("" if none yet). Valid until the next
 * libmoegemm call on this thread. Successful calls do not clear it.
 */
MOEGEMM_API const char* moegemm_get_last_error_message(void);

/* ------------------------------------------------------------------------------------------ */
/* Environment                                                                                 */
/* ------------------------------------------------------------------------------------------ */

/*
 * Variables the library reads (none is needed):
 *  - MOEGEMM_LOG_LEVEL, MOEGEMM_LOG_FILE: see moegemm_set_log_callback.
 *  - MOEGEMM_PDL=0: native kernels are launched without programmatic dependent launch. By
 *    default they are launched with it, so a native kernel may start while the previous
 *    kernel of the stream finishes; it reads and writes no global memory (A, B, the sizes,
 *    the scales, D, the workspace) before that kernel has completed, so results are identical
 *    either way. A kernel of yours launched right after an execute with that attribute
 *    (cudaLaunchAttributeProgrammaticStreamSerialization) must, as CUDA requires, call
 *    cudaGridDependencySynchronize() before it reads D. Read once, at plan creation.
 */

/* ------------------------------------------------------------------------------------------ */
/* Logging                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/** Log levels: a message is emitted when its level is at most the configured one. */
typedef enum moegemm_log_level {
    MOEGEMM_LOG_OFF = 0,
    MOEGEMM_LOG_ERROR = 1, /**< every failed call, with its status and message */
    MOEGEMM_LOG_WARN = 2,
    MOEGEMM_LOG_INFO = 3,  /**< plans created (with the kernel when chosen at creation) */
    MOEGEMM_LOG_TRACE = 4  /**< every call */
} moegemm_log_level_t;

/** Receives one log message (NUL-terminated, no trailing newline). May be called from any
 *  thread that calls into the library; calls are serialized. Must not call libmoegemm. */
typedef void (*moegemm_log_callback_t)(moegemm_log_level_t level, const char* message,
                                       void* user_data);

/**
 * Logging is off by default and never writes to stdout. Two ways to turn it on:
 *  - environment, read once at the first call: MOEGEMM_LOG_LEVEL = 0..4 (or off, error, warn,
 *    info, trace) and MOEGEMM_LOG_FILE = a path (a "%i" in it becomes the process id; default
 *    stderr);
 *  - this function: messages up to `level` go to `callback` (with `user_data`). A NULL
 *    callback sends them to the environment's destination (MOEGEMM_LOG_FILE or stderr) at
 *    `level`; level OFF silences the library.
 * \retval MOEGEMM_STATUS_SUCCESS
 * \retval MOEGEMM_STATUS_INVALID_VALUE  `level` out of range.
 */
MOEGEMM_API moegemm_status_t moegemm_set_log_callback(moegemm_log_callback_t callback,
                                                      void* user_data,
                                                      moegemm_log_level_t level);

/** Runtime version as MOEGEMM_VERSION (major*10000 + minor*100 + patch): compare it with the
 *  macro to detect a header/library mismatch. */
MOEGEMM_API int moegemm_get_version(void);

/** Version as text, "MAJOR.MINOR.PATCH". */
MOEGEMM_API const char* moegemm_get_version_string(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MOEGEMM_MOEGEMM_H */

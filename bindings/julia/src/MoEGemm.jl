"""
    MoEGemm

Julia wrappers for libmoegemm, grouped expert GEMMs for Mixture-of-Experts layers on NVIDIA
GPUs: for every expert `e`, `D_e[m, n] = sum_k A_e[m, k] * B_e[n, k]` (fp32 accumulation).

Conventions follow CUDA.jl:
- device memory is passed as pointers. With CUDA.jl, pass `pointer(x)` of a `CuArray` (a
  `CuPtr{T}`); plain `Ptr{Cvoid}` and integer addresses (`UInt`) are accepted as well.
  Matrices are row-major in the C API: a Julia (column-major) `CuArray` of size `(K, rows)`
  holds a row-major `[rows, K]` matrix.
- the stream is an argument that defaults to `C_NULL` (the legacy default stream). With
  CUDA.jl pass the task-local stream: `execute!(plan, a, b, d, ws; stream = CUDA.stream())`
  (a `CuStream` is passed through its `handle` field; a raw `CUstream`/`Ptr` works too).
- every status is checked by `@check`, which throws `MoEGemmError(status, name, message)`.

The library is located through `ENV["MOEGEMM_LIBRARY"]` (a full path) or the dynamic
loader's search path (`libmoegemm`). The variable is read when the package is precompiled
(the path is a constant of the compiled package): after changing it, precompile again
(`Base.compilecache(Base.identify_package("MoEGemm"))`) or keep the path stable.
"""
module MoEGemm

export MoEGemmError, Problem, Plan, problem_init, set_expert_sizes!, workspace_size,
       describe, status_word, execute!, version, version_string, kernel_names,
       Tensors, tensors_init, execute_tensors!, autotune!, set_tune_cache_file, MoeProblem,
       moe_problem_init, MoePlan, MoeTensors, moe_tensors_init

const libmoegemm = get(ENV, "MOEGEMM_LIBRARY", "libmoegemm")

# ---------------------------------------------------------------------------------------
# Constants (values pinned by include/moegemm/moegemm.h)
# ---------------------------------------------------------------------------------------

const moegemm_status_t = Cint
const MOEGEMM_STATUS_SUCCESS = Cint(0)
const MOEGEMM_STATUS_INVALID_VALUE = Cint(1)
const MOEGEMM_STATUS_NOT_SUPPORTED = Cint(2)
const MOEGEMM_STATUS_NO_DEVICE = Cint(3)
const MOEGEMM_STATUS_ARCH_MISMATCH = Cint(4)
const MOEGEMM_STATUS_MISALIGNED = Cint(5)
const MOEGEMM_STATUS_WORKSPACE_TOO_SMALL = Cint(6)
const MOEGEMM_STATUS_INVALID_STATE = Cint(7)
const MOEGEMM_STATUS_ALLOC_FAILED = Cint(8)
const MOEGEMM_STATUS_CUDA_ERROR = Cint(9)
const MOEGEMM_STATUS_CUBLAS_ERROR = Cint(10)
const MOEGEMM_STATUS_INTERNAL_ERROR = Cint(11)

const MOEGEMM_LAYOUT_VARIABLE = Cint(0)
const MOEGEMM_LAYOUT_MASKED = Cint(1)
const MOEGEMM_LAYOUT_FIXED = Cint(2)

const MOEGEMM_DTYPE_BF16 = Cint(0)
const MOEGEMM_DTYPE_F16 = Cint(1)
const MOEGEMM_DTYPE_F32 = Cint(2)
const MOEGEMM_DTYPE_E4M3 = Cint(3)

const MOEGEMM_WEIGHTS_NK = Cint(0)
const MOEGEMM_WEIGHTS_KN = Cint(1)

const MOEGEMM_SCALE_NONE = Cint(0)
const MOEGEMM_SCALE_PER_TENSOR = Cint(1)
const MOEGEMM_SCALE_PER_EXPERT = Cint(2)
const MOEGEMM_SCALE_ROWWISE = Cint(3)
const MOEGEMM_SCALE_BLOCK = Cint(4)

const MOEGEMM_BACKEND_AUTO = Cint(0)
const MOEGEMM_BACKEND_NATIVE = Cint(1)
const MOEGEMM_BACKEND_CUBLASLT = Cint(2)

const MOEGEMM_MEMORY_HOST = Cint(0)
const MOEGEMM_MEMORY_DEVICE = Cint(1)

const MOEGEMM_LOG_OFF = Cint(0)
const MOEGEMM_LOG_ERROR = Cint(1)
const MOEGEMM_LOG_WARN = Cint(2)
const MOEGEMM_LOG_INFO = Cint(3)
const MOEGEMM_LOG_TRACE = Cint(4)

# since 0.2
const MOEGEMM_ACTIVATION_NONE = Cint(0)
const MOEGEMM_ACTIVATION_SILU = Cint(1)
const MOEGEMM_ACTIVATION_GELU_TANH = Cint(2)
const MOEGEMM_ACTIVATION_SWIGLU = Cint(3)
const MOEGEMM_ACTIVATION_GEGLU = Cint(4)
const MOEGEMM_ACTIVATION_SWIGLU_CLAMPED = Cint(5)

const MOEGEMM_GATE_UP_HALVES = Cint(0)
const MOEGEMM_UP_GATE_HALVES = Cint(1)
const MOEGEMM_GATE_UP_INTERLEAVED = Cint(2)

const MOEGEMM_INDEX_INT32 = Cint(0)
const MOEGEMM_INDEX_INT64 = Cint(1)

const MOEGEMM_EPILOGUE_ALPHA = UInt32(0x1)
const MOEGEMM_EPILOGUE_ROW_SCALE = UInt32(0x2)
const MOEGEMM_EPILOGUE_BIAS = UInt32(0x4)

const MOEGEMM_MAX_EXPERTS = 1024
const MOEGEMM_DESCRIBE_MAX = 512
const MOEGEMM_PROBLEM_SIZE_0_1 = 88
const MOEGEMM_PROBLEM_SIZE_0_2 = 120
const MOEGEMM_VERSION_MAJOR = 0  # the header this package mirrors
const MOEGEMM_SIZES_CLAMPED_NEGATIVE = UInt32(0x1)
const MOEGEMM_SIZES_CLAMPED_CAPACITY = UInt32(0x2)
const MOEGEMM_ROWS_CLAMPED_INDEX = UInt32(0x4)

# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------

"""
    MoEGemmError(status, name, message)

A failed libmoegemm call: the status code, its enumerator name
(`"MOEGEMM_STATUS_INVALID_VALUE"`) and the library's thread-local detail message.
"""
struct MoEGemmError <: Exception
    status::Cint
    name::String
    message::String
end

Base.showerror(io::IO, e::MoEGemmError) =
    print(io, "MoEGemmError: ", e.name, " (", e.status, ")", isempty(e.message) ? "" : ": " * e.message)

_str(p::Ptr{Cchar}) = p == C_NULL ? "" : unsafe_string(p)

function MoEGemmError(status::Integer)
    # Read the message on the thread that failed, before any other libmoegemm call.
    msg = _str(moegemm_get_last_error_message())
    MoEGemmError(Cint(status), _str(moegemm_status_name(status)), msg)
end

"""
    @check expr

Evaluates a libmoegemm call returning a `moegemm_status_t` and throws `MoEGemmError` unless
it is `MOEGEMM_STATUS_SUCCESS` (as CUDA.jl's `@check` / `@checked`).
"""
macro check(ex)
    quote
        local status = $(esc(ex))
        status == MOEGEMM_STATUS_SUCCESS || throw(MoEGemmError(status))
        nothing
    end
end

# ---------------------------------------------------------------------------------------
# Types
# ---------------------------------------------------------------------------------------

"""
    Problem

Mirror of `moegemm_problem_t` (same field order and C types). Build it with
[`problem_init`](@ref) (or `Problem(; kwargs...)`), which sets `struct_size` and the defaults.
`force_kernel` is a C string pointer: keep the backing `String` alive (GC.@preserve) until
`Plan` returns, or use the `force_kernel` keyword of `Plan`.
"""
mutable struct Problem
    struct_size::Csize_t
    layout::Cint
    num_experts::Int32
    n::Int64
    k::Int64
    max_rows::Int64
    a_type::Cint
    b_type::Cint
    d_type::Cint
    weight_layout::Cint
    scale_mode::Cint
    backend::Cint
    device::Int32
    expected_rows::Int64
    force_kernel::Ptr{Cchar}
    # since 0.2 (MOEGEMM_PROBLEM_SIZE_0_2): the epilogue and the gather, all 0 by default
    epilogue_inputs::UInt32
    bias_type::Cint
    activation::Cint
    gate_layout::Cint
    activation_alpha::Cfloat
    activation_limit::Cfloat
    gather_rows::Int64
    Problem(::UndefInitializer) = new()
end

"""
    Tensors

Mirror of `moegemm_tensors_t` (since 0.2), the arguments of `moegemm_execute_tensors`: device
pointers (NULL unless set). Build it with [`tensors_init`](@ref) or `Tensors(; a, b, d, ...)`.
"""
mutable struct Tensors
    struct_size::Csize_t
    a::Ptr{Cvoid}
    b::Ptr{Cvoid}
    d::Ptr{Cvoid}
    a_scale::Ptr{Cfloat}
    b_scale::Ptr{Cfloat}
    alpha::Ptr{Cfloat}
    row_scale::Ptr{Cfloat}
    bias::Ptr{Cvoid}
    a_rows::Ptr{Int32}
    Tensors(::UndefInitializer) = new()
end

"""
    MoeProblem

Mirror of `moegemm_moe_problem_t` (since 0.2): a Mixture-of-Experts layer's experts. Build it
with [`moe_problem_init`](@ref) or `MoeProblem(; num_experts, top_k, hidden, intermediate,
max_tokens, activation, ...)`. `weight_scales = MOEGEMM_SCALE_BLOCK`: w1 and w2 are E4M3 with
128 x 128 block scales (`w1_scale`, `w2_scale` of `MoeTensors`); dtype BF16, hidden and
intermediate multiples of 16, fc1_inputs and fc2_inputs 0.
"""
mutable struct MoeProblem
    struct_size::Csize_t
    num_experts::Int32
    first_expert::Int32
    local_experts::Int32
    top_k::Int32
    hidden::Int64
    intermediate::Int64
    max_tokens::Int64
    dtype::Cint
    activation::Cint
    gate_layout::Cint
    activation_alpha::Cfloat
    activation_limit::Cfloat
    fc1_inputs::UInt32
    fc2_inputs::UInt32
    id_type::Cint
    backend::Cint
    device::Int32
    expected_tokens::Int64
    weight_scales::Cint
    MoeProblem(::UndefInitializer) = new()
end

"""
    MoeTensors

Mirror of `moegemm_moe_tensors_t` (since 0.2), the arguments of `moegemm_moe_execute`.
"""
mutable struct MoeTensors
    struct_size::Csize_t
    x::Ptr{Cvoid}
    topk_ids::Ptr{Cvoid}
    topk_weights::Ptr{Cfloat}
    w1::Ptr{Cvoid}
    w2::Ptr{Cvoid}
    b1::Ptr{Cvoid}
    b2::Ptr{Cvoid}
    alpha1::Ptr{Cfloat}
    alpha2::Ptr{Cfloat}
    out::Ptr{Cvoid}
    num_tokens::Int64
    num_tokens_device::Ptr{Int32}
    w1_scale::Ptr{Cfloat}
    w2_scale::Ptr{Cfloat}
    MoeTensors(::UndefInitializer) = new()
end

# The 0.2 functions are resolved when first called (ccall binds lazily): a library that
# predates them still serves everything else. The high-level entry points check first, so
# that the error says what is missing.
function _require(name::Symbol)
    h = Libc.Libdl.dlopen(libmoegemm; throw_error = false)
    found = h !== nothing && Libc.Libdl.dlsym_e(h, name) != C_NULL
    found || error("the loaded libmoegemm $(version_string()) does not export $(name), " *
                   "which the C API added in 0.2: point MOEGEMM_LIBRARY at a libmoegemm that " *
                   "has it (and precompile MoEGemm again)")
    return nothing
end

# ---------------------------------------------------------------------------------------
# Plumbing shared by the structs and the plans
# ---------------------------------------------------------------------------------------

# A `T` filled by `init`, its `moegemm_*_init_sized` wrapper, with this package's struct size
# (a later library with a larger struct writes no more than it).
function _init_sized(init, ::Type{T}) where {T}
    x = T(undef)
    @check init(x, sizeof(T))
    return x
end

# `x` with the fields named by the keyword arguments `kwargs` set, each value passed through
# `conv` and converted to the field's type.
function _set_fields!(x::T, kwargs; conv = identity) where {T}
    for (name, value) in kwargs
        setproperty!(x, name, convert(fieldtype(T, name), conv(value)))
    end
    return x
end

# Attaches the finalizer that destroys `plan.handle` with `destroy`, the plan type's
# `moegemm_*_destroy` wrapper.
function _destroy_on_gc!(plan, destroy)
    finalizer(plan) do x
        x.handle == C_NULL || destroy(x.handle)
        x.handle = C_NULL
    end
    return plan
end

# `close(plan)`: destroys the C plan now, once.
function _close!(plan, destroy)
    if plan.handle != C_NULL
        h = plan.handle
        plan.handle = C_NULL
        @check destroy(h)
    end
    nothing
end

# The value that `getter`, the wrapper of a C getter, writes through its out-parameter
# (a `Ref{T}` that starts as `init`).
function _get_out(getter, plan, init::T) where {T}
    out = Ref{T}(init)
    @check getter(plan, out)
    return out[]
end

# The string that `describe_fn`, a `moegemm_*_describe` wrapper, writes.
function _describe(describe_fn, plan)
    buf = zeros(UInt8, MOEGEMM_DESCRIBE_MAX)
    @check describe_fn(plan, buf, length(buf))
    return String(buf[1:something(findfirst(==(0x00), buf), length(buf) + 1)-1])
end

"""
    problem_init() -> Problem

A `Problem` filled by `moegemm_problem_init_sized` (with this package's struct size, so that
a later library with a larger struct writes no more than it): VARIABLE layout, bf16 in and
out, NK weights, AUTO backend, device 0; `num_experts`, `n`, `k` and `max_rows` must be set.
"""
const _version_checked = Ref(false)

# The library loaded at run time must have the major version of the header this package
# mirrors (versions of one major version are ABI compatible); checked once, at the first
# problem.
function _check_library_version()
    _version_checked[] && return nothing
    loaded = version()
    div(loaded, 10000) == MOEGEMM_VERSION_MAJOR ||
        error("libmoegemm $(version_string()) was loaded; MoEGemm.jl mirrors the " *
              "$(MOEGEMM_VERSION_MAJOR).x header (major versions differ)")
    _version_checked[] = true
    return nothing
end

function problem_init()
    _check_library_version()
    return _init_sized(moegemm_problem_init_sized, Problem)
end

"""
    Problem(; layout, num_experts, n, k, max_rows, a_type, b_type, d_type, ...)

`problem_init()` with the given fields changed.
"""
Problem(; kwargs...) = _set_fields!(problem_init(), kwargs)

const moegemm_plan_t = Ptr{Cvoid}
const moegemm_moe_plan_t = Ptr{Cvoid}

"""
    Plan(problem; force_kernel = nothing)

Owns a `moegemm_plan_t`; destroyed by a finalizer (or explicitly with `close(plan)`).
Executions still pending on a stream must finish before the plan is destroyed: keep the
plan referenced, or synchronize, until then.
"""
mutable struct Plan
    handle::moegemm_plan_t
    num_experts::Int
    needs_tensors::Bool  # epilogue inputs or a gather: executes go through execute_tensors
    function Plan(problem::Problem; force_kernel::Union{Nothing,AbstractString} = nothing)
        out = Ref{moegemm_plan_t}(C_NULL)
        name = force_kernel === nothing ? nothing : String(force_kernel)
        saved = problem.force_kernel
        GC.@preserve name begin
            name === nothing || (problem.force_kernel = pointer(name))
            try
                @check moegemm_plan_create(problem, out)
            finally
                problem.force_kernel = saved
            end
        end
        plan = new(out[], Int(problem.num_experts),
                   problem.epilogue_inputs != 0 || problem.gather_rows > 0)
        return _destroy_on_gc!(plan, moegemm_plan_destroy)
    end
end

Base.close(plan::Plan) = _close!(plan, moegemm_plan_destroy)

Base.unsafe_convert(::Type{moegemm_plan_t}, plan::Plan) =
    plan.handle == C_NULL ? throw(ArgumentError("the plan was closed")) : plan.handle

# ---------------------------------------------------------------------------------------
# Pointer conversions (CuPtr-friendly without depending on CUDA.jl)
# ---------------------------------------------------------------------------------------

# Anything that is a device address: CUDA.jl's CuPtr{T} (via its UInt conversion), Ptr{T},
# integer addresses, or `nothing` for NULL.
_ptr(::Nothing) = C_NULL
_ptr(p::Ptr) = Ptr{Cvoid}(p)
_ptr(p::Integer) = Ptr{Cvoid}(UInt(p))
_ptr(p) = Ptr{Cvoid}(reinterpret(UInt, p))   # CuPtr{T}: a 64-bit primitive address
# A stream: C_NULL/nothing (legacy default stream), a Ptr or address, or CUDA.jl's CuStream
# (its `handle` field is the CUstream).
_stream(s::Nothing) = C_NULL
_stream(s::Ptr) = Ptr{Cvoid}(s)
_stream(s::Integer) = Ptr{Cvoid}(UInt(s))
_stream(s) = hasproperty(s, :handle) ? Ptr{Cvoid}(getproperty(s, :handle)) :
             Ptr{Cvoid}(reinterpret(UInt, s))

# ---------------------------------------------------------------------------------------
# Raw ccall wrappers: one per header function, same order and argument count
# ---------------------------------------------------------------------------------------

moegemm_problem_init(problem::Problem) =
    ccall((:moegemm_problem_init, libmoegemm), moegemm_status_t, (Ref{Problem},), problem)

moegemm_problem_init_sized(problem::Problem, struct_size::Integer) =
    ccall((:moegemm_problem_init_sized, libmoegemm), moegemm_status_t,
          (Ref{Problem}, Csize_t), problem, struct_size)

moegemm_plan_create(problem::Problem, out::Ref{moegemm_plan_t}) =
    ccall((:moegemm_plan_create, libmoegemm), moegemm_status_t,
          (Ref{Problem}, Ptr{moegemm_plan_t}), problem, out)

moegemm_plan_destroy(plan) =
    ccall((:moegemm_plan_destroy, libmoegemm), moegemm_status_t, (moegemm_plan_t,), plan)

moegemm_plan_set_expert_sizes(plan, sizes, where_) =
    ccall((:moegemm_plan_set_expert_sizes, libmoegemm), moegemm_status_t,
          (moegemm_plan_t, Ptr{Int32}, Cint), plan, sizes, where_)

moegemm_plan_get_workspace_size(plan, bytes) =
    ccall((:moegemm_plan_get_workspace_size, libmoegemm), moegemm_status_t,
          (moegemm_plan_t, Ptr{Csize_t}), plan, bytes)

moegemm_plan_get_status_word(plan, device_word) =
    ccall((:moegemm_plan_get_status_word, libmoegemm), moegemm_status_t,
          (moegemm_plan_t, Ptr{Ptr{UInt32}}), plan, device_word)

moegemm_plan_describe(plan, buf, len) =
    ccall((:moegemm_plan_describe, libmoegemm), moegemm_status_t,
          (moegemm_plan_t, Ptr{UInt8}, Csize_t), plan, buf, len)

moegemm_execute(plan, a, b, d, a_scale, b_scale, workspace, workspace_bytes, stream) =
    ccall((:moegemm_execute, libmoegemm), moegemm_status_t,
          (moegemm_plan_t, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cfloat}, Ptr{Cfloat},
           Ptr{Cvoid}, Csize_t, Ptr{Cvoid}),
          plan, a, b, d, a_scale, b_scale, workspace, workspace_bytes, stream)

# since 0.2 -------------------------------------------------------------------------------

moegemm_tensors_init_sized(tensors::Tensors, struct_size::Integer) =
    ccall((:moegemm_tensors_init_sized, libmoegemm), moegemm_status_t,
          (Ref{Tensors}, Csize_t), tensors, struct_size)

moegemm_execute_tensors(plan, tensors::Tensors, workspace, workspace_bytes, stream) =
    ccall((:moegemm_execute_tensors, libmoegemm), moegemm_status_t,
          (moegemm_plan_t, Ref{Tensors}, Ptr{Cvoid}, Csize_t, Ptr{Cvoid}),
          plan, tensors, workspace, workspace_bytes, stream)

moegemm_plan_autotune(plan, tensors::Tensors, workspace, workspace_bytes, stream) =
    ccall((:moegemm_plan_autotune, libmoegemm), moegemm_status_t,
          (moegemm_plan_t, Ref{Tensors}, Ptr{Cvoid}, Csize_t, Ptr{Cvoid}),
          plan, tensors, workspace, workspace_bytes, stream)

moegemm_set_tune_cache_file(path) =
    ccall((:moegemm_set_tune_cache_file, libmoegemm), moegemm_status_t, (Cstring,), path)

moegemm_moe_problem_init_sized(problem::MoeProblem, struct_size::Integer) =
    ccall((:moegemm_moe_problem_init_sized, libmoegemm), moegemm_status_t,
          (Ref{MoeProblem}, Csize_t), problem, struct_size)

moegemm_moe_plan_create(problem::MoeProblem, out::Ref{moegemm_moe_plan_t}) =
    ccall((:moegemm_moe_plan_create, libmoegemm), moegemm_status_t,
          (Ref{MoeProblem}, Ptr{moegemm_moe_plan_t}), problem, out)

moegemm_moe_plan_destroy(plan) =
    ccall((:moegemm_moe_plan_destroy, libmoegemm), moegemm_status_t, (moegemm_moe_plan_t,), plan)

moegemm_moe_plan_get_workspace_size(plan, bytes) =
    ccall((:moegemm_moe_plan_get_workspace_size, libmoegemm), moegemm_status_t,
          (moegemm_moe_plan_t, Ptr{Csize_t}), plan, bytes)

moegemm_moe_plan_get_status_word(plan, device_word) =
    ccall((:moegemm_moe_plan_get_status_word, libmoegemm), moegemm_status_t,
          (moegemm_moe_plan_t, Ptr{Ptr{UInt32}}), plan, device_word)

moegemm_moe_plan_describe(plan, buf, len) =
    ccall((:moegemm_moe_plan_describe, libmoegemm), moegemm_status_t,
          (moegemm_moe_plan_t, Ptr{UInt8}, Csize_t), plan, buf, len)

moegemm_moe_tensors_init_sized(tensors::MoeTensors, struct_size::Integer) =
    ccall((:moegemm_moe_tensors_init_sized, libmoegemm), moegemm_status_t,
          (Ref{MoeTensors}, Csize_t), tensors, struct_size)

moegemm_moe_execute(plan, tensors::MoeTensors, workspace, workspace_bytes, stream) =
    ccall((:moegemm_moe_execute, libmoegemm), moegemm_status_t,
          (moegemm_moe_plan_t, Ref{MoeTensors}, Ptr{Cvoid}, Csize_t, Ptr{Cvoid}),
          plan, tensors, workspace, workspace_bytes, stream)

moegemm_moe_plan_autotune(plan, tensors::MoeTensors, workspace, workspace_bytes, stream) =
    ccall((:moegemm_moe_plan_autotune, libmoegemm), moegemm_status_t,
          (moegemm_moe_plan_t, Ref{MoeTensors}, Ptr{Cvoid}, Csize_t, Ptr{Cvoid}),
          plan, tensors, workspace, workspace_bytes, stream)

# -----------------------------------------------------------------------------------------

moegemm_kernel_count() = ccall((:moegemm_kernel_count, libmoegemm), Cint, ())

moegemm_kernel_name(index) =
    ccall((:moegemm_kernel_name, libmoegemm), Ptr{Cchar}, (Cint,), index)

moegemm_status_string(status) =
    ccall((:moegemm_status_string, libmoegemm), Ptr{Cchar}, (moegemm_status_t,), status)

moegemm_status_name(status) =
    ccall((:moegemm_status_name, libmoegemm), Ptr{Cchar}, (moegemm_status_t,), status)

moegemm_get_last_error_message() =
    ccall((:moegemm_get_last_error_message, libmoegemm), Ptr{Cchar}, ())

moegemm_set_log_callback(callback, user_data, level) =
    ccall((:moegemm_set_log_callback, libmoegemm), moegemm_status_t,
          (Ptr{Cvoid}, Ptr{Cvoid}, Cint), callback, user_data, level)

moegemm_get_version() = ccall((:moegemm_get_version, libmoegemm), Cint, ())

moegemm_get_version_string() =
    ccall((:moegemm_get_version_string, libmoegemm), Ptr{Cchar}, ())

# ---------------------------------------------------------------------------------------
# High-level API
# ---------------------------------------------------------------------------------------

"""
    set_expert_sizes!(plan, sizes::AbstractVector{Int32})   # host sizes, copied now
    set_expert_sizes!(plan, sizes_ptr; device = true)       # device pointer, e.g. pointer(cu_sizes)

Host sizes must have one value per expert. Device sizes (a `CuPtr{Int32}`, `Ptr` or address)
are read by the GPU at every execution and must stay alive as long as the plan executes. A
GPU array itself (a `CuVector{Int32}`) is refused with an `ArgumentError`: copying it to the
host here would synchronize, fail under stream capture, and freeze the sizes the caller means
to update on the GPU; pass `pointer(cu_sizes)` (device sizes) or `Array(cu_sizes)` (host).
"""
function set_expert_sizes!(plan::Plan, sizes::AbstractVector{<:Integer})
    _is_device_array(sizes) &&
        throw(ArgumentError("sizes is a GPU array: pass pointer(sizes) for device sizes " *
                            "(int32, read at every execution) or Array(sizes) for host sizes"))
    length(sizes) == plan.num_experts ||
        throw(ArgumentError("sizes has $(length(sizes)) values; the plan has $(plan.num_experts) experts"))
    host = Vector{Int32}(sizes)
    GC.@preserve host @check moegemm_plan_set_expert_sizes(plan, pointer(host), MOEGEMM_MEMORY_HOST)
    return plan
end

# A GPU array (CUDA.jl's CuArray and the like) hands out a device pointer type, not a `Ptr`.
function _is_device_array(x)
    applicable(pointer, x) || return false
    p = try
        pointer(x)
    catch
        return false
    end
    return !(p isa Ptr)
end

function set_expert_sizes!(plan::Plan, sizes_ptr; device::Bool = true)
    device || throw(ArgumentError("a pointer argument is a device pointer: pass device = true"))
    @check moegemm_plan_set_expert_sizes(plan, Ptr{Int32}(_ptr(sizes_ptr)), MOEGEMM_MEMORY_DEVICE)
    return plan
end

"""Bytes of device workspace `execute!` needs (fixed for the plan's life)."""
workspace_size(plan::Plan) = Int(_get_out(moegemm_plan_get_workspace_size, plan, Csize_t(0)))

"""One line on what the heuristic chose."""
describe(plan::Plan) = _describe(moegemm_plan_describe, plan)

"""Device address (`Ptr{UInt32}`) of the plan's status word (`MOEGEMM_SIZES_CLAMPED_*` bits)."""
status_word(plan::Plan) = _get_out(moegemm_plan_get_status_word, plan, Ptr{UInt32}(C_NULL))

"""
    execute!(plan, a, b, d, workspace = nothing, workspace_bytes = 0;
             a_scale = nothing, b_scale = nothing, stream = C_NULL) -> d

Enqueues `D = grouped(A x B)` on `stream` and returns without waiting. `a`, `b`, `d`,
`workspace` and the scales are device pointers (`pointer(cuarray)`, `Ptr`, or addresses).
With CUDA.jl pass `stream = CUDA.stream()` (the task-local stream); the default `C_NULL`
is the legacy default stream. Keep the arrays alive until the work completes.
"""
function execute!(plan::Plan, a, b, d, workspace = nothing, workspace_bytes::Integer = 0;
                  a_scale = nothing, b_scale = nothing, alpha = nothing, row_scale = nothing,
                  bias = nothing, a_rows = nothing, stream = C_NULL)
    if plan.needs_tensors || !all(isnothing, (alpha, row_scale, bias, a_rows))
        t = Tensors(; a = a, b = b, d = d, a_scale = a_scale, b_scale = b_scale, alpha = alpha,
                    row_scale = row_scale, bias = bias, a_rows = a_rows)
        return execute_tensors!(plan, t, workspace, workspace_bytes; stream = stream)
    end
    @check moegemm_execute(plan, _ptr(a), _ptr(b), _ptr(d),
                           Ptr{Cfloat}(_ptr(a_scale)), Ptr{Cfloat}(_ptr(b_scale)),
                           _ptr(workspace), Csize_t(workspace_bytes), _stream(stream))
    return d
end

"""
    tensors_init() -> Tensors
    Tensors(; a, b, d, a_scale, b_scale, alpha, row_scale, bias, a_rows) -> Tensors

A `moegemm_tensors_t` (since 0.2) from `moegemm_tensors_init_sized` (every pointer NULL),
with the given device pointers (`pointer(cuarray)`, `Ptr`, addresses, or `nothing`).
"""
function tensors_init()
    _require(:moegemm_tensors_init_sized)
    return _init_sized(moegemm_tensors_init_sized, Tensors)
end

Tensors(; kwargs...) = _set_fields!(tensors_init(), kwargs; conv = _ptr)

"""
    execute_tensors!(plan, tensors::Tensors, workspace = nothing, workspace_bytes = 0;
                     stream = C_NULL) -> tensors.d

`moegemm_execute_tensors` (since 0.2): `execute!` with the epilogue's per-call arrays (alpha
fp32 `[E]`, row_scale fp32 per row of D, bias `[E, N]` of the problem's bias_type) and the
gather's int32 `a_rows`, as the plan's `epilogue_inputs` and `gather_rows` require. `execute!`
with the keywords `alpha`, `row_scale`, `bias`, `a_rows` builds the `Tensors` for you.
"""
function execute_tensors!(plan::Plan, tensors::Tensors, workspace = nothing,
                          workspace_bytes::Integer = 0; stream = C_NULL)
    _require(:moegemm_execute_tensors)
    @check moegemm_execute_tensors(plan, tensors, _ptr(workspace), Csize_t(workspace_bytes),
                                   _stream(stream))
    return tensors.d
end

"""
    autotune!(plan, tensors::Tensors, workspace = nothing, workspace_bytes = 0;
              stream = C_NULL) -> tensors.d
    autotune!(plan, a, b, d, workspace = nothing, workspace_bytes = 0; a_scale, b_scale,
              alpha, row_scale, bias, a_rows, stream = C_NULL) -> d

`moegemm_plan_autotune` (since 0.2): times every kernel that serves the plan's problem and
current sizes on these buffers (`execute_tensors!`'s arguments, under the same rules) and makes
the fastest the plan's kernel: `describe(plan)` then says "tuned:". Kernels of the other backend
compete where the problem's backend is AUTO and `workspace_bytes` covers theirs (32 MiB covers
cuBLASLt's on sm_90); the plan's workspace size then grows to that backend's. The choice
is also the process's for plans of the same GPU, problem and size bucket, and is written to the
tune cache file if one is named ([`set_tune_cache_file`](@ref)). Blocking: each candidate runs
a few dozen times on `stream` and the call waits; `d` then holds the product. Throws
`MoEGemmError` with `MOEGEMM_STATUS_INVALID_STATE` when the sizes were never set, when
`stream` is being captured into a CUDA graph, or when the plan forces a kernel.
"""
function autotune!(plan::Plan, tensors::Tensors, workspace = nothing,
                   workspace_bytes::Integer = 0; stream = C_NULL)
    _require(:moegemm_plan_autotune)
    @check moegemm_plan_autotune(plan, tensors, _ptr(workspace), Csize_t(workspace_bytes),
                                 _stream(stream))
    return tensors.d
end

function autotune!(plan::Plan, a, b, d, workspace = nothing, workspace_bytes::Integer = 0;
                   stream = C_NULL, kwargs...)
    autotune!(plan, Tensors(; a = a, b = b, d = d, kwargs...), workspace, workspace_bytes;
              stream = stream)
    return d
end

"""
    set_tune_cache_file(path::Union{Nothing,AbstractString})

`moegemm_set_tune_cache_file` (since 0.2): names the file that keeps `autotune!`'s results
across processes and adds the results it holds to the process's (plans created from now on use
them); `nothing` or `""` names none. Needs no GPU. A missing, unreadable, stale or corrupt file
is ignored with a warning in the log, never an error.
"""
function set_tune_cache_file(path::Union{Nothing,AbstractString})
    _require(:moegemm_set_tune_cache_file)
    @check moegemm_set_tune_cache_file(path === nothing ? C_NULL : String(path))
    return nothing
end

# ---------------------------------------------------------------------------------------
# The MoE layer (since 0.2)
# ---------------------------------------------------------------------------------------

"""
    moe_problem_init() -> MoeProblem
    MoeProblem(; num_experts, top_k, hidden, intermediate, max_tokens, dtype, activation, ...)

A `moegemm_moe_problem_t` from `moegemm_moe_problem_init_sized` (bf16, activation NONE, int32
ids, all experts local, weights of dtype), with the given fields changed (C enum values, e.g.
`activation = MoEGemm.MOEGEMM_ACTIVATION_SWIGLU`, `weight_scales = MoEGemm.MOEGEMM_SCALE_BLOCK`
for E4M3 weights with 128 x 128 block scales).
"""
function moe_problem_init()
    _check_library_version()
    _require(:moegemm_moe_problem_init_sized)
    return _init_sized(moegemm_moe_problem_init_sized, MoeProblem)
end

MoeProblem(; kwargs...) = _set_fields!(moe_problem_init(), kwargs)

"""
    moe_tensors_init() -> MoeTensors

A `moegemm_moe_tensors_t` from `moegemm_moe_tensors_init_sized` (pointers NULL, num_tokens 0).
"""
function moe_tensors_init()
    _require(:moegemm_moe_tensors_init_sized)
    return _init_sized(moegemm_moe_tensors_init_sized, MoeTensors)
end

"""
    MoePlan(problem::MoeProblem)

Owns a `moegemm_moe_plan_t`; destroyed by a finalizer or `close(plan)`. Executions still
pending must finish before it is destroyed.
"""
mutable struct MoePlan
    handle::moegemm_moe_plan_t
    function MoePlan(problem::MoeProblem)
        _require(:moegemm_moe_plan_create)
        out = Ref{moegemm_moe_plan_t}(C_NULL)
        @check moegemm_moe_plan_create(problem, out)
        return _destroy_on_gc!(new(out[]), moegemm_moe_plan_destroy)
    end
end

Base.close(plan::MoePlan) = _close!(plan, moegemm_moe_plan_destroy)

Base.unsafe_convert(::Type{moegemm_moe_plan_t}, plan::MoePlan) =
    plan.handle == C_NULL ? throw(ArgumentError("the layer plan was closed")) : plan.handle

"""Bytes of device workspace `execute!(::MoePlan, ...)` needs (fixed for the plan's life)."""
workspace_size(plan::MoePlan) =
    Int(_get_out(moegemm_moe_plan_get_workspace_size, plan, Csize_t(0)))

"""One line on the layer's kernels."""
describe(plan::MoePlan) = _describe(moegemm_moe_plan_describe, plan)

"""Device address of the layer's status word (`MOEGEMM_ROWS_CLAMPED_INDEX`, `MOEGEMM_SIZES_CLAMPED_*`)."""
status_word(plan::MoePlan) =
    _get_out(moegemm_moe_plan_get_status_word, plan, Ptr{UInt32}(C_NULL))

"""
    execute!(plan::MoePlan, x, topk_ids, topk_weights, w1, w2, out,
             workspace = nothing, workspace_bytes = 0; num_tokens = nothing,
             num_tokens_device = nothing, b1 = nothing, b2 = nothing, alpha1 = nothing,
             alpha2 = nothing, w1_scale = nothing, w2_scale = nothing, stream = C_NULL) -> out

Enqueues the layer (`moegemm_moe_execute`): row-major x `[T, H]`, topk_ids `[T, top_k]`
(the problem's id_type), topk_weights `[T, top_k]` Float32, w1 `[E_local, 2I or I, H]`, w2
`[E_local, H, I]`, out `[T, H]` — device pointers. `num_tokens` is T on the host (required
unless `num_tokens_device`, an Int32 device pointer read at every execution, is given).
With the problem's `weight_scales` BLOCK, w1 and w2 are E4M3 and `w1_scale` (Float32
`[E_local, cld(2I or I, 128), cld(H, 128)]`) and `w2_scale` (Float32 `[E_local, cld(H, 128),
cld(I, 128)]`) are required.
"""
function execute!(plan::MoePlan, x, topk_ids, topk_weights, w1, w2, out,
                  workspace = nothing, workspace_bytes::Integer = 0; kwargs...)
    return _moe_submit(moegemm_moe_execute, plan, x, topk_ids, topk_weights, w1, w2, out,
                       workspace, workspace_bytes; kwargs...)
end

"""
    autotune!(plan::MoePlan, x, topk_ids, topk_weights, w1, w2, out,
              workspace = nothing, workspace_bytes = 0; num_tokens, ..., stream = C_NULL) -> out

`moegemm_moe_plan_autotune` (since 0.2): runs the layer once on these tensors (`execute!`'s
arguments and rules) with its two grouped GEMMs tuned in turn, as `autotune!(::Plan, ...)`
tunes a plan: FC1 on the tokens this call routes to each expert, then FC2 on FC1's product.
Tune with routing typical of the workload (the timing uses this call's expert sizes). The
chosen kernels stay the layer's (`describe(plan)` then says "tuned:" for FC1 and for FC2) and
become the process's choice for layers of the same shapes, written to the tune cache file if
one is named ([`set_tune_cache_file`](@ref)). Blocking: the call waits for `stream`, and `out`
then holds the layer's output. Throws `MoEGemmError` with `MOEGEMM_STATUS_INVALID_STATE` when
`stream` is being captured into a CUDA graph (tune before capturing).
"""
function autotune!(plan::MoePlan, x, topk_ids, topk_weights, w1, w2, out,
                   workspace = nothing, workspace_bytes::Integer = 0; kwargs...)
    _require(:moegemm_moe_plan_autotune)
    return _moe_submit(moegemm_moe_plan_autotune, plan, x, topk_ids, topk_weights, w1, w2, out,
                       workspace, workspace_bytes; kwargs...)
end

# What `execute!` and `autotune!` of a `MoePlan` share: fills a `MoeTensors` and calls
# `submit`, `moegemm_moe_execute` or `moegemm_moe_plan_autotune` (the same arguments).
function _moe_submit(submit, plan::MoePlan, x, topk_ids, topk_weights, w1, w2, out,
                     workspace, workspace_bytes::Integer; num_tokens = nothing,
                     num_tokens_device = nothing, b1 = nothing, b2 = nothing, alpha1 = nothing,
                     alpha2 = nothing, w1_scale = nothing, w2_scale = nothing, stream = C_NULL)
    (num_tokens === nothing) == (num_tokens_device === nothing) &&
        throw(ArgumentError("pass exactly one of num_tokens (host) and num_tokens_device"))
    t = moe_tensors_init()
    t.x = _ptr(x)
    t.topk_ids = _ptr(topk_ids)
    t.topk_weights = Ptr{Cfloat}(_ptr(topk_weights))
    t.w1 = _ptr(w1)
    t.w2 = _ptr(w2)
    t.b1 = _ptr(b1)
    t.b2 = _ptr(b2)
    t.alpha1 = Ptr{Cfloat}(_ptr(alpha1))
    t.alpha2 = Ptr{Cfloat}(_ptr(alpha2))
    t.w1_scale = Ptr{Cfloat}(_ptr(w1_scale))
    t.w2_scale = Ptr{Cfloat}(_ptr(w2_scale))
    t.out = _ptr(out)
    if num_tokens_device === nothing
        t.num_tokens = Int64(num_tokens)
    else
        t.num_tokens_device = Ptr{Int32}(_ptr(num_tokens_device))
    end
    @check submit(plan, t, _ptr(workspace), Csize_t(workspace_bytes), _stream(stream))
    return out
end

"""Runtime version, `major*10000 + minor*100 + patch`."""
version() = Int(moegemm_get_version())

"""Runtime version as `v"MAJOR.MINOR.PATCH"`."""
version_string() = _str(moegemm_get_version_string())

"""Kernel variants of this build (for `Plan(problem; force_kernel = name)`)."""
kernel_names() = [_str(moegemm_kernel_name(i)) for i in 0:moegemm_kernel_count()-1]

"""Routes log messages up to `level` (0..4) to MOEGEMM_LOG_FILE or stderr; 0 silences."""
set_log_level(level::Integer) = @check moegemm_set_log_callback(C_NULL, C_NULL, Cint(level))

end # module

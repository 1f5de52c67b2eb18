//! Safe Rust API over libmoegemm: grouped expert GEMMs for Mixture-of-Experts layers.
//!
//! For every expert `e`: `D_e[m, n] = sum_k A_e[m, k] * B_e[n, k]` (fp32 accumulation).
//!
//! ```no_run
//! use moegemm::{Layout, Plan, Problem};
//! # fn main() -> moegemm::Result<()> {
//! let problem = Problem::new().layout(Layout::Variable).num_experts(8).n(4096).k(4096).max_rows(16384);
//! let mut plan = Plan::new(&problem)?;
//! plan.set_expert_sizes_host(&[2048; 8])?;
//! let ws_bytes = plan.workspace_size()?;
//! println!("{}", plan.describe()?);
//! # let (a, b, d, ws) = (std::ptr::null(), std::ptr::null(), std::ptr::null_mut(), std::ptr::null_mut());
//! // a, b, d, ws: device pointers from your CUDA allocator (cudarc, cust, cudaMalloc...).
//! unsafe { plan.execute(a, b, d, ws, ws_bytes, std::ptr::null_mut())? };
//! # Ok(()) }
//! ```
//!
//! Device memory and streams are passed as raw pointers (`*const c_void`, `cudaStream_t` as
//! `*mut c_void`) so that this crate depends on no CUDA crate; the GPU work is asynchronous
//! on the given stream, exactly as with the C API.

use std::cell::Cell;
use std::ffi::{c_void, CStr, CString};
use std::fmt;
use std::marker::PhantomData;
use std::path::Path;
use std::ptr::NonNull;

pub use moegemm_sys as sys;

// ------------------------------------------------------------------------------------------
// Errors
// ------------------------------------------------------------------------------------------

/// Which `moegemm_status_t` a call failed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    InvalidValue,
    NotSupported,
    NoDevice,
    ArchMismatch,
    Misaligned,
    WorkspaceTooSmall,
    InvalidState,
    AllocFailed,
    CudaError,
    CublasError,
    InternalError,
    /// A status this version of the crate does not know.
    Unknown(i32),
}

impl ErrorKind {
    /// Maps a non-success status code.
    pub fn from_status(status: sys::moegemm_status_t) -> ErrorKind {
        use ErrorKind::*;
        match status {
            sys::MOEGEMM_STATUS_INVALID_VALUE => InvalidValue,
            sys::MOEGEMM_STATUS_NOT_SUPPORTED => NotSupported,
            sys::MOEGEMM_STATUS_NO_DEVICE => NoDevice,
            sys::MOEGEMM_STATUS_ARCH_MISMATCH => ArchMismatch,
            sys::MOEGEMM_STATUS_MISALIGNED => Misaligned,
            sys::MOEGEMM_STATUS_WORKSPACE_TOO_SMALL => WorkspaceTooSmall,
            sys::MOEGEMM_STATUS_INVALID_STATE => InvalidState,
            sys::MOEGEMM_STATUS_ALLOC_FAILED => AllocFailed,
            sys::MOEGEMM_STATUS_CUDA_ERROR => CudaError,
            sys::MOEGEMM_STATUS_CUBLAS_ERROR => CublasError,
            sys::MOEGEMM_STATUS_INTERNAL_ERROR => InternalError,
            other => Unknown(other),
        }
    }

    /// The status code (`moegemm_status_t`).
    pub fn status(self) -> sys::moegemm_status_t {
        use ErrorKind::*;
        match self {
            InvalidValue => sys::MOEGEMM_STATUS_INVALID_VALUE,
            NotSupported => sys::MOEGEMM_STATUS_NOT_SUPPORTED,
            NoDevice => sys::MOEGEMM_STATUS_NO_DEVICE,
            ArchMismatch => sys::MOEGEMM_STATUS_ARCH_MISMATCH,
            Misaligned => sys::MOEGEMM_STATUS_MISALIGNED,
            WorkspaceTooSmall => sys::MOEGEMM_STATUS_WORKSPACE_TOO_SMALL,
            InvalidState => sys::MOEGEMM_STATUS_INVALID_STATE,
            AllocFailed => sys::MOEGEMM_STATUS_ALLOC_FAILED,
            CudaError => sys::MOEGEMM_STATUS_CUDA_ERROR,
            CublasError => sys::MOEGEMM_STATUS_CUBLAS_ERROR,
            InternalError => sys::MOEGEMM_STATUS_INTERNAL_ERROR,
            Unknown(s) => s,
        }
    }
}

/// A failed libmoegemm call: the status, its enumerator name and the library's message
/// (`moegemm_get_last_error_message`, captured right after the failing call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    name: String,
    message: String,
}

impl Error {
    /// Builds the error for `status`, reading the calling thread's last-error message.
    fn from_last(status: sys::moegemm_status_t) -> Error {
        let message = unsafe { cstr(sys::moegemm_get_last_error_message()) };
        Error::new(ErrorKind::from_status(status), message)
    }

    /// An error raised by this crate itself (checks the C API cannot make on a slice).
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        let name = unsafe { cstr(sys::moegemm_status_name(kind.status())) };
        Error { kind, name, message: message.into() }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
    /// The numeric `moegemm_status_t`.
    pub fn status(&self) -> i32 {
        self.kind.status()
    }
    /// The enumerator's name, e.g. `"MOEGEMM_STATUS_INVALID_VALUE"`.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The library's detail message naming the argument and the rule it broke.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{} ({})", self.name, self.status())
        } else {
            write!(f, "{} ({}): {}", self.name, self.status(), self.message)
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

fn check(status: sys::moegemm_status_t) -> Result<()> {
    if status == sys::MOEGEMM_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(Error::from_last(status))
    }
}

/// Copies a C string owned by the library ("" for NULL).
unsafe fn cstr(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

// ------------------------------------------------------------------------------------------
// Plumbing shared by the problem, tensors and plan types
// ------------------------------------------------------------------------------------------

/// A C struct filled with the library's defaults by its `moegemm_*_init_sized` function
/// (`name`). The sized form: a later library with a larger struct writes only this crate's
/// size.
///
/// # Safety
/// `init` must be the init function of `T`, a C struct of plain data (all-zero bytes valid).
unsafe fn init_sized<T>(
    init: unsafe extern "C" fn(*mut T, usize) -> sys::moegemm_status_t,
    name: &str,
) -> T {
    let mut raw = std::mem::MaybeUninit::<T>::zeroed();
    let st = init(raw.as_mut_ptr(), std::mem::size_of::<T>());
    assert_eq!(st, sys::MOEGEMM_STATUS_SUCCESS, "{name} failed");
    raw.assume_init()
}

/// The value a C getter writes through its out-parameter: `get` is called with a pointer to
/// `init` and returns the call's status.
fn get_out<T>(init: T, get: impl FnOnce(*mut T) -> sys::moegemm_status_t) -> Result<T> {
    let mut value = init;
    check(get(&mut value))?;
    Ok(value)
}

/// The string a `moegemm_*_describe` function writes: `describe` is called with a buffer of
/// `MOEGEMM_DESCRIBE_MAX` bytes and its length.
fn read_describe(
    describe: impl FnOnce(*mut std::os::raw::c_char, usize) -> sys::moegemm_status_t,
) -> Result<String> {
    let mut buf = vec![0u8; sys::MOEGEMM_DESCRIBE_MAX];
    check(describe(buf.as_mut_ptr().cast(), buf.len()))?;
    let end = buf.iter().position(|&c| c == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// An opaque C plan type and the function that destroys it.
trait Destroy {
    /// `moegemm_*_destroy`.
    unsafe fn destroy(raw: *mut Self) -> sys::moegemm_status_t;
}

impl Destroy for sys::moegemm_plan_s {
    unsafe fn destroy(raw: *mut Self) -> sys::moegemm_status_t {
        sys::moegemm_plan_destroy(raw)
    }
}

impl Destroy for sys::moegemm_moe_plan_s {
    unsafe fn destroy(raw: *mut Self) -> sys::moegemm_status_t {
        sys::moegemm_moe_plan_destroy(raw)
    }
}

/// An owned, non-null C plan handle, destroyed on drop: the handle of [`Plan`] and
/// [`MoePlan`]. `Send` but not `Sync` (see [`Plan`]).
struct Handle<S: Destroy> {
    raw: NonNull<S>,
    _not_sync: PhantomData<Cell<()>>,
}

// SAFETY: the C plans are not tied to a thread ("distinct plans are independent ... may be
// created, used and destroyed from different threads"); `Handle` is not Sync.
unsafe impl<S: Destroy> Send for Handle<S> {}

impl<S: Destroy> Handle<S> {
    /// Checks the loaded library's version, then takes ownership of the handle that `create`
    /// (the C function `name`) writes through its argument.
    fn create(name: &str, create: impl FnOnce(*mut *mut S) -> sys::moegemm_status_t) -> Result<Self> {
        check_library_version()?;
        let mut out: *mut S = std::ptr::null_mut();
        check(create(&mut out))?;
        let raw = NonNull::new(out)
            .ok_or_else(|| Error::new(ErrorKind::InternalError, format!("{name} succeeded but returned NULL")))?;
        Ok(Handle { raw, _not_sync: PhantomData })
    }

    fn as_ptr(&self) -> *mut S {
        self.raw.as_ptr()
    }
}

impl<S: Destroy> Drop for Handle<S> {
    fn drop(&mut self) {
        // Cannot fail for a live plan; nothing useful to do with an error in drop.
        let _ = unsafe { S::destroy(self.raw.as_ptr()) };
    }
}

impl<S: Destroy> fmt::Debug for Handle<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.raw, f)
    }
}

// ------------------------------------------------------------------------------------------
// Enums
// ------------------------------------------------------------------------------------------

macro_rules! c_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $c:path),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(i32)]
        pub enum $name { $($(#[$vm])* $v = $c),+ }
        impl $name {
            /// From the C value; `None` when out of range.
            pub fn from_raw(v: i32) -> Option<$name> {
                match v { $(x if x == $c => Some($name::$v),)+ _ => None }
            }
            pub fn raw(self) -> i32 { self as i32 }
        }
    };
}

c_enum!(
    /// How the rows of A and D are grouped by expert (see the header's "Layouts").
    Layout { Variable = sys::MOEGEMM_LAYOUT_VARIABLE, Masked = sys::MOEGEMM_LAYOUT_MASKED, Fixed = sys::MOEGEMM_LAYOUT_FIXED }
);
c_enum!(
    /// Element types.
    DType {
        BF16 = sys::MOEGEMM_DTYPE_BF16,
        F16 = sys::MOEGEMM_DTYPE_F16,
        /// Output only.
        F32 = sys::MOEGEMM_DTYPE_F32,
        /// fp8 e4m3, inputs only, with a scale mode; `[E, N, K]` weights. Every scale mode
        /// on sm_90 (native kernels); per-tensor elsewhere (cuBLASLt, compute capability 8.9+).
        E4M3 = sys::MOEGEMM_DTYPE_E4M3,
    }
);
c_enum!(
    /// Layout of the weights B.
    WeightLayout {
        /// B is [E, N, K] (nn.Linear weight). Default.
        NK = sys::MOEGEMM_WEIGHTS_NK,
        /// B is [E, K, N].
        KN = sys::MOEGEMM_WEIGHTS_KN,
    }
);
c_enum!(
    /// How fp8 inputs are scaled; `None` for 16-bit inputs.
    ScaleMode {
        None = sys::MOEGEMM_SCALE_NONE,
        PerTensor = sys::MOEGEMM_SCALE_PER_TENSOR,
        PerExpert = sys::MOEGEMM_SCALE_PER_EXPERT,
        Rowwise = sys::MOEGEMM_SCALE_ROWWISE,
        Block = sys::MOEGEMM_SCALE_BLOCK,
    }
);
c_enum!(
    /// Which implementation family may serve the plan.
    Backend { Auto = sys::MOEGEMM_BACKEND_AUTO, Native = sys::MOEGEMM_BACKEND_NATIVE, CublasLt = sys::MOEGEMM_BACKEND_CUBLASLT }
);
c_enum!(
    /// Log levels for [`set_log_level`].
    LogLevel {
        Off = sys::MOEGEMM_LOG_OFF,
        Error = sys::MOEGEMM_LOG_ERROR,
        Warn = sys::MOEGEMM_LOG_WARN,
        Info = sys::MOEGEMM_LOG_INFO,
        Trace = sys::MOEGEMM_LOG_TRACE,
    }
);

c_enum!(
    /// The epilogue's activation (since 0.2). The gated ones combine a gate and an up column
    /// of the product into one output column, so D has N / 2 columns.
    Activation {
        None = sys::MOEGEMM_ACTIVATION_NONE,
        /// `x * sigmoid(x)`
        Silu = sys::MOEGEMM_ACTIVATION_SILU,
        /// `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`
        GeluTanh = sys::MOEGEMM_ACTIVATION_GELU_TANH,
        /// gated: `silu(g) * u`
        Swiglu = sys::MOEGEMM_ACTIVATION_SWIGLU,
        /// gated: `gelu_tanh(g) * u`
        Geglu = sys::MOEGEMM_ACTIVATION_GEGLU,
        /// gated, gpt-oss's clamped SwiGLU; needs [`Problem::activation_params`].
        SwigluClamped = sys::MOEGEMM_ACTIVATION_SWIGLU_CLAMPED,
    }
);
c_enum!(
    /// Where a gated activation finds its gate and up columns (since 0.2).
    GateLayout {
        /// Columns `[0, N/2)` gate, `[N/2, N)` up. Default.
        GateUp = sys::MOEGEMM_GATE_UP_HALVES,
        /// Columns `[0, N/2)` up, `[N/2, N)` gate.
        UpGate = sys::MOEGEMM_UP_GATE_HALVES,
        /// Even columns gate, odd columns up (gpt-oss).
        Interleaved = sys::MOEGEMM_GATE_UP_INTERLEAVED,
    }
);
c_enum!(
    /// Element type of routing ids (since 0.2).
    IndexType { I32 = sys::MOEGEMM_INDEX_INT32, I64 = sys::MOEGEMM_INDEX_INT64 }
);

impl Activation {
    /// Whether the activation is gated (halves the product's columns).
    pub fn is_gated(self) -> bool {
        matches!(self, Activation::Swiglu | Activation::Geglu | Activation::SwigluClamped)
    }
}

/// Bits of the device status word ([`Plan::status_word`]).
pub const SIZES_CLAMPED_NEGATIVE: u32 = sys::MOEGEMM_SIZES_CLAMPED_NEGATIVE;
pub const SIZES_CLAMPED_CAPACITY: u32 = sys::MOEGEMM_SIZES_CLAMPED_CAPACITY;
/// A gather index or routing id was out of range (since 0.2).
pub const ROWS_CLAMPED_INDEX: u32 = sys::MOEGEMM_ROWS_CLAMPED_INDEX;
pub const MAX_EXPERTS: i32 = sys::MOEGEMM_MAX_EXPERTS;

/// Bits of [`Problem::epilogue_inputs`] and of the layer's fc1/fc2 inputs (since 0.2): the
/// per-call arrays each execution passes.
pub const EPILOGUE_ALPHA: u32 = sys::MOEGEMM_EPILOGUE_ALPHA;
pub const EPILOGUE_ROW_SCALE: u32 = sys::MOEGEMM_EPILOGUE_ROW_SCALE;
pub const EPILOGUE_BIAS: u32 = sys::MOEGEMM_EPILOGUE_BIAS;

// ------------------------------------------------------------------------------------------
// Problem
// ------------------------------------------------------------------------------------------

/// What to compute: a builder over `moegemm_problem_t`, starting from the library's defaults
/// (`moegemm_problem_init_sized`). Validation happens in [`Plan::new`].
#[derive(Debug, Clone)]
pub struct Problem {
    raw: sys::moegemm_problem_t,
    force_kernel: Option<CString>,
}

// SAFETY: the one pointer in `raw` (force_kernel) is never read from `raw`: it is NULL unless
// set through `raw_mut`, and `with_raw` replaces it by a pointer into the owned `CString`
// for the duration of one call. The rest is plain data, so a Problem may be built on one
// thread and used on another, or shared.
unsafe impl Send for Problem {}
unsafe impl Sync for Problem {}

impl Default for Problem {
    fn default() -> Self {
        Problem::new()
    }
}

impl Problem {
    /// The library's defaults (VARIABLE, bf16 in and out, NK weights, AUTO backend, device 0;
    /// num_experts, n, k and max_rows 0, which must be set).
    pub fn new() -> Problem {
        let raw = unsafe { init_sized(sys::moegemm_problem_init_sized, "moegemm_problem_init_sized") };
        Problem { raw, force_kernel: None }
    }

    pub fn layout(mut self, v: Layout) -> Self {
        self.raw.layout = v.raw();
        self
    }
    pub fn num_experts(mut self, v: i32) -> Self {
        self.raw.num_experts = v;
        self
    }
    pub fn n(mut self, v: i64) -> Self {
        self.raw.n = v;
        self
    }
    pub fn k(mut self, v: i64) -> Self {
        self.raw.k = v;
        self
    }
    pub fn max_rows(mut self, v: i64) -> Self {
        self.raw.max_rows = v;
        self
    }
    pub fn a_type(mut self, v: DType) -> Self {
        self.raw.a_type = v.raw();
        self
    }
    pub fn b_type(mut self, v: DType) -> Self {
        self.raw.b_type = v.raw();
        self
    }
    /// Sets both input types.
    pub fn input_type(self, v: DType) -> Self {
        self.a_type(v).b_type(v)
    }
    pub fn d_type(mut self, v: DType) -> Self {
        self.raw.d_type = v.raw();
        self
    }
    pub fn weight_layout(mut self, v: WeightLayout) -> Self {
        self.raw.weight_layout = v.raw();
        self
    }
    pub fn scale_mode(mut self, v: ScaleMode) -> Self {
        self.raw.scale_mode = v.raw();
        self
    }
    pub fn backend(mut self, v: Backend) -> Self {
        self.raw.backend = v.raw();
        self
    }
    pub fn device(mut self, v: i32) -> Self {
        self.raw.device = v;
        self
    }
    pub fn expected_rows(mut self, v: i64) -> Self {
        self.raw.expected_rows = v;
        self
    }
    /// The epilogue's activation (since 0.2; default `None`).
    pub fn activation(mut self, v: Activation) -> Self {
        self.raw.activation = v.raw();
        self
    }
    /// Gate and up columns of a gated activation (default `GateUp`).
    pub fn gate_layout(mut self, v: GateLayout) -> Self {
        self.raw.gate_layout = v.raw();
        self
    }
    /// `SwigluClamped`'s alpha and limit (gpt-oss: 1.702, 7.0).
    pub fn activation_params(mut self, alpha: f32, limit: f32) -> Self {
        self.raw.activation_alpha = alpha;
        self.raw.activation_limit = limit;
        self
    }
    /// OR of [`EPILOGUE_ALPHA`], [`EPILOGUE_ROW_SCALE`], [`EPILOGUE_BIAS`]: the arrays each
    /// [`Plan::execute_tensors`] passes (default 0).
    pub fn epilogue_inputs(mut self, bits: u32) -> Self {
        self.raw.epilogue_inputs = bits;
        self
    }
    /// Element type of the bias (BF16 default, F16 or F32).
    pub fn bias_type(mut self, v: DType) -> Self {
        self.raw.bias_type = v.raw();
        self
    }
    /// Gathered A: a token-major `[gather_rows, K]` matrix read through
    /// [`Tensors::a_rows`] (default 0: A dense in the plan's layout).
    pub fn gather_rows(mut self, v: i64) -> Self {
        self.raw.gather_rows = v;
        self
    }
    /// Forces a kernel variant by name (see [`kernel_names`]); `None` restores the heuristic.
    /// A name containing NUL is rejected by [`Plan::new`] with `InvalidValue`.
    pub fn force_kernel(mut self, name: Option<&str>) -> Self {
        self.force_kernel = name.map(|s| {
            CString::new(s).unwrap_or_else(|_| CString::new("<name contains NUL>").unwrap())
        });
        self
    }

    /// The underlying C struct (its `force_kernel` pointer is NULL; see [`Problem::with_raw`]).
    pub fn raw(&self) -> &sys::moegemm_problem_t {
        &self.raw
    }
    /// Mutable access to the C struct for fields this crate has no setter for.
    /// `force_kernel` set here is ignored: use [`Problem::force_kernel`].
    pub fn raw_mut(&mut self) -> &mut sys::moegemm_problem_t {
        &mut self.raw
    }

    /// Calls `f` with a C struct whose `force_kernel` points into `self`.
    pub fn with_raw<R>(&self, f: impl FnOnce(&sys::moegemm_problem_t) -> R) -> R {
        let mut raw = self.raw;
        raw.force_kernel = self.force_kernel.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
        f(&raw)
    }
}

// ------------------------------------------------------------------------------------------
// Plan
// ------------------------------------------------------------------------------------------

/// An owned `moegemm_plan_t`, destroyed on drop.
///
/// `Send` (a plan may move to another thread) but not `Sync`: the C API forbids modifying a
/// plan while another thread uses it, and [`Plan::execute`] on several streams at once needs
/// one workspace each, which a shared reference could not enforce.
///
/// ```compile_fail
/// fn needs_sync<T: Sync>() {}
/// needs_sync::<moegemm::Plan>();
/// ```
#[derive(Debug)]
pub struct Plan {
    raw: Handle<sys::moegemm_plan_s>,
    num_experts: usize,
}

impl Plan {
    /// Validates the problem, queries the device and picks a kernel (`moegemm_plan_create`).
    pub fn new(problem: &Problem) -> Result<Plan> {
        if let Some(s) = &problem.force_kernel {
            if s.as_bytes() == b"<name contains NUL>" {
                return Err(Error::new(ErrorKind::InvalidValue, "force_kernel contains a NUL byte"));
            }
        }
        let raw = Handle::create("moegemm_plan_create", |out| {
            problem.with_raw(|raw| unsafe { sys::moegemm_plan_create(raw, out) })
        })?;
        Ok(Plan { raw, num_experts: problem.raw.num_experts as usize })
    }

    /// The raw handle, still owned by `self`.
    pub fn as_raw(&self) -> sys::moegemm_plan_t {
        self.raw.as_ptr()
    }

    /// Sets the rows of each expert from host memory: one value per expert.
    pub fn set_expert_sizes_host(&mut self, sizes: &[i32]) -> Result<()> {
        if sizes.len() != self.num_experts {
            return Err(Error::new(
                ErrorKind::InvalidValue,
                format!("sizes has {} values; the plan has {} experts", sizes.len(), self.num_experts),
            ));
        }
        check(unsafe {
            sys::moegemm_plan_set_expert_sizes(self.as_raw(), sizes.as_ptr(), sys::MOEGEMM_MEMORY_HOST)
        })
    }

    /// Sets the rows of each expert from device memory, read by the GPU at every execution.
    ///
    /// # Safety
    /// `sizes` must be a device pointer to `num_experts` int32 values of the plan's device
    /// (4-byte aligned) that stays valid for every later [`Plan::execute`] of this plan.
    pub unsafe fn set_expert_sizes_device(&mut self, sizes: *const i32) -> Result<()> {
        check(sys::moegemm_plan_set_expert_sizes(self.as_raw(), sizes, sys::MOEGEMM_MEMORY_DEVICE))
    }

    /// Bytes of device workspace [`Plan::execute`] needs (fixed for the plan's life).
    pub fn workspace_size(&self) -> Result<usize> {
        get_out(0, |bytes| unsafe { sys::moegemm_plan_get_workspace_size(self.as_raw(), bytes) })
    }

    /// One line on what the heuristic chose (backend, kernel, tile, why).
    pub fn describe(&self) -> Result<String> {
        read_describe(|buf, len| unsafe { sys::moegemm_plan_describe(self.as_raw(), buf, len) })
    }

    /// Device address of the plan's 32-bit status word (`SIZES_CLAMPED_*` bits); read it with
    /// an async copy, clear it with `cudaMemsetAsync`.
    pub fn status_word(&self) -> Result<*mut u32> {
        get_out(std::ptr::null_mut(), |p| unsafe { sys::moegemm_plan_get_status_word(self.as_raw(), p) })
    }

    /// Enqueues `D = grouped(A x B)` on `stream` (a `cudaStream_t`; null = legacy default
    /// stream) and returns without waiting. 16-bit inputs (no scales).
    ///
    /// # Safety
    /// `a`, `b`, `d` and `workspace` must be device memory of the plan's device, sized for
    /// the plan's layout (see the header), 16-byte (workspace: 256-byte) aligned, and stay
    /// valid and untouched by others until the enqueued work finishes; `stream` must be a
    /// live stream of the plan's device or null. The plan must outlive the enqueued work.
    pub unsafe fn execute(
        &self,
        a: *const c_void,
        b: *const c_void,
        d: *mut c_void,
        workspace: *mut c_void,
        workspace_bytes: usize,
        stream: *mut c_void,
    ) -> Result<()> {
        self.execute_scaled(a, b, d, std::ptr::null(), std::ptr::null(), workspace, workspace_bytes, stream)
    }

    /// [`Plan::execute`] with fp8 scales (device pointers; null for 16-bit inputs).
    ///
    /// # Safety
    /// As [`Plan::execute`]; the scales must be device memory laid out as the plan's
    /// `ScaleMode` requires.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn execute_scaled(
        &self,
        a: *const c_void,
        b: *const c_void,
        d: *mut c_void,
        a_scale: *const f32,
        b_scale: *const f32,
        workspace: *mut c_void,
        workspace_bytes: usize,
        stream: *mut c_void,
    ) -> Result<()> {
        check(sys::moegemm_execute(
            self.as_raw(),
            a,
            b,
            d,
            a_scale,
            b_scale,
            workspace,
            workspace_bytes,
            stream.cast(),
        ))
    }
}

impl Plan {
    /// [`Plan::execute`] with the epilogue's per-call arrays and the gather's indices
    /// (`moegemm_execute_tensors`, since 0.2): the call for plans with epilogue inputs or
    /// `gather_rows`, which `execute` refuses.
    ///
    /// # Safety
    /// As [`Plan::execute`], for every pointer set in `tensors`: device memory of the plan's
    /// device, laid out and aligned as the header says (alpha fp32 `[E]`, row_scale fp32 per
    /// row of D, bias `[E, N]` of the bias type, a_rows int32 per row), valid until the work
    /// finishes.
    pub unsafe fn execute_tensors(
        &self,
        tensors: &Tensors,
        workspace: *mut c_void,
        workspace_bytes: usize,
        stream: *mut c_void,
    ) -> Result<()> {
        check(sys::moegemm_execute_tensors(self.as_raw(), &tensors.raw, workspace, workspace_bytes, stream.cast()))
    }

    /// Times every kernel that serves the plan's problem and current sizes (kernels of the
    /// other backend too, where the problem's backend is AUTO and `workspace_bytes` covers
    /// theirs: 32 MiB covers cuBLASLt's on sm_90) on the buffers of `tensors` and `workspace` (the arguments of [`Plan::execute_tensors`],
    /// under the same rules) and makes the fastest the plan's kernel
    /// (`moegemm_plan_autotune`, since 0.2): [`Plan::describe`] then says "tuned:". The
    /// choice is also the process's for plans of the same GPU, problem and size bucket
    /// created or given sizes later, and is written to the tune cache file if one is named
    /// ([`set_tune_cache_file`]).
    ///
    /// Blocking: each candidate runs a few dozen times on `stream` and the call waits for
    /// them (tens of milliseconds); D then holds the product as the chosen kernel computes
    /// it; the workspace size grows to the other backend's where one of its kernels was
    /// chosen (never beyond `workspace_bytes`). Sizes that are all 0 time nothing.
    /// `InvalidState` when the sizes were never set, when `stream` is being captured into a
    /// CUDA graph (tune before capturing) and when the problem forces a kernel; the plan then
    /// keeps its kernel.
    ///
    /// # Safety
    /// As [`Plan::execute_tensors`]; the work is finished when the call returns.
    pub unsafe fn autotune(
        &mut self,
        tensors: &Tensors,
        workspace: *mut c_void,
        workspace_bytes: usize,
        stream: *mut c_void,
    ) -> Result<()> {
        check(sys::moegemm_plan_autotune(self.as_raw(), &tensors.raw, workspace, workspace_bytes, stream.cast()))
    }
}

/// The tensors of one [`Plan::execute_tensors`] (`moegemm_tensors_t`, since 0.2): device
/// pointers, null unless set. A builder starting from `moegemm_tensors_init_sized`.
#[derive(Debug, Clone, Copy)]
pub struct Tensors {
    raw: sys::moegemm_tensors_t,
}

impl Default for Tensors {
    fn default() -> Self {
        Tensors::new()
    }
}

impl Tensors {
    /// Every pointer null, `struct_size` this crate's.
    pub fn new() -> Tensors {
        Tensors { raw: unsafe { init_sized(sys::moegemm_tensors_init_sized, "moegemm_tensors_init_sized") } }
    }
    /// A (with a gather: the token-major `[gather_rows, K]`).
    pub fn a(mut self, p: *const c_void) -> Self {
        self.raw.a = p;
        self
    }
    pub fn b(mut self, p: *const c_void) -> Self {
        self.raw.b = p;
        self
    }
    /// D: N columns, or N / 2 with a gated activation.
    pub fn d(mut self, p: *mut c_void) -> Self {
        self.raw.d = p;
        self
    }
    /// fp8 scales (E4M3 inputs).
    pub fn scales(mut self, a_scale: *const f32, b_scale: *const f32) -> Self {
        self.raw.a_scale = a_scale;
        self.raw.b_scale = b_scale;
        self
    }
    /// [`EPILOGUE_ALPHA`]: fp32 `[E]`.
    pub fn alpha(mut self, p: *const f32) -> Self {
        self.raw.alpha = p;
        self
    }
    /// [`EPILOGUE_ROW_SCALE`]: fp32, one per row of D.
    pub fn row_scale(mut self, p: *const f32) -> Self {
        self.raw.row_scale = p;
        self
    }
    /// [`EPILOGUE_BIAS`]: `[E, N]` of the problem's bias type.
    pub fn bias(mut self, p: *const c_void) -> Self {
        self.raw.bias = p;
        self
    }
    /// `gather_rows > 0`: int32 A-row index per row of the grouped problem.
    pub fn a_rows(mut self, p: *const i32) -> Self {
        self.raw.a_rows = p;
        self
    }
    pub fn raw(&self) -> &sys::moegemm_tensors_t {
        &self.raw
    }
    pub fn raw_mut(&mut self) -> &mut sys::moegemm_tensors_t {
        &mut self.raw
    }
}

// ------------------------------------------------------------------------------------------
// The MoE layer (since 0.2)
// ------------------------------------------------------------------------------------------

/// A Mixture-of-Experts layer's experts: a builder over `moegemm_moe_problem_t`, starting from
/// the library's defaults (`moegemm_moe_problem_init_sized`). Validation happens in
/// [`MoePlan::new`].
///
/// For every token t and choice j with e = topk_ids[t, j] among this rank's experts:
/// `h = act(x[t] . w1[e]^T (* alpha1[e], + b1[e]))`, `y = h . w2[e]^T (* alpha2[e], + b2[e])`,
/// `out[t] = sum_j topk_weights[t, j] * y` (fp32, in increasing j). With
/// [`MoeProblem::weight_scales`] `Block`, w1 and w2 are E4M3 with 128 x 128 block scales
/// ([`MoeTensors::weight_scales`]).
#[derive(Debug, Clone, Copy)]
pub struct MoeProblem {
    raw: sys::moegemm_moe_problem_t,
}

impl Default for MoeProblem {
    fn default() -> Self {
        MoeProblem::new()
    }
}

impl MoeProblem {
    /// The library's defaults (bf16, activation None, int32 ids, AUTO backend, device 0, all
    /// experts local); num_experts, top_k, hidden, intermediate and max_tokens must be set.
    pub fn new() -> MoeProblem {
        let raw = unsafe { init_sized(sys::moegemm_moe_problem_init_sized, "moegemm_moe_problem_init_sized") };
        MoeProblem { raw }
    }
    /// The model's experts: ids are in `[0, num_experts)`.
    pub fn num_experts(mut self, v: i32) -> Self {
        self.raw.num_experts = v;
        self
    }
    /// Expert parallelism: this rank holds experts `[first, first + local)` (local 0: all).
    pub fn local_experts(mut self, first: i32, local: i32) -> Self {
        self.raw.first_expert = first;
        self.raw.local_experts = local;
        self
    }
    pub fn top_k(mut self, v: i32) -> Self {
        self.raw.top_k = v;
        self
    }
    /// H: columns of x and out.
    pub fn hidden(mut self, v: i64) -> Self {
        self.raw.hidden = v;
        self
    }
    /// I: FC2's K; FC1 has 2I rows when gated.
    pub fn intermediate(mut self, v: i64) -> Self {
        self.raw.intermediate = v;
        self
    }
    /// Capacity: the token count of any execution.
    pub fn max_tokens(mut self, v: i64) -> Self {
        self.raw.max_tokens = v;
        self
    }
    /// x, w1, w2 (but see [`MoeProblem::weight_scales`]), b1, b2 and out: BF16 (default) or
    /// F16.
    pub fn dtype(mut self, v: DType) -> Self {
        self.raw.dtype = v.raw();
        self
    }
    pub fn activation(mut self, v: Activation) -> Self {
        self.raw.activation = v.raw();
        self
    }
    pub fn gate_layout(mut self, v: GateLayout) -> Self {
        self.raw.gate_layout = v.raw();
        self
    }
    /// `SwigluClamped`'s alpha and limit (gpt-oss: 1.702, 7.0).
    pub fn activation_params(mut self, alpha: f32, limit: f32) -> Self {
        self.raw.activation_alpha = alpha;
        self.raw.activation_limit = limit;
        self
    }
    /// OR of [`EPILOGUE_ALPHA`] and [`EPILOGUE_BIAS`] for FC1 (alpha1, b1) and FC2 (alpha2, b2).
    pub fn epilogue_inputs(mut self, fc1: u32, fc2: u32) -> Self {
        self.raw.fc1_inputs = fc1;
        self.raw.fc2_inputs = fc2;
        self
    }
    pub fn id_type(mut self, v: IndexType) -> Self {
        self.raw.id_type = v.raw();
        self
    }
    /// AUTO (default) or NATIVE: the layer needs sm_90.
    pub fn backend(mut self, v: Backend) -> Self {
        self.raw.backend = v.raw();
        self
    }
    pub fn device(mut self, v: i32) -> Self {
        self.raw.device = v;
        self
    }
    /// Typical tokens per execution (0: taken as max_tokens).
    pub fn expected_tokens(mut self, v: i64) -> Self {
        self.raw.expected_tokens = v;
        self
    }
    /// `None` (default): w1 and w2 are of the dtype. `Block`: w1 and w2 are E4M3 with
    /// DeepSeek-V3's 128 x 128 block scales ([`MoeTensors::weight_scales`]); both GEMMs run
    /// in fp8 (x and FC1's activated output quantized per 1 x 128 by the layer). Then the
    /// dtype must be BF16, hidden and intermediate multiples of 16, and the epilogue inputs 0.
    pub fn weight_scales(mut self, v: ScaleMode) -> Self {
        self.raw.weight_scales = v.raw();
        self
    }
    pub fn raw(&self) -> &sys::moegemm_moe_problem_t {
        &self.raw
    }
    pub fn raw_mut(&mut self) -> &mut sys::moegemm_moe_problem_t {
        &mut self.raw
    }
}

/// The tensors of one [`MoePlan::execute`] (`moegemm_moe_tensors_t`): device pointers, null
/// unless set, and the token count.
#[derive(Debug, Clone, Copy)]
pub struct MoeTensors {
    raw: sys::moegemm_moe_tensors_t,
}

impl Default for MoeTensors {
    fn default() -> Self {
        MoeTensors::new()
    }
}

impl MoeTensors {
    /// Every pointer null, num_tokens 0, `struct_size` this crate's.
    pub fn new() -> MoeTensors {
        let raw = unsafe { init_sized(sys::moegemm_moe_tensors_init_sized, "moegemm_moe_tensors_init_sized") };
        MoeTensors { raw }
    }
    /// x `[T, H]`.
    pub fn x(mut self, p: *const c_void) -> Self {
        self.raw.x = p;
        self
    }
    /// topk_ids `[T, top_k]` of the problem's id type, topk_weights `[T, top_k]` fp32.
    pub fn routing(mut self, topk_ids: *const c_void, topk_weights: *const f32) -> Self {
        self.raw.topk_ids = topk_ids;
        self.raw.topk_weights = topk_weights;
        self
    }
    /// w1 `[local_experts, 2I or I, H]`, w2 `[local_experts, H, I]` (E4M3 with weight_scales
    /// `Block`).
    pub fn weights(mut self, w1: *const c_void, w2: *const c_void) -> Self {
        self.raw.w1 = w1;
        self.raw.w2 = w2;
        self
    }
    /// fc1/fc2 BIAS: b1 `[local_experts, 2I or I]`, b2 `[local_experts, H]` (null when absent).
    pub fn biases(mut self, b1: *const c_void, b2: *const c_void) -> Self {
        self.raw.b1 = b1;
        self.raw.b2 = b2;
        self
    }
    /// fc1/fc2 ALPHA: fp32 `[local_experts]` each (null when absent).
    pub fn alphas(mut self, alpha1: *const f32, alpha2: *const f32) -> Self {
        self.raw.alpha1 = alpha1;
        self.raw.alpha2 = alpha2;
        self
    }
    /// weight_scales `Block`: w1_scale fp32 `[local_experts, ceil(2I or I / 128),
    /// ceil(H / 128)]`, w2_scale fp32 `[local_experts, ceil(H / 128), ceil(I / 128)]`
    /// (null otherwise).
    pub fn weight_scales(mut self, w1_scale: *const f32, w2_scale: *const f32) -> Self {
        self.raw.w1_scale = w1_scale;
        self.raw.w2_scale = w2_scale;
        self
    }
    /// out `[T, H]`.
    pub fn out(mut self, p: *mut c_void) -> Self {
        self.raw.out = p;
        self
    }
    /// T on the host, 0..=max_tokens (clears a device count).
    pub fn num_tokens(mut self, t: i64) -> Self {
        self.raw.num_tokens = t;
        self.raw.num_tokens_device = std::ptr::null();
        self
    }
    /// T in device memory (int32), read by the GPU at every execution and graph replay.
    pub fn num_tokens_device(mut self, p: *const i32) -> Self {
        self.raw.num_tokens_device = p;
        self
    }
    pub fn raw(&self) -> &sys::moegemm_moe_tensors_t {
        &self.raw
    }
    pub fn raw_mut(&mut self) -> &mut sys::moegemm_moe_tensors_t {
        &mut self.raw
    }
}

/// An owned `moegemm_moe_plan_t`, destroyed on drop. `Send`, not `Sync` (as [`Plan`]).
///
/// ```compile_fail
/// fn needs_sync<T: Sync>() {}
/// needs_sync::<moegemm::MoePlan>();
/// ```
#[derive(Debug)]
pub struct MoePlan {
    raw: Handle<sys::moegemm_moe_plan_s>,
}

impl MoePlan {
    /// Validates the layer, picks its kernels and sizes its workspace
    /// (`moegemm_moe_plan_create`).
    pub fn new(problem: &MoeProblem) -> Result<MoePlan> {
        let raw = Handle::create("moegemm_moe_plan_create", |out| unsafe {
            sys::moegemm_moe_plan_create(&problem.raw, out)
        })?;
        Ok(MoePlan { raw })
    }

    /// The raw handle, still owned by `self`.
    pub fn as_raw(&self) -> sys::moegemm_moe_plan_t {
        self.raw.as_ptr()
    }

    /// Bytes of device workspace [`MoePlan::execute`] needs (fixed for the plan's life).
    pub fn workspace_size(&self) -> Result<usize> {
        get_out(0, |bytes| unsafe { sys::moegemm_moe_plan_get_workspace_size(self.as_raw(), bytes) })
    }

    /// One line on the layer's kernels.
    pub fn describe(&self) -> Result<String> {
        read_describe(|buf, len| unsafe { sys::moegemm_moe_plan_describe(self.as_raw(), buf, len) })
    }

    /// Device address of the layer's status word ([`ROWS_CLAMPED_INDEX`] for out-of-range
    /// routing ids, `SIZES_CLAMPED_*` for a device token count out of range).
    pub fn status_word(&self) -> Result<*mut u32> {
        get_out(std::ptr::null_mut(), |p| unsafe { sys::moegemm_moe_plan_get_status_word(self.as_raw(), p) })
    }

    /// Enqueues the layer (routing, FC1 with its activation, FC2, the weighted combine) on
    /// `stream` and returns without waiting. Never allocates or synchronizes: with
    /// [`MoeTensors::num_tokens_device`] it can be captured in a CUDA graph once and replayed.
    ///
    /// # Safety
    /// Every pointer set in `tensors` and `workspace` must be device memory of the plan's
    /// device, sized and aligned as the header says, valid and untouched by others until the
    /// work finishes; `stream` a live stream of that device or null. The plan must outlive
    /// the enqueued work.
    pub unsafe fn execute(
        &self,
        tensors: &MoeTensors,
        workspace: *mut c_void,
        workspace_bytes: usize,
        stream: *mut c_void,
    ) -> Result<()> {
        self.submit(sys::moegemm_moe_execute, tensors, workspace, workspace_bytes, stream)
    }

    /// Runs the layer once on `tensors` (the arguments of [`MoePlan::execute`], under the same
    /// rules) with its two grouped GEMMs tuned in turn, as [`Plan::autotune`] tunes a plan
    /// (`moegemm_moe_plan_autotune`, since 0.2): FC1 on the tokens this call routes to each
    /// expert, then FC2 on FC1's product. Tune with routing typical of the workload: the
    /// timing uses this call's expert sizes. The chosen kernels stay the layer's
    /// ([`MoePlan::describe`] then says "tuned:" for FC1 and for FC2) and become the process's
    /// choice for layers of the same shapes, written to the tune cache file if one is named
    /// ([`set_tune_cache_file`]).
    ///
    /// Blocking: the call waits for `stream`, and `out` then holds the layer's output.
    /// `InvalidState` when `stream` is being captured into a CUDA graph (tune before
    /// capturing); the layer then keeps its kernels.
    ///
    /// # Safety
    /// As [`MoePlan::execute`]; the work is finished when the call returns.
    pub unsafe fn autotune(
        &mut self,
        tensors: &MoeTensors,
        workspace: *mut c_void,
        workspace_bytes: usize,
        stream: *mut c_void,
    ) -> Result<()> {
        self.submit(sys::moegemm_moe_plan_autotune, tensors, workspace, workspace_bytes, stream)
    }

    /// What `execute` and `autotune` share: calls `function` (`moegemm_moe_execute` or
    /// `moegemm_moe_plan_autotune`, which take the same arguments) on this plan.
    unsafe fn submit(
        &self,
        function: MoeSubmitFn,
        tensors: &MoeTensors,
        workspace: *mut c_void,
        workspace_bytes: usize,
        stream: *mut c_void,
    ) -> Result<()> {
        check(function(self.as_raw(), &tensors.raw, workspace, workspace_bytes, stream.cast()))
    }
}

/// The C signature shared by `moegemm_moe_execute` and `moegemm_moe_plan_autotune`.
type MoeSubmitFn = unsafe extern "C" fn(
    sys::moegemm_moe_plan_t,
    *const sys::moegemm_moe_tensors_t,
    *mut c_void,
    usize,
    sys::cudaStream_t,
) -> sys::moegemm_status_t;

// ------------------------------------------------------------------------------------------
// Library-wide functions
// ------------------------------------------------------------------------------------------

/// Runtime version, `major*10000 + minor*100 + patch`.
/// `Err(NotSupported)` when the libmoegemm loaded at run time has another major version than
/// the header this crate mirrors (versions of one major version are ABI compatible).
pub fn check_library_version() -> Result<()> {
    let loaded = version();
    if loaded / 10000 == sys::MOEGEMM_VERSION_MAJOR {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::NotSupported,
        format!(
            "libmoegemm {} was loaded; this crate is built against {}.{}.{} (major versions differ)",
            version_string(),
            sys::MOEGEMM_VERSION_MAJOR,
            sys::MOEGEMM_VERSION_MINOR,
            sys::MOEGEMM_VERSION_PATCH
        ),
    ))
}

pub fn version() -> i32 {
    unsafe { sys::moegemm_get_version() }
}

/// Runtime version as `"MAJOR.MINOR.PATCH"`.
pub fn version_string() -> String {
    unsafe { cstr(sys::moegemm_get_version_string()) }
}

/// The kernel variants of this build, valid for [`Problem::force_kernel`].
pub fn kernel_names() -> Vec<String> {
    let n = unsafe { sys::moegemm_kernel_count() };
    (0..n).map(|i| unsafe { cstr(sys::moegemm_kernel_name(i)) }).collect()
}

/// Static text for a status ("invalid value", ...).
pub fn status_string(status: i32) -> String {
    unsafe { cstr(sys::moegemm_status_string(status)) }
}

/// Names the file that keeps [`Plan::autotune`]'s results across processes, and adds the
/// results it holds to the process's (plans created from now on use them); `None` names none
/// (`moegemm_set_tune_cache_file`, since 0.2). Needs no GPU. A missing, unreadable, stale or
/// corrupt file is no error: the library logs a warning and ignores it, and the next autotune
/// writes a fresh one (through a temporary file and a rename). A path containing a NUL byte
/// is refused with `InvalidValue`.
pub fn set_tune_cache_file(path: Option<&Path>) -> Result<()> {
    let path = match path {
        None => None,
        Some(p) => Some(path_cstring(p)?),
    };
    check(unsafe { sys::moegemm_set_tune_cache_file(path.as_ref().map_or(std::ptr::null(), |p| p.as_ptr())) })
}

/// A path as the C string the library opens (its bytes, on Unix).
fn path_cstring(path: &Path) -> Result<CString> {
    #[cfg(unix)]
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()).to_vec();
    #[cfg(not(unix))]
    let bytes = path
        .to_str()
        .ok_or_else(|| Error::new(ErrorKind::InvalidValue, format!("path {} is not UTF-8", path.display())))?
        .as_bytes()
        .to_vec();
    CString::new(bytes)
        .map_err(|_| Error::new(ErrorKind::InvalidValue, format!("path {} contains a NUL byte", path.display())))
}

/// Sends messages up to `level` to the environment's destination (`MOEGEMM_LOG_FILE` or
/// stderr); `LogLevel::Off` silences the library. For a callback use
/// `sys::moegemm_set_log_callback` directly.
pub fn set_log_level(level: LogLevel) -> Result<()> {
    check(unsafe { sys::moegemm_set_log_callback(None, std::ptr::null_mut(), level.raw()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>() {}

    #[test]
    fn the_loaded_library_has_this_crates_major_version() {
        assert!(check_library_version().is_ok());
    }

    #[test]
    fn plan_is_send() {
        assert_send::<Plan>();
    }

    #[test]
    fn problem_is_send_and_sync() {
        fn assert_sync<T: Sync>() {}
        assert_send::<Problem>();
        assert_sync::<Problem>();
        // and moves into another thread with its forced kernel name
        let p = Problem::new().num_experts(4).force_kernel(Some("cublaslt_expert_loop"));
        let name = std::thread::spawn(move || p.with_raw(|raw| unsafe {
            std::ffi::CStr::from_ptr(raw.force_kernel).to_str().unwrap().to_owned()
        }))
        .join()
        .unwrap();
        assert_eq!(name, "cublaslt_expert_loop");
    }

    #[test]
    fn layer_types_are_send() {
        assert_send::<MoePlan>();
        assert_send::<MoeProblem>();
        fn assert_sync<T: Sync>() {}
        assert_sync::<MoeProblem>();
    }

    #[test]
    fn gated_activations() {
        let gated: Vec<_> = [Activation::None, Activation::Silu, Activation::GeluTanh, Activation::Swiglu,
                             Activation::Geglu, Activation::SwigluClamped]
            .iter()
            .filter(|a| a.is_gated())
            .map(|a| a.raw())
            .collect();
        assert_eq!(gated, vec![3, 4, 5]);
        assert_eq!(Activation::from_raw(5), Some(Activation::SwigluClamped));
        assert_eq!(GateLayout::from_raw(2), Some(GateLayout::Interleaved));
        assert_eq!(IndexType::from_raw(1), Some(IndexType::I64));
        assert_eq!(Activation::from_raw(6), None);
    }

    #[test]
    fn error_kinds_round_trip() {
        for s in 1..=11 {
            let k = ErrorKind::from_status(s);
            assert!(!matches!(k, ErrorKind::Unknown(_)), "status {s}");
            assert_eq!(k.status(), s);
        }
        assert_eq!(ErrorKind::from_status(99), ErrorKind::Unknown(99));
    }
}

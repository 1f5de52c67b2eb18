//! Raw FFI declarations for libmoegemm, mirroring `include/moegemm/moegemm.h` exactly.
//!
//! Everything here is `unsafe` to call and follows the C contract documented in the header.
//! Use the `moegemm` crate for a safe API. `tests/header_sync.rs` parses the header and fails
//! when a function, a parameter count or a constant value drifts from these declarations.
#![allow(non_camel_case_types)]
#![no_std]

use core::ffi::{c_char, c_int, c_void};

// ------------------------------------------------------------------------------------------
// Status codes (values pinned by the header; never renumbered)
// ------------------------------------------------------------------------------------------

/// `moegemm_status_t`.
pub type moegemm_status_t = c_int;
pub const MOEGEMM_STATUS_SUCCESS: moegemm_status_t = 0;
pub const MOEGEMM_STATUS_INVALID_VALUE: moegemm_status_t = 1;
pub const MOEGEMM_STATUS_NOT_SUPPORTED: moegemm_status_t = 2;
pub const MOEGEMM_STATUS_NO_DEVICE: moegemm_status_t = 3;
pub const MOEGEMM_STATUS_ARCH_MISMATCH: moegemm_status_t = 4;
pub const MOEGEMM_STATUS_MISALIGNED: moegemm_status_t = 5;
pub const MOEGEMM_STATUS_WORKSPACE_TOO_SMALL: moegemm_status_t = 6;
pub const MOEGEMM_STATUS_INVALID_STATE: moegemm_status_t = 7;
pub const MOEGEMM_STATUS_ALLOC_FAILED: moegemm_status_t = 8;
pub const MOEGEMM_STATUS_CUDA_ERROR: moegemm_status_t = 9;
pub const MOEGEMM_STATUS_CUBLAS_ERROR: moegemm_status_t = 10;
pub const MOEGEMM_STATUS_INTERNAL_ERROR: moegemm_status_t = 11;

// ------------------------------------------------------------------------------------------
// Problem description enums
// ------------------------------------------------------------------------------------------

/// `moegemm_layout_t`.
pub type moegemm_layout_t = c_int;
pub const MOEGEMM_LAYOUT_VARIABLE: moegemm_layout_t = 0;
pub const MOEGEMM_LAYOUT_MASKED: moegemm_layout_t = 1;
pub const MOEGEMM_LAYOUT_FIXED: moegemm_layout_t = 2;

/// `moegemm_dtype_t`.
pub type moegemm_dtype_t = c_int;
pub const MOEGEMM_DTYPE_BF16: moegemm_dtype_t = 0;
pub const MOEGEMM_DTYPE_F16: moegemm_dtype_t = 1;
pub const MOEGEMM_DTYPE_F32: moegemm_dtype_t = 2;
pub const MOEGEMM_DTYPE_E4M3: moegemm_dtype_t = 3;

/// `moegemm_weight_layout_t`.
pub type moegemm_weight_layout_t = c_int;
pub const MOEGEMM_WEIGHTS_NK: moegemm_weight_layout_t = 0;
pub const MOEGEMM_WEIGHTS_KN: moegemm_weight_layout_t = 1;

/// `moegemm_scale_mode_t`.
pub type moegemm_scale_mode_t = c_int;
pub const MOEGEMM_SCALE_NONE: moegemm_scale_mode_t = 0;
pub const MOEGEMM_SCALE_PER_TENSOR: moegemm_scale_mode_t = 1;
pub const MOEGEMM_SCALE_PER_EXPERT: moegemm_scale_mode_t = 2;
pub const MOEGEMM_SCALE_ROWWISE: moegemm_scale_mode_t = 3;
pub const MOEGEMM_SCALE_BLOCK: moegemm_scale_mode_t = 4;

/// `moegemm_backend_t`.
pub type moegemm_backend_t = c_int;
pub const MOEGEMM_BACKEND_AUTO: moegemm_backend_t = 0;
pub const MOEGEMM_BACKEND_NATIVE: moegemm_backend_t = 1;
pub const MOEGEMM_BACKEND_CUBLASLT: moegemm_backend_t = 2;

/// `moegemm_memory_t`.
pub type moegemm_memory_t = c_int;
pub const MOEGEMM_MEMORY_HOST: moegemm_memory_t = 0;
pub const MOEGEMM_MEMORY_DEVICE: moegemm_memory_t = 1;

/// `moegemm_log_level_t`.
pub type moegemm_log_level_t = c_int;
pub const MOEGEMM_LOG_OFF: moegemm_log_level_t = 0;
pub const MOEGEMM_LOG_ERROR: moegemm_log_level_t = 1;
pub const MOEGEMM_LOG_WARN: moegemm_log_level_t = 2;
pub const MOEGEMM_LOG_INFO: moegemm_log_level_t = 3;
pub const MOEGEMM_LOG_TRACE: moegemm_log_level_t = 4;

/// `moegemm_activation_t` (since 0.2): the epilogue's activation; the gated ones (SWIGLU,
/// GEGLU, SWIGLU_CLAMPED) combine a gate and an up column into one output column.
pub type moegemm_activation_t = c_int;
pub const MOEGEMM_ACTIVATION_NONE: moegemm_activation_t = 0;
pub const MOEGEMM_ACTIVATION_SILU: moegemm_activation_t = 1;
pub const MOEGEMM_ACTIVATION_GELU_TANH: moegemm_activation_t = 2;
pub const MOEGEMM_ACTIVATION_SWIGLU: moegemm_activation_t = 3;
pub const MOEGEMM_ACTIVATION_GEGLU: moegemm_activation_t = 4;
pub const MOEGEMM_ACTIVATION_SWIGLU_CLAMPED: moegemm_activation_t = 5;

/// `moegemm_gate_layout_t` (since 0.2): where a gated activation finds its gate and up columns.
pub type moegemm_gate_layout_t = c_int;
pub const MOEGEMM_GATE_UP_HALVES: moegemm_gate_layout_t = 0;
pub const MOEGEMM_UP_GATE_HALVES: moegemm_gate_layout_t = 1;
pub const MOEGEMM_GATE_UP_INTERLEAVED: moegemm_gate_layout_t = 2;

/// `moegemm_index_type_t` (since 0.2): element type of routing ids.
pub type moegemm_index_type_t = c_int;
pub const MOEGEMM_INDEX_INT32: moegemm_index_type_t = 0;
pub const MOEGEMM_INDEX_INT64: moegemm_index_type_t = 1;

// ------------------------------------------------------------------------------------------
// Macros
// ------------------------------------------------------------------------------------------

pub const MOEGEMM_MAX_EXPERTS: c_int = 1024;
pub const MOEGEMM_DESCRIBE_MAX: usize = 512;
/// Size of the first version of `moegemm_problem_t` (0.1): every library version accepts it.
pub const MOEGEMM_PROBLEM_SIZE_0_1: usize = 88;
/// Size of `moegemm_problem_t` in 0.2 (epilogue and gather fields): this crate's struct.
pub const MOEGEMM_PROBLEM_SIZE_0_2: usize = 120;
pub const MOEGEMM_SIZES_CLAMPED_NEGATIVE: u32 = 0x1;
pub const MOEGEMM_SIZES_CLAMPED_CAPACITY: u32 = 0x2;
/// A gather index or a routing id was out of range (row read as zeros, choice dropped).
pub const MOEGEMM_ROWS_CLAMPED_INDEX: u32 = 0x4;
/// Bits of `moegemm_problem_t::epilogue_inputs` (and of the layer's `fc1_inputs` /
/// `fc2_inputs`): the per-call arrays each execution passes.
pub const MOEGEMM_EPILOGUE_ALPHA: u32 = 0x1;
pub const MOEGEMM_EPILOGUE_ROW_SCALE: u32 = 0x2;
pub const MOEGEMM_EPILOGUE_BIAS: u32 = 0x4;

/// From `moegemm/version.h`: the version these declarations were written against.
pub const MOEGEMM_VERSION_MAJOR: c_int = 0;
pub const MOEGEMM_VERSION_MINOR: c_int = 2;
pub const MOEGEMM_VERSION_PATCH: c_int = 0;
pub const MOEGEMM_VERSION: c_int =
    MOEGEMM_VERSION_MAJOR * 10000 + MOEGEMM_VERSION_MINOR * 100 + MOEGEMM_VERSION_PATCH;

// ------------------------------------------------------------------------------------------
// Types
// ------------------------------------------------------------------------------------------

/// `moegemm_problem_t`. Always fill it with [`moegemm_problem_init_sized`] first.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct moegemm_problem_t {
    pub struct_size: usize,
    pub layout: moegemm_layout_t,
    pub num_experts: i32,
    pub n: i64,
    pub k: i64,
    pub max_rows: i64,
    pub a_type: moegemm_dtype_t,
    pub b_type: moegemm_dtype_t,
    pub d_type: moegemm_dtype_t,
    pub weight_layout: moegemm_weight_layout_t,
    pub scale_mode: moegemm_scale_mode_t,
    pub backend: moegemm_backend_t,
    pub device: i32,
    pub expected_rows: i64,
    pub force_kernel: *const c_char,
    // Since 0.2: every default is 0 (the 0.1 behaviour).
    pub epilogue_inputs: u32,
    pub bias_type: moegemm_dtype_t,
    pub activation: moegemm_activation_t,
    pub gate_layout: moegemm_gate_layout_t,
    pub activation_alpha: f32,
    pub activation_limit: f32,
    pub gather_rows: i64,
}

/// `moegemm_tensors_t` (since 0.2): the arguments of [`moegemm_execute_tensors`]. Fill it
/// with [`moegemm_tensors_init_sized`] first.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct moegemm_tensors_t {
    pub struct_size: usize,
    pub a: *const c_void,
    pub b: *const c_void,
    pub d: *mut c_void,
    pub a_scale: *const f32,
    pub b_scale: *const f32,
    pub alpha: *const f32,
    pub row_scale: *const f32,
    pub bias: *const c_void,
    pub a_rows: *const i32,
}

/// `moegemm_moe_problem_t` (since 0.2): a Mixture-of-Experts layer's experts. Fill it with
/// [`moegemm_moe_problem_init_sized`] first.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct moegemm_moe_problem_t {
    pub struct_size: usize,
    pub num_experts: i32,
    pub first_expert: i32,
    pub local_experts: i32,
    pub top_k: i32,
    pub hidden: i64,
    pub intermediate: i64,
    pub max_tokens: i64,
    pub dtype: moegemm_dtype_t,
    pub activation: moegemm_activation_t,
    pub gate_layout: moegemm_gate_layout_t,
    pub activation_alpha: f32,
    pub activation_limit: f32,
    pub fc1_inputs: u32,
    pub fc2_inputs: u32,
    pub id_type: moegemm_index_type_t,
    pub backend: moegemm_backend_t,
    pub device: i32,
    pub expected_tokens: i64,
    /// `MOEGEMM_SCALE_NONE` (w1, w2 of dtype) or `MOEGEMM_SCALE_BLOCK` (E4M3 w1, w2 with
    /// 128 x 128 block scales `w1_scale`, `w2_scale`).
    pub weight_scales: moegemm_scale_mode_t,
}

/// `moegemm_moe_tensors_t` (since 0.2): the arguments of [`moegemm_moe_execute`]. Fill it
/// with [`moegemm_moe_tensors_init_sized`] first.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct moegemm_moe_tensors_t {
    pub struct_size: usize,
    pub x: *const c_void,
    pub topk_ids: *const c_void,
    pub topk_weights: *const f32,
    pub w1: *const c_void,
    pub w2: *const c_void,
    pub b1: *const c_void,
    pub b2: *const c_void,
    pub alpha1: *const f32,
    pub alpha2: *const f32,
    pub out: *mut c_void,
    pub num_tokens: i64,
    pub num_tokens_device: *const i32,
    /// weight_scales BLOCK: fp32 `[local_experts, ceil(2I or I / 128), ceil(H / 128)]`.
    pub w1_scale: *const f32,
    /// weight_scales BLOCK: fp32 `[local_experts, ceil(H / 128), ceil(I / 128)]`.
    pub w2_scale: *const f32,
}

/// Opaque plan object (`struct moegemm_plan_s`).
#[repr(C)]
pub struct moegemm_plan_s {
    _private: [u8; 0],
    _not_send_sync: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
}

/// `moegemm_plan_t`: a pointer to the opaque plan.
pub type moegemm_plan_t = *mut moegemm_plan_s;

/// Opaque layer plan object (`struct moegemm_moe_plan_s`, since 0.2).
#[repr(C)]
pub struct moegemm_moe_plan_s {
    _private: [u8; 0],
    _not_send_sync: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
}

/// `moegemm_moe_plan_t`: a pointer to the opaque layer plan.
pub type moegemm_moe_plan_t = *mut moegemm_moe_plan_s;

/// `struct CUstream_st`: same type as `cudaStream_t` / `CUstream`; NULL is the legacy stream.
#[repr(C)]
pub struct CUstream_st {
    _private: [u8; 0],
    _not_send_sync: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
}

/// `cudaStream_t`.
pub type cudaStream_t = *mut CUstream_st;

/// `moegemm_log_callback_t`. Must not call libmoegemm; must not unwind.
pub type moegemm_log_callback_t = Option<
    unsafe extern "C" fn(level: moegemm_log_level_t, message: *const c_char, user_data: *mut c_void),
>;

// ------------------------------------------------------------------------------------------
// Functions
// ------------------------------------------------------------------------------------------

extern "C" {
    pub fn moegemm_problem_init(problem: *mut moegemm_problem_t) -> moegemm_status_t;

    /// Fills the first `struct_size` bytes: pass `size_of::<moegemm_problem_t>()` so that a
    /// later library with a larger struct never writes past this crate's.
    pub fn moegemm_problem_init_sized(
        problem: *mut moegemm_problem_t,
        struct_size: usize,
    ) -> moegemm_status_t;

    pub fn moegemm_plan_create(
        problem: *const moegemm_problem_t,
        out: *mut moegemm_plan_t,
    ) -> moegemm_status_t;

    pub fn moegemm_plan_destroy(plan: moegemm_plan_t) -> moegemm_status_t;

    pub fn moegemm_plan_set_expert_sizes(
        plan: moegemm_plan_t,
        sizes: *const i32,
        where_: moegemm_memory_t,
    ) -> moegemm_status_t;

    pub fn moegemm_plan_get_workspace_size(
        plan: moegemm_plan_t,
        bytes: *mut usize,
    ) -> moegemm_status_t;

    pub fn moegemm_plan_get_status_word(
        plan: moegemm_plan_t,
        device_word: *mut *mut u32,
    ) -> moegemm_status_t;

    pub fn moegemm_plan_describe(
        plan: moegemm_plan_t,
        buf: *mut c_char,
        len: usize,
    ) -> moegemm_status_t;

    pub fn moegemm_execute(
        plan: moegemm_plan_t,
        a: *const c_void,
        b: *const c_void,
        d: *mut c_void,
        a_scale: *const f32,
        b_scale: *const f32,
        workspace: *mut c_void,
        workspace_bytes: usize,
        stream: cudaStream_t,
    ) -> moegemm_status_t;

    // Since 0.2 -------------------------------------------------------------------------

    /// Pass `size_of::<moegemm_tensors_t>()`.
    pub fn moegemm_tensors_init_sized(
        tensors: *mut moegemm_tensors_t,
        struct_size: usize,
    ) -> moegemm_status_t;

    pub fn moegemm_execute_tensors(
        plan: moegemm_plan_t,
        tensors: *const moegemm_tensors_t,
        workspace: *mut c_void,
        workspace_bytes: usize,
        stream: cudaStream_t,
    ) -> moegemm_status_t;

    /// Blocking: times the candidate kernels on `stream` and waits for them.
    pub fn moegemm_plan_autotune(
        plan: moegemm_plan_t,
        tensors: *const moegemm_tensors_t,
        workspace: *mut c_void,
        workspace_bytes: usize,
        stream: cudaStream_t,
    ) -> moegemm_status_t;

    /// `path`: a NUL-terminated file name, or NULL / "" for none.
    pub fn moegemm_set_tune_cache_file(path: *const c_char) -> moegemm_status_t;

    /// Pass `size_of::<moegemm_moe_problem_t>()`.
    pub fn moegemm_moe_problem_init_sized(
        problem: *mut moegemm_moe_problem_t,
        struct_size: usize,
    ) -> moegemm_status_t;

    pub fn moegemm_moe_plan_create(
        problem: *const moegemm_moe_problem_t,
        out: *mut moegemm_moe_plan_t,
    ) -> moegemm_status_t;

    pub fn moegemm_moe_plan_destroy(plan: moegemm_moe_plan_t) -> moegemm_status_t;

    pub fn moegemm_moe_plan_get_workspace_size(
        plan: moegemm_moe_plan_t,
        bytes: *mut usize,
    ) -> moegemm_status_t;

    pub fn moegemm_moe_plan_get_status_word(
        plan: moegemm_moe_plan_t,
        device_word: *mut *mut u32,
    ) -> moegemm_status_t;

    pub fn moegemm_moe_plan_describe(
        plan: moegemm_moe_plan_t,
        buf: *mut c_char,
        len: usize,
    ) -> moegemm_status_t;

    /// Pass `size_of::<moegemm_moe_tensors_t>()`.
    pub fn moegemm_moe_tensors_init_sized(
        tensors: *mut moegemm_moe_tensors_t,
        struct_size: usize,
    ) -> moegemm_status_t;

    pub fn moegemm_moe_execute(
        plan: moegemm_moe_plan_t,
        tensors: *const moegemm_moe_tensors_t,
        workspace: *mut c_void,
        workspace_bytes: usize,
        stream: cudaStream_t,
    ) -> moegemm_status_t;

    /// Blocking: runs the layer once with FC1 and FC2 tuned in turn, and waits for `stream`.
    pub fn moegemm_moe_plan_autotune(
        plan: moegemm_moe_plan_t,
        tensors: *const moegemm_moe_tensors_t,
        workspace: *mut c_void,
        workspace_bytes: usize,
        stream: cudaStream_t,
    ) -> moegemm_status_t;

    // -----------------------------------------------------------------------------------

    pub fn moegemm_kernel_count() -> c_int;

    pub fn moegemm_kernel_name(index: c_int) -> *const c_char;

    pub fn moegemm_status_string(status: moegemm_status_t) -> *const c_char;

    pub fn moegemm_status_name(status: moegemm_status_t) -> *const c_char;

    pub fn moegemm_get_last_error_message() -> *const c_char;

    pub fn moegemm_set_log_callback(
        callback: moegemm_log_callback_t,
        user_data: *mut c_void,
        level: moegemm_log_level_t,
    ) -> moegemm_status_t;

    pub fn moegemm_get_version() -> c_int;

    pub fn moegemm_get_version_string() -> *const c_char;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Byte offset of a field, without `offset_of!` (Rust 1.77, above this crate's MSRV).
    macro_rules! offset {
        ($t:ty, $f:ident) => {{
            let u = core::mem::MaybeUninit::<$t>::uninit();
            let base = u.as_ptr();
            // SAFETY: only the address of the field is taken, nothing is read.
            let field = unsafe { core::ptr::addr_of!((*base).$f) };
            field as usize - base as usize
        }};
    }

    #[test]
    fn problem_layout_matches_c() {
        // LP64 layout of the C struct: 0.1's 88 bytes (8 + 4 + 4 + 8*3 + 4*7 + pad 4 + 8 + 8),
        // then u32 + 3 enums + 2 floats (24) and an i64: 120.
        assert_eq!(core::mem::size_of::<moegemm_problem_t>(), MOEGEMM_PROBLEM_SIZE_0_2);
        assert_eq!(core::mem::align_of::<moegemm_problem_t>(), 8);
        assert_eq!(offset!(moegemm_problem_t, force_kernel), 80);
        assert_eq!(offset!(moegemm_problem_t, epilogue_inputs), MOEGEMM_PROBLEM_SIZE_0_1);
        assert_eq!(offset!(moegemm_problem_t, bias_type), 92);
        assert_eq!(offset!(moegemm_problem_t, activation), 96);
        assert_eq!(offset!(moegemm_problem_t, gate_layout), 100);
        assert_eq!(offset!(moegemm_problem_t, activation_alpha), 104);
        assert_eq!(offset!(moegemm_problem_t, activation_limit), 108);
        assert_eq!(offset!(moegemm_problem_t, gather_rows), 112);
    }

    #[test]
    fn tensors_layout_matches_c() {
        // ten pointer-sized fields
        assert_eq!(core::mem::size_of::<moegemm_tensors_t>(), 80);
        assert_eq!(offset!(moegemm_tensors_t, a), 8);
        assert_eq!(offset!(moegemm_tensors_t, b_scale), 40);
        assert_eq!(offset!(moegemm_tensors_t, alpha), 48);
        assert_eq!(offset!(moegemm_tensors_t, a_rows), 72);
    }

    #[test]
    fn moe_problem_layout_matches_c() {
        // 96 bytes of fields up to expected_tokens, then the 4-byte enum and 4 of tail padding
        assert_eq!(core::mem::size_of::<moegemm_moe_problem_t>(), 104);
        assert_eq!(core::mem::align_of::<moegemm_moe_problem_t>(), 8);
        assert_eq!(offset!(moegemm_moe_problem_t, num_experts), 8);
        assert_eq!(offset!(moegemm_moe_problem_t, top_k), 20);
        assert_eq!(offset!(moegemm_moe_problem_t, hidden), 24);
        assert_eq!(offset!(moegemm_moe_problem_t, max_tokens), 40);
        assert_eq!(offset!(moegemm_moe_problem_t, dtype), 48);
        assert_eq!(offset!(moegemm_moe_problem_t, activation_alpha), 60);
        assert_eq!(offset!(moegemm_moe_problem_t, fc1_inputs), 68);
        assert_eq!(offset!(moegemm_moe_problem_t, id_type), 76);
        assert_eq!(offset!(moegemm_moe_problem_t, device), 84);
        assert_eq!(offset!(moegemm_moe_problem_t, expected_tokens), 88);
        assert_eq!(offset!(moegemm_moe_problem_t, weight_scales), 96);
    }

    #[test]
    fn moe_tensors_layout_matches_c() {
        assert_eq!(core::mem::size_of::<moegemm_moe_tensors_t>(), 120);
        assert_eq!(offset!(moegemm_moe_tensors_t, topk_weights), 24);
        assert_eq!(offset!(moegemm_moe_tensors_t, alpha2), 72);
        assert_eq!(offset!(moegemm_moe_tensors_t, out), 80);
        assert_eq!(offset!(moegemm_moe_tensors_t, num_tokens), 88);
        assert_eq!(offset!(moegemm_moe_tensors_t, num_tokens_device), 96);
        assert_eq!(offset!(moegemm_moe_tensors_t, w1_scale), 104);
        assert_eq!(offset!(moegemm_moe_tensors_t, w2_scale), 112);
    }

    #[test]
    fn problem_init_sized_writes_no_more_than_asked() {
        // A buffer larger than the 0.1 struct: the bytes past struct_size stay as they were.
        let mut buf = [0xEEu8; 88 + 16];
        let p = buf.as_mut_ptr() as *mut moegemm_problem_t;
        assert_eq!(unsafe { moegemm_problem_init_sized(p, MOEGEMM_PROBLEM_SIZE_0_1) }, MOEGEMM_STATUS_SUCCESS);
        assert!(buf[88..].iter().all(|&b| b == 0xEE));
        assert_eq!(usize::from_ne_bytes(buf[..8].try_into().unwrap()), 88);
        assert_eq!(unsafe { moegemm_problem_init_sized(p, 80) }, MOEGEMM_STATUS_INVALID_VALUE);
    }

    #[test]
    fn problem_init_sets_size_and_defaults() {
        let mut p = core::mem::MaybeUninit::<moegemm_problem_t>::zeroed();
        let st = unsafe { moegemm_problem_init(p.as_mut_ptr()) };
        assert_eq!(st, MOEGEMM_STATUS_SUCCESS);
        let p = unsafe { p.assume_init() };
        assert_eq!(p.struct_size, core::mem::size_of::<moegemm_problem_t>());
        assert_eq!(p.layout, MOEGEMM_LAYOUT_VARIABLE);
        assert_eq!(p.a_type, MOEGEMM_DTYPE_BF16);
        assert_eq!(p.num_experts, 0);
        assert!(p.force_kernel.is_null());
        // the 0.2 fields default to 0: the plain product
        assert_eq!((p.epilogue_inputs, p.bias_type, p.activation, p.gate_layout), (0, 0, 0, 0));
        assert_eq!((p.activation_alpha, p.activation_limit, p.gather_rows), (0.0, 0.0, 0));
    }

    #[cfg(moegemm_0_2)]
    #[test]
    fn the_0_2_init_functions_fill_their_structs() {
        let mut t = core::mem::MaybeUninit::<moegemm_tensors_t>::zeroed();
        let size = core::mem::size_of::<moegemm_tensors_t>();
        assert_eq!(unsafe { moegemm_tensors_init_sized(t.as_mut_ptr(), size) }, MOEGEMM_STATUS_SUCCESS);
        let t = unsafe { t.assume_init() };
        assert_eq!(t.struct_size, size);
        assert!(t.a.is_null() && t.d.is_null() && t.alpha.is_null() && t.a_rows.is_null());
        assert_eq!(unsafe { moegemm_tensors_init_sized(core::ptr::null_mut(), size) }, MOEGEMM_STATUS_INVALID_VALUE);

        let mut p = core::mem::MaybeUninit::<moegemm_moe_problem_t>::zeroed();
        let size = core::mem::size_of::<moegemm_moe_problem_t>();
        assert_eq!(unsafe { moegemm_moe_problem_init_sized(p.as_mut_ptr(), size) }, MOEGEMM_STATUS_SUCCESS);
        let p = unsafe { p.assume_init() };
        assert_eq!(p.struct_size, size);
        assert_eq!((p.dtype, p.activation, p.id_type, p.backend), (MOEGEMM_DTYPE_BF16, MOEGEMM_ACTIVATION_NONE, MOEGEMM_INDEX_INT32, MOEGEMM_BACKEND_AUTO));
        assert_eq!((p.first_expert, p.local_experts, p.device, p.expected_tokens), (0, 0, 0, 0));
        assert_eq!(p.weight_scales, MOEGEMM_SCALE_NONE);

        let mut t = core::mem::MaybeUninit::<moegemm_moe_tensors_t>::zeroed();
        let size = core::mem::size_of::<moegemm_moe_tensors_t>();
        assert_eq!(unsafe { moegemm_moe_tensors_init_sized(t.as_mut_ptr(), size) }, MOEGEMM_STATUS_SUCCESS);
        let t = unsafe { t.assume_init() };
        assert_eq!((t.struct_size, t.num_tokens), (size, 0));
        assert!(t.x.is_null() && t.out.is_null() && t.num_tokens_device.is_null());
        assert!(t.w1_scale.is_null() && t.w2_scale.is_null());
    }

    #[cfg(moegemm_0_2)]
    #[test]
    fn null_layer_plans_are_refused() {
        let mut bytes = 0usize;
        assert_eq!(unsafe { moegemm_moe_plan_get_workspace_size(core::ptr::null_mut(), &mut bytes) }, MOEGEMM_STATUS_INVALID_VALUE);
        assert_eq!(unsafe { moegemm_moe_plan_destroy(core::ptr::null_mut()) }, MOEGEMM_STATUS_SUCCESS);
        assert_eq!(
            unsafe { moegemm_execute_tensors(core::ptr::null_mut(), core::ptr::null(), core::ptr::null_mut(), 0, core::ptr::null_mut()) },
            MOEGEMM_STATUS_INVALID_VALUE
        );
    }

    #[cfg(moegemm_0_2)]
    #[test]
    fn autotune_refuses_a_null_plan_and_the_tune_cache_takes_null() {
        assert_eq!(
            unsafe { moegemm_plan_autotune(core::ptr::null_mut(), core::ptr::null(), core::ptr::null_mut(), 0, core::ptr::null_mut()) },
            MOEGEMM_STATUS_INVALID_VALUE
        );
        assert_eq!(unsafe { moegemm_set_tune_cache_file(core::ptr::null()) }, MOEGEMM_STATUS_SUCCESS);
        assert_eq!(unsafe { moegemm_set_tune_cache_file(b"\0".as_ptr().cast()) }, MOEGEMM_STATUS_SUCCESS);
    }

    #[cfg(moegemm_0_2)]
    #[test]
    fn layer_autotune_refuses_a_null_plan() {
        let mut t = core::mem::MaybeUninit::<moegemm_moe_tensors_t>::zeroed();
        let size = core::mem::size_of::<moegemm_moe_tensors_t>();
        assert_eq!(unsafe { moegemm_moe_tensors_init_sized(t.as_mut_ptr(), size) }, MOEGEMM_STATUS_SUCCESS);
        let t = unsafe { t.assume_init() };
        for tensors in [&t as *const moegemm_moe_tensors_t, core::ptr::null()] {
            assert_eq!(
                unsafe { moegemm_moe_plan_autotune(core::ptr::null_mut(), tensors, core::ptr::null_mut(), 0, core::ptr::null_mut()) },
                MOEGEMM_STATUS_INVALID_VALUE
            );
        }
    }

    #[test]
    fn library_version_matches_declarations() {
        assert_eq!(unsafe { moegemm_get_version() }, MOEGEMM_VERSION);
    }
}

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

// ------------------------------------------------------------------------------------------
// Macros
// ------------------------------------------------------------------------------------------

pub const MOEGEMM_MAX_EXPERTS: c_int = 1024;
pub const MOEGEMM_DESCRIBE_MAX: usize = 512;
/// Size of the first version of `moegemm_problem_t` (0.1): every library version accepts it.
pub const MOEGEMM_PROBLEM_SIZE_0_1: usize = 88;
pub const MOEGEMM_SIZES_CLAMPED_NEGATIVE: u32 = 0x1;
pub const MOEGEMM_SIZES_CLAMPED_CAPACITY: u32 = 0x2;

/// From `moegemm/version.h`: the version these declarations were written against.
pub const MOEGEMM_VERSION_MAJOR: c_int = 0;
pub const MOEGEMM_VERSION_MINOR: c_int = 1;
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
}

/// Opaque plan object (`struct moegemm_plan_s`).
#[repr(C)]
pub struct moegemm_plan_s {
    _private: [u8; 0],
    _not_send_sync: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
}

/// `moegemm_plan_t`: a pointer to the opaque plan.
pub type moegemm_plan_t = *mut moegemm_plan_s;

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

    #[test]
    fn problem_layout_matches_c() {
        // LP64 layout of the C struct: 8 + 4 + 4 + 8*3 + 4*7 + pad 4 + 8 + 8 = 88.
        assert_eq!(core::mem::size_of::<moegemm_problem_t>(), 88);
        assert_eq!(core::mem::align_of::<moegemm_problem_t>(), 8);
    }

    #[test]
    fn problem_init_sized_writes_no_more_than_asked() {
        // A buffer larger than the struct: the bytes past struct_size stay as they were.
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
    }

    #[test]
    fn library_version_matches_declarations() {
        assert_eq!(unsafe { moegemm_get_version() }, MOEGEMM_VERSION);
    }
}

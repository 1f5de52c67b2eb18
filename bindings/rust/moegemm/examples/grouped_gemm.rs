//! One VARIABLE grouped GEMM on the GPU, checked exactly against a CPU reference.
//!
//!     MOEGEMM_LIB_DIR=build LD_LIBRARY_PATH=build \
//!         cargo run --offline --release --manifest-path bindings/rust/Cargo.toml --example grouped_gemm
//!
//! A and B hold small integers, exact in bf16; with fp32 accumulation every dot product is
//! exact, so the f64 reference must match bit for bit (after one bf16 rounding for a bf16 D).
//! Ragged sizes include an empty expert; rows of D past the sum must stay untouched.
//! Exit codes: 0 PASS, 1 FAIL, 77 no GPU (skipped).
//!
//! No CUDA crate: the few CUDA runtime functions needed are declared here.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::process::exit;

use moegemm::{DType, ErrorKind, Layout, Plan, Problem};

#[allow(non_camel_case_types)]
type cudaError_t = c_int;
const CUDA_MEMCPY_HOST_TO_DEVICE: c_int = 1;
const CUDA_MEMCPY_DEVICE_TO_HOST: c_int = 2;

#[link(name = "cudart")]
extern "C" {
    fn cudaGetDeviceCount(count: *mut c_int) -> cudaError_t;
    fn cudaMalloc(ptr: *mut *mut c_void, bytes: usize) -> cudaError_t;
    fn cudaMemcpy(dst: *mut c_void, src: *const c_void, bytes: usize, kind: c_int) -> cudaError_t;
    fn cudaFree(ptr: *mut c_void) -> cudaError_t;
    fn cudaDeviceSynchronize() -> cudaError_t;
    fn cudaGetErrorString(err: cudaError_t) -> *const c_char;
}

fn cuda(what: &str, err: cudaError_t) {
    if err != 0 {
        let s = unsafe { CStr::from_ptr(cudaGetErrorString(err)) }.to_string_lossy();
        eprintln!("FAIL: {what}: CUDA error {err} ({s})");
        exit(1);
    }
}

/// Device buffer freed on drop.
struct DevBuf {
    ptr: *mut c_void,
    bytes: usize,
}

impl DevBuf {
    fn new(bytes: usize) -> DevBuf {
        let mut ptr = std::ptr::null_mut();
        if bytes > 0 {
            cuda("cudaMalloc", unsafe { cudaMalloc(&mut ptr, bytes) });
        }
        DevBuf { ptr, bytes }
    }
    fn upload<T: Copy>(host: &[T]) -> DevBuf {
        let bytes = std::mem::size_of_val(host);
        let b = DevBuf::new(bytes);
        cuda("cudaMemcpy H2D", unsafe {
            cudaMemcpy(b.ptr, host.as_ptr().cast(), bytes, CUDA_MEMCPY_HOST_TO_DEVICE)
        });
        b
    }
    fn download<T: Copy + Default>(&self) -> Vec<T> {
        let mut v = vec![T::default(); self.bytes / std::mem::size_of::<T>()];
        cuda("cudaMemcpy D2H", unsafe {
            cudaMemcpy(v.as_mut_ptr().cast(), self.ptr, self.bytes, CUDA_MEMCPY_DEVICE_TO_HOST)
        });
        v
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            unsafe { cudaFree(self.ptr) };
        }
    }
}

/// Exact for integers of magnitude <= 256 (and any value with <= 8 significant bits).
fn f32_to_bf16_exact(x: f32) -> u16 {
    let bits = x.to_bits();
    assert_eq!(bits & 0xFFFF, 0, "{x} is not exact in bf16");
    (bits >> 16) as u16
}

/// Round to nearest even, as a GPU epilogue converts an fp32 accumulator to bf16.
fn f32_to_bf16_rne(x: f32) -> u16 {
    let bits = x.to_bits();
    ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) as u16
}

fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

fn main() {
    let mut ndev: c_int = 0;
    let err = unsafe { cudaGetDeviceCount(&mut ndev) };
    if err != 0 || ndev == 0 {
        let why = if err != 0 {
            unsafe { CStr::from_ptr(cudaGetErrorString(err)) }.to_string_lossy().into_owned()
        } else {
            "no device".to_string()
        };
        println!("SKIP: no usable CUDA GPU ({why}); this example needs one");
        exit(77);
    }
    println!("libmoegemm {} ({} kernels)", moegemm::version_string(), moegemm::kernel_names().len());

    // Problem: E experts, ragged sizes with an empty expert, capacity past the sum.
    let sizes: Vec<i32> = vec![5, 0, 37, 1, 64, 13];
    let e = sizes.len();
    let (n, k) = (96usize, 136usize);
    let total: usize = sizes.iter().map(|&s| s as usize).sum();
    let max_rows = total + 11;

    // Small integers: A in [-3, 3], B in [-2, 2]; |dot| <= 6 * k, exact in fp32.
    let a_f: Vec<f32> = (0..max_rows * k).map(|i| ((i / k * 3 + i % k * 5) % 7) as f32 - 3.0).collect();
    let b_f: Vec<f32> =
        (0..e * n * k).map(|i| ((i / (n * k) * 11 + (i / k % n) * 7 + i % k * 3) % 5) as f32 - 2.0).collect();
    let a_bits: Vec<u16> = a_f.iter().map(|&x| f32_to_bf16_exact(x)).collect();
    let b_bits: Vec<u16> = b_f.iter().map(|&x| f32_to_bf16_exact(x)).collect();

    // CPU reference in f64 (B is [E, N, K]).
    let mut reference = vec![0f64; total * n];
    let mut row0 = 0usize;
    for (ex, &m) in sizes.iter().enumerate() {
        for r in row0..row0 + m as usize {
            for c in 0..n {
                let mut acc = 0f64;
                for kk in 0..k {
                    acc += a_f[r * k + kk] as f64 * b_f[(ex * n + c) * k + kk] as f64;
                }
                reference[r * n + c] = acc;
            }
        }
        row0 += m as usize;
    }

    let a_dev = DevBuf::upload(&a_bits);
    let b_dev = DevBuf::upload(&b_bits);
    let mut failures = 0usize;
    let mut ran = 0usize;

    for d_type in [DType::BF16, DType::F32] {
        let problem = Problem::new()
            .layout(Layout::Variable)
            .num_experts(e as i32)
            .n(n as i64)
            .k(k as i64)
            .max_rows(max_rows as i64)
            .d_type(d_type);
        let mut plan = match Plan::new(&problem) {
            Ok(p) => p,
            Err(err) if err.kind() == ErrorKind::NotSupported => {
                println!("[{d_type:?} out] not supported on this device/build: {err}");
                continue;
            }
            Err(err) => {
                eprintln!("FAIL: [{d_type:?} out] plan creation: {err}");
                exit(1);
            }
        };
        if let Err(err) = plan.set_expert_sizes_host(&sizes) {
            eprintln!("FAIL: [{d_type:?} out] set_expert_sizes_host: {err}");
            exit(1);
        }
        println!("[{d_type:?} out] {}", plan.describe().unwrap_or_default());
        let ws_bytes = plan.workspace_size().expect("workspace size");
        let ws = DevBuf::new(ws_bytes);

        // D starts as a sentinel so rows past the sum can be checked as untouched.
        let elem = if d_type == DType::F32 { 4 } else { 2 };
        let sentinel = vec![0x5Au8; max_rows * n * elem];
        let d_dev = DevBuf::upload(&sentinel);

        let r = unsafe { plan.execute(a_dev.ptr, b_dev.ptr, d_dev.ptr, ws.ptr, ws_bytes, std::ptr::null_mut()) };
        if let Err(err) = r {
            eprintln!("FAIL: [{d_type:?} out] execute: {err}");
            exit(1);
        }
        cuda("cudaDeviceSynchronize", unsafe { cudaDeviceSynchronize() });
        ran += 1;

        let got: Vec<u8> = d_dev.download();
        let mut bad = 0usize;
        for i in 0..total * n {
            let want = reference[i];
            let (ok, got_v) = if d_type == DType::F32 {
                let v = f32::from_le_bytes(got[i * 4..i * 4 + 4].try_into().unwrap());
                (v as f64 == want, v as f64)
            } else {
                let bits = u16::from_le_bytes(got[i * 2..i * 2 + 2].try_into().unwrap());
                (bits == f32_to_bf16_rne(want as f32), bf16_to_f32(bits) as f64)
            };
            if !ok {
                if bad < 5 {
                    eprintln!("  [{d_type:?} out] D[{}, {}] = {got_v}, want {want}", i / n, i % n);
                }
                bad += 1;
            }
        }
        let untouched = got[total * n * elem..].iter().all(|&b| b == 0x5A);
        if !untouched {
            eprintln!("  [{d_type:?} out] rows past sum(sizes) = {total} were written");
        }
        println!(
            "[{d_type:?} out] E={e} sizes={sizes:?} N={n} K={k} max_rows={max_rows}: {} mismatches of {}, tail rows {}",
            bad,
            total * n,
            if untouched { "untouched" } else { "WRITTEN" }
        );
        failures += bad + usize::from(!untouched);
        drop(plan); // after the synchronize above: no execution of the plan is pending
    }

    if ran == 0 {
        eprintln!("FAIL: no output type could be planned");
        exit(1);
    }
    if failures == 0 {
        println!("PASS");
    } else {
        println!("FAIL");
        exit(1);
    }
}

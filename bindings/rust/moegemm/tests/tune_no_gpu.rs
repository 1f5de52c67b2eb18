//! Autotuning (since 0.2) without a GPU: the tune cache file needs none, and a plan's or a
//! layer's autotune refuses what it cannot tune before touching any buffer (on a GPU-less
//! machine the plan itself gives NoDevice).
//!
//! Gated by the cfg `moegemm_0_2`, as `layer_no_gpu.rs`.
#![cfg(moegemm_0_2)]

use std::path::{Path, PathBuf};

use moegemm::{Activation, ErrorKind, Layout, MoePlan, MoeProblem, MoeTensors, Plan, Problem, Tensors};

fn valid() -> Problem {
    Problem::new().layout(Layout::Variable).num_experts(4).n(128).k(256).max_rows(512)
}

fn scratch(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("moegemm_rust_tune_{}_{name}", std::process::id()))
}

#[test]
fn the_tune_cache_file_needs_no_gpu() {
    // None names no file; a missing or corrupt file is ignored (a warning in the log), never an
    // error, and nothing is written before an autotune.
    let missing = scratch("missing").join("tune.txt");
    let corrupt = scratch("corrupt.txt");
    std::fs::write(&corrupt, "not a tune cache\n").unwrap();
    moegemm::set_tune_cache_file(None).unwrap();
    moegemm::set_tune_cache_file(Some(&missing)).unwrap();
    moegemm::set_tune_cache_file(Some(Path::new(""))).unwrap();
    moegemm::set_tune_cache_file(Some(&corrupt)).unwrap();
    moegemm::set_tune_cache_file(None).unwrap();
    assert!(!missing.exists() && !missing.parent().unwrap().exists());
    assert_eq!(std::fs::read_to_string(&corrupt).unwrap(), "not a tune cache\n");
    std::fs::remove_file(&corrupt).unwrap();
    // a NUL byte cannot reach the C string
    let e = moegemm::set_tune_cache_file(Some(Path::new("tune\0cache"))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidValue);
    assert!(e.message().contains("NUL"), "{e}");
}

#[test]
fn autotune_refuses_a_plan_without_sizes_or_with_a_forced_kernel() {
    let t = Tensors::new();
    let null = std::ptr::null_mut();
    match Plan::new(&valid()) {
        Ok(mut plan) => {
            let before = plan.describe().unwrap();
            let e = unsafe { plan.autotune(&t, null, 0, null) }.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidState, "{e}");
            assert!(e.message().contains("never set"), "{e}");
            assert_eq!(plan.describe().unwrap(), before);
            let kernel = before.split("kernel=").nth(1).unwrap().split(' ').next().unwrap().to_owned();
            let mut forced = Plan::new(&valid().force_kernel(Some(&kernel))).unwrap();
            forced.set_expert_sizes_host(&[1, 2, 3, 4]).unwrap();
            let e = unsafe { forced.autotune(&t, null, 0, null) }.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidState, "{e}");
            assert!(e.message().contains("force_kernel"), "{e}");
        }
        Err(e) => assert_eq!(e.kind(), ErrorKind::NoDevice, "{e}"),
    }
}

#[test]
fn layer_autotune_refuses_what_execute_refuses() {
    // A layer no other test tunes; its tensors are left NULL, so both calls stop at the same
    // argument check, before any kernel is timed, and the layer keeps its kernels.
    let p = MoeProblem::new()
        .num_experts(8)
        .top_k(2)
        .hidden(144)
        .intermediate(80)
        .max_tokens(90)
        .activation(Activation::Swiglu);
    match MoePlan::new(&p) {
        Ok(mut layer) => {
            let before = layer.describe().unwrap();
            let t = MoeTensors::new().num_tokens(4);
            let null = std::ptr::null_mut();
            let executed = unsafe { layer.execute(&t, null, 0, null) }.unwrap_err();
            let tuned = unsafe { layer.autotune(&t, null, 0, null) }.unwrap_err();
            assert_eq!(tuned.kind(), executed.kind(), "{tuned} / {executed}");
            assert_eq!(tuned.message(), executed.message());
            assert_eq!(layer.describe().unwrap(), before);
            assert!(!before.contains("tuned:"), "{before}");
        }
        Err(e) => assert!(
            matches!(e.kind(), ErrorKind::NoDevice | ErrorKind::NotSupported | ErrorKind::ArchMismatch),
            "{e}"
        ),
    }
}

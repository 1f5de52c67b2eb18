//! Tests that need the library but no GPU: they pass on a GPU-less CI machine (plan creation
//! of a valid problem reports NoDevice) and on a GPU machine (it succeeds).

use moegemm::{Backend, DType, ErrorKind, Layout, Plan, Problem};

fn valid() -> Problem {
    Problem::new().layout(Layout::Variable).num_experts(4).n(128).k(256).max_rows(512)
}

fn expect_err(p: &Problem, kind: ErrorKind, needle: &str) -> moegemm::Error {
    let e = Plan::new(p).expect_err("plan creation should fail");
    assert_eq!(e.kind(), kind, "{e}");
    assert_eq!(e.status(), kind.status());
    assert!(e.name().starts_with("MOEGEMM_STATUS_"), "{e}");
    assert!(e.message().contains(needle), "message {:?} should mention {needle:?}", e.message());
    assert!(e.to_string().contains(e.name()) && e.to_string().contains(e.message()));
    e
}

#[test]
fn version_matches_header() {
    assert_eq!(moegemm::version(), moegemm::sys::MOEGEMM_VERSION);
    let s = moegemm::version_string();
    let parts: Vec<i32> = s.split('.').map(|x| x.parse().unwrap()).collect();
    assert_eq!(parts.len(), 3, "{s}");
    assert_eq!(parts[0] * 10000 + parts[1] * 100 + parts[2], moegemm::version());
}

#[test]
fn defaults_come_from_problem_init() {
    let p = Problem::new();
    let raw = p.raw();
    assert_eq!(raw.struct_size, std::mem::size_of::<moegemm::sys::moegemm_problem_t>());
    assert_eq!(Layout::from_raw(raw.layout), Some(Layout::Variable));
    assert_eq!(DType::from_raw(raw.a_type), Some(DType::BF16));
    assert_eq!(DType::from_raw(raw.d_type), Some(DType::BF16));
    assert_eq!(Backend::from_raw(raw.backend), Some(Backend::Auto));
    assert_eq!((raw.num_experts, raw.n, raw.k, raw.max_rows, raw.device), (0, 0, 0, 0, 0));
}

#[test]
fn unset_problem_is_invalid_value() {
    expect_err(&Problem::new(), ErrorKind::InvalidValue, "num_experts");
}

#[test]
fn too_many_experts_is_invalid_value() {
    expect_err(&valid().num_experts(moegemm::MAX_EXPERTS + 1), ErrorKind::InvalidValue, "num_experts");
}

#[test]
fn nonpositive_dimension_is_invalid_value() {
    expect_err(&valid().n(0), ErrorKind::InvalidValue, "n");
    expect_err(&valid().max_rows(-1), ErrorKind::InvalidValue, "max_rows");
}

#[test]
fn negative_device_is_invalid_value() {
    expect_err(&valid().device(-1), ErrorKind::InvalidValue, "device");
}

#[test]
fn enum_out_of_range_is_invalid_value() {
    let mut p = valid();
    p.raw_mut().layout = 7;
    expect_err(&p, ErrorKind::InvalidValue, "layout");
}

#[test]
fn k_not_multiple_of_8_is_misaligned() {
    expect_err(&valid().k(100), ErrorKind::Misaligned, "k");
}

#[test]
fn mixed_input_types_are_not_supported() {
    expect_err(&valid().a_type(DType::BF16).b_type(DType::F16), ErrorKind::NotSupported, "");
}

#[test]
fn force_kernel_with_nul_is_invalid_value() {
    let e = Plan::new(&valid().force_kernel(Some("a\0b"))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidValue);
    assert_eq!(e.name(), "MOEGEMM_STATUS_INVALID_VALUE");
}

#[test]
fn valid_problem_needs_a_device() {
    match Plan::new(&valid()) {
        // On a GPU machine the plan is created; check the accessors while we have it.
        Ok(mut plan) => {
            assert!(!plan.describe().unwrap().is_empty());
            plan.workspace_size().unwrap();
            let e = plan.set_expert_sizes_host(&[1, 2, 3]).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidValue);
            plan.set_expert_sizes_host(&[1, 2, 3, 4]).unwrap();
            let e = plan.set_expert_sizes_host(&[-1, 2, 3, 4]).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidValue);
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::NoDevice, "{e}");
            assert!(!e.message().is_empty());
        }
    }
}

#[test]
fn errors_are_per_call() {
    // A later failure carries its own message, not a stale one.
    let a = Plan::new(&valid().k(100)).unwrap_err();
    let b = Plan::new(&valid().device(-1)).unwrap_err();
    assert_ne!(a.message(), b.message());
}

#[test]
fn kernel_names_are_listed() {
    let names = moegemm::kernel_names();
    assert!(names.iter().all(|n| !n.is_empty()));
}

#[test]
fn status_strings() {
    assert_eq!(moegemm::status_string(12345), "unknown status");
    assert!(!moegemm::status_string(1).is_empty());
}

#[test]
fn log_level_off_is_accepted() {
    moegemm::set_log_level(moegemm::LogLevel::Off).unwrap();
}

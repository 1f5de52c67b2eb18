//! The 0.2 API (epilogue, gather, MoE layer) without a GPU: the structs come from the library's
//! init functions, and bad layers get the documented error kinds; a valid one gives NoDevice
//! on a GPU-less machine (or a plan on a GPU machine).
//!
//! Gated by the cfg `moegemm_0_2`, which the build leaves out (with a warning) when the linked
//! libmoegemm predates that API, so that the other tests still link and run.
#![cfg(moegemm_0_2)]

use moegemm::{
    Activation, DType, ErrorKind, GateLayout, IndexType, MoePlan, MoeProblem, MoeTensors, Problem, Tensors,
    EPILOGUE_ALPHA, EPILOGUE_BIAS,
};

fn qwen_like() -> MoeProblem {
    MoeProblem::new()
        .num_experts(16)
        .top_k(4)
        .hidden(256)
        .intermediate(128)
        .max_tokens(64)
        .activation(Activation::Swiglu)
}

fn expect_err(p: &MoeProblem, kind: ErrorKind) -> moegemm::Error {
    let e = MoePlan::new(p).expect_err("layer plan creation should fail");
    assert_eq!(e.kind(), kind, "{e}");
    assert!(!e.message().is_empty(), "{e}");
    e
}

#[test]
fn layer_defaults_come_from_the_library() {
    let p = MoeProblem::new();
    let raw = p.raw();
    assert_eq!(raw.struct_size, std::mem::size_of::<moegemm::sys::moegemm_moe_problem_t>());
    assert_eq!(DType::from_raw(raw.dtype), Some(DType::BF16));
    assert_eq!(Activation::from_raw(raw.activation), Some(Activation::None));
    assert_eq!(GateLayout::from_raw(raw.gate_layout), Some(GateLayout::GateUp));
    assert_eq!(IndexType::from_raw(raw.id_type), Some(IndexType::I32));
    assert_eq!((raw.first_expert, raw.local_experts, raw.fc1_inputs, raw.fc2_inputs), (0, 0, 0, 0));
    let q = qwen_like().local_experts(4, 8).epilogue_inputs(EPILOGUE_BIAS, EPILOGUE_ALPHA | EPILOGUE_BIAS);
    assert_eq!((q.raw().first_expert, q.raw().local_experts), (4, 8));
    assert_eq!((q.raw().fc1_inputs, q.raw().fc2_inputs), (4, 5));
}

#[test]
fn tensors_start_null() {
    let t = Tensors::new();
    assert_eq!(t.raw().struct_size, std::mem::size_of::<moegemm::sys::moegemm_tensors_t>());
    assert!(t.raw().a.is_null() && t.raw().bias.is_null() && t.raw().a_rows.is_null());
    let m = MoeTensors::new().num_tokens(7);
    assert_eq!(m.raw().struct_size, std::mem::size_of::<moegemm::sys::moegemm_moe_tensors_t>());
    assert_eq!(m.raw().num_tokens, 7);
    assert!(m.raw().x.is_null() && m.raw().num_tokens_device.is_null());
}

#[test]
fn unset_layer_is_invalid_value() {
    expect_err(&MoeProblem::new(), ErrorKind::InvalidValue);
}

#[test]
fn top_k_above_num_experts_is_invalid_value() {
    expect_err(&qwen_like().top_k(17), ErrorKind::InvalidValue);
}

#[test]
fn expert_range_outside_the_model_is_invalid_value() {
    expect_err(&qwen_like().local_experts(12, 8), ErrorKind::InvalidValue);
}

#[test]
fn clamped_swiglu_without_parameters_is_invalid_value() {
    expect_err(&qwen_like().activation(Activation::SwigluClamped), ErrorKind::InvalidValue);
}

#[test]
fn hidden_not_multiple_of_8_is_misaligned() {
    expect_err(&qwen_like().hidden(100), ErrorKind::Misaligned);
}

#[test]
fn valid_layer_needs_a_device() {
    match MoePlan::new(&qwen_like()) {
        Ok(plan) => {
            assert!(!plan.describe().unwrap().is_empty());
            plan.workspace_size().unwrap();
            assert!(!plan.status_word().unwrap().is_null());
        }
        Err(e) => assert!(
            matches!(e.kind(), ErrorKind::NoDevice | ErrorKind::NotSupported | ErrorKind::ArchMismatch),
            "{e}"
        ),
    }
}

#[test]
fn epilogue_problem_reaches_the_library() {
    // A gated activation with bias and alpha on a valid grouped problem: a plan on a GPU
    // machine, NoDevice without one (never a complaint about the new fields).
    let p = Problem::new()
        .num_experts(4)
        .n(128)
        .k(256)
        .max_rows(512)
        .activation(Activation::Swiglu)
        .gate_layout(GateLayout::Interleaved)
        .epilogue_inputs(EPILOGUE_ALPHA | EPILOGUE_BIAS)
        .bias_type(DType::F32);
    match moegemm::Plan::new(&p) {
        Ok(_) => {}
        Err(e) => assert!(matches!(e.kind(), ErrorKind::NoDevice | ErrorKind::NotSupported), "{e}"),
    }
    // out-of-range enums are refused by the library
    let mut bad = p.clone();
    bad.raw_mut().activation = 99;
    assert_eq!(moegemm::Plan::new(&bad).unwrap_err().kind(), ErrorKind::InvalidValue);
}

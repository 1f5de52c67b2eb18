//! The 0.2 API (epilogue, gather, MoE layer) without a GPU: the structs come from the library's
//! init functions, and bad layers get the documented error kinds; a valid one gives NoDevice
//! on a GPU-less machine (or a plan on a GPU machine).
//!
//! Gated by the cfg `moegemm_0_2`, which the build leaves out (with a warning) when the linked
//! libmoegemm predates that API, so that the other tests still link and run.
#![cfg(moegemm_0_2)]

use moegemm::{
    Activation, DType, ErrorKind, GateLayout, IndexType, MoePlan, MoeProblem, MoeTensors, Problem, ScaleMode,
    Tensors, EPILOGUE_ALPHA, EPILOGUE_BIAS,
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
    assert_eq!(ScaleMode::from_raw(raw.weight_scales), Some(ScaleMode::None));
    assert_eq!(qwen_like().weight_scales(ScaleMode::Block).raw().weight_scales, moegemm::sys::MOEGEMM_SCALE_BLOCK);
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
    assert!(m.raw().w1_scale.is_null() && m.raw().w2_scale.is_null());
    let (s1, s2) = ([1.0f32; 4], [2.0f32; 4]);
    let m = m.weight_scales(s1.as_ptr(), s2.as_ptr());
    assert_eq!((m.raw().w1_scale, m.raw().w2_scale), (s1.as_ptr(), s2.as_ptr()));
    assert!(m.raw().alpha1.is_null() && m.raw().b1.is_null());
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
fn fp8_weights_take_bf16_and_no_epilogue_inputs() {
    let fp8 = qwen_like().weight_scales(ScaleMode::Block);
    expect_err(&fp8.dtype(DType::F16), ErrorKind::NotSupported);
    expect_err(&fp8.epilogue_inputs(EPILOGUE_BIAS, 0), ErrorKind::NotSupported);
    expect_err(&fp8.epilogue_inputs(0, EPILOGUE_ALPHA), ErrorKind::NotSupported);
}

#[test]
fn fp8_weights_need_multiples_of_16() {
    let fp8 = qwen_like().weight_scales(ScaleMode::Block);
    expect_err(&fp8.hidden(264), ErrorKind::Misaligned); // a multiple of 8, not of 16
    expect_err(&fp8.intermediate(136), ErrorKind::Misaligned);
    // the same sizes are fine with 16-bit weights (not refused for alignment)
    if let Err(e) = MoePlan::new(&qwen_like().hidden(264).intermediate(136)) {
        assert_ne!(e.kind(), ErrorKind::Misaligned, "{e}");
    }
}

#[test]
fn weight_scales_other_than_none_and_block_are_refused() {
    expect_err(&qwen_like().weight_scales(ScaleMode::PerTensor), ErrorKind::NotSupported);
    expect_err(&qwen_like().weight_scales(ScaleMode::Rowwise), ErrorKind::NotSupported);
    let mut bad = qwen_like();
    bad.raw_mut().weight_scales = 9;
    expect_err(&bad, ErrorKind::InvalidValue);
}

#[test]
fn valid_fp8_layer_needs_a_device() {
    // multiples of 16, not of 128: the last scale blocks are partial
    let p = qwen_like().weight_scales(ScaleMode::Block).hidden(272).intermediate(144);
    match MoePlan::new(&p) {
        Ok(plan) => assert!(!plan.describe().unwrap().is_empty()),
        Err(e) => assert!(
            matches!(e.kind(), ErrorKind::NoDevice | ErrorKind::NotSupported | ErrorKind::ArchMismatch),
            "{e}"
        ),
    }
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

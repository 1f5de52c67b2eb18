"""GPU tests: skipped unless torch.cuda.is_available() (failed instead with MOEGEMM_REQUIRE_GPU=1). grouped_mm and Plan against a torch fp32
reference; since 0.2 also every epilogue option, the gather, and moegemm.moe_layer against an
unfused layer (reproducibility, CUDA graphs, torch.compile, opcheck); run on the GPU machine:
    MOEGEMM_LIBRARY=build/libmoegemm.so PYTHONPATH=bindings/python python3 -m pytest -q bindings/python/tests
"""
import os

import pytest

if os.environ.get("MOEGEMM_REQUIRE_GPU") == "1":
    # On a machine that is meant to have a GPU (the GPU session sets this), a missing torch or
    # GPU fails the module instead of skipping it.
    import torch

    if not torch.cuda.is_available():
        pytest.fail("MOEGEMM_REQUIRE_GPU=1 but torch sees no CUDA device", pytrace=False)
else:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch", allow_module_level=True)

import moegemm  # noqa: E402
from moegemm import Plan  # noqa: E402

DTYPES = [torch.bfloat16, torch.float16]
E, N, K = 8, 256, 512
SIZES = [0, 37, 128, 0, 5, 200, 64, 1]  # empty experts included


def is_sm90():
    return torch.cuda.get_device_capability() == (9, 0)


# Tolerances. The reference is computed in fp32 from the very inputs the kernel reads (already
# rounded to bf16 / f16 / e4m3), so what differs is the fp32 summation order (~1e-6 relative)
# and the final rounding to the output type: half an ulp, 2^-9 = 0.2% for bf16, 2^-12 for f16.
# rtol covers that with a margin (fast exp / tanh in the epilogue included); atol, scaled by
# the result's magnitude, covers elements that cancel to near zero, whose absolute error is
# that of their larger terms. Every element is held to it (a norm-wise error would let a
# local fault through).
TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 1e-4}


def assert_close_scaled(got, ref, dtype=None, factor=1.0):
    """got (any dtype) against the fp32 ref, with the tolerance of `dtype` (default: got's)."""
    tol = TOL[dtype or got.dtype] * factor
    scale = ref.abs().max().item() if ref.numel() else 0.0
    torch.testing.assert_close(got.float(), ref, rtol=tol, atol=tol * max(scale, 1e-6))


def make(shape, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, generator=g, device="cuda", dtype=torch.float32) * 0.5).to(dtype)


def ref_variable(a, b, sizes, kn=False):
    out = torch.zeros(a.shape[0], b.shape[2] if kn else b.shape[1], device="cuda")
    off = 0
    for e, m in enumerate(sizes):
        w = b[e].float()
        out[off:off + m] = a[off:off + m].float() @ (w if kn else w.t())
        off += m
    return out, off


def ref_masked(a, b, sizes, kn=False):
    out = torch.einsum("emk,enk->emn", a.float(), b.float()) if not kn else \
        torch.einsum("emk,ekn->emn", a.float(), b.float())
    return out


def check_masked(d, ref, sizes):
    for e, m in enumerate(sizes):
        if m:
            assert_close_scaled(d[e, :m], ref[e, :m])


@pytest.mark.parametrize("dtype", DTYPES)
def test_variable_host_sizes(dtype):
    m = sum(SIZES) + 16
    a, b = make((m, K), dtype, 1), make((E, N, K), dtype, 2)
    d = moegemm.grouped_mm(a, b, SIZES)
    torch.cuda.synchronize()
    ref, total = ref_variable(a, b, SIZES)
    assert d.shape == (m, N) and d.dtype == dtype
    assert_close_scaled(d[:total], ref[:total])
    assert torch.all(d[total:] == 0)  # rows past the sum: untouched (zeros when allocated here)


@pytest.mark.parametrize("dtype", DTYPES)
def test_variable_host_sizes_tensor_and_out_fp32(dtype):
    m = sum(SIZES)
    a, b = make((m, K), dtype, 3), make((E, N, K), dtype, 4)
    out = torch.full((m, N), float("nan"), device="cuda")
    d = moegemm.grouped_mm(a, b, torch.tensor(SIZES, dtype=torch.int32), out=out)
    torch.cuda.synchronize()
    assert d is out
    assert_close_scaled(d, ref_variable(a, b, SIZES)[0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_variable_device_sizes(dtype):
    if not is_sm90():
        pytest.skip("VARIABLE with device sizes needs the native sm_90a backend")
    m = sum(SIZES) + 8
    a, b = make((m, K), dtype, 5), make((E, N, K), dtype, 6)
    sizes = torch.tensor(SIZES, dtype=torch.int32, device="cuda")
    d = moegemm.grouped_mm(a, b, sizes)
    torch.cuda.synchronize()
    ref, total = ref_variable(a, b, SIZES)
    assert_close_scaled(d[:total], ref[:total])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("device_sizes", [False, True])
def test_masked(dtype, device_sizes):
    cap = 128
    sizes = [min(s, cap) for s in SIZES]
    a, b = make((E, cap, K), dtype, 7), make((E, N, K), dtype, 8)
    s = torch.tensor(sizes, dtype=torch.int32, device="cuda") if device_sizes else sizes
    d = moegemm.grouped_mm(a, b, s, layout="masked")
    torch.cuda.synchronize()
    check_masked(d, ref_masked(a, b, sizes), sizes)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fixed(dtype):
    a, b = make((E, 64, K), dtype, 9), make((E, N, K), dtype, 10)
    d = moegemm.grouped_mm(a, b, None, layout="fixed")
    torch.cuda.synchronize()
    assert_close_scaled(d, ref_masked(a, b, None))


@pytest.mark.parametrize("dtype", DTYPES)
def test_kn_weights(dtype):
    m = sum(SIZES)
    a, b = make((m, K), dtype, 11), make((E, K, N), dtype, 12)
    d = moegemm.grouped_mm(a, b, SIZES, weights="kn")
    torch.cuda.synchronize()
    assert_close_scaled(d, ref_variable(a, b, SIZES, kn=True)[0])


@pytest.mark.parametrize("layout", ["variable", "masked"])
@pytest.mark.parametrize("device_sizes", [False, True])
def test_ragged_n_and_k(layout, device_sizes):
    # N and K not multiples of any tile (264 = 2 x 128 + 8, 328 = 5 x 64 + 8): partial column
    # tiles and a partial k-block.
    if device_sizes and layout == "variable" and not is_sm90():
        pytest.skip("VARIABLE with device sizes needs the native sm_90a backend")
    n, k, cap = 264, 328, 208
    sizes = [min(s, cap) for s in SIZES]
    s = torch.tensor(sizes, dtype=torch.int32, device="cuda") if device_sizes else sizes
    b = make((E, n, k), torch.bfloat16, 13)
    if layout == "variable":
        a = make((sum(sizes) + 8, k), torch.bfloat16, 14)
        d = moegemm.grouped_mm(a, b, s)
        torch.cuda.synchronize()
        ref, total = ref_variable(a, b, sizes)
        assert_close_scaled(d[:total], ref[:total])
    else:
        a = make((E, cap, k), torch.bfloat16, 14)
        d = moegemm.grouped_mm(a, b, s, layout="masked")
        torch.cuda.synchronize()
        check_masked(d, ref_masked(a, b, sizes), sizes)


FP8_MODES = ["per_tensor", "per_expert", "rowwise", "block"]


def fp8_scales(mode, rows, e, n, k, seed):
    """Scales in [0.5, 2) laid out as moegemm.h says for `mode`."""
    kb, nb = (k + 127) // 128, (n + 127) // 128
    shapes = {"per_tensor": ((1,), (1,)), "per_expert": ((1,), (e,)),
              "rowwise": ((rows,), (e, n)), "block": ((rows, kb), (e, nb, kb))}[mode]
    g = torch.Generator(device="cuda").manual_seed(seed)
    return tuple(torch.rand(shape, generator=g, device="cuda") * 1.5 + 0.5 for shape in shapes)


def dequantize(a, b, sa, sb, mode):
    """fp32 A [rows, K] and B [E, N, K] with their scales applied (moegemm.h's D for E4M3)."""
    a, b = a.float(), b.float()
    if mode == "per_tensor":
        return a * sa[0], b * sb[0]
    if mode == "per_expert":
        return a * sa[0], b * sb.view(-1, 1, 1)
    if mode == "rowwise":
        return a * sa.view(-1, 1), b * sb.unsqueeze(-1)
    k, n = a.shape[1], b.shape[1]
    sa_full = sa.repeat_interleave(128, dim=1)[:, :k]
    sb_full = sb.repeat_interleave(128, dim=1)[:, :n].repeat_interleave(128, dim=2)[:, :, :k]
    return a * sa_full, b * sb_full


@pytest.mark.parametrize("mode", FP8_MODES)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_fp8_matches_the_dequantized_reference(mode, out_dtype):
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("torch without float8_e4m3fn")
    cc = torch.cuda.get_device_capability()
    if cc != (9, 0) and not (mode == "per_tensor" and cc >= (8, 9)):
        pytest.skip("E4M3 %s needs the native sm_90a backend" % mode)
    # N and K multiples of 16 but not of 128 (partial scale blocks), an empty expert.
    n, k = 272, 400
    rows = sum(SIZES) + 8
    a = make((rows, k), torch.float32, 41).to(torch.float8_e4m3fn)
    b = make((E, n, k), torch.float32, 42).to(torch.float8_e4m3fn)
    sa, sb = fp8_scales(mode, rows, E, n, k, 43)
    d = torch.full((rows, n), float("nan"), device="cuda", dtype=out_dtype)
    with Plan(num_experts=E, n=n, k=k, max_rows=rows, a_type="e4m3", d_type=out_dtype,
              scale_mode=mode) as plan:
        plan.set_expert_sizes(SIZES)
        plan.execute(a, b, d, a_scale=sa, b_scale=sb)
        torch.cuda.synchronize()
    a_deq, b_deq = dequantize(a, b, sa, sb, mode)
    ref, total = ref_variable(a_deq, b_deq, SIZES)
    # fp8 MMAs add into their accumulator with fewer bits than fp32 between promotions: f32
    # output is held to 20 x its 16-bit-input tolerance.
    assert_close_scaled(d[:total], ref[:total], factor=1 if out_dtype == torch.bfloat16 else 20)
    assert torch.isnan(d[total:]).all()  # rows past the sum untouched


@pytest.mark.parametrize("mode", ["rowwise", "block"])
def test_fp8_masked_device_sizes(mode):
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("torch without float8_e4m3fn")
    if not is_sm90():
        pytest.skip("E4M3 %s needs the native sm_90a backend" % mode)
    n, k, cap = 256, 384, 96
    sizes = [min(s, cap) for s in SIZES]
    a = make((E, cap, k), torch.float32, 44).to(torch.float8_e4m3fn)
    b = make((E, n, k), torch.float32, 45).to(torch.float8_e4m3fn)
    sa, sb = fp8_scales(mode, E * cap, E, n, k, 46)
    d = torch.empty((E, cap, n), device="cuda", dtype=torch.bfloat16)
    with Plan(num_experts=E, n=n, k=k, max_rows=cap, layout="masked", a_type="e4m3",
              d_type="bf16", scale_mode=mode) as plan:
        plan.set_expert_sizes(torch.tensor(sizes, dtype=torch.int32, device="cuda"))
        plan.execute(a, b, d, a_scale=sa, b_scale=sb)
        torch.cuda.synchronize()
    a_deq, b_deq = dequantize(a.view(E * cap, k), b, sa, sb, mode)
    check_masked(d, ref_masked(a_deq.view(E, cap, k), b_deq, sizes), sizes)


def test_explicit_streams():
    dtype = torch.bfloat16
    m = sum(SIZES)
    a, b = make((m, K), dtype, 13), make((E, N, K), dtype, 14)
    ref = ref_variable(a, b, SIZES)[0]
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    d = moegemm.grouped_mm(a, b, SIZES, stream=s)
    s.synchronize()
    assert_close_scaled(d, ref)

    class Proto:  # the __cuda_stream__ protocol
        def __cuda_stream__(self):
            return (0, s.cuda_stream)

    d2 = moegemm.grouped_mm(a, b, SIZES, stream=Proto())
    s.synchronize()
    assert_close_scaled(d2, ref)
    with torch.cuda.stream(s):  # torch's current stream
        d3 = moegemm.grouped_mm(a, b, SIZES)
    s.synchronize()
    assert_close_scaled(d3, ref)
    d4 = moegemm.grouped_mm(a, b, SIZES, stream=s.cuda_stream)  # an int handle
    s.synchronize()
    assert_close_scaled(d4, ref)


def test_plan_object_and_diagnostics():
    dtype = torch.float16
    with Plan(layout="variable", num_experts=E, n=N, k=K, max_rows=sum(SIZES), a_type=dtype,
              d_type=torch.float32) as plan:
        assert plan.describe()
        assert plan.status_word != 0
        ws = plan.workspace_size
        a, b = make((sum(SIZES), K), dtype, 15), make((E, N, K), dtype, 16)
        d = torch.empty(sum(SIZES), N, device="cuda")
        with pytest.raises(moegemm.InvalidStateError):
            plan.execute(a, b, d)  # sizes never set
        plan.set_expert_sizes(SIZES)
        if ws:
            small = torch.empty(ws - 1, dtype=torch.uint8, device="cuda")
            with pytest.raises(moegemm.WorkspaceTooSmallError):
                plan.execute(a, b, d, workspace=small)
        buf = torch.empty(a.numel() + 1, dtype=dtype, device="cuda")
        with pytest.raises(moegemm.MisalignedError):
            plan.execute(buf[1:].view(a.shape), b, d)
        with pytest.raises(TypeError):
            plan.execute(a.to(torch.bfloat16), b, d)
        with pytest.raises(ValueError, match="contiguous"):
            plan.execute(a.t().contiguous().t(), b, d)  # same shape, column-major
        plan.execute(a, b, d)
        torch.cuda.synchronize()
        assert_close_scaled(d, ref_variable(a, b, SIZES)[0])
    assert plan.closed


@pytest.mark.parametrize("layout", ["masked", "variable"])
def test_cuda_graph_with_device_sizes(layout):
    if layout == "variable" and not is_sm90():
        pytest.skip("VARIABLE with device sizes needs the native sm_90a backend")
    dtype = torch.bfloat16
    cap = 256
    if layout == "masked":
        a, d_shape = make((E, cap, K), dtype, 17), (E, cap, N)
    else:
        a, d_shape = make((E * cap // 2, K), dtype, 17), (E * cap // 2, N)
    b = make((E, N, K), dtype, 18)
    sizes = torch.tensor(SIZES, dtype=torch.int32, device="cuda")
    d = torch.zeros(d_shape, dtype=dtype, device="cuda")
    plan = Plan(layout=layout, num_experts=E, n=N, k=K, max_rows=d_shape[-2], a_type=dtype)
    plan.set_expert_sizes(sizes)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        plan.execute(a, b, d)  # warm-up: allocates the cached workspace outside the capture
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        plan.execute(a, b, d)
    for new in (SIZES, [3, 0, 17, 250 // (2 if layout == "masked" else 1), 0, 1, 64, 9],
                [0] * E):
        sizes.copy_(torch.tensor(new, dtype=torch.int32))
        d.zero_()
        g.replay()
        torch.cuda.synchronize()
        if layout == "masked":
            check_masked(d, ref_masked(a, b, new), new)
        else:
            ref, total = ref_variable(a, b, new)
            if total:
                assert_close_scaled(d[:total], ref[:total])
            assert torch.all(d[total:] == 0)
    del g
    torch.cuda.synchronize()
    plan.close()


def test_grouped_mm_reuses_plans_and_accepts_dlpack():
    dtype = torch.bfloat16
    m = sum(SIZES)
    a, b = make((m, K), dtype, 19), make((E, N, K), dtype, 20)
    moegemm.grouped_mm(a, b, SIZES)
    n_plans = len(moegemm.api._cache())
    d = moegemm.grouped_mm(torch.utils.dlpack.to_dlpack(a), b, SIZES)
    torch.cuda.synchronize()
    assert len(moegemm.api._cache()) == n_plans
    assert_close_scaled(d, ref_variable(a, b, SIZES)[0])


def test_one_plan_on_two_streams_gets_a_workspace_each():
    # The native kernels keep their tensor maps and tile counter in the workspace: two streams
    # running one plan at once with one workspace would race. The plan's own workspaces are
    # one per stream; many back-to-back launches on both streams must all be right.
    m = sum(SIZES)
    b = make((E, N, K), torch.bfloat16, 11)
    inputs = [make((m, K), torch.bfloat16, 12 + i) for i in range(2)]
    outs = [torch.full((m, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            for _ in range(2)]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    with Plan(num_experts=E, n=N, k=K, max_rows=m) as plan:
        plan.set_expert_sizes(SIZES)
        torch.cuda.synchronize()
        for _ in range(20):
            for s, a, d in zip(streams, inputs, outs):
                plan.execute(a, b, d, stream=s)
        torch.cuda.synchronize()
        if plan.workspace_size:
            assert len(plan._workspaces) == 2
        for a, d in zip(inputs, outs):
            ref, total = ref_variable(a, b, SIZES)
            assert_close_scaled(d[:total], ref[:total])


def test_grouped_mm_cache_retires_dropped_plans(monkeypatch):
    # Plans the cache drops are waited for and destroyed; results stay right throughout.
    from moegemm import api
    monkeypatch.setattr(api, "_MAX_CACHED_PLANS", 2)
    api.clear_plan_cache()
    b = make((E, N, K), torch.bfloat16, 21)
    for rows in (300, 400, 500, 600):  # four problem shapes (max_rows): two are dropped
        a = make((rows, K), torch.bfloat16, rows)
        sizes = [rows // E] * E
        d = moegemm.grouped_mm(a, b, sizes)
        ref, total = ref_variable(a, b, sizes)
        torch.cuda.synchronize()
        assert_close_scaled(d[:total], ref[:total])
    assert len(api._cache()) == 2
    api.clear_plan_cache()
    assert len(api._cache()) == 0


def test_fp8_scales_are_checked_against_the_scale_mode():
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("torch without float8_e4m3fn")
    plan = Plan(num_experts=E, n=N, k=K, max_rows=64, a_type="e4m3", d_type="bf16",
                scale_mode="rowwise")
    a = make((64, K), torch.float32, 31).to(torch.float8_e4m3fn)
    b = make((E, N, K), torch.float32, 32).to(torch.float8_e4m3fn)
    d = torch.empty((64, N), device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="a_scale: scale_mode rowwise reads 64"):
        plan.execute(a, b, d, a_scale=torch.ones(63, device="cuda"),
                     b_scale=torch.ones(E, N, device="cuda"))
    with pytest.raises(TypeError, match="b_scale: expected float32"):
        plan.execute(a, b, d, a_scale=torch.ones(64, device="cuda"),
                     b_scale=torch.ones(E, N, device="cuda", dtype=torch.int32))
    plan.close()


def test_plan_autotune_makes_the_fastest_kernel_the_plans():
    # A shape no other test uses: the tuned kernel becomes the process's choice for this
    # problem and size bucket, so it changes no other test's plans.
    dtype = torch.bfloat16
    e, n, k, rows = 4, 296, 328, 400
    sizes = [100, 0, 57, 90]
    a, b = make((rows, k), dtype, 51), make((e, n, k), dtype, 52)
    d = torch.full((rows, n), float("nan"), device="cuda", dtype=dtype)
    with Plan(layout="variable", num_experts=e, n=n, k=k, max_rows=rows, a_type=dtype) as plan:
        with pytest.raises(moegemm.InvalidStateError):
            plan.autotune(a, b, d)  # sizes never set
        plan.set_expert_sizes(sizes)
        ws = plan.workspace_size
        assert plan.autotune(a, b, d) is d  # blocking: D holds the product on return
        described = plan.describe()
        assert "tuned:" in described
        assert plan.workspace_size == ws
        ref, total = ref_variable(a, b, sizes)
        assert_close_scaled(d[:total], ref[:total])
        d.fill_(float("nan"))
        plan.execute(a, b, d)  # and execute runs the tuned kernel
        torch.cuda.synchronize()
        assert_close_scaled(d[:total], ref[:total])
        # refused under stream capture (tune before capturing); the plan keeps its kernel
        g = torch.cuda.CUDAGraph()
        with pytest.raises(moegemm.InvalidStateError, match="captured"):
            with torch.cuda.graph(g):
                plan.autotune(a, b, d)
        del g
        torch.cuda.synchronize()
        assert plan.describe() == described
    # a forced kernel leaves nothing to tune
    kernel = described.split("kernel=")[1].split()[0]
    with Plan(layout="variable", num_experts=e, n=n, k=k, max_rows=rows, a_type=dtype,
              force_kernel=kernel) as forced:
        forced.set_expert_sizes(sizes)
        with pytest.raises(moegemm.InvalidStateError, match="force_kernel"):
            forced.autotune(a, b, d)


# ================================================================================================
# 0.2: the fused epilogue, the gather, the MoE layer
# ================================================================================================
def act_ref(h, activation, gate_layout="gate_up", alpha=None, limit=None):
    """The header's activations on fp32 [rows, N] (gated ones return [rows, N / 2])."""
    if activation in (None, "none"):
        return h
    if activation == "silu":
        return h * torch.sigmoid(h)
    if activation == "gelu_tanh":
        return torch.nn.functional.gelu(h, approximate="tanh")
    half = h.shape[-1] // 2
    if gate_layout == "gate_up":
        g, u = h[..., :half], h[..., half:]
    elif gate_layout == "up_gate":
        u, g = h[..., :half], h[..., half:]
    else:  # interleaved: even columns gate, odd columns up
        g, u = h[..., 0::2], h[..., 1::2]
    if activation == "swiglu":
        return g * torch.sigmoid(g) * u
    if activation == "geglu":
        return torch.nn.functional.gelu(g, approximate="tanh") * u
    assert activation == "swiglu_clamped"
    g = g.clamp(max=limit)
    u = u.clamp(-limit, limit)
    return (u + 1) * g * torch.sigmoid(alpha * g)


def expert_of_rows(sizes, max_rows):
    """VARIABLE: the expert of each row (-1 past the sum)."""
    owner = torch.full((max_rows,), -1, dtype=torch.long, device="cuda")
    off = 0
    for e, m in enumerate(sizes):
        owner[off:off + m] = e
        off += m
    return owner, off


def epilogue_ref(acc, owner, alpha=None, row_scale=None, bias=None, activation=None,
                 gate_layout="gate_up", act_alpha=None, act_limit=None):
    """acc fp32 [rows, N], owner: expert per row (>= 0 for valid rows)."""
    x = acc.clone()
    e = owner.clamp_min(0)
    if alpha is not None:
        x = x * alpha.float()[e][:, None]
    if row_scale is not None:
        x = x * row_scale.float()[:, None]
    if bias is not None:
        x = x + bias.float()[e]
    return act_ref(x, activation, gate_layout, act_alpha, act_limit)


EPILOGUES = [
    dict(alpha=True),
    dict(row_scale=True),
    dict(bias=torch.bfloat16),
    dict(bias=torch.float16),
    dict(bias=torch.float32),
    dict(activation="silu"),
    dict(activation="gelu_tanh"),
    dict(activation="swiglu"),
    dict(activation="swiglu", gate_layout="up_gate"),
    dict(activation="swiglu", gate_layout="interleaved"),
    dict(activation="geglu"),
    dict(activation="swiglu_clamped", gate_layout="interleaved", act=(1.702, 7.0)),
    dict(alpha=True, row_scale=True, bias=torch.bfloat16, activation="swiglu"),
    dict(alpha=True, bias=torch.float32, activation="gelu_tanh"),
]


def _epilogue_id(opt):
    return "-".join("%s=%s" % (k, str(v).replace("torch.", "")) for k, v in sorted(opt.items()))


def _epilogue_inputs(opt, e, n, rows, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    args = {}
    if opt.get("alpha"):
        args["alpha"] = torch.rand(e, generator=g, device="cuda") + 0.5
    if opt.get("row_scale"):
        args["row_scale"] = torch.rand(rows, generator=g, device="cuda") + 0.5
    if opt.get("bias") is not None:
        args["bias"] = (torch.randn(e, n, generator=g, device="cuda")).to(opt["bias"])
    return args


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("opt", EPILOGUES, ids=_epilogue_id)
def test_grouped_mm_epilogue(dtype, opt):
    if not is_sm90() and (opt.get("row_scale") or opt.get("activation") in
                          ("swiglu", "geglu", "swiglu_clamped")):
        pytest.skip("row scales and gated activations need the native sm_90a kernels")
    m = sum(SIZES) + 8
    a, b = make((m, K), dtype, 41), make((E, N, K), dtype, 42)
    arrays = _epilogue_inputs(opt, E, N, m, 43)
    act_alpha, act_limit = opt.get("act", (None, None))
    d = moegemm.grouped_mm(a, b, SIZES, activation=opt.get("activation"),
                           gate_layout=opt.get("gate_layout", "gate_up"),
                           activation_alpha=act_alpha, activation_limit=act_limit, **arrays)
    torch.cuda.synchronize()
    gated = opt.get("activation") in ("swiglu", "geglu", "swiglu_clamped")
    assert d.shape == (m, N // 2 if gated else N) and d.dtype == dtype
    acc, total = ref_variable(a, b, SIZES)
    owner, _ = expert_of_rows(SIZES, m)
    ref = epilogue_ref(acc, owner, arrays.get("alpha"), arrays.get("row_scale"),
                       arrays.get("bias"), opt.get("activation"),
                       opt.get("gate_layout", "gate_up"), act_alpha, act_limit)
    assert_close_scaled(d[:total], ref[:total], dtype)
    assert torch.all(d[total:] == 0)  # rows past the sum: untouched (zeros when allocated here)


@pytest.mark.parametrize("opt", [dict(alpha=True, bias=torch.float32, activation="swiglu"),
                                 dict(row_scale=True, activation="silu")], ids=_epilogue_id)
def test_plan_epilogue_masked_f32_out_and_the_library_checks(opt):
    if not is_sm90():
        pytest.skip("needs the native sm_90a kernels")
    cap = 128
    sizes = [min(s, cap) for s in SIZES]
    dtype = torch.bfloat16
    a, b = make((E, cap, K), dtype, 44), make((E, N, K), dtype, 45)
    arrays = _epilogue_inputs(opt, E, N, E * cap, 46)
    names = [k for k in ("alpha", "row_scale", "bias") if k in arrays]
    gated = opt.get("activation") == "swiglu"
    with Plan(layout="masked", num_experts=E, n=N, k=K, max_rows=cap, a_type=dtype,
              d_type="f32", activation=opt.get("activation"), epilogue_inputs=names,
              bias_type=arrays["bias"].dtype if "bias" in arrays else None) as plan:
        plan.set_expert_sizes(sizes)
        d = torch.zeros(E, cap, N // 2 if gated else N, device="cuda")
        with pytest.raises(moegemm.InvalidValueError):
            plan.execute(a, b, d)  # the plan's epilogue arrays are missing
        plan.execute(a, b, d, **arrays)
        torch.cuda.synchronize()
        acc = ref_masked(a, b, sizes).reshape(E * cap, N)
        owner = torch.arange(E, device="cuda").repeat_interleave(cap)
        ref = epilogue_ref(acc, owner, arrays.get("alpha"), arrays.get("row_scale"),
                           arrays.get("bias"), opt.get("activation")).reshape(E, cap, -1)
        for e, m in enumerate(sizes):
            if m:
                assert_close_scaled(d[e, :m], ref[e, :m], torch.float32, factor=20)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["variable", "masked"])
def test_gather(dtype, layout):
    if not is_sm90():
        pytest.skip("gathered A needs the native sm_90a kernels")
    tokens = 300
    x = make((tokens, K), dtype, 51)
    b = make((E, N, K), dtype, 52)
    g = torch.Generator(device="cuda").manual_seed(53)
    if layout == "variable":
        m = sum(SIZES) + 4
        a_rows = torch.randint(0, tokens, (m,), generator=g, device="cuda", dtype=torch.int32)
        a_rows[3] = tokens + 5  # out of range: reads a row of zeros, flags the status word
        sizes = SIZES
    else:
        cap = 64
        sizes = [min(s, cap) for s in SIZES]
        a_rows = torch.randint(0, tokens, (E, cap), generator=g, device="cuda",
                               dtype=torch.int32)
        a_rows[2, 0] = -1
    d = moegemm.grouped_mm(x, b, sizes, layout=layout, a_rows=a_rows, activation="swiglu")
    torch.cuda.synchronize()
    # the reference: the gathered A made explicitly (zeros for the out-of-range index)
    flat = a_rows.reshape(-1).long()
    valid = (flat >= 0) & (flat < tokens)
    dense = torch.zeros(flat.numel(), K, dtype=dtype, device="cuda")
    dense[valid] = x[flat[valid]]
    if layout == "variable":
        acc, total = ref_variable(dense, b, sizes)
        ref = act_ref(acc, "swiglu")
        assert_close_scaled(d[:total], ref[:total], dtype)
    else:
        ref = act_ref(ref_masked(dense.reshape(E, cap, K), b, sizes), "swiglu")
        for e, m in enumerate(sizes):
            if m:
                assert_close_scaled(d[e, :m], ref[e, :m], dtype)
    # the plan's status word has ROWS_CLAMPED_INDEX for the out-of-range index
    lay = {"variable": 0, "masked": 1}[layout]
    plan = next(p for p in moegemm.api._cache().values()
                if p.gather_rows == tokens and p.layout == lay)
    word = read_device_u32(plan.status_word)
    assert word & moegemm.MOEGEMM_ROWS_CLAMPED_INDEX, word


class _DeviceWord:
    """A view of one uint32 at a device address, for torch.as_tensor (no copy)."""

    def __init__(self, address):
        self.__cuda_array_interface__ = {"shape": (1,), "typestr": "<i4",
                                         "data": (address, False), "version": 3}


def read_device_u32(address):
    """The uint32 at a device address (a plan's status word), after the device finished."""
    torch.cuda.synchronize()
    return torch.as_tensor(_DeviceWord(address), device="cuda").item() & 0xFFFFFFFF


# ------------------------------------------------------------------------------------------------
# The MoE layer
# ------------------------------------------------------------------------------------------------
GATED = ("swiglu", "geglu", "swiglu_clamped")


def moe_ref(x, ids, weights, w1, w2, activation="swiglu", gate_layout="gate_up", b1=None,
            b2=None, alpha1=None, alpha2=None, act_alpha=None, act_limit=None, first_expert=0):
    """The unfused layer in fp32: per local expert, its tokens' FC1, activation (rounded to
    x's dtype, the layer's intermediate type), FC2, weighted sum over the choices."""
    t, h = x.shape
    out = torch.zeros(t, h, device=x.device)
    for le in range(w1.shape[0]):
        tok, j = (ids.long() == le + first_expert).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        hid = x[tok].float() @ w1[le].float().t()
        if alpha1 is not None:
            hid = hid * alpha1[le].float()
        if b1 is not None:
            hid = hid + b1[le].float()
        hid = act_ref(hid, activation, gate_layout, act_alpha, act_limit).to(x.dtype).float()
        y = hid @ w2[le].float().t()
        if alpha2 is not None:
            y = y * alpha2[le].float()
        if b2 is not None:
            y = y + b2[le].float()
        out.index_add_(0, tok, y * weights[tok, j].float()[:, None])
    return out


def routing(t, e, k, seed, experts=None, id_dtype=torch.int32):
    """Distinct experts per token (as torch.topk gives), among `experts` (default all), with
    softmax weights."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    pool = torch.arange(e, device="cuda") if experts is None else \
        torch.tensor(experts, device="cuda")
    scores = torch.rand(t, pool.numel(), generator=g, device="cuda")
    top, idx = scores.topk(k, dim=1)
    ids = pool[idx].to(id_dtype)
    return ids, torch.softmax(top * 4, dim=1)


def layer_weights(e, h, i, dtype, gated, seed):
    w1 = make((e, 2 * i if gated else i, h), dtype, seed) * (1.0 / h ** 0.5) * 2
    w2 = make((e, h, i), dtype, seed + 1) * (1.0 / i ** 0.5) * 2
    return w1.contiguous(), w2.contiguous()


LH, LI, LE = 256, 128, 16  # a small Qwen-like layer: hidden, intermediate, experts


def layer_inputs(t, k, seed, dtype=torch.bfloat16):
    """x [t, LH], gated weights of LE experts and a routing of t tokens to k of them, drawn
    from the seeds seed, seed + 1 and seed + 2."""
    x = make((t, LH), dtype, seed)
    w1, w2 = layer_weights(LE, LH, LI, dtype, True, seed + 1)
    ids, weights = routing(t, LE, k, seed + 2)
    return x, w1, w2, ids, weights


def _skip_unless_layer():
    if not is_sm90():
        pytest.skip("the MoE layer needs sm_90")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("t, k", [(1, 1), (1, 4), (5, 1), (37, 4), (300, 8)])
def test_moe_layer_matches_unfused_reference(dtype, t, k):
    _skip_unless_layer()
    x = make((t, LH), dtype, 61)
    w1, w2 = layer_weights(LE, LH, LI, dtype, True, 62)
    # experts 12..15 get no token
    ids, weights = routing(t, LE, k, 63, experts=list(range(12)))
    out = moegemm.moe_layer(x, ids, weights, w1, w2)
    torch.cuda.synchronize()
    assert out.shape == (t, LH) and out.dtype == dtype
    assert_close_scaled(out, moe_ref(x, ids, weights, w1, w2), dtype, factor=2)


def quantize_1x128(a):
    """a [rows, cols] fp32 quantized as the fp8 layer does (moegemm.h, weight_scales): per
    1 x 128 group scale = amax / 448, values x / scale rounded to nearest even into E4M3; the
    values the codes and scales represent, in fp32."""
    rows, cols = a.shape
    pad = (-cols) % 128
    g = torch.nn.functional.pad(a, (0, pad)).view(rows, -1, 128)
    scale = g.abs().amax(dim=2, keepdim=True) / 448.0
    codes = torch.where(scale > 0, g / torch.where(scale > 0, scale, 1.0), 0.0)
    codes = codes.clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return (codes.float() * scale).view(rows, -1)[:, :cols]


def fp8_block_weights(w):
    """E4M3 weights [E, N, K] with fp32 scales per 128 x 128 block, from fp32 `w`."""
    e, n, k = w.shape
    blocks = torch.nn.functional.pad(w, (0, (-k) % 128, 0, (-n) % 128))
    blocks = blocks.view(e, blocks.shape[1] // 128, 128, blocks.shape[2] // 128, 128)
    scale = blocks.abs().amax(dim=(2, 4)) / 448.0
    codes = (blocks / scale[:, :, None, :, None]).view(e, blocks.shape[1] * 128, -1)
    return codes[:, :n, :k].contiguous().to(torch.float8_e4m3fn), scale.contiguous()


def test_moe_layer_fp8_block_weights_match_the_quantizing_reference():
    _skip_unless_layer()
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("torch without float8_e4m3fn")
    t, k = 37, 4
    x = make((t, LH), torch.bfloat16, 71)
    w1f, w2f = layer_weights(LE, LH, LI, torch.float32, True, 72)
    w1, s1 = fp8_block_weights(w1f)
    w2, s2 = fp8_block_weights(w2f)
    ids, weights = routing(t, LE, k, 73, experts=list(range(12)))
    out = moegemm.moe_layer(x, ids, weights, w1, w2, w1_scale=s1, w2_scale=s2)
    torch.cuda.synchronize()
    assert out.shape == (t, LH) and out.dtype == torch.bfloat16
    # The reference: x quantized, FC1 into BF16, SwiGLU, quantized, FC2 into BF16, combined.
    w1d = (w1.float().view(LE, 2 * LI // 128, 128, LH // 128, 128) *
           s1[:, :, None, :, None]).view(LE, 2 * LI, LH)
    w2d = (w2.float().view(LE, LH // 128, 128, LI // 128, 128) *
           s2[:, :, None, :, None]).view(LE, LH, LI)
    xq = quantize_1x128(x.float())
    ref = torch.zeros(t, LH, device="cuda")
    for e in range(LE):
        tok, j = (ids.long() == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        h = (xq[tok] @ w1d[e].t()).to(torch.bfloat16).float()
        a = quantize_1x128(act_ref(h, "swiglu"))
        y = (a @ w2d[e].t()).to(torch.bfloat16).float()
        ref.index_add_(0, tok, y * weights[tok, j].float()[:, None])
    # A code that rounds the other way near a tie moves one term by 1/16 of itself.
    assert_close_scaled(out, ref, torch.bfloat16, factor=3)


@pytest.mark.parametrize("case", [
    dict(activation="geglu", gate_layout="up_gate"),
    dict(activation="swiglu_clamped", gate_layout="interleaved", activation_alpha=1.702,
         activation_limit=7.0),
    dict(activation="silu"),
    dict(activation="gelu_tanh"),
    dict(activation=None),
    dict(activation="swiglu", bias=True),
    dict(activation="swiglu", alpha=True),
    dict(activation="swiglu_clamped", gate_layout="interleaved", activation_alpha=1.702,
         activation_limit=7.0, bias=True, alpha=True),  # gpt-oss
], ids=lambda c: "-".join("%s=%s" % kv for kv in sorted(c.items())))
def test_moe_layer_options(case):
    _skip_unless_layer()
    case = dict(case)
    with_bias, with_alpha = case.pop("bias", False), case.pop("alpha", False)
    dtype, t, k = torch.bfloat16, 50, 4
    act = case.get("activation")
    gated = act in GATED
    x = make((t, LH), dtype, 71)
    w1, w2 = layer_weights(LE, LH, LI, dtype, gated, 72)
    ids, weights = routing(t, LE, k, 73, id_dtype=torch.int64)  # torch.topk's dtype
    extra = {}
    if with_bias:
        extra["b1"] = make((LE, w1.shape[1]), dtype, 74)
        extra["b2"] = make((LE, LH), dtype, 75)
    if with_alpha:
        extra["alpha1"] = torch.rand(LE, device="cuda") + 0.5
        extra["alpha2"] = torch.rand(LE, device="cuda") + 0.5
    out = moegemm.moe_layer(x, ids, weights.to(torch.bfloat16), w1, w2, **case, **extra)
    torch.cuda.synchronize()
    ref = moe_ref(x, ids, weights.to(torch.bfloat16).float(), w1, w2, act,
                  case.get("gate_layout", "gate_up"), extra.get("b1"), extra.get("b2"),
                  extra.get("alpha1"), extra.get("alpha2"), case.get("activation_alpha"),
                  case.get("activation_limit"))
    assert_close_scaled(out, ref, dtype, factor=2)


def test_moe_layer_expert_parallel_and_out():
    _skip_unless_layer()
    dtype, t, k = torch.bfloat16, 40, 4
    x = make((t, LH), dtype, 81)
    w1, w2 = layer_weights(8, LH, LI, dtype, True, 82)  # this rank: experts [8, 16) of 32
    ids, weights = routing(t, 32, k, 83)
    dest = torch.full((t, LH), float("nan"), dtype=dtype, device="cuda")
    got = moegemm.moe_layer(x, ids, weights, w1, w2, first_expert=8, num_experts=32, out=dest)
    torch.cuda.synchronize()
    assert got is dest
    ref = moe_ref(x, ids, weights, w1, w2, first_expert=8)
    assert_close_scaled(dest, ref, dtype, factor=2)
    local = ((ids >= 8) & (ids < 16)).any(dim=1)
    assert torch.all(dest[~local] == 0)  # tokens with no local choice get zeros


def test_moe_layer_is_bitwise_reproducible():
    _skip_unless_layer()
    dtype, t, k = torch.bfloat16, 257, 8
    x, w1, w2, ids, weights = layer_inputs(t, k, 91, dtype)
    first = moegemm.moe_layer(x, ids, weights, w1, w2)
    for _ in range(3):
        again = moegemm.moe_layer(x, ids, weights, w1, w2)
        torch.cuda.synchronize()
        assert torch.equal(first, again)


def test_moe_layer_plans_are_cached_by_rounded_tokens():
    _skip_unless_layer()
    dtype = torch.bfloat16
    w1, w2 = layer_weights(LE, LH, LI, dtype, True, 101)
    moegemm.clear_moe_layer_cache()
    for t in (33, 40, 64):  # one plan: max_tokens 64
        ids, weights = routing(t, LE, 2, t)
        moegemm.moe_layer(make((t, LH), dtype, t), ids, weights, w1, w2)
    assert len(moegemm.moe.cached_layers()) == 1
    assert moegemm.moe.cached_layers()[0].max_tokens == 64
    ids, weights = routing(65, LE, 2, 65)
    moegemm.moe_layer(make((65, LH), dtype, 65), ids, weights, w1, w2)
    assert sorted(p.max_tokens for p in moegemm.moe.cached_layers()) == [64, 128]
    assert moegemm.moe_layer(make((0, LH), dtype, 1), ids[:0], weights[:0], w1, w2).shape == \
        (0, LH)
    torch.cuda.synchronize()


def test_moe_layer_cuda_graph_replays_new_routing():
    _skip_unless_layer()
    dtype, t, k = torch.bfloat16, 24, 4
    x, w1, w2, ids, weights = layer_inputs(t, k, 111, dtype)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside capture: creates the plan
        moegemm.moe_layer(x, ids, weights, w1, w2)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = moegemm.moe_layer(x, ids, weights, w1, w2)
    for seed in (114, 115, 116):
        new_ids, new_weights = routing(t, LE, k, seed, experts=list(range(seed % 7, LE)))
        ids.copy_(new_ids)
        weights.copy_(new_weights)
        x.copy_(make((t, LH), dtype, seed))
        g.replay()
        torch.cuda.synchronize()
        assert_close_scaled(out, moe_ref(x, ids, weights, w1, w2), dtype, factor=2)
        eager = moegemm.moe_layer(x, ids, weights, w1, w2)
        torch.cuda.synchronize()
        assert torch.equal(out, eager)  # the replay computes what the eager call does
    del g


def test_moe_layer_capture_of_a_new_shape_raises():
    _skip_unless_layer()
    dtype = torch.bfloat16
    x = make((3000, LH), dtype, 121)  # 4096 tokens: a plan no test made before
    w1, w2 = layer_weights(LE, LH, LI, dtype, True, 122)
    ids, weights = routing(3000, LE, 2, 123)
    moegemm.clear_moe_layer_cache()
    g = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="before capturing"):
        with torch.cuda.graph(g):
            moegemm.moe_layer(x, ids, weights, w1, w2)
    torch.cuda.synchronize()


def test_moe_layer_torch_compile_fullgraph():
    _skip_unless_layer()
    dtype, k = torch.bfloat16, 4
    w1, w2 = layer_weights(LE, LH, LI, dtype, True, 131)

    def block(x, ids, weights):
        return moegemm.moe_layer(x * 1, ids, weights, w1, w2) * 2

    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True)
    for t in (16, 24):
        x = make((t, LH), dtype, 132 + t)
        ids, weights = routing(t, LE, k, 133 + t)
        got = compiled(x, ids, weights)
        want = block(x, ids, weights)
        torch.cuda.synchronize()
        assert torch.equal(got, want)


def test_moe_layer_opcheck():
    _skip_unless_layer()
    dtype, t, k = torch.bfloat16, 12, 2
    x, w1, w2, ids, weights = layer_inputs(t, k, 141, dtype)
    torch.library.opcheck(torch.ops.moegemm.moe_layer.default, (x, ids, weights, w1, w2),
                          {"activation": "swiglu"})
    b2 = make((LE, LH), dtype, 144)
    torch.library.opcheck(torch.ops.moegemm.moe_layer.default, (x, ids.long(), weights, w1, w2),
                          {"b2": b2, "first_expert": 0, "num_experts": LE})
    out = torch.empty(t, LH, dtype=dtype, device="cuda")
    torch.library.opcheck(torch.ops.moegemm.moe_layer_out.default,
                          (out, x, ids, weights, w1, w2), {})


def test_moe_layer_errors_map_to_the_exception_classes():
    _skip_unless_layer()
    dtype = torch.bfloat16
    x = make((4, LH), dtype, 151)
    w1, w2 = layer_weights(LE, LH, LI, dtype, True, 152)
    ids, weights = routing(4, LE, 2, 153)
    with pytest.raises(moegemm.InvalidValueError):  # top_k above num_experts
        moegemm.moe_layer(x, torch.zeros(4, 20, dtype=torch.int32, device="cuda"),
                          torch.ones(4, 20, device="cuda"), w1, w2)
    with pytest.raises(moegemm.InvalidValueError):  # local experts past the model's
        moegemm.moe_layer(x, ids, weights, w1, w2, first_expert=4, num_experts=LE)
    with pytest.raises(moegemm.InvalidValueError):  # clamped SwiGLU without its parameters
        moegemm.moe_layer(x, ids, weights, w1, w2, activation="swiglu_clamped")
    xm = make((4, 100), dtype, 154)
    w1m, w2m = layer_weights(LE, 100, LI, dtype, True, 155)
    with pytest.raises(moegemm.MisalignedError):
        moegemm.moe_layer(xm, ids, weights, w1m, w2m)


def test_moe_layer_plan_object_with_device_token_count_and_status_word():
    _skip_unless_layer()
    dtype, cap, k = torch.bfloat16, 64, 4
    w1, w2 = layer_weights(LE, LH, LI, dtype, True, 161)
    x = make((cap, LH), dtype, 162)
    ids, weights = routing(cap, LE, k, 163)
    ids[0, 1] = LE + 3  # out of range: the choice is dropped, the status word flagged
    out = torch.full((cap, LH), 7.0, dtype=dtype, device="cuda")
    count = torch.tensor([20], dtype=torch.int32, device="cuda")
    with moegemm.MoeLayer(num_experts=LE, top_k=k, hidden=LH, intermediate=LI, max_tokens=cap,
                          activation="swiglu", dtype=dtype) as layer:
        assert layer.describe()
        assert layer.workspace_size >= 0 and layer.status_word != 0
        layer.execute(x, ids, weights, w1, w2, out, num_tokens_device=count)
        torch.cuda.synchronize()
        ref = moe_ref(x[:20], ids[:20], weights[:20], w1, w2)  # skips the out-of-range id
        assert_close_scaled(out[:20], ref, dtype, factor=2)
        assert torch.all(out[20:] == 7.0)  # rows from the device count on: not written
        assert read_device_u32(layer.status_word) & moegemm.MOEGEMM_ROWS_CLAMPED_INDEX
        count.fill_(cap + 10)  # clamped to max_tokens and flagged
        layer.execute(x, ids, weights, w1, w2, out, num_tokens_device=count)
        torch.cuda.synchronize()
        assert read_device_u32(layer.status_word) & moegemm.MOEGEMM_SIZES_CLAMPED_CAPACITY
        with pytest.raises(moegemm.InvalidValueError):  # a bias the plan does not take
            layer.execute(x, ids, weights, w1, w2, out, b2=make((LE, LH), dtype, 164),
                          num_tokens=cap)
        if layer.workspace_size:
            small = torch.empty(layer.workspace_size - 1, dtype=torch.uint8, device="cuda")
            with pytest.raises(moegemm.WorkspaceTooSmallError):
                layer.execute(x, ids, weights, w1, w2, out, num_tokens=cap, workspace=small)
    assert layer.closed


def test_moe_layer_autotune_tunes_fc1_and_fc2():
    _skip_unless_layer()
    # A shape no other test uses: the tuned kernels become the process's choice for layers of
    # this shape, so they change no other test's layers.
    dtype, e, k, h, i, t = torch.bfloat16, 8, 2, 144, 80, 90
    x = make((t, h), dtype, 171)
    w1, w2 = layer_weights(e, h, i, dtype, True, 172)
    ids, weights = routing(t, e, k, 173)
    out = torch.full((t, h), float("nan"), dtype=dtype, device="cuda")
    with moegemm.MoeLayer(num_experts=e, top_k=k, hidden=h, intermediate=i, max_tokens=t,
                          activation="swiglu", dtype=dtype) as layer:
        ws = layer.workspace_size
        assert layer.autotune(x, ids, weights, w1, w2, out) is out  # blocking: out is ready
        described = layer.describe()
        assert described.count(" (tuned)") == 2, described  # FC1's and FC2's kernels
        assert layer.workspace_size == ws
        assert_close_scaled(out, moe_ref(x, ids, weights, w1, w2), dtype, factor=2)
        tuned = out.clone()
        out.fill_(float("nan"))
        layer.execute(x, ids, weights, w1, w2, out)  # executions run the tuned kernels
        torch.cuda.synchronize()
        assert torch.equal(out, tuned)
        # refused under stream capture (tune before capturing); the layer keeps its kernels
        g = torch.cuda.CUDAGraph()
        with pytest.raises(moegemm.InvalidStateError, match="captured"):
            with torch.cuda.graph(g):
                layer.autotune(x, ids, weights, w1, w2, out)
        del g
        torch.cuda.synchronize()
        assert layer.describe() == described
        assert torch.equal(out, tuned)


def test_autotune_moe_layer_tunes_the_layer_moe_layer_runs():
    _skip_unless_layer()
    dtype, e, k, h, i, t = torch.bfloat16, 8, 2, 176, 96, 70  # a shape of its own
    x = make((t, h), dtype, 181)
    w1, w2 = layer_weights(e, h, i, dtype, True, 182)
    ids, weights = routing(t, e, k, 183)
    out = moegemm.autotune_moe_layer(x, ids, weights, w1, w2)
    assert_close_scaled(out, moe_ref(x, ids, weights, w1, w2), dtype, factor=2)
    tuned = [layer.describe() for layer in moegemm.moe.cached_layers()
             if "H=%d I=%d" % (h, i) in layer.describe()]
    assert len(tuned) == 1 and tuned[0].count(" (tuned)") == 2, tuned
    assert torch.equal(moegemm.moe_layer(x, ids, weights, w1, w2), out)

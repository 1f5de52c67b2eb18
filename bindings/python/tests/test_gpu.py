"""GPU tests: skipped unless torch.cuda.is_available() (failed instead with MOEGEMM_REQUIRE_GPU=1). grouped_mm and Plan against a torch fp32
reference; run on the GPU machine:
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


def rel_err(x, ref):
    return ((x.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


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
            assert rel_err(d[e, :m], ref[e, :m]) < 1e-2, e


@pytest.mark.parametrize("dtype", DTYPES)
def test_variable_host_sizes(dtype):
    m = sum(SIZES) + 16
    a, b = make((m, K), dtype, 1), make((E, N, K), dtype, 2)
    d = moegemm.grouped_mm(a, b, SIZES)
    torch.cuda.synchronize()
    ref, total = ref_variable(a, b, SIZES)
    assert d.shape == (m, N) and d.dtype == dtype
    assert rel_err(d[:total], ref[:total]) < 1e-2
    assert torch.all(d[total:] == 0)  # rows past the sum: untouched (zeros when allocated here)


@pytest.mark.parametrize("dtype", DTYPES)
def test_variable_host_sizes_tensor_and_out_fp32(dtype):
    m = sum(SIZES)
    a, b = make((m, K), dtype, 3), make((E, N, K), dtype, 4)
    out = torch.full((m, N), float("nan"), device="cuda")
    d = moegemm.grouped_mm(a, b, torch.tensor(SIZES, dtype=torch.int32), out=out)
    torch.cuda.synchronize()
    assert d is out
    assert rel_err(d, ref_variable(a, b, SIZES)[0]) < 1e-2


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
    assert rel_err(d[:total], ref[:total]) < 1e-2


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
    assert rel_err(d, ref_masked(a, b, None)) < 1e-2


@pytest.mark.parametrize("dtype", DTYPES)
def test_kn_weights(dtype):
    m = sum(SIZES)
    a, b = make((m, K), dtype, 11), make((E, K, N), dtype, 12)
    d = moegemm.grouped_mm(a, b, SIZES, weights="kn")
    torch.cuda.synchronize()
    assert rel_err(d, ref_variable(a, b, SIZES, kn=True)[0]) < 1e-2


def test_explicit_streams():
    dtype = torch.bfloat16
    m = sum(SIZES)
    a, b = make((m, K), dtype, 13), make((E, N, K), dtype, 14)
    ref = ref_variable(a, b, SIZES)[0]
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    d = moegemm.grouped_mm(a, b, SIZES, stream=s)
    s.synchronize()
    assert rel_err(d, ref) < 1e-2

    class Proto:  # the __cuda_stream__ protocol
        def __cuda_stream__(self):
            return (0, s.cuda_stream)

    d2 = moegemm.grouped_mm(a, b, SIZES, stream=Proto())
    s.synchronize()
    assert rel_err(d2, ref) < 1e-2
    with torch.cuda.stream(s):  # torch's current stream
        d3 = moegemm.grouped_mm(a, b, SIZES)
    s.synchronize()
    assert rel_err(d3, ref) < 1e-2
    d4 = moegemm.grouped_mm(a, b, SIZES, stream=s.cuda_stream)  # an int handle
    s.synchronize()
    assert rel_err(d4, ref) < 1e-2


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
        assert rel_err(d, ref_variable(a, b, SIZES)[0]) < 1e-2
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
                assert rel_err(d[:total], ref[:total]) < 1e-2
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
    assert rel_err(d, ref_variable(a, b, SIZES)[0]) < 1e-2


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
            assert rel_err(d[:total], ref[:total]) < 1e-2


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
        assert rel_err(d[:total], ref[:total]) < 1e-2
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

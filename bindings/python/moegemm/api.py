"""moegemm.grouped_mm: the convenience call, with a per-thread cache of plans."""
import collections
import threading

from . import _lib, _tensors
from .plan import Plan, _LAYOUTS, _WEIGHTS, _enum, _float, activation_code, gate_layout_code

_MAX_CACHED_PLANS = 64
_local = threading.local()


class _PlanCache(collections.OrderedDict):
    """A thread's plans. When the thread ends the cache goes with it: its plans are retired
    (their streams waited for) before they are destroyed, as the plans it drops are."""

    def __del__(self):
        while self:
            try:
                self.popitem()[1].retire()
            except Exception:  # never raise from a finalizer; the plan then closes as is
                pass


def _cache():
    cache = getattr(_local, "plans", None)
    if cache is None:
        cache = _local.plans = _PlanCache()
    return cache


def clear_plan_cache():
    """Destroy the plans grouped_mm cached on this thread, each once the work it queued has
    finished (Plan.retire)."""
    cache = _cache()
    while cache:
        _, plan = cache.popitem()
        plan.retire()


def _get_plan(key, kwargs):
    cache = _cache()
    plan = cache.get(key)
    if plan is None:
        plan = Plan(**kwargs)
        cache[key] = plan
        while len(cache) > _MAX_CACHED_PLANS:
            # The caller cannot see a plan the cache drops, so the cache waits for the work
            # the plan queued before destroying it (rare: a 65th problem shape on a thread).
            cache.popitem(last=False)[1].retire()
    else:
        cache.move_to_end(key)
    return plan


def _max_rows(t, name, lay, e, trailing=()):
    """max_rows from the shape of `t`, whose rows are grouped as layout `lay` groups them:
    [M, *trailing] for VARIABLE, [E, max_rows, *trailing] for MASKED and FIXED (trailing: the
    names of the other dimensions, e.g. ("K",))."""
    rest = "".join(", " + dim for dim in trailing)
    if lay == _lib.LAYOUT_VARIABLE:
        if t.dim() != 1 + len(trailing):
            raise ValueError("%s: VARIABLE expects [M%s], got shape %r"
                             % (name, rest, tuple(t.shape)))
        return t.shape[0]
    if t.dim() != 2 + len(trailing) or t.shape[0] != e:
        raise ValueError("%s: MASKED/FIXED expects [E=%d, max_rows%s], got shape %r"
                         % (name, e, rest, tuple(t.shape)))
    return t.shape[1]


def grouped_mm(a, b, sizes, *, out=None, weights="nk", out_dtype=None, layout="variable",
               stream=None, backend="auto", activation=None, gate_layout="gate_up",
               activation_alpha=None, activation_limit=None, alpha=None, row_scale=None,
               bias=None, a_rows=None):
    """Grouped expert GEMM on PyTorch tensors (or DLPack / CUDA-array producers via torch).

    VARIABLE (default): a [M, K] with rows sorted by expert, b [E, N, K] (weights='nk') or
    [E, K, N] (weights='kn'), sizes: E rows per expert (host list / CPU tensor, or a CUDA
    int32 tensor read by the GPU at every execution). Returns d [M, N]; when allocated here,
    rows past sum(sizes) are zero.
    MASKED: a [E, max_rows, K], d [E, max_rows, N], rows >= sizes[e] of a slab unspecified.
    FIXED: a [E, max_rows, K], sizes must be None.
    out_dtype: torch dtype or 'bf16'|'f16'|'f32' (default: a's dtype).
    Plans are cached per thread, keyed by the problem. With device sizes the call is
    CUDA-graph capturable once it ran once with the same tensors (sizes and workspace are
    then already set up).

    The fused epilogue (libmoegemm 0.2), per row r of expert e and column n:
    act(acc * alpha[e] * row_scale[r] + bias[e, n]), each factor only when given.
    alpha: float [E]; row_scale: float, one per row of d (M for VARIABLE, E * max_rows
    otherwise); bias: [E, N] (bf16, f16 or f32); activation: None | 'silu' | 'gelu_tanh' |
    'swiglu' | 'geglu' | 'swiglu_clamped' (with activation_alpha and activation_limit): the
    gated ones give d N / 2 columns, their gate and up columns placed as gate_layout says
    ('gate_up' | 'up_gate' | 'interleaved').
    a_rows (gather): int32 CUDA indices into a token-major a [T, K], one per row of the
    grouped problem ([M] for VARIABLE, [E, max_rows] for MASKED and FIXED): row r reads
    a[a_rows[r]] (an index outside [0, T) reads zeros), with no permuted copy of a. The plan
    is keyed by T too.
    """
    torch = _tensors._torch()
    if torch is None:
        raise RuntimeError("moegemm.grouped_mm needs PyTorch; use moegemm.Plan otherwise")
    if not isinstance(a, torch.Tensor):
        a = torch.utils.dlpack.from_dlpack(a)
    if not isinstance(b, torch.Tensor):
        b = torch.utils.dlpack.from_dlpack(b)
    lay = _enum(layout, _LAYOUTS, "layout")
    wl = _enum(weights, _WEIGHTS, "weights")
    if lay not in (_lib.LAYOUT_VARIABLE, _lib.LAYOUT_MASKED, _lib.LAYOUT_FIXED):
        raise ValueError("layout: %r is not a layout" % (layout,))
    if wl not in (_lib.WEIGHTS_NK, _lib.WEIGHTS_KN):
        raise ValueError("weights: %r is not a weight layout" % (weights,))
    if not a.is_cuda:
        raise ValueError("a: must be a CUDA tensor")
    if b.dim() != 3:
        raise ValueError("b: expected 3 dimensions [E, N, K] or [E, K, N], got shape %r"
                         % (tuple(b.shape),))
    e = b.shape[0]
    n, k = (b.shape[1], b.shape[2]) if wl == _lib.WEIGHTS_NK else (b.shape[2], b.shape[1])
    act = activation_code(activation)
    gate = gate_layout_code(gate_layout)
    n_out = n // 2 if act in _lib.GATED_ACTIVATIONS else n
    gather_rows = 0
    if a_rows is not None:
        if not isinstance(a_rows, torch.Tensor):
            a_rows = torch.utils.dlpack.from_dlpack(a_rows)
        if a_rows.dtype.is_floating_point or a_rows.dtype == torch.bool:
            raise TypeError("a_rows: expected int32 indices, got %s" % a_rows.dtype)
        if a.dim() != 2:
            raise ValueError("a: with a_rows, a is the token-major [T, K], got shape %r"
                             % (tuple(a.shape),))
        gather_rows = a.shape[0]
        if gather_rows == 0:
            raise ValueError("a: with a_rows, a needs at least one row (T >= 1)")
        max_rows = _max_rows(a_rows, "a_rows", lay, e)
        a_rows = a_rows.to(torch.int32).contiguous()
    else:
        max_rows = _max_rows(a, "a", lay, e, ("K",))
    d_shape = (max_rows, n_out) if lay == _lib.LAYOUT_VARIABLE else (e, max_rows, n_out)
    if a.shape[-1] != k:
        raise ValueError("a: K = %d but b gives K = %d" % (a.shape[-1], k))
    a_code = _tensors.dtype_code(a.dtype, "a")
    d_code = a_code if out_dtype is None else _tensors.dtype_code(out_dtype, "out_dtype")
    if out is not None:
        d_code = _tensors.dtype_code(out.dtype, "out")
    device = a.device.index if a.device.index is not None else torch.cuda.current_device()

    epilogue = 0
    bias_code = None
    if alpha is not None:
        alpha = torch.as_tensor(alpha, device=a.device).to(torch.float32).contiguous()
        epilogue |= _lib.MOEGEMM_EPILOGUE_ALPHA
    if row_scale is not None:
        row_scale = torch.as_tensor(row_scale, device=a.device).to(torch.float32).contiguous()
        epilogue |= _lib.MOEGEMM_EPILOGUE_ROW_SCALE
    if bias is not None:
        if not isinstance(bias, torch.Tensor):
            bias = torch.utils.dlpack.from_dlpack(bias)
        bias_code = _tensors.dtype_code(bias.dtype, "bias")
        epilogue |= _lib.MOEGEMM_EPILOGUE_BIAS
    act_alpha = _float(activation_alpha, "activation_alpha")
    act_limit = _float(activation_limit, "activation_limit")

    if lay == _lib.LAYOUT_FIXED:
        if sizes is not None:
            raise ValueError("sizes: FIXED takes no sizes (pass None)")
        on_device = False
    else:
        if sizes is None:
            raise ValueError("sizes: VARIABLE and MASKED need the rows of each expert")
        on_device = (isinstance(sizes, torch.Tensor) and sizes.is_cuda) or \
            hasattr(sizes, "__cuda_array_interface__")
        if isinstance(sizes, torch.Tensor) and not sizes.is_cuda:
            sizes = sizes.tolist()

    key = (lay, e, n, k, max_rows, a_code, d_code, wl, device, on_device, backend)
    options = {}
    if epilogue or act or gather_rows:
        # 0.2 options; plain products keep the 0.1 key and problem
        key += (act, gate, act_alpha, act_limit, epilogue, bias_code, gather_rows)
        options = dict(activation=act, gate_layout=gate, activation_alpha=act_alpha,
                       activation_limit=act_limit, epilogue_inputs=epilogue,
                       bias_type=bias_code, gather_rows=gather_rows)
    plan = _get_plan(key, dict(layout=lay, num_experts=e, n=n, k=k, max_rows=max_rows,
                               a_type=a_code, d_type=d_code, weights=wl, device=device,
                               backend=backend, **options))
    if lay != _lib.LAYOUT_FIXED:
        if on_device:
            ptr = sizes.data_ptr() if isinstance(sizes, torch.Tensor) else \
                sizes.__cuda_array_interface__["data"][0]
            if plan._sizes_key != ("device", ptr) or plan._sizes_keepalive is not sizes:
                plan.set_expert_sizes(sizes)
        else:
            values = tuple(int(s) for s in sizes)
            if plan._sizes_key != ("host", values):
                plan.set_expert_sizes(values)
    if out is None:
        zero = on_device or (lay == _lib.LAYOUT_VARIABLE and sum(values) < max_rows)
        alloc = torch.zeros if zero else torch.empty
        out = alloc(d_shape, dtype=_tensors.torch_dtype(d_code), device=a.device)
    return plan.execute(a, b, out, stream=stream, alpha=alpha, row_scale=row_scale, bias=bias,
                        a_rows=a_rows)

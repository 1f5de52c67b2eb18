"""The MoE layer (libmoegemm 0.2): MoeLayer owns one moegemm_moe_plan_t; moe_layer() is the
PyTorch call, with plans cached per shape and registered as the custom op moegemm::moe_layer.

    out[t] = sum_j topk_weights[t, j] * FC2_e(act(FC1_e(x[t])))   for e = topk_ids[t, j]

No annotations here are strings (no ``from __future__ import annotations``): torch.library
reads the op's schema from them.
"""
import collections
import ctypes
import threading
from typing import Optional

from . import _lib, _tensors
from .errors import check, require
from .plan import (ACTIVATION_LABEL, _BACKENDS, _PlanBase, _enum, _float, _init_sized, _int,
                   activation_code, epilogue_bits, gate_layout_code)

_INDEX_TYPES = {"int32": _lib.INDEX_INT32, "i32": _lib.INDEX_INT32,
                "int64": _lib.INDEX_INT64, "i64": _lib.INDEX_INT64}
_INDEX_TYPESTR = {_lib.INDEX_INT32: "<i4", _lib.INDEX_INT64: "<i8"}
_LAYER_DTYPES = (_lib.DTYPE_BF16, _lib.DTYPE_F16)
#: the layer's weight_scales: weights of dtype, or E4M3 with 128 x 128 block scales
_WEIGHT_SCALES = {"none": _lib.SCALE_NONE, "block": _lib.SCALE_BLOCK}
#: rows and columns of a weight scale's block (w1_scale, w2_scale)
SCALE_BLOCK_SIZE = 128


def _blocks(n):
    """ceil(n / 128): the 128-wide blocks of n rows or columns."""
    return -(-n // SCALE_BLOCK_SIZE)


def index_type_code(value, what="id_type"):
    """'int32' | 'int64' | torch.int32 | torch.int64 | an int (passed through)."""
    if isinstance(value, bool):
        raise TypeError("%s: expected 'int32', 'int64', a torch dtype or an int, got %r"
                        % (what, value))
    if isinstance(value, (int, str)):
        return _enum(value, _INDEX_TYPES, what)
    torch = _tensors._torch()
    if torch is not None and value in (torch.int32, torch.int64):
        return _lib.INDEX_INT32 if value == torch.int32 else _lib.INDEX_INT64
    raise TypeError("%s: expected 'int32', 'int64', a torch dtype or an int, got %r"
                    % (what, value))


def _set_ints(p, fields):
    for name, value, bits in fields:
        v = _int(value, name)
        if not -(1 << (bits - 1)) <= v < (1 << (bits - 1)):
            raise OverflowError("%s = %d does not fit in int%d_t" % (name, v, bits))
        setattr(p, name, v)


def make_moe_problem(*, num_experts, top_k, hidden, intermediate, max_tokens, dtype="bf16",
                     activation=None, gate_layout="gate_up", activation_alpha=None,
                     activation_limit=None, first_expert=0, local_experts=0, fc1_inputs=None,
                     fc2_inputs=None, id_type="int32", backend="auto", device=0,
                     expected_tokens=0, weight_scales="none"):
    """A moegemm_moe_problem_t filled by moegemm_moe_problem_init_sized (this mirror's size),
    then from the arguments. Defaults are the C defaults (activation None; most models want
    'swiglu'). fc1_inputs / fc2_inputs: the arrays each execute passes, names among 'alpha'
    and 'bias' (or MOEGEMM_EPILOGUE_* bits). weight_scales: 'none' (w1, w2 of dtype) or
    'block' (w1, w2 E4M3 with 128 x 128 block scales w1_scale, w2_scale; dtype bf16, hidden
    and intermediate multiples of 16, no fc1_inputs / fc2_inputs). Names are mapped here, int
    enum values are passed through, and the library checks the ranges."""
    p = _init_sized(_lib.moegemm_moe_problem_t, "moegemm_moe_problem_init_sized")
    _set_ints(p, (("num_experts", num_experts, 32), ("top_k", top_k, 32),
                  ("first_expert", first_expert, 32), ("local_experts", local_experts, 32),
                  ("hidden", hidden, 64), ("intermediate", intermediate, 64),
                  ("max_tokens", max_tokens, 64), ("device", device, 32),
                  ("expected_tokens", expected_tokens, 64)))
    p.dtype = _tensors.dtype_code(dtype, "dtype")
    p.activation = activation_code(activation)
    p.gate_layout = gate_layout_code(gate_layout)
    p.activation_alpha = _float(activation_alpha, "activation_alpha")
    p.activation_limit = _float(activation_limit, "activation_limit")
    p.fc1_inputs = epilogue_bits(fc1_inputs, "fc1_inputs", ("alpha", "bias"))
    p.fc2_inputs = epilogue_bits(fc2_inputs, "fc2_inputs", ("alpha", "bias"))
    p.id_type = index_type_code(id_type)
    p.backend = _enum(backend, _BACKENDS, "backend")
    p.weight_scales = _enum(weight_scales, _WEIGHT_SCALES, "weight_scales")
    return p


def make_moe_tensors():
    """A moegemm_moe_tensors_t filled by moegemm_moe_tensors_init_sized (this mirror's size)."""
    return _init_sized(_lib.moegemm_moe_tensors_t, "moegemm_moe_tensors_init_sized")


class MoeLayer(_PlanBase):
    """A libmoegemm layer plan (moegemm_moe_plan_t): routing, FC1 with its gather and
    activation, FC2 and the weighted combine, for up to max_tokens tokens.

    Keywords mirror moegemm_moe_problem_t (see make_moe_problem). Use as a context manager or
    call close(); the C plan is destroyed exactly once (also by __del__). Pending executions
    must have finished before close() (retire() waits for them). Creating a layer allocates
    device memory: never inside CUDA graph capture.
    """

    _C_PLAN = "moegemm_moe_plan"
    _make_problem = staticmethod(make_moe_problem)

    # --- problem ---------------------------------------------------------------------------
    num_experts = property(lambda self: self._problem.num_experts)
    first_expert = property(lambda self: self._problem.first_expert)
    top_k = property(lambda self: self._problem.top_k)
    hidden = property(lambda self: self._problem.hidden)
    intermediate = property(lambda self: self._problem.intermediate)
    max_tokens = property(lambda self: self._problem.max_tokens)
    dtype = property(lambda self: self._problem.dtype)
    activation = property(lambda self: self._problem.activation)
    id_type = property(lambda self: self._problem.id_type)
    device = property(lambda self: self._problem.device)
    weight_scales = property(lambda self: self._problem.weight_scales)

    @property
    def local_experts(self):
        """This rank's experts (local_experts, or num_experts when 0)."""
        p = self._problem
        return p.local_experts or p.num_experts

    @property
    def gated(self):
        return self._problem.activation in _lib.GATED_ACTIVATIONS

    @property
    def weight_dtype(self):
        """The dtype of w1 and w2: E4M3 with weight_scales 'block', else the layer's dtype."""
        p = self._problem
        return _lib.DTYPE_E4M3 if p.weight_scales == _lib.SCALE_BLOCK else p.dtype

    def __repr__(self):
        p = self._problem
        return ("<moegemm.MoeLayer E=%d [%d, +%d) top_k=%d H=%d I=%d max_tokens=%d %s %s%s%s>"
                % (p.num_experts, p.first_expert, self.local_experts, p.top_k, p.hidden,
                   p.intermediate, p.max_tokens, _tensors.DTYPE_LABEL.get(p.dtype, p.dtype),
                   ACTIVATION_LABEL.get(p.activation, p.activation),
                   " e4m3-block-weights" if p.weight_scales == _lib.SCALE_BLOCK else "",
                   " closed" if self.closed else ""))

    # --- queries (workspace_size: _PlanBase) ----------------------------------------------
    def describe(self):
        """One line on the layer's kernels."""
        return self._describe()

    @property
    def status_word(self):
        """Device address (int) of the layer's uint32 status word (MOEGEMM_ROWS_CLAMPED_INDEX
        for out-of-range routing ids, MOEGEMM_SIZES_CLAMPED_* for a device token count)."""
        return self._status_word()

    def expected_shapes(self, tokens=None):
        """{name: shape} of the tensors for `tokens` rows (default max_tokens): x, topk_ids,
        topk_weights, w1, w2, b1, b2, alpha1, alpha2, w1_scale, w2_scale (weight_scales
        'block': one fp32 per 128 x 128 block), out."""
        p = self._problem
        t = p.max_tokens if tokens is None else tokens
        le, h, i = self.local_experts, p.hidden, p.intermediate
        n1 = 2 * i if self.gated else i
        return {"x": (t, h), "topk_ids": (t, p.top_k), "topk_weights": (t, p.top_k),
                "w1": (le, n1, h), "w2": (le, h, i), "b1": (le, n1), "b2": (le, h),
                "alpha1": (le,), "alpha2": (le,), "w1_scale": (le, _blocks(n1), _blocks(h)),
                "w2_scale": (le, _blocks(h), _blocks(i)), "out": (t, h)}

    # --- execution -------------------------------------------------------------------------
    def execute(self, x, topk_ids, topk_weights, w1, w2, out, *, b1=None, b2=None,
                alpha1=None, alpha2=None, w1_scale=None, w2_scale=None, num_tokens=None,
                num_tokens_device=None, workspace=None, stream=None):
        """Enqueue the layer on the stream; returns out without waiting.

        x [T, H], out [T, H] of the layer's dtype; topk_ids [T, top_k] of its id_type;
        topk_weights [T, top_k] float32; w1 [L, 2I (gated) or I, H], w2 [L, H, I] (L: the
        local experts) of the layer's dtype, or E4M3 (torch.float8_e4m3fn) with weight_scales
        'block'; b1 [L, 2I or I], b2 [L, H] (the layer's dtype) and alpha1, alpha2
        (float32 [L]) as the plan's fc1_inputs / fc2_inputs say; w1_scale float32
        [L, ceil(2I or I / 128), ceil(H / 128)] and w2_scale float32 [L, ceil(H / 128),
        ceil(I / 128)] with weight_scales 'block'. T <= max_tokens.
        num_tokens: the token count on the host (default T). num_tokens_device: an int32
        CUDA scalar read by the GPU at every execution and graph replay; then the buffers
        have max_tokens rows and rows from the device count on are not written.
        workspace / stream: as Plan.execute.
        """
        return self._submit("moegemm_moe_execute", x, topk_ids, topk_weights, w1, w2, out,
                            dict(b1=b1, b2=b2, alpha1=alpha1, alpha2=alpha2, w1_scale=w1_scale,
                                 w2_scale=w2_scale), num_tokens, num_tokens_device, workspace,
                            stream)

    def autotune(self, x, topk_ids, topk_weights, w1, w2, out, *, b1=None, b2=None,
                 alpha1=None, alpha2=None, w1_scale=None, w2_scale=None, num_tokens=None,
                 num_tokens_device=None, workspace=None, stream=None):
        """Run the layer once with its two grouped GEMMs tuned (moegemm_moe_plan_autotune,
        libmoegemm 0.2); returns out.

        The arguments are execute's, checked as execute checks them. FC1 is tuned first, on
        the tokens this call routes to each expert, then FC2 on FC1's product: as
        Plan.autotune, every candidate kernel is timed on these buffers and the fastest kept,
        so tune with routing typical of the workload (the timing uses this call's expert
        sizes). The chosen kernels stay the layer's (describe() then says "tuned:" for FC1
        and for FC2) and become the process's choice for layers of the same shapes, written
        to the tune cache file if one is named (set_tune_cache_file). Blocking: the call waits
        for the stream, and out then holds the layer's output.

        Raises InvalidStateError when the stream is being captured into a CUDA graph (tune
        before capturing); the layer then keeps its kernels.
        """
        return self._submit("moegemm_moe_plan_autotune", x, topk_ids, topk_weights, w1, w2, out,
                            dict(b1=b1, b2=b2, alpha1=alpha1, alpha2=alpha2, w1_scale=w1_scale,
                                 w2_scale=w2_scale), num_tokens, num_tokens_device, workspace,
                            stream)

    def _submit(self, function, x, topk_ids, topk_weights, w1, w2, out, arrays, num_tokens,
                num_tokens_device, workspace, stream):
        """What execute and autotune share: checks the tensors, the optional `arrays`
        ({name: array or None}: b1, b2, alpha1, alpha2, w1_scale, w2_scale) and the token
        count in Python, fills a moegemm_moe_tensors_t and calls the C `function` with it.
        Returns out."""
        p = self._problem
        vx = _tensors.view(x, "x")
        if len(vx.shape) != 2:
            raise ValueError("x: expected [T, H], got shape %r" % (vx.shape,))
        rows = vx.shape[0]
        if rows > p.max_tokens:
            raise ValueError("x: %d tokens, the layer's max_tokens is %d" % (rows, p.max_tokens))
        shapes = self.expected_shapes(rows)
        self._check_tensor(vx, "x", shapes["x"], p.dtype)
        views = {"x": vx}
        for name, arr, dtype in (("out", out, p.dtype), ("w1", w1, self.weight_dtype),
                                 ("w2", w2, self.weight_dtype)):
            v = _tensors.view(arr, name)
            self._check_tensor(v, name, shapes[name], dtype)
            views[name] = v
        vi = _tensors.view(topk_ids, "topk_ids")
        if vi.shape != shapes["topk_ids"]:
            raise ValueError("topk_ids: expected shape %r, got %r" % (shapes["topk_ids"], vi.shape))
        self._check_array(vi, "topk_ids", rows * p.top_k,
                          "int64" if p.id_type == _lib.INDEX_INT64 else "int32")
        vw = _tensors.view(topk_weights, "topk_weights")
        if vw.shape != shapes["topk_weights"]:
            raise ValueError("topk_weights: expected shape %r, got %r"
                             % (shapes["topk_weights"], vw.shape))
        self._check_array(vw, "topk_weights", rows * p.top_k, _lib.DTYPE_F32)
        for name, dtype in (("b1", p.dtype), ("b2", p.dtype), ("alpha1", _lib.DTYPE_F32),
                            ("alpha2", _lib.DTYPE_F32), ("w1_scale", _lib.DTYPE_F32),
                            ("w2_scale", _lib.DTYPE_F32)):
            arr = arrays[name]
            if arr is None:
                continue
            v = _tensors.view(arr, name)
            count = 1
            for s in shapes[name]:
                count *= s
            self._check_array(v, name, count, dtype)
            views[name] = v
        t = make_moe_tensors()
        if num_tokens_device is not None:
            if num_tokens is not None:
                raise ValueError("num_tokens and num_tokens_device: pass one of them")
            if rows != p.max_tokens:
                raise ValueError("num_tokens_device: the tensors must have max_tokens = %d rows "
                                 "(the GPU may read up to that many), x has %d"
                                 % (p.max_tokens, rows))
            vn = _tensors.view(num_tokens_device, "num_tokens_device")
            self._check_array(vn, "num_tokens_device", 1, "int32")
            t.num_tokens_device = ctypes.cast(ctypes.c_void_p(vn.ptr),
                                              ctypes.POINTER(ctypes.c_int32))
        else:
            n = rows if num_tokens is None else _int(num_tokens, "num_tokens")
            if not 0 <= n <= rows:
                raise ValueError("num_tokens = %d: the tensors have %d rows" % (n, rows))
            t.num_tokens = n
        f32 = ctypes.POINTER(ctypes.c_float)
        t.x = vx.ptr or None
        t.topk_ids = vi.ptr or None
        t.topk_weights = ctypes.cast(ctypes.c_void_p(vw.ptr), f32)
        t.w1, t.w2, t.out = views["w1"].ptr or None, views["w2"].ptr or None, \
            views["out"].ptr or None
        for name in ("b1", "b2"):
            if name in views:
                setattr(t, name, views[name].ptr or None)
        for name in ("alpha1", "alpha2", "w1_scale", "w2_scale"):
            if name in views:
                setattr(t, name, ctypes.cast(ctypes.c_void_p(views[name].ptr), f32))
        fn = require(function)
        ws_ptr, ws_bytes, stream_arg = self._launch_args(workspace, stream, (x, out), vx.is_torch)
        check(fn(self._h(), ctypes.byref(t), ws_ptr, ws_bytes, stream_arg), function)
        return out


# ------------------------------------------------------------------------------------------
# moe_layer: plans cached per shape, the custom op
# ------------------------------------------------------------------------------------------

_MAX_CACHED_LAYERS = 64
_cache = collections.OrderedDict()  # key -> MoeLayer, process-wide (plans are immutable)
_cache_lock = threading.Lock()


def clear_moe_layer_cache():
    """Destroy the layer plans moe_layer cached, each once the work it queued has finished
    (MoeLayer.retire). Not under CUDA graph capture; graphs that captured them must not be
    replayed afterwards."""
    while True:
        with _cache_lock:
            if not _cache:
                return
            _, layer = _cache.popitem()
        layer.retire()


def cached_layers():
    """The cached layer plans (a snapshot), for diagnostics."""
    with _cache_lock:
        return list(_cache.values())


def round_tokens(tokens):
    """The max_tokens of the plan that serves `tokens` tokens: the next power of two, so a
    changing T re-plans only when it crosses one."""
    return 1 << max(0, int(tokens) - 1).bit_length()


def _layer_for(key, kwargs, torch):
    with _cache_lock:
        layer = _cache.get(key)
        if layer is not None:
            _cache.move_to_end(key)
            return layer
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            "moegemm.moe_layer: no layer plan for this shape yet (%s), and creating one "
            "allocates device memory, which CUDA graph capture forbids. Call it once for this "
            "shape (same dtype, device, options, and tokens rounded up to the power of two %d) "
            "before capturing." % (", ".join("%s=%s" % kv for kv in sorted(kwargs.items())),
                                  kwargs["max_tokens"]))
    layer = MoeLayer(**kwargs)
    dropped = []
    with _cache_lock:
        existing = _cache.get(key)
        if existing is not None:  # another thread made it meanwhile
            dropped.append(layer)
            layer = existing
        else:
            _cache[key] = layer
            while len(_cache) > _MAX_CACHED_LAYERS:
                dropped.append(_cache.popitem(last=False)[1])
    for old in dropped:
        old.retire()
    return layer


def _check_moe_args(torch, x, topk_ids, topk_weights, w1, w2, activation, b1, b2, alpha1,
                    alpha2, gate_layout="gate_up", activation_alpha=None, activation_limit=None,
                    w1_scale=None, w2_scale=None):
    """Shape, dtype and option checks that need no GPU (ValueError / TypeError). Returns
    (T, H, I, L, gated). w1_scale / w2_scale given: w1 and w2 are E4M3 with block scales."""
    gate_layout_code(gate_layout)
    _float(activation_alpha, "activation_alpha")
    _float(activation_limit, "activation_limit")
    for name, t in (("x", x), ("topk_ids", topk_ids), ("topk_weights", topk_weights),
                    ("w1", w1), ("w2", w2)):
        if not isinstance(t, torch.Tensor):
            raise TypeError("%s: expected a torch.Tensor, got %s" % (name, type(t).__name__))
    if x.dim() != 2:
        raise ValueError("x: expected [T, H], got shape %r" % (tuple(x.shape),))
    if x.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError("x: expected bfloat16 or float16, got %s" % x.dtype)
    if topk_ids.dim() != 2 or topk_ids.shape[0] != x.shape[0]:
        raise ValueError("topk_ids: expected [T=%d, top_k], got shape %r"
                         % (x.shape[0], tuple(topk_ids.shape)))
    if topk_ids.dtype not in (torch.int32, torch.int64):
        raise TypeError("topk_ids: expected int32 or int64, got %s" % topk_ids.dtype)
    if tuple(topk_weights.shape) != tuple(topk_ids.shape):
        raise ValueError("topk_weights: expected shape %r (as topk_ids), got %r"
                         % (tuple(topk_ids.shape), tuple(topk_weights.shape)))
    if not topk_weights.is_floating_point():
        raise TypeError("topk_weights: expected a floating dtype, got %s" % topk_weights.dtype)
    if w1.dim() != 3 or w2.dim() != 3:
        raise ValueError("w1, w2: expected [E_local, 2I or I, H] and [E_local, H, I], got "
                         "shapes %r and %r" % (tuple(w1.shape), tuple(w2.shape)))
    t, h = x.shape
    le, i = w2.shape[0], w2.shape[2]
    act = activation_code(activation)
    gated = act in _lib.GATED_ACTIVATIONS
    if tuple(w2.shape) != (le, h, i):
        raise ValueError("w2: expected [E_local, H=%d, I], got shape %r" % (h, tuple(w2.shape)))
    n1 = 2 * i if gated else i
    if tuple(w1.shape) != (le, n1, h):
        raise ValueError("w1: expected [E_local=%d, %s=%d, H=%d] for activation %r, got shape %r"
                         % (le, "2I" if gated else "I", n1, h, activation, tuple(w1.shape)))
    fp8 = w1_scale is not None or w2_scale is not None
    e4m3 = getattr(torch, "float8_e4m3fn", None)
    if fp8:
        if w1_scale is None or w2_scale is None:
            raise ValueError("w1_scale, w2_scale: E4M3 weights take both block scales, got only "
                             "%s" % ("w1_scale" if w2_scale is None else "w2_scale"))
        if e4m3 is None:
            raise TypeError("w1_scale, w2_scale: E4M3 weights need torch.float8_e4m3fn "
                            "(torch >= 2.1)")
        if x.dtype != torch.bfloat16:
            raise TypeError("x: expected bfloat16 with E4M3 weights (w1_scale, w2_scale), got %s"
                            % x.dtype)
    for name, w in (("w1", w1), ("w2", w2)):
        if fp8 and w.dtype != e4m3:
            raise TypeError("%s: expected torch.float8_e4m3fn (w1_scale and w2_scale are given), "
                            "got %s" % (name, w.dtype))
        if not fp8 and w.dtype != x.dtype:
            raise TypeError("%s: expected %s (x's dtype), got %s%s"
                            % (name, x.dtype, w.dtype,
                               "; E4M3 weights need w1_scale and w2_scale"
                               if e4m3 is not None and w.dtype == e4m3 else ""))
    for name, b, shape in (("b1", b1, (le, n1)), ("b2", b2, (le, h))):
        if b is None:
            continue
        if not isinstance(b, torch.Tensor):
            raise TypeError("%s: expected a torch.Tensor or None, got %s" % (name, type(b).__name__))
        if tuple(b.shape) != shape:
            raise ValueError("%s: expected shape %r, got %r" % (name, shape, tuple(b.shape)))
        if b.dtype != x.dtype:
            raise TypeError("%s: expected %s (x's dtype), got %s" % (name, x.dtype, b.dtype))
    for name, a in (("alpha1", alpha1), ("alpha2", alpha2)):
        if a is None:
            continue
        if not isinstance(a, torch.Tensor):
            raise TypeError("%s: expected a torch.Tensor or None, got %s" % (name, type(a).__name__))
        if tuple(a.shape) != (le,):
            raise ValueError("%s: expected shape (%d,) (one per local expert), got %r"
                             % (name, le, tuple(a.shape)))
        if not a.is_floating_point():
            raise TypeError("%s: expected a floating dtype, got %s" % (name, a.dtype))
    for name, s, shape in (("w1_scale", w1_scale, (le, _blocks(n1), _blocks(h))),
                           ("w2_scale", w2_scale, (le, _blocks(h), _blocks(i)))):
        if s is None:
            continue
        if not isinstance(s, torch.Tensor):
            raise TypeError("%s: expected a torch.Tensor or None, got %s"
                            % (name, type(s).__name__))
        if tuple(s.shape) != shape:
            raise ValueError("%s: expected shape %r (one per 128 x 128 block), got %r"
                             % (name, shape, tuple(s.shape)))
        if not s.is_floating_point():
            raise TypeError("%s: expected a floating dtype, got %s" % (name, s.dtype))
    return t, h, i, le, gated


def _moe_layer_impl(x, topk_ids, topk_weights, w1, w2, activation, gate_layout, b1, b2, alpha1,
                    alpha2, activation_alpha, activation_limit, first_expert, num_experts, out,
                    w1_scale=None, w2_scale=None, tune=False):
    """The eager implementation behind moegemm::moe_layer and moegemm::moe_layer_out; with
    `tune`, the cached layer is tuned on this call (MoeLayer.autotune) instead."""
    torch = _tensors._torch()
    t, h, i, le, _ = _check_moe_args(torch, x, topk_ids, topk_weights, w1, w2, activation,
                                     b1, b2, alpha1, alpha2, gate_layout, activation_alpha,
                                     activation_limit, w1_scale, w2_scale)
    if not x.is_cuda:
        raise ValueError("x: must be a CUDA tensor, got one on %s" % x.device)
    dev = x.device
    named = {"topk_ids": topk_ids, "topk_weights": topk_weights, "w1": w1, "w2": w2, "b1": b1,
             "b2": b2, "alpha1": alpha1, "alpha2": alpha2, "w1_scale": w1_scale,
             "w2_scale": w2_scale, "out": out}
    for name, v in named.items():
        if v is not None and v.device != dev:
            raise ValueError("%s: on %s, x is on %s" % (name, v.device, dev))
    for name, v in (("w1", w1), ("w2", w2), ("b1", b1), ("b2", b2)):
        # weights are not copied behind the caller's back
        if v is not None and not v.is_contiguous():
            raise ValueError("%s: must be contiguous (dense, row-major)" % name)
    if out is None:
        out = torch.empty((t, h), dtype=x.dtype, device=dev)
    elif tuple(out.shape) != (t, h) or out.dtype != x.dtype or not out.is_contiguous():
        raise ValueError("out: expected a contiguous %s tensor of shape %r, got %s %r%s"
                         % (x.dtype, (t, h), out.dtype, tuple(out.shape),
                            "" if out.is_contiguous() else " (not contiguous)"))
    if t == 0:
        return out
    x = x.contiguous()
    topk_ids = topk_ids.contiguous()
    topk_weights = topk_weights.to(torch.float32).contiguous()
    alpha1 = None if alpha1 is None else alpha1.to(torch.float32).contiguous()
    alpha2 = None if alpha2 is None else alpha2.to(torch.float32).contiguous()
    w1_scale = None if w1_scale is None else w1_scale.to(torch.float32).contiguous()
    w2_scale = None if w2_scale is None else w2_scale.to(torch.float32).contiguous()
    fc1 = (_lib.MOEGEMM_EPILOGUE_ALPHA if alpha1 is not None else 0) | \
        (_lib.MOEGEMM_EPILOGUE_BIAS if b1 is not None else 0)
    fc2 = (_lib.MOEGEMM_EPILOGUE_ALPHA if alpha2 is not None else 0) | \
        (_lib.MOEGEMM_EPILOGUE_BIAS if b2 is not None else 0)
    kwargs = dict(num_experts=le if num_experts is None else int(num_experts),
                  first_expert=int(first_expert), local_experts=le, top_k=topk_ids.shape[1],
                  hidden=h, intermediate=i, max_tokens=round_tokens(t),
                  dtype=_tensors.dtype_code(x.dtype, "x"), activation=activation_code(activation),
                  gate_layout=gate_layout_code(gate_layout),
                  activation_alpha=_float(activation_alpha, "activation_alpha"),
                  activation_limit=_float(activation_limit, "activation_limit"),
                  fc1_inputs=fc1, fc2_inputs=fc2,
                  id_type=_lib.INDEX_INT32 if topk_ids.dtype == torch.int32 else _lib.INDEX_INT64,
                  device=dev.index,
                  weight_scales=_lib.SCALE_BLOCK if w1_scale is not None else _lib.SCALE_NONE)
    key = tuple(sorted(kwargs.items()))
    layer = _layer_for(key, kwargs, torch)
    stream = torch.cuda.current_stream(dev).cuda_stream
    with layer._lock:  # the per-stream workspace dictionary
        run = layer.autotune if tune else layer.execute
        run(x, topk_ids, topk_weights, w1, w2, out, b1=b1, b2=b2, alpha1=alpha1, alpha2=alpha2,
            w1_scale=w1_scale, w2_scale=w2_scale, num_tokens=t, stream=stream)
    return out


_op = None       # torch.ops.moegemm.moe_layer once registered
_op_out = None   # torch.ops.moegemm.moe_layer_out


def _register_ops(torch):
    """Registers moegemm::moe_layer (functional) and moegemm::moe_layer_out (writes `out`) with
    torch.library.custom_op and their fake implementations, so that torch.compile traces them
    and CUDA graphs capture them. Needs torch >= 2.4; returns False otherwise."""
    global _op, _op_out
    library = getattr(torch, "library", None)
    if library is None or not hasattr(library, "custom_op"):
        return False
    Tensor = torch.Tensor

    try:
        @library.custom_op("moegemm::moe_layer", mutates_args=())
        def moe_layer_op(x: Tensor, topk_ids: Tensor, topk_weights: Tensor, w1: Tensor,
                         w2: Tensor, activation: Optional[str] = "swiglu",
                         gate_layout: str = "gate_up", b1: Optional[Tensor] = None,
                         b2: Optional[Tensor] = None, alpha1: Optional[Tensor] = None,
                         alpha2: Optional[Tensor] = None,
                         activation_alpha: Optional[float] = None,
                         activation_limit: Optional[float] = None, first_expert: int = 0,
                         num_experts: Optional[int] = None, w1_scale: Optional[Tensor] = None,
                         w2_scale: Optional[Tensor] = None) -> Tensor:
            return _moe_layer_impl(x, topk_ids, topk_weights, w1, w2, activation, gate_layout,
                                   b1, b2, alpha1, alpha2, activation_alpha, activation_limit,
                                   first_expert, num_experts, None, w1_scale, w2_scale)

        @moe_layer_op.register_fake
        def _moe_layer_fake(x, topk_ids, topk_weights, w1, w2, activation="swiglu",
                            gate_layout="gate_up", b1=None, b2=None, alpha1=None, alpha2=None,
                            activation_alpha=None, activation_limit=None, first_expert=0,
                            num_experts=None, w1_scale=None, w2_scale=None):
            torch._check(x.dim() == 2, lambda: "moegemm.moe_layer: x must be [T, H]")
            return x.new_empty((x.shape[0], x.shape[1]))

        @library.custom_op("moegemm::moe_layer_out", mutates_args=("out",))
        def moe_layer_out_op(out: Tensor, x: Tensor, topk_ids: Tensor, topk_weights: Tensor,
                             w1: Tensor, w2: Tensor, activation: Optional[str] = "swiglu",
                             gate_layout: str = "gate_up", b1: Optional[Tensor] = None,
                             b2: Optional[Tensor] = None, alpha1: Optional[Tensor] = None,
                             alpha2: Optional[Tensor] = None,
                             activation_alpha: Optional[float] = None,
                             activation_limit: Optional[float] = None, first_expert: int = 0,
                             num_experts: Optional[int] = None,
                             w1_scale: Optional[Tensor] = None,
                             w2_scale: Optional[Tensor] = None) -> None:
            _moe_layer_impl(x, topk_ids, topk_weights, w1, w2, activation, gate_layout, b1, b2,
                            alpha1, alpha2, activation_alpha, activation_limit, first_expert,
                            num_experts, out, w1_scale, w2_scale)

        @moe_layer_out_op.register_fake
        def _moe_layer_out_fake(out, x, topk_ids, topk_weights, w1, w2, activation="swiglu",
                                gate_layout="gate_up", b1=None, b2=None, alpha1=None,
                                alpha2=None, activation_alpha=None, activation_limit=None,
                                first_expert=0, num_experts=None, w1_scale=None,
                                w2_scale=None):
            return None
    except RuntimeError as exc:
        # Registered already (this module loaded twice, e.g. from two paths): reuse those.
        if "moe_layer" not in str(exc):
            raise
    _op = torch.ops.moegemm.moe_layer.default
    _op_out = torch.ops.moegemm.moe_layer_out.default
    return True


def _torch_for_ops():
    """torch, with the ops registered (at import time when torch is importable)."""
    torch = _tensors._torch()
    if torch is None:
        raise RuntimeError("moegemm.moe_layer needs PyTorch; use moegemm.MoeLayer otherwise")
    if _op is None:
        _register_ops(torch)
    return torch


def moe_layer(x, topk_ids, topk_weights, w1, w2, *, activation="swiglu", gate_layout="gate_up",
              b1=None, b2=None, alpha1=None, alpha2=None, activation_alpha=None,
              activation_limit=None, first_expert=0, num_experts=None, w1_scale=None,
              w2_scale=None, out=None):
    """A Mixture-of-Experts layer's experts on PyTorch tensors, fused by libmoegemm:

        h = act(x[t] @ w1[e].T (* alpha1[e]) (+ b1[e]));  y = h @ w2[e].T (* alpha2[e]) (+ b2[e])
        out[t] = sum over j of topk_weights[t, j] * y,  e = topk_ids[t, j] - first_expert

    x [T, H] bf16 or f16; topk_ids [T, k] int32 or int64 (torch.topk's); topk_weights [T, k]
    (float32; other float dtypes are converted); w1 [E_local, 2I (gated) or I, H]; w2
    [E_local, H, I]; b1 [E_local, 2I or I], b2 [E_local, H] of x's dtype; alpha1, alpha2
    [E_local] float. E4M3 weights (DeepSeek-V3's 128 x 128 block scales): w1, w2
    torch.float8_e4m3fn with w1_scale [E_local, ceil(2I or I / 128), ceil(H / 128)] and
    w2_scale [E_local, ceil(H / 128), ceil(I / 128)] (float; converted to float32), x bf16,
    H and I multiples of 16, no b1/b2/alpha1/alpha2. activation: 'swiglu' (default) |
    'geglu' | 'swiglu_clamped' (with activation_alpha and activation_limit; gpt-oss: 1.702,
    7.0) | 'silu' | 'gelu_tanh' | None; gate_layout: 'gate_up' | 'up_gate' | 'interleaved'.
    Expert parallelism: this rank holds experts [first_expert, first_expert + E_local) of
    num_experts (default E_local); choices of other experts are skipped, tokens without a
    local choice get zeros. Returns out [T, H] of x's dtype (written into `out` when given).
    The sum over choices runs in increasing j in fp32: bitwise reproducible.

    Registered as the custom op torch.ops.moegemm.moe_layer (moe_layer_out with out=), so
    torch.compile traces it and CUDA graphs capture it. Plans are cached per shape, dtype,
    device and options, with max_tokens = T rounded up to a power of two; creating one
    allocates device memory, so the first call for a shape must run outside graph capture
    (a capture that needs a new plan raises RuntimeError).
    """
    op, op_out = _op, _op_out
    if op is None:  # not registered at import (torch imported later, or torch < 2.4)
        _torch_for_ops()
        op, op_out = _op, _op_out
    args = (x, topk_ids, topk_weights, w1, w2)
    kwargs = dict(activation=activation, gate_layout=gate_layout, b1=b1, b2=b2, alpha1=alpha1,
                  alpha2=alpha2, activation_alpha=activation_alpha,
                  activation_limit=activation_limit, first_expert=first_expert,
                  num_experts=num_experts, w1_scale=w1_scale, w2_scale=w2_scale)
    if op is None:  # torch without torch.library.custom_op: eager only
        return _moe_layer_impl(*args, activation, gate_layout, b1, b2, alpha1, alpha2,
                               activation_alpha, activation_limit, first_expert, num_experts,
                               out, w1_scale, w2_scale)
    if out is None:
        return op(*args, **kwargs)
    op_out(out, *args, **kwargs)
    return out


def autotune_moe_layer(x, topk_ids, topk_weights, w1, w2, *, activation="swiglu",
                       gate_layout="gate_up", b1=None, b2=None, alpha1=None, alpha2=None,
                       activation_alpha=None, activation_limit=None, first_expert=0,
                       num_experts=None, w1_scale=None, w2_scale=None, out=None):
    """moe_layer's call, run once with the layer's two grouped GEMMs tuned on these inputs'
    routing (MoeLayer.autotune): later moe_layer calls of the same shapes, graph replays
    included, run the tuned kernels. Blocking; not under CUDA graph capture
    (InvalidStateError). Returns out, as moe_layer does."""
    return _moe_layer_impl(x, topk_ids, topk_weights, w1, w2, activation, gate_layout, b1, b2,
                           alpha1, alpha2, activation_alpha, activation_limit, first_expert,
                           num_experts, out, w1_scale, w2_scale, tune=True)


def _register_at_import():
    try:
        import torch
    except Exception:  # noqa: BLE001 - no (usable) torch: the ctypes binding works without
        return
    try:
        _register_ops(torch)
    except Exception as exc:  # noqa: BLE001 - never break `import moegemm` for the op
        import warnings
        warnings.warn("moegemm: registering the custom op moegemm::moe_layer failed (%s); "
                      "moegemm.moe_layer runs eagerly" % (exc,), RuntimeWarning)


_register_at_import()

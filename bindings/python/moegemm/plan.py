"""Plan: owns one moegemm_plan_t."""
import ctypes
import os
import threading

from . import _lib, _tensors
from ._lib import lib
from .errors import check, require

_LAYOUTS = {"variable": _lib.LAYOUT_VARIABLE, "masked": _lib.LAYOUT_MASKED,
            "fixed": _lib.LAYOUT_FIXED}
_WEIGHTS = {"nk": _lib.WEIGHTS_NK, "kn": _lib.WEIGHTS_KN}
_BACKENDS = {"auto": _lib.BACKEND_AUTO, "native": _lib.BACKEND_NATIVE,
             "cublaslt": _lib.BACKEND_CUBLASLT}
_SCALES = {"none": _lib.SCALE_NONE, "per_tensor": _lib.SCALE_PER_TENSOR,
           "per_expert": _lib.SCALE_PER_EXPERT, "rowwise": _lib.SCALE_ROWWISE,
           "block": _lib.SCALE_BLOCK}
_SCALE_LABEL = {v: k for k, v in _SCALES.items()}
_ACTIVATIONS = {"none": _lib.ACTIVATION_NONE, "silu": _lib.ACTIVATION_SILU,
                "gelu_tanh": _lib.ACTIVATION_GELU_TANH, "swiglu": _lib.ACTIVATION_SWIGLU,
                "geglu": _lib.ACTIVATION_GEGLU, "swiglu_clamped": _lib.ACTIVATION_SWIGLU_CLAMPED}
ACTIVATION_LABEL = {v: k for k, v in _ACTIVATIONS.items()}
_GATE_LAYOUTS = {"gate_up": _lib.GATE_UP_HALVES, "up_gate": _lib.UP_GATE_HALVES,
                 "interleaved": _lib.GATE_UP_INTERLEAVED}
_EPILOGUE_BITS = {"alpha": _lib.MOEGEMM_EPILOGUE_ALPHA,
                  "row_scale": _lib.MOEGEMM_EPILOGUE_ROW_SCALE,
                  "bias": _lib.MOEGEMM_EPILOGUE_BIAS}


def _enum(value, table, what):
    """A name from `table` or an int (passed through: the library checks the range)."""
    if isinstance(value, bool):
        raise TypeError("%s: expected one of %s or an int, got %r" % (what, sorted(table), value))
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return table[value.lower()]
        except KeyError:
            raise ValueError("%s: unknown value %r (expected one of %s)"
                             % (what, value, ", ".join(repr(k) for k in table))) from None
    raise TypeError("%s: expected one of %s or an int, got %s"
                    % (what, sorted(table), type(value).__name__))


def activation_code(value, what="activation"):
    """None | 'none' | 'silu' | 'gelu_tanh' | 'swiglu' | 'geglu' | 'swiglu_clamped' | an int."""
    return _lib.ACTIVATION_NONE if value is None else _enum(value, _ACTIVATIONS, what)


def gate_layout_code(value, what="gate_layout"):
    """'gate_up' (default) | 'up_gate' | 'interleaved' | an int."""
    return _enum(value, _GATE_LAYOUTS, what)


def epilogue_bits(value, what="epilogue_inputs", allowed=("alpha", "row_scale", "bias")):
    """MOEGEMM_EPILOGUE_* bits from an int (passed through), a name ('alpha', 'row_scale',
    'bias') or an iterable of names; None or () is 0."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise TypeError("%s: expected names among %s or an int, got %r" % (what, allowed, value))
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        value = (value,)
    bits = 0
    try:
        names = list(value)
    except TypeError:
        raise TypeError("%s: expected names among %s or an int, got %s"
                        % (what, allowed, type(value).__name__)) from None
    for name in names:
        if not isinstance(name, str) or name.lower() not in allowed:
            raise ValueError("%s: unknown epilogue input %r (expected some of %s)"
                             % (what, name, ", ".join(repr(a) for a in allowed)))
        bits |= _EPILOGUE_BITS[name.lower()]
    return bits


def _float(value, what):
    """A finite-or-not Python float for a C float field (None is 0: unset)."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) and \
            not hasattr(value, "__float__"):
        raise TypeError("%s: expected a float or None, got %r" % (what, value))
    return float(value)


def _int(value, what):
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError("%s: expected an int, got %r" % (what, value))
    return value.__index__()


def _init_sized(struct_type, function):
    """A `struct_type` filled by the C function `function` (its moegemm_*_init_sized) with this
    mirror's size: a later library with a larger struct writes only this mirror's bytes."""
    s = struct_type()
    check(require(function)(ctypes.byref(s), ctypes.sizeof(s)), function)
    return s


def make_problem(*, num_experts, n, k, max_rows, layout="variable", a_type="bf16", b_type=None,
                 d_type=None, weights="nk", scale_mode="none", backend="auto", device=0,
                 expected_rows=0, force_kernel=None, activation=None, gate_layout="gate_up",
                 activation_alpha=None, activation_limit=None, epilogue_inputs=None,
                 bias_type=None, gather_rows=0):
    """A moegemm_problem_t filled by moegemm_problem_init_sized and then from the arguments.

    b_type defaults to a_type; d_type defaults to a_type for 16-bit inputs, bf16 otherwise.
    Names are mapped here; int enum values are passed through unchecked (the library checks
    them). Integers outside their C type's range raise OverflowError/ValueError here.

    The epilogue and gather (libmoegemm 0.2; every default keeps the plain product):
    activation: None | 'silu' | 'gelu_tanh' | 'swiglu' | 'geglu' | 'swiglu_clamped' (the gated
    ones halve D's columns); gate_layout: 'gate_up' | 'up_gate' | 'interleaved';
    activation_alpha / activation_limit: swiglu_clamped's (gpt-oss: 1.702, 7.0);
    epilogue_inputs: the arrays each execute passes, names among 'alpha', 'row_scale', 'bias'
    (or the MOEGEMM_EPILOGUE_* bits); bias_type: the bias's dtype (default: d_type, bf16 for
    e4m3 inputs); gather_rows: > 0 for a token-major A [gather_rows, K] read through a_rows.
    """
    p = _init_sized(_lib.moegemm_problem_t, "moegemm_problem_init_sized")
    a_code = _tensors.dtype_code(a_type, "a_type")
    p.layout = _enum(layout, _LAYOUTS, "layout")
    p.a_type = a_code
    p.b_type = a_code if b_type is None else _tensors.dtype_code(b_type, "b_type")
    if d_type is None:
        d_code = a_code if a_code in (_lib.DTYPE_BF16, _lib.DTYPE_F16) else _lib.DTYPE_BF16
    else:
        d_code = _tensors.dtype_code(d_type, "d_type")
    p.d_type = d_code
    p.weight_layout = _enum(weights, _WEIGHTS, "weights")
    p.scale_mode = _enum(scale_mode, _SCALES, "scale_mode")
    p.backend = _enum(backend, _BACKENDS, "backend")
    for name, value, bits in (("num_experts", num_experts, 32), ("n", n, 64), ("k", k, 64),
                              ("max_rows", max_rows, 64), ("device", device, 32),
                              ("expected_rows", expected_rows, 64)):
        v = _int(value, name)
        if not -(1 << (bits - 1)) <= v < (1 << (bits - 1)):
            raise OverflowError("%s = %d does not fit in int%d_t" % (name, v, bits))
        setattr(p, name, v)
    if force_kernel is not None:
        if isinstance(force_kernel, str):
            force_kernel = force_kernel.encode()
        if not isinstance(force_kernel, bytes):
            raise TypeError("force_kernel: expected a str or None, got %r" % (force_kernel,))
        p.force_kernel = force_kernel
    # 0.2 fields: left at 0 unless used, so that a 0.1 library (which refuses nonzero bytes
    # past the fields it knows) still serves plain products.
    p.activation = activation_code(activation)
    p.gate_layout = gate_layout_code(gate_layout)
    p.activation_alpha = _float(activation_alpha, "activation_alpha")
    p.activation_limit = _float(activation_limit, "activation_limit")
    p.epilogue_inputs = epilogue_bits(epilogue_inputs)
    if bias_type is not None:
        p.bias_type = _tensors.dtype_code(bias_type, "bias_type")
    elif p.epilogue_inputs & _lib.MOEGEMM_EPILOGUE_BIAS:
        p.bias_type = d_code if d_code in (_lib.DTYPE_BF16, _lib.DTYPE_F16, _lib.DTYPE_F32) \
            else _lib.DTYPE_BF16
    v = _int(gather_rows, "gather_rows")
    if not -(1 << 63) <= v < (1 << 63):
        raise OverflowError("gather_rows = %d does not fit in int64_t" % v)
    p.gather_rows = v
    return p


class _PlanBase:
    """What Plan and MoeLayer share: the C plan's creation, queries and destruction, the
    per-stream workspaces allocated with torch, the streams executed on (for retire), the
    checks of the arrays passed, the context manager and finalizer.

    Subclasses set _C_PLAN, the prefix of their C functions (<prefix>_create, _destroy,
    _get_workspace_size, _describe, _get_status_word), and _make_problem, the factory of
    their C problem struct (which has a .device); they may extend _setup and close."""

    _C_PLAN = None
    _make_problem = None

    def __init__(self, **kwargs):
        self._handle = None
        self._setup(self._make_problem(**kwargs))
        handle = ctypes.c_void_p()  # moegemm_plan_t and moegemm_moe_plan_t are void pointers
        self._call("create", ctypes.byref(self._problem), ctypes.byref(handle))
        self._handle = handle

    @classmethod
    def _detached(cls, **kwargs):
        """An object with the problem but no C plan (its C calls get a NULL plan and fail
        with InvalidValueError). For tests of the Python-side checks without a GPU."""
        self = cls.__new__(cls)
        self._handle = None
        self._setup(cls._make_problem(**kwargs))
        return self

    def _setup(self, problem):
        self._problem = problem
        self._lock = threading.Lock()
        self._workspaces = {}  # (device, stream handle) -> workspace tensor (one per stream)
        self._streams = set()  # stream handles the plan executed on (for retire())

    def _call(self, what, *args):
        """Calls the C function <_C_PLAN>_<what>(*args); raises the status's exception, or
        FunctionUnavailableError when the loaded library lacks the function."""
        name = "%s_%s" % (self._C_PLAN, what)
        check(require(name)(*args), name)

    @property
    def problem(self):
        """A copy of the C problem the plan was created from (moegemm_problem_t, or a
        MoeLayer's moegemm_moe_problem_t)."""
        copy = type(self._problem)()
        ctypes.pointer(copy)[0] = self._problem
        return copy

    @property
    def handle(self):
        """The C plan (moegemm_plan_t, or a MoeLayer's moegemm_moe_plan_t) as an int (0 when
        closed)."""
        return self._handle.value or 0 if self._handle is not None else 0

    def _h(self):
        return self._handle  # None -> NULL: the library reports "plan is NULL"

    @property
    def closed(self):
        return self._handle is None

    def close(self):
        """Destroy the C plan (idempotent)."""
        handle, self._handle = getattr(self, "_handle", None), None
        self._workspaces = {}
        self._streams = set()
        if handle is not None and handle.value:
            self._call("destroy", handle)

    @property
    def workspace_size(self):
        """Bytes of device workspace execute needs (fixed for the plan's life, but for an
        autotune that chose a kernel of the other backend)."""
        out = ctypes.c_size_t()
        self._call("get_workspace_size", self._h(), ctypes.byref(out))
        return out.value

    def _describe(self):
        buf = ctypes.create_string_buffer(_lib.MOEGEMM_DESCRIBE_MAX)
        self._call("describe", self._h(), buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    def _status_word(self):
        out = ctypes.POINTER(ctypes.c_uint32)()
        self._call("get_status_word", self._h(), ctypes.byref(out))
        return ctypes.cast(out, ctypes.c_void_p).value or 0

    def retire(self):
        """Wait for the work the plan queued on each stream it executed on, then close it:
        what a cache that drops plans the caller can no longer see must do (needs PyTorch
        for the waits; a stream under capture cannot be waited on and raises)."""
        if self._handle is not None and self._streams:
            torch = _tensors._torch()
            if torch is None:
                raise RuntimeError("%s.retire needs PyTorch to wait for the plan's streams"
                                   % type(self).__name__)
            device = torch.device("cuda", self._problem.device)
            for handle in sorted(self._streams):
                if handle == 0:  # the legacy default stream waits for every blocking stream
                    torch.cuda.synchronize(device)
                else:
                    torch.cuda.ExternalStream(handle, device=device).synchronize()
            self._streams.clear()
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # never raise from a finalizer
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _check_device(self, v, name):
        """Refuses memory the producer says is on another device than the plan's."""
        if v.device_index is not None and v.device_index != self._problem.device:
            raise ValueError("%s: on cuda:%d, the plan is on cuda:%d"
                             % (name, v.device_index, self._problem.device))

    def _workspace_for(self, nbytes, stream):
        # One buffer per stream: the native kernels keep their tensor maps and tile counter in
        # the workspace, so two streams running the plan at once need two (moegemm.h).
        dev = self._problem.device
        ws = self._workspaces.get((dev, stream))
        if ws is None or ws.numel() < nbytes:
            torch = _tensors._torch()
            if torch is None:
                raise RuntimeError("this plan needs %d bytes of workspace: pass workspace=... "
                                   "(device memory, 256-byte aligned) or install PyTorch"
                                   % nbytes)
            ws = torch.empty(nbytes, dtype=torch.uint8, device="cuda:%d" % dev)
            self._workspaces[(dev, stream)] = ws
        return ws.data_ptr(), ws.numel()
    @staticmethod
    def _dtype_ok(v, dtype):
        if v.dtype is not None:
            return v.dtype == dtype
        if v.is_torch:
            return False
        # a CAI typestr without a standard name (bf16 as '<V2', fp8 as '|V1' / '|u1')
        return (v.itemsize == _tensors.DTYPE_ITEMSIZE.get(dtype)
                and v.typestr is not None and v.typestr[1] in "Vu")

    def _check_tensor(self, v, name, shape, dtype):
        if v.shape != tuple(shape):
            raise ValueError("%s: expected shape %r, got %r" % (name, tuple(shape), v.shape))
        ok = self._dtype_ok(v, dtype)
        if not ok:
            got = getattr(v.owner, "dtype", None) if v.is_torch else v.typestr
            raise TypeError("%s: expected dtype %s, got %s"
                            % (name, _tensors.DTYPE_LABEL.get(dtype, dtype), got))
        if not v.is_contiguous():
            raise ValueError("%s: must be contiguous (dense, row-major)" % name)
        if not v.is_cuda:
            raise ValueError("%s: must be in CUDA device memory, got a CPU tensor" % name)
        self._check_device(v, name)

    def _check_array(self, v, name, count, dtype):
        """A per-call array the GPU reads by pointer: its type, contiguity, device and element
        count (the library cannot see a buffer's size). dtype: a DTYPE_* code, 'int32' or
        'int64'."""
        if dtype in ("int32", "int64"):
            ok = v.typestr == ("<i4" if dtype == "int32" else "<i8")
            label = dtype
        else:
            ok = self._dtype_ok(v, dtype)
            label = _tensors.DTYPE_LABEL.get(dtype, dtype)
        if not ok:
            got = getattr(v.owner, "dtype", None) if v.is_torch else v.typestr
            raise TypeError("%s: expected %s, got %s" % (name, label, got))
        if not v.is_cuda or not v.is_contiguous():
            raise ValueError("%s: must be contiguous CUDA memory" % name)
        self._check_device(v, name)
        numel = v.nbytes // v.itemsize
        if numel != count:
            raise ValueError("%s: the plan reads %d values, got %d (shape %r)"
                             % (name, count, numel, v.shape))

    def _launch_args(self, workspace, stream, arrays, torch_inputs):
        """(workspace pointer, workspace bytes, stream argument) of an execution on `stream`
        (resolved by _tensors.stream_handle from `arrays`, on the plan's device for torch
        inputs), which retire() then waits for."""
        handle = _tensors.stream_handle(stream, arrays,
                                        device=self._problem.device if torch_inputs else None)
        ws_ptr, ws_bytes = self._workspace_args(workspace, handle)
        self._streams.add(handle)
        return ws_ptr, ws_bytes, ctypes.c_void_p(handle) if handle else None

    def _workspace_args(self, workspace, handle):
        if workspace is not None:
            vw = _tensors.view(workspace, "workspace")
            if not vw.is_cuda:
                raise ValueError("workspace: must be CUDA device memory")
            if not vw.is_contiguous():
                raise ValueError("workspace: must be contiguous (its size is its bytes)")
            self._check_device(vw, "workspace")
            return vw.ptr, vw.nbytes
        need = self.workspace_size
        return self._workspace_for(need, handle) if need else (None, 0)


class Plan(_PlanBase):
    """A libmoegemm plan: what to compute, the chosen kernel, the expert sizes.

    Keyword arguments mirror moegemm_problem_t (see make_problem). Use as a context manager
    or call close(); the C plan is destroyed exactly once (also by __del__). Executions still
    pending on a stream must have finished before close() (retire() waits for them).
    """

    _C_PLAN = "moegemm_plan"
    _make_problem = staticmethod(make_problem)

    def _setup(self, problem):
        super()._setup(problem)
        self._scale_counts = self._scale_counts_of(problem)  # fixed by the problem
        self._sizes_keepalive = None
        self._sizes_key = None

    # --- problem ---------------------------------------------------------------------------
    layout = property(lambda self: self._problem.layout)
    num_experts = property(lambda self: self._problem.num_experts)
    n = property(lambda self: self._problem.n)
    k = property(lambda self: self._problem.k)
    max_rows = property(lambda self: self._problem.max_rows)
    a_type = property(lambda self: self._problem.a_type)
    d_type = property(lambda self: self._problem.d_type)
    weight_layout = property(lambda self: self._problem.weight_layout)
    device = property(lambda self: self._problem.device)
    activation = property(lambda self: self._problem.activation)
    epilogue_inputs = property(lambda self: self._problem.epilogue_inputs)
    gather_rows = property(lambda self: self._problem.gather_rows)

    @property
    def needs_tensors(self):
        """Whether executions go through moegemm_execute_tensors (epilogue arrays or a
        gather): moegemm_execute refuses such plans."""
        return bool(self._problem.epilogue_inputs) or self._problem.gather_rows > 0

    @property
    def d_cols(self):
        """Columns of D: n, or n / 2 with a gated activation."""
        p = self._problem
        return p.n // 2 if p.activation in _lib.GATED_ACTIVATIONS else p.n

    @property
    def rows(self):
        """Rows of A (as the layout sees them) and D: max_rows for VARIABLE, E * max_rows for
        MASKED and FIXED; the length of row_scale and a_rows."""
        p = self._problem
        return p.max_rows if p.layout == _lib.LAYOUT_VARIABLE else p.num_experts * p.max_rows

    # --- life cycle ------------------------------------------------------------------------
    def close(self):
        """Destroy the C plan (idempotent)."""
        self._sizes_keepalive = None
        super().close()

    def __repr__(self):
        p = self._problem
        layout = {v: k for k, v in _LAYOUTS.items()}.get(p.layout, p.layout)
        return ("<moegemm.Plan %s E=%d n=%d k=%d max_rows=%d %s->%s%s>"
                % (layout, p.num_experts, p.n, p.k, p.max_rows,
                   _tensors.DTYPE_LABEL.get(p.a_type, p.a_type),
                   _tensors.DTYPE_LABEL.get(p.d_type, p.d_type),
                   " closed" if self.closed else ""))

    # --- queries (workspace_size: _PlanBase) ----------------------------------------------
    def describe(self):
        """One line: backend, kernel, tile and why the heuristic chose them."""
        return self._describe()

    @property
    def status_word(self):
        """Device address (int) of the plan's uint32 status word (MOEGEMM_SIZES_CLAMPED_*)."""
        return self._status_word()

    # --- sizes -----------------------------------------------------------------------------
    def set_expert_sizes(self, sizes):
        """Set the rows of each expert (num_experts int32 values).

        Host values (a list/tuple of ints, a NumPy array, a CPU tensor) are copied and
        validated now (MEMORY_HOST). A CUDA tensor or a __cuda_array_interface__ / DLPack
        producer of int32 is passed by pointer (MEMORY_DEVICE): the GPU reads it at every
        execution and graph replay; the plan keeps a reference to it.
        """
        e = self._problem.num_experts
        if _tensors.is_torch_tensor(sizes) and not sizes.is_cuda:
            sizes = sizes.tolist()
        elif not isinstance(sizes, (list, tuple)) and hasattr(sizes, "__array_interface__") \
                and not hasattr(sizes, "__cuda_array_interface__"):
            sizes = sizes.tolist()  # a NumPy array (host memory)
        if isinstance(sizes, (list, tuple, range)) or (
                not _tensors.is_torch_tensor(sizes) and
                not hasattr(sizes, "__cuda_array_interface__") and
                not hasattr(sizes, "__dlpack__") and hasattr(sizes, "__iter__")):
            values = list(sizes)
            if len(values) != e:
                raise ValueError("sizes: expected %d values (num_experts), got %d"
                                 % (e, len(values)))
            for i, v in enumerate(values):
                if isinstance(v, bool) or not hasattr(v, "__index__"):
                    raise TypeError("sizes[%d]: expected an int, got %r" % (i, v))
                if not -(1 << 31) <= v.__index__() < (1 << 31):
                    raise OverflowError("sizes[%d] = %d does not fit in int32" % (i, v))
            arr = (ctypes.c_int32 * max(e, 1))(*[v.__index__() for v in values])
            check(lib.moegemm_plan_set_expert_sizes(self._h(), arr, _lib.MEMORY_HOST),
                  "moegemm_plan_set_expert_sizes")
            self._sizes_keepalive = None
            self._sizes_key = ("host", tuple(values))
            return
        v = _tensors.view(sizes, "sizes")
        if not v.is_cuda:
            # a DLPack producer of host memory, read through torch
            return self.set_expert_sizes(v.owner.tolist())
        if v.typestr != "<i4":
            raise TypeError("sizes: device sizes must be int32, got %s"
                            % (getattr(v.owner, "dtype", None) or v.typestr))
        if len(v.shape) != 1 or v.shape[0] != e:
            raise ValueError("sizes: expected shape (%d,) (num_experts), got %r" % (e, v.shape))
        if not v.is_contiguous():
            raise ValueError("sizes: device sizes must be contiguous")
        self._check_device(v, "sizes")
        check(lib.moegemm_plan_set_expert_sizes(
            self._h(), ctypes.cast(ctypes.c_void_p(v.ptr), ctypes.POINTER(ctypes.c_int32)),
            _lib.MEMORY_DEVICE), "moegemm_plan_set_expert_sizes")
        self._sizes_keepalive = v.owner
        self._sizes_key = ("device", v.ptr)

    # --- execution -------------------------------------------------------------------------
    def expected_shapes(self):
        """(a_shape, b_shape, d_shape) the plan expects (a: [gather_rows, K] with a gather; d:
        n / 2 columns with a gated activation)."""
        p = self._problem
        e, n, k, m = p.num_experts, p.n, p.k, p.max_rows
        dn = self.d_cols
        b = (e, n, k) if p.weight_layout == _lib.WEIGHTS_NK else (e, k, n)
        if p.layout == _lib.LAYOUT_VARIABLE:
            a, d = (m, k), (m, dn)
        else:
            a, d = (e, m, k), (e, m, dn)
        if p.gather_rows > 0:
            a = (p.gather_rows, k)
        return a, b, d

    def epilogue_counts(self):
        """{name: element count} of the per-call arrays: alpha (fp32, E), row_scale (fp32,
        rows), bias (bias_type, E * N), a_rows (int32, rows)."""
        p = self._problem
        return {"alpha": p.num_experts, "row_scale": self.rows, "bias": p.num_experts * p.n,
                "a_rows": self.rows}

    def scale_counts(self):
        """(a_scale, b_scale) fp32 element counts the plan's scale mode reads (moegemm.h),
        or None for scale_mode 'none'."""
        return self._scale_counts

    @staticmethod
    def _scale_counts_of(p):
        e, n, k = p.num_experts, p.n, p.k
        rows = p.max_rows if p.layout == _lib.LAYOUT_VARIABLE else e * p.max_rows
        kb, nb = -(-k // 128), -(-n // 128)
        return {_lib.SCALE_PER_TENSOR: (1, 1),
                _lib.SCALE_PER_EXPERT: (1, e),
                _lib.SCALE_ROWWISE: (rows, e * n),
                _lib.SCALE_BLOCK: (rows * kb, e * nb * kb)}.get(p.scale_mode)

    def _check_scale(self, v, name, count):
        # The GPU reads `count` values through the pointer; the library cannot see the
        # buffer's size, so a short or mistyped buffer is caught here or not at all.
        if v.dtype != _lib.DTYPE_F32:
            got = getattr(v.owner, "dtype", None) if v.is_torch else v.typestr
            raise TypeError("%s: expected float32 scales, got %s" % (name, got))
        if not v.is_cuda or not v.is_contiguous():
            raise ValueError("%s: must be contiguous CUDA memory" % name)
        self._check_device(v, name)
        numel = v.nbytes // v.itemsize
        if count is not None and numel != count:
            raise ValueError("%s: scale_mode %s reads %d float32 values, got %d (shape %r)"
                             % (name, _SCALE_LABEL.get(self._problem.scale_mode, "?"), count,
                                numel, v.shape))

    def execute(self, a, b, d, workspace=None, stream=None, a_scale=None, b_scale=None, *,
                alpha=None, row_scale=None, bias=None, a_rows=None):
        """Enqueue D = grouped(A x B) on the stream; returns d without waiting.

        a, b, d: torch tensors or __cuda_array_interface__ / DLPack producers, contiguous,
        shaped as expected_shapes() says. workspace: device memory (a tensor or array; the
        byte size is its size) or None to use a per-plan buffer allocated with torch.
        stream: int handle, torch.cuda.Stream, object with __cuda_stream__, or None (torch's
        current stream for torch inputs, else the legacy default stream 0).

        The epilogue's per-call arrays (plans made with epilogue_inputs) and the gather's
        indices (plans made with gather_rows): alpha fp32 [E]; row_scale fp32 [rows]; bias
        [E, N] of the plan's bias_type; a_rows int32 [rows] (rows: max_rows for VARIABLE,
        E * max_rows for MASKED and FIXED). When any is given or the plan needs them, the
        call is moegemm_execute_tensors (libmoegemm 0.2); the library refuses a missing or
        an unexpected array.
        """
        return self._submit("moegemm_execute_tensors", a, b, d, workspace, stream, a_scale,
                            b_scale, dict(alpha=alpha, row_scale=row_scale, bias=bias,
                                          a_rows=a_rows), plain=True)

    def autotune(self, a, b, d, workspace=None, stream=None, a_scale=None, b_scale=None, *,
                 alpha=None, row_scale=None, bias=None, a_rows=None):
        """Time every kernel that serves the plan's problem and current sizes on these
        buffers, and make the fastest the plan's kernel (moegemm_plan_autotune, libmoegemm
        0.2); returns d. Kernels of the other backend compete where the problem's backend is
        AUTO and `workspace` covers theirs (32 MiB covers cuBLASLt's on sm_90).

        The arguments are execute's, checked as execute checks them; the call always passes a
        moegemm_tensors_t. Blocking: each candidate runs a few dozen times on the stream and
        the call waits for them (tens of milliseconds). Afterwards describe() says "tuned:"
        (and what the heuristic would have picked), and D holds the product as the chosen
        kernel computes it; workspace_size grows to the other backend's where one of its
        kernels was chosen (never beyond the workspace passed). The choice is also the process's
        for plans of the same GPU, problem and size bucket created or given sizes later, and
        is written to the tune cache file if one is named (set_tune_cache_file). Sizes that
        are all 0 time nothing and keep the kernel.

        Raises InvalidStateError when the sizes were never set (set_expert_sizes), when the
        stream is being captured into a CUDA graph (tune before capturing), and when the plan
        was made with force_kernel; the plan then keeps its kernel.
        """
        return self._submit("moegemm_plan_autotune", a, b, d, workspace, stream, a_scale,
                            b_scale, dict(alpha=alpha, row_scale=row_scale, bias=bias,
                                          a_rows=a_rows), plain=False)

    def _submit(self, function, a, b, d, workspace, stream, a_scale, b_scale, arrays, plain):
        """What execute and autotune share: checks a, b, d, the scales and the per-call
        `arrays` ({name: array or None}) in Python, then calls the C `function`, which takes a
        moegemm_tensors_t; or moegemm_execute when `plain` and neither the call nor the plan
        needs the tensors form. Returns d."""
        a_shape, b_shape, d_shape = self.expected_shapes()
        p = self._problem
        va = _tensors.view(a, "a")
        vb = _tensors.view(b, "b")
        vd = _tensors.view(d, "d")
        self._check_tensor(va, "a", a_shape, p.a_type)
        self._check_tensor(vb, "b", b_shape, p.b_type)
        self._check_tensor(vd, "d", d_shape, p.d_type)
        counts = self._scale_counts or (None, None)
        scales = []
        for name, s, count in (("a_scale", a_scale, counts[0]), ("b_scale", b_scale, counts[1])):
            if s is None:
                scales.append(None)
                continue
            vs = _tensors.view(s, name)
            self._check_scale(vs, name, count)
            scales.append(ctypes.cast(ctypes.c_void_p(vs.ptr), ctypes.POINTER(ctypes.c_float)))
        extra = {}
        want = self.epilogue_counts()
        for name, dtype in (("alpha", _lib.DTYPE_F32), ("row_scale", _lib.DTYPE_F32),
                            ("bias", p.bias_type), ("a_rows", "int32")):
            arr = arrays[name]
            if arr is None:
                continue
            va_ = _tensors.view(arr, name)
            self._check_array(va_, name, want[name], dtype)
            extra[name] = va_
        plain = plain and not extra and not self.needs_tensors
        fn = lib.moegemm_execute if plain else require(function)
        ws_ptr, ws_bytes, stream_arg = self._launch_args(workspace, stream, (a, b, d), va.is_torch)
        if plain:
            check(fn(self._h(), va.ptr or None, vb.ptr or None, vd.ptr or None,
                     scales[0], scales[1], ws_ptr, ws_bytes, stream_arg), "moegemm_execute")
            return d
        t = make_tensors()
        t.a, t.b, t.d = va.ptr or None, vb.ptr or None, vd.ptr or None
        t.a_scale, t.b_scale = scales
        f32 = ctypes.POINTER(ctypes.c_float)
        if "alpha" in extra:
            t.alpha = ctypes.cast(ctypes.c_void_p(extra["alpha"].ptr), f32)
        if "row_scale" in extra:
            t.row_scale = ctypes.cast(ctypes.c_void_p(extra["row_scale"].ptr), f32)
        if "bias" in extra:
            t.bias = extra["bias"].ptr or None
        if "a_rows" in extra:
            t.a_rows = ctypes.cast(ctypes.c_void_p(extra["a_rows"].ptr),
                                   ctypes.POINTER(ctypes.c_int32))
        check(fn(self._h(), ctypes.byref(t), ws_ptr, ws_bytes, stream_arg), function)
        return d


def make_tensors():
    """A moegemm_tensors_t filled by moegemm_tensors_init_sized (this mirror's size)."""
    return _init_sized(_lib.moegemm_tensors_t, "moegemm_tensors_init_sized")


def set_tune_cache_file(path):
    """Name the file that keeps autotune's results across processes, and add the results it
    holds to the process's (plans created from now on use them); None or "" names none
    (moegemm_set_tune_cache_file, libmoegemm 0.2). path: a str, bytes or os.PathLike.

    Needs no GPU. A missing, unreadable, stale or corrupt file is not an error: the library
    logs a warning and ignores it, and the next Plan.autotune writes a fresh one (through a
    temporary file and a rename).
    """
    if path is None:
        raw = None
    elif isinstance(path, (str, bytes, os.PathLike)):
        raw = os.fsencode(path)
        if b"\0" in raw:
            raise ValueError("path: contains a NUL byte")
    else:
        raise TypeError("path: expected a str, bytes, os.PathLike or None, got %s"
                        % type(path).__name__)
    check(require("moegemm_set_tune_cache_file")(raw or None), "moegemm_set_tune_cache_file")

"""Plan: owns one moegemm_plan_t."""
import ctypes
import threading

from . import _lib, _tensors
from ._lib import lib
from .errors import check

_LAYOUTS = {"variable": _lib.LAYOUT_VARIABLE, "masked": _lib.LAYOUT_MASKED,
            "fixed": _lib.LAYOUT_FIXED}
_WEIGHTS = {"nk": _lib.WEIGHTS_NK, "kn": _lib.WEIGHTS_KN}
_BACKENDS = {"auto": _lib.BACKEND_AUTO, "native": _lib.BACKEND_NATIVE,
             "cublaslt": _lib.BACKEND_CUBLASLT}
_SCALES = {"none": _lib.SCALE_NONE, "per_tensor": _lib.SCALE_PER_TENSOR,
           "per_expert": _lib.SCALE_PER_EXPERT, "rowwise": _lib.SCALE_ROWWISE,
           "block": _lib.SCALE_BLOCK}
_SCALE_LABEL = {v: k for k, v in _SCALES.items()}


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


def _int(value, what):
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError("%s: expected an int, got %r" % (what, value))
    return value.__index__()


def make_problem(*, num_experts, n, k, max_rows, layout="variable", a_type="bf16", b_type=None,
                 d_type=None, weights="nk", scale_mode="none", backend="auto", device=0,
                 expected_rows=0, force_kernel=None):
    """A moegemm_problem_t filled by moegemm_problem_init_sized and then from the arguments.

    b_type defaults to a_type; d_type defaults to a_type for 16-bit inputs, bf16 otherwise.
    Names are mapped here; int enum values are passed through unchecked (the library checks
    them). Integers outside their C type's range raise OverflowError/ValueError here.
    """
    p = _lib.moegemm_problem_t()
    # The sized form: a later library with a larger struct writes only this mirror's bytes.
    check(lib.moegemm_problem_init_sized(ctypes.byref(p), ctypes.sizeof(p)),
          "moegemm_problem_init_sized")
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
    return p


class Plan:
    """A libmoegemm plan: what to compute, the chosen kernel, the expert sizes.

    Keyword arguments mirror moegemm_problem_t (see make_problem). Use as a context manager
    or call close(); the C plan is destroyed exactly once (also by __del__). Executions still
    pending on a stream must have finished before close() (retire() waits for them).
    """

    def __init__(self, **kwargs):
        self._handle = None
        self._setup(make_problem(**kwargs))
        handle = _lib.moegemm_plan_t()
        check(lib.moegemm_plan_create(ctypes.byref(self._problem), ctypes.byref(handle)),
              "moegemm_plan_create")
        self._handle = handle

    @classmethod
    def _detached(cls, **kwargs):
        """A Plan object with the problem but no C plan (its C calls get a NULL plan and fail
        with InvalidValueError). For tests of the Python-side checks without a GPU."""
        self = cls.__new__(cls)
        self._handle = None
        self._setup(make_problem(**kwargs))
        return self

    def _setup(self, problem):
        self._problem = problem
        self._scale_counts = self._scale_counts_of(problem)  # fixed by the problem
        self._lock = threading.Lock()
        self._sizes_keepalive = None
        self._sizes_key = None
        self._workspaces = {}  # (device, stream handle) -> workspace tensor (one per stream)
        self._streams = set()  # stream handles the plan executed on (for retire())

    # --- problem ---------------------------------------------------------------------------
    @property
    def problem(self):
        """A copy of the moegemm_problem_t the plan was created from."""
        copy = _lib.moegemm_problem_t()
        ctypes.pointer(copy)[0] = self._problem
        return copy

    layout = property(lambda self: self._problem.layout)
    num_experts = property(lambda self: self._problem.num_experts)
    n = property(lambda self: self._problem.n)
    k = property(lambda self: self._problem.k)
    max_rows = property(lambda self: self._problem.max_rows)
    a_type = property(lambda self: self._problem.a_type)
    d_type = property(lambda self: self._problem.d_type)
    weight_layout = property(lambda self: self._problem.weight_layout)
    device = property(lambda self: self._problem.device)

    @property
    def handle(self):
        """The moegemm_plan_t as an int (0 when closed)."""
        return self._handle.value or 0 if self._handle is not None else 0

    def _h(self):
        return self._handle  # None -> NULL: the library reports "plan is NULL"

    @property
    def closed(self):
        return self._handle is None

    # --- life cycle ------------------------------------------------------------------------
    def close(self):
        """Destroy the C plan (idempotent)."""
        handle, self._handle = getattr(self, "_handle", None), None
        self._sizes_keepalive = None
        self._workspaces = {}
        self._streams = set()
        if handle is not None and handle.value:
            check(lib.moegemm_plan_destroy(handle), "moegemm_plan_destroy")

    def retire(self):
        """Wait for the work the plan queued on each stream it executed on, then close it:
        what a cache that drops plans the caller can no longer see must do (needs PyTorch
        for the waits; a stream under capture cannot be waited on and raises)."""
        if self._handle is not None and self._streams:
            torch = _tensors._torch()
            if torch is None:
                raise RuntimeError("Plan.retire needs PyTorch to wait for the plan's streams")
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

    def __repr__(self):
        p = self._problem
        layout = {v: k for k, v in _LAYOUTS.items()}.get(p.layout, p.layout)
        return ("<moegemm.Plan %s E=%d n=%d k=%d max_rows=%d %s->%s%s>"
                % (layout, p.num_experts, p.n, p.k, p.max_rows,
                   _tensors.DTYPE_LABEL.get(p.a_type, p.a_type),
                   _tensors.DTYPE_LABEL.get(p.d_type, p.d_type),
                   " closed" if self.closed else ""))

    # --- queries ---------------------------------------------------------------------------
    @property
    def workspace_size(self):
        """Bytes of device workspace execute needs (fixed for the plan's life)."""
        out = ctypes.c_size_t()
        check(lib.moegemm_plan_get_workspace_size(self._h(), ctypes.byref(out)),
              "moegemm_plan_get_workspace_size")
        return out.value

    def describe(self):
        """One line: backend, kernel, tile and why the heuristic chose them."""
        buf = ctypes.create_string_buffer(_lib.MOEGEMM_DESCRIBE_MAX)
        check(lib.moegemm_plan_describe(self._h(), buf, len(buf)), "moegemm_plan_describe")
        return buf.value.decode("utf-8", "replace")

    @property
    def status_word(self):
        """Device address (int) of the plan's uint32 status word (MOEGEMM_SIZES_CLAMPED_*)."""
        out = ctypes.POINTER(ctypes.c_uint32)()
        check(lib.moegemm_plan_get_status_word(self._h(), ctypes.byref(out)),
              "moegemm_plan_get_status_word")
        return ctypes.cast(out, ctypes.c_void_p).value or 0

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
        """(a_shape, b_shape, d_shape) the plan expects."""
        p = self._problem
        e, n, k, m = p.num_experts, p.n, p.k, p.max_rows
        b = (e, n, k) if p.weight_layout == _lib.WEIGHTS_NK else (e, k, n)
        if p.layout == _lib.LAYOUT_VARIABLE:
            return (m, k), b, (m, n)
        return (e, m, k), b, (e, m, n)

    def _check_device(self, v, name):
        """Refuses memory the producer says is on another device than the plan's."""
        if v.device_index is not None and v.device_index != self._problem.device:
            raise ValueError("%s: on cuda:%d, the plan is on cuda:%d"
                             % (name, v.device_index, self._problem.device))

    def _check_tensor(self, v, name, shape, dtype):
        if v.shape != tuple(shape):
            raise ValueError("%s: expected shape %r, got %r" % (name, tuple(shape), v.shape))
        if v.dtype is not None:
            ok = v.dtype == dtype
        elif v.is_torch:
            ok = False
        else:  # a CAI typestr without a standard name (bf16 as '<V2', fp8 as '|V1' / '|u1')
            ok = (v.itemsize == _tensors.DTYPE_ITEMSIZE.get(dtype)
                  and v.typestr is not None and v.typestr[1] in "Vu")
        if not ok:
            got = getattr(v.owner, "dtype", None) if v.is_torch else v.typestr
            raise TypeError("%s: expected dtype %s, got %s"
                            % (name, _tensors.DTYPE_LABEL.get(dtype, dtype), got))
        if not v.is_contiguous():
            raise ValueError("%s: must be contiguous (dense, row-major)" % name)
        if not v.is_cuda:
            raise ValueError("%s: must be in CUDA device memory, got a CPU tensor" % name)
        self._check_device(v, name)

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

    def execute(self, a, b, d, workspace=None, stream=None, a_scale=None, b_scale=None):
        """Enqueue D = grouped(A x B) on the stream; returns d without waiting.

        a, b, d: torch tensors or __cuda_array_interface__ / DLPack producers, contiguous,
        shaped as expected_shapes() says. workspace: device memory (a tensor or array; the
        byte size is its size) or None to use a per-plan buffer allocated with torch.
        stream: int handle, torch.cuda.Stream, object with __cuda_stream__, or None (torch's
        current stream for torch inputs, else the legacy default stream 0).
        """
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
        handle = _tensors.stream_handle(stream, (a, b, d), device=p.device if va.is_torch else None)
        if workspace is not None:
            vw = _tensors.view(workspace, "workspace")
            if not vw.is_cuda:
                raise ValueError("workspace: must be CUDA device memory")
            if not vw.is_contiguous():
                raise ValueError("workspace: must be contiguous (its size is its bytes)")
            self._check_device(vw, "workspace")
            ws_ptr, ws_bytes = vw.ptr, vw.nbytes
        else:
            need = self.workspace_size
            ws_ptr, ws_bytes = self._workspace_for(need, handle) if need else (None, 0)
        self._streams.add(handle)
        check(lib.moegemm_execute(self._h(), va.ptr or None, vb.ptr or None, vd.ptr or None,
                                  scales[0], scales[1], ws_ptr, ws_bytes,
                                  ctypes.c_void_p(handle) if handle else None),
              "moegemm_execute")
        return d

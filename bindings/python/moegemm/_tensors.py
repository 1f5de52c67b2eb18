"""Reading data pointers, shapes and dtypes from PyTorch tensors, __cuda_array_interface__
producers and DLPack producers; resolving streams."""
import importlib
import sys

from . import _lib

_DTYPE_NAMES = {"bf16": _lib.DTYPE_BF16, "bfloat16": _lib.DTYPE_BF16,
                "f16": _lib.DTYPE_F16, "fp16": _lib.DTYPE_F16, "float16": _lib.DTYPE_F16,
                "half": _lib.DTYPE_F16,
                "f32": _lib.DTYPE_F32, "fp32": _lib.DTYPE_F32, "float32": _lib.DTYPE_F32,
                "float": _lib.DTYPE_F32,
                "e4m3": _lib.DTYPE_E4M3, "fp8": _lib.DTYPE_E4M3, "float8_e4m3fn": _lib.DTYPE_E4M3}
DTYPE_LABEL = {_lib.DTYPE_BF16: "bf16", _lib.DTYPE_F16: "f16", _lib.DTYPE_F32: "f32",
               _lib.DTYPE_E4M3: "e4m3"}
DTYPE_ITEMSIZE = {_lib.DTYPE_BF16: 2, _lib.DTYPE_F16: 2, _lib.DTYPE_F32: 4, _lib.DTYPE_E4M3: 1}


def _torch():
    """torch if it is already imported or importable, else None."""
    mod = sys.modules.get("torch")
    if mod is not None:
        return mod
    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


def is_torch_tensor(obj):
    mod = sys.modules.get("torch")
    return mod is not None and isinstance(obj, mod.Tensor)


def _torch_dtype_code(dtype):
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    table = {torch.bfloat16: _lib.DTYPE_BF16, torch.float16: _lib.DTYPE_F16,
             torch.float32: _lib.DTYPE_F32}
    fp8 = getattr(torch, "float8_e4m3fn", None)
    if fp8 is not None:
        table[fp8] = _lib.DTYPE_E4M3
    return table.get(dtype)


def dtype_code(value, what="dtype"):
    """'bf16' | 'f16' | 'f32' | 'e4m3', a torch dtype or an int enum -> the C enum value."""
    if isinstance(value, bool):
        raise TypeError("%s: expected a dtype name, a torch dtype or an int, got %r" % (what, value))
    if isinstance(value, int):
        return value  # passed through: the library validates the range
    if isinstance(value, str):
        try:
            return _DTYPE_NAMES[value.lower()]
        except KeyError:
            raise ValueError("%s: unknown dtype %r (expected one of 'bf16', 'f16', 'f32', "
                             "'e4m3')" % (what, value)) from None
    code = _torch_dtype_code(value)
    if code is None:
        raise ValueError("%s: dtype %r is not supported by libmoegemm" % (what, value))
    return code


def torch_dtype(code):
    torch = _torch()
    return {_lib.DTYPE_BF16: torch.bfloat16, _lib.DTYPE_F16: torch.float16,
            _lib.DTYPE_F32: torch.float32,
            _lib.DTYPE_E4M3: getattr(torch, "float8_e4m3fn", None)}[code]


class TensorView:
    """What the binding needs of an array: pointer, shape, element strides, dtype, device."""
    __slots__ = ("ptr", "shape", "strides", "dtype", "itemsize", "typestr", "is_cuda",
                 "device_index", "is_torch", "owner")

    def __init__(self, ptr, shape, strides, dtype, itemsize, typestr, is_cuda, device_index,
                 is_torch, owner):
        self.ptr = ptr
        self.shape = tuple(int(s) for s in shape)
        self.strides = None if strides is None else tuple(int(s) for s in strides)
        self.dtype = dtype          # C enum value, or None when unknown (e.g. int32)
        self.itemsize = itemsize
        self.typestr = typestr
        self.is_cuda = is_cuda
        self.device_index = device_index  # None when the producer does not say
        self.is_torch = is_torch
        self.owner = owner          # keeps the memory alive

    def is_contiguous(self):
        if self.strides is None:
            return True
        expected = 1
        for size, stride in reversed(list(zip(self.shape, self.strides))):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True

    @property
    def nbytes(self):
        n = self.itemsize
        for s in self.shape:
            n *= s
        return n


def _typestr_info(typestr):
    """CAI typestr -> (dtype code or None, itemsize)."""
    kind, size = typestr[1], int(typestr[2:])
    code = None
    if kind == "f" and size == 2:
        code = _lib.DTYPE_F16
    elif kind == "f" and size == 4:
        code = _lib.DTYPE_F32
    return code, size


def _from_torch(t, what):
    torch = sys.modules["torch"]
    itemsize = t.element_size()
    typestr = {torch.int32: "<i4", torch.int64: "<i8"}.get(t.dtype)
    return TensorView(t.data_ptr(), t.shape, t.stride(), _torch_dtype_code(t.dtype), itemsize,
                      typestr, t.is_cuda, t.device.index if t.is_cuda else None, True, t)


def _from_cai(obj, what):
    cai = obj.__cuda_array_interface__
    try:
        ptr = int(cai["data"][0])
        shape = tuple(cai["shape"])
        typestr = cai["typestr"]
    except (KeyError, TypeError, IndexError) as exc:
        raise TypeError("%s: malformed __cuda_array_interface__ (%s)" % (what, exc)) from None
    code, itemsize = _typestr_info(typestr)
    strides = cai.get("strides")
    if strides is not None:
        if any(s % itemsize for s in strides):
            raise ValueError("%s: strides %r are not multiples of the element size %d"
                             % (what, tuple(strides), itemsize))
        strides = tuple(s // itemsize for s in strides)
    # The interface does not name the device; CuPy arrays do (`.device.id`), so a CuPy array
    # on another device than the plan's is refused like a torch tensor.
    device = getattr(getattr(obj, "device", None), "id", None)
    device_index = device if isinstance(device, int) and not isinstance(device, bool) else None
    return TensorView(ptr, shape, strides, code, itemsize, typestr, True, device_index, False,
                      obj)


def view(obj, what):
    """A TensorView of a torch tensor, a __cuda_array_interface__ or a __dlpack__ producer."""
    if is_torch_tensor(obj):
        return _from_torch(obj, what)
    if hasattr(obj, "__cuda_array_interface__"):
        return _from_cai(obj, what)
    if hasattr(obj, "__dlpack__"):
        torch = _torch()
        if torch is None:
            raise TypeError("%s: %s is a DLPack producer without __cuda_array_interface__; "
                            "reading it needs PyTorch (torch.utils.dlpack.from_dlpack), which "
                            "is not installed" % (what, type(obj).__name__))
        return _from_torch(torch.utils.dlpack.from_dlpack(obj), what)
    raise TypeError("%s: expected a torch.Tensor or an object with __cuda_array_interface__ or "
                    "__dlpack__, got %s" % (what, type(obj).__name__))


def stream_handle(stream, inputs=(), device=None):
    """Resolve a stream argument to a cudaStream_t value (int).

    Order: an explicit stream (int handle, torch.cuda.Stream, an object with
    __cuda_stream__() -> (version, handle), or with a ``cuda_stream`` / ``handle`` / ``ptr``
    attribute), then torch.cuda.current_stream() when the inputs are torch tensors, else 0
    (the legacy default stream).
    """
    if stream is not None:
        if isinstance(stream, bool):
            raise TypeError("stream: expected a stream, got %r" % (stream,))
        if isinstance(stream, int):
            return stream
        if hasattr(stream, "__cuda_stream__"):
            proto = stream.__cuda_stream__
            value = proto() if callable(proto) else proto
            if not (isinstance(value, tuple) and len(value) == 2):
                raise TypeError("stream: __cuda_stream__ must return (version, handle), got %r"
                                % (value,))
            return int(value[1])
        for attr in ("cuda_stream", "handle", "ptr"):
            value = getattr(stream, attr, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        raise TypeError("stream: expected an int handle, a torch.cuda.Stream or an object with "
                        "__cuda_stream__, got %s" % type(stream).__name__)
    if any(is_torch_tensor(x) for x in inputs if x is not None):
        torch = sys.modules["torch"]
        return torch.cuda.current_stream(device).cuda_stream
    return 0

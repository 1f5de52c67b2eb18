"""CPU tests: run without a GPU (CI). Loading, version, the struct mirror, status -> exception
mapping with the library's messages, Python-side argument checks, logging."""
import ctypes
import logging
import os
import re

import pytest

import moegemm
from moegemm import _lib, _tensors
from moegemm.plan import Plan

lib = _lib.lib


class FakeCuda:
    """A __cuda_array_interface__ producer with a fake pointer: never dereferenced, since the
    tests below fail before any GPU work."""

    def __init__(self, shape, typestr="<V2", ptr=0x7F0000000000, strides=None, device=None):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr,
                                         "data": (ptr, False), "strides": strides, "version": 3}
        if device is not None:  # as CuPy arrays say where they live
            self.device = type("Device", (), {"id": device})()


class FakeDlpackOnly:
    def __dlpack__(self, stream=None):
        raise AssertionError("not called")

    def __dlpack_device__(self):
        return (2, 0)


def gpu_usable():
    try:
        Plan(num_experts=1, n=8, k=8, max_rows=8).close()
        return True
    except moegemm.NoDeviceError:
        return False
    except moegemm.MoegemmError:
        return True


# --- loading and version ----------------------------------------------------------------------
def test_library_loads_and_version_matches():
    v = moegemm.version()
    assert v // 10000 == moegemm.EXPECTED_MAJOR
    text = moegemm.version_string()
    assert re.fullmatch(r"\d+\.\d+\.\d+", text)
    major, minor, patch = (int(x) for x in text.split("."))
    assert v == major * 10000 + minor * 100 + patch
    assert (major, minor, patch) >= _lib.HEADER_VERSION
    assert moegemm.library_path


def test_every_header_function_is_declared():
    for name, (restype, argtypes) in _lib._SIGNATURES.items():
        fn = getattr(lib, name)
        assert fn.restype is restype, name
        assert list(fn.argtypes) == list(argtypes), name
    # and every MOEGEMM_API function of the header has a signature here
    header = os.path.join(os.path.dirname(__file__), "..", "..", "..", "include", "moegemm",
                          "moegemm.h")
    with open(header) as f:
        declared = set(re.findall(r"MOEGEMM_API\s[^;(]*?\b(moegemm_\w+)\s*\(", f.read()))
    assert declared == set(_lib._SIGNATURES), declared ^ set(_lib._SIGNATURES)
    assert len(declared) == 17


def test_library_not_found_names_every_place(monkeypatch, tmp_path):
    monkeypatch.setenv("MOEGEMM_LIBRARY", str(tmp_path / "nope" / "libmoegemm.so"))
    monkeypatch.setenv("PKG_CONFIG_PATH", str(tmp_path))
    monkeypatch.setenv("PKG_CONFIG_LIBDIR", str(tmp_path))
    monkeypatch.setattr(_lib, "SONAME", "libmoegemm_does_not_exist.so.0")
    with pytest.raises(moegemm.MoegemmLibraryNotFound) as info:
        _lib.load_library()
    msg = str(info.value)
    assert isinstance(info.value, ImportError)
    assert "MOEGEMM_LIBRARY=" + str(tmp_path / "nope" / "libmoegemm.so") in msg
    assert "package directory" in msg
    assert "pkg-config" in msg
    assert "libmoegemm_does_not_exist.so.0" in msg
    # the order is the documented one
    assert msg.index("MOEGEMM_LIBRARY=") < msg.index("package directory") < \
        msg.index("pkg-config") < msg.index("system loader")


def test_explicit_library_path_is_used(monkeypatch):
    monkeypatch.setenv("MOEGEMM_LIBRARY", moegemm.library_path)
    first = next(_lib._candidates())
    assert first[1] == moegemm.library_path


def test_kernel_names():
    names = moegemm.kernel_names()
    assert len(names) == lib.moegemm_kernel_count()
    assert all(isinstance(n, str) and n for n in names)
    assert lib.moegemm_kernel_name(-1) is None
    assert lib.moegemm_kernel_name(len(names)) is None


# --- the struct mirror -------------------------------------------------------------------------
def test_struct_mirror_size_matches_library():
    buf = ctypes.create_string_buffer(4096)  # room for any version's struct
    status = lib.moegemm_problem_init(ctypes.cast(buf, ctypes.POINTER(_lib.moegemm_problem_t)))
    assert status == 0
    written = ctypes.c_size_t.from_buffer(buf).value
    assert written == ctypes.sizeof(_lib.moegemm_problem_t)
    # nothing past the mirror was written
    assert buf.raw[ctypes.sizeof(_lib.moegemm_problem_t):] == b"\0" * (4096 - written)


def test_problem_init_sized_writes_only_the_mirror():
    size = ctypes.sizeof(_lib.moegemm_problem_t)
    assert size == _lib.MOEGEMM_PROBLEM_SIZE_0_1
    buf = ctypes.create_string_buffer(b"\xee" * 256, 256)
    ptr = ctypes.cast(buf, ctypes.POINTER(_lib.moegemm_problem_t))
    assert lib.moegemm_problem_init_sized(ptr, size) == 0
    assert ctypes.c_size_t.from_buffer(buf).value == size
    assert buf.raw[size:] == b"\xee" * (256 - size)
    # a newer caller's larger struct: the tail past the library's fields is zeroed
    assert lib.moegemm_problem_init_sized(ptr, size + 16) == 0
    assert buf.raw[size:size + 16] == b"\0" * 16 and buf.raw[size + 16:] == b"\xee" * (240 - size)
    assert lib.moegemm_problem_init_sized(ptr, size - 8) == 1  # MOEGEMM_STATUS_INVALID_VALUE
    assert make_problem_is_sized()


def make_problem_is_sized():
    from moegemm.plan import make_problem
    p = make_problem(num_experts=2, n=8, k=8, max_rows=4)
    return p.struct_size == ctypes.sizeof(p) and p.num_experts == 2


def test_struct_defaults_through_the_mirror():
    p = _lib.moegemm_problem_t()
    p.force_kernel = b"sentinel"
    assert lib.moegemm_problem_init(ctypes.byref(p)) == 0
    assert p.struct_size == ctypes.sizeof(p)
    assert (p.layout, p.num_experts, p.n, p.k, p.max_rows) == (_lib.LAYOUT_VARIABLE, 0, 0, 0, 0)
    assert (p.a_type, p.b_type, p.d_type) == (_lib.DTYPE_BF16,) * 3
    assert (p.weight_layout, p.scale_mode, p.backend) == (0, 0, 0)
    assert (p.device, p.expected_rows, p.force_kernel) == (0, 0, None)
    offsets = {name: getattr(_lib.moegemm_problem_t, name).offset
               for name, _ in _lib.moegemm_problem_t._fields_}
    assert offsets["layout"] == 8 and offsets["n"] == 16 and offsets["a_type"] == 40
    assert offsets["device"] == 64 and offsets["expected_rows"] == 72
    assert offsets["force_kernel"] == 80


def test_make_problem_maps_names():
    p = moegemm.make_problem(layout="masked", num_experts=4, n=64, k=128, max_rows=32,
                             a_type="f16", weights="kn", backend="cublaslt", device=0,
                             expected_rows=7, force_kernel="x")
    assert (p.layout, p.num_experts, p.n, p.k, p.max_rows) == (1, 4, 64, 128, 32)
    assert (p.a_type, p.b_type, p.d_type) == (_lib.DTYPE_F16,) * 3
    assert (p.weight_layout, p.backend, p.expected_rows, p.force_kernel) == (1, 2, 7, b"x")
    p = moegemm.make_problem(num_experts=1, n=8, k=8, max_rows=1, d_type="f32")
    assert (p.a_type, p.d_type) == (_lib.DTYPE_BF16, _lib.DTYPE_F32)


@pytest.mark.parametrize("kwargs, exc", [
    (dict(layout="ragged"), ValueError),
    (dict(a_type="int8"), ValueError),
    (dict(weights="nn"), ValueError),
    (dict(backend="cutlass"), ValueError),
    (dict(layout=True), TypeError),
    (dict(n=8.0), TypeError),
    (dict(num_experts=1 << 40), OverflowError),
    (dict(force_kernel=3), TypeError),
])
def test_make_problem_rejects_in_python(kwargs, exc):
    args = dict(num_experts=2, n=64, k=64, max_rows=16)
    args.update(kwargs)
    with pytest.raises(exc) as info:
        moegemm.make_problem(**args)
    assert not isinstance(info.value, moegemm.MoegemmError)


# --- statuses -> exceptions --------------------------------------------------------------------
EXPECTED_CLASSES = {
    1: moegemm.InvalidValueError, 2: moegemm.NotSupportedError, 3: moegemm.NoDeviceError,
    4: moegemm.ArchMismatchError, 5: moegemm.MisalignedError,
    6: moegemm.WorkspaceTooSmallError, 7: moegemm.InvalidStateError,
    8: moegemm.AllocFailedError, 9: moegemm.CudaError, 10: moegemm.CublasError,
    11: moegemm.InternalError,
}


@pytest.mark.parametrize("status", sorted(EXPECTED_CLASSES))
def test_every_status_maps_to_its_class(status):
    assert moegemm.STATUS_TO_ERROR[status] is EXPECTED_CLASSES[status]
    # provoke a real failure so that the library has a message, then map `status`
    assert lib.moegemm_problem_init(None) == 1
    with pytest.raises(EXPECTED_CLASSES[status]) as info:
        moegemm.check(status)
    err = info.value
    assert isinstance(err, moegemm.MoegemmError)
    assert err.status == status
    assert err.status_name == lib.moegemm_status_name(status).decode()
    assert err.status_name.startswith("MOEGEMM_STATUS_")
    assert err.message == moegemm.last_error_message() and "problem" in err.message
    assert err.status_name in str(err) and err.message in str(err)


def test_unknown_status_and_success():
    assert moegemm.check(0) == 0
    with pytest.raises(moegemm.MoegemmError) as info:
        moegemm.check(99)
    assert type(info.value) is moegemm.MoegemmError
    assert info.value.status_name == "MOEGEMM_STATUS_UNKNOWN"


def test_problem_init_null_raw():
    with pytest.raises(moegemm.InvalidValueError) as info:
        moegemm.check(lib.moegemm_problem_init(None), "moegemm_problem_init")
    assert "problem" in info.value.message
    assert isinstance(info.value, ValueError)
    assert "moegemm_problem_init" in str(info.value)


VALID = dict(num_experts=4, n=64, k=64, max_rows=32)


@pytest.mark.parametrize("kwargs, exc, word", [
    (dict(num_experts=0), moegemm.InvalidValueError, "num_experts"),
    (dict(num_experts=moegemm.MOEGEMM_MAX_EXPERTS + 1), moegemm.InvalidValueError, "num_experts"),
    (dict(n=0), moegemm.InvalidValueError, "n = 0"),
    (dict(k=-8), moegemm.InvalidValueError, "k = -8"),
    (dict(max_rows=0), moegemm.InvalidValueError, "max_rows"),
    (dict(layout=3), moegemm.InvalidValueError, "layout"),
    (dict(a_type=9), moegemm.InvalidValueError, "a_type"),
    (dict(weights=2), moegemm.InvalidValueError, "weight_layout"),
    (dict(backend=3), moegemm.InvalidValueError, "backend"),
    (dict(scale_mode="per_tensor"), moegemm.InvalidValueError, "scale_mode"),
    (dict(device=-1), moegemm.InvalidValueError, "device"),
    (dict(expected_rows=-1), moegemm.InvalidValueError, "expected_rows"),
    (dict(k=500), moegemm.MisalignedError, "k = 500"),
    (dict(n=260), moegemm.MisalignedError, "n = 260"),
    (dict(a_type="f32"), moegemm.NotSupportedError, "F32"),
    (dict(a_type="bf16", b_type="f16"), moegemm.NotSupportedError, "mixed"),
    (dict(d_type="e4m3"), moegemm.NotSupportedError, "E4M3"),
    (dict(a_type="e4m3", d_type="f16", scale_mode="per_tensor"), moegemm.NotSupportedError,
     "BF16 or F32"),
])
def test_plan_rejects_bad_problems(kwargs, exc, word):
    args = dict(VALID)
    args.update(kwargs)
    with pytest.raises(exc) as info:
        Plan(**args)
    assert type(info.value) is exc
    assert info.value.status == exc.status
    assert word in info.value.message
    assert "moegemm_plan_create" in str(info.value)


def test_valid_problem_without_gpu_raises_no_device():
    if gpu_usable():
        pytest.skip("a GPU is usable here: NO_DEVICE is exercised only without one")
    with pytest.raises(moegemm.NoDeviceError) as info:
        Plan(**VALID)
    assert info.value.status == 3
    assert "CUDA device" in info.value.message


def test_null_plan_calls_raise_invalid_value():
    h = None
    size = ctypes.c_size_t()
    word = ctypes.POINTER(ctypes.c_uint32)()
    buf = ctypes.create_string_buffer(16)
    sizes = (ctypes.c_int32 * 1)(1)
    for status in (lib.moegemm_plan_set_expert_sizes(h, sizes, 0),
                   lib.moegemm_plan_get_workspace_size(h, ctypes.byref(size)),
                   lib.moegemm_plan_get_status_word(h, ctypes.byref(word)),
                   lib.moegemm_plan_describe(h, buf, len(buf)),
                   lib.moegemm_execute(h, None, None, None, None, None, None, 0, None)):
        assert status == 1
    assert "plan is NULL" in moegemm.last_error_message()
    assert lib.moegemm_plan_destroy(None) == 0


# --- Python-side checks of a plan (a detached Plan: no C plan, no GPU needed) -------------------
def detached(**kwargs):
    args = dict(VALID)
    args.update(kwargs)
    return Plan._detached(**args)


def test_detached_plan_queries_reach_the_library():
    p = detached()
    assert p.closed and p.handle == 0
    for call in (lambda: p.workspace_size, p.describe, lambda: p.status_word):
        with pytest.raises(moegemm.InvalidValueError) as info:
            call()
        assert "plan is NULL" in info.value.message
    p.close()
    p.close()  # idempotent
    with detached() as q:
        assert "VARIABLE" not in repr(q) and "variable" in repr(q)


def test_set_expert_sizes_host_checks():
    p = detached()
    with pytest.raises(ValueError, match="expected 4 values"):
        p.set_expert_sizes([1, 2, 3])
    with pytest.raises(TypeError, match=r"sizes\[1\]"):
        p.set_expert_sizes([1, 2.5, 3, 4])
    with pytest.raises(TypeError, match=r"sizes\[0\]"):
        p.set_expert_sizes([True, 2, 3, 4])
    with pytest.raises(OverflowError):
        p.set_expert_sizes([1 << 31, 0, 0, 0])
    # well-formed host sizes get to the C call (which rejects the NULL plan)
    with pytest.raises(moegemm.InvalidValueError, match="plan is NULL"):
        p.set_expert_sizes([1, 2, 3, 4])
    with pytest.raises(moegemm.InvalidValueError, match="plan is NULL"):
        p.set_expert_sizes(range(4))


def test_set_expert_sizes_device_checks():
    p = detached()
    with pytest.raises(TypeError, match="int32"):
        p.set_expert_sizes(FakeCuda((4,), "<i8"))
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        p.set_expert_sizes(FakeCuda((5,), "<i4"))
    with pytest.raises(ValueError, match="contiguous"):
        p.set_expert_sizes(FakeCuda((4,), "<i4", strides=(8,)))
    sizes = FakeCuda((4,), "<i4")
    with pytest.raises(moegemm.InvalidValueError, match="plan is NULL"):
        p.set_expert_sizes(sizes)
    assert p._sizes_keepalive is None  # not kept when the call failed


def test_set_expert_sizes_numpy_is_host():
    np = pytest.importorskip("numpy")
    p = detached()
    with pytest.raises(ValueError, match="expected 4 values"):
        p.set_expert_sizes(np.zeros(3, dtype=np.int32))
    with pytest.raises(moegemm.InvalidValueError, match="plan is NULL"):
        p.set_expert_sizes(np.arange(4, dtype=np.int32))


def test_execute_checks_in_python():
    p = detached()  # VARIABLE, E=4, n=64, k=64, max_rows=32, bf16 -> bf16, NK
    a, b, d = FakeCuda((32, 64)), FakeCuda((4, 64, 64)), FakeCuda((32, 64))
    ws = FakeCuda((256,), "|u1")
    with pytest.raises(ValueError, match=r"a: expected shape \(32, 64\)"):
        p.execute(FakeCuda((16, 64)), b, d, workspace=ws)
    with pytest.raises(ValueError, match=r"b: expected shape \(4, 64, 64\)"):
        p.execute(a, FakeCuda((3, 64, 64)), d, workspace=ws)
    with pytest.raises(ValueError, match=r"d: expected shape"):
        p.execute(a, b, FakeCuda((32, 32)), workspace=ws)
    with pytest.raises(TypeError, match="a: expected dtype bf16"):
        p.execute(FakeCuda((32, 64), "<f2"), b, d, workspace=ws)
    with pytest.raises(TypeError, match="d: expected dtype bf16"):
        p.execute(a, b, FakeCuda((32, 64), "<f4"), workspace=ws)
    with pytest.raises(ValueError, match="a: must be contiguous"):
        p.execute(FakeCuda((32, 64), strides=(256, 2)), b, d, workspace=ws)
    with pytest.raises(TypeError, match="a: expected a torch.Tensor"):
        p.execute([[0.0]], b, d, workspace=ws)
    with pytest.raises(TypeError, match="stream"):
        p.execute(a, b, d, workspace=ws, stream="default")
    # everything well-formed: the library is called (and rejects the NULL plan)
    with pytest.raises(moegemm.InvalidValueError, match="plan is NULL"):
        p.execute(a, b, d, workspace=ws, stream=0)


def test_execute_checks_fp8_scales():
    # rowwise on VARIABLE: a_scale [max_rows = 32], b_scale [E * N = 4 * 64]
    p = detached(a_type="e4m3", d_type="bf16", scale_mode="rowwise")
    assert p.scale_counts() == (32, 256)
    a, b, d = FakeCuda((32, 64), "|u1"), FakeCuda((4, 64, 64), "|u1"), FakeCuda((32, 64))
    ws = FakeCuda((256,), "|u1")
    good_a, good_b = FakeCuda((32,), "<f4"), FakeCuda((4, 64), "<f4")
    with pytest.raises(TypeError, match="a_scale: expected float32 scales, got <i4"):
        p.execute(a, b, d, workspace=ws, a_scale=FakeCuda((32,), "<i4"), b_scale=good_b)
    with pytest.raises(ValueError, match="a_scale: scale_mode rowwise reads 32 float32 values, got 31"):
        p.execute(a, b, d, workspace=ws, a_scale=FakeCuda((31,), "<f4"), b_scale=good_b)
    with pytest.raises(ValueError, match="b_scale: scale_mode rowwise reads 256 float32 values, got 4"):
        p.execute(a, b, d, workspace=ws, a_scale=good_a, b_scale=FakeCuda((4,), "<f4"))
    with pytest.raises(ValueError, match="b_scale: must be contiguous"):
        p.execute(a, b, d, workspace=ws, a_scale=good_a,
                  b_scale=FakeCuda((4, 64), "<f4", strides=(512, 4)))
    with pytest.raises(ValueError, match="a_scale: on cuda:1, the plan is on cuda:0"):
        p.execute(a, b, d, workspace=ws, a_scale=FakeCuda((32,), "<f4", device=1),
                  b_scale=good_b)
    with pytest.raises(moegemm.InvalidValueError, match="plan is NULL"):
        p.execute(a, b, d, workspace=ws, a_scale=good_a, b_scale=good_b, stream=0)
    # the counts of the other modes, MASKED rows = E * max_rows
    block = detached(layout="masked", a_type="e4m3", scale_mode="block", n=200, k=300)
    assert block.scale_counts() == (4 * 32 * 3, 4 * 2 * 3)
    assert detached(a_type="e4m3", scale_mode="per_expert").scale_counts() == (1, 4)
    assert detached(a_type="e4m3", scale_mode="per_tensor").scale_counts() == (1, 1)
    assert detached().scale_counts() is None


def test_execute_checks_workspace_and_cupy_devices():
    p = detached()
    a, b, d = FakeCuda((32, 64)), FakeCuda((4, 64, 64)), FakeCuda((32, 64))
    with pytest.raises(ValueError, match="workspace: must be contiguous"):
        p.execute(a, b, d, workspace=FakeCuda((256,), "|u1", strides=(2,)))
    with pytest.raises(ValueError, match="workspace: on cuda:2, the plan is on cuda:0"):
        p.execute(a, b, d, workspace=FakeCuda((256,), "|u1", device=2))
    with pytest.raises(ValueError, match="a: on cuda:1, the plan is on cuda:0"):
        p.execute(FakeCuda((32, 64), device=1), b, d, workspace=FakeCuda((256,), "|u1"))


class FakeTorch:
    """The few torch calls the plan's workspace cache and retire() make, recorded."""

    def __init__(self):
        self.calls = []
        self.uint8 = "uint8"
        fake = self

        class Tensor:
            def __init__(self, n):
                self.n, self.ptr = n, 0x7E0000000000 + 0x10000 * len(fake.calls)

            def numel(self):
                return self.n

            def data_ptr(self):
                return self.ptr

        class Stream:
            def __init__(self, handle, device=None):
                self.handle = handle

            def synchronize(self):
                fake.calls.append(("sync stream", self.handle))

        class Cuda:
            ExternalStream = Stream

            @staticmethod
            def synchronize(device=None):
                fake.calls.append(("sync device", str(device)))

        self.cuda = Cuda

        def empty(n, dtype=None, device=None):
            fake.calls.append(("empty", n, device))
            return Tensor(n)

        self.empty = empty
        self.device = lambda kind, index: "%s:%d" % (kind, index)


def test_workspace_is_one_per_stream(monkeypatch):
    fake = FakeTorch()
    monkeypatch.setattr(_tensors, "_torch", lambda: fake)
    p = detached()
    first = p._workspace_for(1024, 7)
    assert p._workspace_for(1024, 7) == first  # reused on the same stream
    second = p._workspace_for(1024, 9)
    assert second[0] != first[0]  # another stream gets its own
    assert [c[0] for c in fake.calls] == ["empty", "empty"]


def test_retire_waits_for_the_plans_streams(monkeypatch):
    fake = FakeTorch()
    monkeypatch.setattr(_tensors, "_torch", lambda: fake)
    p = detached()
    p._handle = _lib.moegemm_plan_t()  # a NULL handle: close() destroys nothing
    p._streams = {0, 5}
    p.retire()
    assert fake.calls == [("sync device", "cuda:0"), ("sync stream", 5)]
    assert p.closed and not p._streams


def test_plan_cache_retires_what_it_drops(monkeypatch):
    from moegemm import api
    retired = []

    class Recorder:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

        def retire(self):
            retired.append(self.kwargs["n"])

    monkeypatch.setattr(api, "Plan", Recorder)
    monkeypatch.setattr(api, "_MAX_CACHED_PLANS", 2)
    monkeypatch.setattr(api._local, "plans", None, raising=False)
    for n in (8, 16, 24):
        api._get_plan(("key", n), {"n": n})
    assert retired == [8]
    api.clear_plan_cache()
    assert sorted(retired) == [8, 16, 24]

    # a thread's cache, when the thread ends, retires its plans too
    import threading
    retired.clear()
    worker = threading.Thread(target=lambda: api._get_plan(("key", 32), {"n": 32}))
    worker.start()
    worker.join()
    import gc
    gc.collect()
    assert retired == [32]


def test_execute_shapes_follow_layout_and_weights():
    p = detached(layout="masked", weights="kn", a_type="f16", d_type="f32", n=128)
    assert p.expected_shapes() == ((4, 32, 64), (4, 64, 128), (4, 32, 128))
    a, b, d = FakeCuda((4, 32, 64), "<f2"), FakeCuda((4, 64, 128), "<f2"), \
        FakeCuda((4, 32, 128), "<f4")
    with pytest.raises(ValueError, match="b: expected shape"):
        p.execute(a, FakeCuda((4, 128, 64), "<f2"), d, workspace=FakeCuda((1,), "|u1"))
    with pytest.raises(moegemm.InvalidValueError, match="plan is NULL"):
        p.execute(a, b, d, workspace=FakeCuda((1,), "|u1"))
    fixed = detached(layout="fixed")
    assert fixed.expected_shapes() == ((4, 32, 64), (4, 64, 64), (4, 32, 64))


def test_execute_without_workspace_queries_the_plan():
    p = detached()
    a, b, d = FakeCuda((32, 64)), FakeCuda((4, 64, 64)), FakeCuda((32, 64))
    with pytest.raises(moegemm.InvalidValueError, match="plan is NULL"):
        p.execute(a, b, d)


def test_dlpack_without_torch_is_a_clear_type_error():
    if _tensors._torch() is not None:
        pytest.skip("torch is installed: DLPack producers are read through it")
    with pytest.raises(TypeError, match="DLPack.*PyTorch"):
        _tensors.view(FakeDlpackOnly(), "a")


def test_stream_resolution():
    class Proto:
        def __cuda_stream__(self):
            return (0, 0x1234)

    class TorchLike:
        cuda_stream = 0x42

    assert _tensors.stream_handle(7) == 7
    assert _tensors.stream_handle(Proto()) == 0x1234
    assert _tensors.stream_handle(TorchLike()) == 0x42
    assert _tensors.stream_handle(None, (FakeCuda((1,)),)) == 0
    with pytest.raises(TypeError):
        _tensors.stream_handle(object())
    with pytest.raises(TypeError):
        _tensors.stream_handle(True)

    class BadProto:
        def __cuda_stream__(self):
            return 5

    with pytest.raises(TypeError, match="version, handle"):
        _tensors.stream_handle(BadProto())


def test_dtype_names():
    assert _tensors.dtype_code("bf16") == _lib.DTYPE_BF16
    assert _tensors.dtype_code("FP16") == _lib.DTYPE_F16
    assert _tensors.dtype_code("float32") == _lib.DTYPE_F32
    assert _tensors.dtype_code("e4m3") == _lib.DTYPE_E4M3
    with pytest.raises(ValueError):
        _tensors.dtype_code("int4")


# --- logging -----------------------------------------------------------------------------------
def test_log_callback_receives_the_error_message():
    got = []
    moegemm.set_log_callback(lambda level, msg: got.append((level, msg)), "error")
    try:
        with pytest.raises(moegemm.InvalidValueError):
            Plan(num_experts=0, n=64, k=64, max_rows=8)
        expected = moegemm.last_error_message()
    finally:
        moegemm.disable_logging()
    assert got, "the callback received nothing"
    levels = {lvl for lvl, _ in got}
    assert levels == {_lib.LOG_ERROR}
    assert any("num_experts" in msg for _, msg in got)
    assert any(expected in msg for _, msg in got)
    got.clear()
    with pytest.raises(moegemm.InvalidValueError):
        Plan(num_experts=0, n=64, k=64, max_rows=8)
    assert got == []  # silenced


def test_log_callback_exceptions_are_swallowed():
    def bad(level, msg):
        raise RuntimeError("boom")
    moegemm.set_log_callback(bad, "trace")
    try:
        with pytest.raises(moegemm.MisalignedError):
            Plan(num_experts=2, n=64, k=60, max_rows=8)
    finally:
        moegemm.disable_logging()


def test_enable_logging_forwards_to_python_logging(caplog):
    caplog.set_level(logging.DEBUG, logger="moegemm")
    moegemm.enable_logging("error")
    try:
        with pytest.raises(moegemm.InvalidValueError):
            Plan(num_experts=2, n=64, k=64, max_rows=0)
    finally:
        moegemm.disable_logging()
    records = [r for r in caplog.records if r.name == "moegemm"]
    assert records and all(r.levelno == logging.ERROR for r in records)
    assert any("max_rows" in r.getMessage() for r in records)


def test_log_level_checks():
    with pytest.raises(ValueError):
        moegemm.set_log_callback(None, "verbose")
    with pytest.raises(moegemm.InvalidValueError) as info:
        moegemm.set_log_callback(None, 9)
    assert "level" in info.value.message
    moegemm.disable_logging()

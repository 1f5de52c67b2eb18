"""CPU tests: run without a GPU (CI). Loading, version, the struct mirror, status -> exception
mapping with the library's messages, Python-side argument checks, logging."""
import ctypes
import logging
import os
import re
import shutil
import subprocess

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


HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "include",
                      "moegemm", "moegemm.h")


def test_every_header_function_is_declared():
    for name, (restype, argtypes) in _lib._SIGNATURES.items():
        if name in _lib.NEW_IN_0_2 and not _lib.has_function(name):
            continue  # an older library: declared when present (test_library_exports_0_2)
        fn = getattr(lib, name)
        assert fn.restype is restype, name
        assert list(fn.argtypes) == list(argtypes), name
    # and every MOEGEMM_API function of the header has a signature here
    with open(HEADER) as f:
        declared = set(re.findall(r"MOEGEMM_API\s[^;(]*?\b(moegemm_\w+)\s*\(", f.read()))
    assert declared == set(_lib._SIGNATURES), declared ^ set(_lib._SIGNATURES)
    assert len(declared) == 30
    assert _lib.NEW_IN_0_2 <= declared


def test_library_exports_the_0_2_api():
    # Fails while the library predates the 0.2 API (the binding still loads and serves 0.1).
    assert not moegemm.missing_functions, (
        "%s does not export %s" % (moegemm.library_path, sorted(moegemm.missing_functions)))
    assert all(moegemm.has_function(name) for name in _lib.NEW_IN_0_2)


def test_a_missing_function_raises_a_clear_error(monkeypatch):
    monkeypatch.setattr(lib, "_moegemm_missing", frozenset({"moegemm_moe_problem_init_sized",
                                                            "moegemm_execute_tensors"}))
    assert not moegemm.has_function("moegemm_execute_tensors")
    assert moegemm.has_function("moegemm_execute")
    with pytest.raises(moegemm.FunctionUnavailableError) as info:
        moegemm.MoeLayer(num_experts=8, top_k=2, hidden=64, intermediate=64, max_tokens=16)
    err = info.value
    assert isinstance(err, moegemm.NotSupportedError) and err.status == 2
    assert err.function == "moegemm_moe_problem_init_sized"
    assert "moegemm_moe_problem_init_sized" in str(err) and "0.2" in str(err)
    assert moegemm.library_path in str(err)
    # Python-side checks still come first; then the epilogue call needs the missing function
    p = Plan._detached(**dict(VALID, epilogue_inputs="alpha"))
    a, b, d = FakeCuda((32, 64)), FakeCuda((4, 64, 64)), FakeCuda((32, 64))
    with pytest.raises(ValueError, match="alpha: the plan reads 4 values, got 3"):
        p.execute(a, b, d, alpha=FakeCuda((3,), "<f4"))
    with pytest.raises(moegemm.FunctionUnavailableError, match="moegemm_execute_tensors"):
        p.execute(a, b, d, alpha=FakeCuda((4,), "<f4"))


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
    assert size == _lib.MOEGEMM_PROBLEM_SIZE_0_2
    buf = ctypes.create_string_buffer(b"\xee" * 256, 256)
    ptr = ctypes.cast(buf, ctypes.POINTER(_lib.moegemm_problem_t))
    assert lib.moegemm_problem_init_sized(ptr, size) == 0
    assert ctypes.c_size_t.from_buffer(buf).value == size
    assert buf.raw[size:] == b"\xee" * (256 - size)
    # a newer caller's larger struct: the tail past the library's fields is zeroed
    assert lib.moegemm_problem_init_sized(ptr, size + 16) == 0
    assert buf.raw[size:size + 16] == b"\0" * 16 and buf.raw[size + 16:] == b"\xee" * (240 - size)
    # the 0.1 struct (what a caller of the old header passes) is accepted; smaller is not
    assert lib.moegemm_problem_init_sized(ptr, _lib.MOEGEMM_PROBLEM_SIZE_0_1) == 0
    assert lib.moegemm_problem_init_sized(ptr, _lib.MOEGEMM_PROBLEM_SIZE_0_1 - 8) == 1
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
    # 0.2: appended after the 0.1 struct, all 0 by default (the plain product)
    assert offsets["epilogue_inputs"] == _lib.MOEGEMM_PROBLEM_SIZE_0_1
    assert offsets["gather_rows"] == 112
    assert (p.epilogue_inputs, p.bias_type, p.activation, p.gate_layout) == (0, 0, 0, 0)
    assert (p.activation_alpha, p.activation_limit, p.gather_rows) == (0.0, 0.0, 0)


# --- every struct and constant against the C compiler's view of the header ---------------------
STRUCTS = {"moegemm_problem_t": _lib.moegemm_problem_t, "moegemm_tensors_t": _lib.moegemm_tensors_t,
           "moegemm_moe_problem_t": _lib.moegemm_moe_problem_t,
           "moegemm_moe_tensors_t": _lib.moegemm_moe_tensors_t}


def _strip_c_comments(text):
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", " ", text, flags=re.S))


def _header_text():
    with open(HEADER) as f:
        return _strip_c_comments(f.read())


def header_struct_fields(text, name):
    """Field names of `typedef struct ... { ... } name;`, in order."""
    m = re.search(r"typedef struct \w+ \{([^}]*)\}\s*%s\s*;" % name, text)
    assert m, name
    return [re.findall(r"\w+", decl)[-1] for decl in m.group(1).split(";") if decl.strip()]


def header_constants(text):
    """Enumerators and integer #defines named MOEGEMM_*."""
    names = re.findall(r"^\s*(MOEGEMM_\w+)\s*=\s*-?(?:0[xX][0-9a-fA-F]+|\d+)\s*,?\s*$", text, re.M)
    names += re.findall(r"^\s*#define\s+(MOEGEMM_\w+)\s+(?:0[xX][0-9a-fA-F]+|\d+)[uUlL]*\s*$",
                        text, re.M)
    return sorted(set(names))


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    """sizeof / offsetof of every mirrored struct and the value of every MOEGEMM_* constant,
    printed by a program the system C compiler builds from the header."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler (cc) to read the header's layout")
    text = _header_text()
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include <moegemm/moegemm.h>",
             "int main(void) {"]
    for cname, mirror in STRUCTS.items():
        lines.append('  printf("size %s %%zu\\n", sizeof(%s));' % (cname, cname))
        for field in header_struct_fields(text, cname):
            lines.append('  printf("offset %s %s %%zu %%zu\\n", offsetof(%s, %s), sizeof(((%s*)0)->%s));'
                         % (cname, field, cname, field, cname, field))
    for const in header_constants(text):
        lines.append('  printf("const %s %%lld\\n", (long long)(%s));' % (const, const))
    lines += ["  return 0;", "}"]
    d = tmp_path_factory.mktemp("layout")
    src, exe = d / "layout.c", d / "layout"
    src.write_text("\n".join(lines) + "\n")
    include = os.path.join(os.path.dirname(HEADER), "..")
    subprocess.run([cc, "-std=c99", "-I", include, str(src), "-o", str(exe)], check=True,
                   capture_output=True, text=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    sizes, offsets, consts = {}, {}, {}
    for line in out.splitlines():
        kind, *rest = line.split()
        if kind == "size":
            sizes[rest[0]] = int(rest[1])
        elif kind == "offset":
            offsets[(rest[0], rest[1])] = (int(rest[2]), int(rest[3]))
        else:
            consts[rest[0]] = int(rest[1])
    return sizes, offsets, consts


@pytest.mark.parametrize("cname", sorted(STRUCTS))
def test_struct_mirror_matches_the_c_header(c_layout, cname):
    sizes, offsets, _ = c_layout
    mirror = STRUCTS[cname]
    assert ctypes.sizeof(mirror) == sizes[cname], cname
    c_fields = [f for (s_, f) in offsets if s_ == cname]
    assert [name for name, _ in mirror._fields_] == header_struct_fields(_header_text(), cname)
    for field in c_fields:
        desc = getattr(mirror, field)
        assert (desc.offset, desc.size) == offsets[(cname, field)], (cname, field)


def test_sizes_of_the_0_2_structs(c_layout):
    sizes = c_layout[0]
    assert sizes["moegemm_problem_t"] == _lib.MOEGEMM_PROBLEM_SIZE_0_2 == 120
    assert (sizes["moegemm_tensors_t"], sizes["moegemm_moe_problem_t"],
            sizes["moegemm_moe_tensors_t"]) == (80, 104, 120)


def test_constants_match_the_c_header(c_layout):
    consts = c_layout[2]
    assert "MOEGEMM_ACTIVATION_SWIGLU_CLAMPED" in consts and "MOEGEMM_INDEX_INT64" in consts
    statuses = {cls.__name__: cls.status for cls in moegemm.STATUS_TO_ERROR.values()}
    for name, value in consts.items():
        if name.startswith("MOEGEMM_VERSION"):
            continue
        if name.startswith("MOEGEMM_STATUS_"):
            if name != "MOEGEMM_STATUS_SUCCESS":
                assert lib.moegemm_status_name(value).decode() == name
                assert value in moegemm.STATUS_TO_ERROR, name
            continue
        short = name[len("MOEGEMM_"):]
        mirrored = getattr(_lib, name, getattr(_lib, short, None))
        assert mirrored == value, "%s: header %d, _lib %r" % (name, value, mirrored)
    assert statuses  # the classes exist


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
    assert_rejected_in_python(kwargs, exc)


def assert_rejected_in_python(kwargs, exc):
    """make_problem of a valid problem with `kwargs` changed raises `exc`, not a library
    error: the check is the binding's."""
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


# --- 0.2: the epilogue and the gather of a grouped GEMM ----------------------------------------
def test_make_problem_epilogue_options():
    p = moegemm.make_problem(num_experts=4, n=64, k=64, max_rows=8, activation="swiglu",
                             gate_layout="interleaved", epilogue_inputs=("alpha", "bias"),
                             gather_rows=100, a_type="f16")
    assert (p.activation, p.gate_layout, p.gather_rows) == (_lib.ACTIVATION_SWIGLU,
                                                            _lib.GATE_UP_INTERLEAVED, 100)
    assert p.epilogue_inputs == _lib.MOEGEMM_EPILOGUE_ALPHA | _lib.MOEGEMM_EPILOGUE_BIAS
    assert p.bias_type == _lib.DTYPE_F16  # the output's type by default
    p = moegemm.make_problem(num_experts=4, n=64, k=64, max_rows=8, activation="swiglu_clamped",
                             activation_alpha=1.702, activation_limit=7.0,
                             epilogue_inputs="row_scale", bias_type="f32", d_type="f32")
    assert p.activation == _lib.ACTIVATION_SWIGLU_CLAMPED
    assert abs(p.activation_alpha - 1.702) < 1e-6 and p.activation_limit == 7.0
    assert (p.epilogue_inputs, p.bias_type) == (_lib.MOEGEMM_EPILOGUE_ROW_SCALE, _lib.DTYPE_F32)
    for name, code in (("silu", 1), ("gelu_tanh", 2), ("geglu", 4), ("NONE", 0), (None, 0)):
        assert moegemm.make_problem(num_experts=1, n=8, k=8, max_rows=1,
                                    activation=name).activation == code
    assert moegemm.make_problem(num_experts=1, n=8, k=8, max_rows=1,
                                gate_layout="up_gate").gate_layout == _lib.UP_GATE_HALVES
    # a plain problem leaves every 0.2 byte at 0 (a 0.1 library accepts it), f16 included
    plain = moegemm.make_problem(num_experts=1, n=8, k=8, max_rows=1, a_type="f16")
    raw = ctypes.string_at(ctypes.addressof(plain), ctypes.sizeof(plain))
    assert raw[_lib.MOEGEMM_PROBLEM_SIZE_0_1:] == b"\0" * (120 - 88)
    assert moegemm.make_problem(num_experts=1, n=8, k=8, max_rows=1,
                                epilogue_inputs=7).epilogue_inputs == 7


@pytest.mark.parametrize("kwargs, exc", [
    (dict(activation="relu"), ValueError),
    (dict(activation="gelu"), ValueError),  # the tanh form only, by its name
    (dict(gate_layout="halves"), ValueError),
    (dict(epilogue_inputs="scale"), ValueError),
    (dict(epilogue_inputs=("alpha", 3)), ValueError),
    (dict(epilogue_inputs=True), TypeError),
    (dict(epilogue_inputs=2.0), TypeError),
    (dict(activation_alpha="big"), TypeError),
    (dict(gather_rows=1.5), TypeError),
    (dict(gather_rows=1 << 64), OverflowError),
    (dict(bias_type="int8"), ValueError),
])
def test_make_problem_rejects_epilogue_options_in_python(kwargs, exc):
    assert_rejected_in_python(kwargs, exc)


@pytest.mark.parametrize("kwargs, exc, word", [
    (dict(activation=9), moegemm.InvalidValueError, "activation"),
    (dict(gate_layout=7), moegemm.InvalidValueError, "gate_layout"),
    (dict(epilogue_inputs=0x8), moegemm.InvalidValueError, "epilogue_inputs"),
    (dict(epilogue_inputs="bias", bias_type=9), moegemm.InvalidValueError, "bias_type"),
    (dict(epilogue_inputs="bias", bias_type="e4m3"), moegemm.NotSupportedError, "bias_type"),
    (dict(activation="swiglu_clamped"), moegemm.InvalidValueError, "activation"),
    (dict(activation="swiglu_clamped", activation_alpha=1.702, activation_limit=-1.0),
     moegemm.InvalidValueError, "activation_limit"),
    (dict(activation="silu", activation_alpha=1.0), moegemm.InvalidValueError, "activation_alpha"),
    (dict(gather_rows=-1), moegemm.InvalidValueError, "gather_rows"),
])
def test_plan_rejects_bad_epilogues(kwargs, exc, word):
    # Needs a library with the 0.2 fields (a 0.1 one answers NOT_SUPPORTED to all of these).
    # E4M3 biases: valid enum, no kernel (NOT_SUPPORTED, as E4M3 outputs).
    args = dict(VALID)
    args.update(kwargs)
    with pytest.raises(exc) as info:
        Plan(**args)
    assert word in info.value.message


def test_valid_epilogue_problem_without_gpu_raises_no_device():
    if gpu_usable():
        pytest.skip("a GPU is usable here: NO_DEVICE is exercised only without one")
    with pytest.raises(moegemm.NoDeviceError):
        Plan(**dict(VALID, activation="swiglu", epilogue_inputs=("alpha", "row_scale", "bias"),
                    gather_rows=7))


def test_epilogue_shapes_and_counts():
    p = detached(activation="geglu", epilogue_inputs=("alpha", "row_scale", "bias"))
    assert p.expected_shapes() == ((32, 64), (4, 64, 64), (32, 32))  # gated: N / 2 columns
    assert p.d_cols == 32 and p.needs_tensors
    assert p.epilogue_counts() == {"alpha": 4, "row_scale": 32, "bias": 4 * 64, "a_rows": 32}
    m = detached(layout="masked", gather_rows=50, activation="silu")
    assert m.expected_shapes() == ((50, 64), (4, 64, 64), (4, 32, 64))  # A: [gather_rows, K]
    assert m.rows == 4 * 32 and m.epilogue_counts()["a_rows"] == 128 and m.needs_tensors
    assert not detached(activation="silu").needs_tensors  # moegemm_execute serves it


def test_execute_checks_epilogue_arrays_in_python():
    p = detached(activation="swiglu", epilogue_inputs=("alpha", "row_scale", "bias"),
                 gather_rows=40)
    a, b, d = FakeCuda((40, 64)), FakeCuda((4, 64, 64)), FakeCuda((32, 32))
    good = dict(alpha=FakeCuda((4,), "<f4"), row_scale=FakeCuda((32,), "<f4"),
                bias=FakeCuda((4, 64)), a_rows=FakeCuda((32,), "<i4"))
    ws = FakeCuda((256,), "|u1")
    cases = [
        ("alpha", FakeCuda((4,), "<f2"), TypeError, "alpha: expected f32"),
        ("alpha", FakeCuda((5,), "<f4"), ValueError, "alpha: the plan reads 4 values, got 5"),
        ("row_scale", FakeCuda((31,), "<f4"), ValueError, "row_scale: the plan reads 32"),
        ("row_scale", FakeCuda((32,), "<f4", strides=(8,)), ValueError, "contiguous"),
        ("bias", FakeCuda((4, 64), "<f4"), TypeError, "bias: expected bf16"),
        ("bias", FakeCuda((4, 32)), ValueError, "bias: the plan reads 256 values"),
        ("a_rows", FakeCuda((32,), "<i8"), TypeError, "a_rows: expected int32"),
        ("a_rows", FakeCuda((16,), "<i4"), ValueError, "a_rows: the plan reads 32 values"),
        ("a_rows", FakeCuda((32,), "<i4", device=1), ValueError, "a_rows: on cuda:1"),
    ]
    for name, bad, exc, match in cases:
        args = dict(good)
        args[name] = bad
        with pytest.raises(exc, match=match):
            p.execute(a, b, d, workspace=ws, **args)
    with pytest.raises(ValueError, match=r"a: expected shape \(40, 64\)"):
        p.execute(FakeCuda((32, 64)), b, d, workspace=ws, **good)  # gathered A: [gather_rows, K]
    with pytest.raises(ValueError, match=r"d: expected shape \(32, 32\)"):
        p.execute(a, b, FakeCuda((32, 64)), workspace=ws, **good)  # gated D: N / 2 columns
    # well-formed: moegemm_execute_tensors is called (and rejects the NULL plan)
    with pytest.raises(moegemm.InvalidValueError):
        p.execute(a, b, d, workspace=ws, stream=0, **good)


def test_make_tensors_fills_the_struct():
    from moegemm.plan import make_tensors
    t = make_tensors()
    assert t.struct_size == ctypes.sizeof(_lib.moegemm_tensors_t)
    assert not t.a and not t.bias and not t.alpha and not t.a_rows
    assert lib.moegemm_tensors_init_sized(None, ctypes.sizeof(t)) == 1
    assert lib.moegemm_tensors_init_sized(ctypes.byref(t), 4097) == 1


def test_execute_tensors_null_plan_is_invalid_value():
    from moegemm.plan import make_tensors
    t = make_tensors()
    assert lib.moegemm_execute_tensors(None, ctypes.byref(t), None, 0, None) == 1
    assert lib.moegemm_execute_tensors(None, None, None, 0, None) == 1


# --- 0.2: autotuning --------------------------------------------------------------------------
def test_autotune_checks_like_execute():
    # The same Python-side checks, with the same messages, before the library is called.
    p = detached(activation="swiglu", epilogue_inputs=("alpha", "bias"), gather_rows=40)
    a, b, d = FakeCuda((40, 64)), FakeCuda((4, 64, 64)), FakeCuda((32, 32))
    good = dict(alpha=FakeCuda((4,), "<f4"), bias=FakeCuda((4, 64)))
    ws = FakeCuda((256,), "|u1")
    cases = [
        ((FakeCuda((32, 64)), b, d), dict(good, workspace=ws)),
        ((a, FakeCuda((4, 64, 32)), d), dict(good, workspace=ws)),
        ((a, b, FakeCuda((32, 32), "<f4")), dict(good, workspace=ws)),
        ((FakeCuda((40, 64), strides=(256, 2)), b, d), dict(good, workspace=ws)),
        ((a, b, d), dict(good, workspace=ws, alpha=FakeCuda((5,), "<f4"))),
        ((a, b, d), dict(good, workspace=ws, bias=FakeCuda((4, 64), "<f4"))),
        ((a, b, d), dict(good, workspace=ws, a_rows=FakeCuda((32,), "<i8"))),
        ((a, b, d), dict(good, workspace=FakeCuda((256,), "|u1", device=1))),
        ((a, b, d), dict(good, workspace=ws, stream="default")),
        (([[0.0]], b, d), dict(good, workspace=ws)),
    ]
    for args, kwargs in cases:
        with pytest.raises((TypeError, ValueError)) as executed:
            p.execute(*args, **kwargs)
        with pytest.raises(type(executed.value)) as tuned:
            p.autotune(*args, **kwargs)
        assert str(tuned.value) == str(executed.value)
    # fp8 scales are checked against the scale mode as well
    f = detached(a_type="e4m3", d_type="bf16", scale_mode="rowwise")
    fa, fb, fd = FakeCuda((32, 64), "|u1"), FakeCuda((4, 64, 64), "|u1"), FakeCuda((32, 64))
    with pytest.raises(ValueError, match="a_scale: scale_mode rowwise reads 32 float32 values"):
        f.autotune(fa, fb, fd, workspace=ws, a_scale=FakeCuda((31,), "<f4"),
                   b_scale=FakeCuda((4, 64), "<f4"))


def test_autotune_without_a_plan_raises_like_execute():
    # Well-formed arguments reach moegemm_plan_autotune, which refuses the NULL plan (a plain
    # plan too: autotune always passes a moegemm_tensors_t); closing changes nothing.
    for p in (detached(), detached(epilogue_inputs="alpha")):
        a, b, d = FakeCuda((32, 64)), FakeCuda((4, 64, 64)), FakeCuda((32, 64))
        extra = {"alpha": FakeCuda((4,), "<f4")} if p.needs_tensors else {}
        ws = FakeCuda((256,), "|u1")
        for _ in range(2):
            with pytest.raises(moegemm.InvalidValueError, match="plan is NULL") as info:
                p.autotune(a, b, d, workspace=ws, stream=0, **extra)
            assert info.value.function == "moegemm_plan_autotune"
            with pytest.raises(moegemm.InvalidValueError, match="plan is NULL"):
                p.execute(a, b, d, workspace=ws, stream=0, **extra)
            with pytest.raises(moegemm.InvalidValueError, match="plan is NULL"):
                p.autotune(a, b, d)  # no workspace: queried from the (NULL) plan, as execute
            p.close()
            assert p.closed


def test_autotune_null_plan_is_invalid_value():
    from moegemm.plan import make_tensors
    t = make_tensors()
    assert lib.moegemm_plan_autotune(None, ctypes.byref(t), None, 0, None) == 1
    assert "plan is NULL" in moegemm.last_error_message()
    assert lib.moegemm_plan_autotune(None, None, None, 0, None) == 1


def test_autotune_and_the_tune_cache_need_the_0_2_functions(monkeypatch):
    monkeypatch.setattr(lib, "_moegemm_missing", frozenset({"moegemm_plan_autotune",
                                                            "moegemm_set_tune_cache_file"}))
    p = detached()
    a, b, d = FakeCuda((32, 64)), FakeCuda((4, 64, 64)), FakeCuda((32, 64))
    with pytest.raises(ValueError, match=r"a: expected shape"):  # Python's checks first
        p.autotune(FakeCuda((16, 64)), b, d)
    with pytest.raises(moegemm.FunctionUnavailableError, match="moegemm_plan_autotune"):
        p.autotune(a, b, d)
    with pytest.raises(moegemm.FunctionUnavailableError, match="moegemm_set_tune_cache_file"):
        moegemm.set_tune_cache_file(None)
    with pytest.raises(moegemm.InvalidValueError, match="plan is NULL"):
        p.execute(a, b, d)  # moegemm_execute is still there


def test_set_tune_cache_file_needs_no_gpu(tmp_path):
    # A missing, stale or corrupt file is ignored with a warning, never an error; None and ""
    # name no file. Nothing is written until an autotune.
    corrupt = tmp_path / "corrupt.txt"
    corrupt.write_text("not a tune cache\n")
    missing = tmp_path / "missing" / "tune.txt"
    got = []
    moegemm.set_log_callback(lambda level, msg: got.append((level, msg)), "warn")
    try:
        for path in (None, "", str(missing), os.fsencode(str(missing)), corrupt):
            assert moegemm.set_tune_cache_file(path) is None
    finally:
        moegemm.set_tune_cache_file(None)
        moegemm.disable_logging()
    assert not missing.exists() and not missing.parent.exists()
    assert corrupt.read_text() == "not a tune cache\n"
    warnings = [msg for level, msg in got if level == _lib.LOG_WARN]
    assert any(str(missing) in msg for msg in warnings), got
    assert any(str(corrupt) in msg for msg in warnings), got
    with pytest.raises(TypeError, match="path: expected a str"):
        moegemm.set_tune_cache_file(3)
    with pytest.raises(ValueError, match="NUL"):
        moegemm.set_tune_cache_file("tune\0cache")
    assert "set_tune_cache_file" in moegemm.__all__


# --- 0.2: the MoE layer ------------------------------------------------------------------------
LAYER = dict(num_experts=16, top_k=4, hidden=256, intermediate=128, max_tokens=64,
             activation="swiglu")


def test_make_moe_problem_maps_names_and_defaults():
    p = moegemm.make_moe_problem(num_experts=16, top_k=4, hidden=256, intermediate=128,
                                 max_tokens=64)
    assert p.struct_size == ctypes.sizeof(_lib.moegemm_moe_problem_t) == 104
    assert (p.dtype, p.activation, p.gate_layout, p.id_type, p.backend) == (0, 0, 0, 0, 0)
    assert p.weight_scales == _lib.SCALE_NONE
    assert (p.first_expert, p.local_experts, p.fc1_inputs, p.fc2_inputs, p.device) == (0,) * 5
    q = moegemm.make_moe_problem(**dict(LAYER, dtype="f16", gate_layout="up_gate",
                                        first_expert=4, local_experts=8,
                                        fc1_inputs=("alpha", "bias"), fc2_inputs="bias",
                                        id_type="int64", backend="native",
                                        expected_tokens=16))
    assert (q.dtype, q.activation, q.gate_layout) == (_lib.DTYPE_F16, _lib.ACTIVATION_SWIGLU,
                                                      _lib.UP_GATE_HALVES)
    assert (q.first_expert, q.local_experts, q.fc1_inputs, q.fc2_inputs) == (4, 8, 5, 4)
    assert (q.id_type, q.backend, q.expected_tokens) == (_lib.INDEX_INT64, 1, 16)
    assert q.weight_scales == _lib.SCALE_NONE
    assert moegemm.make_moe_problem(**dict(LAYER, weight_scales="block")).weight_scales == 4
    assert moegemm.make_moe_problem(**dict(LAYER, weight_scales="BLOCK")).weight_scales == 4
    assert moegemm.make_moe_problem(**dict(LAYER, weight_scales=3)).weight_scales == 3  # passed
    with pytest.raises(ValueError, match="weight_scales: unknown value 'rowwise'"):
        moegemm.make_moe_problem(**dict(LAYER, weight_scales="rowwise"))  # not a layer mode
    with pytest.raises(TypeError, match="weight_scales"):
        moegemm.make_moe_problem(**dict(LAYER, weight_scales=True))
    with pytest.raises(ValueError, match="fc2_inputs"):
        moegemm.make_moe_problem(**dict(LAYER, fc2_inputs="row_scale"))  # FC2's is the router's
    with pytest.raises(ValueError, match="id_type"):
        moegemm.make_moe_problem(**dict(LAYER, id_type="uint8"))
    with pytest.raises(OverflowError):
        moegemm.make_moe_problem(**dict(LAYER, top_k=1 << 31))


@pytest.mark.parametrize("kwargs, exc", [
    (dict(top_k=17), moegemm.InvalidValueError),
    (dict(top_k=0), moegemm.InvalidValueError),
    (dict(num_experts=0), moegemm.InvalidValueError),
    (dict(hidden=0), moegemm.InvalidValueError),
    (dict(max_tokens=0), moegemm.InvalidValueError),
    (dict(first_expert=12, local_experts=8), moegemm.InvalidValueError),
    (dict(first_expert=-1), moegemm.InvalidValueError),
    (dict(activation="swiglu_clamped"), moegemm.InvalidValueError),
    (dict(activation=42), moegemm.InvalidValueError),
    (dict(id_type=5), moegemm.InvalidValueError),
    (dict(device=-1), moegemm.InvalidValueError),
    (dict(hidden=100), moegemm.MisalignedError),
    (dict(intermediate=60), moegemm.MisalignedError),
    # weight_scales: E4M3 weights with 128 x 128 block scales
    (dict(weight_scales=9), moegemm.InvalidValueError),
    (dict(weight_scales=_lib.SCALE_ROWWISE), moegemm.NotSupportedError),
    (dict(weight_scales="block", dtype="f16"), moegemm.NotSupportedError),
    (dict(weight_scales="block", fc1_inputs="bias"), moegemm.NotSupportedError),
    (dict(weight_scales="block", fc2_inputs="alpha"), moegemm.NotSupportedError),
    (dict(weight_scales="block", hidden=264), moegemm.MisalignedError),  # 8 | 264, 16 does not
    (dict(weight_scales="block", intermediate=136), moegemm.MisalignedError),
])
def test_layer_rejects_bad_problems(kwargs, exc):
    with pytest.raises(exc) as info:
        moegemm.MoeLayer(**dict(LAYER, **kwargs))
    assert type(info.value) is exc
    assert info.value.message
    assert "moegemm_moe_plan_create" in str(info.value)


def test_valid_layer_without_gpu_raises_no_device():
    if gpu_usable():
        pytest.skip("a GPU is usable here: NO_DEVICE is exercised only without one")
    with pytest.raises(moegemm.NoDeviceError):
        moegemm.MoeLayer(**LAYER)
    # hidden and intermediate multiples of 16 but not of 128: partial scale blocks are fine
    with pytest.raises(moegemm.NoDeviceError):
        moegemm.MoeLayer(**dict(LAYER, weight_scales="block", hidden=272, intermediate=144))


def test_null_layer_plan_calls_raise_invalid_value():
    layer = moegemm.MoeLayer._detached(**LAYER)
    assert layer.closed and layer.handle == 0
    for call in (lambda: layer.workspace_size, layer.describe, lambda: layer.status_word):
        with pytest.raises(moegemm.InvalidValueError):
            call()
    assert lib.moegemm_moe_plan_destroy(None) == 0
    t = moegemm.moe.make_moe_tensors()
    assert t.struct_size == 120 and t.num_tokens == 0 and not t.x and not t.num_tokens_device
    assert not t.w1_scale and not t.w2_scale
    assert lib.moegemm_moe_execute(None, ctypes.byref(t), None, 0, None) == 1
    layer.close()
    layer.close()
    assert "E=16" in repr(layer) and "swiglu" in repr(layer)


def test_layer_execute_checks_in_python():
    layer = moegemm.MoeLayer._detached(**dict(LAYER, fc1_inputs="bias", fc2_inputs="alpha"))
    sh = layer.expected_shapes(10)
    assert sh["w1"] == (16, 256, 256) and sh["w2"] == (16, 256, 128) and sh["out"] == (10, 256)
    x, out = FakeCuda((10, 256)), FakeCuda((10, 256))
    ids, wts = FakeCuda((10, 4), "<i4"), FakeCuda((10, 4), "<f4")
    w1, w2 = FakeCuda((16, 256, 256)), FakeCuda((16, 256, 128))
    ws = FakeCuda((256,), "|u1")
    good = dict(b1=FakeCuda((16, 256)), alpha2=FakeCuda((16,), "<f4"), workspace=ws)
    with pytest.raises(ValueError, match="x: 65 tokens, the layer's max_tokens is 64"):
        layer.execute(FakeCuda((65, 256)), FakeCuda((65, 4), "<i4"), FakeCuda((65, 4), "<f4"),
                      w1, w2, FakeCuda((65, 256)), **good)
    with pytest.raises(ValueError, match=r"w1: expected shape \(16, 256, 256\)"):
        layer.execute(x, ids, wts, FakeCuda((16, 128, 256)), w2, out, **good)  # gated: 2I rows
    with pytest.raises(TypeError, match="topk_ids: expected int32"):
        layer.execute(x, FakeCuda((10, 4), "<i8"), wts, w1, w2, out, **good)
    with pytest.raises(TypeError, match="topk_weights: expected f32"):
        layer.execute(x, ids, FakeCuda((10, 4), "<f2"), w1, w2, out, **good)
    with pytest.raises(ValueError, match=r"topk_ids: expected shape \(10, 4\)"):
        layer.execute(x, FakeCuda((10, 2), "<i4"), wts, w1, w2, out, **good)
    with pytest.raises(TypeError, match="x: expected dtype bf16"):
        layer.execute(FakeCuda((10, 256), "<f2"), ids, wts, w1, w2, out, **good)
    with pytest.raises(ValueError, match="b1: the plan reads 4096 values"):
        layer.execute(x, ids, wts, w1, w2, out, **dict(good, b1=FakeCuda((16, 128))))
    with pytest.raises(ValueError, match="num_tokens = 11"):
        layer.execute(x, ids, wts, w1, w2, out, num_tokens=11, **good)
    with pytest.raises(ValueError, match="max_tokens = 64 rows"):
        layer.execute(x, ids, wts, w1, w2, out, num_tokens_device=FakeCuda((1,), "<i4"), **good)
    with pytest.raises(ValueError, match="out: on cuda:3"):
        layer.execute(x, ids, wts, w1, w2, FakeCuda((10, 256), device=3), **good)
    # well-formed: the library is called (and rejects the NULL plan)
    with pytest.raises(moegemm.InvalidValueError):
        layer.execute(x, ids, wts, w1, w2, out, stream=0, **good)
    full = [FakeCuda((64, 256)), FakeCuda((64, 4), "<i4"), FakeCuda((64, 4), "<f4")]
    with pytest.raises(TypeError, match="num_tokens_device: expected int32"):
        layer.execute(*full, w1, w2, FakeCuda((64, 256)), num_tokens_device=FakeCuda((1,), "<i8"),
                      **good)
    with pytest.raises(moegemm.InvalidValueError):
        layer.execute(*full, w1, w2, FakeCuda((64, 256)), num_tokens_device=FakeCuda((1,), "<i4"),
                      stream=0, **good)
    plain = moegemm.MoeLayer._detached(**dict(LAYER, activation="silu", id_type="int64"))
    assert plain.expected_shapes(3)["w1"] == (16, 128, 256)  # not gated: I rows
    with pytest.raises(TypeError, match="topk_ids: expected int64"):
        plain.execute(FakeCuda((3, 256)), FakeCuda((3, 4), "<i4"), FakeCuda((3, 4), "<f4"),
                      FakeCuda((16, 128, 256)), w2, FakeCuda((3, 256)), workspace=ws)


def test_fp8_layer_execute_checks_in_python(monkeypatch):
    # H = 272, I = 144, gated: w1 [16, 288, 272] and w2 [16, 272, 144] E4M3, partial blocks
    layer = moegemm.MoeLayer._detached(**dict(LAYER, weight_scales="block", hidden=272,
                                              intermediate=144))
    assert layer.weight_scales == _lib.SCALE_BLOCK and layer.weight_dtype == _lib.DTYPE_E4M3
    assert "e4m3-block-weights" in repr(layer)
    sh = layer.expected_shapes(10)
    assert sh["w1"] == (16, 288, 272) and sh["w2"] == (16, 272, 144)
    assert sh["w1_scale"] == (16, 3, 3) and sh["w2_scale"] == (16, 3, 2)
    x, out = FakeCuda((10, 272)), FakeCuda((10, 272))
    ids, wts = FakeCuda((10, 4), "<i4"), FakeCuda((10, 4), "<f4")
    w1, w2 = FakeCuda((16, 288, 272), "|u1"), FakeCuda((16, 272, 144), "|V1")
    s1, s2 = FakeCuda((16, 3, 3), "<f4", ptr=0x7F0000100000), \
        FakeCuda((16, 3, 2), "<f4", ptr=0x7F0000200000)
    ws = FakeCuda((256,), "|u1")
    good = dict(w1_scale=s1, w2_scale=s2, workspace=ws)
    with pytest.raises(TypeError, match="w1: expected dtype e4m3"):
        layer.execute(x, ids, wts, FakeCuda((16, 288, 272)), w2, out, **good)  # bf16 weights
    with pytest.raises(TypeError, match="w2: expected dtype e4m3"):
        layer.execute(x, ids, wts, w1, FakeCuda((16, 272, 144), "<f2"), out, **good)
    with pytest.raises(TypeError, match="x: expected dtype bf16"):
        layer.execute(FakeCuda((10, 272), "|u1"), ids, wts, w1, w2, out, **good)  # x stays bf16
    with pytest.raises(TypeError, match="w1_scale: expected f32"):
        layer.execute(x, ids, wts, w1, w2, out, **dict(good, w1_scale=FakeCuda((16, 3, 3), "<f2")))
    with pytest.raises(ValueError, match=r"w1_scale: the plan reads 144 values, got 96"):
        layer.execute(x, ids, wts, w1, w2, out, **dict(good, w1_scale=FakeCuda((16, 3, 2), "<f4")))
    with pytest.raises(ValueError, match=r"w2_scale: the plan reads 96 values, got 144"):
        layer.execute(x, ids, wts, w1, w2, out, **dict(good, w2_scale=s1))
    with pytest.raises(ValueError, match="w2_scale: must be contiguous CUDA memory"):
        layer.execute(x, ids, wts, w1, w2, out,
                      **dict(good, w2_scale=FakeCuda((16, 3, 2), "<f4", strides=(24, 4, 12))))
    with pytest.raises(ValueError, match="w1_scale: on cuda:3"):
        layer.execute(x, ids, wts, w1, w2, out,
                      **dict(good, w1_scale=FakeCuda((16, 3, 3), "<f4", device=3)))
    # well-formed: the library is called (and rejects the NULL plan)
    with pytest.raises(moegemm.InvalidValueError, match="plan is NULL"):
        layer.execute(x, ids, wts, w1, w2, out, stream=0, **good)
    # a missing scale is the library's to refuse (as a missing b1): the call goes through
    with pytest.raises(moegemm.InvalidValueError):
        layer.execute(x, ids, wts, w1, w2, out, stream=0, workspace=ws, w1_scale=s1)
    # the scales land in moegemm_moe_tensors_t's w1_scale and w2_scale
    seen = {}

    def fake_execute(plan, tensors, ws_ptr, ws_bytes, stream):
        t = tensors._obj
        seen.update(struct_size=t.struct_size,
                    w1_scale=ctypes.cast(t.w1_scale, ctypes.c_void_p).value,
                    w2_scale=ctypes.cast(t.w2_scale, ctypes.c_void_p).value,
                    b1=t.b1, alpha1=bool(t.alpha1))
        return 0

    monkeypatch.setattr(moegemm.moe, "require", lambda name: fake_execute)
    assert layer.execute(x, ids, wts, w1, w2, out, stream=0, **good) is out
    assert seen == dict(struct_size=120, w1_scale=0x7F0000100000, w2_scale=0x7F0000200000,
                        b1=None, alpha1=False)
    # a 16-bit layer takes 16-bit weights: E4M3 ones are refused here
    plain = moegemm.MoeLayer._detached(**LAYER)
    assert plain.weight_dtype == _lib.DTYPE_BF16 and "e4m3" not in repr(plain)
    with pytest.raises(TypeError, match="w1: expected dtype bf16"):
        plain.execute(FakeCuda((10, 256)), ids, wts, FakeCuda((16, 256, 256), "|u1"),
                      FakeCuda((16, 256, 128)), FakeCuda((10, 256)), workspace=ws)


def test_layer_autotune_checks_like_execute():
    # The same Python-side checks, with the same messages, before the library is called.
    layer = moegemm.MoeLayer._detached(**dict(LAYER, fc1_inputs="bias", fc2_inputs="alpha"))
    x, out = FakeCuda((10, 256)), FakeCuda((10, 256))
    ids, wts = FakeCuda((10, 4), "<i4"), FakeCuda((10, 4), "<f4")
    w1, w2 = FakeCuda((16, 256, 256)), FakeCuda((16, 256, 128))
    good = dict(b1=FakeCuda((16, 256)), alpha2=FakeCuda((16,), "<f4"),
                workspace=FakeCuda((256,), "|u1"))
    full = (FakeCuda((64, 256)), FakeCuda((64, 4), "<i4"), FakeCuda((64, 4), "<f4"), w1, w2,
            FakeCuda((64, 256)))
    cases = [
        ((FakeCuda((65, 256)), FakeCuda((65, 4), "<i4"), FakeCuda((65, 4), "<f4"), w1, w2,
          FakeCuda((65, 256))), good),
        ((FakeCuda((10, 256, 1)), ids, wts, w1, w2, out), good),
        ((x, ids, wts, FakeCuda((16, 128, 256)), w2, out), good),
        ((x, FakeCuda((10, 4), "<i8"), wts, w1, w2, out), good),
        ((x, ids, FakeCuda((10, 4), "<f2"), w1, w2, out), good),
        ((x, FakeCuda((10, 2), "<i4"), wts, w1, w2, out), good),
        ((FakeCuda((10, 256), "<f2"), ids, wts, w1, w2, out), good),
        ((x, ids, wts, w1, w2, FakeCuda((10, 256), device=3)), good),
        ((x, ids, wts, w1, w2, out), dict(good, b1=FakeCuda((16, 128)))),
        ((x, ids, wts, w1, w2, out), dict(good, alpha2=FakeCuda((16,), "<f4", strides=(8,)))),
        ((x, ids, wts, w1, w2, out), dict(good, num_tokens=11)),
        ((x, ids, wts, w1, w2, out), dict(good, num_tokens="3")),
        ((x, ids, wts, w1, w2, out), dict(good, num_tokens_device=FakeCuda((1,), "<i4"))),
        (full, dict(good, num_tokens_device=FakeCuda((1,), "<i8"))),
        (full, dict(good, num_tokens=3, num_tokens_device=FakeCuda((1,), "<i4"))),
        ((x, ids, wts, w1, w2, out), dict(good, workspace=FakeCuda((256,), "|u1", device=1))),
        ((x, ids, wts, w1, w2, out), dict(good, stream="default")),
        (([[0.0]], ids, wts, w1, w2, out), good),
    ]
    for args, kwargs in cases:
        with pytest.raises((TypeError, ValueError)) as executed:
            layer.execute(*args, **kwargs)
        with pytest.raises(type(executed.value)) as tuned:
            layer.autotune(*args, **kwargs)
        assert str(tuned.value) == str(executed.value)
    # E4M3 weights: their block scales are checked as well
    fp8 = moegemm.MoeLayer._detached(**dict(LAYER, weight_scales="block", hidden=272,
                                            intermediate=144))
    x8, out8 = FakeCuda((10, 272)), FakeCuda((10, 272))
    w18, w28 = FakeCuda((16, 288, 272), "|u1"), FakeCuda((16, 272, 144), "|u1")
    with pytest.raises(ValueError, match=r"w1_scale: the plan reads 144 values, got 96"):
        fp8.autotune(x8, ids, wts, w18, w28, out8, w1_scale=FakeCuda((16, 3, 2), "<f4"),
                     w2_scale=FakeCuda((16, 3, 2), "<f4"), workspace=good["workspace"])
    with pytest.raises(TypeError, match="w2: expected dtype e4m3"):
        fp8.autotune(x8, ids, wts, w18, FakeCuda((16, 272, 144)), out8)


def test_layer_autotune_without_a_plan_raises_like_execute(monkeypatch):
    # Well-formed arguments reach moegemm_moe_plan_autotune, which refuses the NULL plan;
    # closing changes nothing.
    layer = moegemm.MoeLayer._detached(**dict(LAYER, fc1_inputs="bias", fc2_inputs="alpha"))
    args = (FakeCuda((10, 256)), FakeCuda((10, 4), "<i4"), FakeCuda((10, 4), "<f4"),
            FakeCuda((16, 256, 256)), FakeCuda((16, 256, 128)), FakeCuda((10, 256)))
    extra = dict(b1=FakeCuda((16, 256)), alpha2=FakeCuda((16,), "<f4"))
    ws = FakeCuda((256,), "|u1")
    for _ in range(2):
        with pytest.raises(moegemm.InvalidValueError, match="plan is NULL") as info:
            layer.autotune(*args, workspace=ws, stream=0, **extra)
        assert info.value.function == "moegemm_moe_plan_autotune"
        with pytest.raises(moegemm.InvalidValueError, match="plan is NULL") as info:
            layer.execute(*args, workspace=ws, stream=0, **extra)
        assert info.value.function == "moegemm_moe_execute"
        with pytest.raises(moegemm.InvalidValueError, match="plan is NULL"):
            layer.autotune(*args, **extra)  # no workspace: queried from the (NULL) plan
        layer.close()
        assert layer.closed
    # both fill the same moegemm_moe_tensors_t and pass it to their own C function
    seen = []

    def fake(name):
        def call(plan, tensors, ws_ptr, ws_bytes, stream):
            t = tensors._obj
            seen.append((name, t.struct_size, t.num_tokens, t.x, t.b1, bool(t.alpha1),
                         ctypes.cast(t.alpha2, ctypes.c_void_p).value, ws_bytes, stream))
            return 0
        return call

    monkeypatch.setattr(moegemm.moe, "require", fake)
    out = args[5]
    assert layer.autotune(*args, workspace=ws, stream=0, num_tokens=7, **extra) is out
    assert layer.execute(*args, workspace=ws, stream=0, num_tokens=7, **extra) is out
    assert [s[0] for s in seen] == ["moegemm_moe_plan_autotune", "moegemm_moe_execute"]
    assert seen[0][1:] == seen[1][1:] == (120, 7, 0x7F0000000000, 0x7F0000000000, False,
                                          0x7F0000000000, 256, None)


def test_layer_autotune_null_plan_is_invalid_value():
    t = moegemm.moe.make_moe_tensors()
    assert lib.moegemm_moe_plan_autotune(None, ctypes.byref(t), None, 0, None) == 1
    assert "plan is NULL" in moegemm.last_error_message()
    assert lib.moegemm_moe_plan_autotune(None, None, None, 0, None) == 1


def test_layer_autotune_needs_the_0_2_function(monkeypatch):
    monkeypatch.setattr(lib, "_moegemm_missing", frozenset({"moegemm_moe_plan_autotune"}))
    assert not moegemm.has_function("moegemm_moe_plan_autotune")
    layer = moegemm.MoeLayer._detached(**LAYER)
    x, ids, wts = FakeCuda((10, 256)), FakeCuda((10, 4), "<i4"), FakeCuda((10, 4), "<f4")
    w1, w2, out = FakeCuda((16, 256, 256)), FakeCuda((16, 256, 128)), FakeCuda((10, 256))
    with pytest.raises(ValueError, match=r"x: 65 tokens"):  # Python's checks first
        layer.autotune(FakeCuda((65, 256)), ids, wts, w1, w2, out)
    with pytest.raises(moegemm.FunctionUnavailableError, match="moegemm_moe_plan_autotune") as info:
        layer.autotune(x, ids, wts, w1, w2, out)
    assert info.value.function == "moegemm_moe_plan_autotune"
    with pytest.raises(moegemm.InvalidValueError, match="plan is NULL"):
        layer.execute(x, ids, wts, w1, w2, out)  # moegemm_moe_execute is still there


def test_round_tokens():
    from moegemm.moe import round_tokens
    assert [round_tokens(t) for t in (1, 2, 3, 4, 5, 63, 64, 65, 1000)] == \
        [1, 2, 4, 4, 8, 64, 64, 128, 1024]


def test_layer_cache_refuses_to_plan_under_capture(monkeypatch):
    from moegemm import moe
    made = []

    class Recorder:
        def __init__(self, **kwargs):
            made.append(kwargs["max_tokens"])

        def retire(self):
            made.append("retired")

    class FakeCudaModule:
        capturing = False

        @classmethod
        def is_current_stream_capturing(cls):
            return cls.capturing

    fake_torch = type("T", (), {"cuda": FakeCudaModule})
    monkeypatch.setattr(moe, "MoeLayer", Recorder)
    monkeypatch.setattr(moe, "_MAX_CACHED_LAYERS", 2)
    monkeypatch.setattr(moe, "_cache", __import__("collections").OrderedDict())
    first = moe._layer_for(("k", 1), {"max_tokens": 1}, fake_torch)
    FakeCudaModule.capturing = True
    assert moe._layer_for(("k", 1), {"max_tokens": 1}, fake_torch) is first  # cached: fine
    with pytest.raises(RuntimeError, match="before capturing"):
        moe._layer_for(("k", 2), {"max_tokens": 2}, fake_torch)
    FakeCudaModule.capturing = False
    moe._layer_for(("k", 2), {"max_tokens": 2}, fake_torch)
    moe._layer_for(("k", 4), {"max_tokens": 4}, fake_torch)  # a third: the oldest is retired
    assert made == [1, 2, 4, "retired"]
    assert len(moe.cached_layers()) == 2
    moegemm.clear_moe_layer_cache()
    assert made.count("retired") == 3 and not moe.cached_layers()


# --- moe_layer's PyTorch side (no GPU: argument checks, the op's schema, fake tensors) ---------
def _torch():
    return pytest.importorskip("torch")


def _layer_args(torch, t=5, h=64, i=32, e=4, k=2, dtype=None, gated=True, device="cpu"):
    dtype = dtype or torch.bfloat16
    x = torch.zeros(t, h, dtype=dtype, device=device)
    ids = torch.zeros(t, k, dtype=torch.int32, device=device)
    w = torch.zeros(t, k, dtype=torch.float32, device=device)
    w1 = torch.zeros(e, 2 * i if gated else i, h, dtype=dtype, device=device)
    w2 = torch.zeros(e, h, i, dtype=dtype, device=device)
    return x, ids, w, w1, w2


def test_moe_layer_op_is_registered():
    torch = _torch()
    if not hasattr(torch.library, "custom_op"):
        pytest.skip("torch < 2.4: moe_layer runs eagerly, without a custom op")
    schema = str(torch.ops.moegemm.moe_layer.default._schema)
    assert schema.startswith("moegemm::moe_layer(Tensor x, Tensor topk_ids, Tensor topk_weights")
    assert "(a" not in schema.split("->")[0]  # functional: mutates nothing
    assert 'str? activation="swiglu"' in schema and schema.endswith("-> Tensor")
    assert "Tensor? w1_scale=None, Tensor? w2_scale=None" in schema
    out_schema = str(torch.ops.moegemm.moe_layer_out.default._schema)
    assert "Tensor(a0!) out" in out_schema and out_schema.endswith("-> ()")
    assert "Tensor? w1_scale=None, Tensor? w2_scale=None" in out_schema


@pytest.mark.parametrize("change, exc, match", [
    (lambda a, t: a.__setitem__(0, a[0][:, :60]), ValueError, "w2: expected"),
    (lambda a, t: a.__setitem__(3, a[3][:, :32]), ValueError, "w1: expected .*2I=64"),
    (lambda a, t: a.__setitem__(1, a[1].float()), TypeError, "topk_ids: expected int32 or int64"),
    (lambda a, t: a.__setitem__(2, a[2][:, :1]), ValueError, "topk_weights: expected shape"),
    (lambda a, t: a.__setitem__(2, a[2].int()), TypeError, "topk_weights: expected a floating"),
    (lambda a, t: a.__setitem__(0, a[0].float()), TypeError, "x: expected bfloat16 or float16"),
    (lambda a, t: a.__setitem__(4, a[4].half()), TypeError, "w2: expected torch.bfloat16"),
    (lambda a, t: a.__setitem__(1, a[1][:3]), ValueError, "topk_ids: expected \\[T=5"),
])
def test_moe_layer_checks_arguments(change, exc, match):
    torch = _torch()
    args = list(_layer_args(torch))
    change(args, torch)
    with pytest.raises(exc, match=match):
        moegemm.moe_layer(*args)


def test_moe_layer_checks_options_and_device():
    torch = _torch()
    x, ids, w, w1, w2 = _layer_args(torch)
    with pytest.raises(ValueError, match="must be a CUDA tensor"):
        moegemm.moe_layer(x, ids, w, w1, w2)  # valid shapes, but on the CPU
    with pytest.raises(ValueError, match="activation: unknown value 'relu'"):
        moegemm.moe_layer(x, ids, w, w1, w2, activation="relu")
    with pytest.raises(ValueError, match="gate_layout"):
        moegemm.moe_layer(x, ids, w, w1, w2, gate_layout="sideways")
    with pytest.raises(ValueError, match=r"b1: expected shape \(4, 64\)"):
        moegemm.moe_layer(x, ids, w, w1, w2, b1=torch.zeros(4, 32, dtype=x.dtype))
    with pytest.raises(TypeError, match="b2: expected torch.bfloat16"):
        moegemm.moe_layer(x, ids, w, w1, w2, b2=torch.zeros(4, 64))
    with pytest.raises(ValueError, match=r"alpha1: expected shape \(4,\)"):
        moegemm.moe_layer(x, ids, w, w1, w2, alpha1=torch.ones(5))
    # not gated: w1 has I rows
    x, ids, w, w1, w2 = _layer_args(torch, gated=False)
    with pytest.raises(ValueError, match="must be a CUDA tensor"):
        moegemm.moe_layer(x, ids, w, w1, w2, activation="silu")
    with pytest.raises(ValueError, match="w1: expected"):
        moegemm.moe_layer(x, ids, w, w1, w2)  # swiglu wants 2I rows


def _fp8_layer_args(torch, device="cpu", **kwargs):
    """bf16 x, E4M3 w1 [4, 64, 64] and w2 [4, 64, 32], their block scales [4, 1, 1]."""
    x, ids, w, w1, w2 = _layer_args(torch, device=device, **kwargs)
    f8 = torch.float8_e4m3fn
    s1 = torch.ones(w1.shape[0], -(-w1.shape[1] // 128), -(-w1.shape[2] // 128), device=device)
    s2 = torch.ones(w2.shape[0], -(-w2.shape[1] // 128), -(-w2.shape[2] // 128), device=device)
    return x, ids, w, w1.to(f8), w2.to(f8), s1, s2


def test_moe_layer_checks_fp8_weights():
    torch = _torch()
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("torch without float8_e4m3fn")
    x, ids, w, w1, w2, s1, s2 = _fp8_layer_args(torch)
    with pytest.raises(ValueError, match="must be a CUDA tensor"):
        moegemm.moe_layer(x, ids, w, w1, w2, w1_scale=s1, w2_scale=s2)  # valid, on the CPU
    with pytest.raises(ValueError, match="got only w1_scale"):
        moegemm.moe_layer(x, ids, w, w1, w2, w1_scale=s1)
    with pytest.raises(ValueError, match="got only w2_scale"):
        moegemm.moe_layer(x, ids, w, w1, w2, w2_scale=s2)
    with pytest.raises(TypeError, match="E4M3 weights need w1_scale and w2_scale"):
        moegemm.moe_layer(x, ids, w, w1, w2)
    with pytest.raises(TypeError, match="w1: expected torch.float8_e4m3fn"):
        moegemm.moe_layer(x, ids, w, w1.to(x.dtype), w2, w1_scale=s1, w2_scale=s2)
    with pytest.raises(TypeError, match="x: expected bfloat16 with E4M3 weights"):
        moegemm.moe_layer(x.half(), ids, w, w1, w2, w1_scale=s1, w2_scale=s2)
    with pytest.raises(ValueError, match=r"w2_scale: expected shape \(4, 1, 1\)"):
        moegemm.moe_layer(x, ids, w, w1, w2, w1_scale=s1, w2_scale=torch.ones(4, 1, 2))
    with pytest.raises(TypeError, match="w1_scale: expected a floating"):
        moegemm.moe_layer(x, ids, w, w1, w2, w1_scale=s1.int(), w2_scale=s2)
    # H = 272: three blocks of 128 along H (the last one partial)
    x, ids, w, w1, w2, s1, s2 = _fp8_layer_args(torch, h=272, i=144)
    assert (tuple(s1.shape), tuple(s2.shape)) == ((4, 3, 3), (4, 3, 2))
    with pytest.raises(ValueError, match="must be a CUDA tensor"):
        moegemm.moe_layer(x, ids, w, w1, w2, w1_scale=s1, w2_scale=s2)
    with pytest.raises(ValueError, match=r"w1_scale: expected shape \(4, 3, 3\)"):
        moegemm.moe_layer(x, ids, w, w1, w2, w1_scale=s2, w2_scale=s2)


def test_moe_layer_fake_tensors_give_the_output_shape():
    torch = _torch()
    if not hasattr(torch.library, "custom_op"):
        pytest.skip("torch < 2.4")
    for dtype in (torch.bfloat16, torch.float16):
        x, ids, w, w1, w2 = _layer_args(torch, t=7, dtype=dtype, device="meta")
        out = moegemm.moe_layer(x, ids, w, w1, w2)
        assert out.shape == (7, 64) and out.dtype == dtype and out.device.type == "meta"
        out = moegemm.moe_layer(x, ids.long(), w.half(), w1, w2, b1=torch.zeros(4, 64, dtype=dtype,
                                                                               device="meta"))
        assert out.shape == (7, 64)
    x, ids, w, w1, w2 = _layer_args(torch, t=3, device="meta")
    dest = torch.empty(3, 64, dtype=x.dtype, device="meta")
    assert moegemm.moe_layer(x, ids, w, w1, w2, out=dest) is dest
    if hasattr(torch, "float8_e4m3fn"):  # E4M3 weights: out is x's bf16
        x, ids, w, w1, w2, s1, s2 = _fp8_layer_args(torch, t=6, device="meta")
        out = moegemm.moe_layer(x, ids, w, w1, w2, w1_scale=s1, w2_scale=s2)
        assert out.shape == (6, 64) and out.dtype == torch.bfloat16


def test_moe_layer_traces_into_one_graph_with_fake_tensors():
    torch = _torch()
    if not hasattr(torch.library, "custom_op"):
        pytest.skip("torch < 2.4")
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x, ids, w, w1, w2):
        return moegemm.moe_layer(x, ids, w, w1, w2, activation="swiglu") + 1

    with FakeTensorMode():
        args = _layer_args(torch, t=9)
        gm = make_fx(f)(*args)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert torch.ops.moegemm.moe_layer.default in targets

    # Dynamo, fullgraph, on meta tensors (the fake implementation runs; no GPU needed)
    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, backend="eager", dynamic=True)
    for t in (4, 6):
        out = compiled(*_layer_args(torch, t=t, device="meta"))
        assert out.shape == (t, 64)

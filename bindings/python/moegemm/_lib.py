"""Loading libmoegemm through ctypes and declaring every function of moegemm/moegemm.h.

Search order (the first that loads wins):
  1. the environment variable MOEGEMM_LIBRARY (full path of the shared library);
  2. a ``libmoegemm.so*`` shipped next to this package, in ``moegemm/lib/``;
  3. ``pkg-config --variable=libdir moegemm`` (honours PKG_CONFIG_PATH);
  4. ``ctypes.CDLL("libmoegemm.so.0")`` (the system's loader: LD_LIBRARY_PATH, ld.so.cache).
"""
import ctypes
import glob
import os
import subprocess
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_float, c_int, c_int32, c_int64,
                    c_size_t, c_uint32, c_void_p)

#: The library major version this package is written against (ABI compatible within a major).
EXPECTED_MAJOR = 0
#: The version of moegemm/version.h that this binding mirrors.
HEADER_VERSION = (0, 1, 0)

SONAME = "libmoegemm.so.0"


class MoegemmLibraryNotFound(ImportError):
    """libmoegemm could not be loaded from any of the places searched."""


class MoegemmVersionMismatch(ImportError):
    """The loaded libmoegemm has a major version this package does not support."""


# --- constants of the header ----------------------------------------------------------------
MOEGEMM_MAX_EXPERTS = 1024
MOEGEMM_DESCRIBE_MAX = 512
MOEGEMM_PROBLEM_SIZE_0_1 = 88
MOEGEMM_PROBLEM_SIZE_0_2 = 120
MOEGEMM_SIZES_CLAMPED_NEGATIVE = 0x1
MOEGEMM_SIZES_CLAMPED_CAPACITY = 0x2
MOEGEMM_ROWS_CLAMPED_INDEX = 0x4
# bits of moegemm_problem_t.epilogue_inputs (and of the layer's fc1_inputs / fc2_inputs)
MOEGEMM_EPILOGUE_ALPHA = 0x1
MOEGEMM_EPILOGUE_ROW_SCALE = 0x2
MOEGEMM_EPILOGUE_BIAS = 0x4

# enums (values pinned by the header)
LAYOUT_VARIABLE, LAYOUT_MASKED, LAYOUT_FIXED = 0, 1, 2
DTYPE_BF16, DTYPE_F16, DTYPE_F32, DTYPE_E4M3 = 0, 1, 2, 3
WEIGHTS_NK, WEIGHTS_KN = 0, 1
SCALE_NONE, SCALE_PER_TENSOR, SCALE_PER_EXPERT, SCALE_ROWWISE, SCALE_BLOCK = 0, 1, 2, 3, 4
BACKEND_AUTO, BACKEND_NATIVE, BACKEND_CUBLASLT = 0, 1, 2
MEMORY_HOST, MEMORY_DEVICE = 0, 1
LOG_OFF, LOG_ERROR, LOG_WARN, LOG_INFO, LOG_TRACE = 0, 1, 2, 3, 4
(ACTIVATION_NONE, ACTIVATION_SILU, ACTIVATION_GELU_TANH, ACTIVATION_SWIGLU, ACTIVATION_GEGLU,
 ACTIVATION_SWIGLU_CLAMPED) = 0, 1, 2, 3, 4, 5
GATE_UP_HALVES, UP_GATE_HALVES, GATE_UP_INTERLEAVED = 0, 1, 2
INDEX_INT32, INDEX_INT64 = 0, 1
#: the gated activations: two product columns (gate, up) make one output column
GATED_ACTIVATIONS = frozenset((ACTIVATION_SWIGLU, ACTIVATION_GEGLU, ACTIVATION_SWIGLU_CLAMPED))

# C enums are passed as int.
moegemm_status_t = c_int
moegemm_layout_t = c_int
moegemm_dtype_t = c_int
moegemm_weight_layout_t = c_int
moegemm_scale_mode_t = c_int
moegemm_backend_t = c_int
moegemm_memory_t = c_int
moegemm_log_level_t = c_int
moegemm_activation_t = c_int
moegemm_gate_layout_t = c_int
moegemm_index_type_t = c_int
moegemm_plan_t = c_void_p
moegemm_moe_plan_t = c_void_p
cudaStream_t = c_void_p


class moegemm_problem_t(Structure):
    """Mirror of ``moegemm_problem_t``, field by field, in the header's order."""
    _fields_ = [
        ("struct_size", c_size_t),
        ("layout", moegemm_layout_t),
        ("num_experts", c_int32),
        ("n", c_int64),
        ("k", c_int64),
        ("max_rows", c_int64),
        ("a_type", moegemm_dtype_t),
        ("b_type", moegemm_dtype_t),
        ("d_type", moegemm_dtype_t),
        ("weight_layout", moegemm_weight_layout_t),
        ("scale_mode", moegemm_scale_mode_t),
        ("backend", moegemm_backend_t),
        ("device", c_int32),
        ("expected_rows", c_int64),
        ("force_kernel", c_char_p),
        # since 0.2 (MOEGEMM_PROBLEM_SIZE_0_2): every default is 0, the 0.1 behaviour
        ("epilogue_inputs", c_uint32),
        ("bias_type", moegemm_dtype_t),
        ("activation", moegemm_activation_t),
        ("gate_layout", moegemm_gate_layout_t),
        ("activation_alpha", c_float),
        ("activation_limit", c_float),
        ("gather_rows", c_int64),
    ]


class moegemm_tensors_t(Structure):
    """Mirror of ``moegemm_tensors_t`` (moegemm_execute_tensors' arguments)."""
    _fields_ = [
        ("struct_size", c_size_t),
        ("a", c_void_p),
        ("b", c_void_p),
        ("d", c_void_p),
        ("a_scale", POINTER(c_float)),
        ("b_scale", POINTER(c_float)),
        ("alpha", POINTER(c_float)),
        ("row_scale", POINTER(c_float)),
        ("bias", c_void_p),
        ("a_rows", POINTER(c_int32)),
    ]


class moegemm_moe_problem_t(Structure):
    """Mirror of ``moegemm_moe_problem_t``, field by field, in the header's order."""
    _fields_ = [
        ("struct_size", c_size_t),
        ("num_experts", c_int32),
        ("first_expert", c_int32),
        ("local_experts", c_int32),
        ("top_k", c_int32),
        ("hidden", c_int64),
        ("intermediate", c_int64),
        ("max_tokens", c_int64),
        ("dtype", moegemm_dtype_t),
        ("activation", moegemm_activation_t),
        ("gate_layout", moegemm_gate_layout_t),
        ("activation_alpha", c_float),
        ("activation_limit", c_float),
        ("fc1_inputs", c_uint32),
        ("fc2_inputs", c_uint32),
        ("id_type", moegemm_index_type_t),
        ("backend", moegemm_backend_t),
        ("device", c_int32),
        ("expected_tokens", c_int64),
        ("weight_scales", moegemm_scale_mode_t),
    ]


class moegemm_moe_tensors_t(Structure):
    """Mirror of ``moegemm_moe_tensors_t`` (moegemm_moe_execute's arguments)."""
    _fields_ = [
        ("struct_size", c_size_t),
        ("x", c_void_p),
        ("topk_ids", c_void_p),
        ("topk_weights", POINTER(c_float)),
        ("w1", c_void_p),
        ("w2", c_void_p),
        ("b1", c_void_p),
        ("b2", c_void_p),
        ("alpha1", POINTER(c_float)),
        ("alpha2", POINTER(c_float)),
        ("out", c_void_p),
        ("num_tokens", c_int64),
        ("num_tokens_device", POINTER(c_int32)),
        ("w1_scale", POINTER(c_float)),
        ("w2_scale", POINTER(c_float)),
    ]


#: typedef void (*moegemm_log_callback_t)(moegemm_log_level_t, const char*, void*);
moegemm_log_callback_t = CFUNCTYPE(None, moegemm_log_level_t, c_char_p, c_void_p)

# name: (restype, [argtypes])
_SIGNATURES = {
    "moegemm_problem_init": (moegemm_status_t, [POINTER(moegemm_problem_t)]),
    "moegemm_problem_init_sized": (moegemm_status_t, [POINTER(moegemm_problem_t), c_size_t]),
    "moegemm_plan_create": (moegemm_status_t, [POINTER(moegemm_problem_t), POINTER(moegemm_plan_t)]),
    "moegemm_plan_destroy": (moegemm_status_t, [moegemm_plan_t]),
    "moegemm_plan_set_expert_sizes": (moegemm_status_t, [moegemm_plan_t, POINTER(c_int32), moegemm_memory_t]),
    "moegemm_plan_get_workspace_size": (moegemm_status_t, [moegemm_plan_t, POINTER(c_size_t)]),
    "moegemm_plan_get_status_word": (moegemm_status_t, [moegemm_plan_t, POINTER(POINTER(c_uint32))]),
    "moegemm_plan_describe": (moegemm_status_t, [moegemm_plan_t, c_char_p, c_size_t]),
    "moegemm_execute": (moegemm_status_t, [moegemm_plan_t, c_void_p, c_void_p, c_void_p,
                                           POINTER(ctypes.c_float), POINTER(ctypes.c_float),
                                           c_void_p, c_size_t, cudaStream_t]),
    "moegemm_tensors_init_sized": (moegemm_status_t, [POINTER(moegemm_tensors_t), c_size_t]),
    "moegemm_execute_tensors": (moegemm_status_t, [moegemm_plan_t, POINTER(moegemm_tensors_t),
                                                   c_void_p, c_size_t, cudaStream_t]),
    "moegemm_plan_autotune": (moegemm_status_t, [moegemm_plan_t, POINTER(moegemm_tensors_t),
                                                 c_void_p, c_size_t, cudaStream_t]),
    "moegemm_set_tune_cache_file": (moegemm_status_t, [c_char_p]),
    "moegemm_moe_problem_init_sized": (moegemm_status_t, [POINTER(moegemm_moe_problem_t), c_size_t]),
    "moegemm_moe_plan_create": (moegemm_status_t, [POINTER(moegemm_moe_problem_t),
                                                   POINTER(moegemm_moe_plan_t)]),
    "moegemm_moe_plan_destroy": (moegemm_status_t, [moegemm_moe_plan_t]),
    "moegemm_moe_plan_get_workspace_size": (moegemm_status_t, [moegemm_moe_plan_t, POINTER(c_size_t)]),
    "moegemm_moe_plan_get_status_word": (moegemm_status_t, [moegemm_moe_plan_t,
                                                            POINTER(POINTER(c_uint32))]),
    "moegemm_moe_plan_describe": (moegemm_status_t, [moegemm_moe_plan_t, c_char_p, c_size_t]),
    "moegemm_moe_tensors_init_sized": (moegemm_status_t, [POINTER(moegemm_moe_tensors_t), c_size_t]),
    "moegemm_moe_execute": (moegemm_status_t, [moegemm_moe_plan_t, POINTER(moegemm_moe_tensors_t),
                                               c_void_p, c_size_t, cudaStream_t]),
    "moegemm_moe_plan_autotune": (moegemm_status_t, [moegemm_moe_plan_t,
                                                     POINTER(moegemm_moe_tensors_t), c_void_p,
                                                     c_size_t, cudaStream_t]),
    "moegemm_kernel_count": (c_int, []),
    "moegemm_kernel_name": (c_char_p, [c_int]),
    "moegemm_status_string": (c_char_p, [moegemm_status_t]),
    "moegemm_status_name": (c_char_p, [moegemm_status_t]),
    "moegemm_get_last_error_message": (c_char_p, []),
    "moegemm_set_log_callback": (moegemm_status_t, [moegemm_log_callback_t, c_void_p, moegemm_log_level_t]),
    "moegemm_get_version": (c_int, []),
    "moegemm_get_version_string": (c_char_p, []),
}


def _candidates():
    """Yield (description, path) in search order."""
    env = os.environ.get("MOEGEMM_LIBRARY")
    if env:
        yield "MOEGEMM_LIBRARY=%s" % env, env
    else:
        yield "MOEGEMM_LIBRARY (not set)", None
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib")
    bundled = sorted(glob.glob(os.path.join(here, "libmoegemm.so*")), key=len)
    if bundled:
        for path in bundled:
            yield "package directory %s" % path, path
    else:
        yield "package directory %s (no libmoegemm.so*)" % here, None
    try:
        res = subprocess.run(["pkg-config", "--variable=libdir", "moegemm"], capture_output=True,
                             text=True, timeout=10, check=False)
        libdir = res.stdout.strip() if res.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        libdir = ""
    if libdir:
        for name in (SONAME, "libmoegemm.so"):
            path = os.path.join(libdir, name)
            yield "pkg-config libdir %s" % path, path
    else:
        yield "pkg-config --variable=libdir moegemm (not found)", None
    yield "system loader %s (LD_LIBRARY_PATH, ld.so.cache)" % SONAME, SONAME


#: Functions added in 0.2. A library that predates them still loads: they are declared when
#: present, and calling one that is absent raises moegemm.FunctionUnavailableError
#: (errors.require()).
NEW_IN_0_2 = frozenset((
    "moegemm_tensors_init_sized", "moegemm_execute_tensors", "moegemm_plan_autotune",
    "moegemm_set_tune_cache_file", "moegemm_moe_problem_init_sized",
    "moegemm_moe_plan_create", "moegemm_moe_plan_destroy", "moegemm_moe_plan_get_workspace_size",
    "moegemm_moe_plan_get_status_word", "moegemm_moe_plan_describe",
    "moegemm_moe_tensors_init_sized", "moegemm_moe_execute", "moegemm_moe_plan_autotune"))


def _declare(lib):
    """Declares every function; returns the names of the optional ones the library lacks (a
    missing 0.1 function raises AttributeError: then this is not a usable libmoegemm)."""
    missing = []
    for name, (restype, argtypes) in _SIGNATURES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            if name in NEW_IN_0_2:
                missing.append(name)
                continue
            raise
        fn.restype = restype
        fn.argtypes = argtypes
    return missing


def load_library():
    """Load libmoegemm, declare its functions and check its major version."""
    tried = []
    for what, path in _candidates():
        if path is None:
            tried.append(what)
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as exc:
            tried.append("%s: %s" % (what, exc))
            continue
        try:
            missing = _declare(lib)
        except AttributeError as exc:
            tried.append("%s: not libmoegemm (%s)" % (what, exc))
            continue
        version = lib.moegemm_get_version()
        if version // 10000 != EXPECTED_MAJOR:
            raise MoegemmVersionMismatch(
                "libmoegemm %s loaded from %s has major version %d; this Python package needs "
                "major version %d" % (lib.moegemm_get_version_string().decode(), path,
                                      version // 10000, EXPECTED_MAJOR))
        lib._moegemm_path = path
        lib._moegemm_found_by = what
        lib._moegemm_missing = frozenset(missing)
        return lib
    raise MoegemmLibraryNotFound(
        "libmoegemm could not be loaded. Places tried, in order:\n  - " + "\n  - ".join(tried) +
        "\nSet MOEGEMM_LIBRARY to the full path of libmoegemm.so, or install libmoegemm where "
        "pkg-config or the system loader finds it.")


lib = load_library()
#: Path (or soname) the library was loaded from.
library_path = lib._moegemm_path


#: Functions of the header that the loaded library does not export (an older library).
missing_functions = lib._moegemm_missing


def has_function(name):
    """Whether the loaded library exports `name` (every 0.1 function is always there)."""
    return name in _SIGNATURES and name not in lib._moegemm_missing


def function(name):
    """The declared ctypes function `name`, or None when the loaded library does not export it
    (a library older than the header). errors.require() raises a clear error instead."""
    if name in lib._moegemm_missing:
        return None
    return getattr(lib, name)


def version():
    """Runtime version as an int, major*10000 + minor*100 + patch."""
    return lib.moegemm_get_version()


def version_string():
    return lib.moegemm_get_version_string().decode()


def last_error_message():
    msg = lib.moegemm_get_last_error_message()
    return msg.decode("utf-8", "replace") if msg else ""


def kernel_names():
    """Names of the kernel variants this build contains (for ``force_kernel``)."""
    return [lib.moegemm_kernel_name(i).decode() for i in range(lib.moegemm_kernel_count())]

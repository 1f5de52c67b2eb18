"""Python binding of libmoegemm: grouped expert GEMMs for Mixture-of-Experts layers.

Pure Python over ctypes. See README.md for finding the library (MOEGEMM_LIBRARY, a
``moegemm/lib/libmoegemm.so*`` next to the package, pkg-config, the system loader).
"""
from ._lib import (EXPECTED_MAJOR, MOEGEMM_DESCRIBE_MAX, MOEGEMM_EPILOGUE_ALPHA,
                   MOEGEMM_EPILOGUE_BIAS, MOEGEMM_EPILOGUE_ROW_SCALE, MOEGEMM_MAX_EXPERTS,
                   MOEGEMM_ROWS_CLAMPED_INDEX, MOEGEMM_SIZES_CLAMPED_CAPACITY,
                   MOEGEMM_SIZES_CLAMPED_NEGATIVE, MoegemmLibraryNotFound,
                   MoegemmVersionMismatch, has_function, kernel_names, last_error_message,
                   library_path, missing_functions, version, version_string)
from .errors import (AllocFailedError, ArchMismatchError, CublasError, CudaError,
                     FunctionUnavailableError, InternalError, InvalidStateError,
                     InvalidValueError, MisalignedError, MoegemmError, NoDeviceError,
                     NotSupportedError, STATUS_TO_ERROR, WorkspaceTooSmallError, check)
from .plan import Plan, make_problem, set_tune_cache_file
from .api import grouped_mm, clear_plan_cache
from .moe import (MoeLayer, autotune_moe_layer, clear_moe_layer_cache, make_moe_problem,
                  moe_layer)
from ._logging import set_log_callback, enable_logging, disable_logging

__version__ = "0.2.0"

__all__ = [
    "Plan", "make_problem", "set_tune_cache_file", "grouped_mm", "clear_plan_cache",
    "MoeLayer", "make_moe_problem", "moe_layer", "autotune_moe_layer", "clear_moe_layer_cache",
    "set_log_callback", "enable_logging", "disable_logging",
    "version", "version_string", "kernel_names", "last_error_message", "library_path",
    "check", "MoegemmError", "InvalidValueError", "NotSupportedError", "NoDeviceError",
    "ArchMismatchError", "MisalignedError", "WorkspaceTooSmallError", "InvalidStateError",
    "AllocFailedError", "CudaError", "CublasError", "InternalError", "STATUS_TO_ERROR",
    "FunctionUnavailableError", "has_function", "missing_functions",
    "MoegemmLibraryNotFound", "MoegemmVersionMismatch", "EXPECTED_MAJOR",
    "MOEGEMM_MAX_EXPERTS", "MOEGEMM_DESCRIBE_MAX", "MOEGEMM_SIZES_CLAMPED_NEGATIVE",
    "MOEGEMM_SIZES_CLAMPED_CAPACITY", "MOEGEMM_ROWS_CLAMPED_INDEX", "MOEGEMM_EPILOGUE_ALPHA",
    "MOEGEMM_EPILOGUE_ROW_SCALE", "MOEGEMM_EPILOGUE_BIAS",
]

"""Exceptions: one class per moegemm_status_t, carrying the library's message."""
from . import _lib


class MoegemmError(RuntimeError):
    """A libmoegemm call failed.

    Attributes: ``status`` (int), ``status_name`` ("MOEGEMM_STATUS_..."), ``message`` (the
    library's message from moegemm_get_last_error_message()), ``function`` (the C function).
    """
    status = None

    def __init__(self, status, message="", function=None):
        self.status = int(status)
        self.status_name = _lib.lib.moegemm_status_name(self.status).decode()
        self.status_string = _lib.lib.moegemm_status_string(self.status).decode()
        self.message = message
        self.function = function
        where = "%s: " % function if function else ""
        super().__init__("%s%s (%s): %s" % (where, self.status_name, self.status_string, message))


class InvalidValueError(MoegemmError, ValueError):
    status = 1


class NotSupportedError(MoegemmError, NotImplementedError):
    status = 2


class NoDeviceError(MoegemmError):
    status = 3


class ArchMismatchError(MoegemmError):
    status = 4


class MisalignedError(MoegemmError, ValueError):
    status = 5


class WorkspaceTooSmallError(MoegemmError, ValueError):
    status = 6


class InvalidStateError(MoegemmError):
    status = 7


class AllocFailedError(MoegemmError, MemoryError):
    status = 8


class CudaError(MoegemmError):
    status = 9


class CublasError(MoegemmError):
    status = 10


class InternalError(MoegemmError):
    status = 11


#: status code -> exception class
STATUS_TO_ERROR = {cls.status: cls for cls in (
    InvalidValueError, NotSupportedError, NoDeviceError, ArchMismatchError, MisalignedError,
    WorkspaceTooSmallError, InvalidStateError, AllocFailedError, CudaError, CublasError,
    InternalError)}


class FunctionUnavailableError(NotSupportedError):
    """The loaded libmoegemm does not export a function this call needs: it predates the part
    of the C API (0.2: epilogues, gathers, the MoE layer, autotuning) that the binding
    mirrors. The rest of the binding works with it. ``function`` names the missing C
    function."""

    def __init__(self, function):
        message = ("the loaded libmoegemm %s (%s) does not export %s, which the C API added in "
                   "0.2; load a libmoegemm that has it (MOEGEMM_LIBRARY=/path/to/libmoegemm.so)"
                   % (_lib.version_string(), _lib.library_path, function))
        super().__init__(self.status, message, function)


def require(name):
    """The ctypes function `name` of the loaded library, or FunctionUnavailableError."""
    fn = _lib.function(name)
    if fn is None:
        raise FunctionUnavailableError(name)
    return fn


def error_for(status, message=None, function=None):
    """The exception for a non-zero status (MoegemmError for an unknown one)."""
    if message is None:
        message = _lib.last_error_message()
    cls = STATUS_TO_ERROR.get(int(status), MoegemmError)
    return cls(status, message, function)


def check(status, function=None):
    """Raise the status's exception, with the library's last message, unless it is SUCCESS."""
    if status != 0:
        raise error_for(status, function=function)
    return status

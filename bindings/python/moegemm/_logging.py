"""Bridging libmoegemm's log callback to Python."""
import ctypes
import logging
import threading

from . import _lib
from .errors import check

_LEVELS = {"off": _lib.LOG_OFF, "error": _lib.LOG_ERROR, "warn": _lib.LOG_WARN,
           "warning": _lib.LOG_WARN, "info": _lib.LOG_INFO, "trace": _lib.LOG_TRACE,
           "debug": _lib.LOG_TRACE}
#: libmoegemm level -> Python logging level
PY_LEVEL = {_lib.LOG_ERROR: logging.ERROR, _lib.LOG_WARN: logging.WARNING,
            _lib.LOG_INFO: logging.INFO, _lib.LOG_TRACE: logging.DEBUG}

logger = logging.getLogger("moegemm")
_lock = threading.Lock()
_current = None  # the ctypes callback object: must stay alive while the library holds it


def _level(level):
    if isinstance(level, str):
        try:
            return _LEVELS[level.lower()]
        except KeyError:
            raise ValueError("level: unknown log level %r (expected one of %s)"
                             % (level, ", ".join(_LEVELS))) from None
    if isinstance(level, bool) or not isinstance(level, int):
        raise TypeError("level: expected an int 0..4 or a name, got %r" % (level,))
    return level


def set_log_callback(fn, level="info"):
    """Send libmoegemm's messages up to `level` to ``fn(level: int, message: str)``.

    `level`: 0..4 or 'off', 'error', 'warn', 'info', 'trace'. fn=None sends them to the
    environment's destination (MOEGEMM_LOG_FILE or stderr); level 'off' silences the
    library. Exceptions raised by fn are swallowed (the callback runs inside a C call).
    fn must not call libmoegemm.
    """
    global _current
    lvl = _level(level)
    if fn is None:
        cb = ctypes.cast(None, _lib.moegemm_log_callback_t)
    else:
        def _bridge(c_level, c_message, _user):
            try:
                fn(int(c_level), c_message.decode("utf-8", "replace") if c_message else "")
            except Exception:  # noqa: BLE001 - must not propagate into C
                pass
        cb = _lib.moegemm_log_callback_t(_bridge)
    with _lock:
        check(_lib.lib.moegemm_set_log_callback(cb, None, lvl), "moegemm_set_log_callback")
        _current = cb if fn is not None else None


def enable_logging(level="info", py_logger=None):
    """Forward libmoegemm's messages to the Python logger "moegemm" (or `py_logger`)."""
    target = py_logger or logger

    def _emit(lvl, message):
        target.log(PY_LEVEL.get(lvl, logging.DEBUG), "%s", message)
    set_log_callback(_emit, level)


def disable_logging():
    """Silence the library (level OFF)."""
    set_log_callback(None, "off")

"""Exceptions carrying the library's stable status code and message.

Each status of ``nenyax_status_t`` has its own subclass of :class:`NenyaxError` (for ``except``
clauses that care); every one has ``.status`` (the code, stable across releases), ``.status_name``
and the library's message as its text.
"""

from __future__ import annotations

from typing import Dict, Type

STATUS_NAMES: Dict[int, str] = {
    0: "OK",
    1: "INVALID_ARGUMENT",
    2: "INVALID_URI",
    3: "UNKNOWN_SCHEME",
    4: "DRIVER_UNAVAILABLE",
    5: "UNKNOWN_TARGET",
    6: "UNKNOWN_PARAMETER",
    7: "INVALID_PARAMETER",
    8: "UNSUPPORTED",
    9: "POLICY_MISMATCH",
    10: "POLICY",
    11: "INVALID_ACTION",
    12: "ENVIRONMENT",
    13: "NON_FINITE_SCORE",
    14: "JUDGE",
    15: "DEFINE",
    16: "ENDPOINT",
    17: "PROTOCOL",
    18: "CONFIG",
    19: "IO",
    20: "CALLBACK",
    21: "PANIC",
    22: "CUDA_UNAVAILABLE",
    23: "CUDA",
    24: "CAPACITY",
    25: "TRAINING",
}


class NenyaxError(Exception):
    """An error returned by libnenyax: ``status`` is its stable code, the text its message."""

    status: int = -1

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status

    @property
    def status_name(self) -> str:
        """The status's name, e.g. ``UNKNOWN_SCHEME``."""
        return STATUS_NAMES.get(self.status, f"UNKNOWN({self.status})")

    @property
    def message(self) -> str:
        """The library's message."""
        return str(self.args[0]) if self.args else ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status_name}, message={self.message!r})"


def _class_name(name: str) -> str:
    if name == "ENVIRONMENT":
        return "EnvError"  # EnvironmentError is a builtin (OSError)
    return "".join(part.capitalize() for part in name.split("_")) + "Error"


_CLASSES: Dict[int, Type[NenyaxError]] = {}
for _code, _name in STATUS_NAMES.items():
    if _code == 0:
        continue
    _cls = type(_class_name(_name), (NenyaxError,), {"status": _code, "__module__": __name__})
    _CLASSES[_code] = _cls
    globals()[_cls.__name__] = _cls

# Names for type checkers and readers (the classes above are made in a loop).
InvalidArgumentError: Type[NenyaxError] = _CLASSES[1]
InvalidUriError: Type[NenyaxError] = _CLASSES[2]
UnknownSchemeError: Type[NenyaxError] = _CLASSES[3]
DriverUnavailableError: Type[NenyaxError] = _CLASSES[4]
UnknownTargetError: Type[NenyaxError] = _CLASSES[5]
UnknownParameterError: Type[NenyaxError] = _CLASSES[6]
InvalidParameterError: Type[NenyaxError] = _CLASSES[7]
UnsupportedError: Type[NenyaxError] = _CLASSES[8]
PolicyMismatchError: Type[NenyaxError] = _CLASSES[9]
PolicyError: Type[NenyaxError] = _CLASSES[10]
InvalidActionError: Type[NenyaxError] = _CLASSES[11]
EnvError: Type[NenyaxError] = _CLASSES[12]
NonFiniteScoreError: Type[NenyaxError] = _CLASSES[13]
JudgeError: Type[NenyaxError] = _CLASSES[14]
DefineError: Type[NenyaxError] = _CLASSES[15]
EndpointError: Type[NenyaxError] = _CLASSES[16]
ProtocolError: Type[NenyaxError] = _CLASSES[17]
ConfigError: Type[NenyaxError] = _CLASSES[18]
IoError: Type[NenyaxError] = _CLASSES[19]
CallbackError: Type[NenyaxError] = _CLASSES[20]
PanicError: Type[NenyaxError] = _CLASSES[21]
CudaUnavailableError: Type[NenyaxError] = _CLASSES[22]
CudaError: Type[NenyaxError] = _CLASSES[23]
CapacityError: Type[NenyaxError] = _CLASSES[24]
TrainingError: Type[NenyaxError] = _CLASSES[25]


def error_for_status(status: int, message: str) -> NenyaxError:
    """The exception of the class for ``status``, carrying ``message``."""
    cls = _CLASSES.get(status, NenyaxError)
    return cls(message, status)

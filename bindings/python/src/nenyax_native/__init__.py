"""Nenyax from Python: one contract for every RL environment, over libnenyax's C ABI.

Import name ``nenyax_native`` (distribution ``nenyax-native``), so that it installs side by side
with the Python reference implementation, ``nenyax``.
"""

from . import learners
from ._native import LIBRARY_PATH, protocol_version, version
from .env import Env, Runner, load
from .errors import NenyaxError
from .policy import Endpoint, Episode, FunctionModel, Policy, as_policy
from .trajectory import Trajectory

__version__ = "0.1.0"

__all__ = [
    "Endpoint",
    "Env",
    "Episode",
    "FunctionModel",
    "LIBRARY_PATH",
    "NenyaxError",
    "Policy",
    "Runner",
    "Trajectory",
    "as_policy",
    "load",
    "protocol_version",
    "learners",
    "version",
]

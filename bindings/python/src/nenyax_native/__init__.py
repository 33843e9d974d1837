"""Nenyax from Python: one contract for every RL environment, over libnenyax's C ABI.

Import name ``nenyax_native`` (distribution ``nenyax-native``), so that it installs side by side
with the Python reference implementation, ``nenyax``.
"""

from . import learners
from ._native import LIBRARY_PATH, protocol_version, version
from .env import Env, Runner, load
from .errors import NenyaxError
from .policy import Endpoint, Episode, FunctionModel, Policy, as_policy
from .train import CustomLearner, Learner, Trainer, TrainReport, load_config, train
from .trajectory import Trajectory

__version__ = "0.1.0"

__all__ = [
    "CustomLearner",
    "Endpoint",
    "Env",
    "Episode",
    "FunctionModel",
    "LIBRARY_PATH",
    "Learner",
    "NenyaxError",
    "Policy",
    "Runner",
    "TrainReport",
    "Trainer",
    "Trajectory",
    "as_policy",
    "learners",
    "load",
    "load_config",
    "protocol_version",
    "train",
    "version",
]

"""Nenyax from Python: one contract for every RL environment, over libnenyax's C ABI.

Import name ``nenyax_native`` (distribution ``nenyax-native``), so that it installs side by side
with the Python reference implementation, ``nenyax``.
"""

from . import judges, learners, plugins
from ._native import LIBRARY_PATH, protocol_version, version
from .define import define
from .env import Env, Runner, load, run, with_judge
from .env import check_env as check
from .errors import NenyaxError
from .exports import export
from .judges import Contains, EnvJudge, ExactMatch, LlmRubric, Numeric, RegexJudge, Weighted
from .policy import Endpoint, Episode, FunctionModel, Policy, as_policy
from .recording import Recording
from .report import Report
from .sandbox import Sandbox
from .serve import Server, serve
from .session import Session
from .training import CustomLearner, Learner, Trainer, TrainReport, load_config, train
from .trajectory import Trajectory

__version__ = "0.1.0"

__all__ = [
    "Contains",
    "CustomLearner",
    "Endpoint",
    "Env",
    "EnvJudge",
    "Episode",
    "ExactMatch",
    "FunctionModel",
    "LIBRARY_PATH",
    "Learner",
    "LlmRubric",
    "NenyaxError",
    "Numeric",
    "Policy",
    "Recording",
    "RegexJudge",
    "Report",
    "Runner",
    "Sandbox",
    "Server",
    "Session",
    "TrainReport",
    "Trainer",
    "Trajectory",
    "Weighted",
    "as_policy",
    "check",
    "define",
    "export",
    "judges",
    "learners",
    "plugins",
    "load",
    "load_config",
    "protocol_version",
    "run",
    "serve",
    "train",
    "version",
    "with_judge",
]

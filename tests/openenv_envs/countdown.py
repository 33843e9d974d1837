"""A terminating OpenEnv environment for Nenyax's tests, served by the real OpenEnv framework.

Counts up by the action's `delta` (default 1) until `target` (a reset keyword, default 3), then
ends with `done=True` and the integer reward 10 (OpenEnv passes int rewards verbatim over the
WebSocket). Run it with:

    .venv-openenv/bin/python -m uvicorn countdown:app --app-dir tests/openenv_envs --port PORT

`MAX_CONCURRENT_ENVS` (default 4) sets the server's session limit.
"""

import os

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, ConcurrencyConfig, Observation, State
from pydantic import Field


class CountAction(Action):
    delta: int = Field(1, ge=0, description="how much to add to the counter")


class CountObservation(Observation):
    counter: int = 0
    target: int = 3


class CountState(State):
    target: int = 3


class CountEnv(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        self._s, self._c = CountState(), 0

    def reset(self, seed=None, episode_id=None, target: int = 3, **kw):
        self._s, self._c = CountState(episode_id=episode_id, target=target), 0
        return CountObservation(counter=0, target=target, metadata={"seed": seed})

    def step(self, action, **kw):
        self._s.step_count += 1
        self._c += action.delta
        done = self._c >= self._s.target
        return CountObservation(
            counter=self._c, target=self._s.target, done=done, reward=10 if done else 0
        )

    @property
    def state(self):
        return self._s


app = create_app(
    CountEnv,
    CountAction,
    CountObservation,
    env_name="countdown",
    concurrency_config=ConcurrencyConfig(
        max_concurrent_envs=int(os.environ.get("MAX_CONCURRENT_ENVS", "4"))
    ),
    state_cls=CountState,
)

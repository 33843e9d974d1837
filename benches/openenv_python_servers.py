"""The Python servers benches/openenv_compare.sh measures `nenyax serve` against, on the same
environment logic (the echo of `openenv init`'s scaffold: echo the message, reward
min(0.1 * length, 1)):

  scaffold  <scaffold dir> <port>  the real OpenEnv server: the scaffold's own EchoPeerEnvironment
                                   through openenv's create_app (64 concurrent sessions instead of
                                   the scaffold's 1), run by uvicorn
  reference <port>                 the Python reference's `nenyax serve` (nenyax==0.1.0a1,
                                   nenyax.export.openenv.build_app) of the same echo, written as a
                                   Python-reference step environment

Both run with uvicorn's defaults (one worker), as `nenyax serve` runs with its defaults.
"""

import sys

import uvicorn


def scaffold(directory, port):
    sys.path.insert(0, directory)
    from models import EchoPeerAction, EchoPeerObservation
    from openenv.core.env_server.http_server import create_app
    from server.echo_peer_environment import EchoPeerEnvironment

    app = create_app(
        EchoPeerEnvironment, EchoPeerAction, EchoPeerObservation,
        env_name="echo_peer", max_concurrent_envs=64,
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def reference(port):
    from nenyax.environment import Session, StepEnvironment
    from nenyax.export.openenv import build_app
    from nenyax.registry import Driver, register
    from nenyax.types import Capabilities, Manifest, Mode, Observation, Step

    def observe(message):
        return Observation(
            data={"echoed_message": message, "message_length": len(message)}, text=message
        )

    class EchoSession(Session):
        def __init__(self):
            self.history = []
            self.observation = observe("Echo environment ready!")

        def act(self, action):
            message = str(action)
            step = Step(
                action=action, observation=observe(message),
                reward=min(len(message) * 0.1, 1.0), terminated=False,
            )
            self.history.append(step)
            self.observation = step.observation
            return step

    class EchoEnv(StepEnvironment):
        def __init__(self):
            self.manifest = Manifest(
                id="bench_echo:echo", name="echo", source_format="bench_echo", mode=Mode.STEP,
                capabilities=Capabilities(text=True, reward_timing="per_step"),
            )

        def session(self, *, task=None, seed=None):
            return EchoSession()

    class EchoDriver(Driver):
        name = "bench_echo"
        format = "bench_echo"

        def load(self, target, **options):
            return EchoEnv()

    register(EchoDriver())
    app = build_app("bench_echo:echo", max_concurrent_envs=64)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    if sys.argv[1] == "scaffold":
        scaffold(sys.argv[2], int(sys.argv[3]))
    else:
        reference(int(sys.argv[2]))

"""The package loads the library and the header agrees with it."""

import nenyax_native as nx
import pytest
from nenyax_native.errors import NenyaxError, UnknownSchemeError


def test_version_and_protocol():
    assert nx.version().count(".") == 2
    assert nx.protocol_version()


def test_load_manifest_and_rollout():
    env = nx.load("builtin:arithmetic?size=10")
    assert env.manifest["id"].startswith("builtin:arithmetic")
    assert len(env.tasks()) == 10
    traj = env.rollout(env.reference_policy(), task=env.tasks(1)[0])
    assert traj.error is None and traj.score == 1.0


def test_runner_keeps_job_order():
    env = nx.load("builtin:arithmetic?size=10")
    trajs = nx.Runner(2).run(env, env.reference_policy(), n=20)
    assert [t.task_id for t in trajs] == [t["id"] for t in env.tasks()] * 2


def test_errors_carry_status_and_message():
    with pytest.raises(UnknownSchemeError) as info:
        nx.load("nosuch:thing")
    assert isinstance(info.value, NenyaxError)
    assert info.value.status == 3 and info.value.status_name == "UNKNOWN_SCHEME"
    assert "nosuch" in str(info.value)

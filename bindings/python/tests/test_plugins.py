"""Library plugins from Python: the C++ example judge built here, loaded, listed and used by spec."""

import shutil
import subprocess
from pathlib import Path

import nenyax_native as nx
import pytest
from nenyax_native import errors

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "plugins" / "judge-cpp" / "exact_answer.cpp"
ROWS = [
    {"prompt": "Capital of Kenya?", "answer": "Nairobi"},
    {"prompt": "Capital of Peru?", "answer": "Lima"},
    {"prompt": "Capital of Chad?", "answer": "NDjamena"},
]


def test_loading_errors_are_typed():
    with pytest.raises(errors.ConfigError, match="cannot be read"):
        nx.plugins.plugin_load("/nonexistent/libnope.so")
    with pytest.raises(errors.NenyaxError, match="plugin is NULL"):
        nx.plugins.plugin_register(None)
    assert isinstance(nx.plugins.plugins(), list)
    assert nx.plugins.PLUGIN_ABI_VERSION == 1 and nx.plugins.JUDGE_VTABLE_VERSION == 1


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the example plugin")
def test_the_cpp_judge_plugin_audits_a_defined_environment(tmp_path):
    lib = tmp_path / "libexact_answer.so"
    subprocess.run(["g++", "-std=c++17", "-shared", "-fPIC", "-O1", str(EXAMPLE), "-o", str(lib)], check=True)
    nx.plugins.plugin_load(lib)
    nx.plugins.plugin_load(lib)  # a second load of the same file is a no-op
    listed = [p for p in nx.plugins.plugins() if p["name"] == "exact_answer"]
    assert listed == [{"kind": "judge", "name": "exact_answer", "version": "0.1.0", "source": str(lib.resolve())}]
    env = nx.define({"name": "caps", "tasks": ROWS, "judge": {"type": "plugin", "use": "exact_answer", "extract": "answer_tag"}})
    assert env.check(samples=3).tier == "audited"
    traj = env.rollout(lambda obs: "<answer>nairobi</answer>", task=env.tasks()[0])
    assert traj.score == 1.0
    assert env.rollout(lambda obs: "<answer>Paris</answer>", task=env.tasks()[0]).score == 0.0


def test_plugin_check_holds_a_judge_to_its_kinds_checks():
    report = nx.plugins.plugin_check("judge", "exact")
    assert report["kind"] == "judge" and all(c["passed"] for c in report["checks"])
    assert {c["name"] for c in report["checks"]} >= {"discriminates", "deterministic", "thread_safe"}
    with pytest.raises(errors.ConfigError, match="no judge `no_such_judge`"):
        nx.plugins.plugin_check("judge", "no_such_judge")

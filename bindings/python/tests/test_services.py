"""serve (OpenEnv server), Sandbox and Recording, each driven by a real client."""

import json
import urllib.error
import urllib.request

import nenyax_native as nx
import pytest
from nenyax_native import errors


def post(url, body):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def bisect(obs):
    return (obs["data"]["low"] + obs["data"]["high"]) // 2


def test_serve_answers_http():
    with nx.serve(nx.load("builtin:guess"), max_sessions=4) as server:
        assert server.url.startswith("http://127.0.0.1:") and not server.url.endswith(":0")
        with urllib.request.urlopen(server.url + "/health", timeout=30) as response:
            assert json.loads(response.read())["status"] == "healthy"
        reset = post(server.url + "/reset", {"seed": 3})
        assert reset["observation"]["data"]["guesses_left"] == 10 and reset["done"] is False
        step = post(server.url + "/step", {"action": {"value": 50}})
        assert "observation" in step and "reward" in step
        with pytest.raises(urllib.error.HTTPError) as info:
            post(server.url + "/step", {"action": 50})
        assert info.value.code == 422
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(server.url + "/health", timeout=5)


def test_a_served_environment_plays_over_websocket_through_the_openenv_driver():
    # The library's own OpenEnv client speaks WebSocket (/ws) to the server: a full episode each way.
    served = nx.load("builtin:guess")
    with nx.serve(served) as server:
        remote = nx.load("openenv:" + server.url)
        traj = remote.rollout(bisect, seed=3)
        assert traj.error is None and traj.score == 1.0
        local = served.rollout(bisect, seed=3)
        assert [s["action"] for s in traj.steps] == [s["action"] for s in local.steps]


def test_serving_a_python_defined_environment():
    env = nx.define(
        "count", reset=lambda seed: {"n": 0}, observe=lambda s: f"n={s['n']}", step=lambda s, a: ({"n": s["n"] + 1}, 1.0, s["n"] >= 1), thread_safe=True
    )
    with nx.serve(env) as server:
        traj = nx.load("openenv:" + server.url).rollout(lambda obs: "go")
        assert traj.error is None and len(traj.steps) == 2 and traj.score == 2.0


def test_serve_rejects_unknown_options():
    with pytest.raises(errors.ConfigError, match="bogus"):
        nx.serve(nx.load("builtin:guess"), bogus=1)


def test_sandbox_exec_files_and_fork():
    with nx.Sandbox(wall_s=30) as box:
        result = box.exec("echo hello; echo oops >&2; exit 3")
        assert (result["exit_code"], result["stdout"], result["stderr"]) == (3, "hello\n", "oops\n")
        assert box.exec(["cat"], stdin="piped")["stdout"] == "piped"
        assert box.exec("echo $GREETING", env={"GREETING": "hi"})["stdout"] == "hi\n"
        assert box.exec("sleep 5", timeout_s=0.2)["killed"] == "timeout"
        box.put("dir/a.txt", "alpha")
        box.put("dir/run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
        assert box.get("dir/a.txt") == "alpha"
        assert [(e["name"], e["dir"]) for e in box.list("dir")] == [("a.txt", False), ("run.sh", False)]
        assert box.exec("./dir/run.sh")["stdout"] == "ran\n"
        with box.fork() as copy:
            copy.put("dir/a.txt", "changed")
            assert copy.get("dir/a.txt") == "changed" and box.get("dir/a.txt") == "alpha"
        with pytest.raises(errors.NenyaxError):
            box.get("no/such/file")
    with pytest.raises(ValueError, match="closed"):
        box.exec("true")
    with pytest.raises(errors.NenyaxError, match="backend"):
        nx.Sandbox(backend="nope")


def test_recording_answers_a_real_http_client_and_keeps_the_calls():
    replies = []

    def model(messages):
        replies.append(messages)
        return "pong: " + messages[-1]["content"]

    with nx.Recording(nx.FunctionModel(model, thread_safe=True)) as recording:
        assert recording.base_url.startswith("http://127.0.0.1:") and recording.base_url.endswith("/v1")
        body = {"model": "any", "messages": [{"role": "user", "content": "ping"}]}
        answer = post(recording.base_url + "/chat/completions", body)
        assert answer["choices"][0]["message"] == {"role": "assistant", "content": "pong: ping"}
        post(recording.base_url + "/chat/completions", dict(body, messages=[{"role": "user", "content": "again"}]))
        calls = recording.calls()
        assert [c["request"]["messages"][-1]["content"] for c in calls] == ["ping", "again"]
        assert calls[0]["response"]["choices"][0]["message"]["content"] == "pong: ping"
        assert len(recording.calls(drain=True)) == 2 and recording.calls() == []
        url = recording.base_url
    assert len(replies) == 2
    with pytest.raises(urllib.error.HTTPError):
        post(url + "/chat/completions", body)
    with pytest.raises(ValueError, match="closed"):
        recording.calls()

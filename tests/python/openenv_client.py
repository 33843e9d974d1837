"""OpenEnv's own Python client (the `openenv` package, unchanged) against `nenyax serve`.

Plays full episodes with `GenericEnvClient`: sync (`.sync()`), async, and several sessions at
once; solves the arithmetic from the observation text (so the verifier passes) and also answers
wrongly (so it fails); checks `state()` and that a malformed action raises the server's
VALIDATION_ERROR. Prints one JSON summary line; tests/openenv.rs checks it.

Usage: python openenv_client.py <base_url> <episodes> <concurrent>
"""

import asyncio
import json
import re
import sys
import threading

from openenv import GenericEnvClient

base, episodes, concurrent = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def solve(text):
    """The arithmetic in 'What is 3 * 4? ...' or 'Calculate ( 5 + -3 ) - 8.'"""
    m = re.search(r"(?:What is|Calculate)\s+([-+*/() 0-9.]+?)\s*[?.=]", text or "")
    if not m:
        return None
    value = eval(m.group(1), {"__builtins__": {}})  # digits, parens and operators only
    return str(int(value)) if float(value).is_integer() else str(value)


def play(env, seed, right):
    r = env.reset(seed=seed, episode_id=f"ep-{seed}-{right}")
    assert r.done is False and r.reward is None, r
    obs = r.observation
    answer = solve(obs.get("text")) if right else "definitely wrong"
    steps = 0
    while True:
        r = env.step({"value": f"<answer>{answer}</answer>"})
        steps += 1
        if r.done or steps > 50:
            break
    judgment = (r.metadata or {}).get("nenyax_judgment") or r.observation["metadata"].get(
        "nenyax_judgment"
    )
    state = env.state()
    return {
        "done": r.done,
        "reward": r.reward,
        "steps": steps,
        "judgment": judgment,
        "state_steps": state.get("step_count"),
        "state_episode": state.get("episode_id"),
        "expected_episode": f"ep-{seed}-{right}",
        "solved_locally": answer is not None and right,
    }


out = {"sync": [], "async": [], "concurrent": [], "errors": {}}

with GenericEnvClient(base_url=base).sync() as env:
    for i in range(episodes):
        out["sync"].append(play(env, i, right=True))
        out["sync"].append(play(env, i, right=False))
    env.reset(seed=0)
    try:
        env.step({"bogus": 1})
        out["errors"]["bad_action"] = "no error"
    except RuntimeError as e:
        out["errors"]["bad_action"] = str(e)
    # The session is still usable after an error.
    out["errors"]["after_error"] = env.reset(seed=1).done


async def run_async():
    async with GenericEnvClient(base_url=base) as env:
        r = await env.reset(seed=3)
        answer = solve(r.observation.get("text"))
        r = await env.step({"value": f"<answer>{answer}</answer>"})
        while not r.done:
            r = await env.step({"value": f"<answer>{answer}</answer>"})
        return {"done": r.done, "reward": r.reward, "judgment": r.metadata.get("nenyax_judgment")}


out["async"].append(asyncio.run(run_async()))

results, lock = [], threading.Lock()


def worker(k):
    try:
        with GenericEnvClient(base_url=base).sync() as env:
            res = play(env, 100 + k, right=True)
    except Exception as e:  # report, do not hide
        res = {"error": f"{type(e).__name__}: {e}"}
    with lock:
        results.append(res)


threads = [threading.Thread(target=worker, args=(k,)) for k in range(concurrent)]
for t in threads:
    t.start()
for t in threads:
    t.join()
out["concurrent"] = results
print(json.dumps(out))

"""Write contract JSON with the Python reference implementation, for tests/python_interop.rs.

Usage: write_reference.py OUT_DIR

Writes, one JSON object per line:
  trajectories.jsonl  trajectories from real rollouts; metadata["case"] names each one
  manifests.jsonl     manifests; extra["case"] names the hand-built ones
  pairs.jsonl         {"type", "case", "raw", "python"}: a hand-written input and what the
                      reference model makes of it (model_validate then model_dump_json)
"""

import json
import sys
from pathlib import Path

import nenyax
from nenyax.types import Capabilities, Judgment, Manifest, Message, TaskRef, Trajectory

assert nenyax.__version__ == "0.1.0a1", f"expected nenyax 0.1.0a1, found {nenyax.__version__}"
out = Path(sys.argv[1])

# -- environments, defined with the reference package ------------------------------------------

capitals = nenyax.define(
    "capitals",
    tasks=[
        {"prompt": "Capital of France?", "answer": "Paris"},
        {"prompt": "Capital of Kenya?", "answer": "Nairobi"},
    ],
    score=lambda task, reply: float(task["answer"].lower() in reply.lower()),
    reference=lambda task: task["answer"],
)


def count_step(state, action):
    if action == "explode":
        raise ValueError("the counter exploded")
    state["n"] += 1
    return (1.0 if state["n"] == state["target"] else 0.0), state["n"] >= state["target"]


counter = nenyax.define(
    "counter",
    reset=lambda seed: {"n": 0, "target": 3 + seed % 2},
    observe=lambda s: f"The count is {s['n']}." if s["n"] % 2 == 0 else {"n": s["n"]},
    step=count_step,
    max_steps=10,
)


def tool_caller(messages):
    """A chat model that calls a tool, replying in OpenAI's wire shape with an extra field."""
    return {
        "content": None,
        "reasoning_content": "I should look it up.",
        "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "lookup", "arguments": '{"city": "Paris"}'}},
            {"name": "note", "arguments": {"text": "contract shape", "n": 2}},
        ],
    }


# -- trajectories -------------------------------------------------------------------------------

def rollout(case, env, policy, **kw):
    traj = env.rollout(policy, **kw)
    traj.metadata["case"] = case
    return traj


first = capitals.tasks()[0]
first.split = "test"
trajectories = [
    rollout("single_action", capitals, capitals.reference_policy(), task=first, seed=0),
    rollout("single_null", capitals, capitals.null_policy(), seed=1),
    rollout("single_chat", capitals, nenyax.FunctionModel(lambda m: f"It is Paris ({len(m)})"),
            task=first, seed=0),
    rollout("tool_calls", capitals, nenyax.FunctionModel(tool_caller), seed=1),
    rollout("multi_turn", counter, lambda obs: "inc", seed=0),
    rollout("multi_turn_chat", counter, nenyax.FunctionModel(lambda m: "inc"), seed=1),
    rollout("raised", counter, lambda obs: "inc" if obs.text else "explode", seed=0),
]
judged = rollout("judged", capitals, capitals.reference_policy(), seed=1)
judged.judgment = Judgment(
    score=0.75, passed=True, components={"answer": 1.0, "format": 0.5, "length": -0.25},
    source="rubric", judge="rubric:v1",
    details={"expected": "Nairobi", "extracted": ["Nairobi"], "nested": {"none": None, "n": 3}},
)
trajectories.append(judged)

want = {"raised": lambda t: t.error and t.judgment is None,
        "tool_calls": lambda t: len(t.model_calls) == 1 and t.messages[-1].tool_calls}
for t in trajectories:
    assert want.get(t.metadata["case"], lambda t: t.ok)(t), t.model_dump_json()

# -- manifests ----------------------------------------------------------------------------------

full = Manifest(
    id="example:full?level=2", name="full", source_format="example", mode="task",
    capabilities=Capabilities(
        resettable=False, branchable=True, max_parallel=4, participants=2, text=True,
        reward_timing="per_step", real_world=True, risk="irreversible",
        requires=["docker", "network", "gpu", "model_endpoint", "api_key"],
        isolation="microvm", token_capture="proxy",
    ),
    version="1.2.3", license="MIT", description="Every field set.",
    action_schema={"type": "string"}, observation_schema={"type": "object", "properties": {}},
    num_tasks=12, extra={"case": "full", "image": "ubuntu:24.04", "weights": [0.5, 1]},
)
rollout_mode = Manifest(id="example:loop", name="loop", source_format="verifiers",
                        mode="rollout", extra={"case": "rollout_mode"})
manifests = [capitals.manifest, counter.manifest, full, rollout_mode]

# -- raw inputs and what the reference makes of them -------------------------------------------

raw = [
    ("Message", "wire_tool_calls", {
        "role": "assistant", "content": None, "reasoning_content": "hmm", "token_ids": [1, 2],
        "tool_calls": [
            {"id": "call_9", "type": "function",
             "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}},
            {"type": "function", "function": {"name": "noargs"}},
        ]}),
    ("Message", "contract_tool_calls", {
        "role": "assistant", "content": "",
        "tool_calls": [{"id": None, "name": "add", "arguments": {"a": 1}},
                       {"name": "raw", "arguments": "not json"}]}),
    ("Message", "tool_reply", {"role": "tool", "tool_call_id": "call_9", "content": "3"}),
    ("Message", "content_parts", {"role": "user", "content": [
        {"type": "text", "text": "What is in "},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}),
    ("Message", "minimal", {"role": "system"}),
    ("Judgment", "int_score_components", {"score": 1, "components": {"a": 1, "b": 0.5}}),
    ("Judgment", "full", {"score": -2.5, "passed": False, "source": "tests", "judge": "pytest",
                          "details": {"failed": ["test_a"], "log": None}}),
    ("Judgment", "minimal", {"score": 0}),
    ("Manifest", "minimal", {"id": "x:y", "name": "y", "source_format": "x", "mode": "step"}),
    ("TaskRef", "minimal", {"id": "7"}),
    ("Trajectory", "minimal", {"env_id": "x:y", "mode": "rollout", "started_at": 1700000000}),
    ("Trajectory", "steps_with_defaults", {
        "env_id": "x:y", "mode": "step", "started_at": 1700000000.25, "seed": -3,
        "steps": [{"action": {"move": [1, 2]}, "observation": {"data": [0, 1]}}],
        "model_calls": [{"request": {"messages": []}, "prompt_token_ids": [1, 2],
                         "completion_token_ids": [3], "completion_logprobs": [-0.5]}]}),
]
models = {"Message": Message, "Judgment": Judgment, "Manifest": Manifest, "TaskRef": TaskRef,
          "Trajectory": Trajectory}
pairs = [
    {"type": kind, "case": case, "raw": value,
     "python": json.loads(models[kind].model_validate(value).model_dump_json())}
    for kind, case, value in raw
]

# -- write --------------------------------------------------------------------------------------

out.mkdir(parents=True, exist_ok=True)
(out / "trajectories.jsonl").write_text("".join(t.model_dump_json() + "\n" for t in trajectories))
(out / "manifests.jsonl").write_text("".join(m.model_dump_json() + "\n" for m in manifests))
(out / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
print(json.dumps({"trajectories": len(trajectories), "manifests": len(manifests),
                  "pairs": len(pairs)}))

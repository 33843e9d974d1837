"""nenyax_native.export: SFT and DPO rows equal the Python reference's ``to_rows`` on the same
trajectories, the hf folder loads with ``datasets``, and bad options raise typed errors."""

import json

import nenyax_native as nx
import pytest


def traj(task, seed, answer, score, error=None):
    data = {
        "env_id": "builtin:arithmetic",
        "mode": "step",
        "protocol": "0.1",
        "started_at": 1.0e9,
        "task": {"id": task} if task else None,
        "seed": seed,
        "messages": [
            {"role": "system", "content": "Answer with a number."},
            {"role": "user", "content": f"{task} {seed}"},
            {"role": "assistant", "content": answer},
        ],
        "judgment": None if score is None else {"score": score, "source": "verifier"},
        "error": error,
    }
    return nx.Trajectory.from_dict(data)


TRAJS = [
    traj("t1", 1, "3", 0.5),
    traj("t1", 2, "4", 1.0),
    traj("t1", 3, "5", 0.0),
    traj("t1", 9, "boom", None, error="EnvironmentError: crashed"),
    traj("t2", 5, "7", 1.0),
    traj("t2", 6, "7", 1.0),
    traj(None, 7, "x", 0.2),
    traj(None, 7, "y", 0.8),
]


def read_jsonl(path):
    return [json.loads(line) for line in open(path, encoding="utf-8")]


@pytest.mark.parametrize("kind", ["sft", "dpo"])
def test_rows_match_the_reference(tmp_path, kind):
    reference = pytest.importorskip("nenyax.integrations.export", reason="the Python reference (pip install nenyax==0.1.0a1)")
    out = tmp_path / f"{kind}.jsonl"
    summary = nx.export(TRAJS, rows=kind, min_score=0.5, out=out)
    ours = read_jsonl(out)
    assert summary["rows"] == len(ours) > 0 and summary["trajectories"] == len(TRAJS)
    theirs = reference.to_rows([t.to_reference() for t in TRAJS], kind, min_score=0.5)
    # Ours add where each row came from (task_id, seed); the reference's columns are equal.
    assert [{k: r[k] for k in t} for r, t in zip(ours, theirs, strict=True)] == theirs


def test_the_hf_folder_loads_with_datasets(tmp_path):
    datasets = pytest.importorskip("datasets")
    src = tmp_path / "runs.jsonl"
    src.write_text("".join(t.to_json() + "\n" for t in TRAJS), encoding="utf-8")
    summary = nx.export(input=src, to="hf", rows="dpo")
    assert summary["out"] == str(tmp_path / "runs.dpo") and summary["rows"] == 2
    ds = datasets.load_dataset(summary["out"], cache_dir=str(tmp_path / "cache"))["train"]
    assert ds.num_rows == 2
    # Messages are a list of structs {role, content, tool_calls, tool_call_id}.
    assert ds[0]["chosen"] == [{"role": "assistant", "content": "4", "tool_calls": None, "tool_call_id": None}]
    assert [m["role"] for m in ds[0]["prompt"]] == ["system", "user"]
    assert (ds[0]["score_chosen"], ds[0]["score_rejected"]) == (1.0, 0.0)


def test_bad_options_raise_typed_errors(tmp_path):
    with pytest.raises(nx.NenyaxError, match="unknown rows `ppo`"):
        nx.export(TRAJS, rows="ppo", out=tmp_path / "x")
    with pytest.raises(nx.NenyaxError, match="line 1 is not a trajectory"):
        nx.export("not json\n", out=tmp_path / "x")
    with pytest.raises(nx.NenyaxError, match="needs the option \"out\""):
        nx.export(TRAJS)

"""Python callables, chat functions, per-episode samplers and endpoints as policies, against the real library."""

import json
import threading

import nenyax_native as nx
import pytest
from nenyax_native.errors import ConfigError, InvalidArgumentError

ARITH = "builtin:arithmetic?size=6"


def solve(obs):
    """The arithmetic environment's answer, computed from the observation the policy sees."""
    a, op, b = obs["data"]["expression"].split()
    value = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
    return f"<answer>{value}</answer>"


def test_bare_callable_is_an_action_policy_on_the_observation():
    env = nx.load(ARITH)
    seen = []
    traj = env.rollout(lambda obs: seen.append(obs) or solve(obs), task=env.tasks(1)[0])
    assert traj.error is None and traj.score == 1.0
    assert seen[0]["text"].startswith("What is") and seen[0]["info"]["task_id"] == "0"
    assert env.rollout(lambda obs: "<answer>-1</answer>", task=env.tasks(1)[0]).score == 0.0


def test_function_model_gets_the_conversation_in_either_argument_order():
    env = nx.load(ARITH)
    task = env.tasks(1)[0]
    conversations = []

    def chat(messages):
        conversations.append(messages)
        return "<answer>58</answer>"  # 46 + 12, task 0

    for model in (nx.FunctionModel(chat), nx.FunctionModel("my-model", chat)):
        traj = env.rollout(model, task=task)
        assert traj.score == 1.0 and traj.model_calls[0]["response"]["choices"][0]["message"]["content"] == "<answer>58</answer>"
    assert conversations[0] == [{"role": "user", "content": task["prompt"]}]
    assert nx.FunctionModel("my-model", chat).name == "my-model"
    # A message dict's content is accepted too.
    assert env.rollout(nx.FunctionModel(lambda m: {"role": "assistant", "content": "<answer>58</answer>"}), task=task).score == 1.0


def test_per_episode_chat_sees_its_episode_and_records_token_ids():
    env = nx.load(ARITH)
    episodes = []

    def sample(episode, messages):
        episodes.append(episode)
        return "<answer>58</answer>", {"prompt_token_ids": [1, 2], "completion_token_ids": [3, 4], "completion_logprobs": [-0.5, -0.25]}

    context = {"phase": "train", "round": 3, "group": 1, "member": 2, "seed": 9}
    traj = env.rollout(nx.FunctionModel(sample, per_episode=True), task=env.tasks(1)[0], context=context)
    assert traj.score == 1.0
    ep = episodes[0]
    assert (ep.phase, ep.round, ep.group, ep.member, ep.step, ep.seed, ep.task_id) == ("train", 3, 1, 2, 0, 9, "0")
    call = traj.model_calls[0]
    assert call["prompt_token_ids"] == [1, 2] and call["completion_token_ids"] == [3, 4] and call["completion_logprobs"] == [-0.5, -0.25]
    # The sampling seed depends on the episode and the call, not on the thread or the order.
    env.rollout(nx.FunctionModel(sample, per_episode=True), task=env.tasks(1)[0], context=context)
    assert episodes[1].sample_seed == ep.sample_seed


def test_per_episode_action_policy_counts_its_steps_and_records():
    env = nx.load("builtin:guess")
    steps = []

    def bisect(episode, obs):
        steps.append(episode.step)
        low, high = obs["data"]["low"], obs["data"]["high"]
        return (low + high) // 2, {"completion_token_ids": [episode.step]}

    traj = env.rollout(nx.Policy.from_callable(bisect, per_episode=True), seed=3)
    assert traj.score == 1.0
    assert steps == list(range(len(traj.steps))) and len(steps) > 1
    assert [c["completion_token_ids"] for c in traj.model_calls] == [[s] for s in steps]
    assert traj.model_calls[0]["request"]["kind"] == "action"


def test_a_callback_that_raises_fails_its_episode_and_the_batch_goes_on():
    env = nx.load(ARITH)

    def flaky(obs):
        if obs["info"]["task_id"] in ("1", "4"):
            raise ValueError(f"boom on {obs['info']['task_id']}")
        return solve(obs)

    trajs = nx.run(env, flaky, n=6, concurrency=2)
    assert [t.task_id for t in trajs] == [str(i) for i in range(6)]
    failed = {t.task_id: t.error for t in trajs if t.error}
    assert set(failed) == {"1", "4"} and "ValueError: boom on 1" in failed["1"]
    assert all(t.score == 1.0 for t in trajs if t.task_id not in failed)


def test_a_chat_function_returning_a_non_string_is_a_typed_failure():
    env = nx.load(ARITH)
    traj = env.rollout(nx.FunctionModel(lambda m: 42))
    assert traj.error is not None and "TypeError: a chat function must return a str" in traj.error
    traj = env.rollout(lambda obs: object())  # not JSON-able
    assert "TypeError" in traj.error and "JSON serializable" in traj.error


def test_callbacks_run_on_the_calling_thread_unless_thread_safe():
    env = nx.load(ARITH)
    main = threading.get_ident()
    for thread_safe in (False, True):
        threads = set()

        def act(obs, threads=threads):
            threads.add(threading.get_ident())
            return solve(obs)

        policy = nx.Policy.from_callable(act, thread_safe=thread_safe)
        trajs = nx.run(env, policy, n=12, concurrency=2)
        assert all(t.score == 1.0 for t in trajs)
        if thread_safe:
            assert main not in threads, "a NENYAX_THREAD_SAFE callback is called from the library's workers"
        else:
            assert threads == {main}


def test_endpoint_options_and_failures():
    with pytest.raises(ConfigError) as info:
        nx.Endpoint(model="m").policy()
    assert "base_url" in str(info.value) and info.value.status_name == "CONFIG"
    assert nx.Endpoint(base_url="http://x/v1", model="m", retries=0).to_dict() == {"base_url": "http://x/v1", "model": "m", "retries": 0}
    # An endpoint nobody answers fails the episode, not the call.
    env = nx.load(ARITH)
    traj = env.rollout(nx.Endpoint(base_url="http://127.0.0.1:9/v1", model="m", retries=0, timeout_s=2))
    assert traj.error is not None and "127.0.0.1:9" in traj.error


def test_endpoint_drives_an_episode_through_a_real_openai_compatible_server():
    # The recording server is a real HTTP server speaking the OpenAI API; the endpoint policy
    # reaches it over TCP like any vLLM or OpenAI server.
    env = nx.load(ARITH)
    task = env.tasks(1)[0]
    with nx.Recording(nx.FunctionModel(lambda m: "<answer>58</answer>", thread_safe=True)) as server:
        traj = env.rollout(nx.Endpoint(base_url=server.base_url, model="served", params={"temperature": 0}), task=task)
        assert traj.error is None and traj.score == 1.0
        served = server.calls()
        assert len(served) == 1 and served[0]["request"]["model"] == "served" and served[0]["request"]["temperature"] == 0


def test_as_policy_rejects_what_it_cannot_use():
    with pytest.raises(TypeError, match="FunctionModel"):
        nx.as_policy(42)
    with pytest.raises(ValueError, match="'act' or 'chat'"):
        nx.Policy.from_callable(print, kind="bogus")
    with pytest.raises(InvalidArgumentError, match="chat policy"):
        nx.Recording(lambda obs: "an action policy")
    policy = nx.as_policy(solve)
    assert nx.as_policy(policy) is policy and policy.kind == "act"
    assert json.loads(json.dumps(nx.Endpoint(provider="vllm", model="q").to_dict())) == {"provider": "vllm", "model": "q"}

#!/usr/bin/env python3
"""TRL's GRPOTrainer on any Nenyax environment, through the Python binding (nenyax_native).

Two ways in, both through TRL's own extension points:

- ``--mode reward`` (single-turn environments): TRL generates as usual and :class:`NenyaxReward`,
  a plain entry of ``reward_funcs``, scores each completion with the environment's own judge by
  replaying it as the model's reply in a Nenyax rollout of the row's task.
- ``--mode rollout`` (multi-turn too): :class:`NenyaxRollout`, a ``rollout_func``, lets Nenyax
  drive each episode while the trainer's model writes every turn; the environment's messages
  between turns are masked out of the loss (``env_mask``) and the episode's score is the reward.

The model is a tiny randomly-initialised Llama and the tokenizer a byte-level one built here,
so nothing is downloaded: the point is the wiring, not learning. Run it as
``python examples/python/trl_grpo.py --env 'builtin:arithmetic?size=64' --max-steps 2``.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any, Dict, List, Optional

import nenyax_native as nx
import torch
from datasets import Dataset
from nenyax_native import FunctionModel, Policy
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import GRPOConfig, GRPOTrainer

SPECIALS = ["<|pad|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]
# A ChatML-like template: rendering any run of messages on its own gives exactly the tokens that
# follow the earlier ones, which is what lets NenyaxRollout append each turn's environment text.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
# The dataset column (and first-message key, for rollout_func) that carries each row's TaskRef.
TASK_KEY = "nenyax_task"


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer (256 byte tokens + chat specials, no merges) with a chat template."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS + sorted(pre_tokenizers.ByteLevel.alphabet()))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(SPECIALS)
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<|pad|>", eos_token="<|end|>", padding_side="left")
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_model(tokenizer: PreTrainedTokenizerFast, seed: int = 0) -> LlamaForCausalLM:
    """A 2-layer Llama with random weights, sized for a CPU step in seconds."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=1024,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    return LlamaForCausalLM(config)


def first_messages(env: nx.Env, task: Dict[str, Any]) -> List[Dict[str, str]]:
    """What the model is shown at the start of ``task``: the messages of the episode's first model call.

    Taken from a one-step rollout rather than from ``task["prompt"]``, so it is right for
    environments whose tasks carry no prompt (multi-turn games) or add a system message.
    """
    seen: List[List[Dict[str, Any]]] = []

    def capture(messages: List[Dict[str, Any]]) -> str:
        seen.append(messages)
        return ""

    traj = env.rollout(FunctionModel(capture), task=task, max_steps=1)
    if not seen:
        raise ValueError(f"{env.id}: task {task.get('id')!r} never asked the model anything ({traj.error or 'no model call'})")
    return [{"role": m["role"], "content": m.get("content") or ""} for m in seen[0]]


def task_dataset(env: nx.Env, limit: int = 0, *, task_in_prompt: bool = False) -> Dataset:
    """One row per environment task: ``prompt`` (conversational) and the TaskRef as JSON.

    With ``task_in_prompt`` the TaskRef also rides on the prompt's first message (a key chat
    templates ignore), because TRL hands a ``rollout_func`` the prompts only.
    """
    rows = []
    for task in env.tasks(limit):
        ref = json.dumps(task)
        prompt = first_messages(env, task)
        if task_in_prompt:
            for i, message in enumerate(prompt):
                message[TASK_KEY] = ref if i == 0 else ""
        rows.append({"prompt": prompt, TASK_KEY: ref})
    if not rows:
        raise ValueError(f"{env.id} lists no tasks; GRPO needs a dataset of tasks (pass an environment with tasks)")
    return Dataset.from_list(rows)


def completion_text(completion: Any) -> str:
    """A TRL completion (plain text, or a conversational list of messages) as the reply text."""
    if isinstance(completion, str):
        return completion
    return "".join(m.get("content") or "" for m in completion if m.get("role") == "assistant")


class NenyaxReward:
    """A TRL reward function: each completion's score from the Nenyax environment's own judge.

    ``trajectories`` keeps the last batch's Trajectories; a failed rollout scores None (TRL then
    leaves that reward out) and keeps its error there.
    """

    def __init__(self, env: nx.Env) -> None:
        self.env = env
        self.trajectories: List[nx.Trajectory] = []
        self.__name__ = "nenyax"  # the name TRL logs the reward under (rewards/nenyax/mean)

    def rollout(self, task: Dict[str, Any], reply: str) -> nx.Trajectory:
        """The episode of ``task`` in which the model answers ``reply``."""
        return self.env.rollout(FunctionModel(lambda _messages: reply), task=task)

    def __call__(self, prompts: List[Any], completions: List[Any], nenyax_task: List[str], **_: Any) -> List[Optional[float]]:
        """Rewards for one batch, in order."""
        self.trajectories = [self.rollout(json.loads(t), completion_text(c)) for t, c in zip(nenyax_task, completions, strict=True)]
        return [t.score for t in self.trajectories]


class NenyaxRollout:
    """A TRL ``rollout_func``: Nenyax plays each episode, the trainer's model writes every turn.

    Returns, per prompt, the first turn's prompt ids, then every later token of the episode as
    one completion: the model's tokens (with their sampling logprobs, ``env_mask`` 1) and the
    environment's messages between turns as the chat template renders them (``env_mask`` 0),
    plus ``nenyax_score`` (the episode's score) for :func:`episode_reward`.
    """

    def __init__(self, env: nx.Env, tokenizer: PreTrainedTokenizerFast, max_turns: int = 3, max_new_tokens: int = 16) -> None:
        self.env = env
        self.tokenizer = tokenizer
        self.max_turns = max_turns
        self.max_new_tokens = max_new_tokens
        self.trajectories: List[nx.Trajectory] = []
        self.batch: Dict[str, List[Any]] = {}

    def render(self, messages: List[Dict[str, Any]]) -> List[int]:
        """Token ids of ``messages`` as the chat template renders them, ready for the assistant."""
        msgs = [{"role": m["role"], "content": m.get("content") or ""} for m in messages]
        return self.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)

    def episode(self, model: Any, task: Dict[str, Any]) -> Dict[str, Any]:
        """One episode of ``task``: its token sequence, mask, logprobs and Trajectory."""
        prompt_ids: List[int] = []
        ids: List[int] = []  # everything after the first prompt
        mask: List[int] = []
        logprobs: List[float] = []
        answered = 0  # the conversation's messages already in prompt_ids + ids

        def chat(messages: List[Dict[str, Any]]) -> str:
            nonlocal prompt_ids, answered
            new = self.render(messages[answered:])
            if not prompt_ids:
                prompt_ids = new
            else:
                ids.extend(new)
                mask.extend([0] * len(new))
                logprobs.extend([0.0] * len(new))
            context = torch.tensor([prompt_ids + ids])
            out = model.generate(
                context,
                attention_mask=torch.ones_like(context),
                do_sample=True,
                max_new_tokens=self.max_new_tokens,
                eos_token_id=self.tokenizer.eos_token_id,
                pad_token_id=self.tokenizer.pad_token_id,
                output_scores=True,
                return_dict_in_generate=True,
            )
            generated = out.sequences[0, context.shape[1] :].tolist()
            steps = torch.stack(out.scores, dim=1)[0].log_softmax(-1)
            ids.extend(generated)
            mask.extend([1] * len(generated))
            logprobs.extend(steps[range(len(generated)), generated].tolist())
            if generated[-1] != self.tokenizer.eos_token_id:
                # The template closes every turn; a reply cut at max_new_tokens is closed for it.
                ids.append(self.tokenizer.eos_token_id)
                mask.append(0)
                logprobs.append(0.0)
            answered = len(messages) + 1
            return self.tokenizer.decode(generated, skip_special_tokens=True)

        traj = self.env.rollout(Policy.from_callable(chat, kind="chat"), task=task, max_steps=self.max_turns)
        return {"prompt_ids": prompt_ids, "completion_ids": ids, "env_mask": mask, "logprobs": logprobs, "trajectory": traj}

    def __call__(self, prompts: List[List[Dict[str, Any]]], trainer: GRPOTrainer) -> Dict[str, List[Any]]:
        """The batch TRL asked for: one episode per prompt (TRL already repeats each prompt per generation)."""
        model = trainer.accelerator.unwrap_model(trainer.model)
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                episodes = [self.episode(model, json.loads(p[0][TASK_KEY])) for p in prompts]
        finally:
            model.train(was_training)
        for e in episodes:
            if not e["prompt_ids"]:
                raise RuntimeError(f"{self.env.id}: an episode ended before asking the model anything: {e['trajectory'].error}")
        self.trajectories = [e["trajectory"] for e in episodes]
        out: Dict[str, List[Any]] = {k: [e[k] for e in episodes] for k in ("prompt_ids", "completion_ids", "env_mask", "logprobs")}
        out["nenyax_score"] = [t.score for t in self.trajectories]
        self.batch = out
        return out


def episode_reward(completions: List[Any], nenyax_score: List[Optional[float]], **_: Any) -> List[Optional[float]]:
    """The reward of a NenyaxRollout episode: the score its environment gave it."""
    return list(nenyax_score)


def make_trainer(
    uri: str = "builtin:arithmetic?size=64",
    *,
    mode: str = "reward",
    max_steps: int = 2,
    num_generations: int = 4,
    batch_size: int = 4,
    max_completion_length: int = 16,
    max_turns: int = 3,
    tasks: int = 0,
    judge: Optional[Dict[str, Any]] = None,
    output_dir: str = "/tmp/nenyax-trl-grpo",
    seed: int = 0,
) -> GRPOTrainer:
    """A GRPOTrainer whose data and rewards come from the Nenyax environment at ``uri`` (re-judged by ``judge``, a spec)."""
    if mode not in ("reward", "rollout"):
        raise ValueError(f"mode must be 'reward' (single-turn, reward_funcs) or 'rollout' (multi-turn, rollout_func), not {mode!r}")
    env = nx.load(uri)
    if judge is not None:
        env = env.with_judge(judge)
    tokenizer = build_tokenizer()
    config = GRPOConfig(
        output_dir=output_dir,
        max_steps=max_steps,
        per_device_train_batch_size=batch_size,
        num_generations=num_generations,
        max_completion_length=max_completion_length,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=seed,
    )
    extra: Dict[str, Any] = {}
    if mode == "reward":
        reward: Any = NenyaxReward(env)
    else:
        extra["rollout_func"] = NenyaxRollout(env, tokenizer, max_turns=max_turns, max_new_tokens=max_completion_length)
        reward = episode_reward
    trainer = GRPOTrainer(
        model=build_model(tokenizer, seed),
        reward_funcs=reward,
        args=config,
        train_dataset=task_dataset(env, tasks, task_in_prompt=mode == "rollout"),
        processing_class=tokenizer,
        **extra,
    )
    trainer.nenyax_env = env  # type: ignore[attr-defined]
    trainer.nenyax_source = extra.get("rollout_func", reward)  # type: ignore[attr-defined]
    return trainer


def main(argv: Optional[List[str]] = None) -> GRPOTrainer:
    """Parse the command line, train, print each logged step; returns the trainer."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="builtin:arithmetic?size=64", help="any Nenyax URI (single-turn for --mode reward)")
    parser.add_argument("--mode", choices=("reward", "rollout"), default="reward")
    parser.add_argument("--max-steps", type=int, default=2)
    parser.add_argument("--num-generations", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-completion-length", type=int, default=16)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=0, help="at most this many tasks (0: all)")
    parser.add_argument("--judge", type=json.loads, help='a judge spec replacing the environment\'s, e.g. \'{"type": "regex", "pattern": "[0-9]"}\'')
    parser.add_argument("--output-dir", default="/tmp/nenyax-trl-grpo")
    a = parser.parse_args(argv)
    trainer = make_trainer(
        a.env,
        mode=a.mode,
        max_steps=a.max_steps,
        num_generations=a.num_generations,
        batch_size=a.batch_size,
        max_completion_length=a.max_completion_length,
        max_turns=a.max_turns,
        tasks=a.tasks,
        judge=a.judge,
        output_dir=a.output_dir,
    )
    trainer.train()
    for log in trainer.state.log_history:
        if "loss" in log:
            print(json.dumps({k: v for k, v in log.items() if isinstance(v, (int, float)) and math.isfinite(v)}))
    return trainer


if __name__ == "__main__":
    main()

"""nx_arith: a tiny deterministic arithmetic taskset for the nenyax verifiers bridge tests
(verifiers >= 0.4.0, v1 API). Same task as ../nx_arith_v0.py (the classic-API version).

Six questions with string answers; reward `exact_match` (weight 1) compares the reply, stripped
and with an optional <answer></answer> wrapper removed, to the answer; metric `reply_length`
(weight 0) is the reply's length in characters. Config: `num_tasks` (1..6, default 6).
"""

import verifiers.v1 as vf

from nx_arith_rows import ROWS, SYSTEM_PROMPT, extract


class ArithData(vf.TaskData):
    answer: str


class ArithTask(vf.Task[ArithData]):
    @vf.reward(weight=1.0)
    async def exact_match(self, trace) -> float:
        return 1.0 if extract(trace.last_reply) == self.data.answer else 0.0

    @vf.metric
    async def reply_length(self, trace) -> float:
        return float(len(trace.last_reply or ""))


class ArithConfig(vf.TasksetConfig):
    num_tasks: int = 6


class ArithTaskset(vf.Taskset[ArithTask, ArithConfig]):
    def load(self):
        n = self.config.num_tasks
        if not 1 <= n <= len(ROWS):
            raise ValueError(f"num_tasks must be between 1 and {len(ROWS)}, got {n}")
        for i, (question, answer) in enumerate(ROWS[:n]):
            data = ArithData(
                id=f"row{i}", prompt=question, system_prompt=SYSTEM_PROMPT, answer=answer
            )
            yield ArithTask(data, self.config.task)


__all__ = ["ArithTaskset"]

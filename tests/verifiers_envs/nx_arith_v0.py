"""nx_arith_v0: a tiny deterministic arithmetic environment for the nenyax verifiers bridge
tests (verifiers 0.3.x, classic API). Same task as nx_arith/ (the v1-API version).

Six questions with string answers; reward `exact_match` (weight 1) compares the reply, stripped
and with an optional <answer></answer> wrapper removed, to the answer; metric `reply_length`
(weight 0) is the reply's length in characters. Args: `num_tasks` (1..6, default 6).
"""

import verifiers as vf
from datasets import Dataset

from nx_arith_rows import ROWS, SYSTEM_PROMPT, extract


def load_environment(num_tasks: int = 6) -> vf.Environment:
    if not 1 <= int(num_tasks) <= len(ROWS):
        raise ValueError(f"num_tasks must be between 1 and {len(ROWS)}, got {num_tasks}")
    rows = [
        {"question": q, "answer": a, "info": {"row": i}}
        for i, (q, a) in enumerate(ROWS[: int(num_tasks)])
    ]
    parser = vf.Parser()

    def exact_match(completion, answer, **kwargs) -> float:
        return 1.0 if extract(parser.parse_answer(completion) or "") == answer else 0.0

    def reply_length(completion, **kwargs) -> float:
        return float(len(parser.parse_answer(completion) or ""))

    rubric = vf.Rubric(funcs=[exact_match], weights=[1.0], parser=parser)
    rubric.add_metric(reply_length)
    return vf.SingleTurnEnv(
        dataset=Dataset.from_list(rows),
        eval_dataset=Dataset.from_list(rows),
        system_prompt=SYSTEM_PROMPT,
        parser=parser,
        rubric=rubric,
    )

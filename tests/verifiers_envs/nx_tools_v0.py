"""nx_tools_v0: a tiny deterministic tool-calling environment for the nenyax trace tests
(verifiers 0.3.x, classic API): a `vf.ToolEnv` with two arithmetic tools, so that a rollout is
a real multi-turn tool loop (model turn, tool results, model turn, ...).

Four questions "What is (A + B) * C?" with string answers; tools `add(a, b)` and
`multiply(a, b)`; reward `exact_match` (weight 1) compares the last reply, stripped and with an
optional <answer></answer> wrapper removed, to the answer. The prompt holds one few-shot
exchange (a user question and an assistant answer) before the question. Args: `num_tasks`
(1..4, default 4).
"""

import verifiers as vf
from datasets import Dataset

from nx_arith_rows import extract

ROWS = [((2, 3, 4), "20"), ((1, 6, 5), "35"), ((7, 2, 3), "27"), ((10, 5, 2), "30")]
SYSTEM_PROMPT = "Use the tools to compute, then answer with the number only."
FEW_SHOT = [
    {"role": "user", "content": "What is 1 + 1?"},
    {"role": "assistant", "content": "2"},
]


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first addend.
        b: The second addend.
    """
    return a + b


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: The first factor.
        b: The second factor.
    """
    return a * b


def load_environment(num_tasks: int = 4) -> vf.Environment:
    if not 1 <= int(num_tasks) <= len(ROWS):
        raise ValueError(f"num_tasks must be between 1 and {len(ROWS)}, got {num_tasks}")
    rows = [
        {"question": f"What is ({a} + {b}) * {c}?", "answer": answer, "info": {"row": i}}
        for i, ((a, b, c), answer) in enumerate(ROWS[: int(num_tasks)])
    ]
    parser = vf.Parser()

    def exact_match(completion, answer, **kwargs) -> float:
        return 1.0 if extract(parser.parse_answer(completion) or "") == answer else 0.0

    rubric = vf.Rubric(funcs=[exact_match], weights=[1.0], parser=parser)
    return vf.ToolEnv(
        tools=[add, multiply],
        max_turns=6,
        dataset=Dataset.from_list(rows),
        eval_dataset=Dataset.from_list(rows),
        system_prompt=SYSTEM_PROMPT,
        few_shot=FEW_SHOT,
        parser=parser,
        rubric=rubric,
    )

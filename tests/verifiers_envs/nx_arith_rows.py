"""The rows and the grading shared by nx_arith_v0 (classic API) and nx_arith (v1 API), so the two
versions of the test environment cannot drift apart. Standard library only."""

import re

ROWS = [
    ("What is 2 + 3?", "5"),
    ("What is 7 * 6?", "42"),
    ("What is 10 - 4?", "6"),
    ("What is 9 + 8?", "17"),
    ("What is 12 * 3?", "36"),
    ("What is 100 - 1?", "99"),
]
SYSTEM_PROMPT = "Answer with the number only, optionally inside <answer></answer> tags."
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def extract(reply: str) -> str:
    """The last <answer> span, else the whole reply, stripped."""
    found = _ANSWER.findall(reply or "")
    return (found[-1] if found else (reply or "")).strip()

"""Judges as Python objects that mirror the library's JSON judge specs (docs/c-api.md, "Judge spec").

Each judge's ``to_spec()`` is the JSON ``nenyax_env_with_judge`` and ``define`` accept, and a
plain spec dict is accepted wherever a judge is. There is no Python-function judge for
``with_judge``: the C ABI judges only by spec. To score replies with a Python function, define
the environment with ``define(name, tasks=..., score=fn)`` (nenyax_env_define_tasks) instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple, Union

from .policy import Endpoint


class Judge:
    """Base of the judge objects: ``to_spec()`` gives the library's JSON spec."""

    def to_spec(self) -> Dict[str, Any]:
        """The JSON judge spec."""
        raise NotImplementedError


def _drop_defaults(spec: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in spec.items() if v is not None and v is not False}


@dataclass(eq=False)
class ExactMatch(Judge):
    """The extracted answer equals task metadata ``field`` (extract default: answer_tag)."""

    field: str = "answer"
    extract: Optional[str] = None
    case_sensitive: bool = False

    def to_spec(self) -> Dict[str, Any]:
        return _drop_defaults({"type": "exact", "field": self.field, "extract": self.extract, "case_sensitive": self.case_sensitive})


@dataclass(eq=False)
class Contains(Judge):
    """The extracted reply contains task metadata ``field`` (extract default: whole)."""

    field: str = "answer"
    extract: Optional[str] = None
    case_sensitive: bool = False

    def to_spec(self) -> Dict[str, Any]:
        return _drop_defaults({"type": "contains", "field": self.field, "extract": self.extract, "case_sensitive": self.case_sensitive})


@dataclass(eq=False)
class Numeric(Judge):
    """The extracted number is within ``tolerance`` (absolute) or ``rel_tolerance`` of ``field``."""

    field: str = "answer"
    extract: Optional[str] = None
    tolerance: Optional[float] = None
    rel_tolerance: Optional[float] = None

    def to_spec(self) -> Dict[str, Any]:
        return _drop_defaults(
            {"type": "numeric", "field": self.field, "extract": self.extract, "tolerance": self.tolerance, "rel_tolerance": self.rel_tolerance}
        )


@dataclass(eq=False)
class RegexJudge(Judge):
    """Score 1 when the reply matches ``pattern``."""

    pattern: str

    def to_spec(self) -> Dict[str, Any]:
        return {"type": "regex", "pattern": self.pattern}


Regex = RegexJudge


@dataclass(eq=False)
class EnvJudge(Judge):
    """The environment's own verdict (a part of a Weighted judge)."""

    def to_spec(self) -> Dict[str, Any]:
        return {"type": "env"}


@dataclass(eq=False)
class LlmRubric(Judge):
    """A grader model (an Endpoint) scores the episode against a plain-language ``rubric``."""

    model: Endpoint
    rubric: str

    def to_spec(self) -> Dict[str, Any]:
        if not isinstance(self.model, Endpoint):
            raise TypeError(f"LlmRubric's model must be an Endpoint (the library calls it), not {type(self.model).__name__}")
        return {"type": "llm_rubric", "rubric": self.rubric, "endpoint": self.model.to_dict()}


JudgeLike = Union[Judge, Mapping[str, Any]]


@dataclass(eq=False)
class Weighted(Judge):
    """A weighted mean of judges: ``Weighted({judge: weight, ...})`` or ``Weighted([(judge, weight), ...])``."""

    parts: Union[Mapping[Any, float], Iterable[Tuple[JudgeLike, float]]] = field(default_factory=dict)

    def to_spec(self) -> Dict[str, Any]:
        items = self.parts.items() if isinstance(self.parts, Mapping) else self.parts
        return {"type": "weighted", "parts": [{"weight": w, "judge": judge_spec(j)} for j, w in items]}


def weighted(parts: Union[Mapping[Any, float], Iterable[Tuple[JudgeLike, float]]]) -> Weighted:
    """``Weighted(parts)``, as the reference's ``judges.weighted``."""
    return Weighted(parts)


def judge_spec(judge: JudgeLike) -> Dict[str, Any]:
    """The JSON spec of a judge object or spec dict."""
    if isinstance(judge, Judge):
        return judge.to_spec()
    if isinstance(judge, Mapping):
        return dict(judge)
    raise TypeError(
        f"a judge must be a Judge (ExactMatch, Contains, Numeric, RegexJudge, EnvJudge, LlmRubric, Weighted) "
        f"or a spec dict like {{'type': 'exact'}}, not {type(judge).__name__}; for a Python scoring function use define(..., score=fn)"
    )

"""A conformance report: the tier an environment reached and every check behind it."""

from __future__ import annotations

from typing import Any, Dict, List

TIERS = ("none", "connectable", "evaluable", "trainable", "audited")


class Report:
    """What ``check`` measured: ``tier``, ``checks`` (name, tier, status, detail, duration_s), ``to_dict``."""

    def __init__(self, data: Dict[str, Any]) -> None:
        self._data = data
        self.env_id: str = data.get("env_id", "")
        self.mode: str = data.get("mode", "")
        self.tier: str = data.get("tier") or "none"
        self.checks: List[Dict[str, Any]] = data.get("checks", [])

    def reached(self, tier: str) -> bool:
        """Whether the environment reached ``tier`` (or a higher one)."""
        if tier not in TIERS:
            raise ValueError(f"unknown tier {tier!r}; use one of {', '.join(TIERS[1:])}")
        return TIERS.index(self.tier) >= TIERS.index(tier) if self.tier in TIERS else False

    def failed(self) -> List[Dict[str, Any]]:
        """The checks that did not pass (failures and skips)."""
        return [c for c in self.checks if c.get("status") != "pass"]

    def to_dict(self) -> Dict[str, Any]:
        """The report as the library wrote it."""
        return dict(self._data)

    def __str__(self) -> str:
        lines = [f"{self.env_id}  [{self.mode}]  ->  tier: {self.tier.upper()}"]
        for c in self.checks:
            mark = {"pass": "ok  ", "fail": "FAIL", "skip": "skip"}.get(c.get("status"), c.get("status"))
            lines.append(f"  {mark} {c.get('tier', ''):<12} {c.get('name')}  {c.get('detail', '')}".rstrip())
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Report(env_id={self.env_id!r}, tier={self.tier!r}, checks={len(self.checks)})"

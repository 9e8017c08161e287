"""The teacher interface: ``validate(candidate) -> Verdict``, and the errors a backend may raise.

A teacher turns a parsed candidate into a verdict: a clean self-contained problem, whether it is solvable, its
final answer and a difficulty estimate relative to the parent (spec §5). Only ``accepted`` verdicts enter the
pool. Expected transport faults are raised as ``TeacherError`` (with a short ``reason``) so the validator can
count them; content problems (unsolvable, malformed reply) are rejection verdicts, not exceptions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

from verl_ext.augment.parser import Candidate

REASON_ACCEPTED = "accepted"


@dataclass(frozen=True)
class Verdict:
    """The teacher's judgement of one candidate; ``reason`` is 'accepted' or why it was rejected."""

    accepted: bool
    clean_problem: str | None
    solvable: bool
    answer: str | None
    difficulty: float | None
    reason: str

    @classmethod
    def reject(cls, reason: str, *, solvable: bool = False) -> Verdict:
        return cls(accepted=False, clean_problem=None, solvable=solvable, answer=None, difficulty=None,
                   reason=reason)

    @classmethod
    def accept(cls, clean_problem: str, answer: str, difficulty: float | None) -> Verdict:
        return cls(accepted=True, clean_problem=clean_problem, solvable=True, answer=answer,
                   difficulty=difficulty, reason=REASON_ACCEPTED)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        for name in ("accepted", "reason"):
            if name not in data:
                raise KeyError(f"Verdict state is missing field '{name}'")
        diff = data.get("difficulty")
        return cls(
            accepted=bool(data["accepted"]),
            clean_problem=data.get("clean_problem"),
            solvable=bool(data.get("solvable", False)),
            answer=data.get("answer"),
            difficulty=None if diff is None else float(diff),
            reason=str(data["reason"]),
        )


class TeacherError(Exception):
    """An expected, recoverable teacher failure; ``reason`` becomes the counted outcome (e.g. 'timeout')."""

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(f"{reason}: {message}" if message else reason)
        self.reason = reason


@runtime_checkable
class Teacher(Protocol):
    """Anything with ``validate``; ``close`` lets the validator interrupt retries promptly on shutdown."""

    def validate(self, candidate: Candidate) -> Verdict: ...

    def close(self) -> None: ...

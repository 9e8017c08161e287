"""``PromptRecord``: one prompt of the pool and everything the pool knows about it.

A pool holds up to 10^6 records, so the class uses ``__slots__`` (no per-instance dict) and stores optional fields
as ``None`` (no allocation). Every field is JSON-safe; ``to_row``/``from_row`` give a compact list form used by
checkpoints (one header of field names instead of repeated keys).
"""

from __future__ import annotations

import operator
import sys
from typing import Any

# Record statuses. A record is in exactly one of these; evicted records are dropped from memory entirely.
COLD = "cold"  # never scored (no measured value, no prior): waits in the FIFO cold queue, served first
POOLED = "pooled"  # scored: lives in the hard or easy heap
IN_FLIGHT = "in_flight"  # handed out for training, waiting for feedback or release
ARCHIVED = "archived"  # trained; waits in the bounded archive for controlled reinsertion
STATUSES = (COLD, POOLED, IN_FLIGHT, ARCHIVED)

SEED = "seed"
AUGMENTED = "augmented"
ORIGINS = (SEED, AUGMENTED)

FIELDS = (
    "id", "prompt", "answer", "data_source", "origin", "parent_id", "depth", "difficulty_factor", "stat", "prior",
    "rank_override", "created_step", "last_trained_step", "visits", "solved_bits", "last_pass", "status", "extra",
    "measured_step",
)


class PromptRecord:
    """One prompt. Read-only for everyone but the pool: the pool's buckets are keyed on these fields.

    Fields: ``id`` (stable int), ``prompt`` (chat messages or plain string, stored as given), ``answer``,
    ``data_source``, ``origin`` (seed|augmented), ``parent_id``/``depth`` (lineage), ``difficulty_factor``
    (relative to the parent, 1.0 for seeds), ``stat`` (the estimator's JSON-safe state, ``None`` = never
    measured), ``prior`` (initial estimate of an augmented child), ``rank_override`` (lineage-refreshed ranking
    value, cleared by the next feedback), ``created_step``, ``last_trained_step``, ``visits`` (feedback count),
    ``solved_bits`` (bit i set = solved at the i-th most recent visit), ``last_pass`` (latest group pass rate),
    ``status``, ``extra`` (optional JSON-safe payload), ``measured_step`` (the step that selected the group of the
    latest measurement, i.e. the policy version its responses came from: ``last_trained_step`` in the synchronous
    trainer, earlier when an asynchronous trainer hears a group late).
    """

    __slots__ = FIELDS

    def __init__(
        self,
        id: int,  # noqa: A002 - the paper's word, and the checkpoint field name
        prompt: Any,
        answer: str,
        data_source: str,
        origin: str = SEED,
        parent_id: int | None = None,
        depth: int = 0,
        difficulty_factor: float = 1.0,
        created_step: int = 0,
        extra: dict | None = None,
    ) -> None:
        self.id = id
        self.prompt = prompt
        self.answer = answer
        # Many records share few sources; interning keeps one copy of each name.
        self.data_source = sys.intern(data_source)
        self.origin = origin
        self.parent_id = parent_id
        self.depth = depth
        self.difficulty_factor = difficulty_factor
        self.stat: Any = None
        self.prior: float | None = None
        self.rank_override: float | None = None
        self.created_step = created_step
        self.last_trained_step: int | None = None
        self.visits = 0
        self.solved_bits = 0
        self.last_pass: float | None = None
        self.status = COLD
        self.extra = extra
        self.measured_step: int | None = None

    def solved_streak(self, k: int) -> bool:
        """True if the record was solved (pass rate 1.0) in each of its last ``k`` visits (needs >= k visits)."""
        mask = (1 << k) - 1
        return k > 0 and self.visits >= k and (self.solved_bits & mask) == mask

    def to_row(self) -> tuple:
        """Field values in ``FIELDS`` order (JSON-safe: a tuple ``stat`` serialises as a list). One C-level
        ``attrgetter`` call: a 10^6-record checkpoint spends most of its time here."""
        return _GET_ROW(self)

    @classmethod
    def from_row(cls, row: list | tuple) -> "PromptRecord":
        """Inverse of ``to_row``."""
        if len(row) != len(FIELDS):
            raise ValueError(f"record row has {len(row)} values, expected {len(FIELDS)} ({', '.join(FIELDS)})")
        rec = cls.__new__(cls)
        _set_row(rec, row)
        # Strings shared by many records are interned again (JSON loading makes one copy per row).
        rec.data_source = sys.intern(rec.data_source)
        rec.origin = sys.intern(rec.origin)
        rec.status = sys.intern(rec.status)
        if isinstance(rec.stat, list):
            rec.stat = tuple(rec.stat)
        return rec

    def to_dict(self) -> dict[str, Any]:
        """Field name -> value (JSON-safe), for logging and inspection."""
        return dict(zip(FIELDS, self.to_row()))

    def __repr__(self) -> str:
        return (
            f"PromptRecord(id={self.id}, status={self.status}, origin={self.origin}, depth={self.depth}, "
            f"stat={self.stat!r}, prior={self.prior!r}, visits={self.visits})"
        )


_GET_ROW = operator.attrgetter(*FIELDS)


def _compile_setter() -> Any:
    """``rec.id, rec.prompt, ... = row`` as one compiled assignment: no per-field ``setattr`` call."""
    targets = ", ".join(f"rec.{name}" for name in FIELDS)
    namespace: dict[str, Any] = {}
    exec(f"def set_row(rec, row):\n    {targets} = row\n", namespace)  # noqa: S102 - field names are constants
    return namespace["set_row"]


_set_row = _compile_setter()

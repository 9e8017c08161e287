"""Pre-teacher filters: cheap checks that spare the teacher obvious rejects, each counted by reason.

Teacher calls cost money and latency, so empty, over-long, unparsable, copied and duplicate candidates are
dropped here (spec §5). Duplicates are detected by a hash of the normalised text against ``SeenHashes``, a
bounded set the pool feeds with every record's hash and this filter feeds with every candidate it passes (so two
identical candidates in flight are not both sent to the teacher).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter, deque
from collections.abc import Iterable
from typing import Any

from verl_ext.augment.parser import (
    REASON_EMPTY,
    REASON_UNPARSABLE,
    Candidate,
    RecordId,
    Rejection,
    parse_candidate,
)
from verl_ext.state_schema import check_schema

REASON_TOO_LONG = "too_long"
REASON_COPY = "copy_of_parent"
REASON_DUPLICATE = "duplicate"
REASON_PASSED = "passed"
FILTER_REASONS = (REASON_UNPARSABLE, REASON_EMPTY, REASON_TOO_LONG, REASON_COPY, REASON_DUPLICATE)

_WS_RE = re.compile(r"\s+")
SEEN_SCHEMA_VERSION = 1
FILTER_SCHEMA_VERSION = 1


def normalise(text: str) -> str:
    """Canonical form for equality: NFKC, case-folded, whitespace collapsed, outer blanks stripped."""
    return _WS_RE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def text_hash(text: str) -> int:
    """A signed 64-bit hash of the normalised text (blake2b, 8 bytes).

    Signed so it fits int64 and JSON consumers that read 64-bit integers; 8 bytes keeps a million entries in tens
    of MB while collisions stay negligible (~n^2/2^65).
    """
    digest = hashlib.blake2b(normalise(text).encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


class SeenHashes:
    """A bounded FIFO set of text hashes; the oldest hash is forgotten when full (counted in ``evicted``)."""

    def __init__(self, capacity: int = 1_000_000) -> None:
        if capacity <= 0:
            raise ValueError(f"SeenHashes.capacity must be > 0, got {capacity}")
        self.capacity = capacity
        self._set: set[int] = set()
        self._order: deque[int] = deque()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._set)

    def __contains__(self, h: int) -> bool:
        return h in self._set

    def add(self, h: int) -> None:
        if h in self._set:
            return
        self._set.add(h)
        self._order.append(h)
        while len(self._order) > self.capacity:
            self._set.discard(self._order.popleft())
            self.evicted += 1

    def add_text(self, text: str) -> int:
        h = text_hash(text)
        self.add(h)
        return h

    def contains_text(self, text: str) -> bool:
        return text_hash(text) in self._set

    def state_dict(self) -> dict[str, Any]:
        return {"schema": SEEN_SCHEMA_VERSION, "capacity": self.capacity, "hashes": list(self._order),
                "evicted": self.evicted}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_schema(state, "SeenHashes", SEEN_SCHEMA_VERSION, key="schema")
        if "hashes" not in state:
            raise KeyError("SeenHashes state is missing field 'hashes'")
        self._set.clear()
        self._order.clear()
        self.evicted = 0
        for h in state["hashes"]:
            self.add(int(h))
        self.evicted = int(state.get("evicted", 0)) + self.evicted


class CandidateFilter:
    """Parses generations and applies the pre-teacher checks, counting every outcome by reason."""

    def __init__(self, max_chars: int, seen: SeenHashes | None = None) -> None:
        if max_chars <= 0:
            raise ValueError(f"CandidateFilter.max_chars must be > 0, got {max_chars}")
        self.max_chars = max_chars
        self.seen = seen if seen is not None else SeenHashes()
        self.counts: Counter[str] = Counter()

    def check(self, candidate: Candidate) -> str | None:
        """The rejection reason for ``candidate``, or None when it may go to the teacher (then marked seen)."""
        if not candidate.text.strip():
            return REASON_EMPTY
        if len(candidate.text) > self.max_chars:
            return REASON_TOO_LONG
        if candidate.parent_text and normalise(candidate.text) == normalise(candidate.parent_text):
            return REASON_COPY
        h = text_hash(candidate.text)
        if h in self.seen:
            return REASON_DUPLICATE
        self.seen.add(h)
        return None

    def filter(self, generations: Iterable[str], parent_id: RecordId, parent_text: str = "") -> list[Candidate]:
        """Parse and check the generations written for one parent; returns the candidates that passed."""
        passed: list[Candidate] = []
        for raw in generations:
            parsed = parse_candidate(raw, parent_id, parent_text)
            reason = parsed.reason if isinstance(parsed, Rejection) else self.check(parsed)
            if reason is None:
                self.counts[REASON_PASSED] += 1
                passed.append(parsed)  # type: ignore[arg-type]
            else:
                self.counts[reason] += 1
        return passed

    def metrics(self) -> dict[str, float]:
        out = {f"augment/filter/{r}": float(self.counts.get(r, 0)) for r in FILTER_REASONS + (REASON_PASSED,)}
        out["augment/seen_hashes"] = float(len(self.seen))
        out["augment/seen_evicted"] = float(self.seen.evicted)
        return out

    def state_dict(self) -> dict[str, Any]:
        """Counters only; ``SeenHashes`` is shared with the pool, which checkpoints it once."""
        return {"schema": FILTER_SCHEMA_VERSION, "counts": dict(self.counts)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_schema(state, "CandidateFilter", FILTER_SCHEMA_VERSION, key="schema")
        self.counts = Counter({str(k): int(v) for k, v in state.get("counts", {}).items()})

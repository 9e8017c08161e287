"""Asynchronous validation: the training step hands candidates over and never waits for the teacher.

A bounded queue feeds a pool of worker threads that call ``teacher.validate``; accepted verdicts land in an inbox
the trainer drains once per step (spec §5, DESIGN step 5). ``submit`` and ``drain`` only hold a lock for list
operations, so they return in microseconds whatever the teacher does. Every candidate ends in exactly one
counted outcome (the verdict's reason, a ``TeacherError`` reason, 'error', or a drop). Work in flight survives a
checkpoint: ``state_dict`` holds queued + in-flight candidates and undrained results; loading re-queues them
(the reference lost it, spec §8).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable
from typing import Any

import numpy as np

from verl_ext.augment.config import TeacherConfig
from verl_ext.augment.parser import Candidate
from verl_ext.augment.teacher.base import Teacher, TeacherError, Verdict
from verl_ext.state_schema import check_schema

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
OUTCOME_ERROR = "error"
_CLOSED = "closed"


class AsyncValidator:
    """A bounded queue + worker threads in front of a ``Teacher``; results are drained by the trainer.

    ``capacity`` bounds the queue (a full queue drops new candidates, counted); the inbox of accepted results is
    bounded by ``inbox_capacity`` (default: ``capacity``). Which results a drain sees depends on thread timing;
    their order does not: ``drain`` returns them in submission order, so ids the caller hands out (the pool's
    child ids) do not follow whichever worker thread finished first.
    """

    def __init__(
        self,
        teacher: Teacher,
        *,
        workers: int = 4,
        capacity: int = 4096,
        inbox_capacity: int | None = None,
        latency_window: int = 1024,
        start: bool = True,
    ) -> None:
        for name, value in (("workers", workers), ("capacity", capacity), ("latency_window", latency_window)):
            if value <= 0:
                raise ValueError(f"AsyncValidator.{name} must be > 0, got {value}")
        self.teacher = teacher
        self.workers = workers
        self.capacity = capacity
        self.inbox_capacity = inbox_capacity if inbox_capacity is not None else capacity
        if self.inbox_capacity <= 0:
            raise ValueError(f"AsyncValidator.inbox_capacity must be > 0, got {self.inbox_capacity}")
        self._cond = threading.Condition()
        self._queue: deque[tuple[int, Candidate]] = deque()
        self._in_flight: dict[int, Candidate] = {}
        self._started: dict[int, float] = {}  # seq -> monotonic start of the teacher call (the age metric)
        self._inbox: deque[tuple[int, Candidate, Verdict]] = deque()  # (submission seq, ...)
        self._outcomes: Counter[str] = Counter()
        self._stats: Counter[str] = Counter()
        self._latency: deque[float] = deque(maxlen=latency_window)
        self._seq = 0
        self._stop = False
        self._threads: list[threading.Thread] = []
        if start:
            self.start()

    @classmethod
    def from_config(cls, teacher: Teacher, config: TeacherConfig, *, start: bool = True) -> AsyncValidator:
        """Workers = ``config.concurrency``; queue and inbox bounded by ``config.queue_capacity``."""
        return cls(teacher, workers=config.concurrency, capacity=config.queue_capacity,
                   latency_window=config.latency_window, start=start)

    # -- lifecycle ----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the workers (idempotent)."""
        with self._cond:
            if self._threads or self._stop:
                return
            for i in range(self.workers):
                t = threading.Thread(target=self._work, name=f"heapa-teacher-{i}", daemon=True)
                self._threads.append(t)
                t.start()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the workers; queued and unfinished work stays available to ``state_dict``.

        ``teacher.close()`` ends backoff sleeps at once and, for the HTTP teacher, cancels requests in flight
        (they are re-queued, not judged). A teacher that cannot be interrupted keeps its daemon thread until the
        call returns; its result is still recorded.
        """
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self.teacher.close()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    # -- trainer side -------------------------------------------------------------------------------------
    def submit(self, candidates: Iterable[Candidate]) -> int:
        """Queue candidates without blocking; returns how many were queued (the rest are counted drops)."""
        queued = 0
        with self._cond:
            for cand in candidates:
                self._stats["submitted"] += 1
                if self._stop:
                    self._stats["dropped_closed"] += 1
                elif len(self._queue) >= self.capacity:
                    self._stats["dropped_queue_full"] += 1
                else:
                    self._seq += 1
                    self._queue.append((self._seq, cand))
                    queued += 1
            if queued:
                self._cond.notify(queued)
        return queued

    def drain(self) -> list[tuple[Candidate, Verdict]]:
        """All accepted (candidate, verdict) pairs finished since the last drain, in submission order."""
        with self._cond:
            out = [(cand, verdict) for _, cand, verdict in sorted(self._inbox, key=lambda item: item[0])]
            self._inbox.clear()
            self._stats["drained"] += len(out)
        return out

    def outcome_counts(self) -> dict[str, int]:
        """Cumulative finished outcomes by reason ('accepted', rejection reasons, transport faults, 'error')."""
        with self._cond:
            return dict(self._outcomes)

    def pending(self) -> int:
        """Queued plus in-flight candidates."""
        with self._cond:
            return len(self._queue) + len(self._in_flight)

    def wait_idle(self, timeout: float) -> bool:
        """Block until nothing is queued or in flight (end of training, tests); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue or self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def metrics(self) -> dict[str, float]:
        with self._cond:
            lat = sorted(self._latency)
            out = {
                "augment/submitted": float(self._stats["submitted"]),
                "augment/queued": float(len(self._queue)),
                "augment/in_flight": float(len(self._in_flight)),
                "augment/inbox": float(len(self._inbox)),
                "augment/dropped_queue_full": float(self._stats["dropped_queue_full"]),
                "augment/dropped_inbox_full": float(self._stats["dropped_inbox_full"]),
                "augment/dropped_closed": float(self._stats["dropped_closed"]),
                "augment/drained": float(self._stats["drained"]),
                "augment/requeued": float(self._stats["requeued"]),
                # A stuck teacher shows here long before counts move: the age of the oldest unfinished call.
                "teacher/oldest_inflight_s": time.monotonic() - min(self._started.values()) if self._started else 0.0,
            }
            finished = sum(self._outcomes.values())
            out.update({f"teacher/outcome/{k}": float(v) for k, v in self._outcomes.items()})
        out["teacher/finished"] = float(finished)
        out["teacher/accept_rate"] = out.get("teacher/outcome/accepted", 0.0) / finished if finished else 0.0
        p50, p95 = np.percentile(lat, [50, 95]) if lat else (0.0, 0.0)
        out["teacher/latency_p50_s"], out["teacher/latency_p95_s"] = float(p50), float(p95)
        teacher_metrics = getattr(self.teacher, "metrics", None)
        if callable(teacher_metrics):
            out.update(teacher_metrics())
        return out

    # -- checkpoint ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Pending (in flight + queued, oldest first) candidates, undrained results and counters; JSON-safe."""
        with self._cond:
            pending = sorted(list(self._in_flight.items()) + list(self._queue), key=lambda item: item[0])
            return {
                "schema": SCHEMA_VERSION,
                "pending": [c.to_dict() for _, c in pending],
                "inbox": [{"candidate": c.to_dict(), "verdict": v.to_dict()}
                          for _, c, v in sorted(self._inbox, key=lambda item: item[0])],
                "outcomes": dict(self._outcomes),
                "stats": dict(self._stats),
            }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace queue, inbox and counters; pending candidates are re-queued for a fresh teacher call.

        Meant for a freshly built validator: results of calls already in flight here are discarded.
        """
        check_schema(state, "AsyncValidator", SCHEMA_VERSION, key="schema")
        for name in ("pending", "inbox"):
            if name not in state:
                raise KeyError(f"AsyncValidator state is missing field '{name}'")
        pending = [Candidate.from_dict(d) for d in state["pending"]]
        inbox = [(Candidate.from_dict(d["candidate"]), Verdict.from_dict(d["verdict"])) for d in state["inbox"]]
        with self._cond:
            self._queue.clear()
            self._in_flight.clear()
            self._started.clear()
            self._inbox = deque()
            for cand, verdict in inbox:  # saved in submission order; fresh seqs keep that order
                self._seq += 1
                self._inbox.append((self._seq, cand, verdict))
            self._outcomes = Counter({str(k): int(v) for k, v in state.get("outcomes", {}).items()})
            self._stats = Counter({str(k): int(v) for k, v in state.get("stats", {}).items()})
            for cand in pending:
                if len(self._queue) >= self.capacity:
                    self._stats["dropped_queue_full"] += 1
                    continue
                self._seq += 1
                self._queue.append((self._seq, cand))
                self._stats["requeued"] += 1
            self._cond.notify_all()

    # -- workers ------------------------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                seq, cand = self._queue.popleft()
                self._in_flight[seq] = cand
                start = self._started[seq] = time.monotonic()
            outcome, verdict = self._call(cand)
            elapsed = time.monotonic() - start
            self._finish(seq, cand, outcome, verdict, elapsed)

    def _call(self, cand: Candidate) -> tuple[str, Verdict | None]:
        try:
            verdict = self.teacher.validate(cand)
        except TeacherError as err:
            return err.reason, None
        except Exception:  # noqa: BLE001 - a teacher bug must not kill the worker; logged loudly and counted.
            logger.exception("teacher.validate raised unexpectedly for a candidate of parent %r", cand.parent_id)
            return OUTCOME_ERROR, None
        if not isinstance(verdict, Verdict):
            logger.error("teacher.validate returned %s, not a Verdict", type(verdict).__name__)
            return OUTCOME_ERROR, None
        return verdict.reason, verdict

    def _finish(self, seq: int, cand: Candidate, outcome: str, verdict: Verdict | None, elapsed: float) -> None:
        with self._cond:
            self._started.pop(seq, None)
            if self._in_flight.pop(seq, None) is None:
                return  # state was replaced by load_state_dict meanwhile
            if outcome == _CLOSED and self._stop:
                # Interrupted by shutdown, not judged: keep it pending so a checkpoint carries it over.
                self._queue.appendleft((seq, cand))
            else:
                self._outcomes[outcome] += 1
                self._latency.append(elapsed)
                if verdict is not None and verdict.accepted:
                    if len(self._inbox) >= self.inbox_capacity:
                        self._stats["dropped_inbox_full"] += 1
                    else:
                        self._inbox.append((seq, cand, verdict))
            self._cond.notify_all()

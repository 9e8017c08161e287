"""AsyncValidator: non-blocking submit/drain, bounded queue, exact outcome counting, checkpoint, close."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest

from verl_ext.augment.config import TeacherConfig
from verl_ext.augment.parser import Candidate
from verl_ext.augment.teacher import ProgrammaticTeacher, TeacherError, Verdict
from verl_ext.augment.validator import AsyncValidator


class GatedTeacher:
    """Blocks every call until ``gate`` is set; the candidate text picks the outcome."""

    def __init__(self, open_gate: bool = True) -> None:
        self.gate = threading.Event()
        if open_gate:
            self.gate.set()
        self.calls = 0
        self.closed = threading.Event()
        self._lock = threading.Lock()

    def validate(self, candidate: Candidate) -> Verdict:
        with self._lock:
            self.calls += 1
        while not self.gate.wait(0.01):
            if self.closed.is_set():
                raise TeacherError("closed")
        if candidate.text.startswith("bad"):
            return Verdict.reject("unsolvable")
        if candidate.text.startswith("slow"):
            raise TeacherError("timeout")
        if candidate.text.startswith("boom"):
            raise RuntimeError("teacher bug")
        return Verdict.accept(candidate.text, "1", 1.0)

    def close(self) -> None:
        self.closed.set()


def _cands(*texts: str) -> list[Candidate]:
    return [Candidate(parent_id=i, text=t, difficulty=1.0, parent_text="p") for i, t in enumerate(texts)]


@pytest.fixture
def make_validator():
    made: list[AsyncValidator] = []

    def make(teacher, **kwargs) -> AsyncValidator:
        v = AsyncValidator(teacher, **kwargs)
        made.append(v)
        return v

    yield make
    for v in made:
        getattr(v.teacher, "gate", threading.Event()).set()
        v.close(timeout=2)


def test_outcomes_counted_once_each(make_validator, caplog: pytest.LogCaptureFixture) -> None:
    v = make_validator(GatedTeacher(), workers=3, capacity=100)
    with caplog.at_level(logging.ERROR, logger="verl_ext.augment.validator"):
        assert v.submit(_cands("ok1", "bad1", "slow1", "boom1", "ok2")) == 5
        assert v.wait_idle(5)
    drained = v.drain()
    assert sorted(c.text for c, _ in drained) == ["ok1", "ok2"]
    assert all(verdict.accepted for _, verdict in drained)
    assert v.outcome_counts() == {"accepted": 2, "unsolvable": 1, "timeout": 1, "error": 1}
    assert any("teacher.validate raised" in r.message and r.exc_info for r in caplog.records)
    assert v.drain() == []
    m = v.metrics()
    assert m["teacher/finished"] == 5.0 and m["augment/drained"] == 2.0 and m["teacher/accept_rate"] == 0.4
    assert m["teacher/latency_p95_s"] >= m["teacher/latency_p50_s"] >= 0.0


class ReverseTeacher:
    """Candidate ``k`` of ``n`` is judged only after ``n-1-k`` others finished: the last submitted finishes first."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.validator: AsyncValidator | None = None

    def validate(self, candidate: Candidate) -> Verdict:
        k = int(candidate.text)
        deadline = time.monotonic() + 5
        while sum(self.validator.outcome_counts().values()) < self.n - 1 - k:
            assert time.monotonic() < deadline, f"candidate {k} waited too long"
            time.sleep(0.001)
        return Verdict.accept(candidate.text, "1", 1.0)

    def close(self) -> None:
        pass


def test_drain_returns_submission_order_whatever_the_finishing_order(make_validator) -> None:
    """The pool numbers children in drain order; completion order follows thread timing and must not leak into
    ids (a pinned run once swapped two children's ids under load)."""
    teacher = ReverseTeacher(6)
    v = make_validator(teacher, workers=6, capacity=100, start=False)
    teacher.validator = v
    assert v.submit(_cands(*map(str, range(6)))) == 6
    v.start()
    assert v.wait_idle(5)
    saved = v.state_dict()
    assert [d["candidate"]["text"] for d in saved["inbox"]] == list(map(str, range(6)))
    assert [c.text for c, _ in v.drain()] == list(map(str, range(6)))
    restored = make_validator(ProgrammaticTeacher(), workers=1, start=False)
    restored.load_state_dict(saved)
    assert [c.text for c, _ in restored.drain()] == list(map(str, range(6)))


def test_full_queue_drops_and_counts(make_validator) -> None:
    v = make_validator(GatedTeacher(), workers=1, capacity=3, start=False)
    assert v.submit(_cands("a", "b", "c", "d", "e")) == 3
    assert v.metrics()["augment/dropped_queue_full"] == 2.0
    v.start()
    assert v.wait_idle(5)
    assert len(v.drain()) == 3


def test_submit_and_drain_never_block_on_a_stuck_teacher(make_validator) -> None:
    teacher = GatedTeacher(open_gate=False)
    v = make_validator(teacher, workers=2, capacity=1000)
    start = time.perf_counter()
    for _ in range(50):
        v.submit(_cands("ok"))
        v.drain()
        v.metrics()
    assert time.perf_counter() - start < 0.5
    assert v.pending() == 50


def test_state_round_trip_requeues_pending_and_keeps_inbox(make_validator) -> None:
    first = GatedTeacher()
    v = make_validator(first, workers=2, capacity=100)
    v.submit(_cands("done"))
    assert v.wait_idle(5)  # finished, not drained
    first.gate.clear()
    v.submit(_cands("p1", "p2", "p3", "p4"))
    deadline = time.monotonic() + 5
    while v.metrics()["augment/in_flight"] < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    state = json.loads(json.dumps(v.state_dict()))
    assert sorted(d["text"] for d in state["pending"]) == ["p1", "p2", "p3", "p4"]
    assert [d["candidate"]["text"] for d in state["inbox"]] == ["done"]

    second = GatedTeacher()
    w = make_validator(second, workers=2, capacity=100, start=False)
    w.load_state_dict(state)
    assert w.pending() == 4
    w.start()
    assert w.wait_idle(5)
    assert sorted(c.text for c, _ in w.drain()) == ["done", "p1", "p2", "p3", "p4"]
    assert w.outcome_counts()["accepted"] == 5 and w.metrics()["augment/requeued"] == 4.0


def test_close_is_prompt_and_keeps_unfinished_work(make_validator) -> None:
    teacher = GatedTeacher(open_gate=False)
    v = make_validator(teacher, workers=2, capacity=100)
    v.submit(_cands("a", "b", "c"))
    time.sleep(0.05)
    start = time.perf_counter()
    v.close(timeout=2)
    assert time.perf_counter() - start < 1.0
    assert all(not t.is_alive() for t in v._threads)
    assert sorted(d["text"] for d in v.state_dict()["pending"]) == ["a", "b", "c"]
    assert v.outcome_counts() == {}
    assert v.submit(_cands("late")) == 0 and v.metrics()["augment/dropped_closed"] == 1.0


def test_bad_state_and_arguments_name_the_field() -> None:
    with pytest.raises(ValueError, match="workers"):
        AsyncValidator(ProgrammaticTeacher(), workers=0)
    v = AsyncValidator(ProgrammaticTeacher(), start=False)
    with pytest.raises(ValueError, match="schema"):
        v.load_state_dict({"schema": 0})
    with pytest.raises(KeyError, match="inbox"):
        v.load_state_dict({"schema": 1, "pending": []})


def test_with_programmatic_teacher_from_config(make_validator) -> None:
    cfg = TeacherConfig(concurrency=2, queue_capacity=8)
    v = make_validator(ProgrammaticTeacher(), workers=cfg.concurrency, capacity=cfg.queue_capacity)
    v2 = AsyncValidator.from_config(ProgrammaticTeacher(), cfg, start=False)
    assert (v2.workers, v2.capacity) == (2, 8)
    v.submit(_cands("What is 2 * 8?", "What is 2 +?"))
    assert v.wait_idle(5)
    [(cand, verdict)] = v.drain()
    assert verdict.answer == "16" and v.outcome_counts() == {"accepted": 1, "malformed": 1}

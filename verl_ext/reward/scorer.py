"""``Scorer``: one response in, verl's reward dict out, never later than ``timeout_s`` and never by raising.

The work is split by risk. In the calling process: answer extraction (linear scans), multiple-choice letters,
and the cheap exact comparisons of ``compare.fast_equal`` (most numeric answers end here, with no worker and no
queue). Everything that needs math-verify/sympy runs in a ``WorkerPool`` process that is killed at the deadline.
A single comparison is cut at half the limit after it got its worker, so an item that had to wait behind a
stalled comparison still has time to be scored.

The result always has the same keys (verl stacks ``reward_extra_info`` key by key across a batch):
``score`` (1 when correct; 0 when not, or -1 with ``format='dapo'``), ``acc`` (1/0), ``pred`` (the extracted
answer), ``timeout`` and ``error`` (1 when the trajectory hit the time limit / an error; it then scores as wrong).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from verl_ext.reward.choice import answer_letter, gold_letter
from verl_ext.reward.compare import fast_equal
from verl_ext.reward.extract import ANSWER_LINE, BOXED, DEFAULT_MAX_ANSWER_CHARS, extract_answer
from verl_ext.reward.numbers import DEFAULT_MIN_DIGITS
from verl_ext.reward.workers import Outcome, WorkerPool, shared_pool

logger = logging.getLogger(__name__)

FORMATS = ("boxed", "dapo", "auto")
ORDERS = {"boxed": (BOXED,), "dapo": (ANSWER_LINE, BOXED), "auto": (BOXED, ANSWER_LINE)}
CHOICES = ("auto", "never")
RESULT_KEYS = ("score", "acc", "pred", "timeout", "error")
DEFAULT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ScorerConfig:
    """Scoring settings (mirrored by ``reward.reward_kwargs`` in the recipe)."""

    format: str = "boxed"  # boxed | dapo (Answer: line first, scores +1/-1) | auto (box, then Answer: line)
    timeout_s: float = DEFAULT_TIMEOUT_S  # hard limit per trajectory, from the start of its scoring
    workers: int = 2  # worker processes (per scoring process, e.g. per verl reward-loop actor)
    memory_limit_mb: int | None = 2048  # address-space limit of each worker process
    max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS  # longer extracted answers count as no answer
    min_digits: int = DEFAULT_MIN_DIGITS  # significant digits a decimal needs to stand for 1/3, sqrt(2), ...
    choices: str = "auto"  # auto: a ground truth that is one letter A-J grades a letter answer | never

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"format={self.format!r}; expected one of {FORMATS}")
        if self.choices not in CHOICES:
            raise ValueError(f"choices={self.choices!r}; expected one of {CHOICES}")
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)) or self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, got {self.timeout_s!r}")
        for name in ("workers", "max_answer_chars", "min_digits"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        mem = self.memory_limit_mb
        if mem is not None and (isinstance(mem, bool) or not isinstance(mem, int) or mem < 256):
            raise ValueError(f"memory_limit_mb must be null or an int >= 256, got {mem!r}")

    @property
    def wrong_score(self) -> float:
        return -1.0 if self.format == "dapo" else 0.0


@dataclass(frozen=True)
class Verdict:
    correct: bool
    pred: str
    how: str  # no_answer | choice | fast | numeric | math-verify | unparsed | incomparable | timeout | error


class Scorer:
    """Thread-safe scorer; ``score`` blocks for at most ``config.timeout_s`` (plus milliseconds)."""

    def __init__(self, config: ScorerConfig | None = None, pool: WorkerPool | None = None) -> None:
        self.config = config or ScorerConfig()
        self.pool = pool or shared_pool(self.config.workers, self.config.memory_limit_mb)
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def warm_up(self, timeout_s: float | None = None) -> bool:
        """Wait until the worker pool is up (first start imports math-verify: about a second or two)."""
        return self.pool.wait_ready(timeout_s)

    def score(self, data_source: str, solution_str: str, ground_truth: Any,
              extra_info: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """verl's reward dict for one response (see module docstring); never raises for a response's content."""
        deadline = time.monotonic() + float(self.config.timeout_s)
        try:
            verdict = self._judge_response(solution_str, ground_truth, deadline)
        except Exception:  # a bug in the in-process part must not stop the batch: counted, logged, scored wrong
            logger.exception("reward scoring raised for data_source=%r; scoring the trajectory as wrong",
                             data_source)
            verdict = Verdict(False, "", "error")
        return self.result(verdict)

    def score_many(self, items: Iterable[Mapping[str, Any]], threads: int | None = None) -> list[dict[str, Any]]:
        """``score`` over dicts with keys ``data_source``, ``solution_str``, ``ground_truth`` (``extra_info``
        optional), concurrently on ``threads`` threads (default: 2 per worker); results in input order."""
        items = list(items)
        with ThreadPoolExecutor(max_workers=threads or 2 * self.config.workers) as ex:
            return list(ex.map(lambda it: self.score(it["data_source"], it["solution_str"], it["ground_truth"],
                                                     it.get("extra_info")), items))

    def judge(self, pred: str, gold: str, deadline: float) -> Verdict:
        """Compare an extracted answer with one ground truth."""
        if self.config.choices == "auto":
            letter = gold_letter(gold)
            if letter is not None:
                return Verdict(answer_letter(pred) == letter, pred, "choice")
        fast = fast_equal(pred, gold, self.config.min_digits)
        if fast is not None:
            return Verdict(fast, pred, "fast")
        max_run_s = self.config.timeout_s / 2
        inner_s = max(1, int(max_run_s * 0.8))  # math-verify's own timers (whole seconds), per parse / comparison
        outcome = self.pool.run(("equal", pred, gold, inner_s, self.config.min_digits), deadline, max_run_s)
        if outcome.status == "ok":
            equal, how = outcome.value
            return Verdict(bool(equal), pred, how)
        self._log_failure(outcome, pred, gold)
        return Verdict(False, pred, outcome.status)

    def call(self, target: Any, kwargs: dict[str, Any], deadline: float) -> Outcome:
        """Run a custom scoring function in a worker: ``target(**kwargs)``, killed at ``deadline``.

        ``target`` is a picklable (importable) function or ``("path", module_path, name, extra_kwargs)``. As for
        comparisons, one call is cut at half the limit after it got its worker.
        """
        outcome = self.pool.run(("call", target, kwargs), deadline, self.config.timeout_s / 2)
        self._count(outcome.status)
        if outcome.status != "ok":
            logger.warning("custom reward function %s: %s", outcome.status, outcome.detail)
        return outcome

    def result(self, verdict: Verdict) -> dict[str, Any]:
        """The reward dict for a verdict (and count it)."""
        self._count(verdict.how)
        timeout, error = verdict.how == "timeout", verdict.how == "error"
        return {"score": 1.0 if verdict.correct else self.config.wrong_score, "acc": float(verdict.correct),
                "pred": verdict.pred, "timeout": float(timeout), "error": float(error)}

    def failure_result(self, status: str) -> dict[str, Any]:
        """The reward dict of a trajectory whose scoring ended in ``status`` (``timeout`` or ``error``)."""
        if status not in ("timeout", "error"):
            raise ValueError(f"failure_result: status must be 'timeout' or 'error', got {status!r}")
        return {"score": self.config.wrong_score, "acc": 0.0, "pred": "", "timeout": float(status == "timeout"),
                "error": float(status == "error")}

    def metrics(self) -> dict[str, float]:
        """Counts since start: ``reward/timeouts``, ``reward/errors`` and one ``reward/by_<how>`` per path."""
        with self._lock:
            counts = dict(self.counts)
        out = {"reward/timeouts": float(counts.get("timeout", 0)), "reward/errors": float(counts.get("error", 0))}
        out.update({f"reward/by_{k}": float(v) for k, v in counts.items() if k not in ("timeout", "error")})
        return out

    # -- internals ----------------------------------------------------------------------------------------------
    def _judge_response(self, solution_str: str, ground_truth: Any, deadline: float) -> Verdict:
        golds = _golds(ground_truth)
        pred, _ = extract_answer(solution_str, ORDERS[self.config.format],
                                 max_answer_chars=self.config.max_answer_chars)
        if not pred or not golds:
            return Verdict(False, pred or "", "no_answer")
        verdict = Verdict(False, pred, "no_answer")
        for gold in golds:
            verdict = self.judge(pred, gold, deadline)
            if verdict.correct or verdict.how in ("timeout", "error"):
                return verdict
        return verdict

    def _count(self, key: str) -> None:
        with self._lock:
            self.counts[key] += 1

    @staticmethod
    def _log_failure(outcome: Outcome, pred: str, gold: str) -> None:
        logger.warning("reward comparison %s (%s); scoring as wrong. pred=%r gold=%r", outcome.status,
                       outcome.detail, pred[:120], gold[:120])


def _golds(ground_truth: Any) -> list[str]:
    """Ground truth as a list of accepted answers (verl rows hold a string; some datasets hold a list)."""
    if ground_truth is None:
        return []
    if isinstance(ground_truth, str):
        items: list[Any] = [ground_truth]
    elif hasattr(ground_truth, "__iter__"):
        items = list(ground_truth)
    else:
        items = [ground_truth]
    return [s for s in (str(g).strip() for g in items if g is not None) if s]

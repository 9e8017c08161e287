"""Scoring responses with the project's scorer, optionally across worker processes, with progress logging.

``score_response`` is the one place that calls the scorer (``verl_ext.reward.math_score.compute_score``, its
``acc`` key): swapping in a process-isolated scorer later changes only this function. Worker processes run the
scorer in their main thread, where math-verify's own signal-based time limits work.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from verl_ext.evaluation.generations import Problem
from verl_ext.evaluation.metrics import ProblemResult

logger = logging.getLogger(__name__)

FORMATS = ("boxed", "dapo", "auto")


def score_response(data_source: str, response: str, ground_truth: str, extra_info: dict | None,
                   fmt: str) -> tuple[float, str, str | None]:
    """(acc in {0, 1}, extracted answer, "timeout"/"error" when the scorer flagged one, else None)."""
    from verl_ext.reward.math_score import compute_score

    out = compute_score(data_source, response, ground_truth, extra_info, format=fmt)
    flag = "timeout" if out.get("timeout") else "error" if out.get("error") else None
    return float(out["acc"]), str(out.get("pred") or ""), flag


def _score_problem(args: tuple[str, list[str], str, dict | None, str]) -> tuple[list[float], list[str], list]:
    data_source, responses, ground_truth, extra_info, fmt = args
    accs, preds, flags = [], [], []
    for r in responses:
        acc, pred, flag = score_response(data_source, r, ground_truth, extra_info, fmt)
        accs.append(acc)
        preds.append(pred)
        flags.append(flag)
    return accs, preds, flags


class Progress:
    """Logs ``done/total`` at most every ``every_s`` seconds (long scoring or generation runs)."""

    def __init__(self, what: str, total: int, every_s: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self.what, self.total, self.every_s, self.clock = what, total, every_s, clock
        self.start = self.last = clock()
        self.done = 0

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = self.clock()
        if now - self.last >= self.every_s or self.done == self.total:
            rate = self.done / max(now - self.start, 1e-9)
            eta = (self.total - self.done) / rate if rate > 0 else float("inf")
            logger.info("%s: %d/%d (%.1f/s, eta %.0f s)", self.what, self.done, self.total, rate, eta)
            self.last = now


def score_problems(problems: Sequence[Problem], fmt: str = "auto", workers: int = 1,
                   k: int | None = None) -> tuple[list[ProblemResult], list[dict[str, Any]]]:
    """Score every response; ``k`` keeps the first k responses of each problem (fewer is an error).

    Returns the per-problem results and per-problem records (``correct``, ``preds``, and ``flags`` where the
    scorer reported a timeout or an error: those responses count as wrong) for the scored file.
    """
    if fmt not in FORMATS:
        raise ValueError(f"format={fmt!r}; expected one of {FORMATS}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    jobs = []
    for p in problems:
        if p.ground_truth is None:
            raise ValueError(f"{p.where}: problem {p.key} has no ground truth")
        responses = p.responses
        if k is not None:
            if len(responses) < k:
                raise ValueError(f"{p.where}: problem {p.key} has {len(responses)} responses, k={k} needs {k}")
            responses = responses[:k]
        if not responses:
            raise ValueError(f"{p.where}: problem {p.key} has no responses")
        jobs.append((p.data_source, responses, p.ground_truth, p.extra_info, fmt))
    progress = Progress("scoring problems", len(jobs))
    outputs: list[tuple[list[float], list[str], list]] = []
    if workers == 1:
        for job in jobs:
            outputs.append(_score_problem(job))
            progress.advance()
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for out in pool.map(_score_problem, jobs, chunksize=max(1, len(jobs) // (workers * 8))):
                outputs.append(out)
                progress.advance()
    results, records = [], []
    for p, (accs, preds, flags) in zip(problems, outputs):
        results.append(ProblemResult(p.data_source, p.index, tuple(accs)))
        record = {"data_source": p.data_source, "index": p.index, "ground_truth": p.ground_truth,
                  "correct": accs, "preds": preds}
        if any(flags):
            record["flags"] = flags
        records.append(record)
    return results, records


def count_flags(records: Sequence[dict[str, Any]]) -> dict[str, int]:
    """How many responses the scorer flagged, by kind (a counted outcome, not a silent zero)."""
    counts = {"timeout": 0, "error": 0}
    for rec in records:
        for flag in rec.get("flags", ()):
            if flag:
                counts[flag] = counts.get(flag, 0) + 1
    return counts

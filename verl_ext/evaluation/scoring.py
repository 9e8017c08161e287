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
                   fmt: str) -> tuple[float, str]:
    """(acc in {0, 1}, extracted answer) for one response."""
    from verl_ext.reward.math_score import compute_score

    out = compute_score(data_source, response, ground_truth, extra_info, format=fmt)
    return float(out["acc"]), str(out.get("pred") or "")


def _score_problem(args: tuple[str, list[str], str, dict | None, str]) -> tuple[list[float], list[str]]:
    data_source, responses, ground_truth, extra_info, fmt = args
    accs, preds = [], []
    for r in responses:
        acc, pred = score_response(data_source, r, ground_truth, extra_info, fmt)
        accs.append(acc)
        preds.append(pred)
    return accs, preds


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

    Returns the per-problem results and per-problem records (``correct``, ``preds``) for the scored file.
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
    outputs: list[tuple[list[float], list[str]]] = []
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
    for p, (accs, preds) in zip(problems, outputs):
        results.append(ProblemResult(p.data_source, p.index, tuple(accs)))
        records.append({"data_source": p.data_source, "index": p.index, "ground_truth": p.ground_truth,
                        "correct": accs, "preds": preds})
    return results, records

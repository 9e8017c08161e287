"""avg@k and pass@k from per-problem correctness, per benchmark and overall (pure Python + numpy).

For a problem with ``n`` scored samples of which ``c`` are correct:

- ``avg@n`` is ``c / n`` averaged over problems: the expected accuracy of one sample (the paper's avg@16);
- ``pass@k`` (k <= n) is the unbiased estimator of Chen et al. (2021), ``1 - C(n-c, k) / C(n, k)``: the chance
  that at least one of k samples drawn without replacement from the n is correct, averaged over problems.
  pass@1 equals avg@n's per-problem mean; pass@n is the fraction of problems solved at least once.

A benchmark's numbers average its problems; ``overall`` reports both the macro mean over benchmarks (the
paper's "Avg" column) and the micro mean over all problems pooled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with ``n`` samples, ``c`` correct (product form: no huge binomials)."""
    if not (isinstance(n, (int, np.integer)) and isinstance(c, (int, np.integer)) and isinstance(k, (int, np.integer))):
        raise TypeError(f"pass_at_k expects integers, got n={n!r}, c={c!r}, k={k!r}")
    if n < 1 or k < 1 or not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs n >= 1, k >= 1 and 0 <= c <= n; got n={n}, c={c}, k={k}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per problem, this problem has {n}")
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


@dataclass(frozen=True)
class ProblemResult:
    """One problem's scored samples (1.0 correct, 0.0 wrong), in sample order."""

    data_source: str
    index: str
    correct: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.correct)

    @property
    def c(self) -> int:
        return int(sum(1 for x in self.correct if x >= 0.5))


@dataclass
class BenchmarkScore:
    """avg@n and pass@k of one benchmark (fractions in [0, 1])."""

    data_source: str
    n_problems: int
    samples_per_problem: int  # the smallest n over the benchmark's problems
    avg: float
    pass_at: dict[int, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"data_source": self.data_source, "n_problems": self.n_problems,
                "samples_per_problem": self.samples_per_problem, f"avg@{self.samples_per_problem}": self.avg,
                "avg": self.avg, "pass_at": {str(k): v for k, v in sorted(self.pass_at.items())}}


def score_benchmark(data_source: str, problems: Sequence[ProblemResult], ks: Iterable[int]) -> BenchmarkScore:
    """avg@n and pass@k over ``problems``; a k larger than some problem's n is an error naming the problem."""
    if not problems:
        raise ValueError(f"benchmark {data_source!r} has no problems")
    empty = [p.index for p in problems if p.n == 0]
    if empty:
        raise ValueError(f"benchmark {data_source!r}: problems {empty[:5]} have no scored samples")
    n_min = min(p.n for p in problems)
    ks = sorted({int(k) for k in ks})
    too_big = [k for k in ks if k > n_min]
    if too_big:
        short = next(p for p in problems if p.n == n_min)
        raise ValueError(f"benchmark {data_source!r}: pass@{too_big[0]} needs {too_big[0]} samples per problem, "
                         f"problem {short.index!r} has {n_min}")
    avg = float(np.mean([p.c / p.n for p in problems]))
    pass_at = {k: float(np.mean([pass_at_k(p.n, p.c, k) for p in problems])) for k in ks}
    return BenchmarkScore(data_source, len(problems), n_min, avg, pass_at)


def score_all(problems: Iterable[ProblemResult], ks: Iterable[int]) -> dict:
    """Per-benchmark scores plus ``overall`` (macro mean over benchmarks and micro mean over problems)."""
    by_source: dict[str, list[ProblemResult]] = {}
    for p in problems:
        by_source.setdefault(p.data_source, []).append(p)
    if not by_source:
        raise ValueError("no scored problems")
    ks = sorted({int(k) for k in ks})
    benches = {ds: score_benchmark(ds, probs, ks) for ds, probs in sorted(by_source.items())}
    pooled = [p for probs in by_source.values() for p in probs]
    overall = {
        "n_benchmarks": len(benches), "n_problems": len(pooled),
        "avg_macro": float(np.mean([b.avg for b in benches.values()])),
        "avg_micro": float(np.mean([p.c / p.n for p in pooled])),
        "pass_at_macro": {str(k): float(np.mean([b.pass_at[k] for b in benches.values()])) for k in ks},
        "pass_at_micro": {str(k): float(np.mean([pass_at_k(p.n, p.c, k) for p in pooled])) for k in ks},
    }
    return {"benchmarks": {ds: b.as_dict() for ds, b in benches.items()}, "overall": overall}


def group_correct(rows: Iterable[Mapping]) -> list[ProblemResult]:
    """``ProblemResult``s from ``{"data_source", "index", "correct": [..]}`` mappings (one per problem)."""
    return [ProblemResult(str(r["data_source"]), str(r["index"]), tuple(float(x) for x in r["correct"]))
            for r in rows]

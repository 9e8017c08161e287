"""Benchmark of the reward scorer: ``python -m verl_ext.bench.reward``.

Over the benchmark files (``math500``, ``aime24``, ``aime25`` jsonl with an ``answer`` field) and mechanically
generated variants (``verl_ext.reward.variants``), each response being ~1k characters of reasoning followed by the
final answer, it measures:

- ground truths accepted, boxed (``format=boxed``) and on an ``Answer:`` line (``format=dapo``) - target 100%;
- equivalent renderings accepted (``\\dfrac``, ``a/b``, exact decimals, ``a+b`` order, spacing, ``\\left``,
  degree signs, units, separators, e-notation) - target >= 95%;
- wrong answers accepted (+1, sign flip, x2, changed digit, last-place change of large integers) - target 0;
- adversarial responses (stall and size attacks): worst latency per trajectory - target <= the limit, all scored 0;
- a mixed batch (adversarial items among normal ones, scored concurrently): normal items still scored right;
- throughput of one thread on ~1k-char responses (ground truths of all files, so numbers and symbolic answers).
Each row shows wall time and CPU time (this process + worker processes). Worker start-up is excluded (warm pool).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tabulate import tabulate

from verl_ext.reward import Scorer, ScorerConfig
from verl_ext.reward.choice import gold_letter
from verl_ext.reward.compare import fast_equal
from verl_ext.reward.variants import adversarial_responses, renderings, wrong_answers
from verl_ext.reward.workers import WorkerPool

DEFAULT_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "benchmarks"
FILES = ("math500", "aime24", "aime25")
_REASONING = ("We begin by restating the problem and naming the unknown quantities. Expanding the given relation "
              "and collecting like terms gives a simpler equation, which we solve by factoring; we then check "
              "each candidate against the original constraints and discard the extraneous ones. ") * 4


def response(answer: str, style: str = "boxed") -> str:
    """~1k characters of reasoning, then the answer boxed or on DAPO's ``Answer:`` line."""
    if style == "answer_line":
        return f"{_REASONING}\nAnswer: {answer}"
    return f"{_REASONING}Therefore the final answer is $\\boxed{{{answer}}}$."


def load_golds(data_dir: Path, limit: int | None) -> list[tuple[str, str]]:
    golds = []
    for name in FILES:
        path = data_dir / f"{name}.jsonl"
        if not path.exists():
            raise FileNotFoundError(f"benchmark file {path} not found (set --data-dir)")
        with path.open() as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        golds += [(name, str(r["answer"])) for r in rows[:limit]]
    return golds


class Meter:
    """Wall and CPU seconds (this process and the scorer's worker processes) around a block."""

    def __init__(self, scorer: Scorer) -> None:
        self.scorer = scorer

    def __enter__(self) -> Meter:
        self.t0, self.c0, self.w0 = time.perf_counter(), time.process_time(), self.scorer.pool.cpu_seconds()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.t0
        self.cpu = time.process_time() - self.c0
        self.worker_cpu = self.scorer.pool.cpu_seconds() - self.w0


def _score_all(scorers: dict[str, Scorer], items: list[tuple[str, str, str, str]], threads: int) -> list[dict]:
    """items: (style, data_source, answer, gold) -> score dicts, scored concurrently."""
    def one(it: tuple[str, str, str, str]) -> dict:
        style, source, answer, gold = it
        fmt = "dapo" if style == "answer_line" else "boxed"
        return scorers[fmt].score(source, response(answer, style), gold)
    with ThreadPoolExecutor(max_workers=threads) as ex:
        return list(ex.map(one, items))


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    base = dict(timeout_s=args.timeout_s, workers=args.workers)
    scorers = {f: Scorer(ScorerConfig(format=f, **base)) for f in ("boxed", "dapo")}
    scorer = scorers["boxed"]
    if not scorer.warm_up(120):
        raise RuntimeError("the scorer's worker processes did not start within 120 s")
    golds = load_golds(Path(args.data_dir), args.limit)
    rows: list[dict[str, Any]] = []

    def row(name: str, meter: Meter, value: str, target: str, ok: bool, n: int, note: str = "") -> None:
        rows.append({"measure": name, "value": value, "target": target, "met": ok, "n": n, "wall_s": meter.wall,
                     "cpu_s": meter.cpu, "worker_cpu_s": meter.worker_cpu, "note": note})

    def rate_row(name: str, items: list, want: float, target: str, check: Callable[[float], bool]) -> None:
        with Meter(scorer) as m:
            outs = _score_all(scorers, items, args.threads)
        hits = sum(o["acc"] for o in outs)
        bad = [it for it, o in zip(items, outs) if o["acc"] != want]
        rate = hits / max(1, len(items))
        value = f"{hits:.0f}/{len(items)} ({100 * rate:.1f}%)" if want else f"{hits:.0f}/{len(items)}"
        note = "; ".join(f"{it[2]!r} vs {it[3]!r}" for it in bad[:args.show])
        row(name, m, value, target, check(rate if want else hits), len(items), note)

    rate_row("ground truths accepted (boxed)", [("boxed", s, g, g) for s, g in golds], 1.0, "100%", lambda r: r == 1)
    rate_row("ground truths accepted (Answer: line, dapo)", [("answer_line", s, g, g) for s, g in golds], 1.0,
             "100%", lambda r: r == 1)
    _math_verify_row(scorer, golds, row)
    equiv = [("boxed", s, r, g) for s, g in golds for r in renderings(g)]
    rate_row("equivalent renderings accepted", equiv, 1.0, ">= 95%", lambda r: r >= 0.95)
    wrong = [("boxed", s, w, g) for s, g in golds for w in wrong_answers(g)]
    rate_row("wrong answers accepted", wrong, 0.0, "0", lambda hits: hits == 0)
    _adversarial_rows(scorer, args, row)
    _throughput_row(scorer, golds, args, row)
    counts = {k: int(v) for k, v in sorted((scorers["boxed"].counts + scorers["dapo"].counts).items())}
    rows.append({"measure": "totals", "scorer_paths": counts, "pool": dict(sorted(scorer.pool.counts.items()))})
    return rows


def _math_verify_row(scorer: Scorer, golds: list[tuple[str, str]], row: Callable[..., None]) -> None:
    """Ground truths against themselves through the worker path alone (math-verify), bypassing the fast path."""
    with Meter(scorer) as m:
        outs = [scorer.pool.run(("equal", g, g, 2, scorer.config.min_digits), time.monotonic() + 5) for _, g in golds]
    ok = [o.status == "ok" and o.value[0] for o in outs]
    bad = [g for (_, g), good in zip(golds, ok) if not good]
    row("ground truths accepted by math-verify alone", m, f"{sum(ok)}/{len(golds)}", "100%", not bad, len(golds),
        "; ".join(repr(g) for g in bad[:5]))


def _adversarial_rows(scorer: Scorer, args: argparse.Namespace, row: Callable[..., None]) -> None:
    cases = adversarial_responses()
    worst, worst_name, scored_zero, timeouts = 0.0, "", 0, 0
    with Meter(scorer) as m:
        for name, text in cases:
            for gold in ("7", "x^2+1"):  # a number and an expression: both comparison paths
                t0 = time.perf_counter()
                out = scorer.score("adversarial", text, gold)
                dt = time.perf_counter() - t0
                if dt > worst:
                    worst, worst_name = dt, name
                scored_zero += out["acc"] == 0.0
                timeouts += int(out["timeout"])
    n = 2 * len(cases)
    row("adversarial: worst latency per trajectory", m, f"{worst:.2f} s ({worst_name})",
        f"<= {args.timeout_s:g} s", worst <= args.timeout_s, n, f"{scored_zero}/{n} scored 0, {timeouts} timeouts")
    normal = [("math500", response("\\frac{\\sqrt{3}}{3}"), "\\frac{\\sqrt{3}}{3}")] * 48
    bad = [("adversarial", text, "x^2+1") for _, text in cases[:8]]
    batch = [item for pair in zip(normal[::6], bad) for item in pair] + normal[8:]
    with Meter(scorer) as m:
        with ThreadPoolExecutor(max_workers=args.threads) as ex:
            starts = time.perf_counter()
            outs = list(ex.map(lambda it: (scorer.score(*it), time.perf_counter() - starts), batch))
    right = sum(o["acc"] for (o, _), it in zip(outs, batch) if it[0] == "math500")
    row("mixed batch: normal items right while 8 stall", m, f"{right:.0f}/{len(normal)}", f"{len(normal)}",
        right == len(normal), len(batch), f"batch done in {max(t for _, t in outs):.2f} s")


def _throughput_row(scorer: Scorer, golds: list[tuple[str, str]], args: argparse.Namespace,
                    row: Callable[..., None]) -> None:
    # each ground truth, and one rendering (or wrong answer) of it: numbers, expressions, sets, text
    mixed = [(s, response(a), g) for s, g in golds for a in (g, *(renderings(g) or wrong_answers(g))[:1])]
    # only answers the in-process rules cannot decide: every one is a math-verify call in a worker
    slow = [(s, response(a), g) for s, g in golds for a in (*renderings(g), *wrong_answers(g))
            if gold_letter(g) is None and fast_equal(a, g) is None]
    for name, items, target in (("throughput, 1 thread, ~1k-char responses", mixed, 20.0),
                                ("throughput, 1 thread, math-verify path only (worst case)", slow, None)):
        fresh = Scorer(ScorerConfig(timeout_s=args.timeout_s, workers=1), pool=WorkerPool(workers=1))  # cold caches
        try:
            fresh.warm_up(120)
            with Meter(fresh) as m:
                for source, text, gold in items:
                    fresh.score(source, text, gold)
        finally:
            fresh.pool.close()
        rate = len(items) / m.wall
        inproc = sum(fresh.counts.get(k, 0) for k in ("fast", "choice", "no_answer"))
        per_cpu = len(items) / max(1e-9, m.cpu + m.worker_cpu)
        row(name, m, f"{rate:.1f} items/s", f">= {target:g} items/s" if target else "(information)",
            rate >= target if target else True, len(items),
            f"{inproc}/{len(items)} decided in-process; {len(items[0][1])} chars each; "
            f"{per_cpu:.1f} items per CPU-second")


def render(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    head = (f"reward scorer benchmark: timeout_s={args.timeout_s:g}, workers={args.workers}, "
            f"threads={args.threads}, cpus={os.cpu_count()}")
    totals = [r for r in rows if r["measure"] == "totals"]
    rows = [r for r in rows if r["measure"] != "totals"]
    cells = [[r["measure"], str(r["value"]), str(r["target"]), "yes" if r["met"] else "NO", str(r["n"]),
              f"{r['wall_s']:.2f}", f"{r['cpu_s']:.2f} + {r['worker_cpu_s']:.2f}"] for r in rows]
    table = tabulate(cells, headers=["measure", "value", "target", "met", "n", "wall s", "CPU s (main + workers)"],
                     tablefmt="pipe", disable_numparse=True,
                     colalign=("left", "right", "left", "left", "right", "right", "right"))
    lines = [head, "", table]
    notes = [f"- {r['measure']}: {r['note']}" for r in rows if r["note"]]
    notes += [f"- decided by (all rows but throughput): {t['scorer_paths']}; worker pool: {t['pool']}" for t in totals]
    return "\n".join(lines + ([""] + notes if notes else []))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.environ.get("VERL_EXT_BENCHMARKS", str(DEFAULT_DATA)))
    parser.add_argument("--timeout-s", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8, help="concurrent scoring threads (as verl's reward loop)")
    parser.add_argument("--limit", type=int, default=None, help="rows per benchmark file (default: all)")
    parser.add_argument("--show", type=int, default=5, help="failures listed per row")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = parser.parse_args(argv)
    rows = run(args)
    sys.stdout.write((json.dumps(rows, indent=1) if args.json else render(rows, args)) + "\n")
    return 0 if all(r.get("met", True) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

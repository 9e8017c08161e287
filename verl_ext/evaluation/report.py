"""Evaluation results as JSON, and the paper-shaped markdown table (rows = runs, columns = benchmarks + Avg).

A result file holds one run: ``{"schema_version", "run", "benchmarks": {ds: {...}}, "overall": {...}, ...}``
as written by ``python -m verl_ext.evaluation score|generate``. ``markdown_table`` puts several of them side by
side; cells are percentages with one decimal, the best value of each column in bold when there are several runs.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from tabulate import tabulate

from verl_ext.state_schema import check_schema

SCHEMA_VERSION = 1
# Column order and headers of the paper's tables; other data sources follow alphabetically under their own name.
BENCHMARK_ORDER = ("aime24", "aime25", "amc23", "math500", "minerva_math", "olympiadbench", "gpqa_diamond")
DISPLAY = {"aime24": "AIME24", "aime25": "AIME25", "amc23": "AMC23", "math500": "MATH500",
           "minerva_math": "Minerva", "olympiadbench": "Olympiad", "gpqa_diamond": "GPQA-D"}


def write_json(obj: Mapping[str, Any], path: str | os.PathLike) -> None:
    tmp = os.fspath(path) + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def read_result(path: str | os.PathLike) -> dict:
    """One result JSON; a file that is not one names what is missing."""
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as err:
            raise ValueError(f"{os.fspath(path)}: not an evaluation result (invalid JSON: {err})") from err
    if not isinstance(data, dict) or "benchmarks" not in data:
        raise ValueError(f"{os.fspath(path)}: not an evaluation result (no 'benchmarks'); write one with "
                         "`python -m verl_ext.evaluation score ...`")
    check_schema(data, os.fspath(path), SCHEMA_VERSION)
    return data


def column_order(sources: Sequence[str]) -> list[str]:
    known = [s for s in BENCHMARK_ORDER if s in sources]
    return known + sorted(s for s in set(sources) if s not in BENCHMARK_ORDER)


def cell_value(bench: Mapping[str, Any], metric: str) -> float | None:
    """``avg`` or ``pass@k`` of one benchmark entry (None when that k was not computed)."""
    if metric == "avg":
        return float(bench["avg"])
    if metric.startswith("pass@"):
        value = bench.get("pass_at", {}).get(metric.split("@", 1)[1])
        return None if value is None else float(value)
    raise ValueError(f"metric {metric!r}; expected 'avg' or 'pass@K'")


def table_rows(results: Sequence[Mapping[str, Any]], metric: str = "avg") -> tuple[list[str], list[list[Any]]]:
    """Column names (benchmarks + Avg) and one row per run: [name, value per column..., Avg] (None = missing)."""
    columns = column_order([ds for r in results for ds in r["benchmarks"]])
    rows = []
    for r in results:
        values = [cell_value(r["benchmarks"][ds], metric) if ds in r["benchmarks"] else None for ds in columns]
        avg = None if any(v is None for v in values) else sum(values) / len(values)
        rows.append([r.get("run") or "run", *values, avg])
    return columns, rows


def markdown_table(results: Sequence[Mapping[str, Any]], metric: str = "avg") -> str:
    """The table; a run missing a benchmark shows '–' there and gets no Avg (it would not be comparable)."""
    if not results:
        raise ValueError("markdown_table: no results")
    columns, rows = table_rows(results, metric)
    header = ["run", *[DISPLAY.get(c, c) for c in columns], "Avg"]
    best = [max((row[j] for row in rows if row[j] is not None), default=None) for j in range(1, len(header))]
    lines = []
    for row in rows:
        cells = [str(row[0])]
        for j, v in enumerate(row[1:]):
            if v is None:
                cells.append("–")
                continue
            text = f"{100 * v:.1f}"
            cells.append(f"**{text}**" if len(rows) > 1 and best[j] is not None and math.isclose(v, best[j]) else text)
        lines.append(cells)
    text = tabulate(lines, headers=header, tablefmt="pipe", disable_numparse=True,
                    colalign=("left",) + ("right",) * (len(header) - 1))
    return _title(results, metric) + "\n\n" + text + "\n"


def _title(results: Sequence[Mapping[str, Any]], metric: str) -> str:
    """``avg@16 (%)``; when runs sampled different numbers per problem, each run's n is spelled out."""
    if metric != "avg":
        return f"{metric} (%)"
    per_run = {str(r.get("run") or "run"): sorted({b.get("samples_per_problem") for b in r["benchmarks"].values()})
               for r in results}
    ns = {n for values in per_run.values() for n in values}
    if len(ns) == 1:
        return f"avg@{ns.pop()} (%)"
    spelled = ", ".join(f"{run} {'/'.join(map(str, values))}" for run, values in per_run.items())
    return f"avg@n (%), n = samples per problem: {spelled}"

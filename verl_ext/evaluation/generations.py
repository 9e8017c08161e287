"""The generations file (JSON lines) and the evaluation data it is scored against.

Generations schema, one JSON object per line; lines that share ``(data_source, index)`` are one problem, their
responses concatenated in file order:

    {"data_source": "aime24", "index": 7, "responses": ["...", "..."], "ground_truth": "025"}   # grouped
    {"data_source": "aime24", "index": 7, "response": "..."}                                    # one per line

``data_source`` (string) and ``index`` (int or string; compared as text) are required, and ``responses`` (list of
strings) or ``response`` (string). ``ground_truth`` may be left out when evaluation data (verl parquet rows,
matched on ``data_source`` and ``extra_info.index``) is given; when both exist they must agree. Optional:
``extra_info`` (passed to the scorer), ``prompt`` (kept for reading). Anything else is ignored. The generate
command writes exactly the grouped form. Errors name the file, the line and the field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from verl_ext.adapters.row_files import BadLine, iter_file, iter_jsonl


class GenerationsError(ValueError):
    """A bad generations or evaluation-data file; the message names file, line/row and field."""


@dataclass
class Problem:
    """One evaluation problem: what to ask, what is right, and the responses collected for it."""

    data_source: str
    index: str
    ground_truth: str | None = None
    prompt: Any = None
    extra_info: dict | None = None
    responses: list[str] = field(default_factory=list)
    where: str = ""  # file:line of the first mention, for error messages

    @property
    def key(self) -> tuple[str, str]:
        return (self.data_source, self.index)


def _line_problem(obj: Any, where: str) -> tuple[Problem, list[str]]:
    if not isinstance(obj, dict):
        raise GenerationsError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    ds, idx = obj.get("data_source"), obj.get("index")
    if not isinstance(ds, str) or not ds:
        raise GenerationsError(f"{where}: field 'data_source' missing or not a non-empty string")
    if idx is None or isinstance(idx, (bool, list, dict, float)):
        raise GenerationsError(f"{where}: field 'index' missing or not an int/string (got {idx!r})")
    if "responses" in obj:
        responses = obj["responses"]
        if not isinstance(responses, list) or not all(isinstance(r, str) for r in responses):
            raise GenerationsError(f"{where}: field 'responses' must be a list of strings")
    elif "response" in obj:
        if not isinstance(obj["response"], str):
            raise GenerationsError(f"{where}: field 'response' must be a string")
        responses = [obj["response"]]
    else:
        raise GenerationsError(f"{where}: needs 'responses' (list of strings) or 'response' (string)")
    gt = obj.get("ground_truth")
    if gt is not None and not isinstance(gt, (str, int)):
        raise GenerationsError(f"{where}: field 'ground_truth' must be a string, got {type(gt).__name__}")
    extra = obj.get("extra_info")
    if extra is not None and not isinstance(extra, dict):
        raise GenerationsError(f"{where}: field 'extra_info' must be an object")
    problem = Problem(ds, str(idx), None if gt is None else str(gt), obj.get("prompt"), extra, [], where)
    return problem, responses


def read_generations(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Problem]:
    """Problems with their responses, in order of first appearance; inconsistent lines raise."""
    files = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    problems: dict[tuple[str, str], Problem] = {}
    for path in files:
        name = os.fspath(path)
        if not os.path.exists(name):
            raise FileNotFoundError(f"generations file not found: {name}")
        for at, obj in iter_jsonl(name):
            where = f"{name} {at}"
            if isinstance(obj, BadLine):
                raise GenerationsError(f"{where}: {obj.message}")
            line, responses = _line_problem(obj, where)
            known = problems.get(line.key)
            if known is None:
                problems[line.key] = known = line
            elif line.ground_truth is not None:
                if known.ground_truth is None:
                    known.ground_truth = line.ground_truth
                elif known.ground_truth != line.ground_truth:
                    raise GenerationsError(f"{where}: ground_truth {line.ground_truth!r} differs from "
                                           f"{known.ground_truth!r} given at {known.where} for {line.key}")
            known.responses.extend(responses)
    if not problems:
        raise GenerationsError(f"no generations in {', '.join(map(os.fspath, files))}")
    return list(problems.values())


def load_eval_data(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Problem]:
    """Problems (no responses) from verl parquet/json/jsonl rows: ``data_source``, ``prompt``,
    ``reward_model.ground_truth`` and ``extra_info.index`` per row; duplicates and gaps raise naming the row."""
    files = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    out: dict[tuple[str, str], Problem] = {}
    for path in files:
        name = os.fspath(path)
        for at, row in iter_file(name):
            if isinstance(row, BadLine):
                raise GenerationsError(f"{name} {at}: {row.message}")
            problem = _data_problem(row, f"{name} {at}")
            if problem.key in out:
                raise GenerationsError(f"{problem.where}: duplicate (data_source, extra_info.index) {problem.key}, "
                                       f"first at {out[problem.key].where}")
            out[problem.key] = problem
    if not out:
        raise GenerationsError(f"no rows in {', '.join(map(os.fspath, files))}")
    return list(out.values())


def _data_problem(row: Any, where: str) -> Problem:
    if not isinstance(row, dict):
        raise GenerationsError(f"{where}: expected an object")
    ds = row.get("data_source")
    if not isinstance(ds, str) or not ds:
        raise GenerationsError(f"{where}: field 'data_source' missing")
    rm = row.get("reward_model")
    if not isinstance(rm, dict) or rm.get("ground_truth") is None:
        raise GenerationsError(f"{where}: field 'reward_model.ground_truth' missing")
    info = row.get("extra_info")
    if not isinstance(info, dict) or info.get("index") is None:
        raise GenerationsError(f"{where}: field 'extra_info.index' missing (needed to match generations)")
    prompt = row.get("prompt")
    if prompt is None:
        raise GenerationsError(f"{where}: field 'prompt' missing")
    return Problem(ds, str(info["index"]), str(rm["ground_truth"]), prompt, info, [], where)


def attach_ground_truth(problems: list[Problem], data: list[Problem] | None) -> list[Problem]:
    """Fill ground truths (and extra_info) from ``data``; every problem must end with a ground truth."""
    by_key = {p.key: p for p in data or []}
    for p in problems:
        ref = by_key.get(p.key)
        if ref is not None:
            if p.ground_truth is not None and p.ground_truth != ref.ground_truth:
                raise GenerationsError(f"{p.where}: ground_truth {p.ground_truth!r} differs from the evaluation "
                                       f"data's {ref.ground_truth!r} ({ref.where})")
            p.ground_truth = ref.ground_truth
            p.extra_info = p.extra_info or ref.extra_info
        elif p.ground_truth is None:
            hint = " and no evaluation data was given (--data)" if not data else " and the evaluation data lacks it"
            raise GenerationsError(f"{p.where}: problem {p.key} has no ground_truth{hint}")
    return problems


def write_generations(problems: Iterable[Problem], path: str | os.PathLike) -> None:
    """The grouped form, one line per problem (written to a temp file, then renamed)."""
    tmp = os.fspath(path) + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for p in problems:
            f.write(json.dumps({"data_source": p.data_source, "index": p.index, "ground_truth": p.ground_truth,
                                "prompt": p.prompt, "responses": p.responses}, ensure_ascii=False) + "\n")
    os.replace(tmp, path)

"""Shared pieces of the data-preparation scripts: reading sources, prompt templates, verl rows, bad-row reports.

A source is either a Hugging Face hub dataset (``datasets.load_dataset(name, config, split=...)``) or a local
json / jsonl / parquet file. Every script writes verl's RL row format::

    data_source, prompt=[{"role": "user", "content": <template(problem)>}], ability,
    reward_model={"style": "rule", "ground_truth": <answer, exact string>}, extra_info={"index": ..., ...}

``extra_info.index`` is the row's 0-based position in its source, so ids do not move when other rows are dropped.
Rows that cannot be used are reported with file, row and reason (``Report``) and counted; ``--strict`` turns any
bad row into a failure.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_ext.adapters.row_files import BadLine, iter_file

logger = logging.getLogger("data_preprocess")

# verl's own examples append this to the problem (examples/data_preprocess/math_dataset.py).
BOXED_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."
# The DAPO-Math-17k prompt (the dataset ships its problems wrapped in exactly this text).
DAPO_PREFIX = ("Solve the following math problem step by step. The last line of your response should be of the "
               "form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n")
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'
TEMPLATES = ("boxed", "dapo", "raw")
MAX_LISTED_BAD_ROWS = 1000  # the report lists this many bad rows; the counts are always complete


def apply_template(problem: str, template: str) -> str:
    """The user message for ``problem``: ``boxed`` (verl's suffix), ``dapo`` (DAPO's Answer: wording) or ``raw``."""
    if template == "boxed":
        return f"{problem} {BOXED_INSTRUCTION}"
    if template == "dapo":
        return f"{DAPO_PREFIX}{problem}{DAPO_SUFFIX}"
    if template == "raw":
        return problem
    raise ValueError(f"unknown template {template!r}; expected one of {TEMPLATES}")


def strip_dapo_template(text: str) -> tuple[str, bool]:
    """The bare problem inside DAPO's prompt wording (blank lines around it may vary), and whether it was found."""
    head, tail = DAPO_PREFIX.rstrip(), DAPO_SUFFIX.lstrip()
    body = text.strip()
    if body.startswith(head) and body.endswith(tail) and len(body) > len(head) + len(tail):
        return body[len(head): len(body) - len(tail)].strip(), True
    return text, False


def verl_row(*, data_source: str, content: str, answer: str, ability: str, extra_info: Mapping[str, Any]) -> dict:
    """One RL row as verl's ``RLHFDataset`` reads it."""
    return {"data_source": data_source, "prompt": [{"role": "user", "content": content}], "ability": ability,
            "reward_model": {"style": "rule", "ground_truth": answer}, "extra_info": dict(extra_info)}


# ------------------------------------------------------------------------------------------------ reading
class BadRow(ValueError):
    """A row that cannot be converted; the message is the reason."""


@dataclass(frozen=True)
class Source:
    """Where rows come from: a local file, or a hub dataset (name, config, split)."""

    local: str | None = None
    hub: str | None = None
    config: str | None = None
    split: str | None = None

    @property
    def label(self) -> str:
        if self.local:
            return self.local
        parts = [self.hub or "?"] + ([self.config] if self.config else []) + ([self.split] if self.split else [])
        return ":".join(parts)


def iter_source(source: Source) -> Iterator[tuple[int, Any]]:
    """(0-based row number, row) for every row of the source, in order; a jsonl line that is not JSON comes as a
    ``BadLine`` (reported by the caller like any bad row)."""
    if source.local:
        yield from enumerate(read_local(source.local))
        return
    if not source.hub:
        raise ValueError("a source needs a local file or a hub dataset name")
    import datasets  # the hub path: needs network access (or a populated HF cache)

    ds = datasets.load_dataset(source.hub, source.config, split=source.split)
    yield from enumerate(ds)


def read_local(path: str) -> Iterator[Any]:
    """Rows of a parquet (streamed in batches: the raw DAPO-Math-17k has 1.79M rows), json or jsonl file."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"data file not found: {path}")
    if path.lower().endswith(".parquet"):
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(path).iter_batches(batch_size=4096):
            yield from batch.to_pylist()
        return
    for _where, row in iter_file(path):  # the project's reader for json arrays and JSON lines
        yield row


def check_row(row: Any) -> dict:
    """The row as a dict, or ``BadRow`` (a line that is not JSON, or not an object)."""
    if isinstance(row, BadLine):
        raise BadRow(row.message)
    if not isinstance(row, dict):
        raise BadRow(f"row is {type(row).__name__}, expected an object")
    return row


def first_field(row: Mapping[str, Any], names: Sequence[str]) -> tuple[str | None, Any]:
    """The first of ``names`` present in ``row`` with a value that is not None, and that value."""
    for name in names:
        if name in row and row[name] is not None:
            return name, row[name]
    return None, None


def answer_string(value: Any, field_name: str) -> tuple[str, list[str] | None]:
    """The exact ground-truth string, and the original list when the source holds several answers.

    Strings are kept byte for byte (``"025"`` stays ``"025"``); integers become their decimal text; a list of
    answers (OlympiadBench's ``final_answer``) is joined with ``", "`` and also returned as the list.
    """
    if isinstance(value, str):
        if not value.strip():
            raise BadRow(f"field {field_name!r} is empty")
        return value, None
    if isinstance(value, bool):
        raise BadRow(f"field {field_name!r} is a boolean ({value!r}), not an answer")
    if isinstance(value, int):
        return str(value), None
    if isinstance(value, float):
        if not math.isfinite(value):
            raise BadRow(f"field {field_name!r} is not a finite number ({value!r})")
        return repr(value), None
    if isinstance(value, (list, tuple)) or type(value).__name__ == "ndarray":
        items = [answer_string(v, field_name)[0] for v in list(value)]
        if not items:
            raise BadRow(f"field {field_name!r} is an empty list")
        return (items[0], None) if len(items) == 1 else (", ".join(items), items)
    raise BadRow(f"field {field_name!r} has unsupported type {type(value).__name__}")


def text_field(row: Mapping[str, Any], names: Sequence[str], what: str) -> tuple[str, str]:
    """A non-empty string from the first present field of ``names``; ``BadRow`` otherwise."""
    name, value = first_field(row, names)
    if name is None:
        raise BadRow(f"no {what} field (looked for {', '.join(names)})")
    if not isinstance(value, str):
        raise BadRow(f"field {name!r} is {type(value).__name__}, expected a string")
    if not value.strip():
        raise BadRow(f"field {name!r} is empty")
    return name, value


# ------------------------------------------------------------------------------------------------ reporting
@dataclass
class Report:
    """What a conversion read, kept and dropped; bad rows listed with file, row and reason."""

    source: str
    rows_read: int = 0
    rows_written: int = 0
    bad_rows: list[dict] = field(default_factory=list)
    bad_count: int = 0
    dropped: Counter = field(default_factory=Counter)
    notes: dict[str, Any] = field(default_factory=dict)

    def bad(self, row: int, reason: str) -> None:
        self.bad_count += 1
        if len(self.bad_rows) < MAX_LISTED_BAD_ROWS:
            self.bad_rows.append({"file": self.source, "row": row, "reason": reason})
        if self.bad_count <= 20:
            logger.warning("%s row %d: %s (row skipped)", self.source, row, reason)

    def drop(self, reason: str) -> None:
        self.dropped[reason] += 1

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "rows_read": self.rows_read, "rows_written": self.rows_written,
                "bad_count": self.bad_count, "dropped": dict(self.dropped), "bad_rows": self.bad_rows,
                "bad_rows_listed": len(self.bad_rows), **self.notes}

    def summary(self) -> str:
        drops = ", ".join(f"{k} {v}" for k, v in sorted(self.dropped.items())) or "none"
        return (f"{self.source}: read {self.rows_read}, wrote {self.rows_written}, bad {self.bad_count}, "
                f"dropped: {drops}")


def write_report(report: Report, out_path: Path) -> Path:
    """``<name>.report.json`` next to ``out_path`` (written also when ``--strict`` refuses the data)."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    report_path = out_path.with_name(out_path.stem + ".report.json")
    report_path.write_text(json.dumps(report.as_dict(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return report_path


def write_rows(rows: list[dict], out_path: Path, report: Report) -> None:
    """Parquet for verl plus its report; no usable rows at all is an error (exit with the summary)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        write_report(report, out_path)
        raise SystemExit(f"{report.source}: no usable rows to write to {out_path} ({report.summary()})")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_suffix(out_path.suffix + ".tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    os.replace(tmp, out_path)
    report.rows_written = len(rows)
    write_report(report, out_path)


def finish(report: Report, strict: bool, out_path: Path) -> int:
    """Exit status: 0, or 2 when ``strict`` and there were bad rows (then only the report is written, not the
    data). Summary to stderr (this is a CLI)."""
    sys.stderr.write(report.summary() + "\n")
    if report.bad_count and strict:
        path = write_report(report, out_path)
        sys.stderr.write(f"--strict: {report.bad_count} bad row(s), nothing written; file/row/reason in {path}\n")
        return 2
    return 0


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

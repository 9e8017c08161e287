"""Reading data files row by row: parquet, a JSON array, or JSON lines (``.json`` holding lines works too).

A jsonl line that is not JSON is yielded as a ``BadLine`` instead of stopping the read, so the caller reports it
together with every other bad row.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


class RowError(ValueError):
    """One or more bad rows (or a file that cannot be parsed); the message names file, row and field."""


@dataclass(frozen=True)
class BadLine:
    """A jsonl line that is not JSON: reported with the other row errors instead of stopping the read."""

    message: str


def iter_file(path: str) -> Iterator[tuple[str, Any]]:
    if not os.path.exists(path):
        raise FileNotFoundError(f"data file not found: {path}")
    lower = path.lower()
    if lower.endswith(".parquet"):
        import pyarrow.parquet as pq

        for i, row in enumerate(pq.read_table(path).to_pylist()):
            yield f"row {i}", row
    elif lower.endswith(".jsonl"):
        yield from iter_jsonl(path)
    elif lower.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            head = f.read(1 << 12).lstrip()
        if head.startswith("["):
            with open(path, encoding="utf-8") as f:
                try:
                    data = json.load(f)
                except json.JSONDecodeError as err:
                    raise RowError(f"{path}: invalid JSON: {err}") from None
            for i, row in enumerate(data):
                yield f"row {i}", row
        else:
            yield from iter_jsonl(path)
    else:
        raise ValueError(f"unsupported data file {path}: expected .parquet, .json or .jsonl")


def iter_jsonl(path: str) -> Iterator[tuple[str, Any]]:
    with open(path, encoding="utf-8") as f:
        i = 0
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row: Any = json.loads(line)
            except json.JSONDecodeError as err:
                row = BadLine(f"invalid JSON: {err}")
            yield f"row {i} (line {line_no})", row
            i += 1

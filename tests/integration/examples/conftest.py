"""Shared setup for the examples' tests: the data-preparation scripts on ``sys.path`` (they are scripts, run as
``python examples/data_preprocess/x.py``) and the real benchmark files.

Helpers are fixtures: with ``--import-mode=importlib`` test modules cannot import each other or this file.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PREP_DIR = REPO / "examples" / "data_preprocess"
# The project's shared/ sits beside the checkout (../shared), in CI too; VERL_EXT_SHARED overrides.
SHARED = Path(os.environ.get("VERL_EXT_SHARED") or REPO.parent / "shared")

if str(PREP_DIR) not in sys.path:
    sys.path.insert(0, str(PREP_DIR))


@pytest.fixture(scope="session")
def bench_file():
    """``bench_file(name)`` -> the real ``<name>.jsonl`` (skips when shared/ is absent)."""

    def get(name: str) -> Path:
        path = SHARED / "data" / "benchmarks" / f"{name}.jsonl"
        if not path.exists():
            pytest.skip(f"benchmark file {path} not present")
        return path

    return get


@pytest.fixture
def write_jsonl(tmp_path):
    def write(rows: list, name: str) -> Path:
        path = tmp_path / name
        path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
        return path

    return write


@pytest.fixture(scope="session")
def repo_dir() -> Path:
    return REPO

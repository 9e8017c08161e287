"""Shared fixtures for the adapter tests: a locally trained tiny tokenizer and small verl-format data files.

Helpers are fixtures (not importable functions): with ``--import-mode=importlib`` and no ``__init__.py``, test
modules cannot import each other or this file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

# The project's shared/ sits beside the checkout (../shared), in CI too; VERL_EXT_SHARED overrides.
SHARED = Path(os.environ.get("VERL_EXT_SHARED") or Path(__file__).resolve().parents[3].parent / "shared")
MATH500 = SHARED / "data" / "benchmarks" / "math500.jsonl"


def _verl_rows(n: int, source: str = "arith", start: int = 0) -> list[dict]:
    return [
        {
            "data_source": source,
            "prompt": [{"role": "user", "content": f"What is {i} + {i % 7}?"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(i + i % 7)},
            "extra_info": {"index": i, "split": "train"},
        }
        for i in range(start, start + n)
    ]


@pytest.fixture
def make_rows():
    """``make_rows(n)``: rows in verl's RL format; ``extra_info.index`` = row number (= a fresh pool's ids)."""
    return _verl_rows


@pytest.fixture
def write_parquet(tmp_path):
    def write(rows: list[dict], name: str = "train.parquet") -> Path:
        import pandas as pd

        path = tmp_path / name
        pd.DataFrame(rows).to_parquet(path, index=False)
        return path

    return write


@pytest.fixture
def write_jsonl(tmp_path):
    def write(rows: list, name: str = "train.jsonl") -> Path:
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path

    return write


@pytest.fixture
def train_parquet(write_parquet):
    """40 verl-format rows in ``train.parquet``."""
    return write_parquet(_verl_rows(40))


@pytest.fixture
def math500() -> Path:
    if not MATH500.exists():
        pytest.skip(f"{MATH500} not present")
    return MATH500


@pytest.fixture(scope="session")
def tiny_tokenizer(tmp_path_factory):
    """A byte-level BPE with ChatML trained locally in about a second (no downloads)."""
    from verl_ext.cpu.assets import AssetConfig, train_tokenizer

    return train_tokenizer(AssetConfig(), tmp_path_factory.mktemp("tok"))

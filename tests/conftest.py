"""Fixtures shared by every test directory.

``tiny_assets``: the offline tiny model + tokenizer + arithmetic parquet (``verl_ext.cpu.assets``), built once per
machine (about 3 minutes on 2 cores) and reused while the build settings' digest matches. Location:
``$VERL_EXT_ASSETS`` or ``<repo>/.assets/tiny`` (git-ignored). A file lock makes parallel pytest sessions wait
for one build instead of racing two.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def assets_dir() -> Path:
    return Path(os.environ.get("VERL_EXT_ASSETS") or REPO_ROOT / ".assets" / "tiny").expanduser().resolve()


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def tiny_assets() -> Path:
    """Directory with ``model/``, ``data/{train,val}.parquet`` and ``manifest.json`` (built on first use)."""
    from verl_ext.cpu.assets import build_assets

    path = build_assets(assets_dir())  # takes a file lock: parallel sessions wait for one build
    for needed in ("manifest.json", "model/config.json", "data/train.parquet", "data/val.parquet"):
        assert (path / needed).exists(), f"tiny assets at {path} lack {needed}: delete the directory to rebuild"
    return path

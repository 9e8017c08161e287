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


# Rough seconds each e2e module takes on this 2-core machine kind (module wall time, no asset build). They only
# order the suite, longest first, so that the two xdist workers finish together: with `--no-loadscope-reorder`
# xdist hands modules out in collection order, two ahead per worker, and its default order (most tests first)
# left one worker idle for the last 390 s, running the long e2e modules last. A module missing here counts as the
# longest. (Replaying xdist's hand-out on one CI run's test times with +-15 % noise: this order, the measured
# seconds' order and the best of 5,040 orders of the long modules all end the suite at ~1,150 s on average; one
# that handed out the supervision module, since merged into test_interrupted_launcher.py, last of the long ones,
# 1,260 s.)
E2E_SECONDS = {
    "test_ar3po_cpu.py": 220, "test_interrupted_launcher.py": 297, "test_heapa_cpu.py": 126,
    "test_async_cpu.py": 145, "test_readme_cpu_walk.py": 149, "test_grpo_cpu.py": 55,
    "test_pinned_run.py": 119, "test_multinode_cpu.py": 115, "test_hive_cpu.py": 63, "test_device_smoke_dry.py": 48,
}


def _suite_rank(modules: dict[str, list]) -> dict[str, tuple]:
    """Module -> sort key: the longest e2e module first (its worker builds the tiny assets, ~3 min on both cores,
    then trains), then every module that needs no assets (the other worker runs them meanwhile), then the other
    e2e modules longest first, then the short modules that read the assets."""
    def e2e_cost(path: str) -> float:
        return E2E_SECONDS.get(Path(path).name, float("inf"))

    e2e = sorted((m for m in modules if "/e2e/" in f"/{m}"), key=lambda m: -e2e_cost(m))
    rank: dict[str, tuple] = {}
    for i, path in enumerate(e2e):
        rank[path] = (0, 0) if i == 0 else (2, i)
    for path, items in modules.items():
        if path not in rank:
            rank[path] = (3, 0) if any("tiny_assets" in item.fixturenames for item in items) else (1, 0)
    return rank


def pytest_collection_modifyitems(session, config, items):
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    rank = _suite_rank(modules)
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])  # stable: a module's tests keep their order

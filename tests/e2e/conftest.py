"""Fixtures for the end-to-end tests (real ``verl.trainer.main_ppo`` runs on the CPU backend, through Ray).

Helpers live in ``_runner.py`` next to this file. With ``--import-mode=importlib`` and no ``__init__.py`` (verl's
wheel owns the ``tests`` package name), test modules cannot import siblings by package path, so this conftest
puts the directory on ``sys.path`` and serves the module as the ``e2e_runner`` fixture.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture(scope="session")
def e2e_runner():
    return importlib.import_module("_runner")

"""The device smoke test's carry bundle (scripts/device_smoke/build_bundle.py) fits what a lent machine takes.

A lent GPU machine takes at most 64 MiB carried in, the working tree included. With ``VERL_EXT_BUILD_BUNDLE=1``
this builds the bundle (downloads from PyPI, about 10 minutes on 2 cores: skipped when PyPI is unreachable);
otherwise it checks the one already built in ``.device_bundle/carry`` (skipped when there is none).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BUILD_BUNDLE = Path(__file__).resolve().parents[3] / "scripts" / "device_smoke" / "build_bundle.py"
HARD_LIMIT_MIB = 64.0  # the carry mechanism's limit: bundle + working tree


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def manifest(repo_root: Path) -> dict:
    carry = repo_root / ".device_bundle" / "carry"
    if os.environ.get("VERL_EXT_BUILD_BUNDLE") == "1":
        if not _pypi_reachable():
            pytest.skip("PyPI is unreachable: the bundle's wheels cannot be downloaded")
        subprocess.run([sys.executable, str(repo_root / "scripts" / "device_smoke" / "build_bundle.py")],
                       cwd=repo_root, timeout=3600, check=False)
    if not (carry / "manifest.json").exists():
        pytest.skip("no bundle built (python scripts/device_smoke/build_bundle.py, or VERL_EXT_BUILD_BUNDLE=1)")
    return json.loads((carry / "manifest.json").read_text())


@pytest.fixture(scope="module")
def working_tree_mib() -> float:
    """Measured now, not read from the manifest: the working tree changes with every commit after a build."""
    spec = importlib.util.spec_from_file_location("build_bundle", BUILD_BUNDLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.working_tree_bytes() / 2**20


def test_bundle_and_working_tree_fit_the_carry_limit(manifest, repo_root, working_tree_mib):
    sizes = manifest["sizes"]
    bundle = (repo_root / ".device_bundle" / "carry" / "bundle.tar.xz").stat().st_size / 2**20
    assert abs(bundle - sizes["bundle_xz_mib"]) < 0.05, "manifest does not describe the bundle on disk"
    total = sizes["bundle_xz_mib"] + working_tree_mib
    print(f"bundle {sizes['bundle_xz_mib']} MiB + working tree {working_tree_mib:.2f} MiB = {total:.1f} MiB")
    assert total <= HARD_LIMIT_MIB, f"{total:.1f} MiB exceeds the {HARD_LIMIT_MIB} MiB a lent machine takes"


def test_bundle_holds_no_pruned_parts(manifest):
    sizes = manifest["sizes"]["per_distribution"]
    assert "torch" not in sizes and "transformers" not in sizes, "torch/transformers are the device's own"
    assert {"verl", "ray", "pyarrow"} <= set(sizes)
    assert "ray/jars" in manifest["prune"] and "ray/rllib" in manifest["prune"]

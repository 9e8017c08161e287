"""scripts/device_smoke/run_on_device.sh in dry mode on this CPU machine (``DEVICE_DRY_RUN=1``).

A small bundle of the same layout (``bundle.json``, an empty ``site/``, the tiny assets) stands in for the real
one (scripts/device_smoke/build_bundle.py; its compiled modules are for the lent machine's Python 3.12, so a dry
run imports from this venv instead and says so). The dry run unpacks it, checks the device-provided packages,
``import verl`` and ``ray.init`` (one short local Ray cluster), composes each trainer run's exact device overrides
with Hydra (nothing trains), evaluates the bundled model with ``--backend hf`` on CPU and runs the packed-vs-padded
sdpa check at tiny width; every check must pass and the summary table must list them all.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DEVICE_PROVIDED = ["torch", "transformers", "tokenizers", "numpy"]


def _mini_bundle(tmp: Path, assets: Path) -> Path:
    (tmp / "stage" / "site").mkdir(parents=True)
    (tmp / "stage" / "bundle.json").write_text(json.dumps({"python_version": "3.12",
                                                            "device_provided": DEVICE_PROVIDED}))
    bundle = tmp / "bundle.tar.xz"
    with tarfile.open(bundle, "w:xz") as tar:
        tar.add(tmp / "stage" / "site", arcname="site")
        tar.add(tmp / "stage" / "bundle.json", arcname="bundle.json")
        tar.add(assets / "model", arcname="assets/model")
        tar.add(assets / "data", arcname="assets/data")
    return bundle


def test_dry_run_passes_every_check(tmp_path, tiny_assets, repo_root):
    bundle = _mini_bundle(tmp_path, tiny_assets)
    out = tmp_path / "out"
    env = {**os.environ, "DEVICE_DRY_RUN": "1", "OUT": str(out)}
    res = subprocess.run(["bash", str(repo_root / "scripts" / "device_smoke" / "run_on_device.sh"), str(bundle)],
                         cwd=repo_root, env=env, capture_output=True, text=True, timeout=900,
                         start_new_session=True)
    summary = (out / "summary.md").read_text() if (out / "summary.md").exists() else ""
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(out.glob("*.log")))
    assert res.returncode == 0, f"{res.stderr[-4000:]}\n{summary}\n{logs}"
    for check in ("unpack", "device_packages", "import_verl_ray_init", "heapa_dapo", "hive_grpo", "heapa_ar3po",
                  "eval:model", "sdpa_packed_vs_padded"):
        assert f"| {check} | 0 |" in summary, summary
    assert "DRY RUN" in summary
    sdpa = json.loads((out / "sdpa.json").read_text())
    assert sdpa["ok"] and sdpa["max_abs_logprob_diff"] < 1e-4
    for method in ("heapa_dapo", "hive_grpo", "heapa_ar3po"):
        composed = (out / f"{method}.log").read_text()
        assert "name: hf" in composed and "attn_implementation: sdpa" in composed

"""A non-editable install carries every preset: build the wheel, install it into a fresh virtual environment and
compose each ``method=`` x ``platform=`` preset from the installed package, and through the installed entry point.

The wheel is built the way ``pip install .`` builds it (build isolation: a fresh setuptools from the index; the
environment's own setuptools happened to include the presets where a fresh one did not) from a copy of the
sources, so the checkout is not touched. Kept fast: installed with ``--no-deps``; the new environment borrows this
one's site-packages (verl, hydra, torch) by a plain path line, which leaves out this checkout's editable install,
so ``recipe`` and ``verl_ext`` can only come from the wheel.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
CONFIG = REPO / "recipe" / "heapa" / "config"

COMPOSE = r"""
import json, sys
from importlib import resources
from hydra import compose, initialize_config_dir
import recipe, verl_ext
config = resources.files("recipe.heapa") / "config"
methods = sorted(p.name[:-5] for p in (config / "method").iterdir() if p.name.endswith(".yaml"))
platforms = sorted(p.name[:-5] for p in (config / "platform").iterdir() if p.name.endswith(".yaml"))
composed = []
with initialize_config_dir(config_dir=str(config), version_base=None):
    for m in methods:
        for p in platforms:
            cfg = compose(config_name="heapa_trainer", overrides=[f"method={m}", f"platform={p}"])
            assert cfg.heapa.platform == p and cfg.reward.reward_manager.name == "heapa"
            composed.append(f"{m}/{p}")
print(json.dumps({"recipe": recipe.__file__, "verl_ext": verl_ext.__file__, "composed": composed}))
"""


def _copy_sources(dest: Path) -> None:
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("setup.py", "pyproject.toml", "README.md"):
        if (REPO / name).exists():
            shutil.copy2(REPO / name, dest / name)
    for package in ("verl_ext", "recipe"):
        shutil.copytree(REPO / package, dest / package, ignore=skip)


def _run(cmd: list, cwd: Path, timeout: float = 300) -> str:
    out = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def test_the_wheel_carries_every_preset_and_they_compose(tmp_path):
    times = {}
    start = time.perf_counter()
    src = tmp_path / "src"
    src.mkdir()
    _copy_sources(src)
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp_path / "dist", src]
    isolated = subprocess.run([str(c) for c in build], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    if isolated.returncode != 0:  # no index to fetch the build backend from (offline): this environment's one
        print(f"isolated build failed, building with this environment's setuptools:\n{isolated.stderr[-800:]}")
        _run(build[:4] + ["--no-build-isolation"] + build[4:], cwd=tmp_path)
    wheel = next((tmp_path / "dist").glob("verl_heapa-*.whl"))
    times["build"] = time.perf_counter() - start
    names = set(zipfile.ZipFile(wheel).namelist())
    presets = sorted(str(p.relative_to(REPO)) for p in CONFIG.rglob("*.yaml"))
    assert presets and not set(presets) - names, f"missing from the wheel: {sorted(set(presets) - names)}"
    assert any(n.startswith("verl_ext/sim/scenarios/") for n in names)

    start = time.perf_counter()
    venv = tmp_path / "venv"
    _run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", venv], cwd=tmp_path)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "-q", wheel],
         cwd=tmp_path)
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path).strip())
    # this environment's packages, as a plain path: its .pth files (the editable install) are not processed
    (site / "zz_borrowed_site_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    times["install"] = time.perf_counter() - start

    start = time.perf_counter()
    result = json.loads(_run([python, "-c", COMPOSE], cwd=tmp_path).strip().splitlines()[-1])
    assert result["recipe"].startswith(str(site)) and result["verl_ext"].startswith(str(site))
    expected = {f"{m.stem}/{p.stem}" for m in (CONFIG / "method").glob("*.yaml")
                for p in (CONFIG / "platform").glob("*.yaml")}
    assert set(result["composed"]) == expected
    # the installed entry point finds its config too (Hydra's own composition, no training)
    shown = _run([python, "-m", "recipe.heapa.main_heapa", "method=heapa_dapo", "platform=cpu", "--cfg", "job",
                  "--package", "heapa"], cwd=tmp_path)
    assert "platform: cpu" in shown and "boundary" in shown
    times["compose"] = time.perf_counter() - start
    print("wheel test: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()) + f"; {len(expected)} presets")

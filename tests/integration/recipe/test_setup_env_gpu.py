"""scripts/setup_env.sh on a GPU node, without one: a stand-in ``nvidia-smi`` reports the driver's CUDA version.

The script must stop before installing anything when the driver is older than the GPU set's CUDA (13.0), naming
the versions and the overrides, and otherwise install with a current pip and the GPU constraints file
(``SETUP_DRY_RUN=1`` prints the commands instead of running them).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
NVIDIA_SMI = """#!/usr/bin/env bash
if [[ "$*" == *--query-gpu=driver_version* ]]; then echo "{driver}"; exit 0; fi
if [[ "$1" == -L ]]; then echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"; exit 0; fi
echo "| NVIDIA-SMI {driver}   Driver Version: {driver}   CUDA Version: {cuda}     |"
"""


def setup_env(tmp_path: Path, cuda: str, driver: str, **env: str) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(NVIDIA_SMI.format(cuda=cuda, driver=driver))
    smi.chmod(0o755)
    run_env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", VENV=str(tmp_path / "venv"),
                   PYTHON=sys.executable, **env)
    run_env.pop("VERL_EXT_DEVICE", None)
    return subprocess.run(["bash", str(REPO / "scripts" / "setup_env.sh")], env=run_env, capture_output=True,
                          text=True, timeout=120)


def would_run(out: subprocess.CompletedProcess) -> list[list[str]]:
    return [shlex.split(line.split("would run:", 1)[1]) for line in out.stdout.splitlines() if "would run:" in line]


def test_an_old_driver_stops_before_anything_is_installed(tmp_path):
    out = setup_env(tmp_path, cuda="12.4", driver="550.54.15")
    assert out.returncode != 0
    for needed in ("550.54.15", "CUDA 12.4", "CUDA 13.0", "torch 2.11.0", "TORCH_INDEX_URL", "VERL_EXT_CUDA_CHECK=0"):
        assert needed in out.stderr, (needed, out.stderr)
    assert not (tmp_path / "venv").exists()


def test_a_current_driver_installs_the_locked_set_with_a_current_pip(tmp_path):
    out = setup_env(tmp_path, cuda="13.0", driver="580.65.06", SETUP_DRY_RUN="1")
    assert out.returncode == 0, out.stderr
    commands = would_run(out)
    assert commands[0][1:] == ["-m", "pip", "install", "--upgrade", "pip>=25.1"]
    install = commands[1]
    assert install[install.index("-e") + 1] == f"{REPO}[test,gpu]"
    assert install[install.index("-c") + 1] == str(REPO / "scripts" / "constraints-gpu.txt")
    assert len(commands) == 2  # no flash-attn build unless asked
    assert not (tmp_path / "venv").exists()


def test_flash_attn_is_built_only_when_asked(tmp_path):
    out = setup_env(tmp_path, cuda="13.1", driver="590.1", SETUP_DRY_RUN="1", FLASH_ATTN="1")
    assert out.returncode == 0, out.stderr
    assert would_run(out)[-1][1:] == ["-m", "pip", "install", "flash-attn", "--no-build-isolation"]


@pytest.mark.parametrize("env", [{"TORCH_INDEX_URL": "https://example.invalid/whl/cu128"},
                                 {"VERL_EXT_CUDA_CHECK": "0"}])
def test_the_overrides_named_in_the_message_go_past_the_check(tmp_path, env):
    out = setup_env(tmp_path, cuda="12.4", driver="550.54.15", SETUP_DRY_RUN="1", **env)
    assert out.returncode == 0, out.stderr
    if "TORCH_INDEX_URL" in env:
        torch, install = would_run(out)[1:3]
        assert torch[-3:] == ["--extra-index-url", "https://example.invalid/whl/cu128", "torch==2.11.0"]
        assert install[install.index("-c") + 1].endswith("constraints-gpu-without-cuda.txt")

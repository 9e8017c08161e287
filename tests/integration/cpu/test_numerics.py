"""The pinned kernels (verl_ext/cpu/numerics.py) give the same floats whatever instruction set MKL may use: a
child limited to AVX2 computes bit for bit what one free to use this CPU's widest computes."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

from verl_ext.cpu import ENV_DEFAULTS
from verl_ext.cpu.numerics import PINNED_ENV, X86, cpu_name, pinned, pinned_env

# a small MLP trained a few steps: matrix products (MKL), elementwise kernels and reductions (ATen)
PROGRAM = """
import hashlib, torch
torch.manual_seed(0); torch.set_num_threads(2)
net = torch.nn.Sequential(torch.nn.Linear(64, 192), torch.nn.GELU(), torch.nn.Linear(192, 64))
opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
x = torch.randn(256, 64)
for _ in range(20):
    loss = torch.nn.functional.log_softmax(net(x), -1).mean()
    loss.backward(); opt.step(); opt.zero_grad()
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in net.parameters())).hexdigest()
print(torch.backends.cpu.get_cpu_capability(), digest)
"""


def _run(env: dict[str, str]) -> tuple[str, str]:
    env = {**env, "GOMP_SPINCOUNT": "1000"}  # two threads beside the suite's other worker (verl_ext/cpu/assets.py)
    out = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, check=True)
    capability, digest = out.stdout.split()
    return capability, digest


@pytest.mark.skipif(not X86, reason="the pinned kernels are x86's (MKL, AVX2)")
def test_pinned_results_do_not_depend_on_the_instruction_set():
    free = _run(pinned_env())
    limited = _run({**pinned_env(), "MKL_ENABLE_INSTRUCTIONS": "AVX2"})
    oldest = _run({**pinned_env(), "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"})
    assert free[0] == "AVX2"  # ATen's kernels pinned too
    assert free == limited == oldest


def test_the_cpu_platform_starts_its_processes_pinned():
    assert all(ENV_DEFAULTS[key] == value for key, value in PINNED_ENV.items())
    assert pinned(PINNED_ENV) and (not X86 or not pinned({"MKL_CBWR": "COMPATIBLE"}))
    assert pinned(pinned_env({"PATH": "/bin"}))


def test_cpu_name_reads_the_first_processor():
    info = Path("/proc/cpuinfo")
    if not info.exists():
        assert cpu_name() == platform.machine()
        return
    block = info.read_text().split("\n\n")[0]
    vendor = next(line.partition(":")[2].strip() for line in block.splitlines() if line.startswith("vendor_id"))
    assert cpu_name().startswith(f"{vendor} family ") and " model " in cpu_name()

"""Float results that do not depend on which x86 CPU computes them.

torch's CPU kernels are chosen per machine: ATen dispatches its vectorized kernels by the CPU's widest instruction
set (AVX-512 on both the AMD EPYC and the Intel Xeon machines this project ran on), and MKL, which computes its
float32 matrix products, picks a code path per CPU vendor and model. The same build of the tiny model then ends
with different weights on an EPYC and on a Xeon (greedy validation accuracy 0.475 against 0.465 for ``tiny``), and
a seeded CPU run samples different responses: a golden trace, or a claim made on seeds, holds only on the CPU it
was made on.

Pinned here: MKL's ``COMPATIBLE`` branch (the one branch MKL reproduces on Intel and non-Intel CPUs alike) and
ATen's AVX2 kernels (every x86 CPU of the last decade has AVX2 and FMA, and IEEE arithmetic is exact per
instruction). Thread counts are pinned by the callers, because reductions split work by thread. Measured on the
tiny model (30 steps of forward, backward and AdamW, 2 threads): 0.55 s unpinned, 1.1 s pinned.

Not enough on every x86 CPU: an AMD EPYC of family 25, model 17 builds another ``tiny`` model pinned than the Intel
Xeon did (greedy 0.505 against 0.455), deterministically on each; which kernel differs is not found
(``docs/cpu_backend.md``), and the golden trace is kept per build.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from pathlib import Path

# x86 only: elsewhere torch has no MKL and names other capabilities, and nothing here is pinned.
X86 = platform.machine().lower() in ("x86_64", "amd64")
PINNED_ENV = {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "avx2"} if X86 else {}


def pinned(env: Mapping[str, str] | None = None) -> bool:
    """Whether a process started with ``env`` (default: this one's) computes with the pinned kernels. MKL and ATen
    read these once, when torch first uses them, so only a process started with them set is pinned."""
    env = os.environ if env is None else env
    return all(env.get(key) == value for key, value in PINNED_ENV.items())


def pinned_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with the pinned settings, for a child process."""
    return {**(os.environ if env is None else env), **PINNED_ENV}


def cpu_name() -> str:
    """This machine's CPU as the pinned results depend on it: vendor, family, model and model name (Linux's
    ``/proc/cpuinfo``; elsewhere the architecture alone)."""
    info = Path("/proc/cpuinfo")
    if not info.exists():
        return platform.machine()
    first = info.read_text().split("\n\n")[0]  # the first processor's block
    fields = {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in first.splitlines())}
    return (f"{fields.get('vendor_id', '?')} family {fields.get('cpu family', '?')} model {fields.get('model', '?')} "
            f"({fields.get('model name', '?')})")

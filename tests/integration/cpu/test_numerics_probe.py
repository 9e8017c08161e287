"""scripts/numerics_probe.py: its table is the same on two runs (it is worth diffing between machines only then)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _table(steps: str) -> list[str]:
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "numerics_probe.py"), "--steps", steps],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    return [line for line in out.stdout.splitlines() if line.startswith("| ") and "`" in line]


def test_the_probe_digests_every_stage_the_same_twice():
    first, second = _table("1,2"), _table("1,2")
    assert [row.split("|")[1].strip() for row in first] == [
        "tokenizer (tokenizer.json)", "initial weights", "one forward (logits)", "one backward (gradients)",
        "warm start, step 1 of 2500", "warm start, step 2 of 2500"]
    assert first == second
    assert len({row.split("`")[1] for row in first}) == len(first)  # each stage changed what it digests
